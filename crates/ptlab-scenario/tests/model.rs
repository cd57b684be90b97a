//! Scenarios run on the real model backend: the language and the model
//! agreeing on well-established kernel behaviour.

use ptlab_model::{ArchKind, ModelConfig};
use ptlab_scenario::{run_source, ModelBackend, RunOptions, RunReport};

fn run_model(arch: ArchKind, src: &str) -> RunReport {
    let mut backend = ModelBackend::new(ModelConfig::for_arch(arch)).check_every_statement(true);
    run_source("m.ptl", src, &mut backend, &RunOptions::default())
        .unwrap_or_else(|e| panic!("parse error: {e}"))
}

#[track_caller]
fn assert_passes_on_both(src: &str) {
    for arch in [ArchKind::X86_64, ArchKind::Arm64] {
        let r = run_model(arch, src);
        let failures: Vec<String> = r.failures.iter().map(ToString::to_string).collect();
        assert!(
            r.passed(),
            "{} failed:\n{}",
            arch.name(),
            failures.join("\n")
        );
    }
}

#[test]
fn example_scenario_passes() {
    let src = include_str!("../../../scenarios/examples/basic.ptl");
    assert_passes_on_both(src);
}

#[test]
fn mmap_argument_errors() {
    assert_passes_on_both(
        "mmap 0
expect errno EINVAL
mmap 4K at 0x1001 fixed
expect errno EINVAL
p = mmap 64K
mmap 4K at p noreplace
expect errno EEXIST
# Same flags: the new VMA merges back with its neighbours.
q = mmap 4K at p + 4K fixed
expect ret == p + 4K
expect maps
  p .. p + 64K rw-p
end
# Different protection: three VMAs.
mmap 4K at p + 4K fixed prot r
expect maps
  p .. p + 4K rw-p
  p + 4K .. p + 8K r--p
  p + 8K .. p + 64K rw-p
end
munmap p 64K
expect maps empty",
    );
}

#[test]
fn access_faults() {
    assert_passes_on_both(
        "read 0x10000
expect segv
p = mmap 8K prot r
read p 8K
expect page p 8K zero pte
write p
expect segv
n = mmap 4K prot none
read n
expect segv",
    );
}

#[test]
fn dontneed_zaps_and_refaults_fresh() {
    assert_passes_on_both(
        "p = mmap 16K
write p 16K tag=7
f = pfn p
madvise p 8K dontneed
expect page p 8K none
expect page p + 8K 8K anon tag=7
read p
expect page p zero
write p tag=1
expect page p anon order=0 tag=1
expect pfn p + 8K != f",
    );
}

#[test]
fn pmd_thp_with_madvise() {
    assert_passes_on_both(
        "thp enabled madvise
p = mmap 4M
madvise p 4M hugepage
expect vmflags p has hg
let a = align_up(p, PMD)
write a + 12K
expect page a 2M anon pmd order=9 idx=0 samefolio X AX
expect page a + 12K tag=a + 12K
expect page a + 16K tag=0
expect anonhuge a == 2M
expect stat vmstat/thp_fault_alloc == 1",
    );
}

#[test]
fn loops_over_many_pages_are_quick() {
    let start = std::time::Instant::now();
    assert_passes_on_both(
        "p = mmap 4M
repeat 1024 as i
  write p + i * 4K tag=i
end
expect page p + 1023 * 4K tag=1023
expect page p 4M anon",
    );
    assert!(start.elapsed().as_secs() < 30, "took {:?}", start.elapsed());
}

