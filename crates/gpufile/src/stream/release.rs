//! What lets a stream's later work go once a stream-ordered request's host part has ended: a
//! flag the stream waits on (`cuStreamWaitValue32`), or a gate a blocking host function waits on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::cuda::{self, Context, PinnedBuffer};
use crate::error::Result;
use crate::future::lock;

/// What lets the stream's later work go.
pub(super) enum Release {
    Flag(Flag),
    Gate(Arc<Gate>),
    /// Nothing waits (a staged write).
    None,
}

impl Release {
    pub(super) fn signal(self) {
        match self {
            Release::Flag(f) => f.set(),
            Release::Gate(g) => g.open(),
            Release::None => {}
        }
    }
}

/// Where a blocking host function waits for the request's end.
#[derive(Default)]
pub(super) struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    pub(super) fn open(&self) {
        *lock(&self.open) = true;
        self.cv.notify_all();
    }

    pub(super) fn wait(&self) {
        let mut open = lock(&self.open);
        while !*open {
            open = self.cv.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One 32-bit flag a stream waits on. Its value only grows: each use waits for one more than
/// the last, so a wait queued by an earlier use (its stream perhaps not there yet) stays
/// satisfied when the flag is reused (`CU_STREAM_WAIT_VALUE_GEQ` compares cyclically).
pub(super) struct Flag {
    host: usize,
    pub(super) dev: u64,
    slot: (usize, usize),
    pub(super) target: u32,
}

/// Flags per pinned page.
const FLAGS_PER_PAGE: usize = 4096 / std::mem::size_of::<u32>();

/// Pinned, device-mapped pages of flags (never freed: a stream may still wait on a flag long
/// after its request ended), and the flags free now with their last value.
struct FlagPages {
    pages: Vec<(PinnedBuffer, u64)>,
    free: Vec<((usize, usize), u32)>,
}

static FLAGS: Mutex<FlagPages> = Mutex::new(FlagPages {
    pages: Vec::new(),
    free: Vec::new(),
});

impl Flag {
    /// A free flag (a new page under `ctx`'s device's primary context when none is free).
    pub(super) fn take(ctx: Context) -> Result<Flag> {
        let mut flags = lock(&FLAGS);
        if flags.free.is_empty() {
            let primary = cuda::primary_context(cuda::context_device(ctx)?)?;
            let (page, dev) = PinnedBuffer::new_mapped(FLAGS_PER_PAGE * 4, primary)?;
            // SAFETY: a fresh allocation of FLAGS_PER_PAGE u32s, written by nobody yet.
            unsafe { std::ptr::write_bytes(page.as_ptr(), 0, FLAGS_PER_PAGE * 4) };
            let p = flags.pages.len();
            flags.pages.push((page, dev));
            flags
                .free
                .extend((0..FLAGS_PER_PAGE).rev().map(|i| ((p, i), 0)));
        }
        let ((p, i), last) = flags.free.pop().expect("a page was just added");
        let (page, dev) = &flags.pages[p];
        Ok(Flag {
            host: page.as_ptr() as usize + i * 4,
            dev: dev + (i * 4) as u64,
            slot: (p, i),
            target: last.wrapping_add(1),
        })
    }

    /// Sets the flag (the stream's wait is over) and frees it for the next use.
    pub(super) fn set(self) {
        // SAFETY: the flag's 4 aligned bytes in a page that is never freed; the device only
        // reads them.
        let cell = unsafe { &*(self.host as *const AtomicU32) };
        cell.store(self.target, Ordering::Release);
        lock(&FLAGS).free.push((self.slot, self.target));
    }
}
