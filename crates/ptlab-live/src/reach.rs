//! Which statements of a live run can move the THP counters the diff
//! compares (per-size `hugepages-*/stats/*`, `/proc/vmstat` `thp_*` and
//! `numa_*`; crate::kernel::ThpCounters), so that a run beside others
//! takes [`crate::live::COUNTER_LOCK`] only for those (docs/live.md
//! "Counters when two jobs run at once").
//!
//! Every compared counter counts something a large folio or a huge PMD
//! does (its allocation, fallback, split, deferred split, swap-out,
//! collapse, a huge PMD's protection change) or a NUMA-hinting event
//! (NUMA balancing is refused live: crate::budget::numa_scan_refusal()).
//! So while no process of the run can have a large anonymous folio, no
//! statement but `MADV_COLLAPSE` moves any of them. A run's processes can
//! have none while, since the run started,
//!
//! * no folio size's effective `enabled` mode was `always`
//!   (Linux include/linux/huge_mm.h thp_vma_allowable_orders(): the
//!   `always` orders serve every VMA), and
//! * no size was `madvise` (itself, or `inherit` under a top level of
//!   `madvise`) while any of its VMAs had `VM_HUGEPAGE`, which only
//!   `MADV_HUGEPAGE` sets (mm/khugepaged.c hugepage_madvise(); a fork
//!   copies it, from a process of the run), and
//! * shmem (a `MAP_SHARED` anonymous mapping) cannot get large folios
//!   either: `shmem_enabled` `never` or `deny` and every size's
//!   `shmem_enabled` `never` (or `inherit` of those; mm/shmem.c
//!   shmem_allowable_huge_orders()); ptlab never writes these, so they are
//!   read once.
//!
//! The worker's own pages are small (it pre-faults its stack before THP is
//! enabled, docs/live.md "Worker processes"), and ptlab itself runs with
//! `PR_SET_THP_DISABLE`. `MADV_COLLAPSE` ignores the `enabled` knobs
//! (mm/khugepaged.c madvise_collapse() asks thp_vma_allowable_order()
//! with TVA_FORCED_COLLAPSE), so it always counts. A knob write moves no
//! counter itself; a failed one leaves the knobs unknown, and every later
//! statement counts.
//!
//! Pure: the knob values come from the caller ([`CounterReach::new`]).

use ptlab_model::{Advice, Call, MapFlags, ThpKnob, ThpMode};

/// What the run's processes may have had since the run started, as far as
/// the THP counters are concerned.
#[derive(Clone, Debug)]
pub struct CounterReach {
    /// Every `enabled` knob's value in force (top level and each size the
    /// machine has); `None`: unknown.
    knobs: Option<Vec<(ThpKnob, ThpMode)>>,
    /// Orders (bit `o`) whose effective mode was `always` at some time
    /// (every order when the knobs were unknown).
    always_orders: u16,
    /// Orders whose effective mode was `madvise` at some time.
    madvise_orders: u16,
    /// A statement of the run called `MADV_HUGEPAGE`.
    advised: bool,
    /// A statement of the run called `MADV_COLLAPSE`.
    collapsed: bool,
    /// Shmem may get large folios (its knobs allow some size).
    shmem_large: bool,
}

/// Orders 2..=9: those with counters.
const ALL_ORDERS: u16 = 0x3fc;

impl CounterReach {
    /// The reach at a run's start: `knobs` the `enabled` knobs' values
    /// (`None`: could not be read), `shmem_large` whether shmem may get
    /// large folios on this machine.
    pub fn new(knobs: Option<Vec<(ThpKnob, ThpMode)>>, shmem_large: bool) -> CounterReach {
        let mut me = CounterReach {
            knobs,
            always_orders: 0,
            madvise_orders: 0,
            advised: false,
            collapsed: false,
            shmem_large,
        };
        me.note_modes();
        me
    }

    /// Fold the effective modes in force now into the `*_orders` masks.
    fn note_modes(&mut self) {
        let Some(knobs) = &self.knobs else {
            self.always_orders = ALL_ORDERS;
            return;
        };
        let top = knobs
            .iter()
            .find(|(k, _)| *k == ThpKnob::TopLevel)
            .map(|(_, m)| *m);
        for (k, m) in knobs {
            let ThpKnob::Size(order) = k else { continue };
            let bit = 1u16.checked_shl(u32::from(*order)).unwrap_or(0) & ALL_ORDERS;
            let eff = match m {
                ThpMode::Inherit => top,
                m => Some(*m),
            };
            match eff {
                Some(ThpMode::Never) => {}
                Some(ThpMode::Madvise) => self.madvise_orders |= bit,
                // always, or inherit of an unknown top level.
                _ => self.always_orders |= bit,
            }
        }
    }

