//! THP counters as the kernel keeps them: per-size `hugepages-<N>kB/stats/*`
//! and the PMD-only `/proc/vmstat` `thp_*` events, and the NUMA-balancing
//! `numa_*` events.
//!
//! Linux: include/linux/huge_mm.h enum mthp_stat_item, include/linux/vm_event_item.h.

use std::collections::BTreeMap;

/// Per-size mTHP counters (`hugepages-<size>/stats/<name>`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MthpStat {
    AnonFaultAlloc,
    AnonFaultFallback,
    AnonFaultFallbackCharge,
    Split,
    SplitFailed,
    SplitDeferred,
    NrAnon,
    NrAnonPartiallyMapped,
    /// A large folio swapped out whole (never on a swap file).
    Swpout,
    /// A large folio split because its swap allocation failed.
    SwpoutFallback,
    /// A large folio swapped in whole (needs SWP_SYNCHRONOUS_IO: never on
    /// a swap file, so the model never counts it; compared so a kernel that
    /// did would show).
    Swpin,
    /// A large swap-in that fell back to order 0 (likewise never).
    SwpinFallback,
}

impl MthpStat {
    pub const ALL: [MthpStat; 12] = [
        MthpStat::AnonFaultAlloc,
        MthpStat::AnonFaultFallback,
        MthpStat::AnonFaultFallbackCharge,
        MthpStat::Split,
        MthpStat::SplitFailed,
        MthpStat::SplitDeferred,
        MthpStat::NrAnon,
        MthpStat::NrAnonPartiallyMapped,
        MthpStat::Swpout,
        MthpStat::SwpoutFallback,
        MthpStat::Swpin,
        MthpStat::SwpinFallback,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            MthpStat::AnonFaultAlloc => "anon_fault_alloc",
            MthpStat::AnonFaultFallback => "anon_fault_fallback",
            MthpStat::AnonFaultFallbackCharge => "anon_fault_fallback_charge",
            MthpStat::Split => "split",
            MthpStat::SplitFailed => "split_failed",
            MthpStat::SplitDeferred => "split_deferred",
            MthpStat::NrAnon => "nr_anon",
            MthpStat::NrAnonPartiallyMapped => "nr_anon_partially_mapped",
            MthpStat::Swpout => "swpout",
            MthpStat::SwpoutFallback => "swpout_fallback",
            MthpStat::Swpin => "swpin",
            MthpStat::SwpinFallback => "swpin_fallback",
        }
    }
}

/// `/proc/vmstat` THP events (PMD size only).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum VmEvent {
    ThpFaultAlloc,
    ThpFaultFallback,
    ThpSplitPmd,
    ThpDeferredSplitPage,
    ThpZeroPageAlloc,
    ThpCollapseAlloc,
    /// A PMD-sized folio split into small folios (split_huge_page()).
    ThpSplitPage,
    /// A PMD-sized folio swapped out whole.
    ThpSwpout,
    /// A PMD-sized folio split because its swap allocation failed.
    ThpSwpoutFallback,
    /// PTEs a NUMA-hinting scan changed (change_prot_numa(); a huge PMD
    /// counts its 512 pages).
    NumaPteUpdates,
    /// Huge PMDs change_pmd_range() changed — by mprotect as well as by
    /// NUMA-hinting scans.
    NumaHugePteUpdates,
    /// NUMA-hinting faults (do_numa_page(), do_huge_pmd_numa_page()).
    NumaHintFaults,
    /// Hinting faults on a folio already on the faulting task's node.
    NumaHintFaultsLocal,
    /// Base pages migrated by hinting faults (migrate_misplaced_folio()).
    NumaPagesMigrated,
}

impl VmEvent {
    pub const ALL: [VmEvent; 14] = [
        VmEvent::ThpFaultAlloc,
        VmEvent::ThpFaultFallback,
        VmEvent::ThpSplitPmd,
        VmEvent::ThpDeferredSplitPage,
        VmEvent::ThpZeroPageAlloc,
        VmEvent::ThpCollapseAlloc,
        VmEvent::ThpSplitPage,
        VmEvent::ThpSwpout,
        VmEvent::ThpSwpoutFallback,
        VmEvent::NumaPteUpdates,
        VmEvent::NumaHugePteUpdates,
        VmEvent::NumaHintFaults,
        VmEvent::NumaHintFaultsLocal,
        VmEvent::NumaPagesMigrated,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            VmEvent::ThpFaultAlloc => "thp_fault_alloc",
            VmEvent::ThpFaultFallback => "thp_fault_fallback",
            VmEvent::ThpSplitPmd => "thp_split_pmd",
            VmEvent::ThpDeferredSplitPage => "thp_deferred_split_page",
            VmEvent::ThpZeroPageAlloc => "thp_zero_page_alloc",
            VmEvent::ThpCollapseAlloc => "thp_collapse_alloc",
            VmEvent::ThpSplitPage => "thp_split_page",
            VmEvent::ThpSwpout => "thp_swpout",
            VmEvent::ThpSwpoutFallback => "thp_swpout_fallback",
            VmEvent::NumaPteUpdates => "numa_pte_updates",
            VmEvent::NumaHugePteUpdates => "numa_huge_pte_updates",
            VmEvent::NumaHintFaults => "numa_hint_faults",
            VmEvent::NumaHintFaultsLocal => "numa_hint_faults_local",
            VmEvent::NumaPagesMigrated => "numa_pages_migrated",
        }
    }
}

