//! Budgets of a live run: how much memory a scenario's processes may
//! populate, how many processes it may have, and how large a swap file it
//! may create. The model refuses what its machine cannot hold; the live
//! kernel would try, and take the real machine down with it (a `write p
//! 64G` populates 64 GiB; 100,000 `fork` lines make 100,000 processes;
//! `swap 1T` fills the disk). So the live backend checks every statement
//! against these budgets *before* making its system call, and stops the
//! run with an error that names the budget, what the statement asked for
//! and the option that raises it (docs/live.md, "Budgets").
//!
//! Memory is checked with an upper bound of what the statement can
//! populate, computed from its arguments (see [`populate_bound`]), plus
//! what the scenario's processes hold already: the bounds of the
//! statements since the last measurement, and when that sum would pass
//! the budget, a measurement (`RssAnon` + `RssShmem` + `VmPTE` of every
//! worker from `/proc/PID/status`, then, if that is still too much, the
//! proportional share `Pss` from `/proc/PID/smaps_rollup`, which counts a
//! page shared by a fork once).

use std::path::{Path, PathBuf};

/// The largest folio that can back anonymous memory on x86-64: a PMD THP.
/// A fault anywhere in a 2 MiB-aligned block may allocate all of it.
pub const MAX_FOLIO: u64 = 2 << 20;

/// Default memory budget: this percentage of `MemAvailable` when the live
/// backend starts.
pub const MEMORY_DEFAULT_PERCENT: u32 = 50;
/// Default process budget: scenario processes alive at once (`main` and
/// every `fork` child not yet exited).
pub const PROCS_DEFAULT: u64 = 256;
/// Default swap budget: this percentage of the free space of the
/// filesystem the swap file goes to, when the `swap` statement runs.
pub const SWAP_DEFAULT_PERCENT: u32 = 25;
/// Free space a swap file must always leave on its filesystem, whatever
/// `--max-swap` says.
pub const DISK_RESERVE: u64 = 256 << 20;

/// A limit as given: bytes, or a percentage of what the machine has
/// (`MemAvailable` for memory, free disk for swap).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    Bytes(u64),
    Percent(f64),
}

impl Amount {
    /// Parse `64G`, `512M`, `0x1000`, `123` or `75%`.
    pub fn parse(s: &str) -> Result<Amount, String> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("'{s}' is not a percentage (example: 50%)"))?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(format!(
                    "'{s}': a percentage must be above 0 and at most 100"
                ));
            }
            return Ok(Amount::Percent(v));
        }
        let v = ptlab_scenario::parse_param_value(t)
            .map_err(|_| format!("'{s}' is not a size or percentage (examples: 8G, 512M, 50%)"))?;
        Ok(Amount::Bytes(v))
    }

    fn resolve(self, of: u64) -> u64 {
        match self {
            Amount::Bytes(b) => b,
            Amount::Percent(p) => (of as f64 * p / 100.0) as u64,
        }
    }
}

/// Budgets as configured (`None`: the default).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveLimits {
    /// Memory the scenario's processes may populate (`--max-memory`).
    pub max_memory: Option<Amount>,
    /// Scenario processes alive at once (`--max-procs`).
    pub max_procs: Option<u64>,
    /// Size of a `swap SIZE` file (`--max-swap`).
    pub max_swap: Option<Amount>,
}

/// The memory budget of one run, resolved when the backend starts.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    pub bytes: u64,
    /// Where the number comes from, for messages.
    pub source: String,
}

impl LiveLimits {
    /// The memory budget now.
    pub fn memory(&self) -> MemoryBudget {
        let avail = mem_available();
        match (self.max_memory, avail) {
            (Some(Amount::Bytes(b)), _) => MemoryBudget {
                bytes: b,
                source: "set with --max-memory".into(),
            },
            (Some(a @ Amount::Percent(p)), Some(av)) => MemoryBudget {
                bytes: a.resolve(av),
                source: format!("--max-memory {p}% of MemAvailable {}", fmt_bytes(av)),
            },
            (None, Some(av)) => MemoryBudget {
                bytes: Amount::Percent(f64::from(MEMORY_DEFAULT_PERCENT)).resolve(av),
                source: format!(
                    "the default, {MEMORY_DEFAULT_PERCENT}% of MemAvailable {} at start",
                    fmt_bytes(av)
                ),
            },
            (_, None) => MemoryBudget {
                bytes: 1 << 30,
                source: "the fallback when /proc/meminfo has no MemAvailable".into(),
            },
        }
    }

