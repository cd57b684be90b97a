//! THP `enabled` knobs: reading, writing, the restore journal and the lock.
//!
//! The only files ptlab ever writes under /sys are the THP `enabled` knobs:
//! `/sys/kernel/mm/transparent_hugepage/enabled` and
//! `/sys/kernel/mm/transparent_hugepage/hugepages-<N>kB/enabled`. Paths are
//! built here from a [`ThpKnob`], never taken from a scenario or a journal
//! (a journal entry naming any other path is ignored).
//!
//! Safety net, in order:
//! 1. Every live run takes an exclusive `flock` on the knob lock
//!    ([`ThpLock`]) for its whole life, so runs (and tests) never overlap.
//! 2. Before the first write of a knob, its original value goes into the
//!    journal file (written and fsynced), and into a static table the
//!    signal handler can read without allocating.
//! 3. The knobs are restored and the journal deleted when the session ends
//!    ([`KnobSession`]'s `Drop`, also during unwinding), from a panic hook
//!    (panics in the owning thread), and from SIGINT/SIGTERM handlers.
//!    The steps that change the journal, the knobs or the handlers' tables
//!    run as *critical sections*: a signal arriving during one is held until
//!    it ends, so a handler never sees a half-written journal (`.tmp` left
//!    behind) or a journal its tables do not know about (a stale journal
//!    left by a SIGINT before the first knob write).
//! 4. After a crash or SIGKILL the journal is left behind;
//!    [`restore_stale_journal`] (run at every ptlab start, and by
//!    `ptlab restore`) puts the values back once it holds the lock, since a
//!    journal whose owner no longer holds the lock is stale.

use ptlab_model::{Errno, ThpKnob, ThpMode};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Where the THP knobs live.
pub const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";

/// The sysfs file of `knob` on Linux 6.18 x86-64 (`None`: no such knob),
/// whether or not this machine has it.
pub fn knob_sysfs_path(knob: ThpKnob) -> Option<PathBuf> {
    match knob {
        ThpKnob::TopLevel => Some(PathBuf::from(format!("{THP_DIR}/enabled"))),
        ThpKnob::Size(order) if (2..=9).contains(&order) => Some(PathBuf::from(format!(
            "{THP_DIR}/hugepages-{}kB/enabled",
            4u64 << order
        ))),
        ThpKnob::Size(_) => None,
    }
}

/// The sysfs file of `knob`, if the kernel has it.
pub fn knob_path(knob: ThpKnob) -> Result<PathBuf, Errno> {
    let p = knob_sysfs_path(knob).ok_or(Errno::ENOENT)?;
    if p.exists() {
        Ok(p)
    } else {
        Err(Errno::ENOENT)
    }
}

/// Every knob path ptlab may write (used to validate journals).
pub fn allowed_paths() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from(format!("{THP_DIR}/enabled"))];
    for order in 2u8..=9 {
        v.push(PathBuf::from(format!(
            "{THP_DIR}/hugepages-{}kB/enabled",
            4u64 << order
        )));
    }
    v
}

/// The bracketed choice of a sysfs knob: `always [madvise] never` → `madvise`.
pub fn parse_choice(text: &str) -> Option<String> {
    let open = text.find('[')?;
    let close = text[open..].find(']')? + open;
    Some(text[open + 1..close].to_string())
}

/// Current value of a knob file.
pub fn read_knob(path: &Path) -> std::io::Result<String> {
    let text = fs::read_to_string(path)?;
    parse_choice(&text).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: no [selected] value in '{}'",
                path.display(),
                text.trim()
            ),
        )
    })
}

/// The current mode of `knob`.
pub fn current_mode(knob: ThpKnob) -> Result<ThpMode, Errno> {
    let p = knob_path(knob)?;
    let v = read_knob(&p).map_err(|_| Errno::EINVAL)?;
    ThpMode::from_name(&v).ok_or(Errno::EINVAL)
}

/// Every THP `enabled` knob this machine has (the top level and each
/// size), with its value now; `None` if one it has cannot be read
/// (crate::reach::CounterReach).
pub fn enabled_knobs() -> Option<Vec<(ThpKnob, ThpMode)>> {
    let mut v = Vec::new();
    for k in std::iter::once(ThpKnob::TopLevel).chain((2..=9).map(ThpKnob::Size)) {
        match current_mode(k) {
            Ok(m) => v.push((k, m)),
            Err(Errno::ENOENT) if k != ThpKnob::TopLevel => {}
            Err(_) => return None,
        }
    }
    Some(v)
}

/// Whether shmem (a `MAP_SHARED` anonymous mapping) may get large folios
/// on this machine: `shmem_enabled` other than `never`/`deny`, or a
/// size's `shmem_enabled` other than `never` (or `inherit` of those).
/// Linux: mm/shmem.c shmem_allowable_huge_orders(). ptlab never writes
/// these knobs. A knob that cannot be read counts as allowing.
pub fn shmem_may_be_large() -> bool {
    let top = match read_knob(Path::new(&format!("{THP_DIR}/shmem_enabled"))) {
        Ok(v) => v,
        // A kernel without THP has no shmem huge pages either.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(_) => return true,
    };
    let top_off = top == "never" || top == "deny";
    if !top_off {
        return true;
    }
    (2..=9u32).any(|order| {
        let p = format!("{THP_DIR}/hugepages-{}kB/shmem_enabled", 4u64 << order);
        match read_knob(Path::new(&p)) {
            Ok(v) => v != "never" && v != "inherit",
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
    })
}

/// `transparent_hugepage/use_zero_page` (read only: ptlab never writes it).
pub fn use_zero_page() -> Option<bool> {
    let t = fs::read_to_string(format!("{THP_DIR}/use_zero_page")).ok()?;
    Some(t.trim() == "1")
}

fn write_knob_raw(path: &Path, value: &str) -> std::io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

// ----- state directory, lock and journal paths ----------------------------

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Directory for the journal: `$PTLAB_STATE_DIR`, else `/var/lib/ptlab`
/// for root, else `$XDG_STATE_HOME/ptlab` or `~/.local/state/ptlab`.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PTLAB_STATE_DIR") {
        return PathBuf::from(d);
    }
    if is_root() {
        return PathBuf::from("/var/lib/ptlab");
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(d).join("ptlab");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".local/state/ptlab");
    }
    std::env::temp_dir().join("ptlab-state")
}

