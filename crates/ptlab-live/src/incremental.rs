//! The incremental observer of `ptlab diff`: which pages' frame facts
//! (kpageflags, kpagecount) and tags a comparison may take from the
//! previous observation instead of reading them again.
//!
//! Every comparison still reads, for every process, what is cheap and
//! whole: smaps, `/proc/PID/status`, one `PAGEMAP_SCAN` walk, the pagemap
//! word of every populated page and the THP counters. What costs per page
//! — `stable_page_flags()` and the mapcount of each frame, and a load of
//! each page's first word in the worker — is re-used for a page when
//!
//! 1. its pagemap word (present, exclusive, soft-dirty, PFN, ...) and its
//!    `PAGEMAP_SCAN` categories are exactly those of the previous
//!    observation, and its facts and tag were read then;
//! 2. its address is outside the footprint (see [`footprint`]) of every
//!    call its process made since, and no call since was a fork, an exit or
//!    a `fill` (those change every page's sharing: everything is read);
//! 3. its frame's 512-frame block holds no frame that was, before or after,
//!    at an address of any process whose pagemap word changed, appeared or
//!    went away, nor a frame that was at an address inside a footprint
//!    before the calls.
//!
//! Why that is enough (docs/live.md, "How fast a diff is", has the long
//! form): a frame's facts change when a mapping of it is added or removed
//! (kpagecount, the folio's average mapcount), when its folio is split or
//! formed (order, index), when `PG_anon_exclusive` is set or cleared, and
//! its first word when something writes it. In a scenario's processes each
//! of these is made by a call at an address that maps a frame of that
//! folio, and that address is either in the call's footprint or its
//! pagemap word changes (a mapping removed or moved away, a frame
//! replaced); folios of order <= 9 lie inside one 512-frame block. Fork and
//! exit add or remove mappings everywhere, and are handled by reading
//! everything. The kernel's own background work moves frames (migration,
//! compaction, khugepaged, reclaim): each changes a pagemap word, so rule 3
//! covers it. The one exception is the deferred split of a partly unmapped
//! large folio by the shrinker, which changes `order` with no pagemap
//! change; the diff re-reads everything every [`FULL_EVERY`] comparisons
//! and once more at the end, and the THP split counters show such a split
//! in the step it happens.
//!
//! smaps (and `VmLck` from status) are read again only when a call since
//! may have changed a VMA ([`keeps_vmas`] is false for it) or the last
//! read showed a `LazyFree` page. Otherwise the VMAs, their permissions and
//! `VmFlags` are those read last time, and `Rss` and `AnonHugePages` are
//! counted from the pages read now: smaps counts exactly the present pages
//! that are not a zero page (Linux: fs/proc/task_mmu.c smaps_pte_entry()
//! and smaps_pmd_entry() skip what vm_normal_page() and
//! vm_normal_page_pmd() do not return, the zero pages), PMD-mapped anon
//! ones also as AnonHugePages. `LazyFree` stays 0: a page becomes lazily
//! freeable only through MADV_FREE (mm/madvise.c
//! madvise_free_pte_range()), which is a call that changes what smaps shows.
//!
//! A page read again because its frame moved (UFFDIO_MOVE) may take its
//! tag from the frame's record at its old address: when no call since the
//! previous observation can write a page or allocate one
//! ([`keeps_contents`]), every frame keeps its contents (a frame freed
//! since cannot have been handed out again with new ones), so the frame's
//! first word is what was loaded then. Only for a page in a readable VMA
//! (elsewhere the worker cannot load it: its tag stays unknown).

use crate::kernel::{FrameFacts, RawPage, PAGE, PM_PFN_MASK, PM_PRESENT};
use ptlab_model::{Call, MapFlags, MremapFlags};
use std::collections::{HashMap, HashSet};

/// Frame number → tag.
pub type PfnTags = ptlab_model::addr::PfnMap<u64>;

/// Frames per block: the largest folio ptlab reads order and index for
/// (order 9) is naturally aligned inside one.
pub const BLOCK_FRAMES: u64 = 512;

/// The diff reads everything again at least every this many comparisons.
pub const FULL_EVERY: u64 = 64;

/// More footprint ranges than this for one process since the last
/// observation: read everything instead (bounds the bookkeeping).
const MAX_RANGES: usize = 4096;

/// What one call may change in the process that makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Footprint {
    /// No page of any process (knobs, limits, uffd handles).
    Nothing,
    /// The pages of these address ranges (page-aligned, possibly
    /// overlapping), and through them the frames they mapped.
    Ranges(Vec<(u64, u64)>),
    /// Every page of every process (fork, exit, fill).
    Everything,
}

