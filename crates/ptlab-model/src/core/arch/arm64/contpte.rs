//! arm64's contiguous-PTE layer: the PTE hooks arm64 overrides, after
//! arch/arm64/mm/contpte.c and the inline wrappers in
//! arch/arm64/include/asm/pgtable.h.
//!
//! * `set_ptes(nr ≥ 2)` paints CONT on every 64 KiB block the call covers
//!   fully whose physical address is 64 KiB-aligned (`contpte_set_ptes`);
//! * a single-entry change to a folded block unfolds it first; unfolding
//!   rewrites all 16 entries with the young/dirty bits gathered over the
//!   block (`contpte_convert`);
//! * a single write to the last entry of a block tries to fold it
//!   (`contpte_try_fold`);
//! * batched clears and write-protects unfold only blocks covered partly at
//!   their ends (`contpte_try_unfold_partial`);
//! * `ptep_get` on a folded entry gathers young/dirty over the block
//!   (`contpte_ptep_get`).

use super::CONT_PTES;
use crate::core::addr::{Pfn, PAGE_SIZE};
use crate::core::arch::{
    clear_call, generic, Arch, ClearedPtes, Entry, FolioSpan, Leaf, LeafFlags, PteRef, PteTable,
};
use crate::core::hw::{HwEvent, HwSink, KCall};
use crate::core::pgtable::Run;
use crate::core::rules::rule;

const N: usize = CONT_PTES;

/// First entry of the block holding entry `i`.
fn block_start(i: usize) -> usize {
    i / N * N
}

/// `contpte_ptep_get()`: on a valid contiguous entry, the loads made walking
/// from the block start until both dirty and young were seen (v6.17+ early
/// exit; 16 at most), the result carrying the gathered bits. Only for
/// `pte_valid_cont()`: a PROT_NONE entry carrying CONT is read alone.
/// Linux: arch/arm64/include/asm/pgtable.h ptep_get(),
/// arch/arm64/mm/contpte.c contpte_ptep_get().
pub fn ptep_get(t: &PteRef<'_>, i: usize) -> Entry {
    let e = generic::ptep_get(t, i);
    let Entry::Leaf(mut l) = e else { return e };
    if !l.valid_cont() {
        return e;
    }
    let (seen, loads) = gather(t, i);
    t.hw.add(HwEvent::PteLoad, loads);
    l.flags |= seen;
    Entry::Leaf(l)
}

/// What `contpte_ptep_get()` gathers over the block of entry `i`: the
/// young and dirty bits it sees and the loads it makes walking from the
/// block start until both were seen (v6.17+ early exit; 16 at most).
/// Counts nothing.
fn gather(t: &PteRef<'_>, i: usize) -> (LeafFlags, u64) {
    // Only young and dirty are looked at (pte_young(), pte_dirty()).
    let flags_at = |j: usize| {
        let raw = t.entries.raw(j);
        if raw != 0 && super::Arm64.pte_present_raw(raw) {
            super::young_dirty_raw(raw)
        } else {
            LeafFlags::empty()
        }
    };
    let start = block_start(i);
    let mut seen = LeafFlags::empty();
    let mut loads = 0u64;
    // The outer loop stops at the first dirty or young entry; the inner
    // loop re-reads that entry and goes on until it sees the other bit.
    let mut j = start;
    while j < start + N {
        let f = flags_at(j);
        loads += 1;
        if f.contains(LeafFlags::DIRTY) {
            seen |= LeafFlags::DIRTY;
            while j < start + N {
                loads += 1;
                if flags_at(j).contains(LeafFlags::YOUNG) {
                    seen |= LeafFlags::YOUNG;
                    break;
                }
                j += 1;
            }
            break;
        }
        if f.contains(LeafFlags::YOUNG) {
            seen |= LeafFlags::YOUNG;
            j += 1;
            while j < start + N {
                loads += 1;
                if flags_at(j).contains(LeafFlags::DIRTY) {
                    seen |= LeafFlags::DIRTY;
                    break;
                }
                j += 1;
            }
            break;
        }
        j += 1;
    }
    (seen, loads)
}

