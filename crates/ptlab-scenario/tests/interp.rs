//! Interpreter tests against the in-memory fake backend.

mod common;

use common::FakeBackend;
use ptlab_scenario::{parse, run, FailureKind, RunOptions, RunReport};

fn run_on(backend: &mut FakeBackend, src: &str) -> RunReport {
    let script = parse("t.ptl", src).unwrap_or_else(|e| panic!("parse error: {e}"));
    run(&script, backend, &RunOptions::default())
}

fn run_src(src: &str) -> (RunReport, FakeBackend) {
    let mut b = FakeBackend::default();
    let r = run_on(&mut b, src);
    (r, b)
}

/// Failures rendered as their `Display` text.
fn failures(r: &RunReport) -> Vec<String> {
    r.failures.iter().map(ToString::to_string).collect()
}

#[track_caller]
fn assert_passes(src: &str) -> (RunReport, FakeBackend) {
    let (r, b) = run_src(src);
    assert!(
        r.passed(),
        "expected a pass, got:\n{}",
        failures(&r).join("\n")
    );
    (r, b)
}

#[test]
fn basic_flow_passes() {
    let (r, b) = assert_passes(
        "p = mmap 16K
expect ok
write p 8K
read p 16K
expect page p 8K anon pte X AX cnt=1
expect page p 4K tag=p
expect page p + 4K tag=p + 4K
expect page p + 8K 8K none
expect maps
  p .. p + 16K rw-p
end
observe maps pages",
    );
    assert_eq!(r.expectations_passed, 6);
    assert_eq!(r.outputs.len(), 1);
    assert_eq!(r.outputs[0].line, 12);
    assert_eq!(r.outputs[0].process, "main");
    let text = r.outputs[0].render_text();
    assert!(
        text.starts_with("== process main\n-- maps\n7f0000000000-7f0000004000 rw-p"),
        "{text}"
    );
    assert!(text.contains("-- pages"), "{text}");
    assert!(!text.contains("-- smaps"), "{text}");
    assert_eq!(
        b.log_lines()[..3],
        [
            "mmap main 0x0 0x4000 Prot(READ | WRITE) MapFlags(PRIVATE | ANONYMOUS)",
            "write main 0x7f0000000000 0x7f0000000000",
            "write main 0x7f0000001000 0x7f0000001000",
        ]
    );
}

#[test]
fn mmap_flags_reach_the_backend() {
    let (_, b) = assert_passes(
        "mmap 4K at 0x10000 fixed prot rx noreserve populate\nmmap 4K at 0x20000 noreplace prot none\nmmap 4K at 0x30000",
    );
    assert_eq!(
        b.log_lines(),
        [
            "mmap main 0x10000 0x1000 Prot(READ | EXEC) MapFlags(PRIVATE | FIXED | ANONYMOUS | NORESERVE | POPULATE)",
            "mmap main 0x20000 0x1000 Prot(0x0) MapFlags(PRIVATE | ANONYMOUS | FIXED_NOREPLACE)",
            "mmap main 0x30000 0x1000 Prot(READ | WRITE) MapFlags(PRIVATE | ANONYMOUS)",
        ]
    );
}

#[test]
fn uncovered_syscall_failure_is_a_failure() {
    let (r, _) = run_src("mmap 0\nlet later = 1");
    assert_eq!(
        failures(&r),
        ["t.ptl:1: mmap failed with EINVAL (Invalid argument) and no expect line covers it"]
    );
    assert_eq!(r.failures[0].kind, FailureKind::Unexpected);
    assert!(!r.aborted, "an uncovered errno does not stop the run");
    assert_eq!(r.statements_executed, 2);
}

#[test]
fn syscall_checks() {
    assert_passes("mmap 0\nexpect errno EINVAL");
    assert_passes("p = mmap 4K\nexpect ok\nmunmap p 4K\nexpect ret == 0");
    assert_passes("p = mmap 4K at 0x40000 fixed\nexpect ret == 0x40000\nmmap 4K at p noreplace\nexpect errno EEXIST");
    let (r, _) = run_src(
        "mmap 0
expect errno ENOMEM
mmap 4K
expect errno EINVAL
mmap 0
expect ok
p = mmap 4K
expect ret == 1
mmap 0
expect ret == 0",
    );
    assert_eq!(
        failures(&r),
        [
            "t.ptl:2: expectation failed: expected mmap to fail with ENOMEM (Cannot allocate memory), but it failed with EINVAL (Invalid argument)",
            "t.ptl:4: expectation failed: expected mmap to fail with EINVAL (Invalid argument), but it succeeded (returned 0x7f0000000000)",
            "t.ptl:6: expectation failed: expected mmap to succeed, but it failed with EINVAL (Invalid argument)",
            "t.ptl:8: expectation failed: expected mmap to return 1, but it returned 0x7f0000011000",
            "t.ptl:10: expectation failed: expected mmap to succeed, but it failed with EINVAL (Invalid argument)",
        ]
    );
    assert_eq!(r.expectations_passed, 0);
}

