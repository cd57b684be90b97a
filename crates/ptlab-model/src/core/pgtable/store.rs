//! How one page-table page stores its 512 raw descriptors (issue 14):
//! either dense (the 4 KiB the kernel's page holds) or as a few **affine
//! runs** — entries `start..start + len` hold `first + k × step` in the
//! raw encoding, and every entry outside a run is 0 (none).
//!
//! A PTE table mapping consecutive frames with equal bits is one run: the
//! 512 PTEs of a PTE-mapped 2 MiB THP, or 32 consecutive 64 KiB folios
//! (on arm64 too: the CONT bit is painted on every aligned block, so equal
//! bits stay equal), or 512 order-0 pages faulted in address order. The
//! step is the raw difference of neighbours (`1 << 12` for consecutive
//! frames; 0 for a run of equal markers).
//!
//! Which representation a table has changes nothing anyone sees: every
//! read goes through [`Table::raw`] / [`Entries`], which give the same
//! value for both, and every write goes to the dense form
//! ([`Table::dense_mut`] materialises it). [`crate::core::pgtable::PageTables`]
//! decides when a table is compacted again (after a walk has left it).

use crate::core::addr::PTRS_PER_TABLE;

/// At most this many runs make a compact table (24 B each); a table that
/// needs more stays dense. Eight covers a table with a few partial folios
/// or a few young/dirty differences at 192 B, against 4 KiB dense.
pub const MAX_RUNS: usize = 8;

/// Entries `start..start + len` hold `first + k × step` (wrapping), for
/// `k` in `0..len`. Never zero inside a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub start: u16,
    pub len: u16,
    /// What the run holds, as the arch classified it when the table was
    /// compacted: [`Run::PRESENT`] and/or [`Run::NONPRESENT`] entries.
    pub kinds: u8,
    pub first: u64,
    pub step: u64,
}

impl Run {
    /// The run holds present entries (leaves, PROT_NONE included).
    pub const PRESENT: u8 = 1;
    /// The run holds swap entries or markers.
    pub const NONPRESENT: u8 = 2;

    /// One past the run's last entry.
    pub fn end(&self) -> usize {
        self.start as usize + self.len as usize
    }
    fn at(&self, i: usize) -> u64 {
        self.first
            .wrapping_add(self.step.wrapping_mul((i - self.start as usize) as u64))
    }
}

