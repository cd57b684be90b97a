//! Moving page tables for mremap(): whole PUD and PMD tables, PMD-mapped
//! THPs, and PTEs (one at a time, or in folio batches).
//!
//! Linux: mm/mremap.c move_page_tables(), try_realign_addr(),
//! can_align_down(), get_extent(), move_normal_pud(), move_normal_pmd(),
//! move_ptes(), mremap_folio_pte_batch(); mm/huge_memory.c move_huge_pmd().
//! Rule tags (§9.x below) label the rules as stated beside them; the
//! kernel function each one cites is the authority.
//!
//! Two seed-change switches select the algorithm ([`Before`]):
//!
//! * `MREMAP_TABLE_MOVE` (before 4.20): no whole-table moves and no
//!   realignment, so every PTE of every PMD slot is moved by `move_ptes()`.
//! * `MREMAP_PTE_BATCH` (before 6.17): `move_ptes()` moves one PTE at a time
//!   ([`move_ptes_per_pte`]) instead of one folio batch at a time
//!   ([`move_ptes_batched`]).
//!
//! Each path is one function, so a later issue can count the hardware
//! events of each.
//!
//! Not modelled: soft-dirty marking (CONFIG_MEM_SOFT_DIRTY is off on the
//! target machines, §12.1), non-present PTEs (swap, migration, poison and
//! guard markers: the model has none yet) and MMU notifiers (no observable
//! effect). The rmap locks and TLB flushes are counted as hardware events
//! only ([`rmap_locks`], `PageTables::flush_tlb_range()`).

use crate::core::addr::{PAGE_SIZE, PMD_SIZE, PTRS_PER_TABLE, PUD_SIZE};
use crate::core::arch::arm64::{contpte, CONT_PTES};
use crate::core::arch::{ClearedPtes, Entry, Leaf, LeafFlags, RawPte};
use crate::core::folio::PhysMem;
use crate::core::hw::{HwEvent, KCall};
use crate::core::pgtable::{index, PageTables, PmdSlot, Run};
use crate::core::rules::rule;
use crate::core::vma::Vma;
use crate::mm::batch::{folio_pte_batch, Before, Fpb};
use crate::mm::mm::Mm;
use crate::mm::zap::split_huge_pmd;

/// One move_page_tables() call: move `len` bytes of mappings from
/// `old_addr` (in VMA `old`) to `new_addr` (in VMA `new`).
/// Linux: struct pagetable_move_control.
#[derive(Clone, Debug)]
pub struct PageTableMove {
    pub old: Vma,
    pub new: Vma,
    pub old_addr: u64,
    pub new_addr: u64,
    pub len: u64,
    /// The model's switch `ModelConfig::stretch_steps` (not the kernel's):
    /// a stretch of whole contiguous blocks of one folio run moves in one
    /// step ([`move_cont_stretch`]); off, block by block.
    pub stretch: bool,
    /// The model's switch `ModelConfig::move_first_folded` (with
    /// `stretch`): such a stretch takes its first block too, the block's
    /// pass counted as written out ([`move_cont_blocks_folded`]); off, the
    /// first block goes through the general path as the template.
    pub fold_first: bool,
    /// The model's switch `ModelConfig::move_tables_known`: where both PMD
    /// slots of a step already hold a PTE table, the walk's answers that
    /// follow from that (the source's PUD entry a table, the destination's
    /// tables all there) are not asked again ([`move_page_tables`]).
    pub tables_known: bool,
    /// The model's switch `ModelConfig::move_lone_run`: a move whose source
    /// is the only run of its PTE table, to a disjoint range of the same
    /// table, rewrites the run in place ([`move_lone_run`]).
    pub lone_run: bool,
    /// The model's switch `ModelConfig::move_cont_lone` (with `lone_run`
    /// and `fold_first`): on arm64 an extent that is one stretch of whole
    /// contiguous blocks, the only run of its PTE table, moved within the
    /// table, is checked and moved in one step ([`move_cont_lone`]); off,
    /// through the loop's probes and the stretch test.
    pub cont_lone: bool,
    /// The move takes the rmap locks around each PMD-leaf move and each
    /// move_ptes() extent: copy_vma() merged the destination into a VMA
    /// whose pgoff is at or below the source's, or this is the revert of a
    /// failed move (copy_vma_and_data() sets it). Whole-table moves take
    /// them whatever this says ([`rmap_locks`]).
    /// Linux: struct pagetable_move_control need_rmap_locks.
    pub need_rmap_locks: bool,
}

/// The VMA is registered with a userfaultfd that lacks
/// UFFD_FEATURE_EVENT_REMAP. The model refuses that feature at UFFDIO_API
/// (crate::sys::uffd), so every registration counts.
/// Linux: include/linux/userfaultfd_k.h vma_has_uffd_without_event_remap().
pub fn uffd_without_event_remap(vma: &Vma) -> bool {
    vma.uffd_ctx().is_some()
}