#[test]
fn segv_sequencing() {
    assert_passes("read 0x1000\nexpect segv");
    assert_passes("p = mmap 4K prot r\nread p\nexpect ok\nwrite p\nexpect segv");
    let (r, b) = run_src("p = mmap 8K prot r\nwrite p 8K\nread p 8K\nexpect segv");
    assert_eq!(
        failures(&r),
        [
            "t.ptl:2: write at 0x7f0000000000 raised SIGSEGV and no 'expect segv' covers it",
            "t.ptl:4: expectation failed: expected read to raise SIGSEGV, but it completed",
        ]
    );
    // The faulting write stops at its first page.
    assert_eq!(b.log.iter().filter(|l| l.starts_with("write")).count(), 1);
}

#[test]
fn failed_binding_explains_later_use() {
    let (r, _) = run_src("p = mmap 0\nexpect errno EINVAL\nwrite p");
    assert_eq!(
        failures(&r),
        ["t.ptl:3:7: runtime error: 'p' has no value: the syscall that binds it at line 1 failed"]
    );
    assert!(r.aborted);
}

#[test]
fn repeat_binds_the_counter_and_nests() {
    let (r, b) = assert_passes(
        "p = mmap 64K
repeat 4 as i
  repeat 2 as j
    write p + (i * 2 + j) * 4K tag=i * 10 + j
  end
end
expect page p tag=0
expect page p + 4K tag=1
expect page p + 28K tag=31
expect page p + 32K 32K none",
    );
    assert_eq!(b.log.iter().filter(|l| l.starts_with("write")).count(), 8);
    // mmap + 8 writes + 4 expects (the repeat lines themselves do not count).
    assert_eq!(r.statements_executed, 13);
}

#[test]
fn repeat_zero_times_and_unset_names() {
    let (r, _) = run_src("repeat 0\n  p = mmap 4K\nend\nwrite p");
    assert_eq!(
        failures(&r),
        ["t.ptl:4:7: runtime error: 'p' has no value yet (the statement binding it has not run)"]
    );
}

#[test]
fn long_loops_are_fast() {
    let start = std::time::Instant::now();
    let (r, _) = assert_passes("p = mmap 4K\nrepeat 20000 as i\n  let x = i * 3 + 1\n  write p tag=x\nend\nexpect page p tag=59998");
    assert_eq!(r.statements_executed, 40_002);
    assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
}

#[test]
fn failures_inside_loops_name_the_iteration() {
    let (r, _) = run_src("p = mmap 4K\nrepeat 3 as i\n  write p tag=i\n  expect page p tag=1\nend");
    assert_eq!(
        failures(&r),
        [
            "t.ptl:4: expectation failed: expect page p tag=1: 1 of 1 page in 0x7f0000000000-0x7f0000001000 differ [repeat at line 2, iteration 0]\n    0x7f0000000000: expected tag=0x1; page is anon order=0 idx=0 pte X AX cnt=1 tag=0x0",
            "t.ptl:4: expectation failed: expect page p tag=1: 1 of 1 page in 0x7f0000000000-0x7f0000001000 differ [repeat at line 2, iteration 2]\n    0x7f0000000000: expected tag=0x1; page is anon order=0 idx=0 pte X AX cnt=1 tag=0x2",
        ]
    );
    assert_eq!(r.failures[1].loops, vec![(2, 2)]);
}

