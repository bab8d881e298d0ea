//! Device memory from Rust alone: gpufile's POSIX path (the bounce executor), the cuFile
//! executor and the CUDA wrappers. Each test is ignored unless asked for (`--include-ignored`,
//! on the GPU machine), and fails there where no CUDA device is usable, or, for the cuFile
//! ones, where cuFile cannot be used.

use std::io::Write;

use gpufile::__private::cuda::{self, Event, PinnedBuffer, Stream};
use gpufile::__private::cufile::{self, RegisteredFile};
use gpufile::__private::plan::Availability;
use gpufile::DeviceBuffer;
use gpufile::{Buffer, CompatMode, Engine, Error, FileHandle, Request, Settings};

// The name common/gpu.rs gives the core crate (the C API's tests share that file).
extern crate gpufile as gpufile_core;

mod common;
#[path = "common/gpu.rs"]
mod gpu;
use common::{pattern, submit};
use gpu::{on_posix_path, require_gpu};

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn device_read_write_round_trip_with_offsets() {
    require_gpu();
    let settings = on_posix_path();
    let data = pattern((9 << 20) + 5, 1);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&data).unwrap();
    let dev = DeviceBuffer::new(data.len(), 0).unwrap();
    dev.fill(0).unwrap();
    let h = FileHandle::open(f.path(), "r+").unwrap();
    let buffer = Buffer::Device {
        addr: dev.addr() + 100,
        len: data.len() - 200,
    };
    let req = Request::read(buffer, 50).task_size(Some(1 << 20));
    // SAFETY: `dev` outlives the wait.
    let n = unsafe { submit(&h, req, Some(&settings)) }
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(n, data.len() - 200);
    let mut back = vec![0u8; data.len()];
    dev.copy_to_host(0, &mut back).unwrap();
    assert!(back[..100].iter().all(|b| *b == 0));
    assert!(back[100..data.len() - 100] == data[50..data.len() - 150]);

    dev.copy_from_host(0, &data).unwrap();
    write_back_and_compare(&dev, &data, &settings);
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn classify_knows_device_and_host_memory() {
    require_gpu();
    let dev = DeviceBuffer::new(4096, 0).unwrap();
    let info = cuda::classify(dev.addr() + 10).unwrap();
    assert_eq!(info.kind, cuda::MemoryKind::Device);
    assert_eq!(info.device, Some(0));
    assert_eq!(info.base, dev.addr());
    assert!(info.size >= 4096);
    let host = [0u8; 16];
    assert_eq!(
        cuda::classify(host.as_ptr() as u64).unwrap().kind,
        cuda::MemoryKind::Host
    );
}

