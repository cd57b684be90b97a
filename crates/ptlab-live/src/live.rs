//! [`LiveBackend`]: runs scenario operations on the running kernel.
//!
//! Each scenario process is a worker process (see [`crate::worker`]): `main`
//! is forked from ptlab when the backend is created, and `fork NAME` forks
//! the current worker. ptlab sends each operation over the worker's
//! channel; the worker makes the raw system call or the access and answers.
//! Observations are read from outside (smaps, pagemap, PAGEMAP_SCAN,
//! kpageflags, kpagecount, THP counters), except page contents, which the
//! worker loads itself.
//!
//! The worker's address space starts as a copy of ptlab's, so the backend
//! keeps two address sets: the *territory* (every range a scenario mmap or
//! mremap returned) and the *foreign* ranges (the VMAs the worker had when
//! it started). Observations show only the territory; an operation whose
//! range touches a foreign VMA is refused (it would clobber the worker's
//! own code or stack). See docs/live.md.

use crate::budget::{self, fmt_bytes, LiveLimits, MemoryBudget};
use crate::incremental::{self, CachedPage, Incremental, IncrementalStats, ProcPass};
use crate::kernel::{self, Caps, Reader, SmapsVma, PAGE};
use crate::knobs::{self, KnobError, KnobSession, ThpLock};
use crate::wire::{self, op, Req, Resolved, Resp, ST_FAULT};
use crate::worker;
use ptlab_model::observe::{AnonPage, MapsEntry, PageObs, PageRuns};
use ptlab_model::{
    Advice, Call, Errno, MapFlags, MremapFlags, Observation, PageState, Prot, Resource,
};
use ptlab_scenario::{Backend, BackendError};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Most pages the observer reads pagemap words, frame flags and tags for
/// at a time (256 MiB of address space, 2 MiB of pagemap words): bounds
/// the observer's transient memory however much is populated.
pub const OBSERVE_CHUNK_PAGES: u64 = 1 << 16;

/// Populated spans at most this many pages apart are read with one
/// pagemap read (the hole reads as not-present words).
const MERGE_HOLE_PAGES: u64 = 512;

/// How long to wait for a worker's answer before declaring it hung.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the live backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("the live backend needs an x86-64 Linux host (its fault probes are x86-64 code)")]
    Unsupported,
    #[error("cannot take the THP knob lock {path}: {1}", path = .0.display())]
    Lock(std::path::PathBuf, std::io::Error),
    #[error("cannot start a worker process: {0}")]
    Spawn(std::io::Error),
    #[error("cannot read /proc/{0}/smaps: {1}")]
    Proc(i32, std::io::Error),
}

struct LiveProc {
    name: String,
    pid: i32,
    chan: OwnedFd,
    /// Forked directly from ptlab (must be reaped with waitpid).
    direct: bool,
    /// RLIMIT_AS and RLIMIT_DATA the scenario set, in bytes of its own
    /// mappings (`None`: unlimited). The worker's limit adds what the
    /// harness maps, recomputed before every call they can refuse.
    scenario_as: Option<u64>,
    scenario_data: Option<u64>,
    /// Its `/proc/PID/` files the observer reads, kept open between
    /// observations ([`kernel::KeptProcFile`]).
    files: ProcFiles,
}

/// The `/proc/PID/` files of one worker that every observation reads.
#[derive(Debug, Default)]
struct ProcFiles {
    smaps: kernel::KeptProcFile,
    numa_maps: kernel::KeptProcFile,
    status: kernel::KeptProcFile,
    pagemap: kernel::KeptProcFile,
}

impl ProcFiles {
    /// `/proc/{pid}/{name}` (`smaps`, `numa_maps` or `status`) parsed by
    /// `parse`, read through the kept descriptor; when that reads nothing
    /// (the process's mm is gone), every kept file of the process is
    /// closed and the file is read through a fresh open, as before
    /// ([`kernel::KeptProcFile`]).
    fn text<T>(
        &mut self,
        pid: i32,
        name: &str,
        buf: &mut Vec<u8>,
        parse: impl Fn(&str) -> T,
    ) -> std::io::Result<T> {
        let f = match name {
            "smaps" => &mut self.smaps,
            "numa_maps" => &mut self.numa_maps,
            _ => &mut self.status,
        };
        if let Some(text) = f.read(pid, name, buf)? {
            return Ok(parse(text));
        }
        self.forget();
        Ok(parse(&kernel::KeptProcFile::read_fresh(pid, name)?))
    }

    fn forget(&mut self) {
        self.smaps.forget();
        self.numa_maps.forget();
        self.status.forget();
        self.pagemap.forget();
    }
}

/// What an unprivileged or older kernel hides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveCaps {
    /// PFNs, kpageflags and kpagecount are readable (root): folio order,
    /// index, AnonExclusive, mapcount and frame identity are known.
    pub frames: bool,
    /// PAGEMAP_SCAN is available (zero pages and PMD mappings are known).
    pub scan: bool,
    /// THP knobs can be written (root).
    pub knobs: bool,
}

/// An operation about to run, as [`LiveBackend::admit`] checks it against
/// the budgets: only what decides how much it can populate (or whether it
/// makes a process or a swap file).
#[derive(Clone, Copy, Debug)]
pub enum Planned {
    /// read/write of a range.
    Access {
        start: u64,
        len: u64,
    },
    Mmap {
        len: u64,
        flags: MapFlags,
    },
    Madvise {
        addr: u64,
        len: u64,
        advice: Advice,
    },
    Mlock {
        addr: u64,
        len: u64,
        onfault: bool,
    },
    Mprotect {
        addr: u64,
        len: u64,
        prot: Prot,
    },
    Mremap {
        addr: u64,
        old_len: u64,
        new_len: u64,
    },
    UffdCopy {
        len: u64,
        tagged: bool,
    },
    Fork,
    Swap {
        bytes: u64,
    },
}

impl Planned {
    /// What `call` plans that the budgets bound (`None`: nothing).
    pub fn of(call: &Call) -> Option<Planned> {
        Some(match call {
            Call::Access { start, len, .. } => Planned::Access {
                start: *start,
                len: *len,
            },
            Call::FillBytes { addr, len, .. } => Planned::Access {
                start: *addr & !(PAGE - 1),
                len: len.saturating_add(*addr % PAGE),
            },
            Call::Mmap { len, flags, .. } => Planned::Mmap {
                len: *len,
                flags: *flags,
            },
            Call::Madvise { addr, len, advice } => Planned::Madvise {
                addr: *addr,
                len: *len,
                advice: *advice,
            },
            Call::Mlock {
                addr, len, onfault, ..
            } => Planned::Mlock {
                addr: *addr,
                len: *len,
                onfault: *onfault,
            },
            Call::Mprotect { addr, len, prot } => Planned::Mprotect {
                addr: *addr,
                len: *len,
                prot: *prot,
            },
            Call::Mremap {
                addr,
                old_len,
                new_len,
                ..
            } => Planned::Mremap {
                addr: *addr,
                old_len: *old_len,
                new_len: *new_len,
            },
            Call::UffdCopy { len, tag, .. } => Planned::UffdCopy {
                len: *len,
                tagged: tag.is_some(),
            },
            Call::Fork { .. } => Planned::Fork,
            Call::SetSwap { bytes, .. } => Planned::Swap { bytes: *bytes },
            Call::Munmap { .. }
            | Call::Munlock { .. }
            | Call::Mseal { .. }
            | Call::Exit
            | Call::PrctlThp(_)
            | Call::Setrlimit { .. }
            | Call::DropCapIpcLock
            | Call::FillVmas { .. }
            | Call::UffdCreate { .. }
            | Call::UffdApi { .. }
            | Call::UffdRegister { .. }
            | Call::UffdUnregister { .. }
            | Call::UffdZeropage { .. }
            | Call::UffdMove { .. }
            | Call::SetThp { .. }
            | Call::SetUseZeroPage { .. }
            | Call::SetBefore { .. }
            | Call::SetAfter { .. }
            | Call::SetMemory { .. }
            | Call::SetNodes { .. }
            | Call::NumaRunOn { .. }
            | Call::NumaScan { .. } => return None,
        })
    }
}

/// The most pages [`LiveBackend::present_pages_bytes`] loads in one
/// request (256 KiB of answer).
const PAGE_BYTES_RUN: usize = 64;

/// Runs scenarios on the live kernel. See the module docs.
pub struct LiveBackend {
    procs: Vec<LiveProc>,
    knobs: KnobSession,
    reader: Reader,
    /// Sorted, merged ranges the scenario mapped.
    territory: Vec<(u64, u64)>,
    /// Sorted ranges of the worker's own VMAs at start.
    foreign: Vec<(u64, u64)>,
    /// PROT_NONE pages placed to keep scenario VMAs from merging with
    /// foreign ones.
    guards: Vec<(u64, u64)>,
    /// The THP counters when the run started, by index
    /// ([`kernel::ThpCounters::keys`]).
    stats_base: kernel::CounterValues,
    /// The value of every counter at its last read, by index (of a run
    /// that narrows its reads, [`LiveBackend::set_narrow_counters`]: a
    /// counter of an order not read reports this value).
    stats_last: kernel::CounterValues,
    /// Read only the counters of the orders the run's statements can
    /// move ([`LiveBackend::set_narrow_counters`]).
    narrow_counters: bool,
    /// The orders whose counters are read (bit `o`; 9 includes
    /// `/proc/vmstat`): every order unless narrowed.
    counter_orders: u16,
    /// Counters attributed to this run's own statements
    /// ([`LiveBackend::with_options`]), when other live runs of this
    /// process go on at the same time.
    attribution: Option<Attribution>,
    /// An attributed `MADV_PAGEOUT` started swap writeback that the
    /// statement has not waited for yet ([`LiveBackend::call_attributed`]).
    writeback_pending: bool,
    /// Which THP counters the run's own statements can move
    /// (crate::reach): an attributed statement that can move none takes no
    /// [`COUNTER_LOCK`].
    reach: crate::reach::CounterReach,
    /// The THP counter files, kept open.
    thp_counters: std::cell::RefCell<kernel::ThpCounters>,
    /// Pages whose tag could not be loaded at the last observation
    /// (non-readable VMAs), per process.
    unknown_tags: BTreeSet<(String, u64)>,
    /// Per process, the present anon pages whose bytes 8..4096 were not
    /// all zero at its last observation (address → frame): the diff then
    /// compares their 4096 bytes (a tag page, the model's common page, is
    /// its tag and zeros).
    rest_pages: HashMap<String, HashMap<u64, u64>>,
    /// The frames of `rest_pages` when the current `observe_all` began:
    /// a page whose tag is re-used (same frame, contents kept) takes its
    /// flag from its frame.
    rest_prev_frames: HashSet<u64>,
    /// userfaultfd handle names → worker slots (a process's own handle is
    /// named after the process).
    uffd_slots: BTreeMap<String, usize>,
    /// The handles each process holds a descriptor for (its own and those
    /// inherited through fork); a name no process holds is free again.
    uffd_fds: BTreeMap<String, BTreeSet<String>>,
    notes: Vec<String>,
    /// Budgets (crate::budget): as configured, and the memory budget
    /// resolved at start.
    limits: LiveLimits,
    mem_budget: MemoryBudget,
    /// What the scenario's processes held at the last measurement, and the
    /// bounds of what statements since then may have populated.
    mem_known: u64,
    mem_added: u64,
    /// Read every page's pagemap word instead of finding the populated
    /// parts with PAGEMAP_SCAN first (see [`LiveBackend::set_dense_observation`]).
    dense_observation: bool,
    /// The caller checks every statement against the budgets before it
    /// runs ([`LiveBackend::admit`]; `ptlab diff` does, for both sides), so
    /// the operations do not check again.
    admitted_by_caller: bool,
    /// Where observation time went (`PTLAB_DIFF_TIMING=1`).
    timing: ObserveTiming,
    /// What [`LiveBackend::observe_all`] may re-use (crate::incremental).
    incr: Incremental,
    /// What [`LiveBackend::shutdown`] took: ending the workers, restoring
    /// the knobs and swap.
    end_timing: (Duration, Duration),
    /// A buffer for the `/proc/PID/` text files an observation reads.
    text_buf: Vec<u8>,
    /// During [`LiveBackend::observe_all`]: `Some`, holding the counters
    /// once the first process read them ([`LiveBackend::stats`]), which
    /// the others' observations share.
    stats_once: Option<Option<BTreeMap<String, i64>>>,
    _lock: ThpLock,
}

/// Time the live observer spent, by source (summed over observations).
#[derive(Clone, Copy, Debug, Default)]
pub struct ObserveTiming {
    /// `/proc/PID/smaps` and `/proc/PID/status`.
    pub smaps: Duration,
    /// `PAGEMAP_SCAN` and pagemap reads.
    pub pagemap: Duration,
    /// kpageflags and kpagecount (`kernel::Reader::frame_facts`).
    pub frames: Duration,
    /// Page contents (`READ_TAG_LIST` requests to the worker).
    pub tags: Duration,
    /// THP counters.
    pub counters: Duration,
    /// `READ_TAG_LIST` requests (round trips to a worker) and the pages
    /// they loaded.
    pub tag_requests: u64,
    pub tags_loaded: u64,
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn errno_err(code: i64) -> BackendError {
    let c = code.unsigned_abs() as i32;
    match Errno::from_code(c) {
        Some(e) => BackendError::Errno(e),
        None => BackendError::Other(format!(
            "the kernel returned errno {c} ({}), which ptlab has no name for",
            std::io::Error::from_raw_os_error(c)
        )),
    }
}

fn merge_into(set: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    set.push((start, end));
    set.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(set.len());
    for &(s, e) in set.iter() {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    *set = out;
}

fn intersects(set: &[(u64, u64)], start: u64, end: u64) -> Option<(u64, u64)> {
    set.iter().copied().find(|&(s, e)| s < end && start < e)
}

fn page_len(len: u64) -> u64 {
    len.checked_add(PAGE - 1)
        .map_or(!(PAGE - 1), |l| l & !(PAGE - 1))
}

fn poll_in(fd: i32, timeout: Duration) -> Result<(), BackendError> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
        if r > 0 {
            return Ok(());
        }
        if r == 0 {
            return Err(BackendError::Other(format!(
                "a worker process did not answer within {} s",
                timeout.as_secs()
            )));
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(BackendError::Other(
                "poll on a worker channel failed".into(),
            ));
        }
    }
}

fn read_words(fd: i32, out: &mut [u64]) -> Result<bool, BackendError> {
    // SAFETY: byte view of a u64 slice.
    let buf =
        unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), out.len() * 8) };
    let mut off = 0;
    while off < buf.len() {
        let n = read_some(fd, &mut buf[off..])?;
        if n == 0 {
            return Ok(false);
        }
        off += n;
    }
    Ok(true)
}

