//! docs/model.md lists every source file of the model (one table row per
//! file, named by its path under `crates/ptlab-model/src/` in backticks),
//! and names no file that does not exist.

mod common;

use std::path::PathBuf;

#[test]
fn model_md_lists_every_source_file() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let doc =
        std::fs::read_to_string(crate_dir.join("../../docs/model.md")).expect("docs/model.md");
    let files: Vec<String> = common::model_sources()
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    let rows: Vec<String> = doc
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('`').nth(1).map(str::to_string))
        .filter(|c| c.ends_with(".rs"))
        .collect();
    let missing: Vec<&String> = files.iter().filter(|f| !rows.contains(f)).collect();
    assert!(
        missing.is_empty(),
        "docs/model.md has no table row for: {missing:?} (add `| \\`path.rs\\` | what it holds | kernel counterpart |`)"
    );
    let stale: Vec<&String> = rows.iter().filter(|r| !files.contains(r)).collect();
    assert!(
        stale.is_empty(),
        "docs/model.md lists files that do not exist: {stale:?}"
    );
}
