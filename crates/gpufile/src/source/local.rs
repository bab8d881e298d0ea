//! A local file as a [`Source`] and a [`Sink`]: `pread`/`pwrite` on the buffered descriptor, or
//! on a second `O_DIRECT` descriptor for aligned ranges when the request asks for direct I/O.
//!
//! Every descriptor refers to the file that was opened, never to whatever its path names now:
//! the `O_DIRECT` one is opened through `/proc/self/fd/N` ([`reopen`]), which follows the open
//! file across a rename over its path, an unlink or a `chdir` (opening the path again would
//! write into the file that replaced it). Without `/proc` there is no `O_DIRECT`, and
//! [`LocalFile::direct_refused`] says why.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::cufile::RegisteredFile;
use crate::error::{Error, Op, Result};
use crate::pagecache::{self, FileMapping};
use crate::posix;
use crate::request::{Range, Ranges};
use crate::source::{IoContext, Sink, Source};
use crate::streamed::{self, STREAMED_MAX, STREAMED_MIN};

pub use crate::plan::DIRECT_ALIGN;

/// Where the process's open descriptors appear as links that open the file itself.
const PROC_FD: &str = "/proc/self/fd";

/// Opens the file that `fd` refers to again, as a new open file description (its own flags and
/// offset) with `read`/`write` access and `flags` added: through `/proc/self/fd/N`, which opens
/// the same inode whatever its path now names. No `O_CREAT`, `O_TRUNC` or `O_APPEND`.
pub(crate) fn reopen(fd: RawFd, read: bool, write: bool, flags: i32) -> std::io::Result<File> {
    OpenOptions::new()
        .read(read)
        .write(write)
        .custom_flags(flags | libc::O_CLOEXEC)
        .open(format!("{PROC_FD}/{fd}"))
}

/// An open local file.
pub struct LocalFile {
    /// The cuFile registration, made on first need. First field: dropped (deregistered) before
    /// the descriptors close.
    cufile: OnceLock<Result<Arc<RegisteredFile>>>,
    file: File,
    path: PathBuf,
    readable: bool,
    writable: bool,
    /// A second descriptor with O_DIRECT, opened on first need, or why there is none.
    direct: OnceLock<std::result::Result<File, Refused>>,
    /// A read-only mapping of the file, never touched, only asked by `mincore` which pages are
    /// in the page cache (made on first need; None where the file cannot be mapped).
    residency: OnceLock<Option<FileMapping>>,
    /// The largest size the file was seen to have (`u64::MAX`: not a regular file, no size to
    /// check against). A read that ends within it needs no `fstat`; one past it looks again.
    size_seen: AtomicU64,
}

/// Why a file has no O_DIRECT descriptor, and whether the user is told ([`LocalFile::notice`]).
#[derive(Debug)]
struct Refused {
    why: String,
    notice: bool,
}

impl Refused {
    /// No `/proc`: one text for every file, which the user is told.
    fn without_proc() -> Self {
        Refused {
            why: format!(
                "{PROC_FD} is missing: O_DIRECT needs a second descriptor of the open file (the \
                 path may name another file by now)"
            ),
            notice: true,
        }
    }

    fn quietly(why: impl Into<String>) -> Self {
        Refused {
            why: why.into(),
            notice: false,
        }
    }
}

impl std::fmt::Debug for LocalFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFile")
            .field("path", &self.path)
            .field("fd", &self.fd())
            .field("readable", &self.readable)
            .field("writable", &self.writable)
            .finish()
    }
}

impl LocalFile {
    /// Wraps an open file; `readable`/`writable` are the modes the direct descriptor gets.
    pub fn new(file: File, path: PathBuf, readable: bool, writable: bool) -> Self {
        LocalFile {
            cufile: OnceLock::new(),
            file,
            path,
            readable,
            writable,
            direct: OnceLock::new(),
            residency: OnceLock::new(),
            size_seen: AtomicU64::new(0),
        }
    }

    /// Records the file's status as it was opened (a regular file's size; another kind has
    /// none to check reads against), so that the first reads need no `fstat`.
    pub fn opened(self, meta: &std::fs::Metadata) -> Self {
        let seen = if meta.is_file() { meta.len() } else { u64::MAX };
        self.size_seen.store(seen, Ordering::Relaxed);
        self
    }

