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

use ptlab_model::{ArchKind, Before, Figure, HwEvent, HwEvents, HwFeatures, ModelConfig, Phase};
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
    /// Lowest plausible price (ns); required for estimates, with the
    /// reasoning for the range in `source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low: Option<f64>,
    /// Highest plausible price (ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<f64>,
}

impl Price {
    /// The price's range `(low, high)` in ns: a calibrated price is its 95 %
    /// confidence interval (clamped at 0); otherwise the stated `low`/`high`,
    /// or the point itself for a cited price without a range.
    pub fn range(&self) -> (f64, f64) {
        if let (Basis::Calibrated, Some(ci)) = (self.basis, self.ci95_ns) {
            return ((self.ns - ci).max(0.0), self.ns + ci);
        }
        (self.low.unwrap_or(self.ns), self.high.unwrap_or(self.ns))
    }
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
    /// arm64: the contpte layer (Linux 6.9+ with CONFIG_ARM64_CONTPTE=y);
    /// absent means on. Ignored on x86-64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contpte: Option<bool>,
    pub source: String,
}

impl ProfileFeatures {
    pub fn hw(&self) -> HwFeatures {
        HwFeatures {
            tlbi_range: self.tlbi_range,
            bbml2_noabort: self.bbml2_noabort,
            kpti: self.kpti,
            contpte_off: self.contpte == Some(false),
        }
    }

    /// Set one feature by name (`tlbi_range`, `bbml2_noabort`, `kpti`,
    /// `contpte`): the `--cpu-feature NAME=on|off` switch.
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), String> {
        match name {
            "tlbi_range" | "tlbi-range" => self.tlbi_range = on,
            "bbml2_noabort" | "bbml2-noabort" | "bbml2" => self.bbml2_noabort = on,
            "kpti" | "pti" => self.kpti = on,
            "contpte" => self.contpte = Some(on),
            _ => {
                return Err(format!(
                    "unknown CPU feature '{name}' (tlbi_range, bbml2_noabort, kpti, contpte)"
                ))
            }
        }
        self.source.push_str(&format!(
            "; overridden on the command line: {name}={}",
            if on { "on" } else { "off" }
        ));
        Ok(())
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
    /// The extra cost of one kernel entry and exit under KPTI/PTI (the
    /// page-table switch), added to every `syscall` and `page_fault` when
    /// `features.kpti` is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kpti_entry_exit: Option<Price>,
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
    /// The page-table switch of one kernel entry and exit under KPTI (arm64
    /// trampoline vectors' TTBR writes and ISBs; x86 PTI's CR3 writes),
    /// charged to each `syscall` and `page_fault` when `features.kpti`.
    pub kpti_entry_exit: Option<Price>,
    /// One price per event, in [`HwEvent::ALL`] order.
    pub prices: Vec<(HwEvent, Price)>,
}

impl Profile {
    pub fn price_of(&self, e: HwEvent) -> &Price {
        &self.prices[e as usize].1
    }

    /// What one `e` costs on this profile, `(ns, low, high)`: its price,
    /// plus the KPTI entry/exit surcharge for `syscall`, `page_fault` and
    /// `fault_entry` (the kernel entries; `page_fault` in the page-table
    /// figure, `fault_entry` in the whole-program one, so each fault pays
    /// it once per figure) when the profile's features have KPTI on.
    pub fn unit(&self, e: HwEvent) -> (f64, f64, f64) {
        let p = self.price_of(e);
        let (lo, hi) = p.range();
        match (&self.kpti_entry_exit, e) {
            (Some(k), HwEvent::Syscall | HwEvent::PageFault | HwEvent::FaultEntry)
                if self.features.kpti =>
            {
                let (klo, khi) = k.range();
                (p.ns + k.ns, lo + klo, hi + khi)
            }
            _ => (p.ns, lo, hi),
        }
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
            kpti_entry_exit: self.kpti_entry_exit.clone(),
            events: self
                .prices
                .iter()
                .map(|(e, p)| (e.name().to_string(), p.clone()))
                .collect(),
        };
        toml::to_string(&f).unwrap_or_default()
    }
}

const BUILTIN: [(&str, &str); 6] = [
    (
        "apple-m-vm",
        include_str!("../../../profiles/apple-m-vm.toml"),
    ),
    (
        "neoverse-n1",
        include_str!("../../../profiles/neoverse-n1.toml"),
    ),
    ("zen3", include_str!("../../../profiles/zen3.toml")),
    (
        "apple-m3-vm",
        include_str!("../../../profiles/apple-m3-vm.toml"),
    ),
    (
        "tensor-g1",
        include_str!("../../../profiles/tensor-g1.toml"),
    ),
    ("xeon-spr", include_str!("../../../profiles/xeon-spr.toml")),
];

