//! Page tables as real tables: a PGD → PUD → PMD → PTE tree of 512-entry
//! pages holding arch-encoded descriptors, allocated from physical memory
//! and freed when the kernel frees them.
//!
//! Level numbering: 4 = PGD, 3 = PUD, 2 = PMD, 1 = PTE.
//!
//! Every PTE write goes through the arch's hooks ([`crate::core::arch::Arch`]),
//! so the arm64 contiguous bit is kept where the kernel keeps it, in
//! `core/arch/arm64/contpte.rs` (arch/arm64/mm/contpte.c): batched writes
//! paint it on fully covered 64 KiB blocks, single-entry writes unfold a
//! folded block first, and a single write to the last entry of a block
//! tries to fold it.
//!
//! Walks of a range go through the [`cursor`] ([`Cursor`]): it finds what
//! covers each address level by level; a PTE-table segment is locked with
//! [`PageTables::pte_offset_map_lock`] (through
//! [`Segment::lock_pte_table`]), the one place a walk's PMD load and
//! page-table lock are counted.

use crate::core::addr::{
    Pfn, PAGE_SHIFT, PAGE_SIZE, PMD_SIZE, PTRS_PER_TABLE, PUD_SIZE, TABLE_SHIFT,
};
use crate::core::arch::{Arch, ArchKind, ClearedPtes, Entry, Leaf, LeafFlags, PteRef, PteTable};
use crate::core::folio::PhysMem;
use crate::core::hw::{HwEvent, HwSink};
use std::cell::Cell;

use crate::core::addr::PfnMap;

pub mod cursor;
pub mod store;
mod stretch;
pub use cursor::{Cursor, PtItem, Query, Segment};
pub use store::{Entries, Run, Table};

/// The kinds of entries in a slice of a PTE table, for a run's
/// [`Run::kinds`].
fn run_kinds(arch: &dyn Arch, s: &[u64]) -> u8 {
    let mut k = 0;
    if arch.any_present_raw(s) {
        k |= Run::PRESENT;
    }
    if arch.any_nonpresent_raw(s) {
        k |= Run::NONPRESENT;
    }
    k
}

/// The leaf at entry `i` of a table stored as runs and how many entries
/// from `i` (at most `max`, at least 2) hold the same leaf bits over
/// consecutive frames: the run holding `i` is cut to the stretch, and its
/// ends are checked to decode as the first leaf advanced by one frame per
/// entry (the step is one frame, and the last entry is the first's bits
/// at the last frame: both arches' encoders place the frame in one
/// contiguous field, so the entries between hold the same bits too).
/// `None` for a dense table, a none entry, a single entry or a run that is
/// not such a stretch: the caller then reads entry by entry.
fn uniform_leaf_span(
    arch: &dyn Arch,
    entries: Entries<'_>,
    i: usize,
    max: usize,
) -> Option<(Leaf, usize)> {
    let r = entries.run_at(i)?;
    let span = (r.end() - i).min(max);
    if span < 2 || r.kinds != Run::PRESENT {
        return None;
    }
    let first = entries.raw(i);
    let Entry::Leaf(l) = arch.decode(1, first) else {
        return None;
    };
    let at = |k: u64| {
        arch.encode_leaf(
            1,
            Leaf {
                pfn: l.pfn.add(k),
                flags: l.flags,
            },
        )
    };
    let last = first.wrapping_add(r.step.wrapping_mul(span as u64 - 1));
    let same = at(0) == first && at(1) == first.wrapping_add(r.step) && at(span as u64 - 1) == last;
    same.then_some((l, span))
}

/// The table pages of one tree: a slab of [`Table`]s and an index from
/// frame number to slot. The walk cache keeps the slot of the last PTE
/// table found, so a walk that stays in one table looks nothing up.
///
/// In front of the index, a small direct-mapped cache of frame → slot
/// (`recent`, by the frame's low bits): the few tables a statement walks
/// again and again (the root, the tables of the range it works on) are
/// found without hashing. Every insert fills its entry and every remove
/// clears it, so a hit is always the index's answer.
#[derive(Clone, Debug, Default)]
struct Tables {
    slab: Vec<Option<Table>>,
    free: Vec<u32>,
    index: PfnMap<u32>,
    /// The frame of each slab slot's table (0 for a free slot: frame 0 is
    /// never a table), so a caller that can guess a table's slot (the
    /// slot after the previous table's, for tables made in a row) checks
    /// the guess without hashing ([`Tables::slot_hinted`]).
    pfns: Vec<u64>,
    /// `(recent_key(pfn), slot)`, or `(0, _)`: no frame.
    recent: [std::cell::Cell<(u64, u32)>; RECENT_TABLES],
    /// Index entries kept after their table was removed
    /// ([`Tables::keep`]): `(recent_key(pfn), slot)` by the frame's low
    /// bits, or `(0, _)`. While kept, the index still maps `pfn` to
    /// `slot`, the slot is empty and on no free list; a table inserted at
    /// `pfn` again takes the slot back without hashing. The index holds
    /// a stale entry exactly for the frames kept here.
    kept: [(u64, u32); KEPT_TABLES],
    /// How many `kept` entries are in use (the tables stored are the
    /// index's length less these).
    kept_n: u32,
    /// Keep a removed table's index entry and slot for its frame
    /// (`ModelConfig::keep_table_index`; issue 14, fifteenth session):
    /// the page-table pages an iteration frees come back at the same
    /// frames in the next one. Off: a remove takes the entry out of the
    /// index and puts the slot on the free list. Slots, lengths and
    /// capacities (what [`PageTables::memory_bytes`] reads) are the same
    /// either way; no answer of a lookup changes.
    keep: bool,
}

/// Entries of [`Tables`]' kept index entries (a power of two).
const KEPT_TABLES: usize = 16;

/// Entries of [`Tables`]' frame → slot cache (a power of two).
const RECENT_TABLES: usize = 16;

/// The key of frame `pfn` in [`Tables`]' cache: `pfn + 1`, so that the
/// default entry (0) names no frame.
const fn recent_key(pfn: u64) -> u64 {
    pfn.wrapping_add(1)
}

impl Tables {
    fn recent_entry(&self, pfn: u64) -> &std::cell::Cell<(u64, u32)> {
        &self.recent[pfn as usize & (RECENT_TABLES - 1)]
    }
    #[inline]
    fn slot(&self, pfn: &u64) -> Option<u32> {
        let e = self.recent_entry(*pfn);
        let (k, s) = e.get();
        if k == recent_key(*pfn) {
            return Some(s);
        }
        let s = self.index.get(pfn).copied()?;
        // A kept entry names an empty slot: no table there.
        self.slab[s as usize].as_ref()?;
        e.set((recent_key(*pfn), s));
        Some(s)
    }
    fn at(&self, slot: u32) -> &Table {
        self.slab[slot as usize].as_ref().expect("live table slot")
    }
    /// [`Tables::slot`] of `pfn`, trying slot `hint` first.
    #[inline]
    fn slot_hinted(&self, pfn: u64, hint: u32) -> Option<u32> {
        if self.pfns.get(hint as usize) == Some(&pfn) {
            return Some(hint);
        }
        self.slot(&pfn)
    }
    /// Room in the frame index for `n` more tables.
    fn reserve(&mut self, n: usize) {
        self.index.reserve(n);
    }
    fn at_mut(&mut self, slot: u32) -> &mut Table {
        self.slab[slot as usize].as_mut().expect("live table slot")
    }
    fn get(&self, pfn: &u64) -> Option<&Table> {
        self.slot(pfn).map(|s| self.at(s))
    }
    /// Store `t` at frame `pfn`: whether it replaced a table stored there.
    fn insert(&mut self, pfn: u64, t: Table) -> bool {
        let k = pfn as usize & (KEPT_TABLES - 1);
        if self.kept_n != 0 && self.kept[k].0 == recent_key(pfn) {
            // The frame's kept entry: the index maps it to this slot
            // already, and no table is stored at it.
            let s = self.kept[k].1;
            self.kept[k] = (0, 0);
            self.kept_n -= 1;
            self.slab[s as usize] = Some(t);
            self.pfns[s as usize] = pfn;
            self.recent_entry(pfn).set((recent_key(pfn), s));
            return false;
        }
        // A slot from the free list, else a kept one (so the slab grows
        // exactly when it would without kept entries), else a new one.
        let free = match self.free.pop() {
            Some(s) => Some(s),
            None if self.kept_n != 0 => {
                let i = self
                    .kept
                    .iter()
                    .position(|e| e.0 != 0)
                    .expect("a kept entry");
                self.evict_kept(i);
                self.free.pop()
            }
            None => None,
        };
        let s = match free {
            Some(s) => {
                self.slab[s as usize] = Some(t);
                self.pfns[s as usize] = pfn;
                s
            }
            None => {
                self.slab.push(Some(t));
                self.pfns.push(pfn);
                (self.slab.len() - 1) as u32
            }
        };
        self.recent_entry(pfn).set((recent_key(pfn), s));
        if let Some(old) = self.index.insert(pfn, s) {
            self.slab[old as usize] = None;
            self.pfns[old as usize] = 0;
            self.free.push(old);
            return true;
        }
        false
    }
    /// Drop kept entry `i`: its index entry removed, its slot freed.
    #[cold]
    fn evict_kept(&mut self, i: usize) {
        let (key, s) = std::mem::replace(&mut self.kept[i], (0, 0));
        self.kept_n -= 1;
        let pfn = key.wrapping_sub(1);
        let gone = self.index.remove(&pfn);
        debug_assert_eq!(gone, Some(s), "a kept entry is the index's");
        self.free.push(s);
    }
    fn remove(&mut self, pfn: &u64) -> Option<Table> {
        let k = self.kept[*pfn as usize & (KEPT_TABLES - 1)].0;
        if k == recent_key(*pfn) {
            // Kept: no table stored at the frame.
            return None;
        }
        if self.keep && k == 0 {
            // The slot (the recent cache answers for the tables just
            // walked), its index entry kept for the frame.
            let s = self.slot(pfn)?;
            return self.remove_at(*pfn, s);
        }
        self.remove_unkept(pfn)
    }
    /// [`Tables::remove`] of the table at `pfn`, whose slot the caller
    /// has just looked up (`s`, [`Tables::slot`]).
    #[inline]
    fn remove_at(&mut self, pfn: u64, s: u32) -> Option<Table> {
        debug_assert_eq!(self.slot(&pfn), Some(s));
        let k = pfn as usize & (KEPT_TABLES - 1);
        // Kept only where the frame's entry is free: many tables freed in
        // a row (exit's, a stretch's) are removed as without keeping, not
        // each evicting the one before.
        if !self.keep || self.kept[k].0 != 0 {
            return self.remove_unkept(&pfn);
        }
        self.recent_entry(pfn).set((0, 0));
        self.kept[k] = (recent_key(pfn), s);
        self.kept_n += 1;
        self.pfns[s as usize] = 0;
        self.slab[s as usize].take()
    }
    /// [`Tables::remove`] without keeping: the index entry removed, the
    /// slot freed.
    fn remove_unkept(&mut self, pfn: &u64) -> Option<Table> {
        let e = self.recent_entry(*pfn);
        if e.get().0 == recent_key(*pfn) {
            e.set((0, 0));
        }
        let s = self.index.remove(pfn)?;
        // A kept entry is never in the index while keeping is off (turning
        // it off drops them all: `set_keep`).
        self.free.push(s);
        self.pfns[s as usize] = 0;
        self.slab[s as usize].take()
    }
    /// Turn keeping of removed tables' index entries on or off; off drops
    /// the entries kept.
    fn set_keep(&mut self, on: bool) {
        if !on {
            for i in 0..KEPT_TABLES {
                if self.kept[i].0 != 0 {
                    self.evict_kept(i);
                }
            }
        }
        self.keep = on;
    }
    fn len(&self) -> usize {
        self.index.len() - self.kept_n as usize
    }
    fn capacity(&self) -> usize {
        self.slab.capacity()
    }
}

