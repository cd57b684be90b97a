//! The write faults of a stretch of empty PTEs with one mTHP order, in
//! one step (issue 14): after a write fault maps a large folio from its
//! first page, the access faults the next blocks of none PTEs of its
//! table in one step where each fault would repeat it
//! (`sys/access.rs` `fault_stretch()`, `mm/fault.rs`
//! `fault_large_stretch()`, `core/folio.rs` `alloc_anon_run_like()`):
//! the folios made at once in the first one's state, the PTEs written as
//! the continuation of its run, and the first fault's events, kernel
//! calls, rule hits and statistics added once per block. With
//! `ModelConfig::stretch_steps` off every fault is a step of its own: the
//! observation (including the mTHP and vm statistics), the events and
//! the rule hits must be equal, on both architectures. And with
//! `ModelConfig::fault_fused` on (the default) a write over whole blocks
//! faults them all in one step, the first fault's counts written out
//! (`sys/fault_run.rs` `write_fused()`): equal to the template path (the
//! switch off) in everything observed and counted; with
//! `ModelConfig::fault_fused_run` on (the default) every block's folio
//! is made at once (`mm/fault.rs` `fused_write_run()`): equal to the
//! fused write with the first folio made alone (the switch off); with
//! `ModelConfig::fault_fresh_table` on (the default) the fused run takes
//! a PTE table made just before it as all none without asking: equal to
//! asking (the switch off).

mod common;

use common::switch_prop::{op, run, Op, ARENA, BASE};
use proptest::prelude::*;
use ptlab_model::diag::{taken, Step};
use ptlab_model::{ArchKind, MapFlags, ModelConfig, Prot};

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn fault_stretches_equal_faults_one_at_a_time(
        orders in prop::sample::subsequence(vec![2u8, 3, 4, 5, 9], 0..=2),
        off in 0..ARENA / 4096,
        ops in prop::collection::vec(op(), 0..20),
    ) {
        // A write over fresh memory from a random page (blocks cut by the
        // VMA's and the range's ends), then random steps (writes over
        // holes zapped by madvise, moved away or split by mprotect).
        let off = off * 4096;
        let first = Op::Write { proc: 0, off, len: ARENA - off };
        let ops = [vec![first], ops].concat();
        for arch in ArchKind::ALL {
            let on = run(arch, &orders, &ops, "stretch on", |c| c.stretch_steps = true);
            let off = run(arch, &orders, &ops, "stretch off", |c| c.stretch_steps = false);
            prop_assert_eq!(&on.text, &off.text, "observation, {:?}", arch);
            prop_assert_eq!(on.events, off.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&on.coverage, &off.coverage, "rule hits, {:?}", arch);
            // The stretches without their first fault as the template (a
            // second full fault instead): the same again.
            let second = run(arch, &orders, &ops, "first fault off", |c| c.stretch_first_fault = false);
            prop_assert_eq!(&on.text, &second.text, "observation, {:?}", arch);
            prop_assert_eq!(on.events, second.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&on.coverage, &second.coverage, "rule hits, {:?}", arch);
            // The first fault through the general path as the template
            // (the fused write off): the same again.
            let general = run(arch, &orders, &ops, "fused off", |c| c.fault_fused = false);
            prop_assert_eq!(&on.text, &general.text, "observation, fused off, {:?}", arch);
            prop_assert_eq!(on.events, general.events, "events and calls, fused off, {:?}", arch);
            prop_assert_eq!(&on.coverage, &general.coverage, "rule hits, fused off, {:?}", arch);
            // The fused write's first folio made and mapped alone, the
            // blocks after it as a stretch of its state (the fused run
            // off): the same again.
            let single = run(arch, &orders, &ops, "fused run off", |c| c.fault_fused_run = false);
            prop_assert_eq!(&on.text, &single.text, "observation, fused run off, {:?}", arch);
            prop_assert_eq!(on.events, single.events, "events and calls, fused run off, {:?}", arch);
            prop_assert_eq!(&on.coverage, &single.coverage, "rule hits, fused run off, {:?}", arch);
            // The fused run asking the PTEs of a table just made (the
            // fresh table not known): the same again.
            let asked = run(arch, &orders, &ops, "fresh table off", |c| c.fault_fresh_table = false);
            prop_assert_eq!(&on.text, &asked.text, "observation, fresh table off, {:?}", arch);
            prop_assert_eq!(on.events, asked.events, "events and calls, fresh table off, {:?}", arch);
            prop_assert_eq!(&on.coverage, &asked.coverage, "rule hits, fresh table off, {:?}", arch);
        }
    }
}

