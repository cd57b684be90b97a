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
//! Linux: arch/x86/mm/fault.c do_user_addr_fault() /
//! arch/arm64/mm/fault.c do_page_fault(), mm/memory.c
//! do_anonymous_page(), once per page.

use crate::core::addr::PAGE_SIZE;
use crate::core::hw::HwTally;
use crate::mm::fault::{order0_fault_is_plain, order0_write_run, order0_write_stretch, FaultEnv};
use crate::model::Model;
use crate::types::Pid;

/// What [`Model::write_fault_run_start`] saw before the template fault.
pub(crate) struct FaultRunStart {
    /// None PTEs from the template's page on that fault the same way.
    pages: u64,
    /// The mm's and the machine's counts before the template.
    mm_before: HwTally,
    phys_before: HwTally,
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
            mm_before: mm.pt.hw.tally(),
            phys_before: self.phys.hw.tally(),
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
        let Model {
            procs,
            phys,
            thp,
            ids,
            ..
        } = self;
        let Some(mm) = procs.get_mut(&pid) else {
            return 0;
        };
        if mm.rss_anon != s.rss + 1 || !order0_fault_is_plain(mm, phys, addr, pfn) {
            return 0;
        }
        let next = addr + PAGE_SIZE;
        let (base, step) = match tag {
            Some(t) => (t, 0),
            None => (next, PAGE_SIZE),
        };
        let mut env = FaultEnv { phys, thp, ids };
        let k = order0_write_run(mm, &mut env, next, s.pages - 1, base, step);
        mm.pt.hw.add_since(&s.mm_before, k);
        env.phys.hw.add_since(&s.phys_before, k);
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
