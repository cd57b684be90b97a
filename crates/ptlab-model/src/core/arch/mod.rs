//! The architecture layer: an [`Arch`] is a policy that mirrors the
//! kernel's page-table hooks.
//!
//! * the descriptor codec: how an arch-neutral entry is encoded in a real
//!   descriptor (`encode_leaf`, `decode`, `encode_swap`, ...);
//! * the PTE batch hooks the seed changes call — `ptep_get`, `set_ptes`,
//!   `get_and_clear_full_ptes`, `ptep_get_and_clear`, `wrprotect_ptes`,
//!   `ptep_modify`, `modify_prot_start_ptes`/`modify_prot_commit_ptes`,
//!   `pte_batch_hint` — each with the generic per-entry default of
//!   include/linux/pgtable.h ([`generic`]), which x86-64 keeps and arm64
//!   overrides with its contpte versions ([`arm64::contpte`], after
//!   arch/arm64/mm/contpte.c);
//! * the TLB flush recipe for a range or the whole mm (thresholds,
//!   FEAT_TLBIRANGE, BBML2, KPTI) and `pte_needs_flush`.
//!
//! The hooks work on one PTE table through a [`PteTable`] view and count
//! their own hardware events there, so an operation in mm/*.c style is a
//! sequence of hook calls and its cost is counted in one place.
//!
//! Both modelled architectures use 4 KiB pages, 4 levels and 512 eight-byte
//! entries per table, so the table structure is shared ([`crate::core::pgtable`]).

pub mod arm64;
pub mod generic;
mod pte_table;
pub mod x86_64;

pub use arm64::Arm64;
pub(crate) use pte_table::TableView;
pub use pte_table::{FolioSpan, PteRef, PteTable};
pub use x86_64::X86_64;

use crate::core::addr::Pfn;
use crate::core::hw::{HwSink, KCall};
use bitflags::bitflags;

/// The call a `get_and_clear_full_ptes(nr)` hook counts: `nr == 1` is
/// `ptep_get_and_clear()`.
/// The present entries a `get_and_clear_full_ptes()` batch cleared
/// ([`Arch::get_and_clear_full_ptes_batch`]), by table index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClearedPtes {
    /// `nr` entries from index `i`, entry `k` being `first` advanced by
    /// `k × frames` frames (the same bits): a run of present entries.
    Run {
        i: usize,
        nr: usize,
        first: Leaf,
        frames: u64,
    },
    /// Each present entry, in index order.
    List(Vec<(usize, Leaf)>),
}

impl ClearedPtes {
    /// How many present entries were cleared.
    pub fn len(&self) -> usize {
        match self {
            ClearedPtes::Run { nr, .. } => *nr,
            ClearedPtes::List(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `k`-th cleared entry (index, old leaf).
    pub fn get(&self, k: usize) -> Option<(usize, Leaf)> {
        match self {
            ClearedPtes::Run {
                i,
                nr,
                first,
                frames,
            } => (k < *nr).then(|| {
                let pfn = first.pfn.add(k as u64 * frames);
                (i + k, Leaf { pfn, ..*first })
            }),
            ClearedPtes::List(v) => v.get(k).copied(),
        }
    }
    /// Entry by entry.
    pub fn into_vec(self) -> Vec<(usize, Leaf)> {
        match self {
            ClearedPtes::List(v) => v,
            run => (0..run.len()).filter_map(|k| run.get(k)).collect(),
        }
    }
}

pub(crate) fn clear_call(nr: usize) -> KCall {
    if nr == 1 {
        KCall::PtepGetAndClear
    } else {
        KCall::GetAndClearFullPtes
    }
}
use serde::{Deserialize, Serialize};

bitflags! {
    /// Arch-neutral attributes of a present leaf entry.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
    pub struct LeafFlags: u16 {
        /// Writable (x86 RW; arm64 PTE_WRITE/DBM with AP[2] managed by dirty state).
        const WRITE = 1 << 0;
        /// Dirty (x86 D; arm64 hardware-dirty or PTE_DIRTY).
        const DIRTY = 1 << 1;
        /// Accessed (x86 A; arm64 AF).
        const YOUNG = 1 << 2;
        /// `pte_special()`: no struct page behind it (the 4 KiB zero page).
        const SPECIAL = 1 << 3;
        /// Soft-dirty (x86 only; arm64 has no soft-dirty bit).
        const SOFT_DIRTY = 1 << 4;
        /// userfaultfd write-protect marker.
        const UFFD_WP = 1 << 5;
        /// arm64 contiguous hint (PTE_CONT); never set on x86.
        const CONT = 1 << 6;
        /// Executable by user space.
        const EXEC = 1 << 7;
        /// PROT_NONE: present to the kernel, not accessible by hardware.
        const PROTNONE = 1 << 8;
    }
}

/// A present leaf (PTE or PMD block) in arch-neutral form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Leaf {
    pub pfn: Pfn,
    pub flags: LeafFlags,
}

impl Leaf {
    pub fn write(&self) -> bool {
        self.flags.contains(LeafFlags::WRITE)
    }
    /// arm64 pte_valid_cont(): CONT on a valid entry. A PROT_NONE entry is
    /// present but not valid, so its CONT bit is ignored by the contpte layer.
    pub fn valid_cont(&self) -> bool {
        self.flags.contains(LeafFlags::CONT) && !self.flags.contains(LeafFlags::PROTNONE)
    }
    /// Attributes that must agree for entries to share a contiguous block
    /// (young and dirty are gathered across the block, so they are ignored).
    /// Linux: arch/arm64/mm/contpte.c __contpte_try_fold() compares pte_pgprot
    /// after pte_mkold(pte_mkclean()).
    pub fn fold_key(&self) -> LeafFlags {
        self.flags - (LeafFlags::YOUNG | LeafFlags::DIRTY | LeafFlags::CONT)
    }
}

/// A decoded entry at any level.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Entry {
    None,
    /// Points to the next-level table, held in frame `Pfn`.
    Table(Pfn),
    /// A present leaf: a PTE at level 1, a PMD block at level 2.
    Leaf(Leaf),
    /// A swap entry (non-present PTE, level 1 only).
    Swap(SwapPte),
    /// A PTE marker (non-present PTE, level 1 only): a guard region page
    /// (MADV_GUARD_INSTALL) or a uffd-wp marker.
    Marker(PteMarker),
}

/// The swap type that holds PTE markers (`SWP_PTE_MARKER` = MAX_SWAPFILES
/// + the hwpoison, migration and device-private types: 31 with all of them
/// configured, as on x86-64 and arm64 distribution kernels).
/// Linux: include/linux/swap.h.
pub const SWP_PTE_MARKER: u8 = 31;

/// A PTE marker's bits (`pte_marker`), stored as the offset of a swap entry
/// of type [`SWP_PTE_MARKER`]. Linux: include/linux/swapops.h
/// make_pte_marker(), PTE_MARKER_UFFD_WP, PTE_MARKER_GUARD.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct PteMarker(pub u8);

impl PteMarker {
    /// `PTE_MARKER_UFFD_WP` (bit 0).
    pub const UFFD_WP: PteMarker = PteMarker(1 << 0);
    /// `PTE_MARKER_GUARD` (bit 2).
    pub const GUARD: PteMarker = PteMarker(1 << 2);

