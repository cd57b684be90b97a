//! What a process's anonymous memory looks like from user space: the data
//! both backends produce, and its canonical text rendering.
//!
//! Only kernel-visible facts live here (`/proc/PID/maps`, smaps, pagemap,
//! kpageflags, kpagecount, THP counters, and the tag each page holds), so a
//! model observation and a live observation can be compared field by field.
//! Frame numbers are backend-specific; comparisons match them as a bijection.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One `/proc/PID/maps` line plus the smaps fields the model tracks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapsEntry {
    pub start: u64,
    pub end: u64,
    /// `rw-p` style permission string.
    pub perms: String,
    /// smaps `VmFlags` mnemonics, in the kernel's order (e.g. `rd wr mr mw me ac`).
    pub vm_flags: Vec<String>,
    /// smaps `AnonHugePages` in kB (PMD-mapped anon THP only).
    pub anon_huge_kb: u64,
    /// smaps `Rss` in kB.
    pub rss_kb: u64,
    /// smaps `LazyFree` in kB: pages of MADV_FREE'd folios that reclaim
    /// may discard (PG_swapbacked clear, folio and mapping clean).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lazyfree_kb: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl MapsEntry {
    /// The line exactly as `/proc/PID/maps` prints an unnamed anonymous VMA
    /// (note the trailing space; Linux: fs/proc/task_mmu.c show_vma_header_prefix()).
    pub fn maps_line(&self) -> String {
        format!(
            "{:08x}-{:08x} {} 00000000 00:00 0 ",
            self.start, self.end, self.perms
        )
    }
}

/// The state of one virtual page as pagemap/kpageflags/kpagecount report it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PageState {
    /// pagemap reads 0 (no PTE, or a none PTE).
    NotPresent,
    /// The shared 4 KiB zero page (pagemap present, PM_FILE clear, kpf ZERO_PAGE).
    Zero,
    /// One page of the huge zero folio, PMD-mapped (pagemap present and PM_FILE set).
    HugeZero { index: u32 },
    /// A page of an anonymous folio.
    Anon(AnonPage),
    /// A guard marker (MADV_GUARD_INSTALL): pagemap PM_SWAP with
    /// PM_GUARD_REGION (bit 58) set, no frame.
    Guard,
    /// A swap PTE: pagemap bit 62 (PM_SWAP) with the swap type in bits 0-4
    /// and the offset in bits 5-54. Offsets are backend-specific; compare
    /// them as a bijection only.
    Swapped { ty: u8, offset: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnonPage {
    /// Physical frame (model PFN or real PFN); compare as a bijection only.
    pub pfn: u64,
    /// Folio order (0 for a small folio).
    pub order: u8,
    /// Index of this page within its folio.
    pub index: u32,
    /// Mapped by a PMD in this process.
    pub pmd_mapped: bool,
    /// pagemap bit 56 (PM_MMAP_EXCLUSIVE).
    pub mmap_exclusive: bool,
    /// kpageflags bit 34 as the kernel reports it for this page (the head's PG_anon_exclusive).
    pub anon_exclusive: bool,
    /// kpagecount.
    pub mapcount: u32,
    /// The tag the page holds (first 8 bytes; 0 for a freshly zeroed page).
    pub tag: u64,
}

/// One record of an observation's page list: `npages` consecutive virtual
/// pages from `addr`, all in `state`.
///
/// `npages` is 1 for every state but [`PageState::NotPresent`]: a run of
/// not-present pages (a mapping nothing has touched, a hole a `madvise`
/// left) is one record however long it is, so an observation costs in
/// proportion to what is populated, not to the size of the VMAs. In JSON
/// the field is omitted when it is 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageObs {
    pub addr: u64,
    pub state: PageState,
    #[serde(default = "one_page", skip_serializing_if = "is_one_page")]
    pub npages: u64,
}

fn one_page() -> u64 {
    1
}

fn is_one_page(n: &u64) -> bool {
    *n == 1
}

impl PageObs {
    /// One page.
    pub fn page(addr: u64, state: PageState) -> PageObs {
        PageObs {
            addr,
            state,
            npages: 1,
        }
    }

    /// The first address after the record.
    pub fn end(&self) -> u64 {
        self.addr
            .saturating_add(self.npages.saturating_mul(crate::core::addr::PAGE_SIZE))
    }

    /// Whether `addr` lies in the record.
    pub fn contains(&self, addr: u64) -> bool {
        self.addr <= addr && addr < self.end()
    }
}

