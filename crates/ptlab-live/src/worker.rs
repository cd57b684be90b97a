//! The worker: a process forked from ptlab that executes one scenario
//! process's operations, so the scenario never runs in ptlab's own address
//! space.
//!
//! The worker speaks a fixed-size binary protocol over a `SOCK_STREAM`
//! socketpair (see [`crate::wire`]). Everything here runs after
//! `fork()` in a process whose parent may have had many threads, so the
//! worker uses only raw system calls: no allocation, no locks, no std I/O,
//! no panics. Page contents are read and written with plain loads and
//! stores inside the worker (see docs/live.md: reading `/proc/PID/mem` from
//! outside takes page references and changes copy-on-write results).
//!
//! An access that faults is caught by a SIGSEGV/SIGBUS handler that
//! recognises the two probe instructions below and resumes at a fix-up
//! stub, which makes the probe return 1 instead of 0.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// The fd number the worker's channel lives at.
pub(crate) const CHAN_FD: libc::c_int = 3;

use crate::wire::{ioctl, op, Req, Resp, FIELD_UNTOUCHED, ST_FAULT};

/// Soft limits the scenario set for RLIMIT_AS and RLIMIT_DATA, applied
/// only while the worker makes a scenario's mmap/mprotect/mremap call (the
/// worker's own allocations must never fail). u64::MAX: none.
static SCOPED_AS: AtomicU64 = AtomicU64::new(u64::MAX);
static SCOPED_DATA: AtomicU64 = AtomicU64::new(u64::MAX);

/// The model's default RLIMIT_MEMLOCK soft limit, so an unprivileged
/// scenario starts from the same budget on both backends
/// (ptlab_model::rlimit::MLOCK_LIMIT_DEFAULT).
const MEMLOCK_DEFAULT: u64 = 8 << 20;

fn set_soft_limit(resource: u64, soft: u64) -> i32 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(resource as _, &mut rl) != 0 {
            return -1;
        }
        rl.rlim_cur = soft;
        if rl.rlim_max < soft {
            rl.rlim_max = soft; // root (CAP_SYS_RESOURCE) may raise it
        }
        libc::setrlimit(resource as _, &rl)
    }
}

fn hard_limit(resource: u64) -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid struct.
    unsafe { libc::getrlimit(resource as _, &mut rl) };
    rl.rlim_max
}

/// Apply (`on`) or lift the scoped limits around one scenario call
/// (lifting puts the soft limit back at the hard one, where it starts).
fn scoped_limits(on: bool) {
    for (res, lim) in [
        (libc::RLIMIT_AS, &SCOPED_AS),
        (libc::RLIMIT_DATA, &SCOPED_DATA),
    ] {
        let v = lim.load(Ordering::Relaxed);
        if v != u64::MAX {
            let res = res as u64;
            set_soft_limit(res, if on { v } else { hard_limit(res) });
        }
    }
}

/// capset(2): drop capability `cap` from this thread's effective set.
fn cap_drop(cap: u64) -> i64 {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget/capset with a valid header and two data words.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) != 0 {
            return -errno();
        }
        let (word, bit) = ((cap / 32) as usize, cap % 32);
        if word >= 2 {
            return -i64::from(libc::EINVAL);
        }
        d[word].effective &= !(1u32 << bit);
        if libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) != 0 {
            return -errno();
        }
    }
    0
}

// ----- fault-tolerant probes (x86-64 and arm64) ----------------------------
//
// Each probe is one load or store at a labelled instruction. The SIGSEGV /
// SIGBUS handler recognises a fault at one of those labels and resumes at
// `ptlab_live_probe_fixup`, which returns 1; otherwise the probe returns 0.
// The arm64 version is the same scheme with the AArch64 calling convention
// (arguments in x0/x1, result in x0, return address in x30, which the fault
// leaves untouched) and the saved PC in `uc_mcontext.pc`.

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .text.ptlab_live_probe,\"ax\",@progbits",
    ".p2align 4",
    ".globl ptlab_live_probe_read",
    ".hidden ptlab_live_probe_read",
    "ptlab_live_probe_read:",
    "    xor eax, eax",
    ".globl ptlab_live_probe_read_insn",
    ".hidden ptlab_live_probe_read_insn",
    "ptlab_live_probe_read_insn:",
    "    mov rdx, qword ptr [rdi]",
    "    mov qword ptr [rsi], rdx",
    "    ret",
    ".p2align 4",
    ".globl ptlab_live_probe_write",
    ".hidden ptlab_live_probe_write",
    "ptlab_live_probe_write:",
    "    xor eax, eax",
    ".globl ptlab_live_probe_write_insn",
    ".hidden ptlab_live_probe_write_insn",
    "ptlab_live_probe_write_insn:",
    "    mov qword ptr [rdi], rsi",
    "    ret",
    ".p2align 4",
    ".globl ptlab_live_probe_write_byte",
    ".hidden ptlab_live_probe_write_byte",
    "ptlab_live_probe_write_byte:",
    "    xor eax, eax",
    ".globl ptlab_live_probe_write_byte_insn",
    ".hidden ptlab_live_probe_write_byte_insn",
    "ptlab_live_probe_write_byte_insn:",
    "    mov byte ptr [rdi], sil",
    "    ret",
    ".p2align 4",
    ".globl ptlab_live_probe_fixup",
    ".hidden ptlab_live_probe_fixup",
    "ptlab_live_probe_fixup:",
    "    mov eax, 1",
    "    ret",
    ".popsection",
);

