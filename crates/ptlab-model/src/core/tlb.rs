//! The mmu_gather: what an unmap or a protection change must flush from the
//! TLB, gathered while the page tables are changed and flushed once, with
//! the architecture's recipe, at `tlb_end_vma()` and `tlb_finish_mmu()`.
//!
//! Operations record what they cleared or changed (`tlb_flush_pte_range()`,
//! `tlb_flush_pmd_range()`, and for each page table `free_pgd_range()`
//! frees, `pte_free_tlb()`, `pmd_free_tlb()`, `pud_free_tlb()`); the
//! gather decides whether and what to flush — no operation looks at the
//! event counters to decide. A gather must be finished: [`MmuGather`] is
//! `#[must_use]` and its [`MmuGather::finish`] consumes it.
//!
//! x86 selects CONFIG_MMU_GATHER_MERGE_VMAS (arch/x86/Kconfig; set in the
//! 6.18 kernel we run): its `tlb_end_vma()` does not flush, so an unmap's
//! zapped ranges and freed tables are flushed once, together, at
//! `tlb_finish_mmu()`. arm64 does not select it: each VMA's zap is flushed
//! at `tlb_end_vma()`, which resets the range, and the freed tables are
//! flushed on their own at the end.
//!
//! Linux: include/asm-generic/tlb.h, mm/mmu_gather.c.

use crate::core::addr::{PAGE_SIZE, PMD_SIZE, PUD_SIZE};
use crate::core::arch::ArchKind;
use crate::core::pgtable::PageTables;

/// `P4D_SIZE`: what one PGD entry maps with 4-level tables (512 GiB). Both
/// architectures' 4-level layouts have `P4D_SHIFT` 39 (x86 5-level-capable
/// kernels running 4-level fold the p4d at run time; arm64 4 KiB/48-bit
/// folds it at build time, `P4D_SHIFT` = `PGDIR_SHIFT`).
pub const P4D_SIZE: u64 = 1 << 39;

/// `MAX_TABLE_BATCH` with 4 KiB pages: `(PAGE_SIZE - sizeof(struct
/// mmu_table_batch)) / sizeof(void *)` = (4096 − 24) / 8. Both
/// architectures free page tables through `tlb_remove_table()`
/// (MMU_GATHER_RCU_TABLE_FREE); when a batch page fills,
/// `tlb_table_flush()` → `tlb_table_invalidate()` flushes the gather
/// before the tables go to RCU (checked live on x86: 514 tables freed by
/// one munmap are two flushes).
pub const MAX_TABLE_BATCH: u32 = 509;

/// `MMU_GATHER_BUNDLE`: the entries of the gather's own page batch
/// (`tlb->__pages`, `tlb->local.max`) before a batch page is allocated.
pub const MMU_GATHER_BUNDLE: u32 = 8;

/// `MAX_GATHER_BATCH` with 4 KiB pages: `(PAGE_SIZE - sizeof(struct
/// mmu_gather_batch)) / sizeof(void *)` = (4096 − 16) / 8 entries per
/// batch page.
pub const MAX_GATHER_BATCH: u32 = 510;

/// `MAX_GATHER_BATCH_COUNT`: `10000UL / MAX_GATHER_BATCH` batch pages at
/// most (19).
pub const MAX_GATHER_BATCH_COUNT: u32 = 10_000 / MAX_GATHER_BATCH;

/// Whether the p4d level is folded at run time, not at build time, so that
/// `free_p4d_range()`'s `p4d_free_tlb()` is the generic macro: x86 builds
/// 5-level page tables (CONFIG_PGTABLE_LEVELS=5 on the 6.18 kernel we run)
/// and folds the p4d when the CPU runs 4-level; arm64 4 KiB/48-bit
/// includes pgtable-nop4d.h, whose `p4d_free_tlb()` does nothing.
fn p4d_free_tlb_gathers(arch: ArchKind) -> bool {
    matches!(arch, ArchKind::X86_64)
}

