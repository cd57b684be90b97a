//! Hardware-event counts of small scenarios, worked out by hand from the
//! kernel functions the model cites, for each seed operation × architecture × before/after.
//! Each test states the derivation; the counts are exact (events, never
//! times, are asserted).
//!
//! Notation: L = pte_load, S = pte_store, X = pte_atomic_clear, P =
//! struct_page_line. "N1" is arm64 without FEAT_TLBIRANGE/BBML2 (the
//! neoverse-n1 profile's features), "range" is arm64 with FEAT_TLBIRANGE
//! (apple-m-vm). Every scenario maps 64 KiB folios or small pages at
//! 2 MiB-aligned addresses, fully written (so every PTE is young and dirty:
//! contpte_ptep_get() stops after 2 gather loads: it re-reads the first
//! entry, which is dirty, then finds it young).

mod common;

use common::{last_events, last_line, m, NO_FEATURES as N1};
use ptlab_cost::run_events;
use ptlab_model::{ArchKind, Before, HwFeatures};
use std::collections::BTreeMap;

const RANGE: HwFeatures = HwFeatures {
    tlbi_range: true,
    ..N1
};
const X86: HwFeatures = N1;

const MREMAP_64K: &str = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
q = mremap p 64K 64K maymove fixed 0x7f00_0010_0000
";

/// mremap of one folded 64 KiB block, arm64 N1, 6.18 batching.
/// Syscall entry: syscall 1, vma_lookup 1; move_vma(): mremap_vma 1 (in
/// every mremap test below). move_ptes(): 2 PMD reads and 2
/// PTLs (old and new table). ptep_get(first): 1 raw + 2 gather = 3 L.
/// mremap_folio_pte_batch(): hint 16 > 1, vm_normal_folio (1 P),
/// folio_pte_batch reads folio_nr_pages (1 P); the hint already covers
/// max_nr = 16, so no scan. get_and_clear_ptes(16): whole block, no unfold,
/// 16 X. set_ptes(16): 16 S (painted CONT). flush_tlb_range(64 KiB): 16
/// pages < MAX_DVM_OPS: DSB ISHST, 16 TLBI VALE1IS, DSB ISH.
/// The source unmap: zap_pte_range reads the (now empty) 16 entries (16 L),
/// 1 PMD read, 1 PTL; nothing cleared, no flush; the PTE table stays (the
/// new VMA shares it).
#[test]
fn mremap_64k_arm64_batched() {
    let got = last_line(MREMAP_64K, ArchKind::Arm64, Before::empty(), N1);
    let want = m(&[
        ("syscall", 1),
        ("vma_lookup", 1),
        ("mremap_vma", 1),
        ("pmd_load", 3),
        ("ptl_lock", 3),
        ("pte_load", 3 + 16),
        ("struct_page_line", 2),
        ("pte_atomic_clear", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 1),
        ("dsb_ishst", 1),
        ("tlbi_page", 16),
        ("dsb_ish", 1),
    ]);
    assert_eq!(got, want);
}

/// The same block per PTE (before 6.17), arm64 N1 (move_ptes() per entry, with 6.18's
/// gather early exit). Entry 0: ptep_get 3 L; ptep_get_and_clear: unfold
/// check 1 L, contpte_convert (16 X, flush of 16 pages = 1 DSB pair + 16
/// TLBI, 16 S), then 1 X; set_pte_at at the (empty) destination: unfold
/// check 1 L, 1 S. Entries 1–14: 3 L, 1 X, 1 S each. Entry 15: the same,
/// then the destination auto-folds (VA and PFN index 15): 2 P
/// (page_folio, folio_nr_pages), 16 L compared, contpte_convert (16 X,
/// flush, 16 S). L = 5 + 42 + 3 + 16 = 66; X = S = 16 + 16 + 16 = 48;
/// TLBI = 16 + 16 + 16 (final flush); DSB pairs = 3. Plus the unmap's 16 L.
#[test]
fn mremap_64k_arm64_per_pte() {
    let got = last_line(MREMAP_64K, ArchKind::Arm64, Before::MREMAP_PTE_BATCH, N1);
    let want = m(&[
        ("syscall", 1),
        ("vma_lookup", 1),
        ("mremap_vma", 1),
        ("pmd_load", 3),
        ("ptl_lock", 3),
        ("pte_load", 66 + 16),
        ("struct_page_line", 2),
        ("pte_atomic_clear", 48),
        ("pte_store", 48),
        ("cont_unfold", 1),
        ("cont_fold", 1),
        ("tlb_flush_call", 3),
        ("dsb_ishst", 3),
        ("tlbi_page", 48),
        ("dsb_ish", 3),
    ]);
    assert_eq!(got, want);
    // The example: ptep_get() calls drop 16-fold (16 → 1), and the
    // PTE loads of the move itself from 66 to 3.
}

/// x86: pte_batch_hint() is 1, so mremap_folio_pte_batch() returns 1
/// without a folio lookup: per PTE 1 L, 1 X, 1 S either way; 16 pages ≤ 33:
/// 16 INVLPG. Before and after are identical.
#[test]
fn mremap_64k_x86_same_both_ways() {
    let want = m(&[
        ("syscall", 1),
        ("vma_lookup", 1),
        ("mremap_vma", 1),
        ("pmd_load", 3),
        ("ptl_lock", 3),
        ("pte_load", 16 + 16),
        ("pte_atomic_clear", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 1),
        ("tlbi_page", 16),
    ]);
    for b in [Before::empty(), Before::MREMAP_PTE_BATCH] {
        assert_eq!(
            last_line(MREMAP_64K, ArchKind::X86_64, b, X86),
            want,
            "{b:?}"
        );
    }
}

const TABLE: &str = "thp 2M never
p = mmap 2M at 0x7f00_0000_0000 fixed
write p 2M
q = mremap p 2M 2M maymove fixed 0x7f00_0040_0000
";

/// move_normal_pmd(): PMD lock, pmd_clear + pmd_populate (2 PMD stores),
/// flush_tlb_range(old, old + 2 MiB) at PAGE_SIZE stride = 512 pages.
/// N1: 512 >= MAX_DVM_OPS → flush_tlb_mm (DSB ISHST, ASIDE1IS, DSB ISH).
/// Range: scale 1, num 7 → one RVALE1IS for 512 pages. x86: 512 > 33 → a
/// full flush. The unmap of the old range finds an empty PMD: no events.
#[test]
fn table_move_after() {
    let base = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("mremap_vma", 1),
        ("ptl_lock", 1),
        ("pmd_store", 2),
        ("tlb_flush_call", 1),
    ];
    let mut n1 = m(&base);
    n1.extend(m(&[("dsb_ishst", 1), ("tlbi_asid", 1), ("dsb_ish", 1)]));
    assert_eq!(last_line(TABLE, ArchKind::Arm64, Before::empty(), N1), n1);
    let mut range = m(&base);
    range.extend(m(&[("dsb_ishst", 1), ("tlbi_range", 1), ("dsb_ish", 1)]));
    assert_eq!(
        last_line(TABLE, ArchKind::Arm64, Before::empty(), RANGE),
        range
    );
    let mut x86 = m(&base);
    x86.insert("tlbi_asid".into(), 1);
    assert_eq!(
        last_line(TABLE, ArchKind::X86_64, Before::empty(), X86),
        x86
    );
}

/// A table move into the next 1 GiB (issue 15, eleventh session): the
/// destination PMD lies in another PMD table, so move_normal_pmd() takes
/// the source table's PMD lock and the destination table's
/// (`pmd_lockptr()`, split PMD locks on both arches): 2 PTLs, where the
/// move within one PMD table above takes 1. Around it: the destination's
/// PMD table is allocated (1 alloc, 1 PUD store); the unmap of the old
/// range frees the emptied source PMD table (1 free, 1 PUD store) and
/// flushes it at PMD stride (one page-op: x86 1 INVLPG, arm64 one range
/// TLBI). The same for a PMD-mapped THP (move_huge_pmd(): the same two
/// locks; its own flush at PMD stride is one page-op too).
#[test]
fn table_move_across_pud_takes_both_pmd_locks() {
    let across = |thp: &str| {
        format!(
            "thp 2M {thp}
p = mmap 2M at 0x7f00_0000_0000 fixed
write p 2M
q = mremap p 2M 2M maymove fixed 0x7f00_4000_0000
"
        )
    };
    let base = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("mremap_vma", 1),
        ("pt_page_alloc", 1),
        ("pt_page_free", 1),
        ("pud_store", 2),
        ("ptl_lock", 2),
        ("pmd_store", 2),
        ("tlb_flush_call", 2),
    ];
    let mut x86 = m(&base);
    x86.extend(m(&[("tlbi_asid", 1), ("tlbi_page", 1)]));
    assert_eq!(
        last_line(&across("never"), ArchKind::X86_64, Before::empty(), X86),
        x86
    );
    let mut x86_thp = m(&base);
    x86_thp.insert("tlbi_page".into(), 2);
    assert_eq!(
        last_line(&across("always"), ArchKind::X86_64, Before::empty(), X86),
        x86_thp
    );
    let mut range = m(&base);
    range.extend(m(&[("dsb_ishst", 2), ("tlbi_range", 2), ("dsb_ish", 2)]));
    for thp in ["never", "always"] {
        assert_eq!(
            last_line(&across(thp), ArchKind::Arm64, Before::empty(), RANGE),
            range,
            "{thp}"
        );
    }
}

