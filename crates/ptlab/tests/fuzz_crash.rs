//! A `ptlab fuzz` campaign killed with SIGKILL in the middle of a knob
//! epoch (its policy set, preferably while a case's swap area is active)
//! leaves the knobs changed and its journal behind; the next ptlab start
//! (here `ptlab fuzz --merge` of the killed campaign's results file) puts
//! every THP `enabled` knob back, swaps off and deletes the swap file, and
//! reads the results file up to its last complete line. Runs the real
//! binary while holding the knob lock, which the children share through
//! PTLAB_LOCK_FD; skips (printing `SKIP: reason`) without root.

use ptlab_live::knobs::{self, ThpLock};
use ptlab_live::swapfile;
use ptlab_model::{ThpKnob, ThpMode};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TEST: &str = "a_killed_fuzz_campaign_is_restored_by_the_next_start";

fn all_knobs() -> Vec<ThpKnob> {
    std::iter::once(ThpKnob::TopLevel)
        .chain((2..=9).map(ThpKnob::Size))
        .filter(|k| knobs::knob_path(*k).is_ok_and(|p| p.exists()))
        .collect()
}

fn knob_values(ks: &[ThpKnob]) -> Vec<Option<ThpMode>> {
    ks.iter().map(|k| knobs::current_mode(*k).ok()).collect()
}

/// Puts back the knobs, swaps off and removes anything in the test's swap
/// directory, and removes a journal, if the test fails half-way.
struct Safety {
    knobs: Vec<(ThpKnob, Option<ThpMode>)>,
    swap_dir: PathBuf,
    out: PathBuf,
}

impl Drop for Safety {
    fn drop(&mut self) {
        for (k, v) in &self.knobs {
            if let (Some(v), Ok(p)) = (v, knobs::knob_path(*k)) {
                if knobs::current_mode(*k).ok() != Some(*v) {
                    let _ = std::fs::write(p, v.name());
                }
            }
        }
        if let Ok(rd) = std::fs::read_dir(&self.swap_dir) {
            for e in rd.flatten() {
                let _ = swapfile::remove(&e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.swap_dir);
        let _ = std::fs::remove_file(knobs::journal_path());
        let _ = std::fs::remove_dir_all(&self.out);
    }
}

/// The swap files of `dir` that are active swap areas now.
fn active_swap(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| swapfile::is_active(p))
                .collect()
        })
        .unwrap_or_default()
}

fn ptlab(lock: &ThpLock, swap_dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ptlab"));
    c.args(args)
        .env("PTLAB_LOCK_FD", lock.raw_fd().to_string())
        .env("PTLAB_SWAP_DIR", swap_dir);
    c
}

#[test]
fn a_killed_fuzz_campaign_is_restored_by_the_next_start() {
    if ptlab_live::skip_live_test(TEST, "THP knob writes and swapon need root") {
        return;
    }
    let lock = ThpLock::acquire().expect("knob lock");
    // SAFETY: clearing FD_CLOEXEC on our own descriptor.
    unsafe { libc::fcntl(lock.raw_fd(), libc::F_SETFD, 0) };
    let ks = all_knobs();
    let original = knob_values(&ks);
    let swap_dir = PathBuf::from(format!("/var/tmp/ptlab-fuzz-crash-{}", std::process::id()));
    let out = std::env::temp_dir().join(format!("ptlab-fuzz-crash-{}", std::process::id()));
    let _safety = Safety {
        knobs: ks.iter().copied().zip(original.iter().copied()).collect(),
        swap_dir: swap_dir.clone(),
        out: out.clone(),
    };
    assert!(
        !knobs::journal_path().exists(),
        "a journal is left from before the test: {}",
        knobs::journal_path().display()
    );
    let out_s = out.to_str().expect("utf-8");
    let mut child = ptlab(
        &lock,
        &swap_dir,
        &[
            "fuzz", "--seed", "20251128", "--time", "120", "--jobs", "2", "-q", "-o", out_s,
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn ptlab fuzz");
    let results = out.join("results-20251128.jsonl");
    // Wait until the campaign is inside an epoch (a knob differs from the
    // machine's value) with some cases done; prefer a moment when a case's
    // swap area is active too (about a third of the cases make one).
    let t = Instant::now();
    let mut with_swap = false;
    loop {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "ptlab fuzz ended before the test could kill it"
        );
        let lines = std::fs::read_to_string(&results)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        let changed = knob_values(&ks) != original;
        if changed && lines >= 4 {
            if !active_swap(&swap_dir).is_empty() {
                with_swap = true;
                break;
            }
            if t.elapsed() > Duration::from_secs(40) {
                break;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "the campaign never changed a knob (epoch policies) with 4 cases done"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let left_swap = active_swap(&swap_dir);
    eprintln!(
        "{TEST}: killed after {:.1} s, knobs changed, {} swap area(s) active{}",
        t.elapsed().as_secs_f64(),
        left_swap.len(),
        if with_swap {
            ""
        } else {
            " (none was active at the kill: the swap part is not exercised this time)"
        }
    );
    // The kill left the knobs changed and the journal behind ...
    assert_ne!(
        knob_values(&ks),
        original,
        "the kill left the knobs changed"
    );
    assert!(knobs::journal_path().exists(), "the journal stayed");
    // ... and the next ptlab start restores them and the swap area, and
    // reads the results file up to its last complete line.
    let text = std::fs::read_to_string(&results).expect("results file");
    let whole = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    let records = ptlab_live::fuzz::parse_results("r", whole).expect("whole lines parse");
    assert!(!records.is_empty());
    let o = ptlab(
        &lock,
        &swap_dir,
        &["fuzz", "--merge", results.to_str().expect("utf-8")],
    )
    .output()
    .expect("ptlab fuzz --merge");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "--merge accepts the killed campaign's file: {:?}\n{stdout}\n{stderr}",
        o.status
    );
    assert!(
        stderr.contains("from a stale journal left by pid"),
        "the start restored the journal: {stderr}"
    );
    assert!(
        stdout.contains(&format!("{} scenarios of seed 20251128", records.len())),
        "every whole line is counted: {stdout}"
    );
    assert_eq!(knob_values(&ks), original, "every knob is back");
    assert!(!knobs::journal_path().exists(), "the journal is gone");
    for p in &left_swap {
        assert!(
            !swapfile::is_active(p) && !p.exists(),
            "{} swapped off and deleted",
            p.display()
        );
    }
    assert!(active_swap(&swap_dir).is_empty());
    // The same file cut in the middle of its last record (as a kill during
    // the write would leave it) is read up to the line before.
    let cut = out.join("cut.jsonl");
    let last = whole.trim_end().rsplit('\n').next().unwrap_or("");
    std::fs::write(&cut, format!("{whole}{}", &last[..last.len() / 2])).expect("write cut file");
    let o = ptlab(
        &lock,
        &swap_dir,
        &["fuzz", "--merge", cut.to_str().expect("utf-8")],
    )
    .output()
    .expect("ptlab fuzz --merge");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{stdout}");
    assert!(
        stdout.contains(&format!("{} scenarios of seed 20251128", records.len()))
            && stdout.contains("the last line is incomplete"),
        "{stdout}"
    );
}
