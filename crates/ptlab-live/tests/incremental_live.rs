//! The incremental observer's rules (crate::incremental, docs/live.md
//! "How fast a diff is") checked on every scenario under tests/scenarios/
//! and scenarios/examples/: each comparison that re-uses reads is compared
//! with a full read of the same moment, and no re-used read may differ.
//! A scenario that shows a stale read is run again (the kernel's deferred
//! split of a folio in the background is the one change no rule sees);
//! only one that shows it twice fails. Needs root; skips with a printed
//! reason otherwise.

mod common;

use common::scenario_files;
use ptlab_live::{diff_file, DiffOptions};

#[test]
fn reused_reads_equal_full_reads_on_every_scenario() {
    let name = "reused_reads_equal_full_reads_on_every_scenario";
    if ptlab_live::skip_live_test(
        name,
        "needs root (without frame numbers nothing is re-used: every \
         comparison reads everything)",
    ) {
        return;
    }
    let opts = DiffOptions {
        verify_incremental: true,
        ..Default::default()
    };
    let files = scenario_files();
    assert!(!files.is_empty(), "no scenarios found");
    let (mut reused, mut checked) = (0u64, 0u64);
    let mut stale = Vec::new();
    for f in &files {
        let short = f.file_name().unwrap().to_string_lossy().to_string();
        let mut rep = diff_file(f, &opts).expect("diff runs");
        let st = rep.timing.incremental;
        if st.stale_pages + st.stale_maps > 0 {
            eprintln!(
                "STALE ONCE {short}: {} pages, {} smaps reads; running again",
                st.stale_pages, st.stale_maps
            );
            rep = diff_file(f, &opts).expect("diff runs");
        }
        let st = rep.timing.incremental;
        reused += st.pages_reused;
        checked += st.incremental;
        if st.stale_pages + st.stale_maps > 0 {
            let notes: Vec<&String> = rep
                .notes
                .iter()
                .filter(|n| n.starts_with("verification"))
                .collect();
            stale.push(format!("{short}: {notes:?}"));
        }
    }
    eprintln!(
        "{} scenarios: {checked} observations re-used {reused} page reads, each checked \
         against a full read",
        files.len()
    );
    assert!(checked > 0, "no comparison re-used anything");
    assert!(
        stale.is_empty(),
        "stale re-used reads:\n{}",
        stale.join("\n")
    );
}
