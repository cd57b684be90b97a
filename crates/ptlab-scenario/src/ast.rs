//! The parsed form of a scenario.
//!
//! Names are resolved while parsing: every variable becomes a [`NameId`], an
//! index into the interpreter's slot table, so running a loop body never
//! hashes a string. Builtin constants (`PAGE`, `PMD`, `PUD`) are folded into
//! literals. Each statement keeps its source text for failure messages.

use ptlab_model::{Advice, Errno, Prot, ThpMode};

/// A source position (1-based line and column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

/// Index of a variable in [`Script::names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NameId(pub u32);

impl NameId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a variable holds. Fixed by its first binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// A 64-bit unsigned integer (`let`, syscall results, `repeat ... as`).
    Int,
    /// An opaque frame handle (`NAME = pfn ADDR`).
    Frame,
}

/// A whole scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    /// The file name used in messages.
    pub file: String,
    /// Variable names, indexed by [`NameId`].
    pub names: Vec<String>,
    pub body: Vec<Stmt>,
}

impl Script {
    /// The name of variable `id` (or `?` for a foreign id).
    pub fn name(&self, id: NameId) -> &str {
        self.names.get(id.index()).map_or("?", String::as_str)
    }

    /// The `param` statements of the scenario: `(name, line, default text)`,
    /// in source order (nested blocks included).
    pub fn params(&self) -> Vec<(String, u32, String)> {
        fn walk(s: &Script, body: &[Stmt], out: &mut Vec<(String, u32, String)>) {
            for st in body {
                match &st.kind {
                    StmtKind::Param { name, .. } => {
                        let default = st
                            .text
                            .split_once('=')
                            .map_or("", |(_, d)| d)
                            .trim()
                            .to_string();
                        out.push((s.name(*name).to_string(), st.pos.line, default));
                    }
                    StmtKind::Repeat { body, .. } => walk(s, body, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        walk(self, &self.body, &mut out);
        out
    }

    /// Check `--param NAME=VALUE` settings against the `param` statements:
    /// `Err` names every undeclared name and the names the scenario does
    /// declare (a usage error, found before anything runs).
    pub fn check_params(&self, given: &[(String, String)]) -> Result<(), String> {
        let declared = self.params();
        let mut unknown: Vec<&str> = given
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| !declared.iter().any(|(d, _, _)| d == n))
            .collect();
        unknown.dedup();
        if unknown.is_empty() {
            return Ok(());
        }
        let have: Vec<&str> = declared.iter().map(|(d, _, _)| d.as_str()).collect();
        Err(format!(
            "--param {}: the scenario declares no such parameter ({})",
            unknown.join(", --param "),
            if have.is_empty() {
                "it has no 'param' statements".to_string()
            } else {
                format!("it declares: {}", have.join(", "))
            }
        ))
    }
}

/// One statement (a line, or a block for `repeat` and `expect maps`).
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    /// Position of the statement keyword (after any `@NAME` prefix).
    pub pos: Pos,
    /// The source line, trimmed, without its comment.
    pub text: String,
    /// `@NAME` prefix: run this statement in process NAME.
    pub process: Option<String>,
    pub kind: StmtKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `let NAME = EXPR`
    Let { name: NameId, value: Expr },
    /// `param NAME = EXPR`: like `let`, but `--param NAME=VALUE` overrides
    /// the default.
    Param { name: NameId, value: Expr },
    /// A syscall, an access or a THP knob write, with the optional
    /// `expect ok|errno|ret|segv` line that follows it.
    Op {
        bind: Option<NameId>,
        op: Op,
        check: Option<Check>,
    },
    /// A line holding only `@NAME`: switch the current process.
    Switch { process: String },
    /// `repeat COUNT [as NAME]` ... `end`
    Repeat {
        count: Expr,
        var: Option<NameId>,
        body: Vec<Stmt>,
    },
    /// `NAME = pfn ADDR`
    BindPfn { name: NameId, addr: Expr },
    /// Any `expect` that is not about the previous statement.
    Expect(Expect),
    /// `observe [maps] [smaps] [pages] [stats] [numa]`
    Observe(ObserveSections),
    /// `before NAME...` / `before none`: which seed changes run their
    /// previous algorithm from here on.
    Before(ptlab_model::Before),
    /// `after NAME...` / `after none`: which proposed (post-6.18) changes
    /// run from here on.
    After(ptlab_model::After),
}

/// Which sections `observe` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObserveSections {
    pub maps: bool,
    pub smaps: bool,
    pub pages: bool,
    pub stats: bool,
    /// `numa`: /proc/PID/numa_maps (printed only when named).
    pub numa: bool,
}

impl ObserveSections {
    /// A bare `observe`: maps, smaps, pages and stats.
    pub const ALL: ObserveSections = ObserveSections {
        maps: true,
        smaps: true,
        pages: true,
        stats: true,
        numa: false,
    };
}

/// Something that either succeeds or fails with an errno / a fault.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Syscall(Syscall),
    Access(Access),
    Thp(ThpSetting),
    /// `swap SIZE [file|blockdev]` (enable a swap area of SIZE bytes) or
    /// `swap off` (`None`).
    Swap(Option<Expr>, ptlab_model::swap::SwapKind),
    /// `machine memory SIZE`: the modelled machine's physical memory.
    Memory(Expr),
    /// `machine nodes N`: the modelled machine's NUMA nodes.
    Nodes(Expr),
    /// `numa node N` / `numa scan ADDR LEN` (automatic NUMA balancing).
    Numa(NumaOp),
}