/// One map, write, unmap round of the seed workload `mremap-batch-64k`
/// (1 MiB) and an unaligned map of a little less, three times, per mTHP
/// order: the stretch is taken where it applies (every order on x86-64;
/// on arm64 only folios of whole contpte blocks, 64 KiB and up) and not
/// with the switch off, and the observation (with the statistics) and
/// the counts equal the fault-by-fault ones.
#[test]
fn seed_shape_takes_fault_stretches_with_equal_counts() {
    for arch in ArchKind::ALL {
        for order in [2u8, 3, 4, 5] {
            let mut seen = Vec::new();
            let mut stretches = 0;
            for stretch in [true, false] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.stretch_steps = stretch;
                let mut m = common::mthp_model(cfg, &[order]);
                let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                let rw = Prot::READ | Prot::WRITE;
                let before = taken(Step::FaultStretch) + taken(Step::FaultFused);
                for round in 0..3u64 {
                    m.mmap(1, BASE, 1 << 20, rw, f).unwrap();
                    m.access_range(1, BASE, 1 << 20, true, None).unwrap();
                    let odd = BASE + (4 << 20) + 3 * 4096;
                    let len = (1 << 20) - 5 * 4096;
                    m.mmap(1, odd, len, rw, f).unwrap();
                    m.access_range(1, odd, len, true, Some(round)).unwrap();
                    m.check_invariants().unwrap();
                    if round < 2 {
                        m.munmap(1, BASE, 1 << 20).unwrap();
                        m.munmap(1, odd, len).unwrap();
                    }
                }
                let n_taken = taken(Step::FaultStretch) + taken(Step::FaultFused) - before;
                if stretch {
                    stretches = n_taken;
                } else {
                    assert_eq!(n_taken, 0, "switch off");
                }
                m.check_invariants().unwrap();
                let obs = m.observe(1, "p").render(ptlab_model::Sections::ALL);
                seen.push((obs, m.hw_events()));
            }
            let expected = order >= 4 || arch == ArchKind::X86_64;
            assert_eq!(stretches > 0, expected, "{arch:?} order {order}");
            assert_eq!(seen[0].0, seen[1].0, "{arch:?} order {order}");
            assert_eq!(seen[0].1, seen[1].1, "{arch:?} order {order}");
        }
    }
}

/// munmap's zap of whole large folios of one run (`mm/zap.rs`
/// `zap_large_run()`, under `ModelConfig::fork_runs`): the seed
/// workload's rounds (map 1 MiB, write, mremap 1 MiB up, munmap) and a
/// half-unmapped round, per mTHP order, on both arches, take the stretch
/// and equal the batch-by-batch zap in everything observed and counted.
#[test]
fn seed_shape_zaps_large_runs_with_equal_counts() {
    use ptlab_model::MremapFlags;
    for arch in ArchKind::ALL {
        for order in [2u8, 4, 5] {
            let mut seen = Vec::new();
            let mut stretches = Vec::new();
            let mut folded = Vec::new();
            // fork_runs on with the first folio folded into the stretch,
            // on with it as the template, off.
            for (runs, fold) in [(true, true), (true, false), (false, true)] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.fork_runs = runs;
                cfg.zap_first_folded = fold;
                let folded_before = taken(Step::ZapFolded);
                let mut m = common::mthp_model(cfg, &[order]);
                let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                let rw = Prot::READ | Prot::WRITE;
                let mv = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                let before = taken(Step::ZapStretch);
                for round in 0..3u64 {
                    let size = 1u64 << 20;
                    m.mmap(1, BASE, size, rw, f).unwrap();
                    m.access_range(1, BASE, size, true, None).unwrap();
                    let q = m.mremap(1, BASE, size, size, mv, BASE + size).unwrap();
                    if round == 1 {
                        // Half of it, from an unaligned page, then the rest.
                        m.munmap(1, q + 5 * 4096, size / 2).unwrap();
                    }
                    m.munmap(1, q, size).unwrap();
                    m.check_invariants().unwrap();
                }
                let n_taken = taken(Step::ZapStretch) - before;
                folded.push(taken(Step::ZapFolded) - folded_before);
                stretches.push(n_taken);
                let obs = m.observe(1, "p").render(ptlab_model::Sections::ALL);
                seen.push((obs, m.hw_events(), format!("{:?}", m.phys().stats)));
            }
            // Folded, every stretch the template path takes here takes
            // its first folio too (each starts or ends its folio run).
            assert!(stretches[1] > 0, "{arch:?} order {order}");
            assert_eq!(stretches[0], 0, "{arch:?} order {order}: all folded");
            assert_eq!(folded[0], stretches[1], "{arch:?} order {order}: folded");
            assert_eq!(stretches[2], 0, "{arch:?} order {order}: switch off");
            assert_eq!(&folded[1..], [0, 0], "{arch:?} order {order}");
            assert_eq!(seen[0], seen[1], "{arch:?} order {order}");
            assert_eq!(seen[0], seen[2], "{arch:?} order {order}");
        }
    }
}

