//! Hardware-event counts of operations on swapped-out pages (issue 8,
//! item 3), worked out by hand from the kernel functions the model cites
//! (docs/ops/swap.md, "Hardware events"). Same style and notation as
//! event_counts.rs: L = pte_load, S = pte_store, X = pte_atomic_clear.
//! Every scenario pages out written 4 KiB pages with MADV_PAGEOUT first, so
//! the operation under test (the last line) sees swap PTEs only. A swap
//! PTE is not valid, so arm64's contpte layer adds exactly one `__ptep_get()`
//! to each ptep_get_and_clear() / set_pte_at() (the contpte_try_unfold()
//! check) and nothing else; no operation flushes the TLB for a swap PTE.

mod common;

use common::{m, NO_FEATURES as N1};
use ptlab_model::{ArchKind, Before};
use std::collections::BTreeMap;

/// Events of the last line of `src` (6.18, no seed switch reverted).
fn last_line(src: &str, arch: ArchKind) -> BTreeMap<String, u64> {
    common::last_line(src, arch, Before::empty(), N1)
}

/// `want` plus `extra_loads` more PTE loads (arm64's unfold checks).
fn plus_loads(mut want: BTreeMap<String, u64>, extra_loads: u64) -> BTreeMap<String, u64> {
    *want.entry("pte_load".into()).or_default() += extra_loads;
    want
}

const MREMAP_SWAP: &str = "swap 64M
p = mmap 4K at 0x7f00_0000_0000 fixed
write p 4K
madvise p 4K pageout
q = mremap p 4K 4K maymove fixed 0x7f00_0010_0000
";

/// mremap of one swap PTE within one PTE table (mm/mremap.c move_ptes()).
/// Syscall 1, vma_lookup 1. move_ptes(): 2 PMD reads, 2 PTLs; ptep_get 1 L
/// (not present: no mremap_folio_pte_batch, no force_flush);
/// get_and_clear_ptes(1) 1 X; set_ptes(1) 1 S. No TLB flush, no folio
/// work, no swap_map change (the entry keeps its one reference). The source
/// unmap: zap_pte_range() reads the now-empty entry (1 L), 1 PMD, 1 PTL,
/// clears nothing, flushes nothing. The VMA moved: 1 `mremap_vma`.
/// arm64: +2 L (the unfold checks in get_and_clear_full_ptes(nr = 1) and
/// set_ptes(nr = 1)).
#[test]
fn mremap_swap_pte() {
    let want = m(&[
        ("syscall", 1),
        ("vma_lookup", 1),
        ("mremap_vma", 1),
        ("pmd_load", 3),
        ("ptl_lock", 3),
        ("pte_load", 2),
        ("pte_atomic_clear", 1),
        ("pte_store", 1),
    ]);
    assert_eq!(last_line(MREMAP_SWAP, ArchKind::X86_64), want);
    assert_eq!(last_line(MREMAP_SWAP, ArchKind::Arm64), plus_loads(want, 2));
}

const TABLE_SWAP: &str = "swap 64M
p = mmap 2M at 0x7f00_0000_0000 fixed
write p 4K
madvise p 4K pageout
q = mremap p 2M 2M maymove fixed 0x7f00_0040_0000
";

