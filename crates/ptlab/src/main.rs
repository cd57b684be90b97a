//! `ptlab`: model and measure Linux anonymous-memory page-table operations.
//!
//! This binary is a thin shell over `ptlab-scenario`: it reads a scenario,
//! runs it on the model and prints the report. Exit status: 0 when every
//! expectation held, 1 when any failed (or the run hit a runtime error),
//! 2 for usage, I/O and parse errors. A reader that goes away (`ptlab ... |
//! head -1`) is not an error: see [`out`].

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use ptlab_model::{ArchKind, ModelConfig};
use ptlab_scenario::{ModelBackend, RunOptions, RunReport};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[macro_use]
mod out;
mod bench_cmd;
mod calibrate;
mod cost;
mod coverage;
mod limits;
mod outpath;
mod scenario;
mod show;
mod speed;

#[derive(Parser)]
#[command(
    name = "ptlab",
    version,
    about = "Model Linux 6.18 anonymous-memory page tables, diff the model against the live kernel, \
             and measure and predict the cost of page-table operations",
    long_about = "ptlab models Linux 6.18's anonymous-memory page-table layer (x86-64 and arm64 with \
                  contiguous PTEs) and runs .ptl scenarios — small scripts that mmap memory, touch it, \
                  mremap/mprotect/fork/madvise/userfaultfd it and state what maps, folios and \
                  page-table entries must look like — on the model or the live kernel.\n\n\
                  Start here: `ptlab reproduce` (as root) measures the five seed changes on this \
                  kernel and puts the model's predictions next to them; `ptlab run FILE` runs a \
                  scenario; `ptlab diff FILE` compares model and kernel. The scenario language is \
                  described in docs/language.md; README.md lists every document."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a .ptl scenario on the page-table model (or the live kernel) and check its expectations
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Run a scenario on the model and on the live kernel and compare what they show
    #[command(after_help = DIFF_HELP)]
    Diff(DiffArgs),
    /// Run random scenarios on the model and the live kernel, diff them, shrink divergences
    #[command(after_help = FUZZ_HELP)]
    Fuzz(FuzzArgs),
    /// Put back THP knobs left changed by a live run that died (reads the restore journal)
    #[command(after_help = RESTORE_HELP)]
    Restore,
    /// Draw VMAs, page tables, folios and what a step changed as an HTML page (SVG)
    #[command(after_help = show::SHOW_HELP)]
    Show(show::ShowArgs),
    /// Run seed workloads natively on the live kernel, with statistics (needs root)
    #[command(after_help = bench_cmd::BENCH_HELP)]
    Bench(bench_cmd::BenchArgs),
    /// Compare result files mmtests-style: mean ± stdev, % change vs the first, significance
    #[command(after_help = bench_cmd::COMPARE_HELP)]
    Compare(bench_cmd::CompareArgs),
    /// The main job: the five seed changes measured live and predicted by the model, as a report
    #[command(after_help = bench_cmd::REPRODUCE_HELP)]
    Reproduce(bench_cmd::ReproduceArgs),
    /// Time each seed workload natively and on the model (x86-64, arm64): speed-up and model memory per page
    #[command(after_help = speed::SPEED_HELP)]
    Speed(speed::SpeedArgs),
    /// Count a scenario's hardware events on the model and estimate its time per cost profile
    #[command(after_help = cost::COST_HELP)]
    Cost(cost::CostArgs),
    /// Which of the model's kernel rules the shipped (or given) scenarios exercise, and which none does
    #[command(after_help = coverage::COVERAGE_HELP)]
    Coverage(coverage::CoverageArgs),
    /// Fit a cost profile for this machine from live microbenchmarks (or --check one)
    #[command(after_help = calibrate::CALIBRATE_HELP)]
    Calibrate(calibrate::CalibrateArgs),
    /// Write a scenario as a standalone C program that makes its system calls and checks its expectations
    #[command(after_help = EXPORT_C_HELP)]
    ExportC(ExportCArgs),
    /// Internal: the measuring child process of `ptlab calibrate`
    #[command(hide = true)]
    CalibrateWorker(calibrate::WorkerArgs),
}

const EXPORT_C_HELP: &str = "\
Examples:
  ptlab export-c tests/scenarios/uffd-07-move-one-page.ptl -o repro.c
  cc -O2 -Wall -Werror -o repro repro.c && sudo ./repro
  ptlab export-c scenarios/seeds/fork-thp-pte.ptl --param iterations=2 > fork.c

The program is what a kernel report attaches: plain C for x86-64 Linux, no
ptlab needed. It runs each scenario process as a process of its own (fork
children as the language defines them), makes the scenario's system calls
with the values ptlab's live backend passes (mmap, munmap, mremap, mprotect,
madvise, mlock/mlock2, munlock, mseal, prctl, setrlimit memlock, capset,
userfaultfd and its ioctls, THP knob writes put back on exit, a swap file
for `swap SIZE`), and checks every expect line the way the live backend
observes it: results and errnos, maps lines, pagemap/kpageflags/kpagecount
page attributes and tags, page bytes (`expect bytes`; `write ... fill` is a
memset), smaps fields, VmLck and THP counter deltas. Each
check prints `ok line N: ...` or `FAIL line N: ...: expected ... observed ...`.
`observe`, `expect invariants` and `before` become comments. Lines it cannot
reproduce faithfully (setrlimit as/data, fill ... headroom) are refused with
their line number (exit 2).

The program exits 0 when every check held, 1 when one failed, 2 on a runtime
error. Run it as root (frame numbers, kpageflags, knobs, swapon) and not
while another ptlab live run is changing THP knobs. See docs/live.md
\"Reporting a kernel finding\".";

const RESTORE_HELP: &str = "\
Examples:
  sudo ptlab restore        # after a live run was killed (SIGKILL, power loss)

Every live run journals the THP knobs it changes before changing them, in
$PTLAB_STATE_DIR/thp-journal.json (as root: /var/lib/ptlab/thp-journal.json;
otherwise $XDG_STATE_HOME/ptlab or ~/.local/state/ptlab), and removes the journal
once they are put back. `ptlab restore` writes the journaled values back
and removes the journal; every ptlab command also does this at its start.
See docs/live.md.

Exit status: 0 = restored or nothing to restore, 1 = some knobs could not
be written back (listed), 2 = the journal cannot be read.";

