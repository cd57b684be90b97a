//! Abuse: cli. See main.rs.
//!
//! The command line itself: output paths that cannot be written (checked
//! before any measuring), readers that go away (`ptlab ... | head -1`),
//! result files that cannot be compared, and hostile scenario files and
//! options (runaway loops, devices, huge or binary files, a byte-order
//! mark, long flat sums, unknown `--param` names).

use crate::common;
use ptlab_live::knobs::ThpLock;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// Output-path and usage errors must come before any work: this is far
/// below the seconds a measurement (or even a live worker start) takes.
const BEFORE_WORK: Duration = Duration::from_secs(5);
/// Address-space limit for runs that could otherwise eat memory.
const AS_LIMIT: u64 = 1 << 30;

/// The knob lock descriptor the running test holds (-1: none), handed to
/// every ptlab it starts through `PTLAB_LOCK_FD`.
static LOCK_FD: AtomicI32 = AtomicI32::new(-1);

/// Runs `body` under the suite's rules: serialised with the other abuse
/// tests, no ptlab process left behind, THP knobs, swap areas and the
/// journal exactly as before. The knob lock is held throughout, so live
/// runs of other ptlab processes on the machine (other test binaries,
/// other checkouts) cannot change the global state under the comparison;
/// the ptlab processes the test starts share it.
fn abuse(name: &str, body: impl FnOnce(&Path)) {
    let _g = common::serial();
    let lock = ThpLock::acquire().expect("knob lock");
    // Let children inherit the locked descriptor.
    // SAFETY: clearing FD_CLOEXEC on our own descriptor.
    unsafe { libc::fcntl(lock.raw_fd(), libc::F_SETFD, 0) };
    LOCK_FD.store(lock.raw_fd(), Ordering::SeqCst);
    let before = common::global_state();
    let dir = common::scratch(name);
    body(&dir);
    common::assert_no_ptlab_processes(Duration::from_secs(10), name);
    assert_eq!(
        common::global_state(),
        before,
        "{name}: global state changed"
    );
    LOCK_FD.store(-1, Ordering::SeqCst);
    drop(lock);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `common::ptlab` sharing the test's knob lock.
fn ptlab(args: &[&str]) -> common::Run {
    let r = common::ptlab(args);
    match LOCK_FD.load(Ordering::SeqCst) {
        -1 => r,
        fd => r.env("PTLAB_LOCK_FD", &fd.to_string()),
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A clean usage/I-O error: exit status 2, the message on stderr
/// containing every piece of `needles`, before any work.
fn assert_usage_error(o: &common::Outcome, needles: &[&str]) {
    assert_eq!(o.code(), Some(2), "{}", o.describe());
    assert!(!o.stderr.contains("panicked"), "{}", o.describe());
    for n in needles {
        assert!(o.stderr.contains(n), "missing '{n}' in:\n{}", o.describe());
    }
    assert!(
        o.elapsed < BEFORE_WORK,
        "took {:?}: the error came after work started\n{}",
        o.elapsed,
        o.describe()
    );
}

// ---------------------------------------------------------------------------
// Item 4: output paths are checked before measuring.

#[test]
fn reproduce_out_is_an_existing_file() {
    abuse("out-file", |d| {
        let f = d.join("report");
        std::fs::write(&f, "keep me").unwrap();
        // Without --no-live: as root an unchecked path would measure for minutes.
        let o = ptlab(&["reproduce", "--quick", "--quiet", "--out", s(&f)]).run();
        assert_usage_error(&o, &["--out ", s(&f), "exists and is not a directory"]);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "keep me");
    });
}

#[test]
fn reproduce_out_is_proc_version() {
    abuse("out-proc", |_| {
        let o = ptlab(&["reproduce", "--quick", "--quiet", "--out", "/proc/version"]).run();
        assert_usage_error(&o, &["--out /proc/version", "not a directory"]);
        let o = ptlab(&[
            "reproduce",
            "--quick",
            "--quiet",
            "--out",
            "/proc/ptlab-out",
        ])
        .run();
        assert_usage_error(
            &o,
            &["--out /proc/ptlab-out", "cannot create the directory"],
        );
    });
}

#[test]
fn reproduce_out_is_a_read_only_directory() {
    abuse("out-ro", |d| {
        let ro = d.join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        // Root writes anywhere: run as nobody, for whom the directory is
        // read-only, as it is for any user.
        let mut run = ptlab(&["reproduce", "--quick", "--quiet", "--out", s(&ro)]);
        if common::is_root() {
            run.command().uid(65534).gid(65534);
        }
        let o = run.run();
        assert_usage_error(
            &o,
            &[
                "--out ",
                s(&ro),
                "cannot create a file there",
                "Permission denied",
            ],
        );
        // A missing directory under it cannot be created either.
        let sub = ro.join("sub");
        let scen = common::scenario(d, "a.ptl", "p = mmap 4K\n");
        let mut run = ptlab(&["show", s(&scen), "-o", s(&sub.join("x.html"))]);
        if common::is_root() {
            run.command().uid(65534).gid(65534);
        }
        let o = run.run();
        assert_usage_error(
            &o,
            &["-o ", "cannot create the directory", "Permission denied"],
        );
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    });
}

#[test]
fn reproduce_bad_profile_is_refused_before_measuring() {
    abuse("out-profile", |d| {
        let out = d.join("r");
        let o = ptlab(&[
            "reproduce",
            "--quick",
            "--quiet",
            "--out",
            s(&out),
            "--profile",
            "/nonexistent/p.toml",
        ])
        .run();
        assert_usage_error(&o, &["--profile /nonexistent/p.toml"]);
    });
}

#[test]
fn bench_out_bad_paths() {
    abuse("out-bench", |d| {
        for (path, why) in [
            ("/proc/version".to_string(), "cannot write there"),
            (s(d).to_string(), "is a directory"),
            (
                "/sys/kernel/mm/transparent_hugepage/enabled".to_string(),
                "sysfs",
            ),
        ] {
            let o = ptlab(&["bench", "fork-4k", "--quick", "--quiet", "--out", &path]).run();
            assert_usage_error(&o, &["--out ", &path, why]);
        }
    });
}

#[test]
fn fuzz_and_calibrate_out_bad_paths() {
    abuse("out-fuzz", |d| {
        let f = d.join("file");
        std::fs::write(&f, "x").unwrap();
        let o = ptlab(&["fuzz", "--steps", "1", "--quiet", "--out", s(&f)]).run();
        assert_usage_error(&o, &["--out ", s(&f), "exists and is not a directory"]);
        let o = ptlab(&["calibrate", "--quick", "--out", "/proc/version"]).run();
        assert_usage_error(&o, &["--out /proc/version", "cannot write there"]);
        let o = ptlab(&["calibrate", "--quick", "--out", s(d)]).run();
        assert_usage_error(&o, &["--out ", "is a directory"]);
    });
}

#[test]
fn show_out_bad_paths_and_missing_parents() {
    abuse("out-show", |d| {
        let scen = common::scenario(d, "a.ptl", "p = mmap 64K\nwrite p 64K\n");
        for (path, why) in [
            ("/proc/version".to_string(), "cannot write there"),
            (s(d).to_string(), "is a directory"),
            (format!("{}/x.html", s(&scen)), "is not a directory"),
        ] {
            let o = ptlab(&["show", s(&scen), "-o", &path]).run();
            assert_usage_error(&o, &["-o ", &path, why]);
        }
        // The rule for a missing parent: it is created, and said so.
        let page = d.join("new/dir/page.html");
        let o = ptlab(&["show", s(&scen), "-o", s(&page)]).run();
        assert_eq!(o.code(), Some(0), "{}", o.describe());
        assert!(o.stderr.contains("created directory"), "{}", o.describe());
        assert!(page.is_file());
    });
}

// ---------------------------------------------------------------------------
// Item 5: a reader that goes away is a normal end.

/// How a run into a pipe whose reader went away ended.
struct PipeOutcome {
    status: ExitStatus,
    /// What the reader read before closing.
    read: String,
    /// stderr, when it was not the same closed pipe.
    stderr: String,
    elapsed: Duration,
}

impl PipeOutcome {
    fn describe(&self) -> String {
        format!(
            "status {:?} (signal {:?}) after {:?}\n--- read\n{}\n--- stderr\n{}",
            self.status,
            self.status.signal(),
            self.elapsed,
            self.read,
            self.stderr
        )
    }
}

/// Runs ptlab with stdout (and with `both`, stderr too) into a pipe. With
/// `lines` = 0 the reader is gone before ptlab starts (every write fails
/// with EPIPE); otherwise it reads that many lines and closes the pipe.
fn into_closed_pipe(args: &[&str], both: bool, lines: usize) -> PipeOutcome {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors from pipe2, owned once each.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let reader = if lines == 0 {
        drop(r);
        None
    } else {
        Some(r)
    };
    let mut cmd = Command::new(common::bin());
    cmd.args(args).env_remove("PTLAB_LOCK_FD");
    if let fd @ 0.. = LOCK_FD.load(Ordering::SeqCst) {
        cmd.env("PTLAB_LOCK_FD", fd.to_string());
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(w.try_clone().unwrap()))
        .stderr(if both {
            Stdio::from(w.try_clone().unwrap())
        } else {
            Stdio::piped()
        });
    // SAFETY: setpgid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn ptlab");
    drop(w);
    let err_thread = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut v = String::new();
            let _ = e.read_to_string(&mut v);
            v
        })
    });
    let mut read = String::new();
    if let Some(r) = reader {
        let mut br = BufReader::new(std::fs::File::from(r));
        for _ in 0..lines {
            if br.read_line(&mut read).unwrap_or(0) == 0 {
                break;
            }
        }
        // The pipe's read end closes here.
    }
    let pid = child.id() as i32;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if start.elapsed() > Duration::from_secs(120) {
            // SAFETY: killing the process group we created.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = err_thread
        .map(|t| t.join().unwrap_or_default())
        .unwrap_or_default();
    PipeOutcome {
        status,
        read,
        stderr,
        elapsed: start.elapsed(),
    }
}

