//! The live backend's own tests. They run scenarios on the running kernel
//! and skip, with a printed reason, where root or a kernel feature is
//! missing. Every live run holds the THP knob lock, so these tests never
//! race each other or other live runs.

use ptlab_live::{diff_source, knobs, DiffOptions, DiffOutcome, LiveBackend};
use ptlab_model::{ModelConfig, ThpKnob, ThpMode};
use ptlab_scenario::{run_source, RunOptions, RunReport};

/// `Some(reason)` when live tests cannot run here.
fn skip_reason(need_root: bool) -> Option<String> {
    if let Some(r) = ptlab_live::live_unavailable() {
        return Some(r);
    }
    if need_root && !ptlab_live::is_root() {
        return Some("needs root (pagemap PFNs, kpageflags, kpagecount, THP knobs)".into());
    }
    None
}

macro_rules! require {
    ($root:expr) => {
        if let Some(why) = skip_reason($root) {
            eprintln!("SKIP: {}: {why}", module_path!());
            return;
        }
    };
}

fn run_live(src: &str) -> RunReport {
    let mut b = LiveBackend::new().expect("live backend starts");
    let r = run_source("t.ptl", src, &mut b, &RunOptions::default()).expect("parses");
    drop(b);
    r
}

fn assert_passes(r: &RunReport) {
    let msgs: Vec<String> = r.failures.iter().map(|f| f.to_string()).collect();
    assert!(r.passed(), "live run failed:\n{}", msgs.join("\n"));
}

#[test]
fn zero_page_anon_page_and_huge_zero_page_are_identified() {
    require!(true);
    // Machine defaults: top-level madvise, 2048kB inherit.
    let r = run_live(
        "\
p = mmap 6M at 0x100000000000 noreplace
madvise p 4M hugepage
read p
expect page p 2M hugezero pmd idx=0
expect page p + 8K hugezero idx=2
write p + 2M + 8K tag=7
expect page p + 2M 2M anon order=9 pmd X AX cnt=1 samefolio idx=0
expect page p + 2M + 8K tag=7
expect anonhuge p + 2M == 2M
expect stat vmstat/thp_fault_alloc == 1
madvise p + 4M 2M nohugepage
read p + 4M
expect page p + 4M zero pte
write p + 4M + 4K
expect page p + 4M + 4K anon order=0 X AX cnt=1 tag=p + 4M + 4K
expect vmflags p has hg
expect vmflags p + 4M has nh
",
    );
    assert_passes(&r);
}

#[test]
fn fork_shares_pages_and_cow_copies() {
    require!(true);
    let r = run_live(
        "\
p = mmap 64K at 0x100000000000 noreplace
write p 16K tag=5
fork child
expect page p 16K anon !X !AX cnt=2 tag=5
@child expect page p 16K anon !X cnt=2
f = pfn p
@child write p tag=6
@child expect page p X AX cnt=1 tag=6
expect page p tag=5 cnt=1 X
expect pfn p == f
@child exit
expect page p + 4K cnt=1 X !AX
",
    );
    assert_passes(&r);
}

#[test]
fn faults_are_reported_as_sigsegv() {
    require!(false);
    let r = run_live(
        "\
p = mmap 8K at 0x100000000000 noreplace prot r
read p
write p
expect segv
read 0x100000100000
expect segv
munmap p 8K
expect ok
",
    );
    assert_passes(&r);
}

#[test]
fn mprotect_and_mremap_run_live() {
    require!(false);
    let r = run_live(
        "\
p = mmap 1M at 0x100000000000 noreplace
write p 1M tag=3
mprotect p + 64K 64K r
expect ok
expect maps
  p .. p + 64K rw-p
  p + 64K .. p + 128K r--p
  p + 128K .. p + 1M rw-p
end
q = mremap p + 128K 128K 256K maymove fixed 0x100000400000
expect ret == 0x100000400000
expect page q 128K tag=3
expect page q + 128K 128K none
",
    );
    assert_passes(&r);
}

#[test]
fn userfaultfd_copy_zeropage_and_move() {
    require!(true);
    let r = run_live(
        "\
p = mmap 64K at 0x100000000000 noreplace
madvise p 64K nohugepage
uffd open
expect ok
uffd register p 32K missing
expect ok
n = uffd copy p p + 32K 8K tag=0x55
expect ret == 8192
expect page p 8K anon tag=0x55
uffd zeropage p + 8K 4K
expect ret == 4096
expect page p + 8K zero
write p + 32K tag=9
m = uffd move p + 16K p + 32K 4K
expect ret == 4096
expect page p + 16K anon tag=9
expect page p + 32K none
",
    );
    assert_passes(&r);
}

