//! From a snapshot of one process to the rows of its picture: the
//! page-table tree as an outline (PGD → PUD → PMD tables → PMD entries),
//! with runs collapsed so that a 1 GiB mapping stays a handful of rows.
//!
//! Collapsing rules, applied to the 512 entries of every PMD table:
//!
//! * consecutive none PMD entries with the same VMA cover become one
//!   [`Row::Gap`] with a count and a size;
//! * consecutive PMD leaves with the same attributes become one
//!   [`Row::PmdLeaves`] with a count;
//! * consecutive PTE tables with the same *layout* become one
//!   [`Row::Ptes`] with a count. Two tables have the same layout when every
//!   entry agrees in kind, folio order, index in the folio, whether it
//!   continues the previous entry's folio, descriptor attributes, X / AX /
//!   mapcount, the VMA it lies in and whether the step changed it — only
//!   the frames differ;
//! * a run of two or more *uniform* tables (every entry present, the same
//!   attributes, each folio mapped whole and in order) is drawn as a
//!   summary; a single table, or a non-uniform run, is drawn entry by
//!   entry (a grid) while the grid budget lasts, then as a compact strip
//!   while the strip budget lasts;
//! * past both budgets, consecutive non-uniform tables with *different*
//!   layouts merge into one "mixed" row: one thin column per table showing
//!   how full it is (so a 1 GiB state stays a few MB even when every table
//!   differs from its neighbours).
//!
//! VMAs that lie where no table exists (nothing was ever mapped there)
//! appear as [`Row::Missing`] rows under the deepest table that exists.

use crate::snapshot::{table_span, Changes, ProcSnap, Pte, PteKind, Slot, Source, ENTRIES};
use ptlab_model::pgtable::entry_span;
use ptlab_model::{PMD_SIZE, PUD_SIZE};
use std::collections::HashMap;

/// How a run of PTE tables is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PteMode {
    /// Every entry as a cell (512 per table, 32 × 16).
    Grid,
    /// One bar, a segment per run of alike entries (non-uniform tables
    /// beyond the grid budget).
    Strip,
    /// Tables of different layouts, beyond both budgets: one column per
    /// table, its height the share of present entries.
    Mixed,
    /// One bar and a one-line description (uniform tables).
    Summary,
}

/// Which VMAs cover an address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cover {
    /// No VMA intersects it.
    Outside,
    /// VMA number `n` covers all of it.
    One(usize),
    /// Several VMAs, or a VMA and a hole: never merged with a neighbour
    /// (carries the range start to stay unique).
    Mixed(u64),
}

/// One row of a process's picture, in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Row {
    /// A page-table page above the PTE level. For /proc snapshots, a
    /// `virtual` 1 GiB region header (the tables are not visible).
    Upper {
        depth: u8,
        level: u8,
        va: u64,
        frame: Option<u64>,
        used: Option<u16>,
        virtual_region: bool,
    },
    /// VMAs lie in `[start, end)` but the `n` consecutive tables at `level`
    /// that would map them do not exist (their parent entries are none).
    /// Level 0 (/proc snapshots, where tables are not visible): `n`
    /// consecutive 1 GiB regions in which /proc shows no page at all.
    Missing {
        depth: u8,
        level: u8,
        start: u64,
        end: u64,
        n: u64,
    },
    /// The header of VMA number `idx` (placed before the first row that
    /// holds its start).
    Vma { depth: u8, idx: usize },
    /// `n` none PMD entries from `first` (index in the PMD table).
    Gap {
        depth: u8,
        start: u64,
        first: usize,
        n: usize,
        cover: Cover,
    },
    /// `n` PMD leaves alike; `slot` is the first.
    PmdLeaves {
        depth: u8,
        start: u64,
        first: usize,
        n: usize,
        changed: u64,
    },
    /// `n` PTE tables with one layout (or, for [`PteMode::Mixed`], `n`
    /// consecutive tables of varied layouts); `start` is the first (drawn as
    /// the representative).
    Ptes {
        depth: u8,
        start: u64,
        first: usize,
        n: usize,
        mode: PteMode,
        uniform: bool,
        /// Present entries over all `n` tables.
        present: u64,
        /// Changed entries over all `n` tables.
        changed: u64,
    },
}

