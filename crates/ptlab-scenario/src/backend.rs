//! The interface between the interpreter and whatever executes the
//! operations: the model ([`crate::ModelBackend`]), a live kernel (later), or
//! a test double.
//!
//! Processes are named, not numbered: the first one is `main` and `fork NAME`
//! creates the others, so a scenario means the same thing on every backend.
//! Operations that a backend does not implement keep the default bodies,
//! which return [`BackendError::Unsupported`]; the interpreter turns that into
//! a runtime error at the statement's position.

use crate::ast::UffdMode;
use ptlab_model::observe::PageRuns;
use ptlab_model::{Advice, Errno, MapFlags, Observation, Prot, ThpKnob, ThpMode, PAGE_SIZE};
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

/// `mremap` flags beyond the lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MremapFlags {
    /// MREMAP_MAYMOVE
    pub maymove: bool,
    /// MREMAP_FIXED with this new address.
    pub fixed: Option<u64>,
    /// MREMAP_DONTUNMAP
    pub dontunmap: bool,
}

/// `UFFDIO_MOVE` mode bits.
/// Which userfaultfd handle each process's `uffd ... via NAME` statements
/// use (one home for both backends): a process uses its own handle (named
/// after it) unless a statement selected another.
#[derive(Clone, Debug, Default)]
pub struct UffdSelection(std::collections::BTreeMap<String, String>);

impl UffdSelection {
    /// `uffd_select`: `None` returns `proc` to its own handle.
    pub fn select(&mut self, proc: &str, handle: Option<&str>) {
        match handle {
            Some(h) => self.0.insert(proc.to_string(), h.to_string()),
            None => self.0.remove(proc),
        };
    }

    /// The handle `proc` uses now.
    pub fn handle<'a>(&'a self, proc: &'a str) -> &'a str {
        self.0.get(proc).map_or(proc, String::as_str)
    }

    /// `proc` exited.
    pub fn forget(&mut self, proc: &str) {
        self.0.remove(proc);
    }
}

/// A THP prctl: `PR_SET_THP_DISABLE` (with its `disable` and `flags`
/// arguments) or `PR_GET_THP_DISABLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrctlThp {
    Set { disable: u64, flags: u64 },
    Get,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UffdMoveFlags {
    /// UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES
    pub allow_src_holes: bool,
    /// UFFDIO_MOVE_MODE_DONTWAKE
    pub dontwake: bool,
}

