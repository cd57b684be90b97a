//! Stretches of PTE tables under one PMD table (issue 14): the table
//! operations of fork's and exit's whole-table steps (`sys/fork.rs`
//! `copy_thp_tables()`, `mm/zap.rs` `zap_shared_thp_tables()`) done with
//! the tables' slab slots in hand, read once from the PMD table, instead
//! of a walk from the PMD slot per table and per operation.
//!
//! Each function leaves the tree, the walk caches aside, as the per-table
//! operation it stands for leaves it, and counts the same events:
//! [`PageTables::pte_alloc_empty`] is `pte_alloc()` of an empty slot,
//! [`PageTables::pte_table_in`] is [`PageTables::pte_table`],
//! [`PageTables::free_pte_table_stretch`] is what `free_pgtables()` does
//! to each table (`free_pte_range()`: `pmd_clear()` and the page freed).

use super::{index, PageTables, PmdSlot};
use crate::core::addr::{Pfn, PMD_SIZE, PTRS_PER_TABLE, PUD_SIZE};
use crate::core::arch::{Entry, PteTable, TableView};
use crate::core::folio::PhysMem;
use crate::core::hw::HwEvent;
use crate::core::pgtable::Entries;

impl PageTables {
    /// The PTE tables of the consecutive PMD slots from `va` (PMD-aligned),
    /// at most `max` of them, all under `va`'s PMD table: each table's
    /// frame and slab slot, up to the first slot that holds no PTE table.
    /// Reads the PMD table once; counts nothing (the model's bookkeeping:
    /// the kernel's walk reads each PMD entry as it comes to it, counted
    /// by the per-table code the callers repeat).
    pub(crate) fn pte_table_stretch(&self, va: u64, max: u64) -> Vec<(Pfn, u32)> {
        debug_assert_eq!(va & (PMD_SIZE - 1), 0);
        let Some((_, pmd)) = self.pmd_table(va) else {
            return Vec::new();
        };
        let i0 = index(2, va);
        let n = (max.min((PUD_SIZE - (va & (PUD_SIZE - 1))) / PMD_SIZE) as usize)
            .min(PTRS_PER_TABLE - i0);
        let tbl = self.tables.at(pmd);
        let mut out = Vec::with_capacity(n);
        for i in i0..i0 + n {
            let Entry::Table(p) = self.decode(2, tbl.raw(i)) else {
                break;
            };
            let Some(s) = self.tables.slot(&p.0) else {
                break;
            };
            out.push((p, s));
        }
        out
    }