/// The pages of an observation (or of a range of one), in address order,
/// with every maximal run of address-contiguous not-present pages as one
/// [`PageObs`] record (the canonical form: two observations of the same
/// state have equal lists). Other states are one record per page.
///
/// Read it record by record (it dereferences to `[PageObs]`), or ask for
/// one address ([`PageRuns::state_at`]), a window ([`PageRuns::clip`]) or
/// two lists side by side ([`PageRuns::aligned`]); nothing here expands a
/// run into pages. Pages in no record are outside every observed VMA.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<PageObs>", into = "Vec<PageObs>")]
pub struct PageRuns {
    recs: Vec<PageObs>,
}

impl From<Vec<PageObs>> for PageRuns {
    /// Canonicalises any list: sorts by address, drops records that
    /// overlap an earlier one, splits multi-page records of a state other
    /// than not-present, and merges adjacent not-present runs.
    fn from(mut v: Vec<PageObs>) -> PageRuns {
        v.sort_by_key(|p| p.addr);
        let mut out = PageRuns::default();
        for p in v {
            if p.npages == 0 || out.end().is_some_and(|e| p.addr < e) {
                continue;
            }
            out.push_run(p);
        }
        out
    }
}

impl From<PageRuns> for Vec<PageObs> {
    fn from(r: PageRuns) -> Vec<PageObs> {
        r.recs
    }
}

impl std::ops::Deref for PageRuns {
    type Target = [PageObs];
    fn deref(&self) -> &[PageObs] {
        &self.recs
    }
}

impl IntoIterator for PageRuns {
    type Item = PageObs;
    type IntoIter = std::vec::IntoIter<PageObs>;
    fn into_iter(self) -> Self::IntoIter {
        self.recs.into_iter()
    }
}

impl<'a> IntoIterator for &'a PageRuns {
    type Item = &'a PageObs;
    type IntoIter = std::slice::Iter<'a, PageObs>;
    fn into_iter(self) -> Self::IntoIter {
        self.recs.iter()
    }
}

impl PageRuns {
    pub fn new() -> PageRuns {
        PageRuns::default()
    }

    /// The records, in address order.
    pub fn records(&self) -> &[PageObs] {
        &self.recs
    }

    /// The end of the last record.
    pub fn end(&self) -> Option<u64> {
        self.recs.last().map(PageObs::end)
    }

    /// Appends page `addr` in `state`. Pages must come in increasing
    /// address order; a not-present page right after a not-present record
    /// extends it.
    pub fn push(&mut self, addr: u64, state: PageState) {
        self.push_run(PageObs::page(addr, state));
    }

    /// Appends the not-present pages of `[start, end)` (page-aligned) as
    /// one run, or extends the last record when that is a not-present run
    /// ending at `start`.
    pub fn push_none(&mut self, start: u64, end: u64) {
        if end > start {
            self.push_run(PageObs {
                addr: start,
                state: PageState::NotPresent,
                npages: (end - start).div_ceil(crate::core::addr::PAGE_SIZE),
            });
        }
    }

    /// Appends a record (see [`PageRuns::push`]); a multi-page record of a
    /// present state is split into pages.
    pub fn push_run(&mut self, p: PageObs) {
        debug_assert!(
            self.end().is_none_or(|e| e <= p.addr),
            "page records out of order: {:#x} after {:#x}",
            p.addr,
            self.end().unwrap_or(0)
        );
        if p.npages == 0 {
            return;
        }
        if p.state == PageState::NotPresent {
            if let Some(last) = self.recs.last_mut() {
                if last.state == PageState::NotPresent && last.end() == p.addr {
                    last.npages += p.npages;
                    return;
                }
            }
            self.recs.push(p);
            return;
        }
        for k in 0..p.npages {
            self.recs.push(PageObs::page(
                p.addr + k * crate::core::addr::PAGE_SIZE,
                p.state.clone(),
            ));
        }
    }

    /// Appends every record of `other` (which must lie after this list).
    pub fn extend(&mut self, other: PageRuns) {
        for p in other.recs {
            self.push_run(p);
        }
    }

    /// Pages covered by the records (not-present runs counted in full).
    pub fn page_count(&self) -> u64 {
        self.recs.iter().map(|p| p.npages).sum()
    }

