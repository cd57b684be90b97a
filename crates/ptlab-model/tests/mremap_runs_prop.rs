//! mremap's per-segment move loops (x86-64: `move_pte_run`; arm64 with
//! the contpte hooks: `move_noncont_run`, both in mm/move_pt.rs) against
//! move_ptes()'s entry-by-entry loop they stand for. The model takes the
//! entry-by-entry path while an observer records marks
//! (`set_hw_tracing`), so the same random sequence run with and without
//! tracing must give the same observation, hardware events, kernel-call
//! counts and rule hits. Unlike `segment_loops_prop` (moves to the same
//! offset in a second arena), moves here shift the range by 0–17 pages,
//! so source and destination entries sit at different indices (and blocks)
//! of their tables: arm64's block-end fold tries, contiguous blocks,
//! PROT_NONE and zero-page entries meet the loop at every phase.
//! arm64's whole-stretch move (`move_cont_stretch`: whole contiguous
//! blocks of one folio run moved as the first block's pass repeated) is
//! held to the block-by-block loop the same way, and to the loop with
//! `ModelConfig::stretch_steps` off; and the stretch that takes its first
//! block too, that block's counts written out (`move_cont_blocks_folded`,
//! `ModelConfig::move_first_folded`, on by default), to the stretch with
//! the first block as its template (the switch off).
//! The walk that skips what both PMD slots already holding a PTE table
//! answers (`ModelConfig::move_tables_known`) and the move of a table's
//! only run within that table as one rewrite (`move_lone_run`,
//! `ModelConfig::move_lone_run`) are each held to the run with their
//! switch off; moves within the first arena (`near`, the seed
//! mremap-batch-64k's shape: 1 MiB moved 1 MiB up inside one 2 MiB
//! table) and fresh mappings and unmaps reach them.
//! mremap's unmap of the source it has just moved, when that is one VMA
//! over none entries of one PTE table, with the zap's counts written out
//! (`ModelConfig::move_source_known`), is held to the general unmap with
//! the switch off: random moves of whole VMAs and of parts of them (the
//! source with holes from unmaps and DONTNEED, or none at all), near and
//! far, with and without DONTUNMAP (whose source stays mapped).
//! arm64's move of an extent that is one stretch of whole contiguous
//! blocks, the only run of its PTE table, moved within it, checked once
//! and moved in one step (`move_cont_lone`, `ModelConfig::move_cont_lone`),
//! is held to the loop with the switch off: folio orders 2, 4 and 5 (a
//! block of an order-5 folio is not a whole folio), blocks split by
//! partial unmaps, DONTNEED and mprotect, moves shifted by 0–17 pages, and
//! ranges registered with a userfaultfd (write-protect mode: moves drop
//! uffd-wp without UFFD_EVENT_REMAP). Soft-dirty is not modelled.

mod common;

use proptest::prelude::*;
use ptlab_model::{uapi::MremapFlags, Advice, ArchKind, MapFlags, ModelConfig, Prot, Sections};

const BASE: u64 = 0x7f00_0000_0000;
const ARENA: u64 = 4 << 20;
/// Where moves go (and come back from): a second arena, 64 MiB up.
const BASE2: u64 = BASE + (64 << 20);

#[derive(Clone, Debug)]
enum Op {
    Write {
        off: u64,
        len: u64,
    },
    Read {
        off: u64,
    },
    Protect {
        off: u64,
        len: u64,
        none: bool,
    },
    DontNeed {
        off: u64,
        len: u64,
    },
    /// mremap(MAYMOVE | FIXED) of `[off, off + len)` to `shift` pages past
    /// the same offset in the other arena (`back`: from the second arena).
    Move {
        off: u64,
        len: u64,
        shift: u64,
        back: bool,
    },
    /// mremap(MAYMOVE | FIXED) of `[off, off + len)` of the first arena to
    /// `shift` pages past its end, in the same arena (and, within 2 MiB,
    /// the same PTE table).
    MoveNear {
        off: u64,
        len: u64,
        shift: u64,
    },
    /// [`Op::MoveNear`] with MREMAP_DONTUNMAP: the source stays mapped,
    /// emptied.
    MoveNearKeep {
        off: u64,
        len: u64,
        shift: u64,
    },
    /// A fresh anonymous mapping over `[off, off + len)` (MAP_FIXED).
    Map {
        off: u64,
        len: u64,
    },
    /// munmap of `[off, off + len)`, or of the range a near move put there.
    Unmap {
        off: u64,
        len: u64,
    },
    /// UFFDIO_REGISTER (write-protect mode) of `[off, off + len)` with the
    /// process's one userfaultfd (opened on first use).
    Register {
        off: u64,
        len: u64,
    },
}