const DIFF_HELP: &str = "\
Examples (ptlab = target/release/ptlab; as root):
  ptlab diff scenarios/examples/basic.ptl
  ptlab diff --format json tests/scenarios/ff-s08-fork-mthp.ptl
  ptlab diff --before fork-pte-batch --param iterations=2 scenarios/seeds/fork-thp-pte.ptl

Every operation runs on both backends; after every statement the maps, pages
(folio grouping and sharing matched as a bijection of frames), and THP counter
deltas of every process are compared. On a divergence ptlab prints the first
divergent statement (file:line) with a side-by-side of what each side showed.
Needs root for frame numbers, kpageflags and kpagecount, and to change THP
knobs; see docs/live.md.

A statement over a live budget (--max-memory, --max-procs, --max-swap: memory
it may populate, processes, swap-file size) stops the run before either side
runs it (exit 3).

Exit status: 0 = agreement, 1 = divergence, 2 = usage, I/O or parse error (or
the live backend cannot start), 3 = no divergence but the run stopped early
(an operation unsupported by the model, a live budget, or a runtime error).";

const FUZZ_HELP: &str = "\
Examples:
  ptlab fuzz --time 60                 # a minute of random scenarios
  ptlab fuzz --seed 42 --steps 200     # 200 scenarios from seed 42 (reproducible)
  ptlab fuzz --seed 42 --steps 2000 --jobs auto      # one job per CPU, each pinned
  ptlab fuzz --seed 42 --steps 2000 --shard 1/4 -o r1  # this machine's quarter
  ptlab fuzz --merge r0/results-42-shard-0-of-4.jsonl r1/results-42-shard-1-of-4.jsonl

Each step generates one random scenario (mmap/munmap/madvise incl.
MADV_COLLAPSE/read/write/thp, and fork/exit, mprotect, mremap, uffd, guard
markers, mlock/munlock, mseal, prctl, swap, MAP_LOCKED, setrlimit and
capability drop where the model supports them, over 64 KiB, 2 MiB and 1 GiB
alignments, partial folio ranges and VMA edges; in about half the cases byte
patterns: `write ADDR LEN fill BYTE` at unaligned addresses and lengths
across page, 64 KiB and 2 MiB boundaries, UFFDIO_COPY from an unaligned
address in filled memory, fills before UFFDIO_MOVE, which the diff compares
byte for byte),
diffs it against the live kernel, and on divergence shrinks it to a minimal
.ptl file saved in --out. The seed is printed; the same seed gives the same
scenarios: case n of seed s is always the same scenario.

