//! Abuse: live. See main.rs.
//!
//! Live runs that would hurt the machine (memory, processes, disk), signals
//! at every moment of a run (no orphans, no journal or `.tmp` left, knobs
//! and swap as before), and waits on the knob lock that say who holds it.
//!
//! Every test here holds `common::serial()`. Tests that run ptlab against
//! the live kernel also hold the THP knob lock and hand it to ptlab through
//! `PTLAB_LOCK_FD` (as crates/ptlab/tests/knob_restore.rs does), so no other
//! live run on the machine changes the knobs while the test compares them.

use crate::common::{self, GlobalState};
use ptlab_live::knobs::{self, ThpLock};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The serial guard and the knob lock (shareable with children), or `None`
/// after printing `SKIP`.
fn live_setup(test: &str) -> Option<(std::sync::MutexGuard<'static, ()>, ThpLock)> {
    if let Some(why) = common::live_skip() {
        eprintln!("SKIP: {test}: {why}");
        return None;
    }
    let serial = common::serial();
    let lock = ThpLock::acquire().expect("knob lock");
    // Let children inherit the locked descriptor.
    // SAFETY: clearing FD_CLOEXEC on our own descriptor.
    unsafe { libc::fcntl(lock.raw_fd(), libc::F_SETFD, 0) };
    Some((serial, lock))
}

/// A ptlab run sharing the test's knob lock.
fn locked(lock: &ThpLock, args: &[&str]) -> common::Run {
    common::ptlab(args).env("PTLAB_LOCK_FD", &lock.raw_fd().to_string())
}

