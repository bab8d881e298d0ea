//! Device pointers through the C ABI (skipped without a CUDA device): a `cudaMalloc`-style
//! address given to `gpufile_file_read` / `gpufile_file_pread` is classified by the driver
//! and read into on the GPU paths; a size past its allocation is refused before any byte
//! moves.

use std::ptr;

use gpufile::*;

#[path = "../../gpufile/tests/common/gpu.rs"]
mod gpu;
use gpu::require_gpu;

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn device_memory_is_read_into_and_a_size_past_its_allocation_refused() {
    require_gpu();
    let len = 3 << 20;
    let want: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("device.bin");
    std::fs::write(&path, &want).expect("write the file");
    let c_path = std::ffi::CString::new(path.to_str().expect("a UTF-8 path")).expect("no NUL");
    let dev = gpufile_core::DeviceBuffer::new(len, 0).expect("device memory");
    let addr = dev.addr() as usize as *mut std::ffi::c_void;

    let mut file = ptr::null_mut();
    // SAFETY: NUL-terminated strings and a valid out-pointer.
    let s = unsafe { gpufile_file_open(c_path.as_ptr(), c"r".as_ptr(), &mut file) };
    assert_eq!(s, gpufile_status::GPUFILE_OK);
    let mut n = 0usize;
    // SAFETY: `addr` is `len` bytes of device memory, unused meanwhile.
    let s = unsafe { gpufile_file_read(file, addr, len, 0, &mut n) };
    assert_eq!(s, gpufile_status::GPUFILE_OK);
    assert_eq!(n, len);
    let mut got = vec![0u8; len];
    dev.copy_to_host(0, &mut got).expect("copy back");
    assert!(got == want, "the device buffer differs from the file");

    // pread into the second half, at an offset of the file.
    dev.fill(0).expect("clear");
    let mut fut = ptr::null_mut();
    let half = len / 2;
    // SAFETY: `addr + half` holds `half` bytes of device memory until the future is done.
    let s = unsafe { gpufile_file_pread(file, addr.wrapping_byte_add(half), half, 5, &mut fut) };
    assert_eq!(s, gpufile_status::GPUFILE_OK);
    // SAFETY: a valid out-pointer.
    let s = unsafe { gpufile_future_wait_for(fut, 60_000_000_000, &mut n) };
    assert_eq!((s, n), (gpufile_status::GPUFILE_OK, half));
    assert_eq!(gpufile_future_free(fut), gpufile_status::GPUFILE_OK);
    dev.copy_to_host(0, &mut got).expect("copy back");
    assert!(got[..half].iter().all(|b| *b == 0));
    assert!(got[half..] == want[5..5 + half]);

    // One byte past the allocation: refused, the buffer untouched.
    dev.fill(0).expect("clear");
    // SAFETY: the call must refuse the range before touching it.
    let s = unsafe { gpufile_file_read(file, addr.wrapping_byte_add(1), len, 0, &mut n) };
    assert_eq!(s, gpufile_status::GPUFILE_BAD_ARGUMENT);
    dev.copy_to_host(0, &mut got).expect("copy back");
    assert!(got.iter().all(|b| *b == 0));
    assert_eq!(gpufile_file_close(file), gpufile_status::GPUFILE_OK);
}
