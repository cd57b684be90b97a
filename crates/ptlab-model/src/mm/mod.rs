//! Layer 2, mm mechanics: one address space ([`mm::Mm`]), and what every
//! syscall family shares: faults, zapping, moving page tables, folio
//! batches. Imports only the layers below and siblings here (acyclic).

pub mod batch;
pub mod contpte_runs;
pub mod copy_runs;
pub mod fault;
pub mod huge_memory;
pub mod marker;
pub mod mm;
pub mod move_pt;
pub mod numa;
pub mod protect;
pub mod rlimit;
pub mod small_runs;
pub mod swap;
pub mod zap;
