//! userfaultfd on private anonymous memory: the context and its API
//! handshake, UFFDIO_REGISTER / UNREGISTER, and the three range ioctls that
//! populate memory: UFFDIO_COPY, UFFDIO_ZEROPAGE and UFFDIO_MOVE.
//!
//! Split the way the kernel splits it: [`ctx`] is the context
//! (`struct userfaultfd_ctx`, the uapi constants and the ioctl result
//! convention), [`register`] the descriptor and its registration ioctls
//! (fs/userfaultfd.c), [`mfill`] UFFDIO_COPY / ZEROPAGE (mm/userfaultfd.c
//! mfill_atomic()), [`move_pages`] UFFDIO_MOVE (mm/userfaultfd.c
//! move_pages(), mm/huge_memory.c move_pages_huge_pmd()).
//!
//! The fault rule itself (an access to a missing page of a MISSING range
//! goes to userfaultfd) lives where faults live, in [`crate::mm::fault`]; it
//! reports [`crate::AccessFault::Uffd`]. The model delivers no messages and
//! runs no handler thread: a scenario resolves faults with COPY, ZEROPAGE or
//! MOVE and retries the access.
//!
//! Linux: fs/userfaultfd.c (userfaultfd_api, _register, _unregister, _copy,
//! _zeropage, _move), mm/userfaultfd.c (mfill_atomic, move_pages,
//! move_pages_pte(s), move_present_pte(s), userfaultfd_register_range,
//! userfaultfd_clear_vma), mm/huge_memory.c move_pages_huge_pmd(),
//! include/linux/userfaultfd_k.h. Rule tags (§7.3 …) label the
//! rules as stated beside them, each with its kernel function.
//!
//! The seed change here is 6.18's TLB-flush batching of UFFDIO_MOVE
//! (`Before::UFFD_MOVE_BATCH`): `move_pages.rs` move_present_ptes_batched()
//! moves a run of present pages under one page-table lock pair with one
//! ranged flush; move_present_pte_per_page() is the 6.8–6.17 algorithm, one
//! page per step with a flush each. Results are identical; only the hardware work
//! differs.
//!
//! Not modelled: the non-cooperative events (FORK, REMAP, REMOVE, UNMAP —
//! requesting them gives ENOSYS, so `mmap_changing` is never set), message
//! delivery and wake-ups (DONTWAKE is validated and otherwise ignored),
//! UFFDIO_WAKE / WRITEPROTECT / CONTINUE / POISON, FOLL_PIN pins (so the
//! "maybe DMA-pinned" EBUSY never happens), and lock contention (every
//! internal EAGAIN retry of §7.3.5 succeeds at once in a single-threaded
//! model).

pub mod ctx;
mod fused;
pub mod mfill;
pub mod move_pages;
pub mod register;

// The flat path `crate::uffd::…` of the other crates.
pub use ctx::*;

#[cfg(test)]
mod tests {
    use super::mfill::copied_page;
    use super::*;
    use crate::core::arch::{Entry, LeafFlags};
    use crate::core::observe::PageState;
    use crate::core::stats::{MthpStat, VmEvent};
    use crate::mm::batch::Before;
    use crate::model::Model;
    use crate::types::errno::Errno;
    use crate::types::AccessFault;
    use crate::{Advice, ArchKind, MapFlags, ModelConfig, Prot, ThpKnob, ThpMode};

    const DST: u64 = 0x7f00_0000_0000;
    const SRC: u64 = 0x7f10_0000_0000;
    const RW: Prot = Prot::READ.union(Prot::WRITE);

    fn fixed() -> MapFlags {
        MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED
    }

