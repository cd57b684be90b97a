//! How well one cost profile predicts the live run: the accuracy targets of
//! docs/cost.md.
//!
//! * Every contrast `ptlab bench` measures (an arm against its change's
//!   baseline arm): the predicted time ratio arm / baseline, with its
//!   interval over the profile's price ranges, should lie within
//!   [`RATIO_TARGET`] (25 %) of the live ratio of the same run.
//! * Every arm: the predicted time per operation should lie within
//!   [`ABS_TARGET`] (1.5×) of the live mean, either way.
//!
//! Beside each arm the table says what the prediction is made of (which
//! parts of the kernel's work the model prices: [`PARTS`]), so that a miss
//! can be read against it.

use crate::report::{ChangeDef, Model, ModelRow, Reproduction, CHANGES};
use crate::stats::Summary;

/// A predicted ratio is on target within ±25 % of the live ratio.
pub const RATIO_TARGET: f64 = 0.25;
/// A predicted absolute time is on target within 1.5× of live, either way.
pub const ABS_TARGET: f64 = 1.5;

/// The parts of the kernel's work a prediction is split into, each with
/// the event names (or name prefixes, ending in `_`) it holds. Events in
/// none of them (prices added later) are reported as `other`.
pub const PARTS: &[(&str, &[&str])] = &[
    (
        "page tables + TLB",
        &[
            "pte_",
            "cont_",
            "pmd_",
            "pud_",
            "ptl_",
            "pt_page_",
            "tlb",
            "dsb_",
            "mprotect_pass",
            "mprotect_large_batch",
            "modify_prot_pte",
            "rmap_lock",
        ],
    ),
    (
        "struct page/folio",
        &[
            "struct_page_line",
            "struct_page_line_",
            "mprotect_page_line",
            "folio_ref_atomic",
            "mapcount_atomic",
            "rmap_update",
            "folio_alloc",
            "folio_alloc_",
            "memcg_charge",
            "lru_add",
            "folio_free",
            "anon_vma_lock",
        ],
    ),
    (
        "syscall/fault entry, process",
        &["syscall", "page_fault", "process_", "fault_"],
    ),
    (
        "VMAs",
        &["vma_", "uffd_move_lock", "uffd_mfill_lock", "mremap_vma"],
    ),
    (
        "page data (zero, copy, user access)",
        &[
            "page_zero",
            "page_copy",
            "user_page_access",
            "clear_",
            "user_",
        ],
    ),
    ("swap", &["swap_"]),
];

/// Which part of [`PARTS`] an event (by name) belongs to.
pub fn part_of(event: &str) -> &'static str {
    for (part, names) in PARTS {
        if names.iter().any(|n| {
            if n.ends_with('_') || *n == "tlb" {
                event.starts_with(n)
            } else {
                event == *n
            }
        }) {
            return part;
        }
    }
    "other"
}

/// Shares of `ns_by_event` (event name, ns) per part, largest first.
pub fn shares(ns_by_event: &[(String, f64)]) -> Vec<(String, f64)> {
    let total: f64 = ns_by_event.iter().map(|x| x.1).sum();
    if total <= 0.0 {
        return Vec::new();
    }
    let mut by: Vec<(String, f64)> = Vec::new();
    for (e, ns) in ns_by_event {
        let p = part_of(e);
        match by.iter_mut().find(|x| x.0 == p) {
            Some(x) => x.1 += ns / total,
            None => by.push((p.to_string(), ns / total)),
        }
    }
    by.sort_by(|a, b| b.1.total_cmp(&a.1));
    by
}

/// What the live number of a workload times (its timed span in
/// `crate::workload`), and so which figure of the model is judged against
/// it. Every arm times system calls over a region populated before the
/// timed span: no fault is taken and no user loop runs inside it, so the
/// whole-program figure of the timed calls is the one judged; it equals
/// the page-table figure except where the call itself allocates and copies
/// (UFFDIO_COPY).
pub fn live_times(workload: &str) -> &'static str {
    use crate::workload::Kind;
    match crate::workload::find(workload).map(|w| w.kind) {
        Some(Kind::MremapBatch) => "one mremap of a populated 1 MiB (the memset, mmap and munmap untimed)",
        Some(Kind::MremapTable { .. }) => "one mremap of the populated region",
        Some(Kind::Fork) => "fork() in the parent (the child's exit and the wait untimed)",
        Some(Kind::Mprotect) => "the mprotect RO + RW pair (the explicit_bzero after it timed apart: the whole-loop row)",
        Some(Kind::Uffd { moves: true }) => "per live page one UFFDIO_MOVE, plus the final MADV_DONTNEED",
        Some(Kind::Uffd { moves: false }) => "per live page one UFFDIO_COPY (a folio allocated, charged, added to the LRU, copied), plus the MADV_DONTNEED",
        Some(Kind::Pageout) => "one MADV_PAGEOUT of the populated region (reclaim and swap-out I/O included)",
        None => "?",
    }
}