    /// Whether a large anonymous or shmem folio may exist in the run's
    /// processes (or be made by a fault now).
    pub fn large_folios_possible(&self) -> bool {
        self.shmem_large || self.always_orders != 0 || (self.madvise_orders != 0 && self.advised)
    }

    /// The orders (bit `o`, 2..=9; the `/proc/vmstat` counters are order
    /// 9's) whose counters the run's own statements may have moved so far:
    /// a folio of any other order was never possible in its processes.
    pub fn orders_reached(&self) -> u16 {
        if self.shmem_large {
            return ALL_ORDERS;
        }
        let mut m = self.always_orders;
        if self.advised {
            m |= self.madvise_orders;
        }
        if self.collapsed {
            m |= 1 << 9;
        }
        m
    }

    /// The orders [`CounterReach::orders_reached`] gives once `call` is
    /// done and succeeded: a counter of an order outside them is one
    /// `call` cannot move (what a live run reads the counters of before it
    /// runs `call`, crate::live::LiveBackend::set_narrow_counters). Only a
    /// failed knob write reaches more (every order: the knobs are unknown),
    /// and a knob write moves no counter itself, so those can be read
    /// after it.
    pub fn orders_after(&self, call: &Call) -> u16 {
        let mut ok = self.clone();
        ok.note_done(call, true);
        self.orders_reached() | ok.orders_reached()
    }

    /// Whether `call` may move a compared THP counter: it must then run
    /// under the counter lock, between two counter reads.
    pub fn may_move(&self, call: &Call) -> bool {
        match call {
            Call::Madvise {
                advice: Advice::Collapse,
                ..
            } => true,
            // A knob write moves no counter (what it allows later is
            // followed by note_done()).
            Call::SetThp { .. } => false,
            // MADV_HUGEPAGE only sets VM_HUGEPAGE: what it allows later
            // is followed by note_done().
            _ => self.large_folios_possible(),
        }
    }

    /// Follow what `call` did (`ok`: it succeeded) to what the run's
    /// processes may have from now on.
    pub fn note_done(&mut self, call: &Call, ok: bool) {
        match call {
            Call::SetThp { knob, mode } => {
                if !ok {
                    // Unknown now (a write may have half happened).
                    self.knobs = None;
                } else if let Some(knobs) = &mut self.knobs {
                    match knobs.iter_mut().find(|(k, _)| k == knob) {
                        Some(e) => e.1 = *mode,
                        None => knobs.push((*knob, *mode)),
                    }
                }
                self.note_modes();
            }
            // Even a failed call may have advised (collapsed) part of its
            // range.
            Call::Madvise {
                advice: Advice::HugePage,
                ..
            } => self.advised = true,
            Call::Madvise {
                advice: Advice::Collapse,
                ..
            } => self.collapsed = true,
            _ => {}
        }
    }
}

