//! The result file `ptlab bench` writes and `ptlab compare` reads (JSON).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the result-file schema. 2 added the per-case parameters
/// (`iterations`, `size_bytes`, `warmup`, `layout`, `layout_check`,
/// `extra`) and the environment's `config_source`, `git_commit`,
/// `memory_kb`, `load_avg` and `notes`. Schema-1 files still read (the new
/// fields default to empty).
pub const SCHEMA: u32 = 2;

/// Oldest schema this ptlab reads.
pub const MIN_SCHEMA: u32 = 1;

/// Which direction of a metric is better.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    #[default]
    Lower,
    Higher,
}

/// One measured case: a workload in one layout, with every sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// `workload/layout`, e.g. `mremap-batch/64K`.
    pub name: String,
    /// What a sample measures, e.g. `ns per iteration`.
    pub unit: String,
    pub better: Better,
    /// One value per repetition (warm-up excluded).
    pub samples: Vec<f64>,
    /// Counter deltas over the measured repetitions (THP stats, vmstat, perf).
    #[serde(default)]
    pub counters: BTreeMap<String, i64>,
    /// Measured operations per run (a sample is their mean).
    #[serde(default)]
    pub iterations: u64,
    /// Bytes of the measured region.
    #[serde(default)]
    pub size_bytes: u64,
    /// Warm-up runs discarded before the samples.
    #[serde(default)]
    pub warmup: u64,
    /// The folio layout asked for (`4 KiB pages`, `64 KiB mTHP`, ...).
    #[serde(default)]
    pub layout: String,
    /// What the layout check found before timing.
    #[serde(default)]
    pub layout_check: String,
    /// Secondary per-run metrics (e.g. the explicit_bzero time of the
    /// mprotect workloads), one value per measured run.
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<f64>>,
}

/// The machine and software a run happened on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    /// THP knobs at the time of the run.
    #[serde(default)]
    pub thp: BTreeMap<String, String>,
    /// Kernel config bits that matter (from /proc/config.gz or /boot/config-*).
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Where `config` came from (`/proc/config.gz`, `/boot/config-*`, or `unknown`).
    #[serde(default)]
    pub config_source: String,
    pub ptlab_version: String,
    /// `git describe`-style commit of the ptlab build, when known.
    #[serde(default)]
    pub git_commit: Option<String>,
    /// MemTotal in KiB.
    #[serde(default)]
    pub memory_kb: u64,
    /// /proc/loadavg when the run started (other work on the machine).
    #[serde(default)]
    pub load_avg: String,
    /// Free blocks of each order (0, 1, …, 10) when the run started, all
    /// zones and nodes of /proc/buddyinfo summed; empty when unknown (and
    /// in files written before it was recorded). Many order-0 blocks mean
    /// fragmented free memory: an order-0 region faulted from it gets
    /// scattered frames, and the order-0 arms of fork and mprotect have
    /// measured up to 2× slower so (docs/cost.md, runs O and O2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub free_blocks: Vec<u64>,
    /// Every compaction `--compact-memory` did during the run, in order
    /// (one before each case); empty without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compactions: Vec<Compaction>,
    /// The order the cases ran in when their runs were interleaved
    /// (`--rounds N`, N > 1: each case's runs split into N slices, every
    /// round running one slice of each case, every other round in reverse
    /// order; crate::bench::schedule). One entry per child process, in the
    /// order they ran; a case's samples are its slices' samples in this
    /// order. Empty when every case ran once with all its runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<Slice>,
    /// The speculation mitigations the kernel reports as active, one per
    /// vulnerability (`/sys/devices/system/cpu/vulnerabilities/NAME` whose
    /// text starts with "Mitigation"): NAME → what follows "Mitigation: ".
    /// They set the price of every kernel entry, indirect call and return
    /// (docs/cost.md, "The AMD EPYC host"); empty when unknown (and in
    /// files written before it was recorded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mitigations: BTreeMap<String, String>,
    /// Free-form remarks (missing counters, noise sources).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One compaction of free memory (`--compact-memory`): what it preceded,
/// the free blocks of each order before and after (/proc/buddyinfo, all
/// zones summed) and how long the write took.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    /// The case (or calibration step) it ran before.
    pub before: String,
    pub free_before: Vec<u64>,
    pub free_after: Vec<u64>,
    /// Milliseconds the write to /proc/sys/vm/compact_memory took.
    pub ms: f64,
}

/// One slice of an interleaved run: `runs` measured runs of `case` in
/// round `round` (0-based), measured by one child process after its own
/// warm-up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slice {
    pub case: String,
    pub round: u64,
    pub runs: u64,
}

/// A whole result file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    pub schema: u32,
    /// A label for this run (`baseline`, a kernel name, ...).
    pub label: String,
    /// When the run started (RFC 3339, UTC).
    pub started: String,
    pub environment: Environment,
    pub cases: Vec<Case>,
}

impl BenchResult {
    /// Parse a result file, checking the schema version.
    pub fn from_json(text: &str) -> Result<BenchResult, String> {
        let r: BenchResult =
            serde_json::from_str(text).map_err(|e| format!("not a ptlab result file: {e}"))?;
        if !(MIN_SCHEMA..=SCHEMA).contains(&r.schema) {
            return Err(format!(
                "result schema {} is not supported (this ptlab reads schemas {MIN_SCHEMA} to {SCHEMA})",
                r.schema
            ));
        }
        Ok(r)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("results serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_schema_check() {
        let r = BenchResult {
            schema: SCHEMA,
            label: "base".into(),
            started: "2026-11-23T10:00:00Z".into(),
            environment: Environment {
                kernel: "6.18.44".into(),
                cpus: 2,
                ..Default::default()
            },
            cases: vec![Case {
                name: "fork/4K".into(),
                unit: "ns per fork".into(),
                better: Better::Lower,
                samples: vec![1.0, 2.0],
                counters: [("vmstat/thp_split_pmd".to_string(), 512)].into(),
                iterations: 100,
                size_bytes: 1 << 30,
                warmup: 1,
                layout: "PTE-mapped 2 MiB THP".into(),
                layout_check: "512/512 order-9 folios".into(),
                extra: [("x".to_string(), vec![1.5])].into(),
            }],
        };
        let text = r.to_json();
        assert!(text.contains("\"better\": \"lower\""));
        assert_eq!(BenchResult::from_json(&text).unwrap(), r);
        let wrong = text.replace("\"schema\": 2", "\"schema\": 99");
        assert!(BenchResult::from_json(&wrong)
            .unwrap_err()
            .contains("schema 99"));
        assert!(BenchResult::from_json("{}")
            .unwrap_err()
            .starts_with("not a ptlab result file"));
    }

    #[test]
    fn schema_1_files_still_read() {
        let v1 = r#"{"schema": 1, "label": "old", "started": "", "environment":
            {"kernel": "6.18", "cpu": "x", "cpus": 2, "ptlab_version": "0.1.0"},
            "cases": [{"name": "fork/4K", "unit": "ns", "better": "lower", "samples": [3.0]}]}"#;
        let r = BenchResult::from_json(v1).unwrap();
        assert_eq!(r.schema, 1);
        assert_eq!(r.cases[0].iterations, 0);
        assert!(r.environment.git_commit.is_none());
    }
}