    /// Index of the record holding `addr`, if any (binary search).
    fn index_of(&self, addr: u64) -> Option<usize> {
        let i = self.recs.partition_point(|p| p.end() <= addr);
        (i < self.recs.len() && self.recs[i].contains(addr)).then_some(i)
    }

    /// The state of the page holding `addr`; `None` outside every record
    /// (outside the observed VMAs: it reads as not present).
    pub fn state_at(&self, addr: u64) -> Option<&PageState> {
        self.index_of(addr).map(|i| &self.recs[i].state)
    }

    /// The records inside `[start, end)`, runs cut at the edges.
    pub fn clip(&self, start: u64, end: u64) -> PageRuns {
        let mut out = PageRuns::new();
        let first = self.recs.partition_point(|p| p.end() <= start);
        for p in &self.recs[first..] {
            if p.addr >= end {
                break;
            }
            let a = p.addr.max(start & !(crate::core::addr::PAGE_SIZE - 1));
            let b = p.end().min(end);
            if a < b {
                out.push_run(PageObs {
                    addr: a,
                    state: p.state.clone(),
                    npages: (b - a).div_ceil(crate::core::addr::PAGE_SIZE),
                });
            }
        }
        out
    }

    /// Walks two lists side by side: maximal address ranges in which each
    /// side has one record (or none: the range is outside that side's
    /// records), in address order, covering every address either side
    /// covers. Present pages come one page at a time; not-present runs in
    /// as few pieces as the other side allows.
    pub fn aligned<'a>(a: &'a PageRuns, b: &'a PageRuns) -> Aligned<'a> {
        Aligned {
            a: &a.recs,
            b: &b.recs,
            i: 0,
            j: 0,
            cur: 0,
        }
    }
}

/// One piece of [`PageRuns::aligned`]: `npages` pages from `addr`, with the
/// state each side has there (`None`: outside that side's records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlignedRun<'a> {
    pub addr: u64,
    pub npages: u64,
    pub a: Option<&'a PageState>,
    pub b: Option<&'a PageState>,
}

/// Iterator of [`PageRuns::aligned`].
pub struct Aligned<'a> {
    a: &'a [PageObs],
    b: &'a [PageObs],
    i: usize,
    j: usize,
    /// Everything below this address has been reported.
    cur: u64,
}

impl<'a> Iterator for Aligned<'a> {
    type Item = AlignedRun<'a>;
    fn next(&mut self) -> Option<AlignedRun<'a>> {
        while self.i < self.a.len() && self.a[self.i].end() <= self.cur {
            self.i += 1;
        }
        while self.j < self.b.len() && self.b[self.j].end() <= self.cur {
            self.j += 1;
        }
        let ra = self.a.get(self.i);
        let rb = self.b.get(self.j);
        // The next address either side covers.
        let start = match (ra, rb) {
            (None, None) => return None,
            (Some(x), None) => x.addr.max(self.cur),
            (None, Some(y)) => y.addr.max(self.cur),
            (Some(x), Some(y)) => x.addr.min(y.addr).max(self.cur),
        };
        let side = |r: Option<&'a PageObs>| -> (Option<&'a PageState>, u64) {
            match r {
                Some(p) if p.addr <= start => (Some(&p.state), p.end()),
                Some(p) => (None, p.addr),
                None => (None, u64::MAX),
            }
        };
        let (sa, ea) = side(ra);
        let (sb, eb) = side(rb);
        let end = ea.min(eb);
        self.cur = end;
        Some(AlignedRun {
            addr: start,
            npages: (end - start) / crate::core::addr::PAGE_SIZE,
            a: sa,
            b: sb,
        })
    }
}

/// One line of `/proc/PID/numa_maps` for a VMA: its start, memory policy
/// (`default` in the model), `anon=` pages, `mapmax=` (the highest
/// per-page mapcount, shown when above 1) and the pages on each node
/// (`N0=…`), counted over present entries with a normal page (not the zero
/// page or the huge zero folio; NUMA-hinting entries count, they are
/// present). The kernel's `dirty=`, `active=`, `swapcache=` and
/// `writeback=` fields depend on LRU and writeback state the model does not
/// keep and are not part of it. Linux: fs/proc/task_mmu.c show_numa_map(),
/// gather_pte_stats(), can_gather_numa_stats().
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaMapsEntry {
    pub start: u64,
    pub policy: String,
    pub anon: u64,
    pub mapmax: u64,
    /// `(node, pages)` for every node with pages, in node order.
    pub nodes: Vec<(u32, u64)>,
}