/// Move the page tables of `pmc`; returns the bytes moved, counted from the
/// original `old_addr` (less than `len` only when a destination table could
/// not be allocated). Linux: mm/mremap.c move_page_tables().
pub fn move_page_tables(
    mm: &mut Mm,
    phys: &mut PhysMem,
    pmc: &PageTableMove,
    before: Before,
) -> u64 {
    if pmc.len == 0 {
        return 0;
    }
    let table_moves = !before.contains(Before::MREMAP_TABLE_MOVE);
    let batched = !before.contains(Before::MREMAP_PTE_BATCH);
    let old_end = pmc.old_addr + pmc.len;
    let (mut old_addr, mut new_addr) = (pmc.old_addr, pmc.new_addr);
    // §9.2: realign both cursors down to a PMD boundary so the first PMD
    // can move as a whole table (6.7+; it exists only for table moves).
    if table_moves {
        try_realign_addr(mm, pmc, &mut old_addr, &mut new_addr);
    }
    // §9.5, 6.17: either VMA with uffd but no EVENT_REMAP refuses table moves.
    // Linux: uffd_supports_page_table_move().
    let tables_ok =
        table_moves && !uffd_without_event_remap(&pmc.old) && !uffd_without_event_remap(&pmc.new);
    if table_moves && !tables_ok {
        rule!(mm.pt.hw, MremapUffdRefusesTableMove);
    }
    let mut streamed = StreamedLines::default();
    while old_addr < old_end {
        // §9.3/§9.4.1–4: the PUD level.
        let mut extent = get_extent(PUD_SIZE, old_addr, old_end, new_addr);
        // Both PMD slots holding a PTE table (read through the walk
        // cache, uncounted): the source's PUD entry is a table and
        // pud_alloc(), pmd_alloc() and pte_alloc() of the destination
        // find their tables — none of them counts or changes anything, so
        // they are not asked (the model's switch, not the kernel's).
        // Asked only for a step inside one PMD span (a whole-span step
        // tries move_normal_pmd(), which wants the destination slot none:
        // the test would be wasted there).
        let partial = get_extent(PMD_SIZE, old_addr, old_end, new_addr) < PMD_SIZE;
        let old_known = match pmc.tables_known && partial {
            true => Some(mm.pt.pmd(old_addr)),
            false => None,
        };
        let known = matches!(old_known, Some(PmdSlot::Table(_)))
            && matches!(mm.pt.pmd(new_addr), PmdSlot::Table(_));
        if !known && !matches!(mm.pt.entry(old_addr, 3), Entry::Table(_)) {
            old_addr += extent;
            new_addr += extent;
            continue;
        }
        if !known && mm.pt.pud_alloc(new_addr, phys).is_none() {
            break;
        }
        // move_pgt_entry(NORMAL_PUD) takes the rmap locks before
        // move_normal_pud() decides (a uffd VMA refuses inside it).
        if table_moves && extent == PUD_SIZE {
            rmap_locks(mm, &pmc.old);
        }
        if tables_ok && extent == PUD_SIZE && move_normal_pud(mm, old_addr, new_addr) {
            old_addr += extent;
            new_addr += extent;
            continue;
        }
        // §9.4.5–11: the PMD level.
        extent = get_extent(PMD_SIZE, old_addr, old_end, new_addr);
        // (Nothing above changed the source's PMD slot when it was known.)
        let old_pmd = match old_known {
            Some(slot) if known => slot,
            _ => mm.pt.pmd(old_addr),
        };
        if old_pmd == PmdSlot::None {
            old_addr += extent;
            new_addr += extent;
            continue;
        }
        if !known && mm.pt.pmd_alloc(new_addr, phys).is_none() {
            break;
        }
        let from_table = matches!(old_pmd, PmdSlot::Table(_));
        match old_pmd {
            PmdSlot::Leaf(_) => {
                // §9.4.7: a PMD-mapped THP (or the huge zero page) moves
                // whole when the extent is a full PMD; otherwise it is split
                // in place and its PTEs move (the folio stays large).
                if extent == PMD_SIZE && pmc.need_rmap_locks {
                    rmap_locks(mm, &pmc.old);
                }
                if extent == PMD_SIZE && move_huge_pmd(mm, &pmc.old, old_addr, new_addr) {
                    old_addr += extent;
                    new_addr += extent;
                    continue;
                }
                rule!(mm.pt.hw, MremapSplitHugePmd);
                split_huge_pmd(mm, phys, old_addr & !(PMD_SIZE - 1));
            }
            PmdSlot::Table(_) => {
                // §9.4.8: re-link the whole PTE table. move_pgt_entry()
                // takes the rmap locks for NORMAL_PMD whatever the move
                // (should_take_rmap_locks()), before move_normal_pmd()'s
                // own checks (a uffd VMA refuses inside it).
                if table_moves && extent == PMD_SIZE {
                    rmap_locks(mm, &pmc.old);
                }
                if tables_ok && extent == PMD_SIZE && move_normal_pmd(mm, old_addr, new_addr) {
                    old_addr += extent;
                    new_addr += extent;
                    continue;
                }
            }
            PmdSlot::None => unreachable!("checked above"),
        }
        if !known && mm.pt.pte_alloc(new_addr, phys).is_none() {
            break;
        }
        streamed.count(&mm.pt, old_addr, extent, from_table);
        // move_ptes(): the rmap locks around the extent when the move
        // needs them.
        if pmc.need_rmap_locks {
            rmap_locks(mm, &pmc.old);
        }
        let old_vma = &pmc.old;
        if batched {
            let stretch = match (pmc.stretch, pmc.fold_first) {
                (false, _) => Stretch::Off,
                (true, false) => Stretch::Template,
                (true, true) => Stretch::Folded,
            };
            move_ptes_batched(
                &mut mm.pt,
                phys,
                old_vma,
                old_addr,
                new_addr,
                extent,
                stretch,
                pmc.lone_run,
                pmc.cont_lone,
            );
        } else {
            move_ptes_per_pte(&mut mm.pt, phys, old_vma, old_addr, new_addr, extent);
        }
        old_addr += extent;
        new_addr += extent;
    }
    // pmc_progress(): never negative after a realignment.
    old_addr.saturating_sub(pmc.old_addr)
}

/// `pte_line_stream`: the source PTE-table lines one move_page_tables()
/// call's per-entry moves read in tables after the first it moves entries
/// from (docs/cost.md, "Events"). Each line once per call: an unaligned
/// move's extents split a table in two, and the second starts in the line
/// the first ended in. None in a table this call split from a PMD THP
/// (`from_table` false: split_huge_pmd() just wrote it). A cost rule only
/// (no state of the page tables).
/// Linux: mm/mremap.c move_page_tables() → move_ptes() (its ptep_get()
/// of each source entry).
#[derive(Default)]
struct StreamedLines {
    /// The first source table (its PMD-aligned address) of the call.
    first_table: Option<u64>,
    /// The last line counted (source address / 64 B of entries).
    last_line: Option<u64>,
    /// The last table this call split from a PMD THP.
    split: Option<u64>,
}

impl StreamedLines {
    /// Entries per 64-byte line of a PTE table.
    const ENTRIES: u64 = 8;

    fn count(&mut self, pt: &PageTables, old_addr: u64, extent: u64, from_table: bool) {
        let table = old_addr & !(PMD_SIZE - 1);
        if !from_table {
            self.split = Some(table);
        }
        let first = *self.first_table.get_or_insert(table) == table;
        if first || self.split == Some(table) || extent == 0 {
            return;
        }
        let line = |va: u64| va / PAGE_SIZE / Self::ENTRIES;
        let (first, last) = (line(old_addr), line(old_addr + extent - 1));
        let shared = self.last_line == Some(first);
        let n = last - first + 1 - u64::from(shared);
        self.last_line = Some(last);
        pt.hw.add(HwEvent::PteLineStream, n);
    }
}

/// One take_rmap_locks() / drop_rmap_locks() pair around a page-table
/// move of `vma`'s range: the call, and for a VMA with an anon_vma its
/// write lock's round trip (`rmap_lock`: anon_vma_lock_write(), the root's
/// rwsem down_write(), and anon_vma_unlock_write()). Anonymous VMAs only
/// in the model (no i_mmap_rwsem). A cost rule only.
/// Linux: mm/mremap.c move_pgt_entry() (should_take_rmap_locks()),
/// move_ptes(), take_rmap_locks(), drop_rmap_locks();
/// include/linux/rmap.h anon_vma_lock_write().
fn rmap_locks(mm: &Mm, vma: &Vma) {
    mm.pt.hw.call(KCall::TakeRmapLocks);
    if vma.anon_vma.is_some() {
        mm.pt.hw.one(HwEvent::RmapLock);
    }
}

/// The bytes one step moves at the level of `size` (PMD or PUD): up to the
/// next boundary of either address, and at most the rest of the range.
/// Linux: mm/mremap.c get_extent().
fn get_extent(size: u64, old_addr: u64, old_end: u64, new_addr: u64) -> u64 {
    let mask = !(size - 1);
    let mut extent = (old_addr.wrapping_add(size) & mask).wrapping_sub(old_addr);
    extent = extent.min(old_end - old_addr);
    extent.min((new_addr.wrapping_add(size) & mask).wrapping_sub(new_addr))
}

