//! The userfaultfd context as both halves of the kernel see it: `struct
//! userfaultfd_ctx` (owner mm, features), the table of open contexts, the
//! uapi constants and modes, and the ioctls' result convention. Data only:
//! the calls that create and use contexts are in the sibling files.
//!
//! Linux: fs/userfaultfd.c (struct userfaultfd_ctx), include/uapi/linux/userfaultfd.h.

use crate::types::errno::Errno;
use crate::types::Pid;
use bitflags::bitflags;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

pub use crate::types::UffdId;

/// `UFFD_API`.
pub const UFFD_API: u64 = 0xAA;
/// UFFD_FEATURE_EVENT_FORK.
pub const UFFD_FEATURE_EVENT_FORK: u64 = 1 << 1;
/// UFFD_FEATURE_EVENT_REMAP.
pub const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
/// UFFD_FEATURE_EVENT_REMOVE.
pub const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
/// UFFD_FEATURE_EVENT_UNMAP.
pub const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
/// UFFD_FEATURE_SIGBUS: a fault raises SIGBUS instead of queueing a message.
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
/// UFFD_FEATURE_WP_UNPOPULATED.
pub const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
/// UFFD_FEATURE_WP_ASYNC.
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
/// UFFD_FEATURE_MOVE (discovery only: MOVE works without requesting it).
pub const UFFD_FEATURE_MOVE: u64 = 1 << 16;
/// Every feature 6.18 reports (bits 0–16; `features=0x1FFFF` live, §1.5).
pub const UFFD_API_FEATURES: u64 = 0x1_FFFF;
/// Features the model refuses with ENOSYS: the non-cooperative events it
/// does not deliver, and asynchronous WP, which changes the fault rule.
pub const UFFD_UNMODELLED_FEATURES: u64 = UFFD_FEATURE_EVENT_FORK
    | UFFD_FEATURE_EVENT_REMAP
    | UFFD_FEATURE_EVENT_REMOVE
    | UFFD_FEATURE_EVENT_UNMAP
    | UFFD_FEATURE_WP_ASYNC;
/// ioctls of the descriptor: REGISTER, UNREGISTER, API (`0x8000000000000003` live).
pub const UFFD_API_IOCTLS: u64 = (1 << 63) | (1 << 1) | 1;
/// `_UFFDIO_WRITEPROTECT`.
pub(crate) const UFFDIO_WRITEPROTECT_BIT: u64 = 1 << 6;
/// `_UFFDIO_CONTINUE`.
pub(crate) const UFFDIO_CONTINUE_BIT: u64 = 1 << 7;
/// ioctls of a registered range: WAKE, COPY, ZEROPAGE, MOVE, WRITEPROTECT,
/// CONTINUE, POISON. Linux: UFFD_API_RANGE_IOCTLS.
pub const UFFD_API_RANGE_IOCTLS: u64 = 0x1FC;

bitflags! {
    /// `UFFDIO_REGISTER_MODE_*`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct RegisterMode: u64 {
        const MISSING = 1;
        const WP = 2;
        const MINOR = 4;
    }
}

bitflags! {
    /// `UFFDIO_COPY_MODE_*`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct CopyMode: u64 {
        const DONTWAKE = 1;
        const WP = 2;
    }
}

bitflags! {
    /// `UFFDIO_ZEROPAGE_MODE_*`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct ZeropageMode: u64 {
        const DONTWAKE = 1;
    }
}

bitflags! {
    /// `UFFDIO_MOVE_MODE_*`.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct MoveMode: u64 {
        const DONTWAKE = 1;
        const ALLOW_SRC_HOLES = 2;
    }
}

/// One userfaultfd context (`struct userfaultfd_ctx`).
#[derive(Clone, Debug)]
pub struct UffdCtx {
    /// The mm it was created in (`ctx->mm`): every ioctl acts there.
    pub mm: Pid,
    /// Features enabled by UFFDIO_API; `None` until then.
    pub features: Option<u64>,
}

/// Every open context.
#[derive(Clone, Debug, Default)]
pub struct UffdState {
    pub(crate) next: UffdId,
    pub(crate) ctxs: BTreeMap<UffdId, UffdCtx>,
    /// Where the last COPY/MOVE found its destination (`[0]`) and MOVE
    /// its source (`[1]`) VMA: a hint for the next ioctl's lookup
    /// ([`find_vma_hinted`]), never an answer by itself.
    pub(crate) vma_hints: [VmaHint; 2],
}

/// The range `[start, end)` of a VMA a lookup found (any mm).
pub(crate) type VmaHint = std::cell::Cell<Option<(u64, u64, usize)>>;