    /// KvikIO's flags the access modes correspond to, as errors name them.
    fn flags(&self) -> &'static str {
        match (self.readable, self.writable) {
            (true, true) => "r+",
            (true, false) => "r",
            _ => "w",
        }
    }

    /// The file registered with cuFile (its O_DIRECT descriptor where the file system takes
    /// one), once per open file; or why cuFile refuses it.
    pub fn registered(&self) -> Result<Arc<RegisteredFile>> {
        self.cufile
            .get_or_init(|| {
                let fd = self.direct_fd().unwrap_or_else(|| self.fd());
                RegisteredFile::register(fd).map(Arc::new)
            })
            .clone()
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

    /// The O_DIRECT descriptor of the open file, opened once; `None` where the file system
    /// refuses O_DIRECT or `/proc` is missing ([`LocalFile::direct_refused`] says which).
    pub fn direct_fd(&self) -> Option<RawFd> {
        self.direct_file().ok().map(AsRawFd::as_raw_fd)
    }

    /// Why the file has no O_DIRECT descriptor (`None`: it has one).
    pub fn direct_refused(&self) -> Option<&str> {
        self.direct_file().err().map(|r| r.why.as_str())
    }

    /// What the file has to tell the user, as a notice's kind and text: that it has no direct
    /// I/O for want of `/proc` (one text for every file, so said once per process). Asked, never
    /// opened here. The file says nothing itself (sources sit below `crate::observe`): whoever
    /// asked it for its `O_DIRECT` descriptor forwards this (`crate::observe::file_notice`).
    pub(crate) fn notice(&self) -> Option<(&'static str, String)> {
        match self.direct.get() {
            Some(Err(Refused { why, notice: true })) => {
                Some(("no-direct-io", format!("no direct I/O: {why}")))
            }
            _ => None,
        }
    }

    /// Makes the file as it is where `/proc` is missing: no `O_DIRECT` descriptor, and the
    /// notice that says why (the tests cannot take `/proc` away).
    #[cfg(test)]
    pub(crate) fn refuse_direct_as_without_proc(&self) {
        let _ = self.direct.set(Err(Refused::without_proc()));
    }

    fn direct_file(&self) -> std::result::Result<&File, &Refused> {
        self.direct
            .get_or_init(|| {
                reopen(self.fd(), self.readable, self.writable, libc::O_DIRECT).map_err(|e| match e
                    .raw_os_error()
                {
                    Some(libc::EINVAL) => Refused::quietly("the file system refuses O_DIRECT"),
                    _ if !Path::new(PROC_FD).is_dir() => Refused::without_proc(),
                    _ => Refused::quietly(format!("O_DIRECT open of the file failed: {e}")),
                })
            })
            .as_ref()
    }

    /// The descriptor for `len` bytes at `offset` from/to memory at `ptr`: the O_DIRECT one when
    /// everything is aligned and the call asks for direct I/O (always, or where no page of the
    /// range is cached), else the buffered one.
    pub(crate) fn pick(
        &self,
        call: &IoContext<'_>,
        ptr: *const u8,
        len: usize,
        offset: u64,
    ) -> RawFd {
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

    fn described(&self) -> Option<&str> {
        self.path.to_str()
    }

    fn size(&self) -> Result<u64> {
        self.current_size()
    }

    /// Refuses a file not open for reading, and ranges past its end.
    ///
    /// A read that ends within the largest size seen so far needs no `fstat` (the common case:
    /// one per request is measurable on small random reads); one that ends past it looks at the
    /// file again, so a file that grew is read and one that is too short is refused before any
    /// byte moves. A file that shrank after it was seen fails in the read itself, with the same
    /// [`Error::UnexpectedEof`] (as it would if it shrank between an `fstat` and the read).
    fn check(&self, ranges: &Ranges) -> Result<()> {
        if !self.readable {
            return Err(Error::NotReadable {
                path: self.path.clone(),
                flags: self.flags().to_owned(),
            });
        }
        let Some(end) = ranges.file_end() else {
            return Ok(());
        };
        if end <= self.size_seen.load(Ordering::Relaxed) {
            return Ok(());
        }
        let meta = self.file.metadata();
        let meta = meta.map_err(|e| Error::os(Op::Stat, &self.path, 0, 0, e))?;
        if !meta.is_file() {
            return Ok(());
        }
        self.size_seen.fetch_max(meta.len(), Ordering::Relaxed);
        if let Some(last) = ranges.last_in_file().filter(|_| end > meta.len()) {
            return Err(Error::UnexpectedEof {
                path: self.path.clone(),
                offset: last.file_offset,
                len: last.len,
                file_size: meta.len(),
            });
        }
        Ok(())
    }

    fn local_file(self: Arc<Self>) -> Option<Arc<LocalFile>> {
        Some(self)
    }

    fn read_at(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()> {
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

    fn read_for_device(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        // Small chunks (not tiny ones) read through the cache: stored past the CPU's caches on
        // their way to the GPU ([`crate::streamed`]). Not where the chunk goes direct.
        let fd = self.pick(&call, dst.as_ptr(), dst.len(), offset);
        if !(STREAMED_MIN..=STREAMED_MAX).contains(&dst.len()) || fd != self.fd() {
            return self.read_at(dst, offset, call);
        }
        streamed::read_streamed(dst, |piece, at| {
            // SAFETY: `piece` is an exclusively borrowed slice of `piece.len()` bytes.
            unsafe {
                posix::pread_all(
                    fd,
                    &self.path,
                    piece.as_mut_ptr(),
                    piece.len(),
                    offset + at as u64,
                    call.progress,
                )
            }
            .map(drop)
        })
    }
}

impl Sink for LocalFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn described(&self) -> Option<&str> {
        self.path.to_str()
    }

    /// Refuses a file not open for writing.
    fn check(&self, _ranges: &[Range]) -> Result<()> {
        match self.writable {
            true => Ok(()),
            false => Err(Error::NotWritable {
                path: self.path.clone(),
                flags: self.flags().to_owned(),
            }),
        }
    }

    fn local_file(self: Arc<Self>) -> Option<Arc<LocalFile>> {
        Some(self)
    }

    fn write_at(&self, src: &[u8], offset: u64, call: IoContext<'_>) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::future::StopFlag;
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn hot_file(len: usize) -> (tempfile::NamedTempFile, LocalFile, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 256) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        let file = File::open(f.path()).unwrap();
        let local = LocalFile::new(file, f.path().to_path_buf(), true, false);
        (f, local, data)
    }

    fn read_for_device(f: &LocalFile, len: usize, offset: u64) -> Result<Vec<u8>> {
        let progress = AtomicU64::new(0);
        let call = IoContext {
            progress: &progress,
            direct: false,
            direct_uncached: false,
            stop: &StopFlag::default(),
        };
        let mut out = vec![0u8; len];
        f.read_for_device(&mut out, offset, call)?;
        assert_eq!(progress.load(Ordering::Relaxed), len as u64);
        Ok(out)
    }

    #[test]
    fn chunks_for_a_device_of_every_size_hold_the_files_bytes_counted_once() {
        let (_f, local, data) = hot_file(3 << 20);
        // Below, within (crossing the thread buffer's pieces) and above the streamed sizes.
        for (len, off) in [
            (4096, 0),
            (STREAMED_MIN, 0),
            (700_000, 12_345),
            (STREAMED_MAX, (1 << 20) + 1),
            (2 << 20, 1),
        ] {
            let got = read_for_device(&local, len, off as u64).unwrap();
            assert_eq!(got, data[off..off + len], "{len} at {off}");
        }
    }

    #[test]
    fn a_file_that_shrank_is_an_eof_and_one_that_grew_gives_its_new_bytes() {
        let (f, local, data) = hot_file(1 << 20);
        assert_eq!(read_for_device(&local, 65536, 0).unwrap(), data[..65536]);
        // The new end lies inside a page: the bytes past it are not the file's.
        let page = pagecache::page_size() as usize;
        let size = 24 * page + 1696;
        f.as_file().set_len(size as u64).unwrap();
        let e = read_for_device(&local, 65536, (25 * page - 65536) as u64).unwrap_err();
        assert!(matches!(e, Error::UnexpectedEof { .. }), "{e:?}");
        let got = read_for_device(&local, 65536, (size - 65536) as u64).unwrap();
        assert_eq!(got, data[size - 65536..size]);
        let mut w = f.as_file();
        w.set_len(0).unwrap();
        w.write_all(&vec![9u8; 2 << 20]).unwrap();
        assert!(read_for_device(&local, 1 << 20, 1 << 20)
            .unwrap()
            .iter()
            .all(|&b| b == 9));
    }

    #[test]
    fn truncation_racing_streamed_reads_gives_the_files_bytes_or_an_error() {
        let (f, local, data) = hot_file(8 << 20);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (ok, eof) = std::thread::scope(|s| {
            s.spawn(|| {
                let w = File::options().write(true).open(f.path()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    w.set_len(1 << 20).unwrap();
                    w.write_all_at(&data, 0).unwrap();
                }
            });
            let (mut ok, mut eof) = (0, 0);
            for i in 0..2000u64 {
                let off = (i * 7919 % 7) << 20;
                match read_for_device(&local, 1 << 20, off) {
                    Ok(got) => {
                        assert!(got == data[off as usize..off as usize + (1 << 20)], "{off}");
                        ok += 1;
                    }
                    Err(Error::UnexpectedEof { .. }) => eof += 1,
                    Err(e) => panic!("{e:?}"),
                }
            }
            stop.store(true, Ordering::Relaxed);
            (ok, eof)
        });
        assert!(ok > 0, "{ok} read, {eof} past the end");
    }

    /// A page-aligned host buffer of `len` bytes, all `byte` (O_DIRECT needs aligned memory).
    fn aligned(len: usize, byte: u8) -> (Vec<u8>, usize) {
        let v = vec![byte; len + DIRECT_ALIGN];
        let start = v.as_ptr().align_offset(DIRECT_ALIGN);
        (v, start)
    }

    #[test]
    fn direct_io_after_a_rename_over_the_path_goes_to_the_file_that_was_opened() {
        let dir = tempfile::tempdir().unwrap();
        let (p, other) = (dir.path().join("f.bin"), dir.path().join("other.bin"));
        std::fs::write(&p, vec![1u8; 1 << 20]).unwrap();
        std::fs::write(&other, vec![2u8; 1 << 20]).unwrap();
        let file = File::options().read(true).write(true).open(&p).unwrap();
        let local = LocalFile::new(file, p.clone(), true, true);
        std::fs::rename(&other, &p).unwrap(); // the atomic-replace pattern
        let (progress, stop) = (AtomicU64::new(0), StopFlag::default());
        let call = || IoContext {
            progress: &progress,
            stop: &stop,
            direct: true,
            direct_uncached: false,
        };
        let (mut buf, at) = aligned(64 << 10, 7);
        local
            .write_at(&buf[at..at + (64 << 10)], 0, call())
            .unwrap();
        // Direct where the file system takes it; either way the opened file holds the bytes.
        if let Some(why) = local.direct_refused() {
            eprintln!("no O_DIRECT here ({why}): only the buffered descriptor is checked");
        }
        let opened = std::fs::read(format!("/proc/self/fd/{}", local.fd())).unwrap();
        assert!(opened[..64 << 10].iter().all(|&b| b == 7));
        assert!(opened[64 << 10..].iter().all(|&b| b == 1));
        assert!(
            std::fs::read(&p).unwrap().iter().all(|&b| b == 2),
            "the new file changed"
        );
        buf[at..at + (64 << 10)].fill(0);
        local
            .read_at(&mut buf[at..at + (64 << 10)], 1 << 19, call())
            .unwrap();
        assert!(
            buf[at..at + (64 << 10)].iter().all(|&b| b == 1),
            "read the new file"
        );
    }

    #[test]
    fn a_relative_path_that_names_another_file_now_still_reads_the_opened_file_direct() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.bin");
        std::fs::write(&p, vec![3u8; 1 << 20]).unwrap();
        // As after `open("Cargo.toml")` in the temporary directory and a `chdir`: from the test's
        // directory (the package's) the name is another file (read only, never written).
        let file = File::open(&p).unwrap();
        let local = LocalFile::new(file, PathBuf::from("Cargo.toml"), true, false);
        assert!(Path::new("Cargo.toml").is_file());
        let progress = AtomicU64::new(0);
        let call = IoContext {
            progress: &progress,
            stop: &StopFlag::default(),
            direct: true,
            direct_uncached: false,
        };
        let (mut buf, at) = aligned(4096, 0);
        local.read_at(&mut buf[at..at + 4096], 0, call).unwrap();
        assert!(buf[at..at + 4096].iter().all(|&b| b == 3));
        if local.direct_refused().is_none() {
            assert_ne!(local.direct_fd(), Some(local.fd()));
        }
    }
}