/// Wait for data on a worker channel and read what is there into `buf`
/// (0: EOF, the worker is gone).
fn read_some(fd: i32, buf: &mut [u8]) -> Result<usize, BackendError> {
    loop {
        poll_in(fd, ANSWER_TIMEOUT)?;
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(BackendError::Other(format!(
                "reading a worker channel: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
}

fn write_words(fd: i32, w: &[u64]) -> Result<(), BackendError> {
    // SAFETY: byte view of a u64 slice.
    let mut buf = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), w.len() * 8) };
    while !buf.is_empty() {
        // SAFETY: writing from our buffer; MSG_NOSIGNAL avoids SIGPIPE.
        let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(BackendError::Other(format!(
                "a worker process is gone ({})",
                std::io::Error::last_os_error()
            )));
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Reads the answers of pipelined requests from a worker channel through
/// one buffer, so that many small answers cost few `read` calls. Reads
/// only as much as the caller asks for in all (the worker writes nothing
/// it was not asked for), so nothing is left in the buffer once every
/// answer is taken.
struct AnswerReader {
    fd: i32,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
}

impl AnswerReader {
    fn new(fd: i32) -> AnswerReader {
        AnswerReader {
            fd,
            buf: vec![0; 64 << 10],
            pos: 0,
            len: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.pos == self.len
    }

    /// Fill `out` from the channel; `false` at EOF (the worker died).
    fn words(&mut self, out: &mut [u64]) -> Result<bool, BackendError> {
        // SAFETY: byte view of a u64 slice; every byte pattern is a valid u64.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), out.len() * 8) };
        let mut off = 0;
        while off < dst.len() {
            if self.pos == self.len {
                // A large answer goes straight into `out`.
                let direct = dst.len() - off >= self.buf.len();
                let target = if direct {
                    &mut dst[off..]
                } else {
                    &mut self.buf[..]
                };
                let n = read_some(self.fd, target)?;
                if n == 0 {
                    return Ok(false);
                }
                if direct {
                    off += n;
                    continue;
                }
                (self.pos, self.len) = (0, n);
            }
            let k = (self.len - self.pos).min(dst.len() - off);
            dst[off..off + k].copy_from_slice(&self.buf[self.pos..self.pos + k]);
            self.pos += k;
            off += k;
        }
        Ok(true)
    }
}

/// Receive a response header that carries a descriptor (the answer to FORK).
fn recv_with_fd(fd: i32) -> Result<(Resp, Option<OwnedFd>), BackendError> {
    poll_in(fd, ANSWER_TIMEOUT)?;
    let mut hdr: Resp = [0; 4];
    // SAFETY: msghdr over valid buffers; CMSG macros stay inside cbuf.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: hdr.as_mut_ptr().cast(),
            iov_len: 32,
        };
        let mut cbuf = [0u64; 8];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        let n = libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL);
        if n != 32 {
            return Err(BackendError::Other("a worker died while forking".into()));
        }
        let mut got = None;
        let c = libc::CMSG_FIRSTHDR(&msg);
        if !c.is_null() && (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS
        {
            let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
            got = Some(OwnedFd::from_raw_fd(raw));
        }
        Ok((hdr, got))
    }
}

/// Fork the `main` worker of a run (exec'd as the small worker program,
/// [`crate::worker_exe`]): its pid and ptlab's end of its channel. The
/// worker faults its stack and statics while ptlab's PR_SET_THP_DISABLE,
/// set here and kept over fork and exec, still holds, and clears it only
/// then (worker.rs worker_main()): whatever the THP policy when it starts,
/// it has no large folio of its own.
fn spawn_main_worker() -> Result<(libc::pid_t, OwnedFd), LiveError> {
    // ptlab's own allocations must not move the global THP counters
    // while a scenario allows large folios; workers undo this.
    // SAFETY: prctl on ourselves.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    let mut sv = [0 as libc::c_int; 2];
    // SAFETY: socketpair into a valid array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    } < 0
    {
        return Err(LiveError::Spawn(std::io::Error::last_os_error()));
    }
    // The worker dies with ptlab (crate::lifeline): recorded before the
    // fork, checked by the worker after it arms PR_SET_PDEATHSIG.
    let parent = crate::lifeline::my_pid();
    // The exec'd worker program's arguments, made before the fork.
    let launch = crate::worker_exe::Launch::prepare(parent);
    // SAFETY: the child runs only async-signal-safe code (the exec of
    // the worker program, or worker_main).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: both ends are ours.
        unsafe {
            libc::close(sv[0]);
            libc::close(sv[1]);
        }
        return Err(LiveError::Spawn(e));
    }
    if pid == 0 {
        crate::worker_exe::become_worker(sv[1], parent, launch.as_ref());
    }
    // SAFETY: closing our copy of the worker's end; sv[0] is ours.
    let chan = unsafe {
        libc::close(sv[1]);
        OwnedFd::from_raw_fd(sv[0])
    };
    Ok((pid, chan))
}

/// A `main` worker started ahead of the run that will use it
/// ([`prestart_worker`]); killed and reaped if no run takes it.
struct Prestarted {
    pid: libc::pid_t,
    chan: Option<OwnedFd>,
}

impl Drop for Prestarted {
    fn drop(&mut self) {
        if self.chan.take().is_some() {
            let mut st = 0;
            // SAFETY: our own child, not reaped yet.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, &mut st, 0);
            }
        }
    }
}

thread_local! {
    /// This thread's prestarted worker: a worker inherits its forking
    /// thread's CPU affinity (a pinned fuzz job's CPU) and dies with that
    /// thread (PR_SET_PDEATHSIG), so it serves only this thread's runs.
    static PRESTARTED: std::cell::RefCell<Option<Prestarted>> =
        const { std::cell::RefCell::new(None) };
}

/// Start the `main` worker of this thread's next live run now, so that the
/// run does not wait for its fork and exec (`ptlab fuzz` starts it while
/// its case waits for the gate: docs/live.md "Eighth round"). Only for
/// exec'd workers (a forked one would copy ptlab as it is now, not as it
/// is when the run starts); nothing if one is waiting already.
///
/// Safe to start before the run's THP policy is set, under another
/// policy: the worker faults every page of its own with ptlab's
/// PR_SET_THP_DISABLE in force ([`spawn_main_worker`]), and then blocks
/// reading its channel, faulting nothing, until the run's first request.
/// With `attribute` (live runs beside others attribute the counters),
/// the start holds [`COUNTER_LOCK`] as a run's own start does, so that
/// nothing it does falls into another run's statement.
pub fn prestart_worker(attribute: bool) -> Result<(), LiveError> {
    if !worker::SUPPORTED || !crate::worker_exe::exec_workers() {
        return Ok(());
    }
    if PRESTARTED.with(|p| p.borrow().is_some()) {
        return Ok(());
    }
    let gate = attribute.then(|| COUNTER_LOCK.lock().unwrap_or_else(|e| e.into_inner()));
    let (pid, chan) = spawn_main_worker()?;
    let w = Prestarted {
        pid,
        chan: Some(chan),
    };
    // Wait for its first answer: the exec and its faults are done.
    let fd = w.chan.as_ref().map_or(-1, |c| c.as_raw_fd());
    let answered = write_words(fd, &[op::PING, 0, 0, 0, 0, 0, 0, 0])
        .and_then(|()| read_words(fd, &mut [0; 4]))
        .unwrap_or(false);
    if !answered {
        return Err(LiveError::Spawn(std::io::Error::other(
            "the prestarted worker exited before its first answer",
        )));
    }
    if let Some(mut gen) = gate {
        *gen += 1;
    }
    PRESTARTED.with(|p| *p.borrow_mut() = Some(w));
    Ok(())
}

/// The pid of this thread's prestarted worker, if one waits.
pub fn prestarted_worker_pid() -> Option<libc::pid_t> {
    PRESTARTED.with(|p| p.borrow().as_ref().map(|w| w.pid))
}

/// Kill this thread's prestarted worker, if any (a campaign's end).
pub fn drop_prestarted_worker() {
    PRESTARTED.with(|p| drop(p.borrow_mut().take()));
}

/// This thread's prestarted worker, taken for a run.
fn take_prestarted() -> Option<(libc::pid_t, OwnedFd)> {
    PRESTARTED.with(|p| {
        let mut w = p.borrow_mut().take()?;
        let chan = w.chan.take()?;
        Some((w.pid, chan))
    })
}

impl LiveBackend {
    /// Start a live backend with the default budgets: take the knob lock
    /// (waiting for any other live run), and fork the `main` worker.
    pub fn new() -> Result<LiveBackend, LiveError> {
        Self::with_limits(LiveLimits::default())
    }

    /// Start a live backend whose statements are checked against `limits`
    /// (crate::budget) before they run.
    pub fn with_limits(limits: LiveLimits) -> Result<LiveBackend, LiveError> {
        Self::with_options(limits, false)
    }

    /// [`LiveBackend::with_limits`]; with `attribute`, the THP counters
    /// this run reports are the sum of what they did during its own
    /// statements, each run under [`COUNTER_LOCK`] between two reads of
    /// the counters (and so are the start of its worker and the end of
    /// its processes), instead of what they did since the run started.
    /// For live runs that go on beside others in this process (`ptlab
    /// fuzz --jobs`, docs/live.md "Parallel jobs and shards"): a counter
    /// step then shows what this run's statement did, not what another
    /// run's statement did meanwhile.
    pub fn with_options(limits: LiveLimits, attribute: bool) -> Result<LiveBackend, LiveError> {
        // Held while the worker starts: its first faults are nobody's step.
        let gate = attribute.then(|| COUNTER_LOCK.lock().unwrap_or_else(|e| e.into_inner()));
        if !worker::SUPPORTED || !cfg!(target_os = "linux") {
            return Err(LiveError::Unsupported);
        }
        let lock = knobs::acquire_or_wait("live run")
            .map_err(|e| LiveError::Lock(knobs::lock_path(), e))?;
        // ptlab's own allocations must not move the global THP counters
        // while a scenario allows large folios; workers undo this.
        // SAFETY: prctl on ourselves.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
        // The base is read once the worker serves (below).
        let thp_counters = kernel::ThpCounters::take();
        let stats_base = Vec::new();
        // A worker started ahead for this thread's next run, else a new one.
        let (pid, chan) = match take_prestarted() {
            Some(w) => w,
            None => spawn_main_worker()?,
        };
        let mut me = LiveBackend {
            procs: vec![LiveProc {
                name: "main".into(),
                pid,
                chan,
                direct: true,
                scenario_as: None,
                scenario_data: None,
                files: ProcFiles::default(),
            }],
            knobs: KnobSession::new(),
            reader: Reader::new(),
            territory: Vec::new(),
            foreign: Vec::new(),
            guards: Vec::new(),
            stats_base,
            stats_last: Vec::new(),
            narrow_counters: false,
            counter_orders: kernel::ALL_COUNTER_ORDERS,
            attribution: None,
            // The knobs in force now are the run's (a case beside others
            // changes no size's effective mode but by its own statements,
            // crate::fuzz::epoch_sharing).
            reach: crate::reach::CounterReach::new(
                knobs::enabled_knobs(),
                knobs::shmem_may_be_large(),
            ),
            writeback_pending: false,
            thp_counters: std::cell::RefCell::new(thp_counters),
            unknown_tags: BTreeSet::new(),
            rest_pages: HashMap::new(),
            rest_prev_frames: HashSet::new(),
            uffd_slots: BTreeMap::new(),
            uffd_fds: BTreeMap::new(),
            notes: Vec::new(),
            mem_budget: limits.memory(),
            limits,
            mem_known: 0,
            mem_added: 0,
            dense_observation: false,
            admitted_by_caller: false,
            timing: ObserveTiming::default(),
            incr: Incremental::default(),
            end_timing: Default::default(),
            text_buf: Vec::new(),
            stats_once: None,
            _lock: lock,
        };
        // Wait until the worker is serving, then record its own VMAs.
        me.request("main", [op::PING, 0, 0, 0, 0, 0, 0, 0])
            .map_err(|e| LiveError::Spawn(std::io::Error::other(e.to_string())))?;
        let smaps = kernel::read_smaps(pid).map_err(|e| LiveError::Proc(pid, e))?;
        for v in smaps {
            merge_into(&mut me.foreign, v.start, v.end);
        }
        // The counters count from here: the worker's own start (its first
        // faults on its stack and heap, which under an `always` policy set
        // before the run, as `ptlab fuzz` sets a knob epoch's, may allocate
        // large folios) is no statement of the scenario.
        me.thp_counters.borrow_mut().read_values(&mut me.stats_base);
        me.stats_last = me.stats_base.clone();
        if let Some(mut gen) = gate {
            *gen += 1;
            let zero = me.stats_base.iter().map(|v| v.map(|_| 0)).collect();
            me.attribution = Some(Attribution {
                own: zero,
                last: None,
                before: Vec::new(),
                unlocked: 0,
                alloc_links: crate::reach::alloc_counter_links(me.thp_counters.borrow().keys()),
                delta: Vec::new(),
            });
        }
        Ok(me)
    }

    /// What this process can observe.
    pub fn caps(&self) -> LiveCaps {
        LiveCaps {
            frames: self.reader.caps.kpage && (self.reader.caps.pfn || is_root()),
            scan: self.reader.caps.scan,
            knobs: is_root(),
        }
    }

    /// Observe by reading every page's pagemap word (`true`), as a kernel
    /// without PAGEMAP_SCAN requires, instead of reading only the parts a
    /// PAGEMAP_SCAN walk finds populated (the default). Both give the same
    /// observation; the dense way costs time in proportion to the size of
    /// the VMAs. For checking the sparse observer against the dense one.
    /// Leave the budget checks to the caller, which calls
    /// [`LiveBackend::admit`] before each statement (`ptlab diff`).
    pub fn set_admitted_by_caller(&mut self, yes: bool) {
        self.admitted_by_caller = yes;
    }

    /// The budget check each operation makes first, unless the caller
    /// made it already.
    fn check_budget(&mut self, proc: &str, call: &Call) -> Result<(), BackendError> {
        if self.admitted_by_caller {
            return Ok(());
        }
        self.admit_call(proc, call)
    }

    /// [`LiveBackend::admit`] for what `call` plans, if it plans anything
    /// the budgets bound.
    pub fn admit_call(&mut self, proc: &str, call: &Call) -> Result<(), BackendError> {
        match Planned::of(call) {
            Some(op) => self.admit(proc, op),
            None => Ok(()),
        }
    }

    pub fn set_dense_observation(&mut self, dense: bool) {
        self.dense_observation = dense;
    }

