//! How often the model took one of its own whole-stretch steps: a
//! diagnostic for the property tests that compare each step with the
//! per-batch path it replaces (a test asserts the step was taken, so a
//! comparison cannot pass by never reaching it). Nothing the model
//! computes, counts or shows depends on these counters; they describe the
//! model's work, not the kernel's (kernel events are in [`crate::core::hw`]).

use std::cell::Cell;

/// A whole-stretch step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A write fault's stretch of folios faulted in one step
    /// (`sys/fault_run.rs`).
    FaultStretch,
    /// mremap's move of a stretch of batches in one step
    /// (`mm/move_pt.rs`).
    MoveStretch,
    /// fork's copy of a stretch of whole-folio PTE tables
    /// (`sys/fork.rs` `copy_thp_tables()`).
    ForkTables,
    /// A zap of a stretch of whole-folio PTE tables
    /// (`mm/zap.rs` `zap_shared_thp_tables()`).
    ZapTables,
    /// A zap of a stretch of whole large folios (`mm/zap.rs`
    /// `zap_large_run()`).
    ZapStretch,
    /// mprotect's change of a stretch of batches in one step
    /// (`sys/mprotect.rs` `change_stretch()`, `change_small_run()`).
    MprotectStretch,
    /// The tables of a write fault made before it, so that the fault is
    /// a fault stretch's template (`sys/fault_run.rs`
    /// `stretch_first_tables()`).
    FirstFaultTables,
    /// A lone PUD → PMD → PTE table chain made in one step
    /// (`core/pgtable.rs` `alloc_lone_chain()`).
    ChainAlloc,
    /// A lone PUD → PMD → PTE table chain freed in one step
    /// (`core/pgtable.rs` `free_lone_chain()`).
    ChainFree,
    /// A zap stretch of whole large folios that took its first folio too,
    /// its batch's counts written out (`mm/zap.rs`,
    /// `core/folio.rs` `unmap_free_whole_large()`).
    ZapFolded,
    /// A `free_pgd_range()` that returned at once: no PMD entry's span
    /// over the range lies inside `[floor, ceiling)`, so no table can go
    /// (`core/pgtable.rs` `no_pte_span_inside()`).
    FreeNothing,
    /// arm64's mremap stretch of whole contiguous blocks that took its
    /// first block too, that block's pass counted as written out
    /// (`mm/move_pt.rs` `move_cont_blocks_folded()`).
    MoveFolded,
    /// A write over whole blocks of none PTEs faulted in one step, its
    /// first fault's counts written out (`sys/fault_run.rs`
    /// `write_fused()`).
    FaultFused,
    /// A fused write taken as one run: every block's folio made at once
    /// (`mm/fault.rs` `fused_write_run()`, `ModelConfig::fault_fused_run`).
    FaultFusedRun,
    /// mremap's move of the only run of a PTE table within that table,
    /// rewritten in place (`mm/move_pt.rs` `move_lone_run()`).
    MoveLoneRun,
    /// An unmap of one VMA over none entries of one PTE table, the zap's
    /// counts written out (`sys/mmap.rs` `unmap_known_none()`: mremap's
    /// unmap of the source it moved, `ModelConfig::move_source_known`).
    UnmapKnownNone,
    /// arm64's mremap of an extent that is one stretch of whole
    /// contiguous blocks, the only run of its PTE table, checked and moved
    /// in one step (`mm/move_pt.rs` `move_cont_lone()`,
    /// `ModelConfig::move_cont_lone`).
    MoveContLone,
}

impl Step {
    const ALL: usize = 17;
    fn index(self) -> usize {
        self as usize
    }
}

thread_local! {
    static TAKEN: [Cell<u64>; Step::ALL] = const {
        [const { Cell::new(0) }; Step::ALL]
    };
}

/// Record one `step` taken on this thread.
pub fn took(step: Step) {
    TAKEN.with(|t| {
        let c = &t[step.index()];
        c.set(c.get() + 1);
    });
}

/// How many `step`s this thread has taken (a running total: tests take
/// the difference around the work they check).
pub fn taken(step: Step) -> u64 {
    TAKEN.with(|t| t[step.index()].get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_counts_apart() {
        const STEPS: [Step; Step::ALL] = [
            Step::FaultStretch,
            Step::MoveStretch,
            Step::ForkTables,
            Step::ZapTables,
            Step::ZapStretch,
            Step::MprotectStretch,
            Step::FirstFaultTables,
            Step::ChainAlloc,
            Step::ChainFree,
            Step::ZapFolded,
            Step::FreeNothing,
            Step::MoveFolded,
            Step::FaultFused,
            Step::FaultFusedRun,
            Step::MoveLoneRun,
            Step::UnmapKnownNone,
            Step::MoveContLone,
        ];
        let before = STEPS.map(taken);
        took(Step::MoveStretch);
        took(Step::MoveStretch);
        took(Step::ZapTables);
        let after = STEPS.map(taken);
        let added: Vec<u64> = (0..Step::ALL).map(|i| after[i] - before[i]).collect();
        assert_eq!(added, [0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }
}
