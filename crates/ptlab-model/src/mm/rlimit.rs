//! Resource limits and the one capability that bypasses them: what
//! RLIMIT_AS, RLIMIT_DATA and RLIMIT_MEMLOCK refuse, and the counters
//! (`total_vm`, `data_vm`, `locked_vm`) they are checked against.
//!
//! Linux: mm/mmap.c may_expand_vm(), mm/internal.h mlock_future_ok(),
//! mm/mlock.c can_do_mlock(), count_mm_mlocked_page_nr(), mlock_fixup();
//! mm/vma.c vm_stat_account() and is_data_mapping(). Checked live on
//! 6.18.44 with an unprivileged worker (CAP_IPC_LOCK dropped):
//! docs/ops/rlimits.md.
//!
//! `total_vm` and `data_vm` are derived from the VMAs: every kernel path
//! that changes a VMA's size or its data-ness calls vm_stat_account() with
//! that change. `locked_vm` is derived too, plus one counter: 6.18's
//! MREMAP_DONTUNMAP clears VM_LOCKED on the whole source VMA without
//! uncharging it (mm/mremap.c dontunmap_complete(): "Because we won't unmap
//! we don't need to touch locked_vm"), so those pages stay in VmLck until
//! the process exits. Measured live: an mlocked 4-page VMA, DONTUNMAP of
//! its first 2 pages → VmLck 24 kB; after unmapping everything, 16 kB.

use crate::core::addr::PAGE_SIZE;
use crate::core::vma::VmFlags;
use crate::mm::mm::Mm;

pub use crate::core::resource::{Resource, Rlimits, MLOCK_LIMIT_DEFAULT, RLIM_INFINITY};

/// A private writable mapping (not a stack: the model has none).
/// Linux: mm/internal.h is_data_mapping().
pub fn is_data_mapping(flags: VmFlags) -> bool {
    flags.contains(VmFlags::WRITE) && !flags.contains(VmFlags::SHARED)
}

impl Mm {
    /// `mm->total_vm` in pages (VmSize).
    pub fn total_vm(&self) -> u64 {
        self.vmas.iter().map(|v| v.pages()).sum()
    }

    /// `mm->data_vm` in pages (VmData).
    pub fn data_vm(&self) -> u64 {
        self.vmas
            .iter()
            .filter(|v| is_data_mapping(v.flags))
            .map(|v| v.pages())
            .sum()
    }

    /// `mm->locked_vm` in pages (VmLck): VM_LOCKED VMAs (VM_LOCKONFAULT
    /// ones too, faulted or not) plus what DONTUNMAP never uncharged.
    pub fn locked_vm(&self) -> u64 {
        let locked: u64 = self
            .vmas
            .iter()
            .filter(|v| v.flags.contains(VmFlags::LOCKED))
            .map(|v| v.pages())
            .sum();
        locked + self.locked_vm_stale
    }

    /// RLIMIT_AS, then RLIMIT_DATA for data mappings, for `npages` more
    /// pages with `flags`. Linux: mm/mmap.c may_expand_vm() (the RLIMIT_DATA
    /// == 0 Valgrind workaround compares against the hard limit, infinite
    /// here, so it passes; `ignore_rlimit_data` is off by default).
    pub fn may_expand_vm(&self, flags: VmFlags, npages: u64) -> bool {
        let lim = &self.rlimits;
        if lim.as_bytes != RLIM_INFINITY
            && self.total_vm().saturating_add(npages) > lim.as_bytes / PAGE_SIZE
        {
            return false;
        }
        if is_data_mapping(flags)
            && lim.data_bytes != RLIM_INFINITY
            && self.data_vm().saturating_add(npages) > lim.data_bytes / PAGE_SIZE
            && lim.data_bytes != 0
        {
            return false;
        }
        true
    }

    /// May `bytes` more become locked for a mapping with `flags`?
    /// Linux: mm/internal.h mlock_future_ok().
    pub fn mlock_future_ok(&self, flags: VmFlags, bytes: u64) -> bool {
        if !flags.contains(VmFlags::LOCKED) || self.rlimits.cap_ipc_lock {
            return true;
        }
        let locked = (bytes / PAGE_SIZE).saturating_add(self.locked_vm());
        locked <= self.rlimits.memlock_bytes / PAGE_SIZE
    }

    /// Linux: mm/mlock.c can_do_mlock(): a non-zero RLIMIT_MEMLOCK or
    /// CAP_IPC_LOCK.
    pub fn can_do_mlock(&self) -> bool {
        self.rlimits.memlock_bytes != 0 || self.rlimits.cap_ipc_lock
    }