impl std::ops::Index<&u64> for Tables {
    type Output = Table;
    fn index(&self, pfn: &u64) -> &Table {
        self.get(pfn).expect("table exists")
    }
}

/// Index of `va` in a table at `level`.
pub const fn index(level: u8, va: u64) -> usize {
    ((va >> (PAGE_SHIFT + TABLE_SHIFT * (level as u32 - 1))) as usize) & (PTRS_PER_TABLE - 1)
}

/// Bytes mapped by one entry at `level`.
pub const fn entry_span(level: u8) -> u64 {
    1 << (12 + 9 * (level as u32 - 1))
}

/// Whether no PMD entry's span (2 MiB) over `[addr, end)` lies inside
/// `[floor, ceiling)` (`ceiling` 0: the top of the address space). A
/// table is freed by `free_pgd_range()` only when the span of the entry
/// pointing at it lies inside, and an upper entry's span holds the PMD
/// spans of the addresses it covers, so then no table at any level can go
/// and the walk would free and count nothing. mremap's unmap of the range
/// it moved from (the moved-to VMA its ceiling, in the same PMD span)
/// returns here.
/// Linux: mm/memory.c free_pgd_range() (its first floor and ceiling trim
/// at PMD granularity returns for such a range too).
fn no_pte_span_inside(addr: u64, end: u64, floor: u64, ceiling: u64) -> bool {
    if addr >= end {
        return true;
    }
    let first = addr & !(PMD_SIZE - 1);
    let last = (end - 1) & !(PMD_SIZE - 1);
    // The lowest PMD span over the range that starts at or above `floor`.
    let lo = match first >= floor {
        true => first,
        false => match floor.checked_add(PMD_SIZE - 1) {
            Some(f) => f & !(PMD_SIZE - 1),
            None => return true,
        },
    };
    if lo > last {
        return true;
    }
    // Spans after it end higher: if it is not below the ceiling, none is.
    let inside = ceiling == 0 || lo + (PMD_SIZE - 1) <= ceiling.wrapping_sub(1);
    !inside
}

/// Whether an entry's span `[lo, lo + span)` lies in `[floor, ceiling)`
/// (`ceiling` 0 = the top of the address space), the test every level of
/// `free_pgd_range()` makes before it frees a table (Linux: mm/memory.c
/// free_pmd_range() etc., start/end masked against floor and ceiling).
fn span_inside(lo: u64, span: u64, floor: u64, ceiling: u64) -> bool {
    let hi = lo.wrapping_add(span);
    lo >= floor && (ceiling == 0 || hi.wrapping_sub(1) <= ceiling.wrapping_sub(1))
}

/// What the PMD slot covering an address holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PmdSlot {
    /// No PUD/PMD table or a none PMD entry.
    None,
    /// A PTE table in frame `Pfn`.
    Table(Pfn),
    /// A PMD block mapping.
    Leaf(Leaf),
}

/// One process's page-table tree.
#[derive(Clone, Debug)]
pub struct PageTables {
    arch: ArchKind,
    root: Pfn,
    tables: Tables,
    /// The last two PTE tables found by walks, the latest first, by 2 MiB
    /// slot, with their slab slots (a walk cache: it changes no result; any
    /// PMD-or-higher write and every table removal clears it). Two, so
    /// that operations alternating between a source and a destination
    /// table (mremap, UFFDIO_MOVE/COPY) walk neither again.
    walk_cache: Cell<[Option<(u64, Pfn, u32)>; 2]>,
    /// The PMD table found last, by 1 GiB slot, with its slab slot (a
    /// walk cache too, like the kernel's `pmd_t *` that copy_pmd_range()
    /// and zap_pmd_range() carry across a PUD's 512 slots: a walk that
    /// stays under one PUD entry finds its PMD table without walking
    /// down from the PGD). PMD writes keep it (they change no PMD
    /// table's place); PUD-or-higher writes and every table removal or
    /// replacement clear it.
    pmd_cache: Cell<Option<(u64, Pfn, u32)>>,
    /// The slab slots of the two PTE tables written last, the latest
    /// first: they stay dense while writes go to them, and the older one
    /// is compacted (stored as runs if it is a few affine runs, [`store`])
    /// when a write goes to a third table. Two, because walks of two
    /// address streams (mremap's `move_ptes()`, UFFDIO_MOVE) write a
    /// source and a destination table in turn.
    hot: [Option<u32>; 2],
    /// Whether PTE tables are compacted at all (off: every table stays
    /// dense, the reference the property tests compare against).
    pte_runs: bool,
    /// The dense buffer the last compaction freed, for the next table made
    /// dense ([`store::Spare`]).
    spare: store::Spare,
    /// Sticky: a swap entry or PTE marker has been stored in this tree
    /// since it was made (never cleared). Set where every PTE write
    /// passes ([`PageTables::write_raw`], [`PteTable::store_raw`],
    /// [`PteTable::write_affine`] of a non-present run), so the walks that
    /// look only for non-present entries (fork's copy of markers, exit's
    /// zap of swap entries and markers) skip an mm that never had one. A
    /// fork child's is set by the stores that copy such entries into it.
    /// The invariant checker recomputes it from the tables.
    nonpresent: Cell<bool>,
    /// Make and free a lone PUD → PMD → PTE chain in one step
    /// ([`PageTables::alloc_lone_chain`], [`PageTables::free_lone_chain`];
    /// `ModelConfig::table_chain_steps`). No observable effect.
    pub(crate) chain_steps: bool,
    /// Hardware events issued on behalf of this address space (counting
    /// changes no result). See [`crate::core::hw`].
    pub hw: HwSink,
}

impl PageTables {
    /// A tree with an empty PGD. Linux: mm_alloc_pgd().
    pub fn new(arch: ArchKind, phys: &mut PhysMem) -> Option<Self> {
        let root = phys.alloc_pt_page()?;
        let mut tables = Tables::default();
        tables.insert(root.0, Table::new(4));
        Some(PageTables {
            arch,
            root,
            tables,
            walk_cache: Cell::new([None; 2]),
            pmd_cache: Cell::new(None),
            hot: [None; 2],
            pte_runs: true,
            spare: None,
            nonpresent: Cell::new(false),
            chain_steps: true,
            hw: HwSink::new(Default::default()),
        })
    }

