//! Hardware-event accounting: what the kernel's algorithm makes the CPU do.
//!
//! The model counts events; it never prices them (pricing lives in the
//! `ptlab-cost` crate, r2vm style: model and cost stay apart). Counting is
//! exact and deterministic and never changes observable state: the counters
//! live in [`HwSink`]s (plain `Cell`s) inside [`crate::core::pgtable::PageTables`]
//! (events on behalf of one address space) and [`crate::core::folio::PhysMem`]
//! (folio metadata, allocation, zeroing and copying). [`crate::Model::hw_events`]
//! sums them.
//!
//! Which instructions a TLB flush issues depends on CPU features the kernel
//! probes at boot (FEAT_TLBIRANGE, BBML2-noabort, KPTI), so those are part of
//! the machine description: [`HwFeatures`] in [`crate::ModelConfig`].
//! The per-architecture recipes (which events a hook or a TLB flush makes)
//! live with each architecture's policy in [`crate::core::arch`]; this module is
//! only the counter. docs/cost.md lists every event with the kernel function
//! it mirrors.
//!
//! A sink is a plain counter: the model only adds to it, and reads it only
//! to report ([`crate::Model::hw_events`]) or to retire an exiting
//! process's counts into the machine's sink; no algorithm decides anything
//! from a count (a source check in tests/layering.rs holds this). Where
//! batches and TLB flushes happened ([`HwMark`]) goes to an optional
//! [`HwObserver`] attached to the sink — [`HwTrace`] records them for
//! `ptlab show` ([`crate::Model::set_hw_tracing`]); without one, a mark
//! costs a check of an empty slot.

use crate::core::rules::{touched_words, Touched};
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

macro_rules! hw_events {
    ($( $(#[doc = $doc:literal])* $v:ident = $name:literal ),* $(,)?) => {
        /// One kind of hardware work. See docs/cost.md for the kernel source of each.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum HwEvent { $( $(#[doc = $doc])* $v, )* }

        impl HwEvent {
            pub const ALL: &'static [HwEvent] = &[ $( HwEvent::$v, )* ];
            pub const COUNT: usize = [ $( HwEvent::$v, )* ].len();
            /// Stable snake_case name (used in profiles and JSON).
            pub const fn name(self) -> &'static str {
                match self { $( HwEvent::$v => $name, )* }
            }
            /// One-line description (the doc comment).
            pub fn describe(self) -> &'static str {
                match self { $( HwEvent::$v => concat!($($doc),*).trim_ascii(), )* }
            }
        }
    };
}

