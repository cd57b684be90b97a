//! `ptlab cost`: hardware events and estimated time of a scenario, per
//! profile, optionally before/after one seed change.

use anyhow::{bail, Result};
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use ptlab_cost::{
    pct_change, price_run, ratio_interval, ratio_interval_in, EventRun, Interval, Prediction,
    Profile, ProgramCost,
};
use ptlab_model::{After, ArchKind, Before, Figure, HwEvent, KCall, Phase};
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

pub const COST_HELP: &str = "\
Examples:
  ptlab cost scenarios/seeds/mremap-batch-64k.ptl --param iterations=10 \\
        --compare-before mremap-pte-batch
  ptlab cost scenarios/seeds/mprotect-64k.ptl --arch arm64 --profile neoverse-n1 \\
        --param iterations=1 --compare-before mprotect-pte-batch
  ptlab cost scenarios/examples/numa-scan-64k.ptl --compare-before mprotect-pte-batch
        (NUMA-hinting scans of 1 GiB of 64 KiB folios: 6.17's batch skip)
  ptlab cost my.ptl --profile ./my-machine.toml --format json | jq .

What it does: runs the scenario on the model (no kernel needed), counts the
hardware work the kernel's algorithm does (PTE loads/stores, atomic clears,
contpte fold/unfold, TLB invalidations and barriers, struct-page traffic,
page zeroing and copying, faults, syscalls, ...), and prices it with cost
profiles. Each profile is for one architecture and also fixes the CPU
features that change which instructions the kernel issues (FEAT_TLBIRANGE,
BBML2, KPTI), so the model runs once per distinct (arch, features) pair.

Two figures: the totals (Total:, the per-line and per-operation tables)
are the page-table figure, the one `ptlab reproduce` uses; the
\"Whole program\" tables that follow add the fault path (exception
entry/exit, allocation by order, memcg charge, LRU add, zeroing by size),
the program's own stores and loads at the core's memory bandwidth, and
syscall entry/exit, one column per phase (page table, syscall, fault path,
user), with their own total, interval and before/after ratio.

Profiles: built-in apple-m-vm (arm64), neoverse-n1 (arm64), zen3 (x86_64), or
a path to a TOML file (see profiles/ and docs/cost.md). Without --profile:
every built-in profile of --arch, or all built-ins when --arch is not given.
Every price in a profile cites its source or is marked as an estimate.

--compare-before NAME runs the scenario twice, with and without the seed
change NAME (mremap-pte-batch, mremap-table-move, fork-pte-batch,
mprotect-pte-batch, uffd-move-batch), and prints both side by side with the
change in percent, + = less after (the change saves time or events): the
sign convention of every ptlab table (reproduce, compare: + = faster).
--compare-after NAME does the same for a proposed change newer than the
kernel ptlab models (swapout-unmap-batch, docs/prototyping.md): 6.18 as
shipped is the 'before' side, 6.18 with the proposal the 'after' side.

Reading the output: 'Per operation' sums the lines running each operation
(mremap, write, ...); 'Events' lists every non-zero event with its count and
its cost in ns; the total is in ns and in cycles at the profile's clock. All
numbers are linear in the counts: a loop of N iterations costs N times one
(so you may run with a small --param iterations and scale).

Exit status: 0 = success, 2 = usage, I/O, parse or profile error, or the
scenario failed on the model.";

#[derive(Args)]
pub struct CostArgs {
    /// The scenario file (.ptl)
    file: PathBuf,

    /// Architecture to model (default: the architecture of each profile)
    #[arg(long, value_enum)]
    arch: Option<crate::Arch>,

    /// Cost profile: a built-in name (apple-m-vm, neoverse-n1, zen3) or a
    /// path to a .toml profile (repeatable)
    #[arg(long = "profile", value_name = "NAME|PATH")]
    profiles: Vec<String>,

    /// Run a seed change's previous algorithm (repeatable); applies to both
    /// sides of --compare-before
    #[arg(long = "before", value_name = "NAME", value_parser = crate::parse_before)]
    before: Vec<Before>,

