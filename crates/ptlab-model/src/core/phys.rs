//! Physical frames: a deterministic buddy allocator.
//!
//! Frames come from one contiguous zone starting at [`FIRST_PFN`]. Free blocks
//! sit in per-order ordered sets (bitmaps, [`FreeSet`]) and the lowest-addressed suitable block is
//! always chosen, so a given sequence of allocations and frees yields the
//! same frame numbers on every run. Linux: mm/page_alloc.c (__rmqueue_smallest,
//! __free_one_page) — the model keeps the buddy splitting and merging, not the
//! per-CPU lists or migrate types.
//!
//! A machine with several NUMA nodes ([`Nodes`]) gives each node one
//! contiguous range of frames, node 0 lowest, like a real machine's memblock
//! layout: a frame's node follows from its number, so no page carries one.
//! Linux: include/linux/mm.h page_to_nid() (the node of a PFN range),
//! mm/page_alloc.c get_page_from_freelist() (the local node first, then the
//! zonelist's fallback order).

use crate::core::addr::{Order, Pfn};

mod replay;

use replay::{Journal, Kind, Mode};

/// First frame handed out (4 GiB physical), leaving low frames to "firmware".
pub const FIRST_PFN: u64 = 0x10_0000;
/// MAX_PAGE_ORDER on x86-64 and arm64 with 4 KiB pages.
pub const MAX_ORDER: u8 = 10;

#[derive(Clone, Debug)]
pub struct FrameAllocator {
    free: Vec<FreeSet>,
    /// Next never-used max-order block.
    fresh: u64,
    /// Upper bound on frames (exclusive).
    limit: u64,
    /// First frame of the zone (max-order aligned).
    base: u64,
    allocated: u64,
}

impl FrameAllocator {
    /// An allocator over `frames` frames (rounded down to max-order blocks).
    pub fn new(frames: u64) -> Self {
        Self::new_at(FIRST_PFN, frames)
    }

    /// An allocator over `frames` frames from frame `base` (max-order aligned).
    pub fn new_at(base: u64, frames: u64) -> Self {
        let block = 1u64 << MAX_ORDER;
        debug_assert!(base.is_multiple_of(block));
        FrameAllocator {
            free: (0..=MAX_ORDER).map(|o| FreeSet::new(base, o)).collect(),
            fresh: base,
            limit: base + frames / block * block,
            base,
            allocated: 0,
        }
    }

    /// Change the zone to `frames` frames (rounded down to max-order
    /// blocks). Fails when frames above the new end were ever handed out.
    pub fn set_frames(&mut self, frames: u64) -> bool {
        let block = 1u64 << MAX_ORDER;
        let limit = self.base + frames / block * block;
        if limit < self.fresh {
            return false;
        }
        self.limit = limit;
        true
    }

    /// Frames of the zone.
    pub fn frames(&self) -> u64 {
        self.limit - self.base
    }

    /// Never handed out a frame.
    fn untouched(&self) -> bool {
        self.fresh == self.base
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
        self.alloc_in(order, &mut NoLog)
    }

    /// [`FrameAllocator::alloc`], its list operations told to `log`.
    #[inline(always)]
    fn alloc_in<L: Log>(&mut self, order: Order, log: &mut L) -> Option<Pfn> {
        let want = order.0;
        let mut found = None;
        for o in want..=MAX_ORDER {
            // The lowest free block of this order, taken in one step.
            if let Some(pfn) = self.free[o as usize].pop_first() {
                found = Some((pfn, o));
                break;
            }
        }
        let (pfn, mut o) = match found {
            Some(x) => {
                log.op(x.1, x.0, false);
                x
            }
            None => {
                let block = 1u64 << MAX_ORDER;
                if self.fresh + block > self.limit {
                    return None;
                }
                log.fresh();
                let pfn = self.fresh;
                self.fresh += block;
                (pfn, MAX_ORDER)
            }
        };
        // Split down, returning upper halves to the free lists.
        while o > want {
            o -= 1;
            let new = self.free[o as usize].insert(pfn + (1 << o));
            if L::ON && new {
                log.op(o, pfn + (1 << o), true);
            }
        }
        self.allocated += order.pages();
        Some(Pfn(pfn))
    }

    /// The frames that up to `max` single `alloc(Order::ZERO)` calls in a
    /// row would hand out, taken in one step while they are consecutive:
    /// `(first, n)` for frames `first..first + n` (`n ≥ 1`), or `None`
    /// (nothing taken) when memory is exhausted. `cap(first)` bounds `n`
    /// once the first frame is known (0: take nothing, `Some((first, 0))`).
    ///
    /// Single order-0 allocations take the lowest block of the smallest
    /// non-empty order (a fresh max-order block when every list is empty)
    /// and list the upper halves they split off; the next ones then take
    /// those halves lowest first, so the `2^o` allocations after taking a
    /// block of order `o` (every lower list empty) return its frames in
    /// order and leave the lists as before the block. Taking `n` of them
    /// leaves `[first + n, block end)` listed as its naturally aligned
    /// blocks, which is the state single allocations leave. A run goes on
    /// into the next block only if that block starts where the run ends.
    /// Linux: mm/page_alloc.c __rmqueue_smallest(), expand().
    pub fn alloc_small_run(
        &mut self,
        max: u64,
        cap: impl FnOnce(Pfn) -> u64,
    ) -> Option<(Pfn, u64)> {
        self.alloc_run(Order::ZERO, max, cap)
    }

    /// [`FrameAllocator::alloc_small_run`] for blocks of any order: the
    /// blocks that up to `max` single `alloc(order)` calls in a row would
    /// hand out, taken in one step while each starts where the one before
    /// ends: `(first, n)` for the `n` blocks from `first` (`n ≥ 1`), or
    /// `None` when memory is exhausted; `cap(first)` bounds `n` (0: take
    /// nothing, `Some((first, 0))`).
    ///
    /// The same reasoning as for order 0, in units of `2^order` frames: a
    /// single allocation takes the lowest block of the smallest non-empty
    /// order `o ≥ order` and lists the upper halves it splits off (orders
    /// `order..o`, empty before); the next ones take those halves lowest
    /// first, so `2^(o - order)` allocations hand out the block's frames
    /// in order and taking `n` of them leaves the rest of the block listed
    /// as its naturally aligned blocks. Lists below `order` play no part.
    /// Linux: mm/page_alloc.c __rmqueue_smallest(), expand().
    pub fn alloc_run(
        &mut self,
        order: Order,
        max: u64,
        cap: impl FnOnce(Pfn) -> u64,
    ) -> Option<(Pfn, u64)> {
        self.alloc_run_in(order, max, cap, &mut NoLog)
    }

    /// [`FrameAllocator::alloc_run`], its list operations told to `log`.
    #[inline(always)]
    fn alloc_run_in<L: Log>(
        &mut self,
        order: Order,
        max: u64,
        cap: impl FnOnce(Pfn) -> u64,
        log: &mut L,
    ) -> Option<(Pfn, u64)> {
        let want = order.0;
        let unit = 1u64 << want;
        let mut cap = Some(cap);
        let mut first = None;
        let mut left = max;
        let mut taken = 0;
        while left > 0 {
            // The block the next single allocation would split.
            let (p, o) = match (want..=MAX_ORDER)
                .find_map(|o| self.free[o as usize].first().map(|p| (p, o)))
            {
                Some(x) => x,
                None => {
                    let block = 1u64 << MAX_ORDER;
                    if want > MAX_ORDER || self.fresh + block > self.limit {
                        break;
                    }
                    (self.fresh, MAX_ORDER)
                }
            };
            match first {
                None => {
                    first = Some(p);
                    if let Some(c) = cap.take() {
                        left = left.min(c(Pfn(p)));
                        if left == 0 {
                            break;
                        }
                    }
                }
                Some(f) if f + taken * unit != p => break,
                Some(_) => {}
            }
            let blocks = 1u64 << (o - want);
            let take = left.min(blocks);
            if self.free[o as usize].remove(&p) {
                log.op(o, p, false);
            } else {
                debug_assert_eq!(p, self.fresh);
                log.fresh();
                self.fresh += 1 << o;
            }
            // The rest of the block, as the naturally aligned blocks it
            // splits into.
            let end = p + (1u64 << o);
            let mut r = p + take * unit;
            while r < end {
                let ro = block_order(r - self.base, end - r);
                let new = self.free[ro as usize].insert(r);
                if L::ON && new {
                    log.op(ro, r, true);
                }
                r += 1 << ro;
            }
            self.allocated += take * unit;
            taken += take;
            left -= take;
            if take < blocks {
                break;
            }
        }
        first.map(|f| (Pfn(f), taken))
    }

    /// Whether [`FrameAllocator::alloc`] of `order` would succeed.
    fn has_block(&self, order: Order) -> bool {
        order.0 <= MAX_ORDER
            && ((order.0..=MAX_ORDER).any(|o| !self.free[o as usize].is_empty())
                || self.fresh + (1u64 << MAX_ORDER) <= self.limit)
    }

    /// Return a block, merging with free buddies.
    pub fn free(&mut self, pfn: Pfn, order: Order) {
        self.free_in(pfn, order, &mut NoLog)
    }