hw_events! {
    /// System call entry and exit (one per syscall).
    Syscall = "syscall",
    /// User page fault taken (exception entry, handle_mm_fault, return).
    PageFault = "page_fault",
    /// Process creation in fork(): copy_process() fixed work (task, mm, page-table root), without VMAs and page tables.
    ProcessCreate = "process_create",
    /// Process exit and reaping: exit_mm()/wait fixed work, without the zap.
    ProcessExit = "process_exit",
    /// A VMA duplicated at fork (vm_area_dup, anon_vma_fork, maple-tree store).
    VmaCopy = "vma_copy",
    /// VMA lookup in the maple tree (find_vma / vma_lookup / vma_iter).
    VmaLookup = "vma_lookup",
    /// VMA split (__split_vma: vm_area_dup, maple-tree store, anon_vma_clone).
    VmaSplit = "vma_split",
    /// VMA merge (vma_merge_existing_range / vma_expand).
    VmaMerge = "vma_merge",
    /// A user-space 4 KiB page access that needed no fault (`read`/`write` of a mapped page).
    UserPageAccess = "user_page_access",
    /// A PTE load (READ_ONCE / __ptep_get); on arm64 a ptep_get on a folded block also loads the entries contpte_ptep_get walks.
    PteLoad = "pte_load",
    /// A plain PTE store (set_pte / __set_ptes, one per entry).
    PteStore = "pte_store",
    /// An atomic read-and-clear of a PTE (x86 XCHG, arm64 SWP: ptep_get_and_clear).
    PteAtomicClear = "pte_atomic_clear",
    /// An atomic read-modify-write of a live PTE (cmpxchg loop or locked bit op: ptep_set_wrprotect, access flags).
    PteAtomicRmw = "pte_atomic_rmw",
    /// arm64 contpte fold: contpte_convert() painting PTE_CONT on 16 entries (its clears, flush and stores are counted too).
    ContFold = "cont_fold",
    /// arm64 contpte unfold: contpte_convert() clearing PTE_CONT from 16 entries (its clears, flush and stores are counted too).
    ContUnfold = "cont_unfold",
    /// A PMD entry load at the start of a PTE-table walk segment (pte_offset_map_lock, pmd_none checks).
    PmdLoad = "pmd_load",
    /// A PMD entry store (set_pmd_at, pmd_populate, pmd_clear, pmdp_get_and_clear).
    PmdStore = "pmd_store",
    /// A PUD entry store (pud_populate, pud_clear).
    PudStore = "pud_store",
    /// Page-table spinlock acquired and released (pte_offset_map_lock / pmd_lock).
    PtlLock = "ptl_lock",
    /// A page-table page allocated and zeroed (pte_alloc_one / pmd_alloc_one).
    PtPageAlloc = "pt_page_alloc",
    /// A page-table page freed (pte_free / free_pgd_range).
    PtPageFree = "pt_page_free",
    /// One TLB flush call that reached the hardware (x86: inc_mm_tlb_gen atomic + IRQ off/on; arm64: the call itself, barriers counted apart).
    TlbFlushCall = "tlb_flush_call",
    /// A per-page TLB invalidation: arm64 TLBI VALE1IS/VAE1IS, x86 INVLPG.
    TlbiPage = "tlbi_page",
    /// An arm64 range invalidation TLBI RVALE1IS/RVAE1IS (FEAT_TLBIRANGE).
    TlbiRange = "tlbi_range",
    /// A whole-address-space invalidation: arm64 TLBI ASIDE1IS, x86 local full flush (CR3 write).
    TlbiAsid = "tlbi_asid",
    /// arm64 DSB ISHST (orders page-table stores before the TLBIs).
    DsbIshst = "dsb_ishst",
    /// arm64 DSB ISH (waits for broadcast TLBIs to complete).
    DsbIsh = "dsb_ish",
    /// A struct page / folio cache line read (page_folio, folio_nr_pages, PageAnonExclusive).
    StructPageLine = "struct_page_line",
    /// An atomic on folio->_refcount (folio_get, folio_ref_add, folio_put_refs).
    FolioRefAtomic = "folio_ref_atomic",
    /// An atomic on a mapcount (page->_mapcount, folio->_large_mapcount, _entire_mapcount).
    MapcountAtomic = "mapcount_atomic",
    /// folio->mapping / folio->index rewritten (folio_move_anon_rmap, UFFDIO_MOVE).
    RmapUpdate = "rmap_update",
    /// A folio allocated from the page allocator (any order).
    FolioAlloc = "folio_alloc",
    /// A folio returned to the page allocator.
    FolioFree = "folio_free",
    /// A 4 KiB page zeroed (clear_page / folio_zero_user).
    PageZero = "page_zero",
    /// A 4 KiB page copied (copy_user_highpage for CoW, copy_from_user for UFFDIO_COPY).
    PageCopy = "page_copy",
    /// A swap cluster lock acquired and released (swap_cluster_lock/unlock around swap_map changes: __swap_duplicate, swap_entries_put_map_nr, slot allocation and the swap cache's HAS_CACHE bit).
    SwapClusterLock = "swap_cluster_lock",
    /// One byte of si->swap_map read and rewritten under the cluster lock (a swap count or SWAP_HAS_CACHE change for one slot).
    SwapMapUpdate = "swap_map_update",
    /// A swap slot freed at its last reference (swap_entries_free: cluster count, swap-cgroup uncharge, swap_range_free: zswap_invalidate, nr_swap_pages atomic).
    SwapSlotFree = "swap_slot_free",
    /// A swap-cache lookup of one entry (swap_cache_get_folio / swap_cache_has_folio: the cluster's swap-table slot read under RCU).
    SwapCacheLookup = "swap_cache_lookup",
    /// A folio reclaimed to swap by shrink_folio_list() (MADV_PAGEOUT → reclaim_pages()): its LRU isolation and putback, folio lock, swap-cache insertion and try_to_unmap()'s rmap walk (anon_vma read lock, interval tree) — the work around the unmap that the PTE, rmap and swap-map events do not count.
    SwapReclaimFolio = "swap_reclaim_folio",
    /// One write request to the swap device: swap_writeout() → __swap_writepage() → swap_writepage_bdev_async(): a bio for the whole folio, submit_bio() through blk-mq to the driver, and its completion (end_swap_bio_write()).
    SwapWriteBio = "swap_write_bio",
    /// 4 KiB of a folio's data written to the swap device by that request (the device's per-byte work: on a loop device, the copy into the backing file).
    SwapWrite4k = "swap_write_4k",
    /// One UFFDIO_MOVE ioctl's locking outside the page tables: uffd_move_lock() read-locks the destination VMA and the source VMA (vma_start_read(): an atomic on vm_refcnt each, released by uffd_move_unlock()), plus down_read/up_read of ctx->map_changing_lock.
    UffdMoveLock = "uffd_move_lock",
    /// One move step's anon_vma locking: folio_get_anon_vma(), anon_vma_trylock_write() and, at the step's end, anon_vma_unlock_write() and put_anon_vma() (move_pages_ptes(), once per step of present pages).
    AnonVmaLock = "anon_vma_lock",
    /// One pass of change_pte_range()'s loop that changes a present entry (one per batch: an order-0 page, or a large folio's batch): the loop body's CPU work that the PTE, TLB and struct page events do not count — vm_normal_folio(), the batch decision, pte_modify() and the uffd-wp tests, can_change_pte_writable() / maybe_change_pte_writable(), the commit's call chain (modify_prot_start_ptes(), set_write_prot_commit_flush_ptes() / prot_commit_flush_ptes()) and tlb_flush_pte_range()'s range update.
    MprotectPass = "mprotect_pass",
    /// One VMA moved by mremap() (move_vma()): copy_vma() (vm_area_dup(), anon_vma_clone(), the maple-tree insert), vrm_calc_charge(), and the source VMA's removal by do_vmi_munmap() (gathering, the maple-tree store, free_pgtables() over the emptied range, the VMA freed) — the VMA work around move_page_tables(), which its PTE and PMD events count.
    MremapVma = "mremap_vma",
    /// x86-64 (the generic modify_prot_start_ptes() / modify_prot_commit_ptes() of include/linux/pgtable.h): one entry after the first of a batch of more than one entry that change_pte_range() changes — its own ptep_modify_prot_start() and ptep_modify_prot_commit() round trip (out-of-line paravirt calls under CONFIG_PARAVIRT_XXL: __ptep_modify_prot_start(), __ptep_modify_prot_commit() → set_pte_at() → native_set_pte()), the young/dirty gathering and the pte_next_pfn() steps of the two loops. The first entry's round trip is part of its `mprotect_pass`; its atomic clear and store are counted apart. arm64 overrides both hooks with one batched call each: never counted there.
    ModifyProtPte = "modify_prot_pte",
    /// One UFFDIO_COPY or UFFDIO_ZEROPAGE ioctl's work outside the page tables and the pages, once its destination VMA is found and registered: mfill_atomic()'s uffd_mfill_lock() (lock_vma_under_rcu(): the maple-tree walk and vma_start_read()'s atomic on vm_refcnt) and uffd_mfill_unlock() (vma_end_read()), and down_read/up_read of ctx->map_changing_lock with the mmap_changing test — the counterpart of `uffd_move_lock` for the fill ioctls.
    UffdMfillLock = "uffd_mfill_lock",
    /// Whole-program: one 64-byte line (8 entries) of a source PTE table that mremap's per-entry move (move_ptes()) reads in a table after the first the call moves entries from, streamed from memory: the model takes a move within one PTE table as cache-resident and the source tables of a move across many as cold (a region populated table after table, long before the move). Once per line per call (an unaligned move's two extents in one table share their boundary line); not for a table split from a PMD THP by the same call (just written). Not a subset: the entries' loads are counted apart (`pte_load`) at the cache-hot price.
    PteLineStream = "pte_line_stream",
    /// Whole-program: one batch of more than one entry of a large folio that change_pte_range() changes (6.17+ batching): the fixed work of the batch path that one order-0 pass (`mprotect_pass`, fitted over order-0 pages, where mprotect_folio_pte_batch() returns 1 at !folio_test_large() before any scan and each per-entry loop runs once) does not contain — folio_pte_batch_flags()'s scan entered and left, the per-entry loops of modify_prot_start_ptes() / modify_prot_commit_ptes() entered and left, commit_anon_folio_batch()'s sub-batch search (page_anon_exclusive_sub_batch()), and the struct-page stream restarting at the folio's head (the next folio's struct pages are not next to the last one's). One per such batch, both architectures; none in the per-PTE loop of 6.16 and before.
    MprotectLargeBatch = "mprotect_large_batch",
    /// Whole-program: one take_rmap_locks() / drop_rmap_locks() round trip of an mremap() page-table move on a VMA with an anon_vma: anon_vma_lock_write() (down_write() of the anon_vma root's rwsem, uncontended: a cmpxchg on its count and the owner store) and anon_vma_unlock_write() (up_write(): an atomic on the same line). move_pgt_entry() takes it for every NORMAL_PMD and NORMAL_PUD move it tries (should_take_rmap_locks() is true for those whatever the move), and for a PMD leaf move or a move_ptes() extent only when the move needs rmap locks (copy_vma() merged the destination into a VMA at or below the source's pgoff, or the failed move's revert). Not UFFDIO_MOVE's `anon_vma_lock` (its calibrated price takes that ioctl's other work).
    RmapLock = "rmap_lock",
    /// Whole-program: a user fault's exception entry and exit (x86 asm_exc_page_fault/irqentry, arm64 el0_da/el0_ia vectors: registers saved and restored, the return to user), one per fault; the KPTI page-table switch is added when kpti is on.
    FaultEntry = "fault_entry",
    /// Whole-program: a user fault's handling without entry/exit, allocation and zeroing (do_user_addr_fault / do_page_fault: lock_vma_under_rcu, handle_mm_fault's walk and bookkeeping, count_vm_event), one per fault.
    FaultHandle = "fault_handle",
    /// Whole-program: a folio from the per-cpu free lists (rmqueue_pcplist: order <= PAGE_ALLOC_COSTLY_ORDER or the pageblock (PMD) order).
    FolioAllocPcp = "folio_alloc_pcp",
    /// Whole-program: a folio from the buddy free lists under zone->lock (rmqueue_buddy: orders 4-8, e.g. a 64 KiB mTHP).
    FolioAllocBuddy = "folio_alloc_buddy",
    /// Whole-program: a new anonymous folio charged to its memory cgroup (mem_cgroup_charge / the swap-in charge).
    MemcgCharge = "memcg_charge",
    /// Whole-program: a new anonymous folio added to the LRU (folio_add_lru_vma: a per-cpu folio batch slot, drained in batches).
    LruAdd = "lru_add",
    /// Whole-program: 4 KiB of a small or mTHP folio (order < PMD order) zeroed by the kernel (clear_page / folio_zero_user), at the core's cache-resident store bandwidth.
    ClearPage4k = "clear_page_4k",
    /// Whole-program: 4 KiB of a PMD-size (2 MiB) folio zeroed (folio_zero_user → clear_user_highpages / process_huge_page), at the core's streaming store bandwidth.
    ClearHuge4k = "clear_huge_4k",
    /// Whole-program: the user program stores over one mapped 4 KiB page (a `write`: memset), at the core's store bandwidth.
    UserStore4k = "user_store_4k",
    /// Whole-program: the user program loads one mapped 4 KiB page (a `read`), at the core's load bandwidth.
    UserLoad4k = "user_load_4k",
    /// Whole-program, a subset of `struct_page_line`: in one batched rmap or mprotect call over nr > 1 consecutive pages of one large folio (folio_add_anon_rmap_ptes / __folio_try_dup_anon_rmap_ptes, folio_remove_rmap_ptes, commit_anon_folio_batch), the struct page lines after the first (nr − 1): neighbouring 64-byte struct pages the hardware prefetcher streams, priced in place of `struct_page_line` for these lines.
    StructPageLineLarge = "struct_page_line_large",
    /// Whole-program, a subset of `user_store_4k`: the program's stores over a page of a run of present PTEs mapping one large folio (contiguous, aligned frames: fewer dTLB misses, and AMD cores coalesce such PTEs in the TLB), priced in place of `user_store_4k` for these pages.
    UserStore4kLarge = "user_store_4k_large",
    /// Whole-program, a subset of `struct_page_line`: a struct page line the same pass of the kernel's loop already touched, touched again (fork's copy_present_ptes(): the rmap dup, __folio_try_dup_anon_rmap(), re-reads the struct page vm_normal_page() just read for that PTE; mprotect's commit_anon_folio_batch(): the batch's first PageAnonExclusive() reads the line page_folio() just read): an L1 hit, priced in place of `struct_page_line` for these lines.
    StructPageLineHot = "struct_page_line_hot",
    /// Whole-program, a subset of `struct_page_line`: the struct page line change_pte_range()'s pass over an order-0 folio reads first (vm_normal_folio()'s page_folio(), then folio_test_large() on the same line), priced in place of `struct_page_line` for these lines: measured on the same frames, the same cold line costs mprotect's long loop body (two out-of-line paravirt calls per entry on x86-64) about twice what it costs fork's copy loop, so it has its own price (docs/cost.md, "The order-0 mprotect arm and the struct-page line").
    MprotectPageLine = "mprotect_page_line",
}