    pub fn is_guard(self) -> bool {
        self.0 & Self::GUARD.0 != 0
    }

    /// The swap entry that encodes this marker.
    pub fn swap_entry(self) -> SwapPte {
        SwapPte {
            ty: SWP_PTE_MARKER,
            offset: self.0 as u64,
            exclusive: false,
            soft_dirty: false,
            uffd_wp: false,
        }
    }
}

/// A non-present, non-none level-1 entry: a marker when its swap type is
/// [`SWP_PTE_MARKER`], else a swap entry. Linux: is_pte_marker_entry().
pub fn nonpresent_entry(s: SwapPte) -> Entry {
    if s.ty == SWP_PTE_MARKER {
        Entry::Marker(PteMarker(s.offset as u8))
    } else {
        Entry::Swap(s)
    }
}

/// A swap PTE in arch-neutral form: the swap entry (`swp_entry_t`: type and
/// offset) plus the three software bits a swap PTE keeps. Linux:
/// include/linux/swapops.h; arch/x86/include/asm/pgtable_64.h and
/// arch/arm64/include/asm/pgtable.h (`__swp_entry`, `_PAGE_SWP_*`,
/// `PTE_SWP_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct SwapPte {
    /// Swap device index (`swp_type()`, 5 bits).
    pub ty: u8,
    /// Slot in the device (`swp_offset()`); slot 0 holds the header.
    pub offset: u64,
    /// `pte_swp_exclusive()`: the page was PageAnonExclusive when unmapped.
    pub exclusive: bool,
    /// `pte_swp_soft_dirty()` (x86 only).
    pub soft_dirty: bool,
    /// `pte_swp_uffd_wp()`.
    pub uffd_wp: bool,
}

/// Which architecture is modelled.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ArchKind {
    X86_64,
    Arm64,
}

impl ArchKind {
    pub const ALL: [ArchKind; 2] = [ArchKind::X86_64, ArchKind::Arm64];

    pub fn from_name(s: &str) -> Option<ArchKind> {
        match s {
            "x86_64" | "x86-64" | "amd64" => Some(ArchKind::X86_64),
            "arm64" | "aarch64" => Some(ArchKind::Arm64),
            _ => None,
        }
    }
    pub const fn name(self) -> &'static str {
        match self {
            ArchKind::X86_64 => "x86_64",
            ArchKind::Arm64 => "arm64",
        }
    }
    /// The encoder for this architecture.
    pub fn ops(self) -> &'static dyn Arch {
        match self {
            ArchKind::X86_64 => &X86_64,
            ArchKind::Arm64 => &Arm64,
        }
    }
}