/// Without table moves, the 512 PTEs move one by one (4 KiB folios: batch
/// size 1): a new PTE table at the destination (1 alloc, 1 PMD store);
/// move_ptes: 2 PMD reads, 2 PTLs, per PTE 1 L + 1 X + 1 S (arm64: +1 L
/// unfold check in the clear and +1 L in set_pte_at); then the 512-page
/// flush (as above). Unmapping the old range reads its 512 empty entries
/// (512 L, 1 PMD read, 1 PTL) and frees its PTE table (1 free, 1 PMD
/// store), which tlb_finish_mmu flushes at PMD stride: one page-op.
#[test]
fn table_move_before() {
    let common = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("mremap_vma", 1),
        ("pt_page_alloc", 1),
        ("pt_page_free", 1),
        ("pmd_store", 2),
        ("pmd_load", 3),
        ("ptl_lock", 3),
        ("pte_atomic_clear", 512),
        ("pte_store", 512),
        ("tlb_flush_call", 2),
    ];
    let mut n1 = m(&common);
    n1.extend(m(&[
        ("pte_load", 512 * 3 + 512),
        ("dsb_ishst", 2),
        ("tlbi_asid", 1),
        ("tlbi_page", 1),
        ("dsb_ish", 2),
    ]));
    assert_eq!(
        last_line(TABLE, ArchKind::Arm64, Before::MREMAP_TABLE_MOVE, N1),
        n1
    );
    let mut range = m(&common);
    range.extend(m(&[
        ("pte_load", 512 * 3 + 512),
        ("dsb_ishst", 2),
        ("tlbi_range", 2),
        ("dsb_ish", 2),
    ]));
    assert_eq!(
        last_line(TABLE, ArchKind::Arm64, Before::MREMAP_TABLE_MOVE, RANGE),
        range
    );
    let mut x86 = m(&common);
    x86.extend(m(&[
        ("pte_load", 512 + 512),
        ("tlbi_asid", 1),
        ("tlbi_page", 1),
    ]));
    assert_eq!(
        last_line(TABLE, ArchKind::X86_64, Before::MREMAP_TABLE_MOVE, X86),
        x86
    );
}

const FORK_64K: &str = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
fork child
";

