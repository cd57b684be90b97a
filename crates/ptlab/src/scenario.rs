//! Reading scenario files and bounding their runs, the same way in every
//! subcommand that takes a scenario (`run`, `diff`, `show`, `cost`).
//!
//! * [`read`]: a directory, device or socket is refused; at most
//!   [`MAX_SOURCE_BYTES`] (4 MiB) are read, so `ptlab run /dev/zero` or a
//!   huge file is a clean error, not an exhausted machine; the text must be
//!   UTF-8 (a leading byte-order mark is accepted by the parser). The other
//!   text inputs (result files, cost profiles) are read the same way
//!   ([`read_text`], [`profile`], [`result_file`]).
//! * [`load`]: read, parse, and check `--param` names against the
//!   scenario's `param` statements (an unknown name is a usage error).
//! * [`RunLimitArgs`] / [`apply`]: `--max-statements`, and a progress line on
//!   stderr when a run goes on for more than a few seconds.

use anyhow::{bail, Context, Result};
use clap::Args;
use ptlab_scenario::{Progress, Script, MAX_SOURCE_BYTES};
use std::io::{IsTerminal, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Reads a scenario file (see the module docs).
pub fn read(path: &Path) -> Result<String> {
    read_text("scenario", path, MAX_SOURCE_BYTES)
}

/// Largest result file (`compare`, `reproduce --from`) read: 64 MiB, some
/// thousand times a real one.
pub const MAX_RESULT_BYTES: usize = 64 << 20;
/// Largest cost profile read (a real one is a few KiB).
pub const MAX_PROFILE_BYTES: usize = 1 << 20;

/// Reads a UTF-8 text input of at most `max` bytes; `what` names it in
/// errors (`cannot read scenario 'x': ...`). Directories, devices and
/// sockets are refused without reading; pipes are read up to the limit.
pub fn read_text(what: &str, path: &Path, max: usize) -> Result<String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {what} '{shown}'"))?;
    let ft = meta.file_type();
    if ft.is_dir() {
        bail!("cannot read {what} '{shown}': it is a directory");
    }
    if ft.is_char_device() || ft.is_block_device() || ft.is_socket() {
        bail!(
            "cannot read {what} '{shown}': it is a {}, not a file",
            if ft.is_socket() { "socket" } else { "device" }
        );
    }
    let too_big = || {
        anyhow::anyhow!(
            "cannot read {what} '{shown}': it is larger than {max} bytes ({} MiB), the limit for \
             a {what}",
            max >> 20
        )
    };
    if ft.is_file() && meta.len() > max as u64 {
        return Err(too_big());
    }
    // Pipes (`ptlab run <(gen)`) have no length: read one byte past the
    // limit to know.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max as u64 + 1).read_to_end(&mut bytes))
        .with_context(|| format!("cannot read {what} '{shown}'"))?;
    if bytes.len() > max {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let good = &e.as_bytes()[..at];
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        anyhow::anyhow!(
            "cannot read {what} '{shown}': it is not UTF-8 text (invalid byte 0x{:02x} at line \
             {line}, byte offset {at}); is it a binary file?",
            e.as_bytes()[at]
        )
    })
}

/// A cost profile: a built-in name, or a `.toml` path read with
/// [`read_text`] (so `--profile /dev/zero` is refused, not read forever).
pub fn profile(name_or_path: &str) -> Result<ptlab_cost::Profile> {
    if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
        return profile_file(Path::new(name_or_path));
    }
    Ok(ptlab_cost::find_profile(name_or_path)?)
}

/// A cost profile file, read with [`read_text`].
pub fn profile_file(path: &Path) -> Result<ptlab_cost::Profile> {
    let text = read_text("profile", path, MAX_PROFILE_BYTES)?;
    Ok(ptlab_cost::parse_profile(
        &text,
        &path.display().to_string(),
    )?)
}

/// A `ptlab bench` result file, read with [`read_text`].
pub fn result_file(path: &Path) -> Result<ptlab_bench::result::BenchResult> {
    let text = read_text("result file", path, MAX_RESULT_BYTES)?;
    ptlab_bench::result::BenchResult::from_json(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Reads and parses a scenario and checks `--param` names against it.
/// Returns the display name, the source and the script.
pub fn load(path: &Path, params: &[(String, String)]) -> Result<(String, String, Script)> {
    let source = read(path)?;
    let name = path.display().to_string();
    let script = ptlab_scenario::parse(&name, &source)?;
    script.check_params(params).map_err(anyhow::Error::msg)?;
    Ok((name, source, script))
}

/// Options every scenario-running subcommand shares.
#[derive(Args, Clone, Debug)]
pub struct RunLimitArgs {
    /// Stop the run after N statements plus repeat iterations (0 = no
    /// limit); a bound on runaway loops such as `repeat 1000000000000`
    #[arg(long, value_name = "N", default_value_t = ptlab_scenario::DEFAULT_MAX_STATEMENTS)]
    pub max_statements: u64,

    /// No progress indication on stderr (shown for runs longer than 2 s)
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs longer than this get a progress indication on stderr.
const QUIET_FOR: Duration = Duration::from_secs(2);
/// Without a terminal, one progress line this often.
const LINE_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct ProgressState {
    bar: Option<indicatif::ProgressBar>,
    last_line: Option<Instant>,
}

/// Sets the statement limit for every run this process starts and installs
/// the progress indication: after [`QUIET_FOR`], a spinner when stderr is a
/// terminal, otherwise a line every [`LINE_EVERY`]; nothing for short runs.
pub fn apply(limits: &RunLimitArgs) {
    ptlab_scenario::set_default_max_statements(match limits.max_statements {
        0 => None,
        n => Some(n),
    });
    if limits.quiet {
        ptlab_scenario::set_progress_hook(None);
        return;
    }
    let tty = std::io::stderr().is_terminal();
    let state = Mutex::new(ProgressState::default());
    ptlab_scenario::set_progress_hook(Some(Arc::new(move |p: &Progress<'_>| {
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        if p.done {
            if let Some(bar) = st.bar.take() {
                bar.finish_and_clear();
            }
            if st.last_line.take().is_some() {
                crate::errln!(
                    "ptlab: {}: done after {} statements in {:.0?}",
                    p.file,
                    p.executed,
                    p.elapsed
                );
            }
            return;
        }
        if p.elapsed < QUIET_FOR {
            return;
        }
        let limit = p
            .limit
            .map_or("no limit".to_string(), |l| format!("limit {l}"));
        let msg = format!(
            "{}: {} statements and iterations executed ({limit}), at line {}, {:.0?}",
            p.file, p.executed, p.line, p.elapsed
        );
        if tty {
            let bar = st.bar.get_or_insert_with(|| {
                let b = indicatif::ProgressBar::new_spinner();
                b.set_style(
                    indicatif::ProgressStyle::with_template("{spinner} ptlab: {msg}")
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                );
                b
            });
            bar.set_message(msg);
            bar.tick();
        } else if st.last_line.is_none_or(|t| t.elapsed() >= LINE_EVERY) {
            st.last_line = Some(Instant::now());
            crate::errln!("ptlab: still running {msg}");
        }
    })));
}
