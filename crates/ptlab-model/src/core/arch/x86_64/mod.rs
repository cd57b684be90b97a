//! x86-64: descriptors (4-level paging, 4 KiB pages), the generic PTE
//! hooks (x86 overrides none of the batch hooks), and the TLB recipe.
//!
//! Bit positions: arch/x86/include/asm/pgtable_types.h (_PAGE_BIT_*).

pub mod tlb;

use super::{Arch, ArchKind, Entry, Leaf, LeafFlags, SwapPte};
use crate::core::addr::Pfn;
use crate::core::hw::HwSink;

const PRESENT: u64 = 1 << 0; // _PAGE_BIT_PRESENT
const RW: u64 = 1 << 1; // _PAGE_BIT_RW
const USER: u64 = 1 << 2; // _PAGE_BIT_USER
const ACCESSED: u64 = 1 << 5; // _PAGE_BIT_ACCESSED
const DIRTY: u64 = 1 << 6; // _PAGE_BIT_DIRTY
const PSE: u64 = 1 << 7; // _PAGE_BIT_PSE (huge leaf at PMD/PUD level)
const PROTNONE: u64 = 1 << 8; // _PAGE_BIT_PROTNONE == _PAGE_BIT_GLOBAL
const SPECIAL: u64 = 1 << 9; // _PAGE_BIT_SPECIAL == _PAGE_BIT_SOFTW1
const UFFD_WP: u64 = 1 << 10; // _PAGE_BIT_UFFD_WP == _PAGE_BIT_SOFTW2
const SOFT_DIRTY: u64 = 1 << 11; // _PAGE_BIT_SOFT_DIRTY == _PAGE_BIT_SOFTW3
const NX: u64 = 1 << 63; // _PAGE_BIT_NX
const PFN_MASK: u64 = ((1 << 52) - 1) & !0xfff; // PTE_PFN_MASK (52-bit physical)
/// _PAGE_TABLE: P | RW | USER | ACCESSED | DIRTY.
const TABLE: u64 = PRESENT | RW | USER | ACCESSED | DIRTY;
// Swap PTEs (arch/x86/include/asm/pgtable_64.h): type in bits 59-63, the
// inverted offset in bits 9-58 (L1TF), _PAGE_SWP_SOFT_DIRTY = bit 1,
// _PAGE_SWP_UFFD_WP = bit 2, _PAGE_SWP_EXCLUSIVE = bit 3.
const SWP_TYPE_BITS: u32 = 5;
const SWP_OFFSET_SHIFT: u32 = 9 + SWP_TYPE_BITS;
const SWP_SOFT_DIRTY: u64 = 1 << 1;
const SWP_UFFD_WP: u64 = 1 << 2;
const SWP_EXCLUSIVE: u64 = 1 << 3;

pub struct X86_64;

/// x86-64's present PTEs: PFN in bits 12-51, one bit per attribute.
static RAW_PTE: super::RawPte = super::RawPte {
    pfn_mask: PFN_MASK,
    pfn_shift: 12, // PFN_PTE_SHIFT == PAGE_SHIFT
    present: PRESENT | PROTNONE,
    write: RW,
    young: ACCESSED,
    dirty: DIRTY,
    soft_dirty: SOFT_DIRTY,
    uffd_wp: UFFD_WP,
    special: SPECIAL,
};