/// fork of one folded 64 KiB block, arm64 N1, 6.9+ batching.
/// fork: syscall 1, process_create 1, vma_copy 1; the child's PGD, PUD, PMD
/// and PTE tables (4 allocs, 2 upper-level stores, 1 PMD store);
/// copy_pte_range: 2 PMD reads, 2 PTLs. ptep_get 3 L; vm_normal_page 1 P;
/// folio_pte_batch: folio_nr_pages 1 P, hint 16 = max_nr. folio_ref_add
/// once (1 ref atomic); folio_try_dup_anon_rmap_ptes: 16 pages (16 P, 16
/// _mapcount atomics, CONFIG_PAGE_MAPCOUNT) + _large_mapcount once.
/// wrprotect_ptes(16): whole block, no unfold; __ptep_set_wrprotect per
/// entry: 1 L + 1 cmpxchg. set_ptes(child, 16): 16 S. dup_mmap's
/// flush_tlb_mm(parent): DSB ISHST, ASIDE1IS, DSB ISH.
#[test]
fn fork_64k_arm64_batched() {
    let got = last_line(FORK_64K, ArchKind::Arm64, Before::empty(), N1);
    let want = m(&[
        ("syscall", 1),
        ("process_create", 1),
        ("vma_copy", 1),
        ("pt_page_alloc", 4),
        ("pud_store", 2),
        ("pmd_store", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("pte_load", 3 + 16),
        ("struct_page_line", 2 + 16),
        ("folio_ref_atomic", 1),
        ("mapcount_atomic", 17),
        ("pte_atomic_rmw", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 1),
        ("dsb_ishst", 1),
        ("tlbi_asid", 1),
        ("dsb_ish", 1),
    ]);
    assert_eq!(got, want);
}

/// Per PTE (before 6.9), arm64 N1: entry 0's ptep_set_wrprotect unfolds the
/// parent's block (convert: 16 X, 16 TLBI + DSB pair, 16 S); each child
/// set_pte_at is single (unfold check 1 L, 1 S) and the 16th refolds the
/// child's block (2 P, 16 L, convert). Per entry: ptep_get (3 L for entry
/// 0, then 1 L: the block is unfolded), vm_normal_page 1 P, folio_get 1
/// ref atomic, rmap 1 P + 1 _mapcount + 1 _large_mapcount, wrprotect 1 L +
/// 1 L unfold check + 1 cmpxchg. L = (3+3) + 15·4 + 16 = 82; S = 16 + 16 +
/// 16 = 48; X = 32; P = 16 + 16 + 2 = 34; TLBI = 32 + ASIDE1IS.
#[test]
fn fork_64k_arm64_per_pte() {
    let got = last_line(FORK_64K, ArchKind::Arm64, Before::FORK_PTE_BATCH, N1);
    let want = m(&[
        ("syscall", 1),
        ("process_create", 1),
        ("vma_copy", 1),
        ("pt_page_alloc", 4),
        ("pud_store", 2),
        ("pmd_store", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("pte_load", 82),
        ("struct_page_line", 34),
        ("folio_ref_atomic", 16),
        ("mapcount_atomic", 32),
        ("pte_atomic_rmw", 16),
        ("pte_atomic_clear", 32),
        ("pte_store", 48),
        ("cont_unfold", 1),
        ("cont_fold", 1),
        ("tlb_flush_call", 3),
        ("dsb_ishst", 3),
        ("tlbi_page", 32),
        ("tlbi_asid", 1),
        ("dsb_ish", 3),
    ]);
    assert_eq!(got, want);
}

/// x86 fork: batched, folio_pte_batch reads the other 15 PTEs (hint 1): 16
/// L; wrprotect_ptes = 16 LOCK BTR (no load); 2 P for the batch head.
/// Per PTE: 16 × (1 L, 1 P vm_normal_page, 1 folio_get, rmap 1 P + 2
/// mapcount atomics, 1 LOCK BTR, 1 S). flush_tlb_mm: one full flush.
#[test]
fn fork_64k_x86() {
    let common = [
        ("syscall", 1),
        ("process_create", 1),
        ("vma_copy", 1),
        ("pt_page_alloc", 4),
        ("pud_store", 2),
        ("pmd_store", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("pte_load", 16),
        ("pte_atomic_rmw", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 1),
        ("tlbi_asid", 1),
    ];
    let mut after = m(&common);
    after.extend(m(&[
        ("struct_page_line", 18),
        ("folio_ref_atomic", 1),
        ("mapcount_atomic", 17),
    ]));
    assert_eq!(
        last_line(FORK_64K, ArchKind::X86_64, Before::empty(), X86),
        after
    );
    let mut before = m(&common);
    before.extend(m(&[
        ("struct_page_line", 32),
        ("folio_ref_atomic", 16),
        ("mapcount_atomic", 32),
    ]));
    assert_eq!(
        last_line(FORK_64K, ArchKind::X86_64, Before::FORK_PTE_BATCH, X86),
        before
    );
}

const MPROTECT_64K: &str = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
mprotect p 64K r
";

/// mprotect RW→R of one folded block (mm/mprotect.c change_pte_range(), arm64 contpte.c).
/// Batched arm64: 1 PMD read + PTL; ptep_get 3 L; page_folio 1 P +
/// folio_nr_pages 1 P; modify_prot_start_ptes(16) 16 X (no unfold);
/// modify_prot_commit_ptes = set_ptes(16) 16 S; the per-VMA flush of 16
/// pages (16 TLBI VALE1IS + DSB pair). Per PTE (≤6.16) arm64: the per-entry path's
/// per-block row with 6.18's early-exit gather: 66 L, 48 X, 48 S, 32 + 16
/// TLBI, 3 DSB pairs, 2 P (the refold's folio check). One pass of
/// change_pte_range()'s loop batched, 16 per PTE (`mprotect_pass`).
#[test]
fn mprotect_64k_arm64() {
    let common = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pmd_load", 1),
        ("ptl_lock", 1),
        ("struct_page_line", 2),
    ];
    let mut after = m(&common);
    after.extend(m(&[
        ("mprotect_pass", 1),
        ("pte_load", 3),
        ("pte_atomic_clear", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 1),
        ("dsb_ishst", 1),
        ("tlbi_page", 16),
        ("dsb_ish", 1),
    ]));
    assert_eq!(
        last_line(MPROTECT_64K, ArchKind::Arm64, Before::empty(), N1),
        after
    );
    let mut before = m(&common);
    before.extend(m(&[
        ("mprotect_pass", 16),
        ("pte_load", 66),
        ("pte_atomic_clear", 48),
        ("pte_store", 48),
        ("cont_unfold", 1),
        ("cont_fold", 1),
        ("tlb_flush_call", 3),
        ("dsb_ishst", 3),
        ("tlbi_page", 48),
        ("dsb_ish", 3),
    ]));
    assert_eq!(
        last_line(
            MPROTECT_64K,
            ArchKind::Arm64,
            Before::MPROTECT_PTE_BATCH,
            N1
        ),
        before
    );
    // BBML2-noabort elides the converts' flushes: only the final one stays.
    let bbml2 = HwFeatures {
        bbml2_noabort: true,
        ..N1
    };
    let got = last_line(
        MPROTECT_64K,
        ArchKind::Arm64,
        Before::MPROTECT_PTE_BATCH,
        bbml2,
    );
    assert_eq!(got["tlbi_page"], 16);
    assert_eq!(got["dsb_ish"], 1);
}

/// x86: per PTE 1 L, 1 XCHG, 1 S either way (batched: the first ptep_get
/// plus 15 scanned by folio_pte_batch); batched adds 2 P (page_folio,
/// folio_nr_pages); RW→R needs a flush (pte_flags_need_flush: RW changed):
/// 16 pages ≤ 33 → 16 INVLPG. One loop pass batched, 16 per PTE
/// (`mprotect_pass`). Batched, the generic modify_prot_start_ptes() /
/// modify_prot_commit_ptes() loops make one ptep_modify_prot_start() /
/// ptep_modify_prot_commit() round trip per entry: the 15 after the first
/// are `modify_prot_pte` (the first's is in the pass); per PTE none.
#[test]
fn mprotect_64k_x86() {
    let common = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pmd_load", 1),
        ("ptl_lock", 1),
        ("pte_load", 16),
        ("pte_atomic_clear", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 1),
        ("tlbi_page", 16),
    ];
    let mut after = m(&common);
    after.insert("struct_page_line".into(), 2);
    after.insert("mprotect_pass".into(), 1);
    after.insert("modify_prot_pte".into(), 15);
    assert_eq!(
        last_line(MPROTECT_64K, ArchKind::X86_64, Before::empty(), X86),
        after
    );
    let mut before = m(&common);
    before.insert("mprotect_pass".into(), 16);
    assert_eq!(
        last_line(
            MPROTECT_64K,
            ArchKind::X86_64,
            Before::MPROTECT_PTE_BATCH,
            X86
        ),
        before
    );
}

/// mprotect of order-0 pages: 6.17+ reads the page's folio for every PTE
/// (1 P each), the per-PTE path (RW→R) none: the small-folio regression
/// (x86 pte_needs_flush()). Everything else is equal.
#[test]
fn mprotect_4k_small_folio_regression() {
    let src = "p = mmap 16K at 0x7f00_0000_0000 fixed
write p 16K
mprotect p 16K r
";
    for arch in ArchKind::ALL {
        let f = if arch == ArchKind::Arm64 { N1 } else { X86 };
        let mut after = last_line(src, arch, Before::empty(), f);
        let before = last_line(src, arch, Before::MPROTECT_PTE_BATCH, f);
        assert_eq!(after.remove("struct_page_line"), Some(4), "{arch:?}");
        assert_eq!(after, before, "{arch:?}");
    }
}

const UFFD_MOVE: &str = "p = mmap 8K at 0x7f00_0000_0000 fixed
s = mmap 8K at 0x7f00_0020_0000 fixed
write s 8K
uffd open
uffd register p 8K missing
uffd move p s 8K
";

/// UFFDIO_MOVE of 2 small pages. Both ways: syscall 1 + vma_lookup 1, the
/// ioctl's VMA and map_changing locks (uffd_move_lock 1); the
/// destination PTE table is allocated (1 alloc, 1 PMD store); per page 1 X,
/// 1 rmap update, 1 S.
/// 6.18 (batched): one step (2 PMD reads, 2 PTLs, folio lookup 1 P,
/// folio_get + trylock + unlock + put = 4 atomics); loads: dst and src
/// ptep_get (2), the re-check of src (1), per page the clear's and
/// set_pte_at's unfold checks on arm64 (2 × 2), check_ptes_for_batched_move
/// for page 2: dst and src (2) plus 1 P and trylock/unlock (2 atomics); one
/// flush_tlb_range of 2 pages at the end; the step's anon_vma lock (1).
/// ≤6.17 (per page): 2 steps, each 2 PMD reads, 2 PTLs, 1 P, 4 atomics,
/// an anon_vma lock,
/// loads dst + src + src re-check + dst re-check (+2 unfold checks on
/// arm64), and ptep_clear_flush's one-page flush.
#[test]
fn uffd_move_two_pages() {
    let common = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pt_page_alloc", 1),
        ("pmd_store", 1),
        ("pte_atomic_clear", 2),
        ("rmap_update", 2),
        ("pte_store", 2),
        ("struct_page_line", 2),
        ("uffd_move_lock", 1),
    ];
    let mut after = m(&common);
    after.extend(m(&[
        ("anon_vma_lock", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("folio_ref_atomic", 6),
        ("pte_load", 2 + 1 + 4 + 2),
        ("tlb_flush_call", 1),
        ("dsb_ishst", 1),
        ("tlbi_page", 2),
        ("dsb_ish", 1),
    ]));
    assert_eq!(
        last_line(UFFD_MOVE, ArchKind::Arm64, Before::empty(), N1),
        after
    );
    let mut before = m(&common);
    before.extend(m(&[
        ("anon_vma_lock", 2),
        ("pmd_load", 4),
        ("ptl_lock", 4),
        ("folio_ref_atomic", 8),
        ("pte_load", 2 * 6),
        ("tlb_flush_call", 2),
        ("dsb_ishst", 2),
        ("tlbi_page", 2),
        ("dsb_ish", 2),
    ]));
    assert_eq!(
        last_line(UFFD_MOVE, ArchKind::Arm64, Before::UFFD_MOVE_BATCH, N1),
        before
    );
    // x86: no unfold checks; the batched flush is 2 INVLPG in one call.
    let mut x86 = m(&common);
    x86.extend(m(&[
        ("anon_vma_lock", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("folio_ref_atomic", 6),
        ("pte_load", 5),
        ("tlb_flush_call", 1),
        ("tlbi_page", 2),
    ]));
    assert_eq!(
        last_line(UFFD_MOVE, ArchKind::X86_64, Before::empty(), X86),
        x86
    );
}

/// UFFDIO_COPY of 2 pages (the seed-5 baseline): per page a PMD read and
/// PTL, the pte_none check (1 L; arm64 +1 L in set_pte_at), a folio
/// allocation, a 4 KiB copy_from_user, folio_add_new_anon_rmap (1 P, plain
/// stores), 1 reference, 1 S; no TLB flush; once per ioctl (not per page)
/// mfill_atomic()'s locks — uffd_mfill_lock() on the destination VMA and
/// ctx->map_changing_lock — taken after the VMA is found and validated
/// (uffd_mfill_lock 1). Not affected by any switch.
#[test]
fn uffd_copy_two_pages() {
    let common = [
        ("syscall", 1),
        ("uffd_mfill_lock", 1),
        ("vma_lookup", 1),
        ("pt_page_alloc", 1),
        ("pmd_store", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("folio_alloc", 2),
        ("page_copy", 2),
        ("struct_page_line", 2),
        ("folio_ref_atomic", 2),
        ("pte_store", 2),
    ];
    let src = UFFD_MOVE.replace("uffd move", "uffd copy");
    let mut arm = m(&common);
    arm.insert("pte_load".into(), 4);
    let mut x86 = m(&common);
    x86.insert("pte_load".into(), 2);
    for b in [Before::empty(), Before::all()] {
        assert_eq!(last_line(&src, ArchKind::Arm64, b, N1), arm);
        assert_eq!(last_line(&src, ArchKind::X86_64, b, X86), x86);
    }
}

/// Every seed scenario runs on the model with small parameters, on both
/// architectures, with and without its switch.
#[test]
fn seed_scenarios_run_small() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/seeds");
    let seeds = [
        ("mremap-batch-4k", "mremap-pte-batch"),
        ("mremap-batch-64k", "mremap-pte-batch"),
        ("mremap-table-aligned", "mremap-table-move"),
        ("mremap-table-unaligned", "mremap-table-move"),
        ("fork-4k", "fork-pte-batch"),
        ("fork-thp-pte", "fork-pte-batch"),
        ("mprotect-thp-pte", "mprotect-pte-batch"),
        ("mprotect-64k", "mprotect-pte-batch"),
        ("mprotect-4k", "mprotect-pte-batch"),
        ("uffd-copy", "uffd-move-batch"),
        ("uffd-move", "uffd-move-batch"),
    ];
    for (name, switch) in seeds {
        let path = format!("{dir}/{name}.ptl");
        let src = std::fs::read_to_string(&path).expect("seed scenario exists");
        let script = ptlab_scenario::parse(&path, &src).expect("parses");
        let mut params = Vec::new();
        for (p, _, _) in script.params() {
            match p.as_str() {
                "iterations" => params.push((p, "2".to_string())),
                "size" => params.push((p, "4M".to_string())),
                _ => {}
            }
        }
        let sw = Before::from_switch(switch).unwrap();
        for arch in ArchKind::ALL {
            for b in [Before::empty(), sw] {
                let r = run_events(&src, &path, arch, b, &params, N1)
                    .unwrap_or_else(|e| panic!("{name} {arch:?} {b:?}: {e}"));
                assert!(!r.total.is_zero(), "{name}");
                // Again with the model's invariants checked after every
                // statement.
                let mut cfg = ptlab_model::ModelConfig::for_arch(arch);
                cfg.before = b;
                let mut backend =
                    ptlab_scenario::ModelBackend::new(cfg).check_every_statement(true);
                let opts = ptlab_scenario::RunOptions {
                    params: params.clone(),
                    ..Default::default()
                };
                let rep = ptlab_scenario::run(&script, &mut backend, &opts);
                assert!(rep.passed(), "{name} {arch:?} {b:?}: {:?}", rep.failures);
            }
        }
    }
}

/// The zap's TLB flush covers what its mmu_gather gathered, not the whole
/// zapped range (tlb_remove_tlb_entries() grows the gather's range per
/// present batch; tlb_end_vma() flushes [tlb->start, tlb->end) at the
/// unmap stride). MADV_DONTNEED of 1 MiB with only pages 0 and 16 present,
/// x86: zap_pte_range reads 256 entries (256 L), 1 PMD read, 1 PTL;
/// get_and_clear_full_ptes clears the 2 present entries (2 X); each is a
/// small folio: zap_present_ptes() reads its struct page (1 P),
/// folio_remove_rmap_ptes() touches the page's mapcount (1 P, 1 mapcount
/// atomic), the last folio_put() (1 ref atomic) frees it (1 folio free).
/// The gathered span is 17 pages ≤ the 33-page
/// ceiling: 17 INVLPG (flushing the whole 256-page range would have been one
/// full flush). No table is reclaimed (the zap covers half the table).
#[test]
fn dontneed_flushes_the_gathered_span_x86() {
    let src = "p = mmap 1M at 0x7f00_0000_0000 fixed
write p 4K
write p + 64K 4K
madvise p 1M dontneed
";
    let got = last_line(src, ArchKind::X86_64, Before::empty(), X86);
    let want = m(&[
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pmd_load", 1),
        ("ptl_lock", 1),
        ("pte_load", 256),
        ("pte_atomic_clear", 2),
        ("struct_page_line", 4),
        ("mapcount_atomic", 2),
        ("folio_ref_atomic", 2),
        ("folio_free", 2),
        ("tlb_flush_call", 1),
        ("tlbi_page", 17),
    ]);
    assert_eq!(got, want);
}

// ---- Whole-program events: the fault path and the user's own accesses ----
//
// Each fault counts, besides the page-table figure's coarse `page_fault`,
// `folio_alloc`, `page_zero` and `user_page_access`, their refinements
// (docs/cost.md "Two figures"): fault_entry + fault_handle per fault
// (exc_page_fault / do_page_fault), one allocator path per new folio by
// order (rmqueue(): pcp_allowed_order() is order <= 3 or the PMD order →
// folio_alloc_pcp, orders 4-8 → folio_alloc_buddy) with memcg_charge and
// lru_add (alloc_anon_folio → mem_cgroup_charge; folio_add_lru_vma), the
// zeroing by size (clear_page_4k below the PMD order, clear_huge_4k for a
// 2 MiB folio; folio_zero_user clears every 4 KiB page) and the user's
// stores or loads per 4 KiB page.

/// The whole-program (fine) events of the last line of `src`.
fn fine(src: &str, arch: ArchKind) -> BTreeMap<String, u64> {
    last_events(src, arch, Before::empty(), N1)
        .nonzero()
        .filter(|(e, _)| e.is_fine())
        .map(|(e, c)| (e.name().to_string(), c))
        .collect()
}

/// The coarse event of the last line.
fn coarse(src: &str, arch: ArchKind, e: &str) -> u64 {
    last_line(src, arch, Before::empty(), N1)
        .get(e)
        .copied()
        .unwrap_or(0)
}

/// One 4 KiB write fault: do_anonymous_page() allocates an order-0 folio
/// (pcp), charges it, zeroes 4 KiB (clear_page), adds it to the LRU; the
/// store then writes the page (1 user_store_4k).
#[test]
fn fault_path_4k_write() {
    let src = "p = mmap 4K at 0x7f00_0000_0000 fixed\nwrite p 4K\n";
    for arch in ArchKind::ALL {
        assert_eq!(
            fine(src, arch),
            m(&[
                ("fault_entry", 1),
                ("fault_handle", 1),
                ("folio_alloc_pcp", 1),
                ("memcg_charge", 1),
                ("lru_add", 1),
                ("clear_page_4k", 1),
                ("user_store_4k", 1),
            ]),
            "{arch:?}"
        );
        // The coarse events are unchanged: 1 fault, 1 folio, 1 page zeroed,
        // 1 page accessed.
        for e in ["page_fault", "folio_alloc", "page_zero", "user_page_access"] {
            assert_eq!(coarse(src, arch, e), 1, "{arch:?} {e}");
        }
    }
}

/// One 64 KiB mTHP write fault: one fault maps the whole order-4 folio
/// (buddy: pcp_allowed_order(4) is false), zeroes 16 × 4 KiB below the PMD
/// order (clear_page_4k), and the write stores 16 pages (the first through
/// the fault, 15 over the mapped run). The per-layout subsets (issue 15,
/// layout_event_counts.rs): the 15 stores over the run are
/// `user_store_4k_large`, and the rmap add of 16 pages reads 15 struct
/// page lines after the first (`struct_page_line_large`).
#[test]
fn fault_path_64k_mthp_write() {
    let src = "thp 64K always\np = mmap 64K at 0x7f00_0000_0000 fixed\nwrite p 64K\n";
    for arch in ArchKind::ALL {
        assert_eq!(
            fine(src, arch),
            m(&[
                ("fault_entry", 1),
                ("fault_handle", 1),
                ("folio_alloc_buddy", 1),
                ("memcg_charge", 1),
                ("lru_add", 1),
                ("clear_page_4k", 16),
                ("user_store_4k", 16),
                ("user_store_4k_large", 15),
                ("struct_page_line_large", 15),
            ]),
            "{arch:?}"
        );
        assert_eq!(coarse(src, arch, "page_zero"), 16);
        assert_eq!(coarse(src, arch, "folio_alloc"), 1);
    }
}

/// One 2 MiB THP write fault: do_huge_pmd_anonymous_page() takes an
/// order-9 folio (the pageblock order: pcp), zeroes 512 × 4 KiB of a
/// PMD-size folio (clear_huge_4k), and the write stores 512 pages. The
/// deposited page table is a page-table page (pt_page_alloc), not a folio,
/// so it has no fine events.
#[test]
fn fault_path_2m_thp_write() {
    let src = "thp 2M always\np = mmap 2M at 0x7f00_0000_0000 fixed\nwrite p 2M\n";
    for arch in ArchKind::ALL {
        assert_eq!(
            fine(src, arch),
            m(&[
                ("fault_entry", 1),
                ("fault_handle", 1),
                ("folio_alloc_pcp", 1),
                ("memcg_charge", 1),
                ("lru_add", 1),
                ("clear_huge_4k", 512),
                ("user_store_4k", 512),
            ]),
            "{arch:?}"
        );
        assert_eq!(coarse(src, arch, "page_zero"), 512);
        // The first fault in an empty mm allocates the PUD and the PMD
        // table, and the PTE table deposited with the PMD mapping.
        assert_eq!(coarse(src, arch, "pt_page_alloc"), 3);
    }
}

/// A read fault maps the shared zero page: no folio, no zeroing; the read
/// loads one page. A second read of the mapped page takes no fault.
#[test]
fn fault_path_read_zero_page_and_mapped_reads() {
    let src = "p = mmap 8K at 0x7f00_0000_0000 fixed\nread p 4K\n";
    for arch in ArchKind::ALL {
        assert_eq!(
            fine(src, arch),
            m(&[("fault_entry", 1), ("fault_handle", 1), ("user_load_4k", 1)]),
            "{arch:?}"
        );
    }
    let again = "p = mmap 8K at 0x7f00_0000_0000 fixed\nwrite p 8K\nread p 8K\n";
    assert_eq!(fine(again, ArchKind::X86_64), m(&[("user_load_4k", 2)]));
}

/// A CoW write fault after fork: wp_page_copy() allocates an order-0 folio
/// (pcp, charged, LRU) and copies the page (page_copy, priced in both
/// figures) instead of zeroing it.
#[test]
fn fault_path_cow_copy() {
    let src = "p = mmap 4K at 0x7f00_0000_0000 fixed\nwrite p 4K\nfork child\nwrite p 4K\n";
    assert_eq!(
        fine(src, ArchKind::X86_64),
        m(&[
            ("fault_entry", 1),
            ("fault_handle", 1),
            ("folio_alloc_pcp", 1),
            ("memcg_charge", 1),
            ("lru_add", 1),
            ("user_store_4k", 1),
        ])
    );
    assert_eq!(coarse(src, ArchKind::X86_64, "page_copy"), 1);
}

/// The refinement invariant over every seed workload (small sizes), both
/// arms, both architectures: each coarse event's count equals the sum of
/// its refinements', line by line, so the two figures price the same work.
#[test]
fn fine_events_refine_the_coarse_ones_exactly() {
    use ptlab_model::HwEvent as E;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/seeds");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "ptl") {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        let script = ptlab_scenario::parse(&path.display().to_string(), &src).unwrap();
        let mut params = Vec::new();
        for (p, _, _) in script.params() {
            match p.as_str() {
                "iterations" => params.push((p, "2".to_string())),
                "size" => params.push((p, "4M".to_string())),
                _ => {}
            }
        }
        for arch in ArchKind::ALL {
            for b in [Before::empty(), Before::all()] {
                let run = run_events(&src, "t.ptl", arch, b, &params, N1).unwrap();
                for l in &run.lines {
                    let g = |e| l.events.get(e);
                    let what = format!("{} {arch:?} line {}", path.display(), l.line);
                    assert_eq!(g(E::PageFault), g(E::FaultEntry), "{what}");
                    assert_eq!(g(E::PageFault), g(E::FaultHandle), "{what}");
                    assert_eq!(
                        g(E::FolioAlloc),
                        g(E::FolioAllocPcp) + g(E::FolioAllocBuddy),
                        "{what}"
                    );
                    assert_eq!(g(E::FolioAlloc), g(E::MemcgCharge), "{what}");
                    assert_eq!(g(E::FolioAlloc), g(E::LruAdd), "{what}");
                    assert_eq!(
                        g(E::PageZero),
                        g(E::ClearPage4k) + g(E::ClearHuge4k),
                        "{what}"
                    );
                    assert_eq!(
                        g(E::UserPageAccess),
                        g(E::UserStore4k) + g(E::UserLoad4k),
                        "{what}"
                    );
                }
            }
        }
    }
}

/// (take_rmap_locks() calls, `rmap_lock` events) of the last line of
/// `src` on both arches (the count does not depend on the arch).
fn rmap_locks(src: &str, before: Before) -> (u64, u64) {
    let mut seen = None;
    for (arch, f) in [(ArchKind::X86_64, X86), (ArchKind::Arm64, N1)] {
        let e = last_events(src, arch, before, f);
        let got = (
            e.calls(ptlab_model::KCall::TakeRmapLocks),
            e.get(ptlab_model::HwEvent::RmapLock),
        );
        assert!(
            seen.is_none_or(|s| s == got),
            "{arch:?}: {got:?} vs {seen:?}"
        );
        seen = Some(got);
    }
    seen.expect("two arches")
}

/// The table move's rmap locks (issue 15, twelfth session), by hand from
/// mm/mremap.c (6.18): move_page_tables() calls move_pgt_entry() for
/// every PUD-sized extent over a PMD table (NORMAL_PUD) and every
/// PMD-sized extent over a PTE table (NORMAL_PMD), and
/// should_take_rmap_locks() is true for both whatever the move:
/// take_rmap_locks() → anon_vma_lock_write() (the VMA was written, so it
/// has an anon_vma), drop_rmap_locks() after. A PMD-leaf move
/// (HPAGE_PMD) and move_ptes() take them only when
/// `pmc->need_rmap_locks`, which copy_vma() sets only when it merges the
/// destination into a VMA at or below the source's pgoff: a move to a
/// fresh VMA takes none there.
///
/// - 2 MiB aligned within one PUD slot (TABLE): 1 NORMAL_PMD → (1, 1).
/// - 8 MiB aligned: 4 NORMAL_PMD → (4, 4).
/// - 2 MiB aligned into the next PUD slot: (1, 1), as within one.
/// - the same with a PMD THP: HPAGE_PMD, need_rmap_locks false → (0, 0).
/// - 2 MiB to 1 MiB into a PMD: move_ptes() in two extents, no table
///   move tried (the extent is never PMD-sized) → (0, 0).
/// - `--before mremap-table-move` (before 4.20: no move_pgt_entry()),
///   aligned: (0, 0).
/// - 1 GiB, PUD-aligned both ways, one page written: the extent is
///   PUD-sized over a PMD table → 1 NORMAL_PUD, which moves the whole
///   PMD table (no PMD-level step) → (1, 1).
/// - a VMA only read (zero-page PTEs: do_anonymous_page() does not
///   anon_vma_prepare() for a read): NORMAL_PMD calls take_rmap_locks(),
///   which finds no anon_vma → (1, 0).
#[test]
fn table_move_takes_the_rmap_locks() {
    assert_eq!(rmap_locks(TABLE, Before::empty()), (1, 1));
    let eight = "thp 2M never
p = mmap 8M at 0x7f00_0000_0000 fixed
write p 8M
q = mremap p 8M 8M maymove fixed 0x7f00_0080_0000
";
    assert_eq!(rmap_locks(eight, Before::empty()), (4, 4));
    let across = |thp: &str| {
        format!(
            "thp 2M {thp}
p = mmap 2M at 0x7f00_0000_0000 fixed
write p 2M
q = mremap p 2M 2M maymove fixed 0x7f00_4000_0000
"
        )
    };
    assert_eq!(rmap_locks(&across("never"), Before::empty()), (1, 1));
    assert_eq!(rmap_locks(&across("always"), Before::empty()), (0, 0));
    let unaligned = "thp 2M never
p = mmap 2M at 0x7f00_0000_0000 fixed
write p 2M
q = mremap p 2M 2M maymove fixed 0x7f00_0050_0000
";
    assert_eq!(rmap_locks(unaligned, Before::empty()), (0, 0));
    assert_eq!(rmap_locks(TABLE, Before::MREMAP_TABLE_MOVE), (0, 0));
    let pud = "thp 2M never
p = mmap 1G at 0x7f00_0000_0000 fixed
write p 4K
q = mremap p 1G 1G maymove fixed 0x7f00_8000_0000
";
    assert_eq!(rmap_locks(pud, Before::empty()), (1, 1));
    let read_only = "thp 2M never
p = mmap 2M at 0x7f00_0000_0000 fixed
read p 2M
q = mremap p 2M 2M maymove fixed 0x7f00_0040_0000
";
    assert_eq!(rmap_locks(read_only, Before::empty()), (1, 0));
}

/// need_rmap_locks (mm/vma.c copy_vma()): the second page of a written
/// 2-page VMA A (pgoff P) is moved away to a fresh VMA B (pgoff P + 1;
/// no locks: (0, 0)), then moved back beside A: copy_vma() merges the
/// destination into A, whose pgoff P is at or below B's, so
/// need_rmap_locks is true and move_ptes() takes the locks for its one
/// extent: (1, 1). Moved instead to a free spot (a fresh VMA): (0, 0).
#[test]
fn a_move_merged_below_the_source_takes_the_rmap_locks() {
    let src = |back: &str| {
        format!(
            "thp 2M never
p = mmap 8K at 0x7f00_0000_0000 fixed
write p 8K
q = mremap p + 4K 4K 4K maymove fixed 0x7f00_0100_0000
r = mremap q 4K 4K maymove fixed {back}
"
        )
    };
    assert_eq!(
        rmap_locks(&src("0x7f00_0000_1000"), Before::empty()),
        (1, 1)
    );
    assert_eq!(
        rmap_locks(&src("0x7f00_0200_0000"), Before::empty()),
        (0, 0)
    );
}

// ---- The flush of freed page tables at munmap (issue 15, thirteenth session)
//
// The kernel path (6.17/6.18): munmap → vms_complete_munmap_vmas() →
// vms_clear_ptes(): one mmu_gather for unmap_vmas() (the zap) and
// free_pgtables() (floor and ceiling: the neighbours' bounds, 0 without
// one) → free_pgd_range(): `addr &= PMD_MASK`, one PMD up when below the
// floor; `end` one PMD down when past `ceiling & PMD_MASK`. Each freed
// table is gathered by its *_free_tlb() as ONE PAGE at its parent entry's
// span start: free_pte_range() → pte_free_tlb(addr) =
// tlb_flush_pmd_range(addr, 4K) (PMD-aligned addr); free_pmd_range() →
// pmd_free_tlb(start & PUD_MASK) = tlb_flush_pud_range(.., 4K), freed when
// that PUD span lies in [floor, ceiling); free_pud_range() →
// pud_free_tlb(start & P4D_MASK) = tlb_flush_p4d_range(.., 4K); all set
// freed_tables. tlb_finish_mmu() flushes [tlb->start, tlb->end) at
// tlb_get_unmap_shift(): PAGE if PTEs were cleared, else PMD, PUD, P4D
// (512 GiB).
// x86 selects MMU_GATHER_MERGE_VMAS: tlb_end_vma() does not flush, so the
// zap's range and the freed tables' pages are ONE flush_tlb_mm_range();
// get_flush_tlb_info() goes full when (end - start) >> stride_shift > 33
// (the range unrounded), else flush_tlb_func() issues one INVLPG per
// stride from start while below end. arm64 flushes each VMA's zap at
// tlb_end_vma() (which resets the range) and the freed tables apart:
// tlb_flush() → __flush_tlb_range(start, end, stride, last_level =
// !freed_tables = false: TLBI VAE1IS, no TTL hint) with start/end rounded
// to the stride; ASID-wide when N1 has (end - start) >= 512 strides or the
// pages exceed MAX_TLBI_RANGE_PAGES (2 Mi pages, both N1 and range).
// All scenarios sit at A = 0x7f00_0000_0000, which is 512 GiB-aligned, so
// with no neighbours the PTE, PMD and PUD tables are all freed and
// pud_free_tlb() passes A itself.

/// The flush events (and freed tables) of the last line of `src`.
fn flushes(src: &str, arch: ArchKind, f: HwFeatures) -> BTreeMap<String, u64> {
    let keep = [
        "tlb_flush_call",
        "tlbi_page",
        "tlbi_range",
        "tlbi_asid",
        "dsb_ishst",
        "dsb_ish",
        "pt_page_free",
    ];
    last_line(src, arch, Before::empty(), f)
        .into_iter()
        .filter(|(k, _)| keep.contains(&k.as_str()))
        .collect()
}

/// arm64 flush events: `calls` flush calls, each one DSB ISHST … DSB ISH
/// pair, `asid` of them ASID-wide, `ranges` range TLBIs and `pages` single
/// ones besides.
fn arm(calls: u64, asid: u64, ranges: u64, pages: u64, freed: u64) -> BTreeMap<String, u64> {
    let mut e = m(&[
        ("tlb_flush_call", calls),
        ("dsb_ishst", calls),
        ("dsb_ish", calls),
        ("tlbi_asid", asid),
        ("tlbi_range", ranges),
        ("tlbi_page", pages),
        ("pt_page_free", freed),
    ]);
    e.retain(|_, v| *v > 0);
    e
}

/// x86 flush events: `calls` flush_tlb_mm_range() calls, `full` of them
/// full flushes, `invlpg` INVLPGs.
fn x86(calls: u64, full: u64, invlpg: u64, freed: u64) -> BTreeMap<String, u64> {
    let mut e = m(&[
        ("tlb_flush_call", calls),
        ("tlbi_asid", full),
        ("tlbi_page", invlpg),
        ("pt_page_free", freed),
    ]);
    e.retain(|_, v| *v > 0);
    e
}

/// munmap of 2 MiB of written 4 KiB pages, no neighbours: the zap gathers
/// [A, A + 2M) at PAGE level; the PTE, PMD and PUD tables are freed (3
/// frees): pte_free_tlb(A), pmd_free_tlb(A), pud_free_tlb(A) add [A, A+4K).
/// x86: one flush of [A, A + 2M) at 4 KiB stride, 512 > 33: full. (Before
/// this session the model flushed twice: the zap at tlb_end_vma(), then
/// the tables.) arm64: tlb_end_vma() flushes the zap (N1: 512 pages ≥
/// MAX_DVM_OPS → ASID-wide; range: 512 pages = one RVALE1IS, scale 1 num
/// 7); the tables' [A, A+4K) at PMD stride rounds to one 2 MiB stride:
/// one TLBI VAE1IS (N1) / one range op (512 pages ≠ 1).
#[test]
fn munmap_2m_of_4k_pages_frees_three_tables() {
    let src = "thp 2M never
p = mmap 2M at 0x7f00_0000_0000 fixed
write p 2M
munmap p 2M
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(1, 1, 0, 3));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(2, 1, 0, 1, 3));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(2, 0, 2, 0, 3));
}