/// `[addr, addr + len)` widened to whole pages (saturating at the top of
/// the address space).
fn pages_of(addr: u64, len: u64) -> (u64, u64) {
    let a = addr & !(PAGE - 1);
    let b = addr.saturating_add(len);
    let b = b.checked_next_multiple_of(PAGE).unwrap_or(!(PAGE - 1));
    (a, b.max(a))
}

/// The address ranges `call` may change in its process, from its
/// arguments alone (never from what either side did with it, so a wrong
/// model cannot narrow it). A call that returns an address (mmap, mremap)
/// also changes the range it returns; the backend adds that range once it
/// knows it ([`Incremental::note_range`]).
pub fn footprint(call: &Call) -> Footprint {
    let r = |v: Vec<(u64, u64)>| Footprint::Ranges(v);
    match call {
        Call::Mmap {
            addr, len, flags, ..
        } => {
            // A hint or a fixed address: MAP_FIXED replaces what was there.
            if *addr != 0 || flags.intersects(MapFlags::FIXED | MapFlags::FIXED_NOREPLACE) {
                r(vec![pages_of(*addr, *len)])
            } else {
                r(Vec::new())
            }
        }
        Call::Munmap { addr, len }
        | Call::Madvise { addr, len, .. }
        | Call::Mprotect { addr, len, .. }
        | Call::Mlock { addr, len, .. }
        | Call::Munlock { addr, len }
        | Call::Mseal { addr, len, .. }
        | Call::UffdRegister { addr, len, .. }
        | Call::UffdUnregister { addr, len, .. } => r(vec![pages_of(*addr, *len)]),
        Call::Access { start, len, .. } => r(vec![pages_of(*start, *len)]),
        Call::FillBytes { addr, len, .. } => r(vec![pages_of(*addr, *len)]),
        Call::Mremap {
            addr,
            old_len,
            new_len,
            flags,
            new_addr,
        } => {
            let mut v = vec![
                pages_of(*addr, *old_len),
                // Grown in place.
                pages_of(*addr, *new_len),
            ];
            if flags.contains(MremapFlags::FIXED) {
                v.push(pages_of(*new_addr, *new_len));
            }
            r(v)
        }
        Call::UffdCopy { dst, src, len, .. } | Call::UffdMove { dst, src, len, .. } => {
            // The source too: UFFDIO_COPY reads it (and may fault it in),
            // UFFDIO_MOVE takes its pages.
            r(vec![pages_of(*dst, *len), pages_of(*src, *len)])
        }
        Call::UffdZeropage { dst, len, .. } => r(vec![pages_of(*dst, *len)]),
        // A NUMA scan rewrites the PTEs of its range (the live backend
        // stops before one on this one-node machine).
        Call::NumaScan { addr, len } => r(vec![pages_of(*addr, *len)]),
        Call::Fork { .. } | Call::Exit | Call::FillVmas { .. } => Footprint::Everything,
        Call::PrctlThp(_)
        | Call::Setrlimit { .. }
        | Call::DropCapIpcLock
        | Call::UffdCreate { .. }
        | Call::UffdApi { .. }
        | Call::SetThp { .. }
        | Call::SetUseZeroPage { .. }
        | Call::SetSwap { .. }
        | Call::SetBefore { .. }
        | Call::SetAfter { .. }
        | Call::SetMemory { .. }
        | Call::SetNodes { .. }
        | Call::NumaRunOn { .. } => Footprint::Nothing,
    }
}

/// Whether `call` leaves the contents of every frame as they were: it
/// writes no page and allocates none (so no frame freed by it or by another
/// such call can be handed out again with new contents). Munmap and
/// UFFDIO_MOVE only unmap or move frames (Linux: mm/userfaultfd.c
/// move_pages() moves a present page's PTE, a swap entry or the zero page,
/// and splits a large folio at most: no allocation of data pages); the
/// others change no page. Everything else may fault pages in — mremap and
/// mprotect too, on an mlocked VMA (mm/mremap.c move_vma(),
/// mm/mprotect.c mprotect_fixup() populate it) — and is not counted here.
pub fn keeps_contents(call: &Call) -> bool {
    only_settings(call)
        || matches!(
            call,
            Call::Munmap { .. }
                | Call::UffdMove { .. }
                | Call::Munlock { .. }
                | Call::Mseal { .. }
                | Call::UffdRegister { .. }
                | Call::UffdUnregister { .. }
                | Call::PrctlThp(_)
        )
}

