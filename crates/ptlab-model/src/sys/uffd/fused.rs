//! The common one-page steps of UFFDIO_MOVE and UFFDIO_COPY, fused: each
//! PTE table the step touches is found once (through the walk cache) and
//! then read and written by slab slot, and the kernel's loads, locks and
//! references are counted in one place — the same events, kernel-function
//! calls and rule hits as the general step ([`super::move_pages`],
//! [`super::mfill`]), which every other case takes
//! ([`crate::ModelConfig::uffd_fused`] off: always; test
//! `uffd_fused_prop`).
//!
//! The MOVE step fused here: batched (6.18), one page left in the range,
//! both PTE tables present, the destination PTE none, the source PTE a
//! present order-0 exclusive anonymous page that is not the zero page (on
//! arm64 not in a contiguous block). The COPY step: the destination PTE
//! table present; its PTE read and install take that one table.
//!
//! Linux: mm/userfaultfd.c move_pages(), move_pages_ptes(),
//! move_present_ptes(); mfill_atomic(), mfill_atomic_pte_copy(),
//! mfill_atomic_install_pte().

use crate::core::addr::PAGE_SIZE;
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::folio::PhysMem;
use crate::core::hw::{HwEvent, KCall};
use crate::core::pgtable::index;
use crate::core::vma::Vma;
use crate::mm::mm::Mm;
use crate::types::errno::Errno;

/// One page of UFFDIO_MOVE from `src_addr` to `dst_addr` as
/// `move_step()` → `move_pages_ptes()` → `move_present_ptes_batched()`
/// does it when the batch ends after the first page (`src_addr` is the
/// range's last page): `None` (nothing done, nothing counted) when the
/// step is not the common case, else its result. `moved` is the
/// destination PTE of the moved page (`move_pages::moved_pte`).
pub(super) fn move_one_page(
    mm: &mut Mm,
    phys: &PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
    moved: fn(&Vma, Leaf) -> Leaf,
) -> Option<Result<u64, Errno>> {
    let pt = &mut mm.pt;
    // §7.3.1–2: both PMDs hold PTE tables (mm_find_pmd(), mm_alloc_pmd()
    // find them; nothing is allocated).
    let src_slot = pt.pte_tbl_slot(src_addr)?;
    let dst_slot = pt.pte_tbl_slot(dst_addr)?;
    // §7.4.2: the destination strictly empty.
    if pt.pte_raw_in(dst_slot, dst_addr) != 0 {
        return None;
    }
    // The source PTE: a present page, not the zero page, and on arm64 not
    // a contiguous block's leaf (its read gathers the block: the general
    // step reads it through `pte()`).
    let Entry::Leaf(read) = pt.arch().decode(1, pt.pte_raw_in(src_slot, src_addr)) else {
        return None;
    };
    if read.valid_cont() || read.flags.contains(LeafFlags::SPECIAL) {
        return None;
    }
    // §7.4.5: an exclusive order-0 folio (a large one is split first).
    let folio = phys.folio_of(read.pfn)?;
    if folio.is_large() || !phys.anon_exclusive(folio.head) {
        return None;
    }
    // What move_pages_ptes() counts up to the move: the destination's
    // pte_none() load, the source's ptep_get() and its re-read under both
    // locks (a load and a ptep_get() call each), both PTE tables' PMD load
    // and PTL, the folio's struct page line and its four reference /
    // lock atomics (folio_get, folio_trylock, folio_unlock, folio_put),
    // and the anon_vma lock.
    let hw = &pt.hw;
    hw.add(HwEvent::PteLoad, 3);
    hw.call_n(KCall::PtepGet, 2);
    hw.add(HwEvent::PmdLoad, 2);
    hw.add(HwEvent::PtlLock, 2);
    hw.one(HwEvent::StructPageLine);
    hw.add(HwEvent::FolioRefAtomic, 4);
    hw.one(HwEvent::AnonVmaLock);
    // move_present_ptes(): ptep_get_and_clear(), folio_move_anon_rmap(),
    // set_pte_at() through the arch's hooks, on the tables found above.
    let arch = pt.arch();
    let old = arch.ptep_get_and_clear(&mut pt.pte_table_in(src_slot, src_addr), index(1, src_addr));
    let Some(old) = old else {
        return Some(Err(Errno::EAGAIN)); // not reached: present above
    };
    pt.hw.one(HwEvent::RmapUpdate);
    arch.set_ptes(
        &mut pt.pte_table_in(dst_slot, dst_addr),
        index(1, dst_addr),
        moved(dst_vma, old),
        1,
        phys,
    );
    pt.hw.mark_batch(src_addr, 1, "uffd move");
    // flush_tlb_range() of the one page.
    pt.flush_tlb_range(src_addr, src_addr + PAGE_SIZE, PAGE_SIZE);
    Some(Ok(PAGE_SIZE))
}

/// The slab slot of the PTE table covering `dst` when the table exists
/// and `dst`'s PTE is none — the common case of UFFDIO_COPY's install,
/// which [`copy_install`] then takes; `None` otherwise (the general step
/// reads the entry: a marker is overwritten, any other entry is EEXIST).
/// No event is counted.
pub(super) fn copy_dst_none(mm: &Mm, dst: u64) -> Option<u32> {
    let slot = mm.pt.pte_tbl_slot(dst)?;
    (mm.pt.pte_raw_in(slot, dst) == 0).then_some(slot)
}

/// UFFDIO_COPY's one page into the none PTE at `dst` of the PTE table at
/// slab slot `slot` ([`copy_dst_none`]): the pte_none() load and
/// pte_offset_map_lock()'s PMD load and PTL, a new order-0 folio holding
/// the copy (`tag`, `rest`) mapped as a fresh exclusive page with one
/// reference, in one memmap write
/// ([`PhysMem::alloc_small_anon_mapped`]) with the events
/// `alloc_anon_folio()`, the copy, `add_rmap_ptes()` and `ref_add()`
/// count, RSS, then `set_pte_at()` of `flags` through the arch's hook.
/// ENOMEM (after the lock, as the general step) when no frame is free.
pub(super) fn copy_install(
    mm: &mut Mm,
    phys: &mut PhysMem,
    slot: u32,
    dst: u64,
    (tag, rest): (u64, Option<crate::core::content::PageRest>),
    flags: LeafFlags,
) -> Result<(), Errno> {
    mm.pt.hw.one(HwEvent::PteLoad);
    mm.pt.pte_offset_map_lock_found();
    let pfn = phys.alloc_small_anon_mapped(tag).ok_or(Errno::ENOMEM)?;
    // alloc_anon_folio(order 0); the copy into it; folio_add_new_anon_rmap()
    // (one struct page line); the mapping's reference.
    phys.hw.folio_alloc(0);
    phys.hw.one(HwEvent::PageCopy);
    phys.contents.set(pfn.0, rest);
    phys.hw.struct_page_lines_batch(1, false);
    phys.hw.one(HwEvent::FolioRefAtomic);
    mm.rss_anon += 1;
    let arch = mm.pt.arch();
    arch.set_ptes(
        &mut mm.pt.pte_table_in(slot, dst),
        index(1, dst),
        Leaf { pfn, flags },
        1,
        phys,
    );
    Ok(())
}
