//! What the per-segment loops over order-0 pages count on every arch: one
//! home for the accounting that fork's and mprotect's run loops (x86-64 in
//! `sys/fork.rs` and `sys/mprotect.rs`, arm64 in [`super::contpte_runs`],
//! which adds the contpte hooks' own) add in one step each — `n` passes of
//! the kernel's per-entry loop at once.

use crate::core::addr::PAGE_SIZE;
use crate::core::folio::PhysMem;
use crate::core::hw::{HwEvent, HwSink, KCall};
use crate::core::rules::Rule;
use crate::core::tlb::MmuGather;
use crate::mm::mm::Mm;

/// What `n` passes of `copy_pte_range()` over order-0 pages count on every
/// arch, `wrprotected` of them write-protecting the parent's entry: per
/// pass `ptep_get()`, the struct page line of `vm_normal_page()`, the batch
/// (or the per-entry rule), the rmap and references (the rmap dup re-touches
/// `vm_normal_page()`'s line: `struct_page_line_hot`), the parent's
/// `wrprotect_ptes(nr = 1)` (one atomic), the child's `set_ptes(nr = 1)`
/// (one store).
/// Linux: mm/memory.c copy_pte_range() → copy_present_ptes() (nr == 1).
pub(crate) fn account_small_run(
    src: &Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    n: u64,
    wrprotected: u64,
    batch: bool,
) {
    let (sh, dh) = (&src.pt.hw, &dst.pt.hw);
    sh.call_n(KCall::PtepGet, n);
    sh.add(HwEvent::PteLoad, n);
    sh.add(HwEvent::StructPageLine, n);
    if batch {
        sh.call_n(KCall::FolioPteBatch, n);
    } else {
        sh.rules.hit_n(Rule::ForkPtePerEntry, n as u32);
    }
    phys.count_small_dups(n);
    // The dup's line is the one vm_normal_page() read in the same pass:
    // the subset `struct_page_line_hot` (an L1 hit).
    // Linux: include/linux/rmap.h __folio_try_dup_anon_rmap().
    sh.add(HwEvent::StructPageLineHot, n);
    dst.rss_anon += n;
    if wrprotected > 0 {
        sh.rules
            .hit_n(Rule::ForkWrprotectParent, wrprotected as u32);
        sh.call_n(KCall::WrprotectPtes, wrprotected);
        sh.add(HwEvent::PteAtomicRmw, wrprotected);
    }
    dh.call_n(KCall::SetPtes, n);
    dh.add(HwEvent::PteStore, n);
}

/// What `n` passes of `change_pte_range()` over order-0 pages count on
/// every arch: per pass `ptep_get()`, the compound_head line (the subset
/// `mprotect_page_line`),
/// `modify_prot_start_ptes(nr = 1)` (`ptep_get_and_clear()`: an atomic
/// clear), `modify_prot_commit_ptes(nr = 1)` (`set_ptes()`: a store), the
/// loop body's own work (`mprotect_pass`), and
/// `exclusive_lines` PageAnonExclusive() reads (re-reads of the pass's
/// line: the subset `struct_page_line_hot`) of which `upgrades` made the
/// entry writable; then one `tlb_flush_pte_range()` over `flush` (the
/// first and last address that needed it).
/// Linux: mm/mprotect.c change_pte_range() (nr == 1).
pub(crate) fn account_small_change(
    hw: &HwSink,
    n: u64,
    exclusive_lines: u64,
    upgrades: u32,
    flush: Option<(u64, u64)>,
    tlb: &mut MmuGather,
) {
    hw.call_n(KCall::PtepGet, n);
    hw.add(HwEvent::PteLoad, n);
    hw.add(HwEvent::StructPageLine, n + exclusive_lines);
    // The pass's first read of the line (page_folio()), at mprotect's own
    // price; the PageAnonExclusive() read is of the same line (an order-0
    // folio is its own head page), a moment later: an L1 hit.
    // Linux: mm/mprotect.c change_pte_range() → vm_normal_folio(),
    // set_write_prot_commit_flush_ptes() → commit_anon_folio_batch().
    hw.add(HwEvent::MprotectPageLine, n);
    hw.add(HwEvent::StructPageLineHot, exclusive_lines);
    hw.call_n(KCall::ModifyProtStartPtes, n);
    hw.call_n(KCall::PtepGetAndClear, n);
    hw.add(HwEvent::PteAtomicClear, n);
    hw.call_n(KCall::ModifyProtCommitPtes, n);
    hw.call_n(KCall::SetPtes, n);
    hw.add(HwEvent::PteStore, n);
    // The loop body's own work, once per pass.
    hw.add(HwEvent::MprotectPass, n);
    hw.rules.hit_n(Rule::MprotectBatchWriteUpgrade, upgrades);
    if let Some((lo, hi)) = flush {
        tlb.flush_pte_range(lo, hi + PAGE_SIZE - lo);
    }
}