impl NumaMapsEntry {
    /// The line as the kernel prints it, less the fields the model does not
    /// keep (`7f0000000000 default anon=16 N0=8 N1=8 kernelpagesize_kB=4`).
    pub fn line(&self) -> String {
        let mut s = format!("{:08x} {}", self.start, self.policy);
        if self.anon == 0 && self.nodes.is_empty() {
            return s;
        }
        if self.anon > 0 {
            let _ = write!(s, " anon={}", self.anon);
        }
        if self.mapmax > 1 {
            let _ = write!(s, " mapmax={}", self.mapmax);
        }
        for (n, p) in &self.nodes {
            let _ = write!(s, " N{n}={p}");
        }
        s.push_str(" kernelpagesize_kB=4");
        s
    }
}

/// Everything one process shows, plus global THP counter deltas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// Process label (`main`, or the name a scenario gave a fork child).
    pub process: String,
    pub maps: Vec<MapsEntry>,
    /// Every page inside the observed VMAs, in address order, a run of
    /// not-present pages as one record (see [`PageRuns`]).
    pub pages: PageRuns,
    /// THP counters since the scenario started, keyed `64kB/anon_fault_alloc`
    /// (per-size stats) or `vmstat/thp_fault_alloc`.
    pub stats: BTreeMap<String, i64>,
    /// `/proc/PID/status` VmLck in kB (mm->locked_vm).
    #[serde(default)]
    pub vm_lck_kb: u64,
    /// `/proc/PID/numa_maps`, one entry per VMA of `maps`.
    #[serde(default)]
    pub numa_maps: Vec<NumaMapsEntry>,
}

impl Observation {
    /// The maps text, one kernel-formatted line per VMA.
    pub fn maps_text(&self) -> String {
        let mut s = String::new();
        for m in &self.maps {
            s.push_str(&m.maps_line());
            s.push('\n');
        }
        s
    }

    /// Canonical text: maps, smaps flags, then page runs with folios named by
    /// first appearance (F1, F2, ...) so two observations with different
    /// physical frames but the same structure render identically.
    pub fn render(&self, sections: Sections) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "== process {}", self.process);
        if sections.maps {
            let _ = writeln!(out, "-- maps");
            for m in &self.maps {
                let _ = writeln!(out, "{}", m.maps_line());
            }
        }
        if sections.smaps {
            let _ = writeln!(out, "-- smaps");
            for m in &self.maps {
                // LazyFree only when not zero (older outputs stay as they were).
                let lazy = match m.lazyfree_kb {
                    0 => String::new(),
                    n => format!(" LazyFree:{n}kB"),
                };
                let _ = writeln!(
                    out,
                    "{:08x}-{:08x} Rss:{}kB AnonHugePages:{}kB{lazy} VmFlags: {}",
                    m.start,
                    m.end,
                    m.rss_kb,
                    m.anon_huge_kb,
                    m.vm_flags.join(" ")
                );
            }
            if self.vm_lck_kb != 0 {
                let _ = writeln!(out, "VmLck: {} kB", self.vm_lck_kb);
            }
        }
        if sections.pages {
            let _ = writeln!(out, "-- pages");
            for line in render_page_runs(&self.pages) {
                let _ = writeln!(out, "{line}");
            }
        }
        if sections.numa {
            let _ = writeln!(out, "-- numa_maps");
            for n in &self.numa_maps {
                let _ = writeln!(out, "{}", n.line());
            }
        }
        if sections.stats {
            let _ = writeln!(out, "-- stats");
            for (k, v) in &self.stats {
                if *v != 0 {
                    let _ = writeln!(out, "{k} {v:+}");
                }
            }
        }
        out
    }
}

/// Which sections `render` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sections {
    pub maps: bool,
    pub smaps: bool,
    pub pages: bool,
    pub stats: bool,
    /// `/proc/PID/numa_maps` (only when asked for: `observe numa`).
    pub numa: bool,
}

impl Sections {
    /// Maps, smaps, pages and stats: what a bare `observe` prints.
    pub const ALL: Sections = Sections {
        maps: true,
        smaps: true,
        pages: true,
        stats: true,
        numa: false,
    };
}

/// Names physical frames by order of first appearance so renderings are
/// backend-independent.
#[derive(Default)]
pub struct FolioNamer {
    names: BTreeMap<u64, usize>,
    slots: BTreeMap<(u8, u64), usize>,
}

