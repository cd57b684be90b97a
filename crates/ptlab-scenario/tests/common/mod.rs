//! A small in-memory backend for interpreter tests.
//!
//! It is deliberately simple (whole-VMA munmap, order-0 folios only, a bump
//! allocator for addresses) but honest about the things the interpreter
//! relies on: errno failures, SIGSEGV on unmapped or protected pages,
//! per-process state, counters, and a call log for sequencing checks.

#![allow(dead_code)]

use ptlab_model::observe::{AnonPage, MapsEntry, PageRuns};
use ptlab_model::{
    Advice, Errno, MapFlags, Observation, PageState, Prot, ThpKnob, ThpMode, PAGE_SIZE,
};
use ptlab_scenario::{Backend, BackendError, Call};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
struct Proc {
    /// start -> (end, prot)
    vmas: BTreeMap<u64, (u64, Prot)>,
    /// page address -> (pfn, tag)
    pages: BTreeMap<u64, (u64, u64)>,
}

#[derive(Debug)]
pub struct FakeBackend {
    procs: BTreeMap<String, Proc>,
    next_addr: u64,
    next_pfn: u64,
    /// Every call, as text, in order.
    pub log: Vec<String>,
    /// Counter reported as `vmstat/fake_writes` (starts non-zero so the
    /// interpreter's baseline subtraction is exercised).
    writes: i64,
    /// Violations `check_invariants` reports.
    pub violations: Vec<String>,
    /// After this many statements, `after_statement` reports a violation.
    pub break_after: Option<u64>,
    statements: u64,
    /// Fail every call with `Other` after this many calls (bounds fuzzing).
    pub call_budget: Option<u64>,
    calls: u64,
}

impl Default for FakeBackend {
    fn default() -> Self {
        let mut procs = BTreeMap::new();
        procs.insert("main".to_string(), Proc::default());
        FakeBackend {
            procs,
            next_addr: 0x7f00_0000_0000,
            next_pfn: 0x1000,
            log: Vec::new(),
            writes: 5,
            violations: Vec::new(),
            break_after: None,
            statements: 0,
            call_budget: None,
            calls: 0,
        }
    }
}

fn perms(prot: Prot) -> String {
    let b = |f, c| if prot.contains(f) { c } else { '-' };
    [
        b(Prot::READ, 'r'),
        b(Prot::WRITE, 'w'),
        b(Prot::EXEC, 'x'),
        'p',
    ]
    .iter()
    .collect()
}

impl FakeBackend {
    fn tick(&mut self, entry: String) -> Result<(), BackendError> {
        self.calls += 1;
        self.log.push(entry);
        match self.call_budget {
            Some(b) if self.calls > b => Err(BackendError::Other("call budget exhausted".into())),
            _ => Ok(()),
        }
    }

    fn proc(&mut self, name: &str) -> Result<&mut Proc, BackendError> {
        self.procs
            .get_mut(name)
            .ok_or_else(|| BackendError::NoProcess(name.to_string()))
    }

    fn vma_of(p: &Proc, addr: u64) -> Option<(u64, u64, Prot)> {
        let (&start, &(end, prot)) = p.vmas.range(..=addr).next_back()?;
        (addr < end).then_some((start, end, prot))
    }

    pub fn log_lines(&self) -> Vec<&str> {
        self.log.iter().map(String::as_str).collect()
    }
}

