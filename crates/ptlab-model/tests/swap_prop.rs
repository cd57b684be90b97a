//! Property test (issue 8): random sequences with swap — MADV_PAGEOUT/COLD,
//! swap-in by reads and writes, fork/exit, munmap/DONTNEED, mremap moves,
//! mprotect, mTHP/PMD THP knobs — keep every invariant (swap counts
//! recomputed from the swap PTEs of every process included), never lose
//! data (a page paged out and read back holds its tag), and look the same
//! on x86-64 and arm64. The same on a block-device swap area (large folios
//! go out whole and stay in the swap cache), where the proposed batched
//! unmap at swap-out (`--after swapout-unmap-batch`) must leave exactly
//! the observation 6.18 leaves.

mod common;

use proptest::prelude::*;
use ptlab_model::{
    Advice, ArchKind, MapFlags, Model, ModelConfig, MremapFlags, PageState, Prot, ThpKnob, ThpMode,
};

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 8 << 20;

#[derive(Clone, Debug)]
enum Op {
    Mmap {
        off: u64,
        len: u64,
    },
    Munmap {
        off: u64,
        len: u64,
    },
    Read {
        child: bool,
        off: u64,
    },
    Write {
        child: bool,
        off: u64,
        tag: u64,
    },
    Madvise {
        child: bool,
        off: u64,
        len: u64,
        advice: Advice,
    },
    Fork,
    ExitChild,
    Mremap {
        off: u64,
        len: u64,
        to: u64,
    },
    Mprotect {
        off: u64,
        len: u64,
        rw: bool,
    },
    Thp {
        order: u8,
        on: bool,
    },
}

fn offset() -> impl Strategy<Value = u64> {
    common::offset_4k_64k_2m(ARENA)
}

fn length() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..32u64).prop_map(|p| p * 4096),
        (1..8u64).prop_map(|p| p * 0x10000),
        (1..3u64).prop_map(|p| p * 0x200000),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let advice = prop_oneof![
        4 => Just(Advice::PageOut),
        2 => Just(Advice::Free),
        1 => Just(Advice::Cold),
        1 => Just(Advice::DontNeed),
        1 => Just(Advice::HugePage),
    ];
    prop_oneof![
        2 => (offset(), length()).prop_map(|(off, len)| Op::Mmap { off, len }),
        1 => (offset(), length()).prop_map(|(off, len)| Op::Munmap { off, len }),
        4 => (any::<bool>(), offset()).prop_map(|(child, off)| Op::Read { child, off }),
        6 => (any::<bool>(), offset(), 1..1000u64).prop_map(|(child, off, tag)| Op::Write { child, off, tag }),
        5 => (any::<bool>(), offset(), length(), advice).prop_map(|(child, off, len, advice)| Op::Madvise { child, off, len, advice }),
        1 => Just(Op::Fork),
        1 => Just(Op::ExitChild),
        1 => (offset(), length(), offset()).prop_map(|(off, len, to)| Op::Mremap { off, len, to }),
        1 => (offset(), length(), any::<bool>()).prop_map(|(off, len, rw)| Op::Mprotect { off, len, rw }),
        1 => (prop_oneof![Just(4u8), Just(9u8)], any::<bool>()).prop_map(|(order, on)| Op::Thp { order, on }),
    ]
}

fn tags(m: &Model, pid: u32, start: u64, end: u64) -> Vec<(u64, u64)> {
    m.observe_pages(pid, start, end)
        .into_iter()
        .filter_map(|p| match p.state {
            PageState::Anon(a) => Some((p.addr, a.tag)),
            _ => None,
        })
        .collect()
}

