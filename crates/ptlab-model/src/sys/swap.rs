//! Swap: a swap device with per-slot swap counts and a swap cache, swap
//! PTEs through every seed operation, MADV_PAGEOUT / MADV_COLD and
//! swap-in faults (docs/ops/swap.md).
//!
//! What the model keeps, and what it leaves out:
//! * One swap device (type 0), `pages` slots; slot 0 holds the header, so
//!   offsets start at 1 (checked live: the first page out gets offset 1).
//!   Slots are handed out lowest-free-first; the kernel's cluster allocator
//!   hands them out in another order, which is why comparisons map swap
//!   offsets as a bijection, never by value.
//! * Per slot: the swap count (`swap_map[]`: one per swap PTE), the data
//!   (the tag the page held) and the swap-cache folio, if any (one folio
//!   reference).
//! * A swapped-out folio is reclaimed at once (as after a synchronous
//!   write). On a live kernel writeback is asynchronous and the folio
//!   usually stays in the swap cache until memory pressure; a later fault
//!   then maps the same frame. No observation besides the frame number
//!   shows the difference, and comparisons forget a frame's identity when
//!   its page goes to swap (docs/ops/swap.md, "swap cache").
//! * A swap-cache entry lives while its slot has a swap count. When the
//!   count reaches 0 the model drops the entry (and frees the slot) at once,
//!   where the kernel keeps the folio cached until `folio_free_swap()` or
//!   reclaim. Every exclusivity decision is taken before that drop, with the
//!   cache reference counted, as the kernel takes it. A large folio (block
//!   device) that a read fault mapped back is the exception: it stays in the
//!   cache with every slot at count 0 until a path that deletes it in the
//!   kernel (D3, docs/ops/swap.md S14r).

use crate::core::addr::{PAGE_SIZE, PMD_ORDER, PMD_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags, SwapPte};
use crate::core::folio::PhysMem;
use crate::core::hw::HwEvent;
use crate::core::pgtable::{Cursor, PmdSlot, PtItem, Segment};
use crate::core::rules::rule;
use crate::core::stats::{MthpStat, VmEvent};
pub use crate::core::swapfile::{SwapKind, MIN_SWAP_PAGES};
use crate::core::vma::{VmFlags, Vma};
use crate::mm::huge_memory::split_folio;
use crate::mm::mm::Mm;
use crate::mm::swap::count_swap_map;
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::Pid;
use std::collections::BTreeMap;

/// Enable a swap device of `bytes` (0 disables it; only allowed while no
/// slot is in use, as swapoff would first swap every page back in, which
/// the model does not do). A size below [`MIN_SWAP_PAGES`] pages is EINVAL
/// and leaves no swap area: `swap SIZE` replaces the area (swapoff of the
/// old one, then swapon of the new one, which the kernel refuses).
pub fn set_swap(phys: &mut PhysMem, bytes: u64, kind: SwapKind) -> Result<(), Errno> {
    if phys.swap.slots.values().any(|s| s.count > 0) {
        return Err(Errno::EBUSY);
    }
    // Slots held only by the swap cache: large folios a read fault mapped
    // back (D3). swapoff's try_to_unuse() deletes each from the cache
    // (folio_free_swap(), which marks it dirty) and succeeds.
    // Linux: mm/swapfile.c try_to_unuse().
    let cached: Vec<u64> = phys
        .swap
        .slots
        .values()
        .filter_map(|s| s.cache)
        .map(|p| p.0)
        .collect();
    for head in cached {
        let Some(folio) = phys.folio_of(crate::core::addr::Pfn(head)) else {
            continue;
        };
        if phys.in_swapcache(folio) {
            rule!(phys.hw, SwapOffDropsLargeCache);
            crate::mm::swap::free_swap_large(phys, folio);
        }
    }
    debug_assert!(
        phys.swap.slots.is_empty(),
        "every slot count-free and uncached"
    );
    let pages = bytes / PAGE_SIZE;
    if bytes != 0 && pages < MIN_SWAP_PAGES {
        phys.swap.pages = 0;
        // A block device shorter than one page has no page 0 to read the
        // header from: swapon(2) fails in read_mapping_folio() with EIO
        // (checked live on 6.18.44: a loop device over a 1 KiB file gives
        // EIO, one over 6000 bytes EINVAL, as a swap file of either size
        // gives EINVAL). Linux: mm/swapfile.c SYSCALL_DEFINE2(swapon).
        return Err(if kind == SwapKind::BlockDev && bytes < PAGE_SIZE {
            rule!(phys.hw, SwapOnBlockdevNoHeaderPage);
            Errno::EIO
        } else {
            Errno::EINVAL
        });
    }
    phys.swap.pages = pages;
    phys.swap.kind = kind;
    Ok(())
}

impl Model {
    /// Enable a swap device of `bytes` (rounded down to pages, the header
    /// page included), or disable swap with 0 (EBUSY while slots are in use).
    /// Fewer than [`crate::core::swapfile::MIN_SWAP_PAGES`] pages is EINVAL, as
    /// swapon(2) answers.
    pub fn set_swap(&mut self, bytes: u64) -> Result<(), Errno> {
        set_swap(&mut self.phys, bytes, SwapKind::File)
    }

    /// [`Model::set_swap`] on a swap area of the given kind (`swap SIZE
    /// blockdev`: large folios go out whole).
    pub fn set_swap_on(&mut self, bytes: u64, kind: SwapKind) -> Result<(), Errno> {
        set_swap(&mut self.phys, bytes, kind)
    }
}

// ---- MADV_PAGEOUT / MADV_COLD --------------------------------------------------

