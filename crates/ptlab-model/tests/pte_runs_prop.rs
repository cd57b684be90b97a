//! Run-length PTE tables (issue 14) against dense ones: a PTE table that
//! is a few affine runs is stored as runs (`core/pgtable/store.rs`), which
//! must change nothing anyone sees. The same random sequence — faults of
//! order-0, 16 KiB, 64 KiB and PMD folios, MADV_DONTNEED/FREE/PAGEOUT/COLD,
//! guard markers, mprotect, mremap moves, fork and exit, swap — is run
//! with run-length storage (`ModelConfig::pte_runs`, the default) and with
//! every table dense, on both architectures: the observation of every
//! process (pages, pagemap, folios, tables), the hardware events and
//! kernel-function calls, the rule hits and each step's result must be
//! equal, and the invariants hold after every step of both.

mod common;

use common::switch_prop::{op, populated, run, ARENA, BASE};
use proptest::prelude::*;
use ptlab_model::{ArchKind, Model, Prot, Sections};

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn run_length_tables_equal_dense_tables(
        orders in prop::sample::subsequence(vec![2u8, 4, 9], 0..=3),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        for arch in ArchKind::ALL {
            let runs = run(arch, &orders, &ops, "pte_runs on", |c| c.pte_runs = true);
            let dense = run(arch, &orders, &ops, "pte_runs off", |c| c.pte_runs = false);
            prop_assert_eq!(dense.model.pte_table_counts().0, 0);
            prop_assert_eq!(&runs.text, &dense.text, "observation, {:?}", arch);
            prop_assert_eq!(runs.events, dense.events, "events and calls, {:?}", arch);
            prop_assert_eq!(&runs.coverage, &dense.coverage, "rule hits, {:?}", arch);
        }
    }
}

/// The property above compares something: populated large folios and
/// order-0 pages faulted in address order leave compact tables, and they
/// cost less model memory than dense ones.
#[test]
fn populated_tables_are_stored_as_runs() {
    for arch in ArchKind::ALL {
        for order in [0u8, 4, 9] {
            let mut mem = Vec::new();
            for pte_runs in [true, false] {
                let m = populated(arch, order, |c| c.pte_runs = pte_runs);
                let (compact, total) = m.pte_table_counts();
                assert_eq!(total, (ARENA >> 21) as usize, "{arch:?} order {order}");
                if pte_runs {
                    assert_eq!(compact, total, "{arch:?} order {order}");
                } else {
                    assert_eq!(compact, 0);
                }
                m.check_invariants().unwrap();
                mem.push(m.memory_bytes());
            }
            assert!(mem[0] < mem[1], "{arch:?} order {order}: {mem:?}");
        }
    }
}

/// Run-level writes (issue 14): mprotect, fork (the parent's
/// write-protect and the child's copy) and exit over whole tables of
/// 64 KiB folios and PTE-mapped THPs rewrite a compact table's runs
/// without making it dense (`store::made_dense()` does not move; user
/// writes over dirty entries change nothing), and every step gives the
/// same results, events, calls and rule hits as dense tables, on both
/// architectures. Copy-on-write faults after the fork write single
/// entries and may make tables dense.
#[test]
fn whole_table_writes_keep_tables_compact() {
    use ptlab_model::pgtable::store::made_dense;
    for arch in ArchKind::ALL {
        for order in [4u8, 9] {
            let mut outs = Vec::new();
            for pte_runs in [true, false] {
                let mut m = populated(arch, order, |c| c.pte_runs = pte_runs);
                assert_eq!(
                    m.pte_table_counts().0,
                    (ARENA >> 21) as usize * usize::from(pte_runs)
                );
                let mut text = String::new();
                let mut dense = made_dense();
                let mut step =
                    |m: &mut Model, text: &mut String, what: &str, r: String, in_place: bool| {
                        text.push_str(&format!("{what}: {r}\n"));
                        m.check_invariants().unwrap();
                        if pte_runs && in_place {
                            let (compact, total) = m.pte_table_counts();
                            assert_eq!(compact, total, "{arch:?} order {order} after {what}");
                            assert_eq!(
                                made_dense(),
                                dense,
                                "{arch:?} order {order}: {what} made a table dense"
                            );
                        }
                        dense = made_dense();
                    };
                for _ in 0..2 {
                    let r = m.mprotect(1, BASE, ARENA, Prot::READ);
                    step(&mut m, &mut text, "mprotect r", format!("{r:?}"), true);
                    let r = m.mprotect(1, BASE, ARENA, Prot::READ | Prot::WRITE);
                    step(&mut m, &mut text, "mprotect rw", format!("{r:?}"), true);
                    let r = m.access_range(1, BASE, ARENA, true, None);
                    step(&mut m, &mut text, "write", format!("{r:?}"), true);
                }
                let c = m.fork(1).unwrap();
                step(&mut m, &mut text, "fork", format!("{c}"), true);
                let r = m.access_range(1, BASE, ARENA / 2, false, None);
                step(&mut m, &mut text, "read", format!("{r:?}"), true);
                text.push_str(&m.observe(c, "child").render(Sections::ALL));
                let r = m.exit(c);
                step(&mut m, &mut text, "exit", format!("{r:?}"), true);
                let r = m.access_range(1, BASE, ARENA, true, None);
                step(
                    &mut m,
                    &mut text,
                    "write after exit",
                    format!("{r:?}"),
                    false,
                );
                text.push_str(&m.observe(1, "parent").render(Sections::ALL));
                outs.push((text, m.hw_events(), m.coverage()));
            }
            assert_eq!(outs[0].0, outs[1].0, "{arch:?} order {order}");
            assert_eq!(outs[0].1, outs[1].1, "{arch:?} order {order}");
            assert_eq!(outs[0].2, outs[1].2, "{arch:?} order {order}");
        }
    }
}
