//! mprotect(2) on private anonymous memory.
//!
//! Linux: mm/mprotect.c do_mprotect_pkey(), mprotect_fixup(),
//! change_protection() → change_pmd_range() → change_huge_pmd() /
//! change_pte_range(); mm/vma.c vma_modify_flags(); include/linux/pgtable.h
//! modify_prot_start_ptes() / modify_prot_commit_ptes() and their arm64
//! versions (get_and_clear_ptes() / set_ptes(), arch/arm64/mm/mmu.c).
//!
//! Rule tags (A1–A14, B, §7/§8.1, M6/P6/W3) label the rules as stated
//! beside them, each with the kernel function it mirrors.
//!
//! Two PTE-level algorithms, selected by [`Before::MPROTECT_PTE_BATCH`]:
//!
//! * [`change_pte_range_batched`] (Linux 6.17+): one `folio_pte_batch()`
//!   run of a large folio at a time (FPB_RESPECT_SOFT_DIRTY |
//!   FPB_RESPECT_WRITE), cleared with one `modify_prot_start_ptes()` and
//!   rewritten with `modify_prot_commit_ptes()` per run of equal
//!   AnonExclusive state. On arm64 only blocks covered partially at the ends
//!   of a batch are unfolded.
//! * [`change_pte_range_per_pte`] (Linux ≤ 6.16): every present PTE is
//!   cleared and rewritten alone (`ptep_modify_prot_start()` /
//!   `ptep_modify_prot_commit()`), deciding writability per PTE with
//!   `can_change_pte_writable()`. On arm64 the first PTE of a folded block
//!   unfolds it and the commit of its last PTE may fold it again.
//!
//! Both give the same VMAs, pages and write bits; the batched path ORs the
//! young/dirty bits of a batch into every PTE of it (x86 as well: the
//! generic `modify_prot_start_ptes()` gathers them), which /proc does not show.

use crate::core::addr::{page_align, Pfn, PAGE_SIZE, PMD_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::folio::{FolioRef, PhysMem};
use crate::core::hw::HwEvent;
use crate::core::pgtable::{Cursor, PageTables, PtItem, Run, Segment};
use crate::core::rules::rule;
use crate::core::stats::VmEvent;
use crate::core::tlb::MmuGather;
use crate::core::vma::vm_page_prot;
use crate::core::vma::{VmFlags, Vma, VM_ACCESS_FLAGS};
use crate::mm::batch::{folio_pte_batch, Before, Fpb};
use crate::mm::mm::Mm;
use crate::mm::protect::{can_change_pte_writable, maybe_change_pte_writable, pte_modify};
use crate::mm::zap::split_huge_pmd;
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::uapi::Prot;
use crate::types::Pid;

/// PROT_SEM: accepted by arch_validate_prot() and otherwise ignored.
const PROT_SEM: u32 = 0x8;
/// PROT_GROWSDOWN / PROT_GROWSUP (include/uapi/asm-generic/mman-common.h).
const PROT_GROWSDOWN: u32 = 0x0100_0000;
const PROT_GROWSUP: u32 = 0x0200_0000;

impl Model {
    /// mprotect(2). The errno checks run in do_mprotect_pkey()'s order; a
    /// hole after the first VMA stops the walk with ENOMEM after the VMAs
    /// before it were changed (mremap.md §8.1).
    /// Linux: mm/mprotect.c do_mprotect_pkey().
    pub fn mprotect(&mut self, pid: Pid, addr: u64, len: u64, prot: Prot) -> Result<(), Errno> {
        if !self.procs.contains_key(&pid) {
            return Err(Errno::EINVAL);
        }
        self.count_syscall(pid);
        let grows = prot.bits() & (PROT_GROWSDOWN | PROT_GROWSUP);
        let bits = prot.bits() & !grows;
        if grows == PROT_GROWSDOWN | PROT_GROWSUP {
            rule!(self.phys.hw, MprotectGrowsBoth);
            return Err(Errno::EINVAL); // can't be both
        }
        if !addr.is_multiple_of(PAGE_SIZE) {
            rule!(self.phys.hw, MprotectAddrUnaligned);
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            rule!(self.phys.hw, MprotectLenZero);
            return Ok(()); // before the prot check: mprotect(p, 0, junk) succeeds
        }
        // PAGE_ALIGN(len) may wrap to 0 and start + len may wrap: end <= start.
        let mut start = addr;
        let end = page_align(len)
            .and_then(|l| addr.checked_add(l))
            .filter(|&e| e > addr)
            .ok_or(Errno::ENOMEM)?;
        // arch_validate_prot() (generic and arm64 without BTI/MTE).
        let known = Prot::READ.bits() | Prot::WRITE.bits() | Prot::EXEC.bits() | PROT_SEM;
        if bits & !known != 0 {
            rule!(self.phys.hw, MprotectProtInvalid);
            return Err(Errno::EINVAL);
        }
        // vma_find(): the first VMA ending above start and starting below end.
        let first = self.procs[&pid]
            .vmas
            .find_vma(start)
            .filter(|v| v.start < end)
            .cloned()
            .ok_or(Errno::ENOMEM)?;
        if grows & PROT_GROWSDOWN != 0 {
            start = first.start;
            if !first.flags.contains(VmFlags::GROWSDOWN) {
                rule!(self.phys.hw, MprotectGrowsdownNotStack);
                return Err(Errno::EINVAL);
            }
        } else {
            if first.start > start {
                rule!(self.phys.hw, MprotectUnmappedStart);
                return Err(Errno::ENOMEM);
            }
            if grows & PROT_GROWSUP != 0 {
                // The kernel extends the range to the VMA's end, then needs
                // VM_GROWSUP, which is VM_NONE on x86-64 and arm64.
                rule!(self.phys.hw, MprotectGrowsup);
                return Err(Errno::EINVAL);
            }
        }
        // calc_vm_prot_bits() (no pkeys, no arm64 BTI/MTE bits).
        let mut want = VmFlags::empty();
        for (p, f) in [
            (Prot::READ, VmFlags::READ),
            (Prot::WRITE, VmFlags::WRITE),
            (Prot::EXEC, VmFlags::EXEC),
        ] {
            if bits & p.bits() != 0 {
                want |= f;
            }
        }
        // do_mprotect_pkey(): one mmu_gather for every VMA of the range
        // (tlb_gather_mmu() before the loop, tlb_finish_mmu() after it, on
        // the error paths too): on x86 (MERGE_VMAS) the VMAs' changes are
        // one flush; arm64 flushes each at tlb_end_vma(). Checked live:
        // mprotect over three 8 KiB VMAs, the first and last changed, is
        // one flush of 6 pages on x86.
        // Linux: mm/mprotect.c do_mprotect_pkey(), mprotect_fixup().
        let mut tlb = MmuGather::new();
        let r = self.mprotect_vmas(pid, &first, start, end, want, &mut tlb);
        tlb.finish(&self.procs[&pid].pt);
        r
    }

    /// do_mprotect_pkey()'s loop over the VMAs of `[start, end)` from
    /// `first`, their page-table changes gathered in `tlb`.
    fn mprotect_vmas(
        &mut self,
        pid: Pid,
        first: &Vma,
        start: u64,
        end: u64,
        want: VmFlags,
        tlb: &mut MmuGather,
    ) -> Result<(), Errno> {
        let mut nstart = start;
        let mut tmp = first.start;
        // for_each_vma_range(): every VMA that starts below `end`.
        while let Some(vma) = self.procs[&pid]
            .vmas
            .find_vma(nstart)
            .filter(|v| v.start < end)
            .cloned()
        {
            if vma.start != tmp {
                rule!(self.phys.hw, MprotectHole);
                return Err(Errno::ENOMEM); // a hole: earlier VMAs stay changed
            }
            // Each call passes all of r/w/x: those not given are cleared.
            let newflags = want | (vma.flags - VM_ACCESS_FLAGS);
            // newflags >> 4 puts VM_MAY* where VM_* are.
            let may = VmFlags::from_bits_retain(newflags.bits() >> 4);
            if !(newflags - may).intersection(VM_ACCESS_FLAGS).is_empty() {
                rule!(self.phys.hw, MprotectBeyondMay);
                return Err(Errno::EACCES);
            }
            tmp = vma.end.min(end);
            self.mprotect_fixup(pid, &vma, nstart, tmp, newflags, tlb)?;
            // vma_iter_end(): the end of the VMA now holding the range,
            // which a merge with the next VMA may have moved past `tmp`.
            tmp = self.procs[&pid]
                .vmas
                .find(tmp - PAGE_SIZE)
                .map_or(tmp, |v| v.end);
            nstart = tmp;
        }
        if tmp < end {
            rule!(self.phys.hw, MprotectPastLastVma);
            return Err(Errno::ENOMEM); // the range runs past the last VMA
        }
        Ok(())
    }

    /// Change the flags of `[start, end)` inside `vma`, splitting or merging
    /// VMAs, then the page tables. Linux: mm/mprotect.c mprotect_fixup().
    fn mprotect_fixup(
        &mut self,
        pid: Pid,
        vma: &Vma,
        start: u64,
        end: u64,
        newflags: VmFlags,
        tlb: &mut MmuGather,
    ) -> Result<(), Errno> {
        if vma.flags.contains(VmFlags::SEALED) {
            rule!(self.phys.hw, MprotectSealed);
            return Err(Errno::EPERM);
        }
        let old = vma.flags;
        if newflags == old {
            return Ok(());
        }
        // Commit charging (§8.1): a private mapping made writable is charged
        // (may_expand_vm() and the overcommit heuristic always pass in the
        // model); one made read-only is uncharged only while no anon_vma
        // exists (an unfaulted VMA).
        let mut newflags = newflags;
        if newflags.contains(VmFlags::WRITE) {
            // "Check space limits when area turns into data": RLIMIT_DATA
            // (RLIMIT_AS is the same test for both flag sets).
            let mm = &self.procs[&pid];
            let nrpages = (end - start) / crate::core::addr::PAGE_SIZE;
            if !mm.may_expand_vm(newflags, nrpages) && mm.may_expand_vm(old, nrpages) {
                rule!(self.phys.hw, MprotectRlimitData);
                return Err(Errno::ENOMEM);
            }
            let charged = VmFlags::ACCOUNT
                | VmFlags::WRITE
                | VmFlags::HUGETLB
                | VmFlags::SHARED
                | VmFlags::NORESERVE;
            if !old.intersects(charged) {
                newflags |= VmFlags::ACCOUNT;
            }
        } else if old.contains(VmFlags::ACCOUNT) && vma.anon_vma.is_none() {
            newflags -= VmFlags::ACCOUNT;
        }
        let max = self.cfg.max_map_count;
        let batched = !self.cfg.before.contains(Before::MPROTECT_PTE_BATCH);
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // vma_modify_flags(): merge or split; split_vma() refuses at
        // max_map_count, and a PMD cut by a new boundary is split first
        // (vma_adjust_trans_huge(), rule M6/P6).
        mm.modify_range_with(vma.start, start, end, newflags, &mut |mm, b, split| {
            if split && mm.map_count() >= max {
                rule!(mm.pt.hw, MprotectSplitMapCount);
                return Err(Errno::ENOMEM);
            }
            if let Some(slot) = mm.pmd_cut_by(b) {
                rule!(mm.pt.hw, MprotectSplitHugePmdAtBoundary);
                split_huge_pmd(mm, phys, slot);
            }
            Ok(())
        })?;
        let vma = mm.vmas.find(start).expect("the changed range").clone();
        // vma_wants_manual_pte_write_upgrade(): a private VMA with VM_WRITE.
        let cp = ChangeProt {
            prot: vm_page_prot(vma.flags),
            try_writable: vma.flags.contains(VmFlags::WRITE),
            batched,
            prot_numa: None,
            stretch: self.cfg.stretch_steps,
        };
        change_protection_in(mm, phys, &vma, start, end, cp, tlb);
        // "Private VM_LOCKED VMA becoming writable: trigger COW to avoid
        // major fault on access": populate_vma_page_range() write-faults
        // the range (nothing for VM_LOCKONFAULT; errors ignored). Checked
        // live: an mlocked PROT_READ range of zero pages becomes anon pages.
        let lock_bits = VmFlags::WRITE | VmFlags::SHARED | VmFlags::LOCKED;
        if old & lock_bits == VmFlags::LOCKED
            && newflags.contains(VmFlags::WRITE)
            && !newflags.contains(VmFlags::LOCKONFAULT)
        {
            rule!(self.phys.hw, MprotectLockedWritablePopulates);
            for page in crate::mm::mm::pages(start, end) {
                if self.fault(pid, page, true).is_err() {
                    break;
                }
            }
            // populate_vma_page_range() ends with lru_add_drain().
            self.phys.folio_batches.drain();
        }
        Ok(())
    }
}

/// What change_protection() applies: the VMA's `vm_page_prot`, whether PTEs
/// may become writable without a fault (MM_CP_TRY_CHANGE_WRITABLE), and
/// which PTE-level algorithm runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChangeProt {
    pub(crate) prot: LeafFlags,
    pub(crate) try_writable: bool,
    pub(crate) batched: bool,
    /// MM_CP_PROT_NUMA: a NUMA-hinting scan (crate::sys::numa), with the
    /// node of a single-threaded private VMA's task (`target_node`).
    pub(crate) prot_numa: Option<NumaTarget>,
    /// The batched path may take whole-stretch steps
    /// ([`change_stretch`]; `ModelConfig::stretch_steps`).
    pub(crate) stretch: bool,
}