impl Arch for X86_64 {
    fn generic_pte_hooks(&self) -> bool {
        true
    }
    /// arch/x86/Kconfig: `select ARCH_SUPPORTS_PT_RECLAIM if X86_64`;
    /// `CONFIG_PT_RECLAIM` defaults to y (set on the kernel we run).
    fn pt_reclaim(&self) -> bool {
        true
    }
    fn raw_pte(&self) -> Option<&'static super::RawPte> {
        Some(&RAW_PTE)
    }
    fn kind(&self) -> ArchKind {
        ArchKind::X86_64
    }

    fn encode_leaf(&self, level: u8, leaf: Leaf) -> u64 {
        let f = leaf.flags;
        let mut raw = (leaf.pfn.0 << 12) & PFN_MASK | USER;
        // A PROT_NONE entry keeps _PAGE_PROTNONE with _PAGE_PRESENT clear (pte_present() is true for both).
        raw |= if f.contains(LeafFlags::PROTNONE) {
            PROTNONE
        } else {
            PRESENT
        };
        if f.contains(LeafFlags::WRITE) {
            raw |= RW;
        }
        if f.contains(LeafFlags::YOUNG) {
            raw |= ACCESSED;
        }
        if f.contains(LeafFlags::DIRTY) {
            raw |= DIRTY;
        }
        if f.contains(LeafFlags::SPECIAL) {
            raw |= SPECIAL;
        }
        if f.contains(LeafFlags::UFFD_WP) {
            raw |= UFFD_WP;
        }
        if f.contains(LeafFlags::SOFT_DIRTY) {
            raw |= SOFT_DIRTY;
        }
        if !f.contains(LeafFlags::EXEC) {
            raw |= NX;
        }
        if level >= 2 {
            raw |= PSE;
        }
        raw
    }

    fn encode_table(&self, _level: u8, table: Pfn) -> u64 {
        (table.0 << 12) & PFN_MASK | TABLE
    }

    fn decode(&self, level: u8, raw: u64) -> Entry {
        if raw & (PRESENT | PROTNONE) == 0 {
            if level == 1 && raw != 0 {
                return super::nonpresent_entry(self.decode_swap(raw));
            }
            return Entry::None;
        }
        let pfn = Pfn((raw & PFN_MASK) >> 12);
        if level >= 2 && raw & PSE == 0 {
            return Entry::Table(pfn);
        }
        let mut f = LeafFlags::empty();
        let pairs = [
            (RW, LeafFlags::WRITE),
            (ACCESSED, LeafFlags::YOUNG),
            (DIRTY, LeafFlags::DIRTY),
            (SPECIAL, LeafFlags::SPECIAL),
            (UFFD_WP, LeafFlags::UFFD_WP),
            (SOFT_DIRTY, LeafFlags::SOFT_DIRTY),
        ];
        for (bit, flag) in pairs {
            if raw & bit != 0 {
                f |= flag;
            }
        }
        if raw & NX == 0 {
            f |= LeafFlags::EXEC;
        }
        if raw & PRESENT == 0 {
            f |= LeafFlags::PROTNONE;
        }
        Entry::Leaf(Leaf { pfn, flags: f })
    }

    fn cont_ptes(&self) -> Option<usize> {
        None
    }

    fn pte_present_raw(&self, raw: u64) -> bool {
        raw & (PRESENT | PROTNONE) != 0
    }

    fn flush_tlb_range(&self, hw: &HwSink, start: u64, end: u64, stride: u64) {
        hw.call(crate::core::hw::KCall::FlushTlbRange);
        tlb::flush_tlb_range(hw, start, end, stride)
    }

    fn flush_tlb_mm(&self, hw: &HwSink) {
        hw.call(crate::core::hw::KCall::FlushTlbMm);
        tlb::flush_tlb_mm(hw)
    }

    /// x86's own `pmdp_invalidate_ad()` leaves the flush to the caller's
    /// gather (`tlb_flush_pmd_range()`). Linux: arch/x86/mm/pgtable.c.
    fn pmdp_invalidate_ad(&self, hw: &HwSink, _addr: u64) {
        hw.one(crate::core::hw::HwEvent::PmdStore);
    }

    fn pte_needs_flush(&self, old: &Leaf, new: &Leaf) -> bool {
        tlb::pte_needs_flush(old, new)
    }

    fn encode_swap(&self, s: SwapPte) -> u64 {
        // __swp_entry(type, offset)
        let mut raw = (!s.offset << SWP_OFFSET_SHIFT >> SWP_TYPE_BITS)
            | ((s.ty as u64) << (64 - SWP_TYPE_BITS));
        raw &= !0x1ff; // the low bits hold no offset
        if s.soft_dirty {
            raw |= SWP_SOFT_DIRTY;
        }
        if s.uffd_wp {
            raw |= SWP_UFFD_WP;
        }
        if s.exclusive {
            raw |= SWP_EXCLUSIVE;
        }
        raw
    }

    fn decode_swap(&self, raw: u64) -> SwapPte {
        SwapPte {
            ty: (raw >> (64 - SWP_TYPE_BITS)) as u8,
            // __swp_offset(): ~val << SWP_TYPE_BITS >> SWP_OFFSET_SHIFT
            offset: (!raw) << SWP_TYPE_BITS >> SWP_OFFSET_SHIFT,
            exclusive: raw & SWP_EXCLUSIVE != 0,
            soft_dirty: raw & SWP_SOFT_DIRTY != 0,
            uffd_wp: raw & SWP_UFFD_WP != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_bit_layout() {
        let leaf = Leaf {
            pfn: Pfn(0x1234),
            flags: LeafFlags::WRITE | LeafFlags::DIRTY | LeafFlags::YOUNG,
        };
        // P|RW|US|A|D, pfn at bit 12, NX.
        assert_eq!(X86_64.encode_leaf(1, leaf), 0x8000_0000_0123_4067);
        let zero = Leaf {
            pfn: Pfn(0x1),
            flags: LeafFlags::SPECIAL | LeafFlags::YOUNG,
        };
        assert_eq!(X86_64.encode_leaf(1, zero), 0x8000_0000_0000_1225);
        // A PMD leaf carries PSE.
        assert_eq!(X86_64.encode_leaf(2, leaf) & PSE, PSE);
        assert_eq!(X86_64.encode_table(2, Pfn(0x42)), 0x42067);
    }
}
