//! A short, bounded fuzz run against the live kernel: two fixed seeds (the
//! gate) and one seed derived from the clock (exploration). About 30 s in
//! total.
//!
//! On a fixed seed, a divergence that reproduces fails the test unless its
//! summary matches a `Fuzz signature:` line in docs/divergences.md. The
//! clock-derived seed explores new cases on every run; what it finds is
//! printed as NEW with its seed and case (reproduce with `ptlab fuzz --seed
//! N --ops 20 --show-case C`) but does not fail the test: a gate must give
//! the same verdict on the same tree, and a finding there is a lead for the
//! next fix (it becomes a scenario, and its seed can join the fixed ones).
//! Divergences that do not reproduce on a second run (background activity
//! moving the global THP counters, khugepaged) are printed as flaky, never
//! silently dropped.

use ptlab_live::fuzz::{fuzz, time_seed, FuzzOptions};
use std::path::Path;
use std::time::Duration;

fn known_signatures() -> Vec<String> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/divergences.md");
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once("Fuzz signature: `"))
        .filter_map(|(_, rest)| rest.split_once('`').map(|(sig, _)| sig.to_string()))
        .collect()
}

#[test]
fn bounded_fuzz_finds_no_new_divergence() {
    if ptlab_live::skip_live_test(
        "bounded_fuzz_finds_no_new_divergence",
        "needs root (frames, knobs)",
    ) {
        return;
    }
    let known = known_signatures();
    let out = std::env::temp_dir().join(format!("ptlab-fuzz-ci-{}", std::process::id()));
    let mut new = Vec::new();
    let mut explored = Vec::new();
    // 16237206160759859863: the clock-derived seed whose case 17 found
    // docs/ops/swap.md S16 (a read swap-in in an mlocked VMA is exclusive).
    for (label, seed) in [
        ("fixed", 20_251_123u64),
        ("fixed", 16_237_206_160_759_859_863),
        ("time-derived", time_seed()),
    ] {
        eprintln!("fuzz ({label} seed): ptlab fuzz --seed {seed} --time 10");
        let opts = FuzzOptions {
            seed,
            cases: None,
            time: Some(Duration::from_secs(10)),
            ops: 20,
            out_dir: out.clone(),
            shrink_budget: Duration::from_secs(8),
            ..Default::default()
        };
        let sum = fuzz(&opts, &mut |_| {}).expect("fuzz runs");
        eprintln!(
            "  seed {seed}: {} scenarios, {} agree, {} partial, {} findings",
            sum.cases,
            sum.agree,
            sum.partial,
            sum.findings.len()
        );
        assert!(sum.cases > 0, "no scenario ran");
        for f in &sum.findings {
            let listed = known.iter().any(|k| f.summary.contains(k.as_str()));
            eprintln!(
                "  {} finding (seed {seed}, case {}): {}\n  saved {}\n{}",
                if f.flaky {
                    "FLAKY"
                } else if listed {
                    "KNOWN"
                } else {
                    "NEW"
                },
                f.case,
                f.summary,
                f.path.display(),
                f.report
            );
            if !f.flaky && !listed {
                let line = format!("seed {seed} case {}: {}", f.case, f.summary);
                if label == "fixed" {
                    new.push(line);
                } else {
                    explored.push(line);
                }
            }
        }
    }
    if !explored.is_empty() {
        eprintln!(
            "NEW divergences found by the clock-derived seed (not gating; fix or list them):\n{}",
            explored.join("\n")
        );
    }
    assert!(
        new.is_empty(),
        "new divergences (add them to docs/divergences.md or fix the model):\n{}",
        new.join("\n")
    );
}

