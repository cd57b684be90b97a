//! THP policy: the sysfs knobs and the order-selection rules built on them.
//!
//! Linux: mm/huge_memory.c __thp_vma_allowable_orders(),
//! include/linux/huge_mm.h thp_vma_allowable_orders(), thp_vma_suitable_orders(),
//! mm/memory.c alloc_anon_folio().

use crate::core::addr::{Order, PMD_ORDER};
use crate::types::errno::Errno;
use crate::types::uapi::{ThpKnob, ThpMode};
use serde::{Deserialize, Serialize};

/// Smallest anonymous mTHP order (16 KiB); order 1 is never used for anon
/// and there is no `hugepages-8kB/enabled` knob (checked on 6.18.44: the
/// 8kB directory only has `shmem_enabled`).
pub const MIN_ANON_ORDER: u8 = 2;

/// The global THP knobs under /sys/kernel/mm/transparent_hugepage/.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThpSettings {
    /// Top-level `enabled`: always, madvise or never.
    pub top: ThpMode,
    /// `hugepages-<size>/enabled` for orders 2..=9 (index = order).
    pub per_order: [ThpMode; 10],
    /// `use_zero_page`.
    pub use_zero_page: bool,
}

impl Default for ThpSettings {
    /// This machine's defaults: top-level madvise, 2048kB inherit, the rest never.
    fn default() -> Self {
        let mut per_order = [ThpMode::Never; 10];
        per_order[PMD_ORDER as usize] = ThpMode::Inherit;
        ThpSettings {
            top: ThpMode::Madvise,
            per_order,
            use_zero_page: true,
        }
    }
}

/// Bitmask of orders (bit n = order n).
pub type OrderMask = u16;

impl ThpSettings {
    /// Set one `enabled` knob, rejecting what sysfs rejects.
    pub fn set(&mut self, knob: ThpKnob, mode: ThpMode) -> Result<(), Errno> {
        match knob {
            // Linux: mm/huge_memory.c enabled_store() accepts only always/madvise/never.
            ThpKnob::TopLevel if mode == ThpMode::Inherit => Err(Errno::EINVAL),
            ThpKnob::TopLevel => {
                self.top = mode;
                Ok(())
            }
            ThpKnob::Size(o) if !(MIN_ANON_ORDER..=PMD_ORDER).contains(&o) => Err(Errno::ENOENT),
            ThpKnob::Size(o) => {
                self.per_order[o as usize] = mode;
                Ok(())
            }
        }
    }

    /// Orders in the knobs that are `mode`.
    fn mask_of(&self, mode: ThpMode) -> OrderMask {
        let mut m = 0;
        for o in MIN_ANON_ORDER..=PMD_ORDER {
            if self.per_order[o as usize] == mode {
                m |= 1 << o;
            }
        }
        m
    }

    /// Orders policy allows for a VMA (before size and alignment checks).
    /// Linux: mm/huge_memory.c __thp_vma_allowable_orders() and
    /// include/linux/huge_mm.h thp_vma_allowable_orders() (rule F5.2).
    pub fn allowed_orders(
        &self,
        vm_hugepage: bool,
        vm_nohugepage: bool,
        uffd_armed: bool,
    ) -> OrderMask {
        if vm_nohugepage || uffd_armed {
            return 0;
        }
        let mut mask = self.mask_of(ThpMode::Always);
        if vm_hugepage {
            mask |= self.mask_of(ThpMode::Madvise);
        }
        let inherit = self.top == ThpMode::Always || (self.top == ThpMode::Madvise && vm_hugepage);
        if inherit {
            mask |= self.mask_of(ThpMode::Inherit);
        }
        mask
    }
}

/// What `prctl(PR_SET_THP_DISABLE)` set for an mm (mm flags
/// MMF_DISABLE_THP_COMPLETELY / MMF_DISABLE_THP_EXCEPT_ADVISED). Inherited by
/// fork (MMF_INIT_MASK).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThpDisable {
    /// THP follows the knobs.
    #[default]
    No,
    /// `prctl(PR_SET_THP_DISABLE, 1, 0)`: no large folio in any VMA.
    Completely,
    /// `prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED)` (new in
    /// 6.18): no large folio except in MADV_HUGEPAGE VMAs.
    ExceptAdvised,
}

/// `PR_THP_DISABLE_EXCEPT_ADVISED`, the one flag `PR_SET_THP_DISABLE` takes.
pub const PR_THP_DISABLE_EXCEPT_ADVISED: u64 = 1 << 1;

impl ThpDisable {
    /// Whether THP is off for a VMA with (or without) VM_HUGEPAGE.
    /// Linux: include/linux/huge_mm.h vma_thp_disabled().
    pub fn disables(self, vm_hugepage: bool) -> bool {
        match self {
            ThpDisable::No => false,
            ThpDisable::Completely => true,
            ThpDisable::ExceptAdvised => !vm_hugepage,
        }
    }