#[test]
fn a_missing_fault_without_a_handler_goes_to_userfaultfd() {
    require!(true);
    // The worker opens userfaultfd with UFFD_FEATURE_SIGBUS: the fault is
    // reported (`expect uffd`) instead of blocking the worker forever.
    let r = run_live(
        "\
p = mmap 8K at 0x100000000000 noreplace
uffd open
uffd register p 8K missing
read p + 4K
expect uffd
n = uffd move p p + 4K 4K
expect errno ENOENT
",
    );
    assert_passes(&r);
}

#[test]
fn the_harness_refuses_to_clobber_its_own_mappings() {
    require!(false);
    // The same backend: an exec'd worker's mappings are placed anew (ASLR)
    // in every worker, so another backend's addresses would name nothing.
    let mut b = LiveBackend::new().expect("live backend");
    let (s, _) = *b.foreign().first().expect("the worker has mappings");
    let r = run_source(
        "t.ptl",
        &format!("munmap {s:#x} 4K\n"),
        &mut b,
        &RunOptions::default(),
    )
    .expect("parses");
    drop(b);
    assert!(r.aborted);
    assert!(
        r.failures[0].message.contains("live harness's own"),
        "{}",
        r.failures[0]
    );
}

#[test]
fn non_fixed_mmaps_are_kept_out_of_foreign_vmas() {
    require!(false);
    let mut b = LiveBackend::new().expect("live backend");
    let r = run_source(
        "t.ptl",
        "p = mmap 64K\nq = mmap 2M\nexpect value q % 2M == 0\nwrite p\nobserve maps\n",
        &mut b,
        &RunOptions::default(),
    )
    .expect("parses");
    assert_passes(&r);
    let obs = &r.outputs[0].observation;
    // Only the scenario's VMAs are shown, never the worker's own.
    assert!(
        !obs.maps.is_empty() && obs.maps.len() <= 2,
        "{:?}",
        obs.maps
    );
    for m in &obs.maps {
        assert!(m
            .vm_flags
            .iter()
            .all(|f| f != "gd" && f != "dw" && f != "ex"));
    }
}

#[test]
fn knobs_are_set_during_the_run_and_restored_after() {
    require!(true);
    let before = knobs::current_mode(ThpKnob::Size(4)).expect("64kB knob");
    let mut b = LiveBackend::new().expect("live backend");
    let r = run_source(
        "t.ptl",
        // No `expect stat` here: with 64K=always every process on the
        // machine counts in 64kB/anon_fault_alloc (see docs/live.md).
        "thp 64K always\nthp enabled inherit\nexpect errno EINVAL\np = mmap 128K at 0x100000000000 noreplace\nwrite p + 64K\nexpect page p + 64K 64K anon folio=64K\n",
        &mut b,
        &RunOptions::default(),
    )
    .expect("parses");
    assert_passes(&r);
    assert_eq!(knobs::current_mode(ThpKnob::Size(4)), Ok(ThpMode::Always));
    let journal = knobs::journal_path();
    let text = std::fs::read_to_string(&journal).expect("journal exists while knobs are changed");
    assert!(text.contains("hugepages-64kB/enabled"), "{text}");
    drop(b);
    assert_eq!(knobs::current_mode(ThpKnob::Size(4)), Ok(before));
    assert!(!journal.exists(), "journal removed after restore");
}

#[test]
fn use_zero_page_is_never_written() {
    require!(false);
    let cur = knobs::use_zero_page().expect("use_zero_page readable");
    let other = if cur { 0 } else { 1 };
    let r = run_live(&format!("thp use_zero_page {}\n", u8::from(cur)));
    assert_passes(&r);
    let r = run_live(&format!("thp use_zero_page {other}\n"));
    assert!(r.aborted);
    assert!(r.failures[0].message.contains("only THP 'enabled' knobs"));
    assert_eq!(knobs::use_zero_page(), Some(cur));
}

#[test]
fn unprivileged_knob_writes_fail_clearly() {
    if ptlab_live::is_root() {
        eprintln!("SKIP: unprivileged_knob_writes_fail_clearly: runs only without root");
        return;
    }
    require!(false);
    let r = run_live("thp 64K always\n");
    assert!(r.aborted);
    assert!(
        r.failures[0].message.contains("needs root"),
        "{}",
        r.failures[0]
    );
}

