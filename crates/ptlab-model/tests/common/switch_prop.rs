//! The random step sequences the storage-switch property tests share
//! (`pte_runs_prop`: run-length vs dense PTE tables; `folio_runs_prop`:
//! folio-run records vs one record per folio): faults of order-0, 16 KiB,
//! 64 KiB and PMD folios, writes, reads, MADV_DONTNEED/FREE/PAGEOUT/COLD,
//! guard markers, mprotect, mremap moves, fork and exit, swap — and one
//! run of them with everything a user can see collected.

use proptest::prelude::*;
use ptlab_model::{
    Advice, ArchKind, MapFlags, Model, ModelConfig, MremapFlags, Prot, Sections, ThpKnob, ThpMode,
};

pub const BASE: u64 = 0x7f00_0000_0000;
pub const ARENA: u64 = 8 << 20;
/// Where mremap moves go (a second arena, unmapped at the start).
pub const DST: u64 = BASE + (64 << 20);

/// A model of `arch` whose arena is written through in address order
/// with folios of `order` (0: 4 KiB pages; 9: PTE-mapped THPs, each PMD
/// split as the seeds do), then its tables compacted; `configure` sets the switches.
pub fn populated(arch: ArchKind, order: u8, configure: impl FnOnce(&mut ModelConfig)) -> Model {
    let mut cfg = ModelConfig::for_arch(arch);
    configure(&mut cfg);
    let mut m = Model::new(cfg);
    m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
    if order > 0 {
        m.set_thp(ThpKnob::Size(order), ThpMode::Always).unwrap();
    }
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
    m.access_range(1, BASE, ARENA, true, None).unwrap();
    if order == 9 {
        for slot in (BASE..BASE + ARENA).step_by(1 << 21) {
            m.madvise(1, slot, 4096, Advice::DontFork).unwrap();
            m.madvise(1, slot, 4096, Advice::DoFork).unwrap();
        }
    }
    m.compact_pte_tables();
    m
}

#[derive(Clone, Debug)]
pub enum Op {
    Write {
        proc: usize,
        off: u64,
        len: u64,
    },
    Read {
        proc: usize,
        off: u64,
    },
    Advise {
        proc: usize,
        off: u64,
        len: u64,
        advice: Advice,
    },
    Protect {
        proc: usize,
        off: u64,
        len: u64,
        prot: u8,
    },
    Move {
        proc: usize,
        off: u64,
        len: u64,
        to: u64,
    },
    Fork {
        proc: usize,
    },
    Exit {
        proc: usize,
    },
}

fn off() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0..ARENA / 4096).prop_map(|p| p * 4096),
        (0..ARENA / 0x10000).prop_map(|p| p * 0x10000),
        (0..ARENA / 0x20_0000).prop_map(|p| p * 0x20_0000),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        (1..32u64).prop_map(|p| p * 4096),
        (1..8u64).prop_map(|p| p * 0x10000),
        (1..3u64).prop_map(|p| p * 0x20_0000),
        Just(ARENA)
    ]
}

fn advice() -> impl Strategy<Value = Advice> {
    prop_oneof![
        Just(Advice::DontNeed),
        Just(Advice::Free),
        Just(Advice::PageOut),
        Just(Advice::Cold),
        Just(Advice::GuardInstall),
        Just(Advice::GuardRemove),
        Just(Advice::DontFork),
        Just(Advice::DoFork),
        Just(Advice::NoHugePage),
        Just(Advice::Collapse),
    ]
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, off(), len()).prop_map(|(proc, off, len)| Op::Write { proc, off, len }),
        2 => (0..3usize, off()).prop_map(|(proc, off)| Op::Read { proc, off }),
        3 => (0..3usize, off(), len(), advice())
            .prop_map(|(proc, off, len, advice)| Op::Advise { proc, off, len, advice }),
        3 => (0..3usize, off(), len(), 0..3u8)
            .prop_map(|(proc, off, len, prot)| Op::Protect { proc, off, len, prot }),
        1 => (0..3usize, off(), len(), off())
            .prop_map(|(proc, off, len, to)| Op::Move { proc, off, len, to }),
        2 => (0..3usize).prop_map(|proc| Op::Fork { proc }),
        1 => (1..3usize).prop_map(|proc| Op::Exit { proc }),
    ]
}