/// The figure judged against live: the whole-program one when the row has
/// it, else (results saved before it existed) the page-table one.
fn judged(ch: &ChangeDef, m: &ModelRow) -> (f64, Option<(f64, f64)>, &'static str) {
    match m.program_ns {
        Some(ns) => (ns, m.program_range, "whole program"),
        None => (ch.current_ns(m), m.cur_range, "page-table"),
    }
}

/// One contrast: predicted and live ratio arm / baseline.
#[derive(Clone, Debug)]
pub struct RatioRow {
    pub change: &'static ChangeDef,
    pub base: &'static str,
    pub arm: &'static str,
    /// The judged figure's ratio (whole program when the rows have it).
    pub predicted: f64,
    pub range: Option<(f64, f64)>,
    /// Which figure `predicted` is: `whole program` or `page-table`.
    pub figure: &'static str,
    /// The page-table figure's ratio and interval, for comparison.
    pub page_table: f64,
    pub page_table_range: Option<(f64, f64)>,
    pub live: f64,
    /// The live ratio's 95 % interval (Welch, relative to the baseline).
    pub live_ci: Option<(f64, f64)>,
    /// (predicted − live) / live, in %.
    pub error_pct: f64,
}

impl RatioRow {
    pub fn on_target(&self) -> bool {
        self.error_pct.abs() <= RATIO_TARGET * 100.0
    }
}

/// One arm: predicted and live time per operation.
#[derive(Clone, Debug, PartialEq)]
pub struct AbsRow {
    pub workload: String,
    pub unit: String,
    /// What the live number times ([`live_times`]).
    pub times: String,
    /// Which figure `predicted` is: `whole program`, or `page-table` for
    /// rows saved before the whole-program figure existed.
    pub figure: &'static str,
    /// The judged figure's time (whole program when the row has it).
    pub predicted: f64,
    pub range: Option<(f64, f64)>,
    /// The page-table figure's time (`None` on a whole-loop row, which
    /// only the whole-program figure prices).
    pub page_table: Option<f64>,
    pub live: Summary,
    pub priced: Vec<(String, f64)>,
}

impl AbsRow {
    /// predicted / live.
    pub fn ratio(&self) -> f64 {
        self.predicted / self.live.mean
    }
    pub fn on_target(&self) -> bool {
        let r = self.ratio();
        (1.0 / ABS_TARGET..=ABS_TARGET).contains(&r)
    }
}

fn row<'a>(r: &'a Reproduction, workload: &str, profile: &str) -> Option<&'a ModelRow> {
    match &r.model {
        Model::Rows { rows, .. } => rows
            .iter()
            .find(|m| m.workload == workload && m.profile == profile),
        Model::Unavailable(_) => None,
    }
}

fn live_of(r: &Reproduction, workload: &str) -> Option<(Vec<f64>, String)> {
    let c = r.live.as_ref()?.cases.iter().find(|c| c.name == workload)?;
    Some((c.samples.clone(), c.unit.clone()))
}

/// Every contrast with both arms live and predicted on `profile`.
pub fn ratio_rows(r: &Reproduction, profile: &str) -> Vec<RatioRow> {
    let mut out = Vec::new();
    for ch in CHANGES {
        let base = ch.arms[0];
        for arm in &ch.arms[1..] {
            let (Some((bs, _)), Some((xs, _))) = (live_of(r, base), live_of(r, arm)) else {
                continue;
            };
            let (Some(mb), Some(ma)) = (row(r, base, profile), row(r, arm, profile)) else {
                continue;
            };
            let (Some(lb), Some(la)) = (Summary::of(&bs), Summary::of(&xs)) else {
                continue;
            };
            let live = la.mean / lb.mean;
            let page_table = ch.current_ns(ma) / ch.current_ns(mb);
            let ((pa, _, fa), (pb, _, fb)) = (judged(ch, ma), judged(ch, mb));
            let (predicted, range, figure) = if fa == fb && fa == "whole program" {
                (pa / pb, ma.program_vs_base, fa)
            } else {
                (page_table, ma.vs_base, "page-table")
            };
            // The ratio's own interval (not the % change's turned into a
            // ratio: that one is as wide as the base's uncertainty in
            // absolute terms, and reached 0 for the aligned move's 0.03).
            let live_ci = crate::stats::ratio_ci(&bs, &xs, 0.95);
            out.push(RatioRow {
                change: ch,
                base,
                arm,
                predicted,
                range,
                figure,
                page_table,
                page_table_range: ma.vs_base,
                live,
                live_ci,
                error_pct: (predicted - live) / live * 100.0,
            });
        }
    }
    out
}

