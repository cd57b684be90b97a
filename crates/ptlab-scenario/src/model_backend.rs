//! [`Backend`] implementation over the executable model.

use crate::ast::UffdMode;
use crate::backend::{Backend, BackendError, MremapFlags, PrctlThp, UffdMoveFlags};
use ptlab_model::{
    observe::PageRuns, AccessFault, Advice, CopySource, Errno, MapFlags, Model, ModelConfig,
    Observation, Pid, Prot, ThpKnob, ThpMode, UffdError, UffdId,
};
use std::collections::{BTreeSet, HashMap};

/// Runs scenarios against [`ptlab_model::Model`].
///
/// Maps process names to model pids (`main` is [`Model::main_pid`]). With
/// [`ModelBackend::check_every_statement`] on, the model's invariants are
/// recomputed after every statement, so a bug is reported at the line that
/// introduced it rather than at the next `expect invariants`.
pub struct ModelBackend {
    model: Model,
    pids: HashMap<String, Pid>,
    /// Open userfaultfd handles by name (a process's own handle is named
    /// after the process).
    uffds: HashMap<String, UffdId>,
    /// The handles each process holds a descriptor for (its own, and those
    /// inherited through fork).
    uffd_fds: HashMap<String, BTreeSet<String>>,
    /// The handle `uffd ... via NAME` selected for the current operation.
    uffd_selected: crate::backend::UffdSelection,
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
            uffds: HashMap::new(),
            uffd_fds: HashMap::new(),
            uffd_selected: Default::default(),
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

    /// The userfaultfd the process's next operation uses (its own handle,
    /// or the one `via` selected), as `(pid, context)`; EBADF when the
    /// process holds no descriptor for it.
    fn uffd(&self, proc: &str) -> Result<(Pid, UffdId), BackendError> {
        let pid = self.pid(proc)?;
        let handle = self.uffd_selected.handle(proc);
        let held = self.uffd_fds.get(proc).is_some_and(|s| s.contains(handle));
        let id = self
            .uffds
            .get(handle)
            .copied()
            .filter(|_| held)
            .ok_or(BackendError::Errno(Errno::EBADF))?;
        Ok((pid, id))
    }

    /// Whether any live process still holds a descriptor for `handle`.
    fn uffd_held(&self, handle: &str) -> bool {
        self.uffd_fds.values().any(|s| s.contains(handle))
    }

    /// A failed COPY/ZEROPAGE/MOVE: the errno with the struct's output
    /// field (0 when the kernel left it untouched).
    fn uffd_error(e: UffdError) -> BackendError {
        BackendError::ErrnoWithResult {
            errno: e.errno,
            result: e.field.unwrap_or(0),
        }
    }

    fn access_error(proc: &str, fault: AccessFault) -> BackendError {
        match fault {
            AccessFault::Segv { addr } => BackendError::Segv { addr },
            AccessFault::NoProcess => BackendError::NoProcess(proc.to_string()),
            AccessFault::Uffd { addr } => BackendError::Uffd { addr },
            // Out of model memory and anything added later: not something a
            // scenario can expect, so the interpreter stops with it.
            other => BackendError::Other(other.to_string()),
        }
    }
}

