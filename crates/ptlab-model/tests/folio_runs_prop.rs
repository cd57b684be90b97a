//! Folio-run records (issue 14) against one record per folio: the model
//! keeps one large-folio record per run of identical folios
//! (`core/folio.rs` `FolioRun`), split when an operation touches one folio
//! of a run and joined again when neighbours agree, which must change
//! nothing anyone sees. The same random sequence — faults of order-0,
//! 16 KiB, 64 KiB and PMD folios, writes, MADV_DONTNEED/FREE/PAGEOUT/COLD,
//! guard markers, mprotect, mremap moves, fork and exit, swap — is run
//! with folio runs (`ModelConfig::folio_runs`, the default) and with one
//! record per folio, on both architectures: the observation of every
//! process (pages, pagemap, folios, tables), the hardware events and
//! kernel-function calls, the rule hits and each step's result must be
//! equal, and the invariants (recomputed from the page tables) hold after
//! every step of both.
//!
//! The same sequences then compare the records' storage with and without
//! `ModelConfig::folio_record_reuse` (issue 14, sixteenth session: the run
//! index a sorted vector while small, a freed slot's mappings buffer
//! taken by the next run made in it): the observation, events and calls,
//! rule hits, statistics and `Model::memory_bytes()` after every step
//! must be equal.

mod common;

use common::switch_prop::{op, run, ARENA, BASE};
use proptest::prelude::*;
use ptlab_model::{ArchKind, MapFlags, ModelConfig, Prot};

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn folio_runs_equal_one_record_per_folio(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        for arch in ArchKind::ALL {
            let mut runs = run(arch, &orders, &ops, "folio_runs on", |c| c.folio_runs = true);
            let mut each = run(arch, &orders, &ops, "folio_runs off", |c| c.folio_runs = false);
            prop_assert!(runs.model.large_folio_records() <= each.model.large_folio_records());
            prop_assert_eq!(&runs.text, &each.text, "observation, {:?}", arch);
            prop_assert_eq!(runs.events, each.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&runs.coverage, &each.coverage, "rule hits, {:?}", arch);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn folio_record_reuse_changes_nothing(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        for arch in ArchKind::ALL {
            let on = run(arch, &orders, &ops, "folio_record_reuse on", |c| c.folio_record_reuse = true);
            let off = run(arch, &orders, &ops, "folio_record_reuse off", |c| c.folio_record_reuse = false);
            prop_assert_eq!(&on.text, &off.text, "observation, {:?}", arch);
            prop_assert_eq!(on.events, off.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&on.coverage, &off.coverage, "rule hits, {:?}", arch);
            prop_assert_eq!(&on.stats, &off.stats, "statistics, {:?}", arch);
            prop_assert_eq!(&on.memory, &off.memory, "memory_bytes(), {:?}", arch);
        }
    }
}

/// The seed workload's rounds (map 1 MiB of 64 KiB folios, write, mremap
/// 1 MiB up, munmap), with more runs alive beside them than the small
/// index holds (so it grows into the B-tree), are the same with and
/// without `folio_record_reuse`: observation, events, rule hits,
/// statistics and `memory_bytes()` after every round.
#[test]
fn seed_rounds_equal_with_and_without_record_reuse() {
    use ptlab_model::MremapFlags;
    for arch in ArchKind::ALL {
        let mut seen = Vec::new();
        for reuse in [true, false] {
            let mut cfg = ModelConfig::for_arch(arch);
            cfg.folio_record_reuse = reuse;
            let mut m = common::mthp_model(cfg, &[4]);
            let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
            let rw = Prot::READ | Prot::WRITE;
            let mv = MremapFlags::MAYMOVE | MremapFlags::FIXED;
            let size = 1u64 << 20;
            let mut memory = Vec::new();
            for round in 0..80u64 {
                if round % 2 == 1 {
                    // A run that stays: one 64 KiB folio with its own
                    // contents, away from the rounds' range.
                    let a = BASE + (64 << 20) + round * 0x20000;
                    m.mmap(1, a, 0x10000, rw, f).unwrap();
                    m.access_range(1, a, 0x10000, true, Some(round)).unwrap();
                }
                m.mmap(1, BASE, size, rw, f).unwrap();
                m.access_range(1, BASE, size, true, None).unwrap();
                let q = m.mremap(1, BASE, size, size, mv, BASE + size).unwrap();
                m.munmap(1, q, size).unwrap();
                m.check_invariants().unwrap();
                memory.push(m.memory_bytes());
            }
            let obs = m.observe(1, "p").render(ptlab_model::Sections::ALL);
            seen.push((
                obs,
                m.hw_events(),
                format!("{:?}", m.phys().stats),
                m.coverage(),
                memory,
            ));
        }
        assert_eq!(seen[0], seen[1], "{arch:?}");
    }
}

/// The property above compares something: a populated range of 64 KiB or
/// 16 KiB folios, written in address order, forked, mprotected and with
/// the child gone, is held in far fewer records than folios, and costs
/// less model memory than one record per folio; a write to one folio in
/// the middle splits its run, and writing it back as it was joins it again.
#[test]
fn populated_folios_are_held_as_runs() {
    for arch in ArchKind::ALL {
        for order in [2u8, 4] {
            let mut seen = Vec::new();
            for folio_runs in [true, false] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.folio_runs = folio_runs;
                let mut m = common::mthp_model(cfg, &[order]);
                let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
                m.access_range(1, BASE, ARENA, true, None).unwrap();
                let folios = (ARENA >> (12 + order)) as usize;
                let populated = m.large_folio_records();
                let child = m.fork(1).unwrap();
                m.mprotect(1, BASE, ARENA, Prot::READ).unwrap();
                m.exit(child).unwrap();
                let after = m.large_folio_records();
                m.check_invariants().unwrap();
                let mem = m.memory_bytes();
                // One folio in the middle written alone, then the range
                // made writable and written in address order again.
                m.mprotect(1, BASE, ARENA, Prot::READ | Prot::WRITE)
                    .unwrap();
                let mid = BASE + ARENA / 2 + 4096;
                m.access_range(1, mid, 4096, true, Some(7)).unwrap();
                let split = m.large_folio_records();
                m.access_range(1, BASE, ARENA, true, None).unwrap();
                let joined = m.large_folio_records();
                m.check_invariants().unwrap();
                if folio_runs {
                    assert!(
                        populated * 16 <= folios,
                        "{arch:?} order {order}: {populated} records"
                    );
                    assert_eq!(after, populated, "{arch:?} order {order}");
                    assert!(
                        split > after && split <= after + 2,
                        "{arch:?} order {order}"
                    );
                    assert_eq!(
                        joined,
                        after,
                        "{arch:?} order {order}: {:?}",
                        (populated, after, split, joined)
                    );
                } else {
                    assert_eq!(
                        (populated, after, split, joined),
                        (folios, folios, folios, folios)
                    );
                }
                seen.push(mem);
            }
            assert!(seen[0] < seen[1], "{arch:?} order {order}: {seen:?}");
        }
    }
}
