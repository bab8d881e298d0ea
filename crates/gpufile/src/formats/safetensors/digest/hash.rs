//! BLAKE3 of many byte strings (a file's tensors) on several threads: each string longer than
//! [`LEAF`] is cut into the subtrees of BLAKE3's own tree (`hazmat::left_subtree_len`), every
//! piece of every string is one job for the threads, and each string's pieces are merged into
//! its root hash afterwards. The result is `blake3::hash` of each string, whatever the thread
//! count (the tree is BLAKE3's; only who hashes which subtree changes).

use std::sync::atomic::{AtomicUsize, Ordering};

use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, ChainingValue, HasherExt, Mode,
};
use blake3::Hasher;

/// The largest piece one job hashes (a power of two, a whole number of BLAKE3 chunks): large
/// enough for the crate's SIMD to run at its rate, small enough that a multi-GiB tensor is
/// thousands of jobs to share.
pub const LEAF: usize = 1 << 20;

/// One job: bytes `start..start + len` of string `string`, at input offset `offset` of that
/// string; `root` where it is the whole string (then its hash is the string's).
struct Job {
    string: usize,
    start: usize,
    offset: u64,
    len: usize,
    root: bool,
}

/// The leaves of a subtree at input `offset` of `len` bytes, in order: the subtrees of at most
/// [`LEAF`] bytes that BLAKE3's tree splits it into.
fn leaves(string: usize, start: usize, offset: u64, len: usize, out: &mut Vec<Job>) {
    if len <= LEAF {
        out.push(Job {
            string,
            start,
            offset,
            len,
            root: false,
        });
        return;
    }
    let left = left_subtree_len(len as u64) as usize;
    leaves(string, start, offset, left, out);
    leaves(string, start + left, offset + left as u64, len - left, out);
}

/// The chaining value of the subtree of `len` bytes, from its leaves' in order.
fn merge(len: usize, cvs: &mut impl Iterator<Item = ChainingValue>) -> ChainingValue {
    if len <= LEAF {
        return cvs.next().expect("one chaining value per leaf");
    }
    let left = left_subtree_len(len as u64) as usize;
    let l = merge(left, cvs);
    let r = merge(len - left, cvs);
    merge_subtrees_non_root(&l, &r, Mode::Hash)
}

/// What a job gives: a string's hash, or a leaf's chaining value (both 32 bytes).
fn run(job: &Job, data: &[u8]) -> [u8; 32] {
    let bytes = &data[job.start..job.start + job.len];
    if job.root {
        return *blake3::hash(bytes).as_bytes();
    }
    let mut h = Hasher::new();
    h.set_input_offset(job.offset);
    h.update(bytes);
    h.finalize_non_root()
}

/// `blake3::hash` of each of `ranges` (start, length) of `data`, on `threads` threads (at
/// least 1; this one among them).
pub fn hash_ranges(data: &[u8], ranges: &[(usize, usize)], threads: usize) -> Vec<blake3::Hash> {
    let threads = threads.max(1);
    let mut jobs = Vec::new();
    for (string, &(start, len)) in ranges.iter().enumerate() {
        if len <= LEAF || threads == 1 {
            jobs.push(Job {
                string,
                start,
                offset: 0,
                len,
                root: true,
            });
        } else {
            leaves(string, start, 0, len, &mut jobs);
        }
    }
    let mut out = vec![[0u8; 32]; jobs.len()];
    let workers = threads.min(jobs.len());
    if workers <= 1 {
        for (o, job) in out.iter_mut().zip(&jobs) {
            *o = run(job, data);
        }
    } else {
        // The jobs are taken in order by whichever thread is free; each thread keeps what it
        // hashed and the results are put in place afterwards.
        let next = AtomicUsize::new(0);
        let work = || {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                done.push((i, run(job, data)));
            }
            done
        };
        let results = std::thread::scope(|s| {
            let others: Vec<_> = (1..workers).map(|_| s.spawn(work)).collect();
            let mut all = work();
            for t in others {
                all.extend(t.join().expect("a hashing thread does not panic"));
            }
            all
        });
        for (i, r) in results {
            out[i] = r;
        }
    }
    // Each string's jobs are consecutive: one root, or its leaves in tree order.
    let mut hashes = Vec::with_capacity(ranges.len());
    let mut at = 0;
    for &(_, len) in ranges {
        if jobs[at].root {
            hashes.push(blake3::Hash::from_bytes(out[at]));
            at += 1;
            continue;
        }
        let n = jobs[at..]
            .iter()
            .take_while(|j| j.string == jobs[at].string)
            .count();
        let mut cvs = out[at..at + n].iter().copied();
        let left = left_subtree_len(len as u64) as usize;
        let l = merge(left, &mut cvs);
        let r = merge(len - left, &mut cvs);
        hashes.push(merge_subtrees_root(&l, &r, Mode::Hash));
        at += n;
    }
    hashes
}

/// `blake3::hash(data)` on `threads` threads.
pub fn hash(data: &[u8], threads: usize) -> blake3::Hash {
    hash_ranges(data, &[(0, data.len())], threads)[0]
}
