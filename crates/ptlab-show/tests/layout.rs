//! Layout and collapsing: row counts for known states.

mod common;

use common::*;
use ptlab_model::ArchKind;
use ptlab_show::snapshot::{Changes, PteKind, Slot, Snapshot};
use ptlab_show::{PteMode, Row, StepSel};

const ALIGNED_1G: &str = "let R = 0x7e0000000000\n";

#[test]
fn teaching_scenario_shows_every_entry() {
    let s = end_state(
        "thp enabled never\nthp 64K always\np = mmap 256K at 0x7f0000010000 fixed\n\
         write p\nread p + 64K\n",
    );
    let l = layout(&s, "main", 40);
    assert_eq!(
        shape(&l),
        ["L4", "L3", "L2", "vma0", "ptes1:Grid:17", "gap511"],
        "{:#?}",
        l.rows
    );
    let p = s.proc("main").unwrap();
    let Some(Slot::Table { ptes, used, .. }) = p.slots.get(&0x7f0000000000) else {
        panic!("PTE table expected");
    };
    assert_eq!(*used, 17);
    assert!(ptes[16..32]
        .iter()
        .all(|e| e.kind == PteKind::Anon && e.order == 4));
    assert!(ptes[16..32]
        .iter()
        .enumerate()
        .all(|(i, e)| e.index == i as u32));
    assert_eq!(ptes[32].kind, PteKind::Zero);
    assert!(ptes[16].x && ptes[16].ax && ptes[16].cnt == 1);
}

#[test]
fn one_gib_of_small_pages_is_one_summary_row() {
    let s = end_state(&format!(
        "{ALIGNED_1G}thp enabled never\np = mmap 1G at R fixed\nwrite p 1G\n"
    ));
    let l = layout(&s, "main", 40);
    assert_eq!(
        shape(&l),
        ["L4", "L3", "L2", "vma0", "ptes512:Summary:262144"]
    );
    assert!(matches!(l.rows[4], Row::Ptes { uniform: true, .. }));
}

#[test]
fn one_gib_of_64k_folios_on_arm64_keeps_cont_blocks() {
    let cap = run(
        &format!(
            "{ALIGNED_1G}thp enabled never\nthp 64K always\np = mmap 1G at R fixed\nwrite p 1G\n"
        ),
        ArchKind::Arm64,
        StepSel::End,
        false,
    );
    let l = layout(&cap.after, "main", 40);
    assert_eq!(
        shape(&l),
        ["L4", "L3", "L2", "vma0", "ptes512:Summary:262144"]
    );
    let p = cap.after.proc("main").unwrap();
    let conts: usize = p
        .slots
        .values()
        .map(|s| match s {
            Slot::Table { ptes, .. } => ptes.iter().filter(|e| e.cont()).count(),
            _ => 0,
        })
        .sum();
    assert_eq!(conts, 262_144, "every entry is in a folded 64 KiB block");
}

#[test]
fn pmd_mapped_thps_collapse_into_one_row() {
    let s = end_state(&format!(
        "{ALIGNED_1G}thp enabled always\np = mmap 1G at R fixed\nwrite p 1G\n"
    ));
    let l = layout(&s, "main", 40);
    assert_eq!(shape(&l), ["L4", "L3", "L2", "vma0", "pmd512"]);
}

#[test]
fn repeated_non_uniform_tables_collapse_to_one_grid() {
    // Every other 64 KiB zapped: each table has the same holes.
    let s = end_state(&format!(
        "{ALIGNED_1G}thp enabled never\np = mmap 1G at R fixed\nwrite p 1G\n\
         repeat 8192 as i\n  madvise p + i * 128K 64K dontneed\nend\n"
    ));
    let l = layout(&s, "main", 40);
    assert_eq!(shape(&l), ["L4", "L3", "L2", "vma0", "ptes512:Grid:131072"]);
    assert!(matches!(l.rows[4], Row::Ptes { uniform: false, .. }));
}

