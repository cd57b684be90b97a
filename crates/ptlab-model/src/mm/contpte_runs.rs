//! arm64's per-segment loops: fork's and mprotect's runs of order-0 pages
//! and `folio_pte_batch()`'s scan, with the table borrowed once, counting
//! what arm64's contpte hooks count for each entry (docs/model.md,
//! "Per-segment loops on arm64").
//!
//! The entry-by-entry loops (sys/fork.rs `copy_pte_range()`,
//! sys/mprotect.rs `change_pte_range_batched()`) call arm64's hooks once
//! per order-0 page: `ptep_get()`, `wrprotect_ptes(nr = 1)`,
//! `get_and_clear_full_ptes(nr = 1)` and `set_ptes(nr = 1)`. On an entry
//! that is not `pte_valid_cont()` these do the generic thing plus:
//!
//! * `ptep_get()`: nothing more (`contpte_ptep_get()` gathers only for a
//!   valid CONT entry);
//! * each single-entry mutator: one `contpte_try_unfold()` check — the
//!   call and its `__ptep_get()` load — that unfolds nothing
//!   ([`contpte::count_try_unfold_checks`]); `ptep_set_wrprotect()` also
//!   makes the load of its cmpxchg loop;
//! * `set_ptes(nr = 1)` ends with `contpte_try_fold()`, which looks further
//!   only at the last entry of a 16-entry block
//!   ([`contpte::try_fold_after_set`], called here after each store: it
//!   gives up on an order-0 folio after `page_folio()` and
//!   `folio_nr_pages()`, counted there).
//!
//! A run stops before any entry that carries CONT (a folded block, or a
//! PROT_NONE block painted by a batch), so every entry it covers is one
//! of the above. `tests/segment_loops_prop.rs` checks the loops against
//! the entry-by-entry ones on random sequences (events, calls, rule hits,
//! observations).
//!
//! Linux: arch/arm64/include/asm/pgtable.h set_ptes(), ptep_set_wrprotect(),
//! ptep_get_and_clear(), wrprotect_ptes(), contpte_try_unfold(),
//! contpte_try_fold(); arch/arm64/mm/contpte.c contpte_ptep_get().

use crate::core::addr::{PAGE_SIZE, PTRS_PER_TABLE};
use crate::core::arch::arm64::contpte;
use crate::core::arch::arm64::CONT_PTES;
use crate::core::arch::{Entry, Leaf, LeafFlags, PteRef};
use crate::core::folio::PhysMem;
use crate::core::hw::HwEvent;
use crate::core::pgtable::{PageTables, Run};
use crate::core::tlb::MmuGather;
use crate::core::vma::{VmFlags, Vma};
use crate::mm::mm::Mm;
use crate::mm::protect::{maybe_change_pte_writable, pte_modify};

/// Whether the loops here stand for `pt`'s PTE hooks: arm64 with the
/// contpte layer on (with `contpte_off` arm64 keeps the entry-by-entry
/// loops).
pub(crate) fn applies(pt: &PageTables) -> bool {
    pt.arch().cont_ptes().is_some() && !pt.hw.features.contpte_off
}

