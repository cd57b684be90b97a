//! `ptlab export-c`: a scenario as a standalone C program, the reproducer
//! a kernel report carries (docs/live.md "Reporting a kernel finding").
//!
//! The program makes the scenario's system calls on the machine it runs
//! on, the way the live backend does (one worker process per scenario
//! process, the same flag values, the same tag convention: a write stores
//! a 64-bit tag at each page's first 8 bytes), and checks each `expect`
//! line from `/proc` (maps, smaps, status, pagemap, kpageflags,
//! kpagecount, PAGEMAP_SCAN, the THP counters), printing `ok line N: ...`
//! or `FAIL line N: ...: expected ... observed ...`. It exits 0 when every
//! check held, 1 when one failed, 2 on a runtime error. It needs nothing
//! but a C compiler: `cc -O2 -Wall -Werror out.c`.
//!
//! The syscall arguments are computed here from the same types the
//! interpreter and the worker use (`MapFlags`, `MremapFlags`, `Advice`,
//! the uffd modes, [`crate::wire`]'s numbers), so each flag has one home.
//! What the C program cannot do faithfully is refused with the line:
//! `setrlimit as|data` (the live backend scopes them around the
//! scenario's own calls), `fill ... headroom` (counts the harness's own
//! VMAs) and a `thp SIZE` whose size is not a constant.

use crate::knobs;
use crate::wire;
use ptlab_model::{
    Advice, MapFlags, MremapFlags, Order, Prot, Resource, ThpKnob, ThpMode, UffdCopyMode,
    UffdMoveMode, UffdRegisterMode, UffdZeropageMode,
};
use ptlab_scenario::ast::*;
use std::fmt::Write as _;

/// The C runtime every exported program starts with.
const RUNTIME: &str = include_str!("export_c/runtime.c");

/// Why a scenario could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{file}:{line}: '{text}' cannot be exported to C: {why}")]
    Unsupported {
        file: String,
        line: u32,
        text: String,
        why: String,
    },
    #[error("{0}")]
    Param(String),
}

/// Which `expect` kinds the C program checks (the rest become comments).
pub const EXPORTED_CHECKS: &str = "expect ok, errno, ret, segv, uffd; expect maps, page \
    (every attribute), pfn, stat, vmflags, anonhuge, lazyfree, vmlck, bytes, value";
/// What the C program leaves as comments.
pub const COMMENT_ONLY: &str = "observe, expect invariants (model-only), before (one kernel)";

/// The C program for `script`; `params` are `--param NAME=VALUE` overrides
/// (checked against the scenario's `param` lines).
pub fn export_c(script: &Script, params: &[(String, String)]) -> Result<String, ExportError> {
    script.check_params(params).map_err(ExportError::Param)?;
    let mut params_v = Vec::new();
    for (k, v) in params {
        let v = ptlab_scenario::parse_param_value(v)
            .map_err(|e| ExportError::Param(format!("--param {k}={v}: {e}")))?;
        params_v.push((k.clone(), v));
    }
    let mut g = Gen {
        script,
        params: params_v,
        procs: vec!["main".to_string()],
        handles: Vec::new(),
        stats: Vec::new(),
        body: String::new(),
        depth: 1,
        tmp: 0,
    };
    g.collect(&script.body);
    let mut handles = g.procs.clone();
    for h in std::mem::take(&mut g.handles) {
        if !handles.contains(&h) {
            handles.push(h);
        }
    }
    g.handles = handles;
    g.block(&script.body)?;
    Ok(g.finish())
}

struct Gen<'a> {
    script: &'a Script,
    params: Vec<(String, u64)>,
    /// Scenario processes: `main`, then each `fork NAME` in order.
    procs: Vec<String>,
    /// uffd handle slots: one per process (its own handle), then the names
    /// `uffd open NAME` / `via NAME` give.
    handles: Vec<String>,
    /// `expect stat` keys, each with a baseline read at start.
    stats: Vec<String>,
    body: String,
    depth: usize,
    tmp: u32,
}

fn c_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '?' => o.push_str("\\?"), // no trigraphs
            c if (' '..='~').contains(&c) => o.push(c),
            c => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    let _ = write!(o, "\\{byte:03o}");
                }
            }
        }
    }
    o.push('"');
    o
}

/// A comment-safe copy of scenario text.
fn c_comment(s: &str) -> String {
    s.replace("*/", "* /").replace("/*", "/ *")
}

impl<'a> Gen<'a> {
    fn collect(&mut self, body: &[Stmt]) {
        for s in body {
            if let Some(p) = &s.process {
                self.add_proc(p);
            }
            match &s.kind {
                StmtKind::Op {
                    op: Op::Syscall(sc),
                    ..
                } => self.collect_syscall(sc),
                StmtKind::Switch { process } => self.add_proc(process),
                StmtKind::Repeat { body, .. } => self.collect(body),
                StmtKind::Expect(Expect::Stat { key, .. }) if !self.stats.contains(key) => {
                    self.stats.push(key.clone())
                }
                _ => {}
            }
        }
    }

