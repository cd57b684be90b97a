//! The generic PTE hooks: what include/linux/pgtable.h does when an
//! architecture does not override a hook — one entry at a time. x86-64
//! uses all of them; arm64 overrides them in [`super::arm64::contpte`].
//!
//! Each hook counts the hardware events the kernel's version makes.

use super::{Arch, Entry, Leaf, LeafFlags, PteRef, PteTable, RawPte};
use crate::core::hw::HwEvent;
use crate::core::pgtable::Run;

/// `ptep_get()`: one load. Linux: include/linux/pgtable.h ptep_get().
pub fn ptep_get(t: &PteRef<'_>, i: usize) -> Entry {
    t.hw.one(HwEvent::PteLoad);
    t.peek(i)
}

/// `set_ptes()`: one store per entry, the PFN advancing by one page each.
/// Linux: include/linux/pgtable.h set_ptes() (set_pte() + pte_next_pfn()).
pub fn set_ptes(t: &mut PteTable<'_>, i: usize, leaf: Leaf, nr: usize) {
    t.hw.add(HwEvent::PteStore, nr as u64);
    if let Some(raw) = t.arch.raw_pte() {
        // pte_next_pfn(): the first descriptor advanced a frame at a time.
        let mut l = leaf;
        l.flags.remove(LeafFlags::CONT);
        let first = t.arch.encode_leaf(1, l);
        // One affine run: a table stored as runs is rewritten as runs.
        t.write_affine(i, nr, first, raw.advance(0, 1), Run::PRESENT);
        return;
    }
    for k in 0..nr {
        let mut l = leaf;
        l.pfn = leaf.pfn.add(k as u64);
        l.flags.remove(LeafFlags::CONT);
        t.store(i + k, Some(l));
    }
}

/// `get_and_clear_full_ptes()`: a `ptep_get_and_clear_full()` loop, one
/// atomic exchange per present entry. Linux: include/linux/pgtable.h
/// get_and_clear_full_ptes().
pub fn get_and_clear_full_ptes(t: &mut PteTable<'_>, i: usize, nr: usize) -> Vec<(usize, Leaf)> {
    let mut out = Vec::new();
    let mut nonpresent = false;
    for j in i..i + nr {
        match t.peek(j) {
            Entry::Leaf(l) => out.push((j, l)),
            Entry::None => {}
            _ => nonpresent = true,
        }
    }
    if nonpresent {
        for &(j, _) in &out {
            t.store(j, None);
        }
    } else {
        // Only present and none entries: the range cleared as one write
        // (a table stored as runs stays runs).
        t.write_affine(i, nr, 0, 0, 0);
    }
    t.hw.add(HwEvent::PteAtomicClear, out.len() as u64);
    out
}

/// `ptep_get_and_clear()` of one entry: [`get_and_clear_full_ptes`] with
/// `nr == 1` (the same store and count), without building a list — the
/// old entry when it was present (a none entry is written as none, a
/// non-present one is left as it is, as there).
/// Linux: arch/x86/include/asm/pgtable.h ptep_get_and_clear().
pub fn ptep_get_and_clear_one(t: &mut PteTable<'_>, i: usize) -> Option<Leaf> {
    match t.peek(i) {
        Entry::Leaf(l) => {
            t.write_affine(i, 1, 0, 0, 0);
            t.hw.one(HwEvent::PteAtomicClear);
            Some(l)
        }
        Entry::None => {
            t.write_affine(i, 1, 0, 0, 0);
            None
        }
        _ => None,
    }
}

/// A single-entry in-place change (`ptep_set_wrprotect()`: a locked bit
/// op; `ptep_set_access_flags()`): one atomic read-modify-write.
/// Linux: arch/x86/include/asm/pgtable.h ptep_set_wrprotect() (clear_bit).
pub fn ptep_modify(t: &mut PteTable<'_>, i: usize, leaf: Leaf) {
    t.hw.one(HwEvent::PteAtomicRmw);
    let mut l = leaf;
    l.flags.remove(LeafFlags::CONT);
    t.store(i, Some(l));
}

/// `wrprotect_ptes()`: a `ptep_set_wrprotect()` loop.
/// Linux: include/linux/pgtable.h wrprotect_ptes().
pub fn wrprotect_ptes(t: &mut PteTable<'_>, i: usize, nr: usize) {
    if nr == 1 {
        if let Entry::Leaf(mut l) = t.peek(i) {
            l.flags.remove(LeafFlags::WRITE);
            ptep_modify(t, i, l);
        }
        return;
    }
    t.hw.add(HwEvent::PteAtomicRmw, nr as u64);
    clear_write(t, i, nr);
}

