//! Abuse: observing huge sparse mappings (issue 18, item 1).
//!
//! `p = mmap 127T noreserve` + `observe` used to cost ~40 bytes per
//! *virtual* page on the model (a 10 GiB allocation, then an abort) and
//! ~20 bytes per page in the live observer (the machine's OOM killer).
//! Observation now costs in proportion to what is populated: a run of
//! not-present pages is one record, the model walks its page tables and
//! the live observer asks PAGEMAP_SCAN where anything is mapped first.
//!
//! Every run here is bounded so that a regression fails the test instead
//! of taking the machine down, and the bound is the memory target itself:
//! model-only runs (and `diff`, whose live side cannot map 127 TiB) run
//! under `RLIMIT_AS` = 48 MiB, so ptlab's whole address space, and with it
//! its RSS, stays under the 50 MB target (ptlab needs < 8 MiB; the old
//! observer's 10 GiB allocation for 127 TiB fails at once). Live runs, whose
//! worker needs 64 TiB of *address space*, run in a memory cgroup limited
//! to 64 MiB without swap, and its peak must stay under 50 MB. Each test
//! also checks the result, the CPU time of ptlab and its workers (< 1 s,
//! the target), no leaked process, and THP knobs, swap areas and journal
//! as before (holding the machine-wide knob lock, shared with the ptlab it
//! runs, so that no other live run changes them in between).

use crate::common::{self, ptlab, MemCgroup, Outcome, Run, Usage};
use std::os::unix::process::CommandExt;
use std::time::Duration;

/// Target: observing a huge empty mapping uses less than this.
const MEM_BUDGET: u64 = 50 << 20;
/// Target: ... and less than this much CPU time.
const CPU_BUDGET: Duration = Duration::from_secs(1);
/// Address-space limit for model-only runs: below the memory target.
const AS_LIMIT: u64 = 48 << 20;
/// Memory limit of the cgroup live runs are confined to.
const CGROUP_LIMIT: u64 = 64 << 20;

/// 127 TiB, nothing populated: the model places it at 0xfff0000000.
const EMPTY_127T: &str = "\
p = mmap 127T noreserve
observe maps smaps pages
expect page p 64G none
expect page p + 127T - 64G 64G none
";

/// 1 TiB with pages at both ends (the model places it at 0x7efff0000000).
const ENDS_1T: &str = "\
p = mmap 1T noreserve
write p
write p + 4K tag=7
read p + 1T - 8K
write p + 1T - 4K
observe smaps pages
expect page p 8K anon order=0 X AX cnt=1
expect page p + 8K 64G none
expect page p + 1T - 64G 64G - 8K none
expect page p + 1T - 8K zero
expect page p + 1T - 4K anon tag=p + 1T - 4K
";

/// The same on the live kernel, 64 TiB (the largest hole a forked ptlab
/// worker has is below its PIE image, ~85 TiB up: 127 TiB does not fit).
/// Order-0 pages only, whatever the machine's THP knobs say.
const ENDS_64T: &str = "\
thp enabled never
thp 16K never
thp 32K never
thp 64K never
thp 128K never
thp 256K never
thp 512K never
thp 1M never
p = mmap 64T noreserve
write p
read p + 32T
write p + 64T - 4K
observe maps smaps pages
expect page p anon tag=p
expect page p + 4K 64G none
expect page p + 32T zero
expect page p + 32T + 4K 64G none
expect page p + 64T - 4K anon tag=p + 64T - 4K
";

/// The lines of the `-- pages` section of a text observation.
fn page_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .skip_while(|l| *l != "-- pages")
        .skip(1)
        .take_while(|l| !l.starts_with("--") && !l.starts_with("PASS") && !l.starts_with("FAIL"))
        .collect()
}

/// The checks every run here ends with. (`Usage::max_rss` also counts the
/// forked copy of this test process before the exec, so it is printed,
/// not asserted: the memory bound is `RLIMIT_AS` or the cgroup.)
fn assert_cheap(what: &str, o: &Outcome, u: &Usage) {
    assert!(!o.timed_out, "{what}: timed out\n{}", o.describe());
    assert!(
        u.cpu < CPU_BUDGET,
        "{what}: {:?} of CPU, budget {CPU_BUDGET:?}\n{}",
        u.cpu,
        o.describe()
    );
    eprintln!(
        "{what}: {:?} wall, {:?} CPU, ru_maxrss {} KiB",
        o.elapsed,
        u.cpu,
        u.max_rss >> 10
    );
}

/// The machine-wide THP knob lock, held by the test for a before/after
/// comparison of global state and handed to the ptlab it runs
/// (`PTLAB_LOCK_FD`), which shares it instead of waiting. `None` when the
/// lock cannot be taken (not root): nobody can change knobs then anyway.
struct KnobLock(Option<ptlab_live::knobs::ThpLock>);

