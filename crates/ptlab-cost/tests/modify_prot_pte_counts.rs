//! `modify_prot_pte`, counted by hand (issue 15): on x86-64, whose
//! modify_prot_start_ptes() / modify_prot_commit_ptes() are the generic
//! loops of include/linux/pgtable.h, each entry after the first of a batch
//! of change_pte_range() (6.17+) makes its own ptep_modify_prot_start() /
//! ptep_modify_prot_commit() round trip: `nr - 1` per batch of `nr`. The
//! first entry's round trip belongs to its pass (`mprotect_pass`), so an
//! order-0 page, a zero-page entry and the per-PTE loop of ≤ 6.16 count
//! none; arm64 overrides both hooks with one batched call each
//! (arch/arm64/mm/mmu.c) and counts none. Adding it changed no other
//! event's count (scripts/check-same-output.sh, the other count tests).

mod common;

use ptlab_model::{ArchKind, Before, HwEvent};

/// `modify_prot_pte` of each statement of `src`, in order.
fn entries(src: &str, arch: ArchKind, before: Before) -> Vec<u64> {
    common::per_statement(src, arch, before, HwEvent::ModifyProtPte)
}

/// 16 order-0 pages and 4 zero-page entries: every batch is one entry,
/// so none, on both arches and in both loops.
#[test]
fn order_0_and_zero_page_entries_count_none() {
    common::assert_per_statement(
        common::ORDER_0_AND_ZERO_PAGES,
        HwEvent::ModifyProtPte,
        &ArchKind::ALL,
        &common::BOTH_MPROTECT_LOOPS,
        &[0, 0, 0, 0, 0, 0, 0, 0],
    );
}

/// One 64 KiB folio: one batch of 16 per mprotect, 15 entries after the
/// first on x86-64 (both directions: the round trip does not depend on the
/// write upgrade); none on arm64; none in the per-PTE loop.
#[test]
fn a_64k_folio_batch_counts_15_on_x86() {
    let src = common::ONE_64K_FOLIO;
    assert_eq!(
        entries(src, ArchKind::X86_64, Before::empty()),
        [0, 0, 0, 15, 15]
    );
    assert_eq!(
        entries(src, ArchKind::X86_64, Before::MPROTECT_PTE_BATCH),
        [0, 0, 0, 0, 0]
    );
    common::assert_per_statement(
        src,
        HwEvent::ModifyProtPte,
        &[ArchKind::Arm64],
        &common::BOTH_MPROTECT_LOOPS,
        &[0, 0, 0, 0, 0],
    );
}

/// 16 folios of 64 KiB in a row (1 MiB; the model may take them as one
/// stretch and multiply the first batch's events): 16 × 15 = 240; half a
/// folio (the VMA split at 32 KiB: a batch of 8) 7.
#[test]
fn runs_of_folios_and_part_of_one() {
    assert_eq!(
        entries(
            common::SIXTEEN_64K_FOLIOS_AND_HALF_OF_ONE,
            ArchKind::X86_64,
            Before::empty()
        ),
        [0, 0, 0, 240, 7]
    );
}

/// A PMD THP mapped by PTEs (the PMD split by a VMA split and merge): its
/// 512 entries are one batch, 511 after the first.
#[test]
fn a_pte_mapped_thp_counts_511() {
    assert_eq!(
        entries(common::PTE_MAPPED_THP, ArchKind::X86_64, Before::empty()),
        [0, 0, 0, 0, 0, 0, 0, 511]
    );
}
