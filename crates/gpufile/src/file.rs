//! [`FileHandle`]: an open file and the requests made on it.
//!
//! How to use:
//! 1. [`FileHandle::open`] with KvikIO's flags (`"r"`, `"r+"`, `"w"`, `"w+"`).
//! 2. [`FileHandle::read`] / [`FileHandle::write`] for slices (blocking), or the `unsafe`
//!    [`FileHandle::pread_host`] / [`FileHandle::pwrite_host`] for raw memory, which return an
//!    [`IoFuture`].
//! 3. Requests are split into `task_size` tasks and run on the process pool of `num_threads`
//!    workers. Tasks hold the file open: closing (dropping) a handle with requests in flight is
//!    safe, the descriptor closes when the last task ends.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use crate::config::{self, CompatMode};
use crate::cuda::{self, Context, MemoryKind};
use crate::cufile::{self, RegisteredFile};
use crate::device;
use crate::error::{Error, Op, Result};
use crate::observe;
use crate::plan::{self, Backend, IoPath, Memory};
use crate::pool::{self, Completion, IoFuture};
use crate::posix;

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

    fn options(self) -> OpenOptions {
        let mut o = OpenOptions::new();
        match self {
            OpenMode::Read => o.read(true),
            OpenMode::ReadWrite => o.read(true).write(true),
            OpenMode::Write => o.write(true).create(true).truncate(true),
            OpenMode::WriteRead => o.read(true).write(true).create(true).truncate(true),
        };
        o.mode(0o644);
        o
    }
}

impl FromStr for OpenMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "r" => Ok(OpenMode::Read),
            "r+" => Ok(OpenMode::ReadWrite),
            "w" => Ok(OpenMode::Write),
            "w+" => Ok(OpenMode::WriteRead),
            _ => Err(Error::InvalidArgument(format!(
                "invalid flags {s:?}: expected \"r\", \"r+\", \"w\" or \"w+\""
            ))),
        }
    }
}

struct Inner {
    /// The cuFile registration, made on first need. First field: dropped (deregistered) before
    /// the descriptors close.
    cufile: OnceLock<Result<Arc<RegisteredFile>>>,
    file: File,
    path: PathBuf,
    mode: OpenMode,
    /// A second descriptor with O_DIRECT, opened on first need (None: the file system refuses).
    direct: OnceLock<Option<File>>,
}

impl Inner {
    fn direct_fd(&self) -> Option<RawFd> {
        self.direct
            .get_or_init(|| {
                OpenOptions::new()
                    .read(self.mode.readable())
                    .write(self.mode.writable())
                    .custom_flags(libc::O_DIRECT)
                    .open(&self.path)
                    .ok()
            })
            .as_ref()
            .map(AsRawFd::as_raw_fd)
    }
}

/// An open file. Cheap to clone; clones share the descriptor.
#[derive(Clone)]
pub struct FileHandle {
    inner: Arc<Inner>,
}

#[derive(Clone, Copy)]
enum Direction {
    Read,
    Write,
}

/// The memory a request moves bytes into or out of.
#[derive(Clone, Copy)]
enum Target {
    Host(SendPtr),
    Device {
        addr: u64,
        /// Start of the allocation holding `addr` (cuFile addresses buffers by base + offset).
        base: u64,
        ctx: Context,
        device: i32,
    },
}