#[test]
fn diff_agrees_on_a_simple_scenario() {
    require!(true);
    let rep = diff_source(
        "t.ptl",
        "thp 64K always\np = mmap 256K\nwrite p + 64K 64K\nmadvise p + 64K 4K dontneed\nfork c\n@c write p + 68K\nread p\n",
        &DiffOptions::default(),
    )
    .expect("diff runs");
    assert_eq!(rep.outcome(), DiffOutcome::Agree, "{}", rep.render_text());
    assert!(rep.comparisons >= 6);
}

/// A wrong model: the machine's, but with 64 KiB mTHP `always` where the
/// kernel has it `never` (checked here).
fn wrong_64k_model() -> ModelConfig {
    let mut cfg = ptlab_live::diff::machine_model_config(ptlab_model::ArchKind::X86_64);
    cfg.thp.per_order[4] = ThpMode::Always;
    {
        // Read the knob under the lock: another live run (another test
        // here, or `ptlab bench`) may have it set to `always` meanwhile.
        let _lock = knobs::ThpLock::acquire().expect("knob lock");
        assert_eq!(knobs::current_mode(ThpKnob::Size(4)), Ok(ThpMode::Never));
    }
    cfg
}

#[test]
fn diff_finds_and_locates_a_divergence() {
    require!(true);
    // A model that believes 64 KiB mTHP is enabled, on a kernel where it is
    // not (the machine default): the write must diverge, at line 3.
    let cfg = wrong_64k_model();
    let opts = DiffOptions {
        model_config: Some(cfg),
        ..DiffOptions::default()
    };
    let rep = diff_source(
        "t.ptl",
        "p = mmap 128K at 0x100000000000 noreplace\nread p\nwrite p + 64K\nobserve\n",
        &opts,
    )
    .expect("diff runs");
    assert_eq!(rep.outcome(), DiffOutcome::Diverge);
    let first = rep.first().expect("a divergence");
    assert_eq!(first.line, 3);
    assert!(first.stmt.contains("write p + 64K"));
    let text = rep.render_text();
    eprintln!("{text}");
    assert!(text.contains("t.ptl:3:"), "{text}");
    assert!(text.contains("order 0 vs 4"), "{text}");
    assert!(text.contains("64kB/anon_fault_alloc"), "{text}");
}

/// A counter difference that a wrong model makes is kept: the two re-runs
/// that confirm it stop after the statement it was seen at (the step
/// limit), and both show it. The statements after it still run in the
/// first run and agree or diverge as before.
#[test]
fn a_counter_divergence_survives_the_step_limited_reruns() {
    require!(true);
    let cfg = wrong_64k_model();
    let opts = DiffOptions {
        model_config: Some(cfg),
        max_divergences: 100,
        ..DiffOptions::default()
    };
    let mut src =
        String::from("p = mmap 128K at 0x100000000000 noreplace\nread p\nwrite p + 64K\n");
    for i in 0..8 {
        src.push_str(&format!("q{i} = mmap 4K\nwrite q{i}\n"));
    }
    let rep = diff_source("t.ptl", &src, &opts).expect("diff runs");
    let text = rep.render_text();
    let stats: Vec<_> = rep
        .divergences
        .iter()
        .filter(|d| d.kind == "stats")
        .collect();
    assert!(!stats.is_empty(), "{text}");
    assert_eq!(stats[0].line, 3, "{text}");
    assert_eq!(stats[0].step, 3, "{text}");
    assert!(
        stats[0].live.iter().any(|l| l.contains("anon_fault_alloc"))
            || stats[0]
                .model
                .iter()
                .any(|l| l.contains("64kB/anon_fault_alloc")),
        "{text}"
    );
    assert_eq!(rep.timing.reruns.1, 2, "both re-runs ran: {text}");
    assert!(
        text.contains("reproduced in two re-runs"),
        "the kept difference is named as reproduced: {text}"
    );
    // The first run went to the end (19 statements).
    assert_eq!(rep.run.statements_executed, 19, "{text}");
}

#[test]
fn diff_reports_frame_sharing_structurally() {
    require!(true);
    // Same structure, different frame numbers: must agree. A model that
    // copies where the kernel shares is caught by the frame bijection; here
    // we only check agreement over fork, CoW and exit.
    let rep = diff_source(
        "t.ptl",
        "p = mmap 32K at 0x100000000000 noreplace\nwrite p 32K\nfork a\nfork b\n@a write p\n@b exit\nwrite p + 4K\n@a exit\n",
        &DiffOptions::default(),
    )
    .expect("diff runs");
    assert_eq!(rep.outcome(), DiffOutcome::Agree, "{}", rep.render_text());
}

