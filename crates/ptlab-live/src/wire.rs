//! The live worker's wire protocol: fixed-size requests and answers (the
//! worker runs after `fork()` or in a small exec'd program and allocates
//! nothing, so no serde there; the layouts and op codes are in
//! `wire/proto.rs`, which the worker program shares), and [`encode`], the
//! one place a [`Call`] becomes a request.

use ptlab_model::uffd::UFFD_FEATURE_SIGBUS;
use ptlab_model::{Call, PrctlThp, Resource};

mod proto;
pub(crate) use proto::*;

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
