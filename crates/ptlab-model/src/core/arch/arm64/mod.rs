//! arm64: stage-1 descriptors (4 KiB granule, 4 levels), the contpte
//! overrides of the PTE hooks ([`contpte`]) and the TLB recipe ([`tlbflush`]).
//!
//! Bit positions: arch/arm64/include/asm/pgtable-hwdef.h (PTE_*, PMD_*) and
//! pgtable-prot.h (software bits PTE_WRITE == PTE_DBM, PTE_DIRTY, PTE_SPECIAL,
//! PTE_UFFD_WP, PTE_PRESENT_INVALID).

pub mod contpte;
pub mod tlbflush;

use super::{
    generic, Arch, ArchKind, Entry, FolioSpan, Leaf, LeafFlags, PteRef, PteTable, SwapPte,
};
use crate::core::addr::Pfn;
use crate::core::hw::{HwSink, KCall};

const VALID: u64 = 1 << 0; // PTE_VALID
const TYPE_PAGE: u64 = 1 << 1; // PTE_TYPE_PAGE (level 3) / table bit
const ATTR_NORMAL: u64 = 0 << 2; // AttrIndx = MT_NORMAL (0)
const USER: u64 = 1 << 6; // PTE_USER (AP[1])
const RDONLY: u64 = 1 << 7; // PTE_RDONLY (AP[2])
const SHARED: u64 = 3 << 8; // PTE_SHARED (inner shareable)
const AF: u64 = 1 << 10; // PTE_AF
const NG: u64 = 1 << 11; // PTE_NG; also PTE_PRESENT_INVALID when !VALID
const DBM: u64 = 1 << 51; // PTE_DBM == PTE_WRITE
const CONT: u64 = 1 << 52; // PTE_CONT
const PXN: u64 = 1 << 53; // PTE_PXN
const UXN: u64 = 1 << 54; // PTE_UXN
const SW_DIRTY: u64 = 1 << 55; // PTE_DIRTY (software)
const SPECIAL: u64 = 1 << 56; // PTE_SPECIAL (software)
const UFFD_WP: u64 = 1 << 58; // PTE_UFFD_WP (software)
const ADDR_MASK: u64 = ((1 << 48) - 1) & !0xfff; // PTE_ADDR_LOW, 48-bit OA
const TABLE_PXN: u64 = 1 << 59; // PMD_TABLE_PXN
/// Table descriptor: PMD_TYPE_TABLE | PMD_TABLE_AF | PMD_TABLE_PXN
/// (Linux: arch/arm64/include/asm/pgalloc.h __pmd_populate()).
const TABLE: u64 = VALID | TYPE_PAGE | AF | TABLE_PXN;

/// Entries per contiguous block with a 4 KiB granule (CONT_PTE_SHIFT = 4).
pub const CONT_PTES: usize = 16;

// Swap PTEs (arch/arm64/include/asm/pgtable.h): bits 0-1 zero,
// PTE_SWP_EXCLUSIVE = bit 2, PTE_SWP_UFFD_WP = bit 3, type in bits 6-10,
// bit 11 (PTE_PRESENT_INVALID) zero, offset in bits 12-61. No soft-dirty.
const SWP_EXCLUSIVE: u64 = 1 << 2;
const SWP_UFFD_WP: u64 = 1 << 3;
const SWP_TYPE_SHIFT: u32 = 6;
const SWP_OFFSET_SHIFT: u32 = 12;
const SWP_OFFSET_MASK: u64 = (1 << 50) - 1;

pub struct Arm64;

/// `pte_young()` and `pte_dirty()` of a present descriptor as
/// [`LeafFlags::YOUNG`] / [`LeafFlags::DIRTY`] (what [`Arm64::decode`]
/// reports): AF; hardware dirty (DBM with AP[2] clear) or PTE_DIRTY.
/// Linux: arch/arm64/include/asm/pgtable.h pte_young(), pte_dirty().
#[inline]
fn young_dirty_raw(raw: u64) -> LeafFlags {
    let mut f = LeafFlags::empty();
    if raw & AF != 0 {
        f |= LeafFlags::YOUNG;
    }
    if (raw & DBM != 0 && raw & RDONLY == 0) || raw & SW_DIRTY != 0 {
        f |= LeafFlags::DIRTY;
    }
    f
}

