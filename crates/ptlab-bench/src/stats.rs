//! Summary statistics and Welch's two-sample t-test.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Summary of one arm's samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator).
    pub stdev: f64,
    pub min: f64,
    pub max: f64,
    pub median: f64,
    /// Half-width of the 95% confidence interval of the mean (Student t).
    pub ci95: f64,
}

/// Arithmetic mean; `None` for no samples.
pub fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Median of samples sorted in ascending order (the mean of the middle two
/// for an even count); `None` for no samples.
pub fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// Sample variance (n − 1); `None` for fewer than two samples.
pub fn variance(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    Some(xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64)
}

/// Two-sided Student-t critical value for `dof` degrees of freedom.
pub fn t_critical(confidence: f64, dof: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, dof) {
        Ok(t) => t.inverse_cdf(1.0 - (1.0 - confidence) / 2.0),
        Err(_) => f64::NAN,
    }
}

/// 95 % (or `confidence`) interval of the ratio of two independent means,
/// mean(arm) / mean(base), by the delta method on the log ratio:
/// var(ln r) ≈ se_a² / a² + se_b² / b², with Welch–Satterthwaite degrees of
/// freedom over those two relative variances, so r · exp(±t · se) —
/// positive, and as wide relative to r as the arms' own uncertainties.
/// (An interval of the difference of means divided by the base's mean,
/// which the accuracy tables used before, is as wide in absolute terms as
/// the base's uncertainty: for a ratio of 0.03 it reached below 0.)
/// `None` with fewer than two samples a side or a mean that is not positive.
pub fn ratio_ci(base: &[f64], arm: &[f64], confidence: f64) -> Option<(f64, f64)> {
    let (b, a) = (mean(base)?, mean(arm)?);
    if !(b > 0.0 && a > 0.0) {
        return None;
    }
    let (nb, na) = (base.len() as f64, arm.len() as f64);
    let rb = variance(base)? / nb / (b * b);
    let ra = variance(arm)? / na / (a * a);
    let r = a / b;
    let v = ra + rb;
    if v == 0.0 {
        return Some((r, r));
    }
    let dof = v * v / (ra * ra / (na - 1.0) + rb * rb / (nb - 1.0));
    let half = t_critical(confidence, dof) * v.sqrt();
    half.is_finite()
        .then(|| (r * (-half).exp(), r * half.exp()))
}

impl Summary {
    /// Summarise samples; `None` when there are none.
    pub fn of(xs: &[f64]) -> Option<Summary> {
        let m = mean(xs)?;
        let mut sorted = xs.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = xs.len();
        let median = median(&sorted)?;
        let stdev = variance(xs).map_or(0.0, f64::sqrt);
        let ci95 = if n >= 2 {
            t_critical(0.95, (n - 1) as f64) * stdev / (n as f64).sqrt()
        } else {
            f64::INFINITY
        };
        Some(Summary {
            n,
            mean: m,
            stdev,
            min: sorted[0],
            max: sorted[n - 1],
            median,
            ci95,
        })
    }

    /// Coefficient of variation (stdev / mean).
    pub fn cv(&self) -> f64 {
        self.stdev / self.mean
    }
}

/// Result of Welch's unequal-variance t-test.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Welch {
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub dof: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// Welch's t-test of equal means; `None` when either arm has fewer than two
/// samples or both have zero variance.
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (va, vb) = (variance(a)?, variance(b)?);
    let (sa, sb) = (va / na, vb / nb);
    let se2 = sa + sb;
    if se2 == 0.0 {
        return None;
    }
    let t = (mean(a)? - mean(b)?) / se2.sqrt();
    let dof = se2 * se2 / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
    let dist = StudentsT::new(0.0, 1.0, dof).ok()?;
    let p = 2.0 * (1.0 - dist.cdf(t.abs()));
    Some(Welch { t, dof, p })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, eps: f64) -> bool {
        (a - b).abs() <= eps
    }

    #[test]
    fn summary_of_known_samples() {
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0, 1e-12));
        // Sample stdev of this classic set: sqrt(32/7).
        assert!(close(s.stdev, (32.0f64 / 7.0).sqrt(), 1e-12));
        assert!(close(s.median, 4.5, 1e-12));
        // t(0.975, 7) = 2.364624...
        assert!(close(s.ci95, 2.364624 * s.stdev / 8f64.sqrt(), 1e-5));
        assert_eq!((s.min, s.max), (2.0, 9.0));
        assert!(Summary::of(&[]).is_none());
        assert_eq!(median(&[1.0, 2.0, 7.0]), Some(2.0));
        assert_eq!(median(&[]), None);
        assert!(Summary::of(&[3.0]).unwrap().ci95.is_infinite());
    }

    #[test]
    fn t_critical_matches_tables() {
        assert!(close(t_critical(0.95, 1.0), 12.7062, 1e-3));
        assert!(close(t_critical(0.95, 10.0), 2.2281, 1e-3));
        assert!(close(t_critical(0.95, 1e6), 1.95996, 1e-3));
    }

    #[test]
    fn ratio_ci_is_relative_to_the_ratio() {
        // A small arm over a large base: 8 samples each, the base with a
        // 3 % spread, the arm with 17 %. The interval of the difference
        // over the base's mean would be 0.034 ± about 0.04 (reaching 0);
        // the ratio's own is about ±15 % of it.
        let base = [3.45, 3.52, 3.60, 3.75, 3.48, 3.70, 3.62, 3.68];
        let arm = [0.100, 0.110, 0.160, 0.120, 0.105, 0.150, 0.118, 0.121];
        let r = mean(&arm).unwrap() / mean(&base).unwrap();
        let (lo, hi) = ratio_ci(&base, &arm, 0.95).unwrap();
        assert!(
            lo > 0.75 * r && lo < r && hi > r && hi < 1.3 * r,
            "{lo} {r} {hi}"
        );
        // Log-symmetric: lo · hi = r².
        assert!(((lo * hi).sqrt() - r).abs() < 1e-12);
        // Wider with more spread, narrower with more samples.
        let arm_wide: Vec<f64> = arm.iter().map(|x| (x - 0.12) * 3.0 + 0.12).collect();
        let (lo2, hi2) = ratio_ci(&base, &arm_wide, 0.95).unwrap();
        assert!(hi2 / lo2 > hi / lo);
        let (b16, a16) = ([base, base].concat(), [arm, arm].concat());
        let (lo3, hi3) = ratio_ci(&b16, &a16, 0.95).unwrap();
        assert!(hi3 / lo3 < hi / lo);
        // Equal samples: a point; too few or non-positive: none.
        assert_eq!(ratio_ci(&[2.0, 2.0], &[1.0, 1.0], 0.95), Some((0.5, 0.5)));
        assert_eq!(ratio_ci(&[2.0], &[1.0, 1.0], 0.95), None);
        assert_eq!(ratio_ci(&[2.0, 2.0], &[0.0, 0.0], 0.95), None);
    }

    #[test]
    fn welch_known_example() {
        // Welch's example (Wikipedia "Welch's t-test", example 1):
        let a = [
            27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7,
            21.4,
        ];
        let b = [
            27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5,
            24.4,
        ];
        let w = welch(&a, &b).unwrap();
        assert!(close(w.t, -2.46, 0.01), "{w:?}");
        assert!(close(w.dof, 24.99, 0.05), "{w:?}");
        assert!(close(w.p, 0.021, 0.002), "{w:?}");
        assert!(welch(&[1.0], &[2.0, 3.0]).is_none());
        assert!(welch(&[1.0, 1.0], &[1.0, 1.0]).is_none());
    }
}