/// `--jobs 2` on the live kernel: every case runs on its job's CPU, the
/// two jobs on distinct CPUs, one results line per case, and the same
/// cases (indices) as one job would run.
#[test]
fn two_jobs_run_pinned_on_distinct_cpus() {
    if ptlab_live::skip_live_test(
        "two_jobs_run_pinned_on_distinct_cpus",
        "needs root (frames, knobs)",
    ) {
        return;
    }
    if ptlab_live::fuzz::allowed_cpus().len() < 2 {
        eprintln!("SKIP: two_jobs_run_pinned_on_distinct_cpus: this machine has fewer than 2 CPUs");
        return;
    }
    let out = std::env::temp_dir().join(format!("ptlab-fuzz-jobs-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let results = out.join("r.jsonl");
    let opts = FuzzOptions {
        seed: 7,
        cases: Some(8),
        time: None,
        ops: 12,
        out_dir: out.clone(),
        shrink_budget: Duration::from_secs(5),
        jobs: 2,
        shard: ptlab_live::fuzz::Shard::parse("1/2").unwrap(),
        results: Some(results.clone()),
        ..Default::default()
    };
    let sum = fuzz(&opts, &mut |_| {}).expect("fuzz runs");
    assert!(sum.errors.is_empty(), "{:?}", sum.errors);
    assert_eq!(sum.cpus.len(), 2);
    assert_ne!(sum.cpus[0], sum.cpus[1]);
    let text = std::fs::read_to_string(&results).unwrap();
    let recs = ptlab_live::fuzz::parse_results("r.jsonl", &text).unwrap();
    let mut cases: Vec<u64> = recs.iter().map(|r| r.case).collect();
    cases.sort();
    assert_eq!(cases, [1, 3, 5, 7], "shard 1/2 of 8 cases");
    for r in &recs {
        let cpu = r.cpu.expect("a pinned job records its CPU") as usize;
        assert_eq!(
            cpu, sum.cpus[r.worker as usize],
            "case {} ran off its CPU",
            r.case
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// The `enabled` knobs as they are now (top level and every size).
fn knob_values() -> Vec<String> {
    let dir = "/sys/kernel/mm/transparent_hugepage";
    let mut paths = vec![format!("{dir}/enabled")];
    for order in 2..=9u32 {
        paths.push(format!("{dir}/hugepages-{}kB/enabled", 4u64 << order));
    }
    paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect()
}

/// Knob epochs with `--jobs 2`: the cases of an epoch that change no
/// global state after its policy run side by side — two of them, on the
/// two jobs' CPUs, overlap in time — every case still runs once on its
/// job's CPU, and the knobs are back as they were when the campaign ends.
#[test]
fn epochs_run_cases_side_by_side_on_two_jobs() {
    if ptlab_live::skip_live_test(
        "epochs_run_cases_side_by_side_on_two_jobs",
        "needs root (frames, knobs)",
    ) {
        return;
    }
    if ptlab_live::fuzz::allowed_cpus().len() < 2 {
        eprintln!("SKIP: epochs_run_cases_side_by_side_on_two_jobs: fewer than 2 CPUs");
        return;
    }
    let out = std::env::temp_dir().join(format!("ptlab-fuzz-epochs-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let results = out.join("r.jsonl");
    let opts = FuzzOptions {
        seed: 11,
        cases: Some(48),
        time: None,
        ops: 12,
        out_dir: out.clone(),
        shrink_budget: Duration::from_secs(5),
        jobs: 2,
        epoch: 16,
        results: Some(results.clone()),
        ..Default::default()
    };
    // Taken first, so that no other live run changes the knobs between
    // the two reads (the campaign shares this thread's lock).
    let lock = std::sync::Arc::new(ptlab_live::knobs::acquire_or_wait("test").unwrap());
    let _shared = ptlab_live::knobs::share_lock_in_this_thread(lock);
    let knobs_before = knob_values();
    let sum = fuzz(&opts, &mut |_| {}).expect("fuzz runs");
    assert_eq!(
        knob_values(),
        knobs_before,
        "the campaign restores every knob"
    );
    assert!(sum.errors.is_empty(), "{:?}", sum.errors);
    let text = std::fs::read_to_string(&results).unwrap();
    let recs = ptlab_live::fuzz::parse_results("r.jsonl", &text).unwrap();
    let mut cases: Vec<u64> = recs.iter().map(|r| r.case).collect();
    cases.sort();
    assert_eq!(cases, (0..48).collect::<Vec<_>>(), "every case once");
    for r in &recs {
        assert_eq!(r.epoch, Some(r.case / 16), "case {}", r.case);
        let cpu = r.cpu.expect("a pinned job records its CPU") as usize;
        assert_eq!(
            cpu, sum.cpus[r.worker as usize],
            "case {} ran off its CPU",
            r.case
        );
    }
    // When each case ran: from the end of its wait for the gate.
    let span =
        |r: &ptlab_live::fuzz::FuzzRecord| (r.start + r.wait_secs, r.start + r.wait_secs + r.secs);
    let shared: Vec<_> = recs.iter().filter(|r| !r.exclusive).collect();
    assert!(shared.len() >= 4, "{} cases ran side by side", shared.len());
    let overlapping = shared.iter().any(|a| {
        shared.iter().any(|b| {
            let ((a0, a1), (b0, b1)) = (span(a), span(b));
            a.epoch == b.epoch && a.cpu != b.cpu && a0 < b1 && b0 < a1
        })
    });
    assert!(
        overlapping,
        "no two cases of one epoch overlapped on the two CPUs"
    );
    // Cases that ran alone never overlapped another case.
    for a in recs
        .iter()
        .filter(|r| r.exclusive && r.verdict == ptlab_live::fuzz::Verdict::Agree)
    {
        for b in recs.iter().filter(|b| b.case != a.case) {
            let ((a0, a1), (b0, b1)) = (span(a), span(b));
            assert!(
                !(a0 + 0.005 < b1 && b0 + 0.005 < a1),
                "case {} ran alone but overlapped case {}",
                a.case,
                b.case
            );
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// Two diffs at once, on two CPUs, whose statements fault 64 KiB folios
/// and PMD THPs in MADV_HUGEPAGE regions (the THP counters every one of
/// them moves are global): with `attribute_counters` each run's counter
/// steps count its own statements only, so no step of either run sees the
/// other's faults — not even once, in a first run that its re-runs would
/// have overruled (without attribution nearly every step would). With
/// `madvise` policies only a program with MADV_HUGEPAGE regions moves
/// these counters; under load one did, now and then, during a step (the
/// test failed 2 times in 300 runs at a load of 10, with `thp_split_pmd`
/// moving too, which neither run does; issue 16's sixth round), so an
/// attempt that shows something is repeated, and three that all do fail.
#[test]
fn attributed_counters_keep_two_concurrent_diffs_apart() {
    let Some(cpus) = two_job_cpus(
        "attributed_counters_keep_two_concurrent_diffs_apart",
        "needs root",
    ) else {
        return;
    };
    let lock = std::sync::Arc::new(ptlab_live::knobs::acquire_or_wait("test").unwrap());
    let _shared = ptlab_live::knobs::share_lock_in_this_thread(lock.clone());
    let knobs_before = knob_values();
    {
        // The campaign's way: one session covers every knob; the policy
        // is set once, and the runs' own `thp` lines then write nothing.
        let mut cover = ptlab_live::knobs::KnobSession::covering_all().expect("cover");
        cover
            .set(
                ptlab_model::ThpKnob::TopLevel,
                ptlab_model::ThpMode::Madvise,
            )
            .unwrap();
        cover
            .set(ptlab_model::ThpKnob::Size(4), ptlab_model::ThpMode::Madvise)
            .unwrap();
        let src = "thp enabled madvise\nthp 64K madvise\n\
                   p = mmap 2M\nmadvise p 2M hugepage\nwrite p 2M\nmunmap p 2M\n\
                   q = mmap 1M\nmadvise q 1M hugepage\nwrite q 1M\n\
                   madvise q 512K dontneed\nwrite q 1M\n";
        let opts = ptlab_live::DiffOptions {
            attribute_counters: true,
            ..Default::default()
        };
        // One attempt: both threads' runs; what showed of the other run's
        // faults (None: nothing).
        let attempt = || -> Option<String> {
            let reports: Vec<_> = std::thread::scope(|s| {
                let hs: Vec<_> = cpus[..2]
                    .iter()
                    .map(|&cpu| {
                        let (lock, opts) = (lock.clone(), opts.clone());
                        s.spawn(move || {
                            ptlab_live::fuzz::pin_this_thread(cpu).unwrap();
                            let _shared = ptlab_live::knobs::share_lock_in_this_thread(lock);
                            (0..4)
                                .map(|i| {
                                    ptlab_live::diff::diff_source(
                                        &format!("a{cpu}-{i}.ptl"),
                                        src,
                                        &opts,
                                    )
                                    .unwrap()
                                })
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
            });
            if let Some(r) = reports
                .iter()
                .find(|r| r.divergences.iter().any(|d| d.kind == "stats"))
            {
                return Some(r.render_text());
            }
            // Under these `madvise` policies only MADV_HUGEPAGE regions fault
            // 64 KiB folios and PMD THPs, so those allocation counters moving
            // in a step that the model does not expect would be the other
            // run's faults — or another program's with MADV_HUGEPAGE regions
            // faulting during the step (seen under load: PMD faults with
            // `thp_split_pmd` moving too, which neither run does), which
            // attribution cannot exclude. Other programs also free (and split)
            // large folios they got under earlier policies at any time, so the
            // `nr_anon` gauges and split counters are not looked at.
            let differed: Vec<&String> = reports
                .iter()
                .flat_map(|r| &r.notes)
                .filter(|n| n.contains("counters moved differently"))
                .filter(|n| {
                    [
                        "64kB/anon_fault_alloc",
                        "2048kB/anon_fault_alloc",
                        "vmstat/thp_fault_alloc",
                    ]
                    .iter()
                    .any(|k| n.contains(k))
                })
                .collect();
            (!differed.is_empty()).then(|| {
                differed
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        };
        // The other run's faults, were they counted, would show in nearly
        // every step of every attempt; another program's show now and
        // then. So three attempts that all show some fail the test, as the
        // diff's own three-run rule does for counter differences.
        let mut seen = Vec::new();
        for _ in 0..3 {
            match attempt() {
                None => break,
                Some(m) => seen.push(m),
            }
        }
        assert!(
            seen.len() < 3,
            "another run's faults showed in a counter step, in three attempts:\n{}",
            seen.join("\n--\n")
        );
    }
    assert_eq!(knob_values(), knobs_before, "the cover restores every knob");
}

/// Runs `body` holding the knob lock, with the top-level THP knob and the
/// mTHP sizes of `orders` set to `always` under a cover, and checks that
/// the cover restores every knob afterwards.
fn under_always_cover(orders: &[u8], body: impl FnOnce()) {
    use ptlab_model::{ThpKnob, ThpMode};
    let lock = std::sync::Arc::new(ptlab_live::knobs::acquire_or_wait("test").unwrap());
    let _shared = ptlab_live::knobs::share_lock_in_this_thread(lock);
    let knobs_before = knob_values();
    {
        let mut cover = ptlab_live::knobs::KnobSession::covering_all().expect("cover");
        cover.set(ThpKnob::TopLevel, ThpMode::Always).unwrap();
        for &o in orders {
            cover.set(ThpKnob::Size(o), ThpMode::Always).unwrap();
        }
        body();
    }
    assert_eq!(knob_values(), knobs_before, "the cover restores every knob");
}

/// A run whose worker starts under a policy that lets every fault allocate
/// 16 KiB and 32 KiB folios (set before the run, as a fuzz knob epoch sets
/// its policy, through the campaign's covering session): its own `thp`
/// lines write nothing, its counters agree at every step (faults, a fork
/// whose child writes and exits, a partial munmap), and the cover puts
/// every knob back. (The live backend reads its counter base after its
/// worker has started, so the worker's own first faults are in no step;
/// this test passes with the base read before the start too: it does not
/// show that the worker's start moves the counters, only that such runs
/// agree.)
#[test]
fn a_run_started_under_an_always_policy_does_not_count_its_workers_start() {
    if ptlab_live::skip_live_test(
        "a_run_started_under_an_always_policy_does_not_count_its_workers_start",
        "needs root",
    ) {
        return;
    }
    under_always_cover(&[2, 3], || {
        let src = "thp enabled always\nthp 16K always\nthp 32K always\n\
                   p = mmap 1M\nwrite p 64K\nread p + 512K 4K\n\
                   fork c1\n@c1 write p 4K\nmunmap p + 512K 64K\n@c1 exit\nwrite p + 64K 4K\n";
        for i in 0..3 {
            let r = ptlab_live::diff::diff_source(&format!("s{i}.ptl"), src, &Default::default())
                .unwrap();
            assert!(
                r.divergences.iter().all(|d| d.kind != "stats"),
                "{}",
                r.render_text()
            );
        }
    });
}

/// A worker started under an `always` policy for small sizes (as a knob
/// epoch starts its cases' workers) holds no large folio of its own: its
/// stack is faulted while ptlab's PR_SET_THP_DISABLE still holds. The
/// exec'd worker's stack is new (a forked one inherits ptlab's), and
/// before the worker pre-faulted it first, a scenario `fork` split such a
/// folio by copy-on-write and moved `nr_anon_partially_mapped` and
/// `split_deferred` in the fork's step (14 flaky cases of 511 in a
/// campaign). Checked frame by frame (pagemap, kpageflags).
#[test]
fn a_worker_started_under_an_always_policy_has_no_large_folios_of_its_own() {
    const T: &str = "a_worker_started_under_an_always_policy_has_no_large_folios_of_its_own";
    if ptlab_live::skip_live_test(T, "needs root (PFNs, kpageflags)") {
        return;
    }
    under_always_cover(&[2, 3, 4], || {
        for round in 0..5 {
            let b = ptlab_live::LiveBackend::new().expect("live backend");
            fault_and_fork_leave_no_own_large_folios(b, &format!("round {round}: the worker"));
        }
    });
}

/// Run a faulting access (the fault handler writes its statics) and a
/// fork on `b`, end it, and check that its main worker has no anonymous
/// page of its own in a large folio.
fn fault_and_fork_leave_no_own_large_folios(mut b: ptlab_live::LiveBackend, who: &str) {
    let pid = b.pid_of("main").expect("main");
    let r = ptlab_scenario::run_source(
        "t.ptl",
        "read 0x100000000000\nexpect segv\nfork c1\n",
        &mut b,
        &Default::default(),
    )
    .expect("parses");
    assert!(r.passed(), "{:?}", r.failures);
    let large = own_large_folios(pid);
    drop(b);
    assert!(
        large.is_empty(),
        "{who}'s own anon pages in large folios:\n{}",
        large.join("\n")
    );
}

/// The anon pages of process `pid` that are parts of large folios (every
/// page of every VMA but `[vsyscall]`, through pagemap and kpageflags).
fn own_large_folios(pid: i32) -> Vec<String> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
    let kflags = std::fs::File::open("/proc/kpageflags").unwrap();
    let mut large = Vec::new();
    for line in maps.lines().filter(|l| !l.ends_with("[vsyscall]")) {
        let range = line.split_whitespace().next().unwrap();
        let (a, e) = range.split_once('-').unwrap();
        let (a, e) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(e, 16).unwrap(),
        );
        let mut page = a;
        while page < e {
            let mut w = [0u8; 8];
            pagemap.read_exact_at(&mut w, page / 4096 * 8).unwrap();
            let entry = u64::from_le_bytes(w);
            let pfn = entry & ((1 << 55) - 1);
            if entry >> 63 == 1 && pfn != 0 {
                let mut f = [0u8; 8];
                kflags.read_exact_at(&mut f, pfn * 8).unwrap();
                let flags = u64::from_le_bytes(f);
                // KPF_COMPOUND_HEAD 15, KPF_COMPOUND_TAIL 16,
                // KPF_ANON 12 (include/uapi/linux/kernel-page-flags.h).
                if flags & (1 << 12) != 0 && flags & (3 << 15) != 0 {
                    large.push(format!("{page:#x} in {line}"));
                }
            }
            page += 4096;
        }
    }
    large
}

/// A worker started ahead of its run (`live::prestart_worker`, as a fuzz
/// job starts its next case's worker while the case waits for the gate)
/// under the machine's own policy, then used by a run under an `always`
/// policy for 16K-64K set in between (as the next knob epoch sets it):
/// the run takes that worker (the same pid), its statements agree with the
/// model, and the worker has no large folio of its own after a faulting
/// access and a fork, as one started under the policy has none
/// (`a_worker_started_under_an_always_policy_has_no_large_folios_of_its_own`).
/// Its counters agree at every step too: nothing of the worker's start is
/// counted in a statement. A prestarted worker nobody takes is killed and
/// reaped (`drop_prestarted_worker`).
#[test]
fn a_prestarted_worker_serves_a_run_under_another_policy_without_large_folios() {
    const T: &str = "a_prestarted_worker_serves_a_run_under_another_policy_without_large_folios";
    if let Some(why) = ptlab_live::live_unavailable() {
        eprintln!("SKIP: {T}: {why}");
        return;
    }
    if !ptlab_live::is_root() || !ptlab_live::exec_workers() {
        eprintln!("SKIP: {T}: needs root (PFNs, kpageflags) and the exec'd worker");
        return;
    }
    for round in 0..3 {
        ptlab_live::live::prestart_worker(false).expect("prestart");
        let spare = ptlab_live::live::prestarted_worker_pid().expect("a prestarted worker");
        under_always_cover(&[2, 3, 4], || {
            let b = ptlab_live::LiveBackend::new().expect("live backend");
            let pid = b.pid_of("main").expect("main");
            assert_eq!(
                pid, spare,
                "round {round}: the run takes the prestarted worker"
            );
            fault_and_fork_leave_no_own_large_folios(
                b,
                &format!("round {round}: the prestarted worker"),
            );
        });
    }
    ptlab_live::live::prestart_worker(false).expect("prestart");
    let spare = ptlab_live::live::prestarted_worker_pid().expect("a prestarted worker");
    assert!(std::path::Path::new(&format!("/proc/{spare}")).exists());
    ptlab_live::live::drop_prestarted_worker();
    assert_eq!(ptlab_live::live::prestarted_worker_pid(), None);
    // Killed and reaped: no zombie left under its pid.
    assert!(
        !std::path::Path::new(&format!("/proc/{spare}")).exists(),
        "a prestarted worker nobody took is killed and reaped"
    );
}

/// Swap areas kept between runs (`knobs::set_swap_retention`, as a fuzz
/// campaign turns it on under its cover): a run whose `swap 64M` area is
/// empty when it ends leaves it active for the next run; the next run
/// that asks for the same size and kind takes it over (no swapon), swaps
/// pages out and back in and agrees with the model as a run with a fresh
/// area does; a run that asks for another kind gets a fresh area (the kept
/// one goes first, so two areas are never active at once); and turning
/// retention off, or the cover's end, swaps off and deletes a kept area.
#[test]
fn a_kept_swap_area_serves_the_next_run_and_goes_with_the_cover() {
    const T: &str = "a_kept_swap_area_serves_the_next_run_and_goes_with_the_cover";
    if ptlab_live::skip_live_test(T, "swapon needs root") {
        return;
    }
    use ptlab_live::knobs;
    use ptlab_live::swapfile::{self, SwapKind};
    let lock = std::sync::Arc::new(knobs::acquire_or_wait("test").unwrap());
    let _shared = knobs::share_lock_in_this_thread(lock);
    let path = swapfile::swap_path(std::process::id());
    let ours = || {
        std::fs::read_to_string("/proc/swaps")
            .unwrap_or_default()
            .lines()
            .skip(1)
            .count()
    };
    let areas_before = ours();
    let src = |kind: &str| {
        format!(
            "swap 64M{kind}\np = mmap 256K\nwrite p 256K\nmadvise p 256K pageout\n\
             read p 64K\nwrite p + 128K 4K\n"
        )
    };
    let run = |s: &str| {
        let r = ptlab_live::diff::diff_source("k.ptl", s, &Default::default()).unwrap();
        assert!(
            r.divergences.is_empty() && r.stopped.is_none(),
            "{}",
            r.render_text()
        );
        r
    };
    {
        let _cover = knobs::KnobSession::covering_all().expect("cover");
        knobs::set_swap_retention(true);
        let first = run(&src(""));
        assert!(!first.timing.swap_reused);
        assert_eq!(knobs::retained_swap(), Some((64 << 20, SwapKind::File)));
        assert!(swapfile::is_active(&path), "kept active");
        assert_eq!(swapfile::used_pages(&path), Some(0), "kept empty");
        let second = run(&src(""));
        assert!(second.timing.swap_reused, "the second run took it over");
        assert_eq!(knobs::retained_swap(), Some((64 << 20, SwapKind::File)));
        if std::path::Path::new("/dev/loop-control").exists() {
            // Another kind: the kept file goes, a block device comes.
            let third = run(&src(" blockdev"));
            assert!(!third.timing.swap_reused);
            assert_eq!(knobs::retained_swap(), Some((64 << 20, SwapKind::BlockDev)));
            assert_eq!(ours(), areas_before + 1, "one area at a time");
        }
        // Kept only for a run that makes the same area first thing.
        knobs::drop_retained_swap_unless(None);
        assert_eq!(knobs::retained_swap(), None);
        assert!(!path.exists() && !swapfile::is_active(&path));
        assert_eq!(ours(), areas_before);
        run(&src(""));
        assert!(swapfile::is_active(&path));
        // The cover's end takes a kept area with it.
    }
    assert_eq!(knobs::retained_swap(), None);
    assert!(!path.exists() && !swapfile::is_active(&path));
    assert_eq!(ours(), areas_before);
    assert!(!knobs::journal_path().exists(), "the journal is gone");
}

/// A case that makes a swap area and pages out runs beside a case that
/// makes none (issue 16's fifth round: `fuzz::epoch_sharing`, the swap
/// token): on two pinned threads with attributed counters, under a cover
/// with a `madvise` policy set once (as a knob epoch sets it), three runs
/// of each at the same time all agree with the model, the swap case's
/// second and third runs take over the area the first kept, and the
/// cover's end leaves no area, file or journal.
#[test]
fn a_swap_case_and_a_case_without_swap_run_side_by_side_and_agree() {
    const T: &str = "a_swap_case_and_a_case_without_swap_run_side_by_side_and_agree";
    let Some(cpus) = two_job_cpus(T, "swapon needs root") else {
        return;
    };
    use ptlab_live::knobs;
    use ptlab_live::swapfile;
    use ptlab_model::{ThpKnob, ThpMode};
    let lock = std::sync::Arc::new(knobs::acquire_or_wait("test").unwrap());
    let _shared = knobs::share_lock_in_this_thread(lock.clone());
    let path = swapfile::swap_path(std::process::id());
    let areas = || {
        std::fs::read_to_string("/proc/swaps")
            .unwrap_or_default()
            .lines()
            .skip(1)
            .count()
    };
    let areas_before = areas();
    let knobs_before = knob_values();
    {
        let mut cover = knobs::KnobSession::covering_all().expect("cover");
        cover.set(ThpKnob::TopLevel, ThpMode::Madvise).unwrap();
        cover.set(ThpKnob::Size(4), ThpMode::Madvise).unwrap();
        knobs::set_swap_retention(true);
        let policy = "thp enabled madvise\nthp 64K madvise\n";
        let with_swap = format!(
            "{policy}swap 64M\np = mmap 1M\nmadvise p 1M hugepage\nwrite p 1M\n\
             madvise p 512K pageout\nread p 64K\nwrite p + 128K 4K\n\
             madvise p + 512K 256K pageout\nread p + 512K 256K\n"
        );
        let without = format!(
            "{policy}p = mmap 2M\nmadvise p 2M hugepage\nwrite p 2M\nmunmap p 2M\n\
             q = mmap 1M\nmadvise q 1M hugepage\nwrite q 1M\n\
             madvise q 512K dontneed\nwrite q 1M\nmadvise q 256K cold\n"
        );
        let opts = ptlab_live::DiffOptions {
            attribute_counters: true,
            ..Default::default()
        };
        let reports: Vec<(usize, ptlab_live::diff::DiffReport)> = std::thread::scope(|s| {
            let hs: Vec<_> = [with_swap.as_str(), without.as_str()]
                .into_iter()
                .zip(&cpus[..2])
                .enumerate()
                .map(|(which, (src, &cpu))| {
                    let (lock, opts) = (lock.clone(), opts.clone());
                    s.spawn(move || {
                        ptlab_live::fuzz::pin_this_thread(cpu).unwrap();
                        let _shared = knobs::share_lock_in_this_thread(lock);
                        (0..3)
                            .map(|i| {
                                let r = ptlab_live::diff::diff_source(
                                    &format!("s{which}-{i}.ptl"),
                                    src,
                                    &opts,
                                )
                                .unwrap();
                                (which, r)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        for (_, r) in &reports {
            assert!(
                r.divergences.is_empty() && r.stopped.is_none(),
                "{}",
                r.render_text()
            );
        }
        let reused = reports
            .iter()
            .filter(|(w, r)| *w == 0 && r.timing.swap_reused)
            .count();
        assert_eq!(
            reused, 2,
            "the swap case's later runs took the kept area over"
        );
        assert!(swapfile::is_active(&path), "kept after the last run");
        // The cover's end takes the kept area with it.
        knobs::set_swap_retention(false);
    }
    assert_eq!(knobs::retained_swap(), None);
    assert!(!path.exists() && !swapfile::is_active(&path));
    assert_eq!(areas(), areas_before);
    assert!(!knobs::journal_path().exists(), "the journal is gone");
    assert_eq!(knob_values(), knobs_before, "the cover restores every knob");
}

/// The CPUs a test that runs two live jobs side by side pins them to, or
/// `None` after printing the SKIP line that says why it cannot run here:
/// no live kernel, not root (`root_why`), or fewer than 2 CPUs.
fn two_job_cpus(test: &str, root_why: &str) -> Option<Vec<usize>> {
    if ptlab_live::skip_live_test(test, root_why) {
        return None;
    }
    let cpus = ptlab_live::fuzz::allowed_cpus();
    if cpus.len() < 2 {
        eprintln!("SKIP: {test}: fewer than 2 CPUs");
        return None;
    }
    Some(cpus)
}