/// fork: a run of present PTEs mapping order-0 anon pages from `addr` (at
/// most to `end`), each what one pass of `copy_pte_range()` does on arm64
/// — `ptep_get()`, the folio's struct page line, a one-entry batch (or,
/// before 6.9, one entry), `copy_present_ptes(nr = 1)`: the parent's
/// `wrprotect_ptes(nr = 1)` when writable, the child's `set_ptes(nr = 1)`.
/// Returns the entries copied (0: `addr` is not such an entry).
/// Linux: mm/memory.c copy_pte_range() → copy_present_ptes() (nr == 1).
pub(crate) fn copy_small_run(
    src: &mut Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    addr: u64,
    end: u64,
    c: &Vma,
    batch: bool,
) -> u64 {
    use crate::core::arch::arm64::fork_raw;
    let arch = src.pt.arch();
    let keep_uffd_wp = c.flags.contains(VmFlags::UFFD_WP);
    let (mut st, i0) = src.pt.pte_table(addr);
    let (mut dt, _) = dst.pt.pte_table(addr);
    let max = ((end - addr) / PAGE_SIZE) as usize;
    // The memmap side of each entry first (one pass over the run's
    // frames, stopping where an entry is not a present, non-special,
    // non-CONT entry of an order-0 anon page), then the tables' stores
    // (mm/copy_runs.rs, on the raw descriptors: `fork_raw`): the same
    // state as entry by entry, since the stores read no refcount or
    // mapcount (the fold try reads only a folio's extent).
    let bits = super::copy_runs::CopyBits {
        takes: fork_raw::plain_present,
        pfn: fork_raw::pfn,
        writable: fork_raw::writable,
        // wrprotect_ptes(nr == 1): contpte_try_unfold() (no CONT), then
        // __ptep_set_wrprotect().
        parent: fork_raw::parent,
        child: |e: u64| fork_raw::child(e, keep_uffd_wp),
        addr_mask: fork_raw::ADDR,
        frame_step: fork_raw::FRAME_STEP,
    };
    // set_ptes(nr == 1): contpte_try_unfold() of the none entry,
    // __set_ptes(), contpte_try_fold() (after each store).
    let (n, wrprotected) = super::copy_runs::copy_order0_entries(
        &mut st,
        &mut dt,
        phys,
        i0,
        max,
        &bits,
        |dt, i, phys| contpte::try_fold_after_set(arch, dt, i, phys),
    );
    let n = n as u64;
    if n == 0 {
        return 0;
    }
    super::small_runs::account_small_run(src, dst, phys, n, wrprotected, batch);
    // The contpte hooks' own: a contpte_try_unfold() check in each
    // wrprotect_ptes(nr = 1) and set_ptes(nr = 1), and
    // __ptep_set_wrprotect()'s cmpxchg-loop load.
    if wrprotected > 0 {
        contpte::count_try_unfold_checks(&src.pt.hw, wrprotected);
        src.pt.hw.add(HwEvent::PteLoad, wrprotected);
    }
    contpte::count_try_unfold_checks(&dst.pt.hw, n);
    n
}

/// mprotect (6.17+ batching, no MM_CP_PROT_NUMA): a run of present PTEs
/// mapping order-0 anon pages from `addr` (at most to `end`), each what
/// one pass of `change_pte_range()` does on arm64 with a one-entry batch
/// — `ptep_get()`, the compound_head line, `modify_prot_start_ptes(nr =
/// 1)` (`ptep_get_and_clear()`: a `contpte_try_unfold()` check and the
/// atomic clear), the write upgrade of an exclusive page,
/// `modify_prot_commit_ptes(nr = 1)` (`set_ptes(nr = 1)`: a check of the
/// now-none entry, the store, `contpte_try_fold()`) — with one
/// `tlb_flush_pte_range()` over the entries that need it (every one:
/// arm64's `pte_needs_flush()` is the generic stub). `prot` and
/// `try_writable` are the `ChangeProt`'s. Returns the entries changed.
/// Linux: mm/mprotect.c change_pte_range() (nr == 1); arch/arm64/mm/mmu.c
/// modify_prot_start_ptes(), modify_prot_commit_ptes().
#[allow(clippy::too_many_arguments)]
pub(crate) fn change_small_run(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    addr: u64,
    end: u64,
    prot: LeafFlags,
    try_writable: bool,
    tlb: &mut MmuGather,
) -> u64 {
    let arch = mm.pt.arch();
    let (mut t, i0) = mm.pt.pte_table(addr);
    let max = ((end - addr) / PAGE_SIZE) as usize;
    let (mut n, mut exclusive_lines, mut upgrades) = (0, 0u64, 0u32);
    let mut flush: Option<(u64, u64)> = None;
    while n < max {
        let i = i0 + n;
        let Entry::Leaf(old) = t.peek(i) else { break };
        if old.flags.intersects(LeafFlags::SPECIAL | LeafFlags::CONT) {
            break;
        }
        // folio_of() finding an order-0 folio and its PageAnonExclusive:
        // one memmap read.
        let Some(exclusive) = phys.small_anon_exclusive(old.pfn) else {
            break;
        };
        let ptent = pte_modify(old, prot);
        let mut committed = ptent;
        if try_writable && !ptent.write() && maybe_change_pte_writable(vma, ptent) {
            // commit_anon_folio_batch(): PageAnonExclusive() of the page.
            exclusive_lines += 1;
            if exclusive {
                upgrades += 1;
                committed.flags |= LeafFlags::WRITE;
            }
        }
        t.store(i, Some(committed));
        contpte::try_fold_after_set(arch, &mut t, i, phys);
        if arch.pte_needs_flush(&old, &committed) {
            let va = t.va(i);
            flush = Some(flush.map_or((va, va), |(lo, _)| (lo, va)));
        }
        n += 1;
    }
    let n = n as u64;
    // One contpte_try_unfold() check in ptep_get_and_clear(), one in
    // set_ptes().
    contpte::count_try_unfold_checks(&mm.pt.hw, 2 * n);
    super::small_runs::account_small_change(&mm.pt.hw, n, exclusive_lines, upgrades, flush, tlb);
    n
}