/// The raw layout of an arch's present PTEs ([`Arch::raw_pte`]): what
/// the kernel's own helpers rely on when they step or test descriptors
/// in place — `pte_advance_pfn()` adds `1 << PFN_PTE_SHIFT`
/// (include/linux/pgtable.h), `pte_wrprotect()`, `pte_mkold()` and
/// friends clear one bit. Every present descriptor the model stores comes
/// from [`Arch::encode_leaf`], so two present descriptors decode to equal
/// attributes exactly when their bits outside the PFN field are equal, and
/// those bits depend on the attributes only (not on the frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPte {
    /// The PFN field.
    pub pfn_mask: u64,
    /// Its shift (`PFN_PTE_SHIFT`): consecutive frames differ by
    /// `1 << pfn_shift` (`pte_advance_pfn()`).
    pub pfn_shift: u32,
    /// `pte_present()`: any of these bits (PROT_NONE entries included).
    pub present: u64,
    pub write: u64,
    pub young: u64,
    pub dirty: u64,
    pub soft_dirty: u64,
    pub uffd_wp: u64,
    pub special: u64,
}

impl RawPte {
    /// The bits standing for those of `f` among write, young, dirty,
    /// soft-dirty, uffd-wp and special (other flags: none).
    pub fn bits(&self, f: LeafFlags) -> u64 {
        let mut b = 0;
        for (flag, bit) in [
            (LeafFlags::WRITE, self.write),
            (LeafFlags::YOUNG, self.young),
            (LeafFlags::DIRTY, self.dirty),
            (LeafFlags::SOFT_DIRTY, self.soft_dirty),
            (LeafFlags::UFFD_WP, self.uffd_wp),
            (LeafFlags::SPECIAL, self.special),
        ] {
            if f.contains(flag) {
                b |= bit;
            }
        }
        b
    }
    /// `pte_present()` of a raw descriptor.
    #[inline]
    pub fn is_present(&self, raw: u64) -> bool {
        raw & self.present != 0
    }
    /// The frame a present descriptor maps.
    #[inline]
    pub fn pfn(&self, raw: u64) -> u64 {
        (raw & self.pfn_mask) >> self.pfn_shift
    }
    /// `pte_advance_pfn(raw, nr)`.
    #[inline]
    pub fn advance(&self, raw: u64, nr: u64) -> u64 {
        raw + (nr << self.pfn_shift)
    }
}

