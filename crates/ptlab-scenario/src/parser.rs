//! Recursive-descent parser for `.ptl` scenarios.
//!
//! Each source line is lexed on its own ([`crate::lexer`]); the parser walks
//! the non-blank lines in order, recursing for `repeat` ... `end` and
//! `expect maps` ... `end` blocks. Variables and process names are resolved
//! as they are met, so a typo is reported at parse time with a suggestion,
//! and the interpreter only ever sees slot indices.
//!
//! Every error is a [`ParseError`] naming `file:line:column`, what was
//! expected and what was found. The parser never panics; recursion is bounded
//! by [`MAX_EXPR_DEPTH`] and [`MAX_BLOCK_DEPTH`].

use crate::ast::*;
use crate::error::{suggestion, ParseError};
use crate::lexer::{column_of, is_perms, lex_line, strip_comment, Token, TokenKind};
use ptlab_model::{Advice, Errno, Prot, ThpMode, PAGE_SIZE, PMD_SIZE, PUD_SIZE};
use std::collections::HashMap;

/// Deepest expression tree accepted (operators, parentheses, unary minus).
pub const MAX_EXPR_DEPTH: usize = 128;
/// Deepest nesting of `repeat` blocks accepted.
pub const MAX_BLOCK_DEPTH: usize = 32;
/// Largest scenario accepted, in bytes (4 MiB): a thousand times the
/// largest hand-written scenario and ten times the largest `ptlab fuzz`
/// generates, and small enough that parsing it stays within a few hundred
/// MB (a statement takes some 400 bytes parsed). Readers of scenario files
/// stop reading here too.
pub const MAX_SOURCE_BYTES: usize = 4 << 20;
/// Longest line accepted, in bytes, not counting a `#` comment (64 KiB):
/// each line is lexed into tokens at once, so this bounds that memory.
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// Syscall keywords (statements whose result can be bound with `NAME =`).
const SYSCALLS: &[&str] = &[
    "mmap",
    "munmap",
    "madvise",
    "mremap",
    "mprotect",
    "mlock",
    "munlock",
    "mseal",
    "fork",
    "exit",
    "prctl",
    "setrlimit",
    "capability",
    "fill",
    "uffd",
];
/// The other words that start a statement.
const OTHER_STATEMENTS: &[&str] = &[
    "let", "read", "write", "thp", "swap", "repeat", "end", "expect", "observe", "before", "after",
    "param", "machine", "numa",
];

/// Every word that starts a statement: the syscalls and the rest.
fn statement_keywords() -> impl Iterator<Item = &'static str> {
    SYSCALLS.iter().chain(OTHER_STATEMENTS).copied()
}

fn is_statement_keyword(w: &str) -> bool {
    SYSCALLS.contains(&w) || OTHER_STATEMENTS.contains(&w)
}
/// Words that can never be variable names.
const RESERVED_EXTRA: &[&str] = &["pfn", "align_up", "align_down", "PAGE", "PMD", "PUD"];
const CONSTANTS: &[(&str, u64)] = &[("PAGE", PAGE_SIZE), ("PMD", PMD_SIZE), ("PUD", PUD_SIZE)];
const MMAP_OPTIONS: &[&str] = &[
    "at",
    "fixed",
    "noreplace",
    "prot",
    "noreserve",
    "populate",
    "locked",
    "flags",
];
const RLIMIT_NAMES: &[&str] = &["as", "data", "memlock"];
const RLIMIT_UNLIMITED: &[&str] = &["unlimited"];
const CAPABILITY_OPS: &[&str] = &["drop"];
const CAPABILITY_NAMES: &[&str] = &["ipc_lock"];
const FILL_WORDS: &[&str] = &["headroom"];
const MREMAP_OPTIONS: &[&str] = &["maymove", "fixed", "dontunmap", "flags"];
const UFFD_SUBCOMMANDS: &[&str] = &[
    "open",
    "create",
    "api",
    "register",
    "unregister",
    "copy",
    "zeropage",
    "move",
];
const PRCTL_OPTIONS: &[&str] = &["thp_disable", "get_thp_disable"];
const PRCTL_THP_FLAGS: &[&str] = &["except_advised", "flags"];
const UFFD_MOVE_OPTIONS: &[&str] = &["allow_src_holes", "dontwake", "mode", "via"];
const UFFD_COPY_OPTIONS: &[&str] = &["tag", "wp", "dontwake", "mode", "via"];
const UFFD_ZEROPAGE_OPTIONS: &[&str] = &["dontwake", "mode", "via"];
const UFFD_MODES: &[&str] = &["missing", "wp", "minor", "mode"];
const UFFD_VIA: &[&str] = &["via"];
const UFFD_API_OPTIONS: &[&str] = &["features", "via"];
/// The advice words: [`Advice::ALL`]'s names.
const ADVICE_NAMES: &[&str] = &{
    let mut names = [""; Advice::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Advice::ALL[i].name();
        i += 1;
    }
    names
};
const PROT_WORDS: &[&str] = &["r", "w", "x", "rw", "rx", "wx", "rwx", "none"];
const THP_MODES: &[&str] = &["always", "inherit", "madvise", "never"];
const THP_KNOBS: &[&str] = &["enabled", "use_zero_page"];
const PAGE_ATTRS: &[&str] = &[
    "none",
    "zero",
    "hugezero",
    "anon",
    "swapped",
    "order",
    "folio",
    "idx",
    "pmd",
    "pte",
    "X",
    "AX",
    "cnt",
    "tag",
    "samefolio",
    "guard",
];
const CHECK_KINDS: &[&str] = &["ok", "errno", "ret", "segv", "uffd"];
const EXPECT_KINDS: &[&str] = &[
    "ok",
    "errno",
    "ret",
    "segv",
    "uffd",
    "maps",
    "page",
    "pfn",
    "stat",
    "vmflags",
    "anonhuge",
    "lazyfree",
    "vmlck",
    "bytes",
    "value",
    "invariants",
];
const OBSERVE_SECTIONS: &[&str] = &["maps", "smaps", "pages", "stats", "numa"];
const MACHINE_SETTINGS: &[&str] = &["memory", "nodes"];
const NUMA_OPS: &[&str] = &["node", "scan"];
const NO_STOP: &[&str] = &[];

/// Parse a whole scenario. `file` names the source in messages.
pub fn parse(file: &str, source: &str) -> Result<Script, ParseError> {
    // Editors on some systems save UTF-8 with a byte-order mark; it is not
    // part of the scenario (columns on line 1 are counted after it).
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    if source.len() > MAX_SOURCE_BYTES {
        return Err(ParseError::new(
            file,
            1,
            1,
            format!(
                "the scenario is {} bytes; the limit is {MAX_SOURCE_BYTES} bytes ({} MiB)",
                source.len(),
                MAX_SOURCE_BYTES >> 20
            ),
        ));
    }
    let mut lines = Vec::new();
    for (i, text) in source.lines().enumerate() {
        let no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let code = strip_comment(text);
        if code.len() > MAX_LINE_BYTES {
            return Err(ParseError::new(
                file,
                no,
                1,
                format!(
                    "line is {} bytes long (not counting a comment); the limit is \
                     {MAX_LINE_BYTES} bytes (64 KiB): split it",
                    code.len()
                ),
            ));
        }
        if code.trim().is_empty() {
            continue;
        }
        lines.push(SrcLine {
            no,
            text: code,
            tokens: None,
        });
    }
    let mut parser = Parser {
        file,
        lines,
        next: 0,
        scope: Scope::default(),
    };
    let body = parser.block(None, 0)?;
    Ok(Script {
        file: file.to_string(),
        names: parser.scope.names,
        body,
    })
}

/// A non-blank source line; tokens are produced when the parser reaches it.
struct SrcLine<'s> {
    no: u32,
    text: &'s str,
    /// Cache for look-ahead; `None` until lexed.
    tokens: Option<Result<Vec<Token>, ParseError>>,
}

/// Names and processes known at the current point of the parse.
#[derive(Default)]
struct Scope {
    names: Vec<String>,
    kinds: Vec<NameKind>,
    /// Line of the first binding, for messages.
    lines: Vec<u32>,
    ids: HashMap<String, NameId>,
    /// Processes created so far (`main` plus `fork` targets).
    processes: Vec<String>,
}

impl Scope {
    fn lookup(&self, name: &str) -> Option<(NameId, NameKind, u32)> {
        let id = *self.ids.get(name)?;
        Some((
            id,
            *self.kinds.get(id.index())?,
            *self.lines.get(id.index())?,
        ))
    }

    fn has_process(&self, name: &str) -> bool {
        name == "main" || self.processes.iter().any(|p| p == name)
    }
}

/// What an expression position expects, for messages, and which words end it.
struct Ctx<'a> {
    /// E.g. "a size or expression after 'mmap'".
    what: &'a str,
    /// Option words of the statement that cannot start an operand here.
    stop: &'a [&'a str],
}

/// A cursor over the tokens of one line.
struct Cur<'s> {
    file: &'s str,
    line: u32,
    text: &'s str,
    toks: Vec<Token>,
    i: usize,
}

impl<'s> Cur<'s> {
    fn peek(&self) -> Option<&TokenKind> {
        self.toks.get(self.i).map(|t| &t.kind)
    }

