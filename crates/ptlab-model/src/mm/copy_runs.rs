//! The table side of fork's per-segment copy of order-0 pages, on both
//! arches: which entries the loop takes, the memmap's share of each, and
//! the parent's and child's stores — a stretch stored as one run of
//! present entries a frame apart taken as one step (issue 14).
//!
//! `copy_pte_range()` handles each order-0 page as a batch of one:
//! `__folio_try_dup_anon_rmap()` and `folio_ref_add()` on its page,
//! `wrprotect_ptes(nr = 1)` on the parent's entry when writable, and
//! `set_ptes(nr = 1)` of the write-protected, old entry in the child. The
//! callers (x86-64 `sys/fork.rs` `copy_small_run`, arm64
//! `mm/contpte_runs.rs` `copy_small_run`) count those calls for the whole
//! run at once (`mm/small_runs.rs`); this file does the state changes.
//!
//! The whole-stretch step (`ModelConfig::fork_runs`): when the parent's
//! table stores entries `i..i + len` as one run `first + k × step` of
//! present entries with `step` one frame (and no carry out of the frame
//! field), every entry of it has the first one's attribute bits, so each
//! pass of the kernel's loop sees the same kind of entry and makes the
//! same change to its bits: the frames are `pfn(first) + k` (no entry is
//! read), the parent's stretch becomes one run `parent(first) + k × step`
//! and the child's one run `child(first) + k × step`. Per-page state
//! (mapcount, refcount, AnonExclusive) still changes page by page in the
//! memmap (one pass, `PhysMem::try_dup_small_anon_run`). The
//! `fork_runs_prop` test holds this against the entry-by-entry form.
//! Linux: mm/memory.c copy_pte_range() → copy_present_ptes() (nr == 1),
//! __copy_present_ptes().

use crate::core::addr::Pfn;
use crate::core::arch::PteTable;
use crate::core::folio::PhysMem;
use crate::core::pgtable::Run;

/// What one arch's copy makes of a raw descriptor ([`copy_order0_entries`]).
pub(crate) struct CopyBits<P, F, W, A, C>
where
    P: Fn(u64) -> bool,
    F: Fn(u64) -> Pfn,
    W: Fn(u64) -> bool,
    A: Fn(u64) -> u64,
    C: Fn(u64) -> u64,
{
    /// The entry is one the order-0 loop takes (present, not special;
    /// arm64: not CONT).
    pub takes: P,
    /// The frame it maps.
    pub pfn: F,
    /// `pte_write()`.
    pub writable: W,
    /// The parent's entry after `wrprotect_ptes()` (writable entries only).
    pub parent: A,
    /// The child's entry.
    pub child: C,
    /// The frame field and its unit (consecutive frames differ by
    /// `frame_step`); the transforms above change no bit inside it.
    pub addr_mask: u64,
    pub frame_step: u64,
}

/// Copy the run of order-0 anon pages the parent's table `st` maps from
/// entry `i0` (at most `max` entries) into the child's `dt`: the memmap
/// side of each page first (stopping at the first entry the loop does not
/// take or whose frame is no order-0 anon page), then the stores,
/// `after_store(dt, i)` after the child's entry `i` is written (arm64's
/// block-end fold try; it must read no entry after `i`). Returns the
/// entries copied and how many of them were writable in the parent.
pub(crate) fn copy_order0_entries<P, F, W, A, C>(
    st: &mut PteTable<'_>,
    dt: &mut PteTable<'_>,
    phys: &mut PhysMem,
    i0: usize,
    max: usize,
    bits: &CopyBits<P, F, W, A, C>,
    mut after_store: impl FnMut(&mut PteTable<'_>, usize, &PhysMem),
) -> (usize, u64)
where
    P: Fn(u64) -> bool,
    F: Fn(u64) -> Pfn,
    W: Fn(u64) -> bool,
    A: Fn(u64) -> u64,
    C: Fn(u64) -> u64,
{
    let whole = phys.fork_runs;
    // The stretch of a stored run the frames are being read from:
    // (first k, one past its last k, frame at the first k).
    let mut cur: Option<(usize, usize, u64)> = None;
    let n = phys.try_dup_small_anon_run(|k| {
        if k >= max {
            return None;
        }
        if let Some((s, e, p)) = cur {
            if k < e {
                return Some(Pfn(p + (k - s) as u64));
            }
        }
        let e = st.raw(i0 + k);
        if !(bits.takes)(e) {
            return None;
        }
        let pfn = (bits.pfn)(e);
        if whole {
            if let Some(len) = stretch(st, i0 + k, bits.addr_mask, bits.frame_step) {
                cur = Some((k, k + len, pfn.0));
            }
        }
        Some(pfn)
    });
    let mut wrprotected = 0u64;
    let mut i = i0;
    while i < i0 + n {
        let e = st.raw(i);
        let len = whole
            .then(|| stretch(st, i, bits.addr_mask, bits.frame_step))
            .flatten()
            .map_or(1, |len| len.min(i0 + n - i));
        if len > 1 {
            // One run in, one run out on each side.
            let kinds = Run::PRESENT;
            if (bits.writable)(e) {
                st.write_affine(i, len, (bits.parent)(e), bits.frame_step, kinds);
                wrprotected += len as u64;
            }
            dt.write_affine(i, len, (bits.child)(e), bits.frame_step, kinds);
            for j in i..i + len {
                after_store(dt, j, phys);
            }
        } else {
            if (bits.writable)(e) {
                st.store_raw(i, (bits.parent)(e));
                wrprotected += 1;
            }
            dt.store_raw(i, (bits.child)(e));
            after_store(dt, i, phys);
        }
        i += len;
    }
    (n, wrprotected)
}

/// How many entries from `i` the table stores as one run of present
/// entries a frame apart with equal bits (`None`: not so stored, or one
/// entry).
#[inline]
fn stretch(t: &PteTable<'_>, i: usize, addr_mask: u64, frame_step: u64) -> Option<usize> {
    let r = t.run_from(i)?;
    let len = r.len as usize;
    let no_carry = (r.first & addr_mask)
        .checked_add(frame_step * (len as u64 - 1))
        .is_some_and(|last| last <= addr_mask);
    (len > 1 && r.kinds == Run::PRESENT && r.step == frame_step && no_carry).then_some(len)
}
