//! Physical memory as the rmap layer sees it: a `struct page` array
//! (memmap), large-folio metadata, the zero pages, and the mapcount,
//! refcount and anon-exclusive rules of Linux 6.18 with CONFIG_PAGE_MAPCOUNT.
//!
//! Linux: include/linux/mm_types.h (struct folio), include/linux/rmap.h,
//! mm/rmap.c (__folio_add_anon_rmap, __folio_remove_rmap),
//! mm/huge_memory.c (deferred_split_folio).
//!
//! Storage (what the model keeps, not what the kernel keeps; every count
//! and event is the same either way):
//! * order-0 frames (small folios, page-table pages, the zero page): one
//!   [`PageMeta`] each, in a sparse memmap of 512-frame sections
//!   allocated when a frame of the section first becomes an order-0 page;
//!   a section stores 5 bytes per frame and the frames' tags as affine
//!   runs (a page written in address order costs no tag storage);
//! * large folios (order ≥ 1): one [`LargeFolio`] record per folio that
//!   holds the folio-wide counters and the per-page state as runs
//!   ([`PerPage`]): one value for every page while all pages agree (a
//!   whole-folio fault, fork, mprotect or zap keeps it so and updates it
//!   in one step), one value per page after a partial operation. Page
//!   contents are kept as an affine tag run (`base + i × step`: a zeroed
//!   folio, a folio written by a range `write`) until a page is written
//!   alone. A PMD THP therefore costs the model about 0.2 bytes per page
//!   instead of 16.

use crate::core::addr::{Order, Pfn, PMD_ORDER};
use crate::core::hw::HwEvent;
use crate::core::phys::{Nodes, FIRST_PFN};
use crate::core::rules::rule;
use crate::core::stats::{MthpStat, Stats, VmEvent};
use crate::types::Pid;

const MAPCOUNT_MASK: u32 = (1 << 26) - 1;
/// Folio flag (head or small page): PG_swapbacked clear on an anon folio,
/// i.e. lazyfree after MADV_FREE (folio_mark_lazyfree() → lru_lazyfree()).
const F_LAZYFREE: u32 = 1 << 27;
/// Folio flag (head or small page): PG_dirty.
const F_DIRTY: u32 = 1 << 26;
const F_ALLOCATED: u32 = 1 << 31;
const F_ANON_EXCLUSIVE: u32 = 1 << 30;
const F_PGTABLE: u32 = 1 << 28;

/// One `struct page` of an order-0 frame as the rules see it: the folio
/// refcount and the PTE mapcount with flag bits on top. The page's tag is
/// kept apart ([`Memmap::tag`]).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PageMeta {
    refcount: u32,
    /// Low 26 bits: PTE mappings of this page (`page->_mapcount + 1`).
    /// Bits 26..31: DIRTY, LAZYFREE, PGTABLE, ANON_EXCLUSIVE, ALLOCATED.
    bits: u32,
}

impl PageMeta {
    fn mapcount(&self) -> u32 {
        self.bits & MAPCOUNT_MASK
    }
}

/// Frames per memmap section.
const SECTION_FRAMES: u64 = 512;
/// A refcount at or above this lives in the section's `big_refs`.
const REF_ESCAPE: u8 = u8::MAX;
/// Tag runs a section keeps before it stores one tag per frame.
const MAX_TAG_RUNS: usize = 48;

/// The sparse memmap of order-0 frames: sections of 512 frames, allocated
/// on first use and dropped when every frame in them is free again (or
/// part of a large folio).
#[derive(Clone, Debug, Default)]
struct Memmap {
    sections: Vec<Option<Box<Section>>>,
    live: usize,
    /// The section dropped last (every frame default, no tag), reused by
    /// the next section to appear: a workload that frees and refaults the
    /// same frames does not allocate and clear a section each time.
    spare: Option<Box<Section>>,
}

/// 512 frames' [`PageMeta`]s, stored in 5 bytes a frame: the flag and
/// mapcount word, and the refcount in a byte (a refcount of 255 or more is
/// kept in `big_refs`). Tags are runs ([`SectionTags`]); a frame outside
/// every run holds tag 0.
#[derive(Clone, Debug)]
struct Section {
    bits: [u32; SECTION_FRAMES as usize],
    refs: [u8; SECTION_FRAMES as usize],
    /// `(frame index, refcount)` of frames whose refcount is ≥ 255, by index.
    big_refs: Vec<(u16, u32)>,
    tags: SectionTags,
    /// Frames of the section whose meta is not the default.
    used: u16,
}

/// Frames `[start, start + len)` of a section hold tags
/// `base + k × step` (k counted from `start`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TagRun {
    start: u16,
    len: u16,
    base: u64,
    step: u64,
}

impl TagRun {
    fn end(&self) -> u16 {
        self.start + self.len
    }
    fn at(&self, i: u16) -> u64 {
        self.base
            .wrapping_add(self.step.wrapping_mul(u64::from(i - self.start)))
    }
    /// `self` followed by `next` (adjacent) as one run, if their tags form
    /// one affine sequence.
    fn join(&self, next: &TagRun) -> Option<TagRun> {
        if self.end() != next.start {
            return None;
        }
        let step = match (self.len, next.len) {
            (1, 1) => next.base.wrapping_sub(self.base),
            (1, _) => next.step,
            (_, 1) => self.step,
            _ if self.step == next.step => self.step,
            _ => return None,
        };
        let expect = self
            .base
            .wrapping_add(step.wrapping_mul(u64::from(self.len)));
        (expect == next.base && (next.len == 1 || next.step == step)).then_some(TagRun {
            start: self.start,
            len: self.len + next.len,
            base: self.base,
            step,
        })
    }
}

/// A section's tags: affine runs (sorted, disjoint, none holding a
/// frame outside them), or one tag per frame once a section has more than
/// [`MAX_TAG_RUNS`] runs.
#[derive(Clone, Debug)]
enum SectionTags {
    Runs(Vec<TagRun>),
    Dense(Box<[u64; SECTION_FRAMES as usize]>),
}

impl SectionTags {
    fn get(&self, i: u16) -> u64 {
        match self {
            SectionTags::Dense(v) => v[i as usize],
            SectionTags::Runs(runs) => {
                let k = runs.partition_point(|r| r.start <= i);
                match k.checked_sub(1).map(|k| &runs[k]) {
                    Some(r) if i < r.end() => r.at(i),
                    _ => 0,
                }
            }
        }
    }

    fn set(&mut self, i: u16, tag: u64) {
        let runs = match self {
            SectionTags::Dense(v) => {
                v[i as usize] = tag;
                return;
            }
            SectionTags::Runs(runs) => runs,
        };
        // Fast path: extending the last run (pages written in frame order).
        if let Some(last) = runs.last_mut() {
            if last.end() == i && tag != 0 {
                let one = TagRun {
                    start: i,
                    len: 1,
                    base: tag,
                    step: 0,
                };
                if let Some(j) = last.join(&one) {
                    *last = j;
                    return;
                }
            }
        }
        let k = runs.partition_point(|r| r.start <= i);
        let mut at = k; // where a new run for `i` goes
        if let Some(r) = k.checked_sub(1).map(|k| runs[k]) {
            if i < r.end() {
                if r.at(i) == tag {
                    return;
                }
                if r.len > 1 && (i == r.start || i + 1 == r.end()) {
                    // `i` at an end of `r` (pages freed in frame order):
                    // shorten it in place, as the splice below would.
                    let run = &mut runs[k - 1];
                    run.len -= 1;
                    if i == r.start {
                        run.start += 1;
                        run.base = r.at(i).wrapping_add(r.step);
                        at = k - 1;
                    }
                    if tag == 0 {
                        return;
                    }
                } else {
                    // Cut `i` out of run `r`.
                    let left = TagRun {
                        len: i - r.start,
                        ..r
                    };
                    let right = TagRun {
                        start: i + 1,
                        len: r.end() - i - 1,
                        base: r.at(i).wrapping_add(r.step),
                        step: r.step,
                    };
                    let mut parts = Vec::with_capacity(2);
                    if left.len > 0 {
                        parts.push(left);
                    }
                    if right.len > 0 {
                        parts.push(right);
                    }
                    at = k - 1 + usize::from(left.len > 0);
                    runs.splice(k - 1..k, parts);
                }
            }
        }
        if tag != 0 {
            let mut new = TagRun {
                start: i,
                len: 1,
                base: tag,
                step: 0,
            };
            let mut lo = at;
            if let Some(j) = at.checked_sub(1).and_then(|p| runs[p].join(&new)) {
                new = j;
                lo = at - 1;
            }
            let mut hi = at;
            if let Some(j) = runs.get(at).and_then(|n| new.join(n)) {
                new = j;
                hi = at + 1;
            }
            runs.splice(lo..hi, [new]);
        }
        if runs.len() > MAX_TAG_RUNS {
            let mut v = Box::new([0u64; SECTION_FRAMES as usize]);
            for r in runs.iter() {
                for i in r.start..r.end() {
                    v[i as usize] = r.at(i);
                }
            }
            *self = SectionTags::Dense(v);
        }
    }

    fn bytes(&self) -> usize {
        match self {
            SectionTags::Runs(r) => r.capacity() * std::mem::size_of::<TagRun>(),
            SectionTags::Dense(_) => SECTION_FRAMES as usize * 8,
        }
    }
}

impl Section {
    fn new() -> Box<Section> {
        Box::new(Section {
            bits: [0; SECTION_FRAMES as usize],
            refs: [0; SECTION_FRAMES as usize],
            big_refs: Vec::new(),
            tags: SectionTags::Runs(Vec::new()),
            used: 0,
        })
    }

    fn get(&self, i: usize) -> PageMeta {
        let refcount = match self.refs[i] {
            REF_ESCAPE => {
                let k = self
                    .big_refs
                    .binary_search_by_key(&(i as u16), |e| e.0)
                    .expect("escaped refcount is stored");
                self.big_refs[k].1
            }
            r => u32::from(r),
        };
        PageMeta {
            refcount,
            bits: self.bits[i],
        }
    }

    fn put(&mut self, i: usize, m: PageMeta) {
        self.bits[i] = m.bits;
        // The common case: the refcount fits the byte before and after.
        if self.refs[i] != REF_ESCAPE && m.refcount < u32::from(REF_ESCAPE) {
            self.refs[i] = m.refcount as u8;
            return;
        }
        let was_big = self.refs[i] == REF_ESCAPE;
        let found = self.big_refs.binary_search_by_key(&(i as u16), |e| e.0);
        if m.refcount >= u32::from(REF_ESCAPE) {
            self.refs[i] = REF_ESCAPE;
            match found {
                Ok(k) => self.big_refs[k].1 = m.refcount,
                Err(k) => self.big_refs.insert(k, (i as u16, m.refcount)),
            }
        } else {
            self.refs[i] = m.refcount as u8;
            if was_big {
                self.big_refs
                    .remove(found.expect("escaped refcount is stored"));
            }
        }
    }

    fn bytes(&self) -> usize {
        std::mem::size_of::<Section>()
            + self.big_refs.capacity() * std::mem::size_of::<(u16, u32)>()
            + self.tags.bytes()
    }
}

/// Order-0 frames freed one after another, given back to the allocator a
/// stretch of consecutive frames at a time with
/// [`Nodes::free_range_later`]: a zap that frees one frame in every other
/// page lists them all in one step before the next allocation (the free
/// lists the single frees leave).
#[derive(Default)]
struct FreedFrames {
    first: u64,
    n: u64,
}

impl FreedFrames {
    fn push(&mut self, pfn: Pfn, alloc: &mut Nodes) {
        if self.n > 0 && pfn.0 != self.first + self.n {
            self.flush(alloc);
        }
        if self.n == 0 {
            self.first = pfn.0;
        }
        self.n += 1;
    }

    fn flush(&mut self, alloc: &mut Nodes) {
        if self.n > 0 {
            alloc.free_range_later(Pfn(self.first), self.n);
            self.n = 0;
        }
    }
}

impl Memmap {
    fn split(pfn: Pfn) -> (usize, usize) {
        let i = pfn.0 - FIRST_PFN;
        ((i / SECTION_FRAMES) as usize, (i % SECTION_FRAMES) as usize)
    }

    fn section(&self, s: usize) -> Option<&Section> {
        self.sections.get(s).and_then(|s| s.as_deref())
    }

    fn section_mut(&mut self, s: usize) -> Option<&mut Section> {
        self.sections.get_mut(s).and_then(|s| s.as_deref_mut())
    }

    fn get(&self, pfn: Pfn) -> PageMeta {
        let (s, i) = Self::split(pfn);
        match self.section(s) {
            Some(sec) => sec.get(i),
            _ => PageMeta::default(),
        }
    }

    /// Change one frame's meta through `f`. A frame whose meta becomes the
    /// default (freed) holds tag 0 again.
    fn update<R>(&mut self, pfn: Pfn, f: impl FnOnce(&mut PageMeta) -> R) -> R {
        let (s, i) = Self::split(pfn);
        if s >= self.sections.len() {
            self.sections.resize(s + 1, None);
        }
        let slot = &mut self.sections[s];
        let spare = &mut self.spare;
        let sec = slot.get_or_insert_with(|| {
            self.live += 1;
            spare.take().unwrap_or_else(Section::new)
        });
        let old = sec.get(i);
        let mut m = old;
        let r = f(&mut m);
        if m == old {
            return r;
        }
        sec.put(i, m);
        let was = old != PageMeta::default();
        let now = m != PageMeta::default();
        match (was, now) {
            (false, true) => sec.used += 1,
            (true, false) => {
                sec.used -= 1;
                sec.tags.set(i as u16, 0);
            }
            _ => {}
        }
        if sec.used == 0 {
            let mut gone = slot.take().expect("the section is live");
            self.live -= 1;
            // Every frame is back to the default meta; its tags were
            // cleared as each frame was freed (a dense store is dropped).
            debug_assert!(gone.bits.iter().all(|&b| b == 0));
            debug_assert!(gone.refs.iter().all(|&r| r == 0) && gone.big_refs.is_empty());
            if !matches!(&gone.tags, SectionTags::Runs(r) if r.is_empty()) {
                gone.tags = SectionTags::Runs(Vec::new());
            }
            self.spare = Some(gone);
        }
        r
    }

    fn set(&mut self, pfn: Pfn, m: PageMeta) {
        self.update(pfn, |p| *p = m);
    }

    /// [`Memmap::set`] of the `n` frames from `first` to a page-table
    /// page's meta (`alloc`: each frame free before) or back to the
    /// default (each a page-table page before), one section at a time:
    /// the section's first frame (allocating) or last frame (freeing)
    /// through `set`, which makes or drops the section, the others in
    /// place. Page-table pages hold no tag, so no tag changes.
    fn set_pt_range(&mut self, first: Pfn, n: u64, alloc: bool) {
        let pt = PageMeta {
            refcount: 1,
            bits: F_ALLOCATED | F_PGTABLE,
        };
        let mut k = 0;
        while k < n {
            let pfn = first.add(k);
            let (s, i) = Self::split(pfn);
            let in_sec = (SECTION_FRAMES - i as u64).min(n - k) as usize;
            if alloc {
                self.set(pfn, pt);
            }
            let sec = self
                .section_mut(s)
                .expect("a section with a page-table page");
            let rest = if alloc { 1..in_sec } else { 0..in_sec - 1 };
            for j in rest {
                let x = i + j;
                debug_assert_eq!(sec.get(x), if alloc { PageMeta::default() } else { pt });
                debug_assert_eq!(sec.tags.get(x as u16), 0);
                if alloc {
                    sec.bits[x] = pt.bits;
                    sec.refs[x] = 1;
                    sec.used += 1;
                } else {
                    sec.bits[x] = 0;
                    sec.refs[x] = 0;
                    sec.used -= 1;
                }
            }
            if !alloc {
                self.set(first.add(k + in_sec as u64 - 1), PageMeta::default());
            }
            k += in_sec as u64;
        }
    }

    /// The tag page `pfn` holds (0 for a frame with no meta).
    fn tag(&self, pfn: Pfn) -> u64 {
        let (s, i) = Self::split(pfn);
        self.section(s).map_or(0, |sec| sec.tags.get(i as u16))
    }

    /// Store the tag of an order-0 page (one with meta: allocated).
    fn set_tag(&mut self, pfn: Pfn, tag: u64) {
        let (s, i) = Self::split(pfn);
        match self.section_mut(s) {
            Some(sec) => sec.tags.set(i as u16, tag),
            None => assert_eq!(tag, 0, "a tag on a frame with no meta: {pfn:?}"),
        }
    }

    fn bytes(&self) -> usize {
        self.spare.as_ref().map_or(0, |s| s.bytes())
            + self.sections.capacity() * std::mem::size_of::<Option<Box<Section>>>()
            + self
                .sections
                .iter()
                .flatten()
                .map(|s| s.bytes())
                .sum::<usize>()
    }

    fn iter(&self) -> impl Iterator<Item = (Pfn, PageMeta)> + '_ {
        self.sections.iter().enumerate().flat_map(|(s, sec)| {
            sec.iter().flat_map(move |sec| {
                (0..SECTION_FRAMES as usize).map(move |i| {
                    (
                        Pfn(FIRST_PFN + s as u64 * SECTION_FRAMES + i as u64),
                        sec.get(i),
                    )
                })
            })
        })
    }
}

/// Per-page state of a large folio: one value for all pages, one for the
/// head and one for the rest (PageAnonExclusive of a PMD-mapped THP lives
/// on the head page only), or one per page. Whole-folio updates of a
/// uniform value take one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PerPage<T> {
    All(T),
    Head(T, T),
    Each(Box<[T]>),
}

impl<T: Copy + PartialEq> PerPage<T> {
    fn get(&self, i: usize) -> T {
        match self {
            PerPage::All(v) => *v,
            PerPage::Head(h, r) => {
                if i == 0 {
                    *h
                } else {
                    *r
                }
            }
            PerPage::Each(v) => v[i],
        }
    }

    /// The value of page `i` and how many pages from `i` (at most `max`,
    /// `i + max` ≤ the folio's size) hold it.
    fn run_from(&self, i: usize, max: usize) -> (T, usize) {
        match self {
            PerPage::All(v) => (*v, max),
            PerPage::Head(h, r) => {
                if i == 0 {
                    (*h, if h == r { max } else { 1.min(max) })
                } else {
                    (*r, max)
                }
            }
            PerPage::Each(v) => {
                let x = v[i];
                (x, v[i..i + max].iter().take_while(|y| **y == x).count())
            }
        }
    }

    /// Give every page its own slot (`n` pages).
    fn each(&mut self, n: usize) -> &mut [T] {
        match *self {
            PerPage::All(v) => *self = PerPage::Each(vec![v; n].into_boxed_slice()),
            PerPage::Head(h, r) => {
                let mut v = vec![r; n];
                v[0] = h;
                *self = PerPage::Each(v.into_boxed_slice());
            }
            PerPage::Each(_) => {}
        }
        match self {
            PerPage::Each(v) => v,
            _ => unreachable!(),
        }
    }

    /// The shortest form that holds the same values.
    fn compact(&mut self) {
        match self {
            PerPage::Each(v) if v.iter().all(|x| *x == v[0]) => *self = PerPage::All(v[0]),
            PerPage::Each(v) if v.len() > 1 && v[1..].iter().all(|x| *x == v[1]) => {
                *self = PerPage::Head(v[0], v[1])
            }
            PerPage::Head(h, r) if h == r => *self = PerPage::All(*h),
            _ => {}
        }
    }

