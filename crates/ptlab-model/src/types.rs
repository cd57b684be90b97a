//! The small identifier types every layer of the model names, at the bottom
//! of the module graph so that lower modules (folio, vma, mm) need not import
//! the syscall modules that define processes and userfaultfd contexts.

/// A process of the model (`main` is 1; fork children count up).
pub type Pid = u32;

/// A userfaultfd context (one `struct userfaultfd_ctx`), numbered by the
/// model from 1.
pub type UffdId = u32;

/// Why a user-space access could not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessFault {
    /// SIGSEGV: no VMA, or the VMA forbids the access.
    Segv { addr: u64 },
    /// The model ran out of physical memory (VM_FAULT_OOM).
    Oom { addr: u64 },
    /// The access would fault to userfaultfd: a missing page in a range
    /// registered MISSING, or a write to a uffd-wp protected page in a range
    /// registered WP (handle_userfault(); the thread would block until the
    /// fault is resolved, or get SIGBUS with UFFD_FEATURE_SIGBUS). `addr` is
    /// the page-aligned fault address a uffd message would carry.
    Uffd { addr: u64 },
    /// No such process.
    NoProcess,
}

impl std::fmt::Display for AccessFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessFault::Segv { addr } => write!(f, "SIGSEGV at {addr:#x}"),
            AccessFault::Oom { addr } => write!(f, "out of model memory faulting {addr:#x}"),
            AccessFault::Uffd { addr } => write!(f, "fault at {addr:#x} goes to userfaultfd"),
            AccessFault::NoProcess => write!(f, "no such process"),
        }
    }
}

pub mod errno;
pub mod uapi;
