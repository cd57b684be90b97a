//! Property tests: no input makes the parser (or the interpreter) panic.

mod common;

use common::FakeBackend;
use proptest::prelude::*;
use ptlab_scenario::{parse, run, RunOptions};

/// Every word and symbol of the language, plus a few near-misses.
const VOCAB: &[&str] = &[
    // statements and keywords
    "let",
    "mmap",
    "munmap",
    "madvise",
    "mremap",
    "mprotect",
    "fork",
    "exit",
    "uffd",
    "read",
    "write",
    "thp",
    "repeat",
    "end",
    "expect",
    "observe",
    "pfn",
    "as",
    "at",
    "fixed",
    "noreplace",
    "prot",
    "noreserve",
    "populate",
    "maymove",
    "dontunmap",
    "open",
    "register",
    "unregister",
    "copy",
    "zeropage",
    "move",
    "missing",
    "wp",
    "allow_src_holes",
    "dontwake",
    "enabled",
    "use_zero_page",
    "always",
    "inherit",
    "madvise",
    "never",
    "dontneed",
    "hugepage",
    "nohugepage",
    "wipeonfork",
    "collapse",
    "r",
    "rw",
    "rwx",
    "none",
    // expectations
    "ok",
    "errno",
    "EINVAL",
    "ENOMEM",
    "EEXIST",
    "ret",
    "segv",
    "maps",
    "empty",
    "page",
    "stat",
    "vmflags",
    "has",
    "lacks",
    "hg",
    "nh",
    "anonhuge",
    "invariants",
    "zero",
    "hugezero",
    "anon",
    "order",
    "folio",
    "idx",
    "pmd",
    "pte",
    "X",
    "AX",
    "cnt",
    "tag",
    "samefolio",
    "smaps",
    "pages",
    "stats",
    "64kB/anon_fault_alloc",
    "vmstat/thp_split_pmd",
    "rw-p",
    "---p",
    "r-xp",
    // names and numbers
    "p",
    "q",
    "i",
    "f",
    "main",
    "child",
    "PAGE",
    "PMD",
    "PUD",
    "align_up",
    "align_down",
    "0",
    "1",
    "4K",
    "64K",
    "2M",
    "0x1000",
    "0b101",
    "1_000",
    "99999999999999999999",
    "64kB",
    "0x",
    // punctuation
    "=",
    "==",
    "!=",
    "!",
    "@",
    "..",
    "+",
    "-",
    "*",
    "/",
    "%",
    "<<",
    ">>",
    "&",
    "|",
    "(",
    ")",
    ",",
    "#",
    ";",
    ".",
    "é",
    "\t",
];

/// Words suitable for actually running: no `*`, `<<` or unary-minus-heavy
/// arithmetic that could ask for astronomically large ranges.
const RUN_VOCAB: &[&str] = &[
    "let",
    "mmap",
    "munmap",
    "madvise",
    "read",
    "write",
    "thp",
    "repeat",
    "end",
    "expect",
    "observe",
    "pfn",
    "as",
    "at",
    "fixed",
    "noreplace",
    "prot",
    "populate",
    "fork",
    "exit",
    "enabled",
    "always",
    "never",
    "dontneed",
    "hugepage",
    "r",
    "rw",
    "none",
    "ok",
    "errno",
    "EINVAL",
    "ret",
    "segv",
    "maps",
    "empty",
    "page",
    "stat",
    "vmflags",
    "has",
    "hg",
    "rd",
    "anonhuge",
    "invariants",
    "anon",
    "order",
    "idx",
    "pte",
    "X",
    "!",
    "cnt",
    "tag",
    "samefolio",
    "pages",
    "vmstat/fake_writes",
    "rw-p",
    "p",
    "q",
    "i",
    "f",
    "main",
    "child",
    "PAGE",
    "0",
    "1",
    "2",
    "4K",
    "64K",
    "0x1000",
    "=",
    "==",
    "!=",
    "@",
    "..",
    "+",
    "(",
    ")",
];

fn soup(vocab: &'static [&'static str], max_lines: usize) -> impl Strategy<Value = String> {
    let line = prop::collection::vec(prop::sample::select(vocab), 0..10).prop_map(|w| w.join(" "));
    prop::collection::vec(line, 0..max_lines).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings_never_panic(src in any::<String>()) {
        let _ = parse("fuzz.ptl", &src);
    }

    #[test]
    fn arbitrary_line_soup_never_panics(src in "([ -~]{0,30}\n){0,8}") {
        let _ = parse("fuzz.ptl", &src);
    }

    #[test]
    fn token_soup_never_panics(src in soup(VOCAB, 12)) {
        if let Err(e) = parse("fuzz.ptl", &src) {
            // Errors always carry a real position.
            prop_assert!(e.line >= 1 && e.column >= 1, "bad position in {e}");
            prop_assert!(e.to_string().starts_with("fuzz.ptl:"));
        }
    }
}

