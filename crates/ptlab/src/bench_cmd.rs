//! `ptlab bench`, `ptlab compare` and `ptlab reproduce`.

use anyhow::{bail, Context, Result};
use clap::Args;
use ptlab_bench::bench::{self, BenchOptions};
use ptlab_bench::report::{self, Model, ModelProvider, Reproduction};
use ptlab_bench::result::BenchResult;
use ptlab_bench::stats::Summary;
use ptlab_bench::workload::{Progress, Workload};
use std::path::PathBuf;

pub const BENCH_HELP: &str = "\
Workloads (docs/seeds.md; `all` runs every one):
  mremap-batch-4k  mremap-batch-64k           seed 1: 10,000 x (mmap 1 MiB, memset, mremap +1 MiB, munmap)
  mremap-table-aligned  mremap-table-unaligned  seed 2: one mremap of 1 GiB of 4 KiB pages
  fork-4k  fork-thp-pte                       seed 3: 1 GiB populated, 100 forks a run, 8 runs
  mprotect-thp-pte  mprotect-64k  mprotect-4k seed 4: 1 GiB, 40 x (mprotect RO, RW, explicit_bzero)
  uffd-copy  uffd-move                        seed 5: heap compaction, UFFDIO_COPY vs UFFDIO_MOVE

Each case runs in a forked child at fixed addresses; its folio layout is
verified from pagemap + kpageflags before timing; one warm-up run is
discarded. Needs root. THP knobs are set per case and restored.

Examples (ptlab = target/release/ptlab):
  ptlab bench fork-4k fork-thp-pte -o fork.json
  ptlab bench all --quick
  ptlab bench fork-4k fork-thp-pte --format json | jq '.cases[].samples'
  ptlab compare docs/reproduce-run/live.json fork.json

Output: the summary table on stdout (--format json: the result file's JSON
instead); -o FILE writes the result file (schema in docs/bench.md).";

pub const COMPARE_HELP: &str = "\
Examples (ptlab = target/release/ptlab):
  ptlab compare docs/reproduce-run/live.json reproduce-out/live.json
  ptlab compare before.json after.json --format json

Result files are what `ptlab bench -o FILE` and `ptlab reproduce` (DIR/live.json)
write. The first file is the baseline; cases are matched by name, and only
cases measured with the same parameters (region size, iterations, layout) are
compared (--allow-incomparable marks the others). Changes: + = better (faster
for times), *x%* = significant (Welch's t-test, p < 0.05).

Exit status: 0 = table printed, 2 = unreadable file or incomparable cases.";

#[derive(Args)]
pub struct BenchArgs {
    /// Workloads to run (see below), or `all`
    #[arg(required = true)]
    workloads: Vec<String>,

    /// Measured runs per workload (default: per workload, 5 or 8; --quick: 3)
    #[arg(long)]
    runs: Option<u64>,

    /// Measured operations per run (default: per workload)
    #[arg(long)]
    iterations: Option<u64>,

    /// Size of the measured region in bytes (default: per workload; for tests)
    #[arg(long, hide = true)]
    size: Option<u64>,

    /// Short runs (smaller regions, fewer iterations and runs)
    #[arg(long)]
    quick: bool,

    /// Write the results as JSON to FILE (checked before measuring; missing
    /// directories are created)
    #[arg(short, long, value_name = "FILE")]
    out: Option<PathBuf>,

    /// Output format on stdout: the summary table, or the result file's JSON
    #[arg(long, value_enum, default_value_t = OutFormat::Text)]
    format: OutFormat,

    /// Label of this run in comparisons (default: the kernel release)
    #[arg(long, default_value = "")]
    label: String,

    /// Do not show a progress bar
    #[arg(short, long)]
    quiet: bool,

    /// Compact free memory (/proc/sys/vm/compact_memory) before each case,
    /// so every order-0 region is faulted from the same compacted free
    /// lists; the free blocks before and after are recorded in the result's
    /// environment (docs/bench.md "Free memory"). Needs root; skipped with a
    /// message otherwise
    #[arg(long)]
    compact_memory: bool,

    /// Fragment free memory on purpose for the whole run: a helper process
    /// faults MIB of 4 KiB pages and frees every other one in shuffled
    /// order, holding the rest until the run ends (then the machine is as
    /// before). To measure how free memory's state moves the order-0 arms.
    /// At most a quarter of MemAvailable
    #[arg(long, value_name = "MIB")]
    fragment_memory: Option<u64>,

    /// How order-0 regions of 64 MiB or more get their frames: as-found
    /// (faulted from the free lists as they are) or packed (a spacer takes
    /// the per-CPU lists and the small free blocks first, so the frames
    /// are ascending whatever ran before; the layout check says so).
    /// `ptlab reproduce` and `ptlab calibrate` pack by default
    #[arg(long, value_enum, default_value_t = Frames::AsFound)]
    frames: Frames,

    /// Interleave the cases over N rounds: each case's runs are split into
    /// N slices (each with its own warm-up and region), every round runs
    /// one slice of each case, every other round in reverse order (A B,
    /// B A, ...), so a drift of the machine reaches every case alike. The
    /// order is recorded in the result (environment.schedule). 1: each
    /// case once with all its runs
    #[arg(long, value_name = "N", default_value_t = 1)]
    rounds: u64,
}

/// `--frames` of bench, reproduce and calibrate: how the order-0 regions
/// of 64 MiB or more get their frames (docs/bench.md, "Free memory").
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Frames {
    /// Before the region is faulted, a spacer mapping takes the per-CPU
    /// free lists and every free block below order 6, so the region's
    /// frames come from larger blocks: ascending, over 95 % adjacent
    /// whatever ran before (the spacer is freed before anything is timed)
    Packed,
    /// Fault the region from the free lists as they are: its frames are as
    /// adjacent as the machine's history makes them (1-98 % here)
    AsFound,
}

impl Frames {
    pub fn name(self) -> &'static str {
        match self {
            Frames::Packed => "packed",
            Frames::AsFound => "as-found",
        }
    }
    /// Make this process (and the case processes it forks) use it.
    pub fn apply(self) {
        ptlab_bench::memstate::set_pack_frames(self == Frames::Packed);
    }
}