/// One architecture's page-table policy: the descriptor codec (level 1 =
/// PTE, 2 = PMD, 3 = PUD, 4 = PGD), the PTE hooks and the TLB recipe.
pub trait Arch: Sync {
    fn kind(&self) -> ArchKind;
    /// Whether this arch uses every generic PTE hook (`ptep_get`,
    /// `set_ptes`, `wrprotect_ptes`, `ptep_modify`, the
    /// `modify_prot_*_ptes` pair: [`generic`]), so a per-segment loop may
    /// store entries itself and add the hooks' counts in one step.
    fn generic_pte_hooks(&self) -> bool {
        false
    }
    /// The raw layout of present level-1 descriptors, when the PFN is one
    /// field and each attribute a bit of its own, so that a per-segment
    /// loop may compare, advance and change descriptors without decoding
    /// them ([`RawPte`]). `None`: decode and encode each entry.
    fn raw_pte(&self) -> Option<&'static RawPte> {
        None
    }
    /// Encode a leaf at `level` (1 = page, 2 = PMD block).
    fn encode_leaf(&self, level: u8, leaf: Leaf) -> u64;
    /// Encode a table descriptor at `level` (2..=4) pointing at `table`.
    fn encode_table(&self, level: u8, table: Pfn) -> u64;
    /// Decode a raw descriptor at `level`. A zero descriptor decodes as `Entry::None`.
    fn decode(&self, level: u8, raw: u64) -> Entry;
    /// `pte_present()` of a raw level-1 descriptor (a leaf, PROT_NONE
    /// included), without decoding it: what `decode(1, raw)` would return
    /// as `Entry::Leaf`. A walker looking for swap entries and markers
    /// skips present entries with it.
    fn pte_present_raw(&self, raw: u64) -> bool;
    /// Whether any of `raw` is present ([`Arch::pte_present_raw`]); one
    /// call per slice of entries (the check inlines in each arch).
    fn any_present_raw(&self, raw: &[u64]) -> bool {
        raw.iter().any(|&r| r != 0 && self.pte_present_raw(r))
    }
    /// Whether any of `raw` is a swap entry or marker (not none, not present).
    fn any_nonpresent_raw(&self, raw: &[u64]) -> bool {
        raw.iter().any(|&r| r != 0 && !self.pte_present_raw(r))
    }
    /// Entries per contiguous-PTE block (16 on arm64 with 4 KiB pages), or
    /// `None` if the architecture has no contiguous hint the kernel manages.
    /// Linux: arch/arm64/include/asm/pgtable-hwdef.h CONT_PTES.
    fn cont_ptes(&self) -> Option<usize>;
    /// Encode a swap PTE (level 1). Linux: `__swp_entry()` +
    /// `__swp_entry_to_pte()` and the `pte_swp_mk*()` bits.
    fn encode_swap(&self, s: SwapPte) -> u64;
    /// Decode a non-zero, non-present level-1 descriptor as a swap PTE.
    fn decode_swap(&self, raw: u64) -> SwapPte;
    /// Encode a PTE marker (level 1): the swap entry of type
    /// `SWP_PTE_MARKER` holding the marker bits. Linux: make_pte_marker().
    fn encode_marker(&self, m: PteMarker) -> u64 {
        self.encode_swap(m.swap_entry())
    }

    // ----- PTE hooks (include/linux/pgtable.h defaults in `generic`) -----

    /// `ptep_get()`: read entry `i`, counting its loads.
    fn ptep_get(&self, t: &PteRef<'_>, i: usize) -> Entry {
        t.hw.call(KCall::PtepGet);
        generic::ptep_get(t, i)
    }
    /// `set_ptes()`: map `nr` consecutive pages from `leaf.pfn` at entries
    /// `i..i + nr` (all none before when `nr > 1`; `nr == 1` is
    /// `set_pte_at()`, which may replace a present entry).
    fn set_ptes(
        &self,
        t: &mut PteTable<'_>,
        i: usize,
        leaf: Leaf,
        nr: usize,
        folios: &dyn FolioSpan,
    ) {
        let _ = folios; // only arm64's fold test looks at folios
        t.hw.call(KCall::SetPtes);
        generic::set_ptes(t, i, leaf, nr)
    }
    /// `set_pte_at()` of a non-present entry (`raw`: a swap entry or a
    /// marker, encoded by this arch) over a none entry: one store.
    fn set_pte_at_nonpresent(&self, t: &mut PteTable<'_>, i: usize, raw: u64) {
        t.hw.call(KCall::SetPtes);
        generic::set_pte_at_nonpresent(t, i, raw)
    }
    /// `ptep_get_and_clear()` of a non-present entry: one atomic exchange.
    fn ptep_get_and_clear_nonpresent(&self, t: &mut PteTable<'_>, i: usize) {
        t.hw.call(KCall::PtepGetAndClear);
        generic::ptep_get_and_clear_nonpresent(t, i)
    }
    /// `get_and_clear_full_ptes()`: clear `nr` entries from `i` as one
    /// batch, returning the present ones `(index, old)`. `nr == 1` is
    /// `ptep_get_and_clear()`.
    fn get_and_clear_full_ptes(
        &self,
        t: &mut PteTable<'_>,
        i: usize,
        nr: usize,
    ) -> Vec<(usize, Leaf)> {
        t.hw.call(clear_call(nr));
        generic::get_and_clear_full_ptes(t, i, nr)
    }
    /// [`Arch::get_and_clear_full_ptes`] (the same state change and
    /// events), returning a batch that was one run of present entries as
    /// that run ([`ClearedPtes::Run`]) instead of entry by entry, so a
    /// caller that handles a run at once builds no list.
    fn get_and_clear_full_ptes_batch(
        &self,
        t: &mut PteTable<'_>,
        i: usize,
        nr: usize,
    ) -> ClearedPtes {
        ClearedPtes::List(self.get_and_clear_full_ptes(t, i, nr))
    }
    /// `ptep_get_and_clear()`: one entry; the same stores and counts as
    /// [`Arch::get_and_clear_full_ptes`] with `nr == 1` (an arch that
    /// overrides that one overrides this one too).
    fn ptep_get_and_clear(&self, t: &mut PteTable<'_>, i: usize) -> Option<Leaf> {
        t.hw.call(clear_call(1));
        generic::ptep_get_and_clear_one(t, i)
    }
    /// A single-entry in-place change that is not `set_pte_at()`:
    /// `ptep_set_wrprotect()`, `ptep_set_access_flags()` with a write-bit
    /// change. Never folds.
    fn ptep_modify(&self, t: &mut PteTable<'_>, i: usize, leaf: Leaf) {
        t.hw.call(KCall::PtepModify);
        generic::ptep_modify(t, i, leaf)
    }
    /// `wrprotect_ptes()`: write-protect `nr` present entries from `i`.
    fn wrprotect_ptes(&self, t: &mut PteTable<'_>, i: usize, nr: usize) {
        t.hw.call(KCall::WrprotectPtes);
        generic::wrprotect_ptes(t, i, nr)
    }
    /// `modify_prot_start_ptes()`: clear `nr` entries of one batch and
    /// return the first with the young/dirty bits of all of them ORed in.
    fn modify_prot_start_ptes(&self, t: &mut PteTable<'_>, i: usize, nr: usize) -> Leaf {
        t.hw.call(KCall::ModifyProtStartPtes);
        generic::modify_prot_start_ptes(self, t, i, nr)
    }
    /// `modify_prot_commit_ptes()`: write the batch back (`set_ptes()`).
    fn modify_prot_commit_ptes(
        &self,
        t: &mut PteTable<'_>,
        i: usize,
        leaf: Leaf,
        nr: usize,
        folios: &dyn FolioSpan,
    ) {
        t.hw.call(KCall::ModifyProtCommitPtes);
        self.set_ptes(t, i, leaf, nr, folios)
    }
    /// `pte_batch_hint()`: how many entries from `i` (holding `leaf`) are
    /// known to belong to one batch without looking (1 by default).
    fn pte_batch_hint(&self, i: usize, leaf: &Leaf) -> usize {
        let _ = (i, leaf);
        1
    }

    // ----- TLB -----

    /// Flush user translations for `[start, end)` at `stride` bytes
    /// (`flush_tlb_range()`), counting the instructions the kernel issues.
    fn flush_tlb_range(&self, hw: &HwSink, start: u64, end: u64, stride: u64);
    /// Flush the whole address space (`flush_tlb_mm()`).
    fn flush_tlb_mm(&self, hw: &HwSink);
    /// Reclaim's flush of PTEs `try_to_unmap_one()` just cleared in
    /// `[start, end)` (`TTU_BATCH_FLUSH`). The default is the x86 case on
    /// our machines: should_defer_flush() is false while one CPU is in
    /// mm_cpumask (arch_tlbbatch_should_defer()), so the range is flushed
    /// at once. Linux: mm/rmap.c should_defer_flush(),
    /// set_tlb_ubc_flush_pending().
    fn tlbbatch_add_pending(&self, hw: &HwSink, start: u64, end: u64) {
        self.flush_tlb_range(hw, start, end, crate::core::addr::PAGE_SIZE);
    }
    /// Complete the flushes [`Arch::tlbbatch_add_pending`] deferred
    /// (`try_to_unmap_flush_dirty()` before pageout(), or
    /// `try_to_unmap_flush()`); nothing by default. Linux: mm/rmap.c
    /// try_to_unmap_flush(), arch_tlbbatch_flush().
    fn tlbbatch_flush(&self, hw: &HwSink) {
        let _ = hw;
    }
    /// `pmdp_invalidate_ad()`: an atomic exchange to an invalid PMD; the
    /// generic version (`pmdp_invalidate()`) flushes the PMD's range at once
    /// (`flush_pmd_tlb_range()`). Linux: mm/pgtable-generic.c.
    fn pmdp_invalidate_ad(&self, hw: &HwSink, addr: u64) {
        hw.one(crate::core::hw::HwEvent::PmdStore);
        self.flush_tlb_range(
            hw,
            addr,
            addr + crate::core::addr::PMD_SIZE,
            crate::core::addr::PMD_SIZE,
        );
    }
    /// `pte_needs_flush(old, new)` / `huge_pmd_needs_flush()`: whether a
    /// protection change from `old` to `new` must flush the TLB. The generic
    /// stub says always.
    fn pte_needs_flush(&self, old: &Leaf, new: &Leaf) -> bool {
        let _ = (old, new);
        true
    }
    /// Whether the 6.18 kernel of this arch is built with
    /// `CONFIG_PT_RECLAIM`: MADV_DONTNEED frees a PTE table it leaves
    /// empty (mm/pt_reclaim.c). The option depends on
    /// `ARCH_SUPPORTS_PT_RECLAIM` (mm/Kconfig), which only x86 selects
    /// (`if X86_64`, arch/x86/Kconfig, 6.14); arm64 does not, so its
    /// DONTNEED leaves empty tables to munmap's and exit's
    /// free_pgtables().
    fn pt_reclaim(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An arch's [`RawPte`] agrees with its codec: the PFN field, the
    /// advance by `nr` frames, each attribute's bit, and presence — for
    /// every attribute combination a PTE can carry.
    #[test]
    fn raw_pte_agrees_with_the_codec() {
        for kind in ArchKind::ALL {
            let arch = kind.ops();
            let Some(raw) = arch.raw_pte() else { continue };
            for flags in all_flag_subsets() {
                if flags.contains(LeafFlags::CONT) {
                    continue;
                }
                for pfn in [1u64, 0x1234, (1 << 34) - 600] {
                    let l = Leaf {
                        pfn: Pfn(pfn),
                        flags,
                    };
                    let e = arch.encode_leaf(1, l);
                    assert!(raw.is_present(e), "{kind:?} {l:?}");
                    assert_eq!(raw.pfn(e), pfn);
                    for nr in [1u64, 15, 511] {
                        let next = Leaf {
                            pfn: Pfn(pfn + nr),
                            flags,
                        };
                        assert_eq!(raw.advance(e, nr), arch.encode_leaf(1, next));
                        let far = arch.encode_leaf(
                            1,
                            Leaf {
                                pfn: Pfn(pfn * 3 + nr),
                                flags,
                            },
                        );
                        assert_eq!(far & !raw.pfn_mask, e & !raw.pfn_mask);
                        assert_eq!(
                            arch.decode(1, far & !raw.pfn_mask | raw.pfn_mask & e),
                            Entry::Leaf(l)
                        );
                    }
                    for f in [
                        LeafFlags::WRITE,
                        LeafFlags::YOUNG,
                        LeafFlags::DIRTY,
                        LeafFlags::SOFT_DIRTY,
                        LeafFlags::UFFD_WP,
                        LeafFlags::SPECIAL,
                    ] {
                        let with = arch.encode_leaf(
                            1,
                            Leaf {
                                pfn: Pfn(pfn),
                                flags: flags | f,
                            },
                        );
                        let without = arch.encode_leaf(
                            1,
                            Leaf {
                                pfn: Pfn(pfn),
                                flags: flags - f,
                            },
                        );
                        assert_eq!(with ^ without, raw.bits(f), "{kind:?} {f:?}");
                        assert_eq!(with & raw.bits(f), raw.bits(f));
                    }
                }
            }
            // None and swap descriptors are not present.
            assert!(!raw.is_present(0));
            let swp = arch.encode_swap(SwapPte {
                ty: 0,
                offset: 77,
                exclusive: true,
                soft_dirty: true,
                uffd_wp: true,
            });
            assert!(!raw.is_present(swp), "{kind:?}");
        }
    }

    fn all_flag_subsets() -> Vec<LeafFlags> {
        // Every combination of the attributes a leaf can carry (CONT only on arm64 level 1).
        let bits = [
            LeafFlags::WRITE,
            LeafFlags::DIRTY,
            LeafFlags::YOUNG,
            LeafFlags::SPECIAL,
            LeafFlags::SOFT_DIRTY,
            LeafFlags::UFFD_WP,
            LeafFlags::CONT,
            LeafFlags::EXEC,
            LeafFlags::PROTNONE,
        ];
        (0..(1u32 << bits.len()))
            .map(|m| {
                let mut f = LeafFlags::empty();
                for (i, b) in bits.iter().enumerate() {
                    if m & (1 << i) != 0 {
                        f |= *b;
                    }
                }
                f
            })
            .collect()
    }

    #[test]
    fn leaf_round_trip_every_flag_subset() {
        for arch in ArchKind::ALL {
            let ops = arch.ops();
            for level in [1u8, 2] {
                for f in all_flag_subsets() {
                    let mut f = f;
                    if arch == ArchKind::Arm64 {
                        f.remove(LeafFlags::SOFT_DIRTY);
                    }
                    if arch == ArchKind::X86_64 || level != 1 {
                        f.remove(LeafFlags::CONT);
                    }
                    let leaf = Leaf {
                        pfn: Pfn(0x12345),
                        flags: f,
                    };
                    let raw = ops.encode_leaf(level, leaf);
                    assert_ne!(raw, 0);
                    assert_eq!(
                        ops.decode(level, raw),
                        Entry::Leaf(leaf),
                        "{arch:?} l{level} {f:?} raw={raw:#x}"
                    );
                    if level == 1 {
                        assert!(ops.pte_present_raw(raw), "{arch:?} {f:?}");
                    }
                }
            }
            for level in 2..=4u8 {
                let raw = ops.encode_table(level, Pfn(0x777));
                assert_eq!(ops.decode(level, raw), Entry::Table(Pfn(0x777)));
            }
            assert_eq!(ops.decode(1, 0), Entry::None);
        }
    }

    #[test]
    fn swap_round_trip() {
        for arch in ArchKind::ALL {
            let ops = arch.ops();
            for m in 0..8u8 {
                for (ty, offset) in [(0u8, 1u64), (3, 0x1234), (22, (1 << 50) - 1)] {
                    let s = SwapPte {
                        ty,
                        offset,
                        exclusive: m & 1 != 0,
                        soft_dirty: m & 2 != 0 && arch == ArchKind::X86_64,
                        uffd_wp: m & 4 != 0,
                    };
                    let raw = ops.encode_swap(s);
                    assert_ne!(raw, 0);
                    assert!(!ops.pte_present_raw(raw), "{arch:?} {s:?}");
                    assert_eq!(
                        ops.decode(1, raw),
                        Entry::Swap(s),
                        "{arch:?} {s:?} {raw:#x}"
                    );
                }
            }
        }
        // x86-64: type in bits 59-63, inverted offset in bits 9-58, E = bit 3.
        let raw = X86_64.encode_swap(SwapPte {
            ty: 1,
            offset: 1,
            exclusive: true,
            soft_dirty: false,
            uffd_wp: false,
        });
        assert_eq!(raw >> 59, 1);
        assert_eq!(raw & 0xfff, 0xc08);
        assert_eq!((!raw << 5) >> 14, 1);
    }
}