    /// Compare with the seed change NAME reverted: before/after side by side
    #[arg(long, value_name = "NAME", value_parser = crate::parse_before)]
    compare_before: Option<Before>,

    /// Run a proposed change newer than Linux 6.18 (repeatable):
    /// swapout-unmap-batch. Applies to both sides of a comparison
    #[arg(long = "after", value_name = "NAME", value_parser = crate::parse_after)]
    after: Vec<After>,

    /// Compare Linux 6.18 with the proposed change NAME applied
    /// (swapout-unmap-batch): 6.18 as "before", the proposal as "after"
    #[arg(long, value_name = "NAME", value_parser = crate::parse_after, conflicts_with = "compare_before")]
    compare_after: Option<After>,

    /// Set a `param NAME = DEFAULT` of the scenario (repeatable)
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = crate::parse_param)]
    params: Vec<(String, String)>,

    /// Override a CPU/kernel feature of every profile (repeatable):
    /// contpte=off (arm64 before Linux 6.9 or CONFIG_ARM64_CONTPTE=n),
    /// tlbi_range, bbml2_noabort, kpti
    #[arg(long = "cpu-feature", value_name = "NAME=on|off", value_parser = crate::parse_cpu_feature)]
    cpu_features: Vec<(String, bool)>,

    /// Output format
    #[arg(long, value_enum, default_value_t = CostFormat::Text)]
    format: CostFormat,

    #[command(flatten)]
    memory: crate::MemoryArg,

    #[command(flatten)]
    run_limits: crate::scenario::RunLimitArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CostFormat {
    /// Tables per profile: per line (or per operation when comparing), events, total
    Text,
    /// One JSON object: {file, params, profiles: [{profile, arch, after, before?, change_pct?}]}; change_pct + = cheaper after
    Json,
}

/// The profiles to price with.
fn select_profiles(args: &CostArgs) -> Result<Vec<Profile>> {
    let ps: Vec<Profile> = if args.profiles.is_empty() {
        ptlab_cost::builtin_profiles()
            .into_iter()
            .filter(|p| args.arch.is_none_or(|a| a.kind() == p.arch))
            .collect()
    } else {
        args.profiles
            .iter()
            .map(|n| crate::scenario::profile(n))
            .collect::<Result<_>>()?
    };
    if let Some(a) = args.arch.map(|a| a.kind()) {
        if let Some(p) = ps.iter().find(|p| p.arch != a) {
            bail!(
                "profile '{}' is for {}, not --arch {}",
                p.name,
                p.arch.name(),
                a.name()
            );
        }
    }
    if ps.is_empty() {
        bail!("no profile to price with");
    }
    let mut ps = ps;
    for p in &mut ps {
        for (n, on) in &args.cpu_features {
            p.features.set(n, *on).map_err(anyhow::Error::msg)?;
        }
    }
    Ok(ps)
}

/// One profile's results.
struct Row {
    profile: Profile,
    after: Prediction,
    before: Option<Prediction>,
}

pub fn cost(args: &CostArgs, out: &mut dyn Write) -> Result<u8> {
    crate::scenario::apply(&args.run_limits);
    let (name, source, script) = crate::scenario::load(&args.file, &args.params)?;
    let declared = script.params();
    let profiles = select_profiles(args)?;
    let base = args.before.iter().fold(Before::empty(), |a, b| a | *b);
    let base_after = args.after.iter().fold(After::empty(), |a, b| a | *b);
    type Key = (ArchKind, ptlab_model::HwFeatures, Before, After);
    let mut cache: HashMap<Key, EventRun> = HashMap::new();
    let mut runs =
        |arch: ArchKind, p: &Profile, before: Before, after: After| -> Result<EventRun> {
            let key = (arch, p.features.hw(), before, after);
            if let Some(r) = cache.get(&key) {
                return Ok(r.clone());
            }
            let r = ptlab_cost::run_events_with(
                &source,
                &name,
                arch,
                (before, after),
                &args.params,
                p.features.hw(),
                args.memory.memory,
            )?;
            cache.insert(key, r.clone());
            Ok(r)
        };
    let priced = |run: &EventRun, arch: ArchKind, before: Before, after: After, p: &Profile| {
        let mut pred = price_run(run, arch, before, p);
        pred.after = after.names();
        pred
    };
    let mut rows = Vec::new();
    for p in profiles {
        let arch = p.arch;
        let (this, before) = match (args.compare_before, args.compare_after) {
            (Some(b), _) => {
                let set = base | b;
                let before = priced(&runs(arch, &p, set, base_after)?, arch, set, base_after, &p);
                (base_after, Some(before))
            }
            (None, Some(a)) => {
                let before = priced(
                    &runs(arch, &p, base, base_after)?,
                    arch,
                    base,
                    base_after,
                    &p,
                );
                (base_after | a, Some(before))
            }
            (None, None) => (base_after, None),
        };
        let after = priced(&runs(arch, &p, base, this)?, arch, base, this, &p);
        rows.push(Row {
            profile: p,
            after,
            before,
        });
    }
    match args.format {
        CostFormat::Json => write_json(out, &name, args, &declared, &rows)?,
        CostFormat::Text => write_text(out, &name, args, &declared, &rows)?,
    }
    Ok(0)
}

