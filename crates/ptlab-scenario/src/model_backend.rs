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
        if let Call::Fork { child } = call {
            if self.pids.contains_key(child) {
                return Err(BackendError::ProcessExists(child.clone()));
            }
        }
        // Machine-wide settings run whatever process issues them.
        let pid = if call.acts_on_process() {
            match &self.last {
                Some((name, pid)) if name == proc => *pid,
                _ => {
                    let pid = self.pid(proc)?;
                    self.last = Some((proc.to_string(), pid));
                    pid
                }
            }
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