/// Every arm measured live and predicted on `profile`, in change order.
pub fn abs_rows(r: &Reproduction, profile: &str) -> Vec<AbsRow> {
    let mut out = Vec::new();
    for ch in CHANGES {
        for arm in ch.arms {
            let Some((xs, unit)) = live_of(r, arm) else {
                continue;
            };
            let (Some(m), Some(live)) = (row(r, arm, profile), Summary::of(&xs)) else {
                continue;
            };
            let (predicted, range, figure) = judged(ch, m);
            out.push(AbsRow {
                workload: arm.to_string(),
                unit: unit.clone(),
                times: live_times(arm).to_string(),
                figure,
                predicted,
                range,
                page_table: Some(ch.current_ns(m)),
                live,
                priced: m.priced.clone(),
            });
            // The whole loop iteration, where the live run times the rest
            // of it too: each run's sample plus its extra metric.
            if let (Some(ns), Some(key)) = (m.loop_ns, &m.loop_extra) {
                let extra = r
                    .live
                    .as_ref()
                    .and_then(|l| l.cases.iter().find(|c| c.name == *arm))
                    .and_then(|c| c.extra.get(key));
                if let Some(extra) = extra.filter(|e| e.len() == xs.len()) {
                    let whole: Vec<f64> = xs.iter().zip(extra).map(|(a, b)| a + b).collect();
                    if let Some(live) = Summary::of(&whole) {
                        out.push(AbsRow {
                            workload: format!("{arm}, whole loop"),
                            unit: "ns per loop iteration".into(),
                            times: format!("the pair + {key}"),
                            figure: "whole program",
                            predicted: ns,
                            range: m.loop_range,
                            page_table: None,
                            live,
                            priced: Vec::new(),
                        });
                    }
                }
            }
        }
    }
    out
}

fn ratio_cell(x: f64, range: Option<(f64, f64)>) -> String {
    match range {
        Some((lo, hi)) => format!("{x:.3} [{lo:.3}, {hi:.3}]"),
        None => format!("{x:.3}"),
    }
}

