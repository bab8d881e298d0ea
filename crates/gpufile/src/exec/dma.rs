//! Page-cache DMA: hot file data goes to the GPU straight from the page cache by the copy
//! engine, with no CPU copy through a bounce buffer.
//!
//! Why: the CPU copy from the page cache into pinned buffers caps the bounce path at what the
//! CPUs can copy, the same for one GPU or two, while the copy engines read registered host
//! memory at the link rate of every GPU at once. Registering (pinning) pages is slower than
//! copying them and serialises in the driver whatever the thread count, so registrations are
//! kept: data read again while it stays hot is copied at DMA speed. The figures:
//! docs/performance.md, "Page-cache DMA (`exec/dma.rs`)".
//!
//! How it works:
//! 1. A device read of a local file on gpufile's POSIX path (at least [`MIN_REQUEST`] bytes,
//!    `dma_cache_size` > 0, `auto_direct_io_read` off) gets the cache's [`DmaFile`] for the
//!    file: one per inode and version (size, mtime, ctime); a file that changed gets a fresh
//!    entry and the old one is let go.
//! 2. The file is cut into [`GRANULE`]-byte granules. Before each chunk, a worker asks
//!    [`DmaRead::span`]: a registered granule → the chunk is copied from its mapping; not
//!    registered, the file version read before (a first read never registers: it would slow
//!    that read down) and last changed more than a timestamp tick ago (so a later change shows
//!    in its ctime), every page in the page cache (`mincore`), the budget allows it and no
//!    other registration is running → this worker maps and registers it now (meanwhile the
//!    others keep bouncing, so both paths run at once); otherwise → the bounce path.
//! 3. Budget: at most `dma_cache_size` bytes registered; past it, the least recently used files
//!    are let go. The kernel cannot reclaim registered pages: that is what the bound is for.
//!    Each granule maps only its own range, so a deleted file keeps at most its registered
//!    granules alive (within the bound), never the whole file.
//! 4. A run keeps the granules it copied from until its stream is drained, so letting a file go
//!    never unregisters memory that a copy still reads.
//! 5. An entry the cache lets go (a gpufile write to the file, a new version, the budget) is
//!    retired for good (`Granules`): a read that started before and is registering a granule
//!    of it meanwhile does not publish that granule, but unregisters it and, where the file
//!    changed, evicts its range from the page cache. Published, it would pin pages a write
//!    may have left stale in an entry that nothing evicts any more. A changed file's granules
//!    that copies still hold when it is let go are evicted when the last copy lets go of them.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cuda::{Context, HostRegistration};
use crate::future::lock;
use crate::pagecache::{self, FileMapping};
use crate::source::LocalFile;

/// Registration unit, bytes, and the smallest device read that uses the cache: decided by the
/// plan ([`crate::plan::DMA_GRANULE`], [`crate::plan::DMA_MIN_REQUEST`]).
pub use crate::plan::DMA_GRANULE as GRANULE;
/// Most files the cache remembers (entries without registrations cost a few words each).
const MAX_FILES: usize = 4096;
/// How long ago a file must have last changed (its ctime) for its pages to be registered, on
/// file systems with fine timestamps: longer than a tick of the kernel's timestamp clock (1 to
/// 10 ms), so any change after the registration gets a later ctime, and a new version.
const SETTLE_FINE: Duration = Duration::from_millis(20);
/// The same where the ctime has no fraction of a second (file systems with 1 s timestamps).
const SETTLE_COARSE: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FileId {
    dev: u64,
    ino: u64,
}

