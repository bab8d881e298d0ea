//! Small chunks on their way to a GPU, stored past the CPU's caches.
//!
//! Why: `pread` into a pinned bounce buffer leaves every copied line dirty in the copying core's
//! caches (the kernel copies with ordinary stores); a chunk that fits in the core's L2 cache is
//! then read by the GPU line by line out of that cache, which makes a 1 MiB read to the GPU cost
//! several times a 1 MiB read into host memory (`benches/copy_probe.py` shows it). So a chunk
//! from [`STREAMED_MIN`] to [`STREAMED_MAX`] bytes is read with `pread` into a small buffer of
//! the reading thread ([`SCRATCH`] bytes, which stay in the core's L2 cache) and stored from there
//! into the bounce buffer with non-temporal stores: the bytes go to memory, and the GPU reads them
//! from there.
//!
//! The file is read with `pread`, not copied out of a mapping of it: a mapping costs a page fault
//! per few pages of every newly opened file, a `SIGBUS` handler against files shrinking under it,
//! and an unmap at every close. Chunks outside the range are read straight into the bounce buffer:
//! a larger chunk's lines have mostly left the L2 cache by the time the GPU reads them, so the
//! second copy of every byte costs more than it saves, and only the range measures faster
//! (docs/performance.md, "Streamed copies").

use std::cell::RefCell;
use std::ptr;

use crate::error::Result;

/// The smallest chunk read this way (smaller ones are read straight into the bounce buffer).
pub const STREAMED_MIN: usize = 64 << 10;

/// The largest chunk read this way (larger ones are read straight into the bounce buffer: their
/// lines have mostly left the core's L2 cache by the time the GPU reads them).
pub const STREAMED_MAX: usize = 1 << 20;

/// Bytes of each thread's buffer: within the L2 cache of every current server core (1–2 MiB),
/// and a `pread` per 256 KiB costs little (a smaller buffer is no faster: docs/performance.md,
/// "Streamed copies").
pub const SCRATCH: usize = 256 << 10;

/// Copies `len` bytes with stores that bypass the CPU's caches (x86-64: SSE2 streaming stores,
/// then a store fence), for bytes a device reads next; a plain copy elsewhere.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes; the ranges must not overlap.
pub unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: every access below lies within the `len` bytes of the caller's contract; SSE2 is
    // part of x86-64's baseline; loads are unaligned, stores are 16-byte aligned (`head`).
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = ((16 - (dst as usize & 15)) & 15).min(len);
        ptr::copy_nonoverlapping(src, dst, head);
        let (mut d, mut s, mut n) = (dst.add(head), src.add(head), len - head);
        while n >= 64 {
            let a = _mm_loadu_si128(s.cast::<__m128i>());
            let b = _mm_loadu_si128(s.add(16).cast::<__m128i>());
            let c = _mm_loadu_si128(s.add(32).cast::<__m128i>());
            let e = _mm_loadu_si128(s.add(48).cast::<__m128i>());
            _mm_stream_si128(d.cast::<__m128i>(), a);
            _mm_stream_si128(d.add(16).cast::<__m128i>(), b);
            _mm_stream_si128(d.add(32).cast::<__m128i>(), c);
            _mm_stream_si128(d.add(48).cast::<__m128i>(), e);
            d = d.add(64);
            s = s.add(64);
            n -= 64;
        }
        while n >= 16 {
            _mm_stream_si128(d.cast::<__m128i>(), _mm_loadu_si128(s.cast::<__m128i>()));
            d = d.add(16);
            s = s.add(16);
            n -= 16;
        }
        ptr::copy_nonoverlapping(s, d, n);
        _mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// Fills `dst` [`SCRATCH`] bytes at a time: `read(piece, at)` fills `piece` with the bytes that
