//! Line lexer for `.ptl` scenarios.
//!
//! The language is line-oriented, so the lexer works on one line at a time
//! and never sees a newline. It is deliberately lenient about numbers: a
//! word that starts with a digit always becomes a [`TokenKind::Number`],
//! and a malformed one (say `64kB`) carries its error instead of failing the
//! whole line. The parser reports that error only if it actually needs the
//! value, which lets a stat key such as `64kB/anon_fault_alloc` be lexed like
//! any other line and then taken verbatim from the source text.

use crate::error::ParseError;
use std::fmt;

/// One token of a line. `start` and `end` are byte offsets into the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub start: usize,
    pub end: usize,
}

/// What a token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// A name or keyword: `[A-Za-z_][A-Za-z0-9_]*`.
    Ident(String),
    /// A word starting with a digit. `value` is the parsed number (size
    /// suffix applied) or the reason it is not one.
    Number {
        text: String,
        value: Result<u64, String>,
    },
    /// A `/proc/PID/maps` permission string containing a dash, such as
    /// `rw-p` or `---p`. (Dash-free ones like `rwxp` lex as identifiers.)
    Perms(String),
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Shl,
    Shr,
    Amp,
    Pipe,
    LParen,
    RParen,
    Comma,
    /// `=`
    Assign,
    /// `==`
    EqEq,
    /// `!=`
    NotEq,
    /// `!`
    Bang,
    /// `@`
    At,
    /// `..`
    DotDot,
}

impl TokenKind {
    /// How the token is shown in error messages ("found ...").
    pub fn describe(&self) -> String {
        match self {
            TokenKind::Ident(s) => format!("'{s}'"),
            TokenKind::Number { text, .. } => format!("'{text}'"),
            TokenKind::Perms(s) => format!("'{s}'"),
            other => format!("'{other}'"),
        }
    }
}

impl fmt::Display for TokenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            TokenKind::Ident(s) | TokenKind::Perms(s) => s.as_str(),
            TokenKind::Number { text, .. } => text.as_str(),
            TokenKind::Plus => "+",
            TokenKind::Minus => "-",
            TokenKind::Star => "*",
            TokenKind::Slash => "/",
            TokenKind::Percent => "%",
            TokenKind::Shl => "<<",
            TokenKind::Shr => ">>",
            TokenKind::Amp => "&",
            TokenKind::Pipe => "|",
            TokenKind::LParen => "(",
            TokenKind::RParen => ")",
            TokenKind::Comma => ",",
            TokenKind::Assign => "=",
            TokenKind::EqEq => "==",
            TokenKind::NotEq => "!=",
            TokenKind::Bang => "!",
            TokenKind::At => "@",
            TokenKind::DotDot => "..",
        };
        f.write_str(s)
    }
}

