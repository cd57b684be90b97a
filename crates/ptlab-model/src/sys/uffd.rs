//! userfaultfd on private anonymous memory: the context and its API
//! handshake, UFFDIO_REGISTER / UNREGISTER, and the three range ioctls that
//! populate memory: UFFDIO_COPY, UFFDIO_ZEROPAGE and UFFDIO_MOVE.
//!
//! The fault rule itself (an access to a missing page of a MISSING range
//! goes to userfaultfd) lives where faults live, in [`crate::mm::fault`]; it
//! reports [`crate::AccessFault::Uffd`]. The model delivers no messages and
//! runs no handler thread: a scenario resolves faults with COPY, ZEROPAGE or
//! MOVE and retries the access.
//!
//! Linux: fs/userfaultfd.c (userfaultfd_api, _register, _unregister, _copy,
//! _zeropage, _move), mm/userfaultfd.c (mfill_atomic, move_pages,
//! move_pages_pte[s], move_present_pte[s], userfaultfd_register_range,
//! userfaultfd_clear_vma), mm/huge_memory.c move_pages_huge_pmd(),
//! include/linux/userfaultfd_k.h. Rule tags (§7.3 …) refer to
//! shared/spec/userfaultfd.md.
//!
//! The seed change here is 6.18's TLB-flush batching of UFFDIO_MOVE
//! (`Before::UFFD_MOVE_BATCH`): [`move_present_ptes_batched`] moves a run of
//! present pages under one page-table lock pair with one ranged flush;
//! [`move_present_pte_per_page`] is the 6.8–6.17 algorithm, one page per
//! step with a flush each. Results are identical; only the hardware work
//! differs.
//!
//! Not modelled: the non-cooperative events (FORK, REMAP, REMOVE, UNMAP —
//! requesting them gives ENOSYS, so `mmap_changing` is never set), message
//! delivery and wake-ups (DONTWAKE is validated and otherwise ignored),
//! UFFDIO_WAKE / WRITEPROTECT / CONTINUE / POISON, swap entries and markers
//! (the model has none), FOLL_PIN pins (so the "maybe DMA-pinned" EBUSY never
//! happens), and lock contention (every internal EAGAIN retry of §7.3.5
//! succeeds at once in a single-threaded model).

use crate::core::addr::{Pfn, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::hw::HwEvent;
use crate::core::pgtable::{pmd_end, PmdSlot};
use crate::core::vma::{VmFlags, Vma, VM_ACCESS_FLAGS, VM_UFFD_FLAGS};
use crate::mm::batch::Before;
use crate::mm::huge_memory::split_folio;
use crate::mm::zap::split_huge_pmd;
use crate::model::Model;
use crate::sys::mprotect::vm_page_prot;
use crate::types::errno::Errno;
use crate::types::{AccessFault, Pid};
use bitflags::bitflags;
use std::collections::BTreeMap;

pub use crate::types::UffdId;

/// `UFFD_API`.
pub const UFFD_API: u64 = 0xAA;
/// UFFD_FEATURE_EVENT_FORK.
pub const UFFD_FEATURE_EVENT_FORK: u64 = 1 << 1;
/// UFFD_FEATURE_EVENT_REMAP.
pub const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
/// UFFD_FEATURE_EVENT_REMOVE.
pub const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
/// UFFD_FEATURE_EVENT_UNMAP.
pub const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
/// UFFD_FEATURE_SIGBUS: a fault raises SIGBUS instead of queueing a message.
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
/// UFFD_FEATURE_WP_UNPOPULATED.
pub const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
/// UFFD_FEATURE_WP_ASYNC.
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
/// UFFD_FEATURE_MOVE (discovery only: MOVE works without requesting it).
pub const UFFD_FEATURE_MOVE: u64 = 1 << 16;
/// Every feature 6.18 reports (bits 0–16; `features=0x1FFFF` live, §1.5).
pub const UFFD_API_FEATURES: u64 = 0x1_FFFF;
/// Features the model refuses with ENOSYS: the non-cooperative events it
/// does not deliver, and asynchronous WP, which changes the fault rule.
pub const UFFD_UNMODELLED_FEATURES: u64 = UFFD_FEATURE_EVENT_FORK
    | UFFD_FEATURE_EVENT_REMAP
    | UFFD_FEATURE_EVENT_REMOVE
    | UFFD_FEATURE_EVENT_UNMAP
    | UFFD_FEATURE_WP_ASYNC;
/// ioctls of the descriptor: REGISTER, UNREGISTER, API (`0x8000000000000003` live).
pub const UFFD_API_IOCTLS: u64 = (1 << 63) | (1 << 1) | 1;
/// `_UFFDIO_WRITEPROTECT`.
const UFFDIO_WRITEPROTECT_BIT: u64 = 1 << 6;
/// `_UFFDIO_CONTINUE`.
const UFFDIO_CONTINUE_BIT: u64 = 1 << 7;
/// ioctls of a registered range: WAKE, COPY, ZEROPAGE, MOVE, WRITEPROTECT,
/// CONTINUE, POISON. Linux: UFFD_API_RANGE_IOCTLS.
pub const UFFD_API_RANGE_IOCTLS: u64 = 0x1FC;

bitflags! {
    /// `UFFDIO_REGISTER_MODE_*`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct RegisterMode: u64 {
        const MISSING = 1;
        const WP = 2;
        const MINOR = 4;
    }
}

bitflags! {
    /// `UFFDIO_COPY_MODE_*`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct CopyMode: u64 {
        const DONTWAKE = 1;
        const WP = 2;
    }
}

bitflags! {
    /// `UFFDIO_ZEROPAGE_MODE_*`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct ZeropageMode: u64 {
        const DONTWAKE = 1;
    }
}

bitflags! {
    /// `UFFDIO_MOVE_MODE_*`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct MoveMode: u64 {
        const DONTWAKE = 1;
        const ALLOW_SRC_HOLES = 2;
    }
}

/// One userfaultfd context (`struct userfaultfd_ctx`).
#[derive(Clone, Debug)]
pub struct UffdCtx {
    /// The mm it was created in (`ctx->mm`): every ioctl acts there.
    pub mm: Pid,
    /// Features enabled by UFFDIO_API; `None` until then.
    pub features: Option<u64>,
}

/// Every open context.
#[derive(Clone, Debug, Default)]
pub struct UffdState {
    next: UffdId,
    ctxs: BTreeMap<UffdId, UffdCtx>,
}

impl UffdState {
    pub fn get(&self, id: UffdId) -> Option<&UffdCtx> {
        self.ctxs.get(&id)
    }
    pub fn iter(&self) -> impl Iterator<Item = (UffdId, &UffdCtx)> {
        self.ctxs.iter().map(|(&i, c)| (i, c))
    }
}

/// What UFFDIO_API reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UffdApi {
    pub features: u64,
    pub ioctls: u64,
}

/// A failed UFFDIO_COPY / ZEROPAGE / MOVE. `field` is what the kernel left in
/// the struct's output field (`copy`, `zeropage`, `move`): `None` when it
/// failed before the operation started and left the field untouched,
/// `Some(-errno)` when nothing was done, `Some(bytes)` with `EAGAIN` on
/// partial progress (resume at +bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UffdError {
    pub errno: Errno,
    pub field: Option<i64>,
}

impl UffdError {
    fn untouched(errno: Errno) -> Self {
        UffdError { errno, field: None }
    }
}

impl std::fmt::Display for UffdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field {
            Some(v) => write!(f, "{} (field {v})", self.errno),
            None => write!(f, "{} (field untouched)", self.errno),
        }
    }
}

/// Where UFFDIO_COPY reads from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopySource {
    /// `src` in the calling process (may be unaligned).
    Addr(u64),
    /// A buffer outside every scenario VMA holding this tag in every page.
    Tag(u64),
}

/// Turn an ioctl's internal result into the user-visible one: the ioctl
/// returns 0 iff everything was done, EAGAIN with the byte count on partial
/// progress, the error (field = −errno) when nothing was done.
/// Linux: fs/userfaultfd.c userfaultfd_copy()/_zeropage()/_move() tails.
fn ioctl_result(done: u64, err: Option<Errno>, len: u64) -> Result<u64, UffdError> {
    if done == len {
        return Ok(done);
    }
    if done > 0 {
        return Err(UffdError {
            errno: Errno::EAGAIN,
            field: Some(done as i64),
        });
    }
    let errno = err.unwrap_or(Errno::EAGAIN);
    Err(UffdError {
        errno,
        field: Some(-i64::from(errno.code())),
    })
}