/// Which part of a whole program an event belongs to (the columns of
/// `ptlab cost`'s per-phase breakdown).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The kernel's page-table and mm work (PTEs, TLB, folio metadata, VMAs, fork/exit, swap).
    PageTable,
    /// System-call entry and exit.
    Syscall,
    /// The fault path outside the page table: entry/exit, handling, allocation, charge, LRU, zeroing, copying.
    Fault,
    /// The user program's own loads and stores.
    User,
}

impl Phase {
    pub const ALL: [Phase; 4] = [Phase::PageTable, Phase::Syscall, Phase::Fault, Phase::User];
    pub const fn name(self) -> &'static str {
        match self {
            Phase::PageTable => "page_table",
            Phase::Syscall => "syscall",
            Phase::Fault => "fault",
            Phase::User => "user",
        }
    }
}

/// Which priced figure an event belongs to (docs/cost.md, "Two figures").
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// The page-table figure: every event ptlab priced before whole-program
    /// pricing (page-table work plus one coarse price each for syscalls,
    /// faults, allocation, zeroing and user accesses). `reproduce`, its
    /// report and headline use it, so it stays exactly as it was.
    PageTable,
    /// The whole-program figure: page-table work plus the fine fault-path,
    /// user-access and syscall events, with the coarse events they refine
    /// left out (each piece of work is priced once).
    Program,
}

impl HwEvent {
    pub fn from_name(s: &str) -> Option<HwEvent> {
        Self::ALL.iter().copied().find(|e| e.name() == s)
    }

    /// A whole-program event: counted beside the page-table events,
    /// priced only in [`Figure::Program`].
    pub const fn is_fine(self) -> bool {
        matches!(
            self,
            HwEvent::FaultEntry
                | HwEvent::FaultHandle
                | HwEvent::FolioAllocPcp
                | HwEvent::FolioAllocBuddy
                | HwEvent::MemcgCharge
                | HwEvent::LruAdd
                | HwEvent::ClearPage4k
                | HwEvent::ClearHuge4k
                | HwEvent::UserStore4k
                | HwEvent::UserLoad4k
                | HwEvent::StructPageLineLarge
                | HwEvent::UserStore4kLarge
                | HwEvent::StructPageLineHot
                | HwEvent::MprotectPageLine
                | HwEvent::PteLineStream
                | HwEvent::MprotectLargeBatch
                | HwEvent::RmapLock
        )
    }

