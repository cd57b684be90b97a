//! Kernel-call counts (ptep_get, set_ptes, flush_tlb_range, ...) of small
//! scenarios, worked out by hand from the kernel functions the model
//! mirrors (mm/mremap.c move_ptes(), arch/arm64/include/asm/pgtable.h and
//! arch/arm64/mm/contpte.c). Calls are counted next to the hardware events
//! and never priced; each hook counts itself once per call, and a hook the
//! model implements through another counts both (docs/cost.md).
//!
//! The mremap change's description says it cuts `ptep_get()` calls 16-fold
//! on contpte; `mremap_ptep_get_cut_16_fold_only_with_contpte` checks that
//! claim both ways.

mod common;

use common::{last_events, m, NO_FEATURES as N1};
use ptlab_cost::run_events;
use ptlab_model::{ArchKind, Before, HwFeatures};
use std::collections::BTreeMap;

const NO_CONTPTE: HwFeatures = HwFeatures {
    contpte_off: true,
    ..N1
};

/// Calls of the last line of `src` (the operation under test).
fn calls(src: &str, arch: ArchKind, before: Before, f: HwFeatures) -> BTreeMap<String, u64> {
    last_events(src, arch, before, f)
        .calls_map()
        .into_iter()
        .map(|(k, c)| (k.to_string(), c))
        .collect()
}

const MREMAP_64K: &str = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
q = mremap p 64K 64K maymove fixed 0x7f00_0010_0000
";

/// One folded 64 KiB block moved by 6.18's batched move_ptes(): one
/// ptep_get() of the block's first entry, one folio_pte_batch() (through
/// mremap_folio_pte_batch(); the hint covers the block), one
/// get_and_clear_full_ptes(16) (whole block: no contpte_try_unfold), one
/// set_ptes(16), one flush_tlb_range(). The source's zap afterwards
/// (move_vma() → do_vmi_munmap() of the old range → zap_pte_range()) reads
/// its 16 (now empty) entries with ptep_get() each, found none: 16 more
/// calls, 1 + 16 = 17 (docs/cost.md, "Kernel-call counts"). Nothing was
/// gathered, so the zap flushes nothing.
#[test]
fn mremap_64k_arm64_batched_calls() {
    let got = calls(MREMAP_64K, ArchKind::Arm64, Before::empty(), N1);
    let want = m(&[
        ("ptep_get", 1 + 16),
        ("folio_pte_batch", 1),
        ("get_and_clear_full_ptes", 1),
        ("set_ptes", 1),
        ("flush_tlb_range", 1),
    ]);
    assert_eq!(got, want);
}

/// The same block per PTE (before the change): per entry one ptep_get(),
/// one ptep_get_and_clear() and one set_pte_at() (= set_ptes(.., 1)), each
/// of the last two calling contpte_try_unfold() (32). The first clear
/// unfolds the block (one contpte_convert); the write of entry 15 passes
/// contpte_try_fold()'s inline tests, so __contpte_try_fold() runs once and
/// folds the destination (a second contpte_convert). flush_tlb_range: one
/// per convert plus move_ptes()' own. The zap of the emptied source reads
/// its 16 entries (16 ptep_get), as after the change: 16 + 16 = 32.
#[test]
fn mremap_64k_arm64_per_pte_calls() {
    let got = calls(MREMAP_64K, ArchKind::Arm64, Before::MREMAP_PTE_BATCH, N1);
    let want = m(&[
        ("ptep_get", 16 + 16),
        ("ptep_get_and_clear", 16),
        ("set_ptes", 16),
        ("flush_tlb_range", 3),
        ("contpte_try_unfold", 32),
        ("__contpte_try_fold", 1),
        ("contpte_convert", 2),
    ]);
    assert_eq!(got, want);
}