/// §9.2. Linux: mm/mremap.c try_realign_addr() / can_realign_addr() with
/// PMD_MASK.
fn try_realign_addr(mm: &Mm, pmc: &PageTableMove, old_addr: &mut u64, new_addr: &mut u64) {
    let off = PMD_SIZE - 1;
    let (old_align, new_align) = (*old_addr & off, *new_addr & off);
    // The range must reach or cross the next PMD boundary, the addresses
    // must not be aligned already, and they must be mutually aligned.
    if pmc.len < PMD_SIZE - old_align || old_align == 0 || old_align != new_align {
        return;
    }
    if !can_align_down(mm, &pmc.old, *old_addr) || !can_align_down(mm, &pmc.new, *new_addr) {
        return;
    }
    rule!(mm.pt.hw, MremapRealign);
    *old_addr &= !off;
    *new_addr &= !off;
}

/// The VMA starts exactly at `addr` and no VMA lies between the PMD
/// boundary below `addr` and it. Linux: mm/mremap.c can_align_down()
/// (not for_stack).
fn can_align_down(mm: &Mm, vma: &Vma, addr: u64) -> bool {
    vma.start == addr && !mm.vmas.intersects(addr & !(PMD_SIZE - 1), vma.start)
}

/// §9.4.4/§9.5: point the destination PUD entry at the source's PMD table
/// and clear the source entry. Refused when the destination entry is in
/// use. PMD leaves inside carry their deposited tables along (the kernel
/// keeps them with the PMD table page). Linux: mm/mremap.c move_normal_pud().
fn move_normal_pud(mm: &mut Mm, old_addr: u64, new_addr: u64) -> bool {
    if !matches!(mm.pt.entry(new_addr, 3), Entry::None) {
        return false; // WARN_ON_ONCE in the kernel
    }
    let Entry::Table(pmd_table) = mm.pt.entry(old_addr, 3) else {
        return false;
    };
    // pud_lock(); pud_clear(); pud_populate(); flush_tlb_range(vma,
    // old_addr, old_addr + PUD_SIZE) at PAGE_SIZE stride.
    mm.pt.lock();
    mm.pt.set_pud(old_addr, Entry::None);
    mm.pt.set_pud(new_addr, Entry::Table(pmd_table));
    mm.pt
        .flush_tlb_range(old_addr, old_addr + PUD_SIZE, PAGE_SIZE);
    let moved: Vec<u64> = mm
        .deposited
        .range(old_addr..old_addr + PUD_SIZE)
        .map(|(&slot, _)| slot)
        .collect();
    for slot in moved {
        let t = mm.deposited.remove(&slot).expect("deposited");
        mm.deposited.insert(slot - old_addr + new_addr, t);
    }
    rule!(mm.pt.hw, MremapMovePud);
    true
}

/// §9.4.8/§9.5: point the destination PMD entry at the source's PTE table
/// and clear the source entry; no PTE changes. Refused when the destination
/// entry is in use or the source is not a table.
/// Linux: mm/mremap.c move_normal_pmd().
fn move_normal_pmd(mm: &mut Mm, old_addr: u64, new_addr: u64) -> bool {
    if mm.pt.pmd(new_addr) != PmdSlot::None {
        return false; // WARN_ON_ONCE in the kernel
    }
    let PmdSlot::Table(pte_table) = mm.pt.pmd(old_addr) else {
        return false;
    };
    // pmd_lock(); pmd_clear(); pmd_populate(); flush_tlb_range(vma,
    // old_addr, old_addr + PMD_SIZE) at PAGE_SIZE stride: 512 pages, so an
    // ASID-wide flush on arm64 without FEAT_TLBIRANGE and a full flush on x86.
    pmd_locks(mm, old_addr, new_addr);
    mm.pt.set_pmd(old_addr, Entry::None);
    mm.pt.set_pmd(new_addr, Entry::Table(pte_table));
    mm.pt
        .flush_tlb_range(old_addr, old_addr + PMD_SIZE, PAGE_SIZE);
    rule!(mm.pt.hw, MremapMovePmd);
    true
}

/// The PMD-level locks of a PMD move: the source PMD's lock and, when the
/// destination PMD lies in another PMD table, that table's lock too. Both
/// target arches split PMD locks (CONFIG_SPLIT_PMD_PTLOCKS: one lock per
/// PMD table page, `pmd_lockptr()`), and a PMD table maps one PUD entry's
/// 1 GiB: source and destination in different PUD slots are two tables,
/// two locks (as move_ptes() takes two PTE-table locks).
/// Linux: mm/mremap.c move_normal_pmd(), mm/huge_memory.c move_huge_pmd()
/// (`old_ptl`, then `new_ptl = pmd_lockptr()` if `new_ptl != old_ptl`).
fn pmd_locks(mm: &Mm, old_addr: u64, new_addr: u64) {
    mm.pt.lock();
    if old_addr / PUD_SIZE != new_addr / PUD_SIZE {
        mm.pt.lock();
    }
}

/// §9.4.7/§9.5: move a PMD leaf and its deposited page table; uffd-wp is
/// cleared when the old VMA has uffd without EVENT_REMAP (soft-dirty would
/// be set with CONFIG_MEM_SOFT_DIRTY). The rmap is untouched: the same mm
/// maps the same folio once. Linux: mm/huge_memory.c move_huge_pmd().
fn move_huge_pmd(mm: &mut Mm, old_vma: &Vma, old_addr: u64, new_addr: u64) -> bool {
    if mm.pt.pmd(new_addr) != PmdSlot::None {
        return false;
    }
    let PmdSlot::Leaf(mut pmd) = mm.pt.pmd(old_addr) else {
        return false;
    };
    // pmdp_huge_get_and_clear(); set_pmd_at(); flush_pmd_tlb_range()
    // (PMD stride: one page-op). Linux: mm/huge_memory.c move_huge_pmd().
    pmd_locks(mm, old_addr, new_addr);
    mm.pt.set_pmd(old_addr, Entry::None);
    mm.pt
        .flush_tlb_range(old_addr, old_addr + PMD_SIZE, PMD_SIZE);
    if let Some(t) = mm.deposited.remove(&old_addr) {
        mm.deposited.insert(new_addr, t);
    }
    if uffd_without_event_remap(old_vma) {
        pmd.flags.remove(LeafFlags::UFFD_WP);
    }
    mm.pt.set_pmd(new_addr, Entry::Leaf(pmd));
    rule!(mm.pt.hw, MremapMoveHugePmd);
    true
}

/// §9.5.5: the value written at the destination (uffd-wp dropped when the
/// old VMA has uffd without EVENT_REMAP). The arch move_pte() hook is the
/// identity on x86-64 and arm64.
fn moved_pte(old_vma: &Vma, mut pte: Leaf) -> Leaf {
    pte.flags.remove(LeafFlags::CONT);
    if uffd_without_event_remap(old_vma) {
        pte.flags.remove(LeafFlags::UFFD_WP);
    }
    pte
}