/// Whether a fullmm gather (exit_mmap()) flushes for its freed tables:
/// arm64's `tlb_flush()` of a fullmm gather is `flush_tlb_mm()` when
/// `freed_tables` and nothing otherwise (arch/arm64/include/asm/tlb.h), so
/// each full table batch (`tlb_table_invalidate()`) and the end flush the
/// mm; on x86 the exiting mm is lazy (exit_mm() → enter_lazy_tlb()):
/// `flush_tlb_func()` switches the CPU to init_mm at the first flush and
/// later flushes find the mm no longer loaded — the model keeps x86's one
/// whole-mm flush at the end.
fn fullmm_flushes_freed_tables(arch: ArchKind) -> bool {
    matches!(arch, ArchKind::Arm64)
}

/// `IS_ENABLED(CONFIG_MMU_GATHER_MERGE_VMAS)`: x86 selects it
/// (arch/x86/Kconfig), arm64 does not (arch/arm64/Kconfig).
fn merges_vmas(arch: ArchKind) -> bool {
    matches!(arch, ArchKind::X86_64)
}

/// One mmu_gather (`struct mmu_gather`): the gathered range and what kind
/// of entries were cleared in it.
#[derive(Debug)]
#[must_use = "an mmu_gather flushes only when finished: call MmuGather::finish (tlb_finish_mmu)"]
pub struct MmuGather {
    /// `tlb->fullmm`: the whole address space goes away (exit): leaf
    /// flushes are skipped and one whole-mm flush covers everything.
    fullmm: bool,
    /// `tlb->start`, `tlb->end` (empty when `start >= end`).
    start: u64,
    end: u64,
    freed_tables: bool,
    cleared_ptes: bool,
    cleared_pmds: bool,
    cleared_puds: bool,
    cleared_p4ds: bool,
    /// Tables in the current `tlb->batch` (`mmu_table_batch::nr`).
    tables_batched: u32,
    /// Flushes a full table batch made while the tables were being freed
    /// (`tlb_table_invalidate()`), as (start, end, stride): issued, in
    /// order, before the gather's next flush (the walk that frees the
    /// tables holds the page tables, so the flush is counted just after;
    /// the counts are the same). Empty unless a batch filled.
    batch_flushes: Vec<(u64, u64, u64)>,
    /// The page batches (`tlb->active`, `batch->nr`): the batch filling
    /// (0 = the local bundle, 1.. = the batch pages, at most
    /// [`MAX_GATHER_BATCH_COUNT`]) and its entries.
    page_batch: u32,
    page_nr: u32,
    /// Where the last full page batch's flush ended, inside the PTE
    /// segment being zapped: the segment's range starts over after it
    /// ([`MmuGather::flush_pte_span`]).
    page_resume: Option<u64>,
    /// Full page batches so far (`force_break`s): a PTE table's zap that
    /// saw one reclaims the table the slow way ([`MmuGather::page_fills`]).
    page_fills: u64,
    /// Whole-mm flushes a fullmm gather's full table batches made (arm64):
    /// issued before its last flush.
    mm_flushes: u32,
}

impl MmuGather {
    /// `tlb_gather_mmu()`: a gather for part of an address space.
    pub fn new() -> Self {
        MmuGather {
            fullmm: false,
            start: u64::MAX,
            end: 0,
            freed_tables: false,
            cleared_ptes: false,
            cleared_pmds: false,
            cleared_puds: false,
            cleared_p4ds: false,
            tables_batched: 0,
            batch_flushes: Vec::new(),
            page_batch: 0,
            page_nr: 0,
            page_resume: None,
            page_fills: 0,
            mm_flushes: 0,
        }
    }

    /// `tlb_gather_mmu_fullmm()`: the gather of exit_mmap().
    pub fn new_fullmm() -> Self {
        MmuGather {
            fullmm: true,
            ..MmuGather::new()
        }
    }

    /// `tlb->fullmm`: the gather of exit_mmap(), whose address space goes
    /// away whole.
    pub fn is_fullmm(&self) -> bool {
        self.fullmm
    }

