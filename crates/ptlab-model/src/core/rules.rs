//! The registry of kernel rules the model implements, and their hit
//! counters (rule coverage).
//!
//! A *rule* is one place where the kernel decides: an errno check in the
//! order the kernel makes it, or a branch between algorithms (a batched
//! PTE move against a per-entry one, a whole-table move, a PMD split, a
//! contpte fold, ...). Each rule has one row here — its id, a short
//! stable name, the operation family it belongs to, the kernel function it
//! mirrors and the docs page that describes it — and exactly one site in
//! the model, written `rule!(sink, Id)` next to that site's
//! `// Linux:` citation (crates/ptlab-model/tests/rule_sites.rs checks
//! both). A hit is one `Cell` increment in the [`crate::core::hw::HwSink`]
//! at hand: no hashing, no allocation. [`crate::Model::coverage`] sums the
//! counts of every sink (exited processes' counts retire into the
//! machine's sink, like their hardware events).
//!
//! Counting never changes what the model does: like the hardware-event
//! counts, rule counts are read only for reports. `ptlab coverage` and
//! `ptlab fuzz` report them (docs/coverage.md).

use std::cell::Cell;

/// The operation family a rule belongs to: what a scenario (or the
/// fuzzer's generator) has to do to reach it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Family {
    Mmap,
    Munmap,
    Fault,
    Madvise,
    Mprotect,
    Mremap,
    Fork,
    Uffd,
    Guard,
    Mlock,
    Mseal,
    Swap,
    Collapse,
    Zap,
    Contpte,
}

impl Family {
    pub const ALL: &'static [Family] = &[
        Family::Mmap,
        Family::Munmap,
        Family::Fault,
        Family::Madvise,
        Family::Mprotect,
        Family::Mremap,
        Family::Fork,
        Family::Uffd,
        Family::Guard,
        Family::Mlock,
        Family::Mseal,
        Family::Swap,
        Family::Collapse,
        Family::Zap,
        Family::Contpte,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            Family::Mmap => "mmap",
            Family::Munmap => "munmap",
            Family::Fault => "fault",
            Family::Madvise => "madvise",
            Family::Mprotect => "mprotect",
            Family::Mremap => "mremap",
            Family::Fork => "fork",
            Family::Uffd => "uffd",
            Family::Guard => "guard",
            Family::Mlock => "mlock",
            Family::Mseal => "mseal",
            Family::Swap => "swap",
            Family::Collapse => "collapse",
            Family::Zap => "zap",
            Family::Contpte => "contpte",
        }
    }
    /// The docs page that describes the family's rules.
    pub const fn doc(self) -> &'static str {
        match self {
            Family::Mmap | Family::Munmap => "docs/ops/mmap.md",
            Family::Fault => "docs/model.md",
            Family::Madvise => "docs/ops/madvise.md",
            Family::Mprotect => "docs/ops/mprotect.md",
            Family::Mremap => "docs/ops/mremap.md",
            Family::Fork => "docs/ops/fork.md",
            Family::Uffd => "docs/ops/userfaultfd.md",
            Family::Guard | Family::Mlock | Family::Mseal => "docs/ops/guard-mlock-mseal.md",
            Family::Swap => "docs/ops/swap.md",
            Family::Collapse => "docs/ops/collapse.md",
            Family::Zap => "docs/model.md",
            Family::Contpte => "docs/model.md",
        }
    }
    pub fn from_name(s: &str) -> Option<Family> {
        Self::ALL.iter().copied().find(|f| f.name() == s)
    }
}

/// One row of the registry.
#[derive(Clone, Copy, Debug)]
pub struct RuleInfo {
    pub rule: Rule,
    /// Stable short name, `family.what` (used in reports and JSON).
    pub name: &'static str,
    pub family: Family,
    /// The kernel function the rule mirrors (`mm/mremap.c move_ptes()`).
    pub kernel: &'static str,
    /// Whether the rule is a decision the seed switches (`--before NAME`)
    /// select between: reached only with the switch on, or only with it off.
    pub seed_switch: bool,
}

macro_rules! rules {
    ($( $v:ident = ($name:literal, $fam:ident, $kernel:literal $(, $seed:ident)?) ),* $(,)?) => {
        /// A kernel rule the model implements (see the module docs).
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub enum Rule { $( $v, )* }

        impl Rule {
            pub const ALL: &'static [Rule] = &[ $( Rule::$v, )* ];
            pub const COUNT: usize = [ $( Rule::$v, )* ].len();
            /// The rule's registry row.
            pub const fn info(self) -> RuleInfo {
                match self { $( Rule::$v => RuleInfo {
                    rule: Rule::$v,
                    name: $name,
                    family: Family::$fam,
                    kernel: $kernel,
                    seed_switch: rules!(@seed $($seed)?),
                }, )* }
            }
        }
    };
    (@seed) => { false };
    (@seed seed) => { true };
}

/// Count one hit of rule `$r` (an identifier of [`Rule`]) in `$sink`
/// (an [`crate::core::hw::HwSink`]): one `Cell` increment. A site imports
/// it with `use crate::core::rules::rule;`.
macro_rules! rule {
    ($sink:expr, $r:ident) => {
        $sink.rule($crate::core::rules::Rule::$r)
    };
    // `$n` hits at once, for a loop that takes the rule `$n` times in one
    // step (the site is still the rule's one site).
    ($sink:expr, $r:ident, $n:expr) => {
        $sink.rules.hit_n($crate::core::rules::Rule::$r, $n)
    };
}
pub(crate) use rule;

