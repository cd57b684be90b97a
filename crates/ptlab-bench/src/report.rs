//! The `ptlab reproduce` report: for each of the five seed changes, the
//! live measurement of its contrast arms next to the model's predictions
//! before/after the change per cost profile — as a terminal table and as
//! a self-contained HTML page with one SVG chart per change.
//!
//! Model predictions arrive as plain data ([`ModelRow`]) from a
//! [`ModelProvider`]; this crate does not depend on the cost model. With
//! no provider the report says so ([`Model::Unavailable`]).

use crate::result::{BenchResult, Case, Environment};
use crate::stats::{welch, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One of the five seed changes (docs/seeds.md), or a proposed change
/// newer than the running kernel (docs/prototyping.md).
#[derive(Clone, Copy, Debug)]
pub struct ChangeDef {
    /// The model's switch for it (`ptlab run --before NAME`), which also
    /// names the change everywhere ([`ModelRow::change`], the report).
    pub switch: &'static str,
    /// Number in docs/seeds.md.
    pub seed: u8,
    pub title: &'static str,
    /// A few words for the headline table.
    pub short: &'static str,
    /// Kernel release that merged it.
    pub kernel: &'static str,
    /// Live workloads of the contrast, baseline (the per-PTE / small /
    /// copying arm) first.
    pub arms: &'static [&'static str],
    /// What the live contrast shows on this machine's kernel.
    pub reading: &'static str,
    /// A proposed change newer than the running kernel (an `--after`
    /// switch): the live side can only show the kernel's algorithm, which
    /// is the model's *before* side here.
    pub proposed: bool,
}

impl ChangeDef {
    /// `Linux 6.17`, or what a proposed change is.
    pub fn release(&self) -> String {
        if self.proposed {
            format!("{}, not in the running kernel", self.kernel)
        } else {
            format!("Linux {}", self.kernel)
        }
    }

    /// The model's prediction for the algorithm the running kernel has:
    /// the after side of a seed change, the before side of a proposed one.
    pub fn current_ns(&self, m: &ModelRow) -> f64 {
        if self.proposed {
            m.before_ns
        } else {
            m.after_ns
        }
    }
}

/// The five changes, in docs/seeds.md order, then the proposed one.
pub const CHANGES: &[ChangeDef] = &[
    ChangeDef {
        switch: "mremap-pte-batch",
        seed: 1,
        title: "mremap: move PTEs of a large folio as one batch",
        short: "mremap PTE batching",
        kernel: "6.17",
        arms: &["mremap-batch-4k", "mremap-batch-64k"],
        reading: "On x86-64 the batch is 1 PTE (pte_batch_hint), so 64 KiB folios should not be slower than 4 KiB pages; the gain is arm64 contpte's.",
        proposed: false,
    },
    ChangeDef {
        switch: "mremap-table-move",
        seed: 2,
        title: "mremap: move a whole page table at once",
        short: "mremap whole-table move",
        kernel: "4.20",
        arms: &["mremap-table-unaligned", "mremap-table-aligned"],
        reading: "Unaligned = the per-PTE path (what every move cost before); aligned = PMD entries re-pointed at the existing PTE tables.",
        proposed: false,
    },
    ChangeDef {
        switch: "fork-pte-batch",
        seed: 3,
        title: "fork: copy PTE batches",
        short: "fork PTE batching",
        kernel: "6.9",
        arms: &["fork-4k", "fork-thp-pte"],
        reading: "PTE-mapped THPs are copied a folio batch at a time (one refcount/mapcount update per batch); order-0 pages must not get slower.",
        proposed: false,
    },
    ChangeDef {
        switch: "mprotect-pte-batch",
        seed: 4,
        title: "mprotect: change protection on PTE batches",
        short: "mprotect PTE batching",
        kernel: "6.17",
        arms: &["mprotect-4k", "mprotect-64k", "mprotect-thp-pte"],
        reading: "Large folios are changed in batches found by folio_pte_batch(); small folios pay an extra folio lookup per PTE.",
        proposed: false,
    },
    ChangeDef {
        switch: "uffd-move-batch",
        seed: 5,
        title: "userfaultfd: move pages instead of copying them (UFFDIO_MOVE)",
        short: "UFFDIO_MOVE instead of COPY",
        kernel: "6.8",
        arms: &["uffd-copy", "uffd-move"],
        reading: "UFFDIO_COPY allocates and copies each page and the source must be released; UFFDIO_MOVE re-maps the page. The contrast is COPY vs MOVE (both measured live, both on the model). The model's switch uffd-move-batch selects 6.8-6.17's per-page MOVE instead of 6.18's batched one: with one page per ioctl its before -> after changes little.",
        proposed: false,
    },
    ChangeDef {
        switch: "swapout-unmap-batch",
        seed: 6,
        title: "reclaim: unmap a large folio at swap-out as one batch",
        short: "swap-out unmap batching",
        kernel: "proposed on linux-mm in 2026",
        arms: &["pageout-4k", "pageout-64k"],
        reading: "Proposed, not in the running kernel: the live arms show 6.18 (one MADV_PAGEOUT of the region to a loop-device swap area), so the live contrast is compared with the model's 6.18 side; the model's before -> after is the proposal's predicted effect (docs/prototyping.md). Only the page-table work is priced: the rest of reclaim and the I/O submission are not.",
        proposed: true,
    },
];

/// One model prediction: a workload's scenario run with the change's
/// before-switch on and off, on one cost profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelRow {
    /// [`ChangeDef::id`].
    pub change: String,
    /// Workload name (`scenarios/seeds/<workload>.ptl`).
    pub workload: String,
    /// Cost profile name.
    pub profile: String,
    /// `x86_64` or `arm64`.
    pub arch: String,
    /// Predicted nanoseconds per measured operation, before the change.
    pub before_ns: f64,
    /// ... and after it.
    pub after_ns: f64,
    /// Hardware-event counts before/after (event name → count).
    #[serde(default)]
    pub before_events: BTreeMap<String, u64>,
    #[serde(default)]
    pub after_events: BTreeMap<String, u64>,
    /// Kernel-call counts per measured operation before/after (function
    /// name → calls: ptep_get, set_ptes, folio_pte_batch, flush_tlb_range,
    /// ...; counted by the model, never priced; empty in results saved
    /// before calls were recorded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub before_calls: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub after_calls: BTreeMap<String, u64>,
    /// This workload's `after_ns` over its change's baseline workload's on
    /// the same profile, as an interval: every price of the profile moved
    /// within its range, prices the two share moving together (`None` for
    /// the baseline itself, and in results saved before intervals existed).
    #[serde(default)]
    pub vs_base: Option<(f64, f64)>,
    /// The kernel's current algorithm's ns per operation with every price
    /// of the profile anywhere in its range (`None` in results saved
    /// before it existed).
    #[serde(default)]
    pub cur_range: Option<(f64, f64)>,
    /// What the predicted time of the current algorithm is made of: (part
    /// of the kernel, share of the predicted ns), largest first; the parts
    /// are [`crate::accuracy::PARTS`].
    #[serde(default)]
    pub priced: Vec<(String, f64)>,
    /// The whole-program figure (docs/cost.md, "Two figures") of the
    /// current algorithm's measured operation: ns per operation (`None` in
    /// results saved before it existed). It equals the page-table figure
    /// where the timed part takes no fault and makes no user access, and
    /// prices the fault path's pieces (allocation, charge, LRU, clears)
    /// and the user's loads and stores by their own events where it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_ns: Option<f64>,
    /// `program_ns` with every price of the profile anywhere in its range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_range: Option<(f64, f64)>,
    /// `program_ns` over the baseline arm's, as an interval (as
    /// `vs_base`; `None` for the baseline itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_vs_base: Option<(f64, f64)>,
    /// Shares of `program_ns` per phase (`page_table`, `syscall`, `fault`,
    /// `user`), largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub program_phases: Vec<(String, f64)>,
    /// For a workload whose live run also times the rest of its loop
    /// (`Case::extra[loop_extra]`, e.g. the mprotect workloads'
    /// explicit_bzero): one whole loop iteration per operation, as a whole
    /// program, with its range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_range: Option<(f64, f64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_extra: Option<String>,
}

