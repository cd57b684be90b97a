//! `ptlab show`: run a scenario and draw the state at one step as a
//! self-contained HTML page (see docs/show.md). The drawing is
//! `ptlab-show`; this file picks the backend and the step and writes the
//! page.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ptlab_model::ModelConfig;
use ptlab_scenario::Backend as _;
use ptlab_show::capture::{self, ModelTarget, Target};
use ptlab_show::{Panel, Picture, RenderOptions, Snapshot, StepSel};
use std::path::PathBuf;

pub const SHOW_HELP: &str = "\
Examples:
  ptlab show scenarios/examples/basic.ptl -o basic.html
  ptlab show --list-steps tests/scenarios/ff-s08-fork-mthp.ptl
  ptlab show --step 6 --before-after tests/scenarios/ff-s08-fork-mthp.ptl -o fork.html
  ptlab show --line 11 --before-after --arch arm64 FILE -o cow.html
  sudo ptlab show --backend live FILE -o live.html

Steps: step N is the N-th statement executed (as `statements_executed` counts
them: every statement line each time it runs, loop bodies once per iteration;
`repeat` headers do not count). The picture shows the state after step N;
with --before-after, the state before step N (after step N-1) beside it, with
the entries the step changed outlined in red. Without --step or --line: on
the model, the step with the most state (resident memory, then VMAs, then
mapped entries; the latest such step), with its batches and TLB
invalidations; on the live kernel, and with --last, the state after the last
statement. --list-steps prints the numbered statements.

The page has one column per process (after a fork, parent and child side by
side): VMAs as bands with their flags, the page-table tree with empty and
uniform parts collapsed, every PTE coloured by folio, shared and
write-protected entries marked, arm64 contiguous blocks outlined.
--backend live draws what /proc shows (no page-table pages or descriptor bits).

Exit status: 0 = page written, 2 = usage, I/O or parse error, or the step was
not reached.";

#[derive(Args)]
pub struct ShowArgs {
    /// The scenario file (.ptl)
    file: PathBuf,

    /// Where to write the HTML page (checked before the run; missing
    /// directories are created)
    #[arg(
        short,
        long,
        value_name = "FILE",
        required_unless_present = "list_steps"
    )]
    out: Option<PathBuf>,

    /// Picture the state after step N (the N-th executed statement; 0 = before the first)
    #[arg(long, value_name = "N", conflicts_with = "line")]
    step: Option<u64>,

    /// Picture the state after the first execution of the statement on line L
    #[arg(long, value_name = "L")]
    line: Option<u32>,

    /// Picture the state after the last statement (the default on the
    /// live kernel; on the model the default is the step with the most state)
    #[arg(long, conflicts_with_all = ["step", "line"])]
    last: bool,

    /// Show the state before the step beside the state after it
    #[arg(long)]
    before_after: bool,

    /// Architecture whose page-table format the model uses
    #[arg(long, value_enum, default_value_t = super::Arch::X86_64)]
    arch: super::Arch,

    /// Where to run: the model, or the live kernel (what /proc shows)
    #[arg(long, value_enum, default_value_t = ShowBackend::Model)]
    backend: ShowBackend,

    /// Run a seed change's previous algorithm (repeatable; see `ptlab run --help`)
    #[arg(long = "before", value_name = "NAME", value_parser = super::parse_before)]
    before: Vec<ptlab_model::Before>,

    /// Set a `param NAME = DEFAULT` of the scenario (repeatable), as for
    /// `ptlab run`
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = super::parse_param)]
    params: Vec<(String, String)>,

    /// PTE tables drawn entry by entry at most (later ones become one-line strips)
    #[arg(long, value_name = "N", default_value_t = 24)]
    grid_budget: usize,

    /// Print the numbered statements of the run and exit
    #[arg(long)]
    list_steps: bool,

    #[command(flatten)]
    memory: crate::MemoryArg,

    #[command(flatten)]
    run_limits: crate::scenario::RunLimitArgs,
    #[command(flatten)]
    limits: super::limits::LimitArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ShowBackend {
    /// The executable model (page tables visible)
    Model,
    /// The running kernel (only what /proc shows)
    Live,
}

/// The live kernel as a capture target: every process observed through /proc.
struct LiveTarget(ptlab_live::LiveBackend);

