//! The fused one-page steps of UFFDIO_MOVE and UFFDIO_COPY
//! (`ModelConfig::uffd_fused`, `sys/uffd/fused.rs`) against the general
//! steps: random programs give, operation by operation, the same results,
//! the same hardware events and kernel-function calls, and at the end the
//! same rule hits, page tables and observable state, on both
//! architectures, with 6.18's batched move and the per-page move before
//! it.
//!
//! The programs mix what the fused steps take (one-page moves of order-0
//! exclusive pages into empty PTEs, aligned copies into empty PTEs) with
//! what they must leave to the general steps: mTHPs (arm64 contiguous
//! blocks) and PMD THPs at the source, the zero page, pages shared with a
//! fork child, swap entries and guard markers at either end, occupied
//! destinations, holes, missing PTE tables, multi-page ranges, unaligned
//! and uffd-wp copies, tag copies, and pages with bytes past their tag.

mod common;

use proptest::prelude::*;
use ptlab_model::swap::SwapKind;
use ptlab_model::uffd::UFFD_API;
use ptlab_model::{
    Advice, ArchKind, Before, CopySource, MapFlags, Model, ModelConfig, Prot, Sections, ThpKnob,
    ThpMode,
};

const DST: u64 = 0x7f00_0000_0000;
const SRC: u64 = 0x7f00_0100_0000;
const ARENA: u64 = 4 << 20;

#[derive(Clone, Debug)]
enum Op {
    Write {
        src: bool,
        off: u64,
    },
    Read {
        src: bool,
        off: u64,
    },
    Fill {
        src: bool,
        off: u64,
        byte: u8,
    },
    Advise {
        src: bool,
        off: u64,
        len: u64,
        advice: Advice,
    },
    ForkExit {
        keep: bool,
    },
    CopyAddr {
        dst: u64,
        src: u64,
        unaligned: bool,
        wp: bool,
    },
    CopyTag {
        dst: u64,
    },
    Move {
        dst: u64,
        from_dst: bool,
        src: u64,
        pages: u64,
        holes: bool,
    },
}

/// Offsets clustered so that moves and copies often meet present pages
/// and empty PTEs in tables that exist: the first 128 KiB of each 2 MiB
/// slot, mostly.
fn off() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => (0..2u64, 0..32u64).prop_map(|(s, p)| s * (2 << 20) + p * 4096),
        1 => (0..ARENA / 4096).prop_map(|p| p * 4096),
        1 => (0..ARENA / 0x10000).prop_map(|p| p * 0x10000),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), off()).prop_map(|(src, off)| Op::Write { src, off }),
        2 => (any::<bool>(), off()).prop_map(|(src, off)| Op::Read { src, off }),
        2 => (any::<bool>(), off(), 1..255u8).prop_map(|(src, off, byte)| Op::Fill { src, off, byte }),
        2 => (
            any::<bool>(),
            off(),
            (1..20u64).prop_map(|p| p * 4096),
            prop_oneof![
                Just(Advice::DontNeed),
                Just(Advice::PageOut),
                Just(Advice::GuardInstall),
                Just(Advice::GuardRemove),
            ],
        )
            .prop_map(|(src, off, len, advice)| Op::Advise { src, off, len, advice }),
        1 => any::<bool>().prop_map(|keep| Op::ForkExit { keep }),
        5 => (off(), off(), prop::bool::weighted(0.15), prop::bool::weighted(0.15))
            .prop_map(|(dst, src, unaligned, wp)| Op::CopyAddr { dst, src, unaligned, wp }),
        1 => off().prop_map(|dst| Op::CopyTag { dst }),
        10 => (
            off(),
            prop::bool::weighted(0.2),
            off(),
            prop_oneof![8 => Just(1u64), 1 => 2..20u64],
            any::<bool>(),
        )
            .prop_map(|(dst, from_dst, src, pages, holes)| Op::Move { dst, from_dst, src, pages, holes }),
    ]
}

