//! The `paysaga` command's tests: the run command and the operator tool against real processes.

mod bootstrap;
mod run_command;