/// Reads `len` bytes at `offset` of `path` into a fresh device buffer at `dev_offset` with
/// `settings`; returns what the buffer holds afterwards.
fn read_to_device(
    path: &std::path::Path,
    offset: u64,
    len: usize,
    dev_offset: usize,
    task_size: usize,
    settings: &Settings,
) -> Vec<u8> {
    let dev = DeviceBuffer::new(dev_offset + len + 64, 0).unwrap();
    dev.fill(0xEE).unwrap();
    let h = FileHandle::open(path, "r").unwrap();
    let buffer = Buffer::Device {
        addr: dev.addr() + dev_offset as u64,
        len,
    };
    let req = Request::read(buffer, offset).task_size(Some(task_size));
    // SAFETY: `dev` outlives the wait.
    let n = unsafe { submit(&h, req, Some(settings)) }
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(n, len);
    let mut back = vec![0u8; dev.len()];
    dev.copy_to_host(0, &mut back).unwrap();
    assert!(
        back[..dev_offset].iter().all(|b| *b == 0xEE),
        "bytes before the range written"
    );
    assert!(
        back[dev_offset + len..].iter().all(|b| *b == 0xEE),
        "bytes after the range written"
    );
    back[dev_offset..dev_offset + len].to_vec()
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn bounce_reads_awkward_sizes_offsets_and_buffers() {
    require_gpu();
    let data = pattern((3 << 20) + 4097, 7);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&data).unwrap();
    for (bounce, dma_cache_size) in [(16 << 20, 0), (4096, 0), (64 << 10, 0), (16 << 20, 1 << 30)] {
        let settings = Settings {
            bounce_buffer_size: bounce,
            dma_cache_size,
            ..on_posix_path()
        };
        for (offset, len, dev_offset, task_size) in [
            (0, data.len(), 0, 4 << 20),
            (0, data.len(), 0, 199),
            (1, 1, 3, 1),
            (4095, (1 << 20) + 3, 17, 1 << 20),
            (13, data.len() - 13, 4096, 3 << 20),
        ] {
            // Twice: a second read of the same range may take the page-cache DMA path.
            for _ in 0..2 {
                let got = read_to_device(f.path(), offset, len, dev_offset, task_size, &settings);
                let at = offset as usize;
                assert!(
                    got == data[at..at + len],
                    "bounce {bounce}, dma {dma_cache_size}: {offset}+{len} at {dev_offset}, \
                     tasks of {task_size}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn bounce_writes_awkward_sizes_and_offsets() {
    require_gpu();
    let data = pattern((2 << 20) + 333, 9);
    let dev = DeviceBuffer::new(data.len(), 0).unwrap();
    dev.copy_from_host(0, &data).unwrap();
    for (bounce, task_size, dev_offset, file_offset) in [
        (16 << 20, 4 << 20, 0, 0),
        (4096, 199, 5, 3),
        (64 << 10, 1 << 20, 4096, 4097),
    ] {
        let settings = Settings {
            bounce_buffer_size: bounce,
            ..on_posix_path()
        };
        let out = tempfile::NamedTempFile::new().unwrap();
        let w = FileHandle::open(out.path(), "w").unwrap();
        let len = data.len() - dev_offset;
        let buffer = Buffer::Device {
            addr: dev.addr() + dev_offset as u64,
            len,
        };
        let req = Request::write(buffer, file_offset).task_size(Some(task_size));
        // SAFETY: `dev` outlives the wait.
        let n = unsafe { submit(&w, req, Some(&settings)) }
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(n, len);
        let written = std::fs::read(out.path()).unwrap();
        assert_eq!(written.len(), file_offset as usize + len);
        assert!(written[..file_offset as usize].iter().all(|b| *b == 0));
        assert!(
            written[file_offset as usize..] == data[dev_offset..],
            "bounce {bounce}, tasks of {task_size}, from {dev_offset} to {file_offset}"
        );
    }
}

/// Writes all of `dev` (holding `data`) to a new file in 3 MiB tasks under `settings`, and
/// checks that the file holds `data`.
fn write_back_and_compare(dev: &DeviceBuffer, data: &[u8], settings: &Settings) {
    let out = tempfile::NamedTempFile::new_in(scratch_dir()).unwrap();
    let w = FileHandle::open(out.path(), "w").unwrap();
    let buffer = Buffer::Device {
        addr: dev.addr(),
        len: data.len(),
    };
    let req = Request::write(buffer, 0).task_size(Some(3 << 20));
    // SAFETY: `dev` outlives the wait.
    let n = unsafe { submit(&w, req, Some(settings)) }
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(n, data.len());
    assert!(std::fs::read(out.path()).unwrap() == data);
}

/// A folder on a disk (cuFile refuses tmpfs, where `/tmp` may be): the build's scratch folder,
/// made where the test binary runs on another machine than the one that built it.
fn scratch_dir() -> &'static std::path::Path {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(dir).unwrap();
    dir
}

/// A file holding `data` on the build's disk (cuFile refuses tmpfs, where `/tmp` may be), that
/// cuFile registers, and what keeps it registrable. Panics (the test fails) where cuFile cannot
/// be used: no GPU, no libcufile, or a disk it does not register. cuFile needs udev's entry for
/// the disk (see DEVICE.md): where it is missing and the test runs as root, as on the GPU
/// machine, the test writes it (the two properties udevd would have) for as long as a test here
/// needs it.
fn cufile_file(data: &[u8]) -> (tempfile::NamedTempFile, UdevEntry) {
    require_gpu();
    if let Availability::Unavailable(why) = cufile::availability() {
        panic!("cuFile cannot be used here, and this test needs it: {why}");
    }
    let mut f = tempfile::NamedTempFile::new_in(scratch_dir()).unwrap();
    f.write_all(data).unwrap();
    f.flush().unwrap();
    let udev = UdevEntry::for_file(f.path());
    let file = std::fs::File::open(f.path()).unwrap();
    use std::os::fd::AsRawFd;
    if let Err(e) = RegisteredFile::register(file.as_raw_fd()) {
        panic!("cuFile refuses the test file ({e}); {}", udev.what);
    }
    (f, udev)
}

/// udev's database entry for a file's disk while a test needs it: written by the first test (as
/// root, where it is missing), removed when the last one ends.
struct UdevEntry {
    path: std::path::PathBuf,
    /// What was done about the entry (said when cuFile still refuses the file).
    what: String,
}

/// How many tests hold the entry this process wrote (`None`: it wrote none).
static UDEV_USERS: std::sync::Mutex<Option<usize>> = std::sync::Mutex::new(None);

impl UdevEntry {
    fn for_file(file: &std::path::Path) -> UdevEntry {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(file).unwrap().dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let path = std::path::PathBuf::from(format!("/run/udev/data/b{major}:{minor}"));
        let mut users = UDEV_USERS.lock().unwrap_or_else(|e| e.into_inner());
        let what = if let Some(n) = users.as_mut() {
            *n += 1;
            format!("{} written by this test binary", path.display())
        } else if path.exists() {
            format!("{} exists", path.display())
        } else {
            let written = std::fs::create_dir_all(path.parent().unwrap()).and_then(|()| {
                std::fs::write(&path, "E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=ext4\n")
            });
            match written {
                Ok(()) => {
                    *users = Some(1);
                    format!("{} written by this test binary", path.display())
                }
                Err(e) => format!("{} is missing and cannot be written ({e})", path.display()),
            }
        };
        UdevEntry { path, what }
    }
}

impl Drop for UdevEntry {
    fn drop(&mut self) {
        let mut users = UDEV_USERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = users.as_mut() {
            *n -= 1;
            if *n == 0 {
                let _ = std::fs::remove_file(&self.path);
                *users = None;
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn cufile_executor_reads_and_writes_with_offsets() {
    let data = pattern((5 << 20) + 11, 3);
    let (f, _udev) = cufile_file(&data);
    // OFF: cuFile or an error, never gpufile's POSIX path.
    let settings = Settings {
        compat_mode: CompatMode::Off,
        gds_threshold: 0,
        ..Engine::global().unwrap().settings()
    };
    for (offset, len, dev_offset, task_size) in [
        (0, data.len(), 0, 4 << 20),
        (4096, 1 << 20, 4096, 1 << 20),
        (7, 100_000, 13, 4099),
    ] {
        let got = read_to_device(f.path(), offset, len, dev_offset, task_size, &settings);
        let at = offset as usize;
        assert!(got == data[at..at + len], "{offset}+{len} at {dev_offset}");
    }

    let dev = DeviceBuffer::new(data.len(), 0).unwrap();
    dev.copy_from_host(0, &data).unwrap();
    write_back_and_compare(&dev, &data, &settings);
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn registered_file_returns_counts_and_typed_errors() {
    let data = pattern(10_000, 5);
    let (f, _udev) = cufile_file(&data);
    let file = std::fs::File::open(f.path()).unwrap();
    use std::os::fd::AsRawFd;
    let reg = RegisteredFile::register(file.as_raw_fd()).unwrap();
    assert!(cufile::registered_files() >= 1);
    let dev = DeviceBuffer::new(16 << 10, 0).unwrap();
    let _ctx = cuda::ContextGuard::push(cuda::primary_context(0).unwrap()).unwrap();
    // SAFETY: the range lies in `dev`, alive for the calls.
    let n = unsafe { reg.read(dev.addr(), 0, 16 << 10, 0) }.unwrap();
    assert!(n > 0 && n <= data.len(), "read past the end gave {n}");
    let mut back = vec![0u8; n];
    dev.copy_to_host(0, &mut back).unwrap();
    assert!(back == data[..n]);
    // SAFETY: as above.
    let at_end = unsafe { reg.read(dev.addr(), 0, 4096, data.len() as u64) }.unwrap();
    assert_eq!(at_end, 0, "a read at the end of the file moves nothing");
    // A read-only descriptor cannot be written: an error, never a count.
    // SAFETY: as above.
    let e = unsafe { reg.write(dev.addr(), 0, 4096, 0) }.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Cufile {
                call: "cuFileWrite",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn pinned_copies_on_a_stream_round_trip() {
    require_gpu();
    let ctx = cuda::primary_context(0).unwrap();
    assert_eq!(
        cuda::primary_context(0).unwrap(),
        ctx,
        "retained once, the same after"
    );
    let _g = cuda::ContextGuard::push(ctx).unwrap();
    let stream = Stream::new(ctx).unwrap();
    let event = Event::new(ctx).unwrap();
    let len = (1 << 20) + 3;
    let data = pattern(len, 11);
    let up = PinnedBuffer::new(len, ctx).unwrap();
    let down = PinnedBuffer::new(len, ctx).unwrap();
    assert_eq!(
        up.as_ptr() as usize % 4096,
        0,
        "pinned buffers are page-aligned"
    );
    assert_eq!(
        cuda::classify(up.as_ptr() as u64).unwrap().kind,
        cuda::MemoryKind::PinnedHost
    );
    // SAFETY: `up` holds `len` bytes and nothing else uses it.
    unsafe { std::slice::from_raw_parts_mut(up.as_ptr(), len) }.copy_from_slice(&data);
    let dev = DeviceBuffer::new(len, 0).unwrap();
    // SAFETY: both buffers hold `len` bytes and live until the stream is synchronized below.
    unsafe {
        stream.copy_to_device(dev.addr(), up.as_ptr(), len).unwrap();
        stream.copy_to_host(down.as_ptr(), dev.addr(), len).unwrap();
    }
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    stream.synchronize().unwrap();
    // SAFETY: the copies are done; `down` holds `len` bytes.
    let back = unsafe { std::slice::from_raw_parts(down.as_ptr(), len) };
    assert!(back == data);
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn device_buffer_refuses_ranges_outside_it() {
    require_gpu();
    let dev = DeviceBuffer::new(4096, 0).unwrap();
    let mut big = vec![0u8; 4097];
    for e in [
        dev.copy_to_host(0, &mut big).unwrap_err(),
        dev.copy_from_host(1, &big[..4096]).unwrap_err(),
        dev.copy_to_host(usize::MAX, &mut big[..2]).unwrap_err(),
    ] {
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("outside a device buffer")),
            "{e:?}"
        );
    }
    dev.copy_from_host(4095, &[1]).unwrap();
}
