//! Render pictures in headless Chromium, take screenshots, and check the
//! rendered DOM's structure against the state it pictures: element counts,
//! not pixels.
//!
//! Skips (with a printed reason) when /usr/bin/chromium is missing; the
//! project's `scripts/setup.sh` installs it.

mod common;

use common::*;
use ptlab_model::ArchKind;
use ptlab_show::snapshot::{Changes, ProcSnap, Slot, Snapshot};
use ptlab_show::{render_html, HwEvent, Panel, Picture, RenderOptions, StepSel};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The browser: Debian's chromium (`PTLAB_CHROMIUM` overrides the path,
/// e.g. to check the skip).
fn chromium_path() -> PathBuf {
    std::env::var_os("PTLAB_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

fn chromium_missing() -> bool {
    if chromium_path().exists() {
        return false;
    }
    println!("SKIP: chromium not installed; run scripts/setup.sh");
    true
}

/// Run headless Chromium with a fresh profile; returns stdout.
fn chromium(args: &[String]) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let profile = std::env::temp_dir().join(format!(
        "ptlab-show-chromium-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&profile).expect("profile dir");
    let out_file = profile.join("stdout");
    let mut child = Command::new(chromium_path())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdout(std::fs::File::create(&out_file).expect("stdout file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            assert!(st.success(), "chromium failed: {st}");
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = std::fs::read_to_string(&out_file).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&profile);
    out
}

/// One element of the rendered DOM: its tag and attributes, and the
/// process figure it sits in (by index among figures, if any).
#[derive(Debug)]
struct El {
    tag: String,
    attrs: HashMap<String, String>,
    figure: Option<usize>,
}

impl El {
    fn kind(&self) -> &str {
        self.attrs.get("data-kind").map_or("", |s| s.as_str())
    }
    fn num(&self, a: &str) -> u64 {
        self.attrs
            .get(a)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{} lacks numeric {a}: {:?}", self.tag, self.attrs))
    }
}

/// A small tag scanner for Chromium's serialized DOM: start tags with
/// their attributes, in document order, tracking the enclosing `<figure>`.
fn parse_dom(html: &str) -> Vec<El> {
    let b = html.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut figures = 0usize;
    let mut in_figure: Option<usize> = None;
    while let Some(off) = html[i..].find('<') {
        i += off + 1;
        if html[i..].starts_with("/figure") {
            in_figure = None;
            continue;
        }
        if !b.get(i).is_some_and(|c| c.is_ascii_alphabetic()) {
            continue;
        }
        let name_end = html[i..]
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .map_or(html.len(), |k| i + k);
        let tag = html[i..name_end].to_ascii_lowercase();
        let mut attrs = HashMap::new();
        let mut j = name_end;
        loop {
            while j < b.len() && (b[j] as char).is_whitespace() {
                j += 1;
            }
            if j >= b.len() || b[j] == b'>' || b[j] == b'/' {
                break;
            }
            let k0 = j;
            while j < b.len() && !(b[j] as char).is_whitespace() && b[j] != b'=' && b[j] != b'>' {
                j += 1;
            }
            let key = html[k0..j].to_string();
            let mut val = String::new();
            if j < b.len() && b[j] == b'=' {
                j += 1;
                let q = b[j];
                if q == b'"' || q == b'\'' {
                    let end = html[j + 1..]
                        .find(q as char)
                        .map_or(html.len(), |k| j + 1 + k);
                    val = html[j + 1..end].to_string();
                    j = end + 1;
                } else {
                    let v0 = j;
                    while j < b.len() && !(b[j] as char).is_whitespace() && b[j] != b'>' {
                        j += 1;
                    }
                    val = html[v0..j].to_string();
                }
            }
            attrs.insert(key, val.replace("&amp;", "&"));
        }
        if tag == "figure" {
            in_figure = Some(figures);
            figures += 1;
        }
        out.push(El {
            tag,
            attrs,
            figure: in_figure,
        });
        i = j;
    }
    out
}

/// Write the page, dump its DOM through Chromium, take a screenshot.
fn render_in_chromium(name: &str, html: &str) -> (Vec<El>, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("show-chromium");
    std::fs::create_dir_all(&dir).expect("out dir");
    let page = dir.join(format!("{name}.html"));
    std::fs::write(&page, html).expect("write page");
    let url = format!("file://{}", page.display());
    let dom = chromium(&["--dump-dom".to_string(), url.clone()]);
    assert!(
        dom.contains("</svg>"),
        "no SVG in the rendered DOM of {name}"
    );
    let png = dir.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&png);
    chromium(&[
        format!("--screenshot={}", png.display()),
        "--window-size=1600,1000".to_string(),
        "--hide-scrollbars".to_string(),
        url,
    ]);
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}: not a PNG");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((w, h), (1600, 1000), "{name}: screenshot size");
    println!(
        "{name}: {} KiB page, screenshot {}",
        html.len() / 1024,
        png.display()
    );
    (parse_dom(&dom), png)
}

/// Check the elements of figure `fig` against the process snapshot `p`.
fn check_process(
    els: &[El],
    fig: usize,
    p: &ProcSnap,
    source_model: bool,
    changes: Option<&Changes>,
) {
    let mine: Vec<&El> = els.iter().filter(|e| e.figure == Some(fig)).collect();
    let of = |k: &'static str| mine.iter().filter(move |e| e.kind() == k);
    let figure = &mine[0];
    assert_eq!(figure.tag, "figure");
    assert_eq!(figure.attrs["data-process"], p.name);
    let (ptes, leaves) = p.counts();
    assert_eq!(figure.num("data-ptes"), ptes);
    assert_eq!(figure.num("data-pmd-leaves"), leaves);

    // One header per VMA, with its range.
    let vmas: Vec<(u64, u64)> = of("vma")
        .map(|e| {
            let h = |a: &str| u64::from_str_radix(e.attrs[a].trim_start_matches("0x"), 16).unwrap();
            (h("data-start"), h("data-end"))
        })
        .collect();
    let want: Vec<(u64, u64)> = p.vmas.iter().map(|v| (v.start, v.end)).collect();
    assert_eq!(vmas, want, "{}: VMA headers", p.name);

    // Every present PTE is accounted for by exactly one table row.
    let rows: Vec<&&El> = of("pte-table").collect();
    let present: u64 = rows.iter().map(|e| e.num("data-present")).sum();
    assert_eq!(present, ptes, "{}: present PTEs over table rows", p.name);
    let tables: u64 = rows.iter().map(|e| e.num("data-tables")).sum();
    assert_eq!(tables, p.pte_tables(), "{}: PTE tables", p.name);
    let pmd: u64 = of("pmd-leaf").map(|e| e.num("data-count")).sum();
    assert_eq!(pmd, leaves, "{}: PMD leaves", p.name);
    if source_model {
        assert_eq!(
            of("table").count(),
            p.upper.len(),
            "{}: upper tables",
            p.name
        );
    }

    // Grid rows: 512 cells each; the cells' states and folios match the slot.
    let grids: Vec<u64> = rows
        .iter()
        .filter(|e| e.attrs["data-layout"] == "grid")
        .map(|e| u64::from_str_radix(e.attrs["data-va"].trim_start_matches("0x"), 16).unwrap())
        .collect();
    let cells: Vec<&&El> = of("pte").collect();
    assert_eq!(cells.len(), grids.len() * 512, "{}: grid cells", p.name);
    let mut want_present = 0;
    let mut want_folios = BTreeSet::new();
    let mut want_cont = 0;
    let mut want_changed = 0;
    for va in &grids {
        let Some(Slot::Table { ptes, .. }) = p.slots.get(va) else {
            panic!("grid without a table at {va:#x}");
        };
        want_present += ptes.iter().filter(|e| e.present()).count();
        want_folios.extend(
            ptes.iter()
                .filter(|e| e.kind == ptlab_show::PteKind::Anon)
                .map(|e| e.folio),
        );
        want_cont += (0..32)
            .filter(|b| ptes[b * 16..b * 16 + 16].iter().all(|e| e.cont()))
            .count();
        want_changed += changes.map_or(0, |c| c.count_in(*va));
    }
    let shown_present = cells
        .iter()
        .filter(|e| !matches!(e.attrs["data-state"].as_str(), "none" | "outside"))
        .count();
    assert_eq!(shown_present, want_present, "{}: present cells", p.name);
    let shown_folios: BTreeSet<&str> = cells
        .iter()
        .filter_map(|e| e.attrs.get("data-folio").map(|s| s.as_str()))
        .collect();
    assert_eq!(
        shown_folios.len(),
        want_folios.len(),
        "{}: distinct folios",
        p.name
    );
    let grid_conts = of("cont")
        .filter(|e| e.tag == "rect" && e.attrs.contains_key("stroke"))
        .count();
    assert_eq!(grid_conts, want_cont, "{}: CONT blocks in grids", p.name);
    if let Some(c) = changes {
        // Changes of slots drawn here (a table or PMD leaf that exists only
        // in the other panel is drawn there).
        let in_tables: u64 = p
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Table { .. }))
            .map(|(va, _)| c.count_in(*va))
            .sum();
        let in_leaves: u64 = p
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Leaf { .. }))
            .map(|(va, _)| c.count_in(*va))
            .sum();
        let shown_changed: u64 = rows.iter().map(|e| e.num("data-changed")).sum();
        assert_eq!(shown_changed, in_tables, "{}: changed entries", p.name);
        let leaf_changed: u64 = of("changed")
            .filter(|e| e.attrs.get("height").map(|h| h == "12").unwrap_or(false))
            .map(|e| e.num("data-count"))
            .sum();
        assert_eq!(leaf_changed, in_leaves, "{}: changed PMD leaves", p.name);
        let grid_changed: u64 = of("changed")
            .filter(|e| e.attrs.get("height").map(|h| h == "11").unwrap_or(false))
            .map(|e| e.num("data-count"))
            .sum();
        assert_eq!(
            grid_changed, want_changed,
            "{}: changed cells in grids",
            p.name
        );
    }
}

