//! The seed workloads as the model runs them (`scenarios/seeds/*.ptl`,
//! compiled in): which change each one shows, and which operations make up
//! the part `ptlab bench` times on the live kernel, so that a prediction is
//! per the same unit as the live measurement (one mremap, one fork, one
//! mprotect RO+RW pair, one live page of a compaction).
//!
//! The live side of the same workloads is `crates/ptlab-bench/src/workload.rs`;
//! the names are shared.

use crate::{price_run, CostError, EventRun, Interval, Profile};
use ptlab_model::{ArchKind, Before, HwEvents, HwFeatures, Phase};
use std::collections::BTreeMap;

/// One seed workload on the model.
#[derive(Clone, Copy, Debug)]
pub struct Seed {
    /// Workload name (`ptlab bench NAME`, `scenarios/seeds/NAME.ptl`).
    pub name: &'static str,
    /// The `--before` switch of the change it shows.
    pub switch: &'static str,
    /// Operations (as `ptlab cost` names them per line) inside the timed part.
    pub timed: &'static [&'static str],
    /// The operation that counts units ...
    pub unit_op: &'static str,
    /// ... and how many of its executions make one unit.
    pub ops_per_unit: u64,
    /// Parameter that sets the number of repetitions, if any (the model
    /// runs fewer than the live workload: costs per unit do not depend on
    /// the count).
    pub iterations_param: Option<&'static str>,
    /// The live workload's extra metric (`Case::extra`) that times the rest
    /// of its loop iteration (mprotect: `explicit_bzero ns per loop`), if
    /// any: the measured unit plus it is one whole iteration of the last
    /// `repeat` body of the scenario, priced as a whole program
    /// ([`UnitCost::loop_program`]).
    pub live_loop: Option<&'static str>,
    /// The scenario text.
    pub source: &'static str,
}

/// The live extra metric of the mprotect workloads: the explicit_bzero of
/// the region after each RO+RW pair (ptlab-bench's workload.rs).
pub const BZERO_PER_LOOP: &str = "explicit_bzero ns per loop";

macro_rules! seed_src {
    ($name:literal) => {
        include_str!(concat!("../../../scenarios/seeds/", $name, ".ptl"))
    };
}

/// Every seed workload, in docs/seeds.md order.
pub const SEEDS: &[Seed] = &[
    Seed {
        name: "mremap-batch-4k",
        switch: "mremap-pte-batch",
        timed: &["mremap"],
        unit_op: "mremap",
        ops_per_unit: 1,
        iterations_param: Some("iterations"),
        live_loop: None,
        source: seed_src!("mremap-batch-4k"),
    },
    Seed {
        name: "mremap-batch-64k",
        switch: "mremap-pte-batch",
        timed: &["mremap"],
        unit_op: "mremap",
        ops_per_unit: 1,
        iterations_param: Some("iterations"),
        live_loop: None,
        source: seed_src!("mremap-batch-64k"),
    },
    Seed {
        name: "mremap-table-unaligned",
        switch: "mremap-table-move",
        timed: &["mremap"],
        unit_op: "mremap",
        ops_per_unit: 1,
        iterations_param: None,
        live_loop: None,
        source: seed_src!("mremap-table-unaligned"),
    },
    Seed {
        name: "mremap-table-aligned",
        switch: "mremap-table-move",
        timed: &["mremap"],
        unit_op: "mremap",
        ops_per_unit: 1,
        iterations_param: None,
        live_loop: None,
        source: seed_src!("mremap-table-aligned"),
    },
    // `ptlab bench` times fork() in the parent only (the child's exit and
    // the wait are outside the timed part).
    Seed {
        name: "fork-4k",
        switch: "fork-pte-batch",
        timed: &["fork"],
        unit_op: "fork",
        ops_per_unit: 1,
        iterations_param: Some("iterations"),
        live_loop: None,
        source: seed_src!("fork-4k"),
    },
    Seed {
        name: "fork-thp-pte",
        switch: "fork-pte-batch",
        timed: &["fork"],
        unit_op: "fork",
        ops_per_unit: 1,
        iterations_param: Some("iterations"),
        live_loop: None,
        source: seed_src!("fork-thp-pte"),
    },
    Seed {
        name: "mprotect-4k",
        switch: "mprotect-pte-batch",
        timed: &["mprotect"],
        unit_op: "mprotect",
        ops_per_unit: 2,
        iterations_param: Some("iterations"),
        live_loop: Some(BZERO_PER_LOOP),
        source: seed_src!("mprotect-4k"),
    },
    Seed {
        name: "mprotect-64k",
        switch: "mprotect-pte-batch",
        timed: &["mprotect"],
        unit_op: "mprotect",
        ops_per_unit: 2,
        iterations_param: Some("iterations"),
        live_loop: Some(BZERO_PER_LOOP),
        source: seed_src!("mprotect-64k"),
    },
    Seed {
        name: "mprotect-thp-pte",
        switch: "mprotect-pte-batch",
        timed: &["mprotect"],
        unit_op: "mprotect",
        ops_per_unit: 2,
        iterations_param: Some("iterations"),
        live_loop: Some(BZERO_PER_LOOP),
        source: seed_src!("mprotect-thp-pte"),
    },
    // The compaction, then one MADV_DONTNEED of the from-space, per live page.
    Seed {
        name: "uffd-copy",
        switch: "uffd-move-batch",
        timed: &["uffd copy", "madvise"],
        unit_op: "uffd copy",
        ops_per_unit: 1,
        iterations_param: None,
        live_loop: None,
        source: seed_src!("uffd-copy"),
    },
    Seed {
        name: "uffd-move",
        switch: "uffd-move-batch",
        timed: &["uffd move", "madvise"],
        unit_op: "uffd move",
        ops_per_unit: 1,
        iterations_param: None,
        live_loop: None,
        source: seed_src!("uffd-move"),
    },
];

