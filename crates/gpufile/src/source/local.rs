//! A local file as a [`Source`] and a [`Sink`]: `pread`/`pwrite` on the buffered descriptor, or
//! on a second `O_DIRECT` descriptor for aligned ranges when the request asks for direct I/O.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Op, Result};
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
    /// asked for and everything is aligned, else the buffered one.
    fn pick(&self, direct: bool, ptr: *const u8, len: usize, offset: u64) -> RawFd {
        let aligned = (offset as usize | len | ptr as usize) % DIRECT_ALIGN == 0;
        match direct && aligned {
            true => self.direct_fd().unwrap_or_else(|| self.fd()),
            false => self.fd(),
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
        let fd = self.pick(call.direct, dst.as_ptr(), dst.len(), offset);
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
        let fd = self.pick(call.direct, src.as_ptr(), src.len(), offset);
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
