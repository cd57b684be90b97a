//! Run-length PTE tables (issue 14) against dense ones: a PTE table that
//! is a few affine runs is stored as runs (`core/pgtable/store.rs`), which
//! must change nothing anyone sees. The same random sequence — faults of
//! order-0, 16 KiB, 64 KiB and PMD folios, MADV_DONTNEED/FREE/PAGEOUT/COLD,
//! guard markers, mprotect, mremap moves, fork and exit, swap — is run
//! with run-length storage (`ModelConfig::pte_runs`, the default) and with
//! every table dense, on both architectures: the observation of every
//! process (pages, pagemap, folios, tables), the hardware events and
//! kernel-function calls, the rule hits and each step's result must be
//! equal, and the invariants hold after every step of both.

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
    /// PTE tables stored as runs at the end (0 with `pte_runs` off).
    compact: usize,
}

fn run(arch: ArchKind, orders: &[u8], ops: &[Op], pte_runs: bool) -> Outcome {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.pte_runs = pte_runs;
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
            panic!("pte_runs {pte_runs}, after {op:?}: {e:#?}");
        }
    }
    for &p in &procs {
        text.push_str(&m.observe(p, &format!("p{p}")).render(Sections::ALL));
    }
    Outcome {
        text,
        events: m.hw_events(),
        coverage: m.coverage(),
        compact: m.pte_table_counts().0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn run_length_tables_equal_dense_tables(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        for arch in ArchKind::ALL {
            let runs = run(arch, &orders, &ops, true);
            let dense = run(arch, &orders, &ops, false);
            prop_assert_eq!(dense.compact, 0);
            prop_assert_eq!(&runs.text, &dense.text, "observation, {:?}", arch);
            prop_assert_eq!(runs.events, dense.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&runs.coverage, &dense.coverage, "rule hits, {:?}", arch);
        }
    }
}

/// The property above compares something: populated large folios and
/// order-0 pages faulted in address order leave compact tables, and they
/// cost less model memory than dense ones.
#[test]
fn populated_tables_are_stored_as_runs() {
    for arch in ArchKind::ALL {
        for order in [0u8, 4, 9] {
            let mut mem = Vec::new();
            for pte_runs in [true, false] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.pte_runs = pte_runs;
                let mut m = Model::new(cfg);
                m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
                if order > 0 {
                    m.set_thp(ThpKnob::Size(order), ThpMode::Always).unwrap();
                }
                let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
                m.access_range(1, BASE, ARENA, true, None).unwrap();
                if order == 9 {
                    // PTE-mapped THPs: split every PMD as the seeds do.
                    for slot in (BASE..BASE + ARENA).step_by(1 << 21) {
                        m.madvise(1, slot, 4096, Advice::DontFork).unwrap();
                        m.madvise(1, slot, 4096, Advice::DoFork).unwrap();
                    }
                }
                m.compact_pte_tables();
                let (compact, total) = m.pte_table_counts();
                assert_eq!(total, (ARENA >> 21) as usize, "{arch:?} order {order}");
                if pte_runs {
                    assert_eq!(compact, total, "{arch:?} order {order}");
                } else {
                    assert_eq!(compact, 0);
                }
                m.check_invariants().unwrap();
                mem.push(m.memory_bytes());
            }
            assert!(mem[0] < mem[1], "{arch:?} order {order}: {mem:?}");
        }
    }
}
