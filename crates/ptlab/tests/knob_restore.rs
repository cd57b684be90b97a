//! THP knobs changed by a live run come back on every exit path: SIGKILL
//! (the journal is restored by the next ptlab start or `ptlab restore`),
//! SIGTERM (the signal handler restores them). Runs the real binary while
//! holding the knob lock; the child shares it through PTLAB_LOCK_FD.

mod common;

use ptlab_live::knobs::{self, ThpLock};
use ptlab_model::{ThpKnob, ThpMode};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KNOB: ThpKnob = ThpKnob::Size(4); // hugepages-64kB/enabled

/// Puts the knob back if the test fails half-way.
struct Safety(ThpMode);
impl Drop for Safety {
    fn drop(&mut self) {
        if knobs::current_mode(KNOB) != Ok(self.0) {
            let p = knobs::knob_path(KNOB).expect("64kB knob");
            let _ = std::fs::write(p, self.0.name());
        }
        let _ = std::fs::remove_file(knobs::journal_path());
    }
}

fn busy_scenario() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ptlab-knob-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join("busy.ptl");
    std::fs::write(
        &p,
        "thp 64K always\np = mmap 64K at 0x100000000000 noreplace\nrepeat 20000000\n  read p\nend\n",
    )
    .expect("write scenario");
    p
}

fn ptlab(lock: &ThpLock, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ptlab"));
    c.args(args).env("PTLAB_LOCK_FD", lock.raw_fd().to_string());
    common::default_signals(&mut c);
    c
}

/// A live run of `scenario`, once it has changed the knob and journaled it.
fn live_run_changing_the_knob(lock: &ThpLock, scenario: &str) -> Child {
    let mut child = ptlab(lock, &["run", "--backend", "live", scenario])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ptlab");
    wait_for_change(&mut child);
    child
}

fn wait_for_change(child: &mut Child) {
    let t = Instant::now();
    while knobs::current_mode(KNOB) != Ok(ThpMode::Always) || !knobs::journal_path().exists() {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "ptlab exited before changing the knob"
        );
        assert!(t.elapsed() < Duration::from_secs(20), "knob never changed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn knobs_come_back_after_sigkill_and_sigterm() {
    if ptlab_live::skip_live_test(
        "knobs_come_back_after_sigkill_and_sigterm",
        "changing THP knobs needs root",
    ) {
        return;
    }
    let lock = ThpLock::acquire().expect("knob lock");
    // Let children inherit the locked descriptor.
    // SAFETY: clearing FD_CLOEXEC on our own descriptor.
    unsafe { libc::fcntl(lock.raw_fd(), libc::F_SETFD, 0) };
    let original = knobs::current_mode(KNOB).expect("64kB knob readable");
    assert_ne!(
        original,
        ThpMode::Always,
        "test needs 64kB != always to start"
    );
    let _safety = Safety(original);
    let scenario = busy_scenario();
    let scenario = scenario.to_str().expect("utf-8 path");

    // 1. SIGKILL: knobs stay changed, the journal stays behind ...
    let mut child = live_run_changing_the_knob(&lock, scenario);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    assert_eq!(knobs::current_mode(KNOB), Ok(ThpMode::Always));
    assert!(knobs::journal_path().exists());
    // ... and the next ptlab start (any command) restores them.
    let basic = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/examples/basic.ptl"
    );
    let out = ptlab(&lock, &["run", basic]).output().expect("run ptlab");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("restored 1 THP knob"), "stderr: {stderr}");
    assert_eq!(knobs::current_mode(KNOB), Ok(original));
    assert!(!knobs::journal_path().exists());

    // 2. SIGKILL, then an explicit `ptlab restore`.
    let mut child = live_run_changing_the_knob(&lock, scenario);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let out = ptlab(&lock, &["restore"]).output().expect("ptlab restore");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("hugepages-64kB/enabled"));
    assert_eq!(knobs::current_mode(KNOB), Ok(original));
    assert!(!knobs::journal_path().exists());

    // 3. SIGTERM: the handler restores before the process dies.
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut child = live_run_changing_the_knob(&lock, scenario);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = child.wait().expect("wait");
        assert!(!st.success());
        assert_eq!(
            knobs::current_mode(KNOB),
            Ok(original),
            "after signal {sig}"
        );
        assert!(!knobs::journal_path().exists(), "after signal {sig}");
    }
}