    /// [`FrameAllocator::free`], its list operations told to `log`.
    #[inline(always)]
    fn free_in<L: Log>(&mut self, pfn: Pfn, order: Order, log: &mut L) {
        let mut p = pfn.0;
        let mut o = order.0;
        self.allocated -= order.pages();
        while o < MAX_ORDER {
            let buddy = self.base + ((p - self.base) ^ (1 << o));
            if L::ON {
                // The two steps `take_buddy_or_insert()` folds, each
                // logged when it changed the list.
                let set = &mut self.free[o as usize];
                if set.remove(&buddy) {
                    log.op(o, buddy, false);
                } else {
                    if set.insert(p) {
                        log.op(o, p, true);
                    }
                    return;
                }
            } else if !self.free[o as usize].take_buddy_or_insert(buddy, p) {
                // The buddy taken out to merge, or `p` listed (one scan).
                return;
            }
            p = p.min(buddy);
            o += 1;
        }
        if self.free[o as usize].insert(p) && L::ON {
            log.op(o, p, true);
        }
    }

    /// Free the `n` allocated frames from `pfn` (order-0 pages, or the
    /// frames of consecutive folios of any order: a run of `count` order-k
    /// folios is `n = count << k`) in one step per naturally aligned block
    /// of the range, largest first.
    /// The free lists end as they would after `n` single frees in any order:
    /// with eager buddy merging they hold exactly the maximal aligned free
    /// blocks, a function of which frames are free (an allocation only ever
    /// takes a whole listed block and lists the halves it splits off, whose
    /// buddies it keeps). Linux: mm/page_alloc.c __free_one_page() (the
    /// merge each block's free goes through; the kernel frees the pages
    /// one by one, through the per-CPU lists the model does not keep).
    pub fn free_range(&mut self, pfn: Pfn, n: u64) {
        self.free_range_in(pfn, n, &mut NoLog)
    }

    /// [`FrameAllocator::free_range`], its list operations told to `log`.
    #[inline(always)]
    fn free_range_in<L: Log>(&mut self, pfn: Pfn, n: u64, log: &mut L) {
        let end = pfn.0 + n;
        let mut p = pfn.0;
        while p < end {
            let o = block_order(p - self.base, end - p);
            self.free_in(Pfn(p), Order(o), log);
            p += 1 << o;
        }
    }
}

/// Where the buddy's list operations are told (`replay::Journal` while it
/// records; [`NoLog`] otherwise, compiled away).
trait Log {
    const ON: bool;
    /// `pfn` listed (`insert`) or taken off the list of `order`.
    fn op(&mut self, order: u8, pfn: u64, insert: bool);
    /// A never-used max-order block was taken (`fresh` moved).
    fn fresh(&mut self);
}

/// No log: the plain allocator.
struct NoLog;

impl Log for NoLog {
    const ON: bool = false;
    #[inline(always)]
    fn op(&mut self, _: u8, _: u64, _: bool) {}
    #[inline(always)]
    fn fresh(&mut self) {}
}

/// Blocks per chunk of a [`FreeSet`] (64 words of 64 bits).
const CHUNK_SHIFT: usize = 12;

/// Blocks a [`FreeSet`] keeps inline, sorted, before it spills them into
/// its bitmap.
const FEW: usize = 8;

/// One order's free blocks, lowest first. Up to [`FEW`] blocks sit inline
/// in a sorted array (issue 14: the seeds' free lists hold a few blocks
/// per order, the halves one split of a max-order block leaves, and every
/// allocation's splits and free's merges touch one list per order); a
/// set that grows past that spills into a bitmap by block index (block
/// `i` starts at frame `base + (i << order)`) in chunks of 4096 blocks,
/// each kept while it holds a free block, with a bit per non-zero word in
/// each chunk and a bit per non-empty chunk, so the lowest free block is
/// found without a scan, and goes back to the array once emptied. The set
/// a `BTreeSet<u64>` of the blocks' first frames held before (issue 14:
/// an allocation's pop and splits and a free's buddy merges were several
/// B-tree operations each).
#[derive(Clone, Debug)]
struct FreeSet {
    base: u64,
    shift: u32,
    /// The blocks while `!big`: `few[..len]`, ascending.
    few: [u64; FEW],
    /// The blocks are in the bitmap (`chunks`), not in `few`.
    big: bool,
    chunks: Vec<Option<Box<Chunk>>>,
    /// Bit `c % 64` of word `c / 64`: chunk `c` holds a free block.
    top: Vec<u64>,
    len: usize,
    /// No block of the bitmap has a lower index (a lower bound, raised by
    /// `first`).
    low: usize,
    /// An emptied chunk kept for the next one needed (all zero).
    spare: Option<Box<Chunk>>,
}

#[derive(Clone, Debug)]
struct Chunk {
    /// Bit `w`: `words[w]` is not zero.
    sum: u64,
    words: [u64; 64],
}

impl PartialEq for FreeSet {
    /// The same blocks (how they are kept plays no part).
    fn eq(&self, o: &FreeSet) -> bool {
        self.base == o.base && self.shift == o.shift && self.blocks() == o.blocks()
    }
}

impl FreeSet {
    fn new(base: u64, order: u8) -> Self {
        FreeSet {
            base,
            shift: u32::from(order),
            few: [0; FEW],
            big: false,
            chunks: Vec::new(),
            top: Vec::new(),
            len: 0,
            low: 0,
            spare: None,
        }
    }
    fn index(&self, pfn: u64) -> usize {
        ((pfn - self.base) >> self.shift) as usize
    }
    fn pfn(&self, i: usize) -> u64 {
        self.base + ((i as u64) << self.shift)
    }
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }
    fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Every block, ascending (for comparisons).
    fn blocks(&self) -> Vec<u64> {
        if !self.big {
            return self.few[..self.len].to_vec();
        }
        let mut v = Vec::with_capacity(self.len);
        for (c, ch) in self.chunks.iter().enumerate() {
            let Some(ch) = ch else { continue };
            for (w, &word) in ch.words.iter().enumerate() {
                let mut m = word;
                while m != 0 {
                    let i = (c << CHUNK_SHIFT) | (w << 6) | m.trailing_zeros() as usize;
                    v.push(self.pfn(i));
                    m &= m - 1;
                }
            }
        }
        v
    }
    /// Add the block at `pfn`; whether it was not in the set.
    ///
    /// The inline path shifts only when blocks sit above the new one
    /// (issue 14, thirteenth session: the seeds' lists hold zero to two
    /// blocks, so a `copy_within` of nothing — a `memmove` call — was most
    /// of an insert or remove); the spill into the bitmap is kept out of
    /// line.
    #[inline]
    fn insert(&mut self, pfn: u64) -> bool {
        if self.big {
            return self.bit_insert(pfn);
        }
        let n = self.len;
        let mut i = 0;
        while i < n && self.few[i] < pfn {
            i += 1;
        }
        if i < n && self.few[i] == pfn {
            return false;
        }
        if n < FEW {
            self.few_insert_at(i, pfn);
            return true;
        }
        self.spill_insert(pfn)
    }
    /// Put `pfn` at `few[i]` (`len < FEW`, `i ≤ len`, the order kept).
    #[inline]
    fn few_insert_at(&mut self, i: usize, pfn: u64) {
        let n = self.len;
        if i < n {
            self.few.copy_within(i..n, i + 1);
        }
        self.few[i] = pfn;
        self.len = n + 1;
    }
    /// A full inline set: every block into the bitmap (empty here: `len`
    /// is 0 there), then `pfn`.
    #[cold]
    #[inline(never)]
    fn spill_insert(&mut self, pfn: u64) -> bool {
        self.big = true;
        self.len = 0;
        let few = self.few;
        for p in few {
            self.bit_insert(p);
        }
        self.bit_insert(pfn)
    }
    /// Take `few[i]` out (`i < len`).
    #[inline]
    fn few_remove_at(&mut self, i: usize) {
        let n = self.len;
        if i + 1 < n {
            self.few.copy_within(i + 1..n, i);
        }
        self.len = n - 1;
    }
    /// Take the block at `pfn` out; whether it was in the set.
    #[inline]
    fn remove(&mut self, pfn: &u64) -> bool {
        if self.big {
            return self.big_remove(*pfn);
        }
        let n = self.len;
        let Some(i) = self.few[..n].iter().position(|p| p == pfn) else {
            return false;
        };
        self.few_remove_at(i);
        true
    }
    /// [`FreeSet::remove`] of a set in its bitmap (back to the inline
    /// array once empty).
    #[inline(never)]
    fn big_remove(&mut self, pfn: u64) -> bool {
        let hit = self.bit_remove(pfn);
        if self.len == 0 {
            self.big = false;
        }
        hit
    }
    /// One step of a buddy merge: take `buddy` (the block paired with
    /// `pfn`, of this order) out if it is listed — `true`, the caller
    /// merges one order up — else list `pfn` — `false`. The same set as
    /// `remove(&buddy)` followed, when that fails, by `insert(pfn)`; the
    /// inline array is scanned once (the two blocks are adjacent: no block
    /// of the order lies between them).
    /// Linux: mm/page_alloc.c __free_one_page() (find_buddy_page_pfn(),
    /// del_page_from_free_list(), __add_to_free_list()).
    #[inline(always)]
    fn take_buddy_or_insert(&mut self, buddy: u64, pfn: u64) -> bool {
        if self.big {
            if self.big_remove(buddy) {
                return true;
            }
            // (An emptied bitmap went back inline: `pfn` is listed there.)
            self.insert(pfn);
            return false;
        }
        let n = self.len;
        let lo = buddy.min(pfn);
        let mut i = 0;
        while i < n && self.few[i] < lo {
            i += 1;
        }
        // `few[i]` is the lower of the two if listed, `few[i + 1]` the
        // upper one when both are (a block freed twice).
        if i < n && self.few[i] == buddy {
            self.few_remove_at(i);
            return true;
        }
        if i + 1 < n && self.few[i + 1] == buddy {
            self.few_remove_at(i + 1);
            return true;
        }
        // Neither side is the buddy: `i` is where `pfn` goes.
        if i < n && self.few[i] == pfn {
            // Already listed (a double free): as `insert`, nothing changes.
            return false;
        }
        if n < FEW {
            self.few_insert_at(i, pfn);
        } else {
            self.spill_insert(pfn);
        }
        false
    }
    /// The lowest block (its first frame).
    #[inline]
    fn first(&mut self) -> Option<u64> {
        if !self.big {
            return (self.len > 0).then_some(self.few[0]);
        }
        self.bit_first()
    }
    /// Take the lowest block out.
    #[inline]
    fn pop_first(&mut self) -> Option<u64> {
        if !self.big {
            if self.len == 0 {
                return None;
            }
            let p = self.few[0];
            self.few_remove_at(0);
            return Some(p);
        }
        let p = self.bit_first()?;
        self.remove(&p);
        Some(p)
    }
    /// [`FreeSet::insert`] into the bitmap.
    fn bit_insert(&mut self, pfn: u64) -> bool {
        let i = self.index(pfn);
        let (c, w, b) = (i >> CHUNK_SHIFT, (i >> 6) & 63, i & 63);
        if c >= self.chunks.len() {
            self.chunks.resize_with(c + 1, || None);
            self.top.resize(self.chunks.len().div_ceil(64), 0);
        }
        let spare = &mut self.spare;
        let ch = self.chunks[c].get_or_insert_with(|| {
            spare.take().unwrap_or_else(|| {
                Box::new(Chunk {
                    sum: 0,
                    words: [0; 64],
                })
            })
        });
        if ch.words[w] & (1 << b) != 0 {
            return false;
        }
        ch.words[w] |= 1 << b;
        ch.sum |= 1 << w;
        self.top[c >> 6] |= 1 << (c & 63);
        self.len += 1;
        self.low = self.low.min(i);
        true
    }
    /// [`FreeSet::remove`] from the bitmap.
    fn bit_remove(&mut self, pfn: u64) -> bool {
        let i = self.index(pfn);
        let (c, w, b) = (i >> CHUNK_SHIFT, (i >> 6) & 63, i & 63);
        let Some(Some(ch)) = self.chunks.get_mut(c) else {
            return false;
        };
        if ch.words[w] & (1 << b) == 0 {
            return false;
        }
        ch.words[w] &= !(1 << b);
        if ch.words[w] == 0 {
            ch.sum &= !(1 << w);
            if ch.sum == 0 {
                self.top[c >> 6] &= !(1 << (c & 63));
                self.spare = self.chunks[c].take();
            }
        }
        self.len -= 1;
        true
    }
    /// [`FreeSet::first`] of the bitmap.
    fn bit_first(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let i = self.low;
        let (c0, w0, b0) = (i >> CHUNK_SHIFT, (i >> 6) & 63, i & 63);
        let found = 'find: {
            if let Some(Some(ch)) = self.chunks.get(c0) {
                let m = ch.words[w0] & (!0u64 << b0);
                if m != 0 {
                    break 'find (c0 << CHUNK_SHIFT) | (w0 << 6) | m.trailing_zeros() as usize;
                }
                let s = ch.sum & (!0u64).checked_shl(w0 as u32 + 1).unwrap_or(0);
                if s != 0 {
                    let w = s.trailing_zeros() as usize;
                    break 'find (c0 << CHUNK_SHIFT)
                        | (w << 6)
                        | ch.words[w].trailing_zeros() as usize;
                }
            }
            let from = c0 + 1;
            let mut t = from >> 6;
            let mut mask = !0u64 << (from & 63);
            while t < self.top.len() {
                let m = self.top[t] & mask;
                if m != 0 {
                    let c = (t << 6) | m.trailing_zeros() as usize;
                    let ch = self.chunks[c].as_ref().expect("a chunk with its bit set");
                    let w = ch.sum.trailing_zeros() as usize;
                    break 'find (c << CHUNK_SHIFT)
                        | (w << 6)
                        | ch.words[w].trailing_zeros() as usize;
                }
                t += 1;
                mask = !0;
            }
            debug_assert!(false, "a non-empty set has a lowest block");
            return None;
        };
        self.low = found;
        Some(self.pfn(found))
    }
}

