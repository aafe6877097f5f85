//! TLS, with rustls only: the certificate a service's listeners present
//! (`TLS_CERT_FILE`, `TLS_KEY_FILE`: [`ServerTls`]) and the roots its outbound
//! connections trust beside the platform's (`TLS_CA_FILE`: [`Trust`]).
//!
//! Both are read with the rest of a service's settings, so a missing or unreadable file
//! stops the service before it serves, with the variable named.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};

use crate::config::ConfigError;

/// `TLS_CERT_FILE`: the listener's certificate chain (PEM, the server's certificate first).
pub const CERT_FILE_VAR: &str = "TLS_CERT_FILE";
/// `TLS_KEY_FILE`: the certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
pub const KEY_FILE_VAR: &str = "TLS_KEY_FILE";
/// `TLS_CA_FILE`: extra roots (PEM) the service's outbound calls trust beside the
/// platform's: a private CA, or a test's.
pub const CA_FILE_VAR: &str = "TLS_CA_FILE";

/// A certificate, key or bundle that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("no PEM certificate in it")]
    NoCertificate,
    #[error("not PEM certificates: {0}")]
    Certificates(String),
    #[error("no usable PEM private key in it: {0}")]
    Key(String),
    #[error("the key does not go with the certificate, or neither is usable: {0}")]
    Mismatch(String),
    #[error("reading {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_owned(),
        error,
    })
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Certificates(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    Ok(certs)
}

/// An environment variable naming a file, if set and not blank.
fn path_var(name: &str) -> Option<PathBuf> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn invalid(name: &str, path: &Path, error: impl std::fmt::Display) -> ConfigError {
    ConfigError {
        name: name.to_owned(),
        value: path.display().to_string(),
        reason: error.to_string(),
    }
}

/// What a listener serves TLS with: the certificate chain and key, loaded and checked
/// to go together. HTTP/1.1 only (ALPN `http/1.1`), TLS 1.2 and 1.3.
#[derive(Clone)]
pub struct ServerTls {
    /// Where the certificate came from, for logs (a test's PEM: `None`).
    cert_file: Option<PathBuf>,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// `TLS_CERT_FILE` and `TLS_KEY_FILE`: both (TLS on every listener of the service),
    /// or neither (plain HTTP). One without the other is refused, as is a file that
    /// cannot be read or a key that does not go with the certificate.
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        Self::from_paths(path_var(CERT_FILE_VAR), path_var(KEY_FILE_VAR))
    }

    /// [`ServerTls::from_env`] on the two settings as read.
    pub fn from_paths(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Option<Self>, ConfigError> {
        let (cert, key) = match (cert, key) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (cert, key),
            (Some(cert), None) => {
                return Err(invalid(
                    CERT_FILE_VAR,
                    &cert,
                    format!("{KEY_FILE_VAR} must be set with it (both for TLS, or neither)"),
                ))
            }
            (None, Some(key)) => {
                return Err(invalid(
                    KEY_FILE_VAR,
                    &key,
                    format!("{CERT_FILE_VAR} must be set with it (both for TLS, or neither)"),
                ))
            }
        };
        let cert_pem = read(&cert).map_err(|e| invalid(CERT_FILE_VAR, &cert, e))?;
        let key_pem = read(&key).map_err(|e| invalid(KEY_FILE_VAR, &key, e))?;
        let mut tls = Self::from_pem(&cert_pem, &key_pem).map_err(|e| match e {
            TlsError::Key(_) => invalid(KEY_FILE_VAR, &key, e),
            e => invalid(CERT_FILE_VAR, &cert, e),
        })?;
        tls.cert_file = Some(cert);
        Ok(Some(tls))
    }

    /// From PEM text: the chain (server certificate first) and its private key.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        let chain = certificates(cert_pem)?;
        let key =
            PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Key(e.to_string()))?;
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Mismatch(e.to_string()))?;
        // The accept loop speaks HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            cert_file: None,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// The handshake side of a connection.
    pub fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }

    /// The certificate file it was loaded from, if any.
    pub fn cert_file(&self) -> Option<&Path> {
        self.cert_file.as_deref()
    }
}

/// The roots outbound TLS connections trust: always the platform's (the system's
/// certificate store), plus the extra ones configured here, for a private CA. Default:
/// the platform's only.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    /// Where the extra roots came from, for logs.
    file: Option<PathBuf>,
    extra: Arc<[reqwest::Certificate]>,
    /// The extra roots as PEM text, for clients that take them so (Redis).
    pem: Option<Arc<[u8]>>,
}