    pub fn arch(&self) -> &'static dyn Arch {
        self.arch.ops()
    }

    pub fn root(&self) -> Pfn {
        self.root
    }

    /// Keep the frame-index entry and slab slot of a table removed from
    /// the tree for a table made again at the same frame
    /// (`ModelConfig::keep_table_index`, issue 14, fifteenth session). No
    /// observable effect: the same lookups, table count and
    /// [`PageTables::memory_bytes`].
    pub fn set_keep_table_index(&mut self, on: bool) {
        self.tables.set_keep(on);
    }

    /// Table pages in the tree, PGD included.
    pub fn table_count(&self) -> usize {
        self.tables.len()
    }

    /// Room for `n` more tables in the tree's frame index (fork: the
    /// child's tree grows to about its parent's table count; no effect
    /// on any result).
    pub(crate) fn reserve_tables(&mut self, n: usize) {
        self.tables.reserve(n);
    }

    pub fn table(&self, pfn: Pfn) -> Option<&Table> {
        self.tables.get(&pfn.0)
    }

    /// Bytes of model memory the tables use: the slab, the frame index
    /// (16 B per table) and each table's entries (4 KiB dense, 24 B per
    /// run: [`Table::entry_bytes`]).
    pub fn memory_bytes(&self) -> usize {
        self.tables.capacity() * std::mem::size_of::<Option<Table>>()
            + self.tables.pfns.capacity() * 8
            + self.tables.len() * 16
            + self.spare.as_ref().map_or(0, |_| PTRS_PER_TABLE * 8)
            + self
                .tables
                .slab
                .iter()
                .flatten()
                .map(Table::entry_bytes)
                .sum::<usize>()
    }

    /// Store PTE tables as runs where they are (on by default); off, every
    /// table stays dense (a reference for tests). Turning it off makes
    /// every table dense now.
    pub fn set_pte_runs(&mut self, on: bool) {
        self.pte_runs = on;
        if !on {
            for t in self.tables.slab.iter_mut().flatten() {
                t.dense_mut();
            }
        }
    }

    /// Whether PTE tables are stored as runs where they can be.
    pub fn pte_runs(&self) -> bool {
        self.pte_runs
    }

    /// Compact every PTE table that is a few affine runs (what the write
    /// path does one table at a time).
    pub fn compact_tables(&mut self) {
        self.hot = [None; 2];
        if self.pte_runs {
            let arch = self.arch.ops();
            for t in self.tables.slab.iter_mut().flatten() {
                if t.level == 1 {
                    t.compact(|s| run_kinds(arch, s), &mut self.spare);
                }
            }
        }
    }

    /// PTE tables stored as runs and in all: `(compact, total)`.
    pub fn compact_table_count(&self) -> (usize, usize) {
        let ptes = self.tables.slab.iter().flatten().filter(|t| t.level == 1);
        let compact = ptes.clone().filter(|t| t.is_compact()).count();
        (compact, ptes.count())
    }

    /// The entries of the table in `slot` for writing: made dense. When
    /// the write goes to another PTE table than the last one, that one is
    /// compacted first (a walk has left it: the cheap point to look).
    fn dense_for_write(&mut self, slot: u32) -> &mut Table {
        self.note_write(slot);
        let t = self.tables.at_mut(slot);
        t.dense_mut_from(&mut self.spare);
        t
    }

    /// A write goes to the table in `slot` (it is made dense only if an
    /// entry changes): a PTE table not among the two written last becomes
    /// the latest, and the older of those two is compacted.
    fn note_write(&mut self, slot: u32) {
        if self.hot[0] == Some(slot) {
            return;
        }
        if self.hot[1] == Some(slot) {
            self.hot.swap(0, 1);
            return;
        }
        if self.tables.at(slot).level != 1 {
            return;
        }
        if let Some(prev) = self.hot[1].take() {
            if self.pte_runs {
                let arch = self.arch.ops();
                if let Some(Some(t)) = self.tables.slab.get_mut(prev as usize) {
                    if t.level == 1 {
                        t.compact(|s| run_kinds(arch, s), &mut self.spare);
                    }
                }
            }
        }
        self.hot = [Some(slot), self.hot[0]];
    }

    fn decode(&self, level: u8, raw: u64) -> Entry {
        self.arch.ops().decode(level, raw)
    }

    /// Frame of the table at `level` covering `va`, if it exists.
    pub fn table_at(&self, va: u64, level: u8) -> Option<Pfn> {
        if level == 2 {
            return self.pmd_table(va).map(|(p, _)| p);
        }
        let mut t = self.root;
        for l in (level + 1..=4).rev() {
            let tbl = &self.tables[&t.0];
            match self.decode(l, tbl.raw(index(l, va))) {
                Entry::Table(next) => t = next,
                _ => return None,
            }
        }
        Some(t)
    }

    /// The PMD table covering `va`, if it exists, with its slab slot
    /// (through [`PageTables::pmd_cache`]).
    fn pmd_table(&self, va: u64) -> Option<(Pfn, u32)> {
        let gb = va & !(PUD_SIZE - 1);
        if let Some((s, p, i)) = self.pmd_cache.get() {
            if s == gb {
                return Some((p, i));
            }
        }
        let mut t = self.root;
        for l in [4u8, 3] {
            let tbl = &self.tables[&t.0];
            match self.decode(l, tbl.raw(index(l, va))) {
                Entry::Table(next) => t = next,
                _ => return None,
            }
        }
        let i = self.tables.slot(&t.0)?;
        self.pmd_cache.set(Some((gb, t, i)));
        Some((t, i))
    }

    /// The PTE table of `va`'s 2 MiB slot if the walk cache holds it, with
    /// its slab slot.
    fn cached_pte_table(&self, va: u64) -> Option<(Pfn, u32)> {
        let slot = va & !(PMD_SIZE - 1);
        let [a, b] = self.walk_cache.get();
        match (a, b) {
            (Some((s, p, i)), _) if s == slot => Some((p, i)),
            (_, Some((s, p, i))) if s == slot => {
                // The older entry: make it the latest.
                self.walk_cache.set([b, a]);
                Some((p, i))
            }
            _ => None,
        }
    }

    /// Remember that `va`'s slot holds PTE table `p` (a walk found it);
    /// its slab slot.
    fn cache_pte_table(&self, va: u64, p: Pfn) -> Option<u32> {
        let i = self.tables.slot(&p.0);
        if let Some(i) = i {
            let slot = va & !(PMD_SIZE - 1);
            let [a, b] = self.walk_cache.get();
            // Keep the other slot's entry as the older one.
            let older = if a.is_some_and(|(s, _, _)| s == slot) {
                b
            } else {
                a
            };
            self.walk_cache.set([Some((slot, p, i)), older]);
        }
        i
    }

    /// The PTE table covering `va`, if there is one (through the walk
    /// cache: no lookup while a walk stays in one table).
    fn pte_tbl(&self, va: u64) -> Option<&Table> {
        if let Some((_, i)) = self.cached_pte_table(va) {
            return Some(self.tables.at(i));
        }
        match self.pmd(va) {
            PmdSlot::Table(_) => {
                let (_, i) = self.cached_pte_table(va)?;
                Some(self.tables.at(i))
            }
            _ => None,
        }
    }

    /// The slab slot of the PTE table covering `va` (through the walk
    /// cache), for writers that borrow the table and the event sink apart
    /// and for fused steps (`sys/uffd/fused.rs`) that find a table once and
    /// then read ([`PageTables::pte_raw_in`]) and write
    /// ([`PageTables::pte_table_in`]) it by slot. No event is counted.
    pub(crate) fn pte_tbl_slot(&self, va: u64) -> Option<u32> {
        match self.cached_pte_table(va) {
            Some((_, i)) => Some(i),
            None => match self.pmd(va) {
                PmdSlot::Table(_) => self.cached_pte_table(va).map(|(_, i)| i),
                _ => None,
            },
        }
    }

    /// Remove table `t` from the tree's store (its parent entry is cleared
    /// by the caller).
    fn remove_table(&mut self, t: Pfn) -> Option<Table> {
        self.walk_cache.set([None; 2]);
        self.pmd_cache.set(None);
        self.take_table(t)
    }

    /// [`PageTables::remove_table`] for a caller that has cleared the walk
    /// caches itself (once for several tables).
    fn take_table(&mut self, t: Pfn) -> Option<Table> {
        // No slot: no table stored at `t` (the index has no entry).
        let s = self.tables.slot(&t.0)?;
        for h in &mut self.hot {
            if *h == Some(s) {
                *h = None;
            }
        }
        self.tables.remove_at(t.0, s)
    }

    /// The PMD slot for `va`.
    pub fn pmd(&self, va: u64) -> PmdSlot {
        let slot = va & !(PMD_SIZE - 1);
        if let Some((p, _)) = self.cached_pte_table(slot) {
            return PmdSlot::Table(p);
        }
        let Some((_, t)) = self.pmd_table(va) else {
            return PmdSlot::None;
        };
        match self.decode(2, self.tables.at(t).raw(index(2, va))) {
            Entry::None | Entry::Swap(_) | Entry::Marker(_) => PmdSlot::None,
            Entry::Table(p) => {
                self.cache_pte_table(slot, p);
                PmdSlot::Table(p)
            }
            Entry::Leaf(l) => PmdSlot::Leaf(l),
        }
    }

    /// The PTE for `va` (none when no PTE table exists), as `ptep_get()`
    /// returns it, counting its loads (on arm64 a folded block reports the
    /// young/dirty bits gathered over the block: [`crate::core::arch::Arch::ptep_get`]).
    pub fn pte(&self, va: u64) -> Entry {
        let Some(tbl) = self.pte_tbl(va) else {
            return Entry::None;
        };
        let view = PteRef {
            arch: self.arch.ops(),
            entries: tbl.entries(),
            hw: &self.hw,
            base: va & !(PMD_SIZE - 1),
        };
        self.arch.ops().ptep_get(&view, index(1, va))
    }

    /// The frame `va` maps if an access needs no fault: present, accessible,
    /// and writable when `write`. Special (zero-page) entries satisfy reads
    /// only; PROT_NONE entries never.
    pub fn mapped_for_access(&self, va: u64, write: bool) -> Option<Pfn> {
        let leaf = match self.pmd(va) {
            PmdSlot::Leaf(l) => Leaf {
                pfn: l.pfn.add((va & (PMD_SIZE - 1)) >> 12),
                flags: l.flags,
            },
            PmdSlot::Table(_) => match self.pte_peek(va) {
                Entry::Leaf(l) => l,
                _ => return None,
            },
            PmdSlot::None => return None,
        };
        let ok = !leaf.flags.contains(LeafFlags::PROTNONE) && (!write || leaf.write());
        ok.then_some(leaf.pfn)
    }

    /// The hardware's dirty-bit update on a store through a writable leaf
    /// (PTE or PMD) at `va` that is clean: the MMU sets the bit itself
    /// (x86 D; arm64 DBM clears AP[2] on that one entry, a contiguous block
    /// stays folded). No kernel code runs, so nothing is counted. Only
    /// MADV_FREE's clear (clear_young_dirty_ptes(), pmd_mkclean()) and
    /// read-fault mappings leave a writable leaf clean.
    pub fn hw_mkdirty(&mut self, va: u64) {
        let (slot, level) = match self.pmd(va) {
            PmdSlot::Leaf(_) => match self.table_at(va, 2).and_then(|t| self.tables.slot(&t.0)) {
                Some(s) => (s, 2),
                None => return,
            },
            PmdSlot::Table(_) => match self.pte_tbl_slot(va) {
                Some(s) => (s, 1),
                None => return,
            },
            PmdSlot::None => return,
        };
        let arch = self.arch.ops();
        let i = index(level, va);
        if let Entry::Leaf(mut l) = arch.decode(level, self.tables.at(slot).raw(i)) {
            if l.write() && !l.flags.contains(LeafFlags::DIRTY) {
                l.flags |= LeafFlags::DIRTY;
                self.dense_for_write(slot).dense_mut()[i] = arch.encode_leaf(level, l);
            }
        }
    }

    /// A user access to `max` consecutive pages from `va` (in one PTE
    /// table) as far as they are mapped for it by present PTEs over
    /// consecutive frames: how many are (0 when the first is not), with
    /// the MMU's dirty-bit update of a store on each
    /// ([`PageTables::hw_mkdirty`]; nothing is counted). One step for a
    /// run of a large folio instead of a walk per page.
    pub fn access_run(&mut self, va: u64, max: u64, write: bool) -> u64 {
        let arch = self.arch.ops();
        let Some(slot) = self.pte_tbl_slot(va) else {
            return 0;
        };
        let i = index(1, va);
        let max = max.min((PTRS_PER_TABLE - i) as u64) as usize;
        let mut next_pfn = None;
        // Read through the table's representation; make it dense only when
        // a store sets a dirty bit.
        let mut entries = self.tables.at(slot).entries();
        let mut k = 0;
        while k < max {
            // A stretch of one run whose entries differ in their frame only,
            // mapped for the access and needing no dirty-bit update: what
            // the entry-by-entry loop below finds for each of them, at once.
            if let Some((l, span)) = uniform_leaf_span(arch, entries, i + k, max - k) {
                let ok = !l.flags.contains(LeafFlags::PROTNONE)
                    && (!write || (l.write() && l.flags.contains(LeafFlags::DIRTY)));
                if ok && next_pfn.is_none_or(|p| p == l.pfn.0) {
                    next_pfn = Some(l.pfn.0 + span as u64);
                    k += span;
                    continue;
                }
            }
            let Entry::Leaf(mut l) = arch.decode(1, entries.raw(i + k)) else {
                return k as u64;
            };
            let ok = !l.flags.contains(LeafFlags::PROTNONE) && (!write || l.write());
            if !ok || next_pfn.is_some_and(|p| p != l.pfn.0) {
                return k as u64;
            }
            next_pfn = Some(l.pfn.0 + 1);
            if write && !l.flags.contains(LeafFlags::DIRTY) {
                l.flags |= LeafFlags::DIRTY;
                self.dense_for_write(slot).dense_mut()[i + k] = arch.encode_leaf(1, l);
                entries = self.tables.at(slot).entries();
            }
            k += 1;
        }
        max as u64
    }

    /// The leaf at `va` and how many PTEs from it (at most `max`, in its
    /// table) hold the same bits over consecutive frames, read off the
    /// table's runs (at least 2; `None` for a dense table, a single entry
    /// or anything else). No event: the model's own look.
    pub fn uniform_pte_span(&self, va: u64, max: u64) -> Option<(Leaf, u64)> {
        let tbl = self.pte_tbl(va)?;
        let i = index(1, va);
        let max = max.min((PTRS_PER_TABLE - i) as u64) as usize;
        uniform_leaf_span(self.arch.ops(), tbl.entries(), i, max).map(|(l, n)| (l, n as u64))
    }

    /// Whether the `nr` PTEs from `va` (one table, which exists) are all
    /// none (raw 0: no leaf, swap entry or marker), read off the table's
    /// runs. No event: the model's own look.
    pub fn ptes_none(&self, va: u64, nr: u64) -> bool {
        let i = index(1, va);
        let Some(tbl) = self.pte_tbl(va) else {
            return false;
        };
        i + nr as usize <= PTRS_PER_TABLE && !tbl.entries().any(i..i + nr as usize, |r| r != 0)
    }

    /// Write the `rest` PTEs after the `nr` at `va` (one table) as the
    /// continuation of those: the same bits, the frames going on one by
    /// one — what a whole-stretch step writes for the batches after the
    /// one it did through the arch's hooks. `None`, writing nothing, when
    /// the `nr` entries are not one run of equal bits over consecutive
    /// frames or the continuation does not fit the table or the frame
    /// field. Uncounted: the caller counts the kernel's stores.
    pub fn extend_pte_run(&mut self, va: u64, nr: u64, rest: u64) -> Option<()> {
        let arch = self.arch.ops();
        let i = index(1, va);
        let (nr, rest) = (nr as usize, rest as usize);
        if nr < 2 || i + nr + rest > PTRS_PER_TABLE {
            return None;
        }
        let tbl = self.pte_tbl(va)?;
        let e0 = tbl.raw(i);
        let step = tbl.raw(i + 1).wrapping_sub(e0);
        let Entry::Leaf(l) = arch.decode(1, e0) else {
            return None;
        };
        let at = |k: usize| {
            arch.encode_leaf(
                1,
                Leaf {
                    pfn: l.pfn.add(k as u64),
                    flags: l.flags,
                },
            )
        };
        let affine = |k: usize| e0.wrapping_add(step.wrapping_mul(k as u64));
        // Inside one stored run the entries are affine by construction.
        let in_run = tbl.entries().run_at(i).is_some_and(|r| i + nr <= r.end());
        let batch_ok = in_run || (0..nr).all(|k| tbl.raw(i + k) == affine(k));
        let fits = [1, nr - 1, nr, nr + rest - 1]
            .iter()
            .all(|&k| at(k) == affine(k));
        if !(batch_ok && fits) {
            return None;
        }
        let (mut t, i) = self.pte_table(va);
        t.write_affine(i + nr, rest, affine(nr), step, Run::PRESENT);
        Some(())
    }

    /// [`PageTables::set_ptes`] of `nr` entries from `va` (the block of one
    /// new folio over none entries), then the `rest` entries after them
    /// written as their continuation, uncounted — what
    /// [`PageTables::extend_pte_run`] after the `set_ptes()` writes, with
    /// one table lookup and without its look at what is already there
    /// (the `set_ptes()` just wrote it). `None` when the continuation does
    /// not go on the block's descriptors (the block not one run a frame
    /// apart, or the last frame's descriptor not on it): then only the
    /// block is written (and counted), and the caller writes the rest.
    /// For the fused write (issue 14, fourteenth session).
    pub(crate) fn set_ptes_and_continue(
        &mut self,
        va: u64,
        leaf: Leaf,
        nr: u64,
        rest: u64,
        phys: &PhysMem,
    ) -> Option<()> {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.set_ptes(&mut t, i, leaf, nr as usize, phys);
        let (nr, rest) = (nr as usize, rest as usize);
        if rest == 0 {
            return Some(());
        }
        if nr < 2 || i + nr + rest > PTRS_PER_TABLE {
            return None;
        }
        let e0 = t.raw(i);
        let step = t.raw(i + 1).wrapping_sub(e0);
        let affine = |k: usize| e0.wrapping_add(step.wrapping_mul(k as u64));
        // The block as set_ptes() left it is one run a frame apart, and
        // the continuation's last descriptor is the block's (no carry out
        // of the frame field; the same bits and painting).
        // (The descriptors are affine in the frame while the frame field
        // does not carry, so the two ends decide it.)
        let last = nr + rest - 1;
        let Entry::Leaf(l) = arch.decode(1, e0) else {
            return None;
        };
        let at_last = Leaf {
            pfn: l.pfn.add(last as u64),
            flags: l.flags,
        };
        if t.raw(i + nr - 1) != affine(nr - 1) || arch.encode_leaf(1, at_last) != affine(last) {
            return None;
        }
        t.write_affine(i + nr, rest, affine(nr), step, Run::PRESENT);
        Some(())
    }

    /// `clear_young_dirty_ptes(CYDP_CLEAR_YOUNG | CYDP_CLEAR_DIRTY)` on `nr`
    /// present PTEs from `va` (one table): the generic version's
    /// `ptep_get_and_clear()` + `set_pte_at()` per entry (one atomic clear
    /// and one store each). arm64's contpte version clears the bits
    /// without unfolding, so CONT is kept here on both.
    /// Linux: include/linux/pgtable.h clear_young_dirty_ptes(),
    /// arch/arm64/mm/contpte.c contpte_clear_young_dirty_ptes().
    pub fn clear_young_dirty_ptes(&mut self, va: u64, nr: u64) {
        let (t, i) = self.pte_slot(va);
        for k in 0..nr as usize {
            let raw = self.tables[&t.0].raw(i + k);
            if let Entry::Leaf(mut l) = self.decode(1, raw) {
                l.flags -= LeafFlags::YOUNG | LeafFlags::DIRTY;
                let new = self.arch.ops().encode_leaf(1, l);
                self.hw.one(HwEvent::PteAtomicClear);
                self.hw.one(HwEvent::PteStore);
                let slot = self.tables.slot(&t.0).expect("table");
                self.dense_for_write(slot).dense_mut()[i + k] = new;
            }
        }
    }

    /// `pmdp_invalidate()` + `pmd_mkold()` + `pmd_mkclean()` +
    /// `set_pmd_at()` of the PMD leaf at `va` (MADV_FREE of a whole PMD
    /// THP). Linux: mm/huge_memory.c madvise_free_huge_pmd().
    pub fn pmd_mkold_mkclean(&mut self, va: u64) {
        if let PmdSlot::Leaf(mut l) = self.pmd(va) {
            self.arch.ops().pmdp_invalidate_ad(&self.hw, va);
            l.flags -= LeafFlags::YOUNG | LeafFlags::DIRTY;
            self.set_pmd(va, Entry::Leaf(l));
        }
    }

    /// The PTE at `va` if it maps a normal page (present, not the zero
    /// page), as `ptep_get()` + `vm_normal_folio()` find it in a PTE walk
    /// of anonymous memory (the load counted).
    pub fn normal_pte(&self, va: u64) -> Option<Leaf> {
        match self.pte(va) {
            Entry::Leaf(l) if !l.flags.contains(LeafFlags::SPECIAL) => Some(l),
            _ => None,
        }
    }

    /// The raw PTE without contpte gathering, as the kernel's `__ptep_get()`
    /// / `pte_none(ptep_get())` checks read it: counts one PTE load.
    pub fn pte_raw(&self, va: u64) -> Entry {
        self.hw.one(HwEvent::PteLoad);
        self.pte_peek(va)
    }

    /// `pte_none()` of the raw PTE, counted as [`PageTables::pte_raw`]
    /// counts it (one PTE load), without decoding the entry: the encoders
    /// write 0 for a none entry and no other entry is 0.
    pub fn pte_raw_is_none(&self, va: u64) -> bool {
        self.hw.one(HwEvent::PteLoad);
        self.pte_tbl(va).is_none_or(|t| t.raw(index(1, va)) == 0)
    }

    /// Whether the PTE at `va` is a swap entry or a marker (non-present,
    /// not none), without decoding a present one; no event is counted.
    pub fn pte_is_nonpresent(&self, va: u64) -> bool {
        self.pte_tbl(va).is_some_and(|t| {
            let raw = t.raw(index(1, va));
            raw != 0 && !self.arch.ops().pte_present_raw(raw)
        })
    }

    /// The raw entries of the PTE table covering `va` and `va`'s index in
    /// it (no event counted), for per-segment loops that count the loads
    /// they stand for themselves. A compact table ([`store`]) is read
    /// through its runs, never copied.
    #[inline]
    pub(crate) fn pte_entries(&self, va: u64) -> Option<(Entries<'_>, usize)> {
        Some((self.pte_tbl(va)?.entries(), index(1, va)))
    }

    /// The raw descriptor of `va`'s PTE in the PTE table at slab slot
    /// `slot` ([`PageTables::pte_tbl_slot`] of `va`): no event is counted
    /// (the caller counts the kernel's loads).
    #[inline]
    pub(crate) fn pte_raw_in(&self, slot: u32, va: u64) -> u64 {
        debug_assert_eq!(self.pte_tbl_slot(va), Some(slot));
        self.tables.at(slot).raw(index(1, va))
    }

    /// The raw PTE, for the model's own bookkeeping and observation: no
    /// event is counted (the kernel does no such read).
    pub fn pte_peek(&self, va: u64) -> Entry {
        let Some(tbl) = self.pte_tbl(va) else {
            return Entry::None;
        };
        self.decode(1, tbl.raw(index(1, va)))
    }

    /// A new empty table: no runs, or 512 zero entries when tables are
    /// kept dense.
    fn empty_table(&self, level: u8) -> Table {
        let mut t = Table::new(level);
        if !self.pte_runs {
            t.dense_mut();
        }
        t
    }

    fn new_table(&mut self, level: u8, phys: &mut PhysMem) -> Option<Pfn> {
        let pfn = phys.alloc_pt_page()?;
        self.insert_table(pfn, level);
        Some(pfn)
    }

    /// Store a new empty table at frame `pfn`; a table already stored
    /// there is replaced (and the walk caches, which may name its slot,
    /// are cleared).
    fn insert_table(&mut self, pfn: Pfn, level: u8) {
        if self.tables.insert(pfn.0, self.empty_table(level)) {
            self.walk_cache.set([None; 2]);
            self.pmd_cache.set(None);
        }
    }

    fn write_raw(&mut self, table: Pfn, level: u8, i: usize, raw: u64) {
        if level >= 2 {
            self.walk_cache.set([None; 2]);
            if level >= 3 {
                self.pmd_cache.set(None);
            }
            // set_pmd_at / pmd_populate / pmd_clear; pud_populate / pud_clear.
            match level {
                2 => self.hw.one(HwEvent::PmdStore),
                _ => self.hw.one(HwEvent::PudStore),
            }
        }
        // The encoders write 0 for a none entry and never produce a non-zero
        // descriptor that decodes as none.
        let slot = self.tables.slot(&table.0).expect("table exists");
        if level == 1 && raw != 0 && !self.arch.ops().pte_present_raw(raw) {
            self.nonpresent.set(true);
        }
        // An upper-level table stored as runs (a new one holds none) takes
        // the entry as a run of one: no 4 KiB table materialised for the
        // one or two entries a PMD or PUD table of a small mapping holds.
        if level >= 2 && self.tables.at(slot).is_compact() {
            let new = (raw != 0).then_some(Run {
                start: i as u16,
                len: 1,
                kinds: run_kinds(self.arch.ops(), &[raw]),
                first: raw,
                step: 0,
            });
            if self.tables.at_mut(slot).splice(i, i + 1, new) {
                return;
            }
        }
        self.dense_for_write(slot);
        let (entries, used) = self.tables.at_mut(slot).dense_and_used(&mut None);
        let none_before = entries[i] == 0;
        let none_after = raw == 0;
        entries[i] = raw;
        match (none_before, none_after) {
            (true, false) => *used += 1,
            (false, true) => *used -= 1,
            _ => {}
        }
    }

    /// Make sure the PUD and PMD tables for `va` exist; returns the PMD table.
    /// Linux: mm/memory.c __pud_alloc(), __pmd_alloc().
    pub fn pmd_alloc(&mut self, va: u64, phys: &mut PhysMem) -> Option<Pfn> {
        if let Some((p, _)) = self.pmd_table(va) {
            return Some(p);
        }
        let mut t = self.root;
        for l in [4u8, 3] {
            let i = index(l, va);
            t = match self.decode(l, self.tables[&t.0].raw(i)) {
                Entry::Table(next) => next,
                _ => {
                    let next = self.new_table(l - 1, phys)?;
                    let raw = self.arch.ops().encode_table(l, next);
                    self.write_raw(t, l, i, raw);
                    next
                }
            };
        }
        Some(t)
    }

    /// Make sure a PTE table exists for `va`. Fails (`None`) when memory is
    /// exhausted or a PMD leaf occupies the slot. Linux: __pte_alloc().
    pub fn pte_alloc(&mut self, va: u64, phys: &mut PhysMem) -> Option<Pfn> {
        if let PmdSlot::Table(p) = self.pmd(va) {
            return Some(p);
        }
        if self.chain_steps && self.tables[&self.root.0].raw(index(4, va)) == 0 {
            return self.alloc_lone_chain(va, phys);
        }
        let pmd_t = self.pmd_alloc(va, phys)?;
        let i = index(2, va);
        let (_, pmd_slot) = self.pmd_table(va)?;
        match self.decode(2, self.tables.at(pmd_slot).raw(i)) {
            Entry::Table(p) => Some(p),
            Entry::Leaf(_) | Entry::Swap(_) | Entry::Marker(_) => None,
            Entry::None => {
                let p = self.new_table(1, phys)?;
                let raw = self.arch.ops().encode_table(2, p);
                self.write_raw(pmd_t, 2, i, raw);
                Some(p)
            }
        }
    }

    /// [`PageTables::pte_alloc`] for a caller that has just found the PMD
    /// slot of `va` none ([`PageTables::pmd`]): the same, without walking
    /// to the slot again first (issue 14, fourteenth session).
    pub(crate) fn pte_alloc_from_none(&mut self, va: u64, phys: &mut PhysMem) -> Option<Pfn> {
        debug_assert_eq!(self.pmd(va), PmdSlot::None, "the caller saw the slot none");
        if self.chain_steps && self.tables[&self.root.0].raw(index(4, va)) == 0 {
            return self.alloc_lone_chain(va, phys);
        }
        self.pte_alloc(va, phys)
    }

    /// [`PageTables::pte_alloc`] where the PGD entry of `va` is none: the
    /// PUD, PMD and PTE tables made one after the other, each linked into
    /// the table above before the next is allocated — the events, frames
    /// and order of `pmd_alloc()` and the PTE step (a failed allocation
    /// leaves the tables made before it linked, as there), without
    /// walking down again to tables just made (empty: each slot is none).
    /// Linux: mm/memory.c __pud_alloc(), __pmd_alloc(), __pte_alloc().
    fn alloc_lone_chain(&mut self, va: u64, phys: &mut PhysMem) -> Option<Pfn> {
        let mut t = self.root;
        let mut pmd_table = t;
        // The pages three single `alloc_pt_page()` calls in a row hand
        // out, taken in one step while consecutive (issue 14, thirteenth
        // session: one buddy pop instead of three, one memmap range); the
        // rest, if any, one by one below, where a failure leaves the
        // tables made before it linked as the single calls would.
        let (first, n) = phys.alloc_pt_page_run(3).unwrap_or((Pfn(0), 0));
        if n == 3 && self.pte_runs {
            return Some(self.link_chain_run(va, first));
        }
        for (k, l) in [4u8, 3, 2].into_iter().enumerate() {
            let next = if (k as u64) < n {
                let p = first.add(k as u64);
                self.insert_table(p, l - 1);
                p
            } else {
                self.new_table(l - 1, phys)?
            };
            let raw = self.arch.ops().encode_table(l, next);
            self.write_raw(t, l, index(l, va), raw);
            t = next;
            if l == 3 {
                pmd_table = next;
            }
        }
        // The walk caches as the next walk to `va` would fill them (the
        // PMD table of its PUD span, the PTE table of its PMD slot): the
        // fault after the chain walks to the tables just made, and each
        // walk from the root looks up three tables (issue 14,
        // mremap-batch-64k's twelfth session). Reads only: nothing counted.
        if let Some(i) = self.tables.slot(&pmd_table.0) {
            self.pmd_cache
                .set(Some((va & !(PUD_SIZE - 1), pmd_table, i)));
        }
        self.cache_pte_table(va, t);
        crate::core::diag::took(crate::core::diag::Step::ChainAlloc);
        Some(t)
    }

    /// [`PageTables::alloc_lone_chain`] when its three pages came as one
    /// run (`pages`: the PUD, PMD and PTE tables, in that order) and new
    /// upper tables are stored as runs: the PUD and PMD tables are stored
    /// already holding their one entry — what `write_raw()` of that entry
    /// into the new empty table leaves ([`Table::with_run`]), with its
    /// store counted (`PudStore`, `PmdStore`) — and only the PGD entry is
    /// written. The same tables, entries, events and frames as linking
    /// them one by one (issue 14, thirteenth session).
    /// Linux: mm/memory.c __pud_alloc(), __pmd_alloc(), __pte_alloc().
    fn link_chain_run(&mut self, va: u64, first: Pfn) -> Pfn {
        let (pud, pmd, pte) = (first, first.add(1), first.add(2));
        for (t, l, child) in [(pud, 3u8, pmd), (pmd, 2, pte)] {
            let raw = self.arch.ops().encode_table(l, child);
            let run = Run {
                start: index(l, va) as u16,
                len: 1,
                kinds: run_kinds(self.arch.ops(), &[raw]),
                first: raw,
                step: 0,
            };
            if self.tables.insert(t.0, Table::with_run(l, run)) {
                self.walk_cache.set([None; 2]);
                self.pmd_cache.set(None);
            }
            // set_pmd_at / pmd_populate; pud_populate.
            self.hw.one(match l {
                2 => HwEvent::PmdStore,
                _ => HwEvent::PudStore,
            });
        }
        self.insert_table(pte, 1);
        let raw = self.arch.ops().encode_table(4, pud);
        let i4 = index(4, va);
        // A root holding nothing, stored as runs (a lone mapping's chain
        // made again after `free_lone_chain()` left the root new and
        // empty): the entry stored as the table's one run, what
        // `write_raw()` → `Table::splice()` leaves in an empty table
        // ([`Table::with_run`]), with `write_raw()`'s cache clears and
        // `PudStore` (issue 14, fifteenth session; under
        // `table_chain_steps`, as the whole chain step); any other root
        // through `write_raw()`.
        let rs = self.tables.slot(&self.root.0).expect("root table");
        let empty = {
            let t = self.tables.at(rs);
            t.used == 0 && t.runs().is_some_and(|r| r.is_empty())
        };
        if empty {
            self.walk_cache.set([None; 2]);
            self.pmd_cache.set(None);
            self.hw.one(HwEvent::PudStore);
            let run = Run {
                start: i4 as u16,
                len: 1,
                kinds: run_kinds(self.arch.ops(), &[raw]),
                first: raw,
                step: 0,
            };
            *self.tables.at_mut(rs) = Table::with_run(4, run);
        } else {
            self.write_raw(self.root, 4, i4, raw);
        }
        if let Some(i) = self.tables.slot(&pmd.0) {
            self.pmd_cache.set(Some((va & !(PUD_SIZE - 1), pmd, i)));
        }
        self.cache_pte_table(va, pte);
        crate::core::diag::took(crate::core::diag::Step::ChainAlloc);
        pte
    }

    /// [`PageTables::free_pgd_range`] where `[addr, end)` lies in one PMD
    /// entry's span, that span's PGD entry's whole span is inside
    /// `[floor, ceiling)` (so the PMD and PUD spans are too), and the
    /// tables under it are a lone chain: a PUD table holding only the PMD
    /// table, which holds only an empty PTE table. Level by level, the
    /// PTE table would be freed and its PMD entry cleared, leaving the
    /// PMD table empty, so freed with its PUD entry cleared, and so the
    /// PUD table with its PGD entry: the same frees and stores in the same
    /// order here, without the walk, the emptiness checks and the two
    /// stores into tables freed right after (their events still counted).
    /// Whether it applied (nothing done otherwise).
    /// Linux: mm/memory.c free_pgd_range() → free_pte_range().
    fn free_lone_chain(
        &mut self,
        addr: u64,
        end: u64,
        floor: u64,
        ceiling: u64,
        phys: &mut PhysMem,
        freed: &mut impl FnMut(u8, u64),
    ) -> bool {
        if addr >= end || addr / PMD_SIZE != (end - 1) / PMD_SIZE {
            return false;
        }
        let span = entry_span(4);
        let lo = addr & !(span - 1);
        if !span_inside(lo, span, floor, ceiling) {
            return false;
        }
        let i4 = index(4, addr);
        let Entry::Table(pud) = self.decode(4, self.tables[&self.root.0].raw(i4)) else {
            return false;
        };
        let only = |s: &Self, t: Pfn, level: u8| -> Option<Pfn> {
            let tbl = s.tables.get(&t.0)?;
            if tbl.used != 1 {
                return None;
            }
            match s.decode(level, tbl.raw(index(level, addr))) {
                Entry::Table(c) => Some(c),
                _ => None,
            }
        };
        let Some(pmd) = only(self, pud, 3) else {
            return false;
        };
        let Some(pte) = only(self, pmd, 2) else {
            return false;
        };
        if self.tables.get(&pte.0).is_none_or(|t| t.used != 0) {
            return false;
        }
        // The three pages given back as one range when they are
        // consecutive (as `alloc_lone_chain()` takes them): the same
        // events, memmap and free lists as the three single frees (issue
        // 14, thirteenth session).
        let range = pmd.0 == pud.0 + 1 && pte.0 == pud.0 + 2;
        // remove_table() of the three: the walk caches cleared once (issue
        // 14, fourteenth session), each table's hot slot forgotten and the
        // table taken out.
        self.walk_cache.set([None; 2]);
        self.pmd_cache.set(None);
        for (t, store) in [(pte, HwEvent::PmdStore), (pmd, HwEvent::PudStore)] {
            self.take_table(t);
            if !range {
                phys.free_pt_page(t);
            }
            self.hw.one(store);
        }
        self.take_table(pud);
        if range {
            phys.free_pt_page_range(pud, 3);
        } else {
            phys.free_pt_page(pud);
        }
        // The PGD entry cleared (write_raw(): its caches — cleared above —
        // and its PudStore). A root holding this entry alone (a lone
        // mapping's chain) is left as a new empty table, which is what
        // splicing its one run out leaves (issue 14, fourteenth session);
        // else the splice.
        let rs = self.tables.slot(&self.root.0).expect("root table");
        let alone = self
            .tables
            .at(rs)
            .runs()
            .is_some_and(|r| matches!(r, [x] if x.start as usize == i4 && x.len == 1));
        if alone {
            self.hw.one(HwEvent::PudStore);
            let t = self.tables.at_mut(rs);
            *t = Table::new(t.level);
        } else {
            self.write_raw(self.root, 4, i4, 0);
        }
        // The three *_free_tlb() calls, each at its parent entry's span.
        freed(1, addr & !(PMD_SIZE - 1));
        freed(2, addr & !(PUD_SIZE - 1));
        freed(3, lo);
        freed(4, lo);
        crate::core::diag::took(crate::core::diag::Step::ChainFree);
        true
    }

    /// The entry at `level` (2 = PMD, 3 = PUD, 4 = PGD) covering `va`, or
    /// `Entry::None` when the table that would hold it does not exist.
    pub fn entry(&self, va: u64, level: u8) -> Entry {
        match self.table_at(va, level) {
            Some(t) => self.decode(level, self.tables[&t.0].raw(index(level, va))),
            None => Entry::None,
        }
    }

    /// Make sure the PUD table for `va` exists; returns it.
    /// Linux: mm/mremap.c alloc_new_pud() → p4d_alloc(), pud_alloc().
    pub fn pud_alloc(&mut self, va: u64, phys: &mut PhysMem) -> Option<Pfn> {
        let (root, i) = (self.root, index(4, va));
        match self.decode(4, self.tables[&root.0].raw(i)) {
            Entry::Table(t) => Some(t),
            _ => {
                let t = self.new_table(3, phys)?;
                let raw = self.arch.ops().encode_table(4, t);
                self.write_raw(root, 4, i, raw);
                Some(t)
            }
        }
    }

    /// Point the PUD entry for `va` at PMD table `e` or clear it (the PUD
    /// table must exist; anonymous memory has no PUD leaves).
    /// Linux: pud_populate() / pud_clear().
    pub fn set_pud(&mut self, va: u64, e: Entry) {
        let t = self.table_at(va, 3).expect("PUD table exists");
        let raw = match e {
            Entry::None => 0,
            Entry::Table(p) => self.arch.ops().encode_table(3, p),
            Entry::Leaf(_) | Entry::Swap(_) | Entry::Marker(_) => {
                panic!("no PUD leaves for anonymous memory")
            }
        };
        self.write_raw(t, 3, index(3, va), raw);
    }

    /// Install or clear the PMD entry for `va` (the PMD table must exist).
    pub fn set_pmd(&mut self, va: u64, e: Entry) {
        let t = self.table_at(va, 2).expect("PMD table exists");
        let raw = match e {
            Entry::None => 0,
            Entry::Table(p) => self.arch.ops().encode_table(2, p),
            Entry::Leaf(l) => self.arch.ops().encode_leaf(2, l),
            Entry::Swap(_) | Entry::Marker(_) => {
                panic!("no PMD swap entries or markers for anonymous memory")
            }
        };
        self.write_raw(t, 2, index(2, va), raw);
    }

    /// Install the (empty) page-table page `table` as the PTE table of the
    /// PMD slot at `va`, replacing a PMD leaf: used when a PMD mapping is split
    /// into the table deposited with it (pgtable_trans_huge_withdraw()).
    pub fn install_pte_table(&mut self, va: u64, table: Pfn) {
        self.insert_table(table, 1);
        self.set_pmd(va, Entry::Table(table));
    }

    /// Detach the (empty) PTE table under `va`'s PMD slot without freeing
    /// its page, which the caller deposits with a new PMD mapping
    /// (pgtable_trans_huge_deposit() in collapse_huge_page()).
    pub fn detach_pte_table(&mut self, va: u64) -> Option<Pfn> {
        let PmdSlot::Table(p) = self.pmd(va) else {
            return None;
        };
        debug_assert_eq!(self.tables[&p.0].used, 0, "detaching a non-empty PTE table");
        self.set_pmd(va, Entry::None);
        self.remove_table(p);
        Some(p)
    }

    /// Detach and free the PTE table under `va`'s PMD slot.
    pub fn free_pte_table(&mut self, va: u64, phys: &mut PhysMem) {
        if let PmdSlot::Table(p) = self.pmd(va) {
            debug_assert_eq!(self.tables[&p.0].used, 0, "freeing a non-empty PTE table");
            self.set_pmd(va, Entry::None);
            self.remove_table(p);
            phys.free_pt_page(p);
        }
    }

    fn pte_slot(&self, va: u64) -> (Pfn, usize) {
        match self.pmd(va) {
            PmdSlot::Table(t) => (t, index(1, va)),
            other => panic!("no PTE table at {va:#x}: {other:?}"),
        }
    }

    /// The PTE table covering `va` as the arch hooks see it, and `va`'s
    /// index in it. Panics when there is no PTE table (callers allocate or
    /// check first, as the kernel's `pte_offset_map_lock()` callers do).
    pub(crate) fn pte_table(&mut self, va: u64) -> (PteTable<'_>, usize) {
        let Some(slot) = self.pte_tbl_slot(va) else {
            panic!("no PTE table at {va:#x}: {:?}", self.pmd(va));
        };
        (self.pte_table_in(slot, va), index(1, va))
    }

    /// `set_ptes()`: map `nr` consecutive pages starting at `leaf.pfn` at
    /// `va` (all entries none before when `nr > 1`; `nr == 1` is
    /// `set_pte_at()`). See [`crate::core::arch::Arch::set_ptes`]: on arm64 the
    /// contpte layer paints, unfolds and folds.
    pub fn set_ptes(&mut self, va: u64, leaf: Leaf, nr: u64, phys: &PhysMem) {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.set_ptes(&mut t, i, leaf, nr as usize, phys);
    }

    /// Change one present PTE in place without a fold attempt: the
    /// single-entry mutators that are not `set_pte_at()` —
    /// `ptep_set_wrprotect()`, `ptep_set_access_flags()` with a write-bit
    /// change ([`crate::core::arch::Arch::ptep_modify`]). For a replacement
    /// through `set_pte_at()` use [`PageTables::set_ptes`] with `nr == 1`,
    /// which may refold.
    pub fn modify_pte(&mut self, va: u64, leaf: Leaf) {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.ptep_modify(&mut t, i, leaf);
    }

    /// `wrprotect_ptes()`: write-protect `nr` present PTEs from `va` (within
    /// one table) as one batch ([`crate::core::arch::Arch::wrprotect_ptes`]).
    pub fn wrprotect_ptes(&mut self, va: u64, nr: u64) {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.wrprotect_ptes(&mut t, i, nr as usize);
    }

    /// `get_and_clear_full_ptes()`: clear `nr` PTEs from `va` (within one
    /// table) as one batch, returning the present ones with their addresses
    /// ([`crate::core::arch::Arch::get_and_clear_full_ptes`]).
    pub fn clear_ptes(&mut self, va: u64, nr: u64) -> Vec<(u64, Leaf)> {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        let cleared = arch.get_and_clear_full_ptes(&mut t, i, nr as usize);
        cleared.into_iter().map(|(j, l)| (t.va(j), l)).collect()
    }

    /// `ptep_get_and_clear()`: clear the PTE at `va` (the same stores and
    /// counts as [`PageTables::clear_ptes`] of one entry) and return it
    /// when it was present — without a list, for single-page paths
    /// (UFFDIO_MOVE). ([`crate::core::arch::Arch::ptep_get_and_clear`].)
    pub fn ptep_get_and_clear(&mut self, va: u64) -> Option<Leaf> {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.ptep_get_and_clear(&mut t, i)
    }

    /// [`PageTables::clear_ptes`] keeping a run of present entries as one
    /// ([`ClearedPtes`], by table index): the same state change and
    /// events, no list built for a run.
    pub fn clear_ptes_batch(&mut self, va: u64, nr: u64) -> ClearedPtes {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.get_and_clear_full_ptes_batch(&mut t, i, nr as usize)
    }

    /// `modify_prot_start_ptes()`: clear one batch of `nr` PTEs and return
    /// the first with the young/dirty bits of all of them gathered.
    pub fn modify_prot_start_ptes(&mut self, va: u64, nr: u64) -> Leaf {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.modify_prot_start_ptes(&mut t, i, nr as usize)
    }

    /// `modify_prot_commit_ptes()`: write a batch back.
    pub fn modify_prot_commit_ptes(&mut self, va: u64, leaf: Leaf, nr: u64, phys: &PhysMem) {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.modify_prot_commit_ptes(&mut t, i, leaf, nr as usize, phys);
    }

    /// `pte_batch_hint()` for the entry at `va` holding `leaf`.
    pub fn pte_batch_hint(&self, va: u64, leaf: &Leaf) -> u64 {
        self.arch.ops().pte_batch_hint(index(1, va), leaf) as u64
    }

    /// `flush_tlb_range()`: flush user TLB entries for `[start, end)` at
    /// `stride` with the arch's recipe. Changes no state.
    pub fn flush_tlb_range(&self, start: u64, end: u64, stride: u64) {
        self.arch
            .ops()
            .flush_tlb_range(&self.hw, start, end, stride);
    }

    /// Reclaim's flush of the PTEs just cleared in `[start, end)`
    /// ([`crate::core::arch::Arch::tlbbatch_add_pending`]).
    pub fn tlbbatch_add_pending(&self, start: u64, end: u64) {
        self.arch.ops().tlbbatch_add_pending(&self.hw, start, end);
    }

    /// Complete reclaim's deferred flushes
    /// ([`crate::core::arch::Arch::tlbbatch_flush`]).
    pub fn tlbbatch_flush(&self) {
        self.arch.ops().tlbbatch_flush(&self.hw);
    }

    /// `flush_tlb_page()`: one page. arm64: DSB ISHST; TLBI VALE1IS; DSB
    /// ISH; x86: `flush_tlb_mm_range()` of one page.
    pub fn flush_tlb_page(&self, va: u64) {
        self.flush_tlb_range(
            va,
            va + crate::core::addr::PAGE_SIZE,
            crate::core::addr::PAGE_SIZE,
        );
    }

    /// `flush_tlb_mm()`: the whole address space.
    pub fn flush_tlb_mm(&self) {
        self.arch.ops().flush_tlb_mm(&self.hw);
    }

    /// `pmdp_invalidate_ad()` of the PMD at `addr` ([`crate::core::arch::Arch::pmdp_invalidate_ad`]).
    pub fn pmdp_invalidate_ad(&self, addr: u64) {
        self.arch.ops().pmdp_invalidate_ad(&self.hw, addr);
    }

    /// `pte_needs_flush(old, new)` of this architecture.
    pub fn pte_needs_flush(&self, old: &Leaf, new: &Leaf) -> bool {
        self.arch.ops().pte_needs_flush(old, new)
    }

    /// Present leaves in `[start, end)`: `(va, level, leaf)` with level 2 for
    /// PMD blocks (reported once, at the block's start). A walk with a
    /// [`Cursor`]; no event is counted.
    pub fn leaves(&self, start: u64, end: u64) -> Vec<(u64, u8, Leaf)> {
        let mut out = Vec::new();
        self.for_each_leaf(start, end, |va, level, leaf| out.push((va, level, leaf)));
        out
    }

    /// [`PageTables::leaves`] handed to `f` one by one, without collecting
    /// them (an observation of a 1 TiB range of PTEs keeps no list).
    pub fn for_each_leaf(&self, start: u64, end: u64, mut f: impl FnMut(u64, u8, Leaf)) {
        self.for_each(Cursor::ptes(start, end), |q| match q.item {
            PtItem::Pte(l) => f(q.va, 1, l),
            PtItem::Huge { level, leaf } => f(q.entry_start(), level, leaf),
            _ => {}
        });
    }

    /// The 2 MiB slots in `[start, end)` whose PMD entry is not none (a PTE
    /// table or a PMD leaf), as slot start addresses in increasing order.
    /// A PMD-level [`Cursor`] walk: only existing tables, and only the
    /// entries of each that overlap the range; a none PGD/PUD/PMD entry
    /// costs one look however much it covers. No event is counted
    /// (observation and bookkeeping only). Linux: mm/pagewalk.c
    /// walk_pgd_range() with a pte_hole callback, which fs/proc/task_mmu.c
    /// pagemap_read() uses the same way.
    pub fn populated_slots(&self, start: u64, end: u64) -> Vec<u64> {
        let mut out = Vec::new();
        self.for_each(Cursor::pmds(start, end), |q| match q.item {
            PtItem::PteTable(_) | PtItem::Huge { .. } => out.push(q.va & !(PMD_SIZE - 1)),
            _ => {}
        });
        out
    }

    /// Every table page in the tree with the address range it covers:
    /// `(frame, level, start)`.
    pub fn tables_in_tree(&self) -> Vec<(Pfn, u8, u64)> {
        let mut out = vec![(self.root, 4, 0)];
        let mut i = 0;
        while i < out.len() {
            let (t, level, base) = out[i];
            if level > 1 {
                let tbl = &self.tables[&t.0];
                for (j, raw) in tbl.entries().nonzero() {
                    if let Entry::Table(next) = self.decode(level, raw) {
                        out.push((next, level - 1, base + j as u64 * entry_span(level)));
                    }
                }
            }
            i += 1;
        }
        out
    }

    /// Free page tables in `[addr, end)` no longer needed between `floor`
    /// and `ceiling` (0 = top of the address space), reporting each freed
    /// table to `freed` as `(level, addr)` — 1 = PTE table, 2 = PMD table,
    /// 3 = PUD table, `addr` the start of its parent entry's span — which is
    /// what its `*_free_tlb()` gathers (`MmuGather::table_freed()`), and
    /// (level 4) each PGD entry whose span lies in `[floor, ceiling)`,
    /// where free_p4d_range() calls `p4d_free_tlb()` with or without a
    /// PUD table under it.
    /// Linux: mm/memory.c free_pgd_range() and free_{p4d,pud,pmd}_range(),
    /// free_pte_range(). Leaves must already be zapped.
    pub fn free_pgd_range(
        &mut self,
        addr: u64,
        end: u64,
        floor: u64,
        ceiling: u64,
        phys: &mut PhysMem,
        freed: &mut impl FnMut(u8, u64),
    ) {
        if self.chain_steps && no_pte_span_inside(addr, end, floor, ceiling) {
            crate::core::diag::took(crate::core::diag::Step::FreeNothing);
            return;
        }
        if self.chain_steps && self.free_lone_chain(addr, end, floor, ceiling, phys, freed) {
            return;
        }
        // The top-level trim works at PGD granularity on the tree below it;
        // each level repeats the same floor/ceiling trimming with its own mask.
        self.free_level(self.root, 4, addr, end, floor, ceiling, phys, freed);
    }

    /// Free tables below entry range `[addr, end)` of table `t` at `level`.
    /// Mirrors one free_*_range() step: tables of level-1 whose span lies
    /// inside [floor, ceiling) are freed; the table itself is freed by the
    /// caller when its own span is inside.
    #[allow(clippy::too_many_arguments)]
    fn free_level(
        &mut self,
        t: Pfn,
        level: u8,
        addr: u64,
        end: u64,
        floor: u64,
        ceiling: u64,
        phys: &mut PhysMem,
        freed: &mut impl FnMut(u8, u64),
    ) {
        let span = entry_span(level);
        if addr >= end {
            return;
        }
        let mut a = addr;
        // `t` stays in the store while its children go: found once.
        let ts = self.tables.slot(&t.0).expect("table exists");
        loop {
            let next = ((a / span) + 1).saturating_mul(span).min(end);
            let i = index(level, a);
            let lo = a & !(span - 1);
            let inside = span_inside(lo, span, floor, ceiling);
            if let Entry::Table(child) = self.decode(level, self.tables.at(ts).raw(i)) {
                let child_level = level - 1;
                if child_level >= 1 && level > 2 {
                    self.free_level(child, child_level, a, next, floor, ceiling, phys, freed);
                }
                // Free the child table if the whole span of this entry is
                // within [floor, ceiling) (kernel: start/end masking against
                // floor and ceiling in free_pmd_range etc.).
                if inside && self.subtree_empty(child, child_level) {
                    self.free_subtree(child, child_level, phys);
                    self.write_raw(t, level, i, 0);
                    // pte_free_tlb() / pmd_free_tlb() / pud_free_tlb() at
                    // the entry's span start.
                    freed(child_level, lo);
                }
            }
            if level == 4 && inside {
                // free_p4d_range(): the same floor/ceiling check at PGDIR
                // granularity, then p4d_free_tlb(start & PGDIR_MASK), with
                // or without a PUD table under the entry.
                freed(4, lo);
            }
            if next >= end {
                break;
            }
            a = next;
        }
    }

    fn subtree_empty(&self, t: Pfn, level: u8) -> bool {
        let tbl = &self.tables[&t.0];
        // `used` counts the non-zero entries at every level (a table whose
        // children were just freed is found empty without a scan).
        if level == 1 || tbl.used == 0 {
            return tbl.used == 0;
        }
        tbl.entries()
            .nonzero()
            .all(|(_, raw)| match self.decode(level, raw) {
                Entry::None => true,
                Entry::Table(c) => self.subtree_empty(c, level - 1),
                Entry::Leaf(_) | Entry::Swap(_) | Entry::Marker(_) => false,
            })
    }

    fn free_subtree(&mut self, t: Pfn, level: u8, phys: &mut PhysMem) {
        if level > 1 && self.tables[&t.0].used > 0 {
            // The children, on the stack when few (a small mapping's upper
            // tables hold one or two): no list allocated per table freed.
            let mut few = [Pfn(0); 4];
            let mut n = 0;
            let mut more: Vec<Pfn> = Vec::new();
            let tbl = &self.tables[&t.0];
            for (_, raw) in tbl.entries().nonzero() {
                if let Entry::Table(c) = self.decode(level, raw) {
                    match few.get_mut(n) {
                        Some(slot) => *slot = c,
                        None => more.push(c),
                    }
                    n += 1;
                }
            }
            for c in few.into_iter().take(n).chain(more) {
                self.free_subtree(c, level - 1, phys);
            }
        }
        self.remove_table(t);
        phys.free_pt_page(t);
    }

    /// Tear down the whole tree (exit). Leaves must already be zapped.
    pub fn free_all(&mut self, phys: &mut PhysMem) {
        let root = self.root;
        let tbl_level = 4;
        let children: Vec<(usize, Pfn)> = {
            let tbl = &self.tables[&root.0];
            tbl.entries()
                .nonzero()
                .filter_map(|(j, raw)| match self.decode(tbl_level, raw) {
                    Entry::Table(c) => Some((j, c)),
                    _ => None,
                })
                .collect()
        };
        for (j, c) in children {
            self.free_subtree(c, 3, phys);
            self.write_raw(root, 4, j, 0);
        }
        self.remove_table(root);
        phys.free_pt_page(root);
    }
}