#[test]
fn process_prefix_and_switch() {
    let (r, b) = assert_passes(
        "p = mmap 8K
write p tag=1
fork child
@child write p tag=2
expect page p tag=1
@child expect page p tag=2
@child
write p + 4K tag=3
expect page p + 4K tag=3
@main expect page p + 4K none
@main
expect page p + 4K none
@child exit
observe maps",
    );
    assert!(b.log_lines().contains(&"fork main child"));
    assert!(b.log_lines().contains(&"write child 0x7f0000000000 0x2"));
    assert!(b.log_lines().contains(&"write child 0x7f0000001000 0x3"));
    assert!(b.log_lines().contains(&"exit child"));
    assert_eq!(r.outputs[0].process, "main");
}

#[test]
fn prefix_on_repeat_applies_to_the_body() {
    let (_, b) = assert_passes("p = mmap 4K\nfork kid\n@kid repeat 2\n  write p\nend\nwrite p");
    let writes: Vec<&str> = b
        .log_lines()
        .into_iter()
        .filter(|l| l.starts_with("write"))
        .collect();
    assert_eq!(
        writes,
        [
            "write kid 0x7f0000000000 0x7f0000000000",
            "write kid 0x7f0000000000 0x7f0000000000",
            "write main 0x7f0000000000 0x7f0000000000"
        ]
    );
}

#[test]
fn dead_process_is_a_runtime_error() {
    let (r, _) = run_src("fork kid\n@kid exit\n@kid write 0\nlet never = 1");
    assert_eq!(
        failures(&r),
        ["t.ptl:3:6: runtime error: write: no process named 'kid'"]
    );
    assert_eq!(r.statements_executed, 2);
}

#[test]
fn unsupported_operations_are_runtime_errors() {
    let (r, b) = run_src("p = mmap 4K\nmremap p 4K 8K maymove\nwrite p");
    assert_eq!(
        failures(&r),
        ["t.ptl:2:1: runtime error: mremap: mremap is unsupported by this backend"]
    );
    assert!(r.aborted);
    assert!(
        !b.log.iter().any(|l| l.starts_with("write")),
        "the run stops at the error"
    );
    for (src, what) in [
        ("mprotect 0 4K r", "mprotect"),
        ("uffd open", "uffd open"),
        ("uffd register 0 4K missing", "uffd register"),
        ("uffd unregister 0 4K", "uffd unregister"),
        ("uffd copy 0 0 4K tag=1", "uffd copy"),
        ("uffd zeropage 0 4K", "uffd zeropage"),
        ("uffd move 0 0 4K", "uffd move"),
    ] {
        let (r, _) = run_src(src);
        assert_eq!(
            failures(&r),
            [format!(
                "t.ptl:1:1: runtime error: {what}: {what} is unsupported by this backend"
            )]
        );
    }
}

#[test]
fn arithmetic_errors_carry_columns() {
    let (r, _) = run_src("let a = 0xffff_ffff_ffff_ffff\nlet b = a - 1 + 2");
    assert_eq!(
        failures(&r),
        ["t.ptl:2:15: runtime error: arithmetic overflow: 0xfffffffffffffffe + 2 exceeds 64 bits"]
    );
    let (r, _) = run_src("let b = 1 - 2");
    assert_eq!(
        failures(&r),
        ["t.ptl:1:11: runtime error: arithmetic underflow: 1 - 2 is negative"]
    );
    let (r, _) = run_src("let z = 0\nlet b = 4K / z");
    assert_eq!(
        failures(&r),
        ["t.ptl:2:12: runtime error: division by zero: 4096 / 0"]
    );
    let (r, _) = run_src("let b = align_up(5, 3)");
    assert_eq!(
        failures(&r),
        ["t.ptl:1:9: runtime error: align_up: alignment 3 is not a power of two"]
    );
    let (r, _) = run_src("read 0 256T");
    assert_eq!(
        failures(&r),
        ["t.ptl:1:1: runtime error: read: range of 68719476736 pages is too large (limit 34359738368 pages)"]
    );
}

#[test]
fn thp_knobs() {
    let (_, b) = assert_passes(
        "thp enabled always\nthp 64K inherit\nthp PMD never\nthp use_zero_page 0\nthp enabled inherit\nexpect errno EINVAL\nthp 8K always\nexpect errno ENOENT",
    );
    assert_eq!(
        b.log_lines(),
        [
            "set_thp TopLevel always",
            "set_thp Size(4) inherit",
            "set_thp Size(9) never",
            "use_zero_page false",
            "set_thp TopLevel inherit",
            "set_thp Size(1) always",
        ]
    );
    let (r, _) = run_src("thp 3K always");
    assert_eq!(
        failures(&r),
        ["t.ptl:1:1: runtime error: thp: 3072 is not a power-of-two folio size of at least 4K"]
    );
    let (r, _) = run_src("thp enabled inherit");
    assert_eq!(
        failures(&r),
        ["t.ptl:1: thp failed with EINVAL (Invalid argument) and no expect line covers it"]
    );
}

