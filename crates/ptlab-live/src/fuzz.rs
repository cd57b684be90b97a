//! `ptlab fuzz`: random scenarios, diffed against the live kernel, with
//! divergences shrunk to minimal `.ptl` files.
//!
//! Scenarios are generated as [`Call`]s ([`generate_calls`]) and written
//! as plain `.ptl` text through `ptlab_scenario::call_to_ptl` (so a finding
//! is a file anyone can re-run with `ptlab diff`); addresses inside a
//! mapping are symbolic until printed, since the kernel places some
//! mappings. Shrinking works on the text, line by line. Scenarios use
//! only operations both backends support: the set is probed on the model
//! at start (mmap, munmap, madvise, read, write, THP `enabled` knobs, and
//! fork/exit, mprotect and mremap once the model implements them). The generator is weighted toward the
//! interesting cases: addresses at and around 64 KiB, 2 MiB and 1 GiB
//! boundaries, lengths just below/at/above folio sizes, partial ranges of
//! large folios, ranges straddling VMA edges, and THP policy changes.
//!
//! Everything derives from one seed (SplitMix64): case `n` of seed `s`
//! uses the generator seeded with `mix(s, n)`, so `--seed s` reproduces a
//! whole run.
//!
//! The draws are weighted by [`GenWeights`], whose defaults favour the
//! newest kernel code (docs/live.md, "Generator weights"). The campaign's
//! planner runs every case on the model first, in index order, and adds up
//! its rule coverage: case `n`'s weights are boosted toward the rule
//! families cases `0..n` left unexercised ([`GenWeights::guided`];
//! docs/coverage.md), which keeps case `n` the same for any number of jobs
//! and in any shard.

use crate::diff::{diff_source, DiffOptions, DiffOutcome, DiffReport};
use crate::gate::{Ticket, TicketGate, Want};
use ptlab_model::core::rules::{Coverage, Rule};
use ptlab_model::{
    Advice, ArchKind, Call, MapFlags, MremapFlags, PrctlThp, Prot, Resource, ThpKnob, ThpMode,
    UffdCopyMode, UffdMoveMode, UffdRegisterMode, UffdZeropageMode,
};
use ptlab_scenario::{Backend, BackendError, ModelBackend};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Base of the address range generated scenarios use (1 GiB-aligned, far
/// from where ASLR puts ptlab's own mappings).
pub const ARENA: u64 = 0x1000_0000_0000;

/// SplitMix64: small, fast, reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
    /// Index chosen with the given weights.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut x = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }
}

/// The seed of case `n` of a run seeded with `seed`.
pub fn case_seed(seed: u64, n: u64) -> u64 {
    Rng::new(seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F)).next_u64()
}

/// Which operations beyond the base set the model supports (probed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpSet {
    pub fork: bool,
    pub mprotect: bool,
    pub mremap: bool,
    pub uffd: bool,
    /// Guard markers (`madvise guard_install|guard_remove`), `mlock`,
    /// `munlock` and `mseal`.
    pub guard_lock_seal: bool,
    /// `swap SIZE`, with MADV_PAGEOUT / MADV_COLD in the madvise mix.
    pub swap: bool,
}

impl OpSet {
    /// Probe the model: an operation is in the set unless the model answers
    /// "unsupported".
    pub fn probe() -> OpSet {
        Self::probe_arch(ArchKind::X86_64)
    }

    /// [`OpSet::probe`] on the model of `arch`.
    pub fn probe_arch(arch: ArchKind) -> OpSet {
        let mut m = ModelBackend::new(ptlab_model::ModelConfig::for_arch(arch));
        let mmap = Call::Mmap {
            addr: 0,
            len: 1 << 20,
            prot: Prot::READ | Prot::WRITE,
            flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS,
        };
        let p = m.call("main", &mmap).unwrap_or(0);
        let mut sup_in = |proc: &str, call: Call| {
            !matches!(m.call(proc, &call), Err(BackendError::Unsupported(_)))
        };
        let handle = || "main".to_string();
        OpSet {
            mprotect: sup_in(
                "main",
                Call::Mprotect {
                    addr: p,
                    len: 4096,
                    prot: Prot::READ,
                },
            ),
            mremap: sup_in(
                "main",
                Call::Mremap {
                    addr: p,
                    old_len: 4096,
                    new_len: 8192,
                    flags: MremapFlags::MAYMOVE,
                    new_addr: 0,
                },
            ),
            fork: sup_in("main", Call::Fork { child: "c".into() }) && sup_in("c", Call::Exit),
            guard_lock_seal: sup_in(
                "main",
                Call::Madvise {
                    addr: p,
                    len: 4096,
                    advice: Advice::GuardInstall,
                },
            ) && sup_in(
                "main",
                Call::Mlock {
                    addr: p,
                    len: 4096,
                    onfault: false,
                    flags: 0,
                },
            ) && sup_in(
                "main",
                Call::Mseal {
                    addr: p,
                    len: 4096,
                    flags: 0,
                },
            ),
            uffd: sup_in(
                "main",
                Call::UffdCreate {
                    handle: handle(),
                    api: true,
                    flags: None,
                },
            ) && sup_in(
                "main",
                Call::UffdZeropage {
                    handle: handle(),
                    dst: p,
                    len: 4096,
                    mode: Default::default(),
                },
            ) && sup_in(
                "main",
                Call::UffdMove {
                    handle: handle(),
                    dst: p,
                    src: p + 8192,
                    len: 4096,
                    mode: UffdMoveMode::empty(),
                },
            ),
            swap: sup_in(
                "main",
                Call::SetSwap {
                    bytes: 1 << 20,
                    kind: Default::default(),
                },
            ) && sup_in(
                "main",
                Call::Madvise {
                    addr: p,
                    len: 4096,
                    advice: Advice::PageOut,
                },
            ),
        }
    }
}

/// The generator's weights: how often each kind of operation is drawn
/// (relative weights) and how often an operation takes the shape that
/// reaches the kernel's newest code (percentages). `ptlab fuzz --weight
/// NAME=N` changes one; docs/live.md ("Generator weights") lists them.
/// The defaults favour the code most likely to hold kernel bugs, the
/// newest: multi-VMA mremap (6.17), guard markers (6.13+), mseal,
/// UFFDIO_MOVE of large folios and PMDs, and mprotect/mremap batched over
/// large folios (6.17).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenWeights {
    /// Relative weight of each operation kind ([`GenWeights::OPS`] order).
    pub ops: [u64; 11],
    /// Relative weights among `madvise` advices: MADV_COLLAPSE,
    /// MADV_PAGEOUT (with swap), MADV_COLD (with swap).
    pub madv_collapse: u64,
    pub madv_pageout: u64,
    pub madv_cold: u64,
    /// Relative weights in the guard/mlock/mseal group.
    pub guard_install: u64,
    pub guard_remove: u64,
    pub mlock: u64,
    pub munlock: u64,
    pub mseal: u64,
    /// Relative weights among userfaultfd ioctls.
    pub uffd_register: u64,
    pub uffd_copy: u64,
    pub uffd_zeropage: u64,
    pub uffd_move: u64,
    pub uffd_unregister: u64,
    /// Percent of mremaps that move a whole mapping split into several
    /// VMAs with MREMAP_FIXED and old_len == new_len (6.17's multi-VMA
    /// move; a split is made first).
    pub mremap_multi_vma: u64,
    /// Percent of UFFDIO_MOVEs over large folios or a PMD: the range
    /// registered, written first (a large folio or THP) and 64 KiB- or
    /// 2 MiB-aligned.
    pub uffd_move_large: u64,
    /// Percent of mprotects and mremaps over a written range aligned to
    /// 64 KiB or 2 MiB (the batched large-folio paths of 6.17).
    pub large_folio_ranges: u64,
}

impl GenWeights {
    /// Operation kinds, in the order of [`GenWeights::ops`].
    pub const OPS: [&'static str; 11] = [
        "mmap",
        "write",
        "read",
        "madvise",
        "munmap",
        "thp",
        "fork",
        "mprotect",
        "mremap",
        "uffd",
        "guard_lock_seal",
    ];

    /// Every weight's name and value (`--weight NAME=N` names).
    pub fn entries(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = Self::OPS
            .iter()
            .zip(self.ops)
            .map(|(n, w)| (n.to_string(), w))
            .collect();
        for (n, w) in [
            ("madv_collapse", self.madv_collapse),
            ("madv_pageout", self.madv_pageout),
            ("madv_cold", self.madv_cold),
            ("guard_install", self.guard_install),
            ("guard_remove", self.guard_remove),
            ("mlock", self.mlock),
            ("munlock", self.munlock),
            ("mseal", self.mseal),
            ("uffd_register", self.uffd_register),
            ("uffd_copy", self.uffd_copy),
            ("uffd_zeropage", self.uffd_zeropage),
            ("uffd_move", self.uffd_move),
            ("uffd_unregister", self.uffd_unregister),
            ("mremap_multi_vma", self.mremap_multi_vma),
            ("uffd_move_large", self.uffd_move_large),
            ("large_folio_ranges", self.large_folio_ranges),
        ] {
            v.push((n.to_string(), w));
        }
        v
    }

    fn field(&mut self, name: &str) -> Option<&mut u64> {
        if let Some(i) = Self::OPS.iter().position(|n| *n == name) {
            return Some(&mut self.ops[i]);
        }
        Some(match name {
            "madv_collapse" => &mut self.madv_collapse,
            "madv_pageout" => &mut self.madv_pageout,
            "madv_cold" => &mut self.madv_cold,
            "guard_install" => &mut self.guard_install,
            "guard_remove" => &mut self.guard_remove,
            "mlock" => &mut self.mlock,
            "munlock" => &mut self.munlock,
            "mseal" => &mut self.mseal,
            "uffd_register" => &mut self.uffd_register,
            "uffd_copy" => &mut self.uffd_copy,
            "uffd_zeropage" => &mut self.uffd_zeropage,
            "uffd_move" => &mut self.uffd_move,
            "uffd_unregister" => &mut self.uffd_unregister,
            "mremap_multi_vma" => &mut self.mremap_multi_vma,
            "uffd_move_large" => &mut self.uffd_move_large,
            "large_folio_ranges" => &mut self.large_folio_ranges,
            _ => return None,
        })
    }

    /// Set weight `name` to `value` (a percentage must be at most 100).
    pub fn set(&mut self, name: &str, value: u64) -> Result<(), String> {
        let pct = matches!(
            name,
            "mremap_multi_vma" | "uffd_move_large" | "large_folio_ranges"
        );
        if pct && value > 100 {
            return Err(format!("{name} is a percentage: {value} is above 100"));
        }
        if value > 1_000_000 {
            return Err(format!("{name}={value}: weights go up to 1000000"));
        }
        let names: Vec<String> = self.entries().into_iter().map(|(n, _)| n).collect();
        let f = self.field(name).ok_or_else(|| {
            format!(
                "unknown weight '{name}'; expected one of: {}",
                names.join(", ")
            )
        })?;
        *f = value;
        if self.ops.iter().all(|&w| w == 0) {
            return Err("every operation weight is 0: nothing to generate".to_string());
        }
        Ok(())
    }

    /// Parse `NAME=N` and set it.
    pub fn set_from(&mut self, s: &str) -> Result<(), String> {
        let (n, v) = s
            .split_once('=')
            .ok_or_else(|| format!("'{s}': expected NAME=N, e.g. mremap=10"))?;
        let v: u64 = v
            .trim()
            .parse()
            .map_err(|_| format!("'{s}': N must be a whole number"))?;
        self.set(n.trim(), v)
    }

    /// The weights biased toward the rules `cov` has not exercised: each
    /// relative weight is multiplied by 1 + 2 × (the fraction of its
    /// families' rules with no hit), so an operation whose rules are all
    /// hit keeps its weight and one whose rules are all missed gets three
    /// times it; each new-code percentage by 1 + (the fraction of the
    /// rules its shape aims at with no hit), at most 100. Deterministic.
    pub fn guided(&self, cov: &Coverage) -> GenWeights {
        use ptlab_model::core::rules::Family as F;
        let mut missed: BTreeMap<F, (u64, u64)> = BTreeMap::new();
        for &r in Rule::ALL {
            let e = missed.entry(r.info().family).or_default();
            e.1 += 1;
            e.0 += u64::from(cov.get(r) == 0);
        }
        // Percent factor of a set of families: 100..=300.
        let f = |fams: &[F]| -> u64 {
            let (m, t) = fams.iter().fold((0, 0), |(m, t), fam| {
                let (a, b) = missed.get(fam).copied().unwrap_or_default();
                (m + a, t + b)
            });
            100 + if t == 0 { 0 } else { 200 * m / t }
        };
        let scale = |w: u64, pct: u64| (w * pct).div_ceil(100);
        let mut g = self.clone();
        let per_op: [&[F]; 11] = [
            &[F::Mmap],
            &[F::Fault, F::Contpte],
            &[F::Fault],
            &[F::Madvise, F::Swap, F::Collapse],
            &[F::Munmap, F::Zap],
            // THP knobs: no rule of their own (the policy shows in the
            // fault rules).
            &[],
            &[F::Fork],
            &[F::Mprotect],
            &[F::Mremap],
            &[F::Uffd],
            &[F::Guard, F::Mlock, F::Mseal],
        ];
        for (w, fams) in g.ops.iter_mut().zip(per_op) {
            *w = scale(*w, f(fams));
        }
        g.madv_collapse = scale(g.madv_collapse, f(&[F::Collapse]));
        g.madv_pageout = scale(g.madv_pageout, f(&[F::Swap]));
        g.madv_cold = scale(g.madv_cold, f(&[F::Swap]));
        g.guard_install = scale(g.guard_install, f(&[F::Guard]));
        g.guard_remove = scale(g.guard_remove, f(&[F::Guard]));
        g.mlock = scale(g.mlock, f(&[F::Mlock]));
        g.munlock = scale(g.munlock, f(&[F::Mlock]));
        g.mseal = scale(g.mseal, f(&[F::Mseal]));
        // The new-code shapes, by the rules each aims at.
        let aim = |pct: u64, rules: &[Rule]| -> u64 {
            let missed = rules.iter().filter(|&&r| cov.get(r) == 0).count() as u64;
            (pct * (100 + 100 * missed / rules.len() as u64))
                .div_ceil(100)
                .min(100)
        };
        g.mremap_multi_vma = aim(
            g.mremap_multi_vma,
            &[
                Rule::MremapMultiPiece,
                Rule::MremapMultiGapAtStart,
                Rule::MremapMultiUffdArmed,
            ],
        );
        g.uffd_move_large = aim(
            g.uffd_move_large,
            &[
                Rule::UffdMovePmd,
                Rule::UffdMoveSplitSrcPmd,
                Rule::UffdMoveSplitLargeFolio,
                Rule::UffdMoveBatch,
            ],
        );
        g.large_folio_ranges = aim(
            g.large_folio_ranges,
            &[
                Rule::MprotectPtesBatch,
                Rule::MprotectBatchWriteUpgrade,
                Rule::MremapMovePtesBatch,
                Rule::ContpteWrprotectBatch,
            ],
        );
        g
    }