fn fmt_ns(ns: f64) -> String {
    let a = ns.abs();
    if a >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

/// % saved from `before` to `after`: + = less after (faster, fewer
/// events), the sign convention of `reproduce` and `compare`.
fn pct_saved(before: f64, after: f64) -> Option<f64> {
    // `+ 0.0` turns the -0.0 of an unchanged value into 0.0 ("+0.0 %").
    pct_change(before, after).map(|p| -p + 0.0)
}

fn fmt_pct(before: f64, after: f64) -> String {
    match pct_saved(before, after) {
        Some(p) => format!("{p:+.1} %"),
        None if after == 0.0 => "=".to_string(),
        None => "new".to_string(),
    }
}

fn fmt_range(r: &Interval) -> String {
    format!("{} – {}", fmt_ns(r.low), fmt_ns(r.high))
}

/// Kernel-function calls (not priced), one column per arm.
fn write_calls(out: &mut dyn Write, before: Option<&Prediction>, after: &Prediction) -> Result<()> {
    let get = |p: &Prediction, k: KCall| p.calls.get(k.name()).copied().unwrap_or(0);
    let mut t = match before {
        Some(_) => table(&["kernel call", "before", "after", "change (+ = fewer)"]),
        None => table(&["kernel call", "calls"]),
    };
    let mut any = false;
    for &k in KCall::ALL {
        let ac = get(after, k);
        match before {
            Some(b) => {
                let bc = get(b, k);
                if bc == 0 && ac == 0 {
                    continue;
                }
                t.add_row(vec![
                    k.name().to_string(),
                    bc.to_string(),
                    ac.to_string(),
                    fmt_pct(bc as f64, ac as f64),
                ]);
            }
            None => {
                if ac == 0 {
                    continue;
                }
                t.add_row(vec![k.name().to_string(), ac.to_string()]);
            }
        }
        any = true;
    }
    if any {
        right(&mut t, 1);
        writeln!(out, "Kernel calls (counted, not priced):\n{t}")?;
    }
    Ok(())
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header.iter().map(Cell::new).collect::<Vec<_>>());
    t
}

