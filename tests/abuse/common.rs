//! The abuse suite's runner: the real `ptlab` binary, optionally under an
//! address-space limit and a wall-clock limit, with checks that nothing
//! leaked (processes, THP knobs, swap areas, journal files).
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Tests that start live runs or signal ptlab hold this, so the suite's own
/// tests never race each other for the knob lock or count each other's
/// workers as leaks. (Other test binaries serialise through the knob lock.)
///
/// The first call also restores a journal a killed earlier run left behind
/// (as every `ptlab` start does), so the suite's "state before" snapshots
/// are the machine's real state and not a crashed run's leftovers, which the
/// first `ptlab` a test starts would put back under the test's feet.
pub fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    static STALE: std::sync::Once = std::sync::Once::new();
    let g = M.lock().unwrap_or_else(|e| e.into_inner());
    STALE.call_once(|| match ptlab_live::knobs::restore_now() {
        Ok(Some(rep)) => eprintln!("abuse: before the first test: {rep}"),
        Ok(None) => {}
        Err(e) => eprintln!("abuse: cannot restore a stale journal: {e:#}"),
    });
    g
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `Some(reason)` when live runs cannot happen here (print `SKIP: reason`).
pub fn live_skip() -> Option<String> {
    if let Some(why) = ptlab_live::live_unavailable() {
        return Some(why);
    }
    if !is_root() {
        return Some("needs root (pagemap PFNs, kpageflags, THP knobs)".into());
    }
    None
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ptlab")
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ptlab-abuse-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Writes `text` as a scenario file in `dir`.
pub fn scenario(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write scenario");
    p
}

/// How one run of ptlab ended.
#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// Peak resident set of the ptlab process and its waited-for children
    /// (`ru_maxrss` from `wait4()`), in bytes; see [`Usage::max_rss`].
    pub max_rss_children: u64,
    pub timed_out: bool,
}

impl Outcome {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    /// Exited normally with a non-zero code (a clean error, not a signal
    /// death such as SIGABRT from a failed allocation or SIGSEGV).
    pub fn clean_error(&self) -> bool {
        matches!(self.status.code(), Some(c) if c != 0 && c != 101 && c != 134)
    }
    pub fn describe(&self) -> String {
        format!(
            "status {:?} after {:?} (timed out: {})\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.elapsed, self.timed_out, self.stdout, self.stderr
        )
    }
}

/// A ptlab invocation with limits.
pub struct Run {
    cmd: Command,
    as_limit: Option<u64>,
    timeout: Duration,
    stdin: Option<Vec<u8>>,
}

pub fn ptlab(args: &[&str]) -> Run {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    cmd.env_remove("PTLAB_LOCK_FD");
    Run {
        cmd,
        as_limit: None,
        timeout: Duration::from_secs(120),
        stdin: None,
    }
}

impl Run {
    /// Run under `RLIMIT_AS` = `bytes` (soft and hard): an allocation past it
    /// fails in ptlab instead of growing the machine's memory use.
    pub fn as_limit(mut self, bytes: u64) -> Self {
        self.as_limit = Some(bytes);
        self
    }
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.cmd.env(k, v);
        self
    }
    pub fn stdin(mut self, bytes: Vec<u8>) -> Self {
        self.stdin = Some(bytes);
        self
    }
    pub fn command(&mut self) -> &mut Command {
        &mut self.cmd
    }

    /// Spawns and waits (killing the whole process group at the timeout).
    pub fn run(self) -> Outcome {
        self.run_usage().0
    }
}

/// `ru_maxrss` of RUSAGE_CHILDREN, in bytes.
pub fn max_rss_children() -> u64 {
    // SAFETY: getrusage fills the struct we pass.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru.ru_maxrss as u64 * 1024
    }
}

/// Every process whose executable is the ptlab binary under test (ptlab
/// itself, its live workers and calibrate workers: all are the same
/// executable), except this test process.
pub fn ptlab_processes() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let exe = std::fs::canonicalize(bin()).unwrap_or_else(|_| PathBuf::from(bin()));
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(target) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
            continue;
        };
        // A deleted (rebuilt) binary reads "<path> (deleted)".
        let t = target.to_string_lossy();
        let t = t.trim_end_matches(" (deleted)");
        // A worker exec'd from its memfd names the ptlab that started it
        // as its third argument (crates/ptlab-live/src/worker_exe.rs).
        let exec_worker = t.starts_with("/memfd:ptlab-worker")
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| b.split(|&c| c == 0).nth(2) == Some(exe.as_os_str().as_encoded_bytes()))
                .unwrap_or(false);
        if Path::new(t) == exe || exec_worker {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            out.push((pid, cmd));
        }
    }
    out
}

