//! The benchmark's targets, judged from what the run measured. A target whose scenario did not
//! run is listed as not measured (and so not met), never silently dropped.

use crate::{
    ceiling::Ceilings,
    measured::Measured,
    report::{Bound, Report, Target},
};

const NOT_MEASURED: &str = "not measured in this run";
/// Peak RSS may move this much between identical drops without a leak (allocator and
/// connection-buffer noise); at 10,000 buyers it is ~100 bytes kept per buyer request.
const LEAK_TOLERANCE_MIB: f64 = 2.0;

fn ratio(a: Option<f64>, b: f64) -> f64 {
    match a {
        Some(a) if b > 0.0 => a / b,
        _ => f64::NAN,
    }
}

pub fn evaluate(report: &mut Report, c: &Ceilings, m: &Measured) {
    let mut t = Vec::new();
    let how = |ok: bool, s: String| if ok { s } else { NOT_MEASURED.to_owned() };

    // The ceiling measured beside the gate phases when there is one (the machine is shared).
    let (http, which) = match m.http_auth_beside_gate {
        Some(h) if h > 0.0 => (h, "ceiling measured beside the phase"),
        _ => (c.http_auth, "scenario 5 ceiling"),
    };
    // Both gate answers are judged as a share of the HTTP ceiling beside them.
    for (name, rate, floor, unit) in [
        (
            "gate pass issuance ÷ HTTP ceiling",
            m.pass_rate,
            0.5,
            "passes",
        ),
        (
            "gate sold-out answers ÷ HTTP ceiling",
            m.sold_out_rate,
            0.8,
            "answers",
        ),
    ] {
        let r = ratio(rate, http);
        t.push(Target::new(
            name,
            r,
            Bound::AtLeast,
            floor,
            how(
                r.is_finite(),
                format!(
                    "{:.0} {unit}/s ÷ {:.0} req/s ({which})",
                    rate.unwrap_or(0.0),
                    http
                ),
            ),
        ));
    }
    let reached = m.gate_drop_reached_order.map(|r| r as f64);
    let r = ratio(reached, m.units as f64);
    t.push(Target::new(
        "requests reaching order in scenario 1 ÷ units",
        r,
        Bound::AtMost,
        1.05,
        how(
            r.is_finite(),
            format!(
                "{} requests for {} units (order's own counter)",
                reached.unwrap_or(0.0),
                m.units
            ),
        ),
    ));
    let r = match (m.claim_p95_skip_locked_us, m.claim_p95_counter_us) {
        (Some(s), Some(k)) if k > 0.0 => s / k,
        _ => f64::NAN,
    };
    t.push(Target::new(
        "SKIP LOCKED claim p95 ÷ single-counter FOR UPDATE p95 (100 claimers)",
        r,
        Bound::AtMost,
        0.1,
        how(
            r.is_finite(),
            format!(
                "{:.0} µs ÷ {:.0} µs",
                m.claim_p95_skip_locked_us.unwrap_or(0.0),
                m.claim_p95_counter_us.unwrap_or(0.0)
            ),
        ),
    ));
    let r = match (m.payments_per_s, m.commits_per_payment) {
        (Some(p), Some(k)) if k > 0.0 && c.pg_commits > 0.0 => p / (c.pg_commits / k),
        _ => f64::NAN,
    };
    t.push(Target::new(
        "saga payments/s ÷ (commit ceiling ÷ commits per payment)",
        r,
        Bound::AtLeast,
        0.5,
        how(
            r.is_finite(),
            format!(
                "{:.0} payments/s; {:.0} commits/s ÷ {:.1} commits per payment",
                m.payments_per_s.unwrap_or(0.0),
                c.pg_commits,
                m.commits_per_payment.unwrap_or(0.0)
            ),
        ),
    ));
    if m.service_peak_mib.is_empty() {
        t.push(Target::new(
            "service peak RSS at the drop (MiB)",
            f64::NAN,
            Bound::AtMost,
            100.0,
            NOT_MEASURED,
        ));
    }
    for (name, mib) in &m.service_peak_mib {
        t.push(Target::new(
            format!("{name}: peak RSS during the drops (MiB)"),
            *mib,
            Bound::AtMost,
            100.0,
            format!(
                "sampled VmRSS every 25 ms, {} buyers",
                report.settings.buyers
            ),
        ));
    }
    t.push(Target::new(
        "Redis bytes per in-flight pass",
        m.bytes_per_pass.unwrap_or(f64::NAN),
        Bound::AtMost,
        256.0,
        how(
            m.bytes_per_pass.is_some(),
            "MEMORY USAGE of the gate's keys ÷ passes in flight".into(),
        ),
    ));
    let (who, growth) = m
        .rss_growth_mib
        .clone()
        .unwrap_or_else(|| ("-".into(), f64::NAN));
    let later_drops = f64::from(report.settings.drops.saturating_sub(1).max(1));
    let per_buyer = growth * 1024.0 * 1024.0 / (later_drops * report.settings.buyers as f64);
    t.push(Target::new(
        format!("service peak RSS growth, drop 1 → drop {}, MiB (no leak)", report.settings.drops),
        growth,
        Bound::AtMost,
        LEAK_TOLERANCE_MIB,
        how(
            growth.is_finite(),
            format!(
                "largest: {who}, {per_buyer:.0} bytes per buyer per later drop; {LEAK_TOLERANCE_MIB} MiB allowed for allocator noise"
            ),
        ),
    ));
    report.targets = t;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{cli::Settings, machine::Machine};

    fn report() -> Report {
        let args = <crate::cli::Cli as clap::Parser>::parse_from(["paysaga-bench"]).run;
        Report::new(Settings::from_args(&args).unwrap(), Machine::detect())
    }

    #[test]
    fn unmeasured_targets_are_listed_and_not_met() {
        let mut r = report();
        evaluate(&mut r, &Ceilings::default(), &Measured::default());
        assert!(r.targets.len() >= 8);
        assert!(r.targets.iter().all(|t| !t.met));
        assert!(r.targets.iter().all(|t| t.detail == NOT_MEASURED));
    }

    #[test]
    fn measured_targets_are_judged() {
        let mut r = report();
        let c = Ceilings {
            http_auth: 10_000.0,
            pg_commits: 9_000.0,
            ..Ceilings::default()
        };
        let m = Measured {
            units: 100,
            gate_drop_reached_order: Some(100),
            pass_rate: Some(6_000.0),
            sold_out_rate: Some(7_000.0),
            payments_per_s: Some(900.0),
            commits_per_payment: Some(6.0),
            bytes_per_pass: Some(120.0),
            ..Measured::default()
        };
        evaluate(&mut r, &c, &m);
        let met = |name: &str| {
            r.targets
                .iter()
                .find(|t| t.name.starts_with(name))
                .map(|t| t.met)
        };
        assert_eq!(met("gate pass issuance"), Some(true));
        assert_eq!(met("gate sold-out"), Some(false));
        assert_eq!(met("requests reaching order"), Some(true));
        assert_eq!(met("saga payments/s"), Some(true));
        assert_eq!(met("Redis bytes"), Some(true));
    }
}
