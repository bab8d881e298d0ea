//! [`FileHandle`]: an open file and the requests made on it.
//!
//! How to use:
//! 1. [`FileHandle::open`] with KvikIO's flags (`"r"`, `"r+"`, `"w"`, `"w+"`).
//! 2. [`FileHandle::read`] / [`FileHandle::write`] for slices (blocking), on the process
//!    [`Engine`]; for any [`Request`] (host or GPU memory, raw addresses), the `unsafe`
//!    [`Engine::submit`] on the handle's [`FileHandle::endpoint`], which returns an
//!    [`crate::IoFuture`].
//! 3. Tasks hold the file open: closing (dropping) a handle with requests in flight is safe, the
//!    descriptor closes when the last task ends.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use crate::config::Settings;
use crate::engine::Engine;
use crate::error::{Error, Op, Result};
use crate::observe;
use crate::plan::IoPath;
use crate::request::{Buffer, Direction, Memory, Request};
use crate::source::reopen;
use crate::source::{Endpoint, LocalFile};

/// How a file is opened (KvikIO's flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// `"r"`: read only; the file must exist.
    Read,
    /// `"r+"`: read and write; the file must exist.
    ReadWrite,
    /// `"w"`: write only; created or truncated.
    Write,
    /// `"w+"`: read and write; created or truncated.
    WriteRead,
}

impl OpenMode {
    /// The flags as the user wrote them.
    pub fn as_str(self) -> &'static str {
        match self {
            OpenMode::Read => "r",
            OpenMode::ReadWrite => "r+",
            OpenMode::Write => "w",
            OpenMode::WriteRead => "w+",
        }
    }

    /// Whether reads are allowed.
    pub fn readable(self) -> bool {
        !matches!(self, OpenMode::Write)
    }

    /// Whether writes are allowed.
    pub fn writable(self) -> bool {
        !matches!(self, OpenMode::Read)
    }

    /// The options of an open with these flags; a file it creates gets `mode` (open(2)'s third
    /// argument, so the umask applies).
    fn options(self, mode: u32) -> OpenOptions {
        let mut o = OpenOptions::new();
        match self {
            OpenMode::Read => o.read(true),
            OpenMode::ReadWrite => o.read(true).write(true),
            OpenMode::Write => o.write(true).create(true).truncate(true),
            OpenMode::WriteRead => o.read(true).write(true).create(true).truncate(true),
        };
        o.mode(mode);
        o
    }
}

/// Parses KvikIO's flags. KvikIO looks at the first character (`r`/`w`) and whether the second
/// is `+`, and ignores the rest, so `"rb"`, `"r+b"` and `"wb"` open as `"r"`, `"r+"` and `"w"`.
/// gpufile accepts those, and reads the rest as Python's `open` does: `b` anywhere is allowed and
/// changes nothing, `+` anywhere means read and write (`"rb+"` is `"r+"`, where KvikIO would
/// silently open it read-only); any other character, or a repeated one, is an error rather than
/// ignored. KvikIO's message fragments are kept ("Unknown file open flag", "Open flag 'a' isn't
/// supported").
impl FromStr for OpenMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = |what: &str| {
            Error::InvalidArgument(format!(
                "invalid flags {s:?}: {what} (expected \"r\", \"r+\", \"w\" or \"w+\", \
                 optionally with \"b\")"
            ))
        };
        let mut chars = s.chars();
        let write = match chars.next() {
            Some('r') => false,
            Some('w') => true,
            Some('a') => return Err(bad("Open flag 'a' isn't supported")),
            _ => return Err(bad("Unknown file open flag")),
        };
        let (mut plus, mut binary) = (false, false);
        for c in chars {
            match c {
                '+' if !plus => plus = true,
                'b' if !binary => binary = true,
                _ => return Err(bad("Unknown file open flag")),
            }
        }
        Ok(match (write, plus) {
            (false, false) => OpenMode::Read,
            (false, true) => OpenMode::ReadWrite,
            (true, false) => OpenMode::Write,
            (true, true) => OpenMode::WriteRead,
        })
    }
}