/// What makes a registration stale when it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Version {
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Version {
    /// Whether the file last changed long enough before `now` that a later change cannot keep
    /// this version: timestamps come from a clock that advances in ticks, so a file truncated
    /// and rewritten to the same size (or written with O_DIRECT, or deleted and its inode number
    /// reused) within the tick of its last change keeps size, mtime and ctime, while the kernel
    /// drops the pages registered before from the page cache (the GPU would read them still).
    fn settled(&self, now: SystemTime) -> bool {
        let (secs, nanos) = self.ctime;
        let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) else {
            return false;
        };
        let settle = if nanos == 0 {
            SETTLE_COARSE
        } else {
            SETTLE_FINE
        };
        let Some(changed) = UNIX_EPOCH.checked_add(Duration::new(secs, nanos.min(999_999_999)))
        else {
            return false;
        };
        now.duration_since(changed).is_ok_and(|d| d > settle)
    }
}

/// One registered granule. Fields drop in order: unregistered first, then unmapped, then its
/// range evicted from the page cache where the file changed meanwhile.
pub struct Granule {
    reg: HostRegistration,
    _map: FileMapping,
    evict: EvictOnDrop,
    shared: Arc<Shared>,
}

/// A granule's range of its file, evicted from the page cache when dropped if armed: a write
/// (with `O_DIRECT` above all) cannot invalidate pages that are pinned, so once a changed file's
/// granule is unpinned, the pages it pinned may hold bytes the file no longer has.
///
/// It holds an open file only once armed, and then the one that found the change (a reader of
/// the new version, or the writer): a granule of a file the user closed keeps no descriptor of
/// it open while it stays registered for later opens of the same file.
struct EvictOnDrop {
    at: u64,
    len: usize,
    via: Mutex<Option<Arc<LocalFile>>>,
}

impl EvictOnDrop {
    fn arm(&self, via: &Arc<LocalFile>) {
        lock(&self.via).get_or_insert_with(|| Arc::clone(via));
    }
}

impl Drop for EvictOnDrop {
    fn drop(&mut self) {
        let via = self.via.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(local) = via {
            // Best effort: a page cache that keeps a page is what it was before.
            let (fd, path) = (local.fd(), local.path());
            let _ = pagecache::drop_file_page_cache(fd, path, self.at, self.len as u64, false);
        }
    }
}

impl Drop for Granule {
    fn drop(&mut self) {
        self.shared
            .registered
            .fetch_sub(self.reg.len(), Ordering::Relaxed);
    }
}

/// What every entry shares with the cache.
#[derive(Default)]
struct Shared {
    /// Bytes registered now (granules held by running copies included).
    registered: AtomicUsize,
    /// One registration at a time: the driver serialises them anyway, and the other workers
    /// are better used bouncing meanwhile.
    registering: Mutex<()>,
    /// Why registration is off for this process (the first failure, which would recur).
    disabled: OnceLock<String>,
    tick: AtomicU64,
}

/// Why the cache let go of a file entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retire {
    /// To make room, or cleared: the file is as it was.
    Evicted,
    /// Before a gpufile write to the file, or for a newer version: pages registered meanwhile
    /// may hold bytes the file no longer has.
    Changed,
}

/// The registered granules of one file entry, by index, and whether the entry was retired.
/// Generic over the granule so that its bookkeeping is testable without CUDA.
struct Granules<T> {
    map: HashMap<u64, Arc<T>>,
    /// Set once, when the cache lets go of the entry; a retired entry takes no granule again.
    retired: Option<Retire>,
}

impl<T> Default for Granules<T> {
    fn default() -> Self {
        Granules {
            map: HashMap::new(),
            retired: None,
        }
    }
}

impl<T> Granules<T> {
    /// Publishes `x` as granule `g`, or gives it back with why the entry was retired (a read
    /// that started before the cache let go of the entry registered it meanwhile).
    fn publish(&mut self, g: u64, x: T) -> std::result::Result<Arc<T>, (T, Retire)> {
        if let Some(why) = self.retired {
            return Err((x, why));
        }
        let x = Arc::new(x);
        self.map.insert(g, Arc::clone(&x));
        Ok(x)
    }