fn assert_quiet_end(o: &PipeOutcome, code: i32) {
    assert_eq!(o.status.code(), Some(code), "{}", o.describe());
    for bad in ["panicked", "Broken pipe", "failed printing"] {
        assert!(!o.stderr.contains(bad), "{}", o.describe());
    }
}

/// A scenario with a lot of output (much more than a pipe buffers).
fn chatty(d: &Path) -> PathBuf {
    common::scenario(
        d,
        "chatty.ptl",
        "p = mmap 2M\nwrite p 2M\nrepeat 300\n  observe maps\nend\n",
    )
}

#[test]
fn run_into_a_closed_pipe() {
    abuse("pipe-run", |d| {
        let scen = chatty(d);
        let o = into_closed_pipe(&["run", s(&scen)], false, 1);
        assert_quiet_end(&o, 0);
        assert!(o.read.starts_with("# observe at"), "{}", o.describe());
        let o = into_closed_pipe(&["run", "--format", "json", s(&scen)], false, 0);
        assert_quiet_end(&o, 0);
        // The exit status is still the run's own.
        let fail = common::scenario(
            d,
            "fail.ptl",
            "p = mmap 4K\nexpect page p none\nwrite p\nexpect page p none\n",
        );
        let o = into_closed_pipe(&["run", s(&fail)], true, 0);
        assert_quiet_end(&o, 1);
        // A usage error with stderr gone: still exit 2, no panic.
        let o = into_closed_pipe(&["run", "/nonexistent.ptl"], true, 0);
        assert_quiet_end(&o, 2);
    });
}

