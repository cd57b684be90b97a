//! The model facade: a machine with physical memory, THP knobs and
//! processes, and the system calls and accesses a scenario performs.
//!
//! Rules live in the modules this file calls: [`crate::mm::fault`],
//! [`crate::mm::zap`], [`crate::mm::mm`], [`crate::core::vma`]. This file holds the
//! syscall entry checks, in the kernel's order.

use crate::core::addr::HPAGE_PMD_NR;
use crate::core::addr::{page_align, PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::core::arch::{ArchKind, Entry, LeafFlags};
use crate::core::folio::PhysMem;
use crate::core::observe::{AnonPage, MapsEntry, Observation, PageRuns, PageState};
use crate::core::pgtable::{PageTables, PmdSlot};
use crate::core::thp::ThpSettings;
use crate::core::tlb::MmuGather;
use crate::core::vma::{VmFlags, Vma};
use crate::mm::fault::{handle_fault, FaultEnv};
use crate::mm::mm::{AnonVmaIds, Mm};
use crate::mm::zap::{free_pgtables, split_huge_pmd, zap_range};
use crate::types::errno::Errno;
use crate::types::uapi::{Advice, MapFlags, Prot, ThpKnob, ThpMode};
use std::collections::BTreeMap;

pub use crate::types::{AccessFault, Pid};

/// Machine-wide configuration.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub arch: ArchKind,
    pub thp: ThpSettings,
    /// Top of the top-down mmap area (`mm->mmap_base`, fixed: the model has no ASLR).
    pub mmap_base: u64,
    /// `vm.max_map_count`.
    pub max_map_count: usize,
    /// `vm.mmap_min_addr`.
    pub mmap_min_addr: u64,
    /// The caller has CAP_SYS_RAWIO (root): mappings below mmap_min_addr are allowed.
    pub cap_sys_rawio: bool,
    /// Physical memory in 4 KiB frames.
    pub frames: u64,
    /// Seed changes that run their previous algorithm (`--before NAME`).
    pub before: crate::mm::batch::Before,
    /// CPU features that change which TLB-maintenance instructions the
    /// kernel issues (hardware-event accounting only; no observable effect).
    pub hw: crate::core::hw::HwFeatures,
}

impl ModelConfig {
    /// Defaults of the reference machine (Linux 6.18.44 x86-64 VM, 24 GiB).
    pub fn for_arch(arch: ArchKind) -> Self {
        ModelConfig {
            arch,
            thp: ThpSettings::default(),
            mmap_base: 0x7fff_f000_0000,
            max_map_count: 65530,
            mmap_min_addr: PAGE_SIZE,
            cap_sys_rawio: true,
            frames: 24 << 18,
            before: crate::mm::batch::Before::empty(),
            hw: crate::core::hw::HwFeatures::default(),
        }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self::for_arch(ArchKind::X86_64)
    }
}

/// The modelled machine.
#[derive(Clone, Debug)]
pub struct Model {
    pub(crate) cfg: ModelConfig,
    pub(crate) phys: PhysMem,
    pub(crate) thp: ThpSettings,
    pub(crate) procs: BTreeMap<Pid, Mm>,
    pub(crate) ids: AnonVmaIds,
    /// Open userfaultfd contexts.
    pub(crate) uffd: crate::sys::uffd::UffdState,
    /// Whether new processes record [`crate::HwMark`]s.
    pub(crate) hw_tracing: bool,
}

impl Model {
    pub fn new(cfg: ModelConfig) -> Model {
        let mut phys = PhysMem::new(cfg.frames);
        let mut pt = PageTables::new(cfg.arch, &mut phys).expect("memory for the first page table");
        pt.hw.features = cfg.hw;
        let mut procs = BTreeMap::new();
        procs.insert(
            1,
            Mm {
                pid: 1,
                vmas: Default::default(),
                pt,
                rss_anon: 0,
                deposited: BTreeMap::new(),
                thp_disable: Default::default(),
                rlimits: Default::default(),
                locked_vm_stale: 0,
            },
        );
        Model {
            thp: cfg.thp.clone(),
            cfg,
            phys,
            procs,
            ids: AnonVmaIds::default(),
            uffd: Default::default(),
            hw_tracing: false,
        }
    }

