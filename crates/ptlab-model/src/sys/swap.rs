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
//!   cache reference counted, as the kernel takes it.

use crate::core::addr::{Order, Pfn, PAGE_SIZE, PMD_ORDER, PMD_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags, SwapPte};
use crate::core::folio::{split_folio, PhysMem};
use crate::core::hw::{HwEvent, HwSink};
use crate::core::pgtable::PmdSlot;
use crate::core::stats::{MthpStat, VmEvent};
use crate::core::vma::{VmFlags, Vma};
use crate::mm::fault::FaultEnv;
use crate::mm::mm::Mm;
use crate::model::{AccessFault, Pid};
use crate::types::errno::Errno;
use std::collections::BTreeMap;

/// One swap slot (`swap_map[offset]` plus what the slot stores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapSlot {
    /// Swap PTEs referring to the slot (`swap_count()`).
    pub count: u32,
    /// The page's data (the tag the page held).
    pub tag: u64,
    /// The swap-cache folio (order 0), holding one reference.
    pub cache: Option<Pfn>,
}

/// The swap device (`struct swap_info_struct`), or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwapDevice {
    /// Usable slots (swapon'ed size in pages, header included); 0 = no swap.
    pub pages: u64,
    /// Allocated slots by offset.
    pub slots: BTreeMap<u64, SwapSlot>,
    /// Pages swapped out (vmstat pswpout as the model counts it: every page).
    pub pswpout: u64,
    /// Swap-ins that had to read the slot (no swap-cache folio).
    pub pswpin: u64,
}

impl SwapDevice {
    /// Whether a device is enabled.
    pub fn enabled(&self) -> bool {
        self.pages > 1
    }

    /// Allocate a slot holding `tag` with swap count 1, lowest free offset
    /// first. Linux: mm/swapfile.c folio_alloc_swap() + the first
    /// swap_duplicate() done by try_to_unmap_one() (folio_dup_swap()).
    /// The slot whose swap-cache folio is the one at `head`, if any
    /// (`folio_test_swapcache()` and `folio->swap`).
    pub fn slot_caching(&self, head: Pfn) -> Option<u64> {
        self.slots
            .iter()
            .find(|(_, s)| s.cache == Some(head))
            .map(|(&off, _)| off)
    }

    fn alloc(&mut self, tag: u64) -> Option<u64> {
        let mut off = 1;
        for &k in self.slots.keys() {
            if k != off {
                break;
            }
            off += 1;
        }
        if off >= self.pages {
            return None;
        }
        self.slots.insert(
            off,
            SwapSlot {
                count: 1,
                tag,
                cache: None,
            },
        );
        Some(off)
    }

    /// Slots in use.
    pub fn used(&self) -> u64 {
        self.slots.len() as u64
    }
}

/// The smallest swap area swapon(2) accepts, in pages: the header page
/// plus one slot. Linux: mm/swapfile.c read_swap_header(): a header whose
/// `last_page` is 0 is "Empty swap-file" and swapon() fails with EINVAL
/// (an area shorter than one page has no `SWAPSPACE2` signature at all:
/// "Unable to find swap-space signature", EINVAL). Checked live on 6.18.44
/// with an ext4 swap file: 4K, 5000 and 8191 bytes are EINVAL, 8K (one
/// usable slot) and every larger size are accepted. mkswap(8) refuses
/// areas under 10 pages (40 KiB), but that is the tool's rule, not the
/// kernel's (docs/ops/swap.md S13).
pub const MIN_SWAP_PAGES: u64 = 2;

/// Enable a swap device of `bytes` (0 disables it; only allowed while no
/// slot is in use, as swapoff would first swap every page back in, which
/// the model does not do). A size below [`MIN_SWAP_PAGES`] pages is EINVAL
/// and leaves no swap area: `swap SIZE` replaces the area (swapoff of the
/// old one, then swapon of the new one, which the kernel refuses).
pub fn set_swap(phys: &mut PhysMem, bytes: u64) -> Result<(), Errno> {
    if !phys.swap.slots.is_empty() {
        return Err(Errno::EBUSY);
    }
    let pages = bytes / PAGE_SIZE;
    if bytes != 0 && pages < MIN_SWAP_PAGES {
        phys.swap.pages = 0;
        return Err(Errno::EINVAL);
    }
    phys.swap.pages = pages;
    Ok(())
}

