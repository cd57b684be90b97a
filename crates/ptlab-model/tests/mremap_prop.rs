//! mremap: random states (mixed folio sizes, PMD THPs, partial unmaps and
//! DONTNEEDs, VMA edges from madvise and mmap) and random mremap arguments
//! (in-place shrink and growth, MAYMOVE, FIXED to 4 KiB/64 KiB/2 MiB
//! alignments, DONTUNMAP, multi-VMA ranges, invalid flags) give identical
//! results and identical observable state with each of the two mremap
//! seed-change switches on and off, on both architectures; every invariant
//! holds after every step.
//!
//! One kernel difference is kept out on purpose: a whole-table move leaves a
//! DONTUNMAP source without a PTE table where a per-PTE move leaves an empty
//! one, and a later fault there may then get a PMD THP only with table moves
//! (tests/scenarios/mr-s9-dontunmap-source-tables.ptl, checked live). So
//! once a DONTUNMAP has been tried, a case makes no more accesses.

mod common;

use proptest::prelude::*;
use ptlab_model::{
    Advice, ArchKind, Before, Errno, MapFlags, Model, ModelConfig, MremapFlags, Prot, Sections,
    ThpKnob, ThpMode,
};

const BASE: u64 = 0x7f00_0000_0000;
/// Sources live in the first 8 MiB, fixed destinations anywhere in 32 MiB.
const ARENA: u64 = 8 << 20;
const SPAN: u64 = 32 << 20;

#[derive(Clone, Debug)]
enum Op {
    Write {
        off: u64,
    },
    Read {
        off: u64,
    },
    DontNeed {
        off: u64,
        len: u64,
    },
    Munmap {
        off: u64,
        len: u64,
    },
    Mmap {
        off: u64,
        len: u64,
        ro: bool,
    },
    Advise {
        off: u64,
        len: u64,
        advice: Advice,
    },
    Mremap {
        off: u64,
        old_len: u64,
        new_len: u64,
        flags: u64,
        dest: u64,
    },
    /// mprotect read-only or read-write (write bits differ inside folios).
    Mprotect {
        off: u64,
        len: u64,
        ro: bool,
    },
    /// Fork once (shared, write-protected PTEs; fork-child VMAs).
    Fork,
    /// Later operations act in the other process (if there is one).
    Switch,
    /// A same-size move of whole 2 MiB slots (optionally starting 4 KiB
    /// in), to a destination with the same or another offset in its PMD:
    /// the shapes where PMDs and PTE tables can move whole.
    MoveSlots {
        slot: u64,
        n: u64,
        skew: u64,
        dest_slot: u64,
        dest_skew: u64,
        flags: u64,
    },
}

fn aligned_off(limit: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        (0..limit / 4096).prop_map(|p| p * 4096),
        (0..limit / 0x10000).prop_map(|p| p * 0x10000),
        (0..limit / 0x20_0000, 0..2u64).prop_map(|(p, k)| p * 0x20_0000 + k * 4096),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..24u64).prop_map(|p| p * 4096),
        (1..16u64).prop_map(|p| p * 0x10000),
        (1..4u64).prop_map(|p| p * 0x20_0000),
        (1..3u64).prop_map(|p| p * 0x20_0000 + 4096),
    ]
}

fn flags() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        3 => Just(1),         // MAYMOVE
        6 => Just(1 | 2),     // MAYMOVE | FIXED
        2 => Just(1 | 2 | 4), // + DONTUNMAP
        1 => Just(1 | 4),     // DONTUNMAP alone: new_addr is a hint
        1 => Just(2),         // FIXED without MAYMOVE: EINVAL
        1 => Just(8),         // undefined: EINVAL
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => aligned_off(ARENA).prop_map(|off| Op::Write { off }),
        1 => aligned_off(ARENA).prop_map(|off| Op::Read { off }),
        2 => (aligned_off(ARENA), len()).prop_map(|(off, len)| Op::DontNeed { off, len }),
        1 => (aligned_off(ARENA), len()).prop_map(|(off, len)| Op::Munmap { off, len }),
        1 => (aligned_off(SPAN), len(), any::<bool>())
            .prop_map(|(off, len, ro)| Op::Mmap { off, len, ro }),
        1 => (aligned_off(ARENA), len(), prop_oneof![
                Just(Advice::HugePage), Just(Advice::NoHugePage), Just(Advice::DontFork)])
            .prop_map(|(off, len, advice)| Op::Advise { off, len, advice }),
        8 => (aligned_off(ARENA), len(), prop_oneof![Just(None), len().prop_map(Some)],
              flags(), aligned_off(SPAN))
            .prop_map(|(off, old_len, new_len, flags, dest)| Op::Mremap {
                off, old_len, new_len: new_len.unwrap_or(old_len), flags, dest,
            }),
        2 => (aligned_off(ARENA), len(), any::<bool>())
            .prop_map(|(off, len, ro)| Op::Mprotect { off, len, ro }),
        1 => Just(Op::Fork),
        1 => Just(Op::Switch),
        6 => (0..4u64, 1..4u64, prop_oneof![Just(0u64), Just(4096)], 4..16u64,
               prop_oneof![Just(0u64), Just(4096)], prop_oneof![Just(3u64), Just(7)])
            .prop_map(|(slot, n, skew, dest_slot, dest_skew, flags)| Op::MoveSlots {
                slot, n, skew, dest_slot, dest_skew, flags,
            }),
    ]
}

