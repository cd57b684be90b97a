//! [`call_to_ptl`]: a [`Call`] back to the `.ptl` statement that makes it
//! (the fuzzer's output, and the inverse of the interpreter's evaluation:
//! parsing and running the printed line issues the same call).

use ptlab_model::{
    Advice, Call, MapFlags, MremapFlags, PrctlThp, Prot, ThpKnob, UffdCopyMode, UffdMoveMode,
    UffdRegisterMode, UffdZeropageMode, PAGE_SIZE,
};

const KB: u64 = 1024;
const MB: u64 = 1024 * KB;
const GB: u64 = 1024 * MB;

/// A size the way a scenario writes it: `2M`, `64K`, `1G`, else hex.
pub fn fmt_size(n: u64) -> String {
    if n.is_multiple_of(GB) {
        format!("{}G", n / GB)
    } else if n.is_multiple_of(MB) {
        format!("{}M", n / MB)
    } else if n.is_multiple_of(KB) {
        format!("{}K", n / KB)
    } else {
        format!("{n:#x}")
    }
}

/// An address the way [`call_to_ptl`] writes it by default: `0`, else hex.
pub fn fmt_addr(a: u64) -> String {
    if a == 0 {
        "0".to_string()
    } else {
        format!("{a:#x}")
    }
}

/// `r`, `rw`, `rwx`, ... or `none`; a value with other bits as a number.
fn prot_word(p: Prot) -> String {
    if !(p - Prot::all()).is_empty() {
        return format!("{:#x}", p.bits());
    }
    if p.is_empty() {
        return "none".into();
    }
    [(Prot::READ, 'r'), (Prot::WRITE, 'w'), (Prot::EXEC, 'x')]
        .iter()
        .filter(|(f, _)| p.contains(*f))
        .map(|(_, c)| *c)
        .collect()
}

