//! The machine: physical memory, THP knobs, processes and userfaultfd
//! contexts ([`Model`]), its configuration, accessors, and the knobs a
//! scenario sets (THP sysfs, prctl, prlimit, swap size is in
//! [`crate::sys::swap`]).
//!
//! The system calls are not here: each family adds its entry points to
//! `Model` in its own file under [`crate::sys`] (mmap/munmap in
//! `sys/mmap.rs`, madvise in `sys/madvise.rs`, user accesses in
//! `sys/access.rs`, the /proc views in `sys/proc.rs`, …), on top of the mm
//! mechanics in [`crate::mm`] and the data structures in [`crate::core`].

use crate::core::addr::PAGE_SIZE;
use crate::core::arch::ArchKind;
use crate::core::folio::PhysMem;
use crate::core::pgtable::PageTables;
use crate::core::thp::ThpSettings;
use crate::mm::mm::{AnonVmaIds, Mm};
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
    /// NUMA nodes (`--nodes N`, `machine nodes N`): memory is split into
    /// equal contiguous slices, node 0 lowest (docs/ops/numa.md).
    pub nodes: u32,
    /// Seed changes that run their previous algorithm (`--before NAME`).
    pub before: crate::mm::batch::Before,
    /// Proposed changes newer than 6.18 that run instead of 6.18's
    /// algorithm (`--after NAME`).
    pub after: crate::mm::batch::After,
    /// CPU features that change which TLB-maintenance instructions the
    /// kernel issues (hardware-event accounting only; no observable effect).
    pub hw: crate::core::hw::HwFeatures,
    /// Store PTE tables that are a few affine runs compactly (on by
    /// default; off keeps every table dense: the reference the run-length
    /// property test compares against). No observable effect.
    pub pte_runs: bool,
    /// Keep one large-folio record per run of identical folios (on by
    /// default; off keeps one record per folio: the reference the
    /// folio-run property test compares against). No observable effect.
    pub folio_runs: bool,
    /// fork's copy and exit's zap take a stretch of PTEs stored as one run
    /// (mapping one folio run or one run of order-0 pages in one state) in
    /// one step, the events of its batches added at once (on by default;
    /// off: batch by batch, the reference `fork_runs_prop` compares
    /// against). No observable effect.
    pub fork_runs: bool,
    /// Take the whole-stretch steps of mprotect and of user accesses (on
    /// by default; off runs the kernel's per-batch / per-folio / per-page
    /// steps one at a time: the reference the stretch property test
    /// compares against). No observable effect, and the same counts.
    pub stretch_steps: bool,
    /// With `stretch_steps`: a write fault that makes the PTE table of its
    /// PMD slot may be the template of a fault stretch, its `pte_alloc()`
    /// chain done first (`sys/fault_run.rs` `stretch_first_tables()`), so
    /// that no second full fault is needed (on by default; off: the
    /// stretch starts at the second fault of a fresh table, the reference
    /// `fault_stretch_prop` compares against). No observable effect, and
    /// the same counts.
    pub stretch_first_fault: bool,
    /// UFFDIO_MOVE and UFFDIO_COPY take the common one-page step — an
    /// order-0 exclusive anonymous page moved, or an aligned page copied,
    /// into an empty PTE of an existing PTE table — as one fused step
    /// (`sys/uffd/fused.rs`: each PTE table found once, the step's events
    /// and calls counted in one place) (on by default; off: the kernel's
    /// step through the general code, the reference `uffd_fused_prop`
    /// compares against). No observable effect, and the same counts.
    pub uffd_fused: bool,
    /// A PTE table whose PUD and PMD tables are missing too is made with
    /// them in one step, and a PTE table whose PMD and PUD tables hold
    /// nothing else is freed with them in one step (`core/pgtable.rs`
    /// `alloc_lone_chain()`, `free_lone_chain()`; on by default; off:
    /// level by level, the reference `table_chain_prop` compares
    /// against), and `free_pgd_range()` returns at once when no PMD span
    /// over its range lies inside `[floor, ceiling)` (nothing can be freed:
    /// `no_pte_span_inside()`). No observable effect, and the same counts.
    pub table_chain_steps: bool,
    /// A page table removed from a tree leaves its frame-index entry and
    /// slab slot kept for its frame (16 at most, by the frame's low bits),
    /// and a table made again at that frame takes them back without
    /// hashing (`core/pgtable.rs` `Tables`; on by default; off: the entry
    /// removed and the slot freed at once, the reference
    /// `table_chain_prop` compares against). No observable effect: the
    /// same frames, counts and `memory_bytes()`.
    pub keep_table_index: bool,
    /// With `fork_runs`: a zap stretch of whole large folios takes its
    /// first folio too, that folio's batch counted from what a whole-folio
    /// batch counts (`core/folio.rs` `unmap_free_whole_large()`; on by
    /// default; off: the first folio's batch runs through the general path
    /// as the stretch's template, the reference `fork_runs_prop` and
    /// `fault_stretch_prop` compare against). No observable effect, and
    /// the same counts.
    pub zap_first_folded: bool,
    /// With `stretch_steps`: arm64's mremap stretch of whole contiguous
    /// blocks takes its first block too, that block's pass counted from
    /// what a whole-block pass counts (`mm/move_pt.rs`
    /// `move_cont_blocks_folded()`; on by default; off: the first block
    /// runs through the general path as the stretch's template, the
    /// reference `move_fold_prop` compares against). No observable
    /// effect, and the same counts.
    pub move_first_folded: bool,
    /// With `stretch_steps`: a write over whole blocks of none PTEs in a
    /// VMA with one mTHP order, where the first fault would be a fault
    /// stretch's template, faults every block in one step, the first
    /// fault's counts written out as the stretch's are (`sys/fault_run.rs`
    /// `write_fused()`; on by default; off: the first fault through the
    /// general path as the stretch's template, the reference
    /// `fault_stretch_prop` compares against). No observable effect, and
    /// the same counts.
    pub fault_fused: bool,
    /// With `fault_fused`: the fused write makes every block's folio at
    /// once where the allocator hands them out one after another, in
    /// their final state (mapped, referenced, tagged) as one folio run,
    /// the first block's PTEs through `set_ptes()` and the rest as their
    /// continuation (`mm/fault.rs` `fused_write_run()`; on by default;
    /// off: the first folio made and mapped as one fault, the blocks after
    /// it as a fault stretch of its state, the reference
    /// `fault_stretch_prop` compares against). No observable effect, and
    /// the same counts.
    pub fault_fused_run: bool,
    /// With `fault_fused_run`: the fused write of a PMD slot whose PTE
    /// table `stretch_first_tables()` has just made takes the table as
    /// there and all none instead of asking (`mm/fault.rs`
    /// `fused_fault_fits()`'s `pmd()` and `ptes_none()`, and
    /// `fused_write_run()`'s `ptes_none()` of the blocks after the first;
    /// none of them counts anything; on by default; off: every check
    /// asked, the reference `fault_stretch_prop` compares against). No
    /// observable effect, and the same counts.
    pub fault_fresh_table: bool,
    /// mremap's page-table walk skips the PUD-level test of the source and
    /// the `pud_alloc()`/`pmd_alloc()`/`pte_alloc()` of the destination
    /// when both PMD slots already hold a PTE table (`mm/move_pt.rs`
    /// `move_page_tables()`: the answers are known — the source's PUD
    /// entry is a table, every destination table exists — and none of
    /// those steps counts anything; on by default; off: every step asked,
    /// the reference `mremap_runs_prop` compares against). No observable
    /// effect, and the same counts.
    pub move_tables_known: bool,
    /// mremap's move of a stretch whose source is the only run of its PTE
    /// table, to a disjoint range of the same table, rewrites that run in
    /// place (`mm/move_pt.rs` `move_lone_run()`; on by default; off: the
    /// source cleared and the destination written as two splices, the
    /// reference `mremap_runs_prop` compares against). No observable
    /// effect, and the same counts.
    pub move_lone_run: bool,
    /// mremap's unmap of the source it has just moved, when that is one
    /// VMA over none entries of one PTE table, removes it and writes the
    /// zap's counts out without the gather's searches and the zap's walk
    /// (`sys/mmap.rs` `unmap_known_none()`; on by default; off: the
    /// general `do_munmap()`, the reference `mremap_runs_prop` compares
    /// against). No observable effect, and the same counts.
    pub move_source_known: bool,
    /// The large-folio run index is a sorted vector while it holds few
    /// runs (a B-tree beyond), and a slot freed by the zap of a whole run
    /// hands its mappings vector's buffer to the next run made in it
    /// (`core/folio.rs` `RunIndex`, `LargeFolios::recycled_maps()`; on by
    /// default; off: the index a B-tree from the start and every record
    /// allocating its own, the reference `folio_runs_prop` compares
    /// against). No observable effect, the same counts and the same
    /// `memory_bytes()`.
    pub folio_record_reuse: bool,
    /// The buddy allocator answers a request that repeats a recorded
    /// cycle of allocations and frees — one whose free-list operations
    /// net out, so the lists are back where it started — from its journal
    /// and defers the list operations until a request differs or
    /// something else uses the lists (`core/phys/replay.rs`; on by
    /// default; off: every request works on the lists, the reference
    /// `buddy_replay_prop` compares against). No observable effect: the
    /// same frames and counts.
    pub buddy_replay: bool,
    /// With `move_lone_run` and `move_first_folded`: on arm64 an extent
    /// of mremap's PTE move that is one stretch of whole contiguous blocks
    /// (each one folio of one folio run), the only run of its PTE table,
    /// moved within that table, is checked once and moved in one step
    /// (`mm/move_pt.rs` `move_cont_lone()`; on by default; off: through
    /// the move loop's probes, the stretch test and the folded blocks,
    /// the reference `mremap_runs_prop` compares against). No observable
    /// effect, and the same counts.
    pub move_cont_lone: bool,
}