/// Which advice, and how reclaim unmaps a large folio.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pageout {
    /// MADV_COLD (deactivate only) instead of MADV_PAGEOUT.
    pub cold: bool,
    /// The proposed batched unmap of a large folio at swap-out
    /// (`--after swapout-unmap-batch`); 6.18 unmaps PTE by PTE.
    pub unmap_batch: bool,
}

/// MADV_PAGEOUT or MADV_COLD (`how.cold`) on `[start, end)` of one
/// anonymous VMA.
///
/// MADV_COLD walks the range the same way and splits the large folios it
/// covers only in part (checked live), but only deactivates the rest and
/// clears young bits, which nothing /proc shows (hardware-event accounting
/// of the young-bit clears is left to the event layer).
///
/// MADV_PAGEOUT, per PMD slot (Linux: mm/madvise.c
/// madvise_cold_or_pageout_pte_range(), then mm/vmscan.c reclaim_pages() →
/// shrink_folio_list()):
/// * a PMD-mapped THP the range covers whole is reclaimed whole unless
///   another mm maps it (folio_maybe_mapped_shared()); one the range covers
///   in part is split first (split_folio()) and its pages in the range are
///   handled as small folios;
/// * a PTE-mapped large folio: if the range does not cover all of it from
///   this PTE on (madvise_folio_pte_batch() < nr_pages), it is split unless
///   shared, and the small folios in range are handled; if shared it is
///   skipped; otherwise it is reclaimed whole;
/// * small folios mapped more than once are skipped; the zero page and
///   swap PTEs are skipped;
/// * reclaim of a large folio: on a block device the folio gets a
///   naturally aligned run of slots and goes out whole, PMD-mapped ones
///   after their PMD is split into PTEs (CONFIG_THP_SWAP), and stays in
///   the swap cache ([`swap_out_large`]); on a swap file, or when no run is
///   free, or with no swap at all, the allocation fails, so the folio is
///   split (`swpout_fallback`, `thp_swpout_fallback` for PMD size) and
///   every page goes out on its own. Checked live on 6.18.44: with no swap
///   at all, a 64 KiB folio is split and stays mapped;
/// * reclaim of a small folio: allocate a slot (none: the page stays), and
///   try_to_unmap_one() replaces the PTE by a swap PTE carrying
///   exclusive (PageAnonExclusive), soft-dirty and uffd-wp; RSS −1; the
///   folio is freed.
pub fn madvise_pageout(
    procs: &mut BTreeMap<Pid, Mm>,
    phys: &mut PhysMem,
    pid: Pid,
    vma: &Vma,
    start: u64,
    end: u64,
    how: Pageout,
) {
    let cold = how.cold;
    // can_madv_lru_vma()
    if vma
        .flags
        .intersects(VmFlags::LOCKED | VmFlags::PFNMAP | VmFlags::HUGETLB)
    {
        return;
    }
    // Linux: mm/madvise.c madvise_cold_or_pageout_pte_range(), one step
    // per PMD slot.
    let mut c = Cursor::pmds(start, end);
    while let Some(q) = c.next(&procs[&pid].pt) {
        match q.item {
            PtItem::Huge { leaf, .. } => {
                if Some(leaf.pfn) == phys.huge_zero {
                    continue;
                }
                let folio = phys.folio_of(leaf.pfn).expect("PMD maps a folio");
                if phys.mapped_by_other_mm(folio, pid) {
                    rule!(phys.hw, SwapPageoutSkipsSharedThp);
                    continue;
                }
                let whole = q.whole_pmd();
                if whole && cold {
                    rule!(phys.hw, SwapColdKeepsWholeThp);
                    continue;
                }
                if whole && phys.lazyfree(folio) {
                    // Not split (shrink_folio_list() splits swap-backed
                    // folios only): discarded whole or kept.
                    let dirty = leaf.flags.contains(LeafFlags::DIRTY);
                    let mm = procs.get_mut(&pid).expect("pid");
                    discard_lazyfree(mm, phys, folio, q.entry_start(), PMD_SIZE, dirty);
                    continue;
                }
                if whole {
                    // shrink_folio_list(): folio_alloc_swap() of the whole
                    // folio first; try_to_unmap(TTU_SPLIT_HUGE_PMD) then
                    // splits the PMD (the folio stays whole) and unmaps the
                    // 512 PTEs.
                    if let Some(slots) = folio_alloc_swap(phys, folio) {
                        let mm = procs.get_mut(&pid).expect("pid");
                        crate::mm::zap::split_huge_pmd(mm, phys, q.entry_start());
                        swap_out_large(mm, phys, q.entry_start(), folio, slots, how.unmap_batch);
                        continue;
                    }
                }
                // Split (the whole PMD folio at reclaim, or the partly covered
                // one right away); the stats of a reclaim-time split follow.
                let _ = split_folio(procs, phys, folio, Some((pid, q.entry_start(), folio.head)));
                if whole {
                    rule!(phys.hw, SwapPageoutSplitsPmdThp);
                    phys.stats.mthp(PMD_ORDER, MthpStat::SwpoutFallback, 1);
                    phys.stats.vm(VmEvent::ThpSwpoutFallback, 1);
                }
                pageout_ptes(procs, phys, pid, q.segment(), how);
            }
            PtItem::PteTable(_) => pageout_ptes(procs, phys, pid, q.segment(), how),
            _ => {}
        }
    }
}