/// mremap of a whole PTE table holding one swap PTE (move_normal_pmd()):
/// only the table move's own events, the same as for a table of present
/// PTEs — pmd_lock (1 PTL), pmd_clear + pmd_populate (2 PMD stores), the
/// 2 MiB flush_tlb_range at 4 KiB stride (x86: above the 33-page ceiling,
/// one full flush; arm64 N1: 512 pages ≥ MAX_DVM_OPS, ASIDE1IS between a
/// DSB pair). The swap PTE inside is not read or written. The source
/// unmap finds no table (no PTE work).
#[test]
fn mremap_table_with_swap_pte() {
    let got = last_line(TABLE_SWAP, ArchKind::X86_64);
    for e in [
        "pte_load",
        "pte_store",
        "pte_atomic_clear",
        "swap_map_update",
    ] {
        assert_eq!(got.get(e), None, "{e} in {got:?}");
    }
    assert_eq!(got.get("pmd_store"), Some(&2), "{got:?}");
    assert_eq!(got.get("tlbi_asid"), Some(&1), "{got:?}");
    let got = last_line(TABLE_SWAP, ArchKind::Arm64);
    assert_eq!(got.get("pte_load"), None, "{got:?}");
    assert_eq!(got.get("pmd_store"), Some(&2), "{got:?}");
    assert_eq!(
        (
            got.get("dsb_ishst"),
            got.get("tlbi_asid"),
            got.get("dsb_ish")
        ),
        (Some(&1), Some(&1), Some(&1)),
        "{got:?}"
    );
}

const FORK_SWAP: &str = "swap 64M
p = mmap 4K at 0x7f00_0000_0000 fixed
write p 4K
madvise p 4K pageout
fork child
";

