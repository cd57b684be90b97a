//! `mprotect_pass`, counted by hand (issue 15): one per pass of
//! change_pte_range()'s loop that changes a present entry — one per batch
//! (an order-0 page, a zero-page entry, or a large folio's batch in 6.17+;
//! one per present PTE in the per-PTE loop of ≤ 6.16, `--before
//! mprotect-pte-batch`). Nothing else counts it, and adding it changed no
//! other event's count (scripts/check-same-output.sh, the other count
//! tests).

mod common;

use ptlab_model::{ArchKind, Before, HwEvent};

/// `mprotect_pass` of each statement of `src`, in order.
fn passes(src: &str, arch: ArchKind, before: Before) -> Vec<u64> {
    common::per_statement(src, arch, before, HwEvent::MprotectPass)
}

/// 16 order-0 pages: every present entry is its own batch, so 16 passes
/// per mprotect in both loops; the mmap and the faults count none.
#[test]
fn order_0_pages_take_one_pass_each() {
    let src = "thp 2M never
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
mprotect p 64K r
mprotect p 64K rw
";
    common::assert_per_statement(
        src,
        HwEvent::MprotectPass,
        &ArchKind::ALL,
        &common::BOTH_MPROTECT_LOOPS,
        &[0, 0, 0, 16, 16],
    );
}

/// A 64 KiB folio: 6.18 changes its 16 PTEs in one batch (1 pass per
/// mprotect); the per-PTE loop takes 16.
#[test]
fn a_64k_folio_is_one_pass_when_batched() {
    let src = common::ONE_64K_FOLIO;
    for arch in ArchKind::ALL {
        assert_eq!(
            passes(src, arch, Before::empty()),
            [0, 0, 0, 1, 1],
            "{arch:?}"
        );
        assert_eq!(
            passes(src, arch, Before::MPROTECT_PTE_BATCH),
            [0, 0, 0, 16, 16],
            "{arch:?}"
        );
    }
}

/// Only present entries take a pass: 12 of 16 pages written, the other 4
/// PTEs none (pte_none: the loop skips them). Zero-page entries (a read
/// fault) are present: vm_normal_folio() finds no folio, the batch is 1,
/// and the entry is still changed — one pass each.
#[test]
fn only_present_entries_count_zero_page_included() {
    let src = "thp 2M never
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 48K
mprotect p 64K r
q = mmap 16K at 0x7f00_0010_0000 fixed
read q 16K
mprotect q 16K r
";
    common::assert_per_statement(
        src,
        HwEvent::MprotectPass,
        &ArchKind::ALL,
        &common::BOTH_MPROTECT_LOOPS,
        &[0, 0, 0, 12, 0, 0, 4],
    );
}