--out DIR also receives results-SEED.jsonl (results-SEED-shard-K-of-N.jsonl
with --shard): one JSON object per scenario (seed, case, verdict agree |
partial | divergent | flaky | error, reproducer path and text, timings).
--shard K/N runs the cases whose index is K modulo N, so N machines with the
same --seed and --steps run exactly the scenarios one machine would;
--merge reads such files and prints one summary (duplicates counted once).
--jobs N runs N workers, each pinned to its own CPU. THP knobs and swap are
global, so the campaign runs in knob epochs (--epoch K, default 16; 0: none,
every case sets its own policy and runs alone): the K cases of an epoch
start with the same THP policy (their printed scenarios carry its `thp`
lines, so each still reproduces alone with `ptlab diff`), which the campaign
sets once; the epoch's cases that change no global state after it run side
by side on all jobs, each comparing the THP counters its own statements
moved, and those that write a knob mid-scenario, make a swap file or call
MADV_COLLAPSE run alone after them (docs/live.md, \"Parallel jobs and
shards\").

Coverage: every case is also run on the model, and the kernel rules it takes
are counted (docs/coverage.md); the progress line shows `rules N/240` and the
summary the rules still missing. Each case is generated with the weights
below multiplied, per operation, by up to 3 for the rule families the cases
before it left unexercised, and the new-code percentages by up to 2 for the
rules they aim at (--no-guide: plain weights). The cases are planned
in index order, so case n of a seed is the same with any --jobs and --shard.
--model-only runs the cases on the model alone (both architectures, with
and without the seed changes; invariants checked after every statement; no
root): a violated invariant or a model panic is a finding.

Generator weights (--weight NAME=N; docs/live.md, \"Generator weights\"):
  operations (relative): mmap=22 write=26 read=12 madvise=20 munmap=7 thp=6
    fork=5 mprotect=6 mremap=6 uffd=8 guard_lock_seal=7
  madvise: madv_collapse=5 madv_pageout=40 madv_cold=5
  guard/mlock/mseal: guard_install=35 guard_remove=15 mlock=25 munlock=20 mseal=10
  uffd: uffd_register=35 uffd_copy=20 uffd_zeropage=10 uffd_move=35 uffd_unregister=10
  new kernel code (percent): mremap_multi_vma=30 (6.17 multi-VMA move),
    uffd_move_large=40 (UFFDIO_MOVE of large folios and PMDs),
    large_folio_ranges=40 (mprotect/mremap batched over large folios)

Exit status: 0 = no divergence, 1 = divergences found (--merge: divergent or
error records; --model-only: invariant violations or panics), 2 = error (a
case could not run; a malformed --merge file).";

const RUN_HELP: &str = "\
Examples:
  ptlab run scenarios/examples/basic.ptl
  ptlab run --arch arm64 scenarios/examples/basic.ptl
  ptlab run --format json --check-invariants my.ptl | jq .
  ptlab run tests/scenarios/numa-06-fault-migrate-64k.ptl   # NUMA scan, hinting fault, migration

A tiny scenario (save as demo.ptl):
  thp 64K always                  # allow 64 KiB mTHP everywhere
  p = mmap 256K                   # private anonymous, read-write
  let a = align_up(p, 64K)        # a 64 KiB-aligned address inside it
  write a                         # one write fault ...
  expect page a 64K anon folio=64K idx=0 samefolio   # ... maps a whole folio
  observe pages

The scenario language is described in docs/language.md.

Limits: a scenario file of at most 4 MiB (lines of at most 64 KiB); a run
stops after --max-statements statements and repeat iterations (default
10000000; 0 = no limit), and reports progress on stderr when it takes more
than 2 seconds. Output piped into `head` ends quietly with the run's status.

Exit status: 0 = all expectations held, 1 = a failure (expectation, uncovered
syscall error or fault, invariant violation, runtime error, the statement
limit), 2 = usage, I/O or parse error (including an unknown --param name).";

#[derive(Args)]
struct RunArgs {
    /// The scenario file to run (.ptl)
    file: PathBuf,

    /// Architecture whose page-table format the model uses
    #[arg(long, value_enum, default_value_t = Arch::X86_64)]
    arch: Arch,

    /// Output format: readable text, or one JSON object per line
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,

    /// Check the model's invariants after every statement, reporting the first
    /// violation at the line that caused it (slower)
    #[arg(long)]
    check_invariants: bool,

    #[command(flatten)]
    scenario: ScenarioArgs,

    #[command(flatten)]
    memory: MemoryArg,

    /// Where to run: the model, or the live kernel (in worker processes; see docs/live.md)
    #[arg(long, value_enum, default_value_t = BackendKind::Model)]
    backend: BackendKind,

    #[command(flatten)]
    run_limits: scenario::RunLimitArgs,
    #[command(flatten)]
    limits: limits::LimitArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendKind {
    /// The executable model
    Model,
    /// The running kernel
    Live,
}

#[derive(Args)]
struct ExportCArgs {
    /// The scenario file to export (.ptl)
    file: PathBuf,

    /// Write the C program here instead of to stdout
    #[arg(short, long, value_name = "FILE")]
    out: Option<PathBuf>,

    /// Set a `param NAME = DEFAULT` of the scenario (repeatable); VALUE is a
    /// number or size: 42, 0x10, 64K, 1G. The value is written into the program
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, String)>,

    /// No note on stderr about what was written
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Args)]
struct DiffArgs {
    /// The scenario file to run (.ptl)
    file: PathBuf,

    /// Architecture whose page-table format the model uses
    #[arg(long, value_enum, default_value_t = Arch::X86_64)]
    arch: Arch,

    /// Output format: readable text, or one JSON object (the whole diff
    /// report, printed at the end)
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    format: DiffFormat,

    /// Compare only at observe/expect lines and at the end (faster for big scenarios)
    #[arg(long)]
    checkpoints_only: bool,

    /// Read every page's kpageflags, kpagecount and contents, every
    /// process's smaps and every THP counter, at every comparison. By default a per-statement
    /// comparison re-uses those reads for pages and VMAs no statement since
    /// the last comparison can have changed (by what each statement names
    /// and which pagemap entries changed), and reads everything every 64
    /// comparisons and once more at the end (docs/live.md, "How fast a diff
    /// is"). Slower; for checking that re-use
    #[arg(long)]
    read_everything: bool,

    #[command(flatten)]
    scenario: ScenarioArgs,

    #[command(flatten)]
    run_limits: scenario::RunLimitArgs,
    #[command(flatten)]
    limits: limits::LimitArgs,
}

#[derive(Args)]
struct FuzzArgs {
    /// Seed (default: derived from the clock; always printed)
    #[arg(long)]
    seed: Option<u64>,

    /// Number of random scenarios in the campaign (case indices 0..N; with
    /// --shard, this machine runs its share of them; default: until --time
    /// runs out)
    #[arg(long)]
    steps: Option<u64>,

    /// Time budget in seconds (default 60 when --steps is not given)
    #[arg(long)]
    time: Option<u64>,

    /// Statements per generated scenario (1 to 10000: each divergence is
    /// shrunk by re-running the scenario many times)
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    ops: u64,

    /// Architecture whose page-table format the model uses (the live side
    /// is always this machine, as in `ptlab diff`)
    #[arg(long, value_enum, default_value_t = Arch::X86_64)]
    arch: Arch,

    /// Parallel jobs, each pinned to its own CPU; 0 or `auto` = one per CPU
    /// ptlab may use. Cases that change THP knobs (after their epoch's
    /// policy), make a swap file or call MADV_COLLAPSE run alone
    #[arg(short, long, value_name = "N|auto", default_value = "1", value_parser = parse_jobs)]
    jobs: Jobs,

    /// Run only shard K of N (K from 0): the cases whose index is K modulo
    /// N, so N machines with the same --seed together run one campaign
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    shard: Option<ptlab_live::fuzz::Shard>,

    /// Do not fuzz: read these results files (DIR/results-*.jsonl of
    /// several shards or runs) and print one summary: counts per verdict,
    /// scenarios per second, every divergence with its reproducer
    #[arg(
        long,
        value_name = "FILE",
        num_args = 1..,
        conflicts_with_all = ["seed", "steps", "time", "ops", "arch", "jobs", "shard", "epoch", "out", "quiet", "timings"]
    )]
    merge: Vec<PathBuf>,

    /// Directory for shrunk divergent scenarios and the results file
    /// results-SEED[-shard-K-of-N].jsonl (checked, and created if missing,
    /// before fuzzing starts)
    #[arg(short, long, value_name = "DIR", default_value = "fuzz-failures")]
    out: PathBuf,

    /// Output format of the summary on stdout: text, or one JSON object
    /// (the merged results: counts, rate, divergences)
    #[arg(long, value_enum, default_value_t = FuzzFormat::Text)]
    format: FuzzFormat,

    /// Do not show a progress bar
    #[arg(short, long)]
    quiet: bool,

    /// Run the cases on the model only, with its invariant checker after
    /// every statement (no live kernel, no root; a violated invariant or a
    /// model panic is a finding): fast rule coverage and model bugs. One
    /// job (--jobs is ignored)
    #[arg(long)]
    model_only: bool,

    /// Change one generator weight, NAME=N (repeatable), e.g. --weight
    /// mremap=20 --weight uffd_move_large=80; the names and defaults are
    /// listed below
    #[arg(long, value_name = "NAME=N", value_parser = parse_weight)]
    weight: Vec<String>,

    /// Do not bias generation toward the rule families earlier cases left
    /// unexercised (case n then depends on the seed and n alone)
    #[arg(long)]
    no_guide: bool,

    /// Knob epochs of K cases (0: none): the cases of an epoch share one
    /// THP policy, which the campaign sets once; those that change no
    /// global state after it run side by side on the jobs, the rest alone
    #[arg(long, value_name = "K", default_value_t = 16)]
    epoch: u64,

    /// Do not fuzz: print the scenario of case N of this campaign (the same
    /// --seed, --ops, --epoch, --weight, --no-guide and --model-only) and exit;
    /// with guidance the cases before it are planned on the model first
    #[arg(long, value_name = "N")]
    show_case: Option<u64>,

    /// Print where the cases' time went at the end: milliseconds per case
    /// for each phase (planning on the model, starting the worker, the
    /// statements, the comparisons, knob writes and swap areas, ending,
    /// counter re-runs, confirmation), for the cases that ran side by side
    /// and those that ran alone. Every case's phases are also in the
    /// results file (`timings`)
    #[arg(long)]
    timings: bool,

    #[command(flatten)]
    limits: limits::LimitArgs,
}

