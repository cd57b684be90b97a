//! Splitting a large anonymous folio wherever it is mapped: the rmap walk
//! over every mm that maps it, PMD splits, the metadata split, and the
//! zero-page remap of unused subpages. It sits above the folio records
//! (crate::core::folio) because it edits page tables of every process.
//!
//! Linux: mm/huge_memory.c split_folio() / __folio_split(), mm/migrate.c
//! try_to_map_unused_to_zeropage().

use crate::core::addr::{Pfn, HPAGE_PMD_NR, PAGE_SIZE};
use crate::core::folio::{FolioKind, FolioRef, PhysMem};
use crate::core::rules::rule;
use crate::mm::mm::Mm;
use crate::types::errno::Errno;
use crate::types::Pid;
use std::collections::BTreeMap;

/// Split the anonymous large `folio` into order-0 folios wherever it is
/// mapped: the rmap walk finds its mappings in every mm that maps it
/// (`hint` = a process, an address and the page of the folio mapped there
/// lets the walk try the linear placement before scanning page tables), a
/// PMD mapping is split into PTEs (`thp_split_pmd`), an arm64 contiguous
/// block is unfolded (the PTE clear of the unmap gathers its young/dirty
/// bits into every entry), and then the folio metadata is split
/// (`PhysMem::split_large_meta()`). PTE values are otherwise unchanged: the
/// migration entries the kernel installs meanwhile keep write, young,
/// dirty, soft-dirty and uffd-wp. A model folio holds no extra pins, so the
/// split never fails; the huge zero folio cannot be split (EBUSY).
/// Linux: mm/huge_memory.c split_folio() → __folio_split(): unmap_folio()
/// (try_to_migrate() with TTU_SPLIT_HUGE_PMD), __split_unmapped_folio(),
/// remap_page(); arch/arm64/mm/contpte.c contpte_try_unfold().
pub fn split_folio(
    procs: &mut BTreeMap<Pid, Mm>,
    phys: &mut PhysMem,
    folio: FolioRef,
    hint: Option<(Pid, u64, Pfn)>,
) -> Result<(), Errno> {
    let Some(l) = phys.large(folio.head) else {
        return Ok(()); // order 0: nothing to split
    };
    if l.kind != FolioKind::Anon {
        return Err(Errno::EBUSY);
    }
    rule!(phys.hw, SplitLargeFolio);
    let nr = folio.nr_pages();
    let in_folio = |pfn: Pfn| pfn.0 >= folio.head.0 && pfn.0 < folio.head.0 + nr;
    // Only PMD mappings: unmap_folio() turns each PMD straight into
    // migration entries (split_huge_pmd_address(freeze)), so no page is
    // ever unmapped while another stays PTE-mapped (checked live: MADV_PAGEOUT
    // of a whole PMD THP moves no split_deferred).
    let pmd_only = l.nr_pages_mapped == 0 && l.entire_mapcount > 0;
    // `large()` gave a copy of the record: its list is ours to walk.
    let mm_maps = l.mm_maps;
    // Every PTE that maps a page of the folio once PMDs are split.
    let mut mapped: Vec<(Pid, u64)> = Vec::new();
    for (pid, want) in mm_maps {
        let Some(mm) = procs.get_mut(&pid) else {
            continue;
        };
        // The rmap walk: (level, address) of every mapping in this mm.
        let mut found: Vec<(u8, u64)> = Vec::new();
        if let Some((_, va, pfn)) = hint.filter(|h| h.0 == pid && in_folio(h.2)) {
            let base = va.wrapping_sub((pfn.0 - folio.head.0) * PAGE_SIZE);
            for k in 0..nr {
                let a = base.wrapping_add(k * PAGE_SIZE);
                match mm.pt.pmd(a) {
                    crate::core::pgtable::PmdSlot::Leaf(p) if p.pfn == folio.head && k == 0 => {
                        found.push((2, a));
                    }
                    crate::core::pgtable::PmdSlot::Table(_) => {
                        if let crate::core::arch::Entry::Leaf(e) = mm.pt.pte_raw(a) {
                            if e.pfn == folio.head.add(k) {
                                found.push((1, a));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        if found.len() as u32 != want {
            found = mm
                .pt
                .leaves(0, u64::MAX)
                .into_iter()
                .filter(|&(_, level, leaf)| {
                    if level == 2 {
                        leaf.pfn == folio.head
                    } else {
                        in_folio(leaf.pfn)
                    }
                })
                .map(|(va, level, _)| (level, va))
                .collect();
        }
        let mut ptes = Vec::new();
        for (level, va) in found {
            if level == 2 {
                crate::mm::zap::split_huge_pmd(mm, phys, va);
                ptes.extend((0..HPAGE_PMD_NR).map(|k| va + k * PAGE_SIZE));
            } else {
                ptes.push(va);
            }
        }
        mapped.extend(ptes.iter().map(|&va| (pid, va)));
        for va in ptes {
            if let crate::core::arch::Entry::Leaf(e) = mm.pt.pte_raw(va) {
                if e.valid_cont() {
                    // contpte_try_unfold() with the gathered bits.
                    if let crate::core::arch::Entry::Leaf(g) = mm.pt.pte(va) {
                        mm.pt.modify_pte(va, g);
                    }
                }
            }
        }
    }
    // unmap_folio(): try_to_migrate() unmaps the pages one PTE at a time;
    // the first page to lose its last mapping while another page is still
    // mapped queues the folio as partially mapped (deferred_split_folio():
    // split_deferred +1, thp_deferred_split_page +1 for PMD size; checked
    // live), which the split then undoes.
    if let Some(l) = phys.large(folio.head) {
        if l.nr_pages_mapped >= 2 && !l.partially_mapped && !pmd_only {
            phys.deferred_split_folio(folio, true);
        }
    }
    phys.split_large_meta(folio);
    remap_unused_to_zeropage(procs, phys, &mapped);
    Ok(())
}

/// After a split, every PTE mapping a subpage that holds only zeros is
/// replaced by a read-only mapping of the shared zero page and the page is
/// freed, unless the VMA is VM_LOCKED (a userfaultfd registration does not
/// stop it: found by `ptlab fuzz --seed 930930`, case 931, MADV_PAGEOUT in a
/// MISSING-registered range). The new entry
/// keeps the old one's soft-dirty and uffd-wp bits. Checked live on
/// 6.18.44 (MADV_COLD / MADV_PAGEOUT splitting a partly written mTHP maps
/// its untouched pages to the zero page). Linux: mm/huge_memory.c
/// __folio_split() → remap_page(RMP_USE_SHARED_ZEROPAGE) → mm/migrate.c
/// remove_migration_pte() → try_to_map_unused_to_zeropage().
fn remap_unused_to_zeropage(
    procs: &mut BTreeMap<Pid, Mm>,
    phys: &mut PhysMem,
    mapped: &[(Pid, u64)],
) {
    use crate::core::arch::{Entry, Leaf, LeafFlags};
    use crate::core::vma::VmFlags;
    for &(pid, va) in mapped {
        let Some(mm) = procs.get_mut(&pid) else {
            continue;
        };
        let Entry::Leaf(old) = mm.pt.pte_raw(va) else {
            continue;
        };
        if old.flags.contains(LeafFlags::SPECIAL) || !phys.page_is_zero(old.pfn) {
            continue;
        }
        let Some(vma) = mm.vmas.find(va) else {
            continue;
        };
        if vma.flags.contains(VmFlags::LOCKED) {
            continue;
        }
        let exec = vma.flags.contains(VmFlags::EXEC);
        let Some(f) = phys.folio_of(old.pfn) else {
            continue;
        };
        let keep = LeafFlags::SOFT_DIRTY | LeafFlags::UFFD_WP | LeafFlags::PROTNONE;
        let mut flags = (old.flags & keep) | LeafFlags::SPECIAL | LeafFlags::YOUNG;
        if exec {
            flags |= LeafFlags::EXEC;
        }
        mm.pt.clear_ptes(va, 1);
        mm.pt.set_ptes(
            va,
            Leaf {
                pfn: phys.zero_pfn,
                flags,
            },
            1,
            phys,
        );
        phys.remove_rmap_ptes(f, old.pfn, 1, pid);
        mm.rss_anon -= 1;
        phys.ref_sub(f, 1);
    }
}

/// What [`madvise_free_huge_pmd`] did with a PMD-mapped folio.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FreePmd {
    /// Marked lazyfree (the range covers the whole PMD): nothing more to
    /// do in this slot.
    Done,
    /// Left alone: the huge zero page, or a folio another mm maps.
    Skipped,
    /// Split (the range covers the PMD in part): walk the PTEs.
    Split,
}

/// MADV_FREE of the PMD mapping at `addr` (slot range `[addr, next)`):
/// the huge zero page and a folio another mm maps are left alone; a range
/// not covering the whole PMD splits the folio (split_folio(), which
/// remaps its untouched pages to the zero page) for the PTE walk; a whole
/// one clears the folio's PG_dirty, makes the PMD old and clean
/// (pmdp_invalidate(), tlb_remove_pmd_tlb_entry()) and marks the folio
/// lazyfree. Linux: mm/huge_memory.c madvise_free_huge_pmd().
pub fn madvise_free_huge_pmd(
    procs: &mut BTreeMap<Pid, Mm>,
    phys: &mut PhysMem,
    tlb: &mut crate::core::tlb::MmuGather,
    pid: Pid,
    addr: u64,
    next: u64,
) -> FreePmd {
    use crate::core::addr::PMD_SIZE;
    use crate::core::arch::LeafFlags;
    use crate::core::pgtable::PmdSlot;
    let PmdSlot::Leaf(leaf) = procs[&pid].pt.pmd(addr) else {
        return FreePmd::Skipped;
    };
    if Some(leaf.pfn) == phys.huge_zero {
        return FreePmd::Skipped;
    }
    let folio = phys.folio_of(leaf.pfn).expect("PMD maps a folio");
    if phys.mapped_by_other_mm(folio, pid) {
        return FreePmd::Skipped;
    }
    if next - addr != PMD_SIZE {
        rule!(phys.hw, MadviseFreeSplitsPmdThp);
        let base = addr & !(PMD_SIZE - 1);
        let _ = split_folio(procs, phys, folio, Some((pid, base, folio.head)));
        return FreePmd::Split;
    }
    rule!(phys.hw, MadviseFreeHugePmd);
    phys.set_folio_dirty(folio, false);
    if leaf.flags.intersects(LeafFlags::YOUNG | LeafFlags::DIRTY) {
        procs.get_mut(&pid).expect("pid").pt.pmd_mkold_mkclean(addr);
        tlb.flush_pmd_range(addr, PMD_SIZE);
    }
    folio_mark_lazyfree(phys, folio);
    FreePmd::Done
}

/// folio_mark_lazyfree(): an anon folio that is still swap-backed and not
/// in the swap cache goes to the lazyfree batch (mm/swap.c
/// folio_batch_add_and_move(lru_lazyfree), which clears PG_swapbacked when
/// the batch is moved; a large folio moves it at once). A folio already
/// queued or lazyfree, or not on an LRU (6.18: `!folio_test_lru()`, e.g.
/// still in the LRU-add batch), is left alone.
pub fn folio_mark_lazyfree(phys: &mut PhysMem, folio: FolioRef) {
    if phys.lazyfree(folio) || phys.in_swapcache(folio) || phys.folio_batches.off_lru(folio.head) {
        return;
    }
    phys.set_lazyfree(folio, true);
    phys.folio_batches
        .lazyfree_add(folio.head, folio.is_large());
}
