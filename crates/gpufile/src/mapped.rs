//! Copies out of a shared mapping of a file with stores that bypass the CPU's caches, for small
//! chunks of hot files on their way to a GPU through a pinned bounce buffer.
//!
//! Why: `pread` into a bounce buffer leaves every copied line dirty in the copying core's caches
//! (the kernel copies with ordinary stores); a chunk that fits in the core's L2 cache is then
//! read by the GPU line by line out of that cache, which is what made a 1 MiB read to the GPU
//! cost three times a 1 MiB read into host memory. Copied from a mapping with non-temporal
//! stores, the bytes go to memory and the GPU reads them from there. Measured on one H200
//! (`benches/copy_probe.py`, `benches/gpu_bench.py --only random,files`): random 1 MiB reads
//! 27.7k → 37.2k IOPS, 64 KiB 84k → 109k, the 256 × 4 MiB open/read/close loop +10 %. Large
//! chunks gain nothing and pay the mapping's page faults (hot 4 GiB reads fell from 46 to 40 GB/s
//! when every chunk went this way), and 4 KiB reads lose (132k → 103k IOPS: the residency check
//! and a page fault cost more than a 4 KiB `pread`), so only chunks from [`MAPPED_COPY_MIN`] to
//! [`MAPPED_COPY_MAX`] do.
//!
//! Safety against a file that shrinks: a page of a mapping past the file's end raises `SIGBUS`.
//! Every copy registers its thread and source range in a lock-free table; gpufile's `SIGBUS`
//! handler, for a fault inside a range registered by the faulting thread, marks that mapping
//! poisoned and maps a page of zeros over the faulting page, so the copy runs to its end; the
//! copy then reports the mapping poisoned and the caller reads the chunk with `pread` instead
//! (which reads what the file holds now, or fails with a typed error), and drops the mapping.
//! (A file cut to an end inside a page faults nowhere: the page's tail reads as zeros; the
//! caller compares the file's size after the copy.) Any other `SIGBUS` goes to the action that
//! was installed before gpufile's, as the kernel would deliver it (its mask, `SA_NODEFER`,
//! `SA_RESETHAND`; ignored if sent while ignored; the default kills the process). The
//! handler is installed on the first mapped copy; a handler installed later by someone else
//! (Python's `faulthandler.enable()` after that point) takes precedence, and a truncation race
//! then ends as it would with any mapping.
//!
//! A page the mapping has touched stays mapped while its file is open, and the kernel does not
//! drop mapped pages from the page cache (`posix_fadvise(DONTNEED)`, `vm.drop_caches`), so
//! gpufile's own drops ([`crate::pagecache::drop_file_page_cache`],
//! [`crate::pagecache::drop_system_page_cache`]) unmap every copy mapping first
//! ([`release_all`]); a drop made outside gpufile leaves those pages cached until the file is
//! closed, as with any program that maps the file.

use std::ptr;
use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Arc, Mutex, OnceLock, RwLock, TryLockError, Weak};
use std::time::{Duration, Instant};

use crate::pagecache::{self, FileMapping};

/// The smallest chunk copied from a mapping (smaller ones are read with `pread`): 4 KiB random
/// reads lost a fifth of their rate, 64 KiB ones gained 5-30 %.
pub const MAPPED_COPY_MIN: usize = 64 << 10;

/// The largest chunk copied from a mapping (larger ones are read with `pread`): measured gains at
/// 64 KiB and 1 MiB, a loss at 4 MiB (page faults on a fresh mapping cost more than the dirty
/// lines a chunk larger than a core's L2 cache leaves behind).
pub const MAPPED_COPY_MAX: usize = 1 << 20;