/// The TLB recipes of both architectures (moved here from the event
/// counter: the recipe is the arch's, the counter only counts).
#[cfg(test)]
mod tlb_tests {
    use super::*;
    use crate::core::hw::{HwEvent, HwEvents, HwFeatures, HwMark};

    /// An event sink plus the arch whose recipe issues the flushes.
    struct Cpu {
        hw: HwSink,
        arch: &'static dyn Arch,
    }
    impl Cpu {
        fn new(arch: ArchKind, f: HwFeatures) -> Self {
            Cpu {
                hw: HwSink::new(f),
                arch: arch.ops(),
            }
        }
        fn flush_tlb_range(&self, start: u64, end: u64, stride: u64) {
            self.arch.flush_tlb_range(&self.hw, start, end, stride)
        }
        fn take_marks(&self) -> Vec<HwMark> {
            self.hw.take_marks()
        }
        fn set_tracing(&self, on: bool) {
            self.hw.set_tracing(on)
        }
        fn mark_batch(&self, va: u64, nr: u64, op: &'static str) {
            self.hw.mark_batch(va, nr, op)
        }
        fn snapshot(&self) -> HwEvents {
            self.hw.snapshot()
        }
    }

    #[test]
    fn marks_follow_the_flush_decision_and_only_when_tracing() {
        let s = Cpu::new(ArchKind::X86_64, HwFeatures::default());
        s.flush_tlb_range(0x1000, 0x3000, 4096);
        assert!(s.take_marks().is_empty(), "not tracing");
        s.set_tracing(true);
        s.flush_tlb_range(0x1000, 0x3000, 4096);
        // x86: 34 pages exceed tlb_single_page_flush_ceiling (33).
        s.flush_tlb_range(0, 34 * 4096, 4096);
        s.mark_batch(0x1000, 16, "move");
        assert_eq!(
            s.take_marks(),
            vec![
                HwMark::TlbFlush {
                    start: 0x1000,
                    end: 0x3000,
                    whole: false
                },
                HwMark::TlbFlush {
                    start: 0,
                    end: 34 * 4096,
                    whole: true
                },
                HwMark::Batch {
                    va: 0x1000,
                    nr: 16,
                    op: "move"
                },
            ]
        );
        // arm64 without FEAT_TLBIRANGE: 512 pages go ASID-wide, counted once.
        let a = Cpu::new(ArchKind::Arm64, HwFeatures::default());
        a.set_tracing(true);
        a.flush_tlb_range(0, 512 * 4096, 4096);
        assert_eq!(
            a.take_marks(),
            vec![HwMark::TlbFlush {
                start: 0,
                end: 512 * 4096,
                whole: true
            }]
        );
        assert_eq!(a.snapshot().get(HwEvent::TlbiAsid), 1);
        assert_eq!(a.snapshot().get(HwEvent::TlbFlushCall), 1);
    }