/// What change_pte_range() knows for MM_CP_PROT_NUMA.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NumaTarget {
    /// `numa_node_id()` when the VMA is private and the mm has one user
    /// (always in the model: a process is one thread), else NUMA_NO_NODE.
    pub(crate) target_node: Option<u32>,
}

/// Walk `[start, end)` of `vma` one PMD slot at a time.
/// Linux: change_protection() → change_protection_range() → … →
/// change_pmd_range().
/// Returns the pages changed (PTEs rewritten, 512 per huge PMD), what
/// change_prot_numa() adds to `numa_pte_updates`. Every huge PMD changed
/// counts `numa_huge_pte_updates` — for mprotect too: change_pmd_range()
/// counts it whatever the caller (seen live: the counter moves on a
/// one-node machine with NUMA balancing off).
pub(crate) fn change_protection(
    mm: &mut Mm,
    phys: &mut PhysMem,
    vma: &Vma,
    start: u64,
    end: u64,
    cp: ChangeProt,
) -> u64 {
    // change_prot_numa(): a gather of its own.
    let mut tlb = MmuGather::new();
    let pages = change_protection_in(mm, phys, vma, start, end, cp, &mut tlb);
    tlb.finish(&mm.pt);
    pages
}

/// [`change_protection`] into the caller's gather (mprotect's one gather
/// for all VMAs), ending with the VMA's `tlb_end_vma()`.
/// Linux: mm/mprotect.c change_protection_range() (tlb_start_vma …
/// tlb_end_vma).
fn change_protection_in(
    mm: &mut Mm,
    phys: &mut PhysMem,
    vma: &Vma,
    start: u64,
    end: u64,
    cp: ChangeProt,
    tlb: &mut MmuGather,
) -> u64 {
    let mut c = Cursor::pmds(start, end);
    let mut pages = 0;
    let mut nr_huge_updates = 0;
    while let Some(q) = c.next(&mm.pt) {
        match q.item {
            PtItem::Huge { leaf, .. } => {
                if q.whole_pmd() {
                    if change_huge_pmd(mm, phys, vma, q.va, leaf, cp, tlb) {
                        pages += crate::core::addr::HPAGE_PMD_NR;
                        nr_huge_updates += 1;
                    }
                } else {
                    // A huge PMD only partly covered: split it, then go on at
                    // PTE level (__split_huge_pmd(), rule A4/P6).
                    rule!(mm.pt.hw, MprotectSplitHugePmdPartial);
                    split_huge_pmd(mm, phys, q.entry_start());
                    pages += change_pte_range(mm, phys, vma, q.segment(), cp, tlb);
                }
            }
            PtItem::PteTable(_) => {
                pages += change_pte_range(mm, phys, vma, q.segment(), cp, tlb);
            }
            _ => {}
        }
    }
    if nr_huge_updates > 0 {
        phys.stats
            .vm(VmEvent::NumaHugePteUpdates, nr_huge_updates as i64);
    }
    // tlb_end_vma(): on arm64 one flush over the gathered span, 4 KiB
    // stride if any PTE was recorded, else PMD stride
    // (tlb_get_unmap_size()); holes inside the span are flushed too. On
    // x86 (MERGE_VMAS) the flush waits for tlb_finish_mmu().
    tlb.end_vma(&mm.pt);
    pages
}

