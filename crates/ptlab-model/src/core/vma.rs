//! VMAs: flags, pgoff, anon_vma identity, and the split/merge rules that
//! decide what `/proc/PID/maps` shows.
//!
//! Linux: include/linux/mm.h (VM_* bits), mm/vma.c (is_mergeable_vma,
//! is_mergeable_anon_vma, vma_merge_new_range, vma_merge_existing_range,
//! __split_vma), mm/rmap.c find_mergeable_anon_vma(),
//! fs/proc/task_mmu.c show_smap_vma_flags().

use crate::core::addr::PAGE_SHIFT;
use crate::core::arch::LeafFlags;
use bitflags::bitflags;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

bitflags! {
    /// `vm_flags` bits (include/linux/mm.h, 64-bit values).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
    pub struct VmFlags: u64 {
        const READ = 0x1;
        const WRITE = 0x2;
        const EXEC = 0x4;
        const SHARED = 0x8;
        const MAYREAD = 0x10;
        const MAYWRITE = 0x20;
        const MAYEXEC = 0x40;
        const MAYSHARE = 0x80;
        const GROWSDOWN = 0x100;
        const UFFD_MISSING = 0x200;
        const PFNMAP = 0x400;
        /// VM_MAYBE_GUARD (6.18.y stable, upstream 6.19): set on a VMA the
        /// first time MADV_GUARD_INSTALL runs on it; never cleared.
        /// Linux: mm/madvise.c madvise_guard_install() vma_set_atomic_flag().
        const MAYBE_GUARD = 0x800;
        const UFFD_WP = 0x1000;
        const LOCKED = 0x2000;
        const IO = 0x4000;
        const DONTCOPY = 0x20000;
        const DONTEXPAND = 0x40000;
        const LOCKONFAULT = 0x80000;
        const ACCOUNT = 0x100000;
        const NORESERVE = 0x200000;
        const HUGETLB = 0x400000;
        const WIPEONFORK = 0x2000000;
        const DONTDUMP = 0x4000000;
        const SOFTDIRTY = 0x8000000;
        const MIXEDMAP = 0x10000000;
        const HUGEPAGE = 0x20000000;
        const NOHUGEPAGE = 0x40000000;
        const MERGEABLE = 0x80000000;
        const SEALED = 1 << 42;
    }
}

/// Flags a merge ignores (VM_SOFTDIRTY; CONFIG_MEM_SOFT_DIRTY is off on the
/// target machines so it is never set). Linux: mm/vma.c VM_IGNORE_MERGE.
///
/// 6.18.y stable adds VM_MAYBE_GUARD (a "sticky" flag: a merge ORs it into
/// the result; checked live on 6.18.44, docs/ops/guard-mlock-mseal.md).
pub const VM_IGNORE_MERGE: VmFlags = VmFlags::SOFTDIRTY.union(VmFlags::MAYBE_GUARD);
/// Flags that never merge. Linux: VM_SPECIAL.
pub const VM_SPECIAL: VmFlags = VmFlags::IO
    .union(VmFlags::DONTEXPAND)
    .union(VmFlags::PFNMAP)
    .union(VmFlags::MIXEDMAP);
/// R/W/X. Linux: VM_ACCESS_FLAGS.
pub const VM_ACCESS_FLAGS: VmFlags = VmFlags::READ.union(VmFlags::WRITE).union(VmFlags::EXEC);
/// The userfaultfd registration modes a VMA can carry (VM_UFFD_MINOR is
/// shmem/hugetlb only). Linux: include/linux/userfaultfd_k.h __VM_UFFD_FLAGS.
pub const VM_UFFD_FLAGS: VmFlags = VmFlags::UFFD_MISSING.union(VmFlags::UFFD_WP);

/// smaps `VmFlags` mnemonics in bit order (fs/proc/task_mmu.c show_smap_vma_flags()).
const MNEMONICS: &[(VmFlags, &str)] = &[
    (VmFlags::READ, "rd"),
    (VmFlags::WRITE, "wr"),
    (VmFlags::EXEC, "ex"),
    (VmFlags::SHARED, "sh"),
    (VmFlags::MAYREAD, "mr"),
    (VmFlags::MAYWRITE, "mw"),
    (VmFlags::MAYEXEC, "me"),
    (VmFlags::MAYSHARE, "ms"),
    (VmFlags::GROWSDOWN, "gd"),
    (VmFlags::UFFD_MISSING, "um"),
    (VmFlags::PFNMAP, "pf"),
    (VmFlags::MAYBE_GUARD, "gu"),
    (VmFlags::UFFD_WP, "uw"),
    (VmFlags::LOCKED, "lo"),
    (VmFlags::IO, "io"),
    (VmFlags::DONTCOPY, "dc"),
    (VmFlags::DONTEXPAND, "de"),
    (VmFlags::LOCKONFAULT, "lf"),
    (VmFlags::ACCOUNT, "ac"),
    (VmFlags::NORESERVE, "nr"),
    (VmFlags::HUGETLB, "ht"),
    (VmFlags::WIPEONFORK, "wf"),
    (VmFlags::DONTDUMP, "dd"),
    (VmFlags::SOFTDIRTY, "sd"),
    (VmFlags::MIXEDMAP, "mm"),
    (VmFlags::HUGEPAGE, "hg"),
    (VmFlags::NOHUGEPAGE, "nh"),
    (VmFlags::MERGEABLE, "mg"),
    (VmFlags::SEALED, "sl"),
];