    /// The weights that differ from `base`, as `name=value` (for records
    /// and progress).
    pub fn diff_from(&self, base: &GenWeights) -> String {
        self.entries()
            .into_iter()
            .zip(base.entries())
            .filter(|(a, b)| a.1 != b.1)
            .map(|((n, v), _)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Default for GenWeights {
    fn default() -> Self {
        GenWeights {
            // mmap, write, read, madvise, munmap, thp, fork, mprotect,
            // mremap, uffd, guard_lock_seal. Before the new-code weights
            // (issue 16) mremap was 3, uffd 6 and guard_lock_seal 5.
            ops: [22, 26, 12, 20, 7, 6, 5, 6, 6, 8, 7],
            madv_collapse: 5,
            madv_pageout: 40,
            madv_cold: 5,
            guard_install: 35,
            guard_remove: 15,
            mlock: 25,
            munlock: 20,
            mseal: 10,
            uffd_register: 35,
            uffd_copy: 20,
            uffd_zeropage: 10,
            uffd_move: 35,
            uffd_unregister: 10,
            mremap_multi_vma: 30,
            uffd_move_large: 40,
            large_folio_ranges: 40,
        }
    }
}

#[derive(Clone, Debug)]
struct Mapping {
    /// Expression for the start (a literal or a variable).
    base: String,
    /// Placed by the kernel (no address): ranges must stay inside it, since
    /// its neighbours may be the harness's own mappings.
    floating: bool,
    len: u64,
    /// The largest power of two (at most 2 MiB) its start is known to be
    /// aligned to: a fixed address's own, a placed mapping's 2 MiB when its
    /// length is a 2 MiB multiple (thp_get_unmapped_area()), else 4 KiB.
    align: u64,
    /// Whether the generated process still has it (roughly).
    live: bool,
}

const KB: u64 = 1024;
const MB: u64 = 1024 * KB;
const GB: u64 = 1024 * MB;

fn size(n: u64) -> String {
    ptlab_scenario::fmt_size(n)
}

/// Addresses inside a generated mapping are symbolic (the kernel places
/// some mappings, so their address is known only when the scenario runs):
/// mapping `k` at offset `off` is the value `SYM_BASE + k * SYM_STRIDE +
/// off`, printed as the mapping's base expression plus the offset.
const SYM_BASE: u64 = 0xE000_0000_0000_0000;
const SYM_STRIDE: u64 = 1 << 40;

fn sym(k: usize, off: u64) -> u64 {
    SYM_BASE + k as u64 * SYM_STRIDE + off
}

/// One generated line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GenLine {
    /// A comment.
    Comment(String),
    /// `call` in process `proc`, its result bound to `bind`.
    Call {
        proc: String,
        bind: Option<String>,
        call: Call,
    },
}

/// A generated scenario: its lines, and the base expression of each
/// mapping its symbolic addresses refer to.
#[derive(Clone, Debug)]
pub struct Generated {
    pub lines: Vec<GenLine>,
    bases: Vec<String>,
}

impl Generated {
    /// How an address argument is written: a symbolic one as its mapping's
    /// base plus the offset (`p3 + 64K`), any other as a number.
    pub fn addr(&self, v: u64) -> String {
        if v >= SYM_BASE {
            let k = ((v - SYM_BASE) / SYM_STRIDE) as usize;
            let off = (v - SYM_BASE) % SYM_STRIDE;
            if let Some(base) = self.bases.get(k) {
                return if off == 0 {
                    base.clone()
                } else {
                    format!("{base} + {}", size(off))
                };
            }
        }
        ptlab_scenario::fmt_addr(v)
    }

    /// The scenario as `.ptl` text (every call through
    /// [`ptlab_scenario::call_to_ptl`]).
    pub fn to_ptl(&self) -> String {
        let mut s = String::new();
        for l in &self.lines {
            match l {
                GenLine::Comment(c) => {
                    let _ = writeln!(s, "# {c}");
                }
                GenLine::Call { proc, bind, call } => {
                    let line =
                        ptlab_scenario::call_to_ptl(proc, bind.as_deref(), call, &|v| self.addr(v));
                    let _ = writeln!(s, "{line}");
                }
            }
        }
        s
    }
}

/// The THP policy a scenario starts with (`thp` statements, top level
/// first): mostly interesting settings. Drawn first from the case's
/// stream; a knob epoch draws it from a stream of its own
/// ([`epoch_policy`]).
fn draw_policy(r: &mut Rng) -> Vec<Call> {
    let mode = |name: &str| ThpMode::from_name(name).expect("a THP mode");
    let mut out = Vec::new();
    let top = ["madvise", "always", "never"][r.weighted(&[50, 35, 15])];
    out.push(Call::SetThp {
        knob: ThpKnob::TopLevel,
        mode: mode(top),
    });
    for (sz, bias) in [
        ("16K", 0),
        ("32K", 0),
        ("64K", 30),
        ("128K", 0),
        ("256K", 0),
        ("512K", 0),
        ("1M", 0),
        ("2M", 20),
    ] {
        let m =
            ["never", "always", "inherit", "madvise"][r.weighted(&[55 - bias, 20 + bias, 15, 10])];
        if m != "never" || sz == "2M" {
            let bytes = ptlab_scenario::parse_param_value(sz).expect("a size");
            out.push(Call::SetThp {
                knob: ThpKnob::Size(bytes.trailing_zeros() as u8 - 12),
                mode: mode(m),
            });
        }
    }
    out
}

/// The THP policy of knob epoch `epoch` of a campaign seeded with `seed`
/// (`--epoch K`: cases `epoch*K .. epoch*K+K-1`): drawn as a scenario's
/// own policy is, from a stream that depends on the seed and the epoch
/// alone, so every case of the epoch, in any shard and with any number of
/// jobs, starts with the same `thp` lines.
pub fn epoch_policy(seed: u64, epoch: u64) -> Vec<Call> {
    draw_policy(&mut Rng::new(case_seed(
        seed ^ 0xE90C_4B0B_5EED_0001,
        epoch,
    )))
}

/// How many `thp` statements a generated scenario starts with (its
/// policy; comments before and among them are skipped), and where they end.
fn policy_end(g: &Generated) -> usize {
    g.lines
        .iter()
        .position(|l| match l {
            GenLine::Comment(_) => false,
            GenLine::Call { call, .. } => !matches!(call, Call::SetThp { .. }),
        })
        .unwrap_or(g.lines.len())
}

/// Case `case` of a campaign with knob epochs of `k` cases: the generated
/// scenario's own policy lines are replaced by its epoch's (everything
/// else, mid-scenario `thp` lines included, stays as generated), after a
/// comment that names the epoch. Run alone with `ptlab diff`, the scenario
/// sets the epoch's knobs itself, as the campaign did once for the epoch.
pub fn into_epoch(g: &mut Generated, seed: u64, case: u64, k: u64) {
    let epoch = case / k.max(1);
    let end = policy_end(g);
    let mut head: Vec<GenLine> = g.lines[..end]
        .iter()
        .filter(|l| matches!(l, GenLine::Comment(_)))
        .cloned()
        .collect();
    head.push(GenLine::Comment(format!(
        "knob epoch {epoch} (cases {}..{}): the campaign set this policy once for the epoch",
        epoch * k,
        epoch * k + k - 1
    )));
    for call in epoch_policy(seed, epoch) {
        head.push(GenLine::Call {
            proc: "main".into(),
            bind: None,
            call,
        });
    }
    g.lines.splice(..end, head);
}

/// Generate one scenario of about `ops` statements, as text (default weights).
pub fn generate(seed: u64, ops: usize, set: OpSet) -> String {
    generate_calls(seed, ops, set).to_ptl()
}

/// Generate one scenario of about `ops` statements (default weights).
pub fn generate_calls(seed: u64, ops: usize, set: OpSet) -> Generated {
    generate_weighted(seed, ops, set, &GenWeights::default())
}

/// Generate one scenario of about `ops` statements with weights `w`.
pub fn generate_weighted(seed: u64, ops: usize, set: OpSet, w: &GenWeights) -> Generated {
    let mut out = generate_plain(seed, ops, set, w);
    raw_values(&mut out, seed);
    fill_bytes(&mut out, seed);
    out
}

/// [`generate_weighted`] without raw values.
fn generate_plain(seed: u64, ops: usize, set: OpSet, w: &GenWeights) -> Generated {
    let mut r = Rng::new(seed);
    let mut out = Generated {
        lines: vec![GenLine::Comment(format!(
            "generated by ptlab fuzz (case seed {seed:#x})"
        ))],
        bases: Vec::new(),
    };
    let emit = |lines: &mut Vec<GenLine>, proc: &str, bind: Option<String>, call: Call| {
        lines.push(GenLine::Call {
            proc: proc.to_string(),
            bind,
            call,
        })
    };
    let mode = |name: &str| ThpMode::from_name(name).expect("a THP mode");
    let knob = |sz: &str| {
        let bytes = ptlab_scenario::parse_param_value(sz).expect("a size");
        ThpKnob::Size(bytes.trailing_zeros() as u8 - 12)
    };
    let thp = |knob: ThpKnob, m: &str| Call::SetThp {
        knob,
        mode: mode(m),
    };
    for call in draw_policy(&mut r) {
        emit(&mut out.lines, "main", None, call);
    }
    // Swap in about a third of the cases, drawn from a stream of its own so
    // that cases without swap stay what they were.
    let swap = set.swap && Rng::new(seed ^ 0x5a5a_0008).chance(35);
    if swap {
        // Half of them on a block device (a loop device live), where large
        // folios go out whole and stay in the swap cache: the newest swap
        // code (docs/ops/swap.md S14). Its own stream too.
        let kind = if Rng::new(seed ^ 0x5a5a_0009).chance(50) {
            ptlab_model::swap::SwapKind::BlockDev
        } else {
            ptlab_model::swap::SwapKind::File
        };
        emit(
            &mut out.lines,
            "main",
            None,
            Call::SetSwap {
                bytes: 64 * MB,
                kind,
            },
        );
    }
    let mut maps: Vec<Mapping> = Vec::new();
    let mut procs: Vec<String> = vec!["main".into()];
    // Processes with an open userfaultfd (a fork child has none).
    let mut uffd_open: Vec<String> = Vec::new();
    let mut vars = 0;
    let mut total = 0u64;
    let lens = [
        4 * KB,
        8 * KB,
        16 * KB,
        60 * KB,
        64 * KB,
        68 * KB,
        128 * KB,
        256 * KB,
        MB,
        2 * MB - 4 * KB,
        2 * MB,
        2 * MB + 64 * KB,
        4 * MB,
        4 * MB + 8 * KB,
    ];
    let deltas = [
        0,
        4 * KB,
        60 * KB,
        64 * KB,
        2 * MB - 64 * KB,
        2 * MB - 4 * KB,
        2 * MB,
        2 * MB + 64 * KB,
        GB - 2 * MB,
        GB - 64 * KB,
        GB - 4 * KB,
    ];
    let mut n = 0;
    while n < ops {
        // Which process acts (after a fork).
        let who = if procs.len() > 1 && r.chance(35) {
            r.pick(&procs[1..]).clone()
        } else {
            "main".to_string()
        };
        let live_maps: Vec<usize> = (0..maps.len()).filter(|&i| maps[i].live).collect();
        let choice = if live_maps.is_empty() {
            0
        } else {
            let o = &w.ops;
            let only = |ok: bool, w: u64| if ok { w } else { 0 };
            let ws = [
                o[0],
                o[1],
                o[2],
                o[3],
                o[4],
                o[5],
                only(set.fork, o[6]),
                only(set.mprotect, o[7]),
                only(set.mremap, o[8]),
                only(set.uffd, o[9]),
                only(set.guard_lock_seal, o[10]),
            ];
            if ws.iter().all(|&x| x == 0) {
                break;
            }
            r.weighted(&ws)
        };
        match choice {
            0 => {
                if total > 48 * MB {
                    if live_maps.is_empty() {
                        break;
                    }
                    continue;
                }
                let len = *r.pick(&lens);
                let addr = ARENA + r.below(3) * GB + *r.pick(&deltas);
                let prot = [
                    Prot::READ | Prot::WRITE,
                    Prot::READ,
                    Prot::empty(),
                    Prot::READ | Prot::WRITE | Prot::EXEC,
                ][r.weighted(&[85, 8, 4, 3])];
                let locked = if set.guard_lock_seal { 2 } else { 0 };
                let extra = [
                    MapFlags::empty(),
                    MapFlags::POPULATE,
                    MapFlags::NORESERVE,
                    MapFlags::LOCKED,
                ][r.weighted(&[86, 8, 6, locked])];
                let flags = MapFlags::PRIVATE | MapFlags::ANONYMOUS | extra;
                let mmap = |addr: u64, flags: MapFlags| Call::Mmap {
                    addr,
                    len,
                    prot,
                    flags,
                };
                let (call, bind, base, floating) = match r.weighted(&[60, 22, 10, 8]) {
                    0 => (
                        mmap(addr, flags | MapFlags::FIXED_NOREPLACE),
                        None,
                        format!("{addr:#x}"),
                        false,
                    ),
                    1 => (
                        mmap(addr, flags | MapFlags::FIXED),
                        None,
                        format!("{addr:#x}"),
                        false,
                    ),
                    k => {
                        vars += 1;
                        let at = if k == 2 { addr } else { 0 };
                        let var = format!("p{vars}");
                        (mmap(at, flags), Some(var.clone()), var, true)
                    }
                };
                // Only `main` maps new memory: children inherit it.
                emit(&mut out.lines, "main", bind, call);
                total += len;
                out.bases.push(base.clone());
                let align = if floating && addr == 0 {
                    if len % (2 * MB) == 0 {
                        2 * MB
                    } else {
                        4 * KB
                    }
                } else if floating {
                    4 * KB // a hint the kernel may not take
                } else {
                    (1 << addr.trailing_zeros()).min(2 * MB)
                };
                maps.push(Mapping {
                    base,
                    floating,
                    len,
                    align,
                    live: true,
                });
            }
            1..=4 | 7 | 8 => {
                let k = *r.pick(&live_maps);
                let m = maps[k].clone();
                let (mut off, mut len) = subrange(&mut r, m.len, m.floating);
                // New kernel code: a range over written large folios
                // (mprotect and mremap batch over them since 6.17), and
                // the multi-VMA mremap (6.17).
                let multi = choice == 8 && r.chance(w.mremap_multi_vma) && m.len >= 16 * KB;
                if multi {
                    // Split the mapping (a middle part read-only or
                    // NOHUGEPAGE), then move all of it with FIXED and the
                    // same length: one mremap over several VMAs.
                    let mid = (m.len / 2) & !(4 * KB - 1);
                    let part = (m.len / 4).max(4 * KB) & !(4 * KB - 1);
                    let split = if r.chance(50) && set.mprotect {
                        Call::Mprotect {
                            addr: sym(k, mid),
                            len: part,
                            prot: Prot::READ,
                        }
                    } else {
                        Call::Madvise {
                            addr: sym(k, mid),
                            len: part,
                            advice: Advice::NoHugePage,
                        }
                    };
                    emit(&mut out.lines, &who, None, split);
                    off = 0;
                    len = m.len;
                } else if matches!(choice, 7 | 8) && r.chance(w.large_folio_ranges) {
                    let a = if m.align >= 2 * MB && m.len >= 2 * MB && r.chance(40) {
                        2 * MB
                    } else {
                        64 * KB
                    };
                    if m.len >= a && m.align >= 64 * KB {
                        off = (r.below(m.len / a)) * a;
                        len = (a * (1 + r.below(2))).min(m.len - off);
                        emit(
                            &mut out.lines,
                            &who,
                            None,
                            Call::Access {
                                start: sym(k, off),
                                len,
                                write: true,
                                tag: None,
                            },
                        );
                    }
                }
                let at = sym(k, off);
                let call = match choice {
                    1 => Call::Access {
                        start: at,
                        len,
                        write: true,
                        tag: r.chance(30).then(|| r.below(1000)),
                    },
                    2 => Call::Access {
                        start: at,
                        len,
                        write: false,
                        tag: None,
                    },
                    3 => {
                        use Advice::*;
                        let advs = [
                            DontNeed, HugePage, NoHugePage, DontFork, DoFork, WipeOnFork,
                            KeepOnFork, Collapse, PageOut, Cold,
                        ];
                        // PAGEOUT/COLD only with swap. MADV_FREE is not
                        // generated yet: what `LazyFree` shows depends on
                        // when the per-CPU lazyfree batch is drained, and
                        // background lru_add_drain_all() (khugepaged, other
                        // CPUs) drains it at any moment, so a diff of it
                        // is noise until the comparison accepts both the
                        // drained and the undrained value. The shipped
                        // free-*.ptl scenarios drain at known points.
                        let (c, p, d) = (w.madv_collapse, w.madv_pageout, w.madv_cold);
                        let advice = if swap {
                            advs[r.weighted(&[35, 20, 10, 9, 7, 12, 7, c, p, d])]
                        } else {
                            advs[r.weighted(&[35, 20, 10, 9, 7, 12, 7, c])]
                        };
                        Call::Madvise {
                            addr: at,
                            len,
                            advice,
                        }
                    }
                    4 => {
                        if who == "main" && off == 0 && len == m.len {
                            if let Some(x) = maps.iter_mut().find(|x| x.base == m.base) {
                                x.live = false;
                            }
                        }
                        Call::Munmap { addr: at, len }
                    }
                    7 => Call::Mprotect {
                        addr: at,
                        len,
                        prot: [Prot::READ, Prot::READ | Prot::WRITE, Prot::empty()]
                            [r.weighted(&[50, 35, 15])],
                    },
                    _ => {
                        let dst = ARENA
                            + 3 * GB
                            + r.below(4) * 2 * MB
                            + if r.chance(50) { 0 } else { 64 * KB };
                        let new_len = match r.weighted(&[40, 20, 20, 20]) {
                            _ if multi => len,
                            0 => len,
                            1 => len * 2,
                            2 => (len / 2).max(4 * KB) & !(4 * KB - 1),
                            _ => len + 64 * KB,
                        };
                        let fixed = multi || r.chance(70);
                        Call::Mremap {
                            addr: at,
                            old_len: len,
                            new_len,
                            flags: if fixed {
                                MremapFlags::MAYMOVE | MremapFlags::FIXED
                            } else {
                                MremapFlags::MAYMOVE
                            },
                            new_addr: if fixed { dst } else { 0 },
                        }
                    }
                };
                emit(&mut out.lines, &who, None, call);
            }
            5 if r.chance(10) => {
                // The per-process THP switch (prctl), in the acting process.
                let (disable, flags) = match r.weighted(&[40, 30, 30]) {
                    0 => (1, 0),
                    1 => (1, ptlab_model::thp::PR_THP_DISABLE_EXCEPT_ADVISED),
                    _ => (0, 0),
                };
                let call = Call::PrctlThp(PrctlThp::Set { disable, flags });
                emit(&mut out.lines, &who, None, call);
            }
            5 => {
                let sz = [
                    "16K", "32K", "64K", "128K", "256K", "512K", "1M", "2M", "enabled",
                ][r.weighted(&[5, 5, 30, 5, 5, 5, 5, 25, 15])];
                let m = if sz == "enabled" {
                    ["always", "madvise", "never"][r.weighted(&[40, 40, 20])]
                } else {
                    ["always", "inherit", "madvise", "never"][r.weighted(&[40, 25, 10, 25])]
                };
                let k = if sz == "enabled" {
                    ThpKnob::TopLevel
                } else {
                    knob(sz)
                };
                emit(&mut out.lines, "main", None, thp(k, m));
            }
            6 => {
                if procs.len() >= 3 || who != "main" {
                    continue;
                }
                if procs.len() > 1 && r.chance(40) {
                    let c = procs.pop().expect("child");
                    uffd_open.retain(|p| *p != c);
                    emit(&mut out.lines, &c, None, Call::Exit);
                } else {
                    let c = format!("c{}", procs.len());
                    emit(
                        &mut out.lines,
                        "main",
                        None,
                        Call::Fork { child: c.clone() },
                    );
                    procs.push(c);
                }
            }
            9 => {
                let handle = who.clone();
                if !uffd_open.contains(&who) {
                    let call = Call::UffdCreate {
                        handle,
                        api: true,
                        flags: None,
                    };
                    emit(&mut out.lines, &who, None, call);
                    uffd_open.push(who);
                } else {
                    let k = *r.pick(&live_maps);
                    let m = maps[k].clone();
                    let (off, len) = subrange(&mut r, m.len, true);
                    let uw = [
                        w.uffd_register,
                        w.uffd_copy,
                        w.uffd_zeropage,
                        w.uffd_move,
                        w.uffd_unregister,
                    ];
                    if uw.iter().all(|&x| x == 0) {
                        continue;
                    }
                    let pick = r.weighted(&uw);
                    // New kernel code: UFFDIO_MOVE of a large folio or a
                    // PMD (both halves of an aligned block: the source
                    // written first, the whole range registered).
                    if pick == 3 && r.chance(w.uffd_move_large) && m.align >= 64 * KB {
                        let a = if m.align >= 2 * MB && m.len >= 4 * MB {
                            2 * MB
                        } else {
                            64 * KB
                        };
                        if m.len >= 2 * a {
                            let blocks = m.len / a;
                            let s = r.below(blocks);
                            let d = (s + 1 + r.below(blocks - 1)) % blocks;
                            emit(
                                &mut out.lines,
                                &who,
                                None,
                                Call::Access {
                                    start: sym(k, s * a),
                                    len: a,
                                    write: true,
                                    tag: Some(r.below(1000)),
                                },
                            );
                            emit(
                                &mut out.lines,
                                &who,
                                None,
                                Call::UffdRegister {
                                    handle: handle.clone(),
                                    addr: sym(k, 0),
                                    len: m.len,
                                    mode: UffdRegisterMode::MISSING,
                                },
                            );
                            let call = Call::UffdMove {
                                handle,
                                dst: sym(k, d * a),
                                src: sym(k, s * a),
                                len: a,
                                mode: UffdMoveMode::empty(),
                            };
                            emit(&mut out.lines, &who, None, call);
                            n += 1;
                            continue;
                        }
                    }
                    let call = match pick {
                        0 => Call::UffdRegister {
                            handle,
                            addr: sym(k, off),
                            len,
                            mode: [
                                UffdRegisterMode::MISSING,
                                UffdRegisterMode::WP,
                                UffdRegisterMode::MISSING | UffdRegisterMode::WP,
                            ][r.weighted(&[70, 15, 15])],
                        },
                        1 => Call::UffdCopy {
                            handle,
                            dst: sym(k, off),
                            src: 0,
                            len,
                            tag: Some(r.below(1000)),
                            mode: Default::default(),
                        },
                        2 => Call::UffdZeropage {
                            handle,
                            dst: sym(k, off),
                            len,
                            mode: Default::default(),
                        },
                        3 => {
                            let (off2, _) = subrange(&mut r, m.len, true);
                            let len = len.min(m.len - off.max(off2));
                            let mode = if r.chance(30) {
                                UffdMoveMode::ALLOW_SRC_HOLES
                            } else {
                                UffdMoveMode::empty()
                            };
                            Call::UffdMove {
                                handle,
                                dst: sym(k, off),
                                src: sym(k, off2),
                                len: len.max(4 * KB),
                                mode,
                            }
                        }
                        _ => Call::UffdUnregister {
                            handle,
                            addr: sym(k, off),
                            len,
                        },
                    };
                    emit(&mut out.lines, &who, None, call);
                }
            }
            10 => {
                let k = *r.pick(&live_maps);
                let m = maps[k].clone();
                let (off, len) = subrange(&mut r, m.len, m.floating);
                let at = sym(k, off);
                let gw = [
                    w.guard_install,
                    w.guard_remove,
                    w.mlock,
                    w.munlock,
                    w.mseal,
                    6,
                    2,
                ];
                let call = match r.weighted(&gw) {
                    0 => Call::Madvise {
                        addr: at,
                        len,
                        advice: Advice::GuardInstall,
                    },
                    1 => Call::Madvise {
                        addr: at,
                        len,
                        advice: Advice::GuardRemove,
                    },
                    2 => Call::Mlock {
                        addr: at,
                        len,
                        onfault: r.chance(30),
                        flags: 0,
                    },
                    3 => Call::Munlock { addr: at, len },
                    4 => Call::Mseal {
                        addr: at,
                        len,
                        flags: 0,
                    },
                    // Resource limits: a budget near what is mapped, so
                    // the next calls land on both sides of it.
                    5 => {
                        let resource = *r.pick(&[Resource::As, Resource::Data, Resource::Memlock]);
                        let v = match r.weighted(&[10, 30, 30, 15, 15]) {
                            0 => 0,
                            1 => (total / 2) & !(4 * KB - 1),
                            2 => total.max(4 * KB),
                            3 => total + 2 * MB,
                            _ => u64::MAX,
                        };
                        // RLIMIT_MEMLOCK stays within Linux's default hard
                        // limit (8 MiB): without CAP_SYS_RESOURCE a worker
                        // cannot go above it (the model could).
                        let bytes = if resource == Resource::Memlock {
                            v.min(8 * MB)
                        } else {
                            v
                        };
                        Call::Setrlimit { resource, bytes }
                    }
                    _ => Call::DropCapIpcLock,
                };
                emit(&mut out.lines, &who, None, call);
            }
            _ => continue,
        }
        n += 1;
    }
    out
}

/// How often (percent) [`raw_values`] changes a call it can change.
const RAW_PCT: u64 = 3;

/// Now and then give a call a raw flag, mode, prot or advice value the
/// option words do not say: undefined bits (EINVAL, or ignored where the
/// kernel ignores them), an unknown advice number, the valid uffd modes
/// the generator does not otherwise make (DONTWAKE, UFFDIO_COPY_MODE_WP,
/// MINOR, mode 0). The choices come from a stream of their own, applied
/// after generation, so every other line is what it was before raw values
/// existed. Nothing here makes a call the model answers "unsupported"
/// (a valid advice it does not implement, MAP_SHARED, MAP_GROWSDOWN ...),
/// and an mmap whose address a later line names (a bound variable) only
/// gets bits the kernel ignores, so it still succeeds.
fn raw_values(out: &mut Generated, seed: u64) {
    let mut r = Rng::new(seed ^ 0x5a5a_00ab);
    for l in &mut out.lines {
        let GenLine::Call { call, bind, .. } = l else {
            continue;
        };
        let eligible = matches!(
            call,
            Call::Mmap { .. }
                | Call::Mprotect { .. }
                | Call::Madvise { .. }
                | Call::Mremap { .. }
                | Call::UffdRegister { .. }
                | Call::UffdCopy { .. }
                | Call::UffdZeropage { .. }
                | Call::UffdMove { .. }
                | Call::Mlock { .. }
                | Call::Mseal { .. }
                | Call::PrctlThp(PrctlThp::Set { .. })
        );
        if !eligible || !r.chance(RAW_PCT) {
            continue;
        }
        match call {
            Call::Mmap { prot, flags, .. } => match r.weighted(&[35, 25, 15, 25]) {
                // MAP_DENYWRITE, MAP_EXECUTABLE, MAP_UNINITIALIZED and bits
                // no flag has: ignored.
                0 => {
                    let bit = *r.pick(&[0x800, 0x1000, 0x400_0000, 0x200, 0x40_0000, 1 << 31]);
                    *flags = MapFlags::from_bits_retain(flags.bits() | bit);
                }
                // PROT_SEM, undefined and PROT_GROWSDOWN bits: mmap ignores them.
                1 => {
                    let bit = *r.pick(&[0x8, 0x10, 0x100_0000, 1 << 31]);
                    *prot = Prot::from_bits_retain(prot.bits() | bit);
                }
                // MAP_STACK: VM_NOHUGEPAGE.
                2 => *flags = MapFlags::from_bits_retain(flags.bits() | 0x2_0000),
                // No MAP_TYPE (EINVAL), where no later line names the address.
                _ if bind.is_none() => {
                    *flags = MapFlags::from_bits_retain(flags.bits() & !0xf);
                }
                _ => {}
            },
            Call::Mprotect { prot, .. } => {
                // PROT_SEM is valid; the others are EINVAL (PROT_GROWSDOWN:
                // no VMA grows down).
                let bit = *r.pick(&[0x8, 0x10, 0x20, 0x100_0000, 0x200_0000, 0x300_0000, 1 << 31]);
                *prot = Prot::from_bits_retain(prot.bits() | bit);
            }
            Call::Madvise { advice, .. } => {
                *advice = Advice::Other(*r.pick(&[5, 6, 7, 26, 42, 99, 104, 1000, -1]));
            }
            Call::Mremap { flags, .. } => {
                let bit = *r.pick(&[8, 0x10, 0x80, 1 << 32, 1 << 63]);
                *flags = MremapFlags::from_bits_retain(flags.bits() | bit);
            }
            Call::UffdRegister { mode, .. } => {
                *mode = match r.weighted(&[25, 25, 25, 25]) {
                    0 => UffdRegisterMode::empty(),
                    1 => *mode | UffdRegisterMode::MINOR,
                    2 => UffdRegisterMode::from_bits_retain(mode.bits() | 8),
                    _ => UffdRegisterMode::from_bits_retain(mode.bits() | 1 << 63),
                };
            }
            Call::UffdCopy { mode, .. } => {
                *mode = match r.weighted(&[30, 30, 20, 20]) {
                    0 => UffdCopyMode::DONTWAKE,
                    1 => UffdCopyMode::WP,
                    2 => UffdCopyMode::from_bits_retain(4),
                    _ => UffdCopyMode::from_bits_retain(1 << 63 | 1),
                };
            }
            Call::UffdZeropage { mode, .. } => {
                *mode = match r.weighted(&[50, 25, 25]) {
                    0 => UffdZeropageMode::DONTWAKE,
                    1 => UffdZeropageMode::from_bits_retain(2),
                    _ => UffdZeropageMode::from_bits_retain(1 << 40),
                };
            }
            Call::UffdMove { mode, .. } => {
                *mode = match r.weighted(&[50, 25, 25]) {
                    0 => *mode | UffdMoveMode::DONTWAKE,
                    1 => UffdMoveMode::from_bits_retain(mode.bits() | 4),
                    _ => UffdMoveMode::from_bits_retain(mode.bits() | 1 << 63),
                };
            }
            // mlock2 flags: undefined bits (EINVAL); bit 32 is cut off by
            // the `int` argument, so that call locks.
            Call::Mlock { flags, .. } => *flags = *r.pick(&[2, 4, 1 << 31, 1 << 32]),
            Call::Mseal { flags, .. } => *flags = *r.pick(&[1, 2, 1 << 40]),
            Call::PrctlThp(PrctlThp::Set { flags, .. }) => {
                *flags |= *r.pick(&[1 << 2, 1 << 3, 1 << 40]);
            }
            _ => {}
        }
    }
}

/// In how many cases (percent) [`fill_bytes`] adds byte patterns.
const FILL_CASE_PCT: u64 = 50;
/// In those cases, how often (percent) a write is followed by a fill, a
/// UFFDIO_COPY takes its source from filled memory, a UFFDIO_MOVE's
/// source is filled first.
const FILL_PCT: u64 = 30;
const COPY_FILLED_PCT: u64 = 40;
const MOVE_FILLED_PCT: u64 = 40;

/// Byte patterns (docs/language.md, "Page contents"): in about half the
/// cases, now and then a `write ADDR LEN fill BYTE` (memset) after a
/// write, inside the range written, at an unaligned byte address and
/// length — often a few bytes before a page, 64 KiB or 2 MiB boundary
/// and across it, or a whole page and some; a UFFDIO_COPY that copies from
/// an unaligned address in the last filled memory (the uffd selftests'
/// pattern: each copied page gets the end of one source page and the start
/// of the next) instead of a tag page; a fill in a UFFDIO_MOVE's source
/// range before the move. The choices come from a stream of their own,
/// applied after [`raw_values`]: the lines the generator made before are
/// all still there, in order, the same, except the source of the copies
/// chosen here; a case without fills (about half) is what it was.
fn fill_bytes(out: &mut Generated, seed: u64) {
    let mut r = Rng::new(seed ^ 0x5a5a_00f1);
    if !r.chance(FILL_CASE_PCT) {
        return;
    }
    // Where a fill of `len` bytes starts in `[0, range)` (None: too short).
    let place = |r: &mut Rng, range: u64| -> Option<(u64, u64)> {
        if range < 2 {
            return None;
        }
        let d = 1 + r.below(64);
        let mut bounds: Vec<u64> = Vec::new();
        for b in [4 * KB, 64 * KB, 2 * MB] {
            if range > b {
                bounds.push(b * (1 + r.below((range - 1) / b)));
            }
        }
        let off = match r.weighted(&[40, 60]) {
            0 => r.below(range),
            _ if !bounds.is_empty() => r.pick(&bounds).saturating_sub(d),
            _ => r.below(range),
        };
        let len = *r.pick(&[
            1,
            7,
            13,
            100,
            2 * d,
            4 * KB - 9,
            4 * KB,
            4 * KB + 9,
            3 * 4 * KB + 5,
        ]);
        let len = len.min(range - off).max(1);
        Some((off, len))
    };
    let byte = |r: &mut Rng| -> u8 {
        match r.weighted(&[10, 10, 80]) {
            0 => 0,
            1 => 0xff,
            _ => 1 + r.below(255) as u8,
        }
    };
    let mut lines = Vec::with_capacity(out.lines.len() + 8);
    // The last fill: (process, address, length).
    let mut last: Option<(String, u64, u64)> = None;
    for mut l in std::mem::take(&mut out.lines) {
        let mut after = None;
        if let GenLine::Call { proc, call, .. } = &mut l {
            match call {
                Call::Access {
                    start,
                    len,
                    write: true,
                    ..
                } if r.chance(FILL_PCT) => {
                    if let Some((off, n)) = place(&mut r, *len) {
                        let addr = *start + off;
                        after = Some(fill_line(proc, addr, n, byte(&mut r)));
                        last = Some((proc.clone(), addr, n));
                    }
                }
                Call::UffdCopy { src, tag, .. } if r.chance(COPY_FILLED_PCT) => {
                    if let Some((_, addr, _)) = &last {
                        // An unaligned source inside the filled bytes' first page.
                        *src = (addr & !(4 * KB - 1)) + 1 + r.below(4 * KB - 1);
                        *tag = None;
                    }
                }
                Call::UffdMove { src, len, .. } if r.chance(MOVE_FILLED_PCT) => {
                    if let Some((off, n)) = place(&mut r, *len) {
                        let addr = *src + off;
                        lines.push(fill_line(proc, addr, n, byte(&mut r)));
                        last = Some((proc.clone(), addr, n));
                    }
                }
                _ => {}
            }
        }
        lines.push(l);
        lines.extend(after);
    }
    out.lines = lines;
}

/// `write ADDR LEN fill BYTE` in process `proc`.
fn fill_line(proc: &str, addr: u64, len: u64, byte: u8) -> GenLine {
    GenLine::Call {
        proc: proc.to_string(),
        bind: None,
        call: Call::FillBytes { addr, len, byte },
    }
}

/// An interesting sub-range `(offset, len)` of a mapping of `len` bytes.
fn subrange(r: &mut Rng, len: u64, inside: bool) -> (u64, u64) {
    let pages = len / 4096;
    let starts = [
        0,
        1,
        15,
        16,
        17,
        511,
        512,
        pages.saturating_sub(1),
        r.below(pages),
    ];
    let mut off = (*r.pick(&starts)).min(pages.saturating_sub(1)) * 4096;
    let lens = [4 * KB, 8 * KB, 16 * KB, 64 * KB, 2 * MB, len];
    let mut l = *r.pick(&lens);
    if inside || r.chance(85) {
        l = l.min(len - off);
    } else if r.chance(50) && off == 0 {
        // Straddle the mapping's start edge.
        off = 0;
        l = l.min(len);
    }
    if l == 0 {
        l = 4096;
        off = 0;
    }
    (off, l)
}

/// Delta debugging over lines: the smallest scenario (by lines removed)
/// for which `keep` still holds. Comment lines are kept.
pub fn shrink(src: &str, mut keep: impl FnMut(&str) -> bool, budget: Duration) -> String {
    let start = Instant::now();
    let mut lines: Vec<String> = src.lines().map(str::to_string).collect();
    let mut n = 2usize;
    while lines.len() >= 2 && start.elapsed() < budget {
        let chunk = lines.len().div_ceil(n);
        let mut reduced = false;
        for i in 0..n {
            let lo = i * chunk;
            if lo >= lines.len() {
                break;
            }
            let hi = (lo + chunk).min(lines.len());
            if lines[lo..hi]
                .iter()
                .all(|l| l.trim_start().starts_with('#'))
            {
                continue;
            }
            let cand: Vec<String> = lines[..lo]
                .iter()
                .chain(lines[hi..].iter())
                .cloned()
                .collect();
            if cand.is_empty() {
                continue;
            }
            if keep(&(cand.join("\n") + "\n")) {
                lines = cand;
                reduced = true;
                break;
            }
            if start.elapsed() >= budget {
                break;
            }
        }
        if reduced {
            n = (n - 1).max(2);
        } else {
            if n >= lines.len() {
                break;
            }
            n = (n * 2).min(lines.len());
        }
    }
    lines.join("\n") + "\n"
}

/// Options for a fuzz run.
#[derive(Clone, Debug)]
pub struct FuzzOptions {
    pub seed: u64,
    /// Stop after this many cases of the whole campaign (case indices
    /// `0..cases`; a shard runs its share of them).
    pub cases: Option<u64>,
    /// Stop after this long.
    pub time: Option<Duration>,
    /// Statements per scenario.
    pub ops: usize,
    /// Where shrunk scenarios are saved.
    pub out_dir: PathBuf,
    /// Time allowed to shrink one finding.
    pub shrink_budget: Duration,
    /// Budgets of the live side (crate::budget). Generated scenarios stay
    /// far below the defaults (at most ~52 MiB mapped, 64 MiB of swap, a
    /// few processes); a case that hits one anyway stops as partial.
    pub limits: crate::budget::LiveLimits,
    /// Page-table format of the model (the live side is this machine).
    pub arch: ArchKind,
    /// Parallel workers. 1 runs every case in the calling thread, as
    /// before; more start that many threads, each pinned to its own CPU
    /// (see [`fuzz`] for how they share the machine's global state).
    pub jobs: usize,
    /// Which part of the campaign this process runs.
    pub shard: Shard,
    /// Knob epochs of this many cases (`--epoch K`; 0: none, every case
    /// sets its own THP policy and runs alone, as before): the cases of
    /// epoch `e` (indices `e*K ..`) share one policy ([`epoch_policy`]),
    /// which the campaign sets once; those that change no global state
    /// after it ([`needs_exclusive_in_epoch`]) run side by side on the
    /// jobs, the others alone after them.
    pub epoch: u64,
    /// Where one JSON line per case goes ([`FuzzRecord`]), if anywhere.
    pub results: Option<PathBuf>,
    /// The generator's weights (before guidance).
    pub weights: GenWeights,
    /// Bias each case toward the rule families the cases before it left
    /// unexercised ([`GenWeights::guided`]); off, case `n` depends on the
    /// seed and `n` alone.
    pub guide: bool,
    /// Run the cases on the model only (no live kernel, no root needed):
    /// each case runs with the invariant checker after every statement;
    /// a violated invariant or a model panic is a finding.
    pub model_only: bool,
}

impl Default for FuzzOptions {
    fn default() -> Self {
        FuzzOptions {
            seed: 0,
            cases: None,
            time: Some(Duration::from_secs(60)),
            ops: 24,
            out_dir: PathBuf::from("fuzz-failures"),
            shrink_budget: Duration::from_secs(60),
            limits: Default::default(),
            arch: ArchKind::X86_64,
            jobs: 1,
            shard: Shard::WHOLE,
            epoch: 0,
            results: None,
            weights: GenWeights::default(),
            guide: true,
            model_only: false,
        }
    }
}

/// One part of a campaign split across machines (`--shard K/N`): shard
/// `K` of `N` runs exactly the cases whose index is `K` modulo `N`, in
/// increasing order, so the `N` shards of one seed together run the cases
/// one unsharded run would, each exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// `K`, in `0..count`.
    pub index: u64,
    /// `N` ≥ 1.
    pub count: u64,
}

impl Shard {
    /// The whole campaign (`0/1`).
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// `K/N` with `0 ≤ K < N`.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| format!("'{s}': expected K/N, e.g. 0/4 (shard K of N, K from 0)"))?;
        let k: u64 = k
            .trim()
            .parse()
            .map_err(|_| format!("'{s}': K must be a number"))?;
        let n: u64 = n
            .trim()
            .parse()
            .map_err(|_| format!("'{s}': N must be a number"))?;
        if n == 0 {
            return Err(format!("'{s}': N must be at least 1"));
        }
        if k >= n {
            return Err(format!(
                "'{s}': K must be below N (shards are numbered 0 to {})",
                n - 1
            ));
        }
        Ok(Shard { index: k, count: n })
    }