impl KnobLock {
    fn take() -> KnobLock {
        KnobLock(ptlab_live::knobs::ThpLock::acquire().ok())
    }

    /// `run` with the lock: only this child inherits the descriptor (the
    /// close-on-exec flag is cleared in the child alone, so that ptlab
    /// processes other tests start meanwhile do not keep the lock held).
    fn pass(&self, mut run: Run) -> Run {
        let Some(l) = &self.0 else {
            return run;
        };
        let fd = l.raw_fd();
        // SAFETY: fcntl on a descriptor of the child, between fork and exec.
        unsafe {
            run.command().pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        run.env("PTLAB_LOCK_FD", &fd.to_string())
    }
}

/// Runs `args` under the knob lock and `RLIMIT_AS`, checking global state
/// before and after.
fn run_model(what: &str, args: &[&str]) -> (Outcome, Usage) {
    let lock = KnobLock::take();
    let before = common::global_state();
    let (o, u) = lock
        .pass(ptlab(args))
        .as_limit(AS_LIMIT)
        .timeout(Duration::from_secs(120))
        .run_usage();
    after(what, &before);
    (o, u)
}

fn after(what: &str, before: &common::GlobalState) {
    common::assert_no_ptlab_processes(Duration::from_secs(10), what);
    assert_eq!(
        &common::global_state(),
        before,
        "{what}: global state changed"
    );
}

#[test]
fn model_run_observes_127t_noreserve_in_a_few_mb() {
    let dir = common::scratch("obs-127t");
    let f = common::scenario(&dir, "big.ptl", EMPTY_127T);
    let what = "run 127T (model)";
    let (o, u) = run_model(what, &["run", f.to_str().unwrap()]);
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    assert_eq!(page_lines(&o.stdout), ["00fff0000000-7ffff0000000 none"]);
    assert!(o.stdout.contains("Rss:0kB"), "{}", o.stdout);
    assert!(
        o.stdout.contains("PASS: 2 expectations held"),
        "{}",
        o.stdout
    );
    assert_cheap(what, &o, &u);
}

#[test]
fn model_json_has_one_record_for_127t_of_none() {
    let dir = common::scratch("obs-127t-json");
    let f = common::scenario(&dir, "big.ptl", EMPTY_127T);
    let what = "run --format json 127T (model)";
    let (o, u) = run_model(what, &["run", "--format", "json", f.to_str().unwrap()]);
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    let obs: serde_json::Value = o
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["kind"] == "observe")
        .expect("an observe line");
    let pages = obs["observation"]["pages"].as_array().expect("pages");
    assert_eq!(pages.len(), 1, "{pages:?}");
    assert_eq!(pages[0]["state"], "NotPresent");
    assert_eq!(pages[0]["addr"], 0xfff0000000u64);
    assert_eq!(pages[0]["npages"], (127u64 << 40) / 4096);
    assert_cheap(what, &o, &u);
}

#[test]
fn model_run_observes_1t_with_pages_at_both_ends() {
    let dir = common::scratch("obs-1t-ends");
    let f = common::scenario(&dir, "ends.ptl", ENDS_1T);
    let what = "run 1T with pages at both ends (model)";
    let (o, u) = run_model(what, &["run", "--check-invariants", f.to_str().unwrap()]);
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    assert_eq!(
        page_lines(&o.stdout),
        [
            "7efff0000000-7efff0001000 F1 o0 X AX cnt=1 tag=0x7efff0000000 idx=0",
            "7efff0001000-7efff0002000 F2 o0 X AX cnt=1 tag=0x7 idx=0",
            "7efff0002000-7fffefffe000 none",
            "7fffefffe000-7fffeffff000 zero",
            "7fffeffff000-7ffff0000000 F3 o0 X AX cnt=1 tag=0x7fffeffff000 idx=0",
        ]
    );
    assert!(o.stdout.contains("Rss:12kB"), "{}", o.stdout);
    assert!(
        o.stdout.contains("PASS: 5 expectations held"),
        "{}",
        o.stdout
    );
    assert_cheap(what, &o, &u);
}

#[test]
fn model_show_of_127t_draws_one_hole() {
    let dir = common::scratch("obs-show-127t");
    let f = common::scenario(&dir, "big.ptl", EMPTY_127T);
    let html = dir.join("big.html");
    let what = "show 127T (model)";
    let (o, u) = run_model(
        what,
        &["show", f.to_str().unwrap(), "-o", html.to_str().unwrap()],
    );
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    let page = std::fs::read_to_string(&html).expect("the picture");
    assert!(
        page.contains("no PUD tables (255 PGD entries none)")
            && page.contains("127 TiB of VMA here"),
        "the 127 TiB VMA is one hole row"
    );
    assert!(
        page.len() < 256 << 10,
        "picture of one empty VMA is {} bytes",
        page.len()
    );
    assert_cheap(what, &o, &u);
}

