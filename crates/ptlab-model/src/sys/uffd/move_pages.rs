//! UFFDIO_MOVE: moving pages between two registered-or-not anonymous
//! ranges of one mm — present PTEs (batched since 6.18, or one per step),
//! the zero page, swap PTEs, holes with ALLOW_SRC_HOLES, and whole PMD
//! THPs — with the exclusivity and VMA checks in the kernel's order.
//!
//! Linux: fs/userfaultfd.c userfaultfd_move(); mm/userfaultfd.c
//! move_pages(), move_pages_ptes(), move_present_ptes(),
//! validate_move_areas(); mm/huge_memory.c move_pages_huge_pmd().

use crate::core::addr::{Pfn, PAGE_SIZE, PMD_SIZE};
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::hw::HwEvent;
use crate::core::pgtable::{pmd_end, PmdSlot};
use crate::core::vma::vm_page_prot;
use crate::core::vma::{VmFlags, Vma, VM_ACCESS_FLAGS};
use crate::mm::batch::Before;
use crate::mm::huge_memory::split_folio;
use crate::mm::zap::split_huge_pmd;
use crate::model::Model;
use crate::types::errno::Errno;
use crate::types::Pid;

use super::ctx::*;
use super::mfill::zero_pte;
use crate::core::rules::rule;

/// The destination PTE of a moved page: the destination VMA's protection,
/// young (folio_mk_pte() with vm_page_prot), dirty if the source was,
/// always writable, uffd-wp dropped (6.17/6.18; soft-dirty would be set with
/// CONFIG_MEM_SOFT_DIRTY, which the target machines lack).
/// Linux: mm/userfaultfd.c move_present_pte[s]() (§7.4.6).
fn moved_pte(dst_vma: &Vma, old: Leaf) -> Leaf {
    Leaf {
        pfn: old.pfn,
        flags: vm_page_prot(dst_vma.flags)
            | LeafFlags::YOUNG
            | LeafFlags::WRITE
            | (old.flags & LeafFlags::DIRTY),
    }
}

impl Model {
    // ---- MOVE -------------------------------------------------------------

    /// UFFDIO_MOVE of `len` bytes from `src` to `dst`, issued by process
    /// `caller` on context `id` (§7). `mode` is `MoveMode` bits (unknown bits
    /// passed through). Returns the bytes moved.
    /// Linux: fs/userfaultfd.c userfaultfd_move() → mm/userfaultfd.c
    /// move_pages().
    pub fn uffd_move(
        &mut self,
        caller: Pid,
        id: UffdId,
        dst: u64,
        src: u64,
        len: u64,
        mode: u64,
    ) -> Result<u64, UffdError> {
        // count_syscall(), with the one lookup of the caller's mm that also
        // answers the ESRCH check below (the context's mm is the caller's).
        let caller_exists = match self.procs.get(&caller) {
            Some(mm) => {
                mm.pt.hw.one(HwEvent::Syscall);
                mm.pt.hw.one(HwEvent::VmaLookup);
                true
            }
            None => false,
        };
        // §7.1, in order; these leave the field untouched.
        let ctx = self.uffd_ready(id).map_err(UffdError::untouched)?;
        if caller != ctx.mm {
            rule!(self.phys.hw, UffdMoveWrongMm);
            return Err(UffdError::untouched(Errno::EINVAL));
        }
        self.validate_range(dst, len)
            .map_err(UffdError::untouched)?;
        self.validate_range(src, len)
            .map_err(UffdError::untouched)?;
        let mode = MoveMode::from_bits_retain(mode);
        if !(mode - MoveMode::all()).is_empty() {
            rule!(self.phys.hw, UffdMoveModeInvalid);
            return Err(UffdError::untouched(Errno::EINVAL));
        }
        if !caller_exists {
            return Err(UffdError::untouched(Errno::ESRCH));
        }
        let (done, err) = self.move_pages(ctx.mm, id, dst, src, len, mode);
        ioctl_result(done, err, len)
    }

