//! The state of the machine's free memory around a live measurement:
//! compacting it (`--compact-memory`), fragmenting it on purpose
//! (`ptlab bench --fragment-memory`), packing an order-0 region's frames
//! (`--pack-frames`, [`Spacer`]), and how contiguous the frames of an
//! order-0 region came out.
//!
//! Why it matters: an order-0 fault takes its page from the per-CPU list,
//! refilled in batches from the buddy free lists (Linux: mm/page_alloc.c
//! rmqueue_pcplist(), rmqueue_bulk()); `__rmqueue_smallest()` takes the
//! smallest free block and `expand()` puts the halves it does not use back
//! on the lower-order lists, so a region faulted from memory whose free
//! blocks are large gets frames in ascending runs, while one faulted from
//! many free order-0 blocks gets them in whatever order they were freed.
//! fork's and mprotect's per-page passes touch the struct pages of those
//! frames in address order; scattered frames make that a random walk
//! through the memmap (docs/cost.md, runs O, O2 and P).

use crate::result::Compaction;
use std::time::Instant;

/// Where compaction is triggered: writing 1 compacts every zone of every
/// node (Linux: mm/compaction.c sysctl_compaction_handler() →
/// compact_nodes()); it returns when compaction is done.
pub const COMPACT_MEMORY: &str = "/proc/sys/vm/compact_memory";

use crate::env::free_blocks_now;

/// Why `--compact-memory` cannot compact here, if it cannot.
pub fn compaction_unavailable() -> Option<String> {
    if !std::path::Path::new(COMPACT_MEMORY).exists() {
        return Some(format!(
            "{COMPACT_MEMORY} does not exist (a kernel built without CONFIG_COMPACTION)"
        ));
    }
    if !ptlab_live::is_root() {
        return Some(format!("writing {COMPACT_MEMORY} needs root"));
    }
    None
}

/// Compact all free memory now, before `what` (a case name, a calibration
/// step), and record the free blocks before and after. Compaction is an
/// action, not a setting: there is nothing to restore afterwards.
pub fn compact(what: &str) -> Result<Compaction, String> {
    if let Some(why) = compaction_unavailable() {
        return Err(why);
    }
    let free_before = free_blocks_now();
    let t = Instant::now();
    std::fs::write(COMPACT_MEMORY, "1")
        .map_err(|e| format!("cannot write {COMPACT_MEMORY}: {e}"))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(Compaction {
        before: what.to_string(),
        free_before,
        free_after: free_blocks_now(),
        ms,
    })
}

/// One line for a log: `compacted free memory before fork-4k (41 ms): free
/// order-0 blocks 114739 → 6588, order ≥ 9: 12 → 4803`.
pub fn describe(c: &Compaction) -> String {
    let o0 = |v: &[u64]| v.first().copied().unwrap_or(0);
    let big = |v: &[u64]| v.iter().skip(9).sum::<u64>();
    format!(
        "compacted free memory before {} ({:.0} ms): free order-0 blocks {} -> {}, order >= 9 {} -> {}",
        c.before,
        c.ms,
        o0(&c.free_before),
        o0(&c.free_after),
        big(&c.free_before),
        big(&c.free_after)
    )
}

/// Fraction of a region's pages (after the first) whose frame is next to
/// the previous page's, on either side: 1.0 for a region faulted from one
/// split high-order block (ascending) or from a per-CPU list that got a
/// freed region back in address order (descending: the list is LIFO),
/// near 0 for frames taken from scattered order-0 free blocks. `None` for
/// fewer than two pages.
pub fn frame_adjacency(pfns: &[u64]) -> Option<f64> {
    if pfns.len() < 2 {
        return None;
    }
    let next = pfns.windows(2).filter(|w| w[1].abs_diff(w[0]) == 1).count();
    Some(next as f64 / (pfns.len() - 1) as f64)
}