    fn flush(arch: ArchKind, f: HwFeatures, start: u64, end: u64, stride: u64) -> HwEvents {
        let s = Cpu::new(arch, f);
        s.flush_tlb_range(start, end, stride);
        s.snapshot()
    }

    #[test]
    fn arm64_no_range_thresholds() {
        let f = HwFeatures::default();
        // 511 pages: one VALE1IS each under one DSB pair.
        let e = flush(ArchKind::Arm64, f, 0, 511 * 4096, 4096);
        assert_eq!(e.get(HwEvent::TlbiPage), 511);
        assert_eq!((e.get(HwEvent::DsbIshst), e.get(HwEvent::DsbIsh)), (1, 1));
        // 512 pages (2 MiB): >= MAX_DVM_OPS * stride → ASIDE1IS.
        let e = flush(ArchKind::Arm64, f, 0, 512 * 4096, 4096);
        assert_eq!(e.get(HwEvent::TlbiPage), 0);
        assert_eq!(e.get(HwEvent::TlbiAsid), 1);
        // 2 MiB stride: 511 PMDs still by page op.
        let e = flush(ArchKind::Arm64, f, 0, 511 << 21, 1 << 21);
        assert_eq!(e.get(HwEvent::TlbiPage), 511);
    }

    #[test]
    fn arm64_range_ops() {
        let f = HwFeatures {
            tlbi_range: true,
            ..Default::default()
        };
        // 262,144 pages = 4 << 16: one RVALE1IS at scale 3 (num = 3).
        let e = flush(ArchKind::Arm64, f, 0, 1 << 30, 4096);
        assert_eq!(
            (e.get(HwEvent::TlbiRange), e.get(HwEvent::TlbiPage)),
            (1, 0)
        );
        // 16 pages: scale 0, num = 7 → one op.
        let e = flush(ArchKind::Arm64, f, 0, 16 * 4096, 4096);
        assert_eq!(
            (e.get(HwEvent::TlbiRange), e.get(HwEvent::TlbiPage)),
            (1, 0)
        );
        // 1 page: a single VALE1IS.
        let e = flush(ArchKind::Arm64, f, 0, 4096, 4096);
        assert_eq!(
            (e.get(HwEvent::TlbiRange), e.get(HwEvent::TlbiPage)),
            (0, 1)
        );
        // 3 pages: scale 0 covers 2, the leftover page takes a VALE1IS.
        let e = flush(ArchKind::Arm64, f, 0, 3 * 4096, 4096);
        assert_eq!(
            (e.get(HwEvent::TlbiRange), e.get(HwEvent::TlbiPage)),
            (1, 1)
        );
        // 256 pages: scale 1: 256 >> 6 = 4 → num 3 → 4 << 6 = 256.
        let e = flush(ArchKind::Arm64, f, 0, 256 * 4096, 4096);
        assert_eq!(
            (e.get(HwEvent::TlbiRange), e.get(HwEvent::TlbiPage)),
            (1, 0)
        );
        // MAX_TLBI_RANGE_PAGES exactly (2 Mi pages, 8 GiB): not above the
        // limit, so the range path; scale 3: 2 Mi >> 16 = 32 → num 31, one
        // op for all of it (the pre-6.9 macro masked 32 to 0 and issued
        // nothing at any scale).
        let e = flush(ArchKind::Arm64, f, 0, 8 << 30, 4096);
        assert_eq!(
            (
                e.get(HwEvent::TlbiRange),
                e.get(HwEvent::TlbiPage),
                e.get(HwEvent::TlbiAsid)
            ),
            (1, 0, 0)
        );
        // One page more: above the limit, ASID-wide.
        let e = flush(ArchKind::Arm64, f, 0, (8 << 30) + 4096, 4096);
        assert_eq!(
            (e.get(HwEvent::TlbiRange), e.get(HwEvent::TlbiAsid)),
            (0, 1)
        );
    }