    /// Apply `f` to pages `[lo, lo + nr)` of an `n`-page folio. `f` gets
    /// a value and how many pages it stands for: a uniform value covered
    /// whole is changed once, for all `n` pages.
    fn update(&mut self, lo: usize, nr: usize, n: usize, mut f: impl FnMut(&mut T, u32)) {
        if nr == 0 {
            return;
        }
        if nr == n {
            if let PerPage::All(v) = self {
                f(v, n as u32);
                return;
            }
            self.each(n).iter_mut().for_each(|v| f(v, 1));
            self.compact();
            return;
        }
        self.each(n)[lo..lo + nr].iter_mut().for_each(|v| f(v, 1));
    }

    fn set(&mut self, i: usize, n: usize, val: T) {
        if self.get(i) == val {
            return;
        }
        match self {
            PerPage::All(r) if i == 0 && n > 1 => *self = PerPage::Head(val, *r),
            PerPage::Head(h, _) if i == 0 => {
                *h = val;
                self.compact();
            }
            _ => {
                self.each(n)[i] = val;
                if i + 1 == n {
                    self.compact();
                }
            }
        }
    }

    /// Whether both hold the same value for each of `n` pages, whatever
    /// their forms (stops at the first page that differs).
    fn same_values(&self, other: &PerPage<T>, n: usize) -> bool {
        match (self, other) {
            (PerPage::Each(_), _) | (_, PerPage::Each(_)) => {
                (0..n).all(|i| self.get(i) == other.get(i))
            }
            _ => self.get(0) == other.get(0) && (n < 2 || self.get(1) == other.get(1)),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            PerPage::All(_) | PerPage::Head(..) => 0,
            PerPage::Each(v) => std::mem::size_of_val(&**v),
        }
    }
}

/// The contents of a large folio's pages: page `i` holds `base + i × step`
/// (a zeroed folio: 0, 0; a range write at `va`: va, 4096), or one tag per
/// page.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tags {
    Affine { base: u64, step: u64 },
    Each(Box<[u64]>),
}

impl Tags {
    fn get(&self, i: usize) -> u64 {
        match self {
            Tags::Affine { base, step } => base.wrapping_add(step.wrapping_mul(i as u64)),
            Tags::Each(v) => v[i],
        }
    }

    /// Pages `[lo, lo + nr)` of an `n`-page folio take `base + k × step`
    /// (k counted from `lo`).
    fn set_run(&mut self, lo: usize, nr: usize, n: usize, base: u64, step: u64) {
        if nr == n {
            *self = Tags::Affine { base, step };
            return;
        }
        let same =
            (0..nr).all(|k| self.get(lo + k) == base.wrapping_add(step.wrapping_mul(k as u64)));
        if same {
            return;
        }
        if let Tags::Affine { .. } = self {
            *self = Tags::Each((0..n).map(|i| self.get(i)).collect());
        }
        if let Tags::Each(v) = self {
            for k in 0..nr {
                v[lo + k] = base.wrapping_add(step.wrapping_mul(k as u64));
            }
            // A folio written page by page in address order becomes one
            // run again when its last page is written.
            if lo + nr == n && n > 1 {
                let step = v[1].wrapping_sub(v[0]);
                let affine = v
                    .iter()
                    .enumerate()
                    .all(|(i, t)| *t == v[0].wrapping_add(step.wrapping_mul(i as u64)));
                if affine {
                    *self = Tags::Affine { base: v[0], step };
                }
            }
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Tags::Affine { .. } => 0,
            Tags::Each(v) => std::mem::size_of_val(&**v),
        }
    }
}

/// What a large folio is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FolioKind {
    Anon,
    /// The huge zero folio (not anon; PM_FILE in pagemap).
    HugeZero,
}

/// A large folio (order ≥ 1): its folio-wide state and its pages' state.
#[derive(Clone, Debug)]
pub struct LargeFolio {
    pub order: Order,
    pub kind: FolioKind,
    /// PMD mappings (`_entire_mapcount + 1`).
    pub entire_mapcount: u32,
    /// All mappings, PTE and PMD (`_large_mapcount + 1`).
    pub large_mapcount: u32,
    /// Pages with a PTE mapping (`_nr_pages_mapped` without ENTIRELY_MAPPED).
    pub nr_pages_mapped: u32,
    pub partially_mapped: bool,
    pub on_deferred_list: bool,
    /// Mappings per mm. The kernel tracks two mm ids and a "maybe shared"
    /// bit (CONFIG_MM_ID); the model keeps exact counts, which agree with
    /// the kernel whenever at most two mms map the folio (spec W4).
    pub mm_maps: Vec<(Pid, u32)>,
    /// `folio->swap` while the folio is in the swap cache: the first of its
    /// run of swap slots (block-device swap only; order-0 swap-cache folios
    /// are found from their slot, crate::core::swapfile).
    pub swap: Option<u64>,
    /// `_refcount` of the folio.
    refcount: u32,
    /// Folio flags (PG_dirty, !PG_swapbacked).
    flags: u32,
    /// Each page's PTE mapcount.
    mapcount: PerPage<u32>,
    /// Each page's PageAnonExclusive.
    exclusive: PerPage<bool>,
    tags: Tags,
}

impl LargeFolio {
    /// A freshly allocated, unmapped, zeroed folio.
    pub fn new(order: Order, kind: FolioKind) -> Self {
        LargeFolio {
            order,
            kind,
            entire_mapcount: 0,
            large_mapcount: 0,
            nr_pages_mapped: 0,
            partially_mapped: false,
            on_deferred_list: false,
            mm_maps: Vec::new(),
            swap: None,
            refcount: 0,
            flags: 0,
            mapcount: PerPage::All(0),
            exclusive: PerPage::All(false),
            tags: Tags::Affine { base: 0, step: 0 },
        }
    }

    fn nr(&self) -> usize {
        self.order.pages() as usize
    }

    /// Bytes of model memory the record uses.
    fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.mm_maps.capacity() * std::mem::size_of::<(Pid, u32)>()
            + self.mapcount.bytes()
            + self.exclusive.bytes()
            + self.tags.bytes()
    }
}

/// A run of identical large folios: `count` folios of `folio.order` with
/// consecutive heads from `first`, every one in the state `folio` holds
/// (counts, flags, mappings per mm, per-page mapcounts and exclusivity).
/// Contents are affine across the whole run: frame `first + p` holds
/// `base + p × step` of `folio.tags` (a run of more than one folio always
/// has affine tags and no swap slot). A run of one folio is exactly the
/// one-record-per-folio form.
#[derive(Clone, Debug)]
struct FolioRun {
    first: u64,
    count: u32,
    folio: LargeFolio,
}

impl FolioRun {
    fn pages(&self) -> u64 {
        self.folio.order.pages()
    }
    /// The frame after the run's last page.
    fn end(&self) -> u64 {
        self.first + ((self.count as u64) << self.folio.order.0)
    }
    /// The tag of frame `pfn` of the run.
    fn tag(&self, pfn: u64) -> u64 {
        match &self.folio.tags {
            Tags::Affine { base, step } => base.wrapping_add(step.wrapping_mul(pfn - self.first)),
            Tags::Each(v) => v[(pfn - self.first) as usize],
        }
    }
    /// The record of the folio at `head` (a head of this run) on its own:
    /// the run's state with the folio's own contents.
    fn folio_at(&self, head: u64) -> LargeFolio {
        let mut l = self.folio.clone();
        if let Tags::Affine { base, step } = l.tags {
            l.tags = Tags::Affine {
                base: base.wrapping_add(step.wrapping_mul(head - self.first)),
                step,
            };
        }
        l
    }
    /// Whether `next` continues this run: the next heads, the same order,
    /// kind, counts, flags, mappings per mm (in the same order), the same
    /// per-page mapcounts and exclusivity (compared page by page whatever
    /// their forms), neither in the swap cache, and contents affine across
    /// both (call [`FolioRun::canonical_tags`] on both first, so tags
    /// written out of order that are affine again count as affine).
    fn joins(&self, next: &FolioRun) -> bool {
        self.same_state(next) && self.tags_continue(next)
    }
    /// [`FolioRun::joins`] without the contents.
    fn same_state(&self, next: &FolioRun) -> bool {
        let (a, b) = (&self.folio, &next.folio);
        let n = self.pages() as usize;
        self.same_counts(next)
            && a.mapcount.same_values(&b.mapcount, n)
            && a.exclusive.same_values(&b.exclusive, n)
    }
    /// Whether the contents are affine across this run and `next`.
    fn tags_continue(&self, next: &FolioRun) -> bool {
        match (&self.folio.tags, &next.folio.tags) {
            (Tags::Affine { base, step }, Tags::Affine { base: nb, step: ns }) => {
                step == ns && base.wrapping_add(step.wrapping_mul(next.first - self.first)) == *nb
            }
            _ => false,
        }
    }
    /// [`FolioRun::joins`] without the per-page state: whether comparing
    /// that is worth it.
    fn same_counts(&self, next: &FolioRun) -> bool {
        let (a, b) = (&self.folio, &next.folio);
        self.end() == next.first
            && a.order == b.order
            && a.kind == b.kind
            && a.swap.is_none()
            && b.swap.is_none()
            && a.refcount == b.refcount
            && a.flags == b.flags
            && a.entire_mapcount == b.entire_mapcount
            && a.large_mapcount == b.large_mapcount
            && a.nr_pages_mapped == b.nr_pages_mapped
            && a.partially_mapped == b.partially_mapped
            && a.on_deferred_list == b.on_deferred_list
            && a.mm_maps == b.mm_maps
    }
    /// Store tags written out of order that are affine again as one
    /// affine run (no observable change; a run of one folio only).
    fn canonical_tags(&mut self) {
        if self.count != 1 {
            return; // a run of several always has affine tags
        }
        let l = &mut self.folio;
        if let Tags::Each(v) = &l.tags {
            let step = if v.len() > 1 {
                v[1].wrapping_sub(v[0])
            } else {
                0
            };
            let affine = v
                .iter()
                .enumerate()
                .all(|(i, t)| *t == v[0].wrapping_add(step.wrapping_mul(i as u64)));
            if affine {
                l.tags = Tags::Affine { base: v[0], step };
            }
        }
    }
}

/// Runs a [`RunIndex`] keeps as a sorted vector before it becomes a
/// B-tree (and stays one: inserting into the middle of a long vector is
/// what the B-tree avoids).
const INDEX_SMALL_MAX: usize = 32;

/// The index of the folio runs: first head → slot, ordered. A sorted
/// vector while it holds at most [`INDEX_SMALL_MAX`] runs (issue 14,
/// sixteenth session: a workload that makes and frees one run per
/// iteration paid a B-tree leaf allocated by the insert and freed by the
/// remove each time; the vector keeps its buffer), a `BTreeMap` beyond.
/// Both answer every query alike, which one is used is not observable
/// (`Debug` prints the map either way), and the model's memory count
/// reads its length only ([`LargeFolios::overhead_bytes`]). With
/// `ModelConfig::folio_record_reuse` off it is a B-tree from the start.
#[derive(Clone)]
enum RunIndex {
    /// Sorted by first head, heads unique.
    Small(Vec<(u64, u32)>),
    Big(std::collections::BTreeMap<u64, u32>),
}

impl std::fmt::Debug for RunIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl RunIndex {
    fn new(small: bool) -> Self {
        if small {
            RunIndex::Small(Vec::new())
        } else {
            RunIndex::Big(Default::default())
        }
    }
    fn len(&self) -> usize {
        match self {
            RunIndex::Small(v) => v.len(),
            RunIndex::Big(m) => m.len(),
        }
    }
    fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let (a, b) = match self {
            RunIndex::Small(v) => (Some(v.iter().copied()), None),
            RunIndex::Big(m) => (None, Some(m.iter().map(|(&k, &s)| (k, s)))),
        };
        a.into_iter().flatten().chain(b.into_iter().flatten())
    }
    fn values(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter().map(|(_, s)| s)
    }
    /// The entry with the greatest head `<= key` (`range(..=key).next_back()`).
    #[inline]
    fn at_or_before(&self, key: u64) -> Option<(u64, u32)> {
        match self {
            RunIndex::Small(v) => {
                let k = v.partition_point(|e| e.0 <= key);
                k.checked_sub(1).map(|k| v[k])
            }
            RunIndex::Big(m) => m.range(..=key).next_back().map(|(&k, &s)| (k, s)),
        }
    }
    /// The slot of the entry with the greatest head `< key`.
    #[inline]
    fn before(&self, key: u64) -> Option<u32> {
        match self {
            RunIndex::Small(v) => {
                let k = v.partition_point(|e| e.0 < key);
                k.checked_sub(1).map(|k| v[k].1)
            }
            RunIndex::Big(m) => m.range(..key).next_back().map(|(_, &s)| s),
        }
    }
    #[inline]
    fn get(&self, key: u64) -> Option<u32> {
        match self {
            RunIndex::Small(v) => v.binary_search_by_key(&key, |e| e.0).ok().map(|k| v[k].1),
            RunIndex::Big(m) => m.get(&key).copied(),
        }
    }
    #[inline]
    fn insert(&mut self, key: u64, slot: u32) {
        match self {
            RunIndex::Small(v) => {
                // The common case first: a run after every other.
                if v.last().is_none_or(|e| e.0 < key) {
                    v.push((key, slot));
                } else {
                    match v.binary_search_by_key(&key, |e| e.0) {
                        Ok(k) => v[k].1 = slot,
                        Err(k) => v.insert(k, (key, slot)),
                    }
                }
                if v.len() > INDEX_SMALL_MAX {
                    let m = std::mem::take(v).into_iter().collect();
                    *self = RunIndex::Big(m);
                }
            }
            RunIndex::Big(m) => {
                m.insert(key, slot);
            }
        }
    }
    #[inline]
    fn remove(&mut self, key: u64) {
        match self {
            RunIndex::Small(v) => {
                if v.last().is_some_and(|e| e.0 == key) {
                    v.pop();
                } else if let Ok(k) = v.binary_search_by_key(&key, |e| e.0) {
                    v.remove(k);
                }
            }
            RunIndex::Big(m) => {
                m.remove(&key);
            }
        }
    }
}

/// The large-folio records: one [`FolioRun`] per run of identical folios,
/// in a slab, found by range through a B-tree keyed by the run's first
/// head. An operation on one folio of a run first splits the run so the
/// folio has a record of its own (at most three records: before, the
/// folio, after), changes it, and joins it again with its neighbours when
/// they agree ([`LargeFolios::settle`]): a walk changing consecutive
/// folios alike leaves one run behind it. With `runs` off every folio
/// keeps its own record (the reference the folio-run property test
/// compares against).
#[derive(Clone, Debug)]
struct LargeFolios {
    /// First head of each run → its slot in `slab`.
    index: RunIndex,
    slab: Vec<FolioRun>,
    /// Free slots of `slab`, reused last-freed first.
    free: Vec<u32>,
    /// Live folios (not runs).
    folios: u64,
    /// Join runs of identical folios.
    runs: bool,
    /// `ModelConfig::folio_record_reuse`: the index a sorted vector while
    /// small ([`RunIndex`]), and a slot emptied by
    /// [`LargeFolios::drop_slot`] keeping its mappings vector's buffer
    /// for the next run made in it ([`LargeFolios::recycled_maps`]).
    reuse: bool,
    /// The run [`LargeFolios::find`] found last (first, end, order,
    /// slot): a walk over one run's pages finds it without the B-tree.
    last: std::cell::Cell<Option<(u64, u64, u8, u32)>>,
    /// Slots of the runs the last split or join left next to each other
    /// (`NO_SLOT`: none): a walk changing consecutive folios finds the run
    /// it came from and the run it goes on into here, not in the B-tree.
    /// Only hints: a slot is used only if its run still is where wanted.
    near: std::cell::Cell<[u32; 2]>,
    /// The folio changed last, alone in its record and not yet joined with
    /// its neighbours (`NO_SLOT`: none): it is joined when another folio
    /// is changed, so that the several updates an operation makes to one
    /// folio (rmap, reference, exclusivity, contents) join it once.
    pending: u32,
}

/// No slot ([`LargeFolios::near`]).
const NO_SLOT: u32 = u32::MAX;

/// The capacity of a record's mappings vector after its first push from
/// empty (the standard library's smallest allocation for 8-byte
/// elements; `fresh_maps_capacity` tests it): the only capacity
/// [`LargeFolios::recycled_maps`] hands on.
const FRESH_MAPS_CAP: usize = 4;

impl Default for LargeFolios {
    fn default() -> Self {
        LargeFolios {
            index: RunIndex::new(true),
            slab: Vec::new(),
            free: Vec::new(),
            folios: 0,
            runs: true,
            reuse: true,
            last: Default::default(),
            near: std::cell::Cell::new([NO_SLOT; 2]),
            pending: NO_SLOT,
        }
    }
}

