//! The page-table cursor: the one way the model walks a range of a
//! [`PageTables`] tree (asterinas' `ostd::mm::page_table::Cursor`, adapted
//! to a model whose walkers change the tree between steps).
//!
//! A [`Cursor`] is a position in `[start, end)` and the lowest level it
//! descends to. [`Cursor::query`] walks from the root to what covers the
//! current address and returns it with its span ([`Query`]): nothing (a
//! missing table or a none entry, merged over the following none entries
//! of the same table), a PMD leaf, a PTE-table segment (a PMD-level
//! cursor stops there), or one PTE (a present leaf, or a swap entry or
//! marker). [`Cursor::next`] queries and moves past the span;
//! [`Cursor::jump`] moves anywhere forward. The cursor borrows the tree
//! only for the length of one call, so a walker may split, zap or free
//! what it found before it steps on, as the kernel's walkers do under
//! their locks.
//!
//! Reading the tree through the cursor counts no hardware event: the walk
//! is the model's bookkeeping, and the kernel's own loads are counted
//! where it makes them. A PTE-table segment is locked with
//! [`Segment::lock_pte_table`], which is `pte_offset_map_lock()`
//! ([`PageTables::pte_offset_map_lock`]): the PMD load and the PTL are
//! counted there, once per segment and page table.
//!
//! Linux: mm/pagewalk.c walk_pgd_range() … walk_pte_range(), and the
//! `*_pmd_range()` loops of mm/memory.c (zap_pmd_range(),
//! copy_pmd_range()) and mm/mprotect.c (change_pmd_range()) with
//! `next = pmd_addr_end(addr, end)`.

use super::{entry_span, index, pmd_end, PageTables, PtlGuard};
use crate::core::addr::{Pfn, PAGE_SIZE, PMD_SIZE, PTRS_PER_TABLE, PUD_SIZE};
use crate::core::arch::{Entry, Leaf};

/// The top of the 4-level address space (what the PGD covers).
const VA_LIMIT: u64 = entry_span(4) * PTRS_PER_TABLE as u64;

/// What covers a cursor's address.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PtItem {
    /// Nothing mapped: no table at `level`, or none entries there.
    None { level: u8 },
    /// A block mapping at `level` (2 = PMD).
    Huge { level: u8, leaf: Leaf },
    /// A PTE table (in frame `Pfn`): what a PMD-level cursor stops at.
    PteTable(Pfn),
    /// A present PTE.
    Pte(Leaf),
    /// A non-present, non-none PTE: a swap entry or a marker.
    NonPresent(Entry),
}

/// One step of a walk: `item` covers `[va, end)` (clipped to the cursor's
/// range).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Query {
    pub va: u64,
    pub end: u64,
    pub item: PtItem,
}

impl Query {
    /// The part of one PTE table (or PMD slot) this step covers.
    pub fn segment(&self) -> Segment {
        Segment {
            start: self.va,
            end: self.end,
        }
    }

    /// Start of the entry that holds the item (a PMD leaf reported from
    /// the middle of its block starts at the block).
    pub fn entry_start(&self) -> u64 {
        let span = match self.item {
            PtItem::Huge { level, .. } | PtItem::None { level } => entry_span(level),
            PtItem::PteTable(_) => PMD_SIZE,
            PtItem::Pte(_) | PtItem::NonPresent(_) => PAGE_SIZE,
        };
        self.va & !(span - 1)
    }

    /// Whether the step covers a whole PMD slot.
    pub fn whole_pmd(&self) -> bool {
        self.end - self.va == PMD_SIZE
    }
}

/// `[start, end)` inside one PMD slot: the unit a PTE-level walker
/// (zap_pte_range(), copy_pte_range(), change_pte_range()) works on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
}

impl Segment {
    /// `pte_offset_map_lock()` of this segment's table in `pt`: one PMD
    /// load and one PTL, counted by [`PageTables::pte_offset_map_lock`].
    pub fn lock_pte_table(&self, pt: &PageTables) -> PtlGuard {
        pt.pte_offset_map_lock(self.start)
    }

    /// Pages in the segment.
    pub fn nr_pages(&self) -> u64 {
        (self.end - self.start) / PAGE_SIZE
    }
}

/// A walk position over `[va, end)` that descends to level `floor`
/// (2: stop at PTE tables; 1: visit PTEs).
#[derive(Clone, Debug)]
pub struct Cursor {
    va: u64,
    end: u64,
    floor: u8,
}

impl Cursor {
    /// A cursor over `[start, end)` that stops at PMD entries: PTE tables
    /// come back as [`PtItem::PteTable`] segments, one per PMD slot.
    pub fn pmds(start: u64, end: u64) -> Self {
        Cursor {
            va: start,
            end: end.min(VA_LIMIT),
            floor: 2,
        }
    }

