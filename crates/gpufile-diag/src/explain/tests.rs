//! The prediction against the spec's examples and the engine's planner, and cuFile's pieces
//! against any request (proptest).

use super::*;
use proptest::prelude::*;

fn spec_exec() -> CufileExecution {
    CufileExecution {
        parallel_io: true,
        max_io_threads: 4,
        min_io_threshold_size_kb: 8192,
        max_request_parallelism: 4,
        source: "test".into(),
    }
}

/// A cufile.json with no keys: cuFile's documented defaults, whatever this machine's says.
fn empty_cufile_json() -> PathBuf {
    static FILE: std::sync::OnceLock<tempfile::NamedTempFile> = std::sync::OnceLock::new();
    let file = FILE.get_or_init(|| {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), "{}").unwrap();
        f
    });
    file.path().to_owned()
}

fn req(size: usize, task: usize) -> Request {
    Request {
        size,
        file_offset: 0,
        memory: Memory::Device,
        device: 0,
        task_size: Some(task),
        num_threads: Some(4),
        compat_mode: Some(CompatMode::Off),
        gds_threshold: Some(16 << 10),
        cufile: CufileAssumption::Nvfs,
        cufile_json: Some(empty_cufile_json()),
        registered_buffer: false,
    }
}

#[test]
fn the_specs_three_examples() {
    let e = spec_exec();
    assert_eq!(e.pieces(4 << 20), vec![4 << 20]);
    assert_eq!(e.pieces(1 << 30), vec![256 << 20; 4]);
    assert_eq!(e.pieces(16 << 20), vec![8 << 20; 2]);

    let x = explain(&req(1 << 30, 4 << 20)).unwrap();
    assert_eq!(x.cufile_requests, Some(256));
    assert_eq!(x.cufile_work_units, Some(256));
    assert_eq!(x.cufile_pieces, vec![(256, vec![4 << 20])]);
    let x = explain(&req(1 << 30, 1 << 30)).unwrap();
    assert_eq!(x.cufile_requests, Some(1));
    assert_eq!(x.cufile_pieces, vec![(1, vec![256 << 20; 4])]);
    let x = explain(&req(16 << 20, 16 << 20)).unwrap();
    assert_eq!(x.cufile_pieces, vec![(1, vec![8 << 20; 2])]);
    assert!(
        x.render().contains("1 request of 16 MiB: 2 pieces"),
        "{}",
        x.render()
    );
}

#[test]
fn posix_paths_and_failures_are_explained() {
    let mut r = req(1 << 20, 4 << 20);
    r.compat_mode = Some(CompatMode::On);
    let x = explain(&r).unwrap();
    assert_eq!(x.path.as_ref().unwrap().backend, Backend::GpufilePosix);
    assert!(x.bounce_chunk.is_some() && x.cufile_requests.is_none());
    r.compat_mode = Some(CompatMode::Off);
    r.cufile = CufileAssumption::Unavailable;
    let x = explain(&r).unwrap();
    assert!(x.path.is_err());
    assert!(x.render().contains("would fail"));
}

#[test]
fn a_device_read_alone_on_the_posix_path_is_predicted_in_smaller_pieces() {
    let mut r = req(4 << 20, 4 << 20);
    r.compat_mode = Some(CompatMode::On);
    r.task_size = None;
    r.num_threads = Some(16);
    let x = explain(&r).unwrap();
    assert_eq!((x.task_size, x.task_count), (256 << 10, 16));
    assert!(
        x.notes
            .iter()
            .any(|n| n.contains("a read alone is cut into 256 KiB pieces")
                && n.contains("1 MiB pieces with other requests in flight")),
        "{:?}",
        x.notes
    );
    r.memory = Memory::Host;
    assert_eq!(
        explain(&r).unwrap().task_count,
        4,
        "host memory: 1 MiB pieces"
    );
    r.memory = Memory::Device;
    r.task_size = Some(4 << 20);
    assert_eq!(
        explain(&r).unwrap().task_count,
        1,
        "a task size given: as given"
    );
    r.task_size = None;
    r.compat_mode = Some(CompatMode::Off);
    r.cufile = CufileAssumption::Nvfs;
    assert_eq!(explain(&r).unwrap().task_count, 4, "cuFile: 1 MiB pieces");
}

#[test]
fn page_cache_dma_is_explained_on_the_device_posix_path() {
    let mut r = req(64 << 20, 4 << 20);
    r.compat_mode = Some(CompatMode::On);
    let mut s = Settings {
        dma_cache_size: 1 << 30,
        ..Settings::default()
    };
    let note = |s: &Settings, r: &Request| {
        let x = explain_with(r, s, None).unwrap();
        x.notes
            .iter()
            .find(|n| n.contains("page-cache DMA"))
            .cloned()
    };
    let on = note(&s, &r).unwrap();
    assert!(on.contains("on (dma_cache_size 1 GiB)"), "{on}");
    assert!(
        on.contains("a first read of a file version bounces"),
        "{on}"
    );
    assert!(
        note(&s, &req(32 << 10, 4 << 20)).is_none(),
        "cuFile path: no note"
    );
    let mut small = req(32 << 10, 4 << 20);
    small.compat_mode = Some(CompatMode::On);
    assert!(note(&s, &small)
        .unwrap()
        .contains("not for reads under 64 KiB"));
    s.dma_cache_size = 0;
    assert!(note(&s, &r).unwrap().contains("off (dma_cache_size 0)"));
    r.memory = Memory::Host;
    assert!(note(&s, &r).is_none(), "host memory: no DMA");
}

proptest! {
    #[test]
    fn pieces_cover_each_request_exactly(len in 1usize..(1 << 32), par in 1u64..16, kb in 1u64..20000) {
        let e = CufileExecution { max_request_parallelism: par, min_io_threshold_size_kb: kb, ..spec_exec() };
        let p = e.pieces(len);
        prop_assert_eq!(p.iter().sum::<usize>(), len);
        prop_assert!(p.len() as u64 <= par.max(1));
        prop_assert!(p.iter().all(|x| *x > 0));
    }
}

#[test]
fn a_named_cufile_json_that_is_missing_or_malformed_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = req(1 << 30, 4 << 20);
    r.cufile_json = Some(dir.path().join("missing.json"));
    let e = explain(&r).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{ not json").unwrap();
    r.cufile_json = Some(bad.clone());
    let e = explain(&r).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{} is not valid cufile.json: ", bad.display())),
        "{e}"
    );
}
