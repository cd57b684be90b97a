//! Reading what the kernel shows about a process from the outside:
//! `/proc/PID/smaps` (maps lines, VmFlags, Rss, AnonHugePages),
//! `/proc/PID/pagemap` (present, PM_MMAP_EXCLUSIVE, PM_FILE, PFN), the
//! `PAGEMAP_SCAN` ioctl (which parts of a range are populated at all, zero
//! pages and PMD mappings), `/proc/kpageflags`,
//! `/proc/kpagecount`, and the THP counters.
//!
//! None of these reads takes a reference on a page or faults anything in.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;

pub const PAGE: u64 = 4096;

// pagemap bits (Documentation/admin-guide/mm/pagemap.rst)
pub const PM_PRESENT: u64 = 1 << 63;
pub const PM_SWAP: u64 = 1 << 62;
pub const PM_FILE: u64 = 1 << 61;
/// pagemap bit 58: the entry is a guard marker (MADV_GUARD_INSTALL).
pub const PM_GUARD_REGION: u64 = 1 << 58;
pub const PM_MMAP_EXCLUSIVE: u64 = 1 << 56;
pub const PM_PFN_MASK: u64 = (1 << 55) - 1;

// kpageflags bits (include/uapi/linux/kernel-page-flags.h)
pub const KPF_ANON: u64 = 1 << 12;
pub const KPF_COMPOUND_HEAD: u64 = 1 << 15;
pub const KPF_COMPOUND_TAIL: u64 = 1 << 16;
pub const KPF_THP: u64 = 1 << 22;
pub const KPF_ZERO_PAGE: u64 = 1 << 24;
/// KPF_OWNER_2 = PG_anon_exclusive (of the folio's head page).
pub const KPF_ANON_EXCLUSIVE: u64 = 1 << 34;

// PAGEMAP_SCAN categories (include/uapi/linux/fs.h)
pub const PAGE_IS_FILE: u64 = 1 << 2;
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
/// Any non-none entry that is not present: a swap entry, a migration
/// entry, or a PTE marker (guard regions, uffd-wp markers).
pub const PAGE_IS_SWAPPED: u64 = 1 << 4;
pub const PAGE_IS_PFNZERO: u64 = 1 << 5;
pub const PAGE_IS_HUGE: u64 = 1 << 6;
/// A guard marker (MADV_GUARD_INSTALL); Linux 6.15+ (older kernels reject
/// the bit with EINVAL).
pub const PAGE_IS_GUARD: u64 = 1 << 8;
pub const PAGEMAP_SCAN: u64 = 0xC060_6610;

/// One VMA as smaps shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmapsVma {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    /// The rest of the maps line after the permissions (offset, dev, inode, path).
    pub rest: String,
    pub rss_kb: u64,
    pub anon_huge_kb: u64,
    pub lazyfree_kb: u64,
    pub vm_flags: Vec<String>,
}

impl SmapsVma {
    /// An anonymous VMA with no backing file and no name (the only kind a
    /// scenario creates).
    pub fn is_plain_anon(&self) -> bool {
        let mut parts = self.rest.split_whitespace();
        let _off = parts.next();
        let dev = parts.next();
        let inode = parts.next();
        let name = parts.next();
        dev == Some("00:00") && inode == Some("0") && name.is_none()
    }
}

/// The `kB` fields of `/proc/PID/status` (VmSize, VmData, VmLck, ...), in kB.
pub fn read_status(pid: i32) -> std::io::Result<BTreeMap<String, u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(parse_status(&text))
}

/// Parse `/proc/PID/status` text: every `Name:  N kB` line.
pub fn parse_status(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = v.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some((k.to_string(), v))
        })
        .collect()
}

/// Parse `/proc/PID/smaps` text.
pub fn parse_smaps(text: &str) -> Vec<SmapsVma> {
    let mut out: Vec<SmapsVma> = Vec::new();
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                if !first.ends_with(':') {
                    let mut it = line.splitn(3, ' ');
                    let _ = it.next();
                    let perms = it.next().unwrap_or("").to_string();
                    let rest = it.next().unwrap_or("").to_string();
                    out.push(SmapsVma {
                        start,
                        end,
                        perms,
                        rest,
                        rss_kb: 0,
                        anon_huge_kb: 0,
                        lazyfree_kb: 0,
                        vm_flags: Vec::new(),
                    });
                    continue;
                }
            }
        }
        let Some(cur) = out.last_mut() else { continue };
        if let Some(v) = line.strip_prefix("VmFlags:") {
            cur.vm_flags = v.split_whitespace().map(str::to_string).collect();
        } else if let Some(v) = line.strip_prefix("Rss:") {
            cur.rss_kb = kb(v);
        } else if let Some(v) = line.strip_prefix("AnonHugePages:") {
            cur.anon_huge_kb = kb(v);
        } else if let Some(v) = line.strip_prefix("LazyFree:") {
            cur.lazyfree_kb = kb(v);
        }
    }
    out
}

fn kb(v: &str) -> u64 {
    v.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `/proc/PID/smaps`.
/// `/proc/PID/numa_maps` by VMA start: the policy, `anon=`, `mapmax=` and
/// the `N<node>=` counts (the fields the model keeps; `dirty=`, `active=`,
/// `file=`, `heap`, … are dropped).
pub fn read_numa_maps(pid: i32) -> std::io::Result<BTreeMap<u64, ptlab_model::NumaMapsEntry>> {
    Ok(parse_numa_maps(&std::fs::read_to_string(format!(
        "/proc/{pid}/numa_maps"
    ))?))
}

/// The lines of a numa_maps file (see [`read_numa_maps`]); a malformed line
/// is skipped.
pub fn parse_numa_maps(text: &str) -> BTreeMap<u64, ptlab_model::NumaMapsEntry> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(start), Some(policy)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(start) = u64::from_str_radix(start, 16) else {
            continue;
        };
        let mut e = ptlab_model::NumaMapsEntry {
            start,
            policy: policy.to_string(),
            ..Default::default()
        };
        for tok in it {
            let Some((k, v)) = tok.split_once('=') else {
                continue;
            };
            let Ok(v) = v.parse::<u64>() else { continue };
            match k {
                "anon" => e.anon = v,
                "mapmax" => e.mapmax = v,
                _ => {
                    if let Some(n) = k.strip_prefix('N').and_then(|n| n.parse::<u32>().ok()) {
                        e.nodes.push((n, v));
                    }
                }
            }
        }
        out.insert(start, e);
    }
    out
}

pub fn read_smaps(pid: i32) -> std::io::Result<Vec<SmapsVma>> {
    Ok(parse_smaps(&std::fs::read_to_string(format!(
        "/proc/{pid}/smaps"
    ))?))
}

/// A `/proc/PID/` file of one worker (`smaps`, `numa_maps`, `status`,
/// `pagemap`) kept open between observations, so that each observation
/// costs one `pread` from offset 0 instead of a path walk, an open (for
/// the mm files, `proc_mem_open()`) and a close.
///
/// A read from offset 0 shows what a fresh open would: each of these
/// files is a seq_file, which starts over from its first record when read
/// at offset 0 (Linux: fs/seq_file.c seq_read_iter(): `ki_pos == 0` resets
/// `m->index`; fs/proc/task_mmu.c m_start() then begins at the first VMA,
/// taking the mmap lock and the VMA tree afresh), and pagemap is read by
/// offset anyway (pagemap_read()). The mm the file refers to is the one
/// the process had when the file was opened (proc_mem_open()); a worker
/// never execs once it serves, so that is its mm for life.
///
/// One difference from a fresh open: once the process is gone, the kept
/// descriptor reads as empty (its mm exited: m_start() finds no mm) or
/// fails with ESRCH (reaped: no task), where a fresh open fails with
/// ENOENT. A kept text read that comes back empty or fails is therefore
/// always repeated through a fresh open, which gives exactly
/// what the old per-observation open gave (an error, or empty for a
/// zombie), and the file is not kept; the caller drops every kept file of
/// the process then ([`KeptProcFile::forget`]), so that pagemap too is
/// opened afresh.
#[derive(Debug, Default)]
pub struct KeptProcFile {
    file: Option<File>,
}