fn off() -> impl Strategy<Value = u64> {
    common::offset_4k_64k(ARENA)
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..40u64).prop_map(|p| p * 4096),
        (1..12u64).prop_map(|p| p * 0x10000),
        Just(ARENA / 2),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (off(), len()).prop_map(|(off, len)| Op::Write { off, len }),
        1 => off().prop_map(|off| Op::Read { off }),
        1 => (off(), len(), any::<bool>()).prop_map(|(off, len, none)| Op::Protect { off, len, none }),
        1 => (off(), len()).prop_map(|(off, len)| Op::DontNeed { off, len }),
        4 => (off(), len(), 0..18u64, any::<bool>())
            .prop_map(|(off, len, shift, back)| Op::Move { off, len, shift, back }),
        3 => (off(), len(), 0..18u64)
            .prop_map(|(off, len, shift)| Op::MoveNear { off, len, shift }),
        1 => (off(), len(), 0..18u64)
            .prop_map(|(off, len, shift)| Op::MoveNearKeep { off, len, shift }),
        1 => (off(), len()).prop_map(|(off, len)| Op::Map { off, len }),
        1 => (off(), len()).prop_map(|(off, len)| Op::Unmap { off, len }),
        1 => (off(), len()).prop_map(|(off, len)| Op::Register { off, len }),
    ]
}

type Outcome = (
    String,
    ptlab_model::HwEvents,
    ptlab_model::core::rules::Coverage,
);

fn run(
    arch: ArchKind,
    orders: &[u8],
    ops: &[Op],
    tracing: bool,
    stretch: bool,
    fold: bool,
) -> Outcome {
    run_with(
        arch,
        orders,
        ops,
        tracing,
        stretch,
        fold,
        (true, true, true, true),
    )
}