impl ModelRow {
    /// % change after vs before, + = faster after (mmtests pndiff).
    pub fn pct_better(&self) -> f64 {
        crate::compare::pct_better(self.before_ns, self.after_ns, crate::result::Better::Lower)
    }
}

/// Where the model columns come from. The cost model implements this
/// outside this crate and hands it to `ptlab reproduce`.
pub trait ModelProvider {
    /// A short description (e.g. `ptlab-cost 0.1, 3 profiles`).
    fn describe(&self) -> String;
    /// Predictions for every change's workloads.
    fn rows(&self, quick: bool) -> Result<Vec<ModelRow>, String>;
}

/// The model columns of a report.
#[derive(Clone, Debug, PartialEq)]
pub enum Model {
    /// No predictions, and why (printed as is).
    Unavailable(String),
    Rows {
        source: String,
        rows: Vec<ModelRow>,
    },
}

/// What the message says when no provider is compiled in.
pub const NO_MODEL: &str = "model predictions: not available in this build";

/// Everything a report shows.
#[derive(Clone, Debug)]
pub struct Reproduction {
    /// Live results (None when nothing could run live).
    pub live: Option<BenchResult>,
    /// Why live parts were skipped or failed: (workload or `live`, reason).
    pub skipped: Vec<(String, String)>,
    pub model: Model,
    pub quick: bool,
    /// Environment (also inside `live` when present).
    pub environment: Environment,
}

/// One live arm of a change, summarised against the change's baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct ArmRow {
    pub workload: String,
    pub unit: String,
    pub summary: Summary,
    /// vs the baseline: (% change, + = better; ratio new/base; Welch p).
    pub vs_base: Option<(f64, f64, Option<f64>)>,
}

impl Reproduction {
    pub(crate) fn case(&self, name: &str) -> Option<&Case> {
        self.live.as_ref()?.cases.iter().find(|c| c.name == name)
    }

    /// The live rows of a change (arms that were measured).
    pub fn arm_rows(&self, ch: &ChangeDef) -> Vec<ArmRow> {
        let base = ch.arms.first().and_then(|a| self.case(a));
        let mut out = Vec::new();
        for a in ch.arms {
            let Some(c) = self.case(a) else { continue };
            let Some(s) = Summary::of(&c.samples) else {
                continue;
            };
            let vs = match base {
                Some(b) if b.name != c.name => Summary::of(&b.samples).map(|bs| {
                    (
                        crate::compare::pct_better(bs.mean, s.mean, c.better),
                        s.mean / bs.mean,
                        welch(&b.samples, &c.samples).map(|w| w.p),
                    )
                }),
                _ => None,
            };
            out.push(ArmRow {
                workload: c.name.clone(),
                unit: c.unit.clone(),
                summary: s,
                vs_base: vs,
            });
        }
        out
    }

    /// The model rows of a change.
    pub fn model_rows(&self, ch: &ChangeDef) -> Vec<&ModelRow> {
        match &self.model {
            Model::Unavailable(_) => Vec::new(),
            Model::Rows { rows, .. } => rows.iter().filter(|r| r.change == ch.switch).collect(),
        }
    }

    fn skipped_for(&self, ch: &ChangeDef) -> Vec<&(String, String)> {
        self.skipped
            .iter()
            .filter(|(w, _)| w == "live" || ch.arms.contains(&w.as_str()))
            .collect()
    }
}

/// The unit of a change's live samples (from the workload definitions).
fn arm_unit(ch: &ChangeDef) -> &'static str {
    crate::workload::find(ch.arms[0]).map_or("", |w| w.unit)
}

