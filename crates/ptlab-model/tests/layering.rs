//! The model's modules import only downward (docs/model.md, "Layout"):
//!
//! 0. `types.rs`, `types/` — identifiers, errno, uapi arguments;
//! 1. `core/` — addresses, the arch policy, page tables, the mmu_gather,
//!    frames and folios, VMAs, counters, knobs;
//! 2. `mm/` — one address space and the mechanics the syscalls share
//!    (fault, zap, move_pt, swap PTEs, markers, folio split);
//! 3. `model.rs` (the machine) and `sys/` (one file per syscall family,
//!    each adding its entry points to `Model`);
//! 4. everything else at the crate root (`lib.rs`, `invariants.rs`, …).
//!
//! A reference `crate::a::b…` (or `super::…`, `self::…`) outside test code
//! names the module it resolves to; this test fails when a module names one
//! in a higher layer, or when the references among modules form a circle
//! (siblings of one layer may name each other only acyclically). Paths
//! through the crate root's re-exports (`crate::Model`) count as naming the
//! root, so model code must use the real paths. `pub mod x;` declarations
//! and bare child paths are the module tree itself, not imports.

mod common;

use std::collections::{BTreeMap, BTreeSet};

/// `core/arch/mod.rs` → `core::arch`; `types.rs` → `types`; `lib.rs` → ``.
fn module_of(file: &str) -> String {
    let f = file.strip_suffix(".rs").expect(".rs");
    let f = f.strip_suffix("/mod").unwrap_or(f);
    if f == "lib" {
        return String::new();
    }
    f.replace('/', "::")
}

/// The layer of a module, by its first path segment.
fn layer(module: &str) -> u8 {
    match module.split("::").next().unwrap_or("") {
        "types" => 0,
        "core" => 1,
        "mm" => 2,
        "model" | "sys" => 3,
        _ => 4,
    }
}

fn layer_name(l: u8) -> &'static str {
    ["types", "core", "mm", "model/sys", "root"][l as usize]
}

