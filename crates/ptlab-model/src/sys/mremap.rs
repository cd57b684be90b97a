//! mremap(2) of private anonymous memory: in-place shrink and expand, moves
//! (MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP) and 6.17's multi-VMA
//! moves, with the kernel's errno checks in order and the side effects a
//! call leaves when it fails part-way.
//!
//! Linux: mm/mremap.c do_mremap(), check_mremap_params(), check_prep_vma(),
//! mremap_at(), shrink_vma(), expand_vma(), expand_vma_in_place(),
//! vma_expandable(), mremap_to(), vrm_set_new_addr(), remap_move(),
//! vma_multi_allowed(), move_vma(), prep_move_vma(), copy_vma_and_data(),
//! dontunmap_complete(), unmap_source_vma(); mm/vma.c copy_vma(),
//! vma_merge_copied_range(), vma_merge_extend(); mm/userfaultfd.c
//! mremap_userfaultfd_prep(). Rule tags (§2–§9) label the rules as
//! stated beside them, each with its kernel function. Page tables move in [`crate::mm::move_pt`].
//!
//! Guard markers move with the PTEs ([`crate::mm::marker`], after the move).
//! RLIMIT_MEMLOCK, RLIMIT_AS and RLIMIT_DATA are checked where the kernel
//! checks them (mlock_future_ok(), may_expand_vm(): [`crate::mm::rlimit`]).
//! Not modelled: overcommit (the VM_ACCOUNT charge always succeeds), KSM
//! unsharing, hugetlb, file and special mappings, uffd remap
//! events (no UFFD_FEATURE_EVENT_REMAP: a move drops the registration).

use crate::core::addr::{PAGE_SIZE, TASK_SIZE};
use crate::core::hw::HwEvent;
use crate::core::rules::rule;
use crate::core::vma::{VmFlags, Vma, VM_ACCESS_FLAGS, VM_UFFD_FLAGS};
use crate::mm::move_pt::{move_page_tables, PageTableMove};
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::uapi::{MapFlags, MremapFlags};
use crate::types::Pid;

/// Linux: enum mremap_type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RemapType {
    NoResize,
    Shrink,
    Expand,
}

/// The state threaded through one call. Linux: struct vma_remap_struct.
#[derive(Clone, Debug)]
struct Vrm {
    addr: u64,
    old_len: u64,
    new_len: u64,
    flags: MremapFlags,
    new_addr: u64,
    delta: u64,
    remap_type: RemapType,
    /// An mlock()ed mapping grew: populate the new part afterwards.
    populate_expand: bool,
    /// Multi-VMA move: how much of the call's range, from its start, has
    /// moved, and where its first piece went (a later piece can fail after
    /// earlier ones moved for good).
    moved_prefix: u64,
    moved_to: u64,
}

impl Vrm {
    /// MREMAP_FIXED or MREMAP_DONTUNMAP: a new address will be used.
    /// Linux: vrm_implies_new_addr().
    fn implies_new_addr(&self) -> bool {
        self.flags
            .intersects(MremapFlags::FIXED | MremapFlags::DONTUNMAP)
    }
    /// FIXED with equal lengths: the multi-VMA path. Linux: vrm_move_only().
    fn move_only(&self) -> bool {
        self.flags.contains(MremapFlags::FIXED) && self.old_len == self.new_len
    }
    /// Linux: vrm_set_delta(), vrm_remap_type().
    fn set_delta(&mut self) {
        self.delta = self.old_len.abs_diff(self.new_len);
        self.remap_type = if self.delta == 0 {
            RemapType::NoResize
        } else if self.old_len > self.new_len {
            RemapType::Shrink
        } else {
            RemapType::Expand
        };
    }
    /// Linux: vrm_overlaps() (unsigned arithmetic, as in C).
    fn overlaps(&self) -> bool {
        let end_old = self.addr.wrapping_add(self.old_len);
        let end_new = self.new_addr.wrapping_add(self.new_len);
        end_old > self.new_addr && end_new > self.addr
    }
}