/// The 8 bytes a 4 KiB copy from `src` leaves at offset 0 of its
/// destination, when a page holds its tag in its first 8 bytes and zeros
/// elsewhere (the model's page content): `first` and `second` are the tags of
/// the page holding `src` and of the next page (read only when `src` is
/// unaligned). Little-endian, as on both architectures.
fn copied_tag(src: u64, first: u64, second: u64) -> u64 {
    let off = src % PAGE_SIZE;
    if off == 0 {
        first
    } else if off < 8 {
        first >> (8 * off)
    } else if off > PAGE_SIZE - 8 {
        second << (8 * (PAGE_SIZE - off))
    } else {
        0
    }
}

/// The destination PTE of a moved page: the destination VMA's protection,
/// young (folio_mk_pte() with vm_page_prot), dirty if the source was,
/// always writable, uffd-wp dropped (6.17/6.18; soft-dirty would be set with
/// CONFIG_MEM_SOFT_DIRTY, which the target machines lack).
/// Linux: mm/userfaultfd.c move_present_pte[s]() (§7.4.6).
fn moved_pte(dst_vma: &Vma, old: Leaf) -> Leaf {
    Leaf {
        pfn: old.pfn,
        flags: vm_page_prot(dst_vma.flags)
            | LeafFlags::YOUNG
            | LeafFlags::WRITE
            | (old.flags & LeafFlags::DIRTY),
    }
}

/// A zero-page PTE for `vma`: pte_mkspecial(pfn_pte(zero, vm_page_prot)).
fn zero_pte(vma: &Vma, zero: Pfn) -> Leaf {
    Leaf {
        pfn: zero,
        flags: vm_page_prot(vma.flags) | LeafFlags::YOUNG | LeafFlags::SPECIAL,
    }
}