type Outcome = (Vec<Result<u64, Errno>>, String);

/// Populate, apply `ops`, and return every mremap result plus the final
/// rendering of every process.
fn run(arch: ArchKind, before: Before, orders: &[u8], holes: &[bool], ops: &[Op]) -> Outcome {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    let mut m = Model::new(cfg);
    for &o in orders {
        m.set_thp(ThpKnob::Size(o), ThpMode::Always).unwrap();
    }
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, fixed)
        .unwrap();
    m.madvise(1, BASE + ARENA / 2, ARENA / 2, Advice::HugePage)
        .unwrap();
    // VMAs starting 4 KiB into a PMD with nothing below (realignment).
    for (slot, _) in holes.iter().enumerate().filter(|(_, h)| **h) {
        m.munmap(1, BASE + slot as u64 * 0x20_0000, 4096).unwrap();
    }
    let mut results = Vec::new();
    let mut accesses = true;
    let mut procs = vec![1];
    let mut cur = 1;
    for op in ops {
        match *op {
            Op::Mprotect { off, len, ro } => {
                let prot = if ro {
                    Prot::READ
                } else {
                    Prot::READ | Prot::WRITE
                };
                let _ = m.mprotect(cur, BASE + off, len, prot);
            }
            Op::Fork => {
                if procs.len() == 1 {
                    procs.push(m.fork(1).unwrap());
                }
            }
            Op::Switch => {
                cur = procs[(procs.iter().position(|&p| p == cur).unwrap() + 1) % procs.len()];
            }
            Op::Write { off } if accesses => {
                let _ = m.write(cur, BASE + off, off);
            }
            Op::Read { off } if accesses => {
                let _ = m.read(cur, BASE + off);
            }
            Op::Write { .. } | Op::Read { .. } => {}
            Op::DontNeed { off, len } => {
                let _ = m.madvise(cur, BASE + off, len, Advice::DontNeed);
            }
            Op::Munmap { off, len } => {
                let _ = m.munmap(cur, BASE + off, len);
            }
            Op::Mmap { off, len, ro } => {
                let prot = if ro {
                    Prot::READ
                } else {
                    Prot::READ | Prot::WRITE
                };
                let _ = m.mmap(cur, BASE + off, len, prot, fixed);
            }
            Op::Advise { off, len, advice } => {
                let _ = m.madvise(cur, BASE + off, len, advice);
            }
            Op::Mremap {
                off,
                old_len,
                new_len,
                flags,
                dest,
            } => {
                let f = MremapFlags::from_bits_retain(flags);
                if f.contains(MremapFlags::DONTUNMAP) {
                    accesses = false;
                }
                results.push(m.mremap(cur, BASE + off, old_len, new_len, f, BASE + dest));
            }
            Op::MoveSlots {
                slot,
                n,
                skew,
                dest_slot,
                dest_skew,
                flags,
            } => {
                let f = MremapFlags::from_bits_retain(flags);
                if f.contains(MremapFlags::DONTUNMAP) {
                    accesses = false;
                }
                let (from, to) = (slot * 0x20_0000 + skew, dest_slot * 0x20_0000 + dest_skew);
                let len = n * 0x20_0000 - skew;
                results.push(m.mremap(cur, BASE + from, len, len, f, BASE + to));
            }
        }
        if let Err(e) = m.check_invariants() {
            panic!("{arch:?} {before:?} after {op:?}: {e:#?}");
        }
    }
    let text = procs
        .iter()
        .map(|&p| m.observe(p, &format!("p{p}")).render(Sections::ALL))
        .collect();
    (results, text)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn mremap_switches_are_unobservable(
        orders in prop::sample::subsequence(vec![2u8, 4, 5, 9], 0..=4),
        holes in prop::collection::vec(any::<bool>(), 4),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        for arch in ArchKind::ALL {
            let after = run(arch, Before::empty(), &orders, &holes, &ops);
            for before in [
                Before::MREMAP_PTE_BATCH,
                Before::MREMAP_TABLE_MOVE,
                Before::MREMAP_PTE_BATCH | Before::MREMAP_TABLE_MOVE,
            ] {
                let other = run(arch, before, &orders, &holes, &ops);
                prop_assert_eq!(&after.0, &other.0, "{:?} {:?}: results", arch, before);
                prop_assert_eq!(&after.1, &other.1, "{:?} {:?}: state", arch, before);
            }
        }
    }
}