/// fork of one exclusive swap PTE (mm/memory.c copy_pte_range() →
/// copy_nonpresent_pte()). fork: syscall 1, process_create 1, vma_copy 1;
/// the child's PGD, PUD, PMD and PTE tables (4 allocs, 2 upper-level
/// stores, 1 PMD store); copy_pte_range(): 2 PMD reads, 2 PTLs, ptep_get
/// 1 L; copy_nonpresent_pte(): its own ptep_get 1 L, swap_duplicate() →
/// __swap_duplicate(): 1 cluster lock + 1 swap_map byte; the parent's entry
/// loses its exclusive bit (set_pte_at, 1 S) and the child's is written
/// (1 S). No refcount or mapcount atomic (no folio), and the swap PTE adds
/// nothing to dup_mmap()'s flush_tlb_mm(parent) (x86: 1 call + full flush;
/// arm64: DSB ISHST, ASIDE1IS, DSB ISH).
/// arm64: +2 L (the two set_pte_at() unfold checks).
#[test]
fn fork_swap_pte() {
    let common = [
        ("syscall", 1),
        ("process_create", 1),
        ("vma_copy", 1),
        ("pt_page_alloc", 4),
        ("pud_store", 2),
        ("pmd_store", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("pte_load", 2),
        ("pte_store", 2),
        ("swap_cluster_lock", 1),
        ("swap_map_update", 1),
        ("tlb_flush_call", 1),
        ("tlbi_asid", 1),
    ];
    assert_eq!(last_line(FORK_SWAP, ArchKind::X86_64), m(&common));
    let mut arm = plus_loads(m(&common), 2);
    arm.extend(m(&[("dsb_ishst", 1), ("dsb_ish", 1)]));
    assert_eq!(last_line(FORK_SWAP, ArchKind::Arm64), arm);
}

const FORK_TWICE: &str = "swap 64M
p = mmap 4K at 0x7f00_0000_0000 fixed
write p 4K
madvise p 4K pageout
fork c1
fork c2
";

/// The second fork finds the parent's swap PTE already shared: no rewrite
/// of the parent's entry, only the child's store (1 S; arm64 +1 L).
#[test]
fn fork_shared_swap_pte() {
    let common = [
        ("syscall", 1),
        ("process_create", 1),
        ("vma_copy", 1),
        ("pt_page_alloc", 4),
        ("pud_store", 2),
        ("pmd_store", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("pte_load", 2),
        ("pte_store", 1),
        ("swap_cluster_lock", 1),
        ("swap_map_update", 1),
        ("tlb_flush_call", 1),
        ("tlbi_asid", 1),
    ];
    assert_eq!(last_line(FORK_TWICE, ArchKind::X86_64), m(&common));
    let mut arm = plus_loads(m(&common), 1);
    arm.extend(m(&[("dsb_ishst", 1), ("dsb_ish", 1)]));
    assert_eq!(last_line(FORK_TWICE, ArchKind::Arm64), arm);
}

const ZAP_SWAP: &str = "swap 64M
p = mmap 16K at 0x7f00_0000_0000 fixed
write p 16K
madvise p 16K pageout
madvise p 16K dontneed
";

/// MADV_DONTNEED of 4 swap PTEs with consecutive offsets (the model and
/// the kernel give a fresh range consecutive slots). Syscall 1, vma_lookup
/// 1; zap_pte_range(): 1 PMD read, 1 PTL, 4 ptep_get (4 L: the first by
/// do_zap_pte_range(), the rest by swap_pte_batch(), which stops at the
/// range end); zap_nonpresent_ptes(): one batch of 4 →
/// free_swap_and_cache_nr(entry, 4) → swap_entries_put_map_nr(): 1 cluster
/// lock, 4 swap_map bytes, swap_entries_free() of 4 slots (no cache);
/// clear_not_present_full_ptes(4): 4 plain stores (pte_clear, no load on
/// arm64 either). No TLB flush (nothing present was cleared), so arm64 is
/// the same.
#[test]
fn zap_swap_ptes() {
    let want = m(&[
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pmd_load", 1),
        ("ptl_lock", 1),
        ("pte_load", 4),
        ("pte_store", 4),
        ("swap_cluster_lock", 1),
        ("swap_map_update", 4),
        ("swap_slot_free", 4),
    ]);
    assert_eq!(last_line(ZAP_SWAP, ArchKind::X86_64), want);
    assert_eq!(last_line(ZAP_SWAP, ArchKind::Arm64), want);
}

const ZAP_SHARED: &str = "swap 64M
p = mmap 8K at 0x7f00_0000_0000 fixed
write p 8K
madvise p 8K pageout
fork child
madvise p 8K dontneed
";

/// After fork the parent's 2 swap PTEs are shared (count 2) and no longer
/// exclusive; they still batch (equal bits, consecutive offsets). The
/// count drops to 1: 1 cluster lock, 2 swap_map bytes, no slot freed.
/// 1 PMD, 1 PTL, 2 L, 2 S.
#[test]
fn zap_shared_swap_ptes() {
    let want = m(&[
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pmd_load", 1),
        ("ptl_lock", 1),
        ("pte_load", 2),
        ("pte_store", 2),
        ("swap_cluster_lock", 1),
        ("swap_map_update", 2),
    ]);
    assert_eq!(last_line(ZAP_SHARED, ArchKind::X86_64), want);
    assert_eq!(last_line(ZAP_SHARED, ArchKind::Arm64), want);
}

const UFFD_MOVE_SWAP: &str = "swap 64M
p = mmap 4K at 0x7f00_0000_0000 fixed
s = mmap 4K at 0x7f00_0020_0000 fixed
write s 4K
madvise s 4K pageout
uffd open
uffd register p 4K missing
uffd move p s 4K
";

/// UFFDIO_MOVE of one exclusive swap PTE (mm/userfaultfd.c
/// move_pages_ptes() → move_swap_pte()). Syscall 1, vma_lookup 1; the
/// destination PTE table is allocated (1 alloc, 1 PMD store).
/// move_pages_ptes(): pte_offset_map_rw_nolock twice (2 PMD reads), each
/// PTL taken to read its entry (2 locks, dst + src ptep_get = 2 L);
/// swap_cache_get_folio() (1 lookup, a miss: no folio work).
/// move_swap_pte(): double_pt_lock (2 locks: two tables),
/// is_pte_pages_stable() (2 L + 1 PMD read), swap_cache_has_folio() (1
/// lookup), ptep_get_and_clear 1 X, set_pte_at 1 S. No TLB flush, no
/// rmap update (no folio), no swap_map change.
/// arm64: +2 L (the unfold checks of the clear and the store).
#[test]
fn uffd_move_swap_pte() {
    let want = m(&[
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pt_page_alloc", 1),
        ("pmd_store", 1),
        ("pmd_load", 3),
        ("ptl_lock", 4),
        ("pte_load", 4),
        ("swap_cache_lookup", 2),
        ("pte_atomic_clear", 1),
        ("pte_store", 1),
        // The ioctl's VMA and map_changing locks; no anon_vma lock for a
        // swap PTE (move_pages_ptes() takes it for present pages only).
        ("uffd_move_lock", 1),
    ]);
    assert_eq!(last_line(UFFD_MOVE_SWAP, ArchKind::X86_64), want);
    assert_eq!(
        last_line(UFFD_MOVE_SWAP, ArchKind::Arm64),
        plus_loads(want, 2)
    );
}

const PAGEOUT: &str = "swap 64M
p = mmap 4K at 0x7f00_0000_0000 fixed
write p 4K
madvise p 4K pageout
";

/// MADV_PAGEOUT of one exclusive small folio (mm/madvise.c
/// madvise_cold_or_pageout_pte_range(), mm/vmscan.c shrink_folio_list(),
/// mm/rmap.c try_to_unmap_one()). Syscall 1, vma_lookup 1. The walk: 1 PMD
/// read, 1 PTL, ptep_get 1 L, vm_normal_folio 1 struct page line.
/// folio_alloc_swap(): 1 cluster lock + 1 swap_map byte (SWAP_HAS_CACHE).
/// try_to_unmap_one(): page_vma_mapped_walk 1 PMD read, 1 PTL, 1 L; the
/// clear 1 X and one page's flush (x86 ptep_clear_flush: 1 call + 1
/// INVLPG; arm64 deferred TLBI VALE1IS after DSB ISHST, completed by the
/// dirty folio's try_to_unmap_flush_dirty(): DSB ISH); folio_dup_swap() 1
/// lock + 1 byte; set_pte_at of the swap PTE 1 S; folio_remove_rmap_ptes
/// (1 struct page line, 1 _mapcount atomic); the swap-cache delete after
/// the write (1 lock + 1 byte: SWAP_HAS_CACHE cleared) and the last folio
/// reference (1 atomic) frees the folio. shrink_folio_list()'s own work
/// for the folio: 1 swap_reclaim_folio; pageout() → swap_writeout(): one
/// bio (1 swap_write_bio) of one page (1 swap_write_4k).
/// arm64: +2 L (the unfold checks of the clear and the store).
#[test]
fn pageout_one_page() {
    let common = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("pte_load", 2),
        ("struct_page_line", 2),
        ("pte_atomic_clear", 1),
        ("pte_store", 1),
        ("tlb_flush_call", 1),
        ("tlbi_page", 1),
        ("mapcount_atomic", 1),
        ("folio_ref_atomic", 1),
        ("folio_free", 1),
        ("swap_cluster_lock", 3),
        ("swap_map_update", 3),
        ("swap_reclaim_folio", 1),
        ("swap_write_bio", 1),
        ("swap_write_4k", 1),
    ];
    assert_eq!(last_line(PAGEOUT, ArchKind::X86_64), m(&common));
    let mut arm = plus_loads(m(&common), 2);
    arm.extend(m(&[("dsb_ishst", 1), ("dsb_ish", 1)]));
    assert_eq!(last_line(PAGEOUT, ArchKind::Arm64), arm);
}

const SWAPIN: &str = "swap 64M
p = mmap 4K at 0x7f00_0000_0000 fixed
write p 4K
madvise p 4K pageout
read p
";

/// A read fault on an exclusive swap PTE whose slot has no cache folio
/// (mm/memory.c do_swap_page()). The fault: page_fault 1, vma_lookup 1,
/// the user access 1, the walk's PMD read and PTL (1 + 1), handle_pte_fault's
/// ptep_get 1 L. swap_cache_get_folio(): 1 lookup, a miss;
/// swapin_readahead() → __read_swap_cache_async(): a folio (1 alloc, no
/// zeroing), swapcache_prepare() (1 lock + 1 byte), the cache's reference
/// (1 atomic); the read is I/O, not counted. folio_lock + folio_unlock (2
/// atomics); pte_offset_map_lock (1 PMD read, 1 PTL) and the pte_same()
/// re-read (1 L); swap_free_nr() (1 lock + 1 byte); folio_add_new_anon_rmap
/// (1 struct page line, plain stores: the folio was never mapped); the
/// mapping's reference (1 atomic, as do_anonymous_page() counts it);
/// set_ptes 1 S. The count is now 0: the cache is dropped (1 lock + 1
/// byte, the slot freed, the cache's reference put: 1 atomic). No TLB
/// flush. arm64: +1 L (set_ptes' unfold check).
#[test]
fn swapin_read_fault() {
    let want = m(&[
        ("page_fault", 1),
        ("vma_lookup", 1),
        ("user_page_access", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("pte_load", 2),
        ("pte_store", 1),
        ("struct_page_line", 1),
        ("folio_ref_atomic", 5),
        ("folio_alloc", 1),
        ("swap_cache_lookup", 1),
        ("swap_cluster_lock", 3),
        ("swap_map_update", 3),
        ("swap_slot_free", 1),
    ]);
    assert_eq!(last_line(SWAPIN, ArchKind::X86_64), want);
    assert_eq!(last_line(SWAPIN, ArchKind::Arm64), plus_loads(want, 1));
}

// ---- block-device swap: a 64 KiB folio goes out whole ------------------------

const PAGEOUT_64K_BLOCKDEV: &str = "swap 64M blockdev
thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
madvise p 64K pageout
";

/// The proposed `swapout-unmap-batch` on or off.
fn swapout_unmap_batch(batched: bool) -> ptlab_model::After {
    if batched {
        ptlab_model::After::SWAPOUT_UNMAP_BATCH
    } else {
        ptlab_model::After::empty()
    }
}

/// Events of the last line with the proposed `swapout-unmap-batch` on or off.
fn last_line_after(src: &str, arch: ArchKind, batched: bool) -> BTreeMap<String, u64> {
    let switches = (Before::empty(), swapout_unmap_batch(batched));
    common::last_line_after(src, arch, switches, N1)
}

/// MADV_PAGEOUT of one exclusive, PTE-mapped 64 KiB folio (16 pages, one
/// contpte block on arm64) to a block device, Linux 6.18
/// (docs/ops/swap.md S14, docs/prototyping.md).
///
/// Common to both arches and both algorithms:
/// * syscall 1, vma_lookup 1;
/// * the madvise walk (madvise_cold_or_pageout_pte_range()): 1 PMD read +
///   1 PTL, ptep_get of the first PTE, its struct page line (1),
///   madvise_folio_pte_batch() reads the other 15 PTEs (15 L); x86 16 L;
///   arm64 the first ptep_get gathers over the contpte block (3 L: the entry,
///   then contpte_ptep_get() stops at the first dirty entry and re-reads it
///   for young) → 18 L;
/// * folio_alloc_swap() of 16 slots: 1 cluster lock, 16 swap_map bytes
///   (SWAP_HAS_CACHE); the swap cache's references (folio_ref_add: 1
///   atomic);
/// * try_to_unmap_one(): page_vma_mapped_walk() maps the table once
///   (1 PMD read + 1 PTL).
///
/// 6.18, per PTE (16 ×): the walk's PTE read (1 L); get_and_clear_ptes(1)
/// (1 X; arm64 +1 L for the contpte_try_unfold() check); the flush —
/// x86 flush_tlb_range() of one page (1 call + 1 INVLPG: one CPU in
/// mm_cpumask, no deferral), arm64 arch_tlbbatch_add_pending() (1 call,
/// DSB ISHST + TLBI VALE1IS); swap_duplicate() (1 lock + 1 byte);
/// set_pte_at() of the swap PTE (1 S; arm64 +1 L unfold check);
/// folio_remove_rmap_pte() (1 struct page line, 3 mapcount atomics: the
/// page's, _large_mapcount, _nr_pages_mapped); folio_put() (1 atomic).
/// arm64 also unfolds the block at the first clear (contpte_convert():
/// 16 X + 16 S, flush_tlb_range of 64 KiB: 1 call, DSB ISHST, 16 TLBI
/// without FEAT_TLBIRANGE, DSB ISH) and completes the deferred flushes
/// once (arch_tlbbatch_flush(): DSB ISH).
///
/// Totals 6.18, x86: L 16+16 = 32, X 16, S 16, PMD 2, PTL 2, 16 calls +
/// 16 INVLPG, locks 1+16 = 17, bytes 16+16 = 32, struct page 1+16 = 17,
/// mapcount 48, refs 1+16 = 17; the folio reclaimed whole (1
/// swap_reclaim_folio) and written in one bio (1 swap_write_bio, 16
/// swap_write_4k), both ways. arm64: L 18 + 16×3 = 66, X 16+16 = 32,
/// S 16+16 = 32, calls 1+16 = 17, DSB ISHST 17, TLBI 16+16 = 32,
/// DSB ISH 2, one unfold; the rest as x86.
#[test]
fn pageout_64k_folio_to_blockdev_per_pte() {
    let common = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("swap_cluster_lock", 17),
        ("swap_map_update", 32),
        ("struct_page_line", 17),
        ("mapcount_atomic", 48),
        ("folio_ref_atomic", 17),
        ("swap_reclaim_folio", 1),
        ("swap_write_bio", 1),
        ("swap_write_4k", 16),
    ];
    let mut x86 = m(&common);
    x86.extend(m(&[
        ("pte_load", 32),
        ("pte_atomic_clear", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 16),
        ("tlbi_page", 16),
    ]));
    assert_eq!(
        last_line_after(PAGEOUT_64K_BLOCKDEV, ArchKind::X86_64, false),
        x86
    );
    let mut arm = m(&common);
    arm.extend(m(&[
        ("pte_load", 66),
        ("pte_atomic_clear", 32),
        ("pte_store", 32),
        ("cont_unfold", 1),
        ("tlb_flush_call", 17),
        ("dsb_ishst", 17),
        ("tlbi_page", 32),
        ("dsb_ish", 2),
    ]));
    assert_eq!(
        last_line_after(PAGEOUT_64K_BLOCKDEV, ArchKind::Arm64, false),
        arm
    );
}

/// The same with the proposed batched unmap (`--after swapout-unmap-batch`):
/// one page_vma_mapped_walk() step for the folio: its PTE read (1 L),
/// folio_pte_batch() over the rest (x86 15 ptep_get = 15 L; arm64
/// pte_batch_hint() covers the whole valid contpte block: no read);
/// get_and_clear_full_ptes(16) (16 X; arm64 clears the whole aligned block
/// without unfolding it); one flush of the 64 KiB range (x86 1 call + 16
/// INVLPG; arm64 1 arch_tlbbatch_add_pending(): DSB ISHST + 16 TLBI); one
/// run of equally exclusive pages: folio_dup_swap() of 16 slots (1 lock +
/// 16 bytes), the 16 swap PTEs (16 S; arm64 +16 L unfold checks),
/// folio_remove_rmap_ptes(16) (16 struct page lines, 16+2 mapcount
/// atomics), folio_put_refs(16) (1 atomic); arm64 arch_tlbbatch_flush()
/// (DSB ISH).
///
/// Totals, x86: L 16+1+15 = 32, X 16, S 16, 1 call + 16 INVLPG, locks 2,
/// bytes 32, struct page 17, mapcount 18, refs 2; reclaim and write as
/// without the proposal (1 folio, 1 bio, 16 pages). arm64: L 18+1+16 = 35,
/// X 16, S 16, 1 call, DSB ISHST 1, TLBI 16, DSB ISH 1, no unfold.
#[test]
fn pageout_64k_folio_to_blockdev_batched() {
    let common = [
        ("syscall", 1),
        ("vma_lookup", 1),
        ("pmd_load", 2),
        ("ptl_lock", 2),
        ("swap_cluster_lock", 2),
        ("swap_map_update", 32),
        ("struct_page_line", 17),
        ("mapcount_atomic", 18),
        ("folio_ref_atomic", 2),
        ("pte_atomic_clear", 16),
        ("pte_store", 16),
        ("tlb_flush_call", 1),
        ("swap_reclaim_folio", 1),
        ("swap_write_bio", 1),
        ("swap_write_4k", 16),
    ];
    let mut x86 = m(&common);
    x86.extend(m(&[("pte_load", 32), ("tlbi_page", 16)]));
    assert_eq!(
        last_line_after(PAGEOUT_64K_BLOCKDEV, ArchKind::X86_64, true),
        x86
    );
    let mut arm = m(&common);
    arm.extend(m(&[
        ("pte_load", 35),
        ("dsb_ishst", 1),
        ("tlbi_page", 16),
        ("dsb_ish", 1),
    ]));
    assert_eq!(
        last_line_after(PAGEOUT_64K_BLOCKDEV, ArchKind::Arm64, true),
        arm
    );
}

/// Order-0 pages are untouched by the proposal: the same events both ways,
/// on a block device as on a swap file.
#[test]
fn pageout_small_pages_unchanged_by_the_proposal() {
    for dev in ["", " blockdev"] {
        let src = format!(
            "swap 64M{dev}
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
madvise p 64K pageout
"
        );
        for arch in [ArchKind::X86_64, ArchKind::Arm64] {
            assert_eq!(
                last_line_after(&src, arch, false),
                last_line_after(&src, arch, true),
                "{arch:?}{dev}"
            );
        }
    }
}

/// Kernel calls of the same MADV_PAGEOUT (counted, never priced): the
/// proposal replaces 16 single-entry clears and 16 flushes by one batched
/// clear and one flush, and arm64 loses its contpte unfold (the 16
/// contpte_try_unfold() checks and the one contpte_convert()).
#[test]
fn pageout_64k_folio_kernel_calls() {
    let calls = |arch: ArchKind, batched: bool| -> BTreeMap<String, u64> {
        let run = ptlab_cost::run_events_with(
            PAGEOUT_64K_BLOCKDEV,
            "t.ptl",
            arch,
            (Before::empty(), swapout_unmap_batch(batched)),
            &[],
            N1,
            None,
        )
        .expect("scenario runs");
        run.lines
            .last()
            .expect("a line")
            .events
            .calls_map()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    };
    // x86: the madvise walk's ptep_get (1); try_to_unmap_one()'s
    // page_vma_mapped_walk() reads each PTE it unmaps (16 ptep_get, counted
    // as calls since the zap and swap walks' reads are); per PTE
    // ptep_get_and_clear, flush_tlb_range, set_pte_at; batched: the walk
    // reads the batch's first PTE (1) and folio_pte_batch() the other 15
    // with ptep_get: 1 + 1 + 15 = 17 either way.
    assert_eq!(
        calls(ArchKind::X86_64, false),
        m(&[
            ("ptep_get", 1 + 16),
            ("ptep_get_and_clear", 16),
            ("flush_tlb_range", 16),
            ("set_ptes", 16)
        ])
    );
    assert_eq!(
        calls(ArchKind::X86_64, true),
        m(&[
            ("ptep_get", 1 + 1 + 15),
            ("folio_pte_batch", 1),
            ("get_and_clear_full_ptes", 1),
            ("flush_tlb_range", 1),
            ("set_ptes", 16)
        ])
    );
    // arm64: the unfold's own flush_tlb_range (1); ptep_get as on x86
    // per PTE (1 + 16); batched, folio_pte_batch() gathers the folded block
    // in its first ptep_get (pte_batch_hint() = 16): 1 + 1.
    assert_eq!(
        calls(ArchKind::Arm64, false),
        m(&[
            ("ptep_get", 1 + 16),
            ("ptep_get_and_clear", 16),
            ("contpte_try_unfold", 16),
            ("contpte_convert", 1),
            ("flush_tlb_range", 1),
            ("arch_tlbbatch_add_pending", 16),
            ("arch_tlbbatch_flush", 1),
            ("set_ptes", 16)
        ])
    );
    assert_eq!(
        calls(ArchKind::Arm64, true),
        m(&[
            ("ptep_get", 1 + 1),
            ("folio_pte_batch", 1),
            ("get_and_clear_full_ptes", 1),
            ("arch_tlbbatch_add_pending", 1),
            ("arch_tlbbatch_flush", 1),
            ("set_ptes", 16)
        ])
    );
}

// ---- block-device swap: a read fault leaves the 64 KiB folio cached (D3) ----

const READ_BACK_64K: &str = "swap 64M blockdev
thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
madvise p 64K pageout
read p
";

/// The read fault that maps a swapped-out 64 KiB folio back whole from the
/// swap cache (docs/ops/swap.md S14r): swap_free_nr() drops the 16 swap
/// counts under one cluster lock (1 lock, 16 swap_map bytes), and, a read
/// fault not freeing the swap (should_try_to_free_swap() false), nothing
/// else touches the swap map: no SWAP_HAS_CACHE clear, no slot free, no
/// put of the cache's references. Folio atomics: the lock and unlock
/// (folio_lock_or_retry(), folio_unlock()) and the mapping's references
/// (folio_ref_add(): 1) = 3.
#[test]
fn read_swapin_of_a_cached_64k_folio_frees_no_slot() {
    for arch in [ArchKind::X86_64, ArchKind::Arm64] {
        let got = last_line(READ_BACK_64K, arch);
        assert_eq!(got.get("swap_cluster_lock"), Some(&1), "{arch:?} {got:?}");
        assert_eq!(got.get("swap_map_update"), Some(&16), "{arch:?} {got:?}");
        assert_eq!(got.get("swap_slot_free"), None, "{arch:?} {got:?}");
        assert_eq!(got.get("folio_ref_atomic"), Some(&3), "{arch:?} {got:?}");
    }
}

/// munmap of that folio: the zap is the one of any exclusive 64 KiB folio
/// (the same as after a write swap-in, which freed the swap at the fault),
/// plus the mmu_gather's free_swap_cache() of a folio no longer mapped
/// (mm/swap_state.c free_pages_and_swap_cache()): folio_free_swap() takes
/// one cluster lock, clears SWAP_HAS_CACHE in 16 swap_map bytes and frees
/// the 16 slots, and the cache's references go (folio_put_refs(): 1 atomic).
#[test]
fn munmap_of_a_read_back_64k_folio_frees_its_swap_cache() {
    let cached = format!("{READ_BACK_64K}munmap p 64K\n");
    let freed = cached.replace("read p\n", "write p\n");
    for arch in [ArchKind::X86_64, ArchKind::Arm64] {
        let mut want = last_line(&freed, arch);
        for (e, n) in [
            ("swap_cluster_lock", 1),
            ("swap_map_update", 16),
            ("swap_slot_free", 16),
            ("folio_ref_atomic", 1),
        ] {
            *want.entry(e.to_string()).or_default() += n;
        }
        assert_eq!(last_line(&cached, arch), want, "{arch:?}");
    }
}
