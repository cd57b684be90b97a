//! The interface between the interpreter and whatever executes the
//! operations: the model ([`crate::ModelBackend`]), a live kernel (later), or
//! a test double.
//!
//! Processes are named, not numbered: the first one is `main` and `fork NAME`
//! creates the others, so a scenario means the same thing on every backend.
//! Every operation is one [`Call`] value through [`Backend::call`]; a backend
//! that does not implement one answers [`BackendError::Unsupported`], which
//! the interpreter turns into a runtime error at the statement's position.
//! The trait has no default bodies, so a wrapper forwards every method.

use ptlab_model::observe::PageRuns;
use ptlab_model::{Call, CallError, Errno, Observation};
use thiserror::Error;

/// Why a backend operation did not succeed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BackendError {
    /// The syscall (or sysfs write) failed with this errno. A scenario can
    /// expect this with `expect errno NAME`.
    #[error("{0}")]
    Errno(Errno),
    /// The access raised SIGSEGV at `addr`. A scenario can expect this with
    /// `expect segv`.
    #[error("SIGSEGV at {addr:#x}")]
    Segv { addr: u64 },
    /// The access would fault to userfaultfd at (page-aligned) `addr`: a
    /// missing page in a range registered MISSING, or a write to a uffd-wp
    /// page in a range registered WP. Nothing resolves it (there is no
    /// handler thread), so the access stops there. A scenario can expect
    /// this with `expect uffd`.
    #[error("fault at {addr:#x} goes to userfaultfd")]
    Uffd { addr: u64 },
    /// The syscall failed with `errno` and still reported a result through
    /// its argument struct: the `copy`/`zeropage`/`move` field of the uffd
    /// ioctls, which holds the bytes done on partial progress (with EAGAIN)
    /// or `-errno`, or 0 if the kernel left the field untouched (the field
    /// starts at 0). `expect errno NAME` matches it like [`Self::Errno`];
    /// `NAME = ...` binds `result` (two's complement when negative).
    #[error("{errno} (result {result})")]
    ErrnoWithResult { errno: Errno, result: i64 },
    /// The backend does not implement this operation (yet).
    #[error("{0} is unsupported by this backend")]
    Unsupported(&'static str),
    /// No live process has this name.
    #[error("no process named '{0}'")]
    NoProcess(String),
    /// A process with this name already exists (from `fork NAME`).
    #[error("a process named '{0}' already exists")]
    ProcessExists(String),
    /// Anything else (I/O trouble on a live backend, ...).
    #[error("{0}")]
    Other(String),
}

/// Executes scenario operations. Object-safe: the interpreter holds a
/// `&mut dyn Backend`.
///
/// Every operation is one [`Call`] in a named process. Syscalls return
/// `Err(BackendError::Errno(..))` for ordinary failures; accesses return
/// `Err(BackendError::Segv { .. })` when they fault (or
/// `Err(BackendError::Uffd { .. })` when the fault goes to userfaultfd).
/// Addresses and lengths are passed through unvalidated, exactly as a
/// program would pass them. No method has a default body: a wrapper
/// forwards each one.
pub trait Backend {
    /// Run `call` in process `proc` (machine-wide settings ignore it);
    /// returns what the system call returns ([`Call`]'s module docs).
    fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError>;
    /// [`Backend::call`] when the caller knows that `proc` is the process
    /// name its previous `call` or `call_same_proc` named (the interpreter
    /// knows when it has not switched processes since): a backend may
    /// reuse what it looked up for that call. The result must be what
    /// `call` gives; the default is `call`.
    fn call_same_proc(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        self.call(proc, call)
    }
    /// Everything process `proc` shows (maps, smaps, pages, THP counters).
    fn observe(&mut self, proc: &str) -> Result<Observation, BackendError>;
    /// [`Backend::observe`] without the per-page records (`pages` may be
    /// empty): what the expectations on maps, smaps, `VmLck` and counters
    /// read. A backend that has the pages anyway may return them.
    fn observe_summary(&mut self, proc: &str) -> Result<Observation, BackendError>;
    /// The pages of `proc` in `[start, end)`, in address order, a run of
    /// not-present pages as one record. Pages outside every VMA may be
    /// omitted (they read as not present).
    fn observe_pages(&mut self, proc: &str, start: u64, end: u64)
        -> Result<PageRuns, BackendError>;
    /// The bytes of `[addr, addr + len)` in process `proc` without
    /// touching any page: `None` for a byte whose page is not present (or
    /// cannot be read). What `expect bytes` reads.
    fn read_bytes(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
    ) -> Result<Vec<Option<u8>>, BackendError>;
    /// Check the backend's internal invariants; `Err` lists every violation.
    fn check_invariants(&mut self) -> Result<(), Vec<String>>;
    /// Called by the interpreter before every executed statement (except a
    /// `repeat` header, whose body statements are announced one by one) with
    /// its line, its source text and the enclosing loops as (line,
    /// iteration). A backend that compares or records per statement (the
    /// live diff) uses it to attribute what it finds.
    fn before_statement(&mut self, line: u32, text: &str, loops: &[(u32, u64)]);
    /// Called by the interpreter after every executed statement. A backend
    /// that checks invariants continuously returns the violations here.
    fn after_statement(&mut self) -> Result<(), Vec<String>>;
    /// Whether [`Backend::before_statement`] and [`Backend::after_statement`]
    /// do anything: `false` promises that for the whole run the first does
    /// nothing and the second returns `Ok(())`, so the interpreter skips
    /// both calls. The default, `true`, always calls them.
    fn statement_hooks(&self) -> bool {
        true
    }
    /// Hardware events the backend has counted so far (`None`: it does not
    /// count them, as a live kernel does not). The interpreter records
    /// differences per statement when [`crate::RunOptions::record_hw`] is
    /// set.
    fn hw_events(&self) -> Option<ptlab_model::HwEvents>;
}

impl BackendError {
    /// A model [`CallError`] of process `proc` as a backend error.
    pub fn from_call(proc: &str, e: CallError) -> BackendError {
        match e {
            CallError::Errno(e) => BackendError::Errno(e),
            CallError::ErrnoWithResult { errno, result } => {
                BackendError::ErrnoWithResult { errno, result }
            }
            CallError::Segv { addr } => BackendError::Segv { addr },
            CallError::Uffd { addr } => BackendError::Uffd { addr },
            CallError::NoProcess => BackendError::NoProcess(proc.to_string()),
            // Out of model memory: not something a scenario can expect, so
            // the interpreter stops with it.
            e @ CallError::Oom { .. } => BackendError::Other(e.to_string()),
        }
    }
}