    /// A model with `dst` (registered MISSING) and `src` areas of `len`.
    fn setup(arch: ArchKind, len: u64) -> (Model, UffdId) {
        let mut m = Model::new(ModelConfig::for_arch(arch));
        m.mmap(1, DST, len, RW, fixed()).unwrap();
        m.mmap(1, SRC, len, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        assert_eq!(m.uffd_register(u, DST, len, 1), Ok(0x13C));
        (m, u)
    }

    fn state(m: &Model, va: u64) -> PageState {
        m.observe_pages(1, va, va + 4096)[0].state.clone()
    }

    fn pfn_of(m: &Model, va: u64) -> u64 {
        match state(m, va) {
            PageState::Anon(a) => a.pfn,
            s => panic!("{va:#x}: {s:?}"),
        }
    }

    fn check(m: &Model) {
        m.check_invariants().unwrap();
    }

    #[test]
    fn api_once_and_before_api() {
        let mut m = Model::new(ModelConfig::default());
        m.mmap(1, DST, 0x4000, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        // §10.2: REGISTER before API, bad api, unknown feature.
        assert_eq!(m.uffd_register(u, DST, 0x4000, 1), Err(Errno::EINVAL));
        assert_eq!(m.uffd_api(u, 0xAB, 0), Err(Errno::EINVAL));
        assert_eq!(m.uffd_api(u, UFFD_API, 1 << 40), Err(Errno::EINVAL));
        // §10.1: once.
        let api = m.uffd_api(u, UFFD_API, 0).unwrap();
        assert_eq!(api.features, 0x1FFFF);
        assert_ne!(api.features & UFFD_FEATURE_MOVE, 0);
        assert_eq!(api.ioctls, 0x8000_0000_0000_0003);
        assert_eq!(m.uffd_api(u, UFFD_API, 0), Err(Errno::EINVAL));
        // Non-cooperative events are not modelled.
        let v = m.uffd_open(1).unwrap();
        assert_eq!(
            m.uffd_api(v, UFFD_API, UFFD_FEATURE_EVENT_REMOVE),
            Err(Errno::ENOSYS)
        );
        assert!(m.uffd_api(v, UFFD_API, UFFD_FEATURE_SIGBUS).is_ok());
    }

    #[test]
    fn register_modes_and_errors() {
        let mut m = Model::new(ModelConfig::default());
        m.mmap(1, DST, 0x10000, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        // §10.3.
        assert_eq!(m.uffd_register(u, DST, 0x1000, 1), Ok(0x13C));
        assert_eq!(m.uffd_register(u, DST + 0x2000, 0x1000, 3), Ok(0x17C));
        assert_eq!(m.uffd_register(u, DST, 0x1000, 4), Err(Errno::EINVAL));
        assert_eq!(m.uffd_register(u, DST, 0x1000, 0), Err(Errno::EINVAL));
        assert_eq!(m.uffd_register(u, DST, 0x1000, 8), Err(Errno::EINVAL));
        assert_eq!(m.uffd_register(u, DST + 1, 0x1000, 1), Err(Errno::EINVAL));
        assert_eq!(m.uffd_register(u, DST, 100, 1), Err(Errno::EINVAL));
        assert_eq!(
            m.uffd_register(u, 0x1000_0000, 0x1000, 1),
            Err(Errno::EINVAL)
        );
        // smaps flags and the split VMAs.
        let obs = m.observe(1, "t");
        let flags: Vec<String> = obs.maps.iter().map(|e| e.vm_flags.join(" ")).collect();
        assert_eq!(
            flags,
            vec![
                "rd wr mr mw me um ac",
                "rd wr mr mw me ac",
                "rd wr mr mw me um uw ac",
                "rd wr mr mw me ac"
            ]
        );
        // §10.4: another context.
        let v = m.uffd_open(1).unwrap();
        m.uffd_api(v, UFFD_API, 0).unwrap();
        assert_eq!(m.uffd_register(v, DST, 0x1000, 1), Err(Errno::EBUSY));
        assert_eq!(m.uffd_unregister(v, DST, 0x1000), Err(Errno::EINVAL));
        // Unregister re-merges.
        m.uffd_unregister(u, DST, 0x10000).unwrap();
        assert_eq!(m.observe(1, "t").maps.len(), 1);
        check(&m);
    }

    #[test]
    fn contexts_block_merges() {
        let mut m = Model::new(ModelConfig::default());
        m.mmap(1, DST, 0x8000, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        let v = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        m.uffd_api(v, UFFD_API, 0).unwrap();
        m.uffd_register(u, DST, 0x4000, 1).unwrap();
        m.uffd_register(v, DST + 0x4000, 0x4000, 1).unwrap();
        // Same flags, different contexts: two VMAs (checked live).
        assert_eq!(m.observe(1, "t").maps.len(), 2);
        m.uffd_close(v).unwrap();
        m.uffd_register(u, DST + 0x4000, 0x4000, 1).unwrap();
        assert_eq!(m.observe(1, "t").maps.len(), 1);
        m.uffd_close(u).unwrap();
        assert!(m.observe(1, "t").maps[0].vm_flags.iter().all(|f| f != "um"));
    }

    #[test]
    fn fault_rules() {
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 0x10000);
            // §4.1: read and write of an empty PTE go to userfaultfd.
            assert_eq!(
                m.read(1, DST + 0x107b),
                Err(AccessFault::Uffd { addr: DST + 0x1000 })
            );
            assert_eq!(m.write(1, DST, 1), Err(AccessFault::Uffd { addr: DST }));
            // §10.24: ZEROPAGE, read, ZEROPAGE again, write COWs silently.
            assert_eq!(m.uffd_zeropage(u, DST, 0x1000, 0), Ok(0x1000));
            assert_eq!(m.read(1, DST), Ok(0));
            assert_eq!(
                m.uffd_zeropage(u, DST, 0x1000, 0),
                Err(UffdError {
                    errno: Errno::EEXIST,
                    field: Some(-17)
                })
            );
            m.write(1, DST, 5).unwrap();
            assert!(matches!(state(&m, DST), PageState::Anon(_)));
            check(&m);
        }
    }

    #[test]
    fn wp_registration_forces_order_zero() {
        let mut m = Model::new(ModelConfig::default());
        m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        m.mmap(1, DST, 0x40000, RW, fixed()).unwrap();
        let u = m.uffd_open(1).unwrap();
        m.uffd_api(u, UFFD_API, 0).unwrap();
        m.uffd_register(u, DST, 0x40000, 2).unwrap();
        m.write(1, DST, 1).unwrap();
        match state(&m, DST) {
            PageState::Anon(a) => assert_eq!(a.order, 0),
            s => panic!("{s:?}"),
        }
        // COPY with MODE_WP: read-only, uffd-wp; a write goes to uffd;
        // UNREGISTER resolves the bit and makes it writable.
        m.uffd_copy(1, u, DST + 0x1000, CopySource::Tag(7), 0x1000, 2)
            .unwrap();
        assert_eq!(
            m.write(1, DST + 0x1000, 8),
            Err(AccessFault::Uffd { addr: DST + 0x1000 })
        );
        m.uffd_unregister(u, DST, 0x40000).unwrap();
        let pt = &m.mm(1).unwrap().pt;
        assert!(
            matches!(pt.pte(DST + 0x1000), Entry::Leaf(l) if l.write() && !l.flags.contains(LeafFlags::UFFD_WP))
        );
        m.write(1, DST + 0x1000, 8).unwrap();
        check(&m);
    }

    #[test]
    fn copy_rules() {
        let (mut m, u) = setup(ArchKind::X86_64, 0x10000);
        // From an untouched source: the source is faulted in (zero page).
        assert_eq!(
            m.uffd_copy(1, u, DST, CopySource::Addr(SRC), 0x1000, 0),
            Ok(0x1000)
        );
        assert_eq!(state(&m, SRC), PageState::Zero);
        match state(&m, DST) {
            PageState::Anon(a) => assert!(a.order == 0 && a.anon_exclusive && a.mapcount == 1),
            s => panic!("{s:?}"),
        }
        // Occupied: EEXIST, but the source was still read.
        let e = m.uffd_copy(1, u, DST, CopySource::Addr(SRC + 0x1000), 0x1000, 0);
        assert_eq!(e.unwrap_err().field, Some(-17));
        assert_eq!(state(&m, SRC + 0x1000), PageState::Zero);
        // Unaligned sources copy the bytes at src (checked live).
        m.write(1, SRC + 0x2000, 0x1122_3344_5566_7788).unwrap();
        m.write(1, SRC + 0x3000, 0x99aa_bbcc_ddee_ff00).unwrap();
        m.uffd_copy(
            1,
            u,
            DST + 0x1000,
            CopySource::Addr(SRC + 0x2003),
            0x1000,
            0,
        )
        .unwrap();
        assert_eq!(m.read(1, DST + 0x1000), Ok(0x11_2233_4455));
        m.uffd_copy(
            1,
            u,
            DST + 0x2000,
            CopySource::Addr(SRC + 0x2ffd),
            0x1000,
            0,
        )
        .unwrap();
        assert_eq!(m.read(1, DST + 0x2000), Ok(0xccdd_eeff_0000_0000));
        // Unreadable source, WP without WP registration, unregistered dst,
        // past the VMA end, mode 4 (field untouched).
        m.mmap(1, SRC + 0x10000, 0x1000, Prot::empty(), fixed())
            .unwrap();
        let e = m.uffd_copy(
            1,
            u,
            DST + 0x3000,
            CopySource::Addr(SRC + 0x10000),
            0x1000,
            0,
        );
        assert_eq!(e.unwrap_err().errno, Errno::EFAULT);
        let e = m.uffd_copy(1, u, DST + 0x3000, CopySource::Tag(1), 0x1000, 2);
        assert_eq!(
            e.unwrap_err(),
            UffdError {
                errno: Errno::EINVAL,
                field: Some(-22)
            }
        );
        let e = m.uffd_copy(1, u, SRC + 0x8000, CopySource::Tag(1), 0x1000, 0);
        assert_eq!(e.unwrap_err().errno, Errno::ENOENT);
        let e = m.uffd_copy(1, u, DST + 0xf000, CopySource::Tag(1), 0x2000, 0);
        assert_eq!(e.unwrap_err().errno, Errno::ENOENT);
        let e = m.uffd_copy(1, u, DST + 0x3000, CopySource::Tag(1), 0x1000, 4);
        assert_eq!(e.unwrap_err(), UffdError::untouched(Errno::EINVAL));
        // Partial progress: three pages, the second occupied.
        m.uffd_copy(1, u, DST + 0x5000, CopySource::Tag(1), 0x1000, 0)
            .unwrap();
        let e = m.uffd_copy(1, u, DST + 0x4000, CopySource::Tag(2), 0x3000, 0);
        assert_eq!(
            e.unwrap_err(),
            UffdError {
                errno: Errno::EAGAIN,
                field: Some(0x1000)
            }
        );
        check(&m);
    }

    #[test]
    fn move_one_page_and_errors() {
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 0x10000);
            m.write(1, SRC, 0xabc).unwrap();
            let pfn = pfn_of(&m, SRC);
            // §10.7.
            assert_eq!(m.uffd_move(1, u, DST, SRC, 0x1000, 0), Ok(0x1000));
            assert_eq!(pfn_of(&m, DST), pfn);
            assert_eq!(state(&m, SRC), PageState::NotPresent);
            assert_eq!(m.read(1, DST), Ok(0xabc));
            // The source is unregistered: reading it maps the zero page.
            assert_eq!(m.read(1, SRC), Ok(0));
            // §10.8: occupied destination.
            m.write(1, SRC + 0x1000, 1).unwrap();
            let e = m.uffd_move(1, u, DST, SRC + 0x1000, 0x1000, 0).unwrap_err();
            assert_eq!(
                e,
                UffdError {
                    errno: Errno::EEXIST,
                    field: Some(-17)
                }
            );
            // §10.9: holes.
            let e = m
                .uffd_move(1, u, DST + 0x1000, SRC + 0x2000, 0x1000, 0)
                .unwrap_err();
            assert_eq!(e.errno, Errno::ENOENT);
            assert_eq!(
                m.uffd_move(1, u, DST + 0x1000, SRC + 0x2000, 0x1000, 2),
                Ok(0x1000)
            );
            assert_eq!(state(&m, DST + 0x1000), PageState::NotPresent);
            // §10.11: field untouched.
            for (d, s, l, mode) in [
                (DST, SRC, 0x1000, 4),
                (DST + 1, SRC, 0x1000, 0),
                (DST, SRC + 1, 0x1000, 0),
                (DST, SRC, 100, 0),
                (DST, SRC, 0, 0),
            ] {
                assert_eq!(
                    m.uffd_move(1, u, d, s, l, mode),
                    Err(UffdError::untouched(Errno::EINVAL))
                );
            }
            // §10.12: unregistered destination.
            let e = m
                .uffd_move(1, u, SRC + 0x5000, SRC + 0x1000, 0x1000, 0)
                .unwrap_err();
            assert_eq!(
                e,
                UffdError {
                    errno: Errno::EINVAL,
                    field: Some(-22)
                }
            );
            // §10.16: another process issues the move.
            let child = m.fork(1).unwrap();
            let e = m.uffd_move(child, u, DST + 0x2000, SRC + 0x1000, 0x1000, 0);
            assert_eq!(e, Err(UffdError::untouched(Errno::EINVAL)));
            check(&m);
        }
    }