    /// A cursor over `[start, end)` that visits every PTE (empty tables
    /// and runs of none entries come back as one [`PtItem::None`]).
    pub fn ptes(start: u64, end: u64) -> Self {
        Cursor {
            floor: 1,
            ..Cursor::pmds(start, end)
        }
    }

    /// The current address.
    pub fn va(&self) -> u64 {
        self.va
    }

    /// Move to `va` (forward, within the range).
    pub fn jump(&mut self, va: u64) {
        debug_assert!(va >= self.va, "a cursor moves forward");
        self.va = va;
    }

    /// What covers the current address, or `None` past the end.
    pub fn query(&self, pt: &PageTables) -> Option<Query> {
        let (va, end) = (self.va, self.end);
        if va >= end {
            return None;
        }
        // Slab slots, not frames: each level's table is found by the slot
        // its parent's step found (one index lookup per table entered).
        let (mut t, mut level) = (None, 4u8);
        if self.floor == 1 {
            // The walk cache knows the PTE table of the last slot walked
            // (it is cleared by every PMD-or-higher write).
            if let Some((_, slot)) = pt.cached_pte_table(va) {
                if pt.tables.at(slot).used == 0 {
                    return Some(Query {
                        va,
                        end: pmd_end(va, end),
                        item: PtItem::None { level: 1 },
                    });
                }
                (t, level) = (Some(slot), 1);
            }
        }
        if t.is_none() {
            // The PMD-table cache knows the PMD table of the last 1 GiB
            // slot walked: start there, as the walk from the root would
            // arrive (an empty one maps nothing over the PUD entry).
            if let Some((_, slot)) = pt.pmd_table(va) {
                if pt.tables.at(slot).used == 0 {
                    let pud_end = (va & !(PUD_SIZE - 1)).saturating_add(PUD_SIZE);
                    return Some(Query {
                        va,
                        end: pud_end.min(end),
                        item: PtItem::None { level: 2 },
                    });
                }
                (t, level) = (Some(slot), 2);
            }
        }
        let mut t = match t {
            Some(s) => s,
            None => pt.tables.slot(&pt.root.0).expect("root table"),
        };
        loop {
            let tbl = pt.tables.at(t);
            let span = entry_span(level);
            let clip = |e: u64| e.min(end);
            let entry_end = (va & !(span - 1)).saturating_add(span);
            let i = index(level, va);
            match pt.decode(level, tbl.raw(i)) {
                Entry::Table(next) if level > self.floor => {
                    let slot = if level == 2 {
                        pt.cache_pte_table(va, next)
                    } else {
                        pt.tables.slot(&next.0)
                    };
                    let slot = slot.expect("a table entry names a stored table");
                    let child = pt.tables.at(slot);
                    if child.used == 0 {
                        // An empty table maps nothing.
                        return Some(Query {
                            va,
                            end: clip(entry_end),
                            item: PtItem::None { level: level - 1 },
                        });
                    }
                    t = slot;
                    level -= 1;
                }
                Entry::Table(p) => {
                    return Some(Query {
                        va,
                        end: pmd_end(va, end),
                        item: PtItem::PteTable(p),
                    })
                }
                Entry::Leaf(leaf) if level == 1 => {
                    return Some(Query {
                        va,
                        end: clip(entry_end),
                        item: PtItem::Pte(leaf),
                    })
                }
                Entry::Leaf(leaf) => {
                    return Some(Query {
                        va,
                        end: clip(entry_end),
                        item: PtItem::Huge { level, leaf },
                    })
                }
                e @ (Entry::Swap(_) | Entry::Marker(_)) if level == 1 => {
                    return Some(Query {
                        va,
                        end: clip(entry_end),
                        item: PtItem::NonPresent(e),
                    })
                }
                Entry::None | Entry::Swap(_) | Entry::Marker(_) => {
                    // Merge the none entries that follow in this table.
                    let mut j = i + 1;
                    let mut run_end = entry_end;
                    while j < PTRS_PER_TABLE && run_end < end && tbl.raw(j) == 0 {
                        run_end += span;
                        j += 1;
                    }
                    return Some(Query {
                        va,
                        end: clip(run_end),
                        item: PtItem::None { level },
                    });
                }
            }
        }
    }

    /// [`Cursor::query`], then move past what it found.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self, pt: &PageTables) -> Option<Query> {
        let q = self.query(pt)?;
        self.va = q.end;
        Some(q)
    }
}

