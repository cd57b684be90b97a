//! User-visible syscall argument types (the uapi), shared by the model and the
//! live backend so one scenario means the same call on both.

use bitflags::bitflags;
use serde::{Deserialize, Serialize};

bitflags! {
    /// `PROT_*` bits (include/uapi/asm-generic/mman-common.h).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
    pub struct Prot: u32 {
        const READ = 0x1;
        const WRITE = 0x2;
        const EXEC = 0x4;
    }
}

bitflags! {
    /// `MAP_*` flags (x86-64 values; arm64 uses the same generic values).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
    pub struct MapFlags: u32 {
        const SHARED = 0x01;
        const PRIVATE = 0x02;
        const FIXED = 0x10;
        const ANONYMOUS = 0x20;
        const LOCKED = 0x2000;
        const NORESERVE = 0x4000;
        const POPULATE = 0x8000;
        const FIXED_NOREPLACE = 0x100000;
    }
}

bitflags! {
    /// `MREMAP_*` flags (include/uapi/linux/mman.h). Build a value with
    /// [`MremapFlags::from_bits_retain`] to pass undefined bits through:
    /// the model rejects them with EINVAL, as the kernel does.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
    pub struct MremapFlags: u64 {
        const MAYMOVE = 1;
        const FIXED = 2;
        const DONTUNMAP = 4;
    }
}

/// `madvise()` advice values (include/uapi/asm-generic/mman-common.h).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum Advice {
    DontNeed,
    /// MADV_FREE = 8: lazily free private anonymous pages (reclaim
    /// discards them unless written again).
    Free,
    DontFork,
    DoFork,
    HugePage,
    NoHugePage,
    /// MADV_PAGEOUT = 21.
    PageOut,
    /// MADV_COLD = 20.
    Cold,
    WipeOnFork,
    KeepOnFork,
    /// MADV_COLLAPSE = 25.
    Collapse,
    /// MADV_GUARD_INSTALL = 102: install guard markers (access → SIGSEGV).
    GuardInstall,
    /// MADV_GUARD_REMOVE = 103: remove guard markers.
    GuardRemove,
    /// Any other advice value, as the `int behavior` argument passes it:
    /// one the kernel rejects (EINVAL) or one it accepts and the model
    /// does not implement ([`Advice::is_kernel_valid`]). A value that has
    /// a name above is never `Other` ([`Advice::from_value`]).
    Other(i32),
}

impl Advice {
    pub const fn value(self) -> i32 {
        match self {
            Advice::DontNeed => 4,
            Advice::Free => 8,
            Advice::DontFork => 10,
            Advice::DoFork => 11,
            Advice::HugePage => 14,
            Advice::NoHugePage => 15,
            Advice::WipeOnFork => 18,
            Advice::KeepOnFork => 19,
            Advice::Cold => 20,
            Advice::PageOut => 21,
            Advice::Collapse => 25,
            Advice::GuardInstall => 102,
            Advice::GuardRemove => 103,
            Advice::Other(v) => v,
        }
    }
    /// The advice a program passing `value` gives: the named variant when
    /// there is one, else [`Advice::Other`].
    pub fn from_value(value: i32) -> Advice {
        Advice::ALL
            .into_iter()
            .find(|a| a.value() == value)
            .unwrap_or(Advice::Other(value))
    }
    /// Whether Linux 6.18 accepts the value at all (x86-64 and arm64 with
    /// KSM, THP and MEMORY_FAILURE configured).
    /// Linux: mm/madvise.c madvise_behavior_valid().
    pub const fn is_kernel_valid(self) -> bool {
        matches!(
            self.value(),
            0..=4 // NORMAL, RANDOM, SEQUENTIAL, WILLNEED, DONTNEED
                | 8..=25 // FREE, REMOVE, DONTFORK, DOFORK, MERGEABLE, UNMERGEABLE,
                // HUGEPAGE, NOHUGEPAGE, DONTDUMP, DODUMP, WIPEONFORK, KEEPONFORK,
                // COLD, PAGEOUT, POPULATE_READ/WRITE, DONTNEED_LOCKED, COLLAPSE
                | 100..=103 // HWPOISON, SOFT_OFFLINE, GUARD_INSTALL, GUARD_REMOVE
        )
    }
    /// Every advice the model knows, in the language's order.
    pub const ALL: [Advice; 13] = [
        Advice::DontNeed,
        Advice::Free,
        Advice::DontFork,
        Advice::DoFork,
        Advice::HugePage,
        Advice::NoHugePage,
        Advice::WipeOnFork,
        Advice::KeepOnFork,
        Advice::PageOut,
        Advice::Cold,
        Advice::Collapse,
        Advice::GuardInstall,
        Advice::GuardRemove,
    ];
    pub fn from_name(s: &str) -> Option<Advice> {
        Advice::ALL.into_iter().find(|a| a.name() == s)
    }
    pub const fn name(self) -> &'static str {
        match self {
            Advice::DontNeed => "dontneed",
            Advice::Free => "free",
            Advice::DontFork => "dontfork",
            Advice::DoFork => "dofork",
            Advice::HugePage => "hugepage",
            Advice::NoHugePage => "nohugepage",
            Advice::PageOut => "pageout",
            Advice::Cold => "cold",
            Advice::WipeOnFork => "wipeonfork",
            Advice::KeepOnFork => "keeponfork",
            Advice::Collapse => "collapse",
            Advice::GuardInstall => "guard_install",
            Advice::GuardRemove => "guard_remove",
            Advice::Other(_) => "advice",
        }
    }
}