impl Target for LiveTarget {
    type B = ptlab_live::LiveBackend;
    fn backend(&mut self) -> &mut Self::B {
        &mut self.0
    }
    fn backend_ref(&self) -> &Self::B {
        &self.0
    }
    fn forked(&mut self, _parent: &str, _child: &str) {}
    fn exited(&mut self, _proc: &str) {}
    fn snapshot(&mut self) -> std::result::Result<Snapshot, String> {
        let mut obs = Vec::new();
        for name in self.0.process_names() {
            obs.push(self.0.observe(&name).map_err(|e| e.to_string())?);
        }
        Ok(Snapshot::from_observations(&obs))
    }
}

/// How much state a snapshot holds: resident kB, VMAs, mapped entries.
fn state_size(s: &Snapshot) -> (u64, usize, u64) {
    s.procs.iter().fold((0, 0, 0), |(kb, v, e), p| {
        let (ptes, leaves) = p.counts();
        (kb + p.rss_kb(), v + p.vmas.len(), e + ptes + leaves)
    })
}

/// Most steps `busiest_step` pictures (evenly spread over longer runs).
const SCAN_STEPS: u64 = 400;

/// The step after which the model holds the most state (the latest of
/// equals), by running the scenario up to each step; None when the run
/// executes no statement.
fn busiest_step(
    script: &ptlab_scenario::Script,
    cfg: &ModelConfig,
    params: &[(String, String)],
) -> Result<Option<u64>> {
    let all = capture::capture_with_params(
        script,
        ModelTarget::new(cfg.clone()),
        StepSel::End,
        false,
        true,
        params,
    )
    .map_err(anyhow::Error::msg)?;
    let n = all.log.len() as u64;
    if n == 0 {
        return Ok(None);
    }
    let stride = n.div_ceil(SCAN_STEPS).max(1);
    let mut best: Option<(u64, (u64, usize, u64))> = None;
    let mut k = n;
    while k >= 1 {
        let size = if k == n {
            state_size(&all.after)
        } else {
            match capture::capture_with_params(
                script,
                ModelTarget::new(cfg.clone()),
                StepSel::Step(k),
                false,
                false,
                params,
            ) {
                Ok(c) => state_size(&c.after),
                Err(_) => (0, 0, 0),
            }
        };
        if best.is_none_or(|(_, b)| size > b) {
            best = Some((k, size));
        }
        if k <= stride {
            break;
        }
        k -= stride;
    }
    Ok(best.map(|(k, _)| k))
}