    fn collect_syscall(&mut self, sc: &Syscall) {
        match sc {
            Syscall::Fork { child } => self.add_proc(child),
            Syscall::UffdCreate { name: Some(n), .. } => self.handles.push(n.clone()),
            Syscall::UffdVia { handle, call } => {
                self.handles.push(handle.clone());
                self.collect_syscall(call);
            }
            _ => {}
        }
    }

    fn add_proc(&mut self, p: &str) {
        if !self.procs.iter().any(|q| q == p) {
            self.procs.push(p.to_string());
        }
    }

    fn proc_index(&self, p: &str) -> usize {
        self.procs.iter().position(|q| q == p).unwrap_or(0)
    }

    fn handle_slot(&self, h: &str) -> usize {
        self.handles.iter().position(|q| q == h).unwrap_or(0)
    }

    fn line(&mut self, text: &str) {
        for _ in 0..self.depth {
            self.body.push('\t');
        }
        self.body.push_str(text);
        self.body.push('\n');
    }

    fn unsupported(&self, s: &Stmt, why: &str) -> ExportError {
        ExportError::Unsupported {
            file: self.script.file.clone(),
            line: s.pos.line,
            text: s.text.clone(),
            why: why.to_string(),
        }
    }

    fn var(&self, id: NameId) -> String {
        format!("v_{}", self.script.name(id))
    }

    fn set(&self, id: NameId) -> String {
        format!("s_{}", self.script.name(id))
    }