impl LargeFolios {
    /// The head, order and run slot of the folio holding `pfn`, if a
    /// large folio does.
    fn find(&self, pfn: u64) -> Option<(u64, u8, u32)> {
        let (first, end, order, slot) = match self.last.get() {
            Some(c) if (c.0..c.1).contains(&pfn) => c,
            _ => {
                let near = self.near.get().into_iter().find(|&s| {
                    self.slab
                        .get(s as usize)
                        .is_some_and(|r| r.count > 0 && r.first <= pfn && pfn < r.end())
                });
                let (first, slot) = match near {
                    Some(s) => (self.slab[s as usize].first, s),
                    None => self.index.at_or_before(pfn)?,
                };
                let r = &self.slab[slot as usize];
                if pfn >= r.end() {
                    return None;
                }
                let c = (first, r.end(), r.folio.order.0, slot);
                self.last.set(Some(c));
                c
            }
        };
        let _ = end;
        let head = first + (((pfn - first) >> order) << order);
        Some((head, order, slot))
    }
    /// The run holding the folio whose head is `head`.
    fn run_of(&self, head: u64) -> Option<&FolioRun> {
        let (h, _, slot) = self.find(head)?;
        (h == head).then(|| &self.slab[slot as usize])
    }
    /// The state of the folio at `head` (its run's; read its tags through
    /// [`FolioRun::tag`]).
    fn get(&self, head: &u64) -> Option<&LargeFolio> {
        self.run_of(*head).map(|r| &r.folio)
    }
    /// The run in `slot` (from [`LargeFolios::find`]).
    fn at(&self, slot: u32) -> &FolioRun {
        &self.slab[slot as usize]
    }
    fn new_slot(&mut self, r: FolioRun) -> u32 {
        let first = r.first;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = r;
                s
            }
            None => {
                self.slab.push(r);
                (self.slab.len() - 1) as u32
            }
        };
        self.index.insert(first, slot);
        slot
    }
    /// Joins run `b` (right after `a`) into `a` when their folios agree:
    /// their tags are first put in the canonical form that lets equal
    /// states compare equal. Whether `b` was absorbed (its slot freed).
    fn absorb(&mut self, a: u32, b: u32) -> bool {
        if self.slab[a as usize].same_state(&self.slab[b as usize]) {
            self.slab[a as usize].canonical_tags();
            self.slab[b as usize].canonical_tags();
        }
        if !self.slab[a as usize].joins(&self.slab[b as usize]) {
            return false;
        }
        let r = self.free_slot(b);
        self.slab[a as usize].count += r.count;
        self.last.set(None);
        true
    }
    /// [`LargeFolios::free_slot`] for a caller that drops the record: the
    /// slot's record emptied in place (no copy of it handed back; issue
    /// 14, thirteenth session: the zap of a whole run).
    fn drop_slot(&mut self, slot: u32) {
        if self.pending == slot {
            self.pending = NO_SLOT;
        }
        let r = &mut self.slab[slot as usize];
        let first = r.first;
        r.first = 0;
        r.count = 0;
        if self.reuse {
            // The record emptied as `LargeFolio::new()` makes it but for
            // the buffer of its mappings vector (emptied), which the next
            // run made in this slot takes ([`LargeFolios::recycled_maps`]).
            // A free slot counts as a whole record whatever it holds
            // ([`LargeFolios::overhead_bytes`]).
            let mut maps = std::mem::take(&mut r.folio.mm_maps);
            maps.clear();
            r.folio = LargeFolio::new(Order::ZERO, FolioKind::Anon);
            r.folio.mm_maps = maps;
        } else {
            r.folio = LargeFolio::new(Order::ZERO, FolioKind::Anon);
        }
        self.index.remove(first);
        self.free.push(slot);
    }
    /// The emptied mappings vector of the free slot [`LargeFolios::new_slot`]
    /// takes next, when [`LargeFolios::drop_slot`] kept its buffer and
    /// that buffer is what a fresh vector's first push allocates
    /// ([`FRESH_MAPS_CAP`] entries: a record built with it holds the same
    /// capacity, so [`LargeFolio::bytes`] counts it alike); otherwise a
    /// new, unallocated vector. Settles the pending folio first (which may
    /// free slots). Issue 14, sixteenth session: the seed's iteration made
    /// and freed one run's vector each time.
    fn recycled_maps(&mut self) -> Vec<(Pid, u32)> {
        self.settle_pending();
        if !self.reuse {
            return Vec::new();
        }
        match self.free.last() {
            Some(&s) => {
                let maps = &mut self.slab[s as usize].folio.mm_maps;
                if maps.capacity() == FRESH_MAPS_CAP && maps.is_empty() {
                    std::mem::take(maps)
                } else {
                    Vec::new()
                }
            }
            None => Vec::new(),
        }
    }
    fn free_slot(&mut self, slot: u32) -> FolioRun {
        if self.pending == slot {
            self.pending = NO_SLOT;
        }
        // The slot keeps an empty record (no heap parts) until reused.
        let r = std::mem::replace(
            &mut self.slab[slot as usize],
            FolioRun {
                first: 0,
                count: 0,
                folio: LargeFolio::new(Order::ZERO, FolioKind::Anon),
            },
        );
        self.index.remove(r.first);
        self.free.push(slot);
        r
    }
    /// Give the folio at `head` a record of its own, splitting its run
    /// into at most three; its slot.
    fn isolate(&mut self, head: u64) -> Option<u32> {
        let p = self.pending;
        if p != NO_SLOT {
            let r = &self.slab[p as usize];
            if r.count == 1 && r.first == head {
                return Some(p);
            }
            self.pending = NO_SLOT;
            self.settle(p);
        }
        let (h, order, slot) = self.find(head)?;
        if h != head {
            return None;
        }
        let r = &self.slab[slot as usize];
        if r.count == 1 {
            return Some(slot);
        }
        self.last.set(None);
        let nr = 1u64 << order;
        let k = ((head - r.first) >> order) as u32;
        let count = r.count;
        let mut near = self.near.get();
        if k + 1 < count {
            let after = FolioRun {
                first: head + nr,
                count: count - k - 1,
                folio: r.folio_at(head + nr),
            };
            near[1] = self.new_slot(after);
        }
        if k == 0 {
            self.near.set(near);
            let r = &mut self.slab[slot as usize];
            r.count = 1;
            return Some(slot);
        }
        near[0] = slot;
        self.near.set(near);
        let r = &mut self.slab[slot as usize];
        r.count = k;
        let alone = FolioRun {
            first: head,
            count: 1,
            folio: r.folio_at(head),
        };
        Some(self.new_slot(alone))
    }
    /// Give the `m` folios from the head `first` (all of one run) one
    /// record of their own, splitting their run into at most three; its
    /// slot. `None` unless `first` is a head and the `m` folios lie in
    /// its run. The folio changed last is joined with its neighbours
    /// first (as [`LargeFolios::isolate`] does).
    fn isolate_span(&mut self, first: u64, m: u64) -> Option<u32> {
        self.settle_pending();
        let (h, order, slot) = self.find(first)?;
        let r = &self.slab[slot as usize];
        let end = first + (m << order);
        if h != first || m == 0 || end > r.end() {
            return None;
        }
        self.last.set(None);
        let k = ((first - r.first) >> order) as u32;
        let (count, m) = (r.count, m as u32);
        let mut near = self.near.get();
        if k + m < count {
            let after = FolioRun {
                first: end,
                count: count - k - m,
                folio: r.folio_at(end),
            };
            near[1] = self.new_slot(after);
        }
        if k == 0 {
            self.near.set(near);
            self.slab[slot as usize].count = m;
            return Some(slot);
        }
        near[0] = slot;
        self.near.set(near);
        let r = &mut self.slab[slot as usize];
        r.count = k;
        let span = FolioRun {
            first,
            count: m,
            folio: r.folio_at(first),
        };
        Some(self.new_slot(span))
    }
    /// Join the run in `slot` with its neighbours where they agree.
    fn settle(&mut self, slot: u32) {
        if !self.runs {
            return;
        }
        let mut slot = slot;
        let first = self.slab[slot as usize].first;
        let near = self.near.get();
        let hint = |want: &dyn Fn(&FolioRun) -> bool| {
            near.into_iter().find(|&h| {
                h != slot
                    && self
                        .slab
                        .get(h as usize)
                        .is_some_and(|r| r.count > 0 && want(r))
            })
        };
        let prev = hint(&|r: &FolioRun| r.end() == first).or_else(|| self.index.before(first));
        if let Some(prev) = prev {
            if self.absorb(prev, slot) {
                slot = prev;
            }
        }
        let end = self.slab[slot as usize].end();
        let near = self.near.get();
        let hint = near.into_iter().find(|&h| {
            h != slot
                && self
                    .slab
                    .get(h as usize)
                    .is_some_and(|r| r.count > 0 && r.first == end)
        });
        let mut after = NO_SLOT;
        if let Some(next) = hint.or_else(|| self.index.get(end)) {
            if !self.absorb(slot, next) {
                after = next;
            }
        }
        self.near.set([slot, after]);
    }
    /// Change the folio at `head` with `f` (which gets its record and
    /// returns what the caller needs); `None` without such a folio.
    fn update<R>(&mut self, head: u64, f: impl FnOnce(&mut LargeFolio) -> R) -> Option<R> {
        let slot = self.isolate(head)?;
        let out = f(&mut self.slab[slot as usize].folio);
        self.done(slot);
        Some(out)
    }
    /// The folio in `slot` (alone in its record) has been changed: join it
    /// with its neighbours when the next folio is changed.
    fn done(&mut self, slot: u32) {
        if self.runs {
            self.pending = slot;
        }
    }
    /// Join the folio changed last with its neighbours now.
    fn settle_pending(&mut self) {
        let p = std::mem::replace(&mut self.pending, NO_SLOT);
        if p != NO_SLOT {
            self.settle(p);
        }
    }
    fn insert(&mut self, head: u64, l: LargeFolio) {
        self.last.set(None);
        if self.isolate(head).is_some() {
            self.remove(&head);
        }
        self.settle_pending();
        self.folios += 1;
        let slot = self.new_slot(FolioRun {
            first: head,
            count: 1,
            folio: l,
        });
        self.done(slot);
    }
    /// [`LargeFolios::insert`] of `count` folios from `first`, all in the
    /// state `l` (affine contents across them), as one run, joined with
    /// its neighbours at once: the records that inserting and changing
    /// them one by one leave (issue 14, fourteenth session). Runs on only.
    fn insert_run(&mut self, first: u64, count: u32, l: LargeFolio) {
        debug_assert!(self.runs && count > 0);
        self.last.set(None);
        self.settle_pending();
        self.folios += count as u64;
        let slot = self.new_slot(FolioRun {
            first,
            count,
            folio: l,
        });
        self.settle(slot);
    }
    fn remove(&mut self, head: &u64) -> Option<LargeFolio> {
        let slot = self.isolate(*head)?;
        self.last.set(None);
        self.folios -= 1;
        Some(self.free_slot(slot).folio)
    }
    /// Every run, in frame order.
    fn runs(&self) -> impl Iterator<Item = &FolioRun> {
        self.index.values().map(|s| &self.slab[s as usize])
    }
    /// Bytes the index and the slab's free slots take beyond the live
    /// runs' own records: a B-tree leaf of 11 (u64, u32) entries is 144
    /// bytes, at least half full, so at most 24 bytes an entry; a free
    /// slot is a whole record.
    fn overhead_bytes(&self) -> usize {
        self.index.len() * 24
            + self.index.len()
                * (std::mem::size_of::<FolioRun>() - std::mem::size_of::<LargeFolio>())
            + self.free.len() * std::mem::size_of::<FolioRun>()
    }
    /// Every folio in head order, each with its own record.
    fn sorted(&self) -> Vec<(u64, LargeFolio)> {
        let mut v = Vec::with_capacity(self.folios as usize);
        for r in self.runs() {
            for k in 0..r.count as u64 {
                let head = r.first + k * r.pages();
                v.push((head, r.folio_at(head)));
            }
        }
        v
    }
}

/// A reference to a folio: its head frame and order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FolioRef {
    pub head: Pfn,
    pub order: Order,
}

impl FolioRef {
    pub fn is_large(&self) -> bool {
        self.order.0 > 0
    }
    pub fn nr_pages(&self) -> u64 {
        self.order.pages()
    }
    pub fn index_of(&self, pfn: Pfn) -> u64 {
        pfn.0 - self.head.0
    }
}

/// Physical memory, its folios and the global THP counters.
#[derive(Clone, Debug)]
pub struct PhysMem {
    pub(crate) alloc: Nodes,
    memmap: Memmap,
    large: LargeFolios,
    /// Bytes of per-page arrays the large-folio records hold.
    /// The 4 KiB shared zero page.
    pub zero_pfn: Pfn,
    /// The huge zero folio, allocated on first use.
    pub huge_zero: Option<Pfn>,
    pub stats: Stats,
    /// Page-table pages currently allocated.
    pub pt_pages: u64,
    /// Hardware events of folio metadata, allocation and freeing, plus the
    /// retired events of exited processes (see [`crate::core::hw`]).
    pub hw: crate::core::hw::HwSink,
    /// The swap device, its slots and swap cache (crate::sys::swap).
    pub swap: crate::core::swapfile::SwapDevice,
    /// The per-CPU LRU-add and mlock folio batches ([`FolioBatches`]).
    pub folio_batches: FolioBatches,
    /// Bytes 8..4096 of the pages that are not tag pages
    /// ([`crate::core::content`]).
    pub contents: crate::core::content::Contents,
    /// fork's copy and the zap of exit take a whole stretch of one stored
    /// run of entries in one step (`ModelConfig::fork_runs`, on by
    /// default; off: entry by entry and batch by batch, the reference the
    /// fork-run property test compares against). No observable effect.
    pub fork_runs: bool,
    /// With `fork_runs`: a zap stretch of whole large folios takes its
    /// first folio in the same step as the others, the events and
    /// statistics of a whole-folio batch written out
    /// ([`PhysMem::unmap_free_whole_large`]; `ModelConfig::zap_first_folded`,
    /// on by default; off: the first folio's batch runs through
    /// `remove_rmap_ptes()`/`ref_sub()` and its counts are the template,
    /// the reference the property tests compare against). No observable
    /// effect, and the same counts.
    pub zap_first_folded: bool,
}

impl crate::core::arch::FolioSpan for PhysMem {
    fn folio_span(&self, pfn: Pfn) -> Option<(u64, u64)> {
        self.folio_of(pfn).map(|f| (f.head.0, f.nr_pages()))
    }
}

impl PhysMem {
    pub fn new(frames: u64) -> Self {
        let mut alloc = Nodes::new(frames);
        let zero_pfn = alloc.alloc(Order::ZERO).expect("memory for the zero page");
        let mut pm = PhysMem {
            alloc,
            memmap: Memmap::default(),
            large: LargeFolios::default(),
            zero_pfn,
            huge_zero: None,
            stats: Stats::default(),
            pt_pages: 0,
            hw: crate::core::hw::HwSink::new(Default::default()),
            swap: Default::default(),
            folio_batches: Default::default(),
            contents: Default::default(),
            fork_runs: true,
            zap_first_folded: true,
        };
        pm.memmap.set(
            zero_pfn,
            PageMeta {
                bits: F_ALLOCATED,
                ..Default::default()
            },
        );
        pm
    }

    /// The state of the large folio holding `pfn` (its run's: read tags
    /// through [`PhysMem::tag`]), with `pfn`'s index in the folio.
    fn large_at(&self, pfn: Pfn) -> Option<(u64, &LargeFolio, usize)> {
        let (head, _, slot) = self.large.find(pfn.0)?;
        Some((head, &self.large.at(slot).folio, (pfn.0 - head) as usize))
    }

    /// Change the large folio holding `pfn` with `f` (its record and
    /// `pfn`'s index in it); `None` when no large folio holds `pfn`.
    fn update_large_at<R>(
        &mut self,
        pfn: Pfn,
        f: impl FnOnce(&mut LargeFolio, usize) -> R,
    ) -> Option<R> {
        let (head, _, _) = self.large.find(pfn.0)?;
        self.large.update(head, |l| f(l, (pfn.0 - head) as usize))
    }

    /// Change the large folio `folio` with `f`; panics without one (the
    /// caller holds a large folio).
    fn update_large<R>(&mut self, folio: FolioRef, f: impl FnOnce(&mut LargeFolio) -> R) -> R {
        self.large
            .update(folio.head.0, f)
            .expect("large folio record")
    }

    /// Keep one record per large folio (`false`) or one per run of
    /// identical folios (`true`, the default). No observable effect; the
    /// folio-run property test compares the two.
    pub fn set_folio_runs(&mut self, on: bool) {
        self.large.runs = on;
    }

    /// `ModelConfig::folio_record_reuse`: keep the run index as a sorted
    /// vector while small and hand a freed slot's mappings buffer to the
    /// next run made in it (`true`, the default), or keep the index as a
    /// B-tree and every record's heap parts its own (`false`). No
    /// observable effect and the same `memory_bytes()`; the folio-run
    /// property test compares the two. Set before any folio is made.
    pub fn set_folio_record_reuse(&mut self, on: bool) {
        let l = &mut self.large;
        l.reuse = on;
        let entries: Vec<(u64, u32)> = l.index.iter().collect();
        l.index = RunIndex::new(on && entries.len() <= INDEX_SMALL_MAX);
        for (k, s) in entries {
            l.index.insert(k, s);
        }
    }

    /// Large-folio records held: one per run of identical folios (the
    /// folio changed last joined with its neighbours first).
    pub fn large_records(&mut self) -> usize {
        self.large.settle_pending();
        self.large.index.len()
    }

    /// Resize physical memory to `frames` frames; false when frames above
    /// the new size were ever used.
    pub fn set_frames(&mut self, frames: u64) -> bool {
        self.alloc.set_frames(frames)
    }

    /// Frames of physical memory.
    pub fn frames(&self) -> u64 {
        self.alloc.frames()
    }

    /// Frames allocated (folios, page tables, zero pages).
    pub fn frames_allocated(&self) -> u64 {
        self.alloc.allocated()
    }

    // ---- NUMA nodes ---------------------------------------------------------

    /// Number of NUMA nodes.
    pub fn nodes(&self) -> u32 {
        self.alloc.count()
    }

    /// Split memory into `nodes` nodes of equal size; false when a frame
    /// already in use would change node (see [`Nodes::set_layout`]).
    pub fn set_nodes(&mut self, nodes: u32) -> bool {
        let frames = self.alloc.frames();
        self.alloc.set_layout(frames, nodes)
    }

    /// The node a frame belongs to. Linux: page_to_nid() / folio_nid().
    pub fn node_of(&self, pfn: Pfn) -> u32 {
        self.alloc.node_of(pfn)
    }

    /// The node allocations without a node of their own go to first
    /// (`numa_node_id()` of the running task).
    pub fn local_node(&self) -> u32 {
        self.alloc.local
    }

    pub fn set_local_node(&mut self, node: u32) {
        self.alloc.local = node.min(self.nodes() - 1);
    }

    /// Free frames of `node`.
    pub fn node_free(&self, node: u32) -> u64 {
        self.alloc.node_free(node)
    }

    /// Bytes of model memory spent on physical-memory metadata: the
    /// memmap sections in use and the large-folio records (each record,
    /// its index entry, and the slab's free slots).
    pub fn metadata_bytes(&self) -> usize {
        self.memmap.bytes()
            + self.large.runs().map(|r| r.folio.bytes()).sum::<usize>()
            + self.large.overhead_bytes()
    }

    // ---- allocation -------------------------------------------------------

    /// Allocate a zeroed anonymous folio. Refcount and mapcounts start at 0;
    /// the caller maps it. Counts `nr_anon` for mTHP/THP sizes.
    /// Linux: mm/memory.c alloc_anon_folio(), folio_prealloc().
    pub fn alloc_anon_folio(&mut self, order: Order) -> Option<FolioRef> {
        let head = self.alloc.alloc(order)?;
        Some(self.init_anon_folio(head, order))
    }

    /// [`PhysMem::alloc_anon_folio`] on `node` only (`__GFP_THISNODE`), as
    /// migration allocates its destination.
    /// Linux: mm/migrate.c alloc_misplaced_dst_folio().
    pub fn alloc_anon_folio_on(&mut self, node: u32, order: Order) -> Option<FolioRef> {
        let head = self.alloc.alloc_on(node, order)?;
        Some(self.init_anon_folio(head, order))
    }

    fn init_anon_folio(&mut self, head: Pfn, order: Order) -> FolioRef {
        self.hw.folio_alloc(order.0);
        if order.0 > 0 {
            self.large
                .insert(head.0, LargeFolio::new(order, FolioKind::Anon));
            self.stats.mthp(order.0, MthpStat::NrAnon, 1);
        } else {
            self.memmap.set(
                head,
                PageMeta {
                    bits: F_ALLOCATED,
                    ..Default::default()
                },
            );
        }
        FolioRef { head, order }
    }

