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
}