/// `vmas.find(addr)`, trying the VMA `hint` remembers first: when its
/// range holds `addr`, the tree's VMA at the hint's start is looked up
/// exactly (`VmaTree::get_at`, cheaper than `find`'s range search: the
/// position the hint remembers is tried before a search) and is
/// the answer if it contains `addr` — VMAs do not overlap, so it is the
/// one `find` returns, whatever changed since (the hint is not kept up to
/// date: every answer is the tree's own). Otherwise `find`, and the hint
/// remembers its answer. Test `hinted_lookups_answer_what_find_answers`.
pub(crate) fn find_vma_hinted<'a>(
    vmas: &'a crate::core::vma::VmaTree,
    hint: &VmaHint,
    addr: u64,
) -> Option<&'a crate::core::vma::Vma> {
    if let Some((start, end, pos)) = hint.get() {
        if start <= addr && addr < end {
            if let Some((v, at)) = vmas.get_at(start, pos) {
                if v.contains(addr) {
                    if at != pos {
                        hint.set(Some((start, end, at)));
                    }
                    return Some(v);
                }
            }
        }
    }
    let v = vmas.find(addr)?;
    // The position is found on the next hinted lookup.
    hint.set(Some((v.start, v.end, usize::MAX)));
    Some(v)
}

impl UffdState {
    pub fn get(&self, id: UffdId) -> Option<&UffdCtx> {
        self.ctxs.get(&id)
    }
    pub fn iter(&self) -> impl Iterator<Item = (UffdId, &UffdCtx)> {
        self.ctxs.iter().map(|(&i, c)| (i, c))
    }
}

/// What UFFDIO_API reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UffdApi {
    pub features: u64,
    pub ioctls: u64,
}

/// A failed UFFDIO_COPY / ZEROPAGE / MOVE. `field` is what the kernel left in
/// the struct's output field (`copy`, `zeropage`, `move`): `None` when it
/// failed before the operation started and left the field untouched,
/// `Some(-errno)` when nothing was done, `Some(bytes)` with `EAGAIN` on
/// partial progress (resume at +bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UffdError {
    pub errno: Errno,
    pub field: Option<i64>,
}

impl UffdError {
    pub(crate) fn untouched(errno: Errno) -> Self {
        UffdError { errno, field: None }
    }
}

impl std::fmt::Display for UffdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field {
            Some(v) => write!(f, "{} (field {v})", self.errno),
            None => write!(f, "{} (field untouched)", self.errno),
        }
    }
}

/// Where UFFDIO_COPY reads from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopySource {
    /// `src` in the calling process (may be unaligned).
    Addr(u64),
    /// A buffer outside every scenario VMA holding this tag in every page.
    Tag(u64),
}

/// Turn an ioctl's internal result into the user-visible one: the ioctl
/// returns 0 iff everything was done, EAGAIN with the byte count on partial
/// progress, the error (field = −errno) when nothing was done.
/// Linux: fs/userfaultfd.c userfaultfd_copy()/_zeropage()/_move() tails.
pub(crate) fn ioctl_result(done: u64, err: Option<Errno>, len: u64) -> Result<u64, UffdError> {
    if done == len {
        return Ok(done);
    }
    if done > 0 {
        return Err(UffdError {
            errno: Errno::EAGAIN,
            field: Some(done as i64),
        });
    }
    let errno = err.unwrap_or(Errno::EAGAIN);
    Err(UffdError {
        errno,
        field: Some(-i64::from(errno.code())),
    })
}

/// The userfaultfd descriptors of every process, by handle name: the part
/// of each process's file table (`files_struct`) the model needs.
#[derive(Clone, Debug, Default)]
pub struct UffdFds {
    /// Open contexts by handle name.
    names: BTreeMap<String, UffdId>,
    /// The handles each process holds a descriptor for.
    held: BTreeMap<Pid, BTreeSet<String>>,
    /// The last successful [`UffdFds::get`]: (pid, context, handle), so a
    /// loop of ioctls on one descriptor looks nothing up; cleared by every
    /// change of the maps (a model lookup cache, like the kernel's
    /// `fdget()` fast path for a single-threaded task: no event).
    last: RefCell<Option<(Pid, UffdId, String)>>,
}

impl UffdFds {
    /// The context `pid` reaches through `handle`; EBADF when it holds no
    /// descriptor for it (fs/userfaultfd.c: the ioctl's fdget() fails).
    pub(crate) fn get(&self, pid: Pid, handle: &str) -> Result<UffdId, Errno> {
        if let Some((p, id, h)) = &*self.last.borrow() {
            if *p == pid && h == handle {
                return Ok(*id);
            }
        }
        let held = self.held.get(&pid).is_some_and(|s| s.contains(handle));
        let id = self
            .names
            .get(handle)
            .copied()
            .filter(|_| held)
            .ok_or(Errno::EBADF)?;
        let mut last = self.last.borrow_mut();
        match &mut *last {
            Some((p, i, h)) => {
                (*p, *i) = (pid, id);
                h.clear();
                h.push_str(handle);
            }
            None => *last = Some((pid, id, handle.to_string())),
        }
        Ok(id)
    }

