//! Bounded live smoke tests of the seed workloads: every workload with a
//! tiny region, two runs and few iterations, and the layout checker's
//! verdicts on memory of known shape. They never assert times. Without
//! root (or without THP / userfaultfd) they print `SKIP: reason` and pass.
//! Every run holds the THP knob lock (bench::run takes it; the layout
//! tests take it themselves), so they never race other live tests.

use ptlab_bench::bench::{self, BenchOptions};
use ptlab_bench::workload::{self, verify_layout, Layout};
use ptlab_live::kernel::Reader;
use ptlab_live::knobs::ThpLock;

fn skip() -> Option<String> {
    bench::unavailable()
}

fn knobs_now() -> std::collections::BTreeMap<String, String> {
    ptlab_bench::env::thp_settings()
}

/// `--fragment-memory` and `--compact-memory` on two tiny order-0 cases:
/// the holder leaves more free order-0 blocks than there were, every case
/// is preceded by one recorded compaction, the order-0 layout check says
/// how contiguous the frames came out, and the holder is gone afterwards
/// (its memory freed: no process of ours holds it).
#[test]
fn fragmenting_and_compacting_free_memory_are_recorded() {
    if let Some(why) = skip().or_else(ptlab_bench::memstate::compaction_unavailable) {
        eprintln!("SKIP: fragmenting_and_compacting: {why}");
        return;
    }
    let ws = vec![
        workload::find("fork-4k").unwrap(),
        workload::find("mprotect-4k").unwrap(),
    ];
    let opts = BenchOptions {
        runs: Some(1),
        iterations: Some(2),
        size: Some(4 << 20),
        quick: true,
        label: "memstate".into(),
        compact_memory: true,
        fragment_bytes: 64 << 20,
        ..Default::default()
    };
    let out = bench::run(&ws, &opts, &mut |_, _| {}).expect("bench runs");
    assert!(out.failed.is_empty(), "{:?}", out.failed);
    let env = &out.result.environment;
    let names: Vec<&str> = env.compactions.iter().map(|c| c.before.as_str()).collect();
    assert_eq!(names, ["fork-4k", "mprotect-4k"]);
    for c in &env.compactions {
        assert!(!c.free_before.is_empty() && !c.free_after.is_empty());
        assert!(c.ms >= 0.0);
    }
    assert!(
        env.notes
            .iter()
            .any(|n| n.contains("--fragment-memory 64 MiB")),
        "{:?}",
        env.notes
    );
    assert!(out
        .messages
        .iter()
        .any(|m| m.starts_with("compacted free memory before fork-4k")));
    for c in &out.result.cases {
        assert!(
            c.layout_check
                .contains("% of frames next to the previous page's"),
            "{}",
            c.layout_check
        );
    }
}

/// The adjacency percentage an order-0 layout check reports.
fn adjacency_in(check: &str) -> f64 {
    let end = check
        .find("% of frames next to the previous page's")
        .unwrap_or_else(|| panic!("no adjacency in {check}"));
    let start = check[..end].rfind(' ').map_or(0, |i| i + 1);
    check[start..end].parse().expect("a percentage")
}

/// `--frames packed` (`memstate::Spacer`): with free memory fragmented on
/// purpose (512 MiB held, every other page freed in shuffled order: 65,536
/// scattered free order-0 blocks), a 64 MiB order-0 region faulted packed
/// gets ascending frames (at least 80 % adjacent; without the spacer it
/// came out 2.7 % here), its layout check says it was packed and the
/// result's notes say so; faulted as found, neither says so.
#[test]
fn packed_order0_regions_get_ascending_frames_despite_fragmented_memory() {
    if let Some(why) = skip() {
        eprintln!("SKIP: packed_order0_regions: {why}");
        return;
    }
    match ptlab_live::budget::mem_available() {
        Some(a) if a >= 6 << 30 => {}
        other => {
            eprintln!(
                "SKIP: packed_order0_regions: needs 6 GiB available to fragment 512 MiB and \
                 take a spacer beside it (MemAvailable {:?} bytes)",
                other
            );
            return;
        }
    }
    let ws = vec![workload::find("mprotect-4k").unwrap()];
    let opts = BenchOptions {
        runs: Some(1),
        iterations: Some(1),
        size: Some(ptlab_bench::memstate::PACK_MIN_BYTES),
        quick: true,
        label: "frames".into(),
        fragment_bytes: 512 << 20,
        ..Default::default()
    };
    let mut checks = Vec::new();
    for packed in [false, true] {
        ptlab_bench::memstate::set_pack_frames(packed);
        let out = bench::run(&ws, &opts, &mut |_, _| {});
        ptlab_bench::memstate::set_pack_frames(false);
        let out = out.expect("bench runs");
        assert!(out.failed.is_empty(), "{:?}", out.failed);
        let noted = out
            .result
            .environment
            .notes
            .iter()
            .any(|n| n.starts_with("frames packed"));
        assert_eq!(noted, packed, "{:?}", out.result.environment.notes);
        checks.push(out.result.cases[0].layout_check.clone());
    }
    let (found, packed) = (&checks[0], &checks[1]);
    assert!(!found.contains("packed:"), "{found}");
    assert!(packed.contains("(packed: a "), "{packed}");
    // As found is not asserted: the per-CPU list may hold pages a previous
    // test freed in address order (a CI run saw 69.7 % here, where this VM
    // saw 2.7 %); packed must not depend on that.
    eprintln!("as found: {found}\npacked: {packed}");
    assert!(adjacency_in(packed) >= 80.0, "packed: {packed}");
}