fn picture(panels: Vec<Panel>, events: Option<Vec<HwEvent>>) -> String {
    render_html(
        &Picture {
            title: "test".into(),
            subtitle: vec![],
            panels,
            events,
            events_unavailable: None,
            notes: vec![],
        },
        &RenderOptions::default(),
    )
}

fn check_before_after(name: &str, src: &str, arch: ArchKind, line: u32) -> (Vec<El>, Snapshot) {
    let cap = run(src, arch, StepSel::Line(line), true);
    let before = cap.before.clone().expect("before");
    let after = cap.after.clone();
    let (pb, pa) = Panel::before_after(before.clone(), after.clone(), ("Before", "After"), name);
    let html = picture(vec![pb, pa], None);
    let (els, _) = render_in_chromium(name, &html);
    let figs = els.iter().filter(|e| e.kind() == "process").count();
    assert_eq!(
        figs,
        before.procs.len() + after.procs.len(),
        "{name}: process figures"
    );
    let mut fig = 0;
    for snap in [&before, &after] {
        for p in &snap.procs {
            let other = if std::ptr::eq(snap, &before) {
                &after
            } else {
                &before
            };
            let ch = other.proc(&p.name).map(|o| {
                if std::ptr::eq(snap, &before) {
                    Changes::between(p, o)
                } else {
                    Changes::between(o, p)
                }
            });
            check_process(&els, fig, p, true, ch.as_ref());
            fig += 1;
        }
    }
    // The state after the step agrees with the model itself.
    let m = cap.target.model();
    for (i, pid) in m.pids().enumerate() {
        let (ptes, pmds, tables) = model_counts(m, pid);
        let p = &after.procs[i];
        assert_eq!(p.counts(), (ptes, pmds));
        assert_eq!(p.upper.len() + p.pte_tables() as usize, tables);
    }
    assert!(els.iter().any(|e| e.kind() == "events-unavailable"));
    (els, after)
}