    /// Up to `max` new order-0 anon folios, each mapped by one PTE of
    /// `mm` as a fresh exclusive page and holding one reference, with page
    /// `first + k` tagged `base + k × step`: what `n` order-0 write faults
    /// in a row do to the memmap — [`PhysMem::alloc_anon_folio`],
    /// [`PhysMem::add_rmap_ptes`] (exclusive), [`PhysMem::ref_add`] of 1,
    /// then the store's tag — for the frames single allocations would
    /// hand out, in one step while they are consecutive
    /// ([`crate::core::phys::FrameAllocator::alloc_small_run`]; `cap` as
    /// there). Counts nothing: the caller adds the faults' events. Returns
    /// `(first, n)`, `n` possibly 0; `None` when memory is exhausted.
    /// The caller has settled the pending large folio (a fault through
    /// the single path did).
    /// Linux: mm/memory.c do_anonymous_page() (order 0), once per page.
    pub fn alloc_small_anon_run(
        &mut self,
        max: u64,
        cap: impl FnOnce(Pfn) -> u64,
        base: u64,
        step: u64,
    ) -> Option<(Pfn, u64)> {
        let (first, n) = self.alloc.alloc_small_run(max, cap)?;
        let mapped = F_ALLOCATED | F_ANON_EXCLUSIVE | 1;
        let mut k = 0;
        while k < n {
            let pfn = first.add(k);
            let (s, i) = Memmap::split(pfn);
            // Frames of this section: the first through the single form
            // (creates the section, counts it used), the rest in place.
            let in_sec = (SECTION_FRAMES - i as u64).min(n - k);
            self.memmap.set(
                pfn,
                PageMeta {
                    refcount: 1,
                    bits: mapped,
                },
            );
            let sec = self.memmap.section_mut(s).expect("just set");
            for j in 0..in_sec as usize {
                if j > 0 {
                    debug_assert_eq!((sec.bits[i + j], sec.refs[i + j]), (0, 0), "a free frame");
                    sec.bits[i + j] = mapped;
                    sec.refs[i + j] = 1;
                    sec.used += 1;
                }
                let t = base.wrapping_add(step.wrapping_mul(k + j as u64));
                sec.tags.set((i + j) as u16, t);
            }
            k += in_sec;
        }
        Some((first, n))
    }

    /// One new order-0 anon folio, mapped by one PTE as a fresh exclusive
    /// page holding one reference and tagged `tag`: [`PhysMem::alloc_anon_folio`]
    /// of order 0, [`PhysMem::add_rmap_ptes`] (exclusive, which settles the
    /// large folio changed last), [`PhysMem::ref_add`] of 1 and
    /// [`PhysMem::set_tag`], in one memmap write
    /// ([`PhysMem::alloc_small_anon_run`] of one frame: the frame
    /// `alloc_anon_folio()` returns). Counts nothing (the caller adds the
    /// events); `None` when memory is exhausted. UFFDIO_COPY's fused step.
    pub(crate) fn alloc_small_anon_mapped(&mut self, tag: u64) -> Option<Pfn> {
        let (first, n) = self.alloc_small_anon_run(1, |_| 1, tag, 0)?;
        debug_assert_eq!(n, 1);
        self.large.settle_pending();
        Some(first)
    }

    /// Up to `k` more anonymous folios after the one at `head`, each what
    /// the next [`PhysMem::alloc_anon_folio`] of its order returns and
    /// left in the state the folio at `head` is in (counts, mappings per
    /// mm, per-page mapcounts and exclusivity, flags), their contents
    /// going on from its affine contents frame by frame: the state `k`
    /// faults like the one that made it leave behind, in one step (the
    /// caller counts their events and maps them). Only while the
    /// allocator gives the heads right after it, in order, taken as one
    /// run ([`crate::core::phys::Nodes::alloc_run`]: what single
    /// allocations hand out, the free lists left as they leave them); a
    /// block that is not the next is not taken, and the count made so far
    /// is returned. 0 when `head` is not an
    /// anonymous large folio with affine contents, out of the swap cache,
    /// ending its run. Uncounted: no events, no statistics.
    /// Linux: mm/memory.c alloc_anon_folio() (per fault).
    pub fn alloc_anon_run_like(&mut self, head: Pfn, k: u64) -> u64 {
        self.large.settle_pending();
        let Some(run) = self.large.run_of(head.0) else {
            return 0;
        };
        let nr = run.pages();
        // The run's shared state is the template's but for its contents
        // (affine in both or neither): checked there, and the template
        // built (a clone) only where the folios are recorded one by one.
        let shared = &run.folio;
        let slot = self.large.find(head.0).map(|(_, _, s)| s);
        if shared.kind != FolioKind::Anon
            || shared.swap.is_some()
            || !matches!(shared.tags, Tags::Affine { .. })
            || run.end() != head.0 + nr
        {
            return 0;
        }
        let order = shared.order;
        let template = match (self.large.runs, slot) {
            (true, Some(_)) => None,
            _ => Some(run.folio_at(head.0)),
        };
        // The blocks single allocations would hand out while each is the
        // next one after the run (a block elsewhere is not taken: single
        // allocations stopped there and gave it back), in one step.
        let want = head.0 + nr;
        let made = self
            .alloc
            .alloc_run(order, k, |p| if p.0 == want { k } else { 0 })
            .map_or(0, |(_, n)| n);
        if made == 0 {
            return 0;
        }
        self.large.last.set(None);
        match (template, slot) {
            (None, Some(slot)) => {
                self.large.folios += made;
                self.large.slab[slot as usize].count += made as u32;
                self.large.settle(slot);
            }
            (None, None) => debug_assert!(false, "a template without a slot is built"),
            (Some(template), _) => {
                for j in 1..=made {
                    let h = head.0 + nr * j;
                    let mut l = template.clone();
                    if let Tags::Affine { base, step } = template.tags {
                        l.tags = Tags::Affine {
                            base: base.wrapping_add(step.wrapping_mul(h - head.0)),
                            step,
                        };
                    }
                    self.large.insert(h, l);
                }
                self.large.settle_pending();
            }
        }
        made
    }

    /// Up to `max` new anonymous folios of `order` (≥ 2), each mapped
    /// whole by PTEs of process `mm` as a new exclusive folio holding one
    /// reference per page, frame `first + p` tagged `base + p × step`:
    /// what that many write faults in a row do to the folio records —
    /// [`PhysMem::alloc_anon_folio`], [`PhysMem::add_rmap_ptes`] of the
    /// whole folio (exclusive), [`PhysMem::ref_add`] of its pages, the
    /// stores' tags — for the blocks single allocations would hand out,
    /// taken in one step while each starts where the one before ends
    /// ([`crate::core::phys::Nodes::alloc_run`]), recorded as one folio
    /// run. Counts nothing (no events, no statistics: the caller counts
    /// the faults). `Some((first, n))` with `n ≥ 1`; `None`, nothing done,
    /// when memory is exhausted or folio runs are off
    /// ([`PhysMem::set_folio_runs`]: the caller takes the one-by-one path).
    /// Linux: mm/memory.c alloc_anon_folio(), mm/rmap.c
    /// folio_add_new_anon_rmap(), once per fault.
    pub(crate) fn alloc_anon_run_mapped(
        &mut self,
        order: Order,
        max: u64,
        mm: Pid,
        base: u64,
        step: u64,
    ) -> Option<(Pfn, u64)> {
        if !self.large.runs || order.0 < 2 || max == 0 || max > u32::MAX as u64 {
            return None;
        }
        let (first, n) = self.alloc.alloc_run(order, max, |_| max)?;
        if n == 0 {
            return None;
        }
        let nr = order.pages() as u32;
        let mut l = LargeFolio::new(order, FolioKind::Anon);
        // add_rmap_ptes() of every page, exclusive; ref_add() of nr.
        l.mapcount = PerPage::All(1);
        l.exclusive = PerPage::All(true);
        l.large_mapcount = nr;
        l.nr_pages_mapped = nr;
        l.mm_maps = self.large.recycled_maps();
        l.mm_maps.push((mm, nr));
        l.refcount = nr;
        l.tags = Tags::Affine { base, step };
        self.large.insert_run(first.0, n as u32, l);
        Some((first, n))
    }

    /// Allocate a page-table page.
    pub fn alloc_pt_page(&mut self) -> Option<Pfn> {
        let pfn = self.alloc.alloc(Order::ZERO)?;
        self.hw.one(HwEvent::PtPageAlloc);
        self.memmap.set(
            pfn,
            PageMeta {
                refcount: 1,
                bits: F_ALLOCATED | F_PGTABLE,
            },
        );
        self.pt_pages += 1;
        Some(pfn)
    }

    pub fn free_pt_page(&mut self, pfn: Pfn) {
        self.hw.one(HwEvent::PtPageFree);
        self.memmap.set(pfn, PageMeta::default());
        self.pt_pages -= 1;
        self.alloc.free(pfn, Order::ZERO);
    }

    /// Up to `max` page-table pages: what that many
    /// [`PhysMem::alloc_pt_page`] calls in a row do, for the frames single
    /// allocations would hand out, taken in one step while they are
    /// consecutive ([`crate::core::phys::FrameAllocator::alloc_small_run`]).
    /// Returns `(first, n)` (`n ≥ 1`) for frames `first..first + n`;
    /// `None` (nothing done) when memory is exhausted or `max` is 0. The
    /// same events (`PtPageAlloc` per page), memmap and count as the
    /// single calls. For fork's stretch of child PTE tables (issue 14).
    /// Linux: mm/memory.c __pte_alloc() → pte_alloc_one(), once per table.
    pub fn alloc_pt_page_run(&mut self, max: u64) -> Option<(Pfn, u64)> {
        if max == 0 {
            return None;
        }
        let (first, n) = self.alloc.alloc_small_run(max, |_| max)?;
        if n == 0 {
            return None;
        }
        self.hw.add(HwEvent::PtPageAlloc, n);
        self.memmap.set_pt_range(first, n, true);
        self.pt_pages += n;
        Some((first, n))
    }

    /// [`PhysMem::free_pt_page`] of the `n` page-table pages from `first`
    /// in one step: the same events, memmap and count, the frames given
    /// back as a range ([`crate::core::phys::Nodes::free_range`]: the free
    /// lists end as after single frees). For exit's stretch of PTE tables.
    pub fn free_pt_page_range(&mut self, first: Pfn, n: u64) {
        if n == 0 {
            return;
        }
        self.hw.add(HwEvent::PtPageFree, n);
        self.memmap.set_pt_range(first, n, false);
        self.pt_pages -= n;
        self.alloc.free_range(first, n);
    }

    /// The huge zero folio, allocating it on first use.
    /// Linux: mm/huge_memory.c get_huge_zero_folio() (counts thp_zero_page_alloc).
    pub fn get_huge_zero(&mut self) -> Option<Pfn> {
        if let Some(p) = self.huge_zero {
            return Some(p);
        }
        let head = self.alloc.alloc(Order::PMD)?;
        self.large
            .insert(head.0, LargeFolio::new(Order::PMD, FolioKind::HugeZero));
        self.stats.vm(VmEvent::ThpZeroPageAlloc, 1);
        self.huge_zero = Some(head);
        Some(head)
    }

    // ---- lookup -----------------------------------------------------------

    /// The folio containing `pfn`, if `pfn` is an allocated data page.
    pub fn folio_of(&self, pfn: Pfn) -> Option<FolioRef> {
        let m = self.memmap.get(pfn);
        if m.bits & F_ALLOCATED != 0 {
            return (m.bits & F_PGTABLE == 0).then_some(FolioRef {
                head: pfn,
                order: Order::ZERO,
            });
        }
        let (head, order, _) = self.large.find(pfn.0)?;
        Some(FolioRef {
            head: Pfn(head),
            order: Order(order),
        })
    }

    /// The record of the large folio at `head` (a copy: folios of one run
    /// share one record).
    pub fn large(&self, head: Pfn) -> Option<LargeFolio> {
        self.large.run_of(head.0).map(|r| r.folio_at(head.0))
    }

    /// Every large folio, by head frame, each with its own record.
    pub fn large_folios(&self) -> impl Iterator<Item = (Pfn, LargeFolio)> {
        self.large.sorted().into_iter().map(|(h, f)| (Pfn(h), f))
    }