/// Spawn ptlab (in its own process group, output to files in `dir`).
fn spawn(dir: &Path, args: &[&str], envs: &[(&str, String)]) -> Child {
    let mut c = Command::new(common::bin());
    c.args(args).env_remove("PTLAB_LOCK_FD");
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = std::fs::File::create(dir.join("spawn.out")).expect("out file");
    let err = std::fs::File::create(dir.join("spawn.err")).expect("err file");
    c.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: setpgid between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::setpgid(0, 0);
            // A user at a terminal: the signals the test sends act even
            // when the test itself runs with them ignored (a background
            // job of a non-interactive shell ignores SIGINT, and ptlab
            // keeps a signal ignored at its start ignored).
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    c.spawn().expect("spawn ptlab")
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child (not its group: its workers must
    // notice on their own).
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Wait for `child`, killing its group after `t`. A failure says where
/// each of ptlab's threads was waiting (wchan and state, read just before
/// the kill), so a slow teardown can be told from a lost signal.
fn wait_bounded(child: &mut Child, t: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        if start.elapsed() > t {
            let threads = thread_states(child.id());
            // SAFETY: the group we created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            panic!("ptlab did not end within {t:?} after the signal; its threads: {threads}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `TID:STATE:WCHAN` for every thread of process `pid`.
fn thread_states(pid: u32) -> String {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "(gone)".into();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        let wchan = read(&p.join("wchan"));
        let stat = read(&p.join("stat"));
        // The state is the field after the parenthesised command name.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        out.push(format!(
            "{}:{state}:{wchan}",
            e.file_name().to_string_lossy()
        ));
    }
    out.join(" ")
}

/// Wait until some ptlab process's command line contains `needle` (and
/// there are at least `count` ptlab processes); false if `child` ended or
/// `t` passed first.
fn wait_for_process(child: &mut Child, needle: &str, count: usize, t: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < t {
        let procs = common::ptlab_processes();
        if procs.len() >= count && procs.iter().any(|(_, c)| c.contains(needle)) {
            return true;
        }
        if child.try_wait().expect("try_wait").is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Put back whatever a SIGKILLed run left (the next ptlab start would).
fn restore(lock: &ThpLock, envs: &[(&str, String)]) {
    let mut r = locked(lock, &["restore"]);
    for (k, v) in envs {
        r = r.env(k, v);
    }
    let out = r.timeout(Duration::from_secs(60)).run();
    assert!(out.code() == Some(0), "ptlab restore: {}", out.describe());
}

/// Puts back whatever a test's own journal (a scratch `PTLAB_STATE_DIR`)
/// still lists when the test ends, also when it panics: a test that fails
/// half-way must not leave the machine's knobs or a swap file behind.
struct RestoreOnDrop<'a> {
    lock: &'a ThpLock,
    envs: Vec<(&'static str, String)>,
}

impl Drop for RestoreOnDrop<'_> {
    fn drop(&mut self) {
        let mut r = locked(self.lock, &["restore"]);
        for (k, v) in &self.envs {
            r = r.env(k, v);
        }
        let out = r.timeout(Duration::from_secs(60)).run();
        if out.code() != Some(0) {
            eprintln!("ptlab restore after the test: {}", out.describe());
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// A THP `enabled` value other than the knob's current one (so a scenario
/// really changes it), and the knob's size name.
fn other_mode(kb: u64) -> Option<(&'static str, String)> {
    let order = (kb / 4).trailing_zeros() as u8;
    let p = knobs::knob_path(ptlab_model::ThpKnob::Size(order)).ok()?;
    let cur = knobs::read_knob(&p).ok()?;
    Some((
        if cur == "always" { "never" } else { "always" },
        format!("{kb}K"),
    ))
}

fn assert_same_state(before: &GlobalState, context: &str) {
    let after = common::global_state();
    assert_eq!(
        &after, before,
        "{context}: THP knobs, swap areas or journal changed"
    );
}

// ----- item 2: budgets ------------------------------------------------------

/// `mmap` + `write` of twice MemAvailable: the model refuses (out of model
/// memory), and the live side refuses before populating, on `run --backend
/// live`; on `diff` (with a smaller mapping and budget: observing a huge
/// mapping is another issue's business) neither side runs the statement.
#[test]
fn live_write_beyond_memory_budget_is_refused_before_populating() {
    let Some((_s, lock)) =
        live_setup("live_write_beyond_memory_budget_is_refused_before_populating")
    else {
        return;
    };
    let dir = common::scratch("live-mem");
    let avail = ptlab_live::budget::mem_available().expect("MemAvailable");
    let g = (avail * 2 >> 30) + 1;
    let sc = common::scenario(
        &dir,
        "big.ptl",
        &format!("p = mmap {g}G noreserve\nwrite p {g}G\nexpect ok\n"),
    );
    let sc = sc.to_str().unwrap();
    let small = common::scenario(
        &dir,
        "1g.ptl",
        "p = mmap 1G noreserve
write p 1G
expect ok
",
    );
    let before = common::global_state();
    let dog = common::watchdog(1 << 30, 16);
    let run = locked(&lock, &["run", "--backend", "live", sc]).run();
    let diff = locked(
        &lock,
        &["diff", "--max-memory", "256M", small.to_str().unwrap()],
    )
    .run();
    assert_eq!(dog.tripped(), None, "the budget did not hold");
    for (what, out, code, asked, budget) in [
        ("run", &run, 1, format!("{g} GiB"), "50% of MemAvailable"),
        (
            "diff",
            &diff,
            3,
            "1 GiB".to_string(),
            "256 MiB (set with --max-memory)",
        ),
    ] {
        assert_eq!(out.code(), Some(code), "{what}: {}", out.describe());
        let text = format!("{}{}", out.stdout, out.stderr);
        assert!(
            text.contains("memory budget exceeded")
                && text.contains("--max-memory")
                && text.contains(&asked)
                && text.contains(budget),
            "{what}: the error names the budget, the amount and the option: {}",
            out.describe()
        );
        assert!(!text.contains("panicked"), "{what}: {}", out.describe());
    }
    assert!(
        diff.stdout.contains("PARTIAL") && !diff.stdout.contains("DIVERGE"),
        "a budget stop is not a divergence: {}",
        diff.describe()
    );
    assert!(dog.peak_rss() < 512 << 20, "peak RSS {}", dog.peak_rss());
    drop(dog);
    common::assert_no_ptlab_processes(Duration::from_secs(5), "memory budget");
    assert_same_state(&before, "memory budget");
}

/// `--max-memory`: a size or a percentage; the budget counts what the
/// processes already hold; a bad value is a usage error.
#[test]
fn live_max_memory_option() {
    let Some((_s, lock)) = live_setup("live_max_memory_option") else {
        return;
    };
    let dir = common::scratch("live-maxmem");
    let sc = common::scenario(
        &dir,
        "two.ptl",
        "p = mmap 96M\nwrite p 96M\nq = mmap 96M\nwrite q 96M\nexpect ok\n",
    );
    let sc = sc.to_str().unwrap();
    let dog = common::watchdog(1 << 30, 16);
    // 64M: the first write is refused.
    let out = locked(
        &lock,
        &["run", "--backend", "live", "--max-memory", "64M", sc],
    )
    .run();
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stdout
            .contains(":2:1: runtime error: write: memory budget exceeded")
            && out.stdout.contains("64 MiB (set with --max-memory)"),
        "{}",
        out.describe()
    );
    // 160M: the first fits; the second does not, with 96 MiB held.
    let out = locked(
        &lock,
        &["run", "--backend", "live", "--max-memory", "160M", sc],
    )
    .run();
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stdout
            .contains(":4:1: runtime error: write: memory budget exceeded")
            && out.stdout.contains("MiB already"),
        "{}",
        out.describe()
    );
    // 512M and a percentage: both fit.
    for m in ["512M", "90%"] {
        let out = locked(&lock, &["run", "--backend", "live", "--max-memory", m, sc]).run();
        assert_eq!(out.code(), Some(0), "--max-memory {m}: {}", out.describe());
    }
    assert_eq!(dog.tripped(), None);
    drop(dog);
    for bad in ["lots", "0%", "150%", ""] {
        let out = common::ptlab(&["run", "--backend", "live", "--max-memory", bad, sc]).run();
        assert_eq!(
            out.code(),
            Some(2),
            "--max-memory '{bad}': {}",
            out.describe()
        );
        assert!(out.stderr.contains("--max-memory"), "{}", out.describe());
    }
    let out = common::ptlab(&["diff", "--max-procs", "0", sc]).run();
    assert_eq!(out.code(), Some(2), "--max-procs 0: {}", out.describe());
    common::assert_no_ptlab_processes(Duration::from_secs(5), "--max-memory");
}

/// 400 `fork` lines: the process budget (256 by default, or --max-procs)
/// stops the run with at most that many processes.
#[test]
fn live_fork_flood_stops_at_the_process_budget() {
    let Some((_s, lock)) = live_setup("live_fork_flood_stops_at_the_process_budget") else {
        return;
    };
    let dir = common::scratch("live-forks");
    let mut text = String::from("p = mmap 64K\nwrite p\n");
    for i in 0..400 {
        text.push_str(&format!("fork c{i}\n"));
    }
    let sc = common::scenario(&dir, "forks.ptl", &text);
    let sc = sc.to_str().unwrap();
    let before = common::global_state();
    let dog = common::watchdog(2 << 30, 256 + 2);
    let out = locked(&lock, &["run", "--backend", "live", sc]).run();
    assert_eq!(dog.tripped(), None, "more processes than the budget");
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stdout
            .contains(":258:1: runtime error: fork: process budget exceeded")
            && out.stdout.contains("256 (the default)")
            && out.stdout.contains("--max-procs"),
        "{}",
        out.describe()
    );
    let out = locked(&lock, &["diff", "--max-procs", "10", sc]).run();
    assert_eq!(out.code(), Some(3), "{}", out.describe());
    assert!(
        out.stdout
            .contains(":12: stopped: fork: process budget exceeded")
            && out.stdout.contains("10 (set with --max-procs)"),
        "{}",
        out.describe()
    );
    drop(dog);
    common::assert_no_ptlab_processes(Duration::from_secs(10), "fork flood");
    assert_same_state(&before, "fork flood");
}

/// `swap 1T` would fill the disk: refused before any file is made; an
/// explicit --max-swap is a ceiling.
#[test]
fn live_swap_beyond_budget_is_refused() {
    let Some((_s, lock)) = live_setup("live_swap_beyond_budget_is_refused") else {
        return;
    };
    let dir = common::scratch("live-swap");
    let swap_dir = dir.join("swap");
    let big = common::scenario(&dir, "big.ptl", "swap 1T\nexpect ok\n");
    let two = common::scenario(&dir, "two.ptl", "swap 2M\nexpect ok\n");
    let before = common::global_state();
    let sd = swap_dir.to_str().unwrap();
    let out = locked(&lock, &["run", "--backend", "live", big.to_str().unwrap()])
        .env("PTLAB_SWAP_DIR", sd)
        .run();
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stdout.contains("swap budget exceeded")
            && out.stdout.contains("1 TiB")
            && out.stdout.contains("25% of the")
            && out.stdout.contains("--max-swap"),
        "{}",
        out.describe()
    );
    let out = locked(&lock, &["diff", "--max-swap", "1M", two.to_str().unwrap()])
        .env("PTLAB_SWAP_DIR", sd)
        .run();
    assert_eq!(out.code(), Some(3), "{}", out.describe());
    assert!(
        out.stdout.contains("1 MiB (set with --max-swap)"),
        "{}",
        out.describe()
    );
    // Even a huge --max-swap cannot fill the disk.
    let out = locked(
        &lock,
        &[
            "run",
            "--backend",
            "live",
            "--max-swap",
            "16384T",
            big.to_str().unwrap(),
        ],
    )
    .env("PTLAB_SWAP_DIR", sd)
    .run();
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stdout.contains("not enough disk"), "{}", out.describe());
    let left: Vec<_> = std::fs::read_dir(&swap_dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "swap files made: {left:?}");
    common::assert_no_ptlab_processes(Duration::from_secs(5), "swap budget");
    assert_same_state(&before, "swap budget");
}