/// What the clones of a [`FileHandle`] share: the open file and its mode.
struct OpenFile {
    /// The file, its size as last seen and its cuFile registration (see [`LocalFile`]).
    local: Arc<LocalFile>,
    mode: OpenMode,
}

/// An open file. Cheap to clone; clones share the descriptor.
#[derive(Clone)]
pub struct FileHandle {
    inner: Arc<OpenFile>,
}

impl FileHandle {
    /// Opens `path` with KvikIO's `flags`. A directory is [`Error::Os`] with `EISDIR`, as in
    /// Python's `open`; a FIFO or a socket is [`Error::NotSeekable`], refused without waiting
    /// for the FIFO's other end.
    pub fn open(path: impl AsRef<Path>, flags: &str) -> Result<Self> {
        Self::open_with_mode(path, flags, 0o644)
    }

    /// [`FileHandle::open`], a file it creates getting `mode` as open(2) gives it: masked by the
    /// umask, set-id bits as the kernel keeps them; an existing file's mode is left alone (KvikIO's
    /// `FileHandle(path, flags, mode)`). Bits outside the permission and set-id bits (`0o7777`)
    /// are [`Error::InvalidArgument`], before anything is opened.
    pub fn open_with_mode(path: impl AsRef<Path>, flags: &str, mode: u32) -> Result<Self> {
        let path = path.as_ref();
        let flags: OpenMode = flags.parse()?;
        if mode & !0o7777 != 0 {
            return Err(Error::InvalidArgument(format!(
                "mode {mode:#o} has bits outside the permission and set-id bits (0o7777)"
            )));
        }
        let (file, meta) = crate::posix::open_file(&mut flags.options(mode), path)?;
        Ok(Self::with_file(file, meta, path, flags))
    }