#[test]
fn stats_are_deltas_since_start() {
    // The fake starts its counter at 5; the scenario sees only its own writes.
    assert_passes("p = mmap 8K\nwrite p 8K\nexpect stat vmstat/fake_writes == 2\nexpect stat 64kB/anon_fault_alloc == 0");
    let (r, _) = run_src("p = mmap 8K\nwrite p\nexpect stat vmstat/fake_write == 1\nobserve stats");
    assert_eq!(
        failures(&r),
        ["t.ptl:3: expectation failed: stat vmstat/fake_write: expected 1, found 0; the backend reports no such counter (did you mean 'vmstat/fake_writes'?)"]
    );
    assert_eq!(
        r.outputs[0].observation.stats.get("vmstat/fake_writes"),
        Some(&1)
    );
    assert_eq!(
        r.outputs[0].render_text(),
        "== process main\n-- stats\nvmstat/fake_writes +1\n"
    );
}

#[test]
fn maps_mismatch_shows_both_listings() {
    let (r, _) = run_src("p = mmap 8K\nexpect maps\n  p .. p + 4K rw-p\nend\nexpect maps empty");
    assert_eq!(
        failures(&r),
        [
            "t.ptl:2: expectation failed: maps of process main differ (1 VMAs expected, 1 found)\n    expected:\n      7f0000000000-7f0000001000 rw-p\n    actual:\n      7f0000000000-7f0000002000 rw-p",
            "t.ptl:5: expectation failed: maps of process main differ (0 VMAs expected, 1 found)\n    expected:\n      (no VMAs)\n    actual:\n      7f0000000000-7f0000002000 rw-p",
        ]
    );
}

#[test]
fn page_attribute_failures_are_summarised() {
    let (r, _) = run_src("p = mmap 32K\nwrite p 8K\nexpect page p 32K anon order=0");
    assert_eq!(r.failures.len(), 1);
    let f = &r.failures[0];
    assert_eq!(
        f.message,
        "expect page p 32K anon order=0: 6 of 8 pages in 0x7f0000000000-0x7f0000008000 differ"
    );
    assert_eq!(
        f.detail.as_deref(),
        Some(
            "0x7f0000002000: expected anon, order=0; page is none\n\
             0x7f0000003000: expected anon, order=0; page is none\n\
             0x7f0000004000: expected anon, order=0; page is none\n\
             0x7f0000005000: expected anon, order=0; page is none\n\
             ... and 2 more"
        )
    );
    // Order-0 pages are each their own folio with index 0.
    let (r, _) =
        run_src("p = mmap 8K\nwrite p 8K\nexpect page p 8K samefolio\nexpect page p 8K idx=0");
    assert_eq!(
        r.failures.iter().map(|f| f.detail.clone().unwrap_or_default()).collect::<Vec<_>>(),
        [
            "0x7f0000001000: expected samefolio (the folio of page 0x7f0000000000); page is anon order=0 idx=0 pte X AX cnt=1 tag=0x7f0000001000",
            "0x7f0000001000: expected idx=1; page is anon order=0 idx=0 pte X AX cnt=1 tag=0x7f0000001000",
        ]
    );
    // An unaligned address means its page; !X and !AX hold for absent pages.
    assert_passes("p = mmap 8K\nwrite p\nexpect page p + 100 anon\nexpect page p + 4K none !X !AX\nwrite p + 4K + 100\nexpect page p + 4K anon");
}

#[test]
fn pfn_handles() {
    assert_passes(
        "p = mmap 8K
write p 8K
a = pfn p
b = pfn p + 4K
expect pfn p == a
expect pfn p != b
madvise p 4K dontneed
write p
expect pfn p != a",
    );
    let (r, _) = run_src("p = mmap 8K\na = pfn p");
    assert_eq!(
        failures(&r),
        ["t.ptl:2:1: runtime error: pfn: no page is present at 0x7f0000000000 in process main"]
    );
    let (r, _) =
        run_src("p = mmap 8K\nwrite p\na = pfn p\nexpect pfn p + 4K == a\nexpect pfn p != a");
    assert_eq!(
        failures(&r),
        [
            "t.ptl:4: expectation failed: page 0x7f0000001000 is not present, so it has no frame to compare with 'a'",
            "t.ptl:5: expectation failed: page 0x7f0000000000 is still frame 'a'",
        ]
    );
}

