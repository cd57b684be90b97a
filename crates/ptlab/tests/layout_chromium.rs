//! Layout test in real Chromium through chromedriver (W3C WebDriver, spoken
//! over a plain TCP connection): the `ptlab reproduce` report and `ptlab
//! show` pages, at two window widths, must have no overlapping and no
//! clipped text.
//!
//! A text element is every non-blank text node; its boxes are the
//! browser's client rects of its line boxes. Two boxes of different text
//! nodes overlap when they intersect by more than 1 px in both directions;
//! a box is clipped when it sticks out of its `<svg>` (more than 1 px) or
//! out of an ancestor whose overflow is hidden or clipped. Scrollable
//! containers (`overflow: auto`) do not clip.
//!
//! Skips, printing `SKIP: <reason>`, when chromium or chromedriver is
//! missing (`scripts/setup.sh` installs both).

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The two window widths (px): a laptop and a narrow window.
const WIDTHS: [u32; 2] = [1366, 800];

fn ptlab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ptlab"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("ptlab runs")
}

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("layout-chromium");
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Why the browser cannot run here, if it cannot.
fn missing() -> Option<String> {
    for (what, p) in [("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)] {
        if !Path::new(p).exists() {
            return Some(format!("{what} not installed ({p}); run scripts/setup.sh"));
        }
    }
    None
}

/// One HTTP/1.1 request to chromedriver; the JSON `value` of the answer.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    // chromedriver keeps the connection open: read the header, then
    // exactly Content-Length bytes.
    let mut resp = Vec::new();
    let mut buf = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = resp.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before the header ended".into());
        }
        resp.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&resp[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .ok_or_else(|| format!("no Content-Length in {head}"))?;
    while resp.len() < head_end + len {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before the body ended".into());
        }
        resp.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&resp[head_end..head_end + len]).to_string();
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if !status.starts_with('2') {
        return Err(format!("{method} {path}: HTTP {status}: {}", v["value"]));
    }
    Ok(v["value"].clone())
}

/// A chromedriver process and one browser session.
struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

