//! The buddy's replay journal (issue 14, `ModelConfig::buddy_replay`).
//!
//! The free lists are a deterministic function of their state and of the
//! requests applied to them. A workload that loops (mremap-batch-64k: each
//! iteration splits the same order-8 block into a folio stretch and three
//! table pages and its unmap merges them back) brings the lists back to
//! the same state again and again. The journal records a sequence of
//! requests — `alloc`, `alloc_run` (and `alloc_small_run`), `free`,
//! `free_range` on the one node — with their answers and the free-list
//! operations each did, from a state `S0`, until the operations recorded
//! cancel out (every block listed taken off again and vice versa, counted
//! per block and order): the lists are then provably back at `S0`, without
//! comparing them (a set's contents are its start plus the net of the
//! effective inserts and removes; `fresh`, `limit` and `later` do not
//! change while recording — a request that takes a never-used block spoils
//! the recording — and the allocated count is a function of the lists and
//! `fresh`).
//!
//! From then on the journal is *replayed*: while each request equals the
//! next recorded one, its recorded answer is given and its list operations
//! are deferred — the lists are not touched — since the state before it is
//! the recorded one (the same start, the same requests, nothing else
//! touched the lists: every other mutation settles the journal first).
//! When the cursor passes the end of the journal the lists are at `S0`
//! again, as they physically are. The first request that differs (or any
//! other use of the lists: a deferred free, a layout change, `alloc_on`)
//! materialises the lists — the operations of the requests replayed since
//! `S0` applied in order — and the journal goes on recording from there
//! (the requests replayed kept as its prefix), or is dropped.
//!
//! Nothing outside `core/phys.rs` reads the free lists: the frames handed
//! out and the allocated counts (kept exact on every replayed request) are
//! all the allocator shows. A loop that never closes costs the recording of
//! a bounded window now and then (`Journal::backoff`).
//! Linux: none — the kernel's free lists are the state itself; this is the
//! model's shortcut for answering the same requests from the same state.

use super::{FrameAllocator, Log};

/// Requests a recording may hold before it is given up.
const MAX_REQS: usize = 64;
/// List operations a recording may hold before it is given up.
const MAX_OPS: usize = 1024;
/// Blocks whose operations do not net out a recording may hold before it
/// is given up (a bound on the net's search: a workload that only
/// allocates, or frees far from where it allocates, gives up within a few
/// requests).
const MAX_OPEN: usize = 48;
/// Requests between the end of a failed recording and the next one,
/// first and at most (doubled after each failure).
const BACKOFF_MIN: u32 = 16;
const BACKOFF_MAX: u32 = 1 << 12;

/// What a request was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `alloc(order)`.
    Alloc,
    /// `alloc_run(order, max, cap)` (and `alloc_small_run`: order 0).
    Run,
    /// `free(pfn, order)`.
    Free,
    /// `free_range(pfn, n)`.
    FreeRange,
}

/// One recorded request and its answer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Req {
    pub(super) kind: Kind,
    pub(super) order: u8,
    /// `Run`: `max`; `Free`, `FreeRange`: the first frame.
    pub(super) a: u64,
    /// `Run`: `min(max, cap(first))`; `FreeRange`: `n`.
    pub(super) b: u64,
    /// The answer: the first frame (`Alloc`, `Run`) and the run's length.
    pub(super) first: u64,
    pub(super) n: u64,
    /// The node's allocated count after the request.
    pub(super) allocated: u64,
    /// End of the request's list operations in `Journal::ops`.
    ops_end: u32,
}

/// One effective free-list operation: `pfn` listed (`insert`) or taken
/// off in the list of `order`.
#[derive(Clone, Copy, Debug)]
struct ListOp {
    pfn: u64,
    order: u8,
    insert: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// The switch is off.
    Off,
    /// Nothing recorded; a recording starts when `gate` runs out.
    Idle,
    /// The lists are real; requests and their operations are logged.
    Recording,
    /// `reqs` is a closed cycle from the lists' physical state; requests
    /// up to `cursor` were answered from it, their operations deferred.
    Replaying,
}

#[derive(Clone, Debug)]
pub(crate) struct Journal {
    /// The fast test of every request: above 1, the request takes the
    /// plain path (and counts the gate down); otherwise the journal's.
    pub(super) gate: u32,
    pub(super) mode: Mode,
    pub(super) reqs: Vec<Req>,
    ops: Vec<ListOp>,
    /// Replaying: the requests answered since the lists' physical state
    /// (`reqs.len()`: a whole cycle, back at that state).
    pub(super) cursor: usize,
    /// Recording: the net operations per (frame, order) so far that are
    /// not zero (an entry is dropped when its count comes back to zero).
    net: Vec<(u64, u8, i8)>,
    /// Recording: the request took a never-used block (or failed).
    spoiled: bool,
    backoff: u32,
    /// Requests answered from the journal, materialisations (for tests).
    pub(super) hits: u64,
    pub(super) misses: u64,
    /// Runs matched but for their cap's answer (for tests).
    pub(super) cap_misses: u64,
}

impl Journal {
    pub(super) fn new(on: bool) -> Self {
        Journal {
            gate: if on { BACKOFF_MIN } else { u32::MAX },
            mode: if on { Mode::Idle } else { Mode::Off },
            reqs: Vec::new(),
            ops: Vec::new(),
            cursor: 0,
            net: Vec::new(),
            spoiled: false,
            backoff: BACKOFF_MIN,
            hits: 0,
            misses: 0,
            cap_misses: 0,
        }
    }

