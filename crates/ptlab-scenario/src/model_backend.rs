//! [`Backend`] implementation over the executable model.

use crate::backend::{Backend, BackendError};
use ptlab_model::{observe::PageRuns, Call, Model, ModelConfig, Observation, Pid};
use std::collections::HashMap;

/// Runs scenarios against [`ptlab_model::Model`].
///
/// Maps process names to model pids (`main` is [`Model::main_pid`]); the
/// model runs every [`Call`] itself ([`Model::call`]). With
/// [`ModelBackend::check_every_statement`] on, the model's invariants are
/// recomputed after every statement, so a bug is reported at the line that
/// introduced it rather than at the next `expect invariants`.
pub struct ModelBackend {
    model: Model,
    pids: HashMap<String, Pid>,
    /// The process the last call named and its pid: a loop of calls in
    /// one process looks its name up once (cleared when `pids` changes).
    last: Option<(String, Pid)>,
    /// The pid of the process the previous [`Backend::call`] named, when
    /// that call acted on a process (and was not fork or exit): what
    /// [`Backend::call_same_proc`] runs its call in without a name compare.
    prev_pid: Option<Pid>,
    check_every_statement: bool,
}

impl ModelBackend {
    /// A fresh machine configured by `cfg`, with one process, `main`.
    pub fn new(cfg: ModelConfig) -> Self {
        let model = Model::new(cfg);
        let mut pids = HashMap::new();
        pids.insert("main".to_string(), model.main_pid());
        ModelBackend {
            model,
            pids,
            last: None,
            prev_pid: None,
            check_every_statement: false,
        }
    }

    /// Check invariants after every statement (off by default).
    pub fn check_every_statement(mut self, on: bool) -> Self {
        self.check_every_statement = on;
        self
    }

    /// The underlying model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The underlying model, mutably (e.g. to set up state a scenario cannot).
    pub fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    fn pid(&self, proc: &str) -> Result<Pid, BackendError> {
        self.pids
            .get(proc)
            .copied()
            .ok_or_else(|| BackendError::NoProcess(proc.to_string()))
    }
}

impl Backend for ModelBackend {
    fn call(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        self.prev_pid = None;
        if let Call::Fork { child } = call {
            if self.pids.contains_key(child) {
                return Err(BackendError::ProcessExists(child.clone()));
            }
        }
        // Machine-wide settings run whatever process issues them.
        let pid = if call.acts_on_process() {
            let pid = match &self.last {
                Some((name, pid)) if name == proc => *pid,
                _ => {
                    let pid = self.pid(proc)?;
                    self.last = Some((proc.to_string(), pid));
                    pid
                }
            };
            if !matches!(call, Call::Fork { .. } | Call::Exit) {
                self.prev_pid = Some(pid);
            }
            pid
        } else {
            self.model.main_pid()
        };
        let r = self
            .model
            .call(pid, call)
            .map_err(|e| BackendError::from_call(proc, e))?;
        match call {
            Call::Fork { child } => {
                self.last = None;
                self.pids.insert(child.clone(), r as Pid);
                Ok(0)
            }
            Call::Exit => {
                self.last = None;
                self.pids.remove(proc);
                Ok(r)
            }
            _ => Ok(r),
        }
    }

    /// The previous call's pid when it has one (a process call other than
    /// fork and exit) and this call acts on a process too, else
    /// [`Backend::call`]. Fork and exit clear it, so it always names a
    /// live process.
    fn call_same_proc(&mut self, proc: &str, call: &Call) -> Result<u64, BackendError> {
        match self.prev_pid {
            Some(pid)
                if call.acts_on_process() && !matches!(call, Call::Fork { .. } | Call::Exit) =>
            {
                self.model
                    .call(pid, call)
                    .map_err(|e| BackendError::from_call(proc, e))
            }
            _ => self.call(proc, call),
        }
    }

    fn observe(&mut self, proc: &str) -> Result<Observation, BackendError> {
        let pid = self.pid(proc)?;
        Ok(self.model.observe(pid, proc))
    }

    fn observe_summary(&mut self, proc: &str) -> Result<Observation, BackendError> {
        let pid = self.pid(proc)?;
        Ok(self.model.observe_summary(pid, proc))
    }

    fn observe_pages(
        &mut self,
        proc: &str,
        start: u64,
        end: u64,
    ) -> Result<PageRuns, BackendError> {
        let pid = self.pid(proc)?;
        Ok(self.model.observe_pages(pid, start, end))
    }

    fn read_bytes(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
    ) -> Result<Vec<Option<u8>>, BackendError> {
        let pid = self.pid(proc)?;
        Ok(self.model.peek_bytes(pid, addr, len))
    }