impl KeptProcFile {
    /// `/proc/{pid}/{name}` whole into `buf`, as text. `Ok(None)`: the
    /// kept descriptor read nothing or failed (see the type's docs): the caller
    /// forgets the process's files and reads afresh with
    /// [`KeptProcFile::read_fresh`].
    pub fn read<'b>(
        &mut self,
        pid: i32,
        name: &str,
        buf: &'b mut Vec<u8>,
    ) -> std::io::Result<Option<&'b str>> {
        let kept = self.file.is_some();
        if !kept {
            self.file = Some(File::open(format!("/proc/{pid}/{name}"))?);
        }
        let f = self.file.as_ref().expect("opened above");
        let n = match read_whole_at0(f, buf) {
            Ok(n) if n > 0 || !kept => n,
            Err(e) if !kept => return Err(e),
            _ => {
                self.file = None;
                return Ok(None);
            }
        };
        std::str::from_utf8(&buf[..n])
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// `/proc/{pid}/{name}` through a fresh open, not kept (the read the
    /// kept descriptor replaces).
    pub fn read_fresh(pid: i32, name: &str) -> std::io::Result<String> {
        std::fs::read_to_string(format!("/proc/{pid}/{name}"))
    }

    /// The open file (`/proc/{pid}/{name}`, opened now if not kept).
    pub fn file(&mut self, pid: i32, name: &str) -> std::io::Result<&File> {
        if self.file.is_none() {
            self.file = Some(File::open(format!("/proc/{pid}/{name}"))?);
        }
        Ok(self.file.as_ref().expect("opened above"))
    }

    /// Close the kept descriptor: the next read opens the file afresh.
    pub fn forget(&mut self) {
        self.file = None;
    }
}

/// A whole file read with `pread` from offset 0 into `buf` (grown as
/// needed); its length.
pub fn read_whole_at0(f: &File, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.len() < 4096 {
        buf.resize(4096, 0);
    }
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read_at(&mut buf[len..], len as u64) {
            Ok(0) => return Ok(len),
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// What the reader may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// pagemap reports PFNs (CAP_SYS_ADMIN).
    pub pfn: bool,
    /// /proc/kpageflags and /proc/kpagecount are readable (root).
    pub kpage: bool,
    /// The PAGEMAP_SCAN ioctl works (Linux 6.7+).
    pub scan: bool,
    /// PAGEMAP_SCAN knows PAGE_IS_GUARD (Linux 6.15+).
    pub scan_guard: bool,
}

/// Per-page raw facts for one virtual range.
#[derive(Clone, Debug, Default)]
pub struct RawPage {
    pub pagemap: u64,
    /// PAGEMAP_SCAN categories (0 if unavailable).
    pub scan: u64,
}

/// Open handles on one process's pagemap plus the global kpage files.
pub struct Reader {
    pub caps: Caps,
    /// Reads of kpageflags and kpagecount made by [`Reader::frame_facts`].
    pub counters: ReadCounters,
    kpageflags: Option<File>,
    kpagecount: Option<File>,
}

impl Reader {
    pub fn new() -> Reader {
        let kpageflags = File::open("/proc/kpageflags").ok();
        let kpagecount = File::open("/proc/kpagecount").ok();
        let kpage = kpageflags.is_some() && kpagecount.is_some();
        Reader {
            caps: Caps {
                pfn: false,
                kpage,
                scan: true,
                scan_guard: true,
            },
            counters: ReadCounters::default(),
            kpageflags,
            kpagecount,
        }
    }

    /// Pagemap entries and PAGEMAP_SCAN categories for `[start, end)`.
    /// Reads one pagemap word per page of the range: for ranges known to be
    /// populated (see [`Reader::populated`] for finding them).
    pub fn raw_pages(&mut self, pid: i32, start: u64, end: u64) -> std::io::Result<Vec<RawPage>> {
        let f = File::open(format!("/proc/{pid}/pagemap"))?;
        let regions = match self.scan(&f, start, end, PAGE_IS_PRESENT) {
            Ok(r) => r,
            Err(_) => {
                self.caps.scan = false;
                None
            }
        };
        self.raw_pages_in(&f, start, end, regions.as_deref().unwrap_or(&[]))
    }

    /// Pagemap entries of `[start, end)` from the open pagemap `f`, with the
    /// PAGEMAP_SCAN categories of `regions` (`(start, end, categories)`,
    /// as [`Reader::populated`] returns them) filled in.
    pub fn raw_pages_in(
        &mut self,
        f: &File,
        start: u64,
        end: u64,
        regions: &[(u64, u64, u64)],
    ) -> std::io::Result<Vec<RawPage>> {
        let n = ((end - start) / PAGE) as usize;
        let mut buf = vec![0u8; n * 8];
        let mut off = 0;
        while off < buf.len() {
            let got = f.read_at(&mut buf[off..], (start / PAGE) * 8 + off as u64)?;
            if got == 0 {
                break;
            }
            off += got;
        }
        let mut out: Vec<RawPage> = buf
            .chunks_exact(8)
            .map(|c| RawPage {
                pagemap: u64::from_le_bytes(c.try_into().expect("8 bytes")),
                scan: 0,
            })
            .collect();
        if out.iter().any(|p| p.pagemap & PM_PFN_MASK != 0) {
            self.caps.pfn = true;
        }
        for &(s, e, cat) in regions {
            let mut a = s.max(start);
            while a < e.min(end) {
                out[((a - start) / PAGE) as usize].scan = cat;
                a += PAGE;
            }
        }
        Ok(out)
    }

    /// The categories asked back from PAGEMAP_SCAN.
    fn scan_returns(&self) -> u64 {
        let guard = if self.caps.scan_guard {
            PAGE_IS_GUARD
        } else {
            0
        };
        PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_PFNZERO | PAGE_IS_HUGE | PAGE_IS_FILE | guard
    }

    /// The parts of `[start, end)` whose entries are not none (present
    /// pages, the zero pages, swap entries, guard and other markers), as
    /// `(start, end, PAGEMAP_SCAN categories)` in address order, found by
    /// one PAGEMAP_SCAN walk of the page tables: the kernel skips a none
    /// PGD, PUD or PMD entry in one step (pagemap_scan_pte_hole()), so the
    /// cost follows what is populated, not the size of the range. Read-only
    /// (no write-protect flags: nothing is changed or split).
    ///
    /// `Ok(None)` when the ioctl is unavailable (before Linux 6.7): the
    /// caller reads the whole range instead. On a kernel without
    /// PAGE_IS_GUARD (before 6.15) the walk is repeated without it (guard
    /// markers are still found: they are PAGE_IS_SWAPPED, and pagemap's
    /// PM_GUARD_REGION tells them apart).
    /// Linux: fs/proc/task_mmu.c do_pagemap_scan(), pagemap_page_category().
    pub fn populated(
        &mut self,
        f: &File,
        start: u64,
        end: u64,
    ) -> std::io::Result<Option<Vec<(u64, u64, u64)>>> {
        self.scan(f, start, end, PAGE_IS_PRESENT | PAGE_IS_SWAPPED)
    }

    /// PAGEMAP_SCAN for pages with any of `anyof`, learning once which
    /// categories the kernel knows; `Ok(None)` when it has no such ioctl.
    fn scan(
        &mut self,
        f: &File,
        start: u64,
        end: u64,
        anyof: u64,
    ) -> std::io::Result<Option<Vec<(u64, u64, u64)>>> {
        // The ioctl wants page-aligned bounds (EINVAL otherwise, which
        // would read as "unknown category" below).
        let (start, end) = (start & !(PAGE - 1), end.div_ceil(PAGE) * PAGE);
        let unsupported = |e: &std::io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::ENOTTY | libc::EINVAL | libc::EOPNOTSUPP)
            )
        };
        while self.caps.scan {
            match pagemap_scan(f, start, end, anyof, self.scan_returns()) {
                Ok(r) => return Ok(Some(r)),
                // Before 6.15 an unknown category bit is EINVAL: retry without it.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && self.caps.scan_guard => {
                    self.caps.scan_guard = false;
                }
                Err(e) if unsupported(&e) => self.caps.scan = false,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// kpageflags, kpagecount, folio order and index of each of `pfns`
    /// (sorted ascending, distinct, not 0), in that order: `None` where a
    /// word could not be read, and for every frame without root.
    ///
    /// Reads only what is needed: the frames asked for, in runs (frames
    /// fewer than [`FRAME_GAP`] apart share one `pread`, with the frames
    /// in between), plus the frame after each run in its 512-frame block
    /// (it tells where a folio ends). A tail frame whose head or a head
    /// whose end lies outside what was read gets a second (rarely a
    /// third) round of reads, each reaching the 16-, 128- or 512-frame
    /// boundary where a folio of that size would start or end. kpagecount
    /// is read for the runs only. The result is what
    /// [`frame_facts_of_block`] gives from whole blocks
    /// ([`Reader::kpf_block`]), which reads up to 512 times as much for
    /// scattered order-0 frames (the kernel computes every frame's flags
    /// and count it is asked for).
    pub fn frame_facts(&mut self, pfns: &[u64]) -> Vec<Option<FrameFacts>> {
        let (Some(kflags), Some(kcount)) = (&self.kpageflags, &self.kpagecount) else {
            return vec![None; pfns.len()];
        };
        debug_assert!(pfns.windows(2).all(|w| w[0] < w[1]));
        let c = &mut self.counters;
        let runs = coalesce(pfns);
        let mut counts = Words::default();
        counts.read(
            kcount,
            &runs,
            &mut c.kpagecount_reads,
            &mut c.kpagecount_frames,
        );
        let mut plan = normalise(
            runs.iter()
                .map(|&(a, b)| (a, if b % BLOCK != 0 { b + 1 } else { b }))
                .collect(),
        );
        let mut flags = Words::default();
        let mut out = vec![None; pfns.len()];
        let mut pending: Vec<usize> = (0..pfns.len()).collect();
        while !plan.is_empty() {
            flags.read(
                kflags,
                &plan,
                &mut c.kpageflags_reads,
                &mut c.kpageflags_frames,
            );
            let mut need = Vec::new();
            let mut scan = FolioScan {
                flags: &flags,
                back: None,
                fwd: None,
            };
            pending.retain(|&i| {
                let p = pfns[i];
                let f = match flags.get(p) {
                    Word::Known(f) => f,
                    Word::Failed => return false,
                    Word::Unknown => {
                        need.push((p, p + 1));
                        return true;
                    }
                };
                let head = if f & KPF_COMPOUND_TAIL != 0 {
                    match scan.head_of_tail(p) {
                        Back::Head(h) => Some(h),
                        Back::NoHead => None,
                        Back::Failed => return false,
                        Back::Unknown(u) => {
                            need.push(back_range(p, u));
                            return true;
                        }
                    }
                } else if f & KPF_COMPOUND_HEAD != 0 {
                    Some(p)
                } else {
                    None
                };
                let folio = match head {
                    None => None,
                    Some(h) => match scan.tails_of(h) {
                        Fwd::Tails(t) => Some((h, t)),
                        Fwd::Failed => return false,
                        Fwd::Unknown(k) => {
                            need.push(forward_range(h, k));
                            return true;
                        }
                    },
                };
                let Word::Known(count) = counts.get(p) else {
                    return false;
                };
                let (order, index) = order_index(p, folio);
                out[i] = Some(FrameFacts {
                    flags: f,
                    count,
                    order,
                    index,
                });
                false
            });
            plan = normalise(need);
        }
        out
    }

    /// [`FrameFacts`] of `pfn` the straightforward way: its whole 512-frame
    /// block of kpageflags and kpagecount ([`Reader::kpf_block`], cached in
    /// `cache`). The reference for [`Reader::frame_facts`].
    pub fn frame_facts_by_block(
        &self,
        cache: &mut HashMap<u64, (Vec<u64>, Vec<u64>)>,
        pfn: u64,
    ) -> Option<FrameFacts> {
        let (flags, count) = self.kpf_block(cache, pfn)?;
        Some(frame_facts_of_block(flags, count, pfn))
    }

    /// kpageflags of the 512-frame block holding `pfn`, cached in `cache`.
    pub fn kpf_block<'a>(
        &self,
        cache: &'a mut HashMap<u64, (Vec<u64>, Vec<u64>)>,
        pfn: u64,
    ) -> Option<&'a (Vec<u64>, Vec<u64>)> {
        let (Some(flags), Some(count)) = (&self.kpageflags, &self.kpagecount) else {
            return None;
        };
        let block = pfn >> 9;
        if let std::collections::hash_map::Entry::Vacant(v) = cache.entry(block) {
            let read = |f: &File| -> Option<Vec<u64>> {
                let mut b = vec![0u8; 512 * 8];
                let n = f.read_at(&mut b, (block << 9) * 8).ok()?;
                let mut words: Vec<u64> = b[..n - n % 8]
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                words.resize(512, 0);
                Some(words)
            };
            v.insert((read(flags)?, read(count)?));
        }
        cache.get(&block)
    }
}

