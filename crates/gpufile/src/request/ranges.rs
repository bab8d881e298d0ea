//! The ranges of a request: one, or a list whose facts are found once, when it is built.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::request::Direction;

/// One range of a request: `len` bytes at `file_offset` in the file and at `buf_offset` in the
/// caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Offset in the file.
    pub file_offset: u64,
    /// Bytes.
    pub len: usize,
    /// Offset in the caller's buffer.
    pub buf_offset: usize,
}

impl Range {
    /// The file offset just past the range (saturating: an offset past the largest file is
    /// refused before any range is checked against a file).
    pub fn end(&self) -> u64 {
        self.file_offset.saturating_add(self.len as u64)
    }
}

/// The ranges of a request: one (the common case, kept without an allocation) or many.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ranges {
    /// One range.
    One(Range),
    /// Several ranges of one buffer, in the order given.
    Many(RangeList),
}

/// Several ranges of one buffer, in the order given, shared (a gather's list is megabytes, and
/// its tasks read it in place), with the [`Facts`] every later step asks of it.
#[derive(Clone, Debug)]
pub struct RangeList {
    list: Arc<[Range]>,
    facts: Facts,
}

/// What the checks and the plan ask of a list of ranges, found in one pass when the list is
/// built: a submission of 100,000 ranges then reads its list once, not once per question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// Bytes of all ranges (saturating).
    pub bytes: usize,
    /// The longest range's length.
    pub max_len: usize,
    /// The length of every range, where all have the same one (and there is one).
    pub uniform_len: Option<usize>,
    /// Whether some range's end overflows or lies past the largest file offset (`i64::MAX`).
    pub past_file_limit: bool,
    /// The furthest end of a range in the buffer; `None` where one overflows.
    pub buf_end: Option<usize>,
    /// The furthest end in the file of a range that moves a byte (`None`: none does).
    pub file_end: Option<u64>,
    /// Each range ends in the buffer before the next starts: no two overlap there.
    pub buf_chain: bool,
    /// Each range ends in the file before the next starts: no two overlap there.
    pub file_chain: bool,
    /// Each range starts in the buffer where the one before it ends: every run of consecutive
    /// ranges is one contiguous piece of the buffer.
    pub packed: bool,
}

impl Facts {
    /// The facts of `list`, in one pass.
    pub fn of(list: &[Range]) -> Facts {
        let mut f = Facts {
            bytes: 0,
            max_len: 0,
            uniform_len: list.first().map(|r| r.len),
            past_file_limit: false,
            buf_end: Some(0),
            file_end: None,
            buf_chain: true,
            file_chain: true,
            packed: true,
        };
        let mut prev: Option<&Range> = None;
        for r in list {
            f.bytes = f.bytes.saturating_add(r.len);
            f.max_len = f.max_len.max(r.len);
            if f.uniform_len != Some(r.len) {
                f.uniform_len = None;
            }
            let file_end = r.file_offset.checked_add(r.len as u64);
            f.past_file_limit |= file_end.is_none_or(|e| e > i64::MAX as u64);
            let buf_end = r.buf_offset.checked_add(r.len);
            f.buf_end = f.buf_end.zip(buf_end).map(|(a, b)| a.max(b));
            if r.len > 0 {
                f.file_end = f.file_end.max(Some(r.end()));
            }
            if let Some(p) = prev {
                let p_buf_end = p.buf_offset.saturating_add(p.len);
                f.buf_chain &= p_buf_end <= r.buf_offset;
                f.file_chain &= p.end() <= r.file_offset;
                f.packed &= p_buf_end == r.buf_offset;
            }
            prev = Some(r);
        }
        f
    }
}

impl RangeList {
    /// The list and its facts.
    pub fn new(list: Arc<[Range]>) -> Self {
        let facts = Facts::of(&list);
        RangeList { list, facts }
    }

    /// What the checks and the plan ask of the list.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }
}

impl std::ops::Deref for RangeList {
    type Target = [Range];
    fn deref(&self) -> &[Range] {
        &self.list
    }
}

/// Two lists are equal when their ranges are (their facts follow from those).
impl PartialEq for RangeList {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl Eq for RangeList {}

impl From<Vec<Range>> for RangeList {
    fn from(v: Vec<Range>) -> Self {
        RangeList::new(v.into())
    }
}

impl From<Arc<[Range]>> for RangeList {
    fn from(v: Arc<[Range]>) -> Self {
        RangeList::new(v)
    }
}

impl FromIterator<Range> for RangeList {
    fn from_iter<I: IntoIterator<Item = Range>>(iter: I) -> Self {
        RangeList::new(iter.into_iter().collect())
    }
}

impl Ranges {
    /// No range: what a check of the file alone asks about (its mode, not its size).
    pub const NONE: Ranges = Ranges::One(Range {
        file_offset: 0,
        len: 0,
        buf_offset: 0,
    });

