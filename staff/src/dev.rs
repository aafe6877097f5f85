//! DEVELOPMENT ONLY: the staff admin a development system (`paysaga up`, the test
//! harness: `PAYSAGA_DEV_KEYS=1`) creates at start-up. Its password and TOTP secret are
//! public, like the development keys; a system outside development mode never creates it.

/// The development admin's email.
pub const ADMIN_EMAIL: &str = "admin@paysaga.dev";
/// Its password (public).
pub const ADMIN_PASSWORD: &str = "orbit-plum-canyon-dev";
/// Its TOTP secret, base32 (public): any authenticator app, or
/// [`crate::totp::code_at`], gives its codes.
pub const ADMIN_TOTP_SECRET: &str = "PAYSAGADEVELOPMENTONLYTOTPSECRET";

/// The development admin's current TOTP code.
pub fn admin_code_now() -> String {
    let secret = crate::totp::from_base32(ADMIN_TOTP_SECRET).expect("valid base32");
    crate::totp::code_at(&secret, chrono::Utc::now().timestamp() as u64).expect("a code")
}

/// The `otpauth://` URL of the development admin's second factor.
pub fn admin_otpauth_url() -> String {
    let secret = crate::totp::from_base32(ADMIN_TOTP_SECRET).expect("valid base32");
    crate::totp::otpauth_url(&secret, ADMIN_EMAIL).expect("a url")
}