    #[test]
    fn x86_ceiling() {
        let f = HwFeatures::default();
        let e = flush(ArchKind::X86_64, f, 0, 33 * 4096, 4096);
        assert_eq!(
            (e.get(HwEvent::TlbiPage), e.get(HwEvent::TlbiAsid)),
            (33, 0)
        );
        let e = flush(ArchKind::X86_64, f, 0, 34 * 4096, 4096);
        assert_eq!((e.get(HwEvent::TlbiPage), e.get(HwEvent::TlbiAsid)), (0, 1));
        assert_eq!(e.get(HwEvent::TlbFlushCall), 1);
    }
}

#[cfg(test)]
mod hook_tests {
    use super::*;

    fn leaf(flags: LeafFlags) -> Leaf {
        Leaf {
            pfn: Pfn(0x100),
            flags,
        }
    }

    /// pte_batch_hint(): generic 1; arm64 the rest of a valid contiguous
    /// block — 1 at a block's last entry, which makes mremap's
    /// mremap_folio_pte_batch() return early there (its `== 1` test), and
    /// 1 for PROT_NONE entries that carry CONT (pte_valid_cont()).
    #[test]
    fn pte_batch_hint_per_arch() {
        let cont = leaf(LeafFlags::CONT | LeafFlags::WRITE);
        assert_eq!(X86_64.pte_batch_hint(0, &cont), 1);
        assert_eq!(Arm64.pte_batch_hint(0, &cont), 16);
        assert_eq!(Arm64.pte_batch_hint(17, &cont), 15);
        assert_eq!(Arm64.pte_batch_hint(15, &cont), 1);
        assert_eq!(Arm64.pte_batch_hint(0, &leaf(LeafFlags::WRITE)), 1);
        assert_eq!(
            Arm64.pte_batch_hint(0, &leaf(LeafFlags::CONT | LeafFlags::PROTNONE)),
            1
        );
    }