/// The largest order `o` ≤ [`MAX_ORDER`] with `off` aligned to `2^o` and
/// `2^o ≤ left`.
fn block_order(off: u64, left: u64) -> u8 {
    let align = if off == 0 {
        MAX_ORDER as u32
    } else {
        off.trailing_zeros()
    };
    let fit = 63 - left.leading_zeros();
    align.min(fit).min(MAX_ORDER as u32) as u8
}

/// Most NUMA nodes a modelled machine may have (x86-64 and arm64 distribution
/// kernels: CONFIG_NODES_SHIFT = 10 on x86-64; the model stops at 64).
pub const MAX_NODES: u32 = 64;

/// The frames of every NUMA node: node `k` owns the `k`-th equal slice of
/// memory (`frames / nodes`, rounded down to max-order blocks).
/// Allocation takes the local node first and falls back to the others in
/// node order (the default policy; `__GFP_THISNODE` allocations use
/// [`Nodes::alloc_on`]).
#[derive(Clone, Debug)]
pub struct Nodes {
    nodes: Vec<FrameAllocator>,
    /// Frames per node (every node the same size).
    per_node: u64,
    /// The node of the CPU the current task runs on (`numa_node_id()`).
    pub local: u32,
    /// Stretches freed by [`Nodes::free_range_later`] and not yet listed
    /// (counted free already); listed before the next allocation.
    later: Vec<(u64, u64)>,
    /// Scratch lists of [`Nodes::list_stretches`] (by node, then order),
    /// kept so that listing allocates nothing once warm.
    scratch: Vec<Vec<Vec<u64>>>,
    keep: Vec<u64>,
    /// The replay journal (`ModelConfig::buddy_replay`, [`replay`]).
    rj: Journal,
}

impl Nodes {
    /// One node of `frames` frames.
    pub fn new(frames: u64) -> Self {
        let a = FrameAllocator::new(frames);
        Nodes {
            per_node: a.frames(),
            nodes: vec![a],
            local: 0,
            later: Vec::new(),
            scratch: Vec::new(),
            keep: Vec::new(),
            rj: Journal::new(false),
        }
    }

    /// Turn the replay journal on or off (`ModelConfig::buddy_replay`;
    /// off: every request works on the lists, the reference the replay
    /// tests compare against). No observable effect.
    pub fn set_replay(&mut self, on: bool) {
        self.settle();
        if on != self.rj.on() {
            self.rj = Journal::new(on);
        }
    }

    /// Re-slice memory into `nodes` nodes of `frames / nodes` frames each.
    /// Node 0 keeps what it handed out; fails (nothing changed) when node 0
    /// used frames beyond its new end or another node was ever used, or when
    /// a node would be smaller than one max-order block.
    pub fn set_layout(&mut self, frames: u64, nodes: u32) -> bool {
        self.settle();
        self.list_later();
        let block = 1u64 << MAX_ORDER;
        let n = u64::from(nodes.clamp(1, MAX_NODES));
        let per = frames / n / block * block;
        if per == 0 || self.nodes.iter().skip(1).any(|a| !a.untouched()) {
            return false;
        }
        let mut first = self.nodes[0].clone();
        if !first.set_frames(per) {
            return false;
        }
        let mut v = vec![first];
        for k in 1..n {
            v.push(FrameAllocator::new_at(FIRST_PFN + k * per, per));
        }
        self.nodes = v;
        self.per_node = per;
        self.local = self.local.min(nodes - 1);
        true
    }

    /// Number of nodes.
    pub fn count(&self) -> u32 {
        self.nodes.len() as u32
    }

    /// The node holding `pfn` (frames below the first node, the "firmware"
    /// range, count as node 0). Linux: page_to_nid() / pfn_to_nid().
    pub fn node_of(&self, pfn: Pfn) -> u32 {
        let k = pfn.0.saturating_sub(FIRST_PFN) / self.per_node.max(1);
        (k as u32).min(self.count() - 1)
    }

    /// Allocate on the local node, else on the others in node order.
    pub fn alloc(&mut self, order: Order) -> Option<Pfn> {
        if !self.plain() {
            return self.alloc_journaled(order);
        }
        self.alloc_plain(order)
    }

    fn alloc_plain(&mut self, order: Order) -> Option<Pfn> {
        self.list_later();
        let local = self.local as usize;
        if let Some(p) = self.nodes[local].alloc(order) {
            return Some(p);
        }
        let n = self.nodes.len();
        (0..n)
            .filter(|&k| k != local)
            .find_map(|k| self.nodes[k].alloc(order))
    }

    /// [`FrameAllocator::alloc_small_run`] on the node single
    /// [`Nodes::alloc`] calls would take from: the local node while it
    /// has a free frame, else the first other one that has (the run stays
    /// in that node).
    pub fn alloc_small_run(
        &mut self,
        max: u64,
        cap: impl FnOnce(Pfn) -> u64,
    ) -> Option<(Pfn, u64)> {
        if !self.plain() {
            // One node: the node `alloc_run(Order::ZERO)` would take (a
            // free frame is a listed one or one never used).
            return self.alloc_run_journaled(Order::ZERO, max, cap);
        }
        self.list_later();
        let local = self.local as usize;
        let n = self.nodes.len();
        let k = std::iter::once(local)
            .chain((0..n).filter(|&k| k != local))
            .find(|&k| self.nodes[k].frames() > self.nodes[k].allocated())?;
        self.nodes[k].alloc_small_run(max, cap)
    }

