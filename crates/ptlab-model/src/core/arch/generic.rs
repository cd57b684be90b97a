//! The generic PTE hooks: what include/linux/pgtable.h does when an
//! architecture does not override a hook — one entry at a time. x86-64
//! uses all of them; arm64 overrides them in [`super::arm64::contpte`].
//!
//! Each hook counts the hardware events the kernel's version makes.

use super::{Arch, Entry, Leaf, LeafFlags, PteRef, PteTable};
use crate::core::hw::HwEvent;

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
        for k in 0..nr {
            t.store_raw(i + k, raw.advance(first, k as u64));
        }
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
    for j in i..i + nr {
        if let Entry::Leaf(l) = t.peek(j) {
            out.push((j, l));
            t.store(j, None);
        }
    }
    t.hw.add(HwEvent::PteAtomicClear, out.len() as u64);
    out
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
        // pte_wrprotect() on the descriptor.
        for j in i..i + nr {
            let e = t.raw(j);
            if raw.is_present(e) {
                t.store_raw(j, e & !raw.write);
            }
        }
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
    let cleared = arch.get_and_clear_full_ptes(t, i, nr);
    let mut first = cleared.first().expect("a present first entry").1;
    for (_, l) in &cleared[1..] {
        first.flags |= l.flags & (LeafFlags::YOUNG | LeafFlags::DIRTY);
    }
    first
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