#[test]
fn teaching_fork_and_cow_on_arm64() {
    if chromium_missing() {
        return;
    }
    let src = "thp enabled never\nthp 64K always\nlet R = 0x7f0000000000\n\
               mmap 4M at R fixed prot none\np = mmap 128K at R + 1M fixed\nwrite p 64K\n\
               read p + 64K\nfork child\nwrite p + 12K\n";
    check_before_after("teach-fork", src, ArchKind::Arm64, 8);
    let (els, after) = check_before_after("teach-cow", src, ArchKind::Arm64, 9);
    // After the CoW the parent's block is unfolded: one CONT block left, in the child.
    let conts = els
        .iter()
        .filter(|e| e.kind() == "cont" && e.attrs.contains_key("stroke"))
        .count();
    assert!(conts >= 2, "child and before-panel blocks are drawn");
    assert_eq!(after.procs.len(), 2);
}

#[test]
fn partial_dontneed_splits_a_pmd() {
    if chromium_missing() {
        return;
    }
    let src = "thp enabled always\np = mmap 4M at 0x7f0000000000 fixed\nwrite p 4M\n\
               madvise p + 1M 64K dontneed\n";
    check_before_after("pmd-split", src, ArchKind::X86_64, 4);
}

#[test]
fn seed_workloads_at_1gib_scale() {
    if chromium_missing() {
        return;
    }
    let fork = "thp enabled never\np = mmap 1G\nwrite p 1G\nfork child\n";
    let (els, _) = check_before_after("fork-1g", fork, ArchKind::X86_64, 4);
    assert_eq!(
        els.iter().filter(|e| e.kind() == "pte").count(),
        0,
        "summaries only"
    );
    let mprotect = "thp enabled never\nthp 64K always\np = mmap 1G\nwrite p 1G\nmprotect p 1G r\n";
    check_before_after("mprotect-1g-64k", mprotect, ArchKind::Arm64, 5);
    let mremap = "thp enabled never\np = mmap 1G at 0x7e0000000000 fixed\nwrite p 1G\n\
                  q = mremap p 1G 1G maymove fixed 0x7d0000000000\n";
    let (els, _) = check_before_after("mremap-1g", mremap, ArchKind::X86_64, 4);
    let moved = els
        .iter()
        .filter(|e| e.tag == "text" && e.attrs.get("class").is_some_and(|c| c.contains("chg")))
        .count();
    assert!(moved >= 1);
}