/// A held PTE-table lock, as `pte_offset_map_lock()` returns it: the PMD
/// slot that was read. Dropping it is the unlock (no event). Holding one is
/// how a walk says it took the lock; the kernel's lock is never contended
/// in the model.
#[must_use = "pte_offset_map_lock() returns the locked table; hold it while using the PTEs"]
#[derive(Clone, Copy, Debug)]
pub struct PtlGuard {
    /// What the PMD held when it was read.
    pub pmd: PmdSlot,
}

impl PageTables {
    /// `pte_offset_map_lock()` (and `pte_offset_map_rw_nolock()` followed
    /// by `spin_lock()`): read the PMD covering `addr` (1 PMD load) and
    /// take its PTE table's split lock (1 PTL). The one place these two
    /// events are counted for a PTE-level walk.
    pub fn pte_offset_map_lock(&self, addr: u64) -> PtlGuard {
        self.hw.one(HwEvent::PmdLoad);
        self.hw.one(HwEvent::PtlLock);
        PtlGuard {
            pmd: self.pmd(addr),
        }
    }

    /// [`PageTables::pte_offset_map_lock`] of a PTE table the caller has
    /// just found through the walk cache (a `PmdSlot::Table` read in the
    /// same step): the same PMD load and PTL, counted without looking the
    /// table up again (the guard's PMD is not needed).
    pub fn pte_offset_map_lock_found(&self) {
        self.hw.one(HwEvent::PmdLoad);
        self.hw.one(HwEvent::PtlLock);
    }

