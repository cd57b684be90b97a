//! Pictures of 1 GiB states stay small (bounded size, not timed) and the
//! page text carries the structure even without a browser.

mod common;

use common::*;
use ptlab_model::ArchKind;
use ptlab_show::{render_html, LayoutOptions, Panel, Picture, RenderOptions, StepSel};
use std::time::Instant;

fn before_after_html(src: &str, arch: ArchKind, line: u32) -> String {
    let cap = run(src, arch, StepSel::Line(line), true);
    let t = Instant::now();
    let (b, a) = Panel::before_after(cap.before.unwrap(), cap.after, ("Before", "After"), "step");
    let html = render_html(
        &Picture {
            title: "scale".into(),
            panels: vec![b, a],
            ..Picture::default()
        },
        &RenderOptions::default(),
    );
    println!(
        "{} KiB in {:.0} ms (layout + render)",
        html.len() / 1024,
        t.elapsed().as_secs_f64() * 1e3
    );
    html
}

fn count(html: &str, kind: &str) -> usize {
    html.matches(&format!("data-kind=\"{kind}\"")).count()
}

#[test]
fn fork_of_1gib_is_a_few_rows() {
    let html = before_after_html(
        "thp enabled never\np = mmap 1G\nwrite p 1G\nfork child\n",
        ArchKind::X86_64,
        4,
    );
    assert!(html.len() < 100 * 1024, "{} bytes", html.len());
    assert_eq!(count(&html, "process"), 3);
    assert_eq!(count(&html, "pte"), 0);
    // Before: main; after: main and child; each 1 GiB in at most 2 summary rows.
    assert!(count(&html, "pte-table") <= 6);
}

#[test]
fn mprotect_of_1gib_64k_arm64_is_small() {
    let html = before_after_html(
        "thp enabled never\nthp 64K always\np = mmap 1G\nwrite p 1G\nmprotect p 1G r\n",
        ArchKind::Arm64,
        5,
    );
    assert!(html.len() < 200 * 1024, "{} bytes", html.len());
}

#[test]
fn worst_case_1gib_stays_within_a_few_megabytes() {
    // Every table differs from its neighbour and is fragmented page by
    // page: the grid budget runs out, then the strip budget, and the rest
    // become one mixed row per panel.
    let src = "thp enabled never\np = mmap 1G at 0x7e0000000000 fixed\nwrite p 1G\n\
               repeat 131072 as i\n  madvise p + i * 8K + (i / 256) % 2 * 4K 4K dontneed\nend\n\
               read p\n";
    let html = before_after_html(src, ArchKind::X86_64, 7);
    let grids = html.matches("data-layout=\"grid\"").count();
    let strips = html.matches("data-layout=\"strip\"").count();
    let mixed = html.matches("data-layout=\"mixed\"").count();
    println!("{grids} grids, {strips} strips, {mixed} mixed rows");
    let o = LayoutOptions::default();
    assert_eq!((grids, strips), (o.grid_budget, o.strip_budget));
    // Before and after: the rest of each 512-table PMD table is one mixed row.
    assert_eq!(mixed, 2);
    assert!(html.len() < 3 * 1024 * 1024, "{} bytes", html.len());
}

#[test]
fn page_text_carries_the_structure() {
    let cap = run(
        "thp enabled never\nthp 64K always\np = mmap 256K at 0x7f0000010000 fixed\n\
         write p 64K\nread p + 64K\n",
        ArchKind::Arm64,
        StepSel::End,
        false,
    );
    let html = render_html(
        &Picture {
            title: "t".into(),
            panels: vec![Panel::single("After", "", cap.after)],
            ..Picture::default()
        },
        &RenderOptions::default(),
    );
    assert_eq!(count(&html, "process"), 1);
    assert_eq!(count(&html, "vma"), 1);
    assert_eq!(count(&html, "table"), 3);
    assert_eq!(count(&html, "pte"), 512);
    assert_eq!(html.matches("data-state=\"anon\"").count(), 16);
    assert_eq!(html.matches("data-state=\"zero\"").count(), 1);
    assert_eq!(html.matches("data-state=\"none\"").count(), 64 - 17);
    assert_eq!(html.matches("data-state=\"outside\"").count(), 512 - 64);
    assert_eq!(count(&html, "cont"), 1);
    assert_eq!(count(&html, "folio-outline"), 1);
    assert_eq!(count(&html, "events-unavailable"), 1);
}