    #[test]
    fn move_vma_preconditions() {
        let (mut m, u) = setup(ArchKind::X86_64, 0x10000);
        let other = SRC + 0x100_0000;
        // §10.13: PROT_READ source, mlocked-only source (not modelled:
        // mlock is not a model syscall), MAP_SHARED (not modelled), past the VMA end.
        m.mmap(1, other, 0x1000, Prot::READ, fixed()).unwrap();
        let e = m.uffd_move(1, u, DST, other, 0x1000, 0).unwrap_err();
        assert_eq!(e.field, Some(-22));
        let e = m.uffd_move(1, u, DST, SRC + 0xf000, 0x2000, 0).unwrap_err();
        assert_eq!(e.field, Some(-22));
        // No VMA at src or dst: ENOENT.
        let e = m
            .uffd_move(1, u, DST, other + 0x10000, 0x1000, 0)
            .unwrap_err();
        assert_eq!(e.field, Some(-2));
        // src inside the (registered) destination VMA.
        m.uffd_copy(1, u, DST + 0x3000, CopySource::Tag(9), 0x1000, 0)
            .unwrap();
        assert_eq!(m.uffd_move(1, u, DST, DST + 0x3000, 0x1000, 0), Ok(0x1000));
        assert_eq!(m.read(1, DST), Ok(9));
        // The source of a move inside a MISSING range faults to uffd after.
        assert_eq!(
            m.read(1, DST + 0x3000),
            Err(AccessFault::Uffd { addr: DST + 0x3000 })
        );
        check(&m);
    }

