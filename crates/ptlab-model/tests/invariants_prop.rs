//! Property test: random sequences of the foundation's operations (mmap,
//! munmap, read, write, madvise, THP knob changes) keep every invariant the
//! checker recomputes from the page tables, on both architectures, and the
//! model is deterministic (the same sequence gives the same observation).

mod common;

use proptest::prelude::*;
use ptlab_model::{Advice, ArchKind, MapFlags, Model, ModelConfig, Prot, ThpKnob, ThpMode};

const BASE: u64 = 0x7f00_0000_0000;
/// An 8 MiB arena: four PMD slots, so ops hit PMD and PTE paths and edges.
const ARENA: u64 = 8 << 20;

#[derive(Clone, Debug)]
enum Op {
    Mmap {
        off: u64,
        len: u64,
        prot: u8,
        noreserve: bool,
    },
    Munmap {
        off: u64,
        len: u64,
    },
    Read {
        off: u64,
    },
    Write {
        off: u64,
        tag: u64,
    },
    Madvise {
        off: u64,
        len: u64,
        advice: Advice,
    },
    Thp {
        order: u8,
        mode: ThpMode,
    },
    Top {
        mode: ThpMode,
    },
    ZeroPage(bool),
}

/// Offsets biased toward interesting alignments (64 KiB, 2 MiB, page).
fn offset() -> impl Strategy<Value = u64> {
    common::offset_4k_64k_2m(ARENA)
}

fn length() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..64u64).prop_map(|p| p * 4096),
        (1..16u64).prop_map(|p| p * 0x10000),
        (1..4u64).prop_map(|p| p * 0x200000),
    ]
}

fn mode() -> impl Strategy<Value = ThpMode> {
    prop_oneof![
        Just(ThpMode::Always),
        Just(ThpMode::Inherit),
        Just(ThpMode::Madvise),
        Just(ThpMode::Never)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let advice = prop_oneof![
        Just(Advice::DontNeed),
        Just(Advice::DontFork),
        Just(Advice::DoFork),
        Just(Advice::HugePage),
        Just(Advice::NoHugePage),
        Just(Advice::WipeOnFork),
        Just(Advice::KeepOnFork),
    ];
    prop_oneof![
        3 => (offset(), length(), 0..8u8, any::<bool>()).prop_map(|(off, len, prot, noreserve)| Op::Mmap { off, len, prot, noreserve }),
        1 => (offset(), length()).prop_map(|(off, len)| Op::Munmap { off, len }),
        4 => offset().prop_map(|off| Op::Read { off }),
        8 => (offset(), any::<u64>()).prop_map(|(off, tag)| Op::Write { off, tag }),
        3 => (offset(), length(), advice).prop_map(|(off, len, advice)| Op::Madvise { off, len, advice }),
        1 => (2..=9u8, mode()).prop_map(|(order, mode)| Op::Thp { order, mode }),
        1 => prop_oneof![Just(ThpMode::Always), Just(ThpMode::Madvise), Just(ThpMode::Never)].prop_map(|mode| Op::Top { mode }),
        1 => any::<bool>().prop_map(Op::ZeroPage),
    ]
}

fn apply(m: &mut Model, op: &Op) {
    let pid = m.main_pid();
    match *op {
        Op::Mmap {
            off,
            len,
            prot,
            noreserve,
        } => {
            let mut f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
            if noreserve {
                f |= MapFlags::NORESERVE;
            }
            let _ = m.mmap(
                pid,
                BASE + off,
                len,
                Prot::from_bits_truncate(prot as u32),
                f,
            );
        }
        Op::Munmap { off, len } => {
            let _ = m.munmap(pid, BASE + off, len);
        }
        Op::Read { off } => {
            let _ = m.read(pid, BASE + off);
        }
        Op::Write { off, tag } => {
            if m.write(pid, BASE + off, tag).is_ok() {
                assert_eq!(m.read(pid, BASE + off), Ok(tag), "a written tag reads back");
            }
        }
        Op::Madvise { off, len, advice } => {
            let _ = m.madvise(pid, BASE + off, len, advice);
        }
        Op::Thp { order, mode } => {
            let _ = m.set_thp(ThpKnob::Size(order), mode);
        }
        Op::Top { mode } => {
            let _ = m.set_thp(ThpKnob::TopLevel, mode);
        }
        Op::ZeroPage(on) => m.set_use_zero_page(on),
    }
}

// 96 cases by default; PROPTEST_CASES=N for a longer local run.

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(96), ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_invariants(ops in prop::collection::vec(op(), 1..60), arm in any::<bool>()) {
        let arch = if arm { ArchKind::Arm64 } else { ArchKind::X86_64 };
        let mut m = Model::new(ModelConfig::for_arch(arch));
        for (i, op) in ops.iter().enumerate() {
            apply(&mut m, op);
            if let Err(e) = m.check_invariants() {
                prop_assert!(false, "after step {i} ({op:?}): {e:#?}");
            }
        }
        // Determinism: replaying gives the same observation text.
        let mut again = Model::new(ModelConfig::for_arch(arch));
        for op in &ops {
            apply(&mut again, op);
        }
        let a = m.observe(1, "main");
        let b = again.observe(1, "main");
        prop_assert_eq!(a, b);
    }

    #[test]
    fn arches_agree_on_observation(ops in prop::collection::vec(op(), 1..40)) {
        // The contiguous bit is invisible to /proc: x86-64 and arm64 show the same state.
        let mut x = Model::new(ModelConfig::for_arch(ArchKind::X86_64));
        let mut a = Model::new(ModelConfig::for_arch(ArchKind::Arm64));
        for op in &ops {
            apply(&mut x, op);
            apply(&mut a, op);
        }
        let render = |m: &Model| m.observe(1, "main").render(ptlab_model::Sections::ALL);
        prop_assert_eq!(render(&x), render(&a));
    }
}
