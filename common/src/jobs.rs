//! Scheduled jobs: the one quirk of tokio-cron-scheduler every service must respect.

use std::time::Duration;

/// The period to give `Job::new_repeated_async`: tokio-cron-scheduler repeats in whole
/// seconds, and a sub-second period silently never fires. Rounds up, at least 1 s.
pub fn scheduler_period(requested: Duration) -> Duration {
    Duration::from_secs(requested.as_millis().div_ceil(1000).max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_whole_seconds() {
        assert_eq!(
            scheduler_period(Duration::from_millis(200)),
            Duration::from_secs(1)
        );
        assert_eq!(scheduler_period(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(
            scheduler_period(Duration::from_millis(1000)),
            Duration::from_secs(1)
        );
        assert_eq!(
            scheduler_period(Duration::from_millis(1500)),
            Duration::from_secs(2)
        );
    }
}
