//! `ptlab speed`: how fast the model runs a seed workload compared with the
//! live kernel doing the same work natively, and how much memory the model
//! needs per populated page in each folio layout.
//!
//! * Native: `ptlab bench`'s own workload code (`ptlab_bench::bench::run`:
//!   the knob lock, the journaled knobs, restoration, layout verification),
//!   one case per repetition with no warm-up, timed by the child from the
//!   start of its setup to the end of its work with the checkpoints taken
//!   out ([`ptlab_bench::workload::WALL_NS_KEY`]).
//! * Model: the seed scenario (`scenarios/seeds/NAME.ptl`, compiled into
//!   ptlab-cost) run in-process exactly as `ptlab run` runs it on the model
//!   ([`crate::run_on_model`]), without invariant checks and without
//!   printing anything, at the native workload's size and iteration count.
//! * The two sides run interleaved, round by round (native, then the model
//!   on each architecture), so a slower stretch of the host hits both.
//! * Memory: `Model::memory_bytes()` after populating a region in each
//!   layout, per populated 4 KiB page; the process's peak RSS (VmHWM,
//!   reset through /proc/self/clear_refs) as a cross-check.

use crate::bench_cmd::OutFormat;
use anyhow::{bail, Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use ptlab_bench::bench::{self, BenchOptions};
use ptlab_bench::stats::{median, Summary};
use ptlab_bench::workload::{self, Kind, Workload};
use ptlab_cost::seeds::{Seed, SEEDS};
use ptlab_model::{ArchKind, Before};
use ptlab_scenario::{RunOptions, Script};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

pub const SPEED_HELP: &str = "\
For each seed workload (scenarios/seeds/*.ptl; docs/seeds.md) this runs, in
one ptlab process:
  native   the workload as `ptlab bench` runs it, on the live kernel (a forked
           child at fixed addresses, layout verified, THP knobs set and
           restored), each run in a fresh child; the time is the child's
           whole workload: setup (mmap, populate) and every measured
           operation, without the pauses for layout checks;
  model    the seed scenario on the model, for x86-64 and for arm64 (the code
           path of `ptlab run`, no invariant checks, nothing printed), at the
           same region size and iteration count, once per --runs;
and prints the speed-up native / model (> 1× = the model is faster than
the kernel doing the work) three ways, each labelled:
  speed-up       the fastest native run / the fastest model run (min/min):
                 the figure the targets are judged by (JSON: judged_by,
                 speed_up.min_ratio)
  round median   the median over the rounds of native / model of the same
                 round (JSON: speed_up.round_median_ratio)
  of means       mean native / mean model ± stdev, in the table of every
                 side's runs (JSON: speed_up.ratio, speed_up.stdev)
The second table lists each side's min, median and mean ± stdev and the
speed levels among its runs (split where one run is at least 1.25× the
next faster; JSON: levels), and for the model the same runs' thread CPU
time (JSON: cpu_time). A run's wall time moves between two levels for two
reasons on this VM: the host runs the model's memory-bound code about
1.6-1.9× slower for stretches of many runs (the CPU time moves too), and
on a loaded machine another process shares the CPU (wall about 2× the CPU
time, which stays put). Either way a mean depends on how many runs land
on each level; a minimum only needs one run of each side on the fast
level: use --runs 5 or more. A model side whose fastest wall time is
1.25× its least CPU time or more never had the CPU to itself: its
speed-up is marked (shared CPU) and does not judge a target (JSON:
wall_over_cpu). The sides are interleaved round by round
(native once, then the model once per architecture). --warmup N discards
N rounds first (--warmup 1 gave steadier numbers on this VM: a first
native run was sometimes 2-5× slower, and a fresh process's first model
runs are more often slow). Then, per folio
layout (4 KiB pages, 64 KiB mTHP, PMD-mapped 2 MiB THP, PTE-mapped 2 MiB
THP), the model's memory per populated 4 KiB page (Model::memory_bytes()
after populating the region, minus an empty model's), with the process's
peak RSS growth (VmHWM) per page as a cross-check.

The native side needs root and THP in sysfs; without them (or with
--no-live) only the model runs and the output says why. Where the native
workload and the scenario differ in work (native memsets or bzeroes whole
pages, the model touches each page once) is listed in docs/model.md, \"Speed
and memory\". Timing is wall-clock: run on a quiet machine (the load average
is printed with the results).

Examples (ptlab = target/release/ptlab; as root for the native column):
  ptlab speed                                   # every seed, default sizes, 3 runs (a few minutes)
  ptlab speed --quick                           # smaller regions and loops (about half a minute)
  ptlab speed fork-4k fork-thp-pte --runs 5 --warmup 1
  ptlab speed mprotect-64k --param size=256M --param iterations=4
  ptlab speed --no-live --arch arm64 --format json | jq '.rows[].model'
  ptlab speed --quick -o speed.json

--param NAME=VALUE sets a scenario parameter of every selected workload that
declares it; size and iterations set the native workload too (so both sides
still do the same work). Any other parameter (chunk, stride, src, ...) exists
only in the scenario, so it needs --no-live.

Exit status: 0 = every row measured, 1 = a row failed (named on stderr and in
the table), 2 = usage error (unknown workload or parameter, bad --out).";

#[derive(Args)]
pub struct SpeedArgs {
    /// Seed workloads to run (names as in `ptlab bench`), or `all`
    /// (default: all)
    workloads: Vec<String>,

    /// Repetitions of each side (native, each model arch): the speed-up is
    /// the ratio of the sides' fastest runs; min, median, mean ± stdev and
    /// the speed levels over them are listed
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    runs: u64,

    /// Discarded runs of each side before the measured ones (default 0:
    /// every run counts, the first one included)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100))]
    warmup: u64,

    /// The workloads' --quick sizes and loop counts (as `ptlab bench --quick`)
    #[arg(long)]
    quick: bool,

    /// Set a scenario parameter (repeatable), e.g. size=64M, iterations=10;
    /// size and iterations apply to the native workload too
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = crate::parse_param)]
    params: Vec<(String, String)>,

    /// Model only: do not run the native workloads on the live kernel
    #[arg(long)]
    no_live: bool,

    /// Run the model for this architecture only (default: x86_64 and arm64)
    #[arg(long, value_enum)]
    arch: Option<crate::Arch>,

    /// Skip the model-memory table
    #[arg(long)]
    no_memory: bool,

    /// Output format on stdout: the tables, or one JSON object (the same as --out)
    #[arg(long, value_enum, default_value_t = OutFormat::Text)]
    format: OutFormat,

    /// Write the results as JSON to FILE (checked before measuring; missing
    /// directories are created)
    #[arg(short, long, value_name = "FILE")]
    out: Option<PathBuf>,

    /// No progress lines on stderr
    #[arg(short, long)]
    quiet: bool,
}

/// Two runs of one side are on different speed levels when the slower is
/// at least this many times the faster with no sample in between: on this
/// VM the host's two levels are 1.6–1.9× apart and the runs within one
/// level within about ±10 % (docs/model.md, "`ptlab speed` and the host's
/// two levels").
pub const LEVEL_GAP: f64 = 1.25;

/// A model side whose fastest wall time is this many times its least CPU
/// time never had the CPU to itself (other processes ran in between): the
/// machine was loaded and its speed-up is marked as not fit to judge a
/// target (measured on this VM under load 6–7: 1.26–2.39 where every run
/// shared its CPU, 1.00–1.02 where one run had it alone).
pub const SHARED_CPU: f64 = 1.25;

impl ModelTiming {
    /// No run of this side had the CPU to itself.
    pub fn shared_cpu(&self) -> bool {
        self.wall_over_cpu.is_some_and(|r| r >= SHARED_CPU)
    }
}