/// The `numa` statements.
#[derive(Clone, Debug, PartialEq)]
pub enum NumaOp {
    /// `numa node N`: the process runs on a CPU of node N from here on.
    Node(Expr),
    /// `numa scan ADDR LEN`: one NUMA-balancing scan pass over the range;
    /// returns the PTEs made NUMA-hinting.
    Scan { addr: Expr, len: Expr },
}

impl Op {
    /// Short name for messages (`mmap`, `uffd copy`, `write`, `thp`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Syscall(s) => s.name(),
            Op::Access(a) => a.kind.name(),
            Op::Thp(_) => "thp",
            Op::Swap(..) => "swap",
            Op::Memory(_) => "machine memory",
            Op::Nodes(_) => "machine nodes",
            Op::Numa(NumaOp::Node(_)) => "numa node",
            Op::Numa(NumaOp::Scan { .. }) => "numa scan",
        }
    }
}

/// Where `mmap` places the mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// No flag: the address (if any) is a hint.
    Hint,
    /// `fixed`: MAP_FIXED.
    Fixed,
    /// `noreplace`: MAP_FIXED_NOREPLACE.
    NoReplace,
}

/// `uffd register` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UffdMode {
    pub missing: bool,
    pub wp: bool,
    pub minor: bool,
}

/// A system call statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Syscall {
    Mmap {
        len: Expr,
        addr: Option<Expr>,
        placement: Placement,
        prot: Prot,
        /// `prot EXPR`: the raw prot value instead of `prot`.
        prot_raw: Option<Expr>,
        noreserve: bool,
        populate: bool,
        /// MAP_LOCKED
        locked: bool,
        /// `flags EXPR`: the flags the option words add to, instead of
        /// MAP_PRIVATE | MAP_ANONYMOUS.
        flags: Option<Expr>,
    },
    Munmap {
        addr: Expr,
        len: Expr,
    },
    Madvise {
        addr: Expr,
        len: Expr,
        advice: Advice,
        /// `advice EXPR`: the raw advice value instead of `advice`.
        advice_raw: Option<Expr>,
    },
    Mremap {
        addr: Expr,
        old_len: Expr,
        new_len: Expr,
        maymove: bool,
        fixed: Option<Expr>,
        dontunmap: bool,
        /// `flags EXPR`: more flag bits, or'ed in.
        flags: Option<Expr>,
    },
    Mprotect {
        addr: Expr,
        len: Expr,
        prot: Prot,
        /// A raw prot value instead of `prot`.
        prot_raw: Option<Expr>,
    },
    /// `mlock ADDR LEN [onfault]` (mlock2 with MLOCK_ONFAULT).
    Mlock {
        addr: Expr,
        len: Expr,
        onfault: bool,
        /// `flags EXPR`: mlock2 flag bits, or'ed in.
        flags: Option<Expr>,
    },
    /// `munlock ADDR LEN`
    Munlock {
        addr: Expr,
        len: Expr,
    },
    /// `mseal ADDR LEN`
    Mseal {
        addr: Expr,
        len: Expr,
        /// `flags EXPR`: mseal's flags argument (0 without it).
        flags: Option<Expr>,
    },
    Fork {
        child: String,
    },
    Exit,
    /// `prctl thp_disable EXPR [except_advised]`
    PrctlSetThpDisable {
        disable: Expr,
        except_advised: bool,
        /// `flags EXPR`: more flag bits (arg3), or'ed in.
        flags: Option<Expr>,
    },
    /// `prctl get_thp_disable`
    PrctlGetThpDisable,
    /// `setrlimit RESOURCE EXPR` or `setrlimit RESOURCE unlimited`
    /// (`None`): the soft limit, in bytes.
    Setrlimit {
        resource: ptlab_model::Resource,
        bytes: Option<Expr>,
    },
    /// `capability drop ipc_lock`
    CapDropIpcLock,
    /// `fill ADDR headroom N`: one-page VMAs from ADDR until the process
    /// is N VMAs below `vm.max_map_count`.
    Fill {
        addr: Expr,
        headroom: Expr,
    },
    UffdOpen,
    /// `uffd create [NAME]` (userfaultfd(2) only; `api` false) or
    /// `uffd open NAME` (userfaultfd(2) + UFFDIO_API; `api` true). Without
    /// NAME the handle is the process's own (named after the process).
    UffdCreate {
        name: Option<String>,
        api: bool,
        /// `flags EXPR`: userfaultfd(2)'s flags.
        flags: Option<Expr>,
    },
    /// `uffd api VALUE [features VALUE]`: UFFDIO_API; binds the features
    /// the kernel reports.
    UffdApi {
        api: Expr,
        features: Option<Expr>,
    },
    /// `uffd ... via NAME`: `call` (a uffd operation) on handle NAME.
    UffdVia {
        handle: String,
        call: Box<Syscall>,
    },
    UffdRegister {
        addr: Expr,
        len: Expr,
        mode: UffdMode,
        /// `mode EXPR`: more mode bits, or'ed in.
        raw: Option<Expr>,
    },
    UffdUnregister {
        addr: Expr,
        len: Expr,
    },
    UffdCopy {
        dst: Expr,
        src: Expr,
        len: Expr,
        tag: Option<Expr>,
        /// UFFDIO_COPY_MODE_WP
        wp: bool,
        dontwake: bool,
        /// `mode EXPR`: more mode bits, or'ed in.
        raw: Option<Expr>,
    },
    UffdZeropage {
        dst: Expr,
        len: Expr,
        dontwake: bool,
        /// `mode EXPR`: more mode bits, or'ed in.
        raw: Option<Expr>,
    },
    UffdMove {
        dst: Expr,
        src: Expr,
        len: Expr,
        allow_src_holes: bool,
        dontwake: bool,
        /// `mode EXPR`: more mode bits, or'ed in.
        raw: Option<Expr>,
    },
}

