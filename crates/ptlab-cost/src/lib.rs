//! ptlab-cost: price the hardware events ptlab's model counts.
//!
//! The model ([`ptlab_model`]) counts what the kernel's algorithm makes the
//! CPU do ([`HwEvent`]: PTE loads and stores, atomic clears, contpte
//! fold/unfold, TLB invalidations and barriers, struct-page traffic, page
//! zeroing, ...). This crate keeps those counts apart from their price: a
//! [`Profile`] gives the nanoseconds of each event on one machine, every
//! number with its source or marked as an estimate with its reasoning
//! (`profiles/*.toml` at the repository root; docs/cost.md).
//!
//! # API
//!
//! - [`builtin_profiles`]: the shipped profiles (`apple-m-vm`,
//!   `neoverse-n1`, `zen3`).
//! - [`load_profile`] / [`parse_profile`]: a profile from a TOML file or text
//!   (the format is documented in docs/cost.md); [`find_profile`] resolves a
//!   built-in name or a path.
//! - [`run_events`]: run a scenario on the model and collect its events per
//!   line and in total (no pricing).
//! - [`price`]: price an event count with a profile.
//! - [`predict`]: both at once — run `scenario_src` on the model for `arch`
//!   with the CPU features of `profile` and the `before` switches, with
//!   `params` overriding `param` defaults, and price the result:
//!
//! ```no_run
//! use ptlab_cost::{builtin_profiles, predict};
//! use ptlab_model::{ArchKind, Before};
//!
//! let src = std::fs::read_to_string("scenarios/seeds/mremap-batch-64k.ptl").unwrap();
//! let n1 = builtin_profiles().into_iter().find(|p| p.name == "neoverse-n1").unwrap();
//! let params = vec![("iterations".to_string(), "10".to_string())];
//! let after = predict(&src, "mremap-batch-64k.ptl", ArchKind::Arm64, Before::empty(), &params, &n1).unwrap();
//! let before = predict(&src, "mremap-batch-64k.ptl", ArchKind::Arm64, Before::MREMAP_PTE_BATCH, &params, &n1).unwrap();
//! println!("{:.0} ns -> {:.0} ns", before.ns, after.ns);
//! ```
//!
//! A [`Prediction`] holds the event counts, the total in nanoseconds and
//! cycles, and breakdowns per event, per operation (`mremap`, `write`, ...)
//! and per source line. Predictions are linear in the counts: a workload
//! repeated `k` times costs `k` times one repetition.

use ptlab_model::{ArchKind, Before, HwEvent, HwEvents, HwFeatures, ModelConfig};
use ptlab_scenario::{ModelBackend, RunOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use thiserror::Error;

pub mod seeds;

/// Why a profile could not be loaded or a prediction made.
#[derive(Debug, Error)]
pub enum CostError {
    /// The cause is in the message, not also a `source()`: printed as a
    /// chain (`{:#}`) it would repeat.
    #[error("cannot read profile {path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("profile {origin}: {message}")]
    Profile { origin: String, message: String },
    #[error("no built-in profile named '{name}' (built-in: {known}); pass a path to a .toml file for your own")]
    UnknownProfile { name: String, known: String },
    #[error("profile '{profile}' is for {profile_arch}, but the prediction is for {arch}")]
    ArchMismatch {
        profile: String,
        profile_arch: &'static str,
        arch: &'static str,
    },
    #[error("{0}")]
    Parse(String),
    #[error("{file}: the scenario failed on the model: {message}")]
    Run { file: String, message: String },
}

/// How a price was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// A published measurement, used as is.
    Measured,
    /// Arithmetic on a published measurement (shown in `source`).
    Derived,
    /// No measurement: the reasoning is in `source`.
    Estimate,
    /// Fitted by `ptlab calibrate` on the machine it ran on.
    Calibrated,
}

impl Basis {
    pub fn name(self) -> &'static str {
        match self {
            Basis::Measured => "measured",
            Basis::Derived => "derived",
            Basis::Estimate => "estimate",
            Basis::Calibrated => "calibrated",
        }
    }
}

/// The price of one event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Nanoseconds per event.
    pub ns: f64,
    pub basis: Basis,
    /// The citation, the arithmetic, or the reasoning.
    pub source: String,
    /// Half-width of a 95 % confidence interval, for calibrated prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95_ns: Option<f64>,
}

/// CPU features with the reason they are believed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileFeatures {
    #[serde(default)]
    pub tlbi_range: bool,
    #[serde(default)]
    pub bbml2_noabort: bool,
    #[serde(default)]
    pub kpti: bool,
    pub source: String,
}

impl ProfileFeatures {
    pub fn hw(&self) -> HwFeatures {
        HwFeatures {
            tlbi_range: self.tlbi_range,
            bbml2_noabort: self.bbml2_noabort,
            kpti: self.kpti,
        }
    }
}