/// The speed levels among one side's runs: the samples sorted and split
/// at the widest ratio between neighbours, if that ratio is at least
/// [`LEVEL_GAP`]; otherwise one level.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Levels {
    /// 1 or 2.
    pub count: usize,
    /// Runs on the fast level (all of them when `count` is 1).
    pub fast_n: usize,
    /// Runs on the slow level (0 when `count` is 1).
    pub slow_n: usize,
    /// Median of the fast level's runs, seconds.
    pub fast_median_s: f64,
    /// Median of the slow level's runs (`null` for one level).
    pub slow_median_s: Option<f64>,
}

/// Samples a timing can be made of: at least one, each positive and finite.
fn timeable(samples_s: &[f64]) -> bool {
    !samples_s.is_empty() && samples_s.iter().all(|x| x.is_finite() && *x > 0.0)
}

impl Levels {
    /// `None` for no samples or a sample that is not positive and finite.
    pub fn of(samples_s: &[f64]) -> Option<Levels> {
        if !timeable(samples_s) {
            return None;
        }
        let mut v = samples_s.to_vec();
        v.sort_by(f64::total_cmp);
        let split = (1..v.len())
            .map(|i| (i, v[i] / v[i - 1]))
            .filter(|&(_, gap)| gap >= LEVEL_GAP)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i);
        Some(match split {
            None => Levels {
                count: 1,
                fast_n: v.len(),
                slow_n: 0,
                fast_median_s: median(&v)?,
                slow_median_s: None,
            },
            Some(i) => Levels {
                count: 2,
                fast_n: i,
                slow_n: v.len() - i,
                fast_median_s: median(&v[..i])?,
                slow_median_s: Some(median(&v[i..])?),
            },
        })
    }

    /// How far apart the two levels are (slow median / fast median).
    pub fn apart(&self) -> Option<f64> {
        self.slow_median_s.map(|s| s / self.fast_median_s)
    }
}

/// One side's repetitions, in seconds: the minimum, the median, mean ±
/// stdev, and the speed levels among them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timing {
    pub n: usize,
    pub mean_s: f64,
    pub stdev_s: f64,
    /// The fastest run.
    pub min_s: f64,
    pub median_s: f64,
    pub levels: Levels,
    /// In the order of the rounds.
    pub samples_s: Vec<f64>,
}

impl Timing {
    /// `None` for no samples or a sample that is not positive and finite.
    pub fn of(samples_s: &[f64]) -> Option<Timing> {
        let levels = Levels::of(samples_s)?;
        let s = Summary::of(samples_s)?;
        Some(Timing {
            n: s.n,
            mean_s: s.mean,
            stdev_s: s.stdev,
            min_s: s.min,
            median_s: s.median,
            levels,
            samples_s: samples_s.to_vec(),
        })
    }
}

/// native / model: how many times faster the model is, three ways.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SpeedUp {
    /// The fastest native run / the fastest model run: what the targets
    /// are judged by (the host's slow level can only add time, so each
    /// side's minimum is its run least slowed, whatever the number of
    /// runs on each level).
    pub min_ratio: f64,
    /// The median over the rounds of native / model of the same round
    /// (each round runs native once, then the model once per arch).
    pub round_median_ratio: f64,
    /// Rounds in `round_median_ratio`.
    pub rounds: usize,
    /// The ratio of the means (the only figure before schema 2).
    pub ratio: f64,
    /// Its standard deviation by first-order error propagation:
    /// ratio · sqrt((sd_native/mean_native)² + (sd_model/mean_model)²).
    pub stdev: f64,
}

/// The speed-up native / model, `None` when either side has no sample or
/// a sample that is not positive. Round `i` pairs the `i`-th samples of
/// the two sides (both are kept in round order).
pub fn speed_up(native: &Timing, model: &Timing) -> Option<SpeedUp> {
    if !(timeable(&native.samples_s) && timeable(&model.samples_s)) {
        return None;
    }
    let ratio = native.mean_s / model.mean_s;
    let rel =
        ((native.stdev_s / native.mean_s).powi(2) + (model.stdev_s / model.mean_s).powi(2)).sqrt();
    let mut rounds: Vec<f64> = native
        .samples_s
        .iter()
        .zip(&model.samples_s)
        .map(|(n, m)| n / m)
        .collect();
    rounds.sort_by(f64::total_cmp);
    Some(SpeedUp {
        min_ratio: native.min_s / model.min_s,
        round_median_ratio: median(&rounds)?,
        rounds: rounds.len(),
        ratio,
        stdev: ratio * rel,
    })
}

/// One architecture's model timing of a workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelTiming {
    pub arch: String,
    pub time: Option<Timing>,
    /// native / model, when both were measured.
    pub speed_up: Option<SpeedUp>,
    /// The same runs' thread CPU time (`CLOCK_THREAD_CPUTIME_ID`), samples
    /// in the order of `time.samples_s`: wall time above it is time other
    /// processes took this CPU (two wall levels with one CPU level: the CPU
    /// was shared); the host's slow level moves both.
    pub cpu_time: Option<Timing>,
    /// The fastest run's wall time / the least CPU time of a run: at or
    /// above [`SHARED_CPU`] no run had the CPU to itself.
    pub wall_over_cpu: Option<f64>,
    /// Why there is no time (the scenario failed on the model).
    pub error: Option<String>,
}

/// One workload's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub workload: String,
    pub layout: String,
    pub size_bytes: u64,
    /// Repetitions of the measured operation (live pages for uffd).
    pub iterations: u64,
    /// The scenario parameters the model ran with.
    pub model_params: Vec<(String, String)>,
    pub native: Option<Timing>,
    /// The layout check of the first native run, or why there is no native time.
    pub native_note: String,
    /// Whether `native_note` is a failure.
    pub native_failed: bool,
    /// mprotect workloads: seconds per native run spent in explicit_bzero
    /// of the region (timed separately by the child; the model writes
    /// each page once instead of zeroing its 4 KiB).
    pub native_bzero_s: Option<f64>,
    pub model: Vec<ModelTiming>,
}

impl Row {
    fn failed(&self) -> bool {
        self.native_failed || self.model.iter().any(|m| m.error.is_some())
    }
}

/// Model memory of one layout on one architecture.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemRow {
    pub layout: String,
    pub arch: String,
    pub region_bytes: u64,
    pub pages: u64,
    /// `Model::memory_bytes()` after populating, minus an empty model's.
    pub model_bytes: u64,
    pub model_bytes_per_page: f64,
    /// Growth of the process's peak RSS (VmHWM) over the populate, when
    /// /proc/self/clear_refs could reset it.
    pub peak_rss_bytes: Option<u64>,
    pub peak_rss_bytes_per_page: Option<f64>,
    pub error: Option<String>,
}

/// Everything `ptlab speed` measured (`--format json`, `--out`).
#[derive(Debug, Serialize)]
pub struct SpeedReport {
    pub schema: u32,
    pub started: String,
    pub environment: ptlab_bench::result::Environment,
    /// /proc/loadavg at the end.
    pub load_avg_end: String,
    pub runs: u64,
    /// Discarded runs per side before the measured ones.
    pub warmup: u64,
    /// The speed-up figure the targets are judged by (a field of each
    /// `speed_up`): `min_ratio`, the fastest native run / the fastest model
    /// run (docs/model.md, "`ptlab speed` and the host's two levels").
    pub judged_by: &'static str,
    /// [`LEVEL_GAP`]: runs this many times apart or more are on two levels.
    pub level_gap: f64,
    pub quick: bool,
    pub params: Vec<(String, String)>,
    /// Why the native side did not run (`null`: it ran).
    pub native_unavailable: Option<String>,
    pub rows: Vec<Row>,
    /// Seed scenarios with no native workload in ptlab-bench (and why).
    pub no_native_counterpart: Vec<(String, String)>,
    pub memory: Vec<MemRow>,
}

// ===== planning: the same work on both sides ================================

/// What one workload runs with on each side.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seed: &'static Seed,
    pub native: Option<&'static Workload>,
    /// Native region size and operation count (uffd: live pages).
    pub size: u64,
    pub iterations: u64,
    /// The scenario's parameters: size and iterations as the native side,
    /// plus any scenario-only `--param`.
    pub model_params: Vec<(String, String)>,
    /// `--param` names the native workload has no counterpart for.
    pub model_only: Vec<String>,
}