/// Copies `len` bytes with stores that bypass the CPU's caches (x86-64: SSE2 streaming stores,
/// then a store fence), for bytes a device reads next; a plain copy elsewhere.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes; the ranges must not overlap.
pub unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: every access below lies within the `len` bytes of the caller's contract; SSE2 is
    // part of x86-64's baseline; loads are unaligned, stores are 16-byte aligned (`head`).
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = ((16 - (dst as usize & 15)) & 15).min(len);
        ptr::copy_nonoverlapping(src, dst, head);
        let (mut d, mut s, mut n) = (dst.add(head), src.add(head), len - head);
        while n >= 64 {
            let a = _mm_loadu_si128(s.cast::<__m128i>());
            let b = _mm_loadu_si128(s.add(16).cast::<__m128i>());
            let c = _mm_loadu_si128(s.add(32).cast::<__m128i>());
            let e = _mm_loadu_si128(s.add(48).cast::<__m128i>());
            _mm_stream_si128(d.cast::<__m128i>(), a);
            _mm_stream_si128(d.add(16).cast::<__m128i>(), b);
            _mm_stream_si128(d.add(32).cast::<__m128i>(), c);
            _mm_stream_si128(d.add(48).cast::<__m128i>(), e);
            d = d.add(64);
            s = s.add(64);
            n -= 64;
        }
        while n >= 16 {
            _mm_stream_si128(d.cast::<__m128i>(), _mm_loadu_si128(s.cast::<__m128i>()));
            d = d.add(16);
            s = s.add(16);
            n -= 16;
        }
        ptr::copy_nonoverlapping(s, d, n);
        _mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// Why a mapped copy did not happen; the caller reads the chunk another way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// The range is not (entirely) in the page cache, or lies past the mapping.
    NotResident,
    /// The `SIGBUS` guard is not available (not installed, or every slot busy).
    Unguarded,
    /// A page of the mapping vanished (the file shrank): drop the mapping.
    Poisoned,
}

/// A shared read-only mapping of a whole file that chunks are copied out of, guarded.
#[derive(Debug)]
pub struct CopyMapping {
    map: FileMapping,
    /// Set by the `SIGBUS` handler when a page of this mapping faulted (its address is in the
    /// guard table while a copy runs, so the value must not move: it is boxed).
    poisoned: Box<AtomicBool>,
}

impl CopyMapping {
    /// Maps the first `len` bytes of `fd`.
    pub fn new(fd: std::os::fd::RawFd, len: usize) -> std::io::Result<CopyMapping> {
        Ok(CopyMapping {
            map: FileMapping::new(fd, 0, len)?,
            poisoned: Box::new(AtomicBool::new(false)),
        })
    }

    /// Bytes mapped (the file's size when mapped).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether a page of the mapping faulted since it was made.
    pub fn poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// Copies `dst.len()` bytes at `offset` of the file into `dst` with non-temporal stores, if
    /// every page of the range is in the page cache and the guard is available.
    pub fn copy_to(&self, dst: &mut [u8], offset: usize) -> Result<(), Miss> {
        let len = dst.len();
        let page = pagecache::page_size() as usize;
        let start = offset / page * page;
        let end = offset.checked_add(len).ok_or(Miss::NotResident)?;
        if end > self.map.len() || !self.map.all_resident(start, end - start) {
            return Err(Miss::NotResident);
        }
        if self.poisoned() {
            return Err(Miss::Poisoned);
        }
        let src = self.map.addr() + offset;
        let Some(_slot) = Guard::enter(src, len, &self.poisoned) else {
            return Err(Miss::Unguarded);
        };
        // SAFETY: `[src, src + len)` lies in the live mapping (end <= len above); `dst` is an
        // exclusive slice of `len` bytes of the caller's memory, which no file mapping of this
        // value overlaps. A page that vanishes under the copy raises SIGBUS, which the handler
        // turns into a page of zeros and the poison flag checked below (the slot registers the
        // range until `_slot` drops, after the check).
        unsafe { copy_nontemporal(dst.as_mut_ptr(), src as *const u8, len) };
        // A page this copy read may have been replaced with zeros by another thread's handler
        // (both copying the same vanished page): its flag store came before that `mmap`, and
        // this fence keeps the copy's loads before the load of the flag.
        fence(Ordering::SeqCst);
        if self.poisoned() {
            return Err(Miss::Poisoned);
        }
        Ok(())
    }
}