fn num(x: f64) -> String {
    if !x.is_finite() {
        "—".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn change_mark(pct: f64, p: Option<f64>) -> String {
    let s = format!("{pct:+.1}%");
    if p.is_some_and(|p| p < 0.05) {
        format!("*{s}*")
    } else {
        format!("({s})")
    }
}

fn top_events(ev: &BTreeMap<String, u64>, n: usize) -> String {
    let mut v: Vec<(&String, &u64)> = ev.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.into_iter()
        .take(n)
        .map(|(k, c)| format!("{k}={c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why one live arm is only indicative (few runs, high variation).
pub fn arm_noise(m: &Summary) -> Vec<String> {
    let mut why = Vec::new();
    if m.n < crate::headline::MIN_N {
        why.push(format!("n = {} < {}", m.n, crate::headline::MIN_N));
    }
    if m.cv() > crate::headline::MAX_CV {
        why.push(format!(
            "CV {:.0}% > {:.0}%",
            m.cv() * 100.0,
            crate::headline::MAX_CV * 100.0
        ));
    }
    why
}

/// The model's effect of the change on one row: `unaffected` when the
/// switch changes neither its events nor its time, else the % change
/// (+ = faster after).
pub fn effect_text(m: &ModelRow) -> String {
    if m.before_events == m.after_events && m.before_ns == m.after_ns {
        "unaffected".into()
    } else {
        format!("{:+.1}%", m.pct_better())
    }
}

/// The (profile, arch) pairs of model rows, in their order.
pub(crate) fn profiles_of<'a>(rows: &[&'a ModelRow]) -> Vec<(&'a str, &'a str)> {
    let mut v: Vec<(&str, &str)> = Vec::new();
    for m in rows {
        if !v.contains(&(m.profile.as_str(), m.arch.as_str())) {
            v.push((m.profile.as_str(), m.arch.as_str()));
        }
    }
    v
}

/// The model row of `workload` on `profile`.
pub(crate) fn model_row<'a>(
    rows: &[&'a ModelRow],
    workload: &str,
    profile: &str,
) -> Option<&'a ModelRow> {
    rows.iter()
        .copied()
        .find(|r| r.workload == workload && r.profile == profile)
}

/// This arm against the change's baseline arm on the same profile, both
/// with the kernel's current algorithm (+ = faster than the baseline).
pub fn contrast_text(ch: &ChangeDef, rows: &[&ModelRow], m: &ModelRow) -> String {
    if m.workload == ch.arms[0] {
        return "baseline".into();
    }
    match model_row(rows, ch.arms[0], &m.profile) {
        Some(b) => format!(
            "{:+.1}%",
            crate::compare::pct_better(
                ch.current_ns(b),
                ch.current_ns(m),
                crate::result::Better::Lower
            )
        ),
        None => "—".into(),
    }
}

/// Event counts per operation, once per (workload, arch): they do not
/// depend on the profile, only on the architecture.
fn event_lines(rows: &[&ModelRow]) -> Vec<(String, String, String)> {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    let mut out = Vec::new();
    for m in rows {
        if seen.contains(&(m.workload.as_str(), m.arch.as_str())) {
            continue;
        }
        seen.push((m.workload.as_str(), m.arch.as_str()));
        let after = if m.after_events == m.before_events {
            "the same".to_string()
        } else {
            top_events(&m.after_events, 4)
        };
        out.push((
            format!("{} {}", m.workload, m.arch),
            top_events(&m.before_events, 4),
            after,
        ));
    }
    out
}

/// The kernel calls every call table shows (others appear when they change).
const MAIN_CALLS: [&str; 4] = ["ptep_get", "set_ptes", "folio_pte_batch", "flush_tlb_range"];

/// One row of a change's kernel-call table: a workload on the profiles
/// that count alike (calls depend on the architecture and CPU features,
/// not on prices), each main call `before → after`, then the other calls
/// that change.
pub struct CallRow {
    pub workload: String,
    /// `arm64 (apple-m-vm, neoverse-n1)`.
    pub machines: String,
    pub main: Vec<String>,
    pub other: String,
}

fn before_after(b: u64, a: u64) -> String {
    if b == a {
        format!("{b} (=)")
    } else {
        format!("{b} → {a}")
    }
}

/// The kernel-call rows of a change's model rows (none without calls).
pub fn call_rows(rows: &[&ModelRow]) -> Vec<CallRow> {
    let mut groups: Vec<(String, String, &ModelRow, Vec<&str>)> = Vec::new();
    for m in rows {
        if m.before_calls.is_empty() && m.after_calls.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(w, a, g, _)| {
            *w == m.workload
                && *a == m.arch
                && g.before_calls == m.before_calls
                && g.after_calls == m.after_calls
        }) {
            Some(g) => g.3.push(&m.profile),
            None => groups.push((m.workload.clone(), m.arch.clone(), m, vec![&m.profile])),
        }
    }
    groups
        .into_iter()
        .map(|(workload, arch, m, profiles)| {
            let get = |map: &BTreeMap<String, u64>, k: &str| map.get(k).copied().unwrap_or(0);
            let main = MAIN_CALLS
                .iter()
                .map(|k| before_after(get(&m.before_calls, k), get(&m.after_calls, k)))
                .collect();
            let mut names: Vec<&String> =
                m.before_calls.keys().chain(m.after_calls.keys()).collect();
            names.sort();
            names.dedup();
            let other = names
                .into_iter()
                .filter(|k| !MAIN_CALLS.contains(&k.as_str()))
                .filter(|k| get(&m.before_calls, k) != get(&m.after_calls, k))
                .map(|k| {
                    format!(
                        "{k} {} → {}",
                        get(&m.before_calls, k),
                        get(&m.after_calls, k)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            CallRow {
                workload,
                machines: format!("{arch} ({})", profiles.join(", ")),
                main,
                other: if other.is_empty() {
                    "—".to_string()
                } else {
                    other
                },
            }
        })
        .collect()
}

/// report.md's kernel-call section: per change, a table of the calls per
/// measured operation before → after the change, on the model.
pub fn calls_markdown(r: &Reproduction) -> String {
    let Model::Rows { .. } = &r.model else {
        return String::new();
    };
    let mut s = String::new();
    for ch in CHANGES {
        let rows = call_rows(&r.model_rows(ch));
        if rows.is_empty() {
            continue;
        }
        if s.is_empty() {
            s.push_str("\n## Kernel calls per operation (model)\n\nCounted by the model per measured operation, never priced (docs/cost.md, \"Kernel-call counts\"); `before → after` the change, `(=)` unchanged.\n");
        }
        let _ = writeln!(s, "\n**{}** (`{}`)\n", ch.title, ch.switch);
        let _ = writeln!(
            s,
            "| workload | machines | {} | other calls that change |",
            MAIN_CALLS.join(" | ")
        );
        let _ = writeln!(s, "|---|---|{}---|", "---:|".repeat(MAIN_CALLS.len()));
        for c in rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                c.workload,
                c.machines,
                c.main.join(" | "),
                c.other
            );
        }
    }
    s
}

/// `report.md`: the headline, the accuracy of the local profile (both
/// figures' predictions with their intervals next to the live values, per
/// contrast and per arm) and the kernel-call counts.
pub fn markdown(r: &Reproduction) -> String {
    let mut s = crate::headline::markdown(r);
    let acc = crate::accuracy::markdown(r, crate::headline::LOCAL);
    if !acc.is_empty() {
        s.push_str(ACCURACY_TITLE_MD);
        s.push_str(&acc);
    }
    s + &calls_markdown(r)
}

/// The terminal report: the headline (as in report.md), then each change.
pub fn terminal(r: &Reproduction) -> String {
    let mut s = crate::headline::markdown(r);
    let acc = crate::accuracy::markdown(r, crate::headline::LOCAL);
    if !acc.is_empty() {
        s.push_str(ACCURACY_TITLE_MD);
        s.push_str(&acc);
    }
    s.push('\n');
    for ch in CHANGES {
        let _ = writeln!(
            s,
            "== {}. {} ({}) [{}] ==",
            ch.seed,
            ch.title,
            ch.release(),
            ch.switch
        );
        let arms = r.arm_rows(ch);
        let unit = arm_unit(ch);
        if !arms.is_empty() {
            let _ = writeln!(
                s,
                "live, this machine ({unit}; + = faster than {}; *x%* = significant, Welch p < 0.05; ! = indicative only):",
                ch.arms[0]
            );
            let _ = writeln!(
                s,
                "  {:<24} {:>3} {:>22} {:>5} {:>10} {:>10} {:>10}  vs baseline",
                "workload", "n", "mean ± stdev", "CV", "median", "min", "max"
            );
        }
        for a in &arms {
            let m = &a.summary;
            let vs = match a.vs_base {
                None => "baseline".to_string(),
                Some((pct, ratio, p)) => format!("{} ({ratio:.2}x)", change_mark(pct, p)),
            };
            let noise = arm_noise(m);
            let _ = writeln!(
                s,
                "  {:<24} {:>3} {:>22} {:>4.0}% {:>10} {:>10} {:>10}  {vs}{}",
                a.workload,
                m.n,
                format!("{} ± {}", num(m.mean), num(m.stdev)),
                m.cv() * 100.0,
                num(m.median),
                num(m.min),
                num(m.max),
                if noise.is_empty() {
                    String::new()
                } else {
                    format!("  ! {}", noise.join(", "))
                }
            );
        }
        for (w, why) in r.skipped_for(ch) {
            let _ = writeln!(s, "  {w}: SKIPPED: {why}");
        }
        match &r.model {
            Model::Unavailable(why) => {
                let _ = writeln!(s, "{why}");
            }
            Model::Rows { .. } => {
                let rows = r.model_rows(ch);
                let _ = writeln!(
                    s,
                    "model (predicted ns per operation; change = {} off -> on, + = faster; vs {} = the same contrast as live, + = faster):",
                    ch.switch, ch.arms[0]
                );
                if rows.is_empty() {
                    let _ = writeln!(s, "  (no predictions for this change)");
                }
                let _ = writeln!(
                    s,
                    "  {:<24} {:<14} {:<7} {:>12} {:>12} {:>11} {:>11}",
                    "workload",
                    "profile",
                    "arch",
                    "before",
                    "after",
                    "change",
                    format!("vs {}", ch.arms[0].rsplit('-').next().unwrap_or(""))
                );
                for m in &rows {
                    let _ = writeln!(
                        s,
                        "  {:<24} {:<14} {:<7} {:>12} {:>12} {:>11} {:>11}",
                        m.workload,
                        m.profile,
                        m.arch,
                        num(m.before_ns),
                        num(m.after_ns),
                        effect_text(m),
                        contrast_text(ch, &rows, m),
                    );
                }
                let _ = writeln!(
                    s,
                    "  events per operation (the same on every profile of an arch):"
                );
                for (w, b, a) in event_lines(&rows) {
                    let _ = writeln!(s, "    {w:<32} before: {b}; after: {a}");
                }
                let calls = call_rows(&rows);
                if !calls.is_empty() {
                    let _ = writeln!(
                        s,
                        "  kernel calls per operation, before -> after ({}):",
                        MAIN_CALLS.join(", ")
                    );
                    for c in calls {
                        let _ = writeln!(
                            s,
                            "    {:<24} {:<40} {}; other: {}",
                            c.workload,
                            c.machines,
                            c.main.join(", "),
                            c.other
                        );
                    }
                }
            }
        }
        s.push('\n');
    }
    s
}

// ----- HTML -----------------------------------------------------------------

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A time in ns as a short human-readable duration.
pub fn dur(ns: f64) -> String {
    let (v, u) = if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    if v >= 100.0 {
        format!("{v:.0} {u}")
    } else if v >= 10.0 {
        format!("{v:.1} {u}")
    } else {
        format!("{v:.2} {u}")
    }
}

/// A bar of a chart panel.
struct Bar {
    /// Tooltip.
    label: String,
    value: f64,
    err: Option<f64>,
    /// `live` or `model` (the rect's second class).
    class: &'static str,
    /// Fill colour and opacity.
    fill: &'static str,
    opacity: f64,
}

/// A group of bars with one label (one or two lines) under it.
struct Group {
    label: Vec<String>,
    bars: Vec<Bar>,
}

/// Colours of a change's arms, baseline first.
const ARM_COLOURS: &[&str] = &["#4a79b5", "#d9822b", "#4f9d5d", "#9b59b6"];

/// A value axis: linear from 0, or logarithmic (whole decades) when the
/// values span more than 20×.
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>) -> Option<Axis> {
        let v: Vec<f64> = values.filter(|x| x.is_finite() && *x > 0.0).collect();
        let max = v.iter().copied().fold(0.0f64, f64::max);
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        if v.is_empty() || max <= 0.0 {
            return None;
        }
        if max / min > 20.0 {
            Some(Axis {
                log: true,
                lo: 10f64.powf(min.log10().floor()),
                hi: 10f64.powf(max.log10().ceil()),
            })
        } else {
            let step = nice_step(max / 4.0);
            Some(Axis {
                log: false,
                lo: 0.0,
                hi: (max / step).ceil() * step,
            })
        }
    }

    /// Fraction of the axis height of `v` (0 at the bottom).
    fn frac(&self, v: f64) -> f64 {
        let f = if self.log {
            if v <= self.lo {
                0.0
            } else {
                (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
            }
        } else {
            v / self.hi
        };
        f.clamp(0.0, 1.0)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().round() as i32,
                self.hi.log10().round() as i32,
            );
            (a..=b).map(|k| 10f64.powi(k)).collect()
        } else {
            let step = nice_step(self.hi / 4.0);
            (0..=((self.hi / step).round() as i32))
                .map(|k| k as f64 * step)
                .collect()
        }
    }
}