    /// `__tlb_adjust_range()`.
    fn adjust(&mut self, addr: u64, size: u64) {
        self.start = self.start.min(addr);
        self.end = self.end.max(addr + size);
    }

    /// `tlb_flush_pte_range()` / `tlb_remove_tlb_entries()`: PTEs for
    /// `[addr, addr + size)` were cleared or changed.
    pub fn flush_pte_range(&mut self, addr: u64, size: u64) {
        self.adjust(addr, size);
        self.cleared_ptes = true;
    }

    /// `tlb_flush_pmd_range()` / `tlb_remove_pmd_tlb_entry()`: PMD entries
    /// for `[addr, addr + size)` were cleared or changed.
    pub fn flush_pmd_range(&mut self, addr: u64, size: u64) {
        self.adjust(addr, size);
        self.cleared_pmds = true;
    }

    /// `tlb_flush_pud_range()`.
    pub fn flush_pud_range(&mut self, addr: u64, size: u64) {
        self.adjust(addr, size);
        self.cleared_puds = true;
    }

    /// `tlb_flush_p4d_range()`.
    fn flush_p4d_range(&mut self, addr: u64, size: u64) {
        self.adjust(addr, size);
        self.cleared_p4ds = true;
    }

    /// `pte_free_tlb()`: the PTE table mapping `addr` was freed (its PMD
    /// entry cleared): `tlb_flush_pmd_range(addr, PAGE_SIZE)` and
    /// `freed_tables`. `free_pte_range()` passes the start of the PMD
    /// entry's span (free_pgd_range() aligned the range to PMDs).
    pub fn pte_free(&mut self, addr: u64) {
        self.flush_pmd_range(addr, PAGE_SIZE);
        self.freed_tables = true;
    }

    /// `pmd_free_tlb()`: the PMD table under the PUD entry at `addr`
    /// (PUD-aligned: `free_pmd_range()`'s `start & PUD_MASK`) was freed:
    /// `tlb_flush_pud_range(addr, PAGE_SIZE)` and `freed_tables`.
    fn pmd_free(&mut self, addr: u64) {
        self.flush_pud_range(addr, PAGE_SIZE);
        self.freed_tables = true;
    }

    /// `pud_free_tlb()`: the PUD table under the PGD (p4d) entry at `addr`
    /// (`free_pud_range()`'s `start & P4D_MASK`) was freed:
    /// `tlb_flush_p4d_range(addr, PAGE_SIZE)` and `freed_tables`. (x86's
    /// run-time-folded `p4d_free_tlb()` that follows in free_p4d_range()
    /// adds the same page and no cleared level: nothing more to record.)
    fn pud_free(&mut self, addr: u64) {
        self.flush_p4d_range(addr, PAGE_SIZE);
        self.freed_tables = true;
    }

    /// `p4d_free_tlb()` of a run-time-folded p4d (x86 running 4-level):
    /// `__tlb_adjust_range(addr, PAGE_SIZE)` and `freed_tables`, no
    /// cleared level; `__p4d_free_tlb()` frees nothing (no table batch
    /// entry). free_p4d_range() does it for every PGD entry whose span
    /// lies in [floor, ceiling), whether or not a PUD table was there
    /// (checked live: munmap of an untouched 2 MiB VMA alone in its
    /// 512 GiB is one flush of one page).
    fn p4d_free(&mut self, addr: u64) {
        self.adjust(addr, PAGE_SIZE);
        self.freed_tables = true;
    }