    /// Retires the entry (a change outranks an eviction) and hands over its granules.
    fn retire(&mut self, why: Retire) -> HashMap<u64, Arc<T>> {
        if self.retired != Some(Retire::Changed) {
            self.retired = Some(why);
        }
        std::mem::take(&mut self.map)
    }
}

/// One version of one file: its registered granules, by index (only those registered take
/// room, whatever the file's size).
pub struct DmaFile {
    version: Version,
    granules: Mutex<Granules<Granule>>,
    last_used: AtomicU64,
}

impl DmaFile {
    fn registered(&self) -> usize {
        lock(&self.granules).map.values().map(|g| g.reg.len()).sum()
    }

    fn granule(&self, g: u64) -> Option<Arc<Granule>> {
        lock(&self.granules).map.get(&g).cloned()
    }

    /// Lets go of the entry for good; its granules are unregistered now, or when the copies
    /// still reading them are done (and, where the file changed, their ranges evicted then).
    /// `changed_via`: the file changed, and this open file of it evicts the granules' ranges.
    fn retire(&self, why: Retire, changed_via: Option<&Arc<LocalFile>>) {
        let granules = lock(&self.granules).retire(why);
        if let (Retire::Changed, Some(via)) = (why, changed_via) {
            for g in granules.values() {
                g.evict.arm(via);
            }
        }
        drop(granules); // after the lock: unregistering takes the driver's time
    }
}

/// The registrations of an engine.
#[derive(Default)]
pub struct DmaCache {
    shared: Arc<Shared>,
    files: Mutex<HashMap<FileId, Arc<DmaFile>>>,
}

/// A stretch of a chunk that the GPU can copy straight from registered page cache.
pub struct Span {
    /// First byte (in the granule's mapping).
    pub ptr: *const u8,
    /// Bytes from `ptr` (at most what was asked; less at a granule's end).
    pub len: usize,
    /// Keeps the registration alive until the copy is done.
    pub granule: Arc<Granule>,
}

/// Granules that a run's queued copies or kernels read from, let go only once its queue is
/// drained.
#[derive(Default)]
pub struct Held(HashMap<usize, Arc<Granule>>);

impl Held {
    /// Keeps the granules of `memo` ([`DmaRead::whole`]'s) registered until [`Held::release`].
    pub fn hold_all(&mut self, memo: HashMap<u64, Option<Arc<Granule>>>) {
        for granule in memo.into_values().flatten() {
            self.0
                .entry(Arc::as_ptr(&granule) as usize)
                .or_insert(granule);
        }
    }

    /// Lets the granules go once `drained` says the queue is empty. Where the drain failed a
    /// copy may still read them, and unregistering them under it would let it read unmapped
    /// memory: they are leaked instead.
    pub fn release(&mut self, drained: &crate::error::Result<()>) {
        let held = std::mem::take(&mut self.0);
        match drained {
            Ok(()) => drop(held),
            Err(_) => std::mem::forget(held),
        }
    }
}

/// A request's use of the cache.
pub struct DmaRead {
    cache: Arc<DmaCache>,
    id: FileId,
    file: Arc<DmaFile>,
    local: Arc<LocalFile>,
    limit: usize,
    /// Whether this request may register granules: not on the first read of a file version
    /// (registering while the same pages are being read slows that first read down:
    /// docs/performance.md, "Page-cache DMA (`exec/dma.rs`)"), only once the data has been read
    /// again, and not while the file's last change is too recent to tell a later one by its
    /// timestamps ([`Version::settled`]).
    may_register: bool,
    /// Bytes this request copied from registered page cache.
    pub bytes: AtomicU64,
}

