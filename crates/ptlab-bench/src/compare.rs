//! `ptlab compare`: tables the way mm developers report results — mean ±
//! stdev per arm, % change against the baseline normalised so + is better,
//! significance marked mmtests-style (`*` around the change when Welch's
//! test rejects equal means at p < 0.05).
//!
//! Two cases of the same name are only comparable when they were measured
//! the same way: same region size, iterations per run, folio layout, unit
//! and direction. [`mismatches`] lists the rows that are not (a `--quick`
//! run against a full one differs in `size_bytes`, and its "change" is the
//! size, not the kernel); `ptlab compare` refuses them unless told
//! otherwise, and [`markdown`] marks them `!`.

use crate::result::{BenchResult, Better, Case};
use crate::stats::{welch, Summary};
use std::fmt::Write as _;

/// One row: a case present in the baseline and in a compared run.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub case: String,
    pub unit: String,
    pub better: Better,
    pub base: Summary,
    /// One per compared run, in order; `None` when the run lacks the case.
    pub others: Vec<Option<(Summary, Change)>>,
    /// One per compared run: whether its case was measured differently
    /// ([`incomparable`]), which makes the change meaningless.
    pub incomparable: Vec<bool>,
}

/// A compared arm against the baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    /// % change, + = better (mmtests pdiff / pndiff).
    pub pct_better: f64,
    /// Welch p-value, if computable.
    pub p: Option<f64>,
}

impl Change {
    pub fn significant(&self) -> bool {
        self.p.is_some_and(|p| p < 0.05)
    }
}

/// % change of `new` against `base`, + meaning better. The difference is
/// taken first, so equal means give exactly 0 (`100 - new * 100 / base`
/// could round to -1e-14 and print as `-0.0%`).
pub fn pct_better(base: f64, new: f64, better: Better) -> f64 {
    match better {
        Better::Lower => (base - new) * 100.0 / base,
        Better::Higher => (new - base) * 100.0 / base,
    }
}

/// Why `other` cannot be compared with `base` (same case name): one entry
/// per differing parameter, `what: base-value vs other-value`. Parameters
/// missing from old (schema 1) files, stored as 0 or empty, are not held
/// against them.
pub fn incomparable(base: &Case, other: &Case) -> Vec<String> {
    let mut why = Vec::new();
    let num = |what: &str, a: u64, b: u64, why: &mut Vec<String>| {
        if a != 0 && b != 0 && a != b {
            why.push(format!("{what} {a} vs {b}"));
        }
    };
    num("size_bytes", base.size_bytes, other.size_bytes, &mut why);
    num("iterations", base.iterations, other.iterations, &mut why);
    if !base.layout.is_empty() && !other.layout.is_empty() && base.layout != other.layout {
        why.push(format!("layout '{}' vs '{}'", base.layout, other.layout));
    }
    if base.unit != other.unit {
        why.push(format!("unit '{}' vs '{}'", base.unit, other.unit));
    }
    if base.better != other.better {
        why.push(format!("better {:?} vs {:?}", base.better, other.better));
    }
    why
}

/// A case of a compared run that was measured differently from the
/// baseline's case of the same name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub case: String,
    /// Index of the compared run (0 = the first after the baseline).
    pub run: usize,
    /// What differs, as [`incomparable`] describes it.
    pub why: Vec<String>,
}

impl Mismatch {
    /// `case: size_bytes 1 vs 2 (base.json vs quick.json)`, given the names
    /// of all files, the baseline first.
    pub fn describe(&self, files: &[String]) -> String {
        let name = |i: usize| files.get(i).map_or("?", String::as_str);
        format!(
            "{}: {} ({} vs {})",
            self.case,
            self.why.join(", "),
            name(0),
            name(self.run + 1)
        )
    }
}

/// Every case of `others` that cannot be compared with the baseline.
pub fn mismatches(base: &BenchResult, others: &[BenchResult]) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for c in &base.cases {
        for (i, o) in others.iter().enumerate() {
            if let Some(x) = o.cases.iter().find(|x| x.name == c.name) {
                let why = incomparable(c, x);
                if !why.is_empty() {
                    out.push(Mismatch {
                        case: c.name.clone(),
                        run: i,
                        why,
                    });
                }
            }
        }
    }
    out
}