// ----- item 3: no orphans ---------------------------------------------------

/// SIGTERM, SIGKILL and SIGINT of `ptlab run --backend live` while a worker
/// is in the middle of one long statement (reading 64 GiB of zero pages:
/// seconds of faults, no memory), in `main` and in a fork child: every
/// worker dies with ptlab at once, not when its statement ends, and the
/// knobs come back (SIGKILL: through `ptlab restore`, as the next start
/// would).
#[test]
fn live_run_killed_leaves_no_workers() {
    let Some((_s, lock)) = live_setup("live_run_killed_leaves_no_workers") else {
        return;
    };
    let dir = common::scratch("live-orphans");
    let (mode, size) = other_mode(64).expect("64 KiB knob");
    let head =
        format!("thp {size} {mode}\np = mmap 64G noreserve\nmadvise p 64G nohugepage\nwrite p\n");
    let scenarios = [
        ("main", format!("{head}read p 64G\n"), 2),
        ("child", format!("{head}fork c\n@c read p 64G\n"), 3),
    ];
    let envs = [("PTLAB_LOCK_FD", lock.raw_fd().to_string())];
    let before = common::global_state();
    let dog = common::watchdog(1 << 30, 8);
    for (who, text, procs) in &scenarios {
        let sc = common::scenario(&dir, &format!("busy-{who}.ptl"), text);
        for sig in [libc::SIGTERM, libc::SIGKILL, libc::SIGINT] {
            let context = format!("busy {who}, signal {sig}");
            let args = [
                "run",
                "--backend",
                "live",
                "--max-memory",
                "100G",
                sc.to_str().unwrap(),
            ];
            let mut child = spawn(&dir, &args, &envs);
            assert!(
                wait_for_process(
                    &mut child,
                    "run --backend live",
                    *procs,
                    Duration::from_secs(20)
                ),
                "{context}: the workers never started: {}",
                read(&dir.join("spawn.err"))
            );
            // Well inside the read (which takes seconds).
            std::thread::sleep(Duration::from_millis(300));
            assert!(
                child.try_wait().unwrap().is_none(),
                "{context}: ended early"
            );
            signal(&child, sig);
            let st = wait_bounded(&mut child, Duration::from_secs(20));
            assert!(!st.success(), "{context}");
            common::assert_no_ptlab_processes(Duration::from_secs(2), &context);
            if sig == libc::SIGKILL {
                restore(&lock, &[]);
            }
            assert_same_state(&before, &context);
        }
    }
    assert_eq!(dog.tripped(), None);
}