/// munmap of 1 GiB of 4 KiB pages, one page written per 2 MiB (512 pages:
/// the gather's page batches never fill, so no flush happens mid-zap; a
/// fully written GiB would flush every ~9,700 pages when
/// __tlb_remove_folio_pages() runs out of batch pages, which the model does
/// not count). 512 PTE tables + the PMD table + the PUD table freed (514),
/// through tlb_remove_table(): the 509th (MAX_TABLE_BATCH) fills the table
/// batch, and tlb_table_flush() → tlb_table_invalidate() flushes what is
/// gathered and starts the range over. x86: the zap's [A, A + 1G − 2M +
/// 4K) with tables 0–508: full; then tables 509–511 and the PMD and PUD
/// tables' [A, A + 511 × 2M + 4K) at PMD stride, 511 > 33: full — two
/// full flushes, as measured live (tlb:tlb_flush). arm64: the zap at
/// tlb_end_vma() (N1 ≥ 512 pages: ASID-wide; range: 261,633 pages =
/// scale 3 num 2, scale 2 num 30, scale 1 num 23, then one page: 3 ops + 1
/// TLBI); the batch flush [A, A + 508 × 2M + 4K) at PMD stride → 509
/// strides (N1 < 512: 509 TLBIs; range 260,608 pages = scale 3 num 2,
/// scale 2 num 30, scale 1 num 7: 3 ops); the rest [A, A + 511 × 2M + 4K)
/// → [A, A + 1G) (N1 512 strides: ASID-wide; range one op).
#[test]
fn munmap_1g_of_4k_pages_frees_514_tables() {
    let src = "thp 2M never
p = mmap 1G at 0x7f00_0000_0000 fixed
repeat 512 as i
  write p + i * 2M 4K
end
munmap p 1G
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(2, 2, 0, 514));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(3, 2, 0, 509, 514));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(3, 0, 7, 1, 514));
}