    /// The `*_free_tlb()` of a table at `level` (1 = PTE table, 2 = PMD
    /// table, 3 = PUD table, 4 = the p4d level under a PGD entry) covering
    /// from `addr`, the start of its parent entry's span. Linux:
    /// mm/memory.c free_pte_range(), free_pmd_range(), free_pud_range(),
    /// free_p4d_range().
    /// Each goes into the table batch (`tlb_remove_table()`): the
    /// [`MAX_TABLE_BATCH`]th flushes what is gathered so far and starts
    /// the range over (`tlb_table_flush()` → `tlb_table_invalidate()` →
    /// `tlb_flush_mmu_tlbonly()`). A fullmm gather (exit) counts its
    /// batches only on arm64, where each full one is a `flush_tlb_mm()`
    /// ([`fullmm_flushes_freed_tables`]).
    pub fn table_freed(&mut self, arch: ArchKind, level: u8, addr: u64) {
        match level {
            1 => self.pte_free(addr),
            2 => self.pmd_free(addr),
            3 => self.pud_free(addr),
            _ => {
                // Only a run-time-folded p4d gathers; exit's fullmm gather
                // is left as it was (one whole-mm flush when anything was
                // cleared or freed).
                if p4d_free_tlb_gathers(arch) && !self.fullmm {
                    self.p4d_free(addr);
                }
                return;
            }
        }
        if self.fullmm && !fullmm_flushes_freed_tables(arch) {
            return;
        }
        self.tables_batched += 1;
        if self.tables_batched == MAX_TABLE_BATCH {
            self.tables_batched = 0;
            if self.fullmm {
                // arm64's tlb_flush() of a fullmm gather with freed
                // tables: flush_tlb_mm().
                self.mm_flushes += 1;
            } else if self.start < self.end {
                self.batch_flushes
                    .push((self.start, self.end, self.unmap_size()));
            }
            self.reset_range();
        }
    }

    /// `__tlb_remove_folio_pages()` (`__tlb_remove_folio_pages_size()`)
    /// `count` times: batches of `nr_pages` pages each (one entry for one
    /// page, two — the page and `ENCODED_PAGE_BIT_NR_PAGES_NEXT` + the
    /// count — for more), the `i`th mapping `[va + i·nr_pages·4K, …)` of
    /// the PTE segment whose first present entry is `seg_lo`. After an
    /// entry is added, a batch with `nr >= max − 1` moves on
    /// (`tlb_next_batch()`: the next batch page, allocated up to
    /// [`MAX_GATHER_BATCH_COUNT`]; the model assumes the GFP_NOWAIT
    /// allocation succeeds); when none is left the batch is full and
    /// `zap_pte_range()` breaks out, `tlb_flush_mmu_tlbonly()` flushes the
    /// range gathered up to the end of that batch and `tlb_flush_mmu()`
    /// frees the pages (and the table batch: `tlb_table_flush()`); the
    /// walk then goes on from the next entry with an empty range. The
    /// allocated batch pages stay (`batch->next`), so every round holds
    /// the same: 7 + 19 · 509 = 9,678 order-0 pages, or 4 + 19 · 255 =
    /// 4,849 large-folio batches. Anonymous folios never delay their rmap
    /// (`delay_rmap` is for dirty file folios), so no other flush is
    /// forced. A fullmm gather (exit) fills its batches the same way and
    /// zap_pte_range() breaks out and retakes the table the same way
    /// ([`MmuGather::page_fill_retakes`]), but its fills flush nothing:
    /// arm64's `tlb_flush()` of a fullmm gather flushes only freed
    /// tables, which the zap has none of, and x86's exiting mm is lazy
    /// (its first flush switches to init_mm, the others find it not
    /// loaded).
    /// Per call, not per page: one step per batch page crossed.
    /// Linux: mm/mmu_gather.c __tlb_remove_folio_pages_size(),
    /// tlb_next_batch(); mm/memory.c zap_present_folio_ptes(),
    /// zap_pte_range().
    pub fn remove_folio_pages(&mut self, va: u64, count: u64, nr_pages: u64, seg_lo: u64) {
        if count == 0 {
            return;
        }
        let w = if nr_pages == 1 { 1 } else { 2 };
        let unit = nr_pages * PAGE_SIZE;
        let mut done = 0;
        while let Some(k) = self.page_batch_adds(count - done, w) {
            done += k;
            // The batch that filled ends at this unit; the range of this
            // segment so far starts at its first present entry, or after
            // the batch that filled before (a stretch of tables).
            let fill_end = va + done * unit;
            if !self.fullmm {
                let from = self.page_resume.map_or(seg_lo, |f| f.max(seg_lo));
                self.adjust(from, fill_end - from);
                self.cleared_ptes = true;
                self.page_batch_flush();
            }
            // A fullmm gather's tlb_flush_mmu() flushes nothing the model
            // counts (see above); the batches are emptied all the same and
            // zap_pte_range() breaks out and retakes the table.
            self.page_resume = Some(fill_end);
            self.page_fills += 1;
        }
    }