    /// The kpageflags and kpagecount reads made so far.
    pub fn read_counters(&self) -> kernel::ReadCounters {
        self.reader.counters
    }

    /// Read from now on only the per-size THP counters whose key `keep`
    /// accepts (`ptlab diff` compares only those the model keeps: 96 of
    /// the ~144 sysfs files, each a system call per observation).
    pub fn keep_counters(&mut self, keep: impl Fn(&str) -> bool) {
        self.thp_counters.borrow_mut().keep_only(keep);
    }

    /// Where observation time went so far.
    pub fn observe_timing(&self) -> ObserveTiming {
        self.timing
    }

    /// Record every call's footprint so that [`LiveBackend::observe_all`]
    /// can re-use what cannot have changed (crate::incremental). Off: every
    /// observation reads everything, and nothing is kept.
    pub fn set_incremental(&mut self, on: bool) {
        self.incr.on = on;
        self.incr.reset();
    }

    /// Check every observation that re-uses records against a full read of
    /// the same moment, counting the pages that differ
    /// ([`IncrementalStats::stale_pages`]); the full read is what
    /// [`LiveBackend::observe_all`] returns.
    pub fn set_verify_incremental(&mut self, on: bool) {
        self.incr.verify = on;
    }

    /// What the incremental observer did so far.
    pub fn incremental_stats(&self) -> IncrementalStats {
        self.incr.stats
    }

    /// The first pages verification found stale: (process, address, the
    /// re-used record, the fresh one).
    pub fn stale_examples(&self) -> &[(String, u64, String, String)] {
        &self.incr.stale_examples
    }

    /// Observe every process (in [`LiveBackend::process_names`] order).
    ///
    /// With the incremental observer on ([`LiveBackend::set_incremental`])
    /// and `reuse`, the frame facts and tags of pages that cannot have
    /// changed since the previous `observe_all` are taken from it, by the
    /// rules of crate::incremental. Those rules need every process's
    /// pagemap changes, which are known only once every process is read:
    /// so after one pass, a process that re-used a page whose frame block
    /// another process's changes touched is read again (rarely: the
    /// touched frames are normally the footprint's own), up to three
    /// times, then everything is read.
    pub fn observe_all(&mut self, reuse: bool) -> Vec<(String, Result<Observation, BackendError>)> {
        let names = self.process_names();
        self.stats_once = Some(None);
        self.rest_prev_frames = self
            .rest_pages
            .values()
            .flat_map(|m| m.values().copied())
            .filter(|&p| p != 0)
            .collect();
        let mut inc = std::mem::take(&mut self.incr);
        let pfns_visible = self.reader.caps.pfn && self.reader.caps.kpage;
        let mut reuse = reuse && inc.on && !inc.everything && pfns_visible;
        let (mut touched, frame_tags) = if reuse {
            inc.touched_by_footprints()
        } else {
            Default::default()
        };
        let pids: Vec<i32> = self.procs.iter().map(|p| p.pid).collect();
        let mut results: Vec<Option<Result<Observation, BackendError>>> =
            (0..names.len()).map(|_| None).collect();
        let mut records: Vec<Option<(Vec<CachedPage>, Vec<u64>)>> = vec![None; names.len()];
        let mut vma_records: Vec<Option<incremental::VmaRecord>> = vec![None; names.len()];
        let mut todo: Vec<usize> = (0..names.len()).collect();
        let mut round = 0;
        loop {
            for &i in &todo {
                let fp: &[(u64, u64)] = inc.footprints.get(&names[i]).map_or(&[], Vec::as_slice);
                let mut pass = ProcPass::new(
                    reuse,
                    inc.previous(&names[i], pids[i]),
                    fp,
                    &touched,
                    &frame_tags,
                );
                pass.contents_kept = !inc.contents_changed;
                if reuse {
                    pass.vmas = inc.vmas_of(&names[i], pids[i]);
                }
                // Without the incremental observer nothing is recorded
                // (an observation's memory stays bounded by its chunk).
                let r = self.observe_proc(&names[i], inc.on.then_some(&mut pass));
                let ProcPass {
                    new,
                    mut reused_blocks,
                    reused,
                    read,
                    vmas_out,
                    ..
                } = pass;
                vma_records[i] = vmas_out;
                inc.stats.pages_reused += reused;
                inc.stats.pages_read += read;
                reused_blocks.sort_unstable();
                reused_blocks.dedup();
                records[i] = r.is_ok().then_some((new, reused_blocks));
                results[i] = Some(r);
            }
            if !reuse {
                break;
            }
            for &i in &todo {
                if let Some((new, _)) = &records[i] {
                    incremental::changed_blocks(
                        inc.previous(&names[i], pids[i]),
                        new,
                        &mut touched,
                    );
                }
            }
            todo = (0..names.len())
                .filter(|&i| {
                    records[i]
                        .as_ref()
                        .is_some_and(|(_, b)| b.iter().any(|b| touched.contains(b)))
                })
                .collect();
            if todo.is_empty() {
                break;
            }
            inc.stats.redone += todo.len() as u64;
            round += 1;
            if round == 3 {
                reuse = false;
                todo = (0..names.len()).collect();
            }
        }
        if reuse {
            inc.stats.incremental += 1;
        } else {
            inc.stats.full += 1;
        }
        if reuse && inc.verify {
            // The same moment read in full: what is returned, and what
            // the re-used records are checked against.
            let (empty, no_tags) = Default::default();
            for i in 0..names.len() {
                let mut pass = ProcPass::new(false, &[], &[], &empty, &no_tags);
                let rest_reused = self.rest_pages.get(&names[i]).cloned().unwrap_or_default();
                let full = self.observe_proc(&names[i], Some(&mut pass));
                // Pages whose bytes beyond the tag are not all zero: the
                // flags re-used with the tags against the full read's.
                let rest_full = self.rest_pages.get(&names[i]).cloned().unwrap_or_default();
                for (&addr, _) in rest_reused
                    .iter()
                    .filter(|(a, _)| !rest_full.contains_key(a))
                    .chain(
                        rest_full
                            .iter()
                            .filter(|(a, _)| !rest_reused.contains_key(a)),
                    )
                {
                    inc.stats.stale_pages += 1;
                    if inc.stale_examples.len() < 20 {
                        inc.stale_examples.push((
                            names[i].clone(),
                            addr,
                            format!(
                                "bytes 8..4096 not all zero: {}",
                                rest_reused.contains_key(&addr)
                            ),
                            format!(
                                "bytes 8..4096 not all zero: {}",
                                rest_full.contains_key(&addr)
                            ),
                        ));
                    }
                }
                let fresh = pass.new;
                vma_records[i] = pass.vmas_out;
                if let (Some(Ok(a)), Ok(b)) = (&results[i], &full) {
                    if (&a.maps, a.vm_lck_kb) != (&b.maps, b.vm_lck_kb) {
                        inc.stats.stale_maps += 1;
                        if inc.stale_examples.len() < 20 {
                            inc.stale_examples.push((
                                names[i].clone(),
                                0,
                                format!("maps {:?} VmLck {}", a.maps, a.vm_lck_kb),
                                format!("maps {:?} VmLck {}", b.maps, b.vm_lck_kb),
                            ));
                        }
                    }
                }
                // What the diff sees: every page's state.
                if let (Some(Ok(a)), Ok(b)) = (&results[i], &full) {
                    for piece in PageRuns::aligned(&a.pages, &b.pages) {
                        if piece.a == piece.b {
                            continue;
                        }
                        inc.stats.stale_pages += piece.npages;
                        if inc.stale_examples.len() < 20 {
                            inc.stale_examples.push((
                                names[i].clone(),
                                piece.addr,
                                format!("{:?}", piece.a),
                                format!("{:?}", piece.b),
                            ));
                        }
                    }
                }
                records[i] = full.is_ok().then(|| (fresh, Vec::new()));
                results[i] = Some(full);
            }
        }
        if inc.on {
            inc.caches.clear();
            inc.vmas.clear();
            for (i, (rec, vmas)) in records.into_iter().zip(vma_records).enumerate() {
                if let Some((new, _)) = rec {
                    inc.caches.insert(names[i].clone(), (pids[i], new));
                }
                if let Some(v) = vmas {
                    inc.vmas.insert(names[i].clone(), (pids[i], v));
                }
            }
        }
        inc.vmas_changed.clear();
        inc.footprints.clear();
        inc.everything = false;
        inc.contents_changed = false;
        self.incr = inc;
        self.stats_once = None;
        names
            .into_iter()
            .zip(results)
            .map(|(n, r)| {
                let r = r.unwrap_or_else(|| Err(BackendError::Other("not observed".into())));
                (n, r)
            })
            .collect()
    }

    /// Raw reader capabilities (after at least one observation).
    pub fn reader_caps(&self) -> Caps {
        self.reader.caps
    }

    /// The address ranges the scenario mapped so far.
    pub fn territory(&self) -> &[(u64, u64)] {
        &self.territory
    }

    /// The worker's own VMAs (addresses a scenario must not use).
    pub fn foreign(&self) -> &[(u64, u64)] {
        &self.foreign
    }

    /// Whether the tag of `addr` in `proc` could not be read at the last
    /// observation (the page is present but not readable).
    pub fn tag_unknown(&self, proc: &str, addr: u64) -> bool {
        self.unknown_tags.contains(&(proc.to_string(), addr))
    }

    /// Whether the present anon page at `addr` of `proc` had bytes beyond
    /// its tag (8..4096) that are not all zero at the last observation.
    pub fn rest_nonzero(&self, proc: &str, addr: u64) -> bool {
        self.rest_pages
            .get(proc)
            .is_some_and(|m| m.contains_key(&addr))
    }

    /// Remarks collected during the run (guards placed, merges seen).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Names of the scenario processes that are alive, in creation order.
    pub fn process_names(&self) -> Vec<String> {
        self.procs.iter().map(|p| p.name.clone()).collect()
    }

    /// Pid of a scenario process.
    pub fn pid_of(&self, proc: &str) -> Option<i32> {
        self.procs.iter().find(|p| p.name == proc).map(|p| p.pid)
    }

    fn proc_index(&self, proc: &str) -> Result<usize, BackendError> {
        self.procs
            .iter()
            .position(|p| p.name == proc)
            .ok_or_else(|| BackendError::NoProcess(proc.to_string()))
    }

    /// Before a call RLIMIT_AS/RLIMIT_DATA can refuse: give the worker
    /// the scenario's limits plus what the harness maps right now (VmSize
    /// and VmData minus the scenario's VMAs). The worker applies them only
    /// around that call.
    fn refresh_scoped_limits(&mut self, proc: &str) -> Result<(), BackendError> {
        let idx = self.proc_index(proc)?;
        let p = &self.procs[idx];
        let (as_lim, data_lim, pid) = (p.scenario_as, p.scenario_data, p.pid);
        if as_lim.is_none() && data_lim.is_none() {
            return Ok(());
        }
        let status = kernel::read_status(pid)
            .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/status: {e}")))?;
        let smaps = kernel::read_smaps(pid)
            .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/smaps: {e}")))?;
        let (mut mine, mut mine_data) = (0u64, 0u64);
        for (i, s, e) in self.clipped(&smaps) {
            mine += e - s;
            // is_data_mapping(): VM_WRITE without VM_SHARED.
            let perms = smaps[i].perms.as_bytes();
            if perms.get(1) == Some(&b'w') && perms.get(3) == Some(&b'p') {
                mine_data += e - s;
            }
        }
        let field = |k: &str| status.get(k).copied().unwrap_or(0) * 1024;
        for (res, lim, total, ours) in [
            (Resource::As, as_lim, field("VmSize"), mine),
            (Resource::Data, data_lim, field("VmData"), mine_data),
        ] {
            let Some(lim) = lim else { continue };
            let harness = total.saturating_sub(ours);
            // A zero RLIMIT_DATA is its own case in may_expand_vm() (the
            // Valgrind workaround: checked against the hard limit), so it
            // is passed as zero, not as the harness's size.
            let soft = if res == Resource::Data && lim == 0 {
                0
            } else {
                harness.saturating_add(lim).min(libc::RLIM_INFINITY - 1)
            };
            let r = self.request(
                proc,
                [op::SETRLIMIT, res.number().into(), soft, 1, 0, 0, 0, 0],
            )?;
            Self::unit(r).map_err(|e| hard_limit_error(e, res, soft))?;
        }
        Ok(())
    }

    /// `vm.max_map_count` and how many of `proc`'s VMAs are the harness's
    /// own (outside the scenario's territory): the model's share of the
    /// limit is the difference.
    pub fn map_count_budget(&self, proc: &str) -> Result<(u64, u64), BackendError> {
        let pid = self.procs[self.proc_index(proc)?].pid;
        let max = read_max_map_count()?;
        let all = read_map_count(pid)?;
        let smaps = kernel::read_smaps(pid)
            .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/smaps: {e}")))?;
        let mine: BTreeSet<usize> = self
            .clipped(&smaps)
            .into_iter()
            .map(|(i, _, _)| i)
            .collect();
        Ok((max, all.saturating_sub(mine.len() as u64)))
    }

    /// The budgets this backend checks.
    pub fn limits(&self) -> &LiveLimits {
        &self.limits
    }

    /// The memory budget in bytes (resolved at start).
    pub fn memory_budget(&self) -> u64 {
        self.mem_budget.bytes
    }