/// Workloads of proposed changes newer than the modelled kernel
/// (`--after` switches; `scenarios/examples/*.ptl`, docs/prototyping.md).
/// Their "before" side is Linux 6.18 as shipped, their "after" side the
/// proposal.
pub const PROPOSED: &[Seed] = &[
    // One MADV_PAGEOUT of the whole region.
    Seed {
        name: "pageout-4k",
        switch: "swapout-unmap-batch",
        timed: &["madvise"],
        unit_op: "madvise",
        ops_per_unit: 1,
        iterations_param: None,
        live_loop: None,
        source: include_str!("../../../scenarios/examples/pageout-4k.ptl"),
    },
    Seed {
        name: "pageout-64k",
        switch: "swapout-unmap-batch",
        timed: &["madvise"],
        unit_op: "madvise",
        ops_per_unit: 1,
        iterations_param: None,
        live_loop: None,
        source: include_str!("../../../scenarios/examples/pageout-64k.ptl"),
    },
];

/// The seed (or proposed-change workload) called `name`.
pub fn seed(name: &str) -> Option<&'static Seed> {
    SEEDS.iter().chain(PROPOSED).find(|s| s.name == name)
}

/// The switches of `seed`'s two sides: a seed change reverted on the
/// before side, a proposed change applied on the after side.
fn switches(seed: &Seed, before: bool) -> Result<(Before, ptlab_model::After), CostError> {
    if let Some(b) = Before::from_switch(seed.switch) {
        return Ok((
            if before { b } else { Before::empty() },
            ptlab_model::After::empty(),
        ));
    }
    if let Some(a) = ptlab_model::After::from_switch(seed.switch) {
        return Ok((
            Before::empty(),
            if before {
                ptlab_model::After::empty()
            } else {
                a
            },
        ));
    }
    Err(CostError::Run {
        file: seed.name.to_string(),
        message: format!("unknown switch {}", seed.switch),
    })
}

