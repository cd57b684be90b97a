//! What the hand-derived count tests share: run a scenario on the model
//! with no optional CPU feature, read one event per statement or the
//! page-table figure's events of the last statement, and the scenarios
//! more than one event's tests count. Only the scaffolding lives here:
//! every test writes its expected counts out by hand.
// Each test crate uses only some of these.
#![allow(dead_code)]

use ptlab_cost::{run_events, run_events_with};
use ptlab_model::{After, ArchKind, Before, HwEvent, HwEvents, HwFeatures};
use std::collections::BTreeMap;

/// No optional CPU feature (no TLBI range, no BBML2, no KPTI, contpte on):
/// x86-64, and arm64 as the neoverse-n1 profile has it ("N1").
pub const NO_FEATURES: HwFeatures = HwFeatures {
    tlbi_range: false,
    bbml2_noabort: false,
    kpti: false,
    contpte_off: false,
};

/// The 6.17+ batched loop of change_pte_range() and the per-PTE loop of
/// 6.16 and before (`--before mprotect-pte-batch`).
pub const BOTH_MPROTECT_LOOPS: [Before; 2] = [Before::empty(), Before::MPROTECT_PTE_BATCH];

/// The events of each statement of `src`, in order.
pub fn statements(src: &str, arch: ArchKind, before: Before) -> Vec<HwEvents> {
    let run = run_events(src, "t.ptl", arch, before, &[], NO_FEATURES).expect("scenario runs");
    run.lines.iter().map(|l| l.events).collect()
}

/// Event `e` of each statement of `src`, in order.
pub fn per_statement(src: &str, arch: ArchKind, before: Before, e: HwEvent) -> Vec<u64> {
    statements(src, arch, before)
        .iter()
        .map(|events| events.get(e))
        .collect()
}

/// Asserts that event `e` of each statement of `src` is `want` on every
/// architecture of `arches` with every switch set of `befores`.
#[track_caller]
pub fn assert_per_statement(
    src: &str,
    e: HwEvent,
    arches: &[ArchKind],
    befores: &[Before],
    want: &[u64],
) {
    for &arch in arches {
        for &before in befores {
            assert_eq!(
                per_statement(src, arch, before, e),
                want,
                "{arch:?} {before:?}"
            );
        }
    }
}

/// The page-table figure's events of `events`, by name, zeros left out
/// (the whole-program refinements are pinned by their own tests).
pub fn figure(events: &HwEvents) -> BTreeMap<String, u64> {
    events
        .nonzero()
        .filter(|(e, _)| !e.is_fine())
        .map(|(e, c)| (e.name().to_string(), c))
        .collect()
}

/// The page-table figure's events of the last line of `src` (the
/// operation under test).
pub fn last_line(
    src: &str,
    arch: ArchKind,
    before: Before,
    f: HwFeatures,
) -> BTreeMap<String, u64> {
    figure(&last_events(src, arch, before, f))
}

/// Every event and kernel call of the last line of `src`.
pub fn last_events(src: &str, arch: ArchKind, before: Before, f: HwFeatures) -> HwEvents {
    let mut run = run_events(src, "t.ptl", arch, before, &[], f).expect("scenario runs");
    run.lines.pop().expect("a line").events
}

/// [`last_line`] with `--after` (proposed change) switches too.
pub fn last_line_after(
    src: &str,
    arch: ArchKind,
    switches: (Before, After),
    f: HwFeatures,
) -> BTreeMap<String, u64> {
    let run = run_events_with(src, "t.ptl", arch, switches, &[], f, None).expect("scenario runs");
    figure(&run.lines.last().expect("a line").events)
}

/// A map of event names to counts.
pub fn m(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

// ---- scenarios the mprotect events' tests share ----------------------------

/// 16 order-0 pages written, made read-only and read-write again (lines
/// 4 and 5), then 4 zero-page entries (a read fault) made read-only
/// (line 8).
pub const ORDER_0_AND_ZERO_PAGES: &str = "thp 2M never
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
mprotect p 64K r
mprotect p 64K rw
q = mmap 16K at 0x7f00_0010_0000 fixed
read q 16K
mprotect q 16K r
";

/// One 64 KiB folio written, made read-only and read-write again (lines
/// 4 and 5).
pub const ONE_64K_FOLIO: &str = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
mprotect p 64K r
mprotect p 64K rw
";

/// 16 folios of 64 KiB in a row made read-only (line 4), then the first
/// half of the first folio read-write (line 5: the VMA split at 32 KiB).
pub const SIXTEEN_64K_FOLIOS_AND_HALF_OF_ONE: &str = "thp 64K always
p = mmap 1M at 0x7f00_0000_0000 fixed
write p 1M
mprotect p 1M r
mprotect p 32K rw
";

/// A PMD THP mapped by PTEs (the PMD split by a VMA split and merge, lines
/// 6 and 7) made read-only (line 8).
pub const PTE_MAPPED_THP: &str = "thp enabled madvise
thp 2M inherit
p = mmap 2M at 0x7e00_0000_0000 fixed
madvise p 2M hugepage
write p 2M
madvise p 4K dontfork
madvise p 4K dofork
mprotect p 2M r
";