/// Whether `call` leaves every VMA of its process as it was (bounds,
/// permissions, `VmFlags`, `VmLck`) and makes no page lazily freeable.
/// Faults and the uffd ioctls fill, move or copy pages within existing
/// VMAs; the others change no VMA.
pub fn keeps_vmas(call: &Call) -> bool {
    only_settings(call)
        || matches!(
            call,
            Call::Access { .. }
                | Call::UffdCopy { .. }
                | Call::UffdZeropage { .. }
                | Call::UffdMove { .. }
        )
}

/// Whether `call` only changes a setting — a THP or swap knob, a
/// `--before`/`--after` switch, the machine's memory or nodes, the CPU a
/// process runs on, a limit, a capability, or makes a uffd context — and
/// touches no page and no VMA (it keeps both [`keeps_contents`] and
/// [`keeps_vmas`]).
fn only_settings(call: &Call) -> bool {
    matches!(
        call,
        Call::UffdCreate { .. }
            | Call::UffdApi { .. }
            | Call::Setrlimit { .. }
            | Call::DropCapIpcLock
            | Call::SetThp { .. }
            | Call::SetUseZeroPage { .. }
            | Call::SetSwap { .. }
            | Call::SetBefore { .. }
            | Call::SetAfter { .. }
            | Call::SetMemory { .. }
            | Call::SetNodes { .. }
            | Call::NumaRunOn { .. }
    )
}

/// What smaps and status showed of one process's VMAs.
#[derive(Clone, Debug, Default)]
pub struct VmaRecord {
    pub smaps: Vec<crate::kernel::SmapsVma>,
    pub vm_lck_kb: u64,
}

impl VmaRecord {
    /// This record may stand for a fresh read when nothing changed a VMA:
    /// no page was lazily freeable.
    pub fn reusable(&self) -> bool {
        self.smaps.iter().all(|v| v.lazyfree_kb == 0)
    }
}

/// Add `[start, end)` to the sorted, disjoint `set`, joining ranges that
/// overlap or touch.
pub fn merge_range(set: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let i = set.partition_point(|r| r.1 < start);
    let mut j = i;
    let (mut s, mut e) = (start, end);
    while j < set.len() && set[j].0 <= end {
        s = s.min(set[j].0);
        e = e.max(set[j].1);
        j += 1;
    }
    set.splice(i..j, [(s, e)]);
}

/// Whether `addr` lies in one of the sorted, disjoint `ranges`.
pub fn in_ranges(ranges: &[(u64, u64)], addr: u64) -> bool {
    let i = ranges.partition_point(|r| r.1 <= addr);
    i < ranges.len() && ranges[i].0 <= addr
}

/// The frame number of a present pagemap word (0 when hidden).
fn pfn(pagemap: u64) -> u64 {
    pagemap & PM_PFN_MASK
}

/// The block of frame `pfn`.
pub fn block_of(pfn: u64) -> u64 {
    pfn / BLOCK_FRAMES
}

/// What the previous observation read for one present page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedPage {
    pub addr: u64,
    pub pagemap: u64,
    pub scan: u64,
    /// Its frame's facts, when they were needed (not for a zero page).
    pub facts: Option<FrameFacts>,
    /// Its tag and whether it could be loaded (anon pages).
    pub tag: Option<(u64, bool)>,
    /// Everything needed was read (the facts of a page that needs them,
    /// the tag of an anon page): only such a record is re-used.
    pub complete: bool,
}

/// One process's observation within one comparison: what may be
/// re-used, and what this observation read.
pub struct ProcPass<'a> {
    /// Re-use at all (false: read everything, only record).
    pub allow: bool,
    /// The previous observation's pages, by address.
    pub old: &'a [CachedPage],
    /// The process's footprint since then (sorted, disjoint).
    pub footprint: &'a [(u64, u64)],
    /// Blocks whose frames must be read again.
    pub touched: &'a HashSet<u64>,
    /// Tags of frames that were at a footprint address, when every frame
    /// kept its contents ([`keeps_contents`]).
    pub frame_tags: &'a PfnTags,
    /// Every call since the previous observation kept the frames'
    /// contents ([`keeps_contents`]).
    pub contents_kept: bool,
    /// The VMA being read is readable (the worker can load its pages).
    pub readable: bool,
    /// The previous smaps read, when it may stand for a fresh one.
    pub vmas: Option<&'a VmaRecord>,
    /// This observation's smaps read (or the one re-used).
    pub vmas_out: Option<VmaRecord>,
    /// This observation's pages, by address.
    pub new: Vec<CachedPage>,
    /// Blocks of the frames of re-used pages.
    pub reused_blocks: Vec<u64>,
    pub reused: u64,
    pub read: u64,
    /// Where the last lookup in `old` ended (pages are looked up in
    /// address order, so the next one is usually at or just after it).
    cursor: usize,
}