/// SIGTERM and SIGKILL of `ptlab calibrate` while its `calibrate-worker`
/// measures: the worker dies too and no profile is written.
#[test]
fn calibrate_killed_leaves_no_worker_and_no_file() {
    let Some((_s, _lock)) = live_setup("calibrate_killed_leaves_no_worker_and_no_file") else {
        return;
    };
    let dir = common::scratch("calibrate-killed");
    let out = dir.join("local.toml");
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        // Not --quick: each worker measures for seconds, so one that
        // outlived its parent would still be seen below.
        let mut child = spawn(&dir, &["calibrate", "--out", out.to_str().unwrap()], &[]);
        if !wait_for_process(&mut child, "calibrate-worker", 2, Duration::from_secs(20)) {
            eprintln!(
                "SKIP: calibrate_killed_leaves_no_worker_and_no_file: calibrate ended before its \
                 worker was seen: {}",
                read(&dir.join("spawn.err"))
            );
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
        signal(&child, sig);
        wait_bounded(&mut child, Duration::from_secs(20));
        common::assert_no_ptlab_processes(
            Duration::from_secs(2),
            &format!("calibrate, signal {sig}"),
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !out.exists(),
            "signal {sig}: a profile was written after its parent died"
        );
    }
}

/// SIGTERM and SIGKILL of `ptlab reproduce --quick` early (while the first
/// bench child measures): the child dies with it, knobs and swap are as
/// before, and nothing keeps writing into the output directory.
#[test]
fn reproduce_killed_early_leaves_nothing_running() {
    let Some((_s, lock)) = live_setup("reproduce_killed_early_leaves_nothing_running") else {
        return;
    };
    let dir = common::scratch("reproduce-killed");
    let out = dir.join("out");
    let envs = [("PTLAB_LOCK_FD", lock.raw_fd().to_string())];
    let before = common::global_state();
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        let mut child = spawn(
            &dir,
            &[
                "reproduce",
                "--quick",
                "--quiet",
                "--out",
                out.to_str().unwrap(),
            ],
            &envs,
        );
        // ptlab and its first bench child (the same executable).
        let forked = wait_for_process(&mut child, "reproduce", 2, Duration::from_secs(30));
        assert!(
            forked,
            "no bench child seen: {}",
            read(&dir.join("spawn.err"))
        );
        signal(&child, sig);
        wait_bounded(&mut child, Duration::from_secs(20));
        common::assert_no_ptlab_processes(
            Duration::from_secs(5),
            &format!("reproduce, signal {sig}"),
        );
        if sig == libc::SIGKILL {
            restore(&lock, &[]);
        }
        assert_same_state(&before, &format!("reproduce, signal {sig}"));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!out.join("local-profile.toml").exists());
        assert!(!out.join("report.html").exists());
    }
}