/// munmap of 1 GiB of PMD THPs (512 PMD leaves; each zap_huge_pmd() frees
/// its deposited PTE table with pte_free(), outside the gather: 512 frees)
/// then free_pgtables() frees the PMD table and the PUD table (2 more).
/// Zap: 512 × tlb_remove_pmd_tlb_entry() = [A, A + 1G) at PMD level.
/// x86: one flush of [A, A + 1G) at PMD stride, 512 > 33: full (before:
/// two full flushes). arm64: tlb_end_vma() flushes [A, A + 1G) at PMD
/// stride (N1: 512 strides → ASID-wide; range: 262,144 pages, one op);
/// then only the tables: pmd_free_tlb(A) (PUD level) and pud_free_tlb(A)
/// (P4D level): [A, A+4K) at PUD stride → [A, A + 1G), 262,144 pages:
/// N1 one TLBI VAE1IS (1 GiB < 512 GiB; before this session: the span of
/// 512 PMDs, ASID-wide), range one op.
#[test]
fn munmap_1g_of_pmd_thps_flushes_the_pmd_table_once() {
    let src = "thp 2M always
p = mmap 1G at 0x7f00_0000_0000 fixed
write p 1G
munmap p 1G
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(1, 1, 0, 514));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(2, 1, 0, 1, 514));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(2, 0, 2, 0, 514));
}

