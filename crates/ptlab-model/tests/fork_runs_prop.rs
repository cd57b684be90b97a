//! fork's and exit's whole-stretch steps (issue 14) against entry by
//! entry: where a PTE table stores a stretch as one run of present
//! entries a frame apart, fork's order-0 copy (`mm/copy_runs.rs`) takes
//! its frames without reading each entry and writes the parent's and the
//! child's stretch as one run each, and exit's zap (`mm/zap.rs`
//! `zap_present_segment`) extends a large folio's batch, or hands order-0
//! pages to the memmap, a whole stretch at a time. The same random
//! sequence — faults of order-0, 16 KiB, 64 KiB and PMD folios, writes,
//! MADV_DONTNEED/FREE/PAGEOUT/COLD, guard markers, mprotect, mremap
//! moves, fork and exit, swap — is run with the steps
//! (`ModelConfig::fork_runs`, the default) and without, on both
//! architectures: the observation of every process, the hardware events
//! and kernel-function calls, the rule hits and each step's result must
//! be equal, and the invariants hold after every step of both.

mod common;

use common::switch_prop::{op, populated, run, ARENA, BASE};
use proptest::prelude::*;
use ptlab_model::diag::{taken, Step};
use ptlab_model::{
    Advice, ArchKind, MapFlags, Model, ModelConfig, Prot, Sections, ThpKnob, ThpMode,
};

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn whole_stretch_steps_equal_entry_by_entry(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        for arch in ArchKind::ALL {
            let fast = run(arch, &orders, &ops, "fork_runs on", |c| c.fork_runs = true);
            let slow = run(arch, &orders, &ops, "fork_runs off", |c| c.fork_runs = false);
            prop_assert_eq!(&fast.text, &slow.text, "observation, {:?}", arch);
            prop_assert_eq!(fast.events, slow.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&fast.coverage, &slow.coverage, "rule hits, {:?}", arch);
            // The zap stretches with their first folio's batch run as the
            // template (ModelConfig::zap_first_folded off): the same again.
            let template = run(arch, &orders, &ops, "zap_first_folded off", |c| c.zap_first_folded = false);
            prop_assert_eq!(&fast.text, &template.text, "observation, {:?}", arch);
            prop_assert_eq!(fast.events, template.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&fast.coverage, &template.coverage, "rule hits, {:?}", arch);
            prop_assert_eq!(
                format!("{:?}", fast.model.phys().stats),
                format!("{:?}", template.model.phys().stats),
                "statistics, {:?}", arch
            );
        }
    }
}

/// The property above compares something, on the seed workloads' shape:
/// the arena written through in address order with order-0 pages or
/// PTE-mapped THPs (each PMD split as the seeds do), then three rounds of
/// fork, a write by the parent to part of it, and the child's exit. With
/// the steps on, the child's tables right after the first fork are stored
/// as runs (the copy wrote each stretch as one run; entry by entry makes
/// them dense), fork's whole-table step of PTE-mapped THPs
/// (`sys/fork.rs` `copy_thp_tables`) is taken on every fork after the
/// first, exit's whole-table step of them (`mm/zap.rs`
/// `zap_shared_thp_tables`) where the parent still maps the folios, and
/// every step gives the same results, observations, events,
/// calls and rule hits as without.
#[test]
fn fork_and_exit_of_populated_tables() {
    for arch in ArchKind::ALL {
        for order in [0u8, 9] {
            let mut outs = Vec::new();
            for fork_runs in [true, false] {
                let zap_steps = taken(Step::ZapTables);
                let mut m = populated(arch, order, |c| c.fork_runs = fork_runs);
                let mut text = String::new();
                for round in 0..3 {
                    let (compact0, _) = m.pte_table_counts();
                    let steps = taken(Step::ForkTables);
                    let c = m.fork(1).unwrap();
                    // The whole-table step of PTE-mapped THPs: not on the
                    // first fork (it write-protects the parent's tables),
                    // on every later one (the tables the parent has not
                    // written since map folios of one run).
                    let n_taken = taken(Step::ForkTables) - steps;
                    let want = u64::from(fork_runs && order == 9 && round > 0);
                    assert_eq!(n_taken, want, "{arch:?} order {order} round {round}");
                    m.check_invariants().unwrap();
                    let (compact, total) = m.pte_table_counts();
                    let tables = (ARENA >> 21) as usize;
                    assert_eq!(total, 2 * tables, "{arch:?} order {order}");
                    if fork_runs && order == 0 && round == 0 {
                        // The child's tables were written as runs (later
                        // rounds: the parent's copy-on-write faults have
                        // broken some of its runs up).
                        assert_eq!(
                            compact,
                            compact0 + tables,
                            "{arch:?} order {order} round {round}"
                        );
                    }
                    text.push_str(&m.observe(c, "child").render(Sections::ALL));
                    let r = m.access_range(1, BASE + round * (ARENA / 4), ARENA / 8, true, None);
                    text.push_str(&format!("write: {r:?}\n"));
                    let pt_before = m.phys().pt_pages;
                    let r = m.exit(c);
                    text.push_str(&format!("exit: {r:?}\n"));
                    m.check_invariants().unwrap();
                    // Exit frees every table of the child (with the
                    // steps on, a stretch's tables straight from the zap:
                    // `core/pgtable/stretch.rs` free_pte_table_stretch),
                    // and the frames free are the same either way.
                    assert_eq!(m.pte_table_counts().1, tables, "{arch:?} order {order}");
                    assert!(m.phys().pt_pages < pt_before);
                    text.push_str(&format!(
                        "after exit: {} table pages, {} frames allocated\n",
                        m.phys().pt_pages,
                        m.phys().frames_allocated()
                    ));
                    text.push_str(&m.observe(1, "parent").render(Sections::ALL));
                }
                // The exits' whole-table step (`mm/zap.rs`
                // `zap_shared_thp_tables`): taken where a child's tables
                // map folios of one run the parent still maps.
                let zap_taken = taken(Step::ZapTables) - zap_steps;
                assert_eq!(
                    zap_taken > 0,
                    fork_runs && order == 9,
                    "{arch:?} order {order}: {zap_taken} zap steps"
                );
                outs.push((text, m.hw_events(), m.coverage()));
            }
            assert_eq!(outs[0].0, outs[1].0, "{arch:?} order {order}");
            assert_eq!(outs[0].1, outs[1].1, "{arch:?} order {order}");
            assert_eq!(outs[0].2, outs[1].2, "{arch:?} order {order}");
        }
    }
}