    /// The process budget.
    pub fn procs(&self) -> u64 {
        self.max_procs.unwrap_or(PROCS_DEFAULT)
    }

    /// Check a `swap SIZE` of `bytes` in directory `dir` against the swap
    /// budget and the free space there; `Err` is the message.
    pub fn check_swap(&self, bytes: u64, dir: &Path) -> Result<(), String> {
        let size = bytes & !4095;
        let (fs_dir, free) = free_space(dir);
        let (budget, source) = match (self.max_swap, free) {
            (Some(Amount::Bytes(b)), _) => (b, "set with --max-swap".to_string()),
            (Some(a @ Amount::Percent(p)), Some(f)) => (
                a.resolve(f),
                format!(
                    "--max-swap {p}% of the {} free on {}",
                    fmt_bytes(f),
                    fs_dir.display()
                ),
            ),
            (None, Some(f)) => (
                Amount::Percent(f64::from(SWAP_DEFAULT_PERCENT)).resolve(f),
                format!(
                    "the default, {SWAP_DEFAULT_PERCENT}% of the {} free on {}",
                    fmt_bytes(f),
                    fs_dir.display()
                ),
            ),
            (_, None) => (
                0,
                format!("no free space could be read for {}", fs_dir.display()),
            ),
        };
        if size > budget {
            return Err(format!(
                "swap budget exceeded: a swap file of {} is more than the swap budget of {} \
                 ({source}); raise it with --max-swap SIZE (e.g. --max-swap {}), or put the file \
                 on a larger filesystem with PTLAB_SWAP_DIR",
                fmt_bytes(size),
                fmt_bytes(budget),
                fmt_size_arg(size)
            ));
        }
        if let Some(f) = free {
            if size.saturating_add(DISK_RESERVE) > f {
                return Err(format!(
                    "not enough disk for the swap file: {} asked for, {} free on {} and {} must \
                     stay free (whatever --max-swap says); use a smaller size or PTLAB_SWAP_DIR",
                    fmt_bytes(size),
                    fmt_bytes(f),
                    fs_dir.display(),
                    fmt_bytes(DISK_RESERVE)
                ));
            }
        }
        Ok(())
    }
}

/// `MemTotal` from /proc/meminfo, in bytes.
pub fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| {
        let v = l.strip_prefix("MemTotal:")?;
        v.trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    })
}

/// `machine memory SIZE` on the live kernel: a scenario written for a
/// machine with more memory than this one cannot run here; stop it before
/// anything happens, saying so (a smaller or equal size is accepted and
/// ignored: the kernel has the memory it has).
pub fn check_machine_memory(bytes: u64) -> Result<(), String> {
    match mem_total() {
        Some(total) if bytes > total => Err(format!(
            "the scenario models a machine with {} of memory (`machine memory`), and this one \
             has {}: the live kernel cannot run it. Run it on the model (`ptlab run`, \
             `ptlab cost`)",
            fmt_bytes(bytes),
            fmt_bytes(total)
        )),
        _ => Ok(()),
    }
}

/// NUMA nodes with memory on this machine
/// (`/sys/devices/system/node/has_memory`, a list such as `0` or `0-1`);
/// 1 when the file cannot be read (a kernel without CONFIG_NUMA).
pub fn memory_nodes() -> u32 {
    std::fs::read_to_string("/sys/devices/system/node/has_memory")
        .ok()
        .and_then(|t| count_node_list(t.trim()))
        .unwrap_or(1)
}

