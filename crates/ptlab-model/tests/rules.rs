//! Rule-level tests of the model: fork and fault rules (tags §8) and
//! mremap rules (tags §1/§7/§8), each test naming the kernel function.
//! Every test runs the invariant checker after every step.

use ptlab_model::observe::{AnonPage, PageState};
use ptlab_model::{Advice, ArchKind, Errno, MapFlags, Model, ModelConfig, Prot, ThpKnob, ThpMode};

const B: u64 = 0x7f00_0000_0000; // 1 GiB aligned

struct T {
    m: Model,
}

impl T {
    fn new(arch: ArchKind) -> T {
        T {
            m: Model::new(ModelConfig::for_arch(arch)),
        }
    }
    fn check(&self) {
        if let Err(e) = self.m.check_invariants() {
            panic!("invariants: {e:#?}");
        }
    }
    fn thp(&mut self, order: u8, mode: ThpMode) {
        self.m.set_thp(ThpKnob::Size(order), mode).unwrap();
    }
    fn mmap(&mut self, addr: u64, len: u64) -> u64 {
        let r = self
            .m
            .mmap(
                1,
                addr,
                len,
                Prot::READ | Prot::WRITE,
                MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED,
            )
            .unwrap();
        self.check();
        r
    }
    /// An RW VMA fenced by PROT_NONE neighbours so it cannot merge.
    fn fenced(&mut self, addr: u64, len: u64) {
        let none = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        self.m
            .mmap(1, addr - 0x10000, 0x10000, Prot::empty(), none)
            .unwrap();
        self.m
            .mmap(1, addr + len, 0x10000, Prot::empty(), none)
            .unwrap();
        self.mmap(addr, len);
    }
    fn write(&mut self, addr: u64) {
        self.m.write(1, addr, addr).unwrap();
        self.check();
    }
    fn read(&mut self, addr: u64) -> u64 {
        let v = self.m.read(1, addr).unwrap();
        self.check();
        v
    }
    fn madvise(&mut self, addr: u64, len: u64, a: Advice) -> Result<(), Errno> {
        let r = self.m.madvise(1, addr, len, a);
        self.check();
        r
    }
    fn page(&self, addr: u64) -> PageState {
        let obs = self.m.observe(1, "main");
        obs.pages
            .into_iter()
            .find(|p| p.addr == addr)
            .map(|p| p.state)
            .unwrap_or(PageState::NotPresent)
    }
    fn anon(&self, addr: u64) -> AnonPage {
        match self.page(addr) {
            PageState::Anon(a) => a,
            s => panic!("{addr:#x} is {s:?}, not anon"),
        }
    }
    fn stat(&self, key: &str) -> i64 {
        self.m.observe(1, "main").stats[key]
    }
    fn maps(&self) -> String {
        self.m.observe(1, "main").maps_text()
    }
}

fn both(f: impl Fn(ArchKind)) {
    for a in ArchKind::ALL {
        f(a);
    }
}

#[test]
fn s1_zero_page_vs_write() {
    both(|arch| {
        let mut t = T::new(arch);
        t.thp(9, ThpMode::Never);
        t.fenced(B, 0x10000);
        assert_eq!(t.read(B), 0);
        t.write(B + 0x1000);
        t.read(B + 0x2000);
        t.write(B + 0x2000);
        assert_eq!(t.page(B), PageState::Zero);
        for a in [B + 0x1000, B + 0x2000] {
            let p = t.anon(a);
            assert!(p.mmap_exclusive && p.anon_exclusive && p.mapcount == 1 && p.order == 0);
        }
        assert_eq!(t.anon(B + 0x1000).tag, B + 0x1000);
    });
}

#[test]
fn s2_basic_mthp() {
    both(|arch| {
        let mut t = T::new(arch);
        t.thp(4, ThpMode::Always);
        t.fenced(B, 0x40000);
        t.write(B + 0x11000);
        for i in 0..16u64 {
            let p = t.anon(B + 0x10000 + i * 4096);
            assert_eq!((p.order, p.index as u64), (4, i));
            assert!(p.mmap_exclusive && p.mapcount == 1);
        }
        assert_eq!(t.page(B + 0xf000), PageState::NotPresent);
        assert_eq!(t.page(B + 0x20000), PageState::NotPresent);
        assert_eq!(t.stat("64kB/anon_fault_alloc"), 1);
        assert_eq!(t.stat("64kB/nr_anon"), 1);
        t.read(B + 0x21000);
        assert_eq!(t.page(B + 0x21000), PageState::Zero);
    });
}

