//! A lone PUD → PMD → PTE table chain made and freed in one step (issue
//! 14, `core/pgtable.rs` `alloc_lone_chain()`, `free_lone_chain()`, under
//! `ModelConfig::table_chain_steps`): with the switch off every table is
//! made by `pmd_alloc()` and the PTE step, and freed by the level-by-level
//! walk of `free_pgd_range()`. Random maps, writes, moves and unmaps over
//! addresses that share or do not share PMD, PUD and PGD entries (so
//! chains are sometimes lone, sometimes not, and neighbouring VMAs set the
//! floor and ceiling) must leave the same observation (frames included),
//! the same events, kernel calls and rule hits, and the same statistics,
//! on both architectures, with the invariants checked after every step.
//! The switch also covers `free_pgd_range()` returning at once when no
//! PMD span over the range lies inside `[floor, ceiling)`
//! (`no_pte_span_inside()`: nothing can be freed; neighbouring VMAs here
//! put the floor and ceiling inside the range's spans).
//! The same runs compare the zap stretches of whole large folios that
//! take their first folio too (`core/folio.rs` `unmap_free_whole_large()`,
//! `ModelConfig::zap_first_folded`) with those that run it through the
//! general path as their template: the unmaps and moves of written
//! ranges here unmap whole folio runs from either end. And they compare
//! a tree that keeps a removed table's frame-index entry and slot for
//! the next table made at its frame (`ModelConfig::keep_table_index`)
//! with one that drops them at once, `Model::memory_bytes()` after every
//! step included.

mod common;

use proptest::prelude::*;
use ptlab_model::diag::{taken, Step};
use ptlab_model::{ArchKind, MapFlags, ModelConfig, MremapFlags, Prot, Sections};

const BASE: u64 = 0x7f00_0000_0000;
const M2: u64 = 2 << 20;
const G1: u64 = 1 << 30;
const G512: u64 = 512 << 30;

/// Where the steps map, write, move and unmap: in one PMD span, across a
/// PMD boundary, in the next PUD span and the next PGD span, and below.
const SLOTS: [u64; 10] = [
    BASE,
    BASE + 0x5000,
    BASE + M2 - 0x3000,
    BASE + M2,
    BASE + 2 * M2,
    BASE + G1,
    BASE + G1 + M2,
    BASE + G512,
    BASE + G512 + G1 - M2,
    BASE - M2,
];