#[cfg(test)]
impl Reader {
    /// A reader over stand-in kpageflags and kpagecount files.
    fn with_kpage_files(kpageflags: File, kpagecount: File) -> Reader {
        Reader {
            kpageflags: Some(kpageflags),
            kpagecount: Some(kpagecount),
            ..Reader::new()
        }
    }
}

impl Default for Reader {
    fn default() -> Self {
        Self::new()
    }
}

#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `PAGEMAP_SCAN` over `[start, end)`: runs of pages having any of the
/// categories `anyof`, with the categories `returns` asks for. Read-only:
/// no write-protect flags are passed, so nothing is changed or split.
fn pagemap_scan(
    f: &File,
    start: u64,
    end: u64,
    anyof: u64,
    returns: u64,
) -> std::io::Result<Vec<(u64, u64, u64)>> {
    use std::os::fd::AsRawFd;
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    let mut cur = start;
    // Room for many regions per call: each call walks again from where
    // the last one stopped (a range of scattered single pages is
    // thousands of regions).
    // 256 regions per call. Tried: 4096 (fewer calls for thousands of
    // one-page regions) made the pages of uffd-move's from-space appear
    // twice after ~500 moves on 6.18.44 — not understood yet (the kernel
    // buffers at most 512 regions per internal flush), so left at 256.
    let mut regions = vec![[0u64; 3]; 256];
    while cur < end {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            start: cur,
            end,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            category_anyof_mask: anyof,
            return_mask: returns,
            ..Default::default()
        };
        // SAFETY: arg and regions are valid for the ioctl's duration.
        let n = unsafe { libc::ioctl(f.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        for r in regions.iter().take(n as usize) {
            // A region cut where one call's buffer filled continues in the
            // next call: join the pieces.
            match out.last_mut() {
                Some(last) if last.1 == r[0] && last.2 == r[2] => last.1 = r[1],
                _ => out.push((r[0], r[1], r[2])),
            }
        }
        if arg.walk_end <= cur || arg.walk_end >= end {
            break;
        }
        cur = arg.walk_end;
    }
    Ok(out)
}

// ----- frame facts: kpageflags and kpagecount for the observed frames ------

/// What `/proc/kpageflags` and `/proc/kpagecount` say about one frame, with
/// the order of its folio and the frame's index in it (from the
/// `COMPOUND_HEAD`/`COMPOUND_TAIL` flags of the frames around it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameFacts {
    pub flags: u64,
    pub count: u64,
    pub order: u8,
    pub index: u32,
}