/// A PMD mapping wholly inside the range changes as one entry (rule A12);
/// the huge zero PMD stays read-only (vm_normal_page_pmd() gives no page).
/// A NUMA-hinting scan leaves the huge zero PMD and a PMD already
/// PROT_NONE alone (the PMD path has no shared-folio or target-node test;
/// the top-tier test never fires: every modelled node is top tier and
/// balancing is in NUMA_BALANCING_NORMAL mode). Returns whether the entry
/// was changed (the kernel's HPAGE_PMD_NR).
/// Linux: mm/huge_memory.c change_huge_pmd(), can_change_pmd_writable().
fn change_huge_pmd(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    slot: u64,
    old: Leaf,
    cp: ChangeProt,
    tlb: &mut MmuGather,
) -> bool {
    // pmd_lock()
    rule!(mm.pt.hw, MprotectChangeHugePmd);
    mm.pt.lock();
    if cp.prot_numa.is_some() {
        if Some(old.pfn) == phys.huge_zero || old.flags.contains(LeafFlags::PROTNONE) {
            return false;
        }
        // pmd_folio(), folio_nid(): the head page's line.
        mm.pt.hw.one(HwEvent::StructPageLine);
    }
    // pmdp_invalidate_ad().
    mm.pt.pmdp_invalidate_ad(slot);
    // pmd_modify().
    let mut entry = pte_modify(old, cp.prot);
    if cp.try_writable && !entry.write() {
        let exclusive_anon = Some(old.pfn) != phys.huge_zero
            && phys
                .folio_of(old.pfn)
                .is_some_and(|f| phys.anon_exclusive(f.head));
        if maybe_change_pte_writable(vma, entry) && exclusive_anon {
            rule!(mm.pt.hw, MprotectHugePmdMkwrite);
            entry.flags |= LeafFlags::WRITE; // pmd_mkwrite()
        }
    }
    mm.pt.set_pmd(slot, Entry::Leaf(entry));
    if mm.pt.pte_needs_flush(&old, &entry) {
        tlb.flush_pmd_range(slot, PMD_SIZE);
    }
    true
}

/// One PTE table's part of the range, by the algorithm `cp` selects.
/// Linux: mm/mprotect.c change_pte_range().
fn change_pte_range(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    seg: Segment,
    cp: ChangeProt,
    tlb: &mut MmuGather,
) -> u64 {
    let Segment { start, end } = seg;
    // pte_offset_map_lock(): the PMD read and the PTL;
    // flush_tlb_batched_pending() reads mm->tlb_flush_batched (no event).
    let _ptl = seg.lock_pte_table(&mm.pt);
    if cp.batched {
        change_pte_range_batched(mm, phys, vma, start, end, cp, tlb)
    } else {
        change_pte_range_per_pte(mm, phys, vma, start, end, cp, tlb)
    }
}

/// MM_CP_PROT_NUMA: whether a present PTE is left as it is, tested in the
/// kernel's order: already PROT_NONE (a hinting entry, or nothing to gain);
/// no normal page (the zero page); KSM or zone-device folios (the model has
/// none); a copy-on-write mapping whose folio may be DMA-pinned (never in
/// the model) or mapped by another process; a dirty file folio (the model
/// has no file folios); a folio already on the node of a single-threaded
/// private VMA's task; a top-tier node while NUMA_BALANCING_NORMAL is off
/// (never: every modelled node is top tier and the mode is NORMAL).
/// `large_line` counts the read of a large folio's second struct page
/// (`_large_mapcount`, `_pincount`), made once the test gets that far.
/// Linux: mm/mprotect.c prot_numa_skip() (6.17+; the same tests inline in
/// change_pte_range() before).
fn prot_numa_skip(
    pt: &PageTables,
    phys: &PhysMem,
    vma: &Vma,
    oldpte: Leaf,
    folio: Option<FolioRef>,
    numa: NumaTarget,
) -> bool {
    if oldpte.flags.contains(LeafFlags::PROTNONE) {
        return true; // "Avoid TLB flush if possible"
    }
    let Some(folio) = folio else {
        return true;
    };
    // is_cow_mapping(): private and VM_MAYWRITE (every private anon VMA).
    let cow = !vma.flags.contains(VmFlags::SHARED) && vma.flags.contains(VmFlags::MAYWRITE);
    if cow {
        if folio.is_large() {
            pt.hw.one(HwEvent::StructPageLine);
        }
        if phys.maybe_mapped_shared(folio) {
            return true;
        }
    }
    numa.target_node == Some(phys.node_of(folio.head))
}

/// Linux 6.17+: batches of PTEs mapping consecutive pages of one large
/// folio (rule A6). A batch never leaves the PTE table, the VMA or the
/// range (`max_nr`), nor the folio; it agrees on write, soft-dirty, uffd-wp,
/// PROT_NONE and (arm64) the contiguous bit. Non-present entries (swap
/// PTEs; the model has no migration entries) cost their load only: the
/// kernel rewrites a swap PTE only to change uffd-wp, which the model's
/// mprotect never does.
/// Linux: mm/mprotect.c change_pte_range() → mprotect_folio_pte_batch(),
/// modify_prot_start_ptes(), set_write_prot_commit_flush_ptes() /
/// prot_commit_flush_ptes().
fn change_pte_range_batched(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    start: u64,
    end: u64,
    cp: ChangeProt,
    tlb: &mut MmuGather,
) -> u64 {
    let arch = mm.pt.arch();
    // Runs of order-0 pages go through one per-segment loop where the
    // arch's PTE hooks are the generic ones, no NUMA scan asks for skips
    // and nobody records marks.
    let contpte = crate::mm::contpte_runs::applies(&mm.pt);
    let fast = ((arch.generic_pte_hooks() && arch.raw_pte().is_some()) || contpte)
        && cp.prot_numa.is_none()
        && !mm.pt.hw.observing();
    let mut try_fast = fast;
    let stretch = cp.stretch && cp.prot_numa.is_none() && !mm.pt.hw.observing();
    let mut addr = start;
    let mut pages = 0;
    while addr < end {
        if try_fast {
            let n = if contpte {
                let (prot, w, st) = (cp.prot, cp.try_writable, cp.stretch);
                let (n, steps) = crate::mm::contpte_runs::change_small_run(
                    mm, phys, vma, addr, end, prot, w, st, tlb,
                );
                (0..steps).for_each(|_| note_stretch_step());
                n
            } else {
                change_small_run(mm, phys, vma, addr, end, cp, tlb)
            };
            pages += n;
            addr += n * PAGE_SIZE;
            if addr >= end {
                break;
            }
        }
        // A stretch of identical large folios mapped alike: its first
        // batch through the code below, the others in one step.
        let whole = if stretch {
            stretch_at(&mm.pt, phys, addr, end)
        } else {
            None
        };
        let before = whole.map(|_| mm.pt.hw.tally());
        let Some(b) = change_batch(mm, phys, vma, addr, end, cp, tlb) else {
            addr += PAGE_SIZE;
            continue;
        };
        pages += b.pages;
        // After a large folio's batch the next entry is likely the next
        // batch of one: try the order-0 loop again only after a small one.
        try_fast = fast && b.folio.is_some_and(|f| !f.is_large());
        if let (Some((nr, k)), Some(before)) = (whole, before) {
            if b.nr == nr && b.pages == nr {
                if let Some(n) = change_stretch(mm, addr, nr, k, &before, b.flushed, tlb) {
                    pages += n;
                    addr += n * PAGE_SIZE;
                }
            }
        }
        addr += b.nr * PAGE_SIZE;
    }
    pages
}