/// The shipped profiles: `apple-m-vm` (Apple M2 Linux VM, arm64),
/// `neoverse-n1` (Ampere Altra Q80-30, arm64), `zen3` (AMD EPYC Milan,
/// x86-64), `apple-m3-vm` (Apple M3 Linux VM, arm64), `tensor-g1` (Pixel 6,
/// Cortex-X1 core, arm64, no contpte), `xeon-spr` (Intel Xeon Sapphire
/// Rapids, x86-64).
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

/// Page-table-figure events added after profiles were first written
/// (docs/cost.md, "Events"): a profile without them takes them from the
/// built-in profile of its architecture, as it does the whole-program
/// events; every other page-table event must be priced.
pub const LATER_EVENTS: &[HwEvent] = &[
    HwEvent::SwapReclaimFolio,
    HwEvent::SwapWriteBio,
    HwEvent::SwapWrite4k,
    HwEvent::UffdMoveLock,
    HwEvent::AnonVmaLock,
    HwEvent::MprotectPass,
    HwEvent::MremapVma,
    HwEvent::ModifyProtPte,
    HwEvent::UffdMfillLock,
];

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
    // A profile written before the whole-program events existed (an older
    // `ptlab calibrate` output) takes them from the built-in profile its
    // calibration starts from (zen3 / neoverse-n1), sources and ranges
    // included; they do not enter the page-table figure it was fitted for.
    // Likewise the reclaim, swap-write and UFFDIO_MOVE lock events
    // ([`LATER_EVENTS`]), which profiles written before them lack.
    let base_events = |e: HwEvent| -> Option<Price> {
        let base = match arch {
            ArchKind::X86_64 => "zen3",
            _ => "neoverse-n1",
        };
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == base)?;
        let b: ProfileFile = toml::from_str(text).ok()?;
        let mut p = b.events.get(e.name())?.clone();
        let before = if e.is_fine() {
            "whole-program events"
        } else {
            "the reclaim, swap-write, UFFDIO_MOVE lock, mprotect pass, mremap VMA and mprotect per-entry events"
        };
        p.source = format!(
            "not in this profile (written before {before}): the built-in {base} profile's price; {}",
            p.source
        );
        Some(p)
    };
    for &e in HwEvent::ALL {
        // A subset event a profile does not price takes its superset's
        // price in this profile (so an older profile prices the same work
        // as before); a later or whole-program event takes the base's.
        let own_superset = e.subset_of().and_then(|sup| {
            let (_, p) = prices.iter().find(|(x, _)| *x == sup)?;
            let mut p: Price = Clone::clone(p);
            p.source = format!(
                "not in this profile (written before per-layout prices): priced as its superset {} in this profile; {}",
                sup.name(),
                p.source
            );
            Some(p)
        });
        let inherited = if f.events.contains_key(e.name()) {
            None
        } else if own_superset.is_some() {
            own_superset
        } else if e.is_fine() || LATER_EVENTS.contains(&e) {
            base_events(e)
        } else {
            None
        };
        let p = f
            .events
            .get(e.name())
            .or(inherited.as_ref())
            .ok_or_else(|| {
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
        if p.low.is_some() != p.high.is_some() {
            return Err(err(format!(
                "events.{}: give both low and high, or neither",
                e.name()
            )));
        }
        if p.basis == Basis::Estimate && p.low.is_none() {
            return Err(err(format!(
                "events.{}: an estimate needs a range: low = .., high = .. (ns) with its reasoning in source",
                e.name()
            )));
        }
        if let (Some(lo), Some(hi)) = (p.low, p.high) {
            if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= p.ns && p.ns <= hi) {
                return Err(err(format!(
                    "events.{}: need 0 <= low <= ns <= high, not {lo} <= {} <= {hi}",
                    e.name(),
                    p.ns
                )));
            }
        }
        prices.push((e, p.clone()));
    }
    if let Some(k) = &f.kpti_entry_exit {
        let (lo, hi) = (k.low.unwrap_or(k.ns), k.high.unwrap_or(k.ns));
        if !(k.ns.is_finite()
            && 0.0 <= lo
            && lo <= k.ns
            && k.ns <= hi
            && !k.source.trim().is_empty())
            || (k.basis == Basis::Estimate && k.low.is_none())
        {
            return Err(err(
                "kpti_entry_exit: needs ns, a source, and low <= ns <= high (required for an estimate)"
                    .into(),
            ));
        }
    }
    Ok(Profile {
        name: f.name,
        description: f.description,
        arch,
        clock_ghz: f.clock_ghz,
        clock_source: f.clock_source,
        features: f.features,
        kpti_entry_exit: f.kpti_entry_exit,
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

/// Price `events` with `profile`: the page-table figure
/// ([`Figure::PageTable`], the figure `reproduce` and its report use).
pub fn price(events: &HwEvents, profile: &Profile) -> Cost {
    price_in(events, profile, Figure::PageTable)
}

/// Price the events of `figure` in `events` with `profile`.
pub fn price_in(events: &HwEvents, profile: &Profile, figure: Figure) -> Cost {
    let mut ns = 0.0;
    let mut by_event = Vec::new();
    for (e, c) in events.priced(figure) {
        let v = c as f64 * profile.unit(e).0;
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

/// A closed interval of nanoseconds (or of a ratio).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        let eps = 1e-9 * x.abs().max(1.0);
        self.low - eps <= x && x <= self.high + eps
    }
    pub fn width(&self) -> f64 {
        self.high - self.low
    }
}

/// The time `events` take when every price may lie anywhere in its
/// [`Price::range`]. Counts are non-negative, so the sum is lowest with
/// every price at its low end and highest at its high end: exact.
pub fn price_interval(events: &HwEvents, profile: &Profile) -> Interval {
    price_interval_in(events, profile, Figure::PageTable)
}

/// [`price_interval`] of `figure`.
pub fn price_interval_in(events: &HwEvents, profile: &Profile, figure: Figure) -> Interval {
    let (mut low, mut high) = (0.0, 0.0);
    for (e, c) in events.priced(figure) {
        let (_, lo, hi) = profile.unit(e);
        low += c as f64 * lo;
        high += c as f64 * hi;
    }
    Interval { low, high }
}

/// The range of `after / before` (times) when every price varies within
/// its [`Price::range`] and an event's price is the same in both arms (a
/// price that is high for one arm is high for the other). The ratio of two
/// linear functions of the prices is extreme at a corner of the price box;
/// the corner is found exactly by Dinkelbach's iteration: for a candidate
/// ratio r, the corner maximising `after(p) - r * before(p)` puts each price
/// at its high end when its `after` count exceeds r times its `before`
/// count, else at its low end; r is updated to that corner's ratio until it
/// stops growing (the minimum mirrors it). `None` when the before arm costs
/// nothing at its point; `high` is infinite when some corner prices the
/// before arm at 0.
pub fn ratio_interval(before: &HwEvents, after: &HwEvents, profile: &Profile) -> Option<Interval> {
    ratio_interval_in(before, after, profile, Figure::PageTable)
}

/// [`ratio_interval`] of `figure` (the whole-program ratio includes the
/// fault-path, user-access and syscall prices, each shared by both arms).
pub fn ratio_interval_in(
    before: &HwEvents,
    after: &HwEvents,
    profile: &Profile,
    figure: Figure,
) -> Option<Interval> {
    let rows: Vec<(f64, f64, f64, f64)> = HwEvent::ALL
        .iter()
        .filter(|e| e.in_figure(figure))
        .filter_map(|&e| {
            let (b, a) = (
                before.priced_count(e, figure) as f64,
                after.priced_count(e, figure) as f64,
            );
            if b == 0.0 && a == 0.0 {
                return None;
            }
            let (_, lo, hi) = profile.unit(e);
            Some((b, a, lo, hi))
        })
        .collect();
    let eval = |pick: &dyn Fn(f64, f64, f64, f64) -> f64| {
        let (mut bn, mut an) = (0.0, 0.0);
        for &(b, a, lo, hi) in &rows {
            let p = pick(b, a, lo, hi);
            bn += b * p;
            an += a * p;
        }
        (bn, an)
    };
    let point_b = price_in(before, profile, figure).ns;
    if point_b <= 0.0 {
        return None;
    }
    let r0 = price_in(after, profile, figure).ns / point_b;
    let solve = |maximise: bool| -> f64 {
        let mut r = r0;
        for _ in 0..100 {
            let (bn, an) = eval(&|b, a, lo, hi| {
                let up = a - r * b > 0.0;
                if up == maximise {
                    hi
                } else {
                    lo
                }
            });
            if bn <= 0.0 {
                return if maximise { f64::INFINITY } else { 0.0 };
            }
            let next = an / bn;
            let better = if maximise {
                next > r * (1.0 + 1e-12)
            } else {
                next < r * (1.0 - 1e-12)
            };
            if !better {
                // r is attained: by the point (r0) or by an earlier corner.
                return r;
            }
            r = next;
        }
        r
    };
    Some(Interval {
        low: solve(false),
        high: solve(true),
    })
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
    run_events_on(
        scenario_src,
        file_name,
        arch,
        before,
        params,
        features,
        None,
    )
}

/// [`run_events`] on a machine with `memory` bytes of physical memory
/// (`None`: the default machine).
pub fn run_events_on(
    scenario_src: &str,
    file_name: &str,
    arch: ArchKind,
    before: Before,
    params: &[(String, String)],
    features: HwFeatures,
    memory: Option<u64>,
) -> Result<EventRun, CostError> {
    run_events_with(
        scenario_src,
        file_name,
        arch,
        (before, ptlab_model::After::empty()),
        params,
        features,
        memory,
    )
}

/// [`run_events_on`] with proposed (post-6.18) changes switched on too
/// (`--after NAME`): `switches` is (before, after).
pub fn run_events_with(
    scenario_src: &str,
    file_name: &str,
    arch: ArchKind,
    switches: (Before, ptlab_model::After),
    params: &[(String, String)],
    features: HwFeatures,
    memory: Option<u64>,
) -> Result<EventRun, CostError> {
    let (before, after) = switches;
    let script = ptlab_scenario::parse(file_name, scenario_src)
        .map_err(|e| CostError::Parse(e.to_string()))?;
    let mut cfg = ModelConfig::for_arch(arch);
    if let Some(bytes) = memory {
        cfg = cfg.with_memory(bytes);
    }
    cfg.before = before;
    cfg.after = after;
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

/// The time of one phase of a whole program.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseCost {
    pub phase: Phase,
    pub ns: f64,
    /// `ns` with every price at its low and at its high end.
    pub ns_range: Interval,
}

/// The whole-program figure ([`Figure::Program`]) of some events, split by
/// [`Phase`] (page-table work, syscalls, the fault path, user loads and
/// stores).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProgramCost {
    pub ns: f64,
    pub ns_range: Interval,
    /// One row per phase, in [`Phase::ALL`] order (zeros included).
    pub phases: Vec<PhaseCost>,
}

impl ProgramCost {
    /// The phase's time (0 when absent).
    pub fn phase(&self, ph: Phase) -> f64 {
        self.phases
            .iter()
            .find(|p| p.phase == ph)
            .map_or(0.0, |p| p.ns)
    }
}

/// Price `events` as a whole program: every event of [`Figure::Program`],
/// summed per phase; each phase's interval is exact as for
/// [`price_interval`] (the phases' intervals add up to the total's).
pub fn price_program(events: &HwEvents, profile: &Profile) -> ProgramCost {
    let mut phases: Vec<PhaseCost> = Phase::ALL
        .iter()
        .map(|&phase| PhaseCost {
            phase,
            ns: 0.0,
            ns_range: Interval {
                low: 0.0,
                high: 0.0,
            },
        })
        .collect();
    for (e, c) in events.priced(Figure::Program) {
        let (ns, lo, hi) = profile.unit(e);
        let row = &mut phases[e.phase() as usize];
        row.ns += c as f64 * ns;
        row.ns_range.low += c as f64 * lo;
        row.ns_range.high += c as f64 * hi;
    }
    ProgramCost {
        ns: phases.iter().map(|p| p.ns).sum(),
        ns_range: price_interval_in(events, profile, Figure::Program),
        phases,
    }
}

/// Cost of one operation kind (all lines running it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpCost {
    pub op: String,
    pub executions: u64,
    pub events: HwEvents,
    pub ns: f64,
    /// `ns` with every price at its low and at its high end.
    pub ns_range: Interval,
    /// Kernel-function calls (never priced).
    pub calls: BTreeMap<&'static str, u64>,
    /// The whole-program figure, per phase.
    pub program: ProgramCost,
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
    /// `ns` with every price at its low and at its high end.
    pub ns_range: Interval,
    /// Kernel-function calls (never priced).
    pub calls: BTreeMap<&'static str, u64>,
    /// The whole-program figure, per phase.
    pub program: ProgramCost,
}

/// A priced run of a scenario on one profile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    pub profile: String,
    pub arch: &'static str,
    /// The `--before` switches in force, by name.
    pub before: Vec<&'static str>,
    /// The `--after` (proposed change) switches in force, by name.
    pub after: Vec<&'static str>,
    pub events: HwEvents,
    /// Kernel-function calls (ptep_get, set_ptes, flush_tlb_range, ...),
    /// counted next to the events and never priced.
    pub calls: BTreeMap<&'static str, u64>,
    pub ns: f64,
    /// `ns` with every price at its low and at its high end
    /// ([`price_interval`]).
    pub ns_range: Interval,
    pub cycles: f64,
    /// The whole-program figure (page-table work + syscalls + fault path +
    /// user loads and stores), per phase; `ns` above is the page-table
    /// figure.
    pub program: ProgramCost,
    /// Events of both figures (the page-table figure's and the fine ones).
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
            ns_range: price_interval(&l.events, profile),
            calls: l.events.calls_map().into_iter().collect(),
            program: price_program(&l.events, profile),
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
                ns_range: Interval {
                    low: 0.0,
                    high: 0.0,
                },
                calls: BTreeMap::new(),
                program: price_program(&HwEvents::default(), profile),
            }),
        }
    }
    by_op.retain(|o| !o.events.is_zero());
    for o in &mut by_op {
        o.ns_range = price_interval(&o.events, profile);
        o.calls = o.events.calls_map().into_iter().collect();
        o.program = price_program(&o.events, profile);
    }
    let mut by_event = total.by_event;
    by_event.extend(
        price_in(&run.total, profile, Figure::Program)
            .by_event
            .into_iter()
            .filter(|c| c.event.is_fine()),
    );
    Prediction {
        profile: profile.name.clone(),
        arch: arch.name(),
        before: before_names(before),
        after: Vec::new(),
        events: run.total,
        calls: run.total.calls_map().into_iter().collect(),
        ns: total.ns,
        ns_range: price_interval(&run.total, profile),
        cycles: total.cycles,
        program: price_program(&run.total, profile),
        by_event,
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
        assert_eq!(ps.len(), 6);
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
        assert_eq!(
            names,
            [
                "apple-m-vm",
                "neoverse-n1",
                "zen3",
                "apple-m3-vm",
                "tensor-g1",
                "xeon-spr"
            ]
        );
    }

    /// xeon-spr is priced for its own core (issue 15): no price is carried
    /// over from the zen3 estimates, the locked read-modify-writes are the
    /// 19 Golden Cove cycles uops.info measures for LOCK CMPXCHG at the
    /// profile's clock, and its predictions are not zen3's.
    #[test]
    fn xeon_spr_is_priced_for_golden_cove_not_copied_from_zen3() {
        let spr = find_profile("xeon-spr").unwrap();
        let zen = find_profile("zen3").unwrap();
        let price =
            |p: &Profile, e: HwEvent| p.prices.iter().find(|(x, _)| *x == e).unwrap().1.clone();
        for (e, pr) in &spr.prices {
            assert!(
                !pr.source.contains("zen3") && !pr.source.contains("taken over"),
                "xeon-spr {} still cites the zen3 estimates: {}",
                e.name(),
                pr.source
            );
        }
        for e in [
            HwEvent::PteAtomicClear,
            HwEvent::PteAtomicRmw,
            HwEvent::FolioRefAtomic,
            HwEvent::MapcountAtomic,
        ] {
            let pr = price(&spr, e);
            assert_eq!(pr.basis, Basis::Derived, "{}", e.name());
            assert!(pr.source.contains("uops.info"), "{}", e.name());
            let cycles = pr.ns * spr.clock_ghz;
            assert!(
                (cycles - 19.0).abs() < 0.01,
                "{}: {cycles} cycles",
                e.name()
            );
        }
        let src = "p = mmap 64K\nwrite p 64K\nmprotect p 64K r\n";
        let run = |p: &Profile| {
            predict(src, "t.ptl", ArchKind::X86_64, Before::empty(), &[], p)
                .unwrap()
                .ns
        };
        let (s, z) = (run(&spr), run(&zen));
        assert!((s - z).abs() > 1e-6 * z, "xeon-spr predicts zen3's {z} ns");
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

    #[test]
    fn every_price_has_a_range_or_a_citation_and_nothing_points_outside() {
        for p in builtin_profiles() {
            for (e, pr) in &p.prices {
                let (lo, hi) = pr.range();
                assert!(lo <= pr.ns && pr.ns <= hi, "{} {}", p.name, e.name());
                assert!(
                    pr.basis != Basis::Estimate || pr.low.is_some(),
                    "{} {}: an estimate without a range",
                    p.name,
                    e.name()
                );
                // No citation of documents outside the repository.
                for bad in ["spec §", "shared/", "[U]", "[E]"] {
                    assert!(!pr.source.contains(bad), "{} {}: {bad}", p.name, e.name());
                }
            }
            for bad in ["spec §", "shared/"] {
                assert!(!p.features.source.contains(bad), "{}", p.name);
                assert!(!p.clock_source.contains(bad), "{}", p.name);
            }
        }
        // An estimate without a range is refused.
        let text = builtin_profiles()[2].to_toml();
        let i = text.find("[events.vma_lookup]").unwrap();
        let j = i + text[i..].find("low = ").unwrap();
        let k = j + text[j..].find('\n').unwrap();
        let e = parse_profile(&format!("{}{}", &text[..j], &text[k + 1..]), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("low and high"), "{e}");
    }

    fn widen(p: &Profile, e: HwEvent, factor: f64) -> Profile {
        let mut q = p.clone();
        let pr = &mut q.prices[e as usize].1;
        let (lo, hi) = pr.range();
        pr.low = Some(lo / factor);
        pr.high = Some(hi * factor);
        pr.basis = Basis::Estimate;
        q
    }

    /// All 2^n corners of the price box, for the events both arms use.
    fn brute_ratio(b: &HwEvents, a: &HwEvents, p: &Profile) -> (f64, f64) {
        brute_ratio_in(b, a, p, Figure::PageTable)
    }

    fn brute_ratio_in(b: &HwEvents, a: &HwEvents, p: &Profile, fig: Figure) -> (f64, f64) {
        // (event, before count, after count) as the figure prices them.
        let used: Vec<(HwEvent, f64, f64)> = HwEvent::ALL
            .iter()
            .map(|&e| {
                (
                    e,
                    b.priced_count(e, fig) as f64,
                    a.priced_count(e, fig) as f64,
                )
            })
            .filter(|&(_, bc, ac)| bc + ac > 0.0)
            .collect();
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for mask in 0u32..(1 << used.len()) {
            let (mut bn, mut an) = (0.0, 0.0);
            for (k, &(e, bc, ac)) in used.iter().enumerate() {
                let (_, l, h) = p.unit(e);
                let x = if mask & (1 << k) != 0 { h } else { l };
                bn += bc * x;
                an += ac * x;
            }
            lo = lo.min(an / bn);
            hi = hi.max(an / bn);
        }
        (lo, hi)
    }

    #[test]
    fn intervals_contain_the_point_and_widen_with_a_price_range() {
        let p = find_profile("neoverse-n1").unwrap();
        let src = "thp 64K always\np = mmap 64K at 0x7f00_0000_0000 fixed\nwrite p 64K\nq = mremap p 64K 64K maymove fixed 0x7f00_0010_0000\n";
        let after = predict(src, "t.ptl", ArchKind::Arm64, Before::empty(), &[], &p).unwrap();
        let before = predict(
            src,
            "t.ptl",
            ArchKind::Arm64,
            Before::MREMAP_PTE_BATCH,
            &[],
            &p,
        )
        .unwrap();
        for pr in [&after, &before] {
            assert!(pr.ns_range.contains(pr.ns));
            assert!(pr.ns_range.width() > 0.0);
            for l in &pr.by_line {
                assert!(l.ns_range.contains(l.ns));
            }
            for o in &pr.by_op {
                assert!(o.ns_range.contains(o.ns));
            }
        }
        let r = ratio_interval(&before.events, &after.events, &p).unwrap();
        assert!(r.contains(after.ns / before.ns), "{r:?}");
        // Dinkelbach's corner equals the brute-force extreme over all corners.
        let (lo, hi) = brute_ratio(&before.events, &after.events, &p);
        assert!(
            (r.low - lo).abs() < 1e-9 * lo && (r.high - hi).abs() < 1e-9 * hi,
            "{r:?} vs {lo} {hi}"
        );
        // Widening one price's range widens the time and the ratio intervals
        // (dsb_ish: 35 before, 3 after here), and keeps the point inside.
        let w = widen(&p, HwEvent::DsbIsh, 2.0);
        let t0 = price_interval(&before.events, &p);
        let t1 = price_interval(&before.events, &w);
        assert!(t1.low < t0.low && t1.high > t0.high);
        assert!(t1.contains(before.ns));
        let r1 = ratio_interval(&before.events, &after.events, &w).unwrap();
        assert!(r1.low < r.low && r1.high >= r.high, "{r:?} -> {r1:?}");
        assert!(r1.contains(after.ns / before.ns));
        // A point-priced profile gives a zero-width interval.
        let mut pt = p.clone();
        for (_, pr) in pt.prices.iter_mut() {
            (pr.low, pr.high) = (Some(pr.ns), Some(pr.ns));
        }
        let z = ratio_interval(&before.events, &after.events, &pt).unwrap();
        assert!(z.width().abs() < 1e-12);
        assert_eq!(price_interval(&after.events, &pt).width(), 0.0);
    }

    /// KPTI's page-table switch is charged to every syscall and fault when
    /// the feature is on, and to nothing else.
    #[test]
    fn kpti_surcharges_entries_only_when_on() {
        let mut p = find_profile("neoverse-n1").unwrap();
        let k = p
            .kpti_entry_exit
            .clone()
            .expect("built-in profiles price KPTI");
        let mut e = HwEvents::default();
        e.add(HwEvent::Syscall, 3);
        e.add(HwEvent::PageFault, 2);
        e.add(HwEvent::PteLoad, 7);
        let off = price(&e, &p).ns;
        p.features.set("kpti", true).unwrap();
        let on = price(&e, &p).ns;
        assert!((on - off - 5.0 * k.ns).abs() < 1e-9, "{off} {on}");
        let iv = price_interval(&e, &p);
        assert!(iv.contains(on));
        for b in builtin_profiles() {
            assert!(b.kpti_entry_exit.is_some(), "{}", b.name);
        }
    }

    /// The whole-program figure: its phases add up to it, it prices the
    /// fine events instead of the coarse ones (so the page-table figure is
    /// what it was without them), and KPTI's switch is charged per fault
    /// entry once in each figure.
    #[test]
    fn program_figure_prices_fine_events_per_phase() {
        let p = find_profile("neoverse-n1").unwrap();
        let src = "thp 64K always\np = mmap 128K at 0x7f00_0000_0000 fixed\nwrite p 128K\nread p 128K\nmunmap p 128K\n";
        let pr = predict(src, "t.ptl", ArchKind::Arm64, Before::empty(), &[], &p).unwrap();
        let prog = &pr.program;
        let sum: f64 = prog.phases.iter().map(|x| x.ns).sum();
        assert!((sum - prog.ns).abs() < 1e-6 * prog.ns);
        assert!(prog.ns_range.contains(prog.ns));
        let (lo, hi): (f64, f64) = prog.phases.iter().fold((0.0, 0.0), |(l, h), x| {
            (l + x.ns_range.low, h + x.ns_range.high)
        });
        assert!((lo - prog.ns_range.low).abs() < 1e-6 && (hi - prog.ns_range.high).abs() < 1e-6);
        for ph in Phase::ALL {
            assert!(prog.phase(ph) > 0.0, "{ph:?}");
        }
        // By hand: 2 faults (64 KiB folios, buddy), 32 pages zeroed, 32 stored, 32 loaded.
        let u = |e| p.unit(e).0;
        let fault = 2.0 * (u(HwEvent::FaultEntry) + u(HwEvent::FaultHandle))
            + 2.0 * (u(HwEvent::FolioAllocBuddy) + u(HwEvent::MemcgCharge) + u(HwEvent::LruAdd))
            + 32.0 * u(HwEvent::ClearPage4k);
        let free = pr.events.get(HwEvent::FolioFree) as f64 * u(HwEvent::FolioFree);
        assert!((prog.phase(Phase::Fault) - fault).abs() < 1e-6, "{prog:?}");
        assert_eq!(
            free,
            2.0 * u(HwEvent::FolioFree),
            "freed at munmap, page-table phase"
        );
        let user = 32.0 * (u(HwEvent::UserStore4k) + u(HwEvent::UserLoad4k));
        assert!((prog.phase(Phase::User) - user).abs() < 1e-6);
        let sys = pr.events.get(HwEvent::Syscall) as f64 * u(HwEvent::Syscall);
        assert!((prog.phase(Phase::Syscall) - sys).abs() < 1e-6);
        // The page-table figure ignores the fine events.
        let mut coarse_only = HwEvents::default();
        for (e, c) in pr.events.nonzero().filter(|(e, _)| !e.is_fine()) {
            coarse_only.add(e, c);
        }
        assert_eq!(price(&coarse_only, &p).ns, pr.ns);
        assert_eq!(price_interval(&coarse_only, &p), pr.ns_range);
        // Lines carry both figures.
        let w = pr.by_line.iter().find(|l| l.op == "write").unwrap();
        assert!(w.program.phase(Phase::User) > 0.0 && w.program.phase(Phase::Fault) > 0.0);
        // KPTI: + one switch per syscall and per fault in each figure.
        let mut k = p.clone();
        k.features.set("kpti", true).unwrap();
        let sw = k.kpti_entry_exit.clone().unwrap().ns;
        let (nsys, nflt) = (
            pr.events.get(HwEvent::Syscall),
            pr.events.get(HwEvent::PageFault),
        );
        let pk = price_program(&pr.events, &k);
        assert!((pk.ns - prog.ns - (nsys + nflt) as f64 * sw).abs() < 1e-6);
        assert!((price(&pr.events, &k).ns - pr.ns - (nsys + nflt) as f64 * sw).abs() < 1e-6);
    }

    /// The whole-program ratio interval is Dinkelbach's exact corner over
    /// the program figure's prices (the fine ones included).
    #[test]
    fn program_ratio_interval_matches_brute_force() {
        let p = find_profile("apple-m-vm").unwrap();
        let src = "thp 64K always\np = mmap 64K at 0x7f00_0000_0000 fixed\nwrite p 64K\nq = mremap p 64K 64K maymove fixed 0x7f00_0010_0000\nread q 64K\n";
        let after = predict(src, "t.ptl", ArchKind::Arm64, Before::empty(), &[], &p).unwrap();
        let before = predict(
            src,
            "t.ptl",
            ArchKind::Arm64,
            Before::MREMAP_PTE_BATCH,
            &[],
            &p,
        )
        .unwrap();
        let r = ratio_interval_in(&before.events, &after.events, &p, Figure::Program).unwrap();
        assert!(r.contains(after.program.ns / before.program.ns), "{r:?}");
        let (lo, hi) = brute_ratio_in(&before.events, &after.events, &p, Figure::Program);
        assert!(
            (r.low - lo).abs() < 1e-9 * lo && (r.high - hi).abs() < 1e-9 * hi,
            "{r:?} vs {lo} {hi}"
        );
        // The fault path and the user's accesses are the same in both
        // arms, so both figures save the same nanoseconds.
        for e in [
            HwEvent::FaultEntry,
            HwEvent::ClearPage4k,
            HwEvent::UserLoad4k,
        ] {
            assert_eq!(before.events.get(e), after.events.get(e));
        }
        let saved_pt = before.ns - after.ns;
        let saved_pg = before.program.ns - after.program.ns;
        assert!(
            saved_pt > 0.0 && (saved_pt - saved_pg).abs() < 1e-6,
            "{saved_pt} {saved_pg}"
        );
        // Widening a fine price widens the program interval, not the page-table one.
        let w = widen(&p, HwEvent::UserStore4k, 2.0);
        let r1 = ratio_interval_in(&before.events, &after.events, &w, Figure::Program).unwrap();
        assert!(r1.width() > r.width());
        assert_eq!(
            ratio_interval(&before.events, &after.events, &w),
            ratio_interval(&before.events, &after.events, &p)
        );
    }

    /// A profile without the whole-program events (written by an older
    /// `ptlab calibrate`) still loads: it takes them from the built-in
    /// profile of its architecture, saying so; its page-table figure is
    /// what it was. A missing page-table event is still refused.
    /// Removes event `e`'s table from a profile's TOML text (a profile
    /// written before `e` existed).
    fn drop_event(text: &mut String, e: HwEvent) {
        let head = format!("[events.{}]", e.name());
        let i = text.find(&head).unwrap();
        let j = text[i + 1..]
            .find("\n[")
            .map_or(text.len(), |k| i + 1 + k + 1);
        text.replace_range(i..j, "");
    }

    #[test]
    fn older_profiles_take_whole_program_prices_from_the_base() {
        let zen = find_profile("zen3").unwrap();
        let mut text = zen.to_toml();
        for &e in HwEvent::ALL.iter().filter(|e| e.is_fine()) {
            drop_event(&mut text, e);
        }
        assert!(!text.contains("fault_entry"));
        let old = parse_profile(&text, "old").unwrap();
        for &e in HwEvent::ALL.iter().filter(|e| e.is_fine()) {
            // A subset takes this profile's own superset price (the same
            // work priced as before); the rest the built-in zen3 price.
            let (want, from) = match e.subset_of() {
                Some(sup) => (old.price_of(sup).ns, "superset"),
                None => (zen.price_of(e).ns, "built-in zen3"),
            };
            assert_eq!(old.price_of(e).ns, want, "{}", e.name());
            assert!(old.price_of(e).source.contains(from), "{}", e.name());
        }
        let missing = text.replace("[events.pte_load]", "[events.pte_load_typo]");
        assert!(parse_profile(&missing, "t").is_err());
    }

    /// A profile written before the reclaim, swap-write and UFFDIO_MOVE
    /// lock events (an older `ptlab calibrate` output, the recorded runs'
    /// local profiles) takes them from the built-in profile, saying so.
    #[test]
    fn older_profiles_take_the_later_events_from_the_base() {
        for base in ["zen3", "neoverse-n1"] {
            let b = find_profile(base).unwrap();
            let mut text = b.to_toml();
            for &e in LATER_EVENTS {
                drop_event(&mut text, e);
                assert!(!text.contains(&format!("[events.{}]", e.name())));
            }
            let old = parse_profile(&text, "old").unwrap();
            for &e in LATER_EVENTS {
                assert!(!e.is_fine() && !e.is_coarse(), "{}", e.name());
                assert_eq!(old.price_of(e).ns, b.price_of(e).ns, "{}", e.name());
                assert_eq!(old.price_of(e).low, b.price_of(e).low);
                assert!(old.price_of(e).source.contains(&format!("built-in {base}")));
                assert!(old.price_of(e).source.contains("swap-write"));
            }
        }
        // The shipped calibrated profile predates them and still loads.
        let dev = load_profile(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../profiles/calibrated/dev-vm-x86.toml"
        )))
        .unwrap();
        assert!(dev.price_of(HwEvent::SwapWriteBio).ns > 0.0);
    }
}