/// `pte_wrprotect()` on a present descriptor as [`Arm64::encode_leaf`]
/// writes it: hardware dirtiness moves to the software dirty bit, then
/// PTE_WRITE (DBM) is cleared and PTE_RDONLY set — the same descriptor as
/// decoding, removing `LeafFlags::WRITE` and encoding again (tested over
/// every attribute subset), without the round trip.
/// Linux: arch/arm64/include/asm/pgtable.h pte_wrprotect().
fn pte_wrprotect_raw(raw: u64) -> u64 {
    let hw_dirty = raw & DBM != 0 && raw & RDONLY == 0;
    let raw = if hw_dirty { raw | SW_DIRTY } else { raw };
    (raw & !DBM) | RDONLY
}

/// fork's view of a raw arm64 PTE for the per-segment copy loop
/// (`mm/contpte_runs.rs` `copy_small_run`): the tests and changes
/// `copy_present_ptes()` makes on one descriptor, on its bits (every
/// present descriptor the model stores comes from [`Arm64::encode_leaf`],
/// so these agree with decoding, changing the flags and encoding again —
/// checked by `fork_raw_is_the_round_trip` below).
/// Linux: mm/memory.c __copy_present_ptes(); arch/arm64/include/asm/pgtable.h
/// pte_wrprotect(), pte_mkold(), pte_clear_uffd_wp().
pub(crate) mod fork_raw {
    use super::*;

    /// The frame field's unit: consecutive frames differ by this much.
    pub const FRAME_STEP: u64 = 1 << 12;
    /// The frame field (`PTE_ADDR_LOW`).
    pub const ADDR: u64 = ADDR_MASK;

    /// A present (valid or PROT_NONE) entry without PTE_SPECIAL and
    /// PTE_CONT: an entry the order-0 copy loop takes.
    #[inline]
    pub fn plain_present(raw: u64) -> bool {
        (raw & VALID != 0 || raw & NG != 0) && raw & (SPECIAL | CONT) == 0
    }
    /// A valid (not PROT_NONE) level-1 leaf descriptor with PTE_CONT and
    /// without PTE_SPECIAL, exactly as [`Arm64::encode_leaf`] writes it
    /// (`encode_leaf(1, decode(1, raw)) == raw`), decided on the bits
    /// without the round trip: the fixed attribute bits all set, nothing
    /// outside the bits the codec writes, and the write/dirty bits one of
    /// the four forms it writes (DBM; DBM | RDONLY; RDONLY; RDONLY |
    /// PTE_DIRTY). Checked against the round trip by
    /// `cont_leaf_canonical_is_the_round_trip` below.
    #[inline]
    pub fn cont_leaf_canonical(raw: u64) -> bool {
        const FIXED: u64 = USER | SHARED | PXN | TYPE_PAGE | VALID | NG | CONT;
        const WD: u64 = DBM | RDONLY | SW_DIRTY;
        const FREE: u64 = ADDR_MASK | AF | UFFD_WP | UXN;
        let wd = raw & WD;
        raw & FIXED == FIXED
            && raw & !(FIXED | WD | FREE) == 0
            && (wd == DBM || wd == DBM | RDONLY || wd == RDONLY || wd == RDONLY | SW_DIRTY)
    }
    /// The frame a present descriptor maps.
    #[inline]
    pub fn pfn(raw: u64) -> Pfn {
        Pfn((raw & ADDR_MASK) >> 12)
    }
    /// `pte_write()`: PTE_WRITE (DBM).
    #[inline]
    pub fn writable(raw: u64) -> bool {
        raw & DBM != 0
    }
    /// The parent's entry after `wrprotect_ptes()`.
    #[inline]
    pub fn parent(raw: u64) -> u64 {
        pte_wrprotect_raw(raw)
    }
    /// The child's entry: write-protected when writable, old, and without
    /// uffd-wp unless the child keeps it.
    #[inline]
    pub fn child(raw: u64, keep_uffd_wp: bool) -> u64 {
        let raw = if writable(raw) {
            pte_wrprotect_raw(raw)
        } else {
            raw
        };
        let clear = AF | if keep_uffd_wp { 0 } else { UFFD_WP };
        raw & !clear
    }
}

