//! x86-64 TLB maintenance and `pte_needs_flush()`.
//! Linux: arch/x86/mm/tlb.c, arch/x86/include/asm/tlbflush.h.

use crate::core::arch::{Leaf, LeafFlags};
use crate::core::hw::{HwEvent, HwMark, HwSink};

/// `tlb_single_page_flush_ceiling`: above this many strides a range flush
/// becomes a full flush.
const CEILING: u64 = 33;

/// `flush_tlb_mm_range()`: `get_flush_tlb_info()` turns more than the
/// ceiling into a full flush (CR3 write / INVPCID); otherwise
/// `flush_tlb_func()` issues one INVLPG per stride step. PTI doubles every
/// user invalidation.
pub fn flush_tlb_range(hw: &HwSink, start: u64, end: u64, stride: u64) {
    if end <= start {
        return;
    }
    // get_flush_tlb_info() compares the range as passed, not rounded to
    // the stride: a freed table's one page at PMD stride counts 0 there,
    // so 34 tables a PMD apart ([first, last + 4 KiB): 33 strides) are
    // still flushed page by page. flush_tlb_func() then invalidates from
    // `start` while below `end`, one stride at a time.
    let full = (end - start) >> stride.trailing_zeros() > CEILING;
    let n = (end - start).div_ceil(stride);
    let start = start & !(stride - 1);
    let end = (end + stride - 1) & !(stride - 1);
    hw.mark(HwMark::TlbFlush {
        start,
        end,
        whole: full,
    });
    hw.one(HwEvent::TlbFlushCall);
    let k = if hw.features.kpti { 2 } else { 1 };
    if full {
        hw.add(HwEvent::TlbiAsid, k);
    } else {
        hw.add(HwEvent::TlbiPage, n * k);
    }
}

/// `flush_tlb_mm()` → `flush_tlb_mm_range(TLB_FLUSH_ALL)` → `flush_tlb_local()`.
pub fn flush_tlb_mm(hw: &HwSink) {
    hw.mark(HwMark::TlbFlush {
        start: 0,
        end: u64::MAX,
        whole: true,
    });
    hw.one(HwEvent::TlbFlushCall);
    hw.add(HwEvent::TlbiAsid, if hw.features.kpti { 2 } else { 1 });
}

/// `pte_needs_flush()`: no flush when the old entry was not present
/// (PROT_NONE) or only accessed/software bits changed; a cleared dirty bit
/// needs one. Linux: arch/x86/include/asm/tlbflush.h pte_flags_need_flush().
pub fn pte_needs_flush(old: &Leaf, new: &Leaf) -> bool {
    if old.flags.contains(LeafFlags::PROTNONE) {
        return false;
    }
    if old.pfn != new.pfn {
        return true;
    }
    let hw = LeafFlags::WRITE | LeafFlags::EXEC | LeafFlags::PROTNONE;
    (old.flags & hw) != (new.flags & hw)
        || (old.flags.contains(LeafFlags::DIRTY) && !new.flags.contains(LeafFlags::DIRTY))
}