/// The restore journal's path.
pub fn journal_path() -> PathBuf {
    state_dir().join("thp-journal.json")
}

/// The knob lock's path: `$PTLAB_LOCK_FILE`, else `/run/ptlab/thp.lock` for
/// root, else `<tmp>/ptlab-thp.lock`.
pub fn lock_path() -> PathBuf {
    if let Some(p) = std::env::var_os("PTLAB_LOCK_FILE") {
        return PathBuf::from(p);
    }
    if is_root() {
        PathBuf::from("/run/ptlab/thp.lock")
    } else {
        std::env::temp_dir().join("ptlab-thp.lock")
    }
}

/// An exclusive `flock` on the knob lock, held until dropped.
///
/// If `PTLAB_LOCK_FD` names an inherited descriptor, the lock is taken on
/// that descriptor's open file description, which a parent process (a test)
/// already holds: the child then shares its lock instead of deadlocking.
#[derive(Debug)]
pub struct ThpLock {
    fd: OwnedFd,
}

impl ThpLock {
    fn open() -> std::io::Result<OwnedFd> {
        if let Some(n) = std::env::var("PTLAB_LOCK_FD")
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
        {
            // SAFETY: duplicating an inherited descriptor we were told about.
            let d = unsafe { libc::fcntl(n, libc::F_DUPFD_CLOEXEC, 3) };
            if d >= 0 {
                // SAFETY: d is a fresh descriptor we own.
                return Ok(unsafe { OwnedFd::from_raw_fd(d) });
            }
        }
        let p = lock_path();
        if let Some(dir) = p.parent() {
            let _ = fs::create_dir_all(dir);
        }
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&p)?;
        Ok(OwnedFd::from(f))
    }

    /// Block until the lock is ours.
    pub fn acquire() -> std::io::Result<ThpLock> {
        let fd = Self::open()?;
        loop {
            // SAFETY: flock on our descriptor.
            if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(ThpLock { fd });
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Take the lock if nobody holds it.
    pub fn try_acquire() -> std::io::Result<Option<ThpLock>> {
        let fd = Self::open()?;
        // SAFETY: flock on our descriptor.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            Ok(Some(ThpLock { fd }))
        } else {
            Ok(None)
        }
    }

    /// The raw descriptor (to hand to a child process with `PTLAB_LOCK_FD`).
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// A line on stderr; a closed stderr (`2>&1 | head -1`) is no reason to
/// panic or stop.
fn say(args: std::fmt::Arguments) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{args}");
}

/// Who holds the knob lock: the pid `/proc/locks` names for the lock
/// file's inode (the process that took the `flock`; a child sharing it
/// through `PTLAB_LOCK_FD` shows its parent), and its command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockHolder {
    pub pid: i32,
    /// `/proc/PID/cmdline` with spaces for NULs (empty if unreadable).
    pub command: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.command.is_empty() {
            write!(f, "pid {}", self.pid)
        } else {
            write!(f, "pid {} ({})", self.pid, self.command)
        }
    }
}

/// The holder of the knob lock, if `/proc/locks` shows one.
pub fn lock_holder() -> Option<LockHolder> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(lock_path()).ok()?;
    let (dev, ino) = (meta.dev(), meta.ino());
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let text = fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 1234 fd:00:5678 0 EOF"; waiters are
    // listed as "1: -> FLOCK ..." and skipped.
    let pid = text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") {
            return None;
        }
        let id: Vec<&str> = f.get(5)?.split(':').collect();
        let ok = id.len() == 3
            && u32::from_str_radix(id[0], 16).ok()? == maj
            && u32::from_str_radix(id[1], 16).ok()? == min
            && id[2].parse::<u64>().ok()? == ino;
        ok.then(|| f[4].parse::<i32>().ok()).flatten()
    })?;
    let command = fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .trim_end_matches('\0')
                .replace('\0', " ")
        })
        .unwrap_or_default();
    Some(LockHolder { pid, command })
}