/// The first write fault of a fresh PTE table as the stretch's template
/// (`sys/fault_run.rs` `stretch_first_tables()`, switch
/// `ModelConfig::stretch_first_fault`): the seed workload's rounds (map
/// 1 MiB, write, mremap 1 MiB up, munmap) and writes from an unaligned
/// page and into a second PMD slot, per mTHP order and on both arches,
/// with the switch on, off, and with no stretch at all: the tables are
/// made ahead of the fault where the stretch can follow (and never with
/// the switch off), and the observation, the statistics, the events and
/// calls and the rule hits are the same all three ways.
#[test]
fn first_fault_as_template_counts_what_two_faults_count() {
    use ptlab_model::MremapFlags;
    for arch in ArchKind::ALL {
        for order in [2u8, 4, 5] {
            let mut seen = Vec::new();
            let mut made = Vec::new();
            let mut fused = Vec::new();
            let mut as_run = Vec::new();
            for (stretch, first, fuse, fuse_run) in [
                (true, true, false, true),
                (true, false, false, true),
                (false, true, false, true),
                (true, true, true, true),
                (true, true, true, false),
            ] {
                let mut cfg = ModelConfig::for_arch(arch);
                cfg.stretch_steps = stretch;
                cfg.stretch_first_fault = first;
                cfg.fault_fused = fuse;
                cfg.fault_fused_run = fuse_run;
                let fused_before = taken(Step::FaultFused);
                let runs_before = taken(Step::FaultFusedRun);
                let mut m = common::mthp_model(cfg, &[order]);
                let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                let rw = Prot::READ | Prot::WRITE;
                let mv = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                let before = taken(Step::FirstFaultTables);
                for round in 0..3u64 {
                    let size = 1u64 << 20;
                    m.mmap(1, BASE, size, rw, f).unwrap();
                    m.access_range(1, BASE, size, true, None).unwrap();
                    let q = m.mremap(1, BASE, size, size, mv, BASE + size).unwrap();
                    m.munmap(1, q, size).unwrap();
                    // From an unaligned page, over two PMD slots.
                    let odd = BASE + (5 << 20) + 3 * 4096;
                    m.mmap(1, odd, 2 << 20, rw, f).unwrap();
                    m.access_range(1, odd, 2 << 20, true, Some(round)).unwrap();
                    m.check_invariants().unwrap();
                    if round < 2 {
                        m.munmap(1, odd, 2 << 20).unwrap();
                    }
                }
                made.push(taken(Step::FirstFaultTables) - before);
                fused.push(taken(Step::FaultFused) - fused_before);
                as_run.push(taken(Step::FaultFusedRun) - runs_before);
                let obs = m.observe(1, "p").render(ptlab_model::Sections::ALL);
                let stats = format!("{:?}", m.phys().stats);
                seen.push((obs, stats, m.hw_events(), m.coverage()));
            }
            assert!(made[0] > 0, "{arch:?} order {order}: taken");
            assert_eq!(made[1..3], [0, 0], "{arch:?} order {order}: switch off");
            assert_eq!(fused[..3], [0, 0, 0], "{arch:?} order {order}: fused off");
            // Fused where the stretch follows the first fault (on arm64 only
            // for folios of whole contpte blocks), as often as the tables
            // were made ahead: once per round's aligned write and per slot
            // of the unaligned one past its first (partial) block.
            let fusable = order >= 4 || arch == ArchKind::X86_64;
            assert_eq!(fused[3] > 0, fusable, "{arch:?} order {order}: fused taken");
            assert!(seen[0] == seen[3], "{arch:?} order {order}: fused");
            // As one run every time the fused write is taken here (each
            // aligned write covers several blocks), and never with the
            // switch off, where the fused write is taken as often.
            assert_eq!(as_run[3], fused[3], "{arch:?} order {order}: fused runs");
            assert_eq!(fused[4], fused[3], "{arch:?} order {order}: fused, run off");
            assert_eq!(as_run[..3], [0, 0, 0], "{arch:?} order {order}");
            assert_eq!(as_run[4], 0, "{arch:?} order {order}: fused run off");
            assert!(seen[0] == seen[4], "{arch:?} order {order}: fused run off");
            assert!(
                seen[0] == seen[1],
                "{arch:?} order {order}: first fault off"
            );
            assert!(seen[0] == seen[2], "{arch:?} order {order}: no stretch");
        }
    }
}
