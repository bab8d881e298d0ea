//! A read-only memory mapping of a file region as a [`Source`] (KvikIO's `MmapHandle`).
//!
//! How to use:
//! 1. [`MmapSource::open`] maps `[offset, offset + size)` of a file ([`MapOptions`]: KvikIO's
//!    `initial_map_offset` and `initial_map_size`; the size defaults to the rest of the file),
//!    checked against the file's size with KvikIO's messages.
//! 2. [`MmapSource::read_len`] checks a read (KvikIO's rules: `size` `None` reads to the end of
//!    the file; the range must lie in the mapped region) and returns its length.
//! 3. Hand the source to the engine as `Endpoint::Read(Arc<MmapSource>)`
//!    ([`crate::Engine::submit`]): host buffers are filled by the workers, GPU buffers
//!    through the pinned bounce pipeline, overlapped (their chunks stored past the CPU's caches,
//!    as [`crate::streamed`] explains). The `Arc`
//!    keeps the mapping alive until the last request on it ends, so closing a handle with reads
//!    in flight is safe (KvikIO leaves that undefined).
//!
//! The bytes are read with `pread` on the mapped file's descriptor, not copied out of the
//! mapping. The mapping is read-only, so it shows exactly the page cache that `pread` reads, and
//! a file that another process truncates during the read then ends the read short, which is
//! [`Error::UnexpectedEof`]; a copy out of the mapping touches the pages past the new end and
//! gets `SIGBUS`, which kills the process (KvikIO's behaviour), however recently the size was
//! checked. The alternative, a `SIGBUS` handler around the copy, is process-wide state that must
//! chain with other handlers and survive `fork`; gpufile had one for its bounce path and removed
//! it once `pread` into a cache-resident buffer matched the mapping's speed ([`crate::streamed`]).
//! `pread` from the page cache costs one kernel copy, as the copy out of the mapping does (which
//! adds a page fault per page on first touch). The mapping is still made, as KvikIO makes it: a
//! file that cannot be mapped is refused when it opens, and `map_flags` such as `MAP_POPULATE`
//! fault the region in.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;

use crate::error::{Error, Op, Result};
use crate::source::{IoContext, LocalFile, Source};

/// What to map, and how (KvikIO's `MmapHandle` arguments after the path and flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapOptions {
    /// Bytes to map; `None` maps from `offset` to the end of the file. Must not be 0.
    pub size: Option<u64>,
    /// File offset of the region; must be less than the file size.
    pub offset: u64,
    /// Permissions of a file the open creates (KvikIO's `mode`; read-only opens never create).
    pub mode: u32,
    /// `mmap(2)` flags; `None` is `MAP_PRIVATE`. `MAP_FIXED`, `MAP_FIXED_NOREPLACE` and
    /// `MAP_ANONYMOUS` are refused (they would replace memory or map no file).
    pub map_flags: Option<i32>,
}

impl Default for MapOptions {
    fn default() -> Self {
        MapOptions {
            size: None,
            offset: 0,
            mode: 0o644,
            map_flags: None,
        }
    }
}

/// A region mapped read-only with `mmap(2)`, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    addr: NonNull<libc::c_void>,
    len: usize,
}