fn parse_script(seed: &Seed) -> Result<Script> {
    Ok(ptlab_scenario::parse(
        &format!("scenarios/seeds/{}.ptl", seed.name),
        seed.source,
    )?)
}

/// Parameters for `seed` with the native workload's defaults (`quick`) and
/// the user's overrides (only those the scenario declares).
pub fn plan(seed: &'static Seed, quick: bool, user: &[(String, String)]) -> Result<Plan> {
    let script = parse_script(seed)?;
    let declared: Vec<String> = script.params().into_iter().map(|(n, _, _)| n).collect();
    let mine: Vec<&(String, String)> = user.iter().filter(|(n, _)| declared.contains(n)).collect();
    let value = |name: &str| -> Result<Option<u64>> {
        mine.iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| ptlab_scenario::parse_param_value(v).map_err(anyhow::Error::msg))
            .transpose()
    };
    let it_name = seed.iterations_param;
    let native = workload::find(seed.name);
    let (size, iterations) = match native {
        Some(w) => {
            let it = match (w.kind, it_name) {
                (Kind::Uffd { .. }, _) | (_, None) => None,
                (_, Some(n)) => value(n)?,
            };
            let p = w
                .params(quick, Some(1), it, value("size")?)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            (p.size, p.iterations)
        }
        None => (value("size")?.unwrap_or(0), 0),
    };
    let mut model_params = Vec::new();
    if native.is_some() {
        model_params.push(("size".to_string(), size.to_string()));
        if let Some(n) = it_name {
            model_params.push((n.to_string(), iterations.to_string()));
        }
    }
    let mut model_only = Vec::new();
    for (n, v) in &mine {
        let shared = n == "size" || Some(n.as_str()) == it_name;
        if native.is_some() && shared {
            continue;
        }
        model_params.retain(|(m, _)| m != n);
        model_params.push((n.clone(), v.clone()));
        if !shared && !model_only.contains(n) {
            model_only.push(n.clone());
        }
    }
    script
        .check_params(&model_params)
        .map_err(anyhow::Error::msg)?;
    Ok(Plan {
        seed,
        native,
        size,
        iterations,
        model_params,
        model_only,
    })
}

/// The seeds to run for the names given (empty or `all` = every seed).
pub fn select(names: &[String]) -> Result<Vec<&'static Seed>> {
    if names.is_empty() || names.iter().any(|n| n == "all") {
        return Ok(SEEDS.iter().collect());
    }
    let mut out: Vec<&'static Seed> = Vec::new();
    for n in names {
        match ptlab_cost::seeds::seed(n) {
            Some(s) if !out.iter().any(|o| o.name == s.name) => out.push(s),
            Some(_) => {}
            None => {
                let all: Vec<&str> = SEEDS.iter().map(|s| s.name).collect();
                bail!(
                    "unknown workload '{n}'; expected one of: all, {}",
                    all.join(", ")
                );
            }
        }
    }
    Ok(out)
}

/// Seed scenarios with no native workload, and why.
pub fn no_native_counterpart() -> Vec<(String, String)> {
    SEEDS
        .iter()
        .filter(|s| workload::find(s.name).is_none())
        .map(|s| {
            (
                s.name.to_string(),
                "ptlab-bench has no native workload of this name".to_string(),
            )
        })
        .collect()
}

// ===== measuring ============================================================

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) and minor page
/// faults so far (`getrusage(RUSAGE_THREAD)`): the progress lines show
/// them per model run beside the wall-clock time, to tell time lost to
/// other processes on a shared machine (wall clock above CPU time) from
/// the run's own work (CPU time).
fn thread_usage() -> (f64, i64) {
    // SAFETY: clock_gettime() and getrusage() fill the structs they are given.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    let cpu = if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    } else {
        0.0
    };
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let flt = if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } == 0 {
        ru.ru_minflt
    } else {
        0
    };
    (cpu, flt)
}

/// Keep the memory a model run frees in the process for the next run
/// (glibc `mallopt()`): allocations up to 32 MiB (glibc's largest fixed
/// threshold) come from the heap instead of fresh `mmap()`s, and a freed
/// heap top is not returned to the kernel below 1 GiB. Without this,
/// glibc's sliding mmap threshold and heap trimming hand several hundred
/// pages back to the kernel after each of the first runs and the next run
/// page-faults them in again (measured: uffd-move's second and third
/// model runs took 500–550 minor faults and 1.0–1.5 ms more CPU time than
/// the later ones, which took none), so a run's time depended on its
/// place in the sequence rather than on the model's work. The native side
/// is unaffected (a fresh child process per run). Only the timed runs use
/// it: the memory table reads peak RSS and needs freed memory returned.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt() only changes the allocator's thresholds.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

fn progress(quiet: bool, msg: std::fmt::Arguments<'_>) {
    if !quiet {
        errln!("ptlab speed: {msg}");
    }
}

/// One native run: its wall time in seconds, its layout check, and
/// (mprotect) its explicit_bzero seconds.
type Native = (f64, String, Option<f64>);

/// One native run of the plan's workload, as `ptlab bench` runs a case (the
/// knob lock, the knobs set and restored, a fresh child).
fn native_once(p: &Plan, quick: bool) -> std::result::Result<Native, String> {
    let w = p.native.ok_or("no native workload")?;
    let opts = BenchOptions {
        quick,
        runs: Some(1),
        iterations: (!matches!(w.kind, Kind::Uffd { .. })).then_some(p.iterations),
        size: Some(p.size),
        warmup: Some(0),
        label: "speed".into(),
        ..Default::default()
    };
    let out = bench::run(&[w], &opts, &mut |_, _| {})?;
    if let Some((_, why)) = out.failed.first() {
        return Err(why.clone());
    }
    let c = out.result.cases.first().ok_or("no native case")?;
    if c.size_bytes != p.size || c.iterations != p.iterations {
        return Err(format!(
            "the native case ran {} bytes × {} instead of {} × {}",
            c.size_bytes, c.iterations, p.size, p.iterations
        ));
    }
    let ns = c
        .extra
        .get(workload::WALL_NS_KEY)
        .and_then(|v| v.first())
        .ok_or("the native case reported no wall time")?;
    let bzero = c
        .extra
        .get("explicit_bzero ns per loop")
        .map(|per_loop| per_loop.iter().sum::<f64>() * c.iterations as f64 / 1e9);
    Ok((ns / 1e9, c.layout_check.clone(), bzero))
}

fn model_cfg(arch: ArchKind) -> Result<ptlab_model::ModelConfig> {
    crate::model_config(arch, Before::empty(), &[])
}

/// A model run that failed: its first failure, or why it stopped.
fn failure(report: &ptlab_scenario::RunReport) -> Option<String> {
    if let Some(f) = report.failures.first() {
        return Some(f.to_string());
    }
    (report.aborted || !report.passed()).then(|| report.summary())
}

fn round_name(r: u64, warmup: u64, runs: u64) -> String {
    if r < warmup {
        format!("warm-up {}/{warmup}", r + 1)
    } else {
        format!("run {}/{runs}", r - warmup + 1)
    }
}

/// One timed model run of the plan's scenario on `arch`: its wall time
/// and the thread's CPU time over it.
fn model_once(p: &Plan, arch: ArchKind, what: &str, quiet: bool) -> Result<(f64, f64), String> {
    let script = parse_script(p.seed).map_err(|e| format!("{e:#}"))?;
    let opts = RunOptions {
        params: p.model_params.clone(),
        ..RunOptions::default()
    };
    let cfg = model_cfg(arch).map_err(|e| format!("{e:#}"))?;
    let (cpu0, flt0) = thread_usage();
    let t0 = Instant::now();
    let (report, backend) = crate::run_on_model(&script, cfg, &opts, false);
    let t = t0.elapsed().as_secs_f64();
    let (cpu1, flt1) = thread_usage();
    // The model is freed outside the timing (the native child's
    // teardown is not timed either).
    drop(backend);
    if let Some(why) = failure(&report) {
        return Err(format!("the scenario failed on the model: {why}"));
    }
    progress(
        quiet,
        format_args!(
            "{}: model {} {what}: {t:.4} s (CPU {:.4} s, {} minor faults)",
            p.seed.name,
            arch.name(),
            cpu1 - cpu0,
            flt1 - flt0
        ),
    );
    Ok((t, cpu1 - cpu0))
}

