//! What a picture shows: a frozen copy of every process's VMAs, page-table
//! tree and page states at one moment, taken either from the model (page
//! tables, descriptors and all) or from what `/proc` shows (live runs, or
//! any [`Observation`]).
//!
//! A snapshot is plain data: the layout and rendering never look at the
//! model again, so a snapshot can be taken after one statement and drawn
//! after the run has moved on.

use ptlab_model::arch::{Entry, LeafFlags};
use ptlab_model::observe::{MapsEntry, PageState};
use ptlab_model::pgtable::entry_span;
use ptlab_model::{ArchKind, Model, Observation, Pid, PMD_SIZE};
use std::collections::BTreeMap;

/// Entries per page-table page.
pub const ENTRIES: usize = 512;

/// The folio key given to every page of the huge zero folio (its frame is
/// not visible through /proc, so model and live snapshots share this key).
pub const HUGE_ZERO_FOLIO: u64 = u64::MAX - 1;

/// Where a snapshot's facts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The model: page-table pages, descriptors and /proc view.
    Model,
    /// Only what /proc shows (maps, smaps, pagemap, kpageflags,
    /// kpagecount): page-table pages and descriptor bits are not visible.
    Proc,
}

/// What one virtual page maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PteKind {
    /// A none entry (model) or a page that pagemap reports not present (live).
    #[default]
    None,
    /// The shared 4 KiB zero page.
    Zero,
    /// A page of the huge zero folio (always PMD-mapped).
    HugeZero,
    /// A page of an anonymous folio.
    Anon,
    /// A swap entry (pagemap PM_SWAP): maps no frame.
    Swap,
    /// A guard marker (MADV_GUARD_INSTALL; pagemap PM_SWAP |
    /// PM_GUARD_REGION): maps no frame, any access is SIGSEGV.
    Guard,
}

impl PteKind {
    /// The one classification of what /proc shows for a page, shared by
    /// model and live snapshots.
    pub fn of(state: &PageState) -> PteKind {
        match state {
            PageState::NotPresent => PteKind::None,
            PageState::Zero => PteKind::Zero,
            PageState::HugeZero { .. } => PteKind::HugeZero,
            PageState::Anon(_) => PteKind::Anon,
            PageState::Swapped { .. } => PteKind::Swap,
            PageState::Guard => PteKind::Guard,
        }
    }
    /// What a model descriptor is, before the /proc view refines a present
    /// one (zero page, huge zero page or anonymous page).
    pub fn of_entry(e: &Entry) -> PteKind {
        match e {
            Entry::None | Entry::Table(_) => PteKind::None,
            Entry::Leaf(_) => PteKind::Anon,
            Entry::Swap(_) => PteKind::Swap,
            Entry::Marker(m) if m.is_guard() => PteKind::Guard,
            // A uffd-wp marker (not made for anonymous memory) maps nothing.
            Entry::Marker(_) => PteKind::None,
        }
    }

    /// The name used in the page's `data-state` and legend.
    pub fn name(self) -> &'static str {
        match self {
            PteKind::None => "none",
            PteKind::Zero => "zero",
            PteKind::HugeZero => "hugezero",
            PteKind::Anon => "anon",
            PteKind::Swap => "swap",
            PteKind::Guard => "guard",
        }
    }
}

/// One page-table entry (or one page of a PMD leaf), as drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pte {
    pub kind: PteKind,
    /// Head frame of the folio (model frame or real frame); 0 when unknown
    /// (live run without root) or for the zero page.
    pub folio: u64,
    /// The frame this entry maps (0 when unknown or none).
    pub pfn: u64,
    /// Folio order (0 for a small folio).
    pub order: u8,
    /// Index of the page within its folio.
    pub index: u32,
    /// Descriptor attributes (model only).
    pub flags: Option<LeafFlags>,
    /// The raw descriptor (model only; 0 for a none entry or live).
    pub raw: u64,
    /// pagemap bit 56 (PM_MMAP_EXCLUSIVE).
    pub x: bool,
    /// kpageflags anon-exclusive.
    pub ax: bool,
    /// kpagecount.
    pub cnt: u32,
}

impl Pte {
    pub fn present(&self) -> bool {
        self.kind != PteKind::None
    }

