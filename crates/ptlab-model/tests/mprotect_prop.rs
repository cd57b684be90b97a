//! mprotect: random states (folio sizes 4K…2M, partial mappings, VMA edges
//! inside folios, fork-shared and exclusive pages, zero pages, PROT_NONE,
//! dirty/young/write bits set by faults) and random mprotect calls give
//! identical results with the 6.17 PTE batching on and off
//! (`Before::MPROTECT_PTE_BATCH`), on both architectures:
//!
//! * byte-identical /proc text (maps, smaps flags, pagemap/kpageflags/
//!   kpagecount, THP counters) for every process;
//! * the same syscall and access results;
//! * the same page-table entries, ignoring only what the kernel's batch
//!   itself merges or repaints: young/dirty (ORed over a batch by
//!   modify_prot_start_ptes()) and the arm64 contiguous bit;
//! * every invariant after every step.
//!
//! The same switch selects the NUMA-hinting scan's batch skip (6.17,
//! `prot_numa_skip()` + `folio_pte_batch()`) or its per-PTE skip, so the
//! runs also move processes between the two nodes of the machine
//! (`numa_run_on`) and scan ranges (`numa_scan`); the hinting faults and
//! migrations follow from the accesses, and numa_maps is compared too.
//!
//! Soft-dirty and uffd-wp bits are not reachable yet (CONFIG_MEM_SOFT_DIRTY
//! is off and the model has no UFFDIO_WRITEPROTECT).

mod common;

use proptest::prelude::*;
use ptlab_model::arch::LeafFlags;
use ptlab_model::{
    Advice, ArchKind, Before, MapFlags, Model, ModelConfig, Prot, Sections, ThpKnob, ThpMode,
};

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 4 << 20;

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
    Protect {
        proc: usize,
        off: u64,
        len: u64,
        prot: u8,
    },
    /// The seed workload's step: read-only, then read-write again.
    Toggle {
        proc: usize,
        off: u64,
        len: u64,
    },
    DontNeed {
        proc: usize,
        off: u64,
        len: u64,
    },
    Munmap {
        off: u64,
        len: u64,
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
    /// The process moves to node `node` (0 or 1).
    NumaNode {
        proc: usize,
        node: u32,
    },
    /// One NUMA-balancing scan pass over the range.
    NumaScan {
        proc: usize,
        off: u64,
        len: u64,
    },
}

fn off() -> impl Strategy<Value = u64> {
    prop_oneof![
        // Mostly near the start, so operations meet the same folios.
        3 => (0..128u64).prop_map(|p| p * 4096),
        1 => (0..ARENA / 4096).prop_map(|p| p * 4096),
        1 => (0..ARENA / 0x10000).prop_map(|p| p * 0x10000),
        1 => (0..ARENA / 0x20_0000).prop_map(|p| p * 0x20_0000),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..40u64).prop_map(|p| p * 4096),
        (1..12u64).prop_map(|p| p * 0x10000),
        (1..3u64).prop_map(|p| p * 0x20_0000),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::Write { proc, off, len }),
        2 => (0..3usize, off()).prop_map(|(proc, off)| Op::Read { proc, off }),
        6 => (0..3usize, off(), len(), 0..8u8)
            .prop_map(|(proc, off, len, prot)| Op::Protect { proc, off, len, prot }),
        4 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::Toggle { proc, off, len }),
        2 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::DontNeed { proc, off, len }),
        1 => (off(), len()).prop_map(|(off, len)| Op::Munmap { off, len }),
        3 => (0..3usize).prop_map(|proc| Op::Fork { proc }),
        2 => (1..3usize).prop_map(|proc| Op::Exit { proc }),
        1 => (off(), len(), prop_oneof![Just(Advice::DontFork), Just(Advice::DoFork), Just(Advice::HugePage), Just(Advice::NoHugePage)])
            .prop_map(|(off, len, advice)| Op::Advise { off, len, advice }),
        2 => (0..3usize, 0..2u32).prop_map(|(proc, node)| Op::NumaNode { proc, node }),
        4 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::NumaScan { proc, off, len }),
    ]
}

fn prot(bits: u8) -> Prot {
    // Mostly read-only / read-write; sometimes none or exec.
    match bits {
        0 | 1 => Prot::READ,
        2..=4 => Prot::READ | Prot::WRITE,
        5 => Prot::empty(),
        6 => Prot::READ | Prot::EXEC,
        _ => Prot::READ | Prot::WRITE | Prot::EXEC,
    }
}

