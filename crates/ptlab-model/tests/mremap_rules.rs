//! mremap's page-table paths, observed through the page tables themselves
//! (`Model::mm(pid).pt`): whole PTE tables re-linked by move_normal_pmd(),
//! the realigned first PMD, THPs moved whole or split, and arm64 contiguous
//! blocks at the destination (rule tags §9.x, as in mm/move_pt.rs).

use ptlab_model::arch::{Entry, LeafFlags};
use ptlab_model::observe::PageState;
use ptlab_model::pgtable::PmdSlot;
use ptlab_model::{
    Advice, ArchKind, Before, MapFlags, Model, ModelConfig, MremapFlags, Pfn, Prot, ThpKnob,
    ThpMode, PMD_SIZE,
};

const A: u64 = 0x7f00_4000_0000; // 1 GiB aligned
const P: u64 = 4096;
const FIXED: MremapFlags = MremapFlags::MAYMOVE.union(MremapFlags::FIXED);

fn model(arch: ArchKind, before: Before) -> Model {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    Model::new(cfg)
}

fn map(m: &mut Model, addr: u64, len: u64) {
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, addr, len, Prot::READ | Prot::WRITE, f).unwrap();
}

/// A PTE-mapped, fully written region `[addr, addr + len)`.
fn pte_mapped(m: &mut Model, addr: u64, len: u64) {
    map(m, addr, len);
    m.madvise(1, addr, len, Advice::NoHugePage).unwrap();
    m.access_range(1, addr, len, true, None).unwrap();
}

fn pte_table(m: &Model, va: u64) -> Pfn {
    match m.mm(1).unwrap().pt.pmd(va) {
        PmdSlot::Table(t) => t,
        other => panic!("{va:#x}: {other:?}"),
    }
}

fn check(m: &Model) {
    if let Err(e) = m.check_invariants() {
        panic!("{e:#?}");
    }
}

fn tags_moved(m: &mut Model, from: u64, to: u64, len: u64) {
    for off in (0..len).step_by(P as usize) {
        assert_eq!(m.read(1, to + off).unwrap(), from + off, "{:#x}", to + off);
    }
}

#[test]
fn aligned_move_relinks_the_same_pte_table() {
    for arch in ArchKind::ALL {
        for before in [Before::empty(), Before::MREMAP_PTE_BATCH] {
            let mut m = model(arch, before);
            pte_mapped(&mut m, A, PMD_SIZE);
            let t = pte_table(&m, A);
            let tables = m.phys().pt_pages;
            let dst = A + 64 * PMD_SIZE;
            assert_eq!(m.mremap(1, A, PMD_SIZE, PMD_SIZE, FIXED, dst), Ok(dst));
            assert_eq!(
                pte_table(&m, dst),
                t,
                "{arch:?}: move_normal_pmd() moved the table"
            );
            assert_eq!(m.mm(1).unwrap().pt.pmd(A), PmdSlot::None);
            // Only the destination's PMD table was new (the PUD is shared);
            // the source's PMD table was freed with the unmapped source.
            assert_eq!(m.phys().pt_pages, tables, "{arch:?}");
            check(&m);
            tags_moved(&mut m, A, dst, PMD_SIZE);
        }
    }
}

#[test]
fn without_table_moves_or_alignment_the_ptes_move_into_a_new_table() {
    for arch in ArchKind::ALL {
        // The switch: per-PTE moves into a fresh table.
        let mut m = model(arch, Before::MREMAP_TABLE_MOVE);
        pte_mapped(&mut m, A, PMD_SIZE);
        let t = pte_table(&m, A);
        let dst = A + 64 * PMD_SIZE;
        assert_eq!(m.mremap(1, A, PMD_SIZE, PMD_SIZE, FIXED, dst), Ok(dst));
        assert_ne!(pte_table(&m, dst), t);
        check(&m);
        tags_moved(&mut m, A, dst, PMD_SIZE);
        // An unaligned destination: extents never reach a full PMD.
        let mut m = model(arch, Before::empty());
        pte_mapped(&mut m, A, PMD_SIZE);
        let t = pte_table(&m, A);
        let dst = A + 64 * PMD_SIZE + P;
        assert_eq!(m.mremap(1, A, PMD_SIZE, PMD_SIZE, FIXED, dst), Ok(dst));
        assert_ne!(pte_table(&m, dst), t);
        assert_ne!(pte_table(&m, dst + PMD_SIZE - P), t);
        check(&m);
        tags_moved(&mut m, A, dst, PMD_SIZE);
    }
}