/// Well-formed-ish statements with random arguments, so that most generated
/// scenarios parse and the interpreter gets exercised.
fn statement_soup() -> impl Strategy<Value = String> {
    const ADDRS: &[&str] = &[
        "p",
        "p + 4K",
        "q",
        "0",
        "0x1000",
        "p + i * 4K",
        "q + 100",
        "align_up(q, 64K)",
    ];
    const LENS: &[&str] = &["4K", "64K", "0", "2M", "PAGE", "1", "i * 4K"];
    const ATTRS: &[&str] = &[
        "none",
        "anon",
        "zero",
        "order=0",
        "idx=0",
        "pte",
        "pmd",
        "X",
        "!AX",
        "cnt=1",
        "tag=p",
        "samefolio",
        "folio=4K",
    ];
    let a = || prop::sample::select(ADDRS);
    let n = || prop::sample::select(LENS);
    let line = prop_oneof![
        4 => (n(), prop::sample::select(&["", " at 0x10000 fixed", " at p noreplace", " prot r", " prot none populate"][..]))
            .prop_map(|(n, o)| format!("q = mmap {n}{o}")),
        4 => (a(), n()).prop_map(|(a, n)| format!("munmap {a} {n}")),
        4 => (a(), n()).prop_map(|(a, n)| format!("madvise {a} {n} dontneed")),
        4 => (a(), n()).prop_map(|(a, n)| format!("write {a} {n} tag=i")),
        4 => (a(), n()).prop_map(|(a, n)| format!("read {a} {n}")),
        1 => Just("expect segv".to_string()),
        1 => Just("expect ok".to_string()),
        1 => Just("expect errno EINVAL".to_string()),
        1 => Just("expect ret == q".to_string()),
        4 => (a(), prop::collection::vec(prop::sample::select(ATTRS), 1..4))
            .prop_map(|(a, at)| format!("expect page {a} {}", at.join(" "))),
        4 => a().prop_map(|a| format!("f = pfn {a}")),
        4 => a().prop_map(|a| format!("expect pfn {a} == f")),
        4 => Just("expect maps\n  p .. p + 64K rw-p\nend".to_string()),
        4 => Just("expect maps empty".to_string()),
        4 => Just("expect stat vmstat/fake_writes == 1".to_string()),
        4 => a().prop_map(|a| format!("expect vmflags {a} has rd")),
        4 => a().prop_map(|a| format!("expect anonhuge {a} == 0")),
        4 => Just("expect invariants".to_string()),
        4 => Just("observe".to_string()),
        4 => Just("fork child".to_string()),
        2 => Just("@child".to_string()),
        4 => Just("@main".to_string()),
        1 => Just("@child exit".to_string()),
        4 => Just("thp 64K always".to_string()),
        4 => Just("thp enabled inherit".to_string()),
        1 => (0u8..4).prop_map(|k| format!("repeat {k} as i")),
        1 => Just("end".to_string()),
        1 => Just("mremap p 4K 8K maymove".to_string()),
    ];
    prop::collection::vec(line, 0..16).prop_map(|lines| {
        format!(
            "p = mmap 64K\nwrite p\nf = pfn p\nlet i = 1\nq = mmap 8K\n{}",
            lines.join("\n")
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn running_statement_soup_never_panics(src in statement_soup()) {
        if let Ok(script) = parse("fuzz.ptl", &src) {
            let mut backend = FakeBackend::default();
            backend.call_budget = Some(20_000);
            let opts = RunOptions { max_failures: 20, max_steps: Some(2_000), ..RunOptions::default() };
            let report = run(&script, &mut backend, &opts);
            for f in &report.failures {
                prop_assert!(f.line >= 1);
                let _ = f.to_string();
            }
        }
    }

    #[test]
    fn running_token_soup_never_panics(src in soup(RUN_VOCAB, 12)) {
        if let Ok(script) = parse("fuzz.ptl", &src) {
            let mut backend = FakeBackend::default();
            backend.call_budget = Some(20_000);
            let opts = RunOptions { max_failures: 20, max_steps: Some(2_000), ..RunOptions::default() };
            let report = run(&script, &mut backend, &opts);
            for f in &report.failures {
                prop_assert!(f.line >= 1);
                let _ = f.to_string();
            }
            for o in &report.outputs {
                let _ = o.render_text();
            }
        }
    }
}
