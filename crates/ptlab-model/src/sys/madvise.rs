//! madvise(2): the walk over the VMAs of the range and the advice that
//! changes VMA flags (HUGEPAGE, DONTFORK, WIPEONFORK, …) or zaps
//! (DONTNEED); PAGEOUT/COLD go to crate::sys::swap, COLLAPSE to
//! crate::sys::collapse, GUARD_* to crate::sys::guard.
//!
//! Linux: mm/madvise.c do_madvise(), madvise_walk_vmas(),
//! madvise_vma_behavior(), madvise_update_vma().

use crate::core::addr::{page_align, PAGE_SIZE};
use crate::core::arch::LeafFlags;
use crate::core::folio::PhysMem;
use crate::core::pgtable::{Cursor, PmdSlot, PtItem};
use crate::core::rules::rule;
use crate::core::tlb::MmuGather;
use crate::core::vma::{VmFlags, Vma};
use crate::mm::batch::{folio_pte_batch, Fpb};
use crate::mm::huge_memory::{folio_mark_lazyfree, madvise_free_huge_pmd, split_folio, FreePmd};
use crate::mm::mm::Mm;
use crate::mm::swap::zap_swap_range;
use crate::mm::zap::{split_huge_pmd, zap_range};
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::uapi::Advice;
use crate::types::Pid;
use std::collections::BTreeMap;

/// MADV_FREE of `[start, end)`, inside one PMD slot of one anonymous VMA
/// (docs/ops/madvise.md). Linux: mm/madvise.c madvise_free_pte_range():
/// * a PMD mapping goes to madvise_free_huge_pmd(); unless it split the
///   folio, the slot is done;
/// * swap PTEs are freed and cleared (swap_pte_batch(),
///   free_swap_and_cache_nr(), clear_not_present_full_ptes()); guard
///   markers stay;
/// * a large folio the range does not cover whole from this PTE on
///   (madvise_folio_pte_batch() < nr_pages) is split to order 0 unless
///   another mm maps it (folio_maybe_mapped_shared(): the batch is
///   skipped), then its PTEs are examined again;
/// * a folio in the swap cache or dirty is skipped unless this is its only
///   mapping (folio_mapcount() == nr_pages) and its swap can be freed
///   (the model keeps a swap-cache folio only while another swap PTE
///   names its slot, so folio_free_swap() would fail: skipped); then its
///   PG_dirty is cleared;
/// * young/dirty PTE bits are cleared (clear_young_dirty_ptes(), TLB
///   entries gathered) and the folio is marked lazyfree
///   (folio_mark_lazyfree()).
fn madvise_free_pte_range(
    procs: &mut BTreeMap<Pid, Mm>,
    phys: &mut PhysMem,
    tlb: &mut MmuGather,
    pid: Pid,
    start: u64,
    end: u64,
) {
    if let PmdSlot::Leaf(_) = procs[&pid].pt.pmd(start) {
        if madvise_free_huge_pmd(procs, phys, tlb, pid, start, end) != FreePmd::Split {
            return;
        }
    }
    if !matches!(procs[&pid].pt.pmd(start), PmdSlot::Table(_)) {
        return;
    }
    let _ptl = procs[&pid].pt.pte_offset_map_lock(start);
    zap_swap_range(procs.get_mut(&pid).expect("pid"), phys, start, end);
    let mut addr = start;
    while addr < end {
        let Some(pte) = procs[&pid].pt.normal_pte(addr) else {
            addr += PAGE_SIZE;
            continue;
        };
        let folio = phys.folio_of(pte.pfn).expect("PTE maps a folio");
        let mut nr = 1;
        let mut flags = pte.flags;
        if folio.is_large() {
            let max = (end - addr) / PAGE_SIZE;
            let b = folio_pte_batch(
                &procs[&pid].pt,
                phys,
                addr,
                pte,
                max,
                Fpb::MERGE_YOUNG_DIRTY,
            );
            nr = b.nr;
            if nr < folio.nr_pages() {
                if phys.mapped_by_other_mm(folio, pid) {
                    rule!(phys.hw, MadviseFreeSkipSharedLarge);
                    addr += nr * PAGE_SIZE;
                    continue;
                }
                rule!(phys.hw, MadviseFreeSplitLarge);
                let _ = split_folio(procs, phys, folio, Some((pid, addr, pte.pfn)));
                continue; // nr = 0: this PTE again, now a small folio
            }
            flags = b.pte.flags;
        }
        let swapcache = phys.in_swapcache(folio);
        if swapcache || phys.folio_dirty(folio) {
            // folio_mapcount() == nr_pages, then folio_free_swap() for a
            // swap-cache folio: it fails while a swap PTE names a slot (an
            // order-0 cache entry always has one in the model); a large
            // folio a read fault left in the cache with no swap count
            // leaves it (D3).
            let freed = |phys: &mut PhysMem| {
                folio.is_large() && crate::mm::swap::free_swap_large(phys, folio)
            };
            if u64::from(phys.folio_mapcount(folio)) != folio.nr_pages()
                || (swapcache && !freed(phys))
            {
                rule!(phys.hw, MadviseFreeKeepsDirtyShared);
                addr += nr * PAGE_SIZE;
                continue;
            }
            if swapcache {
                rule!(phys.hw, MadviseFreeFreesLargeSwap);
            }
            phys.set_folio_dirty(folio, false);
        }
        if flags.intersects(LeafFlags::YOUNG | LeafFlags::DIRTY) {
            let mm = procs.get_mut(&pid).expect("pid");
            rule!(mm.pt.hw, MadviseFreeClearYoungDirty);
            mm.pt.clear_young_dirty_ptes(addr, nr);
            tlb.flush_pte_range(addr, nr * PAGE_SIZE);
        }
        folio_mark_lazyfree(phys, folio);
        addr += nr * PAGE_SIZE;
    }
}

