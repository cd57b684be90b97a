//! Removing mappings: zapping PTEs and PMDs, splitting PMD mappings, and
//! freeing page tables.
//!
//! Linux: mm/memory.c zap_pte_range(), zap_present_ptes(), zap_pmd_range(),
//! free_pgtables(); mm/huge_memory.c zap_huge_pmd(), __split_huge_pmd_locked(),
//! __split_huge_zero_page_pmd(); mm/pt_reclaim.c (CONFIG_PT_RECLAIM).

use crate::core::addr::Pfn;
use crate::core::addr::PMD_SIZE;
use crate::core::addr::{HPAGE_PMD_NR, PAGE_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags, RawPte};
use crate::core::folio::{FolioRef, PhysMem};
use crate::core::hw::HwEvent;
use crate::core::pgtable::{Cursor, PmdSlot, PtItem, Segment};
use crate::core::rules::rule;
use crate::core::stats::VmEvent;
use crate::core::tlb::MmuGather;
use crate::core::vma::Vma;
use crate::mm::mm::Mm;

/// Split the PMD mapping of the 2 MiB slot at `slot` into 512 PTEs in this
/// mm only. The folio stays whole. Linux: mm/huge_memory.c
/// __split_huge_pmd_locked() (rule P6).
pub fn split_huge_pmd(mm: &mut Mm, phys: &mut PhysMem, slot: u64) {
    let PmdSlot::Leaf(leaf) = mm.pt.pmd(slot) else {
        return;
    };
    phys.stats.vm(VmEvent::ThpSplitPmd, 1);
    // Events: pmd_lock(); pmdp_invalidate() (an atomic exchange of the PMD
    // plus flush_pmd_tlb_range(): one PMD-stride page-op on both arches);
    // the PTEs, rmap and references are counted by the calls below.
    // Linux: mm/huge_memory.c __split_huge_pmd(), __split_huge_pmd_locked().
    mm.pt.lock();
    mm.pt.hw.one(crate::core::hw::HwEvent::PmdStore);
    mm.pt.flush_tlb_range(slot, slot + PMD_SIZE, PMD_SIZE);
    // Re-use the page table deposited when the PMD was mapped.
    let table = mm.deposited.remove(&slot).expect("deposited page table");
    mm.pt.install_pte_table(slot, table);
    if Some(leaf.pfn) == phys.huge_zero {
        // Linux: __split_huge_zero_page_pmd(): 512 zero-page PTEs, each set
        // alone, with the VMA's protection (the PMD's: exec, PROT_NONE) and
        // the PMD's uffd-wp bit.
        rule!(mm.pt.hw, ZapSplitHugeZeroPmd);
        let keep = LeafFlags::YOUNG | LeafFlags::EXEC | LeafFlags::PROTNONE | LeafFlags::UFFD_WP;
        let zero = Leaf {
            pfn: phys.zero_pfn,
            flags: (leaf.flags & keep) | LeafFlags::SPECIAL,
        };
        for i in 0..HPAGE_PMD_NR {
            mm.pt.set_ptes(slot + i * PAGE_SIZE, zero, 1, phys);
        }
        return;
    }
    rule!(mm.pt.hw, ZapSplitHugePmd);
    let folio = phys.folio_of(leaf.pfn).expect("PMD maps a folio");
    let exclusive = phys.anon_exclusive(folio.head);
    // PTEs inherit write, young, dirty, soft-dirty and uffd-wp from the PMD.
    let keep = LeafFlags::WRITE
        | LeafFlags::YOUNG
        | LeafFlags::DIRTY
        | LeafFlags::SOFT_DIRTY
        | LeafFlags::UFFD_WP
        | LeafFlags::EXEC
        | LeafFlags::PROTNONE;
    let pte = Leaf {
        pfn: folio.head,
        flags: leaf.flags & keep,
    };
    // Every page inherits the head's exclusivity (the kernel sets it page
    // by page; one range write leaves the same bits).
    phys.set_anon_exclusive_range(folio.head, HPAGE_PMD_NR, exclusive);
    phys.add_rmap_ptes(folio, folio.head, HPAGE_PMD_NR as u32, mm.pid, false);
    phys.ref_add(folio, HPAGE_PMD_NR as u32 - 1);
    mm.pt.set_ptes(slot, pte, HPAGE_PMD_NR, phys);
    phys.remove_rmap_pmd(folio, mm.pid);
}

/// Zap every mapping in `[start, end)` (inside one VMA), gathering what
/// must be flushed in `tlb`; the VMA's flush follows (`tlb_end_vma()`).
/// With `reclaim_pt` (MADV_DONTNEED on an arch built with
/// CONFIG_PT_RECLAIM: [`crate::core::arch::Arch::pt_reclaim`]), a PTE
/// table whose whole 2 MiB was zapped and is left empty is freed (rule
/// M1).
/// Linux: mm/memory.c unmap_page_range() (tlb_start_vma … tlb_end_vma).
pub fn zap_range(
    mm: &mut Mm,
    phys: &mut PhysMem,
    tlb: &mut MmuGather,
    start: u64,
    end: u64,
    reclaim_pt: bool,
) {
    let locked = vma_locked(mm, start);
    zap_range_in(mm, phys, tlb, start, end, reclaim_pt, locked);
}

/// Whether the VMA holding `addr` is VM_LOCKED (its zapped pages are
/// munlocked).
fn vma_locked(mm: &Mm, addr: u64) -> bool {
    mm.vmas
        .find(addr)
        .is_some_and(|v| v.flags.contains(crate::core::vma::VmFlags::LOCKED))
}