    /// Whether case `case` belongs to this shard.
    pub fn owns(&self, case: u64) -> bool {
        case % self.count == self.index
    }

    /// The `j`-th case of this shard (`None` past `u64::MAX`).
    pub fn nth(&self, j: u64) -> Option<u64> {
        j.checked_mul(self.count)?.checked_add(self.index)
    }

    /// The cases of this shard among `0..total`, in order.
    pub fn cases(&self, total: u64) -> impl Iterator<Item = u64> + '_ {
        (0..)
            .map_while(|j| self.nth(j))
            .take_while(move |&c| c < total)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// A divergent case.
#[derive(Clone, Debug)]
pub struct Finding {
    pub case: u64,
    pub case_seed: u64,
    /// Where the shrunk scenario was saved.
    pub path: PathBuf,
    /// The shrunk scenario.
    pub scenario: String,
    /// Its diff report (text).
    pub report: String,
    /// The first divergence's kind and summary.
    pub summary: String,
    /// Did not reproduce on a second run, or its first divergence came
    /// after a khugepaged collapse ([`Confirmation`]): background kernel
    /// activity.
    pub flaky: bool,
}

/// Progress events.
pub enum FuzzEvent<'a> {
    /// A case finished; `rules` of [`Rule::COUNT`] rules are exercised by
    /// this run's cases so far.
    Case {
        case: u64,
        outcome: DiffOutcome,
        rules: usize,
    },
    /// Shrinking a divergent case.
    Shrinking { case: u64 },
    /// A finding was saved.
    Found(&'a Finding),
    /// A case could not run (the campaign stops after it).
    Error { case: u64, message: &'a str },
}

/// What a fuzz run did.
#[derive(Clone, Debug, Default)]
pub struct FuzzSummary {
    pub seed: u64,
    pub cases: u64,
    pub agree: u64,
    pub partial: u64,
    /// Why partial runs stopped early, with numbers masked (`N`), and how
    /// often.
    pub partial_reasons: std::collections::BTreeMap<String, u64>,
    pub findings: Vec<Finding>,
    /// Cases that could not run (case, message): the live backend failed
    /// to start, a reproducer could not be saved, ... The campaign stops at
    /// the first one.
    pub errors: Vec<(u64, String)>,
    pub elapsed: Duration,
    pub ops: OpSet,
    /// The CPU each worker was pinned to (empty with one job: unpinned).
    pub cpus: Vec<usize>,
    /// Cases that held the live gate exclusively (see [`needs_exclusive`]).
    pub exclusive: u64,
    /// Rule coverage of this run's cases on the model.
    pub coverage: Coverage,
    /// Where the cases' time went: the sums over the cases that ran side
    /// by side (`[0]`) and those that ran alone (`[1]`), with their number,
    /// wall time and time waiting for the gate (seconds).
    pub timings: [PhaseSums; 2],
    /// The cases of knob epochs that ran alone, by reason
    /// ([`AloneWhy::names`]; a case may have several).
    pub alone_why: BTreeMap<&'static str, u64>,
}

/// The sum of the [`CaseTimings`] of some cases.
#[derive(Clone, Copy, Debug, Default)]
pub struct PhaseSums {
    pub cases: u64,
    pub secs: f64,
    pub wait_secs: f64,
    pub phases: CaseTimings,
}

impl FuzzSummary {
    /// `ptlab fuzz --timings`: where the cases' time went, per phase, for
    /// the cases that ran side by side and those that ran alone.
    pub fn render_timings(&self) -> String {
        let mut out = String::new();
        let [sh, ex] = &self.timings;
        let per = |t: f64, n: u64| if n == 0 { 0.0 } else { t / n as f64 };
        let _ = writeln!(
            out,
            "where the time went (ms per case; wall time without waiting for the gate):"
        );
        let _ = writeln!(
            out,
            "  {:<36} {:>12} {:>12}",
            "phase",
            format!("shared ({})", sh.cases),
            format!("alone ({})", ex.cases)
        );
        let (ps, pe) = (sh.phases.phases(), ex.phases.phases());
        for ((name, a), (_, b)) in ps.iter().zip(pe.iter()) {
            let _ = writeln!(
                out,
                "  {name:<36} {:>12.2} {:>12.2}",
                per(*a, sh.cases),
                per(*b, ex.cases)
            );
        }
        for (name, a, b) in [
            ("whole case (wall)", sh.secs, ex.secs),
            ("waiting for the gate", sh.wait_secs, ex.wait_secs),
        ] {
            let _ = writeln!(
                out,
                "  {name:<36} {:>12.2} {:>12.2}",
                per(a * 1e3, sh.cases),
                per(b * 1e3, ex.cases)
            );
        }
        let _ = writeln!(
            out,
            "  counter re-runs: {} of the shared cases' runs, {} of the alone cases'; swap areas \
             kept from the case before: {}; shared cases' statements without the counter lock: {}",
            sh.phases.rerun_count, ex.phases.rerun_count, ex.phases.swap_reused, sh.phases.unlocked
        );
        let _ = writeln!(
            out,
            "  worker started ahead, before the case and its wait (not in its wall time): \
             {:.2} / {:.2} ms per case",
            per(sh.phases.prestart, sh.cases),
            per(ex.phases.prestart, ex.cases)
        );
        if !self.alone_why.is_empty() {
            let why: Vec<String> = self
                .alone_why
                .iter()
                .map(|(n, c)| format!("{n} {c}"))
                .collect();
            let _ = writeln!(
                out,
                "  alone cases of knob epochs by reason (a case may have several): {}",
                why.join(", ")
            );
        }
        out
    }
}

impl FuzzSummary {
    /// Reproducible divergences (not flaky).
    pub fn divergences(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| !f.flaky)
    }

    /// Cases per second.
    pub fn rate(&self) -> f64 {
        self.cases as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A case's verdict in the results file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Model and kernel agreed at every comparison.
    Agree,
    /// Stopped early without a divergence (a live budget, a runtime error).
    Partial,
    /// A divergence that reproduced; shrunk and saved.
    Divergent,
    /// A divergence that did not reproduce on a second run; saved unshrunk.
    Flaky,
    /// The case could not run.
    Error,
}

impl Verdict {
    pub const ALL: [Verdict; 5] = [
        Verdict::Agree,
        Verdict::Partial,
        Verdict::Divergent,
        Verdict::Flaky,
        Verdict::Error,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Agree => "agree",
            Verdict::Partial => "partial",
            Verdict::Divergent => "divergent",
            Verdict::Flaky => "flaky",
            Verdict::Error => "error",
        }
    }
}

/// One line of a results file (`ptlab fuzz -o DIR` writes
/// `DIR/results-SEED[-shard-K-of-N].jsonl`; `ptlab fuzz --merge` reads them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FuzzRecord {
    /// The campaign's seed and the case's index in it: the case is
    /// `ptlab fuzz --seed SEED` case `case`, generated from `case_seed`.
    pub seed: u64,
    pub case: u64,
    pub case_seed: u64,
    /// `K/N` of the shard that ran it.
    pub shard: String,
    /// The model's architecture.
    #[serde(default = "default_arch")]
    pub arch: String,
    /// Statements per generated scenario.
    #[serde(default)]
    pub ops: u64,
    pub verdict: Verdict,
    /// Unix time (seconds) the case started, and its wall time in seconds
    /// (the first diff, and for a divergence the confirmation, shrinking
    /// and saving), without the time spent waiting for other workers.
    pub start: f64,
    pub secs: f64,
    /// Time spent waiting for the live gate (other workers' cases).
    #[serde(default)]
    pub wait_secs: f64,
    /// Worker number and the CPU it was pinned to (`None`: not pinned).
    #[serde(default)]
    pub worker: u64,
    #[serde(default)]
    pub cpu: Option<u64>,
    /// Whether the case ran alone (changes THP knobs or swap, or can move
    /// THP counters) or beside other workers' cases.
    #[serde(default)]
    pub exclusive: bool,
    /// Its knob epoch (`--epoch`), if the campaign had epochs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Divergent, flaky: the first divergence; partial: why it stopped;
    /// error: the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Divergent, flaky: the saved reproducer and its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reproducer: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// The weights the case was generated with, where they differ from
    /// the campaign's (coverage guidance), as `name=value,...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    /// Rules this case exercised that no earlier case of the campaign had.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_rules: Vec<String>,
    /// Where the case's time went, by phase (live cases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<CaseTimings>,
}

/// Where one case's time went, in milliseconds (`timings` in the results
/// file; `ptlab fuzz --timings` prints the campaign's sums). The phases of
/// the first diff run (`start` … `end_restore`) add up to its wall time
/// but for the interpreter's own work; `reruns` and `confirm` are whole
/// runs again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CaseTimings {
    /// Generating the case and running it on the model (the planner; with
    /// knob epochs done for a whole epoch before its first case runs).
    pub plan: f64,
    /// Setting the epoch's THP policy, when this case was the one that set
    /// it (holding the gate exclusively).
    pub epoch_knobs: f64,
    /// Starting both sides: the model's configuration, the live backend's
    /// counter files and its `main` worker (fork, first answer, its own
    /// VMAs from smaps, the counter base).
    pub start: f64,
    /// The statements' operations on both sides (system calls in the
    /// workers, their round trips, forks), without knob writes and swap.
    pub calls: f64,
    /// Of `calls`, the model's side.
    pub model_calls: f64,
    /// THP knob writes, swap areas made and replaced (`swap` lines).
    pub knobs_swap: f64,
    /// The per-statement comparisons (observing both sides: /proc reads,
    /// tags from the workers, the model's observation; comparing).
    pub compare: f64,
    /// Ending the workers (each `exit` waits for `exit_mm()`).
    pub end_workers: f64,
    /// Putting back the knobs and removing the swap area (swapoff).
    pub end_restore: f64,
    /// The two re-runs of a case whose THP counters differed (a counter
    /// difference counts only if all three runs show it).
    pub reruns: f64,
    /// How many re-runs.
    pub rerun_count: u32,
    /// Confirming, shrinking and saving a divergence.
    pub confirm: f64,
    /// The first run's swap area was kept from the case before (no
    /// swapon; [`crate::knobs::set_swap_retention`]).
    #[serde(default)]
    pub swap_reused: u32,
    /// Statements of a run beside others that took no counter lock (they
    /// could move no compared counter: [`crate::reach`]).
    #[serde(default)]
    pub unlocked: u64,
    /// Starting the case's worker ahead, before the case and its wait for
    /// the gate ([`crate::live::prestart_worker`]): not in `start` nor in
    /// the case's wall time.
    #[serde(default)]
    pub prestart: f64,
}

impl CaseTimings {
    /// The phase names and values, in order (for the summary table).
    pub fn phases(&self) -> [(&'static str, f64); 11] {
        [
            ("plan (generate, model run)", self.plan),
            ("epoch policy (knob writes)", self.epoch_knobs),
            ("start (model config, worker fork)", self.start),
            ("statements: live side", self.calls - self.model_calls),
            ("statements: model side", self.model_calls),
            ("knob writes, swap areas", self.knobs_swap),
            ("comparisons (observe, compare)", self.compare),
            ("end workers", self.end_workers),
            ("restore knobs, swapoff", self.end_restore),
            ("counter re-runs", self.reruns),
            ("confirm, shrink, save", self.confirm),
        ]
    }

    /// Add the phases of the first run of a diff.
    fn add_run(&mut self, t: &crate::diff::DiffTiming) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        self.start += ms(t.setup);
        self.calls += ms(t.calls);
        self.model_calls += ms(t.model_calls);
        self.knobs_swap += ms(t.global_calls);
        self.compare += ms(t.compare);
        self.end_workers += ms(t.end_workers);
        self.end_restore += ms(t.end_restore);
        self.reruns += ms(t.reruns.0);
        self.rerun_count += t.reruns.1;
        self.swap_reused += u32::from(t.swap_reused);
        self.unlocked += t.unlocked;
    }

    /// Sum of two.
    pub fn add(&mut self, o: &CaseTimings) {
        self.plan += o.plan;
        self.epoch_knobs += o.epoch_knobs;
        self.start += o.start;
        self.calls += o.calls;
        self.model_calls += o.model_calls;
        self.knobs_swap += o.knobs_swap;
        self.compare += o.compare;
        self.end_workers += o.end_workers;
        self.end_restore += o.end_restore;
        self.reruns += o.reruns;
        self.rerun_count += o.rerun_count;
        self.confirm += o.confirm;
        self.swap_reused += o.swap_reused;
        self.unlocked += o.unlocked;
        self.prestart += o.prestart;
    }
}

fn default_arch() -> String {
    ArchKind::X86_64.name().to_string()
}

impl FuzzRecord {
    /// The JSON line (without the newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a record serialises")
    }
}

/// What identifies a divergence across runs: its kind, the statement it
/// follows and its summary (line numbers change while shrinking).
fn first_kind(rep: &DiffReport) -> Option<(String, String)> {
    rep.first().map(|d| (d.kind.clone(), d.stmt.clone()))
}

/// How a divergent case's confirmation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Confirmation {
    /// A confirmation run showed the same first divergence.
    Reproduced,
    /// It did not: background activity (other programs moving the global
    /// counters, another job's case).
    Flaky,
    /// khugepaged (the kernel thread) collapsed ranges before the first
    /// divergence of the case's own run: background work no statement
    /// made, decided from that run alone, so every run of the case that
    /// diverges this way is classified the same, whatever a confirmation
    /// run would have caught.
    Background(String),
}

/// Why a run's first divergence is khugepaged's background work, if it is:
/// khugepaged's thread collapsed a range on the machine between the run's
/// start and that divergence ([`crate::diff::Divergence::khugepaged`]).
/// A collapse by khugepaged is never a statement's effect, and whether
/// its 10 s scan reaches the case's ranges during a run is timing; before
/// this, the confirmation run decided (a collapse in it too: divergent;
/// none: flaky), so the same case was called either on different runs
/// (`ptlab fuzz --seed 1 --time 5 --jobs 1`, case 85).
pub(crate) fn background_cause(rep: &DiffReport) -> Option<String> {
    let d = rep.first()?;
    (d.khugepaged > 0).then(|| {
        format!(
            "khugepaged collapsed {} range(s) on the machine before the first divergence \
             (khugepaged/pages_collapsed +{})",
            d.khugepaged, d.khugepaged
        )
    })
}

/// Confirm a divergent run `first`: background by its own first
/// divergence, else re-run (`rerun`) and compare the first divergences. A
/// confirmation run that khugepaged disturbed says nothing about the
/// case and is made once more; two such runs leave it flaky.
pub(crate) fn confirm<E>(
    first: &DiffReport,
    mut rerun: impl FnMut() -> Result<DiffReport, E>,
) -> Result<Confirmation, E> {
    if let Some(why) = background_cause(first) {
        return Ok(Confirmation::Background(why));
    }
    for _ in 0..2 {
        let again = rerun()?;
        if background_cause(&again).is_some() {
            continue;
        }
        return Ok(if same_finding(first, &again) {
            Confirmation::Reproduced
        } else {
            Confirmation::Flaky
        });
    }
    Ok(Confirmation::Flaky)
}

fn same_finding(a: &DiffReport, b: &DiffReport) -> bool {
    match (a.first(), b.first()) {
        (Some(x), Some(y)) => x.kind == y.kind && x.stmt == y.stmt && x.summary == y.summary,
        _ => false,
    }
}

fn opts_for_fuzz(limits: &crate::budget::LiveLimits, arch: ArchKind) -> DiffOptions {
    DiffOptions {
        arch,
        max_divergences: 4,
        max_steps: Some(10_000),
        limits: limits.clone(),
        ..DiffOptions::default()
    }
}

/// Whether the machine's THP policy (as it is when the campaign starts)
/// lets some folio size be allocated for every process: then any fault
/// anywhere moves the global THP counters.
fn baseline_exposes_sizes() -> bool {
    let top = crate::knobs::current_mode(ThpKnob::TopLevel).unwrap_or(ThpMode::Always);
    (2u8..=9).any(|o| match crate::knobs::current_mode(ThpKnob::Size(o)) {
        Ok(ThpMode::Always) => true,
        Ok(ThpMode::Inherit) => top == ThpMode::Always,
        Ok(_) => false,
        Err(_) => false,
    })
}