/// Counter values since the model started.
///
/// Beside the values, the counters ever changed (a bit per counter, set by
/// every change, never cleared, copied by a clone): a counter outside the
/// set is zero now and was zero at any earlier copy, so
/// [`Stats::add_since`] visits only the set (as
/// [`crate::core::hw::HwSink::add_since`]). Equality and `Debug` look at
/// the values only.
#[derive(Clone, Default)]
pub struct Stats {
    mthp: [[i64; MthpStat::ALL.len()]; 10],
    vm: [i64; VmEvent::ALL.len()],
    /// Bit `o` set: some per-size counter of order `o` changed.
    orders_touched: u16,
    /// Per order, bit `s`: the counter `MthpStat::ALL[s]` changed.
    mthp_touched: [u16; 10],
    /// Bit `e`: the counter `VmEvent::ALL[e]` changed.
    vm_touched: u16,
}

impl PartialEq for Stats {
    fn eq(&self, o: &Stats) -> bool {
        self.mthp == o.mthp && self.vm == o.vm
    }
}

impl Eq for Stats {}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats")
            .field("mthp", &self.mthp)
            .field("vm", &self.vm)
            .finish()
    }
}

/// The set bits of `m`, lowest first.
fn bits(mut m: u16) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (m != 0).then(|| {
            let b = m.trailing_zeros() as usize;
            m &= m - 1;
            b
        })
    })
}

