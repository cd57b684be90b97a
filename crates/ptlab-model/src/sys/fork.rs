//! fork and exit: duplicating an address space and tearing one down.
//!
//! Linux: kernel/fork.c / mm/mmap.c dup_mmap(), mm/rmap.c anon_vma_fork(),
//! mm/memory.c copy_page_range(), vma_needs_copy(), copy_pte_range(),
//! copy_present_ptes(), __copy_present_ptes(); mm/huge_memory.c
//! copy_huge_pmd(); mm/mmap.c exit_mmap(). Rule tags (K1–K6) label the
//! rules as stated beside them, each with its kernel function.
//!
//! Not modelled: FOLL_PIN pins (io_uring fixed buffers and the like), so
//! MMF_HAS_PINNED is never set and the eager-copy rules K3.2/K4 (pinned
//! pages copied at fork) never apply.

use crate::core::addr::PTRS_PER_TABLE;
use crate::core::addr::{Pfn, HPAGE_PMD_NR, PAGE_SIZE, PMD_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::folio::PhysMem;
use crate::core::hw::HwEvent;
use crate::core::pgtable::{Cursor, PageTables, PtItem, Segment};
use crate::core::rules::rule;
use crate::core::vma::{VmFlags, Vma};
use crate::mm::batch::{folio_pte_batch, Before, Fpb};
use crate::mm::mm::Mm;
use crate::mm::zap::free_pgtables;
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::Pid;
use std::collections::BTreeMap;

impl Model {
    /// fork(2): a new process whose address space duplicates `parent`'s.
    /// Returns the child's pid. Linux: dup_mmap().
    pub fn fork(&mut self, parent: Pid) -> Result<Pid, Errno> {
        // On the live harness a fork drains the CPU's folio batches: both
        // workers drain on purpose right after fork() (MADV_COLD on a page
        // of their own), so that their own copy-on-write faults cannot
        // drain at an unpredictable later point. A property of the
        // harness, not a fork() rule (a program that forks drains only if
        // its own faults do); see crate::core::folio::FolioBatches and
        // docs/divergences.md H10.
        self.phys.folio_batches.drain();
        let child = self.procs.keys().next_back().copied().unwrap_or(0) + 1;
        let mut pt = PageTables::new(self.cfg.arch, &mut self.phys).ok_or(Errno::ENOMEM)?;
        pt.hw.features = self.cfg.hw;
        pt.set_pte_runs(self.cfg.pte_runs);
        pt.chain_steps = self.cfg.table_chain_steps;
        pt.set_keep_table_index(self.cfg.keep_table_index);
        pt.hw.set_tracing(self.hw_tracing);
        let batch = !self.cfg.before.contains(Before::FORK_PTE_BATCH);
        let Model {
            procs, phys, ids, ..
        } = self;
        let src = procs.get_mut(&parent).ok_or(Errno::ESRCH)?;
        // The child's tree grows to about the parent's size: its frame
        // index sized once rather than grown table by table.
        pt.reserve_tables(src.pt.table_count());
        let mut dst = Mm {
            pid: child,
            vmas: Default::default(),
            pt,
            rss_anon: 0,
            deposited: BTreeMap::new(),
            // MMF_INIT_MASK carries the THP-disable flags into the child.
            thp_disable: src.thp_disable,
            // copy_signal() copies the rlimits; the credentials (and so the
            // capabilities) are shared. locked_vm starts at 0 (mm_init()),
            // and the child's VMAs lose VM_LOCKED (dup_mmap()).
            rlimits: src.rlimits,
            locked_vm_stale: 0,
            // The child starts on its parent's CPU (sched_fork()).
            numa_node: src.numa_node,
        };
        src.pt.hw.one(HwEvent::Syscall);
        src.pt.hw.one(HwEvent::ProcessCreate);
        let parent_vmas: Vec<Vma> = src.vmas.iter().cloned().collect();
        for v in parent_vmas {
            // K1: VM_DONTCOPY VMAs do not exist in the child.
            if v.flags.contains(VmFlags::DONTCOPY) {
                rule!(src.pt.hw, ForkDontcopy);
                continue;
            }
            src.pt.hw.one(HwEvent::VmaCopy);
            let mut c = v.clone();
            // The child loses mlock and (without UFFD_FEATURE_EVENT_FORK) uffd state.
            c.flags -=
                VmFlags::LOCKED | VmFlags::LOCKONFAULT | VmFlags::UFFD_MISSING | VmFlags::UFFD_WP;
            if v.flags.contains(VmFlags::WIPEONFORK) {
                // A clean slate: no anon_vma until the child faults, no page tables.
                rule!(src.pt.hw, ForkWipeonfork);
                c.anon_vma = None;
                c.fork_child = false;
                dst.vmas.insert(c);
                continue;
            }
            // K5 anon_vma_fork(): linked to the parent's chain plus its own
            // anon_vma, so the chain has more than one link.
            if v.anon_vma.is_some() {
                c.anon_vma = Some(ids.fresh());
                c.fork_child = true;
            }
            dst.vmas.insert(c.clone());
            // K2 vma_needs_copy(): only VMAs with an anon_vma (or uffd-wp on
            // the child) get their page tables copied.
            if v.anon_vma.is_some() || c.flags.contains(VmFlags::UFFD_WP) {
                copy_page_range(src, &mut dst, phys, &v, &c, batch)?;
                // copy_nonpresent_pte(): guard markers are copied.
                crate::mm::marker::copy_markers(src, &mut dst, phys, v.start, v.end)?;
            }
        }
        // dup_mmap(): flush_tlb_mm(oldmm) after copying (the parent's PTEs
        // were write-protected). Linux: mm/mmap.c dup_mmap().
        src.pt.flush_tlb_mm();
        procs.insert(child, dst);
        Ok(child)
    }

    /// exit(2) of process `pid`: every mapping is zapped and every page table
    /// freed. Linux: exit_mmap().
    pub fn exit(&mut self, pid: Pid) -> Result<(), Errno> {
        let Model { procs, phys, .. } = self;
        let mut mm = procs.remove(&pid).ok_or(Errno::ESRCH)?;
        mm.pt.hw.one(HwEvent::Syscall);
        mm.pt.hw.one(HwEvent::ProcessExit);
        let vmas: Vec<Vma> = mm.vmas.iter().cloned().collect();
        // exit_mmap() uses a fullmm gather: the per-VMA flushes are
        // skipped and tlb_finish_mmu() flushes the whole mm once.
        let mut tlb = crate::core::tlb::MmuGather::new_fullmm();
        for v in &vmas {
            crate::mm::zap::zap_vma(&mut mm, phys, &mut tlb, v, false);
            // unmap_vmas() zaps with ZAP_FLAG_DROP_MARKER.
            crate::mm::marker::drop_markers(&mut mm, v.start, v.end);
        }
        // pte_free_tlb() and friends record each freed table in the
        // gather (freed_tables); a fullmm gather flushes the whole mm once
        // whatever they cover.
        free_pgtables(&mut mm, phys, &mut tlb, &vmas, 0, 0);
        tlb.finish(&mm.pt);
        for (_, t) in std::mem::take(&mut mm.deposited) {
            phys.free_pt_page(t);
        }
        mm.pt.free_all(phys);
        // The process's events retire into the machine-wide sink.
        phys.hw.absorb(&mm.pt.hw.snapshot());
        phys.hw.rules.retire(&mm.pt.hw.rules);
        Ok(())
    }
}

/// Copy the page tables of `v` (parent) into the child's `c`.
/// Linux: copy_page_range() → copy_p4d/pud/pmd_range() → copy_huge_pmd() /
/// copy_pte_range().
fn copy_page_range(
    src: &mut Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    v: &Vma,
    c: &Vma,
    batch: bool,
) -> Result<(), Errno> {
    // Linux: copy_pmd_range(): one step per PMD slot of the parent.
    let mut cur = Cursor::pmds(v.start, v.end);
    while let Some(q) = cur.next(&src.pt) {
        match q.item {
            PtItem::Huge { leaf, .. } => copy_huge_pmd(src, dst, phys, q.entry_start(), leaf, c)?,
            PtItem::PteTable(_) => {
                let k = copy_thp_tables(src, dst, phys, q, v.end, c, batch)?;
                if k == 0 {
                    copy_pte_range(src, dst, phys, q.segment(), c, batch)?;
                } else {
                    cur.jump(q.va + k * PMD_SIZE);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The whole-table step of fork's copy (`ModelConfig::fork_runs`): from
/// the PMD slot of `q`, a stretch of consecutive PMD slots (in one PMD
/// table, up to `end`) whose parent PTE tables each map one whole large
/// folio of ONE folio run — each table stored as one run of present
/// entries a frame apart with the bits of the first table, the folios
/// consecutive, every one in the run's state — is copied as the kernel
/// copies each table, the first table through [`copy_pte_range`] and the
/// other `k − 1` in one step: each child table allocated as `pte_alloc()`
/// allocates it (its events counted as they happen), filled with the
/// first child table's run moved by the folio's frames, the folios'
/// state changed as one sub-run ([`PhysMem::dup_large_run_span`]), and
/// every event, kernel call and rule hit of the first table's copy added
/// `k − 1` times. Each table's copy sees the same entries, the same folio
/// state and the same child slot (empty), so does the same things. Taken
/// only when the first table's copy left the parent's table as it was
/// (no write-protect: every fork after the first), the child's table one
/// run like it and the statistics untouched; else the other tables go
/// through [`copy_pte_range`] one by one. Returns the PMD slots copied (0:
/// not taken, nothing done).
/// Linux: mm/memory.c copy_pmd_range() → copy_pte_range() per PMD slot.
fn copy_thp_tables(
    src: &mut Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    q: crate::core::pgtable::Query,
    end: u64,
    c: &Vma,
    batch: bool,
) -> Result<u64, Errno> {
    let s = q.va;
    if !phys.fork_runs || !batch || !q.whole_pmd() || src.pt.hw.observing() || dst.pt.hw.observing()
    {
        return Ok(0);
    }
    // The child's slots after the first must be empty (read off the
    // child's PMD table once, when the parent's first table qualifies).
    let empty_end = std::cell::OnceCell::new();
    let child_empty = |va| {
        va < *empty_end.get_or_init(|| {
            let n = dst
                .pt
                .pmd_none_stretch(s + PMD_SIZE, end.saturating_sub(s) / PMD_SIZE);
            s + PMD_SIZE + n * PMD_SIZE
        })
    };
    let Some((k, _, _)) = crate::mm::zap::whole_thp_tables(src, phys, s, end, child_empty) else {
        return Ok(0);
    };
    // Room for every child table (so no table's allocation fails midway,
    // where the kernel would stop with the tables before it copied).
    if phys.frames().saturating_sub(phys.frames_allocated()) < k + 4 {
        return Ok(0);
    }
    // The parent's first table: one run of 512 entries (whole_thp_tables()).
    let run_of = |pt: &PageTables, va: u64| pt.pte_entries(va).and_then(|(e, _)| e.run_at(0));
    let Entry::Leaf(first) = src.pt.pte_peek(s) else {
        return Ok(0);
    };
    let parent_before = run_of(&src.pt, s);
    // The child's table as copy_pte_range() allocates it, its events
    // counted as they happen (the other tables' allocations likewise).
    dst.pt.pte_alloc(s, phys).ok_or(Errno::ENOMEM)?;
    let (t_src, t_dst, t_phys) = (src.pt.hw.tally(), dst.pt.hw.tally(), phys.hw.tally());
    let stats = phys.stats.clone();
    let rss = dst.rss_anon;
    copy_pte_range(src, dst, phys, q.segment(), c, batch)?;
    // The first table's copy as the others' pattern: the parent's table
    // unchanged, the child's one run of present entries a frame apart.
    // (The parent's table after the copy as one run of 512 entries equal
    // to the run before: the same entries.)
    let parent_after = run_of(&src.pt, s);
    let step = match parent_after {
        Some(r) if r.len as usize == PTRS_PER_TABLE => r.step,
        _ => return Ok(1),
    };
    let Some((child, _)) = dst.pt.pte_entries(s) else {
        return Ok(1);
    };
    let c_first = child.raw(0);
    let child_run = match child.run_at(0) {
        Some(r) if r.len as usize == PTRS_PER_TABLE => r.step == step,
        _ => (0..PTRS_PER_TABLE)
            .all(|i| child.raw(i) == c_first.wrapping_add(step.wrapping_mul(i as u64))),
    };
    if parent_before != parent_after
        || !child_run
        || phys.stats != stats
        || dst.rss_anon != rss + PTRS_PER_TABLE as u64
    {
        return Ok(1);
    }
    let nr = PTRS_PER_TABLE as u64;
    if !phys.dup_large_run_span(first.pfn.add(nr), k - 1, dst.pid) {
        return Ok(1);
    }
    // The other tables' copies, counted before their allocations below
    // add their own events.
    src.pt.hw.add_since(&t_src, k - 1);
    dst.pt.hw.add_since(&t_dst, k - 1);
    phys.hw.add_since(&t_phys, k - 1);
    // The frame distance of one folio in the raw encoding (the parent's
    // tables were matched against it).
    let folio_step = step.wrapping_mul(nr);
    // pte_alloc() of each empty slot (checked above), under the PMD table
    // the first table's went into, in one step (nothing between two of
    // the kernel's allocations allocates: the pages are those single
    // allocations hand out); then each table written.
    let mut slots = Vec::with_capacity(k as usize - 1);
    let allocated = dst
        .pt
        .pte_alloc_stretch(s + PMD_SIZE, k - 1, phys, &mut slots);
    for (j, &slot) in (1..k).zip(&slots) {
        let va = s + j * PMD_SIZE;
        let mut t = dst.pt.pte_table_in(slot, va);
        let first = c_first.wrapping_add(folio_step.wrapping_mul(j));
        t.write_affine(
            0,
            PTRS_PER_TABLE,
            first,
            step,
            crate::core::pgtable::Run::PRESENT,
        );
    }
    if !allocated {
        // Not reached: room for every table was checked above.
        return Err(Errno::ENOMEM);
    }
    dst.rss_anon += (k - 1) * nr;
    crate::core::diag::took(crate::core::diag::Step::ForkTables);
    Ok(k)
}

/// K4: share a PMD-mapped THP (or the huge zero page) with the child.
/// Linux: mm/huge_memory.c copy_huge_pmd().
fn copy_huge_pmd(
    src: &mut Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    slot: u64,
    leaf: Leaf,
    c: &Vma,
) -> Result<(), Errno> {
    dst.pt.pmd_alloc(slot, phys).ok_or(Errno::ENOMEM)?;
    let pgtable = phys.alloc_pt_page().ok_or(Errno::ENOMEM)?;
    dst.deposited.insert(slot, pgtable);
    if Some(leaf.pfn) == phys.huge_zero {
        rule!(src.pt.hw, ForkHugeZeroPmd);
        dst.pt.set_pmd(slot, Entry::Leaf(leaf));
        return Ok(());
    }
    let folio = phys.folio_of(leaf.pfn).expect("PMD maps a folio");
    // folio_try_dup_anon_rmap_pmd(): the head loses AnonExclusive.
    rule!(src.pt.hw, ForkCopyHugePmd);
    phys.set_anon_exclusive(folio.head, false);
    phys.add_rmap_pmd(folio, dst.pid, false);
    phys.ref_add(folio, 1);
    dst.rss_anon += HPAGE_PMD_NR;
    // Both PMDs become read-only; the child's is old.
    let mut p = leaf;
    p.flags.remove(LeafFlags::WRITE);
    src.pt.set_pmd(slot, Entry::Leaf(p));
    let mut ch = p;
    ch.flags.remove(LeafFlags::YOUNG);
    if !c.flags.contains(VmFlags::UFFD_WP) {
        ch.flags.remove(LeafFlags::UFFD_WP);
    }
    dst.pt.set_pmd(slot, Entry::Leaf(ch));
    Ok(())
}

/// Copy the PTEs of `[start, end)` (one PMD slot). The child gets a PTE
/// table whenever the parent has one, even an empty one.
/// Linux: copy_pte_range() and copy_present_ptes().
fn copy_pte_range(
    src: &mut Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    seg: Segment,
    c: &Vma,
    batch: bool,
) -> Result<(), Errno> {
    let Segment { start, end } = seg;
    dst.pt.pte_alloc(start, phys).ok_or(Errno::ENOMEM)?;
    // pte_offset_map_lock() on both sides: two PMD reads, two PTLs.
    let _src_ptl = seg.lock_pte_table(&src.pt);
    let _dst_ptl = seg.lock_pte_table(&dst.pt);
    // Runs of order-0 pages go through one per-segment loop where the
    // arch's PTE hooks are the generic ones and nobody records marks.
    let contpte = crate::mm::contpte_runs::applies(&src.pt);
    let fast = ((src.pt.arch().generic_pte_hooks() && src.pt.arch().raw_pte().is_some())
        || contpte)
        && !src.pt.hw.observing();
    let mut try_fast = fast;
    let mut addr = start;
    while addr < end {
        if try_fast {
            let n = if contpte {
                crate::mm::contpte_runs::copy_small_run(src, dst, phys, addr, end, c, batch)
            } else {
                copy_small_run(src, dst, phys, addr, end, c, batch)
            };
            addr += n * PAGE_SIZE;
            if addr >= end {
                break;
            }
        }
        // A swap entry goes to copy_nonpresent_pte() (a marker, copied
        // with the VMA's markers, and present or none entries are read by
        // the ptep_get() below).
        if src.pt.pte_is_nonpresent(addr) {
            if let Entry::Swap(s) = src.pt.pte_peek(addr) {
                src.pt.hw.ptep_get_reads(1); // the ptep_get() that found it
                crate::mm::swap::copy_swap_pte(src, dst, phys, addr, s, c);
                addr += PAGE_SIZE;
                continue;
            }
        }
        let Entry::Leaf(pte) = src.pt.pte(addr) else {
            addr += PAGE_SIZE;
            continue;
        };
        let max_nr = (end - addr) / PAGE_SIZE;
        let folio = if pte.flags.contains(LeafFlags::SPECIAL) {
            None
        } else {
            // vm_normal_page() + page_folio(): the head's struct page line.
            src.pt.hw.one(HwEvent::StructPageLine);
            Some(phys.folio_of(pte.pfn).expect("PTE maps a folio"))
        };
        let nr = if pte.flags.contains(LeafFlags::SPECIAL) {
            rule!(src.pt.hw, ForkZeroPagePte);
            copy_present_ptes(src, dst, phys, addr, pte, None, 1, c);
            1
        } else if batch {
            // 6.9+: one batch per run of a large folio (folio_pte_batch_flags
            // with FPB_MERGE_WRITE | FPB_RESPECT_DIRTY for a private VMA),
            // when the folio is large and max_nr != 1 (folio_nr_pages():
            // the folio's second struct page line).
            if max_nr > 1 && folio.is_some_and(|f| f.is_large()) {
                src.pt.hw.one(HwEvent::StructPageLine);
            }
            let b = folio_pte_batch(
                &src.pt,
                phys,
                addr,
                pte,
                max_nr,
                Fpb::MERGE_WRITE | Fpb::RESPECT_DIRTY,
            );
            if b.nr > 1 {
                rule!(src.pt.hw, ForkPteBatch);
            }
            src.pt.hw.mark_batch(addr, b.nr, "copy");
            copy_present_ptes(src, dst, phys, addr, b.pte, folio, b.nr, c);
            b.nr
        } else {
            // Before 6.9: one PTE at a time.
            rule!(src.pt.hw, ForkPtePerEntry);
            src.pt.hw.mark_batch(addr, 1, "copy");
            copy_present_ptes(src, dst, phys, addr, pte, folio, 1, c);
            1
        };
        // After a large folio's batch the next entry is likely the next
        // batch of one: try the order-0 loop again only after a small one.
        try_fast = fast && folio.is_some_and(|f| !f.is_large());
        addr += nr * PAGE_SIZE;
    }
    const { assert!(PTRS_PER_TABLE == 512) };
    Ok(())
}

/// The per-segment form of the loop above for a run of present PTEs
/// mapping order-0 anon pages from `addr` (at most to `end`): each is what
/// one pass of that loop does — `ptep_get()`, the folio's struct page line,
/// a one-entry batch (`folio_pte_batch()` stops at a small folio's end) or,
/// before 6.9, one entry, then [`copy_present_ptes`] with `nr == 1` — with
/// the table borrowed once and the run's events added in one step each.
/// Only for an arch whose PTE hooks are the generic ones (x86-64): the
/// stores below are theirs. Returns the entries copied (0: `addr` is not
/// such an entry).
/// Linux: mm/memory.c copy_pte_range() → copy_present_ptes() (nr == 1).
fn copy_small_run(
    src: &mut Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    addr: u64,
    end: u64,
    c: &Vma,
    batch: bool,
) -> u64 {
    let raw = src.pt.arch().raw_pte().expect("checked by the caller");
    // The child's entry: pte_wrprotect() when the parent's is writable,
    // pte_mkold(), and pte_clear_uffd_wp() unless the child keeps uffd-wp.
    let mut child_clear = raw.write | raw.young;
    if !c.flags.contains(VmFlags::UFFD_WP) {
        child_clear |= raw.uffd_wp;
    }
    let (mut st, i0) = src.pt.pte_table(addr);
    let (mut dt, _) = dst.pt.pte_table(addr);
    let max = ((end - addr) / PAGE_SIZE) as usize;
    // The memmap side of each entry, then the two tables' stores
    // (mm/copy_runs.rs): the same state as entry by entry, since neither
    // side reads the other.
    let bits = crate::mm::copy_runs::CopyBits {
        takes: |e: u64| raw.is_present(e) && e & raw.special == 0,
        pfn: |e: u64| Pfn(raw.pfn(e)),
        writable: |e: u64| e & raw.write != 0,
        // wrprotect_ptes(nr == 1): ptep_set_wrprotect().
        parent: |e: u64| e & !raw.write,
        child: |e: u64| e & !child_clear,
        addr_mask: raw.pfn_mask,
        frame_step: 1 << raw.pfn_shift,
    };
    let (n, wrprotected) = crate::mm::copy_runs::copy_order0_entries(
        &mut st,
        &mut dt,
        phys,
        i0,
        max,
        &bits,
        |_, _, _| {},
    );
    let n = n as u64;
    if n == 0 {
        return 0;
    }
    crate::mm::small_runs::account_small_run(src, dst, phys, n, wrprotected, batch);
    n
}

/// K3.1/K3.3: share `nr` PTEs starting at `addr` (`pte` is the first, with
/// the batch's write bit merged in) of `folio` (`None`: the zero page).
/// Linux: copy_present_ptes() + __copy_present_ptes().
#[allow(clippy::too_many_arguments)]
fn copy_present_ptes(
    src: &mut Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    addr: u64,
    pte: Leaf,
    folio: Option<crate::core::folio::FolioRef>,
    nr: u64,
    c: &Vma,
) {
    if let Some(folio) = folio {
        // folio_try_dup_anon_rmap_ptes(): every page in the batch loses
        // AnonExclusive and gains a mapping; one reference per PTE.
        // (One range update: a whole-folio batch is one step.)
        phys.set_anon_exclusive_range(pte.pfn, nr, false);
        phys.add_rmap_ptes(folio, pte.pfn, nr as u32, dst.pid, false);
        // The batch's first struct page line is the one vm_normal_page()
        // read in this pass of copy_pte_range(): touched again, an L1 hit
        // (the subset `struct_page_line_hot`; the rest of a large batch's
        // lines are `struct_page_line_large`).
        // Linux: include/linux/rmap.h __folio_try_dup_anon_rmap().
        src.pt.hw.one(HwEvent::StructPageLineHot);
        phys.ref_add(folio, nr as u32);
        dst.rss_anon += nr;
    }
    // A private (COW) mapping write-protects the parent's entries.
    let mut child = pte;
    if pte.write() {
        rule!(src.pt.hw, ForkWrprotectParent);
        src.pt.wrprotect_ptes(addr, nr);
        child.flags.remove(LeafFlags::WRITE);
    }
    child.flags.remove(LeafFlags::YOUNG);
    if !c.flags.contains(VmFlags::UFFD_WP) {
        child.flags.remove(LeafFlags::UFFD_WP);
    }
    dst.pt.set_ptes(addr, child, nr, phys);
}
