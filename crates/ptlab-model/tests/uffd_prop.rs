//! UFFDIO_MOVE: random states and random moves give identical results and
//! identical observable state with 6.18's batched move and the per-page
//! algorithm before it (`Before::UFFD_MOVE_BATCH`), on both architectures,
//! and keep every invariant. The page tables are compared entry by entry
//! too: the two paths must write the same PTEs.
//!
//! States mix folio sizes (mTHP orders, PMD THPs), partially mapped folios
//! (MADV_DONTNEED), zero pages, holes, pages shared with a fork child (or no
//! longer shared after its exit), UFFDIO_COPY pages with uffd-wp, and pages
//! moved before; moves go between two areas and within the registered one,
//! with and without ALLOW_SRC_HOLES, at page and 64 KiB granularity and
//! across PMD boundaries.

mod common;

use proptest::prelude::*;
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
    DontNeed {
        src: bool,
        off: u64,
        len: u64,
    },
    ForkExit {
        keep: bool,
    },
    Copy {
        off: u64,
        wp: bool,
    },
    Zeropage {
        off: u64,
    },
    Move {
        dst: u64,
        from_dst: bool,
        src: u64,
        len: u64,
        holes: bool,
    },
}

fn off() -> impl Strategy<Value = u64> {
    common::offset_4k_64k_2m(ARENA)
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..24u64).prop_map(|p| p * 4096),
        (1..6u64).prop_map(|p| p * 0x10000),
        Just(2 << 20),
        (1..4u64).prop_map(|p| (2 << 20) + p * 4096),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), off()).prop_map(|(src, off)| Op::Write { src, off }),
        2 => (any::<bool>(), off()).prop_map(|(src, off)| Op::Read { src, off }),
        2 => (any::<bool>(), off(), len()).prop_map(|(src, off, len)| Op::DontNeed { src, off, len }),
        1 => any::<bool>().prop_map(|keep| Op::ForkExit { keep }),
        2 => (off(), any::<bool>()).prop_map(|(off, wp)| Op::Copy { off, wp }),
        1 => off().prop_map(|off| Op::Zeropage { off }),
        8 => (off(), any::<bool>(), off(), len(), any::<bool>())
            .prop_map(|(dst, from_dst, src, len, holes)| Op::Move { dst, from_dst, src, len, holes }),
    ]
}

/// Apply `ops`; returns the rendering, every result and the page tables.
fn run(arch: ArchKind, before: Before, orders: &[u8], ops: &[Op]) -> String {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    let mut m = Model::new(cfg);
    for &o in orders {
        m.set_thp(ThpKnob::Size(o), ThpMode::Always).unwrap();
    }
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let rw = Prot::READ | Prot::WRITE;
    m.mmap(1, DST, ARENA, rw, f).unwrap();
    m.mmap(1, SRC, ARENA, rw, f).unwrap();
    m.madvise(1, SRC + ARENA / 2, ARENA / 2, Advice::HugePage)
        .unwrap();
    let u = m.uffd_open(1).unwrap();
    m.uffd_api(u, UFFD_API, 0).unwrap();
    m.uffd_register(u, DST, ARENA, 3).unwrap();
    let mut child = None;
    let mut log = String::new();
    let area = |src: bool| if src { SRC } else { DST };
    for (i, op) in ops.iter().enumerate() {
        let r = match *op {
            Op::Write { src, off } => format!("{:?}", m.write(1, area(src) + off, off)),
            Op::Read { src, off } => format!("{:?}", m.read(1, area(src) + off)),
            Op::DontNeed { src, off, len } => {
                format!("{:?}", m.madvise(1, area(src) + off, len, Advice::DontNeed))
            }
            Op::ForkExit { keep } => {
                common::fork_exit(&mut m, &mut child, keep);
                String::new()
            }
            Op::Copy { off, wp } => {
                let src = CopySource::Tag(0x1000 + i as u64);
                format!(
                    "{:?}",
                    m.uffd_copy(1, u, DST + off, src, 0x1000, u64::from(wp) << 1)
                )
            }
            Op::Zeropage { off } => format!("{:?}", m.uffd_zeropage(u, DST + off, 0x1000, 0)),
            Op::Move {
                dst,
                from_dst,
                src,
                len,
                holes,
            } => {
                let from = if from_dst { DST } else { SRC };
                let mode = u64::from(holes) << 1;
                format!("{:?}", m.uffd_move(1, u, DST + dst, from + src, len, mode))
            }
        };
        log.push_str(&format!("{i}: {r}\n"));
        if let Err(e) = m.check_invariants() {
            panic!("{arch:?} {before:?} after {op:?}: {e:#?}");
        }
    }
    let mm = m.mm(1).unwrap();
    log.push_str(&format!("{:?}\n", mm.pt.leaves(0, u64::MAX)));
    log.push_str(&m.observe(1, "main").render(Sections::ALL));
    if let Some(c) = child {
        log.push_str(&m.observe(c, "child").render(Sections::ALL));
    }
    log
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn move_batching_is_unobservable(
        orders in prop::sample::subsequence(vec![2u8, 4, 5, 9], 0..=4),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        for arch in ArchKind::ALL {
            let after = run(arch, Before::empty(), &orders, &ops);
            let before = run(arch, Before::UFFD_MOVE_BATCH, &orders, &ops);
            prop_assert_eq!(&after, &before, "{:?}", arch);
        }
    }
}
