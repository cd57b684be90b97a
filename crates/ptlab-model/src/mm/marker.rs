//! Guard PTE markers through the mm mechanics: looking them up, setting
//! one, dropping them with their range (munmap, exit), copying them at fork
//! and taking them along at mremap. The madvise calls that install and
//! remove them are crate::sys::guard.
//!
//! Linux: include/linux/swapops.h make_pte_marker(), is_guard_pte_marker();
//! mm/memory.c copy_nonpresent_pte() (copy_pte_marker), handle_pte_marker(),
//! unmap_vmas() (ZAP_FLAG_DROP_MARKER).

use crate::core::addr::PAGE_SIZE;
use crate::core::arch::PteMarker;
use crate::core::folio::PhysMem;
use crate::core::rules::rule;
use crate::core::vma::VmFlags;
use crate::mm::mm::Mm;
use crate::types::errno::Errno;
use crate::types::Pid;

/// Whether `mm` has a guard marker at `addr`.
pub fn is_guard(mm: &Mm, addr: u64) -> bool {
    mm.pt
        .marker(addr & !(PAGE_SIZE - 1))
        .is_some_and(|m| m.is_guard())
}

/// Guard markers in `[start, end)`, in address order.
pub fn guards(mm: &Mm, start: u64, end: u64) -> Vec<u64> {
    mm.pt
        .markers(start, end)
        .into_iter()
        .filter(|&a| is_guard(mm, a))
        .collect()
}

/// Whether any guard marker lies in `[start, end)`.
pub fn any_guard(mm: &Mm, start: u64, end: u64) -> bool {
    !guards(mm, start, end).is_empty()
}

/// Drop every marker in `[start, end)` (munmap and exit: unmap_vmas() zaps
/// with ZAP_FLAG_DROP_MARKER, and the tables go with the VMA).
pub fn drop_markers(mm: &mut Mm, start: u64, end: u64) {
    for a in mm.pt.markers(start, end) {
        mm.pt.clear_marker(a);
    }
}

/// Set a guard marker at `addr`, allocating the PTE table that holds it.
/// Returns false when the model is out of memory for the table.
pub(crate) fn set_marker(mm: &mut Mm, phys: &mut PhysMem, addr: u64) -> bool {
    if mm.pt.pte_alloc(addr, phys).is_none() {
        return false;
    }
    if mm.pt.marker(addr).is_none() {
        mm.pt.set_marker(addr, PteMarker::GUARD);
    }
    true
}

/// fork: copy the parent's markers in `[start, end)` into the child.
/// Linux: copy_nonpresent_pte() → copy_pte_marker(): guard markers are
/// copied unconditionally (uffd-wp markers only into a uffd-wp VMA).
pub fn copy_markers(
    src: &Mm,
    dst: &mut Mm,
    phys: &mut PhysMem,
    start: u64,
    end: u64,
) -> Result<(), Errno> {
    for a in guards(src, start, end) {
        rule!(dst.pt.hw, ForkCopyGuardMarker);
        if !set_marker(dst, phys, a) {
            return Err(Errno::ENOMEM);
        }
    }
    Ok(())
}

/// Markers of `[start, start + len)` as offsets from `start` (taken before
/// an mremap, which may unmap the source before it returns).
pub fn snapshot(mm: &Mm, start: u64, len: u64) -> Vec<u64> {
    guards(mm, start, start.saturating_add(len))
        .into_iter()
        .map(|a| a - start)
        .collect()
}

/// Invariants of the guard markers of process `pid`: each lies inside a
/// VMA that has VM_MAYBE_GUARD.
pub fn check(pid: Pid, mm: &Mm) -> Vec<String> {
    let mut errs = Vec::new();
    for a in guards(mm, 0, u64::MAX) {
        match mm.vmas.find(a) {
            Some(v) if v.flags.contains(VmFlags::MAYBE_GUARD) => {}
            Some(_) => errs.push(format!(
                "pid {pid}: guard marker {a:#x} in a VMA without VM_MAYBE_GUARD"
            )),
            None => errs.push(format!("pid {pid}: guard marker {a:#x} outside every VMA")),
        }
    }
    errs
}