/// The observer finds the populated parts of a range with PAGEMAP_SCAN and
/// reads pagemap only there; reading every page's pagemap word (the way a
/// kernel without PAGEMAP_SCAN needs) must show exactly the same: every
/// kind of page, holes inside and between populated 2 MiB slots, and a
/// big untouched mapping.
#[test]
fn sparse_observation_equals_dense_observation() {
    require!(true);
    use ptlab_model::PageState;
    let mut b = LiveBackend::new().expect("live backend");
    let r = run_source(
        "t.ptl",
        "\
thp enabled madvise
thp 64K always
p = mmap 16M at 0x100000000000 noreplace
madvise p 4M hugepage
read p
write p + 2M
write p + 4M + 64K
read p + 6M
write p + 7M 8K
write p + 7M + 24K
madvise p + 7M + 12K 8K guard_install
swap 16M
write p + 8M 64K
madvise p + 8M 64K pageout
expect page p + 8M 64K swapped
q = mmap 1G noreserve
write q + 1G - 4K
",
        &mut b,
        &RunOptions::default(),
    )
    .expect("parses");
    assert_passes(&r);
    let sparse = b.observe_live("main").expect("sparse observation");
    b.set_dense_observation(true);
    let dense = b.observe_live("main").expect("dense observation");
    assert_eq!(sparse.maps, dense.maps);
    assert_eq!(sparse.pages, dense.pages);
    // Every kind of page is in it.
    let has = |f: &dyn Fn(&PageState) -> bool| sparse.pages.iter().any(|p| f(&p.state));
    assert!(has(&|s| matches!(s, PageState::NotPresent)));
    assert!(has(&|s| matches!(s, PageState::Zero)));
    assert!(has(&|s| matches!(s, PageState::Guard)));
    assert!(has(&|s| matches!(s, PageState::Swapped { .. })));
    assert!(has(&|s| matches!(s, PageState::Anon(a) if a.pmd_mapped)));
    assert!(has(&|s| matches!(s, PageState::Anon(a) if a.order == 4)));
    if knobs::use_zero_page() == Some(true) {
        assert!(has(&|s| matches!(s, PageState::HugeZero { .. })));
    }
    // The untouched 1 GiB before q's last 64 KiB folio is one record.
    let q = sparse.maps.last().expect("q").start;
    let rec = sparse
        .pages
        .iter()
        .find(|p| p.addr == q)
        .expect("a record at q");
    assert_eq!(
        (rec.state.clone(), rec.npages),
        (PageState::NotPresent, (1 << 18) - 16)
    );
}