/// Fork's and exit's whole-table steps where the child's PTE tables get
/// scattered frames: order-0 pages freed in an irregular pattern (lone
/// frames and buddy pairs) before each fork, so that single allocations
/// hand out frames neither consecutive nor in address order. The child's
/// tables of a stretch are allocated in one step
/// (`core/pgtable/stretch.rs` pte_alloc_stretch(): the frames single
/// allocations would hand out, run by run) and freed in one step by exit
/// (free_pte_table_stretch(): the frames given back range by range); with
/// the steps on and off, on both arches, every observation, event, call
/// and rule hit must be equal, and so must the free lists after each exit
/// (the next 64 frames single allocations would hand out) and after each
/// fork.
#[test]
fn thp_table_steps_with_scattered_table_frames() {
    const BIG: u64 = 64 << 20;
    const HOLES: u64 = BASE + (1 << 30);
    // Which pages of the 256-page hole region are given back (a mix of
    // lone frames and adjacent pairs).
    let freed: Vec<u64> = (0..256u64)
        .filter(|i| (i * i + 3 * i) % 7 < 2 || i % 29 == 0)
        .collect();
    // The next frames single page-table page allocations would get.
    fn next_frames(m: &Model) -> String {
        let mut p = m.phys().clone();
        format!(
            "{:?}\n",
            (0..64).map(|_| p.alloc_pt_page()).collect::<Vec<_>>()
        )
    }
    for arch in ArchKind::ALL {
        let mut outs = Vec::new();
        for fork_runs in [true, false] {
            let mut cfg = ModelConfig::for_arch(arch);
            cfg.fork_runs = fork_runs;
            let mut m = Model::new(cfg);
            m.set_thp(ThpKnob::Size(9), ThpMode::Always).unwrap();
            let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
            let rw = Prot::READ | Prot::WRITE;
            m.mmap(1, BASE, BIG, rw, f).unwrap();
            m.access_range(1, BASE, BIG, true, None).unwrap();
            for slot in (BASE..BASE + BIG).step_by(1 << 21) {
                m.madvise(1, slot, 4096, Advice::DontFork).unwrap();
                m.madvise(1, slot, 4096, Advice::DoFork).unwrap();
            }
            m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
            m.mmap(1, HOLES, 256 << 12, rw, f).unwrap();
            let mut text = String::new();
            for round in 0..3u64 {
                // Order-0 pages, then the pattern given back.
                m.access_range(1, HOLES, 256 << 12, true, None).unwrap();
                for &i in &freed {
                    m.madvise(1, HOLES + (i << 12), 4096, Advice::DontNeed)
                        .unwrap();
                }
                text.push_str(&next_frames(&m));
                let steps = taken(Step::ForkTables);
                let c = m.fork(1).unwrap();
                // Taken on every fork after the first (more than once
                // where the parent's writes broke the folio run up).
                let n_taken = taken(Step::ForkTables) - steps;
                assert_eq!(
                    n_taken > 0,
                    fork_runs && round > 0,
                    "{arch:?} round {round}: {n_taken}"
                );
                m.check_invariants().unwrap();
                text.push_str(&next_frames(&m));
                text.push_str(&m.observe(c, "child").render(Sections::ALL));
                let r = m.access_range(1, BASE + round * (BIG / 4), 1 << 20, true, None);
                text.push_str(&format!("write: {r:?}\n"));
                let r = m.exit(c);
                text.push_str(&format!("exit: {r:?}\n"));
                m.check_invariants().unwrap();
                text.push_str(&format!(
                    "after exit: {} table pages, {} frames allocated\n",
                    m.phys().pt_pages,
                    m.phys().frames_allocated()
                ));
                text.push_str(&next_frames(&m));
                text.push_str(&m.observe(1, "parent").render(Sections::ALL));
            }
            outs.push((text, m.hw_events(), m.coverage()));
        }
        assert_eq!(outs[0].0, outs[1].0, "{arch:?}");
        assert_eq!(outs[0].1, outs[1].1, "{arch:?}");
        assert_eq!(outs[0].2, outs[1].2, "{arch:?}");
    }
}
