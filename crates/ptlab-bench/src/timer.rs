//! The clock every live measurement reads, per architecture.
//!
//! ptlab never reads a cycle counter itself. Every timed span (`ptlab bench`,
//! `ptlab calibrate`) reads `clock_gettime(CLOCK_MONOTONIC)` (std's
//! `Instant` is the same call), which the vDSO answers from the
//! architecture's free-running counter without entering the kernel:
//!
//! * x86-64: the TSC (`rdtsc`), scaled to ns by the kernel's clocksource
//!   (sub-ns resolution; under a hypervisor `kvm-clock` or `tsc`);
//! * arm64: the generic timer's virtual count `CNTVCT_EL0`, whose frequency
//!   is `CNTFRQ_EL0` (commonly 24 MHz to 1 GHz, i.e. one tick is 1 to
//!   42 ns; Armv8.6 fixes it at 1 GHz). The vDSO puts an `isb` before the
//!   counter read, so the read is not hoisted above earlier instructions.
//!
//! No explicit barrier (x86 `lfence`/`mfence`, arm64 `dsb ish`/`isb`) is
//! placed around the timed spans: every span ends in, or consists of,
//! system calls, and exception entry and return synchronise the
//! instruction stream (arm64: context-synchronising events; x86: `syscall`
//! / `sysret` are not fully serialising, but any reordering around them is
//! a few ns). The shortest span timed is ≥ 10 µs, so a tick or a
//! reordering is below 0.5 % of it ([`resolution_note`] says when a coarse
//! arm64 counter would not be).

/// The clock source and, where it can be read from user space, the length
/// of one counter tick in ns.
#[derive(Clone, Debug, PartialEq)]
pub struct TimerInfo {
    /// e.g. `clock_gettime(CLOCK_MONOTONIC) via tsc` or `... via
    /// CNTVCT_EL0 at 24.0 MHz`.
    pub source: String,
    /// One tick of the counter behind it (None where it is < 1 ns or
    /// unknown: x86's TSC frequency is not exposed without cpuid leaves
    /// that hypervisors often hide).
    pub tick_ns: Option<f64>,
}

/// The counter frequency in Hz (CNTFRQ_EL0, readable at EL0 on Linux).
#[cfg(target_arch = "aarch64")]
pub fn counter_hz() -> Option<u64> {
    let f: u64;
    // SAFETY: reading CNTFRQ_EL0 has no side effect; Linux lets EL0 read
    // the generic timer's frequency and virtual count (CNTKCTL_EL1.EL0VCTEN).
    unsafe { core::arch::asm!("mrs {}, cntfrq_el0", out(reg) f, options(nomem, nostack)) };
    (f > 0).then_some(f)
}

/// The counter frequency in Hz: not readable here (x86's TSC rate, or an
/// architecture ptlab does not know).
#[cfg(not(target_arch = "aarch64"))]
pub fn counter_hz() -> Option<u64> {
    None
}

/// The kernel's current clocksource (`tsc`, `kvm-clock`, `arch_sys_counter`).
fn clocksource() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Describe the clock of this machine.
pub fn info() -> TimerInfo {
    describe(clocksource(), counter_hz())
}

/// [`info`] from its parts (testable without the hardware).
pub fn describe(clocksource: Option<String>, hz: Option<u64>) -> TimerInfo {
    let via = clocksource.unwrap_or_else(|| "an unknown clocksource".into());
    match hz {
        Some(hz) => TimerInfo {
            source: format!(
                "clock_gettime(CLOCK_MONOTONIC) via {via} (CNTVCT_EL0 at {:.1} MHz)",
                hz as f64 / 1e6
            ),
            tick_ns: Some(1e9 / hz as f64),
        },
        None => TimerInfo {
            source: format!("clock_gettime(CLOCK_MONOTONIC) via {via}"),
            tick_ns: None,
        },
    }
}

/// A warning when one tick is more than 0.5 % of the shortest span timed
/// (`shortest_ns`); None when the clock is fine for it.
pub fn resolution_note(t: &TimerInfo, shortest_ns: f64) -> Option<String> {
    let tick = t.tick_ns?;
    (tick > shortest_ns * 0.005).then(|| {
        format!(
            "note: the counter ticks every {tick:.1} ns, {:.1} % of the shortest timed span ({shortest_ns:.0} ns): expect quantisation in the smallest measurements",
            100.0 * tick / shortest_ns
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm64_counter_frequency_gives_the_tick() {
        let t = describe(Some("arch_sys_counter".into()), Some(24_000_000));
        assert!(t.source.contains("arch_sys_counter"), "{}", t.source);
        assert!(t.source.contains("24.0 MHz"), "{}", t.source);
        let tick = t.tick_ns.unwrap();
        assert!((tick - 41.666).abs() < 0.01, "{tick}");
        // 41.7 ns is 0.4 % of 10 µs (fine) but 4 % of 1 µs (noted).
        assert_eq!(resolution_note(&t, 10_000.0), None);
        assert!(resolution_note(&t, 1_000.0).unwrap().contains("4.2 %"));
    }

    #[test]
    fn without_a_frequency_no_tick_is_claimed() {
        let t = describe(Some("tsc".into()), None);
        assert_eq!(t.tick_ns, None);
        assert_eq!(t.source, "clock_gettime(CLOCK_MONOTONIC) via tsc");
        assert_eq!(resolution_note(&t, 1.0), None);
        assert!(describe(None, None).source.contains("unknown"));
    }

    #[test]
    fn this_host_is_described() {
        let t = info();
        assert!(t.source.starts_with("clock_gettime(CLOCK_MONOTONIC) via "));
        // arm64 always has CNTFRQ_EL0; elsewhere no tick is claimed.
        assert_eq!(t.tick_ns.is_some(), cfg!(target_arch = "aarch64"));
    }
}