impl<'a> ProcPass<'a> {
    pub fn new(
        allow: bool,
        old: &'a [CachedPage],
        footprint: &'a [(u64, u64)],
        touched: &'a HashSet<u64>,
        frame_tags: &'a PfnTags,
    ) -> ProcPass<'a> {
        ProcPass {
            allow,
            old,
            footprint,
            touched,
            frame_tags,
            contents_kept: false,
            readable: false,
            vmas: None,
            vmas_out: None,
            new: Vec::new(),
            reused_blocks: Vec::new(),
            reused: 0,
            read: 0,
            cursor: 0,
        }
    }

    /// The old record at `va`, if any: a step forward from the last
    /// lookup, or a binary search when `va` lies behind it.
    fn old_at(&mut self, va: u64) -> Option<CachedPage> {
        let old = self.old;
        if self.cursor > old.len() || (self.cursor > 0 && old[self.cursor - 1].addr >= va) {
            self.cursor = old.partition_point(|c| c.addr < va);
        }
        while self.cursor < old.len() && old[self.cursor].addr < va {
            self.cursor += 1;
        }
        match old.get(self.cursor) {
            Some(c) if c.addr == va => {
                self.cursor += 1;
                Some(*c)
            }
            _ => None,
        }
    }

    /// The previous record of the page at `va`, now read as `raw`, if it
    /// may stand for a fresh read (rules 1–3 of the module docs).
    pub fn reusable(&mut self, va: u64, raw: &RawPage) -> Option<CachedPage> {
        if !self.allow || raw.pagemap & PM_PRESENT == 0 || pfn(raw.pagemap) == 0 {
            return None;
        }
        let c = self.old_at(va)?;
        (c.complete
            && c.pagemap == raw.pagemap
            && c.scan == raw.scan
            && !in_ranges(self.footprint, va)
            && !self.touched.contains(&block_of(pfn(c.pagemap))))
        .then_some(c)
    }

    /// The tag of the present page at `va`, read as `raw` in the VMA being
    /// read, known without loading it when every call since the previous
    /// observation kept the frames' contents (see the module docs): the
    /// tag its frame had then, here or at a footprint address.
    pub fn tag_of_frame(&self, va: u64, raw: &RawPage) -> Option<u64> {
        let p = pfn(raw.pagemap);
        if !self.allow
            || !self.contents_kept
            || !self.readable
            || raw.pagemap & PM_PRESENT == 0
            || p == 0
        {
            return None;
        }
        if let Ok(i) = self.old.binary_search_by_key(&va, |c| c.addr) {
            if let (true, Some((t, true))) = (pfn(self.old[i].pagemap) == p, self.old[i].tag) {
                return Some(t);
            }
        }
        self.frame_tags.get(&p).copied()
    }

    /// Record what was observed at `va` (`reused`: from the old record).
    pub fn record(&mut self, page: CachedPage, reused: bool) {
        if reused {
            self.reused += 1;
            self.reused_blocks.push(block_of(pfn(page.pagemap)));
        } else {
            self.read += 1;
        }
        self.new.push(page);
    }
}

/// Add to `into` the blocks of the frames, before (`old`) and after
/// (`new`), of every address whose present page appeared, went away or
/// has a different pagemap word or `PAGEMAP_SCAN` categories. Both lists
/// are sorted by address.
pub fn changed_blocks(old: &[CachedPage], new: &[CachedPage], into: &mut HashSet<u64>) {
    let (mut i, mut j) = (0, 0);
    let mut add = |c: &CachedPage| {
        let p = pfn(c.pagemap);
        if p != 0 {
            into.insert(block_of(p));
        }
    };
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) if o.addr == n.addr => {
                if o.pagemap != n.pagemap || o.scan != n.scan {
                    add(o);
                    add(n);
                }
                i += 1;
                j += 1;
            }
            (Some(o), Some(n)) if o.addr < n.addr => {
                add(o);
                i += 1;
            }
            (Some(_), Some(n)) => {
                add(n);
                j += 1;
            }
            (Some(o), None) => {
                add(o);
                i += 1;
            }
            (None, Some(n)) => {
                add(n);
                j += 1;
            }
            (None, None) => break,
        }
    }
}

