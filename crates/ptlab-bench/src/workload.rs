//! The seed workloads (docs/seeds.md), run natively on the live kernel.
//!
//! Every case runs in a child process forked from ptlab, at fixed addresses
//! in an arena ptlab itself never uses ([`ARENA`]). After `fork()` the child
//! uses only raw system calls and plain loads/stores: no allocation, no
//! locks, no std I/O. It talks to the parent over two pipes with fixed-size
//! messages ([`Msg`]):
//!
//! * before timing, the child stops at a *verify* checkpoint; the parent
//!   reads the child's `/proc/PID/pagemap`, `/proc/kpageflags` and smaps and
//!   checks the folio layout the case names, then lets it go on (or kills
//!   it and reports what the kernel gave instead);
//! * the child times exactly the measured operation with
//!   `clock_gettime(CLOCK_MONOTONIC)` and sends one sample per run (the
//!   first `warmup` runs are discarded);
//! * around the measured runs it stops twice more so the parent can read
//!   the THP and vmstat counters before and after.

use crate::result::{Better, Case};
use ptlab_live::kernel::{self, Reader};
use ptlab_live::knobs::{KnobError, KnobSession};
use ptlab_model::{ThpKnob, ThpMode};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const PAGE: u64 = 4096;
const PMD: u64 = 2 * MIB;

/// The fixed-address arena every case lives in: `[ARENA, ARENA + ARENA_LEN)`.
/// 32 TiB up, far from a PIE binary (0x55..), its heap and the mmap base
/// (0x7f..); the child checks it is free before using it.
pub const ARENA: u64 = 0x2000_0000_0000;
pub const ARENA_LEN: u64 = 16 * GIB;
/// Source region: 2 MiB-aligned but not 1 GiB-aligned, so a 1 GiB mremap
/// moves PMD tables (the seed-2 change), never one PUD.
pub const SRC: u64 = ARENA + PMD;
/// Destination region (same alignment as [`SRC`]).
pub const DST: u64 = ARENA + 8 * GIB + PMD;

/// Which seed change a workload belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Seed 1: mmap 1 MiB, memset, mremap +1 MiB, munmap; time the mremap.
    MremapBatch,
    /// Seed 2: one mremap of a populated region; `unaligned` = destination
    /// 4 KiB off PMD alignment.
    MremapTable { unaligned: bool },
    /// Seed 3: fork in a loop, child `_exit`s at once; time fork().
    Fork,
    /// Seed 4: mprotect RO + RW, then explicit_bzero; time the two mprotects.
    Mprotect,
    /// Seed 5: emulated heap compaction with UFFDIO_COPY (+ release) or UFFDIO_MOVE.
    Uffd { moves: bool },
    /// The proposed change (docs/prototyping.md, not in the running
    /// kernel): populate, one MADV_PAGEOUT of the whole region to a
    /// block-device swap area (a loop device), munmap; time the MADV_PAGEOUT.
    Pageout,
}

/// The folio layout of the measured memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Order-0 pages (MADV_NOHUGEPAGE).
    Small,
    /// 64 KiB mTHP (hugepages-64kB=always, every other size never).
    Mthp64k,
    /// Order-9 THPs mapped by PTEs (MADV_HUGEPAGE, then MADV_DONTFORK /
    /// MADV_DOFORK on the first 4 KiB of each 2 MiB block splits the PMD).
    ThpPte,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Small => "4 KiB pages",
            Layout::Mthp64k => "64 KiB mTHP",
            Layout::ThpPte => "PTE-mapped 2 MiB THP",
        }
    }
    fn code(self) -> u64 {
        self as u64
    }
    fn from_code(c: u64) -> Option<Layout> {
        [Layout::Small, Layout::Mthp64k, Layout::ThpPte]
            .into_iter()
            .find(|l| l.code() == c)
    }
    /// Folio order the layout must give.
    pub fn order(self) -> u32 {
        match self {
            Layout::Small => 0,
            Layout::Mthp64k => 4,
            Layout::ThpPte => 9,
        }
    }
}

/// Sizes and counts of one case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Bytes of the measured region.
    pub size: u64,
    /// Measured operations per run (the sample is their mean).
    pub iterations: u64,
    /// Measured runs (samples).
    pub runs: u64,
    /// Discarded warm-up runs before them.
    pub warmup: u64,
}

/// One workload: a seed change in one layout.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// The shared name (also `scenarios/seeds/<name>.ptl` in the model).
    pub name: &'static str,
    /// Seed number in docs/seeds.md.
    pub seed: u8,
    pub kind: Kind,
    pub layout: Layout,
    /// What one sample is, e.g. `ns per mremap`.
    pub unit: &'static str,
    /// Defaults for a full run and for `--quick`.
    pub full: Params,
    pub quick: Params,
}

const fn p(size: u64, iterations: u64, runs: u64) -> Params {
    Params {
        size,
        iterations,
        runs,
        warmup: 1,
    }
}

