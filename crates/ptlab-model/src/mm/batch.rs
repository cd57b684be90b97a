//! The generic rule that decides which PTEs one batch may cover, and the
//! before/after switches for the five seed changes.
//!
//! Linux: mm/internal.h folio_pte_batch_flags() (6.17+),
//! __pte_batch_clear_ignored(); arch/arm64/include/asm/pgtable.h
//! pte_batch_hint().

use crate::core::addr::PAGE_SIZE;
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::folio::PhysMem;
use crate::core::pgtable::PageTables;
use bitflags::bitflags;
use serde::{Deserialize, Serialize};

bitflags! {
    /// `FPB_*` flags of folio_pte_batch_flags().
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
    pub struct Fpb: u8 {
        const RESPECT_DIRTY = 1 << 0;
        const RESPECT_SOFT_DIRTY = 1 << 1;
        const RESPECT_WRITE = 1 << 2;
        const MERGE_WRITE = 1 << 3;
        const MERGE_YOUNG_DIRTY = 1 << 4;
    }
}

/// The attributes compared between PTEs of a batch after masking
/// (__pte_batch_clear_ignored()): young always ignored; dirty, soft-dirty
/// and write ignored unless respected.
fn masked(flags: LeafFlags, fpb: Fpb) -> LeafFlags {
    let mut f = flags - LeafFlags::YOUNG;
    if !fpb.contains(Fpb::RESPECT_DIRTY) {
        f -= LeafFlags::DIRTY;
    }
    if !fpb.contains(Fpb::RESPECT_SOFT_DIRTY) {
        f -= LeafFlags::SOFT_DIRTY;
    }
    if !fpb.contains(Fpb::RESPECT_WRITE) {
        f -= LeafFlags::WRITE;
    }
    f
}

/// Result of a batch scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Entries in the batch (≥ 1).
    pub nr: u64,
    /// The first PTE with write/young/dirty merged in as the flags ask.
    pub pte: Leaf,
    /// `ptep_get()` calls the scan made after the first entry (for cost accounting).
    pub scans: u64,
}

