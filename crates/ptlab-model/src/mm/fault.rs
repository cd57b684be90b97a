//! Page faults on private anonymous memory.
//!
//! Linux: mm/memory.c __handle_mm_fault(), handle_pte_fault(),
//! do_anonymous_page(), alloc_anon_folio(), do_wp_page(), wp_page_copy(),
//! wp_can_reuse_anon_folio(); mm/huge_memory.c do_huge_pmd_anonymous_page(),
//! do_huge_pmd_wp_page(), do_huge_zero_wp_pmd(). Rule tags (F1, P3, W4...)
//! label the rules as stated beside them, each with its kernel function.

use crate::core::addr::{Order, Pfn, PMD_ORDER, PMD_SIZE};
const PMD_ORDER_U32: u32 = PMD_ORDER as u32;
use crate::core::addr::{HPAGE_PMD_NR, PAGE_SIZE};
use crate::core::arch::SwapPte;
use crate::core::arch::{Entry, Leaf, LeafFlags};
use crate::core::folio::{FolioRef, PhysMem};
use crate::core::hw::HwEvent;
use crate::core::pgtable::PmdSlot;
use crate::core::rules::rule;
use crate::core::stats::{MthpStat, VmEvent};
use crate::core::thp::{orders_desc, ThpSettings};
use crate::core::vma::{VmFlags, Vma};
use crate::mm::mm::{AnonVmaIds, Mm};
use crate::mm::swap::count_swap_map;
use crate::types::AccessFault;

/// Everything a fault needs besides the mm.
pub struct FaultEnv<'a> {
    pub phys: &'a mut PhysMem,
    pub thp: &'a ThpSettings,
    pub ids: &'a mut AnonVmaIds,
}

/// Resolve a fault at `addr`; afterwards the page is mapped, writable if
/// `write`. Returns the PTE-level or PMD-level leaf now mapping the page.
/// Linux: mm/memory.c handle_mm_fault() (access checks from
/// arch/x86/mm/fault.c access_error()).
pub fn handle_fault(
    mm: &mut Mm,
    env: &mut FaultEnv,
    addr: u64,
    write: bool,
) -> Result<Pfn, AccessFault> {
    let vma = mm
        .vmas
        .find(addr)
        .cloned()
        .ok_or(AccessFault::Segv { addr })?;
    // handle_pte_marker(): a guard marker is VM_FAULT_SIGSEGV whatever the
    // access (checked before any uffd or THP path: the PTE is not none).
    if crate::mm::marker::is_guard(mm, addr) {
        rule!(mm.pt.hw, FaultGuardSegv);
        return Err(AccessFault::Segv { addr });
    }
    if write && !vma.flags.contains(VmFlags::WRITE) {
        rule!(mm.pt.hw, FaultWriteReadonly);
        return Err(AccessFault::Segv { addr });
    }
    if !vma
        .flags
        .intersects(VmFlags::READ | VmFlags::WRITE | VmFlags::EXEC)
    {
        rule!(mm.pt.hw, FaultNoAccess);
        return Err(AccessFault::Segv { addr });
    }
    let slot = addr & !(PMD_SIZE - 1);
    // A NUMA-hinting entry: do_numa_page() / do_huge_pmd_numa_page(). The
    // access then retries; a write the restored entry does not allow takes
    // a second fault, which goes on below (do_wp_page()).
    if numa_hinting_fault(mm, env, &vma, addr) {
        if !write || mm.pt.mapped_for_access(addr, true).is_some() {
            if let Some(pfn) = mm.pt.mapped_for_access(addr, write) {
                return Ok(pfn);
            }
        }
        let hw = &mm.pt.hw;
        hw.page_fault();
        hw.one(HwEvent::VmaLookup);
        let _ptl = mm.pt.pte_offset_map_lock(addr);
    }
    // F1: an empty PMD slot where PMD order is allowed tries a PMD THP first.
    if mm.pt.pmd(addr) == PmdSlot::None && pmd_thp_allowed(mm, env.thp, &vma, addr) {
        if let Some(pfn) = do_huge_pmd_anonymous_page(mm, env, &vma, addr, write)? {
            return Ok(pfn);
        }
    }
    // F2: a present huge leaf.
    if let PmdSlot::Leaf(leaf) = mm.pt.pmd(addr) {
        if !write || leaf.write() {
            return Ok(leaf.pfn.add((addr - slot) >> 12));
        }
        // userfaultfd_huge_pmd_wp(): a write to a uffd-wp PMD in a WP range.
        if uffd_wp_fault(&vma, leaf) {
            rule!(mm.pt.hw, FaultUffdWpHugePmd);
            return Err(AccessFault::Uffd { addr });
        }
        if let Some(pfn) = do_huge_pmd_wp_page(mm, env, &vma, addr, leaf) {
            return Ok(pfn);
        }
        // Split: continue at PTE level.
    }
    if mm.pt.pte_alloc(addr, env.phys).is_none() {
        return Err(AccessFault::Oom { addr });
    }
    match mm.pt.pte(addr) {
        Entry::None => do_anonymous_page(mm, env, &vma, addr, write),
        Entry::Leaf(l) if write && !l.write() => do_wp_page(mm, env, &vma, addr, l),
        Entry::Leaf(l) => Ok(l.pfn),
        Entry::Table(_) => unreachable!("PTE level holds no tables"),
        // handle_pte_marker(): guard markers were refused above; a uffd-wp
        // marker is not made for anonymous memory.
        Entry::Marker(_) => Err(AccessFault::Segv { addr }),
        Entry::Swap(s) => {
            // do_swap_page(); a write it could not satisfy (the page is not
            // exclusive) continues in do_wp_page().
            do_swap_page(mm, env, &vma, addr, write, s)?;
            // do_wp_page() continues from vmf->orig_pte: no second load.
            match mm.pt.pte_peek(addr) {
                Entry::Leaf(l) if write && !l.write() => do_wp_page(mm, env, &vma, addr, l),
                Entry::Leaf(l) => Ok(l.pfn),
                _ => unreachable!("do_swap_page() maps the page"),
            }
        }
    }
}