    fn peek_at(&self, n: usize) -> Option<&TokenKind> {
        self.toks.get(self.i.checked_add(n)?).map(|t| &t.kind)
    }

    fn peek_ident(&self) -> Option<&str> {
        match self.peek() {
            Some(TokenKind::Ident(s)) => Some(s),
            _ => None,
        }
    }

    fn at_end(&self) -> bool {
        self.i >= self.toks.len()
    }

    fn bump(&mut self) -> Option<Token> {
        let t = self.toks.get(self.i).cloned();
        if t.is_some() {
            self.i += 1;
        }
        t
    }

    /// Consume the identifier `word` if it is next.
    fn eat(&mut self, word: &str) -> bool {
        if self.peek_ident() == Some(word) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn eat_kind(&mut self, kind: &TokenKind) -> bool {
        if self.peek() == Some(kind) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// Position of token `idx`, or just past the end of the line.
    fn pos_of(&self, idx: usize) -> Pos {
        let byte = self
            .toks
            .get(idx)
            .map_or_else(|| self.text.trim_end().len(), |t| t.start);
        Pos {
            line: self.line,
            column: column_of(self.text, byte),
        }
    }

    fn pos(&self) -> Pos {
        self.pos_of(self.i)
    }

    fn found(&self) -> String {
        self.peek()
            .map_or_else(|| "end of line".to_string(), TokenKind::describe)
    }

    fn err_at(&self, pos: Pos, message: impl Into<String>) -> ParseError {
        ParseError::new(self.file, pos.line, pos.column, message)
    }

    fn err(&self, message: impl Into<String>) -> ParseError {
        self.err_at(self.pos(), message)
    }

    /// "expected WHAT, found X" at the current token.
    fn expected(&self, what: &str) -> ParseError {
        self.err(format!("expected {what}, found {}", self.found()))
    }

    /// Require the end of the line.
    fn finish(&self, after: &str) -> Result<(), ParseError> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.err(format!(
                "expected end of line after {after}, found {}",
                self.found()
            )))
        }
    }

    /// Consume an identifier, or fail with "expected WHAT".
    fn ident(&mut self, what: &str) -> Result<(String, Pos), ParseError> {
        let pos = self.pos();
        match self.peek() {
            Some(TokenKind::Ident(s)) => {
                let s = s.clone();
                self.i += 1;
                Ok((s, pos))
            }
            _ => Err(self.expected(what)),
        }
    }

    /// Consume an identifier from `words`; unknown identifiers get a
    /// suggestion.
    fn word(&mut self, words: &[&str], what: &str) -> Result<(String, Pos), ParseError> {
        let pos = self.pos();
        match self.peek_ident() {
            Some(w) if words.contains(&w) => self.ident(what),
            Some(w) => Err(self.err(format!(
                "expected {what}, found '{w}'{}",
                suggestion(w, words.iter().copied())
            ))),
            None => Err(self.err_at(pos, format!("expected {what}, found {}", self.found()))),
        }
    }

    /// A dashed name such as `fork-pte-batch` (lexed as ident, '-', ident...),
    /// which must be one of `words`.
    fn switch_name(&mut self, words: &[&str], what: &str) -> Result<(String, Pos), ParseError> {
        let pos = self.pos();
        let Some(first) = self.peek_ident().map(str::to_string) else {
            return Err(self.err_at(pos, format!("expected {what}, found {}", self.found())));
        };
        self.bump();
        let mut name = first;
        while self.peek() == Some(&TokenKind::Minus) {
            self.bump();
            match self.peek_ident().map(str::to_string) {
                Some(part) => {
                    self.bump();
                    name.push('-');
                    name.push_str(&part);
                }
                None => return Err(self.expected("the rest of the switch name after '-'")),
            }
        }
        if words.contains(&name.as_str()) {
            Ok((name, pos))
        } else {
            Err(self.err_at(
                pos,
                format!(
                    "expected {what}, found '{name}'{}",
                    suggestion(&name, words.iter().copied())
                ),
            ))
        }
    }

    /// The source text of the whole line, trimmed.
    fn line_text(&self) -> String {
        self.text.trim().to_string()
    }
}

struct Parser<'s> {
    file: &'s str,
    lines: Vec<SrcLine<'s>>,
    next: usize,
    scope: Scope,
}

impl<'s> Parser<'s> {
    // ----- line handling -------------------------------------------------

    /// Lex line `idx` (once) and return its tokens.
    fn tokens(&mut self, idx: usize) -> Result<&[Token], ParseError> {
        let file = self.file;
        let line = self
            .lines
            .get_mut(idx)
            .ok_or_else(|| ParseError::new(file, 0, 0, "internal: no such line"))?;
        let toks = line
            .tokens
            .get_or_insert_with(|| lex_line(file, line.no, line.text));
        match toks {
            Ok(t) => Ok(t.as_slice()),
            Err(e) => Err(e.clone()),
        }
    }