    /// Memory the scenario's processes hold: (quick, precise). Quick is
    /// `RssAnon + RssShmem + VmPTE` summed over the workers (a page shared
    /// after fork counts once per process); precise replaces the resident
    /// sizes by `Pss_Anon + Pss_Shmem` from smaps_rollup (a shared page
    /// counts once in all), which walks the page tables, so it is read
    /// only when the quick sum is over budget.
    fn held_memory(&self, precise: bool) -> u64 {
        let mut total = 0u64;
        for p in &self.procs {
            let st = kernel::read_status(p.pid).unwrap_or_default();
            let kb = |k: &str| st.get(k).copied().unwrap_or(0) * 1024;
            total = total.saturating_add(kb("VmPTE"));
            if precise {
                if let Ok(text) = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", p.pid)) {
                    let r = kernel::parse_status(&text);
                    let kb = |k: &str| r.get(k).copied().unwrap_or(0) * 1024;
                    total = total.saturating_add(kb("Pss_Anon") + kb("Pss_Shmem"));
                    continue;
                }
            }
            total = total.saturating_add(kb("RssAnon") + kb("RssShmem"));
        }
        total
    }

    /// Check an operation against the budgets (crate::budget) before it
    /// runs: every Backend method here calls this first, and `ptlab diff`
    /// calls it before either side runs, so a statement over budget stops
    /// the run on both sides alike (and the model does not populate what
    /// the kernel refused). Err names the budget, the amount asked for and
    /// the option that raises it.
    pub fn admit(&mut self, proc: &str, op: Planned) -> Result<(), BackendError> {
        let range = |a: u64, l: u64| format!("{a:#x}+{l:#x}");
        match op {
            Planned::Access { start, len } => {
                // A read can populate too: a swap-in, or a THP where the
                // huge zero page is off.
                self.reserve_memory(&range(start, len), budget::populate_bound(start, len))
            }
            Planned::Mmap { len, flags } => {
                if flags.intersects(MapFlags::POPULATE | MapFlags::LOCKED) {
                    // Its own pages, whatever folios back them (a folio
                    // never reaches past its VMA).
                    self.reserve_memory(
                        &format!("a populated mapping of {len:#x}"),
                        budget::mapping_bound(len),
                    )
                } else {
                    Ok(())
                }
            }
            Planned::Madvise { addr, len, advice } => {
                if advice == Advice::Collapse {
                    // A new PMD THP per 2 MiB block before the old pages go.
                    self.reserve_memory(&range(addr, len), budget::populate_bound(addr, len))
                } else {
                    Ok(())
                }
            }
            Planned::Mlock { addr, len, onfault } => {
                if onfault {
                    Ok(())
                } else {
                    self.reserve_memory(&range(addr, len), budget::populate_bound(addr, len))
                }
            }
            Planned::Mprotect { addr, len, prot } => {
                // Making a VM_LOCKED range writable populates it
                // (mm/mprotect.c mprotect_fixup() → populate_vma_page_range()).
                if !prot.contains(Prot::WRITE) {
                    return Ok(());
                }
                let locked = self.locked_in(proc, addr, len)?;
                if locked == 0 {
                    return Ok(());
                }
                self.reserve_memory(
                    &format!("{} (locked)", range(addr, len)),
                    budget::populate_bound(addr, len).min(locked + 2 * budget::MAX_FOLIO),
                )
            }
            Planned::Mremap {
                addr,
                old_len,
                new_len,
            } => {
                // Growing a VM_LOCKED mapping populates the new part
                // (mm/mremap.c: the grown range goes to mm_populate()).
                if new_len <= old_len || self.locked_in(proc, addr, old_len.max(1))? == 0 {
                    return Ok(());
                }
                self.reserve_memory(
                    &format!("growing a locked mapping by {:#x}", new_len - old_len),
                    budget::mapping_bound(new_len - old_len),
                )
            }
            Planned::UffdCopy { len, tagged } => {
                // Small pages at the destination; with a tag the worker also
                // fills a source buffer of that size.
                let pages = budget::mapping_bound(len);
                self.reserve_memory(
                    &format!("a copy of {len:#x}"),
                    if tagged {
                        pages.saturating_mul(2)
                    } else {
                        pages
                    },
                )
            }
            Planned::Fork => {
                let max = self.limits.procs();
                if (self.procs.len() as u64) < max {
                    return Ok(());
                }
                Err(BackendError::Other(format!(
                    "process budget exceeded: the scenario has {} processes alive and the live \
                     process budget is {max} ({}); exit some first, or raise it with --max-procs \
                     N (e.g. --max-procs {}) if this machine can take it; no process was created",
                    self.procs.len(),
                    if self.limits.max_procs.is_some() {
                        "set with --max-procs"
                    } else {
                        "the default"
                    },
                    max.saturating_mul(2),
                )))
            }
            Planned::Swap { bytes } => {
                if bytes == 0 {
                    return Ok(());
                }
                self.limits
                    .check_swap(bytes, &crate::swapfile::swap_dir())
                    .map_err(BackendError::Other)
            }
        }
    }

    /// Before a statement that may populate up to `bound` bytes: check it
    /// against the memory budget (crate::budget), measuring what the
    /// processes hold when the running sum of bounds would pass it.
    fn reserve_memory(&mut self, range: &str, bound: u64) -> Result<(), BackendError> {
        if bound == 0 {
            return Ok(());
        }
        let budget = self.mem_budget.bytes;
        if self
            .mem_known
            .saturating_add(self.mem_added)
            .saturating_add(bound)
            <= budget
        {
            self.mem_added += bound;
            return Ok(());
        }
        let mut held = self.held_memory(false);
        if bound <= budget {
            if held.saturating_add(bound) > budget {
                held = self.held_memory(true);
            }
            if held.saturating_add(bound) <= budget {
                self.mem_known = held;
                self.mem_added = bound;
                return Ok(());
            }
        }
        Err(BackendError::Other(format!(
            "memory budget exceeded: {range} may populate up to {} (counted in whole 2 MiB \
             blocks, the largest folio), and the scenario's processes hold {} already; the live \
             memory budget is {} ({}). Raise it with --max-memory SIZE (e.g. --max-memory {}) \
             if this machine has the memory to spare; nothing was populated",
            fmt_bytes(bound),
            fmt_bytes(held),
            fmt_bytes(budget),
            self.mem_budget.source,
            budget::fmt_size_arg(held.saturating_add(bound)),
        )))
    }

    /// Bytes of VM_LOCKED VMAs of `proc` in `[start, start + len)` (0
    /// without reading smaps when the process locks nothing).
    fn locked_in(&self, proc: &str, start: u64, len: u64) -> Result<u64, BackendError> {
        let pid = self.procs[self.proc_index(proc)?].pid;
        let st = kernel::read_status(pid).unwrap_or_default();
        if st.get("VmLck").copied().unwrap_or(0) == 0 {
            return Ok(0);
        }
        let end = start.saturating_add(len);
        let smaps = kernel::read_smaps(pid)
            .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/smaps: {e}")))?;
        Ok(smaps
            .iter()
            .filter(|v| v.vm_flags.iter().any(|f| f == "lo"))
            .map(|v| v.end.min(end).saturating_sub(v.start.max(start)))
            .sum())
    }

    /// Send one request to the worker of `proc` and read its answer.
    fn request(&mut self, proc: &str, req: Req) -> Result<Resp, BackendError> {
        let i = self.proc_index(proc)?;
        let fd = self.procs[i].chan.as_raw_fd();
        write_words(fd, &req)?;
        let mut resp: Resp = [0; 4];
        if !read_words(fd, &mut resp)? {
            return Err(BackendError::Other(format!(
                "worker process for '{proc}' (pid {}) died",
                self.procs[i].pid
            )));
        }
        Ok(resp)
    }

    /// Send `call` to the worker of `proc` (encoded by [`wire::encode`]).
    pub(crate) fn send(
        &mut self,
        proc: &str,
        call: &Call,
        at: Resolved,
    ) -> Result<Resp, BackendError> {
        let req = wire::encode(call, &at).ok_or_else(|| {
            BackendError::Other(format!("{} is not a worker request", call.name()))
        })?;
        self.request(proc, req)
    }

    /// Point the worker of `proc` at the uffd handle its next ioctl uses;
    /// EBADF for an unknown handle.
    fn uffd_prepare(&mut self, proc: &str, handle: &str) -> Result<(), BackendError> {
        let Some(&slot) = self.uffd_slots.get(handle) else {
            return Err(BackendError::Errno(Errno::EBADF));
        };
        let r = self.request(proc, [op::UFFD_SELECT, slot as u64, 0, 0, 0, 0, 0, 0])?;
        Self::unit(r).map(|_| ())
    }

    fn unit(resp: Resp) -> Result<u64, BackendError> {
        let st = resp[0] as i64;
        if st < 0 {
            Err(errno_err(st))
        } else {
            Ok(resp[1])
        }
    }

    /// Refuse ranges that touch the worker's own mappings.
    fn check_range(&self, what: &str, start: u64, len: u64) -> Result<(), BackendError> {
        // A range whose page-aligned end wraps past 2^64 is rejected by
        // the kernel before it looks at any VMA (PAGE_ALIGN overflow, `end
        // <= start`): let it through. The pages the bytes [start, start + len) lie in: for a page-aligned
        // start that is start + PAGE_ALIGN(len), as the syscalls take it;
        // a `fill` may start anywhere in a page (found by `ptlab fuzz
        // --seed 20261128` case 195: a fill ending at its mapping's end, next
        // to a harness VMA, was refused as touching it).
        let Some(end) = start
            .checked_add(len)
            .and_then(|e| e.checked_add(PAGE - 1))
            .map(|e| e & !(PAGE - 1))
        else {
            return Ok(());
        };
        let end = end.max(start.saturating_add(1));
        if let Some((s, e)) = intersects(&self.foreign, start & !(PAGE - 1), end) {
            return Err(BackendError::Other(format!(
                "{what} {start:#x}+{len:#x} touches {s:#x}-{e:#x}, a mapping of the live \
                 harness's own worker process (the worker program's, or ptlab's in a forked \
                 worker); the live backend cannot \
                 run it without destroying itself: use another address"
            )));
        }
        Ok(())
    }

    fn fault_err(resp: Resp) -> BackendError {
        if resp[2] == libc::SIGBUS as u64 {
            // The worker opens userfaultfd with UFFD_FEATURE_SIGBUS: a fault
            // that would go to userfaultfd raises SIGBUS instead of blocking.
            BackendError::Uffd {
                addr: resp[1] & !(PAGE - 1),
            }
        } else {
            BackendError::Segv { addr: resp[1] }
        }
    }

    /// Outcome of a uffd ioctl that reports a result through its struct
    /// (COPY, ZEROPAGE, MOVE): on failure the field (bytes done or
    /// `-errno`) comes with the errno; a field the kernel left untouched
    /// (still [`crate::wire::FIELD_UNTOUCHED`]) gives the errno alone.
    fn uffd_result(resp: Resp) -> Result<u64, BackendError> {
        let st = resp[0] as i64;
        if st >= 0 {
            return Ok(resp[1]);
        }
        match errno_err(st) {
            BackendError::Errno(errno) if resp[1] == crate::wire::FIELD_UNTOUCHED => {
                Err(BackendError::Errno(errno))
            }
            BackendError::Errno(errno) => Err(BackendError::ErrnoWithResult {
                errno,
                result: resp[1] as i64,
            }),
            other => Err(other),
        }
    }

    /// Whether any of the worker's own VMAs (not a guard ptlab placed, which
    /// is never faulted) lies in `[start, end)`.
    fn harness_vma_in(&self, start: u64, end: u64) -> bool {
        self.foreign.iter().any(|&(s, e)| {
            let (s, e) = (s.max(start), e.min(end));
            s < e && self.outside_guards(s, e)
        })
    }

    /// Before a non-fixed mmap: where would the kernel place it? A PROT_NONE
    /// probe with the same length and placement flags (nothing populated or
    /// locked, so no counter moves) lands where the real mapping will. If
    /// that shares a 2 MiB region with one of the worker's own VMAs (and so,
    /// once that one is faulted, its PTE table: a later mremap would
    /// allocate a table at the destination that the model has no reason to
    /// allocate, H12 in docs/divergences.md), fence the shared part of the
    /// region with a PROT_NONE guard and probe again, up to eight times.
    /// A fence is never put where the scenario mapped before (its
    /// territory), so it never shows in what is compared.
    fn fence_shared_regions(
        &mut self,
        proc: &str,
        hint: u64,
        len: u64,
        flags: MapFlags,
    ) -> Result<(), BackendError> {
        const PMD: u64 = 2 << 20;
        let probe_flags = flags - (MapFlags::POPULATE | MapFlags::LOCKED);
        for _ in 0..8 {
            let probe = Call::Mmap {
                addr: hint,
                len,
                prot: Prot::empty(),
                flags: probe_flags,
            };
            let r = self.send(proc, &probe, Resolved::default())?;
            // A probe that fails: the real mmap fails alike, and says why.
            let Ok(addr) = Self::unit(r) else {
                return Ok(());
            };
            let end = addr.saturating_add(len);
            let r = self.send(proc, &Call::Munmap { addr, len }, Resolved::default())?;
            Self::unit(r)?;
            let (lo, hi) = (addr & !(PMD - 1), end.next_multiple_of(PMD));
            let high = self.harness_vma_in(end, hi);
            if !high && !self.harness_vma_in(lo, addr) {
                return Ok(());
            }
            // Above: fence the region from its start up to the probe's end,
            // so the next probe lands below the region (or, if something
            // is mapped there, from the probe's start). Below: fence the
            // probe's part of the region, which the next probe then avoids.
            let top = (end - 1) & !(PMD - 1);
            let tries = if high {
                vec![(top, end), (addr.max(top), end)]
            } else {
                vec![(addr, end.min(lo + PMD))]
            };
            let mut fenced = None;
            for fence in tries {
                if intersects(&self.territory, fence.0, fence.1).is_some() {
                    continue;
                }
                let call = Call::Mmap {
                    addr: fence.0,
                    len: fence.1 - fence.0,
                    prot: Prot::empty(),
                    flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED_NOREPLACE,
                };
                let r = self.send(proc, &call, Resolved::default())?;
                if Self::unit(r).is_ok() {
                    fenced = Some(fence);
                    break;
                }
            }
            let Some(fence) = fenced else {
                return Ok(());
            };
            // VM_DONTDUMP, which no scenario sets: the fence never merges
            // with a scenario's PROT_NONE mapping (nor with another fence,
            // which would not matter).
            let dontdump = Call::Madvise {
                addr: fence.0,
                len: fence.1 - fence.0,
                advice: Advice::Other(16),
            };
            let r = self.send(proc, &dontdump, Resolved::default())?;
            Self::unit(r)?;
            self.notes.push(format!(
                "mmap of {len:#x} would share a 2 MiB region with a VMA of the harness's \
                 own at {addr:#x}; fenced {:#x}-{:#x} with PROT_NONE",
                fence.0, fence.1
            ));
            merge_into(&mut self.foreign, fence.0, fence.1);
            self.guards.push(fence);
            // The fence is the harness's own mapping: a scoped RLIMIT_AS /
            // RLIMIT_DATA computed before it would charge it to the
            // scenario (the next probe and the real mmap failing with
            // ENOMEM where the model maps).
            self.refresh_scoped_limits(proc)?;
        }
        Ok(())
    }

    /// After a non-fixed mmap landed at `addr`: if the kernel merged the new
    /// VMA with one of the worker's own VMAs, undo it, fence the gap with a
    /// PROT_NONE guard page and map again (up to four times).
    fn unmerge_foreign(
        &mut self,
        proc: &str,
        mut addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<u64, BackendError> {
        let pid = self.procs[self.proc_index(proc)?].pid;
        for _ in 0..4 {
            let end = addr + len;
            let smaps = kernel::read_smaps(pid).map_err(|e| BackendError::Other(e.to_string()))?;
            let mut below = None;
            let mut above = None;
            for v in smaps.iter().filter(|v| v.start < end && addr < v.end) {
                if v.start < addr && intersects(&self.foreign, v.start, addr).is_some() {
                    below = Some(addr);
                }
                if v.end > end && intersects(&self.foreign, end, v.end).is_some() {
                    above = Some(end);
                }
            }
            if below.is_none() && above.is_none() {
                return Ok(addr);
            }
            self.notes.push(format!(
                "mmap at {addr:#x}+{len:#x} merged with a VMA of the harness's own; re-placed \
                 behind a PROT_NONE guard page"
            ));
            self.incr.note_range(proc, addr, end);
            let r = self.send(proc, &Call::Munmap { addr, len }, Resolved::default())?;
            Self::unit(r)?;
            let guard = if above.is_some() { end - PAGE } else { addr };
            let fence = Call::Mmap {
                addr: guard,
                len: PAGE,
                prot: Prot::empty(),
                flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED_NOREPLACE,
            };
            let r = self.send(proc, &fence, Resolved::default())?;
            Self::unit(r)?;
            merge_into(&mut self.foreign, guard, guard + PAGE);
            self.guards.push((guard, guard + PAGE));
            let again = Call::Mmap {
                addr: 0,
                len,
                prot,
                flags,
            };
            let r = self.send(proc, &again, Resolved::default())?;
            addr = Self::unit(r)?;
        }
        Ok(addr)
    }

    // ----- observation ----------------------------------------------------

    /// A fence of [`LiveBackend::fence_shared_regions`]: PROT_NONE,
    /// VM_DONTDUMP, and within the fences placed. The territory is one set
    /// for every process, so a fence placed in one process can lie where
    /// another (forked before it) later mapped; it is the harness's, never
    /// the scenario's.
    fn is_fence(&self, v: &SmapsVma) -> bool {
        v.perms.starts_with("---")
            && v.vm_flags.iter().any(|f| f == "dd")
            && !self.outside_guards(v.start, v.end)
    }

    /// Whether some of `[start, end)` lies outside every guard and fence.
    fn outside_guards(&self, start: u64, end: u64) -> bool {
        let mut guards = self.guards.clone();
        guards.sort_unstable();
        let mut at = start;
        for (gs, ge) in guards
            .into_iter()
            .filter(|&(gs, ge)| gs < end && start < ge)
        {
            if gs > at {
                return true;
            }
            at = at.max(ge);
        }
        at < end
    }

    /// The territory-clipped VMAs of a process: (vma, start, end).
    fn clipped(&self, smaps: &[SmapsVma]) -> Vec<(usize, u64, u64)> {
        let mut out = Vec::new();
        for (i, v) in smaps.iter().enumerate() {
            if self.is_fence(v) {
                continue;
            }
            for &(s, e) in &self.territory {
                let (a, b) = (v.start.max(s), v.end.min(e));
                if a < b {
                    out.push((i, a, b));
                }
            }
        }
        out
    }

    /// Page states for `[start, end)` of process `proc` (pid `pid`), a run
    /// of not-present pages as one record.
    ///
    /// One PAGEMAP_SCAN walk finds the parts of the range whose entries are
    /// not none (present, zero page, swap entry, guard marker); pagemap,
    /// kpageflags, kpagecount and the tags are read for those parts only,
    /// at most [`OBSERVE_CHUNK_PAGES`] pages at a time. So a 127 TiB
    /// mapping with nothing populated costs a few page-table walks, not
    /// 34 billion pagemap words. Without the ioctl (before Linux 6.7), or
    /// with [`LiveBackend::set_dense_observation`], every page's pagemap
    /// word is read, chunk by chunk: the same facts, in time proportional
    /// to the range, memory still bounded.
    fn page_states(
        &mut self,
        proc: &str,
        pid: i32,
        f: &std::fs::File,
        start: u64,
        end: u64,
        mut pass: Option<&mut ProcPass<'_>>,
    ) -> Result<PageRuns, BackendError> {
        let err = |e: std::io::Error| {
            BackendError::Other(format!("cannot read /proc/{pid}/pagemap: {e}"))
        };
        let t0 = std::time::Instant::now();
        let populated = if self.dense_observation {
            None
        } else {
            self.reader.populated(f, start, end).map_err(err)?
        };
        self.timing.pagemap += t0.elapsed();
        let spans: Vec<(u64, u64)> = match &populated {
            Some(regions) => {
                let mut spans: Vec<(u64, u64)> = Vec::new();
                for &(s, e, _) in regions {
                    let (s, e) = (s.max(start), e.min(end));
                    if s >= e {
                        continue;
                    }
                    match spans.last_mut() {
                        Some(last) if last.1 == s => last.1 = e,
                        _ => spans.push((s, e)),
                    }
                }
                spans
            }
            None => vec![(start, end)],
        };
        // The spans, joined where they are at most MERGE_HOLE_PAGES apart
        // (a hole in between is read from pagemap as not-present words:
        // cheaper than another read, and the same records), cut into
        // pieces of at most a chunk.
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (s, e) in spans {
            match ranges.last_mut() {
                Some(last)
                    if populated.is_some()
                        && s - last.1 <= MERGE_HOLE_PAGES * PAGE
                        && e - last.0 <= OBSERVE_CHUNK_PAGES * PAGE =>
                {
                    last.1 = e
                }
                _ => {
                    let mut a = s;
                    while a < e {
                        let b = e.min(a.saturating_add(OBSERVE_CHUNK_PAGES * PAGE));
                        ranges.push((a, b));
                        a = b;
                    }
                }
            }
        }
        let mut out = PageRuns::new();
        let mut cur = start;
        let mut i = 0;
        while i < ranges.len() {
            // One chunk: ranges of at most OBSERVE_CHUNK_PAGES pages in all,
            // whose frames and tags are read together.
            let mut j = i;
            let mut pages = 0;
            while j < ranges.len() {
                let n = (ranges[j].1 - ranges[j].0) / PAGE;
                if j > i && pages + n > OBSERVE_CHUNK_PAGES {
                    break;
                }
                pages += n;
                j += 1;
            }
            let (a, b) = (ranges[i].0, ranges[j - 1].1);
            // PAGEMAP_SCAN categories of this chunk (zero page, PMD
            // mapping): from the walk above, or (dense) a walk of it.
            let dense;
            let regions: &[(u64, u64, u64)] = match &populated {
                Some(r) => r,
                None => {
                    dense = self.reader.populated(f, a, b).map_err(err)?;
                    dense.as_deref().unwrap_or(&[])
                }
            };
            for p in self.chunk_states(proc, pid, f, &ranges[i..j], regions, pass.as_deref_mut())? {
                out.push_none(cur, p.addr);
                cur = p.addr + PAGE;
                out.push_run(p);
            }
            cur = cur.max(b);
            i = j;
        }
        out.push_none(cur, end);
        Ok(out)
    }

    /// Page states for the pages of `ranges` (sorted, disjoint, at most a
    /// chunk in all), one record per page in address order, read from the
    /// open pagemap `f`; `regions` are PAGEMAP_SCAN categories covering (at
    /// least) the present pages of the ranges.
    fn chunk_states(
        &mut self,
        proc: &str,
        pid: i32,
        f: &std::fs::File,
        ranges: &[(u64, u64)],
        regions: &[(u64, u64, u64)],
        mut pass: Option<&mut ProcPass<'_>>,
    ) -> Result<Vec<PageObs>, BackendError> {
        let t0 = std::time::Instant::now();
        let mut raw: Vec<(u64, kernel::RawPage)> = Vec::new();
        for &(start, end) in ranges {
            // Only the regions that overlap (the list is sorted).
            let first = regions.partition_point(|r| r.1 <= start);
            let last = regions.partition_point(|r| r.0 < end);
            let words = self
                .reader
                .raw_pages_in(f, start, end, &regions[first..last.max(first)])
                .map_err(|e| {
                    BackendError::Other(format!("cannot read /proc/{pid}/pagemap: {e}"))
                })?;
            raw.extend(
                words
                    .into_iter()
                    .enumerate()
                    .map(|(k, r)| (start + k as u64 * PAGE, r)),
            );
        }
        let caps = self.reader.caps;
        // The frames whose flags and counts are needed (a zero page is
        // known from PAGEMAP_SCAN already), read in one go: sorted, in
        // runs (kernel::Reader::frame_facts).
        let needs_frame = |r: &kernel::RawPage| {
            let pfn = r.pagemap & kernel::PM_PFN_MASK;
            r.pagemap & kernel::PM_PRESENT != 0
                && pfn != 0
                && !(caps.scan && r.scan & kernel::PAGE_IS_PFNZERO != 0)
        };
        // Pages whose previous record stands (crate::incremental): their
        // frames and tags are not read again.
        let reused: Vec<Option<CachedPage>> = match pass.as_deref_mut() {
            Some(p) => raw.iter().map(|(va, r)| p.reusable(*va, r)).collect(),
            None => vec![None; raw.len()],
        };
        let mut pfns: Vec<u64> = if caps.kpage {
            raw.iter()
                .zip(&reused)
                .filter(|((_, r), old)| old.is_none() && needs_frame(r))
                .map(|((_, r), _)| r.pagemap & kernel::PM_PFN_MASK)
                .collect()
        } else {
            Vec::new()
        };
        pfns.sort_unstable();
        pfns.dedup();
        let t1 = std::time::Instant::now();
        self.timing.pagemap += t1 - t0;
        let facts = self.reader.frame_facts(&pfns);
        self.timing.frames += t1.elapsed();
        let mut out = Vec::with_capacity(raw.len());
        // The facts of each page (for its record).
        let mut page_facts: Vec<Option<kernel::FrameFacts>> = vec![None; raw.len()];
        for (n, &(va, ref r)) in raw.iter().enumerate() {
            let pm = r.pagemap;
            if pm & kernel::PM_PRESENT == 0
                && pm & kernel::PM_SWAP != 0
                && pm & kernel::PM_GUARD_REGION == 0
            {
                // A swap entry (a guard marker also reads PM_SWAP, below): type in bits 0-4, offset in bits 5-54
                // (fs/proc/task_mmu.c pte_to_pagemap_entry(); needs
                // CAP_SYS_ADMIN, else both read 0).
                out.push(PageObs::page(
                    va,
                    PageState::Swapped {
                        ty: (pm & 31) as u8,
                        offset: (pm >> 5) & ((1 << 50) - 1),
                    },
                ));
                continue;
            }
            if pm & kernel::PM_PRESENT == 0 {
                // A guard marker reads PM_SWAP | PM_GUARD_REGION (checked
                // on 6.18.44: 0x440000000000009f).
                let state = if pm & kernel::PM_GUARD_REGION != 0 {
                    PageState::Guard
                } else {
                    PageState::NotPresent
                };
                out.push(PageObs::page(va, state));
                continue;
            }
            let pfn = pm & kernel::PM_PFN_MASK;
            // (order, index, anon-exclusive, kpagecount, flags of this page)
            let kp = if caps.kpage && needs_frame(r) {
                let f = match &reused[n] {
                    Some(old) => old.facts,
                    None => pfns.binary_search(&pfn).ok().and_then(|k| facts[k]),
                };
                page_facts[n] = f;
                f.map(|k| {
                    (
                        k.order,
                        k.index,
                        k.flags & kernel::KPF_ANON_EXCLUSIVE != 0,
                        k.count,
                        k.flags,
                    )
                })
            } else {
                None
            };
            let zero = if caps.scan {
                r.scan & kernel::PAGE_IS_PFNZERO != 0
            } else {
                kp.is_some_and(|k| k.4 & kernel::KPF_ZERO_PAGE != 0)
            };
            let huge = if caps.scan {
                r.scan & kernel::PAGE_IS_HUGE != 0
            } else {
                pm & kernel::PM_FILE != 0
            };
            if zero {
                let state = if huge || pm & kernel::PM_FILE != 0 {
                    PageState::HugeZero {
                        index: ((va >> 12) & 511) as u32,
                    }
                } else {
                    PageState::Zero
                };
                out.push(PageObs::page(va, state));
                continue;
            }
            let (order, index, ax, cnt, pfn_id) = match kp {
                Some((order, index, ax, cnt, _)) => (order, index, ax, cnt, pfn),
                // Unknown without root: a synthetic identity per page.
                None => (0, 0, false, 0, (1 << 60) | (va >> 12)),
            };
            out.push(PageObs::page(
                va,
                PageState::Anon(AnonPage {
                    pfn: pfn_id,
                    order,
                    index,
                    pmd_mapped: huge,
                    mmap_exclusive: pm & kernel::PM_MMAP_EXCLUSIVE != 0,
                    anon_exclusive: ax,
                    mapcount: cnt as u32,
                    tag: 0,
                }),
            ));
        }
        let t0 = std::time::Instant::now();
        // A tag known already: the page's own record, or (a page whose
        // frame moved here) the frame's record at its old address.
        let known: Vec<Option<(u64, bool)>> = reused
            .iter()
            .zip(&raw)
            .map(|(o, (va, r))| match o {
                Some(c) => c.tag,
                None => pass
                    .as_deref()
                    .and_then(|p| p.tag_of_frame(*va, r))
                    .map(|t| (t, true)),
            })
            .collect();
        let tags = self.fill_tags(proc, &mut out, &known)?;
        self.timing.tags += t0.elapsed();
        if let Some(p) = &mut pass {
            for (n, (&(va, ref r), obs)) in raw.iter().zip(&out).enumerate() {
                if r.pagemap & kernel::PM_PRESENT == 0 || r.pagemap & kernel::PM_PFN_MASK == 0 {
                    continue;
                }
                let anon = matches!(obs.state, PageState::Anon(_));
                let tag = tags[n];
                let facts = page_facts[n];
                let complete =
                    (!caps.kpage || !needs_frame(r) || facts.is_some()) && (!anon || tag.is_some());
                p.record(
                    CachedPage {
                        addr: va,
                        pagemap: r.pagemap,
                        scan: r.scan,
                        facts,
                        tag,
                        complete,
                    },
                    reused[n].is_some(),
                );
            }
        }
        Ok(out)
    }

    /// Load the tag of every present anon page of `pages` whose tag is not
    /// `known` already (`known[i]`: the tag of `pages[i]` and whether it
    /// could be loaded, from the previous observation): one run per stretch
    /// of consecutive such pages, all runs in few requests
    /// ([`LiveBackend::read_tag_runs`]). Returns each page's `(tag,
    /// loaded)` (`None` for a page that is not anon); a page whose tag
    /// cannot be loaded is recorded in `unknown_tags`.
    fn fill_tags(
        &mut self,
        proc: &str,
        pages: &mut [PageObs],
        known: &[Option<(u64, bool)>],
    ) -> Result<Vec<Option<(u64, bool)>>, BackendError> {
        let is_anon = |p: &PageObs| matches!(p.state, PageState::Anon(_));
        let wanted = |i: usize, pages: &[PageObs]| {
            is_anon(&pages[i]) && known.get(i).is_none_or(|k| k.is_none())
        };
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut i = 0;
        while i < pages.len() {
            if !wanted(i, pages) {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < pages.len() && wanted(j, pages) && pages[j].addr == pages[j - 1].addr + PAGE {
                j += 1;
            }
            runs.push((i, j));
            i = j;
        }
        let asks: Vec<(u64, u64)> = runs
            .iter()
            .map(|&(i, j)| (pages[i].addr, (j - i) as u64))
            .collect();
        let (answers, rest) = self.read_tag_runs(proc, &asks)?;
        let mut got: Vec<Option<(u64, bool)>> = pages
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if is_anon(p) {
                    known.get(i).copied().flatten()
                } else {
                    None
                }
            })
            .collect();
        let mut next = answers.into_iter();
        // Which page each answer is for.
        let mut answered: Vec<usize> = Vec::new();
        for &(i, j) in &runs {
            for (k, g) in got[i..j].iter_mut().enumerate() {
                *g = Some(next.next().unwrap_or((0, false)));
                answered.push(i + k);
            }
        }
        // Pages whose bytes 8..4096 are not all zero: as the worker
        // loaded them, or (a tag known already: same frame, contents kept)
        // as their frame's were at the previous observation.
        let mut loaded = vec![false; pages.len()];
        for &(i, j) in &runs {
            loaded[i..j].fill(true);
        }
        let mut rest_now: Vec<usize> = rest
            .iter()
            .filter_map(|&r| answered.get(r).copied())
            .collect();
        for (i, p) in pages.iter().enumerate() {
            if let (false, PageState::Anon(a), Some((_, true))) = (loaded[i], &p.state, got[i]) {
                if a.pfn != 0 && self.rest_prev_frames.contains(&a.pfn) {
                    rest_now.push(i);
                }
            }
        }
        if !rest_now.is_empty() {
            let m = self.rest_pages.entry(proc.to_string()).or_default();
            for i in rest_now {
                if let (PageState::Anon(a), Some((_, true))) = (&pages[i].state, got[i]) {
                    m.insert(pages[i].addr, a.pfn);
                }
            }
        }
        for (page, g) in pages.iter_mut().zip(&got) {
            let Some((tag, ok)) = *g else { continue };
            if let PageState::Anon(a) = &mut page.state {
                a.tag = tag;
            }
            if !ok {
                self.unknown_tags.insert((proc.to_string(), page.addr));
            }
        }
        Ok(got)
    }

    /// Tags of the pages of each run `(start, npages)`, concatenated in
    /// run order, each `(tag, loaded)` as [`LiveBackend::read_tags`] gives
    /// them for one run. The runs go to the worker [`wire::TAG_LIST_MAX`]
    /// at a time, each group as one `READ_TAG_LIST` request (one write of
    /// at most 16 KiB, far below the socket's buffer, so writing it never
    /// waits for the worker, which may wait for ptlab to read its answer),
    /// and the answer, one stream of tags and fault counts, is read back
    /// through one buffer. So a range of scattered single pages (every
    /// other page of uffd-move's from-space: thousands of runs) costs a
    /// few system calls on each side, not several per run.
    ///
    /// Also returns the indices (into the tags) of the pages whose bytes
    /// 8..4096 are not all zero (the worker's bitmap after each run).
    fn read_tag_runs(
        &mut self,
        proc: &str,
        runs: &[(u64, u64)],
    ) -> Result<TagAnswers, BackendError> {
        let idx = self.proc_index(proc)?;
        let fd = self.procs[idx].chan.as_raw_fd();
        let died = || BackendError::Other(format!("worker for '{proc}' died"));
        let total: u64 = runs.iter().map(|r| r.1).sum();
        let mut out: Vec<(u64, bool)> = Vec::with_capacity(total as usize);
        let mut rest: Vec<usize> = Vec::new();
        let mut answers = AnswerReader::new(fd);
        // (run index, where its tags start in `out`) of runs with a fault.
        let mut refault = Vec::new();
        let mut base = 0usize;
        for group in runs.chunks(wire::TAG_LIST_MAX) {
            let pages: u64 = group.iter().map(|r| r.1).sum();
            let mut req = Vec::with_capacity(8 + 2 * group.len());
            req.extend_from_slice(&[op::READ_TAG_LIST, group.len() as u64, pages, 0, 0, 0, 0, 0]);
            for &(start, n) in group {
                req.extend_from_slice(&[start, n]);
            }
            write_words(fd, &req)?;
            self.timing.tag_requests += 1;
            self.timing.tags_loaded += pages;
            let mut hdr: Resp = [0; 4];
            if !answers.words(&mut hdr)? {
                return Err(died());
            }
            let mut tags = Vec::new();
            for (k, &(_, n)) in group.iter().enumerate() {
                tags.resize(n as usize + 1, 0);
                if !answers.words(&mut tags)? {
                    return Err(died());
                }
                let faults = tags.pop().unwrap_or(0);
                if faults != 0 {
                    refault.push((base + k, out.len()));
                }
                let mut bits = vec![0u64; (n as usize).div_ceil(64)];
                if !answers.words(&mut bits)? {
                    return Err(died());
                }
                for (w, &b) in bits.iter().enumerate() {
                    let mut b = b;
                    while b != 0 {
                        rest.push(out.len() + w * 64 + b.trailing_zeros() as usize);
                        b &= b - 1;
                    }
                }
                out.extend(tags.iter().map(|&t| (t, true)));
            }
            base += group.len();
        }
        debug_assert!(answers.is_empty());
        // Some page of these runs is not readable (PROT_NONE, exec-only):
        // find which, one page at a time.
        for (k, at) in refault {
            let (start, n) = runs[k];
            let one = self.read_tags(proc, start, n, PAGE)?;
            out[at..at + n as usize].copy_from_slice(&one);
        }
        Ok((out, rest))
    }

    /// The 4096 bytes of the page at `page` of `proc`, which the caller
    /// knows is a present anonymous page (one READ_TAGS request of 512
    /// words); `None` for a word the worker could not load.
    pub fn present_page_bytes(
        &mut self,
        proc: &str,
        page: u64,
    ) -> Result<Vec<Option<u8>>, BackendError> {
        let words = self.read_tags(proc, page, PAGE / 8, 8)?;
        Ok(words
            .iter()
            .flat_map(|&(w, ok)| w.to_le_bytes().map(|b| ok.then_some(b)))
            .collect())
    }

    /// [`LiveBackend::present_page_bytes`] of each page of `pages` (in
    /// order), with one `READ_TAGS` request per run of consecutive pages
    /// (at most [`PAGE_BYTES_RUN`] pages): the worker makes the same loads
    /// in the same order as with a request per page, with fewer round
    /// trips. A page whose run could not be read is `None`. Also returns
    /// the number of requests.
    pub fn present_pages_bytes(
        &mut self,
        proc: &str,
        pages: &[u64],
    ) -> (Vec<Option<Vec<Option<u8>>>>, u64) {
        let mut out: Vec<Option<Vec<Option<u8>>>> = Vec::with_capacity(pages.len());
        let mut requests = 0;
        let mut i = 0;
        while i < pages.len() {
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + PAGE && j - i < PAGE_BYTES_RUN {
                j += 1;
            }
            requests += 1;
            match self.read_tags(proc, pages[i], (j - i) as u64 * (PAGE / 8), 8) {
                Ok(words) => {
                    for page in words.chunks(PAGE as usize / 8) {
                        out.push(Some(
                            page.iter()
                                .flat_map(|&(w, ok)| w.to_le_bytes().map(|b| ok.then_some(b)))
                                .collect(),
                        ));
                    }
                }
                Err(_) => out.extend((i..j).map(|_| None)),
            }
            i = j;
        }
        (out, requests)
    }

    fn read_tags(
        &mut self,
        proc: &str,
        start: u64,
        n: u64,
        stride: u64,
    ) -> Result<Vec<(u64, bool)>, BackendError> {
        let idx = self.proc_index(proc)?;
        let fd = self.procs[idx].chan.as_raw_fd();
        write_words(fd, &[op::READ_TAGS, start, n, stride, 0, 0, 0, 0])?;
        let mut hdr: Resp = [0; 4];
        let mut tags = vec![0u64; n as usize + 1];
        if !read_words(fd, &mut hdr)? || !read_words(fd, &mut tags)? {
            return Err(BackendError::Other(format!("worker for '{proc}' died")));
        }
        let faults = tags.pop().unwrap_or(0);
        if faults == 0 {
            return Ok(tags.into_iter().map(|t| (t, true)).collect());
        }
        // Some page is not readable (PROT_NONE, exec-only): find which.
        let mut out = Vec::with_capacity(n as usize);
        for k in 0..n {
            write_words(
                fd,
                &[op::READ_TAGS, start + k * stride, 1, stride, 0, 0, 0, 0],
            )?;
            let mut one = [0u64; 2];
            if !read_words(fd, &mut hdr)? || !read_words(fd, &mut one)? {
                return Err(BackendError::Other(format!("worker for '{proc}' died")));
            }
            out.push((one[0], one[1] == 0));
        }
        Ok(out)
    }

    /// Everything `proc` shows inside the territory.
    pub fn observe_live(&mut self, proc: &str) -> Result<Observation, BackendError> {
        self.observe_proc(proc, None)
    }

    /// Everything `proc` shows inside the territory; with `pass`, taking
    /// what it allows from the previous observation and recording this one.
    fn observe_proc(
        &mut self,
        proc: &str,
        pass: Option<&mut ProcPass<'_>>,
    ) -> Result<Observation, BackendError> {
        let idx = self.proc_index(proc)?;
        let pid = self.procs[idx].pid;
        // Its /proc files, kept open between observations; put back below
        // (the process list does not change while it is observed).
        let mut files = std::mem::take(&mut self.procs[idx].files);
        let r = self.observe_proc_with(proc, pid, &mut files, pass);
        if let Some(p) = self.procs.get_mut(idx).filter(|p| p.pid == pid) {
            p.files = files;
        }
        r
    }

    fn observe_proc_with(
        &mut self,
        proc: &str,
        pid: i32,
        files: &mut ProcFiles,
        mut pass: Option<&mut ProcPass<'_>>,
    ) -> Result<Observation, BackendError> {
        let t0 = std::time::Instant::now();
        let mut buf = std::mem::take(&mut self.text_buf);
        // smaps and VmLck: the previous read when no call since changed a
        // VMA (crate::incremental; Rss and AnonHugePages are then counted
        // from the pages, below).
        let kept = pass.as_deref().and_then(|p| p.vmas).cloned();
        let derive_rss = kept.is_some();
        let vmas = match kept {
            Some(v) => v,
            None => incremental::VmaRecord {
                smaps: files
                    .text(pid, "smaps", &mut buf, kernel::parse_smaps)
                    .map_err(|e| {
                        BackendError::Other(format!("cannot read /proc/{pid}/smaps: {e}"))
                    })?,
                // The harness never locks memory: VmLck is the scenario's.
                vm_lck_kb: files
                    .text(pid, "status", &mut buf, kernel::parse_status)
                    .map_err(|e| {
                        BackendError::Other(format!("cannot read /proc/{pid}/status: {e}"))
                    })?
                    .get("VmLck")
                    .copied()
                    .unwrap_or(0),
            },
        };
        self.unknown_tags.retain(|(p, _)| p != proc);
        self.rest_pages.remove(proc);
        let mut obs = Observation {
            process: proc.to_string(),
            vm_lck_kb: vmas.vm_lck_kb,
            ..Default::default()
        };
        // numa_maps is read every time, even when smaps is re-used: its
        // `mapmax` does not follow from the pages' mapcounts as the diff
        // observes them (after fork and a write that split a shared PMD
        // THP in the parent, the kernel prints no mapmax for the child
        // while its pages show mapcount 2: tests/scenarios/ff-s13).
        let numa_maps = files
            .text(pid, "numa_maps", &mut buf, kernel::parse_numa_maps)
            .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/numa_maps: {e}")))?;
        self.text_buf = buf;
        self.timing.smaps += t0.elapsed();
        let pagemap = files
            .pagemap
            .file(pid, "pagemap")
            .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/pagemap: {e}")))?;
        let smaps = &vmas.smaps;
        for (i, s, e) in self.clipped(smaps) {
            let v = &smaps[i];
            if let Some(p) = pass.as_deref_mut() {
                p.readable = v.perms.starts_with('r');
            }
            let pages = self.page_states(proc, pid, pagemap, s, e, pass.as_deref_mut())?;
            let whole = v.start == s && v.end == e;
            obs.numa_maps.push(match numa_maps.get(&s) {
                Some(n) if whole => n.clone(),
                // A VMA the harness clips: its line covers the harness's
                // part too; count the scenario's part from pagemap (one
                // node: every page on node 0).
                _ => numa_from_pages(s, &pages),
            });
            let (rss_kb, anon_huge_kb) = if whole && !derive_rss {
                (v.rss_kb, v.anon_huge_kb)
            } else {
                let anon: Vec<&AnonPage> = pages
                    .iter()
                    .filter_map(|p| match &p.state {
                        PageState::Anon(a) => Some(a),
                        _ => None,
                    })
                    .collect();
                (
                    anon.len() as u64 * 4,
                    anon.iter().filter(|a| a.pmd_mapped).count() as u64 * 4,
                )
            };
            obs.maps.push(MapsEntry {
                start: s,
                end: e,
                perms: v.perms.clone(),
                vm_flags: v.vm_flags.clone(),
                anon_huge_kb,
                rss_kb,
                // Of a VMA the harness clips (merged with one of its own
                // mappings) pagemap cannot tell LazyFree: 0.
                lazyfree_kb: if whole { v.lazyfree_kb } else { 0 },
            });
            obs.pages.extend(pages);
        }
        if let Some(p) = pass {
            p.vmas_out = Some(vmas);
        }
        let t0 = std::time::Instant::now();
        obs.stats = match &self.stats_once {
            // Within one observe_all: the counters are global, read once
            // for every process (the diff compares one process's copy).
            Some(Some(m)) => m.clone(),
            Some(None) => {
                let m = self.stats();
                self.stats_once = Some(Some(m.clone()));
                m
            }
            None => self.stats(),
        };
        self.timing.counters += t0.elapsed();
        Ok(obs)
    }

    /// THP and NUMA-balancing counters since the backend started (of a
    /// run that narrows its reads, a counter of an order not read gives
    /// its value at its last read: [`LiveBackend::set_narrow_counters`]).
    pub fn stats(&mut self) -> BTreeMap<String, i64> {
        let mut c = self.thp_counters.borrow_mut();
        if let Some(a) = &self.attribution {
            return c.to_map(&a.own);
        }
        let mut now = Vec::new();
        c.read_values(&mut now);
        self.stats_last.resize(now.len(), None);
        for (i, (v, last)) in now.iter_mut().zip(&mut self.stats_last).enumerate() {
            if v.is_some() {
                *last = *v;
            } else if c.order_skipped(i) {
                *v = *last;
            }
        }
        for (v, base) in now.iter_mut().zip(&self.stats_base) {
            if let Some(v) = v {
                *v -= base.unwrap_or(0);
            }
        }
        c.to_map(&now)
    }

    /// Read, from now on, only the THP counters the run's own statements
    /// can move: those of the orders [`crate::reach::CounterReach`] says
    /// a folio of the run's processes may have had (before each statement,
    /// those it may have once the statement is done:
    /// [`crate::reach::CounterReach::orders_after`]; after a failed knob
    /// write, which moves no counter, every order). A counter of another
    /// order reports its value at its last read, so its step moves are 0:
    /// what other processes did to it, which the diff counts as background
    /// and never as a divergence (crate::diff::counters_out_of_reach),
    /// goes unseen. When an order comes into reach its counters are read
    /// before the statement that brings it runs, and their moves since the
    /// last read (other processes', for the same reason) are taken into
    /// the base, so the first step that reads them reports only that
    /// step's moves. The run's base was read whole at start.
    pub fn set_narrow_counters(&mut self, on: bool) {
        self.narrow_counters = on;
        let orders = if on {
            self.reach.orders_reached()
        } else {
            kernel::ALL_COUNTER_ORDERS
        };
        self.read_counter_orders(orders);
    }

    /// Read the counters of `orders` from now on (more orders than before:
    /// see [`LiveBackend::set_narrow_counters`]).
    fn read_counter_orders(&mut self, orders: u16) {
        let added = orders & !self.counter_orders;
        self.counter_orders = orders;
        let mut c = self.thp_counters.borrow_mut();
        if added != 0 {
            if let Some(a) = self.attribution.as_mut() {
                // The read after the last statement lacks them: the next
                // statement reads its own before.
                a.last = None;
            } else {
                // Only the added orders: their moves since their last read
                // go into the base.
                let mut now = Vec::new();
                c.read_orders(added);
                c.read_values(&mut now);
                self.stats_last.resize(now.len(), None);
                self.stats_base.resize(now.len(), None);
                for ((v, last), base) in now
                    .iter()
                    .zip(&mut self.stats_last)
                    .zip(&mut self.stats_base)
                {
                    let Some(v) = *v else { continue };
                    if let (Some(l), Some(b)) = (*last, *base) {
                        *base = Some(b + (v - l));
                    }
                    *last = Some(v);
                }
            }
        }
        c.read_orders(orders);
    }

    fn exit_proc(&mut self, idx: usize) -> Result<(), BackendError> {
        let p = self.procs.remove(idx);
        // Its descriptors close; a handle no process holds is gone.
        if let Some(held) = self.uffd_fds.remove(&p.name) {
            for h in held {
                if !self.uffd_fds.values().any(|s| s.contains(&h)) {
                    self.uffd_slots.remove(&h);
                }
            }
        }
        let fd = p.chan.as_raw_fd();
        if let Some(req) = wire::encode(&Call::Exit, &Resolved::default()) {
            let _ = write_words(fd, &req);
        }
        // The channel reaches EOF when the worker's files are closed, which
        // do_exit() does after exit_mm(): its memory is gone by then.
        let mut sink = [0u64; 1];
        let done = read_words(fd, &mut sink);
        if !matches!(done, Ok(false)) {
            // SAFETY: killing our own worker.
            unsafe { libc::kill(p.pid, libc::SIGKILL) };
        }
        if p.direct {
            let mut st = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(p.pid, &mut st, 0) };
        }
        Ok(())
    }

    /// End every worker (children first) and restore the knobs. Also done
    /// on drop.
    pub fn shutdown(&mut self) -> Vec<String> {
        let t0 = std::time::Instant::now();
        // An exiting process frees its folios (nr_anon), and removing a
        // swap area frees the folios only its swap cache still holds:
        // nobody's step.
        let _gate = (self.attribution.is_some()
            && (!self.procs.is_empty() || self.knobs.has_swap_area()))
        .then(|| {
            let mut gen = COUNTER_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            *gen += 1;
            gen
        });
        while !self.procs.is_empty() {
            let last = self.procs.len() - 1;
            let _ = self.exit_proc(last);
        }
        let t1 = std::time::Instant::now();
        let failed = self.knobs.restore();
        self.end_timing.0 += t1 - t0;
        self.end_timing.1 += t1.elapsed();
        failed
    }

    /// Whether this run's swap area was one kept from an earlier run
    /// ([`crate::knobs::set_swap_retention`]).
    pub fn swap_reused(&self) -> bool {
        self.knobs.swap_reused()
    }

    /// The time [`Self::shutdown`] took: ending the workers, then putting
    /// back the knobs and removing the swap area.
    pub fn end_timing(&self) -> (Duration, Duration) {
        self.end_timing
    }
}