    pub(super) fn on(&self) -> bool {
        self.mode != Mode::Off
    }

    /// The next recorded request while replaying (the first after a
    /// whole cycle).
    #[inline(always)]
    pub(super) fn next(&self) -> Option<&Req> {
        if self.mode != Mode::Replaying {
            return None;
        }
        let i = if self.cursor == self.reqs.len() {
            0
        } else {
            self.cursor
        };
        self.reqs.get(i)
    }

    /// The next request was answered from the journal.
    #[inline(always)]
    pub(super) fn advance(&mut self) {
        let i = if self.cursor == self.reqs.len() {
            0
        } else {
            self.cursor
        };
        self.cursor = i + 1;
        self.hits += 1;
    }

    /// Idle: whether to start recording now (else the gate is set again).
    pub(super) fn start_due(&mut self, one_node: bool) -> bool {
        match self.mode {
            Mode::Off => {
                self.gate = u32::MAX;
                false
            }
            Mode::Idle if !one_node => {
                self.gate = BACKOFF_MAX;
                false
            }
            Mode::Idle => {
                self.reqs.clear();
                self.ops.clear();
                self.net.clear();
                self.mode = Mode::Recording;
                self.gate = 0;
                true
            }
            _ => true,
        }
    }

    /// Replaying, a request that is not the next one: the lists made what
    /// the requests answered since their physical state left them (the
    /// operations applied in order), the journal cut there and recording
    /// again from it (its prefix kept).
    pub(super) fn materialise(&mut self, node: &mut FrameAllocator) {
        debug_assert_eq!(self.mode, Mode::Replaying);
        self.misses += 1;
        let c = self.cursor;
        if c < self.reqs.len() {
            let end = if c == 0 {
                0
            } else {
                self.reqs[c - 1].ops_end as usize
            };
            for op in &self.ops[..end] {
                let set = &mut node.free[op.order as usize];
                let done = if op.insert {
                    set.insert(op.pfn)
                } else {
                    set.remove(&op.pfn)
                };
                debug_assert!(done, "a journal operation applies to its recorded state");
            }
            self.reqs.truncate(c);
            self.ops.truncate(end);
            self.net.clear();
            for i in 0..end {
                let op = self.ops[i];
                self.count(op);
            }
        } else {
            // A whole cycle: the lists are at its start, the journal's
            // operations net out; it goes on from its end.
            self.net.clear();
        }
        self.mode = Mode::Recording;
        self.gate = 0;
    }

    /// Anything other than a journal request is about to use the lists:
    /// materialised if replaying, the journal dropped.
    pub(super) fn settle(&mut self, node: &mut FrameAllocator) {
        match self.mode {
            Mode::Off | Mode::Idle => return,
            Mode::Replaying => self.materialise(node),
            Mode::Recording => {}
        }
        self.idle();
    }

    fn idle(&mut self) {
        self.mode = Mode::Idle;
        self.gate = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        self.reqs.clear();
        self.ops.clear();
        self.net.clear();
    }

    /// Recording: before a request's operations.
    pub(super) fn begin(&mut self) {
        debug_assert_eq!(self.mode, Mode::Recording);
        self.spoiled = false;
    }

    /// Recording: the request done, with its answer; the journal closed
    /// (replaying from the lists' state now) when its operations net out,
    /// given up when the request took a never-used block, failed, or the
    /// journal grew too long.
    pub(super) fn end(
        &mut self,
        kind: Kind,
        order: u8,
        a: u64,
        b: u64,
        answer: Option<(u64, u64)>,
        allocated: u64,
    ) {
        let fails = matches!(kind, Kind::Alloc | Kind::Run) && answer.is_none();
        if self.spoiled || fails || self.reqs.len() >= MAX_REQS || self.ops.len() > MAX_OPS {
            self.idle();
            return;
        }
        let (first, n) = answer.unwrap_or((0, 0));
        self.reqs.push(Req {
            kind,
            order,
            a,
            b,
            first,
            n,
            allocated,
            ops_end: self.ops.len() as u32,
        });
        if self.net.is_empty() {
            self.mode = Mode::Replaying;
            self.cursor = self.reqs.len();
            self.gate = 0;
            self.backoff = BACKOFF_MIN;
            self.net.clear();
        }
    }

    fn count(&mut self, op: ListOp) {
        let d: i8 = if op.insert { 1 } else { -1 };
        let i = match self
            .net
            .iter()
            .position(|&(p, o, _)| p == op.pfn && o == op.order)
        {
            Some(i) => i,
            None => {
                self.net.push((op.pfn, op.order, 0));
                self.net.len() - 1
            }
        };
        let now = self.net[i].2 + d;
        if now == 0 {
            self.net.swap_remove(i);
        } else {
            self.net[i].2 = now;
            if self.net.len() > MAX_OPEN {
                self.spoiled = true;
            }
        }
    }
}

impl Log for Journal {
    const ON: bool = true;
    fn op(&mut self, order: u8, pfn: u64, insert: bool) {
        let op = ListOp { pfn, order, insert };
        self.ops.push(op);
        self.count(op);
    }
    fn fresh(&mut self) {
        self.spoiled = true;
    }
}