    /// Take the next line as a cursor.
    fn take_line(&mut self) -> Result<Option<Cur<'s>>, ParseError> {
        let idx = self.next;
        if idx >= self.lines.len() {
            return Ok(None);
        }
        self.tokens(idx)?;
        self.next += 1;
        let line = &mut self.lines[idx];
        let toks = match line.tokens.take() {
            Some(Ok(t)) => t,
            Some(Err(e)) => return Err(e),
            None => Vec::new(),
        };
        Ok(Some(Cur {
            file: self.file,
            line: line.no,
            text: line.text,
            toks,
            i: 0,
        }))
    }

    /// Whether the next line is `expect ok|errno|ret|segv|uffd`.
    fn next_is_check(&mut self) -> bool {
        let idx = self.next;
        if idx >= self.lines.len() {
            return false;
        }
        self.tokens(idx).is_ok_and(is_check_line)
    }

    // ----- blocks and statements -----------------------------------------

    /// Parse statements until `end` (when `opener` is set) or end of file.
    fn block(
        &mut self,
        opener: Option<(Pos, &str)>,
        depth: usize,
    ) -> Result<Vec<Stmt>, ParseError> {
        let mut out = Vec::new();
        loop {
            let Some(mut cur) = self.take_line()? else {
                return match opener {
                    Some((pos, what)) => Err(ParseError::new(
                        self.file,
                        pos.line,
                        pos.column,
                        format!("'{what}' at line {} is never closed: expected 'end' before end of file", pos.line),
                    )),
                    None => Ok(out),
                };
            };
            if cur.peek_ident() == Some("end") {
                if opener.is_none() {
                    return Err(cur.err("'end' without a matching 'repeat'"));
                }
                cur.bump();
                cur.finish("'end'")?;
                return Ok(out);
            }
            out.push(self.statement(cur, depth)?);
        }
    }

    fn statement(&mut self, mut cur: Cur<'s>, depth: usize) -> Result<Stmt, ParseError> {
        let text = cur.line_text();
        let mut process = None;
        if cur.eat_kind(&TokenKind::At) {
            let (name, pos) = cur.ident("a process name after '@'")?;
            if !self.scope.has_process(&name) {
                let known =
                    std::iter::once("main").chain(self.scope.processes.iter().map(String::as_str));
                return Err(cur.err_at(
                    pos,
                    format!(
                        "unknown process '{name}'{}; processes are 'main' and those created by 'fork NAME'",
                        suggestion(&name, known)
                    ),
                ));
            }
            if cur.at_end() {
                return Ok(Stmt {
                    pos,
                    text,
                    process: None,
                    kind: StmtKind::Switch { process: name },
                });
            }
            if cur.peek() == Some(&TokenKind::At) {
                return Err(cur.err("only one '@process' prefix is allowed per line"));
            }
            process = Some(name);
        }
        let pos = cur.pos();
        let Some(first) = cur.peek_ident().map(str::to_string) else {
            return Err(cur.expected("a statement"));
        };
        // `NAME = <syscall>` / `NAME = pfn ADDR`.
        if first != "let" && first != "param" && cur.peek_at(1) == Some(&TokenKind::Assign) {
            let kind = self.binding(&mut cur, &first, pos)?;
            return Ok(Stmt {
                pos,
                text,
                process,
                kind,
            });
        }
        let kind = match first.as_str() {
            "let" => {
                cur.bump();
                let (name, name_pos) = cur.ident("a name after 'let'")?;
                if !cur.eat_kind(&TokenKind::Assign) {
                    return Err(cur.expected(&format!("'=' after 'let {name}'")));
                }
                let value = self.arg(&mut cur, "an expression after '='", NO_STOP)?;
                cur.finish("the expression")?;
                let name = self.define(&cur, &name, name_pos, NameKind::Int)?;
                StmtKind::Let { name, value }
            }
            "param" => {
                cur.bump();
                let (name, name_pos) = cur.ident("a name after 'param'")?;
                if !cur.eat_kind(&TokenKind::Assign) {
                    return Err(cur.expected(&format!("'=' after 'param {name}'")));
                }
                let value = self.arg(&mut cur, "a default value after '='", NO_STOP)?;
                cur.finish("the default value")?;
                let name = self.define(&cur, &name, name_pos, NameKind::Int)?;
                StmtKind::Param { name, value }
            }
            kw if SYSCALLS.contains(&kw) => {
                cur.bump();
                let op = Op::Syscall(self.syscall(&mut cur, kw)?);
                let check = self.check_for(&op)?;
                StmtKind::Op {
                    bind: None,
                    op,
                    check,
                }
            }
            "read" | "write" => {
                cur.bump();
                let access = self.access(&mut cur, &first)?;
                let op = Op::Access(access);
                let check = self.check_for(&op)?;
                StmtKind::Op {
                    bind: None,
                    op,
                    check,
                }
            }
            "machine" => {
                cur.bump();
                let (what, _) = cur.word(
                    MACHINE_SETTINGS,
                    "'memory SIZE' or 'nodes N' after 'machine'",
                )?;
                let op = if what == "memory" {
                    Op::Memory(self.arg(
                        &mut cur,
                        "a memory size such as 64G or 4T after 'machine memory'",
                        NO_STOP,
                    )?)
                } else {
                    Op::Nodes(self.arg(
                        &mut cur,
                        "a number of NUMA nodes (1 to 64) after 'machine nodes'",
                        NO_STOP,
                    )?)
                };
                cur.finish("the machine setting")?;
                let check = self.check_for(&op)?;
                StmtKind::Op {
                    bind: None,
                    op,
                    check,
                }
            }
            "numa" => {
                cur.bump();
                let (what, _) = cur.word(NUMA_OPS, "'node N' or 'scan ADDR LEN' after 'numa'")?;
                let op = if what == "node" {
                    Op::Numa(NumaOp::Node(self.arg(
                        &mut cur,
                        "the node the process runs on after 'numa node'",
                        NO_STOP,
                    )?))
                } else {
                    let addr =
                        self.arg(&mut cur, "the start address after 'numa scan'", NO_STOP)?;
                    let len = self.arg(&mut cur, "the length after 'numa scan ADDR'", NO_STOP)?;
                    Op::Numa(NumaOp::Scan { addr, len })
                };
                cur.finish("the numa statement")?;
                let check = self.check_for(&op)?;
                StmtKind::Op {
                    bind: None,
                    op,
                    check,
                }
            }
            "swap" => {
                cur.bump();
                let mut kind = ptlab_model::swap::SwapKind::File;
                let size = if cur.eat("off") {
                    None
                } else {
                    let size = self.arg(
                        &mut cur,
                        "a swap size such as 64M, or 'off', after 'swap'",
                        &["file", "blockdev"],
                    )?;
                    if cur.eat("blockdev") {
                        kind = ptlab_model::swap::SwapKind::BlockDev;
                    } else {
                        cur.eat("file");
                    }
                    Some(size)
                };
                cur.finish("the swap setting ('swap SIZE [file|blockdev]' or 'swap off')")?;
                let op = Op::Swap(size, kind);
                let check = self.check_for(&op)?;
                StmtKind::Op {
                    bind: None,
                    op,
                    check,
                }
            }
            "thp" => {
                cur.bump();
                let op = Op::Thp(self.thp(&mut cur)?);
                let check = self.check_for(&op)?;
                StmtKind::Op {
                    bind: None,
                    op,
                    check,
                }
            }
            "repeat" => {
                cur.bump();
                if depth >= MAX_BLOCK_DEPTH {
                    return Err(cur.err_at(
                        pos,
                        format!("'repeat' blocks nested more than {MAX_BLOCK_DEPTH} deep"),
                    ));
                }
                let count = self.arg(&mut cur, "a repeat count after 'repeat'", &["as"])?;
                let var = if cur.eat("as") {
                    let (name, name_pos) = cur.ident("a loop variable name after 'as'")?;
                    Some(self.define(&cur, &name, name_pos, NameKind::Int)?)
                } else {
                    None
                };
                cur.finish("the repeat header")?;
                let body = self.block(Some((pos, "repeat")), depth + 1)?;
                StmtKind::Repeat { count, var, body }
            }
            "expect" => {
                cur.bump();
                StmtKind::Expect(self.expect(&mut cur, pos)?)
            }
            "observe" => {
                cur.bump();
                StmtKind::Observe(observe_sections(&mut cur)?)
            }
            "before" => {
                cur.bump();
                StmtKind::Before(before_switches(&mut cur)?)
            }
            "after" => {
                cur.bump();
                StmtKind::After(after_switches(&mut cur)?)
            }
            "pfn" => {
                return Err(cur.err(
                    "'pfn' binds a frame handle and must be assigned: write 'NAME = pfn ADDR'",
                ));
            }
            other => {
                let hint = if self.scope.lookup(other).is_some() {
                    format!("; to assign to '{other}' write 'let {other} = EXPR'")
                } else {
                    suggestion(other, statement_keywords())
                };
                return Err(cur.err(format!("expected a statement, found '{other}'{hint}")));
            }
        };
        Ok(Stmt {
            pos,
            text,
            process,
            kind,
        })
    }

    /// `NAME = <syscall>` or `NAME = pfn ADDR`.
    fn binding(
        &mut self,
        cur: &mut Cur<'s>,
        name: &str,
        name_pos: Pos,
    ) -> Result<StmtKind, ParseError> {
        cur.bump(); // NAME
        cur.bump(); // =
        let rhs_pos = cur.pos();
        match cur.peek_ident() {
            Some("pfn") => {
                cur.bump();
                let addr = self.arg(cur, "an address after 'pfn'", NO_STOP)?;
                cur.finish("the address")?;
                let name = self.define(cur, name, name_pos, NameKind::Frame)?;
                Ok(StmtKind::BindPfn { name, addr })
            }
            Some(kw) if SYSCALLS.contains(&kw) => {
                let kw = kw.to_string();
                cur.bump();
                let op = Op::Syscall(self.syscall(cur, &kw)?);
                let bind = Some(self.define(cur, name, name_pos, NameKind::Int)?);
                let check = self.check_for(&op)?;
                Ok(StmtKind::Op { bind, op, check })
            }
            Some(kw @ ("read" | "write" | "thp" | "swap")) => Err(cur.err_at(
                rhs_pos,
                format!("'{kw}' has no result to bind; only syscalls and 'pfn' can follow '{name} ='"),
            )),
            _ => Err(cur.err_at(
                rhs_pos,
                format!(
                    "expected a syscall (mmap, munmap, madvise, mremap, mprotect, mlock, munlock, mseal, fork, exit, uffd) or 'pfn' \
                     after '{name} =', found {}; to bind an expression write 'let {name} = ...'",
                    cur.found()
                ),
            )),
        }
    }

    /// Bind `name` to a new or existing slot of kind `kind`.
    fn define(
        &mut self,
        cur: &Cur<'s>,
        name: &str,
        pos: Pos,
        kind: NameKind,
    ) -> Result<NameId, ParseError> {
        if is_statement_keyword(name) || RESERVED_EXTRA.contains(&name) {
            return Err(cur.err_at(
                pos,
                format!("'{name}' is a reserved word and cannot be used as a name"),
            ));
        }
        if let Some((id, old_kind, line)) = self.scope.lookup(name) {
            if old_kind != kind {
                let what = |k| match k {
                    NameKind::Int => "a number",
                    NameKind::Frame => "a frame handle",
                };
                return Err(cur.err_at(
                    pos,
                    format!(
                        "'{name}' holds {} (bound at line {line}) and cannot be rebound to {}",
                        what(old_kind),
                        what(kind)
                    ),
                ));
            }
            return Ok(id);
        }
        let id = NameId(
            u32::try_from(self.scope.names.len()).map_err(|_| cur.err_at(pos, "too many names"))?,
        );
        self.scope.names.push(name.to_string());
        self.scope.kinds.push(kind);
        self.scope.lines.push(pos.line);
        self.scope.ids.insert(name.to_string(), id);
        Ok(id)
    }

    /// Consume an `expect ok|errno|ret|segv|uffd` line about `op`, if one follows.
    fn check_for(&mut self, op: &Op) -> Result<Option<Check>, ParseError> {
        if !self.next_is_check() {
            return Ok(None);
        }
        let Some(mut cur) = self.take_line()? else {
            return Ok(None);
        };
        let text = cur.line_text();
        cur.bump(); // expect
        let pos = cur.pos();
        let (word, _) = cur.ident("ok, errno, ret, segv or uffd")?;
        let kind = match word.as_str() {
            "ok" => CheckKind::Ok,
            "errno" => {
                let (name, name_pos) =
                    cur.ident("an errno name such as EINVAL after 'expect errno'")?;
                let errno = Errno::from_name(&name).ok_or_else(|| {
                    cur.err_at(
                        name_pos,
                        format!(
                            "unknown errno '{name}'{}",
                            suggestion(&name, Errno::ALL.iter().map(|e| e.name()))
                        ),
                    )
                })?;
                CheckKind::Errno(errno)
            }
            "ret" => {
                if !cur.eat_kind(&TokenKind::EqEq) {
                    return Err(cur.expected("'==' after 'expect ret'"));
                }
                CheckKind::Ret(self.arg(&mut cur, "the expected return value", NO_STOP)?)
            }
            "uffd" => CheckKind::Uffd,
            _ => CheckKind::Segv,
        };
        cur.finish(&format!("'expect {word}'"))?;
        let allowed = match (op, &kind) {
            (Op::Syscall(_), CheckKind::Segv) => Some("'expect segv' only follows read or write; a syscall reports errors with 'expect errno NAME'"),
            (Op::Syscall(_) | Op::Thp(_) | Op::Swap(..), CheckKind::Uffd) => Some("'expect uffd' only follows read or write (an access that faults to userfaultfd)"),
            (Op::Access(_), CheckKind::Errno(_) | CheckKind::Ret(_)) => Some("read and write do not fail with an errno; use 'expect segv', 'expect uffd' or 'expect ok'"),
            (Op::Thp(_), CheckKind::Ret(_) | CheckKind::Segv) => Some("a thp line can only be followed by 'expect ok' or 'expect errno NAME'"),
            (Op::Swap(..), CheckKind::Ret(_) | CheckKind::Segv) => Some("a swap line can only be followed by 'expect ok' or 'expect errno NAME'"),
            (Op::Memory(_) | Op::Nodes(_), CheckKind::Ret(_) | CheckKind::Segv | CheckKind::Uffd) => Some("a machine line can only be followed by 'expect ok' or 'expect errno NAME'"),
            (Op::Numa(NumaOp::Node(_)), CheckKind::Ret(_) | CheckKind::Segv | CheckKind::Uffd) => Some("'numa node' can only be followed by 'expect ok' or 'expect errno NAME'"),
            (Op::Numa(NumaOp::Scan { .. }), CheckKind::Segv | CheckKind::Uffd) => Some("'numa scan' can only be followed by 'expect ok', 'expect errno NAME' or 'expect ret == N' (the PTEs it changed)"),
            _ => None,
        };
        if let Some(msg) = allowed {
            return Err(cur.err_at(pos, msg));
        }
        if self.next_is_check() {
            if let Some(extra) = self.take_line()? {
                return Err(extra.err_at(
                    extra.pos(),
                    format!("only one 'expect ok|errno|ret|segv|uffd' line may follow a statement (line {} already checks it)", pos.line),
                ));
            }
        }
        Ok(Some(Check { pos, text, kind }))
    }

    // ----- syscalls ----------------------------------------------------------

    fn syscall(&mut self, cur: &mut Cur<'s>, kw: &str) -> Result<Syscall, ParseError> {
        let call = match kw {
            "mmap" => self.mmap(cur)?,
            "munmap" => {
                let addr = self.arg(cur, "an address after 'munmap'", NO_STOP)?;
                let len = self.arg(cur, "a length after the address", NO_STOP)?;
                Syscall::Munmap { addr, len }
            }
            "madvise" => {
                let addr = self.arg(cur, "an address after 'madvise'", NO_STOP)?;
                let len = self.arg(cur, "a length after the address", &["advice"])?;
                if cur.eat("advice") {
                    let raw = self.arg(cur, "an advice value after 'advice'", NO_STOP)?;
                    Syscall::Madvise {
                        addr,
                        len,
                        advice: Advice::DontNeed,
                        advice_raw: Some(raw),
                    }
                } else {
                    let (word, pos) = cur.word(
                        ADVICE_NAMES,
                        "an advice (dontneed, hugepage, nohugepage, ..., or 'advice VALUE')",
                    )?;
                    let advice = Advice::from_name(&word).ok_or_else(|| {
                        cur.err_at(pos, format!("advice '{word}' is not known to the model"))
                    })?;
                    Syscall::Madvise {
                        addr,
                        len,
                        advice,
                        advice_raw: None,
                    }
                }
            }
            "mremap" => {
                let addr = self.arg(cur, "an address after 'mremap'", MREMAP_OPTIONS)?;
                let old_len = self.arg(cur, "the old length after the address", MREMAP_OPTIONS)?;
                let new_len =
                    self.arg(cur, "the new length after the old length", MREMAP_OPTIONS)?;
                let (mut maymove, mut fixed, mut dontunmap) = (false, None, false);
                let mut flags = None;
                while !cur.at_end() {
                    let (word, pos) = cur.word(
                        MREMAP_OPTIONS,
                        "an mremap option (maymove, fixed NEWADDR, dontunmap, flags VALUE)",
                    )?;
                    let dup = match word.as_str() {
                        "maymove" => std::mem::replace(&mut maymove, true),
                        "dontunmap" => std::mem::replace(&mut dontunmap, true),
                        "flags" => {
                            let was = flags.is_some();
                            flags = Some(self.arg(
                                cur,
                                "a flags value after 'flags'",
                                MREMAP_OPTIONS,
                            )?);
                            was
                        }
                        _ => {
                            let was = fixed.is_some();
                            fixed = Some(self.arg(
                                cur,
                                "a new address after 'fixed'",
                                MREMAP_OPTIONS,
                            )?);
                            was
                        }
                    };
                    if dup {
                        return Err(cur.err_at(pos, format!("duplicate option '{word}'")));
                    }
                }
                Syscall::Mremap {
                    addr,
                    old_len,
                    new_len,
                    maymove,
                    fixed,
                    dontunmap,
                    flags,
                }
            }
            "mprotect" => {
                let addr = self.arg(cur, "an address after 'mprotect'", NO_STOP)?;
                let len = self.arg(cur, "a length after the address", NO_STOP)?;
                let (prot, prot_raw) = self.prot_arg(cur, NO_STOP)?;
                Syscall::Mprotect {
                    addr,
                    len,
                    prot,
                    prot_raw,
                }
            }
            "mlock" => {
                let stops = &["onfault", "flags"];
                let addr = self.arg(cur, "an address after 'mlock'", stops)?;
                let len = self.arg(cur, "a length after the address", stops)?;
                let (mut onfault, mut flags) = (false, None);
                while !cur.at_end() {
                    let (word, pos) =
                        cur.word(stops, "'onfault', 'flags VALUE' or the end of the line")?;
                    let dup = if word == "flags" {
                        flags
                            .replace(self.arg(cur, "a flags value after 'flags'", stops)?)
                            .is_some()
                    } else {
                        std::mem::replace(&mut onfault, true)
                    };
                    if dup {
                        return Err(cur.err_at(pos, format!("duplicate option '{word}'")));
                    }
                }
                Syscall::Mlock {
                    addr,
                    len,
                    onfault,
                    flags,
                }
            }
            "munlock" => {
                let addr = self.arg(cur, "an address after 'munlock'", NO_STOP)?;
                let len = self.arg(cur, "a length after the address", NO_STOP)?;
                Syscall::Munlock { addr, len }
            }
            "fill" => {
                let addr = self.arg(cur, "an address after 'fill'", FILL_WORDS)?;
                cur.word(FILL_WORDS, "'headroom' after the address")?;
                let headroom = self.arg(cur, "a number of VMAs after 'headroom'", NO_STOP)?;
                Syscall::Fill { addr, headroom }
            }
            "mseal" => {
                let addr = self.arg(cur, "an address after 'mseal'", &["flags"])?;
                let len = self.arg(cur, "a length after the address", &["flags"])?;
                let flags = if cur.at_end() {
                    None
                } else {
                    cur.word(&["flags"], "'flags VALUE' or the end of the line")?;
                    Some(self.arg(cur, "a flags value after 'flags'", NO_STOP)?)
                };
                Syscall::Mseal { addr, len, flags }
            }
            "fork" => {
                let (child, pos) = cur.ident("a name for the child process after 'fork'")?;
                if child == "main" {
                    return Err(cur.err_at(
                        pos,
                        "the first process is already called 'main'; pick another name",
                    ));
                }
                if !self.scope.has_process(&child) {
                    self.scope.processes.push(child.clone());
                }
                Syscall::Fork { child }
            }
            "exit" => Syscall::Exit,
            "prctl" => {
                let (word, _) = cur.word(
                    PRCTL_OPTIONS,
                    "a prctl option (thp_disable VALUE [except_advised], get_thp_disable)",
                )?;
                if word == "get_thp_disable" {
                    Syscall::PrctlGetThpDisable
                } else {
                    let disable =
                        self.arg(cur, "a value (0 or 1) after 'thp_disable'", PRCTL_THP_FLAGS)?;
                    let (mut except_advised, mut flags) = (false, None);
                    while !cur.at_end() {
                        let (word, pos) = cur.word(
                            PRCTL_THP_FLAGS,
                            "'except_advised', 'flags VALUE' or the end of the line",
                        )?;
                        let dup = if word == "flags" {
                            flags
                                .replace(self.arg(
                                    cur,
                                    "a flags value after 'flags'",
                                    PRCTL_THP_FLAGS,
                                )?)
                                .is_some()
                        } else {
                            std::mem::replace(&mut except_advised, true)
                        };
                        if dup {
                            return Err(cur.err_at(pos, format!("duplicate option '{word}'")));
                        }
                    }
                    Syscall::PrctlSetThpDisable {
                        disable,
                        except_advised,
                        flags,
                    }
                }
            }
            "setrlimit" => {
                let (name, _) = cur.word(
                    RLIMIT_NAMES,
                    "a resource (as, data, memlock) after 'setrlimit'",
                )?;
                let resource = ptlab_model::Resource::from_name(&name).expect("listed");
                let bytes = if cur.eat("unlimited") {
                    None
                } else {
                    Some(self.arg(
                        cur,
                        "a limit in bytes (or 'unlimited') after the resource",
                        RLIMIT_UNLIMITED,
                    )?)
                };
                Syscall::Setrlimit { resource, bytes }
            }
            "capability" => {
                cur.word(CAPABILITY_OPS, "'drop' after 'capability'")?;
                cur.word(
                    CAPABILITY_NAMES,
                    "a capability (ipc_lock) after 'capability drop'",
                )?;
                Syscall::CapDropIpcLock
            }
            _ => self.uffd(cur)?,
        };
        cur.finish(&format!("the {} arguments", call.name()))?;
        Ok(call)
    }

    fn mmap(&mut self, cur: &mut Cur<'s>) -> Result<Syscall, ParseError> {
        let len = self.arg(cur, "a size or expression after 'mmap'", MMAP_OPTIONS)?;
        let mut addr = None;
        let mut placement = Placement::Hint;
        let mut prot_bits = None;
        let mut prot_raw = None;
        let mut flags = None;
        let (mut noreserve, mut populate, mut locked) = (false, false, false);
        while !cur.at_end() {
            let (word, pos) = cur.word(
                MMAP_OPTIONS,
                "an mmap option (at, fixed, noreplace, prot, noreserve, populate, locked, flags)",
            )?;
            let dup = match word.as_str() {
                "at" => {
                    let was = addr.is_some();
                    addr = Some(self.arg(cur, "an address after 'at'", MMAP_OPTIONS)?);
                    was
                }
                "fixed" | "noreplace" => {
                    let new = if word == "fixed" {
                        Placement::Fixed
                    } else {
                        Placement::NoReplace
                    };
                    if placement != Placement::Hint && placement != new {
                        return Err(cur.err_at(pos, "'fixed' and 'noreplace' cannot be combined"));
                    }
                    std::mem::replace(&mut placement, new) == new
                }
                "prot" => {
                    let was = prot_bits.is_some();
                    let (p, raw) = self.prot_arg(cur, MMAP_OPTIONS)?;
                    prot_bits = Some(p);
                    prot_raw = raw;
                    was
                }
                "flags" => {
                    let was = flags.is_some();
                    flags = Some(self.arg(cur, "a flags value after 'flags'", MMAP_OPTIONS)?);
                    was
                }
                "noreserve" => std::mem::replace(&mut noreserve, true),
                "locked" => std::mem::replace(&mut locked, true),
                _ => std::mem::replace(&mut populate, true),
            };
            if dup {
                return Err(cur.err_at(pos, format!("duplicate option '{word}'")));
            }
        }
        let prot = prot_bits.unwrap_or(Prot::READ | Prot::WRITE);
        Ok(Syscall::Mmap {
            len,
            addr,
            placement,
            prot,
            prot_raw,
            noreserve,
            populate,
            locked,
            flags,
        })
    }

    /// A protection word (`rw`, `none`, ...) or a raw value: a number or an
    /// expression that does not start with a protection word.
    fn prot_arg(
        &self,
        cur: &mut Cur<'s>,
        stop: &[&str],
    ) -> Result<(Prot, Option<Expr>), ParseError> {
        if cur.peek_ident().is_some_and(|w| PROT_WORDS.contains(&w))
            || !self.starts_value(cur, stop)
        {
            return Ok((prot(cur)?, None));
        }
        let raw = self.arg(cur, "a protection value", stop)?;
        Ok((Prot::empty(), Some(raw)))
    }

    fn uffd(&mut self, cur: &mut Cur<'s>) -> Result<Syscall, ParseError> {
        let (sub, _) = cur.word(
            UFFD_SUBCOMMANDS,
            "a uffd operation (open, create, api, register, unregister, copy, zeropage, move)",
        )?;
        if sub == "open" || sub == "create" {
            let name = if cur.at_end() || cur.peek_ident() == Some("flags") {
                None
            } else {
                Some(
                    cur.ident("a handle name, 'flags VALUE' or the end of the line")?
                        .0,
                )
            };
            let flags = if cur.at_end() {
                None
            } else {
                cur.word(&["flags"], "'flags VALUE' or the end of the line")?;
                Some(self.arg(cur, "a flags value after 'flags'", NO_STOP)?)
            };
            return Ok(match (sub.as_str(), name, flags) {
                ("open", None, None) => Syscall::UffdOpen,
                (s, name, flags) => Syscall::UffdCreate {
                    name,
                    api: s == "open",
                    flags,
                },
            });
        }
        let call = self.uffd_call(cur, &sub)?;
        if cur.at_end() {
            return Ok(call);
        }
        cur.word(UFFD_VIA, "'via NAME' or the end of the line")?;
        let (handle, _) = cur.ident("a handle name after 'via'")?;
        Ok(Syscall::UffdVia {
            handle,
            call: Box::new(call),
        })
    }

    /// The uffd operations that act on a handle (all but open/create).
    fn uffd_call(&mut self, cur: &mut Cur<'s>, sub: &str) -> Result<Syscall, ParseError> {
        let at_via = |cur: &Cur<'s>| cur.at_end() || cur.peek_ident() == Some("via");
        Ok(match sub {
            "api" => {
                let api = self.arg(cur, "an API value after 'uffd api'", UFFD_API_OPTIONS)?;
                let features = if at_via(cur) {
                    None
                } else {
                    cur.word(&["features"], "'features VALUE', 'via NAME' or end of line")?;
                    Some(self.arg(cur, "a value after 'features'", UFFD_VIA)?)
                };
                Syscall::UffdApi { api, features }
            }
            "register" => {
                let addr = self.arg(cur, "an address after 'uffd register'", UFFD_MODES)?;
                let len = self.arg(cur, "a length after the address", UFFD_MODES)?;
                let mut mode = UffdMode::default();
                let mut raw = None;
                if !cur.eat("mode") {
                    loop {
                        let (word, pos) = cur.word(
                            &UFFD_MODES[..3],
                            "a register mode (missing, wp, minor, joined by '+'; or 'mode VALUE')",
                        )?;
                        let flag = match word.as_str() {
                            "missing" => &mut mode.missing,
                            "wp" => &mut mode.wp,
                            _ => &mut mode.minor,
                        };
                        if std::mem::replace(flag, true) {
                            return Err(cur.err_at(pos, format!("mode '{word}' given twice")));
                        }
                        if !cur.eat_kind(&TokenKind::Plus) {
                            break;
                        }
                    }
                    if !cur.eat("mode") {
                        return Ok(Syscall::UffdRegister {
                            addr,
                            len,
                            mode,
                            raw,
                        });
                    }
                }
                raw = Some(self.arg(cur, "a mode value after 'mode'", UFFD_VIA)?);
                Syscall::UffdRegister {
                    addr,
                    len,
                    mode,
                    raw,
                }
            }
            "unregister" => {
                let addr = self.arg(cur, "an address after 'uffd unregister'", UFFD_VIA)?;
                let len = self.arg(cur, "a length after the address", UFFD_VIA)?;
                Syscall::UffdUnregister { addr, len }
            }
            "copy" => {
                let stops = UFFD_COPY_OPTIONS;
                let dst = self.arg(cur, "a destination address after 'uffd copy'", stops)?;
                let src = self.arg(cur, "a source address after the destination", stops)?;
                let len = self.arg(cur, "a length after the source address", stops)?;
                let (mut tag, mut wp, mut dontwake, mut raw) = (None, false, false, None);
                while !at_via(cur) {
                    let (word, pos) = cur.word(
                        stops,
                        "a uffd copy option (tag=EXPR, wp, dontwake, mode VALUE)",
                    )?;
                    let dup = match word.as_str() {
                        "tag" => tag.replace(self.assigned(cur, "tag", stops)?).is_some(),
                        "mode" => raw
                            .replace(self.arg(cur, "a mode value after 'mode'", stops)?)
                            .is_some(),
                        "wp" => std::mem::replace(&mut wp, true),
                        _ => std::mem::replace(&mut dontwake, true),
                    };
                    if dup {
                        return Err(cur.err_at(pos, format!("duplicate option '{word}'")));
                    }
                }
                Syscall::UffdCopy {
                    dst,
                    src,
                    len,
                    tag,
                    wp,
                    dontwake,
                    raw,
                }
            }
            "zeropage" => {
                let stops = UFFD_ZEROPAGE_OPTIONS;
                let dst = self.arg(cur, "a destination address after 'uffd zeropage'", stops)?;
                let len = self.arg(cur, "a length after the address", stops)?;
                let (mut dontwake, mut raw) = (false, None);
                while !at_via(cur) {
                    let (word, pos) =
                        cur.word(stops, "a uffd zeropage option (dontwake, mode VALUE)")?;
                    let dup = match word.as_str() {
                        "mode" => raw
                            .replace(self.arg(cur, "a mode value after 'mode'", stops)?)
                            .is_some(),
                        _ => std::mem::replace(&mut dontwake, true),
                    };
                    if dup {
                        return Err(cur.err_at(pos, format!("duplicate option '{word}'")));
                    }
                }
                Syscall::UffdZeropage {
                    dst,
                    len,
                    dontwake,
                    raw,
                }
            }
            _ => {
                let dst = self.arg(
                    cur,
                    "a destination address after 'uffd move'",
                    UFFD_MOVE_OPTIONS,
                )?;
                let src = self.arg(
                    cur,
                    "a source address after the destination",
                    UFFD_MOVE_OPTIONS,
                )?;
                let len = self.arg(cur, "a length after the source address", UFFD_MOVE_OPTIONS)?;
                let (mut allow_src_holes, mut dontwake, mut raw) = (false, false, None);
                while !at_via(cur) {
                    let (word, pos) = cur.word(
                        UFFD_MOVE_OPTIONS,
                        "a uffd move option (allow_src_holes, dontwake, mode VALUE)",
                    )?;
                    let dup = match word.as_str() {
                        "dontwake" => std::mem::replace(&mut dontwake, true),
                        "mode" => raw
                            .replace(self.arg(
                                cur,
                                "a mode value after 'mode'",
                                UFFD_MOVE_OPTIONS,
                            )?)
                            .is_some(),
                        _ => std::mem::replace(&mut allow_src_holes, true),
                    };
                    if dup {
                        return Err(cur.err_at(pos, format!("duplicate option '{word}'")));
                    }
                }
                Syscall::UffdMove {
                    dst,
                    src,
                    len,
                    allow_src_holes,
                    dontwake,
                    raw,
                }
            }
        })
    }

    // ----- accesses and knobs ------------------------------------------------

    fn access(&mut self, cur: &mut Cur<'s>, kw: &str) -> Result<Access, ParseError> {
        let kind = if kw == "read" {
            AccessKind::Read
        } else {
            AccessKind::Write
        };
        let stops: &[&str] = &["tag", "fill"];
        let addr = self.arg(cur, &format!("an address after '{kw}'"), stops)?;
        let len = if !self.starts_value(cur, stops) {
            None
        } else {
            Some(self.arg(cur, "a length after the address", stops)?)
        };
        let (mut tag, mut fill) = (None, None);
        if !cur.at_end() {
            let pos = cur.pos();
            let (w, _) = cur.word(stops, "'tag=EXPR', 'fill BYTE' or end of line")?;
            if kind == AccessKind::Read {
                return Err(cur.err_at(
                    pos,
                    if w == "fill" {
                        "'fill' only applies to write; read checks bytes with 'expect bytes'"
                    } else {
                        "'tag=' only applies to write; read checks tags with 'expect page ... tag=N'"
                    },
                ));
            }
            if w == "fill" {
                fill = Some(self.arg(cur, "a byte value after 'fill'", NO_STOP)?);
            } else {
                tag = Some(self.assigned(cur, "tag", NO_STOP)?);
            }
        }
        cur.finish(&format!("the {kw} arguments"))?;
        Ok(Access {
            kind,
            addr,
            len,
            tag,
            fill,
        })
    }

    fn thp(&mut self, cur: &mut Cur<'s>) -> Result<ThpSetting, ParseError> {
        let setting = match cur.peek_ident() {
            Some("enabled") => {
                cur.bump();
                ThpSetting::Enabled(thp_mode(cur)?)
            }
            Some("use_zero_page") => {
                cur.bump();
                let value = match cur.peek() {
                    Some(TokenKind::Number { value: Ok(0), .. }) => false,
                    Some(TokenKind::Number { value: Ok(1), .. }) => true,
                    _ => return Err(cur.expected("0 or 1 after 'thp use_zero_page'")),
                };
                cur.bump();
                ThpSetting::UseZeroPage(value)
            }
            Some(w) if !self.starts_value(cur, THP_MODES) => {
                return Err(cur.err(format!(
                    "expected 'enabled', 'use_zero_page' or a folio size such as 64K after 'thp', found '{w}'{}",
                    suggestion(w, THP_KNOBS.iter().copied())
                )));
            }
            _ => {
                let size = self.arg(
                    cur,
                    "'enabled', 'use_zero_page' or a folio size such as 64K after 'thp'",
                    THP_MODES,
                )?;
                ThpSetting::Size {
                    size,
                    mode: thp_mode(cur)?,
                }
            }
        };
        cur.finish("the thp setting")?;
        Ok(setting)
    }

    // ----- expectations ------------------------------------------------------

    fn expect(&mut self, cur: &mut Cur<'s>, stmt_pos: Pos) -> Result<Expect, ParseError> {
        let (kind, _) = cur.word(
            EXPECT_KINDS,
            "what to expect (maps, page, pfn, stat, vmflags, anonhuge, lazyfree, vmlck, bytes, value, invariants)",
        )?;
        let e = match kind.as_str() {
            k if CHECK_KINDS.contains(&k) => {
                return Err(cur.err_at(
                    stmt_pos,
                    format!(
                        "'expect {k}' must directly follow the syscall, read/write or thp line whose result it checks"
                    ),
                ));
            }
            "maps" => {
                if cur.eat("empty") {
                    cur.finish("'expect maps empty'")?;
                    Expect::Maps(Vec::new())
                } else {
                    cur.finish("'expect maps' (list the VMAs on the following lines, then 'end'; or write 'expect maps empty')")?;
                    Expect::Maps(self.maps_block(stmt_pos)?)
                }
            }
            "page" => {
                let addr = self.arg(cur, "an address after 'expect page'", PAGE_ATTRS)?;
                let len = if cur.at_end() {
                    return Err(cur
                        .expected("a length or page attributes (none, zero, anon, order=N, ...)"));
                } else if !self.starts_value(cur, PAGE_ATTRS) {
                    None
                } else {
                    Some(self.arg(
                        cur,
                        "a length or page attributes after the address",
                        PAGE_ATTRS,
                    )?)
                };
                let mut attrs = Vec::new();
                while !cur.at_end() {
                    attrs.push(self.page_attr(cur)?);
                }
                if attrs.is_empty() {
                    return Err(cur
                        .expected("at least one page attribute (none, zero, anon, order=N, ...)"));
                }
                Expect::Page { addr, len, attrs }
            }
            "pfn" => {
                let addr = self.arg(cur, "an address after 'expect pfn'", NO_STOP)?;
                let equal = if cur.eat_kind(&TokenKind::EqEq) {
                    true
                } else if cur.eat_kind(&TokenKind::NotEq) {
                    false
                } else {
                    return Err(cur.expected("'==' or '!=' after the address"));
                };
                let (name, pos) =
                    cur.ident("the name of a frame handle bound by 'NAME = pfn ADDR'")?;
                let frame = match self.scope.lookup(&name) {
                    Some((id, NameKind::Frame, _)) => id,
                    Some((_, NameKind::Int, line)) => {
                        return Err(cur.err_at(
                            pos,
                            format!("'{name}' is a number (bound at line {line}), not a frame handle from 'pfn'"),
                        ))
                    }
                    None => return Err(cur.err_at(pos, self.unknown_name(&name, Some(NameKind::Frame)))),
                };
                Expect::Pfn { addr, equal, frame }
            }
            "stat" => {
                let key = stat_key(cur)?;
                let value = self.arg(cur, "a value after '=='", NO_STOP)?;
                Expect::Stat { key, value }
            }
            "vmflags" => {
                let addr = self.arg(cur, "an address after 'expect vmflags'", &["has", "lacks"])?;
                let (word, _) =
                    cur.word(&["has", "lacks"], "'has' or 'lacks' after the address")?;
                let mut flags = Vec::new();
                while !cur.at_end() {
                    flags.push(vm_flag(cur)?);
                }
                if flags.is_empty() {
                    return Err(cur.expected(&format!(
                        "VmFlags mnemonics (such as hg, nh, dd) after '{word}'"
                    )));
                }
                Expect::VmFlags {
                    addr,
                    has: word == "has",
                    flags,
                }
            }
            "anonhuge" | "lazyfree" => {
                let what = format!("an address after 'expect {kind}'");
                let addr = self.arg(cur, &what, NO_STOP)?;
                if !cur.eat_kind(&TokenKind::EqEq) {
                    return Err(cur.expected("'==' after the address"));
                }
                let size = self.arg(cur, "a size after '=='", NO_STOP)?;
                if kind == "anonhuge" {
                    Expect::AnonHuge { addr, size }
                } else {
                    Expect::LazyFree { addr, size }
                }
            }
            "vmlck" => {
                if !cur.eat_kind(&TokenKind::EqEq) {
                    return Err(cur.expected("'==' after 'expect vmlck'"));
                }
                let size = self.arg(cur, "a size after '=='", NO_STOP)?;
                Expect::VmLck { size }
            }
            "bytes" => {
                let addr = self.arg(cur, "an address after 'expect bytes'", &["fill"])?;
                let len = self.arg(cur, "a length after the address", &["fill"])?;
                let fill = if cur.eat_kind(&TokenKind::EqEq) {
                    false
                } else if cur.eat("fill") {
                    true
                } else {
                    return Err(cur.expected("'== VALUE' or 'fill BYTE' after the length"));
                };
                let value = self.arg(cur, "a value", NO_STOP)?;
                Expect::Bytes {
                    addr,
                    len,
                    fill,
                    value,
                }
            }
            "value" => {
                let left = self.arg(cur, "an expression after 'expect value'", NO_STOP)?;
                let equal = if cur.eat_kind(&TokenKind::EqEq) {
                    true
                } else if cur.eat_kind(&TokenKind::NotEq) {
                    false
                } else {
                    return Err(cur.expected("'==' or '!=' after the expression"));
                };
                let right = self.arg(cur, "an expression after the comparison", NO_STOP)?;
                Expect::Value { left, equal, right }
            }
            _ => Expect::Invariants,
        };
        cur.finish(&format!("'expect {kind}'"))?;
        Ok(e)
    }

    /// The lines of an `expect maps` block, up to `end`.
    fn maps_block(&mut self, open: Pos) -> Result<Vec<MapsLine>, ParseError> {
        let mut out = Vec::new();
        loop {
            let Some(mut cur) = self.take_line()? else {
                return Err(ParseError::new(
                    self.file,
                    open.line,
                    open.column,
                    format!("'expect maps' at line {} is never closed: expected 'end' before end of file", open.line),
                ));
            };
            if cur.eat("end") {
                cur.finish("'end'")?;
                return Ok(out);
            }
            let pos = cur.pos();
            let start = self.arg(
                &mut cur,
                "a VMA line 'START .. END PERMS' or 'end'",
                NO_STOP,
            )?;
            if !cur.eat_kind(&TokenKind::DotDot) {
                return Err(cur.expected("'..' between the start and end address"));
            }
            let end = self.arg(&mut cur, "an end address after '..'", NO_STOP)?;
            let perms = match cur.peek() {
                Some(TokenKind::Perms(p)) => p.clone(),
                Some(TokenKind::Ident(p)) if is_perms(p) => p.clone(),
                _ => return Err(cur.expected("permissions such as rw-p after the end address")),
            };
            cur.bump();
            cur.finish("the permissions")?;
            out.push(MapsLine {
                pos,
                start,
                end,
                perms,
            });
        }
    }

    fn page_attr(&mut self, cur: &mut Cur<'s>) -> Result<PageAttr, ParseError> {
        let pos = cur.pos();
        if cur.eat_kind(&TokenKind::Bang) {
            let (word, _) = cur.word(&["X", "AX"], "'X' or 'AX' after '!'")?;
            let kind = if word == "X" {
                PageAttrKind::Exclusive(false)
            } else {
                PageAttrKind::AnonExclusive(false)
            };
            return Ok(PageAttr { pos, kind });
        }
        let (word, _) = cur.word(
            PAGE_ATTRS,
            "a page attribute (none, zero, hugezero, anon, swapped, order=N, folio=SIZE, idx=N, pmd, pte, X, !X, AX, !AX, cnt=N, tag=N, samefolio, guard)",
        )?;
        let kind = match word.as_str() {
            "none" => PageAttrKind::None,
            "zero" => PageAttrKind::Zero,
            "hugezero" => PageAttrKind::HugeZero,
            "anon" => PageAttrKind::Anon,
            "swapped" => PageAttrKind::Swapped,
            "pmd" => PageAttrKind::Pmd,
            "pte" => PageAttrKind::Pte,
            "X" => PageAttrKind::Exclusive(true),
            "AX" => PageAttrKind::AnonExclusive(true),
            "samefolio" => PageAttrKind::SameFolio,
            "guard" => PageAttrKind::Guard,
            "order" => PageAttrKind::Order(self.assigned(cur, "order", PAGE_ATTRS)?),
            "folio" => PageAttrKind::Folio(self.assigned(cur, "folio", PAGE_ATTRS)?),
            "idx" => PageAttrKind::Idx(self.assigned(cur, "idx", PAGE_ATTRS)?),
            "cnt" => PageAttrKind::Count(self.assigned(cur, "cnt", PAGE_ATTRS)?),
            _ => PageAttrKind::Tag(self.assigned(cur, "tag", PAGE_ATTRS)?),
        };
        Ok(PageAttr { pos, kind })
    }

    // ----- expressions -------------------------------------------------------

    /// Whether the next token can start an optional value: a number, `(`,
    /// `-`, or a name that is bound (and not one of the statement's `stop`
    /// words). An unknown word is left for the option parser, which
    /// suggests the closest option.
    fn starts_value(&self, cur: &Cur<'s>, stop: &[&str]) -> bool {
        match cur.peek() {
            Some(TokenKind::Number { .. } | TokenKind::LParen | TokenKind::Minus) => true,
            Some(TokenKind::Ident(w)) => {
                !stop.contains(&w.as_str())
                    && (self.scope.lookup(w).is_some()
                        || CONSTANTS.iter().any(|(c, _)| c == w)
                        || w == "align_up"
                        || w == "align_down")
            }
            _ => false,
        }
    }

    /// A required argument expression.
    fn arg(&self, cur: &mut Cur<'s>, what: &str, stop: &[&str]) -> Result<Expr, ParseError> {
        self.expr(cur, &Ctx { what, stop })
    }

    /// `=EXPR` after an option word such as `tag`.
    fn assigned(&self, cur: &mut Cur<'s>, word: &str, stop: &[&str]) -> Result<Expr, ParseError> {
        if !cur.eat_kind(&TokenKind::Assign) {
            return Err(cur.expected(&format!("'=' after '{word}' (write {word}=VALUE)")));
        }
        self.expr(
            cur,
            &Ctx {
                what: &format!("a value after '{word}='"),
                stop,
            },
        )
    }

    fn expr(&self, cur: &mut Cur<'s>, ctx: &Ctx<'_>) -> Result<Expr, ParseError> {
        Ok(self.level(cur, ctx, 0, 0)?.0)
    }

    /// Binary operators by precedence level (0 = loosest). Operators of one
    /// level form one [`Expr::Chain`]; the returned depth counts real
    /// nesting (precedence levels, parentheses, unary minus, calls), so a
    /// flat chain of any length adds one level, not one per operator.
    fn level(
        &self,
        cur: &mut Cur<'s>,
        ctx: &Ctx<'_>,
        level: u8,
        nest: usize,
    ) -> Result<(Expr, usize), ParseError> {
        if level > 4 {
            return self.unary(cur, ctx, nest);
        }
        let (first, mut depth) = self.level(cur, ctx, level + 1, nest)?;
        let mut rest = Vec::new();
        loop {
            let op = match (level, cur.peek()) {
                (0, Some(TokenKind::Pipe)) => BinOp::Or,
                (1, Some(TokenKind::Amp)) => BinOp::And,
                (2, Some(TokenKind::Shl)) => BinOp::Shl,
                (2, Some(TokenKind::Shr)) => BinOp::Shr,
                (3, Some(TokenKind::Plus)) => BinOp::Add,
                (3, Some(TokenKind::Minus)) => BinOp::Sub,
                (4, Some(TokenKind::Star)) => BinOp::Mul,
                (4, Some(TokenKind::Slash)) => BinOp::Div,
                (4, Some(TokenKind::Percent)) => BinOp::Rem,
                _ => break,
            };
            let pos = cur.pos();
            cur.bump();
            let what = format!("an operand after '{}'", op.symbol());
            let (rhs, rhs_depth) = self.level(
                cur,
                &Ctx {
                    what: &what,
                    stop: ctx.stop,
                },
                level + 1,
                nest,
            )?;
            depth = depth.max(rhs_depth);
            rest.push((op, rhs, pos));
        }
        if rest.is_empty() {
            return Ok((first, depth));
        }
        let depth = depth.saturating_add(1);
        if depth.saturating_add(nest) > MAX_EXPR_DEPTH {
            return Err(cur.err_at(
                rest[0].2,
                format!("expression is nested too deeply (limit {MAX_EXPR_DEPTH})"),
            ));
        }
        Ok((
            Expr::Chain {
                first: Box::new(first),
                rest,
            },
            depth,
        ))
    }

    fn unary(
        &self,
        cur: &mut Cur<'s>,
        ctx: &Ctx<'_>,
        nest: usize,
    ) -> Result<(Expr, usize), ParseError> {
        if nest > MAX_EXPR_DEPTH {
            return Err(cur.err(format!(
                "expression is nested too deeply (limit {MAX_EXPR_DEPTH})"
            )));
        }
        if cur.eat_kind(&TokenKind::Minus) {
            let (inner, depth) = self.unary(
                cur,
                &Ctx {
                    what: "an operand after '-'",
                    stop: ctx.stop,
                },
                nest + 1,
            )?;
            return Ok((Expr::Neg(Box::new(inner)), depth + 1));
        }
        self.primary(cur, ctx, nest)
    }

    fn primary(
        &self,
        cur: &mut Cur<'s>,
        ctx: &Ctx<'_>,
        nest: usize,
    ) -> Result<(Expr, usize), ParseError> {
        let pos = cur.pos();
        match cur.peek() {
            Some(TokenKind::Number { text, value }) => {
                let v = value
                    .clone()
                    .map_err(|why| cur.err(format!("invalid number '{text}': {why}")))?;
                cur.bump();
                Ok((Expr::Num(v), 1))
            }
            Some(TokenKind::LParen) => {
                cur.bump();
                let (inner, depth) = self.level(
                    cur,
                    &Ctx {
                        what: "an expression after '('",
                        stop: NO_STOP,
                    },
                    0,
                    nest + 1,
                )?;
                if !cur.eat_kind(&TokenKind::RParen) {
                    return Err(
                        cur.expected(&format!("')' to close the '(' at column {}", pos.column))
                    );
                }
                Ok((inner, depth + 1))
            }
            Some(TokenKind::Ident(name)) => {
                let name = name.clone();
                if ctx.stop.contains(&name.as_str())
                    || is_statement_keyword(name.as_str())
                    || name == "pfn"
                {
                    return Err(cur.expected(ctx.what));
                }
                if let Some(&(_, v)) = CONSTANTS.iter().find(|(c, _)| *c == name) {
                    cur.bump();
                    return Ok((Expr::Num(v), 1));
                }
                let func = match name.as_str() {
                    "align_up" => Some(Builtin::AlignUp),
                    "align_down" => Some(Builtin::AlignDown),
                    _ => None,
                };
                if let Some(func) = func {
                    cur.bump();
                    return self.call(cur, func, pos, nest);
                }
                match self.scope.lookup(&name) {
                    Some((id, NameKind::Int, _)) => {
                        cur.bump();
                        Ok((Expr::Var { id, pos }, 1))
                    }
                    Some((_, NameKind::Frame, line)) => Err(cur.err(format!(
                        "'{name}' is a frame handle (bound by 'pfn' at line {line}); it can only be used in 'expect pfn ADDR == {name}'"
                    ))),
                    None => Err(cur.err(self.unknown_name(&name, Some(NameKind::Int)))),
                }
            }
            _ => Err(cur.expected(ctx.what)),
        }
    }

    /// `align_up(x, a)` / `align_down(x, a)` after the function name.
    fn call(
        &self,
        cur: &mut Cur<'s>,
        func: Builtin,
        pos: Pos,
        nest: usize,
    ) -> Result<(Expr, usize), ParseError> {
        let name = func.name();
        if !cur.eat_kind(&TokenKind::LParen) {
            return Err(cur.expected(&format!("'(' after '{name}' ({name}(x, alignment))")));
        }
        let ctx = Ctx {
            what: "a value to align",
            stop: NO_STOP,
        };
        let (x, dx) = self.level(cur, &ctx, 0, nest + 1)?;
        if !cur.eat_kind(&TokenKind::Comma) {
            return Err(cur.expected(&format!("',' between the arguments of '{name}'")));
        }
        let ctx = Ctx {
            what: "an alignment",
            stop: NO_STOP,
        };
        let (a, da) = self.level(cur, &ctx, 0, nest + 1)?;
        if !cur.eat_kind(&TokenKind::RParen) {
            return Err(cur.expected(&format!("')' to close '{name}('")));
        }
        Ok((
            Expr::Call {
                func,
                args: Box::new([x, a]),
                pos,
            },
            dx.max(da) + 1,
        ))
    }

    /// "unknown name 'x' (did you mean 'y'?)", suggesting names of `kind`.
    fn unknown_name(&self, name: &str, kind: Option<NameKind>) -> String {
        let names = self
            .scope
            .names
            .iter()
            .zip(&self.scope.kinds)
            .filter(|(_, k)| kind.is_none_or(|want| **k == want))
            .map(|(n, _)| n.as_str());
        let extra: &[&str] = match kind {
            Some(NameKind::Frame) => &[],
            _ => &["PAGE", "PMD", "PUD", "align_up", "align_down"],
        };
        format!(
            "unknown name '{name}'{}",
            suggestion(name, names.chain(extra.iter().copied()))
        )
    }
}

