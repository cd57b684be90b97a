//! docs/model.md lists every source file of the model (one table row per
//! file, named by its path under `crates/ptlab-model/src/` in backticks),
//! and names no file that does not exist.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).expect("read src dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, base, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(base).expect("under src");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn model_md_lists_every_source_file() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = crate_dir.join("src");
    let doc =
        std::fs::read_to_string(crate_dir.join("../../docs/model.md")).expect("docs/model.md");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    files.sort();
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
