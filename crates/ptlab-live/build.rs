//! Builds the live worker as a small static program (crates/ptlab-worker)
//! and hands its path to the crate, which embeds it (`live::worker_exe`).
//! A worker forked from ptlab carries ptlab's ~35 VMAs into every smaps
//! and numa_maps read; the exec'd one has about ten (docs/live.md, "Worker
//! processes").
//!
//! The program is built by a nested `cargo build` of the workspace member
//! `ptlab-worker` for this target with `-C target-feature=+crt-static`
//! (a flag that cannot be given to one binary of a build; with an explicit
//! `--target` it does not reach build scripts or proc macros), into its
//! own target directory under OUT_DIR. If that fails (no static C library
//! on the machine, a target without `crt-static`), the build goes on with
//! a warning and ptlab forks its workers from itself as before; so does a
//! cross build (target other than the host). Set
//! `PTLAB_NO_EXEC_WORKER=1` at build time to skip it.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ptlab_exec_worker)");
    println!("cargo::rerun-if-env-changed=PTLAB_NO_EXEC_WORKER");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let worker_dir = manifest.join("../ptlab-worker");
    for f in [
        "src/worker.rs",
        "src/wire/proto.rs",
        "src/lifeline.rs",
        "../ptlab-worker/src/main.rs",
        "../ptlab-worker/Cargo.toml",
    ] {
        println!("cargo::rerun-if-changed={}", manifest.join(f).display());
    }
    if env::var_os("PTLAB_NO_EXEC_WORKER").is_some_and(|v| !v.is_empty() && v != "0") {
        println!("cargo::warning=PTLAB_NO_EXEC_WORKER is set: live workers are forked from ptlab");
        return;
    }
    let target = env::var("TARGET").expect("TARGET");
    let arch_ok = target.starts_with("x86_64-") || target.starts_with("aarch64-");
    if !arch_ok || !target.contains("-linux-") {
        return;
    }
    // A cross build (scripts/check-arm64.sh type-checks for arm64 on an
    // x86-64 host) has no linker for the target here: fork there.
    if env::var("HOST").ok().as_deref() != Some(target.as_str()) {
        return;
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let tdir = out.join("worker-target");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--offline")
        .arg("--manifest-path")
        .arg(worker_dir.join("Cargo.toml"))
        .arg("--target")
        .arg(&target)
        .arg("--target-dir")
        .arg(&tdir)
        // The outer build's flags are for ptlab; the worker's are these.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        // No debug info, no symbols: the program is embedded in ptlab.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort");
    let built = tdir.join(&target).join("release").join("ptlab-worker");
    match cmd.output() {
        Ok(o) if o.status.success() && built.is_file() => {
            let dst = out.join("ptlab-worker");
            if let Err(e) = std::fs::copy(&built, &dst) {
                println!("cargo::warning=could not copy the worker program: {e}; live workers are forked from ptlab");
                return;
            }
            println!("cargo::rustc-cfg=ptlab_exec_worker");
            println!("cargo::rustc-env=PTLAB_WORKER_EXE={}", dst.display());
        }
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
            println!(
                "cargo::warning=the static worker program did not build ({}: {last}); live workers are forked from ptlab",
                o.status
            );
        }
        Err(e) => {
            println!("cargo::warning=could not run cargo for the worker program: {e}; live workers are forked from ptlab");
        }
    }
}
