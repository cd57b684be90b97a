//! The README's commands are true: one command for the main job, one for
//! the tests (the one `.ci/run` calls), example files that exist, nothing
//! pointing outside the repository, and no file left untracked by the
//! README's calibrate example.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(p: &str) -> String {
    std::fs::read_to_string(repo().join(p)).unwrap()
}

/// The contents of the ```sh blocks of a Markdown text.
fn sh_blocks(md: &str) -> Vec<String> {
    md.split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_string())
        .collect()
}

#[test]
fn readme_has_one_command_for_the_main_job_and_one_for_the_tests() {
    let readme = read("README.md");
    let blocks = sh_blocks(&readme);
    // The first block is the main job, in one command.
    assert_eq!(
        blocks[0].trim(),
        "cargo run --release -- reproduce",
        "{}",
        blocks[0]
    );
    // The tests: the block under "## Test" is the command .ci/run runs.
    let test = readme.split("## Test").nth(1).expect("a Test section");
    let cmd = sh_blocks(test)[0].trim().to_string();
    let ci = read(".ci/run");
    let ci_cmd = ci
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("cargo test"))
        .expect(".ci/run runs cargo test")
        .trim();
    assert_eq!(cmd, ci_cmd);
    assert!(!readme.contains("../shared") && !readme.contains("shared/SEEDS"));
}

#[test]
fn readme_example_inputs_exist() {
    let readme = read("README.md");
    let mut missing = Vec::new();
    for b in sh_blocks(&readme) {
        for w in b.split_whitespace() {
            let input = w.ends_with(".ptl") || (w.ends_with(".json") && w.starts_with("docs/"));
            if input && !repo().join(w).exists() {
                missing.push(w.to_string());
            }
        }
    }
    assert!(missing.is_empty(), "{missing:?}");
    // `ptlab` is said to be target/release/ptlab before it is used bare.
    let other = readme.split("## Other commands").nth(1).unwrap();
    let first_block = other.find("```sh").unwrap();
    assert!(other[..first_block].contains("target/release/ptlab"));
}

#[test]
fn the_calibrated_profile_readme_writes_is_ignored_by_git() {
    let o = Command::new("git")
        .args(["check-ignore", "-q", "profiles/local.toml"])
        .current_dir(repo())
        .output();
    match o {
        Ok(o) if o.status.code() == Some(128) => {
            println!(
                "SKIP: the_calibrated_profile_readme_writes_is_ignored_by_git: not a git work tree"
            );
        }
        Ok(o) => assert!(
            o.status.success(),
            "profiles/local.toml (ptlab calibrate's default -o) is not ignored by git"
        ),
        Err(e) => {
            println!("SKIP: the_calibrated_profile_readme_writes_is_ignored_by_git: no git ({e})")
        }
    }
}

#[test]
fn the_language_document_is_not_stale() {
    let lang = read("docs/language.md");
    for stale in [
        "will run on a live kernel",
        "not implemented yet",
        "Later, the same",
    ] {
        assert!(
            !lang.contains(stale),
            "docs/language.md still says '{stale}'"
        );
    }
    assert!(lang.contains("--backend\nlive") || lang.contains("--backend live"));
    // Every statement keyword the document lists parses (no "not yet").
    for kw in [
        "mremap", "mprotect", "fork", "uffd", "swap", "mlock", "mseal",
    ] {
        assert!(
            lang.contains(&format!("`{kw}")),
            "docs/language.md lacks {kw}"
        );
    }
}

/// The pictured examples under docs/examples (1 GiB seeds, too big for the
/// invariant-checked run of crates/ptlab/tests/scenarios.rs) pass `ptlab
/// run` on the architecture their name says (x86_64 otherwise).
#[test]
fn docs_examples_pass_ptlab_run() {
    let dir = repo().join("docs/examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "ptl") {
            continue;
        }
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let arch = if name.contains("arm64") {
            "arm64"
        } else {
            "x86_64"
        };
        let o = Command::new(env!("CARGO_BIN_EXE_ptlab"))
            .args(["run", "--arch", arch, "-q"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        n += 1;
    }
    assert!(n >= 6, "found {n} examples");
}

/// docs/bench.md's live-vs-model tables are what ptlab generates from the
/// recorded run, not typed by hand.
#[test]
fn bench_md_tables_are_generated_from_the_recorded_run() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("docs-recorded-run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // --from takes the local profile beside the result file: copy both.
    for f in ["live.json", "local-profile.toml"] {
        std::fs::copy(repo().join("docs/reproduce-run").join(f), dir.join(f)).unwrap();
    }
    let o = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args(["reproduce", "-q", "--from"])
        .arg(dir.join("live.json"))
        .arg("-o")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let bench = read("docs/bench.md");
    let tables: Vec<&str> = md.split("\n\n").filter(|b| b.starts_with("| ")).collect();
    assert!(tables.len() >= 3, "{md}");
    for t in &tables[..2] {
        assert!(
            bench.contains(t),
            "docs/bench.md lacks the generated table below; regenerate with \
             `target/release/ptlab reproduce --from docs/reproduce-run/live.json -o docs/reproduce-run` \
             and copy report.md's tables:\n{t}"
        );
    }
    assert_eq!(
        md,
        read("docs/reproduce-run/report.md"),
        "docs/reproduce-run/report.md is stale"
    );
}