    #[test]
    fn partial_progress_and_precedence() {
        let (mut m, u) = setup(ArchKind::X86_64, 0x10000);
        m.access_range(1, SRC, 0x3000, true, None).unwrap();
        m.uffd_copy(1, u, DST + 0x1000, CopySource::Tag(1), 0x1000, 0)
            .unwrap();
        // §10.10.
        let e = m.uffd_move(1, u, DST, SRC, 0x3000, 0).unwrap_err();
        assert_eq!(
            e,
            UffdError {
                errno: Errno::EAGAIN,
                field: Some(0x1000)
            }
        );
        let e = m
            .uffd_move(1, u, DST + 0x1000, SRC + 0x1000, 0x2000, 0)
            .unwrap_err();
        assert_eq!(e.errno, Errno::EEXIST);
        // §10.21: dst occupied + a source area never touched (no PMD
        // table): ENOENT; with an existing, empty PTE table: EEXIST.
        let far = SRC + 0x4000_0000;
        m.mmap(1, far, 0x2000, RW, fixed()).unwrap();
        let e = m.uffd_move(1, u, DST + 0x1000, far, 0x1000, 0).unwrap_err();
        assert_eq!(e.errno, Errno::ENOENT);
        let e = m
            .uffd_move(1, u, DST + 0x1000, SRC + 0x8000, 0x1000, 0)
            .unwrap_err();
        assert_eq!(e.errno, Errno::EEXIST);
        check(&m);
    }