impl Row {
    pub fn depth(&self) -> u8 {
        match *self {
            Row::Upper { depth, .. }
            | Row::Missing { depth, .. }
            | Row::Vma { depth, .. }
            | Row::Gap { depth, .. }
            | Row::PmdLeaves { depth, .. }
            | Row::Ptes { depth, .. } => depth,
        }
    }

    /// The address range of a row that stands for memory (not headers).
    pub fn range(&self) -> Option<(u64, u64)> {
        match *self {
            Row::Missing { start, end, .. } => Some((start, end)),
            Row::Gap { start, n, .. }
            | Row::PmdLeaves { start, n, .. }
            | Row::Ptes { start, n, .. } => Some((start, start + n as u64 * PMD_SIZE)),
            Row::Upper { .. } | Row::Vma { .. } => None,
        }
    }
}

/// Knobs of the layout.
#[derive(Clone, Copy, Debug)]
pub struct LayoutOptions {
    /// PTE tables that may be drawn as grids (shared by everything laid
    /// out with one budget; later tables become strips).
    pub grid_budget: usize,
    /// Non-uniform PTE tables that may be drawn as strips once the grids
    /// are used up (later ones merge into mixed rows).
    pub strip_budget: usize,
}

impl Default for LayoutOptions {
    fn default() -> Self {
        LayoutOptions {
            grid_budget: 24,
            strip_budget: 64,
        }
    }
}

/// What is left of the budgets while laying out several processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub grids: usize,
    pub strips: usize,
}

impl From<LayoutOptions> for Budget {
    fn from(o: LayoutOptions) -> Self {
        Budget {
            grids: o.grid_budget,
            strips: o.strip_budget,
        }
    }
}

/// The rows of one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcLayout {
    pub rows: Vec<Row>,
}

impl ProcLayout {
    /// Rows of a given kind, for tests and summaries.
    pub fn count(&self, pred: impl Fn(&Row) -> bool) -> usize {
        self.rows.iter().filter(|r| pred(r)).count()
    }
}

/// Lay out `p`. `changes` marks entries the step changed; `budget` holds
/// the grids and strips still allowed (decremented).
pub fn layout_proc(
    p: &ProcSnap,
    source: Source,
    changes: Option<&Changes>,
    budget: &mut Budget,
) -> ProcLayout {
    let mut b = Builder {
        p,
        changes,
        rows: Vec::new(),
        vma_index: VmaIndex::new(p),
    };
    match source {
        Source::Model => b.model_tree(),
        Source::Proc => b.proc_regions(),
    }
    let rows = assign_modes(b.rows, budget);
    let rows = insert_vma_headers(p, rows);
    ProcLayout { rows }
}

/// Finds the VMA containing an address.
struct VmaIndex {
    starts: Vec<u64>,
    ends: Vec<u64>,
}

impl VmaIndex {
    fn new(p: &ProcSnap) -> Self {
        VmaIndex {
            starts: p.vmas.iter().map(|v| v.start).collect(),
            ends: p.vmas.iter().map(|v| v.end).collect(),
        }
    }

    /// VMA number containing `va`.
    fn at(&self, va: u64) -> Option<usize> {
        let i = self.ends.partition_point(|&e| e <= va);
        (i < self.starts.len() && self.starts[i] <= va).then_some(i)
    }

    /// Which VMAs cover `[start, end)`.
    fn cover(&self, start: u64, end: u64) -> Cover {
        let i = self.ends.partition_point(|&e| e <= start);
        if i >= self.starts.len() || self.starts[i] >= end {
            return Cover::Outside;
        }
        if self.starts[i] <= start && self.ends[i] >= end {
            Cover::One(i)
        } else {
            Cover::Mixed(start)
        }
    }

    /// The smallest range holding every VMA part inside `[start, end)`.
    fn hull(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        let i = self.ends.partition_point(|&e| e <= start);
        let j = self.starts.partition_point(|&s| s < end);
        (i < j).then(|| (self.starts[i].max(start), self.ends[j - 1].min(end)))
    }
}