/// Counts of what the incremental observer did (`PTLAB_DIFF_TIMING=1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IncrementalStats {
    /// Observations of all processes that re-used records, and that read
    /// everything.
    pub incremental: u64,
    pub full: u64,
    /// Present pages re-used and read.
    pub pages_reused: u64,
    pub pages_read: u64,
    /// Processes observed again within one comparison because another
    /// process's changes touched blocks they had re-used.
    pub redone: u64,
    /// With verification on: pages whose re-used record differed from a
    /// full read of the same moment (0 unless the rules above are wrong
    /// or the kernel split a folio in the background).
    pub stale_pages: u64,
    /// With verification on: process observations whose VMAs (re-used
    /// smaps, counted Rss) differed from a full read of the same moment.
    pub stale_maps: u64,
}

/// The incremental observer's state between comparisons.
#[derive(Default)]
pub struct Incremental {
    /// Footprints are recorded and records re-used.
    pub on: bool,
    /// Check every incremental observation against a full one.
    pub verify: bool,
    /// The previous observation, per process: its pid (a later process of
    /// the same name is another process) and its pages.
    pub caches: HashMap<String, (i32, Vec<CachedPage>)>,
    /// Footprints since the previous observation, per process (sorted,
    /// disjoint).
    pub footprints: HashMap<String, Vec<(u64, u64)>>,
    /// A call since the previous observation may have changed anything.
    pub everything: bool,
    /// A call since the previous observation may have written or
    /// allocated a page (not [`keeps_contents`]).
    pub contents_changed: bool,
    /// The previous smaps read, per process (with its pid).
    pub vmas: HashMap<String, (i32, VmaRecord)>,
    /// Processes a call since the previous observation of which may have
    /// changed a VMA (not [`keeps_vmas`]).
    pub vmas_changed: HashSet<String>,
    pub stats: IncrementalStats,
    /// The first pages verification found stale: (process, address,
    /// re-used, read).
    pub stale_examples: Vec<(String, u64, String, String)>,
}

impl Incremental {
    /// Record what `call`, made by `proc`, may change.
    pub fn note(&mut self, proc: &str, call: &Call) {
        if !self.on {
            return;
        }
        if !keeps_contents(call) {
            self.contents_changed = true;
        }
        if !keeps_vmas(call) {
            self.vmas_changed.insert(proc.to_string());
        }
        match footprint(call) {
            Footprint::Nothing => {}
            Footprint::Everything => self.everything = true,
            Footprint::Ranges(v) => {
                for (a, b) in v {
                    self.note_range(proc, a, b);
                }
            }
        }
    }

    /// Record that `proc`'s pages in `[start, end)` may have changed.
    pub fn note_range(&mut self, proc: &str, start: u64, end: u64) {
        if !self.on || self.everything {
            return;
        }
        let (a, b) = pages_of(start, end.saturating_sub(start));
        let set = self.footprints.entry(proc.to_string()).or_default();
        merge_range(set, a, b);
        if set.len() > MAX_RANGES {
            self.everything = true;
            self.footprints.clear();
        }
    }

    /// The blocks of the frames that were, at the previous observation,
    /// at an address inside a footprint; and, when every call since kept
    /// the frames' contents, those frames' loaded tags.
    pub fn touched_by_footprints(&self) -> (HashSet<u64>, PfnTags) {
        let mut t = HashSet::new();
        let mut tags = PfnTags::default();
        for (proc, fp) in &self.footprints {
            let Some((_, old)) = self.caches.get(proc) else {
                continue;
            };
            for &(a, b) in fp {
                let i = old.partition_point(|c| c.addr < a);
                for c in old[i..].iter().take_while(|c| c.addr < b) {
                    let p = pfn(c.pagemap);
                    if p != 0 {
                        t.insert(block_of(p));
                        if let (false, Some((tag, true))) = (self.contents_changed, c.tag) {
                            tags.insert(p, tag);
                        }
                    }
                }
            }
        }
        (t, tags)
    }

    /// The previous observation of process `proc` with pid `pid` (empty
    /// for a process not seen before, or a later one of the same name).
    pub fn previous(&self, proc: &str, pid: i32) -> &[CachedPage] {
        match self.caches.get(proc) {
            Some((p, pages)) if *p == pid => pages,
            _ => &[],
        }
    }

