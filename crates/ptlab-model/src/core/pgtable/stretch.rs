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

use super::{index, run_kinds, PageTables, PmdSlot, Run};
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
        // Tables made in a row sit in consecutive slab slots: each slot
        // guessed as the one after the previous table's, checked against
        // the slot's frame, else looked up.
        let mut hint = u32::MAX;
        for i in i0..i0 + n {
            let Entry::Table(p) = self.decode(2, tbl.raw(i)) else {
                break;
            };
            let Some(s) = self.tables.slot_hinted(p.0, hint.wrapping_add(1)) else {
                break;
            };
            out.push((p, s));
            hint = s;
        }
        out
    }

    /// How many consecutive PMD slots from `va` (PMD-aligned), at most
    /// `max` and within `va`'s PUD slot, hold neither a PTE table nor a
    /// PMD leaf (what [`PageTables::pmd`] reports as [`PmdSlot::None`]):
    /// all of them when there is no PMD table. Reads the PMD table once;
    /// counts nothing.
    pub(crate) fn pmd_none_stretch(&self, va: u64, max: u64) -> u64 {
        debug_assert_eq!(va & (PMD_SIZE - 1), 0);
        let n = max.min((PUD_SIZE - (va & (PUD_SIZE - 1))) / PMD_SIZE);
        let Some((_, pmd)) = self.pmd_table(va) else {
            return n;
        };
        let i0 = index(2, va);
        let tbl = self.tables.at(pmd);
        (0..n)
            .take_while(|&j| {
                let raw = tbl.raw(i0 + j as usize);
                raw == 0 || !matches!(self.decode(2, raw), Entry::Table(_) | Entry::Leaf(_))
            })
            .count() as u64
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
    /// (Fork allocates a stretch's tables with
    /// [`PageTables::pte_alloc_stretch`]; this one-table form is the
    /// tests' reference for it.)
    #[cfg(test)]
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

    /// [`PageTables::pte_alloc_empty`] of the `n` consecutive PMD slots
    /// from `va` (PMD-aligned, all under `va`'s PMD table, which exists,
    /// and all none): the tables' pages allocated as that many single
    /// allocations hand them out ([`PhysMem::alloc_pt_page_run`]), the
    /// tables stored and their PMD entries written (one PMD store each;
    /// the entries of consecutive frames spliced into a PMD table stored
    /// as runs as one run). Appends the new tables' slab slots to `slots`
    /// in slot order; returns `false` when memory ran out (the tables
    /// before stay installed, as `pte_alloc()` one by one leaves them).
    /// The same state and events as `n` calls of `pte_alloc_empty()`.
    /// Linux: mm/memory.c copy_pmd_range() → __pte_alloc() per PMD slot.
    pub(crate) fn pte_alloc_stretch(
        &mut self,
        va: u64,
        n: u64,
        phys: &mut PhysMem,
        slots: &mut Vec<u32>,
    ) -> bool {
        debug_assert_eq!(va & (PMD_SIZE - 1), 0);
        let Some((pmd_t, pmd)) = self.pmd_table(va) else {
            return n == 0;
        };
        let i0 = index(2, va);
        debug_assert!(i0 + n as usize <= PTRS_PER_TABLE);
        debug_assert_eq!(self.pmd_none_stretch(va, n), n);
        self.tables.reserve(n as usize);
        let arch = self.arch.ops();
        let mut done = 0u64;
        while done < n {
            let Some((first, m)) = phys.alloc_pt_page_run(n - done) else {
                return false;
            };
            for j in 0..m {
                self.insert_table(first.add(j), 1);
                slots.push(self.tables.slot(&first.add(j).0).expect("just stored"));
            }
            // The m PMD entries: table descriptors of consecutive frames,
            // an affine run when the encoder's frame field is (checked at
            // the second and last entry), stored as one run where the PMD
            // table is kept as runs; else one write each.
            let i = i0 + done as usize;
            let raw0 = arch.encode_table(2, first);
            let step = if m > 1 {
                arch.encode_table(2, first.add(1)).wrapping_sub(raw0)
            } else {
                0
            };
            let last = arch.encode_table(2, first.add(m - 1));
            let kinds = run_kinds(arch, &[raw0]);
            let affine = last == raw0.wrapping_add(step.wrapping_mul(m - 1))
                && run_kinds(arch, &[last]) == kinds;
            let spliced = affine && {
                self.walk_cache.set([None; 2]);
                let run = Run {
                    start: i as u16,
                    len: m as u16,
                    kinds,
                    first: raw0,
                    step,
                };
                let t = self.tables.at_mut(pmd);
                t.is_compact() && t.splice(i, i + m as usize, Some(run))
            };
            if spliced {
                self.hw.add(HwEvent::PmdStore, m);
            } else {
                for j in 0..m {
                    let raw = arch.encode_table(2, first.add(j));
                    self.write_raw(pmd_t, 2, i + j as usize, raw);
                }
            }
            done += m;
        }
        true
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
        if cfg!(debug_assertions) {
            for (j, &(p, _)) in tables.iter().enumerate() {
                debug_assert_eq!(self.pmd(va + j as u64 * PMD_SIZE), PmdSlot::Table(p));
            }
        }
        // remove_table() of each, with the slots in hand: the walk caches
        // cleared once, the hot tables forgotten, each table taken out.
        self.walk_cache.set([None; 2]);
        self.pmd_cache.set(None);
        for &(p, s) in tables {
            for h in &mut self.hot {
                if *h == Some(s) {
                    *h = None;
                }
            }
            self.tables.remove(&p.0);
        }
        // The pages, a range of consecutive frames at a time.
        let mut j = 0;
        while j < tables.len() {
            let first = tables[j].0;
            let mut m = 1;
            while j + m < tables.len() && tables[j + m].0 == first.add(m as u64) {
                m += 1;
            }
            phys.free_pt_page_range(first, m as u64);
            j += m;
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

    /// How the tables of [`tree`] after the first are made.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Make {
        /// `pte_alloc()` each.
        PerTable,
        /// `pte_alloc_empty()` each.
        Empty,
        /// `pte_alloc_stretch()` of all of them.
        Stretch,
    }

    /// A tree with 12 PTE tables from PMD slot 3, the first by
    /// `pte_alloc()`, the others as `make` says; with `gaps`, some frames
    /// of a block freed first (lone frames and buddy pairs) so that single
    /// allocations hand out scattered frames, not in address order: the
    /// PMD entries are then no affine run (the PMD table goes dense).
    fn tree(arch: ArchKind, runs: bool, gaps: bool, make: Make) -> (PageTables, PhysMem) {
        let mut phys = PhysMem::new(1 << 16);
        let mut pt = PageTables::new(arch, &mut phys).expect("tables");
        pt.set_pte_runs(runs);
        if gaps {
            let held: Vec<Pfn> = (0..64)
                .map(|_| phys.alloc_pt_page().expect("memory"))
                .collect();
            for i in [0, 1, 3, 4, 5, 9, 16, 17, 25, 30, 31, 32, 40, 50, 51, 60] {
                phys.free_pt_page(held[i]);
            }
        }
        for j in 0..12u64 {
            let va = (3 + j) * PMD_SIZE;
            match make {
                Make::Empty if j > 0 => {
                    let slot = pt.pte_alloc_empty(va, &mut phys).expect("memory");
                    assert_eq!(pt.tables.slot(&pt.table_at(va, 1).unwrap().0), Some(slot));
                }
                Make::Stretch if j > 0 => {
                    assert_eq!(pt.pmd_none_stretch(va, 100), 100);
                    let mut slots = Vec::new();
                    assert!(pt.pte_alloc_stretch(va, 11, &mut phys, &mut slots));
                    assert_eq!(slots.len(), 11);
                    for (i, &slot) in slots.iter().enumerate() {
                        let va = va + i as u64 * PMD_SIZE;
                        assert_eq!(pt.tables.slot(&pt.table_at(va, 1).unwrap().0), Some(slot));
                    }
                    assert_eq!(pt.pmd_none_stretch(va, 100), 0);
                    assert_eq!(pt.pmd_none_stretch(va + 11 * PMD_SIZE, 3), 3);
                    break;
                }
                _ => {
                    pt.pte_alloc(va, &mut phys).expect("memory");
                }
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
            "{slots:?} tables {} used {} pmd stores {} pt pages {} frames {} next {:?} alloc {} free {}",
            pt.table_count(),
            pt.table(pmd).unwrap().used,
            pt.hw.snapshot().get(HwEvent::PmdStore),
            phys.pt_pages,
            phys.frames_allocated(),
            // Which frames: the tables' and the free lists' (the next
            // pages single allocations would hand out).
            {
                let mut p = phys.clone();
                (0..8).map(|_| p.alloc_pt_page()).collect::<Vec<_>>()
            },
            phys.hw.snapshot().get(HwEvent::PtPageAlloc),
            phys.hw.snapshot().get(HwEvent::PtPageFree),
        )
    }

    /// `pte_alloc_empty()` and `pte_alloc_stretch()` allocate as
    /// `pte_alloc()` one by one does (the same frames, also when single
    /// allocations hand out scattered frames not in address order),
    /// `pte_table_stretch()` finds the tables the PMD slots hold, and
    /// `free_pte_table_stretch()` leaves the tree, the pages, the free
    /// lists and the counts as freeing each table does
    /// (`free_pte_range()`: the PMD entry cleared, the page freed), with
    /// the PMD table stored as runs or dense, on both arches.
    #[test]
    fn stretch_ops_equal_the_per_table_ones() {
        for arch in ArchKind::ALL {
            for (runs, gaps, make) in [true, false]
                .into_iter()
                .flat_map(|r| [(r, false), (r, true)])
                .flat_map(|(r, g)| [(r, g, Make::Empty), (r, g, Make::Stretch)])
            {
                let (mut a, mut pa) = tree(arch, runs, gaps, Make::PerTable);
                let (mut b, mut pb) = tree(arch, runs, gaps, make);
                let what = format!("{arch:?} runs {runs} gaps {gaps} {make:?}");
                assert_eq!(state(&a, &pa), state(&b, &pb), "{what}");
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
                assert_eq!(state(&a, &pa), state(&b, &pb), "{what}");
                assert_eq!(b.pte_table_stretch(3 * PMD_SIZE, 100).len(), 2);
            }
        }
    }
}
