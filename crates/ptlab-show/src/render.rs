//! Rows to SVG, panels to one self-contained HTML page.
//!
//! Every drawn object carries `data-*` attributes so that a test (or a
//! curious reader with the browser's inspector) can count what is shown and
//! compare it with the state: see docs/show.md, "Structure of the page".

use crate::layout::{layout_proc, Cover, LayoutOptions, PteMode, Row};
use crate::snapshot::{
    Changes, ProcSnap, Pte, PteKind, Slot, Snapshot, Source, VmaSnap, ENTRIES, HUGE_ZERO_FOLIO,
};
use crate::HwEvent;
use ptlab_model::arch::LeafFlags;
use ptlab_model::PMD_SIZE;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// One column group of the page: the state at one moment.
#[derive(Clone, Debug)]
pub struct Panel {
    /// "After step 7", "Before step 7", "Final state", ...
    pub title: String,
    /// What the step was, e.g. "line 12: fork child".
    pub subtitle: String,
    pub snapshot: Snapshot,
    /// Entries the step changed, per process name (empty: no comparison).
    pub changes: BTreeMap<String, Changes>,
    /// Processes that exist here but not in the compared panel.
    pub new_procs: Vec<String>,
    /// Draw the hardware events on this panel.
    pub events: bool,
    /// PTE-table frames of the compared (earlier) panel, per process:
    /// frame → the slot address the table mapped then. Lets the picture say
    /// which tables moved (mremap's whole-table moves).
    pub prev_tables: BTreeMap<String, HashMap<u64, u64>>,
}

impl Panel {
    /// A panel with no comparison.
    pub fn single(title: &str, subtitle: &str, snapshot: Snapshot) -> Panel {
        Panel {
            title: title.to_string(),
            subtitle: subtitle.to_string(),
            snapshot,
            changes: BTreeMap::new(),
            new_procs: Vec::new(),
            events: true,
            prev_tables: BTreeMap::new(),
        }
    }

    /// Two panels, before and after one step, with the entries that
    /// changed marked in both.
    pub fn before_after(
        before: Snapshot,
        after: Snapshot,
        titles: (&str, &str),
        subtitle: &str,
    ) -> (Panel, Panel) {
        let mut changes = BTreeMap::new();
        let mut new_procs = Vec::new();
        for a in &after.procs {
            match before.proc(&a.name) {
                Some(b) => {
                    changes.insert(a.name.clone(), Changes::between(b, a));
                }
                None => new_procs.push(a.name.clone()),
            }
        }
        let prev_tables = before
            .procs
            .iter()
            .map(|p| {
                let frames = p
                    .slots
                    .iter()
                    .filter_map(|(va, s)| match s {
                        Slot::Table { frame: Some(f), .. } => Some((*f, *va)),
                        _ => None,
                    })
                    .collect();
                (p.name.clone(), frames)
            })
            .collect();
        let gone: Vec<String> = before
            .procs
            .iter()
            .filter(|b| after.proc(&b.name).is_none())
            .map(|b| b.name.clone())
            .collect();
        (
            Panel {
                title: titles.0.to_string(),
                subtitle: subtitle.to_string(),
                snapshot: before,
                changes: changes.clone(),
                new_procs: gone,
                events: false,
                prev_tables: BTreeMap::new(),
            },
            Panel {
                title: titles.1.to_string(),
                subtitle: subtitle.to_string(),
                snapshot: after,
                changes,
                new_procs,
                events: true,
                prev_tables,
            },
        )
    }
}

/// The whole page.
#[derive(Clone, Debug, Default)]
pub struct Picture {
    pub title: String,
    /// Lines under the title (file, architecture, backend, run summary).
    pub subtitle: Vec<String>,
    pub panels: Vec<Panel>,
    /// Hardware events of the step (batches, TLB invalidations). `None`:
    /// not recorded, for the reason in `events_unavailable`.
    pub events: Option<Vec<HwEvent>>,
    /// Why `events` is None (printed as is); None: the live kernel's
    /// reason (it cannot tell which batches and invalidations it used).
    pub events_unavailable: Option<String>,
    /// Extra lines shown at the bottom (run failures, notes).
    pub notes: Vec<String>,
}

/// Knobs of the rendering.
#[derive(Clone, Copy, Debug, Default)]
pub struct RenderOptions {
    pub layout: LayoutOptions,
}

// ---- geometry ---------------------------------------------------------------

const COL_W: f64 = 584.0;
const ADDR_X: f64 = 4.0;
const BAND_X: f64 = 80.0;
const BAND_W: f64 = 10.0;
const TREE_X: f64 = 96.0;
const INDENT: f64 = 14.0;
const CELL: f64 = 13.0;
const COLS: usize = 32;
const GRID_ROWS: usize = ENTRIES / COLS;
const GRID_W: f64 = CELL * COLS as f64;
const CAPTION: f64 = 16.0;

const VMA_COLORS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#9c755f", "#76b7b2",
];

fn content_x(depth: u8) -> f64 {
    TREE_X + depth as f64 * INDENT + 6.0
}

// ---- small helpers ----------------------------------------------------------

/// HTML/XML escaping for text and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `4 KiB`, `2 MiB`, `1.5 GiB`, ...
pub fn fmt_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("B", 1),
    ];
    for (name, unit) in UNITS {
        if bytes >= unit {
            let whole = bytes / unit;
            let frac = (bytes % unit) * 10 / unit;
            return if frac == 0 || whole >= 100 {
                format!("{whole} {name}")
            } else {
                format!("{whole}.{frac} {name}")
            };
        }
    }
    "0 B".to_string()
}

fn folio_size(order: u8) -> String {
    let b = 4096u64 << order;
    if b >= 1 << 20 {
        format!("{}M", b >> 20)
    } else {
        format!("{}K", b >> 10)
    }
}

fn flags_text(f: Option<LeafFlags>) -> String {
    let Some(f) = f else {
        return String::new();
    };
    let mut s = vec![if f.contains(LeafFlags::PROTNONE) {
        "protnone"
    } else if f.contains(LeafFlags::WRITE) {
        "rw"
    } else {
        "ro"
    }];
    for (bit, name) in [
        (LeafFlags::DIRTY, "dirty"),
        (LeafFlags::YOUNG, "young"),
        (LeafFlags::CONT, "cont"),
        (LeafFlags::SPECIAL, "special"),
        (LeafFlags::UFFD_WP, "uffd-wp"),
        (LeafFlags::SOFT_DIRTY, "soft-dirty"),
        (LeafFlags::EXEC, "exec"),
    ] {
        if f.contains(bit) {
            s.push(name);
        }
    }
    s.join(" ")
}

fn marks_text(p: &Pte) -> String {
    let mut s = String::new();
    if p.kind == PteKind::Anon {
        if p.x {
            s.push_str("X ");
        }
        if p.ax {
            s.push_str("AX ");
        }
        let _ = write!(s, "cnt={}", p.cnt);
    }
    s
}

/// Folio names (F1, F2, ... by first drawing) and colours, shared by all
/// panels so that one folio has one colour everywhere.
#[derive(Default)]
struct Folios {
    names: HashMap<u64, u32>,
}

