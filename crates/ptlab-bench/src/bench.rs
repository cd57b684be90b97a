//! `ptlab bench`: run workloads under the knob lock and collect a result.

use crate::result::{BenchResult, Case, Slice, SCHEMA};
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
    /// Interleave the cases' runs over this many rounds (`--rounds`; 0 or
    /// 1: each case once, with all its runs, in the given order). Each
    /// case's runs are split into `rounds` slices, each measured by a
    /// child of its own (with its own warm-up and freshly faulted region),
    /// and every round runs one slice of every case, every other round in
    /// reverse order ([`schedule`]): a drift of the machine between rounds
    /// then reaches all the cases alike, and the two arms of a contrast,
    /// adjacent in the order, are measured minutes apart no more.
    pub rounds: u64,
    /// Run only the slices of these rounds (`ptlab reproduce` runs the
    /// first half, calibrates, then the second half; None: all of them).
    pub only_rounds: Option<std::ops::Range<u64>>,
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

/// The order of an interleaved run: for `runs[i]` measured runs of case
/// `i` over `rounds` rounds (0 is taken as 1), the slices
/// `(case, round, runs)` in the order they run. Round `r` runs the cases
/// in the given order when `r` is even and in reverse when odd (A B, B A,
/// A B, ...: each case's mean time in the run is then the same for a
/// linear drift); a case's runs are spread as evenly as the rounds allow
/// (the first `runs % rounds` rounds get one more), and a slice of no
/// runs is left out. With one round it is every case once, in order,
/// with all its runs.
pub fn schedule(runs: &[u64], rounds: u64) -> Vec<(usize, u64, u64)> {
    let rounds = rounds.max(1);
    let mut out = Vec::new();
    for r in 0..rounds {
        let mut order: Vec<usize> = (0..runs.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let n = runs[i] / rounds + u64::from(r < runs[i] % rounds);
            if n > 0 {
                out.push((i, r, n));
            }
        }
    }
    out
}

/// Add one slice's measurement to its case's: the samples and per-run
/// extras in the order measured, the counter deltas summed, and the
/// layout checks kept each (once each: the order-0 layouts' frame
/// contiguity differs from slice to slice). `into` and `slice` must be the
/// same case.
pub fn merge_slice(into: &mut Case, slice: Case) {
    debug_assert_eq!(into.name, slice.name);
    into.samples.extend(slice.samples);
    for (k, v) in slice.counters {
        *into.counters.entry(k).or_insert(0) += v;
    }
    for (k, v) in slice.extra {
        into.extra.entry(k).or_default().extend(v);
    }
    if !slice.layout_check.is_empty()
        && !into
            .layout_check
            .split("; ")
            .any(|c| c == slice.layout_check)
    {
        if !into.layout_check.is_empty() {
            into.layout_check.push_str("; ");
        }
        into.layout_check.push_str(&slice.layout_check);
    }
}

