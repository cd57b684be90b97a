//! What the command-line tests share: running the ptlab binary.
// Each test crate uses only some of these.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

/// ptlab with `args`, run where the test runs.
pub fn ptlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args(args)
        .output()
        .expect("run ptlab")
}

/// Output bytes as text (invalid UTF-8 replaced).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// ptlab with `args`, run from the repository root (where `scenarios/`
/// and `profiles/` are): its exit code (-1 for none), stdout and stderr.
pub fn ptlab_in_repo(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Make the signals a test sends to `c`'s process act as at a terminal,
/// even when the test runs with them ignored (a background job of a
/// non-interactive shell ignores SIGINT, and ptlab keeps a signal ignored
/// at its start ignored).
pub fn default_signals(c: &mut Command) {
    // SAFETY: signal dispositions between fork and exec.
    unsafe {
        c.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}