/// Whether a case must run alone: it writes a THP knob, makes a swap file
/// (global state every other case depends on) or does something that can
/// move the global THP counters or drain other CPUs' folio batches
/// (`MADV_HUGEPAGE`, `MADV_COLLAPSE`, which calls `lru_add_drain_all()`,
/// `MADV_PAGEOUT`/`COLD`), or the machine's own policy lets any fault
/// allocate a large folio (`exposed`). Everything else only touches its
/// own processes and may run beside other such cases.
pub fn needs_exclusive(g: &Generated, exposed: bool) -> bool {
    exposed
        || g.lines.iter().any(|l| match l {
            GenLine::Comment(_) => false,
            GenLine::Call { call, .. } => matches!(
                call,
                Call::SetThp { .. }
                    | Call::SetSwap { .. }
                    | Call::SetUseZeroPage { .. }
                    | Call::Madvise {
                        advice: Advice::HugePage
                            | Advice::Collapse
                            | Advice::PageOut
                            | Advice::Cold,
                        ..
                    }
            ),
        })
}

/// Whether a case of a knob epoch must run alone ([`epoch_sharing`]).
pub fn needs_exclusive_in_epoch(g: &Generated, machine: &[(ThpKnob, ThpMode)]) -> bool {
    epoch_sharing(g, machine).alone
}

/// What a case of a knob epoch needs of the live kernel's global state,
/// beside the epoch's policy ([`epoch_sharing`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sharing {
    /// It holds the gate exclusively: no other case runs meanwhile.
    pub alone: bool,
    /// How it uses the THP `enabled` knobs after its policy.
    pub knobs: KnobUse,
    /// How it depends on the swap areas of the machine.
    pub swap: SwapUse,
    /// Why it runs alone (any of them makes `alone`).
    pub why: AloneWhy,
}

/// Why a case of a knob epoch runs alone ([`epoch_sharing`]); counted over
/// a campaign by `ptlab fuzz --timings`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AloneWhy {
    /// A `thp` line that changes a folio size's effective mode.
    pub knob_change: bool,
    /// A `use_zero_page` line.
    pub zero_page: bool,
    /// `MADV_COLLAPSE` (`lru_add_drain_all()`).
    pub collapse: bool,
}

impl AloneWhy {
    /// The reasons' names, as `--timings` prints them.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.knob_change, "a knob change"),
            (self.collapse, "MADV_COLLAPSE"),
            (self.zero_page, "use_zero_page"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect()
    }
}

/// How a case that runs beside others uses the THP `enabled` knobs
/// ([`Sharing`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KnobUse {
    /// No `thp` line after its policy.
    #[default]
    None,
    /// `thp` lines that write nothing while the knobs are the epoch's
    /// (each asks for the value in force): no case that writes a knob may
    /// run meanwhile, or the line would write.
    Reads,
    /// `thp` lines that write a knob, each leaving every folio size's
    /// effective mode `never` before, during and after the write (the
    /// session puts the knob back when the case ends): no other case with
    /// a `thp` line may run meanwhile.
    Writes,
}

/// How a case that runs beside others depends on swap ([`Sharing`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SwapUse {
    /// Neither makes a swap area nor pages anything out: an active swap
    /// area changes nothing it does.
    #[default]
    None,
    /// Makes a swap area (`swap` lines): the only area while it runs.
    MakesArea,
    /// Calls `MADV_PAGEOUT`/`MADV_COLD` without a swap area of its own:
    /// no swap area may be active while it runs (another case's area would
    /// take its pages).
    NoArea,
}

impl Sharing {
    /// It needs the campaign's swap token ([`SwapUse`]).
    pub fn swap_token(&self) -> bool {
        self.swap != SwapUse::None
    }
}

/// What a case of a knob epoch needs of global state after its policy:
/// whether it must run alone, and the knob and swap tokens it needs when
/// it runs beside other jobs' cases (`ptlab fuzz --jobs`, docs/live.md
/// "Parallel jobs and shards").
///
/// It runs alone when it changes what a THP `enabled` knob means for any
/// folio size (the mid-scenario `thp` lines the knob change itself is
/// about), would write `use_zero_page`, or drains every CPU's folio
/// batches (`MADV_COLLAPSE` calls `lru_add_drain_all()`, which would
/// change another job's copy-on-write and reclaim outcomes). The epoch's
/// policy is set before its cases run, and the THP counters of cases that
/// run side by side are attributed to each case's own statements
/// ([`crate::live::COUNTER_LOCK`]), so neither the policy lines nor the
/// operations that move counters (`MADV_HUGEPAGE`, `MADV_PAGEOUT`/`COLD`,
/// any fault under an `always` policy) keep a case from running beside
/// others.
///
/// A `thp` line that asks for the value the knob already has is no
/// change: the live backend's knob session writes nothing for it (so
/// nothing wakes khugepaged or recomputes watermarks, as a write would:
/// Linux mm/huge_memory.c thpsize_enabled_store() → start_stop_khugepaged()),
/// and the model's policy stays as it was ([`KnobUse::Reads`]). The value
/// in force is the policy's for a knob the policy names and the machine's
/// own (`machine`, read when the campaign starts; the epoch puts every
/// other knob back to it) otherwise; a knob of unknown value counts as a
/// change.
///
/// A line that writes a knob but leaves every size's effective mode
/// `never` throughout is no change either for any other process
/// ([`KnobUse::Writes`]): a size knob between `never` and `inherit` under
/// a top level of `never`, or the top level between `always` and `madvise`
/// when no size inherits it. Only these: thpsize_enabled_store() clears a
/// size's old bit before it sets the new one, and hugepage_global_enabled()
/// reads the top level's two flags, without a lock for readers
/// (`__thp_vma_allowable_orders()`), so any other change passes through
/// `never` for a moment, and a fault of another case then could get a
/// smaller folio. The top level's change keeps it enabled, so
/// start_stop_khugepaged() neither starts nor stops khugepaged.
///
/// A case with a `swap` line makes an area ([`SwapUse::MakesArea`]); one
/// that calls `MADV_PAGEOUT` or `MADV_COLD` without one must not see
/// another case's ([`SwapUse::NoArea`]). Cases that do neither may run
/// while an area is active: nothing else they do depends on it
/// (reclaim only under memory pressure, which the budgets keep away).
pub fn epoch_sharing(g: &Generated, machine: &[(ThpKnob, ThpMode)]) -> Sharing {
    let end = policy_end(g);
    // Every knob's value in force: the machine's, then the policy's.
    let mut state = KnobState(machine.to_vec());
    for l in &g.lines[..end] {
        if let GenLine::Call {
            call: Call::SetThp { knob, mode },
            ..
        } = l
        {
            state.insert(*knob, *mode);
        }
    }
    let mut out = Sharing::default();
    let mut makes_area = false;
    let mut pages_out = false;
    for l in &g.lines[end..] {
        let GenLine::Call { call, .. } = l else {
            continue;
        };
        match call {
            Call::SetThp { knob, mode } => match state.get(knob) {
                Some(now) if now == mode => {
                    if out.knobs == KnobUse::None {
                        out.knobs = KnobUse::Reads;
                    }
                }
                Some(_) if write_keeps_never(&state, *knob, *mode) => {
                    out.knobs = KnobUse::Writes;
                    state.insert(*knob, *mode);
                }
                _ => {
                    out.alone = true;
                    out.why.knob_change = true;
                }
            },
            Call::SetSwap { .. } => makes_area = true,
            Call::SetUseZeroPage { .. } => {
                out.alone = true;
                out.why.zero_page = true;
            }
            Call::Madvise { advice, .. } => match advice.value() {
                // MADV_COLLAPSE: lru_add_drain_all().
                25 => {
                    out.alone = true;
                    out.why.collapse = true;
                }
                // MADV_COLD, MADV_PAGEOUT.
                20 | 21 => pages_out = true,
                _ => {}
            },
            _ => {}
        }
    }
    out.swap = if makes_area {
        SwapUse::MakesArea
    } else if pages_out {
        SwapUse::NoArea
    } else {
        SwapUse::None
    };
    out
}

/// Whether writing `mode` to `knob`, the knobs being `state`, leaves every
/// folio size's effective mode `never` before, during and after the write,
/// and the top level enabled or not as it was ([`epoch_sharing`]).
fn write_keeps_never(state: &KnobState, knob: ThpKnob, mode: ThpMode) -> bool {
    let top = state.get(&ThpKnob::TopLevel).copied();
    match knob {
        // thpsize_enabled_store(): never and inherit under a top level of
        // never are both never, and so is the moment between.
        ThpKnob::Size(_) => {
            let never_now = match state.get(&knob) {
                Some(ThpMode::Never) => true,
                Some(ThpMode::Inherit) => top == Some(ThpMode::Never),
                _ => false,
            };
            let never_then = match mode {
                ThpMode::Never => true,
                ThpMode::Inherit => top == Some(ThpMode::Never),
                _ => false,
            };
            never_now && never_then
        }
        // enabled_store(): between always and madvise the top level is
        // enabled before and after, and only the sizes that inherit it
        // (none here) take their mode from it.
        ThpKnob::TopLevel => {
            let enabled =
                |m: Option<ThpMode>| matches!(m, Some(ThpMode::Always | ThpMode::Madvise));
            enabled(top)
                && enabled(Some(mode))
                && !state
                    .0
                    .iter()
                    .any(|(k, m)| matches!(k, ThpKnob::Size(_)) && *m == ThpMode::Inherit)
        }
    }
}

/// The THP `enabled` knobs' values in force, as [`epoch_sharing`] follows
/// them (a knob not listed: unknown).
struct KnobState(Vec<(ThpKnob, ThpMode)>);

impl KnobState {
    fn get(&self, knob: &ThpKnob) -> Option<&ThpMode> {
        self.0.iter().find(|(k, _)| k == knob).map(|(_, m)| m)
    }

    fn insert(&mut self, knob: ThpKnob, mode: ThpMode) {
        match self.0.iter_mut().find(|(k, _)| *k == knob) {
            Some(e) => e.1 = mode,
            None => self.0.push((knob, mode)),
        }
    }
}

/// The THP `enabled` knobs as the machine has them now (the top level and
/// every size it has), for [`needs_exclusive_in_epoch`].
pub fn machine_knobs() -> Vec<(ThpKnob, ThpMode)> {
    std::iter::once(ThpKnob::TopLevel)
        .chain((2..=9).map(ThpKnob::Size))
        .filter_map(|k| Some((k, crate::knobs::current_mode(k).ok()?)))
        .collect()
}

/// The swap area a case makes before any other operation: its first
/// statement after the THP policy lines is `swap SIZE [blockdev]` (as the
/// generator places it). A swap area kept from the case before
/// ([`crate::knobs::set_swap_retention`]) is left active for such a case
/// only.
pub fn leading_swap(g: &Generated) -> Option<(u64, ptlab_model::swap::SwapKind)> {
    g.lines[policy_end(g)..].iter().find_map(|l| match l {
        GenLine::Comment(_) => None,
        GenLine::Call { call, .. } => Some(match call {
            Call::SetSwap { bytes, kind } if *bytes > 0 => Some((*bytes, *kind)),
            _ => None,
        }),
    })?
}

/// The CPUs this process may run on (its affinity mask), in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set we pass.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pin the calling thread (and every process it forks from now on) to
/// `cpu`.
pub fn pin_this_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: sched_setaffinity(0) on the calling thread with a set we built.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no arguments.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

/// The CPUs `jobs` workers are pinned to: the first `jobs` CPUs this
/// process may run on. An error names what is available when there are
/// fewer (two workers on one CPU would share its folio batches).
pub fn cpus_for_jobs(jobs: usize) -> anyhow::Result<Vec<usize>> {
    let cpus = allowed_cpus();
    if jobs > cpus.len() {
        anyhow::bail!(
            "--jobs {jobs}: only {} CPU{} available to ptlab ({}); each job needs a CPU of \
             its own (the kernel's per-CPU folio batches decide copy-on-write reuse and \
             MADV_PAGEOUT, so two jobs must not share one)",
            cpus.len(),
            if cpus.len() == 1 { " is" } else { "s are" },
            cpus.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(cpus[..jobs].to_vec())
}

/// What a worker reports to the thread that owns the campaign.
enum Msg {
    Shrinking(u64),
    Done(Box<CaseResult>),
}

struct CaseResult {
    record: FuzzRecord,
    outcome: Option<DiffOutcome>,
    partial_reason: Option<String>,
    finding: Option<Finding>,
    error: Option<String>,
    /// The case's rule coverage on the model.
    coverage: Coverage,
    /// Why it ran alone, in a knob epoch ([`AloneWhy::names`]).
    alone_why: Vec<&'static str>,
}

/// What every worker shares.
struct Campaign<'a> {
    opts: &'a FuzzOptions,
    dopts: DiffOptions,
    start: Instant,
    /// The next index into this shard's sequence of cases.
    next: std::sync::atomic::AtomicU64,
    /// Set at the first error: no worker takes another case.
    stop: std::sync::atomic::AtomicBool,
    /// Exclusive for cases that change global state, shared for the
    /// others (see [`fuzz`]); admits in the order [`Campaign::take`]
    /// handed the cases out ([`crate::gate`]).
    gate: TicketGate,
    exposed: bool,
    /// The THP knobs as the machine had them at the start
    /// ([`machine_knobs`]): what an epoch leaves in force for a knob its
    /// policy does not name.
    machine_knobs: Vec<(ThpKnob, ThpMode)>,
    /// Generates the cases in order, each on the model, for coverage.
    planner: std::sync::Mutex<Planner>,
    jobs: usize,
    /// Knob epochs (`--epoch K`), if the campaign has them.
    epochs: Option<Epochs>,
    /// The campaign's knob session: one that covers every knob
    /// ([`crate::knobs::KnobSession::covering_all`]), so that the cases'
    /// knob writes need no journal writes of their own, and through which
    /// the epochs' policies are set. Restored when the campaign ends.
    cover: std::sync::Mutex<Option<crate::knobs::KnobSession>>,
    /// The diff options of a case that runs beside others: its counter
    /// steps count its own statements only (`attribute_counters`).
    dopts_shared: DiffOptions,
    /// Consecutive cases that make the same swap area share one
    /// ([`crate::knobs::set_swap_retention`]; with knob epochs and a
    /// covering session).
    retain_swap: bool,
    /// Held by a case of an epoch that runs beside others and has `thp`
    /// lines after its policy: exclusively when they write a knob, shared
    /// when they write nothing ([`KnobUse`]). Taken after the gate.
    knob_token: std::sync::RwLock<()>,
    /// Held by a case of an epoch that runs beside others and makes a swap
    /// area or pages out ([`SwapUse`]): one such case at a time. Taken
    /// after the gate and the knob token.
    swap_token: std::sync::Mutex<()>,
}

/// The knob epochs of a campaign (`--epoch K`).
struct Epochs {
    k: u64,
    queue: std::sync::Mutex<EpochQueue>,
    knobs: std::sync::Mutex<EpochKnobs>,
}

/// The cases of the current epoch not taken yet: the ones that run side
/// by side first, then those that run alone.
#[derive(Default)]
struct EpochQueue {
    shared: std::collections::VecDeque<(u64, Planned)>,
    alone: std::collections::VecDeque<(u64, Planned)>,
    /// The tokens the cases handed out and not finished yet need
    /// ([`Campaign::take`] prefers a case whose tokens are free).
    running: Vec<(u64, Sharing)>,
}

impl EpochQueue {
    /// Whether a case needing `s` would wait for a token that a running
    /// case needs.
    fn conflicts(&self, s: &Sharing) -> bool {
        self.running.iter().any(|(_, r)| {
            (s.swap_token() && r.swap_token())
                || matches!(
                    (s.knobs, r.knobs),
                    (KnobUse::Writes, KnobUse::Reads | KnobUse::Writes)
                        | (KnobUse::Reads, KnobUse::Writes)
                )
        })
    }

    /// The next case that runs beside others: the first that needs a token
    /// no running case holds (so that the jobs run one case with a swap
    /// area or a knob write and one without, side by side), else the
    /// first that needs none, else the first.
    fn pop_shared(&mut self, machine: &[(ThpKnob, ThpMode)]) -> Option<(u64, Planned)> {
        let sharing: Vec<Sharing> = self
            .shared
            .iter()
            .map(|(_, p)| epoch_sharing(&p.gen, machine))
            .collect();
        let needs_token = |s: &Sharing| s.swap_token() || s.knobs != KnobUse::None;
        let i = sharing
            .iter()
            .position(|s| needs_token(s) && !self.conflicts(s))
            .or_else(|| sharing.iter().position(|s| !needs_token(s)))
            .or((!sharing.is_empty()).then_some(0))?;
        self.shared.remove(i)
    }
}

/// Whose policy the campaign set (`None`: the machine's own).
#[derive(Default)]
struct EpochKnobs {
    applied: Option<u64>,
}

/// A case handed to a worker.
struct Taken<'g> {
    case: u64,
    /// Planned already (epochs plan a whole epoch to sort its cases; a
    /// live campaign plans each case when it hands it out).
    planned: Option<Planned>,
    /// Its place in the gate's queue (a live case), handed out with it.
    ticket: Option<Ticket<'g>>,
}

/// One generated case, run on the model.
struct Planned {
    gen: Generated,
    /// The weights it was generated with, where they differ from the base.
    weights: String,
    /// Its rule coverage on the model.
    coverage: Coverage,
    /// Rules no earlier case had hit.
    new_rules: Vec<Rule>,
    /// The model run: `Err` for a violated invariant or a panic (a model
    /// bug), `Ok(Some(reason))` when it stopped early.
    model: Result<Option<String>, String>,
    /// Generating it and running it on the model.
    plan: Duration,
}

/// Generates the campaign's cases in index order (all of them, whatever
/// the shard), runs each on the model and keeps the coverage, so that case
/// `n`'s weights depend only on the seed and the cases before it: the same
/// with any number of jobs, and the same in a shard as in a whole run.
struct Planner {
    seed: u64,
    ops: usize,
    set: OpSet,
    /// The model configurations each case runs on: the campaign's
    /// architecture; with `--model-only` both architectures, each with the
    /// 6.18 algorithms and with every seed change switched back.
    configs: Vec<(ArchKind, ptlab_model::Before)>,
    base: GenWeights,
    guide: bool,
    check: bool,
    shard: Shard,
    /// Knob epochs (`FuzzOptions::epoch`; 0: none).
    epoch: u64,
    /// The next case index to plan.
    next: u64,
    /// Coverage of cases `0..next`.
    global: Coverage,
    /// Planned cases of this shard not taken yet.
    pending: BTreeMap<u64, Planned>,
}

impl Planner {
    fn new(opts: &FuzzOptions, set: OpSet) -> Planner {
        Planner {
            seed: opts.seed,
            ops: opts.ops,
            set,
            configs: if opts.model_only {
                ArchKind::ALL
                    .iter()
                    .flat_map(|&a| {
                        [
                            (a, ptlab_model::Before::empty()),
                            (a, ptlab_model::Before::all()),
                        ]
                    })
                    .collect()
            } else {
                vec![(opts.arch, ptlab_model::Before::empty())]
            },
            base: opts.weights.clone(),
            guide: opts.guide,
            check: opts.model_only,
            shard: opts.shard,
            epoch: opts.epoch,
            next: 0,
            global: Coverage::default(),
            pending: BTreeMap::new(),
        }
    }

    /// Case `case` (of this shard), planning every case before it first.
    fn take(&mut self, case: u64) -> Planned {
        while self.next <= case {
            let n = self.next;
            let p = self.plan_one(n);
            if self.shard.owns(n) {
                self.pending.insert(n, p);
            }
            self.next += 1;
        }
        self.pending
            .remove(&case)
            .unwrap_or_else(|| self.plan_one_detached(case))
    }

    fn plan_one(&mut self, n: u64) -> Planned {
        let t0 = Instant::now();
        let w = if self.guide {
            self.base.guided(&self.global)
        } else {
            self.base.clone()
        };
        let gen = self.generate(n, &w);
        let (coverage, model) = self.run(&gen);
        let new_rules: Vec<Rule> = coverage.new_over(&self.global).collect();
        self.global.add(&coverage);
        Planned {
            gen,
            weights: w.diff_from(&self.base),
            coverage,
            new_rules,
            model,
            plan: t0.elapsed(),
        }
    }

    /// Case `n` with weights `w` (in its knob epoch, if any).
    fn generate(&self, n: u64, w: &GenWeights) -> Generated {
        let mut gen = generate_weighted(case_seed(self.seed, n), self.ops, self.set, w);
        if self.epoch > 0 {
            into_epoch(&mut gen, self.seed, n, self.epoch);
        }
        gen
    }

    /// Run `gen` on every configuration: the summed coverage, and the
    /// first configuration's bug or early stop (named when there are
    /// several configurations).
    fn run(&self, gen: &Generated) -> (Coverage, Result<Option<String>, String>) {
        let src = gen.to_ptl();
        let mut total = Coverage::default();
        let mut verdict = Ok(None);
        for &(arch, before) in &self.configs {
            let (c, v) = run_on_model(&src, arch, before, self.check);
            total.add(&c);
            let name = || {
                if self.configs.len() == 1 {
                    String::new()
                } else if before.is_empty() {
                    format!(" [{}]", arch.name())
                } else {
                    format!(" [{}, every seed change switched back]", arch.name())
                }
            };
            match (&verdict, v) {
                (Err(_), _) => {}
                (_, Err(e)) => verdict = Err(format!("{e}{}", name())),
                (Ok(None), Ok(Some(why))) => verdict = Ok(Some(why)),
                _ => {}
            }
        }
        (total, verdict)
    }

    /// A case already planned and taken (never asked twice; kept total).
    fn plan_one_detached(&self, n: u64) -> Planned {
        let t0 = Instant::now();
        let gen = self.generate(n, &self.base);
        let (coverage, model) = self.run(&gen);
        Planned {
            gen,
            weights: String::new(),
            coverage,
            new_rules: Vec::new(),
            model,
            plan: t0.elapsed(),
        }
    }
}

/// The text of case `case` of the campaign `opts` describes, as the
/// campaign generates it (with guidance: after planning every case before
/// it on the model). Needs no live kernel.
pub fn case_text(opts: &FuzzOptions, case: u64) -> String {
    let set = OpSet::probe_arch(opts.arch);
    let mut p = Planner::new(
        &FuzzOptions {
            shard: Shard::WHOLE,
            ..opts.clone()
        },
        set,
    );
    let planned = p.take(case);
    let mut text = format!(
        "# ptlab fuzz --seed {}{}{} case {case}{}\n",
        opts.seed,
        if opts.model_only { " --model-only" } else { "" },
        if opts.epoch > 0 {
            format!(" --epoch {}", opts.epoch)
        } else {
            String::new()
        },
        if planned.weights.is_empty() {
            String::new()
        } else {
            format!(" (guided weights: {})", planned.weights)
        }
    );
    text.push_str(&planned.gen.to_ptl());
    text
}

/// Run a generated scenario on the model of `arch` (the invariant checker
/// after every statement with `check`): its rule coverage, and `Err` with
/// the message for a violated invariant or a panic, `Ok(Some(reason))`
/// for a run that stopped early.
fn run_on_model(
    src: &str,
    arch: ArchKind,
    before: ptlab_model::Before,
    check: bool,
) -> (Coverage, Result<Option<String>, String>) {
    let script = match ptlab_scenario::parse("fuzz.ptl", src) {
        Ok(s) => s,
        Err(e) => {
            return (
                Coverage::default(),
                Err(format!("generated scenario does not parse: {e}")),
            )
        }
    };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut cfg = ptlab_model::ModelConfig::for_arch(arch);
        cfg.before = before;
        let mut backend = ModelBackend::new(cfg).check_every_statement(check);
        let report = ptlab_scenario::run(&script, &mut backend, &Default::default());
        (backend.model().coverage(), report)
    }));
    match run {
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".to_string());
            (Coverage::default(), Err(format!("model panic: {msg}")))
        }
        Ok((cov, report)) => {
            use ptlab_scenario::FailureKind;
            if let Some(f) = report
                .failures
                .iter()
                .find(|f| f.kind == FailureKind::Invariant)
            {
                return (cov, Err(format!("model invariant: {f}")));
            }
            let stopped = report
                .failures
                .iter()
                .find(|f| f.kind == FailureKind::Runtime)
                .map(|f| f.message.clone());
            (cov, Ok(stopped))
        }
    }
}

