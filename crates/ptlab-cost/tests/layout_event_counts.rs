//! The per-layout subset events, counted by hand (issue 15):
//! `struct_page_line_large` — in one batched rmap or mprotect call over
//! nr > 1 consecutive pages of one large folio, the struct page lines
//! after the first (nr − 1) — and `user_store_4k_large` — the program's
//! stores over a run of present PTEs mapping one large folio. Both are
//! subsets of existing events (whose counts do not change) and are priced
//! in place of them in the whole-program figure only.

mod common;

use ptlab_cost::{find_profile, price_in, price_program};
use ptlab_model::{ArchKind, Before, Figure, HwEvent, HwEvents};

/// Events of line `n` (1-based, counting statements) of `src`.
fn line(src: &str, arch: ArchKind, before: Before, n: usize) -> HwEvents {
    common::statements(src, arch, before)[n - 1]
}

fn large(e: &HwEvents) -> (u64, u64) {
    (
        e.get(HwEvent::StructPageLineLarge),
        e.get(HwEvent::UserStore4kLarge),
    )
}

const FOLIO_64K: &str = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
write p 64K
mprotect p 64K r
mprotect p 64K rw
";

/// Line 3, the first write: a 64 KiB mTHP fault maps 16 pages with one
/// folio_add_new_anon_rmap() (16 lines, 15 after the first); the fault
/// counts the first page's store, the other 15 are one run over the
/// folio (15 large stores). Line 4, the second write: one run of 16
/// present PTEs (16 large stores), no struct page. Line 5, RW → R: no
/// write upgrade, so no commit_anon_folio_batch (0). Line 6, R → RW:
/// commit_anon_folio_batch() over the 16 pages (15 after the first). On
/// both architectures.
#[test]
fn a_64k_folio() {
    for arch in ArchKind::ALL {
        assert_eq!(
            large(&line(FOLIO_64K, arch, Before::empty(), 3)),
            (15, 15),
            "{arch:?}"
        );
        assert_eq!(
            large(&line(FOLIO_64K, arch, Before::empty(), 4)),
            (0, 16),
            "{arch:?}"
        );
        assert_eq!(
            large(&line(FOLIO_64K, arch, Before::empty(), 5)),
            (0, 0),
            "{arch:?}"
        );
        assert_eq!(
            large(&line(FOLIO_64K, arch, Before::empty(), 6)),
            (15, 0),
            "{arch:?}"
        );
        // The supersets keep their counts and hold the subsets.
        for n in 3..=6 {
            let e = line(FOLIO_64K, arch, Before::empty(), n);
            assert!(e.get(HwEvent::StructPageLine) >= e.get(HwEvent::StructPageLineLarge));
            assert!(e.get(HwEvent::UserStore4k) >= e.get(HwEvent::UserStore4kLarge));
        }
    }
}

/// The same statements over 4 KiB pages count no subset at all.
#[test]
fn small_pages_count_no_subset() {
    let src = FOLIO_64K.replace("thp 64K always", "thp 64K never");
    for arch in ArchKind::ALL {
        for n in 3..=6 {
            assert_eq!(
                large(&line(&src, arch, Before::empty(), n)),
                (0, 0),
                "{arch:?} {n}"
            );
        }
    }
}

/// fork of one 64 KiB folio: 6.18's batch dups the rmap of 16 pages in
/// one __folio_try_dup_anon_rmap_ptes() (15 after the first); the per-PTE
/// path (`--before fork-pte-batch`) one page per call (0).
#[test]
fn fork_of_a_64k_folio() {
    let src = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
fork child
";
    for arch in ArchKind::ALL {
        assert_eq!(
            large(&line(src, arch, Before::empty(), 4)).0,
            15,
            "{arch:?}"
        );
        assert_eq!(
            large(&line(src, arch, Before::FORK_PTE_BATCH, 4)).0,
            0,
            "{arch:?}"
        );
    }
}