/// The PTE part of MADV_PAGEOUT for `[start, end)` inside one PMD slot.
fn pageout_ptes(
    procs: &mut BTreeMap<Pid, Mm>,
    phys: &mut PhysMem,
    pid: Pid,
    seg: Segment,
    how: Pageout,
) {
    let cold = how.cold;
    let Segment { start, end } = seg;
    if !matches!(procs[&pid].pt.pmd(start), PmdSlot::Table(_)) {
        return;
    }
    // madvise_cold_or_pageout_pte_range(): pte_offset_map_lock(), then per
    // entry ptep_get() and, for a normal page, vm_normal_folio() (the
    // page's struct page line). The young-bit clears
    // (clear_young_dirty_ptes(), tlb_remove_tlb_entries()) are not counted.
    let _ptl = seg.lock_pte_table(&procs[&pid].pt);
    let mut addr = start;
    while addr < end {
        let Some(pte) = procs[&pid].pt.normal_pte(addr) else {
            addr += PAGE_SIZE;
            continue;
        };
        procs[&pid].pt.hw.one(HwEvent::StructPageLine);
        let folio = phys.folio_of(pte.pfn).expect("PTE maps a folio");
        if folio.is_large() {
            // madvise_folio_pte_batch(): consecutive pages of this folio.
            let max = (end - addr) / PAGE_SIZE;
            let mut nr = 1;
            while nr < max {
                match procs[&pid].pt.pte_raw(addr + nr * PAGE_SIZE) {
                    Entry::Leaf(l)
                        if l.pfn.0 == pte.pfn.0 + nr
                            && l.pfn.0 < folio.head.0 + folio.nr_pages() =>
                    {
                        nr += 1
                    }
                    _ => break,
                }
            }
            if phys.mapped_by_other_mm(folio, pid) {
                rule!(phys.hw, SwapPageoutSkipsSharedLarge);
                addr += nr * PAGE_SIZE;
                continue;
            }
            let covers_all = nr == folio.nr_pages() && pte.pfn == folio.head;
            if covers_all && cold {
                addr += nr * PAGE_SIZE;
                continue;
            }
            // folio_mapcount() == nr_pages: exclusive, all mapped here.
            if covers_all && phys.lazyfree(folio) {
                if u64::from(phys.folio_mapcount(folio)) == nr {
                    let mm = procs.get_mut(&pid).expect("pid");
                    let dirty = (0..nr).any(|k| {
                        matches!(mm.pt.pte_peek(addr + k * PAGE_SIZE),
                            Entry::Leaf(l) if l.flags.contains(LeafFlags::DIRTY))
                    });
                    discard_lazyfree(mm, phys, folio, addr, nr * PAGE_SIZE, dirty);
                }
                addr += nr * PAGE_SIZE;
                continue;
            }
            if covers_all {
                if let Some(slots) = folio_alloc_swap(phys, folio) {
                    let mm = procs.get_mut(&pid).expect("pid");
                    swap_out_large(mm, phys, addr, folio, slots, how.unmap_batch);
                    addr += nr * PAGE_SIZE;
                    continue;
                }
            }
            let _ = split_folio(procs, phys, folio, Some((pid, addr, pte.pfn)));
            if covers_all {
                // Reclaimed whole: the large swap allocation fails, so
                // shrink_folio_list() splits it and counts the fallback.
                rule!(phys.hw, SwapPageoutSplitsLarge);
                phys.stats.mthp(folio.order.0, MthpStat::SwpoutFallback, 1);
                if folio.order.0 == PMD_ORDER {
                    phys.stats.vm(VmEvent::ThpSwpoutFallback, 1);
                }
            }
            // Re-examine this PTE: it now maps a small folio.
            continue;
        }
        // folio_maybe_mapped_shared() on a small folio: mapcount > 1.
        if cold || phys.page_mapcount(pte.pfn) > 1 {
            rule!(phys.hw, SwapPageoutSkipsSharedSmall);
            addr += PAGE_SIZE;
            continue;
        }
        let mm = procs.get_mut(&pid).expect("pid");
        let folio = phys.folio_of(pte.pfn).expect("folio");
        if phys.lazyfree(folio) {
            let dirty = pte.flags.contains(LeafFlags::DIRTY);
            discard_lazyfree(mm, phys, folio, addr, PAGE_SIZE, dirty);
        } else {
            swap_out_page(mm, phys, addr, pte);
        }
        addr += PAGE_SIZE;
    }
}

/// Reclaim a lazyfree (MADV_FREE) folio mapped whole at `[addr, addr +
/// len)` of `mm` (one PMD, or all its PTEs as one batch): no swap slot
/// and no split (shrink_folio_list() skips add_to_swap() and the split
/// for a folio without PG_swapbacked). try_to_unmap_one() clears the
/// mapping, moves its dirty bit to the folio, and then discards the folio
/// (the mapping stays cleared, RSS drops, the folio is freed: the next
/// access faults in a zero-filled page) if only the mappings hold it
/// (ref_count == 1 + mapcount with the isolation reference) and it is
/// clean; otherwise it restores the mapping and sets PG_swapbacked again,
/// so a later reclaim swaps it out like any anon folio. A whole large
/// folio goes at once (6.15+: folio_unmap_pte_batch(); a PMD mapping:
/// unmap_huge_pmd_locked() → __discard_anon_folio_pmd_locked()). Works
/// without swap. Linux: mm/vmscan.c shrink_folio_list(), mm/rmap.c
/// try_to_unmap_one().
fn discard_lazyfree(
    mm: &mut Mm,
    phys: &mut PhysMem,
    folio: crate::core::folio::FolioRef,
    addr: u64,
    len: u64,
    pte_dirty: bool,
) {
    let clean = !pte_dirty && !phys.folio_dirty(folio);
    // The model holds no isolation reference: ref_count == mapcount.
    let only_mapped = phys.refcount(folio) == phys.folio_mapcount(folio);
    if clean && only_mapped {
        rule!(phys.hw, SwapLazyfreeDiscarded);
        let mut tlb = crate::core::tlb::MmuGather::new();
        crate::mm::zap::zap_range(mm, phys, &mut tlb, addr, addr + len, false);
        tlb.finish(&mm.pt);
        return;
    }
    if pte_dirty {
        rule!(phys.hw, SwapLazyfreeRedirtied);
        phys.set_folio_dirty(folio, true);
    }
    phys.set_lazyfree(folio, false);
    if len == PMD_SIZE && matches!(mm.pt.pmd(addr), PmdSlot::Leaf(_)) {
        // The PMD stays split (TTU_SPLIT_HUGE_PMD → split_huge_pmd_locked()
        // after unmap_huge_pmd_locked() failed): the folio is kept whole,
        // mapped by PTEs (checked live: thp_split_pmd +1, AnonHugePages 0).
        rule!(phys.hw, SwapLazyfreePmdSplitKept);
        crate::mm::zap::split_huge_pmd(mm, phys, addr);
    }
}

