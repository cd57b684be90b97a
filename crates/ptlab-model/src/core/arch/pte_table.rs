//! One PTE table as the arch hooks see it: the kernel's `pte_t *ptep` with
//! its neighbours, the address it maps, and the event sink the hooks count
//! their loads and stores in.

use super::{Arch, Entry, Leaf};
use crate::core::addr::{Pfn, PAGE_SIZE, PTRS_PER_TABLE};
use crate::core::hw::HwSink;
use crate::core::pgtable::store::Spare;
use crate::core::pgtable::{Entries, Table};

/// Where folios are, for the hooks that must know (arm64's fold test:
/// `page_folio()` + `folio_nr_pages()`). Implemented by the memmap.
pub trait FolioSpan {
    /// The folio holding `pfn`: `(head pfn, number of pages)`, or `None` for
    /// a frame that is no folio (the zero page, a free frame).
    fn folio_span(&self, pfn: Pfn) -> Option<(u64, u64)>;
}

/// A read-only view of one PTE table.
pub struct PteRef<'a> {
    pub(crate) arch: &'static dyn Arch,
    pub(crate) entries: Entries<'a>,
    /// Events the hooks count (loads).
    pub hw: &'a HwSink,
    /// Virtual address entry 0 maps.
    pub base: u64,
}

impl PteRef<'_> {
    /// The decoded entry `i` without counting (the model's bookkeeping; the
    /// kernel makes no such read).
    #[inline]
    pub fn peek(&self, i: usize) -> Entry {
        self.arch.decode(1, self.entries.raw(i))
    }
    /// Virtual address of entry `i`.
    pub fn va(&self, i: usize) -> u64 {
        self.base + i as u64 * PAGE_SIZE
    }
}

/// A writable view of one PTE table. A table stored as runs
/// ([`crate::core::pgtable::store`]) stays so until a store changes an
/// entry: reads see the runs, the first changing store makes it dense.
pub struct PteTable<'a> {
    pub(crate) arch: &'static dyn Arch,
    pub(crate) view: TableView<'a>,
    /// A dense buffer for a table of runs made dense (the tree's spare).
    pub(crate) spare: &'a mut Spare,
    /// Events the hooks count (loads, stores, atomics, flushes).
    pub hw: &'a HwSink,
    /// Virtual address entry 0 maps.
    pub base: u64,
}

/// The table behind a [`PteTable`]: its dense entries, or a table of runs
/// not written yet.
pub(crate) enum TableView<'a> {
    Dense {
        entries: &'a mut [u64; PTRS_PER_TABLE],
        /// Non-none entries of the table (kept exact by [`PteTable::store`]).
        used: &'a mut u16,
    },
    Runs(&'a mut Table),
    /// Only while switching from `Runs` to `Dense`.
    Moving,
}

impl<'a> TableView<'a> {
    /// The view of `t`: dense entries borrowed as they are, runs kept.
    pub(crate) fn of(t: &'a mut Table) -> Self {
        if t.is_compact() {
            TableView::Runs(t)
        } else {
            let (entries, used) = t.dense_and_used(&mut None);
            TableView::Dense { entries, used }
        }
    }
}

impl<'a> PteTable<'a> {
    /// A view over a plain dense array (tests, and tables built outside a
    /// tree).
    #[cfg(test)]
    pub(crate) fn over_dense(
        arch: &'static dyn Arch,
        entries: &'a mut [u64; PTRS_PER_TABLE],
        used: &'a mut u16,
        spare: &'a mut Spare,
        hw: &'a HwSink,
        base: u64,
    ) -> Self {
        PteTable {
            arch,
            view: TableView::Dense { entries, used },
            spare,
            hw,
            base,
        }
    }
    /// The raw descriptor of entry `i` without counting.
    #[inline(always)]
    pub(crate) fn raw(&self, i: usize) -> u64 {
        match &self.view {
            TableView::Dense { entries, .. } => entries[i],
            TableView::Runs(t) => t.raw(i),
            TableView::Moving => unreachable!("a view is never left moving"),
        }
    }
    /// The decoded entry `i` without counting.
    #[inline]
    pub fn peek(&self, i: usize) -> Entry {
        self.arch.decode(1, self.raw(i))
    }
    /// Virtual address of entry `i`.
    #[inline]
    pub fn va(&self, i: usize) -> u64 {
        self.base + i as u64 * PAGE_SIZE
    }
    /// A read-only view of the same table.
    pub fn as_ref(&self) -> PteRef<'_> {
        let entries = match &self.view {
            TableView::Dense { entries, .. } => Entries::Dense(entries),
            TableView::Runs(t) => t.entries(),
            TableView::Moving => unreachable!("a view is never left moving"),
        };
        PteRef {
            arch: self.arch,
            entries,
            hw: self.hw,
            base: self.base,
        }
    }
    /// Write entry `i` (a leaf, or none) without counting: the hooks count
    /// the store the kernel makes (plain, atomic, or part of a batch).
    #[inline]
    pub fn store(&mut self, i: usize, leaf: Option<Leaf>) {
        let raw = leaf.map_or(0, |l| self.arch.encode_leaf(1, l));
        self.store_raw(i, raw);
    }
    /// Write a raw descriptor (a swap entry or marker encoded by the arch).
    #[inline(always)]
    pub fn store_raw(&mut self, i: usize, raw: u64) {
        if let TableView::Dense { entries, used } = &mut self.view {
            // The encoders write 0 for a none entry and never produce a
            // non-zero descriptor that decodes as none.
            let none_before = entries[i] == 0;
            entries[i] = raw;
            match (none_before, raw == 0) {
                (true, false) => **used += 1,
                (false, true) => **used -= 1,
                _ => {}
            }
        } else {
            self.store_raw_runs(i, raw);
        }
    }

    /// [`PteTable::store_raw`] to a table of runs: nothing happens when the
    /// entry holds `raw` already (the table stays runs); otherwise the
    /// table is made dense first.
    #[cold]
    #[inline(never)]
    fn store_raw_runs(&mut self, i: usize, raw: u64) {
        if self.raw(i) == raw {
            return;
        }
        let TableView::Runs(t) = std::mem::replace(&mut self.view, TableView::Moving) else {
            unreachable!("only called on runs");
        };
        let (entries, used) = t.dense_and_used(self.spare);
        self.view = TableView::Dense { entries, used };
        self.store_raw(i, raw);
    }
}