/// Pricing: the page-table figure ignores the subsets (it is what it was);
/// the whole-program figure prices the subset's part at the subset's price
/// and the rest of the superset at the superset's; with equal prices (the
/// built-in profiles) nothing moves; a cheaper subset price lowers the
/// whole program by exactly count × the difference.
#[test]
fn subsets_are_priced_in_place_of_their_superset() {
    let e = line(FOLIO_64K, ArchKind::X86_64, Before::empty(), 6);
    let zen = find_profile("zen3").unwrap();
    assert_eq!(
        zen.price_of(HwEvent::StructPageLineLarge).ns,
        zen.price_of(HwEvent::StructPageLine).ns
    );
    let sup = e.get(HwEvent::StructPageLine);
    assert_eq!(
        e.priced_count(HwEvent::StructPageLine, Figure::PageTable),
        sup
    );
    // 15 large lines and (issue 15, tenth session) the batch's first
    // PageAnonExclusive() read, the line page_folio() read in the same
    // pass: `struct_page_line_hot` (mprotect_rereads_the_order0_line).
    assert_eq!(e.get(HwEvent::StructPageLineHot), 1);
    assert_eq!(
        e.priced_count(HwEvent::StructPageLine, Figure::Program),
        sup - 15 - 1
    );
    assert_eq!(
        e.priced_count(HwEvent::StructPageLineLarge, Figure::PageTable),
        0
    );
    let base = price_in(&e, &zen, Figure::Program).ns;
    let mut cheap = zen.clone();
    for (ev, p) in cheap.prices.iter_mut() {
        if *ev == HwEvent::StructPageLineLarge {
            p.ns = 1.0;
            p.low = Some(1.0);
            p.high = Some(1.0);
        }
    }
    let lower = price_in(&e, &cheap, Figure::Program).ns;
    let d = 15.0 * (zen.price_of(HwEvent::StructPageLine).ns - 1.0);
    assert!((base - lower - d).abs() < 1e-6, "{base} {lower} {d}");
    assert_eq!(
        price_in(&e, &cheap, Figure::PageTable).ns,
        price_in(&e, &zen, Figure::PageTable).ns
    );
    // The phases add up to the total, the interval holds the point.
    let pc = price_program(&e, &cheap);
    assert!((pc.phases.iter().map(|p| p.ns).sum::<f64>() - pc.ns).abs() < 1e-6);
    assert!(pc.ns_range.contains(pc.ns));
}

/// `struct_page_line_hot` (issue 15): fork re-touches, in the rmap dup
/// (`__folio_try_dup_anon_rmap()`), the struct page line that
/// `vm_normal_page()` read a moment before in the same pass of
/// `copy_pte_range()`. By hand, fork of 8 order-0 pages: per page one
/// `vm_normal_page()` line and one dup line (16 `struct_page_line`), the
/// dup's 8 hot. Fork of one 64 KiB folio, batched (6.9+): the head's line
/// (vm_normal_page), the second line (folio_nr_pages), the batch's 16 dup
/// lines (18), of which the first is hot (1) and the other 15 large; per
/// PTE (`--before fork-pte-batch`): 16 × (vm_normal_page + dup) = 32, 16
/// hot, none large (arm64: 2 more, the child's contpte fold). The same on both architectures, and no other
/// statement counts a hot line.
#[test]
fn fork_retouches_the_vm_normal_page_line() {
    let small = "p = mmap 32K at 0x7f00_0000_0000 fixed
write p 32K
fork child
";
    let folio = "thp 64K always
p = mmap 64K at 0x7f00_0000_0000 fixed
write p 64K
fork child
";
    let lines = |e: &HwEvents| {
        (
            e.get(HwEvent::StructPageLine),
            e.get(HwEvent::StructPageLineHot),
            e.get(HwEvent::StructPageLineLarge),
        )
    };
    for arch in ArchKind::ALL {
        for before in [Before::empty(), Before::FORK_PTE_BATCH] {
            assert_eq!(
                lines(&line(small, arch, before, 3)),
                (16, 8, 0),
                "{arch:?} {before:?}"
            );
            for n in 1..=2 {
                assert_eq!(lines(&line(small, arch, before, n)).1, 0);
            }
        }
        assert_eq!(
            lines(&line(folio, arch, Before::empty(), 4)),
            (18, 1, 15),
            "{arch:?}"
        );
        // arm64 adds the child's contpte_try_fold() at the 16th
        // set_ptes(nr = 1): page_folio() and folio_nr_pages(), 2 lines.
        let fold = if arch == ArchKind::Arm64 { 2 } else { 0 };
        assert_eq!(
            lines(&line(folio, arch, Before::FORK_PTE_BATCH, 4)),
            (32 + fold, 16, 0),
            "{arch:?}"
        );
    }
    // Priced: the page-table figure as before; the whole-program figure
    // prices 8 of the 16 lines at the hot price (zen3: an L1 hit).
    let e = line(small, ArchKind::X86_64, Before::empty(), 3);
    assert_eq!(
        e.priced_count(HwEvent::StructPageLine, Figure::PageTable),
        16
    );
    assert_eq!(e.priced_count(HwEvent::StructPageLine, Figure::Program), 8);
    assert_eq!(
        e.priced_count(HwEvent::StructPageLineHot, Figure::Program),
        8
    );
    let zen = find_profile("zen3").unwrap();
    let mut cold = zen.clone();
    for (ev, p) in cold.prices.iter_mut() {
        if *ev == HwEvent::StructPageLineHot {
            *p = zen.price_of(HwEvent::StructPageLine).clone();
        }
    }
    let d = 8.0
        * (zen.price_of(HwEvent::StructPageLine).ns - zen.price_of(HwEvent::StructPageLineHot).ns);
    let (hot, all_cold) = (
        price_in(&e, &zen, Figure::Program).ns,
        price_in(&e, &cold, Figure::Program).ns,
    );
    assert!((all_cold - hot - d).abs() < 1e-6, "{all_cold} {hot} {d}");
    assert_eq!(
        price_in(&e, &cold, Figure::PageTable).ns,
        price_in(&e, &zen, Figure::PageTable).ns
    );
}

