//! Where a non-fixed mmap and a moving mremap land
//! (Linux: mm/mmap.c __get_unmapped_area(), mm/huge_memory.c
//! __thp_get_unmapped_area()): the THP rule for 2 MiB multiples, its
//! unpadded fallback, and that a move is placed as an mmap of its new
//! length would be (anonymous pgoff is treated as 0, whatever the source
//! VMA's vm_pgoff; docs/divergences.md D2).

use ptlab_model::{ArchKind, MapFlags, Model, ModelConfig, MremapFlags, Prot, PMD_SIZE};

const K: u64 = 1024;
const M: u64 = 1024 * K;
const B: u64 = 0x7f00_0000_0000; // 2 MiB aligned

fn model() -> Model {
    Model::new(ModelConfig::for_arch(ArchKind::X86_64))
}

fn fixed(m: &mut Model, addr: u64, len: u64, prot: Prot) {
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    m.mmap(1, addr, len, prot, f).unwrap();
}

fn floating(m: &mut Model, len: u64) -> Result<u64, ptlab_model::Errno> {
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
    m.mmap(1, 0, len, Prot::READ | Prot::WRITE, f)
}

/// A moving mremap goes where a floating mmap of the new length would go,
/// whatever the source's page offset: 2 MiB-aligned for 2 MiB multiples.
#[test]
fn a_move_is_placed_like_an_mmap_of_its_new_length() {
    for off in [0, 64 * K, M, 2 * M - 4 * K] {
        for new_len in [2 * M, 4 * M, 2 * M + 64 * K] {
            let mut m = model();
            let src = B + off;
            fixed(&mut m, src, 16 * K, Prot::READ | Prot::WRITE);
            m.write(1, src, src).unwrap();
            // Block growing in place.
            fixed(&mut m, src + 16 * K, 4 * K, Prot::empty());
            let mut probe = m.clone();
            let expect = floating(&mut probe, new_len).unwrap();
            let got = m
                .mremap(1, src, 16 * K, new_len, MremapFlags::MAYMOVE, 0)
                .unwrap();
            assert_eq!(got, expect, "off {off:#x} len {new_len:#x}");
            if new_len.is_multiple_of(PMD_SIZE) {
                assert_eq!(got % PMD_SIZE, 0, "off {off:#x} len {new_len:#x}");
            }
            assert_eq!(m.read(1, got).unwrap(), src);
        }
    }
}

/// A VMA moved earlier keeps its first vm_pgoff; moving it again to a
/// 2 MiB multiple still lands 2 MiB-aligned.
#[test]
fn a_moved_vma_is_placed_without_its_pgoff() {
    let mut m = model();
    fixed(&mut m, B + 64 * K, 16 * K, Prot::READ | Prot::WRITE);
    m.write(1, B + 64 * K, 7).unwrap();
    let to = B + 64 * M + 4 * K;
    let r = m
        .mremap(
            1,
            B + 64 * K,
            16 * K,
            16 * K,
            MremapFlags::MAYMOVE | MremapFlags::FIXED,
            to,
        )
        .unwrap();
    assert_eq!(r, to);
    let v = m.mm(1).unwrap().vmas.find(to).unwrap().clone();
    assert_eq!(v.pgoff, (B + 64 * K) >> 12, "pgoff kept by the move");
    fixed(&mut m, to + 16 * K, 4 * K, Prot::empty());
    let got = m
        .mremap(1, to, 16 * K, 4 * M, MremapFlags::MAYMOVE, 0)
        .unwrap();
    assert_eq!(got % PMD_SIZE, 0);
    assert_eq!(m.read(1, got).unwrap(), 7);
}

/// When no gap holds len + 2 MiB, __thp_get_unmapped_area() gives up and
/// the unpadded search places the mapping, unaligned.
#[test]
fn without_room_for_the_padding_the_placement_is_unaligned() {
    let cfg = ModelConfig::for_arch(ArchKind::X86_64);
    let (base, low) = (cfg.mmap_base, cfg.mmap_min_addr.max(4 * K));
    let mut m = Model::new(cfg);
    // Leave exactly one 4 MiB gap below mmap_base, 4 KiB off alignment.
    let gap = base - 4 * K - 4 * M;
    fixed(&mut m, low, gap - low, Prot::empty());
    fixed(&mut m, base - 4 * K, 4 * K, Prot::empty());
    assert_ne!(gap % PMD_SIZE, 0);
    let mut probe = m.clone();
    assert_eq!(floating(&mut probe, 4 * M), Ok(gap));
    // 2 MiB more than the gap: no room either way.
    let mut probe = m.clone();
    assert_eq!(floating(&mut probe, 6 * M), Err(ptlab_model::Errno::ENOMEM));
    // With room for the padding it is aligned again.
    m.munmap(1, base - 4 * K, 4 * K).unwrap();
    let got = floating(&mut m, 4 * M).unwrap();
    assert_eq!(got % PMD_SIZE, 0);
}