impl DmaCache {
    /// The cache's part in a device read of `local` under a budget of `limit` registered bytes;
    /// `None` where it cannot help (registration is off, the file is empty or cannot be
    /// identified).
    pub fn read(self: &Arc<Self>, local: &Arc<LocalFile>, limit: usize) -> Option<DmaRead> {
        if limit == 0 || self.shared.disabled.get().is_some() {
            return None;
        }
        let meta = local.file().metadata().ok()?;
        let id = FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        let version = Version {
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        };
        if version.size == 0 {
            return None;
        }
        let tick = self.shared.tick.fetch_add(1, Ordering::Relaxed);
        let mut let_go = Vec::new(); // unregistered after the lock is released
        let mut changed = None; // this file's older version, if it had one
        let (file, may_register) = {
            let mut files = lock(&self.files);
            match files.get(&id) {
                Some(f) if f.version == version => {
                    f.last_used.store(tick, Ordering::Relaxed);
                    (Arc::clone(f), version.settled(SystemTime::now()))
                }
                _ => {
                    let f = Arc::new(DmaFile {
                        version,
                        granules: Mutex::new(Granules::default()),
                        last_used: AtomicU64::new(tick),
                    });
                    // The file's older version (if any) is let go; its registrations go when
                    // the last copy from them is done.
                    changed = files.insert(id, Arc::clone(&f));
                    if files.len() > MAX_FILES {
                        let oldest = Self::least_recent(&files, id);
                        let_go.extend(oldest.and_then(|k| files.remove(&k)));
                    }
                    (f, false)
                }
            }
        };
        for f in let_go {
            f.retire(Retire::Evicted, None);
        }
        if let Some(old) = changed {
            Self::evict_stale(&old, local);
        }
        Some(DmaRead {
            cache: Arc::clone(self),
            id,
            file,
            local: Arc::clone(local),
            limit,
            may_register,
            bytes: AtomicU64::new(0),
        })
    }

    /// Unregisters the granules of a file version that changed and evicts their ranges from
    /// the page cache: pages pinned when the file was written with `O_DIRECT` (by another
    /// process, say) could not be invalidated then and may hold the old bytes, for every reader.
    /// Clean pages only go (`POSIX_FADV_DONTNEED`); a range still read by a running copy stays
    /// pinned until that copy ends, and is evicted then.
    fn evict_stale(old: &DmaFile, via: &Arc<LocalFile>) {
        old.retire(Retire::Changed, Some(via));
    }

    fn least_recent(files: &HashMap<FileId, Arc<DmaFile>>, keep: FileId) -> Option<FileId> {
        files
            .iter()
            .filter(|(k, _)| **k != keep)
            .min_by_key(|(_, f)| f.last_used.load(Ordering::Relaxed))
            .map(|(k, _)| *k)
    }

    /// Lets go of `local`'s registrations before gpufile writes to it: the write (an `O_DIRECT`
    /// one above all) must find its pages unpinned, or the kernel cannot invalidate them and
    /// keeps the old bytes in the page cache for every reader. Reads of the file still running
    /// keep theirs until they end, and their ranges are evicted then; they register no more
    /// into the entry let go.
    pub fn forget(&self, local: &Arc<LocalFile>) {
        if lock(&self.files).is_empty() {
            return;
        }
        let Ok(meta) = local.file().metadata() else {
            return;
        };
        let id = FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        let gone = lock(&self.files).remove(&id);
        if let Some(f) = gone {
            f.retire(Retire::Changed, Some(local));
        }
    }

    /// Lets go of least recently used files (never `keep`) until `extra` more bytes fit under
    /// `limit`; whether they do.
    fn make_room(&self, extra: usize, limit: usize, keep: Option<FileId>) -> bool {
        loop {
            let now = self.shared.registered.load(Ordering::Relaxed);
            if now.saturating_add(extra) <= limit {
                return true;
            }
            let evicted = {
                let mut files = lock(&self.files);
                let victim = files
                    .iter()
                    .filter(|(k, f)| Some(**k) != keep && f.registered() > 0)
                    .min_by_key(|(_, f)| f.last_used.load(Ordering::Relaxed))
                    .map(|(k, _)| *k);
                match victim.and_then(|k| files.remove(&k)) {
                    Some(f) => f,
                    None => return false,
                }
            };
            evicted.retire(Retire::Evicted, None);
        }
    }

