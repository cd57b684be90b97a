//! One process's address space: its VMA tree, page tables and counters,
//! and the VMA-level rules that need both (anon_vma assignment, merging and
//! splitting existing ranges).

use crate::core::addr::HPAGE_PMD_NR;
use crate::core::addr::{PAGE_SIZE, PMD_SIZE};
use crate::core::folio::PhysMem;
use crate::core::pgtable::{PageTables, PmdSlot};
use crate::core::vma::{
    anon_vma_compatible, flags_mergeable, AnonVmaId, VmFlags, Vma, VmaTree, VM_ACCESS_FLAGS,
    VM_IGNORE_MERGE,
};
use crate::types::Pid;
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
    pub deposited: BTreeMap<u64, crate::core::addr::Pfn>,
    /// prctl(PR_SET_THP_DISABLE) state of this mm.
    pub thp_disable: crate::core::thp::ThpDisable,
    /// Soft resource limits and CAP_IPC_LOCK (see [`crate::mm::rlimit`]).
    pub rlimits: crate::core::resource::Rlimits,
    /// `locked_vm` pages no VMA accounts for any more: what MREMAP_DONTUNMAP
    /// left charged (see [`crate::mm::rlimit`]).
    pub locked_vm_stale: u64,
    /// The node of the CPU this (single-threaded) process runs on:
    /// `numa_node_id()` in its faults and NUMA scans (crate::sys::numa).
    pub numa_node: u32,
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

    /// Count a system call's fixed entry work in this process: the
    /// syscall itself and the first VMA lookup ([`crate::Model`]'s
    /// `count_syscall()` for a caller that holds the process).
    #[inline]
    pub(crate) fn count_syscall(&self) {
        self.pt.hw.one(crate::core::hw::HwEvent::Syscall);
        self.pt.hw.one(crate::core::hw::HwEvent::VmaLookup);
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
        self.modify_range_with(vma_start, start, end, new_flags, &mut |_, _, _| Ok(()))
            .expect("a hook that never fails")
    }

    /// [`Mm::modify_range`] with a hook called right before each boundary
    /// inside the old VMA is created or moved: `hook(mm, boundary, split)`,
    /// where `split` says a new VMA is made there (`split_vma()`, which
    /// fails with ENOMEM at `max_map_count`) rather than an existing boundary
    /// moving in a merge. The hook splits a PMD the boundary cuts
    /// (vma_adjust_trans_huge()) and may refuse: the error is returned with
    /// the steps already taken left in place, as the kernel leaves a first
    /// split when the second fails. Linux: mm/vma.c vma_modify(), split_vma().
    pub fn modify_range_with(
        &mut self,
        vma_start: u64,
        start: u64,
        end: u64,
        new_flags: VmFlags,
        hook: &mut dyn FnMut(&mut Mm, u64, bool) -> Result<(), crate::types::errno::Errno>,
    ) -> Result<Vec<u64>, crate::types::errno::Errno> {
        let ctx = self.vmas.get(vma_start).expect("vma").uffd_ctx;
        self.modify_range_ctx(vma_start, start, end, new_flags, ctx, hook)
    }

    /// [`Mm::modify_range_with`] that also sets the userfaultfd context of
    /// `[start, end)` to `new_ctx` (UFFDIO_REGISTER/UNREGISTER). A VMA
    /// merges only with neighbours registered with the same context (none
    /// counts as a context). Linux: mm/vma.c vma_modify_flags_uffd(),
    /// is_mergeable_vma() → is_mergeable_vm_userfaultfd_ctx().
    pub fn modify_range_ctx(
        &mut self,
        vma_start: u64,
        start: u64,
        end: u64,
        new_flags: VmFlags,
        new_ctx: Option<crate::types::UffdId>,
        hook: &mut dyn FnMut(&mut Mm, u64, bool) -> Result<(), crate::types::errno::Errno>,
    ) -> Result<Vec<u64>, crate::types::errno::Errno> {
        let middle = self.vmas.get(vma_start).expect("vma").clone();
        debug_assert!(middle.start <= start && end <= middle.end);
        let left_side = start == middle.start;
        let right_side = end == middle.end;
        let key = |v: &Vma| (v.anon_vma, v.fork_child);
        let want_ctx = crate::core::vma::uffd_ctx_of(new_flags, new_ctx);

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
                && p.uffd_ctx() == want_ctx
                && p.pgoff + p.pages() == middle.pgoff_at(start)
                && anon_vma_compatible(key(p), key(&middle))
        });
        let mut can_right = next.as_ref().is_some_and(|n| {
            flags_mergeable(n.flags, new_flags)
                && n.uffd_ctx() == want_ctx
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
        if can_left || can_right {
            // Linux: mm/vma.c vma_merge_existing_range().
            self.pt.hw.one(crate::core::hw::HwEvent::VmaMerge);
        }
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
                // Sticky flags of every merged VMA survive (6.18.y).
                pv.flags |= (new_flags | n.flags) & VM_IGNORE_MERGE;
            }
            (true, false) => {
                let p = prev.expect("prev");
                let a = anon(&[&p, &middle]);
                if end < middle.end {
                    hook(self, end, false)?;
                }
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
                pv.flags |= new_flags & VM_IGNORE_MERGE;
            }
            (false, true) => {
                let n = next.expect("next");
                let a = anon(&[&middle, &n]);
                if start > middle.start {
                    hook(self, start, false)?;
                }
                self.vmas.remove(n.start);
                let mut merged = n.clone();
                merged.start = start;
                merged.pgoff = middle.pgoff_at(start);
                merged.anon_vma = a;
                merged.flags |= new_flags & VM_IGNORE_MERGE;
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
                    hook(self, start, true)?;
                    self.pt.hw.one(crate::core::hw::HwEvent::VmaSplit); // __split_vma()
                    self.vmas.split_at(start);
                    moved.push(start);
                }
                if !right_side {
                    hook(self, end, true)?;
                    self.pt.hw.one(crate::core::hw::HwEvent::VmaSplit); // __split_vma()
                    self.vmas.split_at(end);
                    moved.push(end);
                }
                let piece = self.vmas.get_mut(start).expect("piece");
                piece.flags = new_flags;
                piece.uffd_ctx = new_ctx;
            }
        }
        Ok(moved)
    }

    /// Try to place the proposed VMA `new` (its range empty in the tree)
    /// by expanding a compatible neighbour instead of inserting it. The
    /// proposal's flags, pgoff, anon_vma, userfaultfd context and
    /// `fork_child` (for mremap: whether the VMA it is copied from is a fork
    /// child) decide. Returns the start of the VMA that now covers the
    /// range, or `None` when no merge is possible (the caller inserts `new`).
    /// Linux: mm/vma.c vma_merge_new_range(), can_vma_merge_left/right(),
    /// is_mergeable_vma(), is_mergeable_anon_vma() and vma_expand()
    /// (anon_vma propagation from a removed `next` and from the copied-from
    /// VMA, dup_anon_vma()), with vma_merge_copied_range()'s fork-child
    /// refusal (6.18.y, 61f67c230a5e). Used by mmap, mremap's copy_vma() and
    /// vma_merge_extend().
    pub fn merge_new_range(&mut self, new: &Vma) -> Option<u64> {
        let (start, end, flags, pgoff) = (new.start, new.end, new.flags, new.pgoff);
        let anon = (new.anon_vma, new.fork_child);
        let ctx = new.uffd_ctx();
        let prev = self.vmas.prev(start).cloned();
        let next = self.vmas.find_vma(start).cloned();
        if flags.intersects(crate::core::vma::VM_SPECIAL) || (prev.is_none() && next.is_none()) {
            return None;
        }
        let key = |v: &Vma| (v.anon_vma, v.fork_child);
        let pages = (end - start) >> 12;
        let can_left = prev.as_ref().is_some_and(|p| {
            p.end == start
                && flags_mergeable(p.flags, flags)
                && p.uffd_ctx() == ctx
                && anon_vma_compatible(anon, key(p))
                && p.pgoff + p.pages() == pgoff
        });
        let can_right = next.as_ref().is_some_and(|n| {
            n.start == end
                && flags_mergeable(n.flags, flags)
                && n.uffd_ctx() == ctx
                && anon_vma_compatible(anon, key(n))
                && n.pgoff == pgoff + pages
                // Merging on both sides: prev and next must agree too.
                && (!can_left || {
                    let p = prev.as_ref().expect("prev");
                    p.anon_vma.is_none() || n.anon_vma.is_none() || p.anon_vma == n.anon_vma
                })
        });
        let sticky = flags & VM_IGNORE_MERGE;
        // dup_anon_vma() sources in vma_expand()'s order: a removed next,
        // then the copied-from VMA (anon_vma_clone() copies the chain, so
        // the fork-child state travels with the anon_vma).
        // (Two at most, so no list: a removed next's, then the proposal's.)
        let mut donor_next = None;
        let target = match (can_left, can_right) {
            (false, false) => return None,
            (true, with_next) => {
                let p = prev.expect("prev");
                let mut new_end = end;
                let mut sticky = sticky;
                if with_next {
                    let n = self.vmas.remove(next.expect("next").start).expect("next");
                    donor_next = Some(key(&n));
                    new_end = n.end;
                    sticky |= n.flags & VM_IGNORE_MERGE;
                }
                let t = self.vmas.get_mut(p.start).expect("prev");
                t.end = new_end;
                t.flags |= sticky;
                t.start
            }
            (false, true) => {
                let mut n = self.vmas.remove(next.expect("next").start).expect("next");
                n.start = start;
                n.pgoff = pgoff;
                n.flags |= sticky;
                self.vmas.insert(n);
                start
            }
        };
        let t = self.vmas.get_mut(target).expect("target");
        if t.anon_vma.is_none() {
            let donor = donor_next.into_iter().chain([anon]).find(|d| d.0.is_some());
            if let Some((a, fork_child)) = donor {
                t.anon_vma = a;
                t.fork_child = fork_child;
            }
        }
        Some(target)
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
        if leaf.flags.contains(crate::core::arch::LeafFlags::SPECIAL) {
            continue;
        }
        if Some(leaf.pfn) == phys.huge_zero {
            continue;
        }
        rss += if level == 2 { HPAGE_PMD_NR } else { 1 };
    }
    rss
}