/// Every workload, in the order `ptlab bench all` runs them.
pub const WORKLOADS: &[Workload] = &[
    Workload {
        name: "mremap-batch-4k",
        seed: 1,
        kind: Kind::MremapBatch,
        layout: Layout::Small,
        unit: "ns per mremap",
        full: p(MIB, 10_000, 8),
        quick: p(MIB, 1_000, 3),
    },
    Workload {
        name: "mremap-batch-64k",
        seed: 1,
        kind: Kind::MremapBatch,
        layout: Layout::Mthp64k,
        unit: "ns per mremap",
        full: p(MIB, 10_000, 8),
        quick: p(MIB, 1_000, 3),
    },
    Workload {
        name: "mremap-table-aligned",
        seed: 2,
        kind: Kind::MremapTable { unaligned: false },
        layout: Layout::Small,
        unit: "ns per mremap",
        full: p(GIB, 1, 8),
        quick: p(256 * MIB, 1, 3),
    },
    Workload {
        name: "mremap-table-unaligned",
        seed: 2,
        kind: Kind::MremapTable { unaligned: true },
        layout: Layout::Small,
        unit: "ns per mremap",
        full: p(GIB, 1, 8),
        quick: p(256 * MIB, 1, 3),
    },
    Workload {
        name: "fork-4k",
        seed: 3,
        kind: Kind::Fork,
        layout: Layout::Small,
        unit: "ns per fork",
        full: p(GIB, 100, 8),
        quick: p(256 * MIB, 20, 3),
    },
    Workload {
        name: "fork-thp-pte",
        seed: 3,
        kind: Kind::Fork,
        layout: Layout::ThpPte,
        unit: "ns per fork",
        full: p(GIB, 100, 8),
        quick: p(256 * MIB, 20, 3),
    },
    Workload {
        name: "mprotect-thp-pte",
        seed: 4,
        kind: Kind::Mprotect,
        layout: Layout::ThpPte,
        unit: "ns per mprotect RO+RW pair",
        full: p(GIB, 40, 5),
        quick: p(256 * MIB, 10, 3),
    },
    Workload {
        name: "mprotect-64k",
        seed: 4,
        kind: Kind::Mprotect,
        layout: Layout::Mthp64k,
        unit: "ns per mprotect RO+RW pair",
        full: p(GIB, 40, 5),
        quick: p(256 * MIB, 10, 3),
    },
    Workload {
        name: "mprotect-4k",
        seed: 4,
        kind: Kind::Mprotect,
        layout: Layout::Small,
        unit: "ns per mprotect RO+RW pair",
        full: p(GIB, 40, 5),
        quick: p(256 * MIB, 10, 3),
    },
    Workload {
        name: "uffd-copy",
        seed: 5,
        kind: Kind::Uffd { moves: false },
        layout: Layout::Small,
        unit: "ns per live page",
        full: p(256 * MIB, 0, 8),
        quick: p(32 * MIB, 0, 3),
    },
    Workload {
        name: "uffd-move",
        seed: 5,
        kind: Kind::Uffd { moves: true },
        layout: Layout::Small,
        unit: "ns per live page",
        full: p(256 * MIB, 0, 8),
        quick: p(32 * MIB, 0, 3),
    },
    Workload {
        name: "pageout-64k",
        seed: 6,
        kind: Kind::Pageout,
        layout: Layout::Mthp64k,
        unit: "ns per MADV_PAGEOUT of the region",
        full: p(256 * MIB, 1, 8),
        quick: p(32 * MIB, 1, 3),
    },
    Workload {
        name: "pageout-4k",
        seed: 6,
        kind: Kind::Pageout,
        layout: Layout::Small,
        unit: "ns per MADV_PAGEOUT of the region",
        full: p(256 * MIB, 1, 8),
        quick: p(32 * MIB, 1, 3),
    },
];

/// Seed number of the proposed (post-6.18) change's workloads: not a seed
/// of the running kernel; `reproduce` reports it apart
/// (docs/prototyping.md).
pub const PROPOSED_SEED: u8 = 6;

/// Look a workload up by name.
pub fn find(name: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name == name)
}

impl Workload {
    /// Parameters with overrides applied, checked for sanity.
    pub fn params(
        &self,
        quick: bool,
        runs: Option<u64>,
        iterations: Option<u64>,
        size: Option<u64>,
    ) -> Result<Params, String> {
        let mut p = if quick { self.quick } else { self.full };
        if let Some(r) = runs {
            p.runs = r;
        }
        if let Some(i) = iterations {
            p.iterations = i;
        }
        if let Some(s) = size {
            p.size = s;
        }
        if p.runs == 0 {
            return Err("--runs must be at least 1".into());
        }
        if matches!(self.kind, Kind::Uffd { .. }) {
            // One sample = one compaction of the whole heap: half the pages live.
            p.iterations = p.size / PAGE / 2;
        }
        if p.iterations == 0 {
            return Err(format!("{}: no iterations", self.name));
        }
        let unit = match (self.kind, self.layout) {
            (_, Layout::ThpPte) => PMD,
            (Kind::MremapTable { .. }, _) => PMD,
            (_, Layout::Mthp64k) => 64 * KIB,
            (Kind::Uffd { .. }, _) => 2 * PAGE,
            _ => PAGE,
        };
        if p.size == 0 || p.size % unit != 0 || p.size > 4 * GIB {
            return Err(format!(
                "{}: size {} must be a non-zero multiple of {} KiB, at most 4 GiB",
                self.name,
                p.size,
                unit / KIB
            ));
        }
        Ok(p)
    }

    /// The THP `enabled` knobs the layout needs. 4 KiB layouts need none
    /// (the region is MADV_NOHUGEPAGE, which excludes every THP size).
    pub fn knobs(&self) -> Vec<(ThpKnob, ThpMode)> {
        let others = |keep: u8, mode: ThpMode| -> Vec<(ThpKnob, ThpMode)> {
            let mut v = Vec::new();
            for order in 2u8..=9 {
                if order == keep {
                    v.push((ThpKnob::Size(order), mode));
                } else if ptlab_live::knobs::knob_path(ThpKnob::Size(order)).is_ok() {
                    v.push((ThpKnob::Size(order), ThpMode::Never));
                }
            }
            v
        };
        match self.layout {
            Layout::Small => Vec::new(),
            Layout::Mthp64k => others(4, ThpMode::Always),
            Layout::ThpPte => others(9, ThpMode::Madvise),
        }
    }
}

