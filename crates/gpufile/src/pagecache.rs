//! Page-cache residency and eviction, as KvikIO's `get_page_cache_info`,
//! `drop_file_page_cache` and `drop_system_page_cache`: what makes a read "hot" or "cold".

use std::os::fd::RawFd;
use std::path::Path;

use crate::error::{Error, Op, Result};

/// The system's page size in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory arguments.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

fn file_size(fd: RawFd, path: &Path) -> Result<u64> {
    // SAFETY: a zeroed `stat` is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(Error::os(
            Op::Stat,
            path,
            0,
            0,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(st.st_size.max(0) as u64)
}

/// Opens `path` read-only for the page-cache helpers as every path-taking entry opens a file
/// (`posix::open_file`): a FIFO or a socket is [`Error::NotSeekable`] at once (an
/// `open(2)` of a FIFO would wait for its other end, deaf to signals), a directory `EISDIR`.
pub fn open(path: &Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    crate::posix::open_file(&mut options, path).map(|(file, _)| file)
}

/// The byte range `[offset, offset + length)` clamped to the file (`length` 0: to the end).
fn clamp(size: u64, offset: u64, length: u64) -> Option<(u64, u64)> {
    if offset >= size {
        return None;
    }
    let end = if length == 0 {
        size
    } else {
        offset.saturating_add(length).min(size)
    };
    Some((offset, end))
}

/// A read-only shared mapping of a range of a file: asked by `mincore` which pages are in the
/// page cache, or registered with CUDA for the GPU to read. Unmapped on drop.
#[derive(Debug)]
pub struct FileMapping {
    addr: usize,
    len: usize,
}

impl FileMapping {
    /// Maps `len` bytes of `fd` from `offset` (a multiple of the page size).
    pub fn new(fd: RawFd, offset: u64, len: usize) -> std::io::Result<FileMapping> {
        // SAFETY: a new read-only shared mapping of the file; never dereferenced by this
        // process, and unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileMapping {
            addr: p as usize,
            len,
        })
    }

    /// First byte of the mapping.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `(resident, pages)` of `[start, start + len)` of the mapping (page-aligned `start`,
    /// clamped to the mapping); `stop` ends the count early when it says so of a window's
    /// flags (the count so far is returned).
    fn residency(
        &self,
        start: usize,
        len: usize,
        stop: impl Fn(&[u8]) -> bool,
    ) -> std::io::Result<(u64, u64)> {
        const WINDOW: usize = 1024; // pages asked per mincore call
        let page = page_size() as usize;
        let end = start.saturating_add(len).min(self.len);
        let mut vec = [0u8; WINDOW];
        let (mut at, mut resident, mut pages) = (start, 0u64, 0u64);
        while at < end {
            let n = (end - at).min(WINDOW * page);
            // SAFETY: `[addr + at, + n)` lies in the mapping (page-aligned `at`, end <= len);
            // `vec` has a byte for each of its at most WINDOW pages.
            let r = unsafe { libc::mincore((self.addr + at) as *mut _, n, vec.as_mut_ptr()) };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let flags = &vec[..n.div_ceil(page)];
            resident += flags.iter().filter(|b| *b & 1 != 0).count() as u64;
            pages += flags.len() as u64;
            if stop(flags) {
                break;
            }
            at += n;
        }
        Ok((resident, pages))
    }

    /// Whether every page of `[start, start + len)` is in the page cache (false where that
    /// cannot be known).
    pub fn all_resident(&self, start: usize, len: usize) -> bool {
        let missing = |f: &[u8]| f.iter().any(|b| b & 1 == 0);
        matches!(self.residency(start, len, missing), Ok((r, p)) if r == p)
    }

    /// Whether no page of `[start, start + len)` is in the page cache (false where that cannot
    /// be known).
    pub fn none_resident(&self, start: usize, len: usize) -> bool {
        let cached = |f: &[u8]| f.iter().any(|b| b & 1 != 0);
        matches!(self.residency(start, len, cached), Ok((0, _)))
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping this value made.
        unsafe { libc::munmap(self.addr as *mut _, self.len) };
    }
}

/// `(pages resident in the page cache, pages in the range)` for `[offset, offset + length)` of
/// the open file `fd` (`length` 0: to the end of the file; partial pages count as whole ones).
pub fn page_cache_info(fd: RawFd, path: &Path, offset: u64, length: u64) -> Result<(u64, u64)> {
    let page = page_size();
    let Some((start, end)) = clamp(file_size(fd, path)?, offset, length) else {
        return Ok((0, 0));
    };
    let map_start = start / page * page;
    let map_len = (end - map_start) as usize;
    let map = FileMapping::new(fd, map_start, map_len)
        .map_err(|e| Error::os(Op::Map, path, start, map_len, e))?;
    map.residency(0, map_len, |_| false)
        .map_err(|e| Error::os(Op::Read, path, start, map_len, e))
}