/// Take the knob lock for `what` (e.g. `ptlab run --backend live`); if
/// another process holds it, say on stderr who (pid and command, from
/// `/proc/locks`) and that this one waits, again whenever the holder
/// changes, and how long it waited once it has the lock. Every live path
/// (run, diff, show, fuzz, bench, reproduce, restore) takes the lock here.
pub fn acquire_or_wait(what: &str) -> std::io::Result<ThpLock> {
    if let Some(l) = SHARED_LOCK.with(|c| c.borrow().clone()) {
        // A campaign holds the lock for this thread: the same open file
        // description, so the flock is already ours.
        return Ok(ThpLock {
            fd: l.fd.try_clone()?,
        });
    }
    if let Some(l) = ThpLock::try_acquire()? {
        return Ok(l);
    }
    let start = Instant::now();
    // The holder named last (None: "another process"); printed again only
    // for a new holder, not when /proc/locks briefly shows none.
    let mut told: Option<Option<i32>> = None;
    loop {
        if let Some(l) = ThpLock::try_acquire()? {
            say(format_args!(
                "ptlab: {what}: got the THP knob lock after {:.1} s",
                start.elapsed().as_secs_f64()
            ));
            restore_left_by_holder(what);
            return Ok(l);
        }
        let holder = lock_holder();
        let pid = holder.as_ref().map(|h| h.pid);
        let new_holder = match told {
            None => true,
            Some(last) => pid.is_some() && pid != last,
        };
        if new_holder {
            say(format_args!(
                "ptlab: {what}: waiting for the THP knob lock {}, held by {} (another live run \
                 or a live test: live runs never overlap); this one starts when that ends \
                 (Ctrl-C gives up)",
                lock_path().display(),
                holder.map_or_else(|| "another process".to_string(), |h| h.to_string())
            ));
            told = Some(pid);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// After waiting for the lock: a journal left now was left by the holder
/// we waited for, which died without restoring (SIGKILL). Restore it
/// before this process's session writes a journal of its own over it. The
/// start of every ptlab command restores a stale journal too, but one
/// that was waiting for the lock then found the journal in use; until
/// this rule, its first knob write replaced the dead holder's journal, and
/// what that named (a fuzz campaign's knobs and swap area) stayed changed.
fn restore_left_by_holder(what: &str) {
    if SESSION_ACTIVE.load(Ordering::SeqCst) {
        return;
    }
    let (path, tmp) = (journal_path(), journal_tmp_path());
    if !path.exists() && !tmp.exists() {
        return;
    }
    remove_stale_tmp(&tmp);
    match restore_journal_file(&path) {
        Ok(Some(rep)) => say(format_args!("ptlab: {what}: {rep}")),
        Ok(None) => {}
        Err(e) => say(format_args!(
            "ptlab: {what}: warning: cannot restore the journal the lock's last holder left: {e:#}"
        )),
    }
}

thread_local! {
    /// The lock a campaign (`ptlab fuzz`) holds for this thread's live runs.
    static SHARED_LOCK: std::cell::RefCell<Option<std::sync::Arc<ThpLock>>> =
        const { std::cell::RefCell::new(None) };
}

/// While the returned guard lives, live runs started in this thread use
/// `lock` (which the caller already holds) instead of taking the knob lock
/// themselves: a campaign takes it once and its worker threads share it,
/// while every other thread and process still waits for it. The caller
/// serialises what the lock protects among its threads (knob sessions are
/// one per process at a time: `ptlab fuzz` runs every case that writes a
/// knob or makes a swap file alone).
pub fn share_lock_in_this_thread(lock: std::sync::Arc<ThpLock>) -> SharedLockGuard {
    SHARED_LOCK.with(|c| *c.borrow_mut() = Some(lock));
    SharedLockGuard(std::marker::PhantomData)
}

/// Ends [`share_lock_in_this_thread`] when dropped (in the same thread).
pub struct SharedLockGuard(std::marker::PhantomData<*const ()>);

impl Drop for SharedLockGuard {
    fn drop(&mut self) {
        SHARED_LOCK.with(|c| *c.borrow_mut() = None);
    }
}

// ----- journal ------------------------------------------------------------

/// The journal file: original values of the knobs a run changed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Journal {
    /// The process that wrote it.
    pub pid: u32,
    /// Knob path → value before ptlab first wrote it.
    pub knobs: BTreeMap<String, String>,
    /// Swap files this run created (crate::swapfile): swapped off and
    /// deleted on restore. Journaled before the file is created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub swapfiles: Vec<String>,
}

/// Where the journal is written before it is renamed into place.
pub fn journal_tmp_path() -> PathBuf {
    journal_path().with_extension("json.tmp")
}

fn write_journal(j: &Journal) -> std::io::Result<()> {
    let path = journal_path();
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = journal_tmp_path();
    {
        let mut f = File::create(&tmp)?;
        f.write_all(serde_json::to_string_pretty(j)?.as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, &path)?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// What a restore did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Process that left the journal.
    pub owner_pid: u32,
    /// (path, value written back).
    pub restored: Vec<(String, String)>,
    /// Journal entries not restored, with the reason.
    pub skipped: Vec<(String, String)>,
}

impl std::fmt::Display for RestoreReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "restored {} THP knob(s) / swap file(s) from a stale journal left by pid {}",
            self.restored.len(),
            self.owner_pid
        )?;
        for (p, v) in &self.restored {
            write!(f, "\n  {p} = {v}")?;
        }
        for (p, why) in &self.skipped {
            write!(f, "\n  skipped {p}: {why}")?;
        }
        Ok(())
    }
}

fn apply_journal(j: &Journal) -> RestoreReport {
    let allowed = allowed_paths();
    let mut rep = RestoreReport {
        owner_pid: j.pid,
        ..Default::default()
    };
    for (path, value) in &j.knobs {
        let p = PathBuf::from(path);
        if !allowed.contains(&p) {
            rep.skipped
                .push((path.clone(), "not a THP enabled knob".to_string()));
            continue;
        }
        if ThpMode::from_name(value).is_none() {
            rep.skipped
                .push((path.clone(), format!("invalid value '{value}'")));
            continue;
        }
        match write_knob_raw(&p, value) {
            Ok(()) => rep.restored.push((path.clone(), value.clone())),
            Err(e) => rep.skipped.push((path.clone(), e.to_string())),
        }
    }
    for path in &j.swapfiles {
        match crate::swapfile::remove(Path::new(path)) {
            Ok(()) => rep
                .restored
                .push((path.clone(), "swapped off and deleted".to_string())),
            Err(e) => rep.skipped.push((path.clone(), e)),
        }
    }
    rep
}