    #[test]
    fn move_zero_page_source() {
        let (mut m, u) = setup(ArchKind::Arm64, 0x10000);
        m.read(1, SRC).unwrap();
        // §10.18.
        assert_eq!(m.uffd_move(1, u, DST, SRC, 0x1000, 0), Ok(0x1000));
        assert_eq!(state(&m, DST), PageState::Zero);
        assert_eq!(state(&m, SRC), PageState::NotPresent);
        check(&m);
    }

    #[test]
    fn fork_shared_pages_are_busy() {
        let (mut m, u) = setup(ArchKind::X86_64, 0x10000);
        m.write(1, SRC, 1).unwrap();
        let c = m.fork(1).unwrap();
        // §10.14: shared, after the child exits, after the parent writes.
        let e = m.uffd_move(1, u, DST, SRC, 0x1000, 0).unwrap_err();
        assert_eq!(e.errno, Errno::EBUSY);
        m.exit(c).unwrap();
        let e = m.uffd_move(1, u, DST, SRC, 0x1000, 0).unwrap_err();
        assert_eq!(e.errno, Errno::EBUSY);
        m.write(1, SRC, 2).unwrap();
        assert_eq!(m.uffd_move(1, u, DST, SRC, 0x1000, 0), Ok(0x1000));
        // §10.15: MADV_DONTFORK keeps the source exclusive.
        m.madvise(1, SRC + 0x1000, 0x1000, Advice::DontFork)
            .unwrap();
        m.write(1, SRC + 0x1000, 3).unwrap();
        let c = m.fork(1).unwrap();
        assert_eq!(
            m.uffd_move(1, u, DST + 0x1000, SRC + 0x1000, 0x1000, 0),
            Ok(0x1000)
        );
        m.exit(c).unwrap();
        check(&m);
    }

