//! A program's write over a stretch of none PTEs, faulted in one step
//! (issue 14): the first page's fault goes through the access path's
//! own per-page steps as the template, and the pages after it — each
//! the same order-0 write fault of crate::mm::fault's
//! do_anonymous_page() on the next none PTE of the same table and VMA —
//! are done as one state change with the template's events, kernel
//! calls and rule hits added once per page. The access path
//! (crate::sys::access `access_range()`) brackets the fault of a page
//! with [`Model::write_fault_run_start`] and [`Model::write_fault_run_finish`].
//!
//! A write over none PTEs whose first fault maps a large folio (mTHP)
//! goes on the same way by blocks: [`Model::fault_stretch`] makes the
//! folios after it as a continuation of its folio run and PTE run
//! ([`crate::mm::fault::fault_large_stretch`]), counting what the first
//! fault and its writes counted once per block.
//!
//! Linux: arch/x86/mm/fault.c do_user_addr_fault() /
//! arch/arm64/mm/fault.c do_page_fault(), mm/memory.c
//! do_anonymous_page(), once per page.

use crate::core::addr::PAGE_SIZE;
use crate::mm::fault::{order0_fault_is_plain, order0_write_run, order0_write_stretch};
use crate::model::Model;
use crate::types::Pid;

/// What [`Model::write_fault_run_start`] saw before the template fault.
pub(crate) struct FaultRunStart {
    /// None PTEs from the template's page on that fault the same way.
    pages: u64,
    /// The counts before the template (its events are repeated; an
    /// order-0 fault moves no statistic). Boxed: a few kilobytes, moved
    /// out of the start and into the finish.
    before: Box<FaultTally>,
    rss: u64,
}

impl Model {
    /// Before the fault of the page at `addr` in `access_range()`: when
    /// the write would fault at least two pages from `addr` (at most to
    /// `end`, one PMD slot) the same way ([`order0_write_stretch`]), the
    /// counts now, so that [`Model::write_fault_run_finish`] can repeat
    /// what the template fault and its store count. `None` — the caller
    /// goes on page by page — for a read, with
    /// `ModelConfig::stretch_steps` off, under an observer (marks are
    /// per fault) or when the stretch does not apply.
    pub(crate) fn write_fault_run_start(
        &self,
        pid: Pid,
        addr: u64,
        end: u64,
        write: bool,
    ) -> Option<FaultRunStart> {
        if !write || !self.cfg.stretch_steps {
            return None;
        }
        let mm = self.procs.get(&pid)?;
        if mm.pt.hw.observing() || self.phys.hw.observing() {
            return None;
        }
        let pages = order0_write_stretch(mm, &self.thp, addr, end);
        (pages >= 2).then(|| FaultRunStart {
            pages,
            before: Box::new(FaultTally::take(self, pid)),
            rss: mm.rss_anon,
        })
    }

    /// After the template — the page at `addr` faulted (mapping `pfn`),
    /// stored to and tagged by `access_range()`'s own steps: if that was a
    /// plain order-0 fault ([`order0_fault_is_plain`]), the pages after it
    /// in one step ([`order0_write_run`]; tag `tag`, or each page's
    /// address), each counting what the template counted since `s` (the
    /// mm's and the machine's events and kernel calls, and the rule
    /// hits). Returns the pages done after the template.
    pub(crate) fn write_fault_run_finish(
        &mut self,
        pid: Pid,
        s: FaultRunStart,
        addr: u64,
        pfn: crate::core::addr::Pfn,
        tag: Option<u64>,
    ) -> u64 {
        let Some((mm, mut env)) = self.fault_parts(pid) else {
            return 0;
        };
        if mm.rss_anon != s.rss + 1 || !order0_fault_is_plain(mm, env.phys, addr, pfn) {
            return 0;
        }
        let next = addr + PAGE_SIZE;
        let (base, step) = match tag {
            Some(t) => (t, 0),
            None => (next, PAGE_SIZE),
        };
        let k = order0_write_run(mm, &mut env, next, s.pages - 1, base, step);
        mm.pt.hw.add_since(&s.before.mm, k);
        env.phys.hw.add_since(&s.before.phys, k);
        if k > 0 {
            FAULT_RUNS.with(|c| c.set(c.get() + 1));
        }
        k
    }
}