    /// §7.2 and §7.3: look the VMAs up, validate them, then move step by
    /// step (a PMD, or a run of PTEs) until done or an error.
    /// Linux: mm/userfaultfd.c move_pages(), uffd_move_lock(),
    /// validate_move_areas().
    fn move_pages(
        &mut self,
        pid: Pid,
        id: UffdId,
        dst_start: u64,
        src_start: u64,
        len: u64,
        mode: MoveMode,
    ) -> (u64, Option<Errno>) {
        // uffd_move_lock(): the destination VMA (anon_vma prepared), then
        // the source VMA unless src lies in the destination VMA.
        // The mm is looked up once for the VMA lookups and the steps (the
        // caller checked that it exists; a folio split looks it up again).
        let Model {
            procs,
            ids,
            phys,
            cfg,
            uffd,
            ..
        } = self;
        let [dst_hint, src_hint] = &uffd.vma_hints;
        let mut mm = procs.get_mut(&pid).expect("pid");
        let Some(found) = find_vma_hinted(&mm.vmas, dst_hint, dst_start).cloned() else {
            rule!(phys.hw, UffdMoveNoDstVma);
            return (0, Some(Errno::ENOENT));
        };
        // (A VMA that has its anon_vma needs nothing: anon_vma_prepare()
        // returns it.)
        let dst_vma = if found.anon_vma.is_some() {
            found
        } else {
            mm.anon_vma_prepare(dst_start, ids);
            mm.vmas.find(dst_start).cloned().expect("dst")
        };
        let src_vma = if dst_vma.contains(src_start) {
            dst_vma.clone()
        } else {
            match find_vma_hinted(&mm.vmas, src_hint, src_start) {
                Some(v) => v.clone(),
                None => return (0, Some(Errno::ENOENT)),
            }
        };
        // uffd_move_lock() took both VMAs' read locks (one when src lies
        // in the destination VMA) and move_pages() map_changing_lock;
        // uffd_move_unlock() and up_read() release them on every return.
        // Linux: mm/userfaultfd.c move_pages(), uffd_move_lock().
        mm.pt.hw.one(HwEvent::UffdMoveLock);
        if let Err(e) = validate_move_vmas(id, &src_vma, &dst_vma, src_start, dst_start, len) {
            rule!(phys.hw, UffdMoveVmasInvalid);
            return (0, Some(e));
        }
        let holes = mode.contains(MoveMode::ALLOW_SRC_HOLES);
        let batched = !cfg.before.contains(Before::UFFD_MOVE_BATCH);
        // The fused one-page step (`ModelConfig::uffd_fused`): a batch
        // that ends after its first page, the range's last.
        let fused = batched && cfg.uffd_fused;
        let src_end = src_start + len;
        let (mut src_addr, mut dst_addr) = (src_start, dst_start);
        let mut moved = 0;
        while src_addr < src_end {
            let one = if fused && src_end - src_addr == PAGE_SIZE {
                super::fused::move_one_page(mm, phys, &dst_vma, dst_addr, src_addr, moved_pte)
            } else {
                None
            };
            let mut step = match one {
                Some(r) => r.map(Step::Moved),
                None => move_step(
                    mm, phys, &dst_vma, dst_addr, src_addr, src_end, holes, batched,
                ),
            };
            // A large folio at the source: split it (every mapping of it,
            // hence all processes), then look again from the PTE read
            // (move_pages_ptes()'s "goto retry").
            while let Ok(Step::SplitFolio(folio, pfn)) = step {
                if let Err(e) = split_folio(procs, phys, folio, Some((pid, src_addr, pfn))) {
                    return (moved, Some(e));
                }
                mm = procs.get_mut(&pid).expect("pid");
                let len = src_end - src_addr;
                step = move_pages_ptes(mm, phys, &dst_vma, dst_addr, src_addr, len, holes, batched);
            }
            match step {
                Ok(Step::Moved(n)) => {
                    dst_addr += n;
                    src_addr += n;
                    moved += n;
                }
                Ok(Step::Again) => {} // the source PMD was split: the same address again
                Ok(Step::SplitFolio(..)) => unreachable!("split above"),
                Err(e) => return (moved, Some(e)),
            }
        }
        (moved, None)
    }
}

/// What one step of move_pages()'s loop did.
#[derive(Debug)]
enum Step {
    /// Bytes moved.
    Moved(u64),
    /// The source PMD was split: the same address again.
    Again,
    /// The source PTE maps this large folio (the page at this frame):
    /// split it and read the PTE again.
    SplitFolio(crate::core::folio::FolioRef, Pfn),
}