    /// pte_needs_flush(): the generic stub (arm64 6.18) always flushes; x86
    /// skips PROT_NONE old entries and accessed-only changes.
    #[test]
    fn pte_needs_flush_per_arch() {
        let rw = leaf(LeafFlags::WRITE | LeafFlags::YOUNG);
        let ro_old = leaf(LeafFlags::empty());
        let none = leaf(LeafFlags::PROTNONE);
        assert!(Arm64.pte_needs_flush(&ro_old, &ro_old));
        assert!(!X86_64.pte_needs_flush(&ro_old, &leaf(LeafFlags::YOUNG)));
        assert!(X86_64.pte_needs_flush(&rw, &ro_old));
        assert!(!X86_64.pte_needs_flush(&none, &rw));
        assert!(X86_64.pte_needs_flush(&leaf(LeafFlags::DIRTY), &ro_old));
    }
}

#[cfg(test)]
mod marker_tests {
    use super::*;

    /// A guard marker is a swap entry of type SWP_PTE_MARKER (31) with
    /// offset PTE_MARKER_GUARD, on both architectures; it decodes back as a
    /// marker, never as a swap entry.
    #[test]
    fn markers_round_trip_as_swap_type_31() {
        for arch in ArchKind::ALL {
            let ops = arch.ops();
            for m in [PteMarker::GUARD, PteMarker::UFFD_WP] {
                let raw = ops.encode_marker(m);
                assert_ne!(raw, 0);
                assert_eq!(ops.decode(1, raw), Entry::Marker(m), "{arch:?} {m:?}");
                assert!(!ops.pte_present_raw(raw), "{arch:?} {m:?}");
                assert_eq!(ops.decode_swap(raw).ty, SWP_PTE_MARKER);
            }
        }
        // x86-64: type in bits 59-63.
        assert_eq!(X86_64.encode_marker(PteMarker::GUARD) >> 59, 31);
    }
}

#[cfg(test)]
mod cleared_ptes_tests {
    use super::*;

    /// A run reads, entry by entry, as the list the arch would have
    /// built: entry k is the first advanced by k × frames.
    #[test]
    fn cleared_run_reads_as_its_list() {
        let first = Leaf {
            pfn: Pfn(0x1000),
            flags: LeafFlags::WRITE | LeafFlags::DIRTY,
        };
        let run = ClearedPtes::Run {
            i: 16,
            nr: 3,
            first,
            frames: 1,
        };
        assert_eq!(run.len(), 3);
        assert_eq!(run.get(3), None);
        let at = |i: usize, pfn: u64| {
            (
                i,
                Leaf {
                    pfn: Pfn(pfn),
                    ..first
                },
            )
        };
        let want = vec![at(16, 0x1000), at(17, 0x1001), at(18, 0x1002)];
        assert_eq!(run.get(1), Some(want[1]));
        assert_eq!(run.into_vec(), want);
        let list = ClearedPtes::List(want.clone());
        assert_eq!(list.get(2), Some(want[2]));
        assert_eq!(list.into_vec(), want);
        assert!(ClearedPtes::List(Vec::new()).is_empty());
    }
}
