//! The userfaultfd descriptor and its registration: userfaultfd(2),
//! UFFDIO_API, close, UFFDIO_REGISTER / UNREGISTER (VMA flags, splits and
//! merges, the uffd-wp resolve of an unregistered range), and the range
//! checks the other ioctls share.
//!
//! Linux: fs/userfaultfd.c userfaultfd_api(), userfaultfd_register(),
//! userfaultfd_unregister(), validate_range(); mm/userfaultfd.c
//! userfaultfd_register_range(), userfaultfd_clear_vma().

use crate::core::addr::{PAGE_SIZE, TASK_SIZE};
use crate::core::arch::{Entry, LeafFlags};
use crate::core::vma::{VmFlags, Vma, VM_UFFD_FLAGS};
use crate::mm::zap::split_huge_pmd;
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::Pid;

use super::ctx::*;
use crate::core::rules::rule;

impl Model {
    // ---- the descriptor ---------------------------------------------------

    /// userfaultfd(2) in process `pid`: a new, uninitialised context.
    /// Linux: fs/userfaultfd.c new_userfaultfd().
    pub fn uffd_open(&mut self, pid: Pid) -> Result<UffdId, Errno> {
        if !self.procs.contains_key(&pid) {
            return Err(Errno::ESRCH);
        }
        if let Some(mm) = self.procs.get(&pid) {
            mm.pt.hw.one(crate::core::hw::HwEvent::Syscall); // userfaultfd(2)
        }
        self.uffd.next += 1;
        let id = self.uffd.next;
        self.uffd.ctxs.insert(
            id,
            UffdCtx {
                mm: pid,
                features: None,
            },
        );
        Ok(id)
    }

    /// UFFDIO_API (§2). An error leaves the caller's struct zeroed.
    /// Linux: fs/userfaultfd.c userfaultfd_api().
    pub fn uffd_api(&mut self, id: UffdId, api: u64, features: u64) -> Result<UffdApi, Errno> {
        let ctx = self.uffd.ctxs.get_mut(&id).ok_or(Errno::EBADF)?;
        if api != UFFD_API {
            return Err(Errno::EINVAL);
        }
        // EVENT_FORK needs CAP_SYS_PTRACE: the modelled caller is root.
        let mut features = features;
        if features & UFFD_FEATURE_WP_ASYNC != 0 {
            features |= UFFD_FEATURE_WP_UNPOPULATED;
        }
        if features & !UFFD_API_FEATURES != 0 {
            return Err(Errno::EINVAL);
        }
        if features & UFFD_UNMODELLED_FEATURES != 0 {
            return Err(Errno::ENOSYS);
        }
        // It succeeds once: the kernel's cmpxchg on ctx->features.
        if ctx.features.is_some() {
            return Err(Errno::EINVAL);
        }
        ctx.features = Some(features);
        Ok(UffdApi {
            features: UFFD_API_FEATURES,
            ioctls: UFFD_API_IOCTLS,
        })
    }

    /// close(2) of the descriptor: every VMA registered with it is
    /// unregistered (and re-merged), then the context goes away.
    /// Linux: fs/userfaultfd.c userfaultfd_release() →
    /// mm/userfaultfd.c userfaultfd_release_all().
    pub fn uffd_close(&mut self, id: UffdId) -> Result<(), Errno> {
        let ctx = self.uffd.ctxs.remove(&id).ok_or(Errno::EBADF)?;
        if !self.procs.contains_key(&ctx.mm) {
            return Ok(());
        }
        let mut addr = 0;
        while let Some(v) = self.procs[&ctx.mm].vmas.find_vma(addr).cloned() {
            addr = v.end;
            if v.uffd_ctx() == Some(id) {
                self.userfaultfd_clear_vma(ctx.mm, &v, v.start, v.end)?;
                addr = self.vma_end_at(ctx.mm, v.end - PAGE_SIZE).max(addr);
            }
        }
        Ok(())
    }

    /// The context `id`, initialised (every ioctl but UFFDIO_API needs it).
    /// Linux: fs/userfaultfd.c userfaultfd_ioctl().
    pub(crate) fn uffd_ready(&self, id: UffdId) -> Result<UffdCtx, Errno> {
        let ctx = self.uffd.ctxs.get(&id).ok_or(Errno::EBADF)?;
        if ctx.features.is_none() {
            return Err(Errno::EINVAL);
        }
        Ok(ctx.clone())
    }