/// `ptep_get()` (with its [`KCall::PtepGet`]) of the first entry of each
/// of `blocks` more blocks after the one of entry `i` (a block start),
/// counted without reading them, when those blocks and `i`'s hold entries
/// whose bits outside the frame are equal (one stored run): each read
/// gathers over its block as the read at `i` does, with the same loads.
/// The caller has read entry `i` through `ptep_get()` and found a valid
/// contiguous entry.
/// Linux: arch/arm64/include/asm/pgtable.h ptep_get(),
/// arch/arm64/mm/contpte.c contpte_ptep_get().
#[inline]
pub(crate) fn count_uniform_block_reads(t: &PteRef<'_>, i: usize, blocks: u64) {
    let (_, loads) = gather(t, i);
    t.hw.call_n(KCall::PtepGet, blocks);
    t.hw.add(HwEvent::PteLoad, (1 + loads) * blocks);
}

/// The loads [`gather`] makes over a block whose 16 entries are present
/// descriptors with the young and dirty bits of `raw` (one stored run of
/// equal bits): both bits, the first entry twice; dirty only, the first
/// entry and then all 16; young only or neither, all 16. Counts nothing.
pub(crate) fn uniform_gather_loads(raw: u64) -> u64 {
    let f = super::young_dirty_raw(raw);
    match (f.contains(LeafFlags::DIRTY), f.contains(LeafFlags::YOUNG)) {
        (true, true) => 2,
        (true, false) => 1 + N as u64,
        (false, _) => N as u64,
    }
}

/// `contpte_convert()` cost: 16 atomic swap-to-zero (`__ptep_get_and_clear`),
/// a 64 KiB range flush unless BBML2-noabort, 16 stores (`__set_ptes`).
fn count_convert(arch: &dyn Arch, t: &PteTable<'_>, i: usize, fold: bool) {
    t.hw.call(KCall::ContpteConvert);
    t.hw.one(if fold {
        HwEvent::ContFold
    } else {
        HwEvent::ContUnfold
    });
    t.hw.add(HwEvent::PteAtomicClear, N as u64);
    if !t.hw.features.bbml2_noabort {
        // __flush_tlb_range(&vma, start_addr, addr, PAGE_SIZE, true, 3)
        let start = t.va(block_start(i));
        arch.flush_tlb_range(t.hw, start, start + N as u64 * PAGE_SIZE, PAGE_SIZE);
    }
    t.hw.add(HwEvent::PteStore, N as u64);
}

/// Rewrite a folded block without the contiguous bit, every entry taking
/// the young/dirty bits gathered over the block.
/// Linux: contpte_convert() via __contpte_try_unfold().
fn unfold_block(arch: &dyn Arch, t: &mut PteTable<'_>, i: usize) {
    count_convert(arch, t, i, false);
    let start = block_start(i);
    let mut gathered = LeafFlags::empty();
    for j in start..start + N {
        if let Entry::Leaf(l) = t.peek(j) {
            gathered |= l.flags & (LeafFlags::YOUNG | LeafFlags::DIRTY);
        }
    }
    for j in start..start + N {
        if let Entry::Leaf(mut l) = t.peek(j) {
            l.flags.remove(LeafFlags::CONT);
            l.flags |= gathered;
            t.store(j, Some(l));
        }
    }
}

/// `contpte_try_unfold(mm, addr, ptep, __ptep_get(ptep))`: one load, and an
/// unfold when the entry is a valid contiguous one (`pte_valid_cont()`:
/// `set_ptes(nr > 1)` paints CONT on PROT_NONE entries too, but the layer
/// ignores them).
fn try_unfold(arch: &dyn Arch, t: &mut PteTable<'_>, i: usize) {
    count_try_unfold_checks(t.hw, 1);
    if matches!(t.peek(i), Entry::Leaf(l) if l.valid_cont()) {
        rule!(t.hw, ContpteUnfold);
        unfold_block(arch, t, i);
    }
}