// ----- item 9: journal windows ---------------------------------------------

/// SIGTERM and SIGINT at every moment of a live run that changes two knobs
/// and makes a swap file (0, 3, 6, ... ms after the start, through and past
/// the writes): never a journal or `.tmp` left, knobs, swap areas and swap
/// files as before, no process left.
/// A signal ignored when ptlab starts (nohup's SIGHUP, a background job's
/// SIGINT) stays ignored after ptlab has written a knob: the run goes on,
/// ends normally and puts the knob back.
#[test]
fn signals_ignored_at_start_stay_ignored() {
    let Some((_s, lock)) = live_setup("signals_ignored_at_start_stay_ignored") else {
        return;
    };
    let dir = common::scratch("ignored-signals");
    let (m64, s64) = other_mode(64).expect("64 KiB knob");
    let sc = common::scenario(
        &dir,
        "knob.ptl",
        &format!("thp {s64} {m64}\np = mmap 64K\nrepeat 20000\n  read p\nend\n"),
    );
    let before = common::global_state();
    let mut c = Command::new(common::bin());
    c.args(["run", "--backend", "live", sc.to_str().unwrap()])
        .env("PTLAB_LOCK_FD", lock.raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: signal dispositions between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = c.spawn().expect("spawn ptlab");
    // Past the knob write (the scenario's first statement), then both.
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, libc::SIGHUP);
    signal(&child, libc::SIGINT);
    let st = wait_bounded(&mut child, Duration::from_secs(60));
    assert_eq!(
        st.code(),
        Some(0),
        "the ignored signals ended the run: {st:?}"
    );
    assert_same_state(&before, "after a run that ignored SIGHUP and SIGINT");
}

