//! mlock(2)/mlock2(2)/munlock(2) and mseal(2): VMA flags set over a range,
//! splitting and merging like mprotect, and the population mlock does.
//!
//! Linux: mm/mlock.c do_mlock(), apply_vma_lock_flags(), mlock_fixup(),
//! __mlock_posix_error_return(); mm/gup.c __mm_populate(),
//! populate_vma_page_range(), check_vma_flags(); mm/mseal.c do_mseal(),
//! range_contains_unmapped(), mseal_apply(); mm/vma.c
//! vms_gather_munmap_vmas() (sealed VMAs refuse munmap). The mseal rule for
//! madvise (can_madvise_modify()) is in [`crate::sys::madvise`]. Checked live on 6.18.44:
//! docs/ops/guard-mlock-mseal.md.
//!
//! RLIMIT_MEMLOCK, CAP_IPC_LOCK and `locked_vm` live in [`crate::mm::rlimit`].
//! Not modelled: the mlock LRU state of folios (PG_mlocked and the
//! unevictable list are not visible in what ptlab observes).

use crate::core::addr::PAGE_SIZE;
use crate::core::arch::LeafFlags;
use crate::core::pgtable::{Cursor, PtItem};
use crate::core::rules::rule;
use crate::core::vma::{VmFlags, Vma, VM_ACCESS_FLAGS, VM_SPECIAL};
use crate::mm::zap::split_huge_pmd;
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::{AccessFault, Pid};

/// MLOCK_ONFAULT, the only mlock2() flag.
pub const MLOCK_ONFAULT: u64 = 1;

/// VM_LOCKED_MASK.
const VM_LOCKED_MASK: VmFlags = VmFlags::LOCKED.union(VmFlags::LOCKONFAULT);

impl Model {
    /// mlock(2) (`onfault` false) or mlock2(2) with MLOCK_ONFAULT.
    pub fn mlock(&mut self, pid: Pid, addr: u64, len: u64, onfault: bool) -> Result<(), Errno> {
        let flags = if onfault {
            VM_LOCKED_MASK
        } else {
            VmFlags::LOCKED
        };
        self.do_mlock(pid, addr, len, flags)
    }

    /// mlock2(2) with raw `flags` (unknown bits: EINVAL).
    /// Linux: SYSCALL_DEFINE3(mlock2).
    pub fn mlock2(&mut self, pid: Pid, addr: u64, len: u64, flags: u64) -> Result<(), Errno> {
        if flags & !MLOCK_ONFAULT != 0 {
            rule!(self.phys.hw, Mlock2FlagsInvalid);
            return Err(Errno::EINVAL);
        }
        self.mlock(pid, addr, len, flags & MLOCK_ONFAULT != 0)
    }

    /// munlock(2). Linux: SYSCALL_DEFINE2(munlock): the same range rules,
    /// no population.
    pub fn munlock(&mut self, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        if !self.procs.contains_key(&pid) {
            return Err(Errno::EINVAL);
        }
        let (start, len) = mlock_range(addr, len);
        self.apply_vma_lock_flags(pid, start, len, VmFlags::empty())
    }

    /// Linux: mm/mlock.c do_mlock(): can_do_mlock() (EPERM), the range
    /// page-aligned outwards, the RLIMIT_MEMLOCK test (ENOMEM; pages
    /// already locked in the range count once; [`crate::mm::rlimit`]), the
    /// flags applied, then the range populated.
    fn do_mlock(&mut self, pid: Pid, addr: u64, len: u64, flags: VmFlags) -> Result<(), Errno> {
        let Some(mm) = self.procs.get(&pid) else {
            return Err(Errno::EINVAL);
        };
        if !mm.can_do_mlock() {
            rule!(self.phys.hw, MlockCannot);
            return Err(Errno::EPERM);
        }
        let (start, len) = mlock_range(addr, len);
        if !mm.mlock_within_limit(start, len) {
            rule!(self.phys.hw, MlockOverLimit);
            return Err(Errno::ENOMEM);
        }
        self.apply_vma_lock_flags(pid, start, len, flags)?;
        self.populate_locked(pid, start, len).map_err(|e| match e {
            // __mlock_posix_error_return()
            Errno::EFAULT => Errno::ENOMEM,
            Errno::ENOMEM => Errno::EAGAIN,
            e => e,
        })
    }

