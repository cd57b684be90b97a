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

/// One virtual page and its state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageObs {
    pub addr: u64,
    pub state: PageState,
}

/// Everything one process shows, plus global THP counter deltas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// Process label (`main`, or the name a scenario gave a fork child).
    pub process: String,
    pub maps: Vec<MapsEntry>,
    /// Every page inside the observed VMAs, in address order.
    pub pages: Vec<PageObs>,
    /// THP counters since the scenario started, keyed `64kB/anon_fault_alloc`
    /// (per-size stats) or `vmstat/thp_fault_alloc`.
    pub stats: BTreeMap<String, i64>,
    /// `/proc/PID/status` VmLck in kB (mm->locked_vm).
    #[serde(default)]
    pub vm_lck_kb: u64,
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
                let _ = writeln!(
                    out,
                    "{:08x}-{:08x} Rss:{}kB AnonHugePages:{}kB VmFlags: {}",
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
}

impl Sections {
    pub const ALL: Sections = Sections {
        maps: true,
        smaps: true,
        pages: true,
        stats: true,
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
/// `start-end state [idx a-b]`.
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
                *end = p.addr + crate::addr::PAGE_SIZE;
                *last = pos;
                continue;
            }
            lines.push(run_line(*start, *end, d, *first_idx, *last));
        }
        cur = Some((
            p.addr,
            p.addr + crate::addr::PAGE_SIZE,
            desc,
            pos,
            pos.map(|x| x.1),
        ));
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
        let mk = |base: u64| -> Vec<PageObs> {
            let mut v = Vec::new();
            for i in 0..16 {
                v.push(PageObs {
                    addr: 0x10000 + i * 4096,
                    state: anon(base + i, 4, i as u32),
                });
            }
            v.push(PageObs {
                addr: 0x20000,
                state: PageState::Zero,
            });
            v.push(PageObs {
                addr: 0x21000,
                state: PageState::Zero,
            });
            v.push(PageObs {
                addr: 0x22000,
                state: PageState::NotPresent,
            });
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

    #[test]
    fn maps_line_matches_kernel_format() {
        let m = MapsEntry {
            start: 0x7f0000000000,
            end: 0x7f0000040000,
            perms: "rw-p".into(),
            vm_flags: vec![],
            anon_huge_kb: 0,
            rss_kb: 0,
        };
        assert_eq!(
            m.maps_line(),
            "7f0000000000-7f0000040000 rw-p 00000000 00:00 0 "
        );
    }
}