#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".pushsection .text.ptlab_live_probe,\"ax\",%progbits",
    ".p2align 4",
    ".globl ptlab_live_probe_read",
    ".hidden ptlab_live_probe_read",
    "ptlab_live_probe_read:",
    ".globl ptlab_live_probe_read_insn",
    ".hidden ptlab_live_probe_read_insn",
    "ptlab_live_probe_read_insn:",
    "    ldr x2, [x0]",
    "    str x2, [x1]",
    "    mov x0, xzr",
    "    ret",
    ".p2align 4",
    ".globl ptlab_live_probe_write",
    ".hidden ptlab_live_probe_write",
    "ptlab_live_probe_write:",
    ".globl ptlab_live_probe_write_insn",
    ".hidden ptlab_live_probe_write_insn",
    "ptlab_live_probe_write_insn:",
    "    str x1, [x0]",
    "    mov x0, xzr",
    "    ret",
    ".p2align 4",
    ".globl ptlab_live_probe_write_byte",
    ".hidden ptlab_live_probe_write_byte",
    "ptlab_live_probe_write_byte:",
    ".globl ptlab_live_probe_write_byte_insn",
    ".hidden ptlab_live_probe_write_byte_insn",
    "ptlab_live_probe_write_byte_insn:",
    "    strb w1, [x0]",
    "    mov x0, xzr",
    "    ret",
    ".p2align 4",
    ".globl ptlab_live_probe_fixup",
    ".hidden ptlab_live_probe_fixup",
    "ptlab_live_probe_fixup:",
    "    mov x0, #1",
    "    ret",
    ".popsection",
);

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
extern "C" {
    fn ptlab_live_probe_read(addr: u64, out: *mut u64) -> u32;
    fn ptlab_live_probe_write(addr: u64, val: u64) -> u32;
    fn ptlab_live_probe_write_byte(addr: u64, val: u64) -> u32;
    static ptlab_live_probe_write_byte_insn: [u8; 0];
    static ptlab_live_probe_read_insn: [u8; 0];
    static ptlab_live_probe_write_insn: [u8; 0];
    static ptlab_live_probe_fixup: [u8; 0];
}

/// Whether this build can run the worker (the probes exist for x86-64 and
/// arm64).
pub const SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