    /// Lets go of least recently used files until at most `limit` bytes stay registered (0:
    /// all). Copies in flight keep their granules until they are done.
    pub fn trim(&self, limit: usize) {
        if limit == 0 {
            let all = std::mem::take(&mut *lock(&self.files));
            for f in all.values() {
                f.retire(Retire::Evicted, None);
            }
            return;
        }
        self.make_room(0, limit, None);
    }

    /// Bytes registered now.
    pub fn registered(&self) -> usize {
        self.shared.registered.load(Ordering::Relaxed)
    }

    /// Why registration is off in this process, if it is.
    pub fn disabled(&self) -> Option<&str> {
        self.shared.disabled.get().map(String::as_str)
    }
}

impl DmaRead {
    /// The registered page cache under `[offset, offset + max)`, registering its granule now
    /// where that is possible and cheap; `None`: bounce this chunk.
    pub fn span(&self, offset: u64, max: usize, ctx: Context) -> Option<Span> {
        let size = self.file.version.size;
        if offset >= size || max == 0 {
            return None;
        }
        let g = offset / GRANULE as u64;
        let granule = match self.file.granule(g) {
            Some(x) => x,
            None => self.register(g, ctx)?,
        };
        let within = (offset - g * GRANULE as u64) as usize;
        let avail = (granule.reg.len().saturating_sub(within) as u64).min(size - offset) as usize;
        if avail == 0 {
            return None;
        }
        // SAFETY: `within < reg.len()` (avail > 0), so the pointer stays in the registration.
        let ptr = unsafe { granule.reg.as_ptr().add(within) };
        Some(Span {
            ptr,
            len: max.min(avail),
            granule,
        })
    }

    /// Where the GPU reads `[offset, offset + len)` when one registered granule holds all of it
    /// (registering the granule now where [`DmaRead::span`] would): a range of a gather. `memo`
    /// keeps each granule's answer for a group of ranges, so each is asked once per group, and
    /// holds the granules the answers point into: the caller keeps them ([`Held::hold_all`])
    /// until the copies are done. No granule is shared per range (a count shared by every
    /// worker, touched twice per 4 KiB row, would cost more than the row's copy).
    pub fn whole(
        &self,
        offset: u64,
        len: usize,
        ctx: Context,
        memo: &mut HashMap<u64, Option<Arc<Granule>>>,
    ) -> Option<*const u8> {
        if len == 0 || offset.checked_add(len as u64)? > self.file.version.size {
            return None;
        }
        let g = offset / GRANULE as u64;
        let granule = memo
            .entry(g)
            .or_insert_with(|| self.file.granule(g).or_else(|| self.register(g, ctx)))
            .as_ref()?;
        let within = (offset - g * GRANULE as u64) as usize;
        if within + len > granule.reg.len() {
            return None; // the range runs into the next granule
        }
        // SAFETY: `within + len <= reg.len()`, so the range stays in the registration.
        Some(unsafe { granule.reg.as_ptr().add(within) })
    }