/// Whether a line's tokens start with `expect ok|errno|ret|segv|uffd`.
fn is_check_line(tokens: &[Token]) -> bool {
    let word = |i: usize| match tokens.get(i).map(|t| &t.kind) {
        Some(TokenKind::Ident(w)) => Some(w.as_str()),
        _ => None,
    };
    word(0) == Some("expect") && word(1).is_some_and(|k| CHECK_KINDS.contains(&k))
}

/// `r`, `rw`, `rwx`, `rx`, `w`, `wx`, `x` or `none`.
fn prot(cur: &mut Cur<'_>) -> Result<Prot, ParseError> {
    let (word, _) = cur.word(PROT_WORDS, "a protection (r, rw, rwx, rx, w, x or none)")?;
    let mut prot = Prot::empty();
    for c in word.chars() {
        match c {
            'r' => prot |= Prot::READ,
            'w' => prot |= Prot::WRITE,
            'x' => prot |= Prot::EXEC,
            _ => {}
        }
    }
    Ok(prot)
}

fn thp_mode(cur: &mut Cur<'_>) -> Result<ThpMode, ParseError> {
    let (word, pos) = cur.word(THP_MODES, "a THP mode (always, inherit, madvise or never)")?;
    ThpMode::from_name(&word).ok_or_else(|| cur.err_at(pos, format!("unknown THP mode '{word}'")))
}