    fn check_invariants(&mut self) -> Result<(), Vec<String>> {
        self.model.check_invariants()
    }

    fn before_statement(&mut self, _line: u32, _text: &str, _loops: &[(u32, u64)]) {}

    fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
        Some(self.model.hw_events())
    }

    /// The hooks do something only when invariants are checked after
    /// every statement (set when the backend is built, never changed).
    fn statement_hooks(&self) -> bool {
        self.check_every_statement
    }

    fn after_statement(&mut self) -> Result<(), Vec<String>> {
        if self.check_every_statement {
            self.model.check_invariants()
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `call_same_proc` gives what `call` gives when the caller keeps its
    /// promise (the same process name as the previous call): through
    /// fork, exit, calls in a process that is gone, failing calls and
    /// machine-wide settings issued in a process that does not exist. Two
    /// backends run the same steps, one always through `call`; every
    /// result and the final state of every process agree.
    #[test]
    fn call_same_proc_answers_what_call_answers() {
        use ptlab_model::{MapFlags, Prot, ThpKnob, ThpMode};
        let base = 0x7f00_0000_0000u64;
        let mmap = |addr: u64| Call::Mmap {
            addr,
            len: 0x10000,
            prot: Prot::READ | Prot::WRITE,
            flags: MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED,
        };
        let write = |start: u64, tag: u64| Call::Access {
            start,
            len: 0x2000,
            write: true,
            tag: Some(tag),
        };
        let unmap = |addr: u64| Call::Munmap { addr, len: 0x1000 };
        let fork = |c: &str| Call::Fork {
            child: c.to_string(),
        };
        let thp = Call::SetThp {
            knob: ThpKnob::TopLevel,
            mode: ThpMode::Never,
        };
        let steps: Vec<(&str, Call)> = vec![
            ("main", mmap(base)),
            ("main", write(base, 1)),
            ("main", fork("a")),
            ("a", write(base + 0x2000, 2)),
            ("a", unmap(base)),
            ("a", unmap(base + 0x1000)),
            // A machine-wide setting named after no process, then a
            // process call in that name: no such process.
            ("b", thp.clone()),
            ("b", unmap(base)),
            ("b", unmap(base)),
            ("main", write(base + 0x4000, 3)),
            // A failing call keeps the process.
            ("main", unmap(base + 1)),
            ("main", unmap(base + 0x3000)),
            ("a", Call::Exit),
            ("a", unmap(base + 0x4000)),
            ("a", unmap(base + 0x4000)),
            ("main", fork("a")),
            ("main", fork("a")),
            ("a", write(base + 0x6000, 4)),
            ("a", thp),
            ("a", unmap(base + 0x6000)),
            ("a", fork("b")),
            ("b", write(base + 0x8000, 5)),
            ("b", Call::Exit),
            ("a", unmap(base + 0x8000)),
        ];
        let mut plain = ModelBackend::new(ModelConfig::default());
        let mut hinted = ModelBackend::new(ModelConfig::default());
        let mut hints = 0;
        for (i, (proc, call)) in steps.iter().enumerate() {
            let want = plain.call(proc, call);
            let same = i > 0 && steps[i - 1].0 == *proc;
            let got = if same {
                hints += 1;
                hinted.call_same_proc(proc, call)
            } else {
                hinted.call(proc, call)
            };
            assert_eq!(got, want, "step {i}: {proc} {call:?}");
        }
        assert!(hints >= 12, "{hints}");
        for proc in ["main", "a", "b"] {
            assert_eq!(hinted.observe(proc), plain.observe(proc), "process {proc}");
        }
    }

    /// The remembered name → pid of the last call follows fork and exit:
    /// a process that exits and is forked again under the same name is
    /// the new process, and an exited one is gone.
    #[test]
    fn the_last_pid_follows_fork_and_exit() {
        let mut b = ModelBackend::new(ModelConfig::default());
        let fork = Call::Fork {
            child: "c".to_string(),
        };
        let unmap = Call::Munmap {
            addr: 0x7f00_0000_0000,
            len: 4096,
        };
        for round in 0..3 {
            assert_eq!(b.call("main", &fork), Ok(0), "round {round}");
            assert_eq!(b.call("c", &unmap), Ok(0), "round {round}");
            assert_eq!(b.call("c", &unmap), Ok(0), "round {round}");
            assert_eq!(b.call("c", &Call::Exit), Ok(0), "round {round}");
            assert_eq!(
                b.call("c", &unmap),
                Err(BackendError::NoProcess("c".to_string())),
                "round {round}"
            );
            assert_eq!(b.call("main", &unmap), Ok(0), "round {round}");
        }
    }
}