    /// The previous smaps read of `proc` (pid `pid`), if it may stand for
    /// a fresh read now.
    pub fn vmas_of(&self, proc: &str, pid: i32) -> Option<&VmaRecord> {
        if self.everything || self.vmas_changed.contains(proc) {
            return None;
        }
        match self.vmas.get(proc) {
            Some((p, v)) if *p == pid && v.reusable() => Some(v),
            _ => None,
        }
    }

    /// Forget everything (the next observation reads everything).
    pub fn reset(&mut self) {
        self.caches.clear();
        self.vmas.clear();
        self.vmas_changed.clear();
        self.footprints.clear();
        self.everything = false;
        self.contents_changed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptlab_model::{Advice, Prot};

    fn page(addr: u64, pfn: u64) -> CachedPage {
        CachedPage {
            addr,
            pagemap: PM_PRESENT | pfn,
            scan: 0,
            facts: None,
            tag: Some((addr, true)),
            complete: true,
        }
    }

    #[test]
    fn merge_range_joins_overlapping_and_touching_ranges() {
        let mut s = Vec::new();
        merge_range(&mut s, 0x5000, 0x6000);
        merge_range(&mut s, 0x1000, 0x2000);
        merge_range(&mut s, 0x9000, 0xa000);
        assert_eq!(
            s,
            vec![(0x1000, 0x2000), (0x5000, 0x6000), (0x9000, 0xa000)]
        );
        // Touching on both sides joins three into one.
        merge_range(&mut s, 0x2000, 0x5000);
        assert_eq!(s, vec![(0x1000, 0x6000), (0x9000, 0xa000)]);
        // Inside an existing range: nothing changes.
        merge_range(&mut s, 0x3000, 0x4000);
        assert_eq!(s, vec![(0x1000, 0x6000), (0x9000, 0xa000)]);
        // Spanning everything.
        merge_range(&mut s, 0, 0x10000);
        assert_eq!(s, vec![(0, 0x10000)]);
        // Empty ranges are ignored.
        merge_range(&mut s, 0x20000, 0x20000);
        assert_eq!(s, vec![(0, 0x10000)]);
    }

    /// merge_range against a page bitmap over random ranges.
    #[test]
    fn merge_range_equals_a_bitmap() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let mut set = Vec::new();
            let mut bits = [false; 256];
            for _ in 0..(rnd() % 20) {
                let a = rnd() % 256;
                let b = (a + rnd() % 16).min(256);
                merge_range(&mut set, a, b);
                for x in &mut bits[a as usize..b as usize] {
                    *x = true;
                }
            }
            assert!(set.windows(2).all(|w| w[0].1 < w[1].0), "{set:?}");
            for (i, &b) in bits.iter().enumerate() {
                assert_eq!(in_ranges(&set, i as u64), b, "{i} in {set:?}");
            }
        }
    }

    #[test]
    fn footprints_name_the_ranges_a_call_touches() {
        let fp = |c: Call| footprint(&c);
        assert_eq!(
            fp(Call::Madvise {
                addr: 0x1234,
                len: 0x1000,
                advice: Advice::DontNeed
            }),
            Footprint::Ranges(vec![(0x1000, 0x3000)])
        );
        assert_eq!(
            fp(Call::UffdMove {
                handle: "u".into(),
                dst: 0x10000,
                src: 0x40000,
                len: 0x1000,
                mode: Default::default(),
            }),
            Footprint::Ranges(vec![(0x10000, 0x11000), (0x40000, 0x41000)])
        );
        let Footprint::Ranges(v) = fp(Call::Mremap {
            addr: 0x100000,
            old_len: 0x2000,
            new_len: 0x4000,
            flags: MremapFlags::MAYMOVE | MremapFlags::FIXED,
            new_addr: 0x900000,
        }) else {
            panic!("mremap has ranges");
        };
        assert!(v.contains(&(0x100000, 0x102000)));
        assert!(v.contains(&(0x100000, 0x104000)));
        assert!(v.contains(&(0x900000, 0x904000)));
        assert_eq!(fp(Call::Exit), Footprint::Everything);
        assert_eq!(fp(Call::Fork { child: "c".into() }), Footprint::Everything);
        // A floating mmap names nothing until its result is known.
        assert_eq!(
            fp(Call::Mmap {
                addr: 0,
                len: 0x1000,
                prot: Prot::READ,
                flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS
            }),
            Footprint::Ranges(vec![])
        );
        // Up to the top of the address space without overflowing.
        assert_eq!(
            fp(Call::Munmap {
                addr: u64::MAX - 0x1fff,
                len: 0x10000
            }),
            Footprint::Ranges(vec![(u64::MAX - 0x1fff, !(PAGE - 1))])
        );
    }

    #[test]
    fn a_page_is_reused_only_when_nothing_says_it_changed() {
        let old = vec![
            page(0x1000, 0x200),
            page(0x2000, 0x401),
            page(0x3000, 0x9000),
        ];
        let raw = |pfn: u64| RawPage {
            pagemap: PM_PRESENT | pfn,
            scan: 0,
        };
        let fp = vec![(0x3000, 0x4000)];
        let none = PfnTags::default();
        let mut touched = HashSet::new();
        touched.insert(block_of(0x401));
        let mut pass = ProcPass::new(true, &old, &fp, &touched, &none);
        // Same word, untouched block, outside the footprint: re-used.
        assert_eq!(pass.reusable(0x1000, &raw(0x200)), Some(old[0]));
        // A different frame.
        assert_eq!(pass.reusable(0x1000, &raw(0x201)), None);
        // Different scan categories.
        let mut r = raw(0x200);
        r.scan = crate::kernel::PAGE_IS_HUGE;
        assert_eq!(pass.reusable(0x1000, &r), None);
        // Its frame's block was touched elsewhere.
        assert_eq!(pass.reusable(0x2000, &raw(0x401)), None);
        // Inside the footprint.
        assert_eq!(pass.reusable(0x3000, &raw(0x9000)), None);
        // No old record.
        assert_eq!(pass.reusable(0x5000, &raw(0x200)), None);
        // Not allowed at all.
        let mut full = ProcPass::new(false, &old, &fp, &touched, &none);
        assert_eq!(full.reusable(0x1000, &raw(0x200)), None);
        // An incomplete record is read again.
        let mut inc = old.clone();
        inc[0].complete = false;
        let mut pass = ProcPass::new(true, &inc, &[], &touched, &none);
        assert_eq!(pass.reusable(0x1000, &raw(0x200)), None);
    }

    #[test]
    fn only_calls_that_neither_write_nor_allocate_keep_contents() {
        assert!(keeps_contents(&Call::UffdMove {
            handle: "u".into(),
            dst: 0,
            src: 0,
            len: 0,
            mode: Default::default(),
        }));
        assert!(keeps_contents(&Call::Munmap { addr: 0, len: 0 }));
        for c in [
            Call::Access {
                start: 0,
                len: 1,
                write: false,
                tag: None,
            },
            Call::Mremap {
                addr: 0,
                old_len: 0,
                new_len: 0,
                flags: MremapFlags::empty(),
                new_addr: 0,
            },
            Call::Mprotect {
                addr: 0,
                len: 0,
                prot: Prot::READ,
            },
            Call::Madvise {
                addr: 0,
                len: 0,
                advice: Advice::DontNeed,
            },
            Call::Fork { child: "c".into() },
        ] {
            assert!(!keeps_contents(&c), "{c:?}");
        }
    }

    #[test]
    fn a_moved_frame_brings_its_tag_only_into_a_readable_vma() {
        let mut tags = PfnTags::default();
        tags.insert(0x400, 7);
        let t = HashSet::new();
        let old = vec![page(0x5000, 0x401)];
        let mut pass = ProcPass::new(true, &old, &[], &t, &tags);
        pass.contents_kept = true;
        let raw = RawPage {
            pagemap: PM_PRESENT | 0x400,
            scan: 0,
        };
        assert_eq!(pass.tag_of_frame(0x9000, &raw), None);
        pass.readable = true;
        assert_eq!(pass.tag_of_frame(0x9000, &raw), Some(7));
        // Its own frame at its own address: the old tag.
        let own = RawPage {
            pagemap: PM_PRESENT | 0x401,
            scan: 0,
        };
        assert_eq!(pass.tag_of_frame(0x5000, &own), Some(0x5000));
        // A frame seen nowhere.
        let other = RawPage {
            pagemap: PM_PRESENT | 0x402,
            scan: 0,
        };
        assert_eq!(pass.tag_of_frame(0x5000, &other), None);
        // Some call may have written or allocated: nothing is known.
        pass.contents_kept = false;
        assert_eq!(pass.tag_of_frame(0x9000, &raw), None);
        assert_eq!(pass.tag_of_frame(0x5000, &own), None);
    }

    #[test]
    fn vma_records_stand_only_while_no_call_changed_a_vma() {
        let mut inc = Incremental {
            on: true,
            ..Default::default()
        };
        let vma = |lazy: u64| crate::kernel::SmapsVma {
            start: 0x1000,
            end: 0x2000,
            perms: "rw-p".into(),
            rest: String::new(),
            rss_kb: 4,
            anon_huge_kb: 0,
            lazyfree_kb: lazy,
            vm_flags: vec![],
        };
        inc.vmas.insert(
            "main".into(),
            (
                7,
                VmaRecord {
                    smaps: vec![vma(0)],
                    vm_lck_kb: 0,
                },
            ),
        );
        let mv = Call::UffdMove {
            handle: "u".into(),
            dst: 0,
            src: 0x1000,
            len: 0x1000,
            mode: Default::default(),
        };
        inc.note("main", &mv);
        assert!(inc.vmas_of("main", 7).is_some());
        // Another process of the same name.
        assert!(inc.vmas_of("main", 8).is_none());
        inc.note(
            "main",
            &Call::Madvise {
                addr: 0x1000,
                len: 0x1000,
                advice: Advice::Free,
            },
        );
        assert!(inc.vmas_of("main", 7).is_none());
        // A lazily freeable page: read again whatever the calls.
        inc.vmas_changed.clear();
        inc.vmas.get_mut("main").unwrap().1.smaps[0] = vma(4);
        assert!(inc.vmas_of("main", 7).is_none());
        assert!(!keeps_vmas(&Call::Mprotect {
            addr: 0,
            len: 0,
            prot: Prot::READ
        }));
        assert!(keeps_vmas(&Call::Access {
            start: 0,
            len: 1,
            write: true,
            tag: None
        }));
    }

    #[test]
    fn changed_blocks_takes_old_and_new_frames_of_every_change() {
        let old = vec![
            page(0x1000, 0x200),
            page(0x2000, 0x400),
            page(0x3000, 0x600),
        ];
        let new = vec![
            page(0x1000, 0x200),  // unchanged
            page(0x2000, 0x1400), // replaced frame
            // 0x3000 went away
            page(0x4000, 0x2600), // appeared
        ];
        let mut t = HashSet::new();
        changed_blocks(&old, &new, &mut t);
        let mut got: Vec<u64> = t.into_iter().collect();
        got.sort_unstable();
        assert_eq!(
            got,
            vec![
                block_of(0x400),
                block_of(0x600),
                block_of(0x1400),
                block_of(0x2600)
            ]
        );
    }

    #[test]
    fn footprints_collect_old_frames_and_everything_overrides() {
        let mut inc = Incremental {
            on: true,
            ..Default::default()
        };
        inc.caches.insert(
            "main".into(),
            (
                1,
                vec![
                    page(0x1000, 0x200),
                    page(0x2000, 0x400),
                    page(0x3000, 0x600),
                ],
            ),
        );
        inc.note(
            "main",
            &Call::Access {
                start: 0x2000,
                len: 0x2000,
                write: true,
                tag: None,
            },
        );
        let (t, tags) = inc.touched_by_footprints();
        assert!(t.contains(&block_of(0x400)) && t.contains(&block_of(0x600)));
        assert!(!t.contains(&block_of(0x200)));
        // A write changes contents: no tag is carried over.
        assert!(inc.contents_changed && tags.is_empty());
        assert!(!inc.everything);
        // A move keeps them: the moved frames' tags are known.
        inc.footprints.clear();
        inc.contents_changed = false;
        inc.note(
            "main",
            &Call::UffdMove {
                handle: "u".into(),
                dst: 0x8000,
                src: 0x2000,
                len: 0x1000,
                mode: Default::default(),
            },
        );
        let (_, tags) = inc.touched_by_footprints();
        assert!(!inc.contents_changed);
        assert_eq!(tags.get(&0x400), Some(&0x2000));
        assert_eq!(tags.len(), 1);
        inc.note("main", &Call::Exit);
        assert!(inc.everything);
        // Off: nothing is recorded.
        let mut off = Incremental::default();
        off.note("main", &Call::Exit);
        assert!(!off.everything && off.footprints.is_empty());
    }

    #[test]
    fn too_many_ranges_mean_everything() {
        let mut inc = Incremental {
            on: true,
            ..Default::default()
        };
        for i in 0..=MAX_RANGES as u64 {
            inc.note_range("main", i * 2 * PAGE, i * 2 * PAGE + PAGE);
        }
        assert!(inc.everything);
        assert!(inc.footprints.is_empty());
    }
}
