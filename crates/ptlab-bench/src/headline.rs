//! The headline of `ptlab reproduce`: one row per seed change with the
//! live effect on this machine, the model's prediction of the *same*
//! contrast on this machine's calibrated profile and on every arm64
//! profile, and whether live and predicted agree — plus the full table of
//! every live contrast next to its prediction, and the noise flags.
//!
//! Sign convention (the one every ptlab table uses): a % change is of the
//! time per operation, normalised so that **+ = faster** (less time) than
//! the reference — the arm against the change's baseline arm, or the
//! kernel after a change against before it (mmtests' pndiff).

use crate::report::{ChangeDef, Model, Reproduction, CHANGES};
use crate::stats::{t_critical, variance, welch, Summary};
use std::fmt::Write as _;

/// A row is flagged as noisy when either arm's coefficient of variation
/// exceeds this ...
pub const MAX_CV: f64 = 0.10;
/// ... or either arm has fewer samples than this.
pub const MIN_N: usize = 5;
/// A predicted change smaller than this (in %) counts as "no change" when
/// comparing directions.
pub const FLAT_PCT: f64 = 5.0;

/// The live effect of one arm against its change's baseline arm.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveEffect {
    /// % change of the mean, + = faster than the baseline.
    pub pct: f64,
    /// 95% interval of `pct` (Welch interval of the difference of means,
    /// relative to the baseline mean); None when it cannot be computed.
    pub ci: Option<(f64, f64)>,
    /// Welch's two-sided p.
    pub p: Option<f64>,
    /// Samples in the baseline and in the arm.
    pub n: (usize, usize),
    /// Coefficients of variation of the baseline and of the arm.
    pub cv: (f64, f64),
}

impl LiveEffect {
    pub fn significant(&self) -> bool {
        self.p.is_some_and(|p| p < 0.05)
    }

    /// Why this row is only indicative (empty when it is not).
    pub fn noise(&self) -> Vec<String> {
        let mut why = Vec::new();
        let n = self.n.0.min(self.n.1);
        if n < MIN_N {
            why.push(format!("n = {n} < {MIN_N}"));
        }
        let cv = self.cv.0.max(self.cv.1);
        if cv > MAX_CV {
            why.push(format!("CV {:.0}% > {:.0}%", cv * 100.0, MAX_CV * 100.0));
        }
        why
    }

    /// `+26.2% [+12.0, +40.3]`.
    pub fn text(&self) -> String {
        match self.ci {
            Some((lo, hi)) => format!("{:+.1}% [{lo:+.1}, {hi:+.1}]", self.pct),
            None => format!("{:+.1}% [no interval]", self.pct),
        }
    }

    /// Compute it from the two arms' samples (lower is better).
    pub fn of(base: &[f64], arm: &[f64]) -> Option<LiveEffect> {
        let b = Summary::of(base)?;
        let a = Summary::of(arm)?;
        let pct = crate::compare::pct_better(b.mean, a.mean, crate::result::Better::Lower);
        let w = welch(base, arm);
        let ci = match (w, variance(base), variance(arm)) {
            (Some(w), Some(vb), Some(va)) => {
                let se = (vb / b.n as f64 + va / a.n as f64).sqrt();
                let half = t_critical(0.95, w.dof) * se / b.mean * 100.0;
                half.is_finite().then_some((pct - half, pct + half))
            }
            _ => None,
        };
        Some(LiveEffect {
            pct,
            ci,
            p: w.map(|w| w.p),
            n: (b.n, a.n),
            cv: (b.cv(), a.cv()),
        })
    }
}

/// A model prediction of a % change on one profile.
#[derive(Clone, Debug, PartialEq)]
pub struct Predicted {
    pub profile: String,
    pub arch: String,
    /// + = faster.
    pub pct: f64,
    /// `pct` with every price in its range (low, high), when known.
    pub range: Option<(f64, f64)>,
}