    /// `pmd_lock()` / `pud_lock()` / a second `spin_lock()` on a table
    /// already mapped: one lock, no PMD read.
    pub fn lock(&self) {
        self.hw.one(HwEvent::PtlLock);
    }

    /// A PMD re-read under the lock (`pmd_same(pmdp_get_lockless())`
    /// checks): one PMD load.
    pub fn pmd_reload(&self, addr: u64) -> PmdSlot {
        self.hw.one(HwEvent::PmdLoad);
        self.pmd(addr)
    }
}

/// Spans used by callers iterating one PMD slot or PUD at a time.
pub const fn pmd_end(va: u64, end: u64) -> u64 {
    let b = (va & !(PMD_SIZE - 1)) + PMD_SIZE;
    if b < end {
        b
    } else {
        end
    }
}

pub const fn pud_end(va: u64, end: u64) -> u64 {
    let b = (va & !(PUD_SIZE - 1)) + PUD_SIZE;
    if b < end {
        b
    } else {
        end
    }
}

/// Swap PTEs (issue 8): written and cleared without the contpte layer, as
/// the kernel's set_pte_at()/pte_clear() of a non-present entry never folds
/// and a non-valid entry is never part of a contiguous block.
impl PageTables {
    /// Write swap PTE `s` at `va` (the PTE table must exist).
    /// Linux: set_pte_at(..., swp_entry_to_pte()) in try_to_unmap_one(),
    /// copy_nonpresent_pte(), move_ptes(), move_swap_pte().
    pub fn set_swap_pte(&mut self, va: u64, s: crate::core::arch::SwapPte) {
        let (t, i) = self.pte_slot(va);
        let raw = self.arch.ops().encode_swap(s);
        self.write_raw(t, 1, i, raw);
    }

