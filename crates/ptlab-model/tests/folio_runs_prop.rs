//! Folio-run records (issue 14) against one record per folio: the model
//! keeps one large-folio record per run of identical folios
//! (`core/folio.rs` `FolioRun`), split when an operation touches one folio
//! of a run and joined again when neighbours agree, which must change
//! nothing anyone sees. The same random sequence — faults of order-0,
//! 16 KiB, 64 KiB and PMD folios, writes, MADV_DONTNEED/FREE/PAGEOUT/COLD,
//! guard markers, mprotect, mremap moves, fork and exit, swap — is run
//! with folio runs (`ModelConfig::folio_runs`, the default) and with one
//! record per folio, on both architectures: the observation of every
//! process (pages, pagemap, folios, tables), the hardware events and
//! kernel-function calls, the rule hits and each step's result must be
//! equal, and the invariants (recomputed from the page tables) hold after
//! every step of both.

mod common;

use proptest::prelude::*;
use ptlab_model::{
    Advice, ArchKind, MapFlags, Model, ModelConfig, MremapFlags, Prot, Sections, ThpKnob, ThpMode,
};

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 8 << 20;
/// Where mremap moves go (a second arena, unmapped at the start).
const DST: u64 = BASE + (64 << 20);

#[derive(Clone, Debug)]
enum Op {
    Write {
        proc: usize,
        off: u64,
        len: u64,
    },
    Read {
        proc: usize,
        off: u64,
    },
    Advise {
        proc: usize,
        off: u64,
        len: u64,
        advice: Advice,
    },
    Protect {
        proc: usize,
        off: u64,
        len: u64,
        prot: u8,
    },
    Move {
        proc: usize,
        off: u64,
        len: u64,
        to: u64,
    },
    Fork {
        proc: usize,
    },
    Exit {
        proc: usize,
    },
}

fn off() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0..ARENA / 4096).prop_map(|p| p * 4096),
        (0..ARENA / 0x10000).prop_map(|p| p * 0x10000),
        (0..ARENA / 0x20_0000).prop_map(|p| p * 0x20_0000),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..32u64).prop_map(|p| p * 4096),
        (1..8u64).prop_map(|p| p * 0x10000),
        (1..3u64).prop_map(|p| p * 0x20_0000),
        Just(ARENA)
    ]
}

fn advice() -> impl Strategy<Value = Advice> {
    prop_oneof![
        Just(Advice::DontNeed),
        Just(Advice::Free),
        Just(Advice::PageOut),
        Just(Advice::Cold),
        Just(Advice::GuardInstall),
        Just(Advice::GuardRemove),
        Just(Advice::DontFork),
        Just(Advice::DoFork),
        Just(Advice::NoHugePage),
        Just(Advice::Collapse),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::Write { proc, off, len }),
        2 => (0..3usize, off()).prop_map(|(proc, off)| Op::Read { proc, off }),
        3 => (0..3usize, off(), len(), advice())
            .prop_map(|(proc, off, len, advice)| Op::Advise { proc, off, len, advice }),
        3 => (0..3usize, off(), len(), 0..3u8)
            .prop_map(|(proc, off, len, prot)| Op::Protect { proc, off, len, prot }),
        1 => (0..3usize, off(), len(), off())
            .prop_map(|(proc, off, len, to)| Op::Move { proc, off, len, to }),
        2 => (0..3usize).prop_map(|proc| Op::Fork { proc }),
        1 => (1..3usize).prop_map(|proc| Op::Exit { proc }),
    ]
}

struct Outcome {
    /// Each step's result, then every live process's rendering.
    text: String,
    events: ptlab_model::HwEvents,
    coverage: ptlab_model::core::rules::Coverage,
    /// Large-folio records at the end.
    records: usize,
}