impl FolioNamer {
    /// Name of the folio whose head frame is `head_pfn`.
    pub fn name(&mut self, head_pfn: u64) -> String {
        let n = self.names.len() + 1;
        let id = *self.names.entry(head_pfn).or_insert(n);
        format!("F{id}")
    }

    /// Name of swap slot `(type, offset)`, by first appearance.
    pub fn slot_name(&mut self, ty: u8, offset: u64) -> String {
        let n = self.slots.len() + 1;
        let id = *self.slots.entry((ty, offset)).or_insert(n);
        format!("S{id}")
    }
}

fn describe(state: &PageState, namer: &mut FolioNamer) -> (String, Option<(u64, u32)>) {
    match state {
        PageState::NotPresent => ("none".to_string(), None),
        PageState::Zero => ("zero".to_string(), None),
        PageState::Guard => ("guard".to_string(), None),
        PageState::HugeZero { index } => ("hugezero".to_string(), Some((u64::MAX, *index))),
        PageState::Swapped { ty, offset } => {
            (format!("swap {}", namer.slot_name(*ty, *offset)), None)
        }
        PageState::Anon(p) => {
            let head = p.pfn - p.index as u64;
            let mut s = format!("{} o{}", namer.name(head), p.order);
            if p.pmd_mapped {
                s.push_str(" pmd");
            }
            if p.mmap_exclusive {
                s.push_str(" X");
            }
            if p.anon_exclusive {
                s.push_str(" AX");
            }
            let _ = write!(s, " cnt={} tag={:#x}", p.mapcount, p.tag);
            (s, Some((head, p.index)))
        }
    }
}

/// Run-length rendering: consecutive pages whose description is equal and
/// whose folio indices are consecutive collapse into one line
/// `start-end state [idx a-b]`. A not-present record is its whole run.
pub fn render_page_runs(pages: &[PageObs]) -> Vec<String> {
    /// A run being built: start, end, description, last (folio, index), first index.
    type Run = (u64, u64, String, Option<(u64, u32)>, Option<u32>);
    let mut namer = FolioNamer::default();
    let mut lines = Vec::new();
    let mut cur: Option<Run> = None;
    for p in pages {
        let (desc, pos) = describe(&p.state, &mut namer);
        if let Some((start, end, d, last, first_idx)) = cur.as_mut() {
            let contiguous = *end == p.addr;
            let follows = match (*last, pos) {
                (None, None) => true,
                (Some((h1, i1)), Some((h2, i2))) => h1 == h2 && i2 == i1 + 1,
                _ => false,
            };
            if contiguous && follows && *d == desc {
                *end = p.end();
                *last = pos;
                continue;
            }
            lines.push(run_line(*start, *end, d, *first_idx, *last));
        }
        cur = Some((p.addr, p.end(), desc, pos, pos.map(|x| x.1)));
    }
    if let Some((start, end, d, last, first_idx)) = cur {
        lines.push(run_line(start, end, &d, first_idx, last));
    }
    lines
}