    /// Clear the (swap) PTE at `va`. Linux: pte_clear().
    pub fn clear_pte_entry(&mut self, va: u64) {
        let (t, i) = self.pte_slot(va);
        self.write_raw(t, 1, i, 0);
    }

    /// set_pte_at() of a swap PTE, counted: one store, and on arm64 the
    /// __ptep_get() that set_ptes(nr = 1) hands to contpte_try_unfold()
    /// (never unfolds: the old entry is not a valid contiguous one; the
    /// contpte_try_fold() that follows needs a valid entry and loads
    /// nothing). Linux: arch/arm64/include/asm/pgtable.h set_ptes();
    /// x86 set_pte().
    pub fn set_swap_pte_counted(&mut self, va: u64, s: crate::core::arch::SwapPte) {
        let arch = self.arch.ops();
        let raw = arch.encode_swap(s);
        let (mut t, i) = self.pte_table(va);
        arch.set_pte_at_nonpresent(&mut t, i, raw);
    }

    /// ptep_get_and_clear() of a swap PTE, counted: one atomic clear (x86
    /// XCHG, arm64 SWP), and on arm64 the contpte_try_unfold() check's load.
    /// Linux: arch/arm64/include/asm/pgtable.h ptep_get_and_clear() /
    /// get_and_clear_full_ptes(nr = 1); x86 native_ptep_get_and_clear().
    pub fn get_and_clear_swap_pte(&mut self, va: u64) {
        let arch = self.arch.ops();
        let (mut t, i) = self.pte_table(va);
        arch.ptep_get_and_clear_nonpresent(&mut t, i);
    }