/// The on-disk form.
#[derive(Serialize, Deserialize)]
struct ProfileFile {
    name: String,
    description: String,
    arch: String,
    clock_ghz: f64,
    clock_source: String,
    features: ProfileFeatures,
    events: BTreeMap<String, Price>,
}

/// A cost profile: the price of every [`HwEvent`] on one machine.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub arch: ArchKind,
    pub clock_ghz: f64,
    pub clock_source: String,
    pub features: ProfileFeatures,
    /// One price per event, in [`HwEvent::ALL`] order.
    pub prices: Vec<(HwEvent, Price)>,
}

impl Profile {
    pub fn price_of(&self, e: HwEvent) -> &Price {
        &self.prices[e as usize].1
    }

    /// The profile as TOML (the format [`parse_profile`] reads).
    pub fn to_toml(&self) -> String {
        let f = ProfileFile {
            name: self.name.clone(),
            description: self.description.clone(),
            arch: self.arch.name().to_string(),
            clock_ghz: self.clock_ghz,
            clock_source: self.clock_source.clone(),
            features: self.features.clone(),
            events: self
                .prices
                .iter()
                .map(|(e, p)| (e.name().to_string(), p.clone()))
                .collect(),
        };
        toml::to_string(&f).unwrap_or_default()
    }
}

const BUILTIN: [(&str, &str); 3] = [
    (
        "apple-m-vm",
        include_str!("../../../profiles/apple-m-vm.toml"),
    ),
    (
        "neoverse-n1",
        include_str!("../../../profiles/neoverse-n1.toml"),
    ),
    ("zen3", include_str!("../../../profiles/zen3.toml")),
];

/// The shipped profiles: `apple-m-vm` (Apple M2/M3 Linux VM, arm64),
/// `neoverse-n1` (Ampere Altra, arm64), `zen3` (AMD EPYC Milan, x86-64).
pub fn builtin_profiles() -> Vec<Profile> {
    BUILTIN
        .iter()
        .map(|(name, text)| parse_profile(text, name).expect("built-in profiles are valid"))
        .collect()
}

/// Read a profile file (TOML).
pub fn load_profile(path: &Path) -> Result<Profile, CostError> {
    let text = std::fs::read_to_string(path).map_err(|err| CostError::Io {
        path: path.display().to_string(),
        err,
    })?;
    parse_profile(&text, &path.display().to_string())
}

/// A built-in profile by name, or a profile file by path (anything with a
/// `/` or ending in `.toml`).
pub fn find_profile(name_or_path: &str) -> Result<Profile, CostError> {
    if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
        return load_profile(Path::new(name_or_path));
    }
    builtin_profiles()
        .into_iter()
        .find(|p| p.name == name_or_path)
        .ok_or_else(|| CostError::UnknownProfile {
            name: name_or_path.to_string(),
            known: BUILTIN.map(|(n, _)| n).join(", "),
        })
}

/// Parse and check a profile: every event priced exactly once, prices
/// finite and non-negative, every source non-empty.
pub fn parse_profile(text: &str, origin: &str) -> Result<Profile, CostError> {
    let err = |m: String| CostError::Profile {
        origin: origin.to_string(),
        message: m,
    };
    let f: ProfileFile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
    let arch = ArchKind::from_name(&f.arch)
        .ok_or_else(|| err(format!("unknown arch '{}' (x86_64 or arm64)", f.arch)))?;
    if !(f.clock_ghz.is_finite() && f.clock_ghz > 0.0) {
        return Err(err(format!(
            "clock_ghz must be positive, not {}",
            f.clock_ghz
        )));
    }
    if f.features.source.trim().is_empty() {
        return Err(err(
            "features.source must say why the features are believed".into(),
        ));
    }
    for k in f.events.keys() {
        if HwEvent::from_name(k).is_none() {
            let known: Vec<&str> = HwEvent::ALL.iter().map(|e| e.name()).collect();
            return Err(err(format!(
                "unknown event '{k}' (events: {})",
                known.join(", ")
            )));
        }
    }
    let mut prices = Vec::with_capacity(HwEvent::COUNT);
    for &e in HwEvent::ALL {
        let p = f.events.get(e.name()).ok_or_else(|| {
            err(format!(
                "no price for event '{}' ([events.{}])",
                e.name(),
                e.name()
            ))
        })?;
        if !(p.ns.is_finite() && p.ns >= 0.0) {
            return Err(err(format!(
                "events.{}: ns must be finite and >= 0",
                e.name()
            )));
        }
        if p.source.trim().is_empty() {
            return Err(err(format!(
                "events.{}: every price needs a source (a citation, the arithmetic, or the estimate's reasoning)",
                e.name()
            )));
        }
        prices.push((e, p.clone()));
    }
    Ok(Profile {
        name: f.name,
        description: f.description,
        arch,
        clock_ghz: f.clock_ghz,
        clock_source: f.clock_source,
        features: f.features,
        prices,
    })
}