    /// `prctl(PR_SET_THP_DISABLE, disable, flags, arg4, arg5)`, with the
    /// kernel's argument checks. Linux: kernel/sys.c prctl_set_thp_disable()
    /// (checked live on 6.18.44: any non-zero `disable` disables; a flag
    /// other than EXCEPT_ADVISED, a flag with `disable` 0, or a non-zero
    /// arg4/arg5 gives EINVAL).
    pub fn from_prctl(disable: u64, flags: u64, arg4: u64, arg5: u64) -> Result<ThpDisable, Errno> {
        if arg4 != 0 || arg5 != 0 {
            return Err(Errno::EINVAL);
        }
        if (disable == 0 && flags != 0) || flags & !PR_THP_DISABLE_EXCEPT_ADVISED != 0 {
            return Err(Errno::EINVAL);
        }
        Ok(if disable == 0 {
            ThpDisable::No
        } else if flags & PR_THP_DISABLE_EXCEPT_ADVISED != 0 {
            ThpDisable::ExceptAdvised
        } else {
            ThpDisable::Completely
        })
    }

    /// What `prctl(PR_GET_THP_DISABLE)` returns: 0, 1, or 3 (1 with
    /// EXCEPT_ADVISED) (checked live on 6.18.44).
    pub fn prctl_get(self) -> u64 {
        match self {
            ThpDisable::No => 0,
            ThpDisable::Completely => 1,
            ThpDisable::ExceptAdvised => 1 | PR_THP_DISABLE_EXCEPT_ADVISED,
        }
    }
}

/// Highest order in `mask`, if any.
pub fn highest_order(mask: OrderMask) -> Option<Order> {
    if mask == 0 {
        None
    } else {
        Some(Order(15 - mask.leading_zeros() as u8))
    }
}

/// Orders from highest to lowest.
pub fn orders_desc(mask: OrderMask) -> impl Iterator<Item = Order> {
    (0..16u8)
        .rev()
        .filter(move |o| mask & (1 << o) != 0)
        .map(Order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_matrix_spec_s6() {
        // spec fork-fault.md §8 scenario 6.
        let mut s = ThpSettings::default();
        s.set(ThpKnob::Size(4), ThpMode::Inherit).unwrap();
        assert_eq!(s.allowed_orders(false, false, false) & (1 << 4), 0);
        assert_ne!(s.allowed_orders(true, false, false) & (1 << 4), 0);
        s.set(ThpKnob::Size(4), ThpMode::Madvise).unwrap();
        assert_eq!(s.allowed_orders(false, false, false) & (1 << 4), 0);
        s.set(ThpKnob::Size(4), ThpMode::Always).unwrap();
        assert_eq!(s.allowed_orders(false, true, false), 0);
        s.set(ThpKnob::TopLevel, ThpMode::Never).unwrap();
        s.set(ThpKnob::Size(4), ThpMode::Inherit).unwrap();
        assert_eq!(s.allowed_orders(true, false, false) & (1 << 4), 0);
    }

    #[test]
    fn prctl_thp_disable_rules() {
        // Argument checks, in kernel/sys.c prctl_set_thp_disable()'s order.
        assert_eq!(ThpDisable::from_prctl(1, 0, 1, 0), Err(Errno::EINVAL));
        assert_eq!(ThpDisable::from_prctl(0, 2, 0, 0), Err(Errno::EINVAL));
        assert_eq!(ThpDisable::from_prctl(1, 4, 0, 0), Err(Errno::EINVAL));
        assert_eq!(
            ThpDisable::from_prctl(2, 0, 0, 0),
            Ok(ThpDisable::Completely)
        );
        assert_eq!(
            ThpDisable::from_prctl(1, 2, 0, 0),
            Ok(ThpDisable::ExceptAdvised)
        );
        assert_eq!(ThpDisable::from_prctl(0, 0, 0, 0), Ok(ThpDisable::No));
        assert_eq!(ThpDisable::ExceptAdvised.prctl_get(), 3);
        // vma_thp_disabled(): EXCEPT_ADVISED spares MADV_HUGEPAGE VMAs only.
        assert!(ThpDisable::Completely.disables(true));
        assert!(ThpDisable::ExceptAdvised.disables(false));
        assert!(!ThpDisable::ExceptAdvised.disables(true));
        assert!(!ThpDisable::No.disables(false));
    }

    #[test]
    fn knob_validation() {
        let mut s = ThpSettings::default();
        assert_eq!(
            s.set(ThpKnob::TopLevel, ThpMode::Inherit),
            Err(Errno::EINVAL)
        );
        assert_eq!(s.set(ThpKnob::Size(1), ThpMode::Always), Err(Errno::ENOENT));
        assert_eq!(
            s.set(ThpKnob::Size(10), ThpMode::Always),
            Err(Errno::ENOENT)
        );
    }

    #[test]
    fn order_iteration() {
        let m: OrderMask = (1 << 2) | (1 << 4) | (1 << 9);
        assert_eq!(highest_order(m), Some(Order(9)));
        assert_eq!(
            orders_desc(m).collect::<Vec<_>>(),
            vec![Order(9), Order(4), Order(2)]
        );
        assert_eq!(highest_order(0), None);
    }
}
