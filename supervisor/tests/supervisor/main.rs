//! The supervisor's own tests against real processes (the services it runs are tested
//! end to end by `paysaga-e2e` and the run command's tests).

mod private_redis;