/// The swap slots of a large folio going to reclaim: the run it already
/// holds if it is in the swap cache (`fresh == false`), else a new run from
/// the block device with `SWAP_HAS_CACHE` set on every slot and the swap
/// cache's references (one per page); `None` when the device is not a
/// block device or has no free run (the caller splits the folio).
/// Linux: mm/vmscan.c shrink_folio_list() (folio_test_swapcache(), then
/// folio_alloc_swap()), mm/swapfile.c folio_alloc_swap(),
/// mm/swap_state.c swap_cache_add_folio().
#[derive(Clone, Copy, Debug)]
pub(crate) struct FolioSlots {
    base: u64,
    fresh: bool,
}

pub(crate) fn folio_alloc_swap(
    phys: &mut PhysMem,
    folio: crate::core::folio::FolioRef,
) -> Option<FolioSlots> {
    if let Some(base) = phys.folio_swap(folio) {
        return Some(FolioSlots { base, fresh: false });
    }
    // Only a block device takes a large folio (alloc_run() says why):
    // decided before the pages' data is gathered.
    if !phys.swap.enabled() || phys.swap.kind != SwapKind::BlockDev {
        return None;
    }
    let nr = folio.nr_pages();
    let data: Vec<(u64, Option<crate::core::content::PageRest>)> = (0..nr)
        .map(|i| {
            let pfn = folio.head.add(i);
            (phys.tag(pfn), phys.contents.get(pfn.0).cloned())
        })
        .collect();
    let base = phys.swap.alloc_run(nr, folio.head, &data)?;
    // One cluster lock, SWAP_HAS_CACHE in `nr` swap_map bytes.
    count_swap_map(&phys.hw, nr);
    phys.set_folio_swap(folio, Some(base));
    phys.ref_add(folio, nr as u32);
    Some(FolioSlots { base, fresh: true })
}

