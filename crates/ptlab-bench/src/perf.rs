//! perf counters of a benchmark child, where the machine has them.
//!
//! The parent opens the events on the child's pid (not inherited by the
//! child's own children), disabled; they are reset and enabled when the
//! child reaches the start of its measured runs and disabled at the end,
//! so they cover the same window as the THP/vmstat counter deltas. Kernel
//! work is counted (the seeds are all kernel work); root is needed at the
//! default `perf_event_paranoid`. In a VM without a virtual PMU the
//! hardware events fail to open (ENOENT) and only software events remain.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_TYPE_HW_CACHE: u32 = 3;
const IOC_ENABLE: u64 = 0x2400;
const IOC_DISABLE: u64 = 0x2401;
const IOC_RESET: u64 = 0x2403;

/// (name, type, config) of every event ptlab asks for.
pub const EVENTS: &[(&str, u32, u64)] = &[
    ("cycles", PERF_TYPE_HARDWARE, 0),
    ("instructions", PERF_TYPE_HARDWARE, 1),
    // DTLB | OP_READ << 8 | RESULT_MISS << 16
    ("dTLB-load-misses", PERF_TYPE_HW_CACHE, 3 | (1 << 16)),
    ("page-faults", PERF_TYPE_SOFTWARE, 2),
    ("context-switches", PERF_TYPE_SOFTWARE, 3),
    ("cpu-migrations", PERF_TYPE_SOFTWARE, 4),
];

fn open_event(pid: i32, ty: u32, config: u64) -> std::io::Result<OwnedFd> {
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&ty.to_le_bytes());
    attr[4..8].copy_from_slice(&128u32.to_le_bytes());
    attr[8..16].copy_from_slice(&config.to_le_bytes());
    // flags at offset 40: disabled (bit 0), exclude_hv (bit 6).
    attr[40..48].copy_from_slice(&(1u64 | 1 << 6).to_le_bytes());
    // SAFETY: perf_event_open with a zero-filled attr of the size we state.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            pid,
            -1i32,
            -1i32,
            8u64, // PERF_FLAG_FD_CLOEXEC
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Which events cannot be opened here (on this process), with the error.
pub fn unavailable() -> Vec<(String, String)> {
    EVENTS
        .iter()
        .filter_map(|(n, t, c)| {
            open_event(0, *t, *c)
                .err()
                .map(|e| (n.to_string(), e.to_string()))
        })
        .collect()
}

/// The open events of one child.
pub struct Perf {
    events: Vec<(&'static str, OwnedFd)>,
}

impl Perf {
    /// Open every available event on `pid`, disabled.
    pub fn open(pid: i32) -> Perf {
        Perf {
            events: EVENTS
                .iter()
                .filter_map(|(n, t, c)| open_event(pid, *t, *c).ok().map(|fd| (*n, fd)))
                .collect(),
        }
    }

    fn ioctl_all(&self, req: u64) {
        for (_, fd) in &self.events {
            // SAFETY: perf ioctls without an argument on our descriptors.
            unsafe { libc::ioctl(fd.as_raw_fd(), req as _, 0) };
        }
    }

    /// Reset and start counting.
    pub fn start(&self) {
        self.ioctl_all(IOC_RESET);
        self.ioctl_all(IOC_ENABLE);
    }

    /// Stop counting and read every count, as `perf/<event>`.
    pub fn stop(&self) -> Vec<(String, i64)> {
        self.ioctl_all(IOC_DISABLE);
        let mut out = Vec::new();
        for (n, fd) in &self.events {
            let mut v = [0u8; 8];
            // SAFETY: reading one u64 count into our buffer.
            let r = unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
            if r == 8 {
                out.push((format!("perf/{n}"), i64::from_le_bytes(v)));
            }
        }
        out
    }
}