/// How many reads the frame readers made, and of how many frames (8-byte
/// words) each: the cost of kpageflags and kpagecount is per frame
/// (`stable_page_flags()`, `page_mapcount()` in the kernel), so both
/// numbers matter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounters {
    pub kpageflags_reads: u64,
    pub kpageflags_frames: u64,
    pub kpagecount_reads: u64,
    pub kpagecount_frames: u64,
}

/// Frames further apart than this are read with separate calls; closer ones
/// with one call that also reads the frames in between (a few extra frames
/// cost less than a system call).
pub const FRAME_GAP: u64 = 8;

/// The frames of one 512-frame block (the largest folio ptlab reads
/// order and index for: order 9, naturally aligned in PFN space).
const BLOCK: u64 = 512;

/// One stretch of 8-byte words read from a kpage file; `ok == false` when
/// the read failed (every word of it is then unknown).
struct WordRun {
    start: u64,
    words: Vec<u64>,
    ok: bool,
}

/// Words read so far from one kpage file, as sorted non-overlapping runs.
#[derive(Default)]
struct Words {
    runs: Vec<WordRun>,
}

enum Word {
    Known(u64),
    Failed,
    Unknown,
}

impl Words {
    fn get(&self, pfn: u64) -> Word {
        let i = self.runs.partition_point(|r| r.start <= pfn);
        match i.checked_sub(1).map(|i| &self.runs[i]) {
            Some(r) if pfn < r.start + r.words.len() as u64 => {
                if r.ok {
                    Word::Known(r.words[(pfn - r.start) as usize])
                } else {
                    Word::Failed
                }
            }
            _ => Word::Unknown,
        }
    }

    /// Read the parts of `ranges` (sorted, disjoint) not read yet, one
    /// call per piece.
    fn read(&mut self, f: &File, ranges: &[(u64, u64)], reads: &mut u64, frames: &mut u64) {
        let mut new = Vec::new();
        for &(a, b) in ranges {
            // Cut out what is known already.
            let mut cur = a;
            let first = self
                .runs
                .partition_point(|r| r.start + r.words.len() as u64 <= a);
            for r in &self.runs[first..] {
                if r.start >= b {
                    break;
                }
                if r.start > cur {
                    new.push(read_words(f, cur, r.start, reads, frames));
                }
                cur = cur.max(r.start + r.words.len() as u64);
            }
            if cur < b {
                new.push(read_words(f, cur, b, reads, frames));
            }
        }
        if !new.is_empty() {
            self.runs.append(&mut new);
            self.runs.sort_by_key(|r| r.start);
        }
    }
}

/// Words `[a, b)` of a kpage file in one `pread` (more only if the kernel
/// returns less than asked before the end of the file). Words past the
/// end read 0, as a frame the kernel does not have.
fn read_words(f: &File, a: u64, b: u64, reads: &mut u64, frames: &mut u64) -> WordRun {
    let mut words = vec![0u64; (b - a) as usize];
    // SAFETY: a byte view of the u64 buffer; every byte pattern is a valid u64.
    let buf =
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) };
    let mut off = 0;
    let mut ok = true;
    while off < buf.len() {
        *reads += 1;
        match f.read_at(&mut buf[off..], a * 8 + off as u64) {
            Ok(0) => break,
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => {
                ok = false;
                break;
            }
        }
    }
    *frames += b - a;
    // A partial word at the end of the file reads as 0, as kpf_block does.
    let whole = off / 8;
    for w in &mut words[whole..] {
        *w = 0;
    }
    WordRun {
        start: a,
        words,
        ok,
    }
}

/// Sorted, distinct `pfns` as runs `[a, b)`, joining runs less than
/// [`FRAME_GAP`] frames apart.
fn coalesce(pfns: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &p in pfns {
        match out.last_mut() {
            Some(last) if p < last.1 + FRAME_GAP => last.1 = last.1.max(p + 1),
            _ => out.push((p, p + 1)),
        }
    }
    out
}

/// Join sorted-or-not ranges into sorted disjoint ranges (touching or
/// less than [`FRAME_GAP`] apart join).
fn normalise(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a < last.1 + FRAME_GAP => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Where the backward scan from a tail frame for its head ended.
#[derive(Clone, Copy)]
enum Back {
    /// At a `COMPOUND_HEAD` frame.
    Head(u64),
    /// At the start of the block, without a head.
    NoHead,
    /// At a frame whose read failed.
    Failed,
    /// At a frame not read yet.
    Unknown(u64),
}

/// Where the forward count of a head's tail frames ended.
#[derive(Clone, Copy)]
enum Fwd {
    Tails(u64),
    Failed,
    Unknown(u64),
}

/// Finds the folio of each frame from the kpageflags words read so far,
/// remembering the last scans so that the frames of one folio (which come
/// one after another in PFN order) cost one scan between them.
struct FolioScan<'a> {
    flags: &'a Words,
    /// A backward scan that reaches a frame in `[lo, hi]` (all known
    /// non-head frames) ends as the scan that recorded it did.
    back: Option<(u64, u64, Back)>,
    /// The tail count of the last head.
    fwd: Option<(u64, Fwd)>,
}

impl FolioScan<'_> {
    /// The nearest `COMPOUND_HEAD` frame before the tail frame `pfn` in
    /// its 512-frame block (any frame in between is skipped, as
    /// [`frame_facts_of_block`] does).
    fn head_of_tail(&mut self, pfn: u64) -> Back {
        let block = pfn & !(BLOCK - 1);
        let mut j = pfn;
        let (r, lo) = loop {
            if j == block {
                break (Back::NoHead, block);
            }
            j -= 1;
            if let Some((lo, hi, r)) = self.back {
                if lo <= j && j <= hi && lo >= block {
                    break (r, lo);
                }
            }
            match self.flags.get(j) {
                Word::Known(x) if x & KPF_COMPOUND_HEAD != 0 => break (Back::Head(j), j + 1),
                Word::Known(_) => {}
                Word::Failed => break (Back::Failed, j + 1),
                Word::Unknown => break (Back::Unknown(j), j + 1),
            }
        };
        self.back = Some((lo, pfn, r));
        r
    }

    /// How many `COMPOUND_TAIL` frames follow the head `h` in its block.
    fn tails_of(&mut self, h: u64) -> Fwd {
        if let Some((mh, r)) = self.fwd {
            if mh == h {
                return r;
            }
        }
        let end = (h & !(BLOCK - 1)) + BLOCK;
        let mut k = h + 1;
        let r = loop {
            if k == end {
                break Fwd::Tails(k - h - 1);
            }
            match self.flags.get(k) {
                Word::Known(x) if x & KPF_COMPOUND_TAIL != 0 => k += 1,
                Word::Known(_) => break Fwd::Tails(k - h - 1),
                Word::Failed => break Fwd::Failed,
                Word::Unknown => break Fwd::Unknown(k),
            }
        };
        self.fwd = Some((h, r));
        r
    }
}

/// Frames to read next to find the head of the tail frame `pfn` when the
/// backward scan stopped at the unread frame `unknown`: up to the
/// 16-, 128- or 512-aligned frame below `pfn` (the smallest that reaches
/// `unknown`), where a folio of that size would start.
fn back_range(pfn: u64, unknown: u64) -> (u64, u64) {
    for a in [16, 128, BLOCK] {
        let s = pfn & !(a - 1);
        if s <= unknown {
            return (s, unknown + 1);
        }
    }
    (pfn & !(BLOCK - 1), unknown + 1)
}