static FAULT_ADDR: AtomicU64 = AtomicU64::new(0);
static FAULT_SIG: AtomicU64 = AtomicU64::new(0);
/// userfaultfd handles of the scenario, by slot (the live backend numbers
/// the handle names); -1 where this process holds no descriptor. A fork
/// child inherits the parent's descriptors, as the kernel's fd table does.
pub(crate) const UFFD_SLOTS: usize = 8;
static UFFDS: [AtomicI32; UFFD_SLOTS] = [const { AtomicI32::new(-1) }; UFFD_SLOTS];
/// The slot the uffd ioctls act on.
static UFFD_CUR: AtomicUsize = AtomicUsize::new(0);

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
extern "C" fn fault_handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to an
    // SA_SIGINFO handler.
    unsafe {
        let uc = ctx as *mut libc::ucontext_t;
        #[cfg(target_arch = "x86_64")]
        let rip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
        // The saved PC, as an i64 like x86's greg (same bits).
        #[cfg(target_arch = "aarch64")]
        let rip = &mut *(core::ptr::addr_of_mut!((*uc).uc_mcontext.pc) as *mut i64);
        let read = core::ptr::addr_of!(ptlab_live_probe_read_insn) as i64;
        let write = core::ptr::addr_of!(ptlab_live_probe_write_insn) as i64;
        let write_byte = core::ptr::addr_of!(ptlab_live_probe_write_byte_insn) as i64;
        if *rip == read || *rip == write || *rip == write_byte {
            FAULT_ADDR.store((*info).si_addr() as u64, Ordering::Relaxed);
            FAULT_SIG.store(sig as u64, Ordering::Relaxed);
            *rip = core::ptr::addr_of!(ptlab_live_probe_fixup) as i64;
            return;
        }
        // A genuine crash of the worker: die of it.
        libc::signal(sig, libc::SIG_DFL);
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn probe_read(addr: u64) -> Result<u64, ()> {
    let mut v = 0u64;
    // SAFETY: the probe is a single load; a fault is turned into a return of 1.
    let r = unsafe { ptlab_live_probe_read(addr, &mut v) };
    if r == 0 {
        Ok(v)
    } else {
        Err(())
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn probe_write(addr: u64, val: u64) -> Result<(), ()> {
    // SAFETY: the probe is a single store; a fault is turned into a return of 1.
    let r = unsafe { ptlab_live_probe_write(addr, val) };
    if r == 0 {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn probe_write_byte(addr: u64, val: u8) -> Result<(), ()> {
    // SAFETY: the probe is a single byte store; a fault is turned into a return of 1.
    let r = unsafe { ptlab_live_probe_write_byte(addr, u64::from(val)) };
    if r == 0 {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn probe_write_byte(_addr: u64, _val: u8) -> Result<(), ()> {
    Err(())
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn probe_read(_addr: u64) -> Result<u64, ()> {
    Err(())
}
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn probe_write(_addr: u64, _val: u64) -> Result<(), ()> {
    Err(())
}

// ----- raw I/O ---------------------------------------------------------------

fn errno() -> i64 {
    // SAFETY: reading the thread's errno.
    i64::from(unsafe { *libc::__errno_location() })
}

fn write_all(fd: libc::c_int, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        // SAFETY: buf is a valid slice.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if errno() == i64::from(libc::EINTR) {
                continue;
            }
            return false;
        }
        if n == 0 {
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

fn read_exact(fd: libc::c_int, buf: &mut [u8]) -> bool {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: the destination lies inside buf.
        let n = unsafe { libc::read(fd, buf[off..].as_mut_ptr().cast(), buf.len() - off) };
        if n < 0 {
            if errno() == i64::from(libc::EINTR) {
                continue;
            }
            return false;
        }
        if n == 0 {
            return false;
        }
        off += n as usize;
    }
    true
}

fn words_bytes(w: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding; the byte view covers the same memory.
    unsafe { core::slice::from_raw_parts(w.as_ptr().cast(), w.len() * 8) }
}

fn words_bytes_mut(w: &mut [u64]) -> &mut [u8] {
    // SAFETY: as above; every byte pattern is a valid u64.
    unsafe { core::slice::from_raw_parts_mut(w.as_mut_ptr().cast(), w.len() * 8) }
}

fn reply(status: i64, val: u64, aux: u64) {
    let r: Resp = [status as u64, val, aux, 0];
    if !write_all(CHAN_FD, words_bytes(&r)) {
        die();
    }
}

fn sys_ret(r: i64) {
    if r < 0 {
        reply(-errno(), 0, 0);
    } else {
        reply(0, r as u64, 0);
    }
}

fn die() -> ! {
    // SAFETY: _exit is async-signal-safe and never returns.
    unsafe { libc::_exit(0) }
}

/// Pages a long operation touches between two checks of [`die_if_orphaned`].
const ORPHAN_CHECK_PAGES: u64 = 256;

/// Die if ptlab is gone: its end of the channel hung up. Scenario fork
/// children cannot use PR_SET_PDEATHSIG (it fires when their parent worker
/// exits, which a scenario may do while the child lives on), so a worker
/// notices ptlab's death on its channel: at once while it waits for a
/// request (EOF), and every [`ORPHAN_CHECK_PAGES`] pages during a long
/// access or tag read. One poll(2) with no timeout.
fn die_if_orphaned() {
    let mut p = libc::pollfd {
        fd: CHAN_FD,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    if r > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
        die();
    }
}

// ----- setup ----------------------------------------------------------------

/// Move `fd` to [`CHAN_FD`] and close every other descriptor above stderr
/// (another thread of ptlab may have forked while we held sockets, and a
/// stray copy of a channel would hide the EOF that signals an exit).
fn adopt_channel(fd: libc::c_int) {
    // SAFETY: plain descriptor syscalls.
    unsafe {
        if fd != CHAN_FD && libc::dup2(fd, CHAN_FD) < 0 {
            die();
        }
        libc::syscall(
            libc::SYS_close_range,
            (CHAN_FD + 1) as libc::c_uint,
            libc::c_uint::MAX,
            0u32,
        );
    }
}

/// [`adopt_channel`] for a scenario fork child: every descriptor above the
/// channel is closed except the inherited userfaultfds.
fn adopt_child_channel(fd: libc::c_int) {
    let mut keep = [libc::c_int::MAX; UFFD_SLOTS];
    for (k, s) in keep.iter_mut().zip(UFFDS.iter()) {
        let u = s.load(Ordering::Relaxed);
        if u > CHAN_FD && u != fd {
            *k = u;
        }
    }
    keep.sort_unstable();
    // SAFETY: plain descriptor syscalls.
    unsafe {
        if fd != CHAN_FD && libc::dup2(fd, CHAN_FD) < 0 {
            die();
        }
        let mut lo = CHAN_FD + 1;
        for &k in keep.iter().filter(|&&k| k != libc::c_int::MAX) {
            if k > lo {
                libc::syscall(
                    libc::SYS_close_range,
                    lo as libc::c_uint,
                    (k - 1) as libc::c_uint,
                    0u32,
                );
            }
            lo = lo.max(k + 1);
        }
        libc::syscall(
            libc::SYS_close_range,
            lo as libc::c_uint,
            libc::c_uint::MAX,
            0u32,
        );
    }
}

/// Touch the stack the worker will use so that its own page faults happen
/// before the scenario starts (with the machine's default THP settings)
/// rather than during it.
#[inline(never)]
fn prefault_stack() {
    prefault_stack_bytes::<{ 96 * 1024 }>();
}

/// At start, deeper than [`prefault_stack`] will ever reach: after a
/// scenario `fork`, settle_after_fork() pre-faults 96 KiB below a frame a
/// few KiB deeper than worker_main()'s, under the scenario's policy. An
/// exec'd worker's stack VMA is made 128 KiB+ at exec, mostly not
/// present, and a page first touched there under an `always` policy for
/// small sizes is a large folio (counted in the fork's step); 160 KiB
/// faulted now, while THP is still disabled, leaves nothing for then.
#[inline(never)]
fn prefault_stack_at_start() {
    prefault_stack_bytes::<{ 160 * 1024 }>();
}

#[inline(never)]
fn prefault_stack_bytes<const N: usize>() {
    let mut buf = [0u8; N];
    let mut i = 0;
    while i < buf.len() {
        // SAFETY: in bounds; volatile keeps the store.
        unsafe { core::ptr::write_volatile(buf.as_mut_ptr().add(i), 1) };
        i += 4096;
    }
    core::hint::black_box(&buf);
}

/// After a fork, in parent and child: take the worker's own
/// copy-on-write faults now (its stack, its statics, errno), then drain
/// this CPU's folio batches (MADV_COLD on the worker's current stack page:
/// madvise_cold() starts with lru_add_drain()). The model drains the
/// batches at fork; this makes that true, instead of leaving the drain to
/// whichever harness fault happens to come first (docs/divergences.md H10).
/// It maps nothing: a page mapped here could land next to a scenario VMA,
/// merge with it and take a THP fault over the scenario's pages (found by
/// `ptlab fuzz --seed 20261126`, case 835, with 16 KiB mTHP on).
fn settle_after_fork() {
    prefault_stack();
    touch_statics();
    // SAFETY: errno is this thread's; MADV_COLD on a mapped stack page is
    // only a reclaim hint.
    unsafe {
        let e = libc::__errno_location();
        core::ptr::write_volatile(e, core::ptr::read_volatile(e));
        let mut here = 0u8;
        core::ptr::write_volatile(&mut here, 1);
        let page = (&here as *const u8 as usize) & !4095;
        libc::madvise(page as *mut libc::c_void, 4096, libc::MADV_COLD);
        core::ptr::write_volatile(e, 0);
    }
}

/// Write every static of the worker (each keeps its value), so that
/// their pages are faulted (or copied, after a fork) now, not in the
/// middle of a scenario statement (the fault handler's first write of
/// `FAULT_ADDR` would otherwise fault a `.bss` page in the statement
/// whose access faulted).
fn touch_statics() {
    for a in [&FAULT_ADDR, &FAULT_SIG, &SCOPED_AS, &SCOPED_DATA] {
        a.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    for u in &UFFDS {
        u.store(u.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    UFFD_CUR.store(UFFD_CUR.load(Ordering::Relaxed), Ordering::Relaxed);
}

fn install_handlers() {
    // SAFETY: sigaction with a valid handler; signal dispositions.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        // Children of a worker are reaped automatically; their exit is
        // observed as EOF on their channel.
        libc::signal(libc::SIGCHLD, libc::SIG_IGN);
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = fault_handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, core::ptr::null_mut());
        }
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, core::ptr::null_mut());
        // ptlab disables THP for itself (so its own allocations do not move
        // the global THP counters); the scenario must see the machine's policy.
        libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
        pin_to_current_cpu();
    }
}

/// Pin this worker (and, by inheritance, every process it forks) to the CPU
/// it runs on. A freshly faulted page sits in the faulting CPU's LRU-add
/// batch, which holds a reference until drained, and two kernel paths drain
/// only the local CPU's batch:
///
/// * copy-on-write reuse (Linux: mm/memory.c wp_can_reuse_anon_folio() calls
///   lru_add_drain() before checking the reference count): a process that
///   migrated between the fault and the write copies a page the model reuses
///   (tests/scenarios/uffd-14-fork-ebusy.ptl diverged in 6 of 30 runs before
///   this pin; docs/divergences.md H7);
/// * MADV_PAGEOUT / MADV_COLD (mm/madvise.c madvise_pageout() →
///   lru_add_drain(); folios not on the LRU are skipped): pages stay in place
///   at random (docs/divergences.md H9).
unsafe fn pin_to_current_cpu() {
    let cpu = libc::sched_getcpu();
    if cpu < 0 {
        return;
    }
    let mut set: libc::cpu_set_t = core::mem::zeroed();
    libc::CPU_SET(cpu as usize, &mut set);
    libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set);
}

/// Entry point of a freshly forked worker (`parent`: ptlab's pid, read
/// before the fork). Never returns.
pub(crate) fn worker_main(chan: libc::c_int, parent: libc::pid_t) -> ! {
    // SIGKILL when ptlab dies, even in the middle of a long operation.
    crate::lifeline::die_with_parent(parent);
    adopt_channel(chan);
    set_soft_limit(libc::RLIMIT_MEMLOCK as u64, MEMLOCK_DEFAULT);
    // The stack and statics first, while THP is still disabled (ptlab's
    // PR_SET_THP_DISABLE, inherited over fork and kept over exec;
    // install_handlers() clears it): an exec'd worker's stack is new, and
    // faulted under a knob epoch's `always` policy it would be made of
    // large folios, which the copy-on-write after a scenario `fork` then
    // splits (`nr_anon_partially_mapped`, `split_deferred` moved in the
    // fork's step: found in the first measurement of the exec'd worker).
    prefault_stack_at_start();
    touch_statics();
    install_handlers();
    serve()
}

fn serve() -> ! {
    loop {
        let mut req: Req = [0; 8];
        if !read_exact(CHAN_FD, words_bytes_mut(&mut req)) {
            die();
        }
        handle(&req);
    }
}

// ----- operations -----------------------------------------------------------

fn handle(r: &Req) {
    let scoped = matches!(r[0], op::MMAP | op::MPROTECT | op::MREMAP);
    if scoped {
        scoped_limits(true);
    }
    handle_op(r);
    if scoped {
        scoped_limits(false);
    }
}

fn handle_op(r: &Req) {
    let a = &r[1..];
    // SAFETY (all arms): raw system calls with caller-supplied numbers, as a
    // program under test would make them.
    unsafe {
        match r[0] {
            op::MMAP => {
                let p = libc::mmap(
                    a[0] as *mut libc::c_void,
                    a[1] as usize,
                    a[2] as libc::c_int,
                    a[3] as libc::c_int,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    reply(-errno(), 0, 0);
                } else {
                    reply(0, p as u64, 0);
                }
            }
            op::MUNMAP => sys_ret(libc::syscall(libc::SYS_munmap, a[0], a[1])),
            op::MADVISE => sys_ret(libc::syscall(libc::SYS_madvise, a[0], a[1], a[2])),
            op::MPROTECT => sys_ret(libc::syscall(libc::SYS_mprotect, a[0], a[1], a[2])),
            op::MREMAP => sys_ret(libc::syscall(
                libc::SYS_mremap,
                a[0],
                a[1],
                a[2],
                a[3],
                a[4],
            )),
            op::ACCESS => access(a[0], a[1], a[2] != 0, a[3] != 0, a[4]),
            op::READ_TAGS => read_tags(a[0], a[1], if a[2] == 0 { 4096 } else { a[2] }),
            op::READ_TAG_LIST => read_tag_list(a[0], a[1]),
            op::FILL_BYTES => fill_bytes(a[0], a[1], a[2] as u8),
            op::FORK => fork_child(),
            op::EXIT => die(),
            op::UFFD_OPEN => uffd_open(a[0] as usize, a[1] != 0, (a[2] != 0).then_some(a[3])),
            op::UFFD_API => {
                let mut api: [u64; 3] = [a[0], a[1], 0];
                uffd_ioctl(ioctl::UFFDIO_API, api.as_mut_ptr(), Some(1));
            }
            op::UFFD_SELECT => {
                if (a[0] as usize) < UFFD_SLOTS {
                    UFFD_CUR.store(a[0] as usize, Ordering::Relaxed);
                    reply(0, 0, 0);
                } else {
                    reply(-i64::from(libc::EINVAL), 0, 0);
                }
            }
            op::UFFD_REGISTER => {
                let mut reg: [u64; 4] = [a[0], a[1], a[2], 0];
                uffd_ioctl(ioctl::UFFDIO_REGISTER, reg.as_mut_ptr(), None);
            }
            op::UFFD_UNREGISTER => {
                let mut range: [u64; 2] = [a[0], a[1]];
                uffd_ioctl(ioctl::UFFDIO_UNREGISTER, range.as_mut_ptr(), None);
            }
            op::UFFD_COPY => uffd_copy(a[0], a[1], a[2], a[3] != 0, a[4], a[5]),
            op::UFFD_ZEROPAGE => {
                let mut z: [u64; 4] = [a[0], a[1], a[2], FIELD_UNTOUCHED];
                uffd_ioctl(ioctl::UFFDIO_ZEROPAGE, z.as_mut_ptr(), Some(3));
            }
            op::UFFD_MOVE => {
                let mut m: [u64; 5] = [a[0], a[1], a[2], a[3], FIELD_UNTOUCHED];
                uffd_ioctl(ioctl::UFFDIO_MOVE, m.as_mut_ptr(), Some(4));
            }
            op::PING => reply(0, libc::getpid() as u64, 0),
            op::SETRLIMIT => {
                let (res, soft, scoped) = (a[0], a[1], a[2] != 0);
                let slot = match res as u32 {
                    libc::RLIMIT_AS => Some(&SCOPED_AS),
                    libc::RLIMIT_DATA => Some(&SCOPED_DATA),
                    _ => None,
                };
                match (scoped, slot) {
                    // Above the hard limit it could not be applied.
                    (true, Some(_)) if soft != u64::MAX && soft > hard_limit(res) => {
                        reply(-i64::from(libc::EPERM), 0, 0)
                    }
                    (true, Some(s)) => {
                        s.store(soft, Ordering::Relaxed);
                        reply(0, 0, 0);
                    }
                    (true, None) => reply(-i64::from(libc::EINVAL), 0, 0),
                    (false, _) => {
                        if set_soft_limit(res, soft) != 0 {
                            reply(-errno(), 0, 0);
                        } else {
                            reply(0, 0, 0);
                        }
                    }
                }
            }
            op::FILL => {
                let (addr, count) = (a[0], a[1]);
                let mut done = 0u64;
                let mut err = 0i64;
                while done < count {
                    if done % ORPHAN_CHECK_PAGES == ORPHAN_CHECK_PAGES - 1 {
                        die_if_orphaned();
                    }
                    let at = addr.wrapping_add(done.wrapping_mul(2 * 4096));
                    let p = libc::mmap(
                        at as *mut libc::c_void,
                        4096,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                        -1,
                        0,
                    );
                    if p == libc::MAP_FAILED {
                        err = -errno();
                        break;
                    }
                    done += 1;
                }
                reply(err, done, 0);
            }
            op::CAP_DROP => {
                let r = cap_drop(a[0]);
                reply(r, 0, 0);
            }
            // Only the two THP prctls: a scenario cannot reach any other.
            op::PRCTL_THP => {
                let r = if a[0] != 0 {
                    libc::prctl(libc::PR_SET_THP_DISABLE, a[1], a[2], 0, 0)
                } else {
                    libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0)
                };
                if r < 0 {
                    reply(-errno(), 0, 0);
                } else {
                    reply(0, r as u64, 0);
                }
            }
            op::SYSCALL3 => sys_ret(libc::syscall(a[0] as libc::c_long, a[1], a[2], a[3])),
            _ => reply(-i64::from(libc::ENOSYS), 0, 0),
        }
    }
}

fn access(start: u64, len: u64, write: bool, has_tag: bool, tag: u64) {
    let start = start & !4095;
    let Some(end) = start.checked_add(len) else {
        reply(ST_FAULT, start, libc::SIGSEGV as u64);
        return;
    };
    let mut a = start;
    while a < end {
        let r = if write {
            probe_write(a, if has_tag { tag } else { a })
        } else {
            probe_read(a).map(|_| ())
        };
        if r.is_err() {
            reply(
                ST_FAULT,
                FAULT_ADDR.load(Ordering::Relaxed),
                FAULT_SIG.load(Ordering::Relaxed),
            );
            return;
        }
        a = match a.checked_add(4096) {
            Some(n) => n,
            None => break,
        };
        if ((a - start) / 4096).is_multiple_of(ORPHAN_CHECK_PAGES) {
            die_if_orphaned();
        }
    }
    reply(0, 0, 0);
}

/// memset(addr, byte, len), page by page in address order: each page's
/// first store is a byte store at the range's first byte in it (the write
/// fault a program's memset takes), the aligned words inside the range are
/// stored whole, the edges byte by byte. A fault stops it and is answered
/// like an access's.
fn fill_bytes(addr: u64, len: u64, byte: u8) {
    let Some(end) = addr.checked_add(len) else {
        reply(ST_FAULT, addr, libc::SIGSEGV as u64);
        return;
    };
    let word = u64::from_ne_bytes([byte; 8]);
    let mut at = addr;
    let mut pages = 0u64;
    while at < end {
        let page_end = (at & !4095).saturating_add(4096).min(end);
        let mut ok = probe_write_byte(at, byte).is_ok();
        let mut a = at + 1;
        while ok && a < page_end {
            ok = if a.is_multiple_of(8) && a + 8 <= page_end {
                let r = probe_write(a, word);
                a += 8;
                r.is_ok()
            } else {
                let r = probe_write_byte(a, byte);
                a += 1;
                r.is_ok()
            };
        }
        if !ok {
            reply(
                ST_FAULT,
                FAULT_ADDR.load(Ordering::Relaxed),
                FAULT_SIG.load(Ordering::Relaxed),
            );
            return;
        }
        at = page_end;
        pages += 1;
        if pages.is_multiple_of(ORPHAN_CHECK_PAGES) {
            die_if_orphaned();
        }
    }
    reply(0, 0, 0);
}

/// Loads the word at `start + k * stride` for `k < n` (offset 0 of `n`
/// pages with the page stride); the caller only asks for pages pagemap
/// showed present, so no load faults a page in.
fn read_tags(start: u64, npages: u64, stride: u64) {
    let hdr: Resp = [0, 0, 0, npages.saturating_add(1)];
    if !write_all(CHAN_FD, words_bytes(&hdr)) {
        die();
    }
    let mut buf = [0u64; 512];
    let mut faults = 0u64;
    let mut done = 0u64;
    while done < npages {
        let n = (npages - done).min(buf.len() as u64) as usize;
        for (i, slot) in buf.iter_mut().enumerate().take(n) {
            let addr = start.wrapping_add((done + i as u64) * stride);
            *slot = match probe_read(addr) {
                Ok(v) => v,
                Err(()) => {
                    faults += 1;
                    0
                }
            };
        }
        if !write_all(CHAN_FD, words_bytes(&buf[..n])) {
            die();
        }
        done += n as u64;
        die_if_orphaned();
    }
    if !write_all(CHAN_FD, words_bytes(&[faults])) {
        die();
    }
}

/// `READ_TAG_LIST`: the tags of `nruns` runs whose `(start, pages)`
/// pairs follow the request on the channel (`npages` pages in all, as
/// ptlab counted them), answered as one stream: a header, then per run
/// its tags, its fault count and a bitmap of `ceil(pages / 64)` words
/// (bit `i % 64` of word `i / 64`: page `i` of the run loaded and its
/// bytes 8..4096 are not all zero), written through one buffer. The pairs
/// are read a few at a time (the worker allocates nothing); ptlab has
/// written them all before it reads the answer, so neither side waits
/// for the other.
fn read_tag_list(nruns: u64, npages: u64) {
    use crate::wire::TAG_LIST_MAX;
    let nruns = nruns.min(TAG_LIST_MAX as u64);
    let hdr: Resp = [0, 0, 0, npages.saturating_add(nruns)];
    let mut out = [0u64; 512];
    let mut used = 0usize;
    let push = |w: u64, out: &mut [u64; 512], used: &mut usize| {
        out[*used] = w;
        *used += 1;
        if *used == out.len() {
            if !write_all(CHAN_FD, words_bytes(&out[..])) {
                die();
            }
            *used = 0;
        }
    };
    if !write_all(CHAN_FD, words_bytes(&hdr)) {
        die();
    }
    let mut pairs = [0u64; 128];
    let mut left = nruns;
    let mut since_check = 0u64;
    while left > 0 {
        let k = left.min(pairs.len() as u64 / 2) as usize;
        if !read_exact(CHAN_FD, words_bytes_mut(&mut pairs[..2 * k])) {
            die();
        }
        for r in 0..k {
            let (start, n) = (pairs[2 * r], pairs[2 * r + 1]);
            let mut faults = 0u64;
            for i in 0..n {
                let v = match probe_read(start.wrapping_add(i * 4096)) {
                    Ok(v) => v,
                    Err(()) => {
                        faults += 1;
                        0
                    }
                };
                push(v, &mut out, &mut used);
            }
            push(faults, &mut out, &mut used);
            // The rest of each page: a second pass, so that nothing is
            // stored per page (a run may be 65,536 pages).
            let mut bits = 0u64;
            for i in 0..n {
                if rest_nonzero(start.wrapping_add(i * 4096)) {
                    bits |= 1 << (i % 64);
                }
                if i % 64 == 63 || i + 1 == n {
                    push(bits, &mut out, &mut used);
                    bits = 0;
                }
            }
            since_check += n + 1;
            if since_check >= ORPHAN_CHECK_PAGES {
                since_check = 0;
                die_if_orphaned();
            }
        }
        left -= k as u64;
    }
    if used > 0 && !write_all(CHAN_FD, words_bytes(&out[..used])) {
        die();
    }
}

/// Whether the page at `page` loads and any of its bytes 8..4096 is not
/// zero. The first word goes through the read probe (a word that cannot
/// be loaded counts as not known, false); once it has loaded, the page is
/// mapped and readable, and since the worker is single-threaded and
/// nothing here unmaps or protects it, the other 511 words are plain
/// loads of the same page (protection is per page): one probe call per
/// page instead of 512, and a loop the compiler can widen.
fn rest_nonzero(page: u64) -> bool {
    if probe_read(page).is_err() {
        return false;
    }
    // SAFETY: the probe above loaded this page's first word, so the whole
    // 4 KiB page is mapped readable (page-aligned: the caller passes page
    // starts), and no other thread can change that before the loads.
    let words = unsafe { core::slice::from_raw_parts(page as *const u64, 512) };
    words[1..].iter().fold(0u64, |a, &w| a | w) != 0
}

fn fork_child() {
    let mut sv = [0 as libc::c_int; 2];
    // SAFETY: socketpair/fork/sendmsg with valid buffers.
    unsafe {
        if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) < 0 {
            reply(-errno(), 0, 0);
            return;
        }
        let pid = libc::fork();
        if pid < 0 {
            let e = errno();
            libc::close(sv[0]);
            libc::close(sv[1]);
            reply(-e, 0, 0);
            return;
        }
        if pid == 0 {
            // The new scenario process: its own channel. It keeps the
            // parent's uffd descriptors (not its registrations: those need
            // EVENT_FORK), so it can name the parent's handle.
            adopt_child_channel(sv[1]);
            settle_after_fork();
            serve();
        }
        libc::close(sv[1]);
        settle_after_fork();
        let r: Resp = [0, pid as u64, 0, 0];
        let ok = send_with_fd(words_bytes(&r), sv[0]);
        libc::close(sv[0]);
        if !ok {
            die();
        }
    }
}

fn send_with_fd(data: &[u8], fd: libc::c_int) -> bool {
    // SAFETY: msghdr built over valid buffers; CMSG macros stay inside cbuf.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let mut cbuf = [0u64; 8];
        let mut msg: libc::msghdr = core::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(core::mem::size_of::<libc::c_int>() as u32) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(core::mem::size_of::<libc::c_int>() as u32) as usize;
        core::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), fd);
        let n = libc::sendmsg(CHAN_FD, &msg, 0);
        if n as usize != data.len() {
            return false;
        }
        true
    }
}

