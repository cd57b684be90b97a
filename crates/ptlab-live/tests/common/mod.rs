//! What the live integration tests share: the workspace's scenario files.
// Each test crate uses only some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.ptl` file under tests/scenarios/ and scenarios/examples/, sorted.
pub fn scenario_files() -> Vec<PathBuf> {
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
