//! Property test: page contents beyond the tag (`write ... fill BYTE`,
//! tag writes, unaligned UFFDIO_COPY is covered by the uffd unit tests)
//! through copy-on-write, fork/exit, MADV_DONTNEED, MADV_PAGEOUT with swap
//! and THP knobs. Every byte the parent reads equals a byte-for-byte
//! shadow of what it wrote (a child's writes never show), no frame keeps
//! contents after it is freed (the invariant checker), and a dropped page
//! reads as zero.

mod common;

use proptest::prelude::*;
use ptlab_model::{
    Advice, ArchKind, MapFlags, Model, ModelConfig, PageState, Prot, ThpKnob, ThpMode,
};

const BASE: u64 = 0x7f00_0000_0000;
const PAGES: u64 = 32;
const LEN: u64 = PAGES * 4096;

#[derive(Clone, Debug)]
enum Op {
    Fill {
        child: bool,
        off: u64,
        len: u64,
        byte: u8,
    },
    Tag {
        child: bool,
        page: u64,
        tag: u64,
    },
    DontNeed {
        page: u64,
    },
    PageOut {
        page: u64,
        n: u64,
    },
    Fork,
    ExitChild,
    Thp {
        on: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), 0..LEN, 1..3 * 4096u64, any::<u8>())
            .prop_map(|(child, off, len, byte)| Op::Fill { child, off, len: len.min(LEN - off), byte }),
        3 => (any::<bool>(), 0..PAGES, any::<u64>()).prop_map(|(child, page, tag)| Op::Tag { child, page, tag }),
        1 => (0..PAGES).prop_map(|page| Op::DontNeed { page }),
        2 => (0..PAGES, 1..8u64).prop_map(|(page, n)| Op::PageOut { page, n }),
        1 => Just(Op::Fork),
        1 => Just(Op::ExitChild),
        1 => any::<bool>().prop_map(|on| Op::Thp { on }),
    ]
}

/// Apply `op`; `shadow` is the parent's view of its bytes.
fn apply(m: &mut Model, shadow: &mut [u8], op: &Op) {
    let main = m.main_pid();
    let child = m.pids().find(|&p| p != main);
    let who = |c: bool| if c { child.unwrap_or(main) } else { main };
    match *op {
        Op::Fill {
            child: c,
            off,
            len,
            byte,
        } => {
            let pid = who(c);
            m.fill_bytes(pid, BASE + off, len, byte).expect("fill");
            if pid == main {
                shadow[off as usize..(off + len) as usize].fill(byte);
            }
        }
        Op::Tag {
            child: c,
            page,
            tag,
        } => {
            let pid = who(c);
            m.write(pid, BASE + page * 4096, tag).expect("write");
            if pid == main {
                let at = (page * 4096) as usize;
                shadow[at..at + 8].copy_from_slice(&tag.to_le_bytes());
            }
        }
        Op::DontNeed { page } => {
            m.madvise(main, BASE + page * 4096, 4096, Advice::DontNeed)
                .expect("dontneed");
            let at = (page * 4096) as usize;
            shadow[at..at + 4096].fill(0);
        }
        Op::PageOut { page, n } => {
            let n = n.min(PAGES - page);
            let _ = m.madvise(main, BASE + page * 4096, n * 4096, Advice::PageOut);
        }
        Op::Fork => {
            if child.is_none() {
                m.fork(main).expect("fork");
            }
        }
        Op::ExitChild => {
            if let Some(c) = child {
                m.exit(c).expect("exit");
            }
        }
        Op::Thp { on } => {
            let mode = if on { ThpMode::Always } else { ThpMode::Never };
            m.set_thp(ThpKnob::Size(4), mode).expect("knob");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn bytes_follow_the_parent_through_cow_swap_and_exit(ops in prop::collection::vec(op(), 1..40)) {
        let mut m = Model::new(ModelConfig::for_arch(ArchKind::X86_64));
        m.set_swap(64 << 20).expect("swap");
        let main = m.main_pid();
        let flags = MapFlags::PRIVATE | MapFlags::ANONYMOUS | MapFlags::FIXED;
        m.mmap(main, BASE, LEN, Prot::READ | Prot::WRITE, flags).expect("mmap");
        let mut shadow = vec![0u8; LEN as usize];
        for (i, op) in ops.iter().enumerate() {
            apply(&mut m, &mut shadow, op);
            if let Err(e) = m.check_invariants() {
                prop_assert!(false, "after step {i} ({op:?}): {e:#?}");
            }
            // Swapped-out pages come back with their bytes: read them in.
            for p in 0..PAGES {
                let va = BASE + p * 4096;
                if matches!(m.observe_pages(main, va, va + 4096)[0].state, PageState::Swapped { .. }) {
                    m.read(main, va).expect("swap-in");
                }
            }
            let got = m.peek_bytes(main, BASE, LEN);
            for (k, (g, want)) in got.iter().zip(&shadow).enumerate() {
                // A page never touched is not present; it would read zero.
                prop_assert_eq!(g.unwrap_or(0), *want, "byte {:#x} after step {} ({:?})", k, i, op);
            }
        }
        // Everything freed: no frame keeps contents.
        let child = m.pids().find(|&p| p != main);
        if let Some(c) = child {
            m.exit(c).expect("exit");
        }
        m.munmap(main, BASE, LEN).expect("munmap");
        prop_assert!(m.check_invariants().is_ok());
    }
}