// SAFETY: the mapping is read-only memory owned by this value; reading it from several threads at
// once is sound, and `munmap` runs only in `Drop`, when no other reference is left.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared access only reads.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` (> 0) bytes of `file` at the page-aligned `offset`, read-only.
    fn new(file: &File, len: usize, offset: u64, flags: i32) -> std::io::Result<Self> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: a null address without MAP_FIXED (refused by `check_map_flags`) makes the kernel
        // pick fresh addresses, so no memory Rust knows of is replaced; the descriptor is open for
        // the duration of the call (the kernel holds its own reference to the file afterwards).
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                flags,
                file.as_raw_fd(),
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let addr =
            NonNull::new(addr).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(Mapping { addr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` are exactly what `mmap` returned; nothing reads the mapping any
        // more (this is its only owner). A failure leaves the mapping in place: nothing to do.
        unsafe { libc::munmap(self.addr.as_ptr(), self.len) };
    }
}

/// A file region mapped read-only: KvikIO's `MmapHandle`, as a [`Source`].
#[derive(Debug)]
pub struct MmapSource {
    /// The mapped file, which the reads `pread` (never with O_DIRECT).
    local: LocalFile,
    /// The file's size when it was mapped (KvikIO checks offsets against it).
    file_size: u64,
    /// KvikIO's `initial_map_offset`.
    region_offset: u64,
    /// KvikIO's `initial_map_size` (0 for an empty file, which maps nothing).
    region_size: u64,
    /// The mapping, from `region_offset` rounded down to a page; `None` for an empty file.
    mapping: Option<Mapping>,
}

/// KvikIO's flags: "r" (and "r+", opened for reading and writing but mapped read-only); a
/// writing flag is refused with KvikIO's words.
fn parse_flags(flags: &str) -> Result<bool> {
    match flags {
        "r" => Ok(false),
        "r+" => Ok(true),
        f if f.starts_with(['w', 'a']) => Err(Error::InvalidArgument(format!(
            "File-backed mmap write is not supported yet (flags {f:?}); open with \"r\""
        ))),
        f => Err(Error::InvalidArgument(format!(
            "Unknown file open flag {f:?}: expected \"r\" or \"r+\""
        ))),
    }
}

/// `MAP_PRIVATE` by default; flags that would replace memory or map no file are refused, and a
/// mapping type is required (the kernel's EINVAL would not say which flag is wrong).
fn check_map_flags(flags: Option<i32>) -> Result<i32> {
    let Some(flags) = flags else {
        return Ok(libc::MAP_PRIVATE);
    };
    for (bit, name) in [
        (libc::MAP_FIXED, "MAP_FIXED"),
        (libc::MAP_FIXED_NOREPLACE, "MAP_FIXED_NOREPLACE"),
        (libc::MAP_ANONYMOUS, "MAP_ANONYMOUS"),
    ] {
        if flags & bit != 0 {
            return Err(Error::InvalidArgument(format!(
                "map_flags {flags:#x} include {name}, which a file mapping cannot use"
            )));
        }
    }
    const MAP_TYPE: i32 = 0x0f;
    match flags & MAP_TYPE {
        libc::MAP_SHARED | libc::MAP_PRIVATE | libc::MAP_SHARED_VALIDATE => Ok(flags),
        _ => Err(Error::InvalidArgument(format!(
            "map_flags {flags:#x} must include exactly one of MAP_SHARED or MAP_PRIVATE"
        ))),
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|n| *n > 0).unwrap_or(4096)
}

impl MmapSource {
    /// Opens `path` with KvikIO's `flags` ("r" or "r+") and maps the region `options` names.
    ///
    /// Errors (KvikIO's messages): an unknown or writing flag, a zero-byte region, bad
    /// `map_flags` → [`Error::InvalidArgument`]; an offset at or past the end of the file, a
    /// region past it → [`Error::OutOfRange`]; a file that does not open or does not map →
    /// [`Error::Os`]; a FIFO or a socket → [`Error::NotSeekable`]. An empty file maps nothing
    /// (KvikIO's behaviour); a region asked for in it is refused (KvikIO accepts it, and every
    /// read then fails).
    pub fn open(path: impl AsRef<Path>, flags: &str, options: MapOptions) -> Result<Self> {
        let path = path.as_ref();
        let write = parse_flags(flags)?;
        let map_flags = check_map_flags(options.map_flags)?;
        if options.mode > 0o7777 {
            return Err(Error::InvalidArgument(format!(
                "mode {:#o} is not a file permission (at most 0o7777)",
                options.mode
            )));
        }
        let mut open = OpenOptions::new();
        open.read(true).write(write).mode(options.mode);
        let (file, meta) = crate::posix::open_file(&mut open, path)?;
        let file_size = meta.len();
        let offset = options.offset;
        let mut source = MmapSource {
            local: LocalFile::new(file, path.to_owned(), true, false),
            file_size,
            region_offset: offset,
            region_size: 0,
            mapping: None,
        };
        let past_end = |size: u64| {
            Error::OutOfRange(format!(
                "Mapped region is past the end of file. initial map offset: {offset}, \
                 initial map size: {size}, file size: {file_size} ({})",
                path.display()
            ))
        };
        if file_size == 0 && offset == 0 {
            return match options.size {
                None | Some(0) => Ok(source),
                Some(size) => Err(past_end(size)),
            };
        }
        if offset >= file_size {
            return Err(Error::OutOfRange(format!(
                "Offset must be less than the file size. initial_map_offset: {offset}, \
                 file size: {file_size} ({})",
                path.display()
            )));
        }
        let size = options.size.unwrap_or(file_size - offset);
        if size == 0 {
            return Err(Error::InvalidArgument(
                "Mapped region should not be zero byte (initial_map_size 0)".into(),
            ));
        }
        if offset.checked_add(size).is_none_or(|end| end > file_size) {
            return Err(past_end(size));
        }
        let page = page_size();
        let map_offset = offset / page * page;
        let delta = offset - map_offset;
        let len = usize::try_from(size + delta).map_err(|_| {
            Error::InvalidArgument(format!("a region of {size} bytes does not fit in memory"))
        })?;
        let mapping = Mapping::new(source.local.file(), len, map_offset, map_flags)
            .map_err(|e| Error::os(Op::Map, path, map_offset, len, e))?;
        source.region_size = size;
        source.mapping = Some(mapping);
        Ok(source)
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        self.local.path()
    }

    /// KvikIO's `initial_map_size`: bytes mapped (0 for an empty file).
    pub fn initial_map_size(&self) -> u64 {
        self.region_size
    }

    /// KvikIO's `initial_map_offset`: file offset of the mapped region.
    pub fn initial_map_offset(&self) -> u64 {
        self.region_offset
    }

    /// The file's size when it was mapped.
    pub fn mapped_file_size(&self) -> u64 {
        self.file_size
    }

    /// The file's size now (`fstat`).
    pub fn current_size(&self) -> Result<u64> {
        self.local.current_size()
    }

    /// The length of a read of `size` bytes (`None`: to the end of the file) at `offset`, with
    /// KvikIO's checks: an offset past the end of the file, or a range outside the mapped region,
    /// is [`Error::OutOfRange`]. A file that shrank below the range since it was mapped is
    /// [`Error::UnexpectedEof`] (KvikIO's process dies of `SIGBUS`).
    pub fn read_len(&self, size: Option<u64>, offset: u64) -> Result<usize> {
        if offset > self.file_size {
            return Err(Error::OutOfRange(format!(
                "Offset is past the end of file. offset: {offset}, file size: {}",
                self.file_size
            )));
        }
        let len = size.unwrap_or(self.file_size - offset);
        let region_end = self.region_offset + self.region_size;
        let end = offset.checked_add(len);
        if offset < self.region_offset || end.is_none_or(|e| e > region_end) {
            return Err(Error::OutOfRange(format!(
                "Read is out of bound. offset: {offset}, actual size to read: {len}, \
                 initial map offset: {}, initial map size: {}",
                self.region_offset, self.region_size
            )));
        }
        let len = usize::try_from(len).map_err(|_| {
            Error::InvalidArgument(format!("a read of {len} bytes does not fit in memory"))
        })?;
        self.check_size(offset, len)?;
        Ok(len)
    }

    /// Fails with [`Error::UnexpectedEof`] where the file is now shorter than `offset + len`.
    fn check_size(&self, offset: u64, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let now = self.current_size()?;
        if offset + len as u64 > now {
            return Err(Error::UnexpectedEof {
                path: self.path().to_owned(),
                offset,
                len,
                file_size: now,
            });
        }
        Ok(())
    }
}

impl Source for MmapSource {
    fn describe(&self) -> String {
        self.path().display().to_string()
    }

    fn described(&self) -> Option<&str> {
        self.path().to_str()
    }

    fn io_backend(&self) -> super::IoBackend {
        super::IoBackend::Mmap
    }

    fn size(&self) -> Result<u64> {
        self.current_size()
    }

    /// Refuses ranges outside the mapped region ([`Error::OutOfRange`], KvikIO's message), with
    /// no `fstat`: [`MmapSource::read_len`] looked at the file's size already, and a file that
    /// shrank since fails in the read with [`Error::UnexpectedEof`].
    fn check(&self, ranges: &crate::request::Ranges) -> Result<()> {
        ranges
            .as_slice()
            .iter()
            .try_for_each(|r| self.in_region(r.file_offset, r.len))
    }

    fn read_at(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        self.copy_out(dst, offset, call, false)
    }

    /// Chunks on their way to a GPU are stored past the CPU's caches (see `crate::streamed`):
    /// the mapping is there either way, so no chunk size pays more for it.
    fn read_for_device(&self, dst: &mut [u8], offset: u64, call: IoContext<'_>) -> Result<()> {
        self.copy_out(dst, offset, call, true)
    }
}

impl MmapSource {
    /// Refuses `len` bytes at `offset` outside the mapped region (none of an empty one).
    fn in_region(&self, offset: u64, len: usize) -> Result<()> {
        let in_region = offset
            .checked_sub(self.region_offset)
            .filter(|rel| rel.saturating_add(len as u64) <= self.region_size);
        if len > 0 && (in_region.is_none() || self.mapping.is_none()) {
            return Err(Error::OutOfRange(format!(
                "Read is out of bound. offset: {offset}, actual size to read: {len}, \
                 initial map offset: {}, initial map size: {}",
                self.region_offset, self.region_size
            )));
        }
        Ok(())
    }

    /// Reads `dst.len()` bytes at `offset` of the mapped region with `pread` (`streaming`: stored
    /// past the CPU's caches), after KvikIO's range checks. A file now shorter than the range is
    /// [`Error::UnexpectedEof`], from the short read (see the module's header).
    fn copy_out(
        &self,
        dst: &mut [u8],
        offset: u64,
        call: IoContext<'_>,
        streaming: bool,
    ) -> Result<()> {
        let len = dst.len();
        let in_region = offset
            .checked_sub(self.region_offset)
            .filter(|rel| rel.saturating_add(len as u64) <= self.region_size);
        if in_region.is_none() || self.mapping.is_none() {
            if len == 0 {
                return Ok(());
            }
            return Err(Error::OutOfRange(format!(
                "Read is out of bound. offset: {offset}, actual size to read: {len}, \
                 initial map offset: {}, initial map size: {}",
                self.region_offset, self.region_size
            )));
        }
        let call = IoContext {
            progress: call.progress,
            stop: call.stop,
            direct: false,
            direct_uncached: false,
        };
        match streaming {
            true => self.local.read_for_device(dst, offset, call),
            false => self.local.read_at(dst, offset, call),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::future::StopFlag;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use crate::source::Endpoint;
    use crate::{Buffer, Engine, Request};

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn file_with(n: usize) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let bytes = data(n);
        std::fs::write(&path, &bytes).unwrap();
        (dir, path, bytes)
    }

    fn open(path: &Path, size: Option<u64>, offset: u64) -> Result<MmapSource> {
        let options = MapOptions {
            size,
            offset,
            ..MapOptions::default()
        };
        MmapSource::open(path, "r", options)
    }

    /// Reads with `read_at`, and again with `read_for_device` (the streaming copy): both must
    /// give the same bytes, or the same error.
    fn read_at(src: &MmapSource, len: usize, offset: u64) -> Result<Vec<u8>> {
        let read = |device: bool| -> Result<Vec<u8>> {
            let progress = AtomicU64::new(0);
            let mut out = vec![0u8; len];
            let call = IoContext {
                progress: &progress,
                direct: false,
                direct_uncached: false,
                stop: &StopFlag::default(),
            };
            match device {
                true => src.read_for_device(&mut out, offset, call)?,
                false => src.read_at(&mut out, offset, call)?,
            }
            assert_eq!(progress.load(Ordering::Relaxed), len as u64);
            Ok(out)
        };
        let (host, device) = (read(false), read(true));
        match (&host, &device) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "streaming copy differs"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!("read_at {host:?} but read_for_device {device:?}"),
        }
        host
    }

    #[test]
    fn reads_any_range_of_an_unaligned_region() {
        let (_d, path, bytes) = file_with(3 * 4096 + 17);
        let src = open(&path, Some(5000), 4095).unwrap();
        assert_eq!(
            (src.initial_map_offset(), src.initial_map_size()),
            (4095, 5000)
        );
        for (off, len) in [(4095, 5000), (4095, 1), (9094, 1), (5000, 123), (4095, 0)] {
            let got = read_at(&src, len, off).unwrap();
            assert_eq!(got, &bytes[off as usize..off as usize + len], "{off} {len}");
        }
    }

    #[test]
    fn region_defaults_to_the_rest_of_the_file() {
        let (_d, path, bytes) = file_with(10_000);
        let src = open(&path, None, 1234).unwrap();
        assert_eq!(src.initial_map_size(), 10_000 - 1234);
        assert_eq!(src.read_len(None, 1234).unwrap(), 10_000 - 1234);
        assert_eq!(read_at(&src, 8766, 1234).unwrap(), &bytes[1234..]);
    }

    #[test]
    fn kvikio_construction_errors() {
        let (_d, path, _) = file_with(8192);
        let e = open(&path, None, 8192).unwrap_err();
        assert!(matches!(e, Error::OutOfRange(_)), "{e:?}");
        assert!(
            e.to_string()
                .contains("Offset must be less than the file size"),
            "{e}"
        );
        let e = open(&path, Some(8193), 0).unwrap_err();
        assert!(
            e.to_string()
                .contains("Mapped region is past the end of file"),
            "{e}"
        );
        let e = open(&path, Some(u64::MAX), 1).unwrap_err();
        assert!(matches!(e, Error::OutOfRange(_)), "{e:?}");
        let e = open(&path, Some(0), 0).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(
            e.to_string()
                .contains("Mapped region should not be zero byte"),
            "{e}"
        );
        for flags in ["", "z", "rb", "x"] {
            let e = MmapSource::open(&path, flags, MapOptions::default()).unwrap_err();
            assert!(
                e.to_string().contains("Unknown file open flag"),
                "{flags}: {e}"
            );
        }
        for flags in ["w", "w+", "a"] {
            let e = MmapSource::open(&path, flags, MapOptions::default()).unwrap_err();
            assert!(
                e.to_string().contains("write is not supported"),
                "{flags}: {e}"
            );
        }
        let e = open(&path.with_extension("missing"), None, 0).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT), "{e:?}");
        let e = open(path.parent().unwrap(), None, 0).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EISDIR), "{e:?}");
    }

    #[test]
    fn map_flags_are_checked() {
        let (_d, path, bytes) = file_with(100);
        let with = |map_flags| {
            let options = MapOptions {
                map_flags: Some(map_flags),
                ..MapOptions::default()
            };
            MmapSource::open(&path, "r", options)
        };
        for bad in [
            libc::MAP_PRIVATE | libc::MAP_FIXED,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            libc::MAP_PRIVATE | libc::MAP_FIXED_NOREPLACE,
            0,
        ] {
            let e = with(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:#x}: {e:?}");
        }
        let src = with(libc::MAP_SHARED | libc::MAP_POPULATE).unwrap();
        assert_eq!(read_at(&src, 100, 0).unwrap(), bytes);
    }

    #[test]
    fn kvikio_read_checks() {
        let (_d, path, _) = file_with(1 << 20);
        let src = open(&path, Some(1024), 512).unwrap();
        let e = src.read_len(Some(1024), (1 << 20) + 1).unwrap_err();
        assert!(
            e.to_string().contains("Offset is past the end of file"),
            "{e}"
        );
        for (size, offset) in [(1024, 513), (1024, 384), (1152, 512), (0, 0)] {
            let e = src.read_len(Some(size), offset).unwrap_err();
            assert!(matches!(e, Error::OutOfRange(_)), "{e:?}");
            assert!(e.to_string().contains("Read is out of bound"), "{e}");
        }
        // size None reads to the end of the file, past this region.
        assert!(src.read_len(None, 512).is_err());
        assert_eq!(src.read_len(Some(0), 512).unwrap(), 0);
        assert_eq!(src.read_len(Some(1024), 512).unwrap(), 1024);
        assert!(src.read_len(Some(u64::MAX), 512).is_err());
        assert!(matches!(read_at(&src, 2, 1535), Err(Error::OutOfRange(_))));
        assert!(matches!(read_at(&src, 1, 511), Err(Error::OutOfRange(_))));
    }

    #[test]
    fn empty_file_maps_nothing() {
        let (_d, path, _) = file_with(0);
        let src = open(&path, None, 0).unwrap();
        assert_eq!(src.initial_map_size(), 0);
        assert_eq!(src.read_len(None, 0).unwrap(), 0);
        assert_eq!(read_at(&src, 0, 0).unwrap(), Vec::<u8>::new());
        assert!(open(&path, Some(0), 0).is_ok());
        assert!(matches!(open(&path, Some(1), 0), Err(Error::OutOfRange(_))));
        assert!(matches!(open(&path, None, 1), Err(Error::OutOfRange(_))));
    }

    #[test]
    fn a_file_that_shrank_is_an_error_not_sigbus() {
        let (_d, path, bytes) = file_with(5 * 4096);
        let src = open(&path, None, 0).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let e = src.read_len(None, 0).unwrap_err();
        assert!(
            matches!(
                e,
                Error::UnexpectedEof {
                    file_size: 4096,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = read_at(&src, 4096, 8192).unwrap_err();
        assert!(matches!(e, Error::UnexpectedEof { .. }), "{e:?}");
        // What is still in the file reads as before.
        assert_eq!(read_at(&src, 4096, 0).unwrap(), &bytes[..4096]);
    }

    #[test]
    fn engine_reads_host_memory_in_tasks_and_outlives_the_handle() {
        let (_d, path, bytes) = file_with(1_000_003);
        let src = Arc::new(open(&path, None, 3).unwrap());
        let len = src.read_len(None, 3).unwrap();
        let mut out = vec![0u8; len];
        let engine = Engine::global().unwrap();
        let settings = engine.settings();
        let req = Request::read(Buffer::host(&mut out), 3).task_size(Some(199 * 50));
        let endpoint = Endpoint::Read(Arc::clone(&src) as Arc<dyn Source>);
        drop(src); // the request holds the mapping
                   // SAFETY: `out` lives past the wait and nothing else touches it meanwhile.
        let fut = unsafe { engine.submit(&endpoint, req, &settings) }.unwrap();
        assert_eq!(fut.wait().unwrap(), len);
        assert_eq!(out, &bytes[3..]);
    }
}
