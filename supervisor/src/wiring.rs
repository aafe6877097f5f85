//! How the five services are wired together: each one's environment (database role,
//! Redis, listen port, the URLs of the services it calls), built in one place so the
//! tests, the benchmark and the run command start the system the same way.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock},
};

use crate::{binaries, process::ServiceSpec, service::ServiceKind, TlsFiles};

/// How the service processes are started.
#[derive(Debug, Clone, Default)]
pub enum Launcher {
    /// Each service's own binary, `target/<profile>/<name>` (or in `PAYSAGA_BIN_DIR`).
    #[default]
    Binaries,
    /// One multi-call executable run as `<program> <args…> <service>`, as `paysaga up`
    /// runs `paysaga service order`: only that one binary has to be built.
    MultiCall { program: PathBuf, args: Vec<String> },
}

/// The addresses and settings the services are started with. Inter-service URLs are
/// separate fields so a test can point one link at a fault-injecting proxy.
#[derive(Debug, Clone)]
pub struct Wiring {
    /// Each PostgreSQL-backed service's own role URL.
    pub database_urls: BTreeMap<ServiceKind, String>,
    pub redis_url: String,
    /// Key prefix for everything the gate stores in Redis.
    pub redis_prefix: String,
    pub ports: BTreeMap<ServiceKind, u16>,
    /// Several instances of every service: each instance's own ports, with `ports` then
    /// the load balancer's (every URL above names it). Empty: one process of each
    /// service, listening on `ports` itself.
    pub instances: Vec<BTreeMap<ServiceKind, u16>>,
    /// `ORDER_URL` as the gate sees it.
    pub gate_order_url: String,
    /// `ORDER_URL` as the orchestrator sees it.
    pub orchestrator_order_url: String,
    /// `ACCOUNT_URL` as the orchestrator sees it.
    pub orchestrator_account_url: String,
    /// `RUST_LOG` for every service.
    pub rust_log: String,
    /// `LOG_FORMAT` for every service.
    pub log_format: String,
    /// Extra variables for every service (applied before the per-service ones).
    pub common_env: Vec<(String, String)>,
    /// Extra variables for one service; these win over everything else.
    pub service_env: Vec<(ServiceKind, String, String)>,
    /// What runs each service.
    pub launcher: Launcher,
    /// `MEMBER_SIGNING_KEYS` of the member service: a key made for this system, so no
    /// service trusts the development buyer key; every other service verifies buyer
    /// tokens against the member service's key set.
    pub member_signing_keys: String,
    /// Every service serves TLS with this certificate (`TLS_CERT_FILE`, `TLS_KEY_FILE`)
    /// and trusts its CA (`TLS_CA_FILE`); every URL here is then `https`. Set it with
    /// [`Wiring::serve_tls`].
    pub tls: Option<TlsFiles>,
}

/// The port of the metrics listener (`METRICS_ADDR`) of the service instance listening
/// on `listen`: on a service's default port (8081-8085) the same port plus 1000
/// (9081-9085, what deploy/prometheus/prometheus.yml scrapes); on any other, a free port
/// reserved the first time it is asked for (bound until the service is handed its
/// socket, so no other process can take it), the same one every time after (listen
/// ports are unique in a process, so each instance has its own).
pub fn metrics_port(listen: u16) -> u16 {
    if ServiceKind::ALL.iter().any(|k| k.default_port() == listen) {
        return listen + 1000;
    }
    static PORTS: OnceLock<Mutex<BTreeMap<u16, u16>>> = OnceLock::new();
    let mut ports = PORTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    *ports.entry(listen).or_insert_with(|| {
        crate::process::reserve_port(0).expect("a free port on 127.0.0.1 for the metrics listener")
    })
}

/// A fresh Ed25519 signing key, base64 of its seed.
pub fn fresh_signing_key() -> String {
    let seed: [u8; 32] = rand::random();
    paysaga_common::keys::encode_signing_key(&ed25519_dalek::SigningKey::from_bytes(&seed))
}

