//! The live worker's wire protocol: fixed-size requests and answers (the
//! worker runs after `fork()` and allocates nothing, so no serde there),
//! and [`encode`], the one place a [`Call`] becomes a request.

use ptlab_model::uffd::UFFD_FEATURE_SIGBUS;
use ptlab_model::{Call, PrctlThp, Resource};

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

/// What [`encode`] needs besides the call: what the backend resolved
/// from its own state.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Resolved {
    /// The worker's uffd slot of a `UffdCreate`'s new handle.
    pub slot: u64,
    /// How many VMAs a `FillVmas` maps (the live limit's headroom, turned
    /// into a count).
    pub count: u64,
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

/// The worker request that makes `call` in the calling process; `None` for
/// the machine-wide settings, which the backend makes itself (sysfs,
/// swapon) or ignores. A uffd ioctl goes to the slot the backend selected
/// first (`op::UFFD_SELECT`).
pub(crate) fn encode(call: &Call, at: &Resolved) -> Option<Req> {
    let req = |op: u64, args: &[u64]| {
        let mut r: Req = [0; 8];
        r[0] = op;
        r[1..=args.len()].copy_from_slice(args);
        r
    };
    Some(match call {
        Call::Mmap {
            addr,
            len,
            prot,
            flags,
        } => req(
            op::MMAP,
            &[*addr, *len, u64::from(prot.bits()), u64::from(flags.bits())],
        ),
        Call::Munmap { addr, len } => req(op::MUNMAP, &[*addr, *len]),
        Call::Madvise { addr, len, advice } => {
            req(op::MADVISE, &[*addr, *len, advice.value() as u64])
        }
        Call::Mremap {
            addr,
            old_len,
            new_len,
            flags,
            new_addr,
        } => req(
            op::MREMAP,
            &[*addr, *old_len, *new_len, flags.bits(), *new_addr],
        ),
        Call::Mprotect { addr, len, prot } => {
            req(op::MPROTECT, &[*addr, *len, u64::from(prot.bits())])
        }
        Call::Mlock {
            addr,
            len,
            onfault: false,
            flags: 0,
        } => req(op::SYSCALL3, &[libc::SYS_mlock as u64, *addr, *len]),
        Call::Mlock {
            addr,
            len,
            onfault,
            flags,
        } => req(
            op::SYSCALL3,
            &[
                libc::SYS_mlock2 as u64,
                *addr,
                *len,
                flags | if *onfault { MLOCK_ONFAULT } else { 0 },
            ],
        ),
        Call::Munlock { addr, len } => req(op::SYSCALL3, &[libc::SYS_munlock as u64, *addr, *len]),
        Call::Mseal { addr, len, flags } => req(op::SYSCALL3, &[SYS_MSEAL, *addr, *len, *flags]),
        Call::Access {
            start,
            len,
            write,
            tag,
        } => req(
            op::ACCESS,
            &[
                *start,
                *len,
                u64::from(*write),
                u64::from(tag.is_some()),
                tag.unwrap_or(0),
            ],
        ),
        Call::FillBytes { addr, len, byte } => {
            req(op::FILL_BYTES, &[*addr, *len, u64::from(*byte)])
        }
        Call::Fork { .. } => req(op::FORK, &[]),
        Call::Exit => req(op::EXIT, &[]),
        Call::PrctlThp(PrctlThp::Set { disable, flags }) => {
            req(op::PRCTL_THP, &[1, *disable, *flags])
        }
        Call::PrctlThp(PrctlThp::Get) => req(op::PRCTL_THP, &[0]),
        Call::Setrlimit { resource, bytes } => {
            let res = u64::from(resource.number());
            match resource {
                // The harness locks nothing: the scenario's limit as is.
                Resource::Memlock => req(op::SETRLIMIT, &[res, *bytes, 0]),
                // The harness maps memory too: the backend applies these
                // around each call they can refuse (scoped); this clears
                // the worker's scoped copy until then.
                Resource::As | Resource::Data => req(op::SETRLIMIT, &[res, u64::MAX, 1]),
            }
        }
        Call::DropCapIpcLock => req(op::CAP_DROP, &[CAP_IPC_LOCK]),
        Call::FillVmas { addr, .. } => req(op::FILL, &[*addr, at.count]),
        Call::UffdCreate { api, flags, .. } => req(
            op::UFFD_OPEN,
            &[
                at.slot,
                u64::from(*api),
                u64::from(flags.is_some()),
                flags.unwrap_or(0),
            ],
        ),
        // UFFD_FEATURE_SIGBUS always: nothing would wake a blocked fault.
        Call::UffdApi { api, features, .. } => {
            req(op::UFFD_API, &[*api, features | UFFD_FEATURE_SIGBUS])
        }
        Call::UffdRegister {
            addr, len, mode, ..
        } => req(op::UFFD_REGISTER, &[*addr, *len, mode.bits()]),
        Call::UffdUnregister { addr, len, .. } => req(op::UFFD_UNREGISTER, &[*addr, *len]),
        Call::UffdCopy {
            dst,
            src,
            len,
            tag,
            mode,
            ..
        } => req(
            op::UFFD_COPY,
            &[
                *dst,
                *src,
                *len,
                u64::from(tag.is_some()),
                tag.unwrap_or(0),
                mode.bits(),
            ],
        ),
        Call::UffdZeropage { dst, len, mode, .. } => {
            req(op::UFFD_ZEROPAGE, &[*dst, *len, mode.bits()])
        }
        Call::UffdMove {
            dst,
            src,
            len,
            mode,
            ..
        } => req(op::UFFD_MOVE, &[*dst, *src, *len, mode.bits()]),
        Call::SetThp { .. }
        | Call::SetUseZeroPage { .. }
        | Call::SetSwap { .. }
        | Call::SetBefore { .. }
        | Call::SetAfter { .. }
        | Call::SetMemory { .. }
        | Call::SetNodes { .. }
        | Call::NumaRunOn { .. }
        | Call::NumaScan { .. } => return None,
    })
}