/// Without contpte (arm64 before 6.9, or CONFIG_ARM64_CONTPTE=n) the hooks
/// are the generic per-entry ones: no CONT bit, pte_batch_hint() is 1, so
/// mremap_folio_pte_batch() returns 1 before calling folio_pte_batch() and
/// both algorithms move entry by entry: 16 ptep_get(), 16
/// ptep_get_and_clear(), 16 set_ptes(.., 1), one flush; no contpte calls;
/// plus the zap's 16 ptep_get() of the emptied source: 32.
#[test]
fn mremap_64k_arm64_without_contpte_calls() {
    let want = m(&[
        ("ptep_get", 16 + 16),
        ("ptep_get_and_clear", 16),
        ("set_ptes", 16),
        ("flush_tlb_range", 1),
    ]);
    for before in [Before::empty(), Before::MREMAP_PTE_BATCH] {
        let got = calls(MREMAP_64K, ArchKind::Arm64, before, NO_CONTPTE);
        assert_eq!(got, want, "{before:?}");
    }
}

/// x86-64 has no contiguous hint: both algorithms move entry by entry
/// (16 ptep_get), then the zap reads the 16 emptied entries (16 more).
#[test]
fn mremap_64k_x86_calls() {
    let want = m(&[
        ("ptep_get", 16 + 16),
        ("ptep_get_and_clear", 16),
        ("set_ptes", 16),
        ("flush_tlb_range", 1),
    ]);
    for before in [Before::empty(), Before::MREMAP_PTE_BATCH] {
        let got = calls(MREMAP_64K, ArchKind::X86_64, before, N1);
        assert_eq!(got, want, "{before:?}");
    }
}

/// The claim "ptep_get() calls cut 16-fold on contpte" checked on the
/// seed scenario: through the hook, move_ptes() makes one call per 64 KiB
/// block instead of one per entry, exactly 16-fold; without contpte (and on
/// x86-64) there is no cut at all. The zap of the source's emptied entries
/// reads each of them in both arms (16 calls), so the whole mremap line
/// goes from 16 + 16 = 32 to 1 + 16 = 17: the 16-fold cut is move_ptes()'s,
/// the syscall's is 1.9-fold.
#[test]
fn mremap_ptep_get_cut_16_fold_only_with_contpte() {
    let get = |b, f| calls(MREMAP_64K, ArchKind::Arm64, b, f)["ptep_get"];
    let (before, after) = (get(Before::MREMAP_PTE_BATCH, N1), get(Before::empty(), N1));
    assert_eq!((before, after), (32, 17));
    // The zap's reads, the same in both arms: move_ptes() alone is 16 -> 1.
    let zap = 16;
    assert_eq!((before - zap) / (after - zap), 16);
    assert_eq!(
        get(Before::MREMAP_PTE_BATCH, NO_CONTPTE),
        get(Before::empty(), NO_CONTPTE)
    );
}

/// Calls are kept apart from the hardware events: switching contpte off
/// changes the arm64 events (no fold/unfold), and x86 ignores the switch.
#[test]
fn contpte_off_changes_arm64_events_only() {
    let ev = |arch, f| {
        run_events(MREMAP_64K, "t.ptl", arch, Before::MREMAP_PTE_BATCH, &[], f)
            .unwrap()
            .total
    };
    let on = ev(ArchKind::Arm64, N1);
    let off = ev(ArchKind::Arm64, NO_CONTPTE);
    use ptlab_model::HwEvent::{ContFold, ContUnfold};
    assert!(on.get(ContFold) + on.get(ContUnfold) > 0);
    assert_eq!(off.get(ContFold) + off.get(ContUnfold), 0);
    assert_eq!(ev(ArchKind::X86_64, N1), ev(ArchKind::X86_64, NO_CONTPTE));
}