/// Whether `call` may allocate a folio for the run's processes (a fault,
/// a populate, a collapse, a swap-in): only such a statement moves the
/// allocation counters ([`ALLOC_COUNTERS`]). Every other statement's
/// window under the counter lock still sees other programs' faults (under
/// an `always` policy every process on the machine faults large folios),
/// which are then none of its own ([`alloc_counter_links`]). Not
/// allocating: an `mmap` without `MAP_POPULATE`/`MAP_LOCKED` (Linux
/// mm/mmap.c do_mmap() populates only for those; an unmap it makes on the
/// way frees), `munmap`, `munlock`, `mseal`, the `madvise` advice that
/// zap, split, reclaim or set flags (mm/madvise.c: none faults but
/// `MADV_POPULATE_*`, and `MADV_COLLAPSE` allocates), knob and limit
/// settings, `swap` (making an area writes a file with ptlab's own
/// THP-disabled memory; swapoff of a replaced area swaps pages in one at a
/// time: mm/swapfile.c unuse_pte_range() reads order-0 folios), and the
/// userfaultfd calls that make or register a handle.
pub fn may_allocate(call: &Call) -> bool {
    match call {
        Call::Mmap { flags, .. } => flags.intersects(MapFlags::POPULATE | MapFlags::LOCKED),
        Call::Madvise { advice, .. } => !matches!(
            advice,
            Advice::DontNeed
                | Advice::Free
                | Advice::DontFork
                | Advice::DoFork
                | Advice::HugePage
                | Advice::NoHugePage
                | Advice::PageOut
                | Advice::Cold
                | Advice::WipeOnFork
                | Advice::KeepOnFork
                | Advice::GuardInstall
                | Advice::GuardRemove
        ),
        Call::Munmap { .. }
        | Call::Munlock { .. }
        | Call::Mseal { .. }
        | Call::PrctlThp(_)
        | Call::Setrlimit { .. }
        | Call::DropCapIpcLock
        | Call::SetThp { .. }
        | Call::SetUseZeroPage { .. }
        | Call::SetSwap { .. }
        | Call::SetAfter { .. }
        | Call::SetBefore { .. }
        | Call::SetMemory { .. }
        | Call::SetNodes { .. }
        | Call::UffdCreate { .. }
        | Call::UffdApi { .. }
        | Call::UffdRegister { .. }
        | Call::UffdUnregister { .. } => false,
        _ => true,
    }
}

/// The counters only an allocation moves, each with the `nr_anon` gauge
/// its allocation also raises by one (the new folio's anon rmap: Linux
/// mm/rmap.c folio_add_new_anon_rmap() counts MTHP_STAT_NR_ANON), as
/// `size/name` (per size) or `vmstat/name`.
pub const ALLOC_COUNTERS: [(&str, bool); 10] = [
    ("anon_fault_alloc", true),
    ("anon_fault_fallback", false),
    ("anon_fault_fallback_charge", false),
    ("swpin", true),
    ("swpin_fallback", false),
    ("vmstat/thp_fault_alloc", false),
    ("vmstat/thp_fault_fallback", false),
    ("vmstat/thp_zero_page_alloc", false),
    ("vmstat/thp_collapse_alloc", true),
    ("vmstat/thp_collapse_alloc_failed", false),
];

/// For counter keys `keys` (crate::kernel::ThpCounters::keys): every
/// allocation counter's index, with the index of the `nr_anon` gauge its
/// allocations raise (`vmstat/thp_collapse_alloc`: 2M's; `thp_fault_alloc`
/// is 2M's `anon_fault_alloc` again, so it links to none). A statement
/// that cannot allocate ([`may_allocate`]) adds none of these counters'
/// moves to its own, and takes each allocation's one off its gauge: they
/// were other processes' allocations.
pub fn alloc_counter_links(keys: &[String]) -> Vec<(usize, Option<usize>)> {
    let find = |k: &str| keys.iter().position(|x| x == k);
    let mut out = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let (size, name) = match k.split_once('/') {
            Some(("vmstat", _)) => ("2048kB", k.as_str()),
            Some((size, name)) => (size, name),
            None => continue,
        };
        let Some((_, links)) = ALLOC_COUNTERS.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        let gauge = links.then(|| find(&format!("{size}/nr_anon"))).flatten();
        out.push((i, gauge));
    }
    out
}