    /// [`FrameAllocator::alloc_run`] on the node a single
    /// [`Nodes::alloc`] of `order` would take from: the local node while
    /// it can give a block of that order, else the first other one that
    /// can (the run stays in that node).
    pub fn alloc_run(
        &mut self,
        order: Order,
        max: u64,
        cap: impl FnOnce(Pfn) -> u64,
    ) -> Option<(Pfn, u64)> {
        if !self.plain() {
            return self.alloc_run_journaled(order, max, cap);
        }
        self.alloc_run_plain(order, max, cap)
    }

    fn alloc_run_plain(
        &mut self,
        order: Order,
        max: u64,
        cap: impl FnOnce(Pfn) -> u64,
    ) -> Option<(Pfn, u64)> {
        // The deferred frees listed first, as for every allocation (the
        // fault stretch's run follows a single allocation, which listed
        // them, so no caller met this).
        self.list_later();
        let local = self.local as usize;
        let n = self.nodes.len();
        let k = std::iter::once(local)
            .chain((0..n).filter(|&k| k != local))
            .find(|&k| self.nodes[k].has_block(order))?;
        self.nodes[k].alloc_run(order, max, cap)
    }

    /// Allocate on `node` only (`__GFP_THISNODE`).
    pub fn alloc_on(&mut self, node: u32, order: Order) -> Option<Pfn> {
        self.settle();
        self.list_later();
        self.nodes.get_mut(node as usize)?.alloc(order)
    }

    pub fn free(&mut self, pfn: Pfn, order: Order) {
        if !self.plain() {
            return self.free_journaled(pfn, order);
        }
        let k = self.node_of(pfn) as usize;
        self.nodes[k].free(pfn, order);
    }

    /// [`FrameAllocator::free_range`] of `n` order-0 frames from `pfn`, each
    /// block on its node (node boundaries are max-order aligned, so no
    /// block spans two).
    pub fn free_range(&mut self, pfn: Pfn, n: u64) {
        if !self.plain() {
            return self.free_range_journaled(pfn, n);
        }
        self.free_range_plain(pfn, n)
    }

    fn free_range_plain(&mut self, pfn: Pfn, n: u64) {
        if let [node] = &mut self.nodes[..] {
            // One node (based at FIRST_PFN): its own range free, without
            // a node lookup per block.
            node.free_range(pfn, n);
            return;
        }
        let end = pfn.0 + n;
        let mut p = pfn.0;
        while p < end {
            let o = block_order(p - FIRST_PFN, end - p);
            let k = self.node_of(Pfn(p)) as usize;
            self.nodes[k].free(Pfn(p), Order(o));
            p += 1 << o;
        }
    }

    /// Frames of every node together.
    pub fn frames(&self) -> u64 {
        self.nodes.iter().map(FrameAllocator::frames).sum()
    }

    /// Frames allocated on every node together.
    pub fn allocated(&self) -> u64 {
        self.nodes.iter().map(FrameAllocator::allocated).sum()
    }

    /// Free frames of `node`.
    pub fn node_free(&self, node: u32) -> u64 {
        self.nodes
            .get(node as usize)
            .map_or(0, |a| a.frames() - a.allocated())
    }

    /// Resize memory keeping the node count (see [`Nodes::set_layout`]).
    pub fn set_frames(&mut self, frames: u64) -> bool {
        self.settle();
        self.list_later();
        if self.nodes.len() == 1 {
            let ok = self.nodes[0].set_frames(frames);
            if ok {
                self.per_node = self.nodes[0].frames();
            }
            return ok;
        }
        self.set_layout(frames, self.count())
    }
}

/// The requests through the replay journal ([`replay`]).
impl Nodes {
    /// Whether a request takes the plain path (the journal off or idle
    /// and not yet due: one count down).
    #[inline(always)]
    fn plain(&mut self) -> bool {
        if self.rj.gate > 1 {
            self.rj.gate -= 1;
            return true;
        }
        false
    }

    /// Something other than a journal request is about to use or change
    /// the lists: they are made real and the journal dropped.
    #[inline]
    fn settle(&mut self) {
        if matches!(self.rj.mode, Mode::Recording | Mode::Replaying) {
            self.rj.settle(&mut self.nodes[0]);
        }
    }

    /// A request that is not answered from the journal: the lists made
    /// real if it was replaying, a recording started if one is due;
    /// whether the request is recorded.
    fn journal_open(&mut self) -> bool {
        match self.rj.mode {
            Mode::Replaying => {
                self.rj.materialise(&mut self.nodes[0]);
                true
            }
            Mode::Recording => true,
            Mode::Off | Mode::Idle => {
                let one = self.nodes.len() == 1;
                if self.rj.start_due(one) {
                    // The deferred frees listed before the recording's
                    // start (every allocation lists them first).
                    self.list_later();
                    true
                } else {
                    false
                }
            }
        }
    }

    #[inline(never)]
    fn alloc_journaled(&mut self, order: Order) -> Option<Pfn> {
        if let Some(r) = self.rj.next() {
            if r.kind == Kind::Alloc && r.order == order.0 {
                let (p, a) = (r.first, r.allocated);
                self.nodes[0].allocated = a;
                self.rj.advance();
                return Some(Pfn(p));
            }
        }
        if !self.journal_open() {
            return self.alloc_plain(order);
        }
        self.rj.begin();
        let got = self.nodes[0].alloc_in(order, &mut self.rj);
        let allocated = self.nodes[0].allocated;
        self.rj
            .end(Kind::Alloc, order.0, 0, 0, got.map(|p| (p.0, 1)), allocated);
        got
    }

    #[inline(never)]
    fn alloc_run_journaled(
        &mut self,
        order: Order,
        max: u64,
        cap: impl FnOnce(Pfn) -> u64,
    ) -> Option<(Pfn, u64)> {
        let mut cap = Some(cap);
        // The cap's answer when the journal asked it (it is asked once).
        let mut asked = None;
        if let Some(r) = self.rj.next() {
            if r.kind == Kind::Run && r.order == order.0 && r.a == max {
                let (first, n, b, a) = (r.first, r.n, r.b, r.allocated);
                let c = cap.take().expect("the cap, not asked yet");
                let v = max.min(c(Pfn(first)));
                if v == b {
                    self.nodes[0].allocated = a;
                    self.rj.advance();
                    return Some((Pfn(first), n));
                }
                asked = Some(v);
                self.rj.cap_misses += 1;
            }
        }
        // The cap as the run will ask it (with the frame the journal asked
        // it for: the lists made real are the recorded state).
        let mut seen = u64::MAX;
        let ask = |p: Pfn| {
            let v = match asked {
                Some(v) => v,
                None => (cap.take().expect("the cap, asked once"))(p),
            };
            seen = v;
            v
        };
        if !self.journal_open() {
            return self.alloc_run_plain(order, max, ask);
        }
        self.rj.begin();
        let got = if self.nodes[0].has_block(order) {
            self.nodes[0].alloc_run_in(order, max, ask, &mut self.rj)
        } else {
            None
        };
        let allocated = self.nodes[0].allocated;
        self.rj.end(
            Kind::Run,
            order.0,
            max,
            max.min(seen),
            got.map(|(p, n)| (p.0, n)),
            allocated,
        );
        got
    }

    #[inline(never)]
    fn free_journaled(&mut self, pfn: Pfn, order: Order) {
        if let Some(r) = self.rj.next() {
            if r.kind == Kind::Free && r.order == order.0 && r.a == pfn.0 {
                self.nodes[0].allocated = r.allocated;
                self.rj.advance();
                return;
            }
        }
        if !self.journal_open() {
            let k = self.node_of(pfn) as usize;
            self.nodes[k].free(pfn, order);
            return;
        }
        self.rj.begin();
        self.nodes[0].free_in(pfn, order, &mut self.rj);
        let allocated = self.nodes[0].allocated;
        self.rj.end(Kind::Free, order.0, pfn.0, 0, None, allocated);
    }

    #[inline(never)]
    fn free_range_journaled(&mut self, pfn: Pfn, n: u64) {
        if let Some(r) = self.rj.next() {
            if r.kind == Kind::FreeRange && r.a == pfn.0 && r.b == n {
                self.nodes[0].allocated = r.allocated;
                self.rj.advance();
                return;
            }
        }
        if !self.journal_open() {
            return self.free_range_plain(pfn, n);
        }
        self.rj.begin();
        self.nodes[0].free_range_in(pfn, n, &mut self.rj);
        let allocated = self.nodes[0].allocated;
        self.rj.end(Kind::FreeRange, 0, pfn.0, n, None, allocated);
    }
}

/// Many frees in one step (issue 14): the same free lists as the single
/// frees, with one pass per order instead of one B-tree insert (and one
/// failed buddy search) per frame.
impl FrameAllocator {
    /// Free the naturally aligned blocks `cand[o]` (block starts of order
    /// `o`, allocated, pairwise disjoint, in any order) in one pass per
    /// order, lowest first: a block whose buddy is another block of the
    /// pass, or a listed free block, merges into a block of the next order
    /// (a candidate there); the rest are listed. The free lists end as the
    /// single [`FrameAllocator::free`] calls leave them, in any order: with
    /// eager merging they hold exactly the maximal aligned free blocks
    /// (see [`FrameAllocator::free_range`]), and a block of order `o` is
    /// maximal iff its buddy is not free as a whole, which at order `o` is
    /// known once the lower orders' merges are done.
    /// Linux: mm/page_alloc.c __free_one_page() (the merge of each block).
    /// `keep` is scratch space.
    fn free_blocks(&mut self, cand: &mut [Vec<u64>], keep: &mut Vec<u64>) {
        debug_assert_eq!(cand.len(), MAX_ORDER as usize + 1);
        for o in 0..=MAX_ORDER as usize {
            let mut c = std::mem::take(&mut cand[o]);
            if c.is_empty() {
                cand[o] = c;
                continue;
            }
            c.sort_unstable();
            keep.clear();
            let size = 1u64 << o;
            let mut i = 0;
            while i < c.len() {
                let p = c[i];
                i += 1;
                if o == MAX_ORDER as usize {
                    keep.push(p);
                    continue;
                }
                let buddy = self.base + ((p - self.base) ^ size);
                if buddy > p && c.get(i) == Some(&buddy) {
                    // Both halves freed in this pass.
                    i += 1;
                    cand[o + 1].push(p);
                } else if self.free[o].remove(&buddy) {
                    cand[o + 1].push(p.min(buddy));
                } else {
                    keep.push(p);
                }
            }
            // The free set is a bitmap (`FreeSet`): a listing is a bit set.
            let list = &mut self.free[o];
            for &p in keep.iter() {
                list.insert(p);
            }
            cand[o] = c;
            cand[o].clear();
        }
    }
}

