//! ptlab-model: an executable model of Linux 6.18's anonymous-memory
//! page-table layer.
//!
//! The model is pure: no I/O, no clocks, no global state, no randomness
//! except what a caller seeds. Every rule cites the kernel function it
//! mirrors. Entry point: [`Model`].
//!
//! Layout, bottom up (docs/model.md has the picture and one line per file;
//! tests/layering.rs keeps every import pointing down):
//! [`types`] (identifiers, errno, uapi) →
//! [`core`] (addresses, the arch policy, page tables, the
//! mmu_gather, frames and folios, VMAs) → [`mm`] (one address
//! space; fault, zap, move_pt, swap PTEs, markers) →
//! [`model`] (the machine) and [`sys`] (one file
//! per syscall family, each adding its entry points to `Model`).

pub mod core;
pub mod invariants;
pub mod mm;
pub mod model;
pub mod sys;
pub mod types;

// The modules' earlier flat paths (`ptlab_model::observe`, …), kept for the
// other crates.
pub use crate::core::{addr, arch, diag, folio, hw, observe, pgtable, phys, stats, thp, tlb, vma};
pub use crate::mm::{batch, fault, move_pt, rlimit, zap};
pub use crate::sys::{call, collapse, fork, guard, mlock, mprotect, mremap, swap, uffd};
pub use crate::types::{errno, uapi};

pub use addr::{Order, PageSize, Pfn, PAGE_SIZE, PMD_SIZE, PUD_SIZE};
pub use arch::ArchKind;
pub use batch::{After, Before};
pub use call::{Call, CallError, UffdFds};
pub use errno::Errno;
pub use hw::{Figure, HwEvent, HwEvents, HwFeatures, HwMark, KCall, Phase};
pub use model::{max_memory, AccessFault, Model, ModelConfig, Pid, MIN_MEMORY};
pub use observe::{NumaMapsEntry, Observation, PageState, Sections};
pub use rlimit::{Resource, Rlimits, RLIM_INFINITY};
pub use thp::{ThpDisable, ThpSettings};
pub use uapi::{
    Advice, MapFlags, MremapFlags, PrctlThp, Prot, ThpKnob, ThpMode, UffdCopyMode, UffdMoveMode,
    UffdRegisterMode, UffdZeropageMode,
};
pub use uffd::{CopySource, UffdError, UffdId};