    /// The ranges, in order.
    pub fn as_slice(&self) -> &[Range] {
        match self {
            Ranges::One(r) => std::slice::from_ref(r),
            Ranges::Many(v) => v,
        }
    }

    /// What the checks and the plan ask of the ranges ([`Facts`]): kept with a list, found
    /// here for one range.
    pub fn facts(&self) -> Facts {
        match self {
            Ranges::One(r) => Facts::of(std::slice::from_ref(r)),
            Ranges::Many(v) => v.facts,
        }
    }

    /// The furthest end in the file of a range that moves a byte, if any ([`Facts::file_end`]).
    pub fn file_end(&self) -> Option<u64> {
        self.facts().file_end
    }

    /// The range that ends furthest in the file (of those that move a byte; the last of those
    /// that end there): what an error about the file's end names. A pass over the list, made
    /// only for such an error.
    pub fn last_in_file(&self) -> Option<&Range> {
        self.as_slice()
            .iter()
            .filter(|r| r.len > 0)
            .max_by_key(|r| r.end())
    }

    /// Ranges from parallel arrays (the C, C++ and Python `read_ranges`): range `i` is
    /// `sizes[i]` bytes at `file_offsets[i]`, at `buf_offsets[i]` in the buffer, or, without
    /// `buf_offsets`, packed one after the other from the buffer's start in the order given.
    /// Arrays of different lengths, and values past this machine's address space, are
    /// [`Error::InvalidArgument`]; the ranges themselves are checked when the request is
    /// submitted.
    pub fn from_arrays(
        file_offsets: &[u64],
        sizes: &[u64],
        buf_offsets: Option<&[u64]>,
    ) -> Result<Ranges> {
        let n = file_offsets.len();
        let mismatch = |name: &str, m: usize| {
            Error::InvalidArgument(format!("file_offsets has {n} entries but {name} has {m}"))
        };
        if sizes.len() != n {
            return Err(mismatch("sizes", sizes.len()));
        }
        if let Some(b) = buf_offsets.filter(|b| b.len() != n) {
            return Err(mismatch("buf_offsets", b.len()));
        }
        let word = |what: &str, i: usize, v: u64| {
            usize::try_from(v).map_err(|_| {
                Error::InvalidArgument(format!(
                    "{what}[{i}] {v} is larger than this machine's address space"
                ))
            })
        };
        // Checked in a first pass, so that the list is built straight into its shared
        // allocation (no copy of a vector into it: a gather's list is megabytes).
        for i in 0..n {
            word("sizes", i, sizes[i])?;
            if let Some(b) = buf_offsets {
                word("buf_offsets", i, b[i])?;
            }
        }
        let mut packed = 0usize;
        let list = (0..n)
            .map(|i| {
                let len = sizes[i] as usize; // checked above
                let buf_offset = match buf_offsets {
                    Some(b) => b[i] as usize,
                    None => packed,
                };
                packed = packed.saturating_add(len);
                Range {
                    file_offset: file_offsets[i],
                    len,
                    buf_offset,
                }
            })
            .collect();
        Ok(Ranges::Many(list))
    }

