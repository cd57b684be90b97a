//! One PTE table as the arch hooks see it: the kernel's `pte_t *ptep` with
//! its neighbours, the address it maps, and the event sink the hooks count
//! their loads and stores in.

use super::{Arch, Entry, Leaf};
use crate::core::addr::{Pfn, PAGE_SIZE, PTRS_PER_TABLE};
use crate::core::hw::HwSink;
use crate::core::pgtable::Entries;

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
    pub fn peek(&self, i: usize) -> Entry {
        self.arch.decode(1, self.entries.raw(i))
    }
    /// Virtual address of entry `i`.
    pub fn va(&self, i: usize) -> u64 {
        self.base + i as u64 * PAGE_SIZE
    }
}

/// A writable view of one PTE table.
pub struct PteTable<'a> {
    pub(crate) arch: &'static dyn Arch,
    pub(crate) entries: &'a mut [u64; PTRS_PER_TABLE],
    /// Non-none entries of the table (kept exact by [`PteTable::store`]).
    pub(crate) used: &'a mut u16,
    /// Events the hooks count (loads, stores, atomics, flushes).
    pub hw: &'a HwSink,
    /// Virtual address entry 0 maps.
    pub base: u64,
}

impl<'a> PteTable<'a> {
    /// The decoded entry `i` without counting.
    pub fn peek(&self, i: usize) -> Entry {
        self.arch.decode(1, self.entries[i])
    }
    /// Virtual address of entry `i`.
    pub fn va(&self, i: usize) -> u64 {
        self.base + i as u64 * PAGE_SIZE
    }
    /// A read-only view of the same table.
    pub fn as_ref(&self) -> PteRef<'_> {
        PteRef {
            arch: self.arch,
            entries: Entries::Dense(self.entries),
            hw: self.hw,
            base: self.base,
        }
    }
    /// Write entry `i` (a leaf, or none) without counting: the hooks count
    /// the store the kernel makes (plain, atomic, or part of a batch).
    pub fn store(&mut self, i: usize, leaf: Option<Leaf>) {
        let raw = leaf.map_or(0, |l| self.arch.encode_leaf(1, l));
        self.store_raw(i, raw);
    }
    /// Write a raw descriptor (a swap entry or marker encoded by the arch).
    pub fn store_raw(&mut self, i: usize, raw: u64) {
        // The encoders write 0 for a none entry and never produce a non-zero
        // descriptor that decodes as none.
        let none_before = self.entries[i] == 0;
        self.entries[i] = raw;
        match (none_before, raw == 0) {
            (true, false) => *self.used += 1,
            (false, true) => *self.used -= 1,
            _ => {}
        }
    }
}
