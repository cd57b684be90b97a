//! `mprotect_large_batch`, counted by hand (issue 15): one per batch of
//! more than one entry of a large folio that change_pte_range() changes
//! (6.17+ batching; mm/mprotect.c change_pte_range() with `nr_ptes > 1`),
//! on both architectures; none for an order-0 page or a
//! zero-page entry (batches of one: mprotect_folio_pte_batch() returns 1
//! before any scan), none in the
//! per-PTE loop of 6.16 and before (`--before mprotect-pte-batch`). A
//! whole-program event: the page-table figure and every other count are
//! unchanged (scripts/check-same-output.sh, the other count tests).

mod common;

use ptlab_model::{ArchKind, Before, HwEvent};

/// `mprotect_large_batch` of each statement of `src`, in order.
fn batches(src: &str, arch: ArchKind, before: Before) -> Vec<u64> {
    common::per_statement(src, arch, before, HwEvent::MprotectLargeBatch)
}

/// 16 order-0 pages and 4 zero-page entries: batches of one, none.
#[test]
fn order_0_and_zero_page_entries_count_none() {
    common::assert_per_statement(
        common::ORDER_0_AND_ZERO_PAGES,
        HwEvent::MprotectLargeBatch,
        &ArchKind::ALL,
        &common::BOTH_MPROTECT_LOOPS,
        &[0, 0, 0, 0, 0, 0, 0, 0],
    );
}

/// 16 folios of 64 KiB in a row (1 MiB; the model may take them as one
/// stretch and multiply the first batch's events): one batch each, 16;
/// then half a folio (the VMA split at 32 KiB: one batch of 8), 1; on both
/// architectures; the per-PTE loop none.
#[test]
fn one_per_64k_folio_batch() {
    let src = common::SIXTEEN_64K_FOLIOS_AND_HALF_OF_ONE;
    for arch in ArchKind::ALL {
        assert_eq!(
            batches(src, arch, Before::empty()),
            [0, 0, 0, 16, 1],
            "{arch:?}"
        );
        assert_eq!(
            batches(src, arch, Before::MPROTECT_PTE_BATCH),
            [0, 0, 0, 0, 0],
            "{arch:?}"
        );
    }
}

/// A PMD THP mapped by PTEs (the PMD split by a VMA split and merge): its
/// 512 entries are one batch: 1.
#[test]
fn a_pte_mapped_thp_is_one_batch() {
    assert_eq!(
        batches(common::PTE_MAPPED_THP, ArchKind::X86_64, Before::empty()),
        [0, 0, 0, 0, 0, 0, 0, 1]
    );
}