/// One iteration of move_pages()'s loop (§7.3.1–4).
#[allow(clippy::too_many_arguments)]
fn move_step(
    mm: &mut crate::mm::mm::Mm,
    phys: &mut crate::core::folio::PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
    src_end: u64,
    holes: bool,
    batched: bool,
) -> Result<Step, Errno> {
    // §7.3.1 mm_find_pmd(): no PMD table for src (a PTE table in the
    // slot, found through the walk cache, proves there is one).
    let src_pmd = mm.pt.pmd(src_addr);
    let mut allocated = false;
    if !matches!(src_pmd, PmdSlot::Table(_)) && mm.pt.table_at(src_addr, 2).is_none() {
        if !holes {
            rule!(mm.pt.hw, UffdMoveNoSrcPmdTable);
            return Err(Errno::ENOENT);
        }
        rule!(mm.pt.hw, UffdMoveHolesAllocSrc);
        mm.pt.pmd_alloc(src_addr, phys).ok_or(Errno::ENOMEM)?;
        allocated = true;
    }
    // §7.3.2 mm_alloc_pmd(dst) (nothing to allocate when the walk
    // cache already holds dst's PTE table); a huge destination PMD is
    // EEXIST.
    let mut dst_pmd = mm.pt.pmd(dst_addr);
    if !matches!(dst_pmd, PmdSlot::Table(_)) {
        mm.pt.pmd_alloc(dst_addr, phys).ok_or(Errno::ENOMEM)?;
        dst_pmd = mm.pt.pmd(dst_addr);
        allocated = true;
    }
    if let PmdSlot::Leaf(_) = dst_pmd {
        rule!(mm.pt.hw, UffdMoveDstHugePmd);
        return Err(Errno::EEXIST);
    }
    // The source PMD as read above unless a table was allocated since
    // (the same read: these are the model's own lookups, uncounted).
    let src_pmd = if allocated {
        mm.pt.pmd(src_addr)
    } else {
        src_pmd
    };
    match src_pmd {
        PmdSlot::Leaf(leaf) => {
            // §7.3.3: a THP (or the huge zero page) at the source.
            let splits = !src_addr.is_multiple_of(PMD_SIZE)
                || !dst_addr.is_multiple_of(PMD_SIZE)
                || src_end - src_addr < PMD_SIZE;
            if splits || dst_pmd != PmdSlot::None {
                if Some(leaf.pfn) != phys.huge_zero && !phys.anon_exclusive(leaf.pfn) {
                    rule!(mm.pt.hw, UffdMoveThpNotExclusive);
                    return Err(Errno::EBUSY);
                }
                rule!(mm.pt.hw, UffdMoveSplitSrcPmd);
                split_huge_pmd(mm, phys, src_addr & !(PMD_SIZE - 1));
                return Ok(Step::Again); // the folio is split by move_pages_ptes()
            }
            move_pages_huge_pmd(mm, dst_vma, dst_addr, src_addr, leaf, phys.huge_zero)?;
            Ok(Step::Moved(PMD_SIZE))
        }
        src_pmd => {
            // §7.3.4.
            if src_pmd == PmdSlot::None {
                if !holes {
                    rule!(mm.pt.hw, UffdMoveNoSrcPmd);
                    return Err(Errno::ENOENT);
                }
                mm.pt.pte_alloc(src_addr, phys).ok_or(Errno::ENOMEM)?;
            }
            if !matches!(dst_pmd, PmdSlot::Table(_)) || src_pmd == PmdSlot::None {
                mm.pt.pte_alloc(dst_addr, phys).ok_or(Errno::ENOMEM)?;
            }
            let len = src_end - src_addr;
            move_pages_ptes(mm, phys, dst_vma, dst_addr, src_addr, len, holes, batched)
        }
    }
}