/// How many PTEs from `va` (whose PTE is `first`, present, mapping a page of
/// a large folio) form one batch, scanning at most `max_nr` entries (the
/// caller keeps `max_nr` inside one VMA and one page table).
/// Linux: mm/internal.h folio_pte_batch_flags().
pub fn folio_pte_batch(
    pt: &PageTables,
    phys: &PhysMem,
    va: u64,
    first: Leaf,
    max_nr: u64,
    fpb: Fpb,
) -> Batch {
    pt.hw.call(crate::core::hw::KCall::FolioPteBatch);
    let mut out = Batch {
        nr: 1,
        pte: first,
        scans: 0,
    };
    let Some(folio) = phys.folio_of(first.pfn) else {
        return out;
    };
    if !folio.is_large() || max_nr <= 1 {
        return out;
    }
    // Clamp to the end of the folio.
    let max_nr = max_nr.min(folio.head.0 + folio.nr_pages() - first.pfn.0);
    let want = masked(first.flags, fpb);
    // pte_batch_hint(): 1, or on arm64 the rest of a valid contiguous block.
    let hint = |l: &Leaf, at: u64| -> u64 { pt.pte_batch_hint(at, l) };
    let mut nr = hint(&first, va);
    if let (true, Some(raw)) = (pt.arch().generic_pte_hooks(), pt.arch().raw_pte()) {
        // The same scan on the table's raw entries borrowed once: every
        // hint is 1 and every ptep_get() one load, counted for the run at
        // the end. An entry continues the batch when it equals the first
        // advanced by its distance (pte_advance_pfn()) outside the bits
        // __pte_batch_clear_ignored() clears.
        if let Some((entries, i0)) = pt.pte_entries(va) {
            let ignored = raw.bits(LeafFlags::all() - masked(LeafFlags::all(), fpb));
            let first_raw = pt.arch().encode_leaf(1, first);
            let max = (max_nr as usize).min(crate::core::addr::PTRS_PER_TABLE - i0);
            let mut n = nr as usize;
            // The bits an entry adds to the batch's first (FPB_MERGE_*).
            let merge = |flags: &mut LeafFlags, e: u64| {
                if fpb.contains(Fpb::MERGE_WRITE) && e & raw.write != 0 {
                    *flags |= LeafFlags::WRITE;
                }
                if fpb.contains(Fpb::MERGE_YOUNG_DIRTY) {
                    if e & raw.young != 0 {
                        *flags |= LeafFlags::YOUNG;
                    }
                    if e & raw.dirty != 0 {
                        *flags |= LeafFlags::DIRTY;
                    }
                }
            };
            // A compact table: inside one run of present entries a frame
            // apart, starting with `first`, every entry equals the first
            // advanced by its distance — the scan would match to the
            // run's end, each entry with the first one's bits.
            if let Some(r) = entries.run_at(i0) {
                let step = raw.advance(0, 1);
                if r.kinds == crate::core::pgtable::Run::PRESENT
                    && r.step == step
                    && entries.raw(i0) == first_raw
                    && max.min(r.end() - i0) > n
                {
                    let to = max.min(r.end() - i0);
                    out.scans += (to - n) as u64;
                    merge(&mut out.pte.flags, first_raw);
                    n = to;
                }
            }
            while n < max {
                out.scans += 1;
                let e = entries.raw(i0 + n);
                if (e ^ raw.advance(first_raw, n as u64)) & !ignored != 0 {
                    break;
                }
                merge(&mut out.pte.flags, e);
                n += 1;
            }
            pt.hw.call_n(crate::core::hw::KCall::PtepGet, out.scans);
            pt.hw.add(crate::core::hw::HwEvent::PteLoad, out.scans);
            out.nr = (n as u64).min(max_nr);
            return out;
        }
    }
    if crate::mm::contpte_runs::applies(pt) && !pt.hw.observing() {
        // arm64: the same scan through the contpte hooks on the table
        // borrowed once (the walking scan below while marks are recorded).
        let pte = &mut out.pte;
        let scan = crate::mm::contpte_runs::folio_pte_batch_scan(
            pt,
            va,
            nr,
            max_nr,
            phys.fork_runs,
            |l, k| {
                if l.pfn.0 != first.pfn.0 + k || masked(l.flags, fpb) != want {
                    return false;
                }
                if fpb.contains(Fpb::MERGE_WRITE) && l.write() {
                    pte.flags |= LeafFlags::WRITE;
                }
                if fpb.contains(Fpb::MERGE_YOUNG_DIRTY) {
                    pte.flags |= l.flags & (LeafFlags::YOUNG | LeafFlags::DIRTY);
                }
                true
            },
        );
        if let Some((n, scans)) = scan {
            (out.nr, out.scans) = (n, scans);
            return out;
        }
    }
    while nr < max_nr {
        let at = va + nr * PAGE_SIZE;
        out.scans += 1;
        let Entry::Leaf(l) = pt.pte(at) else { break };
        if l.pfn.0 != first.pfn.0 + nr || masked(l.flags, fpb) != want {
            break;
        }
        if fpb.contains(Fpb::MERGE_WRITE) && l.write() {
            out.pte.flags |= LeafFlags::WRITE;
        }
        if fpb.contains(Fpb::MERGE_YOUNG_DIRTY) {
            out.pte.flags |= l.flags & (LeafFlags::YOUNG | LeafFlags::DIRTY);
        }
        nr += hint(&l, at);
    }
    out.nr = nr.min(max_nr);
    out
}

bitflags! {
    /// Which of the five seed changes run their *previous* algorithm.
    /// Empty = Linux 6.18 as shipped (every change in).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
    pub struct Before: u8 {
        /// mremap moves PTEs one at a time (before 6.17's folio batching).
        const MREMAP_PTE_BATCH = 1 << 0;
        /// mremap never moves whole PMD/PUD tables (before 4.20 / 5.x).
        const MREMAP_TABLE_MOVE = 1 << 1;
        /// fork copies PTEs one at a time (before 6.9's batching).
        const FORK_PTE_BATCH = 1 << 2;
        /// mprotect changes PTEs one at a time (before 6.17's batching).
        const MPROTECT_PTE_BATCH = 1 << 3;
        /// UFFDIO_MOVE moves one page at a time with a flush each (before 6.18's batching).
        const UFFD_MOVE_BATCH = 1 << 4;
    }
}

impl Before {
    /// The switch names accepted by `--before` and the `before` statement.
    pub const NAMES: [(&'static str, Before); 5] = [
        ("mremap-pte-batch", Before::MREMAP_PTE_BATCH),
        ("mremap-table-move", Before::MREMAP_TABLE_MOVE),
        ("fork-pte-batch", Before::FORK_PTE_BATCH),
        ("mprotect-pte-batch", Before::MPROTECT_PTE_BATCH),
        ("uffd-move-batch", Before::UFFD_MOVE_BATCH),
    ];

    pub fn from_switch(name: &str) -> Option<Before> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
    }

    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(_, b)| self.contains(*b))
            .map(|(n, _)| *n)
            .collect()
    }
}