impl Drop for LiveBackend {
    fn drop(&mut self) {
        for p in self.shutdown() {
            eprintln!("ptlab: could not restore THP knob {p}");
        }
        std::mem::replace(self.thp_counters.get_mut(), kernel::ThpCounters::empty()).give_back();
    }
}

/// What [`LiveBackend::read_tag_runs`] answers: each page's `(tag,
/// loaded)`, and the indices of the pages whose bytes 8..4096 are not all
/// zero.
type TagAnswers = (Vec<(u64, bool)>, Vec<usize>);

/// Serialises the statements of the live runs of this process that
/// attribute the THP counters ([`LiveBackend::with_options`]), each with
/// the two counter reads around it. The value counts the holders, so a run
/// that finds it unchanged since its own last statement knows no other
/// run's statement came between, and re-uses its last read.
pub static COUNTER_LOCK: std::sync::Mutex<u64> = std::sync::Mutex::new(0);

/// The counters of one run's own statements.
#[derive(Debug)]
struct Attribution {
    /// Sum over this run's statements of what each counter did, by index
    /// ([`kernel::ThpCounters::keys`]; `None`: never read).
    own: kernel::CounterValues,
    /// The counters read after this run's last statement, and the
    /// [`COUNTER_LOCK`] count then.
    last: Option<(u64, kernel::CounterValues)>,
    /// The counters read before the statement that runs now (a buffer kept
    /// between statements).
    before: kernel::CounterValues,
    /// Statements run without the lock (they could move no counter).
    unlocked: u64,
    /// The allocation counters and their `nr_anon` gauges
    /// ([`crate::reach::alloc_counter_links`]).
    alloc_links: Vec<(usize, Option<usize>)>,
    /// What the counters did during the statement that runs now (a buffer).
    delta: Vec<i64>,
}

