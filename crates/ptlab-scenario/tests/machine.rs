//! `machine memory SIZE` on the model: the machine grows and shrinks, the
//! checks come in the documented order, and a scenario may populate more
//! than the default 24 GiB once it asked for the memory.

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
            .contains("expected 'memory SIZE' after 'machine'"),
        "{err}"
    );
    let err = ptlab_scenario::parse("t.ptl", "machine memory").unwrap_err();
    assert!(err.to_string().contains("machine memory"), "{err}");
}