#[test]
fn s3_all_none_rule() {
    both(|arch| {
        let mut t = T::new(arch);
        for o in [2, 3, 4] {
            t.thp(o, ThpMode::Always);
        }
        t.fenced(B, 0x10000);
        t.read(B);
        t.write(B + 0x9000);
        t.write(B + 0x4000);
        t.write(B + 0x1000);
        assert_eq!((t.anon(B + 0x8000).order, t.anon(B + 0x8000).index), (3, 0));
        assert_eq!((t.anon(B + 0x4000).order, t.anon(B + 0x4000).index), (2, 0));
        assert_eq!(t.anon(B + 0x1000).order, 0);
    });
}

#[test]
fn s4_s5_vma_bounds() {
    both(|arch| {
        let mut t = T::new(arch);
        for o in [2, 3, 4] {
            t.thp(o, ThpMode::Always);
        }
        t.fenced(B, 0xa000);
        t.write(B + 0x9000);
        assert_eq!(t.anon(B + 0x9000).order, 0);
        t.write(B + 0x1000);
        assert_eq!((t.anon(B).order, t.anon(B).index), (3, 0));

        let mut t = T::new(arch);
        t.thp(4, ThpMode::Always);
        t.thp(2, ThpMode::Always);
        t.fenced(B + 0x4000, 0x2c000);
        t.write(B + 0x4000);
        assert_eq!(t.anon(B + 0x4000).order, 2);
        t.write(B + 0x10000);
        assert_eq!(t.anon(B + 0x10000).order, 4);
    });
}

#[test]
fn s7_pmd_before_mthp_and_s12_huge_zero() {
    both(|arch| {
        let mut t = T::new(arch);
        t.m.set_thp(ThpKnob::TopLevel, ThpMode::Never).unwrap();
        t.thp(9, ThpMode::Always);
        t.thp(4, ThpMode::Always);
        t.fenced(B, 0x210000);
        t.write(B);
        t.write(B + 0x201000);
        let p = t.anon(B + 0x5000);
        assert!(p.pmd_mapped && p.order == 9 && p.index == 5 && p.mmap_exclusive);
        assert_eq!(t.anon(B + 0x201000).order, 4);
        assert_eq!(t.stat("2048kB/anon_fault_alloc"), 1);
        assert_eq!(t.stat("64kB/anon_fault_alloc"), 1);
        assert_eq!(t.stat("vmstat/thp_fault_alloc"), 1);
        let obs = t.m.observe(1, "main");
        let vma = obs.maps.iter().find(|m| m.start == B).unwrap();
        assert_eq!(vma.anon_huge_kb, 2048);

        // S12: a read in another 2 MiB maps the huge zero page; a write replaces it.
        let mut t = T::new(arch);
        t.fenced(B, 0x400000);
        t.madvise(B, 0x400000, Advice::HugePage).unwrap();
        t.read(B + 0x200000 + 0x3000);
        assert_eq!(
            t.page(B + 0x200000 + 0x7000),
            PageState::HugeZero { index: 7 }
        );
        t.write(B + 0x200000 + 0x3000);
        assert!(t.anon(B + 0x200000).pmd_mapped);
        assert_eq!(t.stat("vmstat/thp_split_pmd"), 0);
        assert_eq!(t.stat("vmstat/thp_fault_alloc"), 1);
    });
}

#[test]
fn s11_partial_dontneed_defers_split() {
    both(|arch| {
        let mut t = T::new(arch);
        t.thp(4, ThpMode::Always);
        t.fenced(B, 0x10000);
        t.write(B);
        t.madvise(B + 0x4000, 0x4000, Advice::DontNeed).unwrap();
        for i in 4..8u64 {
            assert_eq!(t.page(B + i * 4096), PageState::NotPresent);
        }
        assert_eq!(t.anon(B + 0x8000).index, 8);
        assert_eq!(t.stat("64kB/split_deferred"), 1);
        assert_eq!(t.stat("64kB/nr_anon_partially_mapped"), 1);
        // Dropping the rest frees the folio.
        t.madvise(B, 0x10000, Advice::DontNeed).unwrap();
        assert_eq!(t.stat("64kB/nr_anon"), 0);
        assert_eq!(t.stat("64kB/nr_anon_partially_mapped"), 0);
    });
}

