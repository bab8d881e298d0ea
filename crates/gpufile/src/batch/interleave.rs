//! The order in which several files' writes go into one batch: the one rule behind a
//! checkpoint's shards ([`crate::formats::safetensors::submit_files`]) and the Python package's
//! PyTorch writer (through the binding).

use crate::config::Settings;

/// One piece of a file's write: `len` bytes at `at` in write `write` of file `file` (indices in
/// the lists given to [`interleave`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Which file.
    pub file: usize,
    /// Which of the file's writes.
    pub write: usize,
    /// Where in the write the piece starts.
    pub at: usize,
    /// Bytes in the piece.
    pub len: usize,
}

/// The pieces of the writes of `files` (each file's writes' lengths, in file order) in the
/// order a batch submits them: one file's writes whole, as they are; several files' cut into
/// pieces of the settings' `task_size` and taken a piece of each file in turn, so that the
/// workers write to every file at once. Buffered writes to one file take its inode lock one
/// writer at a time (ext4, XFS), so one file's page-cache write rate is about one core's, and
/// several files go faster together than one after the other.
pub fn interleave<W: AsRef<[usize]>>(files: &[W], settings: &Settings) -> Vec<Piece> {
    let whole = files.len() <= 1;
    let step = settings.task_size.max(1);
    let mut queues: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(file, writes)| {
            writes
                .as_ref()
                .iter()
                .enumerate()
                .flat_map(move |(write, &len)| {
                    let step = if whole { len.max(1) } else { step };
                    (0..len).step_by(step).map(move |at| Piece {
                        file,
                        write,
                        at,
                        len: step.min(len - at),
                    })
                })
        })
        .collect();
    let mut out = Vec::new();
    while !queues.is_empty() {
        queues.retain_mut(|q| match q.next() {
            Some(piece) => {
                out.push(piece);
                true
            }
            None => false,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(task_size: usize) -> Settings {
        Settings {
            task_size,
            ..Settings::default()
        }
    }

    fn piece(file: usize, write: usize, at: usize, len: usize) -> Piece {
        Piece {
            file,
            write,
            at,
            len,
        }
    }

    #[test]
    fn one_file_s_writes_go_whole_and_in_order() {
        let got = interleave(&[vec![10, 0, 25]], &settings(4));
        assert_eq!(got, [piece(0, 0, 0, 10), piece(0, 2, 0, 25)]);
        assert!(interleave::<Vec<usize>>(&[], &settings(4)).is_empty());
    }

    #[test]
    fn several_files_go_a_task_size_piece_of_each_in_turn() {
        let got = interleave(&[vec![10], vec![3, 4], vec![]], &settings(4));
        assert_eq!(
            got,
            [
                piece(0, 0, 0, 4),
                piece(1, 0, 0, 3),
                piece(0, 0, 4, 4),
                piece(1, 1, 0, 4),
                piece(0, 0, 8, 2),
            ]
        );
        // Every byte of every write once.
        let mut bytes = [0usize; 2];
        got.iter().for_each(|p| bytes[p.file] += p.len);
        assert_eq!(bytes, [10, 7]);
    }
}