fn run(arch: ArchKind, orders: &[u8], ops: &[Op], folio_runs: bool) -> Outcome {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.folio_runs = folio_runs;
    let mut m = Model::new(cfg);
    m.set_swap(64 << 20).unwrap();
    m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
    for &o in orders {
        m.set_thp(ThpKnob::Size(o), ThpMode::Always).unwrap();
    }
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
    let mut procs: Vec<u32> = vec![1];
    let mut text = String::new();
    for op in ops {
        let r = match *op {
            Op::Write { proc, off, len } => procs.get(proc).map(|&p| {
                format!(
                    "{:?}",
                    m.access_range(p, BASE + off, len.min(ARENA - off), true, None)
                )
            }),
            Op::Read { proc, off } => procs
                .get(proc)
                .map(|&p| format!("{:?}", m.read(p, BASE + off))),
            Op::Advise {
                proc,
                off,
                len,
                advice,
            } => procs.get(proc).map(|&p| {
                format!(
                    "{:?}",
                    m.madvise(p, BASE + off, len.min(ARENA - off), advice)
                )
            }),
            Op::Protect {
                proc,
                off,
                len,
                prot,
            } => procs.get(proc).map(|&p| {
                let prot = match prot {
                    0 => Prot::empty(),
                    1 => Prot::READ,
                    _ => Prot::READ | Prot::WRITE,
                };
                format!(
                    "{:?}",
                    m.mprotect(p, BASE + off, len.min(ARENA - off), prot)
                )
            }),
            Op::Move { proc, off, len, to } => procs.get(proc).map(|&p| {
                let len = len.min(ARENA - off);
                let fl = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                format!("{:?}", m.mremap(p, BASE + off, len, len, fl, DST + to))
            }),
            Op::Fork { proc } => match procs.get(proc) {
                Some(&p) if procs.len() < 4 => {
                    let c = m.fork(p);
                    if let Ok(c) = c {
                        procs.push(c);
                    }
                    Some(format!("{c:?}"))
                }
                _ => None,
            },
            Op::Exit { proc } => (proc < procs.len()).then(|| {
                let p = procs.remove(proc);
                format!("{:?}", m.exit(p))
            }),
        };
        if let Some(r) = r {
            text.push_str(&r);
            text.push('\n');
        }
        if let Err(e) = m.check_invariants() {
            panic!("folio_runs {folio_runs}, after {op:?}: {e:#?}");
        }
    }
    for &p in &procs {
        text.push_str(&m.observe(p, &format!("p{p}")).render(Sections::ALL));
    }
    Outcome {
        text,
        events: m.hw_events(),
        coverage: m.coverage(),
        records: m.large_folio_records(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn folio_runs_equal_one_record_per_folio(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        for arch in ArchKind::ALL {
            let runs = run(arch, &orders, &ops, true);
            let each = run(arch, &orders, &ops, false);
            prop_assert!(runs.records <= each.records);
            prop_assert_eq!(&runs.text, &each.text, "observation, {:?}", arch);
            prop_assert_eq!(runs.events, each.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&runs.coverage, &each.coverage, "rule hits, {:?}", arch);
        }
    }
}

/// The property above compares something: a populated range of 64 KiB or
/// 16 KiB folios, written in address order, forked, mprotected and with
/// the child gone, is held in far fewer records than folios, and costs
/// less model memory than one record per folio; a write to one folio in
/// the middle splits its run, and writing it back as it was joins it again.
#[test]
fn populated_folios_are_held_as_runs() {
    for arch in ArchKind::ALL {
        for order in [2u8, 4] {
            let mut seen = Vec::new();
            for folio_runs in [true, false] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.folio_runs = folio_runs;
                let mut m = Model::new(cfg);
                m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
                m.set_thp(ThpKnob::Size(order), ThpMode::Always).unwrap();
                let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
                m.access_range(1, BASE, ARENA, true, None).unwrap();
                let folios = (ARENA >> (12 + order)) as usize;
                let populated = m.large_folio_records();
                let child = m.fork(1).unwrap();
                m.mprotect(1, BASE, ARENA, Prot::READ).unwrap();
                m.exit(child).unwrap();
                let after = m.large_folio_records();
                m.check_invariants().unwrap();
                let mem = m.memory_bytes();
                // One folio in the middle written alone, then the range
                // made writable and written in address order again.
                m.mprotect(1, BASE, ARENA, Prot::READ | Prot::WRITE)
                    .unwrap();
                let mid = BASE + ARENA / 2 + 4096;
                m.access_range(1, mid, 4096, true, Some(7)).unwrap();
                let split = m.large_folio_records();
                m.access_range(1, BASE, ARENA, true, None).unwrap();
                let joined = m.large_folio_records();
                m.check_invariants().unwrap();
                if folio_runs {
                    assert!(
                        populated * 16 <= folios,
                        "{arch:?} order {order}: {populated} records"
                    );
                    assert_eq!(after, populated, "{arch:?} order {order}");
                    assert!(
                        split > after && split <= after + 2,
                        "{arch:?} order {order}"
                    );
                    assert_eq!(
                        joined,
                        after,
                        "{arch:?} order {order}: {:?}",
                        (populated, after, split, joined)
                    );
                } else {
                    assert_eq!(
                        (populated, after, split, joined),
                        (folios, folios, folios, folios)
                    );
                }
                seen.push(mem);
            }
            assert!(seen[0] < seen[1], "{arch:?} order {order}: {seen:?}");
        }
    }
}