/// Cost of one event kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventCost {
    pub event: HwEvent,
    pub count: u64,
    pub ns: f64,
}

/// A priced event count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cost {
    pub ns: f64,
    pub cycles: f64,
    /// Non-zero events, in [`HwEvent::ALL`] order.
    pub by_event: Vec<EventCost>,
}

/// Price `events` with `profile`.
pub fn price(events: &HwEvents, profile: &Profile) -> Cost {
    let mut ns = 0.0;
    let mut by_event = Vec::new();
    for (e, c) in events.nonzero() {
        let v = c as f64 * profile.price_of(e).ns;
        ns += v;
        by_event.push(EventCost {
            event: e,
            count: c,
            ns: v,
        });
    }
    Cost {
        ns,
        cycles: ns * profile.clock_ghz,
        by_event,
    }
}

/// The events of one run, per line and in total.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventRun {
    pub total: HwEvents,
    pub lines: Vec<LineEvents>,
}

/// Events of one source line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineEvents {
    pub line: u32,
    pub text: String,
    pub op: String,
    pub executions: u64,
    pub events: HwEvents,
}

/// Run a scenario on the model for `arch` with CPU `features` and the
/// `before` switches, `params` overriding its `param` defaults, and
/// collect the hardware events. Fails if the scenario does not parse or any
/// of its expectations fails (a prediction for a run that went wrong would
/// mislead).
pub fn run_events(
    scenario_src: &str,
    file_name: &str,
    arch: ArchKind,
    before: Before,
    params: &[(String, String)],
    features: HwFeatures,
) -> Result<EventRun, CostError> {
    let script = ptlab_scenario::parse(file_name, scenario_src)
        .map_err(|e| CostError::Parse(e.to_string()))?;
    let mut cfg = ModelConfig::for_arch(arch);
    cfg.before = before;
    cfg.hw = features;
    let mut backend = ModelBackend::new(cfg);
    let opts = RunOptions {
        params: params.to_vec(),
        record_hw: true,
        ..RunOptions::default()
    };
    let report = ptlab_scenario::run(&script, &mut backend, &opts);
    if !report.passed() {
        let first = report
            .failures
            .first()
            .map(|f| f.to_string())
            .unwrap_or_else(|| report.summary());
        return Err(CostError::Run {
            file: file_name.to_string(),
            message: first,
        });
    }
    let hw = report.hw.unwrap_or_default();
    Ok(EventRun {
        total: hw.total,
        lines: hw
            .lines
            .into_iter()
            .map(|l| LineEvents {
                line: l.line,
                text: l.text,
                op: l.op,
                executions: l.executions,
                events: l.events,
            })
            .collect(),
    })
}

/// Cost of one operation kind (all lines running it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpCost {
    pub op: String,
    pub executions: u64,
    pub events: HwEvents,
    pub ns: f64,
}

/// Cost of one source line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineCost {
    pub line: u32,
    pub text: String,
    pub op: String,
    pub executions: u64,
    pub events: HwEvents,
    pub ns: f64,
}

/// A priced run of a scenario on one profile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    pub profile: String,
    pub arch: &'static str,
    /// The `--before` switches in force, by name.
    pub before: Vec<&'static str>,
    pub events: HwEvents,
    pub ns: f64,
    pub cycles: f64,
    pub by_event: Vec<EventCost>,
    /// Per operation, in order of first appearance.
    pub by_op: Vec<OpCost>,
    pub by_line: Vec<LineCost>,
}

/// Names of the switches in `before`.
pub fn before_names(before: Before) -> Vec<&'static str> {
    Before::NAMES
        .iter()
        .filter(|(_, b)| before.contains(*b))
        .map(|(n, _)| *n)
        .collect()
}

/// Price an [`EventRun`] with `profile`.
pub fn price_run(run: &EventRun, arch: ArchKind, before: Before, profile: &Profile) -> Prediction {
    let total = price(&run.total, profile);
    let mut by_op: Vec<OpCost> = Vec::new();
    let mut by_line = Vec::new();
    for l in &run.lines {
        let ns = price(&l.events, profile).ns;
        by_line.push(LineCost {
            line: l.line,
            text: l.text.clone(),
            op: l.op.clone(),
            executions: l.executions,
            events: l.events,
            ns,
        });
        match by_op.iter_mut().find(|o| o.op == l.op) {
            Some(o) => {
                o.executions += l.executions;
                o.events.add_all(&l.events);
                o.ns += ns;
            }
            None => by_op.push(OpCost {
                op: l.op.clone(),
                executions: l.executions,
                events: l.events,
                ns,
            }),
        }
    }
    by_op.retain(|o| !o.events.is_zero());
    Prediction {
        profile: profile.name.clone(),
        arch: arch.name(),
        before: before_names(before),
        events: run.total,
        ns: total.ns,
        cycles: total.cycles,
        by_event: total.by_event,
        by_op,
        by_line,
    }
}