impl LiveBackend {
    /// Run `call` under [`COUNTER_LOCK`], adding what the counters did
    /// meanwhile to this run's own.
    fn call_attributed(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        // A statement that can move no compared counter needs neither the
        // lock nor the reads (crate::reach).
        let unlocked = match self.attribution.as_mut() {
            Some(a) if !self.reach.may_move(call) => {
                a.unlocked += 1;
                true
            }
            _ => false,
        };
        if unlocked {
            let r = self.call_unattributed(proc, call);
            self.wait_pending_writeback();
            return r;
        }
        let mut gen = COUNTER_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (last, mut before) = match self.attribution.as_mut() {
            Some(a) => (a.last.take(), std::mem::take(&mut a.before)),
            None => (None, Vec::new()),
        };
        let mut after = match last {
            // The read after this run's last statement is the read before
            // this one; the old buffer takes the next read.
            Some((g, v)) if g == *gen => std::mem::replace(&mut before, v),
            _ => {
                self.thp_counters.borrow_mut().read_values(&mut before);
                Vec::new()
            }
        };
        let r = self.call_unattributed(proc, call);
        self.thp_counters.borrow_mut().read_values(&mut after);
        *gen += 1;
        if let Some(a) = self.attribution.as_mut() {
            a.delta.clear();
            a.delta.extend(
                before
                    .iter()
                    .zip(&after)
                    .map(|(b, v)| v.map_or(0, |v| v - b.unwrap_or(v))),
            );
            // A statement that cannot allocate made none of the
            // allocations counted meanwhile (crate::reach::may_allocate).
            if !crate::reach::may_allocate(call) {
                crate::reach::remove_others_allocations(&mut a.delta, &a.alloc_links);
            }
            for ((own, v), d) in a.own.iter_mut().zip(&after).zip(&a.delta) {
                if v.is_some() {
                    *own = Some(own.unwrap_or(0) + d);
                }
            }
            a.last = Some((*gen, after));
            a.before = before;
        }
        drop(gen);
        self.wait_pending_writeback();
        r
    }