/// A read-only view of a table's entries in either representation.
#[derive(Clone, Copy, Debug)]
pub enum Entries<'a> {
    Dense(&'a [u64; PTRS_PER_TABLE]),
    Runs(&'a [Run]),
}

impl<'a> Entries<'a> {
    /// The raw descriptor of entry `i`.
    #[inline(always)]
    pub fn raw(self, i: usize) -> u64 {
        match self {
            Entries::Dense(d) => d[i],
            Entries::Runs(runs) => runs_raw(runs, i),
        }
    }

    /// The non-none entries `(index, raw)` in index order (a none entry is
    /// 0 and decodes as none: the walks skip it without decoding).
    pub fn nonzero(self) -> Box<dyn Iterator<Item = (usize, u64)> + 'a> {
        match self {
            Entries::Dense(d) => Box::new(d.iter().copied().enumerate().filter(|&(_, r)| r != 0)),
            Entries::Runs(runs) => Box::new(
                runs.iter()
                    .flat_map(|r| (r.start as usize..r.end()).map(move |i| (i, r.at(i)))),
            ),
        }
    }

    /// The run holding entry `i` of a compact table (`None`: a dense
    /// table, or `i` is none).
    #[inline]
    pub fn run_at(self, i: usize) -> Option<Run> {
        let Entries::Runs(runs) = self else {
            return None;
        };
        let k = runs
            .partition_point(|r| r.start as usize <= i)
            .checked_sub(1)?;
        (i < runs[k].end()).then_some(runs[k])
    }

    /// Whether every entry in `range` is none: `None` for a dense table
    /// (not looked at), else whether no run overlaps the range (entries
    /// outside runs are none, entries inside never are).
    #[inline]
    pub fn none_in(self, range: std::ops::Range<usize>) -> Option<bool> {
        match self {
            Entries::Dense(_) => None,
            Entries::Runs(runs) => Some(
                !runs
                    .iter()
                    .any(|r| range.start < r.end() && (r.start as usize) < range.end),
            ),
        }
    }

    /// Every raw entry in index order (512 of them).
    pub fn iter(self) -> impl Iterator<Item = u64> + 'a {
        (0..PTRS_PER_TABLE).map(move |i| self.raw(i))
    }

    /// Whether an entry in `range` is of `kind` ([`Run::PRESENT`] or
    /// [`Run::NONPRESENT`]; `is_kind` tells one raw entry): `None` for a
    /// dense table (the caller checks the slice), else from the kinds of
    /// the runs overlapping `range` — read entry by entry only in a run
    /// that holds both kinds.
    #[inline]
    pub fn runs_hold(
        self,
        range: std::ops::Range<usize>,
        kind: u8,
        is_kind: impl Fn(u64) -> bool,
    ) -> Option<bool> {
        match self {
            Entries::Dense(_) => None,
            Entries::Runs(runs) => Some(runs.iter().any(|r| {
                let (lo, hi) = (range.start.max(r.start as usize), range.end.min(r.end()));
                lo < hi
                    && r.kinds & kind != 0
                    && (r.kinds == kind || (lo..hi).any(|i| is_kind(r.at(i))))
            })),
        }
    }

    /// Whether `f` holds for any raw entry in `range` (none entries are 0).
    pub fn any(self, range: std::ops::Range<usize>, f: impl Fn(u64) -> bool) -> bool {
        match self {
            Entries::Dense(d) => d[range].iter().any(|&r| f(r)),
            Entries::Runs(runs) => {
                let mut at = range.start;
                for r in runs {
                    if r.end() <= at {
                        continue;
                    }
                    if at >= range.end {
                        break;
                    }
                    if (r.start as usize) > at && f(0) {
                        return true; // a gap of none entries
                    }
                    let lo = at.max(r.start as usize);
                    let hi = range.end.min(r.end());
                    if (lo..hi).any(|i| f(r.at(i))) {
                        return true;
                    }
                    at = hi;
                }
                at < range.end && f(0)
            }
        }
    }
}

#[inline(always)]
fn runs_raw(runs: &[Run], i: usize) -> u64 {
    if let [r] = runs {
        return if i >= r.start as usize && i < r.end() {
            r.at(i)
        } else {
            0
        };
    }
    // The last run starting at or before i.
    let k = runs.partition_point(|r| r.start as usize <= i);
    match k.checked_sub(1).map(|k| &runs[k]) {
        Some(r) if i < r.end() => r.at(i),
        _ => 0,
    }
}

/// The affine runs of `d` (zeros outside them), or `None` when more than
/// [`MAX_RUNS`] are needed. Greedy: a run takes the step of its first two
/// entries and goes on while the difference stays the same.
pub fn runs_of(d: &[u64; PTRS_PER_TABLE]) -> Option<Vec<Run>> {
    let mut buf = [EMPTY_RUN; MAX_RUNS];
    runs_into(d, &mut buf).map(|n| buf[..n].to_vec())
}

const EMPTY_RUN: Run = Run {
    start: 0,
    len: 0,
    kinds: 0,
    first: 0,
    step: 0,
};

