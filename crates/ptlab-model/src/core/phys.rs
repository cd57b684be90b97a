//! Physical frames: a deterministic buddy allocator.
//!
//! Frames come from one contiguous zone starting at [`FIRST_PFN`]. Free blocks
//! sit in per-order ordered sets and the lowest-addressed suitable block is
//! always chosen, so a given sequence of allocations and frees yields the
//! same frame numbers on every run. Linux: mm/page_alloc.c (__rmqueue_smallest,
//! __free_one_page) — the model keeps the buddy splitting and merging, not the
//! per-CPU lists or migrate types.

use crate::core::addr::{Order, Pfn};
use std::collections::BTreeSet;

/// First frame handed out (4 GiB physical), leaving low frames to "firmware".
pub const FIRST_PFN: u64 = 0x10_0000;
/// MAX_PAGE_ORDER on x86-64 and arm64 with 4 KiB pages.
pub const MAX_ORDER: u8 = 10;

#[derive(Clone, Debug)]
pub struct FrameAllocator {
    free: Vec<BTreeSet<u64>>,
    /// Next never-used max-order block.
    fresh: u64,
    /// Upper bound on frames (exclusive).
    limit: u64,
    allocated: u64,
}

impl FrameAllocator {
    /// An allocator over `frames` frames (rounded down to max-order blocks).
    pub fn new(frames: u64) -> Self {
        let block = 1u64 << MAX_ORDER;
        FrameAllocator {
            free: (0..=MAX_ORDER).map(|_| BTreeSet::new()).collect(),
            fresh: FIRST_PFN,
            limit: FIRST_PFN + frames / block * block,
            allocated: 0,
        }
    }

    /// Change the zone to `frames` frames (rounded down to max-order
    /// blocks). Fails when frames above the new end were ever handed out.
    pub fn set_frames(&mut self, frames: u64) -> bool {
        let block = 1u64 << MAX_ORDER;
        let limit = FIRST_PFN + frames / block * block;
        if limit < self.fresh {
            return false;
        }
        self.limit = limit;
        true
    }

    /// Frames of the zone.
    pub fn frames(&self) -> u64 {
        self.limit - FIRST_PFN
    }

    /// Frames currently allocated.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Exclusive upper bound of every frame ever handed out.
    pub fn high_water(&self) -> u64 {
        self.fresh
    }

    /// Allocate a naturally aligned block of `order`; `None` when memory is exhausted.
    pub fn alloc(&mut self, order: Order) -> Option<Pfn> {
        let want = order.0;
        let mut found = None;
        for o in want..=MAX_ORDER {
            if let Some(&pfn) = self.free[o as usize].iter().next() {
                self.free[o as usize].remove(&pfn);
                found = Some((pfn, o));
                break;
            }
        }
        let (pfn, mut o) = match found {
            Some(x) => x,
            None => {
                let block = 1u64 << MAX_ORDER;
                if self.fresh + block > self.limit {
                    return None;
                }
                let pfn = self.fresh;
                self.fresh += block;
                (pfn, MAX_ORDER)
            }
        };
        // Split down, returning upper halves to the free lists.
        while o > want {
            o -= 1;
            self.free[o as usize].insert(pfn + (1 << o));
        }
        self.allocated += order.pages();
        Some(Pfn(pfn))
    }

    /// Return a block, merging with free buddies.
    pub fn free(&mut self, pfn: Pfn, order: Order) {
        let mut p = pfn.0;
        let mut o = order.0;
        self.allocated -= order.pages();
        while o < MAX_ORDER {
            let buddy = FIRST_PFN + ((p - FIRST_PFN) ^ (1 << o));
            if !self.free[o as usize].remove(&buddy) {
                break;
            }
            p = p.min(buddy);
            o += 1;
        }
        self.free[o as usize].insert(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_aligned() {
        let mut a = FrameAllocator::new(1 << 20);
        let x = a.alloc(Order(0)).unwrap();
        let y = a.alloc(Order(4)).unwrap();
        let z = a.alloc(Order(9)).unwrap();
        assert_eq!(x, Pfn(FIRST_PFN));
        assert_eq!(y.0 % 16, 0);
        assert_eq!(z.0 % 512, 0);
        let mut b = FrameAllocator::new(1 << 20);
        assert_eq!(
            (b.alloc(Order(0)), b.alloc(Order(4)), b.alloc(Order(9))),
            (Some(x), Some(y), Some(z))
        );
    }

    #[test]
    fn free_merges_buddies() {
        let mut a = FrameAllocator::new(1 << 20);
        let blocks: Vec<_> = (0..1024).map(|_| a.alloc(Order(0)).unwrap()).collect();
        assert_eq!(a.allocated(), 1024);
        for b in blocks {
            a.free(b, Order(0));
        }
        assert_eq!(a.allocated(), 0);
        // Everything merged back into one max-order block.
        assert_eq!(a.free[MAX_ORDER as usize].len(), 1);
        assert_eq!(a.alloc(Order(10)), Some(Pfn(FIRST_PFN)));
    }

    #[test]
    fn exhaustion() {
        let mut a = FrameAllocator::new(1024);
        assert!(a.alloc(Order(10)).is_some());
        assert!(a.alloc(Order(0)).is_none());
    }
}