// ===== the child: raw system calls only ====================================

mod msg {
    pub const VERIFY: u64 = 1; // layout addr len -> ack
    pub const SAMPLE: u64 = 2; // run total_ns iterations
    pub const EXTRA: u64 = 3; // run key value
    pub const SYNC: u64 = 4; // 0 = begin measuring, 1 = end -> ack
    pub const ERR: u64 = 5; // step errno aux
    pub const DONE: u64 = 6;
    pub const EXTRA_BZERO_NS: u64 = 1;
    pub const EXTRA_WALL_NS: u64 = 2;
}

/// Key in [`Case::extra`] of the whole workload's wall-clock time in the
/// child, in ns: from the start of its setup (the first mmap) to the end of
/// the last run, warm-up included, without the time it spent stopped at
/// checkpoints (layout verification, counter reads). One value per case.
/// `ptlab speed` compares it with the same scenario on the model.
pub const WALL_NS_KEY: &str = "workload wall ns";

/// A child's message: `[kind, a, b, c]`.
type Msg = [u64; 4];

/// What the child was doing when a call failed.
const STEPS: &[&str] = &[
    "arena check (mmap MAP_FIXED_NOREPLACE of the bench arena)",
    "mmap MAP_FIXED_NOREPLACE",
    "madvise",
    "mremap",
    "munmap",
    "fork",
    "mprotect",
    "userfaultfd",
    "UFFDIO_API",
    "UFFDIO_REGISTER",
    "UFFDIO_COPY",
    "UFFDIO_MOVE",
    "UFFDIO_UNREGISTER",
    "content check after compaction (wrong data)",
    "waitpid",
];
mod step {
    pub const ARENA: u64 = 0;
    pub const MMAP: u64 = 1;
    pub const MADVISE: u64 = 2;
    pub const MREMAP: u64 = 3;
    pub const MUNMAP: u64 = 4;
    pub const FORK: u64 = 5;
    pub const MPROTECT: u64 = 6;
    pub const UFFD: u64 = 7;
    pub const UFFD_API: u64 = 8;
    pub const REGISTER: u64 = 9;
    pub const COPY: u64 = 10;
    pub const MOVE: u64 = 11;
    pub const UNREGISTER: u64 = 12;
    pub const CONTENT: u64 = 13;
    pub const WAITPID: u64 = 14;
}

struct Child {
    r: libc::c_int,
    w: libc::c_int,
    /// Nanoseconds spent stopped in [`Child::ask`] (waiting for the parent).
    paused: core::cell::Cell<u64>,
    /// Pages of the spacer that packs an order-0 region's frames before it
    /// is faulted (0: faulted as found; crate::memstate::Spacer), sized by
    /// the parent before the fork.
    spacer_pages: u64,
}