impl Syscall {
    pub fn name(&self) -> &'static str {
        match self {
            Syscall::Mmap { .. } => "mmap",
            Syscall::Munmap { .. } => "munmap",
            Syscall::Madvise { .. } => "madvise",
            Syscall::Mremap { .. } => "mremap",
            Syscall::Mprotect { .. } => "mprotect",
            Syscall::Mlock { .. } => "mlock",
            Syscall::Munlock { .. } => "munlock",
            Syscall::Mseal { .. } => "mseal",
            Syscall::Fork { .. } => "fork",
            Syscall::Exit => "exit",
            Syscall::PrctlSetThpDisable { .. } => "prctl thp_disable",
            Syscall::PrctlGetThpDisable => "prctl get_thp_disable",
            Syscall::Setrlimit { .. } => "setrlimit",
            Syscall::CapDropIpcLock => "capability drop",
            Syscall::Fill { .. } => "fill",
            Syscall::UffdOpen => "uffd open",
            Syscall::UffdCreate { api: true, .. } => "uffd open",
            Syscall::UffdCreate { api: false, .. } => "uffd create",
            Syscall::UffdApi { .. } => "uffd api",
            Syscall::UffdVia { call, .. } => call.name(),
            Syscall::UffdRegister { .. } => "uffd register",
            Syscall::UffdUnregister { .. } => "uffd unregister",
            Syscall::UffdCopy { .. } => "uffd copy",
            Syscall::UffdZeropage { .. } => "uffd zeropage",
            Syscall::UffdMove { .. } => "uffd move",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    Read,
    Write,
}

impl AccessKind {
    pub fn name(self) -> &'static str {
        match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
        }
    }
}

/// `read ADDR [LEN]` / `write ADDR [LEN] [tag=EXPR]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub kind: AccessKind,
    pub addr: Expr,
    /// Defaults to one page.
    pub len: Option<Expr>,
    /// Write only; defaults to each page's own address.
    pub tag: Option<Expr>,
    /// `write ADDR [LEN] fill BYTE`: memset of exactly `[ADDR, ADDR + LEN)`
    /// (LEN defaults to the rest of ADDR's page).
    pub fill: Option<Expr>,
}

/// A `thp ...` line.
#[derive(Clone, Debug, PartialEq)]
pub enum ThpSetting {
    /// `thp enabled MODE` (top-level knob).
    Enabled(ThpMode),
    /// `thp SIZE MODE` (per-size `hugepages-<size>/enabled`).
    Size { size: Expr, mode: ThpMode },
    /// `thp use_zero_page 0|1`.
    UseZeroPage(bool),
}