/// What one run leaves: per operation its result and the events and
/// calls counted so far, then the rule hits, the page tables and the
/// rendering of every process.
fn run(arch: ArchKind, before: Before, fused: bool, orders: &[u8], ops: &[Op]) -> Vec<String> {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    cfg.uffd_fused = fused;
    let mut m = Model::new(cfg);
    m.set_swap_on(64 << 20, SwapKind::File).unwrap();
    for &o in orders {
        m.set_thp(ThpKnob::Size(o), ThpMode::Always).unwrap();
    }
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let rw = Prot::READ | Prot::WRITE;
    m.mmap(1, DST, ARENA, rw, f).unwrap();
    m.mmap(1, SRC, ARENA, rw, f).unwrap();
    let u = m.uffd_open(1).unwrap();
    m.uffd_api(u, UFFD_API, 0).unwrap();
    // MISSING | WP: uffd-wp copies are allowed.
    m.uffd_register(u, DST, ARENA, 3).unwrap();
    let mut child = None;
    let mut out = Vec::new();
    let area = |src: bool| if src { SRC } else { DST };
    for (i, op) in ops.iter().enumerate() {
        let r = match *op {
            Op::Write { src, off } => format!("{:?}", m.write(1, area(src) + off, 0x100 + off)),
            Op::Read { src, off } => format!("{:?}", m.read(1, area(src) + off)),
            // Bytes past the tag: the page's stored rest (a copy takes it).
            Op::Fill { src, off, byte } => {
                format!("{:?}", m.fill_bytes(1, area(src) + off + 0x100, 0x80, byte))
            }
            Op::Advise {
                src,
                off,
                len,
                advice,
            } => format!("{:?}", m.madvise(1, area(src) + off, len, advice)),
            Op::ForkExit { keep } => {
                common::fork_exit(&mut m, &mut child, keep);
                String::new()
            }
            Op::CopyAddr {
                dst,
                src,
                unaligned,
                wp,
            } => {
                let from = CopySource::Addr(SRC + src + if unaligned { 0x800 } else { 0 });
                let mode = u64::from(wp) << 1;
                format!("{:?}", m.uffd_copy(1, u, DST + dst, from, 0x1000, mode))
            }
            Op::CopyTag { dst } => {
                let from = CopySource::Tag(0x1000 + i as u64);
                format!("{:?}", m.uffd_copy(1, u, DST + dst, from, 0x1000, 0))
            }
            Op::Move {
                dst,
                from_dst,
                src,
                pages,
                holes,
            } => {
                let from = if from_dst { DST } else { SRC };
                let mode = u64::from(holes) << 1;
                let len = pages * 4096;
                format!("{:?}", m.uffd_move(1, u, DST + dst, from + src, len, mode))
            }
        };
        out.push(format!("{i}: {op:?} -> {r}\n{:?}", m.hw_events()));
        if let Err(e) = m.check_invariants() {
            panic!("{arch:?} fused={fused} after {op:?}: {e:#?}");
        }
    }
    out.push(format!("{:?}", m.coverage()));
    let mm = m.mm(1).unwrap();
    out.push(format!("{:?}", mm.pt.leaves(0, u64::MAX)));
    out.push(m.observe(1, "main").render(Sections::ALL));
    // The first bytes of the pages most operations go to (a copy's rest
    // included).
    for area in [DST, SRC] {
        for slot in [0, 2 << 20] {
            for page in (0..32u64).map(|p| area + slot + p * 4096) {
                out.push(format!("{:?}", m.peek_bytes(1, page, 0x200)));
            }
        }
    }
    if let Some(c) = child {
        out.push(m.observe(c, "child").render(Sections::ALL));
    }
    out
}

/// The first line where the two runs part, for a readable failure.
fn first_difference(a: &[String], b: &[String]) -> Option<(usize, String, String)> {
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| (i, x.clone(), y.clone()))
        .or_else(|| {
            (a.len() != b.len()).then(|| (a.len().min(b.len()), String::new(), String::new()))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn fused_uffd_steps_equal_the_general_steps(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        per_page in prop::bool::weighted(0.25),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let before = if per_page { Before::UFFD_MOVE_BATCH } else { Before::empty() };
        for arch in ArchKind::ALL {
            let fused = run(arch, before, true, &orders, &ops);
            let general = run(arch, before, false, &orders, &ops);
            let diff = first_difference(&fused, &general);
            prop_assert!(diff.is_none(), "{:?}: fused vs general differ at {:?}", arch, diff);
        }
    }
}

/// The fused steps are taken: a program of one-page moves and aligned
/// copies into empty PTEs (the seeds' loop) gives the same counts both
/// ways — and the general step's own code is what the fused run skips
/// (checked by the run through the general step counting its lookups the
/// same: equal events, observation and tables at every step).
#[test]
fn the_seed_loop_is_the_same_fused_and_general() {
    for arch in ArchKind::ALL {
        let mut ops = vec![];
        for k in 0..64u64 {
            ops.push(Op::Write {
                src: true,
                off: k * 4096,
            });
        }
        for k in 0..32u64 {
            ops.push(Op::Move {
                dst: k * 4096,
                from_dst: false,
                src: 2 * k * 4096,
                pages: 1,
                holes: false,
            });
            ops.push(Op::CopyAddr {
                dst: (2 << 20) + k * 4096,
                src: (2 * k + 1) * 4096,
                unaligned: false,
                wp: false,
            });
        }
        let fused = run(arch, Before::empty(), true, &[], &ops);
        let general = run(arch, Before::empty(), false, &[], &ops);
        assert_eq!(first_difference(&fused, &general), None, "{arch:?}");
    }
}