    /// Full page batches so far: each one a `force_break` in
    /// zap_pte_range(), which also clears its `direct_reclaim` (a PTE
    /// table a zap emptied after one is reclaimed by `try_to_free_pte()`,
    /// not by `try_get_and_clear_pmd()` + `free_pte()`).
    /// Linux: mm/memory.c zap_pte_range().
    pub fn page_fills(&self) -> u64 {
        self.page_fills
    }

    /// Whether a full page batch ended inside the PTE segment being zapped
    /// before `seg_end`, the segment's end (call before
    /// [`MmuGather::flush_pte_span`], which consumes the fill's position):
    /// zap_pte_range() breaks out at the batch that filled (`addr +=
    /// nr`), flushes, unlocks the table and, with `addr != end`, `goto
    /// retry`: pte_offset_map_lock() again (a PMD load and a PTL in the
    /// model's events), flush_tlb_batched_pending() and the lazy-MMU
    /// enter/leave (no events in the model), and the walk goes on from
    /// the next entry (no entry read twice). A fill at the segment's last
    /// batch ends the call instead (the next PMD's table is a lock the
    /// walk counts anyway). A segment holds at most one fill (512 entries
    /// < 4,849 batches).
    /// Linux: mm/memory.c zap_pte_range() (`retry:`).
    pub fn page_fill_retakes(&self, seg_end: u64) -> bool {
        self.page_resume.is_some_and(|f| f < seg_end)
    }

    /// `tlb_remove_page_size()` of a PMD-mapped folio (zap_huge_pmd():
    /// one entry): when the batches are full, `tlb_flush_mmu()` at once.
    /// Linux: include/asm-generic/tlb.h tlb_remove_page_size().
    /// A fullmm gather's batches fill the same way; its `tlb_flush_mmu()`
    /// flushes nothing the model counts (see
    /// [`MmuGather::remove_folio_pages`]).
    pub fn remove_pmd_page(&mut self) {
        if self.page_batch_adds(1, 1).is_some() && !self.fullmm {
            self.page_batch_flush();
        }
    }

    /// Add up to `count` batches of `w` entries: `None` when all went in
    /// without filling the last batch page, else `Some(k)`: the `k`th
    /// filled it (the batches are emptied: `tlb_batch_pages_flush()`).
    fn page_batch_adds(&mut self, count: u64, w: u32) -> Option<u64> {
        let mut done = 0u64;
        loop {
            let max = if self.page_batch == 0 {
                MMU_GATHER_BUNDLE
            } else {
                MAX_GATHER_BATCH
            };
            // Adds until this batch has nr >= max − 1.
            let room = u64::from((max - 1 - self.page_nr).div_ceil(w));
            if count - done < room {
                self.page_nr += (count - done) as u32 * w;
                return None;
            }
            done += room;
            self.page_nr = 0;
            if self.page_batch == MAX_GATHER_BATCH_COUNT {
                self.page_batch = 0;
                return Some(done);
            }
            self.page_batch += 1;
        }
    }

    /// The flush of a full page batch (`tlb_flush_mmu()`): what is gathered
    /// is flushed (queued like a table batch's flush, issued before the
    /// gather's next one) and the range starts over; the table batch is
    /// freed too (`tlb_flush_mmu_free()` → `tlb_table_flush()`).
    fn page_batch_flush(&mut self) {
        if self.needs_flush() && self.start < self.end {
            self.batch_flushes
                .push((self.start, self.end, self.unmap_size()));
        }
        self.reset_range();
        self.tables_batched = 0;
    }