/// Live against predicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The prediction lies inside the live 95% interval.
    Agree,
    /// Outside the interval, but both say faster (or both slower, or both
    /// no change).
    SameDirection,
    Disagree,
    /// No live measurement or no prediction for this machine.
    Unknown,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Agree => "agree",
            Verdict::SameDirection => "same direction",
            Verdict::Disagree => "DISAGREE",
            Verdict::Unknown => "—",
        }
    }
}

/// -1, 0 or +1.
fn direction_live(l: &LiveEffect) -> i8 {
    if !l.significant() {
        0
    } else if l.pct > 0.0 {
        1
    } else {
        -1
    }
}

fn direction_pred(pct: f64) -> i8 {
    if pct.abs() < FLAT_PCT {
        0
    } else if pct > 0.0 {
        1
    } else {
        -1
    }
}

/// Compare a live effect with a prediction of the same contrast.
pub fn verdict(live: Option<&LiveEffect>, pred: Option<f64>) -> Verdict {
    let (Some(l), Some(p)) = (live, pred) else {
        return Verdict::Unknown;
    };
    if l.ci.is_some_and(|(lo, hi)| lo <= p && p <= hi) {
        Verdict::Agree
    } else if direction_live(l) == direction_pred(p) {
        Verdict::SameDirection
    } else {
        Verdict::Disagree
    }
}

/// One contrast: an arm against its change's baseline arm.
#[derive(Clone, Debug)]
pub struct Contrast {
    pub change: &'static ChangeDef,
    pub base: &'static str,
    pub arm: &'static str,
    pub live: Option<LiveEffect>,
    /// The model's prediction of the same contrast (both arms with the
    /// kernel's current algorithm), per profile.
    pub predicted: Vec<Predicted>,
    /// The change's own effect on this arm per the model (the switch's
    /// before → after), per profile.
    pub change_effect: Vec<Predicted>,
}

impl Contrast {
    /// The prediction on the profile calibrated for this machine.
    pub fn local(&self) -> Option<&Predicted> {
        self.predicted.iter().find(|p| p.profile == LOCAL)
    }

    pub fn verdict(&self) -> Verdict {
        verdict(self.live.as_ref(), self.local().map(|p| p.pct))
    }

    /// `64k vs 4k`-style short name of the contrast.
    pub fn name(&self) -> String {
        format!(
            "{} vs {}",
            crate::report::arm_short(self.change, self.arm),
            crate::report::arm_short(self.change, self.base)
        )
    }
}

/// The name of the profile `ptlab reproduce` calibrates for this machine.
pub const LOCAL: &str = "local";

/// Every contrast of every change (baseline arm against each other arm).
pub fn contrasts(r: &Reproduction) -> Vec<Contrast> {
    let mut out = Vec::new();
    for ch in CHANGES {
        let base = ch.arms[0];
        let rows = r.model_rows(ch);
        let profiles = crate::report::profiles_of(&rows);
        for arm in &ch.arms[1..] {
            let live = match (r.case(base), r.case(arm)) {
                (Some(b), Some(a)) => LiveEffect::of(&b.samples, &a.samples),
                _ => None,
            };
            let mut predicted = Vec::new();
            let mut change_effect = Vec::new();
            for (p, arch) in &profiles {
                let (Some(b), Some(a)) = (
                    crate::report::model_row(&rows, base, p),
                    crate::report::model_row(&rows, arm, p),
                ) else {
                    continue;
                };
                predicted.push(Predicted {
                    profile: p.to_string(),
                    arch: arch.to_string(),
                    pct: crate::compare::pct_better(
                        ch.current_ns(b),
                        ch.current_ns(a),
                        crate::result::Better::Lower,
                    ),
                    // + = faster: a ratio r of arm to base is (1 - r) × 100 %.
                    range: a
                        .vs_base
                        .map(|(lo, hi)| ((1.0 - hi) * 100.0, (1.0 - lo) * 100.0)),
                });
                change_effect.push(Predicted {
                    profile: p.to_string(),
                    arch: arch.to_string(),
                    pct: a.pct_better(),
                    range: None,
                });
            }
            out.push(Contrast {
                change: ch,
                base,
                arm,
                live,
                predicted,
                change_effect,
            });
        }
    }
    out
}