/// move_ptes() before 6.17: every present PTE of the extent is read,
/// cleared with ptep_get_and_clear() (on arm64 a single-entry clear unfolds
/// its contiguous block first) and written at the destination with
/// set_pte_at() (on arm64 the 16th entry of a block may refold it).
/// Linux: mm/mremap.c move_ptes() (v6.16).
pub fn move_ptes_per_pte(
    pt: &mut PageTables,
    phys: &PhysMem,
    old_vma: &Vma,
    old_addr: u64,
    new_addr: u64,
    extent: u64,
) {
    move_ptes_prologue(pt);
    let mut force_flush = false;
    for off in (0..extent).step_by(PAGE_SIZE as usize) {
        if let Entry::Swap(s) = pt.pte_peek(old_addr + off) {
            pt.hw.ptep_get_reads(1); // the ptep_get() that found it
            let clear = uffd_without_event_remap(old_vma);
            crate::mm::swap::move_swap_pte(pt, clear, old_addr + off, new_addr + off, s);
            continue;
        }
        // pte_none(ptep_get(old_pte)): on arm64 a contpte gather.
        if !matches!(pt.pte(old_addr + off), Entry::Leaf(_)) {
            continue; // none: nothing to move
        }
        force_flush = true;
        rule!(pt.hw, MremapMovePtesPerPte);
        pt.hw.mark_batch(old_addr + off, 1, "move");
        let (_, old) = pt.clear_ptes(old_addr + off, 1)[0];
        pt.set_ptes(new_addr + off, moved_pte(old_vma, old), 1, phys);
    }
    if force_flush {
        pt.flush_tlb_range(old_addr, old_addr + extent, PAGE_SIZE);
    }
}

/// move_ptes() entry: the old and new PMDs read (pte_offset_map_lock /
/// pte_offset_map_rw_nolock) and both PTLs taken (split PTE locks: two
/// tables, two locks).
fn move_ptes_prologue(pt: &PageTables) {
    // Both tables exist (move_page_tables() found or made them) and
    // neither PMD read is looked at: the two map-and-locks counted
    // without looking the tables up (pte_offset_map_lock()'s walk
    // changes nothing).
    pt.pte_offset_map_lock_found();
    pt.pte_offset_map_lock_found();
}

/// move_ptes() since 6.17 (§9.5.7): a run of present PTEs mapping
/// consecutive pages of one large folio with equal bits (write respected
/// since 6.18) moves as one get_and_clear_ptes() + set_ptes() pair. The
/// run is looked for only when pte_batch_hint() > 1, i.e. only on arm64 and
/// only from a valid contiguous entry: on x86-64 every batch is one PTE.
/// get_and_clear_ptes() ORs the dirty and young bits of the run into the
/// value written (arm64: a batch clear unfolds only blocks it covers
/// partially; set_ptes() paints whole aligned blocks contiguous).
/// With `stretch` (arm64), a stretch of whole contiguous blocks each one
/// folio of one run moves as its first batch and the others' state
/// change and counts at once ([`move_cont_stretch`]), or
/// ([`Stretch::Folded`]) all its blocks at once, the first block's counts
/// written out ([`move_cont_blocks_folded`]).
/// Linux: mm/mremap.c move_ptes(), mremap_folio_pte_batch().
pub fn move_ptes_batched(
    pt: &mut PageTables,
    phys: &PhysMem,
    old_vma: &Vma,
    old_addr: u64,
    new_addr: u64,
    extent: u64,
    stretch: Stretch,
    lone: bool,
    cont_lone: bool,
) {
    move_ptes_prologue(pt);
    let mut force_flush = false;
    // Where every batch is one PTE (pte_batch_hint() == 1: the generic
    // hooks) and the descriptors are raw-readable, runs of present and none
    // entries go through one per-segment loop while nobody records marks
    // (the two ranges never overlap: move_vma() moves to a new range).
    let apart = !pt.hw.observing() && old_addr.abs_diff(new_addr) >= extent;
    let fast = match pt.arch().raw_pte() {
        Some(raw) if pt.arch().generic_pte_hooks() && apart => Some(raw),
        _ => None,
    };
    // arm64's contpte hooks: runs of none and present entries without the
    // contiguous bit go through one per-segment loop too.
    let cont_fast = fast.is_none()
        && apart
        && pt.arch().cont_ptes() == Some(CONT_PTES)
        && !pt.hw.features.contpte_off;
    // The whole extent one folded stretch that is its table's only run,
    // moved within the table: checked and moved in one step (the model's
    // switch `ModelConfig::move_cont_lone`, not the kernel's).
    if cont_fast
        && cont_lone
        && lone
        && stretch == Stretch::Folded
        && move_cont_lone(pt, phys, old_vma, old_addr, new_addr, extent)
    {
        pt.flush_tlb_range(old_addr, old_addr + extent, PAGE_SIZE);
        return;
    }
    let mut off = 0;
    while off < extent {
        if fast.is_some() || cont_fast {
            let (old, new, max) = (old_addr + off, new_addr + off, (extent - off) / PAGE_SIZE);
            let (n, moved) = match fast {
                Some(raw) => move_pte_run(pt, raw, old_vma, old, new, max, lone),
                None => move_noncont_run(pt, old_vma, old, new, max),
            };
            force_flush |= moved;
            off += n * PAGE_SIZE;
            if off >= extent {
                break;
            }
        }
        let va = old_addr + off;
        // Read once (uncounted): the swap test and the stretch test below
        // look at the same entry, and nothing is written between them.
        let peeked = pt.pte_peek(va);
        if let Entry::Swap(s) = peeked {
            pt.hw.ptep_get_reads(1); // the ptep_get() that found it
            let clear = uffd_without_event_remap(old_vma);
            crate::mm::swap::move_swap_pte(pt, clear, va, new_addr + off, s);
            off += PAGE_SIZE;
            continue;
        }
        let max_nr = (extent - off) / PAGE_SIZE;
        // Blocks after this one that repeat its pass exactly: tally the
        // pass (from its ptep_get()) to add it that many times after.
        let stretch_on = stretch != Stretch::Off && cont_fast;
        let more = match (stretch_on, peeked) {
            (true, Entry::Leaf(l)) => {
                let more = cont_stretch_blocks(pt, phys, va, new_addr + off, &l, max_nr);
                if more > 0 && stretch == Stretch::Folded {
                    // Every block of the stretch, the first included, in
                    // one step with its pass's counts written out.
                    let blocks = more + 1;
                    move_cont_blocks_folded(pt, old_vma, va, new_addr + off, l, blocks, lone);
                    force_flush = true;
                    off += blocks * CONT_PTES as u64 * PAGE_SIZE;
                    crate::core::diag::took(crate::core::diag::Step::MoveFolded);
                    continue;
                }
                more
            }
            _ => 0,
        };
        let tally = (more > 0).then(|| stretch_tally(&pt.hw, &phys.hw));
        let Entry::Leaf(pte) = pt.pte(va) else {
            off += PAGE_SIZE;
            continue;
        };
        force_flush = true;
        let nr = mremap_folio_pte_batch(pt, phys, va, pte, max_nr);
        pt.hw.mark_batch(va, nr, "move");
        // get_and_clear_ptes(): a run of equal bits comes back as one
        // (nothing to gather: every entry has the first's dirty and young
        // bits), anything else entry by entry.
        let cleared = pt.clear_ptes_batch(va, nr);
        let Some((_, mut first)) = cleared.get(0) else {
            unreachable!("the batch starts at a present entry")
        };
        if let ClearedPtes::List(list) = &cleared {
            for (_, l) in &list[1..] {
                first.flags |= l.flags & (LeafFlags::DIRTY | LeafFlags::YOUNG);
            }
        }
        pt.set_ptes(new_addr + off, moved_pte(old_vma, first), nr, phys);
        if nr > 1 {
            rule!(pt.hw, MremapMovePtesBatch);
        }
        off += nr * PAGE_SIZE;
        if let Some(before) = tally {
            debug_assert_eq!(nr, CONT_PTES as u64, "a stretch's first batch is one block");
            let n = more * CONT_PTES as u64;
            move_cont_stretch(pt, old_addr + off, new_addr + off, n);
            pt.hw.add_since(&before.0, more);
            phys.hw.add_since(&before.1, more);
            SPARE_TALLIES.with(|s| s.set(Some(before)));
            off += n * PAGE_SIZE;
            crate::core::diag::took(crate::core::diag::Step::MoveStretch);
        }
    }
    // if (force_flush) flush_tlb_range(vma, old_end - len, old_end);
    if force_flush {
        pt.flush_tlb_range(old_addr, old_addr + extent, PAGE_SIZE);
    }
}

