//! Every subcommand follows one convention, checked on its `--help`:
//!
//! * an `Examples` section;
//! * an output path is `-o, --out` with the value named FILE or DIR;
//! * `-q, --quiet` on every subcommand that runs long enough to report
//!   progress;
//! * `--format` (text or json) on every subcommand that prints a result;
//! * `--arch` lists its values, x86_64 and arm64, wherever it exists;
//! * no help points outside the repository (`shared/`), and every file a
//!   help text names as an example input exists.

use std::path::Path;
use std::process::Command;

fn help(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args(args)
        .arg("--help")
        .env("COLUMNS", "200")
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?} --help failed");
    String::from_utf8(o.stdout).unwrap()
}

/// The subcommands `ptlab --help` lists.
fn subcommands() -> Vec<String> {
    let top = help(&[]);
    let list = top
        .split("Commands:")
        .nth(1)
        .expect("a Commands section")
        .split("\n\n")
        .next()
        .unwrap();
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

const LONG_RUNNING: &[&str] = &[
    "run",
    "diff",
    "fuzz",
    "show",
    "bench",
    "reproduce",
    "speed",
    "cost",
    "calibrate",
    "coverage",
];
const PRINTS_A_RESULT: &[&str] = &[
    "run",
    "diff",
    "bench",
    "compare",
    "reproduce",
    "speed",
    "cost",
    "calibrate",
    "coverage",
];

#[test]
fn every_subcommand_follows_the_option_convention() {
    let subs = subcommands();
    assert!(subs.len() >= 10, "{subs:?}");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut bad = Vec::new();
    for s in &subs {
        let h = help(&[s]);
        if !h.contains("Examples") {
            bad.push(format!("{s}: no Examples section"));
        }
        if h.contains("--out") && !(h.contains("-o, --out <FILE>") || h.contains("-o, --out <DIR>"))
        {
            bad.push(format!("{s}: --out is not `-o, --out <FILE|DIR>`"));
        }
        if LONG_RUNNING.contains(&s.as_str()) && !h.contains("-q, --quiet") {
            bad.push(format!("{s}: no -q, --quiet"));
        }
        if PRINTS_A_RESULT.contains(&s.as_str())
            && !(h.contains("--format <FORMAT>") && h.contains("json"))
        {
            bad.push(format!("{s}: no --format text|json"));
        }
        if h.contains("--arch") && !h.contains("[possible values: x86_64, arm64]") {
            bad.push(format!("{s}: --arch does not list x86_64 and arm64"));
        }
        if h.contains("shared/") {
            bad.push(format!("{s}: points to shared/, outside the repository"));
        }
        // Example inputs named in the help exist in a clone.
        for w in h.split_whitespace() {
            let w = w.trim_matches(|c: char| c == '`' || c == ',' || c == '(' || c == ')');
            let input = w.ends_with(".ptl")
                || (w.ends_with(".json") && w.starts_with("docs/"))
                || (w.ends_with(".toml") && w.starts_with("profiles/") && !w.contains("local"));
            if input && w.contains('/') && !w.contains("FILE") && !repo.join(w).exists() {
                bad.push(format!("{s}: example file {w} does not exist"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn restore_help_names_the_journal_and_cost_shares_the_arch_spellings() {
    let h = help(&["restore"]);
    assert!(h.contains("thp-journal.json"), "{h}");
    // cost accepts exactly what run accepts.
    for (arch, ok) in [
        ("arm64", true),
        ("aarch64", true),
        ("x86-64", true),
        ("sparc", false),
    ] {
        for cmd in ["run", "cost"] {
            let o = Command::new(env!("CARGO_BIN_EXE_ptlab"))
                .args([cmd, "--arch", arch, "scenarios/examples/basic.ptl"])
                .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
                .output()
                .unwrap();
            assert_eq!(o.status.success(), ok, "{cmd} --arch {arch}");
        }
    }
}