/// Reclaim a large folio whole (block-device swap): every PTE of the folio
/// (`[addr, addr + nr pages)` in `mm`, mapping the folio's pages in order)
/// becomes a swap PTE for slot `base + i`, carrying the page's
/// PageAnonExclusive as the exclusive bit and the PTE's soft-dirty and
/// uffd-wp bits; RSS −nr. The folio stays in the swap cache, unmapped,
/// holding its slots: writeback to a block device completes later, and
/// reclaim frees only a folio whose writeback finished (checked live on
/// 6.18.44 with a loop device: after MADV_PAGEOUT of 64 MiB of 64 KiB
/// folios all 1,024 folios were still in the swap cache, and a read fault
/// mapped each whole again). It is written (`swpout` +1 for its size,
/// `thp_swpout` +1 for PMD size) when its slots are new or it was dirtied.
///
/// Linux 6.18, mm/rmap.c try_to_unmap_one(), one PTE per
/// page_vma_mapped_walk() step: the PTE read, the clear with its TLB flush
/// (ptep_clear_flush(); arm64 defers the flush and its first clear of a
/// contpte block unfolds the block), folio_dup_swap() for one slot (one
/// cluster lock), set_pte_at() of the swap PTE, folio_remove_rmap_pte(),
/// folio_put(). With `batched` (`--after swapout-unmap-batch`, the
/// proposal): folio_pte_batch() finds the whole folio, one
/// get_and_clear_full_ptes() (no unfold), one flush of the range, one
/// folio_dup_swap() for all slots, the swap PTEs written in one pass,
/// folio_remove_rmap_ptes() and folio_put_refs() once. Both leave the same
/// page tables, counts and folio state.
/// Also mm/vmscan.c pageout() → mm/page_io.c swap_writeout() →
/// count_swpout_vm_event().
pub(crate) fn swap_out_large(
    mm: &mut Mm,
    phys: &mut PhysMem,
    addr: u64,
    folio: crate::core::folio::FolioRef,
    slots: FolioSlots,
    batched: bool,
) {
    rule!(phys.hw, SwapOutLargeWhole);
    // Linux: mm/vmscan.c shrink_folio_list() (isolated by
    // madvise_cold_or_pageout_pte_range(), folio lock, swap-cache add,
    // try_to_unmap()'s rmap walk, putback).
    phys.hw.one(HwEvent::SwapReclaimFolio);
    let nr = folio.nr_pages();
    let leaves: Vec<Leaf> = (0..nr)
        .map(|i| match mm.pt.pte_peek(addr + i * PAGE_SIZE) {
            Entry::Leaf(l) => l,
            e => unreachable!("swap_out_large over {e:?}"),
        })
        .collect();
    let dirty =
        phys.folio_dirty(folio) || leaves.iter().any(|l| l.flags.contains(LeafFlags::DIRTY));
    let swp = |phys: &PhysMem, i: u64| SwapPte {
        ty: 0,
        offset: slots.base + i,
        exclusive: phys.anon_exclusive(folio.head.add(i)),
        soft_dirty: leaves[i as usize].flags.contains(LeafFlags::SOFT_DIRTY),
        uffd_wp: leaves[i as usize].flags.contains(LeafFlags::UFFD_WP),
    };
    // The swap counts the swap PTEs below take (folio_dup_swap(), counted
    // with them), added first: every count is in place before the folio's
    // last mapping goes, as try_to_unmap_one() dups each entry before it
    // removes the rmap (so a cache-only folio is not taken for one nobody
    // refers to: PhysMem::ref_sub()).
    for i in 0..nr {
        let slot = phys.swap.slots.get_mut(&(slots.base + i)).expect("slot");
        slot.count += 1;
    }
    // page_vma_mapped_walk() maps the PTE table and takes its lock once.
    let _ptl = mm.pt.pte_offset_map_lock(addr);
    if batched {
        // Per page_vma_mapped_walk() step: check_pte() on the first PTE,
        // folio_unmap_pte_batch() over the rest of the folio (PTEs whose
        // bits differ, e.g. uffd-wp on some, end a batch); one clear and one
        // flush per batch; then per run of pages with equal
        // PageAnonExclusive (the swap PTEs' exclusive bit): the swap counts
        // under one cluster lock, the swap PTEs, the rmap and the
        // references.
        rule!(phys.hw, SwapUnmapLargeBatched);
        let mut i = 0;
        while i < nr {
            let va = addr + i * PAGE_SIZE;
            mm.pt.hw.ptep_get_reads(1);
            let b = crate::mm::batch::folio_pte_batch(
                &mm.pt,
                phys,
                va,
                leaves[i as usize],
                nr - i,
                crate::mm::batch::Fpb::empty(),
            );
            mm.pt.hw.mark_batch(va, b.nr, "swapout");
            mm.pt.clear_ptes(va, b.nr);
            mm.pt.tlbbatch_add_pending(va, va + b.nr * PAGE_SIZE);
            let mut j = i;
            while j < i + b.nr {
                let excl = phys.anon_exclusive(folio.head.add(j));
                let mut k = j + 1;
                while k < i + b.nr && phys.anon_exclusive(folio.head.add(k)) == excl {
                    k += 1;
                }
                count_swap_map(&phys.hw, k - j);
                for p in j..k {
                    let s = swp(phys, p);
                    mm.pt.set_swap_pte_counted(addr + p * PAGE_SIZE, s);
                }
                let first = folio.head.add(j);
                phys.remove_rmap_ptes(folio, first, (k - j) as u32, mm.pid);
                phys.set_anon_exclusive_range(first, k - j, false);
                phys.ref_sub(folio, (k - j) as u32);
                j = k;
            }
            i += b.nr;
        }
    } else {
        rule!(phys.hw, SwapUnmapLargePerPte);
        for i in 0..nr {
            let va = addr + i * PAGE_SIZE;
            let pfn = folio.head.add(i);
            mm.pt.hw.ptep_get_reads(1);
            mm.pt.hw.mark_batch(va, 1, "swapout");
            mm.pt.clear_ptes(va, 1);
            mm.pt.tlbbatch_add_pending(va, va + PAGE_SIZE);
            count_swap_map(&phys.hw, 1);
            let s = swp(phys, i);
            mm.pt.set_swap_pte_counted(va, s);
            phys.remove_rmap_ptes(folio, pfn, 1, mm.pid);
            phys.set_anon_exclusive(pfn, false);
            phys.ref_sub(folio, 1);
        }
    }
    // try_to_unmap_flush_dirty() before pageout(): the folio is dirty
    // (folio_alloc_swap() marked it), and a folio already in the swap cache
    // is flushed by try_to_unmap_flush() at the end of the reclaim pass.
    mm.pt.tlbbatch_flush();
    mm.rss_anon -= nr;
    if !slots.fresh && !dirty {
        // A folio already in the swap cache and clean since it was last
        // written (a read fault mapped it back: D3) is not written again
        // (no `swpout`); with no writeback pending, __remove_mapping()
        // takes it out of the swap cache and frees it at once, the slots
        // keeping their data and counts: a later fault reads order-0
        // folios (checked live on 6.18.44 with a loop device: `nr_anon`
        // −1, `swpout` +0; tests/scenarios/swap-29 …).
        rule!(phys.hw, SwapOutCleanCachedLargeFreed);
        count_swap_map(&phys.hw, nr);
        for i in 0..nr {
            phys.swap
                .slots
                .get_mut(&(slots.base + i))
                .expect("slot")
                .cache = None;
        }
        phys.set_folio_swap(folio, None);
        phys.ref_sub(folio, nr as u32);
        return;
    }
    // pageout(): a new run, or a folio dirtied since it was last written.
    if slots.fresh || dirty {
        let mut zero = true;
        for i in 0..nr {
            let pfn = folio.head.add(i);
            let tag = phys.tag(pfn);
            let rest = phys.contents.get(pfn.0).cloned();
            zero &= tag == 0 && rest.is_none();
            let slot = phys.swap.slots.get_mut(&(slots.base + i)).expect("slot");
            slot.tag = tag;
            slot.rest = rest;
        }
        phys.set_folio_dirty(folio, false);
        if zero {
            // A zero-filled folio is not written: swap_writeout() marks its
            // slots in the swap zeromap (SWPOUT_ZERO, no `swpout`), no
            // writeback starts, and shrink_folio_list() frees the folio at
            // once (__remove_mapping()); a later fault reads zeros into an
            // order-0 folio. Linux: mm/page_io.c swap_writeout(),
            // swap_zeromap_folio_set().
            rule!(phys.hw, SwapOutZeroFolio);
            for i in 0..nr {
                phys.swap
                    .slots
                    .get_mut(&(slots.base + i))
                    .expect("slot")
                    .cache = None;
            }
            count_swap_map(&phys.hw, nr);
            phys.set_folio_swap(folio, None);
            phys.ref_sub(folio, nr as u32);
            return;
        }
        phys.swap.pswpout += nr;
        // Linux: mm/page_io.c swap_writeout() → __swap_writepage() →
        // swap_writepage_bdev_async(): one bio for the whole folio.
        phys.hw.one(HwEvent::SwapWriteBio);
        phys.hw.add(HwEvent::SwapWrite4k, nr);
        phys.stats.mthp(folio.order.0, MthpStat::Swpout, 1);
        if folio.order.0 == PMD_ORDER {
            phys.stats.vm(VmEvent::ThpSwpout, 1);
        }
    }
}

