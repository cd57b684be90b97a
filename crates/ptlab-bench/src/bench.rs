//! `ptlab bench`: run workloads under the knob lock and collect a result.

use crate::result::{BenchResult, SCHEMA};
use crate::workload::{self, Progress, Workload};
use ptlab_live::knobs::KnobSession;

/// Options shared by every case of a run.
#[derive(Clone, Debug, Default)]
pub struct BenchOptions {
    pub quick: bool,
    pub runs: Option<u64>,
    pub iterations: Option<u64>,
    /// Region size override in bytes (tests use tiny sizes).
    pub size: Option<u64>,
    /// Warm-up runs override (default: the workload's, 1). `ptlab speed`
    /// uses 0: one execution of the workload per case.
    pub warmup: Option<u64>,
    pub label: String,
    /// Compact free memory before each case (`--compact-memory`; needs
    /// root, skipped with a message otherwise): every case then faults its
    /// region from the same, compacted free lists (crate::memstate).
    pub compact_memory: bool,
    /// Hold this many bytes of fragmented memory during the run
    /// (`ptlab bench --fragment-memory`; 0: none; crate::memstate::Fragmenter).
    pub fragment_bytes: u64,
}

/// What a run produced: the result file, and the cases that failed.
#[derive(Debug)]
pub struct Outcome {
    pub result: BenchResult,
    /// (workload, why) for every case that could not be measured.
    pub failed: Vec<(String, String)>,
    /// What the run did to free memory, one line each, for the log
    /// (the result's environment records the same).
    pub messages: Vec<String>,
}

/// Why this kernel's base page size rules out live measurements: the
/// workloads, the calibration and the model all use 4 KiB pages (x86-64,
/// and arm64 built with CONFIG_ARM64_4K_PAGES; 16 KiB and 64 KiB arm64
/// kernels are not modelled).
pub fn page_size_problem() -> Option<String> {
    // SAFETY: sysconf has no side effects.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    page_size_problem_of(ps as i64)
}

fn page_size_problem_of(ps: i64) -> Option<String> {
    (ps != 4096).then(|| {
        format!(
            "this kernel uses {} KiB base pages; ptlab's workloads and model assume 4 KiB pages \
             (on arm64: a kernel built with CONFIG_ARM64_4K_PAGES)",
            ps / 1024
        )
    })
}

/// Why live benchmarks cannot run here at all, if they cannot.
pub fn unavailable() -> Option<String> {
    if let Some(why) = ptlab_live::live_unavailable() {
        return Some(why);
    }
    if let Some(why) = page_size_problem() {
        return Some(why);
    }
    if !ptlab_live::is_root() {
        return Some(
            "needs root (layouts are verified from /proc/kpageflags and pagemap frame numbers; \
             THP knobs must be set)"
                .into(),
        );
    }
    None
}

/// Resolve workload names (`all` = every workload).
pub fn resolve(names: &[String]) -> Result<Vec<&'static Workload>, String> {
    let mut out: Vec<&'static Workload> = Vec::new();
    for n in names {
        if n == "all" {
            out.extend(workload::WORKLOADS.iter());
            continue;
        }
        match workload::find(n) {
            Some(w) => out.push(w),
            None => {
                let all: Vec<&str> = workload::WORKLOADS.iter().map(|w| w.name).collect();
                return Err(format!(
                    "unknown workload '{n}'; expected one of: all, {}",
                    all.join(", ")
                ));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|w| seen.insert(w.name));
    Ok(out)
}

/// Run `workloads` in order, holding the THP knob lock throughout; the
/// knobs are restored before this returns (and on every other exit path,
/// see ptlab_live::knobs). A case that fails is reported in
/// [`Outcome::failed`] and the others still run.
pub fn run(
    workloads: &[&'static Workload],
    opts: &BenchOptions,
    on: &mut dyn FnMut(&Workload, Progress),
) -> Result<Outcome, String> {
    let params: Vec<_> = workloads
        .iter()
        .map(|w| {
            w.params(opts.quick, opts.runs, opts.iterations, opts.size)
                .map(|mut p| {
                    if let Some(n) = opts.warmup {
                        p.warmup = n;
                    }
                    p
                })
        })
        .collect::<Result<_, _>>()?;
    if let Some(why) = unavailable() {
        return Err(why);
    }
    let started = crate::env::now_rfc3339();
    let lock_err = |e: std::io::Error| {
        format!(
            "cannot take the THP knob lock {}: {e}",
            ptlab_live::knobs::lock_path().display()
        )
    };
    let lock = ptlab_live::knobs::acquire_or_wait("bench").map_err(lock_err)?;
    let fragmenter = match opts.fragment_bytes {
        0 => None,
        n => Some(crate::memstate::Fragmenter::start(n)?),
    };
    let mut environment = crate::env::collect();
    let mut messages = Vec::new();
    if let Some(f) = &fragmenter {
        messages.push(f.describe());
        environment.notes.push(f.describe());
    }
    let mut compact = opts.compact_memory;
    if compact {
        if let Some(why) = crate::memstate::compaction_unavailable() {
            let m = format!("--compact-memory skipped: {why}");
            messages.push(m.clone());
            environment.notes.push(m);
            compact = false;
        }
    }
    let mut session = KnobSession::new();
    let mut cases = Vec::new();
    let mut failed = Vec::new();
    let mut problems = Vec::new();
    for (w, p) in workloads.iter().zip(params) {
        if compact {
            // Before the case's child faults its region: every arm starts
            // from the same compacted free lists.
            match crate::memstate::compact(w.name) {
                Ok(c) => {
                    messages.push(crate::memstate::describe(&c));
                    environment.compactions.push(c);
                }
                Err(e) => {
                    let m = format!("--compact-memory before {}: {e}", w.name);
                    messages.push(m.clone());
                    environment.notes.push(m);
                }
            }
        }
        match workload::run_case(w, p, &mut session, &mut |pr| on(w, pr)) {
            Ok(c) => cases.push(c),
            Err(e) => failed.push((w.name.to_string(), e.to_string())),
        }
        // Back to the machine's settings after every case, so a case never
        // runs with (and the machine never keeps) the previous case's knobs.
        problems.extend(session.restore());
    }
    problems.extend(session.restore());
    drop(fragmenter);
    drop(lock);
    if !problems.is_empty() {
        return Err(format!(
            "could not restore THP knobs: {} (run `ptlab restore`)",
            problems.join("; ")
        ));
    }
    Ok(Outcome {
        result: BenchResult {
            schema: SCHEMA,
            label: if opts.label.is_empty() {
                environment.kernel.clone()
            } else {
                opts.label.clone()
            },
            started,
            environment,
            cases,
        },
        failed,
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_4k_base_pages_are_measured() {
        assert_eq!(page_size_problem_of(4096), None);
        let why = page_size_problem_of(65536).unwrap();
        assert!(why.contains("64 KiB base pages"), "{why}");
        assert!(page_size_problem_of(16384).unwrap().contains("16 KiB"));
        // This machine (x86-64 or a 4 KiB arm64 kernel) has none.
        if cfg!(target_arch = "x86_64") {
            assert_eq!(page_size_problem(), None);
        }
    }
}