impl PageTables {
    /// Every step of a read-only walk of `[start, end)` down to `floor`.
    pub(super) fn for_each(&self, mut c: Cursor, mut f: impl FnMut(Query)) {
        while let Some(q) = c.next(self) {
            f(q);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arch::{ArchKind, LeafFlags};
    use crate::core::folio::PhysMem;
    use crate::core::hw::HwEvent;

    const P: u64 = PAGE_SIZE;

    fn leaf(pfn: u64) -> Leaf {
        Leaf {
            pfn: Pfn(pfn),
            flags: LeafFlags::WRITE,
        }
    }

    /// A tree with: two PTEs at 2 MiB + 4K and + 8K, an empty PTE table at
    /// 6 MiB, a PMD leaf at 8 MiB, and a PTE 1 GiB up.
    fn tree() -> (PageTables, PhysMem) {
        let mut phys = PhysMem::new(1 << 16);
        let mut pt = PageTables::new(ArchKind::X86_64, &mut phys).expect("tables");
        let m = PMD_SIZE;
        pt.pte_alloc(m, &mut phys).unwrap();
        pt.set_ptes(m + P, leaf(0x100), 1, &phys);
        pt.set_ptes(m + 2 * P, leaf(0x101), 1, &phys);
        pt.pte_alloc(3 * m, &mut phys).unwrap();
        pt.pmd_alloc(4 * m, &mut phys).unwrap();
        pt.set_pmd(4 * m, Entry::Leaf(leaf(0x200)));
        pt.pte_alloc(1 << 30, &mut phys).unwrap();
        pt.set_ptes(1 << 30, leaf(0x300), 1, &phys);
        (pt, phys)
    }

    fn steps(pt: &PageTables, mut c: Cursor) -> Vec<Query> {
        std::iter::from_fn(|| c.next(pt)).collect()
    }

    #[test]
    fn pmd_cursor_gives_one_segment_per_slot_and_skips_holes() {
        let (pt, _phys) = tree();
        let m = PMD_SIZE;
        let before = pt.hw.snapshot();
        let q = steps(&pt, Cursor::pmds(m / 2, 5 * m));
        let items: Vec<(u64, u64, PtItem)> = q.iter().map(|q| (q.va, q.end, q.item)).collect();
        let t1 = match pt.pmd(m) {
            super::super::PmdSlot::Table(t) => t,
            other => panic!("{other:?}"),
        };
        let t3 = match pt.pmd(3 * m) {
            super::super::PmdSlot::Table(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            items,
            vec![
                (m / 2, m, PtItem::None { level: 2 }),
                (m, 2 * m, PtItem::PteTable(t1)),
                (2 * m, 3 * m, PtItem::None { level: 2 }),
                (3 * m, 4 * m, PtItem::PteTable(t3)),
                (
                    4 * m,
                    5 * m,
                    PtItem::Huge {
                        level: 2,
                        leaf: leaf(0x200)
                    }
                ),
            ]
        );
        assert_eq!(pt.hw.snapshot(), before, "walking counts nothing");
        // Locking a segment is pte_offset_map_lock(): one PMD load, one PTL.
        let _g = q[1].segment().lock_pte_table(&pt);
        let d = pt.hw.snapshot().since(&before);
        assert_eq!(d.get(HwEvent::PmdLoad), 1);
        assert_eq!(d.get(HwEvent::PtlLock), 1);
        assert_eq!(d.nonzero().count(), 2);
    }

    #[test]
    fn pte_cursor_merges_none_runs_and_skips_empty_tables() {
        let (pt, _phys) = tree();
        let m = PMD_SIZE;
        let q = steps(&pt, Cursor::ptes(m, 4 * m + 3 * P));
        let items: Vec<(u64, u64, PtItem)> = q.iter().map(|q| (q.va, q.end, q.item)).collect();
        assert_eq!(
            items,
            vec![
                (m, m + P, PtItem::None { level: 1 }),
                (m + P, m + 2 * P, PtItem::Pte(leaf(0x101 - 1))),
                (m + 2 * P, m + 3 * P, PtItem::Pte(leaf(0x101))),
                (m + 3 * P, 2 * m, PtItem::None { level: 1 }),
                (2 * m, 3 * m, PtItem::None { level: 2 }),
                // The empty PTE table maps nothing: one step.
                (3 * m, 4 * m, PtItem::None { level: 1 }),
                (
                    4 * m,
                    4 * m + 3 * P,
                    PtItem::Huge {
                        level: 2,
                        leaf: leaf(0x200)
                    }
                ),
            ]
        );
        assert_eq!(q.last().unwrap().entry_start(), 4 * m);
        // The whole address space: the leaves, the far one included.
        let all: Vec<u64> = pt.leaves(0, u64::MAX).iter().map(|l| l.0).collect();
        assert_eq!(all, vec![m + P, m + 2 * P, 4 * m, 1 << 30]);
        assert_eq!(
            pt.populated_slots(0, u64::MAX),
            vec![m, 3 * m, 4 * m, 1 << 30]
        );
    }

    #[test]
    fn jump_moves_forward() {
        let (pt, _phys) = tree();
        let mut c = Cursor::ptes(0, u64::MAX);
        c.jump(1 << 30);
        assert_eq!(c.next(&pt).map(|q| q.item), Some(PtItem::Pte(leaf(0x300))));
        assert_eq!(c.va(), (1 << 30) + P);
    }
}