#[test]
fn s19_pte_table_blocks_pmd_until_reclaimed() {
    both(|arch| {
        let mut t = T::new(arch);
        t.thp(9, ThpMode::Never);
        t.fenced(B, 0x400000);
        t.write(B);
        t.write(B + 0x200000);
        t.madvise(B, 0x200000, Advice::DontNeed).unwrap();
        t.madvise(B + 0x200000, 0x100000, Advice::DontNeed).unwrap();
        t.thp(9, ThpMode::Always);
        t.write(B + 0x5000);
        t.write(B + 0x205000);
        if arch == ArchKind::X86_64 {
            // CONFIG_PT_RECLAIM freed the emptied table: the PMD THP goes in.
            assert!(t.anon(B + 0x5000).pmd_mapped);
        } else {
            // arm64 builds no PT_RECLAIM (it does not select
            // ARCH_SUPPORTS_PT_RECLAIM): the empty table stays and blocks
            // the PMD THP; the fault maps an order-0 page.
            assert!(!t.anon(B + 0x5000).pmd_mapped);
            assert_eq!(t.anon(B + 0x5000).order, 0);
        }
        assert_eq!(t.anon(B + 0x205000).order, 0);
    });
}

#[test]
fn s20_partial_dontneed_of_pmd_thp() {
    both(|arch| {
        let mut t = T::new(arch);
        t.fenced(B, 0x200000);
        t.madvise(B, 0x200000, Advice::HugePage).unwrap();
        t.write(B);
        t.madvise(B + 100 * 4096, 10 * 4096, Advice::DontNeed)
            .unwrap();
        assert_eq!(t.stat("vmstat/thp_split_pmd"), 1);
        assert_eq!(t.stat("vmstat/thp_deferred_split_page"), 1);
        assert_eq!(t.stat("2048kB/split_deferred"), 1);
        assert_eq!(t.page(B + 105 * 4096), PageState::NotPresent);
        let p = t.anon(B + 110 * 4096);
        assert!(
            !p.pmd_mapped && p.order == 9 && p.index == 110 && p.mmap_exclusive && p.anon_exclusive
        );
    });
}

#[test]
fn madvise_split_inside_pmd_splits_mapping_not_folio() {
    both(|arch| {
        let mut t = T::new(arch);
        t.fenced(B, 0x200000);
        t.madvise(B, 0x200000, Advice::HugePage).unwrap();
        t.write(B);
        t.madvise(B + 0x100000, 0x100000, Advice::DontFork).unwrap();
        assert_eq!(t.stat("vmstat/thp_split_pmd"), 1);
        assert!(t.maps().lines().count() >= 4);
        let p = t.anon(B + 0x180000);
        assert!(!p.pmd_mapped && p.order == 9);
        let obs = t.m.observe(1, "main");
        let v = obs.maps.iter().find(|m| m.start == B + 0x100000).unwrap();
        assert!(v.vm_flags.contains(&"dc".to_string()));
        // DOFORK merges it back.
        t.madvise(B + 0x100000, 0x100000, Advice::DoFork).unwrap();
        assert_eq!(
            t.m.observe(1, "main")
                .maps
                .iter()
                .filter(|m| m.start >= B && m.end <= B + 0x200000)
                .count(),
            1
        );
    });
}

#[test]
fn mmap_errno_order() {
    let mut t = T::new(ArchKind::X86_64);
    let anon = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
    let rw = Prot::READ | Prot::WRITE;
    assert_eq!(t.m.mmap(1, 0, 0, rw, anon), Err(Errno::EINVAL));
    assert_eq!(
        t.m.mmap(1, 0, 4096, rw, MapFlags::PRIVATE),
        Err(Errno::EBADF)
    );
    assert_eq!(t.m.mmap(1, 0, u64::MAX, rw, anon), Err(Errno::ENOMEM));
    assert_eq!(
        t.m.mmap(1, B + 1, 4096, rw, anon | MapFlags::FIXED),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        t.m.mmap(1, 0x7fff_ffff_f000, 0x2000, rw, anon | MapFlags::FIXED),
        Err(Errno::ENOMEM)
    );
    assert_eq!(
        t.m.mmap(1, B, 4096, rw, MapFlags::ANONYMOUS),
        Err(Errno::EINVAL)
    );
    t.mmap(B, 0x4000);
    assert_eq!(
        t.m.mmap(1, B + 0x1000, 4096, rw, anon | MapFlags::FIXED_NOREPLACE),
        Err(Errno::EEXIST)
    );
    // A hint that is free is used as is; one that collides is ignored.
    assert_eq!(t.m.mmap(1, B + 0x10000, 4096, rw, anon), Ok(B + 0x10000));
    let a = t.m.mmap(1, B, 4096, rw, anon).unwrap();
    assert_ne!(a, B);
    t.check();
}

