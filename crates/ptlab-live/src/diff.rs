//! `ptlab diff`: run a scenario on the model and on the live kernel in
//! lockstep and compare what they show.
//!
//! [`DiffBackend`] forwards every operation to both backends and compares
//! the results (return values, errnos, SIGSEGV). After every statement that
//! executed an operation it compares the observations of every process:
//! maps (start, end, permissions, VmFlags, Rss, AnonHugePages), every page
//! (state, folio order and index, PMD or PTE mapping, pagemap bit 56,
//! kpageflags anon-exclusive, kpagecount, tag) and the THP counter deltas.
//! Frames are compared structurally: live frames are matched to model
//! frames as a bijection over all processes (same folio grouping, same
//! sharing), never by value.
//!
//! The interpreter sees the model's results and observations, so the
//! scenario's own `expect` lines are evaluated as `ptlab run` would.

use crate::live::{LiveBackend, LiveCaps, LiveError};
use ptlab_model::observe::{render_page_runs, PageRuns};
use ptlab_model::{
    ArchKind, Call, MapFlags, Model, ModelConfig, MremapFlags, Observation, PageState, ThpKnob,
    ThpMode, PAGE_SIZE, PMD_SIZE,
};
use ptlab_scenario::{
    Backend, BackendError, FailureKind, ModelBackend, ParseError, RunOptions, RunReport,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

/// Options for a diff run.
#[derive(Clone, Debug)]
pub struct DiffOptions {
    /// Page-table format of the model.
    pub arch: ArchKind,
    /// Compare after every statement (otherwise only at `observe`/`expect`
    /// statements and at the end).
    pub every_step: bool,
    /// Above this many pages of scenario address space, per-statement
    /// comparison is switched off (with a note) to keep runs fast.
    pub page_budget: u64,
    /// Keep at most this many divergent steps.
    pub max_divergences: usize,
    /// Statement limit passed to the interpreter.
    pub max_steps: Option<u64>,
    /// Model configuration to use instead of [`machine_model_config`]
    /// (tests use a deliberately wrong one to check that divergences are
    /// found and reported).
    pub model_config: Option<ModelConfig>,
    /// Budgets of the live side (crate::budget): a statement over one stops
    /// the run (a partial result, never a divergence).
    pub limits: crate::budget::LiveLimits,
    /// Seed changes the model runs with their previous algorithm
    /// (`--before`); what the kernel shows must not depend on it.
    pub before: ptlab_model::Before,
    /// Values for the scenario's `param` statements (`--param`).
    pub params: Vec<(String, String)>,
    /// At a per-statement comparison, re-use the kpageflags, kpagecount
    /// and tag reads of pages that no call since the previous comparison
    /// can have changed (crate::incremental; docs/live.md, "How fast a
    /// diff is"), reading everything every
    /// [`crate::incremental::FULL_EVERY`] comparisons and once more at the
    /// end. Off (`--read-everything`): every comparison reads everything.
    pub incremental: bool,
    /// Check every comparison that re-uses reads against a full read of
    /// the same moment; pages whose re-used reads were stale are reported
    /// in a note (tests of the re-use rules).
    pub verify_incremental: bool,
    /// The live side counts, per step, only what the THP counters did
    /// during this run's own statements (crate::live::COUNTER_LOCK), so
    /// that runs of this process that go on at the same time (`ptlab fuzz
    /// --jobs`) do not see each other's counter moves.
    pub attribute_counters: bool,
    /// Read only the THP counters of the folio orders the run's own
    /// statements can move (crate::live::LiveBackend::set_narrow_counters);
    /// off (`--read-everything`): every counter at every comparison.
    pub narrow_counters: bool,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            arch: ArchKind::X86_64,
            every_step: true,
            page_budget: 1 << 17,
            max_divergences: 20,
            max_steps: None,
            model_config: None,
            before: ptlab_model::Before::empty(),
            params: Vec::new(),
            limits: Default::default(),
            incremental: true,
            verify_incremental: false,
            attribute_counters: false,
            narrow_counters: true,
        }
    }
}

/// One divergent comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Line of the statement after which it was seen (0: before any).
    pub line: u32,
    /// That statement's text.
    pub stmt: String,
    /// Enclosing loops (line, iteration).
    pub loops: Vec<(u32, u64)>,
    /// Process it concerns (empty for global counters).
    pub process: String,
    /// `result`, `placement`, `maps`, `pages`, `frames`, `stats`, `processes`.
    pub kind: String,
    /// One-line description.
    pub summary: String,
    /// What the live kernel showed, one item per line.
    pub live: Vec<String>,
    /// What the model showed, one item per line.
    pub model: Vec<String>,
    /// Further explanation (per-page differences), printed below the table.
    pub detail: Vec<String>,
    /// The statement it was seen in or after, counted from 1 in the order
    /// the statements ran (loops unrolled; the interpreter's
    /// `statements_executed` once that statement has run). A re-run that
    /// stops after it ([`diff_source`]) has re-checked it.
    pub step: u64,
    /// How many ranges khugepaged (the kernel thread) collapsed on the
    /// machine between the run's start and the comparison that found this
    /// divergence (`khugepaged/pages_collapsed`, which only the thread's
    /// scan counts: Linux mm/khugepaged.c khugepaged_scan_mm_slot();
    /// MADV_COLLAPSE's madvise_collapse() does not). Background work no
    /// statement made; [`crate::fuzz`] classifies a case whose first
    /// divergence has it as background, on every run alike.
    pub khugepaged: u64,
}

impl Divergence {
    /// Text rendering with a side-by-side table.
    pub fn render(&self, file: &str) -> String {
        let mut s = String::new();
        let _ = write!(s, "{file}:{}: ", self.line);
        if self.process.is_empty() {
            let _ = write!(s, "{}: {}", self.kind, self.summary);
        } else {
            let _ = write!(
                s,
                "{} of process {}: {}",
                self.kind, self.process, self.summary
            );
        }
        let _ = write!(
            s,
            "\n    after: {}",
            if self.stmt.is_empty() {
                "(start)"
            } else {
                &self.stmt
            }
        );
        for (l, i) in &self.loops {
            let _ = write!(s, " [repeat at line {l}, iteration {i}]");
        }
        s.push('\n');
        s.push_str(&side_by_side(&self.live, &self.model));
        for d in &self.detail {
            let _ = writeln!(s, "    {d}");
        }
        s
    }
}

/// Two columns: live | model, marking rows that differ.
pub fn side_by_side(live: &[String], model: &[String]) -> String {
    if live.is_empty() && model.is_empty() {
        return String::new();
    }
    let w = live
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(4, 72);
    let mut s = String::new();
    let _ = writeln!(s, "      {:<w$} | model", "live");
    for i in 0..live.len().max(model.len()) {
        let l = live.get(i).map_or("", String::as_str);
        let m = model.get(i).map_or("", String::as_str);
        let mark = if l == m { ' ' } else { '*' };
        let _ = writeln!(s, "    {mark} {l:<w$} | {m}");
    }
    s
}

/// What the comparison concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffOutcome {
    /// Both backends showed the same thing at every comparison.
    Agree,
    /// At least one divergence.
    Diverge,
    /// No divergence, but the run stopped early (an operation the model
    /// does not support, a runtime error, a live-harness problem).
    Partial,
}

/// Everything a diff run produced.
#[derive(Clone, Debug)]
pub struct DiffReport {
    pub file: String,
    /// The interpreter's report (the scenario's own expectations, on the model).
    pub run: RunReport,
    pub divergences: Vec<Divergence>,
    /// Divergent steps beyond `max_divergences` (counted only).
    pub more_divergences: u64,
    /// Why the run stopped early: (line, message).
    pub stopped: Option<(u32, String)>,
    /// The stop was an operation the model does not support.
    pub unsupported_by_model: bool,
    pub notes: Vec<String>,
    /// Comparisons made.
    pub comparisons: u64,
    /// Pages ptlab could not fully observe live, by reason.
    pub caps: Option<LiveCaps>,
    /// What the comparisons cost (`PTLAB_DIFF_TIMING=1` prints it).
    pub timing: DiffTiming,
    /// The folio orders (bit `o`; `/proc/vmstat` counters are order 9's)
    /// whose THP counters the run's own statements could move
    /// ([`crate::reach::CounterReach::orders_reached`]; all when unknown).
    pub counter_orders_reached: u16,
}

/// Time spent comparing and the reads that cost most of it.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiffTiming {
    /// All comparisons together, and the longest one.
    pub compare: std::time::Duration,
    pub compare_max: std::time::Duration,
    /// Of that, observing the live side.
    pub observe_live: std::time::Duration,
    /// Of that, observing the model.
    pub observe_model: std::time::Duration,
    /// The live side's time by source.
    pub live: crate::live::ObserveTiming,
    pub reads: crate::kernel::ReadCounters,
    /// What the incremental observer re-used.
    pub incremental: crate::incremental::IncrementalStats,
    /// Comparisons that re-used reads: their time and number.
    pub reusing: (std::time::Duration, u64),
    /// Comparisons that read everything: their time and number.
    pub reading_all: (std::time::Duration, u64),
    /// The whole run, from when the backend held the knob lock.
    pub run: std::time::Duration,
    /// Comparing whole pages' bytes (`compare_page_bytes`): the time,
    /// the pages, and the requests to the workers that loaded them.
    pub page_bytes: (std::time::Duration, u64, u64),
    /// Statements of a run beside others that took no counter lock (they
    /// could move no compared counter: crate::reach).
    pub unlocked: u64,
    /// CPU time of ptlab's thread in comparisons that re-used reads and in
    /// those that read everything (user and system: the kernel's work for
    /// the /proc reads counts, the worker's tag loads do not): less
    /// affected by other load on the machine than the wall times.
    pub reusing_cpu: std::time::Duration,
    pub reading_all_cpu: std::time::Duration,
    /// Starting both sides: the model's configuration, the live backend
    /// (its knob lock, counter files, the `main` worker's fork and first
    /// answer, its own VMAs, the counter base).
    pub setup: std::time::Duration,
    /// Running the statements' operations on both sides (not THP knob
    /// writes, `swap` and `use_zero_page`: [`Self::global_calls`]).
    pub calls: std::time::Duration,
    /// Of [`Self::calls`], on the model.
    pub model_calls: std::time::Duration,
    /// THP knob writes, swap areas made and replaced, `use_zero_page`.
    pub global_calls: std::time::Duration,
    /// Ending the run: telling the workers to exit and waiting for each
    /// (`exit_mm()` frees its memory), then putting back the knobs and
    /// removing the swap area (swapoff).
    pub end_workers: std::time::Duration,
    pub end_restore: std::time::Duration,
    /// Re-runs of a scenario whose counters differed ([`diff_source`]):
    /// their number and wall time.
    pub reruns: (std::time::Duration, u32),
    /// The run's swap area was one an earlier run kept
    /// ([`crate::knobs::set_swap_retention`]).
    pub swap_reused: bool,
}