/// The cost of `n` `contpte_try_unfold(mm, addr, ptep, __ptep_get(ptep))`
/// checks: the call and the `__ptep_get()` load each. On an entry that is
/// not `pte_valid_cont()` (none, PROT_NONE, or a valid entry without CONT)
/// this is all the check does; a per-segment loop over such entries counts
/// its checks here in one step. Linux: arch/arm64/include/asm/pgtable.h
/// contpte_try_unfold().
pub(crate) fn count_try_unfold_checks(hw: &HwSink, n: u64) {
    hw.call_n(KCall::ContpteTryUnfold, n);
    hw.add(HwEvent::PteLoad, n);
}

/// `contpte_try_unfold_partial()`: unfold blocks that entries
/// `i..i + nr` cover only partly at either end, counting the
/// `__ptep_get()` of each end checked.
pub fn unfold_partial(arch: &dyn Arch, t: &mut PteTable<'_>, i: usize, nr: usize) {
    if !i.is_multiple_of(N) || nr < N {
        try_unfold(arch, t, i);
    }
    if !(i + nr).is_multiple_of(N) {
        rule!(t.hw, ContpteUnfoldPartialEnd);
        try_unfold(arch, t, i + nr - 1);
    }
}

/// Fold the block holding entry `i` if all of its entries map one naturally
/// aligned 64 KiB part of a single folio with equal attributes. Called for
/// the last entry of a block written alone with a valid, non-special,
/// non-cont PTE whose PFN is the last of its 16 (the inline
/// `contpte_try_fold()` test). Counts: `page_folio()` and
/// `folio_nr_pages()` (2 struct-page lines), then one load per entry
/// compared until the first mismatch, then the convert.
/// Linux: arch/arm64/mm/contpte.c __contpte_try_fold().
fn try_fold(arch: &dyn Arch, t: &mut PteTable<'_>, i: usize, folios: &dyn FolioSpan) {
    let n = N as u64;
    let start = block_start(i);
    let Entry::Leaf(last) = t.peek(i) else {
        return;
    };
    // contpte_try_fold(): valign (checked by the caller) && palign &&
    // pte_valid() && !pte_cont() && !pte_special().
    if last
        .flags
        .intersects(LeafFlags::SPECIAL | LeafFlags::PROTNONE)
        || last.pfn.0 % n != n - 1
    {
        return;
    }
    t.hw.call(KCall::ContpteTryFold);
    t.hw.add(HwEvent::StructPageLine, 2);
    let first_pfn = last.pfn.0 - (n - 1);
    match folios.folio_span(last.pfn) {
        Some((head, nr)) if head <= first_pfn && last.pfn.0 < head + nr => {}
        _ => return,
    }
    let key = last.fold_key();
    let mut gathered = LeafFlags::empty();
    for (k, j) in (start..start + N).enumerate() {
        t.hw.one(HwEvent::PteLoad);
        match t.peek(j) {
            Entry::Leaf(l) if l.pfn.0 == first_pfn + k as u64 && l.fold_key() == key => {
                gathered |= l.flags & (LeafFlags::YOUNG | LeafFlags::DIRTY);
            }
            _ => return,
        }
    }
    rule!(t.hw, ContpteFold);
    count_convert(arch, t, i, true);
    for (k, j) in (start..start + N).enumerate() {
        let l = Leaf {
            pfn: Pfn(first_pfn + k as u64),
            flags: key | gathered | LeafFlags::CONT,
        };
        t.store(j, Some(l));
    }
}