/// An `expect` line about the statement right before it.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub pos: Pos,
    pub text: String,
    pub kind: CheckKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum CheckKind {
    /// `expect ok`
    Ok,
    /// `expect errno NAME`
    Errno(Errno),
    /// `expect ret == EXPR`
    Ret(Expr),
    /// `expect segv`
    Segv,
    /// `expect uffd`: the access faulted to userfaultfd.
    Uffd,
}

/// A stand-alone expectation.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// `expect maps` block (empty for `expect maps empty`).
    Maps(Vec<MapsLine>),
    /// `expect page ADDR [LEN] ATTR...`
    Page {
        addr: Expr,
        len: Option<Expr>,
        attrs: Vec<PageAttr>,
    },
    /// `expect pfn ADDR == NAME` (`equal`) or `!= NAME`.
    Pfn {
        addr: Expr,
        equal: bool,
        frame: NameId,
    },
    /// `expect stat KEY == EXPR`
    Stat { key: String, value: Expr },
    /// `expect vmflags ADDR has|lacks MNEMONIC...`
    VmFlags {
        addr: Expr,
        has: bool,
        flags: Vec<String>,
    },
    /// `expect anonhuge ADDR == SIZE`
    AnonHuge { addr: Expr, size: Expr },
    /// `expect lazyfree ADDR == SIZE`: smaps `LazyFree` of the VMA.
    LazyFree { addr: Expr, size: Expr },
    /// `expect vmlck == SIZE`: the process's `VmLck` (locked_vm).
    VmLck { size: Expr },
    /// `expect bytes ADDR LEN == VALUE` (LEN 1..=8: the little-endian
    /// value of the bytes) or `expect bytes ADDR LEN fill BYTE` (every
    /// byte is BYTE).
    Bytes {
        addr: Expr,
        len: Expr,
        fill: bool,
        value: Expr,
    },
    /// `expect value EXPR == EXPR` (`equal`) or `!= EXPR`.
    Value {
        left: Expr,
        equal: bool,
        right: Expr,
    },
    /// `expect invariants`
    Invariants,
}

/// One line of an `expect maps` block: `START .. END PERMS`.
#[derive(Clone, Debug, PartialEq)]
pub struct MapsLine {
    pub pos: Pos,
    pub start: Expr,
    pub end: Expr,
    pub perms: String,
}

/// One attribute of `expect page`.
#[derive(Clone, Debug, PartialEq)]
pub struct PageAttr {
    pub pos: Pos,
    pub kind: PageAttrKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PageAttrKind {
    /// `none`: not present.
    None,
    /// `zero`: the shared zero page.
    Zero,
    /// `hugezero`: part of the huge zero folio.
    HugeZero,
    /// `anon`: an anonymous folio page.
    Anon,
    /// `swapped`: a swap PTE (pagemap bit 62).
    Swapped,
    /// `order=N`
    Order(Expr),
    /// `folio=SIZE`
    Folio(Expr),
    /// `idx=N`: first page has folio index N, the next N+1, ...
    Idx(Expr),
    /// `pmd`: mapped by a PMD.
    Pmd,
    /// `pte`: mapped by PTEs.
    Pte,
    /// `X` / `!X`: pagemap PM_MMAP_EXCLUSIVE.
    Exclusive(bool),
    /// `AX` / `!AX`: kpageflags anon-exclusive.
    AnonExclusive(bool),
    /// `cnt=N`: kpagecount.
    Count(Expr),
    /// `tag=EXPR`
    Tag(Expr),
    /// `samefolio`: every page of the range in one folio.
    SameFolio,
    /// `guard`: a guard marker (MADV_GUARD_INSTALL).
    Guard,
}

/// Binary operators, loosest-binding last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Mul,
    Div,
    Rem,
    Add,
    Sub,
    Shl,
    Shr,
    And,
    Or,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::And => "&",
            BinOp::Or => "|",
        }
    }
}

/// Builtin functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    AlignUp,
    AlignDown,
}

impl Builtin {
    pub fn name(self) -> &'static str {
        match self {
            Builtin::AlignUp => "align_up",
            Builtin::AlignDown => "align_down",
        }
    }
}

/// An integer expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Num(u64),
    Var {
        id: NameId,
        pos: Pos,
    },
    /// Unary minus: two's-complement negation (so `x & -PAGE` aligns down).
    Neg(Box<Expr>),
    /// A left-associative chain of operators of one precedence level:
    /// `first op₁ x₁ op₂ x₂ …` is `((first op₁ x₁) op₂ x₂) …`, each operator
    /// with its position. One node however long the chain, so a flat sum of
    /// many terms is not deep nesting (and evaluating it is a loop).
    Chain {
        first: Box<Expr>,
        rest: Vec<(BinOp, Expr, Pos)>,
    },
    Call {
        func: Builtin,
        args: Box<[Expr; 2]>,
        pos: Pos,
    },
}