    /// Every allocated small (order-0) data frame other than the zero page.
    pub fn small_folios(&self) -> impl Iterator<Item = Pfn> + '_ {
        self.memmap.iter().filter_map(move |(pfn, m)| {
            let small = m.bits & (F_ALLOCATED | F_PGTABLE) == F_ALLOCATED;
            (small && pfn != self.zero_pfn).then_some(pfn)
        })
    }

    /// The large record of `folio`: none for an order-0 folio, whose head
    /// is never a large folio's (no B-tree lookup for it).
    fn large_record(&self, folio: FolioRef) -> Option<&LargeFolio> {
        if folio.is_large() {
            self.large.get(&folio.head.0)
        } else {
            None
        }
    }

    /// [`LargeFolios::isolate`] of `folio`'s record; for an order-0 folio
    /// (no record) only what isolating a missing head does: settle the
    /// pending folio.
    fn isolate_large(&mut self, folio: FolioRef) -> Option<u32> {
        if folio.is_large() {
            self.large.isolate(folio.head.0)
        } else {
            self.large.settle_pending();
            None
        }
    }

    pub fn refcount(&self, folio: FolioRef) -> u32 {
        match self.large_record(folio) {
            Some(l) => l.refcount,
            None => self.memmap.get(folio.head).refcount,
        }
    }

    /// PTE mappings of one page.
    pub fn page_mapcount(&self, pfn: Pfn) -> u32 {
        match self.large_at(pfn) {
            Some((_, l, i)) => l.mapcount.get(i),
            None => self.memmap.get(pfn).mapcount(),
        }
    }

    /// The precise per-page mapcount kpagecount and pagemap bit 56 use:
    /// PTE mappings of the page plus PMD mappings of its folio.
    /// Linux: include/linux/rmap.h folio_precise_page_mapcount().
    pub fn precise_mapcount(&self, pfn: Pfn) -> u32 {
        match self.large_at(pfn) {
            Some((_, l, i)) => l.mapcount.get(i) + l.entire_mapcount,
            None => self.memmap.get(pfn).mapcount(),
        }
    }

    /// Total mappings of a folio. Linux: folio_mapcount().
    pub fn folio_mapcount(&self, folio: FolioRef) -> u32 {
        if folio.is_large() {
            self.large
                .get(&folio.head.0)
                .expect("large folio record")
                .large_mapcount
        } else {
            self.page_mapcount(folio.head)
        }
    }

    pub fn tag(&self, pfn: Pfn) -> u64 {
        match self.large.find(pfn.0) {
            Some((_, _, slot)) => self.large.at(slot).tag(pfn.0),
            None => self.memmap.tag(pfn),
        }
    }

    /// The 4096 bytes page `pfn` holds: its tag, then its rest.
    pub fn page_bytes(&self, pfn: Pfn) -> Box<[u8; 4096]> {
        crate::core::content::page_bytes(self.tag(pfn), self.contents.get(pfn.0))
    }

    /// Store 4096 bytes into page `pfn`.
    pub fn set_page_bytes(&mut self, pfn: Pfn, bytes: &[u8; 4096]) {
        let (tag, rest) = crate::core::content::split_page(bytes);
        self.set_tag(pfn, tag);
        self.contents.set(pfn.0, rest);
    }

    /// Whether page `pfn` holds anything but zeros.
    pub fn page_is_zero(&self, pfn: Pfn) -> bool {
        self.tag(pfn) == 0 && self.contents.get(pfn.0).is_none()
    }

    /// Copy page `src`'s content into page `dst` (its tag and its rest).
    pub fn copy_page(&mut self, src: Pfn, dst: Pfn) {
        let tag = self.tag(src);
        self.set_tag(dst, tag);
        let rest = self.contents.get(src.0).cloned();
        self.contents.set(dst.0, rest);
    }

    pub fn set_tag(&mut self, pfn: Pfn, tag: u64) {
        self.set_tags(pfn, 1, tag, 0);
    }

    /// Store `base + k × step` into page `first + k` for `k < nr` (pages
    /// of one folio): what a program writing a range does to each page.
    pub fn set_tags(&mut self, first: Pfn, nr: u64, base: u64, step: u64) {
        // Pages that already hold these tags (a program writing the same
        // range again): nothing changes, and the folio's run stays whole.
        if let Some((_, _, slot)) = self.large.find(first.0) {
            let r = self.large.at(slot);
            if let Tags::Affine { base: b, step: s } = r.folio.tags {
                let here = b.wrapping_add(s.wrapping_mul(first.0 - r.first));
                if here == base && (nr == 1 || s == step) {
                    return;
                }
            }
        }
        let large = self.update_large_at(first, |l, i| {
            let n = l.nr();
            debug_assert!(i + nr as usize <= n, "a tag run stays in its folio");
            l.tags.set_run(i, nr as usize, n, base, step);
        });
        if large.is_some() {
            return;
        }
        for k in 0..nr {
            let t = base.wrapping_add(step.wrapping_mul(k));
            self.memmap.set_tag(first.add(k), t);
        }
    }

    pub fn anon_exclusive(&self, pfn: Pfn) -> bool {
        match self.large_at(pfn) {
            Some((_, l, i)) => l.exclusive.get(i),
            None => self.memmap.get(pfn).bits & F_ANON_EXCLUSIVE != 0,
        }
    }

    /// PageAnonExclusive of `pfn` and how many consecutive pages from
    /// `pfn` (at most `max`, all in `pfn`'s folio) share it: what
    /// [`PhysMem::anon_exclusive`] page by page returns, with one folio
    /// lookup (Linux: mm/mprotect.c page_anon_exclusive_sub_batch()).
    pub fn anon_exclusive_run(&self, pfn: Pfn, max: u64) -> (bool, u64) {
        if max == 0 {
            return (self.anon_exclusive(pfn), 0);
        }
        if let Some((_, l, i)) = self.large_at(pfn) {
            let max = (max as usize).min(l.nr() - i);
            let (x, n) = l.exclusive.run_from(i, max);
            return (x, n as u64);
        }
        // An order-0 folio is one page.
        (self.anon_exclusive(pfn), 1)
    }

    pub fn set_anon_exclusive(&mut self, pfn: Pfn, on: bool) {
        self.set_anon_exclusive_range(pfn, 1, on);
    }

    /// PageAnonExclusive of `nr` consecutive pages of one folio.
    pub fn set_anon_exclusive_range(&mut self, first: Pfn, nr: u64, on: bool) {
        // Pages that are already so: nothing changes (the folio's run
        // stays whole).
        if nr > 0 {
            if let Some((_, l, i)) = self.large_at(first) {
                let max = (nr as usize).min(l.nr() - i);
                if l.exclusive.run_from(i, max) == (on, nr as usize) {
                    return;
                }
            }
        }
        let large = self.update_large_at(first, |l, i| {
            let n = l.nr();
            if nr == 1 {
                l.exclusive.set(i, n, on);
            } else {
                l.exclusive.update(i, nr as usize, n, |x, _| *x = on);
            }
        });
        if large.is_some() {
            return;
        }
        for k in 0..nr {
            self.memmap.update(first.add(k), |m| {
                if on {
                    m.bits |= F_ANON_EXCLUSIVE;
                } else {
                    m.bits &= !F_ANON_EXCLUSIVE;
                }
            });
        }
    }

    fn folio_flags(&self, folio: FolioRef) -> u32 {
        match self.large_record(folio) {
            Some(l) => l.flags,
            None => self.memmap.get(folio.head).bits,
        }
    }

    /// Whether the anon folio is lazyfree: PG_swapbacked cleared by
    /// MADV_FREE (Linux: mm/swap.c folio_mark_lazyfree(), lru_lazyfree()).
    /// Set here as soon as MADV_FREE queues the folio; the kernel clears
    /// the flag when the lazyfree batch is drained, which
    /// [`PhysMem::lazyfree_visible`] tells.
    pub fn lazyfree(&self, folio: FolioRef) -> bool {
        self.folio_flags(folio) & F_LAZYFREE != 0
    }

    /// Mark lazyfree (true) or swap-backed again (false:
    /// folio_set_swapbacked()).
    pub fn set_lazyfree(&mut self, folio: FolioRef, on: bool) {
        self.set_folio_flag(folio, F_LAZYFREE, on);
    }

    fn set_folio_flag(&mut self, folio: FolioRef, flag: u32, on: bool) {
        if folio.is_large()
            && self
                .large
                .get(&folio.head.0)
                .is_some_and(|l| (l.flags & flag != 0) == on)
        {
            return; // already so: the folio's run stays whole
        }
        let set = |bits: &mut u32| {
            if on {
                *bits |= flag;
            } else {
                *bits &= !flag;
            }
        };
        if self
            .large
            .update(folio.head.0, |l| set(&mut l.flags))
            .is_none()
        {
            self.memmap.update(folio.head, |m| set(&mut m.bits));
        }
    }

    /// Whether PG_swapbacked is clear as the kernel reports it: lazyfree
    /// and no longer waiting in the lazyfree batch (smaps `LazyFree`).
    pub fn lazyfree_visible(&self, folio: FolioRef) -> bool {
        self.lazyfree(folio) && !self.folio_batches.lazyfree_pending(folio.head)
    }

    /// PG_dirty of the folio.
    pub fn folio_dirty(&self, folio: FolioRef) -> bool {
        self.folio_flags(folio) & F_DIRTY != 0
    }

    /// folio_mark_dirty() (true) / folio_clear_dirty() (false).
    pub fn set_folio_dirty(&mut self, folio: FolioRef, on: bool) {
        self.set_folio_flag(folio, F_DIRTY, on);
    }

    /// Whether any mm other than `mm` maps the folio. Linux: folio_maybe_mapped_shared().
    /// Whether the folio may be mapped by more than one process: a small
    /// folio mapped more than once; a large one mapped by two or more mms
    /// (the model's exact per-mm counts; the kernel's two mm ids agree
    /// while at most two mms map it).
    /// Linux: include/linux/mm.h folio_maybe_mapped_shared().
    pub fn maybe_mapped_shared(&self, folio: FolioRef) -> bool {
        match self.large_record(folio) {
            Some(l) => l.mm_maps.iter().filter(|&&(_, n)| n > 0).count() > 1,
            None => self.page_mapcount(folio.head) > 1,
        }
    }

    pub fn mapped_by_other_mm(&self, folio: FolioRef, mm: Pid) -> bool {
        match self.large_record(folio) {
            Some(l) => l.mm_maps.iter().any(|&(p, n)| p != mm && n > 0),
            None => false,
        }
    }

    // ---- references -------------------------------------------------------

    fn refcount_mut<R>(&mut self, folio: FolioRef, f: impl FnOnce(&mut u32) -> R) -> R {
        if folio.is_large() {
            if let Some(slot) = self.large.isolate(folio.head.0) {
                let out = f(&mut self.large.slab[slot as usize].folio.refcount);
                self.large.done(slot);
                return out;
            }
        }
        self.memmap.update(folio.head, |m| f(&mut m.refcount))
    }

    /// fork's share of one order-0 anon page, if `pfn` is one: it loses
    /// AnonExclusive, gains a mapping and a reference, in one memmap update
    /// — what `set_anon_exclusive(pfn, false)`, `add_rmap_ptes(folio, pfn,
    /// 1, _, false)` and `ref_add(folio, 1)` do to it. Counts nothing (the
    /// caller counts [`PhysMem::count_small_dups`] for its run); returns
    /// false and changes nothing for any other frame.
    /// Linux: include/linux/rmap.h __folio_try_dup_anon_rmap() for a small
    /// folio, folio_ref_add().
    pub fn try_dup_small_anon(&mut self, pfn: Pfn) -> bool {
        let (s, i) = Memmap::split(pfn);
        let Some(sec) = self.memmap.section_mut(s) else {
            return false;
        };
        let mut m = sec.get(i);
        if m.bits & (F_ALLOCATED | F_PGTABLE) != F_ALLOCATED || pfn == self.zero_pfn {
            return false;
        }
        m.bits = (m.bits & !F_ANON_EXCLUSIVE) + 1;
        m.refcount += 1;
        // Still allocated, so still not the default: `used` is unchanged.
        sec.put(i, m);
        true
    }

    /// [`PhysMem::try_dup_small_anon`] of the frames `next(0)`,
    /// `next(1)`, ... in order, stopping at the first that `next` does not
    /// give (`None`) or that is not an order-0 anon page (changed nothing):
    /// returns how many were shared. The same memmap changes as that many
    /// calls, with one section lookup per section the frames fall in
    /// (frames of a run faulted in address order share sections). Counts
    /// nothing, like the single form.
    /// Linux: include/linux/rmap.h __folio_try_dup_anon_rmap() for a small
    /// folio, folio_ref_add(), once per PTE of copy_pte_range()'s loop.
    pub fn try_dup_small_anon_run(&mut self, mut next: impl FnMut(usize) -> Option<Pfn>) -> usize {
        let zero = self.zero_pfn;
        let mut k = 0;
        let Some(mut pfn) = next(0) else { return 0 };
        loop {
            let (s, _) = Memmap::split(pfn);
            let Some(sec) = self.memmap.section_mut(s) else {
                return k;
            };
            loop {
                let (s2, i) = Memmap::split(pfn);
                if s2 != s {
                    break; // the next section: look it up
                }
                let bits = sec.bits[i];
                if bits & (F_ALLOCATED | F_PGTABLE) != F_ALLOCATED || pfn == zero {
                    return k;
                }
                let bits = (bits & !F_ANON_EXCLUSIVE) + 1;
                if sec.refs[i] < REF_ESCAPE - 1 {
                    sec.bits[i] = bits;
                    sec.refs[i] += 1;
                } else {
                    let mut m = sec.get(i);
                    m.bits = bits;
                    m.refcount += 1;
                    sec.put(i, m);
                }
                k += 1;
                match next(k) {
                    Some(p) => pfn = p,
                    None => return k,
                }
            }
        }
    }

    /// How many consecutive frames from `pfn` (at most `max`, not past its
    /// memmap section) are order-0 data pages, each what
    /// [`PhysMem::folio_of`] finds as an order-0 folio: a user access's
    /// run over order-0 pages (crate::sys::access) takes them in one step.
    pub fn small_folio_run(&self, pfn: Pfn, max: u64) -> u64 {
        if pfn.0 < FIRST_PFN {
            return 0;
        }
        let (s, i) = Memmap::split(pfn);
        let Some(sec) = self.memmap.section(s) else {
            return 0;
        };
        let hi = (i as u64 + max).min(SECTION_FRAMES) as usize;
        sec.bits[i..hi]
            .iter()
            .take_while(|&&b| b & (F_ALLOCATED | F_PGTABLE) == F_ALLOCATED)
            .count() as u64
    }

    /// PageAnonExclusive of `pfn` if it is an order-0 data page, and how
    /// many frames from it (at most `max`, not past its memmap section) are
    /// order-0 data pages of that same exclusivity: what
    /// [`PhysMem::small_anon_exclusive`] gives for each of them, in one
    /// read of the section. `None` as that function.
    pub fn small_anon_exclusive_run(&self, pfn: Pfn, max: u64) -> Option<(bool, u64)> {
        if pfn.0 < FIRST_PFN || max == 0 {
            return None;
        }
        let (s, i) = Memmap::split(pfn);
        let sec = self.memmap.section(s)?;
        let hi = (i as u64 + max).min(SECTION_FRAMES) as usize;
        let want = F_ALLOCATED | F_PGTABLE | F_ANON_EXCLUSIVE;
        let first = sec.bits[i] & want;
        if first & (F_ALLOCATED | F_PGTABLE) != F_ALLOCATED {
            return None;
        }
        let n = sec.bits[i..hi]
            .iter()
            .take_while(|&&b| b & want == first)
            .count();
        Some((first & F_ANON_EXCLUSIVE != 0, n as u64))
    }

    /// [`PhysMem::set_tags`] of `nr` order-0 pages from `first` (one
    /// memmap section, as [`PhysMem::small_folio_run`] found them): page
    /// `first + k` gets `base + k × step`. Pages that hold these tags
    /// already (a program writing the same range again) are left alone in
    /// one check of the section's tag run.
    pub fn set_small_tags(&mut self, first: Pfn, nr: u64, base: u64, step: u64) {
        let (s, i) = Memmap::split(first);
        let hold = self.memmap.section(s).is_some_and(|sec| match &sec.tags {
            SectionTags::Dense(v) => {
                (0..nr as usize).all(|k| v[i + k] == base.wrapping_add(step.wrapping_mul(k as u64)))
            }
            SectionTags::Runs(runs) => {
                let i = i as u16;
                let k = runs.partition_point(|r| r.start <= i);
                k.checked_sub(1).map(|k| runs[k]).is_some_and(|r| {
                    u64::from(i) + nr <= u64::from(r.end())
                        && r.at(i) == base
                        && (nr == 1 || r.step == step)
                })
            }
        });
        if hold {
            return;
        }
        for k in 0..nr {
            self.memmap
                .set_tag(first.add(k), base.wrapping_add(step.wrapping_mul(k)));
        }
    }

    /// The frame after the last page of the run of identical large folios
    /// holding `pfn` (one folio-run record; the folio's own end when runs
    /// are off), `None` outside large folios.
    pub fn large_run_end(&self, pfn: Pfn) -> Option<u64> {
        let (_, _, slot) = self.large.find(pfn.0)?;
        Some(self.large.at(slot).end())
    }

    /// [`PhysMem::set_tags`] of `nr` pages from `first` that may span several
    /// large folios of one run (up to [`PhysMem::large_run_end`]): one
    /// check when the run holds these tags already, else folio by folio.
    pub fn set_large_run_tags(&mut self, first: Pfn, nr: u64, base: u64, step: u64) {
        if let Some((_, _, slot)) = self.large.find(first.0) {
            let r = self.large.at(slot);
            if let Tags::Affine { base: b, step: s } = r.folio.tags {
                let here = b.wrapping_add(s.wrapping_mul(first.0 - r.first));
                if first.0 + nr <= r.end() && here == base && (nr == 1 || s == step) {
                    return;
                }
            }
        }
        let mut k = 0;
        while k < nr {
            let p = first.add(k);
            let left = match self.folio_of(p) {
                Some(f) => (f.head.0 + f.nr_pages() - p.0).min(nr - k),
                None => 1,
            };
            self.set_tags(p, left, base.wrapping_add(step.wrapping_mul(k)), step);
            k += left;
        }
    }

    /// PageAnonExclusive of `pfn` if it is an order-0 data page (what
    /// [`PhysMem::folio_of`] finds as an order-0 folio), `None` for any
    /// other frame: the two lookups mprotect's order-0 loop makes, in one
    /// memmap read.
    pub fn small_anon_exclusive(&self, pfn: Pfn) -> Option<bool> {
        let m = self.memmap.get(pfn);
        (m.bits & (F_ALLOCATED | F_PGTABLE) == F_ALLOCATED)
            .then_some(m.bits & F_ANON_EXCLUSIVE != 0)
    }

    /// The events of `n` [`PhysMem::try_dup_small_anon`]s: per page the
    /// struct page line and the `_mapcount` increment of
    /// [`PhysMem::add_rmap_ptes`], and [`PhysMem::ref_add`]'s atomic.
    pub fn count_small_dups(&self, n: u64) {
        self.hw.add(HwEvent::StructPageLine, n);
        self.hw.add(HwEvent::MapcountAtomic, n);
        self.hw.add(HwEvent::FolioRefAtomic, n);
    }

    /// Take `n` references: one atomic (folio_get / folio_ref_add).
    pub fn ref_add(&mut self, folio: FolioRef, n: u32) {
        self.hw.one(HwEvent::FolioRefAtomic);
        self.refcount_mut(folio, |r| *r += n);
    }

    /// Free a folio allocated but never mapped or referenced (a fault or
    /// collapse that gave up): one get and one put, as the kernel's
    /// folio_put() of its allocation reference.
    pub fn free_unused_folio(&mut self, folio: FolioRef) {
        self.ref_add(folio, 1);
        self.ref_sub(folio, 1);
    }

    /// Unmap one PTE of an order-0 folio and drop its reference, in one
    /// memmap update: [`PhysMem::remove_rmap_ptes`] with `nr == 1`, then
    /// [`PhysMem::ref_sub`] of 1 (freeing the folio at zero), with their
    /// events. Linux: mm/rmap.c folio_remove_rmap_ptes() and the
    /// mmu_gather's folio_put() for a small folio.
    pub fn unmap_put_small(&mut self, folio: FolioRef) {
        if self.unmap_put_small_meta(folio) {
            self.alloc.free(folio.head, Order::ZERO);
        }
    }

    /// [`PhysMem::unmap_put_small`] but for giving a freed frame back to
    /// the allocator: true when the folio was freed (the caller frees the
    /// frame).
    fn unmap_put_small_meta(&mut self, folio: FolioRef) -> bool {
        debug_assert!(!folio.is_large());
        self.hw.add(HwEvent::StructPageLine, 1);
        self.hw.add(HwEvent::MapcountAtomic, 1);
        self.hw.one(HwEvent::FolioRefAtomic);
        let pfn = folio.head;
        let left = self.memmap.update(pfn, |m| {
            assert!(m.mapcount() > 0, "mapcount underflow at {pfn:?}");
            assert!(m.refcount >= 1, "refcount underflow on folio {pfn:?}");
            m.bits -= 1;
            m.refcount -= 1;
            m.refcount
        });
        left == 0 && self.free_folio_meta(folio)
    }

    /// [`PhysMem::unmap_put_small`] of the frames `next(0)`, `next(1)`,
    /// ... in order, each found by [`PhysMem::folio_of`] as an order-0
    /// folio, stopping at the first that `next` does not give or that is
    /// not an order-0 data page (changed nothing): returns how many were
    /// unmapped. The same memmap changes, frees (in the same order) and
    /// events as that many `folio_of` + `unmap_put_small` pairs, with one
    /// section lookup per section while no page is freed.
    /// Linux: mm/memory.c zap_present_folio_ptes() for a small folio:
    /// folio_remove_rmap_ptes(), then the mmu_gather's folio_put().
    pub fn unmap_put_small_run(&mut self, mut next: impl FnMut(usize) -> Option<Pfn>) -> usize {
        let mut k = 0;
        // Pages unmapped in place (their events are added once at the end).
        let mut fast = 0u64;
        // Frames freed and not yet given back: consecutive ones go back in
        // one stretch (the same free lists).
        let mut freed = FreedFrames::default();
        let Some(mut pfn) = next(0) else { return 0 };
        'sections: loop {
            let (s, _) = Memmap::split(pfn);
            let Some(sec) = self.memmap.section_mut(s) else {
                break; // no meta, so not a data page
            };
            loop {
                let (s2, i) = Memmap::split(pfn);
                if s2 != s {
                    continue 'sections;
                }
                let bits = sec.bits[i];
                if bits & (F_ALLOCATED | F_PGTABLE) != F_ALLOCATED {
                    break 'sections;
                }
                let r = sec.refs[i];
                if r <= 1 || r == REF_ESCAPE || bits & MAPCOUNT_MASK == 0 {
                    // Freed at zero, an escaped count, or an underflow to
                    // report: the single form.
                    let folio = FolioRef {
                        head: pfn,
                        order: Order::ZERO,
                    };
                    if self.unmap_put_small_meta(folio) {
                        freed.push(pfn, &mut self.alloc);
                    }
                    k += 1;
                    match next(k) {
                        Some(p) => pfn = p,
                        None => break 'sections,
                    }
                    continue 'sections;
                }
                sec.bits[i] = bits - 1;
                sec.refs[i] = r - 1;
                fast += 1;
                k += 1;
                match next(k) {
                    Some(p) => pfn = p,
                    None => break 'sections,
                }
            }
        }
        freed.flush(&mut self.alloc);
        self.count_small_unmaps(fast);
        k
    }

    /// The events of `n` [`PhysMem::unmap_put_small`]s that freed nothing.
    fn count_small_unmaps(&self, n: u64) {
        self.hw.add(HwEvent::StructPageLine, n);
        self.hw.add(HwEvent::MapcountAtomic, n);
        self.hw.add(HwEvent::FolioRefAtomic, n);
    }

    /// Drop `n` references; frees the folio when the count reaches zero.
    /// Linux: folio_put_refs() → __folio_put() → free_unref_folios().
    pub fn ref_sub(&mut self, folio: FolioRef, n: u32) {
        self.hw.one(HwEvent::FolioRefAtomic);
        let left = self.refcount_mut(folio, |r| {
            assert!(*r >= n, "refcount underflow on folio {:?}", folio.head);
            *r -= n;
            *r
        });
        if left == 0 {
            self.free_folio(folio);
        } else if folio.is_large() && left == folio.nr_pages() as u32 {
            self.free_unmapped_swapcache(folio);
        }
    }

    /// A large folio left in the swap cache by a read swap-in (every slot
    /// at swap count 0) that just lost its last mapping and every other
    /// reference: the zap's mmu_gather frees it from the cache
    /// (free_swap_cache(): not mapped, swap_only_has_cache() over the
    /// folio → folio_free_swap(): one cluster lock, the slots'
    /// SWAP_HAS_CACHE, the slot frees), and the folio goes with the
    /// cache's references. The kernel does this at zap only; a CoW copy or
    /// MADV_COLLAPSE dropping the last mapping leaves it cached until
    /// reclaim, which nothing observes, so the model drops it the same
    /// way. Linux: mm/swap_state.c free_pages_and_swap_cache() →
    /// free_swap_cache(), mm/swapfile.c folio_free_swap().
    #[cold]
    #[inline(never)]
    fn free_unmapped_swapcache(&mut self, folio: FolioRef) {
        if self.folio_swap(folio).is_none()
            || self.folio_mapcount(folio) > 0
            || self.large_swap_counted(folio)
        {
            return;
        }
        rule!(self.hw, ZapFreesLargeSwapCache);
        let nr = folio.nr_pages();
        self.hw.one(HwEvent::SwapClusterLock);
        self.hw.add(HwEvent::SwapMapUpdate, nr);
        self.hw.add(HwEvent::SwapSlotFree, nr);
        self.delete_large_from_swapcache(folio);
    }

    /// Whether any slot of a large swap-cache folio still has a swap count
    /// (a swap PTE names it: `folio_swapped()`).
    pub(crate) fn large_swap_counted(&self, folio: FolioRef) -> bool {
        let base = self.folio_swap(folio).expect("a large swap-cache folio");
        self.swap
            .slots
            .range(base..base + folio.nr_pages())
            .any(|(_, s)| s.count > 0)
    }

    /// Take a large folio out of the swap cache: its slots are freed and
    /// the cache's references (one per page) go. No event: the callers
    /// count what their kernel path does. Linux: mm/swap_state.c
    /// swap_cache_del_folio(), mm/swapfile.c put_swap_folio().
    pub(crate) fn delete_large_from_swapcache(&mut self, folio: FolioRef) {
        let base = self.folio_swap(folio).expect("a large swap-cache folio");
        let nr = folio.nr_pages();
        for off in base..base + nr {
            self.swap.remove_slot(off);
        }
        self.set_folio_swap(folio, None);
        self.ref_sub(folio, nr as u32);
    }

    /// The end of the run of identical large folios holding `folio` when
    /// each of its folios is mapped whole by `mm` alone, once per page,
    /// with no other reference: the state in which a zap batch over one
    /// whole folio unmaps it and frees it, each the same way
    /// ([`PhysMem::unmap_free_large_span`]). `None` otherwise.
    /// Linux: mm/memory.c zap_present_folio_ptes() → folio_remove_rmap_ptes(),
    /// the gather's folio_put() (per folio).
    pub fn large_run_zappable(&self, folio: FolioRef, mm: Pid) -> Option<u64> {
        let (h, _, slot) = self.large.find(folio.head.0)?;
        let r = self.large.at(slot);
        let l = &r.folio;
        let nr = r.pages() as u32;
        let whole = h == folio.head.0
            && l.kind == FolioKind::Anon
            && l.swap.is_none()
            && l.refcount == nr
            && l.entire_mapcount == 0
            && l.large_mapcount == nr
            && l.nr_pages_mapped == nr
            && !l.partially_mapped
            && !l.on_deferred_list
            && l.mm_maps.len() == 1
            && l.mm_maps[0] == (mm, nr);
        whole.then(|| r.end())
    }

    /// What fork's copy of one whole large folio mapped by PTEs does to
    /// it, done to the `m` folios from the head `first` of one run at once
    /// (their record split off as one, changed once, joined again):
    /// every page loses PageAnonExclusive and gains a PTE mapping by
    /// `mm`, the folio gains `nr` references — the state
    /// `set_anon_exclusive_range(false)`, `add_rmap_ptes(nr, mm, false)`
    /// and `ref_add(nr)` of each folio leave. Uncounted: the caller adds
    /// the events of one folio's copy per folio. Returns false (nothing
    /// done) unless folio runs are on and the `m` folios lie in one run.
    /// Linux: include/linux/rmap.h folio_try_dup_anon_rmap_ptes(),
    /// folio_ref_add(), as mm/memory.c copy_present_ptes() calls them.
    pub fn dup_large_run_span(&mut self, first: Pfn, m: u64, mm: Pid) -> bool {
        if !self.large.runs {
            return false;
        }
        let Some(slot) = self.large.isolate_span(first.0, m) else {
            return false;
        };
        let l = &mut self.large.slab[slot as usize].folio;
        let n = l.nr();
        l.exclusive.update(0, n, n, |x, _| *x = false);
        let mut newly_mapped = 0;
        l.mapcount.update(0, n, n, |c, pages| {
            if *c == 0 {
                newly_mapped += pages;
            }
            *c += 1;
        });
        l.large_mapcount += n as u32;
        l.nr_pages_mapped += newly_mapped;
        Self::mm_map_delta(l, mm, n as i64);
        l.refcount += n as u32;
        self.large.settle(slot);
        true
    }

    /// What a zap batch over one whole large folio mapped by PTEs does to
    /// it when another mapping keeps every page mapped and a reference
    /// (exit of a forked child), done to the `m` folios from the head
    /// `first` of one run at once (their record split off as one, changed
    /// once, joined again): every page loses one PTE mapping, the folio
    /// loses `mm`'s `nr` mappings and `nr` references — the state
    /// `remove_rmap_ptes(nr, mm)` and `ref_sub(nr)` of each folio leave,
    /// no page left unmapped (so no deferred split) and none freed.
    /// Uncounted: the caller adds the events of one folio's batch per
    /// folio. Returns false (nothing done) unless folio runs are on, the
    /// `m` folios lie in one run, every page is mapped at least twice, the
    /// folio holds more than `nr` references and `mm` maps it `nr` times
    /// or more.
    /// Linux: mm/rmap.c folio_remove_rmap_ptes(), mm/swap.c
    /// folio_put_refs(), as mm/memory.c zap_present_folio_ptes() and the
    /// gather call them.
    pub fn unmap_shared_large_run_span(&mut self, first: Pfn, m: u64, mm: Pid) -> bool {
        if !self.large.runs {
            return false;
        }
        let Some((h, order, slot)) = self.large.find(first.0) else {
            return false;
        };
        let r = self.large.at(slot);
        let l = &r.folio;
        let n = l.nr();
        let stays_mapped = match &l.mapcount {
            PerPage::All(c) => *c >= 2,
            PerPage::Head(a, b) => *a >= 2 && *b >= 2,
            PerPage::Each(v) => v.iter().all(|c| *c >= 2),
        };
        let ok = h == first.0
            && first.0 + (m << order) <= r.end()
            && stays_mapped
            && l.refcount > n as u32
            && l.large_mapcount >= n as u32
            && l.mm_maps.iter().any(|&(p, c)| p == mm && c >= n as u32);
        if !ok {
            return false;
        }
        let Some(slot) = self.large.isolate_span(first.0, m) else {
            return false;
        };
        let l = &mut self.large.slab[slot as usize].folio;
        l.mapcount.update(0, n, n, |c, _| *c -= 1);
        l.large_mapcount -= n as u32;
        Self::mm_map_delta(l, mm, -(n as i64));
        l.refcount -= n as u32;
        self.large.settle(slot);
        true
    }

    /// [`PhysMem::unmap_free_large_span`] of the `m` folios from `first`
    /// (of `first`'s order), counted: each folio's zap batch over the
    /// whole folio, in the state [`PhysMem::large_run_zappable`] asks for,
    /// counts `folio_remove_rmap_ptes()`'s struct page lines (`nr`, `nr -
    /// 1` of them past the head) and atomics (each page's `_mapcount`,
    /// `_large_mapcount`, `_nr_pages_mapped`: `nr + 2`; no deferred split,
    /// as no page stays mapped), `folio_put_refs()`'s reference atomic and
    /// the folio's free, and the mTHP `nr_anon` statistic drops by one
    /// (the folio was not partially mapped) — what `remove_rmap_ptes()`,
    /// `ref_sub()` and `free_folio()` count for it, written out so that
    /// no first folio runs through them as the template. The folios done
    /// (0: nothing done or counted).
    /// Linux: mm/rmap.c __folio_remove_rmap(), mm/swap.c folios_put_refs(),
    /// mm/page_alloc.c free_frozen_pages() (per folio).
    /// The caller has just asked [`PhysMem::large_run_zappable`] of
    /// `first` and takes `m` within the run end it answered (nothing
    /// changed since), so the span is not checked again (issue 14).
    pub fn unmap_free_whole_large(&mut self, first: FolioRef, m: u64, mm: Pid) -> u64 {
        let done = self.unmap_free_span_in(first.head, m, mm, true);
        if done > 0 {
            let nr = first.nr_pages();
            self.hw.add(HwEvent::StructPageLine, nr * done);
            if nr > 1 {
                self.hw.add(HwEvent::StructPageLineLarge, (nr - 1) * done);
            }
            self.hw.add(HwEvent::MapcountAtomic, (nr + 2) * done);
            self.hw.add(HwEvent::FolioRefAtomic, done);
            self.hw.add(HwEvent::FolioFree, done);
            self.stats
                .mthp(first.order.0, MthpStat::NrAnon, -(done as i64));
        }
        done
    }

    /// Unmap and free the `m` large folios from the head `first`, of one
    /// run in the state [`PhysMem::large_run_zappable`] asks for, in one
    /// step: what a zap batch over each whole folio does to it (its
    /// pages' mapcounts, its mapping count and reference dropped to
    /// zero, then freed: out of the folio batches, its contents
    /// forgotten, its frames given back) with the records and the frames
    /// taken out at once. Uncounted: the caller adds the events and
    /// statistics of one such batch once per folio. 0 (nothing done)
    /// unless the folios are whole folios at either end of their run.
    /// Linux: mm/memory.c zap_present_folio_ptes(), mm/rmap.c
    /// folio_remove_rmap_ptes(), mm/swap.c folios_put_refs() (per folio).
    pub fn unmap_free_large_span(&mut self, first: Pfn, m: u64, mm: Pid) -> u64 {
        self.unmap_free_span_in(first, m, mm, false)
    }

    /// [`PhysMem::unmap_free_large_span`]; with `checked`, the caller
    /// has found the folios zappable ([`PhysMem::large_run_zappable`]
    /// of `first`, its run ending at or after the span) with nothing
    /// changed since: settling a pending record only joins it to
    /// identical neighbours, so the check would pass again.
    #[inline]
    fn unmap_free_span_in(&mut self, first: Pfn, m: u64, mm: Pid, checked: bool) -> u64 {
        self.large.settle_pending();
        let Some((h, order, slot)) = self.large.find(first.0) else {
            return 0;
        };
        let nr = 1u64 << order;
        let end = first.0 + m * nr;
        let folio = FolioRef {
            head: first,
            order: Order(order),
        };
        debug_assert!(!checked || self.large_run_zappable(folio, mm).is_some_and(|e| e >= end));
        if m == 0
            || h != first.0
            || (!checked && self.large_run_zappable(folio, mm).is_none_or(|e| e < end))
        {
            return 0;
        }
        let r = &self.large.slab[slot as usize];
        let (run_first, run_end) = (r.first, r.end());
        if run_first != first.0 && run_end != end {
            return 0;
        }
        self.folio_batches.forget_span(first, m, nr);
        self.large.last.set(None);
        if run_first == first.0 && run_end == end {
            self.large.drop_slot(slot);
        } else if run_first == first.0 {
            self.large.index.remove(run_first);
            let r = &mut self.large.slab[slot as usize];
            r.folio = r.folio_at(end);
            r.first = end;
            r.count -= m as u32;
            self.large.index.insert(end, slot);
        } else {
            self.large.slab[slot as usize].count -= m as u32;
        }
        self.large.folios -= m;
        self.contents.forget(first.0, m * nr);
        self.alloc.free_range(first, m * nr);
        m
    }

    fn free_folio(&mut self, folio: FolioRef) {
        if self.free_folio_meta(folio) {
            self.alloc.free(folio.head, folio.order);
        }
    }

    /// Everything [`PhysMem::free_folio`] does but giving the frames back
    /// to the allocator; false when the folio stays (the huge zero folio).
    fn free_folio_meta(&mut self, folio: FolioRef) -> bool {
        self.folio_batches.forget(folio.head);
        if Some(folio.head) != self.huge_zero {
            self.contents.forget(folio.head.0, folio.nr_pages());
        }
        if Some(folio.head) != self.huge_zero {
            self.hw.one(HwEvent::FolioFree);
        }
        if folio.order.0 == 0 {
            // An order-0 folio has no large record: what `large.remove()`
            // would do for it is settle the pending folio (no B-tree walk).
            debug_assert!(self.large.find(folio.head.0).is_none());
            self.large.settle_pending();
            self.memmap.set(folio.head, PageMeta::default());
        } else if let Some(l) = self.large.remove(&folio.head.0) {
            if l.kind == FolioKind::HugeZero {
                // The huge zero folio is never freed by unmapping (its
                // refcount is not tied to mappings); keep the record.
                self.large.insert(folio.head.0, l);
                return false;
            }
            self.stats.mthp(folio.order.0, MthpStat::NrAnon, -1);
            if l.partially_mapped {
                self.stats
                    .mthp(folio.order.0, MthpStat::NrAnonPartiallyMapped, -1);
            }
        } else {
            self.memmap.set(folio.head, PageMeta::default());
        }
        true
    }

    // ---- rmap -------------------------------------------------------------

    fn mm_map_delta(l: &mut LargeFolio, mm: Pid, delta: i64) {
        if let Some(pos) = l.mm_maps.iter().position(|&(p, _)| p == mm) {
            let n = l.mm_maps[pos].1 as i64 + delta;
            if n <= 0 {
                l.mm_maps.remove(pos);
            } else {
                l.mm_maps[pos].1 = n as u32;
            }
        } else if delta > 0 {
            l.mm_maps.push((mm, delta as u32));
        }
    }

    /// Map `nr` consecutive pages of `folio` starting at `first` with PTEs.
    /// With `exclusive`, the pages become PageAnonExclusive (a new folio, or
    /// a page that stays exclusive); otherwise the flag is left as is.
    /// Linux: mm/rmap.c folio_add_new_anon_rmap() / folio_add_anon_rmap_ptes().
    pub fn add_rmap_ptes(
        &mut self,
        folio: FolioRef,
        first: Pfn,
        nr: u32,
        mm: Pid,
        exclusive: bool,
    ) {
        // Events: one struct-page line per page (AnonExclusive, _mapcount).
        // A new exclusive mapping initialises the counts with plain stores
        // (folio_add_new_anon_rmap: atomic_set); adding to a mapped folio
        // increments each page's _mapcount (CONFIG_PAGE_MAPCOUNT=y) and,
        // for a large folio, _large_mapcount once per call.
        // Linux: mm/rmap.c folio_add_new_anon_rmap(), __folio_add_rmap(),
        // include/linux/rmap.h __folio_try_dup_anon_rmap().
        self.hw.struct_page_lines_batch(nr as u64, folio.is_large());
        if let Some(slot) = self.isolate_large(folio) {
            if !exclusive {
                self.hw.add(HwEvent::MapcountAtomic, nr as u64 + 1);
            }
            let l = &mut self.large.slab[slot as usize].folio;
            let (lo, n) = ((first.0 - folio.head.0) as usize, l.nr());
            let mut newly_mapped = 0;
            l.mapcount.update(lo, nr as usize, n, |m, pages| {
                if *m == 0 {
                    newly_mapped += pages;
                }
                *m += 1;
            });
            if exclusive {
                l.exclusive.update(lo, nr as usize, n, |x, _| *x = true);
            }
            l.large_mapcount += nr;
            l.nr_pages_mapped += newly_mapped;
            Self::mm_map_delta(l, mm, nr as i64);
            self.large.done(slot);
            return;
        }
        if !exclusive {
            self.hw.add(HwEvent::MapcountAtomic, nr as u64);
        }
        for i in 0..nr as u64 {
            self.memmap.update(first.add(i), |m| {
                m.bits += 1;
                if exclusive {
                    m.bits |= F_ANON_EXCLUSIVE;
                }
            });
        }
    }

    /// Map a whole folio with one PMD. Linux: folio_add_anon_rmap_pmd().
    pub fn add_rmap_pmd(&mut self, folio: FolioRef, mm: Pid, exclusive: bool) {
        // _entire_mapcount and _large_mapcount (atomic_set for a new folio).
        self.hw.one(HwEvent::StructPageLine);
        if !exclusive {
            self.hw.add(HwEvent::MapcountAtomic, 2);
        }
        if exclusive {
            self.set_anon_exclusive(folio.head, true);
        }
        self.update_large(folio, |l| {
            l.entire_mapcount += 1;
            l.large_mapcount += 1;
            Self::mm_map_delta(l, mm, 1);
        });
    }

    /// Unmap `nr` consecutive PTE-mapped pages, queueing the folio for
    /// deferred split when some page loses its last mapping while others
    /// stay mapped. Does not drop references (the caller does, after the TLB
    /// flush, as the kernel's mmu_gather does).
    /// Linux: mm/rmap.c __folio_remove_rmap(RMAP_LEVEL_PTE).
    pub fn remove_rmap_ptes(&mut self, folio: FolioRef, first: Pfn, nr: u32, mm: Pid) {
        // Per page: its _mapcount (atomic_add_negative); a large folio also
        // _large_mapcount and _nr_pages_mapped once per call.
        // Linux: mm/rmap.c __folio_remove_rmap(RMAP_LEVEL_PTE).
        self.hw.struct_page_lines_batch(nr as u64, folio.is_large());
        let Some(slot) = self.isolate_large(folio) else {
            self.hw.add(HwEvent::MapcountAtomic, nr as u64);
            for i in 0..nr as u64 {
                let pfn = first.add(i);
                self.memmap.update(pfn, |m| {
                    assert!(m.mapcount() > 0, "mapcount underflow at {pfn:?}");
                    // An unmapped page loses PageAnonExclusive only when
                    // freed or reused; the flag itself stays.
                    m.bits -= 1;
                });
            }
            return;
        };
        self.hw.add(HwEvent::MapcountAtomic, nr as u64 + 2);
        let l = &mut self.large.slab[slot as usize].folio;
        let (lo, n) = ((first.0 - folio.head.0) as usize, l.nr());
        let mut went_unmapped = 0;
        l.mapcount.update(lo, nr as usize, n, |m, pages| {
            assert!(*m > 0, "mapcount underflow in folio {:?}", folio.head);
            *m -= 1;
            if *m == 0 {
                went_unmapped += pages;
            }
        });
        l.large_mapcount -= nr;
        l.nr_pages_mapped -= went_unmapped;
        Self::mm_map_delta(l, mm, -(nr as i64));
        // Pages count as newly unmapped only while no PMD maps the folio.
        let nr_unmapped = if l.entire_mapcount > 0 {
            0
        } else {
            went_unmapped
        };
        let still_mapped = l.nr_pages_mapped > 0 || l.entire_mapcount > 0;
        let defer = nr_unmapped > 0 && still_mapped && l.kind == FolioKind::Anon;
        if defer {
            self.deferred_split_folio(folio, true);
        } else {
            self.large.done(slot);
        }
    }

    /// Remove one PMD mapping. Linux: __folio_remove_rmap(RMAP_LEVEL_PMD).
    pub fn remove_rmap_pmd(&mut self, folio: FolioRef, mm: Pid) {
        self.hw.one(HwEvent::StructPageLine);
        self.hw.add(HwEvent::MapcountAtomic, 2);
        let defer = self.update_large(folio, |l| {
            l.entire_mapcount -= 1;
            l.large_mapcount -= 1;
            Self::mm_map_delta(l, mm, -1);
            let nr = folio.nr_pages() as u32 - l.nr_pages_mapped;
            l.entire_mapcount == 0
                && l.kind == FolioKind::Anon
                && nr > 0
                && nr < folio.nr_pages() as u32
        });
        if defer {
            self.deferred_split_folio(folio, true);
        }
    }

    /// The folio-metadata half of splitting an anonymous large folio into
    /// order-0 folios, once no PMD maps it any more: every page becomes its
    /// own folio, keeps its PTE mapcount and PageAnonExclusive, and gets one
    /// reference per mapping; pages no PTE maps are freed. The folio leaves
    /// the deferred-split queue. Stats: `split` +1 for its size
    /// (`thp_split_page` +1 for PMD size), `nr_anon` −1, and
    /// `nr_anon_partially_mapped` −1 if it was partially mapped (checked
    /// live on 6.18.44 for 64 KiB and 2 MiB folios).
    /// Linux: mm/huge_memory.c __folio_split() → __split_unmapped_folio()
    /// (uniform split to order 0; refcounts set by folio_ref_unfreeze() and
    /// remap_page()), free_folio_and_swap_cache() for unmapped pieces,
    /// __folio_split()'s count_vm_event(THP_SPLIT_PAGE) and
    /// count_mthp_stat(order, MTHP_STAT_SPLIT).
    pub(crate) fn split_large_meta(&mut self, folio: FolioRef) {
        let l = self
            .large
            .remove(&folio.head.0)
            .expect("splitting a large folio");
        debug_assert_eq!(l.kind, FolioKind::Anon);
        debug_assert_eq!(l.entire_mapcount, 0, "PMD mappings are split first");
        let order = folio.order.0;
        if order == PMD_ORDER {
            self.stats.vm(VmEvent::ThpSplitPage, 1);
        }
        // __split_folio_to_order(): every new folio takes the head's
        // PG_swapbacked and PG_dirty.
        let folio_flags = l.flags & (F_LAZYFREE | F_DIRTY);
        self.stats.mthp(order, MthpStat::Split, 1);
        self.stats.mthp(order, MthpStat::NrAnon, -1);
        if l.partially_mapped {
            self.stats.mthp(order, MthpStat::NrAnonPartiallyMapped, -1);
        }
        for i in 0..folio.nr_pages() {
            let pfn = folio.head.add(i);
            let mapped = l.mapcount.get(i as usize);
            // A folio in the swap cache splits into small swap-cache folios,
            // each holding its own slot (__split_unmapped_folio() gives
            // every new folio its swap entry). A slot left without a swap
            // count is dropped with its cache entry, as the model does for
            // every order-0 swap-cache folio (crate::sys::swap).
            let mut cached = false;
            if let Some(base) = l.swap {
                if let Some(slot) = self.swap.slots.get_mut(&(base + i)) {
                    debug_assert_eq!(slot.cache, Some(folio.head));
                    if slot.count > 0 {
                        slot.cache = Some(pfn);
                        cached = true;
                    } else {
                        self.swap.remove_slot(base + i);
                    }
                }
            }
            if mapped == 0 && !cached {
                self.contents.forget(pfn.0, 1);
                self.alloc.free(pfn, Order::ZERO);
                continue;
            }
            let excl = if l.exclusive.get(i as usize) {
                F_ANON_EXCLUSIVE
            } else {
                0
            };
            self.memmap.set(
                pfn,
                PageMeta {
                    refcount: mapped + u32::from(cached),
                    bits: F_ALLOCATED | folio_flags | excl | mapped,
                },
            );
            self.memmap.set_tag(pfn, l.tags.get(i as usize));
        }
    }

    /// Whether the folio is in the swap cache (`folio_test_swapcache()`).
    pub fn in_swapcache(&self, folio: FolioRef) -> bool {
        self.swapcache_refs(folio) > 0
    }

    /// The references the swap cache holds on the folio: one per page
    /// (Linux: mm/swap_state.c swap_cache_add_folio() takes
    /// folio_nr_pages()), 0 when it is not cached.
    pub fn swapcache_refs(&self, folio: FolioRef) -> u32 {
        if folio.is_large() {
            match self.folio_swap(folio) {
                Some(_) => folio.nr_pages() as u32,
                None => 0,
            }
        } else {
            u32::from(self.swap.slot_caching(folio.head).is_some())
        }
    }

    /// The slot an order-0 folio holds in the swap cache, if any. The cache
    /// holds a reference of its own (add_to_swap_cache()), so a folio with
    /// no reference beyond its mappings is not cached and the scan of the
    /// slots is skipped (what `--check-invariants` recomputes: refcount =
    /// mappings + batch references + the cache's).
    pub fn small_slot_caching(&self, folio: FolioRef) -> Option<u64> {
        debug_assert!(!folio.is_large());
        if self.refcount(folio) <= self.folio_mapcount(folio) {
            return None;
        }
        self.swap.slot_caching(folio.head)
    }

    /// `folio->swap` of a large folio in the swap cache.
    pub fn folio_swap(&self, folio: FolioRef) -> Option<u64> {
        self.large.get(&folio.head.0).and_then(|l| l.swap)
    }

    /// Put a large folio into the swap cache at `swap` (its first slot), or
    /// take it out (`None`).
    pub(crate) fn set_folio_swap(&mut self, folio: FolioRef, swap: Option<u64>) {
        self.update_large(folio, |l| l.swap = swap);
    }

    /// Queue a folio for deferred split. A folio in the swap cache is not
    /// queued (reclaim is already handling it): try_to_unmap_one() unmapping
    /// a large folio PTE by PTE leaves it partially mapped for a while, and
    /// that moves no `split_deferred`.
    /// Linux: mm/huge_memory.c deferred_split_folio() (the
    /// folio_test_swapcache() exclusion).
    pub fn deferred_split_folio(&mut self, folio: FolioRef, partially_mapped: bool) {
        let order = folio.order.0;
        let newly_partial = self.update_large(folio, |l| {
            if l.swap.is_some() {
                return false;
            }
            l.on_deferred_list = true;
            let newly = partially_mapped && !l.partially_mapped;
            l.partially_mapped |= partially_mapped;
            newly
        });
        if newly_partial {
            if order == PMD_ORDER {
                self.stats.vm(VmEvent::ThpDeferredSplitPage, 1);
            }
            self.stats.mthp(order, MthpStat::SplitDeferred, 1);
            self.stats.mthp(order, MthpStat::NrAnonPartiallyMapped, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`FRESH_MAPS_CAP`] is what a record's first mapping allocates.
    #[test]
    fn fresh_maps_capacity() {
        let mut v: Vec<(Pid, u32)> = Vec::new();
        v.push((1, 16));
        assert_eq!(v.capacity(), FRESH_MAPS_CAP);
    }

    /// The small form of [`RunIndex`] answers every query as the B-tree
    /// does, through growing past [`INDEX_SMALL_MAX`] into the B-tree
    /// form and shrinking again: random inserts (new heads, replaced
    /// slots, heads above and below every other), removes (present and
    /// absent) and the three searches, over 80 heads, 20 seeds.
    #[test]
    fn run_index_answers_as_a_btree() {
        for seed in 0..20u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut small = RunIndex::new(true);
            let mut big = RunIndex::new(false);
            let mut plain = std::collections::BTreeMap::new();
            let mut grew = false;
            for step in 0..4000 {
                // Mostly inserts early on, mostly removes later.
                let k = (next() % 80) * 16;
                let insert = next() % 100 < if step < 2000 { 70 } else { 30 };
                if insert {
                    let slot = (next() % 1000) as u32;
                    small.insert(k, slot);
                    big.insert(k, slot);
                    plain.insert(k, slot);
                } else {
                    small.remove(k);
                    big.remove(k);
                    plain.remove(&k);
                }
                grew |= matches!(small, RunIndex::Big(_));
                let q = next() % (81 * 16);
                for ix in [&small, &big] {
                    assert_eq!(ix.len(), plain.len(), "seed {seed} step {step}");
                    assert_eq!(
                        ix.at_or_before(q),
                        plain.range(..=q).next_back().map(|(&k, &s)| (k, s))
                    );
                    assert_eq!(ix.before(q), plain.range(..q).next_back().map(|(_, &s)| s));
                    assert_eq!(ix.get(q), plain.get(&q).copied());
                    if step % 97 == 0 {
                        let all: Vec<(u64, u32)> = plain.iter().map(|(&k, &s)| (k, s)).collect();
                        assert_eq!(ix.iter().collect::<Vec<_>>(), all);
                        assert_eq!(format!("{ix:?}"), format!("{plain:?}"));
                    }
                }
            }
            assert!(grew, "seed {seed}: the small form grew into the B-tree");
        }
        // The small form stays a vector while it holds few runs.
        let mut ix = RunIndex::new(true);
        for k in 0..INDEX_SMALL_MAX as u64 {
            ix.insert(k, k as u32);
        }
        assert!(matches!(ix, RunIndex::Small(_)));
        ix.insert(1000, 0);
        assert!(matches!(ix, RunIndex::Big(_)));
    }

    /// The seed's round on the folio records: a run of 16 order-4 folios
    /// made mapped, then zapped whole, again and again. With
    /// `folio_record_reuse` the second and later runs take the freed
    /// slot's mappings buffer (the same allocation each time) and the
    /// records and `metadata_bytes()` are exactly those without it; a
    /// slot whose buffer is not a fresh one's is not taken from.
    #[test]
    fn recycled_slot_counts_as_a_fresh_one() {
        let mut seen = Vec::new();
        for reuse in [true, false] {
            let mut pm = PhysMem::new(1 << 16);
            pm.set_folio_record_reuse(reuse);
            let mut bytes = Vec::new();
            let mut bufs = Vec::new();
            for round in 0..4u64 {
                let (first, n) = pm
                    .alloc_anon_run_mapped(Order(4), 16, 1, round * 7, 1)
                    .unwrap();
                assert_eq!(n, 16);
                let (_, _, slot) = pm.large.find(first.0).unwrap();
                let maps = &pm.large.at(slot).folio.mm_maps;
                assert_eq!(maps.capacity(), FRESH_MAPS_CAP);
                bufs.push(maps.as_ptr() as usize);
                bytes.push((pm.metadata_bytes(), pm.large_records()));
                let l = pm.large(first).unwrap();
                assert_eq!((l.mm_maps.clone(), l.large_mapcount), (vec![(1, 16)], 16));
                assert_eq!(pm.unmap_free_large_span(first, 16, 1), 16);
                bytes.push((pm.metadata_bytes(), pm.large_records()));
            }
            if reuse {
                assert!(
                    bufs.windows(2).all(|w| w[0] == w[1]),
                    "the freed slot's buffer taken again: {bufs:x?}"
                );
            }
            seen.push(bytes);
        }
        assert_eq!(seen[0], seen[1]);
        // A free slot holding a grown buffer is not taken from.
        let mut pm = PhysMem::new(1 << 16);
        let (first, _) = pm.alloc_anon_run_mapped(Order(4), 16, 1, 0, 1).unwrap();
        let (_, _, slot) = pm.large.find(first.0).unwrap();
        pm.large.slab[slot as usize].folio.mm_maps.reserve(8);
        let grown = pm.large.at(slot).folio.mm_maps.capacity();
        assert!(grown > FRESH_MAPS_CAP);
        assert_eq!(pm.unmap_free_large_span(first, 16, 1), 16);
        assert_eq!(pm.large.recycled_maps().capacity(), 0);
        assert_eq!(pm.large.at(slot).folio.mm_maps.capacity(), grown);
    }

    #[test]
    fn partial_unmap_defers_split_once_and_free_clears() {
        let mut pm = PhysMem::new(1 << 16);
        let f = pm.alloc_anon_folio(Order(4)).unwrap();
        pm.add_rmap_ptes(f, f.head, 16, 1, true);
        pm.ref_add(f, 16);
        assert_eq!(pm.stats.get_mthp(4, MthpStat::NrAnon), 1);
        pm.remove_rmap_ptes(f, f.head.add(4), 4, 1);
        pm.ref_sub(f, 4);
        assert_eq!(pm.stats.get_mthp(4, MthpStat::SplitDeferred), 1);
        pm.remove_rmap_ptes(f, f.head.add(8), 1, 1);
        pm.ref_sub(f, 1);
        assert_eq!(
            pm.stats.get_mthp(4, MthpStat::SplitDeferred),
            1,
            "counted once per folio"
        );
        assert_eq!(pm.stats.get_mthp(4, MthpStat::NrAnonPartiallyMapped), 1);
        let rest: Vec<u64> = (0..16).filter(|i| !(4..=8).contains(i)).collect();
        for i in rest {
            pm.remove_rmap_ptes(f, f.head.add(i), 1, 1);
            pm.ref_sub(f, 1);
        }
        assert!(pm.folio_of(f.head).is_none());
        assert_eq!(pm.stats.get_mthp(4, MthpStat::NrAnon), 0);
        assert_eq!(pm.stats.get_mthp(4, MthpStat::NrAnonPartiallyMapped), 0);
    }

    #[test]
    fn whole_unmap_does_not_defer() {
        let mut pm = PhysMem::new(1 << 16);
        let f = pm.alloc_anon_folio(Order(4)).unwrap();
        pm.add_rmap_ptes(f, f.head, 16, 1, true);
        pm.ref_add(f, 16);
        pm.remove_rmap_ptes(f, f.head, 16, 1);
        assert_eq!(pm.stats.get_mthp(4, MthpStat::SplitDeferred), 0);
        pm.ref_sub(f, 16);
        assert_eq!(pm.frames_allocated(), 1, "only the zero page remains");
    }

    #[test]
    fn whole_folio_updates_keep_one_run() {
        let mut pm = PhysMem::new(1 << 16);
        let f = pm.alloc_anon_folio(Order::PMD).unwrap();
        pm.add_rmap_ptes(f, f.head, 512, 1, true);
        pm.add_rmap_ptes(f, f.head, 512, 2, false);
        pm.set_tags(f.head, 512, 0x7f00_0000_0000, 4096);
        pm.set_anon_exclusive_range(f.head, 512, false);
        let l = pm.large(f.head).unwrap();
        assert_eq!(l.mapcount, PerPage::All(2));
        assert_eq!(l.exclusive, PerPage::All(false));
        assert_eq!(pm.tag(f.head.add(3)), 0x7f00_0000_3000);
        assert_eq!(
            l.bytes(),
            std::mem::size_of::<LargeFolio>() + l.mm_maps.capacity() * 8
        );
        // One page on its own gives every page a slot; the same change
        // undone on the whole folio makes it one run again.
        pm.remove_rmap_ptes(f, f.head.add(7), 1, 2);
        assert!(matches!(
            pm.large(f.head).unwrap().mapcount,
            PerPage::Each(_)
        ));
        assert_eq!(pm.page_mapcount(f.head.add(7)), 1);
        assert_eq!(pm.page_mapcount(f.head.add(8)), 2);
        pm.remove_rmap_ptes(f, f.head, 7, 2);
        pm.remove_rmap_ptes(f, f.head.add(8), 504, 2);
        pm.remove_rmap_ptes(f, f.head, 512, 1);
        assert_eq!(pm.large(f.head).unwrap().mapcount, PerPage::All(0));
    }

    #[test]
    fn page_by_page_writes_become_one_tag_run() {
        let mut pm = PhysMem::new(1 << 16);
        let f = pm.alloc_anon_folio(Order(4)).unwrap();
        for i in 0..16 {
            pm.set_tag(f.head.add(i), 0x1000 + i * 4096);
            assert_eq!(pm.tag(f.head.add(i)), 0x1000 + i * 4096);
        }
        assert_eq!(
            pm.large(f.head).unwrap().tags,
            Tags::Affine {
                base: 0x1000,
                step: 4096
            }
        );
    }

    #[test]
    fn memmap_sections_come_and_go() {
        let mut pm = PhysMem::new(1 << 16);
        let base = pm.metadata_bytes();
        let pages: Vec<_> = (0..600)
            .map(|_| pm.alloc_anon_folio(Order::ZERO).unwrap())
            .collect();
        assert!(pm.metadata_bytes() >= base + std::mem::size_of::<Section>());
        for p in pages {
            pm.ref_add(p, 1);
            pm.ref_sub(p, 1);
        }
        assert_eq!(pm.memmap.live, 1, "only the zero page's section stays");
        assert_eq!(pm.small_folios().count(), 0);
    }

    #[test]
    fn precise_mapcount_includes_pmd_maps() {
        let mut pm = PhysMem::new(1 << 16);
        let f = pm.alloc_anon_folio(Order::PMD).unwrap();
        pm.add_rmap_pmd(f, 1, true);
        pm.ref_add(f, 1);
        assert_eq!(pm.precise_mapcount(f.head.add(7)), 1);
        pm.add_rmap_ptes(f, f.head.add(7), 1, 2, false);
        assert_eq!(pm.precise_mapcount(f.head.add(7)), 2);
        assert_eq!(pm.folio_mapcount(f), 2);
        assert!(pm.mapped_by_other_mm(f, 1));
    }
}

