//! fork: random states and random follow-up accesses give identical
//! observable state with fork's PTE batching on and off (byte-identical
//! text on x86-64; identical observations on arm64, where the contiguous
//! bit is invisible to /proc), and keep every invariant.

mod common;

use proptest::prelude::*;
use ptlab_model::{
    Advice, ArchKind, Before, MapFlags, Model, ModelConfig, Prot, Sections, ThpKnob, ThpMode,
};

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 4 << 20;

#[derive(Clone, Debug)]
enum Op {
    Write { proc: usize, off: u64 },
    Read { proc: usize, off: u64 },
    DontNeed { proc: usize, off: u64, len: u64 },
    Fork { proc: usize },
    Exit { proc: usize },
    Advise { off: u64, len: u64, advice: Advice },
}

fn off() -> impl Strategy<Value = u64> {
    common::offset_4k_64k(ARENA)
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..32u64).prop_map(|p| p * 4096),
        (1..8u64).prop_map(|p| p * 0x10000)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..3usize, off()).prop_map(|(proc, off)| Op::Write { proc, off }),
        2 => (0..3usize, off()).prop_map(|(proc, off)| Op::Read { proc, off }),
        2 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::DontNeed { proc, off, len }),
        2 => (0..3usize).prop_map(|proc| Op::Fork { proc }),
        1 => (1..3usize).prop_map(|proc| Op::Exit { proc }),
        1 => (off(), len(), prop_oneof![Just(Advice::DontFork), Just(Advice::WipeOnFork), Just(Advice::DoFork), Just(Advice::HugePage)])
            .prop_map(|(off, len, advice)| Op::Advise { off, len, advice }),
    ]
}

/// Populate the arena with a mix of folio sizes, then apply `ops`. Returns
/// the model and the rendering of every live process.
fn run(arch: ArchKind, before: Before, orders: &[u8], ops: &[Op]) -> (Model, String) {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    let mut m = Model::new(cfg);
    for &o in orders {
        m.set_thp(ThpKnob::Size(o), ThpMode::Always).unwrap();
    }
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
    m.madvise(1, BASE + ARENA / 2, ARENA / 2, Advice::HugePage)
        .unwrap();
    let mut procs: Vec<u32> = vec![1];
    for op in ops {
        match *op {
            Op::Write { proc, off } => {
                if let Some(&p) = procs.get(proc) {
                    let _ = m.write(p, BASE + off, off);
                }
            }
            Op::Read { proc, off } => {
                if let Some(&p) = procs.get(proc) {
                    let _ = m.read(p, BASE + off);
                }
            }
            Op::DontNeed { proc, off, len } => {
                if let Some(&p) = procs.get(proc) {
                    let _ = m.madvise(p, BASE + off, len, Advice::DontNeed);
                }
            }
            Op::Fork { proc } => {
                if let Some(&p) = procs.get(proc) {
                    if procs.len() < 4 {
                        procs.push(m.fork(p).unwrap());
                    }
                }
            }
            Op::Exit { proc } => {
                if proc < procs.len() {
                    let p = procs.remove(proc);
                    m.exit(p).unwrap();
                }
            }
            Op::Advise { off, len, advice } => {
                let _ = m.madvise(1, BASE + off, len, advice);
            }
        }
        if let Err(e) = m.check_invariants() {
            panic!("after {op:?}: {e:#?}");
        }
    }
    let text: String = procs
        .iter()
        .map(|&p| m.observe(p, &format!("p{p}")).render(Sections::ALL))
        .collect();
    (m, text)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn fork_batching_is_unobservable(
        orders in prop::sample::subsequence(vec![2u8, 4, 5, 9], 0..=4),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        for arch in ArchKind::ALL {
            let (_, after) = run(arch, Before::empty(), &orders, &ops);
            let (_, before) = run(arch, Before::FORK_PTE_BATCH, &orders, &ops);
            prop_assert_eq!(&after, &before, "{:?}", arch);
        }
    }
}