/// The headline contrast of each change: its last arm (the largest folios,
/// the aligned move, UFFDIO_MOVE) against its baseline.
pub fn headline(r: &Reproduction) -> Vec<Contrast> {
    contrasts(r)
        .into_iter()
        .filter(|c| c.change.arms.last() == Some(&c.arm))
        .collect()
}

/// arm64 profiles among the model rows, in their order.
fn arm64_profiles(r: &Reproduction) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    if let Model::Rows { rows, .. } = &r.model {
        for m in rows {
            if m.arch == "arm64" && !v.contains(&m.profile) {
                v.push(m.profile.clone());
            }
        }
    }
    v
}

/// Every profile among the model rows, the local one first.
fn all_profiles(r: &Reproduction) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    if let Model::Rows { rows, .. } = &r.model {
        if rows.iter().any(|m| m.profile == LOCAL) {
            v.push(LOCAL.into());
        }
        for m in rows {
            if !v.contains(&m.profile) {
                v.push(m.profile.clone());
            }
        }
    }
    v
}

/// `+12.3% [+9.0, +15.1]`: the prediction and, when known, its interval
/// over the profile's price ranges.
fn pred_cell(ps: &[Predicted], profile: &str) -> String {
    ps.iter()
        .find(|p| p.profile == profile)
        .map_or("—".into(), |p| match p.range {
            Some((lo, hi)) => format!("{:+.1}% [{lo:+.1}, {hi:+.1}]", p.pct),
            None => format!("{:+.1}%", p.pct),
        })
}

/// The live cell of a contrast: `+26.2% [+12.0, +40.3] significant`.
pub fn live_cell(c: &Contrast) -> String {
    match &c.live {
        None => "not measured".into(),
        Some(l) => format!(
            "{} {}",
            l.text(),
            if l.significant() {
                "significant"
            } else {
                "not significant"
            }
        ),
    }
}

/// `indicative only (n = 3 < 5, CV 60% > 10%)` or empty.
pub fn noise_cell(c: &Contrast) -> String {
    match &c.live {
        Some(l) if !l.noise().is_empty() => {
            format!("indicative only ({})", l.noise().join(", "))
        }
        _ => String::new(),
    }
}

/// The command that gets a firm answer, when some rows are noisy.
pub fn firm_command(r: &Reproduction) -> String {
    if r.quick {
        "target/release/ptlab reproduce   (as root, without --quick: 5-8 runs per arm at full size, about 3 minutes)".into()
    } else {
        "target/release/ptlab reproduce --runs 16   (as root, on a quiet machine: twice the runs, about 6 minutes)".into()
    }
}

/// Why the local column is empty, when it is (no profile calibrated for
/// this machine among the model rows).
pub fn local_missing(r: &Reproduction) -> Option<String> {
    match &r.model {
        Model::Rows { rows, .. } if !rows.iter().any(|m| m.profile == LOCAL) => Some(
            "No cost profile calibrated for this machine, so the local column and the live-vs-model \
             verdict are empty: a live run (as root) calibrates one; `ptlab calibrate --out FILE` and \
             `--profile FILE` add one to a re-rendered report"
                .into(),
        ),
        _ => None,
    }
}

/// What `--quick` trades away.
pub const QUICK_TRADE: &str = "--quick trades precision for time: 3 measured runs per arm instead of 5-8 \
(so every row is indicative only), regions of 256 MiB instead of 1 GiB (a 32 MiB heap instead of 256 MiB \
for uffd) and fewer operations per run, and a quick calibration of the local profile. It shows that \
everything works, not how large the effects are";