#[test]
fn signals_at_every_moment_leave_no_journal() {
    let Some((_s, lock)) = live_setup("signals_at_every_moment_leave_no_journal") else {
        return;
    };
    let dir = common::scratch("journal-windows");
    let state = dir.join("state");
    let swap = dir.join("swap");
    let (m64, s64) = other_mode(64).expect("64 KiB knob");
    let (m32, s32) = other_mode(32).expect("32 KiB knob");
    let setup = format!("thp {s64} {m64}\nthp {s32} {m32}\nswap 1M\np = mmap 64K\n");
    let quick = common::scenario(&dir, "quick.ptl", &setup);
    let busy = common::scenario(
        &dir,
        "busy.ptl",
        &format!("{setup}repeat 100000000\n  read p\nend\n"),
    );
    let envs = [
        ("PTLAB_LOCK_FD", lock.raw_fd().to_string()),
        ("PTLAB_STATE_DIR", state.to_str().unwrap().to_string()),
        ("PTLAB_SWAP_DIR", swap.to_str().unwrap().to_string()),
    ];
    let _restore = RestoreOnDrop {
        lock: &lock,
        envs: envs[1..].to_vec(),
    };
    let before = common::global_state();
    // How long a whole run of the setup takes: the signals must cover it.
    let t = Instant::now();
    let mut r = locked(
        &lock,
        &["run", "--backend", "live", quick.to_str().unwrap()],
    );
    for (k, v) in &envs[1..] {
        r = r.env(k, v);
    }
    let out = r.run();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    let setup_ms = t.elapsed().as_millis() as u64;
    let last = (setup_ms + 20).max(60);
    let mut delays: Vec<u64> = (0..=last.min(90)).step_by(3).collect();
    delays.extend([last + 20, last + 60]);
    let leftovers = || -> Vec<PathBuf> {
        [&state, &swap]
            .iter()
            .filter_map(|d| std::fs::read_dir(d).ok())
            .flat_map(|d| d.flatten().map(|e| e.path()))
            .collect()
    };
    let mut problems = Vec::new();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        for &ms in &delays {
            let mut child = spawn(
                &dir,
                &["run", "--backend", "live", busy.to_str().unwrap()],
                &envs,
            );
            std::thread::sleep(Duration::from_millis(ms));
            signal(&child, sig);
            // Teardown includes swapoff(2), which must bring back whatever
            // the system swapped into the scenario's swap file meanwhile:
            // slow on a loaded machine, so a minute before calling it a hang.
            wait_bounded(&mut child, Duration::from_secs(60));
            common::assert_no_ptlab_processes(
                Duration::from_secs(5),
                &format!("signal {sig} after {ms} ms"),
            );
            let left = leftovers();
            let now = common::global_state();
            if !left.is_empty() || now != before {
                problems.push(format!(
                    "signal {sig} after {ms} ms: left {left:?}, state {now:?}"
                ));
                restore(&lock, &envs[1..]);
                for p in leftovers() {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "setup takes {setup_ms} ms; {} of {} signalled runs left something:\n{}",
        problems.len(),
        delays.len() * 2,
        problems.join("\n")
    );
}

// ----- item 6: waits on the knob lock say who holds it ---------------------

/// While the test holds the knob lock, `run --backend live`, `diff`, `show
/// --backend live`, `fuzz` and `restore` each say they wait and name the
/// holder (this test's pid); once it is released they all finish.
#[test]
fn lock_waits_name_the_holder() {
    if let Some(why) = common::live_skip() {
        eprintln!("SKIP: lock_waits_name_the_holder: {why}");
        return;
    }
    let _serial = common::serial();
    let dir = common::scratch("lock-wait");
    let sc = common::scenario(&dir, "s.ptl", "p = mmap 64K\nwrite p\nexpect ok\n");
    let sc = sc.to_str().unwrap().to_string();
    // `restore` waits only when there is a journal to restore.
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("thp-journal.json"),
        "{\"pid\": 1, \"knobs\": {}}",
    )
    .unwrap();
    let html = dir.join("s.html");
    let fuzz_out = dir.join("fuzz");
    let commands: Vec<(&str, Vec<String>, Vec<(&str, String)>)> = vec![
        (
            "run",
            vec!["run".into(), "--backend".into(), "live".into(), sc.clone()],
            vec![],
        ),
        ("diff", vec!["diff".into(), sc.clone()], vec![]),
        (
            "show",
            vec![
                "show".into(),
                "--backend".into(),
                "live".into(),
                sc.clone(),
                "-o".into(),
                html.to_str().unwrap().into(),
            ],
            vec![],
        ),
        (
            "fuzz",
            vec![
                "fuzz".into(),
                "--steps".into(),
                "1".into(),
                "--quiet".into(),
                "--out".into(),
                fuzz_out.to_str().unwrap().into(),
            ],
            vec![],
        ),
        (
            "restore",
            vec!["restore".into()],
            vec![("PTLAB_STATE_DIR", state.to_str().unwrap().to_string())],
        ),
    ];
    let lock = ThpLock::acquire().expect("knob lock");
    let me = format!("held by pid {}", std::process::id());
    let mut running = Vec::new();
    for (name, args, envs) in &commands {
        let mut c = Command::new(common::bin());
        c.args(args)
            .env_remove("PTLAB_LOCK_FD")
            .stdin(Stdio::null());
        for (k, v) in envs {
            c.env(k, v);
        }
        c.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn");
        let err = child.stderr.take().unwrap();
        let text = Arc::new(Mutex::new(String::new()));
        let t2 = text.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut t = t2.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        running.push((*name, child, text));
    }
    let start = Instant::now();
    for i in 0..running.len() {
        loop {
            let name = running[i].0;
            let t = running[i].2.lock().unwrap().clone();
            if t.contains("waiting for the THP knob lock") && t.contains(&me) {
                break;
            }
            let ended = running[i].1.try_wait().unwrap().is_some();
            if ended || start.elapsed() > Duration::from_secs(20) {
                for (_, c, _) in running.iter_mut() {
                    let _ = c.kill();
                }
                panic!("{name} did not say whom it waits for (ended: {ended}): {t}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(lock);
    for (name, child, text) in &mut running {
        let st = wait_bounded(child, Duration::from_secs(120));
        let t = text.lock().unwrap().clone();
        // fuzz: 1 would be a (flaky) divergence, not a lock problem.
        let ok = st.success() || (*name == "fuzz" && st.code() == Some(1));
        assert!(ok, "{name}: {st:?}: {t}");
        assert!(t.contains("got the THP knob lock after"), "{name}: {t}");
    }
    assert!(!state.join("thp-journal.json").exists(), "restore ran");
    common::assert_no_ptlab_processes(Duration::from_secs(5), "lock waits");
}