    /// Wait for the swap writeback an attributed `MADV_PAGEOUT` started.
    fn wait_pending_writeback(&mut self) {
        // The swap writeback a MADV_PAGEOUT started is waited for after the
        // counters are read and the mutex is free, so that the other job's
        // statements need not wait for the disk too: every counter of the
        // swap-out moved when it was submitted (Linux mm/page_io.c
        // swap_writepage_bdev_async() → count_swpout_vm_event() before
        // submit_bio()), and its completion (folio_end_writeback()) moves
        // none.
        if std::mem::take(&mut self.writeback_pending) {
            let path = crate::swapfile::swap_path(std::process::id());
            crate::swapfile::wait_writeback(&path, std::time::Duration::from_secs(2));
        }
    }

    /// The orders (bit `o`; `/proc/vmstat` counters are order 9's) whose
    /// THP counters this run's own statements may have moved so far
    /// ([`crate::reach::CounterReach::orders_reached`]).
    pub fn counter_orders_reached(&self) -> u16 {
        self.reach.orders_reached()
    }

    /// How many statements of an attributed run ran without
    /// [`COUNTER_LOCK`] (they could move no compared counter:
    /// [`crate::reach::CounterReach`]); 0 for a run alone.
    pub fn unlocked_statements(&self) -> u64 {
        self.attribution.as_ref().map_or(0, |a| a.unlocked)
    }
}

