//! Every shipped scenario (tests/scenarios/, scenarios/, docs/divergence-cases/) passes on the
//! model, on both architectures (or the one its `# arch: NAME` line names),
//! with the invariant checker run after every
//! statement; a kernel finding fails exactly at the lines it names. The seed workloads (scenarios/seeds/) are benchmarks sized
//! for `ptlab cost`; they run with small parameters, invariants checked, in
//! crates/ptlab-cost/tests/event_counts.rs. A shipped example sized for
//! a big machine (a `param size` over 1 GiB, such as
//! scenarios/examples/fork-1t.ptl) runs here with `size = 1G`; its full
//! size runs in crates/ptlab/tests/scale.rs without the checker.

use ptlab_model::{ArchKind, ModelConfig};
use ptlab_scenario::{run_source, ModelBackend, RunOptions};
use std::path::{Path, PathBuf};

fn ptl_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            ptl_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "ptl")
            && !p.parent().is_some_and(|d| d.ends_with("scenarios/seeds"))
        {
            out.push(p);
        }
    }
}

#[test]
fn all_scenarios_pass_on_the_model() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    ptl_files(&root.join("tests/scenarios"), &mut files);
    ptl_files(&root.join("scenarios"), &mut files);
    ptl_files(&root.join("docs/divergence-cases"), &mut files);
    files.sort();
    assert!(
        files.len() >= 16,
        "expected the spec scenarios, found {}",
        files.len()
    );
    let mut failed = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let name = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        let big = ptlab_scenario::parse(&name, &src).is_ok_and(|s| {
            s.params().iter().any(|(n, _, default)| {
                n == "size"
                    && ptlab_scenario::lexer::parse_number(default).is_ok_and(|v| v > 1 << 30)
            })
        });
        let opts = RunOptions {
            params: if big {
                vec![("size".to_string(), "1G".to_string())]
            } else {
                Vec::new()
            },
            ..RunOptions::default()
        };
        // A scenario whose outcome is one arch's kernel config says so in
        // a `# arch: NAME` line and runs on that arch only (ff-s19: PT_RECLAIM
        // is built on x86-64 alone).
        let only = src
            .lines()
            .find_map(|l| l.trim().strip_prefix("# arch: "))
            .and_then(|a| ArchKind::from_name(a.trim()));
        for arch in ArchKind::ALL {
            if only.is_some_and(|a| a != arch) {
                continue;
            }
            let mut backend =
                ModelBackend::new(ModelConfig::for_arch(arch)).check_every_statement(true);
            match run_source(&name, &src, &mut backend, &opts) {
                Err(e) => failed.push(format!("{name} ({}): parse error: {e}", arch.name())),
                Ok(report) if !report.passed() => {
                    let why: Vec<String> = report.failures.iter().map(|x| x.to_string()).collect();
                    failed.push(format!("{name} ({}):\n  {}", arch.name(), why.join("\n  ")));
                }
                Ok(report) => assert!(report.expectations_passed > 0, "{name}: no expectation ran"),
            }
        }
    }
    assert!(
        failed.is_empty(),
        "failing scenarios:\n{}",
        failed.join("\n")
    );
}