    /// A key that changes whenever the entry changes: the descriptor in a
    /// model snapshot, the pagemap-visible state in a /proc snapshot.
    pub fn change_key(&self) -> (u64, PteKind, u64, bool) {
        if self.flags.is_some() {
            (self.raw, PteKind::None, 0, false)
        } else {
            (0, self.kind, self.pfn, self.x)
        }
    }

    /// Whether the entry forbids writes (known only for model snapshots).
    pub fn read_only(&self) -> bool {
        matches!(self.flags, Some(f) if !f.contains(LeafFlags::WRITE))
    }

    /// arm64 contiguous bit on a valid entry.
    pub fn cont(&self) -> bool {
        matches!(self.flags, Some(f) if f.contains(LeafFlags::CONT) && !f.contains(LeafFlags::PROTNONE))
    }
}

/// What one 2 MiB slot (one PMD entry) holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    /// A PTE table (model), or the pages /proc shows PTE-mapped in this
    /// slot (live: `frame` is `None` and the table itself is not visible).
    Table {
        frame: Option<u64>,
        /// Non-none entries (model: the table's `used` count).
        used: u16,
        ptes: Box<[Pte; ENTRIES]>,
    },
    /// A PMD block mapping; `pte` describes its first page.
    Leaf {
        pte: Pte,
        /// A PTE table is deposited with it (model only).
        deposited: bool,
    },
}

impl Slot {
    /// Present pages this slot maps.
    pub fn present(&self) -> u64 {
        match self {
            Slot::Table { ptes, .. } => ptes.iter().filter(|p| p.present()).count() as u64,
            Slot::Leaf { .. } => ENTRIES as u64,
        }
    }
}

/// One VMA as maps/smaps show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmaSnap {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    /// smaps VmFlags mnemonics.
    pub flags: Vec<String>,
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
}

impl From<&MapsEntry> for VmaSnap {
    fn from(m: &MapsEntry) -> Self {
        VmaSnap {
            start: m.start,
            end: m.end,
            perms: m.perms.clone(),
            flags: m.vm_flags.clone(),
            rss_kb: m.rss_kb,
            anon_huge_kb: m.anon_huge_kb,
        }
    }
}

/// A page-table page above the PTE level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpperTable {
    /// 4 = PGD, 3 = PUD, 2 = PMD.
    pub level: u8,
    /// First address the table covers.
    pub va: u64,
    pub frame: u64,
    /// Non-none entries.
    pub used: u16,
}

impl UpperTable {
    /// Bytes the whole table covers.
    pub fn span(&self) -> u64 {
        table_span(self.level)
    }
}

/// Bytes covered by a whole table at `level` (512 entries).
pub fn table_span(level: u8) -> u64 {
    entry_span(level).saturating_mul(ENTRIES as u64)
}

/// One process at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcSnap {
    pub name: String,
    pub vmas: Vec<VmaSnap>,
    /// PGD, PUD and PMD tables in address order (empty for a /proc snapshot).
    pub upper: Vec<UpperTable>,
    /// Non-empty 2 MiB slots, by slot address.
    pub slots: BTreeMap<u64, Slot>,
    /// Page-table pages deposited with PMD leaves (model only).
    pub deposited: u64,
}

impl ProcSnap {
    /// Present PTEs (entries of PTE tables), PMD leaves.
    pub fn counts(&self) -> (u64, u64) {
        let mut ptes = 0;
        let mut leaves = 0;
        for s in self.slots.values() {
            match s {
                Slot::Table { .. } => ptes += s.present(),
                Slot::Leaf { .. } => leaves += 1,
            }
        }
        (ptes, leaves)
    }

    /// PTE tables (model) or slots with PTE-mapped pages (/proc).
    pub fn pte_tables(&self) -> u64 {
        self.slots
            .values()
            .filter(|s| matches!(s, Slot::Table { .. }))
            .count() as u64
    }

    /// Resident set in kB (sum over VMAs).
    pub fn rss_kb(&self) -> u64 {
        self.vmas.iter().map(|v| v.rss_kb).sum()
    }
}

/// Every process at one moment, plus the global THP counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub source: Source,
    /// The modelled architecture (model snapshots only).
    pub arch: Option<ArchKind>,
    pub procs: Vec<ProcSnap>,
    /// THP counters (absolute values, keyed like observations' `stats`).
    pub stats: BTreeMap<String, i64>,
}