/// Evicts `[offset, offset + length)` of `fd` from the page cache (`posix_fadvise` DONTNEED,
/// after `fdatasync` if `sync_first`, so that dirty pages can go). Needs no privileges.
pub fn drop_file_page_cache(
    fd: RawFd,
    path: &Path,
    offset: u64,
    length: u64,
    sync_first: bool,
) -> Result<()> {
    // posix_fadvise takes signed offsets: a larger value would reach it negative.
    for (name, v) in [("offset", offset), ("length", length)] {
        if v > i64::MAX as u64 {
            return Err(Error::InvalidArgument(format!(
                "{name} {v} is past the largest file offset ({})",
                i64::MAX
            )));
        }
    }
    if sync_first {
        // SAFETY: fdatasync on a descriptor the caller owns.
        if unsafe { libc::fdatasync(fd) } != 0 {
            let e = std::io::Error::last_os_error();
            // Not every file (pipes, some devices) can be synced; that is not an error here.
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(Error::os(Op::Sync, path, 0, 0, e));
            }
        }
    }
    // SAFETY: posix_fadvise takes plain values.
    let r = unsafe {
        libc::posix_fadvise(
            fd,
            offset as libc::off_t,
            length as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if r != 0 {
        return Err(Error::os(
            Op::Advise,
            path,
            offset,
            length as usize,
            std::io::Error::from_raw_os_error(r),
        ));
    }
    Ok(())
}

/// Drops the whole system's page cache (`vm.drop_caches`: 3, or 1 without dentries and
/// inodes), after `sync` if `sync_first`. Needs root; returns whether it worked.
pub fn drop_system_page_cache(reclaim_dentries_and_inodes: bool, sync_first: bool) -> bool {
    if sync_first {
        // SAFETY: sync takes no arguments.
        unsafe { libc::sync() };
    }
    let value = if reclaim_dentries_and_inodes {
        "3\n"
    } else {
        "1\n"
    };
    std::fs::write("/proc/sys/vm/drop_caches", value).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn ranges_clamp_to_the_file() {
        assert_eq!(clamp(100, 0, 0), Some((0, 100)));
        assert_eq!(clamp(100, 50, 1000), Some((50, 100)));
        assert_eq!(clamp(100, 100, 1), None);
    }

    #[test]
    fn residency_and_eviction() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        let fd = f.as_file().as_raw_fd();
        let (_, total) = page_cache_info(fd, f.path(), 0, 0).unwrap();
        assert_eq!(total, (1 << 20) / page_size());
        assert_eq!(page_cache_info(fd, f.path(), 5 << 20, 0).unwrap(), (0, 0));
        drop_file_page_cache(fd, f.path(), 0, 0, true).unwrap();
        let (after, _) = page_cache_info(fd, f.path(), 0, 0).unwrap();
        let _ = std::fs::read(f.path()).unwrap();
        let (hot, total) = page_cache_info(fd, f.path(), 0, 0).unwrap();
        assert!(
            after <= hot && hot == total,
            "after drop {after}, after read {hot}/{total}"
        );
    }

    #[test]
    fn a_fifo_is_refused_at_once_and_huge_offsets_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // On a thread, bounded: an open that waits for a writer fails here instead of hanging.
        let (tx, rx) = std::sync::mpsc::channel();
        let f = fifo.clone();
        std::thread::spawn(move || tx.send(open(&f).map(|_| ())));
        let r = rx.recv_timeout(std::time::Duration::from_secs(30));
        assert!(matches!(r, Ok(Err(Error::NotSeekable { .. }))), "{r:?}");

        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[1u8; 4096]).unwrap();
        let fd = open(f.path()).unwrap();
        for (offset, length, name) in [(1 << 63, 0, "offset"), (0, u64::MAX, "length")] {
            let r = drop_file_page_cache(fd.as_raw_fd(), f.path(), offset, length, false);
            match r {
                Err(Error::InvalidArgument(m)) => assert!(
                    m.contains(&format!("{name} ")) && m.contains("past the largest file offset"),
                    "{m}"
                ),
                other => panic!("{other:?}"),
            }
        }
        drop_file_page_cache(fd.as_raw_fd(), f.path(), i64::MAX as u64, 0, false).unwrap();
    }

    #[test]
    fn mappings_say_what_is_resident() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&vec![3u8; 1 << 20]).unwrap();
        let _ = std::fs::read(f.path()).unwrap(); // every page in the cache
        let fd = f.as_file().as_raw_fd();
        let map = FileMapping::new(fd, 0, 1 << 20).unwrap();
        assert_eq!(map.len(), 1 << 20);
        assert!(map.all_resident(0, 1 << 20));
        assert!(!map.none_resident(0, 1 << 20));
        assert!(map.all_resident(4096, 8192), "a part of it too");
        assert_eq!(
            map.residency(0, usize::MAX, |_| false).unwrap(),
            ((1 << 20) / page_size(), (1 << 20) / page_size()),
            "clamped to the mapping"
        );
        assert!(FileMapping::new(-1, 0, 4096).is_err());
    }
}