    /// pte_clear() of a non-present PTE, counted: one plain store on both
    /// architectures. Linux: include/linux/pgtable.h
    /// clear_not_present_full_ptes() → pte_clear() (x86 native_pte_clear(),
    /// arm64 __set_pte(ptep, __pte(0)) without a load).
    pub fn clear_swap_pte_counted(&mut self, va: u64) {
        self.hw.one(HwEvent::PteStore);
        self.clear_pte_entry(va);
    }

    /// Write PTE marker `m` at `va` over a none entry (the PTE table must
    /// exist). Uncounted: the model has no hand-derived count for marker
    /// stores yet. Linux: set_pte_at(..., make_pte_marker()).
    pub fn set_marker(&mut self, va: u64, m: crate::core::arch::PteMarker) {
        let raw = self.arch.ops().encode_marker(m);
        let (mut t, i) = self.pte_table(va);
        t.store_raw(i, raw);
    }

    /// Clear the PTE marker at `va`, if there is one (uncounted).
    pub fn clear_marker(&mut self, va: u64) {
        if self.marker(va).is_some() {
            let (mut t, i) = self.pte_table(va);
            t.store_raw(i, 0);
        }
    }

    /// The PTE marker at `va`, if there is one.
    pub fn marker(&self, va: u64) -> Option<crate::core::arch::PteMarker> {
        match self.pte_peek(va) {
            Entry::Marker(m) => Some(m),
            _ => None,
        }
    }

    /// Addresses of the PTE markers in `[start, end)`, in address order.
    pub fn markers(&self, start: u64, end: u64) -> Vec<u64> {
        let mut out = Vec::new();
        self.walk_nonpresent(start, end, &mut |va, e| {
            if let Entry::Marker(_) = e {
                out.push(va);
            }
        });
        out
    }

    /// The swap PTE at `va`, if there is one.
    pub fn swap_pte(&self, va: u64) -> Option<crate::core::arch::SwapPte> {
        match self.pte_raw(va) {
            Entry::Swap(s) => Some(s),
            _ => None,
        }
    }

    /// Swap PTEs in `[start, end)`, in address order.
    pub fn swap_ptes(&self, start: u64, end: u64) -> Vec<(u64, crate::core::arch::SwapPte)> {
        let mut out = Vec::new();
        self.walk_nonpresent(start, end, &mut |va, e| {
            if let Entry::Swap(s) = e {
                out.push((va, s));
            }
        });
        out
    }

    /// Whether a swap entry or marker may be stored in some PTE table:
    /// false while none was ever written (then [`PageTables::swap_ptes`]
    /// and [`PageTables::markers`] find nothing anywhere). For callers
    /// that skip such a search (a munmap's `zap_swap_range()` and
    /// `drop_markers()`, issue 14).
    #[inline]
    pub(crate) fn may_hold_nonpresent(&self) -> bool {
        self.nonpresent.get()
    }

    /// Visit every non-present, non-none PTE (swap entries and markers) in
    /// `[start, end)`: the PTE tables a PMD-level [`Cursor`] finds, present
    /// entries skipped without decoding.
    fn walk_nonpresent(&self, start: u64, end: u64, out: &mut dyn FnMut(u64, Entry)) {
        if !self.nonpresent.get() {
            return; // no swap entry or marker was ever stored here
        }
        let arch = self.arch.ops();
        self.for_each(Cursor::pmds(start, end), |q| {
            if let PtItem::PteTable(_) = q.item {
                let Some((entries, range)) = self.segment_entries(q.segment()) else {
                    return;
                };
                let nonpresent = |raw: u64| raw != 0 && !arch.pte_present_raw(raw);
                let any = match entries {
                    Entries::Dense(d) => arch.any_nonpresent_raw(&d[range.clone()]),
                    Entries::Runs(_) => {
                        entries.runs_hold(range.clone(), Run::NONPRESENT, nonpresent) == Some(true)
                    }
                };
                if !any {
                    return;
                }
                let first = range.start;
                for i in range {
                    let raw = entries.raw(i);
                    if nonpresent(raw) {
                        out(q.va + (i - first) as u64 * PAGE_SIZE, arch.decode(1, raw));
                    }
                }
            }
        });
    }

    /// Whether a swap entry or PTE marker may exist in this tree: false
    /// only when none was ever stored (a sticky flag; see the field).
    pub fn maybe_nonpresent(&self) -> bool {
        self.nonpresent.get()
    }

    /// Clear the sticky flag (tests of the invariant checker only).
    #[cfg(test)]
    pub(crate) fn forget_nonpresent(&self) {
        self.nonpresent.set(false);
    }

    /// Whether any PTE table of the store holds a swap entry or marker,
    /// read from every table regardless of [`PageTables::maybe_nonpresent`]
    /// (the invariant checker's recomputation).
    pub fn any_nonpresent_stored(&self) -> bool {
        let arch = self.arch.ops();
        self.tables
            .slab
            .iter()
            .flatten()
            .filter(|t| t.level == 1)
            .any(|t| {
                t.entries()
                    .nonzero()
                    .any(|(_, raw)| !arch.pte_present_raw(raw))
            })
    }