    /// fork(): the child holds every descriptor the parent holds
    /// (kernel/fork.c copy_files()).
    pub(crate) fn inherit(&mut self, parent: Pid, child: Pid) {
        self.last.get_mut().take();
        if let Some(fds) = self.held.get(&parent).cloned() {
            self.held.insert(child, fds);
        }
    }

    /// Whether a context named `handle` is open.
    pub(crate) fn is_open(&self, handle: &str) -> bool {
        self.names.contains_key(handle)
    }

    /// userfaultfd(2) in `pid`: context `id` opened as `handle`, its
    /// descriptor held by `pid`.
    pub(crate) fn open(&mut self, pid: Pid, handle: String, id: UffdId) {
        self.last.get_mut().take();
        self.held.entry(pid).or_default().insert(handle.clone());
        self.names.insert(handle, id);
    }

    /// The descriptors `pid` holds, closed (exit): the contexts whose last
    /// descriptor that was, to be released.
    pub(crate) fn close_all(&mut self, pid: Pid) -> Vec<UffdId> {
        self.last.get_mut().take();
        let mut gone = Vec::new();
        for handle in self.held.remove(&pid).unwrap_or_default() {
            if !self.held.values().any(|s| s.contains(&handle)) {
                if let Some(id) = self.names.remove(&handle) {
                    gone.push(id);
                }
            }
        }
        gone
    }
}

#[cfg(test)]
mod fds_tests {
    use super::*;

    /// `find_vma_hinted()` answers what `VmaTree::find` answers — the same
    /// VMA, or none — for random addresses while random mmap, munmap and
    /// mprotect calls split, merge, move and remove VMAs under two hints
    /// that are never reset. Fails when the hint's VMA is taken without
    /// checking that the tree's VMA at its start still contains the address.
    #[test]
    fn hinted_lookups_answer_what_find_answers() {
        use crate::types::uapi::{MapFlags, Prot};
        use crate::{Model, ModelConfig};
        const A: u64 = 0x7f00_0000_0000;
        let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        let mut m = Model::new(ModelConfig::default());
        let hints: [VmaHint; 2] = Default::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut hits, mut misses) = (0, 0);
        for _ in 0..400 {
            let addr = A + next(64) * 0x1000;
            let len = (1 + next(16)) * 0x1000;
            let prot = [Prot::READ, Prot::READ | Prot::WRITE, Prot::empty()][next(3) as usize];
            let _ = match next(3) {
                0 => m.mmap(1, addr, len, prot, fixed).map(|_| ()),
                1 => m.munmap(1, addr, len),
                _ => m.mprotect(1, addr, len, prot),
            };
            for _ in 0..8 {
                let a = A - 0x2000 + next(70) * 0x1000;
                let hint = &hints[next(2) as usize];
                let vmas = &m.procs[&1].vmas;
                let want = vmas.find(a);
                let got = find_vma_hinted(vmas, hint, a);
                assert_eq!(got, want, "{a:#x}");
                assert!(got.is_none_or(|g| std::ptr::eq(g, want.unwrap())));
                match got {
                    Some(_) => hits += 1,
                    None => misses += 1,
                }
            }
        }
        assert!(hits > 100 && misses > 100, "{hits} {misses}");
    }

    #[test]
    fn fds_get_forgets_its_last_hit_when_the_table_changes() {
        let mut fds = UffdFds::default();
        fds.open(1, "u".to_string(), 7);
        assert_eq!(fds.get(1, "u"), Ok(7));
        assert_eq!(fds.get(1, "u"), Ok(7)); // the remembered hit
        assert_eq!(fds.get(2, "u"), Err(Errno::EBADF)); // another process
        fds.inherit(1, 2);
        assert_eq!(fds.get(2, "u"), Ok(7));
        // Closed by exit: the remembered (2, "u") must not answer.
        let _ = fds.close_all(2);
        assert_eq!(fds.get(2, "u"), Err(Errno::EBADF));
        assert_eq!(fds.get(1, "u"), Ok(7));
        let _ = fds.close_all(1);
        assert_eq!(fds.get(1, "u"), Err(Errno::EBADF));
        // Reopened under the same name with another context.
        fds.open(1, "u".to_string(), 9);
        assert_eq!(fds.get(1, "u"), Ok(9));
    }
}
