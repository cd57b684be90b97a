//! Running a scenario and snapshotting it at a chosen statement.
//!
//! **Steps.** Step *N* is the *N*-th statement the interpreter executes,
//! counted as [`ptlab_scenario::RunReport::statements_executed`] counts
//! them: every statement line (`let`, syscalls, accesses, `thp`, `before`,
//! `pfn`, `expect`, `observe`, a `@NAME` switch) counts once each time it
//! runs, so a loop body counts again on every iteration; a `repeat` header
//! itself does not count. "The state after step *N*" is the state once that
//! statement has finished; "before step *N*" is the state after step
//! *N − 1* (step 0 is the state before the first statement).
//!
//! A [`Recorder`] wraps the backend: it forwards every operation, counts
//! statements through the interpreter's `before_statement` /
//! `after_statement` hooks, and asks its [`Target`] for a [`Snapshot`] at the
//! right moments. [`ModelTarget`] snapshots the model (tables and all); a
//! live backend implements [`Target`] by observing every process.

use crate::snapshot::Snapshot;
use ptlab_model::observe::PageRuns;
use ptlab_model::{Call, ModelConfig, Observation, Pid};
use ptlab_scenario::{
    Backend, BackendError, FailureKind, ModelBackend, RunOptions, RunReport, Script,
};

/// Which moment to picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepSel {
    /// After the last statement.
    End,
    /// After step N (N = 0: before the first statement).
    Step(u64),
    /// After the first execution of the statement on this source line.
    Line(u32),
}

/// One executed statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepInfo {
    pub step: u64,
    pub line: u32,
    /// The statement's source text (trimmed, without its comment).
    pub text: String,
    /// Enclosing loops as (line of `repeat`, iteration).
    pub loops: Vec<(u32, u64)>,
}

impl StepInfo {
    /// `step 7 · line 12: fork child [repeat at line 5, iteration 3]`
    pub fn describe(&self) -> String {
        let mut s = format!("step {} · line {}: {}", self.step, self.line, self.text);
        for (l, i) in &self.loops {
            s.push_str(&format!(" [repeat at line {l}, iteration {i}]"));
        }
        s
    }
}

/// What a [`Recorder`] snapshots, and how processes are tracked.
pub trait Target {
    type B: Backend;
    fn backend(&mut self) -> &mut Self::B;
    /// The backend, shared (for [`Backend::hw_events`]).
    fn backend_ref(&self) -> &Self::B;
    /// `fork` succeeded: `child` now exists.
    fn forked(&mut self, parent: &str, child: &str);
    /// `exit` succeeded: `proc` is gone.
    fn exited(&mut self, proc: &str);
    /// Everything every live process shows now.
    fn snapshot(&mut self) -> Result<Snapshot, String>;
    /// Start recording where batches and TLB invalidations happen.
    fn hw_trace_begin(&mut self) {}
    /// What was recorded since [`Target::hw_trace_begin`]; `None` when this
    /// target cannot tell (the live kernel).
    fn hw_trace_take(&mut self) -> Option<HwWork> {
        None
    }
}

/// The hardware work of one pictured step, from the model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HwWork {
    /// Batches of more than one entry, and every TLB invalidation.
    pub events: Vec<crate::HwEvent>,
    /// Single-entry steps (the per-PTE path) per (process, operation):
    /// counted, not drawn one by one.
    pub singles: std::collections::BTreeMap<(String, String), u64>,
}

/// Most mapped pages (all processes) a model snapshot is taken of: 16 GiB
/// of 4 KiB pages, about 4 s and 200 MB of drawing state.
pub const MAX_PICTURE_PAGES: u64 = 4 << 20;

/// The model as a [`Target`]: snapshots carry the page-table tree.
pub struct ModelTarget {
    backend: ModelBackend,
    /// Process names and model pids, in creation order.
    procs: Vec<(String, Pid)>,
}

impl ModelTarget {
    pub fn new(cfg: ModelConfig) -> Self {
        Self::with_backend(ModelBackend::new(cfg))
    }

    /// Use an existing backend (it must not have forked yet).
    pub fn with_backend(backend: ModelBackend) -> Self {
        let main = backend.model().main_pid();
        ModelTarget {
            backend,
            procs: vec![("main".to_string(), main)],
        }
    }

    pub fn model(&self) -> &ptlab_model::Model {
        self.backend.model()
    }
}