impl Arch for Arm64 {
    fn kind(&self) -> ArchKind {
        ArchKind::Arm64
    }
    /// arch/arm64/Kconfig does not select `ARCH_SUPPORTS_PT_RECLAIM`
    /// (6.18; still not in 6.19-rc5), so `CONFIG_PT_RECLAIM` cannot be set.
    fn pt_reclaim(&self) -> bool {
        false
    }

    fn encode_leaf(&self, level: u8, leaf: Leaf) -> u64 {
        let f = leaf.flags;
        let mut raw = (leaf.pfn.0 << 12) & ADDR_MASK | ATTR_NORMAL | USER | SHARED | PXN;
        if level == 1 {
            raw |= TYPE_PAGE;
        }
        if f.contains(LeafFlags::PROTNONE) {
            // PAGE_NONE: not valid, marked present-invalid.
            raw |= NG;
        } else {
            raw |= VALID | NG;
        }
        if f.contains(LeafFlags::YOUNG) {
            raw |= AF;
        }
        // Writable entries carry DBM; a clean writable entry keeps AP[2]=RDONLY
        // until hardware (or pte_mkdirty) clears it. A dirty read-only entry
        // records dirtiness in the software PTE_DIRTY bit.
        // Linux: pte_mkwrite_novma(), pte_mkdirty(), pte_wrprotect().
        let write = f.contains(LeafFlags::WRITE);
        let dirty = f.contains(LeafFlags::DIRTY);
        if write {
            raw |= DBM;
            if !dirty {
                raw |= RDONLY;
            }
        } else {
            raw |= RDONLY;
            if dirty {
                raw |= SW_DIRTY;
            }
        }
        if f.contains(LeafFlags::SPECIAL) {
            raw |= SPECIAL;
        }
        if f.contains(LeafFlags::UFFD_WP) {
            raw |= UFFD_WP;
        }
        if f.contains(LeafFlags::CONT) && level == 1 {
            raw |= CONT;
        }
        if !f.contains(LeafFlags::EXEC) {
            raw |= UXN;
        }
        raw
    }

    fn encode_table(&self, _level: u8, table: Pfn) -> u64 {
        (table.0 << 12) & ADDR_MASK | TABLE
    }

    fn pte_present_raw(&self, raw: u64) -> bool {
        // Valid, or PTE_PRESENT_INVALID (nG without valid): decode()'s test.
        raw & VALID != 0 || raw & NG != 0
    }

    fn decode(&self, level: u8, raw: u64) -> Entry {
        let valid = raw & VALID != 0;
        let present_invalid = !valid && raw & NG != 0;
        if !valid && !present_invalid {
            if level == 1 && raw != 0 {
                return super::nonpresent_entry(self.decode_swap(raw));
            }
            return Entry::None;
        }
        let pfn = Pfn((raw & ADDR_MASK) >> 12);
        if level >= 2 && valid && raw & TYPE_PAGE != 0 {
            return Entry::Table(pfn);
        }
        let mut f = LeafFlags::empty();
        if present_invalid {
            f |= LeafFlags::PROTNONE;
        }
        // pte_dirty() = pte_hw_dirty() || pte_sw_dirty().
        f |= young_dirty_raw(raw);
        if raw & DBM != 0 {
            f |= LeafFlags::WRITE;
        }
        if raw & SPECIAL != 0 {
            f |= LeafFlags::SPECIAL;
        }
        if raw & UFFD_WP != 0 {
            f |= LeafFlags::UFFD_WP;
        }
        if raw & CONT != 0 {
            f |= LeafFlags::CONT;
        }
        if raw & UXN == 0 {
            f |= LeafFlags::EXEC;
        }
        Entry::Leaf(Leaf { pfn, flags: f })
    }

