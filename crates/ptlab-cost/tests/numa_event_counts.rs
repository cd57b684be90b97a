//! Hardware-event counts of one NUMA-hinting scan pass (`numa scan`:
//! task_numa_work() → change_prot_numa() → change_protection(MM_CP_PROT_NUMA)),
//! worked out by hand from the kernel functions the model cites, for the
//! 6.17+ batch skip and the ≤ 6.16 per-PTE skip (`--before
//! mprotect-pte-batch`), x86-64 and arm64 contpte, order-0 pages and 64 KiB
//! folios, folios the scan skips and folios it turns into hinting entries.
//! Counts are exact; no time is asserted.
//!
//! Notation as in event_counts.rs: L = pte_load, S = pte_store, X =
//! pte_atomic_clear, P = struct_page_line. Every scenario runs on a
//! two-node machine, maps one 64 KiB folio (or four small pages) at a
//! 2 MiB-aligned address and writes all of it, so every PTE is young and
//! dirty and an arm64 ptep_get() of a folded entry costs 3 L (the entry,
//! then contpte_ptep_get()'s gather stops after 2). Fixed part of every
//! scan: vma_lookup 1 (the VMA walk; task_numa_work() runs as task work,
//! no syscall), then per PTE table pmd_load 1 + ptl_lock 1
//! (pte_offset_map_lock()).
//!
//! Skip-test costs (mm/mprotect.c prot_numa_skip(); before 6.17 the same
//! tests inline): vm_normal_page() + page_folio() read the page's line
//! (1 P) — 6.17+ for every present PTE at a batch start, before the
//! PROT_NONE test; ≤ 6.16 only after it. A large folio's
//! folio_maybe_mapped_shared() / folio_maybe_dma_pinned() read its second
//! struct page (`_large_mapcount`, `_pincount`: 1 P). A batch skip is
//! mprotect_folio_pte_batch(flags = 0): folio_nr_pages() (1 P) and
//! folio_pte_batch()'s scan (x86: 15 L; arm64 on a folded block: the
//! batch hint covers the block, no load).

mod common;

use ptlab_model::{ArchKind, Before, HwFeatures};
use std::collections::BTreeMap;

const N1: HwFeatures = common::NO_FEATURES;
const X86: HwFeatures = N1;
const AFTER: Before = Before::empty();
const BEFORE: Before = Before::MPROTECT_PTE_BATCH;

/// Events of the last line of `src` (the scan under test).
fn last_line(src: &str, arch: ArchKind, before: Before) -> BTreeMap<String, u64> {
    let f = if arch == ArchKind::Arm64 { N1 } else { X86 };
    common::last_line(src, arch, before, f)
}

/// The fixed part of every scan (vma_lookup 1, pmd_load 1, ptl_lock 1)
/// with `pairs` set over it.
fn m(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    let mut out = common::m(&[("vma_lookup", 1), ("pmd_load", 1), ("ptl_lock", 1)]);
    out.extend(common::m(pairs));
    out
}

const PREFIX_64K: &str = "machine nodes 2
thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
";

/// The folio is on node 0, where the task runs: skipped (target_node ==
/// folio_nid()).
fn local_64k() -> String {
    format!("{PREFIX_64K}numa scan p 64K\n")
}

/// The task runs on node 1: the folio is remote, every PTE becomes a
/// NUMA-hinting (PROT_NONE) entry.
fn remote_64k() -> String {
    format!("{PREFIX_64K}numa node 1\nnuma scan p 64K\n")
}

/// A second pass over hinting entries: skipped (pte_protnone()).
fn again_64k() -> String {
    format!("{PREFIX_64K}numa node 1\nnuma scan p 64K\nnuma scan p 64K\n")
}

/// Skipped 64 KiB folio. 6.17+: one ptep_get (arm64 3 L, x86 1 L), 1 P
/// page_folio, 1 P second line (shared test), then the batch skip: 1 P
/// folio_nr_pages + the scan (arm64 none, x86 15 L) — 3 P. ≤ 6.16: the
/// tests per PTE: 16 ptep_get (arm64 16 × 3 L: the block stays folded;
/// x86 16 L) and 2 P each (32 P). Nothing is written or flushed.
#[test]
fn skipped_64k_folio() {
    let src = local_64k();
    assert_eq!(
        last_line(&src, ArchKind::Arm64, AFTER),
        m(&[("pte_load", 3), ("struct_page_line", 3)])
    );
    assert_eq!(
        last_line(&src, ArchKind::Arm64, BEFORE),
        m(&[("pte_load", 48), ("struct_page_line", 32)])
    );
    assert_eq!(
        last_line(&src, ArchKind::X86_64, AFTER),
        m(&[("pte_load", 16), ("struct_page_line", 3)])
    );
    assert_eq!(
        last_line(&src, ArchKind::X86_64, BEFORE),
        m(&[("pte_load", 16), ("struct_page_line", 32)])
    );
}

/// A 64 KiB folio of hinting entries scanned again. 6.17+ calls
/// vm_normal_page() before the PROT_NONE test, so the skipped batch costs
/// 1 P page_folio + 1 P folio_nr_pages, and folio_pte_batch() reads the
/// other 15 entries (a PROT_NONE entry is not a valid contiguous one: no
/// batch hint, and ptep_get() does not gather): 16 L on both
/// architectures. ≤ 6.16 tests PROT_NONE first: 16 L, no P. The one case
/// where the batch skip costs more (2 P).
#[test]
fn hinting_entries_skipped_again() {
    let src = again_64k();
    for arch in ArchKind::ALL {
        assert_eq!(
            last_line(&src, arch, AFTER),
            m(&[("pte_load", 16), ("struct_page_line", 2)]),
            "{arch:?}"
        );
        assert_eq!(
            last_line(&src, arch, BEFORE),
            m(&[("pte_load", 16)]),
            "{arch:?}"
        );
    }
}