/// Executes scenario operations. Object-safe: the interpreter holds a
/// `&mut dyn Backend`.
///
/// Every method takes the name of the process it acts in. Syscalls return
/// `Err(BackendError::Errno(..))` for ordinary failures; accesses return
/// `Err(BackendError::Segv { .. })` when they fault (or
/// `Err(BackendError::Uffd { .. })` when the fault goes to userfaultfd). Addresses and lengths
/// are passed through unvalidated, exactly as a program would pass them.
pub trait Backend {
    /// `mmap(addr, len, prot, flags, -1, 0)`; returns the mapped address.
    fn mmap(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<u64, BackendError>;
    /// `munmap(addr, len)`.
    fn munmap(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), BackendError>;
    /// `madvise(addr, len, advice)`.
    fn madvise(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        advice: Advice,
    ) -> Result<(), BackendError>;
    /// Read the first 8 bytes of the page containing `addr`; returns the tag.
    fn read(&mut self, proc: &str, addr: u64) -> Result<u64, BackendError>;
    /// Write `tag` into the first 8 bytes of the page containing `addr`.
    fn write(&mut self, proc: &str, addr: u64, tag: u64) -> Result<(), BackendError>;
    /// Write a THP `enabled` knob.
    fn set_thp(&mut self, knob: ThpKnob, mode: ThpMode) -> Result<(), BackendError>;
    /// Write `transparent_hugepage/use_zero_page`.
    fn set_use_zero_page(&mut self, on: bool) -> Result<(), BackendError>;
    /// Enable a swap device of `bytes` (`swap SIZE`), or disable it with 0
    /// (`swap off`).
    fn set_swap(&mut self, _bytes: u64) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("swap"))
    }
    /// Select which seed changes run their previous algorithm. A backend
    /// that runs one fixed kernel (the live one) accepts and ignores this:
    /// observable results are the same either way, by design.
    fn set_before(&mut self, _set: ptlab_model::Before) -> Result<(), BackendError> {
        Ok(())
    }
    /// Everything process `proc` shows (maps, smaps, pages, THP counters).
    fn observe(&mut self, proc: &str) -> Result<Observation, BackendError>;
    /// Check the backend's internal invariants; `Err` lists every violation.
    fn check_invariants(&mut self) -> Result<(), Vec<String>>;

    /// Touch every page of `[start & !(PAGE_SIZE - 1), that + len)` in address
    /// order, stopping at the first fault: a read, or a write storing `tag`
    /// (`None`: each page's own address). The default calls [`Backend::read`]
    /// or [`Backend::write`] per page; backends can take a faster path as long
    /// as the result is the same.
    fn access(
        &mut self,
        proc: &str,
        start: u64,
        len: u64,
        write: bool,
        tag: Option<u64>,
    ) -> Result<(), BackendError> {
        let start = start & !(PAGE_SIZE - 1);
        let end = start
            .checked_add(len)
            .ok_or(BackendError::Segv { addr: start })?;
        let mut page = start;
        while page < end {
            if write {
                self.write(proc, page, tag.unwrap_or(page))?;
            } else {
                self.read(proc, page)?;
            }
            page = match page.checked_add(PAGE_SIZE) {
                Some(p) => p,
                None => break,
            };
        }
        Ok(())
    }

    /// The pages of `proc` in `[start, end)`, in address order, a run of
    /// not-present pages as one record. Pages outside every VMA may be
    /// omitted (they read as not present). The default clips
    /// [`Backend::observe`]; backends can answer more cheaply.
    fn observe_pages(
        &mut self,
        proc: &str,
        start: u64,
        end: u64,
    ) -> Result<PageRuns, BackendError> {
        let obs = self.observe(proc)?;
        Ok(obs.pages.clip(start, end))
    }

    /// Called by the interpreter before every executed statement (except a
    /// `repeat` header, whose body statements are announced one by one) with
    /// its line, its source text and the enclosing loops as (line,
    /// iteration). A backend that compares or records per statement (the
    /// live diff) uses it to attribute what it finds; the default ignores it.
    fn before_statement(&mut self, _line: u32, _text: &str, _loops: &[(u32, u64)]) {}

    /// Hardware events the backend has counted so far (the model counts
    /// them; a live kernel does not). The interpreter records differences
    /// per statement when [`crate::RunOptions::record_hw`] is set.
    fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
        None
    }

    /// Called by the interpreter after every executed statement. A backend
    /// that checks invariants continuously returns the violations here.
    fn after_statement(&mut self) -> Result<(), Vec<String>> {
        Ok(())
    }

    // ----- reserved for later issues: default to "unsupported" -------------

    /// `mremap(addr, old_len, new_len, flags[, new_addr])`; returns the new address.
    fn mremap(
        &mut self,
        _proc: &str,
        _addr: u64,
        _old_len: u64,
        _new_len: u64,
        _flags: MremapFlags,
    ) -> Result<u64, BackendError> {
        Err(BackendError::Unsupported("mremap"))
    }
    /// `mprotect(addr, len, prot)`.
    fn mprotect(
        &mut self,
        _proc: &str,
        _addr: u64,
        _len: u64,
        _prot: Prot,
    ) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("mprotect"))
    }
    /// `mlock(addr, len)`, or `mlock2(addr, len, MLOCK_ONFAULT)` with `onfault`.
    fn mlock(
        &mut self,
        _proc: &str,
        _addr: u64,
        _len: u64,
        _onfault: bool,
    ) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("mlock"))
    }
    /// `munlock(addr, len)`.
    fn munlock(&mut self, _proc: &str, _addr: u64, _len: u64) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("munlock"))
    }
    /// `mseal(addr, len, 0)`.
    fn mseal(&mut self, _proc: &str, _addr: u64, _len: u64) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("mseal"))
    }
    /// `fork()` in `parent`; the child is called `child`.
    fn fork(&mut self, _parent: &str, _child: &str) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("fork"))
    }
    /// Process `proc` exits.
    fn exit(&mut self, _proc: &str) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("exit"))
    }
    /// `prctl(PR_SET_THP_DISABLE, disable, flags, 0, 0)` or
    /// `prctl(PR_GET_THP_DISABLE)`; returns what the call returned.
    fn prctl_thp_disable(&mut self, _proc: &str, _call: PrctlThp) -> Result<u64, BackendError> {
        Err(BackendError::Unsupported("prctl"))
    }
    /// setrlimit(2) of `resource`'s soft limit in `proc` (bytes;
    /// [`ptlab_model::RLIM_INFINITY`] for `unlimited`). RLIMIT_AS and
    /// RLIMIT_DATA count the scenario's own mappings only: a live backend
    /// adds what its harness maps (see docs/ops/rlimits.md).
    fn setrlimit(
        &mut self,
        _proc: &str,
        _resource: ptlab_model::Resource,
        _bytes: u64,
    ) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("setrlimit"))
    }
    /// Drop CAP_IPC_LOCK from `proc`'s effective capabilities (capset(2)),
    /// so RLIMIT_MEMLOCK applies to it (and to children forked later).
    fn drop_cap_ipc_lock(&mut self, _proc: &str) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("capability drop"))
    }
    /// Map one-page read-only VMAs at `addr`, `addr + 8K`, ... with
    /// MAP_FIXED_NOREPLACE until `proc` is `headroom` VMAs below
    /// `vm.max_map_count`; returns how many. Counts are the whole
    /// process's, so a live backend's share differs from the model's by its
    /// harness's own VMAs; a diff gives the model the live limit minus
    /// those, so both map the same number.
    fn fill_vmas(&mut self, _proc: &str, _addr: u64, _headroom: u64) -> Result<u64, BackendError> {
        Err(BackendError::Unsupported("fill"))
    }
    /// Open a userfaultfd for `proc` (one per process).
    fn uffd_open(&mut self, _proc: &str) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("uffd open"))
    }
    /// userfaultfd(2) for `proc`, as handle `name` (`None`: the process's
    /// own handle, named after it), followed by UFFDIO_API (0xAA with
    /// UFFD_FEATURE_SIGBUS) when `api`. A handle name in use is EBUSY.
    /// Handles are inherited by fork (the descriptor is), so a child can
    /// name its parent's handle in `via`.
    fn uffd_create(
        &mut self,
        _proc: &str,
        _name: Option<&str>,
        _api: bool,
    ) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("uffd create"))
    }
    /// `UFFDIO_API` on the selected handle; returns the features the kernel
    /// reports. UFFD_FEATURE_SIGBUS is always requested in addition (no
    /// handler thread resolves faults).
    fn uffd_api(&mut self, _proc: &str, _api: u64, _features: u64) -> Result<u64, BackendError> {
        Err(BackendError::Unsupported("uffd api"))
    }
    /// Select the handle the next uffd operations of `proc` use (`None`:
    /// its own). A handle `proc` cannot see is EBADF at the operation.
    fn uffd_select(&mut self, _proc: &str, handle: Option<&str>) -> Result<(), BackendError> {
        match handle {
            None => Ok(()),
            Some(_) => Err(BackendError::Unsupported("uffd ... via")),
        }
    }
    /// `UFFDIO_REGISTER`.
    fn uffd_register(
        &mut self,
        _proc: &str,
        _addr: u64,
        _len: u64,
        _mode: UffdMode,
    ) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("uffd register"))
    }
    /// `UFFDIO_UNREGISTER`.
    fn uffd_unregister(&mut self, _proc: &str, _addr: u64, _len: u64) -> Result<(), BackendError> {
        Err(BackendError::Unsupported("uffd unregister"))
    }
    /// `UFFDIO_COPY` from `src` (or, with `tag`, from a buffer holding that
    /// tag in every page); returns the bytes copied. A failure that left a
    /// result in the struct's `copy` field (partial progress, `-errno`) is
    /// [`BackendError::ErrnoWithResult`]; so for ZEROPAGE and MOVE.
    fn uffd_copy(
        &mut self,
        _proc: &str,
        _dst: u64,
        _src: u64,
        _len: u64,
        _tag: Option<u64>,
    ) -> Result<u64, BackendError> {
        Err(BackendError::Unsupported("uffd copy"))
    }
    /// `UFFDIO_ZEROPAGE`; returns the bytes mapped.
    fn uffd_zeropage(&mut self, _proc: &str, _dst: u64, _len: u64) -> Result<u64, BackendError> {
        Err(BackendError::Unsupported("uffd zeropage"))
    }
    /// `UFFDIO_MOVE`; returns the bytes moved.
    fn uffd_move(
        &mut self,
        _proc: &str,
        _dst: u64,
        _src: u64,
        _len: u64,
        _flags: UffdMoveFlags,
    ) -> Result<u64, BackendError> {
        Err(BackendError::Unsupported("uffd move"))
    }
}
