//! Starting a worker process: fork, then exec the worker program
//! (crates/ptlab-worker, built static by build.rs and embedded here), or,
//! in a build without it or with `PTLAB_FORK_WORKER=1`, run the worker in
//! the fork itself as before.
//!
//! Why exec: a worker forked from ptlab keeps a copy of ptlab's address
//! space, ~35 VMAs (ptlab's image, libc, libm, libgcc_s, ld.so, heap,
//! thread stacks), and the kernel formats every one of them at every smaps
//! and numa_maps read of a comparison (27 KB of smaps text). The exec'd
//! program has about ten (docs/live.md, "Worker processes"). The scenario
//! sees the same kernel: the worker's code is the same file
//! (`crate::worker`) in both.

use std::ffi::{c_char, CString};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use crate::worker;

/// The static worker program, when build.rs could build it.
#[cfg(ptlab_exec_worker)]
static PROGRAM: &[u8] = include_bytes!(env!("PTLAB_WORKER_EXE"));
#[cfg(not(ptlab_exec_worker))]
static PROGRAM: &[u8] = &[];

/// The lowest descriptor the program's memfd may take: above the worker's
/// channel (fd 3), which the child `dup2`s into place before the exec.
const PROGRAM_FD_MIN: libc::c_int = 10;

/// The program in a memfd (close-on-exec: ptlab's own other children do
/// not get it), written once per ptlab process; `None` when there is no
/// program or it could not be written.
fn program_fd() -> Option<libc::c_int> {
    static FD: OnceLock<Option<OwnedFd>> = OnceLock::new();
    FD.get_or_init(|| {
        if PROGRAM.is_empty() {
            return None;
        }
        let name = c"ptlab-worker";
        // MFD_EXEC (6.3+): say that it is to be executed; older kernels
        // reject the flag, and their memfds are executable anyway.
        const MFD_EXEC: libc::c_uint = 0x10;
        // SAFETY: memfd_create with a valid name.
        let mut fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | MFD_EXEC) };
        if fd < 0 {
            // SAFETY: as above.
            fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        }
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is ours.
        let f = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: F_DUPFD_CLOEXEC on our own descriptor.
        let high = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, PROGRAM_FD_MIN) };
        if high < 0 {
            return None;
        }
        // SAFETY: high is ours.
        let f = unsafe { OwnedFd::from_raw_fd(high) };
        let mut file = std::fs::File::from(f);
        file.write_all(PROGRAM).ok()?;
        Some(OwnedFd::from(file))
    })
    .as_ref()
    .map(|f| f.as_raw_fd())
}

/// Whether workers are exec'd (the program exists and
/// `PTLAB_FORK_WORKER` is not set to something other than `0`).
pub fn exec_workers() -> bool {
    static FORK: OnceLock<bool> = OnceLock::new();
    let fork = *FORK.get_or_init(|| {
        std::env::var_os("PTLAB_FORK_WORKER").is_some_and(|v| !v.is_empty() && v != "0")
    });
    !fork && program_fd().is_some()
}

/// What the child needs to exec the program, made before the fork (the
/// child allocates nothing).
pub(crate) struct Launch {
    fd: libc::c_int,
    _args: [CString; 3],
    argv: [*const c_char; 4],
    envp: [*const c_char; 1],
}

impl Launch {
    /// `None`: fork the worker from ptlab (no program, or
    /// `PTLAB_FORK_WORKER=1`).
    pub(crate) fn prepare(parent: libc::pid_t) -> Option<Launch> {
        if !exec_workers() {
            return None;
        }
        let fd = program_fd()?;
        let exe = std::env::current_exe()
            .ok()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let args = [
            CString::new("ptlab-worker").ok()?,
            CString::new(parent.to_string()).ok()?,
            CString::new(exe).ok()?,
        ];
        let argv = [
            args[0].as_ptr(),
            args[1].as_ptr(),
            args[2].as_ptr(),
            std::ptr::null(),
        ];
        Some(Launch {
            fd,
            _args: args,
            argv,
            envp: [std::ptr::null()],
        })
    }
}

/// In the freshly forked child (async-signal-safe system calls only):
/// become the worker of channel `chan`. With a [`Launch`], move the
/// channel to the worker's fd 3 (without close-on-exec) and exec the
/// program; an exec that fails ends the child, which ptlab sees as the
/// worker's channel closing before its first answer. Without one, serve
/// here. Never returns.
pub(crate) fn become_worker(chan: libc::c_int, parent: libc::pid_t, launch: Option<&Launch>) -> ! {
    let Some(l) = launch else {
        worker::worker_main(chan, parent);
    };
    crate::lifeline::die_with_parent(parent);
    // SAFETY: descriptor syscalls and execveat with argument arrays made
    // before the fork; _exit if the exec fails.
    unsafe {
        if chan == worker::CHAN_FD {
            libc::fcntl(chan, libc::F_SETFD, 0);
        } else if libc::dup2(chan, worker::CHAN_FD) < 0 {
            libc::_exit(127);
        }
        libc::syscall(
            libc::SYS_execveat,
            l.fd,
            c"".as_ptr(),
            l.argv.as_ptr(),
            l.envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
        libc::_exit(127)
    }
}
