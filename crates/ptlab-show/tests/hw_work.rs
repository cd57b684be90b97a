//! The pictured step's hardware work comes from the model: which entries
//! one batch covered and which TLB invalidations were issued.

mod common;

use common::*;
use ptlab_model::{ArchKind, Before, ModelConfig};
use ptlab_show::capture::{capture, ModelTarget};
use ptlab_show::{HwEvent, StepSel};

const MPROTECT_64K: &str = "thp 64K always\np = mmap 512K at 0x7f0000000000 fixed\n\
     write p 512K\nmprotect p 256K r\n";

fn batches(ev: &[HwEvent]) -> Vec<(u64, u64, &str)> {
    ev.iter()
        .filter_map(|e| match e {
            HwEvent::Batch { va, nr, op, .. } => Some((*va, *nr, op.as_str())),
            _ => None,
        })
        .collect()
}

fn flushes(ev: &[HwEvent]) -> Vec<(u64, u64, &str)> {
    ev.iter()
        .filter_map(|e| match e {
            HwEvent::TlbFlush { start, end, op, .. } => Some((*start, *end, op.as_str())),
            _ => None,
        })
        .collect()
}

#[test]
fn mprotect_of_four_64k_folios_is_four_batches_and_one_flush() {
    let cap = run(MPROTECT_64K, ArchKind::Arm64, StepSel::Line(4), true);
    let hw = cap.hw.expect("the model reports its work");
    let b = 0x7f00_0000_0000u64;
    assert_eq!(
        batches(&hw.events),
        (0..4)
            .map(|i| (b + i * 0x10000, 16, "protect"))
            .collect::<Vec<_>>()
    );
    // One ranged flush over the 256 KiB at the end (6.17 batching).
    assert_eq!(
        flushes(&hw.events),
        vec![(b, b + 0x40000, "flush_tlb_range")]
    );
    assert!(hw.singles.is_empty(), "{:?}", hw.singles);
}

#[test]
fn before_the_change_every_entry_is_its_own_step() {
    let script = ptlab_scenario::parse("t.ptl", MPROTECT_64K).unwrap();
    let mut cfg = ModelConfig::for_arch(ArchKind::Arm64);
    cfg.before = Before::MPROTECT_PTE_BATCH;
    let cap = capture(&script, ModelTarget::new(cfg), StepSel::Line(4), true).unwrap();
    let hw = cap.hw.unwrap();
    assert!(batches(&hw.events).is_empty());
    assert_eq!(
        hw.singles.get(&("main".to_string(), "protect".to_string())),
        Some(&64)
    );
    // Per-PTE changes of folded blocks unfold them: more invalidations.
    assert!(flushes(&hw.events).len() > 1, "{:?}", hw.events);
}

#[test]
fn only_the_pictured_step_is_recorded() {
    // The write that populates faults 8 folios but is not the pictured step.
    let cap = run(MPROTECT_64K, ArchKind::X86_64, StepSel::Line(2), false);
    let hw = cap.hw.unwrap();
    assert!(hw.events.is_empty() && hw.singles.is_empty(), "{hw:?}");
    // At the end of a run (no step) nothing is recorded.
    let cap = run(MPROTECT_64K, ArchKind::X86_64, StepSel::End, false);
    assert!(cap.hw.is_none());
}

#[test]
fn fork_batches_land_in_the_parent_and_the_event_list_folds_runs() {
    let src = "thp 64K always\np = mmap 1M at 0x7f0000000000 fixed\nwrite p 1M\nfork child\n";
    let cap = run(src, ArchKind::X86_64, StepSel::Line(4), true);
    let hw = cap.hw.unwrap();
    let b = batches(&hw.events);
    assert_eq!(b.len(), 16, "{b:?}");
    assert!(b.iter().all(|(_, nr, op)| *nr == 16 && *op == "copy"));
    let html = ptlab_show::render_html(
        &ptlab_show::Picture {
            title: "t".into(),
            subtitle: vec![],
            panels: vec![ptlab_show::Panel::single("After", "fork", cap.after)],
            events: Some(hw.events),
            events_unavailable: None,
            notes: vec![],
        },
        &ptlab_show::RenderOptions::default(),
    );
    assert!(
        html.contains("main: 16 batches copy of 16 entries each, 7f0000000000-7f0000100000"),
        "the list folds the run into one line"
    );
}

/// `ptlab show` runs scenarios through a recording wrapper around the
/// backend: every statement of every scenario under tests/scenarios/ must
/// reach the model through it (a backend method the wrapper forgets to
/// forward answers "unsupported").
#[test]
fn every_scenario_runs_through_the_recorder() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "ptl") {
            continue;
        }
        let src = std::fs::read_to_string(&p).unwrap();
        let script = ptlab_scenario::parse(&p.display().to_string(), &src).unwrap();
        let cap = capture(
            &script,
            ModelTarget::new(ModelConfig::for_arch(ArchKind::X86_64)),
            StepSel::End,
            false,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let unsupported: Vec<String> = cap
            .report
            .failures
            .iter()
            .map(|f| f.to_string())
            .filter(|m| m.contains("unsupported"))
            .collect();
        assert!(unsupported.is_empty(), "{}: {unsupported:?}", p.display());
        assert!(
            cap.report.passed(),
            "{}: {:?}",
            p.display(),
            cap.report.failures
        );
        n += 1;
    }
    assert!(n >= 100, "only {n} scenarios found in {}", dir.display());
}