fn apply(m: &mut Model, op: &Op) {
    let main = m.main_pid();
    let child = m.pids().find(|&p| p != main);
    let who = |c: bool| if c { child.unwrap_or(main) } else { main };
    let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    match *op {
        Op::Mmap { off, len } => {
            let _ = m.mmap(main, BASE + off, len, Prot::READ | Prot::WRITE, fixed);
        }
        Op::Munmap { off, len } => {
            let _ = m.munmap(main, BASE + off, len);
        }
        Op::Read { child, off } => {
            let _ = m.read(who(child), BASE + off);
        }
        Op::Write { child, off, tag } => {
            let pid = who(child);
            if m.write(pid, BASE + off, tag).is_ok() {
                assert_eq!(m.read(pid, BASE + off), Ok(tag));
            }
        }
        Op::Madvise {
            child,
            off,
            len,
            advice,
        } => {
            let pid = who(child);
            let (s, e) = (BASE + off, BASE + off + len);
            let before = tags(m, pid, s, e);
            let _ = m.madvise(pid, s, len, advice);
            if matches!(advice, Advice::PageOut | Advice::Cold) {
                // Nothing is lost: every page that held data still does
                // (swapped in again if it went out; untouched subpages of a
                // split folio read as zero, which their tag 0 says), except
                // what reclaim discarded: clean pages of MADV_FREE'd folios,
                // which are left not present (nothing else leaves an anon
                // page not present here).
                // Which pages reclaim discarded is read before any read
                // below faults one in: a read of a discarded page of a
                // PMD-sized range maps the huge zero page over its
                // neighbours too, which would hide that they were
                // discarded as well.
                let after: Vec<(u64, u64, bool)> = before
                    .into_iter()
                    .map(|(va, tag)| {
                        let gone = matches!(
                            m.observe_pages(pid, va, va + 4096)[0].state,
                            PageState::NotPresent
                        );
                        (va, tag, gone)
                    })
                    .collect();
                for (va, tag, gone) in after {
                    if gone && advice == Advice::PageOut {
                        assert_eq!(m.read(pid, va), Ok(0), "discarded {va:#x}");
                        continue;
                    }
                    assert_eq!(m.read(pid, va), Ok(tag), "{advice:?} lost {va:#x}");
                }
            }
        }
        Op::Fork => {
            if child.is_none() {
                let _ = m.fork(main);
            }
        }
        Op::ExitChild => {
            if let Some(c) = child {
                let _ = m.exit(c);
            }
        }
        Op::Mremap { off, len, to } => {
            let _ = m.mremap(
                main,
                BASE + off,
                len,
                len,
                MremapFlags::MAYMOVE | MremapFlags::FIXED,
                BASE + ARENA + to,
            );
        }
        Op::Mprotect { off, len, rw } => {
            let p = if rw {
                Prot::READ | Prot::WRITE
            } else {
                Prot::READ
            };
            let _ = m.mprotect(main, BASE + off, len, p);
        }
        Op::Thp { order, on } => {
            let mode = if on { ThpMode::Always } else { ThpMode::Never };
            let _ = m.set_thp(ThpKnob::Size(order), mode);
        }
    }
}

fn new_model(arch: ArchKind) -> Model {
    let mut m = Model::new(ModelConfig::for_arch(arch));
    m.set_swap(256 << 20).expect("swap");
    m
}

fn blockdev_model(arch: ArchKind, batched: bool) -> Model {
    let mut cfg = ModelConfig::for_arch(arch);
    if batched {
        cfg.after = ptlab_model::After::SWAPOUT_UNMAP_BATCH;
    }
    let mut m = Model::new(cfg);
    m.set_swap_on(256 << 20, ptlab_model::swap::SwapKind::BlockDev)
        .expect("swap");
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(96), ..ProptestConfig::default() })]

    #[test]
    fn swap_sequences_keep_invariants_and_data(ops in prop::collection::vec(op(), 1..50), arm in any::<bool>()) {
        let arch = if arm { ArchKind::Arm64 } else { ArchKind::X86_64 };
        let mut m = new_model(arch);
        for (i, op) in ops.iter().enumerate() {
            apply(&mut m, op);
            if let Err(e) = m.check_invariants() {
                prop_assert!(false, "after step {i} ({op:?}): {e:#?}");
            }
        }
    }

    #[test]
    fn blockdev_sequences_keep_invariants(ops in prop::collection::vec(op(), 1..50), arm in any::<bool>(), batched in any::<bool>()) {
        let arch = if arm { ArchKind::Arm64 } else { ArchKind::X86_64 };
        let mut m = blockdev_model(arch, batched);
        for (i, op) in ops.iter().enumerate() {
            apply(&mut m, op);
            if let Err(e) = m.check_invariants() {
                prop_assert!(false, "after step {i} ({op:?}): {e:#?}");
            }
        }
    }

    /// The proposed batched unmap changes the kernel's work, never what a
    /// program sees: after every step, every process's observation (maps,
    /// smaps, pagemap, folios, counters) is the same both ways.
    #[test]
    fn swapout_unmap_batch_is_unobservable(ops in prop::collection::vec(op(), 1..50), arm in any::<bool>()) {
        let arch = if arm { ArchKind::Arm64 } else { ArchKind::X86_64 };
        let mut six = blockdev_model(arch, false);
        let mut batched = blockdev_model(arch, true);
        for (i, op) in ops.iter().enumerate() {
            apply(&mut six, op);
            apply(&mut batched, op);
            for pid in six.pids().collect::<Vec<_>>() {
                let render = |m: &Model| m.observe(pid, "p").render(ptlab_model::Sections::ALL);
                prop_assert_eq!(render(&six), render(&batched), "after step {} ({:?})", i, op);
            }
        }
    }

    #[test]
    fn swap_arches_agree(ops in prop::collection::vec(op(), 1..40)) {
        let mut x = new_model(ArchKind::X86_64);
        let mut a = new_model(ArchKind::Arm64);
        for op in &ops {
            apply(&mut x, op);
            apply(&mut a, op);
        }
        for pid in x.pids().collect::<Vec<_>>() {
            let render = |m: &Model| m.observe(pid, "p").render(ptlab_model::Sections::ALL);
            prop_assert_eq!(render(&x), render(&a));
        }
    }
}
