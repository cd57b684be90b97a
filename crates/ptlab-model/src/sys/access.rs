//! User-space loads and stores: what the CPU does when a scenario reads or
//! writes a page — the permission check and the fault into
//! crate::mm::fault's handle_fault(), then the access itself.
//!
//! Linux: arch/x86/mm/fault.c do_user_addr_fault(), mm/memory.c
//! handle_mm_fault(); mm/gup.c for the kernel-side (`user == false`)
//! accesses.

use crate::core::addr::HPAGE_PMD_NR;
use crate::core::addr::PAGE_SIZE;
use crate::mm::fault::{handle_fault, FaultEnv};
use crate::model::Model;
use crate::sys::fault_run::{FaultTally, StretchFirst};
use crate::types::{AccessFault, Pid};

impl Model {
    // ---- accesses ---------------------------------------------------------

    pub(crate) fn fault(
        &mut self,
        pid: Pid,
        addr: u64,
        write: bool,
    ) -> Result<crate::core::addr::Pfn, AccessFault> {
        let (mm, mut env) = self.fault_parts(pid).ok_or(AccessFault::NoProcess)?;
        handle_fault(mm, &mut env, addr & !(PAGE_SIZE - 1), write)
    }

    /// Process `pid`'s mm and what a fault in it uses of the rest of the
    /// machine, borrowed apart (`None`: no such process).
    pub(crate) fn fault_parts(
        &mut self,
        pid: Pid,
    ) -> Option<(&mut crate::mm::mm::Mm, FaultEnv<'_>)> {
        let Model {
            procs,
            phys,
            thp,
            ids,
            ..
        } = self;
        let mm = procs.get_mut(&pid)?;
        Some((mm, FaultEnv { phys, thp, ids }))
    }

    /// A user access: no fault when the page is mapped with the needed
    /// permission (one [`crate::HwEvent::UserPageAccess`]); otherwise a page
    /// fault (exception entry, per-VMA lookup, PMD read, PTL) and the access.
    fn touch(
        &mut self,
        pid: Pid,
        addr: u64,
        write: bool,
    ) -> Result<crate::core::addr::Pfn, AccessFault> {
        self.touch_as(pid, addr, write, true)
    }

    /// [`Model::touch`]; `user == false` for the kernel's own access to user
    /// memory (copy_from_user), whose copy the caller counts.
    pub(crate) fn touch_as(
        &mut self,
        pid: Pid,
        addr: u64,
        write: bool,
        user: bool,
    ) -> Result<crate::core::addr::Pfn, AccessFault> {
        let n = u64::from(user);
        let mm = self.procs.get(&pid).ok_or(AccessFault::NoProcess)?;
        if let Some(pfn) = mm.pt.mapped_for_access(addr, write) {
            mm.pt.hw.user_access(n, write);
            return Ok(pfn);
        }
        self.fault_as_user(pid, addr, write, user)
    }

    /// A fault taken by an access to `addr`, counted as one (the caller
    /// knows the page is not mapped for the access), then the access.
    fn fault_as_user(
        &mut self,
        pid: Pid,
        addr: u64,
        write: bool,
        user: bool,
    ) -> Result<crate::core::addr::Pfn, AccessFault> {
        use crate::core::hw::HwEvent;
        let n = u64::from(user);
        let mm = self.procs.get(&pid).ok_or(AccessFault::NoProcess)?;
        // Linux: arch/*/mm/fault.c do_user_addr_fault() / do_page_fault():
        // lock_vma_under_rcu(), handle_mm_fault() → __handle_mm_fault()
        // (pmd read), handle_pte_fault() (PTL taken to install or update).
        let hw = &mm.pt.hw;
        hw.page_fault();
        hw.one(HwEvent::VmaLookup);
        let _ptl = mm.pt.pte_offset_map_lock(addr);
        let r = self.fault(pid, addr, write);
        if let Some(mm) = self.procs.get(&pid) {
            mm.pt.hw.user_access(n, write);
        }
        r
    }

