//! Property test (issue 18): the observation walks the page tables and
//! records a run of not-present pages as one record, yet shows exactly
//! what looking up every virtual page shows (`Model::observe_dense`):
//! after random sequences of mmap/munmap, reads (zero page, huge zero
//! page), writes, THP knobs, MADV_DONTNEED, MADV_PAGEOUT, guard markers,
//! mremap moves and fork, for every process, on both architectures. Also
//! checks that the canonical text is the one the per-page list renders.

mod common;

use proptest::prelude::*;
use ptlab_model::observe::{render_page_runs, PageObs, PageRuns};
use ptlab_model::{
    Advice, ArchKind, MapFlags, Model, ModelConfig, MremapFlags, PageState, Prot, ThpKnob, ThpMode,
};

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 8 << 20;
const P: u64 = 4096;

#[derive(Clone, Debug)]
enum Op {
    Mmap { off: u64, len: u64 },
    Munmap { off: u64, len: u64 },
    Read { off: u64 },
    Write { off: u64 },
    Madvise { off: u64, len: u64, advice: Advice },
    Mremap { off: u64, len: u64, to: u64 },
    Fork,
    Thp { order: u8, on: bool },
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0..ARENA / P).prop_map(|p| p * P),
        (0..ARENA / 0x200000).prop_map(|p| p * 0x200000),
    ]
}

fn length() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..32u64).prop_map(|p| p * P),
        (1..3u64).prop_map(|p| p * 0x200000),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let advice = prop_oneof![
        Just(Advice::DontNeed),
        Just(Advice::Free),
        Just(Advice::PageOut),
        Just(Advice::GuardInstall),
        Just(Advice::GuardRemove),
        Just(Advice::HugePage),
    ];
    prop_oneof![
        2 => (offset(), length()).prop_map(|(off, len)| Op::Mmap { off, len }),
        1 => (offset(), length()).prop_map(|(off, len)| Op::Munmap { off, len }),
        3 => offset().prop_map(|off| Op::Read { off }),
        5 => offset().prop_map(|off| Op::Write { off }),
        3 => (offset(), length(), advice).prop_map(|(off, len, advice)| Op::Madvise { off, len, advice }),
        1 => (offset(), length(), offset()).prop_map(|(off, len, to)| Op::Mremap { off, len, to }),
        1 => Just(Op::Fork),
        1 => (prop_oneof![Just(4u8), Just(9u8)], any::<bool>()).prop_map(|(order, on)| Op::Thp { order, on }),
    ]
}

fn apply(m: &mut Model, op: &Op) {
    let main = m.main_pid();
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let _ = match *op {
        Op::Mmap { off, len } => m
            .mmap(main, BASE + off, len, Prot::READ | Prot::WRITE, fixed)
            .map(|_| ())
            .map_err(|_| ()),
        Op::Munmap { off, len } => m.munmap(main, BASE + off, len).map_err(|_| ()),
        Op::Read { off } => m.read(main, BASE + off).map(|_| ()).map_err(|_| ()),
        Op::Write { off } => m.write(main, BASE + off, off | 1).map_err(|_| ()),
        Op::Madvise { off, len, advice } => {
            m.madvise(main, BASE + off, len, advice).map_err(|_| ())
        }
        Op::Mremap { off, len, to } => m
            .mremap(
                main,
                BASE + off,
                len,
                len,
                MremapFlags::MAYMOVE | MremapFlags::FIXED,
                BASE + ARENA + to,
            )
            .map(|_| ())
            .map_err(|_| ()),
        Op::Fork => m.fork(main).map(|_| ()).map_err(|_| ()),
        Op::Thp { order, on } => {
            let mode = if on { ThpMode::Always } else { ThpMode::Never };
            m.set_thp(ThpKnob::Size(order), mode).map_err(|_| ())
        }
    };
}

/// The per-page list, one record per page (the old representation).
fn per_page(runs: &PageRuns) -> Vec<PageObs> {
    let mut v = Vec::new();
    for r in runs.iter() {
        for k in 0..r.npages {
            v.push(PageObs::page(r.addr + k * P, r.state.clone()));
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn the_walk_shows_what_every_page_shows(ops in prop::collection::vec(op(), 1..40), arm in any::<bool>()) {
        let arch = if arm { ArchKind::Arm64 } else { ArchKind::X86_64 };
        let mut m = Model::new(ModelConfig::for_arch(arch));
        m.set_swap(64 << 20).expect("swap");
        for (i, op) in ops.iter().enumerate() {
            apply(&mut m, op);
            for pid in m.pids().collect::<Vec<_>>() {
                let walk = m.observe(pid, "p");
                let dense = m.observe_dense(pid, "p");
                prop_assert_eq!(&walk, &dense, "after step {} ({:?}), pid {}", i, op, pid);
                // The summary (counted by leaves) has the same maps, smaps
                // and counters, without pages.
                let summary = m.observe_summary(pid, "p");
                prop_assert_eq!(&summary.maps, &walk.maps, "summary after step {}", i);
                prop_assert_eq!(&summary.stats, &walk.stats);
                prop_assert_eq!(summary.vm_lck_kb, walk.vm_lck_kb);
                prop_assert!(summary.pages.is_empty());
                // Canonical: no two adjacent not-present records, no
                // multi-page record of a present state.
                for w in walk.pages.windows(2) {
                    prop_assert!(w[0].end() <= w[1].addr);
                    prop_assert!(!(w[0].state == PageState::NotPresent
                        && w[1].state == PageState::NotPresent
                        && w[0].end() == w[1].addr));
                }
                prop_assert!(walk.pages.iter().all(|r| r.npages == 1 || r.state == PageState::NotPresent));
                // The text is what the per-page list renders.
                prop_assert_eq!(render_page_runs(&walk.pages), render_page_runs(&per_page(&walk.pages)));
                // Ranges: observe_pages is the observation clipped.
                let (a, b) = (BASE + ARENA / 2 - 3 * P, BASE + ARENA + ARENA / 3);
                prop_assert_eq!(m.observe_pages(pid, a, b), walk.pages.clip(a, b));
            }
        }
    }
}