/// Per-entry facts that make up a table's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryClass {
    pub kind: PteKind,
    pub order: u8,
    pub index: u32,
    /// The entry maps the next page of the previous entry's folio.
    pub continues: bool,
    pub flags: u16,
    pub x: bool,
    pub ax: bool,
    pub cnt: u32,
    pub vma: Option<usize>,
    pub changed: bool,
}

/// The layout of the PTE table at `slot_va`.
pub fn table_layout(
    ptes: &[Pte; ENTRIES],
    slot_va: u64,
    vma_at: &dyn Fn(u64) -> Option<usize>,
    changes: Option<&Changes>,
) -> Vec<EntryClass> {
    let mut out = Vec::with_capacity(ENTRIES);
    let mut prev: Option<&Pte> = None;
    for (i, e) in ptes.iter().enumerate() {
        let continues = e.kind == PteKind::Anon
            && e.folio != 0
            && prev.is_some_and(|p| {
                p.kind == PteKind::Anon && p.folio == e.folio && p.index + 1 == e.index
            });
        out.push(EntryClass {
            kind: e.kind,
            order: e.order,
            index: e.index,
            continues,
            flags: e.flags.map_or(u16::MAX, |f| f.bits()),
            x: e.x,
            ax: e.ax,
            cnt: e.cnt,
            vma: vma_at(slot_va + i as u64 * 4096),
            changed: changes.is_some_and(|c| c.is_changed(slot_va, i)),
        });
        prev = Some(e);
    }
    out
}

/// Uniform: every entry present and alike, each folio mapped whole and in
/// order (for /proc snapshots without frames, folio continuity is not known
/// and only the index pattern is checked).
pub fn is_uniform(classes: &[EntryClass]) -> bool {
    let Some(first) = classes.first() else {
        return false;
    };
    if !matches!(first.kind, PteKind::Anon | PteKind::Zero) {
        return false;
    }
    let pages = 1u32 << first.order;
    classes.iter().enumerate().all(|(i, c)| {
        let i = i as u32;
        c.kind == first.kind
            && c.order == first.order
            && c.flags == first.flags
            && c.x == first.x
            && c.ax == first.ax
            && c.cnt == first.cnt
            && c.vma == first.vma
            && c.changed == first.changed
            && (c.kind == PteKind::Zero || c.index == i % pages)
    })
}

/// What a PMD entry holds, for grouping runs.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SlotKey {
    Empty(Cover),
    Leaf {
        kind: PteKind,
        flags: u16,
        x: bool,
        ax: bool,
        cnt: u32,
        cover: Cover,
        changed: bool,
    },
    Table(Vec<EntryClass>),
}

struct Builder<'a> {
    p: &'a ProcSnap,
    changes: Option<&'a Changes>,
    rows: Vec<Row>,
    vma_index: VmaIndex,
}