/// Take out of `delta` (what the counters did during a statement that
/// cannot allocate, by index) what other processes' allocations did:
/// `links` from [`alloc_counter_links`].
pub fn remove_others_allocations(delta: &mut [i64], links: &[(usize, Option<usize>)]) {
    for &(i, gauge) in links {
        let Some(x) = delta.get_mut(i).map(std::mem::take) else {
            continue;
        };
        if let Some(g) = gauge.and_then(|g| delta.get_mut(g)) {
            *g -= x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptlab_model::Prot;

    fn knobs(top: ThpMode, sizes: &[(u8, ThpMode)]) -> Option<Vec<(ThpKnob, ThpMode)>> {
        let mut v = vec![(ThpKnob::TopLevel, top)];
        for o in 2..=9u8 {
            let m = sizes
                .iter()
                .find(|(s, _)| *s == o)
                .map_or(ThpMode::Never, |(_, m)| *m);
            v.push((ThpKnob::Size(o), m));
        }
        Some(v)
    }

    fn calls() -> Vec<Call> {
        vec![
            Call::Mmap {
                addr: 0,
                len: 1 << 21,
                prot: Prot::READ | Prot::WRITE,
                flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS,
            },
            Call::FillBytes {
                addr: 0x1000,
                len: 4096,
                byte: 1,
            },
            Call::Munmap {
                addr: 0x1000,
                len: 4096,
            },
            Call::Madvise {
                addr: 0,
                len: 4096,
                advice: Advice::PageOut,
            },
            Call::Madvise {
                addr: 0,
                len: 4096,
                advice: Advice::DontNeed,
            },
            Call::Fork { child: "c".into() },
            Call::Exit,
        ]
    }

    fn collapse() -> Call {
        Call::Madvise {
            addr: 0,
            len: 1 << 21,
            advice: Advice::Collapse,
        }
    }

    fn hugepage() -> Call {
        Call::Madvise {
            addr: 0,
            len: 1 << 21,
            advice: Advice::HugePage,
        }
    }

    #[test]
    fn every_size_never_moves_no_counter_but_collapse() {
        // The top level madvise, every size never (2M too): nothing.
        let r = CounterReach::new(knobs(ThpMode::Madvise, &[]), false);
        for c in calls() {
            assert!(!r.may_move(&c), "{c:?}");
        }
        assert!(r.may_move(&collapse()));
        // Sizes that inherit a top level of never: never.
        let r = CounterReach::new(
            knobs(
                ThpMode::Never,
                &[(4, ThpMode::Inherit), (9, ThpMode::Inherit)],
            ),
            false,
        );
        assert!(!r.may_move(&calls()[1]));
    }

    #[test]
    fn an_always_size_moves_counters_from_any_statement() {
        let r = CounterReach::new(knobs(ThpMode::Never, &[(4, ThpMode::Always)]), false);
        for c in calls() {
            assert!(r.may_move(&c), "{c:?}");
        }
        // inherit of an always top level.
        let r = CounterReach::new(knobs(ThpMode::Always, &[(9, ThpMode::Inherit)]), false);
        assert!(r.may_move(&calls()[1]));
    }

    #[test]
    fn a_madvise_size_counts_once_a_vma_is_advised() {
        // The machine's usual policy: 2M inherit under madvise.
        let mut r = CounterReach::new(knobs(ThpMode::Madvise, &[(9, ThpMode::Inherit)]), false);
        assert!(!r.may_move(&calls()[1]));
        assert!(!r.may_move(&hugepage()));
        r.note_done(&hugepage(), false);
        for c in calls() {
            assert!(r.may_move(&c), "{c:?}");
        }
        // Advised under never, then a size made madvise: counts from then.
        let mut r = CounterReach::new(knobs(ThpMode::Never, &[]), false);
        r.note_done(&hugepage(), true);
        assert!(!r.may_move(&calls()[1]));
        let w = Call::SetThp {
            knob: ThpKnob::Size(4),
            mode: ThpMode::Madvise,
        };
        assert!(!r.may_move(&w));
        r.note_done(&w, true);
        assert!(r.may_move(&calls()[1]));
    }

    #[test]
    fn a_size_that_was_always_keeps_counting_after_it_is_never_again() {
        let mut r = CounterReach::new(knobs(ThpMode::Never, &[(4, ThpMode::Always)]), false);
        r.note_done(
            &Call::SetThp {
                knob: ThpKnob::Size(4),
                mode: ThpMode::Never,
            },
            true,
        );
        // Its folios are still there: an unmap splits or frees them.
        assert!(r.may_move(&calls()[2]));
    }

    #[test]
    fn the_orders_reached_are_those_ever_enabled_for_the_runs_vmas() {
        // 64K always, 2M madvise (inherit): 64K only until a VMA is advised.
        let mut r = CounterReach::new(
            knobs(
                ThpMode::Madvise,
                &[(4, ThpMode::Always), (9, ThpMode::Inherit)],
            ),
            false,
        );
        assert_eq!(r.orders_reached(), 1 << 4);
        r.note_done(&hugepage(), true);
        assert_eq!(r.orders_reached(), (1 << 4) | (1 << 9));
        // A collapse reaches 2M under never too.
        let mut r = CounterReach::new(knobs(ThpMode::Never, &[]), false);
        assert_eq!(r.orders_reached(), 0);
        r.note_done(&collapse(), false);
        assert_eq!(r.orders_reached(), 1 << 9);
        // Written to always and back: still reached.
        let mut r = CounterReach::new(knobs(ThpMode::Never, &[]), false);
        for m in [ThpMode::Always, ThpMode::Never] {
            r.note_done(
                &Call::SetThp {
                    knob: ThpKnob::Size(3),
                    mode: m,
                },
                true,
            );
        }
        assert_eq!(r.orders_reached(), 1 << 3);
        assert_eq!(CounterReach::new(None, false).orders_reached(), 0x3fc);
        assert_eq!(
            CounterReach::new(knobs(ThpMode::Never, &[]), true).orders_reached(),
            0x3fc
        );
    }

    /// What a run reads before a statement covers what the statement
    /// brings into reach when it succeeds, and nothing else.
    #[test]
    fn the_orders_after_a_statement_include_what_it_brings_into_reach() {
        let r = CounterReach::new(knobs(ThpMode::Never, &[]), false);
        // A collapse counts in its own step: order 9 before it runs.
        assert_eq!(r.orders_after(&collapse()), 1 << 9);
        assert_eq!(r.orders_reached(), 0, "orders_after changes nothing");
        let always16 = Call::SetThp {
            knob: ThpKnob::Size(2),
            mode: ThpMode::Always,
        };
        // A knob write: the size it enables (if it fails, every order
        // after it: the knobs are unknown).
        assert_eq!(r.orders_after(&always16), 1 << 2);
        let mut failed = r.clone();
        failed.note_done(&always16, false);
        assert_eq!(failed.orders_reached(), 0x3fc);
        // MADV_HUGEPAGE under a madvise size reaches it.
        let r = CounterReach::new(knobs(ThpMode::Never, &[(4, ThpMode::Madvise)]), false);
        assert_eq!(r.orders_after(&hugepage()), 1 << 4);
        // Nothing else adds an order.
        for c in calls() {
            assert_eq!(r.orders_after(&c), 0, "{c:?}");
        }
    }

    #[test]
    fn statements_that_cannot_allocate_drop_other_processes_allocations() {
        let c = calls();
        // mmap (no populate), munmap, pageout, dontneed: no allocation.
        assert!(!may_allocate(&c[0]) && !may_allocate(&c[2]));
        assert!(!may_allocate(&c[3]) && !may_allocate(&c[4]));
        // write, fork, collapse, a populating mmap: may.
        assert!(may_allocate(&c[1]) && may_allocate(&c[5]) && may_allocate(&collapse()));
        assert!(may_allocate(&Call::Mmap {
            addr: 0,
            len: 4096,
            prot: Prot::READ,
            flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::POPULATE,
        }));
        assert!(!may_allocate(&Call::SetSwap {
            bytes: 64 << 20,
            kind: ptlab_model::swap::SwapKind::File,
        }));
        let keys: Vec<String> = [
            "16kB/anon_fault_alloc",
            "16kB/nr_anon",
            "16kB/split",
            "2048kB/anon_fault_alloc",
            "2048kB/nr_anon",
            "vmstat/thp_fault_alloc",
            "vmstat/thp_collapse_alloc",
            "vmstat/thp_split_pmd",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let links = alloc_counter_links(&keys);
        assert_eq!(
            links,
            vec![(0, Some(1)), (3, Some(4)), (5, None), (6, Some(4))]
        );
        // Another process faulted three 16K folios and one PMD THP, and
        // khugepaged collapsed one; the statement freed a 16K folio and
        // split a PMD.
        let mut d = vec![3, 2, 0, 1, 2, 1, 1, 1];
        remove_others_allocations(&mut d, &links);
        assert_eq!(d, vec![0, -1, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn unknown_knobs_a_failed_write_and_shmem_count() {
        let r = CounterReach::new(None, false);
        assert!(r.may_move(&calls()[1]));
        let r = CounterReach::new(knobs(ThpMode::Never, &[]), true);
        assert!(r.may_move(&calls()[1]));
        let mut r = CounterReach::new(knobs(ThpMode::Never, &[]), false);
        r.note_done(
            &Call::SetThp {
                knob: ThpKnob::Size(4),
                mode: ThpMode::Never,
            },
            false,
        );
        assert!(r.may_move(&calls()[1]));
        // An access under never: nothing.
        let r = CounterReach::new(knobs(ThpMode::Never, &[]), false);
        assert!(!r.may_move(&Call::Access {
            start: 0,
            len: 4096,
            write: true,
            tag: None,
        }));
    }
}