/// A 64 GiB sparse mapping with one page written, at its start: the zap
/// gathers [A, A+4K) (PAGE level); the PTE table at A, the PMD table at A
/// and the PUD table at A are freed. x86: one flush of [A, A+4K) at 4 KiB:
/// 1 INVLPG (before: the zap's INVLPG, then the span of 32,768 PMDs: a
/// full flush). arm64: tlb_end_vma() flushes the one page (N1 one TLBI;
/// range: 1 page → a single TLBI, not a range op), then [A, A+4K) at PMD
/// stride → one 2 MiB stride: one TLBI (N1) / one range op (512 pages).
/// Before: [A, A + 64G) at PMD stride, ASID-wide on both.
#[test]
fn munmap_64g_sparse_with_one_page_at_its_start() {
    let src = "thp 2M never
p = mmap 64G at 0x7f00_0000_0000 fixed noreserve
write p 4K
munmap p 64G
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(1, 0, 1, 3));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(2, 0, 0, 2, 3));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(2, 0, 1, 1, 3));
}

/// The same 64 GiB with its one page in the middle (A + 32G): the PTE
/// table's pte_free_tlb(A + 32G), the PMD table's pmd_free_tlb(A + 32G),
/// but the PUD table's pud_free_tlb() passes A (its 512 GiB span's start).
/// x86: the merged range [A, A + 32G + 4K) at 4 KiB stride: full. arm64:
/// the zap's page (N1 one TLBI; range one TLBI), then [A, A + 32G + 4K) at
/// PMD stride → 16,385 strides, 8,389,120 pages: ASID-wide on both.
/// With a neighbour VMA at A + 128G the PUD table stays (its span reaches
/// past the ceiling): the PTE and PMD tables' pages are both A + 32G.
/// x86: 1 INVLPG; arm64: the page, then one 2 MiB stride (N1 one TLBI;
/// range one op).
#[test]
fn munmap_64g_sparse_with_one_page_inside() {
    let alone = "thp 2M never
p = mmap 64G at 0x7f00_0000_0000 fixed noreserve
write p + 32G 4K
munmap p 64G
";
    assert_eq!(flushes(alone, ArchKind::X86_64, X86), x86(1, 1, 0, 3));
    assert_eq!(flushes(alone, ArchKind::Arm64, N1), arm(2, 1, 0, 1, 3));
    assert_eq!(flushes(alone, ArchKind::Arm64, RANGE), arm(2, 1, 0, 1, 3));
    let kept = "thp 2M never
n = mmap 4K at 0x7f20_0000_0000 fixed
p = mmap 64G at 0x7f00_0000_0000 fixed noreserve
write p + 32G 4K
munmap p 64G
";
    assert_eq!(flushes(kept, ArchKind::X86_64, X86), x86(1, 0, 1, 2));
    assert_eq!(flushes(kept, ArchKind::Arm64, N1), arm(2, 0, 0, 2, 2));
    assert_eq!(flushes(kept, ArchKind::Arm64, RANGE), arm(2, 0, 1, 1, 2));
}

/// Freeing limited by the neighbours: a 4 KiB VMA at A (floor A + 4K), the
/// unmapped 6 MiB at [A + 1M, A + 7M) written, a 4 KiB VMA at A + 7.5M
/// (ceiling). free_pgd_range(A + 1M, A + 7M, A + 4K, A + 7.5M): addr → A,
/// below the floor → A + 2M; ceiling & PMD_MASK = A + 6M < end → end − 2M
/// = A + 5M: the PTE tables at A + 2M and A + 4M are freed (the ones at A
/// and A + 6M stay with the neighbours); the PMD table's PUD span starts
/// at A < floor: kept. x86: the merged [A + 1M, A + 7M) at 4 KiB: full.
/// arm64: the zap (N1: 1,536 pages, ASID-wide; range: scale 1 num 23, one
/// op), then [A + 2M, A + 4M + 4K) at PMD stride → [A + 2M, A + 6M): N1
/// 2 TLBIs (before: the span [A, A + 8M), 4), range one op (1,024
/// pages).
#[test]
fn munmap_between_neighbours_frees_the_tables_inside_floor_and_ceiling() {
    let src = "thp 2M never
n = mmap 4K at 0x7f00_0000_0000 fixed
write n 4K
o = mmap 4K at 0x7f00_0078_0000 fixed
write o 4K
p = mmap 6M at 0x7f00_0010_0000 fixed
write p 6M
munmap p 6M
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(1, 1, 0, 2));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(2, 1, 0, 2, 2));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(2, 0, 2, 0, 2));
}

/// mremap's unmap of the source: 128 MiB with pages written at A and at
/// A + 126M (two PTE tables), moved to A + 1G. move_page_tables() moves
/// the two tables (move_normal_pmd(): flush_tlb_range(old, old + 2M) at
/// PAGE stride each: x86 512 > 33 full; N1 512 pages ASID-wide; range one
/// op). The source unmap (do_vmi_munmap()) zaps nothing and frees the
/// emptied PMD table (floor 0; ceiling A + 1G, the moved VMA, so its PUD
/// span [A, A + 1G) is inside; the PUD table is shared with the
/// destination): pmd_free_tlb(A) = [A, A+4K) at PUD stride. x86: 1
/// INVLPG (before: the span of 64 PMDs, a full flush). arm64: [A, A + 1G)
/// at 1 GiB stride: N1 one TLBI VAE1IS (before: 64), range one op.
#[test]
fn mremap_source_unmap_flushes_its_freed_pmd_table() {
    let src = "thp 2M never
p = mmap 128M at 0x7f00_0000_0000 fixed
write p 4K
write p + 126M 4K
q = mremap p 128M 128M maymove fixed 0x7f00_4000_0000
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(3, 2, 1, 1));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(3, 2, 0, 1, 1));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(3, 0, 3, 0, 1));
}