/// The order-0 mprotect pass's lines (issue 15, tenth session). By hand,
/// 8 order-0 pages: the RO pass reads each page's struct page line once
/// (vm_normal_folio()'s page_folio(), folio_test_large() on the same
/// line): 8 `struct_page_line`, all 8 the subset `mprotect_page_line`;
/// the RW pass reads it and re-reads it for PageAnonExclusive()
/// (commit_anon_folio_batch(); an order-0 folio is its own head page): 16
/// lines, 8 `mprotect_page_line`, 8 `struct_page_line_hot`. 6.16's per-PTE
/// loop (`--before mprotect-pte-batch`) reads no line in the RO pass and
/// in the RW pass PageAnon() + PageAnonExclusive() of the same line (16,
/// 8, 8). A 64 KiB folio's RW batch: page_folio() and folio_nr_pages()
/// (2) and 16 PageAnonExclusive() reads, the first the line page_folio()
/// read (1 hot), the other 15 large; no `mprotect_page_line` (not an
/// order-0 folio). Both arches; the zero page (no struct page) none.
#[test]
fn mprotect_rereads_the_order0_line() {
    let small = "thp 2M never
p = mmap 32K at 0x7f00_0000_0000 fixed
write p 32K
mprotect p 32K r
mprotect p 32K rw
";
    let zero = "thp 2M never
p = mmap 32K at 0x7f00_0000_0000 fixed
read p 32K
mprotect p 32K r
mprotect p 32K rw
";
    let lines = |e: &HwEvents| {
        (
            e.get(HwEvent::StructPageLine),
            e.get(HwEvent::MprotectPageLine),
            e.get(HwEvent::StructPageLineHot),
            e.get(HwEvent::StructPageLineLarge),
        )
    };
    for arch in ArchKind::ALL {
        assert_eq!(
            lines(&line(small, arch, Before::empty(), 4)),
            (8, 8, 0, 0),
            "{arch:?}"
        );
        assert_eq!(
            lines(&line(small, arch, Before::empty(), 5)),
            (16, 8, 8, 0),
            "{arch:?}"
        );
        let old = Before::MPROTECT_PTE_BATCH;
        assert_eq!(lines(&line(small, arch, old, 4)), (0, 0, 0, 0), "{arch:?}");
        assert_eq!(lines(&line(small, arch, old, 5)), (16, 8, 8, 0), "{arch:?}");
        for n in [4, 5] {
            assert_eq!(
                lines(&line(zero, arch, Before::empty(), n)),
                (0, 0, 0, 0),
                "{arch:?}"
            );
        }
        assert_eq!(
            lines(&line(FOLIO_64K, arch, Before::empty(), 6)),
            (18, 0, 1, 15),
            "{arch:?}"
        );
    }
    // Priced: the page-table figure as before (every line a
    // struct_page_line); the whole-program figure none at that price.
    let e = line(small, ArchKind::X86_64, Before::empty(), 5);
    assert_eq!(
        e.priced_count(HwEvent::StructPageLine, Figure::PageTable),
        16
    );
    assert_eq!(e.priced_count(HwEvent::StructPageLine, Figure::Program), 0);
    assert_eq!(
        e.priced_count(HwEvent::MprotectPageLine, Figure::Program),
        8
    );
    assert_eq!(
        e.priced_count(HwEvent::StructPageLineHot, Figure::Program),
        8
    );
}
