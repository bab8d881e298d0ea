//! Device memory through gpufile's POSIX path, from Rust alone. Each test returns early (and
//! says why) where no CUDA device is usable, as on CI.

use std::io::Write;

use gpufile::cuda::{self, DeviceBuffer};
use gpufile::{Buffer, CompatMode, Engine, FileHandle, Request, Settings};

mod common;
use common::pattern;

/// `req` on `h`, on the process engine, under `settings` (`None`: the defaults).
///
/// # Safety
/// As for [`Engine::submit`].
unsafe fn submit(
    h: &FileHandle,
    req: Request,
    settings: Option<&gpufile::Settings>,
) -> gpufile::Result<gpufile::IoFuture> {
    let engine = Engine::global()?;
    let defaults = engine.shared_settings();
    let settings = settings.unwrap_or(&defaults);
    // SAFETY: the caller's contract.
    unsafe { engine.submit(&h.endpoint(req.direction), req, settings) }
}

fn gpu() -> bool {
    match cuda::device_count() {
        Ok(n) if n > 0 => true,
        Ok(_) => {
            eprintln!("skipped: no CUDA device");
            false
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

fn on_posix_path() -> Settings {
    Settings {
        compat_mode: CompatMode::On,
        ..Engine::global().unwrap().settings()
    }
}

#[test]
fn device_read_write_round_trip_with_offsets() {
    if !gpu() {
        return;
    }
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
    let out = tempfile::NamedTempFile::new().unwrap();
    let w = FileHandle::open(out.path(), "w").unwrap();
    let buffer = Buffer::Device {
        addr: dev.addr(),
        len: data.len(),
    };
    let req = Request::write(buffer, 0).task_size(Some(3 << 20));
    // SAFETY: `dev` outlives the wait.
    unsafe { submit(&w, req, Some(&settings)) }
        .unwrap()
        .wait()
        .unwrap();
    assert!(std::fs::read(out.path()).unwrap() == data);
}

#[test]
fn classify_knows_device_and_host_memory() {
    if !gpu() {
        return;
    }
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
