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

use ptlab_model::{Advice, Call, ThpKnob, ThpMode};

/// What the run's processes may have had since the run started, as far as
/// the THP counters are concerned.
#[derive(Clone, Debug)]
pub struct CounterReach {
    /// Every `enabled` knob's value in force (top level and each size the
    /// machine has); `None`: unknown.
    knobs: Option<Vec<(ThpKnob, ThpMode)>>,
    /// Some size's effective mode was `always` at some time.
    ever_always: bool,
    /// Some size's effective mode was `madvise` at some time.
    ever_madvise: bool,
    /// A statement of the run called `MADV_HUGEPAGE`.
    advised: bool,
    /// Shmem may get large folios (its knobs allow some size).
    shmem_large: bool,
}

impl CounterReach {
    /// The reach at a run's start: `knobs` the `enabled` knobs' values
    /// (`None`: could not be read), `shmem_large` whether shmem may get
    /// large folios on this machine.
    pub fn new(knobs: Option<Vec<(ThpKnob, ThpMode)>>, shmem_large: bool) -> CounterReach {
        let mut me = CounterReach {
            knobs,
            ever_always: false,
            ever_madvise: false,
            advised: false,
            shmem_large,
        };
        me.note_modes();
        me
    }

    /// Fold the effective modes in force now into the `ever_*` flags.
    fn note_modes(&mut self) {
        let Some(knobs) = &self.knobs else {
            self.ever_always = true;
            return;
        };
        let top = knobs
            .iter()
            .find(|(k, _)| *k == ThpKnob::TopLevel)
            .map(|(_, m)| *m);
        for (k, m) in knobs {
            if !matches!(k, ThpKnob::Size(_)) {
                continue;
            }
            let eff = match m {
                ThpMode::Inherit => top,
                m => Some(*m),
            };
            match eff {
                Some(ThpMode::Never) => {}
                Some(ThpMode::Madvise) => self.ever_madvise = true,
                // always, or inherit of an unknown top level.
                _ => self.ever_always = true,
            }
        }
    }

    /// Whether a large anonymous or shmem folio may exist in the run's
    /// processes (or be made by a fault now).
    pub fn large_folios_possible(&self) -> bool {
        self.shmem_large || self.ever_always || (self.ever_madvise && self.advised)
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
            // Even a failed call may have advised part of its range.
            Call::Madvise {
                advice: Advice::HugePage,
                ..
            } => self.advised = true,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptlab_model::{MapFlags, Prot};

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