/// `--rounds`: two tiny arms interleaved over three rounds (A B, B A,
/// A B): each child's samples land in its own case, every case has all
/// its runs, and the recorded schedule is the order they ran in; a
/// second part (`only_rounds`, as reproduce runs after calibrating)
/// merges into the same cases.
#[test]
fn interleaved_arms_are_keyed_and_ordered() {
    if let Some(why) = skip() {
        eprintln!("SKIP: interleaved_arms: {why}");
        return;
    }
    let ws = vec![
        workload::find("mremap-batch-4k").unwrap(),
        workload::find("mremap-batch-64k").unwrap(),
    ];
    let opts = BenchOptions {
        runs: Some(4),
        iterations: Some(2),
        quick: true,
        label: "rounds".into(),
        rounds: 3,
        only_rounds: Some(0..2),
        ..Default::default()
    };
    let first = bench::run(&ws, &opts, &mut |_, _| {}).expect("bench runs");
    assert!(first.failed.is_empty(), "{:?}", first.failed);
    let order: Vec<(&str, u64, u64)> = first
        .result
        .environment
        .schedule
        .iter()
        .map(|s| (s.case.as_str(), s.round, s.runs))
        .collect();
    assert_eq!(
        order,
        [
            ("mremap-batch-4k", 0, 2),
            ("mremap-batch-64k", 0, 2),
            ("mremap-batch-64k", 1, 1),
            ("mremap-batch-4k", 1, 1)
        ]
    );
    let rest = BenchOptions {
        only_rounds: Some(2..3),
        ..opts.clone()
    };
    let second = bench::run(&ws, &rest, &mut |_, _| {}).expect("bench runs");
    let all = bench::merge_outcomes(first, second);
    let cases = &all.result.cases;
    assert_eq!(cases.len(), 2);
    for (c, w) in cases.iter().zip(&ws) {
        assert_eq!(c.name, w.name);
        assert_eq!(c.samples.len(), 4, "{}", c.name);
        // One wall time per child: three slices each.
        assert_eq!(c.extra[workload::WALL_NS_KEY].len(), 3, "{}", c.name);
    }
    // The layouts are told apart: no 64 KiB check in the 4 KiB case.
    assert!(
        cases[0].layout_check.contains("order-0"),
        "{}",
        cases[0].layout_check
    );
    assert!(
        !cases[0].layout_check.contains("order-4"),
        "{}",
        cases[0].layout_check
    );
    assert!(
        cases[1].layout_check.contains("order-4"),
        "{}",
        cases[1].layout_check
    );
    assert_eq!(all.result.environment.schedule.len(), 6);
}

