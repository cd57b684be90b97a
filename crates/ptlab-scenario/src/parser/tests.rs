//! Parser tests: accepted forms, AST shapes and exact error messages.

use super::*;

fn ok(src: &str) -> Script {
    match parse("t.ptl", src) {
        Ok(s) => s,
        Err(e) => panic!("unexpected parse error: {e}\nsource:\n{src}"),
    }
}

fn err(src: &str) -> String {
    match parse("t.ptl", src) {
        Ok(_) => panic!("expected a parse error for:\n{src}"),
        Err(e) => e.to_string(),
    }
}

fn kinds(script: &Script) -> Vec<&StmtKind> {
    script.body.iter().map(|s| &s.kind).collect()
}

#[test]
fn whole_language_parses() {
    let src = r#"
# Every statement form once.
let base = 0x7f00_0000_0000
let len = 2 * PMD + 64K        # trailing comment
p = mmap len
expect ok
q = mmap 4K at base + PUD noreplace prot r noreserve populate
expect ret == base + PUD
mmap 4K at base fixed prot none
expect errno EEXIST
mmap 4K at base prot rwx
munmap q 4K
madvise p len hugepage
mremap p 4K 8K maymove fixed base dontunmap
expect errno EINVAL
mprotect p 4K rx
fork child
@child write p 64K tag=7
@child
exit
@main
uffd open
uffd register p 64K missing+wp
uffd unregister p 64K
uffd copy p p 4K tag=3
uffd zeropage p 4K
uffd move p p 4K allow_src_holes dontwake
read p
read p 2M
write p 4K
expect segv
thp enabled always
thp 64K inherit
thp use_zero_page 0
repeat 4 as i
  repeat 2
    write p + i * 64K tag=i
  end
end
f = pfn p
expect pfn p == f
expect pfn p + 4K != f
expect maps
  p .. p + len rw-p
  base .. base + 4K ---p
  q .. q + 4K r--p
end
expect maps empty
expect page p 64K anon folio=64K idx=0 pte X !AX cnt=1 tag=p samefolio
expect page p none
expect page p 4K zero
expect page p hugezero pmd order=9 !X AX
expect stat 64kB/anon_fault_alloc == 1
expect stat vmstat/thp_split_pmd == 0
expect vmflags p has hg rd
expect vmflags p lacks nh
expect anonhuge p == 2M
expect invariants
observe
observe maps pages
let x = align_up(p + 1, 64K) - align_down(p, PAGE) | 1 << 3 & 0xff >> 1 % 3
let y = -PAGE & (x + 1) / 2
"#;
    let s = ok(src);
    assert_eq!(s.names, vec!["base", "len", "p", "q", "i", "f", "x", "y"]);
    // Checks attach to the statement before them.
    match &s.body[2].kind {
        StmtKind::Op {
            bind: Some(NameId(2)),
            op: Op::Syscall(Syscall::Mmap { .. }),
            check: Some(c),
        } => {
            assert_eq!(c.kind, CheckKind::Ok);
            assert_eq!(c.pos, Pos { line: 6, column: 8 });
        }
        other => panic!("unexpected {other:?}"),
    }
    match &s.body[3].kind {
        StmtKind::Op {
            op:
                Op::Syscall(Syscall::Mmap {
                    placement,
                    prot,
                    noreserve,
                    populate,
                    addr: Some(_),
                    ..
                }),
            check:
                Some(Check {
                    kind: CheckKind::Ret(_),
                    ..
                }),
            ..
        } => {
            assert_eq!(*placement, Placement::NoReplace);
            assert_eq!(*prot, Prot::READ);
            assert!(*noreserve && *populate);
        }
        other => panic!("unexpected {other:?}"),
    }
    // `@child write` is prefixed; `@child` alone is a switch.
    let prefixed = s
        .body
        .iter()
        .find(|st| st.process.as_deref() == Some("child"))
        .unwrap();
    assert_eq!(
        prefixed.pos,
        Pos {
            line: 18,
            column: 8
        }
    );
    assert!(kinds(&s)
        .iter()
        .any(|k| matches!(k, StmtKind::Switch { process } if process == "child")));
}

