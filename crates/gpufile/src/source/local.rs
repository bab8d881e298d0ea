//! A local file as a [`Source`] and a [`Sink`]: `pread`/`pwrite` on the buffered descriptor, or
//! on a second `O_DIRECT` descriptor for aligned ranges when the request asks for direct I/O.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use crate::error::{Error, Op, Result};
use crate::mapped::{self, CopyMapping, MapSlot, Miss, MAPPED_COPY_MAX, MAPPED_COPY_MIN};
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
    /// The mapping that small chunks on their way to a GPU are copied out of
    /// ([`crate::mapped`]): made on first need, replaced once poisoned or outgrown.
    copy_map: Arc<MapSlot>,
    /// The file could not be mapped (a file system without `mmap`): chunks use `pread` only.
    unmappable: std::sync::atomic::AtomicBool,
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
            copy_map: Arc::new(RwLock::new(None)),
            unmappable: std::sync::atomic::AtomicBool::new(!readable),
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

    /// Copies a hot range out of the file's mapping with non-temporal stores (see
    /// [`crate::mapped`]); false where it did not (the caller reads with `pread`).
    fn copy_mapped(&self, dst: &mut [u8], offset: u64) -> bool {
        if self.unmappable.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let Ok(start) = usize::try_from(offset) else {
            return false;
        };
        let Some(end) = start.checked_add(dst.len()) else {
            return false;
        };
        let current = self.copy_map.read().ok().and_then(|m| m.clone());
        let map = match current {
            Some(m) if end <= m.len() => m,
            // None yet, or the file has grown past it: map the file as it is now.
            _ => match self.remap(end) {
                Some(m) => m,
                None => return false,
            },
        };
        match map.copy_to(dst, start) {
            // A file that shrank to an end inside the range's last page reads as zeros past
            // that end without a fault (the page stays): the copy holds bytes the file no
            // longer has. Asked after the copy, so a shrink during it counts too; `pread` then
            // reports where the file ends.
            Ok(()) => matches!(self.current_size(), Ok(size) if size >= end as u64),
            Err(Miss::Poisoned) => {
                // The file shrank under the mapping: forget it (the next chunk maps anew).
                if let Ok(mut slot) = self.copy_map.write() {
                    if slot.as_ref().is_some_and(|m| Arc::ptr_eq(m, &map)) {
                        *slot = None;
                    }
                }
                false
            }
            Err(Miss::NotResident | Miss::Unguarded) => false,
        }
    }

    /// A new mapping of the whole file if it now holds `end` bytes (else `None`).
    fn remap(&self, end: usize) -> Option<Arc<CopyMapping>> {
        let size = usize::try_from(self.current_size().ok()?).ok()?;
        if size < end || size == 0 {
            return None;
        }
        let Ok(map) = CopyMapping::new(self.fd(), size) else {
            self.unmappable
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return None;
        };
        let map = Arc::new(map);
        mapped::install_in(&self.copy_map, Arc::clone(&map)).then_some(map)
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

    fn read_for_device(&self, dst: &mut [u8], offset: u64, call: Call<'_>) -> Result<()> {
        // Small chunks (not tiny ones) of hot ranges: from the mapping, past the CPU's caches.
        // Not for direct I/O (asked for: the page cache is bypassed), nor while test faults are
        // injected into `pread` (every read must meet them).
        if (MAPPED_COPY_MIN..=MAPPED_COPY_MAX).contains(&dst.len())
            && !call.direct
            && !posix::faults::active()
            && self.copy_mapped(dst, offset)
        {
            call.progress
                .fetch_add(dst.len() as u64, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        self.read_at(dst, offset, call)
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

#[cfg(test)]
mod tests {
    use super::*;
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
        let call = Call {
            progress: &progress,
            direct: false,
            direct_uncached: false,
        };
        let mut out = vec![0u8; len];
        f.read_for_device(&mut out, offset, call)?;
        assert_eq!(progress.load(Ordering::Relaxed), len as u64);
        Ok(out)
    }

    #[test]
    fn small_hot_chunks_for_a_device_come_from_the_mapping_with_the_files_bytes() {
        let _serial = mapped::release_test_lock();
        let (_f, local, data) = hot_file(3 << 20);
        let got = read_for_device(&local, 700_000, 12_345).unwrap();
        assert_eq!(got, data[12_345..712_345]);
        assert!(local.copy_map.read().unwrap().is_some(), "mapped");
        // Larger than MAPPED_COPY_MAX: pread, same bytes.
        let got = read_for_device(&local, 2 << 20, 1).unwrap();
        assert_eq!(got, data[1..(2 << 20) + 1]);
    }

    #[test]
    fn a_file_that_shrank_reads_as_pread_would_and_one_that_grew_is_mapped_anew() {
        let _serial = mapped::release_test_lock();
        let (f, local, data) = hot_file(1 << 20);
        assert_eq!(read_for_device(&local, 4096, 0).unwrap(), data[..4096]);
        assert!(local.copy_map.read().unwrap().is_none(), "4 KiB: pread");
        assert_eq!(read_for_device(&local, 65536, 0).unwrap(), data[..65536]);
        assert!(local.copy_map.read().unwrap().is_some(), "64 KiB: mapped");
        f.as_file().set_len(8192).unwrap();
        let e = read_for_device(&local, 65536, 4096).unwrap_err();
        assert!(matches!(e, Error::UnexpectedEof { .. }), "{e:?}");
        // Grows past the first mapping: the new bytes are read (a new mapping, or pread).
        let mut w = f.as_file();
        w.set_len(0).unwrap();
        w.write_all(&vec![9u8; 2 << 20]).unwrap();
        assert!(read_for_device(&local, 1 << 20, 1 << 20)
            .unwrap()
            .iter()
            .all(|&b| b == 9));
    }

    #[test]
    fn a_range_past_the_end_of_a_file_that_shrank_inside_a_page_is_an_eof_not_zeros() {
        let _serial = mapped::release_test_lock();
        let (f, local, data) = hot_file(1 << 20);
        assert_eq!(read_for_device(&local, 65536, 0).unwrap(), data[..65536]);
        assert!(local.copy_map.read().unwrap().is_some(), "mapped");
        // The new end lies inside a page: that page stays cached and mapped (its tail reads as
        // zeros, without a fault), but the bytes past the end are not the file's.
        let page = pagecache::page_size() as usize;
        let size = 24 * page + 1696;
        f.as_file().set_len(size as u64).unwrap();
        let offset = (25 * page - 65536) as u64;
        let e = read_for_device(&local, 65536, offset).unwrap_err();
        assert!(matches!(e, Error::UnexpectedEof { .. }), "{e:?}");
        // Within the new size the mapping still serves.
        let offset = (size - 65536) as u64;
        let got = read_for_device(&local, 65536, offset).unwrap();
        assert_eq!(got, data[size - 65536..size]);
    }

    #[test]
    fn gpufiles_page_cache_drop_unmaps_the_copy_mapping_first() {
        let _serial = mapped::release_test_lock();
        let (f, local, data) = hot_file(1 << 20);
        assert_eq!(read_for_device(&local, 1 << 20, 0).unwrap(), data);
        assert!(local.copy_map.read().unwrap().is_some());
        pagecache::drop_file_page_cache(local.fd(), f.path(), 0, 0, true).unwrap();
        assert!(local.copy_map.read().unwrap().is_none(), "released");
        let (resident, _) = pagecache::page_cache_info(local.fd(), f.path(), 0, 0).unwrap();
        // Where the file system drops pages at all (tmpfs does not), these are gone too.
        let (c, control, _) = hot_file(1 << 20);
        pagecache::drop_file_page_cache(control.fd(), c.path(), 0, 0, true).unwrap();
        let (kept, _) = pagecache::page_cache_info(control.fd(), c.path(), 0, 0).unwrap();
        assert!(
            kept > 0 || resident == 0,
            "{resident} of 256 pages still cached"
        );
        assert_eq!(read_for_device(&local, 1 << 20, 0).unwrap(), data);
    }

    #[test]
    fn truncation_racing_mapped_copies_gives_the_files_bytes_or_an_error_never_a_crash() {
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
}
