//! Shared by the property tests and the layout tests.
// Each test crate uses only some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The model's source files: (path under `src/` with `/` separators,
/// contents), sorted by path. `LAYERING_SRC=<dir>` reads another tree.
pub fn model_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).expect("read src dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(base).expect("under src");
                let rel = rel.to_string_lossy().replace('\\', "/");
                out.push((rel, std::fs::read_to_string(&p).expect("read source")));
            }
        }
    }
    let src = std::env::var_os("LAYERING_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut out = Vec::new();
    walk(&src, &src, &mut out);
    out.sort();
    out
}

/// Cases per property: `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub mod switch_prop;

/// A model of `cfg` whose anonymous THP sizes are only `orders` ("always";
/// order 0, plain pages, sets nothing), PMD-sized THPs off: the layouts
/// the run-storage property tests build their folios with.
pub fn mthp_model(cfg: ptlab_model::ModelConfig, orders: &[u8]) -> ptlab_model::Model {
    use ptlab_model::{ThpKnob, ThpMode};
    let mut m = ptlab_model::Model::new(cfg);
    m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
    for &o in orders.iter().filter(|&&o| o > 0) {
        m.set_thp(ThpKnob::Size(o), ThpMode::Always).unwrap();
    }
    m
}

/// Page-aligned offsets in `[0, arena)`: any page or any 64 KiB boundary,
/// each kind as likely.
pub fn offset_4k_64k(arena: u64) -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![
        (0..arena / 4096).prop_map(|p| p * 4096),
        (0..arena / 0x10000).prop_map(|p| p * 0x10000)
    ]
}

/// Page-aligned offsets in `[0, arena)`: any page, any 64 KiB boundary or
/// any 2 MiB boundary, each kind as likely.
pub fn offset_4k_64k_2m(arena: u64) -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![
        (0..arena / 4096).prop_map(|p| p * 4096),
        (0..arena / 0x10000).prop_map(|p| p * 0x10000),
        (0..arena / 0x200000).prop_map(|p| p * 0x200000),
    ]
}

/// Fork process 1, after letting the child kept by the last call exit (if
/// any); keep the new child (`keep`: pages stay shared with it) or let it
/// exit at once (pages no longer shared after it).
pub fn fork_exit(m: &mut ptlab_model::Model, child: &mut Option<ptlab_model::Pid>, keep: bool) {
    if let Some(c) = child.take() {
        m.exit(c).unwrap();
    }
    let c = m.fork(1).unwrap();
    if keep {
        *child = Some(c);
    } else {
        m.exit(c).unwrap();
    }
}