#[test]
fn every_workload_runs_tiny_and_knobs_come_back() {
    if let Some(why) = skip() {
        eprintln!("SKIP: every_workload_runs_tiny: {why}");
        return;
    }
    let before = {
        let _l = ThpLock::acquire().expect("lock");
        knobs_now()
    };
    let all: Vec<_> = workload::WORKLOADS.iter().collect();
    let opts = BenchOptions {
        runs: Some(2),
        iterations: Some(4),
        size: Some(4 << 20),
        quick: true,
        warmup: None,
        label: "smoke".into(),
        ..Default::default()
    };
    let mut verified = 0;
    let mut small_checked = 0;
    let out = bench::run(&all, &opts, &mut |w, p| {
        if let workload::Progress::Verified(_) = p {
            verified += 1;
            // 4 KiB cases set no knobs: the previous case's knobs must
            // have been put back before them.
            if w.layout == Layout::Small {
                assert_eq!(
                    knobs_now(),
                    before,
                    "{}: knobs left from a previous case",
                    w.name
                );
                small_checked += 1;
            }
        }
    })
    .expect("bench runs");
    let failed: Vec<_> = out
        .failed
        .iter()
        .filter(|(w, why)| {
            // A kernel without userfaultfd is a reason to skip, not a failure.
            if w.starts_with("uffd") && why.contains("userfaultfd failed") {
                eprintln!("SKIP: {w}: {why}");
                return false;
            }
            true
        })
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:#?}");
    for c in &out.result.cases {
        assert_eq!(c.samples.len(), 2, "{}", c.name);
        assert!(c.samples.iter().all(|s| *s > 0.0), "{}", c.name);
        assert!(!c.layout_check.is_empty(), "{}", c.name);
        assert_eq!(c.warmup, 1);
        // The whole workload's wall time (ptlab speed): one positive value,
        // at least the measured samples' share of it.
        let wall = &c.extra[workload::WALL_NS_KEY];
        assert_eq!(wall.len(), 1, "{}", c.name);
        assert!(wall[0] > 0.0, "{}", c.name);
        if !ptlab_bench::perf::unavailable()
            .iter()
            .any(|(n, _)| n == "page-faults")
        {
            assert!(c.counters.contains_key("perf/page-faults"), "{}", c.name);
        }
    }
    assert_eq!(verified, out.result.cases.len());
    assert!(small_checked >= 5);
    let mp = out
        .result
        .cases
        .iter()
        .find(|c| c.name == "mprotect-4k")
        .unwrap();
    assert_eq!(mp.extra["explicit_bzero ns per loop"].len(), 2);
    assert!(out.result.environment.cpus > 0);
    let text = out.result.to_json();
    let back = ptlab_bench::result::BenchResult::from_json(&text).unwrap();
    assert_eq!(back, out.result);
    let _l = ThpLock::acquire().expect("lock");
    assert_eq!(knobs_now(), before, "THP knobs were not restored");
}

/// Map `len` bytes (aligned to `align`) in this test process.
fn map_aligned(len: usize, align: usize) -> (*mut libc::c_void, u64) {
    // SAFETY: a private mapping of our own.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + align,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let a = (p as u64).next_multiple_of(align as u64);
    (p, a)
}

fn touch(a: u64, len: u64) {
    let mut x = a;
    while x < a + len {
        // SAFETY: inside our mapping.
        unsafe { std::ptr::write_volatile(x as *mut u64, x) };
        x += 4096;
    }
}

#[test]
fn layout_check_rejects_what_the_kernel_did_not_give() {
    if let Some(why) = skip() {
        eprintln!("SKIP: layout_check_rejects: {why}");
        return;
    }
    let _l = ThpLock::acquire().expect("lock");
    let pid = std::process::id() as i32;
    let mut reader = Reader::new();
    let len = 4u64 << 20;
    // 4 KiB pages: accepted as Small, rejected as 64K and as THP.
    let (p, a) = map_aligned(len as usize, 2 << 20);
    // SAFETY: our mapping.
    unsafe { libc::madvise(a as *mut libc::c_void, len as usize, libc::MADV_NOHUGEPAGE) };
    touch(a, len);
    let ok = verify_layout(&mut reader, pid, a, len, Layout::Small).unwrap();
    // The order-0 check also says how contiguous the frames are (a
    // fraction that depends on the machine's free lists).
    assert!(
        ok.starts_with("1024/1024 order-0 folios, ")
            && ok.ends_with("% of frames next to the previous page's"),
        "{ok}"
    );
    let e = verify_layout(&mut reader, pid, a, len, Layout::Mthp64k).unwrap_err();
    assert!(
        e.contains("0/64 order-4 folios") && e.contains("an order-0 page"),
        "{e}"
    );
    assert!(e.contains("hugepages-64kB"), "{e}");
    let e = verify_layout(&mut reader, pid, a, len, Layout::ThpPte).unwrap_err();
    assert!(e.contains("0/2 order-9 folios"), "{e}");
    // Not present: rejected.
    // SAFETY: our mapping.
    unsafe { libc::madvise(a as *mut libc::c_void, 4096, libc::MADV_DONTNEED) };
    let e = verify_layout(&mut reader, pid, a, len, Layout::Small).unwrap_err();
    assert!(e.contains("is not present"), "{e}");
    // SAFETY: our mapping.
    unsafe { libc::munmap(p, (len + (2 << 20)) as usize) };

    // A PMD-mapped THP is order 9 but not PTE-mapped: rejected as ThpPte.
    let (p, a) = map_aligned(len as usize, 2 << 20);
    // SAFETY: our mapping.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
        libc::madvise(a as *mut libc::c_void, len as usize, libc::MADV_HUGEPAGE);
    }
    touch(a, len);
    match verify_layout(&mut reader, pid, a, len, Layout::ThpPte) {
        Err(e) if e.contains("PMD-mapped") => {}
        Err(e) if e.contains("order-9") => {
            eprintln!("SKIP: PMD part: this machine gave no 2 MiB THP here: {e}")
        }
        other => panic!("PMD-mapped THP accepted as PTE-mapped: {other:?}"),
    }
    // SAFETY: our mapping.
    unsafe { libc::munmap(p, (len + (2 << 20)) as usize) };
}