/// Reclaim one exclusive small folio mapped at `addr`: allocate a slot,
/// replace the PTE by a swap PTE, free the folio. No slot: nothing changes.
/// Linux: mm/vmscan.c shrink_folio_list() → folio_alloc_swap(),
/// try_to_unmap() → mm/rmap.c try_to_unmap_one() (pte_swp_mkexclusive(),
/// pte_swp_mksoft_dirty(), pte_swp_mkuffd_wp()), pageout(), and freeing
/// the clean swap-cache folio.
///
/// Events: folio_alloc_swap() (cluster lock, the slot's SWAP_HAS_CACHE
/// byte; the allocator's cluster search is not counted);
/// try_to_unmap_one(): page_vma_mapped_walk() (a PMD read, the PTL, the
/// PTE re-read), the clear (ptep_get_and_clear, arm64 with its unfold
/// check) and one page's TLB flush — x86 with a single CPU in mm_cpumask
/// does not defer it (should_defer_flush() is false: ptep_clear_flush()),
/// arm64 defers it (arch_tlbbatch_add_pending(): DSB ISHST + TLBI VALE1IS)
/// and the dirty folio's try_to_unmap_flush_dirty() before pageout()
/// completes it (DSB ISH): the same instructions as flush_tlb_page();
/// folio_dup_swap() (cluster lock, one byte), set_pte_at() of the swap
/// PTE, the rmap removal and the reference (counted by PhysMem); after the
/// write, __remove_mapping() → swap-cache delete clears SWAP_HAS_CACHE
/// (cluster lock, one byte) and the folio is freed. Not counted: the
/// rmap walk (anon_vma lock, interval tree), the folio lock, LRU
/// isolation, and the page write itself (swap_writeout(): I/O, not
/// priced).
///
/// A folio still in the swap cache (swapped in, its slot still named by
/// another process's swap PTE) keeps its slot: shrink_folio_list() skips
/// folio_alloc_swap() for it, and a clean one is not written again — it
/// only leaves the cache. Found by `ptlab fuzz --seed 20261127`, case
/// 1289 (pageout, fork, read, pageout: both processes name one slot live).
fn swap_out_page(mm: &mut Mm, phys: &mut PhysMem, addr: u64, pte: Leaf) {
    // Linux: mm/vmscan.c shrink_folio_list() for this folio (isolation,
    // folio lock, swap-cache add, the rmap walk, putback or free), with
    // or without a slot.
    phys.hw.one(HwEvent::SwapReclaimFolio);
    let tag = phys.tag(pte.pfn);
    let folio = phys.folio_of(pte.pfn).expect("folio");
    let cached = match folio.is_large() {
        false => phys.small_slot_caching(folio),
        true => phys.swap.slot_caching(pte.pfn),
    };
    let offset = match cached {
        // folio_dup_swap() below adds this PTE's count.
        Some(off) => off,
        None => {
            let rest = phys.contents.get(pte.pfn.0).cloned();
            let Some(off) = phys.swap.alloc(tag, rest) else {
                rule!(phys.hw, SwapOutNoSlot);
                return;
            };
            count_swap_map(&phys.hw, 1);
            off
        }
    };
    let exclusive = phys.anon_exclusive(pte.pfn);
    let _ptl = mm.pt.pte_offset_map_lock(addr);
    mm.pt.hw.ptep_get_reads(1);
    mm.pt.clear_ptes(addr, 1);
    mm.pt.tlbbatch_add_pending(addr, addr + PAGE_SIZE);
    // try_to_unmap_flush_dirty() before pageout() (the folio is dirty:
    // folio_alloc_swap() marked it).
    mm.pt.tlbbatch_flush();
    count_swap_map(&phys.hw, 1);
    mm.pt.set_swap_pte_counted(
        addr,
        SwapPte {
            ty: 0,
            offset,
            exclusive,
            soft_dirty: pte.flags.contains(LeafFlags::SOFT_DIRTY),
            uffd_wp: pte.flags.contains(LeafFlags::UFFD_WP),
        },
    );
    phys.remove_rmap_ptes(folio, pte.pfn, 1, mm.pid);
    phys.set_anon_exclusive(pte.pfn, false);
    mm.rss_anon -= 1;
    count_swap_map(&phys.hw, 1);
    phys.ref_sub(folio, 1);
    if cached.is_some() {
        rule!(phys.hw, SwapOutCachedSlot);
        let slot = phys.swap.slots.get_mut(&offset).expect("slot");
        slot.count += 1;
        // A dirty PTE dirtied the folio (try_to_unmap_one()): pageout()
        // writes it; a clean one is already on the device.
        if pte.flags.contains(LeafFlags::DIRTY) {
            slot.tag = tag;
            phys.swap.pswpout += 1;
            // Linux: mm/page_io.c swap_writeout(): one bio, one page.
            phys.hw.one(HwEvent::SwapWriteBio);
            phys.hw.one(HwEvent::SwapWrite4k);
        }
        // __remove_mapping() → swap-cache delete: the cache's reference.
        slot.cache = None;
        phys.ref_sub(folio, 1);
    } else {
        rule!(phys.hw, SwapOutWrite);
        phys.swap.pswpout += 1;
        // Linux: mm/page_io.c swap_writeout(): one bio, one page.
        phys.hw.one(HwEvent::SwapWriteBio);
        phys.hw.one(HwEvent::SwapWrite4k);
    }
}