#[test]
fn reproduce_no_live_into_head() {
    // Issue 18: `ptlab reproduce --no-live | head -1` exited 101.
    abuse("pipe-reproduce", |d| {
        let out = d.join("r");
        let o = into_closed_pipe(
            &[
                "reproduce",
                "--no-live",
                "--quick",
                "--quiet",
                "--out",
                s(&out),
            ],
            false,
            1,
        );
        assert_quiet_end(&o, 0);
        // No work lost: the report is written although nobody read stdout.
        assert!(out.join("report.html").is_file());
        assert!(out.join("model.json").is_file());
    });
}

#[test]
fn other_printing_subcommands_into_closed_pipes() {
    abuse("pipe-other", |d| {
        let scen = chatty(d);
        let page = d.join("p.html");
        let res = write_results(d, 1 << 30, 1 << 30);
        let cases: Vec<Vec<String>> = vec![
            vec!["--help".into()],
            vec!["run".into(), "--help".into()],
            vec!["cost".into(), s(&scen).into()],
            vec![
                "cost".into(),
                "--format".into(),
                "json".into(),
                s(&scen).into(),
            ],
            vec!["show".into(), "--list-steps".into(), s(&scen).into()],
            vec!["show".into(), s(&scen).into(), "-o".into(), s(&page).into()],
            vec!["compare".into(), s(&res.0).into(), s(&res.1).into()],
            vec!["restore".into()],
            vec!["bogus-subcommand".into()],
        ];
        for args in cases {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let want = if a[0] == "bogus-subcommand" { 2 } else { 0 };
            for (both, lines) in [(false, 0), (true, 0), (true, 1)] {
                let o = into_closed_pipe(&a, both, lines);
                assert_quiet_end(&o, want);
            }
        }
    });
}

