//! The per-segment loops (fork's and mprotect's runs of order-0 pages,
//! zap's one-pass segment clear with its folio batches, folio_pte_batch()'s
//! raw scan, mremap's move_ptes() runs, the raw set_ptes()/wrprotect_ptes())
//! against the entry-by-entry loops they stand for: the model takes the entry-by-entry
//! path while an observer records marks (`set_hw_tracing`), so the same
//! random sequence run with and without tracing must give the same
//! observation, the same hardware events and kernel-function calls, and
//! the same rule hits — on both architectures, with 6.18's batching and
//! with the seed changes switched back. The folio mix (order-0, 16 KiB,
//! 64 KiB, 2 MiB THPs split to PTEs by partial mprotect/madvise/DONTFORK)
//! gives arm64 folded CONT blocks next to order-0 runs, so its loops
//! (mm/contpte_runs.rs) meet fold, unfold and the block-end fold tries.

mod common;

use proptest::prelude::*;
use ptlab_model::{
    uapi::MremapFlags, Advice, ArchKind, Before, MapFlags, ModelConfig, Prot, Sections,
};

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 4 << 20;
/// Where `Mremap` moves to (and back from): a second arena, 64 MiB up.
const BASE2: u64 = BASE + (64 << 20);

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
    DontNeed {
        proc: usize,
        off: u64,
        len: u64,
    },
    Protect {
        proc: usize,
        off: u64,
        len: u64,
        /// 0: PROT_NONE, 1: read-only, 2: read-write.
        prot: u8,
    },
    Fork {
        proc: usize,
    },
    Exit {
        proc: usize,
    },
    Advise {
        off: u64,
        len: u64,
        advice: Advice,
    },
    /// mremap(MAYMOVE | FIXED) of `[off, off + len)` to the same offset in
    /// the second arena, or (`back`) from there to the first.
    Mremap {
        proc: usize,
        off: u64,
        len: u64,
        back: bool,
    },
    /// mlock (zaps of a locked VMA munlock their folios) or munlock.
    Lock {
        off: u64,
        len: u64,
        on: bool,
    },
}

fn off() -> impl Strategy<Value = u64> {
    common::offset_4k_64k(ARENA)
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..32u64).prop_map(|p| p * 4096),
        (1..8u64).prop_map(|p| p * 0x10000),
        Just(ARENA)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::Write { proc, off, len }),
        2 => (0..3usize, off()).prop_map(|(proc, off)| Op::Read { proc, off }),
        2 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::DontNeed { proc, off, len }),
        4 => (0..3usize, off(), len(), 0..3u8)
            .prop_map(|(proc, off, len, prot)| Op::Protect { proc, off, len, prot }),
        2 => (0..3usize).prop_map(|proc| Op::Fork { proc }),
        1 => (1..3usize).prop_map(|proc| Op::Exit { proc }),
        1 => (off(), len(), prop_oneof![Just(Advice::DontFork), Just(Advice::DoFork), Just(Advice::HugePage), Just(Advice::NoHugePage)])
            .prop_map(|(off, len, advice)| Op::Advise { off, len, advice }),
        2 => (0..3usize, off(), len(), any::<bool>())
            .prop_map(|(proc, off, len, back)| Op::Mremap { proc, off, len, back }),
        1 => (off(), len(), any::<bool>()).prop_map(|(off, len, on)| Op::Lock { off, len, on }),
    ]
}