/// A remote 64 KiB folio becomes 16 hinting entries: one pass of
/// change_pte_range()'s loop (`mprotect_pass`) for the batch in 6.17+,
/// one per PTE (16) before.
/// arm64 6.17+: ptep_get 3 L; 1 P page_folio + 1 P shared test; not
/// skipped: mprotect_folio_pte_batch(RESPECT_SOFT_DIRTY | RESPECT_WRITE)
/// 1 P, the hint covers the block; modify_prot_start_ptes(16) 16 X (no
/// unfold); set_ptes(16) 16 S; arm64 6.18's pte_needs_flush() is always
/// true: the per-VMA flush of 16 pages (N1: 16 TLBI VALE1IS, one DSB
/// pair).
/// arm64 ≤ 6.16, per PTE: the first ptep_get 3 L; each PTE 2 P (32 P).
/// The first ptep_modify_prot_start() unfolds the block
/// (contpte_try_unfold(): 1 L of the entry; contpte_convert(): 16 X, the
/// block's flush — 16 TLBI, one DSB pair — and 16 S), then clears its
/// entry (1 X); every later entry: ptep_get 1 L, the clear's unfold check
/// 1 L and 1 X. Each commit set_pte_at() 1 S after its unfold check (1 L);
/// PROT_NONE entries are not valid, so the 16th commit does not fold.
/// L = 3 + 1 + 15 × 2 + 16 = 50, X = 32, S = 32, two flushes of 16 pages.
#[test]
fn remote_64k_folio_arm64() {
    let src = remote_64k();
    let flush = |n: u64| {
        [
            ("tlb_flush_call", n),
            ("dsb_ishst", n),
            ("tlbi_page", 16 * n),
            ("dsb_ish", n),
        ]
    };
    let mut after = m(&[
        ("pte_load", 3),
        ("struct_page_line", 3),
        ("pte_atomic_clear", 16),
        ("pte_store", 16),
        ("mprotect_pass", 1),
    ]);
    after.extend(m(&flush(1)));
    assert_eq!(last_line(&src, ArchKind::Arm64, AFTER), after);
    let mut before = m(&[
        ("pte_load", 50),
        ("struct_page_line", 32),
        ("pte_atomic_clear", 32),
        ("pte_store", 32),
        ("cont_unfold", 1),
        ("mprotect_pass", 16),
    ]);
    before.extend(m(&flush(2)));
    assert_eq!(last_line(&src, ArchKind::Arm64, BEFORE), before);
}

/// x86: 16 L, 16 X, 16 S either way; 6.17+ 3 P (page_folio, shared test,
/// folio_nr_pages) against 32 P per PTE. RW → PROT_NONE clears
/// _PAGE_PRESENT, so pte_needs_flush(): 16 pages ≤ 33 → 16 INVLPG in one
/// flush. 6.17+ batched: 15 `modify_prot_pte` (the generic hooks' per-entry
/// round trips after the first); per PTE none.
#[test]
fn remote_64k_folio_x86() {
    let src = remote_64k();
    let common = [
        ("pte_load", 16),
        ("pte_atomic_clear", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 1),
        ("tlbi_page", 16),
    ];
    let mut after = m(&common);
    after.insert("struct_page_line".into(), 3);
    after.insert("mprotect_pass".into(), 1);
    after.insert("modify_prot_pte".into(), 15);
    assert_eq!(last_line(&src, ArchKind::X86_64, AFTER), after);
    let mut before = m(&common);
    before.insert("struct_page_line".into(), 32);
    before.insert("mprotect_pass".into(), 16);
    assert_eq!(last_line(&src, ArchKind::X86_64, BEFORE), before);
}

/// Order-0 pages: no batch either way (one `mprotect_pass` per changed
/// page, none for a skipped one), and the tests read the same line
/// (a small folio's mapcount and refcount are in its only struct page), so
/// both algorithms cost the same: skipped, 1 L + 1 P per page; remote,
/// 1 L + 1 P + 1 X + 1 S per page and one flush of 4 pages (x86 4 INVLPG;
/// arm64 4 TLBI VALE1IS and a DSB pair). On arm64 the single-entry clear
/// and set_ptes() each first read the entry for a contiguous block to
/// unfold (contpte_try_unfold(): 1 L each), so a changed page costs 3 L.
#[test]
fn small_pages_cost_the_same_both_ways() {
    let prefix = "machine nodes 2
p = mmap 16K at 0x7f00_0000_0000 fixed
write p 16K
";
    let local = format!("{prefix}numa scan p 16K\n");
    let remote = format!("{prefix}numa node 1\nnuma scan p 16K\n");
    for arch in ArchKind::ALL {
        let skipped = m(&[("pte_load", 4), ("struct_page_line", 4)]);
        let loads = if arch == ArchKind::Arm64 { 12 } else { 4 };
        let mut changed = m(&[
            ("pte_load", loads),
            ("struct_page_line", 4),
            ("pte_atomic_clear", 4),
            ("pte_store", 4),
            ("tlb_flush_call", 1),
            ("tlbi_page", 4),
            ("mprotect_pass", 4),
        ]);
        if arch == ArchKind::Arm64 {
            changed.extend(m(&[("dsb_ishst", 1), ("dsb_ish", 1)]));
        }
        for before in [AFTER, BEFORE] {
            assert_eq!(
                last_line(&local, arch, before),
                skipped,
                "{arch:?} {before:?}"
            );
            assert_eq!(
                last_line(&remote, arch, before),
                changed,
                "{arch:?} {before:?}"
            );
        }
    }
}