/// PAGE_ALIGN() with C's wrap-around: a length near 2^64 becomes 0.
fn page_align_wrapping(len: u64) -> u64 {
    len.wrapping_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

/// userfaultfd_armed(). Linux: include/linux/userfaultfd_k.h.
fn uffd_armed(vma: &Vma) -> bool {
    vma.flags.intersects(VM_UFFD_FLAGS)
}

impl Model {
    /// mremap(2): `flags` may carry undefined bits
    /// ([`MremapFlags::from_bits_retain`]); `new_addr` is read only with
    /// MREMAP_FIXED or MREMAP_DONTUNMAP. Returns the mapping's new address.
    /// Linux: mm/mremap.c SYSCALL_DEFINE5(mremap) → do_mremap().
    pub fn mremap(
        &mut self,
        pid: Pid,
        old_addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        if !self.procs.contains_key(&pid) {
            return Err(Errno::EINVAL);
        }
        self.count_syscall(pid);
        let mut vrm = Vrm {
            addr: old_addr,
            old_len: page_align_wrapping(old_len),
            new_len: page_align_wrapping(new_len),
            flags,
            new_addr,
            delta: 0,
            remap_type: RemapType::NoResize,
            populate_expand: false,
            moved_prefix: 0,
            moved_to: 0,
        };
        self.check_mremap_params(pid, &vrm)?;
        // (No marker where no non-present entry was ever stored: no walk.)
        let mm = &self.procs[&pid];
        let guards = match mm.pt.may_hold_nonpresent() {
            true => crate::mm::marker::snapshot(mm, vrm.addr, vrm.old_len),
            false => Vec::new(),
        };
        // remap_move() rewrites `vrm` per VMA: keep the call's own range.
        let (orig_addr, orig_old, orig_new) = (vrm.addr, vrm.old_len, vrm.new_len);
        // §2.11: mmap_write_lock_killable() never sees a fatal signal here.
        let res = if vrm.move_only() {
            self.remap_move(pid, &mut vrm)
        } else {
            let vma = self.procs[&pid].vmas.find(vrm.addr).cloned();
            check_prep_vma(&self.procs[&pid], &mut vrm, vma.as_ref()).and_then(|()| {
                if vrm.implies_new_addr() {
                    self.mremap_to(pid, &mut vrm)
                } else {
                    self.mremap_at(pid, &mut vrm)
                }
            })
        };
        // §3.3.1/§4.11: an mlock()ed mapping that grew is populated after
        // the lock is dropped.
        // move_ptes() moves guard markers with the other entries.
        if let Ok(to) = res {
            if to != orig_addr && !guards.is_empty() {
                // (found by `ptlab fuzz --seed 31337`, case 709: a guarded
                // range over two VMAs moved with one FIXED call)
                let moved = orig_old.min(orig_new);
                self.guard_after_move(pid, &guards, orig_addr, to, moved);
            }
        } else if vrm.moved_prefix > 0 && !guards.is_empty() {
            // A multi-VMA move that failed at a later VMA: the VMAs before it
            // moved with their markers, the rest stayed with theirs (found
            // by the CI's time-seeded `ptlab fuzz`, seed
            // 18102605311165482399 case 261: the third VMA's destination
            // held a sealed page, EPERM; tests/scenarios/guard-07-multi-vma-move-partial.ptl).
            let moved: Vec<u64> = guards
                .iter()
                .copied()
                .filter(|&o| o < vrm.moved_prefix)
                .collect();
            self.guard_after_move(pid, &moved, orig_addr, vrm.moved_to, vrm.moved_prefix);
        }
        if res.is_ok() && vrm.populate_expand {
            self.mm_populate(pid, vrm.new_addr + vrm.old_len, vrm.delta);
        }
        res
    }

    /// §2.1–§2.10, before the mmap lock. Linux: check_mremap_params() (6.18).
    fn check_mremap_params(&self, pid: Pid, vrm: &Vrm) -> Result<(), Errno> {
        if vrm.flags.bits() & !MremapFlags::all().bits() != 0 {
            rule!(self.phys.hw, MremapFlagsInvalid);
            return Err(Errno::EINVAL);
        }
        if !vrm.addr.is_multiple_of(PAGE_SIZE) {
            rule!(self.phys.hw, MremapAddrUnaligned);
            return Err(Errno::EINVAL);
        }
        // A zero new length is nonsensical; old_len == 0 is checked later.
        if vrm.new_len == 0 || vrm.new_len > TASK_SIZE {
            rule!(self.phys.hw, MremapNewLenInvalid);
            return Err(Errno::EINVAL);
        }
        // §2.4: without FIXED or DONTUNMAP, new_addr is ignored.
        if !vrm.implies_new_addr() {
            return Ok(());
        }
        if vrm.new_addr > TASK_SIZE - vrm.new_len || !vrm.new_addr.is_multiple_of(PAGE_SIZE) {
            rule!(self.phys.hw, MremapNewAddrInvalid);
            return Err(Errno::EINVAL);
        }
        if !vrm.flags.contains(MremapFlags::MAYMOVE) {
            rule!(self.phys.hw, MremapFixedWithoutMaymove);
            return Err(Errno::EINVAL);
        }
        if vrm.flags.contains(MremapFlags::DONTUNMAP) && vrm.old_len != vrm.new_len {
            rule!(self.phys.hw, MremapDontunmapResize);
            return Err(Errno::EINVAL);
        }
        // §2.9: uses the unshrunk old_len.
        if vrm.overlaps() {
            rule!(self.phys.hw, MremapOverlap);
            return Err(Errno::EINVAL);
        }
        // §2.10: both the source and the destination may split in three
        // before move_vma() wants 4 maps of headroom.
        let map_count = self.procs[&pid].map_count() as i64;
        if map_count + 2 >= self.cfg.max_map_count as i64 - 3 {
            rule!(self.phys.hw, MremapMapCountEarly);
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }

    /// §3: resize without FIXED/DONTUNMAP. Linux: mremap_at().
    fn mremap_at(&mut self, pid: Pid, vrm: &mut Vrm) -> Result<u64, Errno> {
        match vrm.remap_type {
            // §3.1
            RemapType::NoResize => {
                rule!(self.phys.hw, MremapNoResize);
                Ok(vrm.addr)
            }
            // §3.2: munmap of the tail; never merges.
            RemapType::Shrink => {
                rule!(self.phys.hw, MremapShrinkInPlace);
                self.munmap_inner(pid, vrm.addr + vrm.new_len, vrm.delta)?;
                Ok(vrm.addr)
            }
            RemapType::Expand => self.expand_vma(pid, vrm),
        }
    }

    /// §3.3. Linux: expand_vma().
    fn expand_vma(&mut self, pid: Pid, vrm: &mut Vrm) -> Result<u64, Errno> {
        let vma = self.procs[&pid]
            .vmas
            .find(vrm.addr)
            .cloned()
            .expect("checked");
        // §3.3.1: the range is the VMA's suffix and the space after is free.
        if vma.end - vrm.addr == vrm.old_len && self.vma_expandable(pid, &vma, vrm.delta) {
            // expand_vma_in_place() → vma_merge_extend(): a new range after
            // the VMA, proposed with its own attributes (so it always merges
            // left with the VMA itself) and possibly absorbing `next`.
            // There is no copied-from VMA, so no fork-child check.
            rule!(self.phys.hw, MremapExpandInPlace);
            let mm = self.procs.get_mut(&pid).expect("pid");
            let extension = Vma {
                start: vma.end,
                end: vma.end + vrm.delta,
                pgoff: vma.pgoff_at(vma.end),
                fork_child: false,
                ..vma
            };
            let merged = mm.merge_new_range(&extension);
            return match merged {
                Some(_) => Ok(vrm.addr),
                None => Err(Errno::ENOMEM), // special VMAs: not anonymous memory
            };
        }
        // §3.3.2
        if !vrm.flags.contains(MremapFlags::MAYMOVE) {
            rule!(self.phys.hw, MremapExpandNoMaymove);
            return Err(Errno::ENOMEM);
        }
        // §3.3.3
        self.vrm_set_new_addr(pid, vrm)?;
        self.move_vma(pid, vrm)
    }

    /// No VMA in `[vm_end, vm_end + delta)` and the grown VMA is a valid
    /// MAP_FIXED range. Linux: vma_expandable().
    fn vma_expandable(&self, pid: Pid, vma: &Vma, delta: u64) -> bool {
        let Some(end) = vma.end.checked_add(delta) else {
            return false;
        };
        if self.procs[&pid].vmas.intersects(vma.end, end) {
            return false;
        }
        self.get_unmapped_area(pid, vma.start, end - vma.start, MapFlags::FIXED)
            .is_ok()
    }

    /// §4.1–§4.3: a move with FIXED and/or DONTUNMAP. Linux: mremap_to().
    fn mremap_to(&mut self, pid: Pid, vrm: &mut Vrm) -> Result<u64, Errno> {
        if vrm.flags.contains(MremapFlags::FIXED) {
            // §4.1.1: the destination is unmapped first; this stays done
            // whatever fails later. check_mremap_params() has checked
            // what munmap's entry checks (do_vmi_munmap()) would: a
            // page-aligned new_addr with new_len (aligned, non-zero)
            // fitting below TASK_SIZE — so the unmap itself, without the
            // process looked up again for them (a multi-VMA piece's
            // destination lies inside the checked one; asked anyway).
            let (a, len) = (vrm.new_addr, vrm.new_len);
            if a.is_multiple_of(PAGE_SIZE)
                && len.is_multiple_of(PAGE_SIZE)
                && len != 0
                && len <= TASK_SIZE
                && a <= TASK_SIZE - len
            {
                self.do_munmap(pid, a, a + len)?;
            } else {
                self.munmap_inner(pid, a, len)?;
            }
            if self.procs[&pid].vmas.find(vrm.addr).is_none() {
                rule!(self.phys.hw, MremapFixedUnmappedSource);
                return Err(Errno::EFAULT);
            }
        }
        if vrm.remap_type == RemapType::Shrink {
            // §4.1.3: shrink_vma() without dropping the lock, also permanent.
            self.munmap_inner(pid, vrm.addr + vrm.new_len, vrm.delta)?;
            if self.procs[&pid].vmas.find(vrm.addr).is_none() {
                return Err(Errno::EFAULT);
            }
            vrm.old_len = vrm.new_len;
        }
        // §4.2: DONTUNMAP keeps the source, so the whole length is new
        // address space (RLIMIT_AS; checked after the FIXED unmap, which
        // stays done: §11 #30).
        if vrm.flags.contains(MremapFlags::DONTUNMAP) {
            let mm = &self.procs[&pid];
            let flags = mm.vmas.find(vrm.addr).expect("source VMA").flags;
            if !mm.may_expand_vm(flags, vrm.old_len / PAGE_SIZE) {
                rule!(self.phys.hw, MremapDontunmapRlimitAs);
                return Err(Errno::ENOMEM);
            }
        }
        self.vrm_set_new_addr(pid, vrm)?;
        self.move_vma(pid, vrm)
    }

    /// §4.3/§3.3.3: FIXED takes `new_addr` as is; DONTUNMAP alone takes it
    /// as a hint; otherwise a top-down search (2 MiB-aligned for a 2 MiB
    /// multiple; the pgoff passed is ignored for anonymous memory).
    /// Linux: vrm_set_new_addr() → get_unmapped_area().
    fn vrm_set_new_addr(&self, pid: Pid, vrm: &mut Vrm) -> Result<(), Errno> {
        let hint = if vrm.implies_new_addr() {
            vrm.new_addr
        } else {
            0
        };
        let map_flags = if vrm.flags.contains(MremapFlags::FIXED) {
            MapFlags::FIXED
        } else {
            MapFlags::empty()
        };
        vrm.new_addr = self.get_unmapped_area(pid, hint, vrm.new_len, map_flags)?;
        Ok(())
    }

    /// §4.4–§4.12: copy the VMA, move the page tables, then unmap the
    /// source (or, with DONTUNMAP, leave it empty). Linux: move_vma().
    fn move_vma(&mut self, pid: Pid, vrm: &mut Vrm) -> Result<u64, Errno> {
        let before = self.cfg.before;
        let max = self.cfg.max_map_count as i64;
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // §4.4 prep_move_vma(): room for copy + split (6.18's check).
        if mm.map_count() as i64 >= max - 3 {
            rule!(phys.hw, MremapMapCountMove);
            return Err(Errno::ENOMEM);
        }
        // §4.5 vrm_calc_charge(): the model has no overcommit limit.
        // §4.6 copy_vma_and_data().
        let (need_rmap_locks, copied) = copy_vma(mm, vrm.addr, vrm.new_addr, vrm.new_len)?;
        // The VMA work of the move: copy_vma(), vrm_calc_charge() and the
        // source's do_vmi_munmap() below (which count no event of their
        // own). Linux: mm/mremap.c move_vma().
        mm.pt.hw.one(HwEvent::MremapVma);
        // The source may have been merged into the new VMA (an unfaulted
        // VMA moved next to itself): follow whatever VMA holds it now.
        // Without a merge copy_vma() hands back both as they now are.
        let (old_vma, new_vma) = match copied {
            Some(both) => both,
            None => (
                mm.vmas.find(vrm.addr).cloned().expect("source VMA"),
                mm.vmas.find(vrm.new_addr).cloned().expect("new VMA"),
            ),
        };
        let pmc = PageTableMove {
            old: old_vma,
            new: new_vma,
            old_addr: vrm.addr,
            new_addr: vrm.new_addr,
            len: vrm.old_len,
            stretch: self.cfg.stretch_steps,
            fold_first: self.cfg.stretch_steps && self.cfg.move_first_folded,
            tables_known: self.cfg.move_tables_known,
            lone_run: self.cfg.move_lone_run,
            cont_lone: self.cfg.move_cont_lone,
            need_rmap_locks,
        };
        let moved = move_page_tables(mm, phys, &pmc, before);
        let failed = moved < vrm.old_len;
        if failed {
            // §4.7: a destination table could not be allocated. Move what
            // moved back (the tables exist, so this succeeds), then unmap
            // the destination instead of the source.
            rule!(mm.pt.hw, MremapMoveFailedRevert);
            let revert = PageTableMove {
                old: pmc.new.clone(),
                new: pmc.old.clone(),
                old_addr: vrm.new_addr,
                new_addr: vrm.addr,
                len: moved,
                stretch: self.cfg.stretch_steps,
                fold_first: self.cfg.stretch_steps && self.cfg.move_first_folded,
                tables_known: self.cfg.move_tables_known,
                lone_run: self.cfg.move_lone_run,
                cont_lone: self.cfg.move_cont_lone,
                // copy_vma_and_data(): pmc_revert.need_rmap_locks = true.
                need_rmap_locks: true,
            };
            move_page_tables(mm, phys, &revert, before);
            vrm.addr = vrm.new_addr;
            vrm.old_len = vrm.new_len;
        } else {
            // §4.8 mremap_userfaultfd_prep(): without EVENT_REMAP (which the
            // model's userfaultfd refuses) the new VMA loses its
            // registration: userfaultfd_reset_ctx().
            // (Nothing to drop from a new VMA without either.)
            if pmc.new.flags.intersects(VM_UFFD_FLAGS) || pmc.new.uffd_ctx.is_some() {
                let v = mm.vmas.find_mut(vrm.new_addr).expect("new VMA");
                v.flags -= VM_UFFD_FLAGS;
                v.uffd_ctx = None;
            }
        }
        if !failed && vrm.flags.contains(MremapFlags::DONTUNMAP) {
            rule!(mm.pt.hw, MremapDontunmapComplete);
            dontunmap_complete(mm, vrm);
        } else {
            // §4.9 unmap_source_vma(): VM_ACCOUNT is hidden during the unmap
            // and restored on the remnants, which leaves the flags as they
            // were. The unmap cannot fail here (prep_move_vma() kept 3 maps
            // of headroom); the kernel would ignore a failure.
            // A source the move left none (one VMA over none entries of
            // one PTE table) is unmapped without the gather's searches and
            // the zap's walk, with the same counts (the model's switch).
            let (start, end) = (vrm.addr, vrm.addr + vrm.old_len);
            let known = self.cfg.move_source_known
                && !failed
                && crate::sys::mmap::unmap_known_none(mm, phys, start, end);
            if !known {
                let _ = self.do_munmap(pid, start, end);
            }
        }
        if failed {
            Err(Errno::ENOMEM)
        } else {
            Ok(vrm.new_addr)
        }
    }

    /// §6: FIXED with `old_len == new_len` moves every VMA piece in the
    /// range, keeping the gaps between them. Pieces already moved stay
    /// moved when a later one fails. Linux: remap_move().
    fn remap_move(&mut self, pid: Pid, vrm: &mut Vrm) -> Result<u64, Errno> {
        let start = vrm.addr;
        // An end past 2^64 finds no VMA in the kernel's walk.
        let Some(end) = start.checked_add(vrm.old_len) else {
            rule!(self.phys.hw, MremapMultiEndWraps);
            return Err(Errno::EFAULT);
        };
        let mut target = vrm.new_addr;
        let mut res = Err(Errno::EFAULT);
        let mut last_end = 0;
        let mut seen = false;
        let mut cursor = start;
        while cursor < end {
            // (The process looked up once for the VMA and its checks.)
            let mm = &self.procs[&pid];
            let Some(vma) = mm.vmas.find_vma(cursor).filter(|v| v.start < end).cloned() else {
                break;
            };
            // §6.2: no gap at the start of the range.
            if !seen && start < vma.start {
                rule!(self.phys.hw, MremapMultiGapAtStart);
                return Err(Errno::EFAULT);
            }
            let addr = vma.start.max(start);
            let len = end.min(vma.end) - addr;
            let offset = if seen { vma.start - last_end } else { 0 };
            last_end = vma.end;
            vrm.addr = addr;
            vrm.new_addr = target + offset;
            vrm.old_len = len;
            vrm.new_len = len;
            // §6.4 vma_multi_allowed(): a uffd-armed VMA only alone.
            if uffd_armed(&vma) && (seen || vma.end < end) {
                rule!(self.phys.hw, MremapMultiUffdArmed);
                return Err(Errno::EFAULT);
            }
            check_prep_vma(mm, vrm, Some(&vma))?;
            let res_vma = self.mremap_to(pid, vrm)?;
            rule!(self.phys.hw, MremapMultiPiece);
            if !seen {
                res = Ok(res_vma);
                vrm.moved_to = res_vma;
            }
            vrm.moved_prefix = addr + len - start;
            seen = true;
            target = res_vma + vrm.new_len;
            // The walk resumes after the VMA as it was found.
            cursor = last_end;
        }
        res
    }

    /// mm_populate() for an mlock()ed mapping that grew: write faults for
    /// private writable VMAs, read faults otherwise; VM_LOCKONFAULT and
    /// inaccessible VMAs are skipped, errors ignored.
    /// Linux: mm/gup.c __mm_populate() → populate_vma_page_range().
    fn mm_populate(&mut self, pid: Pid, start: u64, len: u64) {
        let end = start + len;
        let mut addr = start;
        while addr < end {
            let Some(v) = self.procs[&pid].vmas.find_vma(addr).cloned() else {
                return;
            };
            if v.start >= end {
                return;
            }
            let (s, e) = (addr.max(v.start), end.min(v.end));
            let skip = v
                .flags
                .intersects(VmFlags::IO | VmFlags::PFNMAP | VmFlags::LOCKONFAULT);
            if !skip {
                if v.flags.intersects(VM_ACCESS_FLAGS) {
                    let write =
                        v.flags.contains(VmFlags::WRITE) && !v.flags.contains(VmFlags::SHARED);
                    for page in crate::mm::mm::pages(s, e) {
                        if self.fault(pid, page, write).is_err() {
                            break;
                        }
                    }
                }
                // populate_vma_page_range() ends with lru_add_drain(), even
                // when the VMA has no access and __get_user_pages() fails.
                self.phys.folio_batches.drain();
            }
            addr = e;
        }
    }
}

/// §2.12: the checks made once the VMA at `vrm.addr` is known.
/// Linux: check_prep_vma().
fn check_prep_vma(mm: &crate::mm::mm::Mm, vrm: &mut Vrm, vma: Option<&Vma>) -> Result<(), Errno> {
    let Some(vma) = vma else {
        rule!(mm.pt.hw, MremapNoVma);
        return Err(Errno::EFAULT);
    };
    if vma.flags.contains(VmFlags::SEALED) {
        rule!(mm.pt.hw, MremapSealed);
        return Err(Errno::EPERM);
    }
    vrm.set_delta();
    if !vrm.implies_new_addr() {
        vrm.new_addr = vrm.addr;
    }
    // §2.12.3: a same-size call or a shrink without a new address stops
    // here (it may name a range longer than the VMA).
    if vrm.remap_type != RemapType::Expand && !vrm.implies_new_addr() {
        return Ok(());
    }
    // §2.12.4: "duplicating" a private mapping (kernel: pr_warn_once).
    if vrm.old_len == 0 && !vma.flags.intersects(VmFlags::SHARED | VmFlags::MAYSHARE) {
        rule!(mm.pt.hw, MremapDuplicatePrivate);
        return Err(Errno::EINVAL);
    }
    if vrm.flags.contains(MremapFlags::DONTUNMAP)
        && vma.flags.intersects(VmFlags::DONTEXPAND | VmFlags::PFNMAP)
    {
        return Err(Errno::EINVAL);
    }
    // §2.12.6: a shrink may cross VMA boundaries in the part it unmaps.
    let eff = if vrm.remap_type == RemapType::Shrink {
        vrm.new_len
    } else {
        vrm.old_len
    };
    if eff > vma.end - vrm.addr {
        rule!(mm.pt.hw, MremapRangeBeyondVma);
        return Err(Errno::EFAULT);
    }
    if vrm.new_len == eff {
        return Ok(());
    }
    // §2.12.8: growing.
    if vma.flags.contains(VmFlags::LOCKED) {
        rule!(mm.pt.hw, MremapGrowLocked);
        vrm.populate_expand = true;
    }
    let pgoff = vma.pgoff_at(vrm.addr);
    if pgoff.checked_add(vrm.new_len >> 12).is_none() {
        return Err(Errno::EINVAL);
    }
    if vma.flags.intersects(VmFlags::DONTEXPAND | VmFlags::PFNMAP) {
        return Err(Errno::EFAULT);
    }
    // §2.12.8: RLIMIT_MEMLOCK for a VM_LOCKED VMA without CAP_IPC_LOCK,
    // then RLIMIT_AS (and RLIMIT_DATA for a data mapping) for the growth.
    if !mm.mlock_future_ok(vma.flags, vrm.delta) {
        rule!(mm.pt.hw, MremapGrowMemlock);
        return Err(Errno::EAGAIN);
    }
    if !mm.may_expand_vm(vma.flags, vrm.delta / PAGE_SIZE) {
        rule!(mm.pt.hw, MremapGrowRlimitAs);
        return Err(Errno::ENOMEM);
    }
    Ok(())
}

/// §4.6: make the destination VMA: merge with its neighbours if the
/// proposal (the source's flags and anon_vma, `pgoff` as computed here)
/// allows, else a clone of the source. Returns whether the page-table
/// move needs the rmap locks: a merge into a VMA whose pgoff is at or
/// below the source VMA's (rmap's traversal could miss both the old and
/// the new entries otherwise); a new VMA never does.
/// Without a merge, also the source VMA and the new one as they are in the
/// tree (the source untouched, the new one inserted as proposed).
/// Linux: mm/vma.c copy_vma() (`*need_rmap_locks`).
fn copy_vma(
    mm: &mut crate::mm::mm::Mm,
    addr: u64,
    new_addr: u64,
    new_len: u64,
) -> Result<(bool, Option<(Vma, Vma)>), Errno> {
    let vma = mm.vmas.find(addr).cloned().expect("source VMA");
    // An unfaulted anonymous VMA becomes linear at its destination.
    let pgoff = if vma.anon_vma.is_none() {
        new_addr >> 12
    } else {
        vma.pgoff_at(addr)
    };
    let new_end = new_addr + new_len;
    if mm.vmas.intersects(new_addr, new_end) {
        return Err(Errno::ENOMEM); // "should never get here"
    }
    // The proposal carries the source's flags, anon_vma, uffd context and
    // (vma_merge_copied_range()) the copied-from VMA's fork-child state,
    // checked when its anon_vma would go to an unfaulted neighbour. Without
    // a merge it is inserted as is: vm_area_dup() + anon_vma_clone() share
    // the anon_vma chain.
    let new = Vma {
        start: new_addr,
        end: new_end,
        pgoff,
        ..vma
    };
    match mm.merge_new_range(&new) {
        Some(start) => {
            // The source may have been merged into the new VMA (an
            // unfaulted VMA moved next to itself): then it is that VMA.
            let merged = mm.vmas.get(start).map_or(pgoff, |v| v.pgoff);
            let src = mm.vmas.find(addr).map_or(merged, |v| v.pgoff);
            Ok((merged <= src, None))
        }
        None => {
            mm.vmas.insert(new.clone());
            Ok((false, Some((vma, new))))
        }
    }
}

/// §4.10: the source VMA stays, emptied. It loses VM_LOCKED and
/// VM_LOCKONFAULT everywhere; moved whole into another VMA, it also loses
/// its anon_vma (and can then merge like a fresh mapping). 6.18 keeps
/// VM_ACCOUNT. Linux: dontunmap_complete().
fn dontunmap_complete(mm: &mut crate::mm::mm::Mm, vrm: &Vrm) {
    let new_start = mm.vmas.find(vrm.new_addr).map(|v| v.start);
    let src = mm.vmas.find(vrm.addr).map(|v| v.start).expect("source VMA");
    let v = mm.vmas.get_mut(src).expect("source VMA");
    // "Because we won't unmap we don't need to touch locked_vm": the
    // whole source VMA stays charged (crate::mm::rlimit, measured live).
    let stale = if v.flags.contains(VmFlags::LOCKED) {
        v.pages()
    } else {
        0
    };
    v.flags -= VmFlags::LOCKED | VmFlags::LOCKONFAULT;
    if new_start != Some(v.start) && vrm.addr == v.start && vrm.addr + vrm.old_len == v.end {
        // unlink_anon_vmas()
        v.anon_vma = None;
        v.fork_child = false;
    }
    mm.locked_vm_stale += stale;
}

#[cfg(test)]
mod tests {
    //! Rules that need model internals (VM_LOCKED, uffd flags, tiny memory).
    use super::*;
    use crate::core::arch::ArchKind;
    use crate::core::observe::PageState;
    use crate::core::pgtable::PmdSlot;
    use crate::mm::batch::Before;
    use crate::model::ModelConfig;
    use crate::types::uapi::Prot;
    use crate::PMD_SIZE;

    const B: u64 = 0x7f00_0010_0000;
    const P: u64 = 4096;
    const MM: MremapFlags = MremapFlags::MAYMOVE;
    const FIXED: MremapFlags = MremapFlags::MAYMOVE.union(MremapFlags::FIXED);
    const DONTUNMAP: MremapFlags = MremapFlags::MAYMOVE.union(MremapFlags::DONTUNMAP);

    fn model(arch: ArchKind, before: Before) -> Model {
        let mut cfg = ModelConfig::for_arch(arch);
        cfg.before = before;
        Model::new(cfg)
    }

    fn each(f: impl Fn(&mut Model)) {
        for arch in ArchKind::ALL {
            for before in [
                Before::empty(),
                Before::MREMAP_PTE_BATCH,
                Before::MREMAP_TABLE_MOVE,
                Before::MREMAP_PTE_BATCH | Before::MREMAP_TABLE_MOVE,
            ] {
                let mut m = model(arch, before);
                f(&mut m);
                if let Err(e) = m.check_invariants() {
                    panic!("{arch:?} {before:?}: {e:#?}");
                }
            }
        }
    }

    fn map(m: &mut Model, addr: u64, len: u64) {
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, addr, len, Prot::READ | Prot::WRITE, f).unwrap();
    }

    fn map_ro(m: &mut Model, addr: u64, len: u64) {
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, addr, len, Prot::READ, f).unwrap();
    }

    fn write(m: &mut Model, addr: u64, len: u64) {
        m.access_range(1, addr, len, true, None).unwrap();
    }

    fn vma(m: &Model, addr: u64) -> Vma {
        m.procs[&1].vmas.find(addr).cloned().expect("vma")
    }

    fn set_flags(m: &mut Model, addr: u64, f: VmFlags) {
        let s = vma(m, addr).start;
        m.procs.get_mut(&1).unwrap().vmas.get_mut(s).unwrap().flags |= f;
    }

    fn ranges(m: &Model) -> Vec<(u64, u64)> {
        m.procs[&1].vmas.iter().map(|v| (v.start, v.end)).collect()
    }

    fn present(m: &Model, addr: u64) -> bool {
        m.observe_pages(1, addr, addr + P)
            .first()
            .is_some_and(|p| matches!(p.state, PageState::Anon(_)))
    }

    #[test]
    fn undefined_flags_and_missing_process_are_einval() {
        each(|m| {
            map(m, B, 8 * P);
            let bad = MremapFlags::from_bits_retain(8);
            assert_eq!(m.mremap(1, B, P, P, bad, 0), Err(Errno::EINVAL));
            let bad = MremapFlags::from_bits_retain(8 | 1);
            assert_eq!(m.mremap(1, B, P, 2 * P, bad, 0), Err(Errno::EINVAL));
            assert_eq!(m.mremap(9, B, P, P, MM, 0), Err(Errno::EINVAL));
            // A length near 2^64 wraps to 0 when page-aligned.
            assert_eq!(m.mremap(1, B, P, u64::MAX - 10, MM, 0), Err(Errno::EINVAL));
            // new_addr is ignored without FIXED/DONTUNMAP, even if garbage.
            assert_eq!(m.mremap(1, B, P, P, MM, 12345), Ok(B));
            assert_eq!(ranges(m), vec![(B, B + 8 * P)]);
        });
    }

    #[test]
    fn extreme_arguments_never_panic() {
        // Boundary values for every argument: errors, never a panic.
        let vals = [
            0,
            P,
            B,
            TASK_SIZE - P,
            TASK_SIZE,
            TASK_SIZE + P,
            u64::MAX - 4095,
            u64::MAX,
        ];
        let mut m = model(ArchKind::X86_64, Before::empty());
        for &addr in &vals {
            for &old_len in &vals {
                for &new_len in &vals {
                    for &new_addr in &vals {
                        for flags in [1u64, 3, 5, 7, 8] {
                            map(&mut m, B, 8 * P);
                            write(&mut m, B, P);
                            let f = MremapFlags::from_bits_retain(flags);
                            let _ = m.mremap(1, addr, old_len, new_len, f, new_addr);
                        }
                    }
                }
            }
        }
        m.check_invariants().unwrap();
    }

    #[test]
    fn errno_order_einval_before_enomem_before_efault() {
        each(|m| {
            m.cfg.max_map_count = 8;
            for i in 0..4 {
                map(m, B + i * 2 * P, P);
            }
            // Overlap (EINVAL) is checked before the map count (ENOMEM).
            assert_eq!(m.mremap(1, B, P, P, FIXED, B), Err(Errno::EINVAL));
            // map_count 4 >= max - 5 = 3: ENOMEM before the VMA lookup (EFAULT).
            assert_eq!(
                m.mremap(1, B + P, P, P, FIXED, B + 64 * P),
                Err(Errno::ENOMEM)
            );
            // Without FIXED/DONTUNMAP the map count is not checked there.
            assert_eq!(m.mremap(1, B + P, P, 2 * P, MM, 0), Err(Errno::EFAULT));
        });
    }

    #[test]
    fn map_count_limits_29() {
        // §11 #29 with max_map_count = 20: 1-page filler VMAs far away bring
        // map_count to the value wanted.
        fn set_count(m: &mut Model, n: usize) {
            let far = B + 0x100_0000;
            while m.procs[&1].map_count() > n {
                let last = m.procs[&1].vmas.iter().last().unwrap().start;
                assert!(last >= far, "only fillers are removed");
                m.munmap(1, last, P).unwrap();
            }
            let mut i = 0;
            while m.procs[&1].map_count() < n {
                if m.procs[&1].vmas.find(far + i * 2 * P).is_none() {
                    map(m, far + i * 2 * P, P);
                }
                i += 1;
            }
        }
        each(|m| {
            m.cfg.max_map_count = 20;
            map(m, B, 4 * P);
            // A FIXED move at max - 5 fails early, at max - 6 it works.
            set_count(m, 15);
            assert_eq!(
                m.mremap(1, B, 4 * P, 4 * P, FIXED, B + 64 * P),
                Err(Errno::ENOMEM)
            );
            set_count(m, 14);
            assert_eq!(
                m.mremap(1, B, 4 * P, 4 * P, FIXED, B + 64 * P),
                Ok(B + 64 * P)
            );
            // Blocked in place, an expansion that must move fails at max - 3
            // (move_vma()) and works at max - 4.
            map_ro(m, B + 68 * P, P);
            set_count(m, 17);
            assert_eq!(
                m.mremap(1, B + 64 * P, 4 * P, 8 * P, MM, 0),
                Err(Errno::ENOMEM)
            );
            assert_eq!(vma(m, B + 64 * P).end, B + 68 * P, "nothing changed");
            // An in-place expansion still works at max - 1.
            m.munmap(1, B + 68 * P, P).unwrap();
            set_count(m, 19);
            assert_eq!(m.mremap(1, B + 64 * P, 4 * P, 8 * P, MM, 0), Ok(B + 64 * P));
            assert_eq!(vma(m, B + 64 * P).end, B + 72 * P);
            set_count(m, 15);
            map_ro(m, B + 72 * P, P);
            assert_eq!(m.procs[&1].map_count(), 16);
            let n = m.mremap(1, B + 64 * P, 8 * P, 12 * P, MM, 0).unwrap();
            assert_ne!(n, B + 64 * P);
        });
    }

    #[test]
    fn dontunmap_mlocked_23() {
        // §11 #23: the source keeps its range, loses VM_LOCKED, keeps
        // VM_ACCOUNT, reads zero; the destination has VM_LOCKED and the same
        // frames.
        each(|m| {
            map(m, B, 4 * P);
            write(m, B, 4 * P);
            set_flags(m, B, VmFlags::LOCKED);
            let frames = m.observe_pages(1, B, B + 4 * P);
            let n = m.mremap(1, B, 4 * P, 4 * P, DONTUNMAP, 0).unwrap();
            assert_ne!(n, B);
            let src = vma(m, B);
            assert_eq!((src.start, src.end), (B, B + 4 * P));
            assert!(!src.flags.contains(VmFlags::LOCKED));
            assert!(src.flags.contains(VmFlags::ACCOUNT));
            assert_eq!(src.anon_vma, None, "moved whole: anon_vma detached");
            let dst = vma(m, n);
            assert!(dst.flags.contains(VmFlags::LOCKED));
            assert!(!present(m, B));
            assert_eq!(m.read(1, B).unwrap(), 0);
            let moved = m.observe_pages(1, n, n + 4 * P);
            for (a, b) in frames.iter().zip(&moved) {
                assert_eq!(a.state, b.state, "same frame, same state");
            }
        });
    }

    #[test]
    fn dontunmap_part_of_mlocked_24() {
        // §11 #24: VM_LOCKED is cleared on the whole source VMA.
        each(|m| {
            map(m, B, 8 * P);
            write(m, B, 8 * P);
            set_flags(m, B, VmFlags::LOCKED);
            let n = m.mremap(1, B + 6 * P, 2 * P, 2 * P, DONTUNMAP, 0).unwrap();
            let src = vma(m, B);
            assert_eq!((src.start, src.end), (B, B + 8 * P));
            assert!(!src.flags.contains(VmFlags::LOCKED));
            assert!(src.anon_vma.is_some(), "a partial move keeps the anon_vma");
            assert!((0..6).all(|i| present(m, B + i * P)));
            assert!(!present(m, B + 6 * P) && !present(m, B + 7 * P));
            assert!(vma(m, n).flags.contains(VmFlags::LOCKED));
        });
    }

    #[test]
    fn mlocked_growth_is_populated() {
        each(|m| {
            // In place: the new tail is faulted in (written: private RW).
            map(m, B, 4 * P);
            write(m, B, 4 * P);
            set_flags(m, B, VmFlags::LOCKED);
            assert_eq!(m.mremap(1, B, 4 * P, 8 * P, MM, 0), Ok(B));
            assert!((0..8).all(|i| present(m, B + i * P)));
            // Moved: the destination's new part is populated.
            map(m, B + 8 * P, P);
            let n = m.mremap(1, B, 8 * P, 12 * P, MM, 0).unwrap();
            assert_ne!(n, B);
            assert!((0..12).all(|i| present(m, n + i * P)));
            assert_eq!(m.read(1, n + 3 * P).unwrap(), B + 3 * P);
            // VM_LOCKONFAULT: not populated.
            let c = B + 0x40_0000;
            map(m, c, 4 * P);
            set_flags(m, c, VmFlags::LOCKED | VmFlags::LOCKONFAULT);
            assert_eq!(m.mremap(1, c, 4 * P, 8 * P, MM, 0), Ok(c));
            assert!(!present(m, c + 5 * P));
        });
    }

    fn uffd_register(m: &mut Model, addr: u64, len: u64, mode: u64) {
        let id = m.uffd_open(1).unwrap();
        m.uffd_api(id, crate::sys::uffd::UFFD_API, 0).unwrap();
        m.uffd_register(id, addr, len, mode).unwrap();
    }

    #[test]
    fn uffd_registration_refuses_table_moves_and_is_dropped() {
        // §4.8, §9.5 (6.17): uffd without EVENT_REMAP on the source refuses
        // whole-table moves (the PTEs move one by one, uffd-wp cleared) and
        // the destination VMA loses its registration.
        for arch in ArchKind::ALL {
            let mut m = model(arch, Before::empty());
            let a = 0x7f00_4000_0000;
            map(&mut m, a, PMD_SIZE);
            m.madvise(1, a, PMD_SIZE, crate::Advice::NoHugePage)
                .unwrap();
            write(&mut m, a, PMD_SIZE);
            let PmdSlot::Table(t) = m.procs[&1].pt.pmd(a) else {
                panic!("PTE-mapped")
            };
            uffd_register(&mut m, a, PMD_SIZE, 2); // WP
            assert!(vma(&m, a).uffd_ctx().is_some());
            let n = a + 0x400_0000;
            assert_eq!(m.mremap(1, a, PMD_SIZE, PMD_SIZE, FIXED, n), Ok(n));
            let PmdSlot::Table(t2) = m.procs[&1].pt.pmd(n) else {
                panic!("PTE-mapped")
            };
            assert_ne!(t, t2, "refused: the PTEs moved into a new table");
            assert!(!vma(&m, n).flags.intersects(VM_UFFD_FLAGS));
            assert!(vma(&m, n).uffd_ctx().is_none());
            m.check_invariants().unwrap();
            // §6.4: a uffd-armed VMA takes part in a multi-VMA move only alone.
            map(&mut m, B, P);
            map_ro(&mut m, B + 2 * P, P);
            uffd_register(&mut m, B + 2 * P, P, 1); // MISSING
            assert_eq!(
                m.mremap(1, B, 3 * P, 3 * P, FIXED, B + 64 * P),
                Err(Errno::EFAULT)
            );
            // The first piece moved before the refusal (a partial move).
            assert_eq!(ranges(&m)[0], (B + 2 * P, B + 3 * P));
            assert!(m.procs[&1].vmas.find(B + 64 * P).is_some());
            // First, with the range going on past it: EFAULT, nothing moved.
            assert_eq!(
                m.mremap(1, B + 2 * P, 2 * P, 2 * P, FIXED, B + 128 * P),
                Err(Errno::EFAULT)
            );
            assert!(m.procs[&1].vmas.find(B + 2 * P).is_some());
            // Alone, it moves (and loses its registration).
            assert_eq!(
                m.mremap(1, B + 2 * P, P, P, FIXED, B + 128 * P),
                Ok(B + 128 * P)
            );
            assert!(vma(&m, B + 128 * P).uffd_ctx().is_none());
            m.check_invariants().unwrap();
        }
    }

    #[test]
    fn uffd_wp_bits_are_cleared_on_the_move() {
        // §9.5.5: the old VMA has uffd without EVENT_REMAP, so moved PTEs
        // lose their uffd-wp bit (and the destination is not registered).
        for arch in ArchKind::ALL {
            for before in [Before::empty(), Before::MREMAP_PTE_BATCH] {
                let mut m = model(arch, before);
                map(&mut m, B, 4 * P);
                let id = m.uffd_open(1).unwrap();
                m.uffd_api(id, crate::sys::uffd::UFFD_API, 0).unwrap();
                m.uffd_register(id, B, 4 * P, 3).unwrap(); // MISSING | WP
                let src = crate::sys::uffd::CopySource::Tag(5);
                m.uffd_copy(1, id, B, src, 4 * P, 2).unwrap(); // MODE_WP
                let wp = |m: &Model, va: u64| match m.procs[&1].pt.pte_raw(va) {
                    crate::core::arch::Entry::Leaf(l) => {
                        l.flags.contains(crate::core::arch::LeafFlags::UFFD_WP)
                    }
                    e => panic!("{e:?}"),
                };
                assert!(wp(&m, B));
                let n = B + 64 * P;
                assert_eq!(m.mremap(1, B, 4 * P, 4 * P, FIXED, n), Ok(n));
                assert!((0..4).all(|i| !wp(&m, n + i * P)));
                assert_eq!(m.read(1, n + P).unwrap(), 5);
                m.check_invariants().unwrap();
            }
        }
    }

    #[test]
    fn failed_table_allocation_moves_back_and_unmaps_destination() {
        // §4.7: with no memory left for the destination's page tables the
        // call fails with ENOMEM, the source is intact and the destination
        // VMA is gone.
        for arch in ArchKind::ALL {
            let mut cfg = ModelConfig::for_arch(arch);
            cfg.frames = 1024;
            let mut m = Model::new(cfg);
            map(&mut m, B, 2048 * P);
            let mut filled = 0;
            while m.write(1, B + filled * P, 7).is_ok() {
                filled += 1;
            }
            assert!(filled > 8);
            let far = 0x7e00_0000_0000; // needs new PUD, PMD and PTE tables
            assert_eq!(m.mremap(1, B, 8 * P, 8 * P, FIXED, far), Err(Errno::ENOMEM));
            assert!(m.procs[&1].vmas.find(far).is_none());
            assert_eq!(ranges(&m), vec![(B, B + 2048 * P)]);
            assert!((0..8).all(|i| present(&m, B + i * P)));
            m.check_invariants().unwrap();
        }
    }

    #[test]
    fn partial_move_is_moved_back() {
        // §4.7 with a partial move: the first 4 pages land in a PMD slot
        // whose PTE table exists, the next 4 need a new table, which cannot
        // be allocated: the 4 moved pages go back.
        for arch in ArchKind::ALL {
            for before in [Before::empty(), Before::MREMAP_PTE_BATCH] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.frames = 1024;
                cfg.before = before;
                let mut m = Model::new(cfg);
                let d0 = 0x7f00_4000_0000;
                map(&mut m, d0, P);
                write(&mut m, d0, P);
                let src = 0x7f00_8000_0000 + PMD_SIZE - 4 * P;
                map(&mut m, src, 8 * P);
                write(&mut m, src, 8 * P);
                let filler = 0x7f00_c000_0000;
                map(&mut m, filler, 2048 * P);
                let mut i = 0;
                while m.write(1, filler + i * P, 7).is_ok() {
                    i += 1;
                }
                let dst = d0 + PMD_SIZE - 4 * P;
                assert_eq!(
                    m.mremap(1, src, 8 * P, 8 * P, FIXED, dst),
                    Err(Errno::ENOMEM)
                );
                assert!(m.procs[&1].vmas.find(dst).is_none());
                for k in 0..8 {
                    assert_eq!(m.read(1, src + k * P).unwrap(), src + k * P);
                }
                assert_eq!(m.read(1, d0).unwrap(), d0);
                m.check_invariants().unwrap();
            }
        }
    }

    #[test]
    fn pud_table_move_carries_deposited_tables() {
        // §9.4.4: a 1 GiB-aligned move of a 1 GiB range re-points the PUD
        // entry at the same PMD table; PMD THPs inside keep their deposited
        // tables. Without table moves, THPs move one PMD at a time.
        for arch in ArchKind::ALL {
            for before in [Before::empty(), Before::MREMAP_TABLE_MOVE] {
                let mut m = model(arch, before);
                let g = 0x7e00_0000_0000;
                let dst = 0x7e80_0000_0000;
                map(&mut m, g, 1 << 30);
                m.set_thp(crate::ThpKnob::TopLevel, crate::ThpMode::Always)
                    .unwrap();
                write(&mut m, g + 0x40_0000, P); // a PMD THP
                write(&mut m, g + 0x80_0000, P); // another, split into a PTE table
                m.madvise(1, g + 0x80_1000, P, crate::Advice::DontNeed)
                    .unwrap();
                assert!(matches!(
                    m.procs[&1].pt.pmd(g + 0x80_0000),
                    PmdSlot::Table(_)
                ));
                let pmd_table = m.procs[&1].pt.table_at(g, 2).unwrap();
                let n = m.mremap(1, g, 1 << 30, 1 << 30, FIXED, dst);
                assert_eq!(n, Ok(dst));
                let moved_table = m.procs[&1].pt.table_at(dst, 2).unwrap();
                assert_eq!(
                    pmd_table == moved_table,
                    before.is_empty(),
                    "{arch:?} {before:?}"
                );
                assert!(matches!(
                    m.procs[&1].pt.pmd(dst + 0x40_0000),
                    PmdSlot::Leaf(_)
                ));
                assert_eq!(m.read(1, dst + 0x80_0000).unwrap(), g + 0x80_0000);
                assert_eq!(m.observe(1, "m").maps.len(), 1);
                m.check_invariants().unwrap();
            }
        }
    }
}
