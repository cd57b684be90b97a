//! Swap PTEs through the mm mechanics: dropping a slot's count when a swap
//! PTE goes away (zap), copying one (fork), moving one (mremap,
//! UFFDIO_MOVE), and the hardware events of the swap map. The device is
//! crate::core::swapfile; swap-in is crate::mm::fault's do_swap_page();
//! swapon and MADV_PAGEOUT/COLD are crate::sys::swap (docs/ops/swap.md).
//!
//! Linux: mm/memory.c zap_nonpresent_ptes(), copy_nonpresent_pte(),
//! mm/mremap.c move_ptes(), mm/userfaultfd.c move_swap_pte(),
//! mm/swapfile.c swap_free_nr(), __swap_duplicate().

use crate::core::addr::{PAGE_SIZE, PMD_SIZE};
use crate::core::arch::SwapPte;
use crate::core::folio::PhysMem;
use crate::core::hw::{HwEvent, HwSink};
use crate::core::rules::rule;
use crate::core::vma::{VmFlags, Vma};
use crate::mm::mm::Mm;
use crate::types::errno::Errno;

/// Drop one swap count of `offset` (a swap PTE went away). At count 0 the
/// swap-cache folio loses the cache's reference and the slot is freed.
/// Linux: mm/swapfile.c swap_free_nr() / free_swap_and_cache_nr() →
/// __try_to_reclaim_swap(), folio_free_swap().
/// A slot of a large swap-cache folio keeps `SWAP_HAS_CACHE` at count 0
/// until none of the folio's slots has a count (see
/// [`drop_large_swapcache`]).
pub(crate) fn put_slot(phys: &mut PhysMem, offset: u64) {
    let slot = phys.swap.slots.get_mut(&offset).expect("swap slot in use");
    assert!(slot.count > 0, "swap count underflow at slot {offset}");
    slot.count -= 1;
    if slot.count == 0 {
        let cache = slot
            .cache
            .map(|pfn| phys.folio_of(pfn).expect("swap-cache folio"));
        match cache {
            Some(folio) if folio.is_large() => {
                drop_large_swapcache(phys, folio);
            }
            _ => {
                phys.swap.remove_slot(offset);
                if let Some(folio) = cache {
                    phys.ref_sub(folio, 1);
                }
            }
        }
    }
}

/// Delete a large folio from the swap cache once none of its slots has a
/// swap count left: every slot is freed and the cache's references (one
/// per page) go; returns whether it did. Called where the kernel deletes
/// it: the last swap PTE of an unmapped cached folio zapped
/// (__try_to_reclaim_swap() with TTRS_UNMAPPED), a write swap-in
/// (should_try_to_free_swap()), and through [`free_swap_large`]. A folio
/// a read fault mapped back stays cached with every count at 0 (D3,
/// docs/ops/swap.md S14) until one of those, a zap that unmaps it
/// (PhysMem::ref_sub(): free_swap_cache()), a split (its pieces' slots go
/// with the order-0 simplification), MADV_FREE, a CoW reuse or swapoff.
/// Linux: mm/swapfile.c __try_to_reclaim_swap() (swap_only_has_cache()
/// over the whole folio), folio_free_swap(), mm/swap_state.c
/// swap_cache_del_folio().
pub(crate) fn drop_large_swapcache(
    phys: &mut PhysMem,
    folio: crate::core::folio::FolioRef,
) -> bool {
    if phys.large_swap_counted(folio) {
        return false;
    }
    phys.delete_large_from_swapcache(folio);
    true
}

/// folio_free_swap() on a large swap-cache folio: when none of its slots
/// has a swap count, the folio leaves the cache (one cluster lock, the
/// slots' SWAP_HAS_CACHE cleared, the slots freed) and is marked dirty;
/// returns whether it did. Linux: mm/swapfile.c folio_free_swap()
/// (folio_swapcache_freeable(), folio_swapped()), swap_cache_del_folio(),
/// folio_set_dirty().
pub(crate) fn free_swap_large(phys: &mut PhysMem, folio: crate::core::folio::FolioRef) -> bool {
    if phys.large_swap_counted(folio) {
        return false;
    }
    let nr = folio.nr_pages();
    count_swap_map(&phys.hw, nr);
    phys.hw.add(HwEvent::SwapSlotFree, nr);
    phys.delete_large_from_swapcache(folio);
    phys.set_folio_dirty(folio, true);
    true
}

// ---- hardware events ---------------------------------------------------------

/// swap_cluster_lock(); `nr` bytes of si->swap_map rewritten;
/// swap_cluster_unlock(). Linux: mm/swapfile.c __swap_duplicate(),
/// swap_entries_put_map_nr(), swap_entries_put_cache().
pub(crate) fn count_swap_map(hw: &HwSink, nr: u64) {
    hw.one(HwEvent::SwapClusterLock);
    hw.add(HwEvent::SwapMapUpdate, nr);
}