#[test]
fn uffd_results_and_fault_checks() {
    // A failed uffd ioctl binds its output field when the kernel wrote it
    // (a length of 0 is rejected before: the field is untouched and `n`
    // has no value until it is bound again); `expect uffd` checks a fault
    // that goes to userfaultfd.
    assert_passes_on_both(
        "let R = 0x7f0000000000
mmap 8M at R fixed prot none
dst = mmap 64K at R + 1M fixed
src = mmap 64K at R + 4M fixed
write src 12K
uffd move dst src 4K
expect errno EBADF
uffd open
uffd open
expect errno EBUSY
uffd register dst 64K missing
read dst
expect uffd
uffd copy dst + 4K src 4K tag=1
n = uffd move dst src 12K
expect errno EAGAIN
expect value n == 4K
n = uffd move dst src 0
expect errno EINVAL
n = uffd move dst + 4K src + 4K 4K
expect errno EEXIST
expect value n == -17
n = uffd zeropage dst + 8K 4K
expect ret == 4K",
    );
    // Uncovered outcomes are failures that say what happened.
    let r = run_model(
        ArchKind::X86_64,
        "p = mmap 64K at 0x7f0000000000 fixed
uffd open
uffd register p 64K missing
read p
n = uffd move p p + 4K 4K
read p
expect segv
write p
expect ok",
    );
    let msgs: Vec<String> = r.failures.iter().map(ToString::to_string).collect();
    assert_eq!(
        msgs,
        vec![
            "m.ptl:4: read at 0x7f0000000000 faults to userfaultfd and no 'expect uffd' covers it",
            "m.ptl:5: uffd move failed with ENOENT (No such file or directory) (result -2) and no expect line covers it",
            "m.ptl:7: expectation failed: expected read to raise SIGSEGV, but it faulted to userfaultfd at 0x7f0000000000",
            "m.ptl:9: expectation failed: expected write to complete, but it faulted to userfaultfd at 0x7f0000000000",
        ]
    );
}

#[test]
fn fill_and_expect_bytes() {
    assert_passes_on_both(
        "p = mmap 16K
write p + 4090 12 fill 0x7e
expect bytes p 4090 fill 0
expect bytes p + 4090 12 fill 0x7e
expect bytes p + 4094 4 == 0x7e7e7e7e
expect page p tag=0
expect page p + 4K tag=0x7e7e7e7e7e7e
write p + 4K tag=0x0102
expect bytes p + 4K 3 == 0x000102
expect bytes p + 4K + 8 2 fill 0
write p + 8K fill 0x01
expect bytes p + 8K 4K fill 1
expect page p + 12K none
",
    );
}

#[test]
fn expect_bytes_failures_name_the_byte() {
    let r = run_model(
        ArchKind::X86_64,
        "p = mmap 8K
write p fill 0x11
expect bytes p 4K fill 0x12
expect bytes p 2 == 0x1112
expect bytes p + 4K 1 == 0
",
    );
    let f: Vec<String> = r.failures.iter().map(ToString::to_string).collect();
    assert_eq!(f.len(), 3, "{f:#?}");
    assert!(
        f[0].contains("m.ptl:3:") && f[0].contains("4096 of 4096 differ"),
        "{}",
        f[0]
    );
    assert!(
        f[1].contains("m.ptl:4:") && f[1].contains("found 0x1111"),
        "{}",
        f[1]
    );
    assert!(
        f[2].contains("m.ptl:5:") && f[2].contains("not present"),
        "{}",
        f[2]
    );
}

#[test]
fn bad_fill_and_bytes_lines_are_errors() {
    let r = run_model(ArchKind::X86_64, "p = mmap 4K\nwrite p fill 256\n");
    assert!(r
        .failures
        .iter()
        .any(|f| f.to_string().contains("m.ptl:2:") && f.to_string().contains("not a byte")));
    let r = run_model(
        ArchKind::X86_64,
        "p = mmap 4K\nwrite p\nexpect bytes p 9 == 1\n",
    );
    assert!(r
        .failures
        .iter()
        .any(|f| f.to_string().contains("1 to 8 bytes")));
    let e = ptlab_scenario::parse("m.ptl", "p = mmap 4K\nread p fill 1\n").unwrap_err();
    assert!(e.to_string().contains("only applies to write"), "{e}");
    let e = ptlab_scenario::parse("m.ptl", "p = mmap 4K\nexpect bytes p 4 1\n").unwrap_err();
    assert!(e.to_string().contains("'== VALUE' or 'fill BYTE'"), "{e}");
}