// ===== model memory =========================================================

/// The four layouts: name and the scenario that populates `size` bytes at
/// `base` in it (the seeds' own setup, with a check of the layout).
pub const MEM_LAYOUTS: &[(&str, &str)] = &[
    (
        "order-0 (4 KiB pages)",
        "thp 2M never\np = mmap size at base fixed\nwrite p size\n\
         expect page p 4K anon order=0 pte\nexpect page p + size - 4K 4K anon order=0 pte\n",
    ),
    (
        "64 KiB mTHP",
        "thp 2M never\nthp 64K always\np = mmap size at base fixed\nwrite p size\n\
         expect page p 4K anon order=4 pte\nexpect page p + size - 4K 4K anon order=4 pte\n",
    ),
    (
        "PMD-mapped 2 MiB THP",
        "thp enabled madvise\nthp 2M inherit\np = mmap size at base fixed\n\
         madvise p size hugepage\nwrite p size\n\
         expect page p 4K anon order=9 pmd\nexpect page p + size - 4K 4K anon order=9 pmd\n",
    ),
    (
        "PTE-mapped 2 MiB THP",
        "thp enabled madvise\nthp 2M inherit\np = mmap size at base fixed\n\
         madvise p size hugepage\nwrite p size\nrepeat size / PMD as i\n  \
         madvise p + i * PMD 4K dontfork\n  madvise p + i * PMD 4K dofork\nend\n\
         expect page p 4K anon order=9 pte\nexpect page p + size - 4K 4K anon order=9 pte\n",
    ),
];

/// The memory scenario of one layout.
pub fn mem_source(body: &str) -> String {
    format!("param size = 1G\nparam base = 0x7f00_0000_0000\n{body}")
}

fn status_kb(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Reset VmHWM to the current RSS (after giving freed heap back, so that
/// the growth is the model's); false when the kernel refuses.
fn reset_peak_rss() -> bool {
    // SAFETY: malloc_trim only returns free heap memory to the kernel.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn measure_memory(layout: &str, body: &str, arch: ArchKind, size: u64) -> Result<MemRow, String> {
    let src = mem_source(body);
    let script =
        ptlab_scenario::parse(&format!("memory {layout}"), &src).map_err(|e| e.to_string())?;
    let opts = RunOptions {
        params: vec![("size".into(), size.to_string())],
        ..RunOptions::default()
    };
    let cfg = model_cfg(arch).map_err(|e| format!("{e:#}"))?;
    let empty = ptlab_scenario::ModelBackend::new(cfg.clone())
        .model()
        .memory_bytes() as u64;
    let hwm = reset_peak_rss();
    let rss0 = status_kb("VmRSS");
    let (report, backend) = crate::run_on_model(&script, cfg, &opts, false);
    let peak = status_kb("VmHWM");
    if let Some(why) = failure(&report) {
        return Err(why);
    }
    let model_bytes = (backend.model().memory_bytes() as u64).saturating_sub(empty);
    drop(backend);
    let pages = size / 4096;
    let peak_rss_bytes = match (hwm, rss0, peak) {
        (true, Some(a), Some(b)) => Some(b.saturating_sub(a) * 1024),
        _ => None,
    };
    Ok(MemRow {
        layout: layout.to_string(),
        arch: arch.name().to_string(),
        region_bytes: size,
        pages,
        model_bytes,
        model_bytes_per_page: model_bytes as f64 / pages as f64,
        peak_rss_bytes,
        peak_rss_bytes_per_page: peak_rss_bytes.map(|b| b as f64 / pages as f64),
        error: None,
    })
}

// ===== output ===============================================================

/// Decimals for a time of this size: 9.01, 0.7467, 123.
fn decimals(x: f64) -> usize {
    if x >= 100.0 {
        0
    } else if x >= 1.0 {
        2
    } else {
        4
    }
}

fn fmt_v(x: f64) -> String {
    format!("{x:.*}", decimals(x))
}

fn fmt_s(t: &Timing) -> String {
    // The stdev with the mean's precision: 9.01 ± 0.19, 0.7467 ± 0.0326.
    let d = decimals(t.mean_s);
    format!("{:.d$} ± {:.d$}", t.mean_s, t.stdev_s)
}

fn fmt_ratio(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}×")
    } else {
        format!("{x:.2}×")
    }
}

fn fmt_x(s: &SpeedUp) -> String {
    if s.ratio >= 10.0 {
        format!("{:.0}× ± {:.0}", s.ratio, s.stdev)
    } else {
        format!("{:.2}× ± {:.2}", s.ratio, s.stdev)
    }
}

/// "1" for one level; "2: 1 at 0.0132, 2 at 0.0250 (1.89×)" for two (the
/// fast level first: runs at its median).
fn fmt_levels(l: &Levels) -> String {
    match (l.slow_median_s, l.apart()) {
        (Some(slow), Some(apart)) => format!(
            "2: {} at {}, {} at {} ({apart:.2}×)",
            l.fast_n,
            fmt_v(l.fast_median_s),
            l.slow_n,
            fmt_v(slow)
        ),
        _ => "1".to_string(),
    }
}

pub fn fmt_bytes(b: u64) -> String {
    const U: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut i = 0;
    let mut v = b as f64;
    while v >= 1024.0 && i + 1 < U.len() && b.is_multiple_of(1024u64.pow(i as u32 + 1)) {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.0} {}", U[i])
}

fn new_table(header: Vec<String>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header);
    t
}

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

/// The speed table: workload, work, the fastest run of each side, and per
/// arch the speed-up as the ratio of the minimums (what the targets are
/// judged by) and the median of the rounds' ratios.
pub fn speed_table(rows: &[Row], archs: &[ArchKind]) -> Table {
    let mut h = vec![
        "workload".to_string(),
        "region, ops".to_string(),
        "native min s".to_string(),
    ];
    for a in archs {
        h.push(format!("model {} min s", a.name()));
    }
    for a in archs {
        h.push(format!("speed-up {}", a.name()));
    }
    for a in archs {
        h.push(format!("round median {}", a.name()));
    }
    let mut t = new_table(h);
    for r in rows {
        let mut cells = vec![
            Cell::new(&r.workload),
            Cell::new(format!("{}, {}", fmt_bytes(r.size_bytes), r.iterations)),
            right(match &r.native {
                Some(n) => fmt_v(n.min_s),
                None if r.native_failed => "FAILED".to_string(),
                None => "—".to_string(),
            }),
        ];
        let model = |a: &ArchKind| r.model.iter().find(|m| m.arch == a.name());
        for a in archs {
            cells.push(right(match model(a) {
                Some(ModelTiming { time: Some(t), .. }) => fmt_v(t.min_s),
                Some(ModelTiming { error: Some(_), .. }) => "FAILED".to_string(),
                _ => "—".to_string(),
            }));
        }
        for a in archs {
            let s = model(a).and_then(|m| m.speed_up);
            let mark = if model(a).is_some_and(ModelTiming::shared_cpu) {
                " (shared CPU)"
            } else {
                ""
            };
            cells.push(right(s.map_or("—".to_string(), |s| {
                format!("{}{mark}", fmt_ratio(s.min_ratio))
            })));
        }
        for a in archs {
            let s = model(a).and_then(|m| m.speed_up);
            cells.push(right(
                s.map_or("—".to_string(), |s| fmt_ratio(s.round_median_ratio)),
            ));
        }
        t.add_row(cells);
    }
    t
}