impl Stats {
    /// Add `delta` to a per-size counter. Orders below 2 have no stats directory.
    pub fn mthp(&mut self, order: u8, stat: MthpStat, delta: i64) {
        if (2..=9).contains(&order) {
            self.mthp[order as usize][stat as usize] += delta;
            self.orders_touched |= 1 << order;
            self.mthp_touched[order as usize] |= 1 << stat as u32;
        }
    }
    pub fn vm(&mut self, ev: VmEvent, delta: i64) {
        self.vm[ev as usize] += delta;
        self.vm_touched |= 1 << ev as u32;
    }
    /// Add `k` times every change since `before`: a whole-stretch step
    /// that did one of `k + 1` identical steps through the step's own
    /// code adds the other `k` in one addition (as
    /// [`crate::core::hw::HwSink::add_since`]).
    /// Only the counters ever changed are visited (the others are zero
    /// in both).
    pub fn add_since(&mut self, before: &Stats, k: i64) {
        // A counter `before` had not changed was zero then, whatever its
        // slot holds (a copy from [`Stats::copy_into`] leaves it stale).
        for o in bits(self.orders_touched) {
            let (row, b, bt) = (&mut self.mthp[o], &before.mthp[o], before.mthp_touched[o]);
            for s in bits(self.mthp_touched[o]) {
                let was = if bt >> s & 1 != 0 { b[s] } else { 0 };
                row[s] += (row[s] - was) * k;
            }
        }
        for e in bits(self.vm_touched) {
            let was = if before.vm_touched >> e & 1 != 0 {
                before.vm[e]
            } else {
                0
            };
            self.vm[e] += (self.vm[e] - was) * k;
        }
    }
    /// A copy of these counters written over `out` for [`Stats::add_since`]
    /// only: the sets of changed counters and their values; the slots of
    /// counters never changed (zero) are left as `out` held them, which
    /// `add_since` reads as zero. (Equality and `Debug` of `out` see the
    /// stale slots: use it as an `add_since` base and nothing else.) For a
    /// stretch's tally kept in a reused box: a few of the counters copied,
    /// not all (issue 14, mremap-batch-64k's twelfth session).
    pub fn copy_into(&self, out: &mut Stats) {
        out.orders_touched = self.orders_touched;
        out.mthp_touched = self.mthp_touched;
        out.vm_touched = self.vm_touched;
        for o in bits(self.orders_touched) {
            for s in bits(self.mthp_touched[o]) {
                out.mthp[o][s] = self.mthp[o][s];
            }
        }
        for e in bits(self.vm_touched) {
            out.vm[e] = self.vm[e];
        }
    }
    pub fn get_mthp(&self, order: u8, stat: MthpStat) -> i64 {
        self.mthp
            .get(order as usize)
            .map_or(0, |s| s[stat as usize])
    }
    pub fn get_vm(&self, ev: VmEvent) -> i64 {
        self.vm[ev as usize]
    }
    /// All counters as `64kB/anon_fault_alloc` / `vmstat/thp_split_pmd` keys.
    pub fn to_map(&self) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        for order in 2u8..=9 {
            let size = crate::core::addr::Order(order).size_name();
            for s in MthpStat::ALL {
                m.insert(format!("{size}/{}", s.name()), self.get_mthp(order, s));
            }
        }
        for e in VmEvent::ALL {
            m.insert(format!("vmstat/{}", e.name()), self.get_vm(e));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn keys() {
        let mut s = Stats::default();
        s.mthp(4, MthpStat::AnonFaultAlloc, 1);
        s.mthp(0, MthpStat::AnonFaultAlloc, 1); // order 0: no stats dir, ignored
        s.vm(VmEvent::ThpSplitPmd, 2);
        let m = s.to_map();
        assert_eq!(m["64kB/anon_fault_alloc"], 1);
        assert_eq!(m["vmstat/thp_split_pmd"], 2);
        assert_eq!(m["2048kB/nr_anon"], 0);
    }

    /// The dense sum every counter would get: `now + (now - before) * k`.
    fn dense_add_since(now: &Stats, before: &Stats, k: i64) -> BTreeMap<String, i64> {
        let (n, b) = (now.to_map(), before.to_map());
        n.iter()
            .map(|(key, &v)| (key.clone(), v + (v - b[key]) * k))
            .collect()
    }

    #[test]
    fn add_since_repeats_every_change_since_the_copy() {
        // Counters changed before the copy only, after it only, both, and
        // back to their old value; every order with a stats directory and
        // every vmstat event in turn.
        for order in 2u8..=9 {
            for (si, &stat) in MthpStat::ALL.iter().enumerate() {
                let ev = VmEvent::ALL[(si + order as usize) % VmEvent::ALL.len()];
                let mut s = Stats::default();
                s.mthp(order, MthpStat::NrAnon, 3);
                s.vm(VmEvent::ThpFaultAlloc, 1);
                let before = s.clone();
                s.mthp(order, stat, 2);
                s.mthp(9 - (order - 2), MthpStat::Split, -1);
                s.vm(ev, 5);
                s.mthp(order, MthpStat::NrAnon, 1);
                s.mthp(order, MthpStat::NrAnon, -1);
                for k in [0, 1, 7] {
                    let want = dense_add_since(&s, &before, k);
                    let mut got = s.clone();
                    got.add_since(&before, k);
                    assert_eq!(got.to_map(), want, "order {order} {stat:?} {ev:?} k {k}");
                }
            }
        }
        // A copy written over a stale one (`copy_into`: only the counters
        // changed so far) repeats the same changes as a clone: counters
        // the copy had not changed are read as zero, whatever they hold.
        let mut other = Stats::default();
        other.mthp(4, MthpStat::NrAnon, 11);
        other.mthp(4, MthpStat::AnonFaultAlloc, 7);
        other.vm(VmEvent::ThpSplitPmd, 5);
        let mut s = Stats::default();
        s.mthp(4, MthpStat::NrAnon, 2);
        let (clone, mut stale) = (s.clone(), other.clone());
        s.copy_into(&mut stale);
        s.mthp(4, MthpStat::AnonFaultAlloc, 1);
        s.mthp(4, MthpStat::NrAnon, 1);
        s.vm(VmEvent::ThpSplitPmd, 1);
        let (mut x, mut y) = (s.clone(), s.clone());
        x.add_since(&clone, 3);
        y.add_since(&stale, 3);
        assert_eq!(x.to_map(), y.to_map());
        assert_eq!(y.get_mthp(4, MthpStat::AnonFaultAlloc), 4);
        assert_eq!(y.get_vm(VmEvent::ThpSplitPmd), 4);
        assert_eq!(y.get_mthp(4, MthpStat::NrAnon), 6);
        // Equality sees the values only, not which counters were touched.
        let mut a = Stats::default();
        a.vm(VmEvent::ThpSplitPmd, 1);
        a.vm(VmEvent::ThpSplitPmd, -1);
        assert_eq!(a, Stats::default());
    }
}