impl Snapshot {
    /// Snapshot the model's processes `procs` (name, pid), in that order.
    /// Processes that no longer exist are skipped.
    pub fn from_model(model: &Model, procs: &[(String, Pid)]) -> Snapshot {
        let mut out = Snapshot {
            source: Source::Model,
            arch: Some(model.arch()),
            procs: Vec::new(),
            stats: model.phys().stats.to_map(),
        };
        for (name, pid) in procs {
            let Some(mm) = model.mm(*pid) else { continue };
            let obs = model.observe(*pid, name);
            let mut p = proc_from_observation(&obs);
            let arch = mm.pt.arch();
            let mut upper = Vec::new();
            let mut tables: BTreeMap<u64, Slot> = BTreeMap::new();
            for (frame, level, va) in mm.pt.tables_in_tree() {
                let Some(t) = mm.pt.table(frame) else {
                    continue;
                };
                if level == 1 {
                    let mut ptes = Box::new([Pte::default(); ENTRIES]);
                    for (i, raw) in t.entries().iter().enumerate() {
                        let e = arch.decode(1, raw);
                        if let Entry::Leaf(l) = e {
                            ptes[i] = Pte {
                                kind: PteKind::Anon,
                                pfn: l.pfn.0,
                                flags: Some(l.flags),
                                raw,
                                ..Pte::default()
                            };
                        } else if raw != 0 {
                            ptes[i] = Pte {
                                kind: PteKind::of_entry(&e),
                                raw,
                                flags: Some(LeafFlags::empty()),
                                ..Pte::default()
                            };
                        }
                    }
                    tables.insert(
                        va,
                        Slot::Table {
                            frame: Some(frame.0),
                            used: t.used,
                            ptes,
                        },
                    );
                    continue;
                }
                upper.push(UpperTable {
                    level,
                    va,
                    frame: frame.0,
                    used: t.used,
                });
                if level == 2 {
                    for (i, raw) in t.entries().iter().enumerate() {
                        if let Entry::Leaf(l) = arch.decode(2, raw) {
                            let slot = va + i as u64 * PMD_SIZE;
                            tables.insert(
                                slot,
                                Slot::Leaf {
                                    pte: Pte {
                                        kind: PteKind::Anon,
                                        pfn: l.pfn.0,
                                        flags: Some(l.flags),
                                        raw,
                                        ..Pte::default()
                                    },
                                    deposited: mm.deposited.contains_key(&slot),
                                },
                            );
                        }
                    }
                }
            }
            // Merge the /proc view (kind, folio, X, AX, cnt) into the
            // descriptors: `p.slots` was built from the observation alone.
            for (va, slot) in tables.iter_mut() {
                let seen = p.slots.get(va);
                match (slot, seen) {
                    (Slot::Table { ptes, .. }, Some(Slot::Table { ptes: obs, .. })) => {
                        for (e, o) in ptes.iter_mut().zip(obs.iter()) {
                            if o.present() {
                                let (flags, raw, pfn) = (e.flags, e.raw, e.pfn);
                                *e = *o;
                                e.flags = flags.or(Some(LeafFlags::empty()));
                                e.raw = raw;
                                if pfn != 0 {
                                    e.pfn = pfn;
                                }
                            }
                        }
                    }
                    (Slot::Leaf { pte, .. }, Some(Slot::Leaf { pte: o, .. })) => {
                        let (flags, raw, pfn) = (pte.flags, pte.raw, pte.pfn);
                        *pte = *o;
                        pte.flags = flags;
                        pte.raw = raw;
                        pte.pfn = pfn;
                    }
                    _ => {}
                }
            }
            upper.sort_by_key(|u| (u.va, std::cmp::Reverse(u.level)));
            p.upper = upper;
            p.slots = tables;
            p.deposited = mm.deposited.len() as u64;
            out.procs.push(p);
        }
        out
    }

    /// Snapshot from observations (a live run, or any /proc view): no
    /// page-table pages, and a slot is a "table" when /proc shows
    /// PTE-mapped pages in it.
    pub fn from_observations(obs: &[Observation]) -> Snapshot {
        Snapshot {
            source: Source::Proc,
            arch: None,
            procs: obs.iter().map(proc_from_observation).collect(),
            stats: obs.first().map(|o| o.stats.clone()).unwrap_or_default(),
        }
    }

    pub fn proc(&self, name: &str) -> Option<&ProcSnap> {
        self.procs.iter().find(|p| p.name == name)
    }
}