    /// A store sets the dirty bit of the writable leaf it goes through
    /// ([`crate::core::pgtable::PageTables::hw_mkdirty`]).
    fn hw_mkdirty(&mut self, pid: Pid, addr: u64) {
        if let Some(mm) = self.procs.get_mut(&pid) {
            mm.pt.hw_mkdirty(addr);
        }
    }

    /// Read the tag of the page containing `addr`, faulting it in as a read.
    pub fn read(&mut self, pid: Pid, addr: u64) -> Result<u64, AccessFault> {
        self.read_as(pid, addr, true)
    }

    /// [`Model::read`] by the user (`user`) or by the kernel on its behalf.
    pub(crate) fn read_as(&mut self, pid: Pid, addr: u64, user: bool) -> Result<u64, AccessFault> {
        let pfn = self.touch_as(pid, addr, false, user)?;
        let in_huge_zero = self
            .phys
            .huge_zero
            .is_some_and(|h| (h.0..h.0 + HPAGE_PMD_NR).contains(&pfn.0));
        if pfn == self.phys.zero_pfn || in_huge_zero {
            return Ok(0);
        }
        Ok(self.phys.tag(pfn))
    }

    /// The 4096 bytes of the page containing `addr`, faulting it in as a
    /// read (as [`Model::read_as`]): zeros for the zero pages.
    pub(crate) fn read_page_as(
        &mut self,
        pid: Pid,
        addr: u64,
        user: bool,
    ) -> Result<Box<[u8; 4096]>, AccessFault> {
        let pfn = self.touch_as(pid, addr, false, user)?;
        if self.is_zero_frame(pfn) {
            return Ok(Box::new([0u8; 4096]));
        }
        Ok(self.phys.page_bytes(pfn))
    }

    /// Whether `pfn` is the shared zero page or a page of the huge zero folio.
    pub(crate) fn is_zero_frame(&self, pfn: crate::core::addr::Pfn) -> bool {
        let in_huge_zero = self
            .phys
            .huge_zero
            .is_some_and(|h| (h.0..h.0 + HPAGE_PMD_NR).contains(&pfn.0));
        pfn == self.phys.zero_pfn || in_huge_zero
    }

    /// memset(): store `byte` into every byte of `[addr, addr + len)`,
    /// page by page in address order, each page faulted in as a write
    /// first (a store to it). Stops at the first page that faults.
    pub fn fill_bytes(
        &mut self,
        pid: Pid,
        addr: u64,
        len: u64,
        byte: u8,
    ) -> Result<(), AccessFault> {
        let end = addr.checked_add(len).ok_or(AccessFault::Segv { addr })?;
        let mut at = addr;
        while at < end {
            let page = at & !(PAGE_SIZE - 1);
            let stop = end.min(page.saturating_add(PAGE_SIZE));
            // The page's first store is at `at`, so a SIGSEGV reports that
            // byte (the kernel's si_addr is the faulting address, cr2 on
            // x86), not the page (found by `ptlab fuzz --seed 20261128`:
            // an unaligned fill over a PROT_NONE page).
            let pfn = self.touch(pid, page, true).map_err(|e| match e {
                AccessFault::Segv { .. } => AccessFault::Segv { addr: at },
                other => other,
            })?;
            self.hw_mkdirty(pid, page);
            let mut bytes = self.phys.page_bytes(pfn);
            bytes[(at - page) as usize..(stop - page) as usize].fill(byte);
            self.phys.set_page_bytes(pfn, &bytes);
            if stop == page.saturating_add(PAGE_SIZE) && stop == u64::MAX {
                break;
            }
            at = stop;
        }
        Ok(())
    }

    /// Whether frame `pfn` holds bytes beyond its tag (bytes 8..4096 not
    /// all zero: a `fill` wrote it, or it was copied from such a page).
    pub fn page_has_bytes(&self, pfn: u64) -> bool {
        self.phys.contents.get(pfn).is_some()
    }