    /// Linux: fs/userfaultfd.c validate_unaligned_range() (§3.1).
    pub(crate) fn validate_unaligned_range(&self, start: u64, len: u64) -> Result<(), Errno> {
        let bad = !len.is_multiple_of(PAGE_SIZE)
            || len == 0
            || start < self.cfg.mmap_min_addr
            || start >= TASK_SIZE
            || len > TASK_SIZE - start;
        if bad {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    }

    /// Linux: fs/userfaultfd.c validate_range().
    pub(crate) fn validate_range(&self, start: u64, len: u64) -> Result<(), Errno> {
        if !start.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        self.validate_unaligned_range(start, len)
    }

    /// The end of the VMA containing `addr` (after a merge moved it).
    pub(crate) fn vma_end_at(&self, pid: Pid, addr: u64) -> u64 {
        self.procs[&pid].vmas.find(addr).map_or(addr, |v| v.end)
    }

    /// Set `flags` and context `ctx` on `[start, end)` of the VMA at
    /// `vma_start`, splitting and merging as vma_modify_flags_uffd() does:
    /// split_vma() refuses at max_map_count, and a PMD mapping a new
    /// boundary cuts is split first (vma_adjust_trans_huge()).
    pub(crate) fn vma_modify_uffd(
        &mut self,
        pid: Pid,
        vma_start: u64,
        start: u64,
        end: u64,
        flags: VmFlags,
        ctx: Option<UffdId>,
    ) -> Result<(), Errno> {
        let max = self.cfg.max_map_count;
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        mm.modify_range_ctx(vma_start, start, end, flags, ctx, &mut |mm, b, split| {
            if split && mm.map_count() >= max {
                return Err(Errno::ENOMEM);
            }
            if let Some(slot) = mm.pmd_cut_by(b) {
                split_huge_pmd(mm, phys, slot);
            }
            Ok(())
        })?;
        Ok(())
    }

    // ---- REGISTER / UNREGISTER -------------------------------------------

    /// UFFDIO_REGISTER of `[start, start + len)` with `mode`
    /// (`RegisterMode` bits, unknown bits passed through). Returns the
    /// `ioctls` the range supports (0x13C for MISSING, 0x17C with WP).
    /// Linux: fs/userfaultfd.c userfaultfd_register(), vma_can_userfault();
    /// mm/userfaultfd.c userfaultfd_register_range().
    pub fn uffd_register(
        &mut self,
        id: UffdId,
        start: u64,
        len: u64,
        mode: u64,
    ) -> Result<u64, Errno> {
        let ctx = self.uffd_ready(id)?;
        self.count_syscall(ctx.mm);
        let mode = RegisterMode::from_bits_retain(mode);
        if mode.is_empty() || !(mode - RegisterMode::all()).is_empty() {
            rule!(self.phys.hw, UffdRegisterModeInvalid);
            return Err(Errno::EINVAL);
        }
        let mut vm_flags = VmFlags::empty();
        if mode.contains(RegisterMode::MISSING) {
            vm_flags |= VmFlags::UFFD_MISSING;
        }
        if mode.contains(RegisterMode::WP) {
            vm_flags |= VmFlags::UFFD_WP;
        }
        self.validate_range(start, len)?;
        let end = start + len;
        let pid = ctx.mm;
        // mmget_not_zero(): the mm is gone.
        let Some(mm) = self.procs.get(&pid) else {
            return Err(Errno::ENOMEM);
        };
        let vmas: Vec<Vma> = mm
            .vmas
            .starts_in(start, end)
            .into_iter()
            .map(|s| mm.vmas.get(s).expect("vma").clone())
            .collect();
        if vmas.is_empty() {
            rule!(self.phys.hw, UffdRegisterNoVma);
            return Err(Errno::EINVAL);
        }
        for v in &vmas {
            // vma_can_userfault(): MINOR needs shmem or hugetlb (§3.3);
            // private anonymous memory allows MISSING and WP.
            if mode.contains(RegisterMode::MINOR) {
                rule!(self.phys.hw, UffdRegisterMinorAnon);
                return Err(Errno::EINVAL);
            }
            if !v.flags.contains(VmFlags::MAYWRITE) {
                rule!(self.phys.hw, UffdRegisterNotMaywrite);
                return Err(Errno::EPERM);
            }
            if v.uffd_ctx().is_some_and(|c| c != id) {
                rule!(self.phys.hw, UffdRegisterOtherCtx);
                return Err(Errno::EBUSY);
            }
        }
        // userfaultfd_register_range(): VMA by VMA, merging with neighbours.
        let mut nstart = start;
        while let Some(v) = self.procs[&pid]
            .vmas
            .find_vma(nstart)
            .filter(|v| v.start < end)
            .cloned()
        {
            if v.uffd_ctx() == Some(id) && v.flags.contains(vm_flags) {
                rule!(self.phys.hw, UffdRegisterAlready);
                nstart = v.end; // already registered in this mode
                continue;
            }
            let s = nstart.max(v.start);
            let e = end.min(v.end);
            let new_flags = (v.flags - VM_UFFD_FLAGS) | vm_flags;
            self.vma_modify_uffd(pid, v.start, s, e, new_flags, Some(id))?;
            nstart = self.vma_end_at(pid, e - PAGE_SIZE);
        }
        let mut ioctls = UFFD_API_RANGE_IOCTLS;
        if !mode.contains(RegisterMode::WP) {
            ioctls &= !UFFDIO_WRITEPROTECT_BIT;
        }
        if !mode.contains(RegisterMode::MINOR) {
            ioctls &= !UFFDIO_CONTINUE_BIT;
        }
        Ok(ioctls)
    }

    /// UFFDIO_UNREGISTER of `[start, start + len)` (§3.5).
    /// Linux: fs/userfaultfd.c userfaultfd_unregister().
    pub fn uffd_unregister(&mut self, id: UffdId, start: u64, len: u64) -> Result<(), Errno> {
        let ctx = self.uffd_ready(id)?;
        self.count_syscall(ctx.mm);
        self.validate_range(start, len)?;
        let end = start + len;
        let pid = ctx.mm;
        let Some(mm) = self.procs.get(&pid) else {
            return Err(Errno::ENOMEM);
        };
        let starts = mm.vmas.starts_in(start, end);
        if starts.is_empty() {
            return Err(Errno::EINVAL);
        }
        for s in starts {
            let v = mm.vmas.get(s).expect("vma");
            if v.uffd_ctx().is_some_and(|c| c != id) {
                return Err(Errno::EINVAL);
            }
        }
        let mut nstart = start;
        while let Some(v) = self.procs[&pid]
            .vmas
            .find_vma(nstart)
            .filter(|v| v.start < end)
            .cloned()
        {
            if v.uffd_ctx().is_none() {
                nstart = v.end;
                continue;
            }
            let s = nstart.max(v.start);
            let e = end.min(v.end);
            // Waking blocked MISSING faults: the model has no blocked threads.
            self.userfaultfd_clear_vma(pid, &v, s, e)?;
            nstart = self.vma_end_at(pid, e - PAGE_SIZE);
        }
        Ok(())
    }

    /// Drop the registration of `[start, end)` in `vma`: uffd-wp bits are
    /// resolved first, then the flags and context are cleared (merging with
    /// the neighbours). Linux: mm/userfaultfd.c userfaultfd_clear_vma().
    fn userfaultfd_clear_vma(
        &mut self,
        pid: Pid,
        vma: &Vma,
        start: u64,
        end: u64,
    ) -> Result<(), Errno> {
        if vma.flags.contains(VmFlags::UFFD_WP) {
            self.uffd_wp_resolve(pid, vma, start, end);
        }
        self.vma_modify_uffd(pid, vma.start, start, end, vma.flags - VM_UFFD_FLAGS, None)
    }

    /// uffd_wp_range(enable_wp = false) on private anonymous memory: every
    /// present PTE loses its uffd-wp bit, and becomes writable again when
    /// the VMA is writable and the page exclusive (MM_CP_TRY_CHANGE_WRITABLE).
    /// Only UFFDIO_COPY with MODE_WP sets the bit in the model, and never on
    /// a PMD. Linux: mm/userfaultfd.c uffd_wp_range() → change_protection()
    /// with MM_CP_UFFD_WP_RESOLVE; can_change_private_pte_writable().
    fn uffd_wp_resolve(&mut self, pid: Pid, vma: &Vma, start: u64, end: u64) {
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        for (va, level, leaf) in mm.pt.leaves(start, end) {
            if level != 1 || !leaf.flags.contains(LeafFlags::UFFD_WP) {
                continue;
            }
            let mut l = match mm.pt.pte(va) {
                Entry::Leaf(l) => l,
                _ => leaf,
            };
            l.flags.remove(LeafFlags::UFFD_WP);
            let writable = vma.flags.contains(VmFlags::WRITE)
                && !l.flags.intersects(LeafFlags::SPECIAL | LeafFlags::PROTNONE)
                && phys.folio_of(l.pfn).is_some()
                && phys.anon_exclusive(l.pfn);
            if writable {
                rule!(mm.pt.hw, UffdWpResolveWritable);
                l.flags.insert(LeafFlags::WRITE);
            }
            mm.pt.modify_pte(va, l);
        }
    }
}
