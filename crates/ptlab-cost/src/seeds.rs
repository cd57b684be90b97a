//! The seed workloads as the model runs them (`scenarios/seeds/*.ptl`,
//! compiled in): which change each one shows, and which operations make up
//! the part `ptlab bench` times on the live kernel, so that a prediction is
//! per the same unit as the live measurement (one mremap, one fork, one
//! mprotect RO+RW pair, one live page of a compaction).
//!
//! The live side of the same workloads is `crates/ptlab-bench/src/workload.rs`;
//! the names are shared.

use crate::{price_run, CostError, EventRun, Profile};
use ptlab_model::{ArchKind, Before, HwEvents, HwFeatures};
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
    /// The scenario text.
    pub source: &'static str,
}

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
        source: seed_src!("mremap-batch-4k"),
    },
    Seed {
        name: "mremap-batch-64k",
        switch: "mremap-pte-batch",
        timed: &["mremap"],
        unit_op: "mremap",
        ops_per_unit: 1,
        iterations_param: Some("iterations"),
        source: seed_src!("mremap-batch-64k"),
    },
    Seed {
        name: "mremap-table-unaligned",
        switch: "mremap-table-move",
        timed: &["mremap"],
        unit_op: "mremap",
        ops_per_unit: 1,
        iterations_param: None,
        source: seed_src!("mremap-table-unaligned"),
    },
    Seed {
        name: "mremap-table-aligned",
        switch: "mremap-table-move",
        timed: &["mremap"],
        unit_op: "mremap",
        ops_per_unit: 1,
        iterations_param: None,
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
        source: seed_src!("fork-4k"),
    },
    Seed {
        name: "fork-thp-pte",
        switch: "fork-pte-batch",
        timed: &["fork"],
        unit_op: "fork",
        ops_per_unit: 1,
        iterations_param: Some("iterations"),
        source: seed_src!("fork-thp-pte"),
    },
    Seed {
        name: "mprotect-4k",
        switch: "mprotect-pte-batch",
        timed: &["mprotect"],
        unit_op: "mprotect",
        ops_per_unit: 2,
        iterations_param: Some("iterations"),
        source: seed_src!("mprotect-4k"),
    },
    Seed {
        name: "mprotect-64k",
        switch: "mprotect-pte-batch",
        timed: &["mprotect"],
        unit_op: "mprotect",
        ops_per_unit: 2,
        iterations_param: Some("iterations"),
        source: seed_src!("mprotect-64k"),
    },
    Seed {
        name: "mprotect-thp-pte",
        switch: "mprotect-pte-batch",
        timed: &["mprotect"],
        unit_op: "mprotect",
        ops_per_unit: 2,
        iterations_param: Some("iterations"),
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
        source: seed_src!("uffd-copy"),
    },
    Seed {
        name: "uffd-move",
        switch: "uffd-move-batch",
        timed: &["uffd move", "madvise"],
        unit_op: "uffd move",
        ops_per_unit: 1,
        iterations_param: None,
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
        source: include_str!("../../../scenarios/examples/pageout-4k.ptl"),
    },
    Seed {
        name: "pageout-64k",
        switch: "swapout-unmap-batch",
        timed: &["madvise"],
        unit_op: "madvise",
        ops_per_unit: 1,
        iterations_param: None,
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
        Ok(UnitCost {
            units,
            ns: ns / units as f64,
            events: per,
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
