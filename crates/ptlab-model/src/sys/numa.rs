//! Automatic NUMA balancing: the machine's nodes, the node a process runs
//! on, and one scan pass that turns PTEs into NUMA-hinting entries. The
//! hinting faults and migrations are crate::mm::numa; numa_maps is built
//! with the observation (crate::core::observe::numa_maps()).
//!
//! Linux: kernel/sched/fair.c task_numa_work(); mm/mprotect.c
//! change_prot_numa() → change_protection(MM_CP_PROT_NUMA) (the skip rules
//! are in crate::sys::mprotect, prot_numa_skip()); drivers/base/node.c,
//! mm/page_alloc.c (node-local allocation).

use crate::core::addr::{page_align, PAGE_SIZE};
use crate::core::hw::HwEvent;
use crate::core::phys::MAX_NODES;
use crate::core::stats::VmEvent;
use crate::core::vma::{vm_page_prot, VmFlags, VM_ACCESS_FLAGS};
use crate::mm::batch::Before;
use crate::model::Model;
use crate::sys::mprotect::{change_protection, ChangeProt, NumaTarget};
use crate::types::errno::Errno;
use crate::types::Pid;

impl Model {
    /// The machine's NUMA nodes: memory split into `nodes` equal slices,
    /// node 0 lowest (`machine nodes N`, `--nodes N`). EINVAL outside
    /// 1..=64; EBUSY when memory already in use would change node (set it
    /// before the scenario populates memory).
    pub fn set_nodes(&mut self, nodes: u32) -> Result<(), Errno> {
        if !(1..=MAX_NODES).contains(&nodes) {
            return Err(Errno::EINVAL);
        }
        if nodes == self.phys.nodes() {
            return Ok(());
        }
        if !self.phys.set_nodes(nodes) {
            return Err(Errno::EBUSY);
        }
        self.cfg.nodes = nodes;
        for mm in self.procs.values_mut() {
            mm.numa_node = mm.numa_node.min(nodes - 1);
        }
        Ok(())
    }

    /// NUMA nodes of the machine.
    pub fn nodes(&self) -> u32 {
        self.phys.nodes()
    }

    /// The node a frame belongs to.
    pub fn node_of(&self, pfn: crate::core::addr::Pfn) -> u32 {
        self.phys.node_of(pfn)
    }

    /// Process `pid` runs from now on: its node is `numa_node_id()` for the
    /// allocations that follow.
    pub(crate) fn enter(&mut self, pid: Pid) {
        if let Some(mm) = self.procs.get(&pid) {
            self.phys.set_local_node(mm.numa_node);
        }
    }

    /// The process moves to a CPU of `node` (sched_setaffinity() to that
    /// node's CPUs): its later faults allocate there first, and its NUMA
    /// scans and hinting faults take `node` as local. EINVAL for a node the
    /// machine does not have (an affinity mask with no online CPU).
    pub fn numa_run_on(&mut self, pid: Pid, node: u32) -> Result<(), Errno> {
        if node >= self.phys.nodes() {
            return Err(Errno::EINVAL);
        }
        let mm = self.procs.get_mut(&pid).ok_or(Errno::ESRCH)?;
        mm.numa_node = node;
        self.phys.set_local_node(node);
        Ok(())
    }

    /// Whether `addr` of process `pid` is mapped by a NUMA-hinting entry
    /// (PTE or PMD; see crate::mm::numa::is_hinting()).
    pub(crate) fn is_hinting_at(&self, pid: Pid, addr: u64) -> bool {
        use crate::core::arch::Entry;
        use crate::core::pgtable::PmdSlot;
        let Some(mm) = self.procs.get(&pid) else {
            return false;
        };
        let Some(vma) = mm.vmas.find(addr) else {
            return false;
        };
        let leaf = match mm.pt.pmd(addr) {
            PmdSlot::Leaf(l) => l,
            PmdSlot::Table(_) => match mm.pt.pte_peek(addr) {
                Entry::Leaf(l) => l,
                _ => return false,
            },
            PmdSlot::None => return false,
        };
        crate::mm::numa::is_hinting(vma, leaf)
    }

