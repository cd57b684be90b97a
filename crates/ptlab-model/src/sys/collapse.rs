//! MADV_COLLAPSE of private anonymous memory: each whole 2 MiB of the range
//! that is PTE-mapped becomes one new PMD-mapped THP holding the old
//! contents (zero where nothing was mapped), whatever the THP knobs say.
//!
//! Linux: mm/khugepaged.c madvise_collapse(), hpage_collapse_scan_pmd(),
//! collapse_huge_page(), __collapse_huge_page_isolate(),
//! __collapse_huge_page_copy_succeeded(), madvise_collapse_errno();
//! include/linux/huge_mm.h vma_thp_disabled() (a forced collapse counts as
//! advice). Only `cc->is_khugepaged == false` matters here: the
//! max_ptes_none/swap/shared limits do not apply. Checked live on 6.18.44:
//! tests/scenarios/ff-s18-madv-collapse.ptl (fork-fault.md §8 S18).
//!
//! Not modelled: khugepaged itself (the diff names it when it collapses a
//! range in the background, docs/divergences.md H3), file and shmem
//! collapse, mTHP collapse orders below PMD.

use crate::core::addr::HPAGE_PMD_NR;
use crate::core::addr::{PAGE_SIZE, PMD_SIZE};
use crate::core::arch::{Entry, LeafFlags};
use crate::core::pgtable::{Cursor, PmdSlot, PtItem};
use crate::core::rules::rule;
use crate::core::stats::VmEvent;
use crate::core::vma::{dirty_anon_prot, VmFlags, Vma};
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::Pid;

/// The scan results the model can reach (enum scan_result).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    Succeed,
    PmdMapped,
    /// No PMD table (mm_find_pmd() found none): the walk goes on.
    PmdNull,
    /// A PMD table whose entry for the slot is none (check_pmd_state()):
    /// not in madvise_collapse()'s list of results to go on after.
    PmdNone,
    PageCount,
    PteUffdWp,
    ExceedNonePte,
    AllocFail,
    Fail,
}

impl Scan {
    /// madvise_collapse(): results after which the walk goes on to the
    /// next 2 MiB (the rest end it).
    fn continues(self) -> bool {
        matches!(
            self,
            Scan::Succeed | Scan::PmdMapped | Scan::PmdNull | Scan::PageCount | Scan::PteUffdWp
        )
    }

    /// Linux: mm/khugepaged.c madvise_collapse_errno().
    fn errno(self) -> Errno {
        match self {
            Scan::AllocFail => Errno::ENOMEM,
            Scan::ExceedNonePte => Errno::EBUSY,
            Scan::PageCount => Errno::EAGAIN,
            _ => Errno::EINVAL,
        }
    }
}

impl Model {
    /// MADV_COLLAPSE over `[start, end)` of `vma` (the part of the madvise
    /// range inside it). Linux: mm/khugepaged.c madvise_collapse().
    pub(crate) fn madvise_collapse(
        &mut self,
        pid: Pid,
        vma: &Vma,
        start: u64,
        end: u64,
    ) -> Result<(), Errno> {
        // thp_vma_allowable_order(TVA_FORCED_COLLAPSE, PMD_ORDER): not
        // VM_NOHUGEPAGE, not disabled for the whole process (a forced
        // collapse counts as advice against PR_THP_DISABLE_EXCEPT_ADVISED),
        // some 2 MiB ending at or before vm_end fits the VMA, and the VMA
        // has an anon_vma (never faulted: EINVAL even for a range with no
        // whole 2 MiB; found by `ptlab fuzz --seed 20261129`, case 131).
        let mm = &self.procs[&pid];
        let last = (vma.end - PMD_SIZE.min(vma.end)) & !(PMD_SIZE - 1);
        let fits = vma.end - vma.start >= PMD_SIZE && last >= vma.start;
        if vma.flags.contains(VmFlags::NOHUGEPAGE)
            || mm.thp_disable.disables(true)
            || !fits
            || vma.anon_vma.is_none()
        {
            rule!(self.phys.hw, CollapseEinvalVma);
            return Err(Errno::EINVAL);
        }
        // lru_add_drain_all(): every folio is on an LRU for the scan.
        self.phys.folio_batches.drain();
        let hstart = start.div_ceil(PMD_SIZE) * PMD_SIZE;
        let hend = end & !(PMD_SIZE - 1);
        let mut thps = 0u64;
        let mut last_fail = Scan::Fail;
        let mut slot = hstart;
        while slot < hend {
            let mut r = self.collapse_scan_pmd(pid, vma, slot);
            if r == Scan::Succeed {
                r = self.collapse_huge_page(pid, slot);
            }
            // Linux: mm/khugepaged.c madvise_collapse(): each PMD's scan result.
            match r {
                Scan::Succeed => rule!(self.phys.hw, CollapseSucceed),
                Scan::PmdMapped => rule!(self.phys.hw, CollapsePmdMapped),
                Scan::PmdNull | Scan::PmdNone => rule!(self.phys.hw, CollapsePmdNone),
                Scan::PageCount => rule!(self.phys.hw, CollapsePageCount),
                Scan::PteUffdWp => rule!(self.phys.hw, CollapsePteUffdWp),
                Scan::ExceedNonePte => rule!(self.phys.hw, CollapseExceedNonePte),
                Scan::AllocFail => rule!(self.phys.hw, CollapseAllocFail),
                Scan::Fail => rule!(self.phys.hw, CollapseFail),
            }
            match r {
                Scan::Succeed | Scan::PmdMapped => thps += 1,
                _ => last_fail = r,
            }
            if !r.continues() {
                break;
            }
            slot += PMD_SIZE;
        }
        // `thps == (hend - hstart) >> HPAGE_PMD_SHIFT` in unsigned
        // arithmetic: a range inside one 2 MiB that does not start on its
        // boundary has hend < hstart, the difference wraps, and the call
        // fails with the initial SCAN_FAIL (EINVAL; checked live). One
        // that starts on the boundary (hend == hstart) succeeds.
        let want = hend.wrapping_sub(hstart) / PMD_SIZE;
        if thps == want {
            Ok(())
        } else {
            Err(last_fail.errno())
        }
    }