    /// The entries of the PTE table in slab slot `slot` (from
    /// [`PageTables::pte_table_stretch`]), read without a walk.
    pub(crate) fn pte_entries_in(&self, slot: u32) -> Entries<'_> {
        self.tables.at(slot).entries()
    }

    /// [`PageTables::pte_table`] of the table in slab slot `slot` covering
    /// `va` (from [`PageTables::pte_table_stretch`] or
    /// [`PageTables::pte_alloc_empty`]): the same view and the same
    /// write bookkeeping, without the walk.
    pub(crate) fn pte_table_in(&mut self, slot: u32, va: u64) -> PteTable<'_> {
        debug_assert_eq!(self.tables.at(slot).level, 1);
        self.note_write(slot);
        PteTable {
            arch: self.arch.ops(),
            view: TableView::of(self.tables.at_mut(slot)),
            spare: &mut self.spare,
            hw: &self.hw,
            nonpresent: &self.nonpresent,
            base: va & !(PMD_SIZE - 1),
        }
    }

    /// `pte_alloc()` of the PMD slot of `va` where the caller knows the
    /// PMD table exists and the slot is none: a new table installed,
    /// returning its slab slot (`None`: out of memory, nothing changed).
    /// The same events and state as [`PageTables::pte_alloc`] there.
    /// Linux: mm/memory.c __pte_alloc() → pmd_populate().
    pub(crate) fn pte_alloc_empty(&mut self, va: u64, phys: &mut PhysMem) -> Option<u32> {
        let (pmd_t, pmd) = self.pmd_table(va)?;
        let i = index(2, va);
        debug_assert!(matches!(
            self.decode(2, self.tables.at(pmd).raw(i)),
            Entry::None
        ));
        let p = self.new_table(1, phys)?;
        let raw = self.arch.ops().encode_table(2, p);
        self.write_raw(pmd_t, 2, i, raw);
        self.tables.slot(&p.0)
    }

    /// Free the PTE tables `tables` of the consecutive PMD slots from `va`
    /// (as [`PageTables::pte_table_stretch`] returned them) as
    /// `free_pgtables()` frees each: the PMD entry cleared (one PMD store)
    /// and the page freed. Their entries need not be cleared first: the
    /// caller is exit (a fullmm gather), whose tables all go, and whose
    /// zap has already done to each what clearing it would.
    /// Linux: mm/memory.c free_pmd_range() → free_pte_range().
    pub(crate) fn free_pte_table_stretch(
        &mut self,
        va: u64,
        tables: &[(Pfn, u32)],
        phys: &mut PhysMem,
    ) {
        let Some((_, pmd)) = self.pmd_table(va) else {
            return;
        };
        let i0 = index(2, va);
        for (j, &(p, _)) in tables.iter().enumerate() {
            debug_assert_eq!(self.pmd(va + j as u64 * PMD_SIZE), PmdSlot::Table(p));
            self.remove_table(p);
            phys.free_pt_page(p);
        }
        self.clear_pmd_entries(pmd, i0, i0 + tables.len());
    }

    /// `pmd_clear()` of entries `lo..hi` of the PMD table in slab slot
    /// `pmd`: one PMD store each, the entries none after, as that many
    /// [`PageTables::write_raw`] of 0 leave them (a table stored as runs
    /// has the range cut out of its runs in one splice).
    fn clear_pmd_entries(&mut self, pmd: u32, lo: usize, hi: usize) {
        if lo >= hi {
            return;
        }
        self.walk_cache.set([None; 2]);
        self.hw.add(HwEvent::PmdStore, (hi - lo) as u64);
        let t = self.tables.at_mut(pmd);
        debug_assert_eq!(t.level, 2);
        if t.splice(lo, hi, None) {
            return;
        }
        let (entries, used) = t.dense_and_used(&mut self.spare);
        for e in &mut entries[lo..hi] {
            if *e != 0 {
                *e = 0;
                *used -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arch::ArchKind;

    /// A tree with `n` PTE tables from PMD slot 3, the first by
    /// `pte_alloc()`, the others by `pte_alloc_empty()` (`stretch`) or
    /// `pte_alloc()`; with `gaps`, a page allocated between tables, so the
    /// PMD entries are no affine run (the PMD table goes dense).
    fn tree(arch: ArchKind, runs: bool, gaps: bool, stretch: bool) -> (PageTables, PhysMem) {
        let mut phys = PhysMem::new(1 << 16);
        let mut pt = PageTables::new(arch, &mut phys).expect("tables");
        pt.set_pte_runs(runs);
        for j in 0..12u64 {
            let va = (3 + j) * PMD_SIZE;
            if stretch && j > 0 {
                let slot = pt.pte_alloc_empty(va, &mut phys).expect("memory");
                assert_eq!(pt.tables.slot(&pt.table_at(va, 1).unwrap().0), Some(slot));
            } else {
                pt.pte_alloc(va, &mut phys).expect("memory");
            }
            if gaps {
                phys.alloc_pt_page().expect("memory");
            }
        }
        (pt, phys)
    }

    /// What the two trees hold and counted: every PMD slot, the tables,
    /// the PMD table's used count, the PMD stores, the pages.
    fn state(pt: &PageTables, phys: &PhysMem) -> String {
        let slots: Vec<PmdSlot> = (0..20).map(|j| pt.pmd(j * PMD_SIZE)).collect();
        let pmd = pt.table_at(0, 2).unwrap();
        format!(
            "{slots:?} tables {} used {} pmd stores {} pt pages {} frames {} alloc {} free {}",
            pt.table_count(),
            pt.table(pmd).unwrap().used,
            pt.hw.snapshot().get(HwEvent::PmdStore),
            phys.pt_pages,
            phys.frames_allocated(),
            phys.hw.snapshot().get(HwEvent::PtPageAlloc),
            phys.hw.snapshot().get(HwEvent::PtPageFree),
        )
    }

    /// `pte_alloc_empty()` allocates as `pte_alloc()` does,
    /// `pte_table_stretch()` finds the tables the PMD slots hold, and
    /// `free_pte_table_stretch()` leaves the tree, the pages and the
    /// counts as freeing each table does (`free_pte_range()`: the PMD
    /// entry cleared, the page freed), with the PMD table stored as runs
    /// or dense, on both arches.
    #[test]
    fn stretch_ops_equal_the_per_table_ones() {
        for arch in ArchKind::ALL {
            for (runs, gaps) in [(true, false), (true, true), (false, false)] {
                let (mut a, mut pa) = tree(arch, runs, gaps, false);
                let (mut b, mut pb) = tree(arch, runs, gaps, true);
                assert_eq!(state(&a, &pa), state(&b, &pb), "{arch:?} {runs} {gaps}");
                let s = b.pte_table_stretch(3 * PMD_SIZE, 100);
                assert_eq!(s.len(), 12);
                for (j, &(p, _)) in s.iter().enumerate() {
                    assert_eq!(b.pmd((3 + j as u64) * PMD_SIZE), PmdSlot::Table(p));
                }
                // A stretch stops at the first slot without a table.
                assert_eq!(b.pte_table_stretch(2 * PMD_SIZE, 100).len(), 0);
                assert_eq!(b.pte_table_stretch(10 * PMD_SIZE, 3).len(), 3);
                // Free the tables of slots 5..13 (the middle of the run).
                for j in 5..13u64 {
                    a.free_pte_table(j * PMD_SIZE, &mut pa);
                }
                b.free_pte_table_stretch(5 * PMD_SIZE, &s[2..10], &mut pb);
                assert_eq!(state(&a, &pa), state(&b, &pb), "{arch:?} {runs} {gaps}");
                assert_eq!(b.pte_table_stretch(3 * PMD_SIZE, 100).len(), 2);
            }
        }
    }
}