fn parse_weight(s: &str) -> std::result::Result<String, String> {
    ptlab_live::fuzz::GenWeights::default().set_from(s)?;
    Ok(s.to_string())
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FuzzFormat {
    /// Each divergence's report, partial reasons, then a summary line
    Text,
    /// One JSON object: the summary of the results (as `--merge` prints it)
    Json,
}

/// `--jobs`: a number, or every CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Jobs {
    Auto,
    N(usize),
}

fn parse_jobs(s: &str) -> std::result::Result<Jobs, String> {
    match s.trim() {
        "auto" | "0" => Ok(Jobs::Auto),
        t => t
            .parse::<usize>()
            .map(Jobs::N)
            .map_err(|_| format!("'{s}': expected a number of jobs or `auto`")),
    }
}

fn parse_shard(s: &str) -> std::result::Result<ptlab_live::fuzz::Shard, String> {
    ptlab_live::fuzz::Shard::parse(s)
}

/// The model's CPU features before any `--cpu-feature`: all off, contpte
/// left to the architecture's default.
fn default_features() -> ptlab_cost::ProfileFeatures {
    ptlab_cost::ProfileFeatures {
        tlbi_range: false,
        bbml2_noabort: false,
        kpti: false,
        contpte: None,
        source: String::new(),
    }
}

/// `NAME=on|off` for `--cpu-feature`.
pub(crate) fn parse_cpu_feature(s: &str) -> Result<(String, bool), String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=on|off, not '{s}'"))?;
    let on = match v {
        "on" | "1" | "true" | "yes" => true,
        "off" | "0" | "false" | "no" => false,
        _ => return Err(format!("'{v}': expected on or off")),
    };
    default_features().set(n, on)?;
    Ok((n.to_string(), on))
}

pub(crate) fn parse_param(s: &str) -> std::result::Result<(String, String), String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not NAME=VALUE"))?;
    if n.is_empty() {
        return Err(format!("'{s}': empty parameter name"));
    }
    ptlab_scenario::parse_param_value(v)?;
    Ok((n.trim().to_string(), v.trim().to_string()))
}

fn parse_after(name: &str) -> std::result::Result<ptlab_model::After, String> {
    ptlab_model::After::from_switch(name).ok_or_else(|| {
        let names: Vec<&str> = ptlab_model::After::NAMES.iter().map(|(n, _)| *n).collect();
        format!(
            "unknown proposed-change switch '{name}'; known: {}",
            names.join(", ")
        )
    })
}

fn parse_before(name: &str) -> std::result::Result<ptlab_model::Before, String> {
    ptlab_model::Before::from_switch(name).ok_or_else(|| {
        let names: Vec<&str> = ptlab_model::Before::NAMES.iter().map(|(n, _)| *n).collect();
        format!(
            "unknown switch '{name}'; expected one of: {}",
            names.join(", ")
        )
    })
}

/// `--memory SIZE` and `--nodes N`: the modelled machine's physical memory
/// and NUMA nodes (`run`, `cost`, `show`; `diff` and `fuzz` model the
/// machine they run on).
#[derive(Args, Clone, Copy, Default)]
pub(crate) struct MemoryArg {
    /// Physical memory of the modelled machine (default 24G, this project's
    /// reference VM): 64M up to the architecture's limit (x86-64 64T,
    /// arm64 256T). Same as a `machine memory SIZE` statement at the top of
    /// the scenario. Example: --memory 2T to fork a 1 TiB process
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub(crate) memory: Option<u64>,
    /// NUMA nodes of the modelled machine (default 1): memory is split into
    /// N equal slices, node 0 lowest; a process's faults allocate on the node
    /// it runs on (`numa node N`), and `numa scan` / hinting faults move
    /// misplaced folios there (docs/ops/numa.md). Same as a `machine nodes
    /// N` statement. Example: --nodes 2
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub(crate) nodes: Option<u32>,
}

impl MemoryArg {
    /// `cfg` with this memory, checked against `cfg`'s architecture.
    pub(crate) fn apply(&self, cfg: ModelConfig) -> Result<ModelConfig> {
        let mut cfg = cfg;
        if let Some(n) = self.nodes {
            cfg.nodes = n;
        }
        let Some(bytes) = self.memory else {
            return Ok(cfg);
        };
        let max = ptlab_model::max_memory(cfg.arch);
        if bytes > max {
            anyhow::bail!(
                "--memory {}T: {} addresses at most {}T of physical memory",
                bytes >> 40,
                cfg.arch.name(),
                max >> 40
            );
        }
        Ok(cfg.with_memory(bytes))
    }
}

/// A memory size for `--memory`: 64M, 512G, 4T (at least 64 MiB).
pub(crate) fn parse_memory(s: &str) -> std::result::Result<u64, String> {
    let v = ptlab_scenario::lexer::parse_number(s.trim())
        .map_err(|e| format!("'{s}' is not a size: {e}"))?;
    if v < ptlab_model::MIN_MEMORY {
        return Err(format!("'{s}' is below the model's minimum of 64M"));
    }
    Ok(v)
}

/// The options of every subcommand that runs a scenario on the model
/// (`run`, `diff`; `cost` and `show` add their own comparisons).
#[derive(Args)]
struct ScenarioArgs {
    /// Run a seed change's previous algorithm (repeatable): mremap-pte-batch,
    /// mremap-table-move, fork-pte-batch, mprotect-pte-batch, uffd-move-batch.
    /// Observable results are the same (in `diff` they must still agree with
    /// the kernel); hardware work differs. A `before` statement in the
    /// scenario replaces this set.
    #[arg(long = "before", value_name = "NAME", value_parser = parse_before)]
    before: Vec<ptlab_model::Before>,

    /// Run a proposed change newer than Linux 6.18 (repeatable):
    /// swapout-unmap-batch (docs/prototyping.md). Observable results are the
    /// same as 6.18's (in `diff` they must still agree with the kernel);
    /// hardware work differs. An `after` statement replaces this set.
    #[arg(long = "after", value_name = "NAME", value_parser = parse_after)]
    after: Vec<ptlab_model::After>,