/// userfaultfd(2) into `slot` (with `flags`, else O_CLOEXEC | O_NONBLOCK),
/// then (with `api`) UFFDIO_API.
fn uffd_open(slot: usize, api: bool, flags: Option<u64>) {
    if slot >= UFFD_SLOTS {
        reply(-i64::from(libc::EINVAL), 0, 0);
        return;
    }
    if UFFDS[slot].load(Ordering::Relaxed) >= 0 {
        reply(-i64::from(libc::EBUSY), 0, 0);
        return;
    }
    // SAFETY: userfaultfd(2) and UFFDIO_API on our own buffer.
    unsafe {
        let mut fd;
        if let Some(raw) = flags {
            // The scenario's flags, as they are (an int).
            fd = libc::syscall(libc::SYS_userfaultfd, raw as libc::c_int) as libc::c_int;
        } else {
            let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
            fd = libc::syscall(libc::SYS_userfaultfd, flags) as libc::c_int;
            if fd < 0 {
                // Unprivileged: user-mode faults only.
                fd = libc::syscall(libc::SYS_userfaultfd, flags | 1) as libc::c_int;
            }
        }
        if fd < 0 {
            reply(-errno(), 0, 0);
            return;
        }
        // UFFD_FEATURE_SIGBUS: a missing fault raises SIGBUS instead of
        // blocking the worker forever (there is no fault-handling thread).
        let mut req: [u64; 3] = [0xAA, 1 << 7, 0];
        if api && libc::ioctl(fd, ioctl::UFFDIO_API, req.as_mut_ptr()) < 0 {
            let e = errno();
            libc::close(fd);
            reply(-e, 0, 0);
            return;
        }
        UFFDS[slot].store(fd, Ordering::Relaxed);
        reply(0, 0, 0);
    }
}

