//! The buddy's replay journal (issue 14, `core/phys/replay.rs`,
//! `ModelConfig::buddy_replay`): requests that repeat a closed cycle of
//! allocations and frees are answered from the journal, their free-list
//! operations deferred, until a request differs or something else uses
//! the lists. Loops of maps, writes (order-0 pages, 16 KiB, 64 KiB and
//! PMD folios), moves and unmaps — the seed mremap-batch-64k's iteration
//! among them — repeated several times with steps changed, added or
//! dropped between passes (so the journal closes, replays, and meets
//! requests it did not record in the middle of a cycle), plus forks,
//! exits and MADV_PAGEOUT (frees deferred by a zap, allocations of swap),
//! must leave the same observation (frames included), each step's result,
//! the same events, kernel calls and rule hits, statistics and
//! `Model::memory_bytes()` after every step with the journal on and off,
//! on both architectures, with the invariants checked after every step.

mod common;

use proptest::prelude::*;
use ptlab_model::{Advice, ArchKind, MapFlags, ModelConfig, MremapFlags, Prot, Sections};

const BASE: u64 = 0x7f00_0000_0000;
const M1: u64 = 1 << 20;

#[derive(Clone, Debug)]
enum Op {
    Map { slot: u64, pages: u64 },
    Write { slot: u64, pages: u64 },
    Unmap { slot: u64, pages: u64 },
    Move { slot: u64, pages: u64, to: u64 },
    PageOut { slot: u64, pages: u64 },
    Fork,
    Exit,
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0..6u64;
    let n = prop_oneof![1u64..=32, Just(256u64), 200u64..=300];
    prop_oneof![
        3 => (s.clone(), n.clone()).prop_map(|(slot, pages)| Op::Map { slot, pages }),
        3 => (s.clone(), n.clone()).prop_map(|(slot, pages)| Op::Write { slot, pages }),
        3 => (s.clone(), n.clone()).prop_map(|(slot, pages)| Op::Unmap { slot, pages }),
        2 => (s.clone(), n.clone(), s.clone()).prop_map(|(slot, pages, to)| Op::Move { slot, pages, to }),
        1 => (s, n).prop_map(|(slot, pages)| Op::PageOut { slot, pages }),
        1 => Just(Op::Fork),
        1 => Just(Op::Exit),
    ]
}

/// The seed's iteration at slot `s`: map 1 MiB, write it, move it 1 MiB
/// up, unmap it.
fn seed_body(s: u64) -> Vec<Op> {
    vec![
        Op::Map {
            slot: s,
            pages: 256,
        },
        Op::Write {
            slot: s,
            pages: 256,
        },
        Op::Move {
            slot: s,
            pages: 256,
            to: s + 1,
        },
        Op::Unmap {
            slot: s + 1,
            pages: 256,
        },
    ]
}

/// A loop: a body run `passes` times; `edits[k]` changes pass `k`'s body
/// (0: as it is; 1: one step dropped; 2: one step added; 3: one step
/// replaced), `at` picks the step.
#[derive(Clone, Debug)]
struct Loop {
    body: Vec<Op>,
    passes: usize,
    edits: Vec<(u8, usize, Op)>,
}

fn a_loop() -> impl Strategy<Value = Loop> {
    let body = prop_oneof![
        (0..4u64).prop_map(seed_body),
        prop::collection::vec(op(), 1..8),
    ];
    (
        body,
        2usize..10,
        prop::collection::vec((0..4u8, 0usize..8, op()), 10),
    )
        .prop_map(|(body, passes, edits)| Loop {
            body,
            passes,
            edits,
        })
}

struct Outcome {
    text: String,
    memory: Vec<usize>,
    events: ptlab_model::HwEvents,
    coverage: ptlab_model::core::rules::Coverage,
    stats: String,
}