#[test]
fn calibrate_2to1_into_head() {
    // Issue 18: `ptlab calibrate 2>&1 | head -1` sometimes exited 101.
    abuse("pipe-calibrate", |d| {
        let prof = d.join("local.toml");
        let o = into_closed_pipe(&["calibrate", "--quick", "--out", s(&prof)], true, 1);
        assert_quiet_end(&o, 0);
        assert!(
            prof.is_file(),
            "the profile is still written\n{}",
            o.describe()
        );
    });
}

#[test]
fn live_runs_into_closed_pipes_restore_everything() {
    if let Some(why) = common::live_skip() {
        println!("SKIP: {why}");
        return;
    }
    abuse("pipe-live", |d| {
        // Changes THP knobs, then prints with both streams gone.
        let scen = common::scenario(
            d,
            "knobs.ptl",
            "thp 64K always\np = mmap 256K\nwrite p 256K\nrepeat 50\n  observe maps\nend\n",
        );
        let o = into_closed_pipe(&["run", "--backend", "live", s(&scen)], true, 0);
        assert_quiet_end(&o, 0);
        let o = into_closed_pipe(&["diff", s(&scen)], false, 1);
        assert_quiet_end(&o, 0);
        // bench prints while its knob session is open.
        let res = d.join("b.json");
        let o = into_closed_pipe(
            &[
                "bench",
                "fork-thp-pte",
                "--quick",
                "--runs",
                "1",
                "--out",
                s(&res),
            ],
            true,
            0,
        );
        assert_quiet_end(&o, 0);
        assert!(res.is_file(), "{}", o.describe());
    });
}

// ---------------------------------------------------------------------------
// Item 8: results measured differently are not compared silently.