    /// Linux: mm/khugepaged.c hpage_collapse_scan_pmd() with
    /// `cc->is_khugepaged == false`.
    fn collapse_scan_pmd(&mut self, pid: Pid, vma: &Vma, slot: u64) -> Scan {
        let uffd_armed = vma.uffd_ctx.is_some();
        let mm = &self.procs[&pid];
        match mm.pt.pmd(slot) {
            // find_pmd_or_thp_or_none(): mm_find_pmd() fails without a PMD
            // table (SCAN_PMD_NULL); check_pmd_state() reports a none
            // entry of an existing table as SCAN_PMD_NONE, which ends the
            // walk with EINVAL (checked live on 6.18.44: `madvise 4M
            // collapse` over an empty then a populated 2 MiB collapses
            // nothing; found by `ptlab fuzz --seed 20261129`, case 1689).
            PmdSlot::None if mm.pt.table_at(slot, 2).is_some() => return Scan::PmdNone,
            PmdSlot::None => return Scan::PmdNull,
            PmdSlot::Leaf(_) => return Scan::PmdMapped,
            PmdSlot::Table(_) => {}
        }
        let phys = &self.phys;
        // The PTE scan: a PTE-level cursor over the slot (no event).
        let mut c = Cursor::ptes(slot, slot + PMD_SIZE);
        while let Some(q) = c.next(&mm.pt) {
            match q.item {
                // A guard marker is a non-present (swap-type) entry: the
                // scan counts it like a swap PTE; the swap-in after the THP
                // is allocated fails on it (collapse_huge_page()).
                PtItem::NonPresent(Entry::Marker(_)) => {}
                PtItem::None { .. } => {
                    if uffd_armed {
                        return Scan::ExceedNonePte;
                    }
                }
                PtItem::NonPresent(Entry::Swap(s)) => {
                    if s.uffd_wp {
                        return Scan::PteUffdWp;
                    }
                }
                PtItem::Pte(l) => {
                    if l.pfn == phys.zero_pfn {
                        if uffd_armed {
                            return Scan::ExceedNonePte;
                        }
                        continue;
                    }
                    if l.flags.contains(LeafFlags::UFFD_WP) {
                        return Scan::PteUffdWp;
                    }
                    let Some(folio) = phys.folio_of(l.pfn) else {
                        return Scan::Fail;
                    };
                    // is_refcount_suitable(): only the mappings (and the
                    // swap cache) hold the folio.
                    let expected = phys.folio_mapcount(folio) + phys.swapcache_refs(folio);
                    if phys.refcount(folio) != expected {
                        return Scan::PageCount;
                    }
                }
                PtItem::NonPresent(_) | PtItem::Huge { .. } | PtItem::PteTable(_) => {
                    return Scan::Fail
                }
            }
        }
        // The `!writable` (SCAN_PAGE_RO) refusal is khugepaged's alone:
        // checked live, MADV_COLLAPSE of a range holding only zero-page
        // entries, or only pages write-protected by a fork, succeeds.
        Scan::Succeed
    }

