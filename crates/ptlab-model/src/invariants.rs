//! The invariant checker: recompute every counter the model keeps from the
//! page tables and compare.
//!
//! Checked: per-page PTE mapcounts, entire (PMD) mapcounts, large
//! mapcounts, pages-mapped counts, per-mm mapping counts, refcounts
//! (one per mapping — the model takes no pins), RSS per mm, that every
//! allocated folio is mapped (no leaks), that every present entry lies
//! inside a VMA, that VMAs are sorted, non-overlapping and page-aligned,
//! that table `used` counts are right and every table is reachable,
//! deposited tables exist exactly for anon/huge-zero PMD leaves, that
//! AnonExclusive pages are mapped by at most one mm, that arm64
//! contiguous blocks are well formed, and that a userfaultfd-registered VMA
//! names an open context of its own mm.

use crate::core::addr::Pfn;
use crate::core::addr::{HPAGE_PMD_NR, PAGE_SIZE};
use crate::core::arch::{Entry, LeafFlags};
use crate::core::pgtable::PmdSlot;
use crate::model::Model;
use crate::types::Pid;
use std::collections::BTreeMap;

#[derive(Default, Clone)]
struct Seen {
    page_maps: BTreeMap<u64, u32>,
    /// Processes mapping each page with a PTE.
    page_mms: BTreeMap<u64, std::collections::BTreeSet<Pid>>,
    /// Processes mapping the folio with a PMD.
    pmd_mms: std::collections::BTreeSet<Pid>,
    entire: u32,
    total: u32,
    per_mm: BTreeMap<Pid, u32>,
}