bitflags! {
    /// Proposed changes newer than the modelled kernel, each switched on by
    /// name (`--after NAME`, the `after` statement). Empty = Linux 6.18 as
    /// shipped. A switch here changes how the kernel works, never what a
    /// program can observe: the same scenario gives the same observation
    /// with and without it (a property test holds each one to that).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
    pub struct After: u8 {
        /// Swap-out unmaps a large folio in one batch: try_to_unmap_one()
        /// clears all its PTEs with one get_and_clear_full_ptes() (no
        /// contpte unfold), flushes the range once, takes the swap counts
        /// for the whole run of slots under one cluster lock and writes
        /// the swap PTEs in one pass, with one rmap update and one
        /// reference drop for the folio (proposed on linux-mm in 2026;
        /// 6.18 does each of these once per PTE). docs/prototyping.md.
        const SWAPOUT_UNMAP_BATCH = 1 << 0;
    }
}

impl After {
    /// The switch names accepted by `--after` and the `after` statement.
    pub const NAMES: [(&'static str, After); 1] =
        [("swapout-unmap-batch", After::SWAPOUT_UNMAP_BATCH)];

    pub fn from_switch(name: &str) -> Option<After> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
    }

    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(_, b)| self.contains(*b))
            .map(|(n, _)| *n)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArchKind, MapFlags, Model, ModelConfig, Prot, ThpKnob, ThpMode};

    fn model(arch: ArchKind, order: u8) -> Model {
        let mut m = Model::new(ModelConfig::for_arch(arch));
        m.set_thp(ThpKnob::Size(order), ThpMode::Always).unwrap();
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, 0x7f00_0000_0000, 0x40000, Prot::READ | Prot::WRITE, f)
            .unwrap();
        m.write(1, 0x7f00_0000_0000, 1).unwrap();
        m
    }

    fn first(m: &Model, va: u64) -> Leaf {
        match m.mm(1).unwrap().pt.pte(va) {
            Entry::Leaf(l) => l,
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn batch_covers_folio_and_respects_max() {
        for arch in ArchKind::ALL {
            let m = model(arch, 5);
            let pt = &m.mm(1).unwrap().pt;
            let va = 0x7f00_0000_0000;
            let b = folio_pte_batch(pt, m.phys(), va, first(&m, va), 512, Fpb::empty());
            assert_eq!(b.nr, 32, "{arch:?}");
            let b = folio_pte_batch(pt, m.phys(), va, first(&m, va), 5, Fpb::empty());
            assert_eq!(b.nr, 5);
            // Starting mid-folio, the batch stops at the folio's end.
            let b = folio_pte_batch(
                pt,
                m.phys(),
                va + 0x3000,
                first(&m, va + 0x3000),
                512,
                Fpb::empty(),
            );
            assert_eq!(b.nr, 29);
        }
        // arm64 reads one gathered entry per contiguous block; x86 every PTE.
        let m = model(ArchKind::Arm64, 5);
        let b = folio_pte_batch(
            &m.mm(1).unwrap().pt,
            m.phys(),
            0x7f00_0000_0000,
            first(&m, 0x7f00_0000_0000),
            512,
            Fpb::empty(),
        );
        assert_eq!(b.scans, 1);
        let m = model(ArchKind::X86_64, 5);
        let b = folio_pte_batch(
            &m.mm(1).unwrap().pt,
            m.phys(),
            0x7f00_0000_0000,
            first(&m, 0x7f00_0000_0000),
            512,
            Fpb::empty(),
        );
        assert_eq!(b.scans, 31);
    }

    #[test]
    fn small_folio_is_a_batch_of_one() {
        let mut m = Model::new(ModelConfig::default());
        let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(1, 0x7f00_0000_0000, 0x4000, Prot::READ | Prot::WRITE, f)
            .unwrap();
        m.write(1, 0x7f00_0000_0000, 1).unwrap();
        m.write(1, 0x7f00_0000_1000, 1).unwrap();
        let b = folio_pte_batch(
            &m.mm(1).unwrap().pt,
            m.phys(),
            0x7f00_0000_0000,
            first(&m, 0x7f00_0000_0000),
            4,
            Fpb::empty(),
        );
        assert_eq!(b.nr, 1);
    }

    #[test]
    fn before_names_round_trip() {
        for (n, b) in Before::NAMES {
            assert_eq!(Before::from_switch(n), Some(b));
            assert_eq!(b.names(), vec![n]);
        }
        assert_eq!(Before::from_switch("fork"), None);
    }
}