    /// The event this one counts a subset of, if any: its count is part of
    /// the superset's count, and where both are priced ([`Figure::Program`])
    /// the subset's lines or pages take the subset's price instead of the
    /// superset's ([`HwEvents::priced_count`]). Counts never change.
    pub const fn subset_of(self) -> Option<HwEvent> {
        match self {
            HwEvent::StructPageLineLarge => Some(HwEvent::StructPageLine),
            HwEvent::UserStore4kLarge => Some(HwEvent::UserStore4k),
            HwEvent::StructPageLineHot => Some(HwEvent::StructPageLine),
            HwEvent::MprotectPageLine => Some(HwEvent::StructPageLine),
            _ => None,
        }
    }

    /// A coarse event the fine ones refine (priced only in
    /// [`Figure::PageTable`]): `page_fault` (→ `fault_entry` +
    /// `fault_handle`), `folio_alloc` (→ `folio_alloc_pcp`/`_buddy` +
    /// `memcg_charge` + `lru_add`), `page_zero` (→ `clear_page_4k` /
    /// `clear_huge_4k`), `user_page_access` (→ `user_store_4k` /
    /// `user_load_4k`). Their counts equal the sums of their refinements'.
    pub const fn is_coarse(self) -> bool {
        matches!(
            self,
            HwEvent::PageFault | HwEvent::FolioAlloc | HwEvent::PageZero | HwEvent::UserPageAccess
        )
    }

    /// Whether the event is priced in `figure`.
    pub const fn in_figure(self, figure: Figure) -> bool {
        match figure {
            Figure::PageTable => !self.is_fine(),
            Figure::Program => !self.is_coarse(),
        }
    }

    /// The phase of a whole program the event's work belongs to.
    pub const fn phase(self) -> Phase {
        match self {
            HwEvent::Syscall => Phase::Syscall,
            HwEvent::PageFault
            | HwEvent::FaultEntry
            | HwEvent::FaultHandle
            | HwEvent::FolioAlloc
            | HwEvent::FolioAllocPcp
            | HwEvent::FolioAllocBuddy
            | HwEvent::MemcgCharge
            | HwEvent::LruAdd
            | HwEvent::PageZero
            | HwEvent::ClearPage4k
            | HwEvent::ClearHuge4k
            | HwEvent::PageCopy => Phase::Fault,
            HwEvent::UserPageAccess
            | HwEvent::UserStore4k
            | HwEvent::UserLoad4k
            | HwEvent::UserStore4kLarge => Phase::User,
            _ => Phase::PageTable,
        }
    }
}

