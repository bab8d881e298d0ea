//! cuFile's statistics API (`cuFileSetStatsLevel`, `cuFileStatsStart`, `cuFileGetStatsL3`,
//! cuFile 1.15+): the counters that tell in-process which path cuFile took (nvidia-fs or its
//! POSIX compat path), decoded from raw bytes because the level-1 struct grew in cuFile 1.19.

use super::library::api;
use super::result::check;
use crate::error::{Error, Result};

/// cuFile's per-process counters, as far as the statistics API gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Reads cuFile completed.
    pub read_ops: u64,
    /// Reads that failed.
    pub read_errors: u64,
    /// Writes cuFile completed.
    pub write_ops: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Per-GPU reads (summed over GPUs): all, through nvidia-fs, through cuFile's POSIX path.
    pub n_reads: u64,
    /// See `n_reads`.
    pub nvfs_reads: u64,
    /// See `n_reads`.
    pub posix_reads: u64,
    /// Per-GPU writes, likewise.
    pub n_writes: u64,
    /// See `n_writes`.
    pub nvfs_writes: u64,
    /// See `n_writes`.
    pub posix_writes: u64,
}

const OP_COUNTERS_L1: usize = 6;
const PER_GPU_SIZE: usize = 248;
const MAX_GPUS: usize = 16;

/// Size of `CUfileStatsLevel1_t`: 512 bytes up to cuFile 1.18; 1.19 added the readv/writev
/// counters (112 bytes more).
fn l1_size(version: Option<(i32, i32)>) -> usize {
    match version {
        Some(v) if v >= (1, 19) => 624,
        _ => 512,
    }
}

fn u64_at(buf: &[u8], off: usize) -> u64 {
    buf.get(off..off + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
}

/// Decodes a `CUfileStatsLevel3_t` from raw bytes given the level-1 size; `None` if the bytes
/// do not look like one (more than 16 GPUs, per-GPU reads not adding up).
pub fn decode_l3(buf: &[u8], l1: usize) -> Option<Stats> {
    let mut s = Stats {
        read_ops: u64_at(buf, 0),
        read_errors: u64_at(buf, 8),
        write_ops: u64_at(buf, 16),
        read_bytes: u64_at(buf, OP_COUNTERS_L1 * 16),
        write_bytes: u64_at(buf, OP_COUNTERS_L1 * 16 + 8),
        ..Stats::default()
    };
    let l2 = l1 + 64 * 8;
    let num_gpus = buf
        .get(l2..l2 + 4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))?;
    if num_gpus as usize > MAX_GPUS {
        return None;
    }
    let base = l2 + 8;
    for g in 0..MAX_GPUS {
        let o = base + g * PER_GPU_SIZE + 16;
        let f = |i: usize| u64_at(buf, o + i * 8);
        s.n_reads += f(4);
        s.nvfs_reads += f(6);
        s.posix_reads += f(7);
        s.n_writes += f(17);
        s.nvfs_writes += f(19);
        s.posix_writes += f(20);
    }
    // Every per-GPU read went some way; a wrong layout breaks this with near certainty.
    let plausible = s.nvfs_reads + s.posix_reads <= s.n_reads.max(1) * 2
        && s.n_reads
            <= s.read_ops
                .saturating_add(s.read_errors)
                .saturating_mul(64)
                .max(1024);
    plausible.then_some(s)
}

impl Stats {
    /// cuFile's counters now (level 3 where enabled), or why they cannot be read.
    pub fn snapshot() -> Result<Stats> {
        let api = api()?;
        let get = api.get_stats_l3.ok_or_else(|| Error::CufileUnavailable {
            reason: "this cuFile has no statistics API (cuFile 1.15 or newer has)".into(),
        })?;
        let mut buf = vec![0u8; 64 << 10];
        // SAFETY: the buffer is far larger than any CUfileStatsLevel3_t version (~5 KiB).
        check("cuFileGetStatsL3", unsafe { get(buf.as_mut_ptr().cast()) })?;
        let version = api.version();
        let first = l1_size(version);
        let other = if first == 512 { 624 } else { 512 };
        decode_l3(&buf, first)
            .or_else(|| decode_l3(&buf, other))
            .ok_or_else(|| Error::CufileUnavailable {
                reason: format!("cuFile {version:?} statistics have an unknown layout"),
            })
    }

    /// Counters accumulated since `before`.
    pub fn since(&self, before: &Stats) -> Stats {
        Stats {
            read_ops: self.read_ops.saturating_sub(before.read_ops),
            read_errors: self.read_errors.saturating_sub(before.read_errors),
            write_ops: self.write_ops.saturating_sub(before.write_ops),
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
            n_reads: self.n_reads.saturating_sub(before.n_reads),
            nvfs_reads: self.nvfs_reads.saturating_sub(before.nvfs_reads),
            posix_reads: self.posix_reads.saturating_sub(before.posix_reads),
            n_writes: self.n_writes.saturating_sub(before.n_writes),
            nvfs_writes: self.nvfs_writes.saturating_sub(before.nvfs_writes),
            posix_writes: self.posix_writes.saturating_sub(before.posix_writes),
        }
    }
}

/// Sets cuFile's statistics level (3 gives per-GPU nvfs/posix counts) and starts collection;
/// returns the previous level.
pub fn enable_stats(level: i32) -> Result<i32> {
    let api = api()?;
    let (Some(set), Some(start)) = (api.set_stats_level, api.stats_start) else {
        return Err(Error::CufileUnavailable {
            reason: "this cuFile has no statistics API (cuFile 1.15 or newer has)".into(),
        });
    };
    let mut old = 0;
    if let Some(get) = api.get_stats_level {
        // SAFETY: plain out-parameter.
        unsafe { get(&mut old) };
    }
    if old < level {
        // SAFETY: plain value arguments.
        check("cuFileSetStatsLevel", unsafe { set(level) })?;
    }
    // SAFETY: no arguments.
    check("cuFileStatsStart", unsafe { start() })?;
    Ok(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l3_bytes(l1: usize, read_ops: u64, per_gpu: &[(u64, u64, u64)]) -> Vec<u8> {
        let mut buf = vec![0u8; 8192];
        buf[0..8].copy_from_slice(&read_ops.to_le_bytes());
        let l2 = l1 + 512;
        buf[l2..l2 + 4].copy_from_slice(&(per_gpu.len() as u32).to_le_bytes());
        for (g, (n, nvfs, posix)) in per_gpu.iter().enumerate() {
            let o = l2 + 8 + g * PER_GPU_SIZE + 16;
            buf[o + 32..o + 40].copy_from_slice(&n.to_le_bytes());
            buf[o + 48..o + 56].copy_from_slice(&nvfs.to_le_bytes());
            buf[o + 56..o + 64].copy_from_slice(&posix.to_le_bytes());
        }
        buf
    }

    #[test]
    fn stats_decode_for_both_layouts() {
        for l1 in [512, 624] {
            let buf = l3_bytes(l1, 256, &[(256, 0, 256)]);
            let s = decode_l3(&buf, l1).unwrap();
            assert_eq!(
                (s.read_ops, s.n_reads, s.nvfs_reads, s.posix_reads),
                (256, 256, 0, 256)
            );
        }
        assert_eq!(l1_size(Some((1, 15))), 512);
        assert_eq!(l1_size(Some((1, 19))), 624);
    }
}
