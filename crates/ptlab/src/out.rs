//! Printing that survives the reader going away (`ptlab ... | head -1`).
//!
//! Rust starts every program with SIGPIPE ignored, so a write to a pipe
//! whose reader has exited fails with EPIPE instead of killing the process,
//! and `println!` turns that error into a panic ("failed printing to
//! stdout: Broken pipe", exit 101).
//!
//! The design, and why not `signal(SIGPIPE, SIG_DFL)`: the default action
//! would kill ptlab on the spot — in the middle of a live run that has
//! changed THP knobs, turned on a swap file and forked workers, none of which
//! would then be put back (the next start would repair the knobs from the
//! journal, but the workers and the swap area would be left). So SIGPIPE
//! stays ignored, and every line ptlab prints goes through this module:
//!
//! * A write that fails with EPIPE *mutes* that stream: `/dev/null` is
//!   `dup2`ed over the descriptor, so every later write to it — ours, a
//!   library's `eprintln!`, indicatif's, the runtime's final flush —
//!   succeeds and goes nowhere. No message: nobody is left to read it.
//! * The command carries on to its normal end: live runs finish and clean
//!   up on their usual path, result files (`--out`) are still written, and
//!   the exit status is the command's own. A closed pipe never loses work.
//! * Any other error writing stdout (a full disk behind `> file`) is kept
//!   and reported when the command ends ([`finish`]): exit status 2.
//! * Safety net: a library that prints with `println!`/`eprintln!` to a
//!   stream we have not muted yet panics; [`install_panic_hook`] keeps
//!   that panic quiet, unwinding runs every `Drop` (knob session, live
//!   backend, swap files), and `main` ends with [`PIPE_EXIT`].

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Exit status when a broken pipe cut a command short (the safety net):
/// 128 + SIGPIPE, what a shell shows for a writer killed by a closed pipe.
pub const PIPE_EXIT: u8 = 141;

static STDOUT_MUTED: AtomicBool = AtomicBool::new(false);
static STDERR_MUTED: AtomicBool = AtomicBool::new(false);
static PIPE_PANIC: AtomicBool = AtomicBool::new(false);
/// The first error (other than EPIPE) writing stdout.
static STDOUT_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Points `fd` at /dev/null, so nothing written to it can fail any more.
fn mute(fd: i32, flag: &AtomicBool) {
    if flag.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: plain descriptor calls on a path literal; dup2 atomically
    // replaces `fd`, and we close only the descriptor we opened.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, fd);
            libc::close(null);
        }
    }
}

/// Whether stdout's reader has gone away.
pub fn stdout_muted() -> bool {
    STDOUT_MUTED.load(Ordering::SeqCst)
}

fn is_pipe_error(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// Standard output, quiet about a closed pipe (see the module docs).
pub struct Stdout;

/// Standard error, never failing: errors are dropped (there is nowhere to
/// report them), a closed pipe mutes it.
pub struct Stderr;

pub fn stdout() -> Stdout {
    Stdout
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if stdout_muted() {
            return Ok(buf.len());
        }
        match io::stdout().write(buf) {
            Err(e) if is_pipe_error(&e) => {
                mute(1, &STDOUT_MUTED);
                Ok(buf.len())
            }
            r => r,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if stdout_muted() {
            return Ok(());
        }
        match io::stdout().flush() {
            Err(e) if is_pipe_error(&e) => {
                mute(1, &STDOUT_MUTED);
                // What was buffered now goes to /dev/null.
                let _ = io::stdout().flush();
                Ok(())
            }
            r => r,
        }
    }
}

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !STDERR_MUTED.load(Ordering::SeqCst) {
            if let Err(e) = io::stderr().write_all(buf) {
                if is_pipe_error(&e) {
                    mute(2, &STDERR_MUTED);
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `print!` for ptlab: see the module docs. Other stdout errors are kept
/// for [`finish`].
pub fn print(args: std::fmt::Arguments<'_>) {
    let mut o = Stdout;
    if let Err(e) = o.write_fmt(args) {
        let mut slot = STDOUT_ERROR.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert_with(|| e.to_string());
    }
}

/// `eprint!` for ptlab: never fails, never panics.
pub fn eprint(args: std::fmt::Arguments<'_>) {
    let _ = Stderr.write_fmt(args);
}

/// `println!` that a closed pipe cannot crash (see [`crate::out`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::out::print(format_args!("\n")) };
    ($($arg:tt)*) => {{
        $crate::out::print(format_args!("{}\n", format_args!($($arg)*)))
    }};
}

/// `print!` that a closed pipe cannot crash.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::print(format_args!($($arg)*)) };
}

/// `eprintln!` that a closed pipe cannot crash.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        $crate::out::eprint(format_args!("{}\n", format_args!($($arg)*)))
    }};
}

/// Safety net for `println!`/`eprintln!` in library code: their panic on a
/// broken pipe is kept quiet and marked, so `main` ends with [`PIPE_EXIT`]
/// after unwinding has run every cleanup. Other panics print as usual.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to std") && msg.contains("Broken pipe") {
            PIPE_PANIC.store(true, Ordering::SeqCst);
            if msg.contains("stdout") {
                mute(1, &STDOUT_MUTED);
            } else {
                mute(2, &STDERR_MUTED);
            }
            return;
        }
        default(info);
    }));
}

/// Whether a panic was a broken pipe caught by the safety net.
pub fn pipe_panicked() -> bool {
    PIPE_PANIC.load(Ordering::SeqCst)
}

/// Flush stdout at the end of a command; `Err` describes a write error
/// other than a closed pipe (to be reported with exit status 2).
pub fn finish() -> Result<(), String> {
    if let Err(e) = Stdout.flush() {
        let mut slot = STDOUT_ERROR.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert_with(|| e.to_string());
    }
    match STDOUT_ERROR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        Some(e) => Err(format!("cannot write to stdout: {e}")),
        None => Ok(()),
    }
}