/// Every side's runs: min, median, mean ± stdev, the speed levels found
/// among them, and (model) the speed-up as the ratio of the means.
pub fn runs_table(rows: &[Row], archs: &[ArchKind]) -> Table {
    let h = [
        "workload",
        "side",
        "runs",
        "min s",
        "median s",
        "mean ± stdev s",
        "levels: runs at median s",
        "model CPU s: min; levels",
        "speed-up of means",
    ];
    let mut t = new_table(h.iter().map(|s| s.to_string()).collect());
    for r in rows {
        type Side<'a> = (
            String,
            Option<&'a Timing>,
            Option<&'a Timing>,
            Option<SpeedUp>,
        );
        let mut sides: Vec<Side> = Vec::new();
        if r.native.is_some() {
            sides.push(("native".into(), r.native.as_ref(), None, None));
        }
        for a in archs {
            if let Some(m) = r.model.iter().find(|m| m.arch == a.name()) {
                let name = format!("model {}", a.name());
                sides.push((name, m.time.as_ref(), m.cpu_time.as_ref(), m.speed_up));
            }
        }
        for (side, time, cpu, s) in sides {
            let Some(time) = time else { continue };
            t.add_row(vec![
                Cell::new(&r.workload),
                Cell::new(side),
                right(time.n.to_string()),
                right(fmt_v(time.min_s)),
                right(fmt_v(time.median_s)),
                right(fmt_s(time)),
                Cell::new(fmt_levels(&time.levels)),
                Cell::new(cpu.map_or("—".to_string(), |c| {
                    format!("{}; {}", fmt_v(c.min_s), fmt_levels(&c.levels))
                })),
                right(s.map_or("—".to_string(), |s| fmt_x(&s))),
            ]);
        }
    }
    t
}

/// The memory table: per layout, B/page per arch, and the VmHWM cross-check.
pub fn memory_table(rows: &[MemRow], archs: &[ArchKind]) -> Table {
    let mut h = vec!["layout".to_string(), "region".to_string()];
    for a in archs {
        h.push(format!("model {} B/page", a.name()));
    }
    for a in archs {
        h.push(format!("peak RSS {} B/page", a.name()));
    }
    let mut t = new_table(h);
    let mut layouts: Vec<&str> = Vec::new();
    for r in rows {
        if !layouts.contains(&r.layout.as_str()) {
            layouts.push(&r.layout);
        }
    }
    for l in layouts {
        let of = |a: &ArchKind| rows.iter().find(|r| r.layout == l && r.arch == a.name());
        let region = rows
            .iter()
            .find(|r| r.layout == l)
            .map_or(String::new(), |r| fmt_bytes(r.region_bytes));
        let mut cells = vec![Cell::new(l), Cell::new(region)];
        for a in archs {
            cells.push(
                Cell::new(match of(a) {
                    Some(MemRow { error: Some(_), .. }) => "FAILED".to_string(),
                    Some(r) => format!("{:.2}", r.model_bytes_per_page),
                    None => "—".to_string(),
                })
                .set_alignment(CellAlignment::Right),
            );
        }
        for a in archs {
            cells.push(
                Cell::new(
                    of(a)
                        .and_then(|r| r.peak_rss_bytes_per_page)
                        .map_or("—".to_string(), |b| format!("{b:.1}")),
                )
                .set_alignment(CellAlignment::Right),
            );
        }
        t.add_row(cells);
    }
    t
}

fn archs_of(r: &SpeedReport) -> Vec<ArchKind> {
    let mut v = Vec::new();
    for a in [ArchKind::X86_64, ArchKind::Arm64] {
        let used = r
            .rows
            .iter()
            .any(|x| x.model.iter().any(|m| m.arch == a.name()))
            || r.memory.iter().any(|m| m.arch == a.name());
        if used {
            v.push(a);
        }
    }
    v
}

/// The terminal rendering.
pub fn render_text(r: &SpeedReport) -> String {
    let archs = archs_of(r);
    let mut s = String::new();
    s.push_str(&format!(
        "ptlab speed (ptlab {}{}) on Linux {} ({} CPUs), {} run(s) per side{}{}; load average {} at the start, {} at the end\n",
        r.environment.ptlab_version,
        r.environment
            .git_commit
            .as_deref()
            .map_or(String::new(), |c| format!(", commit {c}")),
        r.environment.kernel,
        r.environment.cpus,
        r.runs,
        if r.warmup > 0 {
            format!(" after {} discarded warm-up run(s)", r.warmup)
        } else {
            String::new()
        },
        if r.quick { ", --quick sizes" } else { "" },
        r.environment.load_avg.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        r.load_avg_end.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    ));
    match &r.native_unavailable {
        None => s.push_str(
            "native = ptlab bench's workload, each run in a fresh forked child: its setup and \
             every operation, layout checks excluded; model = the seed scenario in-process (ptlab run's \
             model path, no invariant checks); speed-up = the fastest native run / the fastest model \
             run (min/min: what the targets are judged by); round median = the median over the \
             rounds of native / model of the same round\n",
        ),
        Some(why) => s.push_str(&format!("native: not measured: {why} (model only)\n")),
    }
    if !r.rows.is_empty() {
        s.push_str(&format!("{}\n", speed_table(&r.rows, &archs)));
        s.push_str(&format!(
            "\nEvery side's runs (seconds); levels: the runs split where one is at least {LEVEL_GAP}× \
             the next faster (this VM's host has two speed levels about 1.6-1.9× apart), each \
             level's run count at its median\n{}\n",
            runs_table(&r.rows, &archs)
        ));
    }
    for row in &r.rows {
        if let (Some(b), Some(n)) = (row.native_bzero_s, &row.native) {
            s.push_str(&format!(
                "{}: {b:.3} s of the native {:.3} s is explicit_bzero of the region ({} times; \
                 the model writes each page once)\n",
                row.workload, n.mean_s, row.iterations
            ));
        }
        if row.native_failed {
            s.push_str(&format!(
                "FAILED {} native: {}\n",
                row.workload, row.native_note
            ));
        }
        for m in &row.model {
            if let Some(e) = &m.error {
                s.push_str(&format!("FAILED {} model {}: {e}\n", row.workload, m.arch));
            }
        }
    }
    let shared: Vec<String> = r
        .rows
        .iter()
        .flat_map(|row| {
            row.model
                .iter()
                .filter(|m| m.shared_cpu())
                .map(move |m| format!("{} {}", row.workload, m.arch))
        })
        .collect();
    if !shared.is_empty() {
        s.push_str(&format!(
            "shared CPU: no model run of {} had the CPU to itself (its fastest wall time is \
             {SHARED_CPU}× its least CPU time or more): the machine was loaded while this ran, and \
             the native runs (not checked) likely shared it too, so no speed-up of this run judges \
             a target; rerun on a quiet machine\n",
            shared.join(", ")
        ));
    }
    for (n, why) in &r.no_native_counterpart {
        s.push_str(&format!("{n}: model only: {why}\n"));
    }
    if !r.memory.is_empty() {
        s.push_str(
            "\nModel memory per populated 4 KiB page (Model::memory_bytes() after populating the \
             region, minus an empty model's); peak RSS = growth of this process's VmHWM over the \
             same run (allocator and transient memory included), a cross-check\n",
        );
        s.push_str(&format!("{}\n", memory_table(&r.memory, &archs)));
        for m in &r.memory {
            if let Some(e) = &m.error {
                s.push_str(&format!("FAILED memory {} {}: {e}\n", m.layout, m.arch));
            }
        }
    }
    s
}

