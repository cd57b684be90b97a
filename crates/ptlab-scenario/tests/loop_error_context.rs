//! Runtime errors inside loops keep their context after the twelfth
//! session's interpreter changes (docs/model.md, "The interpreter's fixed
//! cost, twelfth session"): the error value is boxed and built only on the
//! error path, a statement without hooks, per-line events or an `@NAME`
//! prefix skips the full bookkeeping, a successful operation without an
//! `expect` line returns before its name is looked up, and a call in the
//! same process as the previous one goes through
//! `Backend::call_same_proc`. Each case names the line, the column, the
//! message and every enclosing loop's iteration, and counts the
//! statements executed before the error.

use ptlab_model::{ArchKind, ModelConfig};
use ptlab_scenario::{parse, run, FailureKind, ModelBackend, RunOptions, RunReport};

fn run_src(src: &str, opts: &RunOptions) -> RunReport {
    let script = parse("t.ptl", src).unwrap_or_else(|e| panic!("parse error: {e}"));
    let mut b = ModelBackend::new(ModelConfig::for_arch(ArchKind::X86_64));
    run(&script, &mut b, opts)
}

/// The run stopped with a runtime error: its text, and how many failures
/// came before it.
#[track_caller]
fn runtime_error(r: &RunReport) -> (String, usize) {
    assert!(r.aborted, "{:?}", r.failures);
    let last = r.failures.last().expect("a failure");
    assert_eq!(last.kind, FailureKind::Runtime, "{last}");
    let before = r.failures.len() - 1;
    assert!(
        r.failures[..before]
            .iter()
            .all(|f| f.kind != FailureKind::Runtime),
        "{:?}",
        r.failures
    );
    (last.to_string(), before)
}

/// Both ways a statement runs: the lean path (no hooks) and the full one
/// (per-line hardware events recorded).
fn both(src: &str) -> [RunReport; 2] {
    let lean = run_src(src, &RunOptions::default());
    let full = run_src(
        src,
        &RunOptions {
            record_hw: true,
            ..RunOptions::default()
        },
    );
    [lean, full]
}

#[test]
fn an_expression_error_names_the_operator_and_both_loops() {
    // i * 8 + j reaches 16 at i = 2, j = 0: the first `+` overflows.
    let src = "\
let big = 0xffff_ffff_ffff_fff0
repeat 3 as i
  repeat 5 as j
    let x = big + i * 8 + j
  end
end
";
    for r in both(src) {
        let (text, before) = runtime_error(&r);
        assert_eq!(
            text,
            "t.ptl:4:17: runtime error: arithmetic overflow: 0xfffffffffffffff0 + 16 \
             exceeds 64 bits [repeat at line 2, iteration 2] [repeat at line 3, iteration 0]"
        );
        assert_eq!(before, 0);
        // `let big` and the ten `let x` of i = 0 and 1.
        assert_eq!(r.statements_executed, 11);
        assert_eq!(
            r.summary(),
            "FAIL: 1 failure (0 expectations held; run stopped early)"
        );
    }
}

#[test]
fn an_error_in_a_uffd_call_built_in_place_names_its_iteration() {
    // The tag's division fails at i = 2; the two ioctls before it fail on
    // an unregistered range (recorded, the run goes on).
    let src = "\
let heap = 0x7f00_0000_0000
p = mmap 64K at heap fixed
uffd open
repeat 4 as i
  uffd copy heap + i * 4K heap + 32K 4K tag=100 / (2 - i)
end
";
    for r in both(src) {
        let (text, before) = runtime_error(&r);
        assert_eq!(
            text,
            "t.ptl:5:49: runtime error: division by zero: 100 / 0 [repeat at line 4, iteration 2]"
        );
        assert_eq!(before, 2, "{:?}", r.failures);
        assert!(
            r.failures[0]
                .to_string()
                .starts_with("t.ptl:5: uffd copy failed with"),
            "{}",
            r.failures[0]
        );
        assert_eq!(r.failures[0].loops, [(4, 0)]);
        assert_eq!(r.failures[1].loops, [(4, 1)]);
        // let, mmap, uffd open and the two failed copies.
        assert_eq!(r.statements_executed, 5);
    }
}

#[test]
fn a_call_in_a_process_that_exited_names_the_statement_and_iteration() {
    // Iteration 0 writes in `c` and exits it; iteration 1's write in `c`
    // finds no such process. The unprefixed write before it runs in
    // `main` (the process switch back after each prefixed statement).
    let src = "\
p = mmap 64K
fork c
repeat 3 as i
  write p + i * 4K
  @c write p + i * 4K
  @c exit
end
";
    for r in both(src) {
        let (text, before) = runtime_error(&r);
        assert_eq!(
            text,
            "t.ptl:5:6: runtime error: write: no process named 'c' [repeat at line 3, iteration 1]"
        );
        assert_eq!(before, 0);
        // mmap, fork, three statements of iteration 0, the write of 1.
        assert_eq!(r.statements_executed, 6);
    }
}

#[test]
fn a_variable_without_a_value_in_a_loop_names_the_failed_binding() {
    let src = "\
q = mmap 0
expect errno EINVAL
repeat 2 as i
  let a = i
  munmap q + a 4K
end
";
    for r in both(src) {
        let (text, before) = runtime_error(&r);
        assert_eq!(
            text,
            "t.ptl:5:10: runtime error: 'q' has no value: the syscall that binds it at line 1 \
             failed [repeat at line 3, iteration 0]"
        );
        assert_eq!(before, 0);
        assert_eq!(r.statements_executed, 2);
        assert_eq!(r.expectations_passed, 1);
    }
}