    /// Linux: mm/mlock.c apply_vma_lock_flags(): every VMA from `start` to
    /// `end` gets `flags` in place of its lock bits; a hole (or no VMA at
    /// `start`) is ENOMEM with the VMAs before it already changed.
    fn apply_vma_lock_flags(
        &mut self,
        pid: Pid,
        start: u64,
        len: u64,
        flags: VmFlags,
    ) -> Result<(), Errno> {
        let end = start.wrapping_add(len);
        if end < start {
            rule!(self.phys.hw, MlockRangeWraps);
            return Err(Errno::EINVAL);
        }
        if end == start {
            return Ok(());
        }
        let Some(first) = self.procs[&pid].vmas.find(start).cloned() else {
            rule!(self.phys.hw, MlockNoVma);
            return Err(Errno::ENOMEM);
        };
        let mut nstart = start;
        let mut tmp = first.start;
        while let Some(vma) = self.procs[&pid]
            .vmas
            .find_vma(nstart)
            .filter(|v| v.start < end)
            .cloned()
        {
            if vma.start != tmp {
                rule!(self.phys.hw, MlockHole);
                return Err(Errno::ENOMEM);
            }
            let newflags = (vma.flags - VM_LOCKED_MASK) | flags;
            tmp = vma.end.min(end);
            self.mlock_fixup(pid, &vma, nstart, tmp, newflags)?;
            // vma_iter_end(): a merge may have moved the end past `tmp`.
            tmp = self.procs[&pid]
                .vmas
                .find(tmp - PAGE_SIZE)
                .map_or(tmp, |v| v.end);
            nstart = tmp;
        }
        if tmp < end {
            rule!(self.phys.hw, MlockPastLastVma);
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }

    /// Linux: mm/mlock.c mlock_fixup(): VM_SPECIAL (and hugetlb, DAX,
    /// secretmem, droppable) VMAs are left alone; otherwise
    /// vma_modify_flags() splits or merges (split_vma() refuses at
    /// max_map_count with ENOMEM).
    fn mlock_fixup(
        &mut self,
        pid: Pid,
        vma: &Vma,
        start: u64,
        end: u64,
        newflags: VmFlags,
    ) -> Result<(), Errno> {
        if newflags == vma.flags || vma.flags.intersects(VM_SPECIAL | VmFlags::HUGETLB) {
            return Ok(());
        }
        self.modify_flags_checked(pid, vma.start, start, end, newflags)?;
        // mlock_vma_pages_range() when VM_LOCKED changes: mlock_folio() or
        // munlock_folio() for each present folio (one step per large folio;
        // the zero page has no folio). Linux: mm/mlock.c mlock_pte_range().
        if (newflags ^ vma.flags).contains(VmFlags::LOCKED) {
            rule!(self.phys.hw, MlockFolioWalk);
            let populate_write = newflags.contains(VmFlags::LOCKED)
                && !newflags.contains(VmFlags::LOCKONFAULT)
                && newflags.contains(VmFlags::WRITE)
                && !newflags.contains(VmFlags::SHARED);
            let Model { procs, phys, .. } = self;
            let mm = &procs[&pid];
            let mut last = None;
            let mut c = Cursor::ptes(start, end);
            while let Some(q) = c.next(&mm.pt) {
                let pfn = match q.item {
                    PtItem::Huge { leaf, .. } => Some(leaf.pfn),
                    PtItem::Pte(l) if !l.flags.contains(LeafFlags::SPECIAL) => Some(l.pfn),
                    _ => None,
                };
                let Some(folio) = pfn.and_then(|p| phys.folio_of(p)) else {
                    continue;
                };
                if last == Some(folio.head) {
                    continue;
                }
                last = Some(folio.head);
                // The population after mlock (populate_vma_page_range())
                // uses FOLL_WRITE on a private writable VMA: GUP's
                // FOLL_TOUCH marks a present folio dirty (follow_page_pte()),
                // which undoes MADV_FREE (found by `ptlab fuzz --seed
                // 20261125`, case 451; docs/ops/madvise.md F9).
                if populate_write {
                    rule!(phys.hw, MlockWriteMarksDirty);
                    phys.set_folio_dirty(folio, true);
                }
                phys.folio_batches.add(folio.head, folio.is_large(), false);
            }
            // mlock_vma_pages_range() ends with lru_add_drain(): what the
            // walk queued (and anything queued before) is processed now.
            // Checked live: a page munlock()ed and then given up by its
            // other mapper (munmap, MADV_DONTNEED, exit) is reused by the
            // last mapper's write (tests/scenarios/mlock-06, mlock-07).
            phys.folio_batches.drain();
        }
        Ok(())
    }

    /// vma_modify_flags() with split_vma()'s map-count refusal and the PMD
    /// split a new boundary needs (vma_adjust_trans_huge()).
    fn modify_flags_checked(
        &mut self,
        pid: Pid,
        vma_start: u64,
        start: u64,
        end: u64,
        newflags: VmFlags,
    ) -> Result<(), Errno> {
        let max = self.cfg.max_map_count;
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        mm.modify_range_with(vma_start, start, end, newflags, &mut |mm, b, split| {
            if split && mm.map_count() >= max {
                rule!(mm.pt.hw, MlockSplitMapCount);
                return Err(Errno::ENOMEM);
            }
            if let Some(slot) = mm.pmd_cut_by(b) {
                split_huge_pmd(mm, phys, slot);
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Linux: mm/gup.c __mm_populate(start, len, ignore_errors = 0) →
    /// populate_vma_page_range(): VM_IO/VM_PFNMAP VMAs are skipped,
    /// VM_LOCKONFAULT ones need no faults; private writable VMAs take write
    /// faults, others FOLL_FORCE read faults, which fail (EFAULT) on a VMA
    /// without any access (check_vma_flags() → vma_is_accessible()) and on
    /// a guard marker. The first error stops the walk.
    fn populate_locked(&mut self, pid: Pid, start: u64, len: u64) -> Result<(), Errno> {
        let end = start.wrapping_add(len);
        let mut addr = start;
        while addr < end {
            let Some(v) = self.procs[&pid].vmas.find_vma(addr).cloned() else {
                return Ok(());
            };
            if v.start >= end {
                return Ok(());
            }
            let (s, e) = (addr.max(v.start), end.min(v.end));
            addr = e;
            if v.flags.intersects(VmFlags::IO | VmFlags::PFNMAP)
                || v.flags.contains(VmFlags::LOCKONFAULT)
            {
                continue;
            }
            // populate_vma_page_range() ends with lru_add_drain(), also
            // when __get_user_pages() failed.
            let r = self.populate_vma_pages(pid, &v, s, e);
            self.phys.folio_batches.drain();
            r?;
        }
        Ok(())
    }

    /// The faults of populate_vma_page_range() → __get_user_pages() over
    /// `[s, e)` of `v` (not VM_LOCKONFAULT): write faults for a private
    /// writable VMA, read faults otherwise; a VMA without access is EFAULT.
    fn populate_vma_pages(&mut self, pid: Pid, v: &Vma, s: u64, e: u64) -> Result<(), Errno> {
        if !v.flags.intersects(VM_ACCESS_FLAGS) {
            rule!(self.phys.hw, MlockPopulateNoAccess);
            return Err(Errno::EFAULT);
        }
        let write = v.flags.contains(VmFlags::WRITE) && !v.flags.contains(VmFlags::SHARED);
        for page in crate::mm::mm::pages(s, e) {
            // Population is an internal GUP user without
            // FOLL_HONOR_NUMA_FAULT: a read follows a NUMA-hinting entry as
            // it is (gup_can_follow_protnone()); a write still faults (the
            // entry is not writable). Linux: mm/gup.c follow_page_pte().
            if !write && self.is_hinting_at(pid, page) {
                continue;
            }
            match self.fault(pid, page, write) {
                Ok(_) => {}
                Err(AccessFault::Oom { .. }) => return Err(Errno::ENOMEM),
                // A guard marker (VM_FAULT_SIGSEGV) or a uffd range
                // (with UFFD_FEATURE_SIGBUS: VM_FAULT_SIGBUS).
                Err(_) => return Err(Errno::EFAULT),
            }
        }
        Ok(())
    }

    /// mseal(2). Linux: mm/mseal.c do_mseal().
    pub fn mseal(&mut self, pid: Pid, addr: u64, len: u64, flags: u64) -> Result<(), Errno> {
        if !self.procs.contains_key(&pid) {
            return Err(Errno::EINVAL);
        }
        if flags != 0 || !addr.is_multiple_of(PAGE_SIZE) {
            rule!(self.phys.hw, MsealFlagsOrAddr);
            return Err(Errno::EINVAL);
        }
        let alen = len.wrapping_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1);
        if len != 0 && alen == 0 {
            return Err(Errno::EINVAL);
        }
        let end = addr.wrapping_add(alen);
        if end < addr {
            rule!(self.phys.hw, MsealWraps);
            return Err(Errno::EINVAL);
        }
        if end == addr {
            rule!(self.phys.hw, MsealLenZero);
            return Ok(());
        }
        // range_contains_unmapped(): no change at all if a hole is found.
        let mut prev_end = addr;
        for s in self.procs[&pid].vmas.starts_in(addr, end) {
            let v = self.procs[&pid].vmas.get(s).expect("vma");
            if v.start > prev_end {
                rule!(self.phys.hw, MsealHole);
                return Err(Errno::ENOMEM);
            }
            prev_end = v.end;
        }
        if prev_end < end {
            rule!(self.phys.hw, MsealPastLastVma);
            return Err(Errno::ENOMEM);
        }
        // mseal_apply()
        let mut cur = addr;
        while cur < end {
            let v = self.procs[&pid].vmas.find(cur).cloned().expect("no holes");
            let curr_end = v.end.min(end);
            if !v.flags.contains(VmFlags::SEALED) {
                rule!(self.phys.hw, MsealApply);
                self.modify_flags_checked(pid, v.start, cur, curr_end, v.flags | VmFlags::SEALED)?;
            }
            cur = curr_end;
        }
        Ok(())
    }
}

/// do_mlock()'s range: `len = PAGE_ALIGN(len + offset_in_page(start))`
/// (wrapping, as in C), `start &= PAGE_MASK`.
fn mlock_range(addr: u64, len: u64) -> (u64, u64) {
    let off = addr & (PAGE_SIZE - 1);
    let len = len.wrapping_add(off).wrapping_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1);
    (addr & !(PAGE_SIZE - 1), len)
}

#[cfg(test)]
mod tests {
    use crate::types::uapi::{Advice, MapFlags, MremapFlags, Prot};
    use crate::{Errno, Model, ModelConfig};

    const P: u64 = 4096;

    fn map(m: &mut Model, pages: u64, prot: Prot) -> u64 {
        m.mmap(
            1,
            0,
            pages * P,
            prot,
            MapFlags::PRIVATE | MapFlags::ANONYMOUS,
        )
        .unwrap()
    }

    fn flags(m: &Model, a: u64) -> String {
        m.mm(1)
            .unwrap()
            .vmas
            .find(a)
            .unwrap()
            .flags
            .mnemonics()
            .join(" ")
    }

    fn ranges(m: &Model) -> Vec<(u64, u64)> {
        m.mm(1)
            .unwrap()
            .vmas
            .iter()
            .map(|v| (v.start, v.end))
            .collect()
    }

    fn rss(m: &Model) -> u64 {
        m.mm(1).unwrap().rss_anon
    }

    #[test]
    fn mlock_splits_populates_and_munlock_merges() {
        // do_mlock(): unaligned start widens the range; populate faults it.
        let mut m = Model::new(ModelConfig::default());
        let a = map(&mut m, 4, Prot::READ | Prot::WRITE);
        m.mlock(1, a + 100, P, false).unwrap();
        assert_eq!(ranges(&m), vec![(a, a + 2 * P), (a + 2 * P, a + 4 * P)]);
        assert_eq!(flags(&m, a), "rd wr mr mw me lo ac");
        assert_eq!(rss(&m), 2);
        m.munlock(1, a + 100, P).unwrap();
        assert_eq!(ranges(&m), vec![(a, a + 4 * P)]);
        m.check_invariants().unwrap();
    }

    #[test]
    fn mlock_onfault_and_flags() {
        let mut m = Model::new(ModelConfig::default());
        let a = map(&mut m, 4, Prot::READ | Prot::WRITE);
        m.mlock2(1, a, 4 * P, 1).unwrap();
        assert_eq!(flags(&m, a), "rd wr mr mw me lo lf ac");
        assert_eq!(rss(&m), 0);
        assert_eq!(m.mlock2(1, a, 4 * P, 2), Err(Errno::EINVAL));
    }

    #[test]
    fn mlock_hole_and_prot_none() {
        // apply_vma_lock_flags(): ENOMEM at the hole, earlier VMAs locked,
        // nothing populated.
        let mut m = Model::new(ModelConfig::default());
        let a = map(&mut m, 8, Prot::READ | Prot::WRITE);
        m.munmap(1, a + 4 * P, P).unwrap();
        assert_eq!(m.mlock(1, a, 8 * P, false), Err(Errno::ENOMEM));
        assert!(flags(&m, a).contains("lo"));
        assert!(!flags(&m, a + 5 * P).contains("lo"));
        assert_eq!(rss(&m), 0);
        assert_eq!(m.mlock(1, a + 4 * P, P, false), Err(Errno::ENOMEM));
        // PROT_NONE: locked, then populate fails with EFAULT → ENOMEM.
        let b = map(&mut m, 4, Prot::empty());
        assert_eq!(m.mlock(1, b, 4 * P, false), Err(Errno::ENOMEM));
        assert!(flags(&m, b).contains("lo"));
    }

    #[test]
    fn mlock_over_guard_enomem() {
        let mut m = Model::new(ModelConfig::default());
        let a = map(&mut m, 4, Prot::READ | Prot::WRITE);
        m.madvise(1, a + 2 * P, P, Advice::GuardInstall).unwrap();
        assert_eq!(m.mlock(1, a, 4 * P, false), Err(Errno::ENOMEM));
        assert_eq!(rss(&m), 2);
        assert_eq!(flags(&m, a), "rd wr mr mw me gu lo ac");
    }

    #[test]
    fn mseal_rules() {
        let mut m = Model::new(ModelConfig::default());
        let c = map(&mut m, 8, Prot::READ | Prot::WRITE);
        assert_eq!(m.mseal(1, c, P, 1), Err(Errno::EINVAL));
        assert_eq!(m.mseal(1, c + 100, P, 0), Err(Errno::EINVAL));
        m.mseal(1, c + 4 * P, 4 * P, 0).unwrap();
        assert!(flags(&m, c + 4 * P).ends_with("sl"));
        // vms_gather_munmap_vmas(): the first VMA is split before the
        // sealed one refuses.
        assert_eq!(m.munmap(1, c + 2 * P, 4 * P), Err(Errno::EPERM));
        assert_eq!(
            ranges(&m),
            vec![
                (c, c + 2 * P),
                (c + 2 * P, c + 4 * P),
                (c + 4 * P, c + 8 * P)
            ]
        );
        assert_eq!(m.munmap(1, c + 4 * P, P), Err(Errno::EPERM));
        // A writable sealed VMA may still be discarded; mprotect may not.
        m.madvise(1, c + 4 * P, P, Advice::DontNeed).unwrap();
        assert_eq!(m.mprotect(1, c + 4 * P, P, Prot::READ), Err(Errno::EPERM));
        // mremap: shrink, move, FIXED onto it, expand.
        let d = map(&mut m, 4, Prot::READ | Prot::WRITE);
        let mv = MremapFlags::MAYMOVE | MremapFlags::FIXED;
        assert_eq!(
            m.mremap(1, c + 4 * P, 4 * P, 2 * P, MremapFlags::empty(), 0),
            Err(Errno::EPERM)
        );
        assert_eq!(
            m.mremap(1, d, 4 * P, 4 * P, mv, c + 4 * P),
            Err(Errno::EPERM)
        );
        assert_eq!(
            m.mremap(1, c + 4 * P, 4 * P, 8 * P, MremapFlags::MAYMOVE, 0),
            Err(Errno::EPERM)
        );
        // mseal over a hole: ENOMEM, nothing sealed.
        let e = map(&mut m, 8, Prot::READ | Prot::WRITE);
        m.munmap(1, e + 4 * P, P).unwrap();
        assert_eq!(m.mseal(1, e, 8 * P, 0), Err(Errno::ENOMEM));
        assert!(!flags(&m, e).contains("sl"));
        m.check_invariants().unwrap();
    }

    #[test]
    fn sealed_read_only_refuses_discard() {
        // can_madvise_modify()
        let mut m = Model::new(ModelConfig::default());
        let f = map(&mut m, 4, Prot::READ);
        m.mseal(1, f, 4 * P, 0).unwrap();
        for adv in [
            Advice::DontNeed,
            Advice::GuardInstall,
            Advice::DontFork,
            Advice::WipeOnFork,
        ] {
            assert_eq!(m.madvise(1, f, P, adv), Err(Errno::EPERM), "{adv:?}");
        }
        m.madvise(1, f, P, Advice::HugePage).unwrap();
        m.madvise(1, f, P, Advice::GuardRemove).unwrap();
        m.mlock(1, f, P, false).unwrap();
        assert_eq!(flags(&m, f), "rd mr mw me lo hg sl");
    }

    #[test]
    fn locked_vma_made_writable_is_populated() {
        // mprotect_fixup() → populate_vma_page_range() with write faults.
        let mut m = Model::new(ModelConfig::default());
        let a = map(&mut m, 4, Prot::READ);
        m.mlock(1, a, 4 * P, false).unwrap();
        assert_eq!(rss(&m), 0); // zero pages
        m.mprotect(1, a, 4 * P, Prot::READ | Prot::WRITE).unwrap();
        assert_eq!(rss(&m), 4);
        m.check_invariants().unwrap();
    }
}
