//! The plan's strategy and the endpoint's facts ([`super::Needs`]).

use super::tests::{never, plan_with, rows};
use super::*;
use crate::config::CompatMode;
use crate::request::Range;

/// A shape of one range of `len` bytes at 0 (the ranges live as long as the test).
fn one_range(len: usize) -> Ranges {
    Ranges::One(Range {
        file_offset: 0,
        len,
        buf_offset: 0,
    })
}

#[test]
fn the_endpoints_facts_size_the_tasks_and_no_caller_does() {
    // `Strategy` alone is proptest's trait here.
    use super::Strategy as Run;
    let s = crate::Settings {
        num_threads: 16,
        task_size: 4 << 20,
        compat_mode: CompatMode::Auto,
        ..crate::Settings::default()
    };
    let compat = || Availability::CompatOnly("nvidia-fs not loaded".into());
    let none = || -> Result<(), String> { panic!("registration must not be asked") };
    let r20 = one_range(20 << 20);
    let base = Shape {
        direction: Direction::Write,
        memory: Memory::Device,
        ranges: &r20,
        len: 20 << 20,
        task_size: None,
        caller_waits: false,
        alone: true,
        batch_whole: false,
        needs: Needs::default(),
    };
    // A sink of 8 MiB parts: a task per part, each copied and sent whole.
    let parts = Shape {
        needs: Needs {
            part_size: Some(8 << 20),
            ..Needs::default()
        },
        ..base
    };
    let p = plan_with(&parts, &s, never, none);
    assert_eq!((p.task_size, p.tasks.count()), (8 << 20, 3));
    match p.strategy {
        Some(Run::Bounce { chunks, .. }) => {
            assert!(chunks.whole_tasks);
            assert_eq!(chunks.of(8 << 20), 8 << 20);
            assert_eq!(chunks.of(32 << 20), chunk_size(32 << 20, chunks.bounce));
        }
        other => panic!("{other:?}"),
    }
    // The caller's own task size wins over the parts.
    let own = Shape {
        task_size: Some(1 << 20),
        ..parts
    };
    assert_eq!(plan_with(&own, &s, never, none).tasks.count(), 20);
    // A source that serves a read as one request: one task, whatever the task size.
    let whole = Shape {
        direction: Direction::Read,
        memory: Memory::Host,
        task_size: Some(1 << 20),
        needs: Needs {
            one_request: true,
            request_per_task: true,
            ..Needs::default()
        },
        ..base
    };
    let p = plan_with(&whole, &s, never, none);
    assert_eq!((p.task_size, p.tasks.count()), (20 << 20, 1));
    // A source whose smallest useful request is 16 MiB: tasks of 16 MiB, not 4 MiB.
    let floor = Shape {
        task_size: None,
        needs: Needs {
            min_request: Some(16 << 20),
            request_per_task: true,
            ..Needs::default()
        },
        ..whole
    };
    let p = plan_with(&floor, &s, never, none);
    assert_eq!((p.task_size, p.tasks.count()), (16 << 20, 2));
    // A batch that keeps every worker busy: whole task_size tasks, no split for a read alone.
    let batch = Shape {
        direction: Direction::Read,
        batch_whole: true,
        needs: Needs {
            local_file: true,
            ..Needs::default()
        },
        ..base
    };
    let p = plan_with(&batch, &s, compat, none);
    assert_eq!(
        (p.task_size, p.task_size_busy, p.tasks.count()),
        (4 << 20, 4 << 20, 5)
    );
    let alone = Shape {
        batch_whole: false,
        ..batch
    };
    let p = plan_with(&alone, &s, compat, none);
    assert_eq!(p.task_size, (20 << 20) / 16);
}

#[test]
fn the_plan_names_the_executor_and_its_policies() {
    // `Strategy` alone is proptest's trait here.
    use super::Strategy as Run;
    let s = crate::Settings {
        num_threads: 4,
        compat_mode: CompatMode::Auto,
        dma_cache_size: 1 << 30,
        auto_direct_io_read: false,
        direct_io_uncached: true,
        ..crate::Settings::default()
    };
    let compat = || Availability::CompatOnly("nvidia-fs not loaded".into());
    let accel = || Availability::Accelerated("nvidia-fs loaded".into());
    let none = || -> Result<(), String> { panic!("registration must not be asked") };
    let r = one_range(4 << 20);
    let read = |memory| Shape {
        direction: Direction::Read,
        memory,
        ranges: &r,
        len: 4 << 20,
        task_size: None,
        caller_waits: true,
        alone: false,
        batch_whole: false,
        needs: Needs {
            local_file: true,
            ..Needs::default()
        },
    };
    let direct = DirectIo {
        always: false,
        uncached: true,
    };
    let host = plan_with(&read(Memory::Host), &s, never, none);
    assert_eq!(host.strategy, Some(Run::Host { direct }));
    let device = plan_with(&read(Memory::Device), &s, compat, none);
    match device.strategy {
        Some(Run::Bounce { direct: d, dma, .. }) => {
            assert_eq!((d, dma), (direct, Dma::On(1 << 30)));
        }
        other => panic!("{other:?}"),
    }
    let cufile = plan_with(&read(Memory::Device), &s, accel, || Ok(()));
    assert_eq!(cufile.strategy, Some(Run::Cufile));
    // Page-cache DMA: off by the setting, for O_DIRECT reads, for small reads, for writes,
    // and where the process cannot register page cache.
    let dma = |settings: &crate::Settings, len| page_cache_dma(settings, true, len, || None);
    let off = crate::Settings {
        dma_cache_size: 0,
        ..s.clone()
    };
    assert_eq!(dma(&off, 4 << 20), Dma::SettingOff);
    let o_direct = crate::Settings {
        auto_direct_io_read: true,
        ..s.clone()
    };
    assert_eq!(dma(&o_direct, 4 << 20), Dma::DirectIo);
    assert_eq!(dma(&s, DMA_MIN_REQUEST - 1), Dma::Small);
    assert_eq!(
        page_cache_dma(&s, false, 4 << 20, || panic!("not asked")),
        Dma::NotADeviceRead
    );
    let refused = page_cache_dma(&s, true, 4 << 20, || Some("EPERM".into()));
    assert_eq!(refused, Dma::Disabled("EPERM".into()));
    // A gather names its host I/O, as the machine answers it, and its staging.
    let rows = rows(64, 4096);
    let gather = Shape {
        ranges: &rows,
        len: rows.bytes(),
        ..read(Memory::Device)
    };
    let p = plan_with(&gather, &s, never, none);
    match p.strategy {
        Some(Run::Gather {
            host_io, staging, ..
        }) => {
            assert_eq!(host_io.backend, HostIoBackend::Pread);
            assert_eq!(staging, Some(s.bounce_buffer_size));
        }
        other => panic!("{other:?}"),
    }
    // The runs: at most num_threads, at most one per task; blocks of consecutive tasks.
    assert_eq!(device.runs, 4);
    assert_eq!(task_block(1000, 4), 62);
    assert_eq!(task_block(10_000, 4), MAX_BLOCK);
    assert_eq!(task_block(3, 4), 1);
}
