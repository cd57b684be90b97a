//! Page contents beyond the tag.
//!
//! A page's content is its 4096 bytes. Almost every page the model holds is
//! a *tag page*: its first 8 bytes hold a 64-bit tag (little-endian, stored
//! in its memmap section's tag runs or its large folio's tag run) and every other
//! byte is zero. A page some statement wrote other bytes into (`write ADDR
//! LEN fill BYTE`, an unaligned UFFDIO_COPY from such a page) has a
//! [`PageRest`] as well: bytes 8..4096 as a short list of runs, kept
//! out of line in [`Contents`] (a side table keyed by frame), so the
//! common page pays nothing. The tag stays the home of bytes 0..8.

use crate::core::addr::PAGE_SIZE;
use std::collections::BTreeMap;

const PAGE: usize = PAGE_SIZE as usize;
/// Equal bytes at least this long become one fill run.
const MIN_FILL: usize = 16;

/// One run of a page's bytes 8..4096.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Run {
    /// `len` copies of `byte`.
    Fill { len: u16, byte: u8 },
    /// These bytes as they are.
    Raw(Box<[u8]>),
}

/// Bytes 8..4096 of a page that are not all zero, as runs in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRest(Vec<Run>);

impl PageRest {
    /// The runs of `bytes` (bytes 8..4096 of a page); `None` when they are
    /// all zero (a tag page).
    pub fn compress(bytes: &[u8]) -> Option<PageRest> {
        debug_assert_eq!(bytes.len(), PAGE - 8);
        // All zero: tested 64 bytes at a time (the OR of a chunk
        // vectorises; a byte-by-byte early exit does not).
        if bytes
            .chunks(64)
            .all(|c| c.iter().fold(0u8, |a, &b| a | b) == 0)
        {
            return None;
        }
        let mut runs = Vec::new();
        let mut raw: Vec<u8> = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] == b {
                j += 1;
            }
            if j - i >= MIN_FILL {
                if !raw.is_empty() {
                    runs.push(Run::Raw(std::mem::take(&mut raw).into_boxed_slice()));
                }
                runs.push(Run::Fill {
                    len: (j - i) as u16,
                    byte: b,
                });
            } else {
                raw.extend_from_slice(&bytes[i..j]);
            }
            i = j;
        }
        if !raw.is_empty() {
            runs.push(Run::Raw(raw.into_boxed_slice()));
        }
        Some(PageRest(runs))
    }

    /// Write bytes 8..4096 into `out` (4088 bytes).
    pub fn expand_into(&self, out: &mut [u8]) {
        let mut at = 0;
        for r in &self.0 {
            match r {
                Run::Fill { len, byte } => {
                    out[at..at + *len as usize].fill(*byte);
                    at += *len as usize;
                }
                Run::Raw(b) => {
                    out[at..at + b.len()].copy_from_slice(b);
                    at += b.len();
                }
            }
        }
    }
}

/// The whole page from its tag and its rest.
pub fn page_bytes(tag: u64, rest: Option<&PageRest>) -> Box<[u8; PAGE]> {
    let mut p = Box::new([0u8; PAGE]);
    p[..8].copy_from_slice(&tag.to_le_bytes());
    if let Some(r) = rest {
        r.expand_into(&mut p[8..]);
    }
    p
}

/// The tag and rest of a whole page.
pub fn split_page(bytes: &[u8; PAGE]) -> (u64, Option<PageRest>) {
    let tag = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    (tag, PageRest::compress(&bytes[8..]))
}

/// The 4096 bytes a copy from offset `off` of page `first` leaves in its
/// destination: `first[off..]` then `second[..off]` (a 4 KiB
/// copy_from_user() from an unaligned source).
pub fn shifted(first: &[u8; PAGE], second: Option<&[u8; PAGE]>, off: usize) -> Box<[u8; PAGE]> {
    let mut p = Box::new([0u8; PAGE]);
    p[..PAGE - off].copy_from_slice(&first[off..]);
    if let Some(s) = second {
        p[PAGE - off..].copy_from_slice(&s[..off]);
    }
    p
}

/// The side table: the rest of every page that has one, by frame number.
#[derive(Clone, Debug, Default)]
pub struct Contents(BTreeMap<u64, PageRest>);

impl Contents {
    pub fn get(&self, pfn: u64) -> Option<&PageRest> {
        if self.0.is_empty() {
            return None;
        }
        self.0.get(&pfn)
    }

    pub fn set(&mut self, pfn: u64, rest: Option<PageRest>) {
        match rest {
            Some(r) => {
                self.0.insert(pfn, r);
            }
            None => {
                if !self.0.is_empty() {
                    self.0.remove(&pfn);
                }
            }
        }
    }

    /// Forget frames `[first, first + nr)` (they were freed).
    pub fn forget(&mut self, first: u64, nr: u64) {
        if self.0.is_empty() {
            return;
        }
        let gone: Vec<u64> = self.0.range(first..first + nr).map(|(&k, _)| k).collect();
        for k in gone {
            self.0.remove(&k);
        }
    }

    /// The frames that have a rest, in order.
    pub fn frames(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.keys().copied()
    }

    /// How many pages have a rest.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_is_one_run_and_round_trips() {
        let mut p = [0xabu8; PAGE];
        p[..8].copy_from_slice(&0x1234u64.to_le_bytes());
        let (tag, rest) = split_page(&p);
        assert_eq!(tag, 0x1234);
        let rest = rest.expect("not a tag page");
        assert_eq!(rest.0.len(), 1);
        assert_eq!(*page_bytes(tag, Some(&rest)), p);
    }

    #[test]
    fn a_tag_page_has_no_rest() {
        let mut p = [0u8; PAGE];
        p[..8].copy_from_slice(&7u64.to_le_bytes());
        assert_eq!(split_page(&p), (7, None));
    }

    #[test]
    fn mixed_bytes_round_trip() {
        let mut p = [0u8; PAGE];
        for (i, b) in p.iter_mut().enumerate() {
            *b = if i % 700 < 20 { (i % 7) as u8 } else { 0x5a };
        }
        let (tag, rest) = split_page(&p);
        assert_eq!(*page_bytes(tag, rest.as_ref()), p);
    }

    #[test]
    fn an_unaligned_copy_joins_two_pages() {
        let a = [0xaau8; PAGE];
        let b = [0xbbu8; PAGE];
        let c = shifted(&a, Some(&b), 100);
        assert!(c[..PAGE - 100].iter().all(|&x| x == 0xaa));
        assert!(c[PAGE - 100..].iter().all(|&x| x == 0xbb));
        assert_eq!(*shifted(&a, None, 0), a);
    }

    #[test]
    fn forgetting_a_range_drops_only_it() {
        let mut c = Contents::default();
        let r = PageRest::compress(&[1u8; PAGE - 8]);
        for pfn in [5, 6, 9] {
            c.set(pfn, r.clone());
        }
        c.forget(5, 2);
        assert_eq!(c.len(), 1);
        assert!(c.get(9).is_some());
    }
}