/// What a run leaves: the /proc text, every result, and every PTE/PMD
/// leaf with young, dirty and CONT masked.
fn run(arch: ArchKind, before: Before, orders: &[u8], ops: &[Op]) -> (String, String, String) {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    cfg.nodes = 2;
    let mut m = Model::new(cfg);
    for &o in orders {
        let mode = if o == 9 {
            ThpMode::Inherit
        } else {
            ThpMode::Always
        };
        m.set_thp(ThpKnob::Size(o), mode).unwrap();
    }
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
    m.madvise(1, BASE + ARENA / 2, ARENA / 2, Advice::HugePage)
        .unwrap();
    let mut procs: Vec<u32> = vec![1];
    let mut results = String::new();
    for op in ops {
        let r = match *op {
            Op::Write { proc, off, len } => procs
                .get(proc)
                .map(|&p| format!("{:?}", m.access_range(p, BASE + off, len, true, None))),
            Op::Read { proc, off } => procs
                .get(proc)
                .map(|&p| format!("{:?}", m.read(p, BASE + off))),
            Op::Protect {
                proc,
                off,
                len,
                prot: b,
            } => procs
                .get(proc)
                .map(|&p| format!("{:?}", m.mprotect(p, BASE + off, len, prot(b)))),
            Op::Toggle { proc, off, len } => procs.get(proc).map(|&p| {
                let ro = m.mprotect(p, BASE + off, len, Prot::READ);
                let rw = m.mprotect(p, BASE + off, len, Prot::READ | Prot::WRITE);
                format!("{ro:?} {rw:?}")
            }),
            Op::DontNeed { proc, off, len } => procs
                .get(proc)
                .map(|&p| format!("{:?}", m.madvise(p, BASE + off, len, Advice::DontNeed))),
            Op::Munmap { off, len } => Some(format!("{:?}", m.munmap(1, BASE + off, len))),
            Op::Fork { proc } => match procs.get(proc) {
                Some(&p) if procs.len() < 4 => {
                    procs.push(m.fork(p).unwrap());
                    Some(String::new())
                }
                _ => None,
            },
            Op::Exit { proc } => (proc < procs.len()).then(|| {
                let p = procs.remove(proc);
                m.exit(p).unwrap();
                String::new()
            }),
            Op::Advise { off, len, advice } => {
                Some(format!("{:?}", m.madvise(1, BASE + off, len, advice)))
            }
            Op::NumaNode { proc, node } => procs
                .get(proc)
                .map(|&p| format!("{:?}", m.numa_run_on(p, node))),
            Op::NumaScan { proc, off, len } => procs
                .get(proc)
                .map(|&p| format!("{:?}", m.numa_scan(p, BASE + off, len))),
        };
        results.push_str(&format!("{op:?} -> {r:?}\n"));
        if let Err(e) = m.check_invariants() {
            panic!("{arch:?} {before:?}: after {op:?}: {e:#?}");
        }
    }
    let text: String = procs
        .iter()
        .map(|&p| {
            let all = Sections {
                numa: true,
                ..Sections::ALL
            };
            m.observe(p, &format!("p{p}")).render(all)
        })
        .collect();
    let mut leaves = String::new();
    for &p in &procs {
        for (va, level, mut l) in m.mm(p).unwrap().pt.leaves(0, u64::MAX) {
            l.flags -= LeafFlags::YOUNG | LeafFlags::DIRTY | LeafFlags::CONT;
            leaves.push_str(&format!(
                "p{p} {va:#x} L{level} {:?} {:?}\n",
                l.pfn, l.flags
            ));
        }
    }
    (text, results, leaves)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn mprotect_batching_is_unobservable(
        orders in prop::sample::subsequence(vec![2u8, 4, 5, 9], 0..=4),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut texts = Vec::new();
        for arch in ArchKind::ALL {
            let after = run(arch, Before::empty(), &orders, &ops);
            let before = run(arch, Before::MPROTECT_PTE_BATCH, &orders, &ops);
            prop_assert_eq!(&after.1, &before.1, "results differ on {:?}", arch);
            prop_assert_eq!(&after.0, &before.0, "/proc differs on {:?}", arch);
            prop_assert_eq!(&after.2, &before.2, "page tables differ on {:?}", arch);
            texts.push(after.0);
        }
        // The contiguous bit is invisible: both architectures show the same.
        prop_assert_eq!(&texts[0], &texts[1]);
    }
}
