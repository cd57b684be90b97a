//! `pte_line_stream`, counted by hand (issue 15): one per 64-byte line
//! (8 entries) of a source PTE table that one mremap() call's per-entry
//! moves (move_ptes()) read in the tables after the first it moves entries
//! from; each line once per call; none for a table a PMD THP was split
//! into by the same call, none for a whole-table move (move_normal_pmd()).
//! A whole-program event: the page-table figure and every other count are
//! unchanged (scripts/check-same-output.sh, the other count tests).

mod common;

use ptlab_model::{ArchKind, Before, HwEvent};

/// `pte_line_stream` of each statement of `src`, in order.
fn lines(src: &str, arch: ArchKind, before: Before) -> Vec<u64> {
    common::per_statement(src, arch, before, HwEvent::PteLineStream)
}

/// The seed's shape at 8 MiB: 4 source tables (2 MiB-aligned) moved to a
/// destination 4 KiB past a PMD boundary. get_extent() stops at the
/// destination's boundaries, so each source table is moved in two
/// extents, entries 0..510 and entry 511 (which shares the line of entries
/// 504..510). Table 0 is the call's first: 0. Tables 1..3: 64 lines each
/// (the second extent's line already counted): 3 × 64 = 192. The same with
/// every `--before` switch (per-PTE or batched, no table move possible at
/// an unaligned destination) and on both architectures: the lines read do
/// not depend on the batching.
#[test]
fn unaligned_move_streams_the_tables_after_the_first() {
    let src = "thp 2M never
p = mmap 8M at 0x7f00_0020_0000 fixed
write p 8M
q = mremap p 8M 8M maymove fixed 0x7f80_0020_1000
";
    common::assert_per_statement(
        src,
        HwEvent::PteLineStream,
        &ArchKind::ALL,
        &[Before::empty(), Before::all()],
        &[0, 0, 0, 3 * 64],
    );
}

/// Aligned source and destination: 6.18 moves each whole table by
/// move_normal_pmd() (no entry read: 0); before table moves existed
/// (`--before mremap-table-move`) every entry moves, each table in one
/// extent: tables 1..3 × 64 lines = 192.
#[test]
fn aligned_move_streams_only_without_table_moves() {
    let src = "thp 2M never
p = mmap 8M at 0x7f00_0020_0000 fixed
write p 8M
q = mremap p 8M 8M maymove fixed 0x7f80_0020_0000
";
    for arch in ArchKind::ALL {
        assert_eq!(lines(src, arch, Before::empty()), [0, 0, 0, 0], "{arch:?}");
        assert_eq!(
            lines(src, arch, Before::MREMAP_TABLE_MOVE),
            [0, 0, 0, 3 * 64],
            "{arch:?}"
        );
    }
}

/// Moves that stay in one source table count nothing (the calibrate PTE
/// move and the mremap-batch seed's shape: 1 MiB within a PMD). A move
/// starting mid-table: 1 MiB from entry 256 of table 0 through table 1
/// to entry 255 of table 2 (4 MiB = 1024 entries, destination 4 KiB past
/// a boundary): table 0 is the first (0); table 1, split at entry 511:
/// 64 lines; table 2, entries 0..255: one extent (the destination cursor
/// is at entry 1 of its table, 511 entries from its boundary): 32 lines.
/// 64 + 32 = 96.
#[test]
fn one_table_counts_nothing_and_partial_tables_count_their_lines() {
    let src = "thp 2M never
p = mmap 1M at 0x7f00_0020_0000 fixed
write p 1M
q = mremap p 1M 1M maymove fixed 0x7f00_0050_0000
r = mmap 4M at 0x7f10_0010_0000 fixed
write r 4M
s = mremap r 4M 4M maymove fixed 0x7f90_0010_1000
";
    common::assert_per_statement(
        src,
        HwEvent::PteLineStream,
        &ArchKind::ALL,
        &[Before::empty(), Before::all()],
        &[0, 0, 0, 0, 0, 0, 64 + 32],
    );
}

/// PMD-mapped THPs moved to an unaligned destination: each is split by
/// the move itself (split_huge_pmd(): its new PTE table was just written)
/// and its entries then move: not counted.
#[test]
fn tables_split_from_a_thp_by_the_move_are_not_counted() {
    let src = "thp 2M always
p = mmap 8M at 0x7f00_0020_0000 fixed
write p 8M
q = mremap p 8M 8M maymove fixed 0x7f80_0020_1000
";
    for arch in ArchKind::ALL {
        assert_eq!(lines(src, arch, Before::empty()), [0, 0, 0, 0], "{arch:?}");
    }
}