/// Smallest machine the model runs: 64 MiB.
pub const MIN_MEMORY: u64 = 64 << 20;

/// Most physical memory the architecture addresses with 4 KiB pages and
/// four levels: x86-64 `MAX_PHYSMEM_BITS` = 46 (64 TiB), arm64
/// `PHYS_MASK_SHIFT` = 48 (256 TiB). Linux: arch/x86/include/asm/sparsemem.h,
/// arch/arm64/include/asm/pgtable-hwdef.h.
pub fn max_memory(arch: ArchKind) -> u64 {
    match arch {
        ArchKind::X86_64 => 1 << 46,
        ArchKind::Arm64 => 1 << 48,
    }
}

impl ModelConfig {
    /// The same configuration with `bytes` of physical memory.
    pub fn with_memory(mut self, bytes: u64) -> Self {
        self.frames = bytes / PAGE_SIZE;
        self
    }

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
            nodes: 1,
            before: crate::mm::batch::Before::empty(),
            after: crate::mm::batch::After::empty(),
            hw: crate::core::hw::HwFeatures::default(),
            pte_runs: true,
            folio_runs: true,
            fork_runs: true,
            stretch_steps: true,
            stretch_first_fault: true,
            uffd_fused: true,
            table_chain_steps: true,
            keep_table_index: true,
            zap_first_folded: true,
            move_first_folded: true,
            fault_fused: true,
            fault_fused_run: true,
            fault_fresh_table: true,
            move_tables_known: true,
            move_lone_run: true,
            move_source_known: true,
            folio_record_reuse: true,
            buddy_replay: true,
            move_cont_lone: true,
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
    pub(crate) uffd: crate::sys::uffd::ctx::UffdState,
    /// Each process's userfaultfd descriptors, by handle name (crate::call).
    pub(crate) uffd_fds: crate::sys::uffd::ctx::UffdFds,
    /// Whether new processes record [`crate::core::hw::HwMark`]s.
    pub(crate) hw_tracing: bool,
}

