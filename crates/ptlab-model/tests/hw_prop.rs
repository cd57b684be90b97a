//! Hardware-event accounting never changes what the model shows.
//!
//! Random scenarios (mmap with 4K…2M folios, writes, reads, mprotect,
//! mremap, MADV_DONTNEED, MADV_PAGEOUT with swap, munmap, fork, exit) run under CPU-feature sets
//! that change the counted TLB work (FEAT_TLBIRANGE, BBML2-noabort, KPTI):
//! results, /proc text and every page-table entry must be identical, and
//! observing or checking invariants must not count anything. The counts are
//! deterministic (the same run twice counts the same), only grow, and x86
//! never counts arm64-only events.

mod common;

use proptest::prelude::*;
use ptlab_model::{
    Advice, ArchKind, HwEvent, HwEvents, HwFeatures, MapFlags, Model, ModelConfig, MremapFlags,
    Prot, Sections, ThpKnob, ThpMode,
};

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 4 << 20;

#[derive(Clone, Debug)]
enum Op {
    Write { off: u64, len: u64 },
    Read { off: u64 },
    Protect { off: u64, len: u64, rw: bool },
    Remap { off: u64, len: u64, to: u64 },
    DontNeed { off: u64, len: u64 },
    PageOut { off: u64, len: u64 },
    Munmap { off: u64, len: u64 },
    Fork,
    ExitChild,
    ChildWrite { off: u64, len: u64 },
}

fn off() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (0..64u64).prop_map(|p| p * 4096),
        1 => (0..ARENA / 0x10000).prop_map(|p| p * 0x10000),
        1 => (0..ARENA / 0x20_0000).prop_map(|p| p * 0x20_0000),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..40u64).prop_map(|p| p * 4096),
        (1..8u64).prop_map(|p| p * 0x10000),
        Just(0x20_0000u64),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (off(), len()).prop_map(|(off, len)| Op::Write { off, len }),
        1 => off().prop_map(|off| Op::Read { off }),
        4 => (off(), len(), any::<bool>()).prop_map(|(off, len, rw)| Op::Protect { off, len, rw }),
        3 => (off(), len(), 0..4u64).prop_map(|(off, len, to)| Op::Remap { off, len, to }),
        2 => (off(), len()).prop_map(|(off, len)| Op::DontNeed { off, len }),
        2 => (off(), len()).prop_map(|(off, len)| Op::PageOut { off, len }),
        1 => (off(), len()).prop_map(|(off, len)| Op::Munmap { off, len }),
        2 => Just(Op::Fork),
        1 => Just(Op::ExitChild),
        2 => (off(), len()).prop_map(|(off, len)| Op::ChildWrite { off, len }),
    ]
}