    /// The node process `pid` runs on.
    pub fn numa_node_of(&self, pid: Pid) -> Option<u32> {
        self.procs.get(&pid).map(|mm| mm.numa_node)
    }

    /// One pass of automatic NUMA balancing's scanner over
    /// `[addr, addr + len)` of process `pid`: every VMA there that is
    /// migratable and accessible gets change_prot_numa() over its part of
    /// the range, turning present PTEs (and whole PMD mappings) into
    /// NUMA-hinting entries except where prot_numa_skip() says no. Returns
    /// the pages changed (`numa_pte_updates`). task_numa_work()'s pacing —
    /// the scan period, `numa_balancing_scan_size_mb`, the per-VMA access
    /// history, the 2 MiB rounding of each chunk — is not modelled: the
    /// statement is the pass those let through.
    /// EINVAL for an unaligned `addr` or a process that does not exist;
    /// 0 when nothing in the range is scanned.
    /// Linux: kernel/sched/fair.c task_numa_work(); mm/mprotect.c
    /// change_prot_numa().
    pub fn numa_scan(&mut self, pid: Pid, addr: u64, len: u64) -> Result<u64, Errno> {
        if !addr.is_multiple_of(PAGE_SIZE) || !self.procs.contains_key(&pid) {
            return Err(Errno::EINVAL);
        }
        let Some(end) = page_align(len).and_then(|l| addr.checked_add(l)) else {
            return Err(Errno::EINVAL);
        };
        let batched = !self.cfg.before.contains(Before::MPROTECT_PTE_BATCH);
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("checked");
        // The task is single-threaded and every model VMA private:
        // target_node = numa_node_id() (change_pte_range()).
        let numa = NumaTarget {
            target_node: Some(mm.numa_node),
        };
        mm.pt.hw.one(HwEvent::VmaLookup); // vma_iter_init() / for_each_vma
        let vmas: Vec<_> = mm
            .vmas
            .iter()
            .filter(|v| v.end > addr && v.start < end)
            .cloned()
            .collect();
        let mut total = 0;
        for vma in vmas {
            // vma_migratable() (no VM_IO/VM_PFNMAP here), vma_policy_mof()
            // (the default policy has MPOL_F_MOF), no hugetlb, no
            // VM_MIXEDMAP; then "Skip inaccessible VMAs to avoid any
            // confusion between PROT_NONE and NUMA hinting PTEs".
            if !vma.flags.intersects(VM_ACCESS_FLAGS) {
                continue;
            }
            let cp = ChangeProt {
                // change_protection(): MM_CP_PROT_NUMA → PAGE_NONE.
                prot: vm_page_prot(VmFlags::empty()),
                try_writable: false,
                batched,
                prot_numa: Some(numa),
                stretch: false,
            };
            let s = vma.start.max(addr);
            let e = vma.end.min(end);
            let pages = change_protection(mm, phys, &vma, s, e, cp);
            if pages > 0 {
                phys.stats.vm(VmEvent::NumaPteUpdates, pages as i64);
            }
            total += pages;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arch::{Entry, Leaf, LeafFlags};
    use crate::{ArchKind, MapFlags, ModelConfig, Prot, ThpKnob, ThpMode};

    const B: u64 = 0x7f00_0000_0000;
    const P: u64 = PAGE_SIZE;
    const RW: Prot = Prot::READ.union(Prot::WRITE);

    fn model(arch: ArchKind, nodes: u32) -> Model {
        let mut cfg = ModelConfig::for_arch(arch).with_memory(1 << 30);
        cfg.nodes = nodes;
        Model::new(cfg)
    }

    fn map(m: &mut Model, addr: u64, len: u64) {
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, addr, len, RW, f).unwrap();
    }

    fn leaf(m: &Model, addr: u64) -> Leaf {
        match m.mm(1).unwrap().pt.pte(addr) {
            Entry::Leaf(l) => l,
            e => panic!("{addr:#x}: {e:?}"),
        }
    }

    fn stat(m: &Model, k: &str) -> i64 {
        m.observe(1, "t").stats[&format!("vmstat/{k}")]
    }

    fn both(f: impl Fn(ArchKind, Before)) {
        for arch in ArchKind::ALL {
            for before in [Before::empty(), Before::MPROTECT_PTE_BATCH] {
                f(arch, before);
            }
        }
    }

    #[test]
    fn nodes_split_memory_and_faults_allocate_locally() {
        let mut m = model(ArchKind::X86_64, 2);
        assert_eq!(m.nodes(), 2);
        map(&mut m, B, 4 * P);
        m.write(1, B, 1).unwrap();
        m.numa_run_on(1, 1).unwrap();
        m.write(1, B + P, 2).unwrap();
        assert_eq!(m.node_of(leaf(&m, B).pfn), 0);
        assert_eq!(m.node_of(leaf(&m, B + P).pfn), 1);
        assert_eq!(m.numa_run_on(1, 2), Err(Errno::EINVAL));
        assert_eq!(m.set_nodes(0), Err(Errno::EINVAL));
        // Node 1 is in use: the layout is fixed now.
        assert_eq!(m.set_nodes(4), Err(Errno::EBUSY));
        m.check_invariants().unwrap();
    }

    #[test]
    fn scan_makes_hinting_entries_and_the_fault_restores_them() {
        both(|arch, before| {
            let mut m = model(arch, 2);
            m.set_before(before);
            map(&mut m, B, 64 * P);
            m.access_range(1, B, 64 * P, true, None).unwrap();
            // The pages are on node 0 where the task runs: all skipped.
            assert_eq!(m.numa_scan(1, B, 64 * P), Ok(0));
            assert!(!leaf(&m, B).flags.contains(LeafFlags::PROTNONE));
            // From node 1 every page is remote: 64 hinting entries.
            m.numa_run_on(1, 1).unwrap();
            assert_eq!(m.numa_scan(1, B, 64 * P), Ok(64), "{arch:?} {before:?}");
            let l = leaf(&m, B);
            assert!(l.flags.contains(LeafFlags::PROTNONE) && !l.write());
            assert_eq!(stat(&m, "numa_pte_updates"), 64);
            // Still present in pagemap, and a second pass skips them all.
            assert_eq!(m.numa_scan(1, B, 64 * P), Ok(0));
            // Back on node 0: the fault is local, restores the entry
            // (writable again: the page is AnonExclusive), migrates nothing.
            m.numa_run_on(1, 0).unwrap();
            assert_eq!(m.read(1, B + 3 * P), Ok(B + 3 * P));
            let l = leaf(&m, B + 3 * P);
            assert!(
                !l.flags.contains(LeafFlags::PROTNONE)
                    && l.write()
                    && l.flags.contains(LeafFlags::YOUNG)
            );
            assert_eq!(stat(&m, "numa_hint_faults"), 1);
            assert_eq!(stat(&m, "numa_hint_faults_local"), 1);
            assert_eq!(stat(&m, "numa_pages_migrated"), 0);
            m.check_invariants().unwrap();
        });
    }

    /// A hinting entry's descriptor: x86-64 `_PAGE_PROTNONE` (bit 8) with
    /// `_PAGE_PRESENT` (bit 0) and `_PAGE_RW` clear; arm64 `PTE_PROT_NONE` =
    /// `PTE_PRESENT_INVALID` (bit 11, nG's position) with `PTE_VALID` (bit 0)
    /// clear, the frame kept. Linux: arch/x86/include/asm/pgtable_types.h,
    /// arch/arm64/include/asm/pgtable-prot.h, pte_protnone().
    #[test]
    fn hinting_entries_are_encoded_per_arch() {
        for arch in ArchKind::ALL {
            let mut m = model(arch, 2);
            map(&mut m, B, P);
            m.write(1, B, 1).unwrap();
            let before = leaf(&m, B);
            m.numa_run_on(1, 1).unwrap();
            assert_eq!(m.numa_scan(1, B, P), Ok(1));
            let l = leaf(&m, B);
            assert_eq!(l.pfn, before.pfn);
            let raw = m.mm(1).unwrap().pt.arch().encode_leaf(1, l);
            assert_eq!(raw & 1, 0, "{arch:?}: not valid/present");
            match arch {
                ArchKind::X86_64 => {
                    assert_ne!(raw & (1 << 8), 0, "_PAGE_PROTNONE");
                    assert_eq!(raw & (1 << 1), 0, "_PAGE_RW");
                }
                ArchKind::Arm64 => assert_ne!(raw & (1 << 11), 0, "PTE_PRESENT_INVALID"),
            }
            // pte_present(): still a mapped page in the observation.
            let obs = m.observe(1, "t");
            assert_eq!(obs.numa_maps[0].nodes, vec![(0, 1)]);
        }
    }

    #[test]
    fn remote_fault_migrates_to_the_task_node() {
        both(|arch, before| {
            let mut m = model(arch, 2);
            m.set_before(before);
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            map(&mut m, B, 32 * P);
            m.access_range(1, B, 32 * P, true, None).unwrap(); // two 64K folios, node 0
            m.numa_run_on(1, 1).unwrap();
            assert_eq!(m.numa_scan(1, B, 32 * P), Ok(32));
            // A read of page 5 from node 1: the 64K folio moves to node 1,
            // all 16 pages, contents kept, entries read-only (the hinting
            // entry was not writable) and still AnonExclusive.
            assert_eq!(m.read(1, B + 5 * P), Ok(B + 5 * P));
            for k in 0..16 {
                let l = leaf(&m, B + k * P);
                assert_eq!(m.node_of(l.pfn), 1, "{arch:?} {before:?} {k}");
                assert!(!l.flags.contains(LeafFlags::PROTNONE) && !l.write());
            }
            // The other folio keeps its hinting entries and node.
            let other = leaf(&m, B + 16 * P);
            assert!(other.flags.contains(LeafFlags::PROTNONE));
            assert_eq!(m.node_of(other.pfn), 0);
            assert_eq!(stat(&m, "numa_pages_migrated"), 16);
            assert_eq!(stat(&m, "numa_hint_faults"), 1);
            assert_eq!(stat(&m, "numa_hint_faults_local"), 0);
            // The write after it reuses the exclusive page (no copy).
            let pfn = leaf(&m, B + 5 * P).pfn;
            m.write(1, B + 5 * P, 7).unwrap();
            assert_eq!(leaf(&m, B + 5 * P).pfn, pfn);
            assert_eq!(m.read(1, B + 6 * P), Ok(B + 6 * P));
            let obs = m.observe(1, "t");
            let nm = &obs.numa_maps[0];
            assert_eq!(nm.nodes, vec![(0, 16), (1, 16)]);
            m.check_invariants().unwrap();
        });
    }

    #[test]
    fn small_folio_in_the_lru_add_batch_is_not_migrated() {
        let mut m = model(ArchKind::X86_64, 2);
        map(&mut m, B, 64 * P);
        m.access_range(1, B, 64 * P, true, None).unwrap();
        // 64 order-0 faults: the first 62 went to an LRU (two full
        // batches of 31), the last two wait in the LRU-add batch.
        m.numa_run_on(1, 1).unwrap();
        assert_eq!(m.numa_scan(1, B, 64 * P), Ok(64));
        m.read(1, B).unwrap();
        m.read(1, B + 63 * P).unwrap();
        assert_eq!(m.node_of(leaf(&m, B).pfn), 1);
        assert_eq!(m.node_of(leaf(&m, B + 63 * P).pfn), 0);
        assert_eq!(stat(&m, "numa_pages_migrated"), 1);
        assert_eq!(stat(&m, "numa_hint_faults"), 2);
        // A failed isolation (migrate_misplaced_folio_prepare()) goes to
        // out_map with the write upgrade decided before: writable again.
        // A migrated page comes back read-only (remove_migration_pte()).
        assert!(leaf(&m, B + 63 * P).write());
        assert!(!leaf(&m, B).write());
        m.check_invariants().unwrap();
    }

    /// A target node without room for the folio (migrate_balanced_pgdat())
    /// refuses the migration: the fault maps the entries back, writable as
    /// decided before, and counts no migration.
    #[test]
    fn full_target_node_keeps_the_folio() {
        let mut cfg = ModelConfig::for_arch(ArchKind::X86_64).with_memory(128 << 20);
        cfg.nodes = 2;
        let mut m = Model::new(cfg);
        m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        map(&mut m, B, 16 * P);
        m.write(1, B, 1).unwrap(); // a 64K folio on node 0
                                   // Fill node 1 from a second mapping (its faults fall back to node 0
                                   // once node 1 is full).
        m.numa_run_on(1, 1).unwrap();
        let big = 80 << 20;
        map(&mut m, B + (1 << 30), big);
        m.access_range(1, B + (1 << 30), big, true, None).unwrap();
        assert!(m.phys.node_free(1) < 16);
        assert_eq!(m.numa_scan(1, B, 16 * P), Ok(16));
        let pfn = leaf(&m, B).pfn;
        m.read(1, B).unwrap();
        assert_eq!(leaf(&m, B).pfn, pfn);
        assert!(leaf(&m, B + 15 * P).write());
        assert_eq!(stat(&m, "numa_hint_faults"), 1);
        assert_eq!(stat(&m, "numa_pages_migrated"), 0);
        m.check_invariants().unwrap();
    }

    /// Room on the target node but no free block of the folio's order: the
    /// large folio is not split to retry (MR_NUMA_MISPLACED), the migration
    /// fails after isolation, and the entries come back without the write
    /// upgrade (`ignore_writable`); a write then faults once more.
    #[test]
    fn fragmented_target_node_fails_the_large_migration() {
        let mut cfg = ModelConfig::for_arch(ArchKind::X86_64).with_memory(128 << 20);
        cfg.nodes = 2;
        let mut m = Model::new(cfg);
        // Fill node 1 with small pages, then free every other one of 256.
        m.numa_run_on(1, 1).unwrap();
        let fill = B + (1 << 30);
        map(&mut m, fill, 80 << 20);
        m.access_range(1, fill, 80 << 20, true, None).unwrap();
        for k in 0..256 {
            m.madvise(1, fill + 2 * k * P, P, crate::Advice::DontNeed)
                .unwrap();
        }
        assert!(m.phys.node_free(1) >= 16);
        // A 64K folio on node 0, made hinting entries from node 1.
        m.numa_run_on(1, 0).unwrap();
        m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        map(&mut m, B, 16 * P);
        m.write(1, B, 1).unwrap();
        let pfn = leaf(&m, B).pfn;
        m.numa_run_on(1, 1).unwrap();
        assert_eq!(m.numa_scan(1, B, 16 * P), Ok(16));
        assert_eq!(m.read(1, B), Ok(1));
        assert_eq!(leaf(&m, B).pfn, pfn);
        assert_eq!(m.node_of(pfn), 0);
        for k in 0..16 {
            let l = leaf(&m, B + k * P);
            assert!(!l.flags.contains(LeafFlags::PROTNONE) && !l.write(), "{k}");
        }
        assert_eq!(stat(&m, "numa_pages_migrated"), 0);
        m.write(1, B, 2).unwrap();
        assert!(leaf(&m, B).write());
        assert_eq!(leaf(&m, B).pfn, pfn);
        m.check_invariants().unwrap();
    }

    /// mlock's population reads through hinting entries of a read-only VMA
    /// without a hinting fault; in a writable VMA its write faults do take
    /// one (and then the write fault).
    #[test]
    fn mlock_population_follows_hinting_entries_for_reads() {
        for writable in [false, true] {
            let mut m = model(ArchKind::X86_64, 2);
            map(&mut m, B, 64 * P);
            m.access_range(1, B, 64 * P, true, None).unwrap();
            if !writable {
                m.mprotect(1, B, 64 * P, Prot::READ).unwrap();
            }
            m.numa_run_on(1, 1).unwrap();
            assert_eq!(m.numa_scan(1, B, 64 * P), Ok(64));
            m.mlock(1, B, 64 * P, false).unwrap();
            let hinted = leaf(&m, B + 5 * P).flags.contains(LeafFlags::PROTNONE);
            assert_eq!(hinted, !writable);
            let faults = stat(&m, "numa_hint_faults");
            assert_eq!(faults, if writable { 64 } else { 0 });
            m.check_invariants().unwrap();
        }
    }

    #[test]
    fn skip_rules_zero_page_shared_and_prot_none_vma() {
        both(|arch, before| {
            let mut m = model(arch, 2);
            m.set_before(before);
            map(&mut m, B, 8 * P);
            m.read(1, B).unwrap(); // zero page
            m.write(1, B + P, 1).unwrap(); // shared after fork
            m.write(1, B + 2 * P, 2).unwrap(); // exclusive
            let child = m.fork(1).unwrap();
            m.write(child, B + 2 * P, 3).unwrap(); // child copies: parent's page exclusive again
            m.numa_run_on(1, 1).unwrap();
            assert_eq!(m.numa_scan(1, B, 8 * P), Ok(1), "{arch:?} {before:?}");
            assert!(!leaf(&m, B).flags.contains(LeafFlags::PROTNONE));
            assert!(!leaf(&m, B + P).flags.contains(LeafFlags::PROTNONE));
            assert!(leaf(&m, B + 2 * P).flags.contains(LeafFlags::PROTNONE));
            // A PROT_NONE VMA is not scanned at all.
            m.mprotect(1, B + P, P, Prot::empty()).unwrap();
            assert_eq!(m.numa_scan(1, B + P, P), Ok(0));
            m.check_invariants().unwrap();
        });
    }

    #[test]
    fn pmd_thp_hinting_and_migration() {
        for arch in ArchKind::ALL {
            let mut m = model(arch, 2);
            m.set_thp(ThpKnob::Size(9), ThpMode::Always).unwrap();
            map(&mut m, B, 2 << 20);
            m.write(1, B, 1).unwrap();
            m.read(1, B).unwrap();
            m.numa_run_on(1, 1).unwrap();
            assert_eq!(m.numa_scan(1, B, 2 << 20), Ok(512));
            assert_eq!(stat(&m, "numa_huge_pte_updates"), 1);
            assert_eq!(m.read(1, B + 5 * P), Ok(0));
            let crate::core::pgtable::PmdSlot::Leaf(l) = m.mm(1).unwrap().pt.pmd(B) else {
                panic!("still PMD-mapped")
            };
            assert_eq!(m.node_of(l.pfn), 1);
            assert!(!l.flags.contains(LeafFlags::PROTNONE));
            assert_eq!(m.read(1, B), Ok(1));
            assert_eq!(stat(&m, "numa_pages_migrated"), 512);
            m.check_invariants().unwrap();
        }
    }

    #[test]
    fn mprotect_of_a_pmd_counts_numa_huge_pte_updates() {
        let mut m = model(ArchKind::X86_64, 1);
        m.set_thp(ThpKnob::Size(9), ThpMode::Always).unwrap();
        map(&mut m, B, 2 << 20);
        m.write(1, B, 1).unwrap();
        m.mprotect(1, B, 2 << 20, Prot::READ).unwrap();
        assert_eq!(stat(&m, "numa_huge_pte_updates"), 1);
        assert_eq!(stat(&m, "numa_pte_updates"), 0);
    }
}
