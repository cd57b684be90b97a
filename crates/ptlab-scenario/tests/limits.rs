//! The run's statement limit (`RunOptions::max_statements`) and the
//! progress hook: a runaway `repeat` stops with a clear runtime error.

use ptlab_model::{ArchKind, ModelConfig};
use ptlab_scenario::{parse, run, FailureKind, ModelBackend, RunOptions};
use std::sync::{Arc, Mutex};

fn backend() -> ModelBackend {
    ModelBackend::new(ModelConfig::for_arch(ArchKind::X86_64))
}

fn run_with(src: &str, limit: Option<u64>) -> ptlab_scenario::RunReport {
    let s = parse("t.ptl", src).unwrap();
    let opts = RunOptions {
        max_statements: limit,
        ..RunOptions::default()
    };
    run(&s, &mut backend(), &opts)
}

fn limit_message(r: &ptlab_scenario::RunReport) -> &str {
    assert!(r.aborted, "{:?}", r.failures);
    let f = &r.failures[0];
    assert_eq!(f.kind, FailureKind::Runtime);
    &f.message
}

#[test]
fn a_huge_repeat_stops_at_the_limit() {
    // Issue 18: `repeat 1000000000000000000` ran silently forever.
    let r = run_with(
        "p = mmap 4K\nrepeat 1000000000000000000\n  write p\nend\n",
        Some(1000),
    );
    let m = limit_message(&r);
    assert!(
        m.starts_with("statement limit reached: 1000 statements"),
        "{m}"
    );
    assert!(m.contains("--max-statements"), "{m}");
    // mmap, the repeat header, then (iteration + write) pairs.
    assert_eq!(r.statements_executed, 1 + 499);
}

#[test]
fn empty_and_nested_loops_count_their_iterations() {
    let m = run_with("repeat 1000000000000000000\nend\n", Some(500)).failures[0]
        .message
        .clone();
    assert!(m.starts_with("statement limit reached"), "{m}");
    let nested = format!(
        "{}let x = 1\n{}",
        "repeat 2\n".repeat(31),
        "end\n".repeat(31)
    );
    let r = run_with(&nested, Some(10_000));
    assert!(limit_message(&r).starts_with("statement limit reached"));
    // Under the limit nothing changes.
    let r = run_with("repeat 10\n  let x = 1\nend\n", Some(21));
    assert!(r.passed(), "{:?}", r.failures);
    assert_eq!(r.statements_executed, 10);
    let r = run_with("repeat 10\n  let x = 1\nend\n", Some(20));
    assert!(!r.passed());
    // No limit: runs to the end.
    let r = run_with("repeat 100000\n  let x = 1\nend\n", None);
    assert!(r.passed());
}

#[test]
fn the_default_limit_applies() {
    assert_eq!(
        RunOptions::default().max_statements,
        Some(ptlab_scenario::DEFAULT_MAX_STATEMENTS)
    );
}

#[test]
fn progress_is_reported_on_long_runs_only() {
    let seen: Arc<Mutex<Vec<(u64, bool)>>> = Arc::default();
    let s2 = seen.clone();
    ptlab_scenario::set_progress_hook(Some(Arc::new(move |p| {
        if p.file == "progress.ptl" {
            s2.lock().unwrap().push((p.executed, p.done));
        }
    })));
    let s = parse("progress.ptl", "repeat 100\n  let x = 1\nend\n").unwrap();
    run(&s, &mut backend(), &RunOptions::default());
    assert!(seen.lock().unwrap().is_empty());
    let s = parse("progress.ptl", "repeat 100000\n  let x = 1\nend\n").unwrap();
    run(&s, &mut backend(), &RunOptions::default());
    ptlab_scenario::set_progress_hook(None);
    let v = seen.lock().unwrap().clone();
    let every = ptlab_scenario::interp::PROGRESS_EVERY;
    assert_eq!(v.first(), Some(&(every, false)), "{v:?}");
    assert_eq!(v.last(), Some(&(200_001, true)), "{v:?}");
    assert_eq!(v.len() as u64, 200_001 / every + 1);
}