    /// The ranges of a fixed-row gather (`read_rows`): row `rows[i]`, the `row_bytes` bytes at
    /// `base_offset + rows[i] * row_stride` in the file, lands at `i * row_bytes`. `row_bytes`
    /// 0 and offsets that overflow are [`Error::InvalidArgument`].
    pub fn rows(
        rows: &[u64],
        row_bytes: usize,
        row_stride: u64,
        base_offset: u64,
    ) -> Result<Ranges> {
        if row_bytes == 0 {
            return Err(Error::InvalidArgument(
                "row_bytes must be at least 1".into(),
            ));
        }
        let offset = |row: u64| {
            row.checked_mul(row_stride)
                .and_then(|o| o.checked_add(base_offset))
        };
        // The furthest row (the last of its value) bounds every offset, as offsets grow with
        // the row: checking it checks them all, and the list's facts follow from it, so the
        // list is built straight into its shared allocation (no copy of a vector into it:
        // 100,000 rows are 2.4 MB) and never read again.
        let max = rows.iter().copied().max().unwrap_or(0);
        let Some(furthest) = offset(max) else {
            let i = rows
                .iter()
                .position(|&row| offset(row).is_none())
                .unwrap_or(0);
            return Err(Error::InvalidArgument(format!(
                "rows[{i}] {} at row_stride {row_stride} from base_offset {base_offset} is \
                 past the largest file offset",
                rows[i]
            )));
        };
        let Some(bytes) = rows.len().checked_mul(row_bytes) else {
            return Err(Error::InvalidArgument(format!(
                "{} rows of {row_bytes} bytes overflow the address space",
                rows.len()
            )));
        };
        let file_end = furthest.checked_add(row_bytes as u64);
        // Neither offset overflows: no row is past the furthest, and `i * row_bytes` is at
        // most `bytes`.
        let at_row = |row: u64| row * row_stride + base_offset;
        let facts = Facts {
            bytes,
            max_len: row_bytes.min(bytes),
            uniform_len: (!rows.is_empty()).then_some(row_bytes),
            // No row, no offset: a base past the limit reads nothing and is not refused.
            past_file_limit: !rows.is_empty() && file_end.is_none_or(|e| e > i64::MAX as u64),
            buf_end: Some(bytes),
            file_end: (!rows.is_empty()).then_some(file_end.unwrap_or(u64::MAX)),
            buf_chain: true,
            // Stops at the first pair out of order: a random gather pays nothing for it.
            file_chain: rows
                .windows(2)
                .all(|w| at_row(w[0]).saturating_add(row_bytes as u64) <= at_row(w[1])),
            packed: true,
        };
        let list: Arc<[Range]> = rows
            .iter()
            .enumerate()
            .map(|(i, &row)| Range {
                file_offset: at_row(row),
                len: row_bytes,
                buf_offset: i * row_bytes,
            })
            .collect();
        debug_assert_eq!(facts, Facts::of(&list));
        Ok(Ranges::Many(RangeList { list, facts }))
    }

    /// Bytes in all of them.
    pub fn bytes(&self) -> usize {
        match self {
            Ranges::One(r) => r.len,
            Ranges::Many(v) => v.facts.bytes,
        }
    }

    /// Refuses ranges that run past a buffer of `buffer_len` bytes or past the largest file
    /// offset, and ranges that overlap where tasks would race: in the buffer for a read (two
    /// tasks writing the same bytes), in the file for a write (which one lands last is not
    /// defined).
    pub fn check(&self, direction: Direction, buffer_len: usize) -> Result<()> {
        let facts = self.facts();
        if facts.past_file_limit || facts.buf_end.is_none_or(|e| e > buffer_len) {
            return Err(self.first_out_of_bounds(buffer_len));
        }
        let Ranges::Many(v) = self else {
            return Ok(());
        };
        // Gathers into a packed output, and writes in file order, come as a chain of ranges
        // each ending before the next starts: no overlap, known without sorting or copying.
        let chained = match direction {
            Direction::Read => facts.buf_chain,
            Direction::Write => facts.file_chain,
        };
        if chained {
            return Ok(());
        }
        let mut spans: Vec<(u64, u64)> = v
            .iter()
            .filter(|r| r.len > 0)
            .map(|r| match direction {
                Direction::Read => (r.buf_offset as u64, (r.buf_offset + r.len) as u64),
                Direction::Write => (r.file_offset, r.end()),
            })
            .collect();
        if !spans.windows(2).all(|w| w[0] <= w[1]) {
            spans.sort_unstable();
        }
        if let Some(w) = spans.windows(2).find(|w| w[1].0 < w[0].1) {
            let what = match direction {
                Direction::Read => "buffer",
                Direction::Write => "file",
            };
            return Err(Error::InvalidArgument(format!(
                "ranges overlap in the {what} (bytes {}..{} and {}..{})",
                w[0].0, w[0].1, w[1].0, w[1].1
            )));
        }
        Ok(())
    }

