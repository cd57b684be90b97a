//! ptlab-bench: the seed workloads on the live kernel (`ptlab bench`), the
//! statistics, result-file schema and comparison tables behind it
//! (`ptlab compare`), and the report of `ptlab reproduce`.
//!
//! Conventions follow how mm developers report microbenchmarks
//! (as in mmtests): mean ± stdev per arm, % change against the
//! baseline normalised so that + means better (mmtests' pdiff/pndiff),
//! significance marked when a Welch two-sample t-test rejects equal means
//! at the 5% level, arithmetic mean for times (lower is better).

pub mod accuracy;
pub mod bench;
pub mod compare;
pub mod env;
pub mod headline;
pub mod memstate;
pub mod perf;
pub mod report;
pub mod result;
pub mod stats;
pub mod timer;
pub mod workload;
