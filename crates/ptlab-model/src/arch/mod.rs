//! The architecture layer: how an arch-neutral entry is encoded in a real
//! descriptor, and what the contiguous-PTE hint is.
//!
//! Both modelled architectures use 4 KiB pages, 4 levels and 512 eight-byte
//! entries per table, so the table structure is shared ([`crate::pgtable`]);
//! only descriptor bit layouts and the contpte rules differ.

mod arm64;
mod x86_64;

pub use arm64::Arm64;
pub use x86_64::X86_64;

use crate::addr::Pfn;
use bitflags::bitflags;
use serde::{Deserialize, Serialize};

bitflags! {
    /// Arch-neutral attributes of a present leaf entry.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
    pub struct LeafFlags: u16 {
        /// Writable (x86 RW; arm64 PTE_WRITE/DBM with AP[2] managed by dirty state).
        const WRITE = 1 << 0;
        /// Dirty (x86 D; arm64 hardware-dirty or PTE_DIRTY).
        const DIRTY = 1 << 1;
        /// Accessed (x86 A; arm64 AF).
        const YOUNG = 1 << 2;
        /// `pte_special()`: no struct page behind it (the 4 KiB zero page).
        const SPECIAL = 1 << 3;
        /// Soft-dirty (x86 only; arm64 has no soft-dirty bit).
        const SOFT_DIRTY = 1 << 4;
        /// userfaultfd write-protect marker.
        const UFFD_WP = 1 << 5;
        /// arm64 contiguous hint (PTE_CONT); never set on x86.
        const CONT = 1 << 6;
        /// Executable by user space.
        const EXEC = 1 << 7;
        /// PROT_NONE: present to the kernel, not accessible by hardware.
        const PROTNONE = 1 << 8;
    }
}

/// A present leaf (PTE or PMD block) in arch-neutral form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Leaf {
    pub pfn: Pfn,
    pub flags: LeafFlags,
}

impl Leaf {
    pub fn write(&self) -> bool {
        self.flags.contains(LeafFlags::WRITE)
    }
    /// arm64 pte_valid_cont(): CONT on a valid entry. A PROT_NONE entry is
    /// present but not valid, so its CONT bit is ignored by the contpte layer.
    pub fn valid_cont(&self) -> bool {
        self.flags.contains(LeafFlags::CONT) && !self.flags.contains(LeafFlags::PROTNONE)
    }
    /// Attributes that must agree for entries to share a contiguous block
    /// (young and dirty are gathered across the block, so they are ignored).
    /// Linux: arch/arm64/mm/contpte.c __contpte_try_fold() compares pte_pgprot
    /// after pte_mkold(pte_mkclean()).
    pub fn fold_key(&self) -> LeafFlags {
        self.flags - (LeafFlags::YOUNG | LeafFlags::DIRTY | LeafFlags::CONT)
    }
}

/// A decoded entry at any level.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Entry {
    None,
    /// Points to the next-level table, held in frame `Pfn`.
    Table(Pfn),
    /// A present leaf: a PTE at level 1, a PMD block at level 2.
    Leaf(Leaf),
    /// A swap entry (non-present PTE, level 1 only).
    Swap(SwapPte),
}

/// A swap PTE in arch-neutral form: the swap entry (`swp_entry_t`: type and
/// offset) plus the three software bits a swap PTE keeps. Linux:
/// include/linux/swapops.h; arch/x86/include/asm/pgtable_64.h and
/// arch/arm64/include/asm/pgtable.h (`__swp_entry`, `_PAGE_SWP_*`,
/// `PTE_SWP_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct SwapPte {
    /// Swap device index (`swp_type()`, 5 bits).
    pub ty: u8,
    /// Slot in the device (`swp_offset()`); slot 0 holds the header.
    pub offset: u64,
    /// `pte_swp_exclusive()`: the page was PageAnonExclusive when unmapped.
    pub exclusive: bool,
    /// `pte_swp_soft_dirty()` (x86 only).
    pub soft_dirty: bool,
    /// `pte_swp_uffd_wp()`.
    pub uffd_wp: bool,
}

/// Which architecture is modelled.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ArchKind {
    X86_64,
    Arm64,
}

impl ArchKind {
    pub const ALL: [ArchKind; 2] = [ArchKind::X86_64, ArchKind::Arm64];

    pub fn from_name(s: &str) -> Option<ArchKind> {
        match s {
            "x86_64" | "x86-64" | "amd64" => Some(ArchKind::X86_64),
            "arm64" | "aarch64" => Some(ArchKind::Arm64),
            _ => None,
        }
    }
    pub const fn name(self) -> &'static str {
        match self {
            ArchKind::X86_64 => "x86_64",
            ArchKind::Arm64 => "arm64",
        }
    }
    /// The encoder for this architecture.
    pub fn ops(self) -> &'static dyn Arch {
        match self {
            ArchKind::X86_64 => &X86_64,
            ArchKind::Arm64 => &Arm64,
        }
    }
}