/// The source without comments and without `#[cfg(test)]` items (test code
/// may use anything).
fn strip(src: &str) -> String {
    let mut s: String = src
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    while let Some(i) = s.find("#[cfg(test)]") {
        let rest = &s[i..];
        let semi = rest.find(';');
        let brace = rest.find('{');
        let end = match (semi, brace) {
            (Some(a), Some(b)) if a < b => i + a + 1,
            (_, Some(b)) => {
                let mut depth = 0usize;
                let mut end = s.len();
                for (k, c) in s[i + b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = i + b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (Some(a), None) => i + a + 1,
            (None, None) => s.len(),
        };
        s.replace_range(i..end, "");
    }
    s
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths (as segment lists, from the crate root) that `src`, the source
/// of `module` (a `mod.rs` module if `is_mod_rs`), names.
fn references(module: &str, is_mod_rs: bool, src: &str) -> Vec<Vec<String>> {
    let here: Vec<String> = if module.is_empty() {
        vec![]
    } else {
        module.split("::").map(str::to_string).collect()
    };
    // `self` is the module itself; `super` its parent (for `x.rs` and
    // `x/mod.rs` alike, the parent of `x`).
    let _ = is_mod_rs;
    let mut out = Vec::new();
    let b = src.as_bytes();
    let mut i = 0;
    while i < src.len() {
        let starts = ["crate::", "super::", "self::"];
        let Some(kw) = starts.iter().find(|k| src[i..].starts_with(**k)) else {
            i += src[i..].chars().next().map_or(1, char::len_utf8);
            continue;
        };
        if i > 0 && ident_char(b[i - 1] as char) {
            i += kw.len();
            continue;
        }
        let mut base: Vec<String> = match *kw {
            "crate::" => vec![],
            "self::" => here.clone(),
            _ => here[..here.len().saturating_sub(1)].to_vec(),
        };
        let mut j = i + kw.len();
        // `super::super::`
        while src[j..].starts_with("super::") {
            base.pop();
            j += "super::".len();
        }
        let parse_path = |mut j: usize, mut segs: Vec<String>| -> (Vec<String>, usize) {
            loop {
                let start = j;
                while j < src.len() && ident_char(b[j] as char) {
                    j += 1;
                }
                if j == start {
                    break;
                }
                segs.push(src[start..j].to_string());
                if src[j..].starts_with("::") && src[j + 2..].starts_with(|c: char| ident_char(c)) {
                    j += 2;
                } else {
                    break;
                }
            }
            (segs, j)
        };
        if src[j..].starts_with('{') {
            // `crate::{a::b, c}`: each item's path.
            let close = src[j..].find('}').map_or(src.len(), |k| j + k);
            for item in src[j + 1..close].split(',') {
                let item = item.trim();
                if item.is_empty() {
                    continue;
                }
                let off = src[j..].find(item).map_or(j, |k| j + k);
                let (segs, _) = parse_path(off, base.clone());
                out.push(segs);
            }
            i = close;
        } else {
            let (segs, end) = parse_path(j, base);
            out.push(segs);
            i = end.max(i + kw.len());
        }
    }
    out
}

/// The module a path names: its longest prefix that is a module.
fn resolve(path: &[String], modules: &BTreeSet<String>) -> String {
    for n in (1..=path.len()).rev() {
        let m = path[..n].join("::");
        if modules.contains(&m) {
            return m;
        }
    }
    String::new()
}

struct Analysis {
    edges: BTreeMap<String, BTreeSet<String>>,
    upward: Vec<String>,
    circles: Vec<Vec<String>>,
}

fn analyse(files: &[(String, String)]) -> Analysis {
    let modules: BTreeSet<String> = files.iter().map(|(f, _)| module_of(f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut upward = Vec::new();
    for (file, src) in files {
        let m = module_of(file);
        let code = strip(src);
        let e = edges.entry(m.clone()).or_default();
        for path in references(&m, file.ends_with("mod.rs"), &code) {
            let t = resolve(&path, &modules);
            // A module naming itself or one of its ancestors (a `super::`
            // of an arch file reaching its parent) is the tree, not an import.
            if t == m || (m.starts_with(&format!("{t}::")) && !t.is_empty()) {
                continue;
            }
            if layer(&t) > layer(&m) {
                upward.push(format!(
                    "{file} ({}) names crate::{} ({}) via `{}`",
                    layer_name(layer(&m)),
                    if t.is_empty() { "<root re-export>" } else { &t },
                    layer_name(layer(&t)),
                    path.join("::")
                ));
            }
            e.insert(t);
        }
    }
    for m in &modules {
        edges.entry(m.clone()).or_default();
    }
    let circles = strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    upward.sort();
    upward.dedup();
    Analysis {
        edges,
        upward,
        circles,
    }
}

/// Tarjan's strongly connected components.
fn strongly_connected(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct St<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(st: &mut St<'a>, v: &'a str) {
        st.index.insert(v, st.next);
        st.low.insert(v, st.next);
        st.next += 1;
        st.stack.push(v);
        st.on.insert(v);
        let g = st.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let lw = st.low[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if st.on.contains(w) {
                let iw = st.index[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if st.low[v] == st.index[v] {
            let mut c = Vec::new();
            while let Some(w) = st.stack.pop() {
                st.on.remove(w);
                c.push(w.to_string());
                if w == v {
                    break;
                }
            }
            c.sort();
            st.out.push(c);
        }
    }
    let mut st = St {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v.as_str());
        }
    }
    st.out
}

#[test]
fn model_imports_only_downward_and_has_no_circle() {
    // LAYERING_SRC=<dir> runs the count on another tree (e.g. an older
    // checkout of this crate's src/).
    let a = analyse(&common::model_sources());
    let n_edges: usize = a.edges.values().map(BTreeSet::len).sum();
    println!(
        "{} modules, {} import edges, {} import circles",
        a.edges.len(),
        n_edges,
        a.circles.len()
    );
    for c in &a.circles {
        println!("circle of {}: {}", c.len(), c.join(" "));
    }
    assert!(
        a.upward.is_empty(),
        "imports to a higher layer:\n{}",
        a.upward.join("\n")
    );
    assert!(
        a.circles.is_empty(),
        "import circles (each a set of modules that reach each other): {:?}",
        a.circles
    );
}

#[test]
fn every_source_file_has_a_layer_directory_or_is_a_known_root_file() {
    for (f, _) in &common::model_sources() {
        let top = f.split('/').next().unwrap();
        let in_layer_dir = f.contains('/') && ["types", "core", "mm", "sys"].contains(&top);
        let root_file = !f.contains('/');
        assert!(in_layer_dir || root_file, "{f} is in no layer directory");
    }
}

#[test]
fn the_checker_finds_an_upward_import_and_a_circle() {
    let files: Vec<(String, String)> = [
        ("lib.rs", "pub mod core; pub mod mm;"),
        ("core/mod.rs", "pub mod a; pub mod b;"),
        (
            "core/a.rs",
            "use crate::core::b::X; // crate::mm::z in a comment\n",
        ),
        ("core/b.rs", "use crate::{core::a::Y, mm::z::Z};"),
        ("mm/mod.rs", "pub mod z;"),
        (
            "mm/z.rs",
            "use super::super::core::a::Y;\n#[cfg(test)]\nmod tests { use crate::Model; }\n",
        ),
    ]
    .iter()
    .map(|(f, s)| (f.to_string(), s.to_string()))
    .collect();
    let a = analyse(&files);
    assert_eq!(a.upward.len(), 1, "{:?}", a.upward);
    assert!(a.upward[0].starts_with("core/b.rs"), "{:?}", a.upward);
    // core::a → core::b → mm::z → core::a
    let circle: Vec<String> = ["core::a", "core::b", "mm::z"].map(String::from).to_vec();
    assert_eq!(a.circles, vec![circle]);
    assert!(a.edges["mm::z"].contains("core::a"));
    assert!(!a.edges["mm::z"].contains(""), "test code is skipped");
}

/// No algorithm reads the event counters (issue 13 item 3): outside test
/// code, a sink's counts are read only by the counter itself
/// (`core/hw.rs`), the report (`Model::hw_events` in `model.rs`) and the
/// retirement of an exiting process's counts into the machine's sink
/// (`exit_mmap` in `sys/fork.rs`).
#[test]
fn no_algorithm_reads_the_event_counters() {
    const READERS: &[&str] = &["core/hw.rs", "model.rs", "sys/fork.rs"];
    let mut bad = Vec::new();
    for (file, src) in common::model_sources() {
        let code = strip(&src);
        for needle in [".snapshot()", ".hw_events()"] {
            let n = code.matches(needle).count();
            if n > 0 && !READERS.contains(&file.as_str()) {
                bad.push(format!("{file}: {needle} ×{n}"));
            }
        }
        if file == "sys/fork.rs" {
            assert_eq!(
                code.matches(".snapshot()").count(),
                1,
                "sys/fork.rs reads the counters only to retire them (absorb)"
            );
            assert!(code.contains("phys.hw.absorb(&mm.pt.hw.snapshot())"));
        }
    }
    assert!(bad.is_empty(), "event counters read by model code: {bad:?}");
}