#[test]
fn realigned_first_pmd_moves_as_a_table() {
    // §9.2: the VMA starts 4 KiB into a PMD with nothing below it, the
    // destination has the same offset and is empty below: both cursors are
    // aligned down and the first PMD's table moves whole.
    for arch in ArchKind::ALL {
        for before in [Before::empty(), Before::MREMAP_TABLE_MOVE] {
            let mut m = model(arch, before);
            let src = A + P;
            let len = 2 * PMD_SIZE - P;
            pte_mapped(&mut m, src, len);
            let (t0, t1) = (pte_table(&m, A), pte_table(&m, A + PMD_SIZE));
            let dst = A + 64 * PMD_SIZE + P;
            assert_eq!(m.mremap(1, src, len, len, FIXED, dst), Ok(dst));
            let moved = (pte_table(&m, dst - P), pte_table(&m, dst - P + PMD_SIZE));
            assert_eq!(moved == (t0, t1), before.is_empty(), "{arch:?} {before:?}");
            check(&m);
            tags_moved(&mut m, src, dst, len);
        }
        // Something mapped below the source in its PMD: no realignment, so
        // the first PMD's PTEs move one by one (the second still whole).
        let mut m = model(arch, Before::empty());
        let ro = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, A, P, Prot::READ, ro).unwrap();
        pte_mapped(&mut m, A + P, 2 * PMD_SIZE - P);
        let (t0, t1) = (pte_table(&m, A), pte_table(&m, A + PMD_SIZE));
        let dst = A + 64 * PMD_SIZE + P;
        let len = 2 * PMD_SIZE - P;
        assert_eq!(m.mremap(1, A + P, len, len, FIXED, dst), Ok(dst));
        assert_ne!(pte_table(&m, dst), t0);
        assert_eq!(pte_table(&m, dst - P + PMD_SIZE), t1);
        assert_eq!(pte_table(&m, A), t0, "the source keeps its first table");
        check(&m);
    }
}

#[test]
fn thp_moves_whole_when_aligned_and_splits_otherwise() {
    for arch in ArchKind::ALL {
        for before in [Before::empty(), Before::MREMAP_TABLE_MOVE] {
            let mut m = model(arch, before);
            m.set_thp(ThpKnob::Size(9), ThpMode::Inherit).unwrap();
            map(&mut m, A, 2 * PMD_SIZE);
            m.madvise(1, A, 2 * PMD_SIZE, Advice::HugePage).unwrap();
            m.access_range(1, A, 2 * PMD_SIZE, true, None).unwrap();
            let head = match m.mm(1).unwrap().pt.pmd(A) {
                PmdSlot::Leaf(l) => l.pfn,
                other => panic!("{other:?}"),
            };
            let dst = A + 64 * PMD_SIZE;
            assert_eq!(
                m.mremap(1, A, 2 * PMD_SIZE, 2 * PMD_SIZE, FIXED, dst),
                Ok(dst)
            );
            match m.mm(1).unwrap().pt.pmd(dst) {
                PmdSlot::Leaf(l) => assert_eq!(l.pfn, head, "the same THP, still a PMD"),
                other => panic!("{other:?}"),
            }
            assert!(m.mm(1).unwrap().deposited.contains_key(&dst));
            check(&m);
            // 4 KiB off: each PMD is split in place, the folio stays whole
            // and PTE-mapped at the destination.
            let dst2 = A + 128 * PMD_SIZE + P;
            let len = 2 * PMD_SIZE;
            assert_eq!(m.mremap(1, dst, len, len, FIXED, dst2), Ok(dst2));
            for off in [0, P, PMD_SIZE - P, PMD_SIZE, len - P] {
                let page = m.observe_pages(1, dst2 + off, dst2 + off + P);
                match &page[0].state {
                    PageState::Anon(a) => {
                        assert_eq!((a.order, a.pmd_mapped), (9, false));
                        assert_eq!(a.tag, A + off);
                    }
                    s => panic!("{s:?}"),
                }
            }
            assert!(m.mm(1).unwrap().deposited.is_empty());
            check(&m);
        }
    }
}

#[test]
fn arm64_contiguous_blocks_at_the_destination() {
    // 64 KiB folios are mapped folded (contpte). Moved to a 64 KiB-aligned
    // destination they are folded again, whichever path moved them (a batch
    // paints the blocks, single writes refold on the 16th entry); moved
    // 4 KiB off, no block can fold.
    for before in [Before::empty(), Before::MREMAP_PTE_BATCH] {
        for (off, folded) in [(0, true), (P, false)] {
            let mut m = model(ArchKind::Arm64, before | Before::MREMAP_TABLE_MOVE);
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            map(&mut m, A, 0x40000);
            m.access_range(1, A, 0x40000, true, None).unwrap();
            let cont = |m: &Model, va: u64| match m.mm(1).unwrap().pt.pte_raw(va) {
                Entry::Leaf(l) => l.flags.contains(LeafFlags::CONT),
                e => panic!("{e:?}"),
            };
            assert!(cont(&m, A));
            let dst = A + 0x100_0000 + off;
            assert_eq!(m.mremap(1, A, 0x40000, 0x40000, FIXED, dst), Ok(dst));
            for k in 0..0x40000 / P {
                assert_eq!(
                    cont(&m, dst + k * P),
                    folded,
                    "{before:?} {off:#x} page {k}"
                );
            }
            check(&m);
            tags_moved(&mut m, A, dst, 0x40000);
        }
    }
}
