//! A write's order-0 faults over a stretch of none PTEs in one step
//! (issue 14; `src/sys/fault_run.rs`, `mm/fault.rs`
//! `order0_write_run()`, `core/phys.rs` `alloc_small_run()`) against
//! the faults one at a time (`ModelConfig::stretch_steps` off): the same
//! random steps (`tests/common/switch_prop.rs`: writes over holes left
//! by MADV_DONTNEED, PAGEOUT, guard markers, mprotect, mremap, fork and
//! exit fragmenting the allocator's free lists) on both architectures
//! must give the same results, observation (frames included), hardware
//! events, kernel calls and rule hits, with the invariants checked after
//! every step; and a fixed write of 4 MiB at every frame alignment
//! (arm64's fold try at a block's last entry) takes the run and counts
//! exactly what the faults one at a time count.

mod common;

use common::switch_prop::{op, run, Op, ARENA, BASE};
use proptest::prelude::*;
use ptlab_model::sys::fault_run::fault_runs_taken;
use ptlab_model::{ArchKind, MapFlags, ModelConfig, Prot};

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn fault_runs_equal_faults_one_at_a_time(
        // Mostly order 0 only (the run's case); an mTHP order makes every
        // fault take the single path.
        orders in prop_oneof![3 => Just(vec![]), 1 => prop::sample::subsequence(vec![2u8, 4], 0..=2)],
        ops in prop::collection::vec(op(), 1..30),
    ) {
        let ops = [vec![Op::Write { proc: 0, off: 0, len: ARENA / 2 }], ops].concat();
        for arch in ArchKind::ALL {
            let on = run(arch, &orders, &ops, "runs on", |c| c.stretch_steps = true);
            let off = run(arch, &orders, &ops, "runs off", |c| c.stretch_steps = false);
            prop_assert_eq!(&on.text, &off.text, "observation, {:?}", arch);
            prop_assert_eq!(on.events, off.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&on.coverage, &off.coverage, "rule hits, {:?}", arch);
        }
    }
}

/// 4 MiB written after `shift` order-0 pages elsewhere (so the frames
/// fall at every alignment against the entries), then a second write
/// over a hole punched in it: on both arches the run is taken, and the
/// observation and every count equal the faults one at a time.
#[test]
fn every_frame_alignment_takes_runs_with_equal_counts() {
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    let rw = Prot::READ | Prot::WRITE;
    for arch in ArchKind::ALL {
        for shift in 0..17u64 {
            let mut seen = Vec::new();
            for on in [true, false] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.stretch_steps = on;
                let mut m = common::mthp_model(cfg, &[]);
                m.mmap(1, BASE + (64 << 20), 1 << 20, rw, f).unwrap();
                m.access_range(1, BASE + (64 << 20), shift * 4096, true, None)
                    .unwrap();
                m.mmap(1, BASE, 4 << 20, rw, f).unwrap();
                let before = fault_runs_taken();
                m.access_range(1, BASE, 4 << 20, true, Some(7)).unwrap();
                m.madvise(1, BASE + 0x3000, 0x20000, ptlab_model::Advice::DontNeed)
                    .unwrap();
                m.access_range(1, BASE, 4 << 20, true, None).unwrap();
                let taken = fault_runs_taken() - before;
                assert_eq!(taken > 0, on, "{arch:?} shift {shift}");
                m.check_invariants().unwrap();
                let obs = m.observe(1, "p").render(ptlab_model::Sections::ALL);
                seen.push((obs, m.hw_events(), m.coverage()));
            }
            assert_eq!(seen[0].0, seen[1].0, "{arch:?} shift {shift}");
            assert_eq!(seen[0].1, seen[1].1, "{arch:?} shift {shift}");
            assert_eq!(seen[0].2, seen[1].2, "{arch:?} shift {shift}");
        }
    }
}
