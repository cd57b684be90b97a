//! Layer 1, the core: addresses, the arch policy, page tables, the
//! mmu_gather, frames and folios, VMAs, counters and knobs. Imports only
//! [`crate::types`] and siblings here (acyclic).

pub mod addr;
pub mod arch;
pub mod content;
pub mod diag;
pub mod folio;
pub mod hw;
pub mod observe;
pub mod pgtable;
pub mod phys;
pub mod resource;
pub mod rules;
pub mod stats;
pub mod swapfile;
pub mod thp;
pub mod tlb;
pub mod vma;