    /// Allocate the THP, swap in what is swapped out, copy every page
    /// (zeros for none and zero-page entries), drop the old mappings and
    /// map the THP with one PMD, depositing the emptied PTE table.
    /// Linux: mm/khugepaged.c collapse_huge_page(),
    /// __collapse_huge_page_swapin(), __collapse_huge_page_copy_succeeded().
    fn collapse_huge_page(&mut self, pid: Pid, slot: u64) -> Scan {
        // alloc_charge_folio(): counted whether or not the collapse then
        // succeeds.
        // (thp_collapse_alloc_failed is not one of the counters kept.)
        let Some(new) = self.phys.alloc_anon_folio(crate::core::addr::Order::PMD) else {
            return Scan::AllocFail;
        };
        self.phys.stats.vm(VmEvent::ThpCollapseAlloc, 1);
        // __collapse_huge_page_swapin(): do_swap_page() on a guard marker
        // is VM_FAULT_SIGSEGV, and the collapse fails (SCAN_FAIL: EINVAL),
        // the THP just allocated freed again (checked live: the counter
        // moved).
        if crate::mm::marker::any_guard(&self.procs[&pid], slot, slot + PMD_SIZE) {
            self.phys.free_unused_folio(new);
            return Scan::Fail;
        }
        let swapped: Vec<u64> = self.procs[&pid]
            .pt
            .swap_ptes(slot, slot + PMD_SIZE)
            .into_iter()
            .map(|(va, _)| va)
            .collect();
        for va in swapped {
            // do_swap_page() as a read fault.
            if self.fault(pid, va, false).is_err() {
                self.phys.free_unused_folio(new);
                return Scan::Fail;
            }
        }
        // __collapse_huge_page_isolate() re-checks every page (after the
        // swap-ins); what it refuses the scan already refused, except a
        // page the swap-in left shared with the swap cache.
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // __collapse_huge_page_copy(): a PTE-level cursor over the slot;
        // none, zero-page and non-present entries give zeros.
        let mut c = Cursor::ptes(slot, slot + PMD_SIZE);
        while let Some(q) = c.next(&mm.pt) {
            let src = match q.item {
                PtItem::Pte(l) if l.pfn != phys.zero_pfn => Some(l.pfn),
                _ => None,
            };
            for va in crate::mm::mm::pages(q.va, q.end) {
                let dst = new.head.add((va - slot) / PAGE_SIZE);
                match src {
                    Some(s) => phys.copy_page(s, dst),
                    None => phys.set_tag(dst, 0),
                }
            }
        }
        // Drop the old mappings: rmap, references, deferred split and the
        // RSS, as a zap does (the page-table walk's own events differ:
        // pmdp_collapse_flush() is one PMD clear and flush).
        let mut tlb = crate::core::tlb::MmuGather::new();
        crate::mm::zap::zap_range_unflushed(mm, phys, &mut tlb, slot, slot + PMD_SIZE);
        // pmdp_collapse_flush() is the only flush: what the zap gathered is
        // the model's bookkeeping, not the kernel's.
        tlb.discard();
        mm.pt.flush_tlb_range(slot, slot + PMD_SIZE, PMD_SIZE);
        let table = mm.pt.detach_pte_table(slot).expect("PTE table");
        mm.deposited.insert(slot, table);
        // folio_add_new_anon_rmap(RMAP_EXCLUSIVE), folio_add_lru_vma(),
        // set_pmd_at() of a dirty (and, for a writable VMA, writable) PMD
        // made from the VMA's vm_page_prot: PROT_NONE in a PROT_NONE VMA,
        // so a later access still faults (SIGSEGV; checked live: fuzz
        // seed 20261208, tests/scenarios/cov-12-collapse-prot-none.ptl).
        // Linux: mm/khugepaged.c collapse_huge_page() → mk_huge_pmd(,
        // vma->vm_page_prot), maybe_pmd_mkwrite(pmd_mkdirty()).
        let vma = mm.vmas.find(slot).cloned().expect("VMA");
        phys.add_rmap_pmd(new, mm.pid, true);
        phys.ref_add(new, 1);
        mm.rss_anon += HPAGE_PMD_NR;
        let flags = dirty_anon_prot(vma.flags);
        mm.pt.set_pmd(
            slot,
            Entry::Leaf(crate::core::arch::Leaf {
                pfn: new.head,
                flags,
            }),
        );
        if vma.flags.contains(VmFlags::LOCKED) {
            phys.folio_batches.add(new.head, true, true);
        } else {
            phys.folio_batches.lru_add(new.head, true);
        }
        phys.deferred_split_folio(new, false);
        Scan::Succeed
    }
}
