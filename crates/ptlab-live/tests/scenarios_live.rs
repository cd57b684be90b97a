//! Every scenario under tests/scenarios/ (and scenarios/examples/) diffed
//! against the live kernel. A divergence fails the test unless
//! docs/divergences.md lists the scenario's file name; listed ones are
//! printed (never hidden). Needs root; skips with a printed reason otherwise.

use ptlab_live::{diff_file, DiffOptions, DiffOutcome};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scenario_files() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in ["tests/scenarios", "scenarios/examples"] {
        let Ok(rd) = std::fs::read_dir(workspace().join(dir)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "ptl") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

#[test]
fn every_scenario_agrees_with_the_live_kernel() {
    if let Some(why) = ptlab_live::live_unavailable() {
        eprintln!("SKIP: every_scenario_agrees_with_the_live_kernel: {why}");
        return;
    }
    if !ptlab_live::is_root() {
        eprintln!(
            "SKIP: every_scenario_agrees_with_the_live_kernel: needs root (frame numbers, \
             kpageflags, kpagecount and THP knob writes)"
        );
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