/// The observer reads kpageflags and kpagecount only for the frames it
/// needs (sorted, in runs, with a second round for a folio's head or end
/// outside them: `Reader::frame_facts`). It must give exactly what the
/// straightforward read gives, the whole 512-frame block of each frame
/// (`Reader::frame_facts_by_block`): flags, count, folio order and index,
/// for scattered order-0 frames, 64K folios mapped whole and in part (head
/// or end unmapped), a PMD THP, a PTE-mapped THP without its head page,
/// the zero page and frames shared after fork.
#[test]
fn frame_reader_equals_block_reader() {
    require!(true);
    use ptlab_live::kernel::{self, Reader};
    let mut b = LiveBackend::new().expect("live backend");
    let r = run_source(
        "t.ptl",
        "\
thp 64K always
a = mmap 1M at 0x100000000000 noreplace
madvise a 1M nohugepage
repeat 128 as i
  write a + i * 8K
end
p = mmap 512K at 0x100000200000 noreplace
write p 512K
munmap p 16K
munmap p + 112K 16K
munmap p + 144K 32K
c = mmap 4M at 0x100000400000 noreplace
madvise c 4M hugepage
write c 4M
munmap c + 2M 4K
d = mmap 64K at 0x100000a00000 noreplace
madvise d 64K nohugepage
read d 16K
fork child
@child write a 64K
",
        &mut b,
        &RunOptions::default(),
    )
    .expect("parses");
    assert_passes(&r);
    let mut reader = Reader::new();
    if !reader.caps.kpage {
        eprintln!("SKIP: frame_reader_equals_block_reader: /proc/kpageflags is unreadable");
        return;
    }
    let mut pfns = Vec::new();
    for proc in ["main", "child"] {
        let pid = b.pid_of(proc).expect("pid");
        let words = reader
            .raw_pages(pid, 0x1000_0000_0000, 0x1000_00a1_0000)
            .expect("pagemap");
        pfns.extend(
            words
                .iter()
                .filter(|w| w.pagemap & kernel::PM_PRESENT != 0)
                .map(|w| w.pagemap & kernel::PM_PFN_MASK)
                .filter(|&f| f != 0),
        );
    }
    pfns.sort_unstable();
    pfns.dedup();
    assert!(pfns.len() > 1000, "{} frames", pfns.len());
    let fast = reader.frame_facts(&pfns);
    let mut cache = std::collections::HashMap::new();
    let mut seen = std::collections::BTreeSet::new();
    // The flags the observer uses; others (LRU, ACTIVE, REFERENCED, ...)
    // change in the background between two reads (a folio leaving a
    // per-CPU LRU batch).
    let used = kernel::KPF_COMPOUND_HEAD
        | kernel::KPF_COMPOUND_TAIL
        | kernel::KPF_ANON_EXCLUSIVE
        | kernel::KPF_ZERO_PAGE
        | kernel::KPF_ANON
        | kernel::KPF_THP;
    let stable = |f: Option<kernel::FrameFacts>| {
        f.map(|f| kernel::FrameFacts {
            flags: f.flags & used,
            ..f
        })
    };
    for (pfn, got) in pfns.iter().zip(&fast) {
        let want = reader.frame_facts_by_block(&mut cache, *pfn);
        assert_eq!(stable(*got), stable(want), "frame {pfn:#x}");
        let f = want.expect("readable");
        let head_seen = pfns.binary_search(&(pfn - u64::from(f.index))).is_ok();
        seen.insert((f.order, f.index != 0 && !head_seen));
        seen.insert((100 + f.count.min(2) as u8, false));
        if f.flags & kernel::KPF_ZERO_PAGE != 0 {
            seen.insert((255, false));
        }
    }
    // The population has what it should.
    for (what, key) in [
        ("an order-0 frame", (0, false)),
        ("a 64K folio's head", (4, false)),
        ("a 64K folio's tail frame without its head", (4, true)),
        ("a PMD THP", (9, false)),
        ("a PTE-mapped THP frame without its head", (9, true)),
        ("a frame mapped once", (101, false)),
        ("a frame shared after fork", (102, false)),
        ("the zero page", (255, false)),
    ] {
        assert!(seen.contains(&key), "no {what} among {seen:?}");
    }
    let c = reader.counters;
    eprintln!(
        "{} frames: kpageflags {} reads of {} frames, kpagecount {} reads of {} frames",
        pfns.len(),
        c.kpageflags_reads,
        c.kpageflags_frames,
        c.kpagecount_reads,
        c.kpagecount_frames
    );
    assert!(c.kpageflags_frames < 4 * pfns.len() as u64);
}

/// The worker is the small exec'd program (crates/ptlab-worker), not a
/// fork of the test binary: a handful of VMAs of its own, so every smaps
/// and numa_maps read of a comparison is short; it serves scenarios and
/// forks like the forked worker did.
#[test]
fn the_worker_is_a_small_exec_program() {
    require!(false);
    if !ptlab_live::exec_workers() {
        eprintln!(
            "SKIP: the_worker_is_a_small_exec_program: this build forks its workers \
             (the static worker program did not build, or PTLAB_FORK_WORKER is set)"
        );
        return;
    }
    let b = LiveBackend::new().expect("live backend starts");
    let pid = b.pid_of("main").expect("main worker");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe link");
    assert!(
        exe.to_string_lossy().starts_with("/memfd:ptlab-worker"),
        "worker exe is {exe:?}"
    );
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
    assert_eq!(comm.trim(), "ptlab-worker");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let vmas = maps.lines().filter(|l| !l.ends_with("[vsyscall]")).count();
    let mine = std::fs::read_to_string("/proc/self/maps").expect("maps");
    // A static binary (4 segments and its bss), stack, vdso, vvar and
    // vvar_vclock: about ten; the test binary has several times that.
    assert!(vmas <= 14, "the worker has {vmas} VMAs:\n{maps}");
    assert!(
        mine.lines().count() > vmas,
        "the test binary has fewer VMAs than the worker"
    );
    drop(b);
    let r = run_live(
        "\
p = mmap 64K at 0x100000000000 noreplace
write p 16K tag=5
fork child
@child write p tag=6
@child expect page p tag=6
expect page p tag=5
@child exit
",
    );
    assert_passes(&r);
}