/// What one pass of the batched loop did: the batch's entries, the pages
/// it changed (0 for a NUMA skip), its folio, and whether it asked for a
/// TLB flush of its range.
struct Batch {
    nr: u64,
    pages: u64,
    folio: Option<FolioRef>,
    flushed: bool,
}

/// One pass of the batched loop at `addr`: the batch of the present entry
/// there (`None`: not a present entry, skipped alone).
/// Linux: mm/mprotect.c change_pte_range() (one iteration of its loop).
fn change_batch(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    addr: u64,
    end: u64,
    cp: ChangeProt,
    tlb: &mut MmuGather,
) -> Option<Batch> {
    let arch = mm.pt.arch();
    // oldpte = ptep_get(pte): arm64 gathers young/dirty over a block.
    let Entry::Leaf(old) = mm.pt.pte(addr) else {
        return None;
    };
    let max_nr = (end - addr) / PAGE_SIZE;
    // vm_normal_page(): no page behind the zero page.
    let folio = if old.flags.contains(LeafFlags::SPECIAL) {
        None
    } else {
        phys.folio_of(old.pfn)
    };
    // vm_normal_page() + page_folio(): the page's compound_head line
    // (6.17+ does this for every present PTE, small folios included).
    if !old.flags.contains(LeafFlags::SPECIAL) {
        mm.pt.hw.one(HwEvent::StructPageLine);
        // An order-0 folio's line at mprotect's own price (the subset).
        if folio.is_some_and(|f| !f.is_large()) {
            mm.pt.hw.one(HwEvent::MprotectPageLine);
        }
    }
    // MM_CP_PROT_NUMA: a folio the scan leaves alone is skipped a
    // whole batch at a time (folio_pte_batch() with no FPB flags: the
    // skip tests depend on the folio, not on the PTE bits).
    if let Some(numa) = cp.prot_numa {
        if prot_numa_skip(&mm.pt, phys, vma, old, folio, numa) {
            let nr = mprotect_folio_pte_batch(&mm.pt, phys, folio, addr, old, max_nr, Fpb::empty());
            mm.pt.hw.mark_batch(addr, nr, "numa skip");
            return Some(Batch {
                nr,
                pages: 0,
                folio,
                flushed: false,
            });
        }
    }
    let fpb = Fpb::RESPECT_SOFT_DIRTY | Fpb::RESPECT_WRITE;
    let nr = mprotect_folio_pte_batch(&mm.pt, phys, folio, addr, old, max_nr, fpb);
    if nr > 1 {
        rule!(mm.pt.hw, MprotectPtesBatch);
        // The batch path's fixed work beyond one order-0 pass.
        // Linux: mm/mprotect.c change_pte_range() (nr_ptes > 1) →
        // folio_pte_batch_flags(), commit_anon_folio_batch().
        mm.pt.hw.one(HwEvent::MprotectLargeBatch);
    }
    mm.pt.hw.mark_batch(addr, nr, "protect");
    // The loop body's own work for this batch (vm_normal_folio(),
    // pte_modify(), the writable checks, the commit's calls).
    mm.pt.hw.one(HwEvent::MprotectPass);
    // The generic hooks (x86-64) walk the batch entry by entry, one
    // ptep_modify_prot_start() / ptep_modify_prot_commit() call each; the
    // entries after the first add their own round trip to the pass.
    // Linux: include/linux/pgtable.h modify_prot_start_ptes(),
    // modify_prot_commit_ptes() (arm64: arch/arm64/mm/mmu.c, batched).
    if nr > 1 && arch.generic_pte_hooks() {
        mm.pt.hw.add(HwEvent::ModifyProtPte, nr - 1);
    }
    let oldpte = modify_prot_start_ptes(&mut mm.pt, addr, nr);
    let ptent = pte_modify(oldpte, cp.prot);
    if cp.try_writable && !ptent.write() {
        set_write_prot_commit_flush_ptes(&mut mm.pt, phys, vma, folio, addr, ptent, nr);
    } else {
        prot_commit_flush_ptes(&mut mm.pt, phys, addr, ptent, nr, 0, false);
    }
    // prot_commit_flush_ptes(): tlb_flush_pte_range() when
    // pte_needs_flush(oldpte, committed) for some sub-batch.
    let upgraded = cp.try_writable
        && !ptent.write()
        && folio.is_some()
        && maybe_change_pte_writable(vma, ptent)
        && {
            // Some page of the batch is exclusive: the first, or the
            // first run of non-exclusive pages ends inside the batch.
            let (first, run) = phys.anon_exclusive_run(ptent.pfn, nr);
            first || run < nr
        };
    let mut committed = ptent;
    if upgraded {
        committed.flags |= LeafFlags::WRITE;
    }
    let flushed = arch.pte_needs_flush(&oldpte, &committed);
    if flushed {
        tlb.flush_pte_range(addr, nr * PAGE_SIZE);
    }
    Some(Batch {
        nr,
        pages: nr,
        folio,
        flushed,
    })
}

/// Whether the batched loop at `addr` starts a stretch of `k >= 2`
/// batches that would each see the same state: the entry there maps the
/// head page of a large folio of `nr` pages at a virtual address aligned
/// to the folio (so on arm64 each batch covers whole contpte blocks, or
/// none when the folio is smaller than a block), the PTEs of `k` such
/// folios in a row (inside the range and the table) are one run of equal
/// bits over consecutive frames, and the `k` folios are one run of
/// identical folios (the same state page by page: exclusivity, mapcounts,
/// order). Reads nothing the kernel would count. `Some((nr, k))`.
fn stretch_at(pt: &PageTables, phys: &PhysMem, addr: u64, end: u64) -> Option<(u64, u64)> {
    let Entry::Leaf(l) = pt.pte_peek(addr) else {
        return None;
    };
    if l.flags.contains(LeafFlags::SPECIAL) {
        return None;
    }
    let f = phys.folio_of(l.pfn).filter(|f| f.is_large())?;
    let nr = f.nr_pages();
    if f.head != l.pfn || !addr.is_multiple_of(nr * PAGE_SIZE) {
        return None;
    }
    // arm64: batches of folios smaller than a contpte block differ by
    // their place in it (modify_prot_start_ptes() → get_and_clear_ptes()
    // checks an end of the batch for a block to unfold only where that
    // end falls inside a block: contpte_try_unfold_partial()), so only
    // batches of whole blocks repeat.
    if let Some(c) = pt.arch().cont_ptes() {
        if nr < c as u64 {
            return None;
        }
    }
    let folios = (phys.large_run_end(l.pfn)? - l.pfn.0) / nr;
    let max = ((end - addr) / PAGE_SIZE).min(folios * nr);
    let (_, span) = pt.uniform_pte_span(addr, max)?;
    let k = span / nr;
    (k >= 2).then_some((nr, k))
}