rules! {
    MmapNotAnonymous = ("mmap.ebadf_not_anonymous", Mmap, "mm/mmap.c ksys_mmap_pgoff()"),
    MmapLenZero = ("mmap.einval_len_zero", Mmap, "mm/mmap.c do_mmap()"),
    MmapMapCount = ("mmap.enomem_map_count", Mmap, "mm/mmap.c do_mmap()"),
    MmapFixedNoreplaceExists = ("mmap.eexist_fixed_noreplace", Mmap, "mm/mmap.c do_mmap()"),
    MmapLockedCannotMlock = ("mmap.eperm_locked_without_memlock", Mmap, "mm/mmap.c do_mmap()"),
    MmapLockedMemlock = ("mmap.eagain_locked_rlimit_memlock", Mmap, "mm/mmap.c do_mmap()"),
    MmapPopulate = ("mmap.populate", Mmap, "mm/mmap.c do_mmap()"),
    MmapLenTooBig = ("mmap.enomem_len_too_big", Mmap, "mm/mmap.c __get_unmapped_area()"),
    MmapThpAligned = ("mmap.thp_aligned_placement", Mmap, "mm/mmap.c __get_unmapped_area()"),
    MmapAddrBeyondTask = ("mmap.enomem_beyond_task_size", Mmap, "mm/mmap.c __get_unmapped_area()"),
    MmapBelowMinAddr = ("mmap.eperm_below_mmap_min_addr", Mmap, "mm/mmap.c __get_unmapped_area()"),
    MmapFixedReplaces = ("mmap.fixed_replaces", Mmap, "mm/vma.c mmap_region()"),
    MmapRlimitAs = ("mmap.enomem_rlimit_as_data", Mmap, "mm/vma.c mmap_region()"),
    MmapNewVma = ("mmap.new_vma_without_merge", Mmap, "mm/vma.c mmap_region()"),
    MunmapArgsInvalid = ("munmap.einval_range", Munmap, "mm/vma.c do_vmi_munmap()"),
    MunmapLenZero = ("munmap.einval_len_zero", Munmap, "mm/vma.c do_vmi_munmap()"),
    MunmapSplitMapCount = ("munmap.enomem_split_map_count", Munmap, "mm/vma.c vms_gather_munmap_vmas()"),
    MunmapSplitHugePmdStart = ("munmap.split_huge_pmd_at_start", Munmap, "mm/vma.c vms_gather_munmap_vmas()"),
    MunmapSplitHugePmdEnd = ("munmap.split_huge_pmd_at_end", Munmap, "mm/vma.c vms_gather_munmap_vmas()"),
    MunmapFreeTables = ("munmap.free_page_tables", Munmap, "mm/vma.c vms_complete_munmap_vmas()"),
    FaultWriteReadonly = ("fault.segv_write_readonly_vma", Fault, "mm/memory.c handle_mm_fault()"),
    FaultNoAccess = ("fault.segv_no_access_vma", Fault, "mm/memory.c handle_mm_fault()"),
    FaultHugeZeroPmd = ("fault.huge_zero_pmd", Fault, "mm/huge_memory.c do_huge_pmd_anonymous_page()"),
    FaultPmdThp = ("fault.pmd_thp", Fault, "mm/huge_memory.c do_huge_pmd_anonymous_page()"),
    FaultHugeZeroWpThp = ("fault.huge_zero_write_new_thp", Fault, "mm/huge_memory.c do_huge_zero_wp_pmd()"),
    FaultHugePmdReuse = ("fault.huge_pmd_wp_reuse", Fault, "mm/huge_memory.c do_huge_pmd_wp_page()"),
    FaultHugePmdCowSplit = ("fault.huge_pmd_wp_split", Fault, "mm/huge_memory.c do_huge_pmd_wp_page()"),
    FaultOrderOutsideVma = ("fault.order_dropped_outside_vma", Fault, "mm/memory.c alloc_anon_folio()"),
    FaultLargeOrder = ("fault.mthp_order", Fault, "mm/memory.c alloc_anon_folio()"),
    FaultZeroPage = ("fault.read_maps_zero_page", Fault, "mm/memory.c do_anonymous_page()"),
    FaultMthpFallback = ("fault.mthp_alloc_fallback", Fault, "mm/memory.c alloc_anon_folio()"),
    FaultCowZeroPage = ("fault.cow_zero_page", Fault, "mm/memory.c do_wp_page()"),
    FaultWpDrainsLru = ("fault.wp_reuse_drains_lru_batch", Fault, "mm/memory.c wp_can_reuse_anon_folio()"),
    FaultWpReuse = ("fault.wp_reuse", Fault, "mm/memory.c do_wp_page()"),
    FaultWpCopy = ("fault.wp_copy", Fault, "mm/memory.c wp_page_copy()"),
    MadviseFreeSkipSharedLarge = ("madvise.free_skips_shared_large_folio", Madvise, "mm/madvise.c madvise_free_pte_range()"),
    MadviseFreeSplitLarge = ("madvise.free_splits_partial_large_folio", Madvise, "mm/madvise.c madvise_free_pte_range()"),
    MadviseFreeKeepsDirtyShared = ("madvise.free_keeps_dirty_shared_folio", Madvise, "mm/madvise.c madvise_free_pte_range()"),
    MadviseFreeClearYoungDirty = ("madvise.free_clears_young_dirty", Madvise, "include/linux/pgtable.h clear_young_dirty_ptes()"),
    MadviseLenZero = ("madvise.len_zero_succeeds", Madvise, "mm/madvise.c madvise_should_skip()"),
    MadviseNoVma = ("madvise.enomem_no_vma", Madvise, "mm/madvise.c madvise_walk_vmas()"),
    MadviseHole = ("madvise.enomem_hole_after_work", Madvise, "mm/madvise.c madvise_walk_vmas()"),
    MadviseDontneedLocked = ("madvise.dontneed_einval_locked", Madvise, "mm/madvise.c madvise_dontneed_free_valid_vma()"),
    MadviseDontneed = ("madvise.dontneed_zaps", Madvise, "mm/memory.c zap_page_range_single_batched()"),
    MadviseFreeLocked = ("madvise.free_einval_locked", Madvise, "mm/madvise.c madvise_dontneed_free_valid_vma()"),
    MadviseDoforkIo = ("madvise.dofork_einval_vm_io", Madvise, "mm/madvise.c madvise_vma_behavior()"),
    MadviseSplitHugePmdAtBoundary = ("madvise.split_huge_pmd_at_vma_boundary", Madvise, "mm/huge_memory.c vma_adjust_trans_huge()"),
    MadviseFreeSplitsPmdThp = ("madvise.free_splits_partial_pmd_thp", Madvise, "mm/huge_memory.c madvise_free_huge_pmd()"),
    MadviseFreeHugePmd = ("madvise.free_whole_pmd_thp", Madvise, "mm/huge_memory.c madvise_free_huge_pmd()"),
    MprotectGrowsBoth = ("mprotect.einval_grows_both", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectAddrUnaligned = ("mprotect.einval_addr_unaligned", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectLenZero = ("mprotect.len_zero_succeeds", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectProtInvalid = ("mprotect.einval_prot_bits", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectGrowsdownNotStack = ("mprotect.einval_growsdown", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectUnmappedStart = ("mprotect.enomem_unmapped_start", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectGrowsup = ("mprotect.einval_growsup", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectHole = ("mprotect.enomem_hole", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectBeyondMay = ("mprotect.eacces_beyond_vm_may", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectPastLastVma = ("mprotect.enomem_past_last_vma", Mprotect, "mm/mprotect.c do_mprotect_pkey()"),
    MprotectRlimitData = ("mprotect.enomem_rlimit_data", Mprotect, "mm/mprotect.c mprotect_fixup()"),
    MprotectSplitMapCount = ("mprotect.enomem_split_map_count", Mprotect, "mm/mprotect.c mprotect_fixup()"),
    MprotectSplitHugePmdAtBoundary = ("mprotect.split_huge_pmd_at_vma_boundary", Mprotect, "mm/mprotect.c mprotect_fixup()"),
    MprotectSplitHugePmdPartial = ("mprotect.split_huge_pmd_partial", Mprotect, "mm/mprotect.c change_protection()"),
    MprotectChangeHugePmd = ("mprotect.change_huge_pmd", Mprotect, "mm/huge_memory.c change_huge_pmd()"),
    MprotectHugePmdMkwrite = ("mprotect.huge_pmd_write_upgrade", Mprotect, "mm/huge_memory.c can_change_pmd_writable()"),
    MprotectPtesBatch = ("mprotect.pte_batch", Mprotect, "mm/mprotect.c mprotect_folio_pte_batch()", seed),
    MprotectBatchWriteUpgrade = ("mprotect.batch_write_upgrade", Mprotect, "mm/mprotect.c set_write_prot_commit_flush_ptes()", seed),
    MprotectBatchMixedExclusive = ("mprotect.batch_split_by_anon_exclusive", Mprotect, "mm/mprotect.c set_write_prot_commit_flush_ptes()", seed),
    MprotectPtePerEntry = ("mprotect.per_pte", Mprotect, "mm/mprotect.c change_pte_range()", seed),
    MprotectPteWriteUpgrade = ("mprotect.per_pte_write_upgrade", Mprotect, "mm/mprotect.c can_change_pte_writable()", seed),
    MremapFlagsInvalid = ("mremap.einval_flags", Mremap, "mm/mremap.c check_mremap_params()"),
    MremapAddrUnaligned = ("mremap.einval_addr_unaligned", Mremap, "mm/mremap.c check_mremap_params()"),
    MremapNewLenInvalid = ("mremap.einval_new_len", Mremap, "mm/mremap.c check_mremap_params()"),
    MremapNewAddrInvalid = ("mremap.einval_new_addr", Mremap, "mm/mremap.c check_mremap_params()"),
    MremapFixedWithoutMaymove = ("mremap.einval_fixed_without_maymove", Mremap, "mm/mremap.c check_mremap_params()"),
    MremapDontunmapResize = ("mremap.einval_dontunmap_resize", Mremap, "mm/mremap.c check_mremap_params()"),
    MremapOverlap = ("mremap.einval_overlap", Mremap, "mm/mremap.c check_mremap_params()"),
    MremapMapCountEarly = ("mremap.enomem_map_count", Mremap, "mm/mremap.c check_mremap_params()"),
    MremapNoResize = ("mremap.no_resize", Mremap, "mm/mremap.c mremap_at()"),
    MremapShrinkInPlace = ("mremap.shrink_in_place", Mremap, "mm/mremap.c mremap_at()"),
    MremapExpandInPlace = ("mremap.expand_in_place", Mremap, "mm/mremap.c expand_vma()"),
    MremapExpandNoMaymove = ("mremap.enomem_expand_without_maymove", Mremap, "mm/mremap.c expand_vma()"),
    MremapFixedUnmappedSource = ("mremap.efault_source_unmapped_by_fixed", Mremap, "mm/mremap.c mremap_to()"),
    MremapDontunmapRlimitAs = ("mremap.enomem_dontunmap_rlimit_as", Mremap, "mm/mremap.c mremap_to()"),
    MremapMapCountMove = ("mremap.enomem_map_count_move", Mremap, "mm/mremap.c move_vma()"),
    MremapDontunmapComplete = ("mremap.dontunmap_keeps_source", Mremap, "mm/mremap.c dontunmap_complete()"),
    MremapMultiEndWraps = ("mremap.multi_efault_end_wraps", Mremap, "mm/mremap.c remap_move()"),
    MremapMultiGapAtStart = ("mremap.multi_efault_gap_at_start", Mremap, "mm/mremap.c remap_move()"),
    MremapMultiUffdArmed = ("mremap.multi_efault_uffd_armed", Mremap, "mm/mremap.c remap_move()"),
    MremapMultiPiece = ("mremap.multi_vma_piece", Mremap, "mm/mremap.c remap_move()"),
    MremapNoVma = ("mremap.efault_no_vma", Mremap, "mm/mremap.c check_prep_vma()"),
    MremapDuplicatePrivate = ("mremap.einval_duplicate_private", Mremap, "mm/mremap.c check_prep_vma()"),
    MremapRangeBeyondVma = ("mremap.efault_range_beyond_vma", Mremap, "mm/mremap.c check_prep_vma()"),
    MremapGrowMemlock = ("mremap.eagain_grow_rlimit_memlock", Mremap, "mm/mremap.c check_prep_vma()"),
    MremapGrowRlimitAs = ("mremap.enomem_grow_rlimit_as", Mremap, "mm/mremap.c check_prep_vma()"),
    MremapMoveFailedRevert = ("mremap.enomem_table_alloc_moves_back", Mremap, "mm/mremap.c move_vma()"),
    MremapUffdRefusesTableMove = ("mremap.uffd_refuses_table_move", Mremap, "include/linux/userfaultfd_k.h uffd_supports_page_table_move()"),
    MremapSplitHugePmd = ("mremap.split_huge_pmd_partial", Mremap, "mm/mremap.c move_page_tables()"),
    MremapRealign = ("mremap.realign_to_pmd", Mremap, "mm/mremap.c try_realign_addr()", seed),
    MremapMovePud = ("mremap.move_normal_pud", Mremap, "mm/mremap.c move_normal_pud()", seed),
    MremapMovePmd = ("mremap.move_normal_pmd", Mremap, "mm/mremap.c move_normal_pmd()", seed),
    MremapMoveHugePmd = ("mremap.move_huge_pmd", Mremap, "mm/huge_memory.c move_huge_pmd()"),
    MremapMovePtesPerPte = ("mremap.move_ptes_per_pte", Mremap, "mm/mremap.c move_ptes()", seed),
    MremapMovePtesBatch = ("mremap.move_ptes_batch", Mremap, "mm/mremap.c mremap_folio_pte_batch()", seed),
    ForkDontcopy = ("fork.dontcopy_vma_skipped", Fork, "mm/mmap.c dup_mmap()"),
    ForkWipeonfork = ("fork.wipeonfork_empty_child", Fork, "mm/mmap.c dup_mmap()"),
    ForkHugeZeroPmd = ("fork.copy_huge_zero_pmd", Fork, "mm/huge_memory.c copy_huge_pmd()"),
    ForkCopyHugePmd = ("fork.copy_huge_pmd", Fork, "mm/huge_memory.c copy_huge_pmd()"),
    ForkZeroPagePte = ("fork.copy_zero_page_pte", Fork, "mm/memory.c copy_pte_range()"),
    ForkPteBatch = ("fork.copy_pte_batch", Fork, "mm/memory.c copy_pte_range()", seed),
    ForkPtePerEntry = ("fork.copy_per_pte", Fork, "mm/memory.c copy_pte_range()", seed),
    ForkWrprotectParent = ("fork.wrprotect_parent_ptes", Fork, "mm/memory.c copy_present_ptes()"),
    FaultUffdWpHugePmd = ("uffd.wp_fault_huge_pmd", Uffd, "include/linux/userfaultfd_k.h userfaultfd_huge_pmd_wp()"),
    FaultUffdMissingHugeZero = ("uffd.missing_fault_huge_zero", Uffd, "mm/huge_memory.c do_huge_pmd_anonymous_page()"),
    FaultUffdMissingPmd = ("uffd.missing_fault_pmd", Uffd, "mm/huge_memory.c do_huge_pmd_anonymous_page()"),
    FaultUffdMissingRead = ("uffd.missing_fault_read", Uffd, "mm/memory.c do_anonymous_page()"),
    FaultUffdMissingWrite = ("uffd.missing_fault_write", Uffd, "mm/memory.c do_anonymous_page()"),
    FaultUffdWpPte = ("uffd.wp_fault_pte", Uffd, "include/linux/userfaultfd_k.h userfaultfd_pte_wp()"),
    UffdMoveWrongMm = ("uffd.move_einval_other_mm", Uffd, "fs/userfaultfd.c userfaultfd_move()"),
    UffdMoveModeInvalid = ("uffd.move_einval_mode", Uffd, "fs/userfaultfd.c userfaultfd_move()"),
    UffdMoveNoDstVma = ("uffd.move_enoent_dst_vma", Uffd, "mm/userfaultfd.c move_pages()"),
    UffdMoveVmasInvalid = ("uffd.move_einval_vmas", Uffd, "mm/userfaultfd.c validate_move_areas()"),
    UffdMoveNoSrcPmdTable = ("uffd.move_enoent_src_pmd_table", Uffd, "mm/userfaultfd.c move_pages()"),
    UffdMoveHolesAllocSrc = ("uffd.move_src_holes_alloc", Uffd, "mm/userfaultfd.c move_pages()"),
    UffdMoveDstHugePmd = ("uffd.move_eexist_dst_huge_pmd", Uffd, "mm/userfaultfd.c move_pages()"),
    UffdMoveThpNotExclusive = ("uffd.move_ebusy_thp_not_exclusive", Uffd, "mm/userfaultfd.c move_pages()"),
    UffdMoveSplitSrcPmd = ("uffd.move_splits_src_pmd", Uffd, "mm/userfaultfd.c move_pages()"),
    UffdMoveNoSrcPmd = ("uffd.move_enoent_src_pmd_none", Uffd, "mm/userfaultfd.c move_pages()"),
    UffdMoveDstNotEmpty = ("uffd.move_eexist_dst_pte", Uffd, "mm/userfaultfd.c move_pages_ptes()"),
    UffdMoveSwapPte = ("uffd.move_swap_pte", Uffd, "mm/userfaultfd.c move_pages_ptes()"),
    UffdMoveZeroPage = ("uffd.move_zero_page", Uffd, "mm/userfaultfd.c move_pages_ptes()"),
    UffdMoveNotExclusive = ("uffd.move_ebusy_not_exclusive", Uffd, "mm/userfaultfd.c move_pages_ptes()"),
    UffdMoveSplitLargeFolio = ("uffd.move_splits_large_folio", Uffd, "mm/userfaultfd.c move_pages_ptes()"),
    UffdMoveHugeZeroPmd = ("uffd.move_huge_zero_pmd", Uffd, "mm/huge_memory.c move_pages_huge_pmd()"),
    UffdMovePmd = ("uffd.move_pmd", Uffd, "mm/huge_memory.c move_pages_huge_pmd()"),
    UffdMovePerPage = ("uffd.move_per_page", Uffd, "mm/userfaultfd.c move_present_pte()", seed),
    UffdMoveBatch = ("uffd.move_batch", Uffd, "mm/userfaultfd.c move_present_ptes()", seed),
    UffdRegisterModeInvalid = ("uffd.register_einval_mode", Uffd, "fs/userfaultfd.c userfaultfd_register()"),
    UffdRegisterNoVma = ("uffd.register_einval_no_vma", Uffd, "fs/userfaultfd.c userfaultfd_register()"),
    UffdRegisterMinorAnon = ("uffd.register_einval_minor_anon", Uffd, "include/linux/userfaultfd_k.h vma_can_userfault()"),
    UffdRegisterNotMaywrite = ("uffd.register_eperm_not_maywrite", Uffd, "fs/userfaultfd.c userfaultfd_register()"),
    UffdRegisterOtherCtx = ("uffd.register_ebusy_other_context", Uffd, "fs/userfaultfd.c userfaultfd_register()"),
    UffdRegisterAlready = ("uffd.register_already_registered", Uffd, "mm/userfaultfd.c userfaultfd_register_range()"),
    UffdWpResolveWritable = ("uffd.unregister_wp_resolve_writable", Uffd, "mm/userfaultfd.c uffd_wp_range()"),
    UffdMfillNoVma = ("uffd.mfill_enoent_no_vma", Uffd, "mm/userfaultfd.c mfill_atomic()"),
    UffdMfillNotRegistered = ("uffd.mfill_enoent_not_registered", Uffd, "mm/userfaultfd.c mfill_atomic()"),
    UffdCopyWpNotWpRange = ("uffd.copy_einval_wp_without_wp_range", Uffd, "mm/userfaultfd.c mfill_atomic()"),
    UffdCopyExists = ("uffd.copy_eexist", Uffd, "mm/userfaultfd.c mfill_atomic_pte_copy()"),
    UffdZeropageExists = ("uffd.zeropage_eexist", Uffd, "mm/userfaultfd.c mfill_atomic_pte_zeropage()"),
    GuardInstallInvalidVma = ("guard.install_einval_vma", Guard, "mm/madvise.c madvise_guard_install()"),
    GuardInstallZapsPopulated = ("guard.install_zaps_populated", Guard, "mm/madvise.c madvise_guard_install()"),
    GuardInstallNoTable = ("guard.install_enomem_table", Guard, "mm/madvise.c madvise_guard_install()"),
    GuardRemoveInvalidVma = ("guard.remove_einval_vma", Guard, "mm/madvise.c madvise_guard_remove()"),
    GuardRemove = ("guard.remove_drops_markers", Guard, "mm/madvise.c madvise_guard_remove()"),
    GuardMovedByMremap = ("guard.markers_move_with_mremap", Guard, "mm/mremap.c move_ptes()"),
    FaultGuardSegv = ("guard.fault_segv", Guard, "mm/memory.c handle_pte_marker()"),
    ForkCopyGuardMarker = ("guard.fork_copies_marker", Guard, "mm/memory.c copy_pte_marker()"),
    MremapGrowLocked = ("mlock.mremap_grow_locked_populates", Mlock, "mm/mremap.c check_prep_vma()"),
    MprotectLockedWritablePopulates = ("mlock.mprotect_locked_writable_populates", Mlock, "mm/mprotect.c mprotect_fixup()"),
    Mlock2FlagsInvalid = ("mlock.mlock2_einval_flags", Mlock, "mm/mlock.c SYSCALL_DEFINE3(mlock2)"),
    MlockCannot = ("mlock.eperm_cannot_mlock", Mlock, "mm/mlock.c can_do_mlock()"),
    MlockOverLimit = ("mlock.enomem_rlimit_memlock", Mlock, "mm/mlock.c do_mlock()"),
    MlockRangeWraps = ("mlock.einval_range_wraps", Mlock, "mm/mlock.c apply_vma_lock_flags()"),
    MlockNoVma = ("mlock.enomem_no_vma", Mlock, "mm/mlock.c apply_vma_lock_flags()"),
    MlockHole = ("mlock.enomem_hole", Mlock, "mm/mlock.c apply_vma_lock_flags()"),
    MlockPastLastVma = ("mlock.enomem_past_last_vma", Mlock, "mm/mlock.c apply_vma_lock_flags()"),
    MlockFolioWalk = ("mlock.folio_walk", Mlock, "mm/mlock.c mlock_pte_range()"),
    MlockWriteMarksDirty = ("mlock.populate_write_marks_dirty", Mlock, "mm/mlock.c mlock_pte_range()"),
    MlockSplitMapCount = ("mlock.enomem_split_map_count", Mlock, "mm/mlock.c mlock_fixup()"),
    MlockPopulateNoAccess = ("mlock.populate_efault_no_access", Mlock, "mm/gup.c __mm_populate()"),
    FaultLockedNewFolio = ("mlock.fault_mlocks_new_folio", Mlock, "mm/mlock.c mlock_new_folio()"),
    ZapLockedThpDrains = ("mlock.zap_locked_thp_drains", Mlock, "mm/memory.c zap_pmd_range()"),
    ZapMunlocksFolio = ("mlock.zap_munlocks_folio", Mlock, "mm/mlock.c munlock_vma_folio()"),
    MremapSealed = ("mseal.mremap_eperm_sealed", Mseal, "mm/mremap.c check_prep_vma()"),
    MprotectSealed = ("mseal.mprotect_eperm_sealed", Mseal, "mm/mprotect.c mprotect_fixup()"),
    MunmapSealedFirst = ("mseal.munmap_eperm_sealed_first", Mseal, "mm/vma.c vms_gather_munmap_vmas()"),
    MunmapSealed = ("mseal.munmap_eperm_sealed", Mseal, "mm/vma.c vms_gather_munmap_vmas()"),
    MadviseSealed = ("mseal.madvise_eperm_sealed_discard", Mseal, "mm/madvise.c can_madvise_modify()"),
    MsealFlagsOrAddr = ("mseal.einval_flags_or_addr", Mseal, "mm/mseal.c do_mseal()"),
    MsealWraps = ("mseal.einval_range_wraps", Mseal, "mm/mseal.c do_mseal()"),
    MsealLenZero = ("mseal.len_zero_succeeds", Mseal, "mm/mseal.c do_mseal()"),
    MsealHole = ("mseal.enomem_hole", Mseal, "mm/mseal.c do_mseal()"),
    MsealPastLastVma = ("mseal.enomem_past_last_vma", Mseal, "mm/mseal.c do_mseal()"),
    MsealApply = ("mseal.seals_vma", Mseal, "mm/mseal.c do_mseal()"),
    MadvisePageoutLocked = ("swap.pageout_einval_locked", Swap, "mm/madvise.c can_madv_lru_vma()"),
    FaultSwapInRead = ("swap.swapin_reads_slot", Swap, "mm/memory.c do_swap_page()"),
    FaultSwapInWritable = ("swap.swapin_maps_writable", Swap, "mm/memory.c do_swap_page()"),
    FaultSwapFreesSlot = ("swap.swapin_frees_slot", Swap, "mm/memory.c should_try_to_free_swap()"),
    ForkCopySwapPte = ("swap.fork_copies_swap_pte", Swap, "mm/memory.c copy_nonpresent_pte()"),
    MremapMoveSwapPte = ("swap.mremap_moves_swap_pte", Swap, "mm/mremap.c move_ptes()"),
    UffdMoveSwapNotExclusive = ("swap.uffd_move_ebusy_shared_swap_pte", Swap, "mm/userfaultfd.c move_pages_pte()"),
    SwapPageoutSkipsSharedThp = ("swap.pageout_skips_shared_pmd_thp", Swap, "mm/madvise.c madvise_cold_or_pageout_pte_range()"),
    SwapColdKeepsWholeThp = ("swap.cold_keeps_whole_pmd_thp", Swap, "mm/madvise.c madvise_cold_or_pageout_pte_range()"),
    SwapPageoutSplitsPmdThp = ("swap.pageout_splits_pmd_thp", Swap, "mm/madvise.c madvise_cold_or_pageout_pte_range()"),
    SwapPageoutSkipsSharedLarge = ("swap.pageout_skips_shared_large_folio", Swap, "mm/madvise.c madvise_cold_or_pageout_pte_range()"),
    SwapPageoutSplitsLarge = ("swap.pageout_splits_large_folio", Swap, "mm/vmscan.c shrink_folio_list()"),
    SwapPageoutSkipsSharedSmall = ("swap.pageout_skips_shared_or_cold_small", Swap, "mm/madvise.c madvise_cold_or_pageout_pte_range()"),
    SwapLazyfreeDiscarded = ("swap.lazyfree_clean_discarded", Swap, "mm/vmscan.c shrink_folio_list()"),
    SwapLazyfreeRedirtied = ("swap.lazyfree_redirtied_kept", Swap, "mm/vmscan.c shrink_folio_list()"),
    SwapLazyfreePmdSplitKept = ("swap.lazyfree_pmd_split_kept", Swap, "mm/vmscan.c shrink_folio_list()"),
    SwapOutNoSlot = ("swap.out_no_free_slot", Swap, "mm/swapfile.c folio_alloc_swap()"),
    SwapOutCachedSlot = ("swap.out_reuses_swap_cache_slot", Swap, "mm/vmscan.c shrink_folio_list()"),
    SwapOutWrite = ("swap.out_writes_slot", Swap, "mm/vmscan.c shrink_folio_list()"),
    SwapOnBlockdevNoHeaderPage = ("swap.eio_blockdev_shorter_than_a_page", Swap, "mm/swapfile.c SYSCALL_DEFINE2(swapon)"),
    SwapOutLargeWhole = ("swap.blockdev_large_folio_out_whole", Swap, "mm/vmscan.c shrink_folio_list()"),
    SwapUnmapLargePerPte = ("swap.unmap_large_folio_per_pte", Swap, "mm/rmap.c try_to_unmap_one()", seed),
    SwapUnmapLargeBatched = ("swap.unmap_large_folio_batched", Swap, "mm/rmap.c try_to_unmap_one()", seed),
    SwapOutZeroFolio = ("swap.zero_filled_folio_not_written", Swap, "mm/page_io.c swap_writeout()"),
    FaultSwapInLargeWhole = ("swap.swapin_maps_cached_large_folio_whole", Swap, "mm/memory.c do_swap_page()"),
    FaultSwapInLargeOnePage = ("swap.swapin_maps_one_page_of_cached_large_folio", Swap, "mm/memory.c do_swap_page()"),
    FaultSwapInLargeKeepsCache = ("swap.read_swapin_keeps_large_folio_cached", Swap, "mm/memory.c do_swap_page()"),
    FaultWpLargeFreesSwap = ("swap.wp_reuse_frees_large_swapcache", Swap, "mm/memory.c __wp_can_reuse_large_anon_folio()"),
    SwapOutCleanCachedLargeFreed = ("swap.out_clean_cached_large_folio_freed", Swap, "mm/vmscan.c shrink_folio_list()"),
    MadviseFreeFreesLargeSwap = ("swap.madv_free_frees_large_swapcache", Swap, "mm/madvise.c madvise_free_pte_range()"),
    SwapOffDropsLargeCache = ("swap.swapoff_drops_cached_large_folio", Swap, "mm/swapfile.c try_to_unuse()"),
    ZapFreesLargeSwapCache = ("swap.zap_frees_unmapped_large_swapcache", Swap, "mm/swap_state.c free_swap_cache()"),
    UffdMoveSwapLargeCache = ("swap.uffd_move_ebusy_large_swapcache", Swap, "mm/userfaultfd.c move_pages_pte()"),
    CollapseEinvalVma = ("collapse.einval_vma", Collapse, "mm/khugepaged.c madvise_collapse()"),
    CollapseSucceed = ("collapse.scan_succeeds_collapses", Collapse, "mm/khugepaged.c madvise_collapse()"),
    CollapsePmdMapped = ("collapse.already_pmd_mapped", Collapse, "mm/khugepaged.c madvise_collapse()"),
    CollapsePmdNone = ("collapse.scan_pmd_none", Collapse, "mm/khugepaged.c madvise_collapse()"),
    CollapsePageCount = ("collapse.eagain_page_count", Collapse, "mm/khugepaged.c madvise_collapse()"),
    CollapsePteUffdWp = ("collapse.scan_pte_uffd_wp", Collapse, "mm/khugepaged.c madvise_collapse()"),
    CollapseExceedNonePte = ("collapse.ebusy_exceed_none_pte", Collapse, "mm/khugepaged.c madvise_collapse()"),
    CollapseAllocFail = ("collapse.enomem_alloc", Collapse, "mm/khugepaged.c madvise_collapse()"),
    CollapseFail = ("collapse.scan_fail", Collapse, "mm/khugepaged.c madvise_collapse()"),
    ZapSplitHugeZeroPmd = ("zap.split_huge_zero_pmd", Zap, "mm/huge_memory.c __split_huge_zero_page_pmd()"),
    ZapSplitHugePmd = ("zap.split_huge_pmd", Zap, "mm/huge_memory.c __split_huge_pmd_locked()"),
    ZapHugePmd = ("zap.huge_pmd", Zap, "mm/memory.c zap_pmd_range()"),
    ZapSplitPartialHugePmd = ("zap.partial_huge_pmd_split", Zap, "mm/memory.c zap_pmd_range()"),
    ZapPtReclaim = ("zap.pt_reclaim_frees_empty_table", Zap, "mm/pt_reclaim.c try_to_free_pte()"),
    ZapHugeZeroPmd = ("zap.huge_zero_pmd", Zap, "mm/huge_memory.c zap_huge_pmd()"),
    ZapPteBatch = ("zap.present_pte_batch", Zap, "mm/memory.c zap_present_ptes()"),
    ZapFreePgtablesGathered = ("zap.free_pgtables_gathers_close_vmas", Zap, "mm/memory.c free_pgtables()"),
    SplitLargeFolio = ("zap.split_large_folio", Zap, "mm/huge_memory.c split_folio()"),
    ContpteUnfold = ("contpte.unfold", Contpte, "arch/arm64/mm/contpte.c contpte_try_unfold()"),
    ContpteUnfoldPartialEnd = ("contpte.unfold_partial_end", Contpte, "arch/arm64/mm/contpte.c contpte_try_unfold_partial()"),
    ContpteFold = ("contpte.fold", Contpte, "arch/arm64/mm/contpte.c __contpte_try_fold()"),
    ContptePaint = ("contpte.set_ptes_paints_cont", Contpte, "arch/arm64/mm/contpte.c contpte_set_ptes()"),
    ContpteWrprotectBatch = ("contpte.wrprotect_batch_keeps_folded", Contpte, "arch/arm64/mm/contpte.c contpte_wrprotect_ptes()"),
}

impl Rule {
    pub fn name(self) -> &'static str {
        self.info().name
    }
    pub fn from_name(s: &str) -> Option<Rule> {
        Self::ALL.iter().copied().find(|r| r.name() == s)
    }
}

/// Which of `64 × W` counters were ever changed: a bit per counter, set
/// by every change and never cleared (a clone copies it). A counter whose
/// bit is clear still holds its initial zero, so a whole-stretch step's
/// `add_since` ([`crate::core::hw::HwSink::add_since`],
/// [`RuleCounts::add_since`]) need only visit the set bits — the few counters a workload
/// touches, not every counter.
#[derive(Clone, Debug)]
pub(crate) struct Touched<const W: usize>([Cell<u64>; W]);

impl<const W: usize> Default for Touched<W> {
    fn default() -> Self {
        Touched(std::array::from_fn(|_| Cell::new(0)))
    }
}

impl<const W: usize> Touched<W> {
    /// Counter `i` changed. The word is only read when the bit is set
    /// already (every count after a counter's first): no store, so the
    /// next counter's read of the same word never waits on one — a
    /// store here that a following wider load (two adjacent bit sets
    /// merged into one 16-byte `or`) cannot take forwarded stalls the
    /// pipeline (issue 14, the uffd seeds' eleventh session).
    #[inline]
    pub(crate) fn set(&self, i: usize) {
        let w = &self.0[i / 64];
        let bit = 1 << (i % 64);
        if w.get() & bit == 0 {
            Self::set_cold(w, bit);
        }
    }
    #[cold]
    #[inline(never)]
    fn set_cold(w: &Cell<u64>, bit: u64) {
        w.set(w.get() | bit);
    }
    /// The set as plain words (a tally's copy of it: [`Touched::in_words`]).
    #[inline]
    pub(crate) fn words(&self) -> [u64; W] {
        std::array::from_fn(|k| self.0[k].get())
    }
    /// Whether counter `i` is in the set `words` (a [`Touched::words`] copy).
    #[inline]
    pub(crate) fn in_words(words: &[u64; W], i: usize) -> bool {
        words[i / 64] >> (i % 64) & 1 != 0
    }
    /// Copy into `out` the values of the counters in this set only (the
    /// others are zero: their slots in `out` are left as they are, and a
    /// reader of `out` takes them as zero through [`Touched::in_words`] of
    /// the words returned). A tally written over an older one in place
    /// copies the few counters a workload touches, not every counter
    /// (issue 14, mremap-batch-64k's twelfth session).
    #[inline]
    pub(crate) fn copy_touched<T: Copy>(&self, from: &[Cell<T>], out: &mut [T]) -> [u64; W] {
        let words = self.words();
        for (k, &w) in words.iter().enumerate() {
            let mut bits = w;
            while bits != 0 {
                let i = k * 64 + bits.trailing_zeros() as usize;
                out[i] = from[i].get();
                bits &= bits - 1;
            }
        }
        words
    }
    /// Each counter ever changed, in index order.
    #[inline]
    pub(crate) fn each(&self, mut f: impl FnMut(usize)) {
        for (k, w) in self.0.iter().enumerate() {
            let mut bits = w.get();
            while bits != 0 {
                f(k * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
    }
}

/// Words of a [`Touched`] set over `n` counters.
pub(crate) const fn touched_words(n: usize) -> usize {
    n.div_ceil(64)
}

/// The rules ever hit, as plain words ([`RuleCounts::touched`]).
pub type RulesTouched = [u64; touched_words(Rule::COUNT)];

/// One hit counter per rule (kept in each [`crate::core::hw::HwSink`]).
/// The second field is the set of rules ever hit (a sparse
/// [`RuleCounts::add_since`]; see [`crate::core::hw::HwSink::add_since`]).
#[derive(Clone)]
pub struct RuleCounts(
    [Cell<u32>; Rule::COUNT],
    Touched<{ touched_words(Rule::COUNT) }>,
);

impl Default for RuleCounts {
    fn default() -> Self {
        RuleCounts(std::array::from_fn(|_| Cell::new(0)), Touched::default())
    }
}

impl RuleCounts {
    #[inline]
    pub fn hit(&self, r: Rule) {
        self.hit_n(r, 1);
    }
    /// `n` hits of `r` at once (a per-segment loop's run).
    pub fn hit_n(&self, r: Rule, n: u32) {
        let c = &self.0[r as usize];
        c.set(c.get().saturating_add(n));
        self.1.set(r as usize);
    }
    /// The counts, for reports (never for a decision of the model).
    pub fn coverage(&self) -> Coverage {
        let mut out = Coverage::default();
        out.add_counts(self);
        out
    }
    /// Every count, in rule order (for [`RuleCounts::add_since`]).
    pub fn tally(&self) -> [u32; Rule::COUNT] {
        std::array::from_fn(|i| self.0[i].get())
    }
    /// [`RuleCounts::tally`] written over `out` in place, the rules ever
    /// hit only: the others' slots keep what they held, and the set
    /// returned (the rules hit so far) tells [`RuleCounts::add_since`] to
    /// read them as zero.
    pub fn tally_into(&self, out: &mut [u32; Rule::COUNT]) -> RulesTouched {
        self.1.copy_touched(&self.0, out)
    }
    /// The rules ever hit, as words (a full [`RuleCounts::tally`]'s set).
    pub fn touched(&self) -> RulesTouched {
        self.1.words()
    }
    /// Add `k` times what was hit since `before` (a [`RuleCounts::tally`]
    /// or [`RuleCounts::tally_into`], with the rules hit then,
    /// `before_hit`): the hits of one step repeated `k` times more.
    pub fn add_since(&self, before: &[u32; Rule::COUNT], before_hit: &RulesTouched, k: u32) {
        // Only the rules ever hit (the others are zero now and were then);
        // a rule not hit at the tally was zero then, whatever its slot in
        // `before` holds.
        self.1.each(|i| {
            let c = &self.0[i];
            let b = match Touched::in_words(before_hit, i) {
                true => before[i],
                false => 0,
            };
            let d = c.get() - b;
            if d > 0 {
                c.set(c.get().saturating_add(d.saturating_mul(k)));
            }
        });
    }
    /// Add every count of `o` (an exiting process's counts retire here).
    pub fn retire(&self, o: &RuleCounts) {
        o.1.each(|i| {
            let c = &self.0[i];
            c.set(c.get().saturating_add(o.0[i].get()));
            self.1.set(i);
        });
    }
}

/// Hits per rule: a plain value to add up, compare and report.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Coverage(pub [u64; Rule::COUNT]);

impl Default for Coverage {
    fn default() -> Self {
        Coverage([0; Rule::COUNT])
    }
}

impl Coverage {
    pub fn get(&self, r: Rule) -> u64 {
        self.0[r as usize]
    }
    pub fn add(&mut self, o: &Coverage) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a += b;
        }
    }
    fn add_counts(&mut self, o: &RuleCounts) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a += u64::from(b.get());
        }
    }
    /// Rules hit at least once.
    pub fn hit(&self) -> usize {
        self.0.iter().filter(|&&n| n > 0).count()
    }
    /// Rules never hit.
    pub fn missed(&self) -> impl Iterator<Item = Rule> + '_ {
        Rule::ALL.iter().copied().filter(|&r| self.get(r) == 0)
    }
    /// Rules hit here and not in `base` (what a scenario adds).
    pub fn new_over<'a>(&'a self, base: &'a Coverage) -> impl Iterator<Item = Rule> + 'a {
        Rule::ALL
            .iter()
            .copied()
            .filter(move |&r| self.get(r) > 0 && base.get(r) == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for &r in Rule::ALL {
            let i = r.info();
            assert_eq!(i.rule, r);
            assert!(seen.insert(i.name), "duplicate rule name {}", i.name);
            let (fam, what) = i.name.split_once('.').expect("family.what");
            assert_eq!(
                fam,
                i.family.name(),
                "{} is in family {:?}",
                i.name,
                i.family
            );
            assert!(!what.is_empty());
            assert!(
                i.kernel.ends_with(')'),
                "{}: cite a kernel function",
                i.name
            );
            assert_eq!(Rule::from_name(i.name), Some(r));
        }
    }

    #[test]
    fn counts_add_retire_and_report() {
        let a = RuleCounts::default();
        let b = RuleCounts::default();
        let r0 = Rule::ALL[0];
        let r1 = Rule::ALL[1];
        a.hit(r0);
        a.hit(r0);
        b.hit(r1);
        a.retire(&b);
        let c = a.coverage();
        assert_eq!(c.get(r0), 2);
        assert_eq!(c.get(r1), 1);
        assert_eq!(c.hit(), 2);
        assert_eq!(c.missed().count(), Rule::COUNT - 2);
        let base = b.coverage();
        assert_eq!(c.new_over(&base).collect::<Vec<_>>(), vec![r0]);
    }
}
