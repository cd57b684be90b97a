//! The environment a run happened on: kernel, config bits that matter,
//! CPU, memory, THP settings, ptlab version and commit.

use crate::result::Environment;
use std::collections::BTreeMap;
use std::path::Path;

/// Kernel config options that change what the seed workloads measure.
pub const CONFIG_KEYS: &[&str] = &[
    "CONFIG_TRANSPARENT_HUGEPAGE",
    "CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS",
    "CONFIG_TRANSPARENT_HUGEPAGE_MADVISE",
    "CONFIG_TRANSPARENT_HUGEPAGE_NEVER",
    "CONFIG_ARCH_ENABLE_THP_MIGRATION",
    "CONFIG_HAVE_MOVE_PMD",
    "CONFIG_HAVE_MOVE_PUD",
    "CONFIG_USERFAULTFD",
    "CONFIG_HAVE_ARCH_USERFAULTFD_WP",
    "CONFIG_PGTABLE_LEVELS",
    "CONFIG_PAGE_SIZE_4KB",
    "CONFIG_ARM64_CONTPTE",
    "CONFIG_NUMA_BALANCING",
    "CONFIG_MEM_SOFT_DIRTY",
    "CONFIG_MEMCG",
    "CONFIG_PREEMPT_NONE",
    "CONFIG_PREEMPT_VOLUNTARY",
    "CONFIG_PREEMPT",
    "CONFIG_PREEMPT_DYNAMIC",
    "CONFIG_HZ",
    "CONFIG_DEBUG_TLBFLUSH",
    "CONFIG_DEBUG_VM",
    "CONFIG_PAGE_TABLE_CHECK",
    "CONFIG_KASAN",
    "CONFIG_LOCKDEP",
];

/// Parse kernel config text: `CONFIG_X=v` lines, and `# CONFIG_X is not set`
/// as `n`; only `keys` are kept (absent keys are not reported).
pub fn parse_config(text: &str, keys: &[&str]) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let (k, v) = if let Some((k, v)) = line.split_once('=') {
            (k.trim(), v.trim().trim_matches('"').to_string())
        } else if let Some(rest) = line.strip_prefix("# ") {
            match rest.strip_suffix(" is not set") {
                Some(k) => (k.trim(), "n".to_string()),
                None => continue,
            }
        } else {
            continue;
        };
        if keys.contains(&k) {
            m.insert(k.to_string(), v);
        }
    }
    m
}

fn read_config(release: &str) -> (BTreeMap<String, String>, String) {
    if Path::new("/proc/config.gz").exists() {
        if let Ok(out) = ptlab_live::lifeline::tie(
            std::process::Command::new("gzip").args(["-dc", "/proc/config.gz"]),
        )
        .output()
        {
            if out.status.success() {
                let text = String::from_utf8_lossy(&out.stdout);
                return (parse_config(&text, CONFIG_KEYS), "/proc/config.gz".into());
            }
        }
    }
    let boot = format!("/boot/config-{release}");
    if let Ok(text) = std::fs::read_to_string(&boot) {
        return (parse_config(&text, CONFIG_KEYS), boot);
    }
    (BTreeMap::new(), "unknown".into())
}

/// The free blocks of each order now (/proc/buddyinfo, every zone summed;
/// empty where it cannot be read).
pub fn free_blocks_now() -> Vec<u64> {
    std::fs::read_to_string("/proc/buddyinfo")
        .map(|t| buddyinfo_free_blocks(&t))
        .unwrap_or_default()
}

/// Free blocks of each order in /proc/buddyinfo's text, summed over every
/// node and zone (`Node 0, zone Normal 114739 82208 ...`); empty when no
/// line parses.
pub fn buddyinfo_free_blocks(text: &str) -> Vec<u64> {
    let mut sum: Vec<u64> = Vec::new();
    for line in text.lines() {
        let Some((_, counts)) = line.split_once("zone") else {
            continue;
        };
        // The zone's name, then one count per order.
        let counts: Option<Vec<u64>> = counts
            .split_whitespace()
            .skip(1)
            .map(|c| c.parse().ok())
            .collect();
        let Some(counts) = counts else {
            continue;
        };
        if sum.len() < counts.len() {
            sum.resize(counts.len(), 0);
        }
        for (s, c) in sum.iter_mut().zip(counts) {
            *s += c;
        }
    }
    sum
}