    /// A C expression computing `e` with the language's checked arithmetic.
    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Num(v) => format!("{v:#x}ULL"),
            Expr::Var { id, pos } => format!(
                "var({}, {}, {}, {})",
                self.set(*id),
                self.var(*id),
                c_str(self.script.name(*id)),
                pos.line
            ),
            Expr::Neg(inner) => format!("(0ULL - {})", self.expr(inner)),
            Expr::Chain { first, rest } => {
                let mut acc = self.expr(first);
                for (op, rhs, pos) in rest {
                    let r = self.expr(rhs);
                    let l = pos.line;
                    acc = match op {
                        BinOp::Add => format!("x_add({acc}, {r}, {l})"),
                        BinOp::Sub => format!("x_sub({acc}, {r}, {l})"),
                        BinOp::Mul => format!("x_mul({acc}, {r}, {l})"),
                        BinOp::Div => format!("x_div({acc}, {r}, {l})"),
                        BinOp::Rem => format!("x_mod({acc}, {r}, {l})"),
                        BinOp::Shl => format!("x_shl({acc}, {r}, {l})"),
                        BinOp::Shr => format!("x_shr({acc}, {r}, {l})"),
                        BinOp::And => format!("({acc} & {r})"),
                        BinOp::Or => format!("({acc} | {r})"),
                    };
                }
                acc
            }
            Expr::Call { func, args, pos } => {
                let f = match func {
                    Builtin::AlignUp => "x_align_up",
                    Builtin::AlignDown => "x_align_down",
                };
                format!(
                    "{f}({}, {}, {})",
                    self.expr(&args[0]),
                    self.expr(&args[1]),
                    pos.line
                )
            }
        }
    }

    fn opt(&self, e: Option<&Expr>, default: u64) -> String {
        e.map_or_else(|| format!("{default:#x}ULL"), |e| self.expr(e))
    }

    fn prot(&self, prot: Prot, raw: Option<&Expr>, line: u32) -> String {
        match raw {
            Some(e) => format!("x_u32({}, {line}, \"prot\")", self.expr(e)),
            None => format!("{:#x}ULL", prot.bits()),
        }
    }

    fn block(&mut self, body: &[Stmt]) -> Result<(), ExportError> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), ExportError> {
        let l = s.pos.line;
        self.line(&format!("/* line {l}: {} */", c_comment(&s.text)));
        let prefixed = s.process.as_ref().map(|p| self.proc_index(p));
        if let Some(p) = prefixed {
            self.line(&format!("{{ int pc = cur; cur = {p};"));
            self.depth += 1;
        }
        self.stmt_inner(s)?;
        if prefixed.is_some() {
            self.depth -= 1;
            self.line("cur = pc; }");
        }
        Ok(())
    }

    fn stmt_inner(&mut self, s: &Stmt) -> Result<(), ExportError> {
        let l = s.pos.line;
        match &s.kind {
            StmtKind::Let { name, value } => {
                let v = self.expr(value);
                let (var, set) = (self.var(*name), self.set(*name));
                self.line(&format!("{var} = {v}; {set} = 1;"));
            }
            StmtKind::Param { name, value } => {
                let n = self.script.name(*name).to_string();
                let v = match self.params.iter().find(|(k, _)| *k == n) {
                    Some((_, v)) => format!("{v:#x}ULL /* --param {n} */"),
                    None => self.expr(value),
                };
                let (var, set) = (self.var(*name), self.set(*name));
                self.line(&format!("{var} = {v}; {set} = 1;"));
            }
            StmtKind::Switch { process } => {
                let p = self.proc_index(process);
                self.line(&format!("cur = {p}; /* {process} */"));
            }
            StmtKind::Repeat { count, var, body } => {
                self.tmp += 1;
                let (n, i) = (format!("n{}", self.tmp), format!("i{}", self.tmp));
                let c = self.expr(count);
                self.line(&format!(
                    "{{ u64 {n} = {c}; for (u64 {i} = 0; {i} < {n}; {i}++) {{"
                ));
                self.depth += 1;
                if let Some(v) = var {
                    let (var, set) = (self.var(*v), self.set(*v));
                    self.line(&format!("{var} = {i}; {set} = 1;"));
                }
                self.block(body)?;
                self.depth -= 1;
                self.line("} }");
            }
            StmtKind::BindPfn { name, addr } => {
                let a = self.expr(addr);
                let (var, set) = (self.var(*name), self.set(*name));
                self.line(&format!("{var} = bind_pfn(cur, {l}, {a}); {set} = 1;"));
            }
            StmtKind::Observe(_) => {
                self.line("/* observe: not exported (ptlab prints observations) */");
            }
            StmtKind::Before(_) => {
                self.line("/* before: the running kernel has one algorithm; nothing to do */");
            }
            StmtKind::After(_) => {
                self.line("/* after: a proposed change the running kernel does not have; nothing to do */");
            }
            StmtKind::Expect(e) => self.expect(s, e)?,
            StmtKind::Op { bind, op, check } => {
                let call = self.op(s, op)?;
                self.line(&format!("{{ struct res r = {call};"));
                self.depth += 1;
                if let Some(id) = bind {
                    let (var, set) = (self.var(*id), self.set(*id));
                    self.line(&format!(
                        "if (!r.err && !r.fault) {{ {var} = r.val; {set} = 1; }} \
                         else if (r.has_field) {{ {var} = r.field; {set} = 1; }} else {set} = 0;"
                    ));
                }
                match check {
                    None => self.line(&format!("uncovered({l}, {}, r);", c_str(&s.text))),
                    Some(c) => {
                        let (kind, want) = match &c.kind {
                            CheckKind::Ok => ("CK_OK", "0".to_string()),
                            CheckKind::Errno(e) => ("CK_ERRNO", e.code().to_string()),
                            CheckKind::Ret(e) => ("CK_RET", self.expr(e)),
                            CheckKind::Segv => ("CK_SEGV", "0".to_string()),
                            CheckKind::Uffd => ("CK_UFFD", "0".to_string()),
                        };
                        let text = format!("{} / {}", s.text, c.text);
                        self.line(&format!(
                            "check({}, {}, r, {kind}, {want});",
                            c.pos.line,
                            c_str(&text)
                        ));
                    }
                }
                self.depth -= 1;
                self.line("}");
            }
        }
        Ok(())
    }

    /// The C call that makes operation `op`, as an expression of type
    /// `struct res`.
    fn op(&self, s: &Stmt, op: &Op) -> Result<String, ExportError> {
        let l = s.pos.line;
        Ok(match op {
            Op::Syscall(sc) => self.syscall(s, sc, None)?,
            Op::Access(Access {
                addr,
                len,
                fill: Some(f),
                ..
            }) => format!(
                "do_fill(cur, {l}, {}, {}, {}, {})",
                self.expr(addr),
                u8::from(len.is_some()),
                self.opt(len.as_ref(), 0),
                self.expr(f)
            ),
            Op::Access(a) => {
                let addr = self.expr(&a.addr);
                let len = self.opt(a.len.as_ref(), 4096);
                let write = a.kind == AccessKind::Write;
                let (has, tag) = match &a.tag {
                    Some(t) => ("1", self.expr(t)),
                    None => ("0", "0".to_string()),
                };
                format!(
                    "do_access(cur, {l}, \"{}\", {addr}, {len}, {}, {has}, {tag})",
                    a.kind.name(),
                    u8::from(write)
                )
            }
            Op::Thp(ThpSetting::Enabled(mode)) => self.knob(s, ThpKnob::TopLevel, *mode),
            Op::Thp(ThpSetting::Size { size, mode }) => {
                let Expr::Num(bytes) = size else {
                    return Err(self.unsupported(
                        s,
                        "the size of a `thp SIZE` knob must be a constant to export",
                    ));
                };
                match Order::from_bytes(*bytes) {
                    Some(o) => self.knob(s, ThpKnob::Size(o.0), *mode),
                    None => {
                        return Err(self.unsupported(
                            s,
                            "not a power-of-two folio size of at least 4K (a runtime error on every backend)",
                        ))
                    }
                }
            }
            Op::Thp(ThpSetting::UseZeroPage(on)) => {
                format!("do_use_zero_page({l}, {})", u8::from(*on))
            }
            Op::Swap(size, ptlab_model::swap::SwapKind::File) => {
                format!("do_swap({l}, {})", self.opt(size.as_ref(), 0))
            }
            Op::Swap(_, ptlab_model::swap::SwapKind::BlockDev) => {
                return Err(self.unsupported(
                    s,
                    "swap on a block device (a loop device) is not exported yet; use a swap file",
                ))
            }
            Op::Nodes(_) | Op::Numa(_) => return Err(self.unsupported(
                s,
                "NUMA statements need a machine with several nodes (ptlab diff stops at them too)",
            )),
            Op::Memory(size) => format!("do_memory({l}, {})", self.expr(size)),
        })
    }

    fn knob(&self, _s: &Stmt, knob: ThpKnob, mode: ThpMode) -> String {
        // sysfs enabled_store() accepts only always/madvise/never.
        if knob == ThpKnob::TopLevel && mode == ThpMode::Inherit {
            return format!("(struct res){{ {}, 0, 0, 0, 0, 0 }}", libc::EINVAL);
        }
        match knobs::knob_sysfs_path(knob) {
            Some(p) => format!(
                "do_thp({}, {}, \"{}\")",
                _s.pos.line,
                c_str(&p.display().to_string()),
                mode.name()
            ),
            None => format!("(struct res){{ {}, 0, 0, 0, 0, 0 }}", libc::ENOENT),
        }
    }

    fn syscall(&self, s: &Stmt, sc: &Syscall, via: Option<&str>) -> Result<String, ExportError> {
        let l = s.pos.line;
        let slot = match via {
            Some(h) => self.handle_slot(h).to_string(),
            None => "cur".to_string(),
        };
        let e = |x: &Expr| self.expr(x);
        Ok(match sc {
            Syscall::Mmap {
                len,
                addr,
                placement,
                prot,
                prot_raw,
                noreserve,
                populate,
                locked,
                flags,
            } => {
                let mut add = MapFlags::empty();
                match placement {
                    Placement::Hint => {}
                    Placement::Fixed => add |= MapFlags::FIXED,
                    Placement::NoReplace => add |= MapFlags::FIXED_NOREPLACE,
                }
                if *noreserve {
                    add |= MapFlags::NORESERVE;
                }
                if *populate {
                    add |= MapFlags::POPULATE;
                }
                if *locked {
                    add |= MapFlags::LOCKED;
                }
                let base = match flags {
                    Some(f) => format!("x_u32({}, {l}, \"mmap flags\")", e(f)),
                    None => format!("{:#x}ULL", (MapFlags::PRIVATE | MapFlags::ANONYMOUS).bits()),
                };
                format!(
                    "do_mmap(cur, {l}, {}, {}, {}, {base} | {:#x}ULL)",
                    self.opt(addr.as_ref(), 0),
                    e(len),
                    self.prot(*prot, prot_raw.as_ref(), l),
                    add.bits()
                )
            }
            Syscall::Munmap { addr, len } => format!(
                "call(cur, {l}, OP_MUNMAP, {}, {}, 0, 0, 0, 0, 0)",
                e(addr),
                e(len)
            ),
            Syscall::Madvise {
                addr,
                len,
                advice,
                advice_raw,
            } => {
                let adv = match advice_raw {
                    // The `int behavior` argument: the low 32 bits.
                    Some(r) => format!("(u64)(int)(uint32_t){}", e(r)),
                    None => format!("(u64)(int){}", Advice::value(*advice)),
                };
                format!("do_madvise(cur, {l}, {}, {}, {adv})", e(addr), e(len))
            }
            Syscall::Mremap {
                addr,
                old_len,
                new_len,
                maymove,
                fixed,
                dontunmap,
                flags,
            } => {
                let mut add = MremapFlags::empty();
                if *maymove {
                    add |= MremapFlags::MAYMOVE;
                }
                if fixed.is_some() {
                    add |= MremapFlags::FIXED;
                }
                if *dontunmap {
                    add |= MremapFlags::DONTUNMAP;
                }
                format!(
                    "do_mremap(cur, {l}, {}, {}, {}, {} | {:#x}ULL, {})",
                    e(addr),
                    e(old_len),
                    e(new_len),
                    self.opt(flags.as_ref(), 0),
                    add.bits(),
                    self.opt(fixed.as_ref(), 0)
                )
            }
            Syscall::Mprotect {
                addr,
                len,
                prot,
                prot_raw,
            } => format!(
                "call(cur, {l}, OP_MPROTECT, {}, {}, {}, 0, 0, 0, 0)",
                e(addr),
                e(len),
                self.prot(*prot, prot_raw.as_ref(), l)
            ),
            Syscall::Mlock {
                addr,
                len,
                onfault,
                flags,
            } => {
                // mlock(2) when no flag is given, else mlock2(2) (wire::encode).
                let f = format!(
                    "({} | {}ULL)",
                    self.opt(flags.as_ref(), 0),
                    if *onfault { wire::MLOCK_ONFAULT } else { 0 }
                );
                format!(
                    "({f} ? call(cur, {l}, OP_SYSCALL, {}, {}, {}, {f}, 0, 0, 0) \
                     : call(cur, {l}, OP_SYSCALL, {}, {}, {}, 0, 0, 0, 0))",
                    libc::SYS_mlock2,
                    e(addr),
                    e(len),
                    libc::SYS_mlock,
                    e(addr),
                    e(len)
                )
            }
            Syscall::Munlock { addr, len } => format!(
                "call(cur, {l}, OP_SYSCALL, {}, {}, {}, 0, 0, 0, 0)",
                libc::SYS_munlock,
                e(addr),
                e(len)
            ),
            Syscall::Mseal { addr, len, flags } => format!(
                "call(cur, {l}, OP_SYSCALL, {}, {}, {}, {}, 0, 0, 0)",
                wire::SYS_MSEAL,
                e(addr),
                e(len),
                self.opt(flags.as_ref(), 0)
            ),
            Syscall::Fork { child } => {
                format!("do_fork(cur, {}, {l})", self.proc_index(child))
            }
            Syscall::Exit => format!("do_exit(cur, {l})"),
            Syscall::PrctlSetThpDisable {
                disable,
                except_advised,
                flags,
            } => format!(
                "call(cur, {l}, OP_PRCTL, 1, {}, {} | {:#x}ULL, 0, 0, 0, 0)",
                e(disable),
                self.opt(flags.as_ref(), 0),
                if *except_advised {
                    ptlab_model::thp::PR_THP_DISABLE_EXCEPT_ADVISED
                } else {
                    0
                }
            ),
            Syscall::PrctlGetThpDisable => {
                format!("call(cur, {l}, OP_PRCTL, 0, 0, 0, 0, 0, 0, 0)")
            }
            Syscall::Setrlimit { resource, bytes } => match resource {
                Resource::Memlock => format!(
                    "call(cur, {l}, OP_SETRLIMIT, {}, {}, 0, 0, 0, 0, 0)",
                    resource.number(),
                    self.opt(bytes.as_ref(), ptlab_model::RLIM_INFINITY)
                ),
                Resource::As | Resource::Data => {
                    return Err(self.unsupported(
                        s,
                        "RLIMIT_AS and RLIMIT_DATA count the harness's own mappings too \
                         (the live backend scopes them around the scenario's calls)",
                    ))
                }
            },
            Syscall::CapDropIpcLock => format!(
                "call(cur, {l}, OP_CAP_DROP, {}, 0, 0, 0, 0, 0, 0)",
                wire::CAP_IPC_LOCK
            ),
            Syscall::Fill { .. } => {
                return Err(self.unsupported(
                    s,
                    "the headroom counts the harness's own VMAs, which differ in a C program",
                ))
            }
            Syscall::UffdOpen => format!("call(cur, {l}, OP_UFFD_OPEN, cur, 1, 0, 0, 0, 0, 0)"),
            Syscall::UffdCreate { name, api, flags } => {
                let slot = match name {
                    Some(n) => self.handle_slot(n).to_string(),
                    None => "cur".to_string(),
                };
                format!(
                    "call(cur, {l}, OP_UFFD_OPEN, {slot}, {}, {}, {}, 0, 0, 0)",
                    u8::from(*api),
                    u8::from(flags.is_some()),
                    self.opt(flags.as_ref(), 0)
                )
            }
            Syscall::UffdVia { handle, call } => self.syscall(s, call, Some(handle))?,
            Syscall::UffdApi { api, features } => format!(
                "do_uffd(cur, {l}, {slot}, {:#x}UL, 7, 0, 0, {}, {} | {:#x}ULL, 0, 0, 0)",
                wire::ioctl::UFFDIO_API,
                e(api),
                self.opt(features.as_ref(), 0),
                ptlab_model::uffd::UFFD_FEATURE_SIGBUS
            ),
            Syscall::UffdRegister {
                addr,
                len,
                mode,
                raw,
            } => {
                let mut bits = UffdRegisterMode::empty();
                if mode.missing {
                    bits |= UffdRegisterMode::MISSING;
                }
                if mode.wp {
                    bits |= UffdRegisterMode::WP;
                }
                if mode.minor {
                    bits |= UffdRegisterMode::MINOR;
                }
                format!(
                    "do_uffd(cur, {l}, {slot}, {:#x}UL, 7, 0, 0, {}, {}, {} | {:#x}ULL, 0, 0)",
                    wire::ioctl::UFFDIO_REGISTER,
                    e(addr),
                    e(len),
                    self.opt(raw.as_ref(), 0),
                    bits.bits()
                )
            }
            Syscall::UffdUnregister { addr, len } => format!(
                "do_uffd(cur, {l}, {slot}, {:#x}UL, 7, 0, 0, {}, {}, 0, 0, 0)",
                wire::ioctl::UFFDIO_UNREGISTER,
                e(addr),
                e(len)
            ),
            Syscall::UffdCopy {
                dst,
                src,
                len,
                tag,
                wp,
                dontwake,
                raw,
            } => {
                let mut bits = UffdCopyMode::empty();
                if *wp {
                    bits |= UffdCopyMode::WP;
                }
                if *dontwake {
                    bits |= UffdCopyMode::DONTWAKE;
                }
                let (tagged, t) = match tag {
                    Some(t) => ("1", e(t)),
                    None => ("0", "0".to_string()),
                };
                format!(
                    "do_uffd(cur, {l}, {slot}, {:#x}UL, 4, {tagged}, {t}, {}, {}, {}, {} | {:#x}ULL, 0)",
                    wire::ioctl::UFFDIO_COPY,
                    e(dst),
                    e(src),
                    e(len),
                    self.opt(raw.as_ref(), 0),
                    bits.bits()
                )
            }
            Syscall::UffdZeropage {
                dst,
                len,
                dontwake,
                raw,
            } => {
                let mut bits = UffdZeropageMode::empty();
                if *dontwake {
                    bits |= UffdZeropageMode::DONTWAKE;
                }
                format!(
                    "do_uffd(cur, {l}, {slot}, {:#x}UL, 3, 0, 0, {}, {}, {} | {:#x}ULL, 0, 0)",
                    wire::ioctl::UFFDIO_ZEROPAGE,
                    e(dst),
                    e(len),
                    self.opt(raw.as_ref(), 0),
                    bits.bits()
                )
            }
            Syscall::UffdMove {
                dst,
                src,
                len,
                allow_src_holes,
                dontwake,
                raw,
            } => {
                let mut bits = UffdMoveMode::empty();
                if *allow_src_holes {
                    bits |= UffdMoveMode::ALLOW_SRC_HOLES;
                }
                if *dontwake {
                    bits |= UffdMoveMode::DONTWAKE;
                }
                format!(
                    "do_uffd(cur, {l}, {slot}, {:#x}UL, 4, 0, 0, {}, {}, {}, {} | {:#x}ULL, 0)",
                    wire::ioctl::UFFDIO_MOVE,
                    e(dst),
                    e(src),
                    e(len),
                    self.opt(raw.as_ref(), 0),
                    bits.bits()
                )
            }
        })
    }

    fn expect(&mut self, s: &Stmt, e: &Expect) -> Result<(), ExportError> {
        let l = s.pos.line;
        let text = c_str(&s.text);
        match e {
            Expect::Maps(lines) => {
                let mut w = Vec::new();
                for m in lines {
                    w.push(format!(
                        "{{ {}, {}, {} }}",
                        self.expr(&m.start),
                        self.expr(&m.end),
                        c_str(&m.perms)
                    ));
                }
                let n = w.len();
                if w.is_empty() {
                    w.push("{ 0, 0, \"\" }".to_string());
                }
                self.line(&format!(
                    "{{ struct mline w[] = {{ {} }}; expect_maps(cur, {l}, {text}, w, {n}); }}",
                    w.join(", ")
                ));
            }
            Expect::Page { addr, len, attrs } => {
                let mut a = Vec::new();
                for at in attrs {
                    a.push(match &at.kind {
                        PageAttrKind::None => "{ A_NONE, 0 }".to_string(),
                        PageAttrKind::Zero => "{ A_ZERO, 0 }".to_string(),
                        PageAttrKind::HugeZero => "{ A_HUGEZERO, 0 }".to_string(),
                        PageAttrKind::Anon => "{ A_ANON, 0 }".to_string(),
                        PageAttrKind::Swapped => "{ A_SWAPPED, 0 }".to_string(),
                        PageAttrKind::Order(e) => format!("{{ A_ORDER, {} }}", self.expr(e)),
                        PageAttrKind::Folio(e) => {
                            format!("{{ A_ORDER, folio_order({}, {l}) }}", self.expr(e))
                        }
                        PageAttrKind::Idx(e) => format!("{{ A_IDX, {} }}", self.expr(e)),
                        PageAttrKind::Pmd => "{ A_PMD, 0 }".to_string(),
                        PageAttrKind::Pte => "{ A_PTE, 0 }".to_string(),
                        PageAttrKind::Exclusive(true) => "{ A_X, 0 }".to_string(),
                        PageAttrKind::Exclusive(false) => "{ A_NX, 0 }".to_string(),
                        PageAttrKind::AnonExclusive(true) => "{ A_AX, 0 }".to_string(),
                        PageAttrKind::AnonExclusive(false) => "{ A_NAX, 0 }".to_string(),
                        PageAttrKind::Count(e) => format!("{{ A_CNT, {} }}", self.expr(e)),
                        PageAttrKind::Tag(e) => format!("{{ A_TAG, {} }}", self.expr(e)),
                        PageAttrKind::SameFolio => "{ A_SAMEFOLIO, 0 }".to_string(),
                        PageAttrKind::Guard => "{ A_GUARD, 0 }".to_string(),
                    });
                }
                let n = a.len();
                self.line(&format!(
                    "{{ struct attr a[] = {{ {} }}; expect_page(cur, {l}, {text}, {}, {}, a, {n}); }}",
                    a.join(", "),
                    self.expr(addr),
                    self.opt(len.as_ref(), 4096)
                ));
            }
            Expect::Pfn { addr, equal, frame } => {
                let f = self.expr(&Expr::Var {
                    id: *frame,
                    pos: s.pos,
                });
                self.line(&format!(
                    "expect_pfn(cur, {l}, {text}, {}, {}, {f});",
                    self.expr(addr),
                    u8::from(*equal)
                ));
            }
            Expect::Stat { key, value } => {
                let i = self.stats.iter().position(|k| k == key).unwrap_or(0);
                self.line(&format!(
                    "expect_stat({l}, {text}, {}, stat_base[{i}], {});",
                    c_str(key),
                    self.expr(value)
                ));
            }
            Expect::VmFlags { addr, has, flags } => {
                let f: Vec<String> = flags.iter().map(|f| c_str(f)).collect();
                self.line(&format!(
                    "{{ static const char *const f[] = {{ {} }}; expect_vmflags(cur, {l}, {text}, {}, {}, f, {}); }}",
                    f.join(", "),
                    self.expr(addr),
                    u8::from(*has),
                    f.len()
                ));
            }
            Expect::AnonHuge { addr, size } | Expect::LazyFree { addr, size } => {
                let lazy = matches!(e, Expect::LazyFree { .. });
                self.line(&format!(
                    "expect_smaps_kb(cur, {l}, {text}, {}, {}, {});",
                    self.expr(addr),
                    u8::from(lazy),
                    self.expr(size)
                ));
            }
            Expect::Bytes {
                addr,
                len,
                fill,
                value,
            } => {
                self.line(&format!(
                    "expect_bytes(cur, {l}, {text}, {}, {}, {}, {});",
                    self.expr(addr),
                    self.expr(len),
                    u8::from(*fill),
                    self.expr(value)
                ));
            }
            Expect::VmLck { size } => {
                self.line(&format!(
                    "expect_vmlck(cur, {l}, {text}, {});",
                    self.expr(size)
                ));
            }
            Expect::Value { left, equal, right } => {
                self.line(&format!(
                    "expect_value({l}, {text}, {}, {}, {});",
                    self.expr(left),
                    u8::from(*equal),
                    self.expr(right)
                ));
            }
            Expect::Invariants => {
                self.line("/* expect invariants: the model's own counters; nothing to check on a kernel */");
            }
        }
        Ok(())
    }

    fn finish(self) -> String {
        let mut o = String::new();
        let file = &self.script.file;
        let base = std::path::Path::new(file)
            .file_name()
            .map_or(file.clone(), |f| f.to_string_lossy().to_string());
        let _ = writeln!(
            o,
            "/* Generated by `ptlab export-c {}` from the scenario {base}.\n *\n \
             * A standalone reproducer: it makes the scenario's system calls on this\n \
             * machine and checks each `expect` line, printing `ok line N: ...` or\n \
             * `FAIL line N: ...: expected ... observed ...`.\n *\n \
             *   cc -O2 -Wall -Werror -o repro {}.c && sudo ./repro\n *\n \
             * Exit status: 0 every check held, 1 a check failed, 2 a runtime error.\n \
             * It needs root (pagemap frame numbers, kpageflags, THP knobs, swapon);\n \
             * THP knobs it writes are put back on exit. Checked: {EXPORTED_CHECKS}.\n \
             * Left as comments: {COMMENT_ONLY}.\n */",
            c_comment(&base),
            c_comment(base.trim_end_matches(".ptl"))
        );
        let _ = writeln!(o, "#define SCENARIO {}", c_str(&base));
        let _ = writeln!(o, "#define NPROC {}", self.procs.len());
        let _ = writeln!(o, "#define NUFFD {}", self.handles.len().max(1));
        let names: Vec<String> = self.procs.iter().map(|p| c_str(p)).collect();
        let _ = writeln!(
            o,
            "static const char *const PROC_NAMES[] = {{ {} }};",
            names.join(", ")
        );
        let _ = writeln!(o, "/* numbers shared with ptlab's live worker */");
        for (name, v) in [
            ("UFFDIO_API", wire::ioctl::UFFDIO_API),
            ("UFFDIO_REGISTER", wire::ioctl::UFFDIO_REGISTER),
            ("UFFDIO_UNREGISTER", wire::ioctl::UFFDIO_UNREGISTER),
            ("UFFDIO_COPY", wire::ioctl::UFFDIO_COPY),
            ("UFFDIO_ZEROPAGE", wire::ioctl::UFFDIO_ZEROPAGE),
            ("UFFDIO_MOVE", wire::ioctl::UFFDIO_MOVE),
            (
                "UFFD_FEATURE_SIGBUS",
                ptlab_model::uffd::UFFD_FEATURE_SIGBUS,
            ),
            ("FIELD_UNTOUCHED", wire::FIELD_UNTOUCHED),
            ("PM_PRESENT", crate::kernel::PM_PRESENT),
            ("PM_SWAP", crate::kernel::PM_SWAP),
            ("PM_FILE", crate::kernel::PM_FILE),
            ("PM_GUARD_REGION", crate::kernel::PM_GUARD_REGION),
            ("PM_MMAP_EXCLUSIVE", crate::kernel::PM_MMAP_EXCLUSIVE),
            ("PM_PFN_MASK", crate::kernel::PM_PFN_MASK),
            ("KPF_COMPOUND_HEAD", crate::kernel::KPF_COMPOUND_HEAD),
            ("KPF_COMPOUND_TAIL", crate::kernel::KPF_COMPOUND_TAIL),
            ("KPF_ANON_EXCLUSIVE", crate::kernel::KPF_ANON_EXCLUSIVE),
            ("PAGE_IS_PRESENT", crate::kernel::PAGE_IS_PRESENT),
            ("PAGE_IS_PFNZERO", crate::kernel::PAGE_IS_PFNZERO),
            ("PAGE_IS_HUGE", crate::kernel::PAGE_IS_HUGE),
            ("PAGEMAP_SCAN", crate::kernel::PAGEMAP_SCAN),
            (
                "MLOCK_LIMIT_DEFAULT",
                ptlab_model::rlimit::MLOCK_LIMIT_DEFAULT,
            ),
        ] {
            let _ = writeln!(o, "#define {name} {v:#x}ULL");
        }
        let _ = writeln!(o, "#define THP_DIR {}", c_str(knobs::THP_DIR));
        let _ = writeln!(
            o,
            "#define SWAP_DIR {}",
            c_str(crate::swapfile::DEFAULT_SWAP_DIR)
        );
        o.push_str(RUNTIME);
        o.push_str("\n/* ---- the scenario ---- */\n\nint main(void)\n{\n");
        let mut vars: Vec<&String> = self.script.names.iter().collect();
        vars.sort();
        vars.dedup();
        for v in vars {
            let _ = writeln!(o, "\tu64 v_{v} = 0; int s_{v} = 0;");
        }
        let _ = writeln!(o, "\ts64 stat_base[{}];", self.stats.len().max(1));
        o.push_str("\tstart();\n");
        for (i, k) in self.stats.iter().enumerate() {
            let _ = writeln!(o, "\tstat_base[{i}] = stat_read({});", c_str(k));
        }
        if self.stats.is_empty() {
            o.push_str("\tstat_base[0] = 0;\n");
        }
        o.push_str(&self.body);
        let mut vars: Vec<&String> = self.script.names.iter().collect();
        vars.sort();
        vars.dedup();
        for v in vars {
            let _ = writeln!(o, "\t(void)v_{v}; (void)s_{v};");
        }
        o.push_str("\t(void)stat_base;\n\treturn done();\n}\n");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export(src: &str) -> Result<String, ExportError> {
        let script = ptlab_scenario::parse("t.ptl", src).expect("parses");
        export_c(&script, &[])
    }

    #[test]
    fn strings_are_escaped_for_c() {
        assert_eq!(c_str(r#"a"b\c?"#), r#""a\"b\\c\?""#);
        assert_eq!(c_str("é"), "\"\\303\\251\"");
        assert_eq!(c_comment("x */ y /* z"), "x * / y / * z");
    }

    #[test]
    fn flags_come_from_the_shared_types() {
        let c = export("p = mmap 64K at 0x7f0000000000 noreplace prot r populate\n").unwrap();
        let flags = (MapFlags::PRIVATE | MapFlags::ANONYMOUS).bits();
        let add = (MapFlags::FIXED_NOREPLACE | MapFlags::POPULATE).bits();
        let prot = Prot::READ.bits();
        assert!(
            c.contains(&format!(
                "do_mmap(cur, 1, 0x7f0000000000ULL, 0x10000ULL, {prot:#x}ULL, {flags:#x}ULL | {add:#x}ULL)"
            )),
            "{c}"
        );
        let c = export("p = mmap 8K\nmadvise p 4K guard_install\n").unwrap();
        assert!(
            c.contains(&format!(
                "(u64)(int){}",
                Advice::from_name("guard_install").unwrap().value()
            )),
            "{c}"
        );
        assert!(c.contains(&format!(
            "#define UFFDIO_MOVE {:#x}ULL",
            wire::ioctl::UFFDIO_MOVE
        )));
    }

    #[test]
    fn expressions_keep_checked_arithmetic_and_bindings() {
        let c = export("let a = 4K\nlet b = align_up(a + 1, 2M) - a * 2 | 1\n").unwrap();
        assert!(
            c.contains(
                "v_b = (x_sub(x_align_up(x_add(var(s_a, v_a, \"a\", 2), 0x1ULL, 2), 0x200000ULL, 2), \
                 x_mul(var(s_a, v_a, \"a\", 2), 0x2ULL, 2), 2) | 0x1ULL); s_b = 1;"
            ),
            "{c}"
        );
    }

    #[test]
    fn processes_and_handles_get_slots() {
        let c = export(
            "p = mmap 4K\nuffd open\nfork child\n@child uffd open v\n@child uffd register p 4K missing via main\n",
        )
        .unwrap();
        assert!(c.contains("#define NPROC 2"), "{c}");
        assert!(c.contains("static const char *const PROC_NAMES[] = { \"main\", \"child\" };"));
        // handles: main, child (own), then v
        assert!(c.contains("#define NUFFD 3"), "{c}");
        assert!(c.contains("OP_UFFD_OPEN, 2, 1,"), "{c}");
        assert!(c.contains("do_uffd(cur, 5, 0, "), "{c}");
        assert!(c.contains("{ int pc = cur; cur = 1;"), "{c}");
    }

    #[test]
    fn refusals_name_the_line() {
        let e = export("p = mmap 4K\nfill p headroom 3\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.ptl:2: 'fill p headroom 3' cannot be exported"),
            "{e}"
        );
        let e = export("let s = 64K\nthp s always\n").unwrap_err();
        assert!(e.to_string().contains("t.ptl:2:"), "{e}");
        assert!(export("thp 64K always\nthp 2M inherit\n").is_ok());
    }
}
