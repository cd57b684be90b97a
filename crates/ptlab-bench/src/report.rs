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

/// One of the five seed changes (shared/SEEDS.md).
#[derive(Clone, Copy, Debug)]
pub struct ChangeDef {
    /// Identifier of the change ([`ModelRow::change`]).
    pub id: &'static str,
    /// The model's before-switch for it (`ptlab run --before NAME`).
    pub model_switch: &'static str,
    /// Number in SEEDS.md.
    pub seed: u8,
    pub title: &'static str,
    /// Kernel release that merged it.
    pub kernel: &'static str,
    /// Live workloads of the contrast, baseline (the per-PTE / small /
    /// copying arm) first.
    pub arms: &'static [&'static str],
    /// What the live contrast shows on this machine's kernel.
    pub reading: &'static str,
}

/// The five changes, in SEEDS.md order.
pub const CHANGES: &[ChangeDef] = &[
    ChangeDef {
        id: "mremap-pte-batch",
        model_switch: "mremap-pte-batch",
        seed: 1,
        title: "mremap: move PTEs of a large folio as one batch",
        kernel: "6.17",
        arms: &["mremap-batch-4k", "mremap-batch-64k"],
        reading: "On x86-64 the batch is 1 PTE (pte_batch_hint), so 64 KiB folios should not be slower than 4 KiB pages; the gain is arm64 contpte's.",
    },
    ChangeDef {
        id: "mremap-table-move",
        model_switch: "mremap-table-move",
        seed: 2,
        title: "mremap: move a whole page table at once",
        kernel: "4.20",
        arms: &["mremap-table-unaligned", "mremap-table-aligned"],
        reading: "Unaligned = the per-PTE path (what every move cost before); aligned = PMD entries re-pointed at the existing PTE tables.",
    },
    ChangeDef {
        id: "fork-pte-batch",
        model_switch: "fork-pte-batch",
        seed: 3,
        title: "fork: copy PTE batches",
        kernel: "6.9",
        arms: &["fork-4k", "fork-thp-pte"],
        reading: "PTE-mapped THPs are copied a folio batch at a time (one refcount/mapcount update per batch); order-0 pages must not get slower.",
    },
    ChangeDef {
        id: "mprotect-pte-batch",
        model_switch: "mprotect-pte-batch",
        seed: 4,
        title: "mprotect: change protection on PTE batches",
        kernel: "6.17",
        arms: &["mprotect-4k", "mprotect-64k", "mprotect-thp-pte"],
        reading: "Large folios are changed in batches found by folio_pte_batch(); small folios pay an extra folio lookup per PTE.",
    },
    ChangeDef {
        id: "uffd-move",
        model_switch: "uffd-move-batch",
        seed: 5,
        title: "userfaultfd: move pages instead of copying them (UFFDIO_MOVE)",
        kernel: "6.8",
        arms: &["uffd-copy", "uffd-move"],
        reading: "UFFDIO_COPY allocates and copies each page and the source must be released; UFFDIO_MOVE re-maps the page.",
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
    fn case(&self, name: &str) -> Option<&Case> {
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
            Model::Rows { rows, .. } => rows.iter().filter(|r| r.change == ch.id).collect(),
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

/// The terminal report.
pub fn terminal(r: &Reproduction) -> String {
    let mut s = String::new();
    for ch in CHANGES {
        let _ = writeln!(
            s,
            "== {}. {} (Linux {}) [{}] ==",
            ch.seed, ch.title, ch.kernel, ch.id
        );
        let arms = r.arm_rows(ch);
        let unit = arm_unit(ch);
        if !arms.is_empty() {
            let _ = writeln!(
                s,
                "live, this machine ({unit}; + = better than {}; *x%* = significant, Welch p < 0.05):",
                ch.arms[0]
            );
            let _ = writeln!(
                s,
                "  {:<24} {:>3} {:>22} {:>10} {:>10} {:>10}  vs baseline",
                "workload", "n", "mean ± stdev", "median", "min", "max"
            );
        }
        for a in &arms {
            let m = &a.summary;
            let vs = match a.vs_base {
                None => "baseline".to_string(),
                Some((pct, ratio, p)) => format!("{} ({ratio:.2}x)", change_mark(pct, p)),
            };
            let _ = writeln!(
                s,
                "  {:<24} {:>3} {:>22} {:>10} {:>10} {:>10}  {vs}",
                a.workload,
                m.n,
                format!("{} ± {}", num(m.mean), num(m.stdev)),
                num(m.median),
                num(m.min),
                num(m.max),
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
                    "model (predicted ns per operation, before -> after {}):",
                    ch.id
                );
                if rows.is_empty() {
                    let _ = writeln!(s, "  (no predictions for this change)");
                }
                for m in rows {
                    let _ = writeln!(
                        s,
                        "  {:<24} {:<14} {:<7} {:>12} -> {:>12}  {:+.1}%   events before: {} | after: {}",
                        m.workload,
                        m.profile,
                        m.arch,
                        num(m.before_ns),
                        num(m.after_ns),
                        m.pct_better(),
                        top_events(&m.before_events, 3),
                        top_events(&m.after_events, 3)
                    );
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

/// A bar of a chart panel.
struct Bar {
    label: String,
    value: f64,
    err: Option<f64>,
    class: &'static str,
}

/// One panel of bars with a linear axis from 0, value labels and optional
/// ±err whiskers, at (x, y) of size w×h.
fn panel(out: &mut String, x: f64, y: f64, w: f64, h: f64, title: &str, bars: &[Bar]) {
    let _ = write!(
        out,
        r#"<g class="panel" transform="translate({x},{y})"><text class="ptitle" x="{}" y="14" text-anchor="middle">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    let (top, bottom, left) = (28.0, 70.0, 10.0);
    let ph = h - top - bottom;
    let max = bars
        .iter()
        .map(|b| b.value + b.err.unwrap_or(0.0))
        .fold(0.0f64, f64::max);
    if bars.is_empty() || max <= 0.0 || !max.is_finite() {
        let _ = write!(
            out,
            r#"<text class="empty" x="{}" y="{}" text-anchor="middle">no data</text></g>"#,
            w / 2.0,
            h / 2.0
        );
        return;
    }
    let slot = (w - left * 2.0) / bars.len() as f64;
    let bw = (slot * 0.6).min(70.0);
    let _ = write!(
        out,
        r#"<line class="axis" x1="{left}" y1="{}" x2="{}" y2="{}"/>"#,
        top + ph,
        w - left,
        top + ph
    );
    for (i, b) in bars.iter().enumerate() {
        let cx = left + slot * (i as f64 + 0.5);
        let bh = (b.value / max * ph).max(0.5);
        let by = top + ph - bh;
        let _ = write!(
            out,
            r#"<rect class="bar {}" x="{:.1}" y="{by:.1}" width="{bw:.1}" height="{bh:.1}"><title>{}: {}</title></rect>"#,
            b.class,
            cx - bw / 2.0,
            esc(&b.label),
            num(b.value)
        );
        if let Some(e) = b.err.filter(|e| *e > 0.0) {
            let y1 = top + ph - (b.value + e) / max * ph;
            let y2 = top + ph - ((b.value - e).max(0.0)) / max * ph;
            let _ = write!(
                out,
                r#"<line class="err" x1="{cx:.1}" y1="{y1:.1}" x2="{cx:.1}" y2="{y2:.1}"/><line class="err" x1="{:.1}" y1="{y1:.1}" x2="{:.1}" y2="{y1:.1}"/>"#,
                cx - 5.0,
                cx + 5.0
            );
        }
        let _ = write!(
            out,
            r#"<text class="val" x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            by - 4.0,
            num(b.value)
        );
        // Labels: wrap at '/' or ' ' into up to three short lines.
        for (k, part) in b.label.split('|').enumerate() {
            let _ = write!(
                out,
                r#"<text class="lbl" x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                top + ph + 14.0 + 12.0 * k as f64,
                esc(part)
            );
        }
    }
    out.push_str("</g>");
}

/// The SVG chart of one change: live arms (mean ± stdev) on the left,
/// model before/after per workload and profile on the right.
pub fn chart(r: &Reproduction, ch: &ChangeDef) -> String {
    let arms = r.arm_rows(ch);
    let live: Vec<Bar> = arms
        .iter()
        .map(|a| Bar {
            label: a.workload.clone(),
            value: a.summary.mean,
            err: Some(a.summary.stdev),
            class: "live",
        })
        .collect();
    let mrows = r.model_rows(ch);
    let mut model = Vec::new();
    for m in &mrows {
        for (when, v, class) in [
            ("before", m.before_ns, "before"),
            ("after", m.after_ns, "after"),
        ] {
            model.push(Bar {
                label: format!("{}|{} {}|{when}", m.workload, m.profile, m.arch),
                value: v,
                err: None,
                class,
            });
        }
    }
    let mw = (model.len().max(6) as f64 * 60.0).min(900.0);
    let (lw, h) = (60.0 + 140.0 * live.len().max(2) as f64, 300.0);
    let w = lw + mw + 20.0;
    let mut s = format!(
        r#"<svg class="chart" data-change="{}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{}">"#,
        ch.id,
        esc(ch.title)
    );
    let unit = arm_unit(ch);
    panel(
        &mut s,
        0.0,
        0.0,
        lw,
        h,
        &format!("live: {unit} (mean ± stdev)"),
        &live,
    );
    match &r.model {
        Model::Unavailable(why) => {
            let _ = write!(
                s,
                r#"<g class="panel" transform="translate({},0)"><text class="ptitle" x="{}" y="14" text-anchor="middle">model</text><text class="empty" x="{}" y="{}" text-anchor="middle">{}</text></g>"#,
                lw + 20.0,
                mw / 2.0,
                mw / 2.0,
                h / 2.0,
                esc(why)
            );
        }
        Model::Rows { .. } => panel(
            &mut s,
            lw + 20.0,
            0.0,
            mw,
            h,
            "model: predicted ns per operation, before vs after",
            &model,
        ),
    }
    s.push_str("</svg>");
    s
}

const CSS: &str = "
body { font-family: 'DejaVu Sans', Arial, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
table.env td, details.counters td { text-align: left; } details.counters { margin: 0.4em 0; font-size: 0.9em; } td.sig { font-weight: bold; } .note { color: #555; font-size: 0.9em; }
.skip { color: #a40; } .unavailable { color: #a40; font-style: italic; }
svg.chart { display: block; margin: 0.8em 0; background: #fafafa; border: 1px solid #ddd; }
svg .bar.live { fill: #4a79b5; } svg .bar.before { fill: #c9823b; } svg .bar.after { fill: #4f9d5d; }
svg .err, svg .axis { stroke: #333; stroke-width: 1; }
svg text { font-size: 11px; fill: #222; } svg .ptitle { font-size: 12px; font-weight: bold; }
svg .empty { fill: #a40; font-style: italic; }
";

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

/// The self-contained HTML report.
pub fn html(r: &Reproduction) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ptlab reproduce</title><style>{CSS}</style></head><body>\n"
    );
    let e = &r.environment;
    let _ = write!(
        s,
        "<h1>ptlab reproduce{}</h1>\n<p class=\"note\">{}</p>\n<p>The five seed changes: each workload measured live on this machine \
         (mean ± stdev of per-run means; % change against the first arm, + = better, bold = significant by \
         Welch's t-test at p &lt; 0.05) next to the model's predictions before and after the change.</p>\n",
        if r.quick { " (--quick)" } else { "" },
        esc(&r
            .live
            .as_ref()
            .map_or(String::new(), |l| format!("live run started {}", l.started)))
    );
    let _ = writeln!(
        s,
        "<table class=\"env\"><tr><th>kernel</th><td>{}</td></tr><tr><th>CPU</th><td>{} ({} CPUs)</td></tr>\
         <tr><th>memory</th><td>{} MiB</td></tr><tr><th>THP</th><td>{}</td></tr><tr><th>config ({})</th><td>{}</td></tr>\
         <tr><th>ptlab</th><td>{} {}</td></tr><tr><th>load average at start</th><td>{}</td></tr></table>",
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
        esc(&e.load_avg)
    );
    for n in &e.notes {
        let _ = writeln!(s, "<p class=\"note\">{}</p>", esc(n));
    }
    for ch in CHANGES {
        let _ = write!(
            s,
            "<section class=\"change\" id=\"{}\"><h2>{}. {} (Linux {})</h2>\n<p class=\"note\">{}</p>\n",
            ch.id,
            ch.seed,
            esc(ch.title),
            ch.kernel,
            esc(ch.reading)
        );
        let arms = r.arm_rows(ch);
        s.push_str("<table class=\"live\"><tr><th>workload (live)</th><th>unit</th><th>n</th><th>mean ± stdev</th><th>median</th><th>min</th><th>max</th><th>95% CI ±</th><th>vs baseline</th></tr>\n");
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
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} ± {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td{class}>{}</td></tr>",
                esc(&a.workload),
                esc(&a.unit),
                m.n,
                num(m.mean),
                num(m.stdev),
                num(m.median),
                num(m.min),
                num(m.max),
                num(m.ci95),
                esc(&vs)
            );
        }
        s.push_str("</table>\n");
        counters_details(&mut s, r, ch);
        for (w, why) in r.skipped_for(ch) {
            let _ = writeln!(s, "<p class=\"skip\">{}: skipped: {}</p>", esc(w), esc(why));
        }
        match &r.model {
            Model::Unavailable(why) => {
                let _ = writeln!(s, "<p class=\"unavailable\">{}</p>", esc(why));
            }
            Model::Rows { source, .. } => {
                let _ = writeln!(
                    s,
                    "<table class=\"model\"><caption>model ({})</caption><tr><th>workload (model)</th><th>profile</th><th>arch</th><th>before ns</th><th>after ns</th><th>change</th><th>events before</th><th>events after</th></tr>",
                    esc(source)
                );
                for m in r.model_rows(ch) {
                    let _ = writeln!(
                        s,
                        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:+.1}%</td><td>{}</td><td>{}</td></tr>",
                        esc(&m.workload),
                        esc(&m.profile),
                        esc(&m.arch),
                        num(m.before_ns),
                        num(m.after_ns),
                        m.pct_better(),
                        esc(&top_events(&m.before_events, 4)),
                        esc(&top_events(&m.after_events, 4))
                    );
                }
                s.push_str("</table>\n");
            }
        }
        s.push_str(&chart(r, ch));
        s.push_str("\n</section>\n");
    }
    s.push_str("<p class=\"note\">Files: live.json (ptlab bench result; <code>ptlab compare</code> reads it), model.json (model rows, when available).</p>\n</body></html>\n");
    s
}

/// Write report.html, live.json (if any) and model.json (if any) to `dir`.
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
                    ["a", "b"].into_iter().map(move |p| ModelRow {
                        change: c.id.into(),
                        workload: (*w).into(),
                        profile: p.into(),
                        arch: "arm64".into(),
                        before_ns: 200.0,
                        after_ns: 150.0,
                        before_events: [("ptep_get".to_string(), 16u64)].into(),
                        after_events: [("ptep_get".to_string(), 1u64)].into(),
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
            assert!(t.contains(&format!("[{}]", ch.id)), "{t}");
        }
        assert_eq!(t.matches(NO_MODEL).count(), CHANGES.len());
        assert!(t.contains("mremap-table-aligned"));
        assert!(t.contains("*+99.0%* (0.01x)"), "{t}");
        assert!(t.contains("uffd-move: SKIPPED: no /dev/userfaultfd"));
        let with = terminal(&synthetic(true));
        assert!(!with.contains(NO_MODEL));
        assert!(with.contains("-> "));
        assert!(with.contains("+25.0%"), "{with}");
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
                assert!(h.contains(&format!("data-change=\"{}\"", ch.id)));
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
            assert_eq!(live_rows, vec![2, 2, 2, 3, 1]);
            // One counters table per change with a measured arm.
            assert_eq!(h.matches("<details class=\"counters\">").count(), 5);
            // Live bars: one per measured case.
            assert_eq!(h.matches("class=\"bar live\"").count(), 10);
            if model {
                let model_rows = h.matches("<table class=\"model\">").count();
                assert_eq!(model_rows, 5);
                // 2 profiles × (2+2+2+3+2) workloads, before and after bars.
                assert_eq!(h.matches("class=\"bar before\"").count(), 22);
                assert_eq!(h.matches("class=\"bar after\"").count(), 22);
            } else {
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
            assert!(
                ptlab_model::Before::from_switch(ch.model_switch).is_some(),
                "{}",
                ch.model_switch
            );
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
}
