//! `ptlab compare`: tables the way mm developers report results — mean ±
//! stdev per arm, % change against the baseline normalised so + is better,
//! significance marked mmtests-style (`*` around the change when Welch's
//! test rejects equal means at p < 0.05).

use crate::result::{BenchResult, Better};
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

/// % change of `new` against `base`, + meaning better.
pub fn pct_better(base: f64, new: f64, better: Better) -> f64 {
    match better {
        Better::Lower => 100.0 - new * 100.0 / base,
        Better::Higher => new * 100.0 / base - 100.0,
    }
}

/// Build the rows: every case of the baseline, in its order.
pub fn rows(base: &BenchResult, others: &[BenchResult]) -> Vec<Row> {
    let mut out = Vec::new();
    for c in &base.cases {
        let Some(bs) = Summary::of(&c.samples) else {
            continue;
        };
        let mut cols = Vec::new();
        for o in others {
            let col = o.cases.iter().find(|x| x.name == c.name).and_then(|x| {
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
        for col in &r.others {
            match col {
                None => s.push_str(" — | — |"),
                Some((sum, ch)) => {
                    let pct = format!("{:+.1}%", ch.pct_better);
                    let mark = if ch.significant() {
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
    s
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
    fn missing_case_is_a_dash() {
        let base = run("base", vec![1.0, 2.0], Better::Lower);
        let mut other = run("o", vec![1.0, 2.0], Better::Lower);
        other.cases[0].name = "else".into();
        assert!(markdown(&base, &[other]).contains("| — | — |"));
    }
}
