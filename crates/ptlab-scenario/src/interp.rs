//! The scenario interpreter.
//!
//! [`run`] walks the parsed [`Script`] against a [`Backend`] and collects a
//! [`RunReport`]. A failed expectation is recorded and the run goes on; a
//! runtime error (arithmetic overflow, an unsupported operation, a process
//! that does not exist, ...) is recorded and stops the run, since later
//! statements usually depend on the one that broke. Printing is left to the
//! caller: see [`ObserveOutput::render_text`], [`Failure`]'s `Display` and
//! the `to_json` methods.

use crate::ast::*;
use crate::backend::{Backend, BackendError};
use crate::expr::{self, fmt_num, Env, EvalError};
use ptlab_model::observe::PageRuns;
use ptlab_model::{
    Advice, Call, MapFlags, MremapFlags, Observation, Order, PageState, PrctlThp, Prot, Sections,
    ThpKnob, UffdCopyMode, UffdMoveMode, UffdRegisterMode, UffdZeropageMode, PAGE_SIZE,
};
use serde_json::json;

/// `MLOCK_ONFAULT` (include/uapi/asm-generic/mman-common.h).
const MLOCK_ONFAULT: u64 = 1;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// Most pages one `read`, `write` or `expect page` may cover: the whole
/// 47-bit user address space of four-level tables (128 TiB), so no range
/// a modelled machine can hold is refused (`machine memory` goes up to the
/// architecture's limit). A runaway scenario is bounded by
/// `--max-statements` and by the machine's memory instead.
pub const MAX_RANGE_PAGES: u64 = 1 << 35;

/// Default of [`RunOptions::max_statements`]: ten million statements and
/// `repeat` iterations. Far more than any test or seed scenario runs (the
/// biggest run a few hundred thousand), small enough that a runaway
/// `repeat 1000000000000000000` stops within seconds on the model.
pub const DEFAULT_MAX_STATEMENTS: u64 = 10_000_000;

/// The progress hook is called every this many statements and iterations.
pub const PROGRESS_EVERY: u64 = 1 << 16;

/// 0 = no limit; otherwise the limit. Set by [`set_default_max_statements`].
static DEFAULT_LIMIT: AtomicU64 = AtomicU64::new(DEFAULT_MAX_STATEMENTS);
static PROGRESS_HOOK: RwLock<Option<ProgressHook>> = RwLock::new(None);

/// Set the process-wide default of [`RunOptions::max_statements`] (`None`:
/// no limit). The `ptlab` CLI sets it from `--max-statements` once, so every
/// run it starts — directly, or inside `diff`, `show` and `cost` — has the
/// same bound without each library passing the option along.
pub fn set_default_max_statements(limit: Option<u64>) {
    DEFAULT_LIMIT.store(limit.unwrap_or(0), Ordering::Relaxed);
}

/// The current default of [`RunOptions::max_statements`].
pub fn default_max_statements() -> Option<u64> {
    match DEFAULT_LIMIT.load(Ordering::Relaxed) {
        0 => None,
        n => Some(n),
    }
}

/// How far a long run has got, for a progress indication.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// The scenario's file name.
    pub file: &'a str,
    /// Statements and `repeat` iterations executed so far.
    pub executed: u64,
    /// The limit, if any ([`RunOptions::max_statements`]).
    pub limit: Option<u64>,
    /// Line of the statement being executed.
    pub line: u32,
    /// Time since the run started.
    pub elapsed: std::time::Duration,
    /// The run ended (sent once, only to runs that reported progress).
    pub done: bool,
}

/// Called every [`PROGRESS_EVERY`] statements and iterations of every run,
/// and once more at the end of a run that called it.
pub type ProgressHook = Arc<dyn Fn(&Progress<'_>) + Send + Sync>;

/// Install (or remove) the process-wide progress hook (the `ptlab` CLI
/// draws a progress line on stderr from it when a run is long).
pub fn set_progress_hook(hook: Option<ProgressHook>) {
    *PROGRESS_HOOK.write().unwrap_or_else(|e| e.into_inner()) = hook;
}

fn progress_hook() -> Option<ProgressHook> {
    PROGRESS_HOOK
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Knobs for a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Failures beyond this many are counted but not stored.
    pub max_failures: usize,
    /// Stop with a runtime error after this many executed statements
    /// (`None`: no limit). For stepping through a run (`ptlab show --step`);
    /// [`RunOptions::max_statements`] is the safety bound.
    pub max_steps: Option<u64>,
    /// Stop with a runtime error ("statement limit reached") once this many
    /// statements plus `repeat` iterations have run (`None`: no limit).
    /// Iterations count too, so an empty or all-`repeat` loop body is
    /// bounded as well. Default: [`default_max_statements`].
    pub max_statements: Option<u64>,
    /// Values for `param NAME = DEFAULT` statements (`--param NAME=VALUE`):
    /// a number or size such as `42`, `0x10`, `64K`, `1G`. A name the
    /// scenario does not declare stops the run with a runtime error
    /// (callers should refuse it first: see [`Script::check_params`]).
    pub params: Vec<(String, String)>,
    /// Record the backend's hardware events per statement
    /// ([`RunReport::hw`]); needs a backend that counts them (the model).
    pub record_hw: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_failures: 200,
            max_steps: None,
            max_statements: default_max_statements(),
            params: Vec::new(),
            record_hw: false,
        }
    }
}

/// Hardware events of one source line (summed over its executions).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineHw {
    pub line: u32,
    /// The statement's source text.
    pub text: String,
    /// The operation (`mmap`, `mremap`, `write`, `uffd move`, ...), or
    /// `other` for statements that are not operations.
    pub op: String,
    /// How many times the line ran.
    pub executions: u64,
    pub events: ptlab_model::HwEvents,
}

/// Hardware events of a run: the total and per line, in line order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HwRecord {
    pub total: ptlab_model::HwEvents,
    pub lines: Vec<LineHw>,
}

/// Parse a `--param` value: a decimal, `0x` hex or `0b` binary integer
/// (`_` allowed between digits) with an optional `K`, `M`, `G` or `T` suffix.
pub fn parse_param_value(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let (digits, shift) = match t.chars().last() {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    let (radix, body) = if let Some(h) = clean.strip_prefix("0x") {
        (16, h)
    } else if let Some(b) = clean.strip_prefix("0b") {
        (2, b)
    } else {
        (10, clean.as_str())
    };
    let n = u64::from_str_radix(body, radix)
        .map_err(|_| format!("'{v}' is not a number or size (examples: 42, 0x10, 64K, 1G)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{v}' does not fit in 64 bits"))
}

/// What one `observe` statement saw.
#[derive(Clone, Debug, PartialEq)]
pub struct ObserveOutput {
    /// Order among all outputs and failures of the run.
    pub seq: u64,
    /// Line of the `observe` statement.
    pub line: u32,
    pub process: String,
    pub sections: ObserveSections,
    /// The observation; `stats` holds deltas since the scenario started.
    pub observation: Observation,
}

impl ObserveOutput {
    /// The canonical text rendering of the requested sections.
    pub fn render_text(&self) -> String {
        let s = self.sections;
        self.observation.render(Sections {
            maps: s.maps,
            smaps: s.smaps,
            pages: s.pages,
            stats: s.stats,
            numa: s.numa,
        })
    }

    /// `{"kind":"observe","line":N,"process":"main","observation":{...}}`.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "kind": "observe",
            "line": self.line,
            "process": self.process,
            "observation": self.observation,
        })
    }
}

/// Why a run failed at some statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// An `expect` did not hold.
    Expectation,
    /// A syscall failed or an access faulted and no `expect` line covered it.
    Unexpected,
    /// The backend's invariants do not hold.
    Invariant,
    /// The scenario could not go on (bad arithmetic, unsupported operation,
    /// unknown process, ...). The run stops here.
    Runtime,
}

impl FailureKind {
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Expectation => "expectation",
            FailureKind::Unexpected => "unexpected",
            FailureKind::Invariant => "invariant",
            FailureKind::Runtime => "runtime",
        }
    }
}

/// One failure, located in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Order among all outputs and failures of the run.
    pub seq: u64,
    pub file: String,
    pub line: u32,
    /// Set for runtime errors, which point at an operator or a name.
    pub column: Option<u32>,
    pub kind: FailureKind,
    /// One-line description (without the `file:line:` prefix).
    pub message: String,
    /// Further lines (expected vs actual listings), if any.
    pub detail: Option<String>,
    /// Enclosing `repeat` loops as (line, iteration), outermost first.
    pub loops: Vec<(u32, u64)>,
}

impl Failure {
    /// `{"kind":"failure","category":...,"line":...}` for JSON output.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "kind": "failure",
            "category": self.kind.name(),
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "detail": self.detail,
            "loops": self.loops.iter().map(|(l, i)| json!({"line": l, "iteration": i})).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for Failure {
    /// `file:line[:col]: <message>`, a loop context if any, then the detail
    /// lines indented.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(c) = self.column {
            write!(f, ":{c}")?;
        }
        let prefix = match self.kind {
            FailureKind::Expectation => "expectation failed: ",
            FailureKind::Runtime => "runtime error: ",
            FailureKind::Invariant => "invariant violated: ",
            FailureKind::Unexpected => "",
        };
        write!(f, ": {prefix}{}", self.message)?;
        for (line, iter) in &self.loops {
            write!(f, " [repeat at line {line}, iteration {iter}]")?;
        }
        if let Some(detail) = &self.detail {
            for l in detail.lines() {
                write!(f, "\n    {l}")?;
            }
        }
        Ok(())
    }
}

/// Everything a run produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunReport {
    pub file: String,
    pub outputs: Vec<ObserveOutput>,
    pub failures: Vec<Failure>,
    /// Failures past [`RunOptions::max_failures`], counted only.
    pub suppressed_failures: u64,
    /// Expectations (including `expect ok|errno|ret|segv`) that held.
    pub expectations_passed: u64,
    /// Statements executed (each loop iteration counts its body again).
    pub statements_executed: u64,
    /// Whether a runtime error stopped the run early.
    pub aborted: bool,
    /// Hardware events per line, when [`RunOptions::record_hw`] was set and
    /// the backend counts them.
    pub hw: Option<HwRecord>,
}

impl RunReport {
    /// True when nothing failed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.suppressed_failures == 0
    }

    /// Total failures, including suppressed ones.
    pub fn failure_count(&self) -> u64 {
        (self.failures.len() as u64).saturating_add(self.suppressed_failures)
    }

    /// A one-line summary such as `PASS: 12 expectations held` or
    /// `FAIL: 2 failures (12 expectations held)`.
    pub fn summary(&self) -> String {
        let held = self.expectations_passed;
        let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        if self.passed() {
            format!("PASS: {} held", plural(held, "expectation"))
        } else {
            format!(
                "FAIL: {} ({} held{})",
                plural(self.failure_count(), "failure"),
                plural(held, "expectation"),
                if self.aborted {
                    "; run stopped early"
                } else {
                    ""
                }
            )
        }
    }
}

/// A uffd output field as the kernel wrote it: bytes in hex, `-errno` in decimal.
fn fmt_result(v: i64) -> String {
    if v < 0 {
        v.to_string()
    } else {
        fmt_num(v as u64)
    }
}

