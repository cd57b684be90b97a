//! One process's address space: its VMA tree, page tables and counters,
//! and the VMA-level rules that need both (anon_vma assignment, merging and
//! splitting existing ranges).

use crate::addr::{PAGE_SIZE, PMD_SIZE};
use crate::folio::PhysMem;
use crate::model::Pid;
use crate::pgtable::{PageTables, PmdSlot};
use crate::vma::{
    anon_vma_compatible, flags_mergeable, AnonVmaId, VmFlags, Vma, VmaTree, VM_ACCESS_FLAGS,
    VM_IGNORE_MERGE,
};
use std::collections::BTreeMap;

/// A process's `mm_struct`.
#[derive(Clone, Debug)]
pub struct Mm {
    pub pid: Pid,
    pub vmas: VmaTree,
    pub pt: PageTables,
    /// MM_ANONPAGES.
    pub rss_anon: u64,
    /// Page tables deposited with PMD mappings (pgtable_trans_huge_deposit),
    /// keyed by the 2 MiB slot address.
    pub deposited: BTreeMap<u64, crate::addr::Pfn>,
}

/// Allocator of anon_vma identities (machine-wide).
#[derive(Clone, Debug, Default)]
pub struct AnonVmaIds {
    next: AnonVmaId,
}

impl AnonVmaIds {
    pub fn fresh(&mut self) -> AnonVmaId {
        self.next += 1;
        self.next
    }
}

impl Mm {
    /// Give the VMA containing `addr` an anon_vma if it has none, reusing a
    /// neighbour's when the kernel would.
    /// Linux: mm/rmap.c __anon_vma_prepare() → find_mergeable_anon_vma()
    /// → reusable_anon_vma() / anon_vma_compatible().
    pub fn anon_vma_prepare(&mut self, addr: u64, ids: &mut AnonVmaIds) -> AnonVmaId {
        let vma = self
            .vmas
            .find(addr)
            .expect("fault address inside a VMA")
            .clone();
        if let Some(a) = vma.anon_vma {
            return a;
        }
        // anon_vma_compatible(a, b): a ends where b starts, flags differ only
        // in access bits (and soft-dirty), pgoff contiguous.
        let compatible = |a: &Vma, b: &Vma| {
            a.end == b.start
                && (a.flags ^ b.flags)
                    .difference(VM_ACCESS_FLAGS | VM_IGNORE_MERGE)
                    .is_empty()
                && b.pgoff == a.pgoff + a.pages()
        };
        let mut reuse = None;
        if let Some(next) = self.vmas.find_vma(vma.end).filter(|n| n.start == vma.end) {
            if compatible(&vma, next) && !next.fork_child {
                reuse = next.anon_vma;
            }
        }
        if reuse.is_none() {
            if let Some(prev) = self.vmas.prev(vma.start).filter(|p| p.end == vma.start) {
                if compatible(prev, &vma) && !prev.fork_child {
                    reuse = prev.anon_vma;
                }
            }
        }
        let id = reuse.unwrap_or_else(|| ids.fresh());
        self.vmas.get_mut(vma.start).expect("vma").anon_vma = Some(id);
        id
    }

    /// Split a PMD leaf that a new VMA boundary at `boundary` would cut.
    /// Returns the slot to split, if any; the caller performs the split
    /// (it needs physical memory). Linux: mm/huge_memory.c
    /// split_huge_pmd_if_needed() via vma_adjust_trans_huge().
    pub fn pmd_cut_by(&self, boundary: u64) -> Option<u64> {
        if boundary.is_multiple_of(PMD_SIZE) {
            return None;
        }
        let slot = boundary & !(PMD_SIZE - 1);
        match self.pt.pmd(slot) {
            PmdSlot::Leaf(_) => Some(slot),
            _ => None,
        }
    }

    /// Number of VMAs (mm->map_count).
    pub fn map_count(&self) -> usize {
        self.vmas.len()
    }