#[test]
fn mmap_topdown_and_2m_alignment() {
    let mut t = T::new(ArchKind::X86_64);
    let anon = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
    let rw = Prot::READ | Prot::WRITE;
    let base = t.m.config().mmap_base;
    let a = t.m.mmap(1, 0, 0x3000, rw, anon).unwrap();
    assert_eq!(a, base - 0x3000);
    let b = t.m.mmap(1, 0, 0x400000, rw, anon).unwrap();
    assert_eq!(
        b % 0x200000,
        0,
        "2 MiB multiple gets a 2 MiB-aligned address"
    );
    assert!(b + 0x400000 <= a);
    let c = t.m.mmap(1, 0, 0x5000, rw, anon).unwrap();
    assert!(c + 0x5000 <= b || c >= b + 0x400000);
    t.check();
}

#[test]
fn mmap_merges_and_munmap_splits() {
    both(|arch| {
        let mut t = T::new(arch);
        t.mmap(B, 0x3000);
        t.mmap(B + 0x3000, 0x2000);
        assert_eq!(
            t.maps(),
            format!("{:x}-{:x} rw-p 00000000 00:00 0 \n", B, B + 0x5000)
        );
        t.write(B);
        t.write(B + 0x4000);
        t.m.munmap(1, B + 0x1000, 0x1000).unwrap();
        t.check();
        assert_eq!(
            t.maps(),
            format!(
                "{:x}-{:x} rw-p 00000000 00:00 0 \n{:x}-{:x} rw-p 00000000 00:00 0 \n",
                B,
                B + 0x1000,
                B + 0x2000,
                B + 0x5000
            )
        );
        assert_eq!(t.m.munmap(1, B + 1, 4096), Err(Errno::EINVAL));
        assert_eq!(t.m.munmap(1, B, 0), Err(Errno::EINVAL));
        // Unmapping nothing succeeds.
        assert_eq!(t.m.munmap(1, B + 0x100000, 4096), Ok(()));
        t.m.munmap(1, B, 0x5000).unwrap();
        t.check();
        assert_eq!(t.maps(), "");
        // Every page table below the PGD is gone again.
        assert_eq!(t.m.mm(1).unwrap().pt.table_count(), 1);
    });
}

#[test]
fn noreserve_and_prot_none_flags() {
    let mut t = T::new(ArchKind::X86_64);
    let anon = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    t.m.mmap(
        1,
        B,
        0x1000,
        Prot::READ | Prot::WRITE,
        anon | MapFlags::NORESERVE,
    )
    .unwrap();
    t.m.mmap(1, B + 0x1000, 0x1000, Prot::READ | Prot::WRITE, anon)
        .unwrap();
    t.m.mmap(1, B + 0x2000, 0x1000, Prot::empty(), anon)
        .unwrap();
    let obs = t.m.observe(1, "main");
    let flags: Vec<String> = obs.maps.iter().map(|m| m.vm_flags.join(" ")).collect();
    assert_eq!(
        flags,
        vec!["rd wr mr mw me nr", "rd wr mr mw me ac", "mr mw me"]
    );
    assert_eq!(obs.maps[2].perms, "---p");
    assert!(t.m.read(1, B + 0x2000).is_err());
    t.check();
}

#[test]
fn anon_vma_reused_from_neighbour_allows_merge() {
    // mremap.md §1.3: A(RW) and B(RWX) adjacent, both faulted, share an
    // anon_vma; with a gap at fault time they get different ones. The
    // observable consequence needs mprotect (a later issue); here we check
    // the assignment itself.
    let mut t = T::new(ArchKind::X86_64);
    let anon = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    t.m.mmap(1, B, 0x2000, Prot::READ | Prot::WRITE, anon)
        .unwrap();
    t.m.mmap(
        1,
        B + 0x2000,
        0x2000,
        Prot::READ | Prot::WRITE | Prot::EXEC,
        anon,
    )
    .unwrap();
    t.write(B);
    t.write(B + 0x2000);
    let mm = t.m.mm(1).unwrap();
    let a = mm.vmas.find(B).unwrap().anon_vma;
    let b = mm.vmas.find(B + 0x2000).unwrap().anon_vma;
    assert!(a.is_some() && a == b);
}