/// [`zap_range`] without the VMA's flush: the caller flushes its own way.
pub fn zap_range_unflushed(
    mm: &mut Mm,
    phys: &mut PhysMem,
    tlb: &mut MmuGather,
    start: u64,
    end: u64,
) {
    let locked = vma_locked(mm, start);
    zap_pmds(mm, phys, tlb, start, end, false, locked);
}

/// [`zap_range`] over a whole VMA that may already be detached from the
/// tree (munmap, exit): its VM_LOCKED decides the munlocks.
pub fn zap_vma(mm: &mut Mm, phys: &mut PhysMem, tlb: &mut MmuGather, v: &Vma, reclaim_pt: bool) {
    let locked = v.flags.contains(crate::core::vma::VmFlags::LOCKED);
    zap_range_in(mm, phys, tlb, v.start, v.end, reclaim_pt, locked);
}

/// [`zap_vma`] of `[start, end)`, one VMA inside one PMD span whose slot
/// holds a PTE table with no entry in the range, in a tree where no swap
/// entry or marker was ever stored (the caller has checked all of it:
/// `Model::unmap_known_none()`): the walk would find that one table
/// segment, try no whole-table step (one span), lock it and read its
/// entries, and find nothing present — those counts, without the walk.
/// Then the VMA's flush as [`zap_vma`] ends.
/// Linux: mm/memory.c unmap_page_range() → zap_pte_range().
pub fn zap_vma_none(mm: &mut Mm, tlb: &mut MmuGather, start: u64, end: u64) {
    // pte_offset_map_lock() of the segment's table (the caller found it
    // through the walk cache), then one ptep_get() per entry.
    mm.pt.pte_offset_map_lock_found();
    mm.pt.hw.ptep_get_reads((end - start) / PAGE_SIZE);
    tlb.end_vma(&mm.pt);
}

fn zap_range_in(
    mm: &mut Mm,
    phys: &mut PhysMem,
    tlb: &mut MmuGather,
    start: u64,
    end: u64,
    reclaim_pt: bool,
    locked: bool,
) {
    zap_pmds(mm, phys, tlb, start, end, reclaim_pt, locked);
    tlb.end_vma(&mm.pt);
}

