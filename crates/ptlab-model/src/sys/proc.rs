//! What /proc shows of a process: the maps and smaps lines, and the
//! per-page pagemap/kpageflags/kpagecount state, built by walking the
//! page tables (the data types are crate::core::observe).
//!
//! Linux: fs/proc/task_mmu.c show_map_vma(), show_smap(), pagemap_read(),
//! pte_to_pagemap_entry(); fs/proc/page.c.

use crate::core::addr::{PAGE_SIZE, PMD_SIZE};
use crate::core::arch::{Entry, LeafFlags};
use crate::core::observe::{AnonPage, MapsEntry, NumaMapsEntry, Observation, PageRuns, PageState};
use crate::core::pgtable::PmdSlot;
use crate::mm::mm::Mm;
use crate::model::Model;
use crate::types::Pid;

impl Model {
    // ---- observation ------------------------------------------------------

    /// What /proc shows for process `pid`, labelled `label`.
    ///
    /// Costs in proportion to what is populated: the page tables are
    /// walked (a none PGD, PUD or PMD entry is skipped in one step), only
    /// 2 MiB slots holding a PTE table or a PMD leaf are looked at page by
    /// page, and every run of not-present pages is one record (see
    /// [`PageRuns`]). Linux: fs/proc/task_mmu.c pagemap_read() walks the
    /// same way (walk_page_range(), pagemap_pte_hole() for the holes).
    pub fn observe(&self, pid: Pid, label: &str) -> Observation {
        self.observe_with(pid, label, true)
    }

    /// [`Model::observe`] without the per-page records (`pages` is empty):
    /// maps, smaps counters, `VmLck` and the THP counters, at a cost in
    /// proportion to the leaves mapped (a PMD leaf is one step), not to the
    /// pages. What expectations on maps, smaps and counters read.
    pub fn observe_summary(&self, pid: Pid, label: &str) -> Observation {
        self.observe_with(pid, label, false)
    }

    /// The observation, with the per-page records when `pages` (the smaps
    /// counters then come from the same walk), else counted by leaves.
    fn observe_with(&self, pid: Pid, label: &str, pages: bool) -> Observation {
        let mut obs = Observation {
            process: label.to_string(),
            stats: self.phys.stats.to_map(),
            ..Default::default()
        };
        let Some(mm) = self.procs.get(&pid) else {
            return obs;
        };
        obs.vm_lck_kb = mm.locked_vm() * (PAGE_SIZE / 1024);
        for v in mm.vmas.iter() {
            let (rss_pages, anon_huge_pages) = if pages {
                self.observe_range(mm, v.start, v.end, &mut obs.pages)
            } else {
                self.count_rss(mm, v.start, v.end)
            };
            obs.maps.push(MapsEntry {
                start: v.start,
                end: v.end,
                perms: v.flags.perms(),
                vm_flags: v.flags.mnemonics(),
                anon_huge_kb: anon_huge_pages * 4,
                rss_kb: rss_pages * 4,
                lazyfree_kb: self.lazyfree_pages(mm, v.start, v.end) * 4,
            });
            obs.numa_maps.push(self.numa_maps_entry(mm, v.start, v.end));
        }
        obs
    }

    /// The numa_maps line of the VMA `[start, end)`: per present entry with
    /// a normal page, its node and precise mapcount (a PMD leaf: 512 pages
    /// and the head page's count). Linux: fs/proc/task_mmu.c
    /// gather_pte_stats(), gather_stats().
    fn numa_maps_entry(&self, mm: &Mm, start: u64, end: u64) -> NumaMapsEntry {
        let mut per_node = std::collections::BTreeMap::<u32, u64>::new();
        let (mut anon, mut mapmax) = (0, 0);
        mm.pt.for_each_leaf(start, end, |va, level, leaf| {
            let n = if level == 1 {
                if leaf.flags.contains(LeafFlags::SPECIAL) {
                    return;
                }
                1
            } else {
                if Some(leaf.pfn) == self.phys.huge_zero {
                    return;
                }
                ((va + PMD_SIZE).min(end) - va.max(start)) / PAGE_SIZE
            };
            anon += n;
            mapmax = mapmax.max(u64::from(self.phys.precise_mapcount(leaf.pfn)));
            *per_node.entry(self.phys.node_of(leaf.pfn)).or_default() += n;
        });
        NumaMapsEntry {
            start,
            policy: "default".into(),
            anon,
            mapmax,
            nodes: per_node.into_iter().collect(),
        }
    }

    /// (present anon pages, of which PMD-mapped) in `[start, end)`, by
    /// leaves: the pages [`Model::observe`] reports as `Anon` (not the zero
    /// page, not the huge zero folio).
    fn count_rss(&self, mm: &Mm, start: u64, end: u64) -> (u64, u64) {
        let (mut rss, mut huge) = (0, 0);
        mm.pt.for_each_leaf(start, end, |va, level, leaf| {
            if level == 1 {
                rss += u64::from(!leaf.flags.contains(LeafFlags::SPECIAL));
            } else if Some(leaf.pfn) != self.phys.huge_zero {
                let n = ((va + PMD_SIZE).min(end) - va.max(start)) / PAGE_SIZE;
                rss += n;
                huge += n;
            }
        });
        (rss, huge)
    }

