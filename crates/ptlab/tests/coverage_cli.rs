//! `ptlab coverage` and the coverage parts of `ptlab fuzz` from the
//! command line.

mod common;

use common::ptlab_in_repo as ptlab;
use ptlab_model::core::rules::Rule;
use std::collections::BTreeSet;

fn json(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["coverage", "--format", "json", "-q"];
    a.extend_from_slice(args);
    let (code, out, err) = ptlab(&a);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("one JSON object")
}

fn hits(j: &serde_json::Value, rule: &str) -> u64 {
    j["table"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == rule)
        .unwrap_or_else(|| panic!("{rule} in the table"))["hits"]
        .as_u64()
        .unwrap()
}

#[test]
fn one_scenario_names_the_rules_it_takes() {
    let f = "tests/scenarios/cov-01-huge-zero-fork-zap.ptl";
    let j = json(&[f]);
    assert_eq!(j["rules"], Rule::COUNT);
    assert_eq!(j["scenarios"], 1);
    assert_eq!(
        j["runs"], 4,
        "2 architectures × as written and switched back"
    );
    for r in [
        "fork.copy_huge_zero_pmd",
        "zap.split_huge_zero_pmd",
        "zap.huge_zero_pmd",
    ] {
        assert!(hits(&j, r) > 0, "{r}");
        let row = j["table"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["rule"] == r)
            .unwrap();
        assert_eq!(row["scenarios"][0], f);
    }
    let missed: Vec<&str> = j["missed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(missed.contains(&"mremap.move_normal_pud"));
    assert_eq!(
        j["exercised"].as_u64().unwrap() as usize + missed.len(),
        Rule::COUNT
    );
}

#[test]
fn the_seed_switch_runs_reach_both_sides() {
    let f = "scenarios/seeds/mremap-table-aligned.ptl";
    let shipped = json(&["--before", "shipped", "--arch", "x86_64", f]);
    let before = json(&["--before", "all", "--arch", "x86_64", f]);
    assert!(hits(&shipped, "mremap.move_normal_pmd") > 0);
    assert_eq!(hits(&shipped, "mremap.move_ptes_per_pte"), 0);
    assert_eq!(hits(&before, "mremap.move_normal_pmd"), 0);
    assert!(hits(&before, "mremap.move_ptes_per_pte") > 0);
    // A 1G `size` is kept: the PUD-level table move is reached.
    let pud = json(&[
        "--before",
        "shipped",
        "--arch",
        "x86_64",
        "docs/examples/seed-mremap-1g-table-move.ptl",
    ]);
    assert!(hits(&pud, "mremap.move_normal_pud") > 0);
}

#[test]
fn text_output_and_errors() {
    let (code, out, err) = ptlab(&[
        "coverage",
        "-q",
        "tests/scenarios/cov-07-range-wraps-and-past-end.ptl",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("mlock.einval_range_wraps"), "{out}");
    assert!(out.contains("not exercised ("), "{out}");
    assert!(
        out.contains(&format!("rules (")) && out.contains(&format!(" of {} rules", Rule::COUNT)),
        "{out}"
    );
    let (code, _, err) = ptlab(&["coverage", "no/such/dir"]);
    assert_eq!(code, 2);
    assert!(err.contains("no/such/dir"), "{err}");
    let (code, out, _) = ptlab(&[
        "coverage",
        "--missed",
        "-q",
        "tests/scenarios/cov-07-range-wraps-and-past-end.ptl",
    ]);
    assert_eq!(code, 0);
    assert!(
        !out.contains("mlock.einval_range_wraps"),
        "--missed lists only missed rules"
    );
}

/// The rules docs/coverage.md says nothing exercises are exactly the rules
/// the shipped scenarios leave unexercised.
#[test]
fn docs_list_what_the_shipped_scenarios_miss() {
    let j = json(&[]);
    let missed: BTreeSet<String> = j["missed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/coverage.md"
    ))
    .unwrap();
    let section = doc
        .split("### Rules nothing exercises")
        .nth(1)
        .expect("the section");
    let listed: BTreeSet<String> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('`').nth(1).map(str::to_string))
        .collect();
    assert_eq!(
        missed, listed,
        "docs/coverage.md's list of unexercised rules is out of date"
    );
    for n in &listed {
        assert!(Rule::from_name(n).is_some(), "{n} is not a rule");
    }
}

#[test]
fn fuzz_help_lists_every_weight_with_its_default() {
    let (code, out, _) = ptlab(&["fuzz", "--help"]);
    assert_eq!(code, 0);
    for (name, value) in ptlab_live::fuzz::GenWeights::default().entries() {
        assert!(
            out.contains(&format!("{name}={value}")),
            "--help lacks {name}={value}"
        );
    }
    assert!(out.contains(&format!("rules N/{}", Rule::COUNT)));
    let (code, _, err) = ptlab(&[
        "fuzz",
        "--model-only",
        "--weight",
        "nonsense=1",
        "--steps",
        "1",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown weight"), "{err}");
}

#[test]
fn model_only_fuzz_prints_coverage() {
    let dir = std::env::temp_dir().join(format!("ptlab-cov-cli-{}", std::process::id()));
    let d = dir.to_string_lossy().to_string();
    let fuzz = [
        "fuzz",
        "--model-only",
        "--seed",
        "5",
        "--steps",
        "20",
        "-q",
        "-o",
        &d,
    ];
    let (code, out, err) = ptlab(&fuzz);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("rule coverage: "), "{out}");
    assert!(out.contains("20 scenarios"), "{out}");
    let (code, out, err) = ptlab(&[&fuzz[..], &["--format", "json"]].concat());
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(j["coverage"]["exercised"].as_u64().unwrap() > 30);
    assert_eq!(j["coverage"]["rules"], Rule::COUNT);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn show_case_prints_the_planned_case_and_needs_a_seed() {
    let args = [
        "fuzz",
        "--model-only",
        "--seed",
        "20261128",
        "--show-case",
        "7",
    ];
    let (code, a, err) = ptlab(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        a.starts_with("# ptlab fuzz --seed 20261128 --model-only --epoch 16 case 7"),
        "{a}"
    );
    assert!(
        a.contains("guided weights:"),
        "case 7 follows six cases' coverage: {a}"
    );
    let (_, b, _) = ptlab(&args);
    assert_eq!(a, b, "the same case every time");
    let (_, plain, _) = ptlab(&[
        "fuzz",
        "--model-only",
        "--seed",
        "20261128",
        "--show-case",
        "7",
        "--no-guide",
    ]);
    assert!(!plain.contains("guided weights:"));
    assert_ne!(plain, a);
    let (code, _, err) = ptlab(&["fuzz", "--show-case", "7"]);
    assert_eq!(code, 2);
    assert!(err.contains("--seed"), "{err}");
}