impl Builder<'_> {
    fn model_tree(&mut self) {
        let by_key: HashMap<(u8, u64), (u64, u16)> = self
            .p
            .upper
            .iter()
            .map(|u| ((u.level, u.va), (u.frame, u.used)))
            .collect();
        self.upper_table(4, 0, &by_key, 0);
    }

    /// Emit the table at (`level`, `va`) if it exists, else a Missing row
    /// for the VMAs under it; recurse down to PMD tables.
    fn upper_table(
        &mut self,
        level: u8,
        va: u64,
        tables: &HashMap<(u8, u64), (u64, u16)>,
        depth: u8,
    ) {
        let span = table_span(level);
        let Some(&(frame, used)) = tables.get(&(level, va)) else {
            if let Some((s, e)) = self.vma_index.hull(va, va.saturating_add(span)) {
                // Consecutive absent tables under one VMA cover are one
                // row (a 127 TiB mapping is one row, not 254).
                if let Some(Row::Missing {
                    depth: d,
                    level: l,
                    end,
                    n,
                    ..
                }) = self.rows.last_mut()
                {
                    if *d == depth && *l == level && *end == s {
                        *end = e;
                        *n += 1;
                        return;
                    }
                }
                self.rows.push(Row::Missing {
                    depth,
                    level,
                    start: s,
                    end: e,
                    n: 1,
                });
            }
            return;
        };
        self.rows.push(Row::Upper {
            depth,
            level,
            va,
            frame: Some(frame),
            used: Some(used),
            virtual_region: false,
        });
        if level == 2 {
            self.pmd_entries(va, depth + 1);
            return;
        }
        let child = entry_span(level);
        for i in 0..ENTRIES as u64 {
            let lo = va + i * child;
            let hi = lo.saturating_add(child);
            let has_table = tables.contains_key(&(level - 1, lo));
            if has_table || self.vma_index.hull(lo, hi).is_some() {
                self.upper_table(level - 1, lo, tables, depth + 1);
            }
        }
    }

    /// /proc snapshots: one virtual region per 1 GiB that holds VMAs or
    /// pages, except that two or more consecutive 1 GiB regions of VMAs in
    /// which /proc shows no page become one [`Row::Missing`] (level 0).
    /// Costs in proportion to the VMAs and the populated slots, not to the
    /// size of the VMAs.
    fn proc_regions(&mut self) {
        let gib = |va: u64| va & !(PUD_SIZE - 1);
        let mut regions: Vec<u64> = self.p.slots.keys().map(|&va| gib(va)).collect();
        regions.dedup();
        // 1 GiB-aligned ranges the VMAs touch, merged.
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for v in &self.p.vmas {
            let (a, b) = (gib(v.start), gib(v.end - 1).saturating_add(PUD_SIZE));
            match spans.last_mut() {
                Some(last) if last.1 >= a => last.1 = last.1.max(b),
                _ => spans.push((a, b)),
            }
        }
        // Every region to draw, in order: regions with pages, and runs of
        // empty VMA regions between them (`Err((start, count))`).
        let mut items: Vec<Result<u64, (u64, u64)>> = Vec::new();
        let mut k = 0;
        for (a, b) in spans {
            while k < regions.len() && regions[k] < a {
                items.push(Ok(regions[k]));
                k += 1;
            }
            let mut cur = a;
            while cur < b {
                let next = regions.get(k).copied().filter(|&r| r < b).unwrap_or(b);
                if next > cur {
                    items.push(Err((cur, (next - cur) / PUD_SIZE)));
                }
                if next < b {
                    items.push(Ok(next));
                    k += 1;
                    cur = next.saturating_add(PUD_SIZE);
                } else {
                    cur = b;
                }
            }
        }
        items.extend(regions[k..].iter().map(|&r| Ok(r)));
        for item in items {
            let r = match item {
                Ok(r) | Err((r, 1)) => r,
                Err((r, n)) => {
                    let end = r.saturating_add(n * PUD_SIZE);
                    if let Some((s, e)) = self.vma_index.hull(r, end) {
                        self.rows.push(Row::Missing {
                            depth: 0,
                            level: 0,
                            start: s,
                            end: e,
                            n,
                        });
                    }
                    continue;
                }
            };
            self.rows.push(Row::Upper {
                depth: 0,
                level: 2,
                va: r,
                frame: None,
                used: None,
                virtual_region: true,
            });
            self.pmd_entries(r, 1);
        }
    }

    fn slot_key(&self, va: u64) -> SlotKey {
        let cover = self.vma_index.cover(va, va + PMD_SIZE);
        match self.p.slots.get(&va) {
            None => SlotKey::Empty(cover),
            Some(Slot::Leaf { pte, .. }) => SlotKey::Leaf {
                kind: pte.kind,
                flags: pte.flags.map_or(u16::MAX, |f| f.bits()),
                x: pte.x,
                ax: pte.ax,
                cnt: pte.cnt,
                cover,
                changed: self.changes.is_some_and(|c| c.count_in(va) > 0),
            },
            Some(Slot::Table { ptes, .. }) => {
                let vi = &self.vma_index;
                SlotKey::Table(table_layout(ptes, va, &|a| vi.at(a), self.changes))
            }
        }
    }

    /// The 512 entries of a PMD table at `base`, as runs.
    fn pmd_entries(&mut self, base: u64, depth: u8) {
        let mut i = 0usize;
        let mut key = self.slot_key(base);
        while i < ENTRIES {
            let mut j = i + 1;
            let mut next_key = None;
            while j < ENTRIES {
                let k = self.slot_key(base + j as u64 * PMD_SIZE);
                if k != key {
                    next_key = Some(k);
                    break;
                }
                j += 1;
            }
            let start = base + i as u64 * PMD_SIZE;
            let n = j - i;
            let sum = |f: &dyn Fn(u64) -> u64| -> u64 {
                (i..j).map(|k| f(base + k as u64 * PMD_SIZE)).sum()
            };
            let changed = sum(&|va| self.changes.map_or(0, |c| c.count_in(va)));
            let row = match &key {
                SlotKey::Empty(cover) => Row::Gap {
                    depth,
                    start,
                    first: i,
                    n,
                    cover: *cover,
                },
                SlotKey::Leaf { .. } => Row::PmdLeaves {
                    depth,
                    start,
                    first: i,
                    n,
                    changed,
                },
                SlotKey::Table(classes) => {
                    let uniform = is_uniform(classes);
                    // Provisional: assign_modes() decides grids and strips.
                    let mode = if uniform && n >= 2 {
                        PteMode::Summary
                    } else {
                        PteMode::Grid
                    };
                    let present = sum(&|va| self.p.slots.get(&va).map_or(0, |s| s.present()));
                    Row::Ptes {
                        depth,
                        start,
                        first: i,
                        n,
                        mode,
                        uniform,
                        present,
                        changed,
                    }
                }
            };
            self.rows.push(row);
            i = j;
            if let Some(k) = next_key {
                key = k;
            }
        }
    }
}

