//! The member service's integration tests, one test binary: sign-up and its limits,
//! sign-in and its throttling, client addresses, sessions, keys, top-ups and email
//! verification.

mod support;

mod addresses;
mod bad_input;
mod keys;
mod sessions;
mod signin;
mod signup;
mod signup_limits;
mod topups;
mod verification;
