//! The abuse suite: hostile inputs a new user (or a fuzzer, or a careless
//! script) can throw at `ptlab`, each asserting a clean error, no leaked
//! process, and THP knobs and swap areas exactly as before.
//!
//! Built as the `abuse` integration test of the `ptlab` crate
//! (`cargo test --release --test abuse`), so `cargo test --workspace
//! --release` and CI run it. Memory-hungry inputs run the binary under an
//! address-space limit (`RLIMIT_AS`), so a regression fails the test
//! instead of taking the machine down. Tests that need root or a kernel
//! feature print `SKIP: <reason>` and pass.
//!
//! One module per kind of abuse; `common` holds the runner and the
//! before/after checks. `tests/abuse/README.md` lists every hostile input.

mod common;

mod cli;
mod live;
mod observe;