/// x86's ceiling on the unrounded range: 34 (then 35) empty PTE tables a
/// PMD apart (one page written in each 2 MiB, then MADV_DONTNEED of that
/// page: the table stays, PT_RECLAIM frees only wholly zapped tables).
/// The munmap zaps nothing and frees 34 PTE tables, the PMD and the PUD
/// table: [A, A + 33 × 2M + 4K) at PMD stride. get_flush_tlb_info():
/// (end − start) >> 21 = 33, not above the ceiling, so flush_tlb_func()
/// issues 34 INVLPGs (one per stride from A while below end); with 35
/// tables 34 > 33: a full flush. arm64 (no zap flush: nothing gathered):
/// [A, A + 68M) at PMD stride: N1 34 TLBIs; range 17,408 pages = scale 2
/// num 7 (16,384) + scale 1 num 15 (1,024): 2 ops.
#[test]
fn freed_tables_at_the_x86_flush_ceiling() {
    let src = |n: u64| {
        format!(
            "thp 2M never
p = mmap {n} * 2M at 0x7f00_0000_0000 fixed
repeat {n} as i
  write p + i * 2M 4K
  madvise p + i * 2M 4K dontneed
end
munmap p {n} * 2M
"
        )
    };
    assert_eq!(flushes(&src(34), ArchKind::X86_64, X86), x86(1, 0, 34, 36));
    assert_eq!(flushes(&src(35), ArchKind::X86_64, X86), x86(1, 1, 0, 37));
    assert_eq!(flushes(&src(34), ArchKind::Arm64, N1), arm(1, 0, 0, 34, 36));
    assert_eq!(
        flushes(&src(34), ArchKind::Arm64, RANGE),
        arm(1, 0, 2, 0, 36)
    );
}

/// PMD tables are flushed at PUD stride: 4 GiB with one PMD THP at the
/// start of each GiB (4 PMD leaves, each with its deposited PTE table:
/// 4 frees by zap_huge_pmd()), then 4 PMD tables (pmd_free_tlb(A + i G))
/// and the PUD table freed: 9 frees. The zap gathers [A, A + 3G + 2M) at
/// PMD level. x86: merged, (3G + 2M) >> 21 = 1,537 > 33: full. arm64:
/// tlb_end_vma() flushes the zap (N1: ≥ 512 PMD strides, ASID-wide; range:
/// 786,944 pages = scale 3 num 11 + scale 1 num 7: 2 ops); then the
/// tables' [A, A + 3G + 4K) at PUD stride → [A, A + 4G): N1 4 TLBI VAE1IS,
/// range 1,048,576 pages = one op (scale 3 num 15). At PMD stride the same
/// tables would have been ASID-wide on N1 (the model until this session).
#[test]
fn munmap_sparse_thps_flushes_their_pmd_tables_at_pud_stride() {
    let src = "thp 2M always
p = mmap 4G at 0x7f00_0000_0000 fixed noreserve
repeat 4 as i
  write p + i * 1G 2M
end
munmap p 4G
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(1, 1, 0, 9));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(2, 1, 0, 4, 9));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(2, 0, 3, 0, 9));
}

/// Two x86 details the live kernel shows (tlb:tlb_flush, 6.18 x86-64,
/// 4-level paging under a 5-level build). free_p4d_range() runs for every
/// PGD entry of the range (pgd_none() is false when the p4d is folded at
/// run time) and, when its 512 GiB lies in [floor, ceiling), calls
/// p4d_free_tlb(): the generic macro gathers [start, start + 4K) with
/// freed_tables and no cleared level, though __p4d_free_tlb() frees
/// nothing. So munmap of an untouched 2 MiB VMA alone in its 512 GiB is
/// one flush of one page (stride PAGE: no level cleared); arm64 folds the
/// p4d at build time (no-op p4d_free_tlb()): nothing. And the table
/// batch: 507 PTE tables + the PMD and PUD tables = 509 = MAX_TABLE_BATCH
/// flush when the PUD table fills the batch (merged zap range: full), and
/// p4d_free_tlb()'s page after it is one more flush of one page; 508 PTE
/// tables: the batch fills at the PMD table (full), then the PUD table
/// and the p4d page: [A, A+4K) at P4D stride, one INVLPG. Live: [1],
/// [-1, 1], [-1, 0] (pages = (end − start) >> stride_shift, −1 = full).
#[test]
fn x86_p4d_page_and_table_batch_match_the_live_kernel() {
    let untouched = "p = mmap 2M at 0x7f00_0000_0000 fixed
munmap p 2M
";
    assert_eq!(flushes(untouched, ArchKind::X86_64, X86), x86(1, 0, 1, 0));
    assert_eq!(flushes(untouched, ArchKind::Arm64, N1), arm(0, 0, 0, 0, 0));
    let tables = |n: u64| {
        format!(
            "thp 2M never
p = mmap {n} * 2M at 0x7f00_0000_0000 fixed
repeat {n} as i
  write p + i * 2M 4K
end
munmap p {n} * 2M
"
        )
    };
    assert_eq!(
        flushes(&tables(507), ArchKind::X86_64, X86),
        x86(2, 1, 1, 509)
    );
    assert_eq!(
        flushes(&tables(508), ArchKind::X86_64, X86),
        x86(2, 1, 1, 510)
    );
}

// The gather's page batches (issue 15, fifteenth session). Linux:
// mm/mmu_gather.c __tlb_remove_folio_pages_size(), tlb_next_batch();
// mm/memory.c zap_present_folio_ptes(), zap_pte_range();
// include/asm-generic/tlb.h tlb_remove_page_size(). Each zapped folio
// batch adds one entry (one page) or two (more pages:
// ENCODED_PAGE_BIT_NR_PAGES_NEXT); a batch with nr >= max − 1 after the
// add moves on: the local bundle (max MMU_GATHER_BUNDLE = 8) holds 7
// one-entry adds (or 4 two-entry ones), each of the 19 batch pages
// (MAX_GATHER_BATCH_COUNT = 10000 / 510, max MAX_GATHER_BATCH = 510) 509
// (or 255); when the 19th reaches its limit there is no next batch: full.
// So a full flush every 7 + 19 × 509 = 9,678 order-0 pages, or every
// 4 + 19 × 255 = 4,849 large-folio batches, or 9,678 PMD THPs.
// zap_pte_range() then flushes the gathered range up to the end of the
// batch that filled (tlb_flush_mmu_tlbonly()), frees the pages and the
// table batch (tlb_flush_mmu()) and goes on from the next entry with an
// empty range.

/// munmap of 1 GiB of written 4 KiB pages, no neighbours (262,144
/// order-0 batches): full at pages 9,678 × k for k = 1..27 (27 × 9,678 =
/// 261,306), each range from the previous fill's end (the first from A)
/// 9,678 pages long; then 838 pages are left. x86 (MERGE_VMAS): 27 full
/// flushes (9,678 > 33), then the table batch's flush at the 509th of the
/// 514 tables (the 838 pages + tables from A: full) and the last (tables
/// 509–511, the PMD, PUD tables and p4d page from A at PMD stride, 511 >
/// 33: full): 29 full. arm64 N1: 27 ASID-wide (9,678 ≥ 512 pages), the
/// 838 pages at tlb_end_vma() ASID-wide, the table batch [A, A + 508 × 2M
/// + 4K) at PMD stride = 509 TLBIs, the rest ASID-wide: 30 calls, 29
/// ASID. arm64 with ranges: 9,678 pages = scale 2 num 3 (8,192) + scale 1
/// num 22 (1,472) + scale 0 num 6 (14): 3 ops each, 81; 838 = scale 1
/// num 12 (832) + scale 0 num 2 (6): 2; the table batch 3 and the rest 1
/// (as in munmap_1g_of_4k_pages_frees_514_tables): 87 range ops. Before
/// this session: x86 2 full, N1 3 calls, range 3 calls.
#[test]
fn munmap_1g_of_written_4k_pages_flushes_per_page_batch() {
    let src = "thp 2M never
p = mmap 1G at 0x7f00_0000_0000 fixed
write p 1G
munmap p 1G
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(29, 29, 0, 514));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(30, 29, 0, 509, 514));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(30, 0, 87, 0, 514));
}

/// munmap of 9,688 written 4 KiB pages from A (19 PTE tables, the last
/// 472 pages used): the batches fill at page 9,678; the range then starts
/// over at the next entry, A + 9,678 × 4K. arm64 flushes the zap at
/// tlb_end_vma(), before the tables: the fill's [A, A + 9,678 × 4K) (N1
/// ASID-wide; range 3 ops, as above), then the 10 pages left (N1 10
/// TLBIs; range: scale 0 num 4, one op — a range started anywhere before
/// A + 9,678 × 4K would be more), then the 21 tables (19 PTE, the PMD and
/// PUD tables): [A, A + 18 × 2M + 4K) at PMD stride = 19 strides (N1 19
/// TLBIs; range 9,728 pages = scale 2 num 3 + scale 1 num 23: 2 ops).
/// x86 merges: the fill's range (full), then the 10 pages with the tables
/// from A (full).
#[test]
fn munmap_past_one_page_batch_starts_the_range_after_it() {
    let src = "thp 2M never
p = mmap 9688 * 4K at 0x7f00_0000_0000 fixed
write p 9688 * 4K
munmap p 9688 * 4K
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(2, 2, 0, 21));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(3, 1, 0, 29, 21));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(3, 0, 6, 0, 21));
}

/// munmap of 1 GiB of 64 KiB mTHPs: 16,384 batches of 16 pages, two
/// entries each: full at 4,849 × k batches, k = 1..3, each range 4,849 ×
/// 16 = 77,584 pages; 1,837 batches (29,392 pages) left. x86: 3 full,
/// then the table batch and the last flush (full, as for 4 KiB pages): 5.
/// N1: 3 + 1 (the rest at tlb_end_vma()) ASID-wide, the table batch's 509
/// TLBIs, the last ASID-wide: 6 calls, 5 ASID. Range: 77,584 = scale 3
/// num 0 (65,536) + scale 2 num 4 (10,240) + scale 1 num 27 (1,792) +
/// scale 0 num 7 (16): 4 ops each, 12; 29,392 = scale 2 num 13 (28,672) +
/// scale 1 num 10 (704) + scale 0 num 7 (16): 3; tables 3 + 1: 19.
#[test]
fn munmap_1g_of_64k_mthps_flushes_per_page_batch() {
    let src = "thp 64K always
p = mmap 1G at 0x7f00_0000_0000 fixed
write p 1G
munmap p 1G
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(5, 5, 0, 514));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(6, 5, 0, 509, 514));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(6, 0, 19, 0, 514));
}

