//! The harness's own promises: a service can be stopped (SIGTERM or SIGKILL) and started
//! again on the same port, its log keeps every start, and dropping the stack leaves no
//! process behind.

use std::time::Duration;

use nix::{sys::signal, unistd::Pid};
use paysaga_e2e::{binaries, ServiceKind, Stack, StackOptions, Stop};

fn alive(pid: u32) -> bool {
    // Signal 0 checks existence; a reaped child no longer exists.
    signal::kill(Pid::from_raw(pid as i32), None).is_ok()
}

#[tokio::test]
async fn services_stop_restart_and_never_outlive_the_stack() -> anyhow::Result<()> {
    let mut stack =
        Stack::start(StackOptions::new("harness").only(&[ServiceKind::Account])).await?;
    let url = stack.url(ServiceKind::Account);
    let http = reqwest::Client::new();
    let first = stack.pid(ServiceKind::Account).expect("running");

    stack.restart(ServiceKind::Account, Stop::Term).await?;
    let second = stack.pid(ServiceKind::Account).expect("running");
    assert_ne!(first, second);
    assert!(!alive(first), "the stopped process is gone");
    assert!(
        http.get(format!("{url}/readyz"))
            .send()
            .await?
            .status()
            .is_success(),
        "same port after restart"
    );

    stack.stop(ServiceKind::Account, Stop::Kill).await?;
    assert!(!alive(second));
    assert!(http
        .get(format!("{url}/readyz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .is_err());
    stack.start_service(ServiceKind::Account).await?;
    let third = stack.pid(ServiceKind::Account).expect("running");
    assert_eq!(stack.starts(ServiceKind::Account), Some(3));

    let log = stack
        .services
        .process(ServiceKind::Account)
        .map(|p| p.log_path().to_path_buf())
        .expect("log");
    let text = std::fs::read_to_string(&log)?;
    assert_eq!(
        text.matches("paysaga supervisor: start #").count(),
        3,
        "{}",
        log.display()
    );

    drop(stack);
    assert!(
        !alive(third),
        "dropping the stack kills and reaps its processes"
    );
    Ok(())
}

#[test]
fn a_missing_binary_says_how_to_build_it() {
    let err = binaries::binary("no-such-service").expect_err("no such binary");
    assert!(err.to_string().contains("cargo build"), "{err}");
    assert!(err.to_string().contains("--workspace --bins"), "{err}");
}