/// `set_ptes()`: a single entry first unfolds a folded block it lands in
/// (one load for the check) and may fold its block when it is the block's
/// last; a batch paints CONT on fully covered, physically aligned blocks.
/// Linux: arch/arm64/include/asm/pgtable.h set_ptes(),
/// arch/arm64/mm/contpte.c contpte_set_ptes(), contpte_try_fold().
pub fn set_ptes(
    arch: &dyn Arch,
    t: &mut PteTable<'_>,
    i: usize,
    leaf: Leaf,
    nr: usize,
    folios: &dyn FolioSpan,
) {
    if nr == 1 {
        try_unfold(arch, t, i);
    }
    t.hw.add(HwEvent::PteStore, nr as u64);
    // The descriptor is encoded once; each entry takes its own PFN (and
    // CONT where painted) into it: `pte_next_pfn()`, `pte_mkcont()`.
    let mut base = leaf;
    base.flags.remove(LeafFlags::CONT);
    let raw0 = super::Arm64.encode_leaf(1, base) & !super::ADDR_MASK;
    let paint = nr > 1 && !base.flags.contains(LeafFlags::SPECIAL);
    let painted = |k: usize| {
        let j = i + k;
        let pfn = leaf.pfn.0 + k as u64;
        let block = block_start(j);
        let covered = block >= i && block + N <= i + nr;
        let pa_aligned = (pfn - (j - block) as u64).is_multiple_of(N as u64);
        paint && covered && pa_aligned
    };
    let raw_of = |k: usize, cont: bool| {
        let pfn = leaf.pfn.0 + k as u64;
        raw0 | ((pfn << 12) & super::ADDR_MASK) | if cont { super::CONT } else { 0 }
    };
    // How many entries are painted, block by block rather than entry by
    // entry (the same count as `(0..nr).filter(painted)`): the blocks
    // `i..i + nr` covers wholly, when the frames are aligned as the
    // entries are (`leaf.pfn ≡ i` modulo a block; consecutive blocks
    // keep that).
    let n_painted = if paint && (leaf.pfn.0 % N as u64) == (i % N) as u64 {
        let (first_block, end_block) = (i.div_ceil(N), (i + nr) / N);
        end_block.saturating_sub(first_block) * N
    } else {
        0
    };
    debug_assert_eq!(n_painted, (0..nr).filter(|&k| painted(k)).count());
    crate::core::rules::rule!(t.hw, ContptePaint, n_painted as u32);
    let end_pfn = leaf.pfn.0 + nr as u64;
    if (n_painted == 0 || n_painted == nr) && (end_pfn << 12) & !super::ADDR_MASK == 0 {
        // Every entry painted alike: one affine run (a table stored as
        // runs is rewritten as runs).
        t.write_affine(i, nr, raw_of(0, n_painted > 0), 1 << 12, Run::PRESENT);
    } else {
        for k in 0..nr {
            t.store_raw(i + k, raw_of(k, painted(k)));
        }
    }
    if nr == 1 {
        try_fold_after_set(arch, t, i, folios);
    }
}

/// The descriptor [`set_ptes`] writes at the first entry of a block it
/// paints contiguous, for `leaf` (its frame the block's first): the leaf
/// encoded without CONT, its frame in the address field, CONT set. The
/// block's other entries are this advanced a frame at a time.
pub(crate) fn painted_block_raw(leaf: Leaf) -> u64 {
    let mut base = leaf;
    base.flags.remove(LeafFlags::CONT);
    let raw0 = super::Arm64.encode_leaf(1, base) & !super::ADDR_MASK;
    raw0 | ((leaf.pfn.0 << 12) & super::ADDR_MASK) | super::CONT
}

/// The `contpte_try_fold()` that ends a single-entry `set_ptes()` (after
/// the store): only the last entry of a block is tried (`valign`); the
/// rest of the inline test and `__contpte_try_fold()` are [`try_fold`].
/// A per-segment loop that stores single entries itself calls this after
/// each store. Linux: arch/arm64/include/asm/pgtable.h set_ptes(),
/// contpte_try_fold().
#[inline]
pub(crate) fn try_fold_after_set(
    arch: &dyn Arch,
    t: &mut PteTable<'_>,
    i: usize,
    folios: &dyn FolioSpan,
) {
    if i % N == N - 1 {
        try_fold(arch, t, i, folios);
    }
}

/// A single-entry in-place change: a folded block is unfolded first and
/// stays unfolded. Linux: contpte_try_unfold() before
/// __ptep_set_wrprotect() / __ptep_set_access_flags().
pub fn ptep_modify(arch: &dyn Arch, t: &mut PteTable<'_>, i: usize, leaf: Leaf) {
    try_unfold(arch, t, i);
    generic::ptep_modify(t, i, leaf);
}