/// Run `scenario_src` on the model for `arch` with `profile`'s CPU
/// features and the `before` switches (`params` override `param` defaults),
/// and price its events with `profile`. `profile.arch` must be `arch`.
pub fn predict(
    scenario_src: &str,
    file_name: &str,
    arch: ArchKind,
    before: Before,
    params: &[(String, String)],
    profile: &Profile,
) -> Result<Prediction, CostError> {
    if profile.arch != arch {
        return Err(CostError::ArchMismatch {
            profile: profile.name.clone(),
            profile_arch: profile.arch.name(),
            arch: arch.name(),
        });
    }
    let run = run_events(
        scenario_src,
        file_name,
        arch,
        before,
        params,
        profile.features.hw(),
    )?;
    Ok(price_run(&run, arch, before, profile))
}

/// Percentage change from `before` to `after` (`None` when `before` is 0).
pub fn pct_change(before: f64, after: f64) -> Option<f64> {
    (before != 0.0).then(|| (after - before) / before * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_profile_names_its_cause_once() {
        let e = load_profile(Path::new("/nonexistent/ptlab-profile.toml")).unwrap_err();
        // Printed as an error chain, the cause must not repeat.
        let mut chain = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            chain.push_str(&format!(": {s}"));
            src = s.source();
        }
        assert_eq!(chain.matches("No such file").count(), 1, "{chain}");
        assert!(chain.contains("/nonexistent/ptlab-profile.toml"));
    }

    #[test]
    fn builtin_profiles_price_every_event_with_a_source() {
        let ps = builtin_profiles();
        assert_eq!(ps.len(), 3);
        for p in &ps {
            assert_eq!(p.prices.len(), HwEvent::COUNT);
            for (e, pr) in &p.prices {
                assert!(!pr.source.is_empty(), "{} {}", p.name, e.name());
            }
            // Round trip through TOML.
            let again = parse_profile(&p.to_toml(), "round-trip").unwrap();
            assert_eq!(&again, p);
        }
        let names: Vec<_> = ps.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["apple-m-vm", "neoverse-n1", "zen3"]);
    }

    #[test]
    fn bad_profiles_are_errors_not_panics() {
        let good = builtin_profiles()[2].to_toml();
        let missing = good.replace("[events.page_copy]", "[events.not_an_event]");
        let e = parse_profile(&missing, "t").unwrap_err().to_string();
        assert!(e.contains("unknown event 'not_an_event'"), "{e}");
        let e = parse_profile("name = 1", "t").unwrap_err().to_string();
        assert!(e.starts_with("profile t:"), "{e}");
        let neg = good.replacen("ns = 100.0", "ns = -1.0", 1);
        assert!(parse_profile(&neg, "t").is_err());
        assert!(matches!(
            find_profile("nope"),
            Err(CostError::UnknownProfile { .. })
        ));
    }

    #[test]
    fn price_is_linear() {
        let p = &builtin_profiles()[1];
        let mut e = HwEvents::default();
        e.add(HwEvent::DsbIsh, 2);
        e.add(HwEvent::PteLoad, 10);
        let one = price(&e, p).ns;
        let three = price(&e.scaled(3), p).ns;
        assert!((three - 3.0 * one).abs() < 1e-6);
        assert!((one - (2.0 * 1600.0 + 10.0 * 1.3)).abs() < 1e-6);
    }

    #[test]
    fn predict_checks_arch_and_runs() {
        let zen = find_profile("zen3").unwrap();
        let src = "p = mmap 64K\nwrite p 64K\n";
        assert!(matches!(
            predict(src, "t.ptl", ArchKind::Arm64, Before::empty(), &[], &zen),
            Err(CostError::ArchMismatch { .. })
        ));
        let pr = predict(src, "t.ptl", ArchKind::X86_64, Before::empty(), &[], &zen).unwrap();
        assert_eq!(pr.events.get(HwEvent::PageFault), 16);
        assert_eq!(pr.events.get(HwEvent::PageZero), 16);
        assert!(pr.ns > 0.0);
        assert_eq!(
            pr.by_op.iter().map(|o| o.op.as_str()).collect::<Vec<_>>(),
            ["mmap", "write"]
        );
        let bad = predict(
            "p = mmap 4K\nexpect page p anon\n",
            "t.ptl",
            ArchKind::X86_64,
            Before::empty(),
            &[],
            &zen,
        );
        assert!(matches!(bad, Err(CostError::Run { .. })));
    }
}
