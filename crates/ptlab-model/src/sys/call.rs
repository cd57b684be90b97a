//! [`Call`]: everything a scenario process can ask of the machine, as one
//! value with its arguments evaluated, and [`Model::call`], which runs it.
//!
//! The same value is what the interpreter produces, what every backend
//! executes (`ptlab_scenario::Backend::call`), what the live worker is sent
//! (encoded to its fixed-size request) and what the fuzzer generates and
//! prints back to `.ptl`. Adding an operation is one variant here; the
//! compiler then lists every `match` that must handle it.
//!
//! Every call returns a `u64` the way the kernel's system call does: the
//! address of `mmap`/`mremap`, the bytes of a uffd COPY/ZEROPAGE/MOVE, the
//! features of UFFDIO_API, what a prctl returns, how many VMAs `fill`
//! mapped, the child's pid for `fork` (backends answer 0: children are
//! named, not numbered), and 0 for the rest.
//!
//! Userfaultfd handles are named. The model keeps the descriptor table
//! per process ([`UffdFds`]), as the kernel keeps `files_struct`: `fork`
//! copies it (the child holds the parent's descriptors, not its
//! registrations), `exit` closes it, and a context goes away with its last
//! descriptor. A uffd ioctl names the handle it uses; a handle the process
//! holds no descriptor for is EBADF.

use crate::core::resource::Resource;
use crate::model::Model;
pub use crate::sys::uffd::ctx::UffdFds;
use crate::sys::uffd::ctx::{CopySource, UffdError, UFFD_API, UFFD_FEATURE_SIGBUS};
use crate::types::errno::Errno;
use crate::types::uapi::{
    Advice, MapFlags, MremapFlags, PrctlThp, Prot, ThpKnob, ThpMode, UffdCopyMode, UffdMoveMode,
    UffdRegisterMode, UffdZeropageMode,
};
use crate::types::{AccessFault, Pid};
use serde::{Deserialize, Serialize};