    /// `tlb_remove_tlb_entries()` over a PTE segment's present entries,
    /// `[lo, end)`, after its folios went to
    /// [`MmuGather::remove_folio_pages`]: when a page batch filled inside
    /// the segment, the range gathered after it starts at the first
    /// present entry at or after the filled batch's end (`next_present`),
    /// if any.
    pub fn flush_pte_span(
        &mut self,
        lo: u64,
        end: u64,
        next_present: impl FnOnce(u64) -> Option<u64>,
    ) {
        let lo = match self.page_resume.take() {
            None => lo,
            Some(f) if f >= end => return,
            Some(f) => match next_present(f) {
                Some(n) if n < end => n,
                _ => return,
            },
        };
        self.flush_pte_range(lo, end - lo);
    }

    /// Full page-batch flushes queued (for tests).
    #[cfg(test)]
    fn queued_flushes(&self) -> usize {
        self.batch_flushes.len()
    }

    /// Drop a gather without flushing: only for model bookkeeping that
    /// reuses a zap where the kernel flushes differently (MADV_COLLAPSE's
    /// `pmdp_collapse_flush()`).
    pub fn discard(self) {}

    /// Whether anything was gathered that needs a flush.
    pub fn needs_flush(&self) -> bool {
        self.freed_tables
            || self.cleared_ptes
            || self.cleared_pmds
            || self.cleared_puds
            || self.cleared_p4ds
    }

    /// `tlb_get_unmap_size()`: the smallest level cleared decides the
    /// stride.
    fn unmap_size(&self) -> u64 {
        if self.cleared_ptes {
            PAGE_SIZE
        } else if self.cleared_pmds {
            PMD_SIZE
        } else if self.cleared_puds {
            PUD_SIZE
        } else if self.cleared_p4ds {
            P4D_SIZE
        } else {
            PAGE_SIZE
        }
    }

    /// `__tlb_reset_range()`.
    fn reset_range(&mut self) {
        self.start = u64::MAX;
        self.end = 0;
        self.freed_tables = false;
        self.cleared_ptes = false;
        self.cleared_pmds = false;
        self.cleared_puds = false;
        self.cleared_p4ds = false;
    }

    /// `tlb_flush_mmu_tlbonly()`: flush what was gathered (the arch's
    /// `tlb_flush()`: the whole mm for a fullmm gather, else the gathered
    /// range at the unmap stride), then start over.
    fn flush_tlbonly(&mut self, pt: &PageTables) {
        for (start, end, stride) in self.batch_flushes.drain(..) {
            pt.flush_tlb_range(start, end, stride);
        }
        for _ in 0..std::mem::take(&mut self.mm_flushes) {
            pt.flush_tlb_mm();
        }
        if !self.needs_flush() {
            return;
        }
        if self.fullmm {
            // arm64: a fullmm tlb_flush() with nothing freed since the
            // last flush (last_level) flushes nothing.
            if fullmm_flushes_freed_tables(pt.arch().kind()) && !self.freed_tables {
                self.reset_range();
                return;
            }
            pt.flush_tlb_mm();
        } else if self.start < self.end {
            pt.flush_tlb_range(self.start, self.end, self.unmap_size());
        }
        self.reset_range();
    }

    /// `tlb_end_vma()`: per-VMA flush of a partial gather (a fullmm gather
    /// waits for the end, and so does every gather on x86:
    /// CONFIG_MMU_GATHER_MERGE_VMAS).
    pub fn end_vma(&mut self, pt: &PageTables) {
        if self.fullmm || merges_vmas(pt.arch().kind()) {
            return;
        }
        self.flush_tlbonly(pt);
    }

    /// `tlb_finish_mmu()`: the final flush.
    pub fn finish(mut self, pt: &PageTables) {
        self.flush_tlbonly(pt);
    }
}