impl VmFlags {
    /// smaps mnemonics, in the order the kernel prints them.
    pub fn mnemonics(self) -> Vec<String> {
        MNEMONICS
            .iter()
            .filter(|(f, _)| self.contains(*f))
            .map(|(_, m)| m.to_string())
            .collect()
    }

    /// The `rwxp` permission string of /proc/PID/maps.
    pub fn perms(self) -> String {
        let mut s = String::with_capacity(4);
        s.push(if self.contains(VmFlags::READ) {
            'r'
        } else {
            '-'
        });
        s.push(if self.contains(VmFlags::WRITE) {
            'w'
        } else {
            '-'
        });
        s.push(if self.contains(VmFlags::EXEC) {
            'x'
        } else {
            '-'
        });
        s.push(if self.contains(VmFlags::MAYSHARE) {
            's'
        } else {
            'p'
        });
        s
    }
}

/// Identity of an anon_vma.
pub type AnonVmaId = u64;

/// One VMA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub flags: VmFlags,
    /// `vm_pgoff`, in pages.
    pub pgoff: u64,
    pub anon_vma: Option<AnonVmaId>,
    /// The anon_vma chain has more than one link (inherited through fork).
    pub fork_child: bool,
    /// `vm_userfaultfd_ctx`: the userfaultfd this VMA is registered with.
    /// Meaningful only while the VMA has a VM_UFFD_* flag (read it through
    /// [`Vma::uffd_ctx`]): code that drops the registration by clearing the
    /// flags (fork without EVENT_FORK, mremap without EVENT_REMAP) thereby
    /// drops the context too, as userfaultfd_reset_ctx() does.
    #[serde(default)]
    pub uffd_ctx: Option<crate::types::UffdId>,
}

impl Vma {
    pub fn pages(&self) -> u64 {
        (self.end - self.start) >> PAGE_SHIFT
    }
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
    /// The userfaultfd context the VMA is registered with, if any.
    pub fn uffd_ctx(&self) -> Option<crate::types::UffdId> {
        uffd_ctx_of(self.flags, self.uffd_ctx)
    }
    /// pgoff of the page at `addr` (which may lie outside the VMA).
    pub fn pgoff_at(&self, addr: u64) -> u64 {
        self.pgoff
            .wrapping_add((addr.wrapping_sub(self.start)) >> PAGE_SHIFT)
    }
}

/// Flags compatible for a merge. Linux: mm/vma.c is_mergeable_vma().
pub fn flags_mergeable(a: VmFlags, b: VmFlags) -> bool {
    (a ^ b).difference(VM_IGNORE_MERGE).is_empty() && !a.intersects(VM_SPECIAL)
}

/// The effective userfaultfd context of a VMA with `flags` and raw context
/// `ctx` (none unless a VM_UFFD_* flag is set).
pub fn uffd_ctx_of(
    flags: VmFlags,
    ctx: Option<crate::types::UffdId>,
) -> Option<crate::types::UffdId> {
    ctx.filter(|_| flags.intersects(VM_UFFD_FLAGS))
}

/// Linux: mm/vma.c is_mergeable_anon_vma(): a missing anon_vma on one side is
/// fine unless the side that has one inherited it through fork; two must be equal.
pub fn anon_vma_compatible(a: (Option<AnonVmaId>, bool), b: (Option<AnonVmaId>, bool)) -> bool {
    match (a.0, b.0) {
        (None, None) => true,
        (Some(_), None) => !a.1,
        (None, Some(_)) => !b.1,
        (Some(x), Some(y)) => x == y,
    }
}

/// The VMA tree of one mm (the maple tree, as an ordered map by start).
///
/// Kept as a sorted vector while the mm has few VMAs and as a B-tree map
/// once it has more than [`SMALL_MAX`] (issue 14: a small process's VMA
/// lookups — several per system call, one per fault — were about 11 % of
/// mremap-batch-64k as `BTreeMap::range()` walks; a binary search of a
/// short vector is a few compares). The two hold the same VMAs by the
/// same keys and answer every query alike; which one is used is not
/// observable (`Debug` prints the map either way).
#[derive(Clone, Default)]
pub struct VmaTree {
    store: VmaStore,
}