impl LiveBackend {
    /// One statement on the live kernel.
    fn call_unattributed(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        let none = Resolved::default();

        // What the call may change, before it runs (a call that fails may
        // still have changed something).
        self.incr.note(proc, call);
        match call {
            Call::Mmap {
                addr,
                len,
                prot,
                flags,
            } => {
                let (addr, len, prot, flags) = (*addr, *len, *prot, *flags);
                if flags.contains(MapFlags::FIXED) && !flags.contains(MapFlags::FIXED_NOREPLACE) {
                    self.check_range("mmap MAP_FIXED", addr, len)?;
                }
                self.check_budget(proc, call)?;
                self.refresh_scoped_limits(proc)?;
                let plen = page_len(len);
                if !flags.intersects(MapFlags::FIXED | MapFlags::FIXED_NOREPLACE) && plen > 0 {
                    self.fence_shared_regions(proc, addr, plen, flags)?;
                }
                let r = self.send(proc, call, none)?;
                let mut got = Self::unit(r)?;
                if !flags.intersects(MapFlags::FIXED | MapFlags::FIXED_NOREPLACE) {
                    got = self.unmerge_foreign(proc, got, plen, prot, flags)?;
                }
                self.incr.note_range(proc, got, got.saturating_add(plen));
                merge_into(&mut self.territory, got, got.saturating_add(plen));
                Ok(got)
            }
            Call::Munmap { addr, len } => {
                self.check_range("munmap", *addr, *len)?;
                let r = self.send(proc, call, none)?;
                Self::unit(r).map(|_| 0)
            }
            Call::Madvise { addr, len, advice } => {
                // MADV_HWPOISON / MADV_SOFT_OFFLINE would take a frame of
                // this machine out of service for good: refused.
                if matches!(advice.value(), 100 | 101) {
                    return Err(BackendError::Other(format!(
                        "madvise advice {} (MADV_HWPOISON/MADV_SOFT_OFFLINE) is refused by \
                         the live backend: it poisons or offlines a real page",
                        advice.value()
                    )));
                }
                self.check_range("madvise", *addr, *len)?;
                self.check_budget(proc, call)?;
                let r = self.send(proc, call, none)?;
                if *advice == Advice::PageOut {
                    // The model's writes to swap complete at once (an
                    // attributed statement waits after its counter read).
                    if self.attribution.is_some() {
                        self.writeback_pending = true;
                    } else {
                        let path = crate::swapfile::swap_path(std::process::id());
                        crate::swapfile::wait_writeback(&path, std::time::Duration::from_secs(2));
                    }
                }
                Self::unit(r).map(|_| 0)
            }
            Call::FillBytes { addr, len, .. } => {
                self.check_range("write", *addr, *len)?;
                self.check_budget(proc, call)?;
                let r = self.send(proc, call, none)?;
                if r[0] as i64 == ST_FAULT {
                    return Err(Self::fault_err(r));
                }
                Self::unit(r).map(|_| 0)
            }
            Call::Access {
                start, len, write, ..
            } => {
                let what = if *write { "write" } else { "read" };
                self.check_range(what, *start, *len)?;
                self.check_budget(proc, call)?;
                let r = self.send(proc, call, none)?;
                if r[0] as i64 == ST_FAULT {
                    return Err(Self::fault_err(r));
                }
                Self::unit(r).map(|_| 0)
            }
            Call::Mremap {
                addr,
                old_len,
                new_len,
                flags,
                new_addr,
            } => {
                let fixed = flags.contains(MremapFlags::FIXED).then_some(*new_addr);
                self.check_range("mremap", *addr, *old_len)?;
                if let Some(n) = fixed {
                    self.check_range("mremap target", n, *new_len)?;
                }
                self.check_budget(proc, call)?;
                self.refresh_scoped_limits(proc)?;
                let r = self.send(proc, call, none)?;
                // A FIXED move that fails may still have changed its
                // destination (unmapped it, or moved the first VMAs of a
                // multi-VMA move before a later one refused, e.g. a sealed
                // one): observe it either way.
                if let Some(n) = fixed {
                    merge_into(&mut self.territory, n, n.saturating_add(page_len(*new_len)));
                }
                let got = Self::unit(r)?;
                self.incr
                    .note_range(proc, got, got.saturating_add(page_len(*new_len)));
                merge_into(
                    &mut self.territory,
                    got,
                    got.saturating_add(page_len(*new_len)),
                );
                Ok(got)
            }
            Call::Mprotect { addr, len, .. } => {
                self.check_range("mprotect", *addr, *len)?;
                self.check_budget(proc, call)?;
                self.refresh_scoped_limits(proc)?;
                let r = self.send(proc, call, none)?;
                Self::unit(r).map(|_| 0)
            }
            Call::Mlock { .. } => {
                self.check_budget(proc, call)?;
                let r = self.send(proc, call, none)?;
                Self::unit(r).map(|_| 0)
            }
            Call::Munlock { .. } | Call::Mseal { .. } | Call::DropCapIpcLock => {
                let r = self.send(proc, call, none)?;
                Self::unit(r).map(|_| 0)
            }
            Call::PrctlThp(_) => {
                let r = self.send(proc, call, none)?;
                Self::unit(r)
            }
            Call::Fork { child } => {
                if self.procs.iter().any(|p| p.name == *child) {
                    return Err(BackendError::ProcessExists(child.to_string()));
                }
                let idx = self.proc_index(proc)?;
                self.check_budget(proc, call)?;
                let fd = self.procs[idx].chan.as_raw_fd();
                let req = wire::encode(call, &none).unwrap_or_default();
                write_words(fd, &req)?;
                let (resp, chan) = recv_with_fd(fd)?;
                if (resp[0] as i64) < 0 {
                    return Err(errno_err(resp[0] as i64));
                }
                let chan =
                    chan.ok_or_else(|| BackendError::Other("fork: no channel received".into()))?;
                // The child inherits the rlimits (and the worker's scoped copy).
                let (scenario_as, scenario_data) =
                    (self.procs[idx].scenario_as, self.procs[idx].scenario_data);
                self.procs.push(LiveProc {
                    name: child.to_string(),
                    pid: resp[1] as i32,
                    chan,
                    direct: false,
                    scenario_as,
                    scenario_data,
                    files: ProcFiles::default(),
                });
                if let Some(fds) = self.uffd_fds.get(proc).cloned() {
                    self.uffd_fds.insert(child.to_string(), fds);
                }
                Ok(0)
            }
            Call::Exit => {
                let idx = self.proc_index(proc)?;
                self.exit_proc(idx).map(|()| 0)
            }
            Call::Setrlimit { resource, bytes } => {
                let idx = self.proc_index(proc)?;
                let lim = (*bytes != ptlab_model::RLIM_INFINITY).then_some(*bytes);
                match resource {
                    Resource::Memlock => {}
                    Resource::As => self.procs[idx].scenario_as = lim,
                    Resource::Data => self.procs[idx].scenario_data = lim,
                }
                let r = self.send(proc, call, none)?;
                match resource {
                    Resource::Memlock => Self::unit(r)
                        .map(|_| 0)
                        .map_err(|e| hard_limit_error(e, *resource, *bytes)),
                    Resource::As | Resource::Data => Self::unit(r).map(|_| 0),
                }
            }
            Call::FillVmas { addr, headroom } => {
                let pid = self.procs[self.proc_index(proc)?].pid;
                let max = read_max_map_count()?;
                let now = read_map_count(pid)?;
                let want = max
                    .checked_sub(*headroom)
                    .and_then(|t| t.checked_sub(now))
                    .ok_or(BackendError::Errno(Errno::EINVAL))?;
                let span = want.saturating_mul(2 * PAGE);
                self.check_range("fill", *addr, span)?;
                let r = self.send(
                    proc,
                    call,
                    Resolved {
                        count: want,
                        ..none
                    },
                )?;
                // The VMAs mapped before a failure are the scenario's too.
                let done = r[1];
                if done > 0 {
                    merge_into(
                        &mut self.territory,
                        *addr,
                        addr.saturating_add(done.saturating_mul(2 * PAGE) - PAGE),
                    );
                }
                Self::unit(r)
            }
            Call::UffdCreate { handle, .. } => {
                self.proc_index(proc)?;
                if self.uffd_slots.contains_key(handle) {
                    return Err(BackendError::Errno(Errno::EBUSY));
                }
                // The lowest slot no open handle uses (a freed slot's
                // descriptors died with the processes that held them).
                let slot = (0..)
                    .find(|s| !self.uffd_slots.values().any(|v| v == s))
                    .unwrap_or(0);
                if slot >= crate::worker::UFFD_SLOTS {
                    return Err(BackendError::Other(format!(
                        "more than {} userfaultfd handles in one scenario",
                        crate::worker::UFFD_SLOTS
                    )));
                }
                let at = Resolved {
                    slot: slot as u64,
                    ..none
                };
                let r = self.send(proc, call, at)?;
                Self::unit(r)?;
                self.uffd_slots.insert(handle.clone(), slot);
                self.uffd_fds
                    .entry(proc.to_string())
                    .or_default()
                    .insert(handle.clone());
                Ok(0)
            }
            Call::UffdApi { handle, .. } => {
                self.uffd_prepare(proc, handle)?;
                let r = self.send(proc, call, none)?;
                Self::unit(r)
            }
            Call::UffdRegister {
                handle, addr, len, ..
            } => {
                self.check_range("uffd register", *addr, *len)?;
                self.uffd_prepare(proc, handle)?;
                let r = self.send(proc, call, none)?;
                Self::unit(r).map(|_| 0)
            }
            Call::UffdUnregister { handle, addr, len } => {
                self.check_range("uffd unregister", *addr, *len)?;
                self.uffd_prepare(proc, handle)?;
                let r = self.send(proc, call, none)?;
                Self::unit(r).map(|_| 0)
            }
            Call::UffdCopy {
                handle,
                dst,
                src,
                len,
                tag,
                ..
            } => {
                self.check_range("uffd copy", *dst, *len)?;
                self.check_budget(proc, call)?;
                self.uffd_prepare(proc, handle)?;
                if tag.is_none() {
                    self.check_range("uffd copy source", *src, *len)?;
                }
                let r = self.send(proc, call, none)?;
                Self::uffd_result(r)
            }
            Call::UffdZeropage {
                handle, dst, len, ..
            } => {
                self.check_range("uffd zeropage", *dst, *len)?;
                self.uffd_prepare(proc, handle)?;
                let r = self.send(proc, call, none)?;
                Self::uffd_result(r)
            }
            Call::UffdMove {
                handle,
                dst,
                src,
                len,
                ..
            } => {
                self.check_range("uffd move", *dst, *len)?;
                self.uffd_prepare(proc, handle)?;
                self.check_range("uffd move source", *src, *len)?;
                let r = self.send(proc, call, none)?;
                Self::uffd_result(r)
            }
            Call::SetThp { knob, mode } => {
                self.knobs.set(*knob, *mode).map_err(knob_error)?;
                Ok(0)
            }
            Call::SetSwap { bytes, kind } => {
                self.check_budget("main", call)?;
                // Swap PTEs left in any scenario process: VmSwap
                // (MM_SWAPENTS). A process whose status cannot be read
                // counts as having some.
                let pids: Vec<i32> = self.procs.iter().map(|p| p.pid).collect();
                let busy = || {
                    pids.iter().any(|&pid| {
                        kernel::read_status(pid)
                            .map(|s| s.get("VmSwap").copied().unwrap_or(0) > 0)
                            .unwrap_or(true)
                    })
                };
                self.knobs
                    .set_swap_unless(*bytes, *kind, busy)
                    .map_err(knob_error)?;
                Ok(0)
            }
            Call::SetUseZeroPage { on } => match knobs::use_zero_page() {
                Some(cur) if cur == *on => Ok(0),
                Some(cur) => Err(BackendError::Other(format!(
                    "the live backend writes only THP 'enabled' knobs; use_zero_page is {} on \
                     this machine and stays so",
                    u8::from(cur)
                ))),
                None => Err(BackendError::Other(
                    "cannot read transparent_hugepage/use_zero_page".into(),
                )),
            },
            // One fixed kernel: observable results are the same either way.
            Call::SetBefore { .. } | Call::SetAfter { .. } => Ok(0),
            // The machine has the memory it has: a scenario for a bigger
            // one stops here.
            Call::SetMemory { bytes } => crate::budget::check_machine_memory(*bytes)
                .map(|()| 0)
                .map_err(BackendError::Other),
            // The machine has the nodes it has: a scenario for more stops.
            Call::SetNodes { nodes } => crate::budget::check_machine_nodes(*nodes)
                .map(|()| 0)
                .map_err(BackendError::Other),
            // Every CPU of a one-node machine is on node 0: running there
            // is what the worker already does; another node cannot be had.
            Call::NumaRunOn { node } => crate::budget::check_machine_nodes(node + 1)
                .map(|()| 0)
                .map_err(BackendError::Other),
            Call::NumaScan { .. } => Err(BackendError::Other(crate::budget::numa_scan_refusal())),
        }
    }
}

impl Backend for LiveBackend {
    fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        if self.narrow_counters {
            let orders = self.counter_orders | self.reach.orders_after(call);
            if orders != self.counter_orders {
                self.read_counter_orders(orders);
            }
        }
        let r = if self.attribution.is_some() {
            self.call_attributed(proc, call)
        } else {
            self.call_unattributed(proc, call)
        };
        self.reach.note_done(call, r.is_ok());
        if self.narrow_counters && self.reach.orders_reached() & !self.counter_orders != 0 {
            // A failed knob write (the knobs are unknown now): it moved no
            // counter, so reading the orders it reached from now on misses
            // nothing of the run's own.
            self.read_counter_orders(self.counter_orders | self.reach.orders_reached());
        }
        r
    }

    fn observe(&mut self, proc: &str) -> Result<Observation, BackendError> {
        self.observe_live(proc)
    }

    fn observe_summary(&mut self, proc: &str) -> Result<Observation, BackendError> {
        self.observe_live(proc)
    }

    /// Present pages are read by the worker, 8 bytes at a time (one
    /// `READ_TAGS` request with a word stride per page); the zero pages
    /// read as zeros without a load; anything else is `None`.
    fn read_bytes(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
    ) -> Result<Vec<Option<u8>>, BackendError> {
        let mut out = Vec::with_capacity(len as usize);
        let end = addr.saturating_add(len);
        let mut at = addr;
        while at < end {
            let page = at & !(PAGE - 1);
            let stop = end.min(page.saturating_add(PAGE));
            let runs = self.observe_pages(proc, page, page.saturating_add(PAGE))?;
            let state = runs
                .records()
                .iter()
                .find(|r| r.addr <= page && page < r.end())
                .map(|r| r.state.clone());
            match state {
                Some(PageState::Anon(_)) => {
                    let w0 = at & !7;
                    let words = self.read_tags(proc, w0, (stop - w0).div_ceil(8), 8)?;
                    for a in at..stop {
                        let (w, ok) = words[((a - w0) / 8) as usize];
                        out.push(ok.then(|| w.to_le_bytes()[((a - w0) % 8) as usize]));
                    }
                }
                Some(PageState::Zero | PageState::HugeZero { .. }) => {
                    out.extend(std::iter::repeat_n(Some(0), (stop - at) as usize));
                }
                _ => out.extend(std::iter::repeat_n(None, (stop - at) as usize)),
            }
            if stop <= at {
                break;
            }
            at = stop;
        }
        Ok(out)
    }

    fn observe_pages(
        &mut self,
        proc: &str,
        start: u64,
        end: u64,
    ) -> Result<PageRuns, BackendError> {
        let pid = self.procs[self.proc_index(proc)?].pid;
        let smaps = kernel::read_smaps(pid)
            .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/smaps: {e}")))?;
        let mut out = PageRuns::new();
        let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap"))
            .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/pagemap: {e}")))?;
        for (_, s, e) in self.clipped(&smaps) {
            let (a, b) = (s.max(start & !(PAGE - 1)), e.min(end));
            if a < b {
                let b = (b + PAGE - 1) & !(PAGE - 1);
                out.extend(self.page_states(proc, pid, &pagemap, a, b, None)?);
            }
        }
        Ok(out)
    }

    fn check_invariants(&mut self) -> Result<(), Vec<String>> {
        Ok(())
    }

    fn before_statement(&mut self, _line: u32, _text: &str, _loops: &[(u32, u64)]) {}

    fn after_statement(&mut self) -> Result<(), Vec<String>> {
        Ok(())
    }

    /// The kernel's hardware events are not counted.
    fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
        None
    }
}

fn knob_error(e: KnobError) -> BackendError {
    match e {
        KnobError::Errno(e) => BackendError::Errno(e),
        other => BackendError::Other(other.to_string()),
    }
}

/// The worker could not set a soft limit above its hard limit (it lacks
/// CAP_SYS_RESOURCE to raise it): a limit of this machine, not a kernel
/// answer to compare — the model's hard limits are unlimited.
fn hard_limit_error(e: BackendError, resource: Resource, soft: u64) -> BackendError {
    match e {
        BackendError::Errno(Errno::EPERM) => {
            let mut rl = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit with a valid struct (ptlab's own limit,
            // which the worker inherited).
            unsafe { libc::getrlimit(resource.number() as _, &mut rl) };
            BackendError::Other(format!(
                "the live worker cannot set RLIMIT_{} to {soft} bytes: its hard limit is {} \
                 and it lacks CAP_SYS_RESOURCE to raise it (the model's hard limits are \
                 unlimited); use a smaller limit",
                resource.name().to_uppercase(),
                rl.rlim_max
            ))
        }
        e => e,
    }
}

/// `mm->map_count` of process `pid`: its `/proc/PID/maps` lines but
/// `[vsyscall]`, which is listed and is no VMA (the gate area).
fn read_map_count(pid: i32) -> Result<u64, BackendError> {
    Ok(std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| BackendError::Other(format!("cannot read /proc/{pid}/maps: {e}")))?
        .lines()
        .filter(|l| !l.ends_with("[vsyscall]"))
        .count() as u64)
}

/// `/proc/sys/vm/max_map_count`.
fn read_max_map_count() -> Result<u64, BackendError> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .map_err(|e| BackendError::Other(format!("cannot read /proc/sys/vm/max_map_count: {e}")))?
        .trim()
        .parse()
        .map_err(|e| BackendError::Other(format!("bad /proc/sys/vm/max_map_count: {e}")))
}

/// The numa_maps entry of `[start, …)` from its pages, on a machine whose
/// memory is all on node 0 (a clipped VMA; see [`LiveBackend::observe_live`]).
fn numa_from_pages(start: u64, pages: &[PageObs]) -> ptlab_model::NumaMapsEntry {
    let mut e = ptlab_model::NumaMapsEntry {
        start,
        policy: "default".into(),
        ..Default::default()
    };
    for p in pages {
        if let PageState::Anon(a) = &p.state {
            e.anon += 1;
            e.mapmax = e.mapmax.max(u64::from(a.mapcount));
        }
    }
    if e.anon > 0 {
        e.nodes.push((0, e.anon));
    }
    e
}
