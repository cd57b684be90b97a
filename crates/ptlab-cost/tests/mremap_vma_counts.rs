//! `mremap_vma`, counted by hand (issue 15): one per VMA that mremap()
//! moves (move_vma(): copy_vma(), vrm_calc_charge(), the source's
//! do_vmi_munmap()); none for a resize in place. Adding it changed no other
//! event's count (scripts/check-same-output.sh, the other count tests).

mod common;

use ptlab_model::{ArchKind, Before, HwEvent};

/// A 1 MiB VMA moved (1), grown in place (0: nothing after it), then the
/// two VMAs of a range of different protections moved by one FIXED call
/// with old_len == new_len (6.18 moves each piece: 2). The same with every
/// `--before` switch: none of them changes the VMA work.
#[test]
fn one_per_vma_moved() {
    let src = "thp 2M never
p = mmap 1M at 0x7f00_0000_0000 fixed
write p 1M
q = mremap p 1M 1M maymove fixed 0x7f00_1000_0000
q = mremap q 1M 2M
r = mmap 64K at 0x7f00_2000_0000 fixed
write r 64K
mprotect r 32K r
s = mremap r 64K 64K maymove fixed 0x7f00_3000_0000
";
    common::assert_per_statement(
        src,
        HwEvent::MremapVma,
        &ArchKind::ALL,
        &[Before::empty(), Before::all()],
        &[0, 0, 0, 1, 0, 0, 0, 0, 1 + 1],
    );
}