// ---- invariants ---------------------------------------------------------------

/// Every slot's swap count equals the swap PTEs that refer to it; every
/// swap PTE refers to a slot in use; a cached folio is allocated, order 0
/// and counts the cache's reference.
pub fn check(procs: &BTreeMap<Pid, Mm>, phys: &PhysMem, errs: &mut Vec<String>) {
    let mut counts: BTreeMap<u64, u32> = BTreeMap::new();
    for (pid, mm) in procs {
        for (va, s) in mm.pt.swap_ptes(0, u64::MAX) {
            if s.ty != 0 {
                errs.push(format!("pid {pid}: swap PTE at {va:#x} has type {}", s.ty));
            }
            *counts.entry(s.offset).or_default() += 1;
        }
    }
    for (off, slot) in &phys.swap.slots {
        let want = counts.remove(off).unwrap_or(0);
        if slot.count != want {
            errs.push(format!(
                "swap slot {off}: count {} but {want} swap PTEs refer to it",
                slot.count
            ));
        }
        let large_cache = slot
            .cache
            .and_then(|pfn| phys.folio_of(pfn))
            .filter(|f| f.is_large());
        if slot.count == 0 && large_cache.is_none() {
            errs.push(format!("swap slot {off} in use with count 0"));
        }
        if let Some(f) = large_cache {
            // A run of slots, one per page, from folio->swap; kept while any
            // of them has a count.
            let nr = f.nr_pages();
            match phys.folio_swap(f) {
                Some(base) if (base..base + nr).contains(off) && base % nr == 0 => {
                    let idx = off - base;
                    if slot.cache != Some(f.head) {
                        errs.push(format!("swap slot {off}: cache names a tail page"));
                    }
                    if idx == 0 {
                        let live = phys.swap.slots.range(base..base + nr).count() as u64;
                        let counted = phys
                            .swap
                            .slots
                            .range(base..base + nr)
                            .filter(|(_, s)| s.count > 0)
                            .count();
                        if live != nr {
                            errs.push(format!(
                                "large swap-cache folio {}: {live} of its {nr} slots in use",
                                f.head
                            ));
                        }
                        // With no swap count left it is kept only while
                        // mapped (a read swap-in, D3): unmapped, the zap
                        // that unmapped it freed it (PhysMem::ref_sub()).
                        if counted == 0 && phys.folio_mapcount(f) == 0 {
                            errs.push(format!(
                                "large swap-cache folio {} kept unmapped with no swap count left",
                                f.head
                            ));
                        }
                        if phys.refcount(f) < phys.folio_mapcount(f) + nr as u32 {
                            errs.push(format!(
                                "large swap-cache folio {}: refcount {} < mapcount {} + {nr}",
                                f.head,
                                phys.refcount(f),
                                phys.folio_mapcount(f)
                            ));
                        }
                    }
                }
                other => errs.push(format!(
                    "swap slot {off}: cached by large folio {} whose swap is {other:?}",
                    f.head
                )),
            }
            continue;
        }
        if let Some(pfn) = slot.cache {
            match phys.folio_of(pfn) {
                Some(f) if !f.is_large() => {
                    if phys.refcount(f) < phys.page_mapcount(pfn) + 1 {
                        errs.push(format!(
                            "swap-cache folio {pfn:?} of slot {off}: refcount {} < mapcount {} + 1",
                            phys.refcount(f),
                            phys.page_mapcount(pfn)
                        ));
                    }
                }
                _ => errs.push(format!(
                    "swap slot {off}: cache {pfn:?} is not a small folio"
                )),
            }
        }
    }
    for (off, n) in counts {
        errs.push(format!("{n} swap PTEs refer to free swap slot {off}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observe::PageState;
    use crate::types::uapi::{Advice, MapFlags, Prot, ThpKnob, ThpMode};
    use crate::{ArchKind, Model, ModelConfig};

    const A: u64 = 0x7f00_0010_0000;
    const RW: Prot = Prot::READ.union(Prot::WRITE);

    fn fixed() -> MapFlags {
        MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED
    }

    fn state(m: &Model, pid: Pid, va: u64) -> PageState {
        m.observe_pages(pid, va, va + 4096)[0].state.clone()
    }

    fn swapped(m: &Model, pid: Pid, va: u64) -> Option<u64> {
        match state(m, pid, va) {
            PageState::Swapped { offset, .. } => Some(offset),
            _ => None,
        }
    }

    fn model(arch: ArchKind, len: u64) -> Model {
        let mut m = Model::new(ModelConfig::for_arch(arch));
        m.set_swap(64 << 20).unwrap();
        m.mmap(1, A, len, RW, fixed()).unwrap();
        for k in 0..len / 4096 {
            m.write(1, A + k * 4096, A + k * 4096).unwrap();
        }
        m
    }

    /// S13: swapon(2) needs the header page plus one slot; a smaller
    /// `swap SIZE` is EINVAL and leaves no swap area.
    #[test]
    fn smallest_swap_area_is_two_pages() {
        let mut m = Model::new(ModelConfig::for_arch(ArchKind::X86_64));
        m.set_swap(64 << 20).unwrap();
        for bytes in [1, 4095, 4096, 5000, 8191] {
            assert_eq!(m.set_swap(bytes), Err(Errno::EINVAL), "{bytes} bytes");
            assert!(!m.swap().enabled(), "{bytes} bytes: no swap area left");
        }
        for bytes in [8192, 12288, 32 << 10, 36 << 10, 40 << 10, 40961] {
            assert_eq!(m.set_swap(bytes), Ok(()), "{bytes} bytes");
            assert_eq!(m.swap().pages, bytes / 4096);
        }
        // One usable slot: the first page goes out, the second stays.
        m.set_swap(8192).unwrap();
        m.mmap(1, A, 0x2000, RW, fixed()).unwrap();
        m.write(1, A, 1).unwrap();
        m.write(1, A + 4096, 2).unwrap();
        m.madvise(1, A, 0x2000, Advice::PageOut).unwrap();
        assert_eq!(swapped(&m, 1, A), Some(1));
        assert_eq!(swapped(&m, 1, A + 4096), None);
        assert_eq!(m.set_swap(0), Err(Errno::EBUSY));
    }

    #[test]
    fn pageout_swapin_fork_zap_keep_counts() {
        for arch in ArchKind::ALL {
            let mut m = model(arch, 0x10000);
            m.madvise(1, A, 0x10000, Advice::PageOut).unwrap();
            assert_eq!(m.swap().used(), 16);
            let off = swapped(&m, 1, A).expect("swapped");
            assert!(m.procs[&1].pt.swap_pte(A).unwrap().exclusive);
            m.check_invariants().unwrap();
            let c = m.fork(1).unwrap();
            assert_eq!(m.swap().slots[&off].count, 2);
            assert!(
                !m.procs[&1].pt.swap_pte(A).unwrap().exclusive,
                "parent loses exclusive"
            );
            assert!(!m.procs[&c].pt.swap_pte(A).unwrap().exclusive);
            m.check_invariants().unwrap();
            // The child writes: a copy; the parent's read finds the cache.
            m.write(c, A, 7).unwrap();
            assert!(m.swap().slots[&off].cache.is_some());
            m.check_invariants().unwrap();
            assert_eq!(m.read(1, A), Ok(A));
            assert!(!m.swap().slots.contains_key(&off), "slot freed at count 0");
            match state(&m, 1, A) {
                PageState::Anon(p) => assert!(!p.anon_exclusive && p.mapcount == 1),
                s => panic!("{s:?}"),
            }
            m.check_invariants().unwrap();
            m.exit(c).unwrap();
            m.munmap(1, A + 0x8000, 0x8000).unwrap();
            assert_eq!(m.swap().used(), 7);
            m.check_invariants().unwrap();
        }
    }

    #[test]
    fn no_swap_leaves_small_pages_and_splits_large() {
        let mut m = Model::new(ModelConfig::default());
        m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        m.mmap(1, A, 0x10000, RW, fixed()).unwrap();
        m.write(1, A, 1).unwrap();
        m.madvise(1, A, 0x10000, Advice::PageOut).unwrap();
        match state(&m, 1, A) {
            PageState::Anon(p) => assert_eq!(p.order, 0),
            s => panic!("{s:?}"),
        }
        // Untouched subpages went to the zero page at the split.
        assert_eq!(state(&m, 1, A + 0x1000), PageState::Zero);
        assert_eq!(m.phys.stats.get_mthp(4, MthpStat::SwpoutFallback), 1);
        assert_eq!(m.swap().used(), 0);
        m.check_invariants().unwrap();
    }

    #[test]
    fn swap_off_with_slots_in_use_is_ebusy() {
        let mut m = model(ArchKind::X86_64, 0x2000);
        m.madvise(1, A, 0x1000, Advice::PageOut).unwrap();
        assert_eq!(m.set_swap(0), Err(Errno::EBUSY));
        m.read(1, A).unwrap();
        assert_eq!(m.set_swap(0), Ok(()));
        // No swap: pages stay.
        m.madvise(1, A, 0x2000, Advice::PageOut).unwrap();
        assert!(matches!(state(&m, 1, A), PageState::Anon(_)));
    }

    #[test]
    fn arm64_pageout_of_a_contpte_block_unfolds_it() {
        let mut m = Model::new(ModelConfig::for_arch(ArchKind::Arm64));
        m.set_swap(64 << 20).unwrap();
        m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        m.mmap(1, A, 0x10000, RW, fixed()).unwrap();
        for k in 0..16 {
            m.write(1, A + k * 4096, k + 1).unwrap();
        }
        assert!(matches!(
            m.procs[&1].pt.pte_raw(A),
            crate::core::arch::Entry::Leaf(l) if l.flags.contains(crate::core::arch::LeafFlags::CONT)
        ));
        m.madvise(1, A + 0x8000, 0x4000, Advice::PageOut).unwrap();
        assert!(swapped(&m, 1, A + 0x8000).is_some());
        for k in 0..16u64 {
            if let crate::core::arch::Entry::Leaf(l) = m.procs[&1].pt.pte_raw(A + k * 4096) {
                assert!(!l.flags.contains(crate::core::arch::LeafFlags::CONT));
            }
        }
        assert_eq!(m.read(1, A + 0x9000), Ok(10));
        m.check_invariants().unwrap();
    }
}
