//! `ptlab`: model and measure Linux anonymous-memory page-table operations.
//!
//! This binary is a thin shell over `ptlab-scenario`: it reads a scenario,
//! runs it on the model and prints the report. Exit status: 0 when every
//! expectation held, 1 when any failed (or the run hit a runtime error),
//! 2 for usage, I/O and parse errors.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use ptlab_model::{ArchKind, ModelConfig};
use ptlab_scenario::{ModelBackend, RunOptions, RunReport};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ptlab",
    version,
    about = "Model Linux 6.18 anonymous-memory page tables and check scenarios against the model",
    long_about = "ptlab runs .ptl scenarios: small scripts that mmap memory, touch it, flip THP knobs \
                  and state what maps, folios and page-table entries must look like afterwards. \
                  The scenario language is described in docs/language.md."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a .ptl scenario on the page-table model and check its expectations
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
}

const RUN_HELP: &str = "\
Examples:
  ptlab run scenarios/examples/basic.ptl
  ptlab run --arch arm64 scenarios/examples/basic.ptl
  ptlab run --format json --check-invariants my.ptl | jq .

A tiny scenario (save as demo.ptl):
  thp 64K always                  # allow 64 KiB mTHP everywhere
  p = mmap 256K                   # private anonymous, read-write
  let a = align_up(p, 64K)        # a 64 KiB-aligned address inside it
  write a                         # one write fault ...
  expect page a 64K anon folio=64K idx=0 samefolio   # ... maps a whole folio
  observe pages

The scenario language is described in docs/language.md.

Exit status: 0 = all expectations held, 1 = a failure (expectation, uncovered
syscall error or fault, invariant violation, runtime error), 2 = usage, I/O or
parse error.";

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

    /// Run a seed change's previous algorithm (repeatable): mremap-pte-batch,
    /// mremap-table-move, fork-pte-batch, mprotect-pte-batch, uffd-move-batch.
    /// Observable results are the same; hardware work differs. A `before`
    /// statement in the scenario replaces this set.
    #[arg(long = "before", value_name = "NAME", value_parser = parse_before)]
    before: Vec<ptlab_model::Before>,
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

#[derive(Clone, Copy, ValueEnum)]
enum Arch {
    #[value(name = "x86_64")]
    X86_64,
    #[value(name = "arm64")]
    Arm64,
}

impl Arch {
    fn kind(self) -> ArchKind {
        match self {
            Arch::X86_64 => ArchKind::X86_64,
            Arch::Arm64 => ArchKind::Arm64,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Observations and failures as text, then a PASS/FAIL summary
    Text,
    /// JSON lines: {"kind":"observe"|"failure"|"summary", ...}
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(args) => run(args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ptlab: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Run one scenario; `Ok(passed)`.
fn run(args: &RunArgs) -> Result<bool> {
    let source = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read scenario '{}'", args.file.display()))?;
    let name = args.file.display().to_string();
    let script = ptlab_scenario::parse(&name, &source)?;
    let mut cfg = ModelConfig::for_arch(args.arch.kind());
    cfg.before = args
        .before
        .iter()
        .fold(ptlab_model::Before::empty(), |a, b| a | *b);
    let mut backend = ModelBackend::new(cfg).check_every_statement(args.check_invariants);
    let report = ptlab_scenario::run(&script, &mut backend, &RunOptions::default());
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match args.format {
        Format::Text => print_text(&mut out, &report),
        Format::Json => print_json(&mut out, &report),
    }
    .and_then(|()| out.flush())
    .context("cannot write the report to stdout")?;
    Ok(report.passed())
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