    fn cont_ptes(&self) -> Option<usize> {
        Some(CONT_PTES)
    }

    fn ptep_get(&self, t: &PteRef<'_>, i: usize) -> Entry {
        t.hw.call(KCall::PtepGet);
        if t.hw.features.contpte_off {
            return generic::ptep_get(t, i);
        }
        contpte::ptep_get(t, i)
    }

    fn set_ptes(
        &self,
        t: &mut PteTable<'_>,
        i: usize,
        leaf: Leaf,
        nr: usize,
        folios: &dyn FolioSpan,
    ) {
        t.hw.call(KCall::SetPtes);
        if t.hw.features.contpte_off {
            return generic::set_ptes(t, i, leaf, nr);
        }
        contpte::set_ptes(self, t, i, leaf, nr, folios)
    }

    fn get_and_clear_full_ptes(
        &self,
        t: &mut PteTable<'_>,
        i: usize,
        nr: usize,
    ) -> Vec<(usize, Leaf)> {
        t.hw.call(super::clear_call(nr));
        if t.hw.features.contpte_off {
            return generic::get_and_clear_full_ptes(t, i, nr);
        }
        contpte::get_and_clear_full_ptes(self, t, i, nr).into_vec()
    }

    fn get_and_clear_full_ptes_batch(
        &self,
        t: &mut PteTable<'_>,
        i: usize,
        nr: usize,
    ) -> super::ClearedPtes {
        t.hw.call(super::clear_call(nr));
        if t.hw.features.contpte_off {
            return super::ClearedPtes::List(generic::get_and_clear_full_ptes(t, i, nr));
        }
        contpte::get_and_clear_full_ptes(self, t, i, nr)
    }

    fn ptep_get_and_clear(&self, t: &mut PteTable<'_>, i: usize) -> Option<Leaf> {
        t.hw.call(super::clear_call(1));
        if t.hw.features.contpte_off {
            return generic::ptep_get_and_clear_one(t, i);
        }
        contpte::ptep_get_and_clear(self, t, i)
    }

    fn modify_prot_start_ptes(&self, t: &mut PteTable<'_>, i: usize, nr: usize) -> Leaf {
        t.hw.call(KCall::ModifyProtStartPtes);
        if t.hw.features.contpte_off {
            return generic::modify_prot_start_ptes(self, t, i, nr);
        }
        contpte::modify_prot_start_ptes(self, t, i, nr)
    }

    fn ptep_modify(&self, t: &mut PteTable<'_>, i: usize, leaf: Leaf) {
        t.hw.call(KCall::PtepModify);
        if t.hw.features.contpte_off {
            return generic::ptep_modify(t, i, leaf);
        }
        contpte::ptep_modify(self, t, i, leaf)
    }

    fn wrprotect_ptes(&self, t: &mut PteTable<'_>, i: usize, nr: usize) {
        t.hw.call(KCall::WrprotectPtes);
        if t.hw.features.contpte_off {
            return generic::wrprotect_ptes(t, i, nr);
        }
        contpte::wrprotect_ptes(self, t, i, nr)
    }

    fn set_pte_at_nonpresent(&self, t: &mut PteTable<'_>, i: usize, raw: u64) {
        t.hw.call(KCall::SetPtes);
        if t.hw.features.contpte_off {
            return generic::set_pte_at_nonpresent(t, i, raw);
        }
        contpte::set_pte_at_nonpresent(t, i, raw)
    }

    fn ptep_get_and_clear_nonpresent(&self, t: &mut PteTable<'_>, i: usize) {
        t.hw.call(KCall::PtepGetAndClear);
        if t.hw.features.contpte_off {
            return generic::ptep_get_and_clear_nonpresent(t, i);
        }
        contpte::ptep_get_and_clear_nonpresent(t, i)
    }