#[test]
fn madvise_holes_give_enomem_but_apply() {
    let mut t = T::new(ArchKind::X86_64);
    t.mmap(B, 0x2000);
    t.mmap(B + 0x3000, 0x2000);
    assert_eq!(t.madvise(B, 0x5000, Advice::DontFork), Err(Errno::ENOMEM));
    let obs = t.m.observe(1, "main");
    assert!(obs
        .maps
        .iter()
        .all(|m| m.vm_flags.contains(&"dc".to_string())));
    assert_eq!(
        t.madvise(B + 1, 0x1000, Advice::DontNeed),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        t.madvise(B + 0x10000, 0x1000, Advice::DontNeed),
        Err(Errno::ENOMEM)
    );
    assert_eq!(t.madvise(B, 0, Advice::DontNeed), Ok(()));
}

#[test]
fn populate_1gib_64k_is_fast_enough_and_consistent() {
    let mut t = T::new(ArchKind::Arm64);
    t.thp(9, ThpMode::Never);
    t.thp(4, ThpMode::Always);
    t.mmap(B, 64 << 20);
    for a in (B..B + (64 << 20)).step_by(4096) {
        t.m.write(1, a, 7).unwrap();
    }
    t.check();
    assert_eq!(t.stat("64kB/nr_anon"), 1024);
    t.m.munmap(1, B, 64 << 20).unwrap();
    t.check();
    assert_eq!(t.stat("64kB/nr_anon"), 0);
}

#[test]
fn arm64_contpte_fold_and_unfold() {
    use ptlab_model::arch::{Entry, LeafFlags};
    let cont = |t: &T, a: u64| match t.m.mm(1).unwrap().pt.pte_raw(a) {
        Entry::Leaf(l) => l.flags.contains(LeafFlags::CONT),
        _ => false,
    };
    let mut t = T::new(ArchKind::Arm64);
    t.thp(4, ThpMode::Always);
    t.thp(5, ThpMode::Always);
    t.fenced(B, 0x40000);
    t.write(B); // a 128 KiB folio: two folded blocks
    assert_eq!(t.anon(B).order, 5);
    assert!((0..32u64).all(|i| cont(&t, B + i * 4096)));
    // Zapping one entry unfolds only its block.
    t.madvise(B + 0x3000, 0x1000, Advice::DontNeed).unwrap();
    assert!((0..16u64).all(|i| !cont(&t, B + i * 4096)));
    assert!((16..32u64).all(|i| cont(&t, B + i * 4096)));
    // A whole-block zap needs no unfold of its neighbour.
    t.madvise(B + 0x10000, 0x10000, Advice::DontNeed).unwrap();
    // An order-2 folio never folds; x86-64 never sets the bit.
    t.thp(4, ThpMode::Never);
    t.thp(5, ThpMode::Never);
    t.thp(2, ThpMode::Always);
    t.write(B + 0x20000);
    assert!(!cont(&t, B + 0x20000));
    let mut x = T::new(ArchKind::X86_64);
    x.thp(4, ThpMode::Always);
    x.fenced(B, 0x10000);
    x.write(B);
    assert!(!cont(&x, B));
}

#[test]
fn arm64_pmd_split_paints_contiguous_blocks() {
    use ptlab_model::arch::{Entry, LeafFlags};
    let mut t = T::new(ArchKind::Arm64);
    t.fenced(B, 0x200000);
    t.madvise(B, 0x200000, Advice::HugePage).unwrap();
    t.write(B);
    t.madvise(B + 0x1000, 0x1000, Advice::DontNeed).unwrap();
    let pt = &t.m.mm(1).unwrap().pt;
    let folded = (0..512u64)
        .filter(|i| matches!(pt.pte_raw(B + i * 4096), Entry::Leaf(l) if l.flags.contains(LeafFlags::CONT)))
        .count();
    // 32 blocks after the split; the block holding the zapped page unfolded.
    assert_eq!(folded, 31 * 16);
}