/// `wrprotect_ptes()`: one entry goes through `ptep_set_wrprotect()` (its
/// `__ptep_get()` for the unfold check, then the cmpxchg loop's load); a
/// batch unfolds only blocks covered partly at its ends, fully covered
/// blocks stay folded (the bit cleared in all 16 entries), one load and one
/// atomic RMW per entry. Linux: arch/arm64/mm/contpte.c
/// contpte_wrprotect_ptes(), __wrprotect_ptes().
pub fn wrprotect_ptes(arch: &dyn Arch, t: &mut PteTable<'_>, i: usize, nr: usize) {
    if nr == 1 {
        if let Entry::Leaf(mut l) = t.peek(i) {
            l.flags.remove(LeafFlags::WRITE);
            t.hw.one(HwEvent::PteLoad);
            ptep_modify(arch, t, i, l);
        }
        return;
    }
    unfold_partial(arch, t, i, nr);
    t.hw.add(HwEvent::PteLoad, nr as u64);
    t.hw.add(HwEvent::PteAtomicRmw, nr as u64);
    rule!(t.hw, ContpteWrprotectBatch);
    // pte_wrprotect() changes no address bit: a run of present entries is
    // rewritten as a run.
    let present = |raw: u64| super::Arm64.pte_present_raw(raw);
    t.map_present(i, nr, super::ADDR_MASK, present, super::pte_wrprotect_raw);
}

/// `get_and_clear_full_ptes()`: a single entry (`ptep_get_and_clear()`)
/// unfolds its block first; a batch unfolds only blocks covered partly at
/// either end. Linux: contpte_get_and_clear_full_ptes().
pub fn get_and_clear_full_ptes(
    arch: &dyn Arch,
    t: &mut PteTable<'_>,
    i: usize,
    nr: usize,
) -> ClearedPtes {
    if nr == 1 {
        try_unfold(arch, t, i);
    } else {
        unfold_partial(arch, t, i, nr);
        if let Some((first, step)) = t.uniform_present(i, nr, super::ADDR_MASK) {
            // One run of present entries a whole number of frames apart:
            // entry k is the first advanced by k steps (decoded once).
            let Entry::Leaf(l) = arch.decode(1, first) else {
                unreachable!("a present descriptor decodes as a leaf")
            };
            t.write_affine(i, nr, 0, 0, 0);
            t.hw.add(HwEvent::PteAtomicClear, nr as u64);
            return ClearedPtes::Run {
                i,
                nr,
                first: l,
                frames: step >> 12,
            };
        }
    }
    ClearedPtes::List(generic::get_and_clear_full_ptes(t, i, nr))
}

/// `ptep_get_and_clear()`: [`get_and_clear_full_ptes`] with `nr == 1`
/// (the `contpte_try_unfold()` check, then one atomic swap), returning the
/// old entry when present, without building a list.
/// Linux: arch/arm64/include/asm/pgtable.h ptep_get_and_clear().
pub fn ptep_get_and_clear(arch: &dyn Arch, t: &mut PteTable<'_>, i: usize) -> Option<Leaf> {
    try_unfold(arch, t, i);
    generic::ptep_get_and_clear_one(t, i)
}