/// [`run`] with `ModelConfig::move_tables_known`,
/// `ModelConfig::move_lone_run`, `ModelConfig::move_source_known` and
/// `ModelConfig::move_cont_lone` as given (`switches`).
fn run_with(
    arch: ArchKind,
    orders: &[u8],
    ops: &[Op],
    tracing: bool,
    stretch: bool,
    fold: bool,
    switches: (bool, bool, bool, bool),
) -> Outcome {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.stretch_steps = stretch;
    cfg.move_first_folded = fold;
    (
        cfg.move_tables_known,
        cfg.move_lone_run,
        cfg.move_source_known,
        cfg.move_cont_lone,
    ) = switches;
    let mut uffd = None;
    let mut m = common::mthp_model(cfg, orders);
    m.set_hw_tracing(tracing);
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let rw = Prot::READ | Prot::WRITE;
    m.mmap(1, BASE, ARENA, rw, f).unwrap();
    for op in ops {
        match *op {
            Op::Write { off, len } => {
                let _ = m.access_range(1, BASE + off, len.min(ARENA - off), true, None);
            }
            Op::Read { off } => {
                let _ = m.read(1, BASE + off);
            }
            Op::Protect { off, len, none } => {
                let prot = if none { Prot::empty() } else { rw };
                let _ = m.mprotect(1, BASE + off, len.min(ARENA - off), prot);
            }
            Op::DontNeed { off, len } => {
                let _ = m.madvise(1, BASE + off, len.min(ARENA - off), Advice::DontNeed);
            }
            Op::Move {
                off,
                len,
                shift,
                back,
            } => {
                let len = len.min(ARENA - off);
                let (from, to) = if back {
                    (BASE2 + off, BASE + off + shift * 4096)
                } else {
                    (BASE + off, BASE2 + off + shift * 4096)
                };
                let fl = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                let _ = m.mremap(1, from, len, len, fl, to);
            }
            Op::MoveNear { off, len, shift } => {
                let len = len.min(ARENA - off);
                let to = BASE + off + len + shift * 4096;
                let fl = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                let _ = m.mremap(1, BASE + off, len, len, fl, to);
            }
            Op::MoveNearKeep { off, len, shift } => {
                let len = len.min(ARENA - off);
                let to = BASE + off + len + shift * 4096;
                let fl = MremapFlags::MAYMOVE | MremapFlags::FIXED | MremapFlags::DONTUNMAP;
                let _ = m.mremap(1, BASE + off, len, len, fl, to);
            }
            Op::Map { off, len } => {
                let _ = m.mmap(1, BASE + off, len.min(ARENA - off), rw, f);
            }
            Op::Unmap { off, len } => {
                let _ = m.munmap(1, BASE + off, len);
            }
            Op::Register { off, len } => {
                let u = *uffd.get_or_insert_with(|| {
                    let u = m.uffd_open(1).unwrap();
                    m.uffd_api(u, ptlab_model::uffd::UFFD_API, 0).unwrap();
                    u
                });
                let _ = m.uffd_register(u, BASE + off, len.min(ARENA - off), 2);
            }
        }
        if let Err(e) = m.check_invariants() {
            panic!("after {op:?}: {e:#?}");
        }
    }
    (
        m.observe(1, "p1").render(Sections::ALL),
        m.hw_events(),
        m.coverage(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn move_runs_equal_entry_loops(
        orders in prop::sample::subsequence(vec![2u8, 4, 5], 0..=3),
        ops in prop::collection::vec(op(), 1..24),
    ) {
        for arch in ArchKind::ALL {
            let segment = run(arch, &orders, &ops, false, true, true);
            let entry = run(arch, &orders, &ops, true, true, true);
            let blocks = run(arch, &orders, &ops, false, false, true);
            let template = run(arch, &orders, &ops, false, true, false);
            let unknown = run_with(arch, &orders, &ops, false, true, true, (false, true, true, true));
            let spliced = run_with(arch, &orders, &ops, false, true, true, (true, false, true, true));
            let walked = run_with(arch, &orders, &ops, false, true, true, (true, true, false, true));
            let looped = run_with(arch, &orders, &ops, false, true, true, (true, true, true, false));
            for (other, what) in [
                (&unknown, "tables asked"),
                (&spliced, "lone run spliced"),
                (&walked, "source unmap walked"),
                (&looped, "contiguous lone run through the loop"),
            ] {
                prop_assert_eq!(&segment.0, &other.0, "observation, {}, {:?}", what, arch);
                prop_assert_eq!(&segment.1, &other.1, "events and calls, {}, {:?}", what, arch);
                prop_assert_eq!(&segment.2, &other.2, "rule hits, {}, {:?}", what, arch);
            }
            prop_assert_eq!(&segment.0, &template.0, "observation, first block not folded, {:?}", arch);
            prop_assert_eq!(&segment.1, &template.1, "events and calls, first block not folded, {:?}", arch);
            prop_assert_eq!(&segment.2, &template.2, "rule hits, first block not folded, {:?}", arch);
            prop_assert_eq!(&segment.0, &entry.0, "observation, {:?}", arch);
            prop_assert_eq!(&segment.1, &entry.1, "events and calls, {:?}", arch);
            prop_assert_eq!(&segment.2, &entry.2, "rule hits, {:?}", arch);
            prop_assert_eq!(&segment.0, &blocks.0, "observation, stretch off, {:?}", arch);
            prop_assert_eq!(&segment.1, &blocks.1, "events and calls, stretch off, {:?}", arch);
            prop_assert_eq!(&segment.2, &blocks.2, "rule hits, stretch off, {:?}", arch);
        }
    }
}

/// One fixed case the random one may miss: 1 MiB of order-0 pages moved
/// by 0..16 pages in turn, so that at some shift a frame that is the last
/// of its 16 lands on a block's last entry (the fold try the loop must
/// leave to the entry path).
#[test]
fn unaligned_order0_moves_agree() {
    let mib = 1 << 20;
    let mut ops = vec![Op::Write { off: 0, len: mib }];
    // The region starts `at` into the first arena; each round moves it
    // `shift` pages further along (there and back).
    let mut at = 0;
    for shift in 0..17 {
        ops.push(Op::Move {
            off: at,
            len: mib,
            shift,
            back: false,
        });
        at += shift * 4096;
        ops.push(Op::Move {
            off: at,
            len: mib,
            shift: 0,
            back: true,
        });
    }
    for arch in ArchKind::ALL {
        let segment = run(arch, &[], &ops, false, true, true);
        let entry = run(arch, &[], &ops, true, true, true);
        assert_eq!(segment.0, entry.0, "observation, {arch:?}");
        assert_eq!(segment.1, entry.1, "events and calls, {arch:?}");
        assert_eq!(segment.2, entry.2, "rule hits, {arch:?}");
    }
}

/// The seed's shape (mremap-batch-64k): 1 MiB of 64 KiB folios written,
/// then moved 1 MiB up, block-aligned, and moved again by every shift
/// 0..17 pages (unaligned: no stretch) and back; then part of it (a
/// stretch ending inside the range, and one starting at an odd block).
/// On arm64 the whole-stretch move is taken (so the property above
/// compares something) and every count equals the block-by-block loop's
/// (stretch off) and the traced entry loop's; on x86-64 there is none.
#[test]
fn seed_shape_moves_by_stretches_with_equal_counts() {
    let mib = 1 << 20;
    let mut ops = vec![
        Op::Write { off: 0, len: mib },
        Op::Move {
            off: 0,
            len: mib,
            shift: 0,
            back: false,
        },
        Op::Move {
            off: 0,
            len: mib,
            shift: 16,
            back: true,
        },
        Op::Move {
            off: 0x10000,
            len: 0x50000,
            shift: 0,
            back: false,
        },
        Op::Move {
            off: 0x10000,
            len: 0x50000,
            shift: 32,
            back: true,
        },
    ];
    for shift in 0..17 {
        ops.push(Op::Move {
            off: 0x20000,
            len: 0x40000,
            shift,
            back: false,
        });
        ops.push(Op::Move {
            off: 0x20000 + shift * 4096,
            len: 0x40000,
            shift: 0,
            back: true,
        });
    }
    use ptlab_model::diag::{taken, Step};
    for arch in ArchKind::ALL {
        let (s0, f0) = (taken(Step::MoveStretch), taken(Step::MoveFolded));
        let segment = run(arch, &[4], &ops, false, true, true);
        let (stretches, folded) = (taken(Step::MoveStretch) - s0, taken(Step::MoveFolded) - f0);
        let s1 = taken(Step::MoveStretch);
        let template = run(arch, &[4], &ops, false, true, false);
        let templated = taken(Step::MoveStretch) - s1;
        let blocks = run(arch, &[4], &ops, false, false, true);
        let entry = run(arch, &[4], &ops, true, true, true);
        assert_eq!(
            stretches, 0,
            "with the first block folded, no templated stretch, {arch:?}"
        );
        match arch {
            ArchKind::Arm64 => {
                assert!(folded >= 3, "{folded} folded stretch moves on arm64");
                assert_eq!(templated, folded, "each folded stretch is a templated one");
            }
            ArchKind::X86_64 => {
                assert_eq!(folded + templated, 0, "x86-64 moves a PTE per batch")
            }
        }
        for (other, what) in [
            (&blocks, "stretch off"),
            (&entry, "traced"),
            (&template, "first block not folded"),
        ] {
            assert_eq!(segment.0, other.0, "observation, {what}, {arch:?}");
            assert_eq!(segment.1, other.1, "events and calls, {what}, {arch:?}");
            assert_eq!(segment.2, other.2, "rule hits, {what}, {arch:?}");
        }
    }
}

/// The seed mremap-batch-64k's iteration, three times: 1 MiB mapped at the
/// arena's start, written (64 KiB folios, or order-0 pages), moved 1 MiB
/// up within its 2 MiB PTE table, unmapped; then a move that leaves part
/// of the run behind and one to the next table. The moves of a table's
/// only run within the table are taken as one rewrite (on both arches,
/// with each folio order) and every count equals the runs with either
/// switch off, with the stretch off and traced; with the switch off none
/// is taken.
#[test]
fn seed_iterations_move_lone_runs_with_equal_counts() {
    let mib = 1 << 20;
    let mut ops = Vec::new();
    for _ in 0..3 {
        ops.push(Op::Map { off: 0, len: mib });
        ops.push(Op::Write { off: 0, len: mib });
        ops.push(Op::MoveNear {
            off: 0,
            len: mib,
            shift: 0,
        });
        ops.push(Op::Unmap { off: mib, len: mib });
    }
    ops.push(Op::Map {
        off: 0,
        len: 2 * mib,
    });
    ops.push(Op::Write {
        off: 0,
        len: 3 * mib / 2,
    });
    // Part of the run, to a part of it the FIXED unmap cuts out: two runs
    // are left besides the source, the general path.
    ops.push(Op::MoveNear {
        off: 0,
        len: mib / 4,
        shift: 128,
    });
    // To the next PTE table: two tables, the general path.
    ops.push(Op::MoveNear {
        off: mib,
        len: mib / 2,
        shift: 256,
    });
    use ptlab_model::diag::{taken, Step};
    for orders in [&[4u8][..], &[]] {
        for arch in ArchKind::ALL {
            let (l0, k0) = (taken(Step::MoveLoneRun), taken(Step::UnmapKnownNone));
            let on = run(arch, orders, &ops, false, true, true);
            let lone = taken(Step::MoveLoneRun) - l0;
            let known = taken(Step::UnmapKnownNone) - k0;
            // Each iteration's source unmap: one whole VMA over none
            // entries of its table (whichever way the move went). The two
            // later moves take part of a VMA (the unmap splits it: the
            // general path), and the unmap statements find their ranges
            // mapped.
            assert_eq!(known, 3, "source unmaps known none, {arch:?} {orders:?}");
            let k1 = taken(Step::UnmapKnownNone);
            let walked = run_with(
                arch,
                orders,
                &ops,
                false,
                true,
                true,
                (true, true, false, true),
            );
            assert_eq!(
                taken(Step::UnmapKnownNone),
                k1,
                "source-known switch off, {arch:?} {orders:?}"
            );
            let l1 = taken(Step::MoveLoneRun);
            let spliced = run_with(
                arch,
                orders,
                &ops,
                false,
                true,
                true,
                (true, false, true, true),
            );
            assert_eq!(
                taken(Step::MoveLoneRun),
                l1,
                "switch off, {arch:?} {orders:?}"
            );
            // x86-64 moves each iteration's run in one step; arm64 its
            // folio stretch (order 4) — order-0 pages carry no CONT bit and
            // go through the per-segment loop.
            let want = if arch == ArchKind::Arm64 && orders.is_empty() {
                0
            } else {
                3
            };
            assert_eq!(lone, want, "lone runs moved, {arch:?} {orders:?}");
            let unknown = run_with(
                arch,
                orders,
                &ops,
                false,
                true,
                true,
                (false, true, true, true),
            );
            let blocks = run(arch, orders, &ops, false, false, true);
            let entry = run(arch, orders, &ops, true, true, true);
            for (other, what) in [
                (&walked, "source unmap walked"),
                (&spliced, "lone run spliced"),
                (&unknown, "tables asked"),
                (&blocks, "stretch off"),
                (&entry, "traced"),
            ] {
                assert_eq!(on.0, other.0, "observation, {what}, {arch:?} {orders:?}");
                assert_eq!(
                    on.1, other.1,
                    "events and calls, {what}, {arch:?} {orders:?}"
                );
                assert_eq!(on.2, other.2, "rule hits, {what}, {arch:?} {orders:?}");
            }
        }
    }
}

/// arm64's one-step move of a table's only run of whole contiguous blocks
/// (`move_cont_lone`): the seed's iteration (1 MiB of 64 KiB folios
/// mapped, written, moved 1 MiB up within its PTE table, unmapped) takes
/// it, with the range registered with a userfaultfd after the write
/// (uffd-wp dropped on the move) too, and a move shifted by a whole block
/// and one whose run an unmap cut short; a move shifted by a page,
/// order-5 folios (a block is half a folio), a block emptied by DONTNEED
/// and a move to the next table do not. Every case's observation, events
/// and calls and rule hits equal the run with `ModelConfig::move_cont_lone`
/// off and the traced run; x86-64 never takes it.
#[test]
fn cont_lone_moves_with_equal_counts() {
    let mib = 1 << 20;
    let iteration = |len: u64, shift: u64| {
        vec![
            Op::Map { off: 0, len },
            Op::Write { off: 0, len },
            Op::MoveNear { off: 0, len, shift },
            Op::Unmap {
                off: len + shift * 4096,
                len,
            },
        ]
    };
    let mut registered = iteration(mib, 0);
    registered.insert(2, Op::Register { off: 0, len: mib });
    let mut dontneed = iteration(mib, 0);
    dontneed.insert(
        2,
        Op::DontNeed {
            off: 0x30000,
            len: 0x10000,
        },
    );
    let mut cut = iteration(mib, 0);
    cut.insert(
        2,
        Op::Unmap {
            off: 0xf0000,
            len: 0x10000,
        },
    );
    cut[3] = Op::MoveNear {
        off: 0,
        len: 0xf0000,
        shift: 16,
    };
    let next_table = vec![
        Op::Map {
            off: 0,
            len: 2 * mib,
        },
        Op::Write {
            off: mib,
            len: mib / 2,
        },
        Op::MoveNear {
            off: mib,
            len: mib / 2,
            shift: 256,
        },
    ];
    let cases: [(&str, &[u8], Vec<Op>, u64); 8] = [
        ("seed iteration", &[4], iteration(mib, 0), 1),
        ("registered", &[4], registered, 1),
        ("shifted by a block", &[4], iteration(mib / 2, 16), 1),
        ("shifted by a page", &[4], iteration(mib / 2, 1), 0),
        ("order 5", &[5], iteration(mib, 0), 0),
        ("a block emptied", &[4], dontneed, 0),
        ("cut by an unmap", &[4], cut, 1),
        ("to the next table", &[4], next_table, 0),
    ];
    use ptlab_model::diag::{taken, Step};
    for (what, orders, ops, want) in cases {
        for arch in ArchKind::ALL {
            let c0 = taken(Step::MoveContLone);
            let on = run(arch, orders, &ops, false, true, true);
            let took = taken(Step::MoveContLone) - c0;
            let want = if arch == ArchKind::Arm64 { want } else { 0 };
            assert_eq!(took, want, "one-step moves, {what}, {arch:?}");
            let c1 = taken(Step::MoveContLone);
            let off = run_with(
                arch,
                orders,
                &ops,
                false,
                true,
                true,
                (true, true, true, false),
            );
            assert_eq!(
                taken(Step::MoveContLone),
                c1,
                "switch off, {what}, {arch:?}"
            );
            let entry = run(arch, orders, &ops, true, true, true);
            for (other, how) in [(&off, "switch off"), (&entry, "traced")] {
                assert_eq!(on.0, other.0, "observation, {how}, {what}, {arch:?}");
                assert_eq!(on.1, other.1, "events and calls, {how}, {what}, {arch:?}");
                assert_eq!(on.2, other.2, "rule hits, {how}, {what}, {arch:?}");
            }
        }
    }
}