/// A fault on a NUMA-hinting entry (PROT_NONE in an accessible VMA) at PMD
/// or PTE level is handled by crate::mm::numa; true when it was one.
/// Linux: mm/memory.c __handle_mm_fault() (`pmd_protnone()` →
/// do_huge_pmd_numa_page()), handle_pte_fault() (`pte_protnone()` →
/// do_numa_page()).
fn numa_hinting_fault(mm: &mut Mm, env: &mut FaultEnv, vma: &Vma, addr: u64) -> bool {
    use crate::mm::numa::{do_huge_pmd_numa_page, do_numa_page, is_hinting};
    match mm.pt.pmd(addr) {
        PmdSlot::Leaf(l) if is_hinting(vma, l) => {
            do_huge_pmd_numa_page(mm, env.phys, vma, addr & !(PMD_SIZE - 1), l);
            true
        }
        PmdSlot::Table(_) => match mm.pt.pte_peek(addr) {
            Entry::Leaf(l) if is_hinting(vma, l) => {
                // vmf->orig_pte: the fault's ptep_get().
                let Entry::Leaf(orig) = mm.pt.pte(addr) else {
                    unreachable!("peeked a leaf")
                };
                do_numa_page(mm, env.phys, vma, addr, orig);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// PMD order allowed by policy and the 2 MiB block lies inside the VMA.
/// userfaultfd does not restrict the PMD order (__thp_vma_allowable_orders()
/// has no uffd test): a uffd-armed VMA takes the PMD path, which hands a
/// MISSING fault to userfaultfd itself (checked live on 6.18.44: after a
/// MISSING fault in a MADV_HUGEPAGE range and UNREGISTER, a write maps a
/// PMD THP, so the fault left no PTE table).
/// Linux: thp_vma_allowable_order(PMD_ORDER) + thp_vma_suitable_order().
pub(crate) fn pmd_thp_allowed(mm: &Mm, thp: &ThpSettings, vma: &Vma, addr: u64) -> bool {
    let mask = thp.allowed_orders(
        vma.flags.contains(VmFlags::HUGEPAGE),
        thp_disabled(mm, vma),
        false,
    );
    let haddr = addr & !(PMD_SIZE - 1);
    mask & (1 << PMD_ORDER) != 0 && haddr >= vma.start && haddr + PMD_SIZE <= vma.end
}

/// A write to `leaf` goes to userfaultfd as a WP fault: the VMA is
/// registered WP and the entry carries uffd-wp (UFFD_FEATURE_WP_ASYNC,
/// which resolves such faults in the kernel, is never requested).
/// Linux: include/linux/userfaultfd_k.h userfaultfd_pte_wp(),
/// userfaultfd_huge_pmd_wp().
fn uffd_wp_fault(vma: &Vma, leaf: Leaf) -> bool {
    vma.flags.contains(VmFlags::UFFD_WP) && leaf.flags.contains(LeafFlags::UFFD_WP)
}

fn leaf_for_new_folio(vma: &Vma, pfn: Pfn) -> Leaf {
    let mut flags = LeafFlags::YOUNG;
    if vma.flags.contains(VmFlags::WRITE) {
        flags |= LeafFlags::WRITE | LeafFlags::DIRTY;
    }
    if vma.flags.contains(VmFlags::EXEC) {
        flags |= LeafFlags::EXEC;
    }
    Leaf { pfn, flags }
}

/// P1–P3. Returns `Ok(None)` to fall back to the PTE path.
fn do_huge_pmd_anonymous_page(
    mm: &mut Mm,
    env: &mut FaultEnv,
    vma: &Vma,
    addr: u64,
    write: bool,
) -> Result<Option<Pfn>, AccessFault> {
    let slot = addr & !(PMD_SIZE - 1);
    // vmf_anon_prepare() runs before the zero-page branch (P1).
    mm.anon_vma_prepare(addr, env.ids);
    if mm.pt.pmd_alloc(slot, env.phys).is_none() {
        return Ok(None);
    }
    let missing = vma.flags.contains(VmFlags::UFFD_MISSING);
    if !write && env.thp.use_zero_page {
        // P2: map the huge zero folio read-only.
        let Some(hz) = env.phys.get_huge_zero() else {
            return Ok(None);
        };
        // The huge zero folio is taken before the userfaultfd_missing()
        // check, which then hands the fault to userfaultfd.
        if missing {
            rule!(mm.pt.hw, FaultUffdMissingHugeZero);
            return Err(AccessFault::Uffd { addr });
        }
        let Some(pgtable) = env.phys.alloc_pt_page() else {
            return Ok(None);
        };
        rule!(mm.pt.hw, FaultHugeZeroPmd);
        mm.deposited.insert(slot, pgtable);
        let mut flags = LeafFlags::YOUNG | LeafFlags::SPECIAL;
        if vma.flags.contains(VmFlags::EXEC) {
            flags |= LeafFlags::EXEC;
        }
        mm.pt.set_pmd(slot, Entry::Leaf(Leaf { pfn: hz, flags }));
        return Ok(Some(hz.add((addr - slot) >> 12)));
    }
    // __do_huge_pmd_anonymous_page(): the folio and page table it allocates
    // are freed again when a MISSING fault goes to userfaultfd (nothing
    // observable; an allocation failure would count thp_fault_fallback
    // first, which the model, never short of memory here, skips).
    if missing {
        rule!(mm.pt.hw, FaultUffdMissingPmd);
        return Err(AccessFault::Uffd { addr });
    }
    rule!(mm.pt.hw, FaultPmdThp);
    Ok(map_new_pmd_folio(mm, env, vma, slot).map(|folio| folio.head.add((addr - slot) >> 12)))
}

/// Allocate an order-9 folio and map it with one PMD (P3, and P4 over the
/// huge zero PMD). Counts the fallback stats when allocation fails.
fn map_new_pmd_folio(mm: &mut Mm, env: &mut FaultEnv, vma: &Vma, slot: u64) -> Option<FolioRef> {
    let Some(folio) = env.phys.alloc_anon_folio(Order::PMD) else {
        env.phys.stats.vm(VmEvent::ThpFaultFallback, 1);
        env.phys
            .stats
            .mthp(PMD_ORDER, MthpStat::AnonFaultFallback, 1);
        return None;
    };
    // A PMD mapping carries a deposited page table; the huge zero PMD this
    // may replace (P4) already has one.
    if let std::collections::btree_map::Entry::Vacant(e) = mm.deposited.entry(slot) {
        let Some(pgtable) = env.phys.alloc_pt_page() else {
            env.phys.free_unused_folio(folio);
            return None;
        };
        e.insert(pgtable);
    }
    // folio_zero_user(): 512 pages cleared; map under the PMD lock.
    env.phys.hw.page_zero(HPAGE_PMD_NR, PMD_ORDER);
    env.phys.add_rmap_pmd(folio, mm.pid, true);
    env.phys.ref_add(folio, 1);
    mm.rss_anon += HPAGE_PMD_NR;
    mm.pt
        .set_pmd(slot, Entry::Leaf(leaf_for_new_folio(vma, folio.head)));
    env.phys.stats.vm(VmEvent::ThpFaultAlloc, 1);
    env.phys.stats.mthp(PMD_ORDER, MthpStat::AnonFaultAlloc, 1);
    if vma.flags.contains(VmFlags::LOCKED) {
        // mlock_new_folio() of a large folio drains the mlock batch at once.
        env.phys.folio_batches.add(folio.head, true, true);
    } else {
        env.phys.folio_batches.lru_add(folio.head, true);
    }
    // shrink_underused (default 1): queued, not partially mapped.
    env.phys.deferred_split_folio(folio, false);
    Some(folio)
}

/// P4/P5: a write to a read-only PMD. `None` means the PMD was split and
/// the fault continues at PTE level.
fn do_huge_pmd_wp_page(
    mm: &mut Mm,
    env: &mut FaultEnv,
    vma: &Vma,
    addr: u64,
    leaf: Leaf,
) -> Option<Pfn> {
    let slot = addr & !(PMD_SIZE - 1);
    if Some(leaf.pfn) == env.phys.huge_zero {
        // P4: replace the huge zero PMD with a fresh THP (do_huge_zero_wp_pmd).
        mm.anon_vma_prepare(addr, env.ids);
        if let Some(folio) = map_new_pmd_folio(mm, env, vma, slot) {
            rule!(mm.pt.hw, FaultHugeZeroWpThp);
            return Some(folio.head.add((addr - slot) >> 12));
        }
        // Allocation failed (fallback counted): split into zero-page PTEs.
        crate::mm::zap::split_huge_pmd(mm, env.phys, slot);
        return None;
    }
    let folio = env.phys.folio_of(leaf.pfn).expect("PMD maps a folio");
    // P5: exclusive, or the only reference → reuse the whole PMD.
    let reuse = env.phys.anon_exclusive(folio.head) || env.phys.refcount(folio) == 1;
    if reuse {
        rule!(mm.pt.hw, FaultHugePmdReuse);
        env.phys.set_anon_exclusive(folio.head, true);
        let mut l = leaf;
        l.flags |= LeafFlags::WRITE | LeafFlags::DIRTY | LeafFlags::YOUNG;
        mm.pt.set_pmd(slot, Entry::Leaf(l));
        return Some(folio.head.add((addr - slot) >> 12));
    }
    rule!(mm.pt.hw, FaultHugePmdCowSplit);
    crate::mm::zap::split_huge_pmd(mm, env.phys, slot);
    None
}

/// THP is off for this VMA: VM_NOHUGEPAGE, or the mm's prctl state.
/// Linux: include/linux/huge_mm.h vma_thp_disabled().
fn thp_disabled(mm: &Mm, vma: &Vma) -> bool {
    vma.flags.contains(VmFlags::NOHUGEPAGE)
        || mm
            .thp_disable
            .disables(vma.flags.contains(VmFlags::HUGEPAGE))
}

/// F5: the order a write fault allocates.
fn choose_order(mm: &Mm, thp: &ThpSettings, vma: &Vma, addr: u64) -> Order {
    // F5.1 userfaultfd_armed(): any registration (MISSING or WP) means
    // order 0 (checked live: a WP-only range with 64K=always faults order 0).
    let mut mask = thp.allowed_orders(
        vma.flags.contains(VmFlags::HUGEPAGE),
        thp_disabled(mm, vma),
        vma.flags.intersects(crate::core::vma::VM_UFFD_FLAGS),
    );
    mask &= (1 << PMD_ORDER) - 1; // orders 2..8 here; order 9 is F1's job
                                  // F5.3: drop orders whose aligned block leaves the VMA, highest first,
                                  // stopping at the first that fits.
    for o in orders_desc(mask) {
        let size = o.bytes();
        let base = addr & !(size - 1);
        if base >= vma.start && base + size <= vma.end {
            break;
        }
        rule!(mm.pt.hw, FaultOrderOutsideVma);
        mask &= !(1 << o.0);
    }
    // F5.4: drop orders whose block holds any non-none PTE, stopping at the
    // first all-none block.
    for o in orders_desc(mask) {
        let base = addr & !(o.bytes() - 1);
        // pte_range_none(): a guard marker is not none. A block whose
        // stored entries are all zero reads none at every one of its
        // `o.pages()` loads: counted in one addition, read off the
        // table's runs (else entry by entry, stopping at the first
        // non-none one as the kernel's loop does).
        let all_none = if mm.pt.ptes_none(base, o.pages()) {
            mm.pt.hw.add(HwEvent::PteLoad, o.pages());
            true
        } else {
            (0..o.pages()).all(|k| matches!(mm.pt.pte_raw(base + k * PAGE_SIZE), Entry::None))
        };
        if all_none {
            rule!(mm.pt.hw, FaultLargeOrder);
            return o;
        }
    }
    Order::ZERO
}

/// F4: a fault on a none PTE.
fn do_anonymous_page(
    mm: &mut Mm,
    env: &mut FaultEnv,
    vma: &Vma,
    addr: u64,
    write: bool,
) -> Result<Pfn, AccessFault> {
    // userfaultfd_missing(): the fault goes to userfaultfd, after the PTE
    // table exists; a write fault prepares the anon_vma first (and
    // allocates an order-0 folio it then frees: nothing observable).
    let missing = vma.flags.contains(VmFlags::UFFD_MISSING);
    if !write {
        if missing {
            rule!(mm.pt.hw, FaultUffdMissingRead);
            return Err(AccessFault::Uffd { addr });
        }
        // F4.1: the shared zero page, read-only and special; no anon_vma.
        let mut flags = LeafFlags::YOUNG | LeafFlags::SPECIAL;
        if vma.flags.contains(VmFlags::EXEC) {
            flags |= LeafFlags::EXEC;
        }
        rule!(mm.pt.hw, FaultZeroPage);
        let zero = env.phys.zero_pfn;
        mm.pt.set_ptes(addr, Leaf { pfn: zero, flags }, 1, env.phys);
        return Ok(zero);
    }
    mm.anon_vma_prepare(addr, env.ids);
    if missing {
        rule!(mm.pt.hw, FaultUffdMissingWrite);
        return Err(AccessFault::Uffd { addr });
    }
    let mut order = choose_order(mm, env.thp, vma, addr);
    let folio = loop {
        if let Some(f) = env.phys.alloc_anon_folio(order) {
            break f;
        }
        if order.0 == 0 {
            return Err(AccessFault::Oom { addr });
        }
        rule!(mm.pt.hw, FaultMthpFallback);
        env.phys.stats.mthp(order.0, MthpStat::AnonFaultFallback, 1);
        order = Order::ZERO;
    };
    let base = addr & !(order.bytes() - 1);
    let nr = order.pages();
    // alloc_anon_folio() → folio_zero_user() / __GFP_ZERO: every page cleared.
    env.phys.hw.page_zero(nr, order.0);
    env.phys
        .add_rmap_ptes(folio, folio.head, nr as u32, mm.pid, true);
    env.phys.ref_add(folio, nr as u32);
    mm.rss_anon += nr;
    if order.0 >= 2 {
        env.phys.stats.mthp(order.0, MthpStat::AnonFaultAlloc, 1);
    }
    mm.pt
        .set_ptes(base, leaf_for_new_folio(vma, folio.head), nr, env.phys);
    if vma.flags.contains(VmFlags::LOCKED) {
        // folio_add_lru_vma() → mlock_new_folio().
        rule!(mm.pt.hw, FaultLockedNewFolio);
        env.phys
            .folio_batches
            .add(folio.head, folio.is_large(), true);
    } else {
        // folio_add_lru_vma() → folio_add_lru().
        env.phys.folio_batches.lru_add(folio.head, folio.is_large());
    }
    Ok(folio.head.add((addr - base) >> 12))
}

/// The write faults of the empty PTEs after a large folio a write fault
/// has just mapped, in one step: the folio of `nr` pages at `head`, mapped
/// at `prev` (its first page, so the fault was block-aligned), is followed
/// by up to `max` blocks of `nr` none PTEs in the same VMA and PTE table
/// from `prev + nr` pages. Each of their faults would take the same path
/// as that one: F5 chooses the folio's order for each (the only mTHP order
/// allowed below PMD order, so no other order's fit is weighed; each block
/// inside the VMA and all none: rule F5.4 once per fault), the allocator
/// gives the next heads in order, the folio is added to the LRU-add batch
/// as a large folio (which moves the batch: nothing carries over from one
/// fault to the next), and with arm64's contiguous PTEs each folio fills
/// whole contpte blocks. Not for mlocked or userfaultfd-armed VMAs. The
/// folios are made in the folio's state ([`PhysMem::alloc_anon_run_like`])
/// and mapped as the continuation of its PTEs, which must be one run (the
/// caller checks the access left them so). Returns the blocks faulted in
/// (0: none; the caller counts their events and the fault's other steps,
/// repeating the first fault's).
/// Linux: mm/memory.c do_anonymous_page(), alloc_anon_folio(),
/// thp_vma_allowable_orders() (per fault).
pub fn fault_large_stretch(
    mm: &mut Mm,
    env: &mut FaultEnv,
    prev: u64,
    head: Pfn,
    nr: u64,
    max: u64,
) -> u64 {
    let start = prev + nr * PAGE_SIZE;
    let Some(vma) = mm.vmas.find(prev) else {
        return 0;
    };
    let size = nr * PAGE_SIZE;
    let order = match nr.trailing_zeros() {
        o @ 2..PMD_ORDER_U32 => Order(o as u8),
        _ => return 0,
    };
    if !nr.is_power_of_two()
        || !prev.is_multiple_of(size)
        || vma.flags.contains(VmFlags::LOCKED)
        || vma.flags.intersects(crate::core::vma::VM_UFFD_FLAGS)
        || !vma.flags.contains(VmFlags::WRITE)
        || vma.anon_vma.is_none()
    {
        return 0;
    }
    if let Some(c) = mm.pt.arch().cont_ptes() {
        if !nr.is_multiple_of(c as u64) {
            return 0;
        }
    }
    let mask = env.thp.allowed_orders(
        vma.flags.contains(VmFlags::HUGEPAGE),
        thp_disabled(mm, vma),
        false,
    ) & ((1 << PMD_ORDER) - 1);
    if mask != 1 << order.0 {
        return 0;
    }
    let slot_end = (prev & !(PMD_SIZE - 1)) + PMD_SIZE;
    let room = (vma.end.min(slot_end).saturating_sub(start)) / size;
    let k = max.min(room);
    if k == 0 || !mm.pt.ptes_none(start, k * nr) {
        return 0;
    }
    match mm.pt.uniform_pte_span(prev, nr) {
        Some((l, span)) if span == nr && l.pfn == head => {}
        _ => return 0,
    }
    let made = env.phys.alloc_anon_run_like(head, k);
    if made == 0 {
        return 0;
    }
    let extended = mm.pt.extend_pte_run(prev, nr, made * nr);
    debug_assert!(extended.is_some(), "checked one run above");
    mm.rss_anon += made * nr;
    made
}

/// The write faults of `blocks` whole blocks of none PTEs from `addr` in a
/// VMA whose only mTHP order below PMD order is that of one block, the
/// first one's included, as one step with the counts written out (issue
/// 14; `ModelConfig::fault_fused`): what [`handle_fault`] and the access
/// path count for each when each would take the path of a fault stretch's
/// template ([`fault_large_stretch`]) — the PMD slot holds a PTE table (no
/// PMD THP is tried, no PMD NUMA hint), the block is inside the VMA and
/// all none (no guard marker, no NUMA hint, F5 takes the one allowed
/// order: `pte_range_none()`'s loads, the large-order rule), the VMA is
/// writable, not mlocked and not userfaultfd-armed. Returns `None`,
/// having changed and counted nothing, when any of that fails or the first
/// folio cannot be allocated; else the first folio and its pages. The
/// first folio is made and mapped by the same steps as
/// [`do_anonymous_page`] (which count their own events: the allocation,
/// the clearing, the rmap and reference, the PTE stores), with the
/// fault's other counts written out: the exception and VMA lookup, the PMD
/// load and PTL, the `ptep_get()` of the none PTE, `pte_range_none()`'s
/// loads, the large-order rule, and the user stores to every page of the
/// folio (the first through the fault, the rest as a run over a large
/// folio). The caller writes the tags and takes the blocks after it
/// ([`fault_large_stretch`], counting [`count_fused_faults`] for each).
/// Linux: arch/x86/mm/fault.c do_user_addr_fault() /
/// arch/arm64/mm/fault.c do_page_fault(), mm/memory.c
/// __handle_mm_fault(), do_anonymous_page(), alloc_anon_folio().
pub(crate) fn fused_first_fault(
    mm: &mut Mm,
    env: &mut FaultEnv,
    addr: u64,
    end: u64,
) -> Option<(FolioRef, u64)> {
    let (vma, order) = fused_fault_fits(mm, env, addr, end, false)?;
    let nr = order.pages();
    let vma = vma.clone();
    mm.anon_vma_prepare(addr, env.ids);
    let folio = env.phys.alloc_anon_folio(order)?;
    env.phys.hw.page_zero(nr, order.0);
    env.phys
        .add_rmap_ptes(folio, folio.head, nr as u32, mm.pid, true);
    env.phys.ref_add(folio, nr as u32);
    mm.rss_anon += nr;
    env.phys.stats.mthp(order.0, MthpStat::AnonFaultAlloc, 1);
    mm.pt
        .set_ptes(addr, leaf_for_new_folio(&vma, folio.head), nr, env.phys);
    env.phys.folio_batches.lru_add(folio.head, true);
    count_fault_entry(&mm.pt.hw, nr, 1);
    Some((folio, nr))
}

/// What [`fused_first_fault`] checks before it changes anything: the VMA
/// at `addr` and its one mTHP order below PMD order, when the block at
/// `addr` (inside the VMA and the write to `end`) would take the path of
/// a fault stretch's template. Changes and counts nothing. `fresh`: the
/// PTE table of `addr`'s PMD slot has just been made (there, all none:
/// neither is asked).
fn fused_fault_fits<'a>(
    mm: &'a Mm,
    env: &FaultEnv,
    addr: u64,
    end: u64,
    fresh: bool,
) -> Option<(&'a Vma, Order)> {
    let vma = mm.vmas.find(addr)?;
    let mask = env.thp.allowed_orders(
        vma.flags.contains(VmFlags::HUGEPAGE),
        thp_disabled(mm, vma),
        false,
    ) & ((1 << PMD_ORDER) - 1);
    if !mask.is_power_of_two() || mask < 1 << 2 {
        return None;
    }
    let order = Order(mask.trailing_zeros() as u8);
    let nr = order.pages();
    let size = nr * PAGE_SIZE;
    if !vma.flags.contains(VmFlags::WRITE)
        || vma.flags.contains(VmFlags::LOCKED)
        || vma.flags.intersects(crate::core::vma::VM_UFFD_FLAGS)
        || !addr.is_multiple_of(size)
        || addr < vma.start
        || addr + size > vma.end.min(end)
        || mm
            .pt
            .arch()
            .cont_ptes()
            .is_some_and(|c| !nr.is_multiple_of(c as u64))
        || !(fresh || matches!(mm.pt.pmd(addr), PmdSlot::Table(_)) && mm.pt.ptes_none(addr, nr))
    {
        return None;
    }
    Some((vma, order))
}

/// The fused write of [`fused_first_fault`] and the fault stretch after
/// it ([`fault_large_stretch`]) as one step (issue 14, fourteenth
/// session; `ModelConfig::fault_fused_run`): when the write from `addr`
/// covers at least two whole blocks of none PTEs (to `end`, inside the
/// VMA; `end` is inside the PMD slot), every block's folio is made at
/// once in its final state — the blocks the allocator hands out while
/// they follow one another, mapped, referenced and tagged `base + p ×
/// step` from `addr` ([`PhysMem::alloc_anon_run_mapped`]) — the first
/// block's PTEs written by `set_ptes()` (which counts itself) and the
/// others as their continuation (`set_ptes_and_continue()`; block by
/// block through `set_ptes()` where the descriptors do not go on), and
/// every fault's counts written out ([`count_fused_run`]). What
/// [`fused_first_fault`], the caller's tags and [`fault_large_stretch`]
/// do when each block's folio is the next one the allocator hands out;
/// a block that is not ends the run there (the caller goes on from it).
/// `None`, nothing changed or counted, when fewer than two blocks fit,
/// a PTE of them is not none, the checks of [`fused_first_fault`] fail,
/// or folio runs are off — the caller takes the other path, which then
/// decides as before — and also when the first folio cannot be
/// allocated (only the anon_vma is prepared, as there). Else the blocks
/// done and the pages per block. `fresh`: the slot's PTE table has just
/// been made, all none (`ModelConfig::fault_fresh_table`): its PTEs are
/// not asked (`end` is inside the slot).
/// Linux: mm/memory.c do_anonymous_page(), alloc_anon_folio(), once per
/// fault.
pub(crate) fn fused_write_run(
    mm: &mut Mm,
    env: &mut FaultEnv,
    addr: u64,
    end: u64,
    base: u64,
    step: u64,
    fresh: bool,
) -> Option<(u64, u64)> {
    let (vma, order) = fused_fault_fits(mm, env, addr, end, fresh)?;
    let nr = order.pages();
    let size = nr * PAGE_SIZE;
    let blocks = (vma.end.min(end) - addr) / size;
    if blocks < 2 || !(fresh || mm.pt.ptes_none(addr + size, (blocks - 1) * nr)) {
        return None;
    }
    let leaf = leaf_for_new_folio(vma, Pfn(0));
    mm.anon_vma_prepare(addr, env.ids);
    let (first, made) = env
        .phys
        .alloc_anon_run_mapped(order, blocks, mm.pid, base, step)?;
    mm.rss_anon += made * nr;
    let at = |j: u64| Leaf {
        pfn: first.add(j * nr),
        flags: leaf.flags,
    };
    let mut set = 1;
    let rest = (made - 1) * nr;
    if mm
        .pt
        .set_ptes_and_continue(addr, at(0), nr, rest, env.phys)
        .is_none()
    {
        for j in 1..made {
            mm.pt.set_ptes(addr + j * size, at(j), nr, env.phys);
        }
        set = made;
    }
    // folio_add_lru(): a large folio moves the batch, once per fault.
    env.phys
        .folio_batches
        .lru_add(first.add((made - 1) * nr), true);
    count_fused_run(mm, env.phys, nr, made, made - set);
    Some((made, nr))
}

/// The counts of `k` fused write faults of `nr`-page blocks on the mm's
/// sink that neither the allocation nor the PTE stores count themselves
/// ([`fused_first_fault`]): per fault the exception, the VMA lookup, the
/// PMD load and PTL, `ptep_get()` of the none PTE and `pte_range_none()`'s
/// `nr` loads, the large-order rule, and `nr` user stores (the first
/// through the fault, `nr - 1` over the mapped large folio).
fn count_fault_entry(hw: &crate::core::hw::HwSink, nr: u64, k: u64) {
    hw.add(HwEvent::PageFault, k);
    hw.add(HwEvent::FaultEntry, k);
    hw.add(HwEvent::FaultHandle, k);
    hw.add(HwEvent::VmaLookup, k);
    hw.add(HwEvent::PmdLoad, k);
    hw.add(HwEvent::PtlLock, k);
    hw.call_n(crate::core::hw::KCall::PtepGet, k);
    hw.add(HwEvent::PteLoad, (1 + nr) * k);
    hw.rules
        .hit_n(crate::core::rules::Rule::FaultLargeOrder, k as u32);
    hw.user_access(nr * k, true);
    hw.add(HwEvent::UserStore4kLarge, (nr - 1) * k);
}

/// Everything `k` more fused write faults of `nr`-page blocks (order
/// `order`) count, after [`fault_large_stretch`] made their folios
/// without counting: [`count_fault_entry`] on the mm's sink, and what
/// [`do_anonymous_page`]'s steps count for each — the folio allocation
/// and its statistic (`PhysMem::alloc_anon_folio()`), the clearing, one
/// struct page line per page (`add_rmap_ptes()` of a new exclusive
/// folio), the reference atomic, the fault-allocation statistic, and
/// `set_ptes()`'s call and stores (on arm64 every entry painted
/// contiguous: the block is whole contiguous blocks, frame-aligned).
pub(crate) fn count_fused_faults(mm: &Mm, phys: &mut PhysMem, nr: u64, k: u64) {
    count_fused_run(mm, phys, nr, k, k);
}

/// [`count_fused_faults`] of `k` faults of which only `sets` have their
/// `set_ptes()` counted here (the others' PTEs were written through
/// `set_ptes()`, which counted itself: [`fused_write_run`]); also their
/// [`count_fault_entry`] and the folios' own counts.
fn count_fused_run(mm: &Mm, phys: &mut PhysMem, nr: u64, k: u64, sets: u64) {
    let order = nr.trailing_zeros() as u8;
    count_fault_entry(&mm.pt.hw, nr, k);
    let hw = &mm.pt.hw;
    if sets > 0 {
        hw.call_n(crate::core::hw::KCall::SetPtes, sets);
        hw.add(HwEvent::PteStore, nr * sets);
        if mm.pt.arch().cont_ptes().is_some() && !hw.features.contpte_off {
            hw.rules
                .hit_n(crate::core::rules::Rule::ContptePaint, (nr * sets) as u32);
        }
    }
    let p = &phys.hw;
    p.folio_alloc_n(order, k);
    // add_rmap_ptes(): struct_page_lines_batch(nr, large) per folio.
    p.add(HwEvent::StructPageLine, nr * k);
    p.add(HwEvent::StructPageLineLarge, (nr - 1) * k);
    p.page_zero(nr * k, order);
    p.add(HwEvent::FolioRefAtomic, k);
    phys.stats.mthp(order, MthpStat::NrAnon, k as i64);
    phys.stats.mthp(order, MthpStat::AnonFaultAlloc, k as i64);
}

/// W1–W4: a write to a present read-only PTE.
fn do_wp_page(
    mm: &mut Mm,
    env: &mut FaultEnv,
    vma: &Vma,
    addr: u64,
    old: Leaf,
) -> Result<Pfn, AccessFault> {
    // W1 userfaultfd_pte_wp(): a uffd-wp entry in a WP-registered range.
    if uffd_wp_fault(vma, old) {
        rule!(mm.pt.hw, FaultUffdWpPte);
        return Err(AccessFault::Uffd { addr });
    }
    if old.flags.contains(LeafFlags::SPECIAL) {
        // W2: copy the zero page into a fresh order-0 page.
        rule!(mm.pt.hw, FaultCowZeroPage);
        return wp_page_copy(mm, env, vma, addr, None);
    }
    let page = old.pfn;
    let folio = env.phys.folio_of(page).expect("PTE maps a folio");
    let reuse = if env.phys.anon_exclusive(page) {
        true // W3
    } else if !folio.is_large() {
        // W4 small: wp_can_reuse_anon_folio(). References held by the mlock
        // batch count; a folio queued as new (not on an LRU) makes the fault
        // drain the batch first (`!folio_test_lru()` → lru_add_drain()).
        let refs = |p: &PhysMem| {
            p.refcount(folio)
                + p.folio_batches.refs(folio.head)
                + p.folio_batches.lru_add_refs(folio.head)
        };
        if refs(env.phys) > 3 {
            false
        } else {
            if env.phys.folio_batches.off_lru(folio.head) {
                rule!(mm.pt.hw, FaultWpDrainsLru);
                env.phys.folio_batches.drain();
            }
            refs(env.phys) == 1
        }
    } else {
        // W4 large (mm/memory.c __wp_can_reuse_large_anon_folio()): a
        // folio in the swap cache first tries folio_free_swap(), which
        // succeeds when no swap PTE names any of its slots (checked live:
        // fork, child exit, read swap-in, write reuses the folio).
        let mapcount = env.phys.folio_mapcount(folio);
        mapcount > 1 && !env.phys.mapped_by_other_mm(folio, mm.pid) && {
            if env.phys.in_swapcache(folio) && crate::mm::swap::free_swap_large(env.phys, folio) {
                rule!(mm.pt.hw, FaultWpLargeFreesSwap);
            }
            mapcount == env.phys.refcount(folio)
        }
    };
    if reuse {
        rule!(mm.pt.hw, FaultWpReuse);
        env.phys.set_anon_exclusive(page, true);
        let mut l = old;
        l.flags |= LeafFlags::WRITE | LeafFlags::DIRTY | LeafFlags::YOUNG;
        // wp_page_reuse(): ptep_set_access_flags() with the write bit changing.
        mm.pt.modify_pte(addr, l);
        return Ok(page);
    }
    rule!(mm.pt.hw, FaultWpCopy);
    wp_page_copy(mm, env, vma, addr, Some((folio, page)))
}

/// Copy-on-write into a new order-0 page (W2, W4 copy). Linux: wp_page_copy().
fn wp_page_copy(
    mm: &mut Mm,
    env: &mut FaultEnv,
    vma: &Vma,
    addr: u64,
    old: Option<(FolioRef, Pfn)>,
) -> Result<Pfn, AccessFault> {
    mm.anon_vma_prepare(addr, env.ids);
    let new = env
        .phys
        .alloc_anon_folio(Order::ZERO)
        .ok_or(AccessFault::Oom { addr })?;
    if let Some((_, src)) = old {
        env.phys.copy_page(src, new.head);
        env.phys.hw.one(HwEvent::PageCopy); // __wp_page_copy_user()
    } else {
        env.phys.hw.page_zero(1, 0); // vma_alloc_zeroed_movable_folio()
    }
    env.phys.add_rmap_ptes(new, new.head, 1, mm.pid, true);
    env.phys.ref_add(new, 1);
    let pte = leaf_for_new_folio(vma, new.head);
    // ptep_clear_flush() then set_pte_at(): a single-entry replacement that
    // may refold an arm64 block. The clear flushes the old translation
    // (flush_tlb_page); the model writes the new entry over the old one, so
    // only the clear's atomic and flush are counted here.
    mm.pt.hw.one(HwEvent::PteAtomicClear);
    mm.pt.flush_tlb_page(addr);
    mm.pt.set_ptes(addr, pte, 1, env.phys);
    if vma.flags.contains(VmFlags::LOCKED) {
        // folio_add_lru_vma() → mlock_new_folio().
        env.phys.folio_batches.add(new.head, false, true);
    } else {
        env.phys.folio_batches.lru_add(new.head, false);
    }
    match old {
        Some((folio, src)) => {
            env.phys.remove_rmap_ptes(folio, src, 1, mm.pid);
            if vma.flags.contains(VmFlags::LOCKED) {
                // folio_remove_rmap_pte() → munlock_vma_folio().
                env.phys
                    .folio_batches
                    .add(folio.head, folio.is_large(), false);
            }
            env.phys.ref_sub(folio, 1);
        }
        None => mm.rss_anon += 1,
    }
    Ok(new.head)
}

// ---- swap-in ----------------------------------------------------------------

/// A fault on a swap PTE. Maps one order-0 page (this machine's swap file
/// is not SWP_SYNCHRONOUS_IO, so no large folio is allocated for swap-in,
/// and the cache never holds a large folio since large folios are split at
/// swap-out). The PTE becomes writable (and, for a write, dirty) only if
/// the page is certainly exclusive: the swap PTE carried the exclusive bit,
/// or a write fault could drop the swap cache (`should_try_to_free_swap()`:
/// the cache and this fault hold the only references and no swap PTE
/// refers to the slot any more). A write that finds the page not exclusive
/// continues in do_wp_page() (the caller's job), which copies it while
/// someone else still refers to the slot.
/// Linux: mm/memory.c do_swap_page(), should_try_to_free_swap();
/// mm/swap_state.c swapin_readahead() / swap_cache_get_folio().
pub fn do_swap_page(
    mm: &mut Mm,
    env: &mut FaultEnv,
    vma: &Vma,
    addr: u64,
    write: bool,
    s: SwapPte,
) -> Result<(), AccessFault> {
    let phys = &mut *env.phys;
    // Events. swap_cache_get_folio(): one lookup (its folio_try_get() is
    // the reference the mapping keeps: the `ref_add` below).
    phys.hw.one(HwEvent::SwapCacheLookup);
    let cached = phys
        .swap
        .slots
        .get(&s.offset)
        .expect("swap slot in use")
        .cache;
    let folio = match cached {
        Some(pfn) => phys.folio_of(pfn).expect("swap-cache folio"),
        None => {
            let tag = phys.swap.slots[&s.offset].tag;
            let rest = phys.swap.slots[&s.offset].rest.clone();
            // swapin_readahead() → __read_swap_cache_async(): a folio
            // (counted by the allocator), swapcache_prepare() sets
            // SWAP_HAS_CACHE (cluster lock, one swap_map byte), the cache
            // insert and its reference; swap_read_folio() reads the page
            // (the I/O is not priced). Readahead of neighbouring slots is
            // not modelled.
            rule!(phys.hw, FaultSwapInRead);
            let f = phys
                .alloc_anon_folio(Order::ZERO)
                .ok_or(AccessFault::Oom { addr })?;
            count_swap_map(&phys.hw, 1);
            phys.set_tag(f.head, tag);
            phys.contents.set(f.head.0, rest);
            // add_to_swap_cache(): the cache's reference.
            phys.ref_add(f, 1);
            phys.swap.slots.get_mut(&s.offset).expect("slot").cache = Some(f.head);
            phys.swap.pswpin += 1;
            f
        }
    };
    if folio.is_large() {
        return swapin_large(mm, env, vma, addr, write, s, folio);
    }
    mm.anon_vma_prepare(addr, env.ids);
    let phys = &mut *env.phys;
    // folio_lock_or_retry() and the folio_unlock() at the end (counted as
    // folio atomics, as elsewhere); pte_offset_map_lock() and the
    // pte_same(ptep_get()) re-check under the PTL.
    phys.hw.add(HwEvent::FolioRefAtomic, 2);
    let _ptl = mm.pt.pte_offset_map_lock(addr);
    mm.pt.hw.ptep_get_reads(1);
    // swap_free_nr(): this PTE's swap count goes (cluster lock, one byte).
    count_swap_map(&phys.hw, 1);
    let slot = phys.swap.slots.get_mut(&s.offset).expect("slot");
    slot.count -= 1;
    let count_left = slot.count;
    // should_try_to_free_swap() → folio_free_swap() (no swap PTE left),
    // then `folio_ref_count() == 1`: only the cache held the folio.
    let freed = try_free_swap(phys, vma, write, folio) && count_left == 0;
    let exclusive = s.exclusive || (freed && phys.refcount(folio) == 1);
    let flags = swapin_pte_flags(vma, s, exclusive, write);
    if flags.contains(LeafFlags::WRITE) {
        rule!(phys.hw, FaultSwapInWritable);
    }
    if phys.page_mapcount(folio.head) == 0 {
        // folio_add_new_anon_rmap() / a cached folio nobody maps: the
        // exclusive flag is what this fault decides.
        phys.set_anon_exclusive(folio.head, false);
    }
    phys.add_rmap_ptes(folio, folio.head, 1, mm.pid, exclusive);
    phys.ref_add(folio, 1);
    mm.rss_anon += 1;
    mm.pt.set_ptes(
        addr,
        Leaf {
            pfn: folio.head,
            flags,
        },
        1,
        phys,
    );
    if count_left == 0 {
        // Where the kernel keeps the folio in the swap cache (a read
        // fault) or frees its swap (folio_free_swap() marks it dirty), the
        // model marks it dirty: MADV_FREE treats both alike (skip unless
        // exclusive: docs/ops/madvise.md F10).
        rule!(phys.hw, FaultSwapFreesSlot);
        phys.set_folio_dirty(folio, true);
        // The model drops an unreferenced slot's cache at once (see the
        // module comment): folio_free_swap() clears SWAP_HAS_CACHE under
        // the cluster lock and frees the slot (the kernel does it here on
        // should_try_to_free_swap(), otherwise later, at reclaim).
        count_swap_map(&phys.hw, 1);
        phys.hw.one(HwEvent::SwapSlotFree);
        let slot = phys.swap.remove_slot(s.offset).expect("slot");
        if let Some(pfn) = slot.cache {
            let f = phys.folio_of(pfn).expect("cache folio");
            phys.ref_sub(f, 1);
        }
    }
    Ok(())
}

/// Whether a swap-in tries to drop the folio's swap cache (it succeeds
/// when no swap PTE names the folio's slots): always when more than half
/// the swap area is used or the VMA is mlocked, otherwise only on a write
/// fault when the cache and this fault hold the only references. A
/// cache-only folio freed this way is exclusive, so even a read fault in an
/// mlocked VMA maps it writable with the exclusive flag (checked live on
/// 6.18 with a block-device swap: a child's read fault after the parent
/// copied the page on write; found by the CI fuzz run, seed
/// 16237206160759859863 case 17). `folio_test_mlocked()` is not modelled
/// on its own: a folio mlocked through another mapping is not exclusive
/// anyway. Linux: mm/memory.c should_try_to_free_swap().
fn try_free_swap(phys: &PhysMem, vma: &Vma, write: bool, folio: FolioRef) -> bool {
    phys.swap.full()
        || vma.flags.contains(VmFlags::LOCKED)
        || (write && phys.refcount(folio) == folio.nr_pages() as u32)
}

/// The PTE a swap-in maps: young; the swap PTE's soft-dirty and uffd-wp
/// carried over; writable (and dirty for a write fault) only when the page
/// is certainly exclusive and the VMA is writable and not uffd-wp armed
/// for it. Linux: mm/memory.c do_swap_page() (pte_mksoft_dirty(),
/// pte_mkuffd_wp(), the `exclusive || folio_ref_count() == 1` block).
fn swapin_pte_flags(vma: &Vma, s: SwapPte, exclusive: bool, write: bool) -> LeafFlags {
    let mut flags = LeafFlags::YOUNG;
    if vma.flags.contains(VmFlags::EXEC) {
        flags |= LeafFlags::EXEC;
    }
    if s.soft_dirty {
        flags |= LeafFlags::SOFT_DIRTY;
    }
    if s.uffd_wp {
        flags |= LeafFlags::UFFD_WP;
    }
    let uffd_wp = s.uffd_wp && vma.flags.contains(VmFlags::UFFD_WP);
    if exclusive && vma.flags.contains(VmFlags::WRITE) && !uffd_wp {
        flags |= LeafFlags::WRITE;
        if write {
            flags |= LeafFlags::DIRTY;
        }
    }
    flags
}

/// do_swap_page() on a slot whose swap-cache folio is large (block-device
/// swap: the folio went out whole and stayed cached). If every PTE of the
/// folio's range is still its swap entry (consecutive offsets from
/// `folio->swap`, equal bits) and the range lies inside the VMA and this
/// PMD slot, the whole folio is mapped back with one set_ptes() — a 64 KiB
/// folio returns as one folio (checked live on 6.18.44 with a loop device:
/// a read of one page mapped all 16, `swpin` unchanged, since nothing is
/// read). Otherwise only the faulting page is mapped, from the large folio.
/// Exclusivity and writability follow the order-0 rules of
/// [`do_swap_page`], for all the pages at once: the folio is freed from the
/// swap cache when should_try_to_free_swap() says so (a write where the
/// cache and this fault hold the only references, `folio_ref_count() == 1
/// + folio_nr_pages()`; an mlocked VMA; swap more than half full) and none
/// of its slots has a count left. Otherwise — a read fault — it stays in
/// the swap cache with every slot at count 0, unlike the model's order-0
/// folios (D3, docs/ops/swap.md S14r: deferred_split_folio() skips it).
/// Linux: mm/memory.c do_swap_page() (the folio_test_large() &&
/// folio_test_swapcache() block, swap_pte_batch()), should_try_to_free_swap().
fn swapin_large(
    mm: &mut Mm,
    env: &mut FaultEnv,
    vma: &Vma,
    addr: u64,
    write: bool,
    s: SwapPte,
    folio: FolioRef,
) -> Result<(), AccessFault> {
    mm.anon_vma_prepare(addr, env.ids);
    let phys = &mut *env.phys;
    let nr_folio = folio.nr_pages();
    let base = phys.folio_swap(folio).expect("a large swap-cache folio");
    let idx = s.offset - base;
    phys.hw.add(HwEvent::FolioRefAtomic, 2);
    let _ptl = mm.pt.pte_offset_map_lock(addr);
    mm.pt.hw.ptep_get_reads(1);
    // The whole folio, if its range is all here.
    let whole = addr.checked_sub(idx * PAGE_SIZE).filter(|&start| {
        let end = start + nr_folio * PAGE_SIZE;
        let pmd_start = addr & !(PMD_SIZE - 1);
        start >= pmd_start.max(vma.start) && end <= (pmd_start + PMD_SIZE).min(vma.end) && {
            // ptep_get() of the folio's first PTE, then swap_pte_batch()
            // over the rest.
            mm.pt.hw.ptep_get_reads(nr_folio);
            (0..nr_folio).all(|k| {
                mm.pt.pte_peek(start + k * PAGE_SIZE)
                    == Entry::Swap(SwapPte {
                        offset: base + k,
                        ..s
                    })
            })
        }
    });
    // Linux: mm/memory.c do_swap_page() (the folio_test_large() block).
    let (start, first, nr) = match whole {
        Some(start) => {
            rule!(mm.pt.hw, FaultSwapInLargeWhole);
            (start, 0, nr_folio)
        }
        None => {
            rule!(mm.pt.hw, FaultSwapInLargeOnePage);
            (addr, idx, 1)
        }
    };
    // swap_free_nr(): these PTEs' swap counts (one cluster lock).
    count_swap_map(&phys.hw, nr);
    for k in first..first + nr {
        phys.swap.slots.get_mut(&(base + k)).expect("slot").count -= 1;
    }
    let left = phys.large_swap_counted(folio);
    let freed = try_free_swap(phys, vma, write, folio) && !left;
    let exclusive = s.exclusive || (freed && phys.refcount(folio) == nr_folio as u32);
    let flags = swapin_pte_flags(vma, s, exclusive, write);
    let page = folio.head.add(first);
    if phys.folio_mapcount(folio) == 0 {
        phys.set_anon_exclusive_range(folio.head, nr_folio, false);
    }
    phys.add_rmap_ptes(folio, page, nr as u32, mm.pid, exclusive);
    phys.ref_add(folio, nr as u32);
    mm.rss_anon += nr;
    mm.pt.set_ptes(start, Leaf { pfn: page, flags }, nr, phys);
    if freed {
        // should_try_to_free_swap() → folio_free_swap(); the folio is
        // marked dirty (its data now lives only in memory).
        crate::mm::swap::free_swap_large(phys, folio);
    } else if !left {
        // D3: a read fault (no should_try_to_free_swap()) leaves the
        // folio in the swap cache, clean, its slots held by
        // SWAP_HAS_CACHE alone: deferred_split_folio() then skips it, a
        // later whole-folio MADV_PAGEOUT reuses its slots, and it leaves
        // the cache where the kernel deletes it (crate::mm::swap
        // drop_large_swapcache() callers; docs/ops/swap.md S14). Checked
        // live on 6.18.44 with a loop device (tests/scenarios/swap-28 …).
        rule!(phys.hw, FaultSwapInLargeKeepsCache);
    }
    Ok(())
}

// ---- order-0 write faults over a stretch of none PTEs ------------------------
/// Whether a fault in `vma` may allocate a large folio mapped by PTEs (an
/// mTHP order below PMD order is allowed): where none is, an anonymous
/// write fault under an existing PTE table maps an order-0 page.
/// Linux: mm/memory.c alloc_anon_folio() (thp_vma_allowable_orders()).
pub(crate) fn pte_mapped_orders_allowed(mm: &Mm, vma: &Vma, thp: &ThpSettings) -> bool {
    let f = vma.flags;
    let mask = thp.allowed_orders(f.contains(VmFlags::HUGEPAGE), thp_disabled(mm, vma), false);
    mask & ((1 << PMD_ORDER) - 1) != 0
}

/// How many pages from `addr` (at most to `end`) a program's write would
/// fault in through the same order-0 branch of [`do_anonymous_page`],
/// each seeing what the one before it saw: the VMA holding `addr` is
/// writable, not registered with userfaultfd and not mlocked, has its
/// anon_vma, allows no mTHP order (so `choose_order()` returns order 0
/// without a rule hit), and the PTE table for `addr` exists with none
/// entries from `addr` on (none: no guard marker, no NUMA hint, no swap
/// entry). The count stops at the VMA's end, the table's end and the
/// first entry that is not none. 0 when any condition fails. No event:
/// the model's own look before a whole-stretch step
/// (crate::sys::fault_run). Linux: mm/memory.c handle_pte_fault() →
/// do_anonymous_page() with `vmf->pte` none, alloc_anon_folio() with no
/// order allowed beyond 0.
pub fn order0_write_stretch(mm: &Mm, thp: &ThpSettings, addr: u64, end: u64) -> u64 {
    let Some(vma) = mm.vmas.find(addr) else {
        return 0;
    };
    let f = vma.flags;
    if !f.contains(VmFlags::WRITE)
        || f.intersects(crate::core::vma::VM_UFFD_FLAGS | VmFlags::LOCKED)
        || vma.anon_vma.is_none()
    {
        return 0;
    }
    if pte_mapped_orders_allowed(mm, vma, thp) || !matches!(mm.pt.pmd(addr), PmdSlot::Table(_)) {
        return 0;
    }
    let end = end.min(vma.end).min((addr & !(PMD_SIZE - 1)) + PMD_SIZE);
    let Some((entries, i)) = mm.pt.pte_entries(addr) else {
        return 0;
    };
    let max = (end.saturating_sub(addr) / PAGE_SIZE) as usize;
    let none = match entries {
        crate::core::pgtable::Entries::Dense(d) => {
            d[i..i + max].iter().take_while(|&&r| r == 0).count()
        }
        crate::core::pgtable::Entries::Runs(runs) => {
            let next = runs
                .iter()
                .find(|r| r.end() > i)
                .map_or(usize::MAX, |r| r.start as usize);
            next.saturating_sub(i).min(max)
        }
    };
    none as u64
}

/// Whether the order-0 write fault that mapped `pfn` at `addr` went
/// through [`do_anonymous_page`]'s plain order-0 branch and counted what
/// every other such fault in its table counts: the entry now maps `pfn`
/// with a new folio's bits, the folio is order 0 and, on arm64 with the
/// contpte layer, its `set_ptes()` did not try a fold (only a block's
/// last entry mapping a frame that ends a 16-frame group does:
/// [`crate::core::arch::arm64::contpte`] `try_fold_after_set()`).
pub fn order0_fault_is_plain(mm: &Mm, phys: &PhysMem, addr: u64, pfn: Pfn) -> bool {
    let Some(vma) = mm.vmas.find(addr) else {
        return false;
    };
    let plain = mm.pt.pte_peek(addr) == Entry::Leaf(leaf_for_new_folio(vma, pfn))
        && phys.folio_of(pfn).is_some_and(|f| !f.is_large());
    let i = crate::core::pgtable::index(1, addr) as u64;
    let fold_try = crate::mm::contpte_runs::applies(&mm.pt) && i % 16 == 15 && pfn.0 % 16 == 15;
    plain && !fold_try
}

/// The order-0 write faults on the none PTEs `addr..` (at most `max`,
/// all inside what [`order0_write_stretch`] found) after one such fault
/// went through [`handle_fault`] as the template: each would allocate the
/// frame single allocations hand out, map it exclusively with one
/// reference, set one PTE of a new folio's bits and queue the folio on
/// the LRU-add batch, and the caller's store would tag it
/// `base + k × step`. Done in one step for the frames that come
/// consecutively ([`PhysMem::alloc_small_anon_run`]) and, on arm64 with
/// the contpte layer, stopping before an entry whose `set_ptes()` would
/// try a fold (a block's last entry over a group's last frame: that
/// fault counts more). Nothing is counted here: the caller adds the
/// template fault's events once per page done. Returns the pages done
/// (0: none; the caller goes on page by page).
/// Linux: mm/memory.c do_anonymous_page() (order 0), once per page.
pub fn order0_write_run(
    mm: &mut Mm,
    env: &mut FaultEnv,
    addr: u64,
    max: u64,
    base: u64,
    step: u64,
) -> u64 {
    let Some(vma) = mm.vmas.find(addr).cloned() else {
        return 0;
    };
    let i = crate::core::pgtable::index(1, addr);
    let contpte = crate::mm::contpte_runs::applies(&mm.pt);
    // The entries before the first fold try: with frames as aligned as
    // the entries (`pfn ≡ index` modulo 16), at the block's last entry.
    let cap = |p: Pfn| match contpte && (p.0 % 16) == (i % 16) as u64 {
        true => (15 - i % 16) as u64,
        false => u64::MAX,
    };
    let Some((first, n)) = env.phys.alloc_small_anon_run(max, cap, base, step) else {
        return 0;
    };
    if n == 0 {
        return 0;
    }
    mm.rss_anon += n;
    let arch = mm.pt.arch();
    let leaf = |k: u64| leaf_for_new_folio(&vma, first.add(k));
    let raw0 = arch.encode_leaf(1, leaf(0));
    let dstep = arch.encode_leaf(1, leaf(1)).wrapping_sub(raw0);
    let affine = arch.encode_leaf(1, leaf(n - 1)) == raw0.wrapping_add(dstep.wrapping_mul(n - 1));
    let (mut t, i) = mm.pt.pte_table(addr);
    if affine {
        t.write_affine(
            i,
            n as usize,
            raw0,
            dstep,
            crate::core::pgtable::Run::PRESENT,
        );
    } else {
        for k in 0..n {
            t.store(i + k as usize, Some(leaf(k)));
        }
    }
    for k in 0..n {
        env.phys.folio_batches.lru_add(first.add(k), false);
    }
    n
}
