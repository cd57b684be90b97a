//! ptlab-live: run `.ptl` scenarios on the live Linux kernel, diff them
//! against the model, and fuzz both.
//!
//! * [`LiveBackend`] executes a scenario in worker processes forked from
//!   ptlab and observes them through /proc (docs/live.md).
//! * [`knobs`] writes THP `enabled` knobs under a lock, with a restore
//!   journal and signal/panic handlers.
//! * [`diff`] runs the model and the kernel in lockstep and compares their
//!   observations structurally.
//! * [`fuzz`] generates random scenarios, diffs them and shrinks failures.
//! * [`export_c`] turns a scenario into a standalone C reproducer.

pub mod budget;
pub mod diff;
pub mod export_c;
pub mod fuzz;
mod gate;
pub mod incremental;
pub mod kernel;
pub mod knobs;
pub mod lifeline;
pub mod live;
pub mod reach;
pub mod swapfile;
mod wire;
mod worker;
mod worker_exe;

pub use budget::{Amount, LiveLimits};
pub use diff::{
    diff_file, diff_source, DiffBackend, DiffOptions, DiffOutcome, DiffReport, DiffTiming,
    Divergence,
};
pub use export_c::{export_c, ExportError};
pub use live::{LiveBackend, LiveCaps, LiveError, ObserveTiming, Planned};
pub use worker_exe::exec_workers;

/// Why live runs cannot happen on this machine, if they cannot: a reason
/// suitable for a `SKIP:` line.
pub fn live_unavailable() -> Option<String> {
    if !worker::SUPPORTED {
        return Some("the live backend needs an x86-64 or arm64 host".into());
    }
    if !std::path::Path::new("/proc/self/pagemap").exists() {
        return Some("/proc/self/pagemap is missing".into());
    }
    if !std::path::Path::new(knobs::THP_DIR).exists() {
        return Some(format!("{} is missing (no THP support)", knobs::THP_DIR));
    }
    None
}

/// Whether this process runs as root (needed for PFNs, kpageflags,
/// kpagecount and knob writes).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether a live test must skip here: live runs cannot happen
/// ([`live_unavailable`]) or this process is not root (`root_for`: what the
/// test needs root for). It says why on stderr as `SKIP: {test}: {why}`.
pub fn skip_live_test(test: &str, root_for: &str) -> bool {
    let why = live_unavailable().or_else(|| (!is_root()).then(|| root_for.to_string()));
    if let Some(why) = &why {
        eprintln!("SKIP: {test}: {why}");
    }
    why.is_some()
}
