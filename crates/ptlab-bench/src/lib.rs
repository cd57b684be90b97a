//! ptlab-bench: the statistics, result-file schema and comparison tables
//! behind `ptlab bench` and `ptlab compare`.
//!
//! Conventions follow how mm developers report microbenchmarks
//! (shared/ecosystem.md §B): mean ± stdev per arm, % change against the
//! baseline normalised so that + means better (mmtests' pdiff/pndiff),
//! significance marked when a Welch two-sample t-test rejects equal means
//! at the 5% level, arithmetic mean for times (lower is better).

pub mod compare;
pub mod result;
pub mod stats;