/// One operation of one process, arguments evaluated (addresses and
/// lengths exactly as a program passes them, unvalidated).
///
/// The machine-wide settings (`SetThp`, `SetUseZeroPage`, `SetSwap`,
/// `SetBefore`, `SetAfter`, `SetMemory`) ignore the process they are issued in
/// ([`Call::acts_on_process`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Call {
    /// `mmap(addr, len, prot, flags, -1, 0)`; returns the address.
    Mmap {
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    },
    /// `munmap(addr, len)`.
    Munmap { addr: u64, len: u64 },
    /// `madvise(addr, len, advice)`.
    Madvise { addr: u64, len: u64, advice: Advice },
    /// `mremap(addr, old_len, new_len, flags, new_addr)`; returns the new
    /// address. `new_addr` is used only with MREMAP_FIXED.
    Mremap {
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
        new_addr: u64,
    },
    /// `mprotect(addr, len, prot)`.
    Mprotect { addr: u64, len: u64, prot: Prot },
    /// `mlock(addr, len)`, or `mlock2(addr, len, MLOCK_ONFAULT | flags)`
    /// when `onfault` or `flags` (further mlock2 flag bits, passed as is:
    /// the kernel takes an `int`, so bits above 31 do not count).
    Mlock {
        addr: u64,
        len: u64,
        onfault: bool,
        #[serde(default)]
        flags: u64,
    },
    /// `munlock(addr, len)`.
    Munlock { addr: u64, len: u64 },
    /// `mseal(addr, len, flags)`.
    Mseal {
        addr: u64,
        len: u64,
        #[serde(default)]
        flags: u64,
    },
    /// Touch every page of `[start & !(PAGE_SIZE - 1), that + len)` in
    /// address order, stopping at the first fault: a load, or a store of
    /// `tag` (`None`: each page's own address) into the first 8 bytes.
    /// Returns 0.
    Access {
        start: u64,
        len: u64,
        write: bool,
        tag: Option<u64>,
    },
    /// memset(addr, byte, len): every byte of `[addr, addr + len)`, page
    /// by page in address order, each page written (faulted in as a write)
    /// first; stops at the first fault. Returns 0.
    FillBytes { addr: u64, len: u64, byte: u8 },
    /// `fork()`; the child is called `child` (a backend's name for it).
    Fork { child: String },
    /// The process exits.
    Exit,
    /// `prctl(PR_SET_THP_DISABLE, ...)` / `prctl(PR_GET_THP_DISABLE)`;
    /// returns what the prctl returned.
    PrctlThp(PrctlThp),
    /// setrlimit(2) of `resource`'s soft limit, in bytes
    /// ([`crate::RLIM_INFINITY`] for none).
    Setrlimit { resource: Resource, bytes: u64 },
    /// Drop CAP_IPC_LOCK from the effective set (capset(2)).
    DropCapIpcLock,
    /// Map one-page read-only VMAs at `addr`, `addr + 8K`, ... until the
    /// process is `headroom` VMAs below `vm.max_map_count`; returns how
    /// many (a test device made of ordinary mmap calls).
    FillVmas { addr: u64, headroom: u64 },
    /// userfaultfd(2) as handle `handle`, then (with `api`) UFFDIO_API with
    /// UFFD_FEATURE_SIGBUS. A handle name in use is EBUSY. `flags` is
    /// userfaultfd(2)'s argument (an `int`); `None`: O_CLOEXEC | O_NONBLOCK.
    UffdCreate {
        handle: String,
        api: bool,
        #[serde(default)]
        flags: Option<u64>,
    },
    /// UFFDIO_API on `handle`; returns the features reported.
    /// UFFD_FEATURE_SIGBUS is always requested in addition (no handler
    /// thread resolves faults).
    UffdApi {
        handle: String,
        api: u64,
        features: u64,
    },
    /// UFFDIO_REGISTER on `handle`.
    UffdRegister {
        handle: String,
        addr: u64,
        len: u64,
        mode: UffdRegisterMode,
    },
    /// UFFDIO_UNREGISTER on `handle`.
    UffdUnregister { handle: String, addr: u64, len: u64 },
    /// UFFDIO_COPY on `handle` from `src` (or, with `tag`, from a buffer
    /// holding that tag in every page) with `mode` (undefined bits passed
    /// through); returns the bytes copied.
    UffdCopy {
        handle: String,
        dst: u64,
        src: u64,
        len: u64,
        tag: Option<u64>,
        #[serde(default)]
        mode: UffdCopyMode,
    },
    /// UFFDIO_ZEROPAGE on `handle` with `mode` (undefined bits passed
    /// through); returns the bytes mapped.
    UffdZeropage {
        handle: String,
        dst: u64,
        len: u64,
        #[serde(default)]
        mode: UffdZeropageMode,
    },
    /// UFFDIO_MOVE on `handle`; returns the bytes moved.
    UffdMove {
        handle: String,
        dst: u64,
        src: u64,
        len: u64,
        mode: UffdMoveMode,
    },
    /// Machine-wide: write a THP `enabled` knob.
    SetThp { knob: ThpKnob, mode: ThpMode },
    /// Machine-wide: write `transparent_hugepage/use_zero_page`.
    SetUseZeroPage { on: bool },
    /// Machine-wide: enable a swap device of `bytes` (a swap file, or a
    /// block device), or disable swap (0).
    SetSwap {
        bytes: u64,
        #[serde(default)]
        kind: crate::core::swapfile::SwapKind,
    },
    /// Machine-wide: which proposed (post-6.18) changes run. A backend that
    /// runs one fixed kernel accepts and ignores it.
    SetAfter { set: crate::mm::batch::After },
    /// Machine-wide: which seed changes run their previous algorithm. A
    /// backend that runs one fixed kernel accepts and ignores it.
    SetBefore { set: crate::mm::batch::Before },
    /// Machine-wide: the modelled machine's physical memory
    /// (`machine memory SIZE`). A backend that runs on a real machine
    /// accepts and ignores it.
    SetMemory { bytes: u64 },
    /// Machine-wide: the modelled machine's NUMA nodes (`machine nodes N`).
    /// A backend on a real machine accepts only the nodes it has.
    SetNodes { nodes: u32 },
    /// The process moves to a CPU of `node` (`numa run-on NODE`:
    /// sched_setaffinity() to that node's CPUs); its faults allocate there.
    NumaRunOn { node: u32 },
    /// One automatic NUMA balancing scan pass of the process over
    /// `[addr, addr + len)` (`numa scan ADDR LEN`: task_numa_work() →
    /// change_prot_numa()); returns the PTEs it made NUMA-hinting.
    NumaScan { addr: u64, len: u64 },
}