impl Campaign<'_> {
    /// The next case to run, if the campaign goes on.
    fn take(&self) -> Option<Taken<'_>> {
        use std::sync::atomic::Ordering;
        if self.stop.load(Ordering::SeqCst) {
            return None;
        }
        if self.opts.time.is_some_and(|t| self.start.elapsed() >= t) {
            return None;
        }
        let Some(ep) = &self.epochs else {
            let case = self.next_case()?;
            if self.opts.model_only {
                return Some(Taken {
                    case,
                    planned: None,
                    ticket: None,
                });
            }
            let mut planner = self.planner.lock().unwrap_or_else(|e| e.into_inner());
            let p = planner.take(case);
            // Under the planner's lock: tickets in the order of the cases.
            let ticket = self.gate.ticket(if needs_exclusive(&p.gen, self.exposed) {
                Want::Exclusive
            } else {
                Want::Shared(u64::MAX)
            });
            return Some(Taken {
                case,
                planned: Some(p),
                ticket: Some(ticket),
            });
        };
        let mut q = ep.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.shared.is_empty() && q.alone.is_empty() {
            // Plan the next epoch of this shard: its cases that run side
            // by side first, in index order, then the others.
            let first = self.next_case()?;
            let epoch = first / ep.k;
            let mut case = Some(first);
            while let Some(c) = case {
                let p = self
                    .planner
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(c);
                if needs_exclusive_in_epoch(&p.gen, &self.machine_knobs) {
                    q.alone.push_back((c, p));
                } else {
                    q.shared.push_back((c, p));
                }
                // The next case of this shard, if it is in the same epoch.
                let j = self.next.load(Ordering::SeqCst);
                case = self
                    .opts
                    .shard
                    .nth(j)
                    .filter(|&n| n / ep.k == epoch && self.opts.cases.is_none_or(|m| n < m));
                if case.is_some() {
                    self.next.fetch_add(1, Ordering::SeqCst);
                }
            }
            // The cases that make swap areas, grouped by the area (in
            // index order within a group), so that consecutive ones can
            // share one area (crate::knobs::set_swap_retention): those
            // beside others in increasing order of area, then the alone
            // ones in decreasing order, the area the last case beside
            // others kept first, and the alone cases without an area last
            // (each removes a kept area).
            let area = |p: &Planned| leading_swap(&p.gen).map(|(b, k)| (b, k as u8));
            q.shared
                .make_contiguous()
                .sort_by_key(|(c, p)| (area(p), *c));
            q.alone
                .make_contiguous()
                .sort_by_key(|(c, p)| (area(p).is_none(), std::cmp::Reverse(area(p)), *c));
        }
        let (case, p) = match q.pop_shared(&self.machine_knobs) {
            Some(c) => c,
            None => q.alone.pop_front()?,
        };
        let s = epoch_sharing(&p.gen, &self.machine_knobs);
        // Under the queue's lock: tickets in the order the cases are
        // handed out, so that an epoch's cases beside others, its alone
        // cases and the next epoch's get the gate in that order.
        let ticket = self.gate.ticket(if s.alone {
            Want::Exclusive
        } else {
            Want::Shared(case / ep.k)
        });
        q.running.push((case, s));
        Some(Taken {
            case,
            planned: Some(p),
            ticket: Some(ticket),
        })
    }

    /// The next case index of this shard (within `--steps`).
    fn next_case(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let j = self.next.fetch_add(1, Ordering::SeqCst);
        let case = self.opts.shard.nth(j)?;
        if self.opts.cases.is_some_and(|c| case >= c) {
            return None;
        }
        Some(case)
    }

    /// Set epoch `epoch`'s policy unless it is set (the caller holds the
    /// gate exclusively).
    fn apply_epoch(&self, epoch: u64, tm: &mut CaseTimings) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let r = self.apply_epoch_untimed(epoch);
        tm.epoch_knobs += t0.elapsed().as_secs_f64() * 1e3;
        r
    }

    fn apply_epoch_untimed(&self, epoch: u64) -> anyhow::Result<()> {
        let ep = self.epochs.as_ref().expect("epochs");
        {
            let mut k = ep.knobs.lock().unwrap_or_else(|e| e.into_inner());
            if k.applied == Some(epoch) {
                return Ok(());
            }
            // The caller holds the gate exclusively: no case runs now. A
            // new epoch starts with its cases side by side, which make no
            // swap area.
            crate::knobs::drop_retained_swap();
            k.applied = None;
            let mut cover = self.cover.lock().unwrap_or_else(|e| e.into_inner());
            let session = cover.get_or_insert_with(crate::knobs::KnobSession::new);
            {
                // Every knob as the epoch's scenarios leave it when run
                // alone: the policy's value, or the machine's own for a
                // size the policy does not name (not the last epoch's).
                let policy = epoch_policy(self.opts.seed, epoch);
                for knob in std::iter::once(ThpKnob::TopLevel).chain((2..=9).map(ThpKnob::Size)) {
                    let named = policy.iter().find_map(|c| match c {
                        Call::SetThp { knob: k, mode } if *k == knob => Some(*mode),
                        _ => None,
                    });
                    let Some(mode) = named.or_else(|| session.original(knob)) else {
                        continue;
                    };
                    session.set(knob, mode).map_err(|e| {
                        anyhow::anyhow!("knob epoch {epoch}: cannot set {knob:?} to {mode:?}: {e}")
                    })?;
                }
                k.applied = Some(epoch);
            }
        }
        Ok(())
    }

    /// Put back the machine's own policy (the caller holds the gate
    /// exclusively): a divergence is confirmed and shrunk from it, as
    /// `ptlab diff` of the saved reproducer will run (the shrinker may
    /// drop the epoch's `thp` lines).
    fn leave_epoch(&self) {
        let Some(ep) = &self.epochs else {
            return;
        };
        let mut k = ep.knobs.lock().unwrap_or_else(|e| e.into_inner());
        if k.applied.take().is_none() {
            return;
        }
        let mut cover = self.cover.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(session) = cover.as_mut() {
            let mut back = Vec::new();
            for knob in std::iter::once(ThpKnob::TopLevel).chain((2..=9).map(ThpKnob::Size)) {
                if let Some(mode) = session.original(knob) {
                    if session.set(knob, mode).is_err() {
                        back.push(knob);
                    }
                }
            }
            if !back.is_empty() {
                // Could not write one back: restore the whole session.
                for p in session.restore() {
                    eprintln!("ptlab: could not restore THP knob {p}");
                }
                *cover = None;
            }
        }
    }

    fn worker(&self, worker: u64, cpu: Option<usize>, send: &mut dyn FnMut(Msg)) {
        while let Some(Taken {
            case,
            planned,
            ticket,
        }) = self.take()
        {
            let r = self.run_case(case, planned, ticket, worker, cpu, send);
            if let Some(ep) = &self.epochs {
                let mut q = ep.queue.lock().unwrap_or_else(|e| e.into_inner());
                q.running.retain(|(c, _)| *c != case);
            }
            if r.error.is_some() {
                self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            send(Msg::Done(Box::new(r)));
        }
        // A worker started for a case that never came.
        crate::live::drop_prestarted_worker();
    }

    fn run_case(
        &self,
        case: u64,
        planned: Option<Planned>,
        ticket: Option<Ticket<'_>>,
        worker: u64,
        cpu: Option<usize>,
        send: &mut dyn FnMut(Msg),
    ) -> CaseResult {
        let opts = self.opts;
        let cs = case_seed(opts.seed, case);
        let tp = Instant::now();
        let planned = planned.unwrap_or_else(|| {
            self.planner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(case)
        });
        let gen = &planned.gen;
        let src = gen.to_ptl();
        let epoch = self.epochs.as_ref().map(|ep| case / ep.k);
        let sharing = epoch_sharing(gen, &self.machine_knobs);
        let exclusive = if epoch.is_some() {
            sharing.alone
        } else {
            needs_exclusive(gen, self.exposed)
        };
        // Start the case's worker before the case, so that it starts while
        // the other job's case holds the gate: the run takes it instead of
        // forking one (crate::live::prestart_worker; a worker faults
        // nothing of its own under any THP policy). A failure here leaves
        // the run to start its worker itself. Not in the case's wall time
        // (`start`, `secs`: while the case holds the gate), timed apart.
        let tw = Instant::now();
        if !opts.model_only {
            let _ = crate::live::prestart_worker(self.jobs > 1);
        }
        let prestart = tw.elapsed().as_secs_f64() * 1e3;
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let t0 = Instant::now();
        let mut waited = Duration::ZERO;
        let mut record = FuzzRecord {
            seed: opts.seed,
            case,
            case_seed: cs,
            shard: opts.shard.to_string(),
            arch: opts.arch.name().to_string(),
            ops: opts.ops as u64,
            verdict: Verdict::Error,
            start: wall,
            secs: 0.0,
            wait_secs: 0.0,
            worker,
            // Where the case really runs (the pinned CPU, when pinned).
            cpu: cpu.and_then(|_| current_cpu()).map(|c| c as u64),
            exclusive,
            epoch,
            summary: None,
            reproducer: None,
            scenario: None,
            weights: (!planned.weights.is_empty()).then(|| planned.weights.clone()),
            new_rules: planned
                .new_rules
                .iter()
                .map(|r| r.name().to_string())
                .collect(),
            timings: None,
        };
        let mut tm = CaseTimings {
            plan: planned.plan.as_secs_f64() * 1e3,
            prestart,
            ..CaseTimings::default()
        };
        let mut res = CaseResult {
            record: record.clone(),
            outcome: None,
            partial_reason: None,
            finding: None,
            error: None,
            coverage: planned.coverage.clone(),
            alone_why: if epoch.is_some() && !opts.model_only {
                sharing.why.names()
            } else {
                Vec::new()
            },
        };
        if opts.model_only {
            record.exclusive = false;
            return self.model_only_case(case, cs, &src, &planned, record, res, tp);
        }
        let body = (|| -> anyhow::Result<()> {
            let name = format!("fuzz-{:x}-{case}.ptl", opts.seed);
            let rep = {
                let w = Instant::now();
                let mut g = ticket.unwrap_or_else(|| {
                    self.gate.ticket(match epoch {
                        _ if exclusive => Want::Exclusive,
                        Some(e) => Want::Shared(e),
                        None => Want::Shared(u64::MAX),
                    })
                });
                let dopts = match epoch {
                    Some(e) if !exclusive => {
                        // The first case of a stretch of its epoch sets the
                        // epoch's policy (unless set), holding the gate
                        // exclusively; the others find it set.
                        g.wait(|| self.apply_epoch(e, &mut tm))?;
                        // Beside other jobs' cases: count its own steps.
                        if self.jobs > 1 {
                            &self.dopts_shared
                        } else {
                            &self.dopts
                        }
                    }
                    Some(e) => {
                        // Alone, but with its epoch's policy set: its own
                        // `thp` lines for it then write nothing.
                        g.wait(|| Ok::<(), anyhow::Error>(()))?;
                        self.apply_epoch(e, &mut tm)?;
                        // A swap area kept from the case before stays only
                        // for a case that makes the same one first thing.
                        drop_kept_swap(leading_swap(gen), &mut tm);
                        &self.dopts
                    }
                    None if exclusive => {
                        g.wait(|| Ok::<(), anyhow::Error>(()))?;
                        drop_kept_swap(leading_swap(gen), &mut tm);
                        &self.dopts
                    }
                    None => {
                        g.wait(|| Ok::<(), anyhow::Error>(()))?;
                        &self.dopts
                    }
                };
                let _g = g;
                // The tokens of a case beside others, after the gate.
                let _knob = match (exclusive, sharing.knobs) {
                    (false, KnobUse::Writes) => Some(Token::Write(
                        self.knob_token.write().unwrap_or_else(|e| e.into_inner()),
                    )),
                    (false, KnobUse::Reads) => Some(Token::Read(
                        self.knob_token.read().unwrap_or_else(|e| e.into_inner()),
                    )),
                    _ => None,
                };
                let _swap = (epoch.is_some() && !exclusive && sharing.swap_token()).then(|| {
                    let t = self.swap_token.lock().unwrap_or_else(|e| e.into_inner());
                    // A kept area stays only for a case that makes the same
                    // one first thing; one that pages out without an area
                    // of its own must see none.
                    drop_kept_swap(
                        match sharing.swap {
                            SwapUse::MakesArea => leading_swap(gen),
                            _ => None,
                        },
                        &mut tm,
                    );
                    t
                });
                waited += w.elapsed();
                // Setting the epoch's policy and removing a kept swap area
                // are not waiting.
                waited = waited.saturating_sub(Duration::from_secs_f64(
                    (tm.epoch_knobs + tm.end_restore) / 1e3,
                ));
                diff_source(&name, &src, dopts)?
            };
            tm.add_run(&rep.timing);
            let outcome = rep.outcome();
            res.outcome = Some(outcome);
            match outcome {
                DiffOutcome::Agree => record.verdict = Verdict::Agree,
                DiffOutcome::Partial => {
                    record.verdict = Verdict::Partial;
                    if let Some((_, msg)) = &rep.stopped {
                        res.partial_reason = Some(mask_numbers(msg));
                        record.summary = Some(msg.clone());
                    }
                }
                DiffOutcome::Diverge => {
                    send(Msg::Shrinking(case));
                    // Confirmation and shrinking run alone, whatever the
                    // first run shared: a divergence caused by another
                    // worker's case does not reproduce, and is flaky.
                    let w = Instant::now();
                    let mut _g = self.gate.ticket(Want::Exclusive);
                    _g.wait(|| Ok::<(), anyhow::Error>(()))?;
                    // From the machine's own policy, as the saved
                    // reproducer will run.
                    self.leave_epoch();
                    waited += w.elapsed();
                    let tc = Instant::now();
                    // The shrinker drops lines (the `swap` line too): no
                    // area is kept while it runs.
                    crate::knobs::set_swap_retention(false);
                    let f = self.confirm_and_shrink(case, cs, &name, &src, &rep);
                    crate::knobs::set_swap_retention(self.retain_swap);
                    let f = f?;
                    tm.confirm += tc.elapsed().as_secs_f64() * 1e3;
                    record.verdict = if f.flaky {
                        Verdict::Flaky
                    } else {
                        Verdict::Divergent
                    };
                    record.summary = Some(f.summary.clone());
                    record.reproducer = Some(f.path.clone());
                    record.scenario = Some(f.scenario.clone());
                    res.finding = Some(f);
                }
            }
            Ok(())
        })();
        if let Err(e) = body {
            record.verdict = Verdict::Error;
            record.summary = Some(format!("{e:#}"));
            res.error = Some(format!("{e:#}"));
        }
        record.wait_secs = waited.as_secs_f64();
        record.secs = (t0.elapsed().saturating_sub(waited)).as_secs_f64();
        record.timings = Some(tm);
        res.record = record;
        res
    }

    /// `--model-only`: the planner's model run is the case. A violated
    /// invariant or a panic is a finding (saved, not shrunk); a run that
    /// stopped early is partial; otherwise the case agrees.
    #[allow(clippy::too_many_arguments)]
    fn model_only_case(
        &self,
        case: u64,
        cs: u64,
        src: &str,
        planned: &Planned,
        mut record: FuzzRecord,
        mut res: CaseResult,
        t0: Instant,
    ) -> CaseResult {
        match &planned.model {
            Ok(None) => {
                record.verdict = Verdict::Agree;
                res.outcome = Some(DiffOutcome::Agree);
            }
            Ok(Some(why)) => {
                record.verdict = Verdict::Partial;
                record.summary = Some(why.clone());
                res.partial_reason = Some(mask_numbers(why));
                res.outcome = Some(DiffOutcome::Partial);
            }
            Err(bug) => {
                let opts = self.opts;
                let file = format!("model-fuzz-{:016x}-{case}.ptl", opts.seed);
                let path = opts.out_dir.join(file);
                let text = format!(
                    "# ptlab fuzz --model-only --seed {} (case {case})\n# {bug}\n# re-run with: \
                     ptlab run --check-invariants{} {}\n{src}",
                    opts.seed,
                    if opts.arch == ArchKind::X86_64 {
                        String::new()
                    } else {
                        format!(" --arch {}", opts.arch.name())
                    },
                    path.display()
                );
                match std::fs::create_dir_all(&opts.out_dir)
                    .and_then(|()| std::fs::write(&path, &text))
                {
                    Ok(()) => {
                        record.verdict = Verdict::Divergent;
                        record.summary = Some(bug.clone());
                        record.reproducer = Some(path.clone());
                        record.scenario = Some(text.clone());
                        res.outcome = Some(DiffOutcome::Diverge);
                        res.finding = Some(Finding {
                            case,
                            case_seed: cs,
                            path,
                            scenario: text,
                            report: bug.clone(),
                            summary: bug.clone(),
                            flaky: false,
                        });
                    }
                    Err(e) => {
                        let msg = format!("cannot save {}: {e}", path.display());
                        record.verdict = Verdict::Error;
                        record.summary = Some(msg.clone());
                        res.error = Some(msg);
                    }
                }
            }
        }
        record.secs = t0.elapsed().as_secs_f64();
        res.record = record;
        res
    }

    /// A divergent case: confirm it with a second run, shrink it if it
    /// reproduces, and save it.
    fn confirm_and_shrink(
        &self,
        case: u64,
        cs: u64,
        name: &str,
        src: &str,
        rep: &DiffReport,
    ) -> anyhow::Result<Finding> {
        let opts = self.opts;
        let dopts = &self.dopts;
        let kind = first_kind(rep);
        // Confirm: background activity (khugepaged, other processes
        // moving the global counters) can make a single run diverge.
        let confirmation = confirm(rep, || diff_source(name, src, dopts))?;
        let flaky = confirmation != Confirmation::Reproduced;
        let background = match &confirmation {
            Confirmation::Background(why) => Some(why.clone()),
            _ => None,
        };
        let shrunk = if flaky {
            src.to_string()
        } else {
            shrink(
                src,
                |cand| {
                    diff_source(name, cand, dopts)
                        .map(|r| r.outcome() == DiffOutcome::Diverge && first_kind(&r) == kind)
                        .unwrap_or(false)
                },
                opts.shrink_budget,
            )
        };
        // A background case is not run again: its own run says what it is.
        let final_rep = match background {
            Some(_) => None,
            None => Some(diff_source(name, &shrunk, dopts)?),
        };
        let report = match final_rep {
            Some(r) if r.outcome() == DiffOutcome::Diverge => r.render_text(),
            _ => rep.render_text(),
        };
        let mut summary = rep
            .first()
            .map(|d| format!("{}: {}", d.kind, d.summary))
            .unwrap_or_default();
        if let Some(why) = &background {
            let _ = write!(summary, " [background: {why}]");
        }
        std::fs::create_dir_all(&opts.out_dir)?;
        let file = format!(
            "{}fuzz-{:016x}-{case}.ptl",
            if flaky { "flaky-" } else { "" },
            opts.seed
        );
        let path = opts.out_dir.join(file);
        let mut text = String::new();
        let arch = if opts.arch == ArchKind::X86_64 {
            String::new()
        } else {
            format!(" --arch {}", opts.arch.name())
        };
        let _ = writeln!(
            text,
            "# ptlab fuzz --seed {}{arch} (case {case}){}",
            opts.seed,
            match &background {
                Some(_) => " — FLAKY: background (khugepaged), not re-run",
                None if flaky => " — FLAKY: did not reproduce on a second run",
                None => "",
            }
        );
        let _ = writeln!(text, "# first divergence: {summary}");
        let _ = writeln!(text, "# re-run with: ptlab diff{arch} {}", path.display());
        text.push_str(&shrunk);
        std::fs::write(&path, &text)
            .map_err(|e| anyhow::anyhow!("cannot save {}: {e}", path.display()))?;
        Ok(Finding {
            case,
            case_seed: cs,
            path,
            scenario: text,
            report,
            summary,
            flaky,
        })
    }
}

/// Remove the swap area kept from the case before unless it is `keep`
/// ([`crate::knobs::drop_retained_swap_unless`]), timed as the case's
/// swapoff (`end_restore`): before issue 16's eighth round this swapoff
/// was counted as waiting for the gate.
fn drop_kept_swap(keep: Option<(u64, ptlab_model::swap::SwapKind)>, tm: &mut CaseTimings) {
    let t0 = Instant::now();
    crate::knobs::drop_retained_swap_unless(keep);
    tm.end_restore += t0.elapsed().as_secs_f64() * 1e3;
}