/// A THP sysfs setting (`always`/`inherit`/`madvise`/`never`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ThpMode {
    Always,
    Inherit,
    Madvise,
    Never,
}

impl ThpMode {
    pub fn from_name(s: &str) -> Option<ThpMode> {
        Some(match s {
            "always" => ThpMode::Always,
            "inherit" => ThpMode::Inherit,
            "madvise" => ThpMode::Madvise,
            "never" => ThpMode::Never,
            _ => return None,
        })
    }
    pub const fn name(self) -> &'static str {
        match self {
            ThpMode::Always => "always",
            ThpMode::Inherit => "inherit",
            ThpMode::Madvise => "madvise",
            ThpMode::Never => "never",
        }
    }
}

/// Which THP knob a scenario sets. Only `enabled` knobs are writable through
/// ptlab (see the live backend); `use_zero_page` is modelled but read-only live.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ThpKnob {
    /// `/sys/kernel/mm/transparent_hugepage/enabled` (always/madvise/never).
    TopLevel,
    /// `/sys/kernel/mm/transparent_hugepage/hugepages-<size>/enabled`, by order (2..=9).
    Size(u8),
}

bitflags! {
    /// `UFFDIO_REGISTER_MODE_*` bits (include/uapi/linux/userfaultfd.h).
    /// [`UffdRegisterMode::from_bits_retain`] passes undefined bits
    /// through, as a program could.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
    pub struct UffdRegisterMode: u64 {
        const MISSING = 1;
        const WP = 2;
        /// Needs shmem or hugetlbfs: EINVAL on private anonymous memory.
        const MINOR = 4;
    }
}

bitflags! {
    /// `UFFDIO_COPY_MODE_*` bits (include/uapi/linux/userfaultfd.h).
    /// [`UffdCopyMode::from_bits_retain`] passes undefined bits through.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
    pub struct UffdCopyMode: u64 {
        const DONTWAKE = 1;
        const WP = 2;
    }
}

bitflags! {
    /// `UFFDIO_ZEROPAGE_MODE_*` bits (include/uapi/linux/userfaultfd.h).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
    pub struct UffdZeropageMode: u64 {
        const DONTWAKE = 1;
    }
}

bitflags! {
    /// `UFFDIO_MOVE_MODE_*` bits (include/uapi/linux/userfaultfd.h).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
    pub struct UffdMoveMode: u64 {
        const DONTWAKE = 1;
        const ALLOW_SRC_HOLES = 2;
    }
}

/// A THP prctl: `PR_SET_THP_DISABLE` (with its `disable` and `flags`
/// arguments) or `PR_GET_THP_DISABLE` (include/uapi/linux/prctl.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PrctlThp {
    Set { disable: u64, flags: u64 },
    Get,
}