impl Target for ModelTarget {
    type B = ModelBackend;
    fn backend(&mut self) -> &mut ModelBackend {
        &mut self.backend
    }
    fn backend_ref(&self) -> &ModelBackend {
        &self.backend
    }
    fn forked(&mut self, _parent: &str, child: &str) {
        // The model gives a child the highest pid so far (Model::fork).
        if let Some(pid) = self.backend.model().pids().max() {
            if !self.procs.iter().any(|(_, p)| *p == pid) {
                self.procs.push((child.to_string(), pid));
            }
        }
    }
    fn exited(&mut self, proc: &str) {
        self.procs.retain(|(n, _)| n != proc);
    }
    fn snapshot(&mut self) -> Result<Snapshot, String> {
        // A picture holds every mapped page: refuse one too big to draw
        // before building it (the model holds far bigger processes).
        let model = self.backend.model();
        let pages: u64 = self
            .procs
            .iter()
            .flat_map(|(name, pid)| model.observe_summary(*pid, name).maps)
            .map(|m| m.rss_kb / 4)
            .sum();
        if pages > MAX_PICTURE_PAGES {
            return Err(format!(
                "the processes map {pages} pages ({} GiB) at this step; a picture draws every \
                 page and stops above {} GiB: picture a smaller run (e.g. --param size=1G), or \
                 use `ptlab run` / `ptlab cost` at full size",
                pages >> 18,
                MAX_PICTURE_PAGES >> 18
            ));
        }
        Ok(Snapshot::from_model(model, &self.procs))
    }
    fn hw_trace_begin(&mut self) {
        self.backend.model_mut().set_hw_tracing(true);
    }
    fn hw_trace_take(&mut self) -> Option<HwWork> {
        let marks = self.backend.model_mut().take_hw_marks();
        self.backend.model_mut().set_hw_tracing(false);
        let name = |pid: Pid| {
            self.procs
                .iter()
                .find(|(_, p)| *p == pid)
                .map_or_else(|| format!("pid {pid}"), |(n, _)| n.clone())
        };
        let mut work = HwWork::default();
        for (pid, m) in marks {
            match m {
                ptlab_model::HwMark::Batch { va, nr, op } if nr > 1 => {
                    work.events.push(crate::HwEvent::Batch {
                        process: name(pid),
                        va,
                        nr,
                        op: op.to_string(),
                    })
                }
                ptlab_model::HwMark::Batch { op, .. } => {
                    *work.singles.entry((name(pid), op.to_string())).or_default() += 1
                }
                ptlab_model::HwMark::TlbFlush { start, end, whole } => {
                    let (start, end, op) = if !whole {
                        (start, end, "flush_tlb_range")
                    } else if end == u64::MAX {
                        (0, 0, "flush_tlb_mm")
                    } else {
                        (0, 0, "flush_tlb_range (over the threshold)")
                    };
                    work.events.push(crate::HwEvent::TlbFlush {
                        process: name(pid),
                        start,
                        end,
                        op: op.to_string(),
                    })
                }
            }
        }
        Some(work)
    }
}

/// A backend wrapper that counts statements and snapshots its target.
pub struct Recorder<T: Target> {
    target: T,
    sel: StepSel,
    before_after: bool,
    /// Statements finished so far.
    step: u64,
    /// The step whose after-state is wanted, once known.
    target_step: Option<u64>,
    info: Option<StepInfo>,
    before: Option<Snapshot>,
    after: Option<Snapshot>,
    log: Option<Vec<StepInfo>>,
    error: Option<String>,
    hw: Option<HwWork>,
}

impl<T: Target> Recorder<T> {
    pub fn new(target: T, sel: StepSel, before_after: bool, keep_log: bool) -> Self {
        Recorder {
            target,
            sel,
            before_after,
            step: 0,
            target_step: None,
            info: None,
            before: None,
            after: None,
            log: keep_log.then(Vec::new),
            error: None,
            hw: None,
        }
    }

    fn snap(&mut self) -> Option<Snapshot> {
        match self.target.snapshot() {
            Ok(s) => Some(s),
            Err(e) => {
                self.error.get_or_insert(e);
                None
            }
        }
    }

    pub fn into_target(self) -> T {
        self.target
    }
}

impl<T: Target> Backend for Recorder<T> {
    fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        let r = self.target.backend().call(proc, call);
        if r.is_ok() {
            match call {
                Call::Fork { child } => self.target.forked(proc, child),
                Call::Exit => self.target.exited(proc),
                _ => {}
            }
        }
        r
    }
    fn observe(&mut self, proc: &str) -> Result<Observation, BackendError> {
        self.target.backend().observe(proc)
    }
    fn observe_summary(&mut self, proc: &str) -> Result<Observation, BackendError> {
        self.target.backend().observe_summary(proc)
    }
    fn check_invariants(&mut self) -> Result<(), Vec<String>> {
        self.target.backend().check_invariants()
    }
    fn read_bytes(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
    ) -> Result<Vec<Option<u8>>, BackendError> {
        self.target.backend().read_bytes(proc, addr, len)
    }
    fn observe_pages(
        &mut self,
        proc: &str,
        start: u64,
        end: u64,
    ) -> Result<PageRuns, BackendError> {
        self.target.backend().observe_pages(proc, start, end)
    }
    fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
        self.target.backend_ref().hw_events()
    }
    fn before_statement(&mut self, line: u32, text: &str, loops: &[(u32, u64)]) {
        let info = StepInfo {
            step: self.step + 1,
            line,
            text: text.to_string(),
            loops: loops.to_vec(),
        };
        let hit = self.target_step.is_none()
            && match self.sel {
                StepSel::Step(n) => info.step == n,
                StepSel::Line(l) => line == l,
                StepSel::End => false,
            };
        if hit {
            self.target_step = Some(info.step);
            self.info = Some(info.clone());
            if self.before_after {
                self.before = self.snap();
            }
            self.target.hw_trace_begin();
        }
        if let Some(log) = self.log.as_mut() {
            log.push(info);
        }
        self.target.backend().before_statement(line, text, loops);
    }
    fn after_statement(&mut self) -> Result<(), Vec<String>> {
        let r = self.target.backend().after_statement();
        self.step += 1;
        if self.target_step == Some(self.step) && self.after.is_none() {
            self.after = self.snap();
            self.hw = self.target.hw_trace_take();
        }
        r
    }
}