impl Browser {
    fn start() -> Browser {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let start = Instant::now();
        while http(port, "GET", "/status", None).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "chromedriver did not answer within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tmp(&format!("profile-{}", std::process::id()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                         "--disable-background-networking", "--disable-sync",
                         "--hide-scrollbars",
                         format!("--user-data-dir={}", profile.display())]
            }
        }}});
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
        };
        let v = http(port, "POST", "/session", Some(&caps)).expect("new session");
        b.session = v["sessionId"].as_str().expect("session id").to_string();
        b
    }

    fn cmd(&self, method: &str, what: &str, body: Value) -> Value {
        let path = format!("/session/{}/{what}", self.session);
        http(self.port, method, &path, Some(&body)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Open `page` in a window `width` px wide; the layout problems found.
    fn problems(&self, page: &Path, width: u32) -> Vec<String> {
        self.cmd(
            "POST",
            "window/rect",
            json!({"width": width, "height": 900, "x": 0, "y": 0}),
        );
        self.cmd(
            "POST",
            "url",
            json!({"url": format!("file://{}", page.canonicalize().unwrap().display())}),
        );
        let v = self.cmd("POST", "execute/sync", json!({"script": CHECK, "args": []}));
        v.as_array()
            .expect("array of problems")
            .iter()
            .map(|p| p.as_str().unwrap_or("?").to_string())
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(
                self.port,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Runs in the page: every overlapping pair and every clipped box of text.
const CHECK: &str = r#"
const boxes = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
let node, id = 0;
while ((node = walker.nextNode())) {
  if (!node.textContent.trim()) continue;
  const el = node.parentElement;
  if (el.closest('title, style, script')) continue;
  // Text the reader cannot see (inside a closed <details>, display: none).
  if (!el.checkVisibility({contentVisibilityAuto: true, visibilityProperty: true})) continue;
  if (el.closest('details:not([open]) > :not(summary)')) continue;
  const range = document.createRange();
  range.selectNodeContents(node);
  id++;
  for (const r of range.getClientRects()) {
    if (r.width < 0.5 || r.height < 0.5) continue;
    boxes.push({id, r, el, text: node.textContent.trim().slice(0, 40)});
  }
}
const out = [];
const inter = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
                        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
for (let i = 0; i < boxes.length; i++) {
  for (let j = i + 1; j < boxes.length; j++) {
    if (boxes[i].id !== boxes[j].id && inter(boxes[i].r, boxes[j].r)) {
      out.push('overlap: "' + boxes[i].text + '" and "' + boxes[j].text + '"');
    }
  }
}
const outside = (r, c) => r.left < c.left - 1 || r.right > c.right + 1 ||
                          r.top < c.top - 1 || r.bottom > c.bottom + 1;
for (const b of boxes) {
  const svg = b.el.closest('svg');
  if (svg && outside(b.r, svg.getBoundingClientRect())) {
    out.push('clipped by its svg: "' + b.text + '"');
    continue;
  }
  for (let a = b.el; a && a !== document.body; a = a.parentElement) {
    const s = getComputedStyle(a);
    if (/hidden|clip/.test(s.overflowX + s.overflowY) && outside(b.r, a.getBoundingClientRect())) {
      out.push('clipped by <' + a.tagName.toLowerCase() + '>: "' + b.text + '"');
      break;
    }
  }
}
return out;
"#;

/// The pages under test: the reproduce report of the recorded run, and
/// `ptlab show` of the README's example and of a fork scenario, on both
/// architectures.
fn pages() -> Vec<PathBuf> {
    let mut v = Vec::new();
    let dir = tmp("report");
    let live = repo().join("docs/reproduce-run/live.json");
    let out = ptlab(&[
        "reproduce",
        "--from",
        live.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    v.push(dir.join("report.html"));
    for (name, file, arch) in [
        ("basic-x86", "scenarios/examples/basic.ptl", "x86_64"),
        ("basic-arm64", "scenarios/examples/basic.ptl", "arm64"),
        (
            "fork-arm64",
            "tests/scenarios/ff-s08-fork-mthp.ptl",
            "arm64",
        ),
    ] {
        let page = tmp(&format!("show-{name}.html"));
        let out = ptlab(&[
            "show",
            repo().join(file).to_str().unwrap(),
            "--arch",
            arch,
            "-o",
            page.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "show {file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        v.push(page);
    }
    v
}

#[test]
fn report_and_show_pages_have_no_overlapping_or_clipped_text() {
    if let Some(why) = missing() {
        println!("SKIP: report_and_show_pages_have_no_overlapping_or_clipped_text: {why}");
        return;
    }
    let pages = pages();
    let b = Browser::start();
    // Pages to measure without failing (e.g. an older report), for a
    // before/after count: PTLAB_LAYOUT_MEASURE=a.html:b.html.
    for extra in std::env::var("PTLAB_LAYOUT_MEASURE")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
    {
        for w in WIDTHS {
            let probs = b.problems(Path::new(extra), w);
            let over = probs.iter().filter(|p| p.starts_with("overlap")).count();
            println!(
                "measured {extra} at {w} px: {over} overlapping pair(s), {} clipped",
                probs.len() - over
            );
        }
    }
    let mut bad = Vec::new();
    for p in &pages {
        for w in WIDTHS {
            let probs = b.problems(p, w);
            println!(
                "{} at {w} px: {} layout problem(s)",
                p.file_name().unwrap().to_string_lossy(),
                probs.len()
            );
            for x in probs.iter().take(20) {
                bad.push(format!(
                    "{} at {w} px: {x}",
                    p.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The check itself finds what it must: a page with two labels drawn on
/// top of each other and one outside its SVG.
#[test]
fn the_layout_check_finds_overlap_and_clipping() {
    if let Some(why) = missing() {
        println!("SKIP: the_layout_check_finds_overlap_and_clipping: {why}");
        return;
    }
    let page = tmp("bad.html");
    std::fs::write(
        &page,
        r#"<!DOCTYPE html><html><body><svg width="200" height="100" viewBox="0 0 200 100">
<text x="10" y="50">first label</text><text x="20" y="52">second label</text>
<text x="180" y="90">runs past the edge</text></svg>
<p>fine text</p></body></html>"#,
    )
    .unwrap();
    let b = Browser::start();
    let probs = b.problems(&page, 800);
    assert!(
        probs
            .iter()
            .any(|p| p.contains("overlap") && p.contains("first label")),
        "{probs:?}"
    );
    assert!(
        probs
            .iter()
            .any(|p| p.contains("clipped") && p.contains("runs past")),
        "{probs:?}"
    );
    assert!(!probs.iter().any(|p| p.contains("fine text")), "{probs:?}");
}