/// A held knob token (its guard only has to live).
#[allow(dead_code)]
enum Token<'a> {
    Write(std::sync::RwLockWriteGuard<'a, ()>),
    Read(std::sync::RwLockReadGuard<'a, ()>),
}

/// The results file of a campaign in `out_dir`.
pub fn results_file_name(seed: u64, shard: Shard) -> String {
    if shard == Shard::WHOLE {
        format!("results-{seed}.jsonl")
    } else {
        format!(
            "results-{seed}-shard-{}-of-{}.jsonl",
            shard.index, shard.count
        )
    }
}

/// Run the fuzzer.
///
/// With `jobs` > 1 the cases of this shard are handed out one at a time to
/// `jobs` worker threads, each pinned to a CPU of its own (so the worker
/// processes it forks, which inherit the affinity, fault and drain on one
/// CPU, as with one job). The THP knobs, swap and the THP counters are
/// global, so the live part of every case runs under a gate: cases that
/// write a knob, make a swap file or can move the counters (see
/// [`needs_exclusive`]) hold it exclusively, the others shared. The
/// machine-wide knob lock is taken once for the whole campaign and shared
/// by its workers. A divergence is always confirmed and shrunk alone.
pub fn fuzz(
    opts: &FuzzOptions,
    on_event: &mut dyn FnMut(&FuzzEvent),
) -> anyhow::Result<FuzzSummary> {
    // The model alone runs in this thread: its cases are planned one after
    // the other anyway.
    let jobs = if opts.model_only { 1 } else { opts.jobs.max(1) };
    let cpus = if jobs > 1 {
        cpus_for_jobs(jobs)?
    } else {
        Vec::new()
    };
    let set = OpSet::probe_arch(opts.arch);
    let mut results =
        match &opts.results {
            Some(p) => Some(std::fs::File::create(p).map_err(|e| {
                anyhow::anyhow!("cannot create the results file {}: {e}", p.display())
            })?),
            None => None,
        };
    // One lock for the campaign: other live runs wait for all of it, and
    // the workers' cases do not take it one by one. A model-only run
    // touches no knob.
    let lock = if opts.model_only {
        None
    } else {
        Some(std::sync::Arc::new(
            crate::knobs::acquire_or_wait("fuzz")
                .map_err(|e| anyhow::anyhow!("{}: {e}", crate::knobs::lock_path().display()))?,
        ))
    };
    // The time budget and the rate count from here: waiting for another
    // live run to end is not fuzzing.
    let start = Instant::now();
    let camp = Campaign {
        opts,
        dopts: opts_for_fuzz(&opts.limits, opts.arch),
        start,
        next: Default::default(),
        stop: Default::default(),
        gate: Default::default(),
        exposed: !opts.model_only && baseline_exposes_sizes(),
        machine_knobs: if opts.model_only {
            Vec::new()
        } else {
            machine_knobs()
        },
        planner: std::sync::Mutex::new(Planner::new(opts, set)),
        epochs: (opts.epoch > 0 && !opts.model_only).then(|| Epochs {
            k: opts.epoch,
            queue: Default::default(),
            knobs: Default::default(),
        }),
        cover: std::sync::Mutex::new(if opts.model_only || !crate::is_root() {
            None
        } else {
            crate::knobs::KnobSession::covering_all().ok()
        }),
        dopts_shared: DiffOptions {
            attribute_counters: true,
            ..opts_for_fuzz(&opts.limits, opts.arch)
        },
        jobs,
        retain_swap: false,
        knob_token: Default::default(),
        swap_token: Default::default(),
    };
    let mut camp = camp;
    camp.retain_swap = camp.epochs.is_some()
        && camp
            .cover
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
    crate::knobs::set_swap_retention(camp.retain_swap);
    let mut sum = FuzzSummary {
        seed: opts.seed,
        ops: set,
        cpus: cpus.clone(),
        ..Default::default()
    };
    let mut write_err: Option<anyhow::Error> = None;
    let mut handle = |msg: Msg, sum: &mut FuzzSummary| match msg {
        Msg::Shrinking(case) => on_event(&FuzzEvent::Shrinking { case }),
        Msg::Done(r) => {
            if let Some(w) = results.as_mut() {
                use std::io::Write as _;
                // One write per record: a campaign killed meanwhile leaves
                // whole lines and at most one incomplete last line.
                let mut line = r.record.to_line();
                line.push('\n');
                if let Err(e) = w.write_all(line.as_bytes()) {
                    write_err.get_or_insert(anyhow::anyhow!(
                        "cannot write the results file {}: {e}",
                        opts.results.as_deref().unwrap_or(Path::new("")).display()
                    ));
                    camp.stop.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            let case = r.record.case;
            sum.exclusive += u64::from(r.record.exclusive);
            for why in &r.alone_why {
                *sum.alone_why.entry(why).or_default() += 1;
            }
            if let Some(t) = &r.record.timings {
                let ps = &mut sum.timings[usize::from(r.record.exclusive)];
                ps.cases += 1;
                ps.secs += r.record.secs;
                ps.wait_secs += r.record.wait_secs;
                ps.phases.add(t);
            }
            sum.coverage.add(&r.coverage);
            if let Some(e) = &r.error {
                on_event(&FuzzEvent::Error { case, message: e });
                sum.errors.push((case, e.clone()));
                return;
            }
            sum.cases += 1;
            match r.outcome {
                Some(DiffOutcome::Agree) => sum.agree += 1,
                Some(DiffOutcome::Partial) => {
                    sum.partial += 1;
                    if let Some(why) = r.partial_reason {
                        *sum.partial_reasons.entry(why).or_default() += 1;
                    }
                }
                _ => {}
            }
            if let Some(f) = r.finding {
                on_event(&FuzzEvent::Found(&f));
                sum.findings.push(f);
            }
            if let Some(outcome) = r.outcome {
                let rules = sum.coverage.hit();
                on_event(&FuzzEvent::Case {
                    case,
                    outcome,
                    rules,
                });
            }
        }
    };
    if jobs == 1 {
        let _shared = lock.clone().map(crate::knobs::share_lock_in_this_thread);
        camp.worker(0, None, &mut |m| handle(m, &mut sum));
    } else {
        let (tx, rx) = std::sync::mpsc::channel::<Msg>();
        std::thread::scope(|s| -> anyhow::Result<()> {
            let mut started = Vec::new();
            for (w, &cpu) in cpus.iter().enumerate() {
                let tx = tx.clone();
                let camp = &camp;
                let lock = lock.clone();
                let h = std::thread::Builder::new()
                    .name(format!("fuzz-{w}"))
                    .spawn_scoped(s, move || -> anyhow::Result<()> {
                        pin_this_thread(cpu)
                            .map_err(|e| anyhow::anyhow!("cannot pin job {w} to CPU {cpu}: {e}"))?;
                        let _shared = lock.map(crate::knobs::share_lock_in_this_thread);
                        camp.worker(w as u64, Some(cpu), &mut |m| {
                            let _ = tx.send(m);
                        });
                        Ok(())
                    })?;
                started.push(h);
            }
            drop(tx);
            for m in rx {
                handle(m, &mut sum);
            }
            for h in started {
                match h.join() {
                    Ok(r) => r?,
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
            Ok(())
        })?;
    }
    if let Some(e) = write_err {
        return Err(e);
    }
    // A kept swap area goes now (the cover's end would remove it too).
    crate::knobs::set_swap_retention(false);
    sum.findings.sort_by_key(|f| f.case);
    sum.elapsed = start.elapsed();
    Ok(sum)
}

/// The summary of one or more results files (`ptlab fuzz --merge`).
#[derive(Clone, Debug, Default)]
pub struct MergeSummary {
    /// Files read, and the lines in them that were records.
    pub files: Vec<PathBuf>,
    pub lines: u64,
    /// Distinct cases (by seed and case index).
    pub cases: u64,
    /// Records of a case seen before (another shard or file ran it too).
    pub duplicates: u64,
    /// Duplicates whose verdict differed from the first record's (kept).
    pub conflicts: Vec<String>,
    pub by_verdict: BTreeMap<Verdict, u64>,
    /// Seeds seen (one campaign has one).
    pub seeds: std::collections::BTreeSet<u64>,
    /// Shards seen (`K/N`).
    pub shards: std::collections::BTreeSet<String>,
    /// First start to last end over every record, and the cases' own time.
    pub wall_secs: f64,
    pub case_secs: f64,
    /// Divergent, flaky and error records, by seed and case.
    pub notable: Vec<FuzzRecord>,
    /// Files whose incomplete last line was left out (a killed campaign).
    pub truncated: Vec<String>,
}

impl MergeSummary {
    /// Distinct cases per second of wall time (first start to last end).
    pub fn rate(&self) -> f64 {
        if self.wall_secs > 0.0 {
            self.cases as f64 / self.wall_secs
        } else {
            0.0
        }
    }

    pub fn count(&self, v: Verdict) -> u64 {
        self.by_verdict.get(&v).copied().unwrap_or(0)
    }

    /// Text form.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "merged {} file{} ({} records, {} duplicate{}): {} scenarios of seed{} {}, shards {}",
            self.files.len(),
            if self.files.len() == 1 { "" } else { "s" },
            self.lines,
            self.duplicates,
            if self.duplicates == 1 { "" } else { "s" },
            self.cases,
            if self.seeds.len() == 1 { "" } else { "s" },
            self.seeds
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.shards.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        let _ = writeln!(
            s,
            "verdicts: {}",
            Verdict::ALL
                .iter()
                .map(|v| format!("{} {}", self.count(*v), v.name()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            s,
            "time: {:.1} s from the first start to the last end, {:.1} s in cases: {:.2} \
             scenarios/s overall",
            self.wall_secs,
            self.case_secs,
            self.rate()
        );
        for c in self.conflicts.iter().chain(&self.truncated) {
            let _ = writeln!(s, "note: {c}");
        }
        for r in &self.notable {
            let _ = writeln!(
                s,
                "{} seed {} case {} (shard {}): {}",
                r.verdict.name(),
                r.seed,
                r.case,
                r.shard,
                r.summary.as_deref().unwrap_or("")
            );
            if let Some(p) = &r.reproducer {
                let _ = writeln!(s, "  reproducer: {}", p.display());
            }
        }
        s
    }

    /// JSON form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "fuzz-merge",
            "files": self.files,
            "records": self.lines,
            "cases": self.cases,
            "duplicates": self.duplicates,
            "conflicts": self.conflicts,
            "truncated": self.truncated,
            "verdicts": Verdict::ALL.iter().map(|v| (v.name().to_string(), self.count(*v))).collect::<BTreeMap<_, _>>(),
            "seeds": self.seeds,
            "shards": self.shards,
            "wall_secs": self.wall_secs,
            "case_secs": self.case_secs,
            "scenarios_per_second": self.rate(),
            "divergences": self.notable,
        })
    }
}

/// The records of one results file's text (`name` for messages). Blank
/// lines are skipped; anything else that is not a record is an error
/// naming the file and line.
pub fn parse_results(name: &str, text: &str) -> anyhow::Result<Vec<FuzzRecord>> {
    parse_results_file(name, text).map(|(v, _)| v)
}

/// [`parse_results`], and a note when the file's last line was left out:
/// a last line without its newline that is not a whole record is what a
/// campaign killed while writing it leaves (each record is written and
/// flushed as its case ends, so every line before it is whole). Any other
/// line that is not a record is an error.
pub fn parse_results_file(
    name: &str,
    text: &str,
) -> anyhow::Result<(Vec<FuzzRecord>, Option<String>)> {
    let mut v = Vec::new();
    let unterminated = !text.is_empty() && !text.ends_with('\n');
    let n = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if unterminated && i + 1 == n {
            if let Ok(r) = serde_json::from_str::<FuzzRecord>(line) {
                v.push(r);
                return Ok((v, None));
            }
            return Ok((
                v,
                Some(format!(
                    "{name}:{}: the last line is incomplete ({} bytes, no newline: the campaign                      was killed while writing it); left out",
                    i + 1,
                    line.len()
                )),
            ));
        }
        let r: FuzzRecord = serde_json::from_str(line).map_err(|e| {
            let shown: String = line.chars().take(80).collect();
            anyhow::anyhow!(
                "{name}:{}: not a ptlab fuzz result line ({e}): {shown}{}",
                i + 1,
                if line.chars().count() > 80 { "..." } else { "" }
            )
        })?;
        v.push(r);
    }
    Ok((v, None))
}

/// Merge records (from files in order): one per (seed, case), the first
/// kept.
pub fn merge_records(
    files: Vec<PathBuf>,
    records: impl IntoIterator<Item = FuzzRecord>,
) -> MergeSummary {
    let mut m = MergeSummary {
        files,
        ..Default::default()
    };
    let mut seen: BTreeMap<(u64, u64), Verdict> = BTreeMap::new();
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for r in records {
        m.lines += 1;
        if let Some(v) = seen.get(&(r.seed, r.case)) {
            m.duplicates += 1;
            if *v != r.verdict {
                m.conflicts.push(format!(
                    "seed {} case {} is {} in one record and {} in another (shard {}); the \
                     first is counted",
                    r.seed,
                    r.case,
                    v.name(),
                    r.verdict.name(),
                    r.shard
                ));
            }
            continue;
        }
        seen.insert((r.seed, r.case), r.verdict);
        m.cases += 1;
        *m.by_verdict.entry(r.verdict).or_default() += 1;
        m.seeds.insert(r.seed);
        m.shards.insert(r.shard.clone());
        m.case_secs += r.secs;
        first = first.min(r.start);
        last = last.max(r.start + r.secs + r.wait_secs);
        if matches!(
            r.verdict,
            Verdict::Divergent | Verdict::Flaky | Verdict::Error
        ) {
            m.notable.push(r);
        }
    }
    if m.cases > 0 {
        m.wall_secs = (last - first).max(0.0);
    }
    m.notable.sort_by_key(|r| (r.seed, r.case));
    m
}

/// Read and merge results files.
pub fn merge_files(paths: &[PathBuf]) -> anyhow::Result<MergeSummary> {
    let mut all = Vec::new();
    let mut truncated = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))?;
        let (v, note) = parse_results_file(&p.display().to_string(), &text)?;
        all.extend(v);
        truncated.extend(note);
    }
    let mut m = merge_records(paths.to_vec(), all);
    m.truncated = truncated;
    Ok(m)
}

/// A seed from the clock (for runs without `--seed`).
pub fn time_seed() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Rng::new(d.as_nanos() as u64 ^ u64::from(std::process::id())).next_u64()
}

/// Save directory helper for callers that want a default.
pub fn default_out_dir() -> &'static Path {
    Path::new("fuzz-failures")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report whose first divergence is a counter step after line
    /// `line`, with `khugepaged` collapses since its run started.
    fn report_with(line: u32, khugepaged: u64) -> DiffReport {
        DiffReport {
            file: "c.ptl".into(),
            run: Default::default(),
            divergences: vec![crate::diff::Divergence {
                line,
                stmt: "mprotect p 2M r".into(),
                loops: Vec::new(),
                process: String::new(),
                kind: "stats".into(),
                summary: "THP counters moved differently in this step: \
                          2048kB/nr_anon, vmstat/thp_collapse_alloc"
                    .into(),
                live: vec!["vmstat/thp_collapse_alloc +2".into()],
                model: vec!["vmstat/thp_collapse_alloc +0".into()],
                detail: Vec::new(),
                step: u64::from(line),
                khugepaged,
            }],
            more_divergences: 0,
            stopped: None,
            unsupported_by_model: false,
            notes: Vec::new(),
            counter_orders_reached: 0x3fc,
            comparisons: 1,
            caps: None,
            timing: Default::default(),
        }
    }

    /// A first run whose divergence came after a khugepaged collapse is
    /// background, decided without a confirmation run: the same on every
    /// run of the case, whether or not khugepaged would have collapsed
    /// again in a confirmation (before, that run decided: case 85 of
    /// `--seed 1` was divergent once and flaky the next time).
    #[test]
    fn a_khugepaged_collapse_before_the_first_divergence_is_background_on_every_run() {
        let first = report_with(12, 2);
        for again_collapses in [0, 2] {
            let mut reruns = 0;
            let c = confirm(&first, || {
                reruns += 1;
                Ok::<_, ()>(report_with(12, again_collapses))
            })
            .unwrap();
            assert!(
                matches!(&c, Confirmation::Background(why) if why.contains("+2")),
                "{c:?}"
            );
            assert_eq!(reruns, 0, "a background case is not re-run");
        }
    }

    #[test]
    fn confirmation_without_khugepaged_compares_first_divergences() {
        let first = report_with(12, 0);
        let same = confirm(&first, || Ok::<_, ()>(report_with(12, 0))).unwrap();
        assert_eq!(same, Confirmation::Reproduced);
        let mut elsewhere = report_with(13, 0);
        elsewhere.divergences[0].stmt = "munmap p 4K".into();
        let other = confirm(&first, || Ok::<_, ()>(elsewhere.clone())).unwrap();
        assert_eq!(other, Confirmation::Flaky);
        let mut none = first.clone();
        none.divergences.clear();
        let gone = confirm(&first, || Ok::<_, ()>(none.clone())).unwrap();
        assert_eq!(gone, Confirmation::Flaky);
    }

    /// A confirmation run that khugepaged disturbed is made again; two
    /// disturbed ones leave the case flaky (not confirmed).
    #[test]
    fn a_confirmation_disturbed_by_khugepaged_is_repeated_once() {
        let first = report_with(12, 0);
        let mut runs = vec![report_with(12, 0), report_with(12, 3)];
        let c = confirm(&first, || Ok::<_, ()>(runs.pop().unwrap())).unwrap();
        assert_eq!(c, Confirmation::Reproduced);
        assert!(runs.is_empty());
        let mut n = 0;
        let c = confirm(&first, || {
            n += 1;
            Ok::<_, ()>(report_with(12, 1))
        })
        .unwrap();
        assert_eq!((c, n), (Confirmation::Flaky, 2));
    }

    #[test]
    fn generation_is_reproducible_and_parses() {
        let set = ALL_OPS;
        for n in 0..200 {
            let a = generate(case_seed(7, n), 30, set);
            let b = generate(case_seed(7, n), 30, set);
            assert_eq!(a, b);
            ptlab_scenario::parse("g.ptl", &a).unwrap_or_else(|e| panic!("{e}\n{a}"));
        }
        assert_ne!(
            generate(case_seed(7, 0), 30, set),
            generate(case_seed(8, 0), 30, set)
        );
    }

    const ALL_OPS: OpSet = OpSet {
        fork: true,
        mprotect: true,
        mremap: true,
        uffd: true,
        guard_lock_seal: true,
        swap: true,
    };

    /// Records every call; answers 0.
    #[derive(Default)]
    struct Recorder(Vec<(String, Call)>);

    impl Backend for Recorder {
        fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
            self.0.push((proc.to_string(), call.clone()));
            Ok(0)
        }
        fn observe(&mut self, _: &str) -> Result<ptlab_model::Observation, BackendError> {
            Ok(Default::default())
        }
        fn observe_summary(&mut self, _: &str) -> Result<ptlab_model::Observation, BackendError> {
            Ok(Default::default())
        }
        fn observe_pages(
            &mut self,
            _: &str,
            _: u64,
            _: u64,
        ) -> Result<ptlab_model::observe::PageRuns, BackendError> {
            Ok(Default::default())
        }
        fn read_bytes(
            &mut self,
            _: &str,
            _: u64,
            len: u64,
        ) -> Result<Vec<Option<u8>>, BackendError> {
            Ok(vec![None; len as usize])
        }
        fn check_invariants(&mut self) -> Result<(), Vec<String>> {
            Ok(())
        }
        fn before_statement(&mut self, _: u32, _: &str, _: &[(u32, u64)]) {}
        fn after_statement(&mut self) -> Result<(), Vec<String>> {
            Ok(())
        }
        fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
            None
        }
    }

    /// Parsing and running the printed statement of `call` in `proc`
    /// issues exactly `call`.
    fn round_trip(proc: &str, call: &Call) {
        let line = ptlab_scenario::call_to_ptl(proc, None, call, &ptlab_scenario::fmt_addr);
        // A process other than main must have been forked (the parser
        // checks the names).
        let src = if proc == "main" {
            line.clone()
        } else {
            format!("fork {proc}\n{line}")
        };
        let script =
            ptlab_scenario::parse("rt.ptl", &src).unwrap_or_else(|e| panic!("{line}: {e}"));
        let mut rec = Recorder::default();
        let report = ptlab_scenario::run(&script, &mut rec, &Default::default());
        assert!(report.passed(), "{line}: {:?}", report.failures);
        let want = if call.acts_on_process() { proc } else { "main" };
        assert_eq!(
            rec.0.last(),
            Some(&(want.to_string(), call.clone())),
            "{line}"
        );
    }

    #[test]
    fn printed_calls_parse_back_to_the_same_call() {
        let set = ALL_OPS;
        let mut seen = std::collections::BTreeSet::new();
        for n in 0..300 {
            for l in generate_calls(case_seed(11, n), 40, set).lines {
                if let GenLine::Call { proc, call, .. } = l {
                    seen.insert(call.name());
                    round_trip(&proc, &call);
                }
            }
        }
        assert!(
            seen.len() >= 20,
            "the generator covers most calls: {seen:?}"
        );
        // What the generator does not make.
        let h = || "h".to_string();
        for (proc, call) in [
            ("main", Call::PrctlThp(PrctlThp::Get)),
            (
                "main",
                Call::FillBytes {
                    addr: 0x7f00_0000_0064,
                    len: 4000,
                    byte: 0xaa,
                },
            ),
            (
                "c1",
                Call::FillBytes {
                    addr: 0x7f00_0000_1000,
                    len: 8192,
                    byte: 0,
                },
            ),
            (
                "main",
                Call::FillVmas {
                    addr: 0x1000_0000,
                    headroom: 3,
                },
            ),
            (
                "c1",
                Call::UffdCreate {
                    handle: h(),
                    api: false,
                    flags: None,
                },
            ),
            (
                "main",
                Call::UffdCreate {
                    handle: "main".into(),
                    api: true,
                    flags: Some(0x80801),
                },
            ),
            (
                "c1",
                Call::UffdCreate {
                    handle: h(),
                    api: false,
                    flags: Some(0),
                },
            ),
            (
                "main",
                Call::UffdApi {
                    handle: h(),
                    api: 0xaa,
                    features: 0x40,
                },
            ),
            (
                "main",
                Call::UffdCopy {
                    handle: h(),
                    dst: 0x2000,
                    src: 0x9000,
                    len: 8192,
                    tag: None,
                    mode: UffdCopyMode::empty(),
                },
            ),
            // Raw values: known bits as words, the rest as numbers.
            (
                "main",
                Call::UffdCopy {
                    handle: h(),
                    dst: 0x2000,
                    src: 0x9000,
                    len: 8192,
                    tag: Some(7),
                    mode: UffdCopyMode::WP | UffdCopyMode::DONTWAKE,
                },
            ),
            (
                "main",
                Call::UffdCopy {
                    handle: "main".into(),
                    dst: 0x2000,
                    src: 0x9000,
                    len: 4096,
                    tag: None,
                    mode: UffdCopyMode::from_bits_retain(0x8001),
                },
            ),
            (
                "main",
                Call::UffdZeropage {
                    handle: h(),
                    dst: 0x2000,
                    len: 4096,
                    mode: UffdZeropageMode::from_bits_retain(1 << 63 | 1),
                },
            ),
            (
                "main",
                Call::UffdZeropage {
                    handle: h(),
                    dst: 0x2000,
                    len: 4096,
                    mode: UffdZeropageMode::from_bits_retain(2),
                },
            ),
            (
                "main",
                Call::UffdMove {
                    handle: h(),
                    dst: 0x2000,
                    src: 0x9000,
                    len: 4096,
                    mode: UffdMoveMode::from_bits_retain(4 | 1),
                },
            ),
            (
                "main",
                Call::UffdRegister {
                    handle: h(),
                    addr: 0x2000,
                    len: 4096,
                    mode: UffdRegisterMode::empty(),
                },
            ),
            (
                "main",
                Call::UffdRegister {
                    handle: h(),
                    addr: 0x2000,
                    len: 4096,
                    mode: UffdRegisterMode::MINOR | UffdRegisterMode::MISSING,
                },
            ),
            (
                "main",
                Call::UffdRegister {
                    handle: h(),
                    addr: 0x2000,
                    len: 4096,
                    mode: UffdRegisterMode::from_bits_retain(0x18 | 2),
                },
            ),
            (
                "main",
                Call::UffdRegister {
                    handle: h(),
                    addr: 0x2000,
                    len: 4096,
                    mode: UffdRegisterMode::from_bits_retain(0x10),
                },
            ),
            (
                "main",
                Call::Madvise {
                    addr: 0x2000,
                    len: 4096,
                    advice: Advice::Other(7),
                },
            ),
            (
                "main",
                Call::Madvise {
                    addr: 0x2000,
                    len: 4096,
                    advice: Advice::Other(-3),
                },
            ),
            (
                "main",
                Call::Madvise {
                    addr: 0x2000,
                    len: 4096,
                    advice: Advice::Other(i32::MIN),
                },
            ),
            (
                "main",
                Call::Mremap {
                    addr: 0x2000,
                    old_len: 4096,
                    new_len: 8192,
                    flags: MremapFlags::from_bits_retain(0x10 | 1),
                    new_addr: 0,
                },
            ),
            (
                "main",
                Call::Mremap {
                    addr: 0x2000,
                    old_len: 4096,
                    new_len: 8192,
                    flags: MremapFlags::from_bits_retain(1 << 40 | 2),
                    new_addr: 0x40_0000,
                },
            ),
            (
                "main",
                Call::Mprotect {
                    addr: 0x2000,
                    len: 4096,
                    prot: Prot::from_bits_retain(0x8 | 1),
                },
            ),
            (
                "main",
                Call::Mprotect {
                    addr: 0x2000,
                    len: 4096,
                    prot: Prot::from_bits_retain(0x0100_0000),
                },
            ),
            (
                "main",
                Call::Mmap {
                    addr: 0,
                    len: 4096,
                    prot: Prot::from_bits_retain(0x10 | 3),
                    flags: MapFlags::from_bits_retain(0x22 | 0x20000),
                },
            ),
            (
                "main",
                Call::Mmap {
                    addr: 0x7000,
                    len: 4096,
                    prot: Prot::READ,
                    flags: MapFlags::from_bits_retain(0x21 | 0x10 | 0x100000 | 0x8000),
                },
            ),
            (
                "main",
                Call::Mmap {
                    addr: 0,
                    len: 4096,
                    prot: Prot::empty(),
                    flags: MapFlags::from_bits_retain(0),
                },
            ),
            (
                "main",
                Call::UffdMove {
                    handle: h(),
                    dst: 0x2000,
                    src: 0x9000,
                    len: 4096,
                    mode: UffdMoveMode::DONTWAKE | UffdMoveMode::ALLOW_SRC_HOLES,
                },
            ),
            (
                "main",
                Call::UffdRegister {
                    handle: h(),
                    addr: 0x2000,
                    len: 4096,
                    mode: UffdRegisterMode::WP,
                },
            ),
            (
                "main",
                Call::Mremap {
                    addr: 0x2000,
                    old_len: 4096,
                    new_len: 4096,
                    flags: MremapFlags::MAYMOVE | MremapFlags::FIXED | MremapFlags::DONTUNMAP,
                    new_addr: 0x40_0000,
                },
            ),
            (
                "main",
                Call::Mmap {
                    addr: 0x7000,
                    len: 0x1234,
                    prot: Prot::WRITE | Prot::EXEC,
                    flags: MapFlags::PRIVATE
                        | MapFlags::ANONYMOUS
                        | MapFlags::FIXED
                        | MapFlags::NORESERVE
                        | MapFlags::POPULATE
                        | MapFlags::LOCKED,
                },
            ),
            (
                "main",
                Call::Mlock {
                    addr: 0x2000,
                    len: 4096,
                    onfault: true,
                    flags: 6,
                },
            ),
            (
                "main",
                Call::Mlock {
                    addr: 0x2000,
                    len: 4096,
                    onfault: false,
                    flags: 1 << 32,
                },
            ),
            (
                "main",
                Call::Mseal {
                    addr: 0x2000,
                    len: 4096,
                    flags: 3,
                },
            ),
            (
                "main",
                Call::PrctlThp(PrctlThp::Set {
                    disable: 1,
                    flags: 2 | 1 << 5,
                }),
            ),
            (
                "main",
                Call::PrctlThp(PrctlThp::Set {
                    disable: 0,
                    flags: 1 << 5,
                }),
            ),
            ("main", Call::SetUseZeroPage { on: false }),
            (
                "main",
                Call::SetSwap {
                    bytes: 0,
                    kind: Default::default(),
                },
            ),
            (
                "main",
                Call::SetBefore {
                    set: ptlab_model::Before::empty(),
                },
            ),
            (
                "main",
                Call::SetBefore {
                    set: ptlab_model::Before::FORK_PTE_BATCH | ptlab_model::Before::UFFD_MOVE_BATCH,
                },
            ),
        ] {
            round_trip(proc, &call);
        }
    }

    /// The call one line of `.ptl` makes (in `main`).
    fn call_of(line: &str) -> Call {
        let script = ptlab_scenario::parse("t.ptl", line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let mut rec = Recorder::default();
        let report = ptlab_scenario::run(&script, &mut rec, &Default::default());
        assert!(report.passed(), "{line}: {:?}", report.failures);
        rec.0.last().expect("a call").1.clone()
    }

    /// The raw forms: words and raw values or'ed, a raw value alone, and
    /// the base of `mmap ... flags`.
    #[test]
    fn raw_values_parse_to_the_bits_written() {
        let h = || "main".to_string();
        let cases = [
            (
                "uffd register 0x2000 4K mode 3",
                Call::UffdRegister {
                    handle: h(),
                    addr: 0x2000,
                    len: 4096,
                    mode: UffdRegisterMode::MISSING | UffdRegisterMode::WP,
                },
            ),
            (
                "uffd register 0x2000 4K wp+minor mode 1 << 40",
                Call::UffdRegister {
                    handle: h(),
                    addr: 0x2000,
                    len: 4096,
                    mode: UffdRegisterMode::from_bits_retain(2 | 4 | 1 << 40),
                },
            ),
            (
                "uffd copy 0x2000 0x9000 4K mode 1 dontwake tag=3 wp",
                Call::UffdCopy {
                    handle: h(),
                    dst: 0x2000,
                    src: 0x9000,
                    len: 4096,
                    tag: Some(3),
                    mode: UffdCopyMode::DONTWAKE | UffdCopyMode::WP,
                },
            ),
            (
                "uffd zeropage 0x2000 4K mode 6",
                Call::UffdZeropage {
                    handle: h(),
                    dst: 0x2000,
                    len: 4096,
                    mode: UffdZeropageMode::from_bits_retain(6),
                },
            ),
            (
                "uffd move 0x2000 0x9000 4K mode 2 allow_src_holes",
                Call::UffdMove {
                    handle: h(),
                    dst: 0x2000,
                    src: 0x9000,
                    len: 4096,
                    mode: UffdMoveMode::ALLOW_SRC_HOLES,
                },
            ),
            (
                "madvise 0x2000 4K advice 0x1_0000_0004",
                Call::Madvise {
                    addr: 0x2000,
                    len: 4096,
                    advice: Advice::DontNeed,
                },
            ),
            (
                "madvise 0x2000 4K advice -2",
                Call::Madvise {
                    addr: 0x2000,
                    len: 4096,
                    advice: Advice::Other(-2),
                },
            ),
            (
                "mremap 0x2000 4K 8K maymove flags 1 | 0x10",
                Call::Mremap {
                    addr: 0x2000,
                    old_len: 4096,
                    new_len: 8192,
                    flags: MremapFlags::from_bits_retain(0x11),
                    new_addr: 0,
                },
            ),
            (
                "mprotect 0x2000 4K (1 << 24) | 1",
                Call::Mprotect {
                    addr: 0x2000,
                    len: 4096,
                    prot: Prot::from_bits_retain(0x100_0001),
                },
            ),
            (
                "mmap 4K at 0x7000 noreplace populate flags 0x21 prot 0x8 | 1",
                Call::Mmap {
                    addr: 0x7000,
                    len: 4096,
                    prot: Prot::from_bits_retain(9),
                    flags: MapFlags::from_bits_retain(0x21 | 0x10_0000 | 0x8000),
                },
            ),
        ];
        for (line, want) in cases {
            assert_eq!(call_of(line), want, "{line}");
        }
        for bad in [
            "uffd register 0x2000 4K mode 1 mode 2",
            "uffd copy 0x2000 0x9000 4K wp wp",
            "uffd move 0x2000 0x9000 4K mode 1 mode 1",
            "mremap 0x2000 4K 8K flags 1 flags 2",
            "madvise 0x2000 4K advice",
            "mmap 4K flags 1 flags 2",
        ] {
            assert!(ptlab_scenario::parse("t.ptl", bad).is_err(), "{bad}");
        }
        // A prot value that does not fit the 32-bit argument type is a
        // runtime error, not a silent cut.
        let script = ptlab_scenario::parse("t.ptl", "mprotect 0x2000 4K 1 << 32").unwrap();
        let report = ptlab_scenario::run(&script, &mut Recorder::default(), &Default::default());
        assert!(!report.passed());
    }

    /// Raw values change a few calls in place and nothing else: the other
    /// lines are what the generator made before raw values existed.
    #[test]
    fn raw_values_change_only_their_own_lines() {
        let mut changed = 0;
        let mut total = 0;
        let mut kinds = std::collections::BTreeSet::new();
        for n in 0..400 {
            let seed = case_seed(7, n);
            let plain = generate_plain(seed, 40, ALL_OPS, &GenWeights::default());
            let mut raw = plain.clone();
            raw_values(&mut raw, seed);
            assert_eq!(plain.lines.len(), raw.lines.len());
            for (a, b) in plain.lines.iter().zip(&raw.lines) {
                total += 1;
                if let (GenLine::Call { call: x, .. }, GenLine::Call { call: y, .. }) = (a, b) {
                    if x != y {
                        assert_eq!(x.name(), y.name(), "{x:?} -> {y:?}");
                        changed += 1;
                        kinds.insert(y.name());
                    }
                }
            }
        }
        assert!(
            changed > 0 && changed * 100 < total * 3,
            "{changed} of {total}"
        );
        assert!(kinds.len() >= 6, "{kinds:?}");
    }

    /// Byte patterns only add lines (and re-source some UFFDIO_COPYs):
    /// every line made before is there, in order; about half the cases
    /// have fills, at unaligned addresses and lengths, some across a page,
    /// 64 KiB or 2 MiB boundary, some before a UFFDIO_MOVE; some copies
    /// come from filled memory at an unaligned address; the text parses.
    #[test]
    fn fills_are_added_on_their_own_stream() {
        let (mut cases_with, mut fills, mut unaligned, mut crossing) = (0, 0, 0, 0);
        let (mut big_cross, mut copies, mut before_move) = (0, 0, 0);
        let mut bytes = std::collections::BTreeSet::new();
        for n in 0..400 {
            let seed = case_seed(7, n);
            let mut before = generate_plain(seed, 40, ALL_OPS, &GenWeights::default());
            raw_values(&mut before, seed);
            let after = generate_calls(seed, 40, ALL_OPS);
            // `before` is a subsequence of `after`, copies aside.
            let mut it = after.lines.iter();
            for b in &before.lines {
                let same = |a: &GenLine| match (a, b) {
                    (
                        GenLine::Call {
                            call:
                                Call::UffdCopy {
                                    dst: d1, len: l1, ..
                                },
                            ..
                        },
                        GenLine::Call {
                            call:
                                Call::UffdCopy {
                                    dst: d2, len: l2, ..
                                },
                            ..
                        },
                    ) => (d1, l1) == (d2, l2),
                    _ => a == b,
                };
                assert!(it.any(same), "case {n}: {b:?} lost");
            }
            let mut any = false;
            for (i, l) in after.lines.iter().enumerate() {
                let GenLine::Call { call, .. } = l else {
                    continue;
                };
                match *call {
                    Call::FillBytes { addr, len, byte } => {
                        any = true;
                        fills += 1;
                        bytes.insert(byte);
                        if addr % 4096 != 0 || len % 4096 != 0 {
                            unaligned += 1;
                        }
                        if addr / 4096 != (addr + len - 1) / 4096 {
                            crossing += 1;
                        }
                        if addr / (64 * KB) != (addr + len - 1) / (64 * KB) {
                            big_cross += 1;
                        }
                        if let Some(GenLine::Call {
                            call: Call::UffdMove { .. },
                            ..
                        }) = after.lines.get(i + 1)
                        {
                            before_move += 1;
                        }
                    }
                    Call::UffdCopy { src, tag: None, .. } if src % 4096 != 0 => copies += 1,
                    _ => {}
                }
            }
            cases_with += u64::from(any);
            ptlab_scenario::parse("fill.ptl", &after.to_ptl()).expect("parses");
        }
        assert!(
            (100..300).contains(&cases_with),
            "{cases_with} of 400 cases"
        );
        assert!(unaligned * 10 >= fills * 9, "{unaligned} of {fills}");
        assert!(crossing > 20 && big_cross > 5, "{crossing} {big_cross}");
        assert!(copies > 0 && before_move > 0, "{copies} {before_move}");
        assert!(bytes.contains(&0) && bytes.len() > 20, "{bytes:?}");
    }

    #[test]
    fn shrink_finds_a_minimal_subset() {
        let src = "a\nb\nc\nneedle1\nd\ne\nneedle2\nf\n";
        let out = shrink(
            src,
            |c| c.contains("needle1") && c.contains("needle2"),
            Duration::from_secs(5),
        );
        assert_eq!(out, "needle1\nneedle2\n");
    }
}