    /// Set a `param NAME = DEFAULT` of the scenario (repeatable); VALUE is a
    /// number or size: 42, 0x10, 64K, 1G. NAME must be declared by the
    /// scenario
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, String)>,

    /// Switch a CPU/kernel feature the model's arch policy consults
    /// (repeatable): contpte (arm64 contpte layer, Linux 6.9+ with
    /// CONFIG_ARM64_CONTPTE), tlbi_range (FEAT_TLBIRANGE, used by Linux
    /// 5.12+), bbml2_noabort (Linux 6.18 contpte_convert without a flush),
    /// kpti (arm64 KPTI / x86 PTI). Default: all off except contpte
    #[arg(long = "cpu-feature", value_name = "NAME=on|off", value_parser = parse_cpu_feature)]
    cpu_features: Vec<(String, bool)>,
}

/// The model's CPU features: the defaults with `--cpu-feature` settings
/// applied.
pub(crate) fn hw_features(cpu_features: &[(String, bool)]) -> Result<ptlab_model::HwFeatures> {
    let mut f = default_features();
    for (n, on) in cpu_features {
        f.set(n, *on).map_err(anyhow::Error::msg)?;
    }
    Ok(f.hw())
}

/// The machine `ptlab run` models: `arch`'s defaults, the `--before`
/// switches and the CPU features (`--cpu-feature`).
pub(crate) fn model_config(
    arch: ArchKind,
    before: ptlab_model::Before,
    cpu_features: &[(String, bool)],
) -> Result<ModelConfig> {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    cfg.hw = hw_features(cpu_features)?;
    Ok(cfg)
}

/// Run a parsed scenario on a fresh model, as `ptlab run` does; the
/// backend is returned so that callers can read the model afterwards
/// (`ptlab speed` measures its memory).
pub(crate) fn run_on_model(
    script: &ptlab_scenario::Script,
    cfg: ModelConfig,
    opts: &RunOptions,
    check_invariants: bool,
) -> (RunReport, ModelBackend) {
    let mut backend = ModelBackend::new(cfg).check_every_statement(check_invariants);
    let report = ptlab_scenario::run(script, &mut backend, opts);
    (report, backend)
}

impl ScenarioArgs {
    /// The model's CPU features: the defaults with `--cpu-feature` applied.
    fn hw(&self) -> Result<ptlab_model::HwFeatures> {
        hw_features(&self.cpu_features)
    }

    fn before(&self) -> ptlab_model::Before {
        self.before
            .iter()
            .fold(ptlab_model::Before::empty(), |a, b| a | *b)
    }