    pub fn main_pid(&self) -> Pid {
        1
    }
    pub fn arch(&self) -> ArchKind {
        self.cfg.arch
    }
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    pub fn thp(&self) -> &ThpSettings {
        &self.thp
    }
    pub fn phys(&self) -> &PhysMem {
        &self.phys
    }
    pub fn mm(&self, pid: Pid) -> Option<&Mm> {
        self.procs.get(&pid)
    }
    pub fn pids(&self) -> impl Iterator<Item = Pid> + '_ {
        self.procs.keys().copied()
    }

    /// Whether the model implements `advice` (all the advice values the
    /// language has).
    pub fn supports_advice(_advice: Advice) -> bool {
        true
    }

    /// Enable a swap device of `bytes` (rounded down to pages, the header
    /// page included), or disable swap with 0 (EBUSY while slots are in use).
    /// Fewer than [`crate::core::swapfile::MIN_SWAP_PAGES`] pages is EINVAL, as
    /// swapon(2) answers.
    pub fn set_swap(&mut self, bytes: u64) -> Result<(), Errno> {
        crate::sys::swap::set_swap(&mut self.phys, bytes)
    }

    /// The swap device (slots, counts and swap cache).
    pub fn swap(&self) -> &crate::core::swapfile::SwapDevice {
        &self.phys.swap
    }

    pub fn set_thp(&mut self, knob: ThpKnob, mode: ThpMode) -> Result<(), Errno> {
        self.thp.set(knob, mode)
    }
    /// prctl(PR_SET_THP_DISABLE, disable, flags, 0, 0) in process `pid`.
    /// Linux: kernel/sys.c prctl_set_thp_disable().
    pub fn prctl_set_thp_disable(
        &mut self,
        pid: Pid,
        disable: u64,
        flags: u64,
    ) -> Result<(), Errno> {
        let mm = self.procs.get_mut(&pid).ok_or(Errno::ESRCH)?;
        mm.pt.hw.one(crate::core::hw::HwEvent::Syscall);
        mm.thp_disable = crate::core::thp::ThpDisable::from_prctl(disable, flags, 0, 0)?;
        Ok(())
    }

    /// prctl(PR_GET_THP_DISABLE) in process `pid`.
    pub fn prctl_get_thp_disable(&self, pid: Pid) -> Result<u64, Errno> {
        let mm = self.procs.get(&pid).ok_or(Errno::ESRCH)?;
        mm.pt.hw.one(crate::core::hw::HwEvent::Syscall);
        Ok(mm.thp_disable.prctl_get())
    }

    /// setrlimit(2) of `resource`'s soft limit in process `pid` (bytes;
    /// [`RLIM_INFINITY`](crate::mm::rlimit::RLIM_INFINITY) for none). The hard
    /// limit stays infinite, so any value is accepted.
    /// Linux: kernel/sys.c do_prlimit().
    pub fn set_rlimit(
        &mut self,
        pid: Pid,
        resource: crate::mm::rlimit::Resource,
        bytes: u64,
    ) -> Result<(), Errno> {
        let mm = self.procs.get_mut(&pid).ok_or(Errno::ESRCH)?;
        mm.rlimits.set(resource, bytes);
        Ok(())
    }

    /// Drop CAP_IPC_LOCK from the effective set of process `pid` (capset(2)):
    /// mlock and MAP_LOCKED then obey RLIMIT_MEMLOCK.
    pub fn drop_cap_ipc_lock(&mut self, pid: Pid) -> Result<(), Errno> {
        let mm = self.procs.get_mut(&pid).ok_or(Errno::ESRCH)?;
        mm.rlimits.cap_ipc_lock = false;
        Ok(())
    }

    /// `vm.max_map_count` (a machine-wide sysctl; a diff against the live
    /// kernel sets it to the live limit minus the harness's own VMAs).
    pub fn set_max_map_count(&mut self, n: usize) {
        self.cfg.max_map_count = n;
    }

    /// Map one-page read-only VMAs at `addr`, `addr + 8K`, ... (a page
    /// apart, so they never merge) until `max_map_count - map_count` is
    /// `headroom`. Returns how many were mapped. A test device, not a
    /// system call: it brings a process to the map-count limits
    /// (spec/mremap.md §11 #29) with ordinary mmap(MAP_FIXED_NOREPLACE)
    /// calls, each checked like any other; the first failure stops it.
    pub fn fill_vmas(&mut self, pid: Pid, addr: u64, headroom: usize) -> Result<u64, Errno> {
        let mm = self.procs.get(&pid).ok_or(Errno::ESRCH)?;
        let want = self
            .cfg
            .max_map_count
            .checked_sub(headroom)
            .and_then(|t| t.checked_sub(mm.map_count()))
            .ok_or(Errno::EINVAL)? as u64;
        let flags = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED_NOREPLACE;
        for i in 0..want {
            let a = i
                .checked_mul(2 * PAGE_SIZE)
                .and_then(|o| addr.checked_add(o))
                .ok_or(Errno::EINVAL)?;
            self.mmap(pid, a, PAGE_SIZE, Prot::READ, flags)?;
        }
        Ok(want)
    }

    pub fn set_use_zero_page(&mut self, on: bool) {
        self.thp.use_zero_page = on;
    }

    /// Select which seed changes run their previous algorithm.
    pub fn set_before(&mut self, before: crate::mm::batch::Before) {
        self.cfg.before = before;
    }
    pub fn before(&self) -> crate::mm::batch::Before {
        self.cfg.before
    }

    /// Count a system call's fixed entry work in process `pid`: the
    /// syscall itself and the first VMA lookup.
    pub(crate) fn count_syscall(&self, pid: Pid) {
        if let Some(mm) = self.procs.get(&pid) {
            mm.pt.hw.one(crate::core::hw::HwEvent::Syscall);
            mm.pt.hw.one(crate::core::hw::HwEvent::VmaLookup);
        }
    }

    /// Start (or stop) recording where batches and TLB invalidations happen
    /// ([`crate::HwMark`]) in every process; starting drops old marks.
    pub fn set_hw_tracing(&mut self, on: bool) {
        for mm in self.procs.values() {
            mm.pt.hw.set_tracing(on);
        }
        self.hw_tracing = on;
    }

    /// The marks recorded since tracing started, per process.
    pub fn take_hw_marks(&mut self) -> Vec<(Pid, crate::HwMark)> {
        let mut v = Vec::new();
        for (pid, mm) in &self.procs {
            v.extend(mm.pt.hw.take_marks().into_iter().map(|m| (*pid, m)));
        }
        v
    }

    /// Hardware events counted since the model started (every process,
    /// exited ones included). See [`crate::core::hw`].
    pub fn hw_events(&self) -> crate::core::hw::HwEvents {
        let mut e = self.phys.hw.snapshot();
        for mm in self.procs.values() {
            e.add_all(&mm.pt.hw.snapshot());
        }
        e
    }

    /// Select the CPU features the TLB-maintenance accounting assumes.
    pub fn set_hw_features(&mut self, f: crate::core::hw::HwFeatures) {
        self.cfg.hw = f;
        for mm in self.procs.values_mut() {
            mm.pt.hw.features = f;
        }
    }

    /// Approximate bytes of model memory in use (page tables and physical-memory metadata).
    pub fn memory_bytes(&self) -> usize {
        self.phys.metadata_bytes()
            + self
                .procs
                .values()
                .map(|m| m.pt.memory_bytes())
                .sum::<usize>()
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
        if !self.procs.contains_key(&pid) {
            return Err(Errno::EINVAL);
        }
        self.count_syscall(pid);
        // ksys_mmap_pgoff(): without MAP_ANONYMOUS the fd (-1) is looked up.
        if !flags.contains(MapFlags::ANONYMOUS) {
            return Err(Errno::EBADF);
        }
        if len == 0 {
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
        if self.procs[&pid].map_count() > self.cfg.max_map_count {
            return Err(Errno::ENOMEM);
        }
        let addr = self.get_unmapped_area(pid, addr, len, flags)?;
        if flags.contains(MapFlags::FIXED_NOREPLACE)
            && self.procs[&pid].vmas.intersects(addr, addr + len)
        {
            return Err(Errno::EEXIST);
        }
        // MAP_LOCKED: can_do_mlock() (EPERM), then mlock_future_ok()
        // against RLIMIT_MEMLOCK for the whole length (EAGAIN), before the
        // MAP_TYPE switch.
        if flags.contains(MapFlags::LOCKED) {
            let mm = &self.procs[&pid];
            if !mm.can_do_mlock() {
                return Err(Errno::EPERM);
            }
            if !mm.mlock_future_ok(VmFlags::LOCKED, len) {
                return Err(Errno::EAGAIN);
            }
        }
        // The MAP_TYPE switch: only MAP_PRIVATE anonymous memory is modelled.
        match flags.bits() & 0x0f {
            0x02 => {}
            0x01 | 0x03 => return Err(Errno::ENOSYS), // shared anon is shmem: not modelled
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
        // accountable_mapping(): private writable without NORESERVE.
        if vm.contains(VmFlags::WRITE) && !vm.contains(VmFlags::NORESERVE) {
            vm |= VmFlags::ACCOUNT;
        }
        self.mmap_region(pid, addr, len, vm, flags.contains(MapFlags::FIXED))?;
        // do_mmap() asks for population of a VM_LOCKED mapping too.
        if flags.intersects(MapFlags::POPULATE | MapFlags::LOCKED) {
            // mm_populate(): write faults for private writable VMAs, else read.
            let write = vm.contains(VmFlags::WRITE);
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
        let min = self.cfg.mmap_min_addr.max(PAGE_SIZE);
        if len > TASK_SIZE - self.cfg.mmap_min_addr {
            return Err(Errno::ENOMEM);
        }
        let mm = &self.procs[&pid];
        let addr = if flags.contains(MapFlags::FIXED) {
            hint
        } else if hint == 0 && len.is_multiple_of(PMD_SIZE) {
            // thp_get_unmapped_area_vmflags(): search len + 2 MiB, align up.
            let padded = len.checked_add(PMD_SIZE).ok_or(Errno::ENOMEM)?;
            let ret = self.topdown_search(mm, padded, min)?;
            let off_sub = ret.wrapping_neg() & (PMD_SIZE - 1);
            if off_sub == 0 {
                ret + PMD_SIZE
            } else {
                ret + off_sub
            }
        } else {
            let h = page_align(hint).unwrap_or(0);
            let fits =
                h != 0 && TASK_SIZE - len >= h && h >= min && !mm.vmas.intersects(h, h + len);
            if fits {
                h
            } else {
                self.topdown_search(mm, len, min)?
            }
        };
        if addr > TASK_SIZE - len {
            return Err(Errno::ENOMEM);
        }
        if addr % PAGE_SIZE != 0 {
            return Err(Errno::EINVAL);
        }
        if addr < self.cfg.mmap_min_addr && !self.cfg.cap_sys_rawio {
            return Err(Errno::EPERM); // security_mmap_addr()
        }
        Ok(addr)
    }

    /// Highest gap below mmap_base that fits `len`. Linux: vm_unmapped_area() top-down.
    fn topdown_search(&self, mm: &Mm, len: u64, low: u64) -> Result<u64, Errno> {
        let high = self.cfg.mmap_base;
        let mut gap_end = high;
        let vmas: Vec<&Vma> = mm.vmas.iter().collect();
        for v in vmas.iter().rev() {
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
        if fixed && self.procs[&pid].vmas.intersects(addr, end) {
            // __mmap_setup(): vms_gather_munmap_vmas() splits the VMAs
            // MAP_FIXED replaces before the RLIMIT_AS test, and a failure
            // then leaves the splits in place (vms_abort_munmap_vmas()).
            self.munmap_gather(pid, addr, end)?;
            let mm = &self.procs[&pid];
            replaced = mm
                .vmas
                .starts_in(addr, end)
                .iter()
                .filter_map(|&s| mm.vmas.get(s))
                .map(|v| v.pages())
                .sum::<u64>();
        }
        if !self.procs[&pid].may_expand_vm(vm, len / PAGE_SIZE - replaced) {
            return Err(Errno::ENOMEM);
        }
        if replaced > 0 {
            self.do_munmap(pid, addr, end)?;
        }
        let mm = self.procs.get_mut(&pid).expect("pid");
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
            mm.vmas.insert(new);
        }
        Ok(())
    }

    // ---- munmap -----------------------------------------------------------

    /// munmap(2). Linux: mm/vma.c do_vmi_munmap().
    pub fn munmap(&mut self, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        self.count_syscall(pid);
        self.munmap_inner(pid, addr, len)
    }

    /// munmap(2)'s work without the syscall entry (mremap's own unmaps).
    pub(crate) fn munmap_inner(&mut self, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        if !self.procs.contains_key(&pid) {
            return Err(Errno::EINVAL);
        }
        if !addr.is_multiple_of(PAGE_SIZE) || addr > TASK_SIZE || len > TASK_SIZE - addr {
            return Err(Errno::EINVAL);
        }
        let end = addr + page_align(len).ok_or(Errno::EINVAL)?;
        if end == addr {
            return Err(Errno::EINVAL);
        }
        self.do_munmap(pid, addr, end)
    }

    /// Unmap `[start, end)`: split the edge VMAs, zap, free page tables,
    /// remove. Linux: mm/vma.c do_vmi_align_munmap(), vms_gather_munmap_vmas(),
    /// vms_complete_munmap_vmas() → unmap_region().
    pub(crate) fn do_munmap(&mut self, pid: Pid, start: u64, end: u64) -> Result<(), Errno> {
        if !self.munmap_gather(pid, start, end)? {
            return Ok(());
        }
        self.munmap_gathered(pid, start, end);
        Ok(())
    }

    /// The first half of an unmap: the checks and the splits that make
    /// `start` and `end` VMA boundaries. Returns whether any VMA is in the
    /// range. The splits stay when a later step fails.
    /// Linux: mm/vma.c vms_gather_munmap_vmas().
    pub(crate) fn munmap_gather(&mut self, pid: Pid, start: u64, end: u64) -> Result<bool, Errno> {
        let max = self.cfg.max_map_count;
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        let starts = mm.vmas.starts_in(start, end);
        let Some(&first) = starts.first() else {
            return Ok(false);
        };
        let first_vma = mm.vmas.get(first).expect("vma").clone();
        if first_vma.start < start && end < first_vma.end && mm.map_count() >= max {
            return Err(Errno::ENOMEM);
        }
        // vms_gather_munmap_vmas(): a sealed first VMA refuses before it is
        // split; a sealed later one after the first split was made.
        if first_vma.start < start && first_vma.flags.contains(VmFlags::SEALED) {
            return Err(Errno::EPERM);
        }
        if first_vma.start < start {
            if let Some(slot) = mm.pmd_cut_by(start) {
                split_huge_pmd(mm, phys, slot);
            }
            mm.vmas.split_at(start);
        }
        if mm.vmas.starts_in(start, end).iter().any(|&s| {
            mm.vmas
                .get(s)
                .is_some_and(|v| v.flags.contains(VmFlags::SEALED))
        }) {
            return Err(Errno::EPERM);
        }
        if let Some(last) = mm.vmas.find(end - 1).cloned() {
            if last.end > end {
                if let Some(slot) = mm.pmd_cut_by(end) {
                    split_huge_pmd(mm, phys, slot);
                }
                mm.vmas.split_at(end);
            }
        }
        Ok(true)
    }

    /// The second half: remove the VMAs of `[start, end)` (boundaries made
    /// by [`Model::munmap_gather`]), zap and free their page tables.
    /// Linux: mm/vma.c vms_complete_munmap_vmas().
    fn munmap_gathered(&mut self, pid: Pid, start: u64, end: u64) {
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        let removed: Vec<Vma> = mm
            .vmas
            .starts_in(start, end)
            .into_iter()
            .filter_map(|s| mm.vmas.remove(s))
            .collect();
        let floor = mm.vmas.prev(start).map_or(0, |p| p.end);
        let ceiling = mm.vmas.find_vma(end).map_or(0, |n| n.start);
        // unmap_region(): one gather for the zaps and the table freeing.
        let mut tlb = MmuGather::new();
        for v in &removed {
            crate::mm::zap::zap_vma(mm, phys, &mut tlb, v, false);
        }
        // unmap_vmas() zaps with ZAP_FLAG_DROP_MARKER.
        crate::mm::marker::drop_markers(mm, start, end);
        let tables = phys.pt_pages;
        free_pgtables(mm, phys, &removed, floor, ceiling);
        if phys.pt_pages < tables {
            // Freed page tables: pte_free_tlb() gathers them with
            // freed_tables set; the model takes the removed VMAs' span,
            // widened to whole PMDs, as the tables' span.
            let lo = removed.first().map_or(start, |v| v.start) & !(PMD_SIZE - 1);
            let hi = removed.last().map_or(end, |v| v.end);
            let hi = hi.div_ceil(PMD_SIZE).saturating_mul(PMD_SIZE);
            tlb.free_tables_span(lo, hi);
        }
        // tlb_finish_mmu(): flushes the freed tables at PMD stride
        // (tlb_get_unmap_size() after pte_free_tlb()).
        tlb.finish(&mm.pt);
    }

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
        if !crate::sys::mlock::can_madvise_modify(vma, advice) {
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

    // ---- accesses ---------------------------------------------------------

    pub(crate) fn fault(
        &mut self,
        pid: Pid,
        addr: u64,
        write: bool,
    ) -> Result<crate::core::addr::Pfn, AccessFault> {
        let Model {
            procs,
            phys,
            thp,
            ids,
            ..
        } = self;
        let mm = procs.get_mut(&pid).ok_or(AccessFault::NoProcess)?;
        let mut env = FaultEnv { phys, thp, ids };
        handle_fault(mm, &mut env, addr & !(PAGE_SIZE - 1), write)
    }

    /// A user access: no fault when the page is mapped with the needed
    /// permission (one [`crate::HwEvent::UserPageAccess`]); otherwise a page
    /// fault (exception entry, per-VMA lookup, PMD read, PTL) and the access.
    fn touch(
        &mut self,
        pid: Pid,
        addr: u64,
        write: bool,
    ) -> Result<crate::core::addr::Pfn, AccessFault> {
        self.touch_as(pid, addr, write, true)
    }

    /// [`Model::touch`]; `user == false` for the kernel's own access to user
    /// memory (copy_from_user), whose copy the caller counts.
    pub(crate) fn touch_as(
        &mut self,
        pid: Pid,
        addr: u64,
        write: bool,
        user: bool,
    ) -> Result<crate::core::addr::Pfn, AccessFault> {
        use crate::core::hw::HwEvent;
        let n = u64::from(user);
        let mm = self.procs.get(&pid).ok_or(AccessFault::NoProcess)?;
        if let Some(pfn) = mm.pt.mapped_for_access(addr, write) {
            mm.pt.hw.add(HwEvent::UserPageAccess, n);
            return Ok(pfn);
        }
        self.fault_as_user(pid, addr, write, user)
    }

    /// A fault taken by an access to `addr`, counted as one (the caller
    /// knows the page is not mapped for the access), then the access.
    fn fault_as_user(
        &mut self,
        pid: Pid,
        addr: u64,
        write: bool,
        user: bool,
    ) -> Result<crate::core::addr::Pfn, AccessFault> {
        use crate::core::hw::HwEvent;
        let n = u64::from(user);
        let mm = self.procs.get(&pid).ok_or(AccessFault::NoProcess)?;
        // Linux: arch/*/mm/fault.c do_user_addr_fault() / do_page_fault():
        // lock_vma_under_rcu(), handle_mm_fault() → __handle_mm_fault()
        // (pmd read), handle_pte_fault() (PTL taken to install or update).
        let hw = &mm.pt.hw;
        hw.one(HwEvent::PageFault);
        hw.one(HwEvent::VmaLookup);
        let _ptl = mm.pt.pte_offset_map_lock(addr);
        let r = self.fault(pid, addr, write);
        if let Some(mm) = self.procs.get(&pid) {
            mm.pt.hw.add(HwEvent::UserPageAccess, n);
        }
        r
    }

    /// Read the tag of the page containing `addr`, faulting it in as a read.
    pub fn read(&mut self, pid: Pid, addr: u64) -> Result<u64, AccessFault> {
        self.read_as(pid, addr, true)
    }

    /// [`Model::read`] by the user (`user`) or by the kernel on its behalf.
    pub(crate) fn read_as(&mut self, pid: Pid, addr: u64, user: bool) -> Result<u64, AccessFault> {
        let pfn = self.touch_as(pid, addr, false, user)?;
        let in_huge_zero = self
            .phys
            .huge_zero
            .is_some_and(|h| (h.0..h.0 + HPAGE_PMD_NR).contains(&pfn.0));
        if pfn == self.phys.zero_pfn || in_huge_zero {
            return Ok(0);
        }
        Ok(self.phys.tag(pfn))
    }

    /// Write `tag` into the page containing `addr`, faulting it in as a write.
    pub fn write(&mut self, pid: Pid, addr: u64, tag: u64) -> Result<(), AccessFault> {
        let pfn = self.touch(pid, addr, true)?;
        self.phys.set_tag(pfn, tag);
        Ok(())
    }

    /// Access every page of `[start, start + len)` in address order, as a
    /// program touching each page once would: `write` stores `tag` (or, when
    /// `None`, each page's own address). Pages already mapped with the needed
    /// permission are handled without entering the fault path; the result is
    /// identical to calling [`Model::read`]/[`Model::write`] per page.
    pub fn access_range(
        &mut self,
        pid: Pid,
        start: u64,
        len: u64,
        write: bool,
        tag: Option<u64>,
    ) -> Result<(), AccessFault> {
        let start = start & !(PAGE_SIZE - 1);
        let end = start
            .checked_add(len)
            .ok_or(AccessFault::Segv { addr: start })?;
        let mut addr = start;
        while addr < end {
            let slot_end = crate::core::pgtable::pmd_end(addr, end);
            // Fast path over pages already mapped in this PMD slot.
            while addr < slot_end {
                let mm = self.procs.get(&pid).ok_or(AccessFault::NoProcess)?;
                let Some(pfn) = mm.pt.mapped_for_access(addr, write) else {
                    break;
                };
                mm.pt.hw.one(crate::core::hw::HwEvent::UserPageAccess);
                if write {
                    self.phys.set_tag(pfn, tag.unwrap_or(addr));
                }
                addr += PAGE_SIZE;
            }
            if addr < slot_end {
                // The page needs a fault (the fast path above found it unmapped).
                let pfn = self.fault_as_user(pid, addr, write, true)?;
                if write {
                    self.phys.set_tag(pfn, tag.unwrap_or(addr));
                }
                addr += PAGE_SIZE;
            }
        }
        Ok(())
    }

    // ---- observation ------------------------------------------------------

    /// What /proc shows for process `pid`, labelled `label`.
    ///
    /// Costs in proportion to what is populated: the page tables are
    /// walked (a none PGD, PUD or PMD entry is skipped in one step), only
    /// 2 MiB slots holding a PTE table or a PMD leaf are looked at page by
    /// page, and every run of not-present pages is one record (see
    /// [`PageRuns`]). Linux: fs/proc/task_mmu.c pagemap_read() walks the
    /// same way (walk_page_range(), pagemap_pte_hole() for the holes).
    pub fn observe(&self, pid: Pid, label: &str) -> Observation {
        let mut obs = Observation {
            process: label.to_string(),
            stats: self.phys.stats.to_map(),
            ..Default::default()
        };
        let Some(mm) = self.procs.get(&pid) else {
            return obs;
        };
        obs.vm_lck_kb = mm.locked_vm() * (PAGE_SIZE / 1024);
        for v in mm.vmas.iter() {
            let (rss_pages, anon_huge_pages) =
                self.observe_range(mm, v.start, v.end, &mut obs.pages);
            obs.maps.push(MapsEntry {
                start: v.start,
                end: v.end,
                perms: v.flags.perms(),
                vm_flags: v.flags.mnemonics(),
                anon_huge_kb: anon_huge_pages * 4,
                rss_kb: rss_pages * 4,
            });
        }
        obs
    }

    /// [`Model::observe`] the slow way: every virtual page of every VMA
    /// looked up on its own (time in proportion to the size of the VMAs;
    /// the result is the same). The reference the page-table walk is
    /// checked against; not for big mappings.
    pub fn observe_dense(&self, pid: Pid, label: &str) -> Observation {
        let mut obs = self.observe(pid, label);
        obs.pages = PageRuns::new();
        if let Some(mm) = self.procs.get(&pid) {
            for v in mm.vmas.iter() {
                for page in crate::mm::mm::pages(v.start, v.end) {
                    obs.pages.push(page, self.page_state(mm, page));
                }
            }
        }
        obs
    }

    /// The pages of `[start, end)` that lie inside VMAs, as [`Model::observe`]
    /// reports them (a cheaper query for a range).
    pub fn observe_pages(&self, pid: Pid, start: u64, end: u64) -> PageRuns {
        let mut out = PageRuns::new();
        let Some(mm) = self.procs.get(&pid) else {
            return out;
        };
        let start = start & !(PAGE_SIZE - 1);
        for s in mm.vmas.starts_in(start, end) {
            let v = mm.vmas.get(s).expect("vma");
            let (a, b) = (v.start.max(start), v.end.min(end));
            if a < b {
                self.observe_range(mm, a, b, &mut out);
            }
        }
        out
    }

    /// Appends the pages of `[start, end)` (inside one VMA) to `out`;
    /// returns (present anon pages, of which PMD-mapped).
    fn observe_range(&self, mm: &Mm, start: u64, end: u64, out: &mut PageRuns) -> (u64, u64) {
        // Slots that can hold anything other than none: PTE tables (which
        // hold every non-present entry too: swap entries, guard markers)
        // and PMD leaves.
        let slots = mm.pt.populated_slots(start, end);
        let (mut rss, mut huge) = (0, 0);
        let mut cur = start;
        for slot in slots {
            let (a, b) = (slot.max(start), (slot + PMD_SIZE).min(end));
            if a >= b {
                continue;
            }
            out.push_none(cur, a);
            for page in crate::mm::mm::pages(a, b) {
                let state = self.page_state(mm, page);
                if let PageState::Anon(x) = &state {
                    rss += 1;
                    if x.pmd_mapped {
                        huge += 1;
                    }
                }
                out.push(page, state);
            }
            cur = b;
        }
        out.push_none(cur, end);
        (rss, huge)
    }

    /// pagemap + kpageflags + kpagecount for one page.
    /// Linux: fs/proc/task_mmu.c pte_to_pagemap_entry(), pagemap_pmd_range();
    /// fs/proc/page.c stable_page_flags(), kpagecount_read().
    fn page_state(&self, mm: &Mm, va: u64) -> PageState {
        let (leaf, pmd_mapped, pfn) = match mm.pt.pmd(va) {
            PmdSlot::None => return PageState::NotPresent,
            PmdSlot::Leaf(l) => {
                let idx = (va & (PMD_SIZE - 1)) >> 12;
                (l, true, l.pfn.add(idx))
            }
            PmdSlot::Table(_) => match mm.pt.pte_peek(va) {
                Entry::Leaf(l) => (l, false, l.pfn),
                Entry::Swap(s) => {
                    return PageState::Swapped {
                        ty: s.ty,
                        offset: s.offset,
                    }
                }
                // pte_to_pagemap_entry(): a guard marker reads PM_SWAP |
                // PM_GUARD_REGION.
                Entry::Marker(m) if m.is_guard() => return PageState::Guard,
                _ => return PageState::NotPresent,
            },
        };
        if leaf.flags.contains(LeafFlags::SPECIAL) && !pmd_mapped {
            return PageState::Zero;
        }
        if let Some(hz) = self.phys.huge_zero {
            if pmd_mapped && leaf.pfn == hz {
                return PageState::HugeZero {
                    index: (pfn.0 - hz.0) as u32,
                };
            }
        }
        let folio = self
            .phys
            .folio_of(pfn)
            .expect("mapped page belongs to a folio");
        // PMD-mapped: pagemap uses the head page's precise mapcount for all entries.
        let x_page = if pmd_mapped { folio.head } else { pfn };
        PageState::Anon(AnonPage {
            pfn: pfn.0,
            order: folio.order.0,
            index: folio.index_of(pfn) as u32,
            pmd_mapped,
            mmap_exclusive: self.phys.precise_mapcount(x_page) == 1,
            anon_exclusive: self.phys.anon_exclusive(folio.head),
            mapcount: self.phys.precise_mapcount(pfn),
            tag: self.phys.tag(pfn),
        })
    }

    /// Recompute counters from the page tables and compare; `Err` lists every mismatch.
    pub fn check_invariants(&self) -> Result<(), Vec<String>> {
        crate::invariants::check(self)
    }
}