/// Puts the knob back and removes the private lock and state directory of
/// [`a_waiter_restores_the_journal_of_a_holder_killed_while_it_waits`].
struct WaitSafety {
    original: ThpMode,
    dir: PathBuf,
    pids: Vec<u32>,
}
impl Drop for WaitSafety {
    fn drop(&mut self) {
        for pid in &self.pids {
            // SAFETY: killing children this test started, by pid.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        if knobs::current_mode(KNOB) != Ok(self.original) {
            let p = knobs::knob_path(KNOB).expect("64kB knob");
            let _ = std::fs::write(p, self.original.name());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Two ptlab processes contend for one knob lock (a private lock file and
/// state directory, `PTLAB_LOCK_FILE` / `PTLAB_STATE_DIR`; the test itself
/// holds the machine's knob lock throughout, so no other live run writes a
/// knob meanwhile). The holder sets `64K always` and is SIGKILLed while the
/// waiter waits for the lock; the waiter, once it has the lock, restores
/// the holder's journal *before* its own session journals the knob
/// (`knobs::restore_left_by_holder`), so when it ends the knob is the
/// machine's original value, not the `always` the holder left. Without
/// that rule the waiter's journal would record `always` as the original
/// and put it back at its end.
#[test]
fn a_waiter_restores_the_journal_of_a_holder_killed_while_it_waits() {
    const TEST: &str = "a_waiter_restores_the_journal_of_a_holder_killed_while_it_waits";
    if ptlab_live::skip_live_test(TEST, "changing THP knobs needs root") {
        return;
    }
    let _machine_lock = ThpLock::acquire().expect("knob lock");
    let original = knobs::current_mode(KNOB).expect("64kB knob readable");
    assert_ne!(
        original,
        ThpMode::Always,
        "test needs 64kB != always to start"
    );
    let dir = std::env::temp_dir().join(format!("ptlab-lock-wait-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut safety = WaitSafety {
        original,
        dir: dir.clone(),
        pids: Vec::new(),
    };
    let lock_file = dir.join("thp.lock");
    let state = dir.join("state");
    let journal = state.join("thp-journal.json");
    let holder_ptl = busy_scenario();
    let waiter_ptl = dir.join("waiter.ptl");
    std::fs::write(
        &waiter_ptl,
        "thp 64K madvise\np = mmap 64K\nwrite p\nobserve\n",
    )
    .expect("write scenario");
    let private = |args: &[std::ffi::OsString], stderr: Stdio| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ptlab"));
        c.args(args)
            .env_remove("PTLAB_LOCK_FD")
            .env("PTLAB_LOCK_FILE", &lock_file)
            .env("PTLAB_STATE_DIR", &state)
            .stdout(Stdio::null())
            .stderr(stderr);
        c
    };
    let live = |p: &PathBuf| -> Vec<std::ffi::OsString> {
        vec!["run".into(), "--backend".into(), "live".into(), p.into()]
    };

    // The holder takes the private lock and sets 64K always.
    let mut holder = private(&live(&holder_ptl), Stdio::null())
        .spawn()
        .expect("spawn holder");
    safety.pids.push(holder.id());
    let t = Instant::now();
    while knobs::current_mode(KNOB) != Ok(ThpMode::Always) || !journal.exists() {
        assert!(
            holder.try_wait().expect("try_wait").is_none(),
            "the holder exited before changing the knob"
        );
        assert!(t.elapsed() < Duration::from_secs(20), "knob never changed");
        std::thread::sleep(Duration::from_millis(10));
    }

    // The waiter starts (its start-up restore finds the journal in use)
    // and waits for the lock.
    let waiter_err = dir.join("waiter.stderr");
    let mut waiter = private(
        &live(&waiter_ptl),
        Stdio::from(std::fs::File::create(&waiter_err).expect("stderr file")),
    )
    .spawn()
    .expect("spawn waiter");
    safety.pids.push(waiter.id());
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(&waiter_err).unwrap_or_default();
        if text.contains("waiting for the THP knob lock") {
            break;
        }
        assert!(
            waiter.try_wait().expect("try_wait").is_none(),
            "the waiter exited without waiting: {text}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the waiter never said it waits: {text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Still the holder's: the waiter has not touched knob or journal.
    assert_eq!(knobs::current_mode(KNOB), Ok(ThpMode::Always));
    assert!(journal.exists());

    // SIGKILL the holder: no handler runs, the knob stays `always` and the
    // journal stays behind (its worker dies with it and releases the lock).
    holder.kill().expect("SIGKILL");
    holder.wait().expect("wait holder");
    let st = waiter.wait().expect("wait waiter");
    let text = std::fs::read_to_string(&waiter_err).unwrap_or_default();
    assert!(st.success(), "waiter failed: {text}");
    assert_eq!(
        knobs::current_mode(KNOB),
        Ok(original),
        "the waiter put back what its own journal recorded instead of the machine's value; \
         stderr: {text}"
    );
    assert!(text.contains("got the THP knob lock"), "stderr: {text}");
    assert!(text.contains("restored 1 THP knob"), "stderr: {text}");
    assert!(!journal.exists(), "journal left behind; stderr: {text}");
}
