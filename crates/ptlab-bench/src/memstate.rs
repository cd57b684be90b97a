//! The state of the machine's free memory around a live measurement:
//! compacting it (`--compact-memory`), fragmenting it on purpose
//! (`ptlab bench --fragment-memory`), and how contiguous the frames of an
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