    /// Pages of VM_LOCKED VMAs inside `[start, start + len)`.
    /// Linux: mm/mlock.c count_mm_mlocked_page_nr().
    pub fn count_mlocked_pages(&self, start: u64, len: u64) -> u64 {
        let end = start.saturating_add(len);
        self.vmas
            .iter()
            .filter(|v| v.flags.contains(VmFlags::LOCKED) && v.start < end && start < v.end)
            .map(|v| (v.end.min(end) - v.start.max(start)) / PAGE_SIZE)
            .sum()
    }

    /// The RLIMIT_MEMLOCK test of do_mlock(): `len` bytes from `start`
    /// may be locked (already-locked pages in the range count once).
    /// Linux: mm/mlock.c do_mlock().
    pub fn mlock_within_limit(&self, start: u64, len: u64) -> bool {
        if self.rlimits.cap_ipc_lock {
            return true;
        }
        let limit = self.rlimits.memlock_bytes / PAGE_SIZE;
        let mut locked = (len / PAGE_SIZE).saturating_add(self.locked_vm());
        if locked > limit {
            locked -= self.count_mlocked_pages(start, len);
        }
        locked <= limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Model, ModelConfig};
    use crate::types::errno::Errno;
    use crate::types::uapi::{MapFlags, Prot};

    const P: u64 = PAGE_SIZE;

    fn model() -> Model {
        Model::new(ModelConfig::default())
    }

    fn anon(m: &mut Model, pages: u64, prot: Prot) -> u64 {
        m.mmap(
            1,
            0,
            pages * P,
            prot,
            MapFlags::PRIVATE | MapFlags::ANONYMOUS,
        )
        .unwrap()
    }

    #[test]
    fn counters_follow_the_vmas() {
        let mut m = model();
        let a = anon(&mut m, 4, Prot::READ | Prot::WRITE);
        anon(&mut m, 2, Prot::READ);
        let mm = m.mm(1).unwrap();
        assert_eq!((mm.total_vm(), mm.data_vm(), mm.locked_vm()), (6, 4, 0));
        m.mlock(1, a, 3 * P, false).unwrap();
        assert_eq!(m.mm(1).unwrap().locked_vm(), 3);
        // mlock2(ONFAULT) charges the whole range, faulted or not.
        m.mlock(1, a + 3 * P, P, true).unwrap();
        assert_eq!(m.mm(1).unwrap().locked_vm(), 4);
    }

    #[test]
    fn rlimit_as_counts_every_mapping_data_only_writable_ones() {
        let mut m = model();
        anon(&mut m, 2, Prot::READ);
        m.set_rlimit(1, Resource::As, 6 * P).unwrap();
        m.set_rlimit(1, Resource::Data, 3 * P).unwrap();
        let rw = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
        // 2 + 4 read-only pages: within RLIMIT_AS; RLIMIT_DATA not involved.
        assert!(m.mmap(1, 0, 4 * P, Prot::READ, rw).is_ok());
        assert_eq!(
            m.mmap(1, 0, P, Prot::READ, rw),
            Err(Errno::ENOMEM),
            "7 pages > RLIMIT_AS"
        );
        m.set_rlimit(1, Resource::As, RLIM_INFINITY).unwrap();
        assert!(m.mmap(1, 0, 3 * P, Prot::READ | Prot::WRITE, rw).is_ok());
        assert_eq!(
            m.mmap(1, 0, P, Prot::READ | Prot::WRITE, rw),
            Err(Errno::ENOMEM),
            "4 data pages > RLIMIT_DATA"
        );
        assert!(m.mmap(1, 0, P, Prot::READ, rw).is_ok(), "not data");
    }

    #[test]
    fn mlock_limit_counts_already_locked_pages_once() {
        let mut m = model();
        let a = anon(&mut m, 16, Prot::READ | Prot::WRITE);
        m.drop_cap_ipc_lock(1).unwrap();
        m.set_rlimit(1, Resource::Memlock, 8 * P).unwrap();
        m.mlock(1, a, 8 * P, false).unwrap();
        assert_eq!(m.mlock(1, a, 9 * P, false), Err(Errno::ENOMEM));
        // Relocking what is locked fits: 8 + 8 - 8 <= 8.
        m.mlock(1, a, 8 * P, false).unwrap();
        m.munlock(1, a + 2 * P, P).unwrap();
        assert_eq!(m.mm(1).unwrap().locked_vm(), 7);
        assert_eq!(m.mlock(1, a, 9 * P, false), Err(Errno::ENOMEM));
        m.mlock(1, a + 10 * P, P, true).unwrap();
        assert_eq!(m.mm(1).unwrap().locked_vm(), 8);
    }

