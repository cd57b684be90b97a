//! NUMA-hinting faults: the fault a NUMA-hinting (PROT_NONE) entry in an
//! accessible VMA takes, the `numa_hint_faults*` counters, the placement
//! decision and the migration of a misplaced folio to the faulting task's
//! node. The scan that makes the hinting entries is crate::sys::numa (on
//! mprotect's change_protection()).
//!
//! Linux: mm/memory.c do_numa_page(), numa_migrate_check(),
//! numa_rebuild_single_mapping(), numa_rebuild_large_mapping();
//! mm/huge_memory.c do_huge_pmd_numa_page(); mm/mempolicy.c
//! mpol_misplaced(); kernel/sched/fair.c should_numa_migrate_memory();
//! mm/migrate.c migrate_misplaced_folio_prepare(), migrate_misplaced_folio(),
//! alloc_misplaced_dst_folio(), try_to_migrate_one() / remove_migration_pte().
//!
//! The model's simplifications (docs/ops/numa.md):
//! * every process is one thread with the default memory policy (local
//!   node, MPOL_F_MOF | MPOL_F_MORON);
//! * should_numa_migrate_memory() gives its early-scan private-fault answer
//!   (`numa_scan_seq <= 4`, the folio's last accessor unset or this task):
//!   migrate;
//! * a folio mapped by more than one process is not migrated (the kernel
//!   would; such a folio has hinting entries only if the process forked after
//!   the scan, since the scan skips shared copy-on-write folios);
//! * the node's high watermark is 0 (migrate_balanced_pgdat() needs only
//!   `nr_pages` free frames).