/// Nodes in a kernel node list (`0`, `0-3`, `0,2-3`).
fn count_node_list(list: &str) -> Option<u32> {
    let mut n = 0;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<u32>().ok()?.checked_sub(a.parse::<u32>().ok()?)? + 1,
            None => {
                part.parse::<u32>().ok()?;
                1
            }
        };
    }
    Some(n)
}

/// `machine nodes N` (and `numa node N-1`) on the live kernel: a scenario
/// for a machine with more NUMA nodes than this one stops here, saying so.
pub fn check_machine_nodes(nodes: u32) -> Result<(), String> {
    let have = memory_nodes();
    if nodes <= have {
        return Ok(());
    }
    Err(format!(
        "the scenario models a machine with {nodes} NUMA nodes, and this one has {have}: the \
         live kernel cannot run it. Run it on the model (`ptlab run --nodes {nodes}`, \
         `ptlab cost`)"
    ))
}

/// Why `numa scan` cannot run live: automatic NUMA balancing scans on its
/// own timer (task_numa_work() from the scheduler tick, every
/// numa_balancing_scan_period) and only on a machine with more than one
/// node; no system call asks for a pass.
pub fn numa_scan_refusal() -> String {
    format!(
        "`numa scan` asks for one pass of automatic NUMA balancing, which the kernel runs only \
         on its own schedule (task_numa_work()) and only with more than one NUMA node; this \
         machine has {}. Run it on the model (`ptlab run`, `ptlab cost`)",
        memory_nodes()
    )
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| {
        let v = l.strip_prefix("MemAvailable:")?;
        Some(v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()? * 1024)
    })
}

/// Free bytes (for unprivileged users: `f_bavail`) on the filesystem of
/// `dir`, or of its nearest existing ancestor (the swap directory is
/// created on first use); with the directory measured.
pub fn free_space(dir: &Path) -> (PathBuf, Option<u64>) {
    let mut d = dir.to_path_buf();
    while !d.exists() {
        match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => d = p.to_path_buf(),
            _ => break,
        }
    }
    let Ok(c) = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()) else {
        return (d, None);
    };
    // SAFETY: statvfs into a zeroed struct with a NUL-terminated path.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return (d, None);
        }
        (
            d,
            Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64)),
        )
    }
}

/// Upper bound of the memory touching `[start, start + len)` can populate:
/// the range widened to whole 2 MiB blocks ([`MAX_FOLIO`]), since any
/// fault inside a block may allocate a PMD THP (or mTHPs) for all of it.
/// Lengths that wrap are the kernel's EINVAL and populate nothing.
pub fn populate_bound(start: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let Some(end) = start.checked_add(len) else {
        return 0;
    };
    let a = start & !(MAX_FOLIO - 1);
    let b = end
        .checked_add(MAX_FOLIO - 1)
        .map_or(u64::MAX, |e| e & !(MAX_FOLIO - 1));
    b - a
}

/// Upper bound for a new mapping of `len` bytes that is populated
/// (MAP_POPULATE, MAP_LOCKED): its pages, whatever folios back them (a
/// folio never reaches past its VMA).
pub fn mapping_bound(len: u64) -> u64 {
    len.checked_add(4095).map_or(0, |l| l & !4095)
}