/// Run `script` on `backend`.
pub fn run(script: &Script, backend: &mut dyn Backend, opts: &RunOptions) -> RunReport {
    let slots = vec![Slot::Unset; script.names.len()];
    let baseline = backend.observe("main").map(|o| o.stats).unwrap_or_default();
    let hw_start = if opts.record_hw {
        backend.hw_events()
    } else {
        None
    };
    let hooks = backend.statement_hooks();
    let mut it = Interp {
        script,
        backend,
        opts,
        slots,
        current: "main".to_string(),
        current_gen: 0,
        called_gen: u64::MAX,
        uffd_call_gen: u64::MAX,
        baseline,
        loops: Vec::new(),
        seq: 0,
        hook_reported: false,
        hw_lines: BTreeMap::new(),
        hw_on: hw_start.is_some(),
        hooks,
        report: RunReport {
            file: script.file.clone(),
            ..RunReport::default()
        },
        work: 0,
        slow_at: 0,
        step_limit: opts.max_steps.unwrap_or(u64::MAX),
        full_stmts: hooks || hw_start.is_some(),
        started: Instant::now(),
        progress: progress_hook(),
        progress_reported: false,
        spare_handle: std::cell::Cell::new(None),
        uffd_call: None,
        prepared: Vec::new(),
        prepared_at: 0,
    };
    it.slow_at = it.next_slow();
    if let Err(why) = script.check_params(&opts.params) {
        it.fail(0, None, FailureKind::Runtime, why, None);
        it.report.aborted = true;
        return it.report;
    }
    let result = it.block(&script.body);
    if it.progress_reported {
        if let Some(hook) = &it.progress {
            hook(&Progress {
                file: &script.file,
                executed: it.work,
                limit: it.opts.max_statements,
                line: 0,
                elapsed: it.started.elapsed(),
                done: true,
            });
        }
    }
    if let Some(start) = hw_start {
        let end = it.backend.hw_events().unwrap_or(start);
        it.report.hw = Some(HwRecord {
            total: end.since(&start),
            lines: std::mem::take(&mut it.hw_lines).into_values().collect(),
        });
    }
    if let Err(RtError(e)) = result {
        let e = *e;
        it.fail(
            e.pos.line,
            Some(e.pos.column),
            FailureKind::Runtime,
            e.message,
            None,
        );
        it.report.aborted = true;
    }
    it.report
}

/// A frame handle bound by `NAME = pfn ADDR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    Anon(u64),
    Zero,
    HugeZero(u32),
}

/// A variable's current state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Never assigned (its binding has not run yet).
    Unset,
    Int(u64),
    Frame(Frame),
    /// Its last binding was a syscall that failed at this line.
    Failed(u32),
}

/// A runtime error that stops the run. Boxed: built only on the error
/// path, it keeps every `Result<_, RtError>` of the statement path one
/// pointer wide (returned in registers) instead of a position and a
/// `String` moved through every frame.
struct RtError(Box<RtErrorInner>);

struct RtErrorInner {
    pos: Pos,
    message: String,
}

impl From<EvalError> for RtError {
    #[cold]
    fn from(e: EvalError) -> Self {
        RtError(Box::new(RtErrorInner {
            pos: e.pos,
            message: e.message,
        }))
    }
}

#[cold]
#[inline(never)]
fn rt(pos: Pos, message: impl Into<String>) -> RtError {
    RtError(Box::new(RtErrorInner {
        pos,
        message: message.into(),
    }))
}

struct Interp<'a> {
    script: &'a Script,
    backend: &'a mut dyn Backend,
    opts: &'a RunOptions,
    slots: Vec<Slot>,
    /// The process unprefixed statements run in.
    current: String,
    /// Changed with every change of `current` (a process switch, an
    /// `@NAME` prefix and its end): equal generations, equal names.
    current_gen: u64,
    /// `current_gen` at the last [`Backend::call`] (every call names
    /// `current`), `u64::MAX` before the first: the next call names the
    /// same process when it is still `current_gen`.
    called_gen: u64,
    /// `current_gen` when the handle of `uffd_call` was last set from
    /// `current` (`u64::MAX`: not known).
    uffd_call_gen: u64,
    /// THP counters when the run started.
    baseline: BTreeMap<String, i64>,
    /// Enclosing loops: (line, iteration).
    loops: Vec<(u32, u64)>,
    seq: u64,
    /// Whether `after_statement` already reported a violation (reported once).
    hook_reported: bool,
    /// Hardware events per line (when recording).
    hw_lines: BTreeMap<u32, LineHw>,
    hw_on: bool,
    /// [`Backend::statement_hooks`], asked once: without hooks the
    /// per-statement calls are skipped.
    hooks: bool,
    report: RunReport,
    /// Statements and `repeat` iterations executed (for the limit and the
    /// progress hook).
    work: u64,
    /// The next value of `work` at which [`Interp::tick_slow`] runs: one
    /// past the statement limit or the next progress report, whichever
    /// comes first (one compare per tick).
    slow_at: u64,
    /// [`RunOptions::max_steps`], `u64::MAX` for none.
    step_limit: u64,
    /// Whether a statement needs [`Interp::stmt_full`]'s bookkeeping for
    /// the whole run: the backend's per-statement hooks or the per-line
    /// hardware events. A statement with an `@NAME` prefix takes it too.
    full_stmts: bool,
    started: Instant,
    progress: Option<ProgressHook>,
    progress_reported: bool,
    /// The handle string of the last uffd call, kept for the next one: a
    /// loop of uffd ioctls builds its calls without an allocation each.
    spare_handle: std::cell::Cell<Option<String>>,
    /// The call of the last `uffd copy` or `uffd move` statement, its
    /// fields rewritten by the next one ([`Interp::uffd_call_into`]): a
    /// loop of those ioctls neither builds nor moves a [`Call`] per
    /// iteration.
    uffd_call: Option<Call>,
    /// One frame per `repeat` being executed, innermost last: the calls
    /// of its body's statements kept across its iterations
    /// ([`Interp::call_prepared`]).
    prepared: Vec<Vec<Prepared>>,
    /// The index in the innermost running `repeat` body of the statement
    /// being executed (set before each of them runs).
    prepared_at: usize,
}

/// A statement's [`Call`] kept across the iterations of the `repeat`
/// around it: the call built the last time, and the state of every
/// variable its expressions read then. While those variables hold the
/// same state, evaluating the statement again gives the same call (the
/// expressions read nothing else), so the kept one is made again.
enum Prepared {
    /// Not run yet in this execution of the loop.
    Empty,
    /// An operation whose call is not kept (see [`kept_exprs`]).
    Never,
    Call {
        /// The statement the call is for (checked on use).
        stmt: *const Stmt,
        /// Each variable the expressions read, with its value when the
        /// call was built (a call is kept only when every one held a
        /// number).
        deps: Box<[(usize, u64)]>,
        call: Call,
    },
}

/// The expressions an operation's call is built from, for the operations
/// whose call depends on nothing else (no process name, no handle
/// string): the memory syscalls and the accesses. `None` for the others.
fn kept_exprs(op: &Op) -> Option<Vec<&Expr>> {
    let mut v: Vec<&Expr> = Vec::new();
    match op {
        Op::Syscall(Syscall::Mmap {
            len,
            addr,
            prot_raw,
            flags,
            ..
        }) => {
            v.push(len);
            v.extend(addr.iter().chain(prot_raw).chain(flags));
        }
        Op::Syscall(Syscall::Munmap { addr, len }) => v.extend([addr, len]),
        Op::Syscall(Syscall::Madvise {
            addr,
            len,
            advice_raw,
            ..
        }) => {
            v.extend([addr, len]);
            v.extend(advice_raw);
        }
        Op::Syscall(Syscall::Mremap {
            addr,
            old_len,
            new_len,
            fixed,
            flags,
            ..
        }) => {
            v.extend([addr, old_len, new_len]);
            v.extend(fixed.iter().chain(flags));
        }
        Op::Syscall(Syscall::Mprotect {
            addr,
            len,
            prot_raw,
            ..
        }) => {
            v.extend([addr, len]);
            v.extend(prot_raw);
        }
        Op::Access(a) => {
            v.push(&a.addr);
            v.extend(a.len.iter().chain(&a.tag).chain(&a.fill));
        }
        _ => return None,
    }
    Some(v)
}

/// The variables `e` reads, appended to `out` (each once).
fn expr_vars(e: &Expr, out: &mut Vec<usize>) {
    match e {
        Expr::Num(_) => {}
        Expr::Var { id, .. } => {
            if !out.contains(&id.index()) {
                out.push(id.index());
            }
        }
        Expr::Neg(inner) => expr_vars(inner, out),
        Expr::Chain { first, rest } => {
            expr_vars(first, out);
            for (_, rhs, _) in rest {
                expr_vars(rhs, out);
            }
        }
        Expr::Call { args, .. } => {
            expr_vars(&args[0], out);
            expr_vars(&args[1], out);
        }
    }
}

/// Whether statements in loops make their kept calls again
/// ([`Interp::call_prepared`]); tests turn it off to compare with calls
/// evaluated every time.
#[cfg(not(test))]
#[inline(always)]
fn prepared_calls() -> bool {
    true
}