/// The PMD-level walk of a zap (zap_pmd_range() and below).
fn zap_pmds(
    mm: &mut Mm,
    phys: &mut PhysMem,
    tlb: &mut MmuGather,
    start: u64,
    end: u64,
    reclaim_pt: bool,
    locked: bool,
) {
    // Swap PTEs: zap_nonpresent_ptes() → free_swap_and_cache_nr() (no
    // search where no swap entry was ever stored).
    if mm.pt.may_hold_nonpresent() {
        crate::mm::swap::zap_swap_range(mm, phys, start, end);
    }
    // Linux: mm/memory.c zap_pmd_range(): one step per PMD slot.
    let mut c = Cursor::pmds(start, end);
    while let Some(q) = c.next(&mm.pt) {
        match q.item {
            PtItem::Huge { leaf, .. } => {
                if q.whole_pmd() {
                    if locked && Some(leaf.pfn) != phys.huge_zero {
                        // munlock_vma_folio() of a large folio: the batch
                        // is drained at once.
                        rule!(mm.pt.hw, ZapLockedThpDrains);
                        phys.folio_batches.drain();
                    }
                    rule!(mm.pt.hw, ZapHugePmd);
                    zap_huge_pmd(mm, phys, tlb, q.va, leaf);
                } else {
                    rule!(mm.pt.hw, ZapSplitPartialHugePmd);
                    split_huge_pmd(mm, phys, q.entry_start());
                    zap_ptes(mm, phys, tlb, q.segment(), locked);
                }
            }
            PtItem::PteTable(_) => {
                if !reclaim_pt && !locked {
                    let k = zap_shared_thp_tables(mm, phys, tlb, q.va, end);
                    if k > 0 {
                        c.jump(q.va + k * PMD_SIZE);
                        continue;
                    }
                }
                let fills = tlb.page_fills();
                zap_ptes(mm, phys, tlb, q.segment(), locked);
                if reclaim_pt && q.whole_pmd() {
                    // Linux: mm/pt_reclaim.c try_to_free_pte(): free the table if all entries are none.
                    if let PmdSlot::Table(t) = mm.pt.pmd(q.va) {
                        if mm.pt.table(t).is_some_and(|tb| tb.used == 0) {
                            rule!(mm.pt.hw, ZapPtReclaim);
                            if tlb.page_fills() != fills {
                                // A full page batch in this table's zap
                                // (force_break) cleared direct_reclaim:
                                // zap_pte_range() frees the table with
                                // try_to_free_pte(), not
                                // try_get_and_clear_pmd() + free_pte():
                                // pmd_lock() for the trylock and
                                // pte_offset_map_rw_nolock() for the
                                // lockless PMD read (neither counted on
                                // the direct path either), then the PTE
                                // table's own lock nested (x86-64 splits
                                // PTE and PMD locks: ptl != pml) and all
                                // 512 entries read again to check they
                                // are none.
                                mm.pt.lock();
                                mm.pt.hw.ptep_get_reads(HPAGE_PMD_NR);
                            }
                            mm.pt.free_pte_table(q.va, phys);
                            // free_pte() → pte_free_tlb(): the table goes
                            // through the table batch like munmap's.
                            tlb.table_freed(mm.pt.arch().kind(), 1, q.va);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// The whole-table step of a zap (`ModelConfig::fork_runs`): from the
/// PMD slot at `s`, a stretch of consecutive whole PMD slots (in one PMD
/// table, below `end`) whose PTE tables each map one whole large folio of
/// ONE folio run that another mapping keeps (exit of a forked child) —
/// each table stored as one run of 512 present entries a frame apart,
/// table `j`'s the first's moved by `j` folios — is zapped as the kernel
/// zaps each table: the first through [`zap_ptes`], the other `k − 1`
/// tables cleared, their folios changed as one sub-run
/// ([`PhysMem::unmap_shared_large_run_span`]), the gather's range grown
/// over them (the model's gather is a range: the union of the tables'
/// ranges is the range each would leave) and every event, kernel call and
/// rule hit of the first table's zap added `k − 1` times. Each table's
/// zap sees the same entries and the same folio state, so does the same
/// things. Taken only when the first table's zap left it empty and
/// changed no statistic; else the others go through [`zap_ptes`] one by
/// one. Returns the PMD slots zapped (0: not taken, nothing done).
/// Linux: mm/memory.c zap_pmd_range() → zap_pte_range() per PMD slot.
fn zap_shared_thp_tables(
    mm: &mut Mm,
    phys: &mut PhysMem,
    tlb: &mut MmuGather,
    s: u64,
    end: u64,
) -> u64 {
    if !phys.fork_runs || mm.pt.hw.observing() || s & (PMD_SIZE - 1) != 0 {
        return 0;
    }
    let Some((k, pfn, tables)) = whole_thp_tables(mm, phys, s, end, |_| true) else {
        return 0;
    };
    let (t_mm, t_phys) = (mm.pt.hw.tally(), phys.hw.tally());
    let stats = phys.stats.clone();
    let rss = mm.rss_anon;
    zap_ptes(
        mm,
        phys,
        tlb,
        Segment {
            start: s,
            end: s + PMD_SIZE,
        },
        false,
    );
    let nr = HPAGE_PMD_NR;
    let empty =
        matches!(mm.pt.pmd(s), PmdSlot::Table(t) if mm.pt.table(t).is_some_and(|tb| tb.used == 0));
    if !empty || phys.stats != stats || rss != mm.rss_anon + nr {
        return 1;
    }
    if !phys.unmap_shared_large_run_span(pfn.add(nr), k - 1, mm.pid) {
        return 1;
    }
    mm.pt.hw.add_since(&t_mm, k - 1);
    phys.hw.add_since(&t_phys, k - 1);
    if tlb.is_fullmm() {
        // exit_mmap(): free_pgtables() will free these tables, emptied,
        // with nothing else in between that reads them; free them now
        // (the same PMD stores and page frees) rather than clear each and
        // find it again there.
        mm.pt
            .free_pte_table_stretch(s + PMD_SIZE, &tables[1..], phys);
    } else {
        for (j, &(_, slot)) in tables.iter().enumerate().skip(1) {
            let mut t = mm.pt.pte_table_in(slot, s + j as u64 * PMD_SIZE);
            t.write_affine(0, nr as usize, 0, 0, 0);
        }
    }
    // Each table's folio is one batch of 512 pages (two entries), its
    // range the table's 2 MiB.
    tlb.remove_folio_pages(s + PMD_SIZE, k - 1, nr, s + PMD_SIZE);
    tlb.flush_pte_span(s + PMD_SIZE, s + k * PMD_SIZE, Some);
    mm.rss_anon -= (k - 1) * nr;
    crate::core::diag::took(crate::core::diag::Step::ZapTables);
    k
}

/// The PTE tables of a stretch: each table's frame and slab slot
/// ([`crate::core::pgtable::PageTables`]' `pte_table_stretch()`).
pub(crate) type TableStretch = Vec<(Pfn, u32)>;

/// How many whole PMD slots from `s` (at least 2, else `None`) qualify
/// for a whole-table step ([`zap_shared_thp_tables`], fork's
/// `copy_thp_tables()`), with the first table's first frame: each PTE
/// table one stored run of 512 present, non-special entries a frame apart
/// mapping one whole order-9 folio from its head, table `j`'s run the
/// first's moved by `j` folios (the same bits), the folios consecutive in
/// one folio run, all in the first slot's PMD table and below `end`, and
/// `slot_ok(va)` true for every slot after the first (fork: the child's
/// slot is empty); and the `k` tables with their slab slots.
pub(crate) fn whole_thp_tables(
    mm: &Mm,
    phys: &PhysMem,
    s: u64,
    end: u64,
    slot_ok: impl Fn(u64) -> bool,
) -> Option<(u64, Pfn, TableStretch)> {
    let nr = HPAGE_PMD_NR;
    if s + 2 * PMD_SIZE > end {
        return None;
    }
    let (e, _) = mm.pt.pte_entries(s)?;
    let r = e.run_at(0)?;
    if u64::from(r.len) != nr || r.kinds != crate::core::pgtable::Run::PRESENT {
        return None;
    }
    let Entry::Leaf(l) = mm.pt.pte_peek(s) else {
        return None;
    };
    if l.flags.contains(LeafFlags::SPECIAL) {
        return None;
    }
    let f = phys.folio_of(l.pfn)?;
    if f.head != l.pfn || f.nr_pages() != nr {
        return None;
    }
    let folios = (phys.large_run_end(l.pfn)? - l.pfn.0) / nr;
    if folios < 2 {
        return None;
    }
    // The PTE tables of the slots from `s` (as many as the run has
    // folios), read off the PMD table once (all under one PMD table,
    // inside `end`).
    let mut tables = mm.pt.pte_table_stretch(s, folios.min((end - s) / PMD_SIZE));
    let mut k = 1;
    while k < folios.min(tables.len() as u64) {
        let va = s + k * PMD_SIZE;
        if !slot_ok(va) {
            break;
        }
        let want = r.first.wrapping_add(r.step.wrapping_mul(nr * k));
        let same = mm
            .pt
            .pte_entries_in(tables[k as usize].1)
            .run_at(0)
            .is_some_and(|t| {
                t.len == r.len && t.kinds == r.kinds && t.step == r.step && t.first == want
            });
        if !same {
            break;
        }
        k += 1;
    }
    // The last table's first entry decoded: the frame its run's
    // arithmetic promised, the bits of the first (so no table's frame
    // field carried over into other bits on the way).
    if k >= 2 {
        match mm.pt.pte_peek(s + (k - 1) * PMD_SIZE) {
            Entry::Leaf(t) if t.pfn == l.pfn.add(nr * (k - 1)) && t.flags == l.flags => {}
            _ => return None,
        }
    }
    tables.truncate(k as usize);
    (k >= 2).then_some((k, l.pfn, tables))
}

/// Linux: mm/huge_memory.c zap_huge_pmd().
fn zap_huge_pmd(mm: &mut Mm, phys: &mut PhysMem, tlb: &mut MmuGather, slot: u64, leaf: Leaf) {
    // pmd_lock(); pmdp_huge_get_and_clear_full() (counted as the PMD store);
    // tlb_remove_pmd_tlb_entry().
    mm.pt.lock();
    mm.pt.set_pmd(slot, Entry::None);
    tlb.flush_pmd_range(slot, PMD_SIZE);
    if let Some(t) = mm.deposited.remove(&slot) {
        phys.free_pt_page(t);
    }
    if Some(leaf.pfn) == phys.huge_zero {
        rule!(mm.pt.hw, ZapHugeZeroPmd);
        return;
    }
    let folio = phys.folio_of(leaf.pfn).expect("PMD maps a folio");
    phys.remove_rmap_pmd(folio, mm.pid);
    tlb.remove_pmd_page();
    mm.rss_anon -= HPAGE_PMD_NR;
    phys.ref_sub(folio, 1);
}

/// Zap PTEs in `[start, end)` within one PTE table, unmapping each run of
/// pages of one folio as a batch. Linux: zap_pte_range() → zap_present_ptes()
/// with folio_pte_batch() (uffd-wp must match within a batch).
///
/// Events: the PMD read and PTL per table segment, one `ptep_get()` load
/// per entry scanned (the arm64 contpte gather on folded blocks is not
/// added here: zap is the same before and after every seed switch), the
/// atomic clears (get_and_clear_full_ptes), and per batch the head's
/// struct page line (+1 for folio_nr_pages on a large folio).
fn zap_ptes(mm: &mut Mm, phys: &mut PhysMem, tlb: &mut MmuGather, seg: Segment, locked: bool) {
    let Segment { start, end } = seg;
    let _ptl = seg.lock_pte_table(&mm.pt);
    mm.pt.hw.ptep_get_reads((end - start) / PAGE_SIZE);
    // get_and_clear_full_ptes() runs only for present batches
    // (zap_present_ptes()): a segment without a present entry (empty, or
    // swap PTEs only, already cleared by zap_swap_range()) has no arm64
    // contpte_try_unfold_partial() end checks.
    if !mm.pt.any_present_pte(seg) {
        return;
    }
    if let (true, Some(raw)) = (mm.pt.arch().generic_pte_hooks(), mm.pt.arch().raw_pte()) {
        if !mm.pt.hw.observing() {
            zap_present_segment(mm, phys, tlb, seg, locked, raw);
            return;
        }
    }
    // Whole-stretch step (ModelConfig::fork_runs): when the table stores
    // the segment as one run of present entries a frame apart, the
    // cleared entries map consecutive frames with equal bits, so a batch
    // runs to its folio's end (or the segment's) without comparing each.
    let one_run = phys.fork_runs && present_frame_run(mm, start, end);
    // A run of present entries comes back as the run (no list of 512).
    let cleared = mm.pt.clear_ptes_batch(start, (end - start) / PAGE_SIZE);
    let table_base = start & !(PMD_SIZE - 1);
    let at = |k: usize| {
        cleared
            .get(k)
            .map(|(j, l)| (table_base + j as u64 * PAGE_SIZE, l))
    };
    // The segment's first present entry: where its range in the gather
    // starts (tlb_remove_tlb_entries() per present batch).
    let seg_lo = at(0).map_or(start, |(lo, _)| lo);
    let mut i = 0;
    while i < cleared.len() {
        let (va, leaf) = at(i).expect("i < len");
        if leaf.flags.contains(LeafFlags::SPECIAL) {
            i += 1;
            continue;
        }
        if !locked {
            // Entries mapping order-0 pages are batches of one
            // (folio_pte_batch() stops at a small folio's end): hand a run
            // of them to the memmap in one pass — the same folio
            // operations in the same order as batch by batch (unmap_batch).
            let done = phys.unmap_put_small_run(|k| {
                let (_, l2) = at(i + k)?;
                (!l2.flags.contains(LeafFlags::SPECIAL)).then_some(l2.pfn)
            });
            if done > 0 {
                tlb.remove_folio_pages(va, done as u64, 1, seg_lo);
                mm.pt.hw.add(HwEvent::StructPageLine, done as u64);
                mm.rss_anon -= done as u64;
                i += done;
                continue;
            }
        }
        let folio = phys.folio_of(leaf.pfn).expect("PTE maps a folio");
        // A stretch of whole large folios of one run from this head in
        // the segment's one stored run: the first folio's batch below
        // (its `n` is the folio), the others after it in one step
        // ([`zap_large_run`]).
        let mut stretch = None;
        if one_run && !locked && folio.is_large() && leaf.pfn == folio.head && !mm.pt.hw.observing()
        {
            let nr_f = folio.nr_pages();
            let left = (cleared.len() - i) as u64;
            let folios = phys.large_run_zappable(folio, mm.pid).map_or(0, |run_end| {
                (left / nr_f).min((run_end - leaf.pfn.0) / nr_f)
            });
            // The first folio with the others, its batch's counts
            // written out (ModelConfig::zap_first_folded): on the mm's
            // sink the struct page lines and the batch rule of each.
            let folded = if folios >= 2 && phys.zap_first_folded {
                phys.unmap_free_whole_large(folio, folios, mm.pid)
            } else {
                0
            };
            if folded > 0 {
                crate::core::diag::took(crate::core::diag::Step::ZapFolded);
                tlb.remove_folio_pages(va, folded, nr_f, seg_lo);
                mm.pt
                    .hw
                    .rules
                    .hit_n(crate::core::rules::Rule::ZapPteBatch, folded as u32);
                mm.pt.hw.add(HwEvent::StructPageLine, 2 * folded);
                mm.rss_anon -= folded * nr_f;
                i += (folded * nr_f) as usize;
                continue;
            }
            if folios >= 2 {
                stretch = Some((folios, nr_f, mm.pt.hw.tally(), ZapTally::take(phys)));
            }
        }
        let mut n = 1;
        if one_run {
            let folio_left = (folio.head.0 + folio.nr_pages() - leaf.pfn.0) as usize;
            n = folio_left.min(cleared.len() - i);
        }
        while i + n < cleared.len() && !one_run {
            let (va2, l2) = at(i + n).expect("i + n < len");
            let same_run = va2 == va + n as u64 * PAGE_SIZE
                && l2.pfn.0 == leaf.pfn.0 + n as u64
                && l2.pfn.0 < folio.head.0 + folio.nr_pages()
                && (l2.flags & LeafFlags::UFFD_WP) == (leaf.flags & LeafFlags::UFFD_WP);
            if !same_run {
                break;
            }
            n += 1;
        }
        if locked {
            // folio_remove_rmap_ptes() → munlock_vma_folio() (mm/rmap.c).
            rule!(mm.pt.hw, ZapMunlocksFolio);
            phys.folio_batches.add(folio.head, folio.is_large(), false);
        }
        if n > 1 {
            rule!(mm.pt.hw, ZapPteBatch);
        }
        tlb.remove_folio_pages(va, 1, n as u64, seg_lo);
        unmap_batch(mm, phys, folio, leaf.pfn, n as u32);
        i += n;
        if let Some((folios, nr_f, before_mm, before)) = stretch {
            debug_assert_eq!(
                n as u64, nr_f,
                "the stretch's first batch is its first folio"
            );
            let done = zap_large_run(phys, mm.pid, leaf.pfn.add(nr_f), folios - 1, &before);
            tlb.remove_folio_pages(va + nr_f * PAGE_SIZE, done, nr_f, seg_lo);
            mm.pt.hw.add_since(&before_mm, done);
            mm.rss_anon -= done * nr_f;
            i += (done * nr_f) as usize;
        }
    }
    // A full page batch before the segment's end: zap_pte_range() retakes
    // the table (MmuGather::page_fill_retakes()).
    if tlb.page_fill_retakes(end) {
        mm.pt.pte_offset_map_lock_found();
    }
    // tlb_remove_tlb_entries() per present batch: the gather's range grows
    // to cover every cleared present entry (after a full page batch, from
    // the next one).
    if let Some((hi, _)) = cleared.len().checked_sub(1).and_then(at) {
        tlb.flush_pte_span(seg_lo, hi + PAGE_SIZE, |f| {
            (0..cleared.len())
                .filter_map(at)
                .map(|(va, _)| va)
                .find(|&va| va >= f)
        });
    }
}

/// Whether the PTE table stores `[start, end)` as one run of present
/// entries a frame apart (equal bits outside the frame field, no carry
/// out of it): what [`zap_ptes`]' whole-stretch step needs.
fn present_frame_run(mm: &Mm, start: u64, end: u64) -> bool {
    let arch = mm.pt.arch();
    let (mask, step) = match (arch.raw_pte(), arch.kind()) {
        (Some(r), _) => (r.pfn_mask, 1u64 << r.pfn_shift),
        (None, crate::core::arch::ArchKind::Arm64) => {
            use crate::core::arch::arm64::fork_raw;
            (fork_raw::ADDR, fork_raw::FRAME_STEP)
        }
        _ => return false,
    };
    let Some((entries, i0)) = mm.pt.pte_entries(start) else {
        return false;
    };
    let nr = ((end - start) / PAGE_SIZE) as usize;
    let Some(r) = entries.run_at(i0) else {
        return false;
    };
    let first = entries.raw(i0);
    r.kinds == crate::core::pgtable::Run::PRESENT
        && i0 + nr <= r.end()
        && (nr == 1 || r.step == step)
        && (first & mask)
            .checked_add(step * (nr as u64 - 1))
            .is_some_and(|last| last <= mask)
}

/// The length of the table's stored run from entry `j` (raw value `e`)
/// when it is a run of present entries a frame apart whose frames stay
/// inside the frame field: a run whose entries' frames are known without
/// reading them. `None` otherwise.
fn frame_run_len(
    t: &crate::core::arch::PteTable<'_>,
    j: usize,
    e: u64,
    raw: &RawPte,
) -> Option<usize> {
    let frame_step = 1u64 << raw.pfn_shift;
    t.run_from(j)
        .filter(|s| {
            s.kinds == crate::core::pgtable::Run::PRESENT
                && s.step == frame_step
                && (e & raw.pfn_mask)
                    .checked_add(frame_step * (u64::from(s.len) - 1))
                    .is_some_and(|last| last <= raw.pfn_mask)
        })
        .map(|s| s.len as usize)
}

/// The per-segment form of [`zap_ptes`] after its present check, for an
/// arch whose PTE hooks are the generic ones (x86-64) while nobody records
/// marks: one pass over the table's raw entries ([`RawPte`]), borrowed
/// once, clears each present entry
/// (what the generic `get_and_clear_full_ptes()` over the segment does,
/// its call and atomic clears counted once for the segment) and hands each
/// run of one folio (consecutive entries and pages, equal uffd-wp) to
/// [`unmap_batch`] as soon as it ends, with the batch rules added in one
/// step each. The folio is looked up once per batch. Same order of folio
/// operations as [`zap_ptes`]: batches in address order.
/// Linux: mm/memory.c zap_pte_range() → zap_present_ptes().
fn zap_present_segment(
    mm: &mut Mm,
    phys: &mut PhysMem,
    tlb: &mut MmuGather,
    seg: Segment,
    locked: bool,
    raw: &RawPte,
) {
    /// A batch being gathered: its first entry's index, frame and uffd-wp
    /// bit, its folio and its length.
    struct Run {
        i: usize,
        pfn: u64,
        uffd_wp: u64,
        folio: FolioRef,
        n: u32,
    }
    let Segment { start, end } = seg;
    let nr = ((end - start) / PAGE_SIZE) as usize;
    let pid = mm.pid;
    let (mut t, i0) = mm.pt.pte_table(start);
    let (mut present, mut lines, mut rss) = (0u64, 0u64, 0u64);
    let (mut batches, mut munlocks) = (0u32, 0u32);
    let mut span: Option<(usize, usize)> = None;
    let mut run: Option<Run> = None;
    // What the stretches of whole large folios after their first add
    // (RSS pages, batches, struct page lines).
    let (mut stretch_rss, mut stretch_batches, mut stretch_lines) = (0u64, 0u32, 0u64);
    // Ends a batch: zap_present_folio_ptes() (see zap_ptes and unmap_batch).
    // The VA of entry `j`, and of the segment's first present entry so far
    // (the start of its range in the gather).
    let va_of = |j: usize| start + (j - i0) as u64 * PAGE_SIZE;
    let mut finish = |r: Run, phys: &mut PhysMem, tlb: &mut MmuGather, lo: usize| {
        tlb.remove_folio_pages(va_of(r.i), 1, u64::from(r.n), va_of(lo));
        if locked {
            munlocks += 1;
            phys.folio_batches
                .add(r.folio.head, r.folio.is_large(), false);
        }
        if r.n > 1 {
            batches += 1;
        }
        rss += u64::from(r.n);
        if r.folio.is_large() {
            lines += 2;
            phys.remove_rmap_ptes(r.folio, Pfn(r.pfn), r.n, pid);
            phys.ref_sub(r.folio, r.n);
        } else {
            lines += 1;
            phys.unmap_put_small(r.folio);
        }
    };
    let jend = i0 + nr;
    let mut j = i0;
    // Whole-run steps (ModelConfig::fork_runs): a run of the stored
    // table is taken in one step where every entry of it would extend
    // the same batch (or be handed to the memmap in the same order).
    let whole_runs = phys.fork_runs;
    // Order-0 pages unmapped by the run path: a struct page line and an
    // RSS page each.
    let mut small_done = 0u64;
    // Entries are read here and cleared after the pass (one write for the
    // segment when it holds no swap entry or marker).
    let mut nonpresent = false;
    while j < jend {
        let e = t.raw(j);
        if !raw.is_present(e) {
            nonpresent |= e != 0;
            j += 1;
            continue;
        }
        let pfn = raw.pfn(e);
        if let Some(r) = &mut run {
            let same_run = j == r.i + r.n as usize
                && pfn == r.pfn + u64::from(r.n)
                && pfn < r.folio.head.0 + r.folio.nr_pages()
                && e & raw.uffd_wp == r.uffd_wp;
            if same_run {
                // The whole stretch of the batch at once where the table
                // stores entries `j..` as one run of present entries a
                // frame apart (equal bits, so equal uffd-wp): each entry
                // of it continues the batch up to the folio's end.
                let k = if whole_runs {
                    frame_run_len(&t, j, e, raw).map_or(1, |len| {
                        let folio_left = r.folio.head.0 + r.folio.nr_pages() - pfn;
                        len.min(jend - j).min(folio_left as usize)
                    })
                } else {
                    1
                };
                present += k as u64;
                span = Some(span.map_or((j, j + k - 1), |(lo, _)| (lo, j + k - 1)));
                r.n += k as u32;
                j += k;
                continue;
            }
        }
        if let Some(r) = run.take() {
            let lo = span.map_or(r.i, |s| s.0);
            finish(r, phys, tlb, lo);
        }
        if !locked && e & raw.special == 0 {
            // A run of present entries mapping order-0 pages: each is a
            // batch of one (folio_pte_batch() stops at a small folio's
            // end), handed to the memmap in one pass — the same folio
            // operations, in the same order, as batch by batch.
            // Inside one run of present entries a frame apart the frames
            // are known without reading the entries.
            let stretch = whole_runs
                .then(|| frame_run_len(&t, j, e, raw))
                .flatten()
                .map(|len| len.min(jend - j));
            let done = phys.unmap_put_small_run(|k| {
                if let Some(len) = stretch {
                    return (k < len).then_some(Pfn(pfn + k as u64));
                }
                if j + k >= jend {
                    return None;
                }
                let e = t.raw(j + k);
                (raw.is_present(e) && e & raw.special == 0).then(|| Pfn(raw.pfn(e)))
            });
            if done > 0 {
                present += done as u64;
                small_done += done as u64;
                span = Some(span.map_or((j, j + done - 1), |(lo, _)| (lo, j + done - 1)));
                let lo = span.map_or(j, |s| s.0);
                tlb.remove_folio_pages(va_of(j), done as u64, 1, va_of(lo));
                j += done;
                continue;
            }
        }
        present += 1;
        span = Some(span.map_or((j, j), |(lo, _)| (lo, j)));
        let at = j;
        j += 1;
        if e & raw.special != 0 {
            continue;
        }
        let folio = phys.folio_of(Pfn(pfn)).expect("PTE maps a folio");
        // A stretch of whole large folios of one run from this head,
        // mapped by one stored run of entries a frame apart: its first
        // folio's batch through `finish`, the others in one step
        // ([`zap_large_run`]).
        if whole_runs && !locked && folio.is_large() && pfn == folio.head.0 {
            let nr_f = folio.nr_pages();
            let stored = frame_run_len(&t, at, e, raw).map_or(1, |len| len.min(jend - at)) as u64;
            let folios = phys
                .large_run_zappable(folio, pid)
                .map_or(0, |run_end| (stored / nr_f).min((run_end - pfn) / nr_f));
            // The first folio with the others, its batch's counts
            // written out (ModelConfig::zap_first_folded).
            let folded = if folios >= 2 && phys.zap_first_folded {
                phys.unmap_free_whole_large(folio, folios, pid)
            } else {
                0
            };
            if folded > 0 {
                crate::core::diag::took(crate::core::diag::Step::ZapFolded);
                let total = folded * nr_f;
                let last = at + total as usize - 1;
                present += total - 1;
                span = Some(span.map_or((at, last), |(lo, _)| (lo, last)));
                let lo = span.map_or(at, |s| s.0);
                tlb.remove_folio_pages(va_of(at), folded, nr_f, va_of(lo));
                stretch_rss += total;
                stretch_batches += folded as u32;
                stretch_lines += 2 * folded;
                j = at + total as usize;
                continue;
            }
            if folios >= 2 {
                let before = ZapTally::boxed(phys);
                let first = Run {
                    i: at,
                    pfn,
                    uffd_wp: e & raw.uffd_wp,
                    folio,
                    n: nr_f as u32,
                };
                let lo = span.map_or(at, |s| s.0);
                finish(first, phys, tlb, lo);
                let done = zap_large_run(phys, pid, Pfn(pfn + nr_f), folios - 1, &before);
                ZapTally::recycle(before);
                tlb.remove_folio_pages(va_of(at) + nr_f * PAGE_SIZE, done, nr_f, va_of(lo));
                let total = (1 + done) * nr_f;
                let last = at + total as usize - 1;
                present += total - 1;
                span = Some(span.map_or((at, last), |(lo, _)| (lo, last)));
                stretch_rss += done * nr_f;
                stretch_batches += done as u32;
                stretch_lines += 2 * done;
                j = at + total as usize;
                continue;
            }
        }
        run = Some(Run {
            i: at,
            pfn,
            uffd_wp: e & raw.uffd_wp,
            folio,
            n: 1,
        });
    }
    if let Some(r) = run.take() {
        let lo = span.map_or(r.i, |s| s.0);
        finish(r, phys, tlb, lo);
    }
    // Where a full page batch's flush ended inside the segment, the range
    // starts over at the next present entry (read before the clear).
    let next_present = |f: u64| {
        let from = i0 + ((f - start) / PAGE_SIZE) as usize;
        (from..jend)
            .find(|&k| raw.is_present(t.raw(k)))
            .map(|k| start + (k - i0) as u64 * PAGE_SIZE)
    };
    // A full page batch before the segment's end: zap_pte_range() retakes
    // the table (MmuGather::page_fill_retakes()): pte_offset_map_lock()'s
    // PMD load and PTL.
    if tlb.page_fill_retakes(end) {
        t.hw.one(HwEvent::PmdLoad);
        t.hw.one(HwEvent::PtlLock);
    }
    if let Some((lo, hi)) = span {
        let (lo, hi) = (t.va(lo), t.va(hi));
        tlb.flush_pte_span(lo, hi + PAGE_SIZE, next_present);
    }
    // The present entries cleared: the whole segment as one write when it
    // holds no swap entry or marker (a table stored as runs stays runs).
    if nonpresent {
        for j in i0..i0 + nr {
            if raw.is_present(t.raw(j)) {
                t.store_raw(j, 0);
            }
        }
    } else {
        t.write_affine(i0, nr, 0, 0, 0);
    }
    lines += small_done + stretch_lines;
    rss += small_done + stretch_rss;
    batches += stretch_batches;
    // get_and_clear_full_ptes() over the segment: its call, one atomic
    // exchange per present entry.
    t.hw.call(crate::core::arch::clear_call(nr));
    t.hw.add(HwEvent::PteAtomicClear, present);
    t.hw.add(HwEvent::StructPageLine, lines);
    t.hw.rules
        .hit_n(crate::core::rules::Rule::ZapMunlocksFolio, munlocks);
    t.hw.rules
        .hit_n(crate::core::rules::Rule::ZapPteBatch, batches);
    mm.rss_anon -= rss;
}

/// The counts a zap batch adds to besides the caller's own sums: the
/// machine's event sink (rmap, reference and free events) and the
/// statistics (nr_anon), from before the first batch of a stretch.
pub struct ZapTally {
    phys: crate::core::hw::HwTally,
    stats: crate::core::stats::Stats,
}

impl ZapTally {
    pub fn take(phys: &PhysMem) -> ZapTally {
        ZapTally {
            phys: phys.hw.tally(),
            stats: phys.stats.clone(),
        }
    }

    /// [`ZapTally::take`] in a box: the one [`ZapTally::recycle`] kept
    /// last on this thread, written over in place, or a new one (issue
    /// 14: the tally, a few kilobytes, is taken before every stretch of a
    /// zap; built on the stack and copied, it cost about 1 % of
    /// mremap-batch-64k).
    fn boxed(phys: &PhysMem) -> Box<ZapTally> {
        match SPARE_ZAP_TALLY.with(|s| s.take()) {
            Some(mut t) => {
                phys.hw.tally_into(&mut t.phys);
                phys.stats.copy_into(&mut t.stats);
                t
            }
            None => Box::new(ZapTally::take(phys)),
        }
    }

    /// Keep `t` for the next [`ZapTally::boxed`] on this thread (storage
    /// only: it is written over before it is read again).
    fn recycle(t: Box<ZapTally>) {
        SPARE_ZAP_TALLY.with(|s| s.set(Some(t)));
    }
}

thread_local! {
    /// The box [`ZapTally::recycle`] kept (storage only: never read).
    static SPARE_ZAP_TALLY: std::cell::Cell<Option<Box<ZapTally>>> =
        const { std::cell::Cell::new(None) };
}

/// zap_pte_range()'s large-folio batches over a stretch of whole folios
/// of one run, after the first: the batch over the whole folio before
/// `next` (`nr` pages) has just unmapped and freed it from the state
/// [`PhysMem::large_run_zappable`] found (checked by the caller before
/// that batch, with `before` taken then), so each of the next `m` folios
/// of its run, in the same state and mapped by the next entries of the
/// same stored run, takes the same batch: they are unmapped and freed in
/// one step ([`PhysMem::unmap_free_large_span`]) and the first batch's
/// rmap, reference and free events and statistics are added once per
/// folio. The caller adds its own per-batch sums (entries cleared, the
/// struct page lines it counts, RSS, ZapPteBatch, the flush range).
/// Returns the folios done (0: none; go on batch by batch). Shared by
/// munmap's and exit's zap (the fork work calls it for exit).
/// Linux: mm/memory.c zap_pte_range() → zap_present_ptes() →
/// zap_present_folio_ptes() (per folio).
pub fn zap_large_run(
    phys: &mut PhysMem,
    pid: crate::types::Pid,
    next: Pfn,
    m: u64,
    before: &ZapTally,
) -> u64 {
    let done = phys.unmap_free_large_span(next, m, pid);
    if done > 0 {
        phys.hw.add_since(&before.phys, done);
        phys.stats.add_since(&before.stats, done as i64);
        crate::core::diag::took(crate::core::diag::Step::ZapStretch);
    }
    done
}

fn unmap_batch(
    mm: &mut Mm,
    phys: &mut PhysMem,
    folio: FolioRef,
    first: crate::core::addr::Pfn,
    n: u32,
) {
    mm.pt.hw.add(
        HwEvent::StructPageLine,
        if folio.is_large() { 2 } else { 1 },
    );
    mm.rss_anon -= n as u64;
    if !folio.is_large() {
        // The same as the two calls below, in one memmap update.
        phys.unmap_put_small(folio);
        return;
    }
    phys.remove_rmap_ptes(folio, first, n, mm.pid);
    phys.ref_sub(folio, n);
}

/// Free the page tables of `removed` VMAs (sorted, already zapped) given the
/// surviving neighbours' bounds, each freed table recorded in `tlb`.
/// Linux: mm/memory.c free_pgtables(), which gathers VMAs closer than a
/// PMD into one free_pgd_range() call.
pub fn free_pgtables(
    mm: &mut Mm,
    phys: &mut PhysMem,
    tlb: &mut MmuGather,
    removed: &[Vma],
    floor: u64,
    ceiling: u64,
) {
    let arch = mm.pt.arch().kind();
    let mut i = 0;
    while i < removed.len() {
        let addr = removed[i].start;
        let mut j = i;
        while j + 1 < removed.len()
            && removed[j + 1].start <= removed[j].end.saturating_add(PMD_SIZE)
        {
            j += 1;
        }
        let next_start = if j + 1 < removed.len() {
            removed[j + 1].start
        } else {
            ceiling
        };
        mm.pt.free_pgd_range(
            addr,
            removed[j].end,
            floor,
            next_start,
            phys,
            &mut |level, a| tlb.table_freed(arch, level, a),
        );
        if j > i {
            rule!(mm.pt.hw, ZapFreePgtablesGathered);
        }
        i = j + 1;
    }
}