/// Both sinks' tallies before a stretch's first block
/// ([`move_ptes_batched`]), in the box the last stretch on this thread
/// used, written over in place (or a new one): a pair of tallies is a few
/// kilobytes, which built on the stack and copied cost about 2 % of
/// mremap-batch-64k on arm64 (issue 14).
fn stretch_tally(pt: &crate::core::hw::HwSink, phys: &crate::core::hw::HwSink) -> Box<TallyPair> {
    match SPARE_TALLIES.with(|s| s.take()) {
        Some(mut t) => {
            pt.tally_into(&mut t.0);
            phys.tally_into(&mut t.1);
            t
        }
        None => Box::new((pt.tally(), phys.tally())),
    }
}

/// The page tables' and the machine's tallies of [`stretch_tally`].
type TallyPair = (crate::core::hw::HwTally, crate::core::hw::HwTally);

thread_local! {
    /// The box of the last stretch's tallies (storage only: written over
    /// by [`stretch_tally`] before it is read again).
    static SPARE_TALLIES: std::cell::Cell<Option<Box<TallyPair>>> =
        const { std::cell::Cell::new(None) };
}

/// The per-segment form of [`move_ptes_batched`]'s loop where every batch
/// is one PTE, over the none and present entries from `old` (at most
/// `max`, stopping at a swap entry or marker): each is one pass of that
/// loop — `ptep_get()`; for a present entry `get_and_clear_ptes(nr == 1)`
/// (`ptep_get_and_clear()`: one atomic exchange) and `set_ptes(nr == 1)`
/// at `new` of the same descriptor ([`moved_pte`]: uffd-wp dropped without
/// UFFD_EVENT_REMAP) — with each table borrowed once and the run's events
/// added in one step each. Returns the entries passed and whether any was
/// present (`force_flush`).
/// Linux: mm/mremap.c move_ptes() (nr == 1).
fn move_pte_run(
    pt: &mut PageTables,
    raw: &RawPte,
    old_vma: &Vma,
    old: u64,
    new: u64,
    max: u64,
    lone: bool,
) -> (u64, bool) {
    let clear = if uffd_without_event_remap(old_vma) {
        raw.uffd_wp
    } else {
        0
    };
    let i0 = index(1, old);
    let max = (max as usize).min(PTRS_PER_TABLE - i0);
    let step = 1u64 << raw.pfn_shift;
    // The stretch the only run of its table, moved within the table: the
    // uniform case below as one rewrite of the run.
    if lone {
        let moved = move_lone_run(pt, old, new, max, |r| {
            let last = (r.first & raw.pfn_mask).checked_add(step.checked_mul(max as u64 - 1)?)?;
            let ok = r.kinds == Run::PRESENT
                && r.step == step
                && last <= raw.pfn_mask
                && raw.is_present(r.first);
            ok.then_some((r.first & !clear, step))
        });
        if moved {
            count_moved(&pt.hw, max as u64, max as u64);
            return (max as u64, true);
        }
    }
    let (t, _) = pt.pte_table(old);
    // The whole stretch one stored run of present entries on consecutive
    // frames: the loop below would pass every entry and write them back as
    // that one run shifted (`write_moved()`), so do that without reading
    // each entry.
    if let Some((first, st)) = t.uniform_present(i0, max, raw.pfn_mask) {
        if st == step && raw.is_present(first) {
            let (mut s, _) = pt.pte_table(old);
            s.write_affine(i0, max, 0, 0, 0);
            let (mut d, j0) = pt.pte_table(new);
            d.write_affine(j0, max, first & !clear, step, Run::PRESENT);
            count_moved(&pt.hw, max as u64, max as u64);
            return (max as u64, max > 0);
        }
    }
    let mut moved = [0u64; PTRS_PER_TABLE];
    let (mut n, mut present) = (0, 0u64);
    while n < max {
        let e = t.raw(i0 + n);
        if e != 0 {
            if !raw.is_present(e) {
                break;
            }
            moved[n] = e & !clear;
            present += 1;
        }
        n += 1;
    }
    if present > 0 {
        write_moved(pt, old, new, &moved[..n], step);
    }
    count_moved(&pt.hw, n as u64, present);
    (n as u64, present > 0)
}

/// The state change of a move of the `n` entries from `old` to `new`
/// where the source entries are the one run of their PTE table and the
/// destination lies in the same table, apart from them (every
/// destination entry none): the run rewritten in place at the
/// destination, starting at the descriptor and step `dest` gives for the
/// source run (`None`: not this case). The same table as clearing the
/// source with [`PteTable::write_affine`] and writing the destination
/// with it — what [`move_pte_run`]'s uniform case and
/// [`move_cont_blocks_folded`] do — without the two splices and the three
/// table lookups. Uncounted (the callers count the passes); returns
/// whether it was the case (nothing is changed when not).
/// (The model's switch `ModelConfig::move_lone_run`, not the kernel's.)
fn move_lone_run(
    pt: &mut PageTables,
    old: u64,
    new: u64,
    n: usize,
    dest: impl FnOnce(&Run) -> Option<(u64, u64)>,
) -> bool {
    let (i, j) = (index(1, old), index(1, new));
    if n < 2 || j + n > PTRS_PER_TABLE || (j < i + n && i < j + n) {
        return false;
    }
    let (Some(so), Some(sn)) = (pt.pte_tbl_slot(old), pt.pte_tbl_slot(new)) else {
        return false;
    };
    if so != sn {
        return false;
    }
    let mut t = pt.pte_table_in(so, old);
    let Some(r) = t.lone_run() else {
        return false;
    };
    if r.start as usize != i || r.len as usize != n {
        return false;
    }
    let Some((first, step)) = dest(&r) else {
        return false;
    };
    let moved = Run {
        start: j as u16,
        len: n as u16,
        kinds: Run::PRESENT,
        first,
        step,
    };
    if !t.replace_lone_run(moved) {
        return false;
    }
    crate::core::diag::took(crate::core::diag::Step::MoveLoneRun);
    true
}