impl Model {
    pub fn new(cfg: ModelConfig) -> Model {
        let mut phys = PhysMem::new(cfg.frames);
        phys.set_folio_runs(cfg.folio_runs);
        phys.set_folio_record_reuse(cfg.folio_record_reuse);
        phys.fork_runs = cfg.fork_runs;
        phys.zap_first_folded = cfg.zap_first_folded;
        phys.alloc.set_replay(cfg.buddy_replay);
        if cfg.nodes > 1 {
            // Only the zero page is in use yet: any layout fits.
            let ok = phys.set_nodes(cfg.nodes);
            debug_assert!(ok, "a fresh machine takes any node layout");
        }
        let mut pt = PageTables::new(cfg.arch, &mut phys).expect("memory for the first page table");
        pt.hw.features = cfg.hw;
        pt.set_pte_runs(cfg.pte_runs);
        pt.chain_steps = cfg.table_chain_steps;
        pt.set_keep_table_index(cfg.keep_table_index);
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
                numa_node: 0,
            },
        );
        Model {
            thp: cfg.thp.clone(),
            cfg,
            phys,
            procs,
            ids: AnonVmaIds::default(),
            uffd: Default::default(),
            uffd_fds: Default::default(),
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

    /// Whether the model implements `advice`: every named advice, and every
    /// value the kernel rejects (EINVAL, as there). A value 6.18 accepts
    /// but the model does not implement (MADV_NORMAL, MADV_WILLNEED,
    /// MADV_HWPOISON, ...) is not: the model answers ENOSYS.
    pub fn supports_advice(advice: Advice) -> bool {
        !matches!(advice, Advice::Other(_)) || !advice.is_kernel_valid()
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

    /// `machine memory SIZE`: the modelled machine's physical memory. Grows
    /// or shrinks the one memory zone; EINVAL below [`MIN_MEMORY`] or above
    /// what the architecture's physical address space holds
    /// ([`max_memory`]), EBUSY when frames above the new size were ever
    /// handed out (set it before the scenario populates memory).
    pub fn set_memory(&mut self, bytes: u64) -> Result<(), Errno> {
        if !(MIN_MEMORY..=max_memory(self.cfg.arch)).contains(&bytes) {
            return Err(Errno::EINVAL);
        }
        if !self.phys.set_frames(bytes / PAGE_SIZE) {
            return Err(Errno::EBUSY);
        }
        self.cfg.frames = self.phys.frames();
        Ok(())
    }

    /// Physical memory of the modelled machine, in bytes.
    pub fn memory(&self) -> u64 {
        self.phys.frames() * PAGE_SIZE
    }

    /// Select which seed changes run their previous algorithm.
    pub fn set_before(&mut self, before: crate::mm::batch::Before) {
        self.cfg.before = before;
    }
    pub fn before(&self) -> crate::mm::batch::Before {
        self.cfg.before
    }

    /// Select which proposed (post-6.18) changes run.
    pub fn set_after(&mut self, after: crate::mm::batch::After) {
        self.cfg.after = after;
    }
    pub fn after(&self) -> crate::mm::batch::After {
        self.cfg.after
    }

    /// Count a system call's fixed entry work in process `pid`: the
    /// syscall itself and the first VMA lookup.
    pub(crate) fn count_syscall(&self, pid: Pid) {
        if let Some(mm) = self.procs.get(&pid) {
            mm.count_syscall();
        }
    }

    /// Start (or stop) recording where batches and TLB invalidations happen
    /// ([`crate::core::hw::HwMark`]) in every process: attaches (or detaches)
    /// a [`crate::core::hw::HwTrace`] observer to each sink; starting drops
    /// old marks. Changes no count and no result.
    pub fn set_hw_tracing(&mut self, on: bool) {
        for mm in self.procs.values() {
            mm.pt.hw.set_tracing(on);
        }
        self.hw_tracing = on;
    }

    /// The marks recorded since tracing started, per process.
    pub fn take_hw_marks(&mut self) -> Vec<(Pid, crate::core::hw::HwMark)> {
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

    /// Rule coverage since the model started: hits per kernel rule
    /// ([`crate::core::rules`]), every process (exited ones included).
    pub fn coverage(&self) -> crate::core::rules::Coverage {
        let mut c = self.phys.hw.rules.coverage();
        for mm in self.procs.values() {
            c.add(&mm.pt.hw.rules.coverage());
        }
        c
    }

    /// Select the CPU features the TLB-maintenance accounting assumes.
    pub fn set_hw_features(&mut self, f: crate::core::hw::HwFeatures) {
        self.cfg.hw = f;
        for mm in self.procs.values_mut() {
            mm.pt.hw.features = f;
        }
    }

    /// PTE tables stored as affine runs, and PTE tables in all, over every
    /// process (`core/pgtable/store.rs`; no observable effect).
    pub fn pte_table_counts(&self) -> (usize, usize) {
        self.procs.values().fold((0, 0), |(c, t), mm| {
            let (c2, t2) = mm.pt.compact_table_count();
            (c + c2, t + t2)
        })
    }

    /// Compact every PTE table that is a few affine runs now (the write
    /// path does it for a table when a write goes to another one).
    pub fn compact_pte_tables(&mut self) {
        for mm in self.procs.values_mut() {
            mm.pt.compact_tables();
        }
    }

    /// Large-folio records the model holds: one per run of identical
    /// folios (one per folio with `folio_runs` off).
    pub fn large_folio_records(&mut self) -> usize {
        self.phys.large_records()
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
}
