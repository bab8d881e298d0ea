//! Tiling: how the writes to an object cover it (each byte once; overlaps refused when a
//! request is checked, gaps at close), and how a write is cut into parts: whole parts go out at
//! once, pieces collect in part buffers.
//!
//! The writes to an object tile it: every byte from 0 to the end of the last write is written
//! exactly once. A write that overlaps an earlier one is refused before any byte moves; a gap is
//! refused at close. Both are [`RemoteFailure::NotTiled`].

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use gpufile::source::IoContext;
use gpufile::Range;
use gpufile::{Error, Result};

use super::multipart::{S3_MAX_PART, S3_MAX_PARTS, S3_MIN_PART};
use super::{lock, Dest, RemoteWriter};
use crate::error::{RemoteError, RemoteFailure};

/// A part's bytes collected from several writes.
#[derive(Debug, Default)]
pub(super) struct PartBuf {
    pub(super) data: Vec<u8>,
    filled: u64,
}

/// The part size for an object of `size_hint` bytes (when known) under `setting`: the setting,
/// raised (to a whole MiB) where the object would need more than [`S3_MAX_PARTS`] parts.
pub fn part_size_for(setting: u64, size_hint: Option<u64>) -> u64 {
    let setting = setting.clamp(S3_MIN_PART, S3_MAX_PART);
    let needed = size_hint.map_or(0, |n| n.div_ceil(S3_MAX_PARTS).next_multiple_of(1 << 20));
    setting.max(needed).min(S3_MAX_PART)
}

impl RemoteWriter {
    pub(super) fn not_tiled(&self, reason: String) -> Error {
        RemoteError {
            url: self.shown.clone(),
            kind: RemoteFailure::NotTiled,
            reason,
        }
        .into()
    }

    /// Reserves `ranges` for one request: refused, with nothing reserved, where one overlaps a
    /// range reserved before or another of them, ends past S3's 10,000 parts, or the writer
    /// is closed or failed.
    pub(super) fn reserve(&self, ranges: &[Range]) -> Result<()> {
        let mut st = lock(&self.state);
        if st.closed.is_some() {
            return Err(Error::Closed);
        }
        if let Some(e) = &st.failed {
            return Err(self.failed_earlier(e));
        }
        let mut asked: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for r in ranges.iter().filter(|r| r.len > 0) {
            let end = r.file_offset.checked_add(r.len as u64).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "a write of {} bytes at {} ends past the largest offset",
                    r.len, r.file_offset
                ))
            })?;
            asked.push((r.file_offset, end));
        }
        asked.sort_unstable();
        for w in asked.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(self.overlap(w[1], w[0]));
            }
        }
        for &(a, b) in &asked {
            if let Some((&s, &e)) = st.reserved.range(..b).next_back() {
                if e > a {
                    return Err(self.overlap((a, b), (s, e)));
                }
            }
        }
        let end = asked.iter().map(|r| r.1).max().unwrap_or(0).max(st.extent);
        // GCS's resumable upload has no part count limit.
        let limited = self.part_size != u64::MAX && !matches!(self.dest, Dest::Gcs(_));
        if limited && end.div_ceil(self.part_size) > S3_MAX_PARTS {
            return Err(RemoteError {
                url: self.shown.clone(),
                kind: RemoteFailure::PartLimit,
                reason: format!(
                    "a write up to byte {end} needs more than S3's {S3_MAX_PARTS} parts of {} \
                     bytes (remote_part_size); raise remote_part_size, or give the object's \
                     size (nbytes) when opening it",
                    self.part_size
                ),
            }
            .into());
        }
        for (a, b) in asked {
            insert_range(&mut st.reserved, a, b);
        }
        st.extent = end;
        if self.part_size != u64::MAX && end > self.part_size {
            st.multipart = true;
        }
        Ok(())
    }

    /// Gives back ranges reserved by a request that could not start.
    pub(super) fn release(&self, ranges: &[Range]) {
        let mut st = lock(&self.state);
        for r in ranges.iter().filter(|r| r.len > 0) {
            remove_range(&mut st.reserved, r.file_offset, r.end());
        }
        st.extent = st.reserved.values().next_back().copied().unwrap_or(0);
    }

    fn overlap(&self, (a, b): (u64, u64), (s, e): (u64, u64)) -> Error {
        self.not_tiled(format!(
            "a write of bytes {a}-{} overlaps bytes {s}-{} written before; the writes to an \
             object must tile it (each byte written once)",
            b - 1,
            e - 1
        ))
    }

    /// Takes in `src` at `offset`: whole parts go out at once, pieces into part buffers.
    pub(super) fn take(&self, src: &[u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        let p = self.part_size;
        let end = offset + src.len() as u64;
        let mut at = offset;
        while at < end {
            let k = at / p;
            let part_end = (k + 1).saturating_mul(p).min(end);
            let piece = &src[(at - offset) as usize..(part_end - offset) as usize];
            let whole = at == k * p && piece.len() as u64 == p;
            let ready = {
                let mut st = lock(&self.state);
                if let Some(e) = &st.failed {
                    return Err(self.failed_earlier(e));
                }
                if whole && st.multipart {
                    None
                } else {
                    let buf = st.buffers.entry(k).or_default();
                    let from = (at - k.saturating_mul(p)) as usize;
                    if buf.data.len() < from + piece.len() {
                        buf.data.resize(from + piece.len(), 0);
                    }
                    buf.data[from..from + piece.len()].copy_from_slice(piece);
                    buf.filled += piece.len() as u64;
                    let full = p != u64::MAX && buf.filled == p && st.multipart;
                    st.written += piece.len() as u64;
                    match full {
                        true => Some(st.buffers.remove(&k).map(|b| b.data).unwrap_or_default()),
                        false => {
                            at = part_end;
                            continue;
                        }
                    }
                }
            };
            match ready {
                None => {
                    self.upload_part(k, piece, Some(call.stop), true)?;
                    lock(&self.state).written += piece.len() as u64;
                }
                Some(data) => self.upload_part(k, &data, Some(call.stop), true)?,
            }
            at = part_end;
        }
        call.progress.fetch_add(src.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Adds `[a, b)` to a set of disjoint ranges, merging neighbours.
pub(super) fn insert_range(set: &mut BTreeMap<u64, u64>, mut a: u64, mut b: u64) {
    if let Some((&s, &e)) = set.range(..=a).next_back() {
        if e >= a {
            a = s;
            b = b.max(e);
            set.remove(&s);
        }
    }
    while let Some((&s, &e)) = set.range(a..=b).next() {
        b = b.max(e);
        set.remove(&s);
    }
    set.insert(a, b);
}

/// Removes `[a, b)` from a set of disjoint ranges, splitting where needed.
pub(super) fn remove_range(set: &mut BTreeMap<u64, u64>, a: u64, b: u64) {
    let hit: Vec<(u64, u64)> = set
        .range(..b)
        .filter(|(_, &e)| e > a)
        .map(|(&s, &e)| (s, e))
        .collect();
    for (s, e) in hit {
        set.remove(&s);
        if s < a {
            set.insert(s, a);
        }
        if e > b {
            set.insert(b, e);
        }
    }
}
