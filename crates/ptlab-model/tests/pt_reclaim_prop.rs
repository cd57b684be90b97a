//! PT_RECLAIM by architecture (issue 15, sixteenth session): the 6.18
//! kernel builds CONFIG_PT_RECLAIM on x86-64 only (arch/x86/Kconfig
//! selects ARCH_SUPPORTS_PT_RECLAIM; arch/arm64/Kconfig does not), so
//! MADV_DONTNEED frees the PTE tables it empties on x86-64 and keeps them
//! on arm64 until munmap's or exit's free_pgtables().
//!
//! The same random scenarios (writes with 4K…64K folios, no PMD THP,
//! MADV_DONTNEED, MADV_PAGEOUT with swap, mprotect, mremap, munmap, fork
//! and exit) run on both arches — reclaim on (x86-64) and off (arm64) —
//! and everything the reclaim must not change is compared: every result,
//! which addresses are mapped at which level, which hold swap entries,
//! RSS and the invariants. What it does change is checked too: arm64's
//! DONTNEED frees no PTE table, x86-64's frees only tables of PMD slots
//! inside the advised range, x86-64 never holds a PTE table arm64 lacks,
//! and after munmap of everything neither holds one.

mod common;

use proptest::prelude::*;
use ptlab_model::{
    Advice, ArchKind, MapFlags, Model, ModelConfig, MremapFlags, Prot, ThpKnob, ThpMode,
};
use std::collections::BTreeSet;

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 8 << 20;
const PMD: u64 = 0x20_0000;

#[derive(Clone, Debug)]
enum Op {
    Write { off: u64, len: u64 },
    DontNeed { off: u64, len: u64 },
    PageOut { off: u64, len: u64 },
    Protect { off: u64, len: u64, rw: bool },
    Remap { off: u64, len: u64, to: u64 },
    Munmap { off: u64, len: u64 },
    Fork,
    ExitChild,
}

fn off() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => (0..ARENA / 4096).prop_map(|p| p * 4096),
        1 => (0..ARENA / 0x10000).prop_map(|p| p * 0x10000),
        2 => (0..ARENA / PMD).prop_map(|p| p * PMD),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..40u64).prop_map(|p| p * 4096),
        (1..8u64).prop_map(|p| p * 0x10000),
        (1..4u64).prop_map(|p| p * PMD),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (off(), len()).prop_map(|(off, len)| Op::Write { off, len }),
        5 => (off(), len()).prop_map(|(off, len)| Op::DontNeed { off, len }),
        1 => (off(), len()).prop_map(|(off, len)| Op::PageOut { off, len }),
        2 => (off(), len(), any::<bool>()).prop_map(|(off, len, rw)| Op::Protect { off, len, rw }),
        2 => (off(), len(), 0..4u64).prop_map(|(off, len, to)| Op::Remap { off, len, to }),
        1 => (off(), len()).prop_map(|(off, len)| Op::Munmap { off, len }),
        1 => Just(Op::Fork),
        1 => Just(Op::ExitChild),
    ]
}

/// The start of every PTE table of process `pid`.
fn pte_tables(m: &Model, pid: u32) -> BTreeSet<u64> {
    m.mm(pid)
        .unwrap()
        .pt
        .tables_in_tree()
        .into_iter()
        .filter(|&(_, level, _)| level == 1)
        .map(|(_, _, va)| va)
        .collect()
}

/// What PT_RECLAIM must not change in process `pid`: every mapped address
/// with its level, every swap entry's address, RSS.
fn shape(m: &Model, pid: u32) -> String {
    let mm = m.mm(pid).unwrap();
    let mut s = String::new();
    for (va, level, _) in mm.pt.leaves(0, u64::MAX) {
        s.push_str(&format!("{va:#x} L{level}\n"));
    }
    for (va, _) in mm.pt.swap_ptes(0, u64::MAX) {
        s.push_str(&format!("{va:#x} swap\n"));
    }
    s.push_str(&format!("rss {}\n", mm.rss_anon));
    s
}

