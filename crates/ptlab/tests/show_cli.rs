//! `ptlab show` opens on something: by default, on the model, the step with
//! the most state (with its batches and TLB invalidations), and the page's
//! messages fit the backend it was drawn on.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn show(args: &[&str], name: &str) -> String {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("show-cli-{name}.html"));
    let o = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .arg("show")
        .args(args)
        .arg("-o")
        .arg(&out)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn the_readme_example_opens_on_the_step_with_the_most_state() {
    let page = show(&["scenarios/examples/basic.ptl"], "default");
    assert!(page.contains("the step with the most state"), "{page}");
    assert!(
        page.matches("data-kind=\"vma\"").count() > 0,
        "no VMA drawn by default"
    );
    // The model pictures one step: its work is listed, and no message
    // blames the backend.
    assert!(!page.contains("this backend cannot tell"));
    assert!(!page.contains("data-kind=\"events-unavailable\""));

    // --last: the state after the last statement (basic.ptl unmaps all),
    // with the model's own reason for not listing work.
    let last = show(&["scenarios/examples/basic.ptl", "--last"], "last");
    assert!(last.contains("After the last statement"));
    assert_eq!(last.matches("data-kind=\"vma\"").count(), 0);
    assert!(last.contains("the model records the batches and TLB invalidations of one step"));
    assert!(!last.contains("live kernel cannot tell"));

    // An explicit step is still honoured.
    let s2 = show(&["scenarios/examples/basic.ptl", "--step", "2"], "step2");
    assert!(s2.contains("After step 2"));
    assert!(!s2.contains("the step with the most state"));
}

#[test]
fn the_legend_lists_the_contiguous_block_only_on_arm64() {
    let x86 = show(&["scenarios/examples/basic.ptl", "--arch", "x86_64"], "x86");
    let arm = show(
        &["scenarios/examples/basic.ptl", "--arch", "arm64"],
        "arm64",
    );
    assert!(!x86.contains("arm64 contiguous block"));
    assert!(arm.contains("arm64 contiguous block (CONT)"));
}

/// A picture draws every page: the 1 TiB example is refused at once, with
/// what to do instead, and the same scenario at 4 GiB is drawn.
#[test]
fn a_state_too_big_to_draw_is_refused_with_the_way_out() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("show-cli-1t.html");
    let o = Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args(["show", "scenarios/examples/fork-1t.ptl", "-o"])
        .arg(&out)
        .current_dir(repo())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("268435456 pages (1024 GiB)") && err.contains("--param size=1G"),
        "{err}"
    );
    let page = show(
        &["scenarios/examples/fork-1t.ptl", "--param", "size=4G"],
        "4g",
    );
    assert!(page.contains("<svg"), "the smaller run is drawn");
}