/// More VMAs than this move a [`VmaTree`] to the B-tree (and it stays
/// there: inserting into the middle of a long vector is what the B-tree
/// avoids).
const SMALL_MAX: usize = 32;

#[derive(Clone)]
enum VmaStore {
    /// Sorted by start, starts unique.
    Small(Vec<Vma>),
    Big(BTreeMap<u64, Vma>),
}

impl Default for VmaStore {
    fn default() -> Self {
        VmaStore::Small(Vec::new())
    }
}

impl std::fmt::Debug for VmaTree {
    /// As the derived `Debug` of the map it was: `VmaTree { map: {start: Vma, ..} }`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Map<'a>(&'a VmaTree);
        impl std::fmt::Debug for Map<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_map()
                    .entries(self.0.iter().map(|v| (v.start, v)))
                    .finish()
            }
        }
        f.debug_struct("VmaTree").field("map", &Map(self)).finish()
    }
}

/// The VMAs [`VmaTree::take_in`] took out, lowest first, read as a
/// slice: a single one (what an unmap usually removes) is kept inline, so
/// that taking it allocates nothing.
#[derive(Debug)]
pub enum Taken {
    One([Vma; 1]),
    Many(Vec<Vma>),
}

impl From<Vec<Vma>> for Taken {
    fn from(v: Vec<Vma>) -> Self {
        Taken::Many(v)
    }
}

impl std::ops::Deref for Taken {
    type Target = [Vma];
    fn deref(&self) -> &[Vma] {
        match self {
            Taken::One(a) => a,
            Taken::Many(v) => v,
        }
    }
}

/// [`VmaTree::last_starting_before`] of the map.
#[inline(never)]
fn big_last_starting_before(m: &BTreeMap<u64, Vma>, addr: u64, below: bool) -> Option<&Vma> {
    match below {
        true => m.range(..addr).next_back().map(|(_, v)| v),
        false => m.range(..=addr).next_back().map(|(_, v)| v),
    }
}

/// The index in sorted `v` of its first VMA that ends above `addr` (the
/// VMA containing `addr`, else the first starting above it; `v.len()`
/// when none), and whether it contains `addr`: one binary search. VMAs
/// are non-empty, so the VMA starting at `addr`, if any, contains it.
#[inline]
fn small_cut(v: &[Vma], addr: u64) -> (usize, bool) {
    let i = v.partition_point(|a| a.start <= addr);
    match i.checked_sub(1) {
        Some(j) if v[j].end > addr => (j, true),
        _ => (i, false),
    }
}

/// The first index of sorted `v` whose start is at least `x`.
fn lower(v: &[Vma], x: u64) -> usize {
    v.partition_point(|a| a.start < x)
}