/// `modify_prot_start_ptes()` = `get_and_clear_ptes()`: the
/// `get_and_clear_full_ptes()` above (the single-entry check or the
/// partial unfolds, one atomic swap per present entry), returning the first
/// present entry with the young/dirty bits of all of them gathered
/// (`__get_and_clear_full_ptes()`) — read from the descriptors, without
/// decoding each. Linux: arch/arm64/mm/mmu.c modify_prot_start_ptes(),
/// arch/arm64/include/asm/pgtable.h get_and_clear_ptes(),
/// __get_and_clear_full_ptes(); arch/arm64/mm/contpte.c
/// contpte_get_and_clear_full_ptes().
pub fn modify_prot_start_ptes(arch: &dyn Arch, t: &mut PteTable<'_>, i: usize, nr: usize) -> Leaf {
    t.hw.call(clear_call(nr));
    if nr == 1 {
        try_unfold(arch, t, i);
    } else {
        unfold_partial(arch, t, i, nr);
    }
    if let Some((raw, _)) = t.uniform_present(i, nr, super::ADDR_MASK) {
        // One run of present entries: each has the first one's young and
        // dirty bits; every entry is cleared.
        let Entry::Leaf(mut first) = t.peek(i) else {
            unreachable!("a present descriptor decodes as a leaf")
        };
        first.flags |= super::young_dirty_raw(raw);
        t.write_affine(i, nr, 0, 0, 0);
        t.hw.add(HwEvent::PteAtomicClear, nr as u64);
        return first;
    }
    let mut first: Option<Leaf> = None;
    let (mut gathered, mut cleared) = (LeafFlags::empty(), 0u64);
    for j in i..i + nr {
        let raw = t.raw(j);
        if raw == 0 || !super::Arm64.pte_present_raw(raw) {
            continue;
        }
        if first.is_none() {
            let Entry::Leaf(l) = t.peek(j) else {
                unreachable!("a present descriptor decodes as a leaf")
            };
            first = Some(l);
        }
        gathered |= super::young_dirty_raw(raw);
        cleared += 1;
    }
    if cleared == nr as u64 {
        // Every entry present: the range cleared as one write (a table
        // stored as runs stays runs).
        t.write_affine(i, nr, 0, 0, 0);
    } else {
        for j in i..i + nr {
            let raw = t.raw(j);
            if raw != 0 && super::Arm64.pte_present_raw(raw) {
                t.store_raw(j, 0);
            }
        }
    }
    t.hw.add(HwEvent::PteAtomicClear, cleared);
    let mut first = first.expect("a present first entry");
    first.flags |= gathered;
    first
}

/// `pte_batch_hint()`: the rest of a valid contiguous block, else 1.
/// Linux: arch/arm64/include/asm/pgtable.h pte_batch_hint().
pub fn pte_batch_hint(i: usize, leaf: &Leaf) -> usize {
    if leaf.valid_cont() {
        N - i % N
    } else {
        1
    }
}

/// `set_pte_at()` of a non-present entry: `set_ptes(nr = 1)` hands
/// `__ptep_get()` to `contpte_try_unfold()` (one load; it never unfolds, the
/// old entry being none, and the `contpte_try_fold()` that follows needs a
/// valid entry and loads nothing), then one store.
/// Linux: arch/arm64/include/asm/pgtable.h set_ptes().
pub fn set_pte_at_nonpresent(t: &mut PteTable<'_>, i: usize, raw: u64) {
    t.hw.one(HwEvent::PteLoad);
    generic::set_pte_at_nonpresent(t, i, raw);
}

