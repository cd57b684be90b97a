//! The `ptlab calibrate` child of `ptlab reproduce` dies with it (issue 18,
//! item 3): before, a SIGKILLed reproduce left its calibration running,
//! which then wrote `local-profile.toml` into the output directory of a
//! report nobody would finish. Slow (reproduce --quick measures for ~15 s
//! before it calibrates), so it lives here rather than in the abuse suite.
//! Runs the real binary holding the knob lock; the child shares it through
//! PTLAB_LOCK_FD.

use ptlab_live::knobs::ThpLock;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Pids and command lines of the processes running the ptlab binary.
fn ptlab_processes() -> Vec<(i32, String)> {
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_ptlab")).expect("ptlab binary");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(t) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
            continue;
        };
        let t = t
            .to_string_lossy()
            .trim_end_matches(" (deleted)")
            .to_string();
        // A worker exec'd from its memfd names the ptlab that started it
        // as its third argument (crates/ptlab-live/src/worker_exe.rs).
        let exec_worker = t.starts_with("/memfd:ptlab-worker")
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| b.split(|&c| c == 0).nth(2) == Some(exe.as_os_str().as_encoded_bytes()))
                .unwrap_or(false);
        if Path::new(&t) == exe || exec_worker {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            out.push((pid, cmd));
        }
    }
    out
}

#[test]
fn reproduce_calibration_dies_with_reproduce() {
    if ptlab_live::skip_live_test(
        "reproduce_calibration_dies_with_reproduce",
        "needs root (live bench)",
    ) {
        return;
    }
    let lock = ThpLock::acquire().expect("knob lock");
    // SAFETY: clearing FD_CLOEXEC on our own descriptor.
    unsafe { libc::fcntl(lock.raw_fd(), libc::F_SETFD, 0) };
    let dir = std::env::temp_dir().join(format!("ptlab-orphans-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args(["reproduce", "--quick", "--quiet", "--out"])
        .arg(&dir)
        .env("PTLAB_LOCK_FD", lock.raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ptlab reproduce");
    let t = Instant::now();
    let calibrating = loop {
        if ptlab_processes()
            .iter()
            .any(|(_, c)| c.contains(" calibrate ") && c.contains("--name local"))
        {
            break true;
        }
        if child.try_wait().expect("try_wait").is_some() || t.elapsed() > Duration::from_secs(120) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if !calibrating {
        let _ = child.kill();
        let _ = child.wait();
        eprintln!(
            "SKIP: reproduce_calibration_dies_with_reproduce: reproduce never started its \
             calibration"
        );
        return;
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    // Seen late on a loaded machine, the calibration may have finished
    // (and written its profile) before the kill: then only the orphan
    // check below says something.
    let written_before_kill = dir.join("local-profile.toml").exists();
    // The calibration and its worker go at once (a calibration that
    // outlived its parent would finish and write the profile in ~1 s).
    let t = Instant::now();
    loop {
        let left = ptlab_processes();
        if left.is_empty() {
            break;
        }
        if t.elapsed() > Duration::from_secs(2) {
            for (pid, _) in &left {
                // SAFETY: killing a leaked process of the binary under test.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            panic!("left behind: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(3));
    if written_before_kill {
        eprintln!(
            "note: reproduce_calibration_dies_with_reproduce: the calibration had written its \
             profile before reproduce was killed; only the orphan check applied"
        );
    } else {
        assert!(
            !dir.join("local-profile.toml").exists(),
            "a profile was written after reproduce died"
        );
    }
    // The SIGKILL left the bench's journal (if it changed knobs): the next
    // start puts it back.
    let out = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .arg("restore")
        .env("PTLAB_LOCK_FD", lock.raw_fd().to_string())
        .output()
        .expect("ptlab restore");
    assert!(out.status.success(), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