#[test]
fn vmflags_and_anonhuge() {
    assert_passes("p = mmap 8K\nexpect vmflags p has rd wr\nexpect vmflags p + 4K lacks hg nh\nexpect anonhuge p == 0");
    let (r, _) = run_src("p = mmap 8K\nexpect vmflags p has hg rd\nexpect vmflags p lacks wr\nexpect anonhuge p == 2M\nexpect vmflags 0 has rd");
    assert_eq!(
        failures(&r),
        [
            "t.ptl:2: expectation failed: VMA 7f0000000000-7f0000002000 lacks hg (VmFlags: rd wr mr)",
            "t.ptl:3: expectation failed: VMA 7f0000000000-7f0000002000 has wr (VmFlags: rd wr mr)",
            "t.ptl:4: expectation failed: AnonHugePages of VMA 7f0000000000-7f0000002000: expected 2048 kB, found 0 kB",
            "t.ptl:5: expectation failed: no VMA contains 0",
        ]
    );
}

#[test]
fn invariant_checks() {
    let mut b = FakeBackend::default();
    b.violations = vec!["rss mismatch".into(), "leaked folio".into()];
    let r = run_on(&mut b, "expect invariants\nlet x = 1");
    assert_eq!(
        failures(&r),
        ["t.ptl:1: invariant violated: 2 violations\n    rss mismatch\n    leaked folio"]
    );
    assert_eq!(r.failures[0].kind, FailureKind::Invariant);

    // The per-statement hook reports once, at the statement that broke it.
    let mut b = FakeBackend::default();
    b.break_after = Some(3);
    let r = run_on(
        &mut b,
        "let a = 1\nlet b = 2\np = mmap 4K\nwrite p\nwrite p",
    );
    assert_eq!(
        failures(&r),
        ["t.ptl:3: invariant violated: after 'p = mmap 4K' (1 violation; later per-statement checks are not reported)\n    broken after 3 statements"]
    );
}

#[test]
fn max_failures_and_step_limit() {
    let script = parse("t.ptl", "repeat 10 as i\n  expect stat x == 1\nend").unwrap();
    let mut b = FakeBackend::default();
    let r = run(
        &script,
        &mut b,
        &RunOptions {
            max_failures: 3,
            max_steps: None,
            ..RunOptions::default()
        },
    );
    assert_eq!(r.failures.len(), 3);
    assert_eq!(r.suppressed_failures, 7);
    assert_eq!(r.failure_count(), 10);
    assert!(!r.passed());
    assert_eq!(r.summary(), "FAIL: 10 failures (0 expectations held)");

    let script = parse("t.ptl", "repeat 1000000\n  let x = 1\nend").unwrap();
    let r = run(
        &script,
        &mut b,
        &RunOptions {
            max_failures: 10,
            max_steps: Some(50),
            ..RunOptions::default()
        },
    );
    assert_eq!(failures(&r), ["t.ptl:2:3: runtime error: step limit reached (50 statements executed) [repeat at line 1, iteration 50]"]);
    assert_eq!(
        r.summary(),
        "FAIL: 1 failure (0 expectations held; run stopped early)"
    );
}

#[test]
fn json_shapes() {
    let (r, _) = run_src("p = mmap 4K\nobserve maps\nexpect page p anon");
    let o = r.outputs[0].to_json();
    assert_eq!(o["kind"], "observe");
    assert_eq!(o["line"], 2);
    assert_eq!(o["process"], "main");
    assert_eq!(o["observation"]["maps"][0]["perms"], "rw-p");
    let f = r.failures[0].to_json();
    assert_eq!(f["kind"], "failure");
    assert_eq!(f["category"], "expectation");
    assert_eq!(f["line"], 3);
    assert!(r.outputs[0].seq < r.failures[0].seq);
    assert_eq!(r.summary(), "FAIL: 1 failure (0 expectations held)");
}

#[test]
fn summary_on_pass() {
    let (r, _) = assert_passes("p = mmap 4K\nexpect ok");
    assert_eq!(r.summary(), "PASS: 1 expectation held");
}