impl VmaTree {
    /// An empty tree kept as the B-tree from the start (the reference the
    /// vector form is tested against).
    #[cfg(test)]
    fn big() -> Self {
        VmaTree {
            store: VmaStore::Big(BTreeMap::new()),
        }
    }
    pub fn len(&self) -> usize {
        match &self.store {
            VmaStore::Small(v) => v.len(),
            VmaStore::Big(m) => m.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Vma> {
        let (small, big) = match &self.store {
            VmaStore::Small(v) => (Some(v.iter()), None),
            VmaStore::Big(m) => (None, Some(m.values())),
        };
        small.into_iter().flatten().chain(big.into_iter().flatten())
    }
    /// The VMAs whose start is in `[start, end)`, lowest first (none when
    /// `end <= start`).
    fn starting_in(&self, start: u64, end: u64) -> impl Iterator<Item = &Vma> {
        let (small, big) = match &self.store {
            _ if end <= start => (None, None),
            VmaStore::Small(v) => (Some(v[lower(v, start)..lower(v, end)].iter()), None),
            VmaStore::Big(m) => (None, Some(m.range(start..end).map(|(_, v)| v))),
        };
        small.into_iter().flatten().chain(big.into_iter().flatten())
    }
    /// The VMA with the highest start at or below `addr` (`below`: below).
    /// (Inlined for the vector, a few compares; the map's walk is not.)
    #[inline]
    fn last_starting_before(&self, addr: u64, below: bool) -> Option<&Vma> {
        match &self.store {
            VmaStore::Small(v) => {
                let i = match below {
                    true => lower(v, addr),
                    false => v.partition_point(|a| a.start <= addr),
                };
                i.checked_sub(1).map(|i| &v[i])
            }
            VmaStore::Big(m) => big_last_starting_before(m, addr, below),
        }
    }
    /// The VMA containing `addr`. Linux: vma_lookup().
    #[inline]
    pub fn find(&self, addr: u64) -> Option<&Vma> {
        self.last_starting_before(addr, false)
            .filter(|v| v.contains(addr))
    }
    pub fn get(&self, start: u64) -> Option<&Vma> {
        match &self.store {
            VmaStore::Small(v) => v
                .binary_search_by_key(&start, |a| a.start)
                .ok()
                .map(|i| &v[i]),
            VmaStore::Big(m) => m.get(&start),
        }
    }
    /// [`VmaTree::get`], trying position `pos` of the sorted store first
    /// (a position an earlier answer gave: right while no VMA before it
    /// was added or removed); with the VMA, its position (0 in a big
    /// store). Starts are unique, so a VMA found at `pos` with this start
    /// is the one `get` finds.
    pub fn get_at(&self, start: u64, pos: usize) -> Option<(&Vma, usize)> {
        match &self.store {
            VmaStore::Small(v) => match v.get(pos) {
                Some(a) if a.start == start => Some((a, pos)),
                _ => v
                    .binary_search_by_key(&start, |a| a.start)
                    .ok()
                    .map(|i| (&v[i], i)),
            },
            VmaStore::Big(m) => m.get(&start).map(|a| (a, 0)),
        }
    }
    /// The VMA starting at `start`, to change anything but its start.
    pub fn get_mut(&mut self, start: u64) -> Option<&mut Vma> {
        match &mut self.store {
            VmaStore::Small(v) => v
                .binary_search_by_key(&start, |a| a.start)
                .ok()
                .map(|i| &mut v[i]),
            VmaStore::Big(m) => m.get_mut(&start),
        }
    }
    /// The VMA containing `addr`, to change anything but its start.
    pub fn find_mut(&mut self, addr: u64) -> Option<&mut Vma> {
        let v = match &mut self.store {
            VmaStore::Small(v) => {
                let i = v.partition_point(|a| a.start <= addr).checked_sub(1)?;
                &mut v[i]
            }
            VmaStore::Big(m) => m.range_mut(..=addr).next_back().map(|(_, v)| v)?,
        };
        Some(v).filter(|v| v.contains(addr))
    }
    /// First VMA ending above `addr`. Linux: find_vma().
    pub fn find_vma(&self, addr: u64) -> Option<&Vma> {
        if let VmaStore::Small(v) = &self.store {
            return v.get(small_cut(v, addr).0);
        }
        if let Some(v) = self.find(addr) {
            return Some(v);
        }
        match &self.store {
            VmaStore::Small(v) => v.get(lower(v, addr)),
            VmaStore::Big(m) => m.range(addr..).next().map(|(_, v)| v),
        }
    }
    /// The VMA ending at or before `addr` with the highest end.
    pub fn prev(&self, addr: u64) -> Option<&Vma> {
        self.last_starting_before(addr, true)
            .filter(|v| v.end <= addr)
    }
    /// Start addresses of VMAs intersecting `[start, end)`.
    pub fn starts_in(&self, start: u64, end: u64) -> Vec<u64> {
        let mut out = Vec::new();
        if let Some(v) = self.find(start) {
            out.push(v.start);
        }
        for v in self.starting_in(start, end) {
            if out.last() != Some(&v.start) {
                out.push(v.start);
            }
        }
        out
    }
    /// The first of [`VmaTree::starts_in`], without building the list.
    pub fn first_start_in(&self, start: u64, end: u64) -> Option<u64> {
        self.first_in(start, end).map(|v| v.start)
    }
    /// The VMA [`VmaTree::first_start_in`] names (no second lookup by
    /// its start).
    pub fn first_in(&self, start: u64, end: u64) -> Option<&Vma> {
        if let VmaStore::Small(v) = &self.store {
            // One search: the VMA containing `start` is the last one
            // starting at or below it; failing that, the next one (which
            // starts above `start`) when it starts below `end`.
            let (i, inside) = small_cut(v, start);
            return v.get(i).filter(|a| inside || a.start < end);
        }
        if let Some(v) = self.find(start) {
            return Some(v);
        }
        self.starting_in(start, end).next()
    }
    /// Remove the VMAs of [`VmaTree::starts_in`] (the one containing
    /// `start`, then those starting in `[start, end)`), returned lowest
    /// first: what removing [`VmaTree::first_start_in`] until it answers
    /// none removes, in one step (one search and one shift of the
    /// vector's tail instead of a search and a shift per VMA).
    pub fn take_in(&mut self, start: u64, end: u64) -> Taken {
        self.take_in_bounded(start, end).0
    }
    /// [`VmaTree::take_in`], with what an unmap then looks up as its
    /// floor and ceiling: the end of [`VmaTree::prev`]`(start)` and the
    /// start of [`VmaTree::find_vma`]`(end)` after the removal (0 for
    /// none). In the vector they are the neighbours of the removed slice
    /// (the one before it ends at or below `start`, else it would contain
    /// `start` and have been taken; the one after it starts at or above
    /// `end`, else it would start in the range), so no search is made
    /// for them (issue 14: two searches per unmap).
    pub fn take_in_bounded(&mut self, start: u64, end: u64) -> (Taken, u64, u64) {
        if let VmaStore::Small(v) = &mut self.store {
            let mut lo = lower(v, start);
            let mut hi = if end > start {
                lower(v, end).max(lo)
            } else {
                lo
            };
            // find(start): the VMA starting at `start` (at `lo`) or the
            // one before it when it contains `start`.
            match v.get(lo) {
                Some(a) if a.start == start => hi = hi.max(lo + 1),
                _ => {
                    if lo > 0 && v[lo - 1].contains(start) {
                        lo -= 1;
                    }
                }
            }
            let taken = if hi == lo + 1 {
                Taken::One([v.remove(lo)])
            } else {
                Taken::from(v.drain(lo..hi).collect::<Vec<_>>())
            };
            let floor = lo.checked_sub(1).map_or(0, |i| v[i].end);
            let ceiling = v.get(lo).map_or(0, |a| a.start);
            // Only when the range is empty (`end <= start`) can the
            // neighbours differ from the searches (nothing is taken then
            // but the VMA containing `start`).
            if end > start {
                debug_assert_eq!(floor, self.prev(start).map_or(0, |p| p.end));
                debug_assert_eq!(ceiling, self.find_vma(end).map_or(0, |n| n.start));
                return (taken, floor, ceiling);
            }
            let floor = self.prev(start).map_or(0, |p| p.end);
            let ceiling = self.find_vma(end).map_or(0, |n| n.start);
            return (taken, floor, ceiling);
        }
        let taken = self.take_in_searched(start, end);
        let floor = self.prev(start).map_or(0, |p| p.end);
        let ceiling = self.find_vma(end).map_or(0, |n| n.start);
        (taken, floor, ceiling)
    }
    /// Remove the VMA that is exactly `[start, end)` when `ok` accepts
    /// it, with the floor and ceiling of [`VmaTree::take_in_bounded`]
    /// (what `take_in_bounded(start, end)` takes and answers then): one
    /// search in the vector. `None`, nothing changed, when no VMA starts
    /// at `start`, it ends elsewhere, or `ok` refuses it.
    pub fn take_whole(
        &mut self,
        start: u64,
        end: u64,
        ok: impl Fn(&Vma) -> bool,
    ) -> Option<(Vma, u64, u64)> {
        if let VmaStore::Small(v) = &mut self.store {
            let i = v.binary_search_by_key(&start, |a| a.start).ok()?;
            if v[i].end != end || !ok(&v[i]) {
                return None;
            }
            let taken = v.remove(i);
            let floor = i.checked_sub(1).map_or(0, |j| v[j].end);
            let ceiling = v.get(i).map_or(0, |a| a.start);
            return Some((taken, floor, ceiling));
        }
        if !self.get(start).is_some_and(|a| a.end == end && ok(a)) {
            return None;
        }
        let taken = self.remove(start)?;
        let floor = self.prev(start).map_or(0, |p| p.end);
        let ceiling = self.find_vma(end).map_or(0, |n| n.start);
        Some((taken, floor, ceiling))
    }
    /// [`VmaTree::take_in`] of the map: the VMAs one search each.
    fn take_in_searched(&mut self, start: u64, end: u64) -> Taken {
        let mut out = Vec::new();
        while let Some(v) = self.first_start_in(start, end).and_then(|s| self.remove(s)) {
            out.push(v);
        }
        Taken::from(out)
    }
    /// Whether a VMA intersecting `[start, end)` satisfies `pred` (the
    /// VMAs of [`VmaTree::starts_in`], without building the list).
    pub fn any_in(&self, start: u64, end: u64, pred: impl Fn(&Vma) -> bool) -> bool {
        if let VmaStore::Small(v) = &self.store {
            let (i, inside) = small_cut(v, start);
            let rest = i + usize::from(inside);
            return (inside && pred(&v[i]))
                || v[rest..].iter().take_while(|a| a.start < end).any(pred);
        }
        self.find(start).is_some_and(&pred) || self.starting_in(start, end).any(pred)
    }
    pub fn intersects(&self, start: u64, end: u64) -> bool {
        self.first_start_in(start, end).is_some()
    }
    /// Add `v` under its start (replacing a VMA with the same start).
    pub fn insert(&mut self, v: Vma) {
        debug_assert!(v.start < v.end);
        match &mut self.store {
            VmaStore::Small(s) => {
                match s.binary_search_by_key(&v.start, |a| a.start) {
                    Ok(i) => s[i] = v,
                    Err(i) => s.insert(i, v),
                }
                if s.len() > SMALL_MAX {
                    let m = std::mem::take(s)
                        .into_iter()
                        .map(|a| (a.start, a))
                        .collect();
                    self.store = VmaStore::Big(m);
                }
            }
            VmaStore::Big(m) => {
                m.insert(v.start, v);
            }
        }
    }
    pub fn remove(&mut self, start: u64) -> Option<Vma> {
        match &mut self.store {
            VmaStore::Small(v) => v
                .binary_search_by_key(&start, |a| a.start)
                .ok()
                .map(|i| v.remove(i)),
            VmaStore::Big(m) => m.remove(&start),
        }
    }
    /// Split the VMA containing `addr` at `addr` (no-op at an edge). The upper
    /// piece gets `pgoff += offset`. Linux: mm/vma.c __split_vma().
    pub fn split_at(&mut self, addr: u64) {
        let Some(v) = self.find(addr).cloned() else {
            return;
        };
        if v.start == addr {
            return;
        }
        let mut lo = v.clone();
        lo.end = addr;
        let mut hi = v;
        hi.pgoff = hi.pgoff_at(addr);
        hi.start = addr;
        self.insert(lo);
        self.insert(hi);
    }
}

/// The attributes `vm_page_prot` gives a private anonymous VMA: never
/// writable (copy-on-write: write access is granted per PTE), PROT_NONE when
/// no access is allowed, executable with VM_EXEC.
/// Linux: mm/mmap.c vm_get_page_prot() over protection_map[] (PAGE_NONE,
/// PAGE_READONLY, PAGE_COPY, PAGE_*_EXEC).
pub fn vm_page_prot(flags: VmFlags) -> LeafFlags {
    if !flags.intersects(VM_ACCESS_FLAGS) {
        LeafFlags::PROTNONE
    } else if flags.contains(VmFlags::EXEC) {
        LeafFlags::EXEC
    } else {
        LeafFlags::empty()
    }
}

/// The attributes of a new anonymous page (or PMD THP) installed dirty
/// without a fault — a copied page, a collapsed THP: `vm_page_prot`
/// (PROT_NONE in a VMA without access), young, dirty, and writable when
/// the VMA is. Linux: maybe_mkwrite(pte_mkdirty(mk_pte(page,
/// vma->vm_page_prot))) in mm/userfaultfd.c mfill_atomic_install_pte(),
/// and its PMD form in mm/khugepaged.c collapse_huge_page().
pub fn dirty_anon_prot(flags: VmFlags) -> LeafFlags {
    let mut f = vm_page_prot(flags) | LeafFlags::YOUNG | LeafFlags::DIRTY;
    if flags.contains(VmFlags::WRITE) {
        f |= LeafFlags::WRITE;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(start: u64, end: u64, flags: VmFlags) -> Vma {
        Vma {
            start,
            end,
            flags,
            pgoff: start >> 12,
            anon_vma: None,
            fork_child: false,
            uffd_ctx: None,
        }
    }

    /// `first_start_in` and `any_in` answer what `starts_in`'s list gives:
    /// ranges starting before, inside, at the edges of and between VMAs.
    #[test]
    fn first_start_and_any_agree_with_the_list() {
        let mut t = VmaTree::default();
        for (k, (s, e)) in [(0x10, 0x20), (0x20, 0x28), (0x30, 0x40), (0x48, 0x50)]
            .into_iter()
            .enumerate()
        {
            let f = if k == 2 {
                VmFlags::SEALED
            } else {
                VmFlags::READ
            };
            t.insert(vma(s << 12, e << 12, f));
        }
        for a in 0..0x58u64 {
            for b in a..0x58u64 {
                let (start, end) = (a << 12, b << 12);
                let list = t.starts_in(start, end);
                assert_eq!(
                    t.first_start_in(start, end),
                    list.first().copied(),
                    "{a:#x}..{b:#x}"
                );
                assert_eq!(t.intersects(start, end), !list.is_empty());
                let sealed = list
                    .iter()
                    .any(|&s| t.get(s).unwrap().flags.contains(VmFlags::SEALED));
                assert_eq!(
                    t.any_in(start, end, |v| v.flags.contains(VmFlags::SEALED)),
                    sealed
                );
            }
        }
    }

    #[test]
    fn mnemonics_in_kernel_order() {
        let f = VmFlags::READ
            | VmFlags::WRITE
            | VmFlags::MAYREAD
            | VmFlags::MAYWRITE
            | VmFlags::MAYEXEC
            | VmFlags::ACCOUNT;
        // Checked on 6.18.44: a fresh rw anon mapping shows "rd wr mr mw me ac".
        assert_eq!(f.mnemonics().join(" "), "rd wr mr mw me ac");
        assert_eq!(
            (f | VmFlags::DONTCOPY | VmFlags::HUGEPAGE)
                .mnemonics()
                .join(" "),
            "rd wr mr mw me dc ac hg"
        );
        assert_eq!(f.perms(), "rw-p");
    }

    #[test]
    fn split_keeps_pgoff_contiguous() {
        let mut t = VmaTree::default();
        t.insert(vma(0x10000, 0x20000, VmFlags::READ));
        t.split_at(0x14000);
        let lo = t.find(0x10000).unwrap().clone();
        let hi = t.find(0x14000).unwrap().clone();
        assert_eq!((lo.start, lo.end), (0x10000, 0x14000));
        assert_eq!(hi.pgoff, lo.pgoff + lo.pages());
        assert_eq!(t.starts_in(0x12000, 0x16000), vec![0x10000, 0x14000]);
        assert!(t.find(0x20000).is_none());
        assert_eq!(t.find_vma(0x20000), None);
        assert_eq!(t.prev(0x14000).unwrap().start, 0x10000);
    }

    #[test]
    fn anon_vma_merge_rules() {
        assert!(anon_vma_compatible((None, false), (None, false)));
        assert!(anon_vma_compatible((Some(1), false), (None, false)));
        assert!(!anon_vma_compatible((Some(1), true), (None, false)));
        assert!(!anon_vma_compatible((Some(1), false), (Some(2), false)));
        assert!(flags_mergeable(
            VmFlags::READ,
            VmFlags::READ | VmFlags::SOFTDIRTY
        ));
        assert!(!flags_mergeable(
            VmFlags::READ | VmFlags::ACCOUNT,
            VmFlags::READ
        ));
    }

    /// The vector form of [`VmaTree`] (and its move to the B-tree past
    /// [`SMALL_MAX`] VMAs) against the B-tree form and against the plain
    /// ordered map the tree was before: random inserts, removes, splits
    /// and end changes over 120 slots (so that most vector trees cross the
    /// threshold), every query compared after each step.
    #[test]
    fn small_and_big_trees_answer_alike() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        const P: u64 = 4096;
        let step = (0u8..10, 0u64..120, 1u64..5, any::<u64>());
        let mut runner = TestRunner::new(Config::with_cases(64));
        runner
            .run(&prop::collection::vec(step, 1..300), |steps| {
                let mut small = VmaTree::default();
                let mut big = VmaTree::big();
                let mut reference: BTreeMap<u64, Vma> = BTreeMap::new();
                let ref_find = |r: &BTreeMap<u64, Vma>, a: u64| {
                    r.range(..=a)
                        .next_back()
                        .map(|(_, v)| v.clone())
                        .filter(|v| v.contains(a))
                };
                for (op, slot, len, q) in steps {
                    let a = slot * 4 * P;
                    match op {
                        // Insert where nothing overlaps.
                        0..=3 => {
                            let e = a + len * P;
                            let free = reference.values().all(|v| v.end <= a || e <= v.start);
                            if free {
                                let v = vma(a, e, VmFlags::READ);
                                small.insert(v.clone());
                                big.insert(v.clone());
                                reference.insert(a, v);
                            }
                        }
                        4 => {
                            let s = reference.range(a..).next().map(|(&k, _)| k).unwrap_or(a);
                            let r = reference.remove(&s);
                            prop_assert_eq!(small.remove(s), r.clone());
                            prop_assert_eq!(big.remove(s), r);
                        }
                        5 => {
                            let at = a + (q % 8) * P;
                            small.split_at(at);
                            big.split_at(at);
                            if let Some(v) = ref_find(&reference, at).filter(|v| v.start != at) {
                                let mut lo = v.clone();
                                lo.end = at;
                                let mut hi = v;
                                hi.pgoff = hi.pgoff_at(at);
                                hi.start = at;
                                reference.insert(lo.start, lo);
                                reference.insert(hi.start, hi);
                            }
                        }
                        8 => {
                            // Take out what munmap removes: the VMA
                            // containing `at`, then those starting in
                            // [at, end) (`end` may be at or below `at`).
                            let at = a + (q % 8) * P;
                            let end = at + (q / 8 % 24) * P;
                            let end = if q % 5 == 0 {
                                at.saturating_sub((q % 2) * P)
                            } else {
                                end
                            };
                            let mut want = Vec::new();
                            while let Some(k) =
                                ref_find(&reference, at).map(|v| v.start).or_else(|| {
                                    reference.range(at..end.max(at)).next().map(|(&k, _)| k)
                                })
                            {
                                want.push(reference.remove(&k).expect("present"));
                            }
                            if q % 3 == 0 {
                                prop_assert_eq!(&*small.take_in(at, end), &want[..]);
                                prop_assert_eq!(&*big.take_in(at, end), &want[..]);
                            } else {
                                // With the floor and ceiling an unmap
                                // then looks up: the reference's prev()
                                // and find_vma() after the removal.
                                let floor = reference
                                    .range(..at)
                                    .next_back()
                                    .map(|(_, v)| v)
                                    .filter(|v| v.end <= at)
                                    .map_or(0, |v| v.end);
                                let ceiling = reference
                                    .values()
                                    .find(|v| v.end > end)
                                    .map_or(0, |v| v.start);
                                let whole =
                                    want.len() == 1 && want[0].start == at && want[0].end == end;
                                for t in [&mut small, &mut big] {
                                    if q % 3 == 1 && whole {
                                        let got = t.take_whole(at, end, |_| true);
                                        prop_assert_eq!(
                                            got,
                                            Some((want[0].clone(), floor, ceiling))
                                        );
                                        continue;
                                    }
                                    if q % 3 == 1 {
                                        // Not one whole VMA: refused, nothing taken.
                                        let len = t.len();
                                        prop_assert_eq!(t.take_whole(at, end, |_| true), None);
                                        prop_assert_eq!(t.len(), len);
                                    }
                                    let (got, f, c) = t.take_in_bounded(at, end);
                                    prop_assert_eq!(&*got, &want[..]);
                                    prop_assert_eq!(
                                        (f, c),
                                        (floor, ceiling),
                                        "[{:#x}, {:#x})",
                                        at,
                                        end
                                    );
                                }
                            }
                        }
                        9 => {
                            // Change a VMA's flags through find_mut.
                            let at = a + (q % 8) * P;
                            let r = reference.range_mut(..=at).next_back().map(|(_, v)| v);
                            let r = r.filter(|v| v.contains(at));
                            let want = r.as_ref().map(|v| v.start);
                            if let Some(v) = r {
                                v.flags ^= VmFlags::WRITE;
                            }
                            for t in [&mut small, &mut big] {
                                let got = t.find_mut(at);
                                prop_assert_eq!(got.as_ref().map(|v| v.start), want);
                                if let Some(v) = got {
                                    v.flags ^= VmFlags::WRITE;
                                }
                            }
                        }
                        _ => {
                            // Shrink a VMA's end through get_mut.
                            if let Some(v) = ref_find(&reference, a).filter(|v| v.pages() > 1) {
                                let e = v.end - P;
                                reference.get_mut(&v.start).unwrap().end = e;
                                small.get_mut(v.start).unwrap().end = e;
                                big.get_mut(v.start).unwrap().end = e;
                            }
                        }
                    }
                    let want: Vec<Vma> = reference.values().cloned().collect();
                    for t in [&small, &big] {
                        prop_assert_eq!(t.iter().cloned().collect::<Vec<_>>(), want.clone());
                        prop_assert_eq!(t.len(), want.len());
                        let rev: Vec<&Vma> = t.iter().rev().collect();
                        prop_assert_eq!(rev, want.iter().rev().collect::<Vec<_>>());
                        prop_assert_eq!(
                            format!("{t:?}"),
                            format!("VmaTree {{ map: {reference:?} }}")
                        );
                        for probe in [a, a + P, a + (q % 16) * P, q % (500 * P)] {
                            // (Ends at or below the probe too: a VMA
                            // containing it still counts.)
                            let end = match q % 7 {
                                0 => probe.saturating_sub((q % 3) * P),
                                _ => probe + (q % 32) * P,
                            };
                            prop_assert_eq!(t.find(probe).cloned(), ref_find(&reference, probe));
                            prop_assert_eq!(t.get(probe).cloned(), reference.get(&probe).cloned());
                            let fv = ref_find(&reference, probe).or_else(|| {
                                reference.range(probe..).next().map(|(_, v)| v.clone())
                            });
                            prop_assert_eq!(t.find_vma(probe).cloned(), fv);
                            let pv = reference
                                .range(..probe)
                                .next_back()
                                .map(|(_, v)| v.clone())
                                .filter(|v| v.end <= probe);
                            prop_assert_eq!(t.prev(probe).cloned(), pv);
                            let mut starts: Vec<u64> = ref_find(&reference, probe)
                                .map(|v| v.start)
                                .into_iter()
                                .collect();
                            for (&k, _) in reference.range(probe..end.max(probe)) {
                                if starts.last() != Some(&k) {
                                    starts.push(k);
                                }
                            }
                            prop_assert_eq!(t.starts_in(probe, end), starts.clone());
                            prop_assert_eq!(t.first_start_in(probe, end), starts.first().copied());
                            prop_assert_eq!(
                                t.first_in(probe, end).cloned(),
                                starts.first().map(|k| reference[k].clone())
                            );
                            let odd = |v: &Vma| (v.start / P) % 3 == q % 3;
                            let any = starts.iter().any(|k| odd(&reference[k]));
                            prop_assert_eq!(t.any_in(probe, end, odd), any);
                        }
                    }
                }
                Ok(())
            })
            .unwrap();
    }
}