/// 1-based column of byte offset `byte` in `line`, counted in characters.
pub fn column_of(line: &str, byte: usize) -> u32 {
    let prefix = line.get(..byte).unwrap_or(line);
    u32::try_from(prefix.chars().count())
        .unwrap_or(u32::MAX - 1)
        .saturating_add(1)
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_continue(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `word` is a 4-character maps permission string
/// (`[r-][w-][x-][ps]`).
pub fn is_perms(word: &str) -> bool {
    let b = word.as_bytes();
    b.len() == 4
        && matches!(b[0], b'r' | b'-')
        && matches!(b[1], b'w' | b'-')
        && matches!(b[2], b'x' | b'-')
        && matches!(b[3], b'p' | b's')
}

/// If a permission string containing a dash starts at byte `at` and is
/// followed by a word boundary, return its length in bytes (always 4).
fn perms_at(line: &str, at: usize) -> Option<usize> {
    let word = line.get(at..at.checked_add(4)?)?;
    if !is_perms(word) || !word.contains('-') {
        return None;
    }
    let boundary_after = line
        .get(at + 4..)
        .and_then(|rest| rest.chars().next())
        .is_none_or(|c| !is_ident_continue(c));
    let boundary_before = line
        .get(..at)
        .and_then(|before| before.chars().next_back())
        .is_none_or(|c| !is_ident_continue(c));
    (boundary_after && boundary_before).then_some(4)
}

/// Strip a trailing `#` comment from a line.
pub fn strip_comment(line: &str) -> &str {
    match line.find('#') {
        Some(i) => &line[..i],
        None => line,
    }
}

/// Tokenize one line (comments already allowed; they are skipped here).
/// `file` and `line_no` only label errors.
pub fn lex_line(file: &str, line_no: u32, line: &str) -> Result<Vec<Token>, ParseError> {
    let text = strip_comment(line);
    let mut tokens = Vec::new();
    let mut iter = text.char_indices().peekable();
    while let Some(&(start, c)) = iter.peek() {
        if c.is_whitespace() {
            iter.next();
            continue;
        }
        // A dash-containing permission string, e.g. `rw-p`, `---p`.
        if c == 'r' || c == '-' {
            if let Some(len) = perms_at(text, start) {
                let end = start + len;
                tokens.push(Token {
                    kind: TokenKind::Perms(text[start..end].to_string()),
                    start,
                    end,
                });
                while iter.peek().is_some_and(|&(i, _)| i < end) {
                    iter.next();
                }
                continue;
            }
        }
        if is_ident_start(c) {
            let mut end = start;
            while let Some(&(i, ch)) = iter.peek() {
                if !is_ident_continue(ch) {
                    break;
                }
                end = i + ch.len_utf8();
                iter.next();
            }
            tokens.push(Token {
                kind: TokenKind::Ident(text[start..end].to_string()),
                start,
                end,
            });
            continue;
        }
        if c.is_ascii_digit() {
            let mut end = start;
            while let Some(&(i, ch)) = iter.peek() {
                if !is_ident_continue(ch) {
                    break;
                }
                end = i + ch.len_utf8();
                iter.next();
            }
            let word = &text[start..end];
            tokens.push(Token {
                kind: TokenKind::Number {
                    text: word.to_string(),
                    value: parse_number(word),
                },
                start,
                end,
            });
            continue;
        }
        // Punctuation: try two-character operators first.
        iter.next();
        let next = iter.peek().map(|&(_, ch)| ch);
        let (kind, len) = match (c, next) {
            ('<', Some('<')) => (TokenKind::Shl, 2),
            ('>', Some('>')) => (TokenKind::Shr, 2),
            ('=', Some('=')) => (TokenKind::EqEq, 2),
            ('!', Some('=')) => (TokenKind::NotEq, 2),
            ('.', Some('.')) => (TokenKind::DotDot, 2),
            ('+', _) => (TokenKind::Plus, 1),
            ('-', _) => (TokenKind::Minus, 1),
            ('*', _) => (TokenKind::Star, 1),
            ('/', _) => (TokenKind::Slash, 1),
            ('%', _) => (TokenKind::Percent, 1),
            ('&', _) => (TokenKind::Amp, 1),
            ('|', _) => (TokenKind::Pipe, 1),
            ('(', _) => (TokenKind::LParen, 1),
            (')', _) => (TokenKind::RParen, 1),
            (',', _) => (TokenKind::Comma, 1),
            ('=', _) => (TokenKind::Assign, 1),
            ('!', _) => (TokenKind::Bang, 1),
            ('@', _) => (TokenKind::At, 1),
            _ => {
                let hint = match c {
                    '<' => " (shift left is '<<'; there are no comparisons)",
                    '>' => " (shift right is '>>'; there are no comparisons)",
                    '.' => " (ranges are written 'a .. b'; numbers are integers)",
                    _ => "",
                };
                return Err(ParseError::new(
                    file,
                    line_no,
                    column_of(text, start),
                    format!("unexpected character '{}'{hint}", c.escape_debug()),
                ));
            }
        };
        if len == 2 {
            iter.next();
        }
        tokens.push(Token {
            kind,
            start,
            end: start + c.len_utf8() + (len - 1),
        });
    }
    Ok(tokens)
}

/// Parse a numeric word: decimal, `0x` hex or `0b` binary digits with `_`
/// separators, optionally followed by one size suffix `K`, `M`, `G` or `T`
/// (binary multiples).
pub fn parse_number(word: &str) -> Result<u64, String> {
    let (radix, body) =
        if let Some(rest) = word.strip_prefix("0x").or_else(|| word.strip_prefix("0X")) {
            (16, rest)
        } else if let Some(rest) = word.strip_prefix("0b").or_else(|| word.strip_prefix("0B")) {
            (2, rest)
        } else {
            (10, word)
        };
    // Split digits (and separators) from the suffix.
    let split = body
        .char_indices()
        .find(|&(_, c)| !(c == '_' || c.is_digit(radix)))
        .map_or(body.len(), |(i, _)| i);
    let (digits, suffix) = body.split_at(split);
    let shift = match suffix {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "k" | "kB" | "KB" | "KiB" | "m" | "MB" | "MiB" | "g" | "GB" | "GiB" | "t" | "TB"
        | "TiB" => {
            let fixed = suffix
                .chars()
                .next()
                .map_or('K', |c| c.to_ascii_uppercase());
            return Err(format!(
                "unknown size suffix '{suffix}' (write '{digits}{fixed}'; suffixes are K, M, G, T)"
            ));
        }
        _ => {
            let what = match radix {
                16 => "hex digit",
                2 => "binary digit",
                _ => "digit",
            };
            return Err(format!(
                "'{suffix}' is neither a {what} nor a size suffix (K, M, G, T)"
            ));
        }
    };
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() {
        return Err("missing digits".to_string());
    }
    let base = u64::from_str_radix(&clean, radix)
        .map_err(|_| "number does not fit in 64 bits".to_string())?;
    base.checked_mul(1u64 << shift)
        .ok_or_else(|| "number does not fit in 64 bits".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(line: &str) -> Vec<TokenKind> {
        lex_line("t.ptl", 1, line)
            .unwrap()
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    fn num(text: &str) -> TokenKind {
        TokenKind::Number {
            text: text.to_string(),
            value: parse_number(text),
        }
    }

    #[test]
    fn numbers_and_suffixes() {
        assert_eq!(parse_number("42"), Ok(42));
        assert_eq!(parse_number("0x7f00_0000"), Ok(0x7f00_0000));
        assert_eq!(parse_number("0b1010"), Ok(10));
        assert_eq!(parse_number("1_000"), Ok(1000));
        assert_eq!(parse_number("64K"), Ok(64 << 10));
        assert_eq!(parse_number("2M"), Ok(2 << 20));
        assert_eq!(parse_number("1G"), Ok(1 << 30));
        assert_eq!(parse_number("3T"), Ok(3 << 40));
        assert_eq!(parse_number("0x10K"), Ok(0x10 << 10));
        // `B` is a hex digit, so this is 0x1B, not "1 byte".
        assert_eq!(parse_number("0x1B"), Ok(0x1b));
        assert!(parse_number("64kB")
            .unwrap_err()
            .contains("unknown size suffix 'kB'"));
        assert!(parse_number("0x").is_err());
        assert!(parse_number("0b2").is_err());
        assert!(parse_number("18446744073709551616")
            .unwrap_err()
            .contains("64 bits"));
        assert!(parse_number("16777216T").unwrap_err().contains("64 bits"));
        assert_eq!(parse_number("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn tokens_of_a_statement() {
        assert_eq!(
            kinds("p = mmap 256K at 0x1000 fixed # comment"),
            vec![
                TokenKind::Ident("p".into()),
                TokenKind::Assign,
                TokenKind::Ident("mmap".into()),
                num("256K"),
                TokenKind::Ident("at".into()),
                num("0x1000"),
                TokenKind::Ident("fixed".into()),
            ]
        );
    }

    #[test]
    fn operators() {
        assert_eq!(
            kinds("a<<b>>c==d!=!e..f"),
            vec![
                TokenKind::Ident("a".into()),
                TokenKind::Shl,
                TokenKind::Ident("b".into()),
                TokenKind::Shr,
                TokenKind::Ident("c".into()),
                TokenKind::EqEq,
                TokenKind::Ident("d".into()),
                TokenKind::NotEq,
                TokenKind::Bang,
                TokenKind::Ident("e".into()),
                TokenKind::DotDot,
                TokenKind::Ident("f".into()),
            ]
        );
    }

    #[test]
    fn perms_words() {
        assert_eq!(
            kinds("p .. p+4K rw-p"),
            vec![
                TokenKind::Ident("p".into()),
                TokenKind::DotDot,
                TokenKind::Ident("p".into()),
                TokenKind::Plus,
                num("4K"),
                TokenKind::Perms("rw-p".into()),
            ]
        );
        assert_eq!(kinds("---p"), vec![TokenKind::Perms("---p".into())]);
        assert_eq!(kinds("r-xp"), vec![TokenKind::Perms("r-xp".into())]);
        // No dash: an ordinary identifier. Not a word boundary: not perms.
        assert_eq!(kinds("rwxp"), vec![TokenKind::Ident("rwxp".into())]);
        assert_eq!(kinds("r - 1")[1], TokenKind::Minus);
        assert_eq!(kinds("rw-pq")[0], TokenKind::Ident("rw".into()));
    }

    #[test]
    fn stat_key_lexes_leniently() {
        let toks = kinds("expect stat 64kB/anon_fault_alloc == 1");
        assert!(matches!(&toks[2], TokenKind::Number { value: Err(_), .. }));
        assert_eq!(toks[3], TokenKind::Slash);
    }

    #[test]
    fn bad_character_reports_column() {
        let err = lex_line("t.ptl", 3, "let x = 1 ; 2").unwrap_err();
        assert_eq!(err.to_string(), "t.ptl:3:11: unexpected character ';'");
        let err = lex_line("t.ptl", 1, "let é = 1 $").unwrap_err();
        assert_eq!(err.to_string(), "t.ptl:1:5: unexpected character 'é'");
        let err = lex_line("t.ptl", 1, "let x = 1.5").unwrap_err();
        assert!(err
            .to_string()
            .starts_with("t.ptl:1:10: unexpected character '.'"));
    }

    #[test]
    fn token_spans_are_byte_offsets() {
        let toks = lex_line("t.ptl", 1, "  ab <<").unwrap();
        assert_eq!((toks[0].start, toks[0].end), (2, 4));
        assert_eq!((toks[1].start, toks[1].end), (5, 7));
    }
}