/// `msg` with every run of hex or decimal digits (and `0x` prefixes)
/// replaced by `N`, so messages that differ only in addresses group.
fn mask_numbers(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut in_num = false;
    let b = msg.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        let starts = c.is_ascii_digit();
        if starts || (in_num && c.is_ascii_hexdigit()) || (in_num && c == 'x') {
            if !in_num {
                out.push('N');
                in_num = true;
            }
        } else {
            in_num = false;
            out.push(c);
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod mask_tests {
    #[test]
    fn numbers_are_masked() {
        assert_eq!(
            super::mask_numbers("mmap 0x7f00ab+4096 touches 12"),
            "mmap N+N touches N"
        );
    }
}

#[cfg(test)]
mod campaign_tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn shards_split_a_campaign_exactly() {
        for total in [0u64, 1, 7, 100, 1001] {
            let whole: Vec<u64> = Shard::WHOLE.cases(total).collect();
            assert_eq!(whole, (0..total).collect::<Vec<_>>());
            for n in 1..=7u64 {
                let mut union = BTreeSet::new();
                let mut count = 0;
                for k in 0..n {
                    let sh = Shard::parse(&format!("{k}/{n}")).unwrap();
                    let cases: Vec<u64> = sh.cases(total).collect();
                    // Deterministic and in order.
                    assert_eq!(cases, sh.cases(total).collect::<Vec<_>>());
                    assert!(cases.windows(2).all(|w| w[0] < w[1]));
                    for c in &cases {
                        assert!(sh.owns(*c));
                        assert_eq!(c % n, k);
                        // Disjoint: no other shard owns it.
                        assert!((0..n).filter(|&j| j != k).all(|j| c % n != j));
                    }
                    count += cases.len();
                    union.extend(cases);
                }
                assert_eq!(count as u64, total, "{n} shards of {total}: each case once");
                assert_eq!(union, (0..total).collect::<BTreeSet<_>>());
            }
        }
        // The same case index is the same scenario in every shard.
        let sh = Shard::parse("2/3").unwrap();
        let c = sh.nth(4).unwrap();
        assert_eq!(c, 14);
        assert_eq!(
            generate(case_seed(9, c), 24, ALL),
            generate(case_seed(9, 14), 24, ALL)
        );
        assert_eq!(Shard::parse(" 0/1 ").ok(), Some(Shard::WHOLE));
        for bad in ["", "3", "1/0", "4/4", "-1/4", "a/b", "1/4/2"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Shard::parse("1/4").unwrap().to_string(), "1/4");
        assert_eq!(
            results_file_name(42, Shard::parse("1/4").unwrap()),
            "results-42-shard-1-of-4.jsonl"
        );
        assert_eq!(results_file_name(42, Shard::WHOLE), "results-42.jsonl");
    }

    const ALL: OpSet = OpSet {
        fork: true,
        mprotect: true,
        mremap: true,
        uffd: true,
        guard_lock_seal: true,
        swap: true,
    };

    fn rec(case: u64, verdict: Verdict, start: f64, secs: f64) -> FuzzRecord {
        FuzzRecord {
            seed: 42,
            case,
            case_seed: case_seed(42, case),
            shard: format!("{}/2", case % 2),
            arch: "x86_64".into(),
            ops: 24,
            verdict,
            start,
            secs,
            wait_secs: 0.0,
            worker: 0,
            cpu: Some(case % 2),
            exclusive: true,
            epoch: (case > 3).then_some(case / 4),
            summary: (verdict == Verdict::Divergent).then(|| "pages: differ".to_string()),
            reproducer: (verdict == Verdict::Divergent)
                .then(|| PathBuf::from(format!("out/fuzz-{case}.ptl"))),
            scenario: None,
            weights: (case == 0).then(|| "mremap=18".to_string()),
            new_rules: if case == 0 {
                vec!["mremap.move_normal_pmd".to_string()]
            } else {
                Vec::new()
            },
            timings: (case == 1).then(|| CaseTimings {
                plan: 1.5,
                compare: 12.25,
                rerun_count: 2,
                ..CaseTimings::default()
            }),
        }
    }

    #[test]
    fn records_round_trip_and_merge_deduplicates() {
        let a = vec![
            rec(0, Verdict::Agree, 100.0, 1.0),
            rec(2, Verdict::Divergent, 101.0, 2.0),
            rec(4, Verdict::Partial, 103.0, 1.0),
        ];
        let b = [
            rec(1, Verdict::Agree, 100.5, 1.0),
            rec(3, Verdict::Flaky, 101.5, 1.0),
            // Case 2 again (a re-run of shard 0): counted once.
            rec(2, Verdict::Agree, 110.0, 1.0),
        ];
        let text_a: String = a.iter().map(|r| r.to_line() + "\n").collect();
        let text_b: String = b.iter().map(|r| r.to_line() + "\n\n").collect();
        let pa = parse_results("a.jsonl", &text_a).unwrap();
        assert_eq!(pa, a);
        let pb = parse_results("b.jsonl", &text_b).unwrap();
        let m = merge_records(
            vec!["a.jsonl".into(), "b.jsonl".into()],
            pa.into_iter().chain(pb),
        );
        assert_eq!(m.lines, 6);
        assert_eq!(m.cases, 5);
        assert_eq!(m.duplicates, 1);
        assert_eq!(m.conflicts.len(), 1, "{:?}", m.conflicts);
        assert_eq!(m.count(Verdict::Agree), 2);
        assert_eq!(m.count(Verdict::Divergent), 1);
        assert_eq!(m.count(Verdict::Flaky), 1);
        assert_eq!(m.count(Verdict::Partial), 1);
        assert_eq!(m.count(Verdict::Error), 0);
        // 100.0 .. 104.0 (the duplicate's later time is not counted).
        assert!((m.wall_secs - 4.0).abs() < 1e-9, "{}", m.wall_secs);
        assert!((m.rate() - 5.0 / 4.0).abs() < 1e-9);
        let cases: Vec<u64> = m.notable.iter().map(|r| r.case).collect();
        assert_eq!(cases, [2, 3]);
        let text = m.render_text();
        assert!(text.contains("out/fuzz-2.ptl"), "{text}");
        assert!(text.contains("1 divergent"), "{text}");
        let j = m.to_json();
        assert_eq!(j["cases"], 5);
        assert_eq!(j["verdicts"]["divergent"], 1);
        assert_eq!(j["divergences"][0]["reproducer"], "out/fuzz-2.ptl");
    }

    #[test]
    fn malformed_results_lines_are_errors_with_their_place() {
        let good = rec(0, Verdict::Agree, 1.0, 1.0).to_line();
        for (bad, why) in [
            ("{not json", "key must be a string"),
            ("{\"seed\": 1}", "missing field"),
            (
                &good.replace("\"agree\"", "\"maybe\"") as &str,
                "unknown variant",
            ),
            (
                &good.replace("\"case\":0", "\"case\":-3") as &str,
                "invalid value",
            ),
        ] {
            let text = format!("{good}\n\n{bad}\n");
            let e = parse_results("r.jsonl", &text).unwrap_err().to_string();
            assert!(
                e.starts_with("r.jsonl:3: not a ptlab fuzz result line"),
                "{e}"
            );
            assert!(e.contains(why), "{bad}: {e}");
        }
        let dir = std::env::temp_dir().join(format!("ptlab-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x.jsonl");
        std::fs::write(&f, format!("{good}\ngarbage\n")).unwrap();
        let e = merge_files(std::slice::from_ref(&f))
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.jsonl:2:"), "{e}");
        let e = merge_files(&[dir.join("missing.jsonl")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot read") && e.contains("missing.jsonl"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A campaign killed while writing a record leaves a last line without
    /// its newline: it is left out with a note, every whole line before it
    /// is read. A whole record missing only its newline is kept; a broken
    /// line that is not the last, or ends in a newline, is still an error.
    #[test]
    fn an_incomplete_last_line_is_left_out_with_a_note() {
        let a = rec(0, Verdict::Agree, 1.0, 1.0).to_line();
        let b = rec(1, Verdict::Agree, 2.0, 1.0).to_line();
        let cut = &b[..b.len() / 2];
        let (v, note) = parse_results_file("r.jsonl", &format!("{a}\n{cut}")).unwrap();
        assert_eq!(v.len(), 1);
        let note = note.expect("a note");
        assert!(
            note.starts_with("r.jsonl:2: the last line is incomplete"),
            "{note}"
        );
        let (v, note) = parse_results_file("r.jsonl", &format!("{a}\n{b}")).unwrap();
        assert_eq!((v.len(), note), (2, None));
        assert!(parse_results_file("r.jsonl", &format!("{a}\n{cut}\n")).is_err());
        assert!(parse_results_file("r.jsonl", &format!("{cut}\n{a}")).is_err());
        let dir = std::env::temp_dir().join(format!("ptlab-merge-cut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("r.jsonl");
        std::fs::write(&f, format!("{a}\n{cut}")).unwrap();
        let m = merge_files(std::slice::from_ref(&f)).unwrap();
        assert_eq!(m.cases, 1);
        assert_eq!(m.truncated.len(), 1);
        assert!(m.render_text().contains("note: "), "{}", m.render_text());
        assert_eq!(
            m.to_json()["truncated"].as_array().map(|a| a.len()),
            Some(1)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn knob_and_swap_cases_run_alone() {
        let plain = Generated {
            lines: vec![
                GenLine::Comment("x".into()),
                super::weight_tests::arena_mmap_line(),
                GenLine::Call {
                    proc: "main".into(),
                    bind: None,
                    call: Call::Access {
                        start: ARENA,
                        len: 4096,
                        write: true,
                        tag: None,
                    },
                },
            ],
            bases: Vec::new(),
        };
        assert!(!needs_exclusive(&plain, false));
        assert!(needs_exclusive(&plain, true), "the machine exposes sizes");
        for call in [
            Call::SetThp {
                knob: ThpKnob::Size(4),
                mode: ThpMode::Always,
            },
            Call::SetSwap {
                bytes: 1 << 20,
                kind: Default::default(),
            },
            Call::Madvise {
                addr: ARENA,
                len: 4096,
                advice: Advice::Collapse,
            },
            Call::Madvise {
                addr: ARENA,
                len: 4096,
                advice: Advice::HugePage,
            },
            Call::Madvise {
                addr: ARENA,
                len: 4096,
                advice: Advice::PageOut,
            },
        ] {
            let mut g = plain.clone();
            g.lines.push(GenLine::Call {
                proc: "main".into(),
                bind: None,
                call,
            });
            assert!(needs_exclusive(&g, false));
        }
        // Every generated scenario sets the THP policy first: all of them
        // run alone with today's generator.
        for n in 0..50 {
            assert!(needs_exclusive(
                &generate_calls(case_seed(3, n), 24, ALL),
                false
            ));
        }
    }

    /// `--jobs 2`: two threads pinned to two distinct CPUs, each running
    /// there (and what it forks inherits the mask).
    #[test]
    fn jobs_pin_to_distinct_cpus() {
        let cpus = match cpus_for_jobs(2) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("SKIP: jobs_pin_to_distinct_cpus: fewer than 2 CPUs: {e}");
                return;
            }
        };
        assert!(cpus_for_jobs(allowed_cpus().len() + 1).is_err());
        let seen: Vec<(usize, Vec<usize>, Vec<usize>)> = std::thread::scope(|s| {
            let hs: Vec<_> = cpus
                .iter()
                .map(|&cpu| {
                    s.spawn(move || {
                        pin_this_thread(cpu).unwrap();
                        let mut on = Vec::new();
                        for _ in 0..20 {
                            on.push(current_cpu().unwrap());
                            std::thread::yield_now();
                        }
                        // A forked child inherits the thread's mask.
                        let child = std::process::Command::new("grep")
                            .args(["Cpus_allowed_list", "/proc/self/status"])
                            .output()
                            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                            .unwrap_or_default();
                        let child_cpus = child
                            .split(':')
                            .nth(1)
                            .map(|l| l.trim().split(',').filter_map(|c| c.parse().ok()).collect())
                            .unwrap_or_default();
                        (cpu, on, child_cpus)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_ne!(seen[0].0, seen[1].0);
        for (cpu, on, child) in &seen {
            assert!(
                on.iter().all(|c| c == cpu),
                "pinned to {cpu}, ran on {on:?}"
            );
            assert_eq!(child, &vec![*cpu], "a child of the job pinned to {cpu}");
        }
    }
}

#[cfg(test)]
mod weight_tests {
    //! Generator weights, coverage guidance and the case planner.
    use super::*;

    /// `main` maps 1 MiB of anonymous memory at the arena (an operation to
    /// put after a generated policy).
    pub(super) fn arena_mmap_line() -> GenLine {
        GenLine::Call {
            proc: "main".into(),
            bind: None,
            call: Call::Mmap {
                addr: ARENA,
                len: 1 << 20,
                prot: Prot::READ | Prot::WRITE,
                flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED,
            },
        }
    }

    const ALL: OpSet = OpSet {
        fork: true,
        mprotect: true,
        mremap: true,
        uffd: true,
        guard_lock_seal: true,
        swap: true,
    };

    #[test]
    fn weights_are_set_by_name_and_bad_ones_refused() {
        let mut w = GenWeights::default();
        w.set_from("mremap=40").unwrap();
        assert_eq!(w.ops[8], 40);
        w.set_from(" uffd_move_large = 90 ").unwrap();
        assert_eq!(w.uffd_move_large, 90);
        let e = w.set_from("nonsense=3").unwrap_err();
        assert!(
            e.contains("unknown weight") && e.contains("mremap_multi_vma"),
            "{e}"
        );
        assert!(w.set_from("large_folio_ranges=101").is_err());
        assert!(w.set_from("mremap").is_err());
        assert!(w.set_from("mremap=-1").is_err());
        let mut z = GenWeights::default();
        for n in GenWeights::OPS.iter().skip(1) {
            z.set(n, 0).unwrap();
        }
        assert!(z.set("mmap", 0).is_err(), "all operation weights 0");
        let names: Vec<String> = GenWeights::default()
            .entries()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        for n in &names {
            assert!(GenWeights::default().set(n, 1).is_ok(), "{n}");
        }
    }

    #[test]
    fn guidance_triples_what_nothing_exercised_and_keeps_the_rest() {
        let base = GenWeights::default();
        let none = base.guided(&Coverage::default());
        for (i, (g, b)) in none.ops.iter().zip(base.ops).enumerate() {
            let thp = GenWeights::OPS[i] == "thp"; // no rule family
            assert_eq!(*g, if thp { b } else { 3 * b }, "{}", GenWeights::OPS[i]);
        }
        assert_eq!(none.mseal, 3 * base.mseal);
        assert_eq!(
            none.uffd_move_large,
            2 * base.uffd_move_large,
            "the rules it aims at all missed"
        );
        let mut big = base.clone();
        big.set("mremap_multi_vma", 70).unwrap();
        assert_eq!(
            big.guided(&Coverage::default()).mremap_multi_vma,
            100,
            "at most 100"
        );
        let mut all = Coverage::default();
        for &r in Rule::ALL {
            all.0[r as usize] = 1;
        }
        assert_eq!(base.guided(&all), base);
        // Everything but mremap exercised: only mremap is boosted.
        let mut most = all.clone();
        for &r in Rule::ALL {
            if r.info().family == ptlab_model::core::rules::Family::Mremap {
                most.0[r as usize] = 0;
            }
        }
        let g = base.guided(&most);
        assert_eq!(g.ops[8], 3 * base.ops[8]);
        assert_eq!(g.ops[7], base.ops[7]);
        // The multi-VMA shape aims at mremap rules only, the large-folio
        // ranges at one mremap rule of four.
        assert_eq!(
            g.diff_from(&base),
            format!(
                "mremap={},mremap_multi_vma={},large_folio_ranges={}",
                3 * base.ops[8],
                2 * base.mremap_multi_vma,
                (base.large_folio_ranges * 125).div_ceil(100)
            )
        );
    }

    /// How many of `cases` generated cases contain each new-code shape.
    fn shapes(w: &GenWeights, cases: u64) -> [u64; 4] {
        let mut n = [0; 4];
        for c in 0..cases {
            let g = generate_weighted(case_seed(5, c), 40, ALL, w);
            let calls: Vec<&Call> = g
                .lines
                .iter()
                .filter_map(|l| match l {
                    GenLine::Call { call, .. } => Some(call),
                    _ => None,
                })
                .collect();
            // UFFDIO_MOVE of a whole 64 KiB or 2 MiB block right after the
            // range was registered.
            let large_move = calls.windows(2).any(|w| {
                matches!(w[0], Call::UffdRegister { .. })
                    && matches!(w[1], Call::UffdMove { len, .. } if *len == 64 * KB || *len == 2 * MB)
            });
            // A same-length FIXED mremap right after a split of its range.
            let multi = calls.windows(2).any(|w| {
                matches!(
                    w[0],
                    Call::Mprotect { .. }
                        | Call::Madvise {
                            advice: Advice::NoHugePage,
                            ..
                        }
                ) && matches!(w[1], Call::Mremap { old_len, new_len, flags, .. }
                        if old_len == new_len && flags.contains(MremapFlags::FIXED))
            });
            // An aligned write right before an mprotect of the same range.
            let aligned = calls.windows(2).any(|w| match (w[0], w[1]) {
                (
                    Call::Access {
                        start,
                        len,
                        write: true,
                        ..
                    },
                    Call::Mprotect { addr, len: l2, .. },
                ) => start == addr && len == l2 && len % (64 * KB) == 0,
                _ => false,
            });
            let seal = calls.iter().any(|c| matches!(c, Call::Mseal { .. }));
            for (k, hit) in [large_move, multi, aligned, seal].into_iter().enumerate() {
                n[k] += u64::from(hit);
            }
        }
        n
    }

    #[test]
    fn the_new_code_weights_make_their_shapes_and_zero_turns_them_off() {
        let on = shapes(&GenWeights::default(), 300);
        for (k, what) in [
            "large UFFDIO_MOVE",
            "multi-VMA mremap",
            "aligned mprotect",
            "mseal",
        ]
        .iter()
        .enumerate()
        {
            assert!(on[k] >= 5, "{what}: only {} of 300 cases", on[k]);
        }
        let mut off = GenWeights::default();
        for n in [
            "uffd_move_large",
            "mremap_multi_vma",
            "large_folio_ranges",
            "mseal",
        ] {
            off.set(n, 0).unwrap();
        }
        let none = shapes(&off, 300);
        assert_eq!(none[0], 0);
        assert_eq!(none[3], 0);
        assert!(
            none[1] < on[1] / 3 && none[2] < on[2] / 3,
            "{none:?} vs {on:?}"
        );
    }

    fn opts(shard: Shard) -> FuzzOptions {
        FuzzOptions {
            seed: 77,
            ops: 20,
            shard,
            ..FuzzOptions::default()
        }
    }

    #[test]
    fn planned_cases_are_the_same_in_a_shard_as_in_the_whole_run() {
        let mut whole = Planner::new(&opts(Shard::WHOLE), ALL);
        let mut half = Planner::new(&opts(Shard { index: 1, count: 2 }), ALL);
        let mut unguided = Planner::new(
            &FuzzOptions {
                guide: false,
                ..opts(Shard::WHOLE)
            },
            ALL,
        );
        let mut guided_differs = false;
        for c in 0..30u64 {
            let w = whole.take(c);
            let u = unguided.take(c);
            assert_eq!(
                u.gen.to_ptl(),
                generate_weighted(case_seed(77, c), 20, ALL, &GenWeights::default()).to_ptl(),
                "without guidance case {c} depends on the seed and its index alone"
            );
            guided_differs |= w.gen.to_ptl() != u.gen.to_ptl();
            if c % 2 == 1 {
                let h = half.take(c);
                assert_eq!(w.gen.to_ptl(), h.gen.to_ptl(), "case {c}");
                assert_eq!(w.weights, h.weights);
                assert_eq!(w.coverage, h.coverage);
            }
        }
        assert!(guided_differs, "guidance changed no case");
        // Coverage grows monotonically and first hits are recorded once.
        let mut p = Planner::new(&opts(Shard::WHOLE), ALL);
        let mut seen = std::collections::BTreeSet::new();
        for c in 0..30u64 {
            for r in p.take(c).new_rules {
                assert!(seen.insert(r), "{} first hit twice", r.name());
            }
        }
        assert_eq!(seen.len(), p.global.hit());
    }

    #[test]
    fn a_model_only_campaign_reports_coverage_without_the_live_kernel() {
        let dir = std::env::temp_dir().join(format!("ptlab-cover-{}", std::process::id()));
        let o = FuzzOptions {
            seed: 3,
            cases: Some(30),
            time: None,
            ops: 20,
            out_dir: dir.clone(),
            model_only: true,
            results: Some(dir.join("r.jsonl")),
            ..FuzzOptions::default()
        };
        std::fs::create_dir_all(&dir).unwrap();
        let mut last = 0;
        let s = fuzz(&o, &mut |e| {
            if let FuzzEvent::Case { rules, .. } = e {
                assert!(*rules >= last, "coverage never shrinks");
                last = *rules;
            }
        })
        .unwrap();
        assert_eq!(s.cases, 30);
        assert!(s.findings.is_empty(), "{:?}", s.findings);
        assert_eq!(s.coverage.hit(), last);
        assert!(last > 60, "{last} rules");
        // Both architectures run: arm64's contpte rules are hit.
        assert!(s.coverage.get(Rule::ContpteFold) > 0);
        let text = std::fs::read_to_string(dir.join("r.jsonl")).unwrap();
        let recs = parse_results("r.jsonl", &text).unwrap();
        assert_eq!(recs.len(), 30);
        let firsts: usize = recs.iter().map(|r| r.new_rules.len()).sum();
        assert_eq!(firsts, last, "every first hit is in one record");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The `thp` statements a scenario starts with, and the rest.
    fn split_policy(g: &Generated) -> (Vec<Call>, Vec<GenLine>) {
        let end = policy_end(g);
        let policy = g.lines[..end]
            .iter()
            .filter_map(|l| match l {
                GenLine::Call { call, .. } => Some(call.clone()),
                GenLine::Comment(_) => None,
            })
            .collect();
        (policy, g.lines[end..].to_vec())
    }

    #[test]
    fn epoch_cases_share_their_policy_and_keep_the_rest() {
        let k = 4;
        let seed = 77;
        let mut policies = std::collections::BTreeSet::new();
        for n in 0..24u64 {
            let plain = generate_calls(case_seed(seed, n), 24, ALL);
            let mut g = plain.clone();
            into_epoch(&mut g, seed, n, k);
            let (policy, rest) = split_policy(&g);
            let (_, plain_rest) = split_policy(&plain);
            assert_eq!(
                policy,
                epoch_policy(seed, n / k),
                "case {n}: its epoch's policy"
            );
            assert_eq!(
                rest, plain_rest,
                "case {n}: everything after the policy as generated"
            );
            assert!(
                g.to_ptl().contains(&format!("# knob epoch {}", n / k)),
                "case {n} names its epoch"
            );
            // The text runs alone: it parses, and sets the policy itself.
            ptlab_scenario::parse("e.ptl", &g.to_ptl()).expect("parses");
            policies.insert(format!("{policy:?}"));
        }
        // Six epochs: the policy varies between them (the seed and the
        // epoch draw it; each epoch's is the same for all its cases).
        assert!(policies.len() >= 3, "{} distinct policies", policies.len());
        assert_ne!(epoch_policy(seed, 0), epoch_policy(seed + 1, 0));
    }

    #[test]
    fn epoch_cases_run_alone_only_for_global_state_after_the_policy() {
        let mut base = generate_calls(case_seed(5, 0), 0, ALL);
        base.lines.retain(|l| {
            !matches!(
                l,
                GenLine::Call {
                    call: Call::SetSwap { .. },
                    ..
                }
            )
        });
        base.lines.push(arena_mmap_line());
        assert!(policy_end(&base) > 1, "the policy lines come first");
        assert!(
            !needs_exclusive_in_epoch(&base, &[]),
            "the policy alone is the epoch's"
        );
        assert!(
            needs_exclusive(&base, false),
            "without epochs every case runs alone"
        );
        let with = |call: Call| {
            let mut g = base.clone();
            g.lines.push(GenLine::Call {
                proc: "main".into(),
                bind: None,
                call,
            });
            needs_exclusive_in_epoch(&g, &[])
        };
        let madv = |advice| Call::Madvise {
            addr: ARENA,
            len: 4096,
            advice,
        };
        // The top level is in every policy: a line that enables or
        // disables it.
        let top = policy_mode(&base, ThpKnob::TopLevel).expect("the policy sets the top level");
        let other = if top == ThpMode::Never {
            ThpMode::Always
        } else {
            ThpMode::Never
        };
        assert!(with(Call::SetThp {
            knob: ThpKnob::TopLevel,
            mode: other,
        }));
        // A swap area: beside other cases, holding the swap token
        // (before issue 16's fifth round: alone).
        assert!(!with(Call::SetSwap {
            bytes: 1 << 20,
            kind: Default::default(),
        }));
        assert!(with(Call::SetUseZeroPage { on: false }));
        assert!(with(madv(Advice::Collapse)), "lru_add_drain_all()");
        // Each reason is named (`--timings` counts them), and only its own.
        let why = |calls: &[Call]| {
            let mut g = base.clone();
            for c in calls {
                g.lines.push(GenLine::Call {
                    proc: "main".into(),
                    bind: None,
                    call: c.clone(),
                });
            }
            epoch_sharing(&g, &[]).why.names()
        };
        let knob = Call::SetThp {
            knob: ThpKnob::TopLevel,
            mode: other,
        };
        assert_eq!(why(std::slice::from_ref(&knob)), ["a knob change"]);
        assert_eq!(why(&[madv(Advice::Collapse)]), ["MADV_COLLAPSE"]);
        assert_eq!(
            why(&[Call::SetUseZeroPage { on: false }]),
            ["use_zero_page"]
        );
        assert_eq!(
            why(&[
                Call::SetUseZeroPage { on: true },
                madv(Advice::Collapse),
                knob
            ]),
            ["a knob change", "MADV_COLLAPSE", "use_zero_page"]
        );
        assert!(why(&[madv(Advice::PageOut)]).is_empty());
        assert!(why(&[]).is_empty());
        // Counters are attributed per statement: these may run side by side.
        assert!(!with(madv(Advice::HugePage)));
        assert!(!with(madv(Advice::PageOut)));
        assert!(!with(madv(Advice::Cold)));
        // With today's generator a fair share of cases runs side by side.
        let shared = (0..100u64)
            .filter(|&n| {
                let mut g = generate_calls(case_seed(9, n), 24, ALL);
                into_epoch(&mut g, 9, n, 16);
                !needs_exclusive_in_epoch(&g, &[])
            })
            .count();
        assert!(
            (10..100).contains(&shared),
            "{shared} of 100 cases run side by side"
        );
    }

    /// A case of `lines` after a policy of `policy` (`thp` lines of
    /// `main`) and an arena mapping.
    fn case_of(policy: &[(ThpKnob, ThpMode)], lines: &[Call]) -> Generated {
        let main = |call: Call| GenLine::Call {
            proc: "main".into(),
            bind: None,
            call,
        };
        let mut g = generate_calls(case_seed(5, 0), 0, ALL);
        g.lines = policy
            .iter()
            .map(|&(knob, mode)| main(Call::SetThp { knob, mode }))
            .chain(std::iter::once(arena_mmap_line()))
            .chain(lines.iter().cloned().map(main))
            .collect();
        g
    }

    /// A machine whose knobs are all `never` but the sizes' `inherit`.
    fn machine_never() -> Vec<(ThpKnob, ThpMode)> {
        std::iter::once((ThpKnob::TopLevel, ThpMode::Never))
            .chain((2..=9).map(|o| (ThpKnob::Size(o), ThpMode::Never)))
            .collect()
    }

    fn thp(knob: ThpKnob, mode: ThpMode) -> Call {
        Call::SetThp { knob, mode }
    }

    #[test]
    fn a_knob_write_runs_beside_others_only_while_every_size_stays_never() {
        use ThpMode::*;
        let m = machine_never();
        let k64 = ThpKnob::Size(4);
        let top = ThpKnob::TopLevel;
        let sharing = |policy: &[(ThpKnob, ThpMode)], lines: &[Call]| {
            epoch_sharing(&case_of(policy, lines), &m)
        };
        // 64K between never and inherit under a top level of never: never
        // before, between (thpsize_enabled_store() clears, then sets) and
        // after.
        let s = sharing(&[(top, Never)], &[thp(k64, Inherit), thp(k64, Never)]);
        assert_eq!((s.alone, s.knobs), (false, KnobUse::Writes));
        // The same under a top level of madvise: inherit is madvise.
        assert!(sharing(&[(top, Madvise)], &[thp(k64, Inherit)]).alone);
        // Any size to always or madvise changes what a fault may get.
        assert!(sharing(&[(top, Never)], &[thp(k64, Always)]).alone);
        assert!(sharing(&[(top, Never)], &[thp(k64, Madvise)]).alone);
        // A write after an inherit: the state is followed line by line.
        assert!(sharing(&[(top, Never)], &[thp(k64, Inherit), thp(top, Always)]).alone);
        // The top level between always and madvise while no size inherits
        // it: enabled throughout, no size's mode taken from it.
        let s = sharing(&[(top, Always)], &[thp(top, Madvise)]);
        assert_eq!((s.alone, s.knobs), (false, KnobUse::Writes));
        // ... but with 64K inheriting it, 64K changes.
        assert!(sharing(&[(top, Always), (k64, Inherit)], &[thp(top, Madvise)]).alone);
        // Enabling or disabling the top level starts or stops khugepaged.
        assert!(sharing(&[(top, Never)], &[thp(top, Madvise)]).alone);
        assert!(sharing(&[(top, Madvise)], &[thp(top, Never)]).alone);
        // The top level has no inherit (EINVAL): a knob change as before.
        assert!(sharing(&[(top, Madvise)], &[thp(top, Inherit)]).alone);
        // A line for the value in force writes nothing, and one for a knob
        // of unknown value is a change.
        let s = sharing(&[(top, Always)], &[thp(k64, Never)]);
        assert_eq!((s.alone, s.knobs), (false, KnobUse::Reads));
        let s = epoch_sharing(&case_of(&[(top, Never)], &[thp(k64, Inherit)]), &[]);
        assert!(s.alone, "64K of unknown value");
        // Reads, then a write: the case writes.
        let s = sharing(&[(top, Never)], &[thp(k64, Never), thp(k64, Inherit)]);
        assert_eq!(s.knobs, KnobUse::Writes);
    }

    #[test]
    fn swap_cases_run_beside_cases_that_do_not_page_out() {
        let m = machine_never();
        let top = [(ThpKnob::TopLevel, ThpMode::Never)];
        let swap = Call::SetSwap {
            bytes: 1 << 20,
            kind: Default::default(),
        };
        let madv = |advice| Call::Madvise {
            addr: ARENA,
            len: 4096,
            advice,
        };
        let s = epoch_sharing(&case_of(&top, &[swap.clone(), madv(Advice::PageOut)]), &m);
        assert_eq!((s.alone, s.swap), (false, SwapUse::MakesArea));
        for adv in [Advice::PageOut, Advice::Cold, Advice::Other(21)] {
            let s = epoch_sharing(&case_of(&top, &[madv(adv)]), &m);
            assert_eq!((s.alone, s.swap), (false, SwapUse::NoArea), "{adv:?}");
        }
        let s = epoch_sharing(&case_of(&top, &[madv(Advice::DontNeed)]), &m);
        assert_eq!(s, Sharing::default());
        // MADV_COLLAPSE drains every CPU's folio batches: alone, with a
        // swap area or not.
        for adv in [Advice::Collapse, Advice::Other(25)] {
            assert!(epoch_sharing(&case_of(&top, &[swap.clone(), madv(adv)]), &m).alone);
        }
    }

    #[test]
    fn the_queue_pairs_a_case_that_needs_a_token_with_one_that_needs_none() {
        let m = machine_never();
        let top = [(ThpKnob::TopLevel, ThpMode::Never)];
        let plan = |g: Generated| Planned {
            gen: g,
            weights: String::new(),
            coverage: Coverage::default(),
            new_rules: Vec::new(),
            model: Ok(None),
            plan: Duration::ZERO,
        };
        let swap = |bytes| Call::SetSwap {
            bytes,
            kind: Default::default(),
        };
        let writes = thp(ThpKnob::Size(4), ThpMode::Inherit);
        let mut q = EpochQueue::default();
        for (c, lines) in [
            (0, vec![swap(1 << 20)]),
            (1, vec![swap(1 << 20)]),
            (2, vec![]),
            (3, vec![writes.clone()]),
            (4, vec![writes.clone()]),
            (5, vec![]),
        ] {
            q.shared.push_back((c, plan(case_of(&top, &lines))));
        }
        let take = |q: &mut EpochQueue| {
            let (c, p) = q.pop_shared(&m).expect("a case");
            q.running.push((c, epoch_sharing(&p.gen, &m)));
            c
        };
        // Nothing runs: the first that needs a token.
        assert_eq!(take(&mut q), 0);
        // 0 holds the swap token: the knob writer.
        assert_eq!(take(&mut q), 3);
        // Both tokens held: a case that needs none.
        assert_eq!(take(&mut q), 2);
        q.running.retain(|(c, _)| *c != 0);
        assert_eq!(take(&mut q), 1, "the swap token is free again");
        assert_eq!(take(&mut q), 5);
        // Only a conflicting case is left: it is taken (and will wait).
        assert_eq!(take(&mut q), 4);
        assert!(q.pop_shared(&m).is_none());
    }

    /// The mode a case's policy lines give `knob`, if they name it.
    fn policy_mode(g: &Generated, knob: ThpKnob) -> Option<ThpMode> {
        g.lines[..policy_end(g)].iter().rev().find_map(|l| match l {
            GenLine::Call {
                call: Call::SetThp { knob: k, mode },
                ..
            } if *k == knob => Some(*mode),
            _ => None,
        })
    }

    /// A mid-scenario `thp` line that asks for the value in force (the
    /// policy's, or the machine's for a knob the policy does not name)
    /// changes nothing and leaves the case side by side; any other value,
    /// or a knob whose value is unknown, makes it run alone.
    #[test]
    fn a_thp_line_for_the_value_in_force_does_not_make_a_case_run_alone() {
        let mut base = generate_calls(case_seed(5, 0), 0, ALL);
        base.lines.truncate(policy_end(&base));
        // An operation after the policy: `thp` lines right after it would
        // be policy lines themselves.
        base.lines.push(arena_mmap_line());
        let with = |g: &Generated, knob, mode, machine: &[(ThpKnob, ThpMode)]| {
            let mut g = g.clone();
            g.lines.push(GenLine::Call {
                proc: "main".into(),
                bind: None,
                call: Call::SetThp { knob, mode },
            });
            needs_exclusive_in_epoch(&g, machine)
        };
        let top = policy_mode(&base, ThpKnob::TopLevel).expect("the policy sets the top level");
        assert!(!with(&base, ThpKnob::TopLevel, top, &[]));
        for m in [ThpMode::Always, ThpMode::Madvise, ThpMode::Never] {
            assert_eq!(with(&base, ThpKnob::TopLevel, m, &[]), m != top, "{m:?}");
        }
        // A later policy line for the same knob is the one in force.
        let mut twice = base.clone();
        let other = if top == ThpMode::Never {
            ThpMode::Always
        } else {
            ThpMode::Never
        };
        twice.lines.insert(
            policy_end(&base),
            GenLine::Call {
                proc: "main".into(),
                bind: None,
                call: Call::SetThp {
                    knob: ThpKnob::TopLevel,
                    mode: other,
                },
            },
        );
        assert!(!with(&twice, ThpKnob::TopLevel, other, &[]));
        assert!(with(&twice, ThpKnob::TopLevel, top, &[]));
        // A size the policy does not name: the machine's value is in force.
        let unnamed = (2..=9u8)
            .map(ThpKnob::Size)
            .find(|k| policy_mode(&base, *k).is_none())
            .expect("a policy leaves some size unnamed");
        let machine = [(unnamed, ThpMode::Never)];
        assert!(!with(&base, unnamed, ThpMode::Never, &machine));
        assert!(with(&base, unnamed, ThpMode::Always, &machine));
        assert!(
            with(&base, unnamed, ThpMode::Never, &[]),
            "unknown: a change"
        );
        // After a real change, the case runs alone whatever follows.
        let mut changed = base.clone();
        changed.lines.push(GenLine::Call {
            proc: "main".into(),
            bind: None,
            call: Call::SetThp {
                knob: ThpKnob::TopLevel,
                mode: other,
            },
        });
        assert!(with(&changed, ThpKnob::TopLevel, top, &[]));
    }

    #[test]
    fn a_shown_case_of_an_epoch_carries_the_epochs_policy() {
        let o = FuzzOptions {
            seed: 31,
            ops: 10,
            epoch: 8,
            guide: false,
            ..FuzzOptions::default()
        };
        for case in [3u64, 8, 21] {
            let text = case_text(&o, case);
            assert!(text.starts_with(&format!("# ptlab fuzz --seed 31 --epoch 8 case {case}")));
            let mut g = generate_calls(case_seed(31, case), 10, probe_set());
            into_epoch(&mut g, 31, case, 8);
            assert!(text.ends_with(&g.to_ptl()), "case {case}:\n{text}");
            for call in epoch_policy(31, case / 8) {
                let line = ptlab_scenario::call_to_ptl("main", None, &call, &|v| {
                    ptlab_scenario::fmt_addr(v)
                });
                assert!(text.contains(&format!("\n{line}\n")), "{line}");
            }
        }
    }

    fn probe_set() -> OpSet {
        OpSet::probe_arch(ArchKind::X86_64)
    }
}
