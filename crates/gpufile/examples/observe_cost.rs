//! What observing costs a request, measured in the core (no Python between the calls): 4 KiB
//! random reads and a `read_rows`-shaped gather of 100,000 rows from a hot file into host memory,
//! with no monitor and with one `SummaryMonitor`, rounds alternated, medians printed.
//!
//!     cargo run --release -p gpufile --example observe_cost [-- READS ROUNDS]
//!
//! Also times the check an unwatched request makes (`observe::ops::watching`) and one start and
//! finish delivered to a monitor, alone.

use std::hint::black_box;
use std::time::Instant;

use gpufile::observe::{ops, SummaryMonitor};
use gpufile::{Buffer, Direction, Engine, FileHandle, Ranges, Request};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per call of `f` over `n` calls.
fn per_call(n: usize, mut f: impl FnMut(usize)) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let reads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let path = std::env::temp_dir().join(format!("gpufile-observe-cost-{}", std::process::id()));
    let size: usize = 64 << 20;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &data)?;
    let file = FileHandle::open(&path, "r")?;
    // Page-aligned pseudo-random offsets (an LCG: no dependency).
    let mut x = 12345u64;
    let offsets: Vec<u64> = (0..reads)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % (size as u64 / 4096) * 4096
        })
        .collect();
    let rows: Vec<u64> = (0..100_000u64)
        .map(|i| i.wrapping_mul(2654435761) % (size as u64 / 64))
        .collect();
    let ranges = Ranges::rows(&rows, 64, 64, 0)?;
    let engine = Engine::global()?;
    let settings = engine.shared_settings();
    let endpoint = file.endpoint(Direction::Read);
    let mut buf = vec![0u8; 4096];
    let mut out = vec![0u8; 100_000 * 64];

    let random = |buf: &mut Vec<u8>| {
        per_call(reads, |i| {
            let n = file.read(buf, offsets[i], None).expect("read");
            black_box(n);
        })
    };
    let gather = |out: &mut Vec<u8>| {
        per_call(20, |_| {
            let req = Request::read_ranges(Buffer::host(out), ranges.clone()).caller_waits(true);
            // SAFETY: `out` outlives the wait.
            let fut = unsafe { engine.submit(&endpoint, req, &settings) }.expect("submit");
            black_box(fut.wait().expect("gather"));
        })
    };
    random(&mut buf); // warm
    gather(&mut out);
    let (mut r_off, mut r_on, mut g_off, mut g_on) = (vec![], vec![], vec![], vec![]);
    let mut ops_seen = 0;
    for _ in 0..rounds {
        r_off.push(random(&mut buf));
        g_off.push(gather(&mut out));
        let monitor = SummaryMonitor::new()?;
        r_on.push(random(&mut buf));
        g_on.push(gather(&mut out));
        ops_seen = monitor.get().num_ops;
    }
    assert_eq!(ops_seen, reads as u64 + 20, "every call observed once");
    let o = offsets[reads - 1] as usize;
    assert_eq!(&buf[..], &data[o..o + 4096], "the last random read's bytes");
    let last = rows[rows.len() - 1] as usize * 64;
    assert_eq!(
        &out[out.len() - 64..],
        &data[last..last + 64],
        "the gather's last row"
    );

    let check = per_call(100_000_000, |_| {
        black_box(ops::watching());
    });
    let clock = per_call(10_000_000, |_| {
        black_box(Instant::now());
    });
    let delivery = {
        let monitor = SummaryMonitor::new()?;
        // A 0-byte read is planned and recorded as any read, and moves nothing: with a monitor
        // it is the request's watch, its two deliveries and the monitor's bookkeeping.
        let v = per_call(1_000_000, |i| {
            black_box(file.read(&mut [0u8; 0], i as u64, None).ok());
        });
        drop(monitor);
        v
    };
    let empty = per_call(1_000_000, |i| {
        black_box(file.read(&mut [0u8; 0], i as u64, None).ok());
    });
    std::fs::remove_file(&path)?;

    let (ro, rn, go, gn) = (median(r_off), median(r_on), median(g_off), median(g_on));
    println!("| request | monitor off | monitor on | cost of the monitor |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| 4 KiB random read (hot) | {:.0} ns | {:.0} ns | {:+.0} ns ({:+.1} %) |",
        ro,
        rn,
        rn - ro,
        100.0 * (rn - ro) / ro
    );
    println!(
        "| read_rows, 100,000 rows of 64 B | {:.2} ms | {:.2} ms | {:+.1} us ({:+.2} %) |",
        go / 1e6,
        gn / 1e6,
        (gn - go) / 1e3,
        100.0 * (gn - go) / go
    );
    println!(
        "| a 0-byte read (no I/O) | {:.0} ns | {:.0} ns | {:+.0} ns |",
        empty,
        delivery,
        delivery - empty
    );
    println!("| the unwatched check alone | {check:.2} ns | | |");
    println!("| a clock reading (`Instant::now`), for scale | {clock:.1} ns | | |");
    println!(
        "{}",
        serde_json::json!({"random_4k_ns": [ro, rn], "read_rows_100k_ns": [go, gn],
                           "empty_read_ns": [empty, delivery], "check_ns": check, "clock_ns": clock,
                           "reads": reads, "rounds": rounds})
    );
    Ok(())
}