/// A file's copy mapping, shared with the registry that [`release_all`] empties.
pub type MapSlot = RwLock<Option<Arc<CopyMapping>>>;

static REGISTRY: Mutex<Vec<Weak<MapSlot>>> = Mutex::new(Vec::new());

/// Puts `map` in `slot` and registers the slot so [`release_all`] can empty it; false (and
/// nothing put) where the registry is busy (a child forked while its parent held it), so that
/// every mapping in use can be released.
pub fn install_in(slot: &Arc<MapSlot>, map: Arc<CopyMapping>) -> bool {
    let Ok(mut reg) = REGISTRY.try_lock() else {
        return false;
    };
    let Ok(mut s) = slot.write() else {
        return false;
    };
    let known = reg
        .iter()
        .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(slot)));
    if !known {
        reg.retain(|w| w.strong_count() > 0);
        reg.push(Arc::downgrade(slot));
    }
    *s = Some(map);
    true
}

/// Held by tests that call [`release_all`] (which empties every file's slot) or check that a
/// slot is filled, so that one does not empty another's slot mid-test.
#[cfg(test)]
pub(crate) fn release_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Unmaps every copy mapping (each is unmapped once the copies using it now end; the next chunk
/// maps its file anew), so a page-cache drop can drop their pages. Gives up after about a
/// second if the registry or a file's slot stays busy (a forked child whose parent held one
/// would otherwise wait for ever).
pub fn release_all() {
    let deadline = Instant::now() + Duration::from_secs(1);
    let Some(mut reg) = retry_until(deadline, || match REGISTRY.try_lock() {
        Ok(r) => Some(r),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }) else {
        return;
    };
    for slot in reg.iter().filter_map(Weak::upgrade) {
        let s = retry_until(deadline, || match slot.try_write() {
            Ok(s) => Some(s),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        });
        if let Some(mut s) = s {
            s.take();
        }
    }
    reg.retain(|w| w.strong_count() > 0);
}

/// `f()` until it gives a value, every millisecond until `deadline` (then `None`).
fn retry_until<T>(deadline: Instant, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Copies in flight at once that the guard can cover; more fall back to `pread`.
const SLOTS: usize = 256;

/// One registered copy: the thread copying (0: free slot), its source range and its mapping's
/// poison flag. Only the owner writes the other fields, and the handler reads only the slots
/// of the thread it runs on (a fault's `SIGBUS` goes to the faulting thread): it never sees a
/// slot half-written or released under it by another thread.
struct Slot {
    owner: AtomicUsize,
    start: AtomicUsize,
    end: AtomicUsize,
    poison: AtomicPtr<AtomicBool>,
}

#[allow(clippy::declare_interior_mutable_const)] // a template for the array below
const FREE: Slot = Slot {
    owner: AtomicUsize::new(0),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    poison: AtomicPtr::new(ptr::null_mut()),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
/// Where the search for a free slot starts (spreads threads over the table).
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// 0: not installed; 1: being installed; 2: installed; 3: installation failed.
static STATE: AtomicU8 = AtomicU8::new(0);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The `SIGBUS` action in place before gpufile's (what a fault outside a guarded copy gets).
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
/// The previous action had `SA_RESETHAND` and has run: it is `SIG_DFL` now.
static PREVIOUS_RESET: AtomicBool = AtomicBool::new(false);

/// The calling thread, as the handler (running on the faulting thread) finds it again; never 0.
/// `pthread_self` reads the thread pointer (no lock, no allocation, no lazy TLS).
fn this_thread() -> usize {
    // SAFETY: pthread_self has no arguments and cannot fail.
    unsafe { libc::pthread_self() as usize }
}

/// A registered copy; unregistered on drop.
struct Guard(&'static Slot);

impl Guard {
    /// Registers `[addr, addr + len)` for a copy whose faults poison `poison`; `None` when the
    /// handler is not installed or every slot is taken.
    fn enter(addr: usize, len: usize, poison: &AtomicBool) -> Option<Guard> {
        if !install() {
            return None;
        }
        let (me, p) = (this_thread(), ptr::from_ref(poison).cast_mut());
        let first = NEXT.fetch_add(1, Ordering::Relaxed);
        let guard = (0..SLOTS).find_map(|i| {
            let slot = &TABLE[(first + i) % SLOTS];
            slot.owner
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .ok()?;
            // Read back only by this thread's own handler: program order suffices.
            slot.start.store(addr, Ordering::Relaxed);
            slot.end.store(addr + len, Ordering::Relaxed);
            slot.poison.store(p, Ordering::Relaxed);
            Some(Guard(slot))
        });
        // The copy's loads stay after the registration (a handler runs between instructions).
        compiler_fence(Ordering::SeqCst);
        guard
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        compiler_fence(Ordering::SeqCst); // the copy's loads stay before the release
        self.0.poison.store(ptr::null_mut(), Ordering::Relaxed);
        self.0.end.store(0, Ordering::Relaxed);
        self.0.start.store(0, Ordering::Relaxed);
        self.0.owner.store(0, Ordering::Release);
    }
}

/// Clears the table in a forked child (the parent's copies in flight are not the child's).
pub(crate) fn forget_in_child() {
    for slot in &TABLE {
        slot.owner.store(0, Ordering::Relaxed);
        slot.end.store(0, Ordering::Relaxed);
        slot.start.store(0, Ordering::Relaxed);
        slot.poison.store(ptr::null_mut(), Ordering::Relaxed);
    }
}

/// Installs the handler once; whether it is installed. Never blocks: a caller that finds the
/// installation under way (or a child forked during it) copies another way.
fn install() -> bool {
    match STATE.load(Ordering::Acquire) {
        2 => return true,
        0 => {}
        _ => return false,
    }
    if STATE
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return STATE.load(Ordering::Acquire) == 2;
    }
    // Registers the fork hook that clears the table in a child (`forget_in_child`).
    crate::posix::pid();
    PAGE.store(pagecache::page_size() as usize, Ordering::Relaxed);
    // SAFETY: sigaction with valid (zeroed, then filled) structures; the handler is an
    // `extern "C"` fn that lives for the whole process and only does async-signal-safe work
    // (atomics, mmap, sigaction, raise, and calling the previous handler).
    let ok = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        let read = libc::sigaction(libc::SIGBUS, ptr::null(), &mut old) == 0;
        let _ = PREVIOUS.set(old);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        read && libc::sigaction(libc::SIGBUS, &sa, ptr::null_mut()) == 0
    };
    STATE.store(if ok { 2 } else { 3 }, Ordering::Release);
    ok
}

/// Restores `errno` when dropped (a handler must leave it as the interrupted code had it).
struct SavedErrno(libc::c_int);

impl Drop for SavedErrno {
    fn drop(&mut self) {
        // SAFETY: the calling thread's errno location.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the calling thread's errno location.
    let _errno = SavedErrno(unsafe { *libc::__errno_location() });
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code > 0 {
        // A fault (not a signal someone sent): is it inside a copy of this thread?
        let me = this_thread();
        for slot in &TABLE {
            if slot.owner.load(Ordering::Relaxed) != me {
                continue;
            }
            let (start, end) = (
                slot.start.load(Ordering::Relaxed),
                slot.end.load(Ordering::Relaxed),
            );
            let poison = slot.poison.load(Ordering::Relaxed);
            if addr < start || addr >= end || poison.is_null() {
                continue;
            }
            let page = PAGE.load(Ordering::Relaxed);
            // SAFETY: the flag lives (boxed) as long as its mapping, which this thread holds
            // while its slot is registered. The page lies in that mapping (a private
            // read-only range of this process's address space); replacing it with anonymous
            // zeros lets the faulting copy finish; the mapping is never read again once
            // poisoned (the flag is set first, and every copy checks it after copying).
            unsafe {
                (*poison).store(true, Ordering::SeqCst);
                let p = libc::mmap(
                    (addr & !(page - 1)) as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                );
                if p != libc::MAP_FAILED {
                    return;
                }
            }
        }
    }
    // Not ours: what would have happened without gpufile, as the kernel would deliver it to the
    // previous action (its mask, SA_NODEFER, SA_RESETHAND).
    let Some(prev) = PREVIOUS.get() else {
        return;
    };
    let mut handler = prev.sa_sigaction;
    if prev.sa_flags & libc::SA_RESETHAND != 0 && PREVIOUS_RESET.swap(true, Ordering::Relaxed) {
        handler = libc::SIG_DFL;
    }
    if handler == libc::SIG_IGN && code <= 0 {
        return; // a sent signal the process ignores
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // The default action (a fault cannot be ignored: the kernel kills for it too). The
        // signal is blocked in this handler: raised, it is delivered, with the interrupted
        // context, as this handler returns.
        // SAFETY: sigaction with a valid (zeroed, then filled) structure; raise takes a value.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut dfl.sa_mask);
            libc::sigaction(sig, &dfl, ptr::null_mut());
            libc::raise(sig);
        }
        return;
    }
    // SAFETY: pthread_sigmask with valid sets; the mask in force before this handler comes
    // back when it returns.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &prev.sa_mask, ptr::null_mut());
        if prev.sa_flags & libc::SA_NODEFER != 0 {
            let mut this: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut this);
            libc::sigaddset(&mut this, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &this, ptr::null_mut());
        }
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler with this type.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous handler was installed as a plain handler with this type.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_streaming_copy_matches_a_plain_one_at_every_alignment() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in (0..300).chain([1000, 4095]) {
            for so in 0..17 {
                for d_off in 0..17 {
                    if so + len > src.len() {
                        continue;
                    }
                    let mut dst = vec![0xAAu8; len + 40];
                    // SAFETY: both ranges are in bounds of their vectors and distinct.
                    unsafe {
                        copy_nontemporal(dst.as_mut_ptr().add(d_off), src.as_ptr().add(so), len)
                    };
                    assert_eq!(
                        &dst[d_off..d_off + len],
                        &src[so..so + len],
                        "{len} {so} {d_off}"
                    );
                    assert!(dst[..d_off].iter().all(|&b| b == 0xAA));
                    assert!(dst[d_off + len..].iter().all(|&b| b == 0xAA));
                }
            }
        }
    }

    fn file_of(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        (f, data)
    }

    #[test]
    fn a_hot_range_is_copied_and_one_past_the_mapping_is_not() {
        use std::os::fd::AsRawFd;
        let (f, data) = file_of(64 << 10);
        let m = CopyMapping::new(f.as_file().as_raw_fd(), data.len()).unwrap();
        let mut dst = vec![0u8; 10_000];
        m.copy_to(&mut dst, 1234).unwrap(); // just written: in the page cache
        assert_eq!(dst, data[1234..11_234]);
        assert_eq!(m.copy_to(&mut dst, 60 << 10), Err(Miss::NotResident));
        assert!(!m.poisoned());
    }

    #[test]
    fn a_file_truncated_under_the_mapping_poisons_it_instead_of_killing_the_process() {
        use std::os::fd::AsRawFd;
        let (f, data) = file_of(256 << 10);
        let m = CopyMapping::new(f.as_file().as_raw_fd(), data.len()).unwrap();
        let mut dst = vec![0u8; 128 << 10];
        m.copy_to(&mut dst, 64 << 10).unwrap();
        assert_eq!(dst, data[64 << 10..192 << 10]);
        f.as_file().set_len(0).unwrap();
        // The pages are gone: mincore says so, and nothing is read.
        assert_eq!(m.copy_to(&mut dst, 64 << 10), Err(Miss::NotResident));
        // The race the guard is for: the residency check passed, then the file shrank. Copy
        // straight from the mapping under the guard, as `copy_to` does after its check.
        let src = m.map.addr() + (64 << 10);
        let g = Guard::enter(src, dst.len(), &m.poisoned).expect("guard installed");
        // SAFETY: the range lies in the mapping; its pages fault (past the file's end) and the
        // guard's handler replaces them with zeros.
        unsafe { copy_nontemporal(dst.as_mut_ptr(), src as *const u8, dst.len()) };
        drop(g);
        assert!(m.poisoned());
        assert_eq!(m.copy_to(&mut dst, 0), Err(Miss::NotResident));
    }

    #[test]
    fn a_fault_outside_a_guarded_copy_still_kills_a_process() {
        use std::os::fd::AsRawFd;
        let (f, data) = file_of(64 << 10);
        let m = CopyMapping::new(f.as_file().as_raw_fd(), data.len()).unwrap();
        let mut dst = vec![0u8; 4096];
        m.copy_to(&mut dst, 0).unwrap(); // installs the handler
        f.as_file().set_len(0).unwrap();
        // SAFETY: the child only reads the mapping (which faults: the file is empty) and exits;
        // the parent waits for it.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                let v = std::ptr::read_volatile((m.map.addr() + 8192) as *const u8);
                libc::_exit(i32::from(v) + 100);
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            assert!(libc::WIFSIGNALED(status), "status {status}");
            assert_eq!(libc::WTERMSIG(status), libc::SIGBUS);
        }
    }

    #[test]
    fn a_forked_child_drops_page_caches_even_if_its_parent_held_a_files_slot() {
        let _serial = release_test_lock();
        use std::os::fd::AsRawFd;
        let (f, data) = file_of(64 << 10);
        let slot: Arc<MapSlot> = Arc::new(RwLock::new(None));
        let m = CopyMapping::new(f.as_file().as_raw_fd(), data.len()).unwrap();
        assert!(install_in(&slot, Arc::new(m)));
        // A copy taking its mapping as the process forks.
        let held = slot.read().unwrap();
        // SAFETY: the child only calls release_all (no lock it could wait on for ever, which
        // is what is tested) and exits; the parent waits for it, killing it after 10 s.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                release_all();
                libc::_exit(0);
            }
            let mut status = 0;
            let deadline = Instant::now() + Duration::from_secs(10);
            while libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 {
                if Instant::now() > deadline {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                    panic!("the child waited for its parent's lock");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        }
        drop(held);
        release_all();
        assert!(slot.read().unwrap().is_none(), "released in the parent");
    }

    /// Set in a process started by [`in_new_process`]: the test runs its scenario there.
    const CHILD: &str = "GPUFILE_MAPPED_TEST_CHILD";

    /// Runs test `name` of this binary alone in a new process (whose `SIGBUS` action the
    /// scenario sets before gpufile installs its handler, which a process does only once):
    /// its exit status and what it wrote to stderr; killed (and reported) after 10 s.
    fn in_new_process(name: &str) -> (std::process::ExitStatus, String) {
        use std::io::Read;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("{name}: still running after 10 s (a fault handled in a loop?)");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status, err)
    }

    /// Sets the `SIGBUS` action (before gpufile's handler is installed in this process).
    fn set_sigbus(handler: usize, flags: libc::c_int) {
        // SAFETY: a valid action for SIGBUS; the handler (if any) is a plain `extern "C"` fn.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler;
            sa.sa_flags = flags;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGBUS, &sa, ptr::null_mut()), 0);
        }
    }

    /// Copies the first 128 KiB of `m` under the guard (its file now empty: every page faults),
    /// as `copy_to` does after a residency check that a truncation then overtook.
    fn guarded_copy_of_vanished_pages(m: &CopyMapping) {
        let mut dst = vec![0u8; 128 << 10];
        let g = Guard::enter(m.map.addr(), dst.len(), &m.poisoned).expect("guard installed");
        // SAFETY: the range lies in the mapping; its pages fault (past the file's end) and the
        // guard's handler replaces them with zeros.
        unsafe { copy_nontemporal(dst.as_mut_ptr(), m.map.addr() as *const u8, dst.len()) };
        drop(g);
        assert!(m.poisoned());
    }

    #[test]
    fn a_sigbus_sent_to_a_process_that_ignored_it_is_ignored_and_the_guard_stays() {
        let name = "mapped::tests::a_sigbus_sent_to_a_process_that_ignored_it_is_ignored_and_the_guard_stays";
        if std::env::var_os(CHILD).is_none() {
            let (status, err) = in_new_process(name);
            assert!(status.success(), "{status:?} {err}");
            return;
        }
        use std::os::fd::AsRawFd;
        set_sigbus(libc::SIG_IGN, 0);
        let (f, data) = file_of(256 << 10);
        let m = CopyMapping::new(f.as_file().as_raw_fd(), data.len()).unwrap();
        m.copy_to(&mut vec![0u8; 4096], 0).unwrap(); // installs the handler
                                                     // SAFETY: sends SIGBUS to this process and this thread.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGBUS);
            libc::raise(libc::SIGBUS);
        }
        f.as_file().set_len(0).unwrap();
        guarded_copy_of_vanished_pages(&m);
        // SAFETY: ends the process with its result (what the parent checks).
        unsafe { libc::_exit(0) };
    }

    #[test]
    fn a_previous_handler_with_sa_resethand_runs_once_then_the_fault_kills() {
        let name =
            "mapped::tests::a_previous_handler_with_sa_resethand_runs_once_then_the_fault_kills";
        if std::env::var_os(CHILD).is_none() {
            let (status, err) = in_new_process(name);
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?} {err}");
            assert_eq!(err.matches("previous handler ran").count(), 1, "{err}");
            return;
        }
        extern "C" fn previous(_: libc::c_int) {
            let msg = b"previous handler ran\n";
            // SAFETY: write(2) is async-signal-safe; the buffer is a static string.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        }
        use std::os::fd::AsRawFd;
        set_sigbus(previous as *const () as usize, libc::SA_RESETHAND);
        let (f, data) = file_of(64 << 10);
        let m = CopyMapping::new(f.as_file().as_raw_fd(), data.len()).unwrap();
        m.copy_to(&mut vec![0u8; 4096], 0).unwrap(); // installs the handler
        f.as_file().set_len(0).unwrap();
        // SAFETY: reads the mapping outside a guarded copy: the page faults (the file is empty).
        let v = unsafe { std::ptr::read_volatile((m.map.addr() + 8192) as *const u8) };
        // SAFETY: ends the process (it should have died above).
        unsafe { libc::_exit(i32::from(v) + 100) };
    }

    #[test]
    fn a_guard_covers_the_copying_thread_only() {
        let name = "mapped::tests::a_guard_covers_the_copying_thread_only";
        if std::env::var_os(CHILD).is_none() {
            let (status, err) = in_new_process(name);
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?} {err}");
            return;
        }
        use std::os::fd::AsRawFd;
        set_sigbus(libc::SIG_DFL, 0);
        let (f, data) = file_of(64 << 10);
        let m = CopyMapping::new(f.as_file().as_raw_fd(), data.len()).unwrap();
        m.copy_to(&mut vec![0u8; 4096], 0).unwrap(); // installs the handler
        f.as_file().set_len(0).unwrap();
        let (registered, done) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                // Registers the whole mapping, as a copy in flight on this thread would.
                let _g = Guard::enter(m.map.addr(), m.len(), &m.poisoned).unwrap();
                registered.wait();
                done.wait();
            });
            registered.wait();
            // SAFETY: reads the mapping outside a copy of this thread: the page faults (the
            // file is empty), and another thread's guard must not swallow that.
            let v = unsafe { std::ptr::read_volatile((m.map.addr() + 8192) as *const u8) };
            done.wait();
            // SAFETY: ends the process (it should have died above).
            unsafe { libc::_exit(i32::from(v) + 100) };
        });
    }
}
