//! The live worker's wire protocol itself: the request and answer
//! layouts, op codes and the constants both ends use. No dependency but
//! `core`: this file is compiled into ptlab-live and into the exec'd
//! worker (crates/ptlab-worker), which share it through `#[path]`.

/// Request: `[op, a0..a6]`, eight little-endian u64s.
pub(crate) type Req = [u64; 8];
/// Response header: `[status, val, aux, n_extra]`, then `n_extra` u64s.
/// `status` >= 0 is success, `-errno` a failed call, [`ST_FAULT`] a faulting
/// access (`val` = address, `aux` = signal number).
pub(crate) type Resp = [u64; 4];

pub(crate) const ST_FAULT: i64 = -100_000;

/// What the worker puts in the output field of UFFDIO_COPY / ZEROPAGE /
/// MOVE before the ioctl: the kernel writes the field only once the
/// operation ran (bytes done or `-errno`), so finding this value there
/// afterwards means the kernel left it untouched. No byte count or errno
/// is this large.
pub(crate) const FIELD_UNTOUCHED: u64 = 0x8000_0000_0000_0000;

/// Most runs one `READ_TAG_LIST` request names: 16 KiB of pairs, far below
/// a socket's buffer, so writing a request never waits for the worker.
pub(crate) const TAG_LIST_MAX: usize = 1024;

pub(crate) mod op {
    pub const MMAP: u64 = 1; // addr len prot flags
    pub const MUNMAP: u64 = 2; // addr len
    pub const MADVISE: u64 = 3; // addr len advice
    pub const MPROTECT: u64 = 4; // addr len prot
    pub const MREMAP: u64 = 5; // addr old new flags new_addr
    pub const ACCESS: u64 = 6; // start len write has_tag tag
    pub const READ_TAGS: u64 = 7; // start n [stride] -> n words (stride 0: a page) + fault count
    pub const FORK: u64 = 8; // -> val = child pid, fd via SCM_RIGHTS
    pub const EXIT: u64 = 9; // no answer: the channel reaches EOF
    pub const UFFD_OPEN: u64 = 10; // slot api has_flags flags
    pub const UFFD_REGISTER: u64 = 11; // addr len mode
    pub const UFFD_UNREGISTER: u64 = 12; // addr len
    pub const UFFD_COPY: u64 = 13; // dst src len has_tag tag mode
    pub const UFFD_ZEROPAGE: u64 = 14; // dst len mode
    pub const UFFD_MOVE: u64 = 15; // dst src len mode
    pub const PING: u64 = 16; // -> val = getpid()
    pub const SYSCALL3: u64 = 17; // nr a b c -> syscall(nr, a, b, c)
    pub const UFFD_API: u64 = 18; // api features -> val = features reported
    pub const UFFD_SELECT: u64 = 19; // slot: the uffd the next ioctls use
    pub const PRCTL_THP: u64 = 20; // set(1)/get(0) disable flags -> val
    /// resource soft scoped: scoped = 1 applies `soft` only around the
    /// scenario's MMAP/MPROTECT/MREMAP calls (RLIMIT_AS/RLIMIT_DATA, whose
    /// limits include the harness's own mappings), 0 sets it now.
    pub const SETRLIMIT: u64 = 21;
    pub const CAP_DROP: u64 = 22; // capability number: drop from the effective set
    pub const FILL: u64 = 23; // addr count: count one-page PROT_READ VMAs a page apart -> val = done
    /// nruns npages, then `nruns` pairs (start, pages) as 2 * nruns more
    /// words (at most [`super::TAG_LIST_MAX`] runs) -> header with `n_extra` =
    /// npages + nruns, then per run its tags and its fault count.
    pub const READ_TAG_LIST: u64 = 24;
    pub const FILL_BYTES: u64 = 25; // addr len byte: memset, page by page; a fault stops it
}

/// `__NR_mseal` (the same number on x86-64 and arm64).
pub(crate) const SYS_MSEAL: u64 = 462;
/// `CAP_IPC_LOCK` (include/uapi/linux/capability.h).
pub(crate) const CAP_IPC_LOCK: u64 = 14;
/// `MLOCK_ONFAULT` (include/uapi/asm-generic/mman-common.h).
pub(crate) const MLOCK_ONFAULT: u64 = 1;

/// The userfaultfd ioctl numbers (include/uapi/linux/userfaultfd.h, x86-64
/// `_IOWR(0xAA, nr, struct)`), used by the worker and by `export-c`.
pub(crate) mod ioctl {
    pub const UFFDIO_API: u64 = 0xC018_AA3F;
    pub const UFFDIO_REGISTER: u64 = 0xC020_AA00;
    pub const UFFDIO_UNREGISTER: u64 = 0x8010_AA01;
    pub const UFFDIO_COPY: u64 = 0xC028_AA03;
    pub const UFFDIO_ZEROPAGE: u64 = 0xC020_AA04;
    pub const UFFDIO_MOVE: u64 = 0xC028_AA05;
}
