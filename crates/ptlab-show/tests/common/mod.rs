//! Helpers shared by the integration tests.
#![allow(dead_code)]

use ptlab_model::{ArchKind, ModelConfig};
use ptlab_show::capture::{capture, Captured, ModelTarget};
use ptlab_show::snapshot::{Slot, Snapshot};
use ptlab_show::{layout_proc, ProcLayout, Row, StepSel};

/// Run `src` on the model of `arch` and capture `sel`.
pub fn run(src: &str, arch: ArchKind, sel: StepSel, before_after: bool) -> Captured<ModelTarget> {
    let script = ptlab_scenario::parse("test.ptl", src).expect("scenario parses");
    let cap = capture(
        &script,
        ModelTarget::new(ModelConfig::for_arch(arch)),
        sel,
        before_after,
    )
    .expect("capture");
    assert!(
        cap.report.passed(),
        "scenario failed: {:?}",
        cap.report.failures
    );
    cap
}

/// The state at the end of `src` (x86-64).
pub fn end_state(src: &str) -> Snapshot {
    run(src, ArchKind::X86_64, StepSel::End, false).after
}

/// Lay out process `name` with a grid budget (and the default strip budget).
pub fn layout(s: &Snapshot, name: &str, budget: usize) -> ProcLayout {
    let mut b = ptlab_show::Budget {
        grids: budget,
        strips: ptlab_show::LayoutOptions::default().strip_budget,
    };
    layout_proc(s.proc(name).expect("process"), s.source, None, &mut b)
}

/// Short names of the rows, for whole-layout assertions.
pub fn shape(l: &ProcLayout) -> Vec<String> {
    l.rows
        .iter()
        .map(|r| match r {
            Row::Upper {
                level,
                virtual_region,
                ..
            } => {
                if *virtual_region {
                    "region".to_string()
                } else {
                    format!("L{level}")
                }
            }
            Row::Missing { level, .. } => format!("missing{level}"),
            Row::Vma { idx, .. } => format!("vma{idx}"),
            Row::Gap { n, .. } => format!("gap{n}"),
            Row::PmdLeaves { n, .. } => format!("pmd{n}"),
            Row::Ptes {
                n, mode, present, ..
            } => format!("ptes{n}:{mode:?}:{present}"),
        })
        .collect()
}

/// Present PTEs and PMD leaves counted straight from the model's page tables.
pub fn model_counts(m: &ptlab_model::Model, pid: ptlab_model::Pid) -> (u64, u64, usize) {
    let mm = m.mm(pid).expect("mm");
    let leaves = mm.pt.leaves(0, u64::MAX);
    let ptes = leaves.iter().filter(|(_, l, _)| *l == 1).count() as u64;
    let pmds = leaves.iter().filter(|(_, l, _)| *l == 2).count() as u64;
    (ptes, pmds, mm.pt.tables_in_tree().len())
}

/// Present entries over every slot of a snapshot process.
pub fn snap_present(s: &Snapshot, name: &str) -> u64 {
    s.proc(name)
        .expect("process")
        .slots
        .values()
        .filter(|s| matches!(s, Slot::Table { .. }))
        .map(|s| s.present())
        .sum()
}
