//! What the hand-derived count tests of one event share: run a scenario on
//! the model with no optional CPU feature and read one event per statement.

use ptlab_cost::run_events;
use ptlab_model::{ArchKind, Before, HwEvent, HwFeatures};

/// No optional CPU feature (no TLBI range, no BBML2, no KPTI, contpte on).
pub const NO_FEATURES: HwFeatures = HwFeatures {
    tlbi_range: false,
    bbml2_noabort: false,
    kpti: false,
    contpte_off: false,
};

/// Event `e` of each statement of `src`, in order.
pub fn per_statement(src: &str, arch: ArchKind, before: Before, e: HwEvent) -> Vec<u64> {
    let run = run_events(src, "t.ptl", arch, before, &[], NO_FEATURES).expect("scenario runs");
    run.lines.iter().map(|l| l.events.get(e)).collect()
}
