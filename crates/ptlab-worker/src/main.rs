//! `ptlab-worker`: the live backend's worker (crates/ptlab-live/src/worker.rs)
//! as a program of its own. ptlab forks, moves the worker's channel to fd 3
//! and execs this program (embedded in ptlab-live, run from a memfd), so a
//! scenario process holds about ten VMAs of its own (this static binary,
//! its stack, vdso/vvar) instead of a copy of ptlab's ~35: every smaps and
//! numa_maps read of a comparison is that much shorter (docs/live.md,
//! "Worker processes").
//!
//! The worker's code is not copied here: the three files below are
//! compiled into this program as they are into ptlab-live. `std`'s runtime
//! is not started (`no_main`): nothing is allocated, no thread is made.
//!
//! Arguments: `ptlab-worker PARENT_PID PTLAB_EXE` (the exe only names
//! whose worker this is, for tests that look for processes a ptlab left).

#![no_main]
#![allow(dead_code)]

#[path = "../../ptlab-live/src/lifeline.rs"]
mod lifeline;
#[path = "../../ptlab-live/src/wire/proto.rs"]
mod wire;
#[path = "../../ptlab-live/src/worker.rs"]
mod worker;

/// A decimal pid from a NUL-terminated argument; 0 when it is none.
fn parse_pid(arg: *const libc::c_char) -> libc::pid_t {
    if arg.is_null() {
        return 0;
    }
    let mut v: libc::pid_t = 0;
    let mut p = arg;
    // SAFETY: argv strings are NUL-terminated.
    unsafe {
        while *p != 0 {
            let d = *p as u8;
            if !d.is_ascii_digit() {
                return 0;
            }
            v = v
                .saturating_mul(10)
                .saturating_add(libc::pid_t::from(d - b'0'));
            p = p.add(1);
        }
    }
    v
}

extern "C" {
    // The linker's bounds of the zero-initialised data (GNU ld, lld).
    static __bss_start: u8;
    static _end: u8;
}

/// Fault every page of the program's `.bss` now, while ptlab's
/// PR_SET_THP_DISABLE (kept over exec) still holds: the worker clears it
/// for the scenario, and a `.bss` page (the C library's or the worker's
/// statics) first written during a statement under an `always` policy
/// could be a large folio, counted in that statement's step. A read and
/// a write of the same byte, page by page: the values stay.
fn prefault_bss() {
    // SAFETY: the linker's symbols bound this program's own `.bss`; the
    // process is single-threaded, so rewriting a byte with its own value
    // changes nothing.
    unsafe {
        let start = core::ptr::addr_of!(__bss_start) as usize;
        let end = core::ptr::addr_of!(_end) as usize;
        let mut p = start & !4095;
        while p < end {
            let b = (p.max(start)) as *mut u8;
            core::ptr::write_volatile(b, core::ptr::read_volatile(b));
            p += 4096;
        }
    }
}

/// # Safety
/// Called by the C runtime with the process's arguments.
#[no_mangle]
pub unsafe extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    let parent = if argc >= 2 {
        parse_pid(*argv.add(1))
    } else {
        0
    };
    if parent <= 0 {
        // Not started by ptlab: there is no channel to serve.
        return 2;
    }
    // The command name an exec from a memfd gives is the descriptor's
    // number; name the process for ps and top.
    libc::prctl(libc::PR_SET_NAME, c"ptlab-worker".as_ptr(), 0, 0, 0);
    prefault_bss();
    worker::worker_main(worker::CHAN_FD, parent)
}