/// [`runs_of`] into `out`: how many runs, or `None` when more than
/// [`MAX_RUNS`] are needed.
fn runs_into(d: &[u64; PTRS_PER_TABLE], out: &mut [Run; MAX_RUNS]) -> Option<usize> {
    // The common cases first, in one pass each: one run over the whole
    // table, or an empty table.
    let step = d[1].wrapping_sub(d[0]);
    if d.windows(2).all(|w| w[1].wrapping_sub(w[0]) == step) {
        if d[0] == 0 && step == 0 {
            return Some(0);
        }
        if d.iter().all(|&r| r != 0) {
            out[0] = Run {
                start: 0,
                len: PTRS_PER_TABLE as u16,
                kinds: 0,
                first: d[0],
                step,
            };
            return Some(1);
        }
    }
    let mut n = 0;
    let mut i = 0;
    while i < PTRS_PER_TABLE {
        if d[i] == 0 {
            i += 1;
            continue;
        }
        if n == MAX_RUNS {
            return None;
        }
        let start = i;
        let step = if i + 1 < PTRS_PER_TABLE && d[i + 1] != 0 {
            d[i + 1].wrapping_sub(d[i])
        } else {
            0
        };
        i += 1;
        while i < PTRS_PER_TABLE && d[i] != 0 && d[i].wrapping_sub(d[i - 1]) == step {
            i += 1;
        }
        out[n] = Run {
            start: start as u16,
            len: (i - start) as u16,
            kinds: 0,
            first: d[start],
            step,
        };
        n += 1;
    }
    Some(n)
}

#[derive(Clone, Debug)]
enum Store {
    Dense(Box<[u64; PTRS_PER_TABLE]>),
    /// One run, inline (the common case: no allocation).
    One(Run),
    /// None or several runs.
    Runs(Box<[Run]>),
}

/// One page-table page.
#[derive(Clone, Debug)]
pub struct Table {
    pub level: u8,
    /// Non-none entries.
    pub used: u16,
    store: Store,
}

impl Table {
    /// An empty table (no runs: nothing allocated until the first write).
    pub fn new(level: u8) -> Self {
        Table {
            level,
            used: 0,
            store: Store::Runs(Box::new([])),
        }
    }

    /// A table holding one run only: what [`Table::new`] followed by
    /// [`Table::splice`] of `run` leaves (a new table's first entry written
    /// as a run: `Store::One`, the used count its length). For the upper
    /// tables of a chain made in one step (issue 14, thirteenth session).
    pub fn with_run(level: u8, run: Run) -> Self {
        Table {
            level,
            used: run.len,
            store: Store::One(run),
        }
    }

    /// The raw descriptor of entry `i`.
    #[inline(always)]
    pub fn raw(&self, i: usize) -> u64 {
        match &self.store {
            Store::Dense(d) => d[i],
            Store::One(r) => runs_raw(std::slice::from_ref(r), i),
            Store::Runs(runs) => runs_raw(runs, i),
        }
    }