/// §7.4: move what the source PTE holds: the bytes moved (one page, or on
/// the batched path a run of present pages), or the large folio to split
/// before reading again (the caller splits it: every process's mappings
/// of it change).
/// Linux: mm/userfaultfd.c move_pages_ptes() (6.18; move_pages_pte()
/// before).
#[allow(clippy::too_many_arguments)]
fn move_pages_ptes(
    mm: &mut crate::mm::mm::Mm,
    phys: &mut crate::core::folio::PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
    len: u64,
    holes: bool,
    batched: bool,
) -> Result<Step, Errno> {
    // §7.4.2: the destination must be strictly empty (a guard
    // marker is not: checked live; a marker is an entry that is
    // not none, so the one read decides).
    if !mm.pt.pte_raw_is_none(dst_addr) {
        rule!(mm.pt.hw, UffdMoveDstNotEmpty);
        return Err(Errno::EEXIST);
    }
    // The source PTE, read once (ptep_get(), counted).
    let src_entry = src_ptep_get(mm, src_addr);
    // §7.4.7: a swap PTE moves as a swap PTE, without swap-in.
    if let Entry::Swap(s) = src_entry {
        rule!(mm.pt.hw, UffdMoveSwapPte);
        crate::mm::swap::uffd_move_swap_pte(mm, phys, src_addr, dst_addr, s)?;
        return Ok(Step::Moved(PAGE_SIZE));
    }
    // §7.4.3: a hole at the source.
    let src_pte = match src_entry {
        Entry::Leaf(l) => l,
        // §7.4.7: a non-present source that is neither swap nor
        // migration entry (a guard marker) is EFAULT (checked live).
        _ if crate::mm::marker::is_guard(mm, src_addr) => return Err(Errno::EFAULT),
        _ if holes => return Ok(Step::Moved(PAGE_SIZE)),
        _ => return Err(Errno::ENOENT),
    };
    // §7.4.4: the zero page moves as the zero page.
    if src_pte.flags.contains(LeafFlags::SPECIAL) {
        rule!(mm.pt.hw, UffdMoveZeroPage);
        move_zeropage_pte(mm, phys, dst_vma, dst_addr, src_addr);
        return Ok(Step::Moved(PAGE_SIZE));
    }
    // move_pages_ptes(): both PTE tables mapped and locked; the
    // folio found, referenced and locked (folio_get, folio_trylock;
    // folio_unlock, folio_put at the end of the step).
    // (move_step() found both PTE tables: the reads above went through
    // them.)
    mm.pt.pte_offset_map_lock_found();
    mm.pt.pte_offset_map_lock_found();
    mm.pt.hw.one(HwEvent::StructPageLine);
    mm.pt.hw.add(HwEvent::FolioRefAtomic, 4);
    // §7.4.5: vm_normal_folio() and PageAnonExclusive(&folio->page):
    // the folio's first page decides (for a large folio, the head).
    let folio = phys.folio_of(src_pte.pfn).ok_or(Errno::EBUSY)?;
    if !phys.anon_exclusive(folio.head) {
        rule!(mm.pt.hw, UffdMoveNotExclusive);
        return Err(Errno::EBUSY);
    }
    if folio.is_large() {
        // Split the whole folio, then look again (split_folio()
        // under the folio lock; "goto retry"): the caller splits.
        rule!(mm.pt.hw, UffdMoveSplitLargeFolio);
        return Ok(Step::SplitFolio(folio, src_pte.pfn));
    }
    // folio_get_anon_vma() + anon_vma_trylock_write(), released
    // (anon_vma_unlock_write(), put_anon_vma()) at the step's end.
    // Linux: mm/userfaultfd.c move_pages_ptes().
    mm.pt.hw.one(HwEvent::AnonVmaLock);
    if batched {
        move_present_ptes_batched(mm, phys, dst_vma, dst_addr, src_addr, src_pte, len)
    } else {
        move_present_pte_per_page(mm, phys, dst_vma, dst_addr, src_addr, src_pte)
    }
    .map(Step::Moved)
}