impl Folios {
    fn id(&mut self, key: u64) -> u32 {
        let n = self.names.len() as u32 + 1;
        *self.names.entry(key).or_insert(n)
    }

    fn name(&mut self, p: &Pte) -> String {
        match p.kind {
            PteKind::Anon if p.folio != 0 => format!("F{}", self.id(p.folio)),
            PteKind::Anon => "F?".to_string(),
            PteKind::HugeZero => "hugezero".to_string(),
            PteKind::Zero => "zero".to_string(),
            PteKind::Swap => "swap".to_string(),
            PteKind::Guard => "guard".to_string(),
            PteKind::None => String::new(),
        }
    }

    fn color(&mut self, p: &Pte) -> String {
        match p.kind {
            PteKind::Anon if p.folio != 0 && p.folio != HUGE_ZERO_FOLIO => {
                let id = self.id(p.folio);
                let hue = (id as f64 * 137.508) % 360.0;
                if p.order == 0 {
                    format!("hsl({hue:.0},45%,74%)")
                } else {
                    format!("hsl({hue:.0},68%,60%)")
                }
            }
            PteKind::Anon => {
                if p.order == 0 {
                    "#a9c4de".to_string()
                } else {
                    "#6f9fcf".to_string()
                }
            }
            PteKind::Zero => "#dedede".to_string(),
            PteKind::HugeZero => "#c4c4c4".to_string(),
            PteKind::Swap => "#8a7fb8".to_string(),
            PteKind::Guard => "#c0392b".to_string(),
            PteKind::None => "#fff".to_string(),
        }
    }
}

/// Shared SVG definitions (patterns), emitted once per page.
const DEFS: &str = r##"<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>
<pattern id="hatch" width="5" height="5" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="2" height="5" fill="rgba(0,0,0,0.42)"/></pattern>
<pattern id="small" width="4" height="4" patternUnits="userSpaceOnUse"><rect width="4" height="4" fill="#b9d0e6"/><rect width="2" height="4" fill="#93b5d6"/></pattern>
<pattern id="outside" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#f4f4f4"/><circle cx="3" cy="3" r="0.8" fill="#cfcfcf"/></pattern>
</defs></svg>"##;

