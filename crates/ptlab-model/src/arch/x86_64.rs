//! x86-64 descriptors (4-level paging, 4 KiB pages).
//!
//! Bit positions: arch/x86/include/asm/pgtable_types.h (_PAGE_BIT_*).

use super::{Arch, ArchKind, Entry, Leaf, LeafFlags};
use crate::addr::Pfn;

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

pub struct X86_64;

impl Arch for X86_64 {
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