#[test]
fn rlimit_capability_and_locked_forms_and_errors() {
    let s = ok(
        "setrlimit as 16K\nsetrlimit memlock unlimited\ncapability drop ipc_lock\n\
                mmap 4K locked\nexpect vmlck == 8K\n",
    );
    let k = kinds(&s);
    assert!(matches!(
        k[0],
        StmtKind::Op {
            op: Op::Syscall(Syscall::Setrlimit {
                resource: ptlab_model::Resource::As,
                bytes: Some(Expr::Num(16384)),
            }),
            ..
        }
    ));
    assert!(matches!(
        k[1],
        StmtKind::Op {
            op: Op::Syscall(Syscall::Setrlimit {
                resource: ptlab_model::Resource::Memlock,
                bytes: None,
            }),
            ..
        }
    ));
    assert!(matches!(
        k[2],
        StmtKind::Op {
            op: Op::Syscall(Syscall::CapDropIpcLock),
            ..
        }
    ));
    assert!(matches!(
        k[3],
        StmtKind::Op {
            op: Op::Syscall(Syscall::Mmap { locked: true, .. }),
            ..
        }
    ));
    assert!(matches!(k[4], StmtKind::Expect(Expect::VmLck { .. })));
    let e = err("setrlimit stack 8M\n");
    assert!(
        e.contains("t.ptl:1:11") && e.contains("as, data, memlock"),
        "{e}"
    );
    let e = err("setrlimit as\n");
    assert!(e.contains("'unlimited'"), "{e}");
    let e = err("capability drop sys_admin\n");
    assert!(e.contains("ipc_lock"), "{e}");
    let e = err("capability raise ipc_lock\n");
    assert!(e.contains("'drop'"), "{e}");
    let e = err("mmap 4K locked locked\n");
    assert!(e.contains("duplicate option 'locked'"), "{e}");
    let e = err("expect vmlck 8K\n");
    assert!(e.contains("'=='"), "{e}");
    let s = ok("n = fill 0x200000000000 headroom 5\n");
    assert!(matches!(
        kinds(&s)[0],
        StmtKind::Op {
            bind: Some(_),
            op: Op::Syscall(Syscall::Fill { .. }),
            ..
        }
    ));
    let e = err("fill 0x200000000000 5\n");
    assert!(e.contains("'headroom'"), "{e}");
}

#[test]
fn prctl_forms_and_errors() {
    let s =
        ok("prctl thp_disable 1 except_advised\nv = prctl get_thp_disable\nprctl thp_disable 0\n");
    assert!(matches!(
        kinds(&s)[0],
        StmtKind::Op {
            op: Op::Syscall(Syscall::PrctlSetThpDisable {
                except_advised: true,
                ..
            }),
            ..
        }
    ));
    assert!(matches!(
        kinds(&s)[1],
        StmtKind::Op {
            bind: Some(_),
            op: Op::Syscall(Syscall::PrctlGetThpDisable),
            ..
        }
    ));
    let e = err("prctl set_name x\n");
    assert!(e.contains("t.ptl:1:7"), "{e}");
    assert!(e.contains("thp_disable"), "{e}");
    let e = err("prctl thp_disable 1 sometimes\n");
    assert!(e.contains("except_advised"), "{e}");
    let e = err("prctl thp_disable\n");
    assert!(e.contains("a value (0 or 1)"), "{e}");
}