fn errno() -> u64 {
    // SAFETY: reading errno.
    unsafe { *libc::__errno_location() as u64 }
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Child {
    fn send(&self, m: Msg) {
        let mut buf = [0u8; 32];
        for (i, w) in m.iter().enumerate() {
            buf[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let mut off = 0;
        while off < buf.len() {
            // SAFETY: writing our own buffer to our pipe.
            let n = unsafe { libc::write(self.w, buf[off..].as_ptr().cast(), buf.len() - off) };
            if n < 0 && errno() == libc::EINTR as u64 {
                continue;
            }
            if n <= 0 {
                exit(3);
            }
            off += n as usize;
        }
    }

    /// Send and block until the parent answers; exit unless it says go.
    fn ask(&self, m: Msg) {
        let t0 = now_ns();
        self.send(m);
        let mut b = [0u8; 1];
        loop {
            // SAFETY: reading one byte into our buffer.
            let n = unsafe { libc::read(self.r, b.as_mut_ptr().cast(), 1) };
            if n < 0 && errno() == libc::EINTR as u64 {
                continue;
            }
            if n != 1 || b[0] != 1 {
                exit(4);
            }
            self.paused.set(self.paused.get() + (now_ns() - t0));
            return;
        }
    }

    fn fail(&self, step: u64, aux: u64) -> ! {
        let e = errno();
        self.send([msg::ERR, step, e, aux]);
        exit(1)
    }

    fn check(&self, r: libc::c_long, step: u64) {
        if r < 0 {
            self.fail(step, 0);
        }
    }

    fn mmap_fixed(&self, addr: u64, len: u64) {
        // SAFETY: a fixed mapping in the arena, which we checked is ours.
        let r = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if r == libc::MAP_FAILED || r as u64 != addr {
            self.fail(step::MMAP, addr);
        }
    }

    fn madvise(&self, addr: u64, len: u64, advice: libc::c_int) {
        // SAFETY: madvise on our arena.
        let r = unsafe { libc::madvise(addr as *mut libc::c_void, len as usize, advice) };
        self.check(r as libc::c_long, step::MADVISE);
    }

    fn munmap(&self, addr: u64, len: u64) {
        // SAFETY: unmapping our arena.
        let r = unsafe { libc::munmap(addr as *mut libc::c_void, len as usize) };
        self.check(r as libc::c_long, step::MUNMAP);
    }

    fn mremap(&self, from: u64, len: u64, to: u64, extra: libc::c_int) -> u64 {
        // SAFETY: moving within our arena.
        let r = unsafe {
            libc::mremap(
                from as *mut libc::c_void,
                len as usize,
                len as usize,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | extra,
                to as *mut libc::c_void,
            )
        };
        if r == libc::MAP_FAILED {
            self.fail(step::MREMAP, from);
        }
        r as u64
    }

    fn mprotect(&self, addr: u64, len: u64, prot: libc::c_int) {
        // SAFETY: our arena.
        let r = unsafe { libc::mprotect(addr as *mut libc::c_void, len as usize, prot) };
        self.check(r as libc::c_long, step::MPROTECT);
    }

    /// Write every page of `[addr, addr+len)` (a real anonymous page each,
    /// never the shared zero page).
    fn touch(&self, addr: u64, len: u64) {
        let mut a = addr;
        while a < addr + len {
            // SAFETY: inside a read-write mapping of ours.
            unsafe { core::ptr::write_volatile(a as *mut u64, a) };
            a += PAGE;
        }
    }

    /// Map `[addr, addr+len)` and give it `layout`.
    fn populate(&self, addr: u64, len: u64, layout: Layout) {
        self.mmap_fixed(addr, len);
        match layout {
            Layout::Small => {
                self.madvise(addr, len, libc::MADV_NOHUGEPAGE);
                // Held while the region faults, gone before anything is timed.
                let _spacer = crate::memstate::Spacer::take(self.spacer_pages);
                self.touch(addr, len);
            }
            Layout::Mthp64k => self.touch(addr, len),
            Layout::ThpPte => {
                self.madvise(addr, len, libc::MADV_HUGEPAGE);
                self.touch(addr, len);
                let mut b = addr;
                while b < addr + len {
                    // Splitting the VMA 4 KiB into the block splits its PMD
                    // mapping; DOFORK merges the VMA back.
                    self.madvise(b, PAGE, libc::MADV_DONTFORK);
                    self.madvise(b, PAGE, libc::MADV_DOFORK);
                    b += PMD;
                }
                // Keep khugepaged from collapsing the blocks back.
                self.madvise(addr, len, libc::MADV_NOHUGEPAGE);
            }
        }
    }

    fn verify(&self, addr: u64, len: u64, layout: Layout) {
        self.ask([msg::VERIFY, layout.code(), addr, len]);
    }

    fn sample(&self, run: u64, ns: u64, iterations: u64) {
        self.send([msg::SAMPLE, run, ns, iterations]);
    }
}

fn exit(code: i32) -> ! {
    // SAFETY: leaving the child without running any destructors or atexit.
    unsafe { libc::_exit(code) }
}

fn child_main(c: Child, w: &Workload, p: Params, parent: libc::pid_t) -> ! {
    // Dies with ptlab (SIGKILL at its death; gone at once if it already is).
    ptlab_live::lifeline::die_with_parent(parent);
    // SAFETY: plain prctl/signal calls on ourselves.
    unsafe {
        // ptlab may have disabled THP for itself; the case needs the
        // machine's policy.
        libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::signal(libc::SIGHUP, libc::SIG_DFL);
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        // The arena must be free: reserve it once, then give it back.
        let r = libc::mmap(
            ARENA as *mut libc::c_void,
            ARENA_LEN as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | libc::MAP_NORESERVE
                | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        );
        if r == libc::MAP_FAILED || r as u64 != ARENA {
            c.fail(step::ARENA, ARENA);
        }
        libc::munmap(r, ARENA_LEN as usize);
    }
    let start = now_ns();
    let total_runs = p.warmup + p.runs;
    let begin = |run: u64| {
        if run == p.warmup {
            c.ask([msg::SYNC, 0, 0, 0]);
        }
    };
    match w.kind {
        Kind::MremapBatch => {
            let len = p.size;
            for run in 0..total_runs {
                begin(run);
                let mut total = 0;
                for it in 0..p.iterations {
                    c.mmap_fixed(SRC, len);
                    if w.layout == Layout::Small {
                        c.madvise(SRC, len, libc::MADV_NOHUGEPAGE);
                    }
                    // SAFETY: memset of the mapping we just made.
                    unsafe { core::ptr::write_bytes(SRC as *mut u8, 0x5a, len as usize) };
                    if run == 0 && it == 0 {
                        c.verify(SRC, len, w.layout);
                    }
                    let t0 = now_ns();
                    c.mremap(SRC, len, SRC + len, 0);
                    let t1 = now_ns();
                    c.munmap(SRC + len, len);
                    total += t1 - t0;
                }
                c.sample(run, total, p.iterations);
            }
        }
        Kind::MremapTable { unaligned } => {
            let len = p.size;
            c.populate(SRC, len, w.layout);
            c.verify(SRC, len, w.layout);
            let (mut from, mut to) = (SRC, if unaligned { DST + PAGE } else { DST });
            for run in 0..total_runs {
                begin(run);
                let t0 = now_ns();
                c.mremap(from, len, to, 0);
                let t1 = now_ns();
                core::mem::swap(&mut from, &mut to);
                c.sample(run, t1 - t0, 1);
            }
        }
        Kind::Fork => {
            c.populate(SRC, p.size, w.layout);
            c.verify(SRC, p.size, w.layout);
            for run in 0..total_runs {
                begin(run);
                let mut total = 0;
                for _ in 0..p.iterations {
                    let t0 = now_ns();
                    // SAFETY: the forked grandchild only calls _exit.
                    let pid = unsafe { libc::fork() };
                    if pid == 0 {
                        exit(0);
                    }
                    let t1 = now_ns();
                    if pid < 0 {
                        c.fail(step::FORK, 0);
                    }
                    let mut status = 0;
                    // SAFETY: reaping our own child.
                    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
                    c.check(r as libc::c_long, step::WAITPID);
                    total += t1 - t0;
                }
                c.sample(run, total, p.iterations);
            }
        }
        Kind::Mprotect => {
            c.populate(SRC, p.size, w.layout);
            c.verify(SRC, p.size, w.layout);
            for run in 0..total_runs {
                begin(run);
                let (mut mp, mut bz) = (0, 0);
                for _ in 0..p.iterations {
                    let t0 = now_ns();
                    c.mprotect(SRC, p.size, libc::PROT_READ);
                    c.mprotect(SRC, p.size, libc::PROT_READ | libc::PROT_WRITE);
                    let t1 = now_ns();
                    // SAFETY: clearing our own read-write mapping.
                    unsafe { libc::explicit_bzero(SRC as *mut libc::c_void, p.size as usize) };
                    let t2 = now_ns();
                    mp += t1 - t0;
                    bz += t2 - t1;
                }
                c.sample(run, mp, p.iterations);
                c.send([msg::EXTRA, run, msg::EXTRA_BZERO_NS, bz / p.iterations]);
            }
        }
        Kind::Uffd { moves } => uffd_compaction(&c, p, moves, begin),
        Kind::Pageout => {
            for run in 0..total_runs {
                begin(run);
                c.populate(SRC, p.size, w.layout);
                if run == 0 {
                    c.verify(SRC, p.size, w.layout);
                }
                let t0 = now_ns();
                c.madvise(SRC, p.size, MADV_PAGEOUT);
                let t1 = now_ns();
                // Frees the slots (and the swap-cache folios) for the next run.
                c.munmap(SRC, p.size);
                c.sample(run, t1 - t0, 1);
            }
        }
    }
    let wall = now_ns() - start - c.paused.get();
    c.send([msg::EXTRA, total_runs, msg::EXTRA_WALL_NS, wall]);
    c.ask([msg::SYNC, 1, 0, 0]);
    c.send([msg::DONE, 0, 0, 0]);
    exit(0)
}

/// MADV_PAGEOUT (include/uapi/asm-generic/mman-common.h).
const MADV_PAGEOUT: libc::c_int = 21;

const UFFDIO_API: u64 = 0xC018_AA3F;
const UFFDIO_REGISTER: u64 = 0xC020_AA00;
const UFFDIO_UNREGISTER: u64 = 0x8010_AA01;
const UFFDIO_COPY: u64 = 0xC028_AA03;
const UFFDIO_MOVE: u64 = 0xC028_AA05;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;

/// Seed 5: a heap of `p.size` bytes whose even pages are live. The
/// from-space is moved aside with `mremap(MREMAP_DONTUNMAP)`, the emptied
/// heap range (to-space) is registered MISSING, and the compactor packs
/// live page 2i into to-space page i — with UFFDIO_COPY, or UFFDIO_MOVE —
/// and finally releases the from-space with MADV_DONTNEED. The sample is
/// that whole compaction, per live page.
fn uffd_compaction(c: &Child, p: Params, moves: bool, begin: impl Fn(u64)) {
    // SAFETY: userfaultfd(2) and ioctls on buffers of the documented sizes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_userfaultfd,
            libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY,
        )
    } as libc::c_int;
    if fd < 0 {
        c.fail(step::UFFD, 0);
    }
    let mut api: [u64; 3] = [0xAA, 0, 0];
    // SAFETY: uffdio_api is 24 bytes.
    let r = unsafe { libc::ioctl(fd, UFFDIO_API as _, api.as_mut_ptr()) };
    c.check(r as libc::c_long, step::UFFD_API);
    let len = p.size;
    let live = len / PAGE / 2;
    for run in 0..p.warmup + p.runs {
        c.populate(SRC, len, Layout::Small);
        let mut i = 0;
        while i < len / PAGE {
            // SAFETY: our populated heap; page i holds its index.
            unsafe { core::ptr::write_volatile((SRC + i * PAGE) as *mut u64, i) };
            i += 1;
        }
        if run == 0 {
            c.verify(SRC, len, Layout::Small);
        }
        c.mremap(SRC, len, DST, libc::MREMAP_DONTUNMAP);
        let mut reg: [u64; 4] = [SRC, len, 1, 0];
        // SAFETY: uffdio_register is 32 bytes.
        let r = unsafe { libc::ioctl(fd, UFFDIO_REGISTER as _, reg.as_mut_ptr()) };
        c.check(r as libc::c_long, step::REGISTER);
        begin(run);
        let t0 = now_ns();
        for i in 0..live {
            let mut arg: [u64; 5] = [SRC + i * PAGE, DST + 2 * i * PAGE, PAGE, 0, 0];
            let (req, st) = if moves {
                (UFFDIO_MOVE, step::MOVE)
            } else {
                (UFFDIO_COPY, step::COPY)
            };
            // SAFETY: uffdio_copy / uffdio_move are 40 bytes.
            let r = unsafe { libc::ioctl(fd, req as _, arg.as_mut_ptr()) };
            if r < 0 {
                c.fail(st, SRC + i * PAGE);
            }
        }
        c.madvise(DST, len, libc::MADV_DONTNEED);
        let t1 = now_ns();
        for i in 0..live {
            // SAFETY: to-space page i is now present.
            let v = unsafe { core::ptr::read_volatile((SRC + i * PAGE) as *const u64) };
            if v != 2 * i {
                c.fail(step::CONTENT, SRC + i * PAGE);
            }
        }
        let mut range: [u64; 2] = [SRC, len];
        // SAFETY: uffdio_range is 16 bytes.
        let r = unsafe { libc::ioctl(fd, UFFDIO_UNREGISTER as _, range.as_mut_ptr()) };
        c.check(r as libc::c_long, step::UNREGISTER);
        c.munmap(SRC, len);
        c.munmap(DST, len);
        c.sample(run, t1 - t0, live);
    }
}

// ===== the parent ==========================================================

/// Progress of a case, for a progress bar.
#[derive(Clone, Debug)]
pub enum Progress {
    /// Layout verified (description).
    Verified(String),
    /// A run finished: `done` of `total` (warm-up included).
    Run { done: u64, total: u64 },
}

/// Why a case could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{workload}: the kernel did not give the layout '{layout}': {why}")]
    Layout {
        workload: String,
        layout: String,
        why: String,
    },
    #[error("{workload}: cannot set THP knob {knob}: {err}")]
    Knob {
        workload: String,
        knob: String,
        err: KnobError,
    },
    #[error("{workload}: {step} failed: {err} (at {aux:#x})")]
    Syscall {
        workload: String,
        step: String,
        err: std::io::Error,
        aux: u64,
    },
    #[error("{0}")]
    Other(String),
}