/// A prediction per measured unit.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitCost {
    /// Units the run measured (e.g. mremaps).
    pub units: u64,
    pub ns: f64,
    /// Events per unit (rounded down).
    pub events: HwEvents,
    /// The whole-program figure of the timed operations per unit
    /// ([`Figure::Program`]: the page-table work with the fault path, the
    /// clears and the user accesses priced by their fine events) ...
    pub program_ns: f64,
    /// ... with every price anywhere in its range ...
    pub program_range: Interval,
    /// ... and per phase (page_table, syscall, fault, user).
    pub program_phases: Vec<(Phase, f64)>,
    /// For a seed with [`Seed::live_loop`]: one whole iteration of the
    /// scenario's last `repeat` body (the timed operations and the rest of
    /// the loop), per unit, as a whole program, with its range.
    pub loop_program: Option<(f64, Interval)>,
}

/// The source lines (1-based) of the body of the last `repeat` in `src`
/// (up to its `end`; no nested loops in the seed scenarios).
fn last_loop_body(src: &str) -> Option<(u32, u32)> {
    let lines: Vec<&str> = src.lines().collect();
    let r = lines
        .iter()
        .rposition(|l| l.trim_start().starts_with("repeat"))?;
    let end = lines[r + 1..].iter().position(|l| l.trim() == "end")? + r + 1;
    Some((r as u32 + 2, end as u32))
}

/// Key of one model run: the events depend on the arch, the CPU features
/// and the switches, not on the prices.
type RunKey = (
    &'static str,
    ArchKind,
    [bool; 3],
    bool,
    Vec<(String, String)>,
);

/// Runs the seed scenarios once per (seed, arch, features, before, params)
/// and prices them for any number of profiles.
#[derive(Default)]
pub struct SeedRunner {
    cache: BTreeMap<String, EventRun>,
}

impl SeedRunner {
    pub fn new() -> SeedRunner {
        SeedRunner::default()
    }

    fn run(
        &mut self,
        seed: &Seed,
        arch: ArchKind,
        features: HwFeatures,
        before: bool,
        params: &[(String, String)],
    ) -> Result<&EventRun, CostError> {
        let key: RunKey = (
            seed.name,
            arch,
            [features.tlbi_range, features.bbml2_noabort, features.kpti],
            before,
            params.to_vec(),
        );
        let k = format!("{key:?}");
        if !self.cache.contains_key(&k) {
            let sw = switches(seed, before)?;
            let dir = if PROPOSED.iter().any(|p| p.name == seed.name) {
                "examples"
            } else {
                "seeds"
            };
            let run = crate::run_events_with(
                seed.source,
                &format!("scenarios/{dir}/{}.ptl", seed.name),
                arch,
                sw,
                params,
                features,
                None,
            )?;
            self.cache.insert(k.clone(), run);
        }
        Ok(&self.cache[&k])
    }

