//! The swap device: slots with their swap counts, the data each holds, and
//! the swap cache (the swap-PTE mechanics are in crate::mm::swap, swapon and
//! MADV_PAGEOUT in crate::sys::swap; docs/ops/swap.md).
//!
//! Linux: mm/swapfile.c (struct swap_info_struct, swap_map[]),
//! mm/swap_state.c (the swap cache).

use crate::core::addr::Pfn;
use std::collections::BTreeMap;

/// One swap slot (`swap_map[offset]` plus what the slot stores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapSlot {
    /// Swap PTEs referring to the slot (`swap_count()`).
    pub count: u32,
    /// The page's data: the tag the page held, and the rest of its bytes
    /// when it was not a tag page ([`crate::core::content`]).
    pub tag: u64,
    pub rest: Option<crate::core::content::PageRest>,
    /// The swap-cache folio (order 0), holding one reference.
    pub cache: Option<Pfn>,
}

/// The swap device (`struct swap_info_struct`), or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwapDevice {
    /// Usable slots (swapon'ed size in pages, header included); 0 = no swap.
    pub pages: u64,
    /// Allocated slots by offset.
    pub slots: BTreeMap<u64, SwapSlot>,
    /// Pages swapped out (vmstat pswpout as the model counts it: every page).
    pub pswpout: u64,
    /// Swap-ins that had to read the slot (no swap-cache folio).
    pub pswpin: u64,
}

impl SwapDevice {
    /// Whether a device is enabled.
    pub fn enabled(&self) -> bool {
        self.pages > 1
    }

    /// Allocate a slot holding `tag` with swap count 1, lowest free offset
    /// first. Linux: mm/swapfile.c folio_alloc_swap() + the first
    /// swap_duplicate() done by try_to_unmap_one() (folio_dup_swap()).
    /// The slot whose swap-cache folio is the one at `head`, if any
    /// (`folio_test_swapcache()` and `folio->swap`).
    pub fn slot_caching(&self, head: Pfn) -> Option<u64> {
        self.slots
            .iter()
            .find(|(_, s)| s.cache == Some(head))
            .map(|(&off, _)| off)
    }

    pub(crate) fn alloc(
        &mut self,
        tag: u64,
        rest: Option<crate::core::content::PageRest>,
    ) -> Option<u64> {
        let mut off = 1;
        for &k in self.slots.keys() {
            if k != off {
                break;
            }
            off += 1;
        }
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

    /// Slots in use.
    pub fn used(&self) -> u64 {
        self.slots.len() as u64
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