pub fn speed(args: &SpeedArgs) -> Result<u8> {
    if let Some(path) = &args.out {
        crate::outpath::check_file("--out", path)?;
    }
    let seeds = select(&args.workloads)?;
    // Every --param must mean something to some selected scenario.
    for (n, _) in &args.params {
        let known = seeds.iter().any(|s| {
            parse_script(s)
                .map(|sc| sc.params().iter().any(|(d, _, _)| d == n))
                .unwrap_or(false)
        });
        if !known {
            bail!(
                "--param {n}: none of the selected workloads' scenarios declares it (see \
                 scenarios/seeds/*.ptl)"
            );
        }
    }
    let mut plans = Vec::new();
    for s in &seeds {
        plans.push(plan(s, args.quick, &args.params).with_context(|| s.name.to_string())?);
    }
    let native: Result<(), String> = if args.no_live {
        Err("--no-live given".into())
    } else if let Some(why) = bench::unavailable() {
        Err(why)
    } else {
        Ok(())
    };
    if native.is_ok() {
        if let Some(p) = plans.iter().find(|p| !p.model_only.is_empty()) {
            bail!(
                "--param {}: the native workload {} has no such setting, so both sides would not \
                 do the same work; only size and iterations apply to both (add --no-live to run \
                 the model alone)",
                p.model_only.join(", --param "),
                p.seed.name
            );
        }
    }
    if let Err(why) = &native {
        errln!("ptlab speed: model only: the native workloads do not run: {why}");
    }
    let archs: Vec<ArchKind> = match args.arch {
        Some(a) => vec![a.kind()],
        None => vec![ArchKind::X86_64, ArchKind::Arm64],
    };
    let started = ptlab_bench::env::now_rfc3339();
    let environment = ptlab_bench::env::collect();

    // Memory first, while the process is small.
    let mut memory = Vec::new();
    if !args.no_memory {
        let user_size = args
            .params
            .iter()
            .rev()
            .find(|(n, _)| n == "size")
            .map(|(_, v)| ptlab_scenario::parse_param_value(v))
            .transpose()
            .map_err(anyhow::Error::msg)?;
        let size = user_size.unwrap_or(if args.quick { 256 << 20 } else { 1 << 30 });
        if size == 0 || !size.is_multiple_of(2 << 20) {
            bail!(
                "--param size={size}: the memory table needs a multiple of 2 MiB (add --no-memory)"
            );
        }
        for (layout, body) in MEM_LAYOUTS {
            for &a in &archs {
                let row = measure_memory(layout, body, a, size).unwrap_or_else(|e| MemRow {
                    layout: layout.to_string(),
                    arch: a.name().to_string(),
                    region_bytes: size,
                    pages: size / 4096,
                    model_bytes: 0,
                    model_bytes_per_page: 0.0,
                    peak_rss_bytes: None,
                    peak_rss_bytes_per_page: None,
                    error: Some(e),
                });
                progress(
                    args.quiet,
                    format_args!(
                        "memory {layout} {}: {:.2} B/page",
                        a.name(),
                        row.model_bytes_per_page
                    ),
                );
                memory.push(row);
            }
        }
    }

    // From here on, memory the model frees stays in this process for the
    // next run (the memory table above needs it returned: it reads peak RSS).
    keep_freed_memory();
    let mut rows = Vec::new();
    for p in &plans {
        let mut row = Row {
            workload: p.seed.name.to_string(),
            layout: p
                .native
                .map_or(String::new(), |w| w.layout.name().to_string()),
            size_bytes: p.size,
            iterations: p.iterations,
            model_params: p.model_params.clone(),
            native: None,
            native_note: String::new(),
            native_failed: false,
            native_bzero_s: None,
            model: Vec::new(),
        };
        let native_on = match (&native, p.native) {
            (Ok(()), Some(_)) => true,
            (Err(why), _) => {
                row.native_note = why.clone();
                false
            }
            (Ok(()), None) => {
                row.native_note = "no native workload".into();
                false
            }
        };
        if native_on {
            progress(
                args.quiet,
                format_args!(
                    "{}: {} round(s) after {} warm-up, each: native, then the model on {}",
                    p.seed.name,
                    args.runs,
                    args.warmup,
                    archs
                        .iter()
                        .map(|a| a.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        // Rounds interleave the sides: native once, then each model once.
        // This VM's host changes its speed by up to 1.6x for seconds at a
        // time (docs/model.md, "ptlab speed"); interleaved, such a stretch
        // slows both sides of a round alike instead of one whole side.
        let mut native_samples = Vec::new();
        let mut bzero = Vec::new();
        // Per arch: (wall, CPU) of each measured run.
        let mut model_samples: Vec<Result<Vec<(f64, f64)>, String>> =
            archs.iter().map(|_| Ok(Vec::new())).collect();
        for r in 0..args.warmup + args.runs {
            let what = round_name(r, args.warmup, args.runs);
            if native_on && !row.native_failed {
                match native_once(p, args.quick) {
                    Ok((t, check, bz)) => {
                        progress(
                            args.quiet,
                            format_args!("{}: native {what}: {t:.4} s", p.seed.name),
                        );
                        if r >= args.warmup {
                            native_samples.push(t);
                            bzero.extend(bz);
                        }
                        if row.native_note.is_empty() {
                            row.native_note = check;
                        }
                    }
                    Err(e) => {
                        errln!("ptlab speed: FAILED {} native: {e}", p.seed.name);
                        row.native_note = e;
                        row.native_failed = true;
                    }
                }
            }
            for (i, &a) in archs.iter().enumerate() {
                let Ok(samples) = &mut model_samples[i] else {
                    continue;
                };
                match model_once(p, a, &what, args.quiet) {
                    Ok(wall_cpu) => {
                        if r >= args.warmup {
                            samples.push(wall_cpu);
                        }
                    }
                    Err(e) => {
                        errln!(
                            "ptlab speed: FAILED {} model {}: {e}",
                            p.seed.name,
                            a.name()
                        );
                        model_samples[i] = Err(e);
                    }
                }
            }
        }
        if native_on && !row.native_failed {
            match Timing::of(&native_samples) {
                Some(t) => {
                    progress(
                        args.quiet,
                        format_args!(
                            "{}: native {} s ({})",
                            p.seed.name,
                            fmt_s(&t),
                            row.native_note
                        ),
                    );
                    row.native_bzero_s = ptlab_bench::stats::mean(&bzero);
                    row.native = Some(t);
                }
                None => {
                    row.native_note = "no native samples".into();
                    row.native_failed = true;
                }
            }
        }
        for (&a, samples) in archs.iter().zip(model_samples) {
            let timed = samples.and_then(|v| {
                let wall: Vec<f64> = v.iter().map(|s| s.0).collect();
                let cpu: Vec<f64> = v.iter().map(|s| s.1).collect();
                Ok((
                    Timing::of(&wall).ok_or("no model samples")?,
                    Timing::of(&cpu),
                ))
            });
            let m = match timed {
                Ok((t, cpu)) => ModelTiming {
                    arch: a.name().to_string(),
                    speed_up: row.native.as_ref().and_then(|n| speed_up(n, &t)),
                    wall_over_cpu: cpu.as_ref().map(|c| t.min_s / c.min_s),
                    time: Some(t),
                    cpu_time: cpu,
                    error: None,
                },
                Err(e) => ModelTiming {
                    arch: a.name().to_string(),
                    time: None,
                    speed_up: None,
                    cpu_time: None,
                    wall_over_cpu: None,
                    error: Some(e),
                },
            };
            row.model.push(m);
        }
        rows.push(row);
    }
    let report = SpeedReport {
        schema: 2,
        started,
        environment,
        load_avg_end: ptlab_bench::env::load_avg(),
        runs: args.runs,
        warmup: args.warmup,
        judged_by: "min_ratio",
        level_gap: LEVEL_GAP,
        quick: args.quick,
        params: args.params.clone(),
        native_unavailable: native.err(),
        no_native_counterpart: no_native_counterpart(),
        rows,
        memory,
    };
    let json = serde_json::to_string_pretty(&report).context("cannot encode the results")?;
    match args.format {
        OutFormat::Text => out!("{}", render_text(&report)),
        OutFormat::Json => outln!("{json}"),
    }
    if let Some(path) = &args.out {
        std::fs::write(path, &json).with_context(|| format!("cannot write {}", path.display()))?;
        errln!("ptlab speed: results written to {}", path.display());
    }
    let failed =
        report.rows.iter().any(Row::failed) || report.memory.iter().any(|m| m.error.is_some());
    Ok(if failed { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A side whose runs were `samples`, in round order.
    fn t(samples: &[f64]) -> Timing {
        Timing::of(samples).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn speed_up_three_ways() {
        // Means 10 ± 1 and 2 ± 0.2.
        let s = speed_up(&t(&[9.0, 10.0, 11.0]), &t(&[1.8, 2.0, 2.2])).unwrap();
        assert!(close(s.ratio, 5.0), "{s:?}");
        // 5 · sqrt(0.1² + 0.1²)
        assert!(close(s.stdev, 5.0 * 0.02f64.sqrt()), "{s:?}");
        assert!(close(s.min_ratio, 9.0 / 1.8), "{s:?}");
        // Rounds 9/1.8 = 5, 10/2 = 5, 11/2.2 = 5.
        assert!(close(s.round_median_ratio, 5.0) && s.rounds == 3, "{s:?}");
        // Rounds pair the samples in round order, not sorted: 4/2, 2/1,
        // 3/3 (sorted pairs would give 2/1, 3/2, 4/3 or 4/1, 2/2, 3/3).
        let s = speed_up(&t(&[4.0, 2.0, 3.0]), &t(&[2.0, 1.0, 3.0])).unwrap();
        assert!(close(s.round_median_ratio, 2.0), "{s:?}");
        assert!(close(s.min_ratio, 2.0), "{s:?}");
        // An even number of rounds: the mean of the middle two (1, 2, 3, 4).
        let s = speed_up(&t(&[1.0, 2.0, 3.0, 4.0]), &t(&[1.0; 4])).unwrap();
        assert!(close(s.round_median_ratio, 2.5), "{s:?}");
        // A model slower than the kernel: below 1×.
        let s = speed_up(&t(&[1.0]), &t(&[4.0])).unwrap();
        assert!(close(s.min_ratio, 0.25) && close(s.ratio, 0.25), "{s:?}");
        // No sample, or a zero / negative / NaN sample: no timing, no speed-up.
        assert!(Timing::of(&[]).is_none());
        assert!(Timing::of(&[1.0, 0.0]).is_none());
        assert!(Timing::of(&[1.0, -2.0]).is_none());
        assert!(Timing::of(&[f64::NAN]).is_none());
        let mut empty = t(&[1.0]);
        empty.samples_s.clear();
        assert!(speed_up(&t(&[1.0]), &empty).is_none());
        assert!(speed_up(&empty, &t(&[1.0])).is_none());
        let m = Timing::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((m.n, m.mean_s, m.stdev_s), (3, 2.0, 1.0));
        assert_eq!((m.min_s, m.median_s), (1.0, 2.0));
        assert_eq!(m.samples_s, [3.0, 1.0, 2.0]);
    }

    /// The host's two levels (docs/model.md, "`ptlab speed` and the host's
    /// two levels"): the ratio of the means swings with how many model runs
    /// land on the slow level; the ratio of the minimums does not, and the
    /// split into levels shows it.
    #[test]
    fn a_slow_level_swings_the_means_not_the_minimums() {
        // uffd-copy x86-64 of 2026-12-07 run 2 (ms): 24.9, 25.0, 13.2; and
        // the same host's other mixes: all fast, one slow.
        let native = t(&[0.174, 0.170, 0.178]);
        let one_fast = t(&[0.0249, 0.0250, 0.0132]);
        let all_fast = t(&[0.0131, 0.0135, 0.0132]);
        let one_slow = t(&[0.0133, 0.0250, 0.0134]);
        let ups: Vec<SpeedUp> = [&one_fast, &all_fast, &one_slow]
            .iter()
            .map(|m| speed_up(&native, m).unwrap())
            .collect();
        let spread = |f: fn(&SpeedUp) -> f64| {
            let v: Vec<f64> = ups.iter().map(f).collect();
            let max = v.iter().cloned().fold(f64::MIN, f64::max);
            max / v.iter().cloned().fold(f64::MAX, f64::min)
        };
        // Means: 8.8× to 13×; minimums: within 2 % (13.1 to 13.3 ms).
        assert!(spread(|s| s.ratio) > 1.4, "{ups:?}");
        assert!(spread(|s| s.min_ratio) < 1.02, "{ups:?}");
        // The round median follows the majority of the rounds.
        assert!(spread(|s| s.round_median_ratio) > 1.5, "{ups:?}");
        let l = &one_fast.levels;
        assert_eq!((l.count, l.fast_n, l.slow_n), (2, 1, 2), "{l:?}");
        assert!(close(l.fast_median_s, 0.0132) && close(l.slow_median_s.unwrap(), 0.02495));
        assert!(close(l.apart().unwrap(), 0.02495 / 0.0132));
        assert_eq!((one_slow.levels.fast_n, one_slow.levels.slow_n), (2, 1));
        // One level: within LEVEL_GAP of each other.
        for one in [&all_fast, &native] {
            let l = &one.levels;
            assert_eq!((l.count, l.fast_n, l.slow_n), (1, 3, 0), "{one:?}");
            assert!(l.slow_median_s.is_none() && l.apart().is_none());
        }
    }

    #[test]
    fn levels_split_at_the_widest_gap() {
        let l = |v: &[f64]| Levels::of(v).unwrap();
        // mremap-batch-64k x86-64, 2026-12-07 run 2: 38.3, 57.1, 33.8 ms.
        let m = l(&[38.3, 57.1, 33.8]);
        assert_eq!((m.count, m.fast_n, m.slow_n), (2, 2, 1), "{m:?}");
        assert!(close(m.fast_median_s, 36.05) && close(m.slow_median_s.unwrap(), 57.1));
        // Two gaps above LEVEL_GAP: the wider one splits (2.0 vs 1.3).
        let m = l(&[10.0, 13.0, 26.0, 26.5]);
        assert_eq!((m.fast_n, m.slow_n), (2, 2), "{m:?}");
        // Exactly at the threshold is a gap; just below is not.
        assert_eq!(l(&[4.0, 5.0]).count, 2);
        assert_eq!(l(&[4.0, 4.99]).count, 1);
        // A gradual spread with no single gap is one level, however wide.
        assert_eq!(l(&[10.0, 12.0, 14.4, 17.0, 20.0]).count, 1);
        // One sample; equal samples.
        let one = l(&[7.0]);
        assert_eq!((one.count, one.fast_n, one.fast_median_s), (1, 1, 7.0));
        assert_eq!(l(&[2.0, 2.0, 2.0]).count, 1);
        assert!(Levels::of(&[]).is_none());
        assert!(Levels::of(&[1.0, f64::INFINITY]).is_none());
        assert_eq!(
            fmt_levels(&l(&[0.0132, 0.0248, 0.0252])),
            "2: 1 at 0.0132, 2 at 0.0250 (1.89×)"
        );
        assert_eq!(fmt_levels(&l(&[3.0, 3.1])), "1");
    }

    fn param<'a>(p: &'a Plan, n: &str) -> Option<&'a str> {
        p.model_params
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    }

    /// The model runs each scenario at the native workload's size and
    /// repetition count, with or without --quick and --param.
    #[test]
    fn plans_give_both_sides_the_same_work() {
        let fork = ptlab_cost::seeds::seed("fork-4k").unwrap();
        let p = plan(fork, false, &[]).unwrap();
        assert_eq!((p.size, p.iterations), (1 << 30, 100));
        assert_eq!(param(&p, "size"), Some("1073741824"));
        assert_eq!(param(&p, "iterations"), Some("100"));
        let q = plan(fork, true, &[]).unwrap();
        assert_eq!((q.size, q.iterations), (256 << 20, 20));
        let o = plan(
            fork,
            false,
            &[
                ("size".into(), "8M".into()),
                ("iterations".into(), "3".into()),
            ],
        )
        .unwrap();
        assert_eq!((o.size, o.iterations), (8 << 20, 3));
        assert_eq!(param(&o, "size"), Some("8388608"));
        assert!(o.model_only.is_empty());
        // uffd: the operations are the live pages (every other page).
        let uffd = ptlab_cost::seeds::seed("uffd-move").unwrap();
        let u = plan(uffd, false, &[("chunk".into(), "4K".into())]).unwrap();
        assert_eq!((u.size, u.iterations), (256 << 20, (256 << 20) / 8192));
        assert_eq!(param(&u, "size"), Some("268435456"));
        assert_eq!(u.model_only, ["chunk"]);
        // A parameter the scenario does not declare is not applied to it.
        let table = ptlab_cost::seeds::seed("mremap-table-aligned").unwrap();
        let m = plan(table, false, &[("iterations".into(), "5".into())]).unwrap();
        assert_eq!((m.size, m.iterations), (1 << 30, 1));
        assert_eq!(
            m.model_params,
            [("size".to_string(), "1073741824".to_string())]
        );
        // A size the native workload cannot use is refused for both.
        let thp = ptlab_cost::seeds::seed("fork-thp-pte").unwrap();
        assert!(plan(thp, false, &[("size".into(), "1M".into())]).is_err());
    }

    /// Every seed scenario has a native workload of the same name whose
    /// measured loop the scenario's parameters drive.
    #[test]
    fn every_seed_scenario_has_a_native_counterpart() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/seeds");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".ptl")
                    .map(String::from)
            })
            .collect();
        files.sort();
        let mut seeds: Vec<String> = SEEDS.iter().map(|s| s.name.to_string()).collect();
        seeds.sort();
        assert_eq!(files, seeds, "scenarios/seeds/*.ptl vs ptlab-cost's SEEDS");
        assert!(no_native_counterpart().is_empty());
        for s in SEEDS {
            let w = workload::find(s.name).unwrap();
            let loops = matches!(w.kind, Kind::MremapBatch | Kind::Fork | Kind::Mprotect);
            assert_eq!(s.iterations_param.is_some(), loops, "{}", s.name);
            let p = plan(s, true, &[]).unwrap();
            assert_eq!(param(&p, "size"), Some(w.quick.size.to_string().as_str()));
        }
        assert_eq!(select(&[]).unwrap().len(), SEEDS.len());
        assert_eq!(
            select(&["fork-4k".into(), "fork-4k".into()]).unwrap().len(),
            1
        );
        assert!(select(&["fork-5k".into()]).is_err());
    }

    #[test]
    fn memory_layouts_populate_what_they_say() {
        for (layout, body) in MEM_LAYOUTS {
            for arch in [ArchKind::X86_64, ArchKind::Arm64] {
                let r = measure_memory(layout, body, arch, 8 << 20).unwrap();
                assert_eq!(r.pages, 2048);
                assert!(r.model_bytes > 0, "{layout}: {r:?}");
                // Whatever the layout, less than a page of metadata per page.
                assert!(r.model_bytes_per_page < 4096.0, "{layout}: {r:?}");
            }
        }
    }

    #[test]
    fn tables_show_minimums_speed_ups_levels_and_gaps() {
        let model = t(&[2.2, 2.0, 1.8]);
        let row = |w: &str, native: Option<Timing>| Row {
            workload: w.into(),
            layout: "4 KiB pages".into(),
            size_bytes: 1 << 30,
            iterations: 100,
            model_params: vec![],
            native_failed: false,
            native_bzero_s: None,
            native_note: String::new(),
            model: vec![ModelTiming {
                arch: "x86_64".into(),
                speed_up: native.as_ref().and_then(|n| speed_up(n, &model)),
                time: Some(model.clone()),
                cpu_time: Timing::of(&[2.1, 1.9, 1.7]),
                wall_over_cpu: Some(1.8 / 1.7),
                error: None,
            }],
            native,
        };
        // Native 11, 10, 9: min/min 9 / 1.8 = 5; rounds 5, 5, 5; means 5 ± 0.71.
        let rows = vec![
            row("fork-4k", Some(t(&[11.0, 10.0, 9.0]))),
            row("fork-thp-pte", None),
        ];
        let s = speed_table(&rows, &[ArchKind::X86_64]).to_string();
        for needle in [
            "workload",
            "native min s",
            "model x86_64 min s",
            "speed-up x86_64",
            "round median x86_64",
            "1 GiB, 100",
            "9.00",
            "1.80",
            "5.00×",
        ] {
            assert!(s.contains(needle), "{needle} not in\n{s}");
        }
        assert!(!s.contains('±'), "the mean is not in the first table\n{s}");
        let thp = s.lines().find(|l| l.contains("fork-thp-pte")).unwrap();
        assert_eq!(thp.matches('—').count(), 3, "{thp}");
        let r = runs_table(&rows, &[ArchKind::X86_64]).to_string();
        for needle in [
            "levels: runs at median s",
            "speed-up of means",
            "10.00 ± 1.00",
            "2.00 ± 0.20",
            "5.00× ± 0.71",
            "model CPU s: min; levels",
            "1.70; 1",
        ] {
            assert!(r.contains(needle), "{needle} not in\n{r}");
        }
        // fork-4k: native and model; fork-thp-pte: the model only.
        assert_eq!(
            r.lines().filter(|l| l.contains("fork-4k")).count(),
            2,
            "{r}"
        );
        assert_eq!(
            r.lines().filter(|l| l.contains("fork-thp-pte")).count(),
            1,
            "{r}"
        );
        // Two levels in a model side: shown with their run counts.
        let two = Row {
            model: vec![ModelTiming {
                time: Some(t(&[0.0248, 0.0252, 0.0132])),
                ..rows[0].model[0].clone()
            }],
            ..rows[1].clone()
        };
        let r = runs_table(&[two], &[ArchKind::X86_64]).to_string();
        assert!(r.contains("2: 1 at 0.0132, 2 at 0.0250 (1.89×)"), "{r}");
        // A model side whose every run waited for the CPU is marked, in the
        // table and under it; one that had the CPU (1.8 / 1.7) is not.
        let mut shared = rows[0].clone();
        shared.model[0].wall_over_cpu = Some(1.8 / 0.9);
        assert!(shared.model[0].shared_cpu() && !rows[0].model[0].shared_cpu());
        let report = |rows: Vec<Row>| SpeedReport {
            schema: 2,
            started: String::new(),
            environment: Default::default(),
            load_avg_end: String::new(),
            runs: 3,
            warmup: 0,
            judged_by: "min_ratio",
            level_gap: LEVEL_GAP,
            quick: false,
            params: vec![],
            native_unavailable: None,
            rows,
            no_native_counterpart: vec![],
            memory: vec![],
        };
        let quiet = render_text(&report(rows.clone()));
        assert!(!quiet.contains("shared CPU"), "{quiet}");
        let loaded = render_text(&report(vec![shared, rows[1].clone()]));
        assert!(loaded.contains("5.00× (shared CPU)"), "{loaded}");
        assert!(
            loaded.contains("no model run of fork-4k x86_64 had the CPU"),
            "{loaded}"
        );
        assert!(loaded.contains("Every side's runs"), "{loaded}");
        let mem = vec![MemRow {
            layout: "64 KiB mTHP".into(),
            arch: "x86_64".into(),
            region_bytes: 1 << 30,
            pages: 262_144,
            model_bytes: 262_144 * 28,
            model_bytes_per_page: 28.0,
            peak_rss_bytes: Some(262_144 * 30),
            peak_rss_bytes_per_page: Some(30.0),
            error: None,
        }];
        let m = memory_table(&mem, &[ArchKind::X86_64, ArchKind::Arm64]).to_string();
        let line = m.lines().find(|l| l.contains("64 KiB mTHP")).unwrap();
        assert!(line.contains("28.00") && line.contains("30.0") && line.contains("1 GiB"));
        assert_eq!(line.matches('—').count(), 2, "{line}");
        assert_eq!(fmt_bytes(256 << 20), "256 MiB");
        assert_eq!(fmt_bytes(5000), "5000 B");
    }
}