/// A fence put up before a non-fixed mmap (a probe sharing a 2 MiB region
/// with one of the worker's own VMAs) is the harness's mapping, not the
/// scenario's: under `setrlimit as` it must not eat the scenario's budget.
/// The hint places the mmap right after a harness VMA, so the fence is
/// certain; with a budget of exactly the mapping, the mmap must succeed
/// live as it does in the model.
#[test]
fn a_fence_does_not_count_against_the_scenarios_address_space_limit() {
    require!(false);
    const PMD: u64 = 2 << 20;
    let mut b = LiveBackend::new().expect("live backend");
    let foreign = b.foreign().to_vec();
    let free = |s: u64, e: u64| foreign.iter().all(|&(fs, fe)| fe <= s || fs >= e);
    let Some(hint) = foreign
        .iter()
        .map(|&(_, e)| e)
        .filter(|&e| e % PMD != 0 && e % PMD <= PMD - (64 << 10) && free(e, e + (64 << 10)))
        .max()
    else {
        eprintln!("SKIP: no harness VMA ends inside a 2 MiB region with 64 KiB free after it");
        return;
    };
    let src = format!(
        "setrlimit as 64K\np = mmap 64K at {hint:#x}\nwrite p tag=3\nexpect page p tag=3\n"
    );
    let r = run_source("t.ptl", &src, &mut b, &RunOptions::default()).expect("parses");
    let fenced = b.notes().iter().any(|n| n.contains("fenced"));
    assert!(fenced, "no fence was put up: {:?}", b.notes());
    assert_passes(&r);
}

/// A scenario that brings folio orders into the counters' reach one by
/// one (every size `never` at first): 16K and then 64K by knob writes,
/// 2M by `MADV_COLLAPSE` (which ignores the `enabled` knobs).
const ORDERS_COME_INTO_REACH: &str = "\
thp enabled never
thp 16K never
thp 32K never
thp 64K never
thp 128K never
thp 256K never
thp 512K never
thp 1M never
thp 2M never
p = mmap 4M at 0x100000000000 noreplace
write p 16K
thp 16K always
write p + 64K 16K
thp 64K always
write p + 1M 64K
write p + 2M 2M
madvise p + 2M 2M collapse
observe
";

/// A live run that reads only the counters its statements can move
/// (`LiveBackend::set_narrow_counters`) still counts every move of its
/// own: an order's counters are read from before the statement that brings
/// it into reach (the collapse counts though 2M was never enabled), and an
/// attributed run does not take a read that lacked a new order as the
/// "before" of its next statement. Fails if an order is read only after
/// the statement that reached it, or a stale read is re-used.
#[test]
fn narrowed_counter_reads_count_every_order_the_run_reaches() {
    require!(true);
    for attribute in [false, true] {
        let mut b =
            LiveBackend::with_options(Default::default(), attribute).expect("live backend starts");
        b.set_narrow_counters(true);
        let r = run_source(
            "t.ptl",
            ORDERS_COME_INTO_REACH,
            &mut b,
            &RunOptions::default(),
        )
        .expect("parses");
        assert!(!r.aborted && r.passed(), "{:?}", r.failures);
        let stats = b.stats();
        drop(b);
        let get = |k: &str| stats.get(k).copied().unwrap_or(0);
        // Other processes' faults may add (64K and 16K are `always` for
        // every process); the run's own are at least these.
        assert!(
            get("16kB/anon_fault_alloc") >= 1,
            "attribute {attribute}: {stats:?}"
        );
        assert!(
            get("64kB/anon_fault_alloc") >= 1,
            "attribute {attribute}: {stats:?}"
        );
        assert!(
            get("vmstat/thp_collapse_alloc") >= 1,
            "attribute {attribute}: {stats:?}"
        );
        // Never in reach: read at start only, so it did not move.
        assert_eq!(
            get("256kB/anon_fault_alloc"),
            0,
            "attribute {attribute}: {stats:?}"
        );
    }
    // And the diff, which narrows by default, agrees with the model.
    for attribute_counters in [false, true] {
        let opts = DiffOptions {
            attribute_counters,
            ..DiffOptions::default()
        };
        let rep = diff_source("t.ptl", ORDERS_COME_INTO_REACH, &opts).expect("diff runs");
        assert_eq!(rep.outcome(), DiffOutcome::Agree, "{}", rep.render_text());
    }
}