/// `ptep_get_and_clear()` of a non-present entry: the
/// `contpte_try_unfold()` check's load, then one atomic swap (SWP).
/// Linux: arch/arm64/include/asm/pgtable.h ptep_get_and_clear() /
/// get_and_clear_full_ptes(nr = 1).
pub fn ptep_get_and_clear_nonpresent(t: &mut PteTable<'_>, i: usize) {
    t.hw.one(HwEvent::PteLoad);
    generic::ptep_get_and_clear_nonpresent(t, i);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::addr::PTRS_PER_TABLE;
    use crate::core::arch::Arm64;
    use crate::core::hw::{HwFeatures, HwSink};

    /// No folio anywhere (the fold test gives up at page_folio()).
    struct NoFolios;
    impl FolioSpan for NoFolios {
        fn folio_span(&self, _: Pfn) -> Option<(u64, u64)> {
            None
        }
    }

    /// A table around a block boundary: random leaves (young, dirty,
    /// write, PROT_NONE), whole blocks painted by set_ptes(nr = 16), none
    /// entries and swap entries, from a small xorshift generator.
    fn table(seed: u64) -> ([u64; PTRS_PER_TABLE], u16) {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut e = [0u64; PTRS_PER_TABLE];
        let mut used = 0u16;
        let hw = HwSink::new(HwFeatures::default());
        let mut spare = None;
        let mut t = PteTable::over_dense(&Arm64, &mut e, &mut used, &mut spare, &hw, 0);
        for b in 0..4 {
            let r = rnd();
            let mut flags = LeafFlags::empty();
            for (bit, f) in [
                LeafFlags::YOUNG,
                LeafFlags::DIRTY,
                LeafFlags::WRITE,
                LeafFlags::PROTNONE,
            ]
            .into_iter()
            .enumerate()
            {
                if r >> bit & 1 != 0 {
                    flags |= f;
                }
            }
            let leaf = Leaf {
                pfn: Pfn(0x1000 + 16 * b as u64),
                flags,
            };
            if r >> 8 & 1 != 0 {
                // A folded (painted) block.
                set_ptes(&Arm64, &mut t, 16 * b, leaf, N, &NoFolios);
            } else {
                for k in 0..N {
                    let r = rnd();
                    let j = 16 * b + k;
                    match r % 8 {
                        0 => {}
                        1 => t.store_raw(
                            j,
                            Arm64.encode_swap(crate::core::arch::SwapPte {
                                ty: 1,
                                offset: j as u64 + 1,
                                exclusive: false,
                                soft_dirty: false,
                                uffd_wp: false,
                            }),
                        ),
                        _ => {
                            let mut l = leaf;
                            l.pfn = leaf.pfn.add(k as u64);
                            l.flags.set(LeafFlags::YOUNG, r >> 4 & 1 != 0);
                            l.flags.set(LeafFlags::DIRTY, r >> 5 & 1 != 0);
                            t.store(j, Some(l));
                        }
                    }
                }
            }
        }
        (e, used)
    }

    /// `uniform_gather_loads()` against `gather()` over a block painted by
    /// `set_ptes(nr = 16)` with every combination of young, dirty and
    /// write (the hardware and the software dirty bit).
    #[test]
    fn uniform_gather_loads_are_the_gathers() {
        for bits in 0..8u32 {
            let mut flags = LeafFlags::empty();
            flags.set(LeafFlags::YOUNG, bits & 1 != 0);
            flags.set(LeafFlags::DIRTY, bits & 2 != 0);
            flags.set(LeafFlags::WRITE, bits & 4 != 0);
            let (mut e, mut used) = ([0u64; PTRS_PER_TABLE], 0u16);
            let hw = HwSink::new(HwFeatures::default());
            let mut spare = None;
            let mut t = PteTable::over_dense(&Arm64, &mut e, &mut used, &mut spare, &hw, 0);
            let leaf = Leaf {
                pfn: Pfn(0x2000),
                flags,
            };
            set_ptes(&Arm64, &mut t, 16, leaf, N, &NoFolios);
            let raw = t.raw(16);
            assert_ne!(raw & super::super::CONT, 0, "painted, {flags:?}");
            for i in 16..32 {
                let (_, loads) = gather(&t.as_ref(), i);
                assert_eq!(uniform_gather_loads(raw), loads, "{flags:?} at {i}");
            }
        }
    }

    /// arm64's modify_prot_start_ptes() (reading young/dirty from the
    /// descriptors) against the generic one over arm64's
    /// get_and_clear_full_ptes() (decoding every cleared entry): the same
    /// result, table, events, calls and rule hits.
    #[test]
    fn modify_prot_start_equals_the_generic_path() {
        let mut compared = 0;
        for seed in 0..400u64 {
            let (entries, used) = table(seed);
            let i = (seed as usize * 7) % 48;
            let nr = 1 + (seed as usize * 13) % (64 - i);
            let present = |e: &[u64; PTRS_PER_TABLE]| Arm64.pte_present_raw(e[i]) && e[i] != 0;
            if !present(&entries) {
                continue;
            }
            let run = |fast: bool| {
                let (mut e, mut u) = (entries, used);
                let hw = HwSink::new(HwFeatures::default());
                let mut spare = None;
                let mut t =
                    PteTable::over_dense(&Arm64, &mut e, &mut u, &mut spare, &hw, 0x7f00_0000_0000);
                let l = if fast {
                    modify_prot_start_ptes(&Arm64, &mut t, i, nr)
                } else {
                    generic::modify_prot_start_ptes(&Arm64, &mut t, i, nr)
                };
                (l, e, u, hw.snapshot(), hw.rules.coverage())
            };
            let (a, b) = (run(true), run(false));
            assert_eq!(a.0, b.0, "seed {seed}");
            assert_eq!(a.1, b.1, "seed {seed}");
            assert_eq!(a.2, b.2, "seed {seed}");
            assert_eq!(a.3, b.3, "seed {seed}");
            assert_eq!(a.4, b.4, "seed {seed}");
            compared += 1;
        }
        assert!(compared > 100, "{compared}");
    }

    /// `ptep_get_and_clear()` (no list built) against
    /// `get_and_clear_full_ptes(nr = 1)`, at every index of random tables
    /// (none, swap, present, folded blocks): the same old entry, table,
    /// events, calls and rule hits — on arm64 with the contpte layer on and
    /// off, and on x86-64 (the trait's default) over x86 encodings.
    #[test]
    fn ptep_get_and_clear_equals_a_one_entry_batch() {
        use crate::core::arch::X86_64;
        let mut present = 0;
        for seed in 0..40u64 {
            let (arm, arm_used) = table(seed);
            // The same leaves in x86's encoding (swap entries kept as swap).
            let (mut x86, mut x86_used) = ([0u64; PTRS_PER_TABLE], 0u16);
            {
                let hw = HwSink::new(HwFeatures::default());
                let mut spare = None;
                let mut t =
                    PteTable::over_dense(&X86_64, &mut x86, &mut x86_used, &mut spare, &hw, 0);
                for (j, &raw) in arm.iter().enumerate() {
                    match Arm64.decode(1, raw) {
                        Entry::Leaf(mut l) => {
                            l.flags.remove(LeafFlags::CONT);
                            t.store(j, Some(l));
                        }
                        Entry::Swap(sw) => t.store_raw(j, X86_64.encode_swap(sw)),
                        _ => {}
                    }
                }
            }
            for i in 0..64 {
                let cases: [(&dyn Arch, &[u64; PTRS_PER_TABLE], u16, bool); 3] = [
                    (&Arm64, &arm, arm_used, false),
                    (&Arm64, &arm, arm_used, true),
                    (&X86_64, &x86, x86_used, false),
                ];
                for (arch, entries, used, contpte_off) in cases {
                    let run = |one: bool| {
                        let (mut e, mut u) = (*entries, used);
                        let hw = HwSink::new(HwFeatures {
                            contpte_off,
                            ..HwFeatures::default()
                        });
                        let mut spare = None;
                        let mut t = PteTable::over_dense(
                            arch,
                            &mut e,
                            &mut u,
                            &mut spare,
                            &hw,
                            0x7f00_0000_0000,
                        );
                        let old = if one {
                            arch.ptep_get_and_clear(&mut t, i)
                        } else {
                            arch.get_and_clear_full_ptes(&mut t, i, 1)
                                .pop()
                                .map(|(_, l)| l)
                        };
                        (old, e, u, hw.snapshot(), hw.rules.coverage())
                    };
                    let (a, b) = (run(true), run(false));
                    let what = format!(
                        "seed {seed} index {i} {} contpte_off {contpte_off}",
                        arch.kind().name()
                    );
                    assert_eq!(a.0, b.0, "{what}");
                    assert_eq!(a.1, b.1, "{what}");
                    assert_eq!(a.2, b.2, "{what}");
                    assert_eq!(a.3, b.3, "{what}");
                    assert_eq!(a.4, b.4, "{what}");
                    present += usize::from(a.0.is_some());
                }
            }
        }
        assert!(present > 1000, "{present}");
    }
}