/// Restore a journal left behind by a run that died (crash, SIGKILL).
///
/// Returns `Ok(None)` when there is no journal, or when another live run
/// holds the lock (the journal is then that run's, not stale).
pub fn restore_stale_journal() -> anyhow::Result<Option<RestoreReport>> {
    let path = journal_path();
    let tmp = journal_tmp_path();
    if !path.exists() && !tmp.exists() {
        return Ok(None);
    }
    let Some(_lock) = ThpLock::try_acquire()? else {
        return Ok(None);
    };
    // SESSION_ACTIVE: our own process's live session (sharing an inherited
    // lock) owns the journal: not stale.
    if SESSION_ACTIVE.load(Ordering::SeqCst) {
        return Ok(None);
    }
    remove_stale_tmp(&tmp);
    restore_journal_file(&path)
}

/// A `.tmp` journal whose writer died (SIGKILL) before renaming it: what it
/// records never reached a knob (the knob is written after the rename), so
/// it is only deleted.
fn remove_stale_tmp(tmp: &Path) {
    if let Err(e) = fs::remove_file(tmp) {
        if e.kind() != std::io::ErrorKind::NotFound {
            say(format_args!(
                "ptlab: warning: cannot remove {}: {e}",
                tmp.display()
            ));
        }
    }
}

fn restore_journal_file(path: &Path) -> anyhow::Result<Option<RestoreReport>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let j: Journal = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: corrupt journal: {e}", path.display()))?;
    let rep = apply_journal(&j);
    if rep
        .skipped
        .iter()
        .all(|(_, why)| why == "not a THP enabled knob")
    {
        fs::remove_file(path)?;
    }
    Ok(Some(rep))
}

/// `ptlab restore`: take the lock (waiting for a running session to end)
/// and restore any journal.
pub fn restore_now() -> anyhow::Result<Option<RestoreReport>> {
    let path = journal_path();
    let tmp = journal_tmp_path();
    if !path.exists() && !tmp.exists() {
        return Ok(None);
    }
    let _lock = acquire_or_wait("restore").map_err(|e| {
        anyhow::anyhow!(
            "cannot take the THP knob lock {}: {e}",
            lock_path().display()
        )
    })?;
    remove_stale_tmp(&tmp);
    restore_journal_file(&path)
}

// ----- emergency table for signal handlers and panics ---------------------

const SLOTS: usize = 12;
const PATH_MAX: usize = 96;
const VAL_MAX: usize = 16;

struct Slot {
    used: AtomicBool,
    path: std::cell::UnsafeCell<[u8; PATH_MAX]>,
    value: std::cell::UnsafeCell<[u8; VAL_MAX]>,
    value_len: AtomicUsize,
}

// SAFETY: a slot's buffers are written only while `used` is false by the
// single session owner (serialised by the knob lock), and read only after
// observing `used` true.
unsafe impl Sync for Slot {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    used: AtomicBool::new(false),
    path: std::cell::UnsafeCell::new([0; PATH_MAX]),
    value: std::cell::UnsafeCell::new([0; VAL_MAX]),
    value_len: AtomicUsize::new(0),
};
static TABLE: [Slot; SLOTS] = [EMPTY_SLOT; SLOTS];
static JOURNAL_CPATH: Slot = EMPTY_SLOT;
/// The swap file this run created (swapoff + unlink in emergencies).
static SWAP_CPATH: Slot = EMPTY_SLOT;
static JOURNAL_TMP_CPATH: Slot = EMPTY_SLOT;
static SESSION_ACTIVE: AtomicBool = AtomicBool::new(false);
static HANDLERS: Once = Once::new();

/// Signal state: no critical section, one running, or a handler restoring
/// (the process is about to die of the signal).
const IDLE: u8 = 0;
const CRITICAL: u8 = 1;
const DYING: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// A SIGINT/SIGTERM/SIGHUP that arrived during a critical section.
static PENDING: AtomicI32 = AtomicI32::new(0);

/// Restore everything the tables describe and die of `sig`.
fn restore_and_die(sig: libc::c_int) -> ! {
    emergency_restore();
    // SAFETY: reset to the default action, unblock and re-raise, so the
    // process dies of the signal as it would have.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
        // Another thread is restoring (DYING): wait to die with it.
        loop {
            libc::pause();
        }
    }
}

/// Another thread is restoring and the process is about to die: never
/// return to code that could change a knob or the journal.
fn wait_for_death() -> ! {
    loop {
        // SAFETY: pause(2) only waits.
        unsafe { libc::pause() };
    }
}

/// A section during which the journal, the knobs and the handler tables
/// change together: SIGINT/SIGTERM/SIGHUP arriving meanwhile (on any
/// thread) are held until it ends, then restore and kill the process.
struct Critical;

impl Critical {
    fn enter() -> Critical {
        loop {
            match STATE.compare_exchange(IDLE, CRITICAL, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Critical,
                // Another thread's section (sessions are serialised by the
                // knob lock, so only briefly, if ever): wait for its end.
                Err(CRITICAL) => std::thread::sleep(Duration::from_millis(1)),
                // A handler is restoring: the process is about to die.
                Err(_) => wait_for_death(),
            }
        }
    }
}

impl Drop for Critical {
    fn drop(&mut self) {
        STATE.store(IDLE, Ordering::SeqCst);
        let sig = PENDING.load(Ordering::SeqCst);
        if sig != 0 {
            if STATE
                .compare_exchange(IDLE, DYING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                restore_and_die(sig);
            }
            wait_for_death();
        }
    }
}

