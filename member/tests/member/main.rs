//! The member service's integration tests, one test binary: sign-up, sign-in, sessions, keys and top-ups.

mod support;

mod bad_input;
mod keys;
mod sessions;
mod signin;
mod signup;
mod topups;