/// Run storage ≡ per-page storage: random rmap, tag, exclusivity, split
/// and free operations on folios of every order give the same per-page
/// answers as a plain per-page reference.
#[cfg(test)]
mod storage_prop {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        Map {
            f: usize,
            lo: u64,
            nr: u64,
            mm: Pid,
            excl: bool,
        },
        Unmap {
            f: usize,
            lo: u64,
            nr: u64,
        },
        Tags {
            f: usize,
            lo: u64,
            nr: u64,
            base: u64,
            step: u64,
        },
        Excl {
            f: usize,
            lo: u64,
            nr: u64,
            on: bool,
        },
        Split {
            f: usize,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let f = 0usize..6;
        prop_oneof![
            (f.clone(), 0u64..600, 1u64..600, 1u32..3, any::<bool>()).prop_map(
                |(f, lo, nr, mm, excl)| Op::Map {
                    f,
                    lo,
                    nr,
                    mm,
                    excl
                }
            ),
            (f.clone(), 0u64..600, 1u64..600).prop_map(|(f, lo, nr)| Op::Unmap { f, lo, nr }),
            (
                f.clone(),
                0u64..600,
                1u64..600,
                0u64..1 << 20,
                prop_oneof![Just(0u64), Just(4096)]
            )
                .prop_map(|(f, lo, nr, base, step)| Op::Tags {
                    f,
                    lo,
                    nr,
                    base,
                    step
                }),
            (f.clone(), 0u64..600, 1u64..600, any::<bool>()).prop_map(|(f, lo, nr, on)| Op::Excl {
                f,
                lo,
                nr,
                on
            }),
            // One page, the head as often as not (PMD mappings set the
            // head's flag alone).
            (f.clone(), prop_oneof![Just(0u64), 0u64..600], any::<bool>())
                .prop_map(|(f, lo, on)| Op::Excl { f, lo, nr: 1, on }),
            f.prop_map(|f| Op::Split { f }),
        ]
    }