thread_local! {
    static OWNS_SESSION: Cell<bool> = const { Cell::new(false) };
}

fn fill(slot: &Slot, path: &[u8], value: &[u8]) -> bool {
    if path.len() >= PATH_MAX || value.len() > VAL_MAX {
        return false;
    }
    // SAFETY: see `impl Sync for Slot`.
    unsafe {
        let p = &mut *slot.path.get();
        p.fill(0);
        p[..path.len()].copy_from_slice(path);
        let v = &mut *slot.value.get();
        v.fill(0);
        v[..value.len()].copy_from_slice(value);
    }
    slot.value_len.store(value.len(), Ordering::SeqCst);
    slot.used.store(true, Ordering::SeqCst);
    true
}

/// Record the loop device of this run's swap area for the signal handlers
/// (the slot's value, NUL-terminated; the caller is in a critical
/// section, and the slot is in use).
fn set_swap_device(dev: &Path) {
    let b = dev.as_os_str().as_encoded_bytes();
    if b.len() + 1 > VAL_MAX {
        return;
    }
    // SAFETY: written only by the session owner inside a critical section,
    // so no handler reads it meanwhile.
    unsafe {
        let v = &mut *SWAP_CPATH.value.get();
        v.fill(0);
        v[..b.len()].copy_from_slice(b);
    }
    SWAP_CPATH.value_len.store(b.len(), Ordering::SeqCst);
}

/// Async-signal-safe: write back every recorded original value and unlink
/// the journal. Uses only open/write/close/unlink on static buffers.
fn emergency_restore() {
    for slot in TABLE.iter() {
        if !slot.used.swap(false, Ordering::SeqCst) {
            continue;
        }
        // SAFETY: NUL-terminated path in a static buffer; raw syscalls.
        unsafe {
            let fd = libc::open((*slot.path.get()).as_ptr().cast(), libc::O_WRONLY);
            if fd >= 0 {
                let n = slot.value_len.load(Ordering::SeqCst);
                libc::write(fd, (*slot.value.get()).as_ptr().cast(), n);
                libc::close(fd);
            }
        }
    }
    if SWAP_CPATH.used.swap(false, Ordering::SeqCst) {
        // SAFETY: NUL-terminated static paths; swapoff(2) and unlink(2) are
        // plain syscalls. A block-device swap area is the loop device named
        // in the slot's value (it detaches itself once released: autoclear).
        unsafe {
            if SWAP_CPATH.value_len.load(Ordering::SeqCst) > 0 {
                libc::swapoff((*SWAP_CPATH.value.get()).as_ptr().cast());
            }
            let p = (*SWAP_CPATH.path.get()).as_ptr().cast();
            libc::swapoff(p);
            libc::unlink(p);
        }
    }
    // The temporary file first: a rename racing with us then either fails
    // (no .tmp) or has happened (and the journal goes next).
    if JOURNAL_TMP_CPATH.used.swap(false, Ordering::SeqCst) {
        // SAFETY: NUL-terminated static path.
        unsafe {
            libc::unlink((*JOURNAL_TMP_CPATH.path.get()).as_ptr().cast());
        }
    }
    if JOURNAL_CPATH.used.swap(false, Ordering::SeqCst) {
        // SAFETY: NUL-terminated static path.
        unsafe {
            libc::unlink((*JOURNAL_CPATH.path.get()).as_ptr().cast());
        }
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Recorded first, so a critical section ending right now sees it.
    PENDING.store(sig, Ordering::SeqCst);
    match STATE.compare_exchange(IDLE, DYING, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => restore_and_die(sig),
        // A critical section runs (in this thread or another): it restores
        // and re-raises when it ends.
        Err(CRITICAL) => {}
        // Already restoring (another thread, or this one: a second signal
        // during the first's handler): that restore re-raises.
        Err(_) => {}
    }
}

/// Point the handler's static paths at the journal and its temporary file
/// (before either exists, so no moment has a journal the handler would not
/// delete).
fn arm_journal_paths() {
    for (slot, p) in [
        (&JOURNAL_CPATH, journal_path()),
        (&JOURNAL_TMP_CPATH, journal_tmp_path()),
    ] {
        if slot.used.load(Ordering::SeqCst) {
            continue;
        }
        let mut b = p.as_os_str().as_encoded_bytes().to_vec();
        b.push(0);
        fill(slot, &b, b"");
    }
}

/// Whether `sig` is ignored (SIG_IGN) in this process now.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: sigaction(2) with a null new action only reads the current one.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

fn install_handlers() {
    HANDLERS.call_once(|| {
        // A signal ignored when ptlab started stays ignored, as the shell
        // and `nohup` asked (a background job of a non-interactive shell
        // ignores SIGINT; nohup ignores SIGHUP): catching it would make
        // such a run die of a signal meant for someone else, and only once
        // a knob had been written.
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            if !ignored(sig) {
                // SAFETY: installing a plain handler.
                unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
            }
        }
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if OWNS_SESSION.with(|c| c.get()) {
                emergency_restore();
            }
            prev(info);
        }));
    });
}

/// The journal of the covering session of this process, if one is open
/// ([`KnobSession::covering_all`]).
static COVER: std::sync::Mutex<Option<Journal>> = std::sync::Mutex::new(None);

/// A swap area kept active between live runs under a covering session
/// ([`set_swap_retention`]): its size and kind. It is this process's swap
/// file ([`crate::swapfile::swap_path`]), listed in the cover's journal and
/// armed in the signal handlers' table, and empty (`/proc/swaps` Used 0)
/// when it was kept.
static RETAINED: std::sync::Mutex<Option<(u64, crate::swapfile::SwapKind)>> =
    std::sync::Mutex::new(None);

