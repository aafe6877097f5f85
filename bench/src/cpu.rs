//! Where the CPU went during a phase: user + system time of each service process, of all
//! PostgreSQL backends, of this benchmark, and of the whole machine (which is shared, so
//! "everything else" is reported too). A profile by process, cheap enough to always run.

use serde::Serialize;

/// Kernel clock ticks per second (`getconf CLK_TCK`; 100 on Linux x86_64).
const TICKS_PER_S: f64 = 100.0;

/// utime + stime of `pid`, in ticks.
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after its closing parenthesis do not.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Ticks of every process whose command is `postgres` (the server and all backends).
fn postgres_ticks() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .filter_map(process_ticks)
        .sum()
}

/// Busy ticks of the whole machine (all cores), from /proc/stat.
fn machine_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let v: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    v.iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum()
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    processes: Vec<(String, u32, u64)>,
    postgres: u64,
    bench: u64,
    machine: u64,
}

pub fn snapshot(processes: &[(String, u32)]) -> Snapshot {
    Snapshot {
        processes: processes
            .iter()
            .map(|(n, p)| (n.clone(), *p, process_ticks(*p).unwrap_or(0)))
            .collect(),
        postgres: postgres_ticks(),
        bench: process_ticks(std::process::id()).unwrap_or(0),
        machine: machine_busy_ticks(),
    }
}

/// CPU seconds spent between two snapshots, by process.
#[derive(Debug, Clone, Serialize)]
pub struct CpuUse {
    pub by_process: Vec<(String, f64)>,
    pub postgres_s: f64,
    pub bench_s: f64,
    pub machine_s: f64,
    /// Machine busy time not accounted to the processes above: other work on the machine.
    pub others_s: f64,
}

pub fn between(a: &Snapshot, b: &Snapshot) -> CpuUse {
    let s = |t: u64| t as f64 / TICKS_PER_S;
    let by_process: Vec<(String, f64)> = b
        .processes
        .iter()
        .map(|(name, pid, after)| {
            let before = a
                .processes
                .iter()
                .find(|(_, p, _)| p == pid)
                .map_or(0, |(_, _, t)| *t);
            (name.clone(), s(after.saturating_sub(before)))
        })
        .collect();
    let ours: f64 = by_process.iter().map(|(_, v)| v).sum::<f64>()
        + s(b.postgres.saturating_sub(a.postgres))
        + s(b.bench.saturating_sub(a.bench));
    let machine_s = s(b.machine.saturating_sub(a.machine));
    CpuUse {
        by_process,
        postgres_s: s(b.postgres.saturating_sub(a.postgres)),
        bench_s: s(b.bench.saturating_sub(a.bench)),
        machine_s,
        others_s: (machine_s - ours).max(0.0),
    }
}

impl CpuUse {
    /// Records CPU milliseconds per operation, by process, as figures of `scenario`.
    pub fn record(&self, report: &mut crate::report::Report, scenario: &str, ops: u64, what: &str) {
        let per = |s: f64| s * 1_000.0 / ops.max(1) as f64;
        for (name, s) in &self.by_process {
            report.figure(scenario, &format!("CPU per {what}: {name}"), per(*s), "ms");
        }
        report.figure(
            scenario,
            &format!("CPU per {what}: PostgreSQL (all backends)"),
            per(self.postgres_s),
            "ms",
        );
        report.figure(
            scenario,
            &format!("CPU per {what}: the benchmark's clients"),
            per(self.bench_s),
            "ms",
        );
        report.figure(
            scenario,
            &format!("CPU per {what}: everything else on the machine"),
            per(self.others_s),
            "ms",
        );
        report.figure(
            scenario,
            &format!("CPU per {what}: whole machine"),
            per(self.machine_s),
            "ms",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_burns_measurable_cpu() {
        let me = vec![("self".to_owned(), std::process::id())];
        let a = snapshot(&me);
        let start_ticks = process_ticks(std::process::id()).unwrap();
        // Spin until the kernel has charged us 100 ms of CPU (wall time varies on a
        // shared machine; CPU time is what is being accounted).
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut x = 0u64;
        while process_ticks(std::process::id()).unwrap() < start_ticks + 10
            && std::time::Instant::now() < give_up
        {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let used = between(&a, &snapshot(&me));
        assert!(used.by_process[0].1 >= 0.1, "{used:?}");
        assert!(used.bench_s >= 0.1, "{used:?}");
        assert!(used.machine_s > 0.0, "{used:?}");
    }
}
