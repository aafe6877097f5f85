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
    pub invariants: Vec<Invariant>,
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
            invariants: Vec::new(),
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

        md.push_str("\n### Load phases\n\n");
        md.push_str(&stats::markdown_table(&self.runs));

        if !self.figures.is_empty() {
            md.push_str("\n### Figures\n\n| scenario | figure | value |\n|---|---|---:|\n");
            for f in &self.figures {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} {} |",
                    f.scenario,
                    f.name,
                    fmt_num(f.value),
                    f.unit
                );
            }
        }
        if !self.ratios.is_empty() {
            md.push_str("\n### Ratios to the machine's limits\n\n| paysaga figure | value | ceiling | ceiling value | ratio |\n|---|---:|---|---:|---:|\n");
            for r in &self.ratios {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {:.2} |",
                    r.name,
                    fmt_num(r.measured),
                    r.ceiling_name,
                    fmt_num(r.ceiling),
                    r.ratio
                );
            }
        }
        if !self.targets.is_empty() {
            md.push_str("\n### Targets\n\n| target | measured | required | met | how |\n|---|---:|---:|---|---|\n");
            for t in &self.targets {
                let op = if t.bound == Bound::AtLeast {
                    "≥"
                } else {
                    "≤"
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {op} {} | {} | {} |",
                    t.name,
                    fmt_num(t.measured),
                    fmt_num(t.threshold),
                    if t.met { "**met**" } else { "**not met**" },
                    t.detail
                );
            }
        }
        if !self.memory.is_empty() {
            md.push_str("\n### Memory\n\n| phase | process | peak RSS (sampled) | RSS at end | VmHWM |\n|---|---|---:|---:|---:|\n");
            for row in &self.memory {
                let p = &row.process;
                let _ = writeln!(
                    md,
                    "| {} | {} | {:.1} MiB | {:.1} MiB | {:.1} MiB |",
                    row.phase,
                    p.name,
                    p.peak_rss_kib as f64 / 1024.0,
                    p.end_rss_kib as f64 / 1024.0,
                    p.hwm_kib as f64 / 1024.0
                );
            }
        }
        if !self.invariants.is_empty() {
            md.push_str("\n### Invariants checked in PostgreSQL\n\n| scenario | check | holds | detail |\n|---|---|---|---|\n");
            for i in &self.invariants {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} |",
                    i.scenario,
                    i.check,
                    if i.ok { "yes" } else { "**NO**" },
                    i.detail
                );
            }
        }
        if !self.notes.is_empty() {
            md.push_str("\n### Notes\n\n");
            for n in &self.notes {
                let _ = writeln!(md, "- {n}");
            }
        }
        md
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
    fn numbers_print_briefly() {
        assert_eq!(fmt_num(12345.678), "12346");
        assert_eq!(fmt_num(0.4567), "0.46");
        assert_eq!(fmt_num(f64::NAN), "n/a");
    }
}
