//! `ptlab coverage`: which of the model's kernel rules a set of scenarios
//! exercises (docs/coverage.md). Every scenario runs on the model of each
//! architecture, once as written and once with every seed change switched
//! back to the kernel's previous algorithm (`--before` all five), so that
//! the rules of both sides of each switch can be reached.

use crate::Arch;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ptlab_model::core::rules::{Coverage, Rule};
use ptlab_model::{ArchKind, Before, ModelConfig};
use ptlab_scenario::{ModelBackend, RunOptions, Script};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

pub const COVERAGE_HELP: &str = "\
Examples:
  ptlab coverage                                   # the shipped scenarios
  ptlab coverage tests/scenarios/cov-05-uffd-move-huge-zero-shared.ptl
  ptlab coverage --arch arm64 --before shipped tests/scenarios
  ptlab coverage --missed                          # only what nothing exercises
  ptlab coverage --format json | jq '.missed'

Every kernel rule the model implements (an errno check in the kernel's order,
or a branch between algorithms: a batched PTE move, a whole-table move, a PMD
split, a contpte fold...) is listed once in crates/ptlab-model/src/core/rules.rs
with the kernel function it mirrors, and counted each time a scenario takes
it. This command runs each scenario on the model and prints, per rule, how
often it was taken and by which scenarios, then the rules nothing exercised.

