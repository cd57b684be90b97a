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

/// Run-level writes (issue 14): mprotect, fork (the parent's
/// write-protect and the child's copy) and exit over whole tables of
/// 64 KiB folios and PTE-mapped THPs rewrite a compact table's runs
/// without making it dense (`store::made_dense()` does not move; user
/// writes over dirty entries change nothing), and every step gives the
/// same results, events, calls and rule hits as dense tables, on both
/// architectures. Copy-on-write faults after the fork write single
/// entries and may make tables dense.
#[test]
fn whole_table_writes_keep_tables_compact() {
    use ptlab_model::pgtable::store::made_dense;
    for arch in ArchKind::ALL {
        for order in [4u8, 9] {
            let mut outs = Vec::new();
            for pte_runs in [true, false] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.pte_runs = pte_runs;
                let mut m = Model::new(cfg);
                m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
                m.set_thp(ThpKnob::Size(order), ThpMode::Always).unwrap();
                let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
                m.access_range(1, BASE, ARENA, true, None).unwrap();
                if order == 9 {
                    for slot in (BASE..BASE + ARENA).step_by(1 << 21) {
                        m.madvise(1, slot, 4096, Advice::DontFork).unwrap();
                        m.madvise(1, slot, 4096, Advice::DoFork).unwrap();
                    }
                }
                m.compact_pte_tables();
                assert_eq!(
                    m.pte_table_counts().0,
                    (ARENA >> 21) as usize * usize::from(pte_runs)
                );
                let mut text = String::new();
                let mut dense = made_dense();
                let mut step =
                    |m: &mut Model, text: &mut String, what: &str, r: String, in_place: bool| {
                        text.push_str(&format!("{what}: {r}\n"));
                        m.check_invariants().unwrap();
                        if pte_runs && in_place {
                            let (compact, total) = m.pte_table_counts();
                            assert_eq!(compact, total, "{arch:?} order {order} after {what}");
                            assert_eq!(
                                made_dense(),
                                dense,
                                "{arch:?} order {order}: {what} made a table dense"
                            );
                        }
                        dense = made_dense();
                    };
                for _ in 0..2 {
                    let r = m.mprotect(1, BASE, ARENA, Prot::READ);
                    step(&mut m, &mut text, "mprotect r", format!("{r:?}"), true);
                    let r = m.mprotect(1, BASE, ARENA, Prot::READ | Prot::WRITE);
                    step(&mut m, &mut text, "mprotect rw", format!("{r:?}"), true);
                    let r = m.access_range(1, BASE, ARENA, true, None);
                    step(&mut m, &mut text, "write", format!("{r:?}"), true);
                }
                let c = m.fork(1).unwrap();
                step(&mut m, &mut text, "fork", format!("{c}"), true);
                let r = m.access_range(1, BASE, ARENA / 2, false, None);
                step(&mut m, &mut text, "read", format!("{r:?}"), true);
                text.push_str(&m.observe(c, "child").render(Sections::ALL));
                let r = m.exit(c);
                step(&mut m, &mut text, "exit", format!("{r:?}"), true);
                let r = m.access_range(1, BASE, ARENA, true, None);
                step(
                    &mut m,
                    &mut text,
                    "write after exit",
                    format!("{r:?}"),
                    false,
                );
                text.push_str(&m.observe(1, "parent").render(Sections::ALL));
                outs.push((text, m.hw_events(), m.coverage()));
            }
            assert_eq!(outs[0].0, outs[1].0, "{arch:?} order {order}");
            assert_eq!(outs[0].1, outs[1].1, "{arch:?} order {order}");
            assert_eq!(outs[0].2, outs[1].2, "{arch:?} order {order}");
        }
    }
}