impl Default for MmuGather {
    fn default() -> Self {
        MmuGather::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arch::ArchKind;
    use crate::core::folio::PhysMem;
    use crate::core::hw::HwEvent;

    fn tables() -> PageTables {
        tables_of(ArchKind::X86_64)
    }

    fn tables_of(arch: ArchKind) -> PageTables {
        let mut phys = PhysMem::new(1 << 16);
        PageTables::new(arch, &mut phys).expect("tables")
    }

    #[test]
    fn x86_merges_vmas_arm64_flushes_each() {
        for (arch, at_end_vma) in [(ArchKind::X86_64, 0), (ArchKind::Arm64, 1)] {
            let pt = tables_of(arch);
            let mut tlb = MmuGather::new();
            tlb.flush_pte_range(0x1000, 0x1000);
            tlb.end_vma(&pt);
            let calls = pt.hw.snapshot().get(HwEvent::TlbFlushCall);
            assert_eq!(calls, at_end_vma, "{arch:?}");
            tlb.table_freed(arch, 1, 0);
            tlb.finish(&pt);
            // x86: [0, 8K) at 4 KiB, one flush of 2 pages; arm64: the
            // table's page alone at PMD stride.
            let e = pt.hw.snapshot();
            assert_eq!(e.get(HwEvent::TlbFlushCall), at_end_vma + 1, "{arch:?}");
            assert_eq!(e.get(HwEvent::TlbiPage), 2, "{arch:?}");
        }
    }

    #[test]
    fn freed_tables_flush_at_their_level_and_in_batches() {
        // A PMD table and a PUD table freed: PUD stride, one page-op for
        // [0, 4K) on x86.
        let pt = tables();
        let mut tlb = MmuGather::new();
        tlb.table_freed(ArchKind::X86_64, 2, PUD_SIZE);
        tlb.table_freed(ArchKind::X86_64, 3, 0);
        tlb.finish(&pt);
        assert_eq!(pt.hw.snapshot().get(HwEvent::TlbiPage), 2);
        // MAX_TABLE_BATCH tables: one flush when the batch fills, one more
        // for the table after it.
        let pt = tables();
        let mut tlb = MmuGather::new();
        for i in 0..=MAX_TABLE_BATCH as u64 {
            tlb.table_freed(ArchKind::X86_64, 1, (i % 8) * PMD_SIZE);
        }
        assert_eq!(pt.hw.snapshot().get(HwEvent::TlbFlushCall), 0);
        tlb.finish(&pt);
        assert_eq!(pt.hw.snapshot().get(HwEvent::TlbFlushCall), 2);
    }

    #[test]
    fn nothing_gathered_nothing_flushed() {
        let pt = tables();
        let mut tlb = MmuGather::new();
        tlb.end_vma(&pt);
        tlb.finish(&pt);
        assert_eq!(pt.hw.snapshot().get(HwEvent::TlbFlushCall), 0);
    }

    #[test]
    fn gathered_span_and_stride() {
        let pt = tables();
        pt.hw.set_tracing(true);
        let mut tlb = MmuGather::new();
        tlb.flush_pte_range(0x5000, 0x1000);
        tlb.flush_pte_range(0x2000, 0x2000);
        tlb.end_vma(&pt);
        // The end_vma flush reset the range: finish flushes nothing more.
        tlb.finish(&pt);
        assert_eq!(
            pt.hw.take_marks(),
            vec![crate::core::hw::HwMark::TlbFlush {
                start: 0x2000,
                end: 0x6000,
                whole: false
            }]
        );
        // x86: 4 pages at 4 KiB stride → 4 INVLPG.
        assert_eq!(pt.hw.snapshot().get(HwEvent::TlbiPage), 4);
    }

    #[test]
    fn pmd_only_gathers_flush_at_pmd_stride_and_fullmm_flushes_the_mm_once() {
        let pt = tables();
        let mut tlb = MmuGather::new();
        tlb.flush_pmd_range(0, 4 * PMD_SIZE);
        tlb.finish(&pt);
        // 4 PMD strides ≤ 33: 4 page-ops on x86.
        assert_eq!(pt.hw.snapshot().get(HwEvent::TlbiPage), 4);
        let pt = tables();
        let mut tlb = MmuGather::new_fullmm();
        tlb.flush_pte_range(0, PAGE_SIZE);
        tlb.end_vma(&pt);
        assert_eq!(pt.hw.snapshot().get(HwEvent::TlbFlushCall), 0);
        tlb.pte_free(0);
        tlb.finish(&pt);
        let e = pt.hw.snapshot();
        assert_eq!(
            (e.get(HwEvent::TlbFlushCall), e.get(HwEvent::TlbiAsid)),
            (1, 1)
        );
    }

    #[test]
    fn page_batches_fill_at_9678_entries_or_4849_large_batches() {
        // Order-0: 7 in the bundle + 19 × 509; the 9,678th fills.
        let mut tlb = MmuGather::new();
        tlb.remove_folio_pages(0, 9_677, 1, 0);
        assert_eq!(tlb.queued_flushes(), 0);
        tlb.remove_folio_pages(9_677 * PAGE_SIZE, 1, 1, 0);
        assert_eq!(tlb.queued_flushes(), 1);
        // The batch pages are kept: the next round holds as many.
        tlb.remove_folio_pages(9_678 * PAGE_SIZE, 2 * 9_678 - 1, 1, 0);
        assert_eq!(tlb.queued_flushes(), 2);
        // Two-entry batches: 4 + 19 × 255 = 4,849.
        let mut tlb = MmuGather::new();
        tlb.remove_folio_pages(0, 4_848, 16, 0);
        assert_eq!(tlb.queued_flushes(), 0);
        tlb.remove_folio_pages(0, 1, 16, 0);
        assert_eq!(tlb.queued_flushes(), 1);
        // PMD pages flush at once; a fullmm gather counts none.
        let mut tlb = MmuGather::new();
        tlb.flush_pmd_range(0, PMD_SIZE);
        for _ in 0..9_678 {
            tlb.remove_pmd_page();
        }
        assert_eq!(tlb.queued_flushes(), 1);
        let mut tlb = MmuGather::new_fullmm();
        tlb.remove_folio_pages(0, 100_000, 1, 0);
        assert_eq!(tlb.queued_flushes(), 0);
        tlb.discard();
    }

    #[test]
    fn a_fill_before_the_segment_end_retakes_the_table() {
        // 9,677 order-0 pages, then a segment of 8 pages: its first fills
        // the batches (the 9,678th) and ends before the segment does.
        let mut tlb = MmuGather::new();
        tlb.remove_folio_pages(0, 9_677, 1, 0);
        assert_eq!(tlb.page_fills(), 0);
        assert!(!tlb.page_fill_retakes(u64::MAX));
        let seg = 9_677 * PAGE_SIZE;
        tlb.remove_folio_pages(seg, 8, 1, seg);
        assert_eq!(tlb.page_fills(), 1);
        assert!(tlb.page_fill_retakes(seg + 8 * PAGE_SIZE));
        // A segment that ended with the batch that filled: no retake.
        assert!(!tlb.page_fill_retakes(seg + PAGE_SIZE));
        // flush_pte_span() consumes the fill's position.
        tlb.flush_pte_span(seg, seg + 8 * PAGE_SIZE, Some);
        assert!(!tlb.page_fill_retakes(u64::MAX));
        assert_eq!(tlb.queued_flushes(), 1);
        tlb.discard();
        // exit's fullmm gather fills (and retakes) the same way, and
        // queues no flush; PMD pages count in the same batches.
        let mut tlb = MmuGather::new_fullmm();
        tlb.remove_pmd_page();
        tlb.remove_folio_pages(0, 9_677, 1, 0);
        assert_eq!(tlb.page_fills(), 1);
        assert!(tlb.page_fill_retakes(9_678 * PAGE_SIZE));
        assert_eq!(tlb.queued_flushes(), 0);
        tlb.discard();
    }
}
