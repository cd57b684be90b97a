//! A swap file created by a live run (`swap SIZE`) is swapped off and
//! deleted on every exit path: normal end, a failed expectation, SIGTERM
//! and SIGINT (the signal handler), and SIGKILL (the journal is restored by
//! the next ptlab start or by `ptlab restore`). The same for `swap SIZE
//! blockdev`, whose loop device must be gone too. Runs the real binary while
//! holding the knob lock, which the children share through PTLAB_LOCK_FD.

mod common;

use ptlab_live::knobs::{self, ThpLock};
use ptlab_live::swapfile;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Swaps off and removes anything left in the test's swap directory.
struct Safety(PathBuf);
impl Drop for Safety {
    fn drop(&mut self) {
        if let Ok(rd) = std::fs::read_dir(&self.0) {
            for e in rd.flatten() {
                let _ = swapfile::remove(&e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn scenario(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write scenario");
    p.to_str().expect("utf-8").to_string()
}

fn ptlab(lock: &ThpLock, swap_dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ptlab"));
    c.args(args)
        .env("PTLAB_LOCK_FD", lock.raw_fd().to_string())
        .env("PTLAB_SWAP_DIR", swap_dir);
    common::default_signals(&mut c);
    c
}

/// Wait until `child` has its swap file active and journaled.
fn wait_for_swap(child: &mut Child, path: &Path) {
    let t = Instant::now();
    while !swapfile::is_active(path) || !knobs::journal_path().exists() {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "ptlab exited before enabling its swap file"
        );
        assert!(t.elapsed() < Duration::from_secs(60), "swap never enabled");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// No swap area left for the file at `path`, no file, and no loop device
/// over any file of the test's swap directory.
fn gone(path: &Path) -> bool {
    let dir = path.parent().expect("dir").to_string_lossy().into_owned();
    let loops = std::fs::read_dir("/sys/block")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok())
                .any(|b| b.contains(&dir))
        })
        .unwrap_or(false);
    !path.exists() && !swapfile::is_active(path) && !loops
}

#[test]
fn swap_file_is_removed_on_every_exit_path() {
    exit_paths(
        "swap_file_is_removed_on_every_exit_path",
        swapfile::SwapKind::File,
    );
}

#[test]
fn blockdev_swap_is_removed_on_every_exit_path() {
    if !Path::new("/dev/loop-control").exists() {
        eprintln!(
            "SKIP: blockdev_swap_is_removed_on_every_exit_path: no /dev/loop-control (loop driver)"
        );
        return;
    }
    exit_paths(
        "blockdev_swap_is_removed_on_every_exit_path",
        swapfile::SwapKind::BlockDev,
    );
}

fn exit_paths(test: &str, kind: swapfile::SwapKind) {
    if ptlab_live::skip_live_test(test, "swapon needs root") {
        return;
    }
    let lock = ThpLock::acquire().expect("knob lock");
    // SAFETY: clearing FD_CLOEXEC on our own descriptor.
    unsafe { libc::fcntl(lock.raw_fd(), libc::F_SETFD, 0) };
    let swap_dir = PathBuf::from(format!(
        "/var/tmp/ptlab-swap-test-{}-{}",
        std::process::id(),
        kind.name()
    ));
    let _safety = Safety(swap_dir.clone());
    // Can this filesystem hold a swap area of this kind at all?
    let probe = swap_dir.join("ptlab-probe.swap");
    if let Err(e) = swapfile::create(&probe, 1 << 20, kind, &mut |_| {}) {
        eprintln!(
            "SKIP: {test}: cannot enable a {} swap area in {}: {e}",
            kind.name(),
            swap_dir.display()
        );
        return;
    }
    swapfile::remove(&probe).expect("remove probe swap file");
    assert!(gone(&probe), "probe left behind");
    let tmp = std::env::temp_dir().join(format!(
        "ptlab-swap-test-{}-{}",
        std::process::id(),
        kind.name()
    ));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    let word = match kind {
        swapfile::SwapKind::File => "",
        swapfile::SwapKind::BlockDev => " blockdev",
    };
    let busy = scenario(
        &tmp,
        "busy.ptl",
        &format!(
            "swap 16M{word}\np = mmap 64K at 0x100000000000 noreplace\nwrite p 64K\n\
             madvise p 64K pageout\nexpect page p 64K swapped\nrepeat 20000000\n  read p + 4K\nend\n"
        ),
    );
    let spawn = |lock: &ThpLock| -> (Child, PathBuf) {
        let child = ptlab(lock, &swap_dir, &["run", "--backend", "live", &busy])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ptlab");
        let path = swap_dir.join(format!("ptlab-{}.swap", child.id()));
        (child, path)
    };

    // 1. SIGKILL: the swap file stays active and journaled ...
    let (mut child, path) = spawn(&lock);
    wait_for_swap(&mut child, &path);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    assert!(swapfile::is_active(&path), "still enabled after SIGKILL");
    assert!(knobs::journal_path().exists());
    // ... and the next ptlab start (any command) swaps it off and deletes it.
    let basic = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/examples/basic.ptl"
    );
    let out = ptlab(&lock, &swap_dir, &["run", basic])
        .output()
        .expect("run ptlab");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("swapped off and deleted"),
        "stderr: {stderr}"
    );
    assert!(
        gone(&path),
        "{} survived the restore at start",
        path.display()
    );
    assert!(!knobs::journal_path().exists());

    // 2. SIGKILL, then an explicit `ptlab restore`.
    let (mut child, path) = spawn(&lock);
    wait_for_swap(&mut child, &path);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let out = ptlab(&lock, &swap_dir, &["restore"])
        .output()
        .expect("ptlab restore");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&*path.to_string_lossy()));
    assert!(gone(&path));
    assert!(!knobs::journal_path().exists());

    // 3. SIGTERM and SIGINT: the handler swaps off and deletes before dying.
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let (mut child, path) = spawn(&lock);
        wait_for_swap(&mut child, &path);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = child.wait().expect("wait");
        assert!(!st.success());
        assert!(gone(&path), "after signal {sig}");
        assert!(!knobs::journal_path().exists(), "after signal {sig}");
    }

    // 4. A normal end and a failed expectation both clean up.
    for (name, body, ok) in [
        (
            "ok.ptl",
            "p = mmap 16K\nwrite p 16K\nmadvise p 16K pageout\nexpect page p 16K swapped\n",
            true,
        ),
        (
            "fail.ptl",
            "p = mmap 16K\nwrite p 16K\nmadvise p 16K pageout\nexpect page p none\n",
            false,
        ),
    ] {
        let f = scenario(&tmp, name, &format!("swap 8M{word}\n{body}"));
        let out = ptlab(&lock, &swap_dir, &["run", "--backend", "live", &f])
            .output()
            .expect("run");
        assert_eq!(
            out.status.success(),
            ok,
            "{name}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let left: Vec<_> = std::fs::read_dir(&swap_dir)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{name}: left {left:?}");
        assert!(!knobs::journal_path().exists(), "{name}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
