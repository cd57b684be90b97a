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
const PAGEMAP_SCAN: u64 = 0xC060_6610;

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
pub fn read_smaps(pid: i32) -> std::io::Result<Vec<SmapsVma>> {
    Ok(parse_smaps(&std::fs::read_to_string(format!(
        "/proc/{pid}/smaps"
    ))?))
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

// ----- THP counters ---------------------------------------------------------

/// Current THP counters, keyed like the model (`64kB/anon_fault_alloc`,
/// `vmstat/thp_split_pmd`): every file under `hugepages-<N>kB/stats/` for
/// sizes 16kB..2048kB (orders 2..9) and every `thp_*` line of
/// `/proc/vmstat`. The diff compares the keys the model reports.
pub fn read_thp_counters() -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for order in 2u32..=9 {
        let size = format!("{}kB", 4u64 << order);
        let dir = format!("{}/hugepages-{size}/stats", crate::knobs::THP_DIR);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Ok(t) = std::fs::read_to_string(e.path()) {
                if let Ok(v) = t.trim().parse::<i64>() {
                    m.insert(format!("{size}/{name}"), v);
                }
            }
        }
    }
    if let Ok(t) = std::fs::read_to_string("/proc/vmstat") {
        for line in t.lines() {
            let mut it = line.split_whitespace();
            if let (Some(k), Some(v)) = (it.next(), it.next()) {
                if k.starts_with("thp_") {
                    if let Ok(v) = v.parse::<i64>() {
                        m.insert(format!("vmstat/{k}"), v);
                    }
                }
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {

    #[test]
    fn status_kb_fields() {
        let t = "Name:\tptlab\nVmSize:\t  2492 kB\nVmLck:\t       8 kB\nThreads:\t1\n";
        let m = super::parse_status(t);
        assert_eq!(m.get("VmSize"), Some(&2492));
        assert_eq!(m.get("VmLck"), Some(&8));
        assert!(!m.contains_key("Threads") && !m.contains_key("Name"));
    }

    use super::*;

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
}