const CSS: &str = r#"
body{font-family:"DejaVu Sans",system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:14px;color:#222;background:#fff}
h1{font-size:19px;margin:0 0 4px}
.sub{color:#444;font-size:13px;margin:1px 0}
.legend{margin:10px 0}
.panels{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.panel{border:1px solid #c8c8c8;border-radius:6px;padding:6px 6px 4px}
.panel h2{font-size:15px;margin:0}
.panel .step{font-family:"DejaVu Sans Mono",monospace;font-size:12px;color:#333;margin:2px 0 6px}
.procs{display:flex;gap:10px;align-items:flex-start}
figure{margin:0}
figcaption{font-size:13px;font-weight:bold;margin:0 0 2px 4px}
figcaption .meta{font-weight:normal;color:#555;font-size:12px}
.new{color:#b35806}
.events,.notes,.stats{font-size:13px;margin-top:12px;max-width:1200px}
.events li,.notes li{font-family:"DejaVu Sans Mono",monospace;font-size:12px}
table.stats{border-collapse:collapse}
table.stats td{padding:1px 10px 1px 0;font-family:"DejaVu Sans Mono",monospace;font-size:12px}
svg .t{font-size:11px}
svg .s{font-size:10px}
svg .m{font-family:"DejaVu Sans Mono",monospace;font-size:10px}
svg .g{fill:#666}
svg .b{font-weight:bold}
svg .z{font-size:9px;fill:#555;text-anchor:middle}
svg .chg{fill:#b0191e}
svg .pc{stroke:#fff;stroke-width:.6}
svg .pn{stroke:#d0d0d0;stroke-width:.6}
"#;

/// Render the page.
pub fn render_html(pic: &Picture, opts: &RenderOptions) -> String {
    let mut folios = Folios::default();
    // Each process column gets an equal share of the budgets.
    let columns = pic
        .panels
        .iter()
        .map(|p| p.snapshot.procs.len())
        .sum::<usize>()
        .max(1);
    let share = crate::layout::Budget {
        grids: opts.layout.grid_budget.div_ceil(columns),
        strips: opts.layout.strip_budget.div_ceil(columns),
    };
    let mut h = String::with_capacity(64 * 1024);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    let _ = writeln!(
        h,
        "<title>{}</title><style>{CSS}</style></head><body>",
        esc(&pic.title)
    );
    h.push_str(DEFS);
    let _ = writeln!(h, "<h1>{}</h1>", esc(&pic.title));
    for s in &pic.subtitle {
        let _ = writeln!(h, "<div class=\"sub\">{}</div>", esc(s));
    }
    let _ = writeln!(
        h,
        "<div class=\"legend\">{}</div>",
        legend(pictures_arm64(pic))
    );
    h.push_str("<div class=\"panels\">\n");
    for (pi, panel) in pic.panels.iter().enumerate() {
        let _ = writeln!(
            h,
            "<section class=\"panel\" data-kind=\"panel\" data-panel=\"{pi}\" data-title=\"{}\"><h2>{}</h2><div class=\"step\">{}</div><div class=\"procs\">",
            esc(&panel.title),
            esc(&panel.title),
            esc(&panel.subtitle)
        );
        if panel.snapshot.procs.is_empty() {
            h.push_str("<p>No process exists at this point.</p>");
        }
        for p in &panel.snapshot.procs {
            let changes = panel.changes.get(&p.name);
            let events: Vec<&HwEvent> = match (&pic.events, panel.events) {
                (Some(ev), true) => ev.iter().filter(|e| e.process() == p.name).collect(),
                _ => Vec::new(),
            };
            let mut budget = share;
            let layout = layout_proc(p, panel.snapshot.source, changes, &mut budget);
            let svg = ProcSvg {
                p,
                source: panel.snapshot.source,
                changes,
                events: &events,
                folios: &mut folios,
                prev_tables: panel.prev_tables.get(&p.name),
            }
            .render(&layout.rows);
            let (ptes, leaves) = p.counts();
            let tables = if panel.snapshot.source == Source::Model {
                format!(
                    " · {} page-table pages",
                    p.upper.len() as u64 + p.pte_tables() + p.deposited
                )
            } else {
                String::new()
            };
            let new = if panel.new_procs.contains(&p.name) {
                if panel.events {
                    " <span class=\"new\">(new)</span>"
                } else {
                    " <span class=\"new\">(gone after the step)</span>"
                }
            } else {
                ""
            };
            let changed = changes.map_or(String::new(), |c| {
                let t = c.total();
                format!(
                    " · {t} {} changed",
                    if t == 1 { "entry" } else { "entries" }
                )
            });
            let _ = writeln!(
                h,
                "<figure style=\"width:{COL_W}px\" data-kind=\"process\" data-process=\"{}\" data-panel=\"{pi}\" data-vmas=\"{}\" data-ptes=\"{ptes}\" data-pmd-leaves=\"{leaves}\"><figcaption>{}{new} <span class=\"meta\">{} VMAs · RSS {}{} · {} PTEs + {} PMD leaves{}</span></figcaption>{svg}</figure>",
                esc(&p.name),
                p.vmas.len(),
                esc(&p.name),
                p.vmas.len(),
                fmt_size(p.rss_kb() * 1024),
                tables,
                ptes,
                leaves,
                changed
            );
        }
        h.push_str("</div></section>\n");
    }
    h.push_str("</div>\n");
    stats_section(&mut h, pic);
    events_section(&mut h, pic);
    if !pic.notes.is_empty() {
        h.push_str("<div class=\"notes\"><b>Notes</b><ul>");
        for n in &pic.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul></div>");
    }
    h.push_str("</body></html>\n");
    h
}

/// THP counters: per panel, changes since the first panel (or absolute).
fn stats_section(h: &mut String, pic: &Picture) {
    if pic.panels.len() < 2 {
        return;
    }
    let a = &pic.panels[0].snapshot.stats;
    let b = &pic.panels[pic.panels.len() - 1].snapshot.stats;
    let mut rows = String::new();
    for (k, v) in b {
        let d = v - a.get(k).copied().unwrap_or(0);
        if d != 0 {
            let _ = write!(rows, "<tr><td>{}</td><td>{d:+}</td></tr>", esc(k));
        }
    }
    if rows.is_empty() {
        rows.push_str("<tr><td>none</td></tr>");
    }
    let _ = write!(
        h,
        "<div class=\"stats\" data-kind=\"stats\"><b>THP counters changed by the step</b><table class=\"stats\">{rows}</table></div>"
    );
}

fn events_section(h: &mut String, pic: &Picture) {
    h.push_str("<div class=\"events\" data-kind=\"events\"><b>Operation's work: batches and TLB invalidations</b>");
    match &pic.events {
        None => {
            let why = pic.events_unavailable.clone().unwrap_or_else(|| {
                "Not shown: the live kernel cannot tell which batches and TLB invalidations it used \
                 (it shows only the result); run on the model (--backend model) to see them. \
                 Entries the step changed are outlined in red."
                    .to_string()
            });
            let _ = write!(h, "<p data-kind=\"events-unavailable\">{}</p>", esc(&why));
        }
        Some(ev) if ev.is_empty() => {
            h.push_str("<p>No batches or TLB invalidations were recorded for this step.</p>")
        }
        Some(ev) => {
            let _ = write!(h, "<ul>");
            for line in summarize_events(ev) {
                let _ = write!(h, "<li>{}</li>", esc(&line));
            }
            h.push_str("</ul>");
        }
    }
    h.push_str("</div>\n");
}

/// The event list, with runs of equal batches over consecutive entries
/// folded into one line (a 1 GiB step has tens of thousands of batches).
pub(crate) fn summarize_events(ev: &[crate::HwEvent]) -> Vec<String> {
    use crate::HwEvent;
    let mut out = Vec::new();
    let mut i = 0;
    while i < ev.len() {
        if let HwEvent::Batch {
            process,
            va,
            nr,
            op,
        } = &ev[i]
        {
            let mut j = i + 1;
            let mut next = va + nr * 4096;
            while let Some(HwEvent::Batch {
                process: p2,
                va: v2,
                nr: n2,
                op: o2,
            }) = ev.get(j)
            {
                if p2 != process || o2 != op || n2 != nr || *v2 != next {
                    break;
                }
                next += n2 * 4096;
                j += 1;
            }
            if j - i > 1 {
                out.push(format!(
                    "{process}: {} batches {op} of {nr} entries each, {va:012x}-{next:012x} ({})",
                    j - i,
                    fmt_size(next - va)
                ));
                i = j;
                continue;
            }
        }
        out.push(ev[i].describe());
        i += 1;
    }
    out
}

/// Whether a picture is of arm64 page tables: the model's architecture,
/// or for /proc snapshots the machine's own.
fn pictures_arm64(pic: &Picture) -> bool {
    pic.panels.iter().any(|p| match p.snapshot.arch {
        Some(a) => a == ptlab_model::ArchKind::Arm64,
        None => cfg!(target_arch = "aarch64"),
    })
}

/// The legend: one sample of every mark the picture can have (the arm64
/// contiguous block only on arm64).
fn legend(arm64: bool) -> String {
    let mut s = String::new();
    let _ = write!(s, "<svg width=\"1180\" height=\"40\" data-kind=\"legend\">");
    let mut x = 4.0;
    let y = 6.0;
    let mut item = |s: &mut String, draw: &str, label: &str| {
        let _ = write!(
            s,
            "<g transform=\"translate({x},{y})\">{draw}<text class=\"t\" x=\"17\" y=\"10\">{}</text></g>",
            esc(label)
        );
        x += 24.0 + label.len() as f64 * 6.1;
    };
    let cell = |fill: &str| {
        format!("<rect width=\"12\" height=\"12\" fill=\"{fill}\" stroke=\"#ccc\" stroke-width=\"0.5\"/>")
    };
    item(
        &mut s,
        &cell("hsl(137,68%,60%)"),
        "page of a large folio (one colour per folio)",
    );
    item(&mut s, &cell("hsl(275,45%,74%)"), "4K folio");
    item(
        &mut s,
        &format!(
            "{}<rect width=\"12\" height=\"12\" fill=\"url(#hatch)\"/>",
            cell("hsl(137,68%,60%)")
        ),
        "shared (kpagecount ≥ 2)",
    );
    item(
        &mut s,
        &format!(
            "{}<rect y=\"9\" width=\"12\" height=\"3\" fill=\"#222\"/>",
            cell("hsl(137,68%,60%)")
        ),
        "write-protected PTE",
    );
    item(
        &mut s,
        &format!(
            "{}<text class=\"z\" x=\"6\" y=\"10\">0</text>",
            cell("#dedede")
        ),
        "zero page",
    );
    item(&mut s, &cell("#fff"), "none");
    item(&mut s, &cell("url(#outside)"), "outside every VMA");
    let _ = write!(s, "</svg><svg width=\"1180\" height=\"24\">");
    x = 4.0;
    let y = 4.0;
    let mut item2 = |s: &mut String, draw: &str, label: &str| {
        let _ = write!(
            s,
            "<g transform=\"translate({x},{y})\">{draw}<text class=\"t\" x=\"30\" y=\"10\">{}</text></g>",
            esc(label)
        );
        x += 40.0 + label.len() as f64 * 6.1;
    };
    item2(&mut s, "<rect x=\"0.5\" y=\"0.5\" width=\"25\" height=\"12\" fill=\"none\" stroke=\"#111\" stroke-width=\"1\"/>", "folio boundary");
    if arm64 {
        item2(&mut s, "<rect x=\"1\" y=\"1\" width=\"24\" height=\"11\" fill=\"none\" stroke=\"#1f3a93\" stroke-width=\"2.5\"/>", "arm64 contiguous block (CONT)");
    }
    item2(&mut s, "<rect x=\"1\" y=\"1\" width=\"24\" height=\"11\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\"/>", "changed by the step");
    item2(&mut s, "<rect x=\"1\" y=\"1\" width=\"24\" height=\"11\" fill=\"none\" stroke=\"#e86a00\" stroke-width=\"2.5\" stroke-dasharray=\"5 2\"/>", "one batch");
    item2(
        &mut s,
        "<rect x=\"11\" y=\"0\" width=\"4\" height=\"13\" fill=\"#e6194b\"/>",
        "TLB invalidation (next to the VMA band)",
    );
    s.push_str("</svg>");
    s
}

// ---- one process ------------------------------------------------------------

struct ProcSvg<'a> {
    p: &'a ProcSnap,
    source: Source,
    changes: Option<&'a Changes>,
    events: &'a [&'a HwEvent],
    folios: &'a mut Folios,
    prev_tables: Option<&'a HashMap<u64, u64>>,
}

fn vma_color(i: usize) -> &'static str {
    VMA_COLORS[i % VMA_COLORS.len()]
}

impl ProcSvg<'_> {
    fn render(mut self, rows: &[Row]) -> String {
        let mut body = String::with_capacity(16 * 1024);
        let mut y = 4.0;
        // (row index, top, height, content top, content bottom)
        let mut placed: Vec<(usize, f64, f64, f64, f64)> = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            let (h, c0, c1) = self.row(&mut body, r, y);
            placed.push((i, y, h, y + c0, y + c1));
            y += h;
        }
        let height = y + 6.0;
        let mut back = String::new();
        // Tree connectors: from each table row down to its last child.
        for (k, &(i, top, h, _, _)) in placed.iter().enumerate() {
            let d = rows[i].depth();
            if !matches!(rows[i], Row::Upper { .. }) {
                continue;
            }
            let x = TREE_X + d as f64 * INDENT + 4.0;
            let mut last = None;
            for &(j, t2, _, _, _) in &placed[k + 1..] {
                let dj = rows[j].depth();
                if dj <= d {
                    break;
                }
                if dj == d + 1 {
                    last = Some(t2 + 9.0);
                    let _ = write!(
                        back,
                        "<path d=\"M{x} {:.1}h{}\" stroke=\"#999\" fill=\"none\"/>",
                        t2 + 9.0,
                        INDENT - 2.0
                    );
                }
            }
            if let Some(ly) = last {
                let _ = write!(
                    back,
                    "<path d=\"M{x} {:.1}V{ly:.1}\" stroke=\"#999\" fill=\"none\"/>",
                    top + h - 6.0
                );
            }
        }
        // VMA bands next to every memory row, proportional to addresses.
        for &(i, _, _, c0, c1) in &placed {
            let Some((s, e)) = rows[i].range() else {
                continue;
            };
            for (k, v) in self.p.vmas.iter().enumerate() {
                if v.end <= s || v.start >= e {
                    continue;
                }
                let span = (e - s) as f64;
                let a = c0 + (v.start.max(s) - s) as f64 / span * (c1 - c0);
                let b = c0 + (v.end.min(e) - s) as f64 / span * (c1 - c0);
                let _ = write!(
                    back,
                    "<rect data-kind=\"vma-band\" data-vma=\"{k}\" x=\"{BAND_X}\" y=\"{a:.1}\" width=\"{BAND_W}\" height=\"{:.1}\" fill=\"{}\"/>",
                    (b - a).max(1.0),
                    vma_color(k)
                );
            }
            // TLB invalidations as marks beside the band.
            for ev in self.events {
                if let HwEvent::TlbFlush { start, end, .. } = ev {
                    let (fs, fe) = if end <= start { (s, e) } else { (*start, *end) };
                    if fe <= s || fs >= e {
                        continue;
                    }
                    let span = (e - s) as f64;
                    let a = c0 + (fs.max(s) - s) as f64 / span * (c1 - c0);
                    let b = c0 + (fe.min(e) - s) as f64 / span * (c1 - c0);
                    let _ = write!(
                        back,
                        "<rect data-kind=\"tlb\" x=\"{}\" y=\"{a:.1}\" width=\"4\" height=\"{:.1}\" fill=\"#e6194b\"><title>{}</title></rect>",
                        BAND_X + BAND_W + 2.0,
                        (b - a).max(1.5),
                        esc(&ev.describe())
                    );
                }
            }
        }
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{COL_W}\" height=\"{height:.0}\" viewBox=\"0 0 {COL_W} {height:.0}\">{back}{body}</svg>"
        )
    }

    /// Draw one row at `y`; returns (height, content top, content bottom)
    /// relative to `y`.
    fn row(&mut self, o: &mut String, r: &Row, y: f64) -> (f64, f64, f64) {
        match *r {
            Row::Upper {
                depth,
                level,
                va,
                frame,
                used,
                virtual_region,
            } => {
                let x = TREE_X + depth as f64 * INDENT;
                let span = crate::snapshot::table_span(level);
                let label = if virtual_region {
                    format!("1 GiB region {:012x}–{:012x} (/proc view)", va, va + span)
                } else {
                    let name = match level {
                        4 => "PGD",
                        3 => "PUD table",
                        _ => "PMD table",
                    };
                    let cov = if level == 4 {
                        String::new()
                    } else {
                        format!(" {:012x}–{:012x}", va, va.saturating_add(span))
                    };
                    format!("{name}{cov} · {}/512 used", used.unwrap_or(0))
                };
                let kind = if virtual_region { "region" } else { "table" };
                let _ = write!(
                    o,
                    "<g data-kind=\"{kind}\" data-level=\"{level}\" data-va=\"{va:#x}\"{}><rect x=\"{x}\" y=\"{:.1}\" width=\"9\" height=\"9\" fill=\"#555\"/><text class=\"t b\" x=\"{}\" y=\"{:.1}\">{}</text>{}</g>",
                    frame.map_or(String::new(), |f| format!(" data-frame=\"{f:#x}\"")),
                    y + 4.0,
                    x + 13.0,
                    y + 12.0,
                    esc(&label),
                    frame.map_or(String::new(), |f| format!("<title>page-table page at frame {f:#x}</title>")),
                );
                (20.0, 0.0, 20.0)
            }
            Row::Missing {
                depth,
                level,
                start,
                end,
                n,
            } => {
                let x = content_x(depth);
                let what = match (level, n) {
                    (3, 1) => "no PUD table (PGD entry none)".to_string(),
                    (3, n) => format!("no PUD tables ({n} PGD entries none)"),
                    (2, 1) => "no PMD table (PUD entry none)".to_string(),
                    (2, n) => format!("no PMD tables ({n} PUD entries none)"),
                    (0, n) => format!("{n} regions of 1 GiB with no page (pagemap)"),
                    _ => "no table".to_string(),
                };
                self.addr(o, start, y + 12.0);
                let _ = write!(
                    o,
                    "<g data-kind=\"missing\" data-level=\"{level}\" data-count=\"{n}\"><text class=\"t g\" x=\"{x}\" y=\"{:.1}\">{what} · {} of VMA here, nothing mapped</text></g>",
                    y + 12.0,
                    fmt_size(self.vma_bytes(start, end))
                );
                (18.0, 0.0, 18.0)
            }
            Row::Vma { depth, idx } => {
                let v = &self.p.vmas[idx];
                let x = content_x(depth);
                let _ = write!(
                    o,
                    "<g data-kind=\"vma\" data-vma=\"{idx}\" data-start=\"{:#x}\" data-end=\"{:#x}\" data-perms=\"{}\" data-flags=\"{}\"><rect x=\"{BAND_X}\" y=\"{:.1}\" width=\"{BAND_W}\" height=\"32\" fill=\"{}\"/><rect x=\"{}\" y=\"{:.1}\" width=\"{}\" height=\"30\" rx=\"3\" fill=\"{}\" fill-opacity=\"0.13\" stroke=\"{}\"/><text class=\"t b\" x=\"{}\" y=\"{:.1}\">VMA {:012x}–{:012x} {} · {}</text><text class=\"s\" x=\"{}\" y=\"{:.1}\">{} · Rss {} · AnonHugePages {}</text></g>",
                    v.start,
                    v.end,
                    esc(&v.perms),
                    esc(&v.flags.join(" ")),
                    y + 1.0,
                    vma_color(idx),
                    x - 2.0,
                    y + 1.0,
                    COL_W - x - 2.0,
                    vma_color(idx),
                    vma_color(idx),
                    x + 3.0,
                    y + 13.0,
                    v.start,
                    v.end,
                    esc(&v.perms),
                    fmt_size(v.end - v.start),
                    x + 3.0,
                    y + 26.0,
                    esc(&vma_flags_line(v)),
                    fmt_size(v.rss_kb * 1024),
                    fmt_size(v.anon_huge_kb * 1024),
                );
                (33.0, 0.0, 33.0)
            }
            Row::Gap {
                depth,
                start,
                first,
                n,
                cover,
            } => {
                let x = content_x(depth);
                let none = if self.source == Source::Proc {
                    "no pages present"
                } else {
                    "none"
                };
                let where_ = match cover {
                    Cover::Outside => "no VMA".to_string(),
                    Cover::One(k) => format!("inside VMA {}, nothing mapped", k + 1),
                    Cover::Mixed(_) => "partly inside a VMA, nothing mapped".to_string(),
                };
                self.addr(o, start, y + 12.0);
                let _ = write!(
                    o,
                    "<g data-kind=\"gap\" data-count=\"{n}\" data-va=\"{start:#x}\"><text class=\"t g\" x=\"{x}\" y=\"{:.1}\">{} · {none} · {} · {where_}</text></g>",
                    y + 12.0,
                    pmd_range(first, n),
                    fmt_size(n as u64 * PMD_SIZE)
                );
                (18.0, 0.0, 18.0)
            }
            Row::PmdLeaves {
                depth,
                start,
                first,
                n,
                changed,
            } => self.pmd_leaves(o, depth, start, first, n, changed, y),
            Row::Ptes {
                depth,
                start,
                first,
                n,
                mode,
                uniform,
                present,
                changed,
            } => {
                let Some(Slot::Table { ptes, used, frame }) = self.p.slots.get(&start) else {
                    return (0.0, 0.0, 0.0);
                };
                let x = content_x(depth);
                self.addr(o, start, y + 12.0);
                let what = if mode == PteMode::Mixed {
                    format!(
                        "{n} PTE tables ({}) of varied layouts",
                        fmt_size(n as u64 * PMD_SIZE)
                    )
                } else if self.source == Source::Proc {
                    "PTE-mapped pages".to_string()
                } else if n == 1 {
                    format!("PTE table · {used}/512 used")
                } else {
                    format!(
                        "{n} PTE tables ({}), one layout",
                        fmt_size(n as u64 * PMD_SIZE)
                    )
                };
                // Facts under the body, one small line each.
                let mut lines: Vec<(String, &str)> = Vec::new();
                if n > 1 && mode == PteMode::Grid {
                    lines.push((
                        format!(
                            "first table shown; the other {} map other frames the same way",
                            n - 1
                        ),
                        "s g",
                    ));
                }
                if uniform && mode != PteMode::Grid {
                    lines.push((uniform_text(&ptes[0], n), "s"));
                }
                let mut notes = Vec::new();
                if changed > 0 {
                    notes.push(format!(
                        "{changed} {} changed by the step",
                        if changed == 1 { "entry" } else { "entries" }
                    ));
                }
                if let Some((moved, from)) = self.moved_tables(start, n) {
                    notes.push(format!(
                        "{moved} table page{} moved here (mapped {from:012x}… before the step)",
                        if moved == 1 { "" } else { "s" }
                    ));
                }
                if !notes.is_empty() {
                    lines.push((notes.join(" · "), "s chg"));
                }
                let _ = write!(
                    o,
                    "<g data-kind=\"pte-table\" data-layout=\"{}\" data-tables=\"{n}\" data-present=\"{present}\" data-changed=\"{changed}\" data-va=\"{start:#x}\"{}>",
                    match mode {
                        PteMode::Grid => "grid",
                        PteMode::Strip => "strip",
                        PteMode::Summary => "summary",
                        PteMode::Mixed => "mixed",
                    },
                    frame.map_or(String::new(), |f| format!(" data-frame=\"{f:#x}\""))
                );
                let (each, per) = if mode == PteMode::Mixed {
                    (" in all", present)
                } else if n > 1 {
                    (" each", present / n as u64)
                } else {
                    ("", present)
                };
                let _ = write!(
                    o,
                    "<text class=\"t\" x=\"{x}\" y=\"{:.1}\"><tspan class=\"b\">{}</tspan> → {what} · {per} present{each}</text>",
                    y + 12.0,
                    pmd_range(first, n)
                );
                let (body, c0, c1) = match mode {
                    PteMode::Grid => {
                        let h = self.grid(o, ptes, start, x, y + CAPTION);
                        (h, CAPTION, CAPTION + h)
                    }
                    PteMode::Strip | PteMode::Summary => {
                        self.strip(o, ptes, start, x, y + CAPTION, 16.0);
                        (20.0, 0.0, 0.0)
                    }
                    PteMode::Mixed => {
                        self.columns(o, start, n, x, y + CAPTION, 16.0);
                        (20.0, 0.0, 0.0)
                    }
                };
                let mut ty = y + CAPTION + body + 9.0;
                for (text, class) in &lines {
                    let _ = write!(
                        o,
                        "<text class=\"{class}\" x=\"{x}\" y=\"{ty:.1}\">{}</text>",
                        esc(text)
                    );
                    ty += 12.0;
                }
                let h = CAPTION + body + 12.0 * lines.len() as f64 + 4.0;
                let res = if mode == PteMode::Grid {
                    (h, c0, c1)
                } else {
                    (h, 0.0, h)
                };
                o.push_str("</g>");
                res
            }
        }
    }

    /// Tables of the run `[start, start + n slots)` whose page-table page
    /// mapped another address in the compared panel: (count, first old address).
    fn moved_tables(&self, start: u64, n: usize) -> Option<(u64, u64)> {
        let prev = self.prev_tables?;
        let mut moved = 0;
        let mut from = None;
        for k in 0..n as u64 {
            let va = start + k * PMD_SIZE;
            if let Some(Slot::Table { frame: Some(f), .. }) = self.p.slots.get(&va) {
                if let Some(&old) = prev.get(f) {
                    if old != va {
                        moved += 1;
                        from.get_or_insert(old);
                    }
                }
            }
        }
        from.map(|f| (moved, f))
    }

    fn vma_bytes(&self, start: u64, end: u64) -> u64 {
        self.p
            .vmas
            .iter()
            .map(|v| v.end.min(end).saturating_sub(v.start.max(start)))
            .sum()
    }

    fn addr(&self, o: &mut String, va: u64, y: f64) {
        let _ = write!(
            o,
            "<text class=\"m g\" x=\"{ADDR_X}\" y=\"{y:.1}\">{va:012x}</text>"
        );
    }

    fn in_vma(&self, va: u64) -> bool {
        let i = self.p.vmas.partition_point(|v| v.end <= va);
        i < self.p.vmas.len() && self.p.vmas[i].start <= va
    }

    #[allow(clippy::too_many_arguments)]
    fn pmd_leaves(
        &mut self,
        o: &mut String,
        depth: u8,
        start: u64,
        first: usize,
        n: usize,
        changed: u64,
        y: f64,
    ) -> (f64, f64, f64) {
        let Some(Slot::Leaf { pte, deposited }) = self.p.slots.get(&start) else {
            return (0.0, 0.0, 0.0);
        };
        let x = content_x(depth);
        self.addr(o, start, y + 12.0);
        let name = self.folios.name(pte);
        let fill = self.folios.color(pte);
        let what = match pte.kind {
            PteKind::HugeZero => "huge zero page".to_string(),
            _ if n == 1 => format!("2M THP {name}"),
            _ => format!(
                "{n} × 2M THPs ({}), first {name}",
                fmt_size(n as u64 * PMD_SIZE)
            ),
        };
        let leaf = if n == 1 { "PMD leaf" } else { "PMD leaves" };
        let dep = if *deposited {
            " · + deposited PTE table"
        } else {
            ""
        };
        let _ = write!(
            o,
            "<g data-kind=\"pmd-leaf\" data-count=\"{n}\" data-folio=\"{}\" data-va=\"{start:#x}\"><text class=\"t\" x=\"{x}\" y=\"{:.1}\"><tspan class=\"b\">{}</tspan> → {leaf}: {}{dep}</text><rect x=\"{x}\" y=\"{:.1}\" width=\"{GRID_W}\" height=\"14\" fill=\"{fill}\" stroke=\"#111\"/><text class=\"s\" x=\"{x}\" y=\"{:.1}\">{}{}{}</text>",
            esc(&name),
            y + 12.0,
            pmd_range(first, n),
            esc(&what),
            y + CAPTION,
            y + CAPTION + 25.0,
            if n > 1 { "each: " } else { "" },
            esc(&flags_text(pte.flags)),
            esc(&if pte.kind == PteKind::Anon {
                format!(" · {}", marks_text(pte))
            } else {
                String::new()
            }),
        );
        if pte.cnt >= 2 {
            let _ = write!(
                o,
                "<rect x=\"{x}\" y=\"{:.1}\" width=\"{GRID_W}\" height=\"14\" fill=\"url(#hatch)\"/>",
                y + CAPTION
            );
        }
        if changed > 0 {
            let _ = write!(
                o,
                "<rect data-kind=\"changed\" data-count=\"{changed}\" x=\"{}\" y=\"{:.1}\" width=\"{}\" height=\"12\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\"/>",
                x + 1.0,
                y + CAPTION + 1.0,
                GRID_W - 2.0
            );
        }
        self.batches_over_bar(o, start, n, x, y + CAPTION, 14.0);
        o.push_str("</g>");
        (CAPTION + 32.0, 0.0, CAPTION + 32.0)
    }

    /// Every entry as a cell.
    fn grid(&mut self, o: &mut String, ptes: &[Pte; ENTRIES], slot: u64, x0: f64, y0: f64) -> f64 {
        let cell = |i: usize| -> (f64, f64) {
            (x0 + (i % COLS) as f64 * CELL, y0 + (i / COLS) as f64 * CELL)
        };
        // Offsets of grid rows in the address column.
        for r in (0..GRID_ROWS).step_by(4).skip(1) {
            let _ = write!(
                o,
                "<text class=\"m g\" x=\"{}\" y=\"{:.1}\">+{}</text>",
                ADDR_X + 24.0,
                y0 + r as f64 * CELL + 10.0,
                fmt_size(r as u64 * COLS as u64 * 4096).replace(' ', "")
            );
        }
        let mut marks = String::new();
        for (i, e) in ptes.iter().enumerate() {
            let va = slot + i as u64 * 4096;
            let (cx, cy) = cell(i);
            let inside = self.in_vma(va);
            let (state, fill, class) = match e.kind {
                PteKind::None if !inside => ("outside", "url(#outside)".to_string(), ""),
                PteKind::None => ("none", "#fff".to_string(), " class=\"pn\""),
                PteKind::Anon => ("anon", self.folios.color(e), " class=\"pc\""),
                PteKind::Zero => ("zero", self.folios.color(e), " class=\"pc\""),
                PteKind::HugeZero => ("hugezero", self.folios.color(e), " class=\"pc\""),
                PteKind::Swap => ("swap", self.folios.color(e), " class=\"pc\""),
                PteKind::Guard => ("guard", self.folios.color(e), " class=\"pc\""),
            };
            // Empty cells need no tooltip (their address is the row's plus
            // the offset), and there are many of them.
            let title = if matches!(state, "outside" | "none") {
                String::new()
            } else {
                format!("<title>{}</title>", esc(&self.tooltip(e, va, inside)))
            };
            let folio = if e.kind == PteKind::Anon {
                format!(" data-folio=\"{}\"", self.folios.name(e))
            } else {
                String::new()
            };
            let _ = write!(
                o,
                "<rect data-kind=\"pte\" data-state=\"{state}\"{folio}{class} x=\"{cx:.0}\" y=\"{cy:.0}\" width=\"12\" height=\"12\" fill=\"{fill}\">{title}</rect>"
            );
            if e.kind == PteKind::Anon && e.cnt >= 2 {
                let _ = write!(
                    marks,
                    "<rect x=\"{cx:.0}\" y=\"{cy:.0}\" width=\"12\" height=\"12\" fill=\"url(#hatch)\" pointer-events=\"none\"/>"
                );
            }
            if e.present() && e.kind != PteKind::Zero && e.read_only() {
                let _ = write!(
                    marks,
                    "<rect x=\"{cx:.0}\" y=\"{:.0}\" width=\"12\" height=\"3\" fill=\"#222\" pointer-events=\"none\"/>",
                    cy + 9.0
                );
            }
            if e.kind == PteKind::Zero {
                let _ = write!(
                    marks,
                    "<text class=\"z\" x=\"{:.0}\" y=\"{:.0}\" pointer-events=\"none\">0</text>",
                    cx + 6.0,
                    cy + 10.0
                );
            }
        }
        o.push_str(&marks);
        // VMA edges inside the table: a bar at the left of the first entry of each VMA.
        for v in &self.p.vmas {
            for edge in [v.start, v.end] {
                if edge > slot && edge < slot + PMD_SIZE {
                    let (cx, cy) = cell(((edge - slot) / 4096) as usize);
                    let _ = write!(
                        o,
                        "<rect data-kind=\"vma-edge\" x=\"{:.1}\" y=\"{:.0}\" width=\"2\" height=\"13\" fill=\"#222\"/>",
                        cx - 1.5,
                        cy - 0.5
                    );
                }
            }
        }
        // Folio outlines: runs of one large folio, per grid row.
        self.runs_per_row(
            o,
            ptes,
            x0,
            y0,
            |a, b| {
                a.kind == PteKind::Anon
                    && a.order > 0
                    && b.kind == PteKind::Anon
                    && a.folio == b.folio
                    && a.folio != 0
                    && a.index + 1 == b.index
            },
            |e| e.kind == PteKind::Anon && e.order > 0,
            "folio-outline",
            "fill=\"none\" stroke=\"#111\" stroke-width=\"1\"",
            0.0,
        );
        // arm64 contiguous blocks: 16 aligned entries all carrying CONT.
        for b in 0..ENTRIES / 16 {
            if ptes[b * 16..b * 16 + 16].iter().all(|e| e.cont()) {
                let (cx, cy) = cell(b * 16);
                let _ = write!(
                    o,
                    "<rect data-kind=\"cont\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#1f3a93\" stroke-width=\"2.5\"/>",
                    cx - 0.25,
                    cy - 0.25,
                    16.0 * CELL - 0.5,
                    CELL - 0.5
                );
            }
        }
        // Entries the step changed.
        if let Some(ch) = self.changes {
            let bits: Vec<bool> = (0..ENTRIES).map(|i| ch.is_changed(slot, i)).collect();
            for r in 0..GRID_ROWS {
                let mut i = 0;
                while i < COLS {
                    let k = r * COLS + i;
                    if !bits[k] {
                        i += 1;
                        continue;
                    }
                    let mut j = i;
                    while j < COLS && bits[r * COLS + j] {
                        j += 1;
                    }
                    let (cx, cy) = cell(k);
                    let _ = write!(
                        o,
                        "<rect data-kind=\"changed\" data-count=\"{}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"11\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\"/>",
                        j - i,
                        cx + 0.5,
                        cy + 0.5,
                        (j - i) as f64 * CELL - 2.0
                    );
                    i = j;
                }
            }
        }
        // Batches from the event list.
        for ev in self.events {
            if let HwEvent::Batch { va, nr, .. } = ev {
                let s = (*va).max(slot);
                let e = (va + nr * 4096).min(slot + PMD_SIZE);
                if s >= e {
                    continue;
                }
                let (a, b) = (((s - slot) / 4096) as usize, ((e - slot) / 4096) as usize);
                let _ = write!(
                    o,
                    "<g data-kind=\"batch\" data-va=\"{va:#x}\" data-nr=\"{nr}\"><title>{}</title>",
                    esc(&ev.describe())
                );
                let mut i = a;
                while i < b {
                    let row_end = ((i / COLS) + 1) * COLS;
                    let j = b.min(row_end);
                    let (cx, cy) = cell(i);
                    let _ = write!(
                        o,
                        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"14\" fill=\"none\" stroke=\"#e86a00\" stroke-width=\"2.5\" stroke-dasharray=\"5 2\"/>",
                        cx - 1.0,
                        cy - 1.0,
                        (j - i) as f64 * CELL + 1.0
                    );
                    i = j;
                }
                o.push_str("</g>");
            }
        }
        GRID_ROWS as f64 * CELL
    }

    /// Outline runs of consecutive entries (within a grid row) that `joins`
    /// links, for entries where `want` holds.
    #[allow(clippy::too_many_arguments)]
    fn runs_per_row(
        &self,
        o: &mut String,
        ptes: &[Pte; ENTRIES],
        x0: f64,
        y0: f64,
        joins: impl Fn(&Pte, &Pte) -> bool,
        want: impl Fn(&Pte) -> bool,
        kind: &str,
        style: &str,
        inset: f64,
    ) {
        for r in 0..GRID_ROWS {
            let mut i = 0;
            while i < COLS {
                let k = r * COLS + i;
                if !want(&ptes[k]) {
                    i += 1;
                    continue;
                }
                let mut j = i + 1;
                while j < COLS && joins(&ptes[r * COLS + j - 1], &ptes[r * COLS + j]) {
                    j += 1;
                }
                let _ = write!(
                    o,
                    "<rect data-kind=\"{kind}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" {style}/>",
                    x0 + i as f64 * CELL - 0.5 + inset,
                    y0 + r as f64 * CELL - 0.5 + inset,
                    (j - i) as f64 * CELL - 2.0 * inset,
                    CELL - 2.0 * inset
                );
                i = j;
            }
        }
    }

    /// One bar for a table: a segment per run of alike entries (a folio
    /// per segment for large folios; runs of 4K folios merged).
    fn strip(
        &mut self,
        o: &mut String,
        ptes: &[Pte; ENTRIES],
        slot: u64,
        x0: f64,
        y0: f64,
        h: f64,
    ) {
        #[derive(PartialEq, Clone, Copy)]
        struct Key {
            kind: PteKind,
            inside: bool,
            folio: u64,
            small: bool,
            shared: bool,
            ro: bool,
            changed: bool,
        }
        let key = |s: &Self, i: usize| -> Key {
            let e = &ptes[i];
            Key {
                kind: e.kind,
                inside: s.in_vma(slot + i as u64 * 4096),
                folio: if e.order > 0 { e.folio } else { 0 },
                small: e.order == 0,
                shared: e.cnt >= 2,
                ro: e.read_only(),
                changed: s.changes.is_some_and(|c| c.is_changed(slot, i)),
            }
        };
        let mut segs: Vec<(usize, usize, Key)> = Vec::new();
        for i in 0..ENTRIES {
            let k = key(self, i);
            match segs.last_mut() {
                Some((_, end, last))
                    if *last == k && (k.folio == 0 || ptes[i - 1].index + 1 == ptes[i].index) =>
                {
                    *end = i + 1
                }
                _ => segs.push((i, i + 1, k)),
            }
        }
        if segs.len() > 128 {
            // Too fine to draw: one segment per 8 entries, keyed by the
            // first, neighbours with equal keys merged.
            let mut coarse: Vec<(usize, usize, Key)> = Vec::new();
            for b in 0..ENTRIES / 8 {
                let k = key(self, b * 8);
                match coarse.last_mut() {
                    Some((_, end, last)) if *last == k => *end = b * 8 + 8,
                    _ => coarse.push((b * 8, b * 8 + 8, k)),
                }
            }
            segs = coarse;
        }
        let w = GRID_W / ENTRIES as f64;
        let _ = write!(
            o,
            "<rect x=\"{x0}\" y=\"{y0:.1}\" width=\"{GRID_W}\" height=\"{h}\" fill=\"none\" stroke=\"#888\"/>"
        );
        for (a, b, k) in &segs {
            let e = &ptes[*a];
            let fill = match k.kind {
                PteKind::None if !k.inside => "url(#outside)".to_string(),
                PteKind::Anon if k.small => "url(#small)".to_string(),
                _ => self.folios.color(e),
            };
            let (sx, sw) = (x0 + *a as f64 * w, (*b - *a) as f64 * w);
            let _ = write!(
                o,
                "<rect data-kind=\"pte-run\" data-count=\"{}\" x=\"{sx:.2}\" y=\"{y0:.1}\" width=\"{sw:.2}\" height=\"{h}\" fill=\"{fill}\"{}/>",
                b - a,
                if k.folio != 0 { " stroke=\"#111\" stroke-width=\"0.4\"" } else { "" }
            );
            if k.shared {
                let _ = write!(o, "<rect x=\"{sx:.2}\" y=\"{y0:.1}\" width=\"{sw:.2}\" height=\"{h}\" fill=\"url(#hatch)\"/>");
            }
            if k.ro && k.kind == PteKind::Anon {
                let _ = write!(o, "<rect x=\"{sx:.2}\" y=\"{:.1}\" width=\"{sw:.2}\" height=\"3\" fill=\"#222\"/>", y0 + h - 3.0);
            }
            if k.changed {
                let _ = write!(
                    o,
                    "<rect data-kind=\"changed\" data-count=\"{}\" x=\"{:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{}\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\"/>",
                    b - a,
                    sx + 1.0,
                    y0 + 1.0,
                    (sw - 2.0).max(0.5),
                    h - 2.0
                );
            }
        }
        // CONT blocks as ticks under the bar.
        let conts = (0..ENTRIES / 16)
            .filter(|b| ptes[b * 16..b * 16 + 16].iter().all(|e| e.cont()))
            .count();
        if conts > 0 {
            for b in 0..ENTRIES / 16 {
                if ptes[b * 16..b * 16 + 16].iter().all(|e| e.cont()) {
                    let _ = write!(
                        o,
                        "<rect data-kind=\"cont\" x=\"{:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"2.5\" fill=\"#1f3a93\"/>",
                        x0 + (b * 16) as f64 * w + 0.5,
                        y0 + h + 0.5,
                        16.0 * w - 1.0
                    );
                }
            }
        }
        self.batches_over_bar(o, slot, 1, x0, y0, h);
    }

    /// One column per table of a mixed run: its height is the share of
    /// present entries; tables the step changed get a red cap.
    fn columns(&mut self, o: &mut String, start: u64, n: usize, x0: f64, y0: f64, h: f64) {
        let _ = write!(
            o,
            "<rect x=\"{x0}\" y=\"{y0:.1}\" width=\"{GRID_W}\" height=\"{h}\" fill=\"#f7f7f7\" stroke=\"#888\"/>"
        );
        let w = GRID_W / n as f64;
        for k in 0..n {
            let va = start + k as u64 * PMD_SIZE;
            let Some(slot) = self.p.slots.get(&va) else {
                continue;
            };
            let share = slot.present() as f64 / ENTRIES as f64;
            let ch = self.changes.map_or(0, |c| c.count_in(va));
            let _ = write!(
                o,
                "<rect x=\"{:.2}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"{}\"/>",
                x0 + k as f64 * w,
                y0 + h * (1.0 - share),
                w.max(0.5),
                h * share,
                if ch > 0 { "#d98c8c" } else { "#7aa6d6" }
            );
        }
        self.batches_over_bar(o, start, n, x0, y0, h);
    }

    /// Batches drawn over a bar that stands for `n` slots from `start`:
    /// a count, since single entries are too small to outline.
    fn batches_over_bar(&self, o: &mut String, start: u64, n: usize, x0: f64, y0: f64, h: f64) {
        let end = start + n as u64 * PMD_SIZE;
        let mut count = 0;
        for ev in self.events {
            if let HwEvent::Batch { va, nr, .. } = ev {
                if *va < end && va + nr * 4096 > start {
                    count += 1;
                    let _ = write!(
                        o,
                        "<g data-kind=\"batch\" data-va=\"{va:#x}\" data-nr=\"{nr}\"></g>"
                    );
                }
            }
        }
        if count > 0 {
            let _ = write!(
                o,
                "<rect x=\"{x0}\" y=\"{:.1}\" width=\"{GRID_W}\" height=\"{}\" fill=\"none\" stroke=\"#e86a00\" stroke-width=\"2.5\" stroke-dasharray=\"5 2\"/><text class=\"s\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{count} batches</text>",
                y0 - 1.0,
                h + 2.0,
                x0 + GRID_W,
                y0 - 4.0
            );
        }
    }

    fn tooltip(&mut self, e: &Pte, va: u64, inside: bool) -> String {
        match e.kind {
            PteKind::None if !inside => format!("{va:012x} outside every VMA"),
            PteKind::None => format!("{va:012x} none"),
            PteKind::Zero => format!("{va:012x} zero page {}", flags_text(e.flags)),
            PteKind::HugeZero => format!("{va:012x} huge zero page idx {}", e.index),
            PteKind::Swap => format!("{va:012x} swap entry {:#x}", e.raw),
            PteKind::Guard => format!("{va:012x} guard marker (any access: SIGSEGV)"),
            PteKind::Anon => format!(
                "{va:012x} {} idx {} of {} · pfn {:#x} · {} · {}",
                self.folios.name(e),
                e.index,
                folio_size(e.order),
                e.pfn,
                flags_text(e.flags),
                marks_text(e)
            ),
        }
    }
}

fn pmd_range(first: usize, n: usize) -> String {
    if n == 1 {
        format!("PMD[{first}]")
    } else {
        format!("PMD[{first}–{}]", first + n - 1)
    }
}

fn vma_flags_line(v: &VmaSnap) -> String {
    if v.flags.is_empty() {
        "VmFlags: (none)".to_string()
    } else {
        format!("VmFlags: {}", v.flags.join(" "))
    }
}

/// "each: 512 PTEs → 32 × 64K folios · rw dirty young · X AX cnt=1"
fn uniform_text(e: &Pte, n: usize) -> String {
    let each = if n > 1 { "each: " } else { "" };
    match e.kind {
        PteKind::Zero => format!("{each}512 × zero page · {}", flags_text(e.flags)),
        _ => {
            let per = ENTRIES >> e.order.min(9);
            let what = if e.order == 0 {
                "512 × 4K folios".to_string()
            } else {
                format!(
                    "{per} × {} folio{}, mapped whole",
                    folio_size(e.order),
                    if per == 1 { "" } else { "s" }
                )
            };
            let fl = flags_text(e.flags);
            let fl = if fl.is_empty() {
                String::new()
            } else {
                format!(" · {fl}")
            };
            format!("{each}{what}{fl} · {}", marks_text(e))
        }
    }
}