/// Per-page operation of [`Model::mfill_atomic`].
#[derive(Clone, Copy)]
enum Mfill {
    Copy { src: CopySource, wp: bool },
    Zeropage,
}

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
    fn uffd_ready(&self, id: UffdId) -> Result<UffdCtx, Errno> {
        let ctx = self.uffd.ctxs.get(&id).ok_or(Errno::EBADF)?;
        if ctx.features.is_none() {
            return Err(Errno::EINVAL);
        }
        Ok(ctx.clone())
    }

    /// Linux: fs/userfaultfd.c validate_unaligned_range() (§3.1).
    fn validate_unaligned_range(&self, start: u64, len: u64) -> Result<(), Errno> {
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
    fn validate_range(&self, start: u64, len: u64) -> Result<(), Errno> {
        if !start.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        self.validate_unaligned_range(start, len)
    }

    /// The end of the VMA containing `addr` (after a merge moved it).
    fn vma_end_at(&self, pid: Pid, addr: u64) -> u64 {
        self.procs[&pid].vmas.find(addr).map_or(addr, |v| v.end)
    }

    /// Set `flags` and context `ctx` on `[start, end)` of the VMA at
    /// `vma_start`, splitting and merging as vma_modify_flags_uffd() does:
    /// split_vma() refuses at max_map_count, and a PMD mapping a new
    /// boundary cuts is split first (vma_adjust_trans_huge()).
    fn vma_modify_uffd(
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
            return Err(Errno::EINVAL);
        }
        for v in &vmas {
            // vma_can_userfault(): MINOR needs shmem or hugetlb (§3.3);
            // private anonymous memory allows MISSING and WP.
            if mode.contains(RegisterMode::MINOR) {
                return Err(Errno::EINVAL);
            }
            if !v.flags.contains(VmFlags::MAYWRITE) {
                return Err(Errno::EPERM);
            }
            if v.uffd_ctx().is_some_and(|c| c != id) {
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
                l.flags.insert(LeafFlags::WRITE);
            }
            mm.pt.modify_pte(va, l);
        }
    }

    // ---- COPY / ZEROPAGE ---------------------------------------------------

    /// UFFDIO_COPY of `len` bytes into `dst` (of the context's mm) from
    /// `src` in the calling process `caller` (§5). `mode` is `CopyMode` bits
    /// (unknown bits passed through). Returns the bytes copied.
    /// Linux: fs/userfaultfd.c userfaultfd_copy() → mfill_atomic_copy().
    pub fn uffd_copy(
        &mut self,
        caller: Pid,
        id: UffdId,
        dst: u64,
        src: CopySource,
        len: u64,
        mode: u64,
    ) -> Result<u64, UffdError> {
        self.count_syscall(caller);
        let ctx = self.uffd_ready(id).map_err(UffdError::untouched)?;
        if let CopySource::Addr(s) = src {
            self.validate_unaligned_range(s, len)
                .map_err(UffdError::untouched)?;
        }
        self.validate_range(dst, len)
            .map_err(UffdError::untouched)?;
        let mode = CopyMode::from_bits_retain(mode);
        if !(mode - CopyMode::all()).is_empty() {
            return Err(UffdError::untouched(Errno::EINVAL));
        }
        if !self.procs.contains_key(&ctx.mm) {
            return Err(UffdError::untouched(Errno::ESRCH));
        }
        let op = Mfill::Copy {
            src,
            wp: mode.contains(CopyMode::WP),
        };
        let (done, err) = self.mfill_atomic(caller, ctx.mm, dst, len, op);
        ioctl_result(done, err, len)
    }

    /// UFFDIO_ZEROPAGE of `[dst, dst + len)` (§6): map the shared zero page.
    /// Returns the bytes mapped.
    /// Linux: fs/userfaultfd.c userfaultfd_zeropage() → mfill_atomic_zeropage().
    pub fn uffd_zeropage(
        &mut self,
        id: UffdId,
        dst: u64,
        len: u64,
        mode: u64,
    ) -> Result<u64, UffdError> {
        let ctx = self.uffd_ready(id).map_err(UffdError::untouched)?;
        self.count_syscall(ctx.mm);
        self.validate_range(dst, len)
            .map_err(UffdError::untouched)?;
        let mode = ZeropageMode::from_bits_retain(mode);
        if !(mode - ZeropageMode::all()).is_empty() {
            return Err(UffdError::untouched(Errno::EINVAL));
        }
        if !self.procs.contains_key(&ctx.mm) {
            return Err(UffdError::untouched(Errno::ESRCH));
        }
        let (done, err) = self.mfill_atomic(ctx.mm, ctx.mm, dst, len, Mfill::Zeropage);
        ioctl_result(done, err, len)
    }

    /// Fill `[dst_start, dst_start + len)` of process `pid` page by page;
    /// returns the bytes done and the error that stopped it.
    /// Linux: mm/userfaultfd.c mfill_atomic(), uffd_mfill_lock(),
    /// validate_dst_vma(), mfill_atomic_pte().
    fn mfill_atomic(
        &mut self,
        caller: Pid,
        pid: Pid,
        dst_start: u64,
        len: u64,
        op: Mfill,
    ) -> (u64, Option<Errno>) {
        // uffd_mfill_lock(): look the VMA up and prepare its anon_vma (the
        // per-VMA-lock path falls back to find_vma_and_prepare_anon() when
        // there is none yet) before checking that it is registered.
        let Some(dst_vma) = self.procs[&pid].vmas.find(dst_start).cloned() else {
            return (0, Some(Errno::ENOENT));
        };
        {
            let Model { procs, ids, .. } = self;
            procs
                .get_mut(&pid)
                .expect("pid")
                .anon_vma_prepare(dst_start, ids);
        }
        // validate_dst_vma(): inside one VMA registered with any context.
        if dst_start + len > dst_vma.end || dst_vma.uffd_ctx().is_none() {
            return (0, Some(Errno::ENOENT));
        }
        if let Mfill::Copy { wp: true, .. } = op {
            if !dst_vma.flags.contains(VmFlags::UFFD_WP) {
                return (0, Some(Errno::EINVAL));
            }
        }
        let mut done = 0;
        while done < len {
            let dst = dst_start + done;
            let step = match op {
                Mfill::Copy { src, wp } => {
                    let src = match src {
                        CopySource::Addr(s) => CopySource::Addr(s + done),
                        t => t,
                    };
                    self.mfill_atomic_pte_copy(caller, pid, &dst_vma, dst, src, wp)
                }
                Mfill::Zeropage => self.mfill_atomic_pte_zeropage(pid, &dst_vma, dst),
            };
            if let Err(e) = step {
                return (done, Some(e));
            }
            done += PAGE_SIZE;
        }
        (done, None)
    }

    /// The page-table levels for one destination page: PUD/PMD tables, a PTE
    /// table for an empty PMD, and EEXIST for a huge PMD (a THP or the huge
    /// zero page). Linux: mm/userfaultfd.c mfill_atomic() loop head,
    /// mm_alloc_pmd(), __pte_alloc().
    fn mfill_dst_pmd(&mut self, pid: Pid, dst: u64) -> Result<(), Errno> {
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        mm.pt.pmd_alloc(dst, phys).ok_or(Errno::ENOMEM)?;
        match mm.pt.pmd(dst) {
            PmdSlot::Leaf(_) => Err(Errno::EEXIST),
            PmdSlot::Table(_) => Ok(()),
            PmdSlot::None => mm.pt.pte_alloc(dst, phys).map(|_| ()).ok_or(Errno::ENOMEM),
        }
    }

    /// Read the 4 KiB at `src` in process `caller` as copy_from_user() does:
    /// faulting the pages in as reads. An access that would SIGSEGV, or
    /// that would itself fault to userfaultfd (SIGBUS mode, or a kernel
    /// access of a USER_MODE_ONLY context), is EFAULT.
    fn copy_from_user(&mut self, caller: Pid, src: u64) -> Result<u64, Errno> {
        let to_errno = |f: AccessFault| match f {
            AccessFault::NoProcess => Errno::ESRCH,
            _ => Errno::EFAULT,
        };
        let first = self.read_as(caller, src, false).map_err(to_errno)?;
        let second = if src.is_multiple_of(PAGE_SIZE) {
            0
        } else {
            let next = (src & !(PAGE_SIZE - 1)).checked_add(PAGE_SIZE);
            let next = next.ok_or(Errno::EFAULT)?;
            self.read_as(caller, next, false).map_err(to_errno)?
        };
        Ok(copied_tag(src, first, second))
    }

    /// One page of UFFDIO_COPY: allocate an order-0 page, copy into it, then
    /// install it over an empty PTE (§5.3). The copy comes first, so an
    /// occupied destination still faults the source in.
    /// Linux: mm/userfaultfd.c mfill_atomic_pte_copy(),
    /// mfill_atomic_install_pte().
    fn mfill_atomic_pte_copy(
        &mut self,
        caller: Pid,
        pid: Pid,
        dst_vma: &Vma,
        dst: u64,
        src: CopySource,
        wp: bool,
    ) -> Result<(), Errno> {
        self.mfill_dst_pmd(pid, dst)?;
        let tag = match src {
            CopySource::Addr(s) => self.copy_from_user(caller, s)?,
            CopySource::Tag(t) => t,
        };
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // pte_none_mostly(): an empty PTE or a PTE marker.
        if !matches!(mm.pt.pte_raw(dst), Entry::None | Entry::Marker(_)) {
            return Err(Errno::EEXIST);
        }
        // pte_offset_map_lock(): PMD read and PTL (the pte_none check above
        // is its PTE load).
        let _ptl = mm.pt.pte_offset_map_lock(dst);
        // ... or a PTE marker, which is overwritten: a guard marker too
        // (checked live on 6.18.44: COPY onto a guard page succeeds).
        mm.pt.clear_marker(dst);
        let folio = phys
            .alloc_anon_folio(crate::core::addr::Order::ZERO)
            .ok_or(Errno::ENOMEM)?;
        // copy_from_user() into the new page (no zeroing: the copy fills it).
        phys.hw.one(HwEvent::PageCopy);
        phys.set_tag(folio.head, tag);
        // folio_add_new_anon_rmap(RMAP_EXCLUSIVE); inc_mm_counter().
        phys.add_rmap_ptes(folio, folio.head, 1, pid, true);
        phys.ref_add(folio, 1);
        mm.rss_anon += 1;
        let mut flags = vm_page_prot(dst_vma.flags) | LeafFlags::YOUNG | LeafFlags::DIRTY;
        if dst_vma.flags.contains(VmFlags::WRITE) {
            flags |= LeafFlags::WRITE;
        }
        if wp {
            // pte_mkuffd_wp() also write-protects (x86 and arm64).
            flags |= LeafFlags::UFFD_WP;
            flags.remove(LeafFlags::WRITE);
        }
        let pte = Leaf {
            pfn: folio.head,
            flags,
        };
        mm.pt.set_ptes(dst, pte, 1, phys);
        Ok(())
    }

    /// One page of UFFDIO_ZEROPAGE: the zero page over a strictly empty PTE.
    /// Linux: mm/userfaultfd.c mfill_atomic_pte_zeropage().
    fn mfill_atomic_pte_zeropage(
        &mut self,
        pid: Pid,
        dst_vma: &Vma,
        dst: u64,
    ) -> Result<(), Errno> {
        self.mfill_dst_pmd(pid, dst)?;
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // Strictly pte_none(): a guard marker is EEXIST (checked live).
        if !matches!(mm.pt.pte_raw(dst), Entry::None) || crate::mm::marker::is_guard(mm, dst) {
            return Err(Errno::EEXIST);
        }
        let pte = zero_pte(dst_vma, phys.zero_pfn);
        mm.pt.set_ptes(dst, pte, 1, phys);
        Ok(())
    }

    // ---- MOVE -------------------------------------------------------------

    /// UFFDIO_MOVE of `len` bytes from `src` to `dst`, issued by process
    /// `caller` on context `id` (§7). `mode` is `MoveMode` bits (unknown bits
    /// passed through). Returns the bytes moved.
    /// Linux: fs/userfaultfd.c userfaultfd_move() → mm/userfaultfd.c
    /// move_pages().
    pub fn uffd_move(
        &mut self,
        caller: Pid,
        id: UffdId,
        dst: u64,
        src: u64,
        len: u64,
        mode: u64,
    ) -> Result<u64, UffdError> {
        self.count_syscall(caller);
        // §7.1, in order; these leave the field untouched.
        let ctx = self.uffd_ready(id).map_err(UffdError::untouched)?;
        if caller != ctx.mm {
            return Err(UffdError::untouched(Errno::EINVAL));
        }
        self.validate_range(dst, len)
            .map_err(UffdError::untouched)?;
        self.validate_range(src, len)
            .map_err(UffdError::untouched)?;
        let mode = MoveMode::from_bits_retain(mode);
        if !(mode - MoveMode::all()).is_empty() {
            return Err(UffdError::untouched(Errno::EINVAL));
        }
        if !self.procs.contains_key(&ctx.mm) {
            return Err(UffdError::untouched(Errno::ESRCH));
        }
        let (done, err) = self.move_pages(ctx.mm, id, dst, src, len, mode);
        ioctl_result(done, err, len)
    }

    /// §7.2 and §7.3: look the VMAs up, validate them, then move step by
    /// step (a PMD, or a run of PTEs) until done or an error.
    /// Linux: mm/userfaultfd.c move_pages(), uffd_move_lock(),
    /// validate_move_areas().
    fn move_pages(
        &mut self,
        pid: Pid,
        id: UffdId,
        dst_start: u64,
        src_start: u64,
        len: u64,
        mode: MoveMode,
    ) -> (u64, Option<Errno>) {
        // uffd_move_lock(): the destination VMA (anon_vma prepared), then
        // the source VMA unless src lies in the destination VMA.
        if self.procs[&pid].vmas.find(dst_start).is_none() {
            return (0, Some(Errno::ENOENT));
        }
        let dst_vma = {
            let Model { procs, ids, .. } = self;
            let mm = procs.get_mut(&pid).expect("pid");
            mm.anon_vma_prepare(dst_start, ids);
            mm.vmas.find(dst_start).cloned().expect("dst")
        };
        let src_vma = if dst_vma.contains(src_start) {
            dst_vma.clone()
        } else {
            match self.procs[&pid].vmas.find(src_start) {
                Some(v) => v.clone(),
                None => return (0, Some(Errno::ENOENT)),
            }
        };
        if let Err(e) = validate_move_vmas(id, &src_vma, &dst_vma, src_start, dst_start, len) {
            return (0, Some(e));
        }
        let holes = mode.contains(MoveMode::ALLOW_SRC_HOLES);
        let batched = !self.cfg.before.contains(Before::UFFD_MOVE_BATCH);
        let src_end = src_start + len;
        let (mut src_addr, mut dst_addr) = (src_start, dst_start);
        let mut moved = 0;
        while src_addr < src_end {
            let step = self.move_step(pid, &dst_vma, dst_addr, src_addr, src_end, holes, batched);
            match step {
                Ok(Some(n)) => {
                    dst_addr += n;
                    src_addr += n;
                    moved += n;
                }
                Ok(None) => {} // the source PMD was split: the same address again
                Err(e) => return (moved, Some(e)),
            }
        }
        (moved, None)
    }

    /// One iteration of move_pages()'s loop (§7.3.1–4): `Ok(Some(bytes))`
    /// moved, `Ok(None)` to repeat the same address (after a PMD split).
    #[allow(clippy::too_many_arguments)]
    fn move_step(
        &mut self,
        pid: Pid,
        dst_vma: &Vma,
        dst_addr: u64,
        src_addr: u64,
        src_end: u64,
        holes: bool,
        batched: bool,
    ) -> Result<Option<u64>, Errno> {
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // §7.3.1 mm_find_pmd(): no PMD table for src.
        if mm.pt.table_at(src_addr, 2).is_none() {
            if !holes {
                return Err(Errno::ENOENT);
            }
            mm.pt.pmd_alloc(src_addr, phys).ok_or(Errno::ENOMEM)?;
        }
        // §7.3.2 mm_alloc_pmd(dst); a huge destination PMD is EEXIST.
        mm.pt.pmd_alloc(dst_addr, phys).ok_or(Errno::ENOMEM)?;
        let dst_pmd = mm.pt.pmd(dst_addr);
        if let PmdSlot::Leaf(_) = dst_pmd {
            return Err(Errno::EEXIST);
        }
        match mm.pt.pmd(src_addr) {
            PmdSlot::Leaf(leaf) => {
                // §7.3.3: a THP (or the huge zero page) at the source.
                let splits = !src_addr.is_multiple_of(PMD_SIZE)
                    || !dst_addr.is_multiple_of(PMD_SIZE)
                    || src_end - src_addr < PMD_SIZE;
                if splits || dst_pmd != PmdSlot::None {
                    if Some(leaf.pfn) != phys.huge_zero && !phys.anon_exclusive(leaf.pfn) {
                        return Err(Errno::EBUSY);
                    }
                    split_huge_pmd(mm, phys, src_addr & !(PMD_SIZE - 1));
                    return Ok(None); // the folio is split by move_pages_ptes()
                }
                move_pages_huge_pmd(mm, dst_vma, dst_addr, src_addr, leaf, phys.huge_zero)?;
                Ok(Some(PMD_SIZE))
            }
            src_pmd => {
                // §7.3.4.
                if src_pmd == PmdSlot::None {
                    if !holes {
                        return Err(Errno::ENOENT);
                    }
                    mm.pt.pte_alloc(src_addr, phys).ok_or(Errno::ENOMEM)?;
                }
                mm.pt.pte_alloc(dst_addr, phys).ok_or(Errno::ENOMEM)?;
                let len = src_end - src_addr;
                self.move_pages_ptes(pid, dst_vma, dst_addr, src_addr, len, holes, batched)
                    .map(Some)
            }
        }
    }

    /// §7.4: move what the source PTE holds; returns the bytes moved (one
    /// page, or on the batched path a run of present pages).
    /// Linux: mm/userfaultfd.c move_pages_ptes() (6.18; move_pages_pte()
    /// before).
    #[allow(clippy::too_many_arguments)]
    fn move_pages_ptes(
        &mut self,
        pid: Pid,
        dst_vma: &Vma,
        dst_addr: u64,
        src_addr: u64,
        len: u64,
        holes: bool,
        batched: bool,
    ) -> Result<u64, Errno> {
        loop {
            let Model { procs, phys, .. } = self;
            let mm = procs.get_mut(&pid).expect("pid");
            // §7.4.2: the destination must be strictly empty (a guard
            // marker is not: checked live).
            if !matches!(mm.pt.pte_raw(dst_addr), Entry::None)
                || crate::mm::marker::is_guard(mm, dst_addr)
            {
                return Err(Errno::EEXIST);
            }
            // §7.4.7: a swap PTE moves as a swap PTE, without swap-in.
            if let Entry::Swap(s) = mm.pt.pte_peek(src_addr) {
                mm.pt.hw.one(HwEvent::PteLoad); // the ptep_get() that found it
                crate::mm::swap::uffd_move_swap_pte(mm, phys, src_addr, dst_addr, s)?;
                return Ok(PAGE_SIZE);
            }
            // §7.4.3: a hole at the source.
            let src_pte = match mm.pt.pte(src_addr) {
                Entry::Leaf(l) => l,
                // §7.4.7: a non-present source that is neither swap nor
                // migration entry (a guard marker) is EFAULT (checked live).
                _ if crate::mm::marker::is_guard(mm, src_addr) => return Err(Errno::EFAULT),
                _ if holes => return Ok(PAGE_SIZE),
                _ => return Err(Errno::ENOENT),
            };
            // §7.4.4: the zero page moves as the zero page.
            if src_pte.flags.contains(LeafFlags::SPECIAL) {
                move_zeropage_pte(mm, phys, dst_vma, dst_addr, src_addr);
                return Ok(PAGE_SIZE);
            }
            // move_pages_ptes(): both PTE tables mapped and locked; the
            // folio found, referenced and locked (folio_get, folio_trylock;
            // folio_unlock, folio_put at the end of the step).
            let _src_ptl = mm.pt.pte_offset_map_lock(src_addr);
            let _dst_ptl = mm.pt.pte_offset_map_lock(dst_addr);
            mm.pt.hw.one(HwEvent::StructPageLine);
            mm.pt.hw.add(HwEvent::FolioRefAtomic, 4);
            // §7.4.5: vm_normal_folio() and PageAnonExclusive(&folio->page):
            // the folio's first page decides (for a large folio, the head).
            let folio = phys.folio_of(src_pte.pfn).ok_or(Errno::EBUSY)?;
            if !phys.anon_exclusive(folio.head) {
                return Err(Errno::EBUSY);
            }
            if folio.is_large() {
                // Split the whole folio, then look again (split_folio()
                // under the folio lock; "goto retry").
                split_folio(procs, phys, folio, Some((pid, src_addr, src_pte.pfn)))?;
                continue;
            }
            return if batched {
                move_present_ptes_batched(mm, phys, dst_vma, dst_addr, src_addr, len)
            } else {
                move_present_pte_per_page(mm, phys, dst_vma, dst_addr, src_addr)
            };
        }
    }
}