/// CPU time of the calling thread (user and system).
fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl DiffTiming {
    /// One line for `PTLAB_DIFF_TIMING=1`.
    pub fn render(&self, comparisons: u64) -> String {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let avg = |d: std::time::Duration| ms(d) / comparisons.max(1) as f64;
        let r = &self.reads;
        let l = &self.live;
        let each = |(d, n): (std::time::Duration, u64)| ms(d) / n.max(1) as f64;
        format!(
            "timing: run {:.2} s after the knob lock; {comparisons} comparisons, {:.1} ms in all, \
             {:.3} ms each on average ({} re-using reads: {:.3} ms each, {:.3} ms of CPU; {} \
             reading everything: {:.3} ms each, {:.3} ms of CPU; longest {:.3} ms; observing the kernel {:.3} ms on average: smaps {:.3}, pagemap \
             {:.3}, frames {:.3}, tags {:.3} ({} requests, {} pages), counters {:.3}; observing \
             the model {:.3}); \
             kpageflags {} reads of {} frames, kpagecount {} reads of {} frames; {} observations \
             re-used reads ({} pages re-used, {} read), {} read everything; whole pages' bytes \
             {:.3} ms on average ({} pages in {} requests)",
            self.run.as_secs_f64(),
            ms(self.compare),
            avg(self.compare),
            self.reusing.1,
            each(self.reusing),
            each((self.reusing_cpu, self.reusing.1)),
            self.reading_all.1,
            each(self.reading_all),
            each((self.reading_all_cpu, self.reading_all.1)),
            ms(self.compare_max),
            avg(self.observe_live),
            avg(l.smaps),
            avg(l.pagemap),
            avg(l.frames),
            avg(l.tags),
            l.tag_requests,
            l.tags_loaded,
            avg(l.counters),
            avg(self.observe_model),
            r.kpageflags_reads,
            r.kpageflags_frames,
            r.kpagecount_reads,
            r.kpagecount_frames,
            self.incremental.incremental,
            self.incremental.pages_reused,
            self.incremental.pages_read,
            self.incremental.full,
            avg(self.page_bytes.0),
            self.page_bytes.1,
            self.page_bytes.2,
        )
    }
}

impl DiffReport {
    pub fn outcome(&self) -> DiffOutcome {
        if !self.divergences.is_empty() {
            DiffOutcome::Diverge
        } else if self.stopped.is_some() {
            DiffOutcome::Partial
        } else {
            DiffOutcome::Agree
        }
    }

    /// Number of distinct statements after which something diverged.
    pub fn divergent_steps(&self) -> usize {
        type Step<'a> = (u32, &'a str, &'a [(u32, u64)]);
        let mut steps: Vec<Step> = self
            .divergences
            .iter()
            .map(|d| (d.line, d.stmt.as_str(), d.loops.as_slice()))
            .collect();
        steps.dedup();
        steps.len()
    }

    /// The first divergence, if any.
    pub fn first(&self) -> Option<&Divergence> {
        self.divergences.first()
    }

    /// Readable report: the first divergence in full, later ones by line.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        if let Some(c) = self.caps {
            if !c.frames {
                let _ = writeln!(
                    s,
                    "note: not root: frame numbers, kpageflags and kpagecount are unreadable; \
                     folio order/index, AX, cnt and frame sharing are not compared"
                );
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        if let Some(first) = self.divergences.first() {
            s.push_str(&first.render(&self.file));
            // Further divergences at the same step, in full; later steps by line.
            for d in self
                .divergences
                .iter()
                .skip(1)
                .filter(|d| d.line == first.line && d.stmt == first.stmt)
            {
                s.push_str(&d.render(&self.file));
            }
            let later: Vec<String> = self
                .divergences
                .iter()
                .filter(|d| !(d.line == first.line && d.stmt == first.stmt))
                .map(|d| format!("{}:{} ({})", self.file, d.line, d.kind))
                .collect();
            if !later.is_empty() || self.more_divergences > 0 {
                let _ = writeln!(
                    s,
                    "later divergences (often consequences of the first): {}{}",
                    later.join(", "),
                    if self.more_divergences > 0 {
                        format!(" and {} more", self.more_divergences)
                    } else {
                        String::new()
                    }
                );
            }
        }
        if let Some((line, msg)) = &self.stopped {
            let why = if self.unsupported_by_model {
                "unsupported by the model"
            } else {
                "stopped"
            };
            let _ = writeln!(s, "{}:{line}: {why}: {msg}", self.file);
        }
        let expect_failures = self
            .run
            .failures
            .iter()
            .filter(|f| f.kind != FailureKind::Runtime)
            .count();
        if expect_failures > 0 {
            let _ = writeln!(
                s,
                "note: {expect_failures} of the scenario's own checks failed on the model (see `ptlab run`)"
            );
        }
        let outcome = match self.outcome() {
            DiffOutcome::Agree => format!(
                "AGREE: {} — model and kernel agree ({} comparisons, {} statements)",
                self.file, self.comparisons, self.run.statements_executed
            ),
            DiffOutcome::Diverge => {
                let steps = self.divergent_steps();
                format!(
                    "DIVERGE: {} — first divergence at {}:{} ({steps} divergent step{}{})",
                    self.file,
                    self.file,
                    self.divergences[0].line,
                    if steps == 1 { "" } else { "s" },
                    if self.more_divergences > 0 {
                        " or more"
                    } else {
                        ""
                    }
                )
            }
            DiffOutcome::Partial => format!(
                "PARTIAL: {} — agree up to line {} ({} comparisons), then stopped",
                self.file,
                self.stopped.as_ref().map_or(0, |s| s.0),
                self.comparisons
            ),
        };
        let _ = writeln!(s, "{outcome}");
        s
    }