fn run(arch: ArchKind, order: u8, loops: &[Loop], replay: bool) -> Outcome {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.buddy_replay = replay;
    let mut m = common::mthp_model(cfg, &[order]);
    m.set_swap(64 << 20).unwrap();
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let rw = Prot::READ | Prot::WRITE;
    let addr = |slot: u64| BASE + slot * M1;
    let mut text = String::new();
    let mut memory = Vec::new();
    let mut procs: Vec<u32> = vec![1];
    for l in loops {
        for pass in 0..l.passes {
            let mut body = l.body.clone();
            let (kind, at, ref extra) = l.edits[pass % l.edits.len()];
            let at = at % body.len();
            match kind {
                1 if body.len() > 1 => {
                    body.remove(at);
                }
                2 => body.insert(at, extra.clone()),
                3 => body[at] = extra.clone(),
                _ => {}
            }
            for op in &body {
                let r = match *op {
                    Op::Map { slot, pages } => {
                        format!("{:?}", m.mmap(1, addr(slot), pages * 4096, rw, f))
                    }
                    Op::Write { slot, pages } => {
                        format!(
                            "{:?}",
                            m.access_range(1, addr(slot), pages * 4096, true, None)
                        )
                    }
                    Op::Unmap { slot, pages } => {
                        format!("{:?}", m.munmap(1, addr(slot), pages * 4096))
                    }
                    Op::Move { slot, pages, to } => {
                        let fl = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                        let len = pages * 4096;
                        format!(
                            "{:?}",
                            m.mremap(1, addr(slot), len, len, fl, addr(to) + (8 << 20))
                        )
                    }
                    Op::PageOut { slot, pages } => format!(
                        "{:?}",
                        m.madvise(1, addr(slot), pages * 4096, Advice::PageOut)
                    ),
                    Op::Fork if procs.len() < 3 => {
                        let c = m.fork(1);
                        if let Ok(c) = c {
                            procs.push(c);
                        }
                        format!("{c:?}")
                    }
                    Op::Exit if procs.len() > 1 => {
                        let p = procs.pop().unwrap();
                        format!("{:?}", m.exit(p))
                    }
                    _ => String::new(),
                };
                text.push_str(&r);
                text.push('\n');
                if let Err(e) = m.check_invariants() {
                    panic!("buddy replay {replay}, after {op:?}: {e:#?}");
                }
                memory.push(m.memory_bytes());
            }
        }
    }
    for &p in &procs {
        text.push_str(&m.observe(p, &format!("p{p}")).render(Sections::ALL));
    }
    Outcome {
        text,
        memory,
        events: m.hw_events(),
        coverage: m.coverage(),
        stats: format!("{:?}", m.phys().stats),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn replayed_buddy_equals_the_plain_one(
        order in prop::sample::select(vec![0u8, 2, 4, 9]),
        loops in prop::collection::vec(a_loop(), 1..4),
    ) {
        for arch in ArchKind::ALL {
            let on = run(arch, order, &loops, true);
            let off = run(arch, order, &loops, false);
            prop_assert_eq!(&on.text, &off.text, "observation, {:?}", arch);
            prop_assert_eq!(&on.memory, &off.memory, "memory_bytes, {:?}", arch);
            prop_assert_eq!(on.events, off.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&on.coverage, &off.coverage, "rule hits, {:?}", arch);
            prop_assert_eq!(&on.stats, &off.stats, "statistics, {:?}", arch);
        }
    }
}

/// The seed's loop, with a pass changed now and then, ends in the same
/// state with the journal on and off (the property above, fixed).
#[test]
fn the_seed_loop_with_edits() {
    let loops = vec![Loop {
        body: seed_body(0),
        passes: 40,
        edits: vec![
            (0, 0, Op::Fork),
            (0, 0, Op::Fork),
            (2, 2, Op::Write { slot: 0, pages: 3 }),
            (0, 0, Op::Fork),
            (1, 3, Op::Fork),
            (0, 0, Op::Fork),
            (3, 1, Op::Write { slot: 0, pages: 17 }),
            (0, 0, Op::Fork),
            (
                2,
                0,
                Op::PageOut {
                    slot: 0,
                    pages: 256,
                },
            ),
        ],
    }];
    for arch in ArchKind::ALL {
        for order in [0u8, 4] {
            let on = run(arch, order, &loops, true);
            let off = run(arch, order, &loops, false);
            assert_eq!(on.text, off.text, "{arch:?} order {order}");
            assert_eq!(on.memory, off.memory);
            assert_eq!(on.events, off.events);
            assert_eq!(on.coverage, off.coverage);
            assert_eq!(on.stats, off.stats);
        }
    }
}
