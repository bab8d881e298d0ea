//! A local file as a [`Source`] and a [`Sink`]: `pread`/`pwrite` on the buffered descriptor, or
//! on a second `O_DIRECT` descriptor for aligned ranges when the request asks for direct I/O.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Op, Result};
use crate::pagecache::{self, FileMapping};
use crate::posix;
use crate::source::{Call, Sink, Source};

/// O_DIRECT needs file offsets, lengths and memory aligned to the logical block; 4 KiB covers
/// every common device.
pub const DIRECT_ALIGN: usize = 4096;

/// An open local file.
#[derive(Debug)]
pub struct LocalFile {
    file: File,
    path: PathBuf,
    readable: bool,
    writable: bool,
    /// A second descriptor with O_DIRECT, opened on first need (None: the file system refuses).
    direct: OnceLock<Option<File>>,
    /// A read-only mapping of the file, never touched, only asked by `mincore` which pages are
    /// in the page cache (made on first need; None where the file cannot be mapped).
    residency: OnceLock<Option<FileMapping>>,
}

impl LocalFile {
    /// Wraps an open file; `readable`/`writable` are the modes the direct descriptor gets.
    pub fn new(file: File, path: PathBuf, readable: bool, writable: bool) -> Self {
        LocalFile {
            file,
            path,
            readable,
            writable,
            direct: OnceLock::new(),
            residency: OnceLock::new(),
        }
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The buffered descriptor.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The O_DIRECT descriptor, opened once; `None` where the file system refuses O_DIRECT.
    pub fn direct_fd(&self) -> Option<RawFd> {
        self.direct
            .get_or_init(|| {
                OpenOptions::new()
                    .read(self.readable)
                    .write(self.writable)
                    .custom_flags(libc::O_DIRECT)
                    .open(&self.path)
                    .ok()
            })
            .as_ref()
            .map(AsRawFd::as_raw_fd)
    }

    /// The descriptor for `len` bytes at `offset` from/to memory at `ptr`: the O_DIRECT one when
    /// everything is aligned and the call asks for direct I/O (always, or where no page of the
    /// range is cached), else the buffered one.
    fn pick(&self, call: &Call<'_>, ptr: *const u8, len: usize, offset: u64) -> RawFd {
        let aligned = (offset as usize | len | ptr as usize) % DIRECT_ALIGN == 0;
        let direct =
            aligned && (call.direct || (call.direct_uncached && self.uncached(offset, len)));
        match direct {
            true => self.direct_fd().unwrap_or_else(|| self.fd()),
            false => self.fd(),
        }
    }

    /// Whether no page of the range is in the page cache (false where that cannot be known).
    pub fn uncached(&self, offset: u64, len: usize) -> bool {
        let map = self.residency.get_or_init(|| {
            let size = usize::try_from(self.current_size().unwrap_or(0)).ok()?;
            (size > 0).then(|| FileMapping::new(self.fd(), 0, size).ok())?
        });
        let Some(map) = map else {
            return false;
        };
        let page = pagecache::page_size() as usize;
        let Ok(start) = usize::try_from(offset) else {
            return false;
        };
        let start = start / page * page;
        // A range past the mapping counts as cached: it is then read through the cache.
        match start.checked_add(len) {
            Some(end) if end <= map.len() => map.none_resident(start, end - start),
            _ => false,
        }
    }

    /// The file's size now.
    pub fn current_size(&self) -> Result<u64> {
        let meta = self.file.metadata();
        meta.map(|m| m.len())
            .map_err(|e| Error::os(Op::Stat, &self.path, 0, 0, e))
    }
}

impl Source for LocalFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn size(&self) -> Result<u64> {
        self.current_size()
    }

    fn read_at(&self, dst: &mut [u8], offset: u64, call: Call<'_>) -> Result<()> {
        let fd = self.pick(&call, dst.as_ptr(), dst.len(), offset);
        // SAFETY: `dst` is an exclusively borrowed slice of `dst.len()` bytes.
        unsafe {
            posix::pread_all(
                fd,
                &self.path,
                dst.as_mut_ptr(),
                dst.len(),
                offset,
                call.progress,
            )
        }
        .map(drop)
    }
}

impl Sink for LocalFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn write_at(&self, src: &[u8], offset: u64, call: Call<'_>) -> Result<()> {
        let fd = self.pick(&call, src.as_ptr(), src.len(), offset);
        // SAFETY: `src` is a borrowed slice of `src.len()` bytes, only read.
        unsafe {
            posix::pwrite_all(
                fd,
                &self.path,
                src.as_ptr(),
                src.len(),
                offset,
                call.progress,
            )
        }
        .map(drop)
    }
}