pub struct Outcome {
    /// Each step's result, then every live process's rendering.
    pub text: String,
    pub events: ptlab_model::HwEvents,
    pub coverage: ptlab_model::core::rules::Coverage,
    /// `Model::memory_bytes()` after every step.
    pub memory: Vec<usize>,
    /// The statistics (THP and vm event counters) at the end.
    pub stats: String,
    /// The model at the end, for what each test counts in it.
    pub model: Model,
}

/// Runs `ops` on a fresh model of `arch` (`configure` sets the storage
/// switch under test; `label` names the side in a failure) with the
/// invariants checked after every step.
pub fn run(
    arch: ArchKind,
    orders: &[u8],
    ops: &[Op],
    label: &str,
    configure: impl Fn(&mut ModelConfig),
) -> Outcome {
    let mut cfg = ModelConfig::for_arch(arch);
    configure(&mut cfg);
    let mut m = Model::new(cfg);
    m.set_swap(64 << 20).unwrap();
    m.set_thp(ThpKnob::Size(9), ThpMode::Never).unwrap();
    for &o in orders {
        m.set_thp(ThpKnob::Size(o), ThpMode::Always).unwrap();
    }
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, BASE, ARENA, Prot::READ | Prot::WRITE, f).unwrap();
    let mut procs: Vec<u32> = vec![1];
    let mut text = String::new();
    let mut memory = Vec::new();
    for op in ops {
        let r = match *op {
            Op::Write { proc, off, len } => procs.get(proc).map(|&p| {
                format!(
                    "{:?}",
                    m.access_range(p, BASE + off, len.min(ARENA - off), true, None)
                )
            }),
            Op::Read { proc, off } => procs
                .get(proc)
                .map(|&p| format!("{:?}", m.read(p, BASE + off))),
            Op::Advise {
                proc,
                off,
                len,
                advice,
            } => procs.get(proc).map(|&p| {
                format!(
                    "{:?}",
                    m.madvise(p, BASE + off, len.min(ARENA - off), advice)
                )
            }),
            Op::Protect {
                proc,
                off,
                len,
                prot,
            } => procs.get(proc).map(|&p| {
                let prot = match prot {
                    0 => Prot::empty(),
                    1 => Prot::READ,
                    _ => Prot::READ | Prot::WRITE,
                };
                format!(
                    "{:?}",
                    m.mprotect(p, BASE + off, len.min(ARENA - off), prot)
                )
            }),
            Op::Move { proc, off, len, to } => procs.get(proc).map(|&p| {
                let len = len.min(ARENA - off);
                let fl = MremapFlags::MAYMOVE | MremapFlags::FIXED;
                format!("{:?}", m.mremap(p, BASE + off, len, len, fl, DST + to))
            }),
            Op::Fork { proc } => match procs.get(proc) {
                Some(&p) if procs.len() < 4 => {
                    let c = m.fork(p);
                    if let Ok(c) = c {
                        procs.push(c);
                    }
                    Some(format!("{c:?}"))
                }
                _ => None,
            },
            Op::Exit { proc } => (proc < procs.len()).then(|| {
                let p = procs.remove(proc);
                format!("{:?}", m.exit(p))
            }),
        };
        if let Some(r) = r {
            text.push_str(&r);
            text.push('\n');
        }
        if let Err(e) = m.check_invariants() {
            panic!("{label}, after {op:?}: {e:#?}");
        }
        memory.push(m.memory_bytes());
    }
    for &p in &procs {
        text.push_str(&m.observe(p, &format!("p{p}")).render(Sections::ALL));
    }
    Outcome {
        text,
        events: m.hw_events(),
        coverage: m.coverage(),
        memory,
        stats: format!("{:?}", m.phys().stats),
        model: m,
    }
}