/// Apply `ops` (with hardware tracing on or off); the rendering of every
/// live process, the events and the rule hits at the end.
fn run(
    arch: ArchKind,
    before: Before,
    orders: &[u8],
    ops: &[Op],
    tracing: bool,
) -> (
    String,
    ptlab_model::HwEvents,
    ptlab_model::core::rules::Coverage,
) {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    let mut m = common::mthp_model(cfg, orders);
    m.set_hw_tracing(tracing);
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
    let mut procs: Vec<u32> = vec![1];
    for op in ops {
        match *op {
            Op::Write { proc, off, len } => {
                if let Some(&p) = procs.get(proc) {
                    let len = len.min(ARENA - off);
                    let _ = m.access_range(p, BASE + off, len, true, None);
                }
            }
            Op::Read { proc, off } => {
                if let Some(&p) = procs.get(proc) {
                    let _ = m.read(p, BASE + off);
                }
            }
            Op::DontNeed { proc, off, len } => {
                if let Some(&p) = procs.get(proc) {
                    let _ = m.madvise(p, BASE + off, len.min(ARENA - off), Advice::DontNeed);
                }
            }
            Op::Protect {
                proc,
                off,
                len,
                prot,
            } => {
                if let Some(&p) = procs.get(proc) {
                    let prot = match prot {
                        0 => Prot::empty(),
                        1 => Prot::READ,
                        _ => Prot::READ | Prot::WRITE,
                    };
                    let _ = m.mprotect(p, BASE + off, len.min(ARENA - off), prot);
                }
            }
            Op::Fork { proc } => {
                if let Some(&p) = procs.get(proc) {
                    if procs.len() < 4 {
                        procs.push(m.fork(p).unwrap());
                        if tracing {
                            m.set_hw_tracing(true); // the child's sink too
                        }
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
                let _ = m.madvise(1, BASE + off, len.min(ARENA - off), advice);
            }
            Op::Mremap {
                proc,
                off,
                len,
                back,
            } => {
                if let Some(&p) = procs.get(proc) {
                    let len = len.min(ARENA - off);
                    let (from, to) = if back {
                        (BASE2 + off, BASE + off)
                    } else {
                        (BASE + off, BASE2 + off)
                    };
                    let f = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                    let _ = m.mremap(p, from, len, len, f, to);
                }
            }
            Op::Lock { off, len, on } => {
                let len = len.min(ARENA - off);
                let _ = if on {
                    m.mlock(1, BASE + off, len, false)
                } else {
                    m.munlock(1, BASE + off, len)
                };
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
    (text, m.hw_events(), m.coverage())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn segment_loops_equal_entry_loops(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
        seed_before in any::<bool>(),
    ) {
        let before = if seed_before {
            Before::FORK_PTE_BATCH | Before::MPROTECT_PTE_BATCH | Before::MREMAP_PTE_BATCH
        } else {
            Before::empty()
        };
        for arch in ArchKind::ALL {
            let segment = run(arch, before, &orders, &ops, false);
            let entry = run(arch, before, &orders, &ops, true);
            prop_assert_eq!(&segment.0, &entry.0, "observation, {:?}", arch);
            prop_assert_eq!(segment.1, entry.1, "events and calls, {:?}", arch);
            prop_assert_eq!(&segment.2, &entry.2, "rule hits, {:?}", arch);
        }
    }
}

/// arm64, one fixed sequence: 64 KiB folios (folded blocks) and order-0
/// pages in the same PTE tables, a fork, a partial mprotect and
/// copy-on-write writes. The per-segment loops (mm/contpte_runs.rs) and
/// the entry-by-entry hooks must agree, and the sequence must reach what
/// the loops count for the contpte layer: folds, unfolds, the
/// `contpte_try_unfold()` checks and the block-end fold tries — so that
/// dropping any of those counts from the loops fails this test.
#[test]
fn arm64_runs_next_to_folded_blocks() {
    let mib = 1 << 20;
    // The fold tries of fork's loop need an order-0 page whose PFN is the
    // last of its 16 at the last entry of a block: shift the allocator by
    // 0..16 pages (written at the arena's end first) to meet every phase.
    let mut e = ptlab_model::HwEvents::default();
    for shift in 0..16u64 {
        let ops = [
            Op::Advise {
                off: 3 * mib,
                len: mib,
                advice: Advice::NoHugePage,
            },
            Op::Write {
                proc: 0,
                off: ARENA - 0x10000,
                len: shift * 4096,
            },
            // Order-0 pages in [1 MiB, 2 MiB) and [3 MiB, 4 MiB), 64 KiB folios elsewhere.
            Op::Advise {
                off: mib,
                len: mib,
                advice: Advice::NoHugePage,
            },
            Op::Advise {
                off: 3 * mib,
                len: mib,
                advice: Advice::NoHugePage,
            },
            Op::Write {
                proc: 0,
                off: 0,
                len: ARENA,
            },
            Op::Fork { proc: 0 },
            Op::Protect {
                proc: 0,
                off: 0x8000,
                len: 2 * mib,
                prot: 1,
            },
            Op::Write {
                proc: 1,
                off: mib - 0x10000,
                len: 0x40000,
            },
            Op::Protect {
                proc: 0,
                off: 0,
                len: ARENA,
                prot: 2,
            },
            Op::Exit { proc: 1 },
            Op::Fork { proc: 0 },
        ];
        // 6.18, and mprotect before 6.17 (set_pte_at() per entry: the
        // block-end folds), fork's loops running in both.
        for before in [Before::empty(), Before::MPROTECT_PTE_BATCH] {
            let segment = run(ArchKind::Arm64, before, &[4], &ops, false);
            let entry = run(ArchKind::Arm64, before, &[4], &ops, true);
            assert_eq!(segment.0, entry.0, "{before:?} shift {shift}");
            assert_eq!(segment.1, entry.1, "{before:?} shift {shift}");
            assert_eq!(segment.2, entry.2, "{before:?} shift {shift}");
            e.add_all(&segment.1);
        }
    }
    use ptlab_model::core::hw::{HwEvent, KCall};
    for ev in [HwEvent::ContFold, HwEvent::ContUnfold] {
        assert!(e.get(ev) > 0, "{ev:?} not reached");
    }
    for k in [KCall::ContpteTryUnfold, KCall::ContpteTryFold] {
        assert!(e.calls(k) > 0, "{k:?} not reached");
    }
}