pub fn show(args: &ShowArgs) -> Result<u8> {
    if let (Some(out), false) = (&args.out, args.list_steps) {
        crate::outpath::check_file("-o", out)?;
    }
    crate::scenario::apply(&args.run_limits);
    let (_, _, script) = crate::scenario::load(&args.file, &args.params)?;
    let sel = match (args.step, args.line) {
        (Some(n), _) => StepSel::Step(n),
        (None, Some(l)) => StepSel::Line(l),
        (None, None) => StepSel::End,
    };
    if args.before_after && matches!(sel, StepSel::End | StepSel::Step(0)) {
        bail!("--before-after needs --step N (N >= 1) or --line L");
    }
    let sel = if args.list_steps { StepSel::End } else { sel };
    let mut cfg = args.memory.apply(ModelConfig::for_arch(args.arch.kind()))?;
    cfg.before = args
        .before
        .iter()
        .fold(ptlab_model::Before::empty(), |a, b| a | *b);
    // On the model, no step named: the step with the most state.
    let busiest =
        sel == StepSel::End && !args.last && !args.list_steps && args.backend == ShowBackend::Model;
    let sel = match busiest {
        true => busiest_step(&script, &cfg, &args.params)?.map_or(StepSel::End, StepSel::Step),
        false => sel,
    };
    let busiest = busiest && sel != StepSel::End;
    let (cap, backend_line) = match args.backend {
        ShowBackend::Model => {
            let cap = capture::capture_with_params(
                &script,
                ModelTarget::new(cfg),
                sel,
                args.before_after && !args.list_steps,
                args.list_steps,
                &args.params,
            )
            .map_err(anyhow::Error::msg)?;
            let c = (cap.before, cap.after, cap.info, cap.report, cap.log, cap.hw);
            (c, format!("model of {}", args.arch.kind().name()))
        }
        ShowBackend::Live => {
            if let Some(why) = ptlab_live::live_unavailable() {
                bail!("cannot run on the live kernel: {why}");
            }
            if !ptlab_live::is_root() {
                errln!(
                    "ptlab: note: not root: frames are unreadable, so folios cannot be told apart"
                );
            }
            let target = LiveTarget(ptlab_live::LiveBackend::with_limits(args.limits.limits())?);
            let cap = capture::capture_with_params(
                &script,
                target,
                sel,
                args.before_after && !args.list_steps,
                args.list_steps,
                &args.params,
            )
            .map_err(anyhow::Error::msg)?;
            let mut live = cap.target.0;
            for n in live.notes() {
                errln!("ptlab: note: {n}");
            }
            live.shutdown();
            (
                (cap.before, cap.after, cap.info, cap.report, cap.log, cap.hw),
                "live kernel (what /proc shows)".to_string(),
            )
        }
    };
    let (before, after, info, report, log, hw) = cap;
    if args.list_steps {
        for s in &log {
            outln!("{}", s.describe());
        }
        return Ok(0);
    }
    let Some(out) = &args.out else {
        bail!("-o OUT.html is required");
    };
    let step_text = info.as_ref().map(|i| i.describe()).unwrap_or_default();
    let panels = match (before, &info) {
        (Some(b), Some(i)) => {
            let (pb, pa) = Panel::before_after(
                b,
                after,
                (
                    &format!("Before step {}", i.step),
                    &format!("After step {}", i.step),
                ),
                &step_text,
            );
            vec![pb, pa]
        }
        (_, Some(i)) if busiest => vec![Panel::single(
            &format!(
                "After step {}: the step with the most state (--step N or --last for another)",
                i.step
            ),
            &step_text,
            after,
        )],
        (_, Some(i)) => vec![Panel::single(
            &format!("After step {}", i.step),
            &step_text,
            after,
        )],
        (_, None) if sel == StepSel::Step(0) => {
            vec![Panel::single("Before the first statement", "step 0", after)]
        }
        (_, None) => vec![Panel::single(
            "After the last statement",
            &format!("{} statements executed", report.statements_executed),
            after,
        )],
    };
    let mut notes: Vec<String> = report.failures.iter().map(|f| f.to_string()).collect();
    if let Some(w) = &hw {
        for ((proc, op), n) in &w.singles {
            notes.push(format!(
                "{proc}: {n} single-entry {op} step(s) (the per-PTE path; not outlined)"
            ));
        }
    }
    if report.suppressed_failures > 0 {
        notes.push(format!("... {} more failures", report.suppressed_failures));
    }
    let pic = Picture {
        title: format!("ptlab show: {}", args.file.display()),
        subtitle: vec![
            format!("Backend: {backend_line}"),
            format!(
                "Run: {}",
                if matches!(sel, StepSel::Step(_) | StepSel::Line(_)) {
                    format!("{} (up to the pictured step)", report.summary())
                } else {
                    report.summary()
                }
            ),
        ],
        panels,
        // The model's batches and TLB invalidations of the pictured step
        // (None on the live kernel, which cannot tell, and on the model
        // when no single step is pictured).
        events_unavailable: match (&hw, args.backend) {
            (Some(_), _) => None,
            (None, ShowBackend::Live) => None,
            (None, ShowBackend::Model) => Some(
                "Not shown: the model records the batches and TLB invalidations of one step, and this \
                 picture is not of one step. Pick one with --step N or --line L (--list-steps lists them)."
                    .to_string(),
            ),
        },
        events: hw.map(|w| w.events),
        notes,
    };
    let opts = RenderOptions {
        layout: ptlab_show::LayoutOptions {
            grid_budget: args.grid_budget,
            ..ptlab_show::LayoutOptions::default()
        },
    };
    let html = ptlab_show::render_html(&pic, &opts);
    std::fs::write(out, &html).with_context(|| format!("cannot write '{}'", out.display()))?;
    if !report.passed() {
        errln!(
            "ptlab: note: the run had {} failure(s); they are listed in the page",
            report.failure_count()
        );
    }
    errln!(
        "ptlab: wrote {} ({} KiB)",
        out.display(),
        html.len().div_ceil(1024)
    );
    Ok(0)
}