/// Frames to read next to count the tails of the head `h` when the count
/// stopped at the unread frame `unknown`: up to the first 16-, 128- or
/// 512-frame boundary after `h` at or past `unknown`, and the frame at it
/// (a folio of that size ends there, and the frame after a folio is no
/// tail), within the block.
fn forward_range(h: u64, unknown: u64) -> (u64, u64) {
    let block_end = (h & !(BLOCK - 1)) + BLOCK;
    for a in [16, 128, BLOCK] {
        let e = (h + 1).div_ceil(a) * a;
        if e >= unknown {
            return (unknown, (e + 1).min(block_end));
        }
    }
    (unknown, block_end)
}

/// Order and index of `pfn` in the folio starting at `h` with `tails`
/// tail frames.
fn order_index(pfn: u64, folio: Option<(u64, u64)>) -> (u8, u32) {
    match folio {
        Some((h, tails)) => {
            let size = tails + 1;
            (63 - size.leading_zeros() as u8, (pfn - h) as u32)
        }
        None => (0, 0),
    }
}

/// Facts of frame `pfn` from the kpageflags and kpagecount words of its
/// whole 512-frame block (`flags[i]`, `count[i]` for frame `block + i`):
/// the folio's head is the nearest `COMPOUND_HEAD` frame at or before it
/// in the block, its size the head plus the `COMPOUND_TAIL` frames right
/// after it. The reference [`Reader::frame_facts`] must agree with.
pub fn frame_facts_of_block(flags: &[u64], count: &[u64], pfn: u64) -> FrameFacts {
    let o = (pfn & (BLOCK - 1)) as usize;
    let f = flags[o];
    let head = if f & KPF_COMPOUND_TAIL != 0 {
        (0..o).rev().find(|&j| flags[j] & KPF_COMPOUND_HEAD != 0)
    } else if f & KPF_COMPOUND_HEAD != 0 {
        Some(o)
    } else {
        None
    };
    let (order, index) = match head {
        Some(h) => {
            let tails = flags[h + 1..]
                .iter()
                .take_while(|&&x| x & KPF_COMPOUND_TAIL != 0)
                .count();
            let size = (tails + 1) as u64;
            (63 - size.leading_zeros() as u8, (o - h) as u32)
        }
        None => (0, 0),
    };
    FrameFacts {
        flags: f,
        count: count[o],
        order,
        index,
    }
}

// ----- THP counters ---------------------------------------------------------

/// Current THP counters, keyed like the model (`64kB/anon_fault_alloc`,
/// `vmstat/thp_split_pmd`): every file under `hugepages-<N>kB/stats/` for
/// sizes 16kB..2048kB (orders 2..9) and every `thp_*` line of
/// `/proc/vmstat`. The diff compares the keys the model reports.
pub fn read_thp_counters() -> BTreeMap<String, i64> {
    ThpCounters::open().read()
}

/// The THP counter files of [`read_thp_counters`], opened once and read
/// again with one `pread` at offset 0 each: sysfs attributes and
/// `/proc/vmstat` are produced afresh by every read from offset 0, so
/// this sees the same values as opening them anew, without ~140
/// directory listings, opens and closes per observation.
///
/// Every counter has a fixed index, given once at [`ThpCounters::open`]
/// ([`ThpCounters::keys`]): a read ([`ThpCounters::read_values`]) fills a
/// vector by position and allocates nothing; `/proc/vmstat` is parsed by
/// line position (its lines are `vmstat_text[]`, fixed when the kernel was
/// built: Linux mm/vmstat.c vmstat_start()), each line's name checked
/// against the one recorded at open, and found by name should it ever
/// differ.
pub struct ThpCounters {
    /// Key of every index: the per-size files first, then the vmstat lines.
    keys: Vec<String>,
    /// Per-size counter files, file `i` being index `i`.
    files: Vec<Option<File>>,
    /// Whether file `i` is read: [`ThpCounters::keep_only`] clears it (its
    /// value then reads as `None`: left out, as a file never opened);
    /// [`ThpCounters::take`] sets them all again.
    kept: Vec<bool>,
    /// The folio order of file `i` (its `hugepages-<N>kB` directory).
    file_orders: Vec<u8>,
    /// The orders (bit `o`) whose per-size files are read; bit 9 also
    /// reads `/proc/vmstat` (its `thp_*` and `numa_*` lines are order 9's,
    /// as crate::diff::counters_out_of_reach counts them). A counter of
    /// another order reads as `None` ([`ThpCounters::read_orders`]);
    /// [`ThpCounters::take`] sets them all again.
    orders: u16,
    vmstat: Option<File>,
    /// For each line of `/proc/vmstat` at open: its name and, for a
    /// `thp_*` or `numa_*` line, its index.
    vm_lines: Vec<(Box<[u8]>, Option<usize>)>,
    buf: Vec<u8>,
}

/// Orders 2..=9 (bit `o`): every order with THP counters.
pub const ALL_COUNTER_ORDERS: u16 = 0x3fc;

/// Counter sets given back by live backends that ended
/// ([`ThpCounters::take`]).
static COUNTER_POOL: std::sync::Mutex<Vec<ThpCounters>> = std::sync::Mutex::new(Vec::new());

/// The values of one [`ThpCounters`] read, by index (`None`: the file
/// could not be read or parsed, or is not kept).
pub type CounterValues = Vec<Option<i64>>;

/// The `thp_*` and `numa_*` values of `/proc/vmstat` text into `out` by
/// the index `vm_lines` (name and index of every line, recorded at open)
/// gives: the line at the same position when its name matches (always, on
/// a running kernel), else the line of that name.
fn parse_vmstat_into(
    vm_lines: &[(Box<[u8]>, Option<usize>)],
    text: &[u8],
    out: &mut [Option<i64>],
) {
    let mut pos = 0;
    for line in text.split(|&c| c == b'\n') {
        let mut it = line.splitn(2, |&c| c == b' ');
        let name = it.next().unwrap_or(b"");
        if name.is_empty() {
            continue;
        }
        let value = it.next().unwrap_or(b"");
        let slot = match vm_lines.get(pos) {
            Some((n, slot)) if **n == *name => *slot,
            _ => vm_lines
                .iter()
                .find(|(n, _)| **n == *name)
                .and_then(|(_, s)| *s),
        };
        pos += 1;
        if let Some(i) = slot {
            out[i] = parse_i64(value);
        }
    }
}