thread_local! {
    /// Fault runs taken on this thread ([`fault_runs_taken`]).
    static FAULT_RUNS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many fault runs ([`Model::write_fault_run_finish`] doing at least
/// one page) this thread has taken so far: a diagnostic for the tests
/// that check the property comparing the run with the faults one at a
/// time compares something (it changes nothing the model computes or
/// shows).
pub fn fault_runs_taken() -> u64 {
    FAULT_RUNS.with(|c| c.get())
}

/// A write fault that mapped a large folio of `nr` pages at `head` from
/// its first page `at`, and the counts from before it: the first of a
/// stretch of such faults ([`Model::fault_stretch`]).
pub(crate) struct StretchFirst {
    pub(crate) at: u64,
    /// The page after the folio: the stretch starts here when the access
    /// goes on to it with nothing else in between.
    pub(crate) next: u64,
    pub(crate) head: crate::core::addr::Pfn,
    pub(crate) nr: u64,
    /// Boxed: the tally is a few kilobytes, and the access loop moves this
    /// record twice or three times per stretch.
    pub(crate) before: Box<FaultTally>,
}

/// The counts a fault adds to: both event sinks (the mm's and the
/// machine's) and the kernel's statistics.
pub(crate) struct FaultTally {
    mm: crate::core::hw::HwTally,
    phys: crate::core::hw::HwTally,
    stats: crate::core::stats::Stats,
}

impl FaultTally {
    pub(crate) fn take(m: &Model, pid: Pid) -> FaultTally {
        FaultTally {
            mm: m.procs[&pid].pt.hw.tally(),
            phys: m.phys.hw.tally(),
            stats: m.phys.stats.clone(),
        }
    }

    /// [`FaultTally::take`] in a box: the box a stretch's tally was kept in
    /// last on this thread, written over in place, or a new one. Every
    /// write fault that may start a stretch takes one (issue 14: a new box
    /// and the copies through the stack cost about 4 % of
    /// mremap-batch-64k); [`FaultTally::recycle`] gives it back.
    pub(crate) fn boxed(m: &Model, pid: Pid) -> Box<FaultTally> {
        match SPARE_TALLY.with(|s| s.take()) {
            Some(mut t) => {
                m.procs[&pid].pt.hw.tally_into(&mut t.mm);
                m.phys.hw.tally_into(&mut t.phys);
                m.phys.stats.copy_into(&mut t.stats);
                t
            }
            None => Box::new(FaultTally::take(m, pid)),
        }
    }

    /// Keep `t` for the next [`FaultTally::boxed`] on this thread (only
    /// storage: what it holds is written over before it is read again).
    pub(crate) fn recycle(t: Box<FaultTally>) {
        SPARE_TALLY.with(|s| s.set(Some(t)));
    }
}

thread_local! {
    /// The box [`FaultTally::recycle`] kept (storage only: never read).
    static SPARE_TALLY: std::cell::Cell<Option<Box<FaultTally>>> =
        const { std::cell::Cell::new(None) };
}

impl Model {
    /// Whether a write fault at `addr` may be the first of a stretch: its
    /// PTE table exists and its VMA has an anon_vma (so the fault neither
    /// allocates one nor prepares the other, as the faults after it
    /// would not) and allows an mTHP order (else the fault maps an order-0
    /// page, which the order-0 run takes), and no observer records the
    /// sinks' marks (the stretch leaves out the marks of the faults it
    /// repeats).
    pub(crate) fn stretch_watchable(&self, pid: Pid, addr: u64) -> bool {
        let Some(mm) = self.procs.get(&pid) else {
            return false;
        };
        matches!(mm.pt.pmd(addr), crate::core::pgtable::PmdSlot::Table(_))
            && mm.vmas.find(addr).is_some_and(|v| {
                // anon_vma_prepare() counts nothing (mm/mm.rs), so a fault
                // that prepares the anon_vma counts what the faults after it
                // count; `stretch_first_fault` off keeps the old rule.
                (v.anon_vma.is_some() || self.cfg.stretch_first_fault)
                    && crate::mm::fault::pte_mapped_orders_allowed(mm, v, &self.thp)
            })
            && !mm.pt.hw.observing()
            && !self.phys.hw.observing()
    }

    /// Before the first write fault of a PMD slot with no PTE table, in a
    /// VMA where that fault may start a stretch ([`Model::fault_stretch`]):
    /// the fault's `pte_alloc()` chain (PUD, PMD, PTE tables as missing),
    /// done first, so that the tally the stretch repeats is taken after it
    /// and the fault itself is one the faults after it repeat exactly
    /// (issue 14: the first fault is then the template, and no second full
    /// fault is needed). Only where handle_fault() reaches `pte_alloc()`
    /// with nothing counted or changed on the way but the fault's entry
    /// events (which do not depend on the tables): the VMA is writable,
    /// no guard marker, no PMD leaf or NUMA hint (the slot is none), and
    /// no PMD THP is tried (F1 would look at the none slot first). The
    /// allocations count what they count inside the fault
    /// (`PtPageAlloc`, `PudStore`, `PmdStore`; nothing else), so only
    /// their order among the fault's events changes, which no count sees
    /// (not taken under an observer, which records marks in order). When
    /// memory runs out the fault finds the same tables and fails the same
    /// way. Returns whether the tables were made here.
    /// Linux: mm/memory.c __handle_mm_fault() (p4d/pud/pmd_alloc()),
    /// do_anonymous_page() (pte_alloc()).
    pub(crate) fn stretch_first_tables(&mut self, pid: Pid, addr: u64) -> bool {
        if !self.cfg.stretch_first_fault || !self.cfg.stretch_steps {
            return false;
        }
        let Model {
            procs, phys, thp, ..
        } = self;
        let Some(mm) = procs.get_mut(&pid) else {
            return false;
        };
        if mm.pt.hw.observing() || phys.hw.observing() {
            return false;
        }
        if mm.pt.pmd(addr) != crate::core::pgtable::PmdSlot::None {
            return false;
        }
        let fits = mm.vmas.find(addr).is_some_and(|v| {
            v.flags.contains(crate::core::vma::VmFlags::WRITE)
                && crate::mm::fault::pte_mapped_orders_allowed(mm, v, thp)
                && !crate::mm::fault::pmd_thp_allowed(mm, thp, v, addr)
        });
        // No guard marker: a marker is a PTE, and the slot has no PTE
        // table (`crate::mm::marker::is_guard()` would walk to find none).
        if !fits {
            return false;
        }
        // The slot was seen none above (nothing changed since).
        let made = mm.pt.pte_alloc_from_none(addr, phys).is_some();
        if made {
            crate::core::diag::took(crate::core::diag::Step::FirstFaultTables);
        }
        made
    }

    /// A write from `addr` (a none PTE in a PMD slot whose PTE table
    /// exists; at most to `end`, inside the slot) over whole blocks of
    /// none PTEs, faulted in one step with the counts written out
    /// (`ModelConfig::fault_fused`): the first block's fault
    /// ([`crate::mm::fault::fused_first_fault`]), its pages' tags (`tag`,
    /// or each page's address), then the blocks after it as a fault
    /// stretch ([`crate::mm::fault::fault_large_stretch`]) with each
    /// block's counts written out
    /// ([`crate::mm::fault::count_fused_faults`]) instead of the first
    /// fault's tallied. What the general path does when its first fault
    /// is the stretch's template. `fresh`: [`Model::stretch_first_tables`]
    /// has just made the slot's PTE table (all none; the fused run then
    /// does not ask, `ModelConfig::fault_fresh_table`). Returns the pages
    /// done (0: nothing changed or counted; the caller goes on as before).
    pub(crate) fn write_fused(
        &mut self,
        pid: Pid,
        addr: u64,
        end: u64,
        tag: Option<u64>,
        fresh: bool,
    ) -> u64 {
        if !self.cfg.fault_fused || !self.cfg.stretch_steps {
            return 0;
        }
        let as_run = self.cfg.fault_fused_run;
        let fresh = fresh && self.cfg.fault_fresh_table;
        let Some((mm, mut env)) = self.fault_parts(pid) else {
            return 0;
        };
        if mm.pt.hw.observing() || env.phys.hw.observing() {
            return 0;
        }
        let (base, step) = tag.map_or((addr, PAGE_SIZE), |t| (t, 0));
        // Every block's folio made at once where they follow one another
        // (`ModelConfig::fault_fused_run`): the same state and counts.
        if as_run {
            if let Some((made, nr)) =
                crate::mm::fault::fused_write_run(mm, &mut env, addr, end, base, step, fresh)
            {
                crate::core::diag::took(crate::core::diag::Step::FaultFused);
                crate::core::diag::took(crate::core::diag::Step::FaultFusedRun);
                return made * nr;
            }
        }
        let Some((folio, nr)) = crate::mm::fault::fused_first_fault(mm, &mut env, addr, end) else {
            return 0;
        };
        env.phys.set_large_run_tags(folio.head, nr, base, step);
        let blocks = (end - addr) / (nr * PAGE_SIZE) - 1;
        let made = match blocks {
            0 => 0,
            _ => crate::mm::fault::fault_large_stretch(mm, &mut env, addr, folio.head, nr, blocks),
        };
        if made > 0 {
            crate::mm::fault::count_fused_faults(mm, env.phys, nr, made);
        }
        crate::core::diag::took(crate::core::diag::Step::FaultFused);
        (1 + made) * nr
    }

    /// The write faults of up to `blocks` blocks of none PTEs after the
    /// large folio of `t`, which the access has just faulted in and
    /// written whole, in one step where each would repeat that fault and
    /// its writes ([`crate::mm::fault::fault_large_stretch`]): the folios
    /// made and mapped at once, and what the first fault and its writes
    /// counted (page fault, lookups, loads and stores, rule hits, kernel
    /// calls, statistics, the user stores) added once per block.
    /// The blocks taken.
    pub(crate) fn fault_stretch(&mut self, pid: Pid, t: &StretchFirst, blocks: u64) -> u64 {
        if blocks == 0 {
            return 0;
        }
        let Some((mm, mut env)) = self.fault_parts(pid) else {
            return 0;
        };
        let made = crate::mm::fault::fault_large_stretch(mm, &mut env, t.at, t.head, t.nr, blocks);
        if made == 0 {
            return 0;
        }
        mm.pt.hw.add_since(&t.before.mm, made);
        env.phys.hw.add_since(&t.before.phys, made);
        env.phys.stats.add_since(&t.before.stats, made as i64);
        crate::core::diag::took(crate::core::diag::Step::FaultStretch);
        made
    }
}