impl Nodes {
    /// Free the order-0 frames of every stretch `(first, n)` (frames
    /// `first..first + n`, allocated, pairwise disjoint, in any order): the
    /// free lists and counts [`Nodes::free_range`] of each stretch leaves,
    /// with one pass per order for all of them (the frames of a stretch
    /// split into its naturally aligned blocks, each on its node, as in
    /// `free_range`). For the scattered frees of a zap: a stretch of one
    /// frame in every other page costs a B-tree insert each when freed
    /// alone. Linux: mm/page_alloc.c free_unref_folios() → __free_one_page().
    pub fn free_stretches(&mut self, stretches: &[(u64, u64)]) {
        self.settle();
        for &(first, n) in stretches {
            self.uncount(first, n);
        }
        self.list_stretches(stretches);
    }

    /// [`Nodes::free_stretches`] of `(pfn, n)` deferred: the frames count
    /// as free at once; they are put on the free lists, together with the
    /// other stretches freed this way, before the next allocation (or
    /// layout change) reads the lists. The lists then are what freeing
    /// each at once gives (single frees in between merge the same way:
    /// the lists are a function of which frames are free). For a zap that
    /// frees one frame in every other page, one stretch at a time.
    pub fn free_range_later(&mut self, pfn: Pfn, n: u64) {
        self.settle();
        self.uncount(pfn.0, n);
        self.later.push((pfn.0, n));
        if self.later.len() >= 1 << 16 {
            self.list_later();
        }
    }

    /// Put the stretches [`Nodes::free_range_later`] freed on the lists.
    fn list_later(&mut self) {
        if !self.later.is_empty() {
            let later = std::mem::take(&mut self.later);
            self.list_stretches(&later);
            self.later = later;
            self.later.clear();
        }
    }

    /// Count the frames `first..first + n` free on their nodes.
    fn uncount(&mut self, first: u64, n: u64) {
        let end = first + n;
        let mut p = first;
        while p < end {
            let k = self.node_of(Pfn(p)) as usize;
            let node_end = if k + 1 == self.nodes.len() {
                end
            } else {
                end.min(FIRST_PFN + (k as u64 + 1) * self.per_node)
            };
            self.nodes[k].allocated -= node_end - p;
            p = node_end;
        }
    }