/// Two result files with one case `fork-4k` of these region sizes; the
/// second is 2.31 times slower.
fn write_results(d: &Path, size_a: u64, size_b: u64) -> (PathBuf, PathBuf) {
    let one = |label: &str, size: u64, samples: &[f64]| {
        serde_json::json!({
            "schema": 2, "label": label, "started": "",
            "environment": {"kernel": "6.18", "cpu": "x", "cpus": 2, "ptlab_version": "0"},
            "cases": [{
                "name": "fork-4k", "unit": "ns per fork", "better": "lower",
                "samples": samples, "iterations": 100, "size_bytes": size,
                "layout": "4 KiB pages"
            }]
        })
        .to_string()
    };
    let a = d.join(format!("a-{size_a}.json"));
    let b = d.join(format!("b-{size_b}.json"));
    std::fs::write(&a, one("full", size_a, &[100.0, 101.0, 99.0, 100.5])).unwrap();
    std::fs::write(&b, one("quick", size_b, &[231.0, 230.0, 232.0, 231.5])).unwrap();
    (a, b)
}

#[test]
fn compare_refuses_different_region_sizes() {
    abuse("compare", |d| {
        let (a, b) = write_results(d, 1 << 30, 2 << 20);
        let o = ptlab(&["compare", s(&a), s(&b)]).run();
        assert_usage_error(
            &o,
            &[
                "refusing to compare",
                "fork-4k: size_bytes 1073741824 vs 2097152",
                s(&a),
                s(&b),
                "--allow-incomparable",
            ],
        );
        assert!(o.stdout.is_empty(), "{}", o.describe());
        let o = ptlab(&["compare", "--allow-incomparable", s(&a), s(&b)]).run();
        assert_eq!(o.code(), Some(0), "{}", o.describe());
        assert!(o.stderr.contains("WARNING"), "{}", o.describe());
        assert!(
            o.stdout.contains("!-130.8%! incomparable"),
            "{}",
            o.describe()
        );
        // Same sizes: an ordinary, significant change.
        let (a, b) = write_results(d, 1 << 30, 1 << 30);
        let o = ptlab(&["compare", s(&a), s(&b)]).run();
        assert_eq!(o.code(), Some(0), "{}", o.describe());
        assert!(o.stdout.contains("*-130.8%*"), "{}", o.describe());
        assert!(!o.stderr.contains("WARNING"), "{}", o.describe());
    });
}

// ---------------------------------------------------------------------------
// Item 9: hostile scenarios and options.

/// `ptlab run FILE ARGS...` under the address-space limit.
fn run_file(file: &Path, extra: &[&str]) -> common::Outcome {
    let mut a = vec!["run", s(file)];
    a.extend_from_slice(extra);
    ptlab(&a)
        .as_limit(AS_LIMIT)
        .timeout(Duration::from_secs(60))
        .run()
}

