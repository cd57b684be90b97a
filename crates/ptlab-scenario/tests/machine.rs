//! `machine memory SIZE` on the model: the machine grows and shrinks, the
//! checks come in the documented order, and a scenario may populate more
//! than the default 24 GiB once it asked for the memory. `machine nodes N`,
//! `numa node N` and `numa scan ADDR LEN`: checked, applied, printed back.

use ptlab_model::{ArchKind, ModelConfig};
use ptlab_scenario::{run_source, ModelBackend, RunOptions};

fn run(src: &str) -> Vec<String> {
    let mut b = ModelBackend::new(ModelConfig::for_arch(ArchKind::X86_64));
    let r = run_source("t.ptl", src, &mut b, &RunOptions::default()).expect("parses");
    r.failures.iter().map(ToString::to_string).collect()
}

#[test]
fn memory_is_checked_and_applied() {
    let src = "\
machine memory 32M
expect errno EINVAL
machine memory 128T
expect errno EINVAL
machine memory 64T
expect ok
thp 2M always
p = mmap 32G at 0x100_0000_0000 fixed
write p 32G
expect ok
expect anonhuge p == 32G
machine memory 1G
expect errno EBUSY
machine memory 64G
expect ok
";
    assert_eq!(run(src), Vec::<String>::new());
}

#[test]
fn the_default_machine_runs_out() {
    let failures = run("\
thp 2M always
p = mmap 32G at 0x100_0000_0000 fixed
write p 32G
");
    assert!(
        failures.iter().any(|f| f.contains("out of model memory")),
        "{failures:?}"
    );
}

#[test]
fn machine_needs_memory_and_a_size() {
    let err = ptlab_scenario::parse("t.ptl", "machine cpus 4").unwrap_err();
    assert!(
        err.to_string()
            .contains("expected 'memory SIZE' or 'nodes N' after 'machine', found 'cpus'"),
        "{err}"
    );
    let err = ptlab_scenario::parse("t.ptl", "machine memory").unwrap_err();
    assert!(err.to_string().contains("machine memory"), "{err}");
}

#[test]
fn nodes_and_numa_statements_run_on_the_model() {
    let src = "\
machine nodes 0
expect errno EINVAL
machine nodes 65
expect errno EINVAL
machine nodes 2
expect ok
numa node 2
expect errno EINVAL
thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
numa scan p 64K
expect ret == 0
numa node 1
expect ok
numa scan p 64K
expect ret == 16
numa scan p + 1 4K
expect errno EINVAL
read p
expect stat vmstat/numa_pages_migrated == 16
machine nodes 4
expect errno EBUSY
";
    assert_eq!(run(src), Vec::<String>::new());
}

#[test]
fn numa_statement_errors_teach() {
    let cases = [
        ("numa", "expected 'node N' or 'scan ADDR LEN' after 'numa'"),
        ("numa scna 0 4K", "found 'scna' (did you mean 'scan'?)"),
        ("numa scan 0", "the length after 'numa scan ADDR'"),
        (
            "numa node 1\nexpect ret == 0",
            "'numa node' can only be followed by",
        ),
        (
            "numa scan 0 4K\nexpect segv",
            "'numa scan' can only be followed by",
        ),
        (
            "machine nodes",
            "a number of NUMA nodes (1 to 64) after 'machine nodes'",
        ),
        (
            "observe numa_maps",
            "(maps, smaps, pages, stats or numa), found 'numa_maps'",
        ),
    ];
    for (src, want) in cases {
        let err = ptlab_scenario::parse("t.ptl", src).unwrap_err().to_string();
        assert!(err.contains(want), "{src:?}: {err}");
    }
}

#[test]
fn numa_calls_print_back_to_the_same_calls() {
    use ptlab_scenario::{call_to_ptl, fmt_addr, Call};
    let calls = [
        Call::SetNodes { nodes: 2 },
        Call::NumaRunOn { node: 1 },
        Call::NumaScan {
            addr: 0x7f00_0000_0000,
            len: 1 << 30,
        },
    ];
    let text: Vec<String> = calls
        .iter()
        .map(|c| call_to_ptl("main", None, c, &fmt_addr))
        .collect();
    assert_eq!(
        text,
        [
            "machine nodes 2",
            "numa node 1",
            "numa scan 0x7f0000000000 1G"
        ]
    );
    // The printed lines parse and run as the same statements.
    let src = format!(
        "{}\nthp 64K always\np = mmap 64K at 0x7f00_0000_0000 fixed\nwrite p 64K\n{}\n{}\nexpect ret == 16\n",
        text[0], text[1], text[2]
    );
    assert_eq!(run(&src), Vec::<String>::new());
}

#[test]
fn observe_numa_prints_numa_maps() {
    let mut b = ModelBackend::new(ModelConfig::for_arch(ArchKind::X86_64));
    let src = "machine nodes 2
p = mmap 16K at 0x7f00_0000_0000 fixed
write p 8K
numa node 1
write p + 8K
observe numa
observe
";
    let r = run_source("t.ptl", src, &mut b, &RunOptions::default()).expect("parses");
    let texts: Vec<String> = r.outputs.iter().map(|o| o.render_text()).collect();
    assert_eq!(
        texts[0],
        "== process main\n-- numa_maps\n7f0000000000 default anon=3 N0=2 N1=1 kernelpagesize_kB=4\n"
    );
    assert!(!texts[1].contains("numa_maps"), "{}", texts[1]);
}