Without FILES it reads the shipped scenarios: tests/scenarios, scenarios
(examples and seed workloads), docs/examples and docs/divergence-cases,
relative to the current directory (the repository root). A directory is
searched for .ptl files. Each scenario runs on both architectures (--arch
picks one) and twice: as written, and with all five seed changes switched
back to the previous algorithm (as `--before NAME` does for each NAME), which
reaches the per-PTE paths; --before shipped|all picks one of the two. Big
scenarios run smaller: a `param size` above 1G runs at 1G and a `param
iterations` above 2 at 2 (what a rule does does not depend on how often it
runs). Expectations that fail (normal with --before all: the scenarios state
6.18's behaviour) are counted, not errors.

`ptlab fuzz` reports the same coverage as it goes; docs/coverage.md lists the
rules nothing exercises and why.

Exit status: 0 = the table was printed, 2 = a file or directory cannot be
read or a scenario does not parse.";

#[derive(Args)]
pub struct CoverageArgs {
    /// Scenario files (.ptl) or directories searched for them (default: the
    /// shipped scenarios, see below)
    #[arg(value_name = "FILES|DIRS")]
    paths: Vec<PathBuf>,

    /// Run on one architecture only (default: both)
    #[arg(long, value_enum)]
    arch: Option<Arch>,

    /// Which algorithms: `shipped` runs each scenario as written (6.18's
    /// algorithms unless it says otherwise), `all` with every seed change
    /// switched back, `both` (the default) runs it each way
    #[arg(long, value_enum, default_value_t = BeforeRuns::Both)]
    before: BeforeRuns,

    /// Print only the rules no scenario exercised
    #[arg(long)]
    missed: bool,

    /// Output format: the table, or one JSON object
    /// ({rules, exercised, scenarios, runs, table: [{rule, family, kernel,
    /// hits, scenarios}], missed: [..]})
    #[arg(long, value_enum, default_value_t = CovFormat::Text)]
    format: CovFormat,

    /// No progress bar
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BeforeRuns {
    /// As written
    Shipped,
    /// With every seed change switched back (`--before` all five)
    All,
    /// Each way
    Both,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CovFormat {
    /// A table, the rules nothing exercised, and a summary line
    Text,
    /// One JSON object
    Json,
}

/// The directories read when no path is given.
pub const SHIPPED: [&str; 4] = [
    "tests/scenarios",
    "scenarios",
    "docs/examples",
    "docs/divergence-cases",
];

fn ptl_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read directory '{}'", dir.display()))?;
    for e in entries {
        let p = e
            .with_context(|| format!("cannot read directory '{}'", dir.display()))?
            .path();
        if p.is_dir() {
            ptl_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "ptl") {
            out.push(p);
        }
    }
    Ok(())
}

/// The scenario files named by `paths` (files as given, directories
/// searched), or the shipped ones; sorted, without duplicates.
fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if paths.is_empty() {
        let dirs: Vec<&Path> = SHIPPED
            .iter()
            .map(Path::new)
            .filter(|d| d.is_dir())
            .collect();
        if dirs.is_empty() {
            bail!(
                "no FILES given and none of the shipped scenario directories ({}) is here: run \
                 from the repository root or name scenario files or directories",
                SHIPPED.join(", ")
            );
        }
        for d in dirs {
            ptl_files(d, &mut out)?;
        }
    } else {
        for p in paths {
            let meta =
                std::fs::metadata(p).with_context(|| format!("cannot read '{}'", p.display()))?;
            if meta.is_dir() {
                ptl_files(p, &mut out)?;
            } else {
                out.push(p.clone());
            }
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        bail!("no .ptl scenario found in {:?}", paths);
    }
    Ok(out)
}

/// `--param` values that keep a big scenario small: `size` above 1G runs at
/// 1G, `iterations` above 2 at 2.
pub fn small_params(script: &Script) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for (name, _, default) in script.params() {
        let Ok(n) = ptlab_scenario::parse_param_value(&default) else {
            continue;
        };
        if name == "size" && n > 1 << 30 {
            v.push((name, "1G".to_string()));
        } else if name == "iterations" && n > 2 {
            v.push((name, "2".to_string()));
        }
    }
    v
}

/// One run of one scenario.
struct RunOutcome {
    coverage: Coverage,
    failed: bool,
}

fn run_one(script: &Script, arch: ArchKind, before: Before) -> RunOutcome {
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    // The switched run takes the other side of every switch: the seed
    // changes back, and the proposed (post-6.18) changes on.
    if !before.is_empty() {
        cfg.after = ptlab_model::After::all();
    }
    let mut backend = ModelBackend::new(cfg);
    let opts = RunOptions {
        params: small_params(script),
        ..RunOptions::default()
    };
    let report = ptlab_scenario::run(script, &mut backend, &opts);
    RunOutcome {
        coverage: backend.model().coverage(),
        failed: !report.passed(),
    }
}

/// Coverage of a set of scenarios: the total, and per rule which scenarios hit it.
pub struct Report {
    pub total: Coverage,
    /// Per rule index, the scenarios (display names) that hit it.
    pub by: Vec<Vec<String>>,
    pub scenarios: usize,
    pub runs: usize,
    pub failed_runs: usize,
}

pub fn coverage(args: &CoverageArgs) -> Result<u8> {
    let files = files(&args.paths)?;
    let mut scripts = Vec::new();
    for f in &files {
        let (name, _, script) = crate::scenario::load(f, &[])?;
        scripts.push((name, script));
    }
    let arches: Vec<ArchKind> = match args.arch {
        Some(a) => vec![a.kind()],
        None => ArchKind::ALL.to_vec(),
    };
    let befores: Vec<Before> = match args.before {
        BeforeRuns::Shipped => vec![Before::empty()],
        BeforeRuns::All => vec![Before::all()],
        BeforeRuns::Both => vec![Before::empty(), Before::all()],
    };
    let runs = scripts.len() * arches.len() * befores.len();
    let bar = if args.quiet || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(runs as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    };
    let mut rep = Report {
        total: Coverage::default(),
        by: vec![Vec::new(); Rule::COUNT],
        scenarios: scripts.len(),
        runs,
        failed_runs: 0,
    };
    for (name, script) in &scripts {
        bar.set_message(name.clone());
        let mut mine = Coverage::default();
        for &arch in &arches {
            for &before in &befores {
                let r = run_one(script, arch, before);
                mine.add(&r.coverage);
                rep.failed_runs += usize::from(r.failed);
                bar.inc(1);
            }
        }
        for &r in Rule::ALL {
            if mine.get(r) > 0 {
                rep.by[r as usize].push(name.clone());
            }
        }
        rep.total.add(&mine);
        bar.set_message(format!("{} of {} rules", rep.total.hit(), Rule::COUNT));
    }
    bar.finish_and_clear();
    match args.format {
        CovFormat::Json => {
            outln!("{}", serde_json::to_string_pretty(&to_json(&rep))?);
        }
        CovFormat::Text => print_text(&rep, args.missed),
    }
    Ok(0)
}

fn to_json(rep: &Report) -> serde_json::Value {
    let table: Vec<serde_json::Value> = Rule::ALL
        .iter()
        .map(|&r| {
            let i = r.info();
            serde_json::json!({
                "rule": i.name,
                "family": i.family.name(),
                "kernel": i.kernel,
                "seed_switch": i.seed_switch,
                "hits": rep.total.get(r),
                "scenarios": rep.by[r as usize],
            })
        })
        .collect();
    let missed: Vec<&str> = rep.total.missed().map(|r| r.name()).collect();
    serde_json::json!({
        "rules": Rule::COUNT,
        "exercised": rep.total.hit(),
        "scenarios": rep.scenarios,
        "runs": rep.runs,
        "runs_with_failed_expectations": rep.failed_runs,
        "table": table,
        "missed": missed,
    })
}

fn scenarios_cell(names: &[String]) -> String {
    const SHOWN: usize = 2;
    let short: Vec<&str> = names
        .iter()
        .take(SHOWN)
        .map(|n| n.rsplit('/').next().unwrap_or(n))
        .collect();
    let mut s = format!("{:>3}  {}", names.len(), short.join(", "));
    if names.len() > SHOWN {
        s.push_str(&format!(", +{}", names.len() - SHOWN));
    }
    s
}

fn print_text(rep: &Report, missed_only: bool) {
    let width = Rule::ALL.iter().map(|r| r.name().len()).max().unwrap_or(10);
    if !missed_only {
        outln!("{:<width$}  {:>9}  scenarios", "rule", "hits");
        for &r in Rule::ALL {
            let n = rep.total.get(r);
            if n == 0 {
                continue;
            }
            outln!(
                "{:<width$}  {:>9}  {}",
                r.name(),
                n,
                scenarios_cell(&rep.by[r as usize])
            );
        }
        outln!();
    }
    let missed: Vec<Rule> = rep.total.missed().collect();
    if missed.is_empty() {
        outln!("every rule was exercised");
    } else {
        outln!("not exercised ({}):", missed.len());
        for r in &missed {
            let i = r.info();
            outln!(
                "  {:<width$}  {}{}",
                i.name,
                i.kernel,
                if i.seed_switch { "  (seed switch)" } else { "" }
            );
        }
        outln!("(docs/coverage.md says why each rule the shipped scenarios miss is out of reach)");
    }
    outln!();
    outln!(
        "coverage: {} of {} rules ({:.0}%) exercised by {} scenarios in {} runs{}",
        rep.total.hit(),
        Rule::COUNT,
        100.0 * rep.total.hit() as f64 / Rule::COUNT as f64,
        rep.scenarios,
        rep.runs,
        if rep.failed_runs > 0 {
            format!(
                " ({} runs had failing expectations, counted anyway)",
                rep.failed_runs
            )
        } else {
            String::new()
        }
    );
}
