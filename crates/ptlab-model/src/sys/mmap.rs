//! mmap(2) and munmap(2) of private anonymous memory: the entry checks in
//! the kernel's order, placement (`get_unmapped_area`), `mmap_region` with
//! MAP_FIXED replacement, merging and MAP_POPULATE, and munmap's gather,
//! split, zap and page-table freeing.
//!
//! Linux: mm/mmap.c do_mmap(), __get_unmapped_area(), mm/vma.c
//! mmap_region(), do_vmi_munmap(), vms_gather_munmap_vmas(),
//! vms_complete_munmap_vmas().

use crate::core::addr::{page_align, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::core::folio::PhysMem;
use crate::core::rules::rule;
use crate::core::tlb::MmuGather;
use crate::core::vma::{VmFlags, Vma};
use crate::mm::mm::Mm;
use crate::mm::zap::{free_pgtables, split_huge_pmd};
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::uapi::{MapFlags, Prot};
use crate::types::Pid;

/// `MAP_*` bits (x86-64 values) the model does not implement for private
/// anonymous memory: MAP_32BIT (0x40) and MAP_ABOVE4G (0x80) change the
/// placement, MAP_GROWSDOWN (0x100) makes a stack VMA (`gd`), MAP_HUGETLB
/// (0x40000) a hugetlbfs mapping, MAP_SYNC (0x80000) sets VM_SYNC (`sf`,
/// checked live on 6.18: also without MAP_SHARED_VALIDATE). mmap with one
/// of them is ENOSYS in the model, before any other check.
pub const MAP_UNMODELLED: u32 = 0x40 | 0x80 | 0x100 | 0x40000 | 0x80000;
/// MAP_NONBLOCK: MAP_POPULATE does not populate.
const MAP_NONBLOCK: u32 = 0x10000;
/// MAP_STACK: VM_NOHUGEPAGE (calc_vm_flag_bits(), since 6.7).
const MAP_STACK: u32 = 0x20000;
/// The MAP_TYPE bits and MAP_DROPPABLE, a type of its own.
const MAP_TYPE: u32 = 0x0f;
const MAP_DROPPABLE: u32 = 0x08;

impl Model {
    /// Whether the model implements mmap with `flags`: MAP_PRIVATE (or an
    /// invalid type, EINVAL as in the kernel) without a
    /// [`MAP_UNMODELLED`] bit. MAP_SHARED (shmem) and MAP_DROPPABLE are
    /// answered ENOSYS.
    pub fn supports_mmap_flags(flags: MapFlags) -> bool {
        let ty = flags.bits() & MAP_TYPE;
        flags.bits() & MAP_UNMODELLED == 0 && ty != 0x01 && ty != MAP_DROPPABLE
    }

    // ---- mmap -------------------------------------------------------------

    /// mmap(2) of private anonymous memory.
    /// Linux: mm/mmap.c do_mmap(), __get_unmapped_area(); mm/vma.c mmap_region().
    pub fn mmap(
        &mut self,
        pid: Pid,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        // The process looked up once for the checks and the placement
        // below (issue 14, sixteenth session: it was looked up for each).
        let Some(mm) = self.procs.get(&pid) else {
            return Err(Errno::EINVAL);
        };
        mm.count_syscall();
        // ksys_mmap_pgoff(): without MAP_ANONYMOUS the fd (-1) is looked up.
        if !flags.contains(MapFlags::ANONYMOUS) {
            rule!(self.phys.hw, MmapNotAnonymous);
            return Err(Errno::EBADF);
        }
        if flags.bits() & MAP_UNMODELLED != 0 {
            return Err(Errno::ENOSYS);
        }
        if len == 0 {
            rule!(self.phys.hw, MmapLenZero);
            return Err(Errno::EINVAL);
        }
        let mut flags = flags;
        if flags.contains(MapFlags::FIXED_NOREPLACE) {
            flags |= MapFlags::FIXED;
        }
        let mut addr = addr;
        if !flags.contains(MapFlags::FIXED) {
            // round_hint_to_min()
            addr &= !(PAGE_SIZE - 1);
            if addr != 0 && addr < self.cfg.mmap_min_addr {
                addr = page_align(self.cfg.mmap_min_addr).unwrap_or(self.cfg.mmap_min_addr);
            }
        }
        let len = page_align(len).ok_or(Errno::ENOMEM)?;
        if mm.map_count() > self.cfg.max_map_count {
            rule!(self.phys.hw, MmapMapCount);
            return Err(Errno::ENOMEM);
        }
        let addr = self.get_unmapped_area_in(mm, addr, len, flags)?;
        if flags.contains(MapFlags::FIXED_NOREPLACE) && mm.vmas.intersects(addr, addr + len) {
            rule!(self.phys.hw, MmapFixedNoreplaceExists);
            return Err(Errno::EEXIST);
        }
        // MAP_LOCKED: can_do_mlock() (EPERM), then mlock_future_ok()
        // against RLIMIT_MEMLOCK for the whole length (EAGAIN), before the
        // MAP_TYPE switch.
        if flags.contains(MapFlags::LOCKED) {
            if !mm.can_do_mlock() {
                rule!(self.phys.hw, MmapLockedCannotMlock);
                return Err(Errno::EPERM);
            }
            if !mm.mlock_future_ok(VmFlags::LOCKED, len) {
                rule!(self.phys.hw, MmapLockedMemlock);
                return Err(Errno::EAGAIN);
            }
        }
        // The MAP_TYPE switch of an anonymous mapping (no file): only
        // MAP_PRIVATE is modelled. MAP_SHARED_VALIDATE (0x03) is not a case
        // there: EINVAL (checked live on 6.18, with and without MAP_SYNC).
        match flags.bits() & MAP_TYPE {
            0x02 => {}
            0x01 => return Err(Errno::ENOSYS), // shared anon is shmem: not modelled
            MAP_DROPPABLE => return Err(Errno::ENOSYS), // VM_DROPPABLE: not modelled
            _ => return Err(Errno::EINVAL),
        }
        let mut vm = VmFlags::MAYREAD | VmFlags::MAYWRITE | VmFlags::MAYEXEC;
        if prot.contains(Prot::READ) {
            vm |= VmFlags::READ;
        }
        if prot.contains(Prot::WRITE) {
            vm |= VmFlags::WRITE;
        }
        if prot.contains(Prot::EXEC) {
            vm |= VmFlags::EXEC;
        }
        if flags.contains(MapFlags::NORESERVE) {
            vm |= VmFlags::NORESERVE; // overcommit mode 0 honours it
        }
        if flags.contains(MapFlags::LOCKED) {
            vm |= VmFlags::LOCKED; // calc_vm_flag_bits()
        }
        if flags.bits() & MAP_STACK != 0 {
            vm |= VmFlags::NOHUGEPAGE; // calc_vm_flag_bits() (checked live: `nh`)
        }
        // accountable_mapping(): private writable without NORESERVE.
        if vm.contains(VmFlags::WRITE) && !vm.contains(VmFlags::NORESERVE) {
            vm |= VmFlags::ACCOUNT;
        }
        self.mmap_region(pid, addr, len, vm, flags.contains(MapFlags::FIXED))?;
        // do_mmap() asks for population of a VM_LOCKED mapping too, and of
        // a MAP_POPULATE one unless MAP_NONBLOCK (checked live: Rss 0).
        let populate = flags.contains(MapFlags::POPULATE) && flags.bits() & MAP_NONBLOCK == 0;
        if populate || flags.contains(MapFlags::LOCKED) {
            // mm_populate(): write faults for private writable VMAs, else read.
            let write = vm.contains(VmFlags::WRITE);
            rule!(self.phys.hw, MmapPopulate);
            for a in crate::mm::mm::pages(addr, addr + len) {
                if self.fault(pid, a, write).is_err() {
                    break;
                }
            }
            // populate_vma_page_range() ends with lru_add_drain().
            self.phys.folio_batches.drain();
        }
        Ok(addr)
    }

    /// Linux: mm/mmap.c __get_unmapped_area() and the x86 top-down allocator.
    pub(crate) fn get_unmapped_area(
        &self,
        pid: Pid,
        hint: u64,
        len: u64,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        // A MAP_FIXED address needs no look at the process's VMAs (nor
        // the lookup of the process: mremap's destinations).
        let mm = if flags.contains(MapFlags::FIXED) {
            None
        } else {
            Some(&self.procs[&pid])
        };
        self.get_unmapped_area_of(mm, hint, len, flags)
    }

    /// [`Model::get_unmapped_area`] in the process `mm` (looked up by the
    /// caller).
    fn get_unmapped_area_in(
        &self,
        mm: &Mm,
        hint: u64,
        len: u64,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        self.get_unmapped_area_of(Some(mm), hint, len, flags)
    }

    /// [`Model::get_unmapped_area`]'s work; `mm` may be `None` only
    /// with MAP_FIXED.
    #[inline]
    fn get_unmapped_area_of(
        &self,
        mm: Option<&Mm>,
        hint: u64,
        len: u64,
        flags: MapFlags,
    ) -> Result<u64, Errno> {
        let min = self.cfg.mmap_min_addr.max(PAGE_SIZE);
        if len > TASK_SIZE - self.cfg.mmap_min_addr {
            rule!(self.phys.hw, MmapLenTooBig);
            return Err(Errno::ENOMEM);
        }
        let mm = || mm.expect("the process, for an address not MAP_FIXED");
        let addr = if flags.contains(MapFlags::FIXED) {
            hint
        } else if hint == 0 && len.is_multiple_of(PMD_SIZE) {
            // Linux: mm/mmap.c __get_unmapped_area() takes this path for an
            // anonymous mapping without a hint whose length is a 2 MiB
            // multiple, after setting pgoff to 0 for every anonymous
            // mapping: a moving mremap passes the source's vm_pgoff
            // (vrm_set_new_addr()), but it is dropped here, so mmap and
            // mremap are placed alike (checked live: mr-37, mr-38, mr-40).
            // mm/huge_memory.c __thp_get_unmapped_area() with off = 0: the
            // range [0, len) always holds a whole aligned 2 MiB unit, and
            // len + 2 MiB cannot wrap (len <= TASK_SIZE). It searches
            // len + 2 MiB and moves the result up to the next 2 MiB
            // boundary (off_sub = (0 - ret) & (2M - 1)); top-down, an
            // already aligned result moves up a whole 2 MiB. The `ret ==
            // addr` early return cannot apply (addr is 0). When the padded
            // search fails it returns 0 and thp_get_unmapped_area_vmflags()
            // searches again for len alone, unaligned.
            rule!(self.phys.hw, MmapThpAligned);
            let padded = len
                .checked_add(PMD_SIZE)
                .and_then(|padded| self.topdown_search(mm(), padded, min).ok());
            match padded {
                Some(ret) => {
                    let off_sub = ret.wrapping_neg() & (PMD_SIZE - 1);
                    if off_sub == 0 {
                        ret + PMD_SIZE
                    } else {
                        ret + off_sub
                    }
                }
                None => self.topdown_search(mm(), len, min)?,
            }
        } else {
            let h = page_align(hint).unwrap_or(0);
            let fits =
                h != 0 && TASK_SIZE - len >= h && h >= min && !mm().vmas.intersects(h, h + len);
            if fits {
                h
            } else {
                self.topdown_search(mm(), len, min)?
            }
        };
        if addr > TASK_SIZE - len {
            rule!(self.phys.hw, MmapAddrBeyondTask);
            return Err(Errno::ENOMEM);
        }
        if addr % PAGE_SIZE != 0 {
            return Err(Errno::EINVAL);
        }
        if addr < self.cfg.mmap_min_addr && !self.cfg.cap_sys_rawio {
            rule!(self.phys.hw, MmapBelowMinAddr);
            return Err(Errno::EPERM); // security_mmap_addr()
        }
        Ok(addr)
    }

    /// Highest gap below mmap_base that fits `len`. Linux: vm_unmapped_area() top-down.
    fn topdown_search(&self, mm: &Mm, len: u64, low: u64) -> Result<u64, Errno> {
        let high = self.cfg.mmap_base;
        let mut gap_end = high;
        for v in mm.vmas.iter().rev() {
            if v.start >= gap_end {
                gap_end = gap_end.min(v.start);
                continue;
            }
            if v.end <= gap_end && gap_end - v.end >= len && gap_end - len >= low {
                return Ok(gap_end - len);
            }
            gap_end = gap_end.min(v.start);
        }
        if gap_end >= low && gap_end - low >= len {
            return Ok(gap_end - len);
        }
        Err(Errno::ENOMEM)
    }

    /// Linux: mm/vma.c mmap_region() → __mmap_region(): unmap what MAP_FIXED
    /// replaces, then merge with neighbours (vma_merge_new_range) or insert.
    fn mmap_region(
        &mut self,
        pid: Pid,
        addr: u64,
        len: u64,
        vm: VmFlags,
        fixed: bool,
    ) -> Result<(), Errno> {
        let end = addr + len;
        let mut replaced = 0;
        // One lookup of the process where nothing is replaced (issue 14,
        // sixteenth session); looked up again after a replacement's unmap.
        let mut mm = self.procs.get_mut(&pid).expect("pid");
        if fixed && mm.vmas.intersects(addr, end) {
            // __mmap_setup(): vms_gather_munmap_vmas() splits the VMAs
            // MAP_FIXED replaces before the RLIMIT_AS test, and a failure
            // then leaves the splits in place (vms_abort_munmap_vmas()).
            rule!(self.phys.hw, MmapFixedReplaces);
            self.munmap_gather(pid, addr, end)?;
            mm = self.procs.get_mut(&pid).expect("pid");
            replaced = mm
                .vmas
                .starts_in(addr, end)
                .iter()
                .filter_map(|&s| mm.vmas.get(s))
                .map(|v| v.pages())
                .sum::<u64>();
        }
        if !mm.may_expand_vm(vm, len / PAGE_SIZE - replaced) {
            rule!(self.phys.hw, MmapRlimitAs);
            return Err(Errno::ENOMEM);
        }
        if replaced > 0 {
            self.do_munmap(pid, addr, end)?;
            mm = self.procs.get_mut(&pid).expect("pid");
        }
        // A fresh mapping: linear pgoff, no anon_vma, no uffd context.
        let new = Vma {
            start: addr,
            end,
            flags: vm,
            pgoff: addr >> 12,
            anon_vma: None,
            fork_child: false,
            uffd_ctx: None,
        };
        if mm.merge_new_range(&new).is_none() {
            rule!(mm.pt.hw, MmapNewVma);
            mm.vmas.insert(new);
        }
        Ok(())
    }

    // ---- munmap -----------------------------------------------------------

    /// munmap(2). Linux: mm/vma.c do_vmi_munmap().
    pub fn munmap(&mut self, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        // The process looked up once for the entry count and the unmap
        // (issue 14, sixteenth session).
        let Model {
            procs, phys, cfg, ..
        } = self;
        let Some(mm) = procs.get_mut(&pid) else {
            return Err(Errno::EINVAL);
        };
        mm.count_syscall();
        munmap_checked(mm, phys, cfg.max_map_count, addr, len)
    }

    /// munmap(2)'s work without the syscall entry (mremap's own unmaps).
    pub(crate) fn munmap_inner(&mut self, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        let Model {
            procs, phys, cfg, ..
        } = self;
        let Some(mm) = procs.get_mut(&pid) else {
            return Err(Errno::EINVAL);
        };
        munmap_checked(mm, phys, cfg.max_map_count, addr, len)
    }

    /// Unmap `[start, end)`: split the edge VMAs, zap, free page tables,
    /// remove. Linux: mm/vma.c do_vmi_align_munmap(), vms_gather_munmap_vmas(),
    /// vms_complete_munmap_vmas() → unmap_region().
    pub(crate) fn do_munmap(&mut self, pid: Pid, start: u64, end: u64) -> Result<(), Errno> {
        let Model {
            procs, phys, cfg, ..
        } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        do_munmap_in(mm, phys, cfg.max_map_count, start, end)
    }

    /// The first half of an unmap ([`munmap_gather_in`]) in process `pid`.
    pub(crate) fn munmap_gather(&mut self, pid: Pid, start: u64, end: u64) -> Result<bool, Errno> {
        let Model {
            procs, phys, cfg, ..
        } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        munmap_gather_in(mm, phys, cfg.max_map_count, start, end)
    }
}

/// munmap(2)'s argument checks and unmap in the process `mm` (`max`:
/// `vm.max_map_count`). Linux: mm/vma.c do_vmi_munmap().
fn munmap_checked(
    mm: &mut Mm,
    phys: &mut PhysMem,
    max: usize,
    addr: u64,
    len: u64,
) -> Result<(), Errno> {
    if !addr.is_multiple_of(PAGE_SIZE) || addr > TASK_SIZE || len > TASK_SIZE - addr {
        rule!(phys.hw, MunmapArgsInvalid);
        return Err(Errno::EINVAL);
    }
    let end = addr + page_align(len).ok_or(Errno::EINVAL)?;
    if end == addr {
        rule!(phys.hw, MunmapLenZero);
        return Err(Errno::EINVAL);
    }
    do_munmap_in(mm, phys, max, addr, end)
}

/// [`Model::do_munmap`] in the process `mm`.
/// Linux: mm/vma.c do_vmi_align_munmap().
fn do_munmap_in(
    mm: &mut Mm,
    phys: &mut PhysMem,
    max: usize,
    start: u64,
    end: u64,
) -> Result<(), Errno> {
    if !munmap_gather_in(mm, phys, max, start, end)? {
        return Ok(());
    }
    munmap_gathered_in(mm, phys, start, end);
    Ok(())
}

/// The first half of an unmap: the checks and the splits that make
/// `start` and `end` VMA boundaries. Returns whether any VMA is in the
/// range. The splits stay when a later step fails.
/// Linux: mm/vma.c vms_gather_munmap_vmas().
fn munmap_gather_in(
    mm: &mut Mm,
    phys: &mut PhysMem,
    max: usize,
    start: u64,
    end: u64,
) -> Result<bool, Errno> {
    let Some(first) = mm.vmas.first_in(start, end) else {
        return Ok(false);
    };
    let (first_start, first_end, first_flags) = (first.start, first.end, first.flags);
    if first_start < start && end < first_end && mm.map_count() >= max {
        rule!(phys.hw, MunmapSplitMapCount);
        return Err(Errno::ENOMEM);
    }
    // vms_gather_munmap_vmas(): a sealed first VMA refuses before it is
    // split; a sealed later one after the first split was made.
    if first_start < start && first_flags.contains(VmFlags::SEALED) {
        rule!(phys.hw, MunmapSealedFirst);
        return Err(Errno::EPERM);
    }
    if first_start < start {
        if let Some(slot) = mm.pmd_cut_by(start) {
            rule!(phys.hw, MunmapSplitHugePmdStart);
            split_huge_pmd(mm, phys, slot);
        }
        mm.vmas.split_at(start);
    }
    // When the first VMA reaches `end` it is the only one in the range
    // (VMAs do not overlap): its flags answer the sealed check and its
    // end the last VMA's, without two more searches (issue 14: every
    // munmap of one whole VMA, and mremap's unmap of its old range).
    let only_first = end > start && first_end >= end;
    let sealed = if only_first {
        first_flags.contains(VmFlags::SEALED)
    } else {
        mm.vmas
            .any_in(start, end, |v| v.flags.contains(VmFlags::SEALED))
    };
    if sealed {
        rule!(phys.hw, MunmapSealed);
        return Err(Errno::EPERM);
    }
    let last_end = if only_first {
        Some(first_end)
    } else {
        mm.vmas.find(end - 1).map(|v| v.end)
    };
    if let Some(last_end) = last_end {
        if last_end > end {
            if let Some(slot) = mm.pmd_cut_by(end) {
                rule!(phys.hw, MunmapSplitHugePmdEnd);
                split_huge_pmd(mm, phys, slot);
            }
            mm.vmas.split_at(end);
        }
    }
    Ok(true)
}

/// The second half: remove the VMAs of `[start, end)` (boundaries made
/// by [`munmap_gather_in`]), zap and free their page tables.
/// Linux: mm/vma.c vms_complete_munmap_vmas().
fn munmap_gathered_in(mm: &mut Mm, phys: &mut PhysMem, start: u64, end: u64) {
    // The VMAs of [`VmaTree::starts_in`], lowest first, taken out in
    // one step.
    // The floor and ceiling (the neighbours' bounds) come with them.
    let (removed, floor, ceiling) = mm.vmas.take_in_bounded(start, end);
    // vms_clear_ptes(): one gather for the zaps (unmap_vmas()) and the
    // table freeing (free_pgtables(), floor and ceiling the
    // neighbours' bounds: vms->unmap_start, vms->unmap_end).
    let mut tlb = MmuGather::new();
    for v in removed.iter() {
        crate::mm::zap::zap_vma(mm, phys, &mut tlb, v, false);
    }
    // unmap_vmas() zaps with ZAP_FLAG_DROP_MARKER (no search where
    // no marker was ever stored).
    if mm.pt.may_hold_nonpresent() {
        crate::mm::marker::drop_markers(mm, start, end);
    }
    free_tables_and_finish(mm, phys, tlb, &removed, floor, ceiling);
}

/// `Model::do_munmap()` of `[start, end)` when that is exactly one
/// VMA, not sealed, inside one PMD span whose slot holds a PTE table
/// with no entry in the range, and no swap entry or marker was ever
/// stored in the tree — what mremap's unmap of the source it has just
/// moved finds (`ModelConfig::move_source_known`). The gather then
/// finds that VMA alone and splits nothing, and the zap's walk one
/// PTE-table segment with nothing present, so both are skipped and
/// the zap's counts written out ([`crate::mm::zap::zap_vma_none`]);
/// the removal, the table freeing and the gather's flushes are as in
/// `munmap_gathered_in()`. Returns `false`, changing nothing,
/// when the range is not such a range.
/// Linux: mm/vma.c do_vmi_munmap() (from mm/mremap.c
/// unmap_source_vma()).
pub(crate) fn unmap_known_none(mm: &mut Mm, phys: &mut PhysMem, start: u64, end: u64) -> bool {
    if end <= start || (start ^ (end - 1)) >= PMD_SIZE || mm.pt.may_hold_nonpresent() {
        return false;
    }
    let Some(slot) = mm.pt.pte_tbl_slot(start) else {
        return false;
    };
    let i = crate::core::pgtable::index(1, start);
    let n = ((end - start) / PAGE_SIZE) as usize;
    if mm.pt.pte_entries_in(slot).none_in(i..i + n) != Some(true) {
        return false;
    }
    // The one VMA, not sealed: the gather finds it alone and splits
    // nothing (taken out with its neighbours' bounds in one search).
    let Some((removed, floor, ceiling)) = mm
        .vmas
        .take_whole(start, end, |v| !v.flags.contains(VmFlags::SEALED))
    else {
        return false;
    };
    crate::core::diag::took(crate::core::diag::Step::UnmapKnownNone);
    let mut tlb = MmuGather::new();
    crate::mm::zap::zap_vma_none(mm, &mut tlb, start, end);
    let removed = std::slice::from_ref(&removed);
    free_tables_and_finish(mm, phys, tlb, removed, floor, ceiling);
    true
}

/// The end of an unmap after its zaps: free the removed VMAs' page tables
/// between `floor` and `ceiling`, then flush the gather.
/// Linux: mm/vma.c vms_clear_ptes() (free_pgtables(), tlb_finish_mmu()).
fn free_tables_and_finish(
    mm: &mut Mm,
    phys: &mut PhysMem,
    mut tlb: MmuGather,
    removed: &[Vma],
    floor: u64,
    ceiling: u64,
) {
    let tables = phys.pt_pages;
    // Each freed table is gathered as its *_free_tlb() does: one page
    // at its parent entry's span start, at that level, freed_tables
    // set (mm/memory.c free_pte_range(), free_pmd_range(),
    // free_pud_range()).
    free_pgtables(mm, phys, &mut tlb, removed, floor, ceiling);
    if phys.pt_pages < tables {
        rule!(phys.hw, MunmapFreeTables);
    }
    // tlb_finish_mmu(): flushes what is gathered — on arm64 the freed
    // tables alone (each VMA's tlb_end_vma() flushed its zap), on x86
    // (MMU_GATHER_MERGE_VMAS) the zaps and the freed tables together —
    // from the first to the last address gathered, at the smallest
    // level cleared (tlb_get_unmap_shift()).
    tlb.finish(&mm.pt);
}