/// Drop one swap count of `offset` (a swap PTE went away). At count 0 the
/// swap-cache folio loses the cache's reference and the slot is freed.
/// Linux: mm/swapfile.c swap_free_nr() / free_swap_and_cache_nr() →
/// __try_to_reclaim_swap(), folio_free_swap().
fn put_slot(phys: &mut PhysMem, offset: u64) {
    let slot = phys.swap.slots.get_mut(&offset).expect("swap slot in use");
    assert!(slot.count > 0, "swap count underflow at slot {offset}");
    slot.count -= 1;
    if slot.count == 0 {
        let slot = phys.swap.slots.remove(&offset).expect("slot");
        if let Some(pfn) = slot.cache {
            let folio = phys.folio_of(pfn).expect("swap-cache folio");
            phys.ref_sub(folio, 1);
        }
    }
}

// ---- hardware events ---------------------------------------------------------

/// swap_cluster_lock(); `nr` bytes of si->swap_map rewritten;
/// swap_cluster_unlock(). Linux: mm/swapfile.c __swap_duplicate(),
/// swap_entries_put_map_nr(), swap_entries_put_cache().
fn count_swap_map(hw: &HwSink, nr: u64) {
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
fn count_cache_reclaim(hw: &HwSink) {
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
            if slot.count == 1 {
                if slot.cache.is_some() {
                    count_cache_reclaim(&phys.hw);
                } else {
                    phys.hw.one(HwEvent::SwapSlotFree);
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
    src.pt.hw.one(HwEvent::PteLoad);
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
/// EAGAIN; a large swap-cache folio → EBUSY (never happens in the model:
/// the cache holds order-0 folios only). The entry moves unchanged (the
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
        return Err(Errno::EBUSY);
    }
    if !phys.swap.enabled() {
        return Err(Errno::EAGAIN);
    }
    // swap_cache_get_folio(): a cached folio is referenced (folio_try_get),
    // its flags line read (folio_test_large), locked (folio_trylock), and
    // at the end unlocked and put.
    hw.one(HwEvent::SwapCacheLookup);
    let cached = phys.swap.slots[&s.offset].cache.is_some();
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
    hw.add(HwEvent::PteLoad, 2);
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

// ---- swap-in ----------------------------------------------------------------

/// A fault on a swap PTE. Maps one order-0 page (this machine's swap file
/// is not SWP_SYNCHRONOUS_IO, so no large folio is allocated for swap-in,
/// and the cache never holds a large folio since large folios are split at
/// swap-out). The PTE becomes writable (and, for a write, dirty) only if
/// the page is certainly exclusive: the swap PTE carried the exclusive bit,
/// or a write fault could drop the swap cache (`should_try_to_free_swap()`:
/// the cache and this fault hold the only references and no swap PTE
/// refers to the slot any more). A write that finds the page not exclusive
/// continues in do_wp_page() (the caller's job), which copies it while
/// someone else still refers to the slot.
/// Linux: mm/memory.c do_swap_page(), should_try_to_free_swap();
/// mm/swap_state.c swapin_readahead() / swap_cache_get_folio().
pub fn do_swap_page(
    mm: &mut Mm,
    env: &mut FaultEnv,
    vma: &Vma,
    addr: u64,
    write: bool,
    s: SwapPte,
) -> Result<(), AccessFault> {
    let phys = &mut *env.phys;
    // Events. swap_cache_get_folio(): one lookup (its folio_try_get() is
    // the reference the mapping keeps: the `ref_add` below).
    phys.hw.one(HwEvent::SwapCacheLookup);
    let cached = phys
        .swap
        .slots
        .get(&s.offset)
        .expect("swap slot in use")
        .cache;
    let folio = match cached {
        Some(pfn) => phys.folio_of(pfn).expect("swap-cache folio"),
        None => {
            let tag = phys.swap.slots[&s.offset].tag;
            // swapin_readahead() → __read_swap_cache_async(): a folio
            // (counted by the allocator), swapcache_prepare() sets
            // SWAP_HAS_CACHE (cluster lock, one swap_map byte), the cache
            // insert and its reference; swap_read_folio() reads the page
            // (the I/O is not priced). Readahead of neighbouring slots is
            // not modelled.
            let f = phys
                .alloc_anon_folio(Order::ZERO)
                .ok_or(AccessFault::Oom { addr })?;
            count_swap_map(&phys.hw, 1);
            phys.set_tag(f.head, tag);
            // add_to_swap_cache(): the cache's reference.
            phys.ref_add(f, 1);
            phys.swap.slots.get_mut(&s.offset).expect("slot").cache = Some(f.head);
            phys.swap.pswpin += 1;
            f
        }
    };
    mm.anon_vma_prepare(addr, env.ids);
    let phys = &mut *env.phys;
    // folio_lock_or_retry() and the folio_unlock() at the end (counted as
    // folio atomics, as elsewhere); pte_offset_map_lock() and the
    // pte_same(ptep_get()) re-check under the PTL.
    phys.hw.add(HwEvent::FolioRefAtomic, 2);
    let _ptl = mm.pt.pte_offset_map_lock(addr);
    mm.pt.hw.one(HwEvent::PteLoad);
    // swap_free_nr(): this PTE's swap count goes (cluster lock, one byte).
    count_swap_map(&phys.hw, 1);
    let slot = phys.swap.slots.get_mut(&s.offset).expect("slot");
    slot.count -= 1;
    let count_left = slot.count;
    // should_try_to_free_swap() → folio_free_swap(): only the cache and
    // this fault hold the folio, and no swap PTE is left.
    let freed = write && phys.refcount(folio) == 1 && count_left == 0;
    let exclusive = s.exclusive || freed;
    let mut flags = LeafFlags::YOUNG;
    if vma.flags.contains(VmFlags::EXEC) {
        flags |= LeafFlags::EXEC;
    }
    if s.soft_dirty {
        flags |= LeafFlags::SOFT_DIRTY;
    }
    if s.uffd_wp {
        flags |= LeafFlags::UFFD_WP;
    }
    let uffd_wp = s.uffd_wp && vma.flags.contains(VmFlags::UFFD_WP);
    if exclusive && vma.flags.contains(VmFlags::WRITE) && !uffd_wp {
        flags |= LeafFlags::WRITE;
        if write {
            flags |= LeafFlags::DIRTY;
        }
    }
    if phys.page_mapcount(folio.head) == 0 {
        // folio_add_new_anon_rmap() / a cached folio nobody maps: the
        // exclusive flag is what this fault decides.
        phys.set_anon_exclusive(folio.head, false);
    }
    phys.add_rmap_ptes(folio, folio.head, 1, mm.pid, exclusive);
    phys.ref_add(folio, 1);
    mm.rss_anon += 1;
    mm.pt.set_ptes(
        addr,
        Leaf {
            pfn: folio.head,
            flags,
        },
        1,
        phys,
    );
    if count_left == 0 {
        // The model drops an unreferenced slot's cache at once (see the
        // module comment): folio_free_swap() clears SWAP_HAS_CACHE under
        // the cluster lock and frees the slot (the kernel does it here on
        // should_try_to_free_swap(), otherwise later, at reclaim).
        count_swap_map(&phys.hw, 1);
        phys.hw.one(HwEvent::SwapSlotFree);
        let slot = phys.swap.slots.remove(&s.offset).expect("slot");
        if let Some(pfn) = slot.cache {
            let f = phys.folio_of(pfn).expect("cache folio");
            phys.ref_sub(f, 1);
        }
    }
    Ok(())
}

// ---- MADV_PAGEOUT / MADV_COLD --------------------------------------------------

/// MADV_PAGEOUT (`cold == false`) or MADV_COLD on `[start, end)` of one
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
/// * reclaim of a large folio: the swap allocation of a large folio fails
///   on this machine (a swap file: no large swap clusters), and also when
///   there is no swap at all, so the folio is split
///   (`swpout_fallback`, `thp_swpout_fallback` for PMD size) and every
///   page goes out on its own. Checked live on 6.18.44: with no swap at
///   all, a 64 KiB folio is split and stays mapped;
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
    cold: bool,
) {
    // can_madv_lru_vma()
    if vma
        .flags
        .intersects(VmFlags::LOCKED | VmFlags::PFNMAP | VmFlags::HUGETLB)
    {
        return;
    }
    let mut addr = start;
    while addr < end {
        let slot_end = ((addr & !(PMD_SIZE - 1)) + PMD_SIZE).min(end);
        let pmd = procs[&pid].pt.pmd(addr);
        if let PmdSlot::Leaf(leaf) = pmd {
            if Some(leaf.pfn) == phys.huge_zero {
                addr = slot_end;
                continue;
            }
            let folio = phys.folio_of(leaf.pfn).expect("PMD maps a folio");
            if phys.mapped_by_other_mm(folio, pid) {
                addr = slot_end;
                continue;
            }
            let whole = slot_end - addr == PMD_SIZE;
            if whole && cold {
                addr = slot_end;
                continue;
            }
            // Split (the whole PMD folio at reclaim, or the partly covered
            // one right away); the stats of a reclaim-time split follow.
            let _ = split_folio(
                procs,
                phys,
                folio,
                Some((pid, addr & !(PMD_SIZE - 1), folio.head)),
            );
            if whole {
                phys.stats.mthp(PMD_ORDER, MthpStat::SwpoutFallback, 1);
                phys.stats.vm(VmEvent::ThpSwpoutFallback, 1);
            }
        }
        pageout_ptes(procs, phys, pid, addr, slot_end, cold);
        addr = slot_end;
    }
}

/// The PTE part of MADV_PAGEOUT for `[start, end)` inside one PMD slot.
fn pageout_ptes(
    procs: &mut BTreeMap<Pid, Mm>,
    phys: &mut PhysMem,
    pid: Pid,
    start: u64,
    end: u64,
    cold: bool,
) {
    if !matches!(procs[&pid].pt.pmd(start), PmdSlot::Table(_)) {
        return;
    }
    // madvise_cold_or_pageout_pte_range(): pte_offset_map_lock(), then per
    // entry ptep_get() and, for a normal page, vm_normal_folio() (the
    // page's struct page line). The young-bit clears
    // (clear_young_dirty_ptes(), tlb_remove_tlb_entries()) are not counted.
    let _ptl = procs[&pid].pt.pte_offset_map_lock(start);
    let mut addr = start;
    while addr < end {
        let Entry::Leaf(pte) = procs[&pid].pt.pte(addr) else {
            addr += PAGE_SIZE;
            continue;
        };
        if pte.flags.contains(LeafFlags::SPECIAL) {
            addr += PAGE_SIZE;
            continue;
        }
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
                addr += nr * PAGE_SIZE;
                continue;
            }
            let covers_all = nr == folio.nr_pages() && pte.pfn == folio.head;
            if covers_all && cold {
                addr += nr * PAGE_SIZE;
                continue;
            }
            let _ = split_folio(procs, phys, folio, Some((pid, addr, pte.pfn)));
            if covers_all {
                // Reclaimed whole: the large swap allocation fails, so
                // shrink_folio_list() splits it and counts the fallback.
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
            addr += PAGE_SIZE;
            continue;
        }
        swap_out_page(procs.get_mut(&pid).expect("pid"), phys, addr, pte);
        addr += PAGE_SIZE;
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
    let tag = phys.tag(pte.pfn);
    let cached = phys.swap.slot_caching(pte.pfn);
    let offset = match cached {
        // folio_dup_swap() below adds this PTE's count.
        Some(off) => off,
        None => {
            let Some(off) = phys.swap.alloc(tag) else {
                return;
            };
            count_swap_map(&phys.hw, 1);
            off
        }
    };
    let folio = phys.folio_of(pte.pfn).expect("folio");
    let exclusive = phys.anon_exclusive(pte.pfn);
    let _ptl = mm.pt.pte_offset_map_lock(addr);
    mm.pt.hw.one(HwEvent::PteLoad);
    mm.pt.clear_ptes(addr, 1);
    mm.pt.flush_tlb_range(addr, addr + PAGE_SIZE, PAGE_SIZE);
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
        let slot = phys.swap.slots.get_mut(&offset).expect("slot");
        slot.count += 1;
        // A dirty PTE dirtied the folio (try_to_unmap_one()): pageout()
        // writes it; a clean one is already on the device.
        if pte.flags.contains(LeafFlags::DIRTY) {
            slot.tag = tag;
            phys.swap.pswpout += 1;
        }
        // __remove_mapping() → swap-cache delete: the cache's reference.
        slot.cache = None;
        phys.ref_sub(folio, 1);
    } else {
        phys.swap.pswpout += 1;
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
        if slot.count == 0 {
            errs.push(format!("swap slot {off} in use with count 0"));
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