/// 1, 2 or 5 × a power of ten, at least `x`.
fn nice_step(x: f64) -> f64 {
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= x)
        .unwrap_or(10.0 * p)
}

/// Plot margins of a panel.
const PLOT_TOP: f64 = 64.0;
const PLOT_BOTTOM: f64 = 40.0;
const PLOT_LEFT: f64 = 62.0;

/// One panel: title lines, an optional legend line, a value axis with tick
/// labels (durations), groups of bars with ±err whiskers, one label per
/// group; value labels only when `values` (few wide bars).
#[allow(clippy::too_many_arguments)]
fn panel(
    out: &mut String,
    x: f64,
    w: f64,
    h: f64,
    title: &[String],
    legend: &[(String, &'static str, f64)],
    groups: &[Group],
    values: bool,
) {
    let _ = write!(out, r#"<g class="panel" transform="translate({x},0)">"#);
    for (k, t) in title.iter().enumerate() {
        let _ = write!(
            out,
            r#"<text class="ptitle" x="{}" y="{}" text-anchor="middle">{}</text>"#,
            w / 2.0,
            14.0 + 14.0 * k as f64,
            esc(t)
        );
    }
    // Legend: swatch + text, laid out left to right with measured widths
    // (about 6.5 px per character at 11 px).
    let mut lx = PLOT_LEFT;
    for (text, fill, opacity) in legend {
        let _ = write!(
            out,
            r#"<rect class="swatch" x="{lx:.1}" y="35" width="10" height="10" fill="{fill}" fill-opacity="{opacity}"/><text class="legend" x="{:.1}" y="44">{}</text>"#,
            lx + 14.0,
            esc(text)
        );
        lx += 14.0 + 6.5 * text.chars().count() as f64 + 14.0;
    }
    let ph = h - PLOT_TOP - PLOT_BOTTOM;
    let pw = w - PLOT_LEFT - 8.0;
    let axis = Axis::new(
        groups
            .iter()
            .flat_map(|g| g.bars.iter())
            .flat_map(|b| [b.value, b.value + b.err.unwrap_or(0.0)]),
    );
    let Some(axis) = axis else {
        let _ = write!(
            out,
            r#"<text class="empty" x="{}" y="{}" text-anchor="middle">no data</text></g>"#,
            w / 2.0,
            h / 2.0
        );
        return;
    };
    let y_of = |v: f64| PLOT_TOP + ph - axis.frac(v) * ph;
    for t in axis.ticks() {
        let y = y_of(t);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{PLOT_LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            PLOT_LEFT + pw,
            PLOT_LEFT - 4.0,
            y + 4.0,
            if t == 0.0 { "0".to_string() } else { dur(t) }
        );
    }
    if axis.log {
        let _ = write!(
            out,
            r#"<text class="tick scale" x="4" y="{:.1}">log</text>"#,
            PLOT_TOP - 8.0
        );
    }
    let _ = write!(
        out,
        r#"<line class="axis" x1="{PLOT_LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}"/>"#,
        PLOT_TOP + ph,
        PLOT_LEFT + pw,
        PLOT_TOP + ph
    );
    let gw = pw / groups.len().max(1) as f64;
    for (gi, g) in groups.iter().enumerate() {
        let gx = PLOT_LEFT + gw * gi as f64;
        let bw = ((gw * 0.8) / g.bars.len().max(1) as f64).min(48.0);
        let start = gx + (gw - bw * g.bars.len() as f64) / 2.0;
        for (i, b) in g.bars.iter().enumerate() {
            let cx = start + bw * (i as f64 + 0.5);
            let by = y_of(b.value);
            let _ = write!(
                out,
                r#"<rect class="bar {}" x="{:.1}" y="{by:.1}" width="{:.1}" height="{:.1}" fill="{}" fill-opacity="{}"><title>{}: {}</title></rect>"#,
                b.class,
                cx - bw * 0.42,
                bw * 0.84,
                (PLOT_TOP + ph - by).max(0.5),
                b.fill,
                b.opacity,
                esc(&b.label),
                dur(b.value)
            );
            let mut top = by;
            if let Some(e) = b.err.filter(|e| *e > 0.0) {
                let y1 = y_of(b.value + e);
                let y2 = y_of((b.value - e).max(axis.lo));
                top = y1;
                let _ = write!(
                    out,
                    r#"<line class="err" x1="{cx:.1}" y1="{y1:.1}" x2="{cx:.1}" y2="{y2:.1}"/><line class="err" x1="{:.1}" y1="{y1:.1}" x2="{:.1}" y2="{y1:.1}"/><line class="err" x1="{:.1}" y1="{y2:.1}" x2="{:.1}" y2="{y2:.1}"/>"#,
                    cx - 5.0,
                    cx + 5.0,
                    cx - 5.0,
                    cx + 5.0
                );
            }
            if values {
                let _ = write!(
                    out,
                    r#"<text class="val" x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    (top - 4.0).max(PLOT_TOP - 2.0),
                    dur(b.value)
                );
            }
        }
        for (k, l) in g.label.iter().enumerate() {
            let _ = write!(
                out,
                r#"<text class="lbl" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                gx + gw / 2.0,
                PLOT_TOP + ph + 14.0 + 12.0 * k as f64,
                esc(l)
            );
        }
    }
    out.push_str("</g>");
}

/// The part of an arm's name after the change's common prefix (`64k`).
pub(crate) fn arm_short(ch: &ChangeDef, arm: &str) -> String {
    let common = ch
        .arms
        .iter()
        .map(|a| {
            a.chars()
                .zip(ch.arms[0].chars())
                .take_while(|(x, y)| x == y)
                .count()
        })
        .min()
        .unwrap_or(0);
    let cut = ch.arms[0][..common].rfind('-').map_or(0, |i| i + 1);
    arm[cut..].to_string()
}

/// The SVG chart of one change: live arms (mean ± stdev, log scale when
/// they span more than 20×) on the left; on the right the model's
/// predicted time grouped by profile, one colour per arm, pale before the
/// change and solid after it, with a legend.
pub fn chart(r: &Reproduction, ch: &ChangeDef) -> String {
    let (w, h) = (960.0, 300.0);
    let lw = 250.0;
    let arms = r.arm_rows(ch);
    let colour = |arm: &str| {
        let i = ch.arms.iter().position(|a| *a == arm).unwrap_or(0);
        ARM_COLOURS[i % ARM_COLOURS.len()]
    };
    let live: Vec<Group> = arms
        .iter()
        .map(|a| Group {
            label: vec![arm_short(ch, &a.workload)],
            bars: vec![Bar {
                label: a.workload.clone(),
                value: a.summary.mean,
                err: Some(a.summary.stdev),
                class: "live",
                fill: colour(&a.workload),
                opacity: 1.0,
            }],
        })
        .collect();
    let mut s = format!(
        r#"<svg class="chart" data-change="{}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{}">"#,
        ch.switch,
        esc(ch.title)
    );
    panel(
        &mut s,
        0.0,
        lw,
        h,
        &["live (mean ± stdev)".to_string(), arm_unit(ch).to_string()],
        &[],
        &live,
        true,
    );
    match &r.model {
        Model::Unavailable(why) => {
            let _ = write!(
                s,
                r#"<g class="panel" transform="translate({lw},0)"><text class="ptitle" x="{}" y="14" text-anchor="middle">model</text><text class="empty" x="{}" y="{}" text-anchor="middle">{}</text></g>"#,
                (w - lw) / 2.0,
                (w - lw) / 2.0,
                h / 2.0,
                esc(why)
            );
        }
        Model::Rows { .. } => {
            let rows = r.model_rows(ch);
            let profiles = profiles_of(&rows);
            let groups: Vec<Group> = profiles
                .iter()
                .map(|(p, arch)| Group {
                    label: vec![p.to_string(), arch.to_string()],
                    bars: rows
                        .iter()
                        .filter(|m| m.profile == *p)
                        .flat_map(|m| {
                            [("before", m.before_ns, 0.4), ("after", m.after_ns, 1.0)].map(
                                |(when, value, opacity)| Bar {
                                    label: format!("{} on {p}, {when} {}", m.workload, ch.switch),
                                    value,
                                    err: None,
                                    class: "model",
                                    fill: colour(&m.workload),
                                    opacity,
                                },
                            )
                        })
                        .collect(),
                })
                .collect();
            let mut legend: Vec<(String, &'static str, f64)> = ch
                .arms
                .iter()
                .map(|a| (arm_short(ch, a), colour(a), 1.0))
                .collect();
            legend.push(("pale: before the change".into(), "#888888", 0.4));
            legend.push(("solid: after".into(), "#888888", 1.0));
            panel(
                &mut s,
                lw,
                w - lw,
                h,
                &[format!(
                    "model: predicted time per operation, {} before vs after",
                    ch.switch
                )],
                &legend,
                &groups,
                false,
            );
        }
    }
    s.push_str("</svg>");
    s
}

const CSS: &str = "
body { font-family: 'DejaVu Sans', Arial, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
table.env td, details.counters td, table.headline td { text-align: left; } table.env td { overflow-wrap: anywhere; }
details.counters { margin: 0.4em 0; font-size: 0.9em; } td.sig { font-weight: bold; } .note { color: #555; font-size: 0.9em; }
td.noisy, .noise { color: #a40; } td.DISAGREE { color: #b00; font-weight: bold; }
.skip { color: #a40; } .unavailable { color: #a40; font-style: italic; }
svg.chart { display: block; margin: 0.8em 0; background: #fafafa; border: 1px solid #ddd; max-width: 100%; height: auto; }
svg .err, svg .axis { stroke: #333; stroke-width: 1; } svg .grid { stroke: #ddd; stroke-width: 1; }
svg text { font-size: 11px; fill: #222; } svg .ptitle { font-size: 12px; font-weight: bold; }
svg .tick { fill: #555; font-size: 10px; } svg .empty { fill: #a40; font-style: italic; }
";

/// An HTML table from headline rows (backticks become `<code>`).
fn html_table(class: &str, head: &[String], rows: &[Vec<String>]) -> String {
    let cell = |t: &str| {
        let mut out = String::new();
        for (i, part) in esc(t).split('`').enumerate() {
            if i % 2 == 1 {
                let _ = write!(out, "<code>{part}</code>");
            } else {
                out.push_str(part);
            }
        }
        out
    };
    let mut s = format!("<div class=\"scroll\"><table class=\"{class}\"><tr>");
    for h in head {
        let _ = write!(s, "<th>{}</th>", cell(h));
    }
    s.push_str("</tr>\n");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            let class = if c.starts_with("indicative") {
                " class=\"noisy\""
            } else if c == "DISAGREE" {
                " class=\"DISAGREE\""
            } else {
                ""
            };
            let _ = write!(s, "<td{class}>{}</td>", cell(c));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table></div>\n");
    s
}

/// A collapsed table per change: the layout each arm verified, and every
/// counter (THP, vmstat, perf) over the measured runs, one column per arm.
fn counters_details(s: &mut String, r: &Reproduction, ch: &ChangeDef) {
    let cases: Vec<&Case> = ch.arms.iter().filter_map(|a| r.case(a)).collect();
    if cases.is_empty() {
        return;
    }
    s.push_str("<details class=\"counters\"><summary>layouts and counters over the measured runs</summary><table><tr><th></th>");
    for c in &cases {
        let _ = write!(s, "<th>{}</th>", esc(&c.name));
    }
    s.push_str("</tr><tr><td>layout verified</td>");
    for c in &cases {
        let _ = write!(s, "<td>{}</td>", esc(&c.layout_check));
    }
    s.push_str("</tr>\n");
    let mut keys: Vec<&String> = cases.iter().flat_map(|c| c.counters.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let _ = write!(s, "<tr><td>{}</td>", esc(k));
        for c in &cases {
            let _ = write!(s, "<td>{}</td>", c.counters.get(k).copied().unwrap_or(0));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table></details>\n");
}

const ACCURACY_TITLE: &str =
    "How well the local profile predicts this run (targets: ratios within 25%, times within 1.5×)";
const ACCURACY_TITLE_MD: &str = "\n## How well the local profile predicts this run (targets: ratios within 25%, times within 1.5×)\n\n";

/// The headline section of the HTML report (report.md's content).
fn html_headline(s: &mut String, r: &Reproduction) {
    use crate::headline as hl;
    s.push_str("<section class=\"headline\" id=\"headline\"><h2>Headline: did each change make things faster, and does the model agree?</h2>\n");
    let (h, rows) = hl::headline_table(r);
    s.push_str(&html_table("headline", &h, &rows));
    let n = hl::noise_summary(r);
    if !n.is_empty() {
        let _ = writeln!(s, "<p class=\"noise\"><strong>{}</strong></p>", esc(&n));
    }
    if r.quick {
        let _ = writeln!(s, "<p class=\"noise\">{}.</p>", esc(hl::QUICK_TRADE));
    }
    if let Some(why) = hl::local_missing(r) {
        let _ = writeln!(s, "<p class=\"noise\">{}.</p>", esc(&why));
    }
    let _ = writeln!(s, "<p class=\"note\">{}</p>", esc(hl::LEGEND));
    s.push_str("<h3>Every live contrast next to the model's prediction of it</h3>\n");
    let (h, rows) = hl::contrast_table(r);
    s.push_str(&html_table("contrasts", &h, &rows));
    let local = crate::headline::LOCAL;
    let (s1, h1, r1) = crate::accuracy::ratio_table(r, local);
    let (s2, h2, r2) = crate::accuracy::abs_table(r, local);
    if !r1.is_empty() || !r2.is_empty() {
        let _ = writeln!(s, "<h3>{}</h3>", esc(ACCURACY_TITLE));
        let _ = writeln!(s, "<p class=\"note\">{}</p>", esc(&s1));
        s.push_str(&html_table("accuracy", &h1, &r1));
        let _ = writeln!(s, "<p class=\"note\">{}</p>", esc(&s2));
        s.push_str(&html_table("accuracy", &h2, &r2));
    }
    s.push_str("<h3>What each change buys, per the model</h3>\n<p class=\"note\">The switch's before → after on the headline arm, + = faster after.</p>\n");
    let (h, rows) = hl::effect_table(r);
    s.push_str(&html_table("effects", &h, &rows));
    s.push_str("<p class=\"note\">The same tables are in report.md.</p></section>\n");
}

/// The self-contained HTML report.
pub fn html(r: &Reproduction) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>ptlab reproduce</title><style>{CSS}</style></head><body>\n"
    );
    let e = &r.environment;
    let _ = write!(
        s,
        "<h1>ptlab reproduce{}</h1>\n<p class=\"note\">{}</p>\n",
        if r.quick { " (--quick)" } else { "" },
        esc(&r
            .live
            .as_ref()
            .map_or(String::new(), |l| format!("live run started {}", l.started)))
    );
    html_headline(&mut s, r);
    let _ = writeln!(
        s,
        "<h2>Environment</h2><div class=\"scroll\"><table class=\"env\"><tr><th>kernel</th><td>{}</td></tr><tr><th>CPU</th><td>{} ({} CPUs)</td></tr>\
         <tr><th>memory</th><td>{} MiB</td></tr><tr><th>THP</th><td>{}</td></tr><tr><th>config ({})</th><td>{}</td></tr>\
         <tr><th>ptlab</th><td>{} {}</td></tr><tr><th>load average at start</th><td>{}</td></tr>\
         <tr><th>free blocks at start</th><td>{}</td></tr><tr><th>speculation mitigations</th><td>{}</td></tr></table></div>",
        esc(&e.kernel),
        esc(&e.cpu),
        e.cpus,
        e.memory_kb / 1024,
        esc(&e
            .thp
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")),
        esc(&e.config_source),
        esc(&e
            .config
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")),
        esc(&e.ptlab_version),
        esc(e.git_commit.as_deref().unwrap_or("")),
        esc(&e.load_avg),
        esc(&crate::env::free_blocks_line(&e.free_blocks)),
        esc(&crate::env::mitigations_line(&e.mitigations))
    );
    for n in &e.notes {
        let _ = writeln!(s, "<p class=\"note\">{}</p>", esc(n));
    }
    for ch in CHANGES {
        let _ = write!(
            s,
            "<section class=\"change\" id=\"{}\"><h2>{}. {} ({}) <code>{}</code></h2>\n<p class=\"note\">{}</p>\n",
            ch.switch,
            ch.seed,
            esc(ch.title),
            esc(&ch.release()),
            ch.switch,
            esc(ch.reading)
        );
        let arms = r.arm_rows(ch);
        s.push_str("<div class=\"scroll\"><table class=\"live\"><tr><th>workload (live)</th><th>unit</th><th>n</th><th>mean ± stdev</th><th>CV</th><th>median</th><th>min</th><th>max</th><th>95% CI ±</th><th>vs baseline (+ = faster)</th><th>noise</th></tr>\n");
        for a in &arms {
            let m = &a.summary;
            let (vs, class) = match a.vs_base {
                None => ("baseline".to_string(), ""),
                Some((pct, ratio, p)) => (
                    format!("{} ({ratio:.2}x)", change_mark(pct, p)),
                    if p.is_some_and(|p| p < 0.05) {
                        " class=\"sig\""
                    } else {
                        ""
                    },
                ),
            };
            let noise = arm_noise(m);
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} ± {}</td><td>{:.0}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td{class}>{}</td><td class=\"noisy\">{}</td></tr>",
                esc(&a.workload),
                esc(&a.unit),
                m.n,
                num(m.mean),
                num(m.stdev),
                m.cv() * 100.0,
                num(m.median),
                num(m.min),
                num(m.max),
                num(m.ci95),
                esc(&vs),
                if noise.is_empty() {
                    String::new()
                } else {
                    format!("indicative only: {}", esc(&noise.join(", ")))
                }
            );
        }
        s.push_str("</table></div>\n");
        counters_details(&mut s, r, ch);
        for (w, why) in r.skipped_for(ch) {
            let _ = writeln!(s, "<p class=\"skip\">{}: skipped: {}</p>", esc(w), esc(why));
        }
        match &r.model {
            Model::Unavailable(why) => {
                let _ = writeln!(s, "<p class=\"unavailable\">{}</p>", esc(why));
            }
            Model::Rows { source, .. } => {
                let rows = r.model_rows(ch);
                let _ = writeln!(
                    s,
                    "<div class=\"scroll\"><table class=\"model\"><caption>model ({})</caption><tr><th>workload (model)</th><th>profile</th><th>arch</th><th>before</th><th>after</th><th>change ({} off → on, + = faster)</th><th>vs {} (after, + = faster)</th></tr>",
                    esc(source),
                    ch.switch,
                    ch.arms[0]
                );
                for m in &rows {
                    let _ = writeln!(
                        s,
                        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(&m.workload),
                        esc(&m.profile),
                        esc(&m.arch),
                        dur(m.before_ns),
                        dur(m.after_ns),
                        effect_text(m),
                        contrast_text(ch, &rows, m)
                    );
                }
                s.push_str("</table></div>\n<details class=\"counters\"><summary>model events per operation (the same on every profile of an architecture)</summary><table><tr><th>workload, arch</th><th>before</th><th>after</th></tr>\n");
                for (w, b, a) in event_lines(&rows) {
                    let _ = writeln!(
                        s,
                        "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(&w),
                        esc(&b),
                        esc(&a)
                    );
                }
                s.push_str("</table></details>\n");
                let calls = call_rows(&rows);
                if !calls.is_empty() {
                    let mut head = vec!["workload".to_string(), "machines".to_string()];
                    head.extend(MAIN_CALLS.iter().map(|c| c.to_string()));
                    head.push("other calls that change".to_string());
                    let body: Vec<Vec<String>> = calls
                        .into_iter()
                        .map(|c| {
                            let mut row = vec![c.workload, c.machines];
                            row.extend(c.main);
                            row.push(c.other);
                            row
                        })
                        .collect();
                    s.push_str("<h3>Kernel calls per operation (model, before → after)</h3>\n");
                    s.push_str(&html_table("calls", &head, &body));
                }
            }
        }
        s.push_str(&chart(r, ch));
        s.push_str("\n</section>\n");
    }
    s.push_str("<p class=\"note\">Files: report.md (the headline), report.txt, live.json (ptlab bench result; <code>ptlab compare</code> reads it), model.json (model rows, when available).</p>\n</body></html>\n");
    s
}

/// Write report.html, report.txt, report.md, live.json (if any) and
/// model.json (if any) to `dir`.
pub fn write(dir: &std::path::Path, r: &Reproduction) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let p = dir.join("report.html");
    std::fs::write(&p, html(r))?;
    written.push(p);
    if let Some(live) = &r.live {
        let p = dir.join("live.json");
        std::fs::write(&p, live.to_json())?;
        written.push(p);
    }
    if let Model::Rows { rows, .. } = &r.model {
        let p = dir.join("model.json");
        std::fs::write(
            &p,
            serde_json::to_string_pretty(rows).expect("rows serialize"),
        )?;
        written.push(p);
    }
    let p = dir.join("report.txt");
    std::fs::write(&p, terminal(r))?;
    written.push(p);
    let p = dir.join("report.md");
    std::fs::write(&p, markdown(r))?;
    written.push(p);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{Better, SCHEMA};

    fn case(name: &str, samples: Vec<f64>) -> Case {
        Case {
            name: name.into(),
            unit: "ns per op".into(),
            better: Better::Lower,
            samples,
            ..Default::default()
        }
    }

    fn synthetic(model: bool) -> Reproduction {
        let cases = vec![
            case("mremap-batch-4k", vec![100.0, 102.0, 98.0]),
            case("mremap-batch-64k", vec![101.0, 99.0, 100.0]),
            case("mremap-table-unaligned", vec![5000.0, 5100.0, 4900.0]),
            case("mremap-table-aligned", vec![50.0, 51.0, 49.0]),
            case("fork-4k", vec![200.0, 210.0, 190.0]),
            case("fork-thp-pte", vec![100.0, 105.0, 95.0]),
            case("mprotect-4k", vec![10.0, 11.0, 9.0]),
            case("mprotect-64k", vec![5.0, 5.5, 4.5]),
            case("mprotect-thp-pte", vec![4.0, 4.4, 3.6]),
            case("uffd-copy", vec![2.0, 2.1, 1.9]),
        ];
        let env = Environment {
            kernel: "6.18.44".into(),
            ..Default::default()
        };
        let rows = CHANGES
            .iter()
            .flat_map(|c| {
                c.arms.iter().flat_map(move |w| {
                    [("local", "x86_64"), ("b", "arm64")]
                        .into_iter()
                        .map(move |(p, arch)| {
                            // The baseline arm is unaffected by its change;
                            // the others halve their time.
                            let base = *w == c.arms[0];
                            // A proposed change's before side is the
                            // running kernel's: its arms differ there too.
                            let before_ns = if c.proposed && !base { 150.0 } else { 200.0 };
                            ModelRow {
                                change: c.switch.into(),
                                workload: (*w).into(),
                                profile: p.into(),
                                arch: arch.into(),
                                before_ns,
                                after_ns: if base { 200.0 } else { 100.0 },
                                before_events: [("ptep_get".to_string(), 16u64)].into(),
                                after_events: [(
                                    "ptep_get".to_string(),
                                    if base { 16u64 } else { 1 },
                                )]
                                .into(),
                                before_calls: [("ptep_get".to_string(), 16u64)].into(),
                                after_calls: [
                                    ("ptep_get".to_string(), if base { 16u64 } else { 1 }),
                                    ("folio_pte_batch".to_string(), u64::from(!base)),
                                ]
                                .into(),
                                vs_base: (!base).then_some((0.4, 0.6)),
                                cur_range: Some((80.0, 120.0)),
                                priced: vec![("page tables + TLB".into(), 1.0)],
                                ..Default::default()
                            }
                        })
                })
            })
            .collect();
        Reproduction {
            live: Some(BenchResult {
                schema: SCHEMA,
                label: "t".into(),
                started: String::new(),
                environment: env.clone(),
                cases,
            }),
            skipped: vec![("uffd-move".into(), "no /dev/userfaultfd".into())],
            model: if model {
                Model::Rows {
                    source: "synthetic".into(),
                    rows,
                }
            } else {
                Model::Unavailable(NO_MODEL.into())
            },
            quick: true,
            environment: env,
        }
    }

    #[test]
    fn arm_rows_compare_against_the_first_arm() {
        let r = synthetic(false);
        let rows = r.arm_rows(&CHANGES[1]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].workload, "mremap-table-unaligned");
        assert!(rows[0].vs_base.is_none());
        let (pct, ratio, p) = rows[1].vs_base.unwrap();
        assert!((pct - 99.0).abs() < 1e-9, "{pct}");
        assert!((ratio - 0.01).abs() < 1e-12);
        assert!(p.unwrap() < 0.05);
        // A missing arm is left out, not invented.
        assert_eq!(r.arm_rows(&CHANGES[4]).len(), 1);
    }

    #[test]
    fn terminal_table_has_every_change_and_arm() {
        let t = terminal(&synthetic(false));
        for ch in CHANGES {
            assert!(t.contains(&format!("[{}]", ch.switch)), "{t}");
        }
        // Once per change, once in the headline.
        assert_eq!(t.matches(NO_MODEL).count(), CHANGES.len() + 1);
        assert!(t.contains("mremap-table-aligned"));
        assert!(t.contains("*+99.0%* (0.01x)"), "{t}");
        assert!(t.contains("uffd-move: SKIPPED: no /dev/userfaultfd"));
        // Without a model nothing is predicted: no accuracy section.
        assert!(!t.contains(ACCURACY_TITLE));
        let with = terminal(&synthetic(true));
        assert!(!with.contains(NO_MODEL));
        // The local profile's accuracy: a ratio row per contrast with both
        // arms live (uffd-move is not), an absolute row per live arm.
        assert!(with.contains(ACCURACY_TITLE), "{with}");
        assert!(
            // (rows without the whole-program figure, as in results saved
            // before it existed: the page-table figure is judged)
            with.contains(
                "| mremap-batch-64k vs mremap-batch-4k | — (not in this result) | 0.500 [0.400, 0.600] |"
            ),
            "{with}"
        );
        assert!(
            with.contains("predicted ratios within 25% of live"),
            "{with}"
        );
        assert!(
            with.contains(
                "| fork-thp-pte | op | fork() in the parent (the child's exit and the wait untimed) | (page-table) 100 ns [80.0 ns, 120 ns] | 100 ns | 100 ns ± 12.4 ns | 1.00 | yes |"
            ),
            "{with}"
        );
        assert!(with.contains("off -> on"));
        assert!(with.contains("+50.0%"), "{with}");
        // No +0.0% filler: the baseline arm's model rows say what they are.
        for l in with
            .lines()
            .filter(|l| l.contains(" local ") || l.contains(" b "))
        {
            assert!(!l.contains("+0.0%"), "{l}");
        }
        assert_eq!(with.matches("unaffected").count(), 2 * CHANGES.len());
        // Events once per (workload, arch), not once per profile.
        let workloads: usize = CHANGES.iter().map(|c| c.arms.len()).sum();
        assert_eq!(workloads, 13);
        assert_eq!(with.matches("ptep_get=16").count(), workloads * 2);
    }

    #[test]
    fn html_has_one_chart_per_change_and_right_rows() {
        for model in [false, true] {
            let r = synthetic(model);
            let h = html(&r);
            assert!(h.starts_with("<!DOCTYPE html>"));
            assert_eq!(h.matches("<svg class=\"chart\"").count(), CHANGES.len());
            assert_eq!(
                h.matches("<section class=\"change\"").count(),
                CHANGES.len()
            );
            for ch in CHANGES {
                assert!(h.contains(&format!("data-change=\"{}\"", ch.switch)));
            }
            // Live rows: one per measured case.
            let live_rows = h
                .split("<table class=\"live\">")
                .skip(1)
                .map(|t| {
                    t.split("</table>")
                        .next()
                        .unwrap()
                        .matches("<tr><td>")
                        .count()
                })
                .collect::<Vec<_>>();
            // The proposed change's arms were not measured here.
            assert_eq!(live_rows, vec![2, 2, 2, 3, 1, 0]);
            // One counters table per change with a measured arm, and one of
            // model events per change when there is a model.
            assert_eq!(
                h.matches("<details class=\"counters\">").count(),
                // 5 changes measured live; model events for all 6.
                if model { 5 + CHANGES.len() } else { 5 }
            );
            // Live bars: one per measured case; model bars: 2 profiles ×
            // (2+2+2+3+2+2) workloads, before (pale) and after (solid).
            assert_eq!(h.matches("<rect class=\"bar live\"").count(), 10);
            let bars = h.matches("<rect class=\"bar model\"").count();
            if model {
                let model_rows = h.matches("<table class=\"model\">").count();
                assert_eq!(model_rows, CHANGES.len());
                assert_eq!(bars, 2 * 2 * 13);
                assert_eq!(h.matches("fill-opacity=\"0.4\"><title>").count(), 2 * 13);
            } else {
                assert_eq!(bars, 0);
                assert_eq!(h.matches(NO_MODEL).count(), 2 * CHANGES.len());
            }
            // Self-contained: no external resources.
            assert!(!h.contains("src=\"http") && !h.contains("href=\"http"));
        }
    }

    #[test]
    fn empty_live_still_renders() {
        let mut r = synthetic(false);
        r.live = None;
        r.skipped = vec![("live".into(), "needs root".into())];
        let h = html(&r);
        assert_eq!(h.matches("<svg class=\"chart\"").count(), CHANGES.len());
        assert_eq!(h.matches("no data").count(), CHANGES.len());
        assert!(terminal(&r).contains("live: SKIPPED: needs root"));
    }

    /// The free lists at the start are printed under the headline and in
    /// the HTML environment table when known, and nothing is said when not.
    #[test]
    fn free_blocks_at_the_start_are_shown_when_known() {
        let mut r = synthetic(true);
        assert!(!crate::headline::markdown(&r).contains("Free memory at the start"));
        r.environment.free_blocks = vec![114767, 82255, 41843];
        let md = crate::headline::markdown(&r);
        assert!(
            md.contains("Free memory at the start (free blocks per order, /proc/buddyinfo, all zones): order 0..2: 114767 82255 41843."),
            "{md}"
        );
        assert!(html(&r)
            .contains("<th>free blocks at start</th><td>order 0..2: 114767 82255 41843</td>"));
        assert!(!md.contains("compacted"));
    }

    /// The kernel's active speculation mitigations are named under the
    /// headline and in the HTML environment table when known.
    #[test]
    fn mitigations_are_shown_when_known() {
        let mut r = synthetic(true);
        assert!(!crate::headline::markdown(&r).contains("Speculation mitigations"));
        assert!(html(&r).contains("<th>speculation mitigations</th><td>none reported</td>"));
        r.environment.mitigations =
            [("spec_rstack_overflow".to_string(), "Safe RET".to_string())].into();
        let md = crate::headline::markdown(&r);
        assert!(
            md.contains("Speculation mitigations the kernel reports active (/sys/devices/system/cpu/vulnerabilities): spec_rstack_overflow (Safe RET)."),
            "{md}"
        );
        assert!(html(&r)
            .contains("<th>speculation mitigations</th><td>spec_rstack_overflow (Safe RET)</td>"));
    }

    /// `--compact-memory`'s compactions are listed under the headline, one
    /// line per arm with the free order-0 and order >= 9 blocks.
    #[test]
    fn compactions_are_listed_under_the_headline() {
        let mut r = synthetic(true);
        r.environment.compactions = vec![crate::result::Compaction {
            before: "fork-4k".into(),
            free_before: vec![114739, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            free_after: vec![6588, 1, 0, 0, 0, 0, 0, 0, 0, 3, 3700],
            ms: 812.0,
        }];
        let md = crate::headline::markdown(&r);
        assert!(
            md.contains("compacted before each arm (--compact-memory, 1 times)")
                && md.contains("- compacted free memory before fork-4k (812 ms): free order-0 blocks 114739 -> 6588, order >= 9 2 -> 3703"),
            "{md}"
        );
    }

    /// An interleaved run says so under the headline, with its rounds and
    /// the first round's order taken from the recorded schedule.
    #[test]
    fn an_interleaved_run_is_described_under_the_headline() {
        let mut r = synthetic(true);
        assert!(!crate::headline::markdown(&r).contains("interleaved"));
        let runs: Vec<u64> = vec![8, 8, 5];
        let names = ["fork-4k", "fork-thp-pte", "mprotect-4k"];
        r.environment.schedule = crate::bench::schedule(&runs, 4)
            .into_iter()
            .map(|(i, round, runs)| crate::result::Slice {
                case: names[i].into(),
                round,
                runs,
            })
            .collect();
        let md = crate::headline::markdown(&r);
        assert!(
            md.contains("interleaved over 4 rounds, 12 slices in all")
                && md.contains("round 1: fork-4k, fork-thp-pte, mprotect-4k;"),
            "{md}"
        );
    }

    #[test]
    fn headline_leads_every_output_and_flags_noise() {
        let r = synthetic(true);
        let md = crate::headline::markdown(&r);
        let t = terminal(&r);
        let h = html(&r);
        assert!(t.starts_with(&md));
        // One row per change, naming its switch, before any section.
        let (_, rows) = crate::headline::headline_table(&r);
        assert_eq!(rows.len(), CHANGES.len());
        // uffd-move was skipped: said so, no verdict.
        assert_eq!(rows[4][3], "not measured");
        assert_eq!(rows[4][rows[4].len() - 2], "—");
        for ch in &CHANGES[..4] {
            assert!(md.contains(&format!("`{}`", ch.switch)), "{md}");
            assert!(h.contains(&format!("<code>{}</code>", ch.switch)));
        }
        let head = h.find("id=\"headline\"").unwrap();
        assert!(head < h.find("<section class=\"change\"").unwrap());
        // Three runs per arm: every row indicative, with the firm command.
        assert_eq!(md.matches("indicative only (n = 3 < 5").count(), 4, "{md}");
        assert!(md.contains("target/release/ptlab reproduce   (as root, without --quick"));
        assert!(md.contains(crate::headline::QUICK_TRADE));
        // mremap-batch: live ≈ 0 (n.s.), the local profile predicts +50%,
        // with the interval the price ranges give (arm/base 0.4–0.6).
        assert!(rows[0].contains(&"DISAGREE".to_string()), "{:?}", rows[0]);
        assert_eq!(rows[0][4], "+50.0% [+40.0, +60.0]");
        assert!(md.contains("+50.0% [+40.0, +60.0]"));
        // mremap-table: live +99% (significant), predicted +50%.
        assert!(
            rows[1].contains(&"same direction".to_string()),
            "{:?}",
            rows[1]
        );
        // The uffd section shows COPY vs MOVE, under the switch's name.
        assert!(t.contains("[uffd-move-batch]"));
        assert!(!t.contains("[uffd-move]"));
    }

    #[test]
    fn charts_use_a_log_axis_when_values_span_more_than_20x() {
        let r = synthetic(false);
        // mremap-table: 5000 vs 50 live.
        let c = chart(&r, &CHANGES[1]);
        assert!(c.contains(">log</text>"), "{c}");
        // fork: 200 vs 100.
        assert!(!chart(&r, &CHANGES[2]).contains(">log</text>"));
        // Error bars on live bars; arm names without their common prefix.
        assert!(c.contains("class=\"err\""));
        assert!(c.contains(">aligned</text>") && c.contains(">unaligned</text>"));
        let a = Axis::new([50.0, 5000.0].into_iter()).unwrap();
        assert_eq!((a.lo, a.hi), (10.0, 10000.0));
        assert_eq!(a.ticks(), vec![10.0, 100.0, 1000.0, 10000.0]);
        let a = Axis::new([100.0, 210.0].into_iter()).unwrap();
        assert!(!a.log && a.hi >= 210.0 && a.lo == 0.0);
    }

    #[test]
    fn write_emits_report_md() {
        let dir = std::env::temp_dir().join(format!("ptlab-report-md-{}", std::process::id()));
        let files = write(&dir, &synthetic(true)).unwrap();
        assert!(files.iter().any(|f| f.ends_with("report.md")));
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.starts_with("# ptlab reproduce"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn model_rows_round_trip() {
        let r = ModelRow {
            change: "fork-pte-batch".into(),
            workload: "fork-thp-pte".into(),
            profile: "local".into(),
            arch: "x86_64".into(),
            before_ns: 2.5,
            after_ns: 1.0,
            ..Default::default()
        };
        let t = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<ModelRow>(&t).unwrap(), r);
        assert!((r.pct_better() - 60.0).abs() < 1e-9);
    }

    #[test]
    fn model_switches_exist_in_the_model() {
        for ch in CHANGES {
            let known = if ch.proposed {
                ptlab_model::After::from_switch(ch.switch).is_some()
            } else {
                ptlab_model::Before::from_switch(ch.switch).is_some()
            };
            assert!(known, "{}", ch.switch);
        }
    }

    #[test]
    fn every_arm_is_a_workload() {
        for ch in CHANGES {
            for a in ch.arms {
                assert!(crate::workload::find(a).is_some(), "{a}");
            }
        }
        assert_eq!(
            CHANGES.iter().map(|c| c.arms.len()).sum::<usize>(),
            crate::workload::WORKLOADS.len()
        );
    }

    /// Each change gets a kernel-call table in report.md, report.txt and
    /// the HTML: one row per workload and machine group, the main calls
    /// `before → after`, other changed calls listed; none without model
    /// rows or without recorded calls (results saved before calls were).
    #[test]
    fn call_tables_per_change() {
        let r = synthetic(true);
        let ch = &CHANGES[0];
        let rows = call_rows(&r.model_rows(ch));
        assert_eq!(rows.len(), 2 * ch.arms.len(), "one per workload and arch");
        let base = &rows[0];
        assert_eq!(base.workload, ch.arms[0]);
        assert_eq!(base.main[0], "16 (=)");
        assert_eq!(base.other, "—");
        let other = rows.iter().find(|c| c.workload == ch.arms[1]).unwrap();
        assert_eq!(other.main[0], "16 → 1");
        assert_eq!(other.main[2], "0 → 1", "folio_pte_batch");
        assert_eq!(other.machines, "x86_64 (local)");
        let md = calls_markdown(&r);
        assert!(md.contains("## Kernel calls per operation (model)"));
        assert_eq!(
            md.matches("| workload | machines | ptep_get |").count(),
            CHANGES.len()
        );
        assert!(terminal(&r).contains("kernel calls per operation, before -> after"));
        assert!(html(&r).contains("Kernel calls per operation (model, before → after)"));
        // Rows without calls (older model.json files) give no table.
        let mut old = synthetic(true);
        if let Model::Rows { rows, .. } = &mut old.model {
            for m in rows.iter_mut() {
                m.before_calls.clear();
                m.after_calls.clear();
            }
        }
        assert!(calls_markdown(&old).is_empty());
        assert!(calls_markdown(&synthetic(false)).is_empty());
    }
}