#[cfg(test)]
thread_local! {
    static PREPARED_CALLS: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

#[cfg(test)]
fn prepared_calls() -> bool {
    PREPARED_CALLS.with(|c| c.get())
}

/// Whether `uffd copy` and `uffd move` statements write their call in
/// place ([`Interp::uffd_call_into`]); tests turn it off to compare with
/// the calls [`Interp::syscall`] builds.
#[cfg(not(test))]
#[inline(always)]
fn uffd_in_place() -> bool {
    true
}

#[cfg(test)]
thread_local! {
    static UFFD_IN_PLACE: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

#[cfg(test)]
fn uffd_in_place() -> bool {
    UFFD_IN_PLACE.with(|c| c.get())
}

impl Env for Interp<'_> {
    fn int(&self, id: NameId, pos: Pos) -> Result<u64, EvalError> {
        let name = self.script.name(id);
        match self.slots.get(id.index()) {
            Some(Slot::Int(v)) => Ok(*v),
            Some(Slot::Failed(line)) => Err(EvalError::new(
                pos,
                format!("'{name}' has no value: the syscall that binds it at line {line} failed"),
            )),
            Some(Slot::Frame(_)) => Err(EvalError::new(
                pos,
                format!("'{name}' is a frame handle, not a number"),
            )),
            Some(Slot::Unset) | None => Err(EvalError::new(
                pos,
                format!("'{name}' has no value yet (the statement binding it has not run)"),
            )),
        }
    }
}

impl<'a> Interp<'a> {
    // ----- bookkeeping -------------------------------------------------------

    fn next_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq = self.seq.saturating_add(1);
        s
    }

    fn fail(
        &mut self,
        line: u32,
        column: Option<u32>,
        kind: FailureKind,
        message: String,
        detail: Option<String>,
    ) {
        if self.report.failures.len() >= self.opts.max_failures {
            self.report.suppressed_failures = self.report.suppressed_failures.saturating_add(1);
            return;
        }
        let seq = self.next_seq();
        self.report.failures.push(Failure {
            seq,
            file: self.script.file.clone(),
            line,
            column,
            kind,
            message,
            detail,
            loops: self.loops.clone(),
        });
    }

    /// Record the outcome of one expectation.
    fn expectation(&mut self, line: u32, result: Result<(), (String, Option<String>)>) {
        match result {
            Ok(()) => {
                self.report.expectations_passed = self.report.expectations_passed.saturating_add(1)
            }
            Err((message, detail)) => {
                self.fail(line, None, FailureKind::Expectation, message, detail)
            }
        }
    }

    fn eval(&self, e: &Expr) -> Result<u64, RtError> {
        // The quick path: every variable a number and no operation failing.
        // The reader holds the slot slice itself (passed by value, in
        // registers), not the interpreter it would be loaded from.
        let slots = self.slots.as_slice();
        let var = move |id: NameId| match slots.get(id.index()) {
            Some(Slot::Int(v)) => Some(*v),
            _ => None,
        };
        if let Some(v) = expr::eval_quick(e, var) {
            return Ok(v);
        }
        Ok(expr::eval(e, self)?)
    }

    fn eval_opt(&self, e: Option<&Expr>, default: u64) -> Result<u64, RtError> {
        e.map_or(Ok(default), |e| self.eval(e))
    }

    /// UFFDIO_COPY's mode: the raw bits (`raw N`), then the named flags.
    fn uffd_copy_mode(
        &self,
        raw: Option<&Expr>,
        wp: bool,
        dontwake: bool,
    ) -> Result<UffdCopyMode, RtError> {
        let mut mode = UffdCopyMode::from_bits_retain(self.eval_opt(raw, 0)?);
        if wp {
            mode.insert(UffdCopyMode::WP);
        }
        if dontwake {
            mode.insert(UffdCopyMode::DONTWAKE);
        }
        Ok(mode)
    }

    /// UFFDIO_MOVE's mode: the raw bits (`raw N`), then the named flags.
    fn uffd_move_mode(
        &self,
        raw: Option<&Expr>,
        allow_src_holes: bool,
        dontwake: bool,
    ) -> Result<UffdMoveMode, RtError> {
        let mut mode = UffdMoveMode::from_bits_retain(self.eval_opt(raw, 0)?);
        if allow_src_holes {
            mode.insert(UffdMoveMode::ALLOW_SRC_HOLES);
        }
        if dontwake {
            mode.insert(UffdMoveMode::DONTWAKE);
        }
        Ok(mode)
    }

    /// A raw value the model keeps in 32 bits (`mmap` flags, `prot`): a
    /// larger one is a runtime error rather than silently cut.
    fn eval_u32(&self, pos: Pos, e: &Expr, what: &str) -> Result<u32, RtError> {
        let v = self.eval(e)?;
        u32::try_from(v).map_err(|_| rt(pos, format!("{what} {v:#x} does not fit in 32 bits")))
    }

    /// `prot`, or the raw `prot EXPR` value.
    fn eval_prot(&self, pos: Pos, prot: Prot, raw: Option<&Expr>) -> Result<Prot, RtError> {
        match raw {
            Some(e) => Ok(Prot::from_bits_retain(self.eval_u32(pos, e, "prot")?)),
            None => Ok(prot),
        }
    }

    fn set(&mut self, id: NameId, value: Slot) {
        if let Some(slot) = self.slots.get_mut(id.index()) {
            *slot = value;
        }
    }

    fn observe_current(&mut self, pos: Pos) -> Result<Observation, RtError> {
        self.backend
            .observe(&self.current)
            .map_err(|e| rt(pos, format!("cannot observe: {e}")))
    }

    /// The current process's maps, smaps, `VmLck` and counters (no
    /// per-page records): what expectations read.
    fn observe_summary(&mut self, pos: Pos) -> Result<Observation, RtError> {
        self.backend
            .observe_summary(&self.current)
            .map_err(|e| rt(pos, format!("cannot observe: {e}")))
    }

    /// Current THP counters minus the ones at the start of the run.
    fn stat_deltas(&self, stats: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
        let mut out: BTreeMap<String, i64> = stats
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.saturating_sub(self.baseline.get(k).copied().unwrap_or(0)),
                )
            })
            .collect();
        for (k, v) in &self.baseline {
            out.entry(k.clone())
                .or_insert_with(|| 0i64.saturating_sub(*v));
        }
        out
    }

    // ----- statements --------------------------------------------------------

    fn block(&mut self, stmts: &'a [Stmt]) -> Result<(), RtError> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    /// Count one statement or `repeat` iteration against
    /// [`RunOptions::max_statements`], reporting progress now and then.
    #[inline(always)]
    fn tick(&mut self, pos: Pos) -> Result<(), RtError> {
        self.work = self.work.saturating_add(1);
        if self.work >= self.slow_at {
            return self.tick_slow(pos);
        }
        Ok(())
    }

    /// The smallest `work` above the current one that is past the
    /// statement limit or a multiple of [`PROGRESS_EVERY`]: where
    /// [`Interp::tick`] must take the slow path next.
    fn next_slow(&self) -> u64 {
        let progress = (self.work / PROGRESS_EVERY)
            .saturating_add(1)
            .saturating_mul(PROGRESS_EVERY);
        match self.opts.max_statements {
            Some(max) => progress.min(max.saturating_add(1).max(self.work.saturating_add(1))),
            None => progress,
        }
    }

    /// [`Interp::tick`] past the limit or at a progress report.
    #[cold]
    #[inline(never)]
    fn tick_slow(&mut self, pos: Pos) -> Result<(), RtError> {
        if let Some(max) = self.opts.max_statements {
            if self.work > max {
                return Err(rt(
                    pos,
                    format!(
                        "statement limit reached: {max} statements and repeat iterations \
                         executed (raise the limit with --max-statements N; 0 = no limit)"
                    ),
                ));
            }
        }
        if self.work.is_multiple_of(PROGRESS_EVERY) {
            if let Some(hook) = &self.progress {
                self.progress_reported = true;
                hook(&Progress {
                    file: &self.script.file,
                    executed: self.work,
                    limit: self.opts.max_statements,
                    line: pos.line,
                    elapsed: self.started.elapsed(),
                    done: false,
                });
            }
        }
        self.slow_at = self.next_slow();
        Ok(())
    }

    #[inline(always)]
    fn stmt(&mut self, s: &'a Stmt) -> Result<(), RtError> {
        self.tick(s.pos)?;
        if self.report.statements_executed >= self.step_limit {
            return Err(self.step_limit_reached(s.pos));
        }
        if self.full_stmts || s.process.is_some() {
            return self.stmt_full(s);
        }
        // No hooks, no per-line events, no process switch: what
        // `stmt_full` does then.
        self.stmt_inner(s)?;
        if !matches!(s.kind, StmtKind::Repeat { .. }) {
            self.report.statements_executed = self.report.statements_executed.saturating_add(1);
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn step_limit_reached(&self, pos: Pos) -> RtError {
        rt(
            pos,
            format!(
                "step limit reached ({} statements executed)",
                self.report.statements_executed
            ),
        )
    }

    /// A statement with everything around it: the backend's hooks, the
    /// per-line hardware events, an `@NAME` process switch.
    #[inline(never)]
    fn stmt_full(&mut self, s: &'a Stmt) -> Result<(), RtError> {
        if self.hooks && !matches!(s.kind, StmtKind::Repeat { .. }) {
            self.backend
                .before_statement(s.pos.line, &s.text, &self.loops);
        }
        let saved = s
            .process
            .as_ref()
            .map(|p| std::mem::replace(&mut self.current, p.clone()));
        if saved.is_some() {
            self.current_gen = self.current_gen.wrapping_add(1);
        }
        let hw_before = if self.hw_on && !matches!(s.kind, StmtKind::Repeat { .. }) {
            self.backend.hw_events()
        } else {
            None
        };
        let result = self.stmt_inner(s);
        if let Some(before) = hw_before {
            if let Some(after) = self.backend.hw_events() {
                let delta = after.since(&before);
                let e = self.hw_lines.entry(s.pos.line).or_insert_with(|| LineHw {
                    line: s.pos.line,
                    text: s.text.clone(),
                    op: match &s.kind {
                        StmtKind::Op { op, .. } => op.name().to_string(),
                        _ => "other".to_string(),
                    },
                    ..LineHw::default()
                });
                e.executions += 1;
                e.events.add_all(&delta);
            }
        }
        if let Some(prev) = saved {
            self.current = prev;
            self.current_gen = self.current_gen.wrapping_add(1);
        }
        result?;
        if !matches!(s.kind, StmtKind::Repeat { .. }) {
            self.report.statements_executed = self.report.statements_executed.saturating_add(1);
            if self.hooks && !self.hook_reported {
                if let Err(violations) = self.backend.after_statement() {
                    self.hook_reported = true;
                    self.fail(
                        s.pos.line,
                        None,
                        FailureKind::Invariant,
                        format!(
                            "after '{}' ({} violation{}; later per-statement checks are not reported)",
                            s.text,
                            violations.len(),
                            if violations.len() == 1 { "" } else { "s" }
                        ),
                        Some(violations.join("\n")),
                    );
                }
            }
        }
        Ok(())
    }

    fn stmt_inner(&mut self, s: &'a Stmt) -> Result<(), RtError> {
        match &s.kind {
            StmtKind::Let { name, value } => {
                let v = self.eval(value)?;
                self.set(*name, Slot::Int(v));
            }
            StmtKind::Param { name, value } => {
                let pname = self.script.name(*name);
                let given = self.opts.params.iter().rev().find(|(n, _)| n == pname);
                let v = match given {
                    Some((_, text)) => parse_param_value(text)
                        .map_err(|e| rt(s.pos, format!("--param {pname}: {e}")))?,
                    None => self.eval(value)?,
                };
                self.set(*name, Slot::Int(v));
            }
            StmtKind::Switch { process } => {
                self.current.clone_from(process);
                self.current_gen = self.current_gen.wrapping_add(1);
            }
            StmtKind::Op { bind, op, check } => self.op(s, *bind, op, check.as_ref())?,
            StmtKind::Repeat { count, var, body } => {
                let n = self.eval(count)?;
                self.loops.push((s.pos.line, 0));
                let keep = prepared_calls() && n > 1;
                if keep {
                    self.prepared
                        .push(body.iter().map(|_| Prepared::Empty).collect());
                }
                let result = self.repeat_body(s.pos, n, *var, body, keep);
                if keep {
                    self.prepared.pop();
                }
                result?;
                self.loops.pop();
            }
            StmtKind::BindPfn { name, addr } => {
                let addr = self.eval(addr)?;
                let frame = match self.page_at(s.pos, addr)? {
                    PageState::NotPresent => {
                        return Err(rt(
                            s.pos,
                            format!(
                                "pfn: no page is present at {} in process {}",
                                fmt_num(addr),
                                self.current
                            ),
                        ))
                    }
                    state => frame_of(&state),
                };
                self.set(*name, Slot::Frame(frame));
            }
            StmtKind::Expect(e) => self.expect(s, e)?,
            StmtKind::Before(set) => {
                self.call_backend(&Call::SetBefore { set: *set })
                    .map_err(|e| rt(s.pos, format!("before: {e}")))?;
            }
            StmtKind::After(set) => {
                self.call_backend(&Call::SetAfter { set: *set })
                    .map_err(|e| rt(s.pos, format!("after: {e}")))?;
            }
            StmtKind::Observe(sections) => {
                let mut observation = self.observe_current(s.pos)?;
                observation.stats = self.stat_deltas(&observation.stats);
                let seq = self.next_seq();
                self.report.outputs.push(ObserveOutput {
                    seq,
                    line: s.pos.line,
                    process: self.current.clone(),
                    sections: *sections,
                    observation,
                });
            }
        }
        Ok(())
    }

    /// The `n` iterations of a `repeat` body; `keep`: a frame of kept
    /// calls for this body is on top of [`Interp::prepared`].
    fn repeat_body(
        &mut self,
        pos: Pos,
        n: u64,
        var: Option<NameId>,
        body: &'a [Stmt],
        keep: bool,
    ) -> Result<(), RtError> {
        for i in 0..n {
            self.tick(pos)?;
            if let Some(top) = self.loops.last_mut() {
                top.1 = i;
            }
            if let Some(v) = var {
                self.set(v, Slot::Int(i));
            }
            if keep {
                for (k, st) in body.iter().enumerate() {
                    self.prepared_at = k;
                    if !self.full_stmts && self.kept_stmt(st, k)? {
                        continue;
                    }
                    self.stmt(st)?;
                }
            } else {
                self.block(body)?;
            }
        }
        Ok(())
    }

    /// [`Interp::stmt`] for statement `at` of the innermost running
    /// `repeat` body when it is an operation without an `expect` line or
    /// a process prefix whose kept call is still valid (every variable it
    /// reads as it was): the statement's count and limits, the kept call,
    /// its outcome, as `stmt()` → `op()` → [`Interp::call_prepared`] would
    /// do them. `false` (nothing done) for any other statement.
    #[inline(always)]
    fn kept_stmt(&mut self, s: &'a Stmt, at: usize) -> Result<bool, RtError> {
        let StmtKind::Op {
            bind,
            op,
            check: None,
        } = &s.kind
        else {
            return Ok(false);
        };
        if s.process.is_some() {
            return Ok(false);
        }
        let slots = self.slots.as_slice();
        match self.prepared.last().and_then(|f| f.get(at)) {
            Some(Prepared::Call { stmt, deps, .. })
                if std::ptr::eq(*stmt, s)
                    && deps
                        .iter()
                        .all(|&(i, v)| matches!(slots.get(i), Some(&Slot::Int(x)) if x == v)) => {}
            _ => return Ok(false),
        }
        // What `stmt()` does first (neither changes a variable).
        self.tick(s.pos)?;
        if self.report.statements_executed >= self.step_limit {
            return Err(self.step_limit_reached(s.pos));
        }
        let same = self.called_gen == self.current_gen;
        self.called_gen = self.current_gen;
        let outcome = match self.prepared.last().and_then(|f| f.get(at)) {
            Some(Prepared::Call { call, .. }) => {
                if same {
                    self.backend.call_same_proc(&self.current, call)
                } else {
                    self.backend.call(&self.current, call)
                }
            }
            _ => return Err(rt(s.pos, format!("{}: kept call lost", op.name()))),
        };
        match outcome {
            Ok(v) => {
                if let Some(id) = bind {
                    self.set(*id, Slot::Int(v));
                }
            }
            outcome => self.op_outcome(s, *bind, op, None, outcome)?,
        }
        self.report.statements_executed = self.report.statements_executed.saturating_add(1);
        Ok(true)
    }

    // ----- operations --------------------------------------------------------

    fn op(
        &mut self,
        s: &Stmt,
        bind: Option<NameId>,
        op: &Op,
        check: Option<&Check>,
    ) -> Result<(), RtError> {
        let outcome = match op {
            Op::Syscall(sc @ (Syscall::UffdCopy { .. } | Syscall::UffdMove { .. }))
                if uffd_in_place() =>
            {
                let mut slot = self.uffd_call.take();
                let handle_is_current = self.uffd_call_gen == self.current_gen;
                // Not known while the call is being built (an error leaves
                // the slot empty).
                self.uffd_call_gen = u64::MAX;
                self.uffd_call_into(s.pos, sc, &mut slot, handle_is_current)?;
                let outcome = match &slot {
                    Some(call) => self.call_backend(call),
                    None => return Err(rt(s.pos, "uffd: no call built".to_string())),
                };
                self.uffd_call = slot;
                self.uffd_call_gen = self.current_gen;
                outcome
            }
            _ if !self.prepared.is_empty() => self.call_prepared(s, op)?,
            _ => {
                // Built where it is used (no `Result<Call, _>` returned
                // and moved: those moves were stalled copies, issue 14).
                let mut call = Call::Exit;
                self.evaluate_into(s.pos, op, &mut call)?;
                let outcome = self.call_backend(&call);
                self.recycle(&mut call);
                outcome
            }
        };
        // The common case: it succeeded and no `expect` line follows.
        if let (Ok(v), None) = (&outcome, check) {
            if let Some(id) = bind {
                self.set(id, Slot::Int(*v));
            }
            return Ok(());
        }
        self.op_outcome(s, bind, op, check, outcome)
    }

    /// [`Interp::op`] past the common case: a failure, or an `expect` line.
    #[inline(never)]
    fn op_outcome(
        &mut self,
        s: &Stmt,
        bind: Option<NameId>,
        op: &Op,
        check: Option<&Check>,
        outcome: Result<u64, BackendError>,
    ) -> Result<(), RtError> {
        let name = op.name();
        match &outcome {
            Ok(v) => {
                if let Some(id) = bind {
                    self.set(id, Slot::Int(*v));
                }
            }
            Err(BackendError::Errno(_)) if !matches!(op, Op::Access(_)) => {
                if let Some(id) = bind {
                    self.set(id, Slot::Failed(s.pos.line));
                }
            }
            // A failed uffd ioctl still reports its output field.
            Err(BackendError::ErrnoWithResult { result, .. }) if !matches!(op, Op::Access(_)) => {
                if let Some(id) = bind {
                    self.set(id, Slot::Int(*result as u64));
                }
            }
            Err(BackendError::Segv { .. } | BackendError::Uffd { .. })
                if matches!(op, Op::Access(_)) => {}
            Err(other) => return Err(rt(s.pos, format!("{name}: {other}"))),
        }
        // The errno of a failed syscall, and how to show it.
        let failed_with = match &outcome {
            Err(BackendError::Errno(e)) => Some((*e, e.to_string())),
            Err(BackendError::ErrnoWithResult { errno, result }) => {
                Some((*errno, format!("{errno} (result {})", fmt_result(*result))))
            }
            _ => None,
        };
        let Some(check) = check else {
            if let Some((_, e)) = &failed_with {
                self.fail(
                    s.pos.line,
                    None,
                    FailureKind::Unexpected,
                    format!("{name} failed with {e} and no expect line covers it"),
                    None,
                );
                return Ok(());
            }
            match outcome {
                Err(BackendError::Uffd { addr }) => self.fail(
                    s.pos.line,
                    None,
                    FailureKind::Unexpected,
                    format!(
                        "{name} at {} faults to userfaultfd and no 'expect uffd' covers it",
                        fmt_num(addr)
                    ),
                    None,
                ),
                Err(BackendError::Segv { addr }) => self.fail(
                    s.pos.line,
                    None,
                    FailureKind::Unexpected,
                    format!(
                        "{name} at {} raised SIGSEGV and no 'expect segv' covers it",
                        fmt_num(addr)
                    ),
                    None,
                ),
                _ => {}
            }
            return Ok(());
        };
        let result = match (&check.kind, &outcome) {
            (CheckKind::Ok, Ok(_)) => Ok(()),
            (CheckKind::Ok | CheckKind::Ret(_), Err(_)) if failed_with.is_some() => {
                let e = failed_with.as_ref().map_or(String::new(), |f| f.1.clone());
                Err(format!(
                    "expected {name} to succeed, but it failed with {e}"
                ))
            }
            (CheckKind::Ok, Err(BackendError::Uffd { addr })) => Err(format!(
                "expected {name} to complete, but it faulted to userfaultfd at {}",
                fmt_num(*addr)
            )),
            (CheckKind::Ok, Err(err)) => {
                Err(format!("expected {name} to complete, but it raised {err}"))
            }
            (CheckKind::Errno(want), Err(_))
                if failed_with.as_ref().is_some_and(|f| f.0 == *want) =>
            {
                Ok(())
            }
            (CheckKind::Errno(want), Err(_)) if failed_with.is_some() => {
                let got = failed_with.as_ref().map_or(String::new(), |f| f.1.clone());
                Err(format!(
                    "expected {name} to fail with {want}, but it failed with {got}"
                ))
            }
            (CheckKind::Errno(want), _) => {
                let ret = outcome.as_ref().map_or_else(
                    |_| String::new(),
                    |v| format!(" (returned {})", fmt_num(*v)),
                );
                Err(format!(
                    "expected {name} to fail with {want}, but it succeeded{ret}"
                ))
            }
            (CheckKind::Ret(want), Ok(got)) => {
                let want = self.eval(want)?;
                if want == *got {
                    Ok(())
                } else {
                    Err(format!(
                        "expected {name} to return {}, but it returned {}",
                        fmt_num(want),
                        fmt_num(*got)
                    ))
                }
            }
            (CheckKind::Segv, Err(BackendError::Segv { .. })) => Ok(()),
            (CheckKind::Segv, Err(BackendError::Uffd { addr })) => Err(format!(
                "expected {name} to raise SIGSEGV, but it faulted to userfaultfd at {}",
                fmt_num(*addr)
            )),
            (CheckKind::Segv, _) => Err(format!(
                "expected {name} to raise SIGSEGV, but it completed"
            )),
            (CheckKind::Uffd, Err(BackendError::Uffd { .. })) => Ok(()),
            (CheckKind::Uffd, Err(BackendError::Segv { addr })) => Err(format!(
                "expected {name} to fault to userfaultfd, but it raised SIGSEGV at {}",
                fmt_num(*addr)
            )),
            (CheckKind::Uffd, _) => Err(format!(
                "expected {name} to fault to userfaultfd, but it completed"
            )),
            (CheckKind::Ret(_), Err(err)) => Err(format!(
                "expected {name} to return a value, but it raised {err}"
            )),
        };
        self.expectation(check.pos.line, result.map_err(|m| (m, None)));
        Ok(())
    }

    /// Run the call of `s` (operation `op`), a statement of the innermost
    /// running `repeat` body at [`Interp::prepared_at`]: the call kept
    /// from its last iteration when every variable its expressions read
    /// is as it was then; else the call evaluated now, kept for the next
    /// iteration the first time (when `op` is one of [`kept_exprs`]'),
    /// evaluated every time once a variable it reads has changed. The same call,
    /// the same errors, as evaluating it every time (test
    /// `prepared_calls_equal_evaluated_calls`).
    fn call_prepared(&mut self, s: &Stmt, op: &Op) -> Result<Result<u64, BackendError>, RtError> {
        let at = self.prepared_at;
        let slots = self.slots.as_slice();
        let fresh = match self.prepared.last().and_then(|f| f.get(at)) {
            Some(Prepared::Call { stmt, deps, .. }) if std::ptr::eq(*stmt, s) => !deps
                .iter()
                .all(|&(i, v)| matches!(slots.get(i), Some(&Slot::Int(x)) if x == v)),
            Some(Prepared::Empty) => true,
            // Not kept, or not this statement's (not expected): built
            // every time.
            _ => return Ok(self.call_evaluated(s.pos, op)?),
        };
        if fresh {
            self.prepare(s, op, at)?;
        }
        match self.prepared.last().and_then(|f| f.get(at)) {
            Some(Prepared::Call { call, .. }) => {
                // What `call_backend()` does (the kept call borrowed).
                let same = self.called_gen == self.current_gen;
                self.called_gen = self.current_gen;
                Ok(if same {
                    self.backend.call_same_proc(&self.current, call)
                } else {
                    self.backend.call(&self.current, call)
                })
            }
            // `prepare()` found it not kept: evaluated every time.
            _ => Ok(self.call_evaluated(s.pos, op)?),
        }
    }

    /// Evaluate the call of `s` into the empty frame entry `at` of the
    /// innermost loop, with the values of the variables it reads; mark
    /// the entry [`Prepared::Never`] when `op` is not kept, a variable it
    /// reads holds no number, or the entry held a call whose variables
    /// have changed since (the caller then evaluates the call). An
    /// evaluation error leaves the entry empty.
    #[inline(never)]
    fn prepare(&mut self, s: &Stmt, op: &Op, at: usize) -> Result<(), RtError> {
        let mut entry = match self.prepared.last_mut().and_then(|f| f.get_mut(at)) {
            Some(e) => std::mem::replace(e, Prepared::Empty),
            None => return Ok(()),
        };
        let result = match &mut entry {
            // A variable it reads changed since the call was kept: a
            // statement whose arguments change (a loop variable's) is
            // evaluated every time from here on, as without kept calls.
            Prepared::Call { .. } => {
                entry = Prepared::Never;
                Ok(())
            }
            _ => match kept_exprs(op) {
                None => {
                    entry = Prepared::Never;
                    Ok(())
                }
                Some(exprs) => {
                    let mut call = Call::Exit;
                    let r = self.evaluate_into(s.pos, op, &mut call);
                    if r.is_ok() {
                        let mut vars = Vec::new();
                        for e in exprs {
                            expr_vars(e, &mut vars);
                        }
                        let deps: Option<Box<[(usize, u64)]>> = vars
                            .into_iter()
                            .map(|i| match self.slots.get(i) {
                                Some(&Slot::Int(x)) => Some((i, x)),
                                _ => None,
                            })
                            .collect();
                        entry = match deps {
                            Some(deps) => Prepared::Call {
                                stmt: s,
                                deps,
                                call,
                            },
                            None => Prepared::Never,
                        };
                    }
                    r
                }
            },
        };
        if let Some(e) = self.prepared.last_mut().and_then(|f| f.get_mut(at)) {
            *e = entry;
        }
        result
    }

    /// The call of `op` evaluated now and run.
    fn call_evaluated(&mut self, pos: Pos, op: &Op) -> Result<Result<u64, BackendError>, RtError> {
        let mut call = Call::Exit;
        self.evaluate_into(pos, op, &mut call)?;
        let outcome = self.call_backend(&call);
        self.recycle(&mut call);
        Ok(outcome)
    }

    /// Run `call` in process `current`, telling the backend when the
    /// previous call named the same process ([`Backend::call_same_proc`]:
    /// the model then skips comparing the name).
    #[inline(always)]
    fn call_backend(&mut self, call: &Call) -> Result<u64, BackendError> {
        let same = self.called_gen == self.current_gen;
        self.called_gen = self.current_gen;
        if same {
            self.backend.call_same_proc(&self.current, call)
        } else {
            self.backend.call(&self.current, call)
        }
    }

    /// Keep the handle string of a uffd call made for the next one
    /// ([`Interp::syscall`]).
    fn recycle(&self, call: &mut Call) {
        match call {
            Call::UffdCopy { handle, .. }
            | Call::UffdMove { handle, .. }
            | Call::UffdZeropage { handle, .. } => {
                self.spare_handle.set(Some(std::mem::take(handle)))
            }
            _ => {}
        }
    }

    /// The call of a `uffd copy` or `uffd move` statement (no `via`), its
    /// arguments evaluated in [`Interp::syscall`]'s order, written into
    /// `slot`: the fields of the call already there when it is the same
    /// kind (its handle string reused), else a new call. Any other syscall
    /// is built by [`Interp::syscall`]. The same call, field for field, as
    /// `syscall(pos, call, None)` (test `uffd_calls_in_place_equal_built_calls`).
    /// `handle_is_current`: the call in `slot` has `current` as its handle
    /// already (nothing to compare).
    fn uffd_call_into(
        &self,
        pos: Pos,
        call: &Syscall,
        slot: &mut Option<Call>,
        handle_is_current: bool,
    ) -> Result<(), RtError> {
        let set_handle = |h: &mut String, name: &str| {
            if !handle_is_current && h != name {
                h.clear();
                h.push_str(name);
            }
        };
        match call {
            Syscall::UffdMove {
                dst,
                src,
                len,
                allow_src_holes,
                dontwake,
                raw,
            } => {
                let mode = self.uffd_move_mode(raw.as_ref(), *allow_src_holes, *dontwake)?;
                let (d, s, l) = (self.eval(dst)?, self.eval(src)?, self.eval(len)?);
                if let Some(Call::UffdMove {
                    handle,
                    dst,
                    src,
                    len,
                    mode: m,
                }) = slot
                {
                    set_handle(handle, &self.current);
                    (*dst, *src, *len, *m) = (d, s, l, mode);
                } else {
                    *slot = Some(Call::UffdMove {
                        handle: self.current.clone(),
                        dst: d,
                        src: s,
                        len: l,
                        mode,
                    });
                }
            }
            Syscall::UffdCopy {
                dst,
                src,
                len,
                tag,
                wp,
                dontwake,
                raw,
            } => {
                let (d, s, l) = (self.eval(dst)?, self.eval(src)?, self.eval(len)?);
                let t = tag.as_ref().map(|e| self.eval(e)).transpose()?;
                let mode = self.uffd_copy_mode(raw.as_ref(), *wp, *dontwake)?;
                if let Some(Call::UffdCopy {
                    handle,
                    dst,
                    src,
                    len,
                    tag,
                    mode: m,
                }) = slot
                {
                    set_handle(handle, &self.current);
                    (*dst, *src, *len, *tag, *m) = (d, s, l, t, mode);
                } else {
                    *slot = Some(Call::UffdCopy {
                        handle: self.current.clone(),
                        dst: d,
                        src: s,
                        len: l,
                        tag: t,
                        mode,
                    });
                }
            }
            other => *slot = Some(self.syscall(pos, other, None)?),
        }
        Ok(())
    }

    /// [`Interp::evaluate`] written into `out` (left as it was on an
    /// error): a syscall or an access is built in place.
    #[inline(always)]
    fn evaluate_into(&self, pos: Pos, op: &Op, out: &mut Call) -> Result<(), RtError> {
        match op {
            Op::Syscall(call) => self.syscall_into(pos, call, None, out),
            Op::Access(access) => self.access_into(pos, access, out),
            _ => {
                *out = self.evaluate(pos, op)?;
                Ok(())
            }
        }
    }

    /// The [`Call`] an operation statement makes, its arguments evaluated.
    fn evaluate(&self, pos: Pos, op: &Op) -> Result<Call, RtError> {
        Ok(match op {
            Op::Syscall(call) => self.syscall(pos, call, None)?,
            Op::Access(access) => self.access(pos, access)?,
            Op::Thp(setting) => self.thp(pos, setting)?,
            Op::Memory(size) => Call::SetMemory {
                bytes: self.eval(size)?,
            },
            Op::Nodes(n) => Call::SetNodes {
                nodes: self.eval_u32(pos, n, "machine nodes")?,
            },
            Op::Numa(NumaOp::Node(n)) => Call::NumaRunOn {
                node: self.eval_u32(pos, n, "numa node")?,
            },
            Op::Numa(NumaOp::Scan { addr, len }) => Call::NumaScan {
                addr: self.eval(addr)?,
                len: self.eval(len)?,
            },
            Op::Swap(size, kind) => Call::SetSwap {
                bytes: match size {
                    Some(e) => self.eval(e)?,
                    None => 0,
                },
                kind: *kind,
            },
        })
    }

    /// The call of a syscall statement; `via` is the handle a `uffd ... via
    /// NAME` names (a uffd ioctl otherwise uses the process's own handle,
    /// named after the process).
    fn syscall(&self, pos: Pos, call: &Syscall, via: Option<&str>) -> Result<Call, RtError> {
        let mut out = Call::Exit;
        self.syscall_into(pos, call, via, &mut out)?;
        Ok(out)
    }

    /// [`Interp::syscall`] written into `out` (left as it was on an error).
    fn syscall_into(
        &self,
        pos: Pos,
        call: &Syscall,
        via: Option<&str>,
        out: &mut Call,
    ) -> Result<(), RtError> {
        // The handle's name, in the string the last uffd call used when
        // there is one (its buffer reused).
        let handle = || {
            let name = via.unwrap_or(&self.current);
            match self.spare_handle.take() {
                Some(mut h) => {
                    if h != name {
                        h.clear();
                        h.push_str(name);
                    }
                    h
                }
                None => name.to_string(),
            }
        };
        *out = match call {
            Syscall::Mmap {
                len,
                addr,
                placement,
                prot,
                noreserve,
                populate,
                locked,
                prot_raw,
                flags: raw_flags,
            } => {
                let len = self.eval(len)?;
                let addr = self.eval_opt(addr.as_ref(), 0)?;
                let mut flags = match raw_flags {
                    Some(e) => MapFlags::from_bits_retain(self.eval_u32(pos, e, "mmap flags")?),
                    None => MapFlags::PRIVATE | MapFlags::ANONYMOUS,
                };
                match placement {
                    Placement::Hint => {}
                    Placement::Fixed => flags |= MapFlags::FIXED,
                    Placement::NoReplace => flags |= MapFlags::FIXED_NOREPLACE,
                }
                if *noreserve {
                    flags.insert(MapFlags::NORESERVE);
                }
                if *populate {
                    flags.insert(MapFlags::POPULATE);
                }
                if *locked {
                    flags.insert(MapFlags::LOCKED);
                }
                Call::Mmap {
                    addr,
                    len,
                    prot: self.eval_prot(pos, *prot, prot_raw.as_ref())?,
                    flags,
                }
            }
            Syscall::Munmap { addr, len } => Call::Munmap {
                addr: self.eval(addr)?,
                len: self.eval(len)?,
            },
            Syscall::Madvise {
                addr,
                len,
                advice,
                advice_raw,
            } => Call::Madvise {
                addr: self.eval(addr)?,
                len: self.eval(len)?,
                // The `int behavior` argument: the low 32 bits.
                advice: match advice_raw {
                    Some(e) => Advice::from_value(self.eval(e)? as u32 as i32),
                    None => *advice,
                },
            },
            Syscall::Mremap {
                addr,
                old_len,
                new_len,
                maymove,
                fixed,
                dontunmap,
                flags: raw,
            } => {
                let (addr, old_len, new_len) =
                    (self.eval(addr)?, self.eval(old_len)?, self.eval(new_len)?);
                let fixed = fixed.as_ref().map(|e| self.eval(e)).transpose()?;
                let mut flags = MremapFlags::from_bits_retain(self.eval_opt(raw.as_ref(), 0)?);
                if *maymove {
                    flags.insert(MremapFlags::MAYMOVE);
                }
                if fixed.is_some() {
                    flags.insert(MremapFlags::FIXED);
                }
                if *dontunmap {
                    flags.insert(MremapFlags::DONTUNMAP);
                }
                // new_addr is 0 unless `fixed NEWADDR` gives it (the
                // scenario language has no DONTUNMAP hint).
                Call::Mremap {
                    addr,
                    old_len,
                    new_len,
                    flags,
                    new_addr: fixed.unwrap_or(0),
                }
            }
            Syscall::Mprotect {
                addr,
                len,
                prot,
                prot_raw,
            } => Call::Mprotect {
                addr: self.eval(addr)?,
                len: self.eval(len)?,
                prot: self.eval_prot(pos, *prot, prot_raw.as_ref())?,
            },
            Syscall::Mlock {
                addr,
                len,
                onfault,
                flags,
            } => {
                let (addr, len) = (self.eval(addr)?, self.eval(len)?);
                // MLOCK_ONFAULT is `onfault` however it is written.
                let raw = self.eval_opt(flags.as_ref(), 0)?;
                Call::Mlock {
                    addr,
                    len,
                    onfault: *onfault || raw & MLOCK_ONFAULT != 0,
                    flags: raw & !MLOCK_ONFAULT,
                }
            }
            Syscall::Munlock { addr, len } => Call::Munlock {
                addr: self.eval(addr)?,
                len: self.eval(len)?,
            },
            Syscall::Mseal { addr, len, flags } => Call::Mseal {
                addr: self.eval(addr)?,
                len: self.eval(len)?,
                flags: self.eval_opt(flags.as_ref(), 0)?,
            },
            Syscall::Fork { child } => Call::Fork {
                child: child.clone(),
            },
            Syscall::Exit => Call::Exit,
            Syscall::PrctlSetThpDisable {
                disable,
                except_advised,
                flags,
            } => Call::PrctlThp(PrctlThp::Set {
                disable: self.eval(disable)?,
                flags: self.eval_opt(flags.as_ref(), 0)?
                    | if *except_advised {
                        ptlab_model::thp::PR_THP_DISABLE_EXCEPT_ADVISED
                    } else {
                        0
                    },
            }),
            Syscall::PrctlGetThpDisable => Call::PrctlThp(PrctlThp::Get),
            Syscall::Setrlimit { resource, bytes } => Call::Setrlimit {
                resource: *resource,
                bytes: match bytes {
                    Some(e) => self.eval(e)?,
                    None => ptlab_model::RLIM_INFINITY,
                },
            },
            Syscall::CapDropIpcLock => Call::DropCapIpcLock,
            Syscall::Fill { addr, headroom } => Call::FillVmas {
                addr: self.eval(addr)?,
                headroom: self.eval(headroom)?,
            },
            Syscall::UffdOpen => Call::UffdCreate {
                handle: handle(),
                api: true,
                flags: None,
            },
            Syscall::UffdCreate { name, api, flags } => Call::UffdCreate {
                handle: name.clone().unwrap_or_else(handle),
                api: *api,
                flags: flags.as_ref().map(|e| self.eval(e)).transpose()?,
            },
            Syscall::UffdApi { api, features } => Call::UffdApi {
                handle: handle(),
                api: self.eval(api)?,
                features: self.eval_opt(features.as_ref(), 0)?,
            },
            Syscall::UffdVia { handle, call } => {
                return self.syscall_into(pos, call, Some(handle), out)
            }
            Syscall::UffdRegister {
                addr,
                len,
                mode,
                raw,
            } => {
                let mut bits = UffdRegisterMode::from_bits_retain(self.eval_opt(raw.as_ref(), 0)?);
                if mode.missing {
                    bits.insert(UffdRegisterMode::MISSING);
                }
                if mode.wp {
                    bits.insert(UffdRegisterMode::WP);
                }
                if mode.minor {
                    bits.insert(UffdRegisterMode::MINOR);
                }
                Call::UffdRegister {
                    handle: handle(),
                    addr: self.eval(addr)?,
                    len: self.eval(len)?,
                    mode: bits,
                }
            }
            Syscall::UffdUnregister { addr, len } => Call::UffdUnregister {
                handle: handle(),
                addr: self.eval(addr)?,
                len: self.eval(len)?,
            },
            Syscall::UffdCopy {
                dst,
                src,
                len,
                tag,
                wp,
                dontwake,
                raw,
            } => {
                let (dst, src, len) = (self.eval(dst)?, self.eval(src)?, self.eval(len)?);
                let tag = tag.as_ref().map(|e| self.eval(e)).transpose()?;
                let mode = self.uffd_copy_mode(raw.as_ref(), *wp, *dontwake)?;
                Call::UffdCopy {
                    handle: handle(),
                    dst,
                    src,
                    len,
                    tag,
                    mode,
                }
            }
            Syscall::UffdZeropage {
                dst,
                len,
                dontwake,
                raw,
            } => {
                let (dst, len) = (self.eval(dst)?, self.eval(len)?);
                let mut mode = UffdZeropageMode::from_bits_retain(self.eval_opt(raw.as_ref(), 0)?);
                if *dontwake {
                    mode.insert(UffdZeropageMode::DONTWAKE);
                }
                Call::UffdZeropage {
                    handle: handle(),
                    dst,
                    len,
                    mode,
                }
            }
            Syscall::UffdMove {
                dst,
                src,
                len,
                allow_src_holes,
                dontwake,
                raw,
            } => {
                let mode = self.uffd_move_mode(raw.as_ref(), *allow_src_holes, *dontwake)?;
                Call::UffdMove {
                    handle: handle(),
                    dst: self.eval(dst)?,
                    src: self.eval(src)?,
                    len: self.eval(len)?,
                    mode,
                }
            }
        };
        Ok(())
    }

    /// The access of every page of the range; the backend stops at the
    /// first fault.
    fn access(&self, pos: Pos, a: &Access) -> Result<Call, RtError> {
        let mut out = Call::Exit;
        self.access_into(pos, a, &mut out)?;
        Ok(out)
    }

    /// [`Interp::access`] written into `out` (left as it was on an error).
    fn access_into(&self, pos: Pos, a: &Access, out: &mut Call) -> Result<(), RtError> {
        let addr = self.eval(&a.addr)?;
        if let Some(f) = &a.fill {
            // memset(ADDR, BYTE, LEN): exactly these bytes; LEN defaults
            // to the rest of ADDR's page.
            let len = self.eval_opt(a.len.as_ref(), PAGE_SIZE - addr % PAGE_SIZE)?;
            let byte = self.eval(f)?;
            let byte = u8::try_from(byte)
                .map_err(|_| rt(pos, format!("fill {}: not a byte (0..=255)", fmt_num(byte))))?;
            page_range(pos, a.kind.name(), addr, len)?;
            *out = Call::FillBytes { addr, len, byte };
            return Ok(());
        }
        let len = self.eval_opt(a.len.as_ref(), PAGE_SIZE)?;
        let tag = a.tag.as_ref().map(|e| self.eval(e)).transpose()?;
        let (start, end) = page_range(pos, a.kind.name(), addr, len)?;
        *out = Call::Access {
            start,
            len: end - start,
            write: a.kind == AccessKind::Write,
            tag,
        };
        Ok(())
    }

    fn thp(&self, pos: Pos, setting: &ThpSetting) -> Result<Call, RtError> {
        Ok(match setting {
            ThpSetting::Enabled(mode) => Call::SetThp {
                knob: ThpKnob::TopLevel,
                mode: *mode,
            },
            ThpSetting::Size { size, mode } => {
                let bytes = self.eval(size)?;
                let order = Order::from_bytes(bytes).ok_or_else(|| {
                    rt(
                        pos,
                        format!(
                            "thp: {} is not a power-of-two folio size of at least 4K",
                            fmt_num(bytes)
                        ),
                    )
                })?;
                Call::SetThp {
                    knob: ThpKnob::Size(order.0),
                    mode: *mode,
                }
            }
            ThpSetting::UseZeroPage(on) => Call::SetUseZeroPage { on: *on },
        })
    }

    // ----- expectations ------------------------------------------------------

    /// State of the page containing `addr` in the current process.
    fn page_at(&mut self, pos: Pos, addr: u64) -> Result<PageState, RtError> {
        let page = addr & !(PAGE_SIZE - 1);
        let end = page.saturating_add(PAGE_SIZE);
        let pages = self.pages(pos, page, end)?;
        Ok(pages
            .state_at(page)
            .cloned()
            .unwrap_or(PageState::NotPresent))
    }

    fn pages(&mut self, pos: Pos, start: u64, end: u64) -> Result<PageRuns, RtError> {
        self.backend
            .observe_pages(&self.current, start, end)
            .map_err(|e| rt(pos, format!("cannot observe pages: {e}")))
    }

    fn expect(&mut self, s: &Stmt, e: &Expect) -> Result<(), RtError> {
        let line = s.pos.line;
        let result = match e {
            Expect::Maps(lines) => {
                let r = self.expect_maps(s, lines)?;
                self.expectation(line, r);
                return Ok(());
            }
            Expect::Page { addr, len, attrs } => {
                let r = self.expect_page(s, addr, len.as_ref(), attrs)?;
                self.expectation(line, r);
                return Ok(());
            }
            Expect::Pfn { addr, equal, frame } => {
                let addr = self.eval(addr)?;
                let want = match self.slots.get(frame.index()) {
                    Some(Slot::Frame(f)) => *f,
                    _ => {
                        let name = self.script.name(*frame);
                        return Err(rt(
                            s.pos,
                            format!("'{name}' holds no frame handle (its 'pfn' line has not run)"),
                        ));
                    }
                };
                let state = self.page_at(s.pos, addr)?;
                let got = match state {
                    PageState::NotPresent => None,
                    ref st => Some(frame_of(st)),
                };
                let name = self.script.name(*frame);
                match (got, equal) {
                    (None, _) => Err(format!(
                        "page {} is not present, so it has no frame to compare with '{name}'",
                        fmt_num(addr)
                    )),
                    (Some(g), true) if g == want => Ok(()),
                    (Some(g), false) if g != want => Ok(()),
                    (Some(_), true) => Err(format!(
                        "page {} is not frame '{name}' (page is {})",
                        fmt_num(addr),
                        describe(&state)
                    )),
                    (Some(_), false) => {
                        Err(format!("page {} is still frame '{name}'", fmt_num(addr)))
                    }
                }
            }
            Expect::Stat { key, value } => {
                let want = self.eval(value)?;
                let obs = self.observe_summary(s.pos)?;
                let deltas = self.stat_deltas(&obs.stats);
                let got = deltas.get(key).copied().unwrap_or(0);
                if i128::from(got) == i128::from(want) {
                    Ok(())
                } else {
                    let hint = if deltas.contains_key(key) {
                        String::new()
                    } else {
                        crate::error::suggestion(key, deltas.keys().map(String::as_str)).replace(
                            " (did you mean",
                            "; the backend reports no such counter (did you mean",
                        )
                    };
                    Err(format!("stat {key}: expected {want}, found {got}{hint}"))
                }
            }
            Expect::VmFlags { addr, has, flags } => {
                let addr = self.eval(addr)?;
                let obs = self.observe_summary(s.pos)?;
                match obs.maps.iter().find(|m| m.start <= addr && addr < m.end) {
                    None => Err(format!("no VMA contains {}", fmt_num(addr))),
                    Some(m) => {
                        let wrong: Vec<&str> = flags
                            .iter()
                            .filter(|f| m.vm_flags.contains(f) != *has)
                            .map(String::as_str)
                            .collect();
                        if wrong.is_empty() {
                            Ok(())
                        } else {
                            let verb = if *has { "lacks" } else { "has" };
                            Err(format!(
                                "VMA {:x}-{:x} {verb} {} (VmFlags: {})",
                                m.start,
                                m.end,
                                wrong.join(" "),
                                m.vm_flags.join(" ")
                            ))
                        }
                    }
                }
            }
            Expect::AnonHuge { addr, size } | Expect::LazyFree { addr, size } => {
                let addr = self.eval(addr)?;
                let want = self.eval(size)?;
                let obs = self.observe_summary(s.pos)?;
                let (field, kb): (&str, fn(&ptlab_model::observe::MapsEntry) -> u64) = match e {
                    Expect::AnonHuge { .. } => ("AnonHugePages", |m| m.anon_huge_kb),
                    _ => ("LazyFree", |m| m.lazyfree_kb),
                };
                match obs.maps.iter().find(|m| m.start <= addr && addr < m.end) {
                    None => Err(format!("no VMA contains {}", fmt_num(addr))),
                    Some(m) => {
                        let got = kb(m).saturating_mul(1024);
                        if got == want {
                            Ok(())
                        } else {
                            Err(format!(
                                "{field} of VMA {:x}-{:x}: expected {} kB, found {} kB",
                                m.start,
                                m.end,
                                want / 1024,
                                kb(m)
                            ))
                        }
                    }
                }
            }
            Expect::Bytes {
                addr,
                len,
                fill,
                value,
            } => {
                let (addr, len, want) = (self.eval(addr)?, self.eval(len)?, self.eval(value)?);
                if !*fill && !(1..=8).contains(&len) {
                    return Err(rt(
                        s.pos,
                        format!(
                            "expect bytes ... == VALUE compares 1 to 8 bytes, not {}; use 'fill BYTE' for more",
                            fmt_num(len)
                        ),
                    ));
                }
                if *fill && want > 0xff {
                    return Err(rt(
                        s.pos,
                        format!("fill {}: not a byte (0..=255)", fmt_num(want)),
                    ));
                }
                page_range(s.pos, "expect bytes", addr, len)?;
                let got = self
                    .backend
                    .read_bytes(&self.current, addr, len)
                    .map_err(|e| rt(s.pos, format!("expect bytes: {e}")))?;
                check_bytes(addr, &got, *fill, want)
            }
            Expect::VmLck { size } => {
                let want = self.eval(size)?;
                let obs = self.observe_summary(s.pos)?;
                let got = obs.vm_lck_kb.saturating_mul(1024);
                if got == want {
                    Ok(())
                } else {
                    Err(format!(
                        "VmLck of process {}: expected {} kB, found {} kB",
                        self.current,
                        want / 1024,
                        obs.vm_lck_kb
                    ))
                }
            }
            Expect::Value { left, equal, right } => {
                let (l, r) = (self.eval(left)?, self.eval(right)?);
                if (l == r) == *equal {
                    Ok(())
                } else {
                    let op = if *equal { "==" } else { "!=" };
                    Err(format!("expected {} {op} {}", fmt_num(l), fmt_num(r)))
                }
            }
            Expect::Invariants => match self.backend.check_invariants() {
                Ok(()) => Ok(()),
                Err(v) => {
                    self.fail(
                        line,
                        None,
                        FailureKind::Invariant,
                        format!(
                            "{} violation{}",
                            v.len(),
                            if v.len() == 1 { "" } else { "s" }
                        ),
                        Some(v.join("\n")),
                    );
                    return Ok(());
                }
            },
        };
        self.expectation(line, result.map_err(|m| (m, None)));
        Ok(())
    }

    fn expect_maps(
        &mut self,
        s: &Stmt,
        lines: &[MapsLine],
    ) -> Result<Result<(), (String, Option<String>)>, RtError> {
        let mut want = Vec::with_capacity(lines.len());
        for l in lines {
            want.push((self.eval(&l.start)?, self.eval(&l.end)?, l.perms.as_str()));
        }
        let obs = self.observe_summary(s.pos)?;
        let got: Vec<(u64, u64, &str)> = obs
            .maps
            .iter()
            .map(|m| (m.start, m.end, m.perms.as_str()))
            .collect();
        if want == got {
            return Ok(Ok(()));
        }
        let show = |v: &[(u64, u64, &str)]| {
            if v.is_empty() {
                "  (no VMAs)".to_string()
            } else {
                v.iter()
                    .map(|(a, b, p)| format!("  {a:08x}-{b:08x} {p}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        };
        let message = format!(
            "maps of process {} differ ({} VMAs expected, {} found)",
            self.current,
            want.len(),
            got.len()
        );
        Ok(Err((
            message,
            Some(format!(
                "expected:\n{}\nactual:\n{}",
                show(&want),
                show(&got)
            )),
        )))
    }

    fn expect_page(
        &mut self,
        s: &Stmt,
        addr: &Expr,
        len: Option<&Expr>,
        attrs: &[PageAttr],
    ) -> Result<Result<(), (String, Option<String>)>, RtError> {
        let addr = self.eval(addr)?;
        let len = self.eval_opt(len, PAGE_SIZE)?;
        let (start, end) = page_range(s.pos, "expect page", addr, len)?;
        let mut checks = Vec::with_capacity(attrs.len());
        for a in attrs {
            checks.push(self.page_check(a)?);
        }
        let observed = self.pages(s.pos, start, end)?;
        let mut observed = observed.records().iter().peekable();
        let mut mismatched = 0u64;
        let mut total = 0u64;
        let mut examples = Vec::new();
        let mut folio: Option<(u64, u64)> = None; // (first page in a folio, its identity)
        let samefolio = checks.iter().any(|c| matches!(c, PageCheck::SameFolio));
        let none = PageState::NotPresent;
        // What page `k` of the range fails, given its state.
        let failed = |k: u64, state: &PageState| -> Vec<String> {
            checks.iter().filter_map(|c| c.mismatch(k, state)).collect()
        };
        let mut page = start;
        while page < end {
            // Records come sorted; skip any that end before `page`.
            while observed.peek().is_some_and(|p| p.end() <= page) {
                observed.next();
            }
            // The state at `page`, and how far it extends when it is a
            // not-present run (a record, or a gap between records).
            let (state, run_end) = match observed.peek() {
                Some(p) if p.addr <= page => (&p.state, p.end()),
                Some(p) => (&none, p.addr),
                None => (&none, end),
            };
            let k = (page - start) / PAGE_SIZE;
            if *state == PageState::NotPresent {
                // Every check gives a not-present page the same verdict
                // (only the text of `idx=` names the page), so a run is
                // judged once and counted whole, never page by page.
                let n = (run_end.min(end) - page).div_ceil(PAGE_SIZE).max(1);
                let mut bad = failed(k, state);
                if samefolio {
                    bad.push("samefolio (this page is in no folio)".to_string());
                }
                total += n;
                if !bad.is_empty() {
                    mismatched += n;
                    for j in 0..n.min(4u64.saturating_sub(examples.len() as u64)) {
                        let mut bad = failed(k + j, state);
                        if samefolio {
                            bad.push("samefolio (this page is in no folio)".to_string());
                        }
                        examples.push(format!(
                            "{:#x}: expected {}; page is {}",
                            page + j * PAGE_SIZE,
                            bad.join(", "),
                            describe(state)
                        ));
                    }
                }
                page = match page.checked_add(n * PAGE_SIZE) {
                    Some(p) => p,
                    None => break,
                };
                continue;
            }
            let mut bad = failed(k, state);
            if samefolio {
                match (folio_id(state), folio) {
                    (None, _) => bad.push("samefolio (this page is in no folio)".to_string()),
                    (Some(id), None) => folio = Some((page, id)),
                    (Some(id), Some((first, first_id))) if id != first_id => {
                        bad.push(format!("samefolio (the folio of page {first:#x})"));
                    }
                    _ => {}
                }
            }
            total += 1;
            if !bad.is_empty() {
                mismatched += 1;
                if examples.len() < 4 {
                    examples.push(format!(
                        "{page:#x}: expected {}; page is {}",
                        bad.join(", "),
                        describe(state)
                    ));
                }
            }
            page = match page.checked_add(PAGE_SIZE) {
                Some(p) => p,
                None => break,
            };
        }
        if mismatched == 0 {
            return Ok(Ok(()));
        }
        let mut detail = examples.join("\n");
        if mismatched > examples.len() as u64 {
            detail.push_str(&format!(
                "\n... and {} more",
                mismatched - examples.len() as u64
            ));
        }
        let message = format!(
            "{}: {mismatched} of {total} page{} in {start:#x}-{end:#x} differ",
            s.text,
            if total == 1 { "" } else { "s" }
        );
        Ok(Err((message, Some(detail))))
    }

    /// Evaluate the values in one page attribute.
    fn page_check(&self, a: &PageAttr) -> Result<PageCheck, RtError> {
        Ok(match &a.kind {
            PageAttrKind::None => PageCheck::None,
            PageAttrKind::Zero => PageCheck::Zero,
            PageAttrKind::HugeZero => PageCheck::HugeZero,
            PageAttrKind::Swapped => PageCheck::Swapped,
            PageAttrKind::Anon => PageCheck::Anon,
            PageAttrKind::Order(e) => PageCheck::Order(self.eval(e)?),
            PageAttrKind::Folio(e) => {
                let size = self.eval(e)?;
                let order = Order::from_bytes(size).ok_or_else(|| {
                    rt(
                        a.pos,
                        format!(
                            "folio={}: not a power-of-two size of at least 4K",
                            fmt_num(size)
                        ),
                    )
                })?;
                PageCheck::Order(u64::from(order.0))
            }
            PageAttrKind::Idx(e) => PageCheck::Idx(self.eval(e)?),
            PageAttrKind::Pmd => PageCheck::Pmd(true),
            PageAttrKind::Pte => PageCheck::Pmd(false),
            PageAttrKind::Exclusive(b) => PageCheck::Exclusive(*b),
            PageAttrKind::AnonExclusive(b) => PageCheck::AnonExclusive(*b),
            PageAttrKind::Count(e) => PageCheck::Count(self.eval(e)?),
            PageAttrKind::Tag(e) => PageCheck::Tag(self.eval(e)?),
            PageAttrKind::SameFolio => PageCheck::SameFolio,
            PageAttrKind::Guard => PageCheck::Guard,
        })
    }
}

/// An `expect page` attribute with its values evaluated.
enum PageCheck {
    None,
    Zero,
    HugeZero,
    Swapped,
    Anon,
    Order(u64),
    Idx(u64),
    Pmd(bool),
    Exclusive(bool),
    AnonExclusive(bool),
    Count(u64),
    Tag(u64),
    /// Checked across pages by the caller.
    SameFolio,
    Guard,
}

impl PageCheck {
    /// `None` if page `k` of the range (in `state`) satisfies the check,
    /// else the expectation as text.
    fn mismatch(&self, k: u64, state: &PageState) -> Option<String> {
        let anon = match state {
            PageState::Anon(p) => Some(p),
            _ => None,
        };
        let ok = match self {
            PageCheck::None => matches!(state, PageState::NotPresent),
            PageCheck::Zero => matches!(state, PageState::Zero),
            PageCheck::HugeZero => matches!(state, PageState::HugeZero { .. }),
            PageCheck::Swapped => matches!(state, PageState::Swapped { .. }),
            PageCheck::Anon => anon.is_some(),
            PageCheck::Order(o) => anon.is_some_and(|p| u64::from(p.order) == *o),
            PageCheck::Idx(first) => {
                let want = first.checked_add(k);
                match state {
                    PageState::Anon(p) => want == Some(u64::from(p.index)),
                    PageState::HugeZero { index } => want == Some(u64::from(*index)),
                    _ => false,
                }
            }
            PageCheck::Pmd(pmd) => match state {
                PageState::Anon(p) => p.pmd_mapped == *pmd,
                PageState::HugeZero { .. } => *pmd,
                PageState::Zero => !*pmd,
                PageState::NotPresent | PageState::Guard | PageState::Swapped { .. } => false,
            },
            // The bits are only ever set on anon pages, so `!X` / `!AX` hold
            // for none, zero and huge-zero pages.
            PageCheck::Exclusive(x) => anon.is_some_and(|p| p.mmap_exclusive) == *x,
            PageCheck::AnonExclusive(x) => anon.is_some_and(|p| p.anon_exclusive) == *x,
            PageCheck::Count(n) => anon.is_some_and(|p| u64::from(p.mapcount) == *n),
            PageCheck::Tag(t) => match state {
                PageState::Anon(p) => p.tag == *t,
                PageState::Zero | PageState::HugeZero { .. } => *t == 0,
                PageState::NotPresent | PageState::Guard | PageState::Swapped { .. } => false,
            },
            PageCheck::SameFolio => true,
            PageCheck::Guard => matches!(state, PageState::Guard),
        };
        if ok {
            return None;
        }
        Some(match self {
            PageCheck::None => "none".to_string(),
            PageCheck::Zero => "zero".to_string(),
            PageCheck::HugeZero => "hugezero".to_string(),
            PageCheck::Swapped => "swapped".to_string(),
            PageCheck::Anon => "anon".to_string(),
            PageCheck::Order(o) => format!("order={o}"),
            PageCheck::Idx(first) => format!("idx={}", first.saturating_add(k)),
            PageCheck::Pmd(true) => "pmd".to_string(),
            PageCheck::Pmd(false) => "pte".to_string(),
            PageCheck::Exclusive(x) => if *x { "X" } else { "!X" }.to_string(),
            PageCheck::AnonExclusive(x) => if *x { "AX" } else { "!AX" }.to_string(),
            PageCheck::Count(n) => format!("cnt={n}"),
            PageCheck::Tag(t) => format!("tag={t:#x}"),
            PageCheck::SameFolio => "samefolio".to_string(),
            PageCheck::Guard => "guard".to_string(),
        })
    }
}

/// The verdict of `expect bytes` on the bytes read from `addr`: every byte
/// is `want` (`fill`), or the bytes are `want` little-endian.
fn check_bytes(addr: u64, got: &[Option<u8>], fill: bool, want: u64) -> Result<(), String> {
    if let Some(k) = got.iter().position(Option::is_none) {
        return Err(format!(
            "byte {:#x} is in a page that is not present (or not readable)",
            addr + k as u64
        ));
    }
    let got: Vec<u8> = got.iter().map(|b| b.unwrap_or(0)).collect();
    if fill {
        match got.iter().position(|&b| u64::from(b) != want) {
            None => Ok(()),
            Some(k) => {
                let bad = got.iter().filter(|&&b| u64::from(b) != want).count();
                Err(format!(
                    "expected every byte {want:#04x}; {bad} of {} differ, the first at {:#x} is {:#04x}",
                    got.len(),
                    addr + k as u64,
                    got[k]
                ))
            }
        }
    } else {
        let mut v = [0u8; 8];
        v[..got.len()].copy_from_slice(&got);
        let value = u64::from_le_bytes(v);
        let mask = if got.len() == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * got.len())) - 1
        };
        if value == want & mask && want <= mask {
            Ok(())
        } else {
            Err(format!(
                "expected {} bytes == {want:#x}, found {value:#x}",
                got.len()
            ))
        }
    }
}

/// The range `[start, start + len)` where `start` is `addr` rounded down to
/// a page, so `write p + 100` touches one page. Checks for overflow and for
/// ranges over [`MAX_RANGE_PAGES`].
fn page_range(pos: Pos, what: &str, addr: u64, len: u64) -> Result<(u64, u64), RtError> {
    let start = addr & !(PAGE_SIZE - 1);
    let end = start.checked_add(len).ok_or_else(|| {
        rt(
            pos,
            format!(
                "{what}: range {} + {} overflows",
                fmt_num(start),
                fmt_num(len)
            ),
        )
    })?;
    let pages = (end - start).div_ceil(PAGE_SIZE);
    if pages > MAX_RANGE_PAGES {
        return Err(rt(
            pos,
            format!("{what}: range of {pages} pages is too large (limit {MAX_RANGE_PAGES} pages)"),
        ));
    }
    Ok((start, end))
}

/// The frame handle of a present page.
fn frame_of(state: &PageState) -> Frame {
    match state {
        PageState::Anon(p) => Frame::Anon(p.pfn),
        PageState::HugeZero { index } => Frame::HugeZero(*index),
        PageState::Zero | PageState::NotPresent | PageState::Guard | PageState::Swapped { .. } => {
            Frame::Zero
        }
    }
}

/// Identity of the folio holding a page (head frame), if it is in one.
fn folio_id(state: &PageState) -> Option<u64> {
    match state {
        PageState::Anon(p) => Some(p.pfn.wrapping_sub(u64::from(p.index))),
        PageState::HugeZero { .. } => Some(u64::MAX),
        _ => None,
    }
}

/// A frame-independent description of a page state for messages.
fn describe(state: &PageState) -> String {
    match state {
        PageState::NotPresent => "none".to_string(),
        PageState::Zero => "zero".to_string(),
        PageState::Guard => "guard".to_string(),
        PageState::HugeZero { index } => format!("hugezero idx={index}"),
        PageState::Swapped { ty, offset } => format!("swapped type={ty} offset={offset}"),
        PageState::Anon(p) => format!(
            "anon order={} idx={} {} {} {} cnt={} tag={:#x}",
            p.order,
            p.index,
            if p.pmd_mapped { "pmd" } else { "pte" },
            if p.mmap_exclusive { "X" } else { "!X" },
            if p.anon_exclusive { "AX" } else { "!AX" },
            p.mapcount,
            p.tag
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_backend::ModelBackend;
    use ptlab_model::{HwEvents, ModelConfig, Observation};

    /// A [`ModelBackend`] that records every call it is given.
    struct Recording {
        inner: ModelBackend,
        calls: Vec<(String, Call)>,
    }

    impl Backend for Recording {
        fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
            self.calls.push((proc.to_string(), call.clone()));
            self.inner.call(proc, call)
        }
        /// Forwarded as such: the model then runs the call in the
        /// previous call's process, so a wrong hint shows.
        fn call_same_proc(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
            self.calls.push((proc.to_string(), call.clone()));
            self.inner.call_same_proc(proc, call)
        }
        fn observe(&mut self, proc: &str) -> Result<Observation, BackendError> {
            self.inner.observe(proc)
        }
        fn observe_summary(&mut self, proc: &str) -> Result<Observation, BackendError> {
            self.inner.observe_summary(proc)
        }
        fn observe_pages(
            &mut self,
            proc: &str,
            start: u64,
            end: u64,
        ) -> Result<PageRuns, BackendError> {
            self.inner.observe_pages(proc, start, end)
        }
        fn read_bytes(
            &mut self,
            proc: &str,
            addr: u64,
            len: u64,
        ) -> Result<Vec<Option<u8>>, BackendError> {
            self.inner.read_bytes(proc, addr, len)
        }
        fn check_invariants(&mut self) -> Result<(), Vec<String>> {
            self.inner.check_invariants()
        }
        fn before_statement(&mut self, line: u32, text: &str, loops: &[(u32, u64)]) {
            self.inner.before_statement(line, text, loops)
        }
        fn after_statement(&mut self) -> Result<(), Vec<String>> {
            self.inner.after_statement()
        }
        fn hw_events(&self) -> Option<HwEvents> {
            self.inner.hw_events()
        }
    }

    /// The calls and the report of `src` run on a fresh model, with uffd
    /// calls written in place or built by `syscall()`.
    fn run_recorded(src: &str, in_place: bool) -> (Vec<(String, Call)>, String) {
        let script = crate::parser::parse("t.ptl", src).expect("parses");
        let mut b = Recording {
            inner: ModelBackend::new(ModelConfig::default()),
            calls: Vec::new(),
        };
        UFFD_IN_PLACE.with(|c| c.set(in_place));
        let report = run(&script, &mut b, &RunOptions::default());
        UFFD_IN_PLACE.with(|c| c.set(true));
        (b.calls, format!("{:?}", report.failures))
    }

    /// The calls and the whole report of `script` run on a fresh model
    /// (`arch`), with calls in loops kept ([`Interp::call_prepared`]) or
    /// evaluated every time.
    fn run_kept(
        script: &Script,
        opts: &RunOptions,
        arch: ptlab_model::ArchKind,
        kept: bool,
    ) -> (Vec<(String, Call)>, RunReport) {
        let mut b = Recording {
            inner: ModelBackend::new(ModelConfig::for_arch(arch)),
            calls: Vec::new(),
        };
        PREPARED_CALLS.with(|c| c.set(kept));
        let report = run(script, &mut b, opts);
        PREPARED_CALLS.with(|c| c.set(true));
        (b.calls, report)
    }

    /// Calls kept across loop iterations give, in order, the calls and
    /// the report (observations, failures with their line, column and
    /// loop context, counts) of calls evaluated every time: loops whose
    /// variables change (the loop variable, a result rebound each
    /// iteration, a `let` inside the loop, a variable bound to a failed
    /// call), failing calls with and without `expect`, accesses that
    /// fault, nested loops, process prefixes and switches, an evaluation
    /// error, the statement and step limits stopping inside a loop, the
    /// per-line hardware events; then every seed and example scenario at
    /// small parameters, both arches. Fails when a kept call is made
    /// after a variable it reads has changed.
    #[test]
    fn prepared_calls_equal_evaluated_calls() {
        let src = "\
let base = 0x7f00_0000_0000
let n = 0
fork child
repeat 6 as i
  p = mmap 64K at base + i * 64K fixed
  write p 16K tag=i + 7
  read p + 4K 8K
  q = mmap 16K
  munmap q 16K
  m = mremap p 64K 128K maymove
  mprotect m 4K r
  madvise m + 8K 4K dontneed
  write m 4K
  expect segv
  let n = n + 2
  munmap m + n * 4K 4K
  munmap m 128K
  bad = munmap base + 1 4K
  expect errno EINVAL
  munmap base + 1 4K
  repeat 3 as j
    r = mmap 4K at base + 0x100_0000 + j * 4K + i * 16K fixed
    write r 4K
    @child write base 4K
  end
  repeat 2
    munmap base + 0x100_0000 + i * 16K 16K
  end
end
repeat 4 as i
  @child w = mmap 8K at base + 0x200_0000 + i * 8K fixed
  write base + 0x200_0000 4K
  expect segv
  @child
  write w 8K
  @main
  x = munmap w 4K
end
repeat 4 as i
  write base + 0x300_0000 4K
  expect segv
  munmap base + 0x300_0000 + (2 - i) * 4K 4K
end
";
        let script = crate::parser::parse("t.ptl", src).expect("parses");
        let arches = [ptlab_model::ArchKind::X86_64, ptlab_model::ArchKind::Arm64];
        let mut kinds = 0;
        for arch in arches {
            for opts in [
                RunOptions::default(),
                RunOptions {
                    record_hw: true,
                    ..RunOptions::default()
                },
                RunOptions {
                    max_statements: Some(57),
                    ..RunOptions::default()
                },
                RunOptions {
                    max_steps: Some(41),
                    ..RunOptions::default()
                },
            ] {
                let (want_calls, want) = run_kept(&script, &opts, arch, false);
                let (got_calls, got) = run_kept(&script, &opts, arch, true);
                assert_eq!(got_calls, want_calls, "{arch:?} {opts:?}");
                assert_eq!(got, want, "{arch:?} {opts:?}");
                kinds += 1;
            }
        }
        // The run reaches its last loop, whose third iteration underflows
        // (a runtime error with its column) after some calls failed.
        let (calls, report) = run_kept(&script, &RunOptions::default(), arches[0], true);
        assert!(report.aborted, "{report:?}");
        let last = report.failures.last().expect("a failure");
        assert_eq!((last.line, last.column), (42, Some(33)), "{last:?}");
        assert!(report.failures.len() >= 4, "{:?}", report.failures);
        assert!(calls.len() >= 150, "{}", calls.len());
        // The seeds and examples at small parameters.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = 0;
        for dir in ["scenarios/seeds", "scenarios/examples"] {
            let mut paths: Vec<_> = std::fs::read_dir(root.join(dir))
                .expect("scenario dir")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "ptl"))
                .collect();
            paths.sort();
            for path in paths {
                let text = std::fs::read_to_string(&path).expect("reads");
                let script = crate::parser::parse("s.ptl", &text).expect("parses");
                let mut opts = RunOptions::default();
                for (name, _, default) in script.params() {
                    if name == "iterations" {
                        opts.params.push((name, "3".to_string()));
                    } else if name == "size" && default != "1M" {
                        opts.params.push((name, "4M".to_string()));
                    }
                }
                for arch in arches {
                    let (want_calls, want) = run_kept(&script, &opts, arch, false);
                    let (got_calls, got) = run_kept(&script, &opts, arch, true);
                    assert_eq!(got_calls, want_calls, "{path:?} {arch:?}");
                    assert_eq!(got, want, "{path:?} {arch:?}");
                }
                files += 1;
            }
        }
        assert!(files >= 15 && kinds == 8, "{files} files");
    }

    /// `uffd copy` and `uffd move` statements written in place give the
    /// calls `syscall()` builds, field for field and in order: the two
    /// kinds alternating (each finds the other's call in the slot), tags,
    /// modes and options, two processes (the handle is the process's
    /// name), a failing expression (a variable bound to a failed call)
    /// and failing ioctls. Fails when an in-place field is left stale.
    #[test]
    fn uffd_calls_in_place_equal_built_calls() {
        let src = "\
let heap = 0x7f00_0000_0000
let from = 0x7f40_0000_0000
p = mmap 1M at heap fixed
write p 1M
uffd open
f = mremap heap 1M 1M maymove fixed from dontunmap
uffd register heap 1M missing
repeat 8 as i
  uffd move heap + i * 4K from + i * 8K 4K
  uffd copy heap + 0x40000 + i * 4K from + i * 8K + 4K 4K
  uffd copy heap + 0x60000 + i * 4K from 4K tag=i + 3 dontwake
  uffd move heap + 0x80000 + i * 8K from + 0x80000 + i * 8K 8K allow_src_holes mode 0
end
uffd move heap from 4K
expect errno EEXIST
uffd copy heap + 0xf0000 0 4K tag=1 wp
expect errno EINVAL
fork child
@child uffd open
@child uffd move heap + 0xf2000 from + 0xf2000 4K
expect errno EINVAL
uffd move heap + 0xf3000 from + 0xf3000 4K dontwake
@child
repeat 2 as i
  uffd move heap + 0xf4000 + i * 4K from + 0xf4000 4K
  @main
  uffd move heap + 0xf6000 + i * 4K from + 0xf6000 + i * 4K 4K
  @child
  uffd copy heap + 0xf8000 + i * 4K from 4K
end
@main
uffd move heap + 0xfa000 from + 0xfa000 4K
bad = uffd move heap + 0xf0000 from + 0xf0000 4K mode 0x80
expect errno EINVAL
uffd copy heap + 0xf1000 from + bad 4K
";
        let (built, built_report) = run_recorded(src, false);
        let (in_place, in_place_report) = run_recorded(src, true);
        let uffd = built
            .iter()
            .filter(|(_, c)| matches!(c, Call::UffdMove { .. } | Call::UffdCopy { .. }))
            .count();
        assert!(uffd >= 43, "{uffd} uffd calls: {built:?}");
        // Both processes' handles among them (the switches inside the loop).
        assert!(in_place.iter().any(|(p, c)| p == "child"
            && matches!(c, Call::UffdCopy { handle, .. } if handle == "child")));
        assert_eq!(in_place, built);
        assert_eq!(in_place_report, built_report);
    }
}
