//! Everything a run measured, written as JSON for machines and a markdown table for
//! people (the table published in docs/benchmark.md).

use std::{fmt::Write as _, path::PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::{
    cli::Settings,
    error::Result,
    machine::Machine,
    memory::ProcessMemory,
    stats::{self, RunSummary},
};

/// A single number worth reporting on its own (requests that reached order, commits per
/// payment, bytes per pass, ...).
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub scenario: String,
    pub name: String,
    pub value: f64,
    pub unit: String,
}

/// A paysaga figure divided by the machine's limit for the same kind of work.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub name: String,
    pub measured: f64,
    pub ceiling: f64,
    pub ceiling_name: String,
    pub ratio: f64,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    AtLeast,
    AtMost,
}

/// One of the benchmark's targets, measured.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub name: String,
    pub measured: f64,
    pub bound: Bound,
    pub threshold: f64,
    pub met: bool,
    pub detail: String,
}

impl Target {
    pub fn new(
        name: impl Into<String>,
        measured: f64,
        bound: Bound,
        threshold: f64,
        detail: impl Into<String>,
    ) -> Self {
        let met = measured.is_finite()
            && match bound {
                Bound::AtLeast => measured >= threshold,
                Bound::AtMost => measured <= threshold,
            };
        Self {
            name: name.into(),
            measured,
            bound,
            threshold,
            met,
            detail: detail.into(),
        }
    }
}

/// An invariant checked in PostgreSQL (or Redis) at the end of a scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Invariant {
    pub scenario: String,
    pub check: String,
    pub ok: bool,
    pub detail: String,
}

/// One concurrency level of the checkout part: whole checkouts (reserve + pay until
/// terminal), each timed as one operation, as the peers count them.
#[derive(Debug, Clone, Serialize)]
pub struct CheckoutRow {
    pub clients: usize,
    pub buyers: u64,
    pub completed: u64,
    /// Payments that ended FAILED or REFUNDED.
    pub failed: u64,
    /// Every other outcome (`sold_out` included: with ample stock it is unexpected), by label.
    pub errors: std::collections::BTreeMap<String, u64>,
    pub elapsed_s: f64,
    /// Completed checkouts ÷ the wall time of the phase.
    pub checkouts_per_s: f64,
    /// Latency of every operation of the phase, whatever its outcome.
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Δ xact_commit over the phase (settled) ÷ completed, services' background included.
    pub commits_per_checkout_raw: f64,
    /// The same with the idle background rate subtracted.
    pub commits_per_checkout: f64,
    pub background_commits_per_s: f64,
    pub status_polls_per_checkout: f64,
    /// CPU milliseconds per completed checkout, by process, then `postgres`, `bench`,
    /// `others` (the rest of the machine) and `machine` (all of it).
    pub cpu_ms_per_checkout: Vec<(String, f64)>,
    pub invariants_hold: bool,
}

