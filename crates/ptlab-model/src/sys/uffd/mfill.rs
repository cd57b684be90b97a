//! UFFDIO_COPY and UFFDIO_ZEROPAGE: filling missing pages of a registered
//! range, page by page, with partial progress reported as the kernel does.
//!
//! Linux: fs/userfaultfd.c userfaultfd_copy(), userfaultfd_zeropage();
//! mm/userfaultfd.c mfill_atomic(), mfill_atomic_pte_copy(),
//! mfill_atomic_pte_zeropage().

use crate::core::addr::{Pfn, PAGE_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::hw::HwEvent;
use crate::core::pgtable::PmdSlot;
use crate::core::vma::vm_page_prot;
use crate::core::vma::{VmFlags, Vma};
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::{AccessFault, Pid};

use super::ctx::*;
use crate::core::rules::rule;

/// The 4096 bytes a copy from `src` leaves in its destination, from the
/// tag and rest of the page holding `src` (`first`) and of the next page
/// (`second`, read only when `src` is unaligned): `first[off..]` then
/// `second[..off]`. Linux: mm/userfaultfd.c mfill_atomic_pte_copy() →
/// copy_mc_user_highpage()/copy_from_user() of PAGE_SIZE bytes from `src`.
pub(crate) fn copied_page(
    src: u64,
    first: &[u8; PAGE_SIZE as usize],
    second: Option<&[u8; PAGE_SIZE as usize]>,
) -> Box<[u8; PAGE_SIZE as usize]> {
    crate::core::content::shifted(first, second, (src % PAGE_SIZE) as usize)
}

/// A copied page's content: bytes 0..8 as its tag, bytes 8..4096 as its
/// rest (`None`: all zero). See `core/content.rs`.
type PageCopy = (u64, Option<crate::core::content::PageRest>);

/// A zero-page PTE for `vma`: pte_mkspecial(pfn_pte(zero, vm_page_prot)).
pub(crate) fn zero_pte(vma: &Vma, zero: Pfn) -> Leaf {
    Leaf {
        pfn: zero,
        flags: vm_page_prot(vma.flags) | LeafFlags::YOUNG | LeafFlags::SPECIAL,
    }
}

/// The flags of a copied page's PTE in `dst_vma`: young, dirty, writable
/// when the VMA is, and with `wp` uffd-wp and read-only.
/// Linux: mm/userfaultfd.c mfill_atomic_install_pte().
fn copy_pte_flags(dst_vma: &Vma, wp: bool) -> LeafFlags {
    let mut flags = crate::core::vma::dirty_anon_prot(dst_vma.flags);
    if wp {
        // pte_mkuffd_wp() also write-protects (x86 and arm64).
        flags |= LeafFlags::UFFD_WP;
        flags.remove(LeafFlags::WRITE);
    }
    flags
}

/// Per-page operation of [`Model::mfill_atomic`].
#[derive(Clone, Copy)]
enum Mfill {
    Copy { src: CopySource, wp: bool },
    Zeropage,
}

impl Model {
    // ---- COPY / ZEROPAGE ---------------------------------------------------

    /// UFFDIO_COPY of `len` bytes into `dst` (of the context's mm) from
    /// `src` in the calling process `caller` (§5). `mode` is `CopyMode` bits
    /// (unknown bits passed through). Returns the bytes copied.
    /// Linux: fs/userfaultfd.c userfaultfd_copy() → mfill_atomic_copy().
    pub fn uffd_copy(
        &mut self,
        caller: Pid,
        id: UffdId,
        dst: u64,
        src: CopySource,
        len: u64,
        mode: u64,
    ) -> Result<u64, UffdError> {
        // count_syscall(), the lookup remembered: when the caller is the
        // context's mm (the common case) it answers the ESRCH check too.
        let caller_exists = match self.procs.get(&caller) {
            Some(mm) => {
                mm.pt.hw.one(HwEvent::Syscall);
                mm.pt.hw.one(HwEvent::VmaLookup);
                true
            }
            None => false,
        };
        let ctx = self.uffd_ready(id).map_err(UffdError::untouched)?;
        if let CopySource::Addr(s) = src {
            self.validate_unaligned_range(s, len)
                .map_err(UffdError::untouched)?;
        }
        self.validate_range(dst, len)
            .map_err(UffdError::untouched)?;
        let mode = CopyMode::from_bits_retain(mode);
        if !(mode - CopyMode::all()).is_empty() {
            return Err(UffdError::untouched(Errno::EINVAL));
        }
        let mm_exists = if ctx.mm == caller {
            caller_exists
        } else {
            self.procs.contains_key(&ctx.mm)
        };
        if !mm_exists {
            return Err(UffdError::untouched(Errno::ESRCH));
        }
        let op = Mfill::Copy {
            src,
            wp: mode.contains(CopyMode::WP),
        };
        let (done, err) = self.mfill_atomic(caller, ctx.mm, dst, len, op);
        ioctl_result(done, err, len)
    }

    /// UFFDIO_ZEROPAGE of `[dst, dst + len)` (§6): map the shared zero page.
    /// Returns the bytes mapped.
    /// Linux: fs/userfaultfd.c userfaultfd_zeropage() → mfill_atomic_zeropage().
    pub fn uffd_zeropage(
        &mut self,
        id: UffdId,
        dst: u64,
        len: u64,
        mode: u64,
    ) -> Result<u64, UffdError> {
        let ctx = self.uffd_ready(id).map_err(UffdError::untouched)?;
        self.count_syscall(ctx.mm);
        self.validate_range(dst, len)
            .map_err(UffdError::untouched)?;
        let mode = ZeropageMode::from_bits_retain(mode);
        if !(mode - ZeropageMode::all()).is_empty() {
            return Err(UffdError::untouched(Errno::EINVAL));
        }
        if !self.procs.contains_key(&ctx.mm) {
            return Err(UffdError::untouched(Errno::ESRCH));
        }
        let (done, err) = self.mfill_atomic(ctx.mm, ctx.mm, dst, len, Mfill::Zeropage);
        ioctl_result(done, err, len)
    }

    /// Fill `[dst_start, dst_start + len)` of process `pid` page by page;
    /// returns the bytes done and the error that stopped it.
    /// Linux: mm/userfaultfd.c mfill_atomic(), uffd_mfill_lock(),
    /// validate_dst_vma(), mfill_atomic_pte().
    fn mfill_atomic(
        &mut self,
        caller: Pid,
        pid: Pid,
        dst_start: u64,
        len: u64,
        op: Mfill,
    ) -> (u64, Option<Errno>) {
        // uffd_mfill_lock(): look the VMA up and prepare its anon_vma (the
        // per-VMA-lock path falls back to find_vma_and_prepare_anon() when
        // there is none yet) before checking that it is registered.
        let hint = &self.uffd.vma_hints[0];
        let Some(dst_vma) = find_vma_hinted(&self.procs[&pid].vmas, hint, dst_start).cloned()
        else {
            rule!(self.phys.hw, UffdMfillNoVma);
            return (0, Some(Errno::ENOENT));
        };
        // (A VMA that has its anon_vma needs nothing: anon_vma_prepare()
        // returns it.)
        if dst_vma.anon_vma.is_none() {
            let Model { procs, ids, .. } = self;
            procs
                .get_mut(&pid)
                .expect("pid")
                .anon_vma_prepare(dst_start, ids);
        }
        // validate_dst_vma(): inside one VMA registered with any context.
        if dst_start + len > dst_vma.end || dst_vma.uffd_ctx().is_none() {
            rule!(self.phys.hw, UffdMfillNotRegistered);
            return (0, Some(Errno::ENOENT));
        }
        // uffd_mfill_lock() kept the VMA read-locked; then down_read() of
        // ctx->map_changing_lock: both held from here to out_unlock.
        // Linux: mm/userfaultfd.c mfill_atomic().
        self.phys.hw.one(HwEvent::UffdMfillLock);
        if let Mfill::Copy { wp: true, .. } = op {
            if !dst_vma.flags.contains(VmFlags::UFFD_WP) {
                rule!(self.phys.hw, UffdCopyWpNotWpRange);
                return (0, Some(Errno::EINVAL));
            }
        }
        let mut done = 0;
        while done < len {
            let dst = dst_start + done;
            let step = match op {
                Mfill::Copy { src, wp } => {
                    let src = match src {
                        CopySource::Addr(s) => CopySource::Addr(s + done),
                        t => t,
                    };
                    self.mfill_atomic_pte_copy(caller, pid, &dst_vma, dst, src, wp)
                }
                Mfill::Zeropage => self.mfill_atomic_pte_zeropage(pid, &dst_vma, dst),
            };
            if let Err(e) = step {
                return (done, Some(e));
            }
            done += PAGE_SIZE;
        }
        (done, None)
    }

    /// The page-table levels for one destination page: PUD/PMD tables, a PTE
    /// table for an empty PMD, and EEXIST for a huge PMD (a THP or the huge
    /// zero page). Linux: mm/userfaultfd.c mfill_atomic() loop head,
    /// mm_alloc_pmd(), __pte_alloc().
    fn mfill_dst_pmd(&mut self, pid: Pid, dst: u64) -> Result<(), Errno> {
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // A PTE table in the slot (found through the walk cache, the
        // common case of a loop of small copies): the PUD and PMD tables
        // exist, so mm_alloc_pmd() would allocate nothing.
        if let PmdSlot::Table(_) = mm.pt.pmd(dst) {
            return Ok(());
        }
        mm.pt.pmd_alloc(dst, phys).ok_or(Errno::ENOMEM)?;
        match mm.pt.pmd(dst) {
            PmdSlot::Leaf(_) => Err(Errno::EEXIST),
            PmdSlot::Table(_) => Ok(()),
            PmdSlot::None => mm.pt.pte_alloc(dst, phys).map(|_| ()).ok_or(Errno::ENOMEM),
        }
    }

    /// Read the 4 KiB at `src` in process `caller` as copy_from_user() does:
    /// faulting the pages in as reads. An access that would SIGSEGV, or
    /// that would itself fault to userfaultfd (SIGBUS mode, or a kernel
    /// access of a USER_MODE_ONLY context), is EFAULT. Returns the copy as
    /// a tag and a rest (`core/content.rs`): from a page-aligned `src` the
    /// source page's own tag and rest, taken as they are stored (stored
    /// rests are already `PageRest::compress`'s output, so compressing the
    /// 4096 bytes again would give the same runs); from an unaligned `src`
    /// the 4096 bytes joined from the two pages, then split.
    fn copy_from_user(&mut self, caller: Pid, src: u64) -> Result<PageCopy, Errno> {
        let to_errno = |f: AccessFault| match f {
            AccessFault::NoProcess => Errno::ESRCH,
            _ => Errno::EFAULT,
        };
        if src.is_multiple_of(PAGE_SIZE) {
            let pfn = self.touch_as(caller, src, false, false).map_err(to_errno)?;
            if self.is_zero_frame(pfn) {
                return Ok((0, None));
            }
            return Ok((self.phys.tag(pfn), self.phys.contents.get(pfn.0).cloned()));
        }
        let first = self.read_page_as(caller, src, false).map_err(to_errno)?;
        let next = (src & !(PAGE_SIZE - 1)).checked_add(PAGE_SIZE);
        let next = next.ok_or(Errno::EFAULT)?;
        let second = self.read_page_as(caller, next, false).map_err(to_errno)?;
        Ok(crate::core::content::split_page(&copied_page(
            src,
            &first,
            Some(&second),
        )))
    }

    /// One page of UFFDIO_COPY: allocate an order-0 page, copy into it, then
    /// install it over an empty PTE (§5.3). The copy comes first, so an
    /// occupied destination still faults the source in.
    /// Linux: mm/userfaultfd.c mfill_atomic_pte_copy(),
    /// mfill_atomic_install_pte().
    fn mfill_atomic_pte_copy(
        &mut self,
        caller: Pid,
        pid: Pid,
        dst_vma: &Vma,
        dst: u64,
        src: CopySource,
        wp: bool,
    ) -> Result<(), Errno> {
        self.mfill_dst_pmd(pid, dst)?;
        let (tag, rest) = match src {
            CopySource::Addr(s) => self.copy_from_user(caller, s)?,
            // A tag page: the tag and zeros.
            CopySource::Tag(t) => (t, None),
        };
        let Model {
            procs, phys, cfg, ..
        } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // The common case (`ModelConfig::uffd_fused`): a none PTE in the
        // table mfill_dst_pmd() found, filled in one step.
        if cfg.uffd_fused {
            if let Some(slot) = super::fused::copy_dst_none(mm, dst) {
                let flags = copy_pte_flags(dst_vma, wp);
                return super::fused::copy_install(mm, phys, slot, dst, (tag, rest), flags);
            }
        }
        // pte_none_mostly(): an empty PTE or a PTE marker.
        let old = if mm.pt.pte_raw_is_none(dst) {
            Entry::None
        } else {
            mm.pt.pte_peek(dst) // the same read (counted above)
        };
        if !matches!(old, Entry::None | Entry::Marker(_)) {
            rule!(mm.pt.hw, UffdCopyExists);
            return Err(Errno::EEXIST);
        }
        // pte_offset_map_lock(): PMD read and PTL (the pte_none check above
        // is its PTE load).
        // (mfill_dst_pmd() made sure of dst's PTE table; pte_raw() read
        // through it.)
        mm.pt.pte_offset_map_lock_found();
        // ... or a PTE marker, which is overwritten: a guard marker too
        // (checked live on 6.18.44: COPY onto a guard page succeeds).
        if let Entry::Marker(_) = old {
            mm.pt.clear_marker(dst);
        }
        let folio = phys
            .alloc_anon_folio(crate::core::addr::Order::ZERO)
            .ok_or(Errno::ENOMEM)?;
        // copy_from_user() into the new page (no zeroing: the copy fills it).
        phys.hw.one(HwEvent::PageCopy);
        phys.set_tag(folio.head, tag);
        phys.contents.set(folio.head.0, rest);
        // folio_add_new_anon_rmap(RMAP_EXCLUSIVE); inc_mm_counter().
        phys.add_rmap_ptes(folio, folio.head, 1, pid, true);
        phys.ref_add(folio, 1);
        mm.rss_anon += 1;
        let pte = Leaf {
            pfn: folio.head,
            flags: copy_pte_flags(dst_vma, wp),
        };
        mm.pt.set_ptes(dst, pte, 1, phys);
        Ok(())
    }

    /// One page of UFFDIO_ZEROPAGE: the zero page over a strictly empty PTE.
    /// Linux: mm/userfaultfd.c mfill_atomic_pte_zeropage().
    fn mfill_atomic_pte_zeropage(
        &mut self,
        pid: Pid,
        dst_vma: &Vma,
        dst: u64,
    ) -> Result<(), Errno> {
        self.mfill_dst_pmd(pid, dst)?;
        let Model { procs, phys, .. } = self;
        let mm = procs.get_mut(&pid).expect("pid");
        // Strictly pte_none(): a guard marker is EEXIST (checked live).
        if !matches!(mm.pt.pte_raw(dst), Entry::None) || crate::mm::marker::is_guard(mm, dst) {
            rule!(mm.pt.hw, UffdZeropageExists);
            return Err(Errno::EEXIST);
        }
        let pte = zero_pte(dst_vma, phys.zero_pfn);
        mm.pt.set_ptes(dst, pte, 1, phys);
        Ok(())
    }
}