    /// The reference: one record per page.
    #[derive(Default, Clone, Copy, PartialEq, Debug)]
    struct Page {
        map: u32,
        tag: u64,
        excl: bool,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn runs_equal_per_page(ops in proptest::collection::vec(op(), 1..40)) {
            let mut pm = PhysMem::new(1 << 16);
            let orders = [0u8, 2, 4, 4, 9, 0];
            let mut folios: Vec<FolioRef> = orders
                .iter()
                .map(|o| pm.alloc_anon_folio(Order(*o)).unwrap())
                .collect();
            let mut split = vec![false; folios.len()];
            let mut reference: HashMap<u64, Page> = HashMap::new();
            for op in ops {
                // Clip a range to the folio (a split folio is left alone).
                let clip = |f: FolioRef, lo: u64, nr: u64| {
                    let n = f.nr_pages();
                    let lo = lo % n;
                    (lo, nr.min(n - lo))
                };
                match op {
                    Op::Map { f, lo, nr, mm, excl } if !split[f] => {
                        let fo = folios[f];
                        let (lo, nr) = clip(fo, lo, nr);
                        pm.add_rmap_ptes(fo, fo.head.add(lo), nr as u32, mm, excl);
                        pm.ref_add(fo, nr as u32);
                        for k in lo..lo + nr {
                            let p = reference.entry(fo.head.0 + k).or_default();
                            p.map += 1;
                            p.excl |= excl;
                        }
                    }
                    Op::Unmap { f, lo, nr } if !split[f] => {
                        let fo = folios[f];
                        let (lo, nr) = clip(fo, lo, nr);
                        // Only pages that are mapped, and never the last
                        // reference (a freed folio leaves the test).
                        let ok = (lo..lo + nr)
                            .all(|k| reference.get(&(fo.head.0 + k)).is_some_and(|p| p.map > 0));
                        if ok && pm.refcount(fo) > nr as u32 {
                            pm.remove_rmap_ptes(fo, fo.head.add(lo), nr as u32, 1);
                            pm.ref_sub(fo, nr as u32);
                            for k in lo..lo + nr {
                                reference.get_mut(&(fo.head.0 + k)).unwrap().map -= 1;
                            }
                        }
                    }
                    Op::Tags { f, lo, nr, base, step } if !split[f] => {
                        let fo = folios[f];
                        let (lo, nr) = clip(fo, lo, nr);
                        pm.set_tags(fo.head.add(lo), nr, base, step);
                        for k in 0..nr {
                            reference.entry(fo.head.0 + lo + k).or_default().tag = base + k * step;
                        }
                    }
                    Op::Excl { f, lo, nr, on } if !split[f] => {
                        let fo = folios[f];
                        let (lo, nr) = clip(fo, lo, nr);
                        pm.set_anon_exclusive_range(fo.head.add(lo), nr, on);
                        for k in lo..lo + nr {
                            reference.entry(fo.head.0 + k).or_default().excl = on;
                        }
                    }
                    Op::Split { f } if !split[f] && folios[f].is_large() => {
                        let fo = folios[f];
                        // Only a folio whose every page is mapped (pages
                        // nobody maps would be freed).
                        let all = (0..fo.nr_pages())
                            .all(|k| reference.get(&(fo.head.0 + k)).is_some_and(|p| p.map > 0));
                        if all {
                            pm.split_large_meta(fo);
                            split[f] = true;
                        }
                    }
                    _ => {}
                }
                for (i, fo) in folios.iter_mut().enumerate() {
                    if split[i] {
                        continue;
                    }
                    for k in 0..fo.nr_pages() {
                        let pfn = fo.head.add(k);
                        let want = reference.get(&pfn.0).copied().unwrap_or_default();
                        let got = Page {
                            map: pm.page_mapcount(pfn),
                            tag: pm.tag(pfn),
                            excl: pm.anon_exclusive(pfn),
                        };
                        prop_assert_eq!(got, want, "folio {} page {}", i, k);
                        // The run query: one lookup, the per-page answer.
                        let max = fo.nr_pages() - k;
                        let (x, n) = pm.anon_exclusive_run(pfn, max);
                        prop_assert_eq!(x, want.excl);
                        let same = (k..fo.nr_pages())
                            .take_while(|&j| {
                                reference.get(&(fo.head.0 + j)).copied().unwrap_or_default().excl
                                    == want.excl
                            })
                            .count() as u64;
                        prop_assert_eq!(n, same, "run from folio {} page {}", i, k);
                    }
                    if fo.is_large() {
                        let l = pm.large(fo.head).unwrap();
                        let mapped = (0..fo.nr_pages())
                            .filter(|k| reference.get(&(fo.head.0 + k)).is_some_and(|p| p.map > 0))
                            .count() as u32;
                        prop_assert_eq!(l.nr_pages_mapped, mapped);
                    }
                }
                // Split folios: every page is an order-0 folio with the
                // same state.
                for (i, fo) in folios.iter().enumerate() {
                    if !split[i] {
                        continue;
                    }
                    for k in 0..fo.nr_pages() {
                        let pfn = fo.head.add(k);
                        let want = reference[&pfn.0];
                        prop_assert_eq!(pm.folio_of(pfn).map(|f| f.order.0), Some(0));
                        prop_assert_eq!(pm.page_mapcount(pfn), want.map);
                        prop_assert_eq!(pm.tag(pfn), want.tag);
                        prop_assert_eq!(pm.anon_exclusive(pfn), want.excl);
                        prop_assert_eq!(pm.refcount(FolioRef { head: pfn, order: Order::ZERO }), want.map);
                    }
                }
            }
        }
    }
}