    /// The cost of one measured unit of `seed` on `profile`, with the
    /// change (`before` = false) or without it (`before` = true).
    pub fn unit_cost(
        &mut self,
        seed: &Seed,
        params: &[(String, String)],
        profile: &Profile,
        before: bool,
    ) -> Result<UnitCost, CostError> {
        let features = profile.features.hw();
        let arch = profile.arch;
        let run = self.run(seed, arch, features, before, params)?.clone();
        let (sw, after) = switches(seed, before)?;
        let mut pred = price_run(&run, arch, sw, profile);
        pred.after = after.names();
        let execs: u64 = pred
            .by_op
            .iter()
            .filter(|o| o.op == seed.unit_op)
            .map(|o| o.executions)
            .sum();
        let units = execs / seed.ops_per_unit.max(1);
        if units == 0 {
            return Err(CostError::Run {
                file: seed.name.to_string(),
                message: format!("the run executed no '{}'", seed.unit_op),
            });
        }
        let mut ns = 0.0;
        let mut events = HwEvents::default();
        for o in pred
            .by_op
            .iter()
            .filter(|o| seed.timed.contains(&o.op.as_str()))
        {
            ns += o.ns;
            events.add_all(&o.events);
        }
        let mut per = HwEvents::default();
        for (e, c) in events.nonzero() {
            per.add(e, c / units);
        }
        for &k in ptlab_model::KCall::ALL {
            per.add_calls(k, events.calls(k) / units);
        }
        let u = units as f64;
        let timed: Vec<&crate::ProgramCost> = pred
            .by_op
            .iter()
            .filter(|o| seed.timed.contains(&o.op.as_str()))
            .map(|o| &o.program)
            .collect();
        let sum = |v: &[&crate::ProgramCost]| {
            let ns: f64 = v.iter().map(|p| p.ns).sum();
            let lo: f64 = v.iter().map(|p| p.ns_range.low).sum();
            let hi: f64 = v.iter().map(|p| p.ns_range.high).sum();
            (
                ns / u,
                Interval {
                    low: lo / u,
                    high: hi / u,
                },
            )
        };
        let (program_ns, program_range) = sum(&timed);
        let program_phases = Phase::ALL
            .iter()
            .map(|&ph| (ph, timed.iter().map(|p| p.phase(ph)).sum::<f64>() / u))
            .collect();
        let loop_program = match (seed.live_loop, last_loop_body(seed.source)) {
            (Some(_), Some((first, last))) => {
                let body: Vec<&crate::ProgramCost> = pred
                    .by_line
                    .iter()
                    .filter(|l| (first..=last).contains(&l.line))
                    .map(|l| &l.program)
                    .collect();
                Some(sum(&body))
            }
            _ => None,
        };
        Ok(UnitCost {
            units,
            ns: ns / u,
            events: per,
            program_ns,
            program_range,
            program_phases,
            loop_program,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: &Seed) -> Vec<(String, String)> {
        let mut p = vec![];
        match seed.name {
            n if n.starts_with("mremap-batch") => p.push(("size".into(), "1M".into())),
            n if n.starts_with("uffd") => p.push(("size".into(), "256K".into())),
            _ => p.push(("size".into(), "8M".into())),
        }
        if let Some(it) = seed.iterations_param {
            p.push((it.into(), "2".into()));
        }
        p
    }

    #[test]
    fn every_seed_has_units_and_a_known_switch() {
        let zen3 = crate::find_profile("zen3").unwrap();
        let mut r = SeedRunner::new();
        for s in SEEDS {
            assert!(Before::from_switch(s.switch).is_some(), "{}", s.name);
            let after = r.unit_cost(s, &small(s), &zen3, false).unwrap();
            assert!(after.units > 0 && after.ns > 0.0, "{}: {after:?}", s.name);
        }
        // Proposed changes: 6.18 before, the proposal after; order-0 pages
        // are untouched by the swap-out batching, 64 KiB folios gain.
        for s in PROPOSED {
            assert!(
                ptlab_model::After::from_switch(s.switch).is_some(),
                "{}",
                s.name
            );
            let p = [("size".to_string(), "2M".to_string())];
            let b = r.unit_cost(s, &p, &zen3, true).unwrap();
            let a = r.unit_cost(s, &p, &zen3, false).unwrap();
            assert_eq!(b.units, 1, "{}", s.name);
            if s.name.ends_with("-4k") {
                assert_eq!(a.ns, b.ns, "{}", s.name);
            } else {
                assert!(a.ns < b.ns, "{}: {a:?} vs {b:?}", s.name);
            }
        }
    }

    /// The whole-program figure per unit: equal to the page-table figure
    /// where the timed part has no fault or user work (an mremap), apart
    /// where it has (UFFDIO_COPY allocates a folio); the mprotect loop adds
    /// the user's stores; intervals contain their points and widen with a
    /// wider price range.
    #[test]
    fn whole_program_unit_and_loop() {
        let zen3 = crate::find_profile("zen3").unwrap();
        let mut r = SeedRunner::new();
        let s = seed("mremap-table-unaligned").unwrap();
        let u = r.unit_cost(s, &small(s), &zen3, false).unwrap();
        // The whole-program figure adds only the source PTE-table lines the
        // per-entry move streams (pte_line_stream): 8 MiB is 4 source
        // tables, the 3 after the call's first 64 lines each.
        let lines = u.events.get(ptlab_model::HwEvent::PteLineStream);
        assert_eq!(lines, 3 * 64, "{u:?}");
        let stream = lines as f64 * zen3.price_of(ptlab_model::HwEvent::PteLineStream).ns;
        assert!(stream > 0.0);
        assert!((u.program_ns - u.ns - stream).abs() < 1e-6 * u.ns, "{u:?}");
        assert!(u.loop_program.is_none());
        let s = seed("uffd-copy").unwrap();
        let u = r.unit_cost(s, &small(s), &zen3, false).unwrap();
        // (zen3's fine allocation prices sum to its coarse folio_alloc, so
        // the two figures agree in total here; the fault phase holds them.)
        let fault: f64 = u
            .program_phases
            .iter()
            .filter(|p| p.0 == Phase::Fault)
            .map(|p| p.1)
            .sum();
        assert!(fault > 0.0, "{u:?}");
        let phases: f64 = u.program_phases.iter().map(|p| p.1).sum();
        assert!((phases - u.program_ns).abs() < 1e-6 * u.program_ns);
        assert!(u.program_range.contains(u.program_ns));
        let s = seed("mprotect-4k").unwrap();
        let u = r.unit_cost(s, &small(s), &zen3, false).unwrap();
        let (lp, liv) = u.loop_program.unwrap();
        // The loop = the pair + a store over every page of the region (8 MiB).
        let store = zen3.price_of(ptlab_model::HwEvent::UserStore4k).ns;
        assert!(
            (lp - u.program_ns - 2048.0 * store).abs() < 1e-6 * lp,
            "{lp} {u:?}"
        );
        assert!(liv.contains(lp) && liv.low < lp && lp < liv.high);
        // A wider store range widens the loop's interval, not the pair's.
        let mut wide = zen3.clone();
        let st = &mut wide.prices[ptlab_model::HwEvent::UserStore4k as usize].1;
        st.low = Some(st.low.unwrap() / 2.0);
        st.high = Some(st.high.unwrap() * 2.0);
        let w = r.unit_cost(s, &small(s), &wide, false).unwrap();
        let (wp, wiv) = w.loop_program.unwrap();
        assert_eq!(wp, lp);
        assert!(wiv.low < liv.low && wiv.high > liv.high);
        assert_eq!(w.program_range, u.program_range);
    }

    #[test]
    fn units_follow_the_live_workload() {
        let zen3 = crate::find_profile("zen3").unwrap();
        let mut r = SeedRunner::new();
        // 2 iterations of an RO+RW pair: 2 units of 2 mprotects.
        let s = seed("mprotect-4k").unwrap();
        assert_eq!(r.unit_cost(s, &small(s), &zen3, false).unwrap().units, 2);
        // 256 KiB heap, every other page live: 32 pages moved.
        let s = seed("uffd-move").unwrap();
        assert_eq!(r.unit_cost(s, &small(s), &zen3, false).unwrap().units, 32);
        // One mremap of the whole region.
        let s = seed("mremap-table-aligned").unwrap();
        assert_eq!(r.unit_cost(s, &small(s), &zen3, false).unwrap().units, 1);
    }

    #[test]
    fn the_table_move_saves_work_and_x86_mremap_batching_does_not() {
        let zen3 = crate::find_profile("zen3").unwrap();
        let n1 = crate::find_profile("neoverse-n1").unwrap();
        let mut r = SeedRunner::new();
        let s = seed("mremap-table-aligned").unwrap();
        let (b, a) = (
            r.unit_cost(s, &small(s), &zen3, true).unwrap(),
            r.unit_cost(s, &small(s), &zen3, false).unwrap(),
        );
        // 8 MiB: four PMD entries re-pointed instead of 2048 PTEs moved.
        assert!(a.ns < b.ns / 4.0, "before {} after {}", b.ns, a.ns);
        // x86-64: batch hint 1, identical events both ways.
        let s = seed("mremap-batch-64k").unwrap();
        let (b, a) = (
            r.unit_cost(s, &small(s), &zen3, true).unwrap(),
            r.unit_cost(s, &small(s), &zen3, false).unwrap(),
        );
        assert_eq!(b.events, a.events);
        // arm64 contpte: fewer PTE loads after.
        let (b, a) = (
            r.unit_cost(s, &small(s), &n1, true).unwrap(),
            r.unit_cost(s, &small(s), &n1, false).unwrap(),
        );
        let load = ptlab_model::HwEvent::PteLoad;
        assert!(a.events.get(load) < b.events.get(load), "{b:?} {a:?}");
    }
}
