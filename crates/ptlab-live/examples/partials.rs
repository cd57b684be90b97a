//! Print why generated fuzz cases stop early (development aid).
use ptlab_live::fuzz::{case_seed, generate, OpSet};
use ptlab_live::{diff_source, DiffOptions, DiffOutcome};

fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let n: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let set = OpSet::probe();
    for c in 0..n {
        let src = generate(case_seed(seed, c), 24, set);
        let rep = diff_source("g.ptl", &src, &DiffOptions::default()).expect("diff");
        if rep.outcome() == DiffOutcome::Partial {
            println!("case {c}: {:?}", rep.stopped);
        }
    }
}