fn priced_cell(p: &[(String, f64)]) -> String {
    if p.is_empty() {
        return "—".into();
    }
    p.iter()
        .filter(|x| x.1 >= 0.005)
        .map(|(k, v)| format!("{k} {:.0}%", v * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The contrasts table: (summary sentence, header, rows).
pub fn ratio_table(r: &Reproduction, profile: &str) -> (String, Vec<String>, Vec<Vec<String>>) {
    let ratios = ratio_rows(r, profile);
    let ok = ratios.iter().filter(|x| x.on_target()).count();
    let say = format!(
        "Contrasts (time of the arm / time of the baseline arm, both from this run): {ok} of {} predicted ratios \
         within {:.0}% of live. [a, b] after a prediction = the ratio with every price of the profile in its range. \
         Judged: the whole-program figure of what the live run times (every arm times system calls over a \
         populated region, so it equals the page-table figure except where a call allocates (UFFDIO_COPY), \
         streams source PTE tables (the unaligned mremap) or changes large-folio batches (mprotect)); \
         the page-table figure's ratio is shown beside it.",
        ratios.len(),
        RATIO_TARGET * 100.0
    );
    let head = [
        "change",
        "contrast",
        "predicted ratio, whole program [interval]",
        "page-table figure [interval]",
        "live ratio [95% CI]",
        "error",
        "within 25%",
    ]
    .map(String::from)
    .to_vec();
    let rows = ratios
        .iter()
        .map(|x| {
            vec![
                format!("{} `{}`", x.change.seed, x.change.switch),
                format!("{} vs {}", x.arm, x.base),
                if x.figure == "whole program" {
                    ratio_cell(x.predicted, x.range)
                } else {
                    "— (not in this result)".into()
                },
                ratio_cell(x.page_table, x.page_table_range),
                ratio_cell(x.live, x.live_ci),
                format!("{:+.1}%", x.error_pct),
                if x.on_target() { "yes" } else { "NO" }.into(),
            ]
        })
        .collect();
    (say, head, rows)
}

/// The arms table: (summary sentence, header, rows).
pub fn abs_table(r: &Reproduction, profile: &str) -> (String, Vec<String>, Vec<Vec<String>>) {
    let abs = abs_rows(r, profile);
    let ok = abs.iter().filter(|x| x.on_target()).count();
    let say = format!(
        "Arms (time per measured operation): {ok} of {} predictions within {ABS_TARGET}× of live. \
         \"live times\" = the timed span of the native workload; the prediction judged is the whole-program \
         figure of that span (the page-table figure beside it); a \"whole loop\" row adds the rest of the \
         loop the live run also times (the mprotect workloads' explicit_bzero: user stores). \
         \"priced\" = what the prediction is made of (shares of the predicted time); work the model \
         has no event for is not priced, so a prediction far below live names the part that is missing.",
        abs.len()
    );
    let head = [
        "arm",
        "per",
        "live times",
        "predicted, whole program [interval]",
        "page-table figure",
        "live (mean ± 95% CI)",
        "predicted / live",
        "within 1.5×",
        "priced",
    ]
    .map(String::from)
    .to_vec();
    let dur = crate::report::dur;
    let rows = abs
        .iter()
        .map(|x| {
            vec![
                x.workload.clone(),
                x.unit.trim_start_matches("ns per ").to_string(),
                x.times.clone(),
                format!(
                    "{}{}{}",
                    if x.figure == "whole program" {
                        ""
                    } else {
                        "(page-table) "
                    },
                    dur(x.predicted),
                    x.range.map_or(String::new(), |(lo, hi)| format!(
                        " [{}, {}]",
                        dur(lo),
                        dur(hi)
                    ))
                ),
                x.page_table.map_or("—".into(), dur),
                format!("{} ± {}", dur(x.live.mean), dur(x.live.ci95)),
                format!("{:.2}", x.ratio()),
                if x.on_target() { "yes" } else { "NO" }.into(),
                priced_cell(&x.priced),
            ]
        })
        .collect();
    (say, head, rows)
}

/// Both tables as Markdown (empty when nothing is both live and
/// predicted on `profile`).
pub fn markdown(r: &Reproduction, profile: &str) -> String {
    let (s1, h1, r1) = ratio_table(r, profile);
    let (s2, h2, r2) = abs_table(r, profile);
    if r1.is_empty() && r2.is_empty() {
        return String::new();
    }
    format!(
        "{s1}\n\n{}\n{s2}\n\n{}",
        crate::headline::table(&h1, &r1),
        crate::headline::table(&h2, &r2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Reproduction;
    use crate::result::{BenchResult, Better, Case};

    #[test]
    fn events_fall_into_parts() {
        assert_eq!(part_of("pte_load"), "page tables + TLB");
        assert_eq!(part_of("tlbi_page"), "page tables + TLB");
        assert_eq!(part_of("tlb_flush_call"), "page tables + TLB");
        assert_eq!(part_of("dsb_ish"), "page tables + TLB");
        assert_eq!(part_of("struct_page_line"), "struct page/folio");
        assert_eq!(part_of("syscall"), "syscall/fault entry, process");
        assert_eq!(part_of("process_create"), "syscall/fault entry, process");
        assert_eq!(part_of("vma_split"), "VMAs");
        assert_eq!(part_of("page_copy"), "page data (zero, copy, user access)");
        assert_eq!(part_of("swap_map_update"), "swap");
        assert_eq!(part_of("fault_entry"), "syscall/fault entry, process");
        assert_eq!(part_of("folio_alloc_pcp"), "struct page/folio");
        assert_eq!(part_of("memcg_charge"), "struct page/folio");
        assert_eq!(
            part_of("clear_page_4k"),
            "page data (zero, copy, user access)"
        );
        assert_eq!(
            part_of("user_store_4k"),
            "page data (zero, copy, user access)"
        );
        // Issue 15's events: every one has a part.
        for (e, part) in [
            ("struct_page_line_large", "struct page/folio"),
            ("struct_page_line_hot", "struct page/folio"),
            ("mprotect_page_line", "struct page/folio"),
            ("anon_vma_lock", "struct page/folio"),
            ("user_store_4k_large", "page data (zero, copy, user access)"),
            ("uffd_move_lock", "VMAs"),
            ("uffd_mfill_lock", "VMAs"),
            ("swap_reclaim_folio", "swap"),
            ("swap_write_bio", "swap"),
            ("swap_write_4k", "swap"),
            ("mprotect_pass", "page tables + TLB"),
            ("modify_prot_pte", "page tables + TLB"),
            ("mremap_vma", "VMAs"),
            ("pte_line_stream", "page tables + TLB"),
            ("mprotect_large_batch", "page tables + TLB"),
            ("rmap_lock", "page tables + TLB"),
        ] {
            assert_eq!(part_of(e), part, "{e}");
        }
        for e in ptlab_model::HwEvent::ALL {
            assert_ne!(part_of(e.name()), "other", "{}", e.name());
        }
        assert_eq!(part_of("something_new"), "other");
        let s = shares(&[
            ("pte_load".into(), 30.0),
            ("pte_store".into(), 30.0),
            ("syscall".into(), 40.0),
        ]);
        assert_eq!(s[0].0, "page tables + TLB");
        assert!((s[0].1 - 0.6).abs() < 1e-12 && (s[1].1 - 0.4).abs() < 1e-12);
        assert!(shares(&[]).is_empty());
    }

    fn case(name: &str, samples: &[f64]) -> Case {
        Case {
            name: name.into(),
            unit: "ns per op".into(),
            better: Better::Lower,
            samples: samples.to_vec(),
            ..Default::default()
        }
    }

    fn model(workload: &str, change: &str, ns: f64, vs_base: Option<(f64, f64)>) -> ModelRow {
        ModelRow {
            change: change.into(),
            workload: workload.into(),
            profile: "local".into(),
            arch: "x86_64".into(),
            before_ns: ns,
            after_ns: ns,
            vs_base,
            cur_range: Some((ns * 0.8, ns * 1.2)),
            priced: vec![("page tables + TLB".into(), 1.0)],
            ..Default::default()
        }
    }

    /// With the whole-program figure in the rows, it is the one judged and
    /// shown with its interval, the page-table figure beside it; a workload
    /// whose live run also times the rest of its loop gets a whole-loop row
    /// whose live value is each run's sample plus its extra metric.
    #[test]
    fn the_whole_program_figure_is_judged_and_the_whole_loop_shown() {
        let mut base = case("mprotect-4k", &[100.0, 101.0, 99.0, 100.0, 100.0]);
        base.extra.insert(
            "explicit_bzero ns per loop".into(),
            vec![900.0, 899.0, 901.0, 900.0, 900.0],
        );
        let live = BenchResult {
            cases: vec![base, case("mprotect-64k", &[49.0, 50.0, 51.0, 50.0, 50.0])],
            ..Default::default()
        };
        let row = |w: &str, pt: f64, prog: f64, vs: Option<(f64, f64)>| ModelRow {
            program_ns: Some(prog),
            program_range: Some((prog * 0.9, prog * 1.1)),
            program_vs_base: vs,
            program_phases: vec![("page_table".into(), 0.8), ("syscall".into(), 0.2)],
            loop_ns: (w == "mprotect-4k").then_some(1100.0),
            loop_range: (w == "mprotect-4k").then_some((800.0, 1500.0)),
            loop_extra: Some("explicit_bzero ns per loop".into()),
            ..model(w, "mprotect-pte-batch", pt, Some((0.1, 0.9)))
        };
        let r = Reproduction {
            live: Some(live),
            skipped: vec![],
            model: Model::Rows {
                source: "t".into(),
                rows: vec![
                    row("mprotect-4k", 200.0, 110.0, None),
                    row("mprotect-64k", 50.0, 55.0, Some((0.45, 0.55))),
                ],
            },
            quick: false,
            environment: Default::default(),
        };
        let rr = ratio_rows(&r, "local");
        assert_eq!(rr.len(), 1);
        assert_eq!(rr[0].figure, "whole program");
        assert!((rr[0].predicted - 0.5).abs() < 1e-12 && rr[0].on_target());
        assert!((rr[0].page_table - 0.25).abs() < 1e-12);
        assert_eq!(rr[0].range, Some((0.45, 0.55)));
        let ab = abs_rows(&r, "local");
        assert_eq!(ab.len(), 3, "{ab:?}");
        assert_eq!(ab[0].predicted, 110.0);
        assert_eq!(ab[0].page_table, Some(200.0));
        assert!(ab[0].times.contains("mprotect RO + RW pair"));
        assert_eq!(ab[1].workload, "mprotect-4k, whole loop");
        assert!((ab[1].live.mean - 1000.0).abs() < 1e-9);
        assert_eq!(
            (ab[1].predicted, ab[1].range),
            (1100.0, Some((800.0, 1500.0)))
        );
        assert!(ab[1].on_target() && ab[1].page_table.is_none());
        let md = markdown(&r, "local");
        assert!(
            md.contains("| 0.500 [0.450, 0.550] | 0.250 [0.100, 0.900] |"),
            "{md}"
        );
        assert!(md.contains("1.10 µs [800 ns, 1.50 µs]"), "{md}");
        assert!(md.contains("the pair + explicit_bzero ns per loop"), "{md}");
        assert!(md.contains("3 of 3 predictions within 1.5×"), "{md}");
    }

    #[test]
    fn ratios_and_absolute_times_are_checked_against_their_targets() {
        // fork: live 4k 100, thp-pte 50 (ratio 0.5); predicted 120 and 66
        // (ratio 0.55: +10 %, on target; absolute 1.2× and 1.32×: on target).
        // uffd: live copy 100, move 40 (0.4); predicted 30 and 20 (0.667:
        // +67 %, off target; copy 0.3× off target).
        let live = BenchResult {
            cases: vec![
                case("fork-4k", &[99.0, 100.0, 101.0, 100.0, 100.0]),
                case("fork-thp-pte", &[49.0, 50.0, 51.0, 50.0, 50.0]),
                case("uffd-copy", &[99.0, 100.0, 101.0, 100.0, 100.0]),
                case("uffd-move", &[39.0, 40.0, 41.0, 40.0, 40.0]),
            ],
            ..Default::default()
        };
        let r = Reproduction {
            live: Some(live),
            skipped: vec![],
            model: Model::Rows {
                source: "t".into(),
                rows: vec![
                    model("fork-4k", "fork-pte-batch", 120.0, None),
                    model("fork-thp-pte", "fork-pte-batch", 66.0, Some((0.5, 0.6))),
                    model("uffd-copy", "uffd-move-batch", 30.0, None),
                    model("uffd-move", "uffd-move-batch", 20.0, Some((0.6, 0.7))),
                ],
            },
            quick: false,
            environment: Default::default(),
        };
        let rr = ratio_rows(&r, "local");
        assert_eq!(rr.len(), 2);
        assert_eq!((rr[0].base, rr[0].arm), ("fork-4k", "fork-thp-pte"));
        assert!((rr[0].live - 0.5).abs() < 1e-12);
        assert!((rr[0].error_pct - 10.0).abs() < 1e-9, "{}", rr[0].error_pct);
        assert!(rr[0].on_target());
        let (lo, hi) = rr[0].live_ci.unwrap();
        assert!(lo < 0.5 && 0.5 < hi);
        assert!((rr[1].error_pct - 66.666).abs() < 0.01);
        assert!(!rr[1].on_target());
        let ab = abs_rows(&r, "local");
        assert_eq!(ab.len(), 4);
        assert!(ab[0].on_target() && ab[1].on_target());
        assert!(!ab[2].on_target(), "0.3× is off target");
        assert!((ab[3].ratio() - 0.5).abs() < 1e-12 && !ab[3].on_target());
        // Another profile has no rows: nothing to show.
        assert!(ratio_rows(&r, "zen3").is_empty());
        assert_eq!(markdown(&r, "zen3"), "");
        let md = markdown(&r, "local");
        assert!(md.contains("1 of 2 predicted ratios within 25%"), "{md}");
        assert!(md.contains("2 of 4 predictions within 1.5×"), "{md}");
        assert!(md.contains("| +10.0% | yes |"), "{md}");
        assert!(md.contains("| +66.7% | NO |"), "{md}");
        assert!(md.contains("0.550 [0.500, 0.600]"), "{md}");
        assert!(md.contains("page tables + TLB 100%"), "{md}");
    }
}