impl Backend for FakeBackend {
    fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        let unit = |r: Result<(), BackendError>| r.map(|()| 0);
        match call {
            Call::Mmap {
                addr,
                len,
                prot,
                flags,
            } => self.mmap(proc, *addr, *len, *prot, *flags),
            Call::Munmap { addr, len } => unit(self.munmap(proc, *addr, *len)),
            Call::Madvise { addr, len, advice } => unit(self.madvise(proc, *addr, *len, *advice)),
            Call::Access {
                start,
                len,
                write,
                tag,
            } => unit(self.access(proc, *start, *len, *write, *tag)),
            Call::SetThp { knob, mode } => unit(self.set_thp(*knob, *mode)),
            Call::SetUseZeroPage { on } => unit(self.set_use_zero_page(*on)),
            Call::SetBefore { .. } | Call::SetMemory { .. } => Ok(0),
            Call::Fork { child } => unit(self.fork(proc, child)),
            Call::Exit => unit(self.exit(proc)),
            other => Err(BackendError::Unsupported(other.name())),
        }
    }

    fn observe(&mut self, proc: &str) -> Result<Observation, BackendError> {
        self.observe_all(proc)
    }

    fn observe_summary(&mut self, proc: &str) -> Result<Observation, BackendError> {
        self.observe_all(proc)
    }

    fn read_bytes(
        &mut self,
        _proc: &str,
        _addr: u64,
        _len: u64,
    ) -> Result<Vec<Option<u8>>, BackendError> {
        Err(BackendError::Unsupported("expect bytes"))
    }

    fn observe_pages(
        &mut self,
        proc: &str,
        start: u64,
        end: u64,
    ) -> Result<PageRuns, BackendError> {
        Ok(self.observe_all(proc)?.pages.clip(start, end))
    }

    fn check_invariants(&mut self) -> Result<(), Vec<String>> {
        if self.violations.is_empty() {
            Ok(())
        } else {
            Err(self.violations.clone())
        }
    }

    fn before_statement(&mut self, _line: u32, _text: &str, _loops: &[(u32, u64)]) {}

    fn after_statement(&mut self) -> Result<(), Vec<String>> {
        self.statements += 1;
        match self.break_after {
            Some(n) if self.statements >= n => {
                Err(vec![format!("broken after {} statements", self.statements)])
            }
            _ => Ok(()),
        }
    }

    fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
        None
    }
}

impl FakeBackend {
    /// Every page of the range in address order, stopping at the first
    /// fault (one log entry per page).
    fn access(
        &mut self,
        proc: &str,
        start: u64,
        len: u64,
        write: bool,
        tag: Option<u64>,
    ) -> Result<(), BackendError> {
        let start = start & !(PAGE_SIZE - 1);
        let end = start
            .checked_add(len)
            .ok_or(BackendError::Segv { addr: start })?;
        let mut page = start;
        while page < end {
            if write {
                self.write(proc, page, tag.unwrap_or(page))?;
            } else {
                self.read(proc, page)?;
            }
            page = match page.checked_add(PAGE_SIZE) {
                Some(p) => p,
                None => break,
            };
        }
        Ok(())
    }