    /// The entries, in whichever representation the table has.
    #[inline]
    pub fn entries(&self) -> Entries<'_> {
        match &self.store {
            Store::Dense(d) => Entries::Dense(d),
            Store::One(r) => Entries::Runs(std::slice::from_ref(r)),
            Store::Runs(runs) => Entries::Runs(runs),
        }
    }

    /// Whether the table is stored as runs.
    pub fn is_compact(&self) -> bool {
        !matches!(self.store, Store::Dense(_))
    }

    /// The runs of a compact table.
    pub fn runs(&self) -> Option<&[Run]> {
        match self.entries() {
            Entries::Runs(r) => Some(r),
            Entries::Dense(_) => None,
        }
    }

    /// The entries for writing: a compact table becomes dense.
    pub fn dense_mut(&mut self) -> &mut [u64; PTRS_PER_TABLE] {
        self.dense_mut_from(&mut None)
    }

    /// [`Table::dense_mut`], materialising into `spare` when it holds a
    /// buffer (one a compaction freed: no allocation, and memory that is
    /// likely still in the cache).
    pub fn dense_mut_from(&mut self, spare: &mut Spare) -> &mut [u64; PTRS_PER_TABLE] {
        let runs = match &self.store {
            Store::Dense(_) => None,
            Store::One(r) => Some(std::slice::from_ref(r)),
            Store::Runs(r) => Some(&r[..]),
        };
        if let Some(runs) = runs {
            if self.level == 1 {
                MADE_DENSE.with(|c| c.set(c.get() + 1));
            }
            let mut d = spare
                .take()
                .unwrap_or_else(|| Box::new([0; PTRS_PER_TABLE]));
            materialise_into(runs, &mut d);
            self.store = Store::Dense(d);
        }
        match &mut self.store {
            Store::Dense(d) => d,
            _ => unreachable!("made dense above"),
        }
    }

    /// [`Table::dense_mut`] and the used count, for writers that keep it.
    pub fn dense_and_used(&mut self, spare: &mut Spare) -> (&mut [u64; PTRS_PER_TABLE], &mut u16) {
        self.dense_mut_from(spare);
        match &mut self.store {
            Store::Dense(d) => (d, &mut self.used),
            _ => unreachable!("made dense above"),
        }
    }

    /// Store the table as runs if at most [`MAX_RUNS`] describe it. `kinds` classifies a run's entries (a slice of the
    /// dense table) as [`Run::PRESENT`] / [`Run::NONPRESENT`]. Returns
    /// whether the table is compact now.
    /// The dense buffer it frees goes to `spare` if that is empty.
    pub fn compact(&mut self, kinds: impl Fn(&[u64]) -> u8, spare: &mut Spare) -> bool {
        if let Store::Dense(d) = &self.store {
            let mut buf = [EMPTY_RUN; MAX_RUNS];
            match runs_into(d, &mut buf) {
                Some(n) => {
                    let runs = &mut buf[..n];
                    for r in runs.iter_mut() {
                        r.kinds = kinds(&d[r.start as usize..r.end()]);
                    }
                    let new = match runs {
                        [r] => Store::One(*r),
                        _ => Store::Runs(Box::from(&*runs)),
                    };
                    let old = std::mem::replace(&mut self.store, new);
                    if let (Store::Dense(d), None) = (old, &spare) {
                        *spare = Some(d);
                    }
                }
                None => return false,
            }
        }
        true
    }

    /// Rewrite entries `lo..hi` of a compact table without making it
    /// dense: they become `new` (a run starting at `lo` of length
    /// `hi - lo`) or, with `None`, none entries. Neighbouring runs that
    /// continue each other (same kinds, one step) are merged. Returns
    /// `false`, leaving the table as it was, for a dense table or when
    /// the result would need more than [`MAX_RUNS`] runs (the caller then
    /// writes the dense form). The used count follows the runs.
    pub fn splice(&mut self, lo: usize, hi: usize, new: Option<Run>) -> bool {
        debug_assert!(lo < hi && hi <= PTRS_PER_TABLE);
        debug_assert!(new.is_none_or(|r| r.start as usize == lo && r.end() == hi));
        let runs: &[Run] = match &self.store {
            Store::Dense(_) => return false,
            Store::One(r) => std::slice::from_ref(r),
            Store::Runs(r) => r,
        };
        // A table of at most one run written after it (a new table's first
        // entries, a fault or a move appending a batch): the run, the run
        // continued, or the two, without the general merge below (which
        // gives the same: one run cannot merge with itself).
        if runs.len() <= 1 && runs.first().is_none_or(|r| r.end() <= lo) {
            let store = match (runs.first().copied(), new) {
                (_, None) => return true,
                (None, Some(r)) => Store::One(r),
                (Some(a), Some(r)) => match merged(&a, &r) {
                    Some(m) => Store::One(m),
                    None => Store::Runs(Box::new([a, r])),
                },
            };
            self.used = match &store {
                Store::One(r) => r.len,
                Store::Runs(r) => r.iter().map(|r| r.len).sum(),
                Store::Dense(_) => unreachable!("runs only"),
            };
            self.store = store;
            return true;
        }
        // The one run cleared wholly (a zap or a move emptying its table):
        // no runs left, as the general path below leaves it.
        if new.is_none() && runs.len() == 1 && lo <= runs[0].start as usize && runs[0].end() <= hi {
            self.used = 0;
            self.store = Store::Runs(Box::default());
            return true;
        }
        // At most two pieces more than before: the runs cut at `lo` and
        // `hi`, and `new`.
        let mut buf = [EMPTY_RUN; MAX_RUNS + 3];
        let mut n = 0;
        fn push(r: Run, buf: &mut [Run; MAX_RUNS + 3], n: &mut usize) {
            if *n > 0 {
                if let Some(m) = merged(&buf[*n - 1], &r) {
                    buf[*n - 1] = m;
                    return;
                }
            }
            buf[*n] = r;
            *n += 1;
        }
        for r in runs.iter().filter(|r| (r.start as usize) < lo) {
            let mut l = *r;
            l.len = (r.end().min(lo) - r.start as usize) as u16;
            push(l, &mut buf, &mut n);
        }
        if let Some(r) = new {
            push(r, &mut buf, &mut n);
        }
        for r in runs.iter().filter(|r| r.end() > hi) {
            let mut t = *r;
            if (r.start as usize) < hi {
                t.start = hi as u16;
                t.len = (r.end() - hi) as u16;
                t.first = r.at(hi);
                if t.len == 1 {
                    t.step = 0;
                }
            }
            push(t, &mut buf, &mut n);
        }
        if n > MAX_RUNS {
            return false;
        }
        let runs = &buf[..n];
        self.used = runs.iter().map(|r| r.len).sum();
        match (&mut self.store, runs) {
            (_, [r]) => self.store = Store::One(*r),
            (Store::Runs(b), _) if b.len() == n => b.copy_from_slice(runs),
            _ => self.store = Store::Runs(Box::from(runs)),
        }
        true
    }

    /// The table's one run when it is stored as exactly one run (every
    /// other entry none); `None` for a dense table or any other number of
    /// runs.
    #[inline]
    pub fn lone_run(&self) -> Option<Run> {
        match &self.store {
            Store::One(r) => Some(*r),
            _ => None,
        }
    }

    /// Replace the one run of a table stored as one run
    /// ([`Table::lone_run`]) by `r`, every other entry none: what clearing
    /// the old run with [`Table::splice`] and writing `r` with it leaves
    /// (the used count follows). Returns `false`, changing nothing, for
    /// any other table or an empty or out-of-range `r`.
    pub fn replace_lone_run(&mut self, r: Run) -> bool {
        if !matches!(self.store, Store::One(_)) || r.len == 0 || r.end() > PTRS_PER_TABLE {
            return false;
        }
        let r = Run {
            step: if r.len == 1 { 0 } else { r.step },
            ..r
        };
        self.used = r.len;
        self.store = Store::One(r);
        true
    }

    /// Bytes of model memory the entries use (outside the [`Table`]
    /// itself): 4 KiB dense, 24 B per run.
    pub fn entry_bytes(&self) -> usize {
        match &self.store {
            Store::Dense(_) => PTRS_PER_TABLE * 8,
            Store::One(_) => 0, // inside the Table
            Store::Runs(r) => std::mem::size_of_val::<[Run]>(r),
        }
    }
}