/// Linux: mm/madvise.c is_discard(): the advices a sealed read-only
/// anonymous VMA refuses (of those the model knows).
/// The checks every advice passes first: `Ok(None)` when the call succeeds
/// at once (zero length), else the end of the range.
/// Linux: mm/madvise.c madvise_should_skip() → is_valid_madvise():
/// madvise_behavior_valid(), the alignment, the length (every one EINVAL,
/// so their order does not show; an unknown advice is EINVAL even with a
/// zero length). Then a zero length succeeds whatever the (valid) advice.
fn madvise_should_skip(addr: u64, len: u64, advice: Advice) -> Result<Option<u64>, Errno> {
    if !advice.is_kernel_valid() || !addr.is_multiple_of(PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    let alen = page_align(len).unwrap_or(0);
    if len != 0 && alen == 0 {
        return Err(Errno::EINVAL);
    }
    let end = addr.checked_add(alen).ok_or(Errno::EINVAL)?;
    Ok((end != addr).then_some(end))
}

pub fn is_discard(advice: Advice) -> bool {
    matches!(
        advice,
        Advice::DontNeed
            | Advice::Free
            | Advice::DontFork
            | Advice::WipeOnFork
            | Advice::GuardInstall
    )
}

/// Linux: mm/madvise.c can_madvise_modify() (64-bit): a sealed anonymous
/// VMA without VM_WRITE refuses discarding advice with EPERM.
pub fn can_madvise_modify(vma: &Vma, advice: Advice) -> bool {
    !vma.flags.contains(VmFlags::SEALED)
        || !is_discard(advice)
        || vma.flags.contains(VmFlags::WRITE)
}

impl Model {
    // ---- madvise ----------------------------------------------------------

    /// madvise(2). Linux: mm/madvise.c do_madvise(), madvise_walk_vmas().
    pub fn madvise(&mut self, pid: Pid, addr: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        self.count_syscall(pid);
        if !self.procs.contains_key(&pid) {
            return Err(Errno::EINVAL);
        }
        let Some(end) = madvise_should_skip(addr, len, advice)? else {
            rule!(self.phys.hw, MadviseLenZero);
            return Ok(());
        };
        // A valid advice the model does not implement (MADV_NORMAL,
        // MADV_WILLNEED, ...): ENOSYS once the generic checks passed.
        if !Self::supports_advice(advice) {
            return Err(Errno::ENOSYS);
        }
        let mut unmapped_error = Ok(());
        let mut start = addr;
        loop {
            let Some(vma) = self.procs[&pid].vmas.find_vma(start).cloned() else {
                rule!(self.phys.hw, MadviseNoVma);
                return Err(Errno::ENOMEM);
            };
            if start < vma.start {
                rule!(self.phys.hw, MadviseHole);
                unmapped_error = Err(Errno::ENOMEM);
                start = vma.start;
                if start >= end {
                    break;
                }
            }
            let tmp = vma.end.min(end);
            self.madvise_vma(pid, &vma, start, tmp, advice)?;
            start = tmp;
            if start >= end {
                break;
            }
        }
        unmapped_error
    }

    /// Whether `madvise(addr, len, advice)` gets past the generic checks
    /// to an advice the model does not implement (its ENOSYS).
    pub fn madvise_is_unmodelled(addr: u64, len: u64, advice: Advice) -> bool {
        !Self::supports_advice(advice)
            && matches!(madvise_should_skip(addr, len, advice), Ok(Some(_)))
    }

    fn madvise_vma(
        &mut self,
        pid: Pid,
        vma: &Vma,
        start: u64,
        end: u64,
        advice: Advice,
    ) -> Result<(), Errno> {
        // madvise_vma_behavior() → can_madvise_modify() (mseal).
        if !can_madvise_modify(vma, advice) {
            rule!(self.phys.hw, MadviseSealed);
            return Err(Errno::EPERM);
        }
        let mut new = vma.flags;
        match advice {
            Advice::GuardInstall => return self.madvise_guard_install(pid, vma, start, end),
            Advice::GuardRemove => return self.madvise_guard_remove(pid, vma, start, end),
            Advice::DontNeed => {
                // madvise_dontneed_free_valid_vma()
                if vma
                    .flags
                    .intersects(VmFlags::LOCKED | VmFlags::PFNMAP | VmFlags::HUGETLB)
                {
                    rule!(self.phys.hw, MadviseDontneedLocked);
                    return Err(Errno::EINVAL);
                }
                let Model { procs, phys, .. } = self;
                let mm = procs.get_mut(&pid).expect("pid");
                // madvise_dontneed_single_vma(): `.reclaim_pt = true` in
                // the zap_details; zap_pte_range() reclaims only with
                // CONFIG_PT_RECLAIM (reclaim_pt_is_enabled()), which only
                // x86-64 builds (Arch::pt_reclaim()). A PTE table holding
                // a guard marker is not empty, so PT_RECLAIM keeps it
                // (try_to_free_pte() needs all none).
                // zap_page_range_single_batched(): one gather.
                let reclaim_pt = mm.pt.arch().pt_reclaim();
                let mut tlb = MmuGather::new();
                rule!(phys.hw, MadviseDontneed);
                zap_range(mm, phys, &mut tlb, start, end, reclaim_pt);
                tlb.finish(&mm.pt);
                return Ok(());
            }
            Advice::Free => {
                // madvise_dontneed_free_valid_vma()
                if vma
                    .flags
                    .intersects(VmFlags::LOCKED | VmFlags::PFNMAP | VmFlags::HUGETLB)
                {
                    rule!(self.phys.hw, MadviseFreeLocked);
                    return Err(Errno::EINVAL);
                }
                // madvise_free_single_vma(): lru_add_drain(), one gather.
                self.phys.folio_batches.drain();
                let Model { procs, phys, .. } = self;
                let mut tlb = MmuGather::new();
                // walk_page_range(): one pmd_entry call per populated PMD
                // slot (a none PMD is skipped).
                let mut c = Cursor::pmds(start, end);
                while let Some(q) = c.next(&procs[&pid].pt) {
                    if matches!(q.item, PtItem::None { .. }) {
                        continue;
                    }
                    let s = q.segment();
                    madvise_free_pte_range(procs, phys, &mut tlb, pid, s.start, s.end);
                }
                tlb.finish(&procs[&pid].pt);
                return Ok(());
            }
            Advice::HugePage => {
                new.remove(VmFlags::NOHUGEPAGE);
                new.insert(VmFlags::HUGEPAGE);
            }
            Advice::NoHugePage => {
                new.remove(VmFlags::HUGEPAGE);
                new.insert(VmFlags::NOHUGEPAGE);
            }
            Advice::DontFork => new.insert(VmFlags::DONTCOPY),
            Advice::DoFork => {
                if vma.flags.contains(VmFlags::IO) {
                    rule!(self.phys.hw, MadviseDoforkIo);
                    return Err(Errno::EINVAL);
                }
                new.remove(VmFlags::DONTCOPY);
            }
            Advice::WipeOnFork => {
                if vma.flags.contains(VmFlags::SHARED) {
                    return Err(Errno::EINVAL);
                }
                new.insert(VmFlags::WIPEONFORK);
            }
            Advice::KeepOnFork => new.remove(VmFlags::WIPEONFORK),
            Advice::PageOut | Advice::Cold => {
                // madvise_cold() / madvise_pageout(): !can_madv_lru_vma()
                // (VM_LOCKED, VM_PFNMAP, VM_HUGETLB) → EINVAL (found by
                // `ptlab fuzz --seed 31337`, case 98: mlock then pageout).
                if vma.flags.contains(VmFlags::LOCKED) {
                    rule!(self.phys.hw, MadvisePageoutLocked);
                    return Err(Errno::EINVAL);
                }
                // lru_add_drain() (checked live: drains the mlock batch).
                self.phys.folio_batches.drain();
                let unmap_batch = self
                    .cfg
                    .after
                    .contains(crate::mm::batch::After::SWAPOUT_UNMAP_BATCH);
                let Model { procs, phys, .. } = self;
                let how = crate::sys::swap::Pageout {
                    cold: advice == Advice::Cold,
                    unmap_batch,
                };
                crate::sys::swap::madvise_pageout(procs, phys, pid, vma, start, end, how);
                return Ok(());
            }
            Advice::Collapse => return self.madvise_collapse(pid, vma, start, end),
            Advice::Other(_) => return Err(Errno::ENOSYS), // refused in madvise()
        }
        if new == vma.flags {
            return Ok(());
        }
        self.modify_vma_flags(pid, vma.start, start, end, new);
        Ok(())
    }

    /// Change flags of `[start, end)` in the VMA at `vma_start`, first
    /// splitting any PMD mapping a new boundary would cut
    /// (vma_adjust_trans_huge()).
    fn modify_vma_flags(&mut self, pid: Pid, vma_start: u64, start: u64, end: u64, new: VmFlags) {
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        let vma_end = mm.vmas.get(vma_start).expect("vma").end;
        for (b, cut) in [(start, start != vma_start), (end, end != vma_end)] {
            if let Some(slot) = mm.pmd_cut_by(b).filter(|_| cut) {
                rule!(phys.hw, MadviseSplitHugePmdAtBoundary);
                split_huge_pmd(mm, phys, slot);
            }
        }
        mm.modify_range(vma_start, start, end, new);
    }
}

#[cfg(test)]
mod tests {
    //! MADV_FREE (docs/ops/madvise.md F1–F8; each rule was checked live by
    //! tests/scenarios/free-*.ptl).
    use crate::core::observe::PageState;
    use crate::types::uapi::{Advice, MapFlags, Prot, ThpKnob, ThpMode};
    use crate::{ArchKind, Model, ModelConfig};

    const A: u64 = 0x7f00_0010_0000;
    const RW: Prot = Prot::READ.union(Prot::WRITE);

    fn model(arch: ArchKind) -> Model {
        let mut m = Model::new(ModelConfig::for_arch(arch));
        for order in 2..=9 {
            m.set_thp(ThpKnob::Size(order), ThpMode::Never).unwrap();
        }
        m
    }

    fn map(m: &mut Model, addr: u64, len: u64) {
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, addr, len, RW, f).unwrap();
        m.access_range(1, addr, len, true, None).unwrap();
    }

    fn state(m: &Model, va: u64) -> PageState {
        m.observe_pages(1, va, va + 4096)[0].state.clone()
    }

    fn lazyfree_kb(m: &Model, pid: crate::Pid, va: u64) -> u64 {
        let o = m.observe(pid, "t");
        o.maps
            .iter()
            .find(|v| v.start <= va && va < v.end)
            .unwrap()
            .lazyfree_kb
    }

    /// F2, F7, F8: without any swap, reclaim discards the clean pages and
    /// keeps the written one; the small folios show in LazyFree only
    /// once the lazyfree batch is drained.
    #[test]
    fn discard_without_swap_keeps_written_pages() {
        for arch in ArchKind::ALL {
            let mut m = model(arch);
            map(&mut m, A, 0x8000);
            m.madvise(1, A, 0x8000, Advice::Free).unwrap();
            assert_eq!(lazyfree_kb(&m, 1, A), 0, "queued, still swap-backed");
            m.phys.folio_batches.drain();
            assert_eq!(lazyfree_kb(&m, 1, A), 32);
            m.write(1, A + 0x1000, 7).unwrap();
            assert_eq!(m.read(1, A + 0x2000), Ok(A + 0x2000));
            assert_eq!(lazyfree_kb(&m, 1, A), 28);
            m.check_invariants().unwrap();
            m.madvise(1, A, 0x8000, Advice::PageOut).unwrap();
            assert_eq!(state(&m, A), PageState::NotPresent);
            assert_eq!(state(&m, A + 0x2000), PageState::NotPresent);
            assert!(matches!(state(&m, A + 0x1000), PageState::Anon(_)));
            assert_eq!(m.observe(1, "t").maps[0].rss_kb, 4);
            assert_eq!(m.read(1, A), Ok(0));
            assert_eq!(m.read(1, A + 0x1000), Ok(7));
            m.check_invariants().unwrap();
        }
    }

    /// F5, F8: a whole mTHP is marked and discarded whole (no split, no
    /// swap); a partly covered one is split first.
    #[test]
    fn mthp_whole_discarded_partial_split() {
        for arch in ArchKind::ALL {
            let mut m = model(arch);
            m.set_swap(64 << 20).unwrap();
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            map(&mut m, A, 0x20000);
            m.madvise(1, A, 0x10000, Advice::Free).unwrap();
            assert_eq!(lazyfree_kb(&m, 1, A), 64, "a large folio moves the batch");
            m.madvise(1, A + 0x10000, 0x4000, Advice::Free).unwrap();
            assert!(matches!(state(&m, A + 0x10000), PageState::Anon(p) if p.order == 0));
            m.madvise(1, A, 0x20000, Advice::PageOut).unwrap();
            for k in 0..20 {
                assert_eq!(state(&m, A + k * 0x1000), PageState::NotPresent, "page {k}");
            }
            assert!(matches!(state(&m, A + 0x14000), PageState::Swapped { .. }));
            use crate::core::stats::MthpStat;
            assert_eq!(m.phys.stats.get_mthp(4, MthpStat::SwpoutFallback), 0);
            assert_eq!(m.phys.stats.get_mthp(4, MthpStat::Split), 1);
            m.check_invariants().unwrap();
        }
    }

    /// F3, F8: a whole PMD THP is discarded whole; written since, the PMD
    /// is split at reclaim and the folio kept (and swap-backed again).
    #[test]
    fn pmd_thp_discarded_or_kept_split() {
        for write in [false, true] {
            let mut m = model(ArchKind::X86_64);
            m.set_thp(ThpKnob::Size(9), ThpMode::Always).unwrap();
            map(&mut m, A & !0x1f_ffff, 0x20_0000);
            let a = A & !0x1f_ffff;
            m.madvise(1, a, 0x20_0000, Advice::Free).unwrap();
            assert_eq!(lazyfree_kb(&m, 1, a), 2048);
            if write {
                m.write(1, a + 0x3000, 3).unwrap();
                assert_eq!(lazyfree_kb(&m, 1, a), 0);
            }
            m.madvise(1, a, 0x20_0000, Advice::PageOut).unwrap();
            match state(&m, a + 0x3000) {
                PageState::NotPresent => assert!(!write),
                PageState::Anon(p) => {
                    assert!(write && p.order == 9 && !p.pmd_mapped && p.tag == 3)
                }
                s => panic!("{s:?}"),
            }
            m.check_invariants().unwrap();
        }
    }

    /// F1: mlocked → EINVAL; sealed read-only → EPERM.
    #[test]
    fn locked_and_sealed() {
        let mut m = model(ArchKind::X86_64);
        map(&mut m, A, 0x4000);
        m.mlock(1, A, 0x4000, false).unwrap();
        assert_eq!(m.madvise(1, A, 0x4000, Advice::Free), Err(Errno::EINVAL));
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, A + 0x10_0000, 0x4000, Prot::READ, f).unwrap();
        m.mseal(1, A + 0x10_0000, 0x4000, 0).unwrap();
        assert_eq!(
            m.madvise(1, A + 0x10_0000, 0x4000, Advice::Free),
            Err(Errno::EPERM)
        );
    }

    /// F6: after fork a clean shared small folio is marked (the caller's
    /// PTEs cleaned), a dirty one (swapped in) is skipped, and reclaim
    /// skips both.
    #[test]
    fn fork_shared_clean_marked_dirty_skipped() {
        let mut m = model(ArchKind::X86_64);
        m.set_swap(64 << 20).unwrap();
        map(&mut m, A, 0x2000);
        m.madvise(1, A + 0x1000, 0x1000, Advice::PageOut).unwrap();
        m.read(1, A + 0x1000).unwrap();
        let c = m.fork(1).unwrap();
        m.madvise(1, A, 0x2000, Advice::Free).unwrap();
        m.phys.folio_batches.drain();
        assert_eq!(lazyfree_kb(&m, 1, A), 4);
        assert_eq!(lazyfree_kb(&m, c, A), 0);
        m.madvise(1, A, 0x2000, Advice::PageOut).unwrap();
        assert!(matches!(state(&m, A), PageState::Anon(p) if p.mapcount == 2));
        m.check_invariants().unwrap();
    }

    use crate::types::errno::Errno;
}