impl Call {
    /// Short name for messages (`mmap`, `uffd copy`, `write`, `thp`).
    pub fn name(&self) -> &'static str {
        match self {
            Call::Mmap { .. } => "mmap",
            Call::Munmap { .. } => "munmap",
            Call::Madvise { .. } => "madvise",
            Call::Mremap { .. } => "mremap",
            Call::Mprotect { .. } => "mprotect",
            Call::Mlock { .. } => "mlock",
            Call::Munlock { .. } => "munlock",
            Call::Mseal { .. } => "mseal",
            Call::Access { write: false, .. } => "read",
            Call::Access { write: true, .. } => "write",
            Call::FillBytes { .. } => "write",
            Call::Fork { .. } => "fork",
            Call::Exit => "exit",
            Call::PrctlThp(_) => "prctl",
            Call::Setrlimit { .. } => "setrlimit",
            Call::DropCapIpcLock => "capability drop",
            Call::FillVmas { .. } => "fill",
            Call::UffdCreate { api: true, .. } => "uffd open",
            Call::UffdCreate { api: false, .. } => "uffd create",
            Call::UffdApi { .. } => "uffd api",
            Call::UffdRegister { .. } => "uffd register",
            Call::UffdUnregister { .. } => "uffd unregister",
            Call::UffdCopy { .. } => "uffd copy",
            Call::UffdZeropage { .. } => "uffd zeropage",
            Call::UffdMove { .. } => "uffd move",
            Call::SetThp { .. } => "thp",
            Call::SetUseZeroPage { .. } => "thp use_zero_page",
            Call::SetSwap { .. } => "swap",
            Call::SetBefore { .. } => "before",
            Call::SetAfter { .. } => "after",
            Call::SetMemory { .. } => "machine memory",
            Call::SetNodes { .. } => "machine nodes",
            Call::NumaRunOn { .. } => "numa run-on",
            Call::NumaScan { .. } => "numa scan",
        }
    }

    /// Whether the call acts in its process (false for the machine-wide
    /// settings, which a backend runs whatever process issues them).
    pub fn acts_on_process(&self) -> bool {
        !matches!(
            self,
            Call::SetThp { .. }
                | Call::SetUseZeroPage { .. }
                | Call::SetSwap { .. }
                | Call::SetBefore { .. }
                | Call::SetAfter { .. }
                | Call::SetMemory { .. }
                | Call::SetNodes { .. }
        )
    }
}