/// The other `k - 1` batches of a stretch ([`stretch_at`]) whose first
/// batch of `nr` entries at `addr` the loop has just changed: every batch
/// would have found the first one's old state a few frames on and left
/// its new state a few frames on, so the entries after it are written as
/// the continuation of its run; each batch counts what the first one
/// counted (events, kernel calls, rule hits since `before`), added `k - 1`
/// times at once, and asks for the same flush (the gather keeps only the
/// range's ends). Returns the entries changed after the first batch, or
/// `None` (nothing done: the loop goes on batch by batch) when the first
/// batch's new entries are not one run.
fn change_stretch(
    mm: &mut Mm,
    addr: u64,
    nr: u64,
    k: u64,
    before: &crate::core::hw::HwTally,
    flushed: bool,
    tlb: &mut MmuGather,
) -> Option<u64> {
    let rest = (k - 1) * nr;
    let next = addr + nr * PAGE_SIZE;
    mm.pt.extend_pte_run(addr, nr, rest)?;
    mm.pt.hw.add_since(before, k - 1);
    if flushed {
        tlb.flush_pte_range(next, rest * PAGE_SIZE);
    }
    note_stretch_step();
    Some(rest)
}

/// Count one whole-stretch step of mprotect ([`change_stretch`], and the
/// order-0 stretches of [`change_small_run`]).
pub(crate) fn note_stretch_step() {
    crate::core::diag::took(crate::core::diag::Step::MprotectStretch);
}

/// The per-segment form of the batched loop above for a run of present
/// PTEs mapping order-0 anon pages from `addr` (at most to `end`): each is
/// what one pass of that loop does with a one-entry batch (a small
/// folio's batch is 1) — `ptep_get()`, the compound_head line,
/// `modify_prot_start_ptes()` (`ptep_get_and_clear()`), the write upgrade
/// of an exclusive page, `modify_prot_commit_ptes()` (`set_ptes()`), the
/// flush range — with the table borrowed once, the run's events added in
/// one step each and one `tlb_flush_pte_range()` over the entries that
/// need it (the gather keeps only the range's ends). Only without
/// MM_CP_PROT_NUMA and for an arch whose PTE hooks are the generic ones
/// (x86-64): the stores below are theirs. Returns the entries changed (0:
/// `addr` is not such an entry).
/// Linux: mm/mprotect.c change_pte_range() (nr == 1).
fn change_small_run(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    addr: u64,
    end: u64,
    cp: ChangeProt,
    tlb: &mut MmuGather,
) -> u64 {
    let arch = mm.pt.arch();
    let raw = arch.raw_pte().expect("checked by the caller");
    let (mut t, i0) = mm.pt.pte_table(addr);
    let max = ((end - addr) / PAGE_SIZE) as usize;
    let (mut n, mut exclusive_lines, mut upgrades) = (0, 0u64, 0u32);
    let mut flush: Option<(u64, u64)> = None;
    // What entries with one set of attribute bits become, worked out for
    // the first of them and reused for the next ones.
    let mut memo: Option<crate::mm::small_runs::SmallChange> = None;
    while n < max {
        let i = i0 + n;
        let e = t.raw(i);
        if !raw.is_present(e) || e & raw.special != 0 {
            break;
        }
        // A stretch of one run of entries with equal bits over consecutive
        // order-0 pages of equal exclusivity: each entry would take the
        // same pass below (the same memo, the same upgrade decision), so
        // the stretch is rewritten as one run and counted at once.
        let stretch = match cp.stretch {
            true => crate::mm::small_runs::order0_stretch(
                &t,
                phys,
                raw.pfn_mask,
                raw.pfn_shift,
                i,
                max - n,
            ),
            false => None,
        };
        // folio_of() finding an order-0 folio, and its PageAnonExclusive
        // (read below only when the upgrade is tried): one memmap read.
        let Some(exclusive) = phys.small_anon_exclusive(Pfn(raw.pfn(e))) else {
            break;
        };
        let old_bits = e & !raw.pfn_mask;
        if memo.as_ref().is_none_or(|c| c.old_bits != old_bits) {
            {
                let Entry::Leaf(old) = t.peek(i) else { break };
                let bits_of = |l: Leaf| {
                    arch.encode_leaf(
                        1,
                        Leaf {
                            flags: l.flags - LeafFlags::CONT,
                            ..l
                        },
                    ) & !raw.pfn_mask
                };
                memo = Some(crate::mm::small_runs::SmallChange::of(
                    arch,
                    vma,
                    old,
                    old_bits,
                    cp.prot,
                    cp.try_writable,
                    bits_of,
                ));
            }
        }
        let c = memo.as_ref().expect("set above");
        if let Some((len, step)) = stretch {
            let m = len as u64;
            let k = usize::from(c.try_upgrade && exclusive);
            if c.try_upgrade {
                exclusive_lines += m;
                if exclusive {
                    upgrades += len as u32;
                }
            }
            t.write_affine(i, len, (e & raw.pfn_mask) | c.bits[k], step, Run::PRESENT);
            if c.flush[k] {
                let (va, last) = (t.va(i), t.va(i + len - 1));
                flush = Some(flush.map_or((va, last), |(lo, _)| (lo, last)));
            }
            n += len;
            note_stretch_step();
            continue;
        }
        let mut upgraded = false;
        if c.try_upgrade {
            // commit_anon_folio_batch(): PageAnonExclusive() of the page.
            exclusive_lines += 1;
            if exclusive {
                upgrades += 1;
                upgraded = true;
            }
        }
        let k = usize::from(upgraded);
        t.store_raw(i, (e & raw.pfn_mask) | c.bits[k]);
        if c.flush[k] {
            let va = t.va(i);
            flush = Some(flush.map_or((va, va), |(lo, _)| (lo, va)));
        }
        n += 1;
    }
    let n = n as u64;
    crate::mm::small_runs::account_small_change(
        &mm.pt.hw,
        n,
        exclusive_lines,
        upgrades,
        flush,
        tlb,
    );
    n
}

/// 1 for the zero page and small folios, else a folio_pte_batch() run with
/// `fpb`: FPB_RESPECT_SOFT_DIRTY | FPB_RESPECT_WRITE to change (rule B7),
/// none to skip (MM_CP_PROT_NUMA).
/// Linux: mm/mprotect.c mprotect_folio_pte_batch().
fn mprotect_folio_pte_batch(
    pt: &PageTables,
    phys: &PhysMem,
    folio: Option<FolioRef>,
    addr: u64,
    pte: Leaf,
    max_nr: u64,
    fpb: Fpb,
) -> u64 {
    match folio {
        Some(f) if f.is_large() => {
            // folio_pte_batch_flags() reads folio_nr_pages() (second line).
            pt.hw.one(HwEvent::StructPageLine);
            folio_pte_batch(pt, phys, addr, pte, max_nr, fpb).nr
        }
        _ => 1,
    }
}

/// Private VMA made (or kept) writable: a batch of an anonymous folio is
/// committed in sub-batches of equal AnonExclusive state, the exclusive ones
/// writable (rule A7). Anything else is committed read-only.
/// Linux: mm/mprotect.c set_write_prot_commit_flush_ptes(),
/// commit_anon_folio_batch(), page_anon_exclusive_sub_batch().
fn set_write_prot_commit_flush_ptes(
    pt: &mut PageTables,
    phys: &PhysMem,
    vma: &Vma,
    folio: Option<FolioRef>,
    addr: u64,
    ptent: Leaf,
    nr: u64,
) {
    let set_write = maybe_change_pte_writable(vma, ptent) && folio.is_some();
    if !set_write {
        prot_commit_flush_ptes(pt, phys, addr, ptent, nr, 0, false);
        return;
    }
    // commit_anon_folio_batch(): PageAnonExclusive() of every page; the
    // first is the page page_folio() read in this pass (its own
    // compound_head, the same 64-byte line): an L1 hit.
    pt.hw
        .struct_page_lines_batch(nr, folio.is_some_and(|f| f.is_large()));
    pt.hw.one(HwEvent::StructPageLineHot);
    let mut idx = 0;
    while idx < nr {
        // page_anon_exclusive_sub_batch(): the run of equal state, found
        // with one folio lookup (the batch lies inside the folio).
        let (exclusive, len) = phys.anon_exclusive_run(ptent.pfn.add(idx), nr - idx);
        if exclusive {
            rule!(pt.hw, MprotectBatchWriteUpgrade);
        }
        prot_commit_flush_ptes(pt, phys, addr, ptent, len, idx, exclusive);
        if len < nr {
            rule!(pt.hw, MprotectBatchMixedExclusive);
        }
        idx += len;
    }
}