/// The events of [`move_pte_run`]'s `n` passes of the entry loop, of which
/// `present` moved an entry (`ptep_get()` each; `ptep_get_and_clear()` and
/// `set_ptes(nr == 1)` for each present one).
fn count_moved(hw: &crate::core::hw::HwSink, n: u64, present: u64) {
    hw.ptep_get_reads(n);
    hw.call_n(KCall::PtepGetAndClear, present);
    hw.add(HwEvent::PteAtomicClear, present);
    hw.call_n(KCall::SetPtes, present);
    hw.add(HwEvent::PteStore, present);
}

/// The stores of a per-segment move: `moved[k]` (0: the entry was none
/// and stays so) goes from entry `old + k` pages to entry `new + k` pages,
/// the old entries (present or none) cleared. The source is cleared as one
/// write and the destination written a run of consecutive frames (`step`
/// apart) at a time: the values the entry-by-entry stores leave.
fn write_moved(pt: &mut PageTables, old: u64, new: u64, moved: &[u64], step: u64) {
    let n = moved.len();
    let (mut t, i0) = pt.pte_table(old);
    t.write_affine(i0, n, 0, 0, 0);
    let (mut d, j0) = pt.pte_table(new);
    let mut k = 0;
    while k < n {
        let e = moved[k];
        if e == 0 {
            k += 1;
            continue;
        }
        let mut len = 1;
        while k + len < n && moved[k + len] == e.wrapping_add(step.wrapping_mul(len as u64)) {
            len += 1;
        }
        d.write_affine(j0 + k, len, e, step, Run::PRESENT);
        k += len;
    }
}

/// arm64's form of [`move_pte_run`] (contpte hooks on): the none and
/// present entries from `old` (at most `max`) that carry no contiguous bit,
/// stopping at a swap entry or marker, at an entry with the contiguous
/// bit, at a present entry whose destination is not none, and at a
/// present entry whose single-entry `set_ptes()` would try a fold (the
/// last entry of a block getting the last frame of a 16-frame group,
/// neither special nor PROT_NONE: `try_fold()` looks at the folio). Each
/// entry passed is one pass of [`move_ptes_batched`]'s loop with a batch
/// of one (`pte_batch_hint()` is 1 without the contiguous bit):
/// `ptep_get()` (not `pte_valid_cont()`: one load); for a present entry
/// `ptep_get_and_clear()` (its `contpte_try_unfold()` check: a call and a
/// load; one atomic exchange) and `set_ptes(nr == 1)` at `new` (the check
/// on the none destination, one store, and no fold try), the value
/// re-encoded as `set_ptes()` writes it ([`moved_pte`]). Returns the
/// entries passed and whether any was present (`force_flush`).
/// Linux: mm/mremap.c move_ptes(); arch/arm64/include/asm/pgtable.h
/// ptep_get(), ptep_get_and_clear(), set_ptes(), contpte_try_fold().
fn move_noncont_run(
    pt: &mut PageTables,
    old_vma: &Vma,
    old: u64,
    new: u64,
    max: u64,
) -> (u64, bool) {
    let arch = pt.arch();
    let n_block = CONT_PTES as u64;
    let i0 = (old / PAGE_SIZE) as usize % PTRS_PER_TABLE;
    let j0 = (new / PAGE_SIZE) as usize % PTRS_PER_TABLE;
    let max = (max as usize)
        .min(PTRS_PER_TABLE - i0)
        .min(PTRS_PER_TABLE - j0);
    let (mut n, mut present) = (0, 0u64);
    // A contiguous block (or a swap entry) first: nothing to pass, and no
    // buffer to clear (the loop below would stop at once).
    let first = pt.pte_entries(old).map_or(0, |(src, _)| src.raw(i0));
    let passable = |e: u64| match arch.decode(1, e) {
        Entry::Leaf(l) => !l.flags.contains(LeafFlags::CONT),
        _ => false,
    };
    if first != 0 && !passable(first) {
        return (0, false);
    }
    let mut moved = [0u64; PTRS_PER_TABLE];
    {
        let (Some((src, _)), dst) = (pt.pte_entries(old), pt.pte_entries(new)) else {
            return (0, false);
        };
        while n < max {
            let e = src.raw(i0 + n);
            if e != 0 {
                let Entry::Leaf(l) = arch.decode(1, e) else {
                    break; // a swap entry or marker
                };
                let j = j0 + n;
                let dst_none = dst.is_none_or(|(d, _)| d.raw(j) == 0);
                let fold_try = j % CONT_PTES == CONT_PTES - 1
                    && !l.flags.intersects(LeafFlags::SPECIAL | LeafFlags::PROTNONE)
                    && l.pfn.0 % n_block == n_block - 1;
                if l.flags.contains(LeafFlags::CONT) || !dst_none || fold_try {
                    break;
                }
                // set_ptes() writes the descriptor without CONT, the frame
                // in its field: the leaf's encoding.
                moved[n] = arch.encode_leaf(1, moved_pte(old_vma, l));
                present += 1;
            }
            n += 1;
        }
    }
    if present > 0 {
        // Consecutive frames are one page apart in the descriptor
        // (`pte_advance_pfn()`: the frame field starts at bit 12).
        write_moved(pt, old, new, &moved[..n], PAGE_SIZE);
    }
    let hw = &pt.hw;
    hw.ptep_get_reads(n as u64);
    hw.call_n(KCall::PtepGetAndClear, present);
    hw.add(HwEvent::PteAtomicClear, present);
    contpte::count_try_unfold_checks(hw, 2 * present);
    hw.call_n(KCall::SetPtes, present);
    hw.add(HwEvent::PteStore, present);
    (n as u64, present > 0)
}