/// Build the rows: every case of the baseline, in its order.
pub fn rows(base: &BenchResult, others: &[BenchResult]) -> Vec<Row> {
    let mut out = Vec::new();
    for c in &base.cases {
        let Some(bs) = Summary::of(&c.samples) else {
            continue;
        };
        let mut cols = Vec::new();
        let mut bad = Vec::new();
        for o in others {
            let x = o.cases.iter().find(|x| x.name == c.name);
            bad.push(x.is_some_and(|x| !incomparable(c, x).is_empty()));
            let col = x.and_then(|x| {
                let s = Summary::of(&x.samples)?;
                let ch = Change {
                    pct_better: pct_better(bs.mean, s.mean, c.better),
                    p: welch(&c.samples, &x.samples).map(|w| w.p),
                };
                Some((s, ch))
            });
            cols.push(col);
        }
        out.push(Row {
            case: c.name.clone(),
            unit: c.unit.clone(),
            better: c.better,
            base: bs,
            others: cols,
            incomparable: bad,
        });
    }
    out
}

fn fmt_num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 0.01 || x == 0.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.2e}")
    }
}

/// A markdown pipe table LKML readers can paste: the baseline column reads
/// `0.0%`; significant changes are starred.
pub fn markdown(base: &BenchResult, others: &[BenchResult]) -> String {
    let rows = rows(base, others);
    let mut s = String::new();
    let _ = write!(
        s,
        "| case | unit | better | {} (mean ± stdev) |",
        base.label
    );
    for o in others {
        let _ = write!(s, " {} (mean ± stdev) | change |", o.label);
    }
    s.push('\n');
    let _ = write!(s, "|---|---|---|---|");
    for _ in others {
        s.push_str("---|---|");
    }
    s.push('\n');
    let mut any_bad = false;
    for r in rows {
        let dir = match r.better {
            Better::Lower => "lower",
            Better::Higher => "higher",
        };
        let _ = write!(
            s,
            "| {} | {} | {dir} | {} ± {} (0.0%) |",
            r.case,
            r.unit,
            fmt_num(r.base.mean),
            fmt_num(r.base.stdev)
        );
        for (i, col) in r.others.iter().enumerate() {
            match col {
                None => s.push_str(" — | — |"),
                Some((sum, ch)) => {
                    let pct = format!("{:+.1}%", ch.pct_better);
                    let mark = if r.incomparable.get(i).copied().unwrap_or(false) {
                        any_bad = true;
                        format!("!{pct}! incomparable")
                    } else if ch.significant() {
                        format!("*{pct}*")
                    } else {
                        format!("({pct})")
                    };
                    let _ = write!(
                        s,
                        " {} ± {} | {mark} |",
                        fmt_num(sum.mean),
                        fmt_num(sum.stdev)
                    );
                }
            }
        }
        s.push('\n');
    }
    s.push_str("\n+ = better than the baseline; *x%* = significant (Welch's t-test, p < 0.05); (x%) = not significant.\n");
    if any_bad {
        s.push_str("!x%! incomparable = measured with different parameters (region size, iterations, layout or unit): the change is not the kernel's.\n");
    }
    s
}

