//! Resource limits as a process holds them (`struct rlimit` in
//! `signal->rlim[]`, plus CAP_IPC_LOCK): the data only; the checks against
//! `total_vm`, `data_vm` and `locked_vm` are crate::mm::rlimit.
//!
//! Linux: include/uapi/linux/resource.h, include/linux/sched/signal.h.

/// RLIM_INFINITY.
pub const RLIM_INFINITY: u64 = u64::MAX;

/// Linux's default RLIMIT_MEMLOCK soft limit (MLOCK_LIMIT, 8 MiB since
/// 5.16; include/uapi/linux/resource.h). The live harness sets its workers
/// to this value so both backends start alike.
pub const MLOCK_LIMIT_DEFAULT: u64 = 8 << 20;

/// The resources the model checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Resource {
    /// RLIMIT_AS: `total_vm`, every mapped page.
    As,
    /// RLIMIT_DATA: `data_vm`, private writable mappings.
    Data,
    /// RLIMIT_MEMLOCK: `locked_vm`, without CAP_IPC_LOCK.
    Memlock,
}

impl Resource {
    pub const ALL: [Resource; 3] = [Resource::As, Resource::Data, Resource::Memlock];

    /// The name scenarios use (`setrlimit as ...`).
    pub fn name(self) -> &'static str {
        match self {
            Resource::As => "as",
            Resource::Data => "data",
            Resource::Memlock => "memlock",
        }
    }

    pub fn from_name(s: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.name() == s)
    }

    /// The RLIMIT_* number (include/uapi/asm-generic/resource.h).
    pub fn number(self) -> u32 {
        match self {
            Resource::Data => 2,
            Resource::Memlock => 8,
            Resource::As => 9,
        }
    }
}

/// The soft limits of one process (`rlim_cur`; the kernel checks only
/// these). Hard limits stay infinite in the model: scenarios run as root,
/// which may raise them. Inherited by fork (copy_signal()).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rlimits {
    pub as_bytes: u64,
    pub data_bytes: u64,
    pub memlock_bytes: u64,
    /// CAP_IPC_LOCK in the effective set: mlock ignores RLIMIT_MEMLOCK.
    pub cap_ipc_lock: bool,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            as_bytes: RLIM_INFINITY,
            data_bytes: RLIM_INFINITY,
            memlock_bytes: MLOCK_LIMIT_DEFAULT,
            cap_ipc_lock: true,
        }
    }
}

impl Rlimits {
    pub fn get(&self, r: Resource) -> u64 {
        match r {
            Resource::As => self.as_bytes,
            Resource::Data => self.data_bytes,
            Resource::Memlock => self.memlock_bytes,
        }
    }

    pub fn set(&mut self, r: Resource, v: u64) {
        match r {
            Resource::As => self.as_bytes = v,
            Resource::Data => self.data_bytes = v,
            Resource::Memlock => self.memlock_bytes = v,
        }
    }
}