fn right(t: &mut Table, from: usize) {
    for i in from..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

fn params_line(args: &CostArgs, declared: &[(String, u32, String)]) -> String {
    declared
        .iter()
        .map(|(n, _, d)| {
            let v = args
                .params
                .iter()
                .rev()
                .find(|(k, _)| k == n)
                .map_or(d.clone(), |(_, v)| v.clone());
            format!("{n}={v}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn before_label(p: &Prediction) -> String {
    let mut parts = Vec::new();
    if !p.before.is_empty() {
        parts.push(format!("before {}", p.before.join(",")));
    }
    if !p.after.is_empty() {
        parts.push(format!("proposed {} (not in 6.18)", p.after.join(",")));
    }
    if parts.is_empty() {
        "Linux 6.18 as shipped".to_string()
    } else {
        parts.join(" + ")
    }
}

fn write_text(
    out: &mut dyn Write,
    name: &str,
    args: &CostArgs,
    declared: &[(String, u32, String)],
    rows: &[Row],
) -> Result<()> {
    writeln!(out, "ptlab cost {name}")?;
    if !declared.is_empty() {
        writeln!(out, "params: {}", params_line(args, declared))?;
    }
    for r in rows {
        let p = &r.profile;
        let f = &p.features;
        writeln!(out)?;
        writeln!(
            out,
            "== {} ({}, {:.2} GHz): {}",
            p.name,
            p.arch.name(),
            p.clock_ghz,
            p.description
        )?;
        writeln!(
            out,
            "   features: tlbi_range={} bbml2_noabort={} kpti={}{}",
            f.tlbi_range,
            f.bbml2_noabort,
            f.kpti,
            if p.arch == ArchKind::Arm64 {
                format!(" contpte={}", !f.hw().contpte_off)
            } else {
                String::new()
            }
        )?;
        match &r.before {
            None => {
                writeln!(out, "   algorithm: {}", before_label(&r.after))?;
                let mut t = table(&["line", "statement", "runs", "time", "range", "share"]);
                for l in &r.after.by_line {
                    if l.events.is_zero() {
                        continue;
                    }
                    let share = if r.after.ns > 0.0 {
                        l.ns / r.after.ns * 100.0
                    } else {
                        0.0
                    };
                    t.add_row(vec![
                        l.line.to_string(),
                        l.text.clone(),
                        l.executions.to_string(),
                        fmt_ns(l.ns),
                        fmt_range(&l.ns_range),
                        format!("{share:.1} %"),
                    ]);
                }
                right(&mut t, 2);
                writeln!(out, "Per line:\n{t}")?;
                let mut t = table(&["event", "count", "ns each", "time"]);
                for e in r.after.by_event.iter().filter(|e| !e.event.is_fine()) {
                    t.add_row(vec![
                        e.event.name().to_string(),
                        e.count.to_string(),
                        format!("{}", p.unit(e.event).0),
                        fmt_ns(e.ns),
                    ]);
                }
                right(&mut t, 1);
                writeln!(out, "Events:\n{t}")?;
                write_calls(out, None, &r.after)?;
                writeln!(
                    out,
                    "Total: {} ({:.0} cycles); with every price in its range: {}",
                    fmt_ns(r.after.ns),
                    r.after.cycles,
                    fmt_range(&r.after.ns_range)
                )?;
                write_program(out, p, None, &r.after)?;
            }
            Some(b) => {
                let a = &r.after;
                writeln!(
                    out,
                    "   before: {}   after: {}",
                    before_label(b),
                    before_label(a)
                )?;
                let mut t = table(&["operation", "runs", "before", "after", "change (+ = less)"]);
                let mut ops: Vec<&str> = b.by_op.iter().map(|o| o.op.as_str()).collect();
                for o in &a.by_op {
                    if !ops.contains(&o.op.as_str()) {
                        ops.push(&o.op);
                    }
                }
                for op in ops {
                    let bo = b.by_op.iter().find(|o| o.op == op);
                    let ao = a.by_op.iter().find(|o| o.op == op);
                    let (bn, an) = (bo.map_or(0.0, |o| o.ns), ao.map_or(0.0, |o| o.ns));
                    t.add_row(vec![
                        op.to_string(),
                        ao.or(bo).map_or(0, |o| o.executions).to_string(),
                        fmt_ns(bn),
                        fmt_ns(an),
                        fmt_pct(bn, an),
                    ]);
                }
                right(&mut t, 1);
                writeln!(out, "Per operation:\n{t}")?;
                let mut t = table(&[
                    "event",
                    "before",
                    "after",
                    "change (+ = fewer)",
                    "ns each",
                    "before",
                    "after",
                ]);
                for &e in HwEvent::ALL.iter().filter(|e| !e.is_fine()) {
                    let (bc, ac) = (b.events.get(e), a.events.get(e));
                    if bc == 0 && ac == 0 {
                        continue;
                    }
                    let each = p.unit(e).0;
                    t.add_row(vec![
                        e.name().to_string(),
                        bc.to_string(),
                        ac.to_string(),
                        fmt_pct(bc as f64, ac as f64),
                        format!("{each}"),
                        fmt_ns(bc as f64 * each),
                        fmt_ns(ac as f64 * each),
                    ]);
                }
                right(&mut t, 1);
                writeln!(out, "Events (counts, then time):\n{t}")?;
                write_calls(out, Some(b), a)?;
                writeln!(
                    out,
                    "Total: before {} -> after {} ({}); {:.0} -> {:.0} cycles",
                    fmt_ns(b.ns),
                    fmt_ns(a.ns),
                    fmt_pct(b.ns, a.ns),
                    b.cycles,
                    a.cycles
                )?;
                writeln!(
                    out,
                    "Ranges (every price in its range): before {}, after {}",
                    fmt_range(&b.ns_range),
                    fmt_range(&a.ns_range)
                )?;
                if let Some(iv) = ratio_interval(&b.events, &a.events, p) {
                    writeln!(
                        out,
                        "after/before: {:.3} [{:.3} – {:.3}] (prices shared by both arms move together); saved {} [{:+.1} % – {:+.1} %]",
                        a.ns / b.ns,
                        iv.low,
                        iv.high,
                        fmt_pct(b.ns, a.ns),
                        (1.0 - iv.high) * 100.0,
                        (1.0 - iv.low) * 100.0
                    )?;
                }
                write_program(out, p, Some(b), a)?;
            }
        }
    }
    Ok(())
}

/// The phase columns of the whole-program tables.
const PHASE_HEADS: [&str; 4] = ["page table", "syscall", "fault path", "user"];

fn phase_cells(c: &ProgramCost) -> Vec<String> {
    Phase::ALL.iter().map(|&ph| fmt_ns(c.phase(ph))).collect()
}

/// The whole-program figure (docs/cost.md "Two figures"): per line and
/// phase, its fine events, its total and (comparing) its ratio interval.
fn write_program(
    out: &mut dyn Write,
    p: &Profile,
    before: Option<&Prediction>,
    a: &Prediction,
) -> Result<()> {
    writeln!(
        out,
        "Whole program (page-table work + syscalls + fault path + user loads/stores; the totals above are the page-table figure):"
    )?;
    match before {
        None => {
            let mut head = vec!["line", "statement"];
            head.extend(PHASE_HEADS);
            head.extend(["total", "range"]);
            let mut t = table(&head);
            for l in a.by_line.iter().filter(|l| !l.events.is_zero()) {
                let mut row = vec![l.line.to_string(), l.text.clone()];
                row.extend(phase_cells(&l.program));
                row.push(fmt_ns(l.program.ns));
                row.push(fmt_range(&l.program.ns_range));
                t.add_row(row);
            }
            let mut row = vec![String::new(), "total".to_string()];
            row.extend(phase_cells(&a.program));
            row.push(fmt_ns(a.program.ns));
            row.push(fmt_range(&a.program.ns_range));
            t.add_row(row);
            right(&mut t, 2);
            writeln!(out, "{t}")?;
        }
        Some(b) => {
            let mut t = table(&["phase", "before", "after", "change (+ = less)"]);
            for (i, &ph) in Phase::ALL.iter().enumerate() {
                let (bn, an) = (b.program.phase(ph), a.program.phase(ph));
                if bn == 0.0 && an == 0.0 {
                    continue;
                }
                t.add_row(vec![
                    PHASE_HEADS[i].to_string(),
                    fmt_ns(bn),
                    fmt_ns(an),
                    fmt_pct(bn, an),
                ]);
            }
            t.add_row(vec![
                "total".to_string(),
                fmt_ns(b.program.ns),
                fmt_ns(a.program.ns),
                fmt_pct(b.program.ns, a.program.ns),
            ]);
            right(&mut t, 1);
            writeln!(out, "{t}")?;
        }
    }
    let mut t = table(&["whole-program event", "count", "ns each", "time"]);
    let mut any = false;
    for &e in HwEvent::ALL.iter().filter(|e| e.is_fine()) {
        let c = a.events.get(e);
        if c == 0 {
            continue;
        }
        any = true;
        let each = p.unit(e).0;
        // A subset is priced in place of its superset for its part
        // (HwEvents::priced_count): say which.
        let name = match e.subset_of() {
            Some(sup) => format!("{} (of {}: priced instead)", e.name(), sup.name()),
            None => e.name().to_string(),
        };
        t.add_row(vec![
            name,
            c.to_string(),
            format!("{each}"),
            fmt_ns(c as f64 * each),
        ]);
    }
    if any {
        right(&mut t, 1);
        writeln!(
            out,
            "Whole-program events{} (they refine page_fault, folio_alloc, page_zero and user_page_access):\n{t}",
            if before.is_some() { " (after)" } else { "" }
        )?;
    }
    match before {
        None => writeln!(
            out,
            "Whole program: {}; with every price in its range: {}",
            fmt_ns(a.program.ns),
            fmt_range(&a.program.ns_range)
        )?,
        Some(b) => {
            writeln!(
                out,
                "Whole program: before {} -> after {} ({}); ranges: before {}, after {}",
                fmt_ns(b.program.ns),
                fmt_ns(a.program.ns),
                fmt_pct(b.program.ns, a.program.ns),
                fmt_range(&b.program.ns_range),
                fmt_range(&a.program.ns_range)
            )?;
            if let Some(iv) = ratio_interval_in(&b.events, &a.events, p, Figure::Program) {
                writeln!(
                    out,
                    "whole program after/before: {:.3} [{:.3} – {:.3}]; saved {} [{:+.1} % – {:+.1} %]",
                    a.program.ns / b.program.ns,
                    iv.low,
                    iv.high,
                    fmt_pct(b.program.ns, a.program.ns),
                    (1.0 - iv.high) * 100.0,
                    (1.0 - iv.low) * 100.0
                )?;
            }
        }
    }
    Ok(())
}

fn write_json(
    out: &mut dyn Write,
    name: &str,
    args: &CostArgs,
    declared: &[(String, u32, String)],
    rows: &[Row],
) -> Result<()> {
    let params: serde_json::Map<String, serde_json::Value> = declared
        .iter()
        .map(|(n, _, d)| {
            let v = args
                .params
                .iter()
                .rev()
                .find(|(k, _)| k == n)
                .map_or(d.clone(), |(_, v)| v.clone());
            (n.clone(), json!(v))
        })
        .collect();
    let profiles: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let mut v = json!({
                "profile": r.profile.name,
                "arch": r.profile.arch.name(),
                "clock_ghz": r.profile.clock_ghz,
                "features": r.profile.features,
                "after": r.after,
            });
            if let Some(b) = &r.before {
                v["before"] = json!(b);
                v["change_pct"] = json!(pct_saved(b.ns, r.after.ns));
                if let Some(iv) = ratio_interval(&b.events, &r.after.events, &r.profile) {
                    v["ratio"] = json!({
                        "after_over_before": r.after.ns / b.ns,
                        "low": iv.low,
                        "high": iv.high,
                    });
                    v["change_pct_range"] = json!({
                        "low": (1.0 - iv.high) * 100.0,
                        "high": (1.0 - iv.low) * 100.0,
                    });
                }
                v["program_change_pct"] = json!(pct_saved(b.program.ns, r.after.program.ns));
                if let Some(iv) =
                    ratio_interval_in(&b.events, &r.after.events, &r.profile, Figure::Program)
                {
                    v["program_ratio"] = json!({
                        "after_over_before": r.after.program.ns / b.program.ns,
                        "low": iv.low,
                        "high": iv.high,
                    });
                }
            }
            v
        })
        .collect();
    let doc = json!({
        "file": name,
        "params": params,
        "profiles": profiles,
    });
    writeln!(out, "{doc}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_is_plus_zero() {
        assert_eq!(fmt_pct(4.0, 4.0), "+0.0 %");
        assert_eq!(fmt_pct(4.0, 2.0), "+50.0 %");
        assert_eq!(fmt_pct(2.0, 4.0), "-100.0 %");
    }
}
