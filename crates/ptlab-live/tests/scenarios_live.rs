//! Every scenario under tests/scenarios/ (and scenarios/examples/) diffed
//! against the live kernel. A divergence fails the test unless
//! docs/divergences.md lists the scenario's file name; listed ones are
//! printed (never hidden). Needs root; skips with a printed reason otherwise.

mod common;

use common::{scenario_files, workspace};
use ptlab_live::{diff_file, DiffOptions, DiffOutcome};
use std::path::Path;

#[test]
fn every_scenario_agrees_with_the_live_kernel() {
    if ptlab_live::skip_live_test(
        "every_scenario_agrees_with_the_live_kernel",
        "needs root (frame numbers, kpageflags, kpagecount and THP knob writes)",
    ) {
        return;
    }
    let listed = std::fs::read_to_string(workspace().join("docs/divergences.md"))
        .expect("docs/divergences.md exists");
    let files = scenario_files();
    assert!(!files.is_empty(), "no scenarios found");
    let mut unexpected = Vec::new();
    let (mut agree, mut known, mut partial) = (0, 0, 0);
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let mut rep = diff_file(f, &DiffOptions::default()).expect("diff runs");
        if rep.outcome() == DiffOutcome::Diverge && !listed.contains(&name) {
            // The THP counters are global: other processes' faults can move
            // them. A divergence must reproduce to count.
            let again = diff_file(f, &DiffOptions::default()).expect("diff runs");
            if again.outcome() != DiffOutcome::Diverge {
                eprintln!(
                    "FLAKY {name}: diverged once, agreed on a re-run (background activity):\n{}",
                    rep.render_text()
                );
            }
            rep = again;
        }
        match rep.outcome() {
            DiffOutcome::Agree => agree += 1,
            DiffOutcome::Partial => {
                partial += 1;
                eprintln!("PARTIAL {name}:\n{}", rep.render_text());
            }
            DiffOutcome::Diverge if listed.contains(&name) => {
                known += 1;
                eprintln!(
                    "KNOWN DIVERGENCE {name} (listed in docs/divergences.md):\n{}",
                    rep.render_text()
                );
            }
            DiffOutcome::Diverge => {
                unexpected.push(format!("{name}:\n{}", rep.render_text()));
            }
        }
    }
    eprintln!(
        "live diff of {} scenarios: {agree} agree, {known} known divergences, {partial} partial, {} new divergences",
        files.len(),
        unexpected.len()
    );
    assert!(
        unexpected.is_empty(),
        "divergences not listed in docs/divergences.md:\n{}",
        unexpected.join("\n")
    );
}

/// `swap SIZE` lines of `src` turned into `swap SIZE blockdev` (None when
/// the scenario has no swap area, or already names its kind).
fn on_blockdev(src: &str) -> Option<String> {
    let mut changed = false;
    let out: Vec<String> = src
        .lines()
        .map(|l| {
            let t = l.trim_start();
            let words: Vec<&str> = t.split_whitespace().collect();
            if words.len() == 2 && words[0] == "swap" && words[1] != "off" {
                changed = true;
                format!("{l} blockdev")
            } else {
                l.to_string()
            }
        })
        .collect();
    changed.then(|| out.join("\n") + "\n")
}

/// Every scenario with a swap area, run again with the area on a block
/// device (a loop device live): large folios then go out whole and stay in
/// the swap cache (docs/ops/swap.md S14), and the model must still agree.
/// swap-18 is left out: its sizes under one page give EIO on a block
/// device (swap-23 is its block-device version).
#[test]
fn every_swap_scenario_agrees_on_a_block_device() {
    if ptlab_live::skip_live_test(
        "every_swap_scenario_agrees_on_a_block_device",
        "needs root (swapon, loop devices)",
    ) {
        return;
    }
    if !Path::new("/dev/loop-control").exists() {
        eprintln!("SKIP: every_swap_scenario_agrees_on_a_block_device: no loop driver (/dev/loop-control)");
        return;
    }
    let mut n = 0;
    let mut bad = Vec::new();
    for f in scenario_files() {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if !f.parent().unwrap().ends_with("tests/scenarios") || name.starts_with("swap-18-") {
            continue;
        }
        let src = std::fs::read_to_string(&f).expect("read scenario");
        let Some(blk) = on_blockdev(&src) else {
            continue;
        };
        n += 1;
        let run = || {
            ptlab_live::diff_source(&format!("{name} (blockdev)"), &blk, &DiffOptions::default())
                .expect("diff runs")
        };
        let mut rep = run();
        if rep.outcome() == DiffOutcome::Diverge {
            rep = run(); // global counters: a divergence must reproduce
        }
        if rep.outcome() != DiffOutcome::Agree {
            bad.push(format!("{name}:\n{}", rep.render_text()));
        }
    }
    eprintln!(
        "live diff on a block device: {n} swap scenarios, {} not agreeing",
        bad.len()
    );
    assert!(n >= 15, "only {n} swap scenarios found");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn swap_lines_move_to_a_block_device() {
    assert_eq!(
        on_blockdev("swap 64M\n  swap 8K\nswap off\nswap 1M blockdev\n").as_deref(),
        Some("swap 64M blockdev\n  swap 8K blockdev\nswap off\nswap 1M blockdev\n")
    );
    assert_eq!(on_blockdev("p = mmap 4K\n"), None);
}