    fn after(&self) -> ptlab_model::After {
        self.after
            .iter()
            .fold(ptlab_model::After::empty(), |a, b| a | *b)
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Arch {
    // The same spellings as ArchKind::from_name (cost, calibrate).
    #[value(name = "x86_64", aliases = ["x86-64", "amd64"])]
    X86_64,
    #[value(name = "arm64", alias = "aarch64")]
    Arm64,
}

impl Arch {
    pub(crate) fn kind(self) -> ArchKind {
        match self {
            Arch::X86_64 => ArchKind::X86_64,
            Arch::Arm64 => ArchKind::Arm64,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DiffFormat {
    /// The first divergence side by side, then a summary
    Text,
    /// One JSON object: the diff report
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Observations and failures as text, then a PASS/FAIL summary
    Text,
    /// JSON lines: {"kind":"observe"|"failure"|"summary", ...}
    Json,
}

fn main() -> ExitCode {
    out::install_panic_hook();
    let cli = Cli::parse();
    // Unwinding from a library's `println!` on a closed pipe (the safety net
    // of `out`) runs every cleanup on the way here.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch(&cli)));
    let result = match result {
        Ok(r) => r,
        Err(_) if out::pipe_panicked() => return ExitCode::from(out::PIPE_EXIT),
        Err(p) => std::panic::resume_unwind(p),
    };
    let stdout_ok = out::finish();
    match result {
        Ok(code) => match stdout_ok {
            Ok(()) => ExitCode::from(code),
            Err(e) => {
                errln!("ptlab: error: {e}");
                ExitCode::from(2)
            }
        },
        Err(e) => {
            errln!("ptlab: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn dispatch(cli: &Cli) -> Result<u8> {
    // A live run that died (crash, SIGKILL) may have left THP knobs changed:
    // put them back before doing anything else.
    if !matches!(cli.command, Command::Restore | Command::CalibrateWorker(_)) {
        match ptlab_live::knobs::restore_stale_journal() {
            Ok(Some(rep)) => errln!("ptlab: {rep}"),
            Ok(None) => {}
            Err(e) => errln!("ptlab: warning: cannot restore a stale THP journal: {e:#}"),
        }
    }
    match &cli.command {
        Command::Run(args) => run(args).map(|ok| if ok { 0 } else { 1 }),
        Command::Diff(args) => diff(args),
        Command::Fuzz(args) => fuzz(args),
        Command::Restore => restore(),
        Command::Show(args) => show::show(args),
        Command::Bench(args) => bench_cmd::bench(args),
        Command::Compare(args) => bench_cmd::compare(args),
        Command::Reproduce(args) => bench_cmd::reproduce(args),
        Command::Speed(args) => speed::speed(args),
        Command::Coverage(args) => coverage::coverage(args),
        Command::Calibrate(args) => calibrate::calibrate(args, &mut out::stdout()),
        Command::CalibrateWorker(args) => calibrate::worker(args),
        Command::ExportC(args) => export_c(args),
        Command::Cost(args) => {
            let mut w = BufWriter::new(out::stdout());
            cost::cost(args, &mut w).and_then(|c| {
                w.flush().context("cannot write to stdout")?;
                Ok(c)
            })
        }
    }
}

fn export_c(args: &ExportCArgs) -> Result<u8> {
    if let Some(out) = &args.out {
        outpath::check_file("--out", out)?;
    }
    let (_, _, script) = scenario::load(&args.file, &args.params)?;
    let c = ptlab_live::export_c(&script, &args.params)?;
    match &args.out {
        Some(out) => {
            std::fs::write(out, &c).with_context(|| format!("cannot write '{}'", out.display()))?;
            if !args.quiet {
                errln!(
                    "ptlab: wrote {} ({} lines); build and run it with: cc -O2 -Wall -Werror -o repro {} && sudo ./repro",
                    out.display(),
                    c.lines().count(),
                    out.display()
                );
            }
        }
        None => {
            let mut w = BufWriter::new(out::stdout());
            w.write_all(c.as_bytes())
                .and_then(|()| w.flush())
                .context("cannot write the program to stdout")?;
        }
    }
    Ok(0)
}

fn restore() -> Result<u8> {
    match ptlab_live::knobs::restore_now()? {
        Some(rep) => {
            outln!("{rep}");
            Ok(if rep.skipped.is_empty() { 0 } else { 1 })
        }
        None => {
            outln!(
                "nothing to restore (no journal at {})",
                ptlab_live::knobs::journal_path().display()
            );
            Ok(0)
        }
    }
}

fn diff(args: &DiffArgs) -> Result<u8> {
    if let Some(why) = ptlab_live::live_unavailable() {
        anyhow::bail!("cannot run on the live kernel: {why}");
    }
    scenario::apply(&args.run_limits);
    let (name, source, _) = scenario::load(&args.file, &args.scenario.params)?;
    let opts = ptlab_live::DiffOptions {
        arch: args.arch.kind(),
        every_step: !args.checkpoints_only,
        incremental: !args.read_everything,
        narrow_counters: !args.read_everything,
        limits: args.limits.limits(),
        before: args.scenario.before(),
        params: args.scenario.params.clone(),
        model_config: (!args.scenario.cpu_features.is_empty() || !args.scenario.after.is_empty())
            .then(|| -> Result<ModelConfig> {
                let mut cfg = ptlab_live::diff::machine_model_config(args.arch.kind());
                cfg.before = args.scenario.before();
                cfg.after = args.scenario.after();
                cfg.hw = args.scenario.hw()?;
                Ok(cfg)
            })
            .transpose()?,
        ..Default::default()
    };
    let report = ptlab_live::diff_source(&name, &source, &opts)?;
    let mut out = BufWriter::new(out::stdout());
    match args.format {
        DiffFormat::Text => write!(out, "{}", report.render_text()),
        DiffFormat::Json => writeln!(out, "{}", report.to_json()),
    }
    .and_then(|()| out.flush())
    .context("cannot write the report to stdout")?;
    Ok(match report.outcome() {
        ptlab_live::DiffOutcome::Agree => 0,
        ptlab_live::DiffOutcome::Diverge => 1,
        ptlab_live::DiffOutcome::Partial => 3,
    })
}

/// Run one scenario; `Ok(passed)`.
fn run(args: &RunArgs) -> Result<bool> {
    scenario::apply(&args.run_limits);
    let (_, _, script) = scenario::load(&args.file, &args.scenario.params)?;
    let mut cfg = args.memory.apply(model_config(
        args.arch.kind(),
        args.scenario.before(),
        &args.scenario.cpu_features,
    )?)?;
    cfg.after = args.scenario.after();
    if args.memory.memory.is_some() && args.backend == BackendKind::Live {
        anyhow::bail!(
            "--memory sets the modelled machine; the live kernel runs on this machine's memory"
        );
    }
    if args.memory.nodes.is_some() && args.backend == BackendKind::Live {
        anyhow::bail!(
            "--nodes sets the modelled machine; the live kernel runs on this machine's NUMA nodes"
        );
    }
    let opts = RunOptions {
        params: args.scenario.params.clone(),
        ..RunOptions::default()
    };
    let report = match args.backend {
        BackendKind::Model => run_on_model(&script, cfg, &opts, args.check_invariants).0,
        BackendKind::Live => run_live(&script, &opts, args.limits.limits())?,
    };
    let mut out = BufWriter::new(out::stdout());
    match args.format {
        Format::Text => print_text(&mut out, &report),
        Format::Json => print_json(&mut out, &report),
    }
    .and_then(|()| out.flush())
    .context("cannot write the report to stdout")?;
    Ok(report.passed())
}

/// Run a parsed scenario on the live kernel.
fn run_live(
    script: &ptlab_scenario::Script,
    opts: &RunOptions,
    limits: ptlab_live::LiveLimits,
) -> Result<RunReport> {
    if let Some(why) = ptlab_live::live_unavailable() {
        anyhow::bail!("cannot run on the live kernel: {why}");
    }
    if !ptlab_live::is_root() {
        errln!(
            "ptlab: note: not root: frame numbers, kpageflags and kpagecount are unreadable \
             (order, idx, AX, cnt and samefolio cannot hold), and THP knobs cannot change"
        );
    }
    let mut backend = ptlab_live::LiveBackend::with_limits(limits)?;
    let report = ptlab_scenario::run(script, &mut backend, opts);
    for n in backend.notes() {
        errln!("ptlab: note: {n}");
    }
    Ok(report)
}

/// Observations and failures interleaved in the order they happened.
enum Event<'a> {
    Observe(&'a ptlab_scenario::ObserveOutput),
    Failure(&'a ptlab_scenario::Failure),
}

fn events(report: &RunReport) -> Vec<(u64, Event<'_>)> {
    let mut ev: Vec<(u64, Event<'_>)> = report
        .outputs
        .iter()
        .map(|o| (o.seq, Event::Observe(o)))
        .chain(report.failures.iter().map(|f| (f.seq, Event::Failure(f))))
        .collect();
    ev.sort_by_key(|(seq, _)| *seq);
    ev
}

fn print_text(out: &mut impl Write, report: &RunReport) -> io::Result<()> {
    for (_, event) in events(report) {
        match event {
            Event::Observe(o) => {
                writeln!(out, "# observe at {}:{}", report.file, o.line)?;
                write!(out, "{}", o.render_text())?;
            }
            Event::Failure(f) => writeln!(out, "{f}")?,
        }
    }
    if report.suppressed_failures > 0 {
        writeln!(
            out,
            "... {} more failures not shown",
            report.suppressed_failures
        )?;
    }
    writeln!(out, "{}", report.summary())
}

fn print_json(out: &mut impl Write, report: &RunReport) -> io::Result<()> {
    for (_, event) in events(report) {
        let value = match event {
            Event::Observe(o) => o.to_json(),
            Event::Failure(f) => f.to_json(),
        };
        writeln!(out, "{value}")?;
    }
    let summary = serde_json::json!({
        "kind": "summary",
        "file": report.file,
        "passed": report.passed(),
        "failures": report.failure_count(),
        "expectations_passed": report.expectations_passed,
        "statements_executed": report.statements_executed,
        "aborted": report.aborted,
    });
    writeln!(out, "{summary}")
}

fn fuzz(args: &FuzzArgs) -> Result<u8> {
    use ptlab_live::fuzz::{FuzzEvent, FuzzOptions, Shard};
    use ptlab_live::DiffOutcome;
    use std::time::Duration;
    if !args.merge.is_empty() {
        return fuzz_merge(args);
    }
    if !args.model_only && args.show_case.is_none() {
        if let Some(why) = ptlab_live::live_unavailable() {
            anyhow::bail!(
                "cannot run on the live kernel: {why} (--model-only fuzzes the model alone)"
            );
        }
    }
    let mut weights = ptlab_live::fuzz::GenWeights::default();
    for w in &args.weight {
        weights.set_from(w).map_err(anyhow::Error::msg)?;
    }
    if let Some(case) = args.show_case {
        let Some(seed) = args.seed else {
            anyhow::bail!("--show-case needs the campaign's --seed");
        };
        let opts = FuzzOptions {
            seed,
            ops: args.ops as usize,
            arch: args.arch.kind(),
            weights,
            guide: !args.no_guide,
            model_only: args.model_only,
            epoch: args.epoch,
            ..FuzzOptions::default()
        };
        out!("{}", ptlab_live::fuzz::case_text(&opts, case));
        return Ok(0);
    }
    let seed = args.seed.unwrap_or_else(ptlab_live::fuzz::time_seed);
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    let results_name = ptlab_live::fuzz::results_file_name(seed, shard);
    let jobs = match args.jobs {
        // The model's cases are planned one after the other anyway.
        _ if args.model_only => 1,
        Jobs::Auto => ptlab_live::fuzz::allowed_cpus().len().max(1),
        Jobs::N(n) => n,
    };
    // Checked before anything is created: too many jobs is a usage error.
    if jobs > 1 {
        ptlab_live::fuzz::cpus_for_jobs(jobs)?;
    }
    outpath::check_dir("--out", &args.out, &[&results_name])?;
    if !ptlab_live::is_root() && !args.model_only {
        errln!(
            "ptlab: note: not root: knob changes fail and frames are not compared; \
             fuzzing is of little use without root"
        );
    }
    let host = if cfg!(target_arch = "aarch64") {
        ArchKind::Arm64
    } else {
        ArchKind::X86_64
    };
    if args.arch.kind() != host && !args.model_only {
        errln!(
            "ptlab: note: the model is {} and the kernel {}: as in `ptlab diff --arch`, \
             what is compared (VMAs, folios, counters) does not depend on the page-table \
             format, so the cases run as usual",
            args.arch.kind().name(),
            host.name()
        );
    }
    let time = match (args.time, args.steps) {
        (Some(t), _) => Some(Duration::from_secs(t)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(60)),
    };
    let results = args.out.join(&results_name);
    let opts = FuzzOptions {
        seed,
        cases: args.steps,
        time,
        ops: args.ops as usize,
        out_dir: args.out.clone(),
        limits: args.limits.limits(),
        arch: args.arch.kind(),
        jobs,
        shard,
        epoch: args.epoch,
        results: Some(results.clone()),
        weights: weights.clone(),
        guide: !args.no_guide,
        model_only: args.model_only,
        ..FuzzOptions::default()
    };
    let mut again = format!("ptlab fuzz --seed {seed}");
    if args.model_only {
        again.push_str(" --model-only");
    }
    for w in &args.weight {
        again.push_str(&format!(" --weight {w}"));
    }
    if args.no_guide {
        again.push_str(" --no-guide");
    }
    if args.epoch != 16 {
        again.push_str(&format!(" --epoch {}", args.epoch));
    }
    if let Some(n) = args.steps {
        again.push_str(&format!(" --steps {n}"));
    }
    if args.arch.kind() != ArchKind::X86_64 {
        again.push_str(&format!(" --arch {}", args.arch.kind().name()));
    }
    if shard != Shard::WHOLE {
        again.push_str(&format!(" --shard {shard}"));
    }
    errln!(
        "ptlab fuzz: seed {seed} (reproduce with: {again}); {jobs} job{}{}; results in {}",
        if jobs == 1 { "" } else { "s" },
        if shard == Shard::WHOLE {
            String::new()
        } else {
            format!(
                ", shard {shard} (cases ≡ {} mod {})",
                shard.index, shard.count
            )
        },
        results.display()
    );
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else if let Some(n) = args.steps {
        indicatif::ProgressBar::new(shard.cases(n).count() as u64)
    } else {
        indicatif::ProgressBar::new(time.map_or(0, |t| t.as_secs()))
    };
    let by_time = args.steps.is_none();
    bar.set_style(
        indicatif::ProgressStyle::with_template(if by_time {
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} s  {msg}"
        } else {
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} cases  {msg}"
        })
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = std::time::Instant::now();
    let (mut agree, mut diverge, mut partial) = (0u64, 0u64, 0u64);
    let rules_total = ptlab_model::core::rules::Rule::COUNT;
    let summary = ptlab_live::fuzz::fuzz(&opts, &mut |ev| match ev {
        FuzzEvent::Case { outcome, rules, .. } => {
            match outcome {
                DiffOutcome::Agree => agree += 1,
                DiffOutcome::Diverge => diverge += 1,
                DiffOutcome::Partial => partial += 1,
            }
            if by_time {
                bar.set_position(start.elapsed().as_secs());
            } else {
                bar.inc(1);
            }
            bar.set_message(format!(
                "{agree} agree, {diverge} diverge, {partial} partial; rules {rules}/{rules_total}"
            ));
        }
        FuzzEvent::Shrinking { case } => {
            bar.set_message(format!("case {case} diverged: shrinking ..."))
        }
        FuzzEvent::Found(f) => bar.println(format!(
            "{}divergence in case {}: {}\n  saved {}",
            if f.flaky { "flaky " } else { "" },
            f.case,
            f.summary,
            f.path.display()
        )),
        FuzzEvent::Error { case, message } => {
            bar.println(format!("case {case} could not run: {message}"))
        }
    })?;
    bar.finish_and_clear();
    let real = summary.divergences().count();
    if jobs > 1 && summary.cases > 0 && summary.exclusive == summary.cases {
        errln!(
            "ptlab fuzz: note: every case changed global state (THP knobs{}, swap or \
             MADV_COLLAPSE) and ran alone, so the {jobs} jobs took turns on the kernel; to run \
             more scenarios per hour, {}split the campaign over machines with --shard \
             (docs/live.md, \"Parallel jobs and shards\")",
            if args.epoch > 0 {
                " after the epoch's policy"
            } else {
                ""
            },
            if args.epoch > 0 {
                ""
            } else {
                "use knob epochs (--epoch 16) or "
            }
        );
    }
    let cov = &summary.coverage;
    let missed: Vec<&str> = cov.missed().map(|r| r.name()).collect();
    if args.format == FuzzFormat::Json {
        let merged = ptlab_live::fuzz::merge_files(std::slice::from_ref(&results))?;
        let mut j = merged.to_json();
        j["coverage"] = serde_json::json!({
            "rules": rules_total,
            "exercised": cov.hit(),
            "missed": missed,
        });
        outln!("{j}");
    } else {
        for f in &summary.findings {
            outln!("{}", f.report);
        }
        for (why, n) in &summary.partial_reasons {
            outln!("partial ({n}×): stopped early: {why}");
        }
        for (case, e) in &summary.errors {
            outln!("error in case {case}: {e}");
        }
        outln!(
            "rule coverage: {} of {} rules ({:.0}%) exercised by these cases on the model{}{}",
            cov.hit(),
            rules_total,
            100.0 * cov.hit() as f64 / rules_total as f64,
            if missed.is_empty() {
                ""
            } else {
                "; not exercised: "
            },
            missed.join(", ")
        );
        outln!(
            "fuzz seed {seed}{}: {} scenarios in {:.1} s ({:.2}/s, {} job{}{}): {} agree, {} \
             partial, {} divergent ({} flaky){} [operations: mmap munmap madvise(collapse) \
             read write thp{}{}{}{}{}{}]",
            if shard == Shard::WHOLE {
                String::new()
            } else {
                format!(" shard {shard}")
            },
            summary.cases,
            summary.elapsed.as_secs_f64(),
            summary.rate(),
            jobs,
            if jobs == 1 { "" } else { "s" },
            if summary.cpus.is_empty() {
                String::new()
            } else {
                format!(
                    " on CPUs {}",
                    summary
                        .cpus
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            },
            summary.agree,
            summary.partial,
            real,
            summary.findings.len() - real,
            if summary.errors.is_empty() {
                String::new()
            } else {
                format!(", {} error", summary.errors.len())
            },
            if summary.ops.fork { " fork exit" } else { "" },
            if summary.ops.mprotect {
                " mprotect"
            } else {
                ""
            },
            if summary.ops.mremap { " mremap" } else { "" },
            if summary.ops.uffd {
                " uffd(create/api/open/register/copy/zeropage/move/unregister)"
            } else {
                ""
            },
            if summary.ops.guard_lock_seal {
                " guard mlock munlock mseal prctl mmap-locked setrlimit capability"
            } else {
                ""
            },
            if summary.ops.swap {
                " swap(pageout cold)"
            } else {
                ""
            },
        );
    }
    if args.timings {
        if args.format == FuzzFormat::Json {
            errln!("{}", summary.render_timings().trim_end());
        } else {
            outln!("{}", summary.render_timings().trim_end());
        }
    }
    Ok(if !summary.errors.is_empty() {
        2
    } else if real > 0 {
        1
    } else {
        0
    })
}

/// `ptlab fuzz --merge FILE...`: one summary of results files.
fn fuzz_merge(args: &FuzzArgs) -> Result<u8> {
    let m = ptlab_live::fuzz::merge_files(&args.merge)?;
    match args.format {
        FuzzFormat::Json => outln!("{}", m.to_json()),
        FuzzFormat::Text => out!("{}", m.render_text()),
    }
    // A case that could not run hides whatever it would have found.
    let bad =
        m.count(ptlab_live::fuzz::Verdict::Divergent) + m.count(ptlab_live::fuzz::Verdict::Error);
    Ok(if bad > 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    /// clap's own consistency checks (duplicate short flags, conflicts
    /// naming unknown arguments, ...) over every subcommand.
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    fn fuzz_args(args: &[&str]) -> Result<super::FuzzArgs, String> {
        use clap::Parser;
        let mut v = vec!["ptlab", "fuzz"];
        v.extend_from_slice(args);
        match super::Cli::try_parse_from(v) {
            Ok(super::Cli {
                command: super::Command::Fuzz(a),
            }) => Ok(a),
            Ok(_) => Err("not fuzz".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn fuzz_jobs_shard_merge_and_arch_parse() {
        use super::Jobs;
        let a = fuzz_args(&[]).unwrap();
        assert_eq!(a.jobs, Jobs::N(1), "one job by default");
        assert!(a.shard.is_none() && a.merge.is_empty());
        assert_eq!(a.arch.kind(), ptlab_model::ArchKind::X86_64);
        assert_eq!(fuzz_args(&["--jobs", "auto"]).unwrap().jobs, Jobs::Auto);
        assert_eq!(fuzz_args(&["--jobs", "0"]).unwrap().jobs, Jobs::Auto);
        assert_eq!(fuzz_args(&["-j", "2"]).unwrap().jobs, Jobs::N(2));
        assert_eq!(a.epoch, 16, "knob epochs of 16 cases by default");
        assert_eq!(fuzz_args(&["--epoch", "0"]).unwrap().epoch, 0);
        assert!(fuzz_args(&["--epoch", "x"]).is_err());
        assert!(fuzz_args(&["--jobs", "two"])
            .err()
            .unwrap()
            .contains("`auto`"));
        let sh = fuzz_args(&["--shard", "3/8"]).unwrap().shard.unwrap();
        assert_eq!((sh.index, sh.count), (3, 8));
        for bad in ["8/8", "1", "x/2", "1/0"] {
            assert!(fuzz_args(&["--shard", bad]).is_err(), "{bad}");
        }
        for (arch, want) in [
            ("arm64", ptlab_model::ArchKind::Arm64),
            ("aarch64", ptlab_model::ArchKind::Arm64),
            ("x86-64", ptlab_model::ArchKind::X86_64),
            ("amd64", ptlab_model::ArchKind::X86_64),
        ] {
            assert_eq!(fuzz_args(&["--arch", arch]).unwrap().arch.kind(), want);
        }
        assert!(fuzz_args(&["--arch", "sparc"]).is_err());
        let m = fuzz_args(&["--merge", "a.jsonl", "b.jsonl", "--format", "json"]).unwrap();
        assert_eq!(m.merge.len(), 2);
        assert!(m.format == super::FuzzFormat::Json);
        // Merging runs nothing: campaign options make no sense with it.
        for extra in [
            &["--seed", "1"][..],
            &["--jobs", "2"],
            &["--shard", "0/2"],
            &["--arch", "arm64"],
            &["--steps", "5"],
            &["-o", "d"],
        ] {
            let mut v = vec!["--merge", "a.jsonl"];
            v.extend_from_slice(extra);
            let e = fuzz_args(&v).err().unwrap();
            assert!(e.contains("cannot be used with"), "{extra:?}: {e}");
        }
    }
}