/// Parse a decimal `i64` (optionally signed) from ASCII bytes, surrounding
/// whitespace allowed.
fn parse_i64(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

impl ThpCounters {
    pub fn open() -> ThpCounters {
        let mut keys = Vec::new();
        let mut files = Vec::new();
        let mut file_orders = Vec::new();
        for order in 2u32..=9 {
            let size = format!("{}kB", 4u64 << order);
            let dir = format!("{}/hugepages-{size}/stats", crate::knobs::THP_DIR);
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<(String, File)> = rd
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    Some((format!("{size}/{name}"), File::open(e.path()).ok()?))
                })
                .collect();
            names.sort_by(|x, y| x.0.cmp(&y.0));
            for (k, f) in names {
                keys.push(k);
                files.push(Some(f));
                file_orders.push(order as u8);
            }
        }
        let mut me = ThpCounters {
            keys,
            kept: vec![true; files.len()],
            files,
            file_orders,
            orders: ALL_COUNTER_ORDERS,
            vmstat: File::open("/proc/vmstat").ok(),
            vm_lines: Vec::new(),
            buf: vec![0; 64 << 10],
        };
        let len = me.read_vmstat();
        let mut vm_lines = Vec::new();
        for line in me.buf[..len].split(|&c| c == b'\n') {
            let name = line.split(|&c| c == b' ').next().unwrap_or(b"");
            if name.is_empty() {
                continue;
            }
            let slot = (name.starts_with(b"thp_") || name.starts_with(b"numa_")).then(|| {
                me.keys
                    .push(format!("vmstat/{}", String::from_utf8_lossy(name)));
                me.keys.len() - 1
            });
            vm_lines.push((name.into(), slot));
        }
        me.vm_lines = vm_lines;
        me
    }

    /// The key of every index of [`ThpCounters::read_values`].
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Read from now on only the per-size counters whose key `keep`
    /// accepts (`/proc/vmstat` is one file: always read whole). Indices
    /// stay as they were; a dropped counter reads as `None`.
    pub fn keep_only(&mut self, keep: impl Fn(&str) -> bool) {
        for (k, f) in self.keys.iter().zip(self.kept.iter_mut()) {
            if !keep(k) {
                *f = false;
            }
        }
    }

    /// Read from now on only the counters of the orders in `orders` (bit
    /// `o`; order 9 includes `/proc/vmstat`): the others read as `None`
    /// until a later call names their order again. Indices stay as they
    /// were.
    pub fn read_orders(&mut self, orders: u16) {
        self.orders = orders;
    }

    /// The folio order index `i` counts for: its size's, or 9 for a
    /// `/proc/vmstat` line (crate::diff::counters_out_of_reach).
    pub fn order_of(&self, i: usize) -> u8 {
        self.file_orders.get(i).copied().unwrap_or(9)
    }

    /// Whether index `i` is left out only because its order is not read
    /// ([`ThpCounters::read_orders`]): a kept counter whose order a later
    /// [`ThpCounters::read_orders`] may name again.
    pub fn order_skipped(&self, i: usize) -> bool {
        let kept = self.kept.get(i).copied().unwrap_or(true);
        kept && self.orders & (1 << self.order_of(i)) == 0
    }

    /// A set of counter files another live backend of this process gave
    /// back ([`ThpCounters::give_back`]), every file read again, or one
    /// opened now. Saves each backend (each `ptlab fuzz` case and re-run)
    /// listing eight directories and opening ~150 files: the files are
    /// the same (the sizes are fixed at boot: Linux mm/huge_memory.c
    /// sysfs_add_group() per order in thp_orders), and every read is a
    /// `pread` from offset 0, which sysfs and `/proc/vmstat` answer afresh.
    pub fn take() -> ThpCounters {
        let pooled = COUNTER_POOL.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match pooled {
            Some(mut c) => {
                c.kept.iter_mut().for_each(|k| *k = true);
                c.orders = ALL_COUNTER_ORDERS;
                c
            }
            None => ThpCounters::open(),
        }
    }

    /// Keep this set for the next [`ThpCounters::take`] (at most a few:
    /// one per backend that runs at once).
    pub fn give_back(self) {
        let mut pool = COUNTER_POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < 8 && !self.keys.is_empty() {
            pool.push(self);
        }
    }

    /// A set with no files (a placeholder: reads nothing).
    pub fn empty() -> ThpCounters {
        ThpCounters {
            keys: Vec::new(),
            files: Vec::new(),
            kept: Vec::new(),
            file_orders: Vec::new(),
            orders: ALL_COUNTER_ORDERS,
            vmstat: None,
            vm_lines: Vec::new(),
            buf: Vec::new(),
        }
    }

    /// `/proc/vmstat` whole into `buf`; its length.
    fn read_vmstat(&mut self) -> usize {
        let Some(f) = &self.vmstat else { return 0 };
        // /proc/vmstat is a few KiB; read it whole.
        let mut len = 0;
        loop {
            if len == self.buf.len() {
                self.buf.resize(len * 2, 0);
            }
            match f.read_at(&mut self.buf[len..], len as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
        }
        len
    }

    /// The counters now, by index into `out` (resized to
    /// [`ThpCounters::keys`]); a file that cannot be read or parsed reads
    /// as `None`.
    pub fn read_values(&mut self, out: &mut CounterValues) {
        out.clear();
        out.resize(self.keys.len(), None);
        for (i, (f, &kept)) in self.files.iter().zip(&self.kept).enumerate() {
            let (Some(f), true) = (f, kept) else { continue };
            if self.orders & (1 << self.file_orders[i]) == 0 {
                continue;
            }
            if let Ok(n) = f.read_at(&mut self.buf, 0) {
                out[i] = parse_i64(&self.buf[..n]);
            }
        }
        if self.orders & (1 << 9) != 0 {
            let len = self.read_vmstat();
            parse_vmstat_into(&self.vm_lines, &self.buf[..len], out);
        }
    }

    /// `values` as a map keyed like the model (only the indices that
    /// have a value).
    pub fn to_map(&self, values: &[Option<i64>]) -> BTreeMap<String, i64> {
        self.keys
            .iter()
            .zip(values)
            .filter_map(|(k, v)| v.map(|v| (k.clone(), v)))
            .collect()
    }

    /// The counters now (a file that cannot be read or parsed is left out).
    pub fn read(&mut self) -> BTreeMap<String, i64> {
        let mut v = Vec::new();
        self.read_values(&mut v);
        self.to_map(&v)
    }
}

/// khugepaged's `pages_collapsed`: the PMD ranges the khugepaged thread
/// has collapsed since boot (Linux mm/khugepaged.c: counted in
/// khugepaged_scan_mm_slot() only, not by MADV_COLLAPSE). `None` where
/// the file is missing or unreadable.
pub fn khugepaged_pages_collapsed() -> Option<u64> {
    std::fs::read_to_string(format!(
        "{}/khugepaged/pages_collapsed",
        crate::knobs::THP_DIR
    ))
    .ok()?
    .trim()
    .parse()
    .ok()
}

#[cfg(test)]
mod tests {

    /// vmstat lines are read by position, found by name when a line is
    /// not where it was at open, and only the kept ones fill their index.
    #[test]
    fn vmstat_by_position_and_by_name() {
        let layout: Vec<(Box<[u8]>, Option<usize>)> = vec![
            (b"nr_free_pages".to_vec().into(), None),
            (b"numa_hit".to_vec().into(), Some(2)),
            (b"thp_fault_alloc".to_vec().into(), Some(0)),
            (b"thp_split_pmd".to_vec().into(), Some(1)),
        ];
        let mut out = vec![None; 3];
        super::parse_vmstat_into(
            &layout,
            b"nr_free_pages 5\nnuma_hit 7\nthp_fault_alloc 11\nthp_split_pmd 13\n",
            &mut out,
        );
        assert_eq!(out, vec![Some(11), Some(13), Some(7)]);
        // Lines moved, one missing, one unknown, a value unparsable.
        let mut out = vec![None; 3];
        super::parse_vmstat_into(
            &layout,
            b"thp_split_pmd 3\nnew_counter 9\nthp_fault_alloc x\nnuma_hit -4\n",
            &mut out,
        );
        assert_eq!(out, vec![None, Some(3), Some(-4)]);
    }

    /// On this machine: the values read by index are those a parse of the
    /// files by name gives (sysfs files and vmstat lines whose values do
    /// not move between the two reads: compared twice around).
    #[test]
    fn counters_by_index_match_the_files() {
        let mut c = super::ThpCounters::open();
        let mut v = Vec::new();
        c.read_values(&mut v);
        assert_eq!(v.len(), c.keys().len());
        let by_name = |k: &str| -> Option<i64> {
            if let Some(name) = k.strip_prefix("vmstat/") {
                let t = std::fs::read_to_string("/proc/vmstat").ok()?;
                t.lines().find_map(|l| {
                    let mut it = l.split_whitespace();
                    (it.next() == Some(name)).then(|| it.next()?.parse().ok())?
                })
            } else {
                let (size, name) = k.split_once('/')?;
                let p = format!("{}/hugepages-{size}/stats/{name}", crate::knobs::THP_DIR);
                std::fs::read_to_string(p).ok()?.trim().parse().ok()
            }
        };
        let mut w = Vec::new();
        for (i, k) in c.keys().to_vec().iter().enumerate() {
            let direct = by_name(k);
            c.read_values(&mut w);
            // A counter that moved meanwhile (numa_hit under load) is
            // skipped: only a stable value can be compared.
            if v[i] == w[i] {
                assert_eq!(direct, v[i], "{k}");
            }
            v = w.clone();
        }
        assert!(c.keys().iter().any(|k| k == "vmstat/thp_fault_alloc"));
        c.keep_only(|k| k.starts_with("64kB/"));
        c.read_values(&mut w);
        for (k, x) in c.keys().iter().zip(&w) {
            if k.contains("kB/") && !k.starts_with("64kB/") {
                assert_eq!(*x, None, "{k} was dropped");
            }
        }
    }