    /// A handle on the file that the open descriptor `fd` refers to (a Python file object's,
    /// say), with `fd`'s access mode: reads and writes go to that file, whatever its path names
    /// now, and leave `fd`'s offset alone. `name` is what errors call the file.
    ///
    /// The handle has its own descriptor of the same file, opened through `/proc/self/fd`
    /// without `fd`'s `O_APPEND` or `O_DIRECT` (an appending descriptor would put every
    /// `pwrite` at the end, in the order the tasks end); without `/proc` it is a duplicate of
    /// `fd` sharing its flags, which are left as they are, so it is refused for a descriptor
    /// opened for appending or with `O_DIRECT`.
    pub fn from_fd(fd: BorrowedFd<'_>, name: impl AsRef<Path>) -> Result<Self> {
        let name = name.as_ref();
        let raw = fd.as_raw_fd();
        // SAFETY: F_GETFL on a descriptor the caller keeps open; no memory is passed.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
        if flags < 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::os(Op::Stat, name, 0, 0, e));
        }
        let mode = match flags & libc::O_ACCMODE {
            libc::O_RDONLY => OpenMode::Read,
            libc::O_WRONLY => OpenMode::Write,
            _ => OpenMode::ReadWrite,
        };
        // Non-blocking, as `FileHandle::open`: reopening a FIFO would wait for its other end.
        let (meta, file) = match reopen(raw, mode.readable(), mode.writable(), libc::O_NONBLOCK) {
            Ok(file) => (crate::posix::seekable_blocking(&file, name)?, file),
            Err(_) if flags & (libc::O_APPEND | libc::O_DIRECT) != 0 => {
                let what = if flags & libc::O_APPEND != 0 {
                    "opened for appending"
                } else {
                    "opened with O_DIRECT"
                };
                return Err(Error::InvalidArgument(format!(
                    "{}: a descriptor {what} needs /proc/self/fd to be read or written at \
                     offsets",
                    name.display()
                )));
            }
            // A duplicate shares the caller's file description: its flags stay the caller's.
            Err(_) => {
                let file = fd
                    .try_clone_to_owned()
                    .map(File::from)
                    .map_err(|e| Error::os(Op::Open, name, 0, 0, e))?;
                (crate::posix::seekable(&file, name)?, file)
            }
        };
        Ok(Self::with_file(file, meta, name, mode))
    }

    /// A handle on an open `file` (its metadata `meta`), opened with `mode`'s access; `path`
    /// is what errors call it (a temporary file's final name, say).
    pub(crate) fn from_file(
        file: File,
        meta: std::fs::Metadata,
        path: &Path,
        mode: OpenMode,
    ) -> Self {
        Self::with_file(file, meta, path, mode)
    }

    fn with_file(file: File, meta: std::fs::Metadata, path: &Path, mode: OpenMode) -> Self {
        let local = LocalFile::new(file, path.to_owned(), mode.readable(), mode.writable());
        FileHandle {
            inner: Arc::new(OpenFile {
                local: Arc::new(local.opened(&meta)),
                mode,
            }),
        }
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        self.inner.local.path()
    }

    /// The flags it was opened with.
    pub fn mode(&self) -> OpenMode {
        self.inner.mode
    }

    /// The file descriptor.
    pub fn fd(&self) -> RawFd {
        self.inner.local.fd()
    }

    /// The file as a source and sink of bytes.
    pub fn local(&self) -> Arc<LocalFile> {
        Arc::clone(&self.inner.local)
    }

    /// The descriptor's status flags (`fcntl(F_GETFL)`), as KvikIO's `open_flags()`.
    pub fn open_flags(&self) -> Result<i32> {
        // SAFETY: F_GETFL on a descriptor this handle owns; no memory is passed.
        let flags = unsafe { libc::fcntl(self.fd(), libc::F_GETFL) };
        if flags < 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::os(Op::Stat, self.path(), 0, 0, e));
        }
        Ok(flags)
    }

    /// The file's current size in bytes.
    pub fn size(&self) -> Result<u64> {
        self.inner.local.current_size()
    }

    /// Whether this file has an `O_DIRECT` descriptor (the file system accepts `O_DIRECT` and
    /// `/proc` is there to open the open file again); opens it where it can.
    pub fn is_direct_io_supported(&self) -> bool {
        let supported = self.inner.local.direct_fd().is_some();
        observe::file_notice(&self.inner.local);
        supported
    }

    /// The file side of a request in direction `dir` (what [`Engine::submit`] takes).
    pub fn endpoint(&self, dir: Direction) -> Endpoint {
        match dir {
            Direction::Read => Endpoint::Read(self.local()),
            Direction::Write => Endpoint::Write(self.local()),
        }
    }

    /// The path a request of `len` bytes into or out of `memory` takes under `settings`, and
    /// why (an error where compat_mode OFF cannot be honoured); registers the file with cuFile
    /// where the decision depends on it, as the request would.
    pub fn io_path(&self, memory: Memory, len: usize, settings: &Settings) -> Result<IoPath> {
        Engine::io_path(&self.endpoint(Direction::Read), memory, len, settings)
    }

    /// Reads `buf.len()` bytes at `file_offset`; blocks until done.
    pub fn read(
        &self,
        buf: &mut [u8],
        file_offset: u64,
        task_size: Option<usize>,
    ) -> Result<usize> {
        let req = Request::read(Buffer::host(buf), file_offset).task_size(task_size);
        // SAFETY: the slice is valid and exclusively borrowed until `wait` returns.
        unsafe { self.run(req) }
    }

    /// Writes `buf` at `file_offset`; blocks until done.
    pub fn write(&self, buf: &[u8], file_offset: u64, task_size: Option<usize>) -> Result<usize> {
        let buffer = Buffer::Host {
            ptr: buf.as_ptr().cast_mut(),
            len: buf.len(),
        };
        let req = Request::write(buffer, file_offset).task_size(task_size);
        // SAFETY: the slice is valid and borrowed until `wait` returns; a write only reads it.
        unsafe { self.run(req) }
    }

    /// Runs `req` on the process engine under its default settings and waits for it.
    ///
    /// # Safety
    /// As for [`Engine::submit`].
    unsafe fn run(&self, req: Request) -> Result<usize> {
        let engine = Engine::global()?;
        let settings = engine.shared_settings();
        let endpoint = self.endpoint(req.direction);
        // SAFETY: the caller's contract; the future is waited for here.
        unsafe { engine.submit(&endpoint, req.caller_waits(true), &settings) }?.wait()
    }

    /// Registers the file with cuFile now (as the first cuFile request would), or says why
    /// cuFile refuses it.
    pub fn cufile_registration(&self) -> Result<()> {
        let registered = self.inner.local.registered().map(|_| ());
        observe::file_notice(&self.inner.local); // registration may have opened O_DIRECT
        registered
    }
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle")
            .field("path", &self.path())
            .field("mode", &self.inner.mode)
            .field("fd", &self.fd())
            .finish()
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;
    use std::io::Write;

    fn read(h: &FileHandle, buf: &mut [u8], offset: u64) -> Result<usize> {
        h.read(buf, offset, None)
    }

    #[test]
    fn reads_see_a_file_that_grew_and_refuse_one_too_short_before_any_byte_moves() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&[1u8; 100]).unwrap();
        file.flush().unwrap();
        let h = FileHandle::open(file.path(), "r").unwrap();
        let mut buf = [9u8; 50];
        assert_eq!(read(&h, &mut buf, 50).unwrap(), 50);
        // Past the end: refused with the size now, the buffer untouched.
        let mut buf = [9u8; 50];
        let e = read(&h, &mut buf, 60).unwrap_err();
        assert!(
            matches!(
                e,
                Error::UnexpectedEof {
                    offset: 60,
                    len: 50,
                    file_size: 100,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(buf, [9u8; 50]);
        // Grown by someone else since: read.
        file.write_all(&[2u8; 100]).unwrap();
        file.flush().unwrap();
        assert_eq!(read(&h, &mut buf, 120).unwrap(), 50);
        assert_eq!(buf, [2u8; 50]);
    }

    #[test]
    fn a_file_that_shrank_after_it_was_seen_is_still_an_eof_error() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&[1u8; 100]).unwrap();
        file.flush().unwrap();
        let h = FileHandle::open(file.path(), "r").unwrap();
        file.as_file().set_len(40).unwrap();
        let mut buf = [0u8; 50];
        let e = read(&h, &mut buf, 50).unwrap_err();
        assert!(
            matches!(
                e,
                Error::UnexpectedEof {
                    offset: 50,
                    file_size: 40,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::OpenMode;

    #[test]
    fn flags_parse_as_kvikio_and_python_read_them() {
        for (flags, mode) in [
            ("r", OpenMode::Read),
            ("rb", OpenMode::Read),
            ("r+", OpenMode::ReadWrite),
            ("r+b", OpenMode::ReadWrite),
            ("rb+", OpenMode::ReadWrite),
            ("w", OpenMode::Write),
            ("wb", OpenMode::Write),
            ("w+", OpenMode::WriteRead),
            ("w+b", OpenMode::WriteRead),
        ] {
            assert_eq!(flags.parse::<OpenMode>().unwrap(), mode, "{flags}");
        }
        for (flags, fragment) in [
            ("", "Unknown file open flag"),
            ("x", "Unknown file open flag"),
            ("R", "Unknown file open flag"),
            ("rw", "Unknown file open flag"),
            ("r++", "Unknown file open flag"),
            ("rbb", "Unknown file open flag"),
            ("rt", "Unknown file open flag"),
            ("a", "Open flag 'a' isn't supported"),
        ] {
            let e = flags.parse::<OpenMode>().unwrap_err().to_string();
            assert!(e.contains(fragment) && e.contains("flags"), "{flags}: {e}");
        }
    }
}