/// The free blocks of each order as a report shows them: `order 0..10:
/// a b c …` (empty when unknown).
pub fn free_blocks_line(blocks: &[u64]) -> String {
    if blocks.is_empty() {
        return String::new();
    }
    format!(
        "order 0..{}: {}",
        blocks.len() - 1,
        blocks
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// /proc/loadavg as it reads now (empty when it cannot be read).
pub fn load_avg() -> String {
    read_trim("/proc/loadavg").unwrap_or_default()
}

/// THP settings: every `enabled` knob's selected value, defrag,
/// use_zero_page and the khugepaged scan rate.
pub fn thp_settings() -> BTreeMap<String, String> {
    let dir = ptlab_live::knobs::THP_DIR;
    let mut m = BTreeMap::new();
    let choice = |p: &str| read_trim(p).map(|t| ptlab_live::knobs::parse_choice(&t).unwrap_or(t));
    for f in ["enabled", "defrag", "shmem_enabled"] {
        if let Some(v) = choice(&format!("{dir}/{f}")) {
            m.insert(f.to_string(), v);
        }
    }
    for f in [
        "use_zero_page",
        "khugepaged/defrag",
        "khugepaged/pages_to_scan",
        "khugepaged/scan_sleep_millisecs",
    ] {
        if let Some(v) = read_trim(&format!("{dir}/{f}")) {
            m.insert(f.to_string(), v);
        }
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("hugepages-") {
                if let Some(v) = choice(&format!("{dir}/{name}/enabled")) {
                    m.insert(format!("{name}/enabled"), v);
                }
            }
        }
    }
    if let Some(v) = read_trim("/proc/sys/kernel/numa_balancing") {
        m.insert("sysctl kernel.numa_balancing".into(), v);
    }
    m
}

/// The commit of the ptlab source tree this binary was built from: the git
/// work tree around the executable (`<tree>/target/<profile>/ptlab`), if any.
pub fn git_commit() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?;
    for _ in 0..4 {
        if dir.join("Cargo.toml").exists() && dir.join("crates").exists() {
            break;
        }
        dir = dir.parent()?;
    }
    let git = |args: &[&str]| {
        ptlab_live::lifeline::tie(
            std::process::Command::new("git")
                .arg("-C")
                .arg(dir)
                .args(args),
        )
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// The CPU's name from /proc/cpuinfo: x86's `model name` (the cpuid
/// brand string); arm64 has none, so its `CPU implementer` and `CPU part`
/// (the MIDR_EL1 fields) are named where ptlab knows them and shown in hex
/// otherwise.
pub fn cpu_name(cpuinfo: &str) -> String {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    if let Some(m) = field("model name") {
        return m;
    }
    let (Some(imp), Some(part)) = (field("CPU implementer"), field("CPU part")) else {
        return "unknown".into();
    };
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let vendor = match hex(&imp) {
        Some(0x41) => "Arm",
        Some(0x48) => "HiSilicon",
        Some(0x51) => "Qualcomm",
        Some(0x61) => "Apple",
        Some(0xc0) => "Ampere",
        _ => "",
    };
    // Arm Ltd's part numbers (MIDR_EL1.PartNum) of common server and
    // phone cores.
    let core = match (hex(&imp), hex(&part)) {
        (Some(0x41), Some(0xd0b)) => "Cortex-A76",
        (Some(0x41), Some(0xd0c)) => "Neoverse-N1",
        (Some(0x41), Some(0xd40)) => "Neoverse-V1",
        (Some(0x41), Some(0xd41)) => "Cortex-A78",
        (Some(0x41), Some(0xd44)) => "Cortex-X1",
        (Some(0x41), Some(0xd49)) => "Neoverse-N2",
        (Some(0x41), Some(0xd4f)) => "Neoverse-V2",
        _ => "",
    };
    match (vendor, core) {
        (v, "") if !v.is_empty() => format!("{v} (arm64 implementer {imp}, part {part})"),
        (v, c) if !v.is_empty() => format!("{v} {c} (arm64 implementer {imp}, part {part})"),
        _ => format!("arm64 implementer {imp}, part {part}"),
    }
}

/// Where the kernel reports its speculation mitigations, one file per
/// vulnerability.
pub const VULNERABILITIES_DIR: &str = "/sys/devices/system/cpu/vulnerabilities";

/// The active mitigations among `(name, text)` pairs as the vulnerability
/// files read: those whose text starts with "Mitigation", name → the text
/// after "Mitigation: " ("Not affected" and "Vulnerable" ones are left
/// out: they cost nothing).
pub fn active_mitigations<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    files
        .into_iter()
        .filter_map(|(name, text)| {
            let rest = text.trim().strip_prefix("Mitigation")?;
            let rest = rest.strip_prefix(':').unwrap_or(rest).trim();
            Some((name.to_string(), rest.to_string()))
        })
        .collect()
}

/// The active mitigations of the running kernel (empty when
/// [`VULNERABILITIES_DIR`] cannot be read).
pub fn mitigations_now() -> BTreeMap<String, String> {
    let Ok(dir) = std::fs::read_dir(VULNERABILITIES_DIR) else {
        return BTreeMap::new();
    };
    let files: Vec<(String, String)> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((name, std::fs::read_to_string(e.path()).ok()?))
        })
        .collect();
    active_mitigations(files.iter().map(|(n, t)| (n.as_str(), t.as_str())))
}