    /// [`Model::observe`] the slow way: every virtual page of every VMA
    /// looked up on its own (time in proportion to the size of the VMAs;
    /// the result is the same). The reference the page-table walk is
    /// checked against; not for big mappings.
    pub fn observe_dense(&self, pid: Pid, label: &str) -> Observation {
        let mut obs = self.observe(pid, label);
        obs.pages = PageRuns::new();
        if let Some(mm) = self.procs.get(&pid) {
            for v in mm.vmas.iter() {
                for page in crate::mm::mm::pages(v.start, v.end) {
                    obs.pages.push(page, self.page_state(mm, page));
                }
            }
        }
        obs
    }

    /// The pages of `[start, end)` that lie inside VMAs, as [`Model::observe`]
    /// reports them (a cheaper query for a range).
    pub fn observe_pages(&self, pid: Pid, start: u64, end: u64) -> PageRuns {
        let mut out = PageRuns::new();
        let Some(mm) = self.procs.get(&pid) else {
            return out;
        };
        let start = start & !(PAGE_SIZE - 1);
        for s in mm.vmas.starts_in(start, end) {
            let v = mm.vmas.get(s).expect("vma");
            let (a, b) = (v.start.max(start), v.end.min(end));
            if a < b {
                self.observe_range(mm, a, b, &mut out);
            }
        }
        out
    }

    /// Appends the pages of `[start, end)` (inside one VMA) to `out`;
    /// returns (present anon pages, of which PMD-mapped).
    fn observe_range(&self, mm: &Mm, start: u64, end: u64, out: &mut PageRuns) -> (u64, u64) {
        // Slots that can hold anything other than none: PTE tables (which
        // hold every non-present entry too: swap entries, guard markers)
        // and PMD leaves.
        let slots = mm.pt.populated_slots(start, end);
        let (mut rss, mut huge) = (0, 0);
        let mut cur = start;
        for slot in slots {
            let (a, b) = (slot.max(start), (slot + PMD_SIZE).min(end));
            if a >= b {
                continue;
            }
            out.push_none(cur, a);
            for page in crate::mm::mm::pages(a, b) {
                let state = self.page_state(mm, page);
                if let PageState::Anon(x) = &state {
                    rss += 1;
                    if x.pmd_mapped {
                        huge += 1;
                    }
                }
                out.push(page, state);
            }
            cur = b;
        }
        out.push_none(cur, end);
        (rss, huge)
    }

    /// smaps `LazyFree` of `[start, end)` in pages: every present page of
    /// an anon folio whose PG_swapbacked is clear (drained from the
    /// lazyfree batch) and that is clean, in its mapping and its folio.
    /// Linux: fs/proc/task_mmu.c smaps_account().
    fn lazyfree_pages(&self, mm: &Mm, start: u64, end: u64) -> u64 {
        let mut n = 0;
        mm.pt.for_each_leaf(start, end, |_, level, leaf| {
            if leaf.flags.contains(LeafFlags::SPECIAL) || Some(leaf.pfn) == self.phys.huge_zero {
                return;
            }
            let Some(folio) = self.phys.folio_of(leaf.pfn) else {
                return;
            };
            if self.phys.lazyfree_visible(folio)
                && !leaf.flags.contains(LeafFlags::DIRTY)
                && !self.phys.folio_dirty(folio)
            {
                n += if level == 2 { PMD_SIZE / PAGE_SIZE } else { 1 };
            }
        });
        n
    }

    /// pagemap + kpageflags + kpagecount for one page.
    /// Linux: fs/proc/task_mmu.c pte_to_pagemap_entry(), pagemap_pmd_range();
    /// fs/proc/page.c stable_page_flags(), kpagecount_read().
    fn page_state(&self, mm: &Mm, va: u64) -> PageState {
        let (leaf, pmd_mapped, pfn) = match mm.pt.pmd(va) {
            PmdSlot::None => return PageState::NotPresent,
            PmdSlot::Leaf(l) => {
                let idx = (va & (PMD_SIZE - 1)) >> 12;
                (l, true, l.pfn.add(idx))
            }
            PmdSlot::Table(_) => match mm.pt.pte_peek(va) {
                Entry::Leaf(l) => (l, false, l.pfn),
                Entry::Swap(s) => {
                    return PageState::Swapped {
                        ty: s.ty,
                        offset: s.offset,
                    }
                }
                // pte_to_pagemap_entry(): a guard marker reads PM_SWAP |
                // PM_GUARD_REGION.
                Entry::Marker(m) if m.is_guard() => return PageState::Guard,
                _ => return PageState::NotPresent,
            },
        };
        if leaf.flags.contains(LeafFlags::SPECIAL) && !pmd_mapped {
            return PageState::Zero;
        }
        if let Some(hz) = self.phys.huge_zero {
            if pmd_mapped && leaf.pfn == hz {
                return PageState::HugeZero {
                    index: (pfn.0 - hz.0) as u32,
                };
            }
        }
        let folio = self
            .phys
            .folio_of(pfn)
            .expect("mapped page belongs to a folio");
        // PMD-mapped: pagemap uses the head page's precise mapcount for all entries.
        let x_page = if pmd_mapped { folio.head } else { pfn };
        PageState::Anon(AnonPage {
            pfn: pfn.0,
            order: folio.order.0,
            index: folio.index_of(pfn) as u32,
            pmd_mapped,
            mmap_exclusive: self.phys.precise_mapcount(x_page) == 1,
            anon_exclusive: self.phys.anon_exclusive(folio.head),
            mapcount: self.phys.precise_mapcount(pfn),
            tag: self.phys.tag(pfn),
        })
    }
}