/// Descriptor encoding for one architecture. Level 1 = PTE, 2 = PMD, 3 = PUD, 4 = PGD.
pub trait Arch: Sync {
    fn kind(&self) -> ArchKind;
    /// Encode a leaf at `level` (1 = page, 2 = PMD block).
    fn encode_leaf(&self, level: u8, leaf: Leaf) -> u64;
    /// Encode a table descriptor at `level` (2..=4) pointing at `table`.
    fn encode_table(&self, level: u8, table: Pfn) -> u64;
    /// Decode a raw descriptor at `level`. A zero descriptor decodes as `Entry::None`.
    fn decode(&self, level: u8, raw: u64) -> Entry;
    /// Entries per contiguous-PTE block (16 on arm64 with 4 KiB pages), or
    /// `None` if the architecture has no contiguous hint the kernel manages.
    /// Linux: arch/arm64/include/asm/pgtable-hwdef.h CONT_PTES.
    fn cont_ptes(&self) -> Option<usize>;
    /// Encode a swap PTE (level 1). Linux: `__swp_entry()` +
    /// `__swp_entry_to_pte()` and the `pte_swp_mk*()` bits.
    fn encode_swap(&self, s: SwapPte) -> u64;
    /// Decode a non-zero, non-present level-1 descriptor as a swap PTE.
    fn decode_swap(&self, raw: u64) -> SwapPte;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_flag_subsets() -> Vec<LeafFlags> {
        // Every combination of the attributes a leaf can carry (CONT only on arm64 level 1).
        let bits = [
            LeafFlags::WRITE,
            LeafFlags::DIRTY,
            LeafFlags::YOUNG,
            LeafFlags::SPECIAL,
            LeafFlags::SOFT_DIRTY,
            LeafFlags::UFFD_WP,
            LeafFlags::CONT,
            LeafFlags::EXEC,
            LeafFlags::PROTNONE,
        ];
        (0..(1u32 << bits.len()))
            .map(|m| {
                let mut f = LeafFlags::empty();
                for (i, b) in bits.iter().enumerate() {
                    if m & (1 << i) != 0 {
                        f |= *b;
                    }
                }
                f
            })
            .collect()
    }

    #[test]
    fn leaf_round_trip_every_flag_subset() {
        for arch in ArchKind::ALL {
            let ops = arch.ops();
            for level in [1u8, 2] {
                for f in all_flag_subsets() {
                    let mut f = f;
                    if arch == ArchKind::Arm64 {
                        f.remove(LeafFlags::SOFT_DIRTY);
                    }
                    if arch == ArchKind::X86_64 || level != 1 {
                        f.remove(LeafFlags::CONT);
                    }
                    let leaf = Leaf {
                        pfn: Pfn(0x12345),
                        flags: f,
                    };
                    let raw = ops.encode_leaf(level, leaf);
                    assert_ne!(raw, 0);
                    assert_eq!(
                        ops.decode(level, raw),
                        Entry::Leaf(leaf),
                        "{arch:?} l{level} {f:?} raw={raw:#x}"
                    );
                }
            }
            for level in 2..=4u8 {
                let raw = ops.encode_table(level, Pfn(0x777));
                assert_eq!(ops.decode(level, raw), Entry::Table(Pfn(0x777)));
            }
            assert_eq!(ops.decode(1, 0), Entry::None);
        }
    }

    #[test]
    fn swap_round_trip() {
        for arch in ArchKind::ALL {
            let ops = arch.ops();
            for m in 0..8u8 {
                for (ty, offset) in [(0u8, 1u64), (3, 0x1234), (31, (1 << 50) - 1)] {
                    let s = SwapPte {
                        ty,
                        offset,
                        exclusive: m & 1 != 0,
                        soft_dirty: m & 2 != 0 && arch == ArchKind::X86_64,
                        uffd_wp: m & 4 != 0,
                    };
                    let raw = ops.encode_swap(s);
                    assert_ne!(raw, 0);
                    assert_eq!(
                        ops.decode(1, raw),
                        Entry::Swap(s),
                        "{arch:?} {s:?} {raw:#x}"
                    );
                }
            }
        }
        // x86-64: type in bits 59-63, inverted offset in bits 9-58, E = bit 3.
        let raw = X86_64.encode_swap(SwapPte {
            ty: 1,
            offset: 1,
            exclusive: true,
            soft_dirty: false,
            uffd_wp: false,
        });
        assert_eq!(raw >> 59, 1);
        assert_eq!(raw & 0xfff, 0xc08);
        assert_eq!((!raw << 5) >> 14, 1);
    }
}