/// How many whole contiguous blocks after the one at `va` (present entry
/// `pte`, moving to `new`; `max_nr` entries left in the extent) repeat
/// its pass of [`move_ptes_batched`]'s loop exactly (arm64, contpte
/// hooks on, nobody observing): 0 unless `va`, `new` and the frame are
/// block-aligned, the source entries of all those blocks lie in one
/// stored run of present entries a frame apart (the same bits, CONT
/// included: `pte_batch_hint()` gives a whole block each time), and the
/// frames are consecutive order-4 folios of one folio run, each block one
/// whole folio (`mremap_folio_pte_batch()` then returns a block for each,
/// with the same counts: `folio_pte_batch()` clamps to the folio's end
/// before scanning). Each pass then does the same: `ptep_get()`'s gather,
/// the two struct page lines, a batch of 16, `get_and_clear_full_ptes()`
/// of one aligned block (no unfold), `set_ptes()` of one aligned block
/// (painted CONT, no destination read), the batch rule; and the move has
/// no mmu_gather (one TLB flush at the extent's end either way).
fn cont_stretch_blocks(
    pt: &PageTables,
    phys: &PhysMem,
    va: u64,
    new: u64,
    pte: &Leaf,
    max_nr: u64,
) -> u64 {
    let nb = CONT_PTES as u64;
    let i = (va / PAGE_SIZE) as usize % PTRS_PER_TABLE;
    let j = (new / PAGE_SIZE) as usize % PTRS_PER_TABLE;
    let blocks = max_nr / nb;
    if blocks < 2
        || !i.is_multiple_of(CONT_PTES)
        || !j.is_multiple_of(CONT_PTES)
        || !pte.pfn.0.is_multiple_of(nb)
        || !pte.flags.contains(LeafFlags::CONT)
        || pte
            .flags
            .intersects(LeafFlags::SPECIAL | LeafFlags::PROTNONE)
        || pt.pte_batch_hint(va, pte) != nb
    {
        return 0;
    }
    match phys.folio_of(pte.pfn) {
        Some(f) if f.head == pte.pfn && f.nr_pages() == nb => {}
        _ => return 0,
    }
    let Some(run_end) = phys.large_run_end(pte.pfn) else {
        return 0;
    };
    let blocks = blocks.min((run_end - pte.pfn.0) / nb);
    if blocks < 2 {
        return 0;
    }
    let Some((src, _)) = pt.pte_entries(va) else {
        return 0;
    };
    // One stored run of present entries a frame apart from `pte` over the
    // blocks, with no carry out of the frame field.
    let addr = crate::core::arch::arm64::fork_raw::ADDR;
    let first = pt.arch().encode_leaf(1, *pte);
    let Some(r) = src.run_at(i) else {
        return 0;
    };
    let blocks = blocks.min((r.end() - i) as u64 / nb);
    let last = (first & addr).checked_add(PAGE_SIZE * (blocks * nb).saturating_sub(1));
    let uniform = r.kinds == Run::PRESENT
        && r.step == PAGE_SIZE
        && src.raw(i) == first
        && last.is_some_and(|l| l <= addr);
    if uniform && blocks >= 2 {
        blocks - 1
    } else {
        0
    }
}

/// The state change of [`move_ptes_batched`]'s passes over the `n`
/// entries from `old` to `new` after a stretch's first block (see
/// [`cont_stretch_blocks`]; the caller adds their counts): the source
/// cleared as one write (`get_and_clear_full_ptes()` of each block), the
/// destination written as the first block's run continued (`set_ptes()`
/// of each block paints it CONT: the descriptor of the block before it
/// advanced by 16 frames). Uncounted.
fn move_cont_stretch(pt: &mut PageTables, old: u64, new: u64, n: u64) {
    let (mut s, i) = pt.pte_table(old);
    s.write_affine(i, n as usize, 0, 0, 0);
    let (mut d, j) = pt.pte_table(new);
    let prev = d.raw(j - 1);
    d.write_affine(j, n as usize, prev + PAGE_SIZE, PAGE_SIZE, Run::PRESENT);
}

/// Which stretch steps [`move_ptes_batched`] takes (the model's switches
/// `ModelConfig::stretch_steps` and `ModelConfig::move_first_folded`, not
/// the kernel's).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stretch {
    /// Block by block.
    Off,
    /// The first block through the general path, its counts tallied and
    /// repeated for the blocks after it ([`move_cont_stretch`]).
    Template,
    /// All the blocks at once ([`move_cont_blocks_folded`]).
    Folded,
}

/// The passes of [`move_ptes_batched`]'s loop over `blocks` whole
/// contiguous blocks from `va` (its entry `pte`, read uncounted) to `new`,
/// each one folio of one folio run — what [`cont_stretch_blocks`] checks
/// for a stretch of `blocks - 1` blocks after the first — in one step,
/// with each pass's counts written out: `ptep_get()` of the block's first
/// entry (the call, its load and the gather's loads:
/// `contpte::count_uniform_block_reads()`), `mremap_folio_pte_batch()`'s
/// two struct page lines and its `folio_pte_batch()` call (the hint is the
/// whole block, which is the whole folio: no scan),
/// `get_and_clear_full_ptes()` of one aligned block (no unfold: 16 atomic
/// clears), `set_ptes()` of one aligned block (16 stores, all painted
/// contiguous: the frame is block-aligned and the entry not special) and
/// the batch rule; nothing on the machine's sink, no mark (the caller is
/// not observed). The state: the source entries cleared as one write, the
/// destination written as one run of present entries a frame apart from
/// the descriptor `set_ptes()` paints for the first block.
/// Linux: mm/mremap.c move_ptes(), mremap_folio_pte_batch();
/// arch/arm64/mm/contpte.c contpte_ptep_get(),
/// contpte_get_and_clear_full_ptes(); arch/arm64/include/asm/pgtable.h
/// set_ptes().
fn move_cont_blocks_folded(
    pt: &mut PageTables,
    old_vma: &Vma,
    va: u64,
    new: u64,
    pte: Leaf,
    blocks: u64,
    lone: bool,
) {
    let n = blocks * CONT_PTES as u64;
    let nb = CONT_PTES as u64;
    if let Some((entries, i)) = pt.pte_entries(va) {
        let view = crate::core::arch::PteRef {
            arch: pt.arch(),
            entries,
            hw: &pt.hw,
            base: va & !PMD_SIZE.wrapping_sub(1),
        };
        contpte::count_uniform_block_reads(&view, i, blocks);
    }
    let hw = &pt.hw;
    hw.add(HwEvent::StructPageLine, 2 * blocks);
    hw.call_n(KCall::FolioPteBatch, blocks);
    hw.call_n(KCall::GetAndClearFullPtes, blocks);
    hw.add(HwEvent::PteAtomicClear, n);
    hw.call_n(KCall::SetPtes, blocks);
    hw.add(HwEvent::PteStore, n);
    hw.rules
        .hit_n(crate::core::rules::Rule::ContptePaint, (nb * blocks) as u32);
    hw.rules
        .hit_n(crate::core::rules::Rule::MremapMovePtesBatch, blocks as u32);
    let first = contpte::painted_block_raw(moved_pte(old_vma, pte));
    // The blocks the only run of their table, moved within it: one
    // rewrite of the run (what the two writes below leave). The caller
    // checked the run's kinds and step over the blocks.
    if lone && move_lone_run(pt, va, new, n as usize, |_| Some((first, PAGE_SIZE))) {
        return;
    }
    let (mut s, i) = pt.pte_table(va);
    s.write_affine(i, n as usize, 0, 0, 0);
    let (mut d, j) = pt.pte_table(new);
    d.write_affine(j, n as usize, first, PAGE_SIZE, Run::PRESENT);
}