/// A slot whose swap count reached 0 while a swap-cache folio holds it:
/// __try_to_reclaim_swap() looks the folio up and folio_free_swap() clears
/// SWAP_HAS_CACHE under the cluster lock and frees the slot (the cache's
/// folio reference is counted by `put_slot`'s `ref_sub`). The kernel does
/// this at once only for a folio nobody maps (TTRS_UNMAPPED); the model
/// drops every unreferenced cache entry at once (module comment) and
/// counts it there. Linux: mm/swapfile.c __try_to_reclaim_swap(),
/// folio_free_swap().
pub(crate) fn count_cache_reclaim(hw: &HwSink) {
    hw.one(HwEvent::SwapCacheLookup);
    count_swap_map(hw, 1);
    hw.one(HwEvent::SwapSlotFree);
}

// ---- swap PTEs through the seed operations ---------------------------------

/// Zap the swap PTEs of `[start, end)`: each drops its slot's swap count.
/// Linux: mm/memory.c zap_nonpresent_ptes() → swap_pte_batch(),
/// free_swap_and_cache_nr(), clear_not_present_full_ptes().
///
/// Events (the `ptep_get()` of every entry is counted by the zap walk in
/// zap.rs, as for present entries): per batch of swap PTEs with
/// consecutive offsets and equal bits inside one PTE table (swap_pte_batch),
/// one cluster lock and one swap_map byte per entry
/// (swap_entries_put_map_nr()), a slot free per entry whose count reaches
/// 0 without a cache folio (swap_entries_free()), the cache reclaim of one
/// that has one; one plain store per entry (pte_clear()). No TLB flush: a
/// non-present entry is never in a TLB, and zap_range() flushes only when
/// it cleared a present entry (force_flush / tlb_remove_tlb_entry are for
/// present PTEs only). Not counted: lookup_swap_cgroup_id() per entry, the
/// get_swap_device() percpu reference.
pub fn zap_swap_range(mm: &mut Mm, phys: &mut PhysMem, start: u64, end: u64) {
    let ptes = mm.pt.swap_ptes(start, end);
    let mut i = 0;
    while i < ptes.len() {
        let (va, s) = ptes[i];
        let table_end = crate::core::pgtable::pmd_end(va, end);
        let mut n = 1;
        while i + n < ptes.len() {
            let (va2, s2) = ptes[i + n];
            let want = SwapPte {
                offset: s.offset + n as u64,
                ..s
            };
            if va2 != va + n as u64 * PAGE_SIZE || va2 >= table_end || s2 != want {
                break;
            }
            n += 1;
        }
        mm.pt.hw.mark_batch(va, n as u64, "zap");
        count_swap_map(&phys.hw, n as u64);
        for &(va, s) in &ptes[i..i + n] {
            mm.pt.clear_swap_pte_counted(va);
            let slot = &phys.swap.slots[&s.offset];
            let large = slot
                .cache
                .and_then(|pfn| phys.folio_of(pfn))
                .filter(|f| f.is_large());
            if slot.count == 1 {
                match (slot.cache, large) {
                    // __try_to_reclaim_swap() looks the folio up; it goes
                    // only with the last count of all its slots, then
                    // folio_free_swap() clears SWAP_HAS_CACHE of every slot
                    // under one cluster lock and frees them.
                    (_, Some(f)) => {
                        phys.hw.one(HwEvent::SwapCacheLookup);
                        let base = phys.folio_swap(f).expect("cached");
                        let others = phys
                            .swap
                            .slots
                            .range(base..base + f.nr_pages())
                            .filter(|(_, x)| x.count > 0)
                            .count();
                        if others == 1 {
                            count_swap_map(&phys.hw, f.nr_pages());
                            phys.hw.add(HwEvent::SwapSlotFree, f.nr_pages());
                        }
                    }
                    (Some(_), None) => count_cache_reclaim(&phys.hw),
                    (None, None) => phys.hw.one(HwEvent::SwapSlotFree),
                }
            }
            put_slot(phys, s.offset);
        }
        i += n;
    }
}

/// fork: copy one swap PTE. The slot's count goes up; an exclusive entry
/// loses its exclusive bit in the parent as well; the child's copy keeps
/// uffd-wp only if its VMA is uffd-wp armed.
/// Linux: mm/memory.c copy_nonpresent_pte() (swap_duplicate(),
/// pte_swp_clear_exclusive(), pte_swp_clear_uffd_wp()).
pub fn copy_swap_pte(
    src: &mut Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    addr: u64,
    s: SwapPte,
    dst_vma: &Vma,
) {
    // Events: copy_nonpresent_pte()'s own ptep_get(src_pte) (copy_pte_range()
    // counted the one before it); swap_duplicate() → __swap_duplicate(entry,
    // 1, 1): one cluster lock, one swap_map byte; set_pte_at() of the
    // parent's entry when it drops the exclusive bit, and of the child's.
    // No folio reference or mapcount (there is no folio), no TLB flush (a
    // swap PTE is never cached in a TLB). Not counted: the once-per-child
    // mmlist_lock to put the child on swapoff's mmlist.
    rule!(src.pt.hw, ForkCopySwapPte);
    src.pt.hw.ptep_get_reads(1);
    count_swap_map(&phys.hw, 1);
    phys.swap
        .slots
        .get_mut(&s.offset)
        .expect("swap slot in use")
        .count += 1;
    let mut shared = s;
    if s.exclusive {
        shared.exclusive = false;
        src.pt.set_swap_pte_counted(addr, shared);
    }
    let mut child = shared;
    if !dst_vma.flags.contains(VmFlags::UFFD_WP) {
        child.uffd_wp = false;
    }
    dst.pt.set_swap_pte_counted(addr, child);
}

