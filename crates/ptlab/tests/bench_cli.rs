//! `ptlab bench`, `ptlab compare` and `ptlab reproduce` end to end. Times
//! are never asserted; the live part uses tiny sizes and skips with a
//! printed reason when not root.

mod common;

use common::{ptlab, text};
use std::path::PathBuf;
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ptlab-bench-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn result_file(name: &str, label: &str, samples: &[f64]) -> PathBuf {
    let p = tmp(name);
    let json = serde_json::json!({
        "schema": 2, "label": label, "started": "2026-11-23T12:00:00Z",
        "environment": {"kernel": "6.18.44", "cpu": "x", "cpus": 2, "ptlab_version": "0.1.0"},
        "cases": [
            {"name": "fork-4k", "unit": "ns per fork", "better": "lower", "samples": samples},
            {"name": "uffd-move", "unit": "ns per live page", "better": "lower", "samples": [10.0, 10.0, 10.0]}
        ]
    });
    std::fs::write(&p, json.to_string()).unwrap();
    p
}

#[test]
fn compare_prints_mmtests_style_table() {
    let a = result_file("a.json", "base", &[100.0, 101.0, 99.0, 100.5, 99.5]);
    let b = result_file("b.json", "patched", &[80.0, 81.0, 79.0, 80.5, 79.5]);
    let c = result_file("c.json", "noise", &[100.2, 99.1, 101.0, 99.9, 100.3]);
    let out = ptlab(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        c.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.starts_with("| case | unit | better | base (mean ± stdev) | patched (mean ± stdev) | change | noise (mean ± stdev) | change |"),
        "{t}"
    );
    assert!(
        t.contains("| fork-4k | ns per fork | lower | 100 ± 0.79 (0.0%) | 80.00 ± 0.79 | *+20.0%* | 100 ± 0.69 | (-0.1%) |"),
        "{t}"
    );
    // Zero variance on both sides: no test possible, so not significant.
    assert!(t.contains("| uffd-move | ns per live page | lower | 10.00 ± 0.00 (0.0%) | 10.00 ± 0.00 | (+0.0%) |"), "{t}");
}

