//! The swap device: slots with their swap counts, the data each holds, and
//! the swap cache (the swap-PTE mechanics are in crate::mm::swap, swapon and
//! MADV_PAGEOUT in crate::sys::swap; docs/ops/swap.md).
//!
//! Linux: mm/swapfile.c (struct swap_info_struct, swap_map[]),
//! mm/swap_state.c (the swap cache).

use crate::core::addr::Pfn;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the swap area sits on. It decides whether a large folio can be
/// swapped out whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SwapKind {
    /// A swap file on a filesystem (not `SWP_BLKDEV`): every large folio is
    /// split before it goes out (docs/ops/swap.md S2).
    #[default]
    File,
    /// A block device that is not `SWP_SYNCHRONOUS_IO` (a disk, or a loop
    /// device as the live backend uses): large folios go out whole into
    /// naturally aligned runs of slots, and stay in the swap cache
    /// (docs/ops/swap.md S14).
    BlockDev,
}

impl SwapKind {
    /// The word of the `swap SIZE [file|blockdev]` statement.
    pub fn name(self) -> &'static str {
        match self {
            SwapKind::File => "file",
            SwapKind::BlockDev => "blockdev",
        }
    }

    pub fn from_name(s: &str) -> Option<SwapKind> {
        match s {
            "file" => Some(SwapKind::File),
            "blockdev" => Some(SwapKind::BlockDev),
            _ => None,
        }
    }
}

/// One swap slot (`swap_map[offset]` plus what the slot stores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapSlot {
    /// Swap PTEs referring to the slot (`swap_count()`).
    pub count: u32,
    /// The page's data: the tag the page held, and the rest of its bytes
    /// when it was not a tag page ([`crate::core::content`]).
    pub tag: u64,
    pub rest: Option<crate::core::content::PageRest>,
    /// The swap-cache folio holding this slot (its head), if any. An order-0
    /// folio holds one reference for its slot; a large folio (block device
    /// only) holds one per page and names one run of slots, `folio->swap`
    /// onwards. Only a slot of a large folio may stay with count 0 while
    /// cached (`SWAP_HAS_CACHE` alone): the folio leaves the cache when none
    /// of its slots has a count left (`swap_only_has_cache()`).
    pub cache: Option<Pfn>,
}

/// The swap device (`struct swap_info_struct`), or none.
#[derive(Clone, Debug, Default)]
pub struct SwapDevice {
    /// Usable slots (swapon'ed size in pages, header included); 0 = no swap.
    pub pages: u64,
    /// What the area sits on.
    pub kind: SwapKind,
    /// Allocated slots by offset.
    pub slots: BTreeMap<u64, SwapSlot>,
    /// Pages swapped out (vmstat pswpout as the model counts it: every page).
    pub pswpout: u64,
    /// Swap-ins that had to read the slot (no swap-cache folio).
    pub pswpin: u64,
    /// Every offset in `1..free_from` is allocated: where [`SwapDevice::alloc`]
    /// starts looking for the lowest free one (lowered by
    /// [`SwapDevice::remove_slot`], the one way a slot is freed). Storage
    /// only: not part of the device's state, so not compared.
    free_from: u64,
}

impl PartialEq for SwapDevice {
    fn eq(&self, o: &Self) -> bool {
        self.pages == o.pages
            && self.kind == o.kind
            && self.slots == o.slots
            && self.pswpout == o.pswpout
            && self.pswpin == o.pswpin
    }
}

impl Eq for SwapDevice {}

impl SwapDevice {
    /// Whether a device is enabled.
    pub fn enabled(&self) -> bool {
        self.pages > 1
    }

    /// The slot whose swap-cache folio is the one at `head`, if any
    /// (`folio_test_swapcache()` and `folio->swap`). A scan of every slot:
    /// callers that can rule the cache out first do
    /// (crate::core::folio::PhysMem::small_slot_caching).
    pub fn slot_caching(&self, head: Pfn) -> Option<u64> {
        self.slots
            .iter()
            .find(|(_, s)| s.cache == Some(head))
            .map(|(&off, _)| off)
    }

    /// Allocate a slot holding `tag` with swap count 1, lowest free offset
    /// first. Linux: mm/swapfile.c folio_alloc_swap() + the first
    /// swap_duplicate() done by try_to_unmap_one() (folio_dup_swap()).
    pub(crate) fn alloc(
        &mut self,
        tag: u64,
        rest: Option<crate::core::content::PageRest>,
    ) -> Option<u64> {
        let mut off = self.free_from.max(1);
        for &k in self.slots.range(off..).map(|(k, _)| k) {
            if k != off {
                break;
            }
            off += 1;
        }
        self.free_from = off;
        if off >= self.pages {
            return None;
        }
        self.slots.insert(
            off,
            SwapSlot {
                count: 1,
                tag,
                rest,
                cache: None,
            },
        );
        Some(off)
    }

