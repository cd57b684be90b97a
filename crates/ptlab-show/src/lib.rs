//! ptlab-show: pictures of page-table states.
//!
//! Data in, HTML out: a [`Snapshot`] (VMAs, page-table tree, per-entry
//! folio and /proc facts of every process, taken from the model or from
//! `/proc` observations) is laid out ([`layout`]) with empty and uniform
//! parts collapsed, then drawn ([`render_html`]) as one self-contained HTML
//! page with an SVG per process: VMAs as bands, the table tree as an
//! outline, every PTE coloured by folio with contiguous blocks, sharing,
//! write protection and the entries a step changed marked.
//!
//! [`capture`] runs a scenario and snapshots the state before and after a
//! chosen statement. The `ptlab show` command glues the two; the picture is
//! described in docs/show.md.
//!
//! ```
//! use ptlab_model::{ArchKind, ModelConfig};
//! use ptlab_show::{capture, Picture, Panel, RenderOptions, StepSel};
//!
//! let src = "thp 64K always\np = mmap 256K\nwrite p 64K\n";
//! let script = ptlab_scenario::parse("demo.ptl", src).unwrap();
//! let target = capture::ModelTarget::new(ModelConfig::for_arch(ArchKind::Arm64));
//! let cap = capture::capture(&script, target, StepSel::End, false).unwrap();
//! let pic = Picture {
//!     title: "demo".into(),
//!     panels: vec![Panel::single("Final state", "", cap.after)],
//!     ..Picture::default()
//! };
//! let html = ptlab_show::render_html(&pic, &RenderOptions::default());
//! assert!(html.contains("data-kind=\"pte\""));
//! ```

pub mod capture;
pub mod layout;
pub mod render;
pub mod snapshot;

pub use capture::{Captured, HwWork, StepInfo, StepSel};
pub use layout::{layout_proc, Budget, LayoutOptions, ProcLayout, PteMode, Row};
pub use render::{render_html, Panel, Picture, RenderOptions};
pub use snapshot::{Changes, ProcSnap, Pte, PteKind, Slot, Snapshot, Source};

/// Hardware work of one operation, for the overlay: which entries one batch
/// covered and which TLB invalidations were issued.
///
/// Nothing produces these yet: the model has no hardware-event accounting
/// (a later issue adds it). The renderer already draws them (batches as
/// dashed outlines over the entries, TLB invalidations as marks beside the
/// VMA band and as a list), so the CLI only has to pass them on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HwEvent {
    /// One batched page-table operation over `nr` entries from `va`.
    Batch {
        process: String,
        va: u64,
        nr: u64,
        /// What the batch did (`copy`, `wrprotect`, `move`, ...).
        op: String,
    },
    /// A TLB invalidation of `[start, end)`; `end <= start` means the
    /// whole address space of the process.
    TlbFlush {
        process: String,
        start: u64,
        end: u64,
        op: String,
    },
}

impl HwEvent {
    pub fn process(&self) -> &str {
        match self {
            HwEvent::Batch { process, .. } | HwEvent::TlbFlush { process, .. } => process,
        }
    }

    /// One line for the event list and tooltips.
    pub fn describe(&self) -> String {
        match self {
            HwEvent::Batch {
                process,
                va,
                nr,
                op,
            } => format!("{process}: batch {op} of {nr} entries at {va:012x}"),
            HwEvent::TlbFlush {
                process,
                start,
                end,
                op,
            } if end > start => format!(
                "{process}: TLB invalidation {op} {start:012x}-{end:012x} ({})",
                render::fmt_size(end - start)
            ),
            HwEvent::TlbFlush { process, op, .. } => {
                format!("{process}: TLB invalidation {op} of the whole address space")
            }
        }
    }
}