#[test]
fn live_style_proc_snapshot_and_event_overlays() {
    if chromium_missing() {
        return;
    }
    let cap = run(
        "thp enabled never\nthp 64K always\np = mmap 256K at 0x7f0000010000 fixed\nwrite p 128K\nfork child\n",
        ArchKind::X86_64,
        StepSel::End,
        false,
    );
    let m = cap.target.model();
    let obs: Vec<_> = m
        .pids()
        .zip(["main", "child"])
        .map(|(pid, n)| m.observe(pid, n))
        .collect();
    let snap = Snapshot::from_observations(&obs);
    let events = vec![
        HwEvent::Batch {
            process: "main".into(),
            va: 0x7f0000010000,
            nr: 16,
            op: "wrprotect".into(),
        },
        HwEvent::Batch {
            process: "child".into(),
            va: 0x7f0000010000,
            nr: 16,
            op: "copy".into(),
        },
        HwEvent::TlbFlush {
            process: "main".into(),
            start: 0x7f0000010000,
            end: 0x7f0000030000,
            op: "flush_tlb_range".into(),
        },
    ];
    let html = picture(
        vec![Panel::single("After", "fork", snap.clone())],
        Some(events.clone()),
    );
    let (els, _) = render_in_chromium("proc-events", &html);
    for (i, p) in snap.procs.iter().enumerate() {
        check_process(&els, i, p, false, None);
    }
    assert_eq!(els.iter().filter(|e| e.kind() == "region").count(), 2);
    assert_eq!(els.iter().filter(|e| e.kind() == "table").count(), 0);
    assert_eq!(els.iter().filter(|e| e.kind() == "batch").count(), 2);
    assert!(els.iter().filter(|e| e.kind() == "tlb").count() >= 1);
    assert!(!els.iter().any(|e| e.kind() == "events-unavailable"));
}