/// Decide how each run of PTE tables is drawn: grids while the grid budget
/// lasts, then (non-uniform ones) strips while the strip budget lasts, then
/// mixed rows. Runs the step changed are served first, so that a change
/// stays visible in a big picture. Consecutive mixed rows merge.
fn assign_modes(mut rows: Vec<Row>, budget: &mut Budget) -> Vec<Row> {
    let mut order: Vec<usize> = (0..rows.len())
        .filter(|&i| {
            matches!(
                rows[i],
                Row::Ptes {
                    mode: PteMode::Grid,
                    ..
                }
            )
        })
        .collect();
    order.sort_by_key(|&i| matches!(rows[i], Row::Ptes { changed: 0, .. }));
    for i in order {
        if let Row::Ptes { mode, uniform, .. } = &mut rows[i] {
            *mode = if budget.grids > 0 {
                budget.grids -= 1;
                PteMode::Grid
            } else if *uniform {
                PteMode::Summary
            } else if budget.strips > 0 {
                budget.strips -= 1;
                PteMode::Strip
            } else {
                PteMode::Mixed
            };
        }
    }
    let mut out: Vec<Row> = Vec::with_capacity(rows.len());
    for row in rows {
        match (out.last_mut(), &row) {
            (
                Some(Row::Ptes {
                    mode: PteMode::Mixed,
                    start: s0,
                    n: n0,
                    present: p0,
                    changed: c0,
                    depth: d0,
                    ..
                }),
                Row::Ptes {
                    mode: PteMode::Mixed,
                    start,
                    n,
                    present,
                    changed,
                    depth,
                    ..
                },
            ) if *s0 + *n0 as u64 * PMD_SIZE == *start && d0 == depth => {
                *n0 += n;
                *p0 += present;
                *c0 += changed;
            }
            _ => out.push(row),
        }
    }
    out
}

/// Insert a [`Row::Vma`] before the first memory row holding each VMA's start.
fn insert_vma_headers(p: &ProcSnap, rows: Vec<Row>) -> Vec<Row> {
    let mut out = Vec::with_capacity(rows.len() + p.vmas.len());
    let mut k = 0;
    for r in rows {
        if let Some((_, end)) = r.range() {
            while k < p.vmas.len() && p.vmas[k].start < end {
                out.push(Row::Vma {
                    depth: r.depth(),
                    idx: k,
                });
                k += 1;
            }
        }
        out.push(r);
    }
    while k < p.vmas.len() {
        out.push(Row::Vma { depth: 1, idx: k });
        k += 1;
    }
    out
}