/// belong at `dst[at..]`, then the piece is stored into `dst` with [`copy_nontemporal`]. Stops at
/// the first error (`dst` then holds the pieces before it). Where the thread's buffer is not to
/// be had (a `read` that itself reads this way on the same thread, or a thread whose locals are
/// being torn down) `read` fills `dst` straight.
pub fn read_streamed(
    dst: &mut [u8],
    mut read: impl FnMut(&mut [u8], usize) -> Result<()>,
) -> Result<()> {
    thread_local! {
        static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let streamed = BUF.try_with(|buf| {
        let mut buf = buf.try_borrow_mut().ok()?;
        if buf.len() < SCRATCH {
            buf.resize(SCRATCH, 0);
        }
        let mut at = 0;
        while at < dst.len() {
            let n = SCRATCH.min(dst.len() - at);
            if let Err(e) = read(&mut buf[..n], at) {
                return Some(Err(e));
            }
            // SAFETY: `buf` holds `n` bytes just read and `dst[at..at + n]` is in bounds; the
            // two are distinct allocations.
            unsafe { copy_nontemporal(dst.as_mut_ptr().add(at), buf.as_ptr(), n) };
            at += n;
        }
        Some(Ok(()))
    });
    match streamed {
        Ok(Some(done)) => done,
        _ => read(dst, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn the_streaming_copy_matches_a_plain_one_at_every_alignment() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in (0..300).chain([1000, 4095]) {
            for so in 0..17 {
                for d_off in 0..17 {
                    if so + len > src.len() {
                        continue;
                    }
                    let mut dst = vec![0xAAu8; len + 40];
                    // SAFETY: both ranges are in bounds of their vectors and distinct.
                    unsafe {
                        copy_nontemporal(dst.as_mut_ptr().add(d_off), src.as_ptr().add(so), len)
                    };
                    assert_eq!(
                        &dst[d_off..d_off + len],
                        &src[so..so + len],
                        "{len} {so} {d_off}"
                    );
                    assert!(dst[..d_off].iter().all(|&b| b == 0xAA));
                    assert!(dst[d_off + len..].iter().all(|&b| b == 0xAA));
                }
            }
        }
    }

    #[test]
    fn a_streamed_read_puts_every_piece_where_it_belongs() {
        for len in [
            1,
            4096,
            SCRATCH - 1,
            SCRATCH,
            SCRATCH + 1,
            3 * SCRATCH + 12_345,
        ] {
            let src: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut dst = vec![0u8; len];
            let mut calls = 0;
            read_streamed(&mut dst, |piece, at| {
                calls += 1;
                assert!(piece.len() <= SCRATCH);
                piece.copy_from_slice(&src[at..at + piece.len()]);
                Ok(())
            })
            .unwrap();
            assert_eq!(dst, src, "{len}");
            assert_eq!(calls, len.div_ceil(SCRATCH));
        }
    }

    #[test]
    fn a_failed_piece_stops_the_read_with_its_error() {
        let mut dst = vec![7u8; 2 * SCRATCH + 5];
        let mut calls = 0;
        let r = read_streamed(&mut dst, |piece, at| {
            calls += 1;
            match at {
                0 => {
                    piece.fill(1);
                    Ok(())
                }
                _ => Err(Error::InvalidArgument("gone".into())),
            }
        });
        assert!(matches!(r, Err(Error::InvalidArgument(m)) if m == "gone"));
        assert_eq!(calls, 2, "no piece after the failed one");
        assert!(dst[..SCRATCH].iter().all(|&b| b == 1));
        assert!(
            dst[SCRATCH..].iter().all(|&b| b == 7),
            "the failed piece left dst alone"
        );
    }

    #[test]
    fn a_nested_streamed_read_reads_straight_into_its_destination() {
        let mut outer = vec![0u8; 100];
        read_streamed(&mut outer, |piece, _| {
            let mut inner = vec![0u8; 50];
            read_streamed(&mut inner, |p, _| {
                p.fill(9);
                Ok(())
            })?;
            assert!(inner.iter().all(|&b| b == 9));
            piece.fill(3);
            Ok(())
        })
        .unwrap();
        assert!(outer.iter().all(|&b| b == 3));
    }
}