/// §7.2 checks after the lookup, in the kernel's order: not shared, each
/// range inside its VMA, then validate_move_areas().
/// Linux: mm/userfaultfd.c move_pages(), validate_move_areas(),
/// vma_move_compatible().
fn validate_move_vmas(
    id: UffdId,
    src_vma: &Vma,
    dst_vma: &Vma,
    src_start: u64,
    dst_start: u64,
    len: u64,
) -> Result<(), Errno> {
    if src_vma.flags.contains(VmFlags::SHARED) || src_start + len > src_vma.end {
        return Err(Errno::EINVAL);
    }
    if dst_vma.flags.contains(VmFlags::SHARED) || dst_start + len > dst_vma.end {
        return Err(Errno::EINVAL);
    }
    // Same access flags and vm_page_prot (a function of the access flags
    // for private anonymous memory).
    if (src_vma.flags & VM_ACCESS_FLAGS) != (dst_vma.flags & VM_ACCESS_FLAGS)
        || vm_page_prot(src_vma.flags) != vm_page_prot(dst_vma.flags)
    {
        return Err(Errno::EINVAL);
    }
    if src_vma.flags.contains(VmFlags::LOCKED) != dst_vma.flags.contains(VmFlags::LOCKED) {
        return Err(Errno::EINVAL);
    }
    if !src_vma.flags.contains(VmFlags::WRITE) {
        return Err(Errno::EINVAL);
    }
    let incompatible = VmFlags::PFNMAP | VmFlags::IO | VmFlags::HUGETLB | VmFlags::MIXEDMAP;
    if src_vma.flags.intersects(incompatible) || dst_vma.flags.intersects(incompatible) {
        return Err(Errno::EINVAL);
    }
    // The destination must be registered with this context (§7.2.7); the
    // source need not be registered at all. Both are anonymous.
    if dst_vma.uffd_ctx() != Some(id) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// §7.3.3: move a whole PMD (an exclusive THP, or the huge zero page) to an
/// empty, aligned destination PMD, with its deposited page table. The
/// destination PMD is young, dirty and writable in the destination's
/// protection. For the huge zero page the model follows the fixed kernels
/// (the entry moves as it is, minus uffd-wp); v6.16–v6.19 before the March
/// 2026 fix install a bogus frame instead (§7.3.3, scenario 26: never run
/// live). Linux: mm/huge_memory.c move_pages_huge_pmd().
fn move_pages_huge_pmd(
    mm: &mut crate::mm::mm::Mm,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
    leaf: Leaf,
    huge_zero: Option<Pfn>,
) -> Result<(), Errno> {
    let dst_pmd = if Some(leaf.pfn) == huge_zero {
        rule!(mm.pt.hw, UffdMoveHugeZeroPmd);
        let mut l = leaf;
        l.flags.remove(LeafFlags::UFFD_WP);
        l
    } else {
        // The head's PageAnonExclusive (no pins in the model).
        Leaf {
            pfn: leaf.pfn,
            flags: vm_page_prot(dst_vma.flags)
                | LeafFlags::YOUNG
                | LeafFlags::DIRTY
                | LeafFlags::WRITE,
        }
    };
    // pmdp_huge_clear_flush(); folio_move_anon_rmap() and folio->index
    // (not observable: the same mm maps the same folio once); set_pmd_at();
    // pgtable_trans_huge_withdraw() + deposit at the destination.
    rule!(mm.pt.hw, UffdMovePmd);
    mm.pt.set_pmd(src_addr, Entry::None);
    mm.pt.set_pmd(dst_addr, Entry::Leaf(dst_pmd));
    if let Some(t) = mm.deposited.remove(&src_addr) {
        mm.deposited.insert(dst_addr, t);
    }
    Ok(())
}

/// §7.4.4: clear the source zero-page PTE (with a flush) and map the zero
/// page at the destination. Linux: mm/userfaultfd.c move_zeropage_pte().
fn move_zeropage_pte(
    mm: &mut crate::mm::mm::Mm,
    phys: &crate::core::folio::PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
) {
    mm.pt.clear_ptes(src_addr, 1);
    mm.pt
        .set_ptes(dst_addr, zero_pte(dst_vma, phys.zero_pfn), 1, phys);
}

/// The 6.8–6.17 algorithm (`before uffd-move-batch`): one present page per
/// step. The source PTE is cleared with ptep_clear_flush() — one TLB flush
/// per page — and the destination written with set_pte_at(). The page keeps
/// its frame, mapcount and PageAnonExclusive; the folio's anon_vma and index
/// follow the destination (not observable). RSS is unchanged.
/// Linux: mm/userfaultfd.c move_present_pte() (v6.17).
fn move_present_pte_per_page(
    mm: &mut crate::mm::mm::Mm,
    phys: &crate::core::folio::PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
    read: Leaf,
) -> Result<u64, Errno> {
    // Re-checked under both page-table locks: small and exclusive.
    let Some(src_pte) = reread_src(mm, src_addr, read) else {
        return Err(Errno::EAGAIN);
    };
    if !phys.anon_exclusive(src_pte.pfn) {
        return Err(Errno::EBUSY);
    }
    rule!(mm.pt.hw, UffdMovePerPage);
    mm.pt.hw.mark_batch(src_addr, 1, "uffd move");
    // Under both PTLs: pte_same() re-check of the destination (one load).
    mm.pt.hw.ptep_get_reads(1);
    // ptep_clear_flush(): the clear and a one-page flush, per page.
    let Some(old) = mm.pt.ptep_get_and_clear(src_addr) else {
        return Err(Errno::EAGAIN); // not reached: present above
    };
    mm.pt.flush_tlb_page(src_addr);
    // folio_move_anon_rmap() and folio->index = linear_page_index().
    mm.pt.hw.one(HwEvent::RmapUpdate);
    mm.pt.set_ptes(dst_addr, moved_pte(dst_vma, old), 1, phys);
    Ok(PAGE_SIZE)
}

/// 6.18's batched move (§7.5): after the first present page, following
/// pages move under the same page-table locks while the destination PTE is
/// empty and the source maps an exclusive small folio (not the zero page)
/// with the first page's anon_vma, up to the end of the range or of either
/// PMD. Source PTEs are cleared without per-page flushes (ptep_get_and_clear)
/// and one ranged flush follows. The first page that does not qualify ends
/// the batch; the next step handles it. Every folio the model holds was
/// faulted in or moved into an anon_vma of this mm and there are no
/// contended folio locks, so only the PTE and exclusivity tests can end a
/// batch early.
/// Linux: mm/userfaultfd.c move_present_ptes(),
/// check_ptes_for_batched_move() (v6.18).
fn move_present_ptes_batched(
    mm: &mut crate::mm::mm::Mm,
    phys: &crate::core::folio::PhysMem,
    dst_vma: &Vma,
    dst_addr: u64,
    src_addr: u64,
    read: Leaf,
    len: u64,
) -> Result<u64, Errno> {
    let Some(first) = reread_src(mm, src_addr, read) else {
        return Err(Errno::EAGAIN);
    };
    // The re-check of PageAnonExclusive under the locks: move_pages_ptes()
    // checked this order-0 folio's page a moment ago and the model runs one
    // thread, so it holds.
    debug_assert!(phys.anon_exclusive(first.pfn));
    // The batch stays inside both PMDs.
    let dst_end = pmd_end(dst_addr, dst_addr + len);
    let src_end = pmd_end(src_addr, src_addr + (dst_end - dst_addr));
    let (mut src, mut dst) = (src_addr, dst_addr);
    loop {
        // ptep_get_and_clear() (no per-page flush), folio_move_anon_rmap(),
        // set_pte_at().
        let Some(old) = mm.pt.ptep_get_and_clear(src) else {
            return Err(Errno::EAGAIN); // not reached: present when the batch took it
        };
        mm.pt.hw.one(HwEvent::RmapUpdate);
        mm.pt.set_ptes(dst, moved_pte(dst_vma, old), 1, phys);
        src += PAGE_SIZE;
        dst += PAGE_SIZE;
        if src == src_end || !batch_continues(mm, phys, src, dst) {
            break;
        }
        // check_ptes_for_batched_move() took the folio lock; unlocked after
        // the move (no reference is taken for batched pages).
        mm.pt.hw.one(HwEvent::StructPageLine);
        mm.pt.hw.add(HwEvent::FolioRefAtomic, 2);
    }
    if src - src_addr > PAGE_SIZE {
        rule!(mm.pt.hw, UffdMoveBatch);
    }
    mm.pt
        .hw
        .mark_batch(src_addr, (src - src_addr) / PAGE_SIZE, "uffd move");
    // flush_tlb_range(src_vma, src_addr, src): one flush for the batch.
    mm.pt.flush_tlb_range(src_addr, src, PAGE_SIZE);
    Ok(src - src_addr)
}

/// `ptep_get()` of the source PTE at `va`: the entry
/// [`crate::core::pgtable::PageTables::pte`] returns, with the same events,
/// from one uncounted read of the model's table. Every entry but a leaf of
/// an arm64 contiguous block costs the one load and the one `ptep_get()`
/// call of `ptep_get_reads(1)` on both arches (a
/// block's leaf gathers young/dirty over the block and counts its loads:
/// it is read through `pte()`). Linux: mm/userfaultfd.c move_pages_ptes()'s
/// `orig_src_pte = ptep_get(src_pte)`.
fn src_ptep_get(mm: &crate::mm::mm::Mm, va: u64) -> Entry {
    match mm.pt.pte_peek(va) {
        Entry::Leaf(l) if l.valid_cont() => mm.pt.pte(va),
        e => {
            mm.pt.hw.ptep_get_reads(1);
            e
        }
    }
}

/// The re-read of the source PTE under both page-table locks (what the
/// model counts as the move's own `ptep_get()`): `read`, the leaf
/// [`src_ptep_get`] returned in this step, with the read's events. Nothing
/// changed the entry since (the model runs one thread; the kernel re-reads
/// because others may run), so the value is the same as a second walk's;
/// a contiguous-block leaf is read again through `pte()` for its gathered
/// bits and loads. `None` when the entry is not present.
fn reread_src(mm: &crate::mm::mm::Mm, va: u64, read: Leaf) -> Option<Leaf> {
    if read.valid_cont() {
        return match mm.pt.pte(va) {
            Entry::Leaf(l) => Some(l),
            _ => None,
        };
    }
    debug_assert_eq!(mm.pt.pte_peek(va), Entry::Leaf(read));
    mm.pt.hw.ptep_get_reads(1);
    Some(read)
}

/// Whether the page at `src` joins the running batch.
/// Linux: mm/userfaultfd.c check_ptes_for_batched_move().
fn batch_continues(
    mm: &crate::mm::mm::Mm,
    phys: &crate::core::folio::PhysMem,
    src: u64,
    dst: u64,
) -> bool {
    if !matches!(mm.pt.pte_raw(dst), Entry::None) {
        return false;
    }
    let Entry::Leaf(pte) = mm.pt.pte(src) else {
        return false;
    };
    if pte.flags.contains(LeafFlags::SPECIAL) {
        return false;
    }
    match phys.folio_of(pte.pfn) {
        Some(f) => !f.is_large() && phys.anon_exclusive(f.head),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::uapi::{MapFlags, Prot, ThpKnob, ThpMode};
    use crate::{ArchKind, ModelConfig};

    /// The reads the MOVE and COPY steps take in place of `pte_raw()` and
    /// `pte_offset_map_lock()`: `pte_raw_is_none()` answers what
    /// `matches!(pte_raw(), Entry::None)` answers and
    /// `pte_offset_map_lock_found()` counts what `pte_offset_map_lock()`
    /// counts, for every entry of a 2 MiB slot holding present order-0
    /// pages, the zero page, a 64 KiB mTHP (an arm64 contiguous block),
    /// swap entries, guard markers and none entries, and for addresses
    /// with no PTE table. Fails when a non-none entry reads as none.
    #[test]
    fn the_steps_none_read_and_lock_count_what_pte_raw_and_the_lock_count() {
        use crate::core::swapfile::SwapKind;
        use crate::types::uapi::Advice;
        const A: u64 = 0x7f00_0000_0000;
        let rw = Prot::READ | Prot::WRITE;
        let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        for arch in [ArchKind::X86_64, ArchKind::Arm64] {
            let mut m = Model::new(ModelConfig::for_arch(arch));
            m.set_swap_on(64 << 20, SwapKind::File).unwrap();
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            m.mmap(1, A, 0x20_0000, rw, fixed).unwrap();
            m.write(1, A, 1).unwrap(); // one 64 KiB folio
            m.set_thp(ThpKnob::Size(4), ThpMode::Never).unwrap();
            for k in 0..8 {
                m.write(1, A + 0x10000 + k * 0x1000, k + 2).unwrap();
            }
            m.read(1, A + 0x20000).unwrap(); // the zero page
            m.madvise(1, A + 0x12000, 0x3000, Advice::PageOut).unwrap();
            m.madvise(1, A + 0x30000, 0x2000, Advice::GuardInstall)
                .unwrap();
            let mut kinds = [0u32; 5];
            let far = A + (1 << 30); // no PTE table there
            for va in (A..A + 0x40000).step_by(0x1000).chain([far]) {
                let mm = &m.procs[&1];
                let before = mm.pt.hw.snapshot();
                let want = matches!(mm.pt.pte_raw(va), Entry::None);
                let by_raw = mm.pt.hw.snapshot();
                let got = mm.pt.pte_raw_is_none(va);
                let by_none = mm.pt.hw.snapshot();
                assert_eq!(got, want, "{} {va:#x}", arch.name());
                assert_eq!(by_none.since(&by_raw), by_raw.since(&before));
                kinds[match mm.pt.pte_peek(va) {
                    Entry::None => 0,
                    Entry::Leaf(l) if l.valid_cont() => 1,
                    Entry::Leaf(_) => 2,
                    Entry::Swap(_) => 3,
                    _ => 4,
                }] += 1;
                let _guard = mm.pt.pte_offset_map_lock(va);
                let by_lock = mm.pt.hw.snapshot();
                mm.pt.pte_offset_map_lock_found();
                let by_found = mm.pt.hw.snapshot();
                assert_eq!(by_found.since(&by_lock), by_lock.since(&by_none));
            }
            // Every kind of entry was read: none, (arm64) block leaves,
            // other leaves, swap entries and markers.
            let cont = if arch == ArchKind::Arm64 { 16 } else { 0 };
            assert_eq!(kinds[1], cont, "{} {kinds:?}", arch.name());
            assert!(
                kinds.iter().enumerate().all(|(k, &n)| k == 1 || n > 0),
                "{kinds:?}"
            );
        }
    }

    /// `src_ptep_get()` (one uncounted read, the events added) returns
    /// what `pte()` returns and counts the same events and calls, for every
    /// kind of entry the move reads: none, order-0 pages, the zero page,
    /// and a 64 KiB mTHP (an arm64 contiguous block, whose leaves gather
    /// young/dirty and count 16 loads; `reread_src` of such a leaf too).
    /// Fails when the block's leaf is taken from the uncounted read.
    #[test]
    fn the_source_read_once_counts_what_pte_counts() {
        const A: u64 = 0x7f00_0000_0000;
        let rw = Prot::READ | Prot::WRITE;
        let fixed = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        for arch in [ArchKind::X86_64, ArchKind::Arm64] {
            let mut m = Model::new(ModelConfig::for_arch(arch));
            m.set_thp(ThpKnob::Size(4), ThpMode::Always).unwrap();
            m.mmap(1, A, 0x40000, rw, fixed).unwrap();
            m.write(1, A, 1).unwrap(); // one 64 KiB folio
            m.set_thp(ThpKnob::Size(4), ThpMode::Never).unwrap();
            for k in 0..3 {
                m.write(1, A + 0x10000 + k * 0x1000, 2).unwrap(); // order-0 pages
            }
            m.read(1, A + 0x20000).unwrap(); // the zero page
            let mut conts = 0;
            for va in (A..A + 0x30000).step_by(0x1000) {
                let mm = &m.procs[&1];
                let before = mm.pt.hw.snapshot();
                let want = mm.pt.pte(va);
                let by_pte = mm.pt.hw.snapshot();
                let got = src_ptep_get(mm, va);
                let by_once = mm.pt.hw.snapshot();
                assert_eq!(got, want, "{} {va:#x}", arch.name());
                assert_eq!(
                    by_once.since(&by_pte),
                    by_pte.since(&before),
                    "{} {va:#x}",
                    arch.name()
                );
                if let Entry::Leaf(l) = want {
                    conts += u32::from(l.valid_cont());
                    let again = reread_src(mm, va, l);
                    let by_reread = mm.pt.hw.snapshot();
                    assert_eq!(again, Some(l), "{} {va:#x}", arch.name());
                    assert_eq!(by_reread.since(&by_once), by_pte.since(&before));
                }
            }
            // arm64 folds the 64 KiB folio into one contiguous block.
            assert_eq!(conts, if arch == ArchKind::Arm64 { 16 } else { 0 });
        }
    }
}