macro_rules! kcalls {
    ($( $(#[doc = $doc:literal])* $v:ident = $name:literal ),* $(,)?) => {
        /// A kernel function whose calls are counted (next to, not among,
        /// the hardware events): the page-table hooks of include/linux/pgtable.h
        /// and arch/arm64, the TLB flush entry points and mm batch helpers.
        /// Each is counted once per call, where the model's hook runs
        /// (docs/cost.md, "Kernel-call counts").
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
        pub enum KCall { $( $(#[doc = $doc])* $v, )* }

        impl KCall {
            pub const ALL: &'static [KCall] = &[ $( KCall::$v, )* ];
            pub const COUNT: usize = [ $( KCall::$v, )* ].len();
            /// The kernel function's name.
            pub const fn name(self) -> &'static str {
                match self { $( KCall::$v => $name, )* }
            }
            pub fn from_name(s: &str) -> Option<KCall> {
                Self::ALL.iter().copied().find(|e| e.name() == s)
            }
        }
    };
}

kcalls! {
    /// ptep_get(): one PTE read through the arch hook (arm64: contpte_ptep_get on a folded block).
    PtepGet = "ptep_get",
    /// set_ptes() (set_pte_at() is set_ptes(.., 1)); non-present entries included.
    SetPtes = "set_ptes",
    /// ptep_get_and_clear() (get_and_clear_full_ptes with nr == 1 and non-present clears).
    PtepGetAndClear = "ptep_get_and_clear",
    /// get_and_clear_full_ptes() with nr > 1.
    GetAndClearFullPtes = "get_and_clear_full_ptes",
    /// wrprotect_ptes() (nr == 1 is ptep_set_wrprotect()).
    WrprotectPtes = "wrprotect_ptes",
    /// A single-entry change that is not set_pte_at(): ptep_set_wrprotect / ptep_set_access_flags.
    PtepModify = "ptep_set_wrprotect/access_flags",
    /// modify_prot_start_ptes().
    ModifyProtStartPtes = "modify_prot_start_ptes",
    /// modify_prot_commit_ptes().
    ModifyProtCommitPtes = "modify_prot_commit_ptes",
    /// folio_pte_batch() / folio_pte_batch_flags() (mm/internal.h).
    FolioPteBatch = "folio_pte_batch",
    /// flush_tlb_range() (and __flush_tlb_range from contpte_convert).
    FlushTlbRange = "flush_tlb_range",
    /// flush_tlb_mm().
    FlushTlbMm = "flush_tlb_mm",
    /// arch_tlbbatch_add_pending(): reclaim's deferred flush of unmapped PTEs (arm64;
    /// x86 with one CPU in mm_cpumask flushes at once with flush_tlb_range()).
    TlbbatchAddPending = "arch_tlbbatch_add_pending",
    /// arch_tlbbatch_flush(): completes the deferred flushes (try_to_unmap_flush[_dirty]()).
    TlbbatchFlush = "arch_tlbbatch_flush",
    /// arm64 contpte_try_unfold(): the inline check before a single-entry change.
    ContpteTryUnfold = "contpte_try_unfold",
    /// arm64 __contpte_try_fold(): the fold attempt after contpte_try_fold()'s inline tests pass.
    ContpteTryFold = "__contpte_try_fold",
    /// arm64 contpte_convert(): a fold or an unfold actually done.
    ContpteConvert = "contpte_convert",
    /// take_rmap_locks() of mm/mremap.c (with drop_rmap_locks() after): called by move_pgt_entry() for every NORMAL_PMD / NORMAL_PUD move it tries, and by move_pgt_entry() / move_ptes() otherwise only when the move needs rmap locks; it locks the anon_vma only if the VMA has one (`rmap_lock`).
    TakeRmapLocks = "take_rmap_locks",
}

/// A pure counter set: one count per [`HwEvent`], and beside them one
/// count per [`KCall`] (kernel-function calls, kept apart: they are not
/// hardware work and are never priced; [`Serialize`] writes the events only,
/// [`HwEvents::calls_map`] the calls).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HwEvents {
    counts: [u64; HwEvent::COUNT],
    calls: [u64; KCall::COUNT],
}

impl Default for HwEvents {
    fn default() -> Self {
        HwEvents {
            counts: [0; HwEvent::COUNT],
            calls: [0; KCall::COUNT],
        }
    }
}

impl HwEvents {
    /// Calls of kernel function `k`.
    pub fn calls(&self, k: KCall) -> u64 {
        self.calls[k as usize]
    }
    pub fn add_calls(&mut self, k: KCall, n: u64) {
        self.calls[k as usize] += n;
    }
    /// Non-zero call counts by function name, in [`KCall::ALL`] order.
    pub fn calls_map(&self) -> Vec<(&'static str, u64)> {
        KCall::ALL
            .iter()
            .map(|&k| (k.name(), self.calls(k)))
            .filter(|&(_, c)| c != 0)
            .collect()
    }
    pub fn get(&self, e: HwEvent) -> u64 {
        self.counts[e as usize]
    }
    pub fn add(&mut self, e: HwEvent, n: u64) {
        self.counts[e as usize] += n;
    }
    pub fn set(&mut self, e: HwEvent, n: u64) {
        self.counts[e as usize] = n;
    }
    /// Element-wise sum.
    pub fn add_all(&mut self, o: &HwEvents) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        for (a, b) in self.calls.iter_mut().zip(o.calls.iter()) {
            *a += b;
        }
    }
    /// Element-wise `self - earlier` (saturating: counters only grow).
    pub fn since(&self, earlier: &HwEvents) -> HwEvents {
        let mut out = *self;
        for (a, b) in out.counts.iter_mut().zip(earlier.counts.iter()) {
            *a = a.saturating_sub(*b);
        }
        for (a, b) in out.calls.iter_mut().zip(earlier.calls.iter()) {
            *a = a.saturating_sub(*b);
        }
        out
    }
    /// Multiply every count (extrapolating a repeated workload).
    pub fn scaled(&self, k: u64) -> HwEvents {
        let mut out = *self;
        for a in out.counts.iter_mut().chain(out.calls.iter_mut()) {
            *a = a.saturating_mul(k);
        }
        out
    }
    pub fn is_zero(&self) -> bool {
        self.counts.iter().all(|&c| c == 0)
    }
    /// Non-zero counts in [`HwEvent::ALL`] order.
    pub fn nonzero(&self) -> impl Iterator<Item = (HwEvent, u64)> + '_ {
        HwEvent::ALL
            .iter()
            .map(|&e| (e, self.get(e)))
            .filter(|&(_, c)| c != 0)
    }
    /// The count `figure` prices `e` at: 0 outside the figure; a superset
    /// ([`HwEvent::subset_of`]) less its subsets priced in the same figure
    /// (each piece of work is priced once, at the subset's price where the
    /// subset is priced).
    pub fn priced_count(&self, e: HwEvent, figure: Figure) -> u64 {
        if !e.in_figure(figure) {
            return 0;
        }
        let subsets: u64 = HwEvent::ALL
            .iter()
            .filter(|s| s.subset_of() == Some(e) && s.in_figure(figure))
            .map(|&s| self.get(s))
            .sum();
        self.get(e).saturating_sub(subsets)
    }
    /// Non-zero [`HwEvents::priced_count`]s of `figure`, in [`HwEvent::ALL`]
    /// order: what pricing `figure` multiplies by the prices.
    pub fn priced(&self, figure: Figure) -> impl Iterator<Item = (HwEvent, u64)> + '_ {
        HwEvent::ALL
            .iter()
            .map(move |&e| (e, self.priced_count(e, figure)))
            .filter(|&(_, c)| c != 0)
    }
    /// All counts by name (zeros included).
    pub fn to_map(&self) -> BTreeMap<&'static str, u64> {
        HwEvent::ALL
            .iter()
            .map(|&e| (e.name(), self.get(e)))
            .collect()
    }
}