/// The /proc view of one process as a [`ProcSnap`] without tables.
fn proc_from_observation(obs: &Observation) -> ProcSnap {
    let mut slots: BTreeMap<u64, Slot> = BTreeMap::new();
    for page in &obs.pages {
        let slot_va = page.addr & !(PMD_SIZE - 1);
        let i = ((page.addr - slot_va) >> 12) as usize;
        let (pte, pmd) = match &page.state {
            PageState::NotPresent => continue,
            // Non-present entries that are not none: drawn, mapping nothing.
            PageState::Swapped { .. } | PageState::Guard => (
                Pte {
                    kind: PteKind::of(&page.state),
                    ..Pte::default()
                },
                false,
            ),
            PageState::Zero => (
                Pte {
                    kind: PteKind::Zero,
                    ..Pte::default()
                },
                false,
            ),
            PageState::HugeZero { index } => (
                Pte {
                    kind: PteKind::HugeZero,
                    folio: HUGE_ZERO_FOLIO,
                    order: 9,
                    index: *index,
                    ..Pte::default()
                },
                true,
            ),
            PageState::Anon(a) => (
                Pte {
                    kind: PteKind::Anon,
                    folio: if a.pfn == 0 {
                        0
                    } else {
                        a.pfn - a.index as u64
                    },
                    pfn: a.pfn,
                    order: a.order,
                    index: a.index,
                    flags: None,
                    raw: 0,
                    x: a.mmap_exclusive,
                    ax: a.anon_exclusive,
                    cnt: a.mapcount,
                },
                a.pmd_mapped,
            ),
        };
        if pmd {
            slots.entry(slot_va).or_insert(Slot::Leaf {
                pte,
                deposited: false,
            });
            continue;
        }
        let slot = slots.entry(slot_va).or_insert_with(|| Slot::Table {
            frame: None,
            used: 0,
            ptes: Box::new([Pte::default(); ENTRIES]),
        });
        if let Slot::Table { used, ptes, .. } = slot {
            ptes[i] = pte;
            *used += 1;
        }
    }
    ProcSnap {
        name: obs.process.clone(),
        vmas: obs.maps.iter().map(VmaSnap::from).collect(),
        upper: Vec::new(),
        slots,
        deposited: 0,
    }
}

/// Which entries changed between two snapshots of one process: per slot, a
/// 512-bit set (a PMD leaf that changed marks all 512).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub slots: BTreeMap<u64, [u64; ENTRIES / 64]>,
}

impl Changes {
    /// Compare `before` and `after` (the same process at two moments).
    pub fn between(before: &ProcSnap, after: &ProcSnap) -> Changes {
        let mut out = Changes::default();
        let keys: std::collections::BTreeSet<u64> = before
            .slots
            .keys()
            .chain(after.slots.keys())
            .copied()
            .collect();
        for va in keys {
            let a = page_keys(before.slots.get(&va));
            let b = page_keys(after.slots.get(&va));
            let mut bits = [0u64; ENTRIES / 64];
            let mut any = false;
            for i in 0..ENTRIES {
                if a(i) != b(i) {
                    bits[i / 64] |= 1 << (i % 64);
                    any = true;
                }
            }
            if any {
                out.slots.insert(va, bits);
            }
        }
        out
    }

    pub fn is_changed(&self, slot: u64, i: usize) -> bool {
        self.slots
            .get(&slot)
            .is_some_and(|b| b[i / 64] & (1 << (i % 64)) != 0)
    }

    /// Changed entries in `slot`.
    pub fn count_in(&self, slot: u64) -> u64 {
        self.slots
            .get(&slot)
            .map_or(0, |b| b.iter().map(|w| w.count_ones() as u64).sum())
    }

    /// Changed entries in total.
    pub fn total(&self) -> u64 {
        self.slots
            .values()
            .map(|b| b.iter().map(|w| w.count_ones() as u64).sum::<u64>())
            .sum()
    }
}

type PageKey = (u8, (u64, PteKind, u64, bool));

/// Per-page comparison keys of a slot (a leaf contributes its key with a
/// marker to every page).
fn page_keys(slot: Option<&Slot>) -> impl Fn(usize) -> PageKey + '_ {
    move |i| match slot {
        Some(Slot::Table { ptes, .. }) if ptes[i].present() => (1, ptes[i].change_key()),
        Some(Slot::Leaf { pte, .. }) => (2, pte.change_key()),
        _ => (0, Pte::default().change_key()),
    }
}
