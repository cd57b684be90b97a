//! The PTE protection rules mprotect and NUMA-hinting faults share:
//! `pte_modify()` and whether an entry may become writable without a write
//! fault. mm/memory.c do_numa_page() calls mprotect.c's
//! can_change_pte_writable() the same way.
//!
//! Linux: arch/*/include/asm/pgtable.h pte_modify(); mm/mprotect.c
//! maybe_change_pte_writable(), can_change_private_pte_writable().

use crate::core::arch::{Leaf, LeafFlags};
use crate::core::folio::PhysMem;
use crate::core::vma::{VmFlags, Vma};

/// CONFIG_MEM_SOFT_DIRTY is off on the modelled machines, so no VMA tracks
/// soft-dirty and pte_needs_soft_dirty_wp() is always false.
const MEM_SOFT_DIRTY: bool = false;

/// Keep the frame and the bits pte_modify() preserves (x86 _PAGE_CHG_MASK:
/// accessed, dirty, special, soft-dirty, uffd-wp; arm64 likewise, hardware
/// dirtiness kept as software dirty), take the permission bits from `prot`.
/// The arm64 contiguous bit is left to the contpte layer, which repaints it.
/// Linux: arch/*/include/asm/pgtable.h pte_modify() / pmd_modify().
pub fn pte_modify(old: Leaf, prot: LeafFlags) -> Leaf {
    let kept = LeafFlags::YOUNG
        | LeafFlags::DIRTY
        | LeafFlags::SPECIAL
        | LeafFlags::SOFT_DIRTY
        | LeafFlags::UFFD_WP;
    Leaf {
        pfn: old.pfn,
        flags: (old.flags & kept) | prot,
    }
}

/// The page-independent half of the write-upgrade decision: the VMA is
/// writable (the caller checks), the entry is accessible, and neither
/// soft-dirty nor uffd-wp tracking needs a write fault.
/// Linux: mm/mprotect.c maybe_change_pte_writable() (6.17+).
pub fn maybe_change_pte_writable(vma: &Vma, pte: Leaf) -> bool {
    if pte.flags.contains(LeafFlags::PROTNONE) {
        return false;
    }
    // pte_needs_soft_dirty_wp(): vma_soft_dirty_enabled() && !pte_soft_dirty().
    let soft_dirty_enabled = MEM_SOFT_DIRTY && !vma.flags.contains(VmFlags::SOFTDIRTY);
    if soft_dirty_enabled && !pte.flags.contains(LeafFlags::SOFT_DIRTY) {
        return false;
    }
    // userfaultfd_pte_wp(): a uffd-wp VMA and a write-protected entry.
    !(vma.flags.contains(VmFlags::UFFD_WP) && pte.flags.contains(LeafFlags::UFFD_WP))
}

/// Writable without a fault: only exclusive anonymous pages of a private
/// VMA (rule M6, A7). The zero page has no normal page (vm_normal_page()
/// returns NULL), so it stays read-only.
/// Linux: mm/mprotect.c can_change_private_pte_writable(); before 6.17
/// can_change_pte_writable() with the same private-mapping rule.
pub fn can_change_pte_writable(vma: &Vma, pte: Leaf, phys: &PhysMem) -> bool {
    maybe_change_pte_writable(vma, pte)
        && !pte.flags.contains(LeafFlags::SPECIAL)
        && phys.folio_of(pte.pfn).is_some()
        && phys.anon_exclusive(pte.pfn)
}