/// `1.5 GiB`, `64 KiB`, `12 B`.
pub fn fmt_bytes(b: u64) -> String {
    const U: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// A size argument at least `b` (rounded up to whole MiB, GiB or TiB).
pub fn fmt_size_arg(b: u64) -> String {
    for (shift, unit) in [(40u32, "T"), (30, "G"), (20, "M")] {
        let u = 1u64 << shift;
        if b >= u {
            return format!("{}{unit}", b.div_ceil(u));
        }
    }
    format!("{}K", b.div_ceil(1024).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_bigger_than_this_one_is_refused_with_the_reason() {
        let Some(total) = mem_total() else {
            eprintln!("SKIP: no MemTotal in /proc/meminfo");
            return;
        };
        assert_eq!(count_node_list("0"), Some(1));
        assert_eq!(count_node_list("0-3"), Some(4));
        assert_eq!(count_node_list("0,2-3"), Some(3));
        assert_eq!(count_node_list("x"), None);
        let have = memory_nodes();
        assert_eq!(check_machine_nodes(have), Ok(()));
        let err = check_machine_nodes(have + 1).unwrap_err();
        assert!(err.contains(&format!("{} NUMA nodes", have + 1)), "{err}");
        assert!(numa_scan_refusal().contains("task_numa_work"));
        assert_eq!(check_machine_memory(64 << 20), Ok(()));
        assert_eq!(check_machine_memory(total), Ok(()));
        let err = check_machine_memory(total * 2).unwrap_err();
        assert!(
            err.contains(&fmt_bytes(total * 2)) && err.contains("cannot run it"),
            "{err}"
        );
    }

    #[test]
    fn amounts_parse() {
        assert_eq!(Amount::parse("64G"), Ok(Amount::Bytes(64 << 30)));
        assert_eq!(Amount::parse("0x1000"), Ok(Amount::Bytes(4096)));
        assert_eq!(Amount::parse("75%"), Ok(Amount::Percent(75.0)));
        assert!(Amount::parse("0%").is_err());
        assert!(Amount::parse("150%").is_err());
        assert!(Amount::parse("lots").is_err());
        assert!(Amount::parse("").is_err());
    }

    #[test]
    fn bounds_round_to_pmd_blocks() {
        assert_eq!(populate_bound(0x7f00_0000_0000, 4096), 2 << 20);
        assert_eq!(populate_bound(0x7f00_001f_f000, 8192), 4 << 20);
        assert_eq!(populate_bound(0x7f00_0000_0000, 64 << 30), 64 << 30);
        assert_eq!(populate_bound(1, 0), 0);
        assert_eq!(populate_bound(u64::MAX - 10, 100), 0);
        assert_eq!(mapping_bound(1), 4096);
        assert_eq!(mapping_bound(u64::MAX), 0);
    }

    #[test]
    fn swap_budget_and_disk() {
        let dir = std::env::temp_dir().join("ptlab-budget-test/does/not/exist");
        let l = LiveLimits {
            max_swap: Some(Amount::Bytes(1 << 20)),
            ..Default::default()
        };
        assert!(l.check_swap(1 << 20, &dir).is_ok());
        let e = l.check_swap(2 << 20, &dir).unwrap_err();
        assert!(
            e.contains("--max-swap") && e.contains("2 MiB") && e.contains("1 MiB"),
            "{e}"
        );
        let huge = LiveLimits {
            max_swap: Some(Amount::Bytes(u64::MAX)),
            ..Default::default()
        };
        let e = huge.check_swap(1 << 60, &dir).unwrap_err();
        assert!(e.contains("not enough disk"), "{e}");
        // The default is a fraction of the free space: 1 PiB never fits.
        let e = LiveLimits::default().check_swap(1 << 50, &dir).unwrap_err();
        assert!(
            e.contains("swap budget exceeded") && e.contains("default"),
            "{e}"
        );
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_bytes(64 << 30), "64 GiB");
        assert_eq!(fmt_bytes(1536 << 20), "1.5 GiB");
        assert_eq!(fmt_bytes(12), "12 B");
        assert_eq!(fmt_size_arg(64 << 30), "64G");
        assert_eq!(fmt_size_arg((64 << 30) + 1), "65G");
        assert_eq!(fmt_size_arg(100), "1K");
    }

    #[test]
    fn memory_budget_default_is_half_of_available() {
        let m = LiveLimits::default().memory();
        if let Some(av) = mem_available() {
            // MemAvailable moves between the two reads: within 10 %.
            assert!(m.bytes.abs_diff(av / 2) < av / 10, "{} vs {av}", m.bytes);
            assert!(m.source.contains("50%"), "{}", m.source);
        }
        let m = LiveLimits {
            max_memory: Some(Amount::Bytes(123)),
            ..Default::default()
        }
        .memory();
        assert_eq!(m.bytes, 123);
    }
}