/// §7.2 checks after the lookup, in the kernel's order: not shared, each
/// range inside its VMA, then validate_move_areas().
/// Linux: mm/userfaultfd.c move_pages(), validate_move_areas(),
/// vma_move_compatible().
fn validate_move_vmas(
    id: UffdId,
    src_vma: &Vma,
    dst_vma: &Vma,
    src_start: u64,
    dst_start: u64,
    len: u64,
) -> Result<(), Errno> {
    if src_vma.flags.contains(VmFlags::SHARED) || src_start + len > src_vma.end {
        return Err(Errno::EINVAL);
    }
    if dst_vma.flags.contains(VmFlags::SHARED) || dst_start + len > dst_vma.end {
        return Err(Errno::EINVAL);
    }
    // Same access flags and vm_page_prot (a function of the access flags
    // for private anonymous memory).
    if (src_vma.flags & VM_ACCESS_FLAGS) != (dst_vma.flags & VM_ACCESS_FLAGS)
        || vm_page_prot(src_vma.flags) != vm_page_prot(dst_vma.flags)
    {
        return Err(Errno::EINVAL);
    }
    if src_vma.flags.contains(VmFlags::LOCKED) != dst_vma.flags.contains(VmFlags::LOCKED) {
        return Err(Errno::EINVAL);
    }
    if !src_vma.flags.contains(VmFlags::WRITE) {
        return Err(Errno::EINVAL);
    }
    let incompatible = VmFlags::PFNMAP | VmFlags::IO | VmFlags::HUGETLB | VmFlags::MIXEDMAP;
    if src_vma.flags.intersects(incompatible) || dst_vma.flags.intersects(incompatible) {
        return Err(Errno::EINVAL);
    }
    // The destination must be registered with this context (§7.2.7); the
    // source need not be registered at all. Both are anonymous.
    if dst_vma.uffd_ctx() != Some(id) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// §7.3.3: move a whole PMD (an exclusive THP, or the huge zero page) to an
/// empty, aligned destination PMD, with its deposited page table. The
/// destination PMD is young, dirty and writable in the destination's
/// protection. For the huge zero page the model follows the fixed kernels
/// (the entry moves as it is, minus uffd-wp); v6.16–v6.19 before the March
/// 2026 fix install a bogus frame instead (§7.3.3, scenario 26: never run
/// live). Linux: mm/huge_memory.c move_pages_huge_pmd().
fn move_pages_huge_pmd(
    mm: &mut crate::mm::mm::Mm,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
    leaf: Leaf,
    huge_zero: Option<Pfn>,
) -> Result<(), Errno> {
    let dst_pmd = if Some(leaf.pfn) == huge_zero {
        let mut l = leaf;
        l.flags.remove(LeafFlags::UFFD_WP);
        l
    } else {
        // The head's PageAnonExclusive (no pins in the model).
        Leaf {
            pfn: leaf.pfn,
            flags: vm_page_prot(dst_vma.flags)
                | LeafFlags::YOUNG
                | LeafFlags::DIRTY
                | LeafFlags::WRITE,
        }
    };
    // pmdp_huge_clear_flush(); folio_move_anon_rmap() and folio->index
    // (not observable: the same mm maps the same folio once); set_pmd_at();
    // pgtable_trans_huge_withdraw() + deposit at the destination.
    mm.pt.set_pmd(src_addr, Entry::None);
    mm.pt.set_pmd(dst_addr, Entry::Leaf(dst_pmd));
    if let Some(t) = mm.deposited.remove(&src_addr) {
        mm.deposited.insert(dst_addr, t);
    }
    Ok(())
}

/// §7.4.4: clear the source zero-page PTE (with a flush) and map the zero
/// page at the destination. Linux: mm/userfaultfd.c move_zeropage_pte().
fn move_zeropage_pte(
    mm: &mut crate::mm::mm::Mm,
    phys: &crate::core::folio::PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
) {
    mm.pt.clear_ptes(src_addr, 1);
    mm.pt
        .set_ptes(dst_addr, zero_pte(dst_vma, phys.zero_pfn), 1, phys);
}

/// The 6.8–6.17 algorithm (`before uffd-move-batch`): one present page per
/// step. The source PTE is cleared with ptep_clear_flush() — one TLB flush
/// per page — and the destination written with set_pte_at(). The page keeps
/// its frame, mapcount and PageAnonExclusive; the folio's anon_vma and index
/// follow the destination (not observable). RSS is unchanged.
/// Linux: mm/userfaultfd.c move_present_pte() (v6.17).
fn move_present_pte_per_page(
    mm: &mut crate::mm::mm::Mm,
    phys: &crate::core::folio::PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
) -> Result<u64, Errno> {
    // Re-checked under both page-table locks: small and exclusive.
    let Entry::Leaf(src_pte) = mm.pt.pte(src_addr) else {
        return Err(Errno::EAGAIN);
    };
    if !phys.anon_exclusive(src_pte.pfn) {
        return Err(Errno::EBUSY);
    }
    mm.pt.hw.mark_batch(src_addr, 1, "uffd move");
    // Under both PTLs: pte_same() re-check of the destination (one load).
    mm.pt.hw.one(HwEvent::PteLoad);
    // ptep_clear_flush(): the clear and a one-page flush, per page.
    let (_, old) = mm.pt.clear_ptes(src_addr, 1)[0];
    mm.pt.flush_tlb_page(src_addr);
    // folio_move_anon_rmap() and folio->index = linear_page_index().
    mm.pt.hw.one(HwEvent::RmapUpdate);
    mm.pt.set_ptes(dst_addr, moved_pte(dst_vma, old), 1, phys);
    Ok(PAGE_SIZE)
}

/// 6.18's batched move (§7.5): after the first present page, following
/// pages move under the same page-table locks while the destination PTE is
/// empty and the source maps an exclusive small folio (not the zero page)
/// with the first page's anon_vma, up to the end of the range or of either
/// PMD. Source PTEs are cleared without per-page flushes (ptep_get_and_clear)
/// and one ranged flush follows. The first page that does not qualify ends
/// the batch; the next step handles it. Every folio the model holds was
/// faulted in or moved into an anon_vma of this mm and there are no
/// contended folio locks, so only the PTE and exclusivity tests can end a
/// batch early.
/// Linux: mm/userfaultfd.c move_present_ptes(),
/// check_ptes_for_batched_move() (v6.18).
fn move_present_ptes_batched(
    mm: &mut crate::mm::mm::Mm,
    phys: &crate::core::folio::PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
    len: u64,
) -> Result<u64, Errno> {
    let Entry::Leaf(first) = mm.pt.pte(src_addr) else {
        return Err(Errno::EAGAIN);
    };
    if !phys.anon_exclusive(first.pfn) {
        return Err(Errno::EBUSY);
    }
    // The batch stays inside both PMDs.
    let dst_end = pmd_end(dst_addr, dst_addr + len);
    let src_end = pmd_end(src_addr, src_addr + (dst_end - dst_addr));
    let (mut src, mut dst) = (src_addr, dst_addr);
    loop {
        // ptep_get_and_clear() (no per-page flush), folio_move_anon_rmap(),
        // set_pte_at().
        let (_, old) = mm.pt.clear_ptes(src, 1)[0];
        mm.pt.hw.one(HwEvent::RmapUpdate);
        mm.pt.set_ptes(dst, moved_pte(dst_vma, old), 1, phys);
        src += PAGE_SIZE;
        dst += PAGE_SIZE;
        if src == src_end || !batch_continues(mm, phys, src, dst) {
            break;
        }
        // check_ptes_for_batched_move() took the folio lock; unlocked after
        // the move (no reference is taken for batched pages).
        mm.pt.hw.one(HwEvent::StructPageLine);
        mm.pt.hw.add(HwEvent::FolioRefAtomic, 2);
    }
    mm.pt
        .hw
        .mark_batch(src_addr, (src - src_addr) / PAGE_SIZE, "uffd move");
    // flush_tlb_range(src_vma, src_addr, src): one flush for the batch.
    mm.pt.flush_tlb_range(src_addr, src, PAGE_SIZE);
    Ok(src - src_addr)
}

/// Whether the page at `src` joins the running batch.
/// Linux: mm/userfaultfd.c check_ptes_for_batched_move().
fn batch_continues(
    mm: &crate::mm::mm::Mm,
    phys: &crate::core::folio::PhysMem,
    src: u64,
    dst: u64,
) -> bool {
    if !matches!(mm.pt.pte_raw(dst), Entry::None) {
        return false;
    }
    let Entry::Leaf(pte) = mm.pt.pte(src) else {
        return false;
    };
    if pte.flags.contains(LeafFlags::SPECIAL) {
        return false;
    }
    match phys.folio_of(pte.pfn) {
        Some(f) => !f.is_large() && phys.anon_exclusive(f.head),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observe::PageState;
    use crate::core::stats::{MthpStat, VmEvent};
    use crate::{Advice, ArchKind, MapFlags, ModelConfig, Prot, ThpKnob, ThpMode};

    const DST: u64 = 0x7f00_0000_0000;
    const SRC: u64 = 0x7f10_0000_0000;
    const RW: Prot = Prot::READ.union(Prot::WRITE);

    fn fixed() -> MapFlags {
        MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED
    }

    /// A model with `dst` (registered MISSING) and `src` areas of `len`.
    fn setup(arch: ArchKind, len: u64) -> (Model, UffdId) {
        let mut m = Model::new(ModelConfig::for_arch(arch));
        m.mmap(1, DST, len, RW, fixed()).unwrap();
        m.mmap(1, SRC, len, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        assert_eq!(m.uffd_register(u, DST, len, 1), Ok(0x13C));
        (m, u)
    }

    fn state(m: &Model, va: u64) -> PageState {
        m.observe_pages(1, va, va + 4096)[0].state.clone()
    }

    fn pfn_of(m: &Model, va: u64) -> u64 {
        match state(m, va) {
            PageState::Anon(a) => a.pfn,
            s => panic!("{va:#x}: {s:?}"),
        }
    }

    fn check(m: &Model) {
        m.check_invariants().unwrap();
    }

    #[test]
    fn api_once_and_before_api() {
        let mut m = Model::new(ModelConfig::default());
        m.mmap(1, DST, 0x4000, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        // §10.2: REGISTER before API, bad api, unknown feature.
        assert_eq!(m.uffd_register(u, DST, 0x4000, 1), Err(Errno::EINVAL));
        assert_eq!(m.uffd_api(u, 0xAB, 0), Err(Errno::EINVAL));
        assert_eq!(m.uffd_api(u, UFFD_API, 1 << 40), Err(Errno::EINVAL));
        // §10.1: once.
        let api = m.uffd_api(u, UFFD_API, 0).unwrap();
        assert_eq!(api.features, 0x1FFFF);
        assert_ne!(api.features & UFFD_FEATURE_MOVE, 0);
        assert_eq!(api.ioctls, 0x8000_0000_0000_0003);
        assert_eq!(m.uffd_api(u, UFFD_API, 0), Err(Errno::EINVAL));
        // Non-cooperative events are not modelled.
        let v = m.uffd_open(1).unwrap();
        assert_eq!(
            m.uffd_api(v, UFFD_API, UFFD_FEATURE_EVENT_REMOVE),
            Err(Errno::ENOSYS)
        );
        assert!(m.uffd_api(v, UFFD_API, UFFD_FEATURE_SIGBUS).is_ok());
    }

    #[test]
    fn register_modes_and_errors() {
        let mut m = Model::new(ModelConfig::default());
        m.mmap(1, DST, 0x10000, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        // §10.3.
        assert_eq!(m.uffd_register(u, DST, 0x1000, 1), Ok(0x13C));
        assert_eq!(m.uffd_register(u, DST + 0x2000, 0x1000, 3), Ok(0x17C));
        assert_eq!(m.uffd_register(u, DST, 0x1000, 4), Err(Errno::EINVAL));
        assert_eq!(m.uffd_register(u, DST, 0x1000, 0), Err(Errno::EINVAL));
        assert_eq!(m.uffd_register(u, DST, 0x1000, 8), Err(Errno::EINVAL));
        assert_eq!(m.uffd_register(u, DST + 1, 0x1000, 1), Err(Errno::EINVAL));
        assert_eq!(m.uffd_register(u, DST, 100, 1), Err(Errno::EINVAL));
        assert_eq!(
            m.uffd_register(u, 0x1000_0000, 0x1000, 1),
            Err(Errno::EINVAL)
        );
        // smaps flags and the split VMAs.
        let obs = m.observe(1, "t");
        let flags: Vec<String> = obs.maps.iter().map(|e| e.vm_flags.join(" ")).collect();
        assert_eq!(
            flags,
            vec![
                "rd wr mr mw me um ac",
                "rd wr mr mw me ac",
                "rd wr mr mw me um uw ac",
                "rd wr mr mw me ac"
            ]
        );
        // §10.4: another context.
        let v = m.uffd_open(1).unwrap();
        m.uffd_api(v, UFFD_API, 0).unwrap();
        assert_eq!(m.uffd_register(v, DST, 0x1000, 1), Err(Errno::EBUSY));
        assert_eq!(m.uffd_unregister(v, DST, 0x1000), Err(Errno::EINVAL));
        // Unregister re-merges.
        m.uffd_unregister(u, DST, 0x10000).unwrap();
        assert_eq!(m.observe(1, "t").maps.len(), 1);
        check(&m);
    }

    #[test]
    fn contexts_block_merges() {
        let mut m = Model::new(ModelConfig::default());
        m.mmap(1, DST, 0x8000, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        let v = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        m.uffd_api(v, UFFD_API, 0).unwrap();
        m.uffd_register(u, DST, 0x4000, 1).unwrap();
        m.uffd_register(v, DST + 0x4000, 0x4000, 1).unwrap();
        // Same flags, different contexts: two VMAs (checked live).
        assert_eq!(m.observe(1, "t").maps.len(), 2);
        m.uffd_close(v).unwrap();
        m.uffd_register(u, DST + 0x4000, 0x4000, 1).unwrap();
        assert_eq!(m.observe(1, "t").maps.len(), 1);
        m.uffd_close(u).unwrap();
        assert!(m.observe(1, "t").maps[0].vm_flags.iter().all(|f| f != "um"));
    }

    #[test]
    fn fault_rules() {
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 0x10000);
            // §4.1: read and write of an empty PTE go to userfaultfd.
            assert_eq!(
                m.read(1, DST + 0x107b),
                Err(AccessFault::Uffd { addr: DST + 0x1000 })
            );
            assert_eq!(m.write(1, DST, 1), Err(AccessFault::Uffd { addr: DST }));
            // §10.24: ZEROPAGE, read, ZEROPAGE again, write COWs silently.
            assert_eq!(m.uffd_zeropage(u, DST, 0x1000, 0), Ok(0x1000));
            assert_eq!(m.read(1, DST), Ok(0));
            assert_eq!(
                m.uffd_zeropage(u, DST, 0x1000, 0),
                Err(UffdError {
                    errno: Errno::EEXIST,
                    field: Some(-17)
                })
            );
            m.write(1, DST, 5).unwrap();
            assert!(matches!(state(&m, DST), PageState::Anon(_)));
            check(&m);
        }
    }

    #[test]
    fn wp_registration_forces_order_zero() {
        let mut m = Model::new(ModelConfig::default());
        m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        m.mmap(1, DST, 0x40000, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        m.uffd_register(u, DST, 0x40000, 2).unwrap();
        m.write(1, DST, 1).unwrap();
        match state(&m, DST) {
            PageState::Anon(a) => assert_eq!(a.order, 0),
            s => panic!("{s:?}"),
        }
        // COPY with MODE_WP: read-only, uffd-wp; a write goes to uffd;
        // UNREGISTER resolves the bit and makes it writable.
        m.uffd_copy(1, u, DST + 0x1000, CopySource::Tag(7), 0x1000, 2)
            .unwrap();
        assert_eq!(
            m.write(1, DST + 0x1000, 8),
            Err(AccessFault::Uffd { addr: DST + 0x1000 })
        );
        m.uffd_unregister(u, DST, 0x40000).unwrap();
        let pt = &m.mm(1).unwrap().pt;
        assert!(
            matches!(pt.pte(DST + 0x1000), Entry::Leaf(l) if l.write() && !l.flags.contains(LeafFlags::UFFD_WP))
        );
        m.write(1, DST + 0x1000, 8).unwrap();
        check(&m);
    }

    #[test]
    fn copy_rules() {
        let (mut m, u) = setup(ArchKind::X86_64, 0x10000);
        // From an untouched source: the source is faulted in (zero page).
        assert_eq!(
            m.uffd_copy(1, u, DST, CopySource::Addr(SRC), 0x1000, 0),
            Ok(0x1000)
        );
        assert_eq!(state(&m, SRC), PageState::Zero);
        match state(&m, DST) {
            PageState::Anon(a) => assert!(a.order == 0 && a.anon_exclusive && a.mapcount == 1),
            s => panic!("{s:?}"),
        }
        // Occupied: EEXIST, but the source was still read.
        let e = m.uffd_copy(1, u, DST, CopySource::Addr(SRC + 0x1000), 0x1000, 0);
        assert_eq!(e.unwrap_err().field, Some(-17));
        assert_eq!(state(&m, SRC + 0x1000), PageState::Zero);
        // Unaligned sources copy the bytes at src (checked live).
        m.write(1, SRC + 0x2000, 0x1122_3344_5566_7788).unwrap();
        m.write(1, SRC + 0x3000, 0x99aa_bbcc_ddee_ff00).unwrap();
        m.uffd_copy(
            1,
            u,
            DST + 0x1000,
            CopySource::Addr(SRC + 0x2003),
            0x1000,
            0,
        )
        .unwrap();
        assert_eq!(m.read(1, DST + 0x1000), Ok(0x11_2233_4455));
        m.uffd_copy(
            1,
            u,
            DST + 0x2000,
            CopySource::Addr(SRC + 0x2ffd),
            0x1000,
            0,
        )
        .unwrap();
        assert_eq!(m.read(1, DST + 0x2000), Ok(0xccdd_eeff_0000_0000));
        // Unreadable source, WP without WP registration, unregistered dst,
        // past the VMA end, mode 4 (field untouched).
        m.mmap(1, SRC + 0x10000, 0x1000, Prot::empty(), fixed())
            .unwrap();
        let e = m.uffd_copy(
            1,
            u,
            DST + 0x3000,
            CopySource::Addr(SRC + 0x10000),
            0x1000,
            0,
        );
        assert_eq!(e.unwrap_err().errno, Errno::EFAULT);
        let e = m.uffd_copy(1, u, DST + 0x3000, CopySource::Tag(1), 0x1000, 2);
        assert_eq!(
            e.unwrap_err(),
            UffdError {
                errno: Errno::EINVAL,
                field: Some(-22)
            }
        );
        let e = m.uffd_copy(1, u, SRC + 0x8000, CopySource::Tag(1), 0x1000, 0);
        assert_eq!(e.unwrap_err().errno, Errno::ENOENT);
        let e = m.uffd_copy(1, u, DST + 0xf000, CopySource::Tag(1), 0x2000, 0);
        assert_eq!(e.unwrap_err().errno, Errno::ENOENT);
        let e = m.uffd_copy(1, u, DST + 0x3000, CopySource::Tag(1), 0x1000, 4);
        assert_eq!(e.unwrap_err(), UffdError::untouched(Errno::EINVAL));
        // Partial progress: three pages, the second occupied.
        m.uffd_copy(1, u, DST + 0x5000, CopySource::Tag(1), 0x1000, 0)
            .unwrap();
        let e = m.uffd_copy(1, u, DST + 0x4000, CopySource::Tag(2), 0x3000, 0);
        assert_eq!(
            e.unwrap_err(),
            UffdError {
                errno: Errno::EAGAIN,
                field: Some(0x1000)
            }
        );
        check(&m);
    }

    #[test]
    fn move_one_page_and_errors() {
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 0x10000);
            m.write(1, SRC, 0xabc).unwrap();
            let pfn = pfn_of(&m, SRC);
            // §10.7.
            assert_eq!(m.uffd_move(1, u, DST, SRC, 0x1000, 0), Ok(0x1000));
            assert_eq!(pfn_of(&m, DST), pfn);
            assert_eq!(state(&m, SRC), PageState::NotPresent);
            assert_eq!(m.read(1, DST), Ok(0xabc));
            // The source is unregistered: reading it maps the zero page.
            assert_eq!(m.read(1, SRC), Ok(0));
            // §10.8: occupied destination.
            m.write(1, SRC + 0x1000, 1).unwrap();
            let e = m.uffd_move(1, u, DST, SRC + 0x1000, 0x1000, 0).unwrap_err();
            assert_eq!(
                e,
                UffdError {
                    errno: Errno::EEXIST,
                    field: Some(-17)
                }
            );
            // §10.9: holes.
            let e = m
                .uffd_move(1, u, DST + 0x1000, SRC + 0x2000, 0x1000, 0)
                .unwrap_err();
            assert_eq!(e.errno, Errno::ENOENT);
            assert_eq!(
                m.uffd_move(1, u, DST + 0x1000, SRC + 0x2000, 0x1000, 2),
                Ok(0x1000)
            );
            assert_eq!(state(&m, DST + 0x1000), PageState::NotPresent);
            // §10.11: field untouched.
            for (d, s, l, mode) in [
                (DST, SRC, 0x1000, 4),
                (DST + 1, SRC, 0x1000, 0),
                (DST, SRC + 1, 0x1000, 0),
                (DST, SRC, 100, 0),
                (DST, SRC, 0, 0),
            ] {
                assert_eq!(
                    m.uffd_move(1, u, d, s, l, mode),
                    Err(UffdError::untouched(Errno::EINVAL))
                );
            }
            // §10.12: unregistered destination.
            let e = m
                .uffd_move(1, u, SRC + 0x5000, SRC + 0x1000, 0x1000, 0)
                .unwrap_err();
            assert_eq!(
                e,
                UffdError {
                    errno: Errno::EINVAL,
                    field: Some(-22)
                }
            );
            // §10.16: another process issues the move.
            let child = m.fork(1).unwrap();
            let e = m.uffd_move(child, u, DST + 0x2000, SRC + 0x1000, 0x1000, 0);
            assert_eq!(e, Err(UffdError::untouched(Errno::EINVAL)));
            check(&m);
        }
    }

    #[test]
    fn move_vma_preconditions() {
        let (mut m, u) = setup(ArchKind::X86_64, 0x10000);
        let other = SRC + 0x100_0000;
        // §10.13: PROT_READ source, mlocked-only source (not modelled:
        // mlock is not a model syscall), MAP_SHARED (not modelled), past the VMA end.
        m.mmap(1, other, 0x1000, Prot::READ, fixed()).unwrap();
        let e = m.uffd_move(1, u, DST, other, 0x1000, 0).unwrap_err();
        assert_eq!(e.field, Some(-22));
        let e = m.uffd_move(1, u, DST, SRC + 0xf000, 0x2000, 0).unwrap_err();
        assert_eq!(e.field, Some(-22));
        // No VMA at src or dst: ENOENT.
        let e = m
            .uffd_move(1, u, DST, other + 0x10000, 0x1000, 0)
            .unwrap_err();
        assert_eq!(e.field, Some(-2));
        // src inside the (registered) destination VMA.
        m.uffd_copy(1, u, DST + 0x3000, CopySource::Tag(9), 0x1000, 0)
            .unwrap();
        assert_eq!(m.uffd_move(1, u, DST, DST + 0x3000, 0x1000, 0), Ok(0x1000));
        assert_eq!(m.read(1, DST), Ok(9));
        // The source of a move inside a MISSING range faults to uffd after.
        assert_eq!(
            m.read(1, DST + 0x3000),
            Err(AccessFault::Uffd { addr: DST + 0x3000 })
        );
        check(&m);
    }

    #[test]
    fn partial_progress_and_precedence() {
        let (mut m, u) = setup(ArchKind::X86_64, 0x10000);
        m.access_range(1, SRC, 0x3000, true, None).unwrap();
        m.uffd_copy(1, u, DST + 0x1000, CopySource::Tag(1), 0x1000, 0)
            .unwrap();
        // §10.10.
        let e = m.uffd_move(1, u, DST, SRC, 0x3000, 0).unwrap_err();
        assert_eq!(
            e,
            UffdError {
                errno: Errno::EAGAIN,
                field: Some(0x1000)
            }
        );
        let e = m
            .uffd_move(1, u, DST + 0x1000, SRC + 0x1000, 0x2000, 0)
            .unwrap_err();
        assert_eq!(e.errno, Errno::EEXIST);
        // §10.21: dst occupied + a source area never touched (no PMD
        // table): ENOENT; with an existing, empty PTE table: EEXIST.
        let far = SRC + 0x4000_0000;
        m.mmap(1, far, 0x2000, RW, fixed()).unwrap();
        let e = m.uffd_move(1, u, DST + 0x1000, far, 0x1000, 0).unwrap_err();
        assert_eq!(e.errno, Errno::ENOENT);
        let e = m
            .uffd_move(1, u, DST + 0x1000, SRC + 0x8000, 0x1000, 0)
            .unwrap_err();
        assert_eq!(e.errno, Errno::EEXIST);
        check(&m);
    }

    #[test]
    fn move_zero_page_source() {
        let (mut m, u) = setup(ArchKind::Arm64, 0x10000);
        m.read(1, SRC).unwrap();
        // §10.18.
        assert_eq!(m.uffd_move(1, u, DST, SRC, 0x1000, 0), Ok(0x1000));
        assert_eq!(state(&m, DST), PageState::Zero);
        assert_eq!(state(&m, SRC), PageState::NotPresent);
        check(&m);
    }

    #[test]
    fn fork_shared_pages_are_busy() {
        let (mut m, u) = setup(ArchKind::X86_64, 0x10000);
        m.write(1, SRC, 1).unwrap();
        let c = m.fork(1).unwrap();
        // §10.14: shared, after the child exits, after the parent writes.
        let e = m.uffd_move(1, u, DST, SRC, 0x1000, 0).unwrap_err();
        assert_eq!(e.errno, Errno::EBUSY);
        m.exit(c).unwrap();
        let e = m.uffd_move(1, u, DST, SRC, 0x1000, 0).unwrap_err();
        assert_eq!(e.errno, Errno::EBUSY);
        m.write(1, SRC, 2).unwrap();
        assert_eq!(m.uffd_move(1, u, DST, SRC, 0x1000, 0), Ok(0x1000));
        // §10.15: MADV_DONTFORK keeps the source exclusive.
        m.madvise(1, SRC + 0x1000, 0x1000, Advice::DontFork)
            .unwrap();
        m.write(1, SRC + 0x1000, 3).unwrap();
        let c = m.fork(1).unwrap();
        assert_eq!(
            m.uffd_move(1, u, DST + 0x1000, SRC + 0x1000, 0x1000, 0),
            Ok(0x1000)
        );
        m.exit(c).unwrap();
        check(&m);
    }

    #[test]
    fn move_thp_whole_and_split() {
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 8 << 20);
            m.madvise(1, SRC, 8 << 20, Advice::HugePage).unwrap();
            m.access_range(1, SRC, 8 << 20, true, None).unwrap();
            let pfn = pfn_of(&m, SRC);
            // §10.19: aligned 2 MiB moves whole.
            assert_eq!(m.uffd_move(1, u, DST, SRC, 2 << 20, 0), Ok(2 << 20));
            match state(&m, DST + 0x1000) {
                PageState::Anon(a) => assert!(a.pmd_mapped && a.pfn == pfn + 1),
                s => panic!("{s:?}"),
            }
            assert_eq!(m.observe(1, "t").maps[0].anon_huge_kb, 2048);
            // §10.20: one page out of a THP: PMD split and folio split.
            let before = m.phys().stats.clone();
            let src2 = SRC + (2 << 20);
            assert_eq!(
                m.uffd_move(1, u, DST + (2 << 20), src2 + 0x5000, 0x1000, 0),
                Ok(0x1000)
            );
            let s = &m.phys().stats;
            assert_eq!(
                s.get_vm(VmEvent::ThpSplitPmd) - before.get_vm(VmEvent::ThpSplitPmd),
                1
            );
            assert_eq!(
                s.get_vm(VmEvent::ThpSplitPage) - before.get_vm(VmEvent::ThpSplitPage),
                1
            );
            assert_eq!(
                s.get_mthp(9, MthpStat::Split) - before.get_mthp(9, MthpStat::Split),
                1
            );
            assert_eq!(
                s.get_mthp(9, MthpStat::NrAnon) - before.get_mthp(9, MthpStat::NrAnon),
                -1
            );
            for va in [src2, src2 + 0x6000, DST + (2 << 20)] {
                match state(&m, va) {
                    PageState::Anon(a) => {
                        assert!(a.order == 0 && !a.pmd_mapped && a.anon_exclusive)
                    }
                    s => panic!("{s:?}"),
                }
            }
            assert_eq!(m.read(1, DST + (2 << 20)), Ok(src2 + 0x5000));
            // Same with dst + 4 KiB: split, no THP at the destination.
            let src3 = SRC + (4 << 20);
            assert_eq!(
                m.uffd_move(1, u, DST + (4 << 20) + 0x1000, src3, (2 << 20) - 0x1000, 0),
                Ok((2 << 20) - 0x1000)
            );
            assert_eq!(m.read(1, DST + (4 << 20) + 0x1000), Ok(src3));
            check(&m);
        }
    }

    #[test]
    fn move_mthp_splits_even_when_whole() {
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 0x40000);
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            m.access_range(1, SRC, 0x40000, true, None).unwrap();
            // Checked live: moving a whole 64 KiB folio still splits it.
            assert_eq!(m.uffd_move(1, u, DST, SRC, 0x10000, 0), Ok(0x10000));
            assert_eq!(m.phys().stats.get_mthp(4, MthpStat::Split), 1);
            match state(&m, DST + 0x3000) {
                PageState::Anon(a) => assert!(a.order == 0 && a.anon_exclusive),
                s => panic!("{s:?}"),
            }
            // A partially mapped folio leaves nr_anon_partially_mapped.
            m.madvise(1, SRC + 0x14000, 0x4000, Advice::DontNeed)
                .unwrap();
            assert_eq!(
                m.phys().stats.get_mthp(4, MthpStat::NrAnonPartiallyMapped),
                1
            );
            assert_eq!(
                m.uffd_move(1, u, DST + 0x10000, SRC + 0x10000, 0x1000, 0),
                Ok(0x1000)
            );
            assert_eq!(
                m.phys().stats.get_mthp(4, MthpStat::NrAnonPartiallyMapped),
                0
            );
            check(&m);
        }
    }

    #[test]
    fn head_exclusive_decides_for_large_folios() {
        // Checked live: after fork + child exit, writing page 3 of a 64 KiB
        // folio makes only page 3 exclusive; moving it is EBUSY because the
        // head is not. Writing the head makes the move (with a split) work.
        let (mut m, u) = setup(ArchKind::X86_64, 0x40000);
        m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        m.access_range(1, SRC, 0x10000, true, None).unwrap();
        let c = m.fork(1).unwrap();
        m.exit(c).unwrap();
        m.write(1, SRC + 0x3000, 1).unwrap();
        let e = m.uffd_move(1, u, DST, SRC + 0x3000, 0x1000, 0).unwrap_err();
        assert_eq!(e.errno, Errno::EBUSY);
        m.write(1, SRC, 2).unwrap();
        assert_eq!(m.uffd_move(1, u, DST, SRC + 0x3000, 0x1000, 0), Ok(0x1000));
        let e = m
            .uffd_move(1, u, DST + 0x1000, SRC + 0x1000, 0x1000, 0)
            .unwrap_err();
        assert_eq!(e.errno, Errno::EBUSY);
        check(&m);
    }

    #[test]
    fn hole_move_allocates_tables() {
        // Checked live: moving a 2 MiB hole leaves a PTE table at the
        // destination, so a later write there cannot map a PMD THP.
        let (mut m, u) = setup(ArchKind::X86_64, 4 << 20);
        m.madvise(1, DST, 4 << 20, Advice::HugePage).unwrap();
        assert_eq!(m.uffd_move(1, u, DST, SRC, 2 << 20, 2), Ok(2 << 20));
        m.uffd_unregister(u, DST, 4 << 20).unwrap();
        m.write(1, DST, 1).unwrap();
        m.write(1, DST + (2 << 20), 1).unwrap();
        let pmd = |m: &Model, va| matches!(state(m, va), PageState::Anon(a) if a.pmd_mapped);
        assert!(!pmd(&m, DST));
        assert!(pmd(&m, DST + (2 << 20)));
        check(&m);
    }

    #[test]
    fn batched_and_per_page_agree() {
        for arch in ArchKind::ALL {
            let mut out = Vec::new();
            for before in [Before::empty(), Before::UFFD_MOVE_BATCH] {
                let (mut m, u) = setup(arch, 4 << 20);
                m.set_before(before);
                m.access_range(1, SRC + 0x1000, (4 << 20) - 0x1000, true, None)
                    .unwrap();
                m.read(1, SRC + 0x30000).unwrap();
                // 512 pages crossing a PMD boundary (§10.25).
                let r = m.uffd_move(1, u, DST + 0x1000, SRC + 0x1000, 2 << 20, 0);
                out.push((r, m.observe(1, "t").render(crate::Sections::ALL)));
                check(&m);
            }
            assert_eq!(out[0], out[1], "{arch:?}");
        }
    }

    #[test]
    fn copied_tag_bytes() {
        assert_eq!(copied_tag(0x1000, 7, 9), 7);
        assert_eq!(copied_tag(0x1001, 0x1122, 9), 0x11);
        assert_eq!(copied_tag(0x1100, 0x1122, 9), 0);
        assert_eq!(copied_tag(0x1fff, 0x1122, 0xab), 0xab00);
        assert_eq!(copied_tag(0x1ffd, 0x1122, 0xab), 0xab00_0000);
        assert_eq!(copied_tag(0x1ff9, 0x1122, 0xabcd), 0xcd00_0000_0000_0000);
    }
}
