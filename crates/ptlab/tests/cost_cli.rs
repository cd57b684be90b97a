//! `ptlab cost` and `ptlab run --param` from the command line.

mod common;

use common::ptlab_in_repo as ptlab;

#[test]
fn cost_compare_text_and_json() {
    let (code, out, err) = ptlab(&[
        "cost",
        "scenarios/seeds/mremap-batch-64k.ptl",
        "--param",
        "iterations=2",
        "--compare-before",
        "mremap-pte-batch",
        "--profile",
        "neoverse-n1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("== neoverse-n1 (arm64"), "{out}");
    assert!(out.contains("Per operation:"), "{out}");
    assert!(out.contains("cont_unfold"), "{out}");
    assert!(out.contains("Total: before"), "{out}");

    let (code, out, err) = ptlab(&[
        "cost",
        "scenarios/seeds/mremap-batch-64k.ptl",
        "--param",
        "iterations=1",
        "--compare-before",
        "mremap-pte-batch",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let profiles = v["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 6, "all built-in profiles by default");
    for p in profiles {
        let before = &p["before"]["events"];
        let after = &p["after"]["events"];
        // Intervals: each time's contains its point, the ratio's the ratio.
        for arm in ["before", "after"] {
            let (ns, r) = (p[arm]["ns"].as_f64().unwrap(), &p[arm]["ns_range"]);
            assert!(r["low"].as_f64().unwrap() <= ns && ns <= r["high"].as_f64().unwrap());
        }
        let ratio = &p["ratio"];
        let point = ratio["after_over_before"].as_f64().unwrap();
        assert!(ratio["low"].as_f64().unwrap() <= point + 1e-12);
        assert!(point <= ratio["high"].as_f64().unwrap() + 1e-12);
        if p["features"]["contpte"] == false {
            // tensor-g1: an arm64 kernel before 6.9, no contpte: per entry both ways.
            assert_eq!(before, after, "no contpte: batch size 1 either way");
            assert_eq!(
                p["before"]["calls"]["ptep_get"],
                p["after"]["calls"]["ptep_get"]
            );
        } else if p["arch"] == "arm64" {
            // 16 write faults (1 each), the mremap's move (256 per PTE, 16
            // batched), the zap of the emptied source (256 reads) and the
            // munmap's zap (256 reads): 16 + 256 + 256 + 256 and
            // 16 + 16 + 256 + 256.
            assert_eq!(p["before"]["calls"]["ptep_get"], 784);
            assert_eq!(p["after"]["calls"]["ptep_get"], 544);
            // The whole-program figure: its own ratio interval, and the
            // same nanoseconds saved (faults and stores are alike in both
            // arms).
            let pr = &p["program_ratio"];
            let pp = pr["after_over_before"].as_f64().unwrap();
            assert!(pr["low"].as_f64().unwrap() <= pp + 1e-12);
            assert!(pp <= pr["high"].as_f64().unwrap() + 1e-12);
            let saved = |fig: &str| {
                let g = |arm: &str| {
                    if fig == "pt" {
                        p[arm]["ns"].as_f64().unwrap()
                    } else {
                        p[arm]["program"]["ns"].as_f64().unwrap()
                    }
                };
                g("before") - g("after")
            };
            assert!((saved("pt") - saved("program")).abs() < 1e-6 * saved("pt"));
            // 16 folded blocks: each unfolded at the source and refolded at
            // the destination per PTE; none with batching.
            assert_eq!(before["cont_unfold"], 16);
            assert_eq!(before["cont_fold"], 16);
            assert!(after.get("cont_unfold").is_none());
            // + = cheaper after: the sign convention of reproduce and compare.
            assert!(p["change_pct"].as_f64().unwrap() > 0.0);
        } else {
            assert_eq!(before, after, "x86: batch size 1 either way");
        }
    }
    assert_eq!(v["params"]["iterations"], "1");
}

/// `--cpu-feature contpte=off` models arm64 without the contpte layer:
/// no fold/unfold, and the mremap batching changes nothing. Unknown
/// features are usage errors; `run` takes the switch too.
#[test]
fn cpu_feature_switches() {
    let (code, out, err) = ptlab(&[
        "cost",
        "scenarios/seeds/mremap-batch-64k.ptl",
        "--param",
        "iterations=1",
        "--profile",
        "neoverse-n1",
        "--cpu-feature",
        "contpte=off",
        "--compare-before",
        "mremap-pte-batch",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &v["profiles"][0];
    assert_eq!(p["features"]["contpte"], false);
    assert!(p["before"]["events"].get("cont_unfold").is_none());
    assert_eq!(p["before"]["events"], p["after"]["events"]);
    let (code, _, err) = ptlab(&[
        "cost",
        "scenarios/seeds/mremap-batch-64k.ptl",
        "--cpu-feature",
        "warp=on",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown CPU feature 'warp'"), "{err}");
    let (code, out, err) = ptlab(&[
        "run",
        "scenarios/seeds/mremap-batch-64k.ptl",
        "--arch",
        "arm64",
        "--param",
        "iterations=1",
        "--cpu-feature",
        "contpte=off",
    ]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn cost_errors_are_reported() {
    let (code, _, err) = ptlab(&[
        "cost",
        "scenarios/seeds/mremap-batch-4k.ptl",
        "--param",
        "iteration=1",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--param iteration: the scenario declares no such parameter"),
        "{err}"
    );
    let (code, _, err) = ptlab(&[
        "cost",
        "scenarios/seeds/mremap-batch-4k.ptl",
        "--arch",
        "x86_64",
        "--profile",
        "neoverse-n1",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("is for arm64"), "{err}");
    let (code, _, err) = ptlab(&[
        "cost",
        "scenarios/seeds/mremap-batch-4k.ptl",
        "--profile",
        "nope",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("no built-in profile named 'nope'"), "{err}");
    let (code, _, err) = ptlab(&["cost", "/nonexistent.ptl"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read scenario"), "{err}");
}

#[test]
fn cost_single_profile_per_line() {
    let (code, out, err) = ptlab(&[
        "cost",
        "scenarios/seeds/fork-4k.ptl",
        "--param",
        "size=4M",
        "--param",
        "iterations=1",
        "--arch",
        "x86_64",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("== zen3"), "{out}");
    assert!(!out.contains("neoverse"), "{out}");
    assert!(out.contains("Per line:"), "{out}");
    assert!(out.contains("process_create"), "{out}");
}

#[test]
fn run_accepts_params() {
    let (code, out, err) = ptlab(&[
        "run",
        "scenarios/seeds/uffd-move.ptl",
        "--param",
        "size=64K",
        "--param",
        "chunk=16K",
        "--param",
        "stride=16K",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("PASS"), "{out}");
}

/// `ptlab calibrate --quick` on the live machine writes a valid profile
/// whose calibrated prices carry confidence intervals (no time is
/// asserted: the machine's load changes them).
#[test]
fn calibrate_writes_a_valid_profile() {
    let dir = std::env::temp_dir().join(format!("ptlab-calibrate-{}", std::process::id()));
    let out = dir.join("local.toml");
    let out_s = out.display().to_string();
    let (code, stdout, err) = ptlab(&["calibrate", "--quick", "--out", &out_s]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(stdout.contains("wrote"), "{stdout}");
    let p = ptlab_cost::load_profile(&out).expect("a valid profile");
    let calibrated: Vec<_> = p
        .prices
        .iter()
        .filter(|(_, pr)| pr.basis == ptlab_cost::Basis::Calibrated)
        .collect();
    assert!(calibrated.len() >= 8, "{calibrated:?}");
    for (e, pr) in calibrated {
        assert!(pr.ns.is_finite() && pr.ns >= 0.0, "{e:?}");
        // Measured, or measured outside its sourced range and bounded to
        // the allowed band (a loaded machine: other test binaries run
        // beside this one), saying so before the measurement's source.
        assert!(
            pr.source.starts_with("ptlab calibrate:")
                || (pr.source.starts_with("fit bounded: ")
                    && pr.source.contains("; ptlab calibrate:")),
            "{e:?}: {}",
            pr.source
        );
        // Where and when, and from how many repetitions.
        assert!(
            pr.source.contains("calibrated on ") && pr.source.contains(" repetitions"),
            "{e:?}: {}",
            pr.source
        );
    }
    // The whole-program figure's prices are fitted too. A fit the
    // plausibility check refuses (a loaded machine: other test binaries
    // run beside this one) keeps the sourced price and says so; that is
    // the check working, so it counts as fitted here, with its record.
    use ptlab_model::HwEvent as E;
    for e in [
        E::FaultEntry,
        E::FaultHandle,
        E::FolioAllocPcp,
        E::MemcgCharge,
        E::LruAdd,
        E::ClearPage4k,
        E::ClearHuge4k,
        E::UserStore4k,
        E::UserLoad4k,
        E::Syscall,
    ] {
        let pr = p.price_of(e);
        if pr.basis != ptlab_cost::Basis::Calibrated {
            assert!(
                pr.source.starts_with("fit refused: ") && pr.source.contains("fitted"),
                "{e:?} neither fitted nor refused by the check: {:?} {}",
                pr.basis,
                pr.source
            );
            continue;
        }
        let (lo, hi) = pr.range();
        assert!(lo <= pr.ns && pr.ns <= hi, "{e:?}: {lo} {} {hi}", pr.ns);
    }
    assert!(p.features.source.contains("vulnerabilities/meltdown"));
    let (code, stdout, err) = ptlab(&["calibrate", "--quick", "--check", &out_s]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(stdout.contains("mremap-table-aligned"), "{stdout}");
    // Every contrast ptlab bench measures (changes 1-5 and the proposed
    // pageout), the 64 KiB arms included, with its predicted and live
    // ratio (as root).
    match ptlab_bench::bench::unavailable() {
        None => {
            for c in [
                "mremap-batch-64k vs mremap-batch-4k",
                "mremap-table-aligned vs mremap-table-unaligned",
                "fork-thp-pte vs fork-4k",
                "mprotect-64k vs mprotect-4k",
                "mprotect-thp-pte vs mprotect-4k",
                "uffd-move vs uffd-copy",
                "pageout-64k vs pageout-4k",
            ] {
                // An arm that could not run here (no userfaultfd, no 64 KiB
                // mTHP) is reported instead of its contrast.
                let arms: Vec<&str> = c.split(" vs ").collect();
                if arms
                    .iter()
                    .any(|a| stdout.contains(&format!("{a}: not measured")))
                {
                    continue;
                }
                assert!(stdout.contains(c), "{c}: {stdout}");
            }
            assert!(stdout.contains("predicted ratios within 25% of live"));
            assert!(stdout.contains("predictions within 1.5× of live"));
        }
        Some(why) => assert!(
            stdout.contains(&format!("contrasts: SKIPPED: {why}")),
            "{stdout}"
        ),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
