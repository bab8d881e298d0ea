//! Stream-ordered requests from Rust alone (`gpufile::__private::stream`): the submit returns at once, the
//! request waits for the work queued on the stream before it, and the work queued after it sees
//! its bytes, for each order the device can do. The stream's earlier work is a wait on a flag
//! the test sets (no kernel needed). Each test is ignored unless asked for (`--include-ignored`,
//! on the GPU machine), and fails there where no CUDA device is usable or the order is refused.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpufile::__private::cuda::{self, Context, PinnedBuffer, Stream};
use gpufile::__private::stream::{self, OnStream, StreamOrder};
use gpufile::DeviceBuffer;
use gpufile::{Buffer, Direction, Engine, Error, FileHandle, Request};

// The name common/gpu.rs gives the core crate (the C API's tests share that file).
extern crate gpufile as gpufile_core;

#[path = "common/gpu.rs"]
mod gpu;
use gpu::{on_posix_path, require_gpu, scaled};

/// Bytes that differ from one test to the next.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Work on a stream that runs until the test lets it go: a wait on a flag of its own.
struct Hold {
    flag: PinnedBuffer,
}

impl Hold {
    fn on(stream: &Stream, ctx: Context) -> Hold {
        let (flag, dev) = PinnedBuffer::new_mapped(4096, ctx).unwrap();
        // SAFETY: a fresh mapped allocation of 4096 bytes.
        unsafe { std::ptr::write_bytes(flag.as_ptr(), 0, 4096) };
        // SAFETY: the flag outlives the stream's wait (released and synchronized below).
        unsafe { cuda::stream_wait_value32(stream.handle(), ctx, dev, 1) }.unwrap();
        Hold { flag }
    }

    fn release(&self) {
        // SAFETY: 4 aligned bytes of the live allocation; the device only reads them.
        unsafe { &*(self.flag.as_ptr() as *const AtomicU32) }.store(1, Ordering::Release);
    }
}

fn queued_read_is_ordered(order: StreamOrder) {
    let data = pattern((4 << 20) + 3, 31);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&data).unwrap();
    let ctx = cuda::primary_context(0).unwrap();
    let s = Stream::new(ctx).unwrap();
    let dev = DeviceBuffer::new(data.len(), 0).unwrap();
    dev.fill(0).unwrap();
    let hold = Hold::on(&s, ctx);
    let h = FileHandle::open(f.path(), "r").unwrap();
    let buffer = Buffer::Device {
        addr: dev.addr(),
        len: data.len(),
    };
    let req = Request::read(buffer, 0).task_size(Some(1 << 20));
    let on = OnStream {
        handle: s.handle(),
        device: Some((ctx, 0)),
    };
    let engine = Engine::global().unwrap();
    let t = Instant::now();
    // SAFETY: `dev` outlives the future's wait below; the stream is live.
    let submitted = unsafe {
        stream::submit(
            &engine,
            h.endpoint(Direction::Read),
            req,
            Arc::new(on_posix_path()),
            on,
            Some(order),
        )
    };
    // A refusal fails the test: the GPU machine's driver (CUDA 12 and later) does both orders,
    // and a test that passed on a refusal would pass with nothing read.
    let (fut, ordering) = match submitted {
        Ok(queued) => queued,
        Err(e) => {
            hold.release();
            s.synchronize().unwrap();
            panic!("stream order {order} refused: {e}");
        }
    };
    assert!(
        t.elapsed() < scaled(Duration::from_millis(50)),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(ordering.order, order, "{}", ordering.reason);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !fut.is_done(),
        "the read ran before the work queued ahead of it"
    );
    let host = PinnedBuffer::new(data.len(), ctx).unwrap();
    // SAFETY: `host` and `dev` live until the stream is synchronized below.
    unsafe { s.copy_to_host(host.as_ptr(), dev.addr(), data.len()) }.unwrap();
    hold.release();
    let r = fut.wait_timeout(Duration::from_secs(30));
    assert_eq!(r.expect("still waiting after 30 s").unwrap(), data.len());
    s.synchronize().unwrap();
    // SAFETY: the copy into `host` is done (the stream is synchronized).
    let got = unsafe { std::slice::from_raw_parts(host.as_ptr(), data.len()) };
    assert!(
        got == &data[..],
        "the copy queued after the read saw other bytes"
    );
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn a_queued_read_waits_for_the_stream_and_the_next_copy_sees_it_wait_value() {
    require_gpu();
    queued_read_is_ordered(StreamOrder::WaitValue);
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn a_queued_read_waits_for_the_stream_and_the_next_copy_sees_it_host_function() {
    require_gpu();
    queued_read_is_ordered(StreamOrder::HostFunction);
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on the GPU machine"]
fn a_read_past_the_end_at_the_call_is_refused_with_nothing_queued() {
    require_gpu();
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&[1u8; 4096]).unwrap();
    let ctx = cuda::primary_context(0).unwrap();
    let s = Stream::new(ctx).unwrap();
    let dev = DeviceBuffer::new(8192, 0).unwrap();
    let h = FileHandle::open(f.path(), "r").unwrap();
    let req = Request::read(
        Buffer::Device {
            addr: dev.addr(),
            len: 8192,
        },
        0,
    );
    let on = OnStream {
        handle: s.handle(),
        device: Some((ctx, 0)),
    };
    let engine = Engine::global().unwrap();
    // SAFETY: `dev` outlives the call; the stream is live.
    let r = unsafe {
        stream::submit(
            &engine,
            h.endpoint(Direction::Read),
            req,
            Arc::new(on_posix_path()),
            on,
            None,
        )
    };
    // Known at the call (no write queued on the stream can make the file longer first).
    assert!(
        matches!(r, Err(Error::UnexpectedEof { .. })),
        "{:?}",
        r.map(|_| ())
    );
    s.synchronize().unwrap();
}