pub fn check(model: &Model) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    let phys = &model.phys;
    let mut folios: BTreeMap<u64, Seen> = BTreeMap::new();
    let mut pt_pages = 0u64;
    for (&pid, mm) in &model.procs {
        // VMAs sorted, aligned, non-overlapping.
        let mut last_end = 0;
        for v in mm.vmas.iter() {
            if v.start % PAGE_SIZE != 0 || v.end % PAGE_SIZE != 0 || v.start >= v.end {
                errs.push(format!(
                    "pid {pid}: malformed VMA {:#x}-{:#x}",
                    v.start, v.end
                ));
            }
            if v.start < last_end {
                errs.push(format!(
                    "pid {pid}: VMA {:#x} overlaps the previous one",
                    v.start
                ));
            }
            last_end = v.end;
            // A registered VMA points at an open userfaultfd of its own mm
            // (the kernel's !!vm_userfaultfd_ctx == !!(vm_flags & __VM_UFFD_FLAGS)).
            if v.flags.intersects(crate::core::vma::VM_UFFD_FLAGS) {
                let ok = v
                    .uffd_ctx()
                    .and_then(|c| model.uffd.get(c))
                    .is_some_and(|c| c.mm == pid);
                if !ok {
                    errs.push(format!(
                        "pid {pid}: VMA {:#x} is uffd-registered without a context of its mm",
                        v.start
                    ));
                }
            }
        }
        errs.extend(crate::mm::marker::check(pid, mm));
        // The walks for swap entries and markers skip an mm whose sticky
        // flag is clear: it must be set whenever one exists.
        if !mm.pt.maybe_nonpresent() && mm.pt.any_nonpresent_stored() {
            errs.push(format!(
                "pid {pid}: a swap entry or PTE marker is stored but the mm's non-present flag is clear"
            ));
        }
        // Tables: used counts, reachability.
        let tree = mm.pt.tables_in_tree();
        if tree.len() != mm.pt.table_count() {
            errs.push(format!(
                "pid {pid}: {} tables allocated but {} reachable",
                mm.pt.table_count(),
                tree.len()
            ));
        }
        for (t, level, _) in &tree {
            let tbl = mm.pt.table(*t).expect("reachable table exists");
            let used = (0..crate::core::addr::PTRS_PER_TABLE)
                .filter(|&i| !matches!(mm.pt.arch().decode(*level, tbl.raw(i)), Entry::None))
                .count();
            if used != tbl.used as usize {
                errs.push(format!(
                    "pid {pid}: table {t} level {level} counts {} used entries, has {used}",
                    tbl.used
                ));
            }
        }
        pt_pages += tree.len() as u64 + mm.deposited.len() as u64;
        // Leaves.
        let mut rss = 0u64;
        let leaves = mm.pt.leaves(0, u64::MAX);
        for &(va, level, leaf) in &leaves {
            let span = if level == 2 {
                crate::core::addr::PMD_SIZE
            } else {
                PAGE_SIZE
            };
            match mm.vmas.find(va) {
                Some(v) if va + span <= v.end => {}
                _ => errs.push(format!(
                    "pid {pid}: present entry at {va:#x} (level {level}) outside any VMA"
                )),
            }
            if level == 2 {
                if !mm.deposited.contains_key(&va) {
                    errs.push(format!(
                        "pid {pid}: PMD leaf at {va:#x} without a deposited page table"
                    ));
                }
                if Some(leaf.pfn) == phys.huge_zero {
                    continue;
                }
                let Some(f) = phys.folio_of(leaf.pfn) else {
                    errs.push(format!(
                        "pid {pid}: PMD at {va:#x} maps unallocated frame {}",
                        leaf.pfn
                    ));
                    continue;
                };
                if f.head != leaf.pfn || f.order.0 != 9 {
                    errs.push(format!(
                        "pid {pid}: PMD at {va:#x} does not map a whole order-9 folio"
                    ));
                }
                let s = folios.entry(f.head.0).or_default();
                s.entire += 1;
                s.pmd_mms.insert(pid);
                s.total += 1;
                *s.per_mm.entry(pid).or_default() += 1;
                rss += HPAGE_PMD_NR;
            } else {
                if leaf.flags.contains(LeafFlags::SPECIAL) {
                    if leaf.pfn != phys.zero_pfn {
                        errs.push(format!(
                            "pid {pid}: special PTE at {va:#x} is not the zero page"
                        ));
                    }
                    continue;
                }
                let Some(f) = phys.folio_of(leaf.pfn) else {
                    errs.push(format!(
                        "pid {pid}: PTE at {va:#x} maps unallocated frame {}",
                        leaf.pfn
                    ));
                    continue;
                };
                let s = folios.entry(f.head.0).or_default();
                *s.page_maps.entry(leaf.pfn.0).or_default() += 1;
                s.page_mms.entry(leaf.pfn.0).or_default().insert(pid);
                s.total += 1;
                *s.per_mm.entry(pid).or_default() += 1;
                rss += 1;
            }
        }
        if rss != mm.rss_anon {
            errs.push(format!(
                "pid {pid}: RSS counter {} but page tables map {rss} anon pages",
                mm.rss_anon
            ));
        }
        if mm.pt.arch().cont_ptes().is_some() {
            check_cont_blocks(pid, &leaves, phys, &mut errs);
        }
    }
    if pt_pages != phys.pt_pages {
        errs.push(format!(
            "{} page-table pages allocated, {pt_pages} in use",
            phys.pt_pages
        ));
    }
    // Swap slots, counts and the swap cache.
    crate::sys::swap::check(&model.procs, phys, &mut errs);
    // Order-0 swap-cache folios (a large one knows its own slots).
    let swap_cached: std::collections::BTreeSet<u64> = phys
        .swap
        .slots
        .values()
        .filter_map(|s| s.cache.map(|p| p.0))
        .collect();
    // Compare with the counters.
    for (&head, seen) in &folios {
        let f = phys.folio_of(Pfn(head)).expect("checked above");
        // The swap cache holds one reference per page (crate::sys::swap).
        let cache_refs = if f.is_large() {
            phys.swapcache_refs(f)
        } else {
            u32::from(swap_cached.contains(&head))
        };
        let rc = phys.refcount(f) - cache_refs;
        if rc != seen.total {
            errs.push(format!(
                "folio {head:#x}: refcount {rc}, mappings {}",
                seen.total
            ));
        }
        for i in 0..f.nr_pages() {
            let pfn = Pfn(head + i);
            let want = seen.page_maps.get(&pfn.0).copied().unwrap_or(0);
            if phys.page_mapcount(pfn) != want {
                errs.push(format!(
                    "page {pfn}: mapcount {} but {want} PTEs map it",
                    phys.page_mapcount(pfn)
                ));
            }
            // An exclusive page is mapped by one mm only (for a PMD-mapped
            // folio the head's flag stands for every page).
            let mut mms = seen.page_mms.get(&pfn.0).cloned().unwrap_or_default();
            mms.extend(seen.pmd_mms.iter().copied());
            let exclusive = phys.anon_exclusive(pfn) && (seen.pmd_mms.is_empty() || i == 0);
            if exclusive && mms.len() > 1 {
                errs.push(format!(
                    "page {pfn}: AnonExclusive but mapped by {} mms",
                    mms.len()
                ));
            }
        }
        if let Some(l) = phys.large(f.head) {
            if l.entire_mapcount != seen.entire {
                errs.push(format!(
                    "folio {head:#x}: entire mapcount {} but {} PMDs",
                    l.entire_mapcount, seen.entire
                ));
            }
            if l.large_mapcount != seen.total {
                errs.push(format!(
                    "folio {head:#x}: large mapcount {} but {} mappings",
                    l.large_mapcount, seen.total
                ));
            }
            let mapped = seen.page_maps.len() as u32;
            if l.nr_pages_mapped != mapped {
                errs.push(format!(
                    "folio {head:#x}: nr_pages_mapped {} but {mapped}",
                    l.nr_pages_mapped
                ));
            }
            let mut mm_maps: Vec<(Pid, u32)> = l.mm_maps.clone();
            mm_maps.sort();
            let want: Vec<(Pid, u32)> = seen.per_mm.iter().map(|(&p, &n)| (p, n)).collect();
            if mm_maps != want {
                errs.push(format!(
                    "folio {head:#x}: per-mm maps {mm_maps:?} but page tables say {want:?}"
                ));
            }
        }
    }
    // No leaks: every allocated anon folio is mapped somewhere.
    for (head, l) in phys.large_folios() {
        if l.kind == crate::core::folio::FolioKind::Anon
            && !folios.contains_key(&head.0)
            && l.swap.is_none()
        {
            errs.push(format!(
                "large folio {head} (order {}) is allocated but unmapped",
                l.order.0
            ));
        }
    }
    for pfn in phys.small_folios() {
        if !folios.contains_key(&pfn.0) && !swap_cached.contains(&pfn.0) {
            errs.push(format!("small folio {pfn} is allocated but unmapped"));
        }
    }
    // Page contents beyond the tag belong to allocated anon pages only
    // (a freed frame's bytes are forgotten, the zero pages hold none).
    for pfn in phys.contents.frames() {
        let f = phys.folio_of(Pfn(pfn));
        let zero = Pfn(pfn) == phys.zero_pfn
            || phys
                .huge_zero
                .is_some_and(|h| (h.0..h.0 + 512).contains(&pfn));
        if f.is_none() || zero {
            errs.push(format!(
                "frame {pfn:#x} has page contents but is {}",
                if zero {
                    "a zero page"
                } else {
                    "not an allocated folio page"
                }
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// arm64: every CONT entry belongs to an aligned block of 16 CONT entries
/// mapping 16 contiguous, aligned frames of one folio with equal attributes.
fn check_cont_blocks(
    pid: Pid,
    leaves: &[(u64, u8, crate::core::arch::Leaf)],
    phys: &crate::core::folio::PhysMem,
    errs: &mut Vec<String>,
) {
    // Only valid entries form blocks (pte_valid_cont()): set_ptes() paints
    // CONT on PROT_NONE entries too, and single-entry writes leave such
    // entries alone, so CONT on a PROT_NONE entry carries no constraint.
    let by_va: BTreeMap<u64, crate::core::arch::Leaf> = leaves
        .iter()
        .filter(|l| l.1 == 1 && !l.2.flags.contains(LeafFlags::PROTNONE))
        .map(|l| (l.0, l.2))
        .collect();
    for (&va, leaf) in &by_va {
        if !leaf.flags.contains(LeafFlags::CONT) || va % (16 * PAGE_SIZE) != 0 {
            continue;
        }
        let ok = (0..16u64).all(|k| {
            by_va.get(&(va + k * PAGE_SIZE)).is_some_and(|l| {
                l.flags.contains(LeafFlags::CONT)
                    && l.pfn.0 == leaf.pfn.0 + k
                    && l.fold_key() == leaf.fold_key()
            })
        }) && leaf.pfn.0 % 16 == 0
            && phys.folio_of(leaf.pfn).is_some_and(|f| {
                f.head.0 <= leaf.pfn.0 && leaf.pfn.0 + 16 <= f.head.0 + f.nr_pages()
            });
        if !ok {
            errs.push(format!("pid {pid}: malformed contiguous block at {va:#x}"));
        }
    }
    for (&va, leaf) in &by_va {
        if leaf.flags.contains(LeafFlags::CONT) {
            let start = va & !(16 * PAGE_SIZE - 1);
            if !by_va
                .get(&start)
                .is_some_and(|l| l.flags.contains(LeafFlags::CONT))
            {
                errs.push(format!(
                    "pid {pid}: CONT entry at {va:#x} outside a folded block"
                ));
            }
        }
    }
    let _ = PmdSlot::None;
}

impl crate::model::Model {
    /// Recompute counters from the page tables and compare; `Err` lists every mismatch.
    pub fn check_invariants(&self) -> Result<(), Vec<String>> {
        check(self)
    }
}

#[cfg(test)]
mod tests {
    use crate::{MapFlags, Model, ModelConfig, Prot};

    fn populated() -> Model {
        let mut m = Model::new(ModelConfig::default());
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, 0x7f00_0000_0000, 0x10000, Prot::READ | Prot::WRITE, f)
            .unwrap();
        m.write(1, 0x7f00_0000_0000, 1).unwrap();
        m
    }

    #[test]
    fn clean_model_passes() {
        assert_eq!(populated().check_invariants(), Ok(()));
    }

    /// The sticky non-present flag: set by a swap-out and a guard
    /// install, set in a fork child that receives such entries, clear in
    /// an mm that never had one; the checker finds a flag cleared under a
    /// stored entry.
    #[test]
    fn nonpresent_flag_follows_swap_guard_and_fork() {
        use crate::Advice;
        const A: u64 = 0x7f00_0000_0000;
        for arch in crate::core::arch::ArchKind::ALL {
            for advice in [Advice::PageOut, Advice::GuardInstall] {
                let mut m = Model::new(ModelConfig {
                    arch,
                    ..ModelConfig::default()
                });
                m.set_swap(16 << 20).unwrap();
                let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
                m.mmap(1, A, 0x10000, Prot::READ | Prot::WRITE, f).unwrap();
                // A child forked before the writes (MADV_PAGEOUT skips a
                // folio mapped by two processes).
                let clean = m.fork(1).unwrap();
                m.write(1, A, 1).unwrap();
                m.write(1, A + 0x1000, 2).unwrap();
                assert!(!m.mm(1).unwrap().pt.maybe_nonpresent());
                assert!(!m.mm(clean).unwrap().pt.maybe_nonpresent());
                m.madvise(1, A, 0x2000, advice).unwrap();
                let pt = &m.mm(1).unwrap().pt;
                assert!(pt.any_nonpresent_stored(), "{arch:?} {advice:?}");
                assert!(pt.maybe_nonpresent(), "{arch:?} {advice:?}");
                assert!(!m.mm(clean).unwrap().pt.maybe_nonpresent());
                let child = m.fork(1).unwrap();
                let cpt = &m.mm(child).unwrap().pt;
                assert!(cpt.any_nonpresent_stored(), "{arch:?} {advice:?} child");
                assert!(cpt.maybe_nonpresent(), "{arch:?} {advice:?} child");
                m.check_invariants().unwrap();
                m.mm(child).unwrap().pt.forget_nonpresent();
                let errs = m.check_invariants().unwrap_err();
                assert!(
                    errs.iter().any(|e| e.contains("non-present flag")),
                    "{errs:?}"
                );
            }
        }
    }

    #[test]
    fn detects_refcount_drift() {
        let mut m = populated();
        let pfn = m.mm(1).unwrap().pt.leaves(0, u64::MAX)[0].2.pfn;
        let f = m.phys.folio_of(pfn).unwrap();
        m.phys.ref_add(f, 1);
        let errs = m.check_invariants().unwrap_err();
        assert!(errs.iter().any(|e| e.contains("refcount")), "{errs:?}");
    }

    #[test]
    fn detects_rss_drift_and_leaks() {
        let mut m = populated();
        m.procs.get_mut(&1).unwrap().rss_anon += 1;
        let _leak = m.phys.alloc_anon_folio(crate::Order(0)).unwrap();
        let errs = m.check_invariants().unwrap_err();
        assert!(errs.iter().any(|e| e.contains("RSS")), "{errs:?}");
        assert!(
            errs.iter().any(|e| e.contains("allocated but unmapped")),
            "{errs:?}"
        );
    }
}