/// A raw pointer that crosses to a worker thread. The request's caller keeps the memory valid
/// (the `# Safety` contract of `pread_host`/`pwrite_host`).
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: the pointer is only dereferenced by the one task that owns its disjoint range, while the
// caller guarantees the memory outlives the request.
unsafe impl Send for SendPtr {}
impl SendPtr {
    // A method (not `.0`) so that closures capture the whole `SendPtr`, not the raw field.
    fn at(self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

impl FileHandle {
    /// Opens `path` with KvikIO's `flags`. A directory is [`Error::Os`] with `EISDIR`, as in
    /// Python's `open`.
    pub fn open(path: impl AsRef<Path>, flags: &str) -> Result<Self> {
        let path = path.as_ref();
        let mode: OpenMode = flags.parse()?;
        let file = mode
            .options()
            .open(path)
            .map_err(|e| Error::os(Op::Open, path, 0, 0, e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::os(Op::Stat, path, 0, 0, e))?;
        if meta.is_dir() {
            let e = std::io::Error::from_raw_os_error(libc::EISDIR);
            return Err(Error::os(Op::Open, path, 0, 0, e));
        }
        let (path, direct, cufile) = (path.to_owned(), OnceLock::new(), OnceLock::new());
        let inner = Inner {
            file,
            path,
            mode,
            direct,
            cufile,
        };
        Ok(FileHandle {
            inner: Arc::new(inner),
        })
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The flags it was opened with.
    pub fn mode(&self) -> OpenMode {
        self.inner.mode
    }

    /// The file descriptor.
    pub fn fd(&self) -> RawFd {
        self.inner.file.as_raw_fd()
    }

    /// The descriptor's status flags (`fcntl(F_GETFL)`), as KvikIO's `open_flags()`.
    pub fn open_flags(&self) -> Result<i32> {
        // SAFETY: F_GETFL on a descriptor this handle owns; no memory is passed.
        let flags = unsafe { libc::fcntl(self.fd(), libc::F_GETFL) };
        if flags < 0 {
            return Err(Error::os(
                Op::Stat,
                self.path(),
                0,
                0,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(flags)
    }

    /// The file's current size in bytes.
    pub fn size(&self) -> Result<u64> {
        let meta = self.inner.file.metadata();
        meta.map(|m| m.len())
            .map_err(|e| Error::os(Op::Stat, self.path(), 0, 0, e))
    }

    /// Whether the file system accepts `O_DIRECT` for this file.
    pub fn is_direct_io_supported(&self) -> bool {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(self.path())
            .is_ok()
    }

    /// The path a request of `len` bytes into or out of `memory` takes under the current
    /// settings, and why (an error where compat_mode OFF cannot be honoured).
    pub fn io_path(&self, memory: Memory, len: usize) -> Result<IoPath> {
        let s = config::current()?;
        plan::choose_path(memory, len, plan::Policy::from(&s), cufile::availability)
    }

    /// Reads `buf.len()` bytes at `file_offset`; blocks until done.
    pub fn read(
        &self,
        buf: &mut [u8],
        file_offset: u64,
        task_size: Option<usize>,
    ) -> Result<usize> {
        // SAFETY: the slice is valid and exclusively borrowed until `wait` returns.
        unsafe { self.pread_host(buf.as_mut_ptr(), buf.len(), file_offset, task_size) }?.wait()
    }

    /// Writes `buf` at `file_offset`; blocks until done.
    pub fn write(&self, buf: &[u8], file_offset: u64, task_size: Option<usize>) -> Result<usize> {
        // SAFETY: the slice is valid and borrowed until `wait` returns; it is only read.
        unsafe { self.pwrite_host(buf.as_ptr(), buf.len(), file_offset, task_size) }?.wait()
    }

    /// Starts reading `len` bytes at `file_offset` into host memory at `ptr`.
    ///
    /// Argument errors (closed range, reading past the end of the file, a write-only handle) are
    /// returned before any byte moves, so the destination is untouched.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes until the returned future is done (waited on
    /// or seen done), and nothing else may access that memory meanwhile.
    pub unsafe fn pread_host(
        &self,
        ptr: *mut u8,
        len: usize,
        file_offset: u64,
        task_size: Option<usize>,
    ) -> Result<IoFuture> {
        self.submit(
            Direction::Read,
            Target::Host(SendPtr(ptr)),
            len,
            file_offset,
            task_size,
        )
    }

    /// Starts reading `len` bytes at `file_offset` into GPU memory at `addr` (device or managed;
    /// a pinned host address takes the host path). The range must lie inside one allocation.
    /// Loads the CUDA driver on first use.
    ///
    /// # Safety
    /// The allocation must stay valid until the returned future is done, and nothing else may
    /// access the range meanwhile.
    pub unsafe fn pread_device(
        &self,
        addr: u64,
        len: usize,
        file_offset: u64,
        task_size: Option<usize>,
    ) -> Result<IoFuture> {
        let target = self.device_target(addr, len)?;
        self.submit(Direction::Read, target, len, file_offset, task_size)
    }

    /// Starts writing `len` bytes of GPU memory at `addr` to the file at `file_offset`.
    ///
    /// # Safety
    /// The allocation must stay valid until the returned future is done, and not be written
    /// meanwhile.
    pub unsafe fn pwrite_device(
        &self,
        addr: u64,
        len: usize,
        file_offset: u64,
        task_size: Option<usize>,
    ) -> Result<IoFuture> {
        let target = self.device_target(addr, len)?;
        self.submit(Direction::Write, target, len, file_offset, task_size)
    }

    /// Reads with one call and no split (KvikIO's `raw_read`): one task of `len` bytes.
    ///
    /// # Safety
    /// As for [`FileHandle::pread_device`].
    pub unsafe fn raw_read_device(&self, addr: u64, len: usize, file_offset: u64) -> Result<usize> {
        let target = self.device_target(addr, len)?;
        self.submit(Direction::Read, target, len, file_offset, Some(len.max(1)))?
            .wait()
    }

    /// Writes with one call and no split (KvikIO's `raw_write`).
    ///
    /// # Safety
    /// As for [`FileHandle::pwrite_device`].
    pub unsafe fn raw_write_device(
        &self,
        addr: u64,
        len: usize,
        file_offset: u64,
    ) -> Result<usize> {
        let target = self.device_target(addr, len)?;
        self.submit(Direction::Write, target, len, file_offset, Some(len.max(1)))?
            .wait()
    }

    fn device_target(&self, addr: u64, len: usize) -> Result<Target> {
        let info = cuda::classify(addr)?;
        match info.kind {
            MemoryKind::Host => Err(Error::InvalidArgument(format!(
                "address {addr:#x} is not GPU memory CUDA knows of"
            ))),
            MemoryKind::PinnedHost => Ok(Target::Host(SendPtr(addr as *mut u8))),
            MemoryKind::Device | MemoryKind::Managed => {
                let end = info.base.saturating_add(info.size as u64);
                if addr.checked_add(len as u64).is_none_or(|e| e > end) {
                    return Err(Error::InvalidArgument(format!(
                        "{len} bytes at {addr:#x} run past the end of their allocation \
                         ({} bytes at {:#x})",
                        info.size, info.base
                    )));
                }
                let ordinal = info.device.unwrap_or(0);
                let ctx = match info.context {
                    Some(c) => c,
                    None => cuda::primary_context(ordinal)?,
                };
                Ok(Target::Device {
                    addr,
                    base: info.base,
                    ctx,
                    device: ordinal,
                })
            }
        }
    }

    /// Starts writing `len` bytes of host memory at `ptr` to `file_offset`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes until the returned future is done, and not
    /// written meanwhile.
    pub unsafe fn pwrite_host(
        &self,
        ptr: *const u8,
        len: usize,
        file_offset: u64,
        task_size: Option<usize>,
    ) -> Result<IoFuture> {
        let target = Target::Host(SendPtr(ptr.cast_mut()));
        self.submit(Direction::Write, target, len, file_offset, task_size)
    }

    fn check(&self, dir: Direction, len: usize, file_offset: u64) -> Result<()> {
        let end = file_offset
            .checked_add(len as u64)
            .filter(|e| *e <= i64::MAX as u64);
        let Some(end) = end else {
            return Err(Error::InvalidArgument(format!(
                "file_offset {file_offset} + size {len} is past the largest file offset"
            )));
        };
        let (path, mode) = (self.path().to_owned(), self.mode().as_str().to_owned());
        match dir {
            Direction::Read if !self.mode().readable() => {
                Err(Error::NotReadable { path, flags: mode })
            }
            Direction::Write if !self.mode().writable() => {
                Err(Error::NotWritable { path, flags: mode })
            }
            Direction::Read => {
                let meta = self
                    .inner
                    .file
                    .metadata()
                    .map_err(|e| Error::os(Op::Stat, &path, 0, 0, e));
                let meta = meta?;
                if meta.is_file() && end > meta.len() && len > 0 {
                    return Err(Error::UnexpectedEof {
                        path,
                        offset: file_offset,
                        len,
                        file_size: meta.len(),
                    });
                }
                Ok(())
            }
            Direction::Write => Ok(()),
        }
    }

    fn submit(
        &self,
        dir: Direction,
        target: Target,
        len: usize,
        file_offset: u64,
        task_size: Option<usize>,
    ) -> Result<IoFuture> {
        let settings = config::current()?;
        let task_size = task_size.unwrap_or(settings.task_size);
        if task_size == 0 {
            return Err(Error::InvalidArgument(
                "task_size must be at least 1 byte".into(),
            ));
        }
        self.check(dir, len, file_offset)?;
        let (path, registered) = self.decide(&target, len, &settings)?;
        if len == 0 {
            return Ok(IoFuture::ready(Ok(0)));
        }
        let direct = match dir {
            Direction::Read => settings.auto_direct_io_read,
            Direction::Write => settings.auto_direct_io_write,
        };
        let bounce = settings.bounce_buffer_size;
        let tasks: Vec<plan::Task> = plan::split(file_offset, len, task_size).collect();
        let pool = pool::pool(settings.num_threads)?;
        // Counted in flight from here: every task below finishes it, whatever happens.
        let completion = Completion::new(tasks.len(), path.backend);
        for task in tasks {
            let inner = Arc::clone(&self.inner);
            let c = Arc::clone(&completion);
            let registered = registered.clone();
            pool.submit(Box::new(move || {
                if c.failed() {
                    return c.finish_task(Ok(0));
                }
                let (fd, path) = (inner.file.as_raw_fd(), inner.path.as_path());
                let (off, len, progress) = (task.file_offset, task.len, c.progress());
                let r = match (target, registered) {
                    (Target::Host(ptr), _) => {
                        let p = ptr.at(task.buf_offset);
                        // SAFETY: each task owns the disjoint range [buf_offset, +len) of the
                        // caller's buffer, valid until the future completes (`pread_host`).
                        unsafe {
                            match dir {
                                Direction::Read => {
                                    posix::pread_all(fd, path, p, len, off, progress)
                                }
                                Direction::Write => {
                                    posix::pwrite_all(fd, path, p, len, off, progress)
                                }
                            }
                        }
                    }
                    (
                        Target::Device {
                            addr, base, ctx, ..
                        },
                        Some(reg),
                    ) => {
                        let buf_offset = addr - base + task.buf_offset as u64;
                        let (is_read, path) = (matches!(dir, Direction::Read), path);
                        cufile_task(
                            &reg, is_read, ctx, base, buf_offset, len, off, path, progress,
                        )
                    }
                    (
                        Target::Device {
                            addr,
                            ctx,
                            device: ordinal,
                            ..
                        },
                        None,
                    ) => {
                        let fds = device::Fds {
                            buffered: fd,
                            direct: if direct { inner.direct_fd() } else { None },
                            path,
                        };
                        let dev = addr + task.buf_offset as u64;
                        let owner = (ctx, ordinal);
                        match dir {
                            Direction::Read if device::mmap_read_enabled() => {
                                device::read_to_device_mmap(&fds, dev, len, off, owner, progress)
                            }
                            Direction::Read => {
                                match device::read_to_device(&fds, dev, len, off, owner, bounce, &c)
                                {
                                    Some(r) => r,
                                    None => return, // finished by the worker later
                                }
                            }
                            Direction::Write => device::write_from_device(
                                &fds, dev, len, off, owner, bounce, progress,
                            ),
                        }
                    }
                };
                c.finish_task(r);
            }));
        }
        Ok(IoFuture::pending(completion))
    }

    /// The path of a request and, for cuFile, the registered handle. A cuFile registration that
    /// fails is an error under OFF and `require_gds`, and a logged fallback under AUTO.
    fn decide(
        &self,
        target: &Target,
        len: usize,
        settings: &config::Settings,
    ) -> Result<(IoPath, Option<Arc<RegisteredFile>>)> {
        let memory = match target {
            Target::Host(_) => Memory::Host,
            Target::Device { .. } => Memory::Device,
        };
        let policy = plan::Policy::from(settings);
        let path = plan::choose_path(memory, len, policy, cufile::availability)?;
        if path.backend != Backend::Cufile {
            if let plan::Reason::NotAccelerated(_) | plan::Reason::CufileUnavailable(_) =
                path.reason
            {
                observe::notice(format!(
                    "compat_mode AUTO: device I/O uses gpufile's POSIX path ({})",
                    path.reason
                ));
            }
            return Ok((path, None));
        }
        match self.registered() {
            Ok(reg) => Ok((path, Some(reg))),
            Err(e) if policy.compat_mode == CompatMode::Auto && !policy.require_gds => {
                let reason = plan::Reason::CufileUnavailable(e.to_string());
                observe::notice(format!(
                    "compat_mode AUTO: {} uses gpufile's POSIX path ({reason})",
                    self.path().display()
                ));
                Ok((
                    IoPath {
                        backend: Backend::GpufilePosix,
                        reason,
                    },
                    None,
                ))
            }
            Err(e) => Err(Error::CufileUnavailable {
                reason: format!("compat_mode is {} but {e}", policy.compat_mode),
            }),
        }
    }

    /// Registers the file with cuFile now (as the first cuFile request would), or says why
    /// cuFile refuses it.
    pub fn cufile_registration(&self) -> Result<()> {
        self.registered().map(|_| ())
    }

    /// The file registered with cuFile (O_DIRECT descriptor where the file system takes one),
    /// once per handle.
    fn registered(&self) -> Result<Arc<RegisteredFile>> {
        self.inner
            .cufile
            .get_or_init(|| {
                let fd = self.inner.direct_fd().unwrap_or_else(|| self.fd());
                RegisteredFile::register(fd).map(Arc::new)
            })
            .clone()
    }
}

/// One task through cuFile: `cuFileRead/Write` until the range is done, with the buffer's
/// context current.
#[allow(clippy::too_many_arguments)]
fn cufile_task(
    reg: &RegisteredFile,
    is_read: bool,
    ctx: Context,
    base: u64,
    buf_offset: u64,
    len: usize,
    file_offset: u64,
    path: &Path,
    progress: &std::sync::atomic::AtomicU64,
) -> Result<usize> {
    let _guard = cuda::ContextGuard::push(ctx)?;
    let mut done = 0usize;
    while done < len {
        let (bo, fo, n) = (
            buf_offset + done as u64,
            file_offset + done as u64,
            len - done,
        );
        // SAFETY: the range lies in the caller's device allocation (checked when the request
        // was made), which stays valid until the request completes.
        let ret = unsafe {
            if is_read {
                reg.read(base, bo, n, fo)
            } else {
                reg.write(base, bo, n, fo)
            }
        };
        match ret {
            r if r > 0 => {
                done += r as usize;
                progress.fetch_add(r as u64, std::sync::atomic::Ordering::Relaxed);
            }
            0 if is_read => {
                return Err(Error::UnexpectedEof {
                    path: path.to_owned(),
                    offset: fo,
                    len: n,
                    file_size: fo,
                })
            }
            r => {
                return Err(cufile::io_error(
                    r.min(-1),
                    if is_read { "cuFileRead" } else { "cuFileWrite" },
                ))
            }
        }
    }
    Ok(len)
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle")
            .field("path", &self.inner.path)
            .field("mode", &self.inner.mode)
            .field("fd", &self.fd())
            .finish()
    }
}