/// The order-0 run forms ≡ their single forms: on a random mix of order-0
/// anon pages (refcounts and mapcounts from 0 to past the one-byte escape,
/// pages one put from being freed, the zero page), page-table pages, a
/// large folio and free frames, across section boundaries,
/// `try_dup_small_anon_run()` and `unmap_put_small_run()` over a random
/// frame sequence stop at the same frame and leave the same memmap, the
/// same free frames and the same events as `try_dup_small_anon()`, or
/// `folio_of()` + `unmap_put_small()`, frame by frame.
#[cfg(test)]
mod small_runs_prop {
    use super::*;
    use proptest::prelude::*;

    /// What a page of the mix gets: `maps` PTE mappings and `refs` extra
    /// references (order-0 anon pages only).
    #[derive(Clone, Debug)]
    struct Page {
        maps: u32,
        refs: u32,
    }

    fn page() -> impl Strategy<Value = Page> {
        (
            prop_oneof![Just(0u32), 1..4u32, 252..258u32],
            prop_oneof![Just(0u32), 1..3u32, 250..258u32],
        )
            .prop_map(|(maps, refs)| Page { maps, refs })
    }

    /// A physical memory with, from its first frames on: `pages` order-0
    /// anon pages (every `pt_every`th allocation a page-table page, one
    /// order-2 folio after the first 3 pages), then their frames in
    /// allocation order, with some freed again.
    fn build(pages: &[Page], pt_every: usize, free_every: usize) -> (PhysMem, Vec<Pfn>) {
        let mut pm = PhysMem::new(1 << 16);
        let mut frames = vec![pm.zero_pfn];
        for (k, p) in pages.iter().enumerate() {
            if k == 3 {
                let f = pm.alloc_anon_folio(Order(2)).unwrap();
                pm.add_rmap_ptes(f, f.head, 4, 1, true);
                pm.ref_add(f, 4);
                frames.extend((0..4).map(|i| f.head.add(i)));
            }
            if pt_every > 0 && k % pt_every == pt_every - 1 {
                frames.push(pm.alloc_pt_page().unwrap());
            }
            let f = pm.alloc_anon_folio(Order::ZERO).unwrap();
            if p.maps > 0 {
                pm.add_rmap_ptes(f, f.head, 1, 1, true);
                for _ in 1..p.maps {
                    pm.memmap.update(f.head, |m| m.bits += 1);
                }
            }
            pm.memmap.update(f.head, |m| m.refcount += p.refs);
            frames.push(f.head);
            if free_every > 0 && k % free_every == free_every - 1 && p.maps == 0 {
                // A frame freed again: no meta, maybe a section gone.
                let r = pm.refcount(f);
                pm.ref_sub(f, r);
            }
        }
        (pm, frames)
    }

    fn same(a: &PhysMem, b: &PhysMem) -> Result<(), TestCaseError> {
        let ma: Vec<_> = a.memmap.iter().collect();
        let mb: Vec<_> = b.memmap.iter().collect();
        prop_assert_eq!(ma, mb);
        prop_assert_eq!(a.memmap.live, b.memmap.live);
        prop_assert_eq!(
            format!("{:?}", a.hw.snapshot()),
            format!("{:?}", b.hw.snapshot())
        );
        let (mut a, mut b) = (a.clone(), b.clone());
        // The same free frames: the allocator hands out the same ones.
        for _ in 0..8 {
            prop_assert_eq!(
                a.alloc_anon_folio(Order::ZERO).map(|f| f.head),
                b.alloc_anon_folio(Order::ZERO).map(|f| f.head)
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn runs_equal_single_forms(
            pages in proptest::collection::vec(page(), 1..700),
            pt_every in 0..40usize,
            free_every in 0..9usize,
            picks in proptest::collection::vec(0..2000usize, 0..900),
            in_order in any::<bool>(),
            dup in any::<bool>(),
        ) {
            let (pm, frames) = build(&pages, pt_every, free_every);
            // Frames in allocation order (one run from a random start), or
            // picked at random (sections in any order).
            let seq: Vec<Pfn> = if in_order {
                let from = picks.first().map_or(0, |&p| p % frames.len());
                frames[from..].to_vec()
            } else {
                picks.iter().map(|&p| frames[p % frames.len()]).collect()
            };
            let (mut run, mut one) = (pm.clone(), pm);
            if dup {
                let n = run.try_dup_small_anon_run(|k| seq.get(k).copied());
                let mut m = 0;
                while m < seq.len() && one.try_dup_small_anon(seq[m]) {
                    m += 1;
                }
                prop_assert_eq!(n, m);
            } else {
                // A frame already put to zero is not a data page any more;
                // a mapcount or refcount underflow panics in both forms, so
                // the sequence stops before the first frame whose counts
                // would not allow the put.
                let mut maps: std::collections::HashMap<Pfn, (u32, u32)> = Default::default();
                let mut ok = 0;
                for &p in &seq {
                    let m = one.memmap.get(p);
                    let e = maps.entry(p).or_insert((m.mapcount(), m.refcount));
                    if e.0 == 0 || e.1 == 0 {
                        break;
                    }
                    e.0 -= 1;
                    e.1 -= 1;
                    ok += 1;
                }
                let seq = &seq[..ok];
                let n = run.unmap_put_small_run(|k| seq.get(k).copied());
                let mut m = 0;
                while m < seq.len() {
                    match one.folio_of(seq[m]) {
                        Some(f) if !f.is_large() => one.unmap_put_small(f),
                        _ => break,
                    }
                    m += 1;
                }
                prop_assert_eq!(n, m);
            }
            same(&run, &one)?;
        }
    }
}

/// Memmap section storage ≡ one plain `(tag, refcount, bits)` per frame:
/// random tag writes (in runs, alone, to zero) and refcounts around the
/// one-byte escape give the same answers, and the tag runs stay sorted,
/// disjoint and non-empty.
#[cfg(test)]
mod section_prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Tags `base + k × step` on frames `[i, i + n)`.
        Tags {
            i: u16,
            n: u16,
            base: u64,
            step: u64,
        },
        /// One tag from a small set (0 included), so runs meet and split.
        Tag {
            i: u16,
            tag: u64,
        },
        Meta {
            i: u16,
            refcount: u32,
            bits: u32,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0..512u16,
                1..64u16,
                0..4u64,
                prop_oneof![Just(0u64), Just(1), Just(4096)]
            )
                .prop_map(|(i, n, b, step)| Op::Tags {
                    i,
                    n: n.min(512 - i),
                    base: b * 4096,
                    step
                }),
            (0..512u16, 0..4u64).prop_map(|(i, t)| Op::Tag { i, tag: t * 4096 }),
            (
                0..512u16,
                prop_oneof![0..4u32, 250..260u32, Just(u32::MAX)],
                0..4u32
            )
                .prop_map(|(i, refcount, b)| Op::Meta {
                    i,
                    refcount,
                    bits: b << 29
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn section_equals_per_frame(ops in proptest::collection::vec(op(), 1..120)) {
            let mut sec = Section::new();
            let mut tags = [0u64; SECTION_FRAMES as usize];
            let mut metas = [PageMeta::default(); SECTION_FRAMES as usize];
            for op in ops {
                match op {
                    Op::Tags { i, n, base, step } => {
                        for k in 0..n {
                            let t = base.wrapping_add(step.wrapping_mul(u64::from(k)));
                            sec.tags.set(i + k, t);
                            tags[(i + k) as usize] = t;
                        }
                    }
                    Op::Tag { i, tag } => {
                        sec.tags.set(i, tag);
                        tags[i as usize] = tag;
                    }
                    Op::Meta { i, refcount, bits } => {
                        let m = PageMeta { refcount, bits };
                        sec.put(i as usize, m);
                        metas[i as usize] = m;
                    }
                }
                if let SectionTags::Runs(runs) = &sec.tags {
                    prop_assert!(runs.len() <= MAX_TAG_RUNS);
                    for w in runs.windows(2) {
                        prop_assert!(w[0].end() <= w[1].start, "runs sorted and disjoint: {:?}", runs);
                    }
                    prop_assert!(runs.iter().all(|r| r.len > 0 && r.end() <= SECTION_FRAMES as u16));
                }
                for i in 0..SECTION_FRAMES as u16 {
                    prop_assert_eq!(sec.tags.get(i), tags[i as usize], "tag of frame {}", i);
                    prop_assert_eq!(sec.get(i as usize), metas[i as usize], "meta of frame {}", i);
                }
            }
        }
    }

    #[test]
    fn in_order_tags_are_one_run() {
        let mut sec = Section::new();
        for i in 0..SECTION_FRAMES as u16 {
            sec.tags.set(i, 0x7f00_0000_0000 + u64::from(i) * 4096);
        }
        match &sec.tags {
            SectionTags::Runs(r) => assert_eq!(r.len(), 1),
            SectionTags::Dense(_) => panic!("dense"),
        }
        // A page written alone splits its run in three; writing it back joins them.
        sec.tags.set(7, 1);
        assert!(matches!(&sec.tags, SectionTags::Runs(r) if r.len() == 3));
        sec.tags.set(7, 0x7f00_0000_0000 + 7 * 4096);
        assert!(matches!(&sec.tags, SectionTags::Runs(r) if r.len() == 1));
    }
}

/// The per-CPU folio batches that hold folio references until drained:
/// the LRU-add batch (mm/swap.c `cpu_fbatches.lru_add`: every new folio
/// faulted into an ordinary VMA waits there before it is on an LRU) and the
/// mlock batch (mm/mlock.c `mlock_fbatch`: mlock_folio(), munlock_folio(),
/// mlock_new_folio()). Each holds a folio reference (`folio_get()`) until it
/// is drained: when it fills (FOLIO_BATCH_SIZE = 31 entries; a full LRU-add
/// batch moves only itself), at once for a large folio, or by
/// `lru_add_drain()` (both batches). The references matter to
/// copy-on-write: `wp_can_reuse_anon_folio()` drains only for a folio not on
/// an LRU, so a folio that is on one (a munlocked folio sits on the
/// unevictable LRU) keeps the mlock batch's reference and is copied
/// (docs/divergences.md, D1). Live workers are pinned to one CPU, so one
/// set of batches serves every process of a scenario.
///
/// Which operations drain was checked on 6.18.44 with probe scenarios (a
/// munlocked page's child write reuses the page iff the batches were drained
/// in between): mlock()/mlock2()/munlock() when VM_LOCKED changes
/// (mm/mlock.c mlock_vma_pages_range()), every population (mm/gup.c
/// populate_vma_page_range()), MADV_COLD/MADV_PAGEOUT, a copy-on-write fault
/// on a folio not yet on an LRU, fork() (the live harness's workers drain
/// after a fork on purpose), and a full mlock batch (the 31st entry) do;
/// munmap, MADV_DONTNEED, mprotect, mremap, MAP_FIXED over a mapping, exit
/// of another process and fresh faults do not.
#[derive(Clone, Debug, Default)]
pub struct FolioBatches {
    /// The mlock batch: (head, new — not yet on an LRU); `None` once the
    /// model freed the folio (the kernel's reference would keep it; the
    /// entry still takes a slot).
    entries: Vec<Option<(Pfn, bool)>>,
    /// The LRU-add batch (folios not yet on an LRU), `None` as above.
    lru_add: Vec<Option<Pfn>>,
    /// The lazyfree batch (mm/swap.c `cpu_fbatches.lru_lazyfree`): folios
    /// MADV_FREE marked, still PG_swapbacked until the batch is moved, and
    /// still on their LRU meanwhile (6.18's folio_batch_add_and_move() no
    /// longer clears PG_lru; folio_mark_lazyfree() skips a folio not on an
    /// LRU), so a copy-on-write fault does not drain for them (checked
    /// live: tests/scenarios/free-08-shared-cow-keeps-batch.ptl); `None`
    /// as above.
    lazyfree: Vec<Option<Pfn>>,
}

/// FOLIO_BATCH_SIZE (include/linux/pagevec.h).
const FOLIO_BATCH_SIZE: usize = 31;

impl FolioBatches {
    /// Queue `folio` (Linux: mm/mlock.c mlock_folio(), munlock_folio(),
    /// mlock_new_folio() → mlock_folio_batch() when the batch is full or the
    /// folio is large).
    pub fn add(&mut self, head: Pfn, large: bool, new: bool) {
        if large {
            self.drain();
            return;
        }
        self.entries.push(Some((head, new)));
        if self.entries.len() >= FOLIO_BATCH_SIZE {
            self.drain();
        }
    }

    /// A new folio mapped into an ordinary VMA: folio_add_lru() →
    /// folio_batch_add_and_move() (a large folio or the 31st entry moves
    /// the LRU-add batch, not the mlock batch).
    pub fn lru_add(&mut self, head: Pfn, large: bool) {
        if large {
            self.lru_add.clear();
            return;
        }
        self.lru_add.push(Some(head));
        if self.lru_add.len() >= FOLIO_BATCH_SIZE {
            self.lru_add.clear();
        }
    }

    /// folio_mark_lazyfree() → folio_batch_add_and_move(lru_lazyfree):
    /// a large folio or the 31st entry moves the lazyfree batch.
    pub fn lazyfree_add(&mut self, head: Pfn, large: bool) {
        self.lazyfree.push(Some(head));
        if large || self.lazyfree.len() >= FOLIO_BATCH_SIZE {
            self.lazyfree.clear();
        }
    }

    /// Whether the folio at `head` waits in the lazyfree batch.
    pub fn lazyfree_pending(&self, head: Pfn) -> bool {
        self.lazyfree.contains(&Some(head))
    }

    /// `lru_add_drain()`: the LRU-add batch (and the lazyfree batch,
    /// lru_add_drain_cpu()), then `mlock_drain_local()`.
    pub fn drain(&mut self) {
        self.lru_add.clear();
        self.lazyfree.clear();
        self.entries.clear();
    }

    /// References the LRU-add and lazyfree batches hold on the folio at
    /// `head`.
    pub fn lru_add_refs(&self, head: Pfn) -> u32 {
        (self.lru_add.iter().filter(|e| **e == Some(head)).count()
            + self.lazyfree.iter().filter(|e| **e == Some(head)).count()) as u32
    }

    /// Whether the folio at `head` is not on an LRU yet: queued new in the
    /// mlock batch or in the LRU-add batch (a folio in the lazyfree batch
    /// stays on its LRU).
    pub fn off_lru(&self, head: Pfn) -> bool {
        self.queued_new(head) || self.lru_add.contains(&Some(head))
    }

    /// References the batch holds on the folio at `head`.
    pub fn refs(&self, head: Pfn) -> u32 {
        self.entries
            .iter()
            .filter(|e| matches!(e, Some((h, _)) if *h == head))
            .count() as u32
    }

    /// Whether the folio at `head` is queued as new (not on an LRU yet).
    pub fn queued_new(&self, head: Pfn) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e, Some((h, true)) if *h == head))
    }

    /// The model freed the folio at `head`.
    pub fn forget(&mut self, head: Pfn) {
        for e in &mut self.entries {
            if matches!(e, Some((h, _)) if *h == head) {
                *e = None;
            }
        }
        for e in self.lru_add.iter_mut().chain(self.lazyfree.iter_mut()) {
            if *e == Some(head) {
                *e = None;
            }
        }
    }

    /// [`FolioBatches::forget`] of the `m` folios of `nr` pages from
    /// `first`: nothing to look at while every batch is empty (a zap of a
    /// folio run, issue 14).
    pub fn forget_span(&mut self, first: Pfn, m: u64, nr: u64) {
        if self.entries.is_empty() && self.lru_add.is_empty() && self.lazyfree.is_empty() {
            return;
        }
        for k in 0..m {
            self.forget(first.add(k * nr));
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