impl Serialize for HwEvents {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (e, c) in self.nonzero() {
            m.serialize_entry(e.name(), &c)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for HwEvents {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m: BTreeMap<String, u64> = BTreeMap::deserialize(d)?;
        let mut out = HwEvents::default();
        for (k, v) in m {
            let e = HwEvent::from_name(&k)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown event '{k}'")))?;
            out.set(e, v);
        }
        Ok(out)
    }
}

/// CPU features that change which instructions the kernel issues.
/// Linux: arch/arm64/include/asm/tlbflush.h system_supports_tlb_range(),
/// arch/arm64/mm/contpte.c system_supports_bbml2_noabort(),
/// arm64_kernel_unmapped_at_el0() (KPTI: __tlbi_user doubles each TLBI).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
pub struct HwFeatures {
    /// arm64 FEAT_TLBIRANGE (range TLBIs; ASID-wide fallback only above 8 GiB).
    #[serde(default)]
    pub tlbi_range: bool,
    /// arm64 BBML2 with no-abort: contpte_convert() skips its TLB flush.
    #[serde(default)]
    pub bbml2_noabort: bool,
    /// Kernel page-table isolation: every user TLB invalidation is issued
    /// twice (arm64 KPTI __tlbi_user; x86 PTI INVPCID for the user PCID).
    #[serde(default)]
    pub kpti: bool,
    /// arm64 without the contpte layer (Linux before 6.9, or
    /// CONFIG_ARM64_CONTPTE=n): the PTE hooks are the generic per-entry
    /// ones and PTE_CONT is never set on user mappings. No effect on x86-64.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub contpte_off: bool,
}

/// Where one batch or TLB invalidation happened, for pictures
/// (`ptlab show`). Reported only to an attached [`HwObserver`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HwMark {
    /// `nr` PTEs from `va` handled as one batch by `op` (`move`, `protect`,
    /// `copy`, `zap`, ...); a batch of 1 is the per-PTE path.
    Batch { va: u64, nr: u64, op: &'static str },
    /// A TLB invalidation asked for `[start, end)`; `whole`: the kernel
    /// invalidated the whole address space instead (range too large).
    TlbFlush { start: u64, end: u64, whole: bool },
}

/// An optional watcher of a sink's [`HwMark`]s (the tracing `ptlab show`
/// draws from). It sees where batches and flushes happened; it cannot see
/// or change the counts, and nothing the model does depends on it.
pub trait HwObserver: std::fmt::Debug + Send {
    /// One mark, in the order the model made them.
    fn mark(&mut self, m: HwMark);
    /// Hand over (and forget) what was recorded; an observer that keeps
    /// nothing returns nothing.
    fn take(&mut self) -> Vec<HwMark> {
        Vec::new()
    }
    /// A copy for a cloned sink.
    fn boxed_clone(&self) -> Box<dyn HwObserver>;
}

/// The observer `ptlab show` uses: every mark, in order.
#[derive(Clone, Debug, Default)]
pub struct HwTrace(Vec<HwMark>);

impl HwObserver for HwTrace {
    fn mark(&mut self, m: HwMark) {
        self.0.push(m);
    }
    fn take(&mut self) -> Vec<HwMark> {
        std::mem::take(&mut self.0)
    }
    fn boxed_clone(&self) -> Box<dyn HwObserver> {
        Box::new(self.clone())
    }
}

/// A copy of a [`HwSink`]'s counts ([`HwSink::tally`]).
#[derive(Clone, Debug)]
pub struct HwTally {
    counts: [u64; HwEvent::COUNT],
    calls: [u64; KCall::COUNT],
    rules: [u32; crate::core::rules::Rule::COUNT],
    /// The counters ever changed when the tally was taken: the others
    /// were zero then, whatever their slots hold (a tally written in place,
    /// [`HwSink::tally_into`], copies only these).
    counts_hit: [u64; touched_words(HwEvent::COUNT)],
    calls_hit: [u64; touched_words(KCall::COUNT)],
    rules_hit: crate::core::rules::RulesTouched,
}

/// Counter `i` of a tally's `values` as it was when the tally was taken:
/// its slot if the counter was in the tally's "ever changed" set `hit`,
/// else zero (a counter not changed by then was zero, whatever a tally
/// written in place left in its slot).
#[inline]
fn tallied<const W: usize>(values: &[u64], hit: &[u64; W], i: usize) -> u64 {
    if Touched::<W>::in_words(hit, i) {
        values[i]
    } else {
        0
    }
}

/// A plain counter set that can be bumped through a shared reference (the
/// model's read paths, such as `ptep_get`, take `&self`), with the CPU
/// features the arch's recipes consult and an optional [`HwObserver`].
/// The model only ever adds to the counts: they are read for reports
/// ([`crate::Model::hw_events`]) and when an exiting process's events
/// retire into the machine's sink, never to decide what to do.
pub struct HwSink {
    counts: [Cell<u64>; HwEvent::COUNT],
    calls: [Cell<u64>; KCall::COUNT],
    /// The events and calls ever counted (for a sparse [`HwSink::add_since`]).
    counts_touched: Touched<{ touched_words(HwEvent::COUNT) }>,
    calls_touched: Touched<{ touched_words(KCall::COUNT) }>,
    /// Rule hits (coverage: [`crate::core::rules`]), kept beside the
    /// events because every rule site has a sink at hand.
    pub rules: crate::core::rules::RuleCounts,
    /// The CPU features the arch's TLB recipe consults.
    pub features: HwFeatures,
    observer: RefCell<Option<Box<dyn HwObserver>>>,
    /// Whether `observer` holds one (kept by [`HwSink::attach`]): a mark
    /// with none attached returns on this read, without the `RefCell`
    /// borrow's flag writes.
    observed: Cell<bool>,
}

impl Clone for HwSink {
    fn clone(&self) -> Self {
        HwSink {
            counts: self.counts.clone(),
            calls: self.calls.clone(),
            counts_touched: self.counts_touched.clone(),
            calls_touched: self.calls_touched.clone(),
            rules: self.rules.clone(),
            features: self.features,
            observer: RefCell::new(self.observer.borrow().as_ref().map(|o| o.boxed_clone())),
            observed: self.observed.clone(),
        }
    }
}

impl std::fmt::Debug for HwSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwSink")
            .field("counts", &self.snapshot())
            .field("features", &self.features)
            .field("observer", &self.observer.borrow())
            .finish()
    }
}

impl HwSink {
    pub fn new(features: HwFeatures) -> Self {
        HwSink {
            counts: std::array::from_fn(|_| Cell::new(0)),
            calls: std::array::from_fn(|_| Cell::new(0)),
            counts_touched: Touched::default(),
            calls_touched: Touched::default(),
            rules: Default::default(),
            features,
            observer: RefCell::new(None),
            observed: Cell::new(false),
        }
    }

    /// Attach `o` (replacing any observer) or, with `None`, detach;
    /// returns the observer that was attached.
    pub fn attach(&self, o: Option<Box<dyn HwObserver>>) -> Option<Box<dyn HwObserver>> {
        self.observed.set(o.is_some());
        std::mem::replace(&mut *self.observer.borrow_mut(), o)
    }

    /// Start (or stop) recording [`HwMark`]s with a fresh [`HwTrace`];
    /// starting drops old marks.
    pub fn set_tracing(&self, on: bool) {
        self.attach(on.then(|| Box::new(HwTrace::default()) as Box<dyn HwObserver>));
    }

    /// The marks the observer recorded since the last take (it stays
    /// attached); none without an observer.
    pub fn take_marks(&self) -> Vec<HwMark> {
        self.observer
            .borrow_mut()
            .as_mut()
            .map(|o| o.take())
            .unwrap_or_default()
    }

    /// Report a mark to the observer, if one is attached.
    #[inline]
    pub fn mark(&self, m: HwMark) {
        if !self.observed.get() {
            return;
        }
        if let Some(o) = self.observer.borrow_mut().as_mut() {
            o.mark(m);
        }
    }

