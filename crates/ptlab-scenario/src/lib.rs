//! ptlab-scenario: the `.ptl` scenario language.
//!
//! A scenario is a small line-oriented program that maps memory, touches it,
//! flips THP knobs and states what the page tables must look like
//! afterwards. This crate parses it ([`parse`]) and runs it ([`run`]) on a
//! [`Backend`]: the executable model ([`ModelBackend`]) or, later, a live
//! kernel. The language is documented in `docs/language.md`.
//!
//! ```no_run
//! use ptlab_model::{ArchKind, ModelConfig};
//! use ptlab_scenario::{parse, run, ModelBackend, RunOptions};
//!
//! let src = "p = mmap 64K\nwrite p 64K\nexpect page p 64K anon\n";
//! let script = parse("demo.ptl", src).expect("valid scenario");
//! let mut backend = ModelBackend::new(ModelConfig::for_arch(ArchKind::X86_64));
//! let report = run(&script, &mut backend, &RunOptions::default());
//! for f in &report.failures {
//!     eprintln!("{f}");
//! }
//! println!("{}", report.summary());
//! ```

pub mod ast;
pub mod backend;
pub mod error;
pub mod expr;
pub mod interp;
pub mod lexer;
pub mod model_backend;
pub mod parser;
pub mod print;

pub use ast::Script;
pub use backend::{Backend, BackendError};
pub use error::ParseError;
pub use interp::{
    default_max_statements, parse_param_value, run, set_default_max_statements, set_progress_hook,
    Failure, FailureKind, HwRecord, LineHw, ObserveOutput, Progress, ProgressHook, RunOptions,
    RunReport, DEFAULT_MAX_STATEMENTS, MAX_RANGE_PAGES,
};
pub use model_backend::ModelBackend;
pub use parser::{parse, MAX_LINE_BYTES, MAX_SOURCE_BYTES};
pub use print::{call_to_ptl, fmt_addr, fmt_size};
pub use ptlab_model::{Call, CallError, PrctlThp, UffdMoveMode, UffdRegisterMode};

/// Parse `source` (named `file` in messages) and run it on `backend`.
pub fn run_source(
    file: &str,
    source: &str,
    backend: &mut dyn Backend,
    opts: &RunOptions,
) -> Result<RunReport, ParseError> {
    let script = parse(file, source)?;
    Ok(run(&script, backend, opts))
}
