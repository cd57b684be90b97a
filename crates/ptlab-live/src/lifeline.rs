//! Children die with their parent.
//!
//! Every process ptlab starts (live workers, `calibrate-worker`, the
//! `ptlab calibrate` child of `reproduce`, bench children, the helper
//! programs `bench` runs) asks the kernel for SIGKILL when its parent dies
//! (`prctl(PR_SET_PDEATHSIG, SIGKILL)`), then checks that the parent it
//! was forked from is still its parent: a parent that died between the
//! fork and the prctl has already reparented the child (to init or a
//! subreaper), and no signal would ever come.
//!
//! Two caveats of PR_SET_PDEATHSIG (prctl(2)):
//! * the signal comes when the *thread* that forked exits, not the
//!   process: fork from a thread that lives as long as the child should
//!   (ptlab forks from the thread that owns the backend or the command);
//! * it fires at every reparenting, so a process that must outlive its
//!   parent cannot use it: scenario processes forked by a worker (`fork
//!   NAME`) survive their parent's `exit`, and die with ptlab instead
//!   through their channel (EOF or hang-up from ptlab's end, see
//!   crate::worker).

use std::os::unix::process::CommandExt;
use std::process::Command;

/// In a freshly forked child (async-signal-safe: two syscalls and
/// `_exit`): SIGKILL when the parent dies, and exit at once if `parent`
/// (the forking process's pid, read before the fork) already died.
pub fn die_with_parent(parent: libc::pid_t) {
    // SAFETY: prctl/getppid/_exit are plain syscalls on ourselves.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != parent {
            libc::_exit(1);
        }
    }
}

/// This process's pid, to pass to [`die_with_parent`] in a child.
pub fn my_pid() -> libc::pid_t {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// Make the child `cmd` starts die with this process ([`die_with_parent`]
/// between fork and exec; the death signal survives exec).
pub fn tie(cmd: &mut Command) -> &mut Command {
    let parent = my_pid();
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions.
    unsafe {
        cmd.pre_exec(move || {
            die_with_parent(parent);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A child tied to an intermediate process dies when that process is
    /// killed (the grandchild would otherwise sleep on under init).
    #[test]
    fn tied_child_dies_with_parent() {
        let mut pipe = [0; 2];
        // SAFETY: pipe into a valid array.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: the child runs only async-signal-safe calls until exec.
        let mid = unsafe { libc::fork() };
        assert!(mid >= 0);
        if mid == 0 {
            // The intermediate process: start a tied `sleep`, report its pid,
            // then wait to be killed.
            let mut c = Command::new("sleep");
            c.arg("600");
            tie(&mut c);
            let code = match c.spawn() {
                Ok(ch) => {
                    let pid = ch.id().to_ne_bytes();
                    // SAFETY: writing 4 bytes to our pipe.
                    unsafe { libc::write(pipe[1], pid.as_ptr().cast(), 4) };
                    std::thread::sleep(Duration::from_secs(600));
                    0
                }
                Err(_) => 1,
            };
            // SAFETY: leaving the forked test process without unwinding.
            unsafe { libc::_exit(code) };
        }
        let mut buf = [0u8; 4];
        // SAFETY: reading 4 bytes from our pipe.
        let n = unsafe { libc::read(pipe[0], buf.as_mut_ptr().cast(), 4) };
        assert_eq!(n, 4, "the intermediate process reported its child");
        let grandchild = i32::from_ne_bytes(buf);
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(mid, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(mid, &mut st, 0);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
        let t = Instant::now();
        while std::path::Path::new(&format!("/proc/{grandchild}/cmdline")).exists()
            && std::fs::read(format!("/proc/{grandchild}/cmdline"))
                .map(|b| b.starts_with(b"sleep"))
                .unwrap_or(false)
        {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the tied child {grandchild} outlived its parent"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The race: a parent that is gone before the child checks makes the
    /// child exit at once.
    #[test]
    fn dead_parent_before_prctl_exits() {
        // SAFETY: the child only calls die_with_parent and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // Pretend our parent was someone else (it "died"): exit 1.
            die_with_parent(1);
            // SAFETY: leaving the forked test process.
            unsafe { libc::_exit(0) };
        }
        let mut st = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(libc::WIFEXITED(st));
        assert_eq!(libc::WEXITSTATUS(st), 1);
    }
}
