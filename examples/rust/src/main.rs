//! gpufile from Rust: read a file into host memory (whole, and chosen rows), say which path ran
//! and why, save tensors as a safetensors checkpoint and load some of them back, and, where a
//! CUDA device is present, read the file into GPU memory.
//!
//!     cargo run --manifest-path examples/rust/Cargo.toml [DIR]
//!
//! DIR (default: a new directory under the system's temporary directory) receives the files;
//! the program removes what it wrote.

use std::error::Error;
use std::path::PathBuf;

use gpufile::safetensors::{self, Checkpoint, Dtype, HostTensor, SaveOptions};
use gpufile::{Buffer, Direction, Engine, FileHandle, Memory, Ranges, Request};

fn main() -> Result<(), Box<dyn Error>> {
    let dir = match std::env::args_os().nth(1) {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!("gpufile-example-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let result = run(&dir);
    std::fs::remove_dir_all(&dir)?;
    result
}

fn run(dir: &std::path::Path) -> Result<(), Box<dyn Error>> {
    println!("gpufile {}", gpufile::VERSION);
    let engine = Engine::global()?;
    let settings = engine.settings();

    // A file of 1024 rows of 256 bytes.
    let (row, nrows) = (256usize, 1024u64);
    let data: Vec<u8> = (0..row * nrows as usize).map(|i| (i % 251) as u8).collect();
    let path = dir.join("rows.bin");
    std::fs::write(&path, &data)?;

    // The whole file into host memory, and what ran: `observe` counts every request by path.
    let observation = gpufile::observe::begin();
    let f = FileHandle::open(&path, "r")?;
    let mut buf = vec![0u8; f.size()? as usize];
    let n = f.read(&mut buf, 0, None)?;
    assert_eq!(buf, data);
    let report = gpufile::observe::end(observation);
    println!(
        "read {n} bytes; path: {}",
        f.io_path(Memory::Host, n, &settings)?
    );
    println!("observed: {}", report.to_json());

    // Rows 5, 900 and 17 into one packed buffer: one request of three ranges.
    let picked = [5u64, 900, 17];
    let ranges = Ranges::rows(&picked, row, row as u64, 0)?;
    let mut rows = vec![0u8; picked.len() * row];
    let req = Request::read_ranges(Buffer::host(&mut rows), ranges);
    // SAFETY: `rows` stays valid, and untouched by anything else, until `wait` returns.
    let (done, plan) =
        unsafe { engine.submit_reported(&f.endpoint(Direction::Read), req, &settings) }?;
    done.wait()?;
    for (i, &r) in picked.iter().enumerate() {
        let at = r as usize * row;
        assert_eq!(&rows[i * row..(i + 1) * row], &data[at..at + row]);
    }
    println!(
        "rows {picked:?}: {} ranges in {} tasks, path: {}",
        plan.ranges, plan.tasks, plan.path
    );

    // A checkpoint of two tensors in shards of at most 64 KiB, then one tensor loaded back.
    let weight: Vec<u8> = (0..96 * 1024).map(|i| (i % 7) as u8).collect(); // 24576 f32
    let bias = vec![1u8; 4 * 16]; // 16 f32
    let ckpt_dir = dir.join("checkpoint");
    let index = safetensors::save_host_checkpoint(
        &ckpt_dir,
        &[
            HostTensor {
                name: "layer.weight",
                dtype: Dtype::F32,
                shape: &[96, 256],
                data: &weight,
            },
            HostTensor {
                name: "layer.bias",
                dtype: Dtype::F32,
                shape: &[16],
                data: &bias,
            },
        ],
        &SaveOptions {
            max_shard_size: 64 * 1024,
            metadata: None,
            durable: false,
            sizes: None,
            stop: None,
        },
    )?;
    println!("saved: {}", index.to_json());
    let ckpt = Checkpoint::open(&ckpt_dir)?;
    let selection = ckpt.select(&["layer.weight"])?;
    let (bytes, plan) = safetensors::load_host(&ckpt, &selection)?;
    let at = plan.dests[0] as usize;
    assert_eq!(&bytes[at..at + weight.len()], &weight[..]);
    println!(
        "loaded layer.weight ({} bytes) from {} files",
        weight.len(),
        ckpt.files.len()
    );

    // Into GPU memory, where there is a device.
    match gpufile::device_count() {
        Ok(n) if n > 0 => {
            let dev = gpufile::DeviceBuffer::new(data.len(), 0)?;
            let req = Request::read(
                Buffer::Device {
                    addr: dev.addr(),
                    len: data.len(),
                },
                0,
            );
            // SAFETY: `dev` outlives the request: `wait` returns before it is dropped.
            let (done, plan) =
                unsafe { engine.submit_reported(&f.endpoint(Direction::Read), req, &settings) }?;
            done.wait()?;
            let mut back = vec![0u8; data.len()];
            dev.copy_to_host(0, &mut back)?;
            assert_eq!(back, data);
            println!("GPU read: path {}", plan.path);
        }
        Ok(_) => println!("GPU read: skipped (no CUDA device)"),
        Err(e) => println!("GPU read: skipped ({e})"),
    }
    Ok(())
}