/// A process that holds free memory fragmented until it is dropped
/// (`ptlab bench --fragment-memory BYTES`): it faults `bytes` of order-0
/// anonymous pages (MADV_NOHUGEPAGE), then frees every other page in a
/// shuffled order with MADV_DONTNEED. The freed half are order-0 free
/// blocks that cannot merge (each one's buddy is still held) and sit on the
/// free lists in random frame order: the state a long-running machine's
/// free memory reaches (run O: 114,739 free order-0 blocks). Dropping it
/// kills the holder; its pages are freed and merge again, so the machine
/// is left as found. The holder also dies with ptlab.
pub struct Fragmenter {
    pid: libc::pid_t,
    /// Free blocks per order once the holder had freed its half.
    pub free_after: Vec<u64>,
    /// Free blocks per order before it started.
    pub free_before: Vec<u64>,
    pub bytes: u64,
}

/// Pages the holder frees in one shuffled order (a fixed xorshift seed:
/// the same permutation every run).
fn shuffled_odd_pages(pages: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..pages / 2).map(|i| 2 * i + 1).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// The largest `--fragment-memory` allowed: a quarter of `MemAvailable`.
pub const FRAGMENT_MAX_PERCENT: u64 = 25;

/// `--fragment-memory BYTES` against `MemAvailable`: refused above
/// [`FRAGMENT_MAX_PERCENT`], so fragmenting never pushes the machine
/// toward reclaim or the OOM killer.
pub fn check_fragment_size(bytes: u64, mem_available: u64) -> Result<(), String> {
    let max = (u128::from(mem_available) * u128::from(FRAGMENT_MAX_PERCENT) / 100) as u64;
    if bytes > max {
        return Err(format!(
            "--fragment-memory {} MiB: more than {FRAGMENT_MAX_PERCENT}% of MemAvailable ({} MiB; \
             at most {} MiB): the holder faults all of it before freeing half, and the benchmarks \
             need memory beside it",
            bytes >> 20,
            mem_available >> 20,
            max >> 20
        ));
    }
    Ok(())
}

impl Fragmenter {
    /// Start the holder and wait until its memory is fragmented.
    pub fn start(bytes: u64) -> Result<Fragmenter, String> {
        if bytes < 2 * 4096 {
            return Err(format!(
                "--fragment-memory {bytes}: needs at least two pages"
            ));
        }
        if !ptlab_live::is_root() {
            return Err(
                "fragmenting free memory is only useful with root (the benchmarks need it)".into(),
            );
        }
        // Never a memory-pressure test: the holder faults all of `bytes`
        // before it frees half, and the benchmarks need memory beside it.
        if let Some(avail) = ptlab_live::budget::mem_available() {
            check_fragment_size(bytes, avail)?;
        }
        let pages = (bytes / 4096) as usize;
        // Built before fork: the child only makes system calls.
        let order = shuffled_odd_pages(pages);
        let free_before = free_blocks_now();
        let mut fds = [0i32; 2];
        // SAFETY: plain pipe(2) into a local array.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        let (r, w) = (fds[0], fds[1]);
        let parent = ptlab_live::lifeline::my_pid();
        // SAFETY: the child makes raw system calls only and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            ptlab_live::lifeline::die_with_parent(parent);
            // SAFETY: our own fresh mapping; raw calls only.
            unsafe {
                libc::close(r);
                let len = pages * 4096;
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    libc::_exit(2);
                }
                libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
                let base = p as *mut u8;
                for i in 0..pages {
                    base.add(i * 4096).write_volatile(1);
                }
                for &i in &order {
                    libc::madvise(
                        base.add(i * 4096) as *mut libc::c_void,
                        4096,
                        libc::MADV_DONTNEED,
                    );
                }
                let one = 1u8;
                libc::write(w, &one as *const u8 as *const libc::c_void, 1);
                // Hold until killed.
                loop {
                    libc::pause();
                }
            }
        }
        // SAFETY: closing our copy of the write end; reading one byte.
        unsafe { libc::close(w) };
        let mut b = 0u8;
        let n = unsafe { libc::read(r, &mut b as *mut u8 as *mut libc::c_void, 1) };
        unsafe { libc::close(r) };
        let f = Fragmenter {
            pid,
            free_after: free_blocks_now(),
            free_before,
            bytes,
        };
        if n != 1 {
            return Err(format!(
                "the memory-fragmenting process failed before it was ready ({} bytes could not be held?)",
                bytes
            ));
        }
        Ok(f)
    }

    /// One line for a log and the result's notes.
    pub fn describe(&self) -> String {
        let o0 = |v: &[u64]| v.first().copied().unwrap_or(0);
        format!(
            "free memory fragmented on purpose (--fragment-memory {} MiB: half of it held, every other \
             page freed in shuffled order): free order-0 blocks {} -> {}",
            self.bytes >> 20,
            o0(&self.free_before),
            o0(&self.free_after)
        )
    }
}