    fn mmap(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<u64, BackendError> {
        self.tick(format!("mmap {proc} {addr:#x} {len:#x} {prot:?} {flags:?}"))?;
        if len == 0 || !len.is_multiple_of(PAGE_SIZE) {
            return Err(BackendError::Errno(Errno::EINVAL));
        }
        let fixed = flags.intersects(MapFlags::FIXED | MapFlags::FIXED_NOREPLACE);
        let start = if fixed { addr } else { self.next_addr };
        if !start.is_multiple_of(PAGE_SIZE) {
            return Err(BackendError::Errno(Errno::EINVAL));
        }
        let end = start
            .checked_add(len)
            .ok_or(BackendError::Errno(Errno::ENOMEM))?;
        let p = self.proc(proc)?;
        let overlaps = p.vmas.iter().any(|(&s, &(e, _))| s < end && start < e);
        if overlaps {
            if flags.contains(MapFlags::FIXED_NOREPLACE) {
                return Err(BackendError::Errno(Errno::EEXIST));
            }
            p.vmas.retain(|&s, &mut (e, _)| !(s < end && start < e));
        }
        p.vmas.insert(start, (end, prot));
        if !fixed {
            self.next_addr = end.saturating_add(16 * PAGE_SIZE);
        }
        Ok(start)
    }

    fn munmap(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), BackendError> {
        self.tick(format!("munmap {proc} {addr:#x} {len:#x}"))?;
        if !addr.is_multiple_of(PAGE_SIZE) || len == 0 {
            return Err(BackendError::Errno(Errno::EINVAL));
        }
        let end = addr.saturating_add(len);
        let p = self.proc(proc)?;
        p.vmas.retain(|&s, &mut (e, _)| !(addr <= s && e <= end));
        p.pages.retain(|&a, _| !(addr <= a && a < end));
        Ok(())
    }

    fn madvise(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        advice: Advice,
    ) -> Result<(), BackendError> {
        self.tick(format!(
            "madvise {proc} {addr:#x} {len:#x} {}",
            advice.name()
        ))?;
        let end = addr.saturating_add(len);
        let p = self.proc(proc)?;
        if Self::vma_of(p, addr).is_none() {
            return Err(BackendError::Errno(Errno::ENOMEM));
        }
        if advice == Advice::DontNeed {
            p.pages.retain(|&a, _| !(addr <= a && a < end));
        }
        Ok(())
    }

    fn read(&mut self, proc: &str, addr: u64) -> Result<u64, BackendError> {
        self.tick(format!("read {proc} {addr:#x}"))?;
        let p = self.proc(proc)?;
        match Self::vma_of(p, addr) {
            Some((_, _, prot)) if prot.contains(Prot::READ) => {
                Ok(p.pages.get(&addr).map_or(0, |&(_, t)| t))
            }
            _ => Err(BackendError::Segv { addr }),
        }
    }

    fn write(&mut self, proc: &str, addr: u64, tag: u64) -> Result<(), BackendError> {
        self.tick(format!("write {proc} {addr:#x} {tag:#x}"))?;
        let pfn = self.next_pfn;
        let p = self.proc(proc)?;
        match Self::vma_of(p, addr) {
            Some((_, _, prot)) if prot.contains(Prot::WRITE) => {
                let entry = p.pages.entry(addr).or_insert((pfn, 0));
                entry.1 = tag;
                if entry.0 == pfn {
                    self.next_pfn += 1;
                }
                self.writes += 1;
                Ok(())
            }
            _ => Err(BackendError::Segv { addr }),
        }
    }

    fn set_thp(&mut self, knob: ThpKnob, mode: ThpMode) -> Result<(), BackendError> {
        self.tick(format!("set_thp {knob:?} {}", mode.name()))?;
        match (knob, mode) {
            (ThpKnob::TopLevel, ThpMode::Inherit) => Err(BackendError::Errno(Errno::EINVAL)),
            (ThpKnob::Size(o), _) if !(2..=9).contains(&o) => {
                Err(BackendError::Errno(Errno::ENOENT))
            }
            _ => Ok(()),
        }
    }

    fn set_use_zero_page(&mut self, on: bool) -> Result<(), BackendError> {
        self.tick(format!("use_zero_page {on}"))
    }

    fn observe_all(&mut self, proc: &str) -> Result<Observation, BackendError> {
        let writes = self.writes;
        let p = self
            .procs
            .get(proc)
            .ok_or_else(|| BackendError::NoProcess(proc.to_string()))?;
        let mut obs = Observation {
            process: proc.to_string(),
            ..Observation::default()
        };
        for (&start, &(end, prot)) in &p.vmas {
            obs.maps.push(MapsEntry {
                start,
                end,
                perms: perms(prot),
                vm_flags: vec!["rd".into(), "wr".into(), "mr".into()],
                anon_huge_kb: 0,
                rss_kb: 0,
                lazyfree_kb: 0,
            });
            let mut a = start;
            while a < end {
                let state = match p.pages.get(&a) {
                    None => PageState::NotPresent,
                    Some(&(pfn, tag)) => PageState::Anon(AnonPage {
                        pfn,
                        order: 0,
                        index: 0,
                        pmd_mapped: false,
                        mmap_exclusive: true,
                        anon_exclusive: true,
                        mapcount: 1,
                        tag,
                    }),
                };
                obs.pages.push(a, state);
                a += PAGE_SIZE;
            }
        }
        obs.stats.insert("vmstat/fake_writes".into(), writes);
        Ok(obs)
    }

    fn fork(&mut self, parent: &str, child: &str) -> Result<(), BackendError> {
        self.tick(format!("fork {parent} {child}"))?;
        if self.procs.contains_key(child) {
            return Err(BackendError::ProcessExists(child.to_string()));
        }
        let copy = self
            .procs
            .get(parent)
            .cloned()
            .ok_or_else(|| BackendError::NoProcess(parent.to_string()))?;
        self.procs.insert(child.to_string(), copy);
        Ok(())
    }

    fn exit(&mut self, proc: &str) -> Result<(), BackendError> {
        self.tick(format!("exit {proc}"))?;
        self.procs
            .remove(proc)
            .map(|_| ())
            .ok_or_else(|| BackendError::NoProcess(proc.to_string()))
    }
}
