//! Writes of one batch that land on the same bytes of one file: refused before any byte moves,
//! since which lands last is not defined (the file would end a mix of both). The file is the
//! one on disk, not the handle: two handles of one file (or a hard link) are one file.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::Arc;

use crate::error::Error;
use crate::request::Range;
use crate::source::Endpoint;

/// What a write lands in, for comparing writes: a local file by its device and inode, any other
/// sink (an object store's upload) by itself.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
enum Target {
    Inode { dev: u64, ino: u64 },
    Sink(usize),
}

impl Target {
    /// The target of a write endpoint; `None` for a read, and for a local file with no bytes to
    /// share (a character device such as `/dev/null`, a pipe, a socket).
    fn of(endpoint: &Endpoint) -> Option<Target> {
        let Endpoint::Write(sink) = endpoint else {
            return None;
        };
        let itself = Target::Sink(Arc::as_ptr(sink).cast::<()>() as usize);
        let Some(local) = Arc::clone(sink).local_file() else {
            return Some(itself);
        };
        match local.file().metadata() {
            Ok(m) if m.file_type().is_file() || m.file_type().is_block_device() => {
                Some(Target::Inode {
                    dev: m.dev(),
                    ino: m.ino(),
                })
            }
            Ok(_) => None,
            // A file that cannot be asked is compared by its handle: writes through it still
            // cannot overlap one another.
            Err(_) => Some(itself),
        }
    }
}

/// Two writes that land on the same bytes: `a` < `b` (who wrote them: operation or request
/// numbers), and the first shared bytes `start..end` of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shared {
    pub a: usize,
    pub b: usize,
    pub start: u64,
    pub end: u64,
}

impl Shared {
    /// The error refusing the batch: `what` names the writers ("operations", "requests"),
    /// `file` the file (its path).
    pub(crate) fn error(&self, what: &str, file: &str) -> Error {
        Error::InvalidArgument(format!(
            "{what} {} and {} of the batch write the same bytes of {file} (bytes {}..{}): which \
             lands last is not defined, so nothing was written",
            self.a, self.b, self.start, self.end
        ))
    }
}

/// The file ranges of a batch's writes, each with who writes it.
#[derive(Default)]
pub(crate) struct WriteSpans {
    /// Per sink seen (by address): its target, asked once.
    targets: HashMap<usize, Option<Target>>,
    /// (target, start, end, writer), empty ranges left out.
    spans: Vec<(Target, u64, u64, usize)>,
}

impl WriteSpans {
    /// Adds the `ranges` that `by` writes through `endpoint` (nothing for a read).
    pub(crate) fn add(&mut self, endpoint: &Endpoint, by: usize, ranges: &[Range]) {
        let Endpoint::Write(sink) = endpoint else {
            return;
        };
        let key = Arc::as_ptr(sink).cast::<()>() as usize;
        let target = *self
            .targets
            .entry(key)
            .or_insert_with(|| Target::of(endpoint));
        let Some(target) = target else {
            return;
        };
        self.spans.extend(
            ranges
                .iter()
                .filter(|r| r.len > 0)
                .map(|r| (target, r.file_offset, r.end(), by)),
        );
    }

    /// The first two writers (by file, then offset) whose ranges share bytes of one file; the
    /// ranges of one writer are not compared with each other (a request's own are checked by
    /// [`crate::Ranges::check`]).
    pub(crate) fn first_shared(mut self) -> Option<Shared> {
        if !self.spans.windows(2).all(|w| w[0] <= w[1]) {
            self.spans.sort_unstable();
        }
        // The span reaching furthest so far in the current file: a later span that starts
        // before its end overlaps it (and each writer's own spans do not overlap each other, so
        // a span of the same writer hides no other: it would overlap that one too).
        let mut reach: Option<(Target, u64, u64, usize)> = None;
        for &s in &self.spans {
            match reach {
                Some(r) if r.0 == s.0 => {
                    if s.1 < r.2 && s.3 != r.3 {
                        return Some(Shared {
                            a: r.3.min(s.3),
                            b: r.3.max(s.3),
                            start: s.1,
                            end: s.2.min(r.2),
                        });
                    }
                    if s.2 > r.2 {
                        reach = Some(s);
                    }
                }
                _ => reach = Some(s),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Direction, FileHandle};

    fn at(file_offset: u64, len: usize) -> Range {
        Range {
            file_offset,
            len,
            buf_offset: 0,
        }
    }

    #[test]
    fn two_handles_of_one_file_are_one_file_and_other_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = (dir.path().join("p"), dir.path().join("q"));
        std::fs::write(&p, [0u8; 100]).unwrap();
        std::fs::write(&q, [0u8; 100]).unwrap();
        let one = FileHandle::open(&p, "r+")
            .unwrap()
            .endpoint(Direction::Write);
        let two = FileHandle::open(&p, "r+")
            .unwrap()
            .endpoint(Direction::Write);
        let other = FileHandle::open(&q, "r+")
            .unwrap()
            .endpoint(Direction::Write);
        let read = FileHandle::open(&p, "r").unwrap().endpoint(Direction::Read);
        let mut spans = WriteSpans::default();
        spans.add(&one, 0, &[at(0, 10), at(50, 10)]);
        spans.add(&other, 1, &[at(0, 100)]);
        spans.add(&read, 2, &[at(0, 100)]);
        spans.add(&two, 3, &[at(10, 40), at(55, 0)]);
        assert_eq!(spans.first_shared(), None);
        let mut spans = WriteSpans::default();
        spans.add(&one, 0, &[at(0, 10), at(50, 10)]);
        spans.add(&other, 1, &[at(0, 100)]);
        spans.add(&two, 2, &[at(10, 41)]);
        let shared = spans.first_shared();
        assert_eq!(
            shared,
            Some(Shared {
                a: 0,
                b: 2,
                start: 50,
                end: 51
            })
        );
    }
}