/// `maps`, `smaps`, `pages`, `stats`, `numa` in any combination; none means
/// the first four.
fn observe_sections(cur: &mut Cur<'_>) -> Result<ObserveSections, ParseError> {
    if cur.at_end() {
        return Ok(ObserveSections::ALL);
    }
    let mut s = ObserveSections {
        maps: false,
        smaps: false,
        pages: false,
        stats: false,
        numa: false,
    };
    while !cur.at_end() {
        let (word, _) = cur.word(
            OBSERVE_SECTIONS,
            "a section to observe (maps, smaps, pages, stats or numa)",
        )?;
        match word.as_str() {
            "maps" => s.maps = true,
            "smaps" => s.smaps = true,
            "pages" => s.pages = true,
            "numa" => s.numa = true,
            _ => s.stats = true,
        }
    }
    Ok(s)
}

/// The key of `expect stat KEY == N`, taken verbatim from the source (it may
/// contain `/` and digit-led words like `64kB`); consumes through `==`.
fn stat_key(cur: &mut Cur<'_>) -> Result<String, ParseError> {
    let start = cur.i;
    let Some(eq) = cur.toks[start..]
        .iter()
        .position(|t| t.kind == TokenKind::EqEq)
        .map(|n| n + start)
    else {
        return Err(cur.err(format!(
            "expected a stat key followed by '== VALUE' (e.g. 'expect stat 64kB/anon_fault_alloc == 1'), found {}",
            cur.found()
        )));
    };
    if eq == start {
        return Err(
            cur.expected("a stat key such as 64kB/anon_fault_alloc or vmstat/thp_fault_alloc")
        );
    }
    let (from, to) = (cur.toks[start].start, cur.toks[eq - 1].end);
    let key = cur.text.get(from..to).unwrap_or_default().to_string();
    if let Some(bad) = key
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '/'))
    {
        let column = column_of(cur.text, from + bad.0);
        return Err(cur.err_at(
            Pos { line: cur.line, column },
            format!("unexpected {:?} in stat key '{key}' (keys look like 64kB/anon_fault_alloc or vmstat/thp_fault_alloc)", bad.1),
        ));
    }
    cur.i = eq + 1;
    Ok(key)
}