#[test]
fn compare_rejects_bad_files() {
    let a = result_file("ok.json", "base", &[1.0, 2.0]);
    let bad = tmp("bad.json");
    std::fs::write(&bad, "{\"schema\": 99}").unwrap();
    let out = ptlab(&["compare", a.to_str().unwrap(), bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("bad.json"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bench_rejects_unknown_workloads() {
    let out = ptlab(&["bench", "fork-5k"]);
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(
        e.contains("unknown workload 'fork-5k'") && e.contains("fork-thp-pte"),
        "{e}"
    );
}

#[test]
fn reproduce_without_live_writes_the_report_and_says_what_is_missing() {
    let dir = tmp("repro");
    let out = ptlab(&[
        "reproduce",
        "--no-live",
        "--quick",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.contains("live: SKIPPED: --no-live given"), "{t}");
    // The model columns: one section per change (the five seed changes and
    // the proposed one), one row per arm and built-in profile (13 arms;
    // no local calibration without a live run).
    assert_eq!(
        t.matches("model (predicted ns per operation").count(),
        6,
        "{t}"
    );
    for p in ["apple-m-vm", "neoverse-n1", "zen3"] {
        let rows = t
            .lines()
            .filter(|l| l.starts_with("  ") && l.split_whitespace().nth(1) == Some(p))
            .count();
        assert_eq!(rows, 13, "{p}: {t}");
    }
    // The headline names every change and says the local profile is missing.
    assert!(t.starts_with("# ptlab reproduce"), "{t}");
    assert!(
        t.contains("No cost profile calibrated for this machine"),
        "{t}"
    );
    assert!(dir.join("report.md").exists());
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(html.matches("<svg class=\"chart\"").count(), 6);
    assert!(dir.join("report.txt").exists());
    assert!(dir.join("model.json").exists());
    assert!(!dir.join("live.json").exists());
    assert!(!dir.join("local-profile.toml").exists());
}

#[test]
fn bench_live_tiny_then_compare() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: bench_live_tiny_then_compare: needs root");
        return;
    }
    let f = tmp("live.json");
    let out = ptlab(&[
        "bench",
        "mremap-table-aligned",
        "mremap-table-unaligned",
        "--size",
        "8388608",
        "--runs",
        "3",
        "--quiet",
        "--out",
        f.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    if err.contains("cannot run benchmarks on the live kernel") {
        eprintln!("SKIP: bench_live_tiny_then_compare: {err}");
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{err}");
    let t = text(&out.stdout);
    assert!(t.starts_with("case "), "{t}");
    assert!(t.contains("mremap-table-unaligned      3 "), "{t}");
    assert!(err.contains("layout ok: 2048/2048 order-0 folios"), "{err}");
    let out = ptlab(&["compare", f.to_str().unwrap(), f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("| mremap-table-aligned | ns per mremap | lower |"));
    assert!(text(&out.stdout).contains("(+0.0%)"));
}

/// Headless Chromium with a fresh profile and a time limit; returns stdout.
fn chromium(args: &[String]) -> Option<String> {
    let bin = PathBuf::from("/usr/bin/chromium");
    if !bin.exists() {
        return None;
    }
    let profile = tmp(&format!("chromium-profile-{}", args.len()));
    let out_file = tmp(&format!("chromium-out-{}", args.len()));
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromium starts");
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > std::time::Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Some(std::fs::read_to_string(&out_file).unwrap_or_default())
}

#[test]
fn reproduce_report_renders_in_chromium() {
    let dir = tmp("repro-chromium");
    let out = ptlab(&["reproduce", "--no-live", "--out", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let url = format!("file://{}", dir.join("report.html").display());
    let Some(dom) = chromium(&["--dump-dom".into(), url.clone()]) else {
        eprintln!("SKIP: reproduce_report_renders_in_chromium: chromium not installed; run scripts/setup.sh");
        return;
    };
    assert_eq!(dom.matches("<svg class=\"chart\"").count(), 6, "{dom}");
    assert_eq!(dom.matches("<section class=\"change\"").count(), 6);
    assert!(dom.contains("</html>"));
    let png = dir.join("report.png");
    chromium(&[
        format!("--screenshot={}", png.display()),
        "--window-size=1200,900".into(),
        url,
    ]);
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn reproduce_from_a_result_file_renders_without_measuring() {
    let f = result_file("from.json", "base", &[100.0, 101.0, 99.0]);
    let dir = tmp("repro-from");
    let out = ptlab(&[
        "reproduce",
        "--from",
        f.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.contains("  fork-4k                    3"), "{t}");
    assert!(t.contains("fork-thp-pte: SKIPPED: not in"), "{t}");
    assert!(t.contains("  uffd-move "), "{t}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(html.matches("<svg class=\"chart\"").count(), 6);
    assert_eq!(html.matches("class=\"bar live\"").count(), 2);
    let live = std::fs::read_to_string(dir.join("live.json")).unwrap();
    assert!(live.contains("\"fork-4k\""));
}

#[test]
fn compare_and_reproduce_speak_json() {
    let a = result_file("ja.json", "base", &[100.0, 101.0, 99.0, 100.5, 99.5]);
    let b = result_file("jb.json", "patched", &[80.0, 81.0, 79.0, 80.5, 79.5]);
    let out = ptlab(&[
        "compare",
        "--format",
        "json",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let fork = &v["cases"][0];
    assert_eq!(fork["case"], "fork-4k");
    // + = better, as in the table.
    assert!((fork["others"][0]["pct_better"].as_f64().unwrap() - 20.0).abs() < 1e-9);
    assert_eq!(fork["others"][0]["significant"], true);

    let dir = tmp("repro-json");
    let out = ptlab(&[
        "reproduce",
        "--from",
        a.to_str().unwrap(),
        "--format",
        "json",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["headline"].as_array().unwrap().len(), 6);
    assert_eq!(v["headline"][4]["switch"], "uffd-move-batch");
    assert_eq!(v["headline"][5]["switch"], "swapout-unmap-batch");
    // "wrote ..." goes to stderr, so stdout stays one object.
    assert!(text(&out.stderr).contains("wrote"));
}

/// `reproduce --arch A` keeps only A's profiles in the model columns (the
/// spellings of `run --arch`); a `--profile` of the other architecture is
/// an error before anything runs.
#[test]
fn reproduce_arch_keeps_one_architectures_predictions() {
    for (arch, want) in [("aarch64", "arm64"), ("x86_64", "x86_64")] {
        let dir = tmp(&format!("repro-arch-{arch}"));
        let out = ptlab(&[
            "reproduce",
            "--no-live",
            "--arch",
            arch,
            "--format",
            "json",
            "-o",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        let mut archs = std::collections::BTreeSet::new();
        for c in v["headline"].as_array().unwrap() {
            for p in c["predicted"].as_array().unwrap() {
                archs.insert(p["arch"].as_str().unwrap().to_string());
            }
        }
        assert_eq!(
            archs.into_iter().collect::<Vec<_>>(),
            [want],
            "--arch {arch}: {v}"
        );
    }
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tmp("repro-arch-bad");
    let out = ptlab(&[
        "reproduce",
        "--no-live",
        "--arch",
        "x86_64",
        "--profile",
        repo.join("profiles/neoverse-n1.toml").to_str().unwrap(),
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is for arm64, not --arch x86_64"),
        "{}",
        text(&out.stderr)
    );
    assert!(ptlab(&["reproduce", "--arch", "sparc"]).status.code() == Some(2));
}