/// Run `ops` on `arch`: per step the result and the shapes of both
/// processes; checks the table rules of DONTNEED along the way.
fn run(arch: ArchKind, orders: &[u8], ops: &[Op]) -> Result<Vec<String>, TestCaseError> {
    let mut m = Model::new(ModelConfig::for_arch(arch));
    m.set_swap(256 << 20).unwrap();
    m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
    for &o in orders {
        m.set_thp(ThpKnob::Size(o), ThpMode::Always).unwrap();
    }
    let fl = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, fl)
        .unwrap();
    let mut child: Option<u32> = None;
    let mut steps = Vec::new();
    for op in ops {
        let before = pte_tables(&m, 1);
        let r = match *op {
            Op::Write { off, len } => {
                format!("{:?}", m.access_range(1, BASE + off, len, true, None))
            }
            Op::DontNeed { off, len } => {
                format!("{:?}", m.madvise(1, BASE + off, len, Advice::DontNeed))
            }
            Op::PageOut { off, len } => {
                format!("{:?}", m.madvise(1, BASE + off, len, Advice::PageOut))
            }
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
        };
        m.check_invariants().expect("invariants hold");
        if let Op::DontNeed { off, len } = *op {
            let after = pte_tables(&m, 1);
            match arch {
                // No PT_RECLAIM: DONTNEED frees no PTE table.
                ArchKind::Arm64 => prop_assert!(
                    after.is_superset(&before),
                    "arm64 DONTNEED freed {:x?}",
                    before.difference(&after).collect::<Vec<_>>()
                ),
                // PT_RECLAIM frees only tables whose whole PMD slot was
                // advised (and whatever it frees is empty: the invariants).
                ArchKind::X86_64 => {
                    let (lo, hi) = (BASE + off, BASE + off + len);
                    for &t in before.difference(&after) {
                        prop_assert!(lo <= t && t + PMD <= hi, "x86 reclaimed {t:#x} outside");
                    }
                }
            }
        }
        let mut line = format!("{op:?} -> {r}\n{}", shape(&m, 1));
        if let Some(c) = child {
            line.push_str(&format!("child\n{}", shape(&m, c)));
        }
        steps.push(line);
    }
    // munmap of everything frees every PTE table on both arches.
    if let Some(c) = child.take() {
        m.exit(c).unwrap();
    }
    m.munmap(1, BASE, 4 * ARENA).unwrap();
    prop_assert!(pte_tables(&m, 1).is_empty(), "{arch:?} kept tables");
    m.check_invariants().expect("invariants hold");
    Ok(steps)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn reclaim_on_x86_off_on_arm64_changes_only_the_tables(
        orders in prop::sample::subsequence(vec![2u8, 4], 0..=2),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        let x86 = run(ArchKind::X86_64, &orders, &ops)?;
        let arm = run(ArchKind::Arm64, &orders, &ops)?;
        for (i, (a, b)) in x86.iter().zip(&arm).enumerate() {
            prop_assert_eq!(a, b, "step {} differs", i);
        }
    }
}

/// The tables each arch keeps after a whole-table DONTNEED (hand-checked):
/// x86-64 frees the emptied PTE table, arm64 keeps it; munmap frees it on
/// both.
#[test]
fn dontneed_of_a_whole_table() {
    for (arch, kept) in [(ArchKind::X86_64, 0), (ArchKind::Arm64, 1)] {
        let mut m = Model::new(ModelConfig::for_arch(arch));
        m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
        let fl = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, BASE, 2 * PMD, Prot::READ | Prot::WRITE, fl)
            .unwrap();
        m.access_range(1, BASE, 2 * PMD, true, None).unwrap();
        assert_eq!(pte_tables(&m, 1).len(), 2, "{arch:?}");
        m.madvise(1, BASE, PMD, Advice::DontNeed).unwrap();
        // The second slot was advised only in part: kept on both.
        m.madvise(1, BASE + PMD, PMD / 2, Advice::DontNeed).unwrap();
        assert_eq!(pte_tables(&m, 1).len(), kept + 1, "{arch:?}");
        m.check_invariants().unwrap();
        m.munmap(1, BASE, 2 * PMD).unwrap();
        assert!(pte_tables(&m, 1).is_empty(), "{arch:?}");
    }
}
