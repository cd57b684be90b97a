//! The result file `ptlab bench` writes and `ptlab compare` reads (JSON).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the result-file schema.
pub const SCHEMA: u32 = 1;

/// Which direction of a metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Lower,
    Higher,
}

/// One measured case: a workload in one layout, with every sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    pub ptlab_version: String,
}

/// A whole result file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
        if r.schema != SCHEMA {
            return Err(format!(
                "result schema {} is not supported (this ptlab reads schema {SCHEMA})",
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
                counters: BTreeMap::new(),
            }],
        };
        let text = r.to_json();
        assert!(text.contains("\"better\": \"lower\""));
        assert_eq!(BenchResult::from_json(&text).unwrap(), r);
        let wrong = text.replace("\"schema\": 1", "\"schema\": 99");
        assert!(BenchResult::from_json(&wrong)
            .unwrap_err()
            .contains("schema 99"));
        assert!(BenchResult::from_json("{}")
            .unwrap_err()
            .starts_with("not a ptlab result file"));
    }
}
