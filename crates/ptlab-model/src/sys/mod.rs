//! Layer 3, the syscalls: one file per family, each adding its entry points
//! to [`crate::model::Model`]. Imports only the layers below, the machine
//! ([`crate::model`]) and siblings here (acyclic).

pub mod access;
pub mod call;
pub mod collapse;
pub mod fault_run;
pub mod fork;
pub mod guard;
pub mod madvise;
pub mod mlock;
pub mod mmap;
pub mod mprotect;
pub mod mremap;
pub mod numa;
pub mod proc;
pub mod swap;
pub mod uffd;