/// The statement that makes `call` in process `proc` (`@proc` prefixed
/// unless it is `main` or the call is machine-wide), binding its result to
/// `bind` if given. Addresses are written by `addr` (e.g. as a variable
/// plus an offset; [`fmt_addr`] for plain numbers), lengths by
/// [`fmt_size`]. A uffd ioctl on a handle other than the process's own
/// (named after it) gets `via HANDLE`.
///
/// Flag, mode, prot and advice values the words do not cover print as
/// raw values (`flags 0x...`, `mode 0x...`, `prot 0x...`, `advice N`),
/// so parsing the line gives the same call. Left out, so such a call prints
/// as the nearest statement the language can say: MREMAP_DONTUNMAP's hint
/// address (a `new_addr` without MREMAP_FIXED), and an `Mlock` whose
/// `flags` hold MLOCK_ONFAULT (the interpreter puts that bit in
/// `onfault`).
pub fn call_to_ptl(
    proc: &str,
    bind: Option<&str>,
    call: &Call,
    addr: &dyn Fn(u64) -> String,
) -> String {
    let size = fmt_size;
    let via = |handle: &str| {
        if handle == proc {
            String::new()
        } else {
            format!(" via {handle}")
        }
    };
    let text = match call {
        Call::Mmap {
            addr: a,
            len,
            prot,
            flags,
        } => {
            let mut s = format!("mmap {}", size(*len));
            if *a != 0 {
                s += &format!(" at {}", addr(*a));
            }
            // The bits the words stand for; the rest (MAP_PRIVATE |
            // MAP_ANONYMOUS unless `flags` says otherwise) is the base.
            let mut words = MapFlags::empty();
            if flags.contains(MapFlags::FIXED_NOREPLACE) {
                s += " noreplace";
                words |= MapFlags::FIXED_NOREPLACE;
            } else if flags.contains(MapFlags::FIXED) {
                s += " fixed";
                words |= MapFlags::FIXED;
            }
            if *prot != Prot::READ | Prot::WRITE {
                s += &format!(" prot {}", prot_word(*prot));
            }
            for (f, w) in [
                (MapFlags::NORESERVE, " noreserve"),
                (MapFlags::POPULATE, " populate"),
                (MapFlags::LOCKED, " locked"),
            ] {
                if flags.contains(f) {
                    s += w;
                    words |= f;
                }
            }
            let base = flags.bits() & !words.bits();
            if base != (MapFlags::PRIVATE | MapFlags::ANONYMOUS).bits() {
                s += &format!(" flags {base:#x}");
            }
            s
        }
        Call::Munmap { addr: a, len } => format!("munmap {} {}", addr(*a), size(*len)),
        Call::Madvise {
            addr: a,
            len,
            advice,
        } => match advice {
            Advice::Other(v) => format!("madvise {} {} advice {v}", addr(*a), size(*len)),
            _ => format!("madvise {} {} {}", addr(*a), size(*len), advice.name()),
        },
        Call::Mremap {
            addr: a,
            old_len,
            new_len,
            flags,
            new_addr,
        } => {
            let mut s = format!("mremap {} {} {}", addr(*a), size(*old_len), size(*new_len));
            if flags.contains(MremapFlags::MAYMOVE) {
                s += " maymove";
            }
            if flags.contains(MremapFlags::FIXED) {
                s += &format!(" fixed {}", addr(*new_addr));
            }
            if flags.contains(MremapFlags::DONTUNMAP) {
                s += " dontunmap";
            }
            let rest = flags.bits() & !MremapFlags::all().bits();
            if rest != 0 {
                s += &format!(" flags {rest:#x}");
            }
            s
        }
        Call::Mprotect { addr: a, len, prot } => {
            format!("mprotect {} {} {}", addr(*a), size(*len), prot_word(*prot))
        }
        Call::Mlock {
            addr: a,
            len,
            onfault,
            flags,
        } => format!(
            "mlock {} {}{}{}",
            addr(*a),
            size(*len),
            if *onfault { " onfault" } else { "" },
            if *flags == 0 {
                String::new()
            } else {
                format!(" flags {flags:#x}")
            }
        ),
        Call::Munlock { addr: a, len } => format!("munlock {} {}", addr(*a), size(*len)),
        Call::Mseal {
            addr: a,
            len,
            flags: 0,
        } => format!("mseal {} {}", addr(*a), size(*len)),
        Call::Mseal {
            addr: a,
            len,
            flags,
        } => format!("mseal {} {} flags {flags:#x}", addr(*a), size(*len)),
        Call::Access {
            start,
            len,
            write,
            tag,
        } => format!(
            "{} {} {}{}",
            if *write { "write" } else { "read" },
            addr(*start),
            size(*len),
            tag.map_or(String::new(), |t| format!(" tag={t}"))
        ),
        Call::FillBytes { addr: a, len, byte } => {
            format!("write {} {} fill {byte:#04x}", addr(*a), size(*len))
        }
        Call::Fork { child } => format!("fork {child}"),
        Call::Exit => "exit".into(),
        Call::PrctlThp(PrctlThp::Set { disable, flags }) => {
            let except = ptlab_model::thp::PR_THP_DISABLE_EXCEPT_ADVISED;
            format!(
                "prctl thp_disable {disable}{}{}",
                if flags & except != 0 {
                    " except_advised"
                } else {
                    ""
                },
                if flags & !except != 0 {
                    format!(" flags {:#x}", flags & !except)
                } else {
                    String::new()
                }
            )
        }
        Call::PrctlThp(PrctlThp::Get) => "prctl get_thp_disable".into(),
        Call::Setrlimit { resource, bytes } => format!(
            "setrlimit {} {}",
            resource.name(),
            if *bytes == ptlab_model::RLIM_INFINITY {
                "unlimited".into()
            } else {
                size(*bytes)
            }
        ),
        Call::DropCapIpcLock => "capability drop ipc_lock".into(),
        Call::FillVmas { addr: a, headroom } => {
            format!("fill {} headroom {headroom}", addr(*a))
        }
        Call::UffdCreate { handle, api, flags } => format!(
            "uffd {}{}{}",
            if *api { "open" } else { "create" },
            if handle == proc {
                String::new()
            } else {
                format!(" {handle}")
            },
            flags.map_or(String::new(), |f| format!(" flags {f:#x}"))
        ),
        Call::UffdApi {
            handle,
            api,
            features,
        } => format!(
            "uffd api {api:#x}{}{}",
            if *features == 0 {
                String::new()
            } else {
                format!(" features {features:#x}")
            },
            via(handle)
        ),
        Call::UffdRegister {
            handle,
            addr: a,
            len,
            mode,
        } => {
            let words: Vec<&str> = [
                (UffdRegisterMode::MISSING, "missing"),
                (UffdRegisterMode::WP, "wp"),
                (UffdRegisterMode::MINOR, "minor"),
            ]
            .iter()
            .filter(|(f, _)| mode.contains(*f))
            .map(|(_, w)| *w)
            .collect();
            let rest = (*mode - UffdRegisterMode::all()).bits();
            let mode = match (words.is_empty(), rest) {
                (false, 0) => words.join("+"),
                (false, r) => format!("{} mode {r:#x}", words.join("+")),
                (true, r) => format!("mode {r:#x}"),
            };
            format!(
                "uffd register {} {} {mode}{}",
                addr(*a),
                size(*len),
                via(handle)
            )
        }
        Call::UffdUnregister {
            handle,
            addr: a,
            len,
        } => format!("uffd unregister {} {}{}", addr(*a), size(*len), via(handle)),
        Call::UffdCopy {
            handle,
            dst,
            src,
            len,
            tag,
            mode,
        } => format!(
            "uffd copy {} {} {}{}{}{}",
            addr(*dst),
            addr(*src),
            size(*len),
            tag.map_or(String::new(), |t| format!(" tag={t}")),
            mode_words(
                mode.bits(),
                &[
                    (UffdCopyMode::WP.bits(), "wp"),
                    (UffdCopyMode::DONTWAKE.bits(), "dontwake")
                ]
            ),
            via(handle)
        ),
        Call::UffdZeropage {
            handle,
            dst,
            len,
            mode,
        } => format!(
            "uffd zeropage {} {}{}{}",
            addr(*dst),
            size(*len),
            mode_words(
                mode.bits(),
                &[(UffdZeropageMode::DONTWAKE.bits(), "dontwake")]
            ),
            via(handle)
        ),
        Call::UffdMove {
            handle,
            dst,
            src,
            len,
            mode,
        } => format!(
            "uffd move {} {} {}{}{}",
            addr(*dst),
            addr(*src),
            size(*len),
            mode_words(
                mode.bits(),
                &[
                    (UffdMoveMode::ALLOW_SRC_HOLES.bits(), "allow_src_holes"),
                    (UffdMoveMode::DONTWAKE.bits(), "dontwake")
                ]
            ),
            via(handle)
        ),
        Call::SetThp { knob, mode } => match knob {
            ThpKnob::TopLevel => format!("thp enabled {}", mode.name()),
            ThpKnob::Size(order) => format!(
                "thp {} {}",
                size(PAGE_SIZE.checked_shl(u32::from(*order)).unwrap_or(0)),
                mode.name()
            ),
        },
        Call::SetUseZeroPage { on } => format!("thp use_zero_page {}", u8::from(*on)),
        Call::SetMemory { bytes } => format!("machine memory {}", size(*bytes)),
        Call::SetNodes { nodes } => format!("machine nodes {nodes}"),
        Call::NumaRunOn { node } => format!("numa node {node}"),
        Call::NumaScan { addr: a, len } => format!("numa scan {} {}", addr(*a), size(*len)),
        Call::SetSwap { bytes: 0, .. } => "swap off".into(),
        Call::SetSwap {
            bytes,
            kind: ptlab_model::swap::SwapKind::File,
        } => format!("swap {}", size(*bytes)),
        Call::SetSwap { bytes, kind } => format!("swap {} {}", size(*bytes), kind.name()),
        Call::SetAfter { set } if set.is_empty() => "after none".into(),
        Call::SetAfter { set } => format!("after {}", set.names().join(" ")),
        Call::SetBefore { set } if set.is_empty() => "before none".into(),
        Call::SetBefore { set } => format!("before {}", set.names().join(" ")),
    };
    let at = if proc != "main" && call.acts_on_process() {
        format!("@{proc} ")
    } else {
        String::new()
    };
    match bind {
        Some(name) => format!("{at}{name} = {text}"),
        None => format!("{at}{text}"),
    }
}

/// ` word word mode 0x..`: the option words of the bits set in `mode`, then
/// the bits no word stands for as a raw `mode` value.
fn mode_words(mode: u64, words: &[(u64, &str)]) -> String {
    let mut s = String::new();
    let mut rest = mode;
    for (bit, w) in words {
        if mode & bit != 0 {
            s += " ";
            s += w;
            rest &= !bit;
        }
    }
    if rest != 0 {
        s += &format!(" mode {rest:#x}");
    }
    s
}
