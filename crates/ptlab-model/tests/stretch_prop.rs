//! Whole-stretch steps (issue 14) against the kernel's steps one at a
//! time: mprotect's batched loop changes a stretch of identical large
//! folios mapped alike by doing its first batch and repeating that
//! batch's state change and counts for the others
//! (`sys/mprotect.rs` `change_stretch()`), and a user access runs over a
//! run of identical large folios, or of order-0 pages, in one step
//! (`sys/access.rs`). With `ModelConfig::stretch_steps` off every batch,
//! folio and page is a step of its own. The same random sequence (the
//! storage-switch steps of `tests/common/switch_prop.rs`: faults of
//! order-0, 16 KiB, 64 KiB and PMD folios, writes, mprotect, madvise,
//! mremap moves, fork and exit, swap) runs both ways on both
//! architectures: each step's result, the observation of every process,
//! the hardware events and kernel-function calls and the rule hits must
//! be equal, and the invariants hold after every step of both.

mod common;

use common::switch_prop::{op, run, Op, ARENA, BASE};
use proptest::prelude::*;
use ptlab_model::diag::{taken, Step};
use ptlab_model::{ArchKind, MapFlags, ModelConfig, Prot};

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn stretch_steps_equal_steps_one_at_a_time(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        // The arena written whole first: runs of identical folios for the
        // random steps to cut, protect and write over.
        let ops = [vec![Op::Write { proc: 0, off: 0, len: ARENA }], ops].concat();
        for arch in ArchKind::ALL {
            let on = run(arch, &orders, &ops, "stretch on", |c| c.stretch_steps = true);
            let off = run(arch, &orders, &ops, "stretch off", |c| c.stretch_steps = false);
            prop_assert_eq!(&on.text, &off.text, "observation, {:?}", arch);
            prop_assert_eq!(on.events, off.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&on.coverage, &off.coverage, "rule hits, {:?}", arch);
        }
    }
}

/// The seed workload's shape at 8 MiB (map, write, then mprotect r / rw
/// and write again) with 16 KiB, 64 KiB and order-0 pages, and after a
/// fork (shared folios: no write upgrade), on both arches: the stretch
/// is taken where it applies (so the property above compares something)
/// and nowhere else, and the counts equal the step-by-step ones.
#[test]
fn seed_shape_takes_stretches_with_equal_counts() {
    for arch in ArchKind::ALL {
        for order in [0u8, 2, 4] {
            for forked in [false, true] {
                let mut seen = Vec::new();
                let mut stretches = 0;
                for stretch in [true, false] {
                    let mut cfg = ModelConfig::for_arch(arch);
                    cfg.stretch_steps = stretch;
                    let mut m = common::mthp_model(cfg, &[order]);
                    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                    let rw = Prot::READ | Prot::WRITE;
                    m.mmap(1, BASE, ARENA, rw, f).unwrap();
                    m.access_range(1, BASE, ARENA, true, None).unwrap();
                    if forked {
                        m.fork(1).unwrap();
                    }
                    let before = taken(Step::MprotectStretch);
                    for _ in 0..2 {
                        m.mprotect(1, BASE, ARENA, Prot::READ).unwrap();
                        m.mprotect(1, BASE, ARENA, rw).unwrap();
                        m.access_range(1, BASE, ARENA, true, None).unwrap();
                    }
                    if stretch {
                        stretches = taken(Step::MprotectStretch) - before;
                    } else {
                        assert_eq!(taken(Step::MprotectStretch), before, "switch off");
                    }
                    m.check_invariants().unwrap();
                    let obs = m.observe(1, "p").render(ptlab_model::Sections::ALL);
                    seen.push((obs, m.hw_events()));
                }
                // On arm64 only folios of whole contpte blocks (64 KiB and
                // up) repeat batch for batch; order-0 pages take stretches
                // in the contpte layer's own per-segment loop
                // (`mm/contpte_runs.rs` `change_small_run()`), and after
                // the fork the parent's writes copy 16 KiB folios into
                // order-0 pages (wp_page_copy()).
                let expected = order != 2 || forked || arch == ArchKind::X86_64;
                assert_eq!(
                    stretches > 0,
                    expected,
                    "{arch:?} order {order} forked {forked}"
                );
                assert_eq!(
                    seen[0].0, seen[1].0,
                    "{arch:?} order {order} forked {forked}"
                );
                assert_eq!(
                    seen[0].1, seen[1].1,
                    "{arch:?} order {order} forked {forked}"
                );
            }
        }
    }
}

/// arm64's order-0 stretches (`mm/contpte_runs.rs` `change_small_run()`)
/// against the entry-by-entry loop with the frames at every offset from
/// the contpte blocks (`contpte_try_fold()` looks further after a block's
/// last entry only when its frame ends a 16-frame group too): a few pages
/// faulted elsewhere first shift the region's frames by 0..16, then the
/// region is written, made read-only, PROT_NONE and read-write again. The
/// counts (events, calls, rule hits) and the observation must be equal,
/// and the stretch must be taken.
#[test]
fn arm64_order0_stretches_at_every_frame_offset() {
    for shift in 0..16u64 {
        let mut seen = Vec::new();
        for stretch in [true, false] {
            let mut cfg = ModelConfig::for_arch(ArchKind::Arm64);
            cfg.stretch_steps = stretch;
            let mut m = common::mthp_model(cfg, &[]);
            let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
            let rw = Prot::READ | Prot::WRITE;
            let other = BASE + 2 * ARENA;
            m.mmap(1, other, 16 * 4096, rw, f).unwrap();
            if shift > 0 {
                m.access_range(1, other, shift * 4096, true, None).unwrap();
            }
            m.mmap(1, BASE, ARENA, rw, f).unwrap();
            m.access_range(1, BASE, ARENA, true, None).unwrap();
            let before = taken(Step::MprotectStretch);
            for prot in [Prot::READ, Prot::empty(), rw] {
                m.mprotect(1, BASE, ARENA, prot).unwrap();
            }
            m.access_range(1, BASE, ARENA, true, None).unwrap();
            m.mprotect(1, BASE, ARENA, Prot::READ).unwrap();
            let n_taken = taken(Step::MprotectStretch) - before;
            assert_eq!(n_taken > 0, stretch, "shift {shift}");
            m.check_invariants().unwrap();
            let obs = m.observe(1, "p").render(ptlab_model::Sections::ALL);
            seen.push((obs, m.hw_events(), m.coverage()));
        }
        assert_eq!(seen[0].0, seen[1].0, "observation, shift {shift}");
        assert_eq!(seen[0].1, seen[1].1, "events and calls, shift {shift}");
        assert_eq!(seen[0].2, seen[1].2, "rule hits, shift {shift}");
    }
}
