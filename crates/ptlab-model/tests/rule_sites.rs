//! The rule registry (`core/rules.rs`) and its sites: every rule is
//! counted at exactly one `rule!(sink, Id)` site, every site names a rule
//! of the registry, and each site sits next to the `Linux:` citation of the
//! kernel function its registry row names (that function is named in a
//! comment of the file's header or of the 150 lines above the site). Then
//! that a hit is counted where the rule is taken, and only there.

mod common;

use ptlab_model::core::rules::Rule;
use ptlab_model::{
    Advice, ArchKind, Before, MapFlags, Model, ModelConfig, MremapFlags, Prot, PMD_SIZE,
};
use std::collections::BTreeMap;

/// (ident, kernel citation) of every registry row, read from the source.
fn registry(src: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let body = src
        .split_once("rules! {\n    ")
        .map(|(_, b)| b)
        .expect("the rules! table");
    for line in body.lines() {
        let l = line.trim();
        if l == "}" {
            break;
        }
        let (ident, rest) = l.split_once(" = (").expect("`Ident = (...)` row");
        let kernel = rest.split('"').nth(3).expect("the kernel citation");
        out.push((ident.to_string(), kernel.to_string()));
    }
    out
}

/// (file, line, ident) of every `rule!(sink, Ident)` outside rules.rs.
fn sites() -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for (file, src) in common::model_sources() {
        if file == "core/rules.rs" {
            continue;
        }
        for (n, line) in src.lines().enumerate() {
            let mut rest = line;
            while let Some(i) = rest.find("rule!(") {
                rest = &rest[i + 6..];
                let close = rest.find(')').expect("rule!( ... )");
                // rule!(sink, Ident) or rule!(sink, Ident, n)
                let ident = rest[..close]
                    .split(',')
                    .nth(1)
                    .expect("rule!(sink, Ident")
                    .trim();
                out.push((file.clone(), n + 1, ident.to_string()));
                rest = &rest[close..];
            }
        }
    }
    out
}

fn kernel_fn(citation: &str) -> &str {
    let last = citation.rsplit(' ').next().unwrap();
    last.strip_suffix("()").unwrap_or(last)
}

#[test]
fn every_rule_has_exactly_one_site_next_to_its_citation() {
    let srcs: BTreeMap<String, String> = common::model_sources().into_iter().collect();
    let reg = registry(&srcs["core/rules.rs"]);
    assert_eq!(reg.len(), Rule::COUNT, "the parser read every row");
    let sites = sites();
    let mut bad = Vec::new();
    for (ident, _) in &reg {
        let n = sites.iter().filter(|s| &s.2 == ident).count();
        if n != 1 {
            bad.push(format!("{ident}: {n} sites (want exactly 1)"));
        }
    }
    for (file, line, ident) in &sites {
        let Some((_, kernel)) = reg.iter().find(|(i, _)| i == ident) else {
            bad.push(format!(
                "{file}:{line}: rule!({ident}) is not in the registry"
            ));
            continue;
        };
        let f = kernel_fn(kernel);
        let lines: Vec<&str> = srcs[file].lines().collect();
        let header = lines.iter().take_while(|l| l.starts_with("//!"));
        let near = lines[line.saturating_sub(150)..*line]
            .iter()
            .filter(|l| l.trim_start().starts_with("//"));
        if !header.chain(near).any(|l| l.contains(f)) {
            bad.push(format!(
                "{file}:{line}: rule {ident} cites {kernel}, but no comment near the site names {f}"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "rule registry and sites disagree:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_checker_sees_a_missing_citation() {
    assert_eq!(kernel_fn("mm/mremap.c move_ptes()"), "move_ptes");
    assert_eq!(
        kernel_fn("mm/mlock.c SYSCALL_DEFINE3(mlock2)"),
        "SYSCALL_DEFINE3(mlock2)"
    );
    let reg = registry("rules! {\n    A = (\"x.a\", X, \"mm/x.c f()\"),\n    B = (\"x.b\", X, \"g()\", seed),\n}\n");
    assert_eq!(
        reg,
        vec![
            ("A".to_string(), "mm/x.c f()".to_string()),
            ("B".to_string(), "g()".to_string())
        ]
    );
}

const A: u64 = 0x7f00_4000_0000; // 1 GiB aligned

fn written(arch: ArchKind, before: Before, len: u64, huge: bool) -> Model {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    let mut m = Model::new(cfg);
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, A, len, Prot::READ | Prot::WRITE, f).unwrap();
    let adv = if huge {
        Advice::HugePage
    } else {
        Advice::NoHugePage
    };
    m.madvise(1, A, len, adv).unwrap();
    m.access_range(1, A, len, true, None).unwrap();
    m
}

#[test]
fn a_hit_is_counted_where_the_rule_is_taken() {
    for arch in ArchKind::ALL {
        // A whole PTE table moves as a table; with the switch off, per PTE.
        let fixed = MremapFlags::MAYMOVE | MremapFlags::FIXED;
        let mut m = written(arch, Before::empty(), PMD_SIZE, false);
        let before = m.coverage();
        m.mremap(1, A, PMD_SIZE, PMD_SIZE, fixed, A + 4 * PMD_SIZE)
            .unwrap();
        let c = m.coverage();
        assert_eq!(
            c.get(Rule::MremapMovePmd) - before.get(Rule::MremapMovePmd),
            1
        );
        assert_eq!(c.get(Rule::MremapMovePtesPerPte), 0);
        assert_eq!(c.get(Rule::MremapMovePtesBatch), 0);
        let mut m = written(arch, Before::MREMAP_TABLE_MOVE, PMD_SIZE, false);
        m.mremap(1, A, PMD_SIZE, PMD_SIZE, fixed, A + 4 * PMD_SIZE)
            .unwrap();
        let c = m.coverage();
        assert_eq!(c.get(Rule::MremapMovePmd), 0);
        assert_eq!(
            c.get(Rule::MremapMovePtesPerPte),
            0,
            "small folios batch as 1"
        );
        // A PMD THP moves whole; errno checks count once per failing call.
        let mut m = written(arch, Before::empty(), PMD_SIZE, true);
        m.mremap(1, A, PMD_SIZE, PMD_SIZE, fixed, A + 4 * PMD_SIZE)
            .unwrap();
        assert_eq!(m.coverage().get(Rule::MremapMoveHugePmd), 1);
        assert!(m.mremap(1, A + 1, 4096, 4096, fixed, A).is_err());
        assert!(m.mremap(1, A + 1, 4096, 4096, fixed, A).is_err());
        let c = m.coverage();
        assert_eq!(c.get(Rule::MremapAddrUnaligned), 2);
        assert_eq!(c.get(Rule::MremapFlagsInvalid), 0);
        // Exited processes' hits stay counted.
        let child = m.fork(1).unwrap();
        m.write(child, A + 4 * PMD_SIZE, 1).unwrap();
        let with_child = m.coverage();
        m.exit(child).unwrap();
        let after = m.coverage();
        assert!(Rule::ALL.iter().all(|&r| after.get(r) >= with_child.get(r)));
        assert_ne!(after, with_child, "exit takes rules of its own");
        assert!(with_child.get(Rule::ForkCopyHugePmd) == 1);
    }
}