/// Why a [`Call`] did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The system call failed with this errno.
    Errno(Errno),
    /// The system call failed with `errno` and still reported `result`
    /// through its argument struct (the `copy`/`zeropage`/`move` field of
    /// the uffd ioctls: bytes done, or `-errno`). A uffd ioctl that failed
    /// before writing the field is a plain [`CallError::Errno`].
    ErrnoWithResult { errno: Errno, result: i64 },
    /// The access raised SIGSEGV at `addr`.
    Segv { addr: u64 },
    /// The access would fault to userfaultfd at (page-aligned) `addr`.
    Uffd { addr: u64 },
    /// The model ran out of physical memory (VM_FAULT_OOM) at `addr`.
    Oom { addr: u64 },
    /// No such process.
    NoProcess,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Errno(e) => write!(f, "{e}"),
            CallError::ErrnoWithResult { errno, result } => write!(f, "{errno} (result {result})"),
            CallError::Segv { addr } => AccessFault::Segv { addr: *addr }.fmt(f),
            CallError::Uffd { addr } => AccessFault::Uffd { addr: *addr }.fmt(f),
            CallError::Oom { addr } => AccessFault::Oom { addr: *addr }.fmt(f),
            CallError::NoProcess => AccessFault::NoProcess.fmt(f),
        }
    }
}

impl std::error::Error for CallError {}

impl From<Errno> for CallError {
    fn from(e: Errno) -> Self {
        CallError::Errno(e)
    }
}

impl From<AccessFault> for CallError {
    fn from(f: AccessFault) -> Self {
        match f {
            AccessFault::Segv { addr } => CallError::Segv { addr },
            AccessFault::Uffd { addr } => CallError::Uffd { addr },
            AccessFault::Oom { addr } => CallError::Oom { addr },
            AccessFault::NoProcess => CallError::NoProcess,
        }
    }
}

impl From<UffdError> for CallError {
    /// A failed COPY/ZEROPAGE/MOVE: the errno with the struct's output
    /// field, or the errno alone when the kernel left the field untouched
    /// (it pre-sets nothing: fs/userfaultfd.c userfaultfd_copy() and
    /// friends put_user() the field only after mfill_atomic_*() /
    /// move_pages() ran, so a validation error or ESRCH leaves whatever
    /// the caller had there).
    fn from(e: UffdError) -> Self {
        match e.field {
            Some(result) => CallError::ErrnoWithResult {
                errno: e.errno,
                result,
            },
            None => CallError::Errno(e.errno),
        }
    }
}