    /// The entries of the PTE table holding one segment and the segment's
    /// index range in it; `None` when there is no PTE table. No event is
    /// counted (the model's bookkeeping).
    fn segment_entries(&self, seg: Segment) -> Option<(Entries<'_>, std::ops::Range<usize>)> {
        let tbl = self.pte_tbl(seg.start)?;
        let first = index(1, seg.start);
        Some((tbl.entries(), first..first + seg.nr_pages() as usize))
    }

    /// Whether a present PTE lies in the segment (no event counted).
    pub fn any_present_pte(&self, seg: Segment) -> bool {
        let arch = self.arch.ops();
        match self.segment_entries(seg) {
            Some((Entries::Dense(d), range)) => arch.any_present_raw(&d[range]),
            Some((entries, range)) => {
                let present = |r: u64| r != 0 && arch.pte_present_raw(r);
                entries.runs_hold(range, Run::PRESENT, present) == Some(true)
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod pmd_cache_tests {
    use super::*;
    use crate::core::arch::ArchKind;

    /// `no_pte_span_inside()` answers what going through every PMD span
    /// over the range answers (none inside `[floor, ceiling)`), for ranges,
    /// floors and ceilings on and off PMD boundaries, near 0 and near the
    /// top of the address space (ceiling 0: the top).
    #[test]
    fn no_pte_span_inside_is_every_span_checked() {
        let m = PMD_SIZE;
        let top = u64::MAX - (m - 1); // the last PMD span
        let points = [
            0,
            0x1000,
            m - 0x1000,
            m,
            m + 0x5000,
            2 * m,
            3 * m - 1,
            3 * m,
            4 * m + 0x1000,
            top - m,
            top - 0x1000,
            top,
            top + 0x1000,
            u64::MAX,
        ];
        let mut checked = 0;
        for &addr in &points {
            for &end in &points {
                if end <= addr || (end - addr) / m > 8 {
                    continue;
                }
                for &floor in &points {
                    for &ceiling in &points {
                        if ceiling != 0 && ceiling < end {
                            continue; // callers pass a ceiling at or above the range
                        }
                        let mut any = false;
                        let mut lo = addr & !(m - 1);
                        while lo < end {
                            let hi = lo.wrapping_add(m);
                            any |= lo >= floor
                                && (ceiling == 0 || hi.wrapping_sub(1) <= ceiling.wrapping_sub(1));
                            match lo.checked_add(m) {
                                Some(n) => lo = n,
                                None => break,
                            }
                        }
                        assert_eq!(
                            no_pte_span_inside(addr, end, floor, ceiling),
                            !any,
                            "addr {addr:#x} end {end:#x} floor {floor:#x} ceiling {ceiling:#x}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 2000, "{checked}");
    }

    fn leaf(pfn: u64) -> Leaf {
        Leaf {
            pfn: Pfn(pfn),
            flags: LeafFlags::WRITE,
        }
    }

    /// The PMD-table cache changes no answer: after PMD writes (kept),
    /// PUD writes and table removals (cleared), walks find what a walk
    /// from the PGD finds.
    #[test]
    fn pmd_cache_follows_pud_writes_and_removals() {
        let mut phys = PhysMem::new(1 << 16);
        let mut pt = PageTables::new(ArchKind::X86_64, &mut phys).expect("tables");
        let g = PUD_SIZE;
        // Two PMD tables, one per GiB; walks alternate between them.
        let t0 = pt.pte_alloc(PMD_SIZE, &mut phys).unwrap();
        let t1 = pt.pte_alloc(g + PMD_SIZE, &mut phys).unwrap();
        let pmd0 = pt.table_at(0, 2).unwrap();
        let pmd1 = pt.table_at(g, 2).unwrap();
        assert_ne!(pmd0, pmd1);
        assert_eq!(pt.pmd(PMD_SIZE), PmdSlot::Table(t0));
        assert_eq!(pt.pmd(g + PMD_SIZE), PmdSlot::Table(t1));
        // A PMD write under the cached table is seen.
        pt.set_pmd(2 * PMD_SIZE, Entry::Leaf(leaf(0x200)));
        assert_eq!(pt.pmd(2 * PMD_SIZE), PmdSlot::Leaf(leaf(0x200)));
        pt.set_ptes(PMD_SIZE, leaf(0x100), 1, &phys);
        assert_eq!(pt.pte_peek(PMD_SIZE), Entry::Leaf(leaf(0x100)));
        // Move GiB 1's PMD table to GiB 2 (what a PUD-level move does):
        // GiB 1 is empty, GiB 2 finds the table.
        pt.pud_alloc(2 * g, &mut phys).unwrap();
        assert_eq!(pt.table_at(g, 2), Some(pmd1));
        pt.set_pud(g, Entry::None);
        assert_eq!(pt.table_at(g, 2), None);
        assert_eq!(pt.pmd(g + PMD_SIZE), PmdSlot::None);
        pt.set_pud(2 * g, Entry::Table(pmd1));
        assert_eq!(pt.table_at(2 * g, 2), Some(pmd1));
        assert_eq!(pt.pmd(2 * g + PMD_SIZE), PmdSlot::Table(t1));
        // A removed PTE table is gone; a new one in its slot is found.
        pt.write_raw(t0, 1, index(1, PMD_SIZE), 0);
        pt.free_pte_table(PMD_SIZE, &mut phys);
        assert_eq!(pt.pmd(PMD_SIZE), PmdSlot::None);
        let t2 = pt.pte_alloc(PMD_SIZE, &mut phys).unwrap();
        assert_eq!(pt.pmd(PMD_SIZE), PmdSlot::Table(t2));
        assert_eq!(pt.table_at(0, 2), Some(pmd0));
    }

    /// Each PTE write path that can store a swap entry or marker sets the
    /// sticky non-present flag; present and none entries do not, and
    /// clearing the entry again keeps it (sticky).
    #[test]
    fn nonpresent_flag_is_set_by_every_nonpresent_write() {
        use crate::core::arch::{PteMarker, SwapPte};
        let swp = SwapPte {
            ty: 0,
            offset: 7,
            exclusive: true,
            soft_dirty: false,
            uffd_wp: false,
        };
        type Write = fn(&mut PageTables, u64, SwapPte);
        let writes: [(&str, Write); 6] = [
            ("set_swap_pte (write_raw)", |pt, va, s| {
                pt.set_swap_pte(va, s)
            }),
            ("set_swap_pte_counted (store_raw)", |pt, va, s| {
                pt.set_swap_pte_counted(va, s)
            }),
            ("guard marker", |pt, va, _| {
                pt.set_marker(va, PteMarker::GUARD)
            }),
            ("uffd-wp marker", |pt, va, _| {
                pt.set_marker(va, PteMarker::UFFD_WP)
            }),
            ("write_affine of a non-present run", |pt, va, s| {
                let raw = pt.arch().encode_swap(s);
                let (mut t, i) = pt.pte_table(va);
                t.write_affine(i, 4, raw, 1 << 12, Run::NONPRESENT);
            }),
            ("store_raw into a table of runs", |pt, va, s| {
                pt.compact_tables();
                let raw = pt.arch().encode_swap(s);
                let (mut t, i) = pt.pte_table(va);
                t.store_raw(i, raw);
            }),
        ];
        for arch in ArchKind::ALL {
            for (what, write) in writes {
                let mut phys = PhysMem::new(1 << 16);
                let mut pt = PageTables::new(arch, &mut phys).expect("tables");
                let va = PMD_SIZE;
                pt.pte_alloc(va, &mut phys).unwrap();
                pt.set_ptes(va + 0x10_000, leaf(0x100), 4, &phys);
                pt.clear_ptes(va + 0x10_000, 4);
                assert!(
                    !pt.maybe_nonpresent(),
                    "{arch:?} {what}: present/none writes"
                );
                assert!(!pt.any_nonpresent_stored());
                assert!(pt.swap_ptes(0, u64::MAX).is_empty());
                write(&mut pt, va, swp);
                assert!(pt.any_nonpresent_stored(), "{arch:?} {what}: stored");
                assert!(pt.maybe_nonpresent(), "{arch:?} {what}: flag set");
                let found = pt.swap_ptes(0, u64::MAX).len() + pt.markers(0, u64::MAX).len();
                assert!(found >= 1, "{arch:?} {what}: the walk finds it");
                for k in 0..4 {
                    pt.clear_pte_entry(va + k * PAGE_SIZE);
                }
                assert!(!pt.any_nonpresent_stored());
                assert!(pt.maybe_nonpresent(), "{arch:?} {what}: sticky");
            }
        }
    }
}

#[cfg(test)]
mod tables_tests {
    use super::*;

    /// The frame → slot cache in front of the index answers as the index:
    /// frames that share a cache entry, removed, replaced and re-inserted
    /// in a random order.
    #[test]
    fn recent_cache_answers_as_the_index() {
        let mut t = Tables::default();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // 40 frames over 16 cache entries (several per entry), pfn 0
            // included.
            let pfn = (seed >> 8) % 40 * 7;
            if seed & 3 == 0 {
                t.remove(&pfn);
            } else {
                t.insert(pfn, Table::new(1));
            }
            let probe = (seed >> 20) % 40 * 7;
            assert_eq!(t.slot(&probe), t.index.get(&probe).copied(), "step {step}");
            assert_eq!(t.slot(&pfn), t.index.get(&pfn).copied(), "step {step}");
        }
    }

    /// Kept index entries (`Tables::keep`) change no answer: against a
    /// `BTreeMap` of frame → table and a store without keeping, random
    /// inserts (new frames and replacements), removes (of stored and
    /// absent frames) and lookups over 60 frames (several per kept
    /// entry, frame 0 included), with keeping turned off and on again on
    /// the way: every lookup finds the same table, the count is the
    /// same, and the slab's length and capacities (what `memory_bytes()`
    /// reads) stay equal to the store's without keeping.
    #[test]
    fn kept_entries_answer_as_the_plain_index() {
        use std::collections::BTreeMap;
        for seed0 in 1..=20u64 {
            let mut seed = seed0.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut kept = Tables::default();
            kept.set_keep(true);
            let mut plain = Tables::default();
            let mut want: BTreeMap<u64, u8> = BTreeMap::new();
            for step in 0..6000 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let pfn = (seed >> 8) % 60 * 5;
                // The table's level tells the tables apart.
                let level = ((seed >> 30) % 4 + 1) as u8;
                match seed % 7 {
                    0..=2 => {
                        let a = kept.remove(&pfn).map(|t| t.level);
                        let b = plain.remove(&pfn).map(|t| t.level);
                        assert_eq!(a, b, "seed {seed0} step {step}");
                        assert_eq!(a, want.remove(&pfn), "seed {seed0} step {step}");
                    }
                    3 if step % 500 == 3 => {
                        let on = !kept.keep;
                        kept.set_keep(on);
                    }
                    _ => {
                        let a = kept.insert(pfn, Table::new(level));
                        let b = plain.insert(pfn, Table::new(level));
                        assert_eq!(a, b, "seed {seed0} step {step}");
                        assert_eq!(a, want.insert(pfn, level).is_some());
                    }
                }
                for q in [pfn, (seed >> 24) % 60 * 5] {
                    let a = kept.get(&q).map(|t| t.level);
                    assert_eq!(
                        a,
                        want.get(&q).copied(),
                        "seed {seed0} step {step} frame {q}"
                    );
                    assert_eq!(a, plain.get(&q).map(|t| t.level));
                }
                assert_eq!(kept.len(), want.len(), "seed {seed0} step {step}");
                assert_eq!(
                    kept.slab.len(),
                    plain.slab.len(),
                    "seed {seed0} step {step}"
                );
                assert_eq!(kept.capacity(), plain.capacity());
                assert_eq!(kept.pfns.capacity(), plain.pfns.capacity());
                assert!(kept.kept_n as usize <= KEPT_TABLES);
            }
        }
    }
}