    fn pte_batch_hint(&self, i: usize, leaf: &Leaf) -> usize {
        contpte::pte_batch_hint(i, leaf)
    }

    fn flush_tlb_range(&self, hw: &HwSink, start: u64, end: u64, stride: u64) {
        hw.call(KCall::FlushTlbRange);
        tlbflush::flush_tlb_range(hw, start, end, stride)
    }

    fn flush_tlb_mm(&self, hw: &HwSink) {
        hw.call(KCall::FlushTlbMm);
        tlbflush::flush_tlb_mm(hw)
    }

    /// arm64 always defers reclaim's flush (arch_tlbbatch_should_defer()
    /// is true but for a TLBI erratum): arch_tlbbatch_add_pending() →
    /// __flush_tlb_range_nosync() issues DSB ISHST and the TLBIs at once and
    /// leaves the completing DSB ISH to arch_tlbbatch_flush().
    /// Linux: arch/arm64/include/asm/tlbflush.h.
    fn tlbbatch_add_pending(&self, hw: &HwSink, start: u64, end: u64) {
        hw.call(KCall::TlbbatchAddPending);
        tlbflush::flush_tlb_range_nosync(hw, start, end, crate::core::addr::PAGE_SIZE);
    }

    fn tlbbatch_flush(&self, hw: &HwSink) {
        hw.call(KCall::TlbbatchFlush);
        hw.one(crate::core::hw::HwEvent::DsbIsh);
    }

    fn encode_swap(&self, s: SwapPte) -> u64 {
        let mut raw = ((s.ty as u64 & 31) << SWP_TYPE_SHIFT)
            | ((s.offset & SWP_OFFSET_MASK) << SWP_OFFSET_SHIFT);
        if s.exclusive {
            raw |= SWP_EXCLUSIVE;
        }
        if s.uffd_wp {
            raw |= SWP_UFFD_WP;
        }
        raw
    }