/// `--format` of bench, compare and reproduce.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutFormat {
    /// Readable tables
    Text,
    /// One JSON object
    Json,
}

#[derive(Args)]
pub struct CompareArgs {
    /// Result files; the first is the baseline
    #[arg(required = true, num_args = 2..)]
    files: Vec<PathBuf>,

    /// Compare cases measured with different parameters (region size,
    /// iterations, layout, unit) anyway: their rows are marked and a
    /// warning is printed. Without it such results are refused
    #[arg(long)]
    allow_incomparable: bool,

    /// Output format: the Markdown table, or one JSON object
    /// ({files, cases: [{case, unit, better, base, others}]})
    #[arg(long, value_enum, default_value_t = OutFormat::Text)]
    format: OutFormat,
}

fn progress_bar(quiet: bool, n: usize) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(n as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Total runs (warm-up included) the workloads will do: each slice of
/// the schedule warms up on its own.
fn total_runs(ws: &[&Workload], o: &BenchOptions) -> usize {
    let params: Vec<_> = ws
        .iter()
        .filter_map(|w| w.params(o.quick, o.runs, o.iterations, o.size).ok())
        .collect();
    let runs: Vec<u64> = params.iter().map(|p| p.runs).collect();
    bench::schedule(&runs, o.rounds)
        .into_iter()
        .filter(|(_, r, _)| o.only_rounds.as_ref().is_none_or(|x| x.contains(r)))
        .map(|(i, _, n)| (n + params[i].warmup) as usize)
        .sum()
}

/// Run workloads with a progress bar.
pub fn run_with_bar(
    ws: &[&'static Workload],
    opts: &BenchOptions,
    quiet: bool,
) -> std::result::Result<bench::Outcome, String> {
    let bar = progress_bar(quiet, total_runs(ws, opts));
    let mut last = String::new();
    let out = bench::run(ws, opts, &mut |w, p| {
        if last != w.name {
            last = w.name.to_string();
            bar.set_message(w.name.to_string());
        }
        match p {
            Progress::Verified(d) => bar.suspend(|| errln!("{}: layout ok: {d}", w.name)),
            Progress::Run { .. } => bar.inc(1),
        }
    });
    bar.finish_and_clear();
    if let Ok(o) = &out {
        for m in &o.messages {
            errln!("{m}");
        }
    }
    out
}

fn fmt(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// The per-case summary table `ptlab bench` prints.
pub fn summary_table(r: &BenchResult) -> String {
    let mut s = format!(
        "{:<24} {:>4}  {:>22}  {:>10}  {:>10}  {:>10}  {:>10}  unit\n",
        "case", "n", "mean ± stdev", "95% CI ±", "median", "min", "max"
    );
    for c in &r.cases {
        let Some(m) = Summary::of(&c.samples) else {
            continue;
        };
        s.push_str(&format!(
            "{:<24} {:>4}  {:>22}  {:>10}  {:>10}  {:>10}  {:>10}  {}\n",
            c.name,
            m.n,
            format!("{} ± {}", fmt(m.mean), fmt(m.stdev)),
            fmt(m.ci95),
            fmt(m.median),
            fmt(m.min),
            fmt(m.max),
            c.unit
        ));
    }
    s
}

pub fn bench(args: &BenchArgs) -> Result<u8> {
    args.frames.apply();
    if let Some(path) = &args.out {
        crate::outpath::check_file("--out", path)?;
    }
    let ws = bench::resolve(&args.workloads).map_err(anyhow::Error::msg)?;
    let opts = BenchOptions {
        quick: args.quick,
        runs: args.runs,
        iterations: args.iterations,
        size: args.size,
        warmup: None,
        label: args.label.clone(),
        compact_memory: args.compact_memory,
        fragment_bytes: args.fragment_memory.unwrap_or(0).saturating_mul(1 << 20),
        rounds: args.rounds,
        only_rounds: None,
    };
    for w in &ws {
        w.params(opts.quick, opts.runs, opts.iterations, opts.size)
            .map_err(anyhow::Error::msg)?;
    }
    let out = run_with_bar(&ws, &opts, args.quiet)
        .map_err(|e| anyhow::anyhow!("cannot run benchmarks on the live kernel: {e}"))?;
    match args.format {
        OutFormat::Text => out!("{}", summary_table(&out.result)),
        OutFormat::Json => outln!("{}", out.result.to_json()),
    }
    for (w, why) in &out.failed {
        errln!("ptlab bench: FAILED {w}: {why}");
    }
    if let Some(path) = &args.out {
        std::fs::write(path, out.result.to_json())
            .with_context(|| format!("cannot write {}", path.display()))?;
        errln!("ptlab bench: results written to {}", path.display());
    }
    Ok(if out.failed.is_empty() { 0 } else { 1 })
}

pub fn compare(args: &CompareArgs) -> Result<u8> {
    let mut runs = Vec::new();
    for f in &args.files {
        runs.push(crate::scenario::result_file(f)?);
    }
    if runs.len() < 2 {
        bail!("compare needs at least two result files");
    }
    let names: Vec<String> = args.files.iter().map(|f| f.display().to_string()).collect();
    let bad = ptlab_bench::compare::mismatches(&runs[0], &runs[1..]);
    if !bad.is_empty() {
        let list: Vec<String> = bad
            .iter()
            .map(|m| format!("  {}", m.describe(&names)))
            .collect();
        if !args.allow_incomparable {
            bail!(
                "refusing to compare: {} case(s) were measured with different parameters, so \
                 their difference is not a change in the kernel:\n{}\nMeasure both with the same \
                 options (--quick, --iterations, ...), or pass --allow-incomparable to print the \
                 table with these rows marked",
                bad.len(),
                list.join("\n")
            );
        }
        errln!(
            "ptlab compare: WARNING: {} case(s) measured with different parameters are compared \
             anyway (--allow-incomparable); their changes are marked '!' and mean nothing about \
             the kernel:\n{}",
            bad.len(),
            list.join("\n")
        );
    }
    match args.format {
        OutFormat::Text => out!("{}", ptlab_bench::compare::markdown(&runs[0], &runs[1..])),
        OutFormat::Json => outln!(
            "{}",
            ptlab_bench::compare::json(&names, &runs[0], &runs[1..])
        ),
    }
    Ok(0)
}

pub const REPRODUCE_HELP: &str = "\
For each of the five seed changes (docs/seeds.md) this measures the
workload's contrast arms live on this kernel (mremap-batch 4k vs 64k, mremap
table unaligned vs aligned, fork 4k vs thp-pte, mprotect 4k / 64k / thp-pte,
uffd copy vs move) and puts them next to the model's predicted time before
and after the change on each cost profile. Writes DIR/report.html (SVG
charts, self-contained), DIR/report.md (the headline, to paste into a cover
letter), DIR/report.txt, DIR/live.json (a `ptlab bench` result) and
DIR/model.json. Every table opens with the headline: per change, the live
effect with its 95% interval, the model's prediction of the same contrast on
this machine's calibrated profile and on each arm64 profile, and whether
they agree. % changes: + = faster. Rows from fewer than 5 runs or with a
coefficient of variation above 10% are flagged 'indicative only'. The
terminal and report.html then check the local profile against the accuracy
targets (docs/cost.md): per contrast the predicted time ratio [interval]
against the live ratio (within 25%?), per arm the predicted time [interval]
against live (within 1.5x?) and what the prediction prices (page tables +
TLB, struct page/folio, syscall/fault entry, VMAs, page data, swap).

Live parts need root; without it they are skipped (and said so) and the
model parts still run. The live arms run interleaved over --rounds N (4:
each arm's runs in four slices, A B / B A order, the calibration after
round 2; docs/bench.md \"Interleaved arms\"). A full quiet run took about 7
minutes on 2 CPUs with --rounds 1, and each round adds a warm-up and a
region setup per arm; --quick about 15 seconds, with 3 runs per arm on smaller regions: every row is then
indicative only (it shows that everything works, not how large the effects
are).

Examples (ptlab = target/release/ptlab):
  ptlab reproduce                       # as root
  ptlab reproduce --quick -o /tmp/r
  ptlab reproduce --from reproduce-out/live.json -o again   # re-render, no measuring
  ptlab reproduce --no-live --format json | jq '.headline'
  ptlab reproduce --no-live --arch arm64    # only the arm64 profiles' predictions

--arch A keeps only the model predictions of cost profiles for A (the
spellings of `ptlab run --arch`); by default every profile runs, each on its
own architecture. The live side is always this machine: with an --arch
other than this machine's, no local profile is calibrated (it would be
this machine's architecture), so the local column and the live-vs-model
verdict stay empty; a --profile of another architecture is an error.";

#[derive(Args)]
pub struct ReproduceArgs {
    /// Short runs (smaller regions, fewer iterations and runs)
    #[arg(long)]
    quick: bool,

    /// Directory for report.html, report.md, report.txt, live.json and
    /// model.json (checked before measuring; created if missing)
    #[arg(short, long, value_name = "DIR", default_value = "reproduce-out")]
    out: PathBuf,

    /// Output format on stdout: the report's tables, or one JSON object
    /// ({headline, contrasts}: the headline rows and every contrast)
    #[arg(long, value_enum, default_value_t = OutFormat::Text)]
    format: OutFormat,

    /// Measured runs per workload (default: per workload)
    #[arg(long)]
    runs: Option<u64>,

    /// Skip the live measurements (model columns only)
    #[arg(long, conflicts_with = "from")]
    no_live: bool,

    /// Compact free memory before each live arm and before each step of
    /// the calibration this run does (`ptlab calibrate --compact-memory`),
    /// so the prices are fitted on the memory state they are checked on
    /// (docs/cost.md, run P). Needs root; skipped with a message otherwise
    #[arg(long, conflicts_with_all = ["from", "no_live"])]
    compact_memory: bool,

    /// How the live arms' and the calibration's order-0 regions of 64 MiB
    /// or more get their frames: packed (the default: a spacer takes the
    /// per-CPU lists and the small free blocks first, so the frames are
    /// ascending in every arm and every calibration series alike) or
    /// as-found (whatever the machine's history gives: the order-0 fork
    /// and mprotect arms then move by up to 2x from run to run; docs/cost.md
    /// "Packed order-0 regions")
    #[arg(long, value_enum, default_value_t = Frames::Packed, conflicts_with = "from")]
    frames: Frames,

    /// Interleave the live arms over N rounds (each arm's runs split into N
    /// slices, every round one slice of every arm, every other round in
    /// reverse order: A B, B A, ...) and calibrate between round N/2 and
    /// the rest, so a drift of the machine reaches both arms of a contrast
    /// and the prices alike (docs/cost.md, run R). The order is recorded in
    /// live.json (environment.schedule). 1: every arm once with all its
    /// runs, then the calibration
    #[arg(long, value_name = "N", default_value_t = 4, conflicts_with_all = ["from", "no_live"])]
    rounds: u64,

    /// Do not measure: take the live columns from this result file (e.g. an
    /// earlier run's DIR/live.json) and render the report again
    #[arg(long, value_name = "FILE.json")]
    from: Option<PathBuf>,

    /// Do not show a progress bar
    #[arg(short, long)]
    quiet: bool,

    /// An extra cost profile for the model columns (repeatable); the
    /// built-in profiles and the calibrated local one are always included
    #[arg(long, value_name = "PROFILE.toml")]
    profile: Vec<PathBuf>,

    /// Only the model predictions for this architecture's cost profiles
    /// (default: every profile, each on its own architecture)
    #[arg(long, value_enum)]
    arch: Option<crate::Arch>,
}

/// The architecture of this machine (the live side).
fn host_arch() -> ptlab_model::ArchKind {
    if cfg!(target_arch = "aarch64") {
        ptlab_model::ArchKind::Arm64
    } else {
        ptlab_model::ArchKind::X86_64
    }
}

/// The model columns of `ptlab reproduce`: every change's arms run on the
/// model (`scenarios/seeds/*.ptl`, and `scenarios/examples/pageout-*.ptl`
/// for the proposed change, compiled into ptlab-cost) with the change's
/// switch on and off, at the region sizes the live run uses, priced per
/// measured unit on every profile.
struct CostModel {
    profiles: Vec<ptlab_cost::Profile>,
}

impl CostModel {
    /// Model parameters for `workload`: the live run's region size, and few
    /// repetitions (the cost per unit does not depend on their number).
    fn params(
        workload: &str,
        seed: &ptlab_cost::seeds::Seed,
        quick: bool,
    ) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if let Some(w) = ptlab_bench::workload::find(workload) {
            let live = if quick { w.quick } else { w.full };
            p.push(("size".to_string(), live.size.to_string()));
        }
        if let Some(it) = seed.iterations_param {
            let n = if workload.starts_with("mremap-batch") {
                64
            } else {
                2
            };
            p.push((it.to_string(), n.to_string()));
        }
        p
    }
}

/// The page-table figure's events (the report's figure; the whole-program
/// refinements are left out).
fn event_map(e: &ptlab_model::HwEvents) -> std::collections::BTreeMap<String, u64> {
    e.nonzero()
        .filter(|(k, _)| !k.is_fine())
        .map(|(k, v)| (k.name().to_string(), v))
        .collect()
}

fn call_map(e: &ptlab_model::HwEvents) -> std::collections::BTreeMap<String, u64> {
    e.calls_map()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

impl ModelProvider for CostModel {
    fn describe(&self) -> String {
        let names: Vec<&str> = self.profiles.iter().map(|p| p.name.as_str()).collect();
        format!(
            "ptlab-cost {}: scenarios/seeds/*.ptl on the model, profiles {}",
            env!("CARGO_PKG_VERSION"),
            names.join(", ")
        )
    }

    fn rows(&self, quick: bool) -> std::result::Result<Vec<report::ModelRow>, String> {
        let mut runner = ptlab_cost::seeds::SeedRunner::new();
        let mut rows = Vec::new();
        for ch in report::CHANGES {
            // The baseline arm's events per profile, for the intervals of
            // the other arms against it.
            let mut base_events: Vec<ptlab_model::HwEvents> = Vec::new();
            for arm in ch.arms {
                let seed = ptlab_cost::seeds::seed(arm)
                    .ok_or_else(|| format!("no model scenario for workload {arm}"))?;
                if seed.switch != ch.switch {
                    return Err(format!(
                        "{arm}: the model scenario shows {}, the report expects {}",
                        seed.switch, ch.switch
                    ));
                }
                let params = Self::params(arm, seed, quick);
                for (i, prof) in self.profiles.iter().enumerate() {
                    let b = runner
                        .unit_cost(seed, &params, prof, true)
                        .map_err(|e| e.to_string())?;
                    let a = runner
                        .unit_cost(seed, &params, prof, false)
                        .map_err(|e| e.to_string())?;
                    // The algorithm the running kernel has: the after side
                    // of a seed change, the before side of a proposed one.
                    let cur = if ch.proposed { &b } else { &a };
                    let vs_base = if *arm == ch.arms[0] {
                        base_events.push(cur.events.clone());
                        None
                    } else {
                        ptlab_cost::ratio_interval(&base_events[i], &cur.events, prof)
                            .map(|r| (r.low, r.high))
                    };
                    // The current algorithm's range over the profile's
                    // prices (its per-unit events are rounded down, so the
                    // interval is scaled to the unrounded point).
                    let point = ptlab_cost::price(&cur.events, prof);
                    let iv = ptlab_cost::price_interval(&cur.events, prof);
                    let cur_range = (point.ns > 0.0)
                        .then(|| (cur.ns * iv.low / point.ns, cur.ns * iv.high / point.ns));
                    // What the judged (whole-program) figure is made of.
                    let by_event: Vec<(String, f64)> =
                        ptlab_cost::price_in(&cur.events, prof, ptlab_model::Figure::Program)
                            .by_event
                            .iter()
                            .map(|c| (c.event.name().to_string(), c.ns))
                            .collect();
                    let program_vs_base = if *arm == ch.arms[0] {
                        None
                    } else {
                        ptlab_cost::ratio_interval_in(
                            &base_events[i],
                            &cur.events,
                            prof,
                            ptlab_model::Figure::Program,
                        )
                        .map(|r| (r.low, r.high))
                    };
                    let mut program_phases: Vec<(String, f64)> = cur
                        .program_phases
                        .iter()
                        .filter(|p| cur.program_ns > 0.0 && p.1 > 0.0)
                        .map(|(ph, ns)| (ph.name().to_string(), ns / cur.program_ns))
                        .collect();
                    program_phases.sort_by(|a, b| b.1.total_cmp(&a.1));
                    rows.push(report::ModelRow {
                        program_ns: Some(cur.program_ns),
                        program_range: Some((cur.program_range.low, cur.program_range.high)),
                        program_vs_base,
                        program_phases,
                        loop_ns: cur.loop_program.map(|l| l.0),
                        loop_range: cur.loop_program.map(|l| (l.1.low, l.1.high)),
                        loop_extra: seed.live_loop.map(String::from),
                        cur_range,
                        priced: ptlab_bench::accuracy::shares(&by_event),
                        change: ch.switch.to_string(),
                        workload: arm.to_string(),
                        profile: prof.name.clone(),
                        arch: prof.arch.name().to_string(),
                        before_ns: b.ns,
                        after_ns: a.ns,
                        before_events: event_map(&b.events),
                        after_events: event_map(&a.events),
                        before_calls: call_map(&b.events),
                        after_calls: call_map(&a.events),
                        vs_base,
                    });
                }
            }
        }
        Ok(rows)
    }
}

/// Profiles for the model columns: the built-in ones, then `extra` (the
/// profile calibrated during this run first, then `--profile` files). When
/// this run calibrated nothing (`calibrated_now` false), the last local
/// calibration (`profiles/local.toml`, from `ptlab calibrate`) is used if
/// there is one.
fn reproduce_profiles(
    extra: &[PathBuf],
    calibrated_now: bool,
    arch: Option<ptlab_model::ArchKind>,
) -> Result<Vec<ptlab_cost::Profile>> {
    let mut v = reproduce_profiles_all(extra, calibrated_now)?;
    if let Some(a) = arch {
        v.retain(|p| p.arch == a);
        if v.is_empty() {
            bail!("--arch {}: no cost profile for it", a.name());
        }
    }
    Ok(v)
}

fn reproduce_profiles_all(
    extra: &[PathBuf],
    calibrated_now: bool,
) -> Result<Vec<ptlab_cost::Profile>> {
    let mut v = ptlab_cost::builtin_profiles();
    let local = std::path::Path::new("profiles/local.toml");
    if !calibrated_now && local.exists() {
        v.push(crate::scenario::profile_file(local).context("cannot use profiles/local.toml")?);
    }
    for p in extra {
        v.push(
            crate::scenario::profile_file(p)
                .with_context(|| format!("cannot use {}", p.display()))?,
        );
    }
    Ok(v)
}

/// The model rows of every change's arms on `profiles` (at the quick or
/// the full live sizes), as `ptlab reproduce` computes them.
pub fn model_rows(
    profiles: Vec<ptlab_cost::Profile>,
    quick: bool,
) -> std::result::Result<Vec<report::ModelRow>, String> {
    CostModel { profiles }.rows(quick)
}

pub fn model_provider(
    extra_profiles: &[PathBuf],
    calibrated_now: bool,
    arch: Option<ptlab_model::ArchKind>,
) -> Result<Option<Box<dyn ModelProvider>>> {
    Ok(Some(Box::new(CostModel {
        profiles: reproduce_profiles(extra_profiles, calibrated_now, arch)?,
    })))
}

/// Fit a cost profile for this machine (`ptlab calibrate`, in a child
/// process of ours) into `DIR/local-profile.toml`; its output goes to
/// `DIR/calibrate.txt`.
fn calibrate_here(
    dir: &std::path::Path,
    quick: bool,
    compact: bool,
    frames: Frames,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let out = dir.join("local-profile.toml");
    let exe = std::env::current_exe().context("cannot find the ptlab executable")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("calibrate")
        .arg("--out")
        .arg(&out)
        .arg("--name")
        .arg("local");
    if quick {
        cmd.arg("--quick");
    }
    if compact {
        cmd.arg("--compact-memory");
    }
    cmd.arg("--frames").arg(frames.name());
    errln!(
        "ptlab reproduce: calibrating a local cost profile (ptlab calibrate{}{} --frames {}) ...",
        if quick { " --quick" } else { "" },
        if compact { " --compact-memory" } else { "" },
        frames.name()
    );
    // The child dies with us: an orphaned calibration would go on measuring
    // and write local-profile.toml into a report nobody finishes.
    let o = ptlab_live::lifeline::tie(&mut cmd)
        .output()
        .context("cannot run ptlab calibrate")?;
    let log = dir.join("calibrate.txt");
    let mut text = o.stdout.clone();
    text.extend_from_slice(&o.stderr);
    std::fs::write(&log, &text).with_context(|| format!("cannot write {}", log.display()))?;
    if !o.status.success() {
        anyhow::bail!(
            "ptlab calibrate failed ({}); see {}",
            o.status,
            log.display()
        );
    }
    Ok(out)
}

pub fn reproduce(args: &ReproduceArgs) -> Result<u8> {
    args.frames.apply();
    // Inputs first, then every file this run writes: all checked before
    // anything is measured (the profiles are used after measuring), so a
    // typo costs nothing.
    let arch = args.arch.map(crate::Arch::kind);
    for p in &args.profile {
        let prof = crate::scenario::profile_file(p)
            .with_context(|| format!("--profile {}", p.display()))?;
        if let Some(a) = arch.filter(|a| *a != prof.arch) {
            bail!(
                "--profile {}: profile '{}' is for {}, not --arch {} (which keeps only {} \
                 predictions)",
                p.display(),
                prof.name,
                prof.arch.name(),
                a.name(),
                a.name()
            );
        }
    }
    // Calibrating makes a profile of this machine's architecture.
    let calibrate = arch.is_none_or(|a| a == host_arch());
    let from = match &args.from {
        Some(f) => Some((f, crate::scenario::result_file(f)?)),
        None => None,
    };
    let mut files = vec![
        "report.html",
        "report.txt",
        "report.md",
        "live.json",
        "model.json",
    ];
    if args.from.is_none() && !args.no_live && calibrate {
        files.extend(["local-profile.toml", "calibrate.txt"]);
    }
    crate::outpath::check_dir("--out", &args.out, &files)?;
    if args.quick {
        errln!("ptlab reproduce: {}.", ptlab_bench::headline::QUICK_TRADE);
    }
    let environment = ptlab_bench::env::collect();
    let mut skipped = Vec::new();
    // A profile calibrated on this machine during this run, if it measured.
    let mut local_profile = None;
    let mut live = None;
    let mut failed = false;
    // Whether the result file given with --from was measured with --quick.
    let mut quick_from = false;
    if let Some((f, r)) = from {
        for ch in report::CHANGES {
            for a in ch.arms {
                if !r.cases.iter().any(|c| c.name == *a) {
                    // The file's name only: the report reads the same wherever
                    // the result file lies.
                    let name = f.file_name().map_or_else(
                        || f.display().to_string(),
                        |n| n.to_string_lossy().into_owned(),
                    );
                    skipped.push((a.to_string(), format!("not in the result file {name}")));
                }
            }
        }
        // The profile calibrated by the run that measured it, next to it.
        let beside = f
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("local-profile.toml");
        if beside.is_file() && calibrate {
            errln!(
                "ptlab reproduce: using {} (calibrated with {})",
                beside.display(),
                f.display()
            );
            local_profile = Some(beside);
        }
        quick_from = r.cases.iter().any(|c| {
            ptlab_bench::workload::find(&c.name)
                .is_some_and(|w| c.size_bytes == w.quick.size && w.quick.size != w.full.size)
        });
        live = Some(r);
    } else if args.no_live {
        skipped.push(("live".to_string(), "--no-live given".to_string()));
    } else if let Some(why) = bench::unavailable() {
        errln!("ptlab reproduce: skipping the live measurements: {why}");
        skipped.push(("live".to_string(), why));
    } else {
        let ws: Vec<&'static Workload> = report::CHANGES
            .iter()
            .flat_map(|c| c.arms.iter())
            .filter_map(|a| ptlab_bench::workload::find(a))
            .collect();
        let opts = BenchOptions {
            quick: args.quick,
            runs: args.runs,
            label: "live".into(),
            compact_memory: args.compact_memory,
            rounds: args.rounds,
            ..Default::default()
        };
        let calibrate_now = |skipped: &mut Vec<(String, String)>| {
            if !calibrate {
                let why = format!(
                    "--arch {}: the model columns are {} profiles; a profile calibrated on this \
                     {} machine would not be among them",
                    arch.map_or("", |a| a.name()),
                    arch.map_or("", |a| a.name()),
                    host_arch().name()
                );
                errln!("ptlab reproduce: no local profile: {why}");
                skipped.push(("calibration".to_string(), why));
                None
            } else {
                match calibrate_here(&args.out, args.quick, args.compact_memory, args.frames) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        errln!("ptlab reproduce: no local profile: {e:#}");
                        skipped.push(("calibration".to_string(), format!("{e:#}")));
                        None
                    }
                }
            }
        };
        // With rounds, the calibration runs in the middle of the live
        // arms: its prices are measured in the same stretch of the
        // machine's time as the arms they are checked against.
        let halves: Vec<Option<std::ops::Range<u64>>> = if args.rounds > 1 {
            let mid = args.rounds / 2;
            vec![Some(0..mid), Some(mid..args.rounds)]
        } else {
            vec![None]
        };
        let mut outcome: Option<std::result::Result<bench::Outcome, String>> = None;
        for (k, h) in halves.iter().enumerate() {
            if k == 1 {
                local_profile = calibrate_now(&mut skipped);
            }
            let o = BenchOptions {
                only_rounds: h.clone(),
                ..opts.clone()
            };
            let mut part = run_with_bar(&ws, &o, args.quiet);
            if let (1, Ok(p)) = (k, &mut part) {
                p.result.environment.notes.push(format!(
                    "ptlab calibrate ran between round {} and round {} of the live arms",
                    h.as_ref().map_or(0, |r| r.start),
                    h.as_ref().map_or(0, |r| r.start + 1)
                ));
            }
            outcome = Some(match (outcome, part) {
                (None, p) => p,
                (Some(Ok(a)), Ok(b)) => Ok(bench::merge_outcomes(a, b)),
                (Some(Err(e)), _) | (Some(Ok(_)), Err(e)) => Err(e),
            });
        }
        match outcome.expect("at least one part ran") {
            Ok(out) => {
                failed = !out.failed.is_empty();
                skipped.extend(out.failed);
                live = Some(out.result);
            }
            Err(e) => {
                failed = true;
                skipped.push(("live".to_string(), e));
            }
        }
        if halves.len() == 1 {
            local_profile = calibrate_now(&mut skipped);
        }
    }
    let local_profile_used = local_profile.is_some();
    let mut extra = Vec::new();
    extra.extend(local_profile);
    extra.extend(args.profile.iter().cloned());
    let quick = args.quick || quick_from;
    let model = match model_provider(&extra, local_profile_used, arch)? {
        None => Model::Unavailable(report::NO_MODEL.into()),
        Some(p) => match p.rows(quick) {
            Ok(rows) => Model::Rows {
                source: p.describe(),
                rows,
            },
            Err(e) => Model::Unavailable(format!("model predictions failed: {e}")),
        },
    };
    let r = Reproduction {
        environment: live
            .as_ref()
            .map_or(environment, |l: &BenchResult| l.environment.clone()),
        live,
        skipped,
        model,
        quick,
    };
    match args.format {
        OutFormat::Text => out!("{}", report::terminal(&r)),
        OutFormat::Json => outln!("{}", ptlab_bench::headline::json(&r)),
    }
    let files = report::write(&args.out, &r)
        .with_context(|| format!("cannot write the report to {}", args.out.display()))?;
    for f in files {
        match args.format {
            OutFormat::Text => outln!("wrote {}", f.display()),
            OutFormat::Json => errln!("ptlab reproduce: wrote {}", f.display()),
        }
    }
    Ok(if failed { 1 } else { 0 })
}