#[test]
fn diff_of_127t_noreserve_compares_without_expanding() {
    if let Some(why) = common::live_skip() {
        eprintln!("SKIP: {why}");
        return;
    }
    let _g = common::serial();
    let dir = common::scratch("obs-diff-127t");
    let f = common::scenario(&dir, "big.ptl", EMPTY_127T);
    // The live worker cannot map 127 TiB (ENOMEM: its address space holds
    // ptlab's image, and here RLIMIT_AS too), the model can: a divergence,
    // reported cleanly, the model's 127 TiB observed within the limit.
    let what = "diff 127T";
    let (o, u) = run_model(what, &["diff", f.to_str().unwrap()]);
    assert_eq!(o.code(), Some(1), "{}", o.describe());
    assert!(o.stdout.contains("DIVERGE"), "{}", o.describe());
    assert!(
        o.stdout.contains("returned 0xfff0000000"),
        "{}",
        o.describe()
    );
    assert!(!o.timed_out, "{}", o.describe());
    // diff re-runs a divergent scenario (twice) to tell it from background
    // noise: the CPU budget is per run.
    assert!(u.cpu < 3 * CPU_BUDGET, "{:?} of CPU", u.cpu);
}

/// A live run confined to a fresh memory cgroup, or `None` (SKIP printed).
fn live_cgroup(name: &str) -> Option<MemCgroup> {
    if let Some(why) = common::live_skip() {
        eprintln!("SKIP: {why}");
        return None;
    }
    match MemCgroup::new(name, CGROUP_LIMIT) {
        Ok(cg) => Some(cg),
        Err(why) => {
            eprintln!("SKIP: live runs here need a memory cgroup to bound them: {why}");
            None
        }
    }
}

/// Runs `args` live inside `cg`, under the knob lock, checking the cgroup's
/// peak against the memory target and global state before and after.
fn run_live(what: &str, cg: &MemCgroup, args: &[&str]) -> (Outcome, Usage) {
    let _g = common::serial();
    let lock = KnobLock::take();
    let before = common::global_state();
    let (o, u) = lock
        .pass(cg.enter(ptlab(args)))
        .timeout(Duration::from_secs(300))
        .run_usage();
    after(what, &before);
    assert!(
        !cg.hit_limit(),
        "{what}: the cgroup's {} MiB limit was hit\n{}",
        CGROUP_LIMIT >> 20,
        o.describe()
    );
    if let Some(p) = cg.peak() {
        eprintln!("{what}: cgroup peak {} KiB", p >> 10);
        assert!(
            p < MEM_BUDGET,
            "{what}: ptlab and its worker used {} MB, budget {} MB",
            p >> 20,
            MEM_BUDGET >> 20
        );
    }
    (o, u)
}

#[test]
fn live_run_observes_64t_with_pages_at_both_ends_in_a_few_mb() {
    let Some(cg) = live_cgroup("obs-live-64t") else {
        return;
    };
    let dir = common::scratch("obs-live-64t");
    let f = common::scenario(&dir, "ends.ptl", ENDS_64T);
    let what = "run --backend live 64T";
    let (o, u) = run_live(
        what,
        &cg,
        &["run", "--backend", "live", f.to_str().unwrap()],
    );
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    assert!(
        o.stdout.contains("PASS: 5 expectations held"),
        "{}",
        o.stdout
    );
    // anon, none, zero, none, anon: five records for 64 TiB.
    let lines = page_lines(&o.stdout);
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["F1", "none", "zero", "none", "F2"], "{lines:#?}");
    assert_cheap(what, &o, &u);
}

#[test]
fn live_show_of_64t_draws_one_hole() {
    let Some(cg) = live_cgroup("obs-live-show") else {
        return;
    };
    let dir = common::scratch("obs-live-show");
    let f = common::scenario(&dir, "ends.ptl", ENDS_64T);
    let html = dir.join("ends.html");
    let what = "show --backend live 64T";
    let (o, u) = run_live(
        what,
        &cg,
        &[
            "show",
            "--backend",
            "live",
            f.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    let page = std::fs::read_to_string(&html).expect("the picture");
    // Two runs of empty 1 GiB regions (before and after the page at 32T).
    assert_eq!(
        page.matches("regions of 1 GiB with no page").count(),
        2,
        "the empty parts of the VMA are one row each"
    );
    assert!(page.len() < 1 << 20, "picture is {} bytes", page.len());
    assert_cheap(what, &o, &u);
}