/// One smaps VmFlags mnemonic (two lowercase letters/digits).
fn vm_flag(cur: &mut Cur<'_>) -> Result<String, ParseError> {
    let (word, pos) = cur.ident("a VmFlags mnemonic such as hg")?;
    let ok = word.len() == 2
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if ok {
        return Ok(word);
    }
    let hint = match word.as_str() {
        "hugepage" => " (MADV_HUGEPAGE shows as 'hg')",
        "nohugepage" => " (MADV_NOHUGEPAGE shows as 'nh')",
        "dontfork" => " (MADV_DONTFORK shows as 'dd')",
        "wipeonfork" => " (MADV_WIPEONFORK shows as 'wf')",
        "read" => " (VM_READ shows as 'rd')",
        "write" => " (VM_WRITE shows as 'wr')",
        _ => "",
    };
    Err(cur.err_at(
        pos,
        format!("VmFlags mnemonics are two characters, like hg or nh; found '{word}'{hint}"),
    ))
}

#[cfg(test)]
mod tests;

/// `after NAME...` or `after none`.
fn after_switches(cur: &mut Cur<'_>) -> Result<ptlab_model::After, ParseError> {
    let mut names: Vec<&str> = ptlab_model::After::NAMES.iter().map(|(n, _)| *n).collect();
    names.push("none");
    let mut set = ptlab_model::After::empty();
    let mut any = false;
    while !cur.at_end() {
        let (word, _) = cur.switch_name(
            &names,
            "a proposed-change switch (swapout-unmap-batch) or 'none'",
        )?;
        any = true;
        if word != "none" {
            set |= ptlab_model::After::from_switch(&word).unwrap_or_default();
        }
    }
    if !any {
        return Err(cur.expected("a proposed-change switch name or 'none' after 'after'"));
    }
    Ok(set)
}

/// `before NAME...` or `before none`.
fn before_switches(cur: &mut Cur<'_>) -> Result<ptlab_model::Before, ParseError> {
    let mut names: Vec<&str> = ptlab_model::Before::NAMES.iter().map(|(n, _)| *n).collect();
    names.push("none");
    let mut set = ptlab_model::Before::empty();
    let mut any = false;
    while !cur.at_end() {
        let (word, _) = cur.switch_name(&names, "a seed-change switch (mremap-pte-batch, mremap-table-move, fork-pte-batch, mprotect-pte-batch, uffd-move-batch) or 'none'")?;
        any = true;
        if word != "none" {
            set |= ptlab_model::Before::from_switch(&word).unwrap_or_default();
        }
    }
    if !any {
        return Err(cur.expected("a seed-change switch name or 'none' after 'before'"));
    }
    Ok(set)
}