impl Model {
    /// Run `call` in process `pid`. See the module docs for the return
    /// value; machine-wide settings ignore `pid`.
    pub fn call(&mut self, pid: Pid, call: &Call) -> Result<u64, CallError> {
        // The calling process runs now: its node is numa_node_id().
        self.enter(pid);
        let unit = |r: Result<(), Errno>| r.map(|()| 0).map_err(CallError::Errno);
        match call {
            Call::Mmap {
                addr,
                len,
                prot,
                flags,
            } => Ok(self.mmap(pid, *addr, *len, *prot, *flags)?),
            Call::Munmap { addr, len } => unit(self.munmap(pid, *addr, *len)),
            Call::Madvise { addr, len, advice } => unit(self.madvise(pid, *addr, *len, *advice)),
            Call::Mremap {
                addr,
                old_len,
                new_len,
                flags,
                new_addr,
            } => Ok(self.mremap(pid, *addr, *old_len, *new_len, *flags, *new_addr)?),
            Call::Mprotect { addr, len, prot } => unit(self.mprotect(pid, *addr, *len, *prot)),
            Call::Mlock {
                addr,
                len,
                onfault: false,
                flags: 0,
            } => unit(self.mlock(pid, *addr, *len, false)),
            // Linux: mm/mlock.c SYSCALL_DEFINE3(mlock2, ..., int, flags).
            Call::Mlock {
                addr,
                len,
                onfault,
                flags,
            } => {
                let flags = u64::from(*flags as u32) | u64::from(*onfault);
                unit(self.mlock2(pid, *addr, *len, flags))
            }
            Call::Munlock { addr, len } => unit(self.munlock(pid, *addr, *len)),
            Call::Mseal { addr, len, flags } => unit(self.mseal(pid, *addr, *len, *flags)),
            Call::Access {
                start,
                len,
                write,
                tag,
            } => {
                self.access_range(pid, *start, *len, *write, *tag)?;
                Ok(0)
            }
            Call::FillBytes { addr, len, byte } => {
                self.fill_bytes(pid, *addr, *len, *byte)?;
                Ok(0)
            }
            Call::Fork { .. } => {
                let child = self.fork(pid)?;
                // Linux: kernel/fork.c copy_files(): the child holds the
                // parent's descriptors (not its registrations).
                self.uffd_fds.inherit(pid, child);
                Ok(u64::from(child))
            }
            Call::Exit => {
                self.exit(pid)?;
                // Linux: kernel/exit.c do_exit() → exit_files(): a context
                // goes away with its last descriptor (userfaultfd_release()).
                for id in self.uffd_fds.close_all(pid) {
                    let _ = self.uffd_close(id);
                }
                Ok(0)
            }
            Call::PrctlThp(PrctlThp::Set { disable, flags }) => {
                unit(self.prctl_set_thp_disable(pid, *disable, *flags))
            }
            Call::PrctlThp(PrctlThp::Get) => Ok(self.prctl_get_thp_disable(pid)?),
            Call::Setrlimit { resource, bytes } => unit(self.set_rlimit(pid, *resource, *bytes)),
            Call::DropCapIpcLock => unit(self.drop_cap_ipc_lock(pid)),
            Call::FillVmas { addr, headroom } => {
                let headroom = usize::try_from(*headroom).map_err(|_| Errno::EINVAL)?;
                Ok(self.fill_vmas(pid, *addr, headroom)?)
            }
            Call::UffdCreate { handle, api, flags } => {
                if self.uffd_fds.is_open(handle) {
                    return Err(Errno::EBUSY.into());
                }
                // Linux: fs/userfaultfd.c new_userfaultfd(): flags other than
                // O_CLOEXEC, O_NONBLOCK and UFFD_USER_MODE_ONLY are EINVAL
                // (the caller is root: userfaultfd_syscall_allowed()).
                // USER_MODE_ONLY changes nothing observable here: a kernel
                // access to a missing page is EFAULT in SIGBUS mode anyway.
                const ALLOWED: u64 = 0x8_0000 | 0x800 | 1;
                if flags.is_some_and(|f| u64::from(f as u32) & !ALLOWED != 0) {
                    return Err(Errno::EINVAL.into());
                }
                let id = self.uffd_open(pid)?;
                if *api {
                    if let Err(e) = self.uffd_api(id, UFFD_API, UFFD_FEATURE_SIGBUS) {
                        let _ = self.uffd_close(id);
                        return Err(e.into());
                    }
                }
                self.uffd_fds.open(pid, handle.clone(), id);
                Ok(0)
            }
            Call::UffdApi {
                handle,
                api,
                features,
            } => {
                let id = self.uffd_fds.get(pid, handle)?;
                Ok(self
                    .uffd_api(id, *api, features | UFFD_FEATURE_SIGBUS)?
                    .features)
            }
            Call::UffdRegister {
                handle,
                addr,
                len,
                mode,
            } => {
                let id = self.uffd_fds.get(pid, handle)?;
                self.uffd_register(id, *addr, *len, mode.bits())?;
                Ok(0)
            }
            Call::UffdUnregister { handle, addr, len } => {
                let id = self.uffd_fds.get(pid, handle)?;
                unit(self.uffd_unregister(id, *addr, *len))
            }
            Call::UffdCopy {
                handle,
                dst,
                src,
                len,
                tag,
                mode,
            } => {
                let id = self.uffd_fds.get(pid, handle)?;
                let src = tag.map_or(CopySource::Addr(*src), CopySource::Tag);
                Ok(self.uffd_copy(pid, id, *dst, src, *len, mode.bits())?)
            }
            Call::UffdZeropage {
                handle,
                dst,
                len,
                mode,
            } => {
                let id = self.uffd_fds.get(pid, handle)?;
                Ok(self.uffd_zeropage(id, *dst, *len, mode.bits())?)
            }
            Call::UffdMove {
                handle,
                dst,
                src,
                len,
                mode,
            } => {
                let id = self.uffd_fds.get(pid, handle)?;
                Ok(self.uffd_move(pid, id, *dst, *src, *len, mode.bits())?)
            }
            Call::SetThp { knob, mode } => unit(self.set_thp(*knob, *mode)),
            Call::SetUseZeroPage { on } => {
                self.set_use_zero_page(*on);
                Ok(0)
            }
            Call::SetSwap { bytes, kind } => unit(self.set_swap_on(*bytes, *kind)),
            Call::SetAfter { set } => {
                self.set_after(*set);
                Ok(0)
            }
            Call::SetBefore { set } => {
                self.set_before(*set);
                Ok(0)
            }
            Call::SetMemory { bytes } => unit(self.set_memory(*bytes)),
            Call::SetNodes { nodes } => unit(self.set_nodes(*nodes)),
            Call::NumaRunOn { node } => unit(self.numa_run_on(pid, *node)),
            Call::NumaScan { addr, len } => Ok(self.numa_scan(pid, *addr, *len)?),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Raw values through [`Model::call`] (each rule checked live on 6.18 by
    //! tests/scenarios/uffd-26-raw-modes.ptl, args-01-raw-mmap-mprotect.ptl
    //! and args-02-raw-madvise-mremap.ptl).
    use super::*;
    use crate::ModelConfig;

    const A: u64 = 0x7f00_0010_0000;

    fn mmap(flags: u32, prot: u32) -> Call {
        Call::Mmap {
            addr: A,
            len: 0x1_0000,
            prot: Prot::from_bits_retain(prot),
            flags: MapFlags::from_bits_retain(flags),
        }
    }

    fn errno(e: Errno) -> Result<u64, CallError> {
        Err(CallError::Errno(e))
    }

    #[test]
    fn mmap_flags_and_prot() {
        let mut m = Model::new(ModelConfig::default());
        assert_eq!(m.call(1, &mmap(0x02 | 0x10, 3)), errno(Errno::EBADF));
        assert_eq!(m.call(1, &mmap(0x20 | 0x10, 3)), errno(Errno::EINVAL));
        assert_eq!(m.call(1, &mmap(0x23 | 0x10, 3)), errno(Errno::EINVAL));
        assert_eq!(m.call(1, &mmap(0x21 | 0x10, 3)), errno(Errno::ENOSYS));
        assert_eq!(m.call(1, &mmap(0x28 | 0x10, 3)), errno(Errno::ENOSYS));
        assert_eq!(m.call(1, &mmap(0x32 | 0x100, 3)), errno(Errno::ENOSYS));
        assert!(!Model::supports_mmap_flags(MapFlags::from_bits_retain(
            0x22 | 0x80000
        )));
        // Ignored bits; MAP_STACK; MAP_NONBLOCK with MAP_POPULATE; prot
        // bits other than R/W/X.
        let flags = 0x32 | 0x800 | 0x1000 | 0x400_0000 | 0x2_0000 | 0x1_0000 | 0x8000;
        assert_eq!(m.call(1, &mmap(flags, 3 | 0x8 | 0x100_0000)), Ok(A));
        let obs = m.observe(1, "t");
        assert_eq!(obs.maps[0].perms, "rw-p");
        assert!(obs.maps[0].vm_flags.iter().any(|f| f == "nh"));
        assert_eq!(m.mm(1).unwrap().rss_anon, 0, "MAP_NONBLOCK: not populated");
    }

    #[test]
    fn madvise_advice_values() {
        let mut m = Model::new(ModelConfig::default());
        m.call(1, &mmap(0x32, 3)).unwrap();
        let madv = |addr, len, v| Call::Madvise {
            addr,
            len,
            advice: Advice::from_value(v),
        };
        for v in [5, 6, 7, 26, 99, 104, -1] {
            assert_eq!(m.call(1, &madv(A, 4096, v)), errno(Errno::EINVAL), "{v}");
            assert_eq!(m.call(1, &madv(A, 0, v)), errno(Errno::EINVAL), "{v}");
        }
        assert_eq!(Advice::from_value(4), Advice::DontNeed);
        // MADV_NORMAL: the generic checks, then ENOSYS (not modelled).
        assert_eq!(m.call(1, &madv(A + 1, 4096, 0)), errno(Errno::EINVAL));
        assert_eq!(m.call(1, &madv(A, 0, 0)), Ok(0));
        assert!(!Model::madvise_is_unmodelled(A, 0, Advice::Other(0)));
        assert!(Model::madvise_is_unmodelled(A, 4096, Advice::Other(0)));
        assert_eq!(m.call(1, &madv(A, 4096, 0)), errno(Errno::ENOSYS));
    }

    #[test]
    fn uffd_modes_and_the_untouched_field() {
        let mut m = Model::new(ModelConfig::default());
        m.call(1, &mmap(0x32, 3)).unwrap();
        let h = || "main".to_string();
        m.call(
            1,
            &Call::UffdCreate {
                handle: h(),
                api: true,
                flags: None,
            },
        )
        .unwrap();
        let reg = |mode| Call::UffdRegister {
            handle: h(),
            addr: A,
            len: 0x8000,
            mode: UffdRegisterMode::from_bits_retain(mode),
        };
        for mode in [0, 4, 5, 8, 1 << 63] {
            assert_eq!(m.call(1, &reg(mode)), errno(Errno::EINVAL), "{mode:#x}");
        }
        assert_eq!(m.call(1, &reg(1)), Ok(0));
        let copy = |dst, mode| Call::UffdCopy {
            handle: h(),
            dst,
            src: 0,
            len: 4096,
            tag: Some(5),
            mode: UffdCopyMode::from_bits_retain(mode),
        };
        // An unknown bit: EINVAL before anything ran, field untouched.
        assert_eq!(m.call(1, &copy(A, 4)), errno(Errno::EINVAL));
        // MODE_WP on a range not registered WP: mfill_atomic() ran, -22.
        assert_eq!(
            m.call(1, &copy(A, 2)),
            Err(CallError::ErrnoWithResult {
                errno: Errno::EINVAL,
                result: -22
            })
        );
        assert_eq!(m.call(1, &copy(A, 1)), Ok(4096));
        let zp = |mode| Call::UffdZeropage {
            handle: h(),
            dst: A + 4096,
            len: 4096,
            mode: UffdZeropageMode::from_bits_retain(mode),
        };
        assert_eq!(m.call(1, &zp(2)), errno(Errno::EINVAL));
        assert_eq!(m.call(1, &zp(1)), Ok(4096));
        let mv = |mode| Call::UffdMove {
            handle: h(),
            dst: A + 0x2000,
            src: A + 0x9000,
            len: 4096,
            mode: UffdMoveMode::from_bits_retain(mode),
        };
        assert_eq!(m.call(1, &mv(4)), errno(Errno::EINVAL));
        // A WP range: MODE_WP maps the page write-protected.
        assert_eq!(
            m.call(
                1,
                &Call::UffdRegister {
                    handle: h(),
                    addr: A + 0x8000,
                    len: 0x8000,
                    mode: UffdRegisterMode::MISSING | UffdRegisterMode::WP,
                }
            ),
            Ok(0)
        );
        assert_eq!(m.call(1, &copy(A + 0x8000, 2)), Ok(4096));
        let write = Call::Access {
            start: A + 0x8000,
            len: 4096,
            write: true,
            tag: None,
        };
        assert_eq!(m.call(1, &write), Err(CallError::Uffd { addr: A + 0x8000 }));
    }
}