/// Whether a covered session that ends with an empty swap area keeps it
/// for the next run ([`set_swap_retention`]).
static RETAIN: AtomicBool = AtomicBool::new(false);

/// Let the live runs of this process under a covering session keep an
/// empty swap area when they end, for the next run whose `swap` line asks
/// for the same size and kind (`ptlab fuzz`: a swap area made once for
/// consecutive swap cases instead of a swapon and a swapoff each). Off:
/// the kept area, if any, is swapped off and deleted now.
///
/// Whoever turns it on must make sure that a kept area is active only
/// while a run that would make the same area anyway runs, before its
/// `swap` line and after it ([`drop_retained_swap`] otherwise): an active
/// swap area changes what MADV_PAGEOUT and reclaim do.
pub fn set_swap_retention(on: bool) {
    RETAIN.store(on, Ordering::SeqCst);
    if !on {
        drop_retained_swap();
    }
}

/// The kept swap area's size and kind, if there is one.
pub fn retained_swap() -> Option<(u64, crate::swapfile::SwapKind)> {
    *RETAINED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Swap off and delete the kept swap area, if there is one, unless it is
/// `keep` (the size and kind the next run's `swap` line asks for).
pub fn drop_retained_swap_unless(keep: Option<(u64, crate::swapfile::SwapKind)>) {
    let mut r = RETAINED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(area) = *r else {
        return;
    };
    if keep == Some(area) {
        return;
    }
    let path = crate::swapfile::swap_path(std::process::id());
    let key = path.display().to_string();
    let _critical = Critical::enter();
    SWAP_CPATH.used.store(false, Ordering::SeqCst);
    if let Err(e) = crate::swapfile::remove(&path) {
        eprintln!("ptlab: could not remove the kept swap area: {e}");
    }
    *r = None;
    let mut c = COVER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = c.as_mut() {
        c.swapfiles.retain(|p| p != &key);
        let _ = write_journal(c);
    }
}

/// [`drop_retained_swap_unless`] with nothing to keep.
pub fn drop_retained_swap() {
    drop_retained_swap_unless(None);
}

fn cover() -> Option<Journal> {
    COVER.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The knobs one live run changed, restored when dropped.
#[derive(Debug)]
pub struct KnobSession {
    journal: Journal,
    written: bool,
    /// A covering session was open when this one started: its journal
    /// file and the signal handlers' table already hold every knob's
    /// original value, so this one only remembers (in memory) what it
    /// replaced, and restores that.
    covered: bool,
    /// The size and kind of this session's swap area, while it has one.
    swap_area: Option<(u64, crate::swapfile::SwapKind)>,
    /// Its swap area was kept from an earlier run.
    swap_reused: bool,
}

impl Default for KnobSession {
    fn default() -> Self {
        Self::new()
    }
}

impl KnobSession {
    /// A session that has changed nothing yet. The caller must hold the
    /// [`ThpLock`] for as long as the session lives.
    pub fn new() -> KnobSession {
        KnobSession {
            journal: Journal {
                pid: std::process::id(),
                knobs: BTreeMap::new(),
                swapfiles: Vec::new(),
            },
            written: false,
            covered: cover().is_some(),
            swap_area: None,
            swap_reused: false,
        }
    }

    /// Whether this session's swap area was one kept from an earlier run
    /// ([`set_swap_retention`]).
    pub fn swap_reused(&self) -> bool {
        self.swap_reused
    }

    /// Whether this session has a swap area now (restoring it removes or
    /// keeps the area).
    pub fn has_swap_area(&self) -> bool {
        self.swap_area.is_some()
    }

    /// A session that journals every THP `enabled` knob's value now, in
    /// one journal write, and fills the signal handlers' table with them:
    /// while it is open, the sessions this process starts
    /// ([`KnobSession::new`]) write knobs without a journal write of their
    /// own (one `fsync` and `rename` per knob before) and restore, when
    /// they end, the values they replaced. For `ptlab fuzz`, whose cases
    /// each change up to nine knobs: the campaign opens one (holding the
    /// knob lock to its end), and what its cases leave behind on a crash is
    /// restored from its journal. Restoring it restores every knob.
    pub fn covering_all() -> Result<KnobSession, KnobError> {
        let mut s = KnobSession::new();
        if s.covered {
            return Err(KnobError::Errno(Errno::EBUSY));
        }
        install_handlers();
        let _critical = Critical::enter();
        let mut slots = TABLE.iter().filter(|t| !t.used.load(Ordering::SeqCst));
        for path in allowed_paths() {
            let Ok(current) = read_knob(&path) else {
                continue; // a size this machine does not have
            };
            let key = path.display().to_string();
            let mut pb = key.as_bytes().to_vec();
            pb.push(0);
            if let Some(slot) = slots.next() {
                fill(slot, &pb, current.as_bytes());
            }
            s.journal.knobs.insert(key, current);
        }
        s.written = true;
        if let Err(e) = s.commit_journal() {
            for slot in TABLE.iter() {
                slot.used.store(false, Ordering::SeqCst);
            }
            s.journal.knobs.clear();
            s.written = false;
            return Err(e);
        }
        *COVER.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.journal.clone());
        Ok(s)
    }

    /// Write the journal after the caller added an entry to it (inside a
    /// critical section), making this process the session owner. On
    /// failure the `.tmp` file goes, the journal paths are disarmed if this
    /// session never wrote a journal, and the caller removes its entry.
    fn commit_journal(&mut self) -> Result<(), KnobError> {
        OWNS_SESSION.with(|c| c.set(true));
        SESSION_ACTIVE.store(true, Ordering::SeqCst);
        arm_journal_paths();
        // A covered session journals only its swap files, beside the
        // cover's knobs (which hold the machine's original values).
        let file = match (self.covered, cover()) {
            (true, Some(mut c)) => {
                c.swapfiles.extend(self.journal.swapfiles.iter().cloned());
                c
            }
            _ => self.journal.clone(),
        };
        if let Err(e) = write_journal(&file) {
            let _ = fs::remove_file(journal_tmp_path());
            if !self.written {
                JOURNAL_CPATH.used.store(false, Ordering::SeqCst);
                JOURNAL_TMP_CPATH.used.store(false, Ordering::SeqCst);
            }
            return Err(KnobError::Io(journal_path(), e));
        }
        Ok(())
    }

    /// Set `knob` to `mode`. Writing the value a knob already has is a
    /// no-op (so unprivileged runs can "set" the machine's defaults).
    pub fn set(&mut self, knob: ThpKnob, mode: ThpMode) -> Result<(), KnobError> {
        if knob == ThpKnob::TopLevel && mode == ThpMode::Inherit {
            // sysfs enabled_store() accepts only always/madvise/never.
            return Err(KnobError::Errno(Errno::EINVAL));
        }
        let path = knob_path(knob).map_err(KnobError::Errno)?;
        let current = read_knob(&path).map_err(|e| KnobError::Io(path.clone(), e))?;
        if current == mode.name() {
            return Ok(());
        }
        let key = path.display().to_string();
        install_handlers();
        let _critical = Critical::enter();
        if self.covered && !self.journal.knobs.contains_key(&key) {
            // The cover's journal and table hold the original value.
            self.journal.knobs.insert(key.clone(), current.clone());
            self.written = true;
        } else if !self.journal.knobs.contains_key(&key) {
            self.journal.knobs.insert(key.clone(), current.clone());
            if let Err(e) = self.commit_journal() {
                self.journal.knobs.remove(&key);
                return Err(e);
            }
            let mut pb = key.as_bytes().to_vec();
            pb.push(0);
            let free = TABLE.iter().find(|s| !s.used.load(Ordering::SeqCst));
            if let Some(slot) = free {
                fill(slot, &pb, current.as_bytes());
            }
            self.written = true;
        }
        match write_knob_raw(&path, mode.name()) {
            Ok(()) => Ok(()),
            Err(e)
                if e.raw_os_error() == Some(libc::EACCES)
                    || e.raw_os_error() == Some(libc::EPERM) =>
            {
                Err(KnobError::NotPermitted(path))
            }
            Err(e) => match e.raw_os_error().and_then(Errno::from_code) {
                Some(errno) => Err(KnobError::Errno(errno)),
                None => Err(KnobError::Io(path, e)),
            },
        }
    }

    /// Create and enable a swap file of `bytes` (crate::swapfile), after
    /// journaling its path; `bytes == 0` disables and deletes it. A second
    /// size replaces the file, unless pages are swapped out to it (EBUSY,
    /// as the model answers). Errors carry swapon(2)'s errno.
    pub fn set_swap(
        &mut self,
        bytes: u64,
        kind: crate::swapfile::SwapKind,
    ) -> Result<(), KnobError> {
        let path = crate::swapfile::swap_path(std::process::id());
        self.set_swap_unless(bytes, kind, || {
            crate::swapfile::used_pages(&path).unwrap_or(0) > 0
        })
    }

    /// [`KnobSession::set_swap`], with the caller deciding whether pages
    /// are still swapped out to the area (`busy`: then EBUSY, as the model
    /// answers). The live backend asks whether any scenario process still
    /// has a swap PTE (`VmSwap`): slots that only the swap cache holds
    /// (`/proc/swaps` Used counts them) do not stop a swapoff, which drops
    /// them, as the model does not keep such slots.
    pub fn set_swap_unless(
        &mut self,
        bytes: u64,
        kind: crate::swapfile::SwapKind,
        busy: impl FnOnce() -> bool,
    ) -> Result<(), KnobError> {
        let path = crate::swapfile::swap_path(std::process::id());
        let key = path.display().to_string();
        if self.journal.swapfiles.contains(&key) {
            if busy() {
                return Err(KnobError::Errno(Errno::EBUSY));
            }
            let _critical = Critical::enter();
            SWAP_CPATH.used.store(false, Ordering::SeqCst);
            crate::swapfile::remove(&path)
                .map_err(|e| KnobError::Io(path.clone(), std::io::Error::other(e)))?;
            self.journal.swapfiles.retain(|p| p != &key);
            self.swap_area = None;
            let _ = write_journal(&self.journal);
        }
        // A kept area (an earlier run's, empty) of the size and kind asked
        // for becomes this session's; any other kept area goes first.
        if self.covered && bytes > 0 {
            let mut r = RETAINED.lock().unwrap_or_else(|e| e.into_inner());
            if *r == Some((bytes, kind)) && crate::swapfile::used_pages(&path) == Some(0) {
                let _critical = Critical::enter();
                *r = None;
                // The session's journal lists it from here on (the file on
                // disk keeps listing it beside the cover's knobs).
                if let Some(c) = COVER.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                    c.swapfiles.retain(|p| p != &key);
                }
                self.journal.swapfiles.push(key.clone());
                self.swap_area = Some((bytes, kind));
                self.swap_reused = true;
                self.written = true;
                return Ok(());
            }
        }
        drop_retained_swap();
        if bytes == 0 {
            return Ok(());
        }
        if !is_root() {
            return Err(KnobError::NotPermitted(path));
        }
        install_handlers();
        {
            let _critical = Critical::enter();
            self.journal.swapfiles.push(key.clone());
            if let Err(e) = self.commit_journal() {
                self.journal.swapfiles.retain(|p| p != &key);
                return Err(e);
            }
            let mut pb = key.as_bytes().to_vec();
            pb.push(0);
            fill(&SWAP_CPATH, &pb, b"");
            self.written = true;
        }
        // Outside the critical section (writing a large file takes time): a
        // signal now swaps off and deletes whatever exists of the file.
        let mut on_device = |dev: &Path| {
            let _critical = Critical::enter();
            set_swap_device(dev);
        };
        self.swap_area = Some((bytes, kind));
        self.swap_reused = false;
        crate::swapfile::create(&path, bytes, kind, &mut on_device).map_err(|e| {
            SWAP_CPATH.used.store(false, Ordering::SeqCst);
            match e.raw_os_error().and_then(Errno::from_code) {
                Some(errno) => KnobError::Errno(errno),
                None => KnobError::Io(path.clone(), e),
            }
        })
    }

    /// The value `knob` had before this session first changed it (`None`:
    /// the session has not changed it).
    pub fn original(&self, knob: ThpKnob) -> Option<ThpMode> {
        let key = knob_path(knob).ok()?.display().to_string();
        ThpMode::from_name(self.journal.knobs.get(&key)?)
    }

    /// Whether any knob was changed.
    pub fn changed(&self) -> bool {
        self.written
    }

    /// Put every changed knob back and delete the journal.
    pub fn restore(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.written {
            return problems;
        }
        if !self.covered && cover().is_some() {
            // The cover ends: a kept swap area goes with it (its own
            // critical section; they do not nest).
            RETAIN.store(false, Ordering::SeqCst);
            drop_retained_swap();
        }
        // A signal arriving from here on waits until everything is back
        // (then the process dies of it): a handler cutting in would delete
        // the journal with the knobs half restored.
        let _critical = Critical::enter();
        if self.covered {
            // An empty swap area may be kept for the next run
            // (set_swap_retention): it moves to the cover's journal and
            // stays armed in the handlers' table.
            let path = crate::swapfile::swap_path(std::process::id());
            let key = path.display().to_string();
            if let Some(area) = self.swap_area.take() {
                if RETAIN.load(Ordering::SeqCst)
                    && self.journal.swapfiles == [key.clone()]
                    && crate::swapfile::is_active(&path)
                    && crate::swapfile::used_pages(&path) == Some(0)
                {
                    self.journal.swapfiles.clear();
                    *RETAINED.lock().unwrap_or_else(|e| e.into_inner()) = Some(area);
                    let mut c = COVER.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(c) = c.as_mut() {
                        if !c.swapfiles.contains(&key) {
                            c.swapfiles.push(key);
                        }
                        let _ = write_journal(c);
                    }
                }
            }
            // Back to the values this session replaced; the cover's
            // journal (without this session's swap files) stays.
            if !self.journal.swapfiles.is_empty() {
                SWAP_CPATH.used.store(false, Ordering::SeqCst);
            }
            let rep = apply_journal(&self.journal);
            for (p, why) in rep.skipped {
                problems.push(format!("{p}: {why}"));
            }
            if !self.journal.swapfiles.is_empty() {
                if let Some(c) = cover() {
                    let _ = write_journal(&c);
                }
            }
            self.journal.knobs.clear();
            self.journal.swapfiles.clear();
            self.written = false;
            return problems;
        }
        for slot in TABLE.iter() {
            slot.used.store(false, Ordering::SeqCst);
        }
        SWAP_CPATH.used.store(false, Ordering::SeqCst);
        *COVER.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let rep = apply_journal(&self.journal);
        for (p, why) in rep.skipped {
            problems.push(format!("{p}: {why}"));
        }
        if problems.is_empty() {
            let _ = fs::remove_file(journal_path());
        }
        JOURNAL_CPATH.used.store(false, Ordering::SeqCst);
        JOURNAL_TMP_CPATH.used.store(false, Ordering::SeqCst);
        self.journal.knobs.clear();
        self.journal.swapfiles.clear();
        self.written = false;
        SESSION_ACTIVE.store(false, Ordering::SeqCst);
        OWNS_SESSION.with(|c| c.set(false));
        problems
    }
}