#[test]
fn a_runaway_repeat_is_bounded() {
    // Issue 18: `repeat 1000000000000000000` ran silently forever.
    abuse("repeat", |d| {
        let f = common::scenario(
            d,
            "r.ptl",
            "p = mmap 4K\nrepeat 1000000000000000000\n  write p\nend\n",
        );
        // The default bound: stops by itself, under the memory limit.
        let o = run_file(&f, &[]);
        assert_eq!(o.code(), Some(1), "{}", o.describe());
        assert!(
            o.stdout
                .contains("statement limit reached: 10000000 statements"),
            "{}",
            o.describe()
        );
        assert!(o.stdout.contains("--max-statements"), "{}", o.describe());
        assert!(!o.timed_out);
        // Lower and raise it.
        let o = run_file(&f, &["--max-statements", "1000"]);
        assert_eq!(o.code(), Some(1), "{}", o.describe());
        assert!(
            o.stdout.contains("limit reached: 1000 statements"),
            "{}",
            o.describe()
        );
        let ok = common::scenario(d, "ok.ptl", "p = mmap 4K\nrepeat 600\n  write p\nend\n");
        assert_eq!(run_file(&ok, &["--max-statements", "1000"]).code(), Some(1));
        assert_eq!(run_file(&ok, &["--max-statements", "1202"]).code(), Some(0));
        assert_eq!(run_file(&ok, &["--max-statements", "0"]).code(), Some(0));
        // Empty bodies and nests of repeats count their iterations.
        let empty = common::scenario(d, "e.ptl", "repeat 1000000000000000000\nend\n");
        let o = run_file(&empty, &["--max-statements", "100000"]);
        assert!(
            o.stdout.contains("statement limit reached"),
            "{}",
            o.describe()
        );
        let nest = common::scenario(
            d,
            "n.ptl",
            &format!(
                "{}let x = 1\n{}",
                "repeat 1000\n".repeat(32),
                "end\n".repeat(32)
            ),
        );
        let o = run_file(&nest, &["--max-statements", "100000"]);
        assert!(
            o.stdout.contains("statement limit reached"),
            "{}",
            o.describe()
        );
        // The same bound in the other subcommands that run scenarios.
        let o = ptlab(&["cost", s(&f), "--max-statements", "1000"]).run();
        assert_eq!(o.code(), Some(2), "{}", o.describe());
        assert!(
            o.stderr.contains("statement limit reached"),
            "{}",
            o.describe()
        );
        let o = ptlab(&[
            "show",
            s(&f),
            "-o",
            s(&d.join("r.html")),
            "--max-statements",
            "1000",
        ])
        .run();
        assert!(o.clean_error() || o.code() == Some(0), "{}", o.describe());
        // A bad value is a usage error.
        let o = run_file(&f, &["--max-statements", "-1"]);
        assert_eq!(o.code(), Some(2), "{}", o.describe());
    });
}

#[test]
fn a_long_run_reports_progress_on_stderr() {
    abuse("progress", |d| {
        // 250 million statements and iterations, about 7 s of model work
        // here (50 million took about 4 s before the model's speed-ups of
        // 2026-11 and 1.5 s after): well past the 2 s after which a run
        // reports progress.
        let f = common::scenario(
            d,
            "long.ptl",
            "p = mmap 4K\nrepeat 125000000\n  write p\nend\n",
        );
        let o = run_file(&f, &["--max-statements", "0"]);
        assert_eq!(o.code(), Some(0), "{}", o.describe());
        assert!(
            o.stderr.contains("ptlab: still running")
                && o.stderr
                    .contains("statements and iterations executed (no limit)")
                && o.stderr.contains("done after 250000002 statements"),
            "{}",
            o.describe()
        );
        // Short runs say nothing.
        let f = common::scenario(
            d,
            "short.ptl",
            "p = mmap 4K\nrepeat 100000\n  write p\nend\n",
        );
        let o = run_file(&f, &[]);
        assert_eq!(o.code(), Some(0), "{}", o.describe());
        assert!(o.stderr.is_empty(), "{}", o.describe());
    });
}