/// Memory of one process (or Redis) in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRow {
    pub phase: String,
    #[serde(flatten)]
    pub process: ProcessMemory,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub command: String,
    pub machine: Machine,
    pub settings: Settings,
    pub runs: Vec<RunSummary>,
    pub figures: Vec<Figure>,
    pub ratios: Vec<Ratio>,
    pub targets: Vec<Target>,
    pub memory: Vec<MemoryRow>,
    pub checkout: Vec<CheckoutRow>,
    pub invariants: Vec<Invariant>,
    /// Tables a part composes itself (title, markdown), printed as they are.
    pub tables: Vec<(String, String)>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn new(settings: Settings, machine: Machine) -> Self {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        Self {
            started_at: Utc::now(),
            finished_at: None,
            command,
            machine,
            settings,
            runs: Vec::new(),
            figures: Vec::new(),
            ratios: Vec::new(),
            targets: Vec::new(),
            memory: Vec::new(),
            checkout: Vec::new(),
            invariants: Vec::new(),
            tables: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn run(&self, name: &str) -> Option<&RunSummary> {
        self.runs.iter().find(|r| r.name == name)
    }

    pub fn figure(&mut self, scenario: &str, name: &str, value: f64, unit: &str) {
        self.figures.push(Figure {
            scenario: scenario.into(),
            name: name.into(),
            value,
            unit: unit.into(),
        });
    }

    pub fn ratio(&mut self, name: &str, measured: f64, ceiling_name: &str, ceiling: f64) {
        let ratio = if ceiling > 0.0 {
            measured / ceiling
        } else {
            f64::NAN
        };
        self.ratios.push(Ratio {
            name: name.into(),
            measured,
            ceiling,
            ceiling_name: ceiling_name.into(),
            ratio,
        });
    }

    pub fn invariant(&mut self, scenario: &str, check: &str, ok: bool, detail: impl Into<String>) {
        self.invariants.push(Invariant {
            scenario: scenario.into(),
            check: check.into(),
            ok,
            detail: detail.into(),
        });
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Every invariant held and no load phase saw an unexpected answer.
    pub fn all_invariants_hold(&self) -> bool {
        self.invariants.iter().all(|i| i.ok)
    }

    /// Writes `<out_dir>/<timestamp>.json` and `.md`; returns the JSON path.
    pub fn write(&self) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.settings.out_dir)?;
        let stem = self.started_at.format("%Y%m%dT%H%M%SZ").to_string();
        let json = self.settings.out_dir.join(format!("{stem}.json"));
        std::fs::write(&json, serde_json::to_vec_pretty(self)?)?;
        std::fs::write(
            self.settings.out_dir.join(format!("{stem}.md")),
            self.markdown(),
        )?;
        Ok(json)
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let m = &self.machine;
        let _ = writeln!(
            md,
            "Run {} (UTC), command `{}`",
            self.started_at.format("%Y-%m-%d %H:%M"),
            self.command
        );
        let _ = writeln!(
            md,
            "\nMachine: {} cores ({}), {} MiB memory, Linux {}; load average {} at start, {} at end; {}; Redis {}.",
            m.cores, m.cpu, m.memory_mib, m.kernel, m.load_avg_start, m.load_avg_end, m.postgres, m.redis
        );
        if !m.database_links.is_empty() {
            let _ = writeln!(
                md,
                "The services' PostgreSQL links once started (read from `pg_stat_ssl`): {}.",
                m.database_links
            );
        }
        let s = &self.settings;
        let _ = writeln!(
            md,
            "Settings: {} concurrent clients, drop of {} units for {} buyers ({} drops with the gate), {} s throughput phases, {} PostgreSQL connections in the commit loop{}.",
            s.concurrency,
            s.units,
            s.buyers,
            s.drops,
            s.phase.as_secs(),
            s.pg_connections,
            if s.quick { ", --quick" } else { "" }
        );

        if s.runs(crate::cli::Scenario::Checkout) {
            let levels: Vec<String> = s.checkout_clients.iter().map(|c| c.to_string()).collect();
            let _ = writeln!(
                md,
                "Checkout part: {} buyers per level, at {} clients.",
                s.checkout_buyers,
                levels.join(", ")
            );
        }
        for (title, table) in &self.tables {
            let _ = write!(md, "\n### {title}\n\n{table}");
        }
        md.push_str("\n### Load phases\n\n");
        md.push_str(&stats::markdown_table(&self.runs));

        section(
            &mut md,
            "\n### Figures\n\n| scenario | figure | value |\n|---|---|---:|\n",
            &self.figures,
            |f| {
                format!(
                    "| {} | {} | {} {} |",
                    f.scenario,
                    f.name,
                    fmt_num(f.value),
                    f.unit
                )
            },
        );
        section(
            &mut md,
            "\n### Ratios to the machine's limits\n\n| paysaga figure | value | ceiling | ceiling value | ratio |\n|---|---:|---|---:|---:|\n",
            &self.ratios,
            |r| {
                format!(
                    "| {} | {} | {} | {} | {:.2} |",
                    r.name,
                    fmt_num(r.measured),
                    r.ceiling_name,
                    fmt_num(r.ceiling),
                    r.ratio
                )
            },
        );
        section(
            &mut md,
            "\n### Targets\n\n| target | measured | required | met | how |\n|---|---:|---:|---|---|\n",
            &self.targets,
            |t| {
                let op = if t.bound == Bound::AtLeast {
                    "≥"
                } else {
                    "≤"
                };
                format!(
                    "| {} | {} | {op} {} | {} | {} |",
                    t.name,
                    fmt_num(t.measured),
                    fmt_num(t.threshold),
                    if t.met { "**met**" } else { "**not met**" },
                    t.detail
                )
            },
        );
        if !self.checkout.is_empty() {
            md.push_str(
                "\n### Checkout: reserve + pay until terminal, one timed operation per buyer\n\n",
            );
            md.push_str(&checkout_table(&self.checkout));
        }
        section(
            &mut md,
            "\n### Memory\n\n| phase | process | peak RSS (sampled) | RSS at end | VmHWM |\n|---|---|---:|---:|---:|\n",
            &self.memory,
            |row| {
                let p = &row.process;
                format!(
                    "| {} | {} | {:.1} MiB | {:.1} MiB | {:.1} MiB |",
                    row.phase,
                    p.name,
                    p.peak_rss_kib as f64 / 1024.0,
                    p.end_rss_kib as f64 / 1024.0,
                    p.hwm_kib as f64 / 1024.0
                )
            },
        );
        section(
            &mut md,
            "\n### Invariants checked in PostgreSQL\n\n| scenario | check | holds | detail |\n|---|---|---|---|\n",
            &self.invariants,
            |i| {
                format!(
                    "| {} | {} | {} | {} |",
                    i.scenario,
                    i.check,
                    if i.ok { "yes" } else { "**NO**" },
                    i.detail
                )
            },
        );
        if !self.notes.is_empty() {
            md.push_str("\n### Notes\n\n");
            for n in &self.notes {
                let _ = writeln!(md, "- {n}");
            }
        }
        md
    }
}