/// Waits up to `within` for every ptlab process to be gone; panics naming the
/// survivors (and kills them so the machine is not hurt by a failing test).
pub fn assert_no_ptlab_processes(within: Duration, context: &str) {
    let t = Instant::now();
    loop {
        let left = ptlab_processes();
        if left.is_empty() {
            return;
        }
        if t.elapsed() > within {
            for (pid, _) in &left {
                // SAFETY: killing a leaked process of the binary under test.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            panic!("{context}: ptlab processes left behind: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Everything global a live run may change: THP `enabled` knobs, the swap
/// areas in use, and the knob journal.
#[derive(Debug, PartialEq, Eq)]
pub struct GlobalState {
    pub knobs: Vec<(PathBuf, String)>,
    pub swaps: String,
    pub journal: bool,
}

pub fn global_state() -> GlobalState {
    let mut knobs = Vec::new();
    for p in ptlab_live::knobs::allowed_paths() {
        if let Ok(v) = ptlab_live::knobs::read_knob(&p) {
            knobs.push((p, v));
        }
    }
    let swaps = std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n");
    GlobalState {
        knobs,
        swaps,
        journal: ptlab_live::knobs::journal_path().exists(),
    }
}

/// Resident set (`VmRSS`) of process `pid`, in bytes (0 if gone).
pub fn rss_of(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// A safety net for inputs that could populate memory or make processes
/// where an address-space limit cannot help (a live worker needs the
/// address space of a large `noreserve` mapping): polls every ptlab
/// process every 5 ms while it lives, and SIGKILLs them all when their
/// resident sets add up to more than `max_rss` or there are more than
/// `max_procs` of them. `tripped()` then says why (the test must fail).
pub struct Watchdog {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tripped: std::sync::Arc<Mutex<Option<String>>>,
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

pub fn watchdog(max_rss: u64, max_procs: usize) -> Watchdog {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let tripped = Arc::new(Mutex::new(None));
    let peak = Arc::new(AtomicU64::new(0));
    let (s, t, p) = (stop.clone(), tripped.clone(), peak.clone());
    let thread = std::thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            let procs = ptlab_processes();
            let rss: u64 = procs.iter().map(|(pid, _)| rss_of(*pid)).sum();
            p.fetch_max(rss, Ordering::SeqCst);
            let why = if rss > max_rss {
                Some(format!(
                    "ptlab processes reached {rss} bytes resident (limit {max_rss})"
                ))
            } else if procs.len() > max_procs {
                Some(format!(
                    "{} ptlab processes (limit {max_procs})",
                    procs.len()
                ))
            } else {
                None
            };
            if let Some(why) = why {
                for (pid, _) in &procs {
                    // SAFETY: killing processes of the binary under test.
                    unsafe { libc::kill(*pid, libc::SIGKILL) };
                }
                *t.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    Watchdog {
        stop,
        tripped,
        peak,
        thread: Some(thread),
    }
}

impl Watchdog {
    /// Why the watchdog killed ptlab, if it did.
    pub fn tripped(&self) -> Option<String> {
        self.tripped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// The largest sum of resident sets seen.
    pub fn peak_rss(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
// ----- memory cgroups and per-run resource use (added for tests/abuse/observe.rs) -----

/// A memory cgroup the tested ptlab (and everything it forks, live workers
/// included) runs in: a hard bound on memory for runs `RLIMIT_AS` cannot
/// bound (a live worker's huge `noreserve` mmap needs address space, not
/// memory). cgroup v2 (`memory.max`, `memory.swap.max` = 0) where the
/// memory controller is enabled, else cgroup v1 (`memory.limit_in_bytes`,
/// `memory.memsw.limit_in_bytes`). Removed on drop.
pub struct MemCgroup {
    dir: PathBuf,
    procs: std::ffi::CString,
    v2: bool,
}

impl MemCgroup {
    /// Creates `ptlab-abuse-<pid>-<name>` limited to `max` bytes of memory
    /// and no swap. `Err(reason)` (print `SKIP: reason`) when no memory
    /// cgroup is writable here.
    pub fn new(name: &str, max: u64) -> Result<MemCgroup, String> {
        let leaf = format!("ptlab-abuse-{}-{name}", std::process::id());
        let mut tried = Vec::new();
        for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            let ctl =
                |f: &str| std::fs::read_to_string(Path::new(root).join(f)).unwrap_or_default();
            if !ctl("cgroup.subtree_control")
                .split_whitespace()
                .any(|c| c == "memory")
            {
                tried.push(format!("{root}: no cgroup v2 memory controller"));
                continue;
            }
            let dir = Path::new(root).join(&leaf);
            match Self::make(&dir, &[("memory.max", max), ("memory.swap.max", 0)], true) {
                Ok(cg) => return Ok(cg),
                Err(e) => tried.push(e),
            }
        }
        let v1 = Path::new("/sys/fs/cgroup/memory");
        if v1.join("memory.limit_in_bytes").exists() {
            let dir = v1.join(&leaf);
            let mut limits = vec![("memory.limit_in_bytes", max)];
            if v1.join("memory.memsw.limit_in_bytes").exists() {
                limits.push(("memory.memsw.limit_in_bytes", max));
            }
            match Self::make(&dir, &limits, false) {
                Ok(cg) => return Ok(cg),
                Err(e) => tried.push(e),
            }
        } else {
            tried.push("no cgroup v1 memory hierarchy".into());
        }
        Err(format!("no writable memory cgroup ({})", tried.join("; ")))
    }

    fn make(dir: &Path, limits: &[(&str, u64)], v2: bool) -> Result<MemCgroup, String> {
        let _ = std::fs::remove_dir(dir);
        std::fs::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let procs = std::ffi::CString::new(dir.join("cgroup.procs").to_string_lossy().as_bytes())
            .expect("no NUL in a cgroup path");
        let cg = MemCgroup {
            dir: dir.to_path_buf(),
            procs,
            v2,
        };
        for (file, v) in limits {
            if file.contains("swap") && !cg.dir.join(file).exists() {
                continue; // no swap accounting: nothing to limit
            }
            std::fs::write(cg.dir.join(file), v.to_string())
                .map_err(|e| format!("cannot write {}: {e}", cg.dir.join(file).display()))?;
        }
        Ok(cg)
    }

    /// Makes `run`'s process join this cgroup before it execs ptlab.
    pub fn enter(&self, mut run: Run) -> Run {
        let path = self.procs.clone();
        // SAFETY: open/write/close only, between fork and exec.
        unsafe {
            run.command().pre_exec(move || {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if ok {
                    Ok(())
                } else {
                    Err(err)
                }
            });
        }
        run
    }

    /// Peak memory charged to the cgroup, in bytes (`memory.peak` on v2,
    /// `memory.max_usage_in_bytes` on v1), if the kernel reports it.
    pub fn peak(&self) -> Option<u64> {
        let f = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Whether anything in the cgroup hit the limit.
    pub fn hit_limit(&self) -> bool {
        if self.v2 {
            let ev = std::fs::read_to_string(self.dir.join("memory.events")).unwrap_or_default();
            ev.lines().any(|l| {
                let mut it = l.split_whitespace();
                matches!((it.next(), it.next()), (Some("max" | "oom" | "oom_kill"), Some(n)) if n != "0")
            })
        } else {
            std::fs::read_to_string(self.dir.join("memory.failcnt"))
                .map(|s| s.trim() != "0")
                .unwrap_or(false)
        }
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Anything left (a leak the test reports) is killed so the
        // directory can go.
        for _ in 0..50 {
            let left = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for pid in left
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: killing a process this test put in its own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What one run cost, from `wait4()`: the ptlab process plus every
/// descendant it waited for (its live worker, for instance).
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Peak resident set, bytes (`ru_maxrss`: the largest single process).
    /// It includes the forked copy of the test process before the exec
    /// (the kernel keeps the larger hiwater across exec), so it is an upper
    /// bound; bound memory with `as_limit` or a [`MemCgroup`] instead.
    pub max_rss: u64,
    /// User + system CPU time.
    pub cpu: Duration,
}

impl Run {
    /// [`Run::run`], but reaping the child with `wait4()` so that its own
    /// resource use is known exactly (not mixed with other tests' children).
    // The child is reaped by wait4() below, not by Child::wait().
    #[allow(clippy::zombie_processes)]
    pub fn run_usage(mut self) -> (Outcome, Usage) {
        let limit = self.as_limit;
        self.cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            self.cmd.pre_exec(move || {
                libc::setpgid(0, 0);
                if let Some(b) = limit {
                    let r = libc::rlimit {
                        rlim_cur: b,
                        rlim_max: b,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let start = Instant::now();
        let mut child = self.cmd.spawn().expect("spawn ptlab");
        if let Some(bytes) = self.stdin.take() {
            let mut w = child.stdin.take().expect("stdin");
            std::thread::spawn(move || {
                use std::io::Write;
                let _ = w.write_all(&bytes);
            });
        }
        let mut out = child.stdout.take().expect("stdout");
        let mut err = child.stderr.take().expect("stderr");
        let t_out = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = out.read_to_end(&mut s);
            s
        });
        let t_err = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = err.read_to_end(&mut s);
            s
        });
        let pid = child.id() as i32;
        let mut timed_out = false;
        let mut status = 0i32;
        // SAFETY: a zeroed rusage is valid; wait4 fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
            if r == pid {
                break;
            }
            if r < 0 {
                panic!("wait4: {}", std::io::Error::last_os_error());
            }
            if start.elapsed() > self.timeout && !timed_out {
                timed_out = true;
                // SAFETY: signalling the process group we created.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let elapsed = start.elapsed();
        let stdout = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
        let stderr = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        let usage = Usage {
            max_rss: ru.ru_maxrss as u64 * 1024,
            cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        };
        use std::os::unix::process::ExitStatusExt;
        (
            Outcome {
                status: ExitStatus::from_raw(status),
                stdout,
                stderr,
                elapsed,
                max_rss_children: usage.max_rss,
                timed_out,
            },
            usage,
        )
    }
}