    #[test]
    fn move_thp_whole_and_split() {
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 8 << 20);
            m.madvise(1, SRC, 8 << 20, Advice::HugePage).unwrap();
            m.access_range(1, SRC, 8 << 20, true, None).unwrap();
            let pfn = pfn_of(&m, SRC);
            // §10.19: aligned 2 MiB moves whole.
            assert_eq!(m.uffd_move(1, u, DST, SRC, 2 << 20, 0), Ok(2 << 20));
            match state(&m, DST + 0x1000) {
                PageState::Anon(a) => assert!(a.pmd_mapped && a.pfn == pfn + 1),
                s => panic!("{s:?}"),
            }
            assert_eq!(m.observe(1, "t").maps[0].anon_huge_kb, 2048);
            // §10.20: one page out of a THP: PMD split and folio split.
            let before = m.phys().stats.clone();
            let src2 = SRC + (2 << 20);
            assert_eq!(
                m.uffd_move(1, u, DST + (2 << 20), src2 + 0x5000, 0x1000, 0),
                Ok(0x1000)
            );
            let s = &m.phys().stats;
            assert_eq!(
                s.get_vm(VmEvent::ThpSplitPmd) - before.get_vm(VmEvent::ThpSplitPmd),
                1
            );
            assert_eq!(
                s.get_vm(VmEvent::ThpSplitPage) - before.get_vm(VmEvent::ThpSplitPage),
                1
            );
            assert_eq!(
                s.get_mthp(9, MthpStat::Split) - before.get_mthp(9, MthpStat::Split),
                1
            );
            assert_eq!(
                s.get_mthp(9, MthpStat::NrAnon) - before.get_mthp(9, MthpStat::NrAnon),
                -1
            );
            for va in [src2, src2 + 0x6000, DST + (2 << 20)] {
                match state(&m, va) {
                    PageState::Anon(a) => {
                        assert!(a.order == 0 && !a.pmd_mapped && a.anon_exclusive)
                    }
                    s => panic!("{s:?}"),
                }
            }
            assert_eq!(m.read(1, DST + (2 << 20)), Ok(src2 + 0x5000));
            // Same with dst + 4 KiB: split, no THP at the destination.
            let src3 = SRC + (4 << 20);
            assert_eq!(
                m.uffd_move(1, u, DST + (4 << 20) + 0x1000, src3, (2 << 20) - 0x1000, 0),
                Ok((2 << 20) - 0x1000)
            );
            assert_eq!(m.read(1, DST + (4 << 20) + 0x1000), Ok(src3));
            check(&m);
        }
    }

    #[test]
    fn move_mthp_splits_even_when_whole() {
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 0x40000);
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            m.access_range(1, SRC, 0x40000, true, None).unwrap();
            // Checked live: moving a whole 64 KiB folio still splits it.
            assert_eq!(m.uffd_move(1, u, DST, SRC, 0x10000, 0), Ok(0x10000));
            assert_eq!(m.phys().stats.get_mthp(4, MthpStat::Split), 1);
            match state(&m, DST + 0x3000) {
                PageState::Anon(a) => assert!(a.order == 0 && a.anon_exclusive),
                s => panic!("{s:?}"),
            }
            // A partially mapped folio leaves nr_anon_partially_mapped.
            m.madvise(1, SRC + 0x14000, 0x4000, Advice::DontNeed)
                .unwrap();
            assert_eq!(
                m.phys().stats.get_mthp(4, MthpStat::NrAnonPartiallyMapped),
                1
            );
            assert_eq!(
                m.uffd_move(1, u, DST + 0x10000, SRC + 0x10000, 0x1000, 0),
                Ok(0x1000)
            );
            assert_eq!(
                m.phys().stats.get_mthp(4, MthpStat::NrAnonPartiallyMapped),
                0
            );
            check(&m);
        }
    }

    #[test]
    fn head_exclusive_decides_for_large_folios() {
        // Checked live: after fork + child exit, writing page 3 of a 64 KiB
        // folio makes only page 3 exclusive; moving it is EBUSY because the
        // head is not. Writing the head makes the move (with a split) work.
        let (mut m, u) = setup(ArchKind::X86_64, 0x40000);
        m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
        m.access_range(1, SRC, 0x10000, true, None).unwrap();
        let c = m.fork(1).unwrap();
        m.exit(c).unwrap();
        m.write(1, SRC + 0x3000, 1).unwrap();
        let e = m.uffd_move(1, u, DST, SRC + 0x3000, 0x1000, 0).unwrap_err();
        assert_eq!(e.errno, Errno::EBUSY);
        m.write(1, SRC, 2).unwrap();
        assert_eq!(m.uffd_move(1, u, DST, SRC + 0x3000, 0x1000, 0), Ok(0x1000));
        let e = m
            .uffd_move(1, u, DST + 0x1000, SRC + 0x1000, 0x1000, 0)
            .unwrap_err();
        assert_eq!(e.errno, Errno::EBUSY);
        check(&m);
    }

    #[test]
    fn hole_move_allocates_tables() {
        // Checked live: moving a 2 MiB hole leaves a PTE table at the
        // destination, so a later write there cannot map a PMD THP.
        let (mut m, u) = setup(ArchKind::X86_64, 4 << 20);
        m.madvise(1, DST, 4 << 20, Advice::HugePage).unwrap();
        assert_eq!(m.uffd_move(1, u, DST, SRC, 2 << 20, 2), Ok(2 << 20));
        m.uffd_unregister(u, DST, 4 << 20).unwrap();
        m.write(1, DST, 1).unwrap();
        m.write(1, DST + (2 << 20), 1).unwrap();
        let pmd = |m: &Model, va| matches!(state(m, va), PageState::Anon(a) if a.pmd_mapped);
        assert!(!pmd(&m, DST));
        assert!(pmd(&m, DST + (2 << 20)));
        check(&m);
    }

    #[test]
    fn batched_and_per_page_agree() {
        for arch in ArchKind::ALL {
            let mut out = Vec::new();
            for before in [Before::empty(), Before::UFFD_MOVE_BATCH] {
                let (mut m, u) = setup(arch, 4 << 20);
                m.set_before(before);
                m.access_range(1, SRC + 0x1000, (4 << 20) - 0x1000, true, None)
                    .unwrap();
                m.read(1, SRC + 0x30000).unwrap();
                // 512 pages crossing a PMD boundary (§10.25).
                let r = m.uffd_move(1, u, DST + 0x1000, SRC + 0x1000, 2 << 20, 0);
                out.push((r, m.observe(1, "t").render(crate::Sections::ALL)));
                check(&m);
            }
            assert_eq!(out[0], out[1], "{arch:?}");
        }
    }

    #[test]
    fn copied_tag_bytes() {
        // The tag (first 8 bytes) a copy from `src` leaves, from two tag pages.
        let copied_tag = |src: u64, first: u64, second: u64| {
            let (a, b) = (
                crate::core::content::page_bytes(first, None),
                crate::core::content::page_bytes(second, None),
            );
            let p = copied_page(src, &a, Some(&b));
            u64::from_le_bytes(p[..8].try_into().unwrap())
        };
        assert_eq!(copied_tag(0x1000, 7, 9), 7);
        assert_eq!(copied_tag(0x1001, 0x1122, 9), 0x11);
        assert_eq!(copied_tag(0x1100, 0x1122, 9), 0);
        assert_eq!(copied_tag(0x1fff, 0x1122, 0xab), 0xab00);
        assert_eq!(copied_tag(0x1ffd, 0x1122, 0xab), 0xab00_0000);
        assert_eq!(copied_tag(0x1ff9, 0x1122, 0xabcd), 0xcd00_0000_0000_0000);
    }

    #[test]
    fn an_aligned_copy_takes_the_source_page_as_stored() {
        // An aligned UFFDIO_COPY takes the source page's tag and rest as
        // they are stored (no 4096-byte round trip): every byte equals the
        // source's, and the stored rest is the one compressing the bytes
        // gives (the form every other path stores), for a tag page, pages
        // with fill and raw runs, an untouched page read in as the zero
        // page, and a page that is all zeros after a fill of zeros.
        for arch in ArchKind::ALL {
            let (mut m, u) = setup(arch, 0x8000);
            m.write(1, SRC, 0x1234).unwrap();
            m.fill_bytes(1, SRC + 0x1000 + 100, 300, 0x5a).unwrap();
            m.write(1, SRC + 0x1000, 7).unwrap();
            for k in 0..40u64 {
                // Short runs of changing bytes: raw runs between fills.
                m.fill_bytes(1, SRC + 0x2000 + k * 37, 1 + k % 5, k as u8)
                    .unwrap();
            }
            m.read(1, SRC + 0x3000).unwrap();
            m.fill_bytes(1, SRC + 0x4000, 4096, 0).unwrap();
            for k in 0..5 {
                let (d, s) = (DST + k * 0x1000, SRC + k * 0x1000);
                let r = m.uffd_copy(1, u, d, CopySource::Addr(s), 0x1000, 0);
                assert_eq!(r, Ok(0x1000), "{arch:?} page {k}");
                assert_eq!(m.peek_bytes(1, d, 4096), m.peek_bytes(1, s, 4096));
                let bytes: Vec<u8> = m.peek_bytes(1, d, 4096).into_iter().flatten().collect();
                let want = crate::core::content::PageRest::compress(&bytes[8..]);
                let pfn = pfn_of(&m, d);
                assert_eq!(m.phys().contents.get(pfn).cloned(), want, "page {k}");
            }
            assert!(m.phys().contents.get(pfn_of(&m, DST)).is_none());
            assert!(m.phys().contents.get(pfn_of(&m, DST + 0x1000)).is_some());
            check(&m);
        }
    }

    #[test]
    fn an_unaligned_copy_of_filled_pages_keeps_every_byte() {
        let mut a = [0xaau8; 4096];
        a[..8].copy_from_slice(&0x1122u64.to_le_bytes());
        let b = [0xbbu8; 4096];
        let p = copied_page(0x1004, &a, Some(&b));
        assert_eq!(&p[..4], &[0, 0, 0, 0]);
        assert!(p[4..4092].iter().all(|&x| x == 0xaa));
        assert!(p[4092..].iter().all(|&x| x == 0xbb));
    }
}