    /// The bytes of `[addr, addr + len)` in process `pid` without touching
    /// anything: `None` for a byte whose page is not present.
    pub fn peek_bytes(&self, pid: Pid, addr: u64, len: u64) -> Vec<Option<u8>> {
        let mut out = Vec::with_capacity(len as usize);
        let mut at = addr;
        let end = addr.saturating_add(len);
        while at < end {
            let page = at & !(PAGE_SIZE - 1);
            let stop = end.min(page.saturating_add(PAGE_SIZE));
            let state = self
                .observe_pages(pid, page, page + PAGE_SIZE)
                .records()
                .first()
                .map(|r| r.state.clone());
            let bytes = match state {
                Some(crate::core::observe::PageState::Anon(a)) => {
                    Some(self.phys.page_bytes(crate::core::addr::Pfn(a.pfn)))
                }
                Some(
                    crate::core::observe::PageState::Zero
                    | crate::core::observe::PageState::HugeZero { .. },
                ) => Some(Box::new([0u8; 4096])),
                _ => None,
            };
            for a in at..stop {
                out.push(bytes.as_ref().map(|b| b[(a - page) as usize]));
            }
            at = stop;
            if stop == page.saturating_add(PAGE_SIZE) && stop == u64::MAX {
                break;
            }
        }
        out
    }

    /// Write `tag` into the page containing `addr`, faulting it in as a write.
    pub fn write(&mut self, pid: Pid, addr: u64, tag: u64) -> Result<(), AccessFault> {
        let pfn = self.touch(pid, addr, true)?;
        self.hw_mkdirty(pid, addr);
        self.phys.set_tag(pfn, tag);
        Ok(())
    }

    /// The stores of a range write to `n` pages of one folio from `pfn`
    /// (mapped at `addr`): `tag` in each, or each page's own address.
    fn store_tags(&mut self, pfn: crate::core::addr::Pfn, n: u64, addr: u64, tag: Option<u64>) {
        match tag {
            Some(t) => self.phys.set_tags(pfn, n, t, 0),
            None => self.phys.set_tags(pfn, n, addr, PAGE_SIZE),
        }
    }