use crate::core::addr::{Pfn, HPAGE_PMD_NR, PAGE_SIZE, PMD_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::folio::{FolioRef, PhysMem};
use crate::core::hw::HwEvent;
use crate::core::pgtable::PmdSlot;
use crate::core::stats::VmEvent;
use crate::core::tlb::MmuGather;
use crate::core::vma::{vm_page_prot, VmFlags, Vma};
use crate::mm::mm::Mm;
use crate::mm::protect::{can_change_pte_writable, maybe_change_pte_writable, pte_modify};

/// Whether an entry is a NUMA-hinting one: PROT_NONE in a VMA that allows
/// access (a PROT_NONE VMA's entries are PROT_NONE by mprotect).
/// Linux: mm/memory.c handle_pte_fault(): `pte_protnone(vmf->orig_pte) &&
/// vma_is_accessible(vma)`.
pub fn is_hinting(vma: &Vma, leaf: Leaf) -> bool {
    leaf.flags.contains(LeafFlags::PROTNONE)
        && vma.flags.intersects(crate::core::vma::VM_ACCESS_FLAGS)
}

/// numa_migrate_check() + mpol_misplaced(): count the hinting fault (and
/// whether it is local), then the node the folio should move to, if any.
/// Default policy (MPOL_PREFERRED of the local node with MPOL_F_MORON): a
/// folio on the faulting task's node stays; otherwise it should move there
/// (should_numa_migrate_memory(): see the module notes).
fn numa_migrate_check(phys: &mut PhysMem, folio: FolioRef, this_node: u32) -> Option<u32> {
    let nid = phys.node_of(folio.head);
    phys.stats.vm(VmEvent::NumaHintFaults, 1);
    if nid == this_node {
        phys.stats.vm(VmEvent::NumaHintFaultsLocal, 1);
        return None;
    }
    Some(this_node)
}

/// migrate_misplaced_folio_prepare(): the target node has room for the
/// folio (migrate_balanced_pgdat(), watermark 0 in the model) and the folio
/// can be isolated from its LRU — a folio still in the per-CPU LRU-add batch
/// is not on an LRU yet (folio_isolate_lru() fails: -EAGAIN). The model also
/// refuses a folio another process maps, and one with references beyond its
/// mappings (migration's expected-refcount check would fail).
fn migrate_prepare(mm: &Mm, phys: &PhysMem, folio: FolioRef, target: u32) -> bool {
    if phys.node_free(target) < folio.nr_pages() {
        return false;
    }
    if phys.folio_batches.off_lru(folio.head) {
        return false;
    }
    if phys.mapped_by_other_mm(folio, mm.pid) || phys.maybe_mapped_shared(folio) {
        return false;
    }
    phys.refcount(folio) == phys.folio_mapcount(folio)
}

/// A hinting fault on the PTE at `addr` (`orig`, PROT_NONE, in an
/// accessible VMA). Afterwards the page is mapped accessible again — by the
/// old folio restored in place, or by its copy on the task's node.
/// Linux: mm/memory.c do_numa_page().
pub fn do_numa_page(mm: &mut Mm, phys: &mut PhysMem, vma: &Vma, addr: u64, orig: Leaf) {
    let prot = vm_page_prot(vma.flags);
    let pte = pte_modify(orig, prot);
    // vma_wants_manual_pte_write_upgrade(): a private writable VMA.
    let write_upgrade = vma.flags.contains(VmFlags::WRITE) && !vma.flags.contains(VmFlags::SHARED);
    let mut writable = pte.write();
    if !writable && write_upgrade && can_change_pte_writable(vma, pte, phys) {
        writable = true;
    }
    // vm_normal_folio(): the zero page has none.
    let folio = if pte.flags.contains(LeafFlags::SPECIAL) {
        None
    } else {
        mm.pt.hw.one(HwEvent::StructPageLine);
        phys.folio_of(pte.pfn)
    };
    let mut ignore_writable = false;
    if let Some(f) = folio {
        if let Some(target) = numa_migrate_check(phys, f, mm.numa_node) {
            if migrate_prepare(mm, phys, f, target) {
                // The PTL is dropped; the folio is isolated.
                ignore_writable = true;
                writable = false;
                if migrate_misplaced_folio(mm, phys, f, addr, orig.pfn, target) {
                    return; // TNF_MIGRATED: the new folio is mapped
                }
                // TNF_MIGRATE_FAIL: the PTE is unchanged, map it again.
            }
        }
    }
    // out_map:
    match folio {
        Some(f) if f.is_large() => {
            numa_rebuild_large_mapping(mm, phys, vma, addr, f, pte, ignore_writable, write_upgrade)
        }
        _ => numa_rebuild_single_mapping(mm, phys, vma, addr, writable),
    }
}

/// Make one hinting entry accessible again: young, and writable if the
/// caller decided so. Linux: mm/memory.c numa_rebuild_single_mapping().
fn numa_rebuild_single_mapping(mm: &mut Mm, phys: &PhysMem, vma: &Vma, addr: u64, writable: bool) {
    let old = mm.pt.modify_prot_start_ptes(addr, 1); // ptep_modify_prot_start()
    let mut pte = pte_modify(old, vm_page_prot(vma.flags));
    pte.flags |= LeafFlags::YOUNG;
    if writable {
        pte.flags |= LeafFlags::WRITE;
    }
    mm.pt.modify_prot_commit_ptes(addr, pte, 1, phys); // ptep_modify_prot_commit()
}

/// Every hinting entry of the large folio inside this PTE table and VMA is
/// made accessible again, each deciding its own write upgrade (unless a
/// failed migration dropped the lock: then none is writable).
/// Linux: mm/memory.c numa_rebuild_large_mapping().
#[allow(clippy::too_many_arguments)]
fn numa_rebuild_large_mapping(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    addr: u64,
    folio: FolioRef,
    fault_pte: Leaf,
    ignore_writable: bool,
    write_upgrade: bool,
) {
    let nr = fault_pte.pfn.0 - folio.head.0;
    let addr_start = addr.wrapping_sub(nr * PAGE_SIZE);
    let pt_start = addr & !(PMD_SIZE - 1);
    let start = addr_start.max(pt_start).max(vma.start);
    let end = addr_start
        .wrapping_add(folio.nr_pages() * PAGE_SIZE)
        .min(pt_start + PMD_SIZE)
        .min(vma.end);
    let mut a = start;
    while a < end {
        let Entry::Leaf(ptent) = mm.pt.pte(a) else {
            a += PAGE_SIZE;
            continue;
        };
        let in_folio = ptent.pfn.0 >= folio.head.0 && ptent.pfn.0 < folio.head.0 + folio.nr_pages();
        if !ptent.flags.contains(LeafFlags::PROTNONE) || !in_folio {
            a += PAGE_SIZE;
            continue;
        }
        let mut writable = false;
        if !ignore_writable {
            let p = pte_modify(ptent, vm_page_prot(vma.flags));
            writable = p.write() || (write_upgrade && can_change_pte_writable(vma, p, phys));
        }
        numa_rebuild_single_mapping(mm, phys, vma, a, writable);
        a += PAGE_SIZE;
    }
}

/// Move `folio` (mapped by PTEs of this mm only) to a new folio of the same
/// order on `target`: every PTE is cleared (try_to_migrate_one(), a
/// migration entry meanwhile), the contents, AnonExclusive and dirtiness
/// are copied, and each PTE is rebuilt from the VMA's `vm_page_prot` with
/// the old entry's young/dirty/soft-dirty/uffd-wp bits and its write bit
/// (remove_migration_pte(): a hinting entry is not writable, so it comes
/// back read-only). A large folio whose copy cannot be allocated on the
/// node is not split (MR_NUMA_MISPLACED): the migration fails. Counts
/// `numa_pages_migrated` by base pages. Linux: mm/migrate.c
/// migrate_misplaced_folio() → migrate_pages(MIGRATE_ASYNC,
/// MR_NUMA_MISPLACED), alloc_misplaced_dst_folio().
fn migrate_misplaced_folio(
    mm: &mut Mm,
    phys: &mut PhysMem,
    folio: FolioRef,
    hint_va: u64,
    hint_pfn: Pfn,
    target: u32,
) -> bool {
    let nr = folio.nr_pages();
    // The rmap walk in this mm: try the linear placement around the
    // faulting address, else every leaf.
    let want = phys.folio_mapcount(folio) as usize;
    let in_folio = |pfn: Pfn| pfn.0 >= folio.head.0 && pfn.0 < folio.head.0 + nr;
    let base = hint_va.wrapping_sub((hint_pfn.0 - folio.head.0) * PAGE_SIZE);
    let mut found: Vec<(u64, u64)> = Vec::new(); // (va, index in folio)
    for k in 0..nr {
        let a = base.wrapping_add(k * PAGE_SIZE);
        if let PmdSlot::Table(_) = mm.pt.pmd(a) {
            if let Entry::Leaf(e) = mm.pt.pte_raw(a) {
                if e.pfn == folio.head.add(k) {
                    found.push((a, k));
                }
            }
        }
    }
    if found.len() != want {
        found = mm
            .pt
            .leaves(0, u64::MAX)
            .into_iter()
            .filter(|&(_, level, l)| level == 1 && in_folio(l.pfn))
            .map(|(va, _, l)| (va, l.pfn.0 - folio.head.0))
            .collect();
        if found.len() != want {
            return false; // mapped at PMD level too: not this path
        }
    }
    let Some(new) = phys.alloc_anon_folio_on(target, folio.order) else {
        return false;
    };
    // Contents and flags (folio_migrate_flags(), folio copy).
    for k in 0..nr {
        let t = phys.tag(folio.head.add(k));
        phys.set_tag(new.head.add(k), t);
    }
    let dirty = phys.folio_dirty(folio);
    phys.set_folio_dirty(new, dirty);
    // Unmap: one PTE at a time (arm64 unfolds a folded block at its first
    // clear); the flushes are batched (TTU_BATCH_FLUSH).
    let mut tlb = MmuGather::new();
    let mut old_ptes = Vec::with_capacity(found.len());
    for &(va, k) in &found {
        let old = mm.pt.modify_prot_start_ptes(va, 1);
        tlb.flush_pte_range(va, PAGE_SIZE);
        let exclusive = phys.anon_exclusive(folio.head.add(k));
        old_ptes.push((va, k, old, exclusive));
    }
    tlb.end_vma(&mm.pt);
    tlb.finish(&mm.pt);
    // Remap to the new folio, one PTE at a time (remove_migration_pte()).
    for &(va, k, old, exclusive) in &old_ptes {
        let prot = mm
            .vmas
            .find(va)
            .map_or(LeafFlags::empty(), |v| vm_page_prot(v.flags));
        let kept = LeafFlags::YOUNG | LeafFlags::DIRTY | LeafFlags::SOFT_DIRTY | LeafFlags::UFFD_WP;
        let mut flags = (old.flags & kept) | prot;
        if old.write() {
            flags |= LeafFlags::WRITE;
        }
        let leaf = Leaf {
            pfn: new.head.add(k),
            flags,
        };
        phys.ref_add(new, 1);
        phys.add_rmap_ptes(new, leaf.pfn, 1, mm.pid, exclusive);
        mm.pt.set_ptes(va, leaf, 1, phys);
        phys.remove_rmap_ptes(folio, folio.head.add(k), 1, mm.pid);
    }
    // The new folio goes on the LRU; the old one is freed with its last
    // reference.
    phys.folio_batches.lru_add(new.head, new.is_large());
    phys.ref_sub(folio, old_ptes.len() as u32);
    phys.stats.vm(VmEvent::NumaPagesMigrated, nr as i64);
    true
}

/// A hinting fault on a PMD-mapped THP (`orig` at `slot`): the PMD is made
/// accessible again (young; writable when the head page is AnonExclusive
/// in a private writable VMA), or the whole folio moves to the task's node
/// first (a new PMD-order folio there; none free: the migration fails and
/// the PMD is restored). Linux: mm/huge_memory.c do_huge_pmd_numa_page(),
/// can_change_pmd_writable(); mm/migrate.c migrate_misplaced_folio().
pub fn do_huge_pmd_numa_page(mm: &mut Mm, phys: &mut PhysMem, vma: &Vma, slot: u64, orig: Leaf) {
    let prot = vm_page_prot(vma.flags);
    let pmd = pte_modify(orig, prot);
    let write_upgrade = vma.flags.contains(VmFlags::WRITE) && !vma.flags.contains(VmFlags::SHARED);
    let folio = phys.folio_of(pmd.pfn);
    mm.pt.hw.one(HwEvent::StructPageLine);
    let mut writable = pmd.write()
        || (write_upgrade
            && maybe_change_pte_writable(vma, pmd)
            && folio.is_some_and(|f| phys.anon_exclusive(f.head)));
    if let Some(f) = folio {
        if let Some(target) = numa_migrate_check(phys, f, mm.numa_node) {
            if migrate_prepare(mm, phys, f, target) {
                if let Some(new) = phys.alloc_anon_folio_on(target, f.order) {
                    migrate_pmd(mm, phys, vma, slot, orig, f, new);
                    phys.stats
                        .vm(VmEvent::NumaPagesMigrated, HPAGE_PMD_NR as i64);
                    return;
                }
                writable = false;
            }
        }
    }
    // out_map: pmdp_invalidate_ad(), then the restored entry.
    mm.pt.lock();
    mm.pt.pmdp_invalidate_ad(slot);
    let mut entry = pmd;
    entry.flags |= LeafFlags::YOUNG;
    if writable {
        entry.flags |= LeafFlags::WRITE;
    }
    mm.pt.set_pmd(slot, Entry::Leaf(entry));
}

/// The PMD mapping of `old` at `slot` moves to `new` (remove_migration_pmd():
/// rebuilt from `vm_page_prot`, the old entry's young/dirty and write bits).
fn migrate_pmd(
    mm: &mut Mm,
    phys: &mut PhysMem,
    vma: &Vma,
    slot: u64,
    orig: Leaf,
    old: FolioRef,
    new: FolioRef,
) {
    for k in 0..HPAGE_PMD_NR {
        let t = phys.tag(old.head.add(k));
        phys.set_tag(new.head.add(k), t);
    }
    let dirty = phys.folio_dirty(old);
    phys.set_folio_dirty(new, dirty);
    let exclusive = phys.anon_exclusive(old.head);
    mm.pt.lock();
    mm.pt.pmdp_invalidate_ad(slot);
    let kept = LeafFlags::YOUNG | LeafFlags::DIRTY | LeafFlags::SOFT_DIRTY | LeafFlags::UFFD_WP;
    let mut flags = (orig.flags & kept) | vm_page_prot(vma.flags);
    if orig.write() {
        flags |= LeafFlags::WRITE;
    }
    phys.ref_add(new, 1);
    phys.add_rmap_pmd(new, mm.pid, exclusive);
    mm.pt.set_pmd(
        slot,
        Entry::Leaf(Leaf {
            pfn: new.head,
            flags,
        }),
    );
    phys.remove_rmap_pmd(old, mm.pid);
    phys.folio_batches.lru_add(new.head, true);
    phys.ref_sub(old, 1);
}
