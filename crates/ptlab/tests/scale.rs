//! The model holds processes far bigger than the machine it runs on:
//! scenarios/examples/fork-1t.ptl (a 1 TiB process of PMD THPs on a 2 TiB
//! machine: populate, fork, mprotect everything, the child exits) runs at
//! full size and stays small. Asserts behaviour and bounds that hold on any
//! machine, never a time (docs/model.md "Speed and memory" has the
//! measured numbers). `RUSAGE_CHILDREN` reports the largest peak of the
//! children waited for, so the 1 TiB test's bound covers the 64 KiB test's
//! child too (whose own peak is far smaller); the 64 KiB test reads its
//! child's peak on its own with wait4().

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

/// scenarios/examples/fork-1t-64k.ptl at 64 GiB (16 Mi pages in 1 Mi
/// folios of 64 KiB: populate, fork, mprotect everything, the child exits):
/// the model keeps one record per run of identical folios, so the whole
/// process — executable, allocator and page tables included — stays under
/// 4 bytes per populated page (one record per folio took about 12 bytes a
/// page for the records alone). 1 TiB takes too long for a test (about a
/// minute of CPU; docs/model.md "Folio runs").
#[test]
// The child is waited for with wait4() (for its own rusage), not Child::wait().
#[allow(clippy::zombie_processes)]
fn a_64g_process_of_64k_folios_stays_under_4_bytes_a_page() {
    use std::io::Read;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args([
            "run",
            "-q",
            "--param",
            "size=64G",
            "scenarios/examples/fork-1t-64k.ptl",
        ])
        .current_dir(root)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ptlab runs");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let mut status = 0;
    // SAFETY: wait4() fills the struct it is given; the child is ours and
    // not waited for elsewhere.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut ru) }, pid);
    assert!(
        libc::WIFEXITED(status)
            && libc::WEXITSTATUS(status) == 0
            && stdout.contains("PASS: 1 expectation held"),
        "{stdout}\n{stderr}"
    );
    let kb = ru.ru_maxrss as u64;
    let pages = (64u64 << 30) / 4096;
    assert!(
        kb > 0 && kb * 1024 < 4 * pages,
        "64 GiB of 64 KiB folios used {kb} KiB of model memory ({:.2} B/page)",
        (kb * 1024) as f64 / pages as f64
    );
}