#[derive(Clone, Debug)]
enum Op {
    Map { slot: usize, pages: u64 },
    Write { slot: usize, pages: u64 },
    Unmap { slot: usize, pages: u64 },
    Move { slot: usize, pages: u64, to: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0..SLOTS.len();
    let n = 1u64..=300;
    prop_oneof![
        (s.clone(), n.clone()).prop_map(|(slot, pages)| Op::Map { slot, pages }),
        (s.clone(), n.clone()).prop_map(|(slot, pages)| Op::Write { slot, pages }),
        (s.clone(), n.clone()).prop_map(|(slot, pages)| Op::Unmap { slot, pages }),
        (s.clone(), n, s).prop_map(|(slot, pages, to)| Op::Move { slot, pages, to }),
    ]
}

struct Outcome {
    text: String,
    /// `Model::memory_bytes()` after every step.
    memory: Vec<usize>,
    events: ptlab_model::HwEvents,
    coverage: ptlab_model::core::rules::Coverage,
    stats: String,
}

fn run(arch: ArchKind, order: u8, ops: &[Op], chain: bool, fold: bool, keep: bool) -> Outcome {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.table_chain_steps = chain;
    cfg.zap_first_folded = fold;
    cfg.keep_table_index = keep;
    let mut m = common::mthp_model(cfg, &[order]);
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let rw = Prot::READ | Prot::WRITE;
    let mut text = String::new();
    let mut memory = Vec::new();
    for op in ops {
        let r = match *op {
            Op::Map { slot, pages } => format!("{:?}", m.mmap(1, SLOTS[slot], pages * 4096, rw, f)),
            Op::Write { slot, pages } => {
                format!(
                    "{:?}",
                    m.access_range(1, SLOTS[slot], pages * 4096, true, None)
                )
            }
            Op::Unmap { slot, pages } => format!("{:?}", m.munmap(1, SLOTS[slot], pages * 4096)),
            Op::Move { slot, pages, to } => {
                let fl = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                let len = pages * 4096;
                format!(
                    "{:?}",
                    m.mremap(1, SLOTS[slot], len, len, fl, SLOTS[to] + (8 << 20))
                )
            }
        };
        text.push_str(&r);
        text.push('\n');
        if let Err(e) = m.check_invariants() {
            panic!(
                "chain steps {chain}, zap folded {fold}, kept index {keep}, after {op:?}: {e:#?}"
            );
        }
        memory.push(m.memory_bytes());
    }
    text.push_str(&m.observe(1, "p").render(Sections::ALL));
    Outcome {
        text,
        memory,
        events: m.hw_events(),
        coverage: m.coverage(),
        stats: format!("{:?}", m.phys().stats),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn table_chains_in_one_step_equal_level_by_level(
        order in prop::sample::select(vec![0u8, 2, 4, 9]),
        ops in prop::collection::vec(op(), 1..24),
    ) {
        for arch in ArchKind::ALL {
            let on = run(arch, order, &ops, true, true, true);
            // Each switch off alone: chains level by level; zap stretches
            // with their first folio's batch as the template; removed
            // tables' index entries and slots not kept.
            for (chain, fold, keep) in [(false, true, true), (true, false, true), (true, true, false)] {
                let off = run(arch, order, &ops, chain, fold, keep);
                let what = (arch, chain, fold, keep);
                prop_assert_eq!(&on.text, &off.text, "observation, {:?}", what);
                // The kept index must not change `memory_bytes()` (the
                // other two switches are not held to it: with the first
                // folio's batch as the template the folio records after a
                // partial unmap take other room).
                if !keep {
                    prop_assert_eq!(&on.memory, &off.memory, "memory_bytes(), {:?}", what);
                }
                prop_assert_eq!(on.events, off.events, "events and calls, {:?}", what);
                prop_assert_eq!(&on.coverage, &off.coverage, "rule hits, {:?}", what);
                prop_assert_eq!(&on.stats, &off.stats, "statistics, {:?}", what);
            }
        }
    }
}

/// The seed workload's rounds (map 1 MiB, write, mremap 1 MiB up,
/// munmap) make and free one lone chain per round with the switch on
/// and none with it off, and everything observed and counted is equal;
/// an unmap that leaves another VMA in the PMD span frees no chain.
#[test]
fn seed_rounds_take_chain_steps_with_equal_counts() {
    for arch in ArchKind::ALL {
        let mut seen = Vec::new();
        for chain in [true, false] {
            let mut cfg = ModelConfig::for_arch(arch);
            cfg.table_chain_steps = chain;
            let mut m = common::mthp_model(cfg, &[4]);
            let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
            let rw = Prot::READ | Prot::WRITE;
            let mv = MremapFlags::MAYMOVE | MremapFlags::FIXED;
            let size = 1u64 << 20;
            let (a0, f0) = (taken(Step::ChainAlloc), taken(Step::ChainFree));
            let n0 = taken(Step::FreeNothing);
            for _ in 0..3 {
                m.mmap(1, BASE, size, rw, f).unwrap();
                m.access_range(1, BASE, size, true, None).unwrap();
                let q = m.mremap(1, BASE, size, size, mv, BASE + size).unwrap();
                m.munmap(1, q, size).unwrap();
                m.check_invariants().unwrap();
            }
            let (a1, f1) = (taken(Step::ChainAlloc) - a0, taken(Step::ChainFree) - f0);
            // mremap's unmap of the range it left: its PMD span reaches
            // into the moved VMA (the ceiling), so nothing can be freed.
            let nothing = taken(Step::FreeNothing) - n0;
            // Two VMAs in one PMD span: the first unmap frees no table.
            m.mmap(1, BASE, 8192, rw, f).unwrap();
            m.mmap(1, BASE + 0x10000, 8192, rw, f).unwrap();
            m.access_range(1, BASE, 8192, true, None).unwrap();
            m.access_range(1, BASE + 0x10000, 8192, true, None).unwrap();
            let before = taken(Step::ChainFree);
            m.munmap(1, BASE, 8192).unwrap();
            let shared = taken(Step::ChainFree) - before;
            m.munmap(1, BASE + 0x10000, 8192).unwrap();
            let last = taken(Step::ChainFree) - before - shared;
            m.check_invariants().unwrap();
            if chain {
                assert_eq!(
                    (a1, f1),
                    (3, 3),
                    "{arch:?}: one chain made and freed per round"
                );
                assert_eq!((shared, last), (0, 1), "{arch:?}");
                assert_eq!(nothing, 3, "{arch:?}: one early return per round");
            } else {
                assert_eq!(
                    (a1, f1, shared, last, nothing),
                    (0, 0, 0, 0, 0),
                    "{arch:?}: switch off"
                );
            }
            let obs = m.observe(1, "p").render(Sections::ALL);
            seen.push((
                obs,
                m.hw_events(),
                format!("{:?}", m.phys().stats),
                m.coverage(),
            ));
        }
        assert_eq!(seen[0], seen[1], "{arch:?}");
    }
}
