//! One PTE table as the arch hooks see it: the kernel's `pte_t *ptep` with
//! its neighbours, the address it maps, and the event sink the hooks count
//! their loads and stores in.

use super::{Arch, Entry, Leaf};
use crate::core::addr::{Pfn, PAGE_SIZE, PTRS_PER_TABLE};
use crate::core::hw::HwSink;
use crate::core::pgtable::store::Spare;
use crate::core::pgtable::{Entries, Run, Table};
use std::cell::Cell;

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
    /// The tree's sticky "a non-present PTE may exist" flag
    /// ([`crate::core::pgtable::PageTables::maybe_nonpresent`]): every
    /// store of a swap entry or marker sets it.
    pub(crate) nonpresent: &'a Cell<bool>,
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
            // A test view has no tree: the flag it sets goes nowhere (one
            // leaked bool per test view).
            nonpresent: Box::leak(Box::new(Cell::new(false))),
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
        if raw != 0 && !self.arch.pte_present_raw(raw) {
            self.nonpresent.set(true);
        }
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

    /// Write entries `i..i + n` as `first + k × step` (`k` in `0..n`;
    /// `first == 0 && step == 0` writes none entries), the values an
    /// entry-by-entry [`PteTable::store_raw`] loop would write. A table of
    /// runs has the range spliced as one run of `kinds` ([`Run::PRESENT`]
    /// / [`Run::NONPRESENT`]) without being made dense, while that keeps
    /// it within [`crate::core::pgtable::store::MAX_RUNS`] runs; a dense
    /// table is written in place and stays dense. Uncounted, like
    /// `store_raw`: the hooks count the kernel's stores.
    pub(crate) fn write_affine(&mut self, i: usize, n: usize, first: u64, step: u64, kinds: u8) {
        if n == 0 {
            return;
        }
        let clear = first == 0 && step == 0;
        debug_assert!(
            clear || (0..n as u64).all(|k| first.wrapping_add(step.wrapping_mul(k)) != 0),
            "a run never holds a none entry"
        );
        if kinds & Run::NONPRESENT != 0 {
            self.nonpresent.set(true);
        }
        if let TableView::Runs(t) = &mut self.view {
            let run = (!clear).then_some(Run {
                start: i as u16,
                len: n as u16,
                kinds,
                first,
                step: if n == 1 { 0 } else { step },
            });
            if t.splice(i, i + n, run) {
                return;
            }
        }
        let mut v = first;
        for k in i..i + n {
            self.store_raw(k, v);
            v = v.wrapping_add(step);
        }
    }

    /// The table's one run when it is stored as exactly one run
    /// ([`Table::lone_run`]); `None` otherwise (a dense table too).
    #[inline]
    pub(crate) fn lone_run(&self) -> Option<Run> {
        match &self.view {
            TableView::Runs(t) => t.lone_run(),
            _ => None,
        }
    }

    /// Replace the one run of a table stored as one run by `r`
    /// ([`Table::replace_lone_run`]: what clearing the old run and writing
    /// `r` with [`PteTable::write_affine`] leaves). Uncounted. Returns
    /// `false`, changing nothing, for any other table.
    pub(crate) fn replace_lone_run(&mut self, r: Run) -> bool {
        let done = match &mut self.view {
            TableView::Runs(t) => t.replace_lone_run(r),
            _ => false,
        };
        if done && r.kinds & Run::NONPRESENT != 0 {
            self.nonpresent.set(true);
        }
        done
    }

    /// The runs of a table stored as runs, cut to `i..i + n` (`None` for a
    /// dense table), for writers that transform a run as a whole.
    pub(crate) fn runs_in(&self, i: usize, n: usize) -> Option<impl Iterator<Item = Run> + '_> {
        let TableView::Runs(t) = &self.view else {
            return None;
        };
        let runs = t.runs()?;
        Some(runs.iter().filter_map(move |r| {
            let lo = i.max(r.start as usize);
            let hi = (i + n).min(r.start as usize + r.len as usize);
            (lo < hi).then(|| Run {
                start: lo as u16,
                len: (hi - lo) as u16,
                kinds: r.kinds,
                first: r
                    .first
                    .wrapping_add(r.step.wrapping_mul((lo - r.start as usize) as u64)),
                step: r.step,
            })
        }))
    }

    /// For a table stored as runs, the run holding entry `i` cut to start
    /// at `i` (its first descriptor is entry `i`'s): how a walk learns that
    /// the entries ahead hold `first + k × step` without reading each.
    /// `None` for a dense table or a none entry.
    #[inline]
    pub(crate) fn run_from(&self, i: usize) -> Option<Run> {
        let TableView::Runs(t) = &self.view else {
            return None;
        };
        let r = t.entries().run_at(i)?;
        let skip = (i - r.start as usize) as u64;
        Some(Run {
            start: i as u16,
            len: (r.end() - i) as u16,
            kinds: r.kinds,
            first: r.first.wrapping_add(r.step.wrapping_mul(skip)),
            step: r.step,
        })
    }

    /// The first descriptor of `i..i + n` and the step when the range lies inside one
    /// run of present entries stepping inside `pfn_mask` (so every entry
    /// has the bits of the first outside the frame): a reader of the
    /// attributes of the whole range needs that one. `None` otherwise
    /// (dense tables included).
    pub(crate) fn uniform_present(&self, i: usize, n: usize, pfn_mask: u64) -> Option<(u64, u64)> {
        let TableView::Runs(t) = &self.view else {
            return None;
        };
        let runs = t.runs()?;
        let k = runs
            .partition_point(|r| r.start as usize <= i)
            .checked_sub(1)?;
        let r = &runs[k];
        let inside = i + n <= r.start as usize + r.len as usize;
        // Entry `i`: inside the run, computed from it without a second
        // search.
        let first = match inside && n > 0 {
            true => r
                .first
                .wrapping_add(r.step.wrapping_mul((i - r.start as usize) as u64)),
            false => self.raw(i),
        };
        // No carry out of the frame field up to the range's last entry.
        let last = (first & pfn_mask).checked_add(r.step.checked_mul(n as u64 - 1)?)?;
        let ok = inside && r.kinds == Run::PRESENT && r.step & !pfn_mask == 0 && last <= pfn_mask;
        ok.then_some((first, r.step))
    }

    /// Rewrite every present entry `e` of `i..i + n` as `f(e)` (`present`
    /// tells a present descriptor), where `f` changes only bits outside
    /// `pfn_mask` and reads none inside it (`pte_wrprotect()` and the
    /// like). A run of present entries whose step lies in `pfn_mask` is
    /// rewritten as one run (`f(first)`, the same step): `f(first + k ×
    /// step) = f(first) + k × step`. Everything else entry by entry.
    pub(crate) fn map_present(
        &mut self,
        i: usize,
        n: usize,
        pfn_mask: u64,
        present: impl Fn(u64) -> bool,
        f: impl Fn(u64) -> u64,
    ) {
        let mut pieces = [None; crate::core::pgtable::store::MAX_RUNS];
        if let Some(runs) = self.runs_in(i, n) {
            for (slot, r) in pieces.iter_mut().zip(runs) {
                *slot = Some(r);
            }
        }
        if pieces[0].is_none() {
            // Dense (or nothing present): entry by entry.
            for j in i..i + n {
                let e = self.raw(j);
                if e != 0 && present(e) {
                    self.store_raw(j, f(e));
                }
            }
            return;
        }
        for r in pieces.into_iter().flatten() {
            let (lo, len) = (r.start as usize, r.len as usize);
            let in_field = (r.step.checked_mul(len as u64 - 1))
                .and_then(|d| (r.first & pfn_mask).checked_add(d))
                .is_some_and(|last| last <= pfn_mask);
            if r.kinds == Run::PRESENT && r.step & !pfn_mask == 0 && in_field {
                self.write_affine(lo, len, f(r.first), r.step, Run::PRESENT);
            } else {
                for j in lo..lo + len {
                    let e = self.raw(j);
                    if e != 0 && present(e) {
                        self.store_raw(j, f(e));
                    }
                }
            }
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
