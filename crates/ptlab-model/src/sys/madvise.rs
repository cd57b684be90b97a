//! madvise(2): the walk over the VMAs of the range and the advice that
//! changes VMA flags (HUGEPAGE, DONTFORK, WIPEONFORK, …) or zaps
//! (DONTNEED); PAGEOUT/COLD go to crate::sys::swap, COLLAPSE to
//! crate::sys::collapse, GUARD_* to crate::sys::guard.
//!
//! Linux: mm/madvise.c do_madvise(), madvise_walk_vmas(),
//! madvise_vma_behavior(), madvise_update_vma().

use crate::core::addr::{page_align, PAGE_SIZE};
use crate::core::tlb::MmuGather;
use crate::core::vma::{VmFlags, Vma};
use crate::mm::zap::{split_huge_pmd, zap_range};
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::uapi::Advice;
use crate::types::Pid;

/// Linux: mm/madvise.c is_discard(): the advices a sealed read-only
/// anonymous VMA refuses (of those the model knows).
pub fn is_discard(advice: Advice) -> bool {
    matches!(
        advice,
        Advice::DontNeed | Advice::DontFork | Advice::WipeOnFork | Advice::GuardInstall
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
        if !Self::supports_advice(advice) {
            return Err(Errno::ENOSYS);
        }
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        let alen = page_align(len).unwrap_or(0);
        if len != 0 && alen == 0 {
            return Err(Errno::EINVAL);
        }
        let end = addr.checked_add(alen).ok_or(Errno::EINVAL)?;
        if end == addr {
            return Ok(());
        }
        let mut unmapped_error = Ok(());
        let mut start = addr;
        loop {
            let Some(vma) = self.procs[&pid].vmas.find_vma(start).cloned() else {
                return Err(Errno::ENOMEM);
            };
            if start < vma.start {
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
                    return Err(Errno::EINVAL);
                }
                let Model { procs, phys, .. } = self;
                let mm = procs.get_mut(&pid).expect("pid");
                // A PTE table holding a guard marker is not empty, so
                // PT_RECLAIM keeps it (try_to_free_pte() needs all none).
                // zap_page_range_single_batched(): one gather.
                let mut tlb = MmuGather::new();
                zap_range(mm, phys, &mut tlb, start, end, true);
                tlb.finish(&mm.pt);
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
                    return Err(Errno::EINVAL);
                }
                // lru_add_drain() (checked live: drains the mlock batch).
                self.phys.folio_batches.drain();
                let Model { procs, phys, .. } = self;
                let cold = advice == Advice::Cold;
                crate::sys::swap::madvise_pageout(procs, phys, pid, vma, start, end, cold);
                return Ok(());
            }
            Advice::Collapse => return self.madvise_collapse(pid, vma, start, end),
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
                split_huge_pmd(mm, phys, slot);
            }
        }
        mm.modify_range(vma_start, start, end, new);
    }
}
