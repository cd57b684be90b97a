//! munmap(2) over random layouts of private anonymous VMAs — read-only and
//! writable neighbours (so they stay separate VMAs), sealed ranges
//! (mseal), written pages — against a page-by-page reference: the result
//! (EPERM when a sealed VMA meets the range, EINVAL for a zero length),
//! and after every step which pages are mapped, read-only and sealed.
//!
//! Issue 14 (fourteenth session, the unmap part): `munmap_gather()` answers
//! the sealed check and the last VMA's end from the first VMA when that one
//! reaches the range's end, without searching the tree again; the ranges
//! here end inside, at and past the first VMA, and span several VMAs, so
//! both the shortcut and the searches run. A sealed check skipped or a
//! split at the end left out changes the result or the pages left mapped.

use proptest::prelude::*;
use ptlab_model::{ArchKind, Errno, MapFlags, Model, ModelConfig, Prot};

const BASE: u64 = 0x7f00_0000_0000;
const P: u64 = 4096;
/// The arena: 48 pages (VMAs, holes, ranges past both ends).
const PAGES: u64 = 48;

#[derive(Clone, Debug)]
enum Op {
    Mmap { page: u64, n: u64, ro: bool },
    Seal { page: u64, n: u64 },
    Write { page: u64 },
    Munmap { page: u64, n: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..PAGES, 1..12u64, any::<bool>()).prop_map(|(page, n, ro)| Op::Mmap { page, n, ro }),
        1 => (0..PAGES, 1..8u64).prop_map(|(page, n)| Op::Seal { page, n }),
        2 => (0..PAGES).prop_map(|page| Op::Write { page }),
        4 => (0..PAGES, 0..16u64).prop_map(|(page, n)| Op::Munmap { page, n }),
    ]
}

/// Per page of the arena: `None` unmapped, else `(read_only, sealed)`.
type Pages = Vec<Option<(bool, bool)>>;

/// The model's pages, read off its VMA tree.
fn model_pages(m: &Model) -> Pages {
    let mut out = vec![None; PAGES as usize];
    for v in m.mm(1).expect("pid 1").vmas.iter() {
        let ro = !v.flags.contains(ptlab_model::vma::VmFlags::WRITE);
        let sealed = v.flags.contains(ptlab_model::vma::VmFlags::SEALED);
        for a in (v.start..v.end).step_by(P as usize) {
            if (BASE..BASE + PAGES * P).contains(&a) {
                out[((a - BASE) / P) as usize] = Some((ro, sealed));
            }
        }
    }
    out
}

fn run(arch: ArchKind, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut m = Model::new(ModelConfig::for_arch(arch));
    let mut want: Pages = vec![None; PAGES as usize];
    let f = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
    for (k, o) in ops.iter().enumerate() {
        match *o {
            Op::Mmap { page, n, ro } => {
                let n = n.min(PAGES - page);
                let prot = if ro {
                    Prot::READ
                } else {
                    Prot::READ | Prot::WRITE
                };
                // Mirrored: a MAP_FIXED over a sealed VMA fails and
                // changes nothing.
                if m.mmap(1, BASE + page * P, n * P, prot, f).is_ok() {
                    for p in page..page + n {
                        want[p as usize] = Some((ro, false));
                    }
                }
            }
            Op::Seal { page, n } => {
                let n = n.min(PAGES - page);
                // Mirrored: mseal of a range with a hole fails and
                // changes nothing.
                if m.mseal(1, BASE + page * P, n * P, 0).is_ok() {
                    for p in page..page + n {
                        let s = want[p as usize].as_mut().expect("mseal of a mapped page");
                        s.1 = true;
                    }
                }
            }
            Op::Write { page } => {
                if want[page as usize] == Some((false, false))
                    || want[page as usize] == Some((false, true))
                {
                    m.write(1, BASE + page * P, k as u64)
                        .expect("writable page");
                }
            }
            Op::Munmap { page, n } => {
                // Ranges may run past the arena's end (nothing mapped there).
                let got = m.munmap(1, BASE + page * P, n * P);
                let end = (page + n).min(PAGES);
                let expect = if n == 0 {
                    Err(Errno::EINVAL)
                } else if (page..end).any(|p| want[p as usize].is_some_and(|s| s.1)) {
                    Err(Errno::EPERM)
                } else {
                    Ok(())
                };
                prop_assert_eq!(got, expect, "step {}: {:?}", k, o);
                if expect.is_ok() {
                    for p in page..end {
                        want[p as usize] = None;
                    }
                }
            }
        }
        prop_assert_eq!(model_pages(&m), want.clone(), "step {}: {:?}", k, o);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn munmap_equals_a_page_reference(ops in prop::collection::vec(op(), 1..40)) {
        run(ArchKind::X86_64, &ops)?;
        run(ArchKind::Arm64, &ops)?;
    }
}

/// The shortcut's cases written out: a range ending inside, at and past a
/// lone VMA, and one over a sealed VMA reached only after the first.
#[test]
fn munmap_of_one_vma_and_of_a_sealed_neighbour() {
    use Op::*;
    let cases: &[&[Op]] = &[
        &[
            Mmap {
                page: 4,
                n: 8,
                ro: false,
            },
            Write { page: 5 },
            Munmap { page: 4, n: 3 },
        ],
        &[
            Mmap {
                page: 4,
                n: 8,
                ro: false,
            },
            Munmap { page: 6, n: 6 },
        ],
        &[
            Mmap {
                page: 4,
                n: 8,
                ro: false,
            },
            Munmap { page: 6, n: 9 },
        ],
        &[
            Mmap {
                page: 4,
                n: 4,
                ro: false,
            },
            Mmap {
                page: 8,
                n: 4,
                ro: true,
            },
            Seal { page: 8, n: 4 },
            Munmap { page: 5, n: 4 },
            Munmap { page: 5, n: 3 },
        ],
        &[
            Mmap {
                page: 4,
                n: 4,
                ro: false,
            },
            Seal { page: 4, n: 4 },
            Munmap { page: 5, n: 1 },
            Munmap { page: 0, n: 5 },
        ],
    ];
    for ops in cases {
        run(ArchKind::X86_64, ops).unwrap();
    }
}