#[test]
fn grid_budget_turns_later_tables_into_strips() {
    // 64 tables with one page each, at a different index in each table.
    let s = end_state(&format!(
        "{ALIGNED_1G}thp enabled never\np = mmap 128M at R fixed\n\
         repeat 64 as i\n  write p + i * 2M + i * 4K\nend\n"
    ));
    let l = layout(&s, "main", 40);
    let grids = l.count(|r| {
        matches!(
            r,
            Row::Ptes {
                mode: PteMode::Grid,
                ..
            }
        )
    });
    let strips = l.count(|r| {
        matches!(
            r,
            Row::Ptes {
                mode: PteMode::Strip,
                ..
            }
        )
    });
    assert_eq!((grids, strips), (40, 24));
    // The rest of the PMD table: 448 none entries outside the VMA.
    assert_eq!(
        l.rows.last().map(|r| matches!(r, Row::Gap { n: 448, .. })),
        Some(true)
    );
}

#[test]
fn untouched_vma_sits_where_no_table_exists() {
    let s = end_state(&format!("{ALIGNED_1G}p = mmap 1G at R fixed\n"));
    let l = layout(&s, "main", 40);
    assert_eq!(shape(&l), ["L4", "vma0", "missing3"]);
}

#[test]
fn gaps_split_at_vma_boundaries() {
    // Two VMAs with a hole between them, nothing written.
    let s = end_state(&format!(
        "{ALIGNED_1G}p = mmap 4M at R fixed\nwrite p\nq = mmap 4M at R + 8M fixed prot r\n"
    ));
    let l = layout(&s, "main", 40);
    assert_eq!(
        shape(&l),
        [
            "L4",
            "L3",
            "L2",
            "vma0",
            "ptes1:Grid:1",
            "gap1",
            "gap2",
            "vma1",
            "gap2",
            "gap506"
        ],
        "{:#?}",
        l.rows
    );
}

#[test]
fn fork_changes_every_parent_entry_and_adds_a_child() {
    let src = "thp enabled never\nthp 64K always\np = mmap 64K at 0x7f0000100000 fixed\n\
               write p 64K\nfork child\n";
    let cap = run(src, ArchKind::Arm64, StepSel::Line(5), true);
    let before = cap.before.as_ref().unwrap();
    let after = &cap.after;
    assert_eq!(before.procs.len(), 1);
    assert_eq!(after.procs.len(), 2);
    assert_eq!(after.procs[1].name, "child");
    let ch = Changes::between(before.proc("main").unwrap(), after.proc("main").unwrap());
    assert_eq!(ch.total(), 16, "fork write-protects all 16 parent entries");
    let p = after.proc("main").unwrap();
    let Some(Slot::Table { ptes, .. }) = p.slots.get(&0x7f0000000000) else {
        panic!("table");
    };
    let e = &ptes[256];
    assert!(e.read_only() && e.cnt == 2 && !e.x && e.cont());
    // The child's entries are new, not "changed".
    assert_eq!(snap_present(after, "child"), 16);
}

#[test]
fn proc_snapshots_lay_out_by_region() {
    let cap = run(
        "thp enabled never\nthp 64K always\np = mmap 256K at 0x7f0000010000 fixed\nwrite p 64K\n",
        ArchKind::X86_64,
        StepSel::End,
        false,
    );
    let m = cap.target.model();
    let obs = m.observe(m.main_pid(), "main");
    let s = Snapshot::from_observations(&[obs]);
    let l = layout(&s, "main", 40);
    assert_eq!(
        shape(&l),
        ["region", "vma0", "ptes1:Grid:16", "gap511"],
        "{:#?}",
        l.rows
    );
    // Same pages as the model snapshot sees.
    assert_eq!(snap_present(&s, "main"), snap_present(&cap.after, "main"));
}

#[test]
fn snapshot_counts_match_the_model() {
    let src = format!(
        "{ALIGNED_1G}thp enabled always\np = mmap 8M at R fixed\nwrite p 8M\nmadvise p + 1M 4K dontneed\n\
         fork child\n@child write p + 4M 8K\n"
    );
    let cap = run(&src, ArchKind::X86_64, StepSel::End, false);
    let m = cap.target.model();
    for (name, pid) in [("main", 1), ("child", 2)] {
        let (ptes, pmds, tables) = model_counts(m, pid);
        let p = cap.after.proc(name).unwrap();
        assert_eq!(p.counts(), (ptes, pmds), "{name}");
        assert_eq!(p.upper.len() + p.pte_tables() as usize, tables, "{name}");
    }
}