    /// Report a batch of `nr` PTEs from `va` (when observed).
    #[inline]
    pub fn mark_batch(&self, va: u64, nr: u64, op: &'static str) {
        self.mark(HwMark::Batch { va, nr, op });
    }
    #[inline]
    pub fn add(&self, e: HwEvent, n: u64) {
        let c = &self.counts[e as usize];
        c.set(c.get() + n);
        self.counts_touched.set(e as usize);
    }
    #[inline]
    pub fn one(&self, e: HwEvent) {
        self.add(e, 1);
    }
    /// A user fault taken: the coarse `page_fault` and its refinement
    /// (`fault_entry`, `fault_handle`).
    /// Linux: arch/x86/mm/fault.c exc_page_fault() → do_user_addr_fault(),
    /// arch/arm64/mm/fault.c do_page_fault().
    #[inline]
    pub fn page_fault(&self) {
        self.one(HwEvent::PageFault);
        self.one(HwEvent::FaultEntry);
        self.one(HwEvent::FaultHandle);
    }
    /// `n` user accesses of mapped 4 KiB pages: the coarse
    /// `user_page_access` and its refinement by direction.
    #[inline]
    pub fn user_access(&self, n: u64, write: bool) {
        self.add(HwEvent::UserPageAccess, n);
        let e = if write {
            HwEvent::UserStore4k
        } else {
            HwEvent::UserLoad4k
        };
        self.add(e, n);
    }
    /// `n` user accesses of a run of present PTEs over one large folio:
    /// [`HwSink::user_access`], and for stores the subset
    /// `user_store_4k_large`.
    #[inline]
    pub fn user_access_large_run(&self, n: u64, write: bool) {
        self.user_access(n, write);
        if write {
            self.add(HwEvent::UserStore4kLarge, n);
        }
    }
    /// The struct page lines of one batched call over `nr` consecutive
    /// pages of one folio (one line per page), and, when the folio is
    /// large and `nr > 1`, the subset `struct_page_line_large` for the
    /// lines after the first.
    #[inline]
    pub fn struct_page_lines_batch(&self, nr: u64, large: bool) {
        self.add(HwEvent::StructPageLine, nr);
        if large && nr > 1 {
            self.add(HwEvent::StructPageLineLarge, nr - 1);
        }
    }
    /// `nr` 4 KiB pages of a folio of `order` zeroed: the coarse
    /// `page_zero` and its refinement by size (a PMD-size folio streams
    /// past the caches).
    /// Linux: mm/memory.c folio_zero_user(), clear_page().
    #[inline]
    pub fn page_zero(&self, nr: u64, order: u8) {
        self.add(HwEvent::PageZero, nr);
        let e = if order >= crate::core::addr::PMD_ORDER {
            HwEvent::ClearHuge4k
        } else {
            HwEvent::ClearPage4k
        };
        self.add(e, nr);
    }
    /// A new anonymous folio of `order`: the coarse `folio_alloc` and its
    /// refinement — the allocator path by order, the memcg charge and the
    /// LRU add.
    /// Linux: mm/page_alloc.c rmqueue(): pcp_allowed_order() (order <=
    /// PAGE_ALLOC_COSTLY_ORDER or pageblock_order) takes rmqueue_pcplist(),
    /// other orders rmqueue_buddy() under zone->lock; mm/memory.c
    /// alloc_anon_folio() → mem_cgroup_charge(); folio_add_lru_vma() when
    /// the folio is mapped.
    #[inline]
    pub fn folio_alloc(&self, order: u8) {
        self.folio_alloc_n(order, 1);
    }
    /// `n` × [`HwSink::folio_alloc`] in one step (a run of faults whose
    /// counts are written out).
    #[inline]
    pub fn folio_alloc_n(&self, order: u8, n: u64) {
        self.add(HwEvent::FolioAlloc, n);
        let pcp = order <= 3 || order == crate::core::addr::PMD_ORDER;
        self.add(
            if pcp {
                HwEvent::FolioAllocPcp
            } else {
                HwEvent::FolioAllocBuddy
            },
            n,
        );
        self.add(HwEvent::MemcgCharge, n);
        self.add(HwEvent::LruAdd, n);
    }
    /// `n` PTE reads that an mm walk makes through `ptep_get()` without the
    /// model's arch hook (zap_pte_range()'s per-entry read, the swap walks'
    /// and page_vma_mapped_walk()'s reads, copy/move of a swap entry, the
    /// guard-marker walks, the `pte_same()` re-checks under the PTL): `n`
    /// 8-byte loads and `n` `ptep_get` calls (no arm64 contpte gather is
    /// added: these walks are the same before and after every seed switch).
    #[inline]
    pub fn ptep_get_reads(&self, n: u64) {
        self.add(HwEvent::PteLoad, n);
        self.call_n(KCall::PtepGet, n);
    }
    /// Count one call of kernel function `k` (not a hardware event).
    #[inline]
    pub fn call(&self, k: KCall) {
        self.call_n(k, 1);
    }
    /// `n` calls of kernel function `k` at once (a per-segment loop's run).
    #[inline]
    pub fn call_n(&self, k: KCall, n: u64) {
        let c = &self.calls[k as usize];
        c.set(c.get() + n);
        self.calls_touched.set(k as usize);
    }
    /// Whether an observer records marks (then per-segment loops that
    /// would merge marks take the entry-by-entry path).
    pub fn observing(&self) -> bool {
        self.observed.get()
    }
    /// Count one hit of kernel rule `r` ([`crate::rule!`] writes this).
    #[inline]
    pub fn rule(&self, r: crate::core::rules::Rule) {
        self.rules.hit(r);
    }
    /// Every event, call and rule count as it is now, for
    /// [`HwSink::add_since`] (never for a decision of the model).
    pub fn tally(&self) -> HwTally {
        HwTally {
            counts: std::array::from_fn(|i| self.counts[i].get()),
            calls: std::array::from_fn(|i| self.calls[i].get()),
            rules: self.rules.tally(),
            counts_hit: self.counts_touched.words(),
            calls_hit: self.calls_touched.words(),
            rules_hit: self.rules.touched(),
        }
    }
    /// [`HwSink::tally`] written over `t` in place: for a tally kept in a
    /// box that is reused (a stretch's template fault,
    /// `crate::sys::fault_run::FaultTally`), without building the few
    /// kilobytes on the stack and copying them into the box.
    /// Only the counters ever changed are copied, with the set of them
    /// (the others are zero, and [`HwSink::add_since`] reads them so):
    /// a workload touches a few of the counters, and copying all of them
    /// was most of the tally's cost (issue 14, mremap-batch-64k's twelfth
    /// session).
    pub fn tally_into(&self, t: &mut HwTally) {
        t.counts_hit = self
            .counts_touched
            .copy_touched(&self.counts, &mut t.counts);
        t.calls_hit = self.calls_touched.copy_touched(&self.calls, &mut t.calls);
        t.rules_hit = self.rules.tally_into(&mut t.rules);
    }
    /// Add `k` times every event, kernel call and rule hit counted since
    /// `before`: a whole-stretch step that did one of `k + 1` identical
    /// steps through the step's own code adds the other `k` in one
    /// addition.
    /// Only the counters ever changed are visited (the others are zero
    /// now and were then).
    pub fn add_since(&self, before: &HwTally, k: u64) {
        self.counts_touched.each(|i| {
            let c = &self.counts[i];
            let b = tallied(&before.counts, &before.counts_hit, i);
            c.set(c.get() + (c.get() - b) * k);
        });
        self.calls_touched.each(|i| {
            let c = &self.calls[i];
            let b = tallied(&before.calls, &before.calls_hit, i);
            c.set(c.get() + (c.get() - b) * k);
        });
        self.rules.add_since(
            &before.rules,
            &before.rules_hit,
            u32::try_from(k).unwrap_or(u32::MAX),
        );
    }
    /// The counts, for reports (never for a decision of the model).
    pub fn snapshot(&self) -> HwEvents {
        let mut out = HwEvents::default();
        for (i, c) in self.counts.iter().enumerate() {
            out.counts[i] = c.get();
        }
        for (i, c) in self.calls.iter().enumerate() {
            out.calls[i] = c.get();
        }
        out
    }
    /// Add every count of `o` (an exiting process's events retire here).
    pub fn absorb(&self, o: &HwEvents) {
        for (i, (c, v)) in self.counts.iter().zip(o.counts.iter()).enumerate() {
            if *v != 0 {
                c.set(c.get() + v);
                self.counts_touched.set(i);
            }
        }
        for (i, (c, v)) in self.calls.iter().zip(o.calls.iter()).enumerate() {
            if *v != 0 {
                c.set(c.get() + v);
                self.calls_touched.set(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &e in HwEvent::ALL {
            assert_eq!(HwEvent::from_name(e.name()), Some(e));
            assert!(!e.describe().is_empty());
        }
        let mut h = HwEvents::default();
        h.add(HwEvent::PteLoad, 3);
        let j = serde_json::to_string(&h).unwrap();
        assert_eq!(j, r#"{"pte_load":3}"#);
        assert_eq!(serde_json::from_str::<HwEvents>(&j).unwrap(), h);
    }

    /// The sparse `add_since` (only counters ever changed are visited)
    /// multiplies exactly what changed since the tally: counters changed
    /// before it only, after it only (first touched then), both, and
    /// through a clone and an absorb.
    #[test]
    fn add_since_repeats_what_changed_since_the_tally() {
        let s = HwSink::new(HwFeatures::default());
        s.add(HwEvent::PteLoad, 5);
        s.call(KCall::SetPtes);
        s.rule(crate::core::rules::Rule::ContpteFold);
        let before = s.tally();
        // A tally written in place over an older one is the same tally.
        let mut again = HwSink::new(HwFeatures::default()).tally();
        s.tally_into(&mut again);
        assert_eq!(again.counts, before.counts);
        assert_eq!(again.calls, before.calls);
        assert_eq!(again.rules, before.rules);
        s.add(HwEvent::PteLoad, 2);
        s.add(HwEvent::PteStore, 3);
        s.call_n(KCall::PtepGet, 4);
        s.rule(crate::core::rules::Rule::ContptePaint);
        s.add_since(&before, 10);
        let snap = s.snapshot();
        assert_eq!(snap.get(HwEvent::PteLoad), 5 + 2 * 11);
        assert_eq!(snap.get(HwEvent::PteStore), 3 * 11);
        assert_eq!(snap.calls(KCall::SetPtes), 1);
        assert_eq!(snap.calls(KCall::PtepGet), 4 * 11);
        let cov = s.rules.coverage();
        assert_eq!(cov.get(crate::core::rules::Rule::ContpteFold), 1);
        assert_eq!(cov.get(crate::core::rules::Rule::ContptePaint), 11);
        // A clone keeps which counters changed; an absorbed count marks its own.
        let c = s.clone();
        let before = c.tally();
        let mut more = HwEvents::default();
        more.add(HwEvent::PteAtomicClear, 7);
        c.absorb(&more);
        c.add(HwEvent::PteLoad, 1);
        c.add_since(&before, 2);
        let snap = c.snapshot();
        assert_eq!(snap.get(HwEvent::PteAtomicClear), 21);
        assert_eq!(snap.get(HwEvent::PteLoad), 27 + 3);
        assert_eq!(snap.get(HwEvent::PteStore), 33);
    }

    /// A tally written in place over an older tally of another sink
    /// ([`HwSink::tally_into`] copies only the counters ever changed) keeps
    /// that tally's values in the other slots: `add_since` must read the
    /// counters the sink had not changed by the tally as zero, whatever the
    /// slots hold — events, kernel calls and rule hits alike, including
    /// counters first changed after the tally.
    #[test]
    fn a_tally_written_over_a_stale_one_repeats_the_same_counts() {
        use crate::core::rules::Rule;
        let other = HwSink::new(HwFeatures::default());
        other.add(HwEvent::PteStore, 40);
        other.add(HwEvent::PteLoad, 9);
        other.call_n(KCall::PtepGet, 30);
        other.rule(Rule::ContptePaint);
        other.rule(Rule::ContpteFold);
        let fresh = |s: &HwSink| {
            s.add(HwEvent::PteLoad, 5);
            s.call(KCall::SetPtes);
            s.rule(Rule::ContpteFold);
        };
        let step = |s: &HwSink| {
            s.add(HwEvent::PteLoad, 2);
            s.add(HwEvent::PteStore, 3);
            s.call_n(KCall::PtepGet, 4);
            s.rule(Rule::ContptePaint);
        };
        let (a, b) = (
            HwSink::new(HwFeatures::default()),
            HwSink::new(HwFeatures::default()),
        );
        fresh(&a);
        fresh(&b);
        let full = a.tally();
        let mut stale = other.tally();
        b.tally_into(&mut stale);
        step(&a);
        step(&b);
        a.add_since(&full, 6);
        b.add_since(&stale, 6);
        assert_eq!(a.snapshot(), b.snapshot());
        assert_eq!(a.rules.coverage(), b.rules.coverage());
        let snap = b.snapshot();
        assert_eq!(snap.get(HwEvent::PteStore), 3 * 7);
        assert_eq!(snap.calls(KCall::PtepGet), 4 * 7);
        assert_eq!(b.rules.coverage().get(Rule::ContptePaint), 7);
        assert_eq!(b.rules.coverage().get(Rule::ContpteFold), 1);
    }

    #[test]
    fn the_observer_sees_marks_and_never_the_counts() {
        let s = HwSink::new(HwFeatures::default());
        s.mark_batch(0, 1, "zap"); // no observer: dropped
        s.one(HwEvent::PteLoad);
        assert!(s.take_marks().is_empty());
        s.set_tracing(true);
        s.mark_batch(0x1000, 4, "zap");
        s.one(HwEvent::PteLoad);
        let c = s.clone();
        assert_eq!(c.take_marks().len(), 1, "a cloned sink clones its observer");
        assert_eq!(s.take_marks().len(), 1);
        assert!(s.take_marks().is_empty(), "taking drains");
        assert_eq!(s.snapshot().get(HwEvent::PteLoad), 2);
        assert!(s.attach(None).is_some());
        s.mark_batch(0, 1, "zap");
        assert!(s.take_marks().is_empty());
    }
}