fn run_line(
    start: u64,
    end: u64,
    desc: &str,
    first: Option<u32>,
    last: Option<(u64, u32)>,
) -> String {
    match (first, last) {
        (Some(a), Some((_, b))) if a == b => format!("{start:012x}-{end:012x} {desc} idx={a}"),
        (Some(a), Some((_, b))) => format!("{start:012x}-{end:012x} {desc} idx={a}-{b}"),
        _ => format!("{start:012x}-{end:012x} {desc}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anon(pfn: u64, order: u8, index: u32) -> PageState {
        PageState::Anon(AnonPage {
            pfn,
            order,
            index,
            pmd_mapped: false,
            mmap_exclusive: true,
            anon_exclusive: true,
            mapcount: 1,
            tag: 7,
        })
    }

    #[test]
    fn runs_collapse_folios_and_are_frame_independent() {
        let mk = |base: u64| -> PageRuns {
            let mut v = PageRuns::new();
            for i in 0..16 {
                v.push(0x10000 + i * 4096, anon(base + i, 4, i as u32));
            }
            v.push(0x20000, PageState::Zero);
            v.push(0x21000, PageState::Zero);
            v.push(0x22000, PageState::NotPresent);
            v
        };
        let a = render_page_runs(&mk(0x100));
        let b = render_page_runs(&mk(0x9000));
        assert_eq!(a, b);
        assert_eq!(
            a,
            vec![
                "000000010000-000000020000 F1 o4 X AX cnt=1 tag=0x7 idx=0-15".to_string(),
                "000000020000-000000022000 zero".to_string(),
                "000000022000-000000023000 none".to_string(),
            ]
        );
    }

    const P: u64 = 4096;

    fn none(addr: u64, npages: u64) -> PageObs {
        PageObs {
            addr,
            state: PageState::NotPresent,
            npages,
        }
    }

    #[test]
    fn a_run_of_none_pages_is_one_record() {
        let mut r = PageRuns::new();
        r.push_none(0x1000_0000, 0x1000_0000 + (127u64 << 40));
        r.push(0x1000_0000 + (127u64 << 40), PageState::NotPresent);
        assert_eq!(r.len(), 1, "adjacent none pages extend the run");
        assert_eq!(r[0].npages, (127u64 << 40) / P + 1);
        assert_eq!(r.page_count(), (127u64 << 40) / P + 1);
        // A present page ends it; a none page after a gap starts a new one.
        r.push(r.end().unwrap(), PageState::Zero);
        r.push(r.end().unwrap(), PageState::Zero);
        r.push_none(r.end().unwrap() + P, r.end().unwrap() + 3 * P);
        assert_eq!(r.len(), 4);
        assert_eq!(r[1].npages, 1, "present pages are one record each");
        assert_eq!(r[3].npages, 2);
        assert_eq!(
            render_page_runs(&r).len(),
            3,
            "two zero pages render as one line"
        );
    }

    #[test]
    fn lists_are_canonicalised() {
        let v = vec![
            PageObs {
                addr: 3 * P,
                state: PageState::Zero,
                npages: 2,
            },
            none(0, 2),
            none(2 * P, 1),
            none(P, 1), // overlaps the first run: dropped
            none(9 * P, 0),
        ];
        let r = PageRuns::from(v);
        assert_eq!(
            r.records(),
            [
                none(0, 3),
                PageObs::page(3 * P, PageState::Zero),
                PageObs::page(4 * P, PageState::Zero),
            ]
        );
    }

    #[test]
    fn lookups_clips_and_side_by_side_walks_never_expand_runs() {
        let mut a = PageRuns::new();
        a.push_none(0, 100 * P);
        a.push(100 * P, PageState::Zero);
        a.push_none(101 * P, 1 << 40);
        assert_eq!(a.state_at(50 * P), Some(&PageState::NotPresent));
        assert_eq!(a.state_at(100 * P + 5), Some(&PageState::Zero));
        assert_eq!(a.state_at(1 << 40), None);
        assert_eq!(
            a.clip(99 * P + 1, 102 * P).records(),
            [
                none(99 * P, 1),
                PageObs::page(100 * P, PageState::Zero),
                none(101 * P, 1)
            ]
        );
        let mut b = PageRuns::new();
        b.push_none(10 * P, 100 * P);
        b.push(100 * P, PageState::Guard);
        let pieces: Vec<_> = PageRuns::aligned(&a, &b)
            .map(|x| (x.addr / P, x.npages, x.a.is_some(), x.b.cloned()))
            .collect();
        let n = Some(PageState::NotPresent);
        assert_eq!(
            pieces,
            [
                (0, 10, true, None),
                (10, 90, true, n.clone()),
                (100, 1, true, Some(PageState::Guard)),
                (101, (1 << 28) - 101, true, None),
            ]
        );
        // Every address either side covers, once.
        let total: u64 = PageRuns::aligned(&a, &b).map(|x| x.npages).sum();
        assert_eq!(total, a.page_count());
    }

    #[test]
    fn json_gives_npages_only_for_runs() {
        let mut r = PageRuns::new();
        r.push(0x1000, PageState::Zero);
        r.push_none(0x2000, 0x5000);
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(
            j,
            r#"[{"addr":4096,"state":"Zero"},{"addr":8192,"state":"NotPresent","npages":3}]"#
        );
        assert_eq!(serde_json::from_str::<PageRuns>(&j).unwrap(), r);
    }

    #[test]
    fn maps_line_matches_kernel_format() {
        let m = MapsEntry {
            start: 0x7f0000000000,
            end: 0x7f0000040000,
            perms: "rw-p".into(),
            vm_flags: vec![],
            anon_huge_kb: 0,
            rss_kb: 0,
            lazyfree_kb: 0,
        };
        assert_eq!(
            m.maps_line(),
            "7f0000000000-7f0000040000 rw-p 00000000 00:00 0 "
        );
    }
}