    /// The free-list half of [`Nodes::free_stretches`] (the frames are
    /// counted free already).
    fn list_stretches(&mut self, stretches: &[(u64, u64)]) {
        let orders = MAX_ORDER as usize + 1;
        // Candidates by node, then by order (every list empty here).
        let mut cand = std::mem::take(&mut self.scratch);
        let mut keep = std::mem::take(&mut self.keep);
        for &(first, n) in stretches {
            let end = first + n;
            let mut p = first;
            while p < end {
                let o = block_order(p - FIRST_PFN, end - p);
                let k = self.node_of(Pfn(p)) as usize;
                if cand.len() <= k {
                    cand.resize_with(k + 1, || vec![Vec::new(); orders]);
                }
                cand[k][o as usize].push(p);
                p += 1 << o;
            }
        }
        for (k, c) in cand.iter_mut().enumerate() {
            self.nodes[k].free_blocks(c, &mut keep);
        }
        self.scratch = cand;
        self.keep = keep;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_slice_memory_and_fall_back() {
        let mut n = Nodes::new(8 << 10);
        n.alloc(Order(0)).unwrap();
        assert!(n.set_layout(8 << 10, 2));
        assert_eq!(n.count(), 2);
        assert_eq!(n.frames(), 8 << 10);
        let second = FIRST_PFN + (4 << 10);
        assert_eq!(n.node_of(Pfn(FIRST_PFN)), 0);
        assert_eq!(n.node_of(Pfn(second - 1)), 0);
        assert_eq!(n.node_of(Pfn(second)), 1);
        n.local = 1;
        let p = n.alloc(Order(4)).unwrap();
        assert_eq!((p.0, n.node_of(p)), (second, 1));
        // THISNODE fails when the node is full; the default falls back.
        let mut taken = 1;
        while n.alloc_on(1, Order(4)).is_some() {
            taken += 1;
        }
        assert_eq!(taken * 16, 4 << 10, "node 1 handed out all its frames");
        assert_eq!(n.alloc_on(1, Order(0)), None);
        let q = n.alloc(Order(4)).unwrap();
        assert_eq!(n.node_of(q), 0);
        // Another node was used: the layout cannot change any more.
        assert!(!n.set_layout(8 << 10, 4));
        n.free(q, Order(4));
        n.free(p, Order(4));
        assert_eq!(n.node_free(0), (4 << 10) - 1);
    }

    #[test]
    fn one_node_is_the_plain_allocator() {
        let mut n = Nodes::new(1 << 20);
        let mut a = FrameAllocator::new(1 << 20);
        for o in [0u8, 4, 9, 0, 2] {
            assert_eq!(n.alloc(Order(o)), a.alloc(Order(o)));
        }
        assert!(n.set_frames(1 << 21));
        assert_eq!(n.frames(), 1 << 21);
        assert_eq!(n.node_of(Pfn(FIRST_PFN + (1 << 20) + 5)), 0);
    }

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

    /// A small deterministic generator (xorshift64*).
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed >> 12;
        *seed ^= *seed << 25;
        *seed ^= *seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[test]
    fn free_range_equals_single_frees() {
        for seed0 in 1..=40u64 {
            let mut seed = seed0 * 0x9e37_79b9;
            // Two nodes, so ranges may end at a node boundary.
            let mut a = Nodes::new(8 << 10);
            assert!(a.set_layout(8 << 10, 2));
            let mut b = a.clone();
            let mut held: Vec<u64> = Vec::new();
            for _ in 0..300 {
                let r = rng(&mut seed);
                if r % 3 != 0 || held.is_empty() {
                    // Allocate a few order-0 frames (or blocks, as mTHP).
                    let order = if r % 7 == 0 {
                        Order((r % 5) as u8)
                    } else {
                        Order(0)
                    };
                    for _ in 0..(r >> 8) % 40 + 1 {
                        let (x, y) = (a.alloc(order), b.alloc(order));
                        assert_eq!(x, y);
                        // A block's frames are held like order-0 pages:
                        // a later stretch may free part of a folio's
                        // frames or several folios at once.
                        if let Some(p) = x {
                            held.extend(p.0..p.0 + order.pages());
                        }
                    }
                } else {
                    // Free a stretch of consecutive held frames.
                    held.sort_unstable();
                    let i = (r >> 8) as usize % held.len();
                    let mut j = i + 1;
                    while j < held.len() && held[j] == held[j - 1] + 1 && j - i < 600 {
                        j += 1;
                    }
                    let (first, n) = (held[i], (j - i) as u64);
                    for k in 0..n {
                        a.free(Pfn(first + k), Order(0));
                    }
                    b.free_range(Pfn(first), n);
                    held.drain(i..j);
                }
                assert_eq!(a.allocated(), b.allocated());
                for (x, y) in a.nodes.iter().zip(&b.nodes) {
                    assert_eq!(x.free, y.free, "seed {seed0}");
                }
            }
        }
    }

    /// Freeing many stretches in one step, or later, equals freeing them
    /// one by one: the same free lists and counts, the same frames handed
    /// out after, on random fragmentation over two nodes (scattered single
    /// frames, runs crossing blocks, whole blocks).
    #[test]
    fn free_stretches_equals_single_frees() {
        for seed0 in 1..=60u64 {
            let mut seed = seed0 * 0x51_7cc1_b727;
            let mut a = Nodes::new(8 << 10);
            assert!(a.set_layout(8 << 10, 2));
            // Frees each stretch with free_range_later().
            let mut c = a.clone();
            let mut held: Vec<u64> = Vec::new();
            for _ in 0..120 {
                let r = rng(&mut seed);
                if r % 3 != 0 || held.is_empty() {
                    let order = Order(((r >> 4) % 6) as u8 * u8::from(r % 5 == 0));
                    for _ in 0..(r >> 8) % 60 + 1 {
                        let p = a.alloc(order);
                        assert_eq!(p, c.alloc(order), "seed {seed0}");
                        if let Some(p) = p {
                            held.extend(p.0..p.0 + order.pages());
                        }
                    }
                    continue;
                }
                // Pick some held frames: every other one from a point, a
                // stretch, or random ones; group them into stretches.
                held.sort_unstable();
                let mut pick: Vec<u64> = Vec::new();
                let start = (r >> 8) as usize % held.len();
                let len = (rng(&mut seed) % 700) as usize + 1;
                let every = [1usize, 2, 3][(r >> 20) as usize % 3];
                let mut i = start;
                while i < held.len() && pick.len() < len {
                    pick.push(held[i]);
                    i += every;
                }
                held.retain(|f| pick.binary_search(f).is_err());
                let mut stretches: Vec<(u64, u64)> = Vec::new();
                for &f in &pick {
                    match stretches.last_mut() {
                        Some((s, n)) if *s + *n == f => *n += 1,
                        _ => stretches.push((f, 1)),
                    }
                }
                if r & (1 << 30) != 0 {
                    stretches.reverse();
                }
                let mut b = a.clone();
                for &(s, n) in &stretches {
                    a.free_range(Pfn(s), n);
                }
                b.free_stretches(&stretches);
                // Deferred frees with immediate ones in between (a zap's
                // page-table and large-folio frees).
                for (j, &(s, n)) in stretches.iter().enumerate() {
                    if j % 3 == 2 {
                        c.free_range(Pfn(s), n);
                    } else {
                        c.free_range_later(Pfn(s), n);
                    }
                }
                assert_eq!(a.allocated(), b.allocated(), "seed {seed0}");
                assert_eq!(a.allocated(), c.allocated(), "seed {seed0}");
                for k in 0..2 {
                    assert_eq!(a.node_free(k), c.node_free(k), "seed {seed0}");
                }
                for (x, y) in a.nodes.iter().zip(&b.nodes) {
                    assert_eq!(x.free, y.free, "seed {seed0}");
                }
            }
        }
    }

    /// A run taken in one step equals single order-0 allocations: the
    /// same frames, the same free lists after, on random fragmentation
    /// (two nodes, the local one filling up), with and without a cap.
    #[test]
    fn small_run_equals_single_allocs() {
        for seed0 in 1..=60u64 {
            let mut seed = seed0 * 0x9e37_79b9_7f4a;
            let mut a = Nodes::new(4 << 10);
            assert!(a.set_layout(4 << 10, 2));
            let mut held: Vec<u64> = Vec::new();
            for step in 0..200 {
                let r = rng(&mut seed);
                match r % 4 {
                    0 | 1 if !held.is_empty() => {
                        // Free a few held frames (fragmentation).
                        for _ in 0..(r >> 8) % 12 + 1 {
                            if held.is_empty() {
                                break;
                            }
                            let i = (rng(&mut seed) as usize) % held.len();
                            a.free(Pfn(held.swap_remove(i)), Order(0));
                        }
                    }
                    2 => {
                        let order = Order(((r >> 8) % 5) as u8);
                        if let Some(p) = a.alloc(order) {
                            held.extend(p.0..p.0 + order.pages());
                        }
                    }
                    _ => {
                        let max = (r >> 8) % 700 + 1;
                        let cap = (r >> 20) % 40;
                        let capped = r & (1 << 40) != 0;
                        let mut b = a.clone();
                        let got = a.alloc_small_run(max, |_| if capped { cap } else { u64::MAX });
                        // Single allocations on the copy, as far as the run went.
                        let (first, n) = got.map_or((0, 0), |(p, n)| (p.0, n));
                        for k in 0..n {
                            assert_eq!(
                                b.alloc(Order(0)),
                                Some(Pfn(first + k)),
                                "seed {seed0} step {step}"
                            );
                        }
                        if got.is_none() {
                            assert_eq!(b.alloc(Order(0)), None);
                        } else if n > 0 && n < max && !(capped && n == cap) {
                            // The run stopped where the next frame is not
                            // consecutive (or memory ran out).
                            let mut c = b.clone();
                            assert_ne!(
                                c.alloc(Order(0)),
                                Some(Pfn(first + n)),
                                "seed {seed0} step {step}"
                            );
                        }
                        assert_eq!(a.allocated(), b.allocated());
                        for (x, y) in a.nodes.iter().zip(&b.nodes) {
                            assert_eq!(x.free, y.free, "seed {seed0} step {step}");
                            assert_eq!(x.fresh, y.fresh);
                        }
                        held.extend(first..first + n);
                        if r.is_multiple_of(5) {
                            a.local = 1 - a.local;
                        }
                    }
                }
            }
        }
    }

    /// A run of order-k blocks taken in one step equals single
    /// `alloc(k)` calls: the same blocks, the same free lists after, on
    /// random fragmentation (two nodes, the local one filling up and
    /// switching), with and without a cap, for orders 0 to 5 and
    /// MAX_ORDER.
    #[test]
    fn run_equals_single_allocs_of_any_order() {
        let mut runs = 0;
        for seed0 in 1..=60u64 {
            let mut seed = seed0 * 0x51_7cc1_b727;
            let mut a = Nodes::new(8 << 10);
            assert!(a.set_layout(8 << 10, 2));
            let mut held: Vec<(u64, Order)> = Vec::new();
            for step in 0..200 {
                let r = rng(&mut seed);
                match r % 4 {
                    0 | 1 if !held.is_empty() => {
                        for _ in 0..(r >> 8) % 12 + 1 {
                            if held.is_empty() {
                                break;
                            }
                            let i = (rng(&mut seed) as usize) % held.len();
                            let (p, o) = held.swap_remove(i);
                            a.free(Pfn(p), o);
                        }
                    }
                    2 => {
                        let order = Order(((r >> 8) % 5) as u8);
                        if let Some(p) = a.alloc(order) {
                            held.push((p.0, order));
                        }
                    }
                    _ => {
                        let o = (r >> 50) % 7;
                        let order = Order(if o == 6 { MAX_ORDER } else { o as u8 });
                        let max = (r >> 8) % 40 + 1;
                        let cap = (r >> 20) % 20;
                        let capped = r & (1 << 40) != 0;
                        let mut b = a.clone();
                        let got = a.alloc_run(order, max, |_| if capped { cap } else { u64::MAX });
                        let (first, n) = got.map_or((0, 0), |(p, n)| (p.0, n));
                        for k in 0..n {
                            assert_eq!(
                                b.alloc(order),
                                Some(Pfn(first + k * order.pages())),
                                "seed {seed0} step {step}"
                            );
                        }
                        if got.is_none() {
                            assert_eq!(b.alloc(order), None, "seed {seed0} step {step}");
                        } else if n > 0 && n < max && !(capped && n == cap) {
                            // The run stopped where the next block is not
                            // the consecutive one, or is on another node
                            // (a run stays in its node; the caller goes on
                            // with single allocations).
                            let mut c = b.clone();
                            let next = Pfn(first + n * order.pages());
                            if c.alloc(order) == Some(next) {
                                assert_ne!(
                                    c.node_of(next),
                                    c.node_of(Pfn(first)),
                                    "seed {seed0} step {step}"
                                );
                            }
                        }
                        runs += u64::from(n > 1);
                        assert_eq!(a.allocated(), b.allocated());
                        for (x, y) in a.nodes.iter().zip(&b.nodes) {
                            assert_eq!(x.free, y.free, "seed {seed0} step {step}");
                            assert_eq!(x.fresh, y.fresh);
                        }
                        held.extend((0..n).map(|k| (first + k * order.pages(), order)));
                        if r.is_multiple_of(5) {
                            a.local = 1 - a.local;
                        }
                    }
                }
            }
        }
        assert!(runs > 100, "runs of two or more blocks: {runs}");
    }

    /// A plain buddy allocator, the reference the free sets are checked
    /// against: one `BTreeSet` of block starts per order, the lowest block
    /// of the smallest non-empty order taken (a fresh max-order block when
    /// every list is empty), upper halves listed, buddies merged on free.
    struct RefBuddy {
        free: Vec<std::collections::BTreeSet<u64>>,
        fresh: u64,
        limit: u64,
    }

    impl RefBuddy {
        fn new(frames: u64) -> Self {
            let block = 1u64 << MAX_ORDER;
            RefBuddy {
                free: vec![Default::default(); MAX_ORDER as usize + 1],
                fresh: FIRST_PFN,
                limit: FIRST_PFN + frames / block * block,
            }
        }
        fn alloc(&mut self, want: u8) -> Option<u64> {
            let found =
                (want..=MAX_ORDER).find_map(|o| self.free[o as usize].pop_first().map(|p| (p, o)));
            let (p, mut o) = match found {
                Some(x) => x,
                None => {
                    let block = 1u64 << MAX_ORDER;
                    if self.fresh + block > self.limit {
                        return None;
                    }
                    self.fresh += block;
                    (self.fresh - block, MAX_ORDER)
                }
            };
            while o > want {
                o -= 1;
                self.free[o as usize].insert(p + (1 << o));
            }
            Some(p)
        }
        fn free(&mut self, mut p: u64, mut o: u8) {
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
        /// Whether `a`'s free lists hold exactly the reference's blocks.
        fn same_lists(&self, a: &FrameAllocator) -> bool {
            a.free
                .iter()
                .zip(&self.free)
                .all(|(x, y)| x.blocks() == y.iter().copied().collect::<Vec<_>>())
        }
    }

    /// The allocator (free sets kept inline while small, spilled into
    /// bitmaps past [`FEW`] blocks and back once emptied) against the
    /// plain reference buddy: random single allocations and frees of
    /// mixed orders, runs of any order (`alloc_run`, checked block by
    /// block against single reference allocations), range frees and
    /// deferred stretch frees (checked against single reference frees of
    /// each block), from an empty zone to a full one and back, the frames
    /// handed out and every free list compared after each step.
    #[test]
    fn allocator_equals_a_plain_buddy() {
        let mut spills = 0;
        for seed0 in 1..=40u64 {
            let mut seed = seed0 * 0x2545_f491_4f6c_dd1d;
            let frames = 16 << MAX_ORDER;
            let mut a = Nodes::new(frames);
            let mut r = RefBuddy::new(frames);
            // Held blocks: (first frame, order).
            let mut held: Vec<(u64, u8)> = Vec::new();
            for step in 0..600 {
                let x = rng(&mut seed);
                // Phases: mostly allocating, then mostly freeing.
                let alloc_bias = if (step / 150) % 2 == 0 { 3 } else { 1 };
                let order = [0u8, 0, 0, 1, 2, 4, 4, 9, MAX_ORDER][(x >> 8) as usize % 9];
                match x % 5 {
                    k if k < alloc_bias || held.is_empty() => {
                        if x & (1 << 40) != 0 {
                            let max = (x >> 20) % 24 + 1;
                            let got = a.alloc_run(Order(order), max, |_| u64::MAX);
                            let (first, n) = got.map_or((0, 0), |(p, n)| (p.0, n));
                            for k in 0..n {
                                let p = first + (k << order);
                                assert_eq!(r.alloc(order), Some(p), "seed {seed0} step {step}");
                                held.push((p, order));
                            }
                        } else {
                            let p = a.alloc(Order(order)).map(|p| p.0);
                            assert_eq!(p, r.alloc(order), "seed {seed0} step {step}");
                            held.extend(p.map(|p| (p, order)));
                        }
                    }
                    3 => {
                        // Free a few blocks one by one.
                        for _ in 0..(x >> 8) % 16 + 1 {
                            if held.is_empty() {
                                break;
                            }
                            let i = rng(&mut seed) as usize % held.len();
                            let (p, o) = held.swap_remove(i);
                            a.free(Pfn(p), Order(o));
                            r.free(p, o);
                        }
                    }
                    _ => {
                        // Free blocks held one after the other in frames
                        // as range frees or deferred stretches.
                        held.sort_unstable();
                        let i = (x >> 8) as usize % held.len();
                        let mut j = i + 1;
                        while j < held.len()
                            && held[j].0 == held[j - 1].0 + (1u64 << held[j - 1].1)
                            && j - i < 40
                        {
                            j += 1;
                        }
                        let first = held[i].0;
                        let n = held[j - 1].0 + (1u64 << held[j - 1].1) - first;
                        for &(p, o) in &held[i..j] {
                            r.free(p, o);
                        }
                        held.drain(i..j);
                        if x & (1 << 41) != 0 {
                            a.free_range(Pfn(first), n);
                        } else {
                            a.free_range_later(Pfn(first), n);
                            if x & (1 << 42) != 0 {
                                a.list_later();
                            }
                        }
                    }
                }
                let held_frames: u64 = held.iter().map(|&(_, o)| 1u64 << o).sum();
                assert_eq!(a.allocated(), held_frames, "seed {seed0} step {step}");
                if a.later.is_empty() {
                    assert!(r.same_lists(&a.nodes[0]), "seed {seed0} step {step}");
                }
                spills += a.nodes[0].free.iter().filter(|f| f.big).count();
            }
        }
        assert!(spills > 1000, "free sets in their bitmaps: {spills}");
    }

    /// The lists `n` would hold with every deferred journal operation
    /// applied and the deferred frees listed (a clone), for comparisons.
    fn settled(n: &Nodes) -> Nodes {
        let mut c = n.clone();
        c.settle();
        c.list_later();
        c
    }

    /// One step of a replay test's cycle: allocations refer to the
    /// frames the cycle's earlier allocations got (`Free(k)`: the `k`-th
    /// block allocated in this pass of the cycle).
    #[derive(Clone, Copy, Debug)]
    enum Step {
        Alloc(u8),
        /// `alloc_run(order, max)` with the cap `cap` (`u64::MAX`: none),
        /// or `alloc_small_run` when `small`.
        Run(u8, u64, u64, bool),
        Free(usize),
        /// `free_range` of the blocks `k..k + m` of this pass when they
        /// are consecutive in frames (else one by one).
        FreeRange(usize, usize),
    }

    /// The replay journal (`set_replay(true)`) against the plain
    /// allocator and the plain reference buddy: random cycles of
    /// allocations, runs (capped or not) and frees of what the cycle
    /// allocated, each run many times in a row, with background blocks
    /// held across cycles and perturbations between and inside passes —
    /// a different order or cap, an extra allocation kept, a free of a
    /// background block, a deferred free, a layout read (`set_frames`),
    /// `alloc_on` — the same frames handed out by all three, the same
    /// allocated counts after every request, and the same free lists
    /// (the journal's deferred operations applied to a clone) after every
    /// request.
    #[test]
    fn replay_equals_a_plain_buddy() {
        let (mut hits, mut misses, mut cap_misses) = (0u64, 0u64, 0u64);
        for seed0 in 1..=60u64 {
            let mut seed = seed0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let frames = 16 << MAX_ORDER;
            let mut a = Nodes::new(frames);
            a.set_replay(true);
            let mut b = Nodes::new(frames);
            let mut r = RefBuddy::new(frames);
            // Blocks held across cycles: (first frame, order).
            let mut bg: Vec<(u64, u8)> = Vec::new();
            let orders = [0u8, 0, 0, 1, 2, 4, 4, 8];
            // Some background first, so cycles start from fragmented lists.
            for _ in 0..rng(&mut seed) % 40 {
                let o = orders[rng(&mut seed) as usize % orders.len()];
                let p = a.alloc(Order(o)).map(|p| p.0);
                assert_eq!(p, b.alloc(Order(o)).map(|p| p.0));
                assert_eq!(p, r.alloc(o));
                bg.extend(p.map(|p| (p, o)));
            }
            for cycle in 0..12 {
                // Now and then max-order blocks in a row, kept: taken
                // whole from the lists or never used before (which a
                // journal must not answer again).
                if cycle % 4 == 1 {
                    for _ in 0..rng(&mut seed) % 4 + 1 {
                        let p = a.alloc(Order(MAX_ORDER)).map(|p| p.0);
                        assert_eq!(p, b.alloc(Order(MAX_ORDER)).map(|p| p.0), "seed {seed0}");
                        assert_eq!(p, r.alloc(MAX_ORDER), "seed {seed0}");
                        bg.extend(p.map(|p| (p, MAX_ORDER)));
                    }
                }
                // A cycle: some allocations, then frees of all of them in
                // a random order, some as ranges.
                let mut prog = Vec::new();
                let allocs = rng(&mut seed) % 5 + 1;
                for _ in 0..allocs {
                    let x = rng(&mut seed);
                    let o = orders[(x >> 8) as usize % orders.len()];
                    if x % 3 == 0 {
                        let cap = if x & (1 << 30) != 0 {
                            (x >> 32) % 6
                        } else {
                            u64::MAX
                        };
                        prog.push(Step::Run(o, (x >> 40) % 6 + 1, cap, x & (1 << 31) != 0));
                    } else {
                        prog.push(Step::Alloc(o));
                    }
                }
                let passes = rng(&mut seed) % 12 + 2;
                for pass in 0..passes {
                    let mut got: Vec<(u64, u8)> = Vec::new();
                    let mut steps = prog.clone();
                    // Perturbations, now and then.
                    let x = rng(&mut seed);
                    if pass > 0 && x % 4 == 0 {
                        let i = (x >> 8) as usize % steps.len();
                        steps[i] = match steps[i] {
                            Step::Alloc(o) => Step::Alloc((o + 1) % 5),
                            Step::Run(o, m, c, s) => Step::Run(o, m, c.wrapping_add(1), s),
                            s => s,
                        };
                    }
                    // The frees: blocks of this pass in a random order
                    // (fixed per cycle by `cycle`), some as ranges.
                    let mut frees: Vec<Step> = Vec::new();
                    let mut k = 0;
                    let mut fs = (seed0 * 31 + cycle) | 1;
                    while k < 40 {
                        let y = rng(&mut fs);
                        let m = (y % 3 + 1) as usize;
                        if y & 8 != 0 {
                            frees.push(Step::FreeRange(k, m));
                        } else {
                            for j in 0..m {
                                frees.push(Step::Free(k + j));
                            }
                        }
                        k += m;
                    }
                    for (si, step) in steps.iter().chain(frees.iter()).enumerate() {
                        let y = rng(&mut seed);
                        // A reader or another user of the lists between
                        // requests, now and then.
                        if y % 401 == 0 {
                            assert_eq!(a.set_frames(frames), b.set_frames(frames));
                        } else if y % 409 == 0 && !bg.is_empty() {
                            let (p, o) = bg.swap_remove((y >> 8) as usize % bg.len());
                            a.free_range_later(Pfn(p), 1 << o);
                            b.free_range_later(Pfn(p), 1 << o);
                            r.free(p, o);
                        } else if y % 419 == 0 {
                            let p = a.alloc_on(0, Order(0)).map(|p| p.0);
                            assert_eq!(p, b.alloc_on(0, Order(0)).map(|p| p.0));
                            assert_eq!(p, r.alloc(0));
                            bg.extend(p.map(|p| (p, 0)));
                        } else if y % 421 == 0 && pass > 0 {
                            // An extra allocation kept in the background.
                            let p = a.alloc(Order(0)).map(|p| p.0);
                            assert_eq!(p, b.alloc(Order(0)).map(|p| p.0));
                            assert_eq!(p, r.alloc(0));
                            bg.extend(p.map(|p| (p, 0)));
                        } else if y % 431 == 0 && !bg.is_empty() {
                            let (p, o) = bg.swap_remove((y >> 8) as usize % bg.len());
                            a.free(Pfn(p), Order(o));
                            b.free(Pfn(p), Order(o));
                            r.free(p, o);
                        }
                        match *step {
                            Step::Alloc(o) => {
                                let p = a.alloc(Order(o)).map(|p| p.0);
                                assert_eq!(p, b.alloc(Order(o)).map(|p| p.0), "seed {seed0}");
                                assert_eq!(p, r.alloc(o), "seed {seed0}");
                                got.extend(p.map(|p| (p, o)));
                            }
                            Step::Run(o, max, cap, small) => {
                                let o = if small { 0 } else { o };
                                let c = |p: Pfn| {
                                    if cap == u64::MAX {
                                        cap
                                    } else {
                                        (p.0 >> 1) % 5 + cap
                                    }
                                };
                                let (x, y) = if small {
                                    (a.alloc_small_run(max, c), b.alloc_small_run(max, c))
                                } else {
                                    (a.alloc_run(Order(o), max, c), b.alloc_run(Order(o), max, c))
                                };
                                assert_eq!(
                                    x, y,
                                    "seed {seed0} cycle {cycle} pass {pass} step {si}"
                                );
                                let (first, n) = x.map_or((0, 0), |(p, n)| (p.0, n));
                                for k in 0..n {
                                    let p = first + (k << o);
                                    assert_eq!(r.alloc(o), Some(p), "seed {seed0}");
                                    got.push((p, o));
                                }
                            }
                            Step::Free(k) => {
                                if k < got.len() && got[k].0 != u64::MAX {
                                    let (p, o) = got[k];
                                    got[k].0 = u64::MAX;
                                    a.free(Pfn(p), Order(o));
                                    b.free(Pfn(p), Order(o));
                                    r.free(p, o);
                                }
                            }
                            Step::FreeRange(k, m) => {
                                let end = (k + m).min(got.len());
                                if k >= end {
                                    continue;
                                }
                                let blocks = &got[k..end];
                                let whole = blocks.iter().all(|&(p, _)| p != u64::MAX)
                                    && blocks.windows(2).all(|w| w[0].0 + (1 << w[0].1) == w[1].0);
                                if whole {
                                    let first = blocks[0].0;
                                    let last = blocks[blocks.len() - 1];
                                    let n = last.0 + (1 << last.1) - first;
                                    a.free_range(Pfn(first), n);
                                    b.free_range(Pfn(first), n);
                                    for &(p, o) in blocks {
                                        r.free(p, o);
                                    }
                                    for g in &mut got[k..end] {
                                        g.0 = u64::MAX;
                                    }
                                } else {
                                    for j in k..end {
                                        let (p, o) = got[j];
                                        if p != u64::MAX {
                                            got[j].0 = u64::MAX;
                                            a.free(Pfn(p), Order(o));
                                            b.free(Pfn(p), Order(o));
                                            r.free(p, o);
                                        }
                                    }
                                }
                            }
                        }
                        assert_eq!(a.allocated(), b.allocated(), "seed {seed0}");
                        let (s, t) = (settled(&a), settled(&b));
                        for (x, y) in s.nodes.iter().zip(&t.nodes) {
                            assert_eq!(x.free, y.free, "seed {seed0} cycle {cycle} pass {pass}");
                            assert_eq!(x.fresh, y.fresh);
                            assert_eq!(x.allocated, y.allocated);
                        }
                        if b.later.is_empty() {
                            assert!(r.same_lists(&b.nodes[0]), "seed {seed0}");
                        }
                    }
                    // Whatever a perturbed pass left allocated stays held.
                    for (p, o) in got {
                        if p != u64::MAX {
                            bg.push((p, o));
                        }
                    }
                }
            }
            hits += a.rj.hits;
            misses += a.rj.misses;
            cap_misses += a.rj.cap_misses;
        }
        assert!(hits > 2000, "requests answered from the journal: {hits}");
        assert!(misses > 200, "materialisations: {misses}");
        assert!(cap_misses > 10, "runs whose cap differed: {cap_misses}");
    }

    /// The seed this is for (mremap-batch-64k: mmap 1 MiB, write it with
    /// 64 KiB folios, mremap it 1 MiB up, munmap) runs from the journal
    /// once its first iterations closed a cycle, on both architectures.
    #[test]
    fn the_seed_loop_replays() {
        use crate::{ArchKind, MapFlags, Model, ModelConfig, MremapFlags, Prot, ThpKnob, ThpMode};
        for arch in ArchKind::ALL {
            let mut m = Model::new(ModelConfig::for_arch(arch));
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            let base = 0x7f00_0000_0000u64;
            let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
            let rw = Prot::READ | Prot::WRITE;
            let fl = MremapFlags::MAYMOVE | MremapFlags::FIXED;
            for _ in 0..100 {
                m.mmap(1, base, 1 << 20, rw, f).unwrap();
                m.access_range(1, base, 1 << 20, true, None).unwrap();
                m.mremap(1, base, 1 << 20, 1 << 20, fl, base + (1 << 20))
                    .unwrap();
                m.munmap(1, base + (1 << 20), 1 << 20).unwrap();
            }
            let j = &m.phys.alloc.rj;
            // The iteration's four requests: the zap's range free of the
            // 16 folios, the chain's three table pages freed, taken again
            // as one run, the write's run of 16 order-4 folios.
            let kinds: Vec<Kind> = j.reqs.iter().map(|r| r.kind).collect();
            assert_eq!(
                kinds,
                [Kind::FreeRange, Kind::FreeRange, Kind::Run, Kind::Run],
                "{arch:?}"
            );
            assert_eq!(j.mode, Mode::Replaying, "{arch:?}");
            assert!(
                j.hits >= 90 * j.reqs.len() as u64,
                "{arch:?}: {} hits",
                j.hits
            );
            assert_eq!(j.misses, 0, "{arch:?}");
        }
    }

    /// The inline free set spills into its bitmap and comes back: random
    /// operations on a few blocks (so the set keeps emptying) against a
    /// `BTreeSet`.
    #[test]
    fn small_free_set_spills_and_returns() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut a = FreeSet::new(FIRST_PFN, 2);
        let mut b = std::collections::BTreeSet::new();
        let (mut big, mut back) = (0, 0);
        for step in 0..50_000 {
            let r = rng(&mut seed);
            let pfn = FIRST_PFN + (((r >> 8) % 7) << 2) + (((r >> 40) % 2) << 16);
            let was_big = a.big;
            let buddy = FIRST_PFN + ((pfn - FIRST_PFN) ^ (1 << 2));
            match (r >> 4) % 6 {
                0 | 1 => assert_eq!(a.insert(pfn), b.insert(pfn), "step {step}"),
                2 => assert_eq!(a.remove(&pfn), b.remove(&pfn), "step {step}"),
                3 | 4 => {
                    // The merge step: the buddy out, else the block in.
                    let want = b.remove(&buddy) || {
                        b.insert(pfn);
                        false
                    };
                    assert_eq!(a.take_buddy_or_insert(buddy, pfn), want, "step {step}");
                }
                _ => assert_eq!(a.pop_first(), b.pop_first(), "step {step}"),
            }
            assert_eq!(a.first(), b.first().copied(), "step {step}");
            assert_eq!(a.len(), b.len());
            assert_eq!(a.blocks(), b.iter().copied().collect::<Vec<_>>());
            big += u32::from(!was_big && a.big);
            back += u32::from(was_big && !a.big);
        }
        assert!(big > 20 && back > 20, "spills {big}, returns {back}");
    }

    /// The bitmap free set against the ordered set it replaced: random
    /// inserts, removes, pops and lowest-block reads over a range that
    /// spans several chunks (and chunk words), blocks of order 0, 3 and 10.
    #[test]
    fn free_set_is_an_ordered_set() {
        for order in [0u8, 3, 10] {
            let mut seed = 0x2545_f491_4f6c_dd1d ^ u64::from(order);
            let mut a = FreeSet::new(FIRST_PFN, order);
            let mut b = std::collections::BTreeSet::new();
            let span = 3 * (1u64 << CHUNK_SHIFT) + 100;
            for step in 0..20_000 {
                let r = rng(&mut seed);
                // Clustered indices (dense chunks) and scattered ones.
                let i = if r & 1 == 0 {
                    (r >> 8) % 200
                } else {
                    (r >> 8) % span
                };
                let pfn = FIRST_PFN + (i << order);
                let buddy = FIRST_PFN + ((pfn - FIRST_PFN) ^ (1 << order));
                match (r >> 4) % 6 {
                    0 | 1 => assert_eq!(a.insert(pfn), b.insert(pfn), "step {step}"),
                    2 => assert_eq!(a.remove(&pfn), b.remove(&pfn), "step {step}"),
                    3 => assert_eq!(a.pop_first(), b.pop_first(), "step {step}"),
                    4 => {
                        let want = b.remove(&buddy) || {
                            b.insert(pfn);
                            false
                        };
                        assert_eq!(a.take_buddy_or_insert(buddy, pfn), want, "step {step}");
                    }
                    _ => assert_eq!(a.first(), b.first().copied(), "step {step}"),
                }
                assert_eq!(a.len(), b.len());
                assert_eq!(a.is_empty(), b.is_empty());
            }
            // Equality looks at the blocks only.
            let mut c = FreeSet::new(FIRST_PFN, order);
            for &p in &b {
                c.insert(p);
            }
            assert_eq!(a, c);
            while a.pop_first().is_some() {}
            assert_eq!(a, FreeSet::new(FIRST_PFN, order));
        }
    }

    #[test]
    fn block_orders_cover_a_range() {
        assert_eq!(block_order(0, 1), 0);
        assert_eq!(block_order(0, 256), 8);
        assert_eq!(block_order(0, 5000), MAX_ORDER);
        assert_eq!(block_order(4, 100), 2);
        assert_eq!(block_order(8, 3), 1);
    }

    #[test]
    fn exhaustion() {
        let mut a = FrameAllocator::new(1024);
        assert!(a.alloc(Order(10)).is_some());
        assert!(a.alloc(Order(0)).is_none());
    }
}
