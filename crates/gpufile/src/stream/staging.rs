//! Pinned staging of stream-ordered requests: a pool of page-locked buffers that is never freed
//! while the process runs (freeing pinned memory synchronizes the device, which would wait for
//! the very streams that wait for gpufile), at most [`STAGING_MAX`] bytes in all.

use crate::cuda::{self, PinnedBuffer};
use crate::error::Result;
use crate::future::lock;
use crate::request::{Buffer, Request};
use std::sync::Mutex;

/// Most bytes of pinned staging that stream-ordered requests keep (in use or free for the
/// next): a request that needs more waits for the caller instead. Staging is never freed (see
/// the module's header), so this bounds what the process keeps pinned for them.
pub const STAGING_MAX: usize = 256 << 20;

/// Smallest staging buffer: sizes are rounded up to a power of two from here, so that buffers
/// are reused by requests of nearby sizes.
const STAGING_MIN: usize = 64 << 10;

/// Pinned staging of one stream-ordered request; dropping it puts it back in the pool (never
/// freed: see the module's header).
pub(super) struct Staging {
    buf: Option<PinnedBuffer>,
    len: usize,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            lock(&STAGING).free.push(buf);
        }
    }
}

/// The staging pool: free buffers, and the bytes of every buffer made (free or in use).
struct StagingPool {
    free: Vec<PinnedBuffer>,
    made: usize,
}

static STAGING: Mutex<StagingPool> = Mutex::new(StagingPool {
    free: Vec::new(),
    made: 0,
});

impl Staging {
    /// `len` bytes of staging for a request on device `ordinal`, `None` where the pool's limit
    /// leaves none (a buffer of the pool is reused where one is large enough).
    pub(super) fn take(len: usize, ordinal: i32) -> Result<Option<Staging>> {
        let size = len.max(STAGING_MIN).checked_next_power_of_two();
        let Some(size) = size.filter(|s| *s <= STAGING_MAX) else {
            return Ok(None);
        };
        let mut pool = lock(&STAGING);
        let fit = (pool.free.iter().enumerate())
            .filter(|(_, b)| b.len() >= size)
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        if let Some(i) = fit {
            let buf = pool.free.swap_remove(i);
            return Ok(Some(Staging {
                buf: Some(buf),
                len,
            }));
        }
        if pool.made + size > STAGING_MAX {
            return Ok(None);
        }
        let buf = PinnedBuffer::new(size, cuda::primary_context(ordinal)?)?;
        pool.made += size;
        Ok(Some(Staging {
            buf: Some(buf),
            len,
        }))
    }

    pub(super) fn ptr(&self) -> *mut u8 {
        self.buf
            .as_ref()
            .map_or(std::ptr::null_mut(), PinnedBuffer::as_ptr)
    }

    /// `req` on this staging (host memory laid out as the request's buffer).
    pub(super) fn request(&self, req: &Request) -> Request {
        let host = Buffer::Host {
            ptr: self.ptr(),
            len: self.len,
        };
        Request {
            buffer: host,
            pointer_info: None,
            after: None,
            ..req.clone()
        }
    }
}