/// munmap of 9,680 PMD THPs (about 18.9 GiB): each zap_huge_pmd() adds one
/// entry (tlb_remove_page_size()); the 9,678th fills the batches and
/// tlb_flush_mmu() flushes at once: [A, A + 9,678 × 2M) at PMD stride.
/// Tables: 9,680 deposited PTE tables (pte_free(), outside the gather),
/// 19 PMD tables (pmd_free_tlb() at PUD level, A + j × 1G) and the PUD
/// table: 9,700 frees. x86: the fill (9,678 > 33: full), then the last 2
/// PMDs with the tables from A (full). N1: the fill ASID-wide; the 2 PMDs
/// at tlb_end_vma(): 2 TLBIs; the tables [A, A + 18G + 4K) at PUD stride:
/// 19 strides but 4,980,736 pages > MAX_TLBI_RANGE_PAGES: ASID-wide.
/// Range: the fill's 4,955,136 pages > MAX_TLBI_RANGE_PAGES: ASID-wide;
/// the 1,024 pages: scale 1 num 15, one op; the tables ASID-wide.
#[test]
fn munmap_of_9680_pmd_thps_flushes_at_the_9678th() {
    let src = "thp 2M always
p = mmap 9680 * 2M at 0x7f00_0000_0000 fixed
write p 9680 * 2M
munmap p 9680 * 2M
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(2, 2, 0, 9700));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(3, 2, 0, 2, 9700));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(3, 2, 1, 0, 9700));
}

/// Exit of a child that maps 1 GiB of 4 KiB pages, one written per 2 MiB
/// (exit_mmap(): one fullmm gather; free_pgtables() frees the 512 PTE
/// tables, the PMD and the PUD table: 514 through tlb_remove_table()).
/// arm64's tlb_flush() of a fullmm gather is flush_tlb_mm() when tables
/// were freed and nothing else (arch/arm64/include/asm/tlb.h): the 509th
/// table fills the batch (tlb_table_invalidate(): one ASID-wide flush),
/// the last 5 make tlb_finish_mmu() flush again: 2 calls, 2 ASID. The
/// zap's page batches never flush a fullmm gather (arm64: no table freed
/// yet; x86: the exiting mm is lazy, and a fully written GiB is covered by
/// the same one flush). x86: the one whole-mm flush the model keeps for
/// the lazy mm's switch to init_mm. Before this session: 1 on both.
#[test]
fn exit_flushes_per_table_batch_on_arm64() {
    let src = "thp 2M never
p = mmap 1G at 0x7f00_0000_0000 fixed
repeat 512 as i
  write p + i * 2M 4K
end
fork child
@child exit
";
    let full = |src: &str, arch, f| {
        let e = flushes(src, arch, f);
        (
            e.get("tlb_flush_call").copied(),
            e.get("tlbi_asid").copied(),
        )
    };
    assert_eq!(full(src, ArchKind::X86_64, X86), (Some(1), Some(1)));
    assert_eq!(full(src, ArchKind::Arm64, N1), (Some(2), Some(2)));
    let written = src.replace("repeat 512 as i\n  write p + i * 2M 4K\nend", "write p 1G");
    assert_eq!(full(&written, ArchKind::Arm64, N1), (Some(2), Some(2)));
    assert_eq!(full(&written, ArchKind::X86_64, X86), (Some(1), Some(1)));
}

/// mprotect over three 8 KiB VMAs, the first and last changed (the middle
/// one is already read-only: mprotect_fixup() returns at once). 6.18's
/// do_mprotect_pkey() makes one mmu_gather for the loop
/// (tlb_gather_mmu() … tlb_finish_mmu()); change_pte_range() records each
/// changed PTE (tlb_flush_pte_range()). x86 (MERGE_VMAS): one flush at
/// tlb_finish_mmu() of [A, A + 24K) at 4 KiB stride, 6 ≤ 33: 6 INVLPGs —
/// as measured live (`pages` 6). arm64: tlb_end_vma() flushes each
/// changed VMA's 2 pages: N1 2 × 2 TLBIs; range 2 × one range op (2 pages,
/// scale 0 num 0). Before this session the model made a gather per VMA:
/// x86 2 calls.
#[test]
fn mprotect_over_three_vmas_is_one_gather() {
    let src = "thp 2M never
p = mmap 24K at 0x7f00_0000_0000 fixed
write p 24K
mprotect p + 8K 8K r
mprotect p 24K r
";
    assert_eq!(flushes(src, ArchKind::X86_64, X86), x86(1, 0, 6, 0));
    assert_eq!(flushes(src, ArchKind::Arm64, N1), arm(2, 0, 0, 4, 0));
    assert_eq!(flushes(src, ArchKind::Arm64, RANGE), arm(2, 0, 2, 0, 0));
}

// ---- The PTE-lock retake after a full page batch (issue 15, sixteenth session) ----
//
// zap_pte_range() (mm/memory.c, 6.18) takes the PTE table's lock once per
// call (pte_offset_map_lock(): 1 PMD load + 1 PTL). When
// __tlb_remove_folio_pages() reports the page batches full (every 9,678
// order-0 pages or 4,849 large-folio batches: the fifteenth session's
// fills) it sets force_flush and force_break, breaks out with addr after
// the batch that filled, flushes (tlb_flush_mmu_tlbonly()), unlocks, frees
// the batch (tlb_flush_mmu()) and, while addr != end, goes back to
// `retry:` — pte_offset_map_lock() again: one more PMD load and PTL per
// fill that ends before its table's end (flush_tlb_batched_pending() and
// the lazy-MMU enter/leave it repeats have no event in the model; no entry
// is read twice). A force_break also clears direct_reclaim: with
// PT_RECLAIM (MADV_DONTNEED on x86-64) the emptied table is then freed by
// try_to_free_pte() — pmd_lock() and pte_offset_map_rw_nolock() where the
// direct path takes the trylock and the lockless PMD read (neither counted
// by the model), then the table's own PTL nested (+1 PTL) and all 512
// entries read again (+512 L).

/// PMD loads, PTLs and PTE loads of the last line of `src`.
fn locks(src: &str, arch: ArchKind) -> (u64, u64, u64) {
    let e = last_line(src, arch, Before::empty(), N1);
    let get = |k: &str| e.get(k).copied().unwrap_or(0);
    (get("pmd_load"), get("ptl_lock"), get("pte_load"))
}

/// 1 GiB of written 4 KiB pages (512 PTE tables, 262,144 order-0 pages).
/// The fills end at page 9,678 × k, k = 1..27; none at a table's end
/// (9,678 = 2 × 4,839 with 4,839 odd: 512 divides 9,678 × k only for k a
/// multiple of 256): 27 retakes. munmap (both arches): 512 + 27 = 539
/// PMD loads and PTLs, 262,144 L (one ptep_get per entry). Exit of a
/// forked child that maps it: its fullmm gather fills the same way (its
/// fills flush nothing, the lock is retaken all the same): 539 and 539.
/// MADV_DONTNEED x86-64 (PT_RECLAIM): the 27 tables holding a fill are
/// freed by try_to_free_pte(): 539 PMD loads, 539 + 27 = 566 PTLs,
/// 262,144 + 27 × 512 = 275,968 L. arm64 (no PT_RECLAIM): 539, 539,
/// 262,144. Before this session: 512 everywhere, and 262,144 L.
#[test]
fn a_full_page_batch_retakes_the_pte_lock() {
    let w = "thp 2M never
p = mmap 1G at 0x7f00_0000_0000 fixed
write p 1G
";
    let munmap = format!("{w}munmap p 1G\n");
    let exit = format!("{w}fork child\n@child exit\n");
    let dontneed = format!("{w}madvise p 1G dontneed\n");
    for arch in ArchKind::ALL {
        assert_eq!(locks(&munmap, arch), (539, 539, 262_144), "{arch:?}");
        assert_eq!(locks(&exit, arch), (539, 539, 262_144), "{arch:?}");
    }
    assert_eq!(locks(&dontneed, ArchKind::X86_64), (539, 566, 275_968));
    assert_eq!(locks(&dontneed, ArchKind::Arm64), (539, 539, 262_144));
}

/// 1 GiB of 64 KiB mTHPs: 16,384 batches of 16 pages; fills at batch
/// 4,849 × k, k = 1..3, ending at page 77,584 × k: 77,584 mod 512 = 272,
/// 155,168 mod 512 = 32, 232,752 mod 512 = 304 — inside a table each
/// time: 3 retakes, 512 + 3 = 515 PMD loads and PTLs (x86-64: 262,144 L;
/// arm64 adds its contpte_ptep_get() gathers, not asserted). 9,680 PMD
/// THPs fill at the 9,678th (zap_huge_pmd(): no PTE table, no retake):
/// the munmap takes no PTE lock at all.
#[test]
fn large_folio_fills_retake_inside_a_table_and_pmd_fills_never() {
    let src = "thp 64K always
p = mmap 1G at 0x7f00_0000_0000 fixed
write p 1G
munmap p 1G
";
    assert_eq!(locks(src, ArchKind::X86_64), (515, 515, 262_144));
    let (pmd, ptl, _) = locks(src, ArchKind::Arm64);
    assert_eq!((pmd, ptl), (515, 515));
    let thp = "thp 2M always
p = mmap 9680 * 2M at 0x7f00_0000_0000 fixed
write p 9680 * 2M
munmap p 9680 * 2M
";
    for arch in ArchKind::ALL {
        let (_, ptl, l) = locks(thp, arch);
        assert_eq!((ptl, l), (9_680, 0), "{arch:?}");
    }
}