impl Drop for KnobSession {
    fn drop(&mut self) {
        for p in self.restore() {
            eprintln!("ptlab: could not restore THP knob {p}");
        }
    }
}

/// Why a knob write failed.
#[derive(Debug, thiserror::Error)]
pub enum KnobError {
    /// The kernel rejected the value (or the knob does not exist).
    #[error("{0}")]
    Errno(Errno),
    /// Writing needs root.
    #[error("cannot write {}: permission denied (changing THP knobs needs root)", .0.display())]
    NotPermitted(PathBuf),
    #[error("{path}: {1}", path = .0.display())]
    Io(PathBuf, std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice() {
        assert_eq!(
            parse_choice("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(parse_choice("never").as_deref(), None);
    }

    #[test]
    fn journal_paths_are_validated() {
        let j = Journal {
            pid: 1,
            knobs: [("/etc/passwd".to_string(), "never".to_string())]
                .into_iter()
                .collect(),
            swapfiles: vec!["/etc/passwd".to_string()],
        };
        let rep = apply_journal(&j);
        assert!(rep.restored.is_empty());
        assert_eq!(rep.skipped[0].1, "not a THP enabled knob");
        assert_eq!(rep.skipped[1].1, "not a ptlab swap file name");
        assert!(allowed_paths()
            .iter()
            .all(|p| p.to_string_lossy().ends_with("/enabled")));
    }
}