impl Drop for Fragmenter {
    fn drop(&mut self) {
        // SAFETY: our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(self.pid, &mut st, 0);
        }
    }
}

// ------------------------------------------------------------ packing --

/// Free blocks below this order are what a packed region's faults must not
/// be served from: a region faulted from blocks of 2^6 pages or more has
/// at least 63 of 64 frames next to the previous page's.
pub const PACK_BELOW_ORDER: usize = 6;

/// Order-0 regions smaller than this are never packed (mremap-batch's
/// 1 MiB regions: a spacer per iteration would dwarf the work, and a
/// region of a few hundred pages is served from one per-CPU refill).
pub const PACK_MIN_BYTES: u64 = 64 << 20;

/// Memory a spacer leaves available beside the region it packs.
const PACK_MARGIN_BYTES: u64 = 2 << 30;

static PACK_FRAMES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether order-0 regions of [`PACK_MIN_BYTES`] or more are faulted
/// packed (`ptlab bench --pack-frames`, on by default in `ptlab reproduce`
/// and `ptlab calibrate`; see [`Spacer`]).
pub fn pack_frames() -> bool {
    PACK_FRAMES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Turn packing on or off for this process (and the case processes it
/// forks from now on).
pub fn set_pack_frames(on: bool) {
    PACK_FRAMES.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Pages on the per-CPU free lists, every zone and CPU summed
/// (/proc/zoneinfo's `count:` lines of each `pagesets` entry).
pub fn pcp_pages(zoneinfo: &str) -> u64 {
    zoneinfo
        .lines()
        .filter_map(|l| l.trim().strip_prefix("count:"))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// Pages a spacer must take so that the faults after it are served from
/// free blocks of order [`PACK_BELOW_ORDER`] or more: every page on the
/// per-CPU lists and in free blocks below that order (`free_blocks` as
/// /proc/buddyinfo's blocks per order), capped so that `keep_bytes` of
/// `mem_available` stay free (`None`: nothing to cap by).
pub fn spacer_pages(
    free_blocks: &[u64],
    pcp: u64,
    mem_available: Option<u64>,
    keep_bytes: u64,
) -> u64 {
    let small: u64 = free_blocks
        .iter()
        .take(PACK_BELOW_ORDER)
        .enumerate()
        .map(|(order, &n)| n << order)
        .sum();
    let want = small + pcp;
    match mem_available {
        Some(avail) => want.min(avail.saturating_sub(keep_bytes) / 4096),
        None => want,
    }
}

/// The spacer pages for an order-0 region of `region_bytes` about to be
/// faulted on this machine, or 0 when packing is off, the region is
/// small, or the machine's free lists cannot be read.
pub fn spacer_pages_now(region_bytes: u64) -> u64 {
    if !pack_frames() || region_bytes < PACK_MIN_BYTES {
        return 0;
    }
    let Ok(zoneinfo) = std::fs::read_to_string("/proc/zoneinfo") else {
        return 0;
    };
    let blocks = free_blocks_now();
    if blocks.is_empty() {
        return 0;
    }
    spacer_pages(
        &blocks,
        pcp_pages(&zoneinfo),
        ptlab_live::budget::mem_available(),
        region_bytes + PACK_MARGIN_BYTES,
    )
}

/// A packed region's spacer: before an order-0 region is faulted, a
/// mapping of `pages` pages is populated on the CPU the region will be
/// faulted on (the process is pinned to it meanwhile), so that it takes
/// that CPU's per-CPU list and the free blocks below
/// [`PACK_BELOW_ORDER`] (Linux: mm/page_alloc.c `__rmqueue_smallest()`
/// serves the smallest free block first); the region's faults then split
/// larger blocks and get ascending frames. Dropped after the region is
/// faulted: its pages go back and the region keeps its frames.
///
/// Why (docs/cost.md, "Packed order-0 regions"): the order-0 fork and
/// mprotect arms walk their struct pages in address order, and a quiet
/// 1 GiB mprotect pair took 17.5–19 ms over frames 92–98 % adjacent
/// against 38–43 ms over frames 1–19 % adjacent on this VM; which state an
/// arm got depended on what ran before it.
///
/// Raw system calls only: it is made in forked case processes.
pub struct Spacer {
    addr: *mut libc::c_void,
    len: usize,
    old_mask: Option<libc::cpu_set_t>,
}

impl Spacer {
    /// Pin this process to its CPU and populate `pages` pages of order-0
    /// memory. `None` when `pages` is 0 or the mapping cannot be made
    /// (the region is then faulted as found; its layout check says how
    /// adjacent its frames came out).
    pub fn take(pages: u64) -> Option<Spacer> {
        if pages == 0 {
            return None;
        }
        // SAFETY: raw calls on our own process and a fresh mapping.
        unsafe {
            let mut old: libc::cpu_set_t = core::mem::zeroed();
            let size = core::mem::size_of::<libc::cpu_set_t>();
            let old_mask = (libc::sched_getaffinity(0, size, &mut old) == 0).then_some(old);
            let cpu = libc::sched_getcpu();
            if cpu >= 0 {
                let mut one: libc::cpu_set_t = core::mem::zeroed();
                libc::CPU_SET(cpu as usize, &mut one);
                libc::sched_setaffinity(0, size, &one);
            }
            let len = (pages as usize) * 4096;
            let p = libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                if let Some(m) = old_mask {
                    libc::sched_setaffinity(0, size, &m);
                }
                return None;
            }
            libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
            // MADV_POPULATE_WRITE (Linux 5.14); written page by page
            // where it is missing.
            if libc::madvise(p, len, 23) != 0 {
                let base = p as *mut u8;
                for i in 0..pages as usize {
                    base.add(i * 4096).write_volatile(1);
                }
            }
            Some(Spacer {
                addr: p,
                len,
                old_mask,
            })
        }
    }
}

impl Drop for Spacer {
    fn drop(&mut self) {
        // SAFETY: our own mapping and our own affinity.
        unsafe {
            libc::munmap(self.addr, self.len);
            if let Some(m) = &self.old_mask {
                libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), m);
            }
        }
    }
}

/// One line for a layout check: `packed: a 5,912 MiB spacer took the
/// per-CPU lists and the free blocks below order 6 first`.
pub fn describe_spacer(pages: u64) -> String {
    format!(
        "packed: a {} MiB spacer took the per-CPU lists and the free blocks below order {PACK_BELOW_ORDER} first",
        pages * 4096 >> 20
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragmenting_more_than_a_quarter_of_available_memory_is_refused() {
        let avail = 24u64 << 30;
        assert!(check_fragment_size(6 << 30, avail).is_ok());
        let e = check_fragment_size((6 << 30) + (1 << 20), avail).unwrap_err();
        assert!(e.contains("at most 6144 MiB"), "{e}");
        assert!(check_fragment_size(1 << 20, 1 << 20).is_err());
    }

    #[test]
    fn pcp_pages_sum_every_pagesets_count() {
        let text = "Node 0, zone   Normal\n  pages free     4746926\n  pagesets\n    cpu: 0\n              count:    8102\n              high:     9000\n    cpu: 1\n              count: 15372\n  node_unreclaimable:  0\nNode 0, zone    DMA32\n    cpu: 0\n              count:    4\n";
        assert_eq!(pcp_pages(text), 8102 + 15372 + 4);
        assert_eq!(pcp_pages(""), 0);
    }

    #[test]
    fn a_spacer_takes_the_small_blocks_and_the_per_cpu_lists_within_the_cap() {
        // /proc/buddyinfo's Normal zone of the development VM (orders 0..10).
        let blocks = [
            4368, 21955, 64361, 42534, 26974, 14597, 6923, 2764, 1010, 289, 1952,
        ];
        let small = 4368 + 2 * 21955 + 4 * 64361 + 8 * 42534 + 16 * 26974 + 32 * 14597;
        assert_eq!(spacer_pages(&blocks, 23_474, None, 0), small + 23_474);
        // Order 6 and above are never taken.
        let mut more = blocks;
        more[PACK_BELOW_ORDER] += 1000;
        assert_eq!(spacer_pages(&more, 0, None, 0), small);
        // Capped so that `keep` bytes of MemAvailable stay free.
        assert_eq!(
            spacer_pages(&blocks, 0, Some(3 << 30), 2 << 30),
            (1 << 30) / 4096
        );
        assert_eq!(spacer_pages(&blocks, 0, Some(1 << 30), 2 << 30), 0);
        assert_eq!(spacer_pages(&[], 0, None, 0), 0);
    }

    #[test]
    fn packing_is_off_until_asked_and_never_for_small_regions() {
        assert_eq!(spacer_pages_now(1 << 30), 0);
        set_pack_frames(true);
        assert_eq!(spacer_pages_now(PACK_MIN_BYTES - 4096), 0);
        set_pack_frames(false);
        assert!(Spacer::take(0).is_none());
    }

    #[test]
    fn adjacency_counts_frames_that_follow_the_previous_one() {
        assert_eq!(frame_adjacency(&[]), None);
        assert_eq!(frame_adjacency(&[7]), None);
        assert_eq!(frame_adjacency(&[10, 11, 12, 13]), Some(1.0));
        assert_eq!(frame_adjacency(&[10, 12, 14, 16]), Some(0.0));
        // Two runs: 3 of 4 steps follow on.
        assert_eq!(frame_adjacency(&[10, 11, 12, 40, 41]), Some(0.75));
        // Descending frames are next to each other too; equal ones are not.
        assert_eq!(frame_adjacency(&[5, 4, 3]), Some(1.0));
        assert_eq!(frame_adjacency(&[5, 5, 9]), Some(0.0));
    }

    #[test]
    fn the_freed_half_is_every_odd_page_once_in_a_fixed_shuffle() {
        let v = shuffled_odd_pages(1000);
        assert_eq!(v.len(), 500);
        let mut s = v.clone();
        s.sort();
        assert_eq!(s, (0..500).map(|i| 2 * i + 1).collect::<Vec<_>>());
        assert_ne!(v, s, "shuffled");
        assert_eq!(v, shuffled_odd_pages(1000), "deterministic");
    }

    #[test]
    fn describe_names_the_case_and_the_order0_and_large_blocks() {
        let c = Compaction {
            before: "fork-4k".into(),
            free_before: vec![114739, 5, 0, 0, 0, 0, 0, 0, 0, 2, 10],
            free_after: vec![6588, 5, 0, 0, 0, 0, 0, 0, 0, 1373, 3700],
            ms: 41.2,
        };
        assert_eq!(
            describe(&c),
            "compacted free memory before fork-4k (41 ms): free order-0 blocks 114739 -> 6588, order >= 9 12 -> 5073"
        );
    }
}