/// The comparison as one JSON object (`ptlab compare --format json`):
/// `{files, cases: [{case, unit, better, base: {n, mean, stdev}, others:
/// [{n, mean, stdev, pct_better, p, significant, comparable} | null]}]}`;
/// `pct_better` is + = better, as in the table.
pub fn json(files: &[String], base: &BenchResult, others: &[BenchResult]) -> serde_json::Value {
    let sum = |s: &Summary| serde_json::json!({"n": s.n, "mean": s.mean, "stdev": s.stdev});
    let cases: Vec<serde_json::Value> = rows(base, others)
        .iter()
        .map(|r| {
            let o: Vec<serde_json::Value> = r
                .others
                .iter()
                .zip(&r.incomparable)
                .map(|(o, bad)| match o {
                    None => serde_json::Value::Null,
                    Some((s, c)) => {
                        let mut v = sum(s);
                        v["pct_better"] = serde_json::json!(c.pct_better);
                        v["p"] = serde_json::json!(c.p);
                        v["significant"] = serde_json::json!(c.significant() && !bad);
                        v["comparable"] = serde_json::json!(!bad);
                        v
                    }
                })
                .collect();
            serde_json::json!({
                "case": r.case,
                "unit": r.unit,
                "better": r.better,
                "base": sum(&r.base),
                "others": o,
            })
        })
        .collect();
    serde_json::json!({"files": files, "cases": cases})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{Case, Environment, SCHEMA};

    fn run(label: &str, samples: Vec<f64>, better: Better) -> BenchResult {
        BenchResult {
            schema: SCHEMA,
            label: label.into(),
            started: String::new(),
            environment: Environment::default(),
            cases: vec![Case {
                name: "w/4K".into(),
                unit: "ns".into(),
                better,
                samples,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn pct_direction() {
        assert!((pct_better(100.0, 90.0, Better::Lower) - 10.0).abs() < 1e-9);
        assert!((pct_better(100.0, 110.0, Better::Lower) + 10.0).abs() < 1e-9);
        assert!((pct_better(100.0, 110.0, Better::Higher) - 10.0).abs() < 1e-9);
        // A file compared with itself reads +0.0%, never -0.0%: with the
        // old `100 - new * 100 / base`, 2707.52… * 100 / 2707.52… rounds above 100.
        for x in [
            2707.5209514946896,
            108.42703662427847,
            3556.247656706703,
            0.3,
            17.9,
        ] {
            for b in [Better::Lower, Better::Higher] {
                let p = pct_better(x, x, b);
                assert!(p == 0.0 && p.is_sign_positive(), "{x}: {p}");
                assert_eq!(format!("{p:+.1}%"), "+0.0%");
            }
        }
    }

    #[test]
    fn table_marks_significance() {
        let base = run("base", vec![100.0, 101.0, 99.0, 100.5, 99.5], Better::Lower);
        let fast = run("new", vec![80.0, 81.0, 79.0, 80.5, 79.5], Better::Lower);
        let same = run("same", vec![100.2, 99.1, 101.0, 99.9, 100.3], Better::Lower);
        let md = markdown(&base, &[fast, same]);
        assert!(
            md.contains("| w/4K | ns | lower | 100 ± 0.79 (0.0%) |"),
            "{md}"
        );
        assert!(md.contains("| 80.00 ± 0.79 | *+20.0%* |"), "{md}");
        assert!(md.contains("| 100 ± 0.69 | (-0.1%) |"), "{md}");
    }

    #[test]
    fn different_sizes_are_incomparable() {
        let mut base = run("base", vec![100.0, 101.0, 99.0], Better::Lower);
        base.cases[0].size_bytes = 1 << 30;
        let mut quick = run("quick", vec![231.0, 230.0, 232.0], Better::Lower);
        quick.cases[0].size_bytes = 2 << 20;
        let m = mismatches(&base, &[quick.clone()]);
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[0].why,
            vec!["size_bytes 1073741824 vs 2097152".to_string()]
        );
        assert_eq!(
            m[0].describe(&["a.json".into(), "b.json".into()]),
            "w/4K: size_bytes 1073741824 vs 2097152 (a.json vs b.json)"
        );
        let md = markdown(&base, &[quick.clone()]);
        assert!(md.contains("!-131.0%! incomparable"), "{md}");
        assert!(md.contains("measured with different parameters"), "{md}");
        // Same parameters (or unknown ones, schema 1): comparable.
        quick.cases[0].size_bytes = 1 << 30;
        assert!(mismatches(&base, &[quick.clone()]).is_empty());
        quick.cases[0].size_bytes = 0;
        assert!(mismatches(&base, &[quick.clone()]).is_empty());
        assert!(!markdown(&base, &[quick.clone()]).contains("incomparable"));
        quick.cases[0].unit = "ms".into();
        quick.cases[0].iterations = 3;
        base.cases[0].iterations = 4;
        quick.cases[0].layout = "64 KiB mTHP".into();
        base.cases[0].layout = "4 KiB pages".into();
        assert_eq!(
            mismatches(&base, &[quick]).remove(0).why,
            vec![
                "iterations 4 vs 3".to_string(),
                "layout '4 KiB pages' vs '64 KiB mTHP'".into(),
                "unit 'ns' vs 'ms'".into()
            ]
        );
    }

    #[test]
    fn missing_case_is_a_dash() {
        let base = run("base", vec![1.0, 2.0], Better::Lower);
        let mut other = run("o", vec![1.0, 2.0], Better::Lower);
        other.cases[0].name = "else".into();
        assert!(markdown(&base, &[other]).contains("| — | — |"));
    }
}