fn knob_name(k: ThpKnob) -> String {
    match k {
        ThpKnob::TopLevel => "enabled".into(),
        ThpKnob::Size(o) => format!("hugepages-{}kB/enabled", 4u64 << o),
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Kills and reaps the child on every exit path of [`run_case`].
struct Reap(libc::pid_t);
impl Drop for Reap {
    fn drop(&mut self) {
        // SAFETY: our own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(self.0, &mut st, 0);
        }
    }
}

/// Counters that matter for the seeds: every THP counter (per size and in
/// vmstat), and the vmstat lines for faults, allocation and TLB flushes
/// (the `nr_tlb_*` lines exist only with CONFIG_DEBUG_TLBFLUSH).
pub fn read_counters() -> BTreeMap<String, i64> {
    let mut m = kernel::read_thp_counters();
    if let Ok(t) = std::fs::read_to_string("/proc/vmstat") {
        for line in t.lines() {
            let mut it = line.split_whitespace();
            if let (Some(k), Some(v)) = (it.next(), it.next()) {
                let keep = k.starts_with("nr_tlb_")
                    || matches!(
                        k,
                        "pgfault" | "pgalloc_normal" | "pgfree" | "numa_pte_updates"
                    );
                if keep {
                    if let Ok(v) = v.parse::<i64>() {
                        m.insert(format!("vmstat/{k}"), v);
                    }
                }
            }
        }
    }
    m
}

/// Run one case: set its knobs in `knobs` (the caller holds the knob lock
/// and restores the session), fork the child, verify, collect samples.
pub fn run_case(
    w: &Workload,
    p: Params,
    knobs: &mut KnobSession,
    progress: &mut dyn FnMut(Progress),
) -> Result<Case, BenchError> {
    for (k, m) in w.knobs() {
        knobs.set(k, m).map_err(|err| BenchError::Knob {
            workload: w.name.into(),
            knob: format!("{}={}", knob_name(k), m.name()),
            err,
        })?;
    }
    if w.kind == Kind::Pageout {
        // A block-device swap area (loop device) that holds the region
        // with room to spare, journaled and removed like every knob; gone
        // again when the case ends.
        let bytes = p.size + 64 * MIB;
        knobs
            .set_swap(bytes, ptlab_live::swapfile::SwapKind::BlockDev)
            .map_err(|err| BenchError::Knob {
                workload: w.name.into(),
                knob: format!("swap {} MiB blockdev", bytes / MIB),
                err,
            })?;
    }
    let case = run_case_inner(w, p, progress);
    if w.kind == Kind::Pageout {
        let _ = knobs.set_swap(0, ptlab_live::swapfile::SwapKind::BlockDev);
    }
    case
}

fn run_case_inner(
    w: &Workload,
    p: Params,
    progress: &mut dyn FnMut(Progress),
) -> Result<Case, BenchError> {
    let io = |e: std::io::Error| BenchError::Other(format!("{}: {e}", w.name));
    let (p_r, c_w) = pipe().map_err(io)?;
    let (c_r, p_w) = pipe().map_err(io)?;
    use std::os::fd::AsRawFd;
    let spacer_pages = match (w.layout, w.kind) {
        (Layout::Small, k) if k != Kind::MremapBatch => crate::memstate::spacer_pages_now(p.size),
        _ => 0,
    };
    let child = Child {
        r: c_r.as_raw_fd(),
        w: c_w.as_raw_fd(),
        paused: core::cell::Cell::new(0),
        spacer_pages,
    };
    let parent = ptlab_live::lifeline::my_pid();
    // SAFETY: the child runs only raw system calls (child_main never returns).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        child_main(child, w, p, parent);
    }
    let _reap = Reap(pid);
    drop(c_w);
    drop(c_r);
    let mut from = File::from(p_r);
    let mut to = File::from(p_w);
    let mut case = Case {
        name: w.name.into(),
        unit: w.unit.into(),
        better: Better::Lower,
        samples: Vec::new(),
        counters: BTreeMap::new(),
        iterations: p.iterations,
        size_bytes: p.size,
        warmup: p.warmup,
        layout: w.layout.name().into(),
        layout_check: String::new(),
        extra: BTreeMap::new(),
    };
    let total = p.warmup + p.runs;
    let mut before = BTreeMap::new();
    let mut reader = Reader::new();
    let perf = crate::perf::Perf::open(pid);
    loop {
        let mut buf = [0u8; 32];
        if let Err(e) = from.read_exact(&mut buf) {
            let mut st = 0;
            // SAFETY: our own child.
            unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
            return Err(BenchError::Other(format!(
                "{}: the benchmark child died without a result ({e}; wait status {st:#x})",
                w.name
            )));
        }
        let m: Msg = std::array::from_fn(|i| {
            u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
        });
        match m[0] {
            msg::VERIFY => {
                let layout = Layout::from_code(m[1]).expect("child sends a known layout");
                match verify_layout(&mut reader, pid, m[2], m[3], layout) {
                    Ok(mut desc) => {
                        if spacer_pages > 0 && layout == Layout::Small {
                            desc.push_str(&format!(
                                " ({})",
                                crate::memstate::describe_spacer(spacer_pages)
                            ));
                        }
                        progress(Progress::Verified(desc.clone()));
                        case.layout_check = desc;
                        to.write_all(&[1]).map_err(io)?;
                    }
                    Err(why) => {
                        return Err(BenchError::Layout {
                            workload: w.name.into(),
                            layout: layout.name().into(),
                            why,
                        })
                    }
                }
            }
            msg::SYNC => {
                if m[1] == 0 {
                    before = read_counters();
                    perf.start();
                } else {
                    case.counters.extend(perf.stop());
                    let after = read_counters();
                    for (k, v) in after {
                        let d = v - before.get(&k).copied().unwrap_or(0);
                        if d != 0 {
                            case.counters.insert(k, d);
                        }
                    }
                }
                to.write_all(&[1]).map_err(io)?;
            }
            msg::SAMPLE => {
                if m[1] >= p.warmup {
                    case.samples.push(m[2] as f64 / m[3].max(1) as f64);
                }
                progress(Progress::Run {
                    done: m[1] + 1,
                    total,
                });
            }
            msg::EXTRA if m[2] == msg::EXTRA_WALL_NS => {
                case.extra.insert(WALL_NS_KEY.into(), vec![m[3] as f64]);
            }
            msg::EXTRA => {
                if m[1] >= p.warmup && m[2] == msg::EXTRA_BZERO_NS {
                    case.extra
                        .entry("explicit_bzero ns per loop".into())
                        .or_default()
                        .push(m[3] as f64);
                }
            }
            msg::ERR => {
                let step = STEPS.get(m[1] as usize).copied().unwrap_or("a step");
                let mut err = std::io::Error::from_raw_os_error(m[2] as i32);
                if m[1] == step::ARENA {
                    err = std::io::Error::other(format!(
                        "{err}: the fixed bench arena {ARENA:#x}+{ARENA_LEN:#x} is in use"
                    ));
                }
                return Err(BenchError::Syscall {
                    workload: w.name.into(),
                    step: step.into(),
                    err,
                    aux: m[3],
                });
            }
            msg::DONE => break,
            other => {
                return Err(BenchError::Other(format!(
                    "{}: unknown message {other} from the child",
                    w.name
                )))
            }
        }
    }
    Ok(case)
}