/// Issue a uffd ioctl on `arg`; `out` is the index of the s64 result word
/// (bytes copied/mapped/moved) to return on success.
fn uffd_ioctl(req: u64, arg: *mut u64, out: Option<usize>) {
    let (r, field) = uffd_ioctl_raw(req, arg, out);
    reply(r, field, 0);
}

/// Issue a userfaultfd ioctl on the selected descriptor: (0 or −errno, the
/// output field, [`FIELD_UNTOUCHED`] if the kernel did not write it).
fn uffd_ioctl_raw(req: u64, arg: *mut u64, out: Option<usize>) -> (i64, u64) {
    let fd = UFFDS[UFFD_CUR.load(Ordering::Relaxed)].load(Ordering::Relaxed);
    if fd < 0 {
        return (-i64::from(libc::EBADF), FIELD_UNTOUCHED);
    }
    // SAFETY: arg points to a buffer of the ioctl's size.
    unsafe {
        let r = libc::ioctl(fd, req as _, arg);
        let field = out.map_or(0, |i| *arg.add(i));
        if r < 0 {
            (-errno(), field)
        } else {
            (0, field)
        }
    }
}

fn uffd_copy(dst: u64, src: u64, len: u64, has_tag: bool, tag: u64, mode: u64) {
    if !has_tag {
        let mut c: [u64; 5] = [dst, src, len, mode, FIELD_UNTOUCHED];
        uffd_ioctl(ioctl::UFFDIO_COPY, c.as_mut_ptr(), Some(4));
        return;
    }
    // A source buffer holding the tag in every page, fenced by PROT_NONE
    // pages so it cannot merge with a scenario VMA, and excluded from THP
    // so it does not move the THP counters.
    let pages = len.div_ceil(4096);
    let total = (pages + 2) * 4096;
    // SAFETY: a private buffer of our own.
    unsafe {
        let p = libc::mmap(
            core::ptr::null_mut(),
            total as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            reply(-errno(), FIELD_UNTOUCHED, 0);
            return;
        }
        let buf = p as u64 + 4096;
        libc::mprotect(
            buf as *mut libc::c_void,
            (pages * 4096) as usize,
            libc::PROT_READ | libc::PROT_WRITE,
        );
        libc::madvise(
            buf as *mut libc::c_void,
            (pages * 4096) as usize,
            libc::MADV_NOHUGEPAGE,
        );
        for i in 0..pages {
            let _ = probe_write(buf + i * 4096, tag);
        }
        let mut c: [u64; 5] = [dst, buf, len, mode, FIELD_UNTOUCHED];
        let (r, field) = uffd_ioctl_raw(ioctl::UFFDIO_COPY, c.as_mut_ptr(), Some(4));
        // Unmap before replying: the observer reads the maps as soon as it
        // has the reply, and must not see this buffer (it may sit inside a
        // range the scenario unmapped earlier).
        libc::munmap(p, total as usize);
        reply(r, field, 0);
    }
}