#[test]
fn devices_pipes_and_huge_files_are_refused() {
    // Issue 18: `ptlab run /dev/zero` read until memory ran out.
    abuse("input", |d| {
        let o = run_file(Path::new("/dev/zero"), &[]);
        assert_usage_error(&o, &["cannot read scenario '/dev/zero'", "device"]);
        let o = run_file(d, &[]);
        assert_usage_error(&o, &["is a directory"]);
        let o = run_file(Path::new("/nonexistent/x.ptl"), &[]);
        assert_usage_error(&o, &["cannot read scenario", "No such file"]);
        // A pipe without end of file: read up to the limit, then refused.
        let o = ptlab(&["run", "/dev/stdin"])
            .as_limit(AS_LIMIT)
            .stdin(vec![b'\n'; (4 << 20) + 4096])
            .run();
        assert_usage_error(&o, &["larger than 4194304 bytes (4 MiB)"]);
        let big = d.join("big.ptl");
        std::fs::write(&big, vec![b'\n'; (4 << 20) + 1]).unwrap();
        let o = run_file(&big, &[]);
        assert_usage_error(&o, &["larger than 4194304 bytes (4 MiB)"]);
        // A 10 MB line is over the file limit; a 1 MB one over the line limit.
        let line = common::scenario(
            d,
            "line.ptl",
            &format!("let x = 1{}\n", "+1".repeat(5_000_000)),
        );
        let o = run_file(&line, &[]);
        assert_usage_error(&o, &["line.ptl", "larger than 4194304 bytes"]);
        let line = common::scenario(
            d,
            "line1.ptl",
            &format!("let x = 1{}\n", "+1".repeat(500_000)),
        );
        let o = run_file(&line, &[]);
        assert_usage_error(&o, &["line1.ptl:1:1: line is 1000009 bytes long", "64 KiB"]);
        // Binary.
        let bin = d.join("bin.ptl");
        std::fs::write(&bin, [0x7fu8, b'E', b'L', b'F', 0xff, 0xfe, 0, 1]).unwrap();
        let o = run_file(&bin, &[]);
        assert_usage_error(&o, &["not UTF-8 text", "binary"]);
        let nul = d.join("nul.ptl");
        std::fs::write(&nul, [0u8, 1, 2, b'\n']).unwrap();
        let o = run_file(&nul, &[]);
        assert_usage_error(&o, &["nul.ptl:1:1: unexpected character"]);
    });
}

#[test]
fn odd_but_valid_scenarios_run() {
    abuse("valid", |d| {
        // Empty, a byte-order mark, CRLF, and a flat sum of 129 terms
        // (issue 18: "nested too deeply").
        for (name, text) in [
            ("empty.ptl", String::new()),
            ("bom.ptl", "\u{feff}p = mmap 4K\r\nwrite p\r\n".to_string()),
            (
                "sum.ptl",
                format!(
                    "p = mmap (1{}) * 4K\nwrite p\nexpect page p anon\n",
                    "+1".repeat(128)
                ),
            ),
            (
                "longsum.ptl",
                format!("let x = 0{}\n", " + 1".repeat(10_000)),
            ),
        ] {
            let f = common::scenario(d, name, &text);
            let o = run_file(&f, &[]);
            assert_eq!(o.code(), Some(0), "{name}: {}", o.describe());
            assert!(o.stdout.contains("PASS"), "{name}: {}", o.describe());
        }
        // Real nesting is still bounded, as a parse error.
        for (name, text, msg) in [
            (
                "parens.ptl",
                format!("let x = {}1{}\n", "(".repeat(5000), ")".repeat(5000)),
                "nested too deeply",
            ),
            (
                "blocks.ptl",
                format!("{}{}", "repeat 1\n".repeat(100), "end\n".repeat(100)),
                "nested more than 32 deep",
            ),
            (
                "num.ptl",
                "p = mmap 18446744073709551616\n".to_string(),
                "does not fit in 64 bits",
            ),
        ] {
            let f = common::scenario(d, name, &text);
            let o = run_file(&f, &[]);
            assert_usage_error(&o, &[name, msg]);
        }
        // The largest size is the kernel's ENOMEM, a scenario failure.
        let f = common::scenario(d, "max.ptl", "p = mmap 18446744073709551615\n");
        let o = run_file(&f, &[]);
        assert_eq!(o.code(), Some(1), "{}", o.describe());
        assert!(o.stdout.contains("ENOMEM"), "{}", o.describe());
    });
}