impl Trust {
    /// `TLS_CA_FILE`: extra roots for the calls between services and to the member
    /// service's key set.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_var(CA_FILE_VAR)
    }

    /// Extra roots from the PEM bundle the variable `name` names, if set.
    pub fn from_env_var(name: &str) -> Result<Self, ConfigError> {
        let Some(path) = path_var(name) else {
            return Ok(Self::default());
        };
        let pem = read(&path).map_err(|e| invalid(name, &path, e))?;
        let mut trust = Self::from_pem(&pem).map_err(|e| invalid(name, &path, e))?;
        trust.file = Some(path);
        Ok(trust)
    }

    /// Extra roots from PEM text (one certificate or more).
    pub fn from_pem(pem: &[u8]) -> Result<Self, TlsError> {
        let extra = certificates(pem)?
            .iter()
            .map(|der| reqwest::Certificate::from_der(der))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Certificates(e.to_string()))?;
        Ok(Self {
            file: None,
            extra: extra.into(),
            pem: Some(pem.into()),
        })
    }

    /// Whether roots beyond the platform's are trusted.
    pub fn has_extra_roots(&self) -> bool {
        !self.extra.is_empty()
    }

    /// The file the extra roots came from, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// What a Redis client verifies a `rediss://` server with: the extra roots when
    /// there are some (the redis crate then trusts them alone: a private CA is what a
    /// private Redis is signed by), else `None`, the platform's roots.
    pub fn redis_certificates(&self) -> Option<redis::TlsCertificates> {
        self.pem.as_ref().map(|pem| redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.to_vec()),
        })
    }

    /// A Redis client for `url`: a `rediss://` one verifies the server against
    /// [`Self::redis_certificates`].
    pub fn redis_client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        match self.redis_certificates() {
            Some(certs) if url.starts_with("rediss://") => {
                redis::Client::build_with_tls(url, certs)
            }
            _ => redis::Client::open(url),
        }
    }

    /// `builder` trusting these roots too.
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        if self.extra.is_empty() {
            builder
        } else {
            builder.tls_certs_merge(self.extra.iter().cloned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_files(dir: &Path) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("a certificate");
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&c, cert.pem()).expect("write");
        std::fs::write(&k, key.serialize_pem()).expect("write");
        (c, k)
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "paysaga-tls-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        dir
    }

    #[test]
    fn certificate_and_key_come_both_or_neither() {
        let dir = temp_dir("pair");
        let (cert, key) = pem_files(&dir);
        assert!(ServerTls::from_paths(None, None).expect("plain").is_none());
        let tls = ServerTls::from_paths(Some(cert.clone()), Some(key.clone()))
            .expect("both")
            .expect("TLS on");
        assert_eq!(tls.cert_file(), Some(cert.as_path()));

        let alone = ServerTls::from_paths(Some(cert.clone()), None).unwrap_err();
        assert_eq!(alone.name, CERT_FILE_VAR);
        assert!(alone.reason.contains("TLS_KEY_FILE must be set"), "{alone}");
        let alone = ServerTls::from_paths(None, Some(key.clone())).unwrap_err();
        assert_eq!(alone.name, KEY_FILE_VAR);
        assert!(
            alone.reason.contains("TLS_CERT_FILE must be set"),
            "{alone}"
        );

        // The certificate where the key should be, a missing file, another key.
        let wrong = ServerTls::from_paths(Some(cert.clone()), Some(cert.clone())).unwrap_err();
        assert_eq!(wrong.name, KEY_FILE_VAR, "{wrong}");
        let missing =
            ServerTls::from_paths(Some(dir.join("nothing.pem")), Some(key.clone())).unwrap_err();
        assert_eq!(missing.name, CERT_FILE_VAR, "{missing}");
        let other = temp_dir("other");
        let (_, other_key) = pem_files(&other);
        let mismatch = ServerTls::from_paths(Some(cert), Some(other_key)).unwrap_err();
        assert_eq!(mismatch.name, CERT_FILE_VAR, "{mismatch}");
        assert!(mismatch.reason.contains("does not go with"), "{mismatch}");
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(other);
    }

    #[test]
    fn extra_roots_must_be_certificates() {
        let dir = temp_dir("roots");
        let (cert, key) = pem_files(&dir);
        let trust = Trust::from_pem(&std::fs::read(&cert).expect("read")).expect("a root");
        assert!(trust.has_extra_roots());
        assert!(!Trust::default().has_extra_roots());
        assert!(matches!(
            Trust::from_pem(&std::fs::read(&key).expect("read")),
            Err(TlsError::NoCertificate)
        ));
        assert!(Trust::from_pem(b"not PEM at all").is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