impl Wiring {
    /// Services on the given ports, calling each other directly.
    pub fn direct(
        database_urls: BTreeMap<ServiceKind, String>,
        redis_url: impl Into<String>,
        redis_prefix: impl Into<String>,
        ports: BTreeMap<ServiceKind, u16>,
    ) -> Self {
        let mut this = Self {
            gate_order_url: String::new(),
            orchestrator_order_url: String::new(),
            orchestrator_account_url: String::new(),
            database_urls,
            redis_url: redis_url.into(),
            redis_prefix: redis_prefix.into(),
            ports,
            instances: Vec::new(),
            rust_log: "info".into(),
            log_format: "json".into(),
            common_env: Vec::new(),
            service_env: Vec::new(),
            launcher: Launcher::default(),
            member_signing_keys: fresh_signing_key(),
            tls: None,
        };
        this.call_directly();
        this
    }

    /// Every service serves TLS with `tls`'s certificate and trusts its CA; the URLs
    /// between them become `https` (set a link through a proxy after this).
    pub fn serve_tls(&mut self, tls: TlsFiles) {
        self.tls = Some(tls);
        self.call_directly();
    }

    /// The links that can go through a proxy, straight to the service.
    fn call_directly(&mut self) {
        self.gate_order_url = self.url(ServiceKind::Order);
        self.orchestrator_order_url = self.url(ServiceKind::Order);
        self.orchestrator_account_url = self.url(ServiceKind::Account);
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    pub fn port(&self, kind: ServiceKind) -> u16 {
        self.ports
            .get(&kind)
            .copied()
            .unwrap_or(kind.default_port())
    }

    pub fn url(&self, kind: ServiceKind) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.port(kind))
    }

    /// Where `kind` serves `/metrics` (its own listener, `METRICS_ADDR`; the API's
    /// listener serves none). With several instances, the first instance's.
    pub fn metrics_url(&self, kind: ServiceKind) -> String {
        let listen = self
            .instance_port(kind, 0)
            .unwrap_or_else(|| self.port(kind));
        format!("{}://127.0.0.1:{}", self.scheme(), metrics_port(listen))
    }

    /// Where instance `index` of `kind` serves `/metrics`, if there are several.
    pub fn instance_metrics_url(&self, kind: ServiceKind, index: usize) -> Option<String> {
        let listen = self.instance_port(kind, index)?;
        Some(format!(
            "{}://127.0.0.1:{}",
            self.scheme(),
            metrics_port(listen)
        ))
    }

    /// The complete environment of one service.
    pub fn env(&self, kind: ServiceKind) -> Vec<(String, String)> {
        self.env_listening(kind, self.port(kind))
    }

    /// The port instance `index` of `kind` listens on, if there are several instances.
    pub fn instance_port(&self, kind: ServiceKind, index: usize) -> Option<u16> {
        self.instances.get(index)?.get(&kind).copied()
    }

    /// The environment of one service listening on `listen` (one of its instances).
    fn env_listening(&self, kind: ServiceKind, listen: u16) -> Vec<(String, String)> {
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        let mut set = |k: &str, v: String| {
            env.insert(k.to_owned(), v);
        };
        if let Ok(path) = std::env::var("PATH") {
            set("PATH", path);
        }
        // Backtraces for panics, not for every error a service returns from main: the
        // first line of a start-up error is what a failure message should show.
        set("RUST_BACKTRACE", "1".into());
        set("RUST_LIB_BACKTRACE", "0".into());
        // A system wired here is a development one: unset keys are the development keys
        // and the roles have the development password, which only development mode
        // accepts. The member signing key is still a fresh one (below).
        set(paysaga_common::config::DEV_KEYS_VAR, "1".into());
        set("RUST_LOG", self.rust_log.clone());
        set("LOG_FORMAT", self.log_format.clone());
        set("LISTEN_ADDR", format!("127.0.0.1:{listen}"));
        set(
            "METRICS_ADDR",
            format!("127.0.0.1:{}", metrics_port(listen)),
        );
        for k in ServiceKind::ALL {
            set(
                &format!("{}_URL", k.name().to_ascii_uppercase()),
                self.url(k),
            );
        }
        if let Some(db) = self.database_urls.get(&kind) {
            set("DATABASE_URL", db.clone());
        }
        set("REDIS_URL", self.redis_url.clone());
        if let Some(tls) = &self.tls {
            use paysaga_common::tls::{CA_FILE_VAR, CERT_FILE_VAR, KEY_FILE_VAR};
            set(CERT_FILE_VAR, tls.cert.display().to_string());
            set(KEY_FILE_VAR, tls.key.display().to_string());
            set(CA_FILE_VAR, tls.ca.display().to_string());
        }
        set("REDIS_PREFIX", self.redis_prefix.clone());
        set(
            "MEMBER_JWKS_URL",
            format!(
                "{}{}",
                self.url(ServiceKind::Member),
                paysaga_common::jwks::JWKS_PATH
            ),
        );
        match kind {
            ServiceKind::Gate => set("ORDER_URL", self.gate_order_url.clone()),
            ServiceKind::Orchestrator => {
                set("ORDER_URL", self.orchestrator_order_url.clone());
                set("ACCOUNT_URL", self.orchestrator_account_url.clone());
            }
            ServiceKind::Member => {
                set("MEMBER_SIGNING_KEYS", self.member_signing_keys.clone());
                // The demo, the tests and the benchmark seed many buyers at once (one
                // Argon2 hash for all of them), and their buyers' tokens outlive the
                // longest soak.
                set("MEMBER_BULK_SIGNUP", "1".into());
                set("ACCESS_TOKEN_TTL_SECS", "14400".into());
                // Their buyers sign up one by one too (the demo's 200 at once), all from
                // this machine's one address: the sign-up limits are raised out of their
                // way.
                set("SIGNUP_MAX_PER_ADDRESS", "1000000".into());
                set("SIGNUP_MAX_TOTAL", "1000000".into());
            }
            ServiceKind::Account | ServiceKind::Order => {}
        }
        for (k, v) in &self.common_env {
            set(k, v.clone());
        }
        for (s, k, v) in &self.service_env {
            if *s == kind {
                set(k, v.clone());
            }
        }
        env.into_iter().collect()
    }

    /// The start specification of one service, logging into `log_dir`.
    pub fn spec(&self, kind: ServiceKind, log_dir: &Path) -> anyhow::Result<ServiceSpec> {
        self.spec_listening(kind, None, self.port(kind), log_dir)
    }

    /// The start specification of instance `index` of `kind` (see `instances`).
    pub fn instance_spec(
        &self,
        kind: ServiceKind,
        index: usize,
        log_dir: &Path,
    ) -> anyhow::Result<ServiceSpec> {
        let port = self
            .instance_port(kind, index)
            .ok_or_else(|| anyhow::anyhow!("{kind} has no instance {index}"))?;
        self.spec_listening(kind, Some(index), port, log_dir)
    }

    fn spec_listening(
        &self,
        kind: ServiceKind,
        instance: Option<usize>,
        port: u16,
        log_dir: &Path,
    ) -> anyhow::Result<ServiceSpec> {
        let (program, args) = match &self.launcher {
            Launcher::Binaries => (binaries::binary(kind.name())?, Vec::new()),
            Launcher::MultiCall { program, args } => {
                let mut args = args.clone();
                args.push(kind.name().to_owned());
                (program.clone(), args)
            }
        };
        let spec = ServiceSpec {
            kind,
            instance,
            program,
            args,
            port,
            env: self.env_listening(kind, port),
            log_path: PathBuf::new(),
        };
        Ok(ServiceSpec {
            log_path: log_dir.join(format!("{}.log", spec.label())),
            ..spec
        })
    }

    /// Start specifications for all five services (every instance of each, when there
    /// are several), logging into `log_dir`.
    pub fn specs(&self, log_dir: &Path) -> anyhow::Result<Vec<ServiceSpec>> {
        if self.instances.is_empty() {
            return ServiceKind::ALL
                .iter()
                .map(|&kind| self.spec(kind, log_dir))
                .collect();
        }
        let mut specs = Vec::new();
        for kind in ServiceKind::ALL {
            for index in 0..self.instances.len() {
                specs.push(self.instance_spec(kind, index, log_dir)?);
            }
        }
        Ok(specs)
    }
}