#[test]
fn unknown_params_are_usage_errors_everywhere() {
    // Issue 18: `run --param nosuch=1` was a runtime error (exit 1).
    abuse("params", |d| {
        let f = common::scenario(d, "p.ptl", "param size = 64K\nparam n = 2\np = mmap size\n");
        let html = d.join("p.html");
        let runs: [Vec<&str>; 3] = [
            vec!["run", s(&f)],
            vec!["show", s(&f), "-o", s(&html)],
            vec!["cost", s(&f)],
        ];
        for base in &runs {
            let mut a = base.clone();
            a.extend(["--param", "nosuch=1"]);
            let o = ptlab(&a).run();
            assert_usage_error(
                &o,
                &[
                    "--param nosuch: the scenario declares no such parameter",
                    "it declares: size, n",
                ],
            );
            if base[0] == "show" {
                assert!(!html.exists(), "show wrote a page for a usage error");
            }
            for bad in [
                "size=",
                "size=zz",
                "=1",
                "size",
                "size=99999999999999999999T",
            ] {
                let mut a = base.clone();
                a.extend(["--param", bad]);
                let o = ptlab(&a).run();
                assert_usage_error(&o, &["--param"]);
            }
            let mut a = base.clone();
            a.extend(["--param", "size=128K"]);
            assert_eq!(ptlab(&a).run().code(), Some(0), "{a:?}");
        }
        let o = ptlab(&["run", "--arch", "sparc", s(&f)]).run();
        assert_usage_error(&o, &["sparc", "x86_64, arm64"]);
        let o = ptlab(&["cost", "--arch", "sparc", s(&f)]).run();
        assert_usage_error(&o, &["sparc"]);
    });
}

#[test]
fn other_inputs_are_refused_before_reading_forever() {
    abuse("inputs-other", |d| {
        let scen = common::scenario(d, "a.ptl", "p = mmap 4K\n");
        let out = d.join("r");
        let cases: [(Vec<&str>, &str); 6] = [
            (
                vec!["compare", "/dev/zero", "/dev/zero"],
                "cannot read result file '/dev/zero'",
            ),
            (
                vec!["cost", s(&scen), "--profile", "/dev/zero"],
                "cannot read profile '/dev/zero'",
            ),
            (
                vec!["calibrate", "--check", "/dev/zero"],
                "cannot read profile '/dev/zero'",
            ),
            (
                vec!["reproduce", "--from", "/dev/zero", "--out", s(&out)],
                "cannot read result file '/dev/zero'",
            ),
            (
                vec![
                    "reproduce",
                    "--quick",
                    "--profile",
                    "/dev/zero",
                    "--out",
                    s(&out),
                ],
                "--profile /dev/zero",
            ),
            (
                vec!["fuzz", "--ops", "1000000000", "--steps", "1"],
                "not in 1..=10000",
            ),
        ];
        for (args, msg) in cases {
            let o = ptlab(&args).as_limit(AS_LIMIT).run();
            assert_usage_error(&o, &[msg]);
        }
        // Inputs are checked before the output directory is even created.
        assert!(!out.exists());
        let big = d.join("big.json");
        std::fs::write(&big, vec![b' '; (64 << 20) + 1]).unwrap();
        let o = ptlab(&["compare", s(&big), s(&big)])
            .as_limit(AS_LIMIT)
            .run();
        assert_usage_error(&o, &["larger than 67108864 bytes"]);
    });
}

#[test]
fn a_full_disk_behind_stdout_is_an_error_not_a_panic() {
    // Unlike a closed pipe, a failed write to a file is lost output: exit 2.
    abuse("dev-full", |d| {
        let scen = common::scenario(d, "a.ptl", "p = mmap 4K\nobserve maps\n");
        let out = d.join("r");
        for args in [
            vec!["run", s(&scen)],
            vec![
                "reproduce",
                "--no-live",
                "--quick",
                "--quiet",
                "--out",
                s(&out),
            ],
        ] {
            let mut r = ptlab(&args);
            r.command().stdout(
                std::fs::File::options()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            );
            // Run::run sets its own stdout: spawn by hand.
            let o = r
                .command()
                .stderr(Stdio::piped())
                .output()
                .expect("spawn ptlab");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("No space left on device"), "{args:?}: {err}");
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
        assert!(
            out.join("report.html").is_file(),
            "the files are still written"
        );
    });
}