/// One line naming the active mitigations, for reports: `name (what)`
/// joined by "; ", or "none reported" when the map is empty.
pub fn mitigations_line(m: &BTreeMap<String, String>) -> String {
    if m.is_empty() {
        return "none reported".into();
    }
    m.iter()
        .map(|(n, w)| format!("{n} ({w})"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Collect the environment now.
pub fn collect() -> Environment {
    let kernel = read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpu_name(&cpuinfo);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let (config, config_source) = read_config(&kernel);
    let mut notes = Vec::new();
    if config.get("CONFIG_DEBUG_TLBFLUSH").map(String::as_str) != Some("y") {
        notes.push(
            "no TLB-flush counts: /proc/vmstat has nr_tlb_* only with CONFIG_DEBUG_TLBFLUSH".into(),
        );
    }
    let missing = crate::perf::unavailable();
    if !missing.is_empty() {
        notes.push(format!(
            "perf events unavailable here (not in the counters): {}",
            missing
                .iter()
                .map(|(n, e)| format!("{n} ({e})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    notes.push(
        "THP and vmstat counters are system-wide: other work on the machine adds to them".into(),
    );
    Environment {
        kernel,
        cpu,
        cpus,
        thp: thp_settings(),
        config,
        config_source,
        ptlab_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: git_commit(),
        memory_kb,
        load_avg: load_avg(),
        free_blocks: free_blocks_now(),
        mitigations: mitigations_now(),
        compactions: Vec::new(),
        schedule: Vec::new(),
        notes,
    }
}

/// Current UTC time as RFC 3339 (`2026-11-23T12:00:00Z`).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Format seconds since the epoch as RFC 3339 UTC.
pub fn rfc3339(secs: u64) -> String {
    let days = secs / 86400;
    let rem = secs % 86400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddyinfo_sums_every_zone_per_order() {
        let text = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 
Node 0, zone    DMA32     28     47     47     40     36     31     28     22     18     13    737 
Node 0, zone   Normal 114739  82208  41796  19283  12173   7563   5081   3436   1719    820   1866 
";
        let b = buddyinfo_free_blocks(text);
        assert_eq!(
            b,
            [114767, 82255, 41843, 19323, 12209, 7594, 5109, 3458, 1738, 834, 2606]
        );
        assert_eq!(free_blocks_line(&b[..3]), "order 0..2: 114767 82255 41843");
        assert!(buddyinfo_free_blocks("").is_empty());
        assert!(buddyinfo_free_blocks("garbage\nNode 0, zone Normal 1 x 3\n").is_empty());
        assert_eq!(free_blocks_line(&[]), "");
    }

    /// The AMD EPYC host's files (sixteenth session): only the lines that
    /// start with "Mitigation" are kept, with the text after it.
    #[test]
    fn active_mitigations_keep_the_mitigated_vulnerabilities() {
        let files = [
            (
                "spectre_v2",
                "Mitigation: Retpolines; IBPB: conditional; STIBP: disabled\n",
            ),
            ("spec_rstack_overflow", "Mitigation: Safe RET\n"),
            (
                "tsa",
                "Mitigation: Clear CPU buffers: user/kernel boundary\n",
            ),
            ("meltdown", "Not affected\n"),
            (
                "mds",
                "Vulnerable: Clear CPU buffers attempted, no microcode\n",
            ),
            ("odd", "Mitigation"),
        ];
        let m = active_mitigations(files);
        assert_eq!(
            m.keys().map(String::as_str).collect::<Vec<_>>(),
            ["odd", "spec_rstack_overflow", "spectre_v2", "tsa"]
        );
        assert_eq!(m["spec_rstack_overflow"], "Safe RET");
        assert_eq!(m["tsa"], "Clear CPU buffers: user/kernel boundary");
        assert_eq!(m["odd"], "");
        assert_eq!(
            mitigations_line(&m),
            "odd (); spec_rstack_overflow (Safe RET); spectre_v2 (Retpolines; IBPB: conditional; STIBP: disabled); tsa (Clear CPU buffers: user/kernel boundary)"
        );
        assert_eq!(mitigations_line(&BTreeMap::new()), "none reported");
    }

    #[test]
    fn config_parsing() {
        let t = "CONFIG_TRANSPARENT_HUGEPAGE=y\n# CONFIG_MEM_SOFT_DIRTY is not set\nCONFIG_HZ=250\nCONFIG_OTHER=y\n";
        let m = parse_config(t, CONFIG_KEYS);
        assert_eq!(m["CONFIG_TRANSPARENT_HUGEPAGE"], "y");
        assert_eq!(m["CONFIG_MEM_SOFT_DIRTY"], "n");
        assert_eq!(m["CONFIG_HZ"], "250");
        assert!(!m.contains_key("CONFIG_OTHER"));
    }

    #[test]
    fn cpu_names_on_x86_and_arm64() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu\n";
        assert_eq!(cpu_name(x86), "AMD EPYC 7B13");
        let n1 = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\n";
        assert_eq!(
            cpu_name(n1),
            "Arm Neoverse-N1 (arm64 implementer 0x41, part 0xd0c)"
        );
        let apple = "CPU implementer\t: 0x61\nCPU part\t: 0x039\n";
        assert_eq!(
            cpu_name(apple),
            "Apple (arm64 implementer 0x61, part 0x039)"
        );
        let odd = "CPU implementer\t: 0x99\nCPU part\t: 0x001\n";
        assert_eq!(cpu_name(odd), "arm64 implementer 0x99, part 0x001");
        assert_eq!(cpu_name(""), "unknown");
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_436_889), "2026-11-23T12:28:09Z");
    }
}
