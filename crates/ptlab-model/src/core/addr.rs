//! Address, frame and size newtypes.
//!
//! Physical frame numbers and folio orders are newtypes so that a PFN can
//! never be added to a virtual address by mistake; virtual addresses are
//! plain `u64`s, as `unsigned long addr` is in mm/.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Base page size (4 KiB granule on both modelled architectures).
pub const PAGE_SHIFT: u32 = 12;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// log2 of the entries per page-table page.
pub const TABLE_SHIFT: u32 = 9;
/// Entries per page-table page (4 KiB granule, 8-byte descriptors; the
/// kernel's PTRS_PER_PTE = PTRS_PER_PMD = PTRS_PER_PUD = PTRS_PER_PGD).
pub const PTRS_PER_TABLE: usize = 1 << TABLE_SHIFT;
/// Size mapped by one PMD entry.
pub const PMD_SIZE: u64 = 1 << 21;
/// Size mapped by one PUD entry.
pub const PUD_SIZE: u64 = 1 << 30;
/// PMD THP order (2 MiB / 4 KiB).
pub const PMD_ORDER: u8 = 9;
/// Pages in a PMD-sized folio (`HPAGE_PMD_NR`).
pub const HPAGE_PMD_NR: u64 = 1 << PMD_ORDER;
/// x86-64 4-level `TASK_SIZE_MAX`: 0x7ffffffff000.
pub const TASK_SIZE: u64 = (1 << 47) - PAGE_SIZE;

/// A physical frame number (physical address >> 12).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Pfn(pub u64);

impl Pfn {
    pub const fn as_u64(self) -> u64 {
        self.0
    }
    pub const fn add(self, n: u64) -> Self {
        Pfn(self.0 + n)
    }
}

impl fmt::Debug for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pfn({:#x})", self.0)
    }
}
impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A folio order: the folio spans `1 << order` base pages.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize,
)]
pub struct Order(pub u8);

impl Order {
    pub const ZERO: Order = Order(0);
    pub const PMD: Order = Order(PMD_ORDER);
    pub const fn pages(self) -> u64 {
        1 << self.0
    }
    pub const fn bytes(self) -> u64 {
        PAGE_SIZE << self.0
    }
    /// The sysfs size name, e.g. `64kB` for order 4.
    pub fn size_name(self) -> String {
        format!("{}kB", self.bytes() >> 10)
    }
    /// Parse a byte size (e.g. 65536) into an order.
    pub fn from_bytes(bytes: u64) -> Option<Order> {
        if bytes < PAGE_SIZE || !bytes.is_power_of_two() {
            return None;
        }
        Some(Order((bytes.trailing_zeros() - PAGE_SHIFT) as u8))
    }
}

/// A page size a mapping can use: a base page, a PMD block or a PUD block.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum PageSize {
    Size4K,
    Size2M,
    Size1G,
}

impl PageSize {
    pub const fn bytes(self) -> u64 {
        match self {
            PageSize::Size4K => PAGE_SIZE,
            PageSize::Size2M => PMD_SIZE,
            PageSize::Size1G => PUD_SIZE,
        }
    }
}

/// Round a length up to whole pages; `None` if it wraps (the kernel's PAGE_ALIGN overflow).
pub fn page_align(len: u64) -> Option<u64> {
    len.checked_add(PAGE_SIZE - 1).map(|v| v & !(PAGE_SIZE - 1))
}

/// A tiny deterministic hasher for frame-number keys (FxHash's multiply).
#[derive(Default)]
pub struct PfnHasher(u64);
impl std::hash::Hasher for PfnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
pub type PfnMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<PfnHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_sizes() {
        assert_eq!(Order(4).bytes(), 64 << 10);
        assert_eq!(Order(4).size_name(), "64kB");
        assert_eq!(Order::PMD.size_name(), "2048kB");
        assert_eq!(Order::from_bytes(64 << 10), Some(Order(4)));
        assert_eq!(Order::from_bytes(3 << 12), None);
    }

    #[test]
    fn alignment() {
        assert_eq!(page_align(1), Some(PAGE_SIZE));
        assert_eq!(page_align(u64::MAX), None);
    }
}