/// A Markdown table, also readable on a terminal.
pub(crate) fn table(head: &[String], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", head.join(" | "));
    let _ = writeln!(s, "|{}", "---|".repeat(head.len()));
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

/// Rows of the headline table (shared by Markdown, terminal and HTML).
pub fn headline_table(r: &Reproduction) -> (Vec<String>, Vec<Vec<String>>) {
    let arm64 = arm64_profiles(r);
    let mut head: Vec<String> = [
        "#",
        "change (switch, kernel)",
        "contrast (live)",
        "live on this machine (95% CI)",
        "model, local profile",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for p in &arm64 {
        head.push(format!("model, {p} (arm64)"));
    }
    head.push("live vs model".into());
    head.push("noise".into());
    let rows = headline(r)
        .iter()
        .map(|c| {
            let mut row = vec![
                c.change.seed.to_string(),
                format!(
                    "{} `{}` ({})",
                    c.change.short,
                    c.change.switch,
                    if c.change.proposed {
                        "proposed"
                    } else {
                        c.change.kernel
                    }
                ),
                c.name(),
                live_cell(c),
                pred_cell(&c.predicted, LOCAL),
            ];
            for p in &arm64 {
                row.push(pred_cell(&c.predicted, p));
            }
            row.push(c.verdict().text().into());
            row.push(noise_cell(c));
            row
        })
        .collect();
    (head, rows)
}

/// Rows of the table of every contrast, live next to its prediction on
/// every profile (docs/bench.md's hand-made table, generated).
pub fn contrast_table(r: &Reproduction) -> (Vec<String>, Vec<Vec<String>>) {
    let profiles = all_profiles(r);
    let mut head: Vec<String> = ["change", "contrast", "live (95% CI)"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for p in &profiles {
        head.push(format!("model {p}"));
    }
    head.push("live vs local".into());
    let rows = contrasts(r)
        .iter()
        .map(|c| {
            let mut row = vec![
                format!("{} `{}`", c.change.seed, c.change.switch),
                c.name(),
                live_cell(c),
            ];
            for p in &profiles {
                row.push(pred_cell(&c.predicted, p));
            }
            row.push(c.verdict().text().into());
            row
        })
        .collect();
    (head, rows)
}

/// Rows of the table of what each change buys per the model: the switch's
/// before → after on the headline arm, per profile.
pub fn effect_table(r: &Reproduction) -> (Vec<String>, Vec<Vec<String>>) {
    let profiles = all_profiles(r);
    let mut head: Vec<String> = ["change", "arm"].iter().map(|s| s.to_string()).collect();
    for p in &profiles {
        head.push(p.clone());
    }
    let rows = headline(r)
        .iter()
        .map(|c| {
            let mut row = vec![
                format!("{} `{}`", c.change.seed, c.change.switch),
                c.arm.to_string(),
            ];
            for p in &profiles {
                row.push(pred_cell(&c.change_effect, p));
            }
            row
        })
        .collect();
    (head, rows)
}

/// The noise summary: which headline rows are indicative only, and the
/// command for a firm answer. Empty when none is.
pub fn noise_summary(r: &Reproduction) -> String {
    let rows = headline(r);
    let noisy: Vec<String> = rows
        .iter()
        .filter(|c| !noise_cell(c).is_empty())
        .map(|c| c.change.seed.to_string())
        .collect();
    if noisy.is_empty() {
        return String::new();
    }
    format!(
        "Indicative only: {} of {} rows (change {}) rest on fewer than {MIN_N} runs per arm or on a \
         coefficient of variation above {:.0}%. For a firm answer run: {}",
        noisy.len(),
        rows.len(),
        noisy.join(", "),
        MAX_CV * 100.0,
        firm_command(r)
    )
}

/// One contrast as JSON.
fn contrast_json(c: &Contrast) -> serde_json::Value {
    let preds = |ps: &[Predicted]| {
        ps.iter()
            .map(|p| {
                serde_json::json!({
                    "profile": p.profile,
                    "arch": p.arch,
                    "pct": p.pct,
                    "range": p.range.map(|(a, b)| [a, b]),
                })
            })
            .collect::<Vec<_>>()
    };
    serde_json::json!({
        "seed": c.change.seed,
        "switch": c.change.switch,
        "kernel": c.change.kernel,
        "base": c.base,
        "arm": c.arm,
        "live": c.live.as_ref().map(|l| serde_json::json!({
            "pct": l.pct,
            "ci95": l.ci.map(|(a, b)| [a, b]),
            "p": l.p,
            "significant": l.significant(),
            "n": [l.n.0, l.n.1],
            "cv": [l.cv.0, l.cv.1],
            "indicative_only": !l.noise().is_empty(),
            "noise": l.noise(),
        })),
        "predicted": preds(&c.predicted),
        "change_effect": preds(&c.change_effect),
        "verdict": c.verdict().text(),
    })
}

/// The headline and every contrast as one JSON object (`ptlab reproduce
/// --format json`); percentages + = faster.
pub fn json(r: &Reproduction) -> serde_json::Value {
    serde_json::json!({
        "headline": headline(r).iter().map(contrast_json).collect::<Vec<_>>(),
        "contrasts": contrasts(r).iter().map(contrast_json).collect::<Vec<_>>(),
        "quick": r.quick,
        "noise": noise_summary(r),
        "skipped": r.skipped,
    })
}

pub const LEGEND: &str = "% = change of the time per operation, + = faster (the arm than the baseline arm; \
after the change than before it); [a, b] = 95% confidence interval; significant = Welch's t-test p < 0.05. \
This kernel already has all five changes, so the live columns contrast layouts or arms on one kernel \
(e.g. 64 KiB folios vs 4 KiB pages); the model columns predict that same contrast. \
\"agree\" = the local prediction lies in the live interval; \"same direction\" = both faster, both slower or \
both unchanged (|prediction| < 5%, live not significant).";

/// How the live arms were interleaved (`--rounds`), for under the
/// headline; None when every arm ran once with all its runs.
pub fn schedule_line(schedule: &[crate::result::Slice]) -> Option<String> {
    let rounds = schedule.iter().map(|x| x.round + 1).max()?;
    let first: Vec<&str> = schedule
        .iter()
        .filter(|x| x.round == 0)
        .map(|x| x.case.as_str())
        .collect();
    Some(format!(
        "The live arms ran interleaved over {rounds} rounds, {} slices in all (each slice a child \
         of its own with its own warm-up; every round one slice of each arm, every other round in \
         reverse order; round 1: {}; the whole order is `environment.schedule` in live.json).",
        schedule.len(),
        first.join(", ")
    ))
}

/// The headline as Markdown (`report.md`, and the start of the terminal
/// output).
pub fn markdown(r: &Reproduction) -> String {
    let mut s = String::from("# ptlab reproduce: the five seed changes\n\n");
    if let Some(l) = &r.live {
        let _ = writeln!(
            s,
            "Kernel {} on {} ({} CPUs), live run started {}{}.\n",
            r.environment.kernel,
            r.environment.cpu,
            r.environment.cpus,
            l.started,
            if r.quick { ", --quick" } else { "" }
        );
        if !r.environment.mitigations.is_empty() {
            let _ = writeln!(
                s,
                "Speculation mitigations the kernel reports active ({}): {}. They set the price of every kernel entry and exit, indirect call and return, so prices calibrated on one host do not carry to another with other mitigations (docs/cost.md, \"The AMD EPYC host\").\n",
                crate::env::VULNERABILITIES_DIR,
                crate::env::mitigations_line(&r.environment.mitigations)
            );
        }
        if !r.environment.free_blocks.is_empty() {
            let _ = writeln!(
                s,
                "Free memory at the start (free blocks per order, /proc/buddyinfo, all zones): {}. Many order-0 blocks mean fragmented free memory, which has slowed the live order-0 arms of fork and mprotect up to 2× (docs/cost.md, runs O and O2).\n",
                crate::env::free_blocks_line(&r.environment.free_blocks)
            );
        }
        if let Some(line) = schedule_line(&r.environment.schedule) {
            let _ = writeln!(s, "{line}\n");
        }
        if !r.environment.compactions.is_empty() {
            let _ = writeln!(
                s,
                "Free memory was compacted before each arm (--compact-memory, {} times):\n",
                r.environment.compactions.len()
            );
            for c in &r.environment.compactions {
                let _ = writeln!(s, "- {}", crate::memstate::describe(c));
            }
            s.push('\n');
        }
    }
    let (h, rows) = headline_table(r);
    s.push_str(&table(&h, &rows));
    let _ = writeln!(s, "\n{LEGEND}\n");
    let n = noise_summary(r);
    if !n.is_empty() {
        let _ = writeln!(s, "**{n}**\n");
    }
    if r.quick {
        let _ = writeln!(s, "{QUICK_TRADE}.\n");
    }
    if let Some(why) = local_missing(r) {
        let _ = writeln!(s, "{why}.\n");
    }
    if let Model::Unavailable(why) = &r.model {
        let _ = writeln!(s, "Model columns: {why}\n");
    }
    s.push_str("## Every live contrast next to the model's prediction of it\n\n");
    let (h, rows) = contrast_table(r);
    s.push_str(&table(&h, &rows));
    s.push_str(
        "\n## What each change buys, per the model\n\n\
         The switch's before → after on the headline arm (+ = faster after). For change 5 the switch \
         `uffd-move-batch` is 6.18's batched UFFDIO_MOVE against 6.8–6.17's per-page MOVE; with one \
         page per ioctl it changes little — COPY vs MOVE is the contrast above.\n\n",
    );
    let (h, rows) = effect_table(r);
    s.push_str(&table(&h, &rows));
    for (w, why) in &r.skipped {
        let _ = writeln!(s, "\n- {w}: skipped: {why}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_effect_interval_and_noise() {
        // Means 100 and 80: +20%; the interval is Welch's, relative to 100.
        let base = [98.0, 100.0, 102.0, 99.0, 101.0];
        let arm = [79.0, 80.0, 81.0, 80.0, 80.0];
        let l = LiveEffect::of(&base, &arm).unwrap();
        assert!((l.pct - 20.0).abs() < 1e-9);
        let (lo, hi) = l.ci.unwrap();
        assert!(lo < 20.0 && 20.0 < hi && hi - lo < 6.0, "{lo} {hi}");
        let w = welch(&base, &arm).unwrap();
        let se = (2.5f64 / 5.0 + 0.5 / 5.0).sqrt();
        assert!((hi - 20.0 - t_critical(0.95, w.dof) * se).abs() < 1e-9);
        assert!(l.significant());
        assert!(l.noise().is_empty(), "{:?}", l.noise());
        // Three runs, one wild: flagged for both reasons, not significant.
        let l = LiveEffect::of(&[100.0, 101.0, 99.0], &[50.0, 52.0, 160.0]).unwrap();
        assert!(!l.significant());
        assert_eq!(l.noise().len(), 2, "{:?}", l.noise());
        assert!(l.noise()[0].contains("n = 3 < 5"));
        assert!(l.noise()[1].starts_with("CV "));
    }

    #[test]
    fn verdicts() {
        let l = LiveEffect::of(
            &[100.0, 101.0, 99.0, 100.0, 100.0],
            &[50.0, 51.0, 49.0, 50.0, 50.0],
        )
        .unwrap();
        assert_eq!(verdict(Some(&l), Some(50.0)), Verdict::Agree);
        assert_eq!(verdict(Some(&l), Some(30.0)), Verdict::SameDirection);
        assert_eq!(verdict(Some(&l), Some(0.0)), Verdict::Disagree);
        assert_eq!(verdict(Some(&l), Some(-40.0)), Verdict::Disagree);
        assert_eq!(verdict(None, Some(50.0)), Verdict::Unknown);
        assert_eq!(verdict(Some(&l), None), Verdict::Unknown);
        // No significant live change and a flat prediction: same direction.
        let flat = LiveEffect::of(&[100.0, 110.0, 90.0], &[101.0, 111.0, 89.0]).unwrap();
        assert_eq!(verdict(Some(&flat), Some(2.0)), Verdict::Agree);
    }
}