    fn register(&self, g: u64, ctx: Context) -> Option<Arc<Granule>> {
        let shared = &self.cache.shared;
        if !self.may_register || shared.disabled.get().is_some() {
            return None;
        }
        let _one = shared.registering.try_lock().ok()?;
        {
            let granules = lock(&self.file.granules);
            if granules.retired.is_some() {
                return None; // the cache let go of this entry: nothing more is published in it
            }
            if let Some(x) = granules.map.get(&g) {
                return Some(Arc::clone(x)); // registered while this worker waited for the lock
            }
        }
        let start = g * GRANULE as u64;
        let page = pagecache::page_size();
        let len = (self.file.version.size - start)
            .min(GRANULE as u64)
            .div_ceil(page)
            .saturating_mul(page) as usize;
        let map = FileMapping::new(self.local.fd(), start, len).ok()?;
        if !map.all_resident(0, len) {
            return None; // registering would read it from the disk, one page at a time
        }
        if !self.cache.make_room(len, self.limit, Some(self.id)) {
            return None;
        }
        // SAFETY: the mapping lives in the granule beside the registration and is unmapped
        // only after it (field order).
        let reg = match unsafe { HostRegistration::new(map.addr() as *const u8, len, ctx) } {
            Ok(r) => r,
            Err(e) => {
                let _ = shared.disabled.set(format!(
                    "page-cache DMA is off: registering a file mapping failed ({e})"
                ));
                return None;
            }
        };
        shared.registered.fetch_add(len, Ordering::Relaxed);
        let granule = Granule {
            reg,
            _map: map,
            evict: EvictOnDrop {
                at: start,
                len,
                via: Mutex::new(None),
            },
            shared: Arc::clone(shared),
        };
        let published = lock(&self.file.granules).publish(g, granule);
        match published {
            Ok(granule) => Some(granule),
            // The cache let go of the entry while this registration ran: before a write, the
            // pages may have stayed pinned under it and kept the old bytes.
            Err((granule, why)) => {
                if why == Retire::Changed {
                    granule.evict.arm(&self.local);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn open(path: &std::path::Path) -> Arc<LocalFile> {
        let f = std::fs::File::open(path).unwrap();
        Arc::new(LocalFile::new(f, path.to_owned(), true, false))
    }

    #[test]
    fn entries_follow_the_file_version() {
        let cache = Arc::new(DmaCache::default());
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        let empty = open(tmp.path());
        assert!(
            cache.read(&empty, 1 << 30).is_none(),
            "an empty file has nothing to map"
        );
        tmp.write_all(&[1u8; 8192]).unwrap();
        tmp.flush().unwrap();
        let f = open(tmp.path());
        assert!(
            cache.read(&f, 0).is_none(),
            "a zero budget turns the cache off"
        );
        let a = cache.read(&f, 1 << 30).unwrap();
        let b = cache.read(&f, 1 << 30).unwrap();
        assert!(Arc::ptr_eq(&a.file, &b.file), "one entry per file version");
        // A change of size (or mtime/ctime) is a new version: a fresh entry replaces the old.
        tmp.write_all(&[2u8; 4096]).unwrap();
        tmp.flush().unwrap();
        let c = cache.read(&f, 1 << 30).unwrap();
        assert!(!Arc::ptr_eq(&a.file, &c.file));
        assert_eq!(c.file.version.size, 12288);
        assert_eq!(lock(&cache.files).len(), 1);
        // Nothing was registered, so nothing is pinned and trimming is a no-op.
        assert_eq!(cache.registered(), 0);
        cache.trim(0);
        assert!(lock(&cache.files).is_empty());
        // A write through gpufile forgets the file first.
        cache.read(&f, 1 << 30).unwrap();
        let other = tempfile::NamedTempFile::new().unwrap();
        cache.forget(&open(other.path()));
        assert_eq!(
            lock(&cache.files).len(),
            1,
            "another file: nothing to forget"
        );
        cache.forget(&f);
        assert!(lock(&cache.files).is_empty());
    }

    #[test]
    fn a_version_settles_a_tick_after_its_change() {
        let at = |secs: i64, nanos: i64| Version {
            size: 1,
            mtime: (secs, nanos),
            ctime: (secs, nanos),
        };
        let t = UNIX_EPOCH + Duration::new(1_000_000, 500_000_000);
        let fine = at(1_000_000, 500_000_000);
        assert!(!fine.settled(t), "changed now");
        assert!(!fine.settled(t + SETTLE_FINE), "within the margin");
        assert!(fine.settled(t + SETTLE_FINE + Duration::from_millis(1)));
        assert!(
            !fine.settled(t - Duration::from_secs(1)),
            "changed in the future"
        );
        let coarse = at(1_000_000, 0);
        assert!(!coarse.settled(UNIX_EPOCH + Duration::from_secs(1_000_001)));
        assert!(coarse.settled(UNIX_EPOCH + Duration::from_secs(1_000_003)));
        assert!(!at(-5, 0).settled(t), "before 1970: not trusted");
        assert!(!at(i64::MAX, 1).settled(t), "no overflow");
    }

    /// Timestamps come from a clock that advances in ticks (1–10 ms; 1 s on some file systems),
    /// so a file truncated and rewritten (or written with O_DIRECT, or deleted and its inode
    /// number reused) within the tick of its last change keeps (size, mtime, ctime): pages
    /// registered then would be orphaned by the kernel and still read by the GPU. A file whose
    /// last change is that recent is not registered yet: a change after the registration then
    /// always gets a later ctime.
    #[test]
    fn a_file_changed_within_a_timestamp_tick_is_not_registered_yet() {
        let cache = Arc::new(DmaCache::default());
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&[1u8; 8192]).unwrap();
        tmp.flush().unwrap();
        let f = open(tmp.path());
        let first = cache.read(&f, 1 << 30).unwrap();
        assert!(!first.may_register, "a first read never registers");
        let again = cache.read(&f, 1 << 30).unwrap();
        assert!(
            !again.may_register,
            "read again within a tick of its last change: a rewrite now could keep its version"
        );
        std::thread::sleep(std::time::Duration::from_millis(60));
        let later = cache.read(&f, 1 << 30).unwrap();
        assert!(Arc::ptr_eq(&first.file, &later.file), "the same version");
        assert!(later.may_register, "settled: a later change would show");
    }

    #[test]
    fn a_retired_entry_publishes_no_granule_and_a_change_outranks_an_eviction() {
        let mut gs = Granules::<u32>::default();
        assert_eq!(*gs.publish(0, 10).unwrap(), 10);
        let taken = gs.retire(Retire::Changed);
        assert_eq!(taken.keys().copied().collect::<Vec<_>>(), [0]);
        // A registration that ran across the retirement gets its granule back, with the reason.
        assert_eq!(gs.publish(1, 11).unwrap_err(), (11, Retire::Changed));
        assert!(gs.map.is_empty());
        gs.retire(Retire::Evicted);
        assert_eq!(gs.retired, Some(Retire::Changed));
        let mut ev = Granules::<u32>::default();
        ev.retire(Retire::Evicted);
        assert_eq!(ev.publish(2, 12).unwrap_err(), (12, Retire::Evicted));
    }

    /// The race of a write with a running read, step by step: the read holds its entry (as a
    /// worker between `span` and the end of a registration does), the write forgets the file,
    /// and only then would the read publish. The entry it holds is retired, so the granule is
    /// refused (`register` then unregisters it and evicts its range); a read after the write
    /// gets a fresh entry.
    #[test]
    fn a_read_running_when_a_write_forgets_the_file_cannot_publish_into_the_dropped_entry() {
        let cache = Arc::new(DmaCache::default());
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&[1u8; 8192]).unwrap();
        tmp.flush().unwrap();
        let f = open(tmp.path());
        let running = cache.read(&f, 1 << 30).unwrap();
        assert_eq!(lock(&running.file.granules).retired, None);
        cache.forget(&f);
        assert_eq!(lock(&running.file.granules).retired, Some(Retire::Changed));
        let after = cache.read(&f, 1 << 30).unwrap();
        assert!(!Arc::ptr_eq(&running.file, &after.file));
        assert_eq!(lock(&after.file.granules).retired, None);
        // A new version retires the old entry as changed; trimming retires as evicted.
        tmp.write_all(&[2u8; 4096]).unwrap();
        tmp.flush().unwrap();
        let newer = cache.read(&f, 1 << 30).unwrap();
        assert_eq!(lock(&after.file.granules).retired, Some(Retire::Changed));
        cache.trim(0);
        assert_eq!(lock(&newer.file.granules).retired, Some(Retire::Evicted));
    }
}