/// Write `nr` PTEs from entry `idx` of a batch, writable if `set_write`.
/// (The TLB-flush bookkeeping, pte_needs_flush() → tlb_flush_pte_range(),
/// changes nothing the model shows.) Linux: mm/mprotect.c
/// prot_commit_flush_ptes().
fn prot_commit_flush_ptes(
    pt: &mut PageTables,
    phys: &PhysMem,
    addr: u64,
    ptent: Leaf,
    nr: u64,
    idx: u64,
    set_write: bool,
) {
    let mut pte = Leaf {
        pfn: ptent.pfn.add(idx),
        flags: ptent.flags,
    };
    if set_write {
        pte.flags |= LeafFlags::WRITE; // pte_mkwrite()
    }
    modify_prot_commit_ptes(pt, phys, addr + idx * PAGE_SIZE, pte, nr);
}

/// modify_prot_start_ptes(): the arch hook clears the batch and gathers
/// young/dirty (arm64 unfolds only blocks covered partly).
fn modify_prot_start_ptes(pt: &mut PageTables, addr: u64, nr: u64) -> Leaf {
    pt.modify_prot_start_ptes(addr, nr)
}

/// modify_prot_commit_ptes(): the arch hook writes the batch back
/// (arm64 set_ptes() paints CONT on fully covered aligned blocks and, for
/// nr == 1, may fold the block: rule C2).
fn modify_prot_commit_ptes(pt: &mut PageTables, phys: &PhysMem, addr: u64, pte: Leaf, nr: u64) {
    pt.modify_prot_commit_ptes(addr, pte, nr, phys);
}