/// Fraction of the region that must be in the requested layout.
pub const LAYOUT_MIN_FRACTION: f64 = 0.99;

/// Check the folio layout of `[addr, addr+len)` in process `pid`:
/// every page present; each aligned block of 2^order pages maps
/// consecutive frames of one folio of exactly that order (kpageflags
/// COMPOUND_HEAD then tails, and the frame after it not a tail); no page
/// of a PTE-mapped layout is PMD-mapped (PAGEMAP_SCAN PAGE_IS_HUGE and
/// smaps AnonHugePages). Returns a one-line description.
pub fn verify_layout(
    reader: &mut Reader,
    pid: i32,
    addr: u64,
    len: u64,
    layout: Layout,
) -> Result<String, String> {
    let hint = match layout {
        Layout::Small => "",
        Layout::Mthp64k => {
            " — is hugepages-64kB available and set to always? (this kernel may lack mTHP)"
        }
        Layout::ThpPte => {
            " — could the kernel allocate 2 MiB THPs (hugepages-2048kB, memory fragmentation)?"
        }
    };
    verify_order(reader, pid, addr, len, layout.order(), hint)
}

/// [`verify_layout`] for folios of any `order` (0 = order-0 pages), PTE-
/// mapped: e.g. the 32 KiB mTHPs (order 3) of `ptlab calibrate`'s third
/// mprotect layout, which no seed workload uses. `hint` ends the error.
pub fn verify_order(
    reader: &mut Reader,
    pid: i32,
    addr: u64,
    len: u64,
    order: u32,
    hint: &str,
) -> Result<String, String> {
    if order > 9 {
        return Err(format!("order {order} is not a PTE-mapped folio order"));
    }
    if !reader.caps.kpage {
        return Err(
            "/proc/kpageflags is unreadable (needs root): the layout cannot be verified".into(),
        );
    }
    let pages = reader
        .raw_pages(pid, addr, addr + len)
        .map_err(|e| format!("cannot read /proc/{pid}/pagemap: {e}"))?;
    if let Some(i) = pages
        .iter()
        .position(|p| p.pagemap & kernel::PM_PRESENT == 0)
    {
        return Err(format!("page {:#x} is not present", addr + i as u64 * PAGE));
    }
    let pfn = |i: usize| pages[i].pagemap & kernel::PM_PFN_MASK;
    if pages.iter().all(|p| p.pagemap & kernel::PM_PFN_MASK == 0) {
        return Err("pagemap shows no frame numbers (needs CAP_SYS_ADMIN)".into());
    }
    let mut cache = HashMap::new();
    let mut flags = |f: u64| -> u64 {
        reader
            .kpf_block(&mut cache, f)
            .map_or(0, |(fl, _)| fl[(f & 511) as usize])
    };
    let n = 1usize << order;
    let units = pages.len() / n;
    let mut good = 0usize;
    let mut first_bad: Option<(usize, String)> = None;
    let mut thp_flag = 0usize;
    for u in 0..units {
        let i0 = u * n;
        let head = pfn(i0);
        let hf = flags(head);
        let why = if n == 1 {
            if hf & (kernel::KPF_COMPOUND_HEAD | kernel::KPF_COMPOUND_TAIL) != 0 {
                Some("part of a large folio".to_string())
            } else if hf & kernel::KPF_ANON == 0 {
                Some("not an anonymous page".to_string())
            } else {
                None
            }
        } else if hf & kernel::KPF_COMPOUND_HEAD == 0 {
            Some(if hf & kernel::KPF_COMPOUND_TAIL != 0 {
                "not at a folio head (misaligned or larger folio)".to_string()
            } else {
                "an order-0 page".to_string()
            })
        } else if let Some(j) = (1..n).find(|&j| {
            pfn(i0 + j) != head + j as u64
                || flags(head + j as u64) & kernel::KPF_COMPOUND_TAIL == 0
        }) {
            Some(format!("folio ends after {j} pages (order < {order})"))
        } else if flags(head + n as u64) & kernel::KPF_COMPOUND_TAIL != 0 {
            Some(format!("folio is larger than order {order}"))
        } else {
            None
        };
        if hf & kernel::KPF_THP != 0 {
            thp_flag += 1;
        }
        match why {
            None => good += 1,
            Some(w) => {
                if first_bad.is_none() {
                    first_bad = Some((i0, w));
                }
            }
        }
    }
    let fraction = good as f64 / units.max(1) as f64;
    let mut desc = format!(
        "{good}/{units} {} folios{}",
        if order == 0 {
            "order-0".to_string()
        } else {
            format!("order-{order}")
        },
        if order > 0 {
            format!(" ({thp_flag} with KPF_THP)")
        } else {
            String::new()
        }
    );
    if fraction < LAYOUT_MIN_FRACTION {
        let Some((i, w)) = first_bad else {
            return Err(format!("{desc}: the region holds no whole folio{hint}"));
        };
        return Err(format!(
            "{desc}, need {:.0}%; first bad block at {:#x}: {w}{hint}",
            LAYOUT_MIN_FRACTION * 100.0,
            addr + i as u64 * PAGE
        ));
    }
    if order == 0 {
        // How the frames were laid out by the allocator (crate::memstate):
        // ascending runs from split high-order blocks, or scattered.
        let pfns: Vec<u64> = (0..pages.len()).map(pfn).collect();
        if let Some(a) = crate::memstate::frame_adjacency(&pfns) {
            desc.push_str(&format!(
                ", {:.1}% of frames next to the previous page's",
                a * 100.0
            ));
        }
    }
    // PTE- versus PMD-mapped.
    if order > 0 {
        let huge = pages
            .iter()
            .filter(|p| p.scan & kernel::PAGE_IS_HUGE != 0)
            .count();
        let smaps_huge: u64 = kernel::read_smaps(pid)
            .map_err(|e| format!("cannot read /proc/{pid}/smaps: {e}"))?
            .iter()
            .filter(|v| v.start < addr + len && v.end > addr)
            .map(|v| v.anon_huge_kb)
            .sum();
        if huge > 0 || smaps_huge > 0 {
            return Err(format!(
                "{desc}, but {} KiB are PMD-mapped (PAGEMAP_SCAN huge pages: {huge}); the layout needs PTE mappings",
                smaps_huge
            ));
        }
        desc.push_str(", all PTE-mapped");
        if !reader.caps.scan {
            desc.push_str(" (smaps AnonHugePages = 0; PAGEMAP_SCAN unavailable)");
        }
    }
    Ok(desc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_params_valid() {
        let mut names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), WORKLOADS.len());
        for w in WORKLOADS {
            for quick in [false, true] {
                let p = w.params(quick, None, None, None).unwrap();
                assert!(p.iterations > 0 && p.runs > 0, "{}", w.name);
            }
        }
        let u = find("uffd-move").unwrap();
        assert_eq!(u.params(false, None, None, None).unwrap().iterations, 32768);
        assert!(find("fork-thp-pte")
            .unwrap()
            .params(false, None, None, Some(MIB))
            .is_err());
        assert!(find("fork-4k")
            .unwrap()
            .params(false, Some(0), None, None)
            .is_err());
    }

    #[test]
    fn layout_codes_round_trip() {
        for l in [Layout::Small, Layout::Mthp64k, Layout::ThpPte] {
            assert_eq!(Layout::from_code(l.code()), Some(l));
        }
    }
}