    /// `read_orders` reads the files of the orders it names (and
    /// `/proc/vmstat` with order 9) and leaves every other index `None`,
    /// which `order_skipped` tells from a dropped or unreadable file.
    #[test]
    fn counters_of_the_orders_named_only() {
        let mut c = super::ThpCounters::open();
        if !c.keys().iter().any(|k| k.starts_with("64kB/")) {
            eprintln!("SKIP: no 64kB THP counters on this machine");
            return;
        }
        c.keep_only(|k| !k.starts_with("32kB/"));
        let mut w = Vec::new();
        for orders in [1u16 << 4, (1 << 4) | (1 << 9), 0, super::ALL_COUNTER_ORDERS] {
            c.read_orders(orders);
            c.read_values(&mut w);
            for (i, (k, x)) in c.keys().iter().zip(&w).enumerate() {
                let order = c.order_of(i);
                let want = if k.starts_with("vmstat/") {
                    order == 9
                } else {
                    let kb: u64 = k.split("kB/").next().unwrap().parse().unwrap();
                    assert_eq!(4u64 << order, kb, "{k}");
                    !k.starts_with("32kB/")
                } && orders & (1 << order) != 0;
                assert_eq!(x.is_some(), want, "{k} with orders {orders:#x}");
                let skipped = !k.starts_with("32kB/") && orders & (1 << order) == 0;
                assert_eq!(c.order_skipped(i), skipped, "{k} with orders {orders:#x}");
            }
        }
    }

    #[test]
    fn numa_maps_lines() {
        let t = "55f6bf335000 default file=/usr/bin/cat mapped=2 N0=2 kernelpagesize_kB=4
7f0000000000 default anon=48 dirty=48 active=0 mapmax=2 N0=32 N1=16 kernelpagesize_kB=4
7f0000100000 bind:1 anon=1 dirty=1 N1=1 kernelpagesize_kB=4
7f0000200000 default
garbage
";
        let m = super::parse_numa_maps(t);
        assert_eq!(m.len(), 4);
        let e = &m[&0x7f00_0000_0000];
        assert_eq!((e.anon, e.mapmax), (48, 2));
        assert_eq!(e.nodes, vec![(0, 32), (1, 16)]);
        assert_eq!(
            e.line(),
            "7f0000000000 default anon=48 mapmax=2 N0=32 N1=16 kernelpagesize_kB=4"
        );
        assert_eq!(m[&0x7f00_0010_0000].policy, "bind:1");
        assert_eq!(m[&0x7f00_0020_0000].line(), "7f0000200000 default");
        assert_eq!(m[&0x55f6_bf33_5000].anon, 0);
    }

    /// The live kernel prints numa_maps for this process, every page on a
    /// node this machine has.
    #[test]
    fn own_numa_maps_parse() {
        let pid = std::process::id() as i32;
        let Ok(m) = super::read_numa_maps(pid) else {
            eprintln!(
                "SKIP: own_numa_maps_parse: no /proc/self/numa_maps (kernel without CONFIG_NUMA)"
            );
            return;
        };
        assert!(!m.is_empty());
        let nodes = crate::budget::memory_nodes();
        for e in m.values() {
            assert!(e.nodes.iter().all(|(n, _)| *n < nodes), "{e:?}");
        }
    }

    #[test]
    fn status_kb_fields() {
        let t = "Name:\tptlab\nVmSize:\t  2492 kB\nVmLck:\t       8 kB\nThreads:\t1\n";
        let m = super::parse_status(t);
        assert_eq!(m.get("VmSize"), Some(&2492));
        assert_eq!(m.get("VmLck"), Some(&8));
        assert!(!m.contains_key("Threads") && !m.contains_key("Name"));
    }

    use super::*;

    /// `Reader::frame_facts` against `frame_facts_of_block` over stand-in
    /// kpageflags/kpagecount files: random folio layouts (orders 0, 2, 4, 9,
    /// naturally aligned), random sets of frames asked for (dense, sparse,
    /// tails without their heads, heads without their tails), and a file
    /// that ends inside a block (frames past the end read 0).
    #[test]
    fn frame_facts_equal_block_facts() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let dir = std::env::temp_dir().join(format!("ptlab-kpf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for case in 0..40 {
            // 4 blocks, the last one cut short in half the cases.
            let n = if case % 2 == 0 { 2048 } else { 1536 + 100 };
            let mut flags = vec![0u64; n];
            let mut count = vec![0u64; n];
            let mut i = 0;
            while i < n {
                let order = [0, 0, 0, 2, 4, 9][(rnd() % 6) as usize];
                let size = 1usize << order;
                let fits = i % size == 0 && i + size <= n && i / 512 == (i + size - 1) / 512;
                let size = if order > 0 && fits { size } else { 1 };
                for k in 0..size {
                    let other = rnd() & (KPF_ANON | KPF_ANON_EXCLUSIVE | KPF_THP | 1);
                    flags[i + k] = other
                        | match (size, k) {
                            (1, _) => 0,
                            (_, 0) => KPF_COMPOUND_HEAD,
                            _ => KPF_COMPOUND_TAIL,
                        };
                    count[i + k] = rnd() % 4;
                }
                i += size;
            }
            let bytes = |w: &[u64]| w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            let (fp, cp) = (dir.join("flags"), dir.join("count"));
            std::fs::write(&fp, bytes(&flags)).expect("write");
            std::fs::write(&cp, bytes(&count)).expect("write");
            let mut r = Reader::with_kpage_files(
                File::open(&fp).expect("open"),
                File::open(&cp).expect("open"),
            );
            // Padded to whole blocks, as kpf_block reads them.
            let (mut pf, mut pc) = (flags.clone(), count.clone());
            pf.resize(2048, 0);
            pc.resize(2048, 0);
            let density = [1, 2, 9, 40, 300][case % 5];
            let mut pfns: Vec<u64> = (1..2048u64).filter(|_| rnd() % density == 0).collect();
            if case % 3 == 0 {
                // Every frame of one block but its first: tails without heads.
                pfns.extend(513..1024);
                pfns.sort_unstable();
                pfns.dedup();
            }
            let got = r.frame_facts(&pfns);
            for (p, g) in pfns.iter().zip(&got) {
                let b = (*p & !511) as usize;
                let want = frame_facts_of_block(&pf[b..b + 512], &pc[b..b + 512], *p);
                assert_eq!(*g, Some(want), "case {case}, frame {p}");
            }
            // Never more than the frames asked for, the one after each run
            // and what the folios' heads and ends need.
            assert!(r.counters.kpageflags_frames <= 2048 * 2, "{:?}", r.counters);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The observed frames are read in sorted runs: frames fewer than
    /// FRAME_GAP apart share a run, others start a new one.
    #[test]
    fn coalesce_joins_frames_closer_than_the_gap() {
        assert_eq!(coalesce(&[]), vec![]);
        assert_eq!(coalesce(&[5]), vec![(5, 6)]);
        // 1..=3 consecutive, 10 within the gap of 3, 10 + FRAME_GAP not.
        let g = FRAME_GAP;
        assert_eq!(
            coalesce(&[1, 2, 3, 3 + g - 1, 3 + 2 * g, 3 + 2 * g + 1]),
            vec![(1, 3 + g), (3 + 2 * g, 3 + 2 * g + 2)]
        );
        // Every frame asked for lies in exactly one run; runs are sorted,
        // disjoint and at least FRAME_GAP apart.
        let mut seed = 0x1234_5678_9abc_def1u64;
        for _ in 0..100 {
            let mut pfns: Vec<u64> = (0..64)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % 4096
                })
                .collect();
            pfns.sort_unstable();
            pfns.dedup();
            let runs = coalesce(&pfns);
            assert!(runs.windows(2).all(|w| w[1].0 >= w[0].1 + g), "{runs:?}");
            for p in &pfns {
                assert_eq!(runs.iter().filter(|r| r.0 <= *p && *p < r.1).count(), 1);
            }
            // No run reads more than the gap beyond what was asked for.
            for r in &runs {
                assert!(pfns.contains(&r.0) && pfns.contains(&(r.1 - 1)), "{r:?}");
            }
        }
    }