    /// The error for the first range past the largest file offset or past a buffer of
    /// `buffer_len` bytes (the facts said there is one).
    fn first_out_of_bounds(&self, buffer_len: usize) -> Error {
        for r in self.as_slice() {
            let file_end = r.file_offset.checked_add(r.len as u64);
            if file_end.is_none_or(|e| e > i64::MAX as u64) {
                return Error::InvalidArgument(format!(
                    "file_offset {} + size {} is past the largest file offset",
                    r.file_offset, r.len
                ));
            }
            if r.buf_offset
                .checked_add(r.len)
                .is_none_or(|e| e > buffer_len)
            {
                return Error::InvalidArgument(format!(
                    "a range of {} bytes at buffer offset {} runs past the buffer ({buffer_len} \
                     bytes)",
                    r.len, r.buf_offset
                ));
            }
        }
        Error::InvalidArgument("a range is out of bounds".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(list: &[(u64, usize, usize)]) -> Ranges {
        let v: Vec<Range> = list
            .iter()
            .map(|&(file_offset, len, buf_offset)| Range {
                file_offset,
                len,
                buf_offset,
            })
            .collect();
        Ranges::Many(v.into())
    }

    #[test]
    fn ranges_inside_the_buffer_that_do_not_race_pass_and_others_are_refused() {
        let read = Direction::Read;
        let ok = ranges(&[(100, 10, 0), (0, 10, 10), (100, 0, 5), (5000, 80, 20)]);
        assert!(ok.check(read, 100).is_ok());
        // Reads of the same file bytes into different places are fine; writes of them are not.
        let same_file = ranges(&[(0, 10, 0), (5, 10, 10)]);
        assert!(same_file.check(read, 20).is_ok());
        let e = same_file.check(Direction::Write, 20).unwrap_err();
        assert!(e.to_string().contains("overlap in the file"), "{e}");
        // Two reads into the same bytes race.
        let e = ranges(&[(0, 10, 0), (50, 10, 9)])
            .check(read, 20)
            .unwrap_err();
        assert!(e.to_string().contains("overlap in the buffer"), "{e}");
        let e = ranges(&[(0, 10, 95)]).check(read, 100).unwrap_err();
        assert!(e.to_string().contains("runs past the buffer"), "{e}");
        let e = ranges(&[(u64::MAX - 1, 10, 0)])
            .check(read, 100)
            .unwrap_err();
        assert!(e.to_string().contains("largest file offset"), "{e}");
        assert_eq!(ok.bytes(), 100);
    }

    #[test]
    fn ranges_from_arrays_and_rows_and_their_bad_inputs() {
        let packed = Ranges::from_arrays(&[100, 0, 50], &[10, 0, 5], None).unwrap();
        assert_eq!(packed, ranges(&[(100, 10, 0), (0, 0, 10), (50, 5, 10)]));
        let placed = Ranges::from_arrays(&[1, 2], &[3, 4], Some(&[40, 20])).unwrap();
        assert_eq!(placed, ranges(&[(1, 3, 40), (2, 4, 20)]));
        let e = Ranges::from_arrays(&[1, 2], &[3], None).unwrap_err();
        assert_eq!(e.to_string(), "file_offsets has 2 entries but sizes has 1");
        let e = Ranges::from_arrays(&[1], &[3], Some(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "file_offsets has 1 entries but buf_offsets has 0"
        );
        let rows = Ranges::rows(&[3, 0, 3], 8, 16, 100).unwrap();
        assert_eq!(rows, ranges(&[(148, 8, 0), (100, 8, 8), (148, 8, 16)]));
        let e = Ranges::rows(&[1], 0, 16, 0).unwrap_err();
        assert_eq!(e.to_string(), "row_bytes must be at least 1");
        let e = Ranges::rows(&[0, 1 << 62], 8, 1 << 10, 0).unwrap_err();
        assert!(e.to_string().contains("rows[1]") && e.to_string().contains("past the largest"));
    }

    /// Overlap is judged the same whether the ranges come as a chain (each ending before the
    /// next starts: the path without a sort) or in any other order.
    #[test]
    fn overlap_is_found_in_chains_and_in_any_order() {
        let list = |v: &[(u64, usize, usize)]| {
            Ranges::Many(
                v.iter()
                    .map(|&(file_offset, len, buf_offset)| Range {
                        file_offset,
                        len,
                        buf_offset,
                    })
                    .collect(),
            )
        };
        let read = |v: &[(u64, usize, usize)]| list(v).check(Direction::Read, 100);
        let write = |v: &[(u64, usize, usize)]| list(v).check(Direction::Write, 100);
        // Chains, empty ranges among them.
        assert!(read(&[(0, 10, 0), (50, 10, 10), (0, 0, 20), (9, 5, 20)]).is_ok());
        assert!(write(&[(0, 10, 50), (10, 10, 0), (20, 0, 0), (20, 5, 0)]).is_ok());
        // The same sets out of order, and an empty range inside another one.
        assert!(read(&[(9, 5, 20), (0, 10, 0), (50, 10, 10)]).is_ok());
        assert!(read(&[(0, 10, 0), (1, 0, 5), (50, 10, 10)]).is_ok());
        assert!(write(&[(20, 5, 0), (0, 10, 50), (10, 10, 0)]).is_ok());
        // Overlaps, next to each other or apart.
        for v in [
            &[(0, 10, 0), (50, 10, 9)][..],
            &[(0, 10, 30), (0, 5, 0), (50, 10, 35)][..],
        ] {
            let e = read(v).unwrap_err().to_string();
            assert!(e.starts_with("ranges overlap in the buffer"), "{e}");
        }
        let e = write(&[(10, 10, 0), (0, 11, 50)]).unwrap_err().to_string();
        assert!(e.starts_with("ranges overlap in the file"), "{e}");
    }

    /// The facts as their definitions say, read off the list range by range.
    fn naive(list: &[Range]) -> Facts {
        let pairs = || list.windows(2);
        Facts {
            bytes: list.iter().fold(0usize, |a, r| a.saturating_add(r.len)),
            max_len: list.iter().map(|r| r.len).max().unwrap_or(0),
            uniform_len: list
                .first()
                .map(|f| f.len)
                .filter(|&l| list.iter().all(|r| r.len == l)),
            past_file_limit: list.iter().any(|r| {
                r.file_offset
                    .checked_add(r.len as u64)
                    .is_none_or(|e| e > i64::MAX as u64)
            }),
            buf_end: list.iter().try_fold(0usize, |a, r| {
                r.buf_offset.checked_add(r.len).map(|e| a.max(e))
            }),
            file_end: list.iter().filter(|r| r.len > 0).map(|r| r.end()).max(),
            buf_chain: pairs().all(|w| w[0].buf_offset.saturating_add(w[0].len) <= w[1].buf_offset),
            file_chain: pairs().all(|w| w[0].end() <= w[1].file_offset),
            packed: pairs().all(|w| w[0].buf_offset.saturating_add(w[0].len) == w[1].buf_offset),
        }
    }

    /// No row at a base near the largest file offset: nothing to read, nothing past the limit
    /// (the case the property below found).
    #[test]
    fn no_rows_at_a_base_near_the_limit_read_nothing_and_are_not_refused() {
        let r = Ranges::rows(&[], 40, 1, i64::MAX as u64 - 10).unwrap();
        assert_eq!(r.facts(), naive(r.as_slice()));
        assert!(!r.facts().past_file_limit);
    }

    proptest::proptest! {
        /// One pass finds what the definitions say, for lists of every shape: packed, chained,
        /// overlapping, empty ranges, offsets near the limits.
        #[test]
        fn the_facts_of_a_list_are_what_their_definitions_say(
            list in proptest::collection::vec(
                (
                    proptest::prop_oneof![0u64..64, (i64::MAX as u64 - 64)..=u64::MAX],
                    0usize..8,
                    proptest::prop_oneof![0usize..64, (usize::MAX - 8)..=usize::MAX],
                ),
                0..12,
            ),
            packed in proptest::bool::ANY,
        ) {
            let mut at = 0usize;
            let list: Vec<Range> = list
                .into_iter()
                .map(|(file_offset, len, buf_offset)| {
                    let buf_offset = if packed { at } else { buf_offset };
                    at = at.saturating_add(len);
                    Range { file_offset, len, buf_offset }
                })
                .collect();
            proptest::prop_assert_eq!(Facts::of(&list), naive(&list));
            proptest::prop_assert_eq!(*RangeList::from(list.clone()).facts(), naive(&list));
        }

        /// A `read_rows` list knows its facts without reading itself back, and they are the
        /// list's: any rows, repeated or in order, any stride (0 and smaller than a row too).
        #[test]
        fn the_facts_of_rows_are_the_facts_of_their_list(
            rows in proptest::collection::vec(0u64..50, 0..12),
            sorted in proptest::bool::ANY,
            row_bytes in 1usize..40,
            row_stride in 0u64..60,
            base in proptest::prop_oneof![0u64..100, (i64::MAX as u64 - 2000)..(i64::MAX as u64)],
        ) {
            let mut rows = rows;
            if sorted {
                rows.sort_unstable();
                rows.dedup();
            }
            let r = Ranges::rows(&rows, row_bytes, row_stride, base).unwrap();
            proptest::prop_assert_eq!(r.facts(), naive(r.as_slice()));
        }
    }
}