/// The zap's per-entry reads are ptep_get() calls: munmap of one written
/// 64 KiB folio reads its 16 entries (zap_pte_range(): ptep_get() per
/// entry; the model reads every slot and gathers no arm64 block) and
/// clears them with one get_and_clear_full_ptes(16). arm64 flushes twice:
/// tlb_end_vma() for the cleared span, tlb_finish_mmu() for the freed
/// tables. x86 flushes once: it selects MMU_GATHER_MERGE_VMAS, so
/// tlb_end_vma() does not flush and tlb_finish_mmu() flushes the zap and
/// the freed tables together (one flush_tlb_mm_range(); until the
/// thirteenth session the model flushed x86 at tlb_end_vma() too, 2).
#[test]
fn zap_reads_are_ptep_get_calls() {
    let src = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
munmap p 64K
";
    for (arch, flushes) in [(ArchKind::X86_64, 1), (ArchKind::Arm64, 2)] {
        let want = m(&[
            ("ptep_get", 16),
            ("get_and_clear_full_ptes", 1),
            ("flush_tlb_range", flushes),
        ]);
        assert_eq!(calls(src, arch, Before::empty(), N1), want, "{arch:?}");
    }
}

/// Swap walks and re-checks are ptep_get() calls. MADV_PAGEOUT of one
/// written 4 KiB page (x86): madvise_cold_or_pageout_pte_range() reads the
/// entry through the hook (1 ptep_get), then reclaim's try_to_unmap_one()
/// finds it again with page_vma_mapped_walk() (1 ptep_get, counted in the
/// swap walk, 1 before this count was added), clears it
/// (ptep_get_and_clear 1, flush_tlb_range 1: one CPU in mm_cpumask, so x86
/// flushes at once) and writes the swap entry (set_ptes 1): 2 ptep_get.
/// Reading the page back: handle_pte_fault()'s read of the swap PTE through
/// the hook (1), do_swap_page()'s pte_same(ptep_get(), orig_pte) re-check
/// under the PTL (1, was a bare load), set_ptes of the new PTE (1).
#[test]
fn swap_rechecks_and_walks_are_ptep_get_calls() {
    let out = "swap 1M
p = mmap 4K at 0x7f00_0000_0000 fixed
write p 4K
madvise p 4K pageout
";
    assert_eq!(
        calls(out, ArchKind::X86_64, Before::empty(), N1),
        m(&[
            ("ptep_get", 1 + 1),
            ("ptep_get_and_clear", 1),
            ("set_ptes", 1),
            ("flush_tlb_range", 1),
        ])
    );
    let back = format!("{out}read p 4K\n");
    assert_eq!(
        calls(&back, ArchKind::X86_64, Before::empty(), N1),
        m(&[("ptep_get", 1 + 1), ("set_ptes", 1)])
    );
}

const TABLE: &str = "thp 2M never
p = mmap 2M at 0x7f00_0000_0000 fixed
write p 2M
q = mremap p 2M 2M maymove fixed 0x7f00_0040_0000
";

/// A whole PTE table moved (issue 15, twelfth session): move_page_tables()
/// → move_pgt_entry(NORMAL_PMD), which calls take_rmap_locks() (and
/// drop_rmap_locks()) whatever the move (should_take_rmap_locks()), then
/// move_normal_pmd() → flush_tlb_range(old, old + 2 MiB): 1 + 1 calls on
/// both arches (arm64 N1's 512 pages go to the ASID-wide flush inside
/// __flush_tlb_range(), not through flush_tlb_mm()). The unmap of the old
/// range finds its PMD empty: no call. Before 4.20 (no table moves) the
/// 512 entries move one by one in move_ptes(), which takes no rmap lock
/// for a fresh destination VMA (need_rmap_locks false): no
/// take_rmap_locks() call.
#[test]
fn table_move_calls_take_rmap_locks() {
    let want = m(&[("flush_tlb_range", 1), ("take_rmap_locks", 1)]);
    for arch in [ArchKind::X86_64, ArchKind::Arm64] {
        assert_eq!(calls(TABLE, arch, Before::empty(), N1), want, "{arch:?}");
        let before = calls(TABLE, arch, Before::MREMAP_TABLE_MOVE, N1);
        assert!(
            !before.contains_key("take_rmap_locks"),
            "{arch:?} {before:?}"
        );
    }
}