    /// JSON form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "diff",
            "file": self.file,
            "outcome": match self.outcome() { DiffOutcome::Agree => "agree", DiffOutcome::Diverge => "diverge", DiffOutcome::Partial => "partial" },
            "comparisons": self.comparisons,
            "stopped": self.stopped.as_ref().map(|(l, m)| serde_json::json!({"line": l, "message": m, "unsupported_by_model": self.unsupported_by_model})),
            "notes": self.notes,
            "divergences": self.divergences.iter().map(|d| serde_json::json!({
                "line": d.line, "statement": d.stmt, "process": d.process, "kind": d.kind,
                "summary": d.summary, "live": d.live, "model": d.model, "detail": d.detail,
                "loops": d.loops.iter().map(|(l, i)| serde_json::json!({"line": l, "iteration": i})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// Why a diff could not run.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Live(#[from] LiveError),
}

/// A swap slot as pagemap reports it: (type, offset).
type SwapSlot = (u8, u64);

/// A map keyed by frame numbers or swap slots, with a cheap hash (the
/// frame bijection takes two lookups and two inserts per present page).
type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<ptlab_model::addr::PfnHasher>>;

/// Live frame ↔ model frame, first seen at (process, address); a
/// process is its index in `procs` (no string per page).
#[derive(Default)]
struct FrameMatcher {
    procs: Vec<String>,
    l2m: FastMap<u64, (u64, usize, u64)>,
    m2l: FastMap<u64, (u64, usize, u64)>,
    /// Swap slots `(type, offset)`, live ↔ model, also as a bijection.
    slots_l2m: FastMap<SwapSlot, (SwapSlot, usize, u64)>,
    slots_m2l: FastMap<SwapSlot, (SwapSlot, usize, u64)>,
}

impl FrameMatcher {
    /// Empty, keeping the maps' room (the next comparison has about as
    /// many frames).
    fn clear(&mut self) {
        self.procs.clear();
        self.l2m.clear();
        self.m2l.clear();
        self.slots_l2m.clear();
        self.slots_m2l.clear();
    }

    /// The index of process `proc`.
    fn proc_id(&mut self, proc: &str) -> usize {
        match self.procs.iter().position(|p| p == proc) {
            Some(i) => i,
            None => {
                self.procs.push(proc.to_string());
                self.procs.len() - 1
            }
        }
    }

    fn check(&mut self, lp: u64, mp: u64, proc: usize, addr: u64) -> Option<String> {
        use std::collections::hash_map::Entry;
        // One lookup per map (this runs for every present page): a frame
        // seen before must pair with the same frame; a new pair is
        // recorded only when both checks pass.
        let l = self.l2m.entry(lp);
        if let Entry::Occupied(o) = &l {
            let (m0, p0, a0) = *o.get();
            if m0 != mp {
                let p0 = &self.procs[p0];
                return Some(format!(
                    "live: same frame as {p0}:{a0:#x}; model: a different frame"
                ));
            }
        }
        let m = self.m2l.entry(mp);
        if let Entry::Occupied(o) = &m {
            let (l0, p0, a0) = *o.get();
            if l0 != lp {
                let p0 = &self.procs[p0];
                return Some(format!(
                    "model: same frame as {p0}:{a0:#x}; live: a different frame"
                ));
            }
        }
        if let Entry::Vacant(v) = l {
            v.insert((mp, proc, addr));
        }
        if let Entry::Vacant(v) = m {
            v.insert((lp, proc, addr));
        }
        None
    }

    /// Swap entries must pair up the same way: two pages share a swap slot
    /// live exactly when they share one in the model.
    fn check_slot(
        &mut self,
        ls: (u8, u64),
        ms: (u8, u64),
        proc: usize,
        addr: u64,
    ) -> Option<String> {
        if let Some(&(m0, p0, a0)) = self.slots_l2m.get(&ls) {
            let p0 = &self.procs[p0];
            if m0 != ms {
                return Some(format!(
                    "live: same swap slot as {p0}:{a0:#x}; model: a different slot"
                ));
            }
        }
        if let Some(&(l0, p0, a0)) = self.slots_m2l.get(&ms) {
            let p0 = &self.procs[p0];
            if l0 != ls {
                return Some(format!(
                    "model: same swap slot as {p0}:{a0:#x}; live: a different slot"
                ));
            }
        }
        self.slots_l2m.entry(ls).or_insert((ms, proc, addr));
        self.slots_m2l.entry(ms).or_insert((ls, proc, addr));
        None
    }
}

/// Runs every operation on the model and on the live kernel.
pub struct DiffBackend {
    model: ModelBackend,
    live: LiveBackend,
    opts: DiffOptions,
    line: u32,
    stmt: String,
    loops: Vec<(u32, u64)>,
    /// An operation ran since the last comparison.
    dirty: bool,
    /// The statement being executed is a read/write access.
    in_access: bool,
    /// (process, address) → (live frame, model frame) at the last comparison.
    /// Per process, in address order: (address, live frame, model frame).
    last_frames: HashMap<String, Vec<(u64, u64, u64)>>,
    divergences: Vec<Divergence>,
    more_divergences: u64,
    unsupported: bool,
    comparisons: u64,
    notes: Vec<String>,
    budget_noted: bool,
    /// A memory operation (anything but a knob write) ran since the last
    /// comparison. Knob writes never allocate, free or split a folio, so
    /// counters that move over a knob-only step moved for other processes.
    mem_op: bool,
    /// THP counters (live, model) at the previous comparison.
    prev_stats: (BTreeMap<String, i64>, BTreeMap<String, i64>),
    /// Orders (bit n = order n) that were enabled for every process (not
    /// only MADV_HUGEPAGE regions) at some point of the run: other
    /// processes' faults then move the same global counters.
    exposed: u16,
    timing: DiffTiming,
    /// The frame bijection, kept between comparisons for its room.
    frames: FrameMatcher,
    /// Comparisons since the last one that read everything.
    since_full: u64,
    /// The last comparison re-used reads (so the end reads everything).
    last_reused: bool,
    /// Statements started (the one running now is number `steps`).
    steps: u64,
    /// `khugepaged/pages_collapsed` when the run started.
    khugepaged_base: Option<u64>,
    /// Pages (addresses, any process) a `fill` wrote, a UFFDIO_COPY from
    /// memory filled, or a UFFDIO_MOVE moved such a page to: their bytes
    /// are compared whole at every comparison, as are the pages the model
    /// holds bytes beyond the tag for ([`Self::compare_page_bytes`]).
    filled: BTreeSet<u64>,
}

/// At most this many pages are remembered as filled ([`DiffBackend`]'s
/// `filled`): each is read whole at every comparison.
const FILLED_MAX: usize = 4096;

/// The model configuration matching this machine: its THP knobs,
/// `vm.max_map_count`, `vm.mmap_min_addr` and whether we are root.
pub fn machine_model_config(arch: ArchKind) -> ModelConfig {
    let mut cfg = ModelConfig::for_arch(arch);
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    if let Some(n) = read("/proc/sys/vm/max_map_count") {
        cfg.max_map_count = n as usize;
    }
    if let Some(n) = read("/proc/sys/vm/mmap_min_addr") {
        cfg.mmap_min_addr = n;
    }
    cfg.cap_sys_rawio = crate::is_root();
    if let Ok(m) = crate::knobs::current_mode(ThpKnob::TopLevel) {
        cfg.thp.top = m;
    }
    for order in 2u8..=9 {
        if let Ok(m) = crate::knobs::current_mode(ThpKnob::Size(order)) {
            cfg.thp.per_order[order as usize] = m;
        }
    }
    if let Some(z) = crate::knobs::use_zero_page() {
        cfg.thp.use_zero_page = z;
    }
    cfg
}

fn show_outcome(r: &Result<u64, BackendError>) -> String {
    match r {
        Ok(v) => format!("returned {v:#x}"),
        Err(BackendError::Errno(e)) => format!("failed with {}", e.name()),
        Err(BackendError::Segv { addr }) => format!("SIGSEGV at {addr:#x}"),
        Err(BackendError::Uffd { addr }) => format!("fault at {addr:#x} goes to userfaultfd"),
        Err(BackendError::ErrnoWithResult { errno, result }) => {
            format!("failed with {} (result field {result})", errno.name())
        }
        Err(e) => format!("error: {e}"),
    }
}

fn same_outcome(a: &Result<u64, BackendError>, b: &Result<u64, BackendError>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (Err(BackendError::Errno(x)), Err(BackendError::Errno(y))) => x == y,
        (Err(BackendError::Segv { addr: x }), Err(BackendError::Segv { addr: y })) => x == y,
        (Err(BackendError::Uffd { addr: x }), Err(BackendError::Uffd { addr: y })) => x == y,
        (
            Err(BackendError::ErrnoWithResult {
                errno: e1,
                result: r1,
            }),
            Err(BackendError::ErrnoWithResult {
                errno: e2,
                result: r2,
            }),
        ) => e1 == e2 && r1 == r2,
        (Err(BackendError::NoProcess(x)), Err(BackendError::NoProcess(y))) => x == y,
        (Err(BackendError::ProcessExists(x)), Err(BackendError::ProcessExists(y))) => x == y,
        _ => false,
    }
}

fn describe_page(p: &PageState) -> String {
    match p {
        PageState::NotPresent => "none".into(),
        PageState::Zero => "zero".into(),
        PageState::Guard => "guard".into(),
        PageState::HugeZero { index } => format!("hugezero idx={index}"),
        PageState::Swapped { .. } => "swapped".into(),
        PageState::Anon(a) => format!(
            "anon o{} idx={} {} {} {} cnt={} tag={:#x}",
            a.order,
            a.index,
            if a.pmd_mapped { "pmd" } else { "pte" },
            if a.mmap_exclusive { "X" } else { "!X" },
            if a.anon_exclusive { "AX" } else { "!AX" },
            a.mapcount,
            a.tag
        ),
    }
}

fn maps_lines(o: &Observation) -> Vec<String> {
    // VmLck rides along with the VMAs (mm->locked_vm, /proc/PID/status).
    let lck = (o.vm_lck_kb != 0).then(|| format!("VmLck: {} kB", o.vm_lck_kb));
    o.maps
        .iter()
        .map(|m| {
            format!(
                "{:x}-{:x} {} [{}] Rss:{} AnonHuge:{} LazyFree:{}",
                m.start,
                m.end,
                m.perms,
                m.vm_flags.join(" "),
                m.rss_kb,
                m.anon_huge_kb,
                m.lazyfree_kb
            )
        })
        .chain(lck)
        .collect()
}

impl DiffBackend {
    /// Start both backends (the live one forks its `main` worker).
    pub fn new(opts: DiffOptions) -> Result<DiffBackend, LiveError> {
        let mut live = LiveBackend::with_options(opts.limits.clone(), opts.attribute_counters)?;
        // DiffBackend::admit checks each statement once, before either side.
        live.set_admitted_by_caller(true);
        let mut cfg = opts
            .model_config
            .clone()
            .unwrap_or_else(|| machine_model_config(opts.arch));
        cfg.before |= opts.before;
        let mut model = ModelBackend::new(cfg);
        // Only the counters the model keeps are compared (compare_stats):
        // the others need not be read.
        if let Ok(o) = model.observe("main") {
            let keys: BTreeSet<String> = o.stats.into_keys().collect();
            live.keep_counters(|k| keys.contains(k));
        }
        live.set_narrow_counters(opts.narrow_counters);
        Ok(DiffBackend {
            model,
            live,
            opts,
            line: 0,
            stmt: String::new(),
            loops: Vec::new(),
            dirty: false,
            in_access: false,
            last_frames: HashMap::new(),
            divergences: Vec::new(),
            more_divergences: 0,
            unsupported: false,
            comparisons: 0,
            notes: Vec::new(),
            budget_noted: false,
            exposed: 0,
            prev_stats: Default::default(),
            mem_op: false,
            timing: DiffTiming::default(),
            frames: FrameMatcher::default(),
            since_full: 0,
            last_reused: false,
            steps: 0,
            khugepaged_base: crate::kernel::khugepaged_pages_collapsed(),
            filled: BTreeSet::new(),
        })
        .map(|mut d| {
            d.update_exposed();
            let every_step = d.opts.every_step;
            d.live.set_incremental(every_step && d.opts.incremental);
            d.live.set_verify_incremental(d.opts.verify_incremental);
            d
        })
    }

    fn update_exposed(&mut self) {
        let t = self.model.model().thp();
        for order in 2..=9usize {
            let m = t.per_order[order];
            if m == ThpMode::Always || (m == ThpMode::Inherit && t.top == ThpMode::Always) {
                self.exposed |= 1 << order;
            }
        }
    }

    /// The live side.
    pub fn live(&self) -> &LiveBackend {
        &self.live
    }

    /// The model side.
    pub fn model(&self) -> &Model {
        self.model.model()
    }

    fn record(
        &mut self,
        process: &str,
        kind: &str,
        summary: String,
        live: Vec<String>,
        model: Vec<String>,
    ) {
        if self.divergences.len() >= self.opts.max_divergences {
            self.more_divergences += 1;
            return;
        }
        self.divergences.push(Divergence {
            line: self.line,
            stmt: self.stmt.clone(),
            loops: self.loops.clone(),
            process: process.to_string(),
            kind: kind.to_string(),
            summary,
            live,
            model,
            detail: Vec::new(),
            step: self.steps,
            khugepaged: self.khugepaged_since_start(),
        });
    }

    /// khugepaged's collapses since the run started (0 where the counter
    /// cannot be read).
    fn khugepaged_since_start(&self) -> u64 {
        match (
            self.khugepaged_base,
            crate::kernel::khugepaged_pages_collapsed(),
        ) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        }
    }

    /// Compare the outcome of one operation.
    fn compare_result(
        &mut self,
        proc: &str,
        what: &str,
        live: &Result<u64, BackendError>,
        model: &Result<u64, BackendError>,
    ) {
        self.dirty = true;
        self.mem_op = true;
        if !same_outcome(live, model) {
            self.record(
                proc,
                "result",
                format!("{what}: the kernel and the model disagree"),
                vec![show_outcome(live)],
                vec![show_outcome(model)],
            );
        }
    }

    /// The live side's budgets (crate::budget), checked before either side
    /// runs: a statement over budget stops the run (partial) with neither
    /// side changed, instead of the model doing what the kernel refused.
    fn admit(&mut self, proc: &str, call: &Call) -> Result<(), BackendError> {
        match self.live.admit_call(proc, call) {
            Err(e @ BackendError::Other(_)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Run one call on both sides. The model goes first so a call it does
    /// not support never reaches the kernel.
    fn both(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        let t0 = std::time::Instant::now();
        let m = self.model.call(proc, call);
        self.timing.model_calls += t0.elapsed();
        if let Err(BackendError::Unsupported(_)) = &m {
            self.unsupported = true;
            return m;
        }
        let l = self.live.call(proc, call);
        if let Err(BackendError::Other(_) | BackendError::Unsupported(_)) = &l {
            return l;
        }
        self.compare_result(proc, &what(call), &l, &m);
        m
    }

    /// What the model would return for `op` on its own (it has no ASLR),
    /// leaving the model unchanged.
    fn model_would(
        &mut self,
        op: impl FnOnce(&mut ModelBackend) -> Result<u64, BackendError>,
    ) -> Option<u64> {
        let saved = self.model.model().clone();
        let r = op(&mut self.model);
        *self.model.model_mut() = saved;
        r.ok()
    }

    /// The one placement fact that does not depend on ASLR: a placement
    /// the THP alignment rule covers (`rule`: an anonymous mmap without a
    /// hint whose length is a 2 MiB multiple, `thp_get_unmapped_area`; a
    /// moving mremap to a 2 MiB-multiple length) must be 2 MiB-aligned on
    /// both sides. `model_own` is where the model would have put it.
    fn check_placement(
        &mut self,
        proc: &str,
        what: &str,
        len: u64,
        live: u64,
        model_own: Option<u64>,
        rule: bool,
    ) {
        let Some(m) = model_own else { return };
        if !rule {
            return;
        }
        let (la, ma) = (live.is_multiple_of(PMD_SIZE), m.is_multiple_of(PMD_SIZE));
        if la != ma {
            let side = |a: u64, aligned: bool| {
                format!(
                    "placed at {a:#x}{}",
                    if aligned {
                        " (2 MiB-aligned)"
                    } else {
                        " (not 2 MiB-aligned)"
                    }
                )
            };
            self.record(
                proc,
                "placement",
                format!(
                    "a {len:#x}-byte {what} covered by the THP alignment rule (thp_get_unmapped_area) \
                     is 2 MiB-aligned on one side only"
                ),
                vec![side(live, la)],
                vec![side(m, ma)],
            );
        }
    }

    /// A grow the model would do in place (`[addr + old_len, addr +
    /// new_len)` after the VMA) that the kernel moved to `live`: fine when
    /// that range touches one of the worker's own VMAs (the model's
    /// address space lacks them), else a divergence.
    fn check_in_place(&mut self, proc: &str, addr: u64, old_len: u64, new_len: u64, live: u64) {
        let (start, end) = (addr.saturating_add(old_len), addr.saturating_add(new_len));
        let blocked = self
            .live
            .foreign()
            .iter()
            .any(|&(s, e)| s < end && start < e);
        if blocked {
            self.notes.push(format!(
                "line {}: mremap {addr:#x} grew in place on the model but moved to {live:#x} live: \
                 {start:#x}-{end:#x} touches a mapping of the live harness's own",
                self.line
            ));
            return;
        }
        self.record(
            proc,
            "placement",
            "mremap: the kernel moved a mapping the model grows in place".to_string(),
            vec![format!("moved to {live:#x}")],
            vec![format!("grown in place at {addr:#x}")],
        );
    }

    /// Remember the pages whose bytes beyond the tag a call may set: a
    /// `fill`, a UFFDIO_COPY from memory (the bytes of a filled source
    /// page), a UFFDIO_MOVE from a remembered page.
    fn note_filled(&mut self, call: &Call) {
        let pages = |a: u64, len: u64| {
            let first = a & !(PAGE_SIZE - 1);
            let end = a.saturating_add(len).min(first.saturating_add(64 << 20));
            (first..end).step_by(PAGE_SIZE as usize)
        };
        let new: Vec<u64> = match *call {
            Call::FillBytes { addr, len, .. } => pages(addr, len).collect(),
            Call::UffdCopy {
                dst,
                src,
                len,
                tag: None,
                ..
            } if src != 0 => pages(dst, len).collect(),
            Call::UffdMove { dst, src, len, .. } => pages(src, len)
                .zip(pages(dst, len))
                .filter(|(s, _)| self.filled.contains(s))
                .map(|(_, d)| d)
                .collect(),
            _ => Vec::new(),
        };
        for p in new {
            if self.filled.len() >= FILLED_MAX {
                break;
            }
            self.filled.insert(p);
        }
    }

    /// Compare the 4096 bytes of each page in `pages` (present on both
    /// sides, same tag) of `proc`: the page observation compares the tag,
    /// the first 8 bytes, only. A difference is a divergence of kind
    /// `bytes`, as an `expect bytes` line's.
    fn compare_page_bytes(&mut self, proc: &str, pages: &[u64]) {
        let t0 = std::time::Instant::now();
        let mut differ: Vec<(u64, usize, Option<u8>, Option<u8>)> = Vec::new();
        // Every page's bytes loaded by the worker, consecutive pages in
        // one request (the same loads, in the same order, as a request
        // per page).
        let (all_live, requests) = self.live.present_pages_bytes(proc, pages);
        self.timing.page_bytes.1 += pages.len() as u64;
        self.timing.page_bytes.2 += requests;
        for (&a, live) in pages.iter().zip(all_live) {
            let Some(live) = live else {
                continue;
            };
            let Ok(model) = self.model.read_bytes(proc, a, PAGE_SIZE) else {
                continue;
            };
            // A byte the live side could not load is not compared.
            let k = live
                .iter()
                .zip(&model)
                .position(|(l, m)| l.is_some() && l != m);
            if let Some(k) = k {
                let n = live
                    .iter()
                    .zip(&model)
                    .filter(|(l, m)| l.is_some() && l != m)
                    .count();
                differ.push((a + k as u64, n, live[k], model[k]));
            }
        }
        self.timing.page_bytes.0 += t0.elapsed();
        let Some(&(at, n, l, m)) = differ.first() else {
            return;
        };
        let show = |v: Option<u8>| v.map_or("not present".to_string(), |b| format!("{b:#04x}"));
        self.record(
            proc,
            "bytes",
            format!(
                "{n} of the 4096 bytes of the page at {:#x} differ (the page's tag agrees); \
                 the first at {at:#x}{}",
                at & !(PAGE_SIZE - 1),
                if differ.len() > 1 {
                    format!("; {} more pages differ", differ.len() - 1)
                } else {
                    String::new()
                }
            ),
            vec![show(l)],
            vec![show(m)],
        );
    }

    fn territory_pages(&self) -> u64 {
        self.live
            .territory()
            .iter()
            .map(|(s, e)| (e - s) / 4096)
            .sum()
    }

    /// Compare every process's observation now.
    ///
    /// Skipped when only THP knob writes and `swap` statements ran since
    /// the last comparison (`mem_op` false): a knob write
    /// (`enabled_store()`, `thpsize_enabled_store()`) sets policy bits and
    /// at most wakes khugepaged, and ptlab swaps its file on, or off only
    /// while no page is in it (`swap` answers EBUSY otherwise): none maps,
    /// frees, splits or writes a page, so neither side's pages, VMAs or
    /// counters can differ from the last comparison because of it (the
    /// counters of such a step are not compared anyway, see `mem_op`).
    /// Whatever khugepaged does later shows at the next comparison.
    pub fn compare_now(&mut self) {
        if !self.mem_op {
            self.dirty = false;
            return;
        }
        let t0 = std::time::Instant::now();
        let c0 = thread_cpu();
        let reuse = self.since_full + 1 < crate::incremental::FULL_EVERY;
        self.compare_now_untimed(reuse);
        let t = t0.elapsed();
        let cpu = thread_cpu().saturating_sub(c0);
        self.timing.compare += t;
        self.timing.compare_max = self.timing.compare_max.max(t);
        let (kind, kind_cpu) = if self.last_reused {
            (&mut self.timing.reusing, &mut self.timing.reusing_cpu)
        } else {
            (
                &mut self.timing.reading_all,
                &mut self.timing.reading_all_cpu,
            )
        };
        kind.0 += t;
        kind.1 += 1;
        *kind_cpu += cpu;
    }

    /// One comparison of every process; `reuse`: the live side may re-use
    /// reads of pages that cannot have changed (crate::incremental).
    fn compare_now_untimed(&mut self, reuse: bool) {
        self.dirty = false;
        self.comparisons += 1;
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        let mut stats_done = false;
        let mut seen = HashMap::new();
        let first_new = self.divergences.len();
        let mut collapsed = 0;
        let t0 = std::time::Instant::now();
        let before = self.live.incremental_stats();
        let observed = self.live.observe_all(reuse);
        let after = self.live.incremental_stats();
        self.last_reused = after.incremental > before.incremental;
        if self.last_reused {
            self.since_full += 1;
        } else {
            self.since_full = 0;
        }
        self.timing.observe_live += t0.elapsed();
        for (name, live) in observed {
            let live = match live {
                Ok(o) => o,
                Err(e) => {
                    self.notes.push(format!(
                        "line {}: cannot observe '{name}' live: {e}",
                        self.line
                    ));
                    continue;
                }
            };
            let t0 = std::time::Instant::now();
            let model = self.model.observe(&name);
            self.timing.observe_model += t0.elapsed();
            let model = match model {
                Ok(o) => o,
                Err(e) => {
                    self.record(
                        &name,
                        "processes",
                        format!("the process exists live but the model cannot observe it: {e}"),
                        vec![],
                        vec![],
                    );
                    continue;
                }
            };
            self.compare_maps(&name, &live, &model);
            self.compare_numa_maps(&name, &live, &model);
            self.compare_pages(&name, &live, &model, &mut frames, &mut seen);
            if !stats_done {
                stats_done = true;
                let (lp, mp) = std::mem::take(&mut self.prev_stats);
                let key = "vmstat/thp_collapse_alloc";
                let get = |m: &BTreeMap<String, i64>| m.get(key).copied().unwrap_or(0);
                collapsed = (get(&live.stats) - get(&lp)) - (get(&model.stats) - get(&mp));
                if self.mem_op {
                    self.compare_stats(&live.stats, &model.stats, &lp, &mp);
                }
                self.prev_stats = (live.stats.clone(), model.stats.clone());
            }
        }
        self.last_frames = seen;
        self.frames = frames;
        self.mem_op = false;
        // khugepaged works in the background (and wakes at once when a THP
        // knob is set to `always`): say so on whatever differs in a step
        // where it collapsed a range the model did not (docs/divergences.md H3).
        if collapsed > 0 {
            for d in &mut self.divergences[first_new..] {
                if !d.summary.contains("khugepaged") {
                    d.summary.push_str(&format!(
                        " (khugepaged collapsed a range in the background: live \
                         vmstat/thp_collapse_alloc +{collapsed} since the last comparison)"
                    ));
                }
            }
        }
    }

    fn compare_maps(&mut self, proc: &str, live: &Observation, model: &Observation) {
        let l = maps_lines(live);
        let m = maps_lines(model);
        if l != m {
            self.record(
                proc,
                "maps",
                format!("VMAs differ ({} live, {} in the model)", l.len(), m.len()),
                l,
                m,
            );
        }
    }

    /// numa_maps, line by line (the fields both sides keep).
    fn compare_numa_maps(&mut self, proc: &str, live: &Observation, model: &Observation) {
        let lines =
            |o: &Observation| -> Vec<String> { o.numa_maps.iter().map(|n| n.line()).collect() };
        let (l, m) = (lines(live), lines(model));
        if l != m {
            self.record(proc, "numa_maps", "numa_maps differ".to_string(), l, m);
        }
    }

    fn compare_pages(
        &mut self,
        proc: &str,
        live: &Observation,
        model: &Observation,
        frames: &mut FrameMatcher,
        seen: &mut HashMap<String, Vec<(u64, u64, u64)>>,
    ) {
        let caps = self.live.caps();
        let pid = frames.proc_id(proc);
        let mut mine: Vec<(u64, u64, u64)> = Vec::new();
        let last = self
            .last_frames
            .get(proc)
            .filter(|_| self.in_access && self.opts.every_step);
        let none = PageState::NotPresent;
        let mut bad: Vec<(u64, String)> = Vec::new();
        // Present pages on both sides whose bytes are compared whole.
        let mut whole: Vec<u64> = Vec::new();
        // Pages either side shows (a not-present run counted in full).
        let mut total = 0u64;
        // Both lists side by side: a present page is one piece, a run of
        // not-present pages on both sides one piece however long.
        for piece in PageRuns::aligned(&live.pages, &model.pages) {
            total += piece.npages;
            let a = piece.addr;
            let ls = piece.a.unwrap_or(&none);
            let ms = piece.b.unwrap_or(&none);
            let mut why: Vec<String> = Vec::new();
            match (ls, ms) {
                (PageState::Anon(l), PageState::Anon(m)) => {
                    if caps.frames {
                        if l.order != m.order {
                            why.push(format!("order {} vs {}", l.order, m.order));
                        }
                        if l.index != m.index {
                            why.push(format!("idx {} vs {}", l.index, m.index));
                        }
                        if l.anon_exclusive != m.anon_exclusive {
                            why.push(format!("AX {} vs {}", l.anon_exclusive, m.anon_exclusive));
                        }
                        if l.mapcount != m.mapcount {
                            why.push(format!("cnt {} vs {}", l.mapcount, m.mapcount));
                        }
                        if let Some(w) = frames.check(l.pfn, m.pfn, pid, a) {
                            why.push(w);
                        }
                        if let Some(last) = last {
                            if let Ok(k) = last.binary_search_by_key(&a, |e| e.0) {
                                let (_, lp, mp) = last[k];
                                if (lp == l.pfn) != (mp == m.pfn) {
                                    why.push(if lp == l.pfn {
                                        "the kernel kept the page's frame, the model replaced it"
                                            .to_string()
                                    } else {
                                        "the kernel replaced the page's frame, the model kept it"
                                            .to_string()
                                    });
                                }
                            }
                        }
                        mine.push((a, l.pfn, m.pfn));
                    }
                    if caps.scan && l.pmd_mapped != m.pmd_mapped {
                        why.push(format!(
                            "{} vs {}",
                            if l.pmd_mapped { "pmd" } else { "pte" },
                            if m.pmd_mapped { "pmd" } else { "pte" }
                        ));
                    }
                    if l.mmap_exclusive != m.mmap_exclusive {
                        why.push(format!("X {} vs {}", l.mmap_exclusive, m.mmap_exclusive));
                    }
                    if l.tag != m.tag && !self.live.tag_unknown(proc, a) {
                        why.push(format!("tag {:#x} vs {:#x}", l.tag, m.tag));
                    } else if !self.live.tag_unknown(proc, a)
                        && (self.filled.contains(&a)
                            || self.model.model().page_has_bytes(m.pfn)
                            || self.live.rest_nonzero(proc, a))
                    {
                        whole.push(a);
                    }
                }
                (PageState::HugeZero { index: x }, PageState::HugeZero { index: y }) if x != y => {
                    why.push(format!("hugezero idx {x} vs {y}"));
                }
                (
                    PageState::Swapped { ty: lt, offset: lo },
                    PageState::Swapped { ty: mt, offset: mo },
                ) => {
                    if let Some(w) = frames.check_slot((*lt, *lo), (*mt, *mo), pid, a) {
                        why.push(w);
                    }
                }
                (PageState::Zero, PageState::Zero)
                | (PageState::Guard, PageState::Guard)
                | (PageState::NotPresent, PageState::NotPresent)
                | (PageState::HugeZero { .. }, PageState::HugeZero { .. }) => {}
                (l, m) => why.push(format!("{} vs {}", describe_page(l), describe_page(m))),
            }
            if !why.is_empty() {
                bad.push((a, why.join(", ")));
            }
        }
        seen.insert(proc.to_string(), mine);
        if bad.is_empty() {
            self.compare_page_bytes(proc, &whole);
            return;
        }
        let first = bad[0].0;
        let last_shown = bad
            .iter()
            .map(|b| b.0)
            .take_while(|&a| a < first + 64 * 4096)
            .last()
            .unwrap_or(first);
        let window = |pages: &PageRuns| -> Vec<String> {
            render_page_runs(&pages.clip(first, last_shown.saturating_add(4096)))
        };
        let live_lines = window(&live.pages);
        let model_lines = window(&model.pages);
        let mut detail = vec!["page differences (live vs model):".to_string()];
        for (a, why) in bad.iter().take(6) {
            detail.push(format!("  {a:#x}: {why}"));
        }
        if bad.len() > 6 {
            detail.push(format!("  ... and {} more pages", bad.len() - 6));
        }
        self.record(
            proc,
            "pages",
            format!(
                "{} of {} pages differ; first at {first:#x}: {}",
                bad.len(),
                total,
                bad[0].1
            ),
            live_lines,
            model_lines,
        );
        if let Some(d) = self.divergences.last_mut() {
            if d.kind == "pages" && d.detail.is_empty() {
                d.detail = detail;
            }
        }
    }

    /// Compare what each counter did since the previous comparison (not
    /// since the start: a background event then shows at one step only,
    /// and a model error at the step that causes it).
    fn compare_stats(
        &mut self,
        live: &BTreeMap<String, i64>,
        model: &BTreeMap<String, i64>,
        live_prev: &BTreeMap<String, i64>,
        model_prev: &BTreeMap<String, i64>,
    ) {
        // Only counters the model keeps: the kernel has more (shmem, swap,
        // file THPs) that scenarios do not drive.
        let keys: BTreeSet<&String> = model.keys().collect();
        let mut l_lines = Vec::new();
        let mut m_lines = Vec::new();
        let mut names = Vec::new();
        for k in keys {
            let get = |m: &BTreeMap<String, i64>| m.get(k).copied().unwrap_or(0);
            let lv = get(live) - get(live_prev);
            let mv = get(model) - get(model_prev);
            let ok = if k == "vmstat/thp_zero_page_alloc" {
                // History: the huge zero folio may already exist on the machine.
                lv == mv || (lv == 0 && mv > 0)
            } else {
                lv == mv
            };
            if !ok {
                names.push(k.clone());
                l_lines.push(format!("{k} {lv:+} (total {:+})", get(live)));
                m_lines.push(format!("{k} {mv:+} (total {:+})", get(model)));
            }
        }
        if names.is_empty() {
            return;
        }
        let mut summary = format!(
            "THP counters moved differently in this step: {}",
            names.join(", ")
        );
        if live.get("vmstat/thp_collapse_alloc").copied().unwrap_or(0)
            > model.get("vmstat/thp_collapse_alloc").copied().unwrap_or(0)
        {
            summary.push_str(" (khugepaged collapsed a range in the background?)");
        }
        let exposed: Vec<String> = names
            .iter()
            .filter_map(|k| {
                let order = if k.starts_with("vmstat/") {
                    9
                } else {
                    let kb: u64 = k.split("kB/").next()?.parse().ok()?;
                    (kb / 4).trailing_zeros() as usize
                };
                (self.exposed & (1 << order) != 0).then(|| format!("{}kB", 4u64 << order))
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !exposed.is_empty() {
            summary.push_str(&format!(
                "; note: {} folios were enabled for every process during this run, so other \
                 processes' faults move these global counters too (re-run to confirm)",
                exposed.join(", ")
            ));
        }
        self.record("", "stats", summary, l_lines, m_lines);
    }

    /// Compare the same moment again reading everything, after a last
    /// comparison that re-used reads: whatever the re-use rules missed (a
    /// folio the kernel split in the background) shows here, at the last
    /// statement. Not counted as a comparison of its own; a divergence it
    /// finds that the last comparison reported already is not repeated.
    fn recheck_in_full(&mut self) {
        let first_new = self.divergences.len();
        let (count, dirty, mem_op) = (self.comparisons, self.dirty, self.mem_op);
        // The counters were compared for this step already.
        self.mem_op = false;
        let t0 = std::time::Instant::now();
        self.compare_now_untimed(false);
        self.timing.compare += t0.elapsed();
        self.comparisons = count;
        self.dirty = dirty;
        self.mem_op = mem_op;
        let (old, new) = self.divergences.split_at(first_new);
        let fresh: Vec<Divergence> = new.iter().filter(|d| !old.contains(d)).cloned().collect();
        self.divergences.truncate(first_new);
        self.divergences.extend(fresh);
    }

    /// Final comparison; returns the run's divergences and notes.
    fn finish(&mut self) {
        if self.dirty {
            self.compare_now();
        }
        if self.last_reused {
            self.recheck_in_full();
        }
        let st = self.live.incremental_stats();
        let stale = st.stale_pages + st.stale_maps;
        if stale > 0 {
            let examples: Vec<String> = self
                .live
                .stale_examples()
                .iter()
                .take(3)
                .map(|(p, a, old, new)| format!("{p}:{a:#x}: re-used {old}, read {new}"))
                .collect();
            self.notes.push(format!(
                "verification: {} re-used page reads and {} re-used smaps reads differed from a \
                 full read of the same moment (first: {})",
                st.stale_pages,
                st.stale_maps,
                examples.join("; ")
            ));
        }
        let mut notes = self.live.notes().to_vec();
        notes.append(&mut self.notes);
        self.notes = notes;
    }
}

impl DiffBackend {
    /// A non-fixed mmap: the kernel places it where its address space
    /// (ASLR, the harness's own mappings) has room; the model places it at
    /// the same address, and what is checkable is checked.
    fn mmap_floating(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        let Call::Mmap {
            addr,
            len,
            prot,
            flags,
        } = *call
        else {
            return self.both(proc, call);
        };
        let l = self.live.call(proc, call);
        if let Err(BackendError::Other(_)) = &l {
            return l;
        }
        let m = match &l {
            Ok(a) => {
                let a = *a;
                let own = self.model_would(|m| m.call(proc, call));
                let rule = addr == 0 && len.is_multiple_of(PMD_SIZE);
                self.check_placement(proc, "mmap", len, a, own, rule);
                let here = Call::Mmap {
                    addr: a,
                    len,
                    prot,
                    flags: flags | MapFlags::FIXED_NOREPLACE,
                };
                let r = self.model.call(proc, &here);
                if let Err(BackendError::Errno(e)) = &r {
                    self.notes.push(format!(
                        "line {}: the model could not place the mapping at the kernel's address {a:#x} ({})",
                        self.line,
                        e.name()
                    ));
                }
                r
            }
            Err(_) => self.model.call(proc, call),
        };
        self.compare_result(proc, "mmap", &l, &m);
        m
    }

    /// A move without MREMAP_FIXED goes where the kernel finds room (as a
    /// non-fixed mmap): the model moves to the kernel's address.
    fn mremap_floating(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        let Call::Mremap {
            addr,
            old_len,
            new_len,
            flags,
            new_addr,
        } = *call
        else {
            return self.both(proc, call);
        };
        let own = self.model_would(|m| m.call(proc, call));
        let l = self.live.call(proc, call);
        if let Err(BackendError::Other(_)) = &l {
            return l;
        }
        let m = match &l {
            Ok(a) if *a != addr => {
                let a = *a;
                if own == Some(addr) {
                    // The kernel moved what the model would have grown in
                    // place (expand_vma_in_place()). The model's address
                    // space has no worker VMAs, and a non-fixed mmap lands
                    // right below one of them (top-down): a growth into one
                    // is refused live (vma_expandable()) and the move is
                    // placed by the layout, so there is nothing to compare
                    // (D2 in docs/divergences.md was this). Grown into
                    // scenario address space alone, it is a divergence.
                    self.check_in_place(proc, addr, old_len, new_len, a);
                } else {
                    // get_unmapped_area() takes the THP path only without a
                    // hint: MREMAP_DONTUNMAP passes `new_addr` as one.
                    let hint = flags.contains(MremapFlags::DONTUNMAP) && new_addr != 0;
                    let rule = new_len.is_multiple_of(PMD_SIZE) && !hint;
                    self.check_placement(proc, "mremap move", new_len, a, own, rule);
                }
                let there = Call::Mremap {
                    addr,
                    old_len,
                    new_len,
                    flags: flags | MremapFlags::FIXED,
                    new_addr: a,
                };
                self.model.call(proc, &there)
            }
            _ => self.model.call(proc, call),
        };
        if let Err(BackendError::Unsupported(_)) = &m {
            self.unsupported = true;
            return m;
        }
        self.compare_result(proc, "mremap", &l, &m);
        m
    }
}

/// How a divergence names the call (`madvise dontneed`, `uffd copy`).
fn what(call: &Call) -> String {
    match call {
        Call::Madvise {
            advice: ptlab_model::Advice::Other(v),
            ..
        } => format!("madvise advice {v}"),
        Call::Madvise { advice, .. } => format!("madvise {}", advice.name()),
        other => other.name().to_string(),
    }
}

impl DiffBackend {
    /// One statement on both sides ([`Backend::call`] times it).
    fn call_untimed(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        if let Call::Madvise { addr, len, advice } = call {
            if Model::madvise_is_unmodelled(*addr, *len, *advice) {
                self.unsupported = true;
                return Err(BackendError::Other(format!(
                    "madvise advice {} is unsupported by the model",
                    advice.value()
                )));
            }
        }
        if let Call::Mmap { flags, .. } = call {
            // Without MAP_ANONYMOUS it is EBADF before anything else.
            if flags.contains(MapFlags::ANONYMOUS) && !Model::supports_mmap_flags(*flags) {
                self.unsupported = true;
                return Err(BackendError::Other(format!(
                    "mmap flags {:#x} are unsupported by the model (MAP_SHARED, \
                     MAP_DROPPABLE, MAP_32BIT, MAP_ABOVE4G, MAP_GROWSDOWN, MAP_HUGETLB, MAP_SYNC)",
                    flags.bits()
                )));
            }
        }
        // Machine-wide settings are attributed to `main`.
        let proc = if call.acts_on_process() { proc } else { "main" };
        self.admit(proc, call)?;
        match call {
            Call::Mmap { flags, .. }
                if !flags.intersects(MapFlags::FIXED | MapFlags::FIXED_NOREPLACE) =>
            {
                self.mmap_floating(proc, call)
            }
            Call::Mremap { flags, .. }
                if flags.contains(MremapFlags::MAYMOVE) && !flags.contains(MremapFlags::FIXED) =>
            {
                self.mremap_floating(proc, call)
            }
            Call::Access { .. } | Call::FillBytes { .. } => {
                self.in_access = true;
                self.note_filled(call);
                self.both(proc, call)
            }
            Call::UffdCopy { .. } | Call::UffdMove { .. } => {
                self.note_filled(call);
                self.both(proc, call)
            }
            Call::FillVmas { .. } => {
                // The live limit counts the worker's own VMAs too: give the
                // model the share left for the scenario, so both map the
                // same number.
                let (max, harness) = self.live.map_count_budget(proc)?;
                let share = usize::try_from(max.saturating_sub(harness)).unwrap_or(usize::MAX);
                self.model.model_mut().set_max_map_count(share);
                self.both(proc, call)
            }
            // The live kernel runs one algorithm; the model may run either.
            Call::SetBefore { .. } | Call::SetAfter { .. } => self.model.call(proc, call),
            // The model mirrors the live machine's memory in a diff: the
            // statement is accepted and ignored on both sides, unless it
            // asks for more memory than this machine has (the diff stops
            // there, as a partial run).
            Call::SetMemory { .. } => self.live.call(proc, call),
            // Likewise the nodes (the model keeps the machine's one node),
            // and a NUMA scan, which the live kernel cannot be asked for:
            // the diff stops there as a partial run, with the reason.
            Call::SetNodes { .. } | Call::NumaScan { .. } => self.live.call(proc, call),
            // Knobs and swap are not memory operations of the scenario's
            // processes (for the per-step comparison's bookkeeping).
            Call::SetThp { .. } | Call::SetSwap { .. } | Call::SetUseZeroPage { .. } => {
                let mem_op = self.mem_op;
                let r = self.both(proc, call).map(|_| 0);
                if let Call::SetThp { .. } = call {
                    self.update_exposed();
                }
                self.mem_op = mem_op;
                r
            }
            // Everything else: run on both sides and compare.
            _ => self.both(proc, call),
        }
    }
}

impl Backend for DiffBackend {
    fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        let t0 = std::time::Instant::now();
        let r = self.call_untimed(proc, call);
        let t = t0.elapsed();
        if matches!(
            call,
            Call::SetThp { .. } | Call::SetSwap { .. } | Call::SetUseZeroPage { .. }
        ) {
            self.timing.global_calls += t;
        } else {
            self.timing.calls += t;
        }
        r
    }

    fn observe(&mut self, proc: &str) -> Result<Observation, BackendError> {
        if self.dirty {
            self.compare_now();
        }
        self.model.observe(proc)
    }

    fn observe_summary(&mut self, proc: &str) -> Result<Observation, BackendError> {
        if self.dirty {
            self.compare_now();
        }
        self.model.observe_summary(proc)
    }

    fn observe_pages(
        &mut self,
        proc: &str,
        start: u64,
        end: u64,
    ) -> Result<PageRuns, BackendError> {
        if self.dirty {
            self.compare_now();
        }
        self.model.observe_pages(proc, start, end)
    }

    /// Both sides' bytes; a difference is a divergence of kind `bytes`
    /// (page observations compare tags only). The model's bytes are what
    /// the expectation checks, as for every other observation.
    fn read_bytes(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
    ) -> Result<Vec<Option<u8>>, BackendError> {
        if self.dirty {
            self.compare_now();
        }
        let live = self.live.read_bytes(proc, addr, len)?;
        let model = self.model.read_bytes(proc, addr, len)?;
        if let Some(k) = live.iter().zip(&model).position(|(l, m)| l != m) {
            let show =
                |v: &Option<u8>| v.map_or("not present".to_string(), |b| format!("{b:#04x}"));
            let n = live.iter().zip(&model).filter(|(l, m)| l != m).count();
            self.record(
                proc,
                "bytes",
                format!(
                    "{n} of {len} bytes from {addr:#x} differ; the first at {:#x}",
                    addr + k as u64
                ),
                vec![show(&live[k])],
                vec![show(&model[k])],
            );
        }
        Ok(model)
    }

    fn check_invariants(&mut self) -> Result<(), Vec<String>> {
        self.model.check_invariants()
    }

    fn before_statement(&mut self, line: u32, text: &str, loops: &[(u32, u64)]) {
        self.steps += 1;
        self.line = line;
        self.stmt = text.to_string();
        self.loops = loops.to_vec();
        self.in_access = false;
    }

    fn after_statement(&mut self) -> Result<(), Vec<String>> {
        if self.dirty && self.opts.every_step {
            if self.territory_pages() > self.opts.page_budget {
                if !self.budget_noted {
                    self.budget_noted = true;
                    // Comparisons are far apart from here on: nothing to re-use.
                    self.live.set_incremental(false);
                    self.last_reused = false;
                    self.notes.push(format!(
                        "line {}: the scenario maps more than {} pages; comparing only at observe/expect lines and at the end from here on",
                        self.line, self.opts.page_budget
                    ));
                }
            } else {
                self.compare_now();
            }
        }
        self.model.after_statement()
    }

    /// Not counted: the live side has no counters, and a diff reports
    /// divergences, not costs.
    fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
        None
    }
}

/// Diff a scenario given as text.
///
/// The THP counters are global: other processes' faults, frees and splits
/// move them too. So when a run shows counter differences, the scenario is
/// run twice more, and a counter difference counts as a divergence only if
/// the same one (same statement, same counters, same values) shows up in all
/// three runs (a model error does; background noise at the same step with
/// the same values three times is very unlikely). The others are reported
/// as notes, never dropped silently.
pub fn diff_source(file: &str, source: &str, opts: &DiffOptions) -> Result<DiffReport, DiffError> {
    let user_max = opts.max_divergences;
    let opts = &DiffOptions {
        max_divergences: user_max.max(500),
        ..opts.clone()
    };
    let mut first = diff_once(file, source, opts)?;
    if !first.divergences.iter().any(|d| d.kind == "stats") {
        truncate(&mut first, user_max);
        return Ok(first);
    }
    let key = |d: &Divergence| {
        (
            d.line,
            d.stmt.clone(),
            d.loops.clone(),
            d.live.clone(),
            d.model.clone(),
        )
    };
    // A counter difference of the first run is kept only if both re-runs
    // show it. So a re-run need not go on past the last statement where a
    // difference still in question was seen (the step limit stops it
    // there, after that statement's comparison), and the second re-run is
    // not needed when the first showed none of them: nothing else of a
    // re-run is used.
    // PTLAB_RERUN_LOG=1: what made the first run re-run (docs/live.md
    // "Where a case's time goes").
    if std::env::var_os("PTLAB_RERUN_LOG").is_some_and(|v| v == "1") {
        for d in first.divergences.iter().filter(|d| d.kind == "stats") {
            eprintln!(
                "ptlab: re-run trigger: {file}: step {} line {} ({}): live {} | model {} | \
                 orders reached {:#x}{}",
                d.step,
                d.line,
                d.stmt,
                d.live.join(", "),
                d.model.join(", "),
                first.counter_orders_reached,
                if opts.attribute_counters {
                    " (attributed)"
                } else {
                    ""
                }
            );
        }
    }
    // A counter difference the run's own statements cannot have made (a
    // counter of a size no folio of its processes could have) is
    // background: no re-run for it.
    let (background, rest): (Vec<Divergence>, Vec<Divergence>) =
        std::mem::take(&mut first.divergences)
            .into_iter()
            .partition(|d| {
                d.kind == "stats" && counters_out_of_reach(d, first.counter_orders_reached)
            });
    first.divergences = rest;
    for d in &background {
        first.notes.push(format!(
            "counters moved differently after line {} ({}: live {} vs model {}) in this run: \
             background activity (no folio of a size whose counter moved was possible in the \
             run's processes; not re-run)",
            d.line,
            d.stmt,
            d.live.join(", "),
            d.model.join(", ")
        ));
    }
    let mut open: Vec<_> = first
        .divergences
        .iter()
        .filter(|d| d.kind == "stats")
        .map(|d| (key(d), d.step))
        .collect();
    let t_reruns = std::time::Instant::now();
    for _ in 0..2 {
        let Some(last) = open.iter().map(|(_, step)| *step).max() else {
            break;
        };
        let rerun_opts = DiffOptions {
            max_steps: Some(opts.max_steps.map_or(last, |m| m.min(last))),
            ..opts.clone()
        };
        let r = diff_once(file, source, &rerun_opts)?;
        first.timing.reruns.1 += 1;
        let seen: Vec<_> = r
            .divergences
            .iter()
            .filter(|d| d.kind == "stats")
            .map(key)
            .collect();
        open.retain(|(k, _)| seen.contains(k));
    }
    first.timing.reruns.0 = t_reruns.elapsed();
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for d in std::mem::take(&mut first.divergences) {
        if d.kind != "stats" || open.iter().any(|(k, _)| *k == key(&d)) {
            kept.push(d);
        } else {
            dropped.push(d);
        }
    }
    for d in &dropped {
        first.notes.push(format!(
            "counters moved differently after line {} ({}: live {} vs model {}) in this run \
             but not the same way in both re-runs: background activity (the counters are global)",
            d.line,
            d.stmt,
            d.live.join(", "),
            d.model.join(", ")
        ));
    }
    if kept.iter().any(|d| d.kind == "stats") {
        first
            .notes
            .push("counter differences shown below reproduced in two re-runs".to_string());
    }
    first.divergences = kept;
    truncate(&mut first, user_max);
    Ok(first)
}

/// Whether every counter of the stats divergence `d` is one the run's
/// own statements cannot have moved: the model's step moved it by 0 and
/// its folio order (`/proc/vmstat` counters: order 9) is not in
/// `reached` ([`DiffReport::counter_orders_reached`]). Such a difference is
/// what other processes did (freeing or splitting folios made before the
/// run, or a collapse) during the step.
pub fn counters_out_of_reach(d: &Divergence, reached: u16) -> bool {
    if d.live.is_empty() || d.live.len() != d.model.len() {
        return false;
    }
    d.live.iter().zip(&d.model).all(|(l, m)| {
        let mut li = l.split_whitespace();
        let mut mi = m.split_whitespace();
        let (Some(lk), Some(mk), Some(mv)) = (li.next(), mi.next(), mi.next()) else {
            return false;
        };
        if lk != mk || mv.parse::<i64>() != Ok(0) {
            return false;
        }
        let order = if lk.starts_with("vmstat/") {
            9
        } else {
            match lk.split("kB/").next().and_then(|kb| kb.parse::<u64>().ok()) {
                Some(kb) if kb >= 16 && kb.is_power_of_two() => (kb / 4).trailing_zeros(),
                _ => return false,
            }
        };
        reached & (1 << order) == 0
    })
}

fn truncate(rep: &mut DiffReport, max: usize) {
    if rep.divergences.len() > max {
        rep.more_divergences += (rep.divergences.len() - max) as u64;
        rep.divergences.truncate(max);
    }
}

fn diff_once(file: &str, source: &str, opts: &DiffOptions) -> Result<DiffReport, DiffError> {
    let script = ptlab_scenario::parse(file, source)?;
    let mut opts = opts.clone();
    // PTLAB_DIFF_VERIFY=1: check the incremental observer against full
    // reads (docs/live.md, "How fast a diff is").
    opts.verify_incremental |= std::env::var_os("PTLAB_DIFF_VERIFY").is_some_and(|v| v == "1");
    let opts = &opts;
    let t_setup = std::time::Instant::now();
    let mut backend = DiffBackend::new(opts.clone())?;
    backend.timing.setup = t_setup.elapsed();
    let started = std::time::Instant::now();
    let caps = backend.live.caps();
    let run_opts = RunOptions {
        max_steps: opts.max_steps,
        params: opts.params.clone(),
        ..RunOptions::default()
    };
    let run = ptlab_scenario::run(&script, &mut backend, &run_opts);
    backend.finish();
    // Read before the workers end.
    let reads = backend.live.read_counters();
    let live_timing = backend.live.observe_timing();
    let incremental = backend.live.incremental_stats();
    backend.timing.swap_reused = backend.live.swap_reused();
    backend.timing.unlocked = backend.live.unlocked_statements();
    let counter_orders_reached = backend.live.counter_orders_reached();
    for p in backend.live.shutdown() {
        eprintln!("ptlab: could not restore THP knob {p}");
    }
    (backend.timing.end_workers, backend.timing.end_restore) = backend.live.end_timing();
    backend.timing.run = started.elapsed();
    if std::env::var_os("PTLAB_DIFF_TIMING").is_some() {
        eprintln!(
            "ptlab: {file}: {}",
            DiffTiming {
                reads,
                live: live_timing,
                incremental,
                ..backend.timing
            }
            .render(backend.comparisons)
        );
    }
    let stopped = if run.aborted {
        run.failures
            .iter()
            .rev()
            .find(|f| f.kind == FailureKind::Runtime)
            .map(|f| (f.line, f.message.clone()))
    } else {
        None
    };
    let unsupported_by_model = backend.unsupported
        || stopped.as_ref().is_some_and(|(_, m)| {
            m.contains("unsupported by this backend") || m.contains("unsupported by the model")
        });
    let stopped = stopped.map(|(l, m)| {
        if unsupported_by_model {
            (
                l,
                m.replace("unsupported by this backend", "unsupported by the model"),
            )
        } else {
            (l, m)
        }
    });
    Ok(DiffReport {
        file: file.to_string(),
        run,
        divergences: std::mem::take(&mut backend.divergences),
        more_divergences: backend.more_divergences,
        stopped,
        unsupported_by_model,
        notes: std::mem::take(&mut backend.notes),
        comparisons: backend.comparisons,
        caps: Some(caps),
        counter_orders_reached,
        timing: DiffTiming {
            reads,
            live: live_timing,
            incremental,
            ..backend.timing
        },
    })
}

/// Diff a scenario file.
pub fn diff_file(path: &std::path::Path, opts: &DiffOptions) -> anyhow::Result<DiffReport> {
    let source = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read scenario '{}': {e}", path.display()))?;
    Ok(diff_source(&path.display().to_string(), &source, opts)?)
}

/// The incremental observer inside a diff, on the live kernel: a wrong
/// model outside what a statement names is caught at that statement, a
/// kernel change that moves a pagemap word (as reclaim or migration do)
/// too, and a change no rule could see (a write behind the diff's back,
/// which the kernel never makes by itself) at the next full read at the
/// latest — and verification flags it. Needs root; skips otherwise.
#[cfg(test)]
mod incremental_tests {
    use super::*;
    use ptlab_model::Advice;
    use ptlab_scenario::{Backend, BackendError};

    const BASE: u64 = 0x7f10_0000_0000;
    /// Line 4 names one page per iteration; nothing else is touched.
    const SCRIPT: &str = "p = mmap 4M at 0x7f10_0000_0000 fixed\n\
                          write p 4M\n\
                          repeat 8 as i\n\
                          \x20 write p + i * 4K 4K\n\
                          end\n";

    fn skip(name: &str) -> bool {
        crate::skip_live_test(
            name,
            "needs root (frame numbers, kpageflags and kpagecount)",
        )
    }

    /// Forwards to a DiffBackend, calling `inject` on it before the third
    /// time the statement at line 4 runs (iteration 2).
    struct Inject<'a, F: FnMut(&mut DiffBackend)> {
        d: &'a mut DiffBackend,
        f: F,
        seen: u32,
    }

    impl<F: FnMut(&mut DiffBackend)> Backend for Inject<'_, F> {
        fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
            self.d.call(proc, call)
        }
        fn observe(&mut self, proc: &str) -> Result<Observation, BackendError> {
            self.d.observe(proc)
        }
        fn observe_summary(&mut self, proc: &str) -> Result<Observation, BackendError> {
            self.d.observe_summary(proc)
        }
        fn observe_pages(
            &mut self,
            proc: &str,
            start: u64,
            end: u64,
        ) -> Result<PageRuns, BackendError> {
            self.d.observe_pages(proc, start, end)
        }
        fn read_bytes(
            &mut self,
            proc: &str,
            addr: u64,
            len: u64,
        ) -> Result<Vec<Option<u8>>, BackendError> {
            self.d.read_bytes(proc, addr, len)
        }
        fn check_invariants(&mut self) -> Result<(), Vec<String>> {
            self.d.check_invariants()
        }
        fn before_statement(&mut self, line: u32, text: &str, loops: &[(u32, u64)]) {
            self.d.before_statement(line, text, loops);
            if line == 4 {
                self.seen += 1;
                if self.seen == 3 {
                    (self.f)(self.d);
                }
            }
        }
        fn after_statement(&mut self) -> Result<(), Vec<String>> {
            self.d.after_statement()
        }
        fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
            None
        }
    }

    /// The kernel alone gets `byte` at `addr` (the model does not see it).
    fn kernel_byte(d: &mut DiffBackend, addr: u64, byte: u8) {
        let call = Call::FillBytes { addr, len: 1, byte };
        let r = d.live.send("main", &call, Default::default());
        assert!(r.is_ok_and(|r| r[0] == 0), "fill");
    }

    /// Run SCRIPT with `inject`; the divergences and the observer's counts.
    fn run(
        verify: bool,
        inject: impl FnMut(&mut DiffBackend),
    ) -> (Vec<Divergence>, crate::incremental::IncrementalStats) {
        run_script(SCRIPT, verify, inject)
    }

    fn run_script(
        script: &str,
        verify: bool,
        inject: impl FnMut(&mut DiffBackend),
    ) -> (Vec<Divergence>, crate::incremental::IncrementalStats) {
        let script = ptlab_scenario::parse("inject.ptl", script).expect("parses");
        let mut d = DiffBackend::new(DiffOptions {
            verify_incremental: verify,
            ..Default::default()
        })
        .expect("live backend starts");
        let mut b = Inject {
            d: &mut d,
            f: inject,
            seen: 0,
        };
        let rep = ptlab_scenario::run(&script, &mut b, &RunOptions::default());
        assert!(!rep.aborted, "{:?}", rep.failures);
        d.finish();
        let stats = d.live.incremental_stats();
        (std::mem::take(&mut d.divergences), stats)
    }

    #[test]
    fn without_injection_the_diff_agrees_and_reuses() {
        if skip("without_injection_the_diff_agrees_and_reuses") {
            return;
        }
        let (div, st) = run(true, |_| {});
        assert!(div.is_empty(), "{div:?}");
        assert!(st.incremental > 0 && st.pages_reused > 0, "{st:?}");
        assert_eq!((st.stale_pages, st.stale_maps), (0, 0), "{st:?}");
    }

    #[test]
    fn a_wrong_model_outside_the_statement_is_caught_at_that_statement() {
        if skip("a_wrong_model_outside_the_statement_is_caught_at_that_statement") {
            return;
        }
        // The model alone writes another tag into a page 2 MiB away from
        // the one the statement names.
        let (div, st) = run(false, |d| {
            let r = d.model.call(
                "main",
                &Call::Access {
                    start: BASE + (2 << 20),
                    len: 4096,
                    write: true,
                    tag: Some(0xbad),
                },
            );
            assert!(r.is_ok(), "{r:?}");
        });
        assert!(st.incremental > 0, "{st:?}");
        let first = div.first().expect("the wrong model is caught");
        assert_eq!((first.line, first.kind.as_str()), (4, "pages"), "{first:?}");
        assert_eq!(first.loops, vec![(3, 2)], "{first:?}");
        assert!(first.summary.contains("0xbad"), "{first:?}");
    }

    #[test]
    fn a_kernel_change_that_moves_a_pagemap_word_is_caught_at_that_statement() {
        if skip("a_kernel_change_that_moves_a_pagemap_word_is_caught_at_that_statement") {
            return;
        }
        // The kernel alone drops a page 3 MiB away, and the diff is not
        // told (as when reclaim or migration moves a page).
        let (div, st) = run(true, |d| {
            let call = Call::Madvise {
                addr: BASE + (3 << 20),
                len: 4096,
                advice: Advice::DontNeed,
            };
            let r = d.live.send("main", &call, Default::default());
            assert!(r.is_ok_and(|r| r[0] == 0), "dontneed");
        });
        // Rss (counted from the pages: smaps was not read again) and the
        // page itself, both at the statement.
        for kind in ["maps", "pages"] {
            let d = div.iter().find(|d| d.kind == kind);
            let d = d.unwrap_or_else(|| panic!("no {kind} divergence: {div:?}"));
            assert_eq!((d.line, d.loops.clone()), (4, vec![(3, 2)]), "{d:?}");
        }
        // Found by the pagemap rule, not by verification's full read.
        assert_eq!(st.stale_pages, 0, "{st:?}");
    }

    #[test]
    fn a_change_no_rule_sees_is_caught_by_the_full_read() {
        if skip("a_change_no_rule_sees_is_caught_by_the_full_read") {
            return;
        }
        // Behind the diff's back, the worker writes a page 3 MiB away in
        // place: same frame, same pagemap word, new contents.
        let write = |d: &mut DiffBackend| {
            let call = Call::Access {
                start: BASE + (3 << 20),
                len: 4096,
                write: true,
                tag: Some(0xfeed),
            };
            let r = d.live.send("main", &call, Default::default());
            assert!(r.is_ok_and(|r| r[0] == 0), "write");
        };
        let (div, st) = run(false, write);
        let d = div.first().expect("the full read at the end catches it");
        assert_eq!(d.kind, "pages", "{d:?}");
        assert!(d.summary.contains("0xfeed"), "{d:?}");
        assert!(d.loops.first().is_some_and(|l| l.1 >= 2), "{d:?}");
        // Verification compares every re-used read with a full one: the
        // stale tag is counted, and the full read's divergence is at the
        // statement itself.
        let (div, st_v) = run(true, write);
        assert!(
            st_v.stale_pages >= 1,
            "{st_v:?} (without verification: {st:?})"
        );
        let first = div.first().expect("caught");
        assert_eq!(
            (first.line, first.loops.clone()),
            (4, vec![(3, 2)]),
            "{first:?}"
        );
    }

    /// Line 2 fills zeros into a page (no bytes beyond the tag for the
    /// model to keep), line 4 names other pages, line 6 fills bytes over
    /// three pages.
    const FILL_SCRIPT: &str = "p = mmap 4M at 0x7f10_0000_0000 fixed\n\
                               write p + 2M + 64 16 fill 0\n\
                               repeat 8 as i\n\
                               \x20 write p + 1M + i * 4K 4K\n\
                               end\n\
                               write p + 100 8K fill 0x11\n";

    #[test]
    fn a_wrong_model_byte_beyond_the_tag_is_caught() {
        if skip("a_wrong_model_byte_beyond_the_tag_is_caught") {
            return;
        }
        // The model alone memsets 50 bytes in the middle of a page 2 MiB
        // away: its tag (bytes 0..8) stays, so only the whole-page byte
        // comparison can see it.
        let (div, _) = run(false, |d| {
            let r = d.model.call(
                "main",
                &Call::FillBytes {
                    addr: BASE + (2 << 20) + 100,
                    len: 50,
                    byte: 0xab,
                },
            );
            assert!(r.is_ok(), "{r:?}");
        });
        let first = div.first().expect("the wrong byte is caught");
        assert_eq!((first.line, first.kind.as_str()), (4, "bytes"), "{first:?}");
        assert!(
            first
                .summary
                .contains(&format!("{:#x}", BASE + (2 << 20) + 100)),
            "{first:?}"
        );
        assert_eq!(first.model, vec!["0xab".to_string()], "{first:?}");
        assert_eq!(first.live, vec!["0x00".to_string()], "{first:?}");
    }

    /// The kernel alone gets one wrong byte beyond the tag of a tag page
    /// (one `write` made: its tag and zeros on the model, which holds no
    /// bytes for it, and no `fill` the diff remembers), at the first byte
    /// past the tag, in the middle and at the last byte: the worker's
    /// check of every loaded page's bytes 8..4096 sees it, and the page is
    /// compared whole at the statement that re-reads it (line 4 writes
    /// that page's tag in iteration 2).
    #[test]
    fn a_wrong_kernel_byte_anywhere_in_a_tag_page_is_caught() {
        if skip("a_wrong_kernel_byte_anywhere_in_a_tag_page_is_caught") {
            return;
        }
        for off in [8u64, 2048, 4095] {
            let at = BASE + 2 * 4096 + off;
            let (div, _) = run(false, |d| kernel_byte(d, at, 0x5a));
            let first = div.first().expect("caught");
            assert_eq!(
                (first.line, first.kind.as_str(), first.loops.clone()),
                (4, "bytes", vec![(3, 2)]),
                "offset {off}: {first:?}"
            );
            assert!(first.summary.contains(&format!("{at:#x}")), "{first:?}");
            assert_eq!(first.live, vec!["0x5a".to_string()], "{first:?}");
            assert_eq!(first.model, vec!["0x00".to_string()], "{first:?}");
        }
        // A page no statement names again (2 MiB away, its last byte):
        // caught by the full read at the end at the latest.
        let (div, _) = run(false, |d| kernel_byte(d, BASE + (2 << 20) + 4095, 0x5a));
        let first = div.first().expect("caught by the full read");
        assert_eq!(first.kind, "bytes", "{first:?}");
        assert_eq!(first.live, vec!["0x5a".to_string()], "{first:?}");
    }

    #[test]
    fn bytes_of_filled_pages_are_compared_whole() {
        if skip("bytes_of_filled_pages_are_compared_whole") {
            return;
        }
        // Without injection, the filled pages agree.
        let (div, _) = run_script(FILL_SCRIPT, false, |_| {});
        assert!(div.is_empty(), "{div:?}");
        // The kernel alone gets one wrong byte in the page line 2 filled
        // with zeros: the model holds no bytes for it, the diff remembers
        // the fill.
        let (div, _) = run_script(FILL_SCRIPT, false, |d| {
            kernel_byte(d, BASE + (2 << 20) + 300, 0x22)
        });
        let first = div.first().expect("caught");
        assert_eq!((first.line, first.kind.as_str()), (4, "bytes"), "{first:?}");
        assert_eq!(first.live, vec!["0x22".to_string()], "{first:?}");
        assert_eq!(first.model, vec!["0x00".to_string()], "{first:?}");
    }

    /// Three consecutive filled pages are loaded in one request
    /// ([`LiveBackend::present_pages_bytes`]); a wrong kernel byte in any
    /// one of them (first, middle, last page of the run) is still caught,
    /// at the same statement, with its address, as with a request per
    /// page.
    #[test]
    fn a_wrong_byte_in_any_page_of_a_batched_run_is_caught() {
        if skip("a_wrong_byte_in_any_page_of_a_batched_run_is_caught") {
            return;
        }
        const RUN_SCRIPT: &str = "p = mmap 4M at 0x7f10_0000_0000 fixed\n\
                                  write p 12K fill 0x11\n\
                                  repeat 4 as i\n\
                                  \x20 write p + 1M + i * 4K 4K\n\
                                  end\n";
        // The THP counters are global: other processes' splits and frees
        // under this machine's policy can move them in any step; this test
        // is about pages and bytes.
        let mine = |d: Vec<Divergence>| -> Vec<Divergence> {
            d.into_iter().filter(|d| d.kind != "stats").collect()
        };
        let (div, _) = run_script(RUN_SCRIPT, false, |_| {});
        let div = mine(div);
        assert!(div.is_empty(), "{div:?}");
        for at in [BASE + 8, BASE + 4096 + 2000, BASE + 2 * 4096 + 4095] {
            let (div, _) = run_script(RUN_SCRIPT, false, |d| kernel_byte(d, at, 0x22));
            let div = mine(div);
            let first = div.first().expect("caught");
            assert_eq!(
                (first.line, first.kind.as_str(), first.loops.clone()),
                (4, "bytes", vec![(3, 2)]),
                "{at:#x}: {first:?}"
            );
            assert!(first.summary.contains(&format!("{at:#x}")), "{first:?}");
            assert_eq!(first.live, vec!["0x22".to_string()], "{first:?}");
            assert_eq!(first.model, vec!["0x11".to_string()], "{first:?}");
        }
    }
}

#[cfg(test)]
mod reach_tests {
    use super::*;