/// Linux ≤ 6.16: every present PTE on its own. ptep_modify_prot_start() is
/// a single-entry get-and-clear (arm64 unfolds a folded block first), the
/// write upgrade is decided per PTE by can_change_pte_writable(), and
/// ptep_modify_prot_commit() is set_pte_at() (arm64 may fold when it writes
/// the last entry of a block). Linux v6.16 mm/mprotect.c change_pte_range().
fn change_pte_range_per_pte(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    start: u64,
    end: u64,
    cp: ChangeProt,
    tlb: &mut MmuGather,
) -> u64 {
    let arch = mm.pt.arch();
    let mut pages = 0;
    for addr in crate::mm::mm::pages(start, end) {
        // oldpte = ptep_get(pte); pte_present(oldpte)
        let Entry::Leaf(first) = mm.pt.pte(addr) else {
            continue;
        };
        // MM_CP_PROT_NUMA (≤ 6.16): the skip tests for every PTE, each
        // skipping that one entry; vm_normal_folio() (the compound_head
        // line) only once the entry is not PROT_NONE.
        if let Some(numa) = cp.prot_numa {
            let folio = if first.flags.contains(LeafFlags::PROTNONE) {
                None
            } else if first.flags.contains(LeafFlags::SPECIAL) {
                None
            } else {
                mm.pt.hw.one(HwEvent::StructPageLine);
                phys.folio_of(first.pfn)
            };
            if prot_numa_skip(&mm.pt, phys, vma, first, folio, numa) {
                mm.pt.hw.mark_batch(addr, 1, "numa skip");
                continue;
            }
        }
        pages += 1;
        rule!(mm.pt.hw, MprotectPtePerEntry);
        mm.pt.hw.mark_batch(addr, 1, "protect");
        // The loop body's own work for this entry.
        mm.pt.hw.one(HwEvent::MprotectPass);
        let oldpte = modify_prot_start_ptes(&mut mm.pt, addr, 1); // ptep_modify_prot_start()
        let mut ptent = pte_modify(oldpte, cp.prot);
        if cp.try_writable && !ptent.write() {
            // can_change_pte_writable(): vm_normal_page() (the head line)
            // and PageAnonExclusive() (the page's own line).
            if maybe_change_pte_writable(vma, ptent) && !ptent.flags.contains(LeafFlags::SPECIAL) {
                mm.pt.hw.add(HwEvent::StructPageLine, 2);
                // An order-0 folio is its own head: PageAnon() reads the
                // line (at mprotect's own price) and PageAnonExclusive()
                // re-reads it (an L1 hit). A large folio's page and head
                // are two lines.
                if phys.folio_of(ptent.pfn).is_some_and(|f| !f.is_large()) {
                    mm.pt.hw.one(HwEvent::MprotectPageLine);
                    mm.pt.hw.one(HwEvent::StructPageLineHot);
                }
            }
            if can_change_pte_writable(vma, ptent, phys) {
                rule!(mm.pt.hw, MprotectPteWriteUpgrade);
                ptent.flags |= LeafFlags::WRITE;
            }
        }
        modify_prot_commit_ptes(&mut mm.pt, phys, addr, ptent, 1); // ptep_modify_prot_commit()
        if arch.pte_needs_flush(&oldpte, &ptent) {
            tlb.flush_pte_range(addr, PAGE_SIZE);
        }
    }
    pages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observe::PageState;
    use crate::core::pgtable::PmdSlot;
    use crate::{Advice, ArchKind, MapFlags, ModelConfig, ThpKnob, ThpMode};

    const B: u64 = 0x7f00_0000_0000;
    const P: u64 = PAGE_SIZE;
    const RW: Prot = Prot::READ.union(Prot::WRITE);

    fn model(arch: ArchKind) -> Model {
        Model::new(ModelConfig::for_arch(arch))
    }

    fn map(m: &mut Model, addr: u64, len: u64, prot: Prot) {
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, addr, len, prot, f).unwrap();
    }

    fn maps(m: &Model) -> Vec<(u64, u64, String)> {
        m.mm(1)
            .unwrap()
            .vmas
            .iter()
            .map(|v| ((v.start - B) / P, (v.end - B) / P, v.flags.perms()))
            .collect()
    }

    fn flags_at(m: &Model, addr: u64) -> VmFlags {
        m.mm(1).unwrap().vmas.find(addr).unwrap().flags
    }

    fn leaf(m: &Model, addr: u64) -> Leaf {
        match m.mm(1).unwrap().pt.pte(addr) {
            Entry::Leaf(l) => l,
            e => panic!("{addr:#x}: {e:?}"),
        }
    }

    /// A model of `arch` with `before`, THPs of `order` set to `mode` and
    /// `len` bytes mapped read-write at `B`.
    fn thp_model(arch: ArchKind, before: Before, order: u8, mode: ThpMode, len: u64) -> Model {
        let mut m = model(arch);
        m.set_before(before);
        m.set_thp(ThpKnob::Size(order), mode).unwrap();
        map(&mut m, B, len, RW);
        m
    }

    fn both(f: impl Fn(ArchKind, Before)) {
        for arch in ArchKind::ALL {
            for before in [Before::empty(), Before::MPROTECT_PTE_BATCH] {
                f(arch, before);
            }
        }
    }

    #[test]
    fn errno_order() {
        let mut m = model(ArchKind::X86_64);
        map(&mut m, B, 4 * P, RW);
        let junk = Prot::from_bits_retain(0x10);
        let grows = Prot::from_bits_retain(PROT_GROWSDOWN | PROT_GROWSUP);
        assert_eq!(m.mprotect(1, B, 0, grows), Err(Errno::EINVAL));
        assert_eq!(m.mprotect(1, B + 1, 0, junk), Err(Errno::EINVAL));
        assert_eq!(m.mprotect(1, B, 0, junk), Ok(()));
        assert_eq!(m.mprotect(1, B, u64::MAX, junk), Err(Errno::ENOMEM));
        assert_eq!(
            m.mprotect(1, B, u64::MAX - P, Prot::READ),
            Err(Errno::ENOMEM)
        );
        assert_eq!(m.mprotect(1, B - 8 * P, P, junk), Err(Errno::EINVAL));
        assert_eq!(m.mprotect(1, B - 8 * P, P, Prot::READ), Err(Errno::ENOMEM));
        let sem = Prot::from_bits_retain(PROT_SEM | 1);
        assert_eq!(m.mprotect(1, B, P, sem), Ok(()));
        let down = Prot::from_bits_retain(PROT_GROWSDOWN | 1);
        let up = Prot::from_bits_retain(PROT_GROWSUP | 1);
        assert_eq!(m.mprotect(1, B, P, down), Err(Errno::EINVAL));
        assert_eq!(m.mprotect(1, B, P, up), Err(Errno::EINVAL));
        assert_eq!(m.mprotect(1, B - P, 2 * P, up), Err(Errno::ENOMEM));
        // GROWSDOWN starts at the first VMA, so a leading hole is EINVAL.
        assert_eq!(m.mprotect(1, B - P, 2 * P, down), Err(Errno::EINVAL));
        // Only the PROT_SEM call changed anything (to r--): r-- then rw-.
        assert_eq!(maps(&m), vec![(0, 1, "r--p".into()), (1, 4, "rw-p".into())]);
        m.check_invariants().unwrap();
    }

    #[test]
    fn split_then_merge_and_account_rules() {
        // mremap.md §11 #31: unfaulted piece loses `ac`, a faulted one keeps it.
        for faulted in [false, true] {
            let mut m = model(ArchKind::X86_64);
            map(&mut m, B, 10 * P, RW);
            if faulted {
                m.write(1, B, 1).unwrap();
            }
            m.mprotect(1, B + 3 * P, 4 * P, Prot::READ).unwrap();
            assert_eq!(
                maps(&m),
                vec![
                    (0, 3, "rw-p".into()),
                    (3, 7, "r--p".into()),
                    (7, 10, "rw-p".into())
                ]
            );
            assert_eq!(flags_at(&m, B + 3 * P).contains(VmFlags::ACCOUNT), faulted);
            m.mprotect(1, B + 3 * P, 4 * P, RW).unwrap();
            assert_eq!(maps(&m), vec![(0, 10, "rw-p".into())]);
            assert!(flags_at(&m, B).contains(VmFlags::ACCOUNT));
            m.check_invariants().unwrap();
        }
    }

    #[test]
    fn noreserve_never_gains_account() {
        let mut m = model(ArchKind::X86_64);
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED | MapFlags::NORESERVE;
        m.mmap(1, B, 4 * P, RW, f).unwrap();
        m.mprotect(1, B, 4 * P, Prot::READ).unwrap();
        m.mprotect(1, B, 4 * P, RW).unwrap();
        assert!(!flags_at(&m, B).contains(VmFlags::ACCOUNT));
        // A PROT_NONE mapping made writable is charged.
        map(&mut m, B + 8 * P, 4 * P, Prot::empty());
        assert!(!flags_at(&m, B + 8 * P).contains(VmFlags::ACCOUNT));
        m.mprotect(1, B + 8 * P, 4 * P, RW).unwrap();
        assert!(flags_at(&m, B + 8 * P).contains(VmFlags::ACCOUNT));
    }

    #[test]
    fn hole_stops_with_enomem_after_changing_earlier_vmas() {
        // mremap.md §11 #34 (mprotect half).
        let mut m = model(ArchKind::X86_64);
        map(&mut m, B, 10 * P, RW);
        m.munmap(1, B + 8 * P, P).unwrap();
        assert_eq!(
            m.mprotect(1, B + 6 * P, 4 * P, Prot::READ),
            Err(Errno::ENOMEM)
        );
        assert_eq!(
            maps(&m),
            vec![
                (0, 6, "rw-p".into()),
                (6, 8, "r--p".into()),
                (9, 10, "rw-p".into())
            ]
        );
        // A range starting in a hole changes nothing; one ending past the
        // last VMA changes the VMAs and reports ENOMEM.
        assert_eq!(
            m.mprotect(1, B + 8 * P, 2 * P, Prot::READ),
            Err(Errno::ENOMEM)
        );
        assert_eq!(maps(&m)[2], (9, 10, "rw-p".into()));
        assert_eq!(
            m.mprotect(1, B + 9 * P, 3 * P, Prot::READ),
            Err(Errno::ENOMEM)
        );
        assert_eq!(maps(&m)[2], (9, 10, "r--p".into()));
    }

    #[test]
    fn map_count_limit_leaves_the_first_split() {
        let mut m = Model::new(ModelConfig {
            max_map_count: 3,
            ..ModelConfig::default()
        });
        map(&mut m, B, 10 * P, RW);
        map(&mut m, B + 20 * P, P, Prot::READ);
        // One VMA short of the limit: the split at start succeeds, the one at
        // the end fails (split_vma()); flags are untouched.
        assert_eq!(
            m.mprotect(1, B + 3 * P, 4 * P, Prot::READ),
            Err(Errno::ENOMEM)
        );
        assert_eq!(
            maps(&m),
            [
                (0, 3, "rw-p".into()),
                (3, 10, "rw-p".into()),
                (20, 21, "r--p".into())
            ]
        );
        // At the limit: a change of a whole VMA or a merge needs no new VMA.
        assert_eq!(m.mprotect(1, B + 9 * P, P, Prot::READ), Err(Errno::ENOMEM));
        m.mprotect(1, B + 3 * P, 7 * P, Prot::READ).unwrap();
        m.mprotect(1, B, 3 * P, Prot::READ).unwrap();
        assert_eq!(maps(&m), [(0, 10, "r--p".into()), (20, 21, "r--p".into())]);
    }

    #[test]
    fn exclusive_pages_become_writable_without_a_fault() {
        both(|arch, before| {
            let mut m = thp_model(arch, before, 4, ThpMode::Always, 32 * P);
            m.access_range(1, B, 32 * P, true, None).unwrap();
            m.mprotect(1, B, 32 * P, Prot::READ).unwrap();
            assert!(!leaf(&m, B).write());
            m.write(1, B, 1).unwrap_err();
            m.mprotect(1, B, 32 * P, RW).unwrap();
            for k in 0..32 {
                let l = leaf(&m, B + k * P);
                assert!(l.write(), "{arch:?} {before:?} page {k}");
                assert_eq!(l.flags.contains(LeafFlags::CONT), arch == ArchKind::Arm64);
            }
            let PageState::Anon(a) = m.observe_pages(1, B, B + P)[0].state.clone() else {
                panic!()
            };
            assert!(a.anon_exclusive && a.mmap_exclusive && a.order == 4);
            m.check_invariants().unwrap();
        });
    }

    #[test]
    fn shared_pages_and_zero_pages_stay_read_only() {
        both(|arch, before| {
            let mut m = thp_model(arch, before, 4, ThpMode::Always, 32 * P);
            m.write(1, B, 1).unwrap(); // a 64K folio at B
            m.read(1, B + 16 * P).unwrap(); // zero page
            let child = m.fork(1).unwrap();
            m.exit(child).unwrap();
            // Parent pages: not exclusive any more (copied at fork) though
            // mapped once; the zero page has no struct page.
            m.mprotect(1, B, 32 * P, Prot::READ).unwrap();
            m.mprotect(1, B, 32 * P, RW).unwrap();
            assert!(!leaf(&m, B).write());
            assert!(!leaf(&m, B + 16 * P).write());
            // W4: the write fault reuses the page (mapcount 1, no other mm).
            m.write(1, B + 3 * P, 7).unwrap();
            assert!(leaf(&m, B + 3 * P).write());
            assert!(!leaf(&m, B + 4 * P).write());
            m.check_invariants().unwrap();
        });
    }

    #[test]
    fn mixed_exclusivity_splits_the_batch() {
        both(|arch, before| {
            let mut m = thp_model(arch, before, 4, ThpMode::Always, 16 * P);
            m.write(1, B, 1).unwrap();
            let child = m.fork(1).unwrap();
            m.exit(child).unwrap();
            m.mprotect(1, B, 16 * P, Prot::READ).unwrap();
            // Pages 4..8 regain exclusivity (W4 large: reuse, one page each).
            for k in 4..8 {
                m.mprotect(1, B, 16 * P, RW).unwrap();
                m.write(1, B + k * P, k).unwrap();
                m.mprotect(1, B, 16 * P, Prot::READ).unwrap();
            }
            m.mprotect(1, B, 16 * P, RW).unwrap();
            for k in 0..16 {
                let l = leaf(&m, B + k * P);
                assert_eq!(l.write(), (4..8).contains(&k), "{arch:?} {before:?} {k}");
                assert!(!l.flags.contains(LeafFlags::CONT));
            }
            m.check_invariants().unwrap();
        });
    }

    #[test]
    fn prot_none_entries_stay_present_and_fault() {
        both(|arch, before| {
            let mut m = thp_model(arch, before, 4, ThpMode::Always, 32 * P);
            m.access_range(1, B, 16 * P, true, Some(5)).unwrap();
            m.read(1, B + 16 * P).unwrap();
            m.mprotect(1, B, 32 * P, Prot::empty()).unwrap();
            let l = leaf(&m, B);
            assert!(l.flags.contains(LeafFlags::PROTNONE) && !l.write());
            assert!(leaf(&m, B + 16 * P).flags.contains(LeafFlags::PROTNONE));
            assert!(m.read(1, B).is_err());
            assert!(m.access_range(1, B + 16 * P, P, false, None).is_err());
            assert!(matches!(
                m.observe_pages(1, B, B + P)[0].state,
                PageState::Anon(_)
            ));
            // Half of the folio back to read-write.
            m.mprotect(1, B + 8 * P, 8 * P, RW).unwrap();
            assert_eq!(m.read(1, B + 8 * P), Ok(5));
            assert!(leaf(&m, B + 8 * P).write());
            assert!(m.read(1, B + 7 * P).is_err());
            m.mprotect(1, B, 32 * P, Prot::READ).unwrap();
            assert_eq!(m.read(1, B), Ok(5));
            assert_eq!(m.read(1, B + 16 * P), Ok(0));
            m.check_invariants().unwrap();
        });
    }

    #[test]
    fn partial_pmd_thp_is_split_and_stays_one_folio() {
        both(|arch, before| {
            let mut m = thp_model(arch, before, 9, ThpMode::Inherit, 2 << 20);
            m.madvise(1, B, 2 << 20, Advice::HugePage).unwrap();
            m.write(1, B, 1).unwrap();
            m.mprotect(1, B + (1 << 20), 1 << 20, Prot::READ).unwrap();
            let obs = m.observe(1, "t");
            assert_eq!(obs.maps.len(), 2);
            assert_eq!(obs.stats["vmstat/thp_split_pmd"], 1);
            assert!(leaf(&m, B).write());
            assert!(!leaf(&m, B + (1 << 20)).write());
            for p in &obs.pages {
                let PageState::Anon(a) = &p.state else {
                    panic!()
                };
                assert!(a.order == 9 && !a.pmd_mapped && a.mmap_exclusive);
            }
            m.check_invariants().unwrap();
        });
    }

    #[test]
    fn whole_pmd_changes_as_one_entry_and_huge_zero_stays_read_only() {
        both(|arch, before| {
            let mut m = thp_model(arch, before, 9, ThpMode::Inherit, 4 << 20);
            m.madvise(1, B, 4 << 20, Advice::HugePage).unwrap();
            m.write(1, B, 1).unwrap();
            m.read(1, B + (2 << 20)).unwrap(); // huge zero PMD
            m.mprotect(1, B, 4 << 20, Prot::READ).unwrap();
            m.mprotect(1, B, 4 << 20, RW).unwrap();
            let pt = &m.mm(1).unwrap().pt;
            let (PmdSlot::Leaf(thp), PmdSlot::Leaf(hz)) = (pt.pmd(B), pt.pmd(B + (2 << 20))) else {
                panic!()
            };
            assert!(thp.write() && !hz.write());
            assert_eq!(m.observe(1, "t").stats["vmstat/thp_split_pmd"], 0);
            // PROT_NONE huge zero PMD, then a partial unmap splits it into
            // zero PTEs that still fault.
            m.mprotect(1, B, 4 << 20, Prot::empty()).unwrap();
            m.munmap(1, B + (3 << 20), 1 << 20).unwrap();
            assert!(leaf(&m, B + (2 << 20)).flags.contains(LeafFlags::PROTNONE));
            assert!(m.access_range(1, B + (2 << 20), P, false, None).is_err());
            m.check_invariants().unwrap();
        });
    }

    #[test]
    fn arm64_batch_keeps_blocks_folded_per_pte_refolds() {
        for before in [Before::empty(), Before::MPROTECT_PTE_BATCH] {
            let mut m = thp_model(ArchKind::Arm64, before, 5, ThpMode::Always, 32 * P);
            m.write(1, B, 1).unwrap(); // 128K folio: two folded blocks
                                       // Split the VMA inside the second block: the batch ends mid-block.
            m.mprotect(1, B, 24 * P, Prot::READ).unwrap();
            for k in 0..32 {
                let l = leaf(&m, B + k * P);
                assert_eq!(l.write(), k >= 24);
                assert_eq!(l.flags.contains(LeafFlags::CONT), k < 16, "{before:?} {k}");
            }
            // Making the rest read-only: the batched path paints no block
            // it covers partly; the per-PTE path folds at the block's end.
            m.mprotect(1, B + 24 * P, 8 * P, Prot::READ).unwrap();
            let folded = leaf(&m, B + 16 * P).flags.contains(LeafFlags::CONT);
            assert_eq!(folded, before == Before::MPROTECT_PTE_BATCH);
            m.check_invariants().unwrap();
        }
    }

    #[test]
    fn arm64_prot_none_blocks_keep_cont_until_rewritten() {
        for before in [Before::empty(), Before::MPROTECT_PTE_BATCH] {
            let mut m = thp_model(ArchKind::Arm64, before, 4, ThpMode::Always, 16 * P);
            m.write(1, B, 1).unwrap();
            m.mprotect(1, B, 16 * P, Prot::empty()).unwrap();
            // Batched: set_ptes(16) paints CONT on the PROT_NONE entries.
            // Per-PTE: the last entry's commit does not fold invalid entries.
            let cont = leaf(&m, B).flags.contains(LeafFlags::CONT);
            assert_eq!(cont, before.is_empty());
            // Half back: the other half keeps its (ignored) CONT bit.
            m.mprotect(1, B, 8 * P, Prot::READ).unwrap();
            assert!(!leaf(&m, B).flags.contains(LeafFlags::CONT));
            assert_eq!(
                leaf(&m, B + 8 * P).flags.contains(LeafFlags::CONT),
                before.is_empty()
            );
            m.check_invariants().unwrap();
            m.mprotect(1, B + 8 * P, 8 * P, Prot::READ).unwrap();
            let refolded = leaf(&m, B).flags.contains(LeafFlags::CONT);
            assert_eq!(refolded, !before.is_empty());
            m.check_invariants().unwrap();
        }
    }
}
