//! Errors with source positions.

use std::fmt;

/// A lexer or parser error: the scenario cannot run at all.
///
/// Displays as `file:line:column: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    pub message: String,
}

impl ParseError {
    pub fn new(file: &str, line: u32, column: u32, message: impl Into<String>) -> Self {
        ParseError {
            file: file.to_string(),
            line,
            column,
            message: message.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

impl std::error::Error for ParseError {}

/// Optimal-string-alignment distance (Levenshtein plus adjacent
/// transpositions), for "did you mean" suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j] = distance between a[..i] and b[..j], kept as three rows.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j - 1] + cost).min(prev[j] + 1).min(cur[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate closest to `word`, if it is close enough to be a plausible
/// typo (at most a third of the word's length, minimum 1 edit).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// `" (did you mean 'x'?)"` or the empty string.
pub fn suggestion<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, candidates).map_or_else(String::new, |c| format!(" (did you mean '{c}'?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("mmap", "mmap"), 0);
        assert_eq!(edit_distance("mmpa", "mmap"), 1);
        assert_eq!(edit_distance("abc", ""), 3);
    }

    #[test]
    fn suggestions() {
        assert_eq!(closest("mmpa", ["mmap", "munmap", "madvise"]), Some("mmap"));
        assert_eq!(
            closest("dontneeed", ["dontneed", "dofork"]),
            Some("dontneed")
        );
        assert_eq!(closest("zzz", ["mmap"]), None);
        assert_eq!(suggestion("maps", ["maps"]), " (did you mean 'maps'?)");
    }
}