    /// Access every page of `[start, start + len)` in address order, as a
    /// program touching each page once would: `write` stores `tag` (or, when
    /// `None`, each page's own address). Pages already mapped with the needed
    /// permission are handled without entering the fault path; the result is
    /// identical to calling [`Model::read`]/[`Model::write`] per page.
    pub fn access_range(
        &mut self,
        pid: Pid,
        start: u64,
        len: u64,
        write: bool,
        tag: Option<u64>,
    ) -> Result<(), AccessFault> {
        let start = start & !(PAGE_SIZE - 1);
        let end = start
            .checked_add(len)
            .ok_or(AccessFault::Segv { addr: start })?;
        let mut addr = start;
        // The last write fault that mapped a large folio from its first
        // page, with the counts from before it ([`Model::fault_stretch`]).
        let mut first: Option<StretchFirst> = None;
        // The tag a write fault stored in the first page of a large folio,
        // not yet written (frame, tag): with `stretch_steps`, the store into
        // the rest of the folio that follows at once takes it along, so the
        // folio's contents are written in one step (one record change) and
        // not as the first page and then the others. Written out before
        // anything else touches contents or the loop leaves the slot.
        let mut head_tag: Option<(crate::core::addr::Pfn, u64)> = None;
        // Whether a fused write ([`Model::write_fused`]) may apply at all:
        // some mTHP order below PMD order is enabled for some VMA (asked
        // once per access, not per fault).
        let fusable = write
            && self.cfg.fault_fused
            && self.cfg.stretch_steps
            && self.thp.allowed_orders(true, false, false)
                & ((1 << crate::core::addr::PMD_ORDER) - 1)
                != 0;
        while addr < end {
            let slot_end = crate::core::pgtable::pmd_end(addr, end);
            // Fast path over pages already mapped in this PMD slot.
            while addr < slot_end {
                let mm = self.procs.get(&pid).ok_or(AccessFault::NoProcess)?;
                let Some(pfn) = mm.pt.mapped_for_access(addr, write) else {
                    break;
                };
                // The deferred first-page tag goes with this store when it
                // continues it: the next frame of the same contents run.
                let (base, step) = tag.map_or((addr, PAGE_SIZE), |t| (t, 0));
                let joined = match head_tag {
                    Some((p, v)) if p.0 + 1 == pfn.0 && v.wrapping_add(step) == base => {
                        head_tag = None;
                        Some((p, v))
                    }
                    _ => None,
                };
                if let Some((p, v)) = head_tag.take() {
                    self.phys.set_tag(p, v);
                }
                if let crate::core::pgtable::PmdSlot::Leaf(_) = mm.pt.pmd(addr) {
                    if let Some((p, v)) = joined {
                        self.phys.set_tag(p, v);
                    }
                    // A PMD leaf maps the rest of the slot: one step for
                    // all its pages (the same counts and tags as one page
                    // at a time; the dirty bit is the PMD's).
                    let n = (slot_end - addr) / PAGE_SIZE;
                    mm.pt.hw.user_access(n, write);
                    if write {
                        self.hw_mkdirty(pid, addr);
                        self.store_tags(pfn, n, addr, tag);
                    }
                    addr = slot_end;
                    break;
                }
                let slot_left = (slot_end - addr) / PAGE_SIZE;
                if let Some(f) = self.phys.folio_of(pfn).filter(|f| f.is_large()) {
                    // A run of PTEs over this large folio, and on over the
                    // next folios of its run of identical folios while the
                    // PTEs map their frames in order: one step (the counts
                    // add up as folio by folio: one per page).
                    let folio_end = f.head.0 + f.nr_pages();
                    let run_end = match self.cfg.stretch_steps {
                        true => self.phys.large_run_end(pfn).unwrap_or(folio_end),
                        false => folio_end,
                    };
                    let left = (run_end - pfn.0).min(slot_left);
                    let mm = self.procs.get_mut(&pid).ok_or(AccessFault::NoProcess)?;
                    let n = mm.pt.access_run(addr, left, write);
                    debug_assert!(n >= 1, "the page was found mapped for the access");
                    mm.pt.hw.user_access_large_run(n, write);
                    if write {
                        match joined {
                            Some((p, v)) => self.phys.set_large_run_tags(p, n + 1, v, step),
                            None => self.phys.set_large_run_tags(pfn, n, base, step),
                        }
                    } else if let Some((p, v)) = joined {
                        self.phys.set_tag(p, v);
                    }
                    addr += n * PAGE_SIZE;
                    continue;
                }
                if let Some((p, v)) = joined {
                    self.phys.set_tag(p, v);
                }
                // A run of PTEs over consecutive order-0 pages: what the
                // page-by-page step below does to each (one access, the
                // MMU's dirty bit, the page's tag), in one step.
                let small = match self.cfg.stretch_steps {
                    true => self.phys.small_folio_run(pfn, slot_left),
                    false => 0,
                };
                if small > 1 {
                    let mm = self.procs.get_mut(&pid).ok_or(AccessFault::NoProcess)?;
                    let n = mm.pt.access_run(addr, small, write);
                    debug_assert!(n >= 1, "the page was found mapped for the access");
                    mm.pt.hw.user_access(n, write);
                    if write {
                        let (base, step) = tag.map_or((addr, PAGE_SIZE), |t| (t, 0));
                        self.phys.set_small_tags(pfn, n, base, step);
                    }
                    addr += n * PAGE_SIZE;
                    continue;
                }
                mm.pt.hw.user_access(1, write);
                if write {
                    self.hw_mkdirty(pid, addr);
                    self.phys.set_tag(pfn, tag.unwrap_or(addr));
                }
                addr += PAGE_SIZE;
            }
            if let Some((p, v)) = head_tag.take() {
                self.phys.set_tag(p, v);
            }
            if addr < slot_end {
                // The faults of the blocks after a large folio faulted in
                // the step before, in one step when each would repeat it.
                if let Some(t) = first.take() {
                    let made = match t.next == addr {
                        true => {
                            let blocks = (slot_end.min(end) - addr) / (t.nr * PAGE_SIZE);
                            self.fault_stretch(pid, &t, blocks)
                        }
                        false => 0,
                    };
                    FaultTally::recycle(t.before);
                    if made > 0 {
                        addr += made * t.nr * PAGE_SIZE;
                        continue;
                    }
                }
                // A write fault on a none PTE of an existing table in a VMA
                // with its anon_vma: its counts, should it map a large folio
                // whose next blocks the stretch above then takes.
                // The first fault of a slot with no PTE table: its tables
                // made first, so that it can be that fault
                // ([`Model::stretch_first_tables`]).
                // Tables made ahead answer what `stretch_watchable()` asks
                // (the PTE table is there now; the VMA allows an mTHP
                // order; no observer; `stretch_first_fault` on, so the
                // anon_vma is not asked for): it is asked only otherwise.
                let made = write && self.stretch_first_tables(pid, addr);
                // Whole blocks of none PTEs faulted in one step, the first
                // fault's counts written out ([`Model::write_fused`]).
                if fusable {
                    let done = self.write_fused(pid, addr, slot_end, tag, made);
                    if done > 0 {
                        addr += done * PAGE_SIZE;
                        continue;
                    }
                }
                let watch =
                    made || (write && self.cfg.stretch_steps && self.stretch_watchable(pid, addr));
                let before = watch.then(|| FaultTally::boxed(self, pid));
                // The page needs a fault (the fast path above found it
                // unmapped); a write over a stretch of none PTEs faults the
                // pages after it in one step (sys/fault_run.rs).
                let run = self.write_fault_run_start(pid, addr, slot_end, write);
                let pfn = self.fault_as_user(pid, addr, write, true)?;
                if let Some(before) = before {
                    let f = self.phys.folio_of(pfn);
                    match f.filter(|f| f.head == pfn && f.order.0 >= 2) {
                        Some(f) => {
                            first = Some(StretchFirst {
                                at: addr,
                                next: addr + f.nr_pages() * PAGE_SIZE,
                                head: pfn,
                                nr: f.nr_pages(),
                                before,
                            })
                        }
                        None => FaultTally::recycle(before),
                    }
                }
                let mm = self.procs.get(&pid).ok_or(AccessFault::NoProcess)?;
                let pmd_leaf = matches!(mm.pt.pmd(addr), crate::core::pgtable::PmdSlot::Leaf(_));
                if write && pmd_leaf {
                    // The fault mapped a PMD THP: the rest of the slot is
                    // written in the same step (its first page's access was
                    // counted by the fault).
                    let n = (slot_end - addr) / PAGE_SIZE;
                    mm.pt.hw.user_access(n - 1, write);
                    self.hw_mkdirty(pid, addr);
                    self.store_tags(pfn, n, addr, tag);
                    addr = slot_end;
                    continue;
                }
                if write {
                    self.hw_mkdirty(pid, addr);
                    let large_head = self.cfg.stretch_steps
                        && run.is_none()
                        && self
                            .phys
                            .folio_of(pfn)
                            .is_some_and(|f| f.head == pfn && f.is_large());
                    match large_head {
                        true => head_tag = Some((pfn, tag.unwrap_or(addr))),
                        false => self.phys.set_tag(pfn, tag.unwrap_or(addr)),
                    }
                }
                if let Some(run) = run {
                    addr += self.write_fault_run_finish(pid, run, addr, pfn, tag) * PAGE_SIZE;
                }
                addr += PAGE_SIZE;
            }
        }
        if let Some((p, v)) = head_tag.take() {
            self.phys.set_tag(p, v);
        }
        Ok(())
    }
}