/// `a` and `b` as one run when `b` continues `a` (adjacent, the same
/// kinds, one step; a one-entry run takes any step).
fn merged(a: &Run, b: &Run) -> Option<Run> {
    if a.end() != b.start as usize || a.kinds != b.kinds {
        return None;
    }
    let step = if a.len > 1 {
        a.step
    } else {
        b.first.wrapping_sub(a.first)
    };
    let continues = (b.len == 1 || b.step == step)
        && a.first.wrapping_add(step.wrapping_mul(a.len as u64)) == b.first;
    continues.then_some(Run {
        len: a.len + b.len,
        step,
        ..*a
    })
}

thread_local! {
    /// Compact PTE tables made dense on this thread ([`made_dense`]).
    static MADE_DENSE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many compact PTE tables this thread has made dense so far: a
/// diagnostic for the tests that check a writer rewrites runs in place
/// (it changes nothing the model computes or shows).
pub fn made_dense() -> u64 {
    MADE_DENSE.with(|c| c.get())
}

/// A dense buffer kept for the next table made dense.
pub type Spare = Option<Box<[u64; PTRS_PER_TABLE]>>;

/// Write every entry of `d` from `runs` (0 outside them).
fn materialise_into(runs: &[Run], d: &mut [u64; PTRS_PER_TABLE]) {
    let mut at = 0;
    for r in runs {
        d[at..r.start as usize].fill(0);
        let mut v = r.first;
        for e in &mut d[r.start as usize..r.end()] {
            *e = v;
            v = v.wrapping_add(r.step);
        }
        at = r.end();
    }
    d[at..].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Odd entries are "present", even non-zero ones "non-present".
    fn test_kinds(s: &[u64]) -> u8 {
        let p = s.iter().any(|&r| r & 1 == 1);
        let n = s.iter().any(|&r| r != 0 && r & 1 == 0);
        ((p as u8) * Run::PRESENT) | ((n as u8) * Run::NONPRESENT)
    }

    fn check(d: &[u64; PTRS_PER_TABLE]) {
        let mut t = Table::new(1);
        *t.dense_mut() = *d;
        let compact = t.compact(test_kinds, &mut None);
        assert_eq!(compact, runs_of(d).is_some());
        for (i, &e) in d.iter().enumerate() {
            assert_eq!(t.raw(i), e, "entry {i}");
            assert_eq!(t.entries().raw(i), e, "entry {i}");
        }
        assert_eq!(t.entries().iter().collect::<Vec<_>>(), d.to_vec());
        for (lo, hi) in [(0, 512), (0, 1), (3, 40), (100, 300), (511, 512), (7, 7)] {
            assert_eq!(
                t.entries().any(lo..hi, |r| r == 0),
                d[lo..hi].contains(&0),
                "any none in {lo}..{hi}"
            );
            assert_eq!(
                t.entries().any(lo..hi, |r| r & 1 == 1),
                d[lo..hi].iter().any(|&r| r & 1 == 1),
                "any odd in {lo}..{hi}"
            );
            if compact {
                assert_eq!(
                    t.entries().runs_hold(lo..hi, Run::PRESENT, |r| r & 1 == 1),
                    Some(d[lo..hi].iter().any(|&r| r & 1 == 1)),
                    "runs hold odd in {lo}..{hi}"
                );
                assert_eq!(
                    t.entries()
                        .runs_hold(lo..hi, Run::NONPRESENT, |r| r & 1 == 0),
                    Some(d[lo..hi].iter().any(|&r| r != 0 && r & 1 == 0)),
                    "runs hold even in {lo}..{hi}"
                );
            }
        }
        assert_eq!(&*t.dense_mut(), d);
        assert!(!t.is_compact());
    }

    #[test]
    fn one_run_of_a_thp_and_an_empty_table() {
        let mut d = [0u64; PTRS_PER_TABLE];
        for (i, e) in d.iter_mut().enumerate() {
            *e = 0x8000_0000_0000_0867 | ((0x1000 + i as u64) << 12);
        }
        check(&d);
        assert_eq!(runs_of(&d).unwrap().len(), 1);
        check(&[0; PTRS_PER_TABLE]);
        assert_eq!(runs_of(&[0; PTRS_PER_TABLE]).unwrap().len(), 0);
        let mut t = Table::new(1);
        assert_eq!(t.entry_bytes(), 0);
        t.dense_mut()[5] = 7;
        assert!(t.compact(test_kinds, &mut None));
        assert_eq!(t.entry_bytes(), 0, "one run is stored inline");
        t.dense_mut()[9] = 7;
        assert!(t.compact(test_kinds, &mut None));
        assert_eq!(t.entry_bytes(), 48);
    }

    #[test]
    fn too_many_runs_stay_dense() {
        let mut d = [0u64; PTRS_PER_TABLE];
        for i in 0..=MAX_RUNS {
            d[i * 2] = 1;
        }
        assert!(runs_of(&d).is_none());
        check(&d);
    }

    /// A table of runs built from `d` (compacted), spliced at `lo..hi`
    /// with `first + k × step` (or none entries): either it reads back as
    /// the dense reference written entry by entry, with the used count
    /// of non-none entries, or it refused and is unchanged.
    fn check_splice(d: &[u64; PTRS_PER_TABLE], lo: usize, hi: usize, first: u64, step: u64) {
        let mut t = Table::new(1);
        *t.dense_mut() = *d;
        t.used = d.iter().filter(|&&r| r != 0).count() as u16;
        if !t.compact(test_kinds, &mut None) {
            assert!(!t.splice(lo, hi, None), "a dense table is never spliced");
            return;
        }
        let mut want = *d;
        let new = (first != 0).then(|| {
            for (k, e) in want[lo..hi].iter_mut().enumerate() {
                *e = first.wrapping_add(step.wrapping_mul(k as u64));
            }
            Run {
                start: lo as u16,
                len: (hi - lo) as u16,
                kinds: test_kinds(&want[lo..hi]),
                first,
                step: if hi - lo == 1 { 0 } else { step },
            }
        });
        if first == 0 {
            want[lo..hi].fill(0);
        }
        let before: Vec<u64> = t.entries().iter().collect();
        if t.splice(lo, hi, new) {
            assert!(t.is_compact());
            assert!(t.runs().unwrap().len() <= MAX_RUNS);
            assert_eq!(t.entries().iter().collect::<Vec<_>>(), want.to_vec());
            assert_eq!(t.used as usize, want.iter().filter(|&&r| r != 0).count());
            for r in t.runs().unwrap() {
                // A run's kinds may say more than it holds, never less.
                let k = test_kinds(&want[r.start as usize..r.end()]);
                assert!(r.len > 0 && r.kinds & k == k);
            }
        } else {
            assert_eq!(t.entries().iter().collect::<Vec<_>>(), before);
        }
    }

    #[test]
    fn splice_rewrites_a_thp_run_batch_by_batch() {
        // mprotect over a PTE-mapped THP: each 16-entry batch cleared, then
        // written back with another bit; the table stays one or two runs.
        let mut t = Table::new(1);
        let old = |i: u64| 0x8000_0000_0000_0867 | ((0x1000 + i) << 12);
        let new = |i: u64| 0x8000_0000_0000_0865 | ((0x1000 + i) << 12);
        for (i, e) in t.dense_mut().iter_mut().enumerate() {
            *e = old(i as u64);
        }
        t.used = 512;
        assert!(t.compact(test_kinds, &mut None));
        for b in 0..32 {
            let lo = b * 16;
            assert!(t.splice(lo, lo + 16, None));
            assert_eq!(t.used, 512 - 16);
            let run = Run {
                start: lo as u16,
                len: 16,
                kinds: Run::PRESENT,
                first: new(lo as u64),
                step: 1 << 12,
            };
            assert!(t.splice(lo, lo + 16, Some(run)));
            assert!(t.runs().unwrap().len() <= 2, "batch {b}");
            assert_eq!(t.used, 512);
        }
        assert_eq!(t.runs().unwrap().len(), 1);
        for i in 0..512 {
            assert_eq!(t.raw(i), new(i as u64));
        }
    }

    proptest! {
        #[test]
        fn runs_read_back_as_the_dense_table(
            pieces in prop::collection::vec((0..80usize, 0..4u64, prop_oneof![Just(0u64), Just(1 << 12), Just(1), any::<u64>()]), 0..12)
        ) {
            // Pieces of affine runs laid end to end, some of them none.
            let mut d = [0u64; PTRS_PER_TABLE];
            let mut i = 0;
            for (len, kind, step) in pieces {
                let first: u64 = match kind { 0 => 0, 1 => 0x867, 2 => 0x8000_0000_0000_0867, _ => 0x400 };
                for k in 0..len {
                    if i == PTRS_PER_TABLE { break; }
                    d[i] = if first == 0 { 0 } else { first.wrapping_add(step.wrapping_mul(k as u64)) };
                    i += 1;
                }
            }
            check(&d);
        }

        #[test]
        fn replacing_a_lone_run_is_clearing_it_and_writing_the_new_one(
            lo in 0..512usize,
            len in 1..520usize,
            to in 0..512usize,
            to_len in 1..520usize,
            step in prop_oneof![Just(0u64), Just(1u64 << 12), Just(2u64)],
            dense in any::<bool>(),
        ) {
            // A table of one run (or dense, or empty: `replace_lone_run()`
            // refuses those), then the run replaced by another anywhere:
            // the same entries, used count and runs as the two splices the
            // movers made before (`mm/move_pt.rs` `move_lone_run()`).
            let hi = (lo + len).min(PTRS_PER_TABLE);
            let mut t = Table::new(1);
            for (k, e) in t.dense_mut()[lo..hi].iter_mut().enumerate() {
                *e = 0x1867 + ((k as u64) << 12);
            }
            t.used = (hi - lo) as u16;
            if !dense {
                prop_assert!(t.compact(test_kinds, &mut None));
            }
            let new = Run {
                start: to as u16,
                len: to_len.min(PTRS_PER_TABLE - to) as u16,
                kinds: Run::PRESENT,
                first: 0x8000_0000_0000_0867,
                step,
            };
            let mut spliced = t.clone();
            let mut replaced = t.clone();
            let lone = t.lone_run();
            prop_assert_eq!(lone.is_some(), !dense);
            if replaced.replace_lone_run(new) {
                let old = lone.unwrap();
                prop_assert!(spliced.splice(old.start as usize, old.end(), None));
                let written = Run {
                    step: if new.len == 1 { 0 } else { step },
                    ..new
                };
                let ok = spliced.splice(to, new.end(), Some(written));
                prop_assert!(ok);
                prop_assert_eq!(replaced.lone_run(), spliced.lone_run());
                prop_assert_eq!(replaced.used, spliced.used);
            } else {
                prop_assert!(dense);
            }
            prop_assert_eq!(replaced.entries().iter().collect::<Vec<_>>(), spliced.entries().iter().collect::<Vec<_>>());
        }

        #[test]
        fn splice_agrees_with_entry_by_entry_writes(
            pieces in prop::collection::vec((0..120usize, 0..3u64), 0..10),
            lo in 0..512usize,
            len in 1..140usize,
            first in prop_oneof![Just(0u64), Just(0x867u64), Just(0x400u64), Just(0x8000_0000_0000_0867u64)],
            step in prop_oneof![Just(0u64), Just(1u64 << 12), Just(2u64)],
        ) {
            let mut d = [0u64; PTRS_PER_TABLE];
            let mut i = 0;
            for (n, kind) in pieces {
                let f: u64 = match kind { 0 => 0, 1 => 0x1867 + (i as u64) * 0x10000, _ => 0x400 };
                for k in 0..n {
                    if i == PTRS_PER_TABLE { break; }
                    d[i] = if f == 0 { 0 } else { f + ((k as u64) << 12) };
                    i += 1;
                }
            }
            let hi = (lo + len).min(PTRS_PER_TABLE);
            check_splice(&d, lo, hi, first, step);
        }
    }
}