    fn stats(live: &[&str], model: &[&str]) -> Divergence {
        Divergence {
            line: 3,
            stmt: "write p 0 4K".into(),
            loops: Vec::new(),
            process: String::new(),
            kind: "stats".into(),
            summary: String::new(),
            live: live.iter().map(|s| s.to_string()).collect(),
            model: model.iter().map(|s| s.to_string()).collect(),
            detail: Vec::new(),
            step: 3,
            khugepaged: 0,
        }
    }

    #[test]
    fn a_counter_of_a_size_out_of_reach_that_the_model_left_alone_is_background() {
        let d = stats(
            &[
                "64kB/nr_anon -1 (total -1)",
                "vmstat/thp_split_pmd +1 (total +1)",
            ],
            &[
                "64kB/nr_anon +0 (total +0)",
                "vmstat/thp_split_pmd +0 (total +0)",
            ],
        );
        assert!(counters_out_of_reach(&d, 0));
        // 64K reached: re-run.
        assert!(!counters_out_of_reach(&d, 1 << 4));
        // vmstat counters are 2M's.
        assert!(!counters_out_of_reach(&d, 1 << 9));
        // The model moved it: a model error is possible, re-run.
        let d = stats(
            &["16kB/anon_fault_alloc +0 (total +0)"],
            &["16kB/anon_fault_alloc +1 (total +1)"],
        );
        assert!(!counters_out_of_reach(&d, 0));
        // Lines that do not parse: re-run.
        assert!(!counters_out_of_reach(&stats(&["x"], &["y"]), 0));
        assert!(!counters_out_of_reach(&stats(&[], &[]), 0));
    }
}
