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
use crate::core::arch::arm64::fork_raw;
use crate::core::arch::arm64::CONT_PTES;
use crate::core::arch::{Entry, Leaf, LeafFlags, PteRef};
use crate::core::folio::PhysMem;
use crate::core::hw::HwEvent;
use crate::core::pgtable::{PageTables, Run};
use crate::core::tlb::MmuGather;
use crate::core::vma::{VmFlags, Vma};
use crate::mm::mm::Mm;

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
/// `try_writable` are the `ChangeProt`'s.
///
/// The entries are read as raw descriptors (`fork_raw`): what an entry's
/// attribute bits become is worked out through the codec once per
/// distinct old bits and reused (the entries of a run differ in their
/// frame only). With `stretch` (`ModelConfig::stretch_steps`), a stretch
/// stored as one run of equal bits over consecutive order-0 frames of one
/// exclusivity (`small_runs::order0_stretch`) is written as one run: every
/// entry of it takes the same pass (an order-0 PTE never carries CONT, so
/// no entry unfolds anything), and `contpte_try_fold()` after a block's
/// last entry looks further only where that entry's frame is a block's
/// last too (`pfn % 16 == 15`), which for consecutive frames holds at
/// every block end of the stretch or at none; there it gives up at the
/// order-0 folio, and is called as entry by entry.
/// Returns the entries changed and the stretches taken.
/// Linux: mm/mprotect.c change_pte_range() (nr == 1); arch/arm64/mm/mmu.c
/// modify_prot_start_ptes(), modify_prot_commit_ptes();
/// arch/arm64/include/asm/pgtable.h contpte_try_fold().
#[allow(clippy::too_many_arguments)]
pub(crate) fn change_small_run(
    mm: &mut Mm,
    phys: &PhysMem,
    vma: &Vma,
    addr: u64,
    end: u64,
    prot: LeafFlags,
    try_writable: bool,
    stretch: bool,
    tlb: &mut MmuGather,
) -> (u64, u64) {
    use crate::core::arch::arm64::fork_raw;
    let arch = mm.pt.arch();
    let (mut t, i0) = mm.pt.pte_table(addr);
    let max = ((end - addr) / PAGE_SIZE) as usize;
    let (mut n, mut exclusive_lines, mut upgrades, mut steps) = (0, 0u64, 0u32, 0u64);
    let mut flush: Option<(u64, u64)> = None;
    let mut memo: Option<super::small_runs::SmallChange> = None;
    let n_cont = crate::core::arch::arm64::CONT_PTES;
    while n < max {
        let i = i0 + n;
        let e = t.raw(i);
        if e == 0 || !fork_raw::plain_present(e) {
            break;
        }
        let run = match stretch {
            true => {
                let shift = fork_raw::FRAME_STEP.trailing_zeros();
                super::small_runs::order0_stretch(&t, phys, fork_raw::ADDR, shift, i, max - n)
            }
            false => None,
        };
        // folio_of() finding an order-0 folio and its PageAnonExclusive:
        // one memmap read.
        let Some(exclusive) = phys.small_anon_exclusive(fork_raw::pfn(e)) else {
            break;
        };
        let old_bits = e & !fork_raw::ADDR;
        if memo.as_ref().is_none_or(|c| c.old_bits != old_bits) {
            let Entry::Leaf(old) = t.peek(i) else { break };
            let bits_of = |l: Leaf| arch.encode_leaf(1, l) & !fork_raw::ADDR;
            memo = Some(super::small_runs::SmallChange::of(
                arch,
                vma,
                old,
                old_bits,
                prot,
                try_writable,
                bits_of,
            ));
        }
        let c = memo.as_ref().expect("set above");
        let len = run.map_or(1, |(len, _)| len);
        let m = len as u64;
        let mut k = 0;
        if c.try_upgrade {
            // commit_anon_folio_batch(): PageAnonExclusive() of the page.
            exclusive_lines += m;
            if exclusive {
                upgrades += len as u32;
                k = 1;
            }
        }
        let first = (e & fork_raw::ADDR) | c.bits[k];
        let do_flush = c.flush[k];
        if len == 1 {
            t.store_raw(i, first);
            contpte::try_fold_after_set(arch, &mut t, i, phys);
        } else {
            t.write_affine(i, len, first, fork_raw::FRAME_STEP, Run::PRESENT);
            // The fold tries after each block's last entry: the frame of
            // entry j is pfn + (j - i), a block's last at every block end
            // when pfn ≡ i (mod 16), at none otherwise.
            let pfn = fork_raw::pfn(e).0;
            if (pfn % n_cont as u64) == (i % n_cont) as u64 {
                let mut j = i + (n_cont - 1 - i % n_cont);
                while j < i + len {
                    contpte::try_fold_after_set(arch, &mut t, j, phys);
                    j += n_cont;
                }
            }
            steps += 1;
        }
        if do_flush {
            let (va, last) = (t.va(i), t.va(i + len - 1));
            flush = Some(flush.map_or((va, last), |(lo, _)| (lo, last)));
        }
        n += len;
    }
    let n = n as u64;
    // One contpte_try_unfold() check in ptep_get_and_clear(), one in
    // set_ptes().
    contpte::count_try_unfold_checks(&mm.pt.hw, 2 * n);
    super::small_runs::account_small_change(&mm.pt.hw, n, exclusive_lines, upgrades, flush, tlb);
    (n, steps)
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
/// present entries a frame apart read alike through every hook the scan
/// calls (each block's `ptep_get()` gathers the same young/dirty bits with
/// the same loads and returns the leaf advanced by the block's distance;
/// the hint is the block), so `step` sees each block's entry without a
/// decode and the blocks' reads are counted together
/// (`contpte::count_uniform_block_reads()`).
#[inline]
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
    let n = CONT_PTES;
    let (mut nr, mut scans) = (first_nr, 0);
    while nr < max_nr {
        scans += 1;
        let i = i0 + nr as usize;
        let Entry::Leaf(l) = arch.ptep_get(&view, i) else {
            break;
        };
        if !step(&l, nr) {
            break;
        }
        let hint = arch.pte_batch_hint(i, &l) as u64;
        // A valid CONT block start inside a stored run of present entries
        // a frame apart: the whole blocks after it that the run holds and
        // the scan reaches (it reads a block starting before `max_nr`)
        // read alike — entry `k` blocks on is this one `16 × k` frames on
        // with the same gathered bits — so they are counted together and
        // `step` sees each block's entry without a decode.
        if whole && hint == n as u64 && l.valid_cont() {
            let blocks = entries.run_at(i).and_then(|r| {
                let ok = r.kinds == Run::PRESENT && r.step == fork_raw::FRAME_STEP;
                let whole = ((r.end() - i) / n) as u64;
                let reached = (max_nr - nr).div_ceil(n as u64);
                ok.then_some(whole.min(reached))
            });
            if let Some(blocks) = blocks.filter(|&b| b >= 2) {
                let step_n = n as u64;
                let (mut read, mut stopped) = (0, None);
                for b in 1..blocks {
                    read += 1;
                    let next = Leaf {
                        pfn: crate::core::addr::Pfn(l.pfn.0 + b * step_n),
                        flags: l.flags,
                    };
                    if !step(&next, nr + b * step_n) {
                        stopped = Some(b);
                        break;
                    }
                }
                contpte::count_uniform_block_reads(&view, i, read);
                scans += read;
                if let Some(b) = stopped {
                    nr += b * step_n;
                    break;
                }
                nr += blocks * step_n;
                continue;
            }
        }
        nr += hint;
    }
    Some((nr.min(max_nr), scans))
}
