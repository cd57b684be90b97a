//! Guard regions: MADV_GUARD_INSTALL / MADV_GUARD_REMOVE and the guard PTE
//! markers they leave.
//!
//! A guard marker is a non-present PTE (`make_pte_marker(PTE_MARKER_GUARD)`):
//! any access to it raises SIGSEGV, it is not "none" (so a large folio
//! never covers it and the PTE table holding it is never reclaimed), it is
//! copied by fork and moved by mremap, survives MADV_DONTNEED and mprotect,
//! and is dropped only by munmap (and exit) or MADV_GUARD_REMOVE.
//!
//! Markers live in the page tables like every other non-present entry: the
//! arch encodes them as swap entries of type `SWP_PTE_MARKER`
//! ([`crate::core::arch::PteMarker`]), so table usage counts see them (a table
//! holding a marker is never reclaimed) and every walk meets them.
//!
//! Linux: mm/madvise.c madvise_guard_install(), madvise_guard_remove(),
//! is_valid_guard_vma(); mm/memory.c copy_nonpresent_pte() (copy_pte_marker),
//! handle_pte_marker() (VM_FAULT_SIGSEGV), unmap_vmas() (ZAP_FLAG_DROP_MARKER);
//! mm/mremap.c move_ptes(); fs/proc/task_mmu.c pte_to_pagemap_entry()
//! (PM_SWAP | PM_GUARD_REGION). Checked live on 6.18.44: see
//! docs/ops/guard-mlock-mseal.md.

use crate::core::arch::Entry;
use crate::core::pgtable::{Cursor, PtItem};
use crate::core::rules::rule;
use crate::core::vma::{VmFlags, Vma, VM_SPECIAL};
use crate::mm::marker::{drop_markers, set_marker};
use crate::mm::zap::zap_range;
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::Pid;

/// Linux: mm/madvise.c is_valid_guard_vma(): VM_SPECIAL and hugetlb VMAs
/// never take markers; installing also refuses mlock()ed VMAs (it would
/// have to zap locked pages), removing does not.
pub fn is_valid_guard_vma(vma: &Vma, allow_locked: bool) -> bool {
    let mut disallowed = VM_SPECIAL | VmFlags::HUGETLB;
    if !allow_locked {
        disallowed |= VmFlags::LOCKED;
    }
    !vma.flags.intersects(disallowed)
}

impl Model {
    /// MADV_GUARD_INSTALL on `[start, end)` inside `vma`.
    /// Linux: mm/madvise.c madvise_guard_install().
    pub(crate) fn madvise_guard_install(
        &mut self,
        pid: Pid,
        vma: &Vma,
        start: u64,
        end: u64,
    ) -> Result<(), Errno> {
        if !is_valid_guard_vma(vma, false) {
            rule!(self.phys.hw, GuardInstallInvalidVma);
            return Err(Errno::EINVAL);
        }
        let Model {
            procs, phys, ids, ..
        } = self;
        let mm = procs.get_mut(&pid).ok_or(Errno::EINVAL)?;
        // vma_set_atomic_flag(VMA_MAYBE_GUARD_BIT): the whole VMA, no split.
        mm.vmas.get_mut(vma.start).expect("vma").flags |= VmFlags::MAYBE_GUARD;
        // "If anonymous and we are establishing page tables the VMA ought
        // to have an anon_vma" (so fork copies its page tables).
        mm.anon_vma_prepare(start, ids);
        // The walk gives up at the first populated PTE or huge PMD and the
        // range is zapped (existing markers stay), then installed again.
        // Linux: mm/madvise.c guard_install_pud_entry() … guard_install_pte_entry():
        // a PTE-level walk; each PTE of a table is read (`ptep_get()`, one
        // load) up to the first populated one, a huge PMD is populated.
        let mut populated = false;
        let mut c = Cursor::ptes(start, end);
        while let Some(q) = c.next(&mm.pt) {
            match q.item {
                // No PTE table (or a none PMD): nothing read.
                PtItem::None { level: 2.. } => {}
                // None PTEs (an empty table included): one load each.
                PtItem::None { .. } => mm.pt.hw.ptep_get_reads(q.segment().nr_pages()),
                // A guard marker already there is not "populated".
                PtItem::NonPresent(Entry::Marker(_)) => mm.pt.hw.ptep_get_reads(1),
                PtItem::Pte(_) | PtItem::NonPresent(_) => {
                    mm.pt.hw.ptep_get_reads(1);
                    populated = true;
                }
                PtItem::Huge { .. } | PtItem::PteTable(_) => populated = true,
            }
            if populated {
                break;
            }
        }
        if populated {
            let mut tlb = crate::core::tlb::MmuGather::new();
            rule!(mm.pt.hw, GuardInstallZapsPopulated);
            zap_range(mm, phys, &mut tlb, start, end, false);
            tlb.finish(&mm.pt);
        }
        for a in crate::mm::mm::pages(start, end) {
            if !set_marker(mm, phys, a) {
                rule!(mm.pt.hw, GuardInstallNoTable);
                return Err(Errno::ENOMEM);
            }
        }
        Ok(())
    }