/// Put two partial runs of the same cases together (`ptlab reproduce`'s
/// halves around its calibration): `b`'s slices are added to `a`'s cases
/// by name, in `a`'s case order (a case only `b` measured goes last);
/// the schedules, compactions and failures are concatenated, notes and
/// messages kept once each. `a`'s label, start time and environment
/// otherwise stand.
pub fn merge_outcomes(mut a: Outcome, b: Outcome) -> Outcome {
    for c in b.result.cases {
        match a.result.cases.iter_mut().find(|x| x.name == c.name) {
            Some(x) => merge_slice(x, c),
            None => a.result.cases.push(c),
        }
    }
    let (ea, eb) = (&mut a.result.environment, b.result.environment);
    ea.schedule.extend(eb.schedule);
    ea.compactions.extend(eb.compactions);
    for n in eb.notes {
        if !ea.notes.contains(&n) {
            ea.notes.push(n);
        }
    }
    for m in b.messages {
        if !a.messages.contains(&m) {
            a.messages.push(m);
        }
    }
    for f in b.failed {
        if !a.failed.iter().any(|(w, _)| *w == f.0) {
            a.failed.push(f);
        }
    }
    // A case that failed in either part is not measured: its other
    // part's samples would be a partial arm.
    let failed: Vec<String> = a.failed.iter().map(|(w, _)| w.clone()).collect();
    a.result.cases.retain(|c| !failed.contains(&c.name));
    a
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
    if crate::memstate::pack_frames() {
        environment.notes.push(format!(
            "frames packed (--frames packed): every order-0 region of {} MiB or more was faulted \
             after a spacer took the per-CPU lists and the free blocks below order {} (each \
             case's layout check gives its size and the frames' adjacency)",
            crate::memstate::PACK_MIN_BYTES >> 20,
            crate::memstate::PACK_BELOW_ORDER
        ));
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
    let mut cases: Vec<Option<Case>> = vec![None; workloads.len()];
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut problems = Vec::new();
    let runs: Vec<u64> = params.iter().map(|p| p.runs).collect();
    let interleaved = opts.rounds > 1;
    for (i, round, n) in schedule(&runs, opts.rounds) {
        if opts
            .only_rounds
            .as_ref()
            .is_some_and(|r| !r.contains(&round))
        {
            continue;
        }
        let w = workloads[i];
        if failed.iter().any(|(f, _)| f == w.name) {
            continue;
        }
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
        let mut p = params[i];
        p.runs = n;
        if interleaved {
            environment.schedule.push(Slice {
                case: w.name.to_string(),
                round,
                runs: n,
            });
        }
        match workload::run_case(w, p, &mut session, &mut |pr| on(w, pr)) {
            Ok(c) => match &mut cases[i] {
                Some(into) => merge_slice(into, c),
                None => cases[i] = Some(c),
            },
            Err(e) => {
                // A case with a failed slice is not measured at all.
                cases[i] = None;
                failed.push((w.name.to_string(), e.to_string()));
            }
        }
        // Back to the machine's settings after every case, so a case never
        // runs with (and the machine never keeps) the previous case's knobs.
        problems.extend(session.restore());
    }
    let cases: Vec<Case> = cases.into_iter().flatten().collect();
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

    #[test]
    fn one_round_is_every_case_once_in_order() {
        assert_eq!(
            schedule(&[8, 5, 3], 1),
            vec![(0, 0, 8), (1, 0, 5), (2, 0, 3)]
        );
        assert_eq!(schedule(&[8, 5], 0), schedule(&[8, 5], 1));
        assert!(schedule(&[], 4).is_empty());
    }

    #[test]
    fn rounds_alternate_direction_and_spread_the_runs() {
        let s = schedule(&[8, 5, 2], 4);
        let order: Vec<(usize, u64)> = s.iter().map(|&(i, r, _)| (i, r)).collect();
        // A B C, C B A, A B, B A: the third case has runs in two rounds only.
        assert_eq!(
            order,
            vec![
                (0, 0),
                (1, 0),
                (2, 0),
                (2, 1),
                (1, 1),
                (0, 1),
                (0, 2),
                (1, 2),
                (1, 3),
                (0, 3)
            ]
        );
        // Every case gets all its runs, as evenly as the rounds allow.
        for (i, want) in [
            (0usize, vec![2u64, 2, 2, 2]),
            (1, vec![2, 1, 1, 1]),
            (2, vec![1, 1]),
        ] {
            let got: Vec<u64> = s.iter().filter(|x| x.0 == i).map(|x| x.2).collect();
            assert_eq!(got, want, "case {i}");
        }
        // More rounds than runs: one run a round, no empty slices.
        let s = schedule(&[2], 5);
        assert_eq!(s, vec![(0, 0, 1), (0, 1, 1)]);
    }

    #[test]
    fn a_linear_drift_reaches_both_arms_alike() {
        // Each slice's position in time, weighted by its runs: with an even
        // number of rounds the two arms' mean positions coincide.
        let s = schedule(&[8, 8], 4);
        let mut t = 0.0;
        let mut sum = [0.0f64; 2];
        for &(i, _, n) in &s {
            for _ in 0..n {
                sum[i] += t;
                t += 1.0;
            }
        }
        assert_eq!(sum[0], sum[1]);
        // One round (A then B): B is measured later on average.
        let s = schedule(&[8, 8], 1);
        assert_eq!(s, vec![(0, 0, 8), (1, 0, 8)]);
    }

    fn case(name: &str, samples: &[f64], check: &str) -> Case {
        Case {
            name: name.into(),
            samples: samples.to_vec(),
            counters: [("vmstat/pgfault".to_string(), 10)].into(),
            extra: [("x".to_string(), samples.to_vec())].into(),
            layout_check: check.into(),
            ..Default::default()
        }
    }

    fn outcome(cases: Vec<Case>, slices: &[(&str, u64)], failed: &[&str]) -> Outcome {
        let mut result = BenchResult {
            cases,
            ..Default::default()
        };
        result.environment.schedule = slices
            .iter()
            .map(|&(c, round)| Slice {
                case: c.into(),
                round,
                runs: 1,
            })
            .collect();
        result.environment.notes = vec!["n".into()];
        Outcome {
            result,
            failed: failed
                .iter()
                .map(|f| (f.to_string(), "why".into()))
                .collect(),
            messages: vec!["m".into()],
        }
    }

    #[test]
    fn slices_merge_into_their_own_case() {
        let a = outcome(
            vec![
                case("fork-4k", &[1.0], "84% adjacent"),
                case("fork-thp-pte", &[10.0], "ok"),
            ],
            &[("fork-4k", 0), ("fork-thp-pte", 0)],
            &[],
        );
        let b = outcome(
            vec![
                case("fork-thp-pte", &[11.0], "ok"),
                case("fork-4k", &[2.0], "20% adjacent"),
            ],
            &[("fork-thp-pte", 1), ("fork-4k", 1)],
            &[],
        );
        let m = merge_outcomes(a, b);
        let c = &m.result.cases;
        assert_eq!(c[0].name, "fork-4k");
        assert_eq!(c[0].samples, vec![1.0, 2.0]);
        assert_eq!(c[0].extra["x"], vec![1.0, 2.0]);
        assert_eq!(c[0].counters["vmstat/pgfault"], 20);
        assert_eq!(c[0].layout_check, "84% adjacent; 20% adjacent");
        assert_eq!(c[1].samples, vec![10.0, 11.0]);
        assert_eq!(c[1].layout_check, "ok");
        let order: Vec<(&str, u64)> = m
            .result
            .environment
            .schedule
            .iter()
            .map(|x| (x.case.as_str(), x.round))
            .collect();
        assert_eq!(
            order,
            vec![
                ("fork-4k", 0),
                ("fork-thp-pte", 0),
                ("fork-thp-pte", 1),
                ("fork-4k", 1)
            ]
        );
        assert_eq!(m.result.environment.notes, vec!["n".to_string()]);
        assert_eq!(m.messages, vec!["m".to_string()]);
    }

    #[test]
    fn a_case_that_failed_in_one_part_is_not_measured() {
        let a = outcome(
            vec![
                case("fork-4k", &[1.0], ""),
                case("fork-thp-pte", &[10.0], ""),
            ],
            &[],
            &[],
        );
        let b = outcome(vec![case("fork-4k", &[2.0], "")], &[], &["fork-thp-pte"]);
        let m = merge_outcomes(a, b);
        let names: Vec<&str> = m.result.cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["fork-4k"]);
        assert_eq!(m.failed.len(), 1);
    }
}