/// mremap: move one swap PTE (never batched). With uffd armed without
/// EVENT_REMAP the uffd-wp bit is dropped; the swap soft-dirty bit would be
/// set with CONFIG_MEM_SOFT_DIRTY (off on our machines).
/// Linux: mm/mremap.c move_ptes() (the !pte_present() branch,
/// pte_swp_clear_uffd_wp(), move_soft_dirty_pte()).
pub fn move_swap_pte(
    pt: &mut crate::core::pgtable::PageTables,
    clear_uffd_wp: bool,
    old: u64,
    new: u64,
    s: SwapPte,
) {
    // Events (the caller counts the ptep_get() that found the entry):
    // get_and_clear_ptes(nr = 1) and set_ptes(nr = 1). A swap PTE does not
    // set force_flush (only pte_present() does), so it adds no TLB flush,
    // and there is no folio to batch over or to reference.
    rule!(pt.hw, MremapMoveSwapPte);
    pt.hw.mark_batch(old, 1, "move");
    pt.get_and_clear_swap_pte(old);
    let mut m = s;
    if clear_uffd_wp {
        m.uffd_wp = false;
    }
    pt.set_swap_pte_counted(new, m);
}

/// UFFDIO_MOVE of a swap PTE (the source PTE is `s`, the destination PTE
/// is none and its table exists). Not exclusive → EBUSY; no swap device →
/// EAGAIN; a large swap-cache folio (block-device swap) → EBUSY. The entry moves unchanged (the
/// soft-dirty bit would be set with CONFIG_MEM_SOFT_DIRTY), without a
/// swap-in; a small swap-cache folio has its rmap index updated, which is
/// not observable. Linux: mm/userfaultfd.c move_pages_pte() (the
/// !pte_present() branch) → move_swap_pte().
pub fn uffd_move_swap_pte(
    mm: &mut Mm,
    phys: &PhysMem,
    src: u64,
    dst: u64,
    s: SwapPte,
) -> Result<(), Errno> {
    // Events (the caller counts the ptep_get() of the destination and of
    // the source): move_pages_ptes() maps both PTE tables
    // (pte_offset_map_rw_nolock: 2 PMD reads) and takes each PTL to read
    // its entry (2 locks) before it looks at the swap entry.
    let _src_ptl = mm.pt.pte_offset_map_lock(src);
    let _dst_ptl = mm.pt.pte_offset_map_lock(dst);
    let hw = &mm.pt.hw;
    if !s.exclusive {
        rule!(mm.pt.hw, UffdMoveSwapNotExclusive);
        return Err(Errno::EBUSY);
    }
    if !phys.swap.enabled() {
        return Err(Errno::EAGAIN);
    }
    // swap_cache_get_folio(): a cached folio is referenced (folio_try_get),
    // its flags line read (folio_test_large), locked (folio_trylock), and
    // at the end unlocked and put.
    hw.one(HwEvent::SwapCacheLookup);
    let cache = phys.swap.slots[&s.offset].cache;
    let cached = cache.is_some();
    // A large swap-cache folio (block-device swap) is not moved:
    // move_pages_pte() → EBUSY after the lookup, before any lock.
    if cache
        .and_then(|pfn| phys.folio_of(pfn))
        .is_some_and(|f| f.is_large())
    {
        // Linux: mm/userfaultfd.c move_pages_pte().
        rule!(hw, UffdMoveSwapLargeCache);
        hw.one(HwEvent::StructPageLine);
        hw.add(HwEvent::FolioRefAtomic, 2);
        return Err(Errno::EBUSY);
    }
    if cached {
        hw.one(HwEvent::StructPageLine);
        hw.add(HwEvent::FolioRefAtomic, 4);
    }
    // move_swap_pte(): double_pt_lock() (one lock when both addresses share
    // a PTE table), is_pte_pages_stable() re-reads both PTEs and the
    // destination PMD.
    let same_table = src & !(PMD_SIZE - 1) == dst & !(PMD_SIZE - 1);
    mm.pt.lock();
    if !same_table {
        mm.pt.lock();
    }
    let hw = &mm.pt.hw;
    hw.ptep_get_reads(2);
    let _ = mm.pt.pmd_reload(dst);
    if cached {
        // folio_move_anon_rmap() and folio->index.
        hw.one(HwEvent::RmapUpdate);
    } else {
        // swap_cache_has_folio() under the PTL.
        hw.one(HwEvent::SwapCacheLookup);
    }
    // ptep_get_and_clear() + set_pte_at(); no TLB flush (the source entry
    // was not present), no swap_map change (the count stays 1).
    mm.pt.hw.mark_batch(src, 1, "move");
    mm.pt.get_and_clear_swap_pte(src);
    mm.pt.set_swap_pte_counted(dst, s);
    Ok(())
}