    #[test]
    fn normalise_sorts_and_joins_ranges() {
        let g = FRAME_GAP;
        assert_eq!(
            normalise(vec![(100, 110), (0, 4), (2, 8), (8 + g - 1, 20)]),
            vec![(0, 20), (100, 110)]
        );
        assert_eq!(
            normalise(vec![(0, 1), (1 + g, 2 + g)]),
            vec![(0, 1), (1 + g, 2 + g)]
        );
    }

    #[test]
    fn smaps_parses() {
        let t = "\
7f0000000000-7f0000040000 rw-p 00000000 00:00 0 
Size:                256 kB
Rss:                  64 kB
AnonHugePages:         0 kB
VmFlags: rd wr mr mw me ac 
7f0000040000-7f0000041000 r--p 00001000 fd:01 1234                       /usr/lib/libc.so
Rss:                   4 kB
AnonHugePages:      2048 kB
VmFlags: rd mr mw me 
";
        let v = parse_smaps(t);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].start, 0x7f00_0000_0000);
        assert_eq!(v[0].perms, "rw-p");
        assert_eq!(v[0].rss_kb, 64);
        assert_eq!(v[0].vm_flags, vec!["rd", "wr", "mr", "mw", "me", "ac"]);
        assert!(v[0].is_plain_anon());
        assert!(!v[1].is_plain_anon());
        assert_eq!(v[1].anon_huge_kb, 2048);
    }

    /// A counter set given back after `keep_only` dropped every file comes
    /// back from the pool whole: the keys of a fresh open, a value at
    /// every index a fresh open reads.
    #[test]
    fn pooled_counters_read_every_file_again() {
        let mut c = super::ThpCounters::take();
        c.keep_only(|_| false);
        c.give_back();
        let mut c = super::ThpCounters::take();
        let mut fresh = super::ThpCounters::open();
        assert_eq!(c.keys(), fresh.keys());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        c.read_values(&mut a);
        fresh.read_values(&mut b);
        let some = |v: &[Option<i64>]| v.iter().map(Option::is_some).collect::<Vec<_>>();
        assert_eq!(some(&a), some(&b));
        c.give_back();
    }

    /// A kept-open `/proc/PID/` file read from offset 0 shows what a fresh
    /// open shows, after the process mapped, wrote and unmapped memory
    /// (smaps, numa_maps, status text byte for byte; pagemap's word of the
    /// page it wrote); once the process is gone the kept file reads
    /// nothing (`Ok(None)`) and the fresh read fails, as the observer's
    /// fallback expects.
    #[test]
    fn kept_proc_files_read_what_a_fresh_open_reads() {
        use super::{parse_numa_maps, parse_smaps, parse_status, KeptProcFile, PM_PRESENT};
        use std::os::unix::fs::FileExt;
        const AT: usize = 0x7e00_0000_0000;
        let (mut to, mut from) = ([0i32; 2], [0i32; 2]);
        // SAFETY: pipes into valid arrays.
        unsafe {
            assert_eq!(libc::pipe(to.as_mut_ptr()), 0);
            assert_eq!(libc::pipe(from.as_mut_ptr()), 0);
        }
        // SAFETY: the child runs only system calls (read, mmap, a store,
        // munmap, write, _exit) until it exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: system calls on the child's own memory and pipes.
            unsafe {
                // The parent's ends: a parent that stops (a failed
                // assertion) gives this child EOF, and it exits.
                libc::close(to[1]);
                libc::close(from[0]);
                let mut c = 0u8;
                while libc::read(to[0], (&mut c as *mut u8).cast(), 1) == 1 {
                    match c {
                        b'm' => {
                            let p = libc::mmap(
                                AT as *mut libc::c_void,
                                3 * 4096,
                                libc::PROT_READ | libc::PROT_WRITE,
                                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                                -1,
                                0,
                            );
                            if p as usize == AT {
                                *(p as *mut u8) = 7;
                            }
                        }
                        b'u' => {
                            libc::munmap(AT as *mut libc::c_void, 3 * 4096);
                        }
                        _ => libc::_exit(0),
                    }
                    libc::write(from[1], (&c as *const u8).cast(), 1);
                }
                libc::_exit(0);
            }
        }
        // SAFETY: closing the child's ends in the parent.
        unsafe {
            libc::close(to[0]);
            libc::close(from[1]);
        }
        let step = |c: u8| {
            let mut r = 0u8;
            // SAFETY: one byte to and from the child over our pipes.
            unsafe {
                assert_eq!(libc::write(to[1], (&c as *const u8).cast(), 1), 1);
                assert_eq!(libc::read(from[0], (&mut r as *mut u8).cast(), 1), 1);
            }
        };
        let mut kept: Vec<KeptProcFile> = (0..3).map(|_| KeptProcFile::default()).collect();
        let mut pagemap = KeptProcFile::default();
        let names = ["smaps", "numa_maps", "status"];
        let mut buf = Vec::new();
        // What does not move while the child waits (its pages' sharing
        // with this multi-threaded test process, Pss and numa_maps counts,
        // can): the VMAs, their flags, the test VMA's Rss, VmSize, VmLck.
        let facts = |name: &str, text: &str| -> String {
            match name {
                "smaps" => parse_smaps(text)
                    .iter()
                    .map(|v| {
                        let rss = if v.start == AT as u64 { v.rss_kb } else { 0 };
                        format!(
                            "{:x}-{:x} {} {:?} {rss}\n",
                            v.start, v.end, v.perms, v.vm_flags
                        )
                    })
                    .collect(),
                "numa_maps" => format!("{:x?}", parse_numa_maps(text).keys().collect::<Vec<_>>()),
                _ => {
                    let st = parse_status(text);
                    format!("{:?} {:?}", st.get("VmSize"), st.get("VmLck"))
                }
            }
        };
        let mut check = |mapped: bool| {
            for (k, name) in kept.iter_mut().zip(names) {
                let a = k
                    .read(pid, name, &mut buf)
                    .expect("kept read")
                    .map(|t| facts(name, t));
                let b = facts(
                    name,
                    &KeptProcFile::read_fresh(pid, name).expect("fresh read"),
                );
                assert_eq!(a.as_deref(), Some(b.as_str()), "{name}");
                if name != "status" {
                    assert_eq!(b.contains(&format!("{AT:x}")), mapped, "{name}: {b}");
                }
            }
            let mut w = [0u8; 8];
            let f = pagemap.file(pid, "pagemap").expect("pagemap");
            assert_eq!(
                f.read_at(&mut w, (AT as u64 / 4096) * 8)
                    .expect("pagemap read"),
                8
            );
            assert_eq!(u64::from_le_bytes(w) & PM_PRESENT != 0, mapped);
        };
        check(false);
        step(b'm');
        check(true);
        step(b'u');
        check(false);
        step(b'm');
        check(true);
        // SAFETY: ending and reaping our own child.
        unsafe {
            libc::write(to[1], b"x".as_ptr().cast(), 1);
            let mut st = 0;
            assert_eq!(libc::waitpid(pid, &mut st, 0), pid);
        }
        for (k, name) in kept.iter_mut().zip(names) {
            assert!(
                k.read(pid, name, &mut buf).expect("kept read").is_none(),
                "{name}"
            );
            assert!(KeptProcFile::read_fresh(pid, name).is_err(), "{name}");
        }
    }
}