/// Run `ops`; return (results, /proc text, leaves, event counts per step).
fn run(
    arch: ArchKind,
    f: HwFeatures,
    orders: &[u8],
    ops: &[Op],
) -> (String, String, String, Vec<HwEvents>) {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.hw = f;
    let mut m = Model::new(cfg);
    m.set_swap(256 << 20).unwrap();
    for &o in orders {
        let mode = if o == 9 {
            ThpMode::Inherit
        } else {
            ThpMode::Always
        };
        m.set_thp(ThpKnob::Size(o), mode).unwrap();
    }
    let fl = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, fl)
        .unwrap();
    m.madvise(1, BASE + ARENA / 2, ARENA / 2, Advice::HugePage)
        .unwrap();
    let mut child: Option<u32> = None;
    let mut results = String::new();
    let mut counts = Vec::new();
    for op in ops {
        let r = match *op {
            Op::Write { off, len } => {
                format!("{:?}", m.access_range(1, BASE + off, len, true, None))
            }
            Op::Read { off } => format!("{:?}", m.read(1, BASE + off)),
            Op::Protect { off, len, rw } => {
                let p = if rw {
                    Prot::READ | Prot::WRITE
                } else {
                    Prot::READ
                };
                format!("{:?}", m.mprotect(1, BASE + off, len, p))
            }
            Op::Remap { off, len, to } => format!(
                "{:?}",
                m.mremap(
                    1,
                    BASE + off,
                    len,
                    len,
                    MremapFlags::MAYMOVE | MremapFlags::FIXED,
                    BASE + ARENA + to * 0x10_0000 + (off & 0xf_ffff),
                )
            ),
            Op::DontNeed { off, len } => {
                format!("{:?}", m.madvise(1, BASE + off, len, Advice::DontNeed))
            }
            Op::PageOut { off, len } => {
                format!("{:?}", m.madvise(1, BASE + off, len, Advice::PageOut))
            }
            Op::Munmap { off, len } => format!("{:?}", m.munmap(1, BASE + off, len)),
            Op::Fork => match child {
                None => {
                    child = Some(m.fork(1).unwrap());
                    String::new()
                }
                Some(_) => "busy".into(),
            },
            Op::ExitChild => match child.take() {
                Some(c) => format!("{:?}", m.exit(c)),
                None => "none".into(),
            },
            Op::ChildWrite { off, len } => match child {
                Some(c) => format!("{:?}", m.access_range(c, BASE + off, len, true, Some(7))),
                None => "none".into(),
            },
        };
        results.push_str(&format!("{op:?} -> {r}\n"));
        // Observing and checking must not count anything.
        let before = m.hw_events();
        let _ = m.observe(1, "x");
        m.check_invariants().expect("invariants hold");
        assert_eq!(m.hw_events(), before, "observation counted events");
        counts.push(before);
    }
    let mut pids = vec![1];
    pids.extend(child);
    let text: String = pids
        .iter()
        .map(|&p| m.observe(p, &format!("p{p}")).render(Sections::ALL))
        .collect();
    let mut leaves = String::new();
    for &p in &pids {
        for (va, level, l) in m.mm(p).unwrap().pt.leaves(0, u64::MAX) {
            leaves.push_str(&format!("p{p} {va:#x} L{level} {l:?}\n"));
        }
        for (va, sw) in m.mm(p).unwrap().pt.swap_ptes(0, u64::MAX) {
            leaves.push_str(&format!("p{p} {va:#x} swap {sw:?}\n"));
        }
    }
    (results, text, leaves, counts)
}

const ARM_ONLY: [HwEvent; 5] = [
    HwEvent::ContFold,
    HwEvent::ContUnfold,
    HwEvent::DsbIshst,
    HwEvent::DsbIsh,
    HwEvent::TlbiRange,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn event_accounting_is_unobservable(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        let feature_sets = [
            HwFeatures::default(),
            HwFeatures { tlbi_range: true, ..Default::default() },
            HwFeatures { tlbi_range: true, bbml2_noabort: true, kpti: true, contpte_off: false },
        ];
        for arch in ArchKind::ALL {
            let base = run(arch, feature_sets[0], &orders, &ops);
            // Deterministic: the same run counts the same.
            let again = run(arch, feature_sets[0], &orders, &ops);
            prop_assert_eq!(&base.3, &again.3);
            // Counts only grow.
            for w in base.3.windows(2) {
                for &e in HwEvent::ALL {
                    prop_assert!(w[1].get(e) >= w[0].get(e), "{:?} shrank", e);
                }
            }
            if arch == ArchKind::X86_64 {
                let last = base.3.last().copied().unwrap_or_default();
                for e in ARM_ONLY {
                    prop_assert_eq!(last.get(e), 0, "x86 counted {:?}", e);
                }
            }
            for &f in &feature_sets[1..] {
                let other = run(arch, f, &orders, &ops);
                prop_assert_eq!(&base.0, &other.0, "results differ {:?} {:?}", arch, f);
                prop_assert_eq!(&base.1, &other.1, "/proc differs {:?} {:?}", arch, f);
                prop_assert_eq!(&base.2, &other.2, "page tables differ {:?} {:?}", arch, f);
            }
        }
    }
}