/// What [`capture`] found.
pub struct Captured<T> {
    /// The state before the step (with `before_after`).
    pub before: Option<Snapshot>,
    /// The state after the step (or at the end).
    pub after: Snapshot,
    /// The pictured statement (`None` for [`StepSel::End`] and step 0).
    pub info: Option<StepInfo>,
    /// The run's report, without the failure of the step limit used to
    /// stop after the pictured step.
    pub report: RunReport,
    /// Every executed statement, when asked for.
    pub log: Vec<StepInfo>,
    /// The pictured step's batches and TLB invalidations (model only).
    pub hw: Option<HwWork>,
    /// The target, for a caller that wants more from it.
    pub target: T,
}

/// Run `script` on `target` and snapshot the moment `sel` picks (and the
/// one before it, with `before_after`). With [`StepSel::Step`] the run stops
/// right after the pictured statement.
pub fn capture<T: Target>(
    script: &Script,
    target: T,
    sel: StepSel,
    before_after: bool,
) -> Result<Captured<T>, String> {
    capture_with(script, target, sel, before_after, false)
}

/// [`capture`], optionally keeping the list of executed statements
/// (`keep_log`; with [`StepSel::End`] it lists the whole run).
pub fn capture_with<T: Target>(
    script: &Script,
    target: T,
    sel: StepSel,
    before_after: bool,
    keep_log: bool,
) -> Result<Captured<T>, String> {
    capture_with_params(script, target, sel, before_after, keep_log, &[])
}

/// [`capture_with`] with the scenario's `param` values set (as `ptlab run
/// --param NAME=VALUE` does).
pub fn capture_with_params<T: Target>(
    script: &Script,
    mut target: T,
    sel: StepSel,
    before_after: bool,
    keep_log: bool,
    params: &[(String, String)],
) -> Result<Captured<T>, String> {
    if before_after && matches!(sel, StepSel::End | StepSel::Step(0)) {
        return Err("before/after needs a step (1 or more) or a line to picture".to_string());
    }
    if sel == StepSel::Step(0) {
        let after = target.snapshot()?;
        return Ok(Captured {
            before: None,
            after,
            info: None,
            report: RunReport {
                file: script.file.clone(),
                ..RunReport::default()
            },
            log: Vec::new(),
            hw: None,
            target,
        });
    }
    let opts = RunOptions {
        max_steps: match sel {
            StepSel::Step(n) => Some(n),
            _ => None,
        },
        params: params.to_vec(),
        ..RunOptions::default()
    };
    let mut rec = Recorder::new(target, sel, before_after, keep_log);
    let mut report = ptlab_scenario::run(script, &mut rec, &opts);
    let limit = |f: &ptlab_scenario::Failure| {
        f.kind == FailureKind::Runtime && f.message.starts_with("step limit reached")
    };
    if report.failures.iter().any(limit) {
        report.failures.retain(|f| !limit(f));
        report.aborted = false;
    }
    if let Some(e) = rec.error.take() {
        return Err(format!("cannot snapshot the state: {e}"));
    }
    let stopped = |report: &RunReport| {
        report
            .failures
            .iter()
            .find(|f| f.kind == FailureKind::Runtime)
            .map(|f| format!(" (the run stopped: {f})"))
            .unwrap_or_default()
    };
    let after = match sel {
        StepSel::End => rec.snap(),
        StepSel::Step(n) if rec.after.is_none() => {
            return Err(format!(
                "step {n} was not reached: the scenario executed {} statements{}",
                rec.step,
                stopped(&report)
            ))
        }
        StepSel::Line(l) if rec.after.is_none() => {
            return Err(if rec.target_step.is_some() {
                format!(
                    "the statement at line {l} did not finish{}",
                    stopped(&report)
                )
            } else {
                format!(
                    "no statement at line {l} was executed ({} statements ran){}",
                    rec.step,
                    stopped(&report)
                )
            })
        }
        _ => rec.after.take(),
    };
    let after = match (after, rec.error.take()) {
        (Some(a), _) => a,
        (None, e) => {
            return Err(format!(
                "cannot snapshot the state: {}",
                e.unwrap_or_default()
            ))
        }
    };
    Ok(Captured {
        before: rec.before.take(),
        after,
        info: rec.info.take(),
        report,
        log: rec.log.take().unwrap_or_default(),
        hw: rec.hw.take(),
        target: rec.into_target(),
    })
}
