//! ptlab-model: an executable model of Linux 6.18's anonymous-memory
//! page-table layer.
//!
//! The model is pure: no I/O, no clocks, no global state, no randomness
//! except what a caller seeds. Every rule cites the kernel function it
//! mirrors. Entry point: [`Model`].

pub mod addr;
pub mod arch;
pub mod batch;
pub mod call;
pub mod collapse;
pub mod errno;
pub mod fault;
pub mod folio;
pub mod fork;
pub mod guard;
pub mod hw;
pub mod invariants;
pub mod mlock;
pub mod mm;
pub mod model;
pub mod move_pt;
pub mod mprotect;
pub mod mremap;
pub mod observe;
pub mod pgtable;
pub mod phys;
pub mod rlimit;
pub mod stats;
pub mod swap;
pub mod thp;
pub mod tlb;
pub mod types;
pub mod uapi;
pub mod uffd;
pub mod vma;
pub mod zap;

pub use addr::{Order, PageSize, Pfn, VirtAddr, PAGE_SIZE, PMD_SIZE, PUD_SIZE};
pub use arch::ArchKind;
pub use batch::Before;
pub use call::{Call, CallError, UffdFds};
pub use errno::Errno;
pub use hw::{HwEvent, HwEvents, HwFeatures, HwMark};
pub use model::{AccessFault, Model, ModelConfig, Pid};
pub use observe::{Observation, PageState, Sections};
pub use rlimit::{Resource, Rlimits, RLIM_INFINITY};
pub use thp::{ThpDisable, ThpSettings};
pub use uapi::{
    Advice, MapFlags, MremapFlags, PrctlThp, Prot, ThpKnob, ThpMode, UffdMoveMode, UffdRegisterMode,
};
pub use uffd::{CopySource, UffdError, UffdId};