#[test]
fn mmap_defaults_and_options() {
    let s = ok("mmap 64K");
    match &s.body[0].kind {
        StmtKind::Op {
            op:
                Op::Syscall(Syscall::Mmap {
                    len,
                    addr,
                    placement,
                    prot,
                    noreserve,
                    populate,
                    locked: false,
                    prot_raw: None,
                    flags: None,
                }),
            ..
        } => {
            assert_eq!(*len, Expr::Num(64 << 10));
            assert!(addr.is_none());
            assert_eq!(*placement, Placement::Hint);
            assert_eq!(*prot, Prot::READ | Prot::WRITE);
            assert!(!noreserve && !populate);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        err("mmap 4K fixed noreplace"),
        "t.ptl:1:15: 'fixed' and 'noreplace' cannot be combined"
    );
    assert_eq!(
        err("mmap 4K populate populate"),
        "t.ptl:1:18: duplicate option 'populate'"
    );
    assert_eq!(
        err("mmap 4K populat"),
        "t.ptl:1:9: expected an mmap option (at, fixed, noreplace, prot, noreserve, populate, locked, flags), found 'populat' (did you mean 'populate'?)"
    );
    assert_eq!(
        err("mmap 4K prot rwz"),
        "t.ptl:1:14: expected a protection (r, rw, rwx, rx, w, x or none), found 'rwz' (did you mean 'rw'?)"
    );
}

#[test]
fn error_mmap_at_without_size() {
    // The example from the language brief.
    let src = "# setup\nlet a = 1\n\nptr = mmap at 4K\n";
    assert_eq!(
        err(src),
        "t.ptl:4:12: expected a size or expression after 'mmap', found 'at'"
    );
}

#[test]
fn error_positions_and_suggestions() {
    assert_eq!(
        err("let size = 4K\nmmap sise"),
        "t.ptl:2:6: unknown name 'sise' (did you mean 'size'?)"
    );
    assert_eq!(
        err("mmpa 4K"),
        "t.ptl:1:1: expected a statement, found 'mmpa' (did you mean 'mmap'?)"
    );
    assert_eq!(
        err("let p = 1\np 4K"),
        "t.ptl:2:1: expected a statement, found 'p'; to assign to 'p' write 'let p = EXPR'"
    );
    assert_eq!(
        err("observe\nexpect ok"),
        "t.ptl:2:1: 'expect ok' must directly follow the syscall, read/write or thp line whose result it checks"
    );
    assert_eq!(
        err("mmap 0\nexpect errno EINVL"),
        "t.ptl:2:14: unknown errno 'EINVL' (did you mean 'EINVAL'?)"
    );
    assert_eq!(
        err("mmap 4K\nexpect segv"),
        "t.ptl:2:8: 'expect segv' only follows read or write; a syscall reports errors with 'expect errno NAME'"
    );
    assert_eq!(
        err("read 0\nexpect errno EFAULT"),
        "t.ptl:2:8: read and write do not fail with an errno; use 'expect segv', 'expect uffd' or 'expect ok'"
    );
    assert_eq!(
        err("mmap 4K\nexpect ok\nexpect ok"),
        "t.ptl:3:1: only one 'expect ok|errno|ret|segv|uffd' line may follow a statement (line 2 already checks it)"
    );
    assert_eq!(err("mmap 64kB"), "t.ptl:1:6: invalid number '64kB': unknown size suffix 'kB' (write '64K'; suffixes are K, M, G, T)");
    assert_eq!(
        err("let x = (1 + 2"),
        "t.ptl:1:15: expected ')' to close the '(' at column 9, found end of line"
    );
    assert_eq!(
        err("let x = 1 +"),
        "t.ptl:1:12: expected an operand after '+', found end of line"
    );
    assert_eq!(
        err("let x = 1 2"),
        "t.ptl:1:11: expected end of line after the expression, found '2'"
    );
    assert_eq!(
        err("let mmap = 1"),
        "t.ptl:1:5: 'mmap' is a reserved word and cannot be used as a name"
    );
    assert_eq!(
        err("let PAGE = 1"),
        "t.ptl:1:5: 'PAGE' is a reserved word and cannot be used as a name"
    );
    assert_eq!(
        err("p = 4K"),
        "t.ptl:1:5: expected a syscall (mmap, munmap, madvise, mremap, mprotect, mlock, munlock, mseal, fork, exit, uffd) or 'pfn' after 'p =', found '4K'; to bind an expression write 'let p = ...'"
    );
    assert_eq!(
        err("x = write 0"),
        "t.ptl:1:5: 'write' has no result to bind; only syscalls and 'pfn' can follow 'x ='"
    );
    assert_eq!(err("end"), "t.ptl:1:1: 'end' without a matching 'repeat'");
    assert_eq!(
        err("repeat 3\n  read 0\n"),
        "t.ptl:1:1: 'repeat' at line 1 is never closed: expected 'end' before end of file"
    );
    assert_eq!(
        err("repeat 3\nend extra"),
        "t.ptl:2:5: expected end of line after 'end', found 'extra'"
    );
    assert_eq!(
        err("fork kid\n@kdi write 0"),
        "t.ptl:2:2: unknown process 'kdi' (did you mean 'kid'?); processes are 'main' and those created by 'fork NAME'"
    );
    assert_eq!(
        err("@main @main read 0"),
        "t.ptl:1:7: only one '@process' prefix is allowed per line"
    );
    assert_eq!(
        err("fork main"),
        "t.ptl:1:6: the first process is already called 'main'; pick another name"
    );
    assert_eq!(
        err("thp enable always"),
        "t.ptl:1:5: expected 'enabled', 'use_zero_page' or a folio size such as 64K after 'thp', found 'enable' (did you mean 'enabled'?)"
    );
    assert_eq!(
        err("thp use_zero_page 2"),
        "t.ptl:1:19: expected 0 or 1 after 'thp use_zero_page', found '2'"
    );
    assert_eq!(
        err("thp 64K alway"),
        "t.ptl:1:9: expected a THP mode (always, inherit, madvise or never), found 'alway' (did you mean 'always'?)"
    );
    assert_eq!(
        err("madvise 0 4K dontneeed"),
        "t.ptl:1:14: expected an advice (dontneed, hugepage, nohugepage, ..., or 'advice VALUE'), found 'dontneeed' (did you mean 'dontneed'?)"
    );
    assert_eq!(
        err("read 0 tag=1"),
        "t.ptl:1:8: 'tag=' only applies to write; read checks tags with 'expect page ... tag=N'"
    );
    assert_eq!(
        err("write 0 tga=1"),
        "t.ptl:1:9: expected 'tag=EXPR', 'fill BYTE' or end of line, found 'tga' (did you mean 'tag'?)"
    );
    assert_eq!(
        err("write 0 tag 1"),
        "t.ptl:1:13: expected '=' after 'tag' (write tag=VALUE), found '1'"
    );
    assert_eq!(err("let x = 1 ; 2"), "t.ptl:1:11: unexpected character ';'");
    assert_eq!(err("uffd regster 0 4K missing"), "t.ptl:1:6: expected a uffd operation (open, create, api, register, unregister, copy, zeropage, move), found 'regster' (did you mean 'register'?)");
    assert_eq!(
        err("uffd register 0 4K wp+wp"),
        "t.ptl:1:23: mode 'wp' given twice"
    );
    assert_eq!(
        err("mremap 0 4K 8K maymove maymove"),
        "t.ptl:1:24: duplicate option 'maymove'"
    );
    assert_eq!(
        err("pfn 0"),
        "t.ptl:1:1: 'pfn' binds a frame handle and must be assigned: write 'NAME = pfn ADDR'"
    );
    assert_eq!(
        err("let x = align_up(1 2)"),
        "t.ptl:1:20: expected ',' between the arguments of 'align_up', found '2'"
    );
}

#[test]
fn expect_errors() {
    assert_eq!(
        err("expect mpas"),
        "t.ptl:1:8: expected what to expect (maps, page, pfn, stat, vmflags, anonhuge, lazyfree, vmlck, bytes, value, invariants), found 'mpas' (did you mean 'maps'?)"
    );
    assert_eq!(err("expect page 0"), "t.ptl:1:14: expected a length or page attributes (none, zero, anon, order=N, ...), found end of line");
    assert_eq!(err("expect page 0 4K"), "t.ptl:1:17: expected at least one page attribute (none, zero, anon, order=N, ...), found end of line");
    assert!(
        err("expect page 0 anonn").starts_with("t.ptl:1:15: expected a page attribute (none, zero")
    );
    assert!(err("expect page 0 anonn").ends_with("found 'anonn' (did you mean 'anon'?)"));
    assert_eq!(
        err("expect page 0 order 4"),
        "t.ptl:1:21: expected '=' after 'order' (write order=VALUE), found '4'"
    );
    assert_eq!(
        err("expect page 0 !anon"),
        "t.ptl:1:16: expected 'X' or 'AX' after '!', found 'anon'"
    );
    assert_eq!(
        err("expect maps\n  0 .. 4K rw-p\n"),
        "t.ptl:1:1: 'expect maps' at line 1 is never closed: expected 'end' before end of file"
    );
    assert_eq!(
        err("expect maps\n  0 4K rw-p\nend"),
        "t.ptl:2:5: expected '..' between the start and end address, found '4K'"
    );
    assert_eq!(
        err("expect maps\n  0 .. 4K rw\nend"),
        "t.ptl:2:11: expected permissions such as rw-p after the end address, found 'rw'"
    );
    assert_eq!(err("expect maps nonempty"), "t.ptl:1:13: expected end of line after 'expect maps' (list the VMAs on the following lines, then 'end'; or write 'expect maps empty'), found 'nonempty'");
    assert_eq!(err("expect stat 64kB/anon_fault_alloc"), "t.ptl:1:13: expected a stat key followed by '== VALUE' (e.g. 'expect stat 64kB/anon_fault_alloc == 1'), found '64kB'");
    assert_eq!(err("expect stat == 1"), "t.ptl:1:13: expected a stat key such as 64kB/anon_fault_alloc or vmstat/thp_fault_alloc, found '=='");
    assert_eq!(err("expect stat a + b == 1"), "t.ptl:1:14: unexpected ' ' in stat key 'a + b' (keys look like 64kB/anon_fault_alloc or vmstat/thp_fault_alloc)");
    assert_eq!(err("expect vmflags 0 has"), "t.ptl:1:21: expected VmFlags mnemonics (such as hg, nh, dd) after 'has', found end of line");
    assert_eq!(err("expect vmflags 0 has hugepage"), "t.ptl:1:22: VmFlags mnemonics are two characters, like hg or nh; found 'hugepage' (MADV_HUGEPAGE shows as 'hg')");
    assert_eq!(
        err("expect vmflags 0 with hg"),
        "t.ptl:1:18: expected 'has' or 'lacks' after the address, found 'with'"
    );
    assert_eq!(
        err("expect anonhuge 0 2M"),
        "t.ptl:1:19: expected '==' after the address, found '2M'"
    );
    assert_eq!(
        err("expect value 1 = 2"),
        "t.ptl:1:16: expected '==' or '!=' after the expression, found '='"
    );
    assert_eq!(err("expect pfn 0 == f"), "t.ptl:1:17: unknown name 'f'");
    assert_eq!(
        err("let f = 1\nexpect pfn 0 == f"),
        "t.ptl:2:17: 'f' is a number (bound at line 1), not a frame handle from 'pfn'"
    );
    assert_eq!(err("f = pfn 0\nlet x = f + 1"), "t.ptl:2:9: 'f' is a frame handle (bound by 'pfn' at line 1); it can only be used in 'expect pfn ADDR == f'");
    assert_eq!(
        err("f = pfn 0\nlet f = 1"),
        "t.ptl:2:5: 'f' holds a frame handle (bound at line 1) and cannot be rebound to a number"
    );
    assert_eq!(
        err("expect invariants now"),
        "t.ptl:1:19: expected end of line after 'expect invariants', found 'now'"
    );
    assert_eq!(
        err("observe map"),
        "t.ptl:1:9: expected a section to observe (maps, smaps, pages, stats or numa), found 'map' (did you mean 'maps'?)"
    );
}

#[test]
fn stat_keys_are_taken_verbatim() {
    let s = ok("expect stat 64kB/anon_fault_alloc == 1\nexpect stat vmstat/thp_split_pmd == 0");
    match &s.body[0].kind {
        StmtKind::Expect(Expect::Stat { key, value }) => {
            assert_eq!(key, "64kB/anon_fault_alloc");
            assert_eq!(*value, Expr::Num(1));
        }
        other => panic!("unexpected {other:?}"),
    }
    match &s.body[1].kind {
        StmtKind::Expect(Expect::Stat { key, .. }) => assert_eq!(key, "vmstat/thp_split_pmd"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn maps_block_and_perms() {
    let s = ok("let p = 0x10000\nexpect maps\n  p .. p + 4K rw-p\n\n  # comment\n  p+4K..p+8K ---p\n  p+8K .. p+12K rwxp\nend");
    match &s.body[1].kind {
        StmtKind::Expect(Expect::Maps(lines)) => {
            let perms: Vec<&str> = lines.iter().map(|l| l.perms.as_str()).collect();
            assert_eq!(perms, vec!["rw-p", "---p", "rwxp"]);
            assert_eq!(lines[1].pos, Pos { line: 6, column: 3 });
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn optional_lengths_versus_attributes() {
    // A bound name is a length; an attribute word is an attribute.
    let s =
        ok("let n = 8K\nexpect page 0 n anon\nexpect page 0 anon\nwrite 0 n tag=1\nwrite 0 tag=n");
    let lens: Vec<bool> = s
        .body
        .iter()
        .filter_map(|st| match &st.kind {
            StmtKind::Expect(Expect::Page { len, .. }) => Some(len.is_some()),
            StmtKind::Op {
                op: Op::Access(a), ..
            } => Some(a.len.is_some()),
            _ => None,
        })
        .collect();
    assert_eq!(lens, vec![true, false, true, false]);
}

#[test]
fn expression_precedence() {
    let s = ok("let x = 1 + 2 * 3 << 1 | 4 & 6");
    // ((1 + (2*3)) << 1) | (4 & 6)
    let StmtKind::Let { value, .. } = &s.body[0].kind else {
        panic!()
    };
    struct NoEnv;
    impl crate::expr::Env for NoEnv {
        fn int(&self, _: NameId, pos: Pos) -> Result<u64, crate::expr::EvalError> {
            Err(crate::expr::EvalError::new(pos, "none"))
        }
    }
    assert_eq!(
        crate::expr::eval(value, &NoEnv),
        Ok(((1 + 2 * 3) << 1) | (4 & 6))
    );
    let s = ok("let y = 10 - 3 - 2\nlet z = 64 / 4 / 2 % 5\nlet w = -1");
    let vals: Vec<u64> = s
        .body
        .iter()
        .map(|st| match &st.kind {
            StmtKind::Let { value, .. } => crate::expr::eval(value, &NoEnv).unwrap(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(vals, vec![5, 3, u64::MAX]);
}

#[test]
fn nesting_limits_are_errors_not_crashes() {
    let deep_parens = format!("let x = {}1{}", "(".repeat(5000), ")".repeat(5000));
    assert!(err(&deep_parens).contains("nested too deeply"));
    let deep_neg = format!("let x = {}1", "-".repeat(5000));
    assert!(err(&deep_neg).contains("nested too deeply"));
    // Parentheses around a chain still count: 127 levels of (1+1) nest.
    let deep_chain = format!("let x = {}1{}", "(1 + ".repeat(200), ")".repeat(200));
    assert!(err(&deep_chain).contains("nested too deeply"));
    let mut nested = String::new();
    for _ in 0..100 {
        nested.push_str("repeat 1\n");
    }
    for _ in 0..100 {
        nested.push_str("end\n");
    }
    assert!(err(&nested).contains("nested more than"));
}

#[test]
fn crlf_and_blank_lines() {
    let s = ok("p = mmap 4K\r\n\r\n   \r\nexpect ok\r\nwrite p\r\n");
    assert_eq!(s.body.len(), 2);
    assert_eq!(s.body[1].pos, Pos { line: 5, column: 1 });
}

#[test]
fn loop_variable_and_rebinding() {
    let s = ok("repeat 3 as i\n  p = mmap 4K + i * 4K\nend\nmunmap p 4K");
    assert_eq!(s.names, vec!["i", "p"]);
    // Bindings are visible after their definition only.
    assert_eq!(err("let x = y\nlet y = 1"), "t.ptl:1:9: unknown name 'y'");
    // `let x = x + 1` needs an earlier x.
    assert_eq!(err("let x = x + 1"), "t.ptl:1:9: unknown name 'x'");
}

#[test]
fn before_switches() {
    let script = crate::parse(
        "t.ptl",
        "before fork-pte-batch mremap-table-move\nbefore none\n",
    )
    .unwrap();
    let sets: Vec<ptlab_model::Before> = script
        .body
        .iter()
        .filter_map(|s| match s.kind {
            StmtKind::Before(b) => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(
        sets,
        vec![
            ptlab_model::Before::FORK_PTE_BATCH | ptlab_model::Before::MREMAP_TABLE_MOVE,
            ptlab_model::Before::empty()
        ]
    );
    assert!(err("before").contains("expected a seed-change switch name or 'none'"));
    assert!(err("before fork-pte").contains("found 'fork-pte'"));
    assert!(err("before fork-").contains("the rest of the switch name"));
}

#[test]
fn expect_uffd_check() {
    let s = ok("p = mmap 4K\nuffd open\nuffd register p 4K missing\nread p\nexpect uffd\nwrite p 4K tag=1\nexpect uffd");
    let checks: Vec<&CheckKind> = s
        .body
        .iter()
        .filter_map(|st| match &st.kind {
            StmtKind::Op { check: Some(c), .. } => Some(&c.kind),
            _ => None,
        })
        .collect();
    assert_eq!(checks, vec![&CheckKind::Uffd, &CheckKind::Uffd]);
    assert_eq!(
        err("uffd open\nexpect uffd"),
        "t.ptl:2:8: 'expect uffd' only follows read or write (an access that faults to userfaultfd)"
    );
    assert_eq!(
        err("thp enabled never\nexpect uffd"),
        "t.ptl:2:8: 'expect uffd' only follows read or write (an access that faults to userfaultfd)"
    );
    assert_eq!(
        err("observe\nexpect uffd"),
        "t.ptl:2:1: 'expect uffd' must directly follow the syscall, read/write or thp line whose result it checks"
    );
    assert_eq!(
        err("read 0\nexpect uffd\nexpect segv"),
        "t.ptl:3:1: only one 'expect ok|errno|ret|segv|uffd' line may follow a statement (line 2 already checks it)"
    );
}

#[test]
fn mlock_mseal_and_guard_statements() {
    let s = ok("mlock 0x1000 8K\nmlock 0x1000 8K onfault\nmunlock 0x1000 4K\nmseal 0x1000 4K\nexpect errno EPERM\nmadvise 0x1000 4K guard_install\nmadvise 0x1000 4K guard_remove\nexpect page 0x1000 guard\n");
    let k = kinds(&s);
    assert!(matches!(
        k[0],
        StmtKind::Op {
            op: Op::Syscall(Syscall::Mlock { onfault: false, .. }),
            ..
        }
    ));
    assert!(matches!(
        k[1],
        StmtKind::Op {
            op: Op::Syscall(Syscall::Mlock { onfault: true, .. }),
            ..
        }
    ));
    assert!(matches!(
        k[2],
        StmtKind::Op {
            op: Op::Syscall(Syscall::Munlock { .. }),
            ..
        }
    ));
    assert!(matches!(
        k[3],
        StmtKind::Op {
            op: Op::Syscall(Syscall::Mseal { .. }),
            check: Some(_),
            ..
        }
    ));
    assert!(matches!(
        k[4],
        StmtKind::Op {
            op: Op::Syscall(Syscall::Madvise {
                advice: Advice::GuardInstall,
                ..
            }),
            ..
        }
    ));
    assert!(matches!(
        k[6],
        StmtKind::Expect(Expect::Page { attrs, .. }) if attrs[0].kind == PageAttrKind::Guard
    ));
    assert_eq!(
        err("mlock 0x1000 4K onfaul"),
        "t.ptl:1:17: expected 'onfault', 'flags VALUE' or the end of the line, found 'onfaul' (did you mean 'onfault'?)"
    );
}

#[test]
fn uffd_handles_and_api() {
    let s = ok("uffd create\nuffd create v\nuffd open w\nf = uffd api 0xAA features 1 << 7 via v\nuffd register 0x1000 4K missing+wp via v\nuffd copy 0x1000 0x2000 4K tag=3 via w\nuffd move 0x1000 0x2000 4K dontwake via main\nuffd unregister 0x1000 4K\n");
    let k = kinds(&s);
    assert!(matches!(
        k[0],
        StmtKind::Op {
            op: Op::Syscall(Syscall::UffdCreate {
                name: None,
                api: false,
                flags: None
            }),
            ..
        }
    ));
    assert!(matches!(
        k[2],
        StmtKind::Op { op: Op::Syscall(Syscall::UffdCreate { name: Some(n), api: true, flags: None }), .. } if n == "w"
    ));
    match k[3] {
        StmtKind::Op {
            bind: Some(_),
            op: Op::Syscall(Syscall::UffdVia { handle, call }),
            ..
        } => {
            assert_eq!(handle, "v");
            assert!(matches!(
                **call,
                Syscall::UffdApi {
                    features: Some(_),
                    ..
                }
            ));
        }
        other => panic!("{other:?}"),
    }
    match k[6] {
        StmtKind::Op {
            op: Op::Syscall(Syscall::UffdVia { handle, call }),
            ..
        } => {
            assert_eq!(handle, "main");
            assert!(matches!(**call, Syscall::UffdMove { dontwake: true, .. }));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        k[7],
        StmtKind::Op {
            op: Op::Syscall(Syscall::UffdUnregister { .. }),
            ..
        }
    ));
    assert!(err("uffd register 0x1000 4K missing vai v").contains("'via NAME'"));
}

/// No variables (expressions of literals only).
struct NoVars;
impl crate::expr::Env for NoVars {
    fn int(&self, _: NameId, pos: Pos) -> Result<u64, crate::expr::EvalError> {
        Err(crate::expr::EvalError::new(pos, "none"))
    }
}

/// The value of `let x = ...` in a one-statement scenario.
fn let_value(src: &str) -> u64 {
    let s = ok(src);
    match &s.body[0].kind {
        StmtKind::Let { value, .. } => crate::expr::eval(value, &NoVars).unwrap(),
        k => panic!("not a let: {k:?}"),
    }
}

#[test]
fn a_flat_chain_is_not_nesting() {
    // Issue 18: a flat sum of 129 terms was "nested too deeply".
    let sum129 = format!("let x = 1{}", "+1".repeat(128));
    assert_eq!(let_value(&sum129), 129);
    let long = format!("let x = 1{}", " + 1".repeat(10_000));
    assert_eq!(let_value(&long), 10_001);
    // Left-associative, precedence kept, one Chain node per level.
    assert_eq!(let_value("let x = 100 - 10 - 1"), 89);
    assert_eq!(let_value("let x = 2 + 3 * 4 - 6 / 2"), 11);
    assert_eq!(let_value("let x = 1 << 4 >> 2 | 1"), 5);
    assert_eq!(let_value("let x = 0x12345 & -PAGE"), 0x12000);
    let s = ok(&format!("let x = 1{}", "+1".repeat(200)));
    match &s.body[0].kind {
        StmtKind::Let {
            value: Expr::Chain { first, rest },
            ..
        } => {
            assert_eq!(**first, Expr::Num(1));
            assert_eq!(rest.len(), 200);
        }
        k => panic!("{k:?}"),
    }
    // Overflow in the middle of a chain names that operator.
    let e = ok("let x = 1 + 0xffffffffffffffff + 1");
    match &e.body[0].kind {
        StmtKind::Let { value, .. } => {
            let m = crate::expr::eval(value, &NoVars).unwrap_err().to_string();
            assert!(m.starts_with("1:11: arithmetic overflow"), "{m}");
        }
        k => panic!("{k:?}"),
    }
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let s = ok("\u{feff}p = mmap 4K\nwrite p\n");
    assert_eq!(s.body.len(), 2);
    // Columns on line 1 are counted after the mark.
    let e = err("\u{feff}p = mmap 4K zz\n");
    assert!(e.starts_with("t.ptl:1:13:"), "{e}");
    // Only at the very start: elsewhere it is a stray character.
    assert!(err("p = mmap 4K\n\u{feff}write p\n").contains("t.ptl:2:1"));
}

#[test]
fn size_limits_are_errors() {
    let line = format!("let x = 1{}", "+1".repeat(MAX_LINE_BYTES / 2));
    let e = err(&line);
    assert!(e.starts_with("t.ptl:1:1: line is"), "{e}");
    assert!(e.contains("the limit is 65536 bytes"), "{e}");
    // A long comment is harmless and accepted.
    let s = ok(&format!(
        "# {}\nlet x = 1\n",
        "x".repeat(MAX_LINE_BYTES * 2)
    ));
    assert_eq!(s.body.len(), 1);
    let big = "let x = 1\n".repeat(MAX_SOURCE_BYTES / 10 + 1);
    let e = err(&big);
    assert!(e.contains("the limit is 4194304 bytes (4 MiB)"), "{e}");
}