/// Clear the write bit of every present entry in `i..i + nr` (uncounted;
/// the callers count the kernel's instructions).
pub(crate) fn clear_write(t: &mut PteTable<'_>, i: usize, nr: usize) {
    if let Some(raw) = t.arch.raw_pte() {
        // pte_wrprotect() on the descriptor (a run of present entries
        // rewritten as a run).
        let (mask, write) = (raw.pfn_mask, raw.write);
        t.map_present(i, nr, mask, |e| raw.is_present(e), |e| e & !write);
        return;
    }
    for j in i..i + nr {
        if let Entry::Leaf(mut l) = t.peek(j) {
            l.flags.remove(LeafFlags::WRITE);
            t.store(j, Some(l));
        }
    }
}

/// `modify_prot_start_ptes()`: clear the batch through the arch's
/// `get_and_clear_full_ptes()` and gather young/dirty into the first entry
/// (generic: a `ptep_modify_prot_start()` loop gathering the same bits;
/// arm64: `get_and_clear_ptes()`, which unfolds only partly covered
/// blocks). Linux: include/linux/pgtable.h, arch/arm64/mm/mmu.c
/// modify_prot_start_ptes().
pub fn modify_prot_start_ptes<A: Arch + ?Sized>(
    arch: &A,
    t: &mut PteTable<'_>,
    i: usize,
    nr: usize,
) -> Leaf {
    if let (true, Some(raw)) = (arch.generic_pte_hooks(), arch.raw_pte()) {
        if let Some(first) = modify_prot_start_raw(t, raw, i, nr) {
            return first;
        }
    }
    let cleared = arch.get_and_clear_full_ptes(t, i, nr);
    let mut first = cleared.first().expect("a present first entry").1;
    for (_, l) in &cleared[1..] {
        first.flags |= l.flags & (LeafFlags::YOUNG | LeafFlags::DIRTY);
    }
    first
}

/// [`modify_prot_start_ptes`] on raw descriptors, for an arch whose
/// `get_and_clear_full_ptes()` is the generic one: the same call, one
/// atomic clear per present entry, young/dirty gathered from the
/// descriptors (the first one decoded only), the range cleared as one
/// write (a table of runs stays runs). `None`, touching nothing, when the
/// range holds a swap entry or marker (the entry-by-entry path keeps it).
fn modify_prot_start_raw(t: &mut PteTable<'_>, raw: &RawPte, i: usize, nr: usize) -> Option<Leaf> {
    let (mut first, mut gathered, mut present) = (None, 0u64, 0u64);
    let uniform = t.uniform_present(i, nr, raw.pfn_mask);
    if let Some((e, _)) = uniform {
        // One run of present entries: the first one's bits are everyone's.
        (first, gathered, present) = (Some(e), e & (raw.young | raw.dirty), nr as u64);
    }
    for j in (i..i + nr).take(if uniform.is_some() { 0 } else { nr }) {
        let e = t.raw(j);
        if e == 0 {
            continue;
        }
        if !raw.is_present(e) {
            return None;
        }
        first.get_or_insert(e);
        gathered |= e & (raw.young | raw.dirty);
        present += 1;
    }
    let Entry::Leaf(mut first) = t.arch.decode(1, first?) else {
        return None;
    };
    t.hw.call(super::clear_call(nr));
    t.hw.add(HwEvent::PteAtomicClear, present);
    t.write_affine(i, nr, 0, 0, 0);
    if gathered & raw.young != 0 {
        first.flags |= LeafFlags::YOUNG;
    }
    if gathered & raw.dirty != 0 {
        first.flags |= LeafFlags::DIRTY;
    }
    Some(first)
}

/// `set_pte_at()` of a non-present entry: one store. Linux: x86 set_pte().
pub fn set_pte_at_nonpresent(t: &mut PteTable<'_>, i: usize, raw: u64) {
    t.hw.one(HwEvent::PteStore);
    t.store_raw(i, raw);
}

/// `ptep_get_and_clear()` of a non-present entry: one atomic exchange (x86
/// XCHG). Linux: x86 native_ptep_get_and_clear().
pub fn ptep_get_and_clear_nonpresent(t: &mut PteTable<'_>, i: usize) {
    t.hw.one(HwEvent::PteAtomicClear);
    t.store_raw(i, 0);
}