/// The stretch mprotect's order-0 loops (`sys/mprotect.rs`
/// `change_small_run()`, arm64's [`super::contpte_runs::change_small_run`])
/// may take in one step from entry `i` (at most `max` entries): `(len,
/// step)` when entries `i..i + len`, at least two, lie in one run of
/// present entries with equal bits over consecutive frames and those
/// frames are order-0 data pages of one exclusivity. `pfn_mask` and
/// `pfn_shift` place the frame field in a descriptor. No event: the
/// model's own look.
pub(crate) fn order0_stretch(
    t: &crate::core::arch::PteTable<'_>,
    phys: &PhysMem,
    pfn_mask: u64,
    pfn_shift: u32,
    i: usize,
    max: usize,
) -> Option<(usize, u64)> {
    let r = t.runs_in(i, max)?.next()?;
    let len = r.len as usize;
    if r.start as usize != i || len < 2 || r.step != 1 << pfn_shift {
        return None;
    }
    t.uniform_present(i, len, pfn_mask)?;
    let pfn = crate::core::addr::Pfn((t.raw(i) & pfn_mask) >> pfn_shift);
    let (_, frames) = phys.small_anon_exclusive_run(pfn, len as u64)?;
    (frames >= 2).then_some((frames as usize, r.step))
}

/// What mprotect's order-0 loop does to every entry whose attribute bits
/// are `old_bits` (entries of a run mostly differ in their frame only),
/// worked out once through the codec for the first such entry `old`: the
/// new bits without and with the write upgrade (`bits_of` strips what
/// the loop keeps per entry), whether the upgrade is tried
/// (MM_CP_TRY_CHANGE_WRITABLE and `maybe_change_pte_writable()`), and
/// `pte_needs_flush()` of each. Shared by the x86-64 loop
/// (`sys/mprotect.rs`) and the arm64 one ([`super::contpte_runs`]).
/// Linux: mm/mprotect.c change_pte_range() (nr == 1).
pub(crate) struct SmallChange {
    pub(crate) old_bits: u64,
    pub(crate) try_upgrade: bool,
    pub(crate) bits: [u64; 2],
    pub(crate) flush: [bool; 2],
}

impl SmallChange {
    pub(crate) fn of(
        arch: &dyn crate::core::arch::Arch,
        vma: &crate::core::vma::Vma,
        old: crate::core::arch::Leaf,
        old_bits: u64,
        prot: crate::core::arch::LeafFlags,
        try_writable: bool,
        bits_of: impl Fn(crate::core::arch::Leaf) -> u64,
    ) -> SmallChange {
        let ptent = crate::mm::protect::pte_modify(old, prot);
        let mut up = ptent;
        up.flags |= crate::core::arch::LeafFlags::WRITE;
        SmallChange {
            old_bits,
            try_upgrade: try_writable
                && !ptent.write()
                && crate::mm::protect::maybe_change_pte_writable(vma, ptent),
            bits: [bits_of(ptent), bits_of(up)],
            flush: [
                arch.pte_needs_flush(&old, &ptent),
                arch.pte_needs_flush(&old, &up),
            ],
        }
    }
}
