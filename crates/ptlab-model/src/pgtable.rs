//! Page tables as real tables: a PGD → PUD → PMD → PTE tree of 512-entry
//! pages holding arch-encoded descriptors, allocated from physical memory
//! and freed when the kernel frees them.
//!
//! Level numbering: 4 = PGD, 3 = PUD, 2 = PMD, 1 = PTE.
//!
//! The arm64 contiguous bit is maintained here, where the kernel's contpte
//! layer sits (arch/arm64/mm/contpte.c): batched writes paint it on fully
//! covered 64 KiB blocks, single-entry writes unfold a folded block first,
//! and a single write to the last entry of a block tries to fold it.

use crate::addr::{Pfn, PMD_SIZE, PTRS_PER_TABLE, PUD_SIZE};
use crate::arch::{Arch, ArchKind, Entry, Leaf, LeafFlags};
use crate::folio::PhysMem;
use crate::hw::{HwEvent, HwSink};
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A tiny deterministic hasher for frame-number keys (FxHash's multiply).
#[derive(Default)]
pub struct PfnHasher(u64);
impl Hasher for PfnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
type PfnMap<V> = HashMap<u64, V, BuildHasherDefault<PfnHasher>>;

/// One page-table page.
#[derive(Clone, Debug)]
pub struct Table {
    pub level: u8,
    pub entries: Box<[u64; PTRS_PER_TABLE]>,
    /// Non-none entries.
    pub used: u16,
}

/// Index of `va` in a table at `level`.
pub const fn index(level: u8, va: u64) -> usize {
    ((va >> (12 + 9 * (level as u32 - 1))) & 511) as usize
}

/// Bytes mapped by one entry at `level`.
pub const fn entry_span(level: u8) -> u64 {
    1 << (12 + 9 * (level as u32 - 1))
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
    tables: PfnMap<Table>,
    /// The last PTE table found by a walk, by 2 MiB slot (a walk cache:
    /// it changes no result; any PMD-or-higher write clears it).
    walk_cache: Cell<Option<(u64, Pfn)>>,
    /// Hardware events issued on behalf of this address space (counting
    /// changes no result). See [`crate::hw`].
    pub hw: HwSink,
}

impl PageTables {
    /// A tree with an empty PGD. Linux: mm_alloc_pgd().
    pub fn new(arch: ArchKind, phys: &mut PhysMem) -> Option<Self> {
        let root = phys.alloc_pt_page()?;
        let mut tables = PfnMap::default();
        tables.insert(
            root.0,
            Table {
                level: 4,
                entries: Box::new([0; PTRS_PER_TABLE]),
                used: 0,
            },
        );
        Some(PageTables {
            arch,
            root,
            tables,
            walk_cache: Cell::new(None),
            hw: HwSink::new(arch, Default::default()),
        })
    }

    pub fn arch(&self) -> &'static dyn Arch {
        self.arch.ops()
    }

    pub fn root(&self) -> Pfn {
        self.root
    }

    /// Table pages in the tree, PGD included.
    pub fn table_count(&self) -> usize {
        self.tables.len()
    }

    pub fn table(&self, pfn: Pfn) -> Option<&Table> {
        self.tables.get(&pfn.0)
    }

    /// Bytes of model memory the tables use.
    pub fn memory_bytes(&self) -> usize {
        self.tables.capacity() * (std::mem::size_of::<Table>() + 8)
            + self.tables.len() * PTRS_PER_TABLE * 8
    }

    fn decode(&self, level: u8, raw: u64) -> Entry {
        self.arch.ops().decode(level, raw)
    }

    /// Frame of the table at `level` covering `va`, if it exists.
    pub fn table_at(&self, va: u64, level: u8) -> Option<Pfn> {
        let mut t = self.root;
        for l in (level + 1..=4).rev() {
            let tbl = &self.tables[&t.0];
            match self.decode(l, tbl.entries[index(l, va)]) {
                Entry::Table(next) => t = next,
                _ => return None,
            }
        }
        Some(t)
    }

    /// The PMD slot for `va`.
    pub fn pmd(&self, va: u64) -> PmdSlot {
        let slot = va & !(PMD_SIZE - 1);
        if let Some((s, p)) = self.walk_cache.get() {
            if s == slot {
                return PmdSlot::Table(p);
            }
        }
        let Some(t) = self.table_at(va, 2) else {
            return PmdSlot::None;
        };
        match self.decode(2, self.tables[&t.0].entries[index(2, va)]) {
            Entry::None | Entry::Swap(_) => PmdSlot::None,
            Entry::Table(p) => {
                self.walk_cache.set(Some((slot, p)));
                PmdSlot::Table(p)
            }
            Entry::Leaf(l) => PmdSlot::Leaf(l),
        }
    }

    /// The PTE for `va` (none when no PTE table exists), as `ptep_get()`
    /// returns it: on arm64 a folded block reports the young/dirty bits
    /// gathered over the block. Counts the loads: 1 for the entry, plus on a
    /// valid contiguous entry the loads contpte_ptep_get() makes walking from
    /// the block start until it has seen both dirty and young (v6.17+ early
    /// exit; 16 at most). Linux: arch/arm64/include/asm/pgtable.h ptep_get(),
    /// arch/arm64/mm/contpte.c contpte_ptep_get() (only for
    /// pte_valid_cont(): a PROT_NONE entry carrying CONT is read alone).
    pub fn pte(&self, va: u64) -> Entry {
        let PmdSlot::Table(t) = self.pmd(va) else {
            return Entry::None;
        };
        let tbl = &self.tables[&t.0];
        let i = index(1, va);
        let e = self.decode(1, tbl.entries[i]);
        self.hw.one(HwEvent::PteLoad);
        match e {
            Entry::Leaf(mut l) if l.valid_cont() => {
                let n = self.arch.ops().cont_ptes().unwrap_or(1);
                let start = i / n * n;
                let mut seen = LeafFlags::empty();
                let both = LeafFlags::YOUNG | LeafFlags::DIRTY;
                let mut loads = 0u64;
                // contpte_ptep_get(): the outer loop stops at the first dirty
                // or young entry; the inner loop re-reads that entry and goes
                // on until it sees the other bit.
                let mut j = start;
                while j < start + n {
                    let f = self.leaf_flags_at(tbl, j);
                    loads += 1;
                    if f.contains(LeafFlags::DIRTY) {
                        seen |= LeafFlags::DIRTY;
                        while j < start + n {
                            loads += 1;
                            if self.leaf_flags_at(tbl, j).contains(LeafFlags::YOUNG) {
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
                        while j < start + n {
                            loads += 1;
                            if self.leaf_flags_at(tbl, j).contains(LeafFlags::DIRTY) {
                                seen |= LeafFlags::DIRTY;
                                break;
                            }
                            j += 1;
                        }
                        break;
                    }
                    j += 1;
                }
                self.hw.add(HwEvent::PteLoad, loads);
                l.flags |= seen & both;
                Entry::Leaf(l)
            }
            e => e,
        }
    }

    fn leaf_flags_at(&self, tbl: &Table, j: usize) -> LeafFlags {
        match self.decode(1, tbl.entries[j]) {
            Entry::Leaf(o) => o.flags,
            _ => LeafFlags::empty(),
        }
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
            PmdSlot::Table(t) => match self.decode(1, self.tables[&t.0].entries[index(1, va)]) {
                Entry::Leaf(l) => l,
                _ => return None,
            },
            PmdSlot::None => return None,
        };
        let ok = !leaf.flags.contains(LeafFlags::PROTNONE) && (!write || leaf.write());
        ok.then_some(leaf.pfn)
    }

    /// The raw PTE without contpte gathering, as the kernel's `__ptep_get()`
    /// / `pte_none(ptep_get())` checks read it: counts one PTE load.
    pub fn pte_raw(&self, va: u64) -> Entry {
        self.hw.one(HwEvent::PteLoad);
        self.pte_peek(va)
    }

    /// The raw PTE, for the model's own bookkeeping and observation: no
    /// event is counted (the kernel does no such read).
    pub fn pte_peek(&self, va: u64) -> Entry {
        let PmdSlot::Table(t) = self.pmd(va) else {
            return Entry::None;
        };
        self.decode(1, self.tables[&t.0].entries[index(1, va)])
    }

    fn new_table(&mut self, level: u8, phys: &mut PhysMem) -> Option<Pfn> {
        let pfn = phys.alloc_pt_page()?;
        self.tables.insert(
            pfn.0,
            Table {
                level,
                entries: Box::new([0; PTRS_PER_TABLE]),
                used: 0,
            },
        );
        Some(pfn)
    }

    fn write_raw(&mut self, table: Pfn, level: u8, i: usize, raw: u64) {
        if level >= 2 {
            self.walk_cache.set(None);
            // set_pmd_at / pmd_populate / pmd_clear; pud_populate / pud_clear.
            match level {
                2 => self.hw.one(HwEvent::PmdStore),
                _ => self.hw.one(HwEvent::PudStore),
            }
        }
        // The encoders write 0 for a none entry and never produce a non-zero
        // descriptor that decodes as none.
        let t = self.tables.get_mut(&table.0).expect("table exists");
        let none_before = t.entries[i] == 0;
        let none_after = raw == 0;
        t.entries[i] = raw;
        match (none_before, none_after) {
            (true, false) => t.used += 1,
            (false, true) => t.used -= 1,
            _ => {}
        }
    }

    /// Make sure the PUD and PMD tables for `va` exist; returns the PMD table.
    /// Linux: mm/memory.c __pud_alloc(), __pmd_alloc().
    pub fn pmd_alloc(&mut self, va: u64, phys: &mut PhysMem) -> Option<Pfn> {
        let mut t = self.root;
        for l in [4u8, 3] {
            let i = index(l, va);
            t = match self.decode(l, self.tables[&t.0].entries[i]) {
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
        let pmd_t = self.pmd_alloc(va, phys)?;
        let i = index(2, va);
        match self.decode(2, self.tables[&pmd_t.0].entries[i]) {
            Entry::Table(p) => Some(p),
            Entry::Leaf(_) | Entry::Swap(_) => None,
            Entry::None => {
                let p = self.new_table(1, phys)?;
                let raw = self.arch.ops().encode_table(2, p);
                self.write_raw(pmd_t, 2, i, raw);
                Some(p)
            }
        }
    }

    /// The entry at `level` (2 = PMD, 3 = PUD, 4 = PGD) covering `va`, or
    /// `Entry::None` when the table that would hold it does not exist.
    pub fn entry(&self, va: u64, level: u8) -> Entry {
        match self.table_at(va, level) {
            Some(t) => self.decode(level, self.tables[&t.0].entries[index(level, va)]),
            None => Entry::None,
        }
    }

    /// Make sure the PUD table for `va` exists; returns it.
    /// Linux: mm/mremap.c alloc_new_pud() → p4d_alloc(), pud_alloc().
    pub fn pud_alloc(&mut self, va: u64, phys: &mut PhysMem) -> Option<Pfn> {
        let (root, i) = (self.root, index(4, va));
        match self.decode(4, self.tables[&root.0].entries[i]) {
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
            Entry::Leaf(_) | Entry::Swap(_) => panic!("no PUD leaves for anonymous memory"),
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
            Entry::Swap(_) => panic!("no PMD swap entries for anonymous memory"),
        };
        self.write_raw(t, 2, index(2, va), raw);
    }

    /// Install the (empty) page-table page `table` as the PTE table of the
    /// PMD slot at `va`, replacing a PMD leaf: used when a PMD mapping is split
    /// into the table deposited with it (pgtable_trans_huge_withdraw()).
    pub fn install_pte_table(&mut self, va: u64, table: Pfn) {
        self.tables.insert(
            table.0,
            Table {
                level: 1,
                entries: Box::new([0; PTRS_PER_TABLE]),
                used: 0,
            },
        );
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
        self.tables.remove(&p.0);
        Some(p)
    }

    /// Detach and free the PTE table under `va`'s PMD slot.
    pub fn free_pte_table(&mut self, va: u64, phys: &mut PhysMem) {
        if let PmdSlot::Table(p) = self.pmd(va) {
            debug_assert_eq!(self.tables[&p.0].used, 0, "freeing a non-empty PTE table");
            self.set_pmd(va, Entry::None);
            self.tables.remove(&p.0);
            phys.free_pt_page(p);
        }
    }

    fn pte_slot(&self, va: u64) -> (Pfn, usize) {
        match self.pmd(va) {
            PmdSlot::Table(t) => (t, index(1, va)),
            other => panic!("no PTE table at {va:#x}: {other:?}"),
        }
    }

    fn write_pte(&mut self, va: u64, e: Option<Leaf>) {
        let (t, i) = self.pte_slot(va);
        let raw = e.map_or(0, |l| self.arch.ops().encode_leaf(1, l));
        self.write_raw(t, 1, i, raw);
    }

    fn cont(&self) -> Option<usize> {
        self.arch.ops().cont_ptes()
    }

    /// contpte_convert() cost: 16 atomic swap-to-zero (__ptep_get_and_clear),
    /// a 64 KiB range flush unless BBML2-noabort, 16 stores (__set_ptes).
    /// Linux: arch/arm64/mm/contpte.c contpte_convert().
    fn count_convert(&self, va: u64, fold: bool) {
        let n = self.cont().unwrap_or(16) as u64;
        let start = va & !(n * 4096 - 1);
        self.hw.one(if fold {
            HwEvent::ContFold
        } else {
            HwEvent::ContUnfold
        });
        self.hw.add(HwEvent::PteAtomicClear, n);
        if !self.hw.features.bbml2_noabort {
            // __flush_tlb_range(&vma, start_addr, addr, PAGE_SIZE, true, 3)
            self.hw.flush_tlb_range(start, start + n * 4096, 4096);
        }
        self.hw.add(HwEvent::PteStore, n);
    }

    /// Rewrite a folded block without the contiguous bit, every entry taking
    /// the young/dirty bits gathered over the block.
    /// Linux: arch/arm64/mm/contpte.c contpte_convert() via __contpte_try_unfold().
    fn unfold_block(&mut self, va: u64) {
        self.count_convert(va, false);
        let n = self.cont().expect("contpte arch") as u64;
        let start = va & !(n * 4096 - 1);
        let mut gathered = LeafFlags::empty();
        for k in 0..n {
            if let Entry::Leaf(l) = self.pte_peek(start + k * 4096) {
                gathered |= l.flags & (LeafFlags::YOUNG | LeafFlags::DIRTY);
            }
        }
        for k in 0..n {
            if let Entry::Leaf(mut l) = self.pte_peek(start + k * 4096) {
                l.flags.remove(LeafFlags::CONT);
                l.flags |= gathered;
                self.write_pte(start + k * 4096, Some(l));
            }
        }
    }

    /// pte_valid_cont(): only valid entries of a folded block are unfolded.
    /// `set_ptes(nr > 1)` paints CONT on PROT_NONE (present-invalid) entries
    /// too, but the contpte layer ignores such entries (contpte_try_unfold()).
    /// Uncounted: callers count the `__ptep_get()` the kernel makes.
    fn is_cont(&self, va: u64) -> bool {
        matches!(self.pte_peek(va), Entry::Leaf(l) if l.valid_cont())
    }

    /// contpte_try_unfold(mm, addr, ptep, __ptep_get(ptep)): one load, and
    /// an unfold when the entry is a valid contiguous one.
    fn try_unfold(&mut self, va: u64) {
        self.hw.one(HwEvent::PteLoad);
        if self.is_cont(va) {
            self.unfold_block(va);
        }
    }

    /// Fold the block containing `va` if all of its entries map one
    /// naturally aligned 64 KiB part of a single folio with equal attributes.
    /// Called for the last entry of a block written alone with a valid,
    /// non-special, non-cont PTE whose PFN is the last of its 16 (the
    /// inline contpte_try_fold() test). Counts: page_folio() and
    /// folio_nr_pages() (2 struct-page lines), then one load per entry
    /// compared until the first mismatch, then the convert.
    /// Linux: arch/arm64/mm/contpte.c __contpte_try_fold().
    fn try_fold(&mut self, va: u64, phys: &PhysMem) {
        let Some(n) = self.cont() else { return };
        let n = n as u64;
        let start = va & !(n * 4096 - 1);
        let Entry::Leaf(last) = self.pte_peek(va) else {
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
        self.hw.add(HwEvent::StructPageLine, 2);
        let first_pfn = last.pfn.0 - (n - 1);
        match phys.folio_of(last.pfn) {
            Some(f) if f.head.0 <= first_pfn && last.pfn.0 < f.head.0 + f.nr_pages() => {}
            _ => return,
        }
        let key = last.fold_key();
        let mut gathered = LeafFlags::empty();
        for k in 0..n {
            self.hw.one(HwEvent::PteLoad);
            match self.pte_peek(start + k * 4096) {
                Entry::Leaf(l) if l.pfn.0 == first_pfn + k && l.fold_key() == key => {
                    gathered |= l.flags & (LeafFlags::YOUNG | LeafFlags::DIRTY);
                }
                _ => return,
            }
        }
        self.count_convert(va, true);
        for k in 0..n {
            let l = Leaf {
                pfn: Pfn(first_pfn + k),
                flags: key | gathered | LeafFlags::CONT,
            };
            self.write_pte(start + k * 4096, Some(l));
        }
    }

    /// Map `nr` consecutive pages starting at `leaf.pfn` at `va` (all entries
    /// none before when `nr > 1`). On arm64 every fully covered, physically
    /// aligned 64 KiB chunk is painted contiguous; a single entry first
    /// unfolds a folded block it lands in, and may auto-fold its block.
    /// Counts `nr` stores; on arm64 with `nr == 1` also the unfold check's
    /// load. Linux: set_ptes(); arch/arm64/include/asm/pgtable.h set_ptes(),
    /// arch/arm64/mm/contpte.c contpte_set_ptes(), contpte_try_fold().
    pub fn set_ptes(&mut self, va: u64, leaf: Leaf, nr: u64, phys: &PhysMem) {
        let cont = self.cont().map(|n| n as u64);
        if cont.is_some() && nr == 1 {
            self.try_unfold(va);
        }
        self.hw.add(HwEvent::PteStore, nr);
        for k in 0..nr {
            let addr = va + k * 4096;
            let mut l = leaf;
            l.pfn = leaf.pfn.add(k);
            l.flags.remove(LeafFlags::CONT);
            if let Some(n) = cont {
                if nr > 1 && !l.flags.contains(LeafFlags::SPECIAL) {
                    let block = addr & !(n * 4096 - 1);
                    let covered = block >= va && block + n * 4096 <= va + nr * 4096;
                    let pa_aligned = (l.pfn.0 - (addr - block) / 4096).is_multiple_of(n);
                    if covered && pa_aligned {
                        l.flags |= LeafFlags::CONT;
                    }
                }
            }
            self.write_pte(addr, Some(l));
        }
        if let Some(n) = cont {
            if nr == 1 && index(1, va) as u64 % n == n - 1 {
                self.try_fold(va, phys);
            }
        }
    }

    /// Change one present PTE in place without a fold attempt: the
    /// single-entry mutators that are not set_pte_at() —
    /// ptep_set_wrprotect(), ptep_set_access_flags() with a write-bit change.
    /// On arm64 a folded block is unfolded first and stays unfolded.
    /// Counts the unfold check's load (arm64) and one atomic RMW (cmpxchg
    /// loop / locked bit op). Linux: arch/arm64/include/asm/pgtable.h
    /// (contpte_try_unfold before __ptep_set_wrprotect /
    /// __ptep_set_access_flags); arch/x86 ptep_set_wrprotect() (clear_bit).
    /// For a replacement through set_pte_at() use [`PageTables::set_ptes`]
    /// with `nr == 1`, which may refold.
    pub fn modify_pte(&mut self, va: u64, leaf: Leaf) {
        if self.cont().is_some() {
            self.try_unfold(va);
        }
        self.hw.one(HwEvent::PteAtomicRmw);
        let mut l = leaf;
        l.flags.remove(LeafFlags::CONT);
        self.write_pte(va, Some(l));
    }

    /// Write-protect `nr` present PTEs from `va` (within one table) as one
    /// batch: on arm64 only blocks covered partially at the ends are
    /// unfolded; fully covered blocks stay folded (the bit is cleared in all
    /// 16 entries). Counts per entry one atomic RMW, and on arm64 the load
    /// __ptep_set_wrprotect() starts its cmpxchg loop with.
    /// Linux: wrprotect_ptes(); arch/arm64/mm/contpte.c
    /// contpte_wrprotect_ptes(), arch/arm64 __wrprotect_ptes().
    pub fn wrprotect_ptes(&mut self, va: u64, nr: u64) {
        if nr == 1 {
            if let Entry::Leaf(mut l) = self.pte_peek(va) {
                l.flags.remove(LeafFlags::WRITE);
                if self.cont().is_some() {
                    self.hw.one(HwEvent::PteLoad);
                }
                self.modify_pte(va, l);
            }
            return;
        }
        self.unfold_partial(va, nr);
        if self.cont().is_some() {
            self.hw.add(HwEvent::PteLoad, nr);
        }
        self.hw.add(HwEvent::PteAtomicRmw, nr);
        for k in 0..nr {
            let addr = va + k * 4096;
            if let Entry::Leaf(mut l) = self.pte_peek(addr) {
                l.flags.remove(LeafFlags::WRITE);
                self.write_pte(addr, Some(l));
            }
        }
    }

    /// Unfold blocks that `[va, va + nr pages)` covers only partly at either
    /// end, counting the `__ptep_get()` of each end checked.
    /// Linux: arch/arm64/mm/contpte.c contpte_try_unfold_partial().
    pub fn unfold_partial(&mut self, va: u64, nr: u64) {
        if let Some(n) = self.cont().map(|n| n as u64) {
            let end = va + nr * 4096;
            let span = n * 4096;
            if !va.is_multiple_of(span) || nr < n {
                self.try_unfold(va);
            }
            let last = end - 4096;
            if !end.is_multiple_of(span) {
                self.try_unfold(last);
            }
        }
    }

    /// Clear `nr` PTEs starting at `va` (within one PTE table), returning the
    /// old entries. On arm64 a single entry unfolds its block first
    /// (ptep_get_and_clear → contpte_try_unfold), and a batch unfolds only
    /// blocks partly covered at either end. Counts one atomic clear per
    /// present entry. Linux: get_and_clear_full_ptes() /
    /// arch/arm64/mm/contpte.c contpte_get_and_clear_full_ptes().
    pub fn clear_ptes(&mut self, va: u64, nr: u64) -> Vec<(u64, Leaf)> {
        if self.cont().is_some() {
            if nr == 1 {
                self.try_unfold(va);
            } else {
                self.unfold_partial(va, nr);
            }
        }
        let mut out = Vec::new();
        for k in 0..nr {
            let addr = va + k * 4096;
            if let Entry::Leaf(l) = self.pte_peek(addr) {
                out.push((addr, l));
                self.write_pte(addr, None);
            }
        }
        self.hw.add(HwEvent::PteAtomicClear, out.len() as u64);
        out
    }

    /// Flush user TLB entries for `[start, end)` at `stride` (see
    /// [`HwSink::flush_tlb_range`]). Changes no state.
    pub fn flush_tlb_range(&self, start: u64, end: u64, stride: u64) {
        self.hw.flush_tlb_range(start, end, stride);
    }

    /// Present leaves in `[start, end)`: `(va, level, leaf)` with level 2 for
    /// PMD blocks (reported once, at the block's start).
    pub fn leaves(&self, start: u64, end: u64) -> Vec<(u64, u8, Leaf)> {
        let mut out = Vec::new();
        self.walk(self.root, 4, 0, start, end, &mut out);
        out
    }

    fn walk(
        &self,
        t: Pfn,
        level: u8,
        base: u64,
        start: u64,
        end: u64,
        out: &mut Vec<(u64, u8, Leaf)>,
    ) {
        let tbl = &self.tables[&t.0];
        if tbl.used == 0 {
            return;
        }
        let span = entry_span(level);
        for i in 0..PTRS_PER_TABLE {
            let lo = base + i as u64 * span;
            let hi = lo + span;
            if hi <= start || lo >= end {
                continue;
            }
            match self.decode(level, tbl.entries[i]) {
                Entry::None | Entry::Swap(_) => {}
                Entry::Table(next) => self.walk(next, level - 1, lo, start, end, out),
                Entry::Leaf(l) => out.push((lo, level, l)),
            }
        }
    }

    /// The 2 MiB slots in `[start, end)` whose PMD entry is not none (a PTE
    /// table or a PMD leaf), as slot start addresses in increasing order.
    /// Walks only existing tables, and only the entries of each that
    /// overlap the range: a none PGD/PUD/PMD entry costs one look however
    /// much it covers. No event is counted (observation and bookkeeping
    /// only). Linux: mm/pagewalk.c walk_pgd_range() with a pte_hole
    /// callback, which fs/proc/task_mmu.c pagemap_read() uses the same way.
    pub fn populated_slots(&self, start: u64, end: u64) -> Vec<u64> {
        let mut out = Vec::new();
        if start < end {
            self.walk_slots(self.root, 4, 0, start, end, &mut out);
        }
        out
    }

    fn walk_slots(&self, t: Pfn, level: u8, base: u64, start: u64, end: u64, out: &mut Vec<u64>) {
        let tbl = &self.tables[&t.0];
        let span = entry_span(level);
        if tbl.used == 0
            || end <= base
            || start >= base.saturating_add(span * PTRS_PER_TABLE as u64)
        {
            return;
        }
        // Only the entries overlapping [start, end).
        let first = (start.saturating_sub(base) / span) as usize;
        let last = ((end - 1 - base) / span).min(PTRS_PER_TABLE as u64 - 1) as usize;
        for i in first..=last {
            let lo = base + i as u64 * span;
            match (level, self.decode(level, tbl.entries[i])) {
                (2, Entry::Table(_) | Entry::Leaf(_)) => out.push(lo),
                (3.., Entry::Table(next)) => self.walk_slots(next, level - 1, lo, start, end, out),
                _ => {}
            }
        }
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
                for j in 0..PTRS_PER_TABLE {
                    if let Entry::Table(next) = self.decode(level, tbl.entries[j]) {
                        out.push((next, level - 1, base + j as u64 * entry_span(level)));
                    }
                }
            }
            i += 1;
        }
        out
    }

    /// Free page tables in `[addr, end)` no longer needed between `floor`
    /// and `ceiling` (0 = top of the address space).
    /// Linux: mm/memory.c free_pgd_range() and free_{p4d,pud,pmd}_range(),
    /// free_pte_range(). Leaves must already be zapped.
    pub fn free_pgd_range(
        &mut self,
        addr: u64,
        end: u64,
        floor: u64,
        ceiling: u64,
        phys: &mut PhysMem,
    ) {
        // The top-level trim works at PGD granularity on the tree below it;
        // each level repeats the same floor/ceiling trimming with its own mask.
        self.free_level(self.root, 4, addr, end, floor, ceiling, phys);
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
    ) {
        let span = entry_span(level);
        if addr >= end {
            return;
        }
        let mut a = addr;
        loop {
            let next = ((a / span) + 1).saturating_mul(span).min(end);
            let i = index(level, a);
            if let Entry::Table(child) = self.decode(level, self.tables[&t.0].entries[i]) {
                let child_level = level - 1;
                if child_level >= 1 && level > 2 {
                    self.free_level(child, child_level, a, next, floor, ceiling, phys);
                }
                // Free the child table if the whole span of this entry is
                // within [floor, ceiling) (kernel: start/end masking against
                // floor and ceiling in free_pmd_range etc.).
                let lo = a & !(span - 1);
                let hi = lo.wrapping_add(span);
                let above_floor = lo >= floor;
                let below_ceiling = ceiling == 0 || hi.wrapping_sub(1) <= ceiling.wrapping_sub(1);
                if above_floor && below_ceiling && self.subtree_empty(child, child_level) {
                    self.free_subtree(child, child_level, phys);
                    self.write_raw(t, level, i, 0);
                }
            }
            if next >= end {
                break;
            }
            a = next;
        }
    }

    fn subtree_empty(&self, t: Pfn, level: u8) -> bool {
        let tbl = &self.tables[&t.0];
        if level == 1 {
            return tbl.used == 0;
        }
        (0..PTRS_PER_TABLE).all(|j| match self.decode(level, tbl.entries[j]) {
            Entry::None => true,
            Entry::Table(c) => self.subtree_empty(c, level - 1),
            Entry::Leaf(_) | Entry::Swap(_) => false,
        })
    }

    fn free_subtree(&mut self, t: Pfn, level: u8, phys: &mut PhysMem) {
        if level > 1 {
            let children: Vec<Pfn> = {
                let tbl = &self.tables[&t.0];
                (0..PTRS_PER_TABLE)
                    .filter_map(|j| match self.decode(level, tbl.entries[j]) {
                        Entry::Table(c) => Some(c),
                        _ => None,
                    })
                    .collect()
            };
            for c in children {
                self.free_subtree(c, level - 1, phys);
            }
        }
        self.tables.remove(&t.0);
        phys.free_pt_page(t);
    }

    /// Tear down the whole tree (exit). Leaves must already be zapped.
    pub fn free_all(&mut self, phys: &mut PhysMem) {
        let root = self.root;
        let tbl_level = 4;
        let children: Vec<(usize, Pfn)> = {
            let tbl = &self.tables[&root.0];
            (0..PTRS_PER_TABLE)
                .filter_map(|j| match self.decode(tbl_level, tbl.entries[j]) {
                    Entry::Table(c) => Some((j, c)),
                    _ => None,
                })
                .collect()
        };
        for (j, c) in children {
            self.free_subtree(c, 3, phys);
            self.write_raw(root, 4, j, 0);
        }
        self.tables.remove(&root.0);
        phys.free_pt_page(root);
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
    pub fn set_swap_pte(&mut self, va: u64, s: crate::arch::SwapPte) {
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
    pub fn set_swap_pte_counted(&mut self, va: u64, s: crate::arch::SwapPte) {
        if self.cont().is_some() {
            self.hw.one(HwEvent::PteLoad);
        }
        self.hw.one(HwEvent::PteStore);
        self.set_swap_pte(va, s);
    }

    /// ptep_get_and_clear() of a swap PTE, counted: one atomic clear (x86
    /// XCHG, arm64 SWP), and on arm64 the contpte_try_unfold() check's load.
    /// Linux: arch/arm64/include/asm/pgtable.h ptep_get_and_clear() /
    /// get_and_clear_full_ptes(nr = 1); x86 native_ptep_get_and_clear().
    pub fn get_and_clear_swap_pte(&mut self, va: u64) {
        if self.cont().is_some() {
            self.hw.one(HwEvent::PteLoad);
        }
        self.hw.one(HwEvent::PteAtomicClear);
        self.clear_pte_entry(va);
    }

    /// pte_clear() of a non-present PTE, counted: one plain store on both
    /// architectures. Linux: include/linux/pgtable.h
    /// clear_not_present_full_ptes() → pte_clear() (x86 native_pte_clear(),
    /// arm64 __set_pte(ptep, __pte(0)) without a load).
    pub fn clear_swap_pte_counted(&mut self, va: u64) {
        self.hw.one(HwEvent::PteStore);
        self.clear_pte_entry(va);
    }

    /// The swap PTE at `va`, if there is one.
    pub fn swap_pte(&self, va: u64) -> Option<crate::arch::SwapPte> {
        match self.pte_raw(va) {
            Entry::Swap(s) => Some(s),
            _ => None,
        }
    }

    /// Swap PTEs in `[start, end)`, in address order.
    pub fn swap_ptes(&self, start: u64, end: u64) -> Vec<(u64, crate::arch::SwapPte)> {
        let mut out = Vec::new();
        self.walk_swap(self.root, 4, 0, start, end, &mut out);
        out
    }

    fn walk_swap(
        &self,
        t: Pfn,
        level: u8,
        base: u64,
        start: u64,
        end: u64,
        out: &mut Vec<(u64, crate::arch::SwapPte)>,
    ) {
        let tbl = &self.tables[&t.0];
        if tbl.used == 0 {
            return;
        }
        let span = entry_span(level);
        for i in 0..PTRS_PER_TABLE {
            let lo = base + i as u64 * span;
            if lo + span <= start || lo >= end {
                continue;
            }
            match self.decode(level, tbl.entries[i]) {
                Entry::Table(next) => self.walk_swap(next, level - 1, lo, start, end, out),
                Entry::Swap(s) => out.push((lo, s)),
                _ => {}
            }
        }
    }
}