#[test]
fn documented_examples_pass_on_the_model() {
    // The scenarios behind docs/show.md's pictures (arm64 ones say so in their name).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("docs/examples") {
        let path = e.expect("entry").path();
        if path.extension().is_none_or(|x| x != "ptl") {
            continue;
        }
        let src = std::fs::read_to_string(&path).expect("read");
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let arch = if name.contains("arm64") {
            ArchKind::Arm64
        } else {
            ArchKind::X86_64
        };
        let mut backend =
            ptlab_scenario::ModelBackend::new(ptlab_model::ModelConfig::for_arch(arch));
        let report = ptlab_scenario::run_source(&name, &src, &mut backend, &Default::default())
            .expect("parses");
        assert!(report.passed(), "{name}: {:?}", report.failures);
        n += 1;
    }
    assert!(n >= 4, "expected the seed examples, found {n}");
}

#[test]
fn huge_untouched_mappings_are_one_row() {
    // Model: 127 TiB under 255 none PGD entries is one row, not 255.
    let cap = run(
        "p = mmap 127T noreserve\n",
        ArchKind::X86_64,
        StepSel::End,
        false,
    );
    let l = layout(&cap.after, "main", 40);
    assert_eq!(shape(&l), ["L4", "vma0", "missing3"], "{:#?}", l.rows);
    assert!(matches!(l.rows[2], Row::Missing { n: 255, .. }));
    // /proc: 8 GiB with one page in its 4th GiB. One region per GiB that
    // holds pages, runs of two or more empty GiB as one row, a lone empty
    // GiB as before (a region and its none entries).
    let cap = run(
        "p = mmap 8G at 0x7f0000000000 fixed noreserve\nwrite p + 3G\nwrite p + 5G\n",
        ArchKind::X86_64,
        StepSel::End,
        false,
    );
    let m = cap.target.model();
    let s = Snapshot::from_observations(&[m.observe(m.main_pid(), "main")]);
    let l = layout(&s, "main", 40);
    assert_eq!(
        shape(&l),
        [
            "vma0",
            "missing0",
            "region",
            "ptes1:Grid:1",
            "gap511",
            "region",
            "gap512",
            "region",
            "ptes1:Grid:1",
            "gap511",
            "missing0",
        ],
        "{:#?}",
        l.rows
    );
    let missing: Vec<(u64, u64, u64)> = l
        .rows
        .iter()
        .filter_map(|r| match *r {
            Row::Missing { start, end, n, .. } => Some((start, end, n)),
            _ => None,
        })
        .collect();
    let g = 1u64 << 30;
    let p = 0x7f0000000000u64;
    assert_eq!(missing, [(p, p + 3 * g, 3), (p + 6 * g, p + 8 * g, 2)]);
    // Pages are the same as the model snapshot's.
    assert_eq!(snap_present(&s, "main"), snap_present(&cap.after, "main"));
}

/// Swap entries and guard markers are drawn as their own kinds (one
/// classification, `PteKind::of`, for model and /proc snapshots), never
/// dropped and never an unnamed "other".
#[test]
fn swap_entries_and_guard_markers_have_their_own_kinds() {
    use ptlab_show::PteKind;
    let s = end_state(
        "swap 1M\np = mmap 64K at 0x7f0000000000 fixed\nwrite p 16K\n\
         madvise p 8K pageout\nmadvise p + 32K 8K guard_install\n",
    );
    let proc = s.proc("main").expect("main");
    let Some(ptlab_show::Slot::Table { ptes, .. }) = proc.slots.get(&0x7f00_0000_0000) else {
        panic!("a PTE table at the slot: {:?}", proc.slots.keys());
    };
    let kinds: Vec<PteKind> = ptes[..10].iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        vec![
            PteKind::Swap,
            PteKind::Swap,
            PteKind::Anon,
            PteKind::Anon,
            PteKind::None,
            PteKind::None,
            PteKind::None,
            PteKind::None,
            PteKind::Guard,
            PteKind::Guard,
        ]
    );
    assert_eq!(PteKind::Guard.name(), "guard");
}
