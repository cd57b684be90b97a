//! The model holds processes far bigger than the machine it runs on:
//! scenarios/examples/fork-1t.ptl (a 1 TiB process of PMD THPs on a 2 TiB
//! machine: populate, fork, mprotect everything, the child exits) runs at
//! full size and stays small. Asserts behaviour and bounds that hold on any
//! machine, never a time (docs/model.md "Speed and memory" has the
//! measured numbers). The only test in this binary, so the children's peak
//! resident size is ptlab's.

use std::process::Command;

#[test]
fn a_1t_process_runs_on_the_model() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args(["run", "-q", "scenarios/examples/fork-1t.ptl"])
        .current_dir(root)
        .output()
        .expect("ptlab runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("PASS: 1 expectation held"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: getrusage() fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) },
        0
    );
    let kb = ru.ru_maxrss as u64;
    // 268 million pages in 524,288 PMD THPs: the bound is 2 GiB.
    assert!(
        kb > 0 && kb < 2 << 20,
        "1 TiB of PMD THPs used {kb} KiB of model memory"
    );
}