    /// Allocate `nr` slots (a power of two > 1) for a large folio, each
    /// holding its page's tag with swap count 0 and the cache set to `head`,
    /// at the lowest naturally aligned run of free slots; `None` when no
    /// run is free (the caller splits the folio). Only a block device takes
    /// large folios.
    ///
    /// Linux: mm/swapfile.c folio_alloc_swap() → cluster_alloc_swap_entry():
    /// a large order is refused unless `SWP_BLKDEV`; the cluster allocator
    /// gives each 512-slot cluster to one order and places a folio of `nr`
    /// pages at an offset that is a multiple of `nr` in it. The model keeps
    /// the natural alignment but not the per-order clusters: near a full
    /// device the kernel can refuse a large allocation (free slots spread
    /// over clusters of other orders) where the model still finds a run.
    /// Offsets are compared as a bijection, never by value, so where the
    /// run lands is not observable.
    pub(crate) fn alloc_run(
        &mut self,
        nr: u64,
        head: Pfn,
        data: &[(u64, Option<crate::core::content::PageRest>)],
    ) -> Option<u64> {
        debug_assert!(nr > 1 && nr.is_power_of_two() && data.len() as u64 == nr);
        if self.kind != SwapKind::BlockDev {
            return None;
        }
        let mut base = nr; // slot 0 is the header
        while base + nr <= self.pages {
            match self.slots.range(base..base + nr).next_back() {
                None => {
                    for (i, (tag, rest)) in data.iter().enumerate() {
                        self.slots.insert(
                            base + i as u64,
                            SwapSlot {
                                count: 0,
                                tag: *tag,
                                rest: rest.clone(),
                                cache: Some(head),
                            },
                        );
                    }
                    return Some(base);
                }
                Some((&used, _)) => base = (used / nr + 1) * nr,
            }
        }
        None
    }

    /// Free the slot at `off` (its count and cache gone), returning what it
    /// held. Linux: mm/swapfile.c swap_entries_free().
    pub(crate) fn remove_slot(&mut self, off: u64) -> Option<SwapSlot> {
        self.free_from = self.free_from.min(off);
        self.slots.remove(&off)
    }

    /// Slots in use.
    pub fn used(&self) -> u64 {
        self.slots.len() as u64
    }

    /// More than half the area is in use: `nr_swap_pages * 2 <
    /// total_swap_pages`, with the header page not counted. Swap-ins then
    /// drop the swap cache even on a read fault.
    /// Linux: include/linux/swap.h vm_swap_full() (reached through
    /// mem_cgroup_swap_full()).
    pub fn full(&self) -> bool {
        let total = self.pages.saturating_sub(1);
        let free = total.saturating_sub(self.used());
        free * 2 < total
    }
}

/// The smallest swap area swapon(2) accepts, in pages: the header page
/// plus one slot. Linux: mm/swapfile.c read_swap_header(): a header whose
/// `last_page` is 0 is "Empty swap-file" and swapon() fails with EINVAL
/// (an area shorter than one page has no `SWAPSPACE2` signature at all:
/// "Unable to find swap-space signature", EINVAL). Checked live on 6.18.44
/// with an ext4 swap file: 4K, 5000 and 8191 bytes are EINVAL, 8K (one
/// usable slot) and every larger size are accepted. mkswap(8) refuses
/// areas under 10 pages (40 KiB), but that is the tool's rule, not the
/// kernel's (docs/ops/swap.md S13).
pub const MIN_SWAP_PAGES: u64 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// The lowest free offset first, whatever was freed since: the start
    /// hint never skips a freed slot, and a full device refuses.
    #[test]
    fn alloc_takes_the_lowest_free_offset_after_frees() {
        let mut d = SwapDevice {
            pages: 6,
            kind: SwapKind::BlockDev,
            ..Default::default()
        };
        let got: Vec<_> = (0..5).map(|t| d.alloc(t, None)).collect();
        assert_eq!(got, [Some(1), Some(2), Some(3), Some(4), Some(5)]);
        assert_eq!(d.alloc(9, None), None, "full");
        d.remove_slot(4);
        d.remove_slot(2);
        assert_eq!(d.alloc(10, None), Some(2));
        assert_eq!(d.alloc(11, None), Some(4));
        d.remove_slot(1);
        assert_eq!(d.alloc(12, None), Some(1));
        assert_eq!(d.alloc(13, None), None);
        // A run placed above the hint leaves the lower gaps to alloc().
        let mut e = SwapDevice {
            pages: 16,
            kind: SwapKind::BlockDev,
            ..Default::default()
        };
        assert_eq!(
            e.alloc_run(4, Pfn(7), &[(0, None), (1, None), (2, None), (3, None)]),
            Some(4)
        );
        assert_eq!((e.alloc(0, None), e.alloc(0, None)), (Some(1), Some(2)));
        assert_eq!((e.alloc(0, None), e.alloc(0, None)), (Some(3), Some(8)));
        // The hint is storage: two devices with the same slots are equal.
        let mut f = e.clone();
        f.remove_slot(3);
        f.alloc(5, None);
        assert_eq!(f.slots[&3].tag, 5);
        f.slots.get_mut(&3).unwrap().tag = 0;
        assert_eq!(e, f);
    }
}