/// The checkout levels as one markdown table: the peers' columns first (checkouts/s,
/// p50/p95/p99), then what each checkout cost in commits and CPU by process.
pub fn checkout_table(rows: &[CheckoutRow]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let cpu_names: Vec<&str> = first
        .cpu_ms_per_checkout
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    let mut md = String::from(
        "| clients | buyers | completed | failed | errors | checkouts/s | p50 | p95 | p99 | max | commits/checkout net of background (raw) | polls/checkout |",
    );
    for n in &cpu_names {
        let _ = write!(md, " CPU ms/checkout: {n} |");
    }
    md.push_str(" invariants |\n|");
    md.push_str(&"---:|".repeat(12 + cpu_names.len()));
    md.push_str("---|\n");
    for r in rows {
        let errors = if r.errors.is_empty() {
            "0".to_owned()
        } else {
            r.errors
                .iter()
                .map(|(k, n)| format!("{k} ×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            md,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {:.2} ({:.2}) | {:.2} |",
            r.clients,
            r.buyers,
            r.completed,
            r.failed,
            errors,
            r.checkouts_per_s,
            stats::human_us(r.p50_us),
            stats::human_us(r.p95_us),
            stats::human_us(r.p99_us),
            stats::human_us(r.max_us),
            r.commits_per_checkout,
            r.commits_per_checkout_raw,
            r.status_polls_per_checkout
        );
        for n in &cpu_names {
            let v = r
                .cpu_ms_per_checkout
                .iter()
                .find(|(m, _)| m == n)
                .map_or(f64::NAN, |(_, v)| *v);
            let _ = write!(md, " {} |", fmt_ms(v));
        }
        let _ = writeln!(
            md,
            " {} |",
            if r.invariants_hold {
                "hold"
            } else {
                "**BROKEN**"
            }
        );
    }
    md
}

fn fmt_ms(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "n/a".into()
    }
}

/// Appends `head` (a title and a table's header) and one line per row, when there are rows.
fn section<T>(md: &mut String, head: &str, rows: &[T], line: impl Fn(&T) -> String) {
    if rows.is_empty() {
        return;
    }
    md.push_str(head);
    for row in rows {
        md.push_str(&line(row));
        md.push('\n');
    }
}

fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v.fract() == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_compare_in_the_right_direction() {
        assert!(Target::new("a", 0.6, Bound::AtLeast, 0.5, "").met);
        assert!(!Target::new("b", 0.4, Bound::AtLeast, 0.5, "").met);
        assert!(Target::new("c", 100.0, Bound::AtMost, 105.0, "").met);
        assert!(!Target::new("d", 106.0, Bound::AtMost, 105.0, "").met);
        assert!(!Target::new("nan is never met", f64::NAN, Bound::AtMost, 1.0, "").met);
    }

    #[test]
    fn checkout_table_has_a_column_per_process_and_a_row_per_level() {
        let row = |clients, hold| CheckoutRow {
            clients,
            buyers: 3_000,
            completed: 2_999,
            failed: 0,
            errors: [("error:503:UNAVAILABLE".to_owned(), 1)]
                .into_iter()
                .collect(),
            elapsed_s: 10.0,
            checkouts_per_s: 299.9,
            p50_us: 100_000,
            p95_us: 200_000,
            p99_us: 300_000,
            max_us: 400_000,
            commits_per_checkout_raw: 9.5,
            commits_per_checkout: 9.1,
            background_commits_per_s: 2.0,
            status_polls_per_checkout: 0.0,
            cpu_ms_per_checkout: vec![("order".into(), 1.5), ("machine".into(), 6.0)],
            invariants_hold: hold,
        };
        let md = checkout_table(&[row(64, true), row(256, false)]);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4, "{md}");
        let columns = |l: &str| l.matches('|').count();
        assert!(
            lines.iter().all(|l| columns(l) == columns(lines[0])),
            "{md}"
        );
        assert!(lines[0].contains("CPU ms/checkout: order"), "{md}");
        assert!(
            lines[2].starts_with("| 64 | 3000 | 2999 | 0 | error:503:UNAVAILABLE ×1 | 300 |"),
            "{md}"
        );
        assert!(lines[2].ends_with("| 1.50 | 6.00 | hold |"), "{md}");
        assert!(lines[3].contains("**BROKEN**"), "{md}");
        assert_eq!(checkout_table(&[]), "");
    }

    #[test]
    fn numbers_print_briefly() {
        assert_eq!(fmt_num(12345.678), "12346");
        assert_eq!(fmt_num(0.4567), "0.46");
        assert_eq!(fmt_num(f64::NAN), "n/a");
    }
}