/// `folio_pte_batch()`'s scan on the table borrowed once, through the
/// arch's hooks as the entry-by-entry scan calls them: from entry
/// `first_nr` (the first entry's `pte_batch_hint()`) while `step(pte, nr)`
/// accepts the entry at offset `nr` from `va`, advancing by each entry's
/// `pte_batch_hint()` (arm64: the rest of a valid CONT block, whose
/// `ptep_get()` gathers young/dirty over the block). Returns `(nr,
/// scans)`, or `None` when the scan would leave `va`'s PTE table (the
/// caller keeps `max_nr` inside it; then it takes the walking scan).
/// Linux: mm/internal.h folio_pte_batch_flags(); arch/arm64/include/asm/pgtable.h
/// pte_batch_hint(), arch/arm64/mm/contpte.c contpte_ptep_get().
///
/// Whole-stretch step (`whole`: `ModelConfig::fork_runs`): from a
/// block-aligned entry, whole CONT blocks that lie in one stored run of
/// present entries a frame apart (equal bits, no carry) are alike to
/// every hook the scan calls: each block's `ptep_get()` gathers the same
/// young/dirty bits with the same loads and returns the leaf advanced by
/// the block's distance, which `step` accepts as it accepted the first
/// (it compares the frame with the batch's first advanced by the same
/// distance and the bits with the same wanted bits), and the hint is the
/// block. So the first block is scanned through the hooks and the other
/// blocks' calls and events are added in one step
/// ([`crate::core::hw::HwSink::add_since`]).
pub(crate) fn folio_pte_batch_scan(
    pt: &PageTables,
    va: u64,
    first_nr: u64,
    max_nr: u64,
    whole: bool,
    mut step: impl FnMut(&Leaf, u64) -> bool,
) -> Option<(u64, u64)> {
    let (entries, i0) = pt.pte_entries(va)?;
    if i0 as u64 + max_nr > PTRS_PER_TABLE as u64 {
        return None;
    }
    let arch = pt.arch();
    let view = PteRef {
        arch,
        entries,
        hw: &pt.hw,
        base: va & !(crate::core::addr::PMD_SIZE - 1),
    };
    let (mut nr, mut scans) = (first_nr, 0);
    while nr < max_nr {
        scans += 1;
        let i = i0 + nr as usize;
        let alike = if whole {
            alike_blocks(entries, i, i0 + max_nr as usize)
        } else {
            0
        };
        let before = (alike > 1).then(|| pt.hw.tally());
        let Entry::Leaf(l) = arch.ptep_get(&view, i) else {
            break;
        };
        if !step(&l, nr) {
            break;
        }
        let hint = arch.pte_batch_hint(i, &l) as u64;
        nr += hint;
        if let (Some(before), true) = (before, hint == CONT_PTES as u64) {
            let rest = alike as u64 - 1;
            pt.hw.add_since(&before, rest);
            nr += rest * CONT_PTES as u64;
            scans += rest;
        }
    }
    Some((nr.min(max_nr), scans))
}

/// How many whole CONT blocks from entry `i` (block-aligned) up to `end`
/// lie in one stored run of present entries a frame apart with no carry
/// out of the frame field (0 when `i` is not block-aligned or the table
/// is not so stored): [`folio_pte_batch_scan`]'s whole-stretch step.
fn alike_blocks(entries: crate::core::pgtable::Entries<'_>, i: usize, end: usize) -> usize {
    use crate::core::arch::arm64::fork_raw;
    if !i.is_multiple_of(CONT_PTES) {
        return 0;
    }
    let Some(r) = entries.run_at(i) else {
        return 0;
    };
    if r.kinds != Run::PRESENT || r.step != fork_raw::FRAME_STEP {
        return 0;
    }
    let blocks = (r.end().min(end) - i) / CONT_PTES;
    let span = (blocks * CONT_PTES) as u64;
    let no_carry = span > 0
        && (entries.raw(i) & fork_raw::ADDR)
            .checked_add(fork_raw::FRAME_STEP * (span - 1))
            .is_some_and(|last| last <= fork_raw::ADDR);
    if no_carry {
        blocks
    } else {
        0
    }
}