    fn decode_swap(&self, raw: u64) -> SwapPte {
        SwapPte {
            ty: ((raw >> SWP_TYPE_SHIFT) & 31) as u8,
            offset: (raw >> SWP_OFFSET_SHIFT) & SWP_OFFSET_MASK,
            exclusive: raw & SWP_EXCLUSIVE != 0,
            soft_dirty: false,
            uffd_wp: raw & SWP_UFFD_WP != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every attribute subset arm64 encodes, at a low and a high PFN.
    fn every_leaf() -> impl Iterator<Item = Leaf> {
        let bits = [
            LeafFlags::WRITE,
            LeafFlags::DIRTY,
            LeafFlags::YOUNG,
            LeafFlags::SPECIAL,
            LeafFlags::UFFD_WP,
            LeafFlags::CONT,
            LeafFlags::EXEC,
            LeafFlags::PROTNONE,
        ];
        (0..1u32 << bits.len()).flat_map(move |m| {
            let flags = bits
                .iter()
                .enumerate()
                .filter(|(i, _)| m & (1 << i) != 0)
                .fold(LeafFlags::empty(), |f, (_, b)| f | *b);
            [0x40, (1 << 36) - 1].map(|pfn| Leaf {
                pfn: Pfn(pfn),
                flags,
            })
        })
    }

    /// pte_wrprotect_raw() is decode → remove WRITE → encode, for every
    /// attribute subset arm64 encodes, at a low and a high PFN.
    #[test]
    fn wrprotect_raw_is_the_round_trip() {
        for l in every_leaf() {
            let (f, pfn) = (l.flags, l.pfn.0);
            let want = Leaf {
                pfn: Pfn(pfn),
                flags: f - LeafFlags::WRITE,
            };
            assert_eq!(
                pte_wrprotect_raw(Arm64.encode_leaf(1, l)),
                Arm64.encode_leaf(1, want),
                "{f:?}"
            );
        }
    }

    /// `fork_raw::cont_leaf_canonical()` against decoding and encoding
    /// again, over every subset of the descriptor bits the codec writes or
    /// reads and three others (bits 2, 57 and 63), at two frames.
    #[test]
    fn cont_leaf_canonical_is_the_round_trip() {
        let bits = [
            VALID,
            TYPE_PAGE,
            1 << 2,
            USER,
            RDONLY,
            1 << 8,
            1 << 9,
            AF,
            NG,
            DBM,
            CONT,
            PXN,
            UXN,
            SW_DIRTY,
            SPECIAL,
            1 << 57,
            UFFD_WP,
            1 << 63,
        ];
        let mut canonical = 0;
        for set in 0u32..1 << bits.len() {
            let attrs = (0..bits.len())
                .filter(|&b| set >> b & 1 != 0)
                .fold(0u64, |a, b| a | bits[b]);
            for pfn in [0x1230u64, 0xf_ffff_fff0] {
                let raw = attrs | (pfn << 12) & ADDR_MASK;
                let want = match Arm64.decode(1, raw) {
                    Entry::Leaf(l) => {
                        l.valid_cont()
                            && !l.flags.contains(LeafFlags::SPECIAL)
                            && Arm64.encode_leaf(1, l) == raw
                    }
                    _ => false,
                };
                assert_eq!(fork_raw::cont_leaf_canonical(raw), want, "{raw:#x}");
                canonical += usize::from(want);
            }
        }
        assert_eq!(
            canonical,
            2 * 8 * 4,
            "two frames × AF, UFFD_WP, UXN × four write forms"
        );
    }

    /// fork_raw's parent and child descriptors are decode → change the
    /// flags → encode, for every attribute subset arm64 encodes.
    #[test]
    fn fork_raw_is_the_round_trip() {
        for l in every_leaf() {
            let (f, pfn) = (l.flags, l.pfn.0);
            let raw = Arm64.encode_leaf(1, l);
            assert_eq!(
                fork_raw::plain_present(raw),
                !f.intersects(LeafFlags::SPECIAL | LeafFlags::CONT),
                "{f:?}"
            );
            assert_eq!(fork_raw::pfn(raw), Pfn(pfn));
            assert_eq!(fork_raw::writable(raw), f.contains(LeafFlags::WRITE));
            let parent = Leaf {
                flags: f - LeafFlags::WRITE,
                ..l
            };
            assert_eq!(fork_raw::parent(raw), Arm64.encode_leaf(1, parent));
            for keep in [false, true] {
                let mut c = f - LeafFlags::WRITE - LeafFlags::YOUNG;
                if !keep {
                    c -= LeafFlags::UFFD_WP;
                }
                let child = Leaf { flags: c, ..l };
                assert_eq!(
                    fork_raw::child(raw, keep),
                    Arm64.encode_leaf(1, child),
                    "{f:?} keep uffd-wp {keep}"
                );
            }
        }
    }

    #[test]
    fn real_bit_layout() {
        let rw_clean = Leaf {
            pfn: Pfn(0x40),
            flags: LeafFlags::WRITE | LeafFlags::YOUNG,
        };
        let raw = Arm64.encode_leaf(1, rw_clean);
        assert_eq!(raw & 0b11, 0b11, "valid page descriptor");
        assert_ne!(raw & DBM, 0);
        assert_ne!(raw & RDONLY, 0, "clean writable keeps AP[2] until dirtied");
        let rw_dirty = Leaf {
            pfn: Pfn(0x40),
            flags: LeafFlags::WRITE | LeafFlags::DIRTY | LeafFlags::YOUNG,
        };
        assert_eq!(Arm64.encode_leaf(1, rw_dirty) & RDONLY, 0);
        let block = Arm64.encode_leaf(2, rw_dirty);
        assert_eq!(block & 0b11, 0b01, "PMD block descriptor");
        assert_eq!((raw & ADDR_MASK) >> 12, 0x40);
    }
}