    /// Apply `new_flags(vma)` to `[start, end)` inside the VMA starting at
    /// `vma_start`, merging with neighbours or splitting as the kernel does.
    /// Returns the boundaries that moved or appeared (PMDs there must be split
    /// by the caller first — see [`Mm::pmd_cut_by`]).
    /// Linux: mm/vma.c vma_modify_flags() → vma_merge_existing_range() /
    /// split_vma().
    pub fn modify_range(
        &mut self,
        vma_start: u64,
        start: u64,
        end: u64,
        new_flags: VmFlags,
    ) -> Vec<u64> {
        let middle = self.vmas.get(vma_start).expect("vma").clone();
        debug_assert!(middle.start <= start && end <= middle.end);
        let left_side = start == middle.start;
        let right_side = end == middle.end;
        let key = |v: &Vma| (v.anon_vma, v.fork_child);

        let prev = self
            .vmas
            .prev(middle.start)
            .filter(|p| p.end == start && left_side)
            .cloned();
        let next = self
            .vmas
            .find_vma(middle.end)
            .filter(|n| n.start == end && right_side)
            .cloned();

        let can_left = prev.as_ref().is_some_and(|p| {
            flags_mergeable(p.flags, new_flags)
                && p.pgoff + p.pages() == middle.pgoff_at(start)
                && anon_vma_compatible(key(p), key(&middle))
        });
        let mut can_right = next.as_ref().is_some_and(|n| {
            flags_mergeable(n.flags, new_flags)
                && middle.pgoff_at(end) == n.pgoff
                && anon_vma_compatible(key(&middle), key(n))
        });
        if can_left && can_right {
            let (p, n) = (prev.as_ref().expect("prev"), next.as_ref().expect("next"));
            // Linux: vma_merge_existing_range() requires prev and next to be
            // compatible with each other to merge on both sides.
            if !anon_vma_compatible(key(p), key(n)) {
                can_right = false;
            }
        }
        let anon = |vs: &[&Vma]| vs.iter().find_map(|v| v.anon_vma);
        let mut moved = Vec::new();
        match (can_left, can_right) {
            (true, true) => {
                let p = prev.expect("prev");
                let n = next.expect("next");
                let a = anon(&[&p, &middle, &n]);
                self.vmas.remove(middle.start);
                self.vmas.remove(n.start);
                let pv = self.vmas.get_mut(p.start).expect("prev");
                pv.end = n.end;
                pv.anon_vma = a;
            }
            (true, false) => {
                let p = prev.expect("prev");
                let a = anon(&[&p, &middle]);
                self.vmas.remove(middle.start);
                if !right_side || end < middle.end {
                    let mut rest = middle.clone();
                    rest.pgoff = middle.pgoff_at(end);
                    rest.start = end;
                    self.vmas.insert(rest);
                    moved.push(end);
                }
                let pv = self.vmas.get_mut(p.start).expect("prev");
                pv.end = end;
                pv.anon_vma = a;
            }
            (false, true) => {
                let n = next.expect("next");
                let a = anon(&[&middle, &n]);
                self.vmas.remove(n.start);
                let mut merged = n.clone();
                merged.start = start;
                merged.pgoff = middle.pgoff_at(start);
                merged.anon_vma = a;
                if start > middle.start {
                    self.vmas.get_mut(middle.start).expect("middle").end = start;
                    moved.push(start);
                } else {
                    self.vmas.remove(middle.start);
                }
                self.vmas.insert(merged);
            }
            (false, false) => {
                if !left_side {
                    self.vmas.split_at(start);
                    moved.push(start);
                }
                if !right_side {
                    self.vmas.split_at(end);
                    moved.push(end);
                }
                self.vmas.get_mut(start).expect("piece").flags = new_flags;
            }
        }
        moved
    }
}

/// Page-aligned `[start, end)` iterator by page.
pub fn pages(start: u64, end: u64) -> impl Iterator<Item = u64> {
    (start..end).step_by(PAGE_SIZE as usize)
}

/// Helper for invariants: recompute present anon pages per mm.
pub fn count_rss(mm: &Mm, phys: &PhysMem) -> u64 {
    let mut rss = 0;
    for (_, level, leaf) in mm.pt.leaves(0, u64::MAX) {
        if leaf.flags.contains(crate::arch::LeafFlags::SPECIAL) {
            continue;
        }
        if Some(leaf.pfn) == phys.huge_zero {
            continue;
        }
        rss += if level == 2 { 512 } else { 1 };
    }
    rss
}