/// [`move_ptes_batched`]'s loop over an extent of `n` entries from `old`
/// (arm64, contpte hooks on, nobody observing, stretches folded, lone runs
/// rewritten) when the source entries are the only run of their PTE
/// table, present entries a frame apart from a valid contiguous,
/// non-special descriptor whose frame is block-aligned, over whole
/// blocks (`old` and `new` block-aligned, `n` a multiple of 16, at least
/// two blocks), each block one order-4 folio of one folio run, and `new`
/// lies in the same table apart from them: there the loop's first pass
/// finds the first entry contiguous (`move_noncont_run()` passes nothing),
/// [`cont_stretch_blocks`] takes every block, [`move_cont_blocks_folded`]
/// counts them (the gather's loads from the run's young and dirty bits:
/// every entry has them) and [`move_lone_run`] rewrites the run at the
/// destination with the descriptor `set_ptes()` paints for the first
/// block — the source's own, less uffd-wp without UFFD_EVENT_REMAP, since
/// the descriptor is the codec's (checked: it encodes back to itself).
/// This checks all of it once on the run and its first descriptor and
/// does the same; `false`, nothing counted or changed, when any check
/// fails (the loop then decides as before).
/// (The model's switch `ModelConfig::move_cont_lone`, not the kernel's.)
/// Linux: mm/mremap.c move_ptes(), mremap_folio_pte_batch();
/// arch/arm64/mm/contpte.c contpte_ptep_get(),
/// contpte_get_and_clear_full_ptes(); arch/arm64/include/asm/pgtable.h
/// set_ptes().
fn move_cont_lone(
    pt: &mut PageTables,
    phys: &PhysMem,
    old_vma: &Vma,
    old: u64,
    new: u64,
    extent: u64,
) -> bool {
    let nb = CONT_PTES;
    let n = (extent / PAGE_SIZE) as usize;
    let (i, j) = (index(1, old), index(1, new));
    if n < 2 * nb
        || !n.is_multiple_of(nb)
        || !i.is_multiple_of(nb)
        || !j.is_multiple_of(nb)
        || i + n > PTRS_PER_TABLE
        || j + n > PTRS_PER_TABLE
        || (j < i + n && i < j + n)
    {
        return false;
    }
    let (Some(so), Some(sn)) = (pt.pte_tbl_slot(old), pt.pte_tbl_slot(new)) else {
        return false;
    };
    if so != sn {
        return false;
    }
    let arch = pt.arch();
    let mut t = pt.pte_table_in(so, old);
    let Some(r) = t.lone_run() else {
        return false;
    };
    if r.start as usize != i
        || r.len as usize != n
        || r.kinds != Run::PRESENT
        || r.step != PAGE_SIZE
    {
        return false;
    }
    let first = r.first;
    // A valid contiguous, non-special leaf as the codec writes it (what
    // decoding it and encoding it again checks in cont_stretch_blocks()),
    // on a block-aligned frame, the run's last frame inside the field.
    use crate::core::arch::arm64::fork_raw;
    let pfn = fork_raw::pfn(first);
    let no_carry = (first & fork_raw::ADDR)
        .checked_add(PAGE_SIZE * (n as u64 - 1))
        .is_some_and(|last| last <= fork_raw::ADDR);
    if !fork_raw::cont_leaf_canonical(first) || !pfn.0.is_multiple_of(nb as u64) || !no_carry {
        return false;
    }
    match phys.folio_of(pfn) {
        Some(f) if f.head == pfn && f.nr_pages() == nb as u64 => {}
        _ => return false,
    }
    if phys
        .large_run_end(pfn)
        .is_none_or(|end| end < pfn.0 + n as u64)
    {
        return false;
    }
    // The counts of every block's pass (move_cont_blocks_folded()).
    let (blocks, n64) = ((n / nb) as u64, n as u64);
    let hw = t.hw;
    let loads = contpte::uniform_gather_loads(first);
    hw.call_n(KCall::PtepGet, blocks);
    hw.add(HwEvent::PteLoad, (1 + loads) * blocks);
    hw.add(HwEvent::StructPageLine, 2 * blocks);
    hw.call_n(KCall::FolioPteBatch, blocks);
    hw.call_n(KCall::GetAndClearFullPtes, blocks);
    hw.add(HwEvent::PteAtomicClear, n64);
    hw.call_n(KCall::SetPtes, blocks);
    hw.add(HwEvent::PteStore, n64);
    hw.rules
        .hit_n(crate::core::rules::Rule::ContptePaint, n as u32);
    hw.rules
        .hit_n(crate::core::rules::Rule::MremapMovePtesBatch, blocks as u32);
    // painted_block_raw(moved_pte(l)): without uffd-wp to drop, the
    // descriptor itself (moved_pte() takes CONT off, set_ptes() paints it
    // back, and `first` encodes back to itself).
    let dest = match (uffd_without_event_remap(old_vma), arch.decode(1, first)) {
        (true, Entry::Leaf(l)) => contpte::painted_block_raw(moved_pte(old_vma, l)),
        _ => first,
    };
    let moved = Run {
        start: j as u16,
        len: n as u16,
        kinds: Run::PRESENT,
        first: dest,
        step: PAGE_SIZE,
    };
    if t.replace_lone_run(moved) {
        crate::core::diag::took(crate::core::diag::Step::MoveLoneRun);
    } else {
        t.write_affine(i, n, 0, 0, 0);
        t.write_affine(j, n, dest, PAGE_SIZE, Run::PRESENT);
    }
    crate::core::diag::took(crate::core::diag::Step::MoveFolded);
    crate::core::diag::took(crate::core::diag::Step::MoveContLone);
    true
}

/// How many PTEs from `va` move together. Linux: mm/mremap.c
/// mremap_folio_pte_batch() → folio_pte_batch_flags(FPB_RESPECT_WRITE).
fn mremap_folio_pte_batch(pt: &PageTables, phys: &PhysMem, va: u64, pte: Leaf, max_nr: u64) -> u64 {
    if max_nr == 1 {
        return 1;
    }
    // pte_batch_hint() == 1: always on x86-64; on arm64 unless the entry is
    // a valid contiguous one (the rc fix's early return).
    if pt.pte_batch_hint(va, &pte) == 1 {
        return 1;
    }
    // vm_normal_folio(): the zero page has none; small folios never batch.
    if pte.flags.contains(LeafFlags::SPECIAL) {
        return 1;
    }
    // vm_normal_folio() + folio_test_large(): the head's struct page line.
    pt.hw.one(HwEvent::StructPageLine);
    match phys.folio_of(pte.pfn) {
        Some(f) if f.is_large() => {}
        _ => return 1,
    }
    // folio_pte_batch() reads folio_nr_pages() (the folio's second line).
    pt.hw.one(HwEvent::StructPageLine);
    folio_pte_batch(pt, phys, va, pte, max_nr, Fpb::RESPECT_WRITE).nr
}
