//! arm64 TLB maintenance: which instructions a flush issues.
//! Linux: arch/arm64/include/asm/tlbflush.h.

use crate::core::hw::{HwEvent, HwMark, HwSink};

/// `MAX_DVM_OPS` = PTRS_PER_PTE: without FEAT_TLBIRANGE a range of this many
/// strides or more is flushed ASID-wide.
const MAX_DVM_OPS: u64 = 512;
/// `MAX_TLBI_RANGE_PAGES` = __TLBI_RANGE_PAGES(31, 3).
const MAX_TLBI_RANGE_PAGES: u64 = 32 << 16;

/// One user TLBI: KPTI issues it twice (`__tlbi_user`).
fn tlbi(hw: &HwSink, e: HwEvent) {
    hw.add(e, if hw.features.kpti { 2 } else { 1 });
}

/// `__flush_tlb_range()`: ASID-wide when `__flush_tlb_range_limit_excess()`
/// (without FEAT_TLBIRANGE when `end - start >= MAX_DVM_OPS * stride`; with
/// it above MAX_TLBI_RANGE_PAGES), else DSB ISHST, the
/// `__flush_tlb_range_op()` instructions (range ops from scale 3 down, LPA2
/// off for 48-bit VAs with 4 KiB pages), DSB ISH.
pub fn flush_tlb_range(hw: &HwSink, start: u64, end: u64, stride: u64) {
    if flush_tlb_range_nosync(hw, start, end, stride) {
        hw.one(HwEvent::DsbIsh);
    }
}

/// `__flush_tlb_range_nosync()`: flush_tlb_range() without its completing
/// DSB ISH (reclaim's deferred flush waits for it in
/// arch_tlbbatch_flush()). Returns whether a DSB ISH is still owed (false
/// when the range was too large and flush_tlb_mm() ran, which completes
/// itself, or when the range is empty).
#[inline]
pub fn flush_tlb_range_nosync(hw: &HwSink, start: u64, end: u64, stride: u64) -> bool {
    if end <= start {
        return false;
    }
    let start = start & !(stride - 1);
    let end = (end + stride - 1) & !(stride - 1);
    let pages = (end - start) >> 12;
    let excess = (!hw.features.tlbi_range && end - start >= MAX_DVM_OPS * stride)
        || pages > MAX_TLBI_RANGE_PAGES;
    hw.mark(HwMark::TlbFlush {
        start,
        end,
        whole: excess,
    });
    if excess {
        count_flush_tlb_mm(hw);
        return false;
    }
    hw.one(HwEvent::TlbFlushCall);
    hw.one(HwEvent::DsbIshst);
    let mut pages = pages;
    let stride_pages = stride >> 12;
    if !hw.features.tlbi_range {
        // One TLBI per stride (the loop below, counted at once).
        let per = if hw.features.kpti { 2 } else { 1 };
        hw.add(HwEvent::TlbiPage, pages.div_ceil(stride_pages) * per);
        return true;
    }
    let mut scale: i32 = 3;
    while pages > 0 {
        if !hw.features.tlbi_range || pages == 1 {
            tlbi(hw, HwEvent::TlbiPage);
            pages = pages.saturating_sub(stride_pages);
            continue;
        }
        if scale < 0 {
            break; // unreachable: scale 0 covers any remainder ≥ 2 (even)
        }
        // __TLBI_RANGE_NUM(pages, scale) as 6.9 made it: no 5-bit mask,
        // so MAX_TLBI_RANGE_PAGES itself gives num 31 at scale 3 (the old
        // mask turned its 32 into 0 and flushed nothing).
        let num = (pages.min(MAX_TLBI_RANGE_PAGES) >> (5 * scale as u64 + 1)) as i64 - 1;
        if num >= 0 {
            tlbi(hw, HwEvent::TlbiRange);
            pages -= ((num as u64) + 1) << (5 * scale as u64 + 1);
        }
        scale -= 1;
    }
    true
}

/// `flush_tlb_mm()`: DSB ISHST; TLBI ASIDE1IS; DSB ISH.
pub fn flush_tlb_mm(hw: &HwSink) {
    hw.mark(HwMark::TlbFlush {
        start: 0,
        end: u64::MAX,
        whole: true,
    });
    count_flush_tlb_mm(hw);
}

fn count_flush_tlb_mm(hw: &HwSink) {
    hw.one(HwEvent::TlbFlushCall);
    hw.one(HwEvent::DsbIshst);
    tlbi(hw, HwEvent::TlbiAsid);
    hw.one(HwEvent::DsbIsh);
}