impl Backend for ModelBackend {
    fn mmap(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MapFlags,
    ) -> Result<u64, BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .mmap(pid, addr, len, prot, flags)
            .map_err(BackendError::Errno)
    }

    fn munmap(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .munmap(pid, addr, len)
            .map_err(BackendError::Errno)
    }

    fn madvise(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        advice: Advice,
    ) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .madvise(pid, addr, len, advice)
            .map_err(BackendError::Errno)
    }

    fn mprotect(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        prot: Prot,
    ) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .mprotect(pid, addr, len, prot)
            .map_err(BackendError::Errno)
    }

    fn mlock(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        onfault: bool,
    ) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .mlock(pid, addr, len, onfault)
            .map_err(BackendError::Errno)
    }

    fn munlock(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .munlock(pid, addr, len)
            .map_err(BackendError::Errno)
    }

    fn mseal(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .mseal(pid, addr, len, 0)
            .map_err(BackendError::Errno)
    }

    fn mremap(
        &mut self,
        proc: &str,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: MremapFlags,
    ) -> Result<u64, BackendError> {
        use ptlab_model::MremapFlags as F;
        let pid = self.pid(proc)?;
        let mut bits = F::empty();
        bits.set(F::MAYMOVE, flags.maymove);
        bits.set(F::FIXED, flags.fixed.is_some());
        bits.set(F::DONTUNMAP, flags.dontunmap);
        // new_addr is 0 unless `fixed NEWADDR` gives it (the scenario
        // language has no DONTUNMAP hint).
        self.model
            .mremap(pid, addr, old_len, new_len, bits, flags.fixed.unwrap_or(0))
            .map_err(BackendError::Errno)
    }

    fn read(&mut self, proc: &str, addr: u64) -> Result<u64, BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .read(pid, addr)
            .map_err(|f| Self::access_error(proc, f))
    }

    fn write(&mut self, proc: &str, addr: u64, tag: u64) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .write(pid, addr, tag)
            .map_err(|f| Self::access_error(proc, f))
    }

    fn access(
        &mut self,
        proc: &str,
        start: u64,
        len: u64,
        write: bool,
        tag: Option<u64>,
    ) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .access_range(pid, start, len, write, tag)
            .map_err(|f| Self::access_error(proc, f))
    }

    fn set_thp(&mut self, knob: ThpKnob, mode: ThpMode) -> Result<(), BackendError> {
        self.model.set_thp(knob, mode).map_err(BackendError::Errno)
    }

    fn set_use_zero_page(&mut self, on: bool) -> Result<(), BackendError> {
        self.model.set_use_zero_page(on);
        Ok(())
    }

    fn set_swap(&mut self, bytes: u64) -> Result<(), BackendError> {
        self.model.set_swap(bytes).map_err(BackendError::Errno)
    }

    fn set_before(&mut self, set: ptlab_model::Before) -> Result<(), BackendError> {
        self.model.set_before(set);
        Ok(())
    }

    fn fork(&mut self, parent: &str, child: &str) -> Result<(), BackendError> {
        if self.pids.contains_key(child) {
            return Err(BackendError::ProcessExists(child.to_string()));
        }
        let pid = self.pid(parent)?;
        let child_pid = self.model.fork(pid).map_err(BackendError::Errno)?;
        self.pids.insert(child.to_string(), child_pid);
        // The child inherits the parent's descriptors (not its registrations).
        if let Some(fds) = self.uffd_fds.get(parent).cloned() {
            self.uffd_fds.insert(child.to_string(), fds);
        }
        Ok(())
    }

    fn exit(&mut self, proc: &str) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model.exit(pid).map_err(BackendError::Errno)?;
        self.pids.remove(proc);
        self.uffd_selected.forget(proc);
        // exit closes the process's descriptors; a context goes away with
        // its last descriptor.
        for handle in self.uffd_fds.remove(proc).unwrap_or_default() {
            if !self.uffd_held(&handle) {
                if let Some(id) = self.uffds.remove(&handle) {
                    let _ = self.model.uffd_close(id);
                }
            }
        }
        Ok(())
    }

    /// userfaultfd(2) then UFFDIO_API with `UFFD_FEATURE_SIGBUS`, as the
    /// live harness opens it; a second `uffd open` in a process is EBUSY.
    fn prctl_thp_disable(&mut self, proc: &str, call: PrctlThp) -> Result<u64, BackendError> {
        let pid = self.pid(proc)?;
        match call {
            PrctlThp::Set { disable, flags } => self
                .model
                .prctl_set_thp_disable(pid, disable, flags)
                .map(|()| 0),
            PrctlThp::Get => self.model.prctl_get_thp_disable(pid),
        }
        .map_err(BackendError::Errno)
    }

    fn setrlimit(
        &mut self,
        proc: &str,
        resource: ptlab_model::Resource,
        bytes: u64,
    ) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .set_rlimit(pid, resource, bytes)
            .map_err(BackendError::Errno)
    }

    fn fill_vmas(&mut self, proc: &str, addr: u64, headroom: u64) -> Result<u64, BackendError> {
        let pid = self.pid(proc)?;
        let headroom = usize::try_from(headroom).map_err(|_| BackendError::Errno(Errno::EINVAL))?;
        self.model
            .fill_vmas(pid, addr, headroom)
            .map_err(BackendError::Errno)
    }

    fn drop_cap_ipc_lock(&mut self, proc: &str) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        self.model
            .drop_cap_ipc_lock(pid)
            .map_err(BackendError::Errno)
    }

    fn uffd_open(&mut self, proc: &str) -> Result<(), BackendError> {
        self.uffd_create(proc, None, true)
    }

    fn uffd_create(
        &mut self,
        proc: &str,
        name: Option<&str>,
        api: bool,
    ) -> Result<(), BackendError> {
        let pid = self.pid(proc)?;
        let handle = name.unwrap_or(proc).to_string();
        if self.uffds.contains_key(&handle) {
            return Err(BackendError::Errno(Errno::EBUSY));
        }
        let id = self.model.uffd_open(pid).map_err(BackendError::Errno)?;
        if api {
            if let Err(e) = self.model.uffd_api(
                id,
                ptlab_model::uffd::UFFD_API,
                ptlab_model::uffd::UFFD_FEATURE_SIGBUS,
            ) {
                let _ = self.model.uffd_close(id);
                return Err(BackendError::Errno(e));
            }
        }
        self.uffds.insert(handle.clone(), id);
        self.uffd_fds
            .entry(proc.to_string())
            .or_default()
            .insert(handle);
        Ok(())
    }

    fn uffd_api(&mut self, proc: &str, api: u64, features: u64) -> Result<u64, BackendError> {
        let (_, id) = self.uffd(proc)?;
        self.model
            .uffd_api(id, api, features | ptlab_model::uffd::UFFD_FEATURE_SIGBUS)
            .map(|a| a.features)
            .map_err(BackendError::Errno)
    }

    fn uffd_select(&mut self, proc: &str, handle: Option<&str>) -> Result<(), BackendError> {
        self.pid(proc)?;
        self.uffd_selected.select(proc, handle);
        Ok(())
    }

    fn uffd_register(
        &mut self,
        proc: &str,
        addr: u64,
        len: u64,
        mode: UffdMode,
    ) -> Result<(), BackendError> {
        let (_, id) = self.uffd(proc)?;
        let bits = u64::from(mode.missing) | (u64::from(mode.wp) << 1);
        self.model
            .uffd_register(id, addr, len, bits)
            .map(|_| ())
            .map_err(BackendError::Errno)
    }

    fn uffd_unregister(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), BackendError> {
        let (_, id) = self.uffd(proc)?;
        self.model
            .uffd_unregister(id, addr, len)
            .map_err(BackendError::Errno)
    }

    fn uffd_copy(
        &mut self,
        proc: &str,
        dst: u64,
        src: u64,
        len: u64,
        tag: Option<u64>,
    ) -> Result<u64, BackendError> {
        let (pid, id) = self.uffd(proc)?;
        let src = tag.map_or(CopySource::Addr(src), CopySource::Tag);
        self.model
            .uffd_copy(pid, id, dst, src, len, 0)
            .map_err(Self::uffd_error)
    }

    fn uffd_zeropage(&mut self, proc: &str, dst: u64, len: u64) -> Result<u64, BackendError> {
        let (_, id) = self.uffd(proc)?;
        self.model
            .uffd_zeropage(id, dst, len, 0)
            .map_err(Self::uffd_error)
    }

    fn uffd_move(
        &mut self,
        proc: &str,
        dst: u64,
        src: u64,
        len: u64,
        flags: UffdMoveFlags,
    ) -> Result<u64, BackendError> {
        let (pid, id) = self.uffd(proc)?;
        let mode = u64::from(flags.dontwake) | (u64::from(flags.allow_src_holes) << 1);
        self.model
            .uffd_move(pid, id, dst, src, len, mode)
            .map_err(Self::uffd_error)
    }

    fn observe(&mut self, proc: &str) -> Result<Observation, BackendError> {
        let pid = self.pid(proc)?;
        Ok(self.model.observe(pid, proc))
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

    fn check_invariants(&mut self) -> Result<(), Vec<String>> {
        self.model.check_invariants()
    }

    fn hw_events(&self) -> Option<ptlab_model::HwEvents> {
        Some(self.model.hw_events())
    }

    fn after_statement(&mut self) -> Result<(), Vec<String>> {
        if self.check_every_statement {
            self.model.check_invariants()
        } else {
            Ok(())
        }
    }
}