    /// MADV_GUARD_REMOVE on `[start, end)` inside `vma`: clear the markers
    /// (the PTE tables and VM_MAYBE_GUARD stay).
    /// Linux: mm/madvise.c madvise_guard_remove().
    pub(crate) fn madvise_guard_remove(
        &mut self,
        pid: Pid,
        vma: &Vma,
        start: u64,
        end: u64,
    ) -> Result<(), Errno> {
        if !is_valid_guard_vma(vma, true) {
            rule!(self.phys.hw, GuardRemoveInvalidVma);
            return Err(Errno::EINVAL);
        }
        let mm = self.procs.get_mut(&pid).ok_or(Errno::EINVAL)?;
        rule!(mm.pt.hw, GuardRemove);
        drop_markers(mm, start, end);
        Ok(())
    }

    /// After an mremap that moved `[old_addr, old_addr + old_len)` to
    /// `new_addr` (`moved` bytes of it), the markers `snap` (offsets from
    /// `old_addr`) move with their PTEs: move_ptes() moves every non-none
    /// entry. Those beyond `moved` were unmapped with the source tail.
    pub(crate) fn guard_after_move(
        &mut self,
        pid: Pid,
        snap: &[u64],
        old_addr: u64,
        new_addr: u64,
        moved: u64,
    ) {
        let Model { procs, phys, .. } = self;
        let Some(mm) = procs.get_mut(&pid) else {
            return;
        };
        for &off in snap {
            mm.pt.clear_marker(old_addr + off);
        }
        for &off in snap.iter().filter(|&&o| o < moved) {
            rule!(mm.pt.hw, GuardMovedByMremap);
            set_marker(mm, phys, new_addr + off);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::core::observe::PageState;
    use crate::types::uapi::{Advice, MapFlags, MremapFlags, Prot};
    use crate::{AccessFault, Errno, Model, ModelConfig};

    const P: u64 = 4096;

    fn setup() -> (Model, u64) {
        let mut m = Model::new(ModelConfig::default());
        let a = m
            .mmap(
                1,
                0,
                8 * P,
                Prot::READ | Prot::WRITE,
                MapFlags::PRIVATE | MapFlags::ANONYMOUS,
            )
            .unwrap();
        (m, a)
    }

    fn state(m: &Model, pid: u32, a: u64) -> PageState {
        m.observe_pages(pid, a, a + P)[0].state.clone()
    }

    #[test]
    fn install_zaps_and_segv() {
        // madvise_guard_install(): zap the populated page, then the marker.
        let (mut m, a) = setup();
        m.write(1, a + P, 7).unwrap();
        m.madvise(1, a + P, P, Advice::GuardInstall).unwrap();
        assert_eq!(state(&m, 1, a + P), PageState::Guard);
        assert_eq!(m.read(1, a + P), Err(AccessFault::Segv { addr: a + P }));
        assert_eq!(m.write(1, a + P, 1), Err(AccessFault::Segv { addr: a + P }));
        assert!(m.read(1, a).is_ok());
        let v = m.mm(1).unwrap().vmas.find(a).unwrap().clone();
        assert!(v.flags.mnemonics().contains(&"gu".to_string()));
        assert!(v.anon_vma.is_some());
        m.check_invariants().unwrap();
    }

    #[test]
    fn dontneed_keeps_munmap_drops() {
        let (mut m, a) = setup();
        m.madvise(1, a + P, P, Advice::GuardInstall).unwrap();
        m.madvise(1, a, 8 * P, Advice::DontNeed).unwrap();
        assert_eq!(state(&m, 1, a + P), PageState::Guard);
        m.munmap(1, a, 8 * P).unwrap();
        assert!(crate::mm::marker::guards(m.mm(1).unwrap(), 0, u64::MAX).is_empty());
        m.check_invariants().unwrap();
    }

    #[test]
    fn remove_and_locked_rules() {
        // is_valid_guard_vma(): install refuses VM_LOCKED, remove allows it.
        let (mut m, a) = setup();
        m.madvise(1, a + P, P, Advice::GuardInstall).unwrap();
        m.mlock(1, a + 4 * P, 4 * P, false).unwrap();
        assert_eq!(
            m.madvise(1, a + 4 * P, P, Advice::GuardInstall),
            Err(Errno::EINVAL)
        );
        m.madvise(1, a, 8 * P, Advice::GuardRemove).unwrap();
        assert_eq!(state(&m, 1, a + P), PageState::NotPresent);
        assert!(m.read(1, a + P).is_ok());
    }

    #[test]
    fn fork_copies_and_mremap_moves() {
        let (mut m, a) = setup();
        m.madvise(1, a + P, P, Advice::GuardInstall).unwrap();
        let c = m.fork(1).unwrap();
        assert_eq!(state(&m, c, a + P), PageState::Guard);
        let d = m
            .mmap(
                1,
                0,
                32 * P,
                Prot::empty(),
                MapFlags::PRIVATE | MapFlags::ANONYMOUS,
            )
            .unwrap();
        let n = m
            .mremap(
                1,
                a,
                8 * P,
                8 * P,
                MremapFlags::MAYMOVE | MremapFlags::FIXED,
                d + 8 * P,
            )
            .unwrap();
        assert_eq!(n, d + 8 * P);
        assert_eq!(state(&m, 1, n + P), PageState::Guard);
        assert_eq!(m.read(1, n + P), Err(AccessFault::Segv { addr: n + P }));
        assert!(m.read(1, n).is_ok());
        m.check_invariants().unwrap();
    }

    #[test]
    fn uffd_over_markers() {
        // mfill_atomic_install_pte() overwrites a marker; ZEROPAGE and
        // MOVE want pte_none(); a marker at the MOVE source is EFAULT.
        use crate::sys::uffd::{CopySource, UFFD_API};
        let (mut m, d) = setup();
        let s = m
            .mmap(
                1,
                0,
                8 * P,
                Prot::READ | Prot::WRITE,
                MapFlags::PRIVATE | MapFlags::ANONYMOUS,
            )
            .unwrap();
        m.access_range(1, s, 8 * P, true, None).unwrap();
        let u = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        m.uffd_register(u, d, 8 * P, 1).unwrap();
        m.madvise(1, d, 4 * P, Advice::GuardInstall).unwrap();
        assert_eq!(m.uffd_copy(1, u, d, CopySource::Addr(s), P, 0), Ok(P));
        assert!(m.read(1, d).is_ok());
        assert_eq!(
            m.uffd_zeropage(u, d + P, P, 0).unwrap_err().errno,
            Errno::EEXIST
        );
        assert_eq!(
            m.uffd_move(1, u, d + 2 * P, s, P, 0).unwrap_err().errno,
            Errno::EEXIST
        );
        m.madvise(1, s + 4 * P, P, Advice::GuardInstall).unwrap();
        let e = m.uffd_move(1, u, d + 4 * P, s + 4 * P, P, 2).unwrap_err();
        assert_eq!(e.errno, Errno::EFAULT);
        m.check_invariants().unwrap();
    }
}
