//! What the numbers were measured on: cores, memory, CPU, kernel, load, server versions.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_mib: u64,
    pub cpu: String,
    pub kernel: String,
    pub load_avg_start: String,
    pub load_avg_end: String,
    pub postgres: String,
    pub redis: String,
    /// How the services' PostgreSQL links were carried (see
    /// [`crate::system::System::database_links`]); empty until a system starts.
    pub database_links: String,
}

impl Machine {
    pub fn detect() -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_mib: kib_field(&meminfo, "MemTotal:").map_or(0, |k| k / 1024),
            cpu: cpuinfo
                .lines()
                .find_map(|l| {
                    l.strip_prefix("model name")
                        .and_then(|r| r.split_once(':'))
                        .map(|(_, v)| v.trim().to_owned())
                })
                .unwrap_or_else(|| "unknown".into()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            load_avg_start: load_avg(),
            load_avg_end: String::new(),
            postgres: String::new(),
            redis: String::new(),
            database_links: String::new(),
        }
    }
}

/// The 1, 5 and 15 minute load averages: the machine is shared, so say how busy it was.
pub fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A `Name:   1234 kB` field of a /proc file, in KiB.
pub fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kib_fields() {
        let text = "Name:\tgate\nVmHWM:\t   51234 kB\nVmRSS:\t   40000 kB\n";
        assert_eq!(kib_field(text, "VmHWM:"), Some(51_234));
        assert_eq!(kib_field(text, "VmRSS:"), Some(40_000));
        assert_eq!(kib_field(text, "VmSwap:"), None);
    }

    #[test]
    fn this_machine_has_cores_and_memory() {
        let m = Machine::detect();
        assert!(m.cores >= 1);
        assert!(m.memory_mib > 0);
    }
}