    #[test]
    fn zero_memlock_limit_is_eperm_without_the_capability_only() {
        let mut m = model();
        let a = anon(&mut m, 2, Prot::READ | Prot::WRITE);
        m.set_rlimit(1, Resource::Memlock, 0).unwrap();
        m.mlock(1, a, P, false).unwrap();
        m.munlock(1, a, P).unwrap();
        m.drop_cap_ipc_lock(1).unwrap();
        assert_eq!(m.mlock(1, a, P, false), Err(Errno::EPERM));
        assert_eq!(m.mlock(1, a, P, true), Err(Errno::EPERM));
        // munlock() never checks.
        assert_eq!(m.munlock(1, a, P), Ok(()));
        let locked = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::LOCKED;
        assert_eq!(
            m.mmap(1, 0, P, Prot::READ | Prot::WRITE, locked),
            Err(Errno::EPERM)
        );
    }

    #[test]
    fn map_locked_over_the_limit_is_eagain() {
        let mut m = model();
        m.drop_cap_ipc_lock(1).unwrap();
        m.set_rlimit(1, Resource::Memlock, 8 * P).unwrap();
        let locked = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::LOCKED;
        let rw = Prot::READ | Prot::WRITE;
        assert_eq!(m.mmap(1, 0, 9 * P, rw, locked), Err(Errno::EAGAIN));
        let a = m.mmap(1, 0, 8 * P, rw, locked).unwrap();
        assert_eq!(m.mm(1).unwrap().locked_vm(), 8);
        // MAP_LOCKED populates like MAP_POPULATE.
        assert_eq!(m.mm(1).unwrap().rss_anon, 8);
        // MAP_FIXED over locked pages still asks for the whole length.
        assert_eq!(
            m.mmap(1, a, P, rw, locked | MapFlags::FIXED),
            Err(Errno::EAGAIN)
        );
    }

    #[test]
    fn dontunmap_leaves_the_whole_source_vma_charged() {
        let mut m = model();
        let a = anon(&mut m, 4, Prot::READ | Prot::WRITE);
        m.mlock(1, a, 4 * P, false).unwrap();
        let flags =
            crate::types::uapi::MremapFlags::MAYMOVE | crate::types::uapi::MremapFlags::DONTUNMAP;
        let d = m.mremap(1, a, 2 * P, 2 * P, flags, 0).unwrap();
        assert_eq!(m.mm(1).unwrap().locked_vm(), 6);
        m.munmap(1, a, 4 * P).unwrap();
        m.munmap(1, d, 2 * P).unwrap();
        assert_eq!(m.mm(1).unwrap().locked_vm(), 4);
    }

    #[test]
    fn growing_a_locked_mapping_past_the_limit_is_eagain() {
        // spec/mremap.md §11 #28.
        let mut m = model();
        let a = anon(&mut m, 2, Prot::READ | Prot::WRITE);
        m.mlock(1, a, 2 * P, false).unwrap();
        m.drop_cap_ipc_lock(1).unwrap();
        m.set_rlimit(1, Resource::Memlock, 2 * P).unwrap();
        let maymove = crate::types::uapi::MremapFlags::MAYMOVE;
        assert_eq!(m.mremap(1, a, 2 * P, 4 * P, maymove, 0), Err(Errno::EAGAIN));
        m.set_rlimit(1, Resource::Memlock, 4 * P).unwrap();
        assert!(m.mremap(1, a, 2 * P, 4 * P, maymove, 0).is_ok());
    }

    #[test]
    fn fork_inherits_limits_but_not_locked_pages() {
        let mut m = model();
        let a = anon(&mut m, 4, Prot::READ | Prot::WRITE);
        m.mlock(1, a, 4 * P, false).unwrap();
        m.drop_cap_ipc_lock(1).unwrap();
        m.set_rlimit(1, Resource::Memlock, 4 * P).unwrap();
        let c = m.fork(1).unwrap();
        let mm = m.mm(c).unwrap();
        assert_eq!(mm.rlimits, m.mm(1).unwrap().rlimits);
        assert_eq!(mm.locked_vm(), 0);
    }
}
