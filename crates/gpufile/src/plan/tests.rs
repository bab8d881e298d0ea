use super::*;
use crate::config::CompatMode;
use crate::request::Range;

#[test]
fn a_waiting_caller_runs_one_task_shares_a_small_device_read_and_leaves_the_rest() {
    use CallerPart::{Share, Wait, Whole};
    let max = CALLER_SHARE_MAX;
    // (blocking, device, bounce, read, tasks, len) -> part
    let cases = [
        ((true, false, true, true, 1, 4 << 30), Whole), // host: any size, as before
        ((true, false, true, false, 1, 4096), Whole),
        ((true, false, true, true, 4, 16 << 20), Wait), // host, several tasks
        ((true, true, true, true, 1, 4096), Whole),     // device, bounce path
        ((true, true, true, false, 1, 4096), Whole),    // a device write of one task too
        ((true, true, true, true, 1, max + 1), Wait),   // too large to run on the caller
        ((true, true, false, true, 1, 4096), Wait),     // cuFile's path
        ((true, true, true, true, 16, 4 << 20), Share),
        ((true, true, true, true, 16, max), Share),
        ((true, true, true, true, 16, max + 1), Wait),
        ((true, true, true, false, 16, 4 << 20), Wait), // a device write of several
        ((true, true, false, true, 16, 4 << 20), Wait),
        ((false, false, true, true, 1, 4096), Wait), // nobody waits at once
        ((false, true, true, true, 16, 4 << 20), Wait),
    ];
    for ((blocking, device, bounce, read, tasks, len), want) in cases {
        assert_eq!(
            caller_part(blocking, device, bounce, read, tasks, len),
            want,
            "{blocking} {device} {bounce} {read} {tasks} {len}"
        );
    }
}
use proptest::prelude::*;

#[test]
fn one_gib_in_4mib_tasks_is_256_tasks() {
    let tasks: Vec<_> = split(0, 1 << 30, 4 << 20).collect();
    assert_eq!(tasks.len(), 256);
    assert!(tasks.iter().all(|t| t.len == 4 << 20));
}

#[test]
fn last_task_is_the_remainder() {
    let tasks: Vec<_> = split(10, 1000, 199).collect();
    assert_eq!(tasks.len(), 6);
    assert_eq!(
        tasks[5],
        Task {
            file_offset: 10 + 995,
            buf_offset: 995,
            len: 5
        }
    );
    assert_eq!(split(0, 0, 199).count(), 0);
}

fn policy(compat_mode: CompatMode) -> Policy {
    Policy {
        compat_mode,
        gds_threshold: 16384,
        require_gds: false,
    }
}

pub(super) fn never() -> Availability {
    panic!("cuFile must not be probed for this request")
}

#[test]
fn path_decisions() {
    let compat_only = || Availability::CompatOnly("nvidia-fs not loaded".into());
    let accel = || Availability::Accelerated("nvidia-fs 2.20 loaded".into());
    let gone = || Availability::Unavailable("libcufile.so.0 not found".into());

    let host = choose_path(Memory::Host, 1 << 30, policy(CompatMode::Off), never).unwrap();
    assert_eq!(host.reason, Reason::HostBuffer);
    let on = choose_path(Memory::Device, 1 << 30, policy(CompatMode::On), never).unwrap();
    assert_eq!(
        (on.backend, on.reason),
        (Backend::GpufilePosix, Reason::CompatModeOn)
    );
    let small = choose_path(Memory::Device, 100, policy(CompatMode::Off), never).unwrap();
    assert_eq!(small.reason, Reason::BelowGdsThreshold);

    let auto = choose_path(
        Memory::Device,
        1 << 20,
        policy(CompatMode::Auto),
        compat_only,
    );
    let auto = auto.unwrap();
    assert_eq!(auto.backend, Backend::GpufilePosix);
    assert_eq!(auto.reason.to_string(), "nvidia-fs not loaded");
    let auto = choose_path(Memory::Device, 1 << 20, policy(CompatMode::Auto), accel).unwrap();
    assert_eq!(auto.backend, Backend::Cufile);
    let auto = choose_path(Memory::Device, 1 << 20, policy(CompatMode::Auto), gone).unwrap();
    assert_eq!(auto.backend, Backend::GpufilePosix);

    let off = choose_path(
        Memory::Device,
        1 << 20,
        policy(CompatMode::Off),
        compat_only,
    );
    let off = off.unwrap();
    assert_eq!(off.backend, Backend::Cufile);
    assert!(
        off.reason.to_string().contains("compat path"),
        "{}",
        off.reason
    );
    let off = choose_path(Memory::Device, 1 << 20, policy(CompatMode::Off), gone).unwrap_err();
    assert!(
        off.to_string().contains("libcufile.so.0 not found"),
        "{off}"
    );

    let strict = Policy {
        require_gds: true,
        ..policy(CompatMode::Auto)
    };
    let err = choose_path(Memory::Device, 1 << 20, strict, compat_only).unwrap_err();
    assert!(err.to_string().contains("require_gds"), "{err}");
    assert!(choose_path(Memory::Device, 10, strict, accel).is_ok());
}

#[test]
fn registration_refused_falls_back_only_under_auto() {
    let chosen = IoPath {
        backend: Backend::Cufile,
        reason: Reason::Accelerated("nvidia-fs 2.20 loaded".into()),
    };
    let refused = || Err("cuFileHandleRegister failed".to_string());
    let auto = after_registration(chosen.clone(), policy(CompatMode::Auto), refused()).unwrap();
    assert_eq!(auto.backend, Backend::GpufilePosix);
    assert!(auto.reason.to_string().contains("cuFileHandleRegister"));
    let off = after_registration(chosen.clone(), policy(CompatMode::Off), refused());
    assert!(off.unwrap_err().to_string().contains("compat_mode is OFF"));
    let ok = after_registration(chosen.clone(), policy(CompatMode::Off), Ok(())).unwrap();
    assert_eq!(ok, chosen);
}

#[test]
fn chunks_overlap_within_a_task_and_respect_the_bounce_buffer() {
    assert_eq!(chunk_size(4 << 20, 16 << 20), 4 << 20);
    assert_eq!(chunk_size(16 << 20, 16 << 20), 4 << 20);
    assert_eq!(chunk_size(64 << 20, 16 << 20), 16 << 20);
    assert_eq!(chunk_size(100, 16 << 20), MIN_CHUNK);
    // Alone, a request cut to MIN_SPLIT pieces is cut to ALONE_SPLIT ones; others stay.
    assert_eq!(alone_task_size(4 << 20, MIN_SPLIT, 16), ALONE_SPLIT);
    assert_eq!(alone_task_size(8 << 20, MIN_SPLIT, 16), 512 << 10);
    assert_eq!(alone_task_size(64 << 20, MIN_SPLIT, 16), MIN_SPLIT);
    assert_eq!(alone_task_size(4 << 20, MIN_SPLIT, 4), MIN_SPLIT);
    assert_eq!(alone_task_size(100, MIN_SPLIT, 16), ALONE_SPLIT);
    assert_eq!(alone_task_size(64 << 20, 4 << 20, 16), 4 << 20);
    assert_eq!(alone_task_size(4 << 20, MIN_SPLIT, 0), MIN_SPLIT);
    assert_eq!(chunk_size(4 << 20, 64 << 10), 64 << 10);
    assert_eq!(chunk_size(5_000_001, 16 << 20) % 4096, 0);
}

#[test]
fn small_requests_are_split_so_every_worker_helps() {
    // A 4 MiB read with 16 workers: four 1 MiB tasks (the floor), not one.
    assert_eq!(effective_task_size(4 << 20, 4 << 20, 16, false), MIN_SPLIT);
    // 64 MiB with 16 workers: 4 MiB pieces, as task_size says.
    assert_eq!(effective_task_size(64 << 20, 4 << 20, 16, false), 4 << 20);
    // 24 MiB with 16 workers: 1.5 MiB each.
    assert_eq!(effective_task_size(24 << 20, 4 << 20, 16, false), 3 << 19);
    // A size the caller gave is kept, and nothing is cut below the floor.
    assert_eq!(effective_task_size(4 << 20, 4 << 20, 16, true), 4 << 20);
    assert_eq!(effective_task_size(100, 4 << 20, 16, false), MIN_SPLIT);
    assert_eq!(effective_task_size(100, 4 << 20, 1, false), 4 << 20);
}

#[test]
fn a_billion_tasks_cost_nothing_up_front() {
    let s = TaskSplit::new(0, 1 << 30, 1);
    assert_eq!(s.count(), 1 << 30);
    assert_eq!(s.task((1 << 30) - 1).file_offset, (1 << 30) - 1);
}

#[test]
fn a_batch_with_a_task_per_worker_keeps_its_tasks_whole() {
    let s = crate::Settings {
        num_threads: 16,
        task_size: 4 << 20,
        ..crate::Settings::default()
    };
    let whole = |sizes: &[usize]| batch_keeps_tasks_whole(sizes.iter().map(|&l| (l, None)), &s);
    assert!(whole(&[4 << 20; 16]));
    assert!(whole(&[64 << 20]));
    // Fewer tasks than workers: each request is still cut so that all workers help.
    assert!(!whole(&[4 << 20; 15]));
    assert!(!whole(&[]));
    // Small requests do not pass for whole tasks.
    let mut mixed = vec![1; 15];
    mixed.push(4 << 20);
    assert!(!whole(&mixed));
    assert!(whole(&[3 << 20; 22]));
    // A request with its own task size counts as its whole tasks.
    let own = [(1, Some(1)); 16];
    assert!(batch_keeps_tasks_whole(own.into_iter(), &s));
}

static ONE_64M: Ranges = Ranges::One(Range {
    file_offset: 0,
    len: 64 << 20,
    buf_offset: 0,
});

/// Plain ranges of every length the tests plan (a shape borrows its ranges).
static ONE: [Ranges; 2] = [
    Ranges::One(Range {
        file_offset: 0,
        len: 4096,
        buf_offset: 0,
    }),
    Ranges::One(Range {
        file_offset: 0,
        len: 4 << 20,
        buf_offset: 0,
    }),
];

fn shape(memory: Memory, len: usize, local_file: bool) -> Shape<'static> {
    let ranges = match len {
        4096 => &ONE[0],
        4194304 => &ONE[1],
        _ => &ONE_64M,
    };
    Shape {
        direction: Direction::Read,
        memory,
        ranges,
        len,
        task_size: None,
        caller_waits: true,
        alone: true,
        batch_whole: false,
        needs: Needs {
            local_file,
            ..Needs::default()
        },
    }
}

/// The machine as a test describes it: `cufile` and `registration` answer once each (a test
/// that passes one that panics says it must not be asked); io_uring is off, DMA allowed.
struct Described<C, R> {
    cufile: Option<C>,
    registration: Option<R>,
}

impl<C: FnOnce() -> Availability, R: FnOnce() -> Result<(), String>> Machine for Described<C, R> {
    fn cufile(&mut self) -> Availability {
        (self.cufile.take().expect("cuFile asked twice"))()
    }
    fn registration(&mut self) -> Result<(), String> {
        (self.registration.take().expect("registration asked twice"))()
    }
    fn io_uring(&mut self) -> Result<String, HostIoReason> {
        Err(HostIoReason::Missing("not asked of this machine".into()))
    }
    fn dma_disabled(&mut self) -> Option<String> {
        None
    }
    fn gather_kernel(&mut self) -> Result<(), String> {
        Ok(())
    }
}

pub(super) fn plan_with(
    shape: &Shape<'_>,
    settings: &crate::Settings,
    cufile: impl FnOnce() -> Availability,
    registration: impl FnOnce() -> Result<(), String>,
) -> Plan {
    let mut machine = Described {
        cufile: Some(cufile),
        registration: Some(registration),
    };
    plan_request(shape, settings, &mut machine)
}

#[test]
fn one_plan_gives_the_path_the_tasks_and_the_callers_part() {
    let s = crate::Settings {
        num_threads: 16,
        task_size: 4 << 20,
        compat_mode: CompatMode::Auto,
        ..crate::Settings::default()
    };
    let accel = || Availability::Accelerated("nvidia-fs loaded".into());
    let no_registration = || -> Result<(), String> { panic!("registration must not be asked") };
    // Host memory: neither cuFile nor the registration is asked; one task runs here.
    let p = plan_with(&shape(Memory::Host, 4096, true), &s, never, no_registration);
    assert_eq!(p.path.unwrap().reason, Reason::HostBuffer);
    assert_eq!((p.tasks.count(), p.caller), (1, CallerPart::Whole));
    // A device read alone on the bounce path: cut to ALONE_SPLIT, shared with the caller.
    let compat = || Availability::CompatOnly("nvidia-fs not loaded".into());
    let p = plan_with(
        &shape(Memory::Device, 4 << 20, true),
        &s,
        compat,
        no_registration,
    );
    assert_eq!(p.path.unwrap().backend, Backend::GpufilePosix);
    assert_eq!((p.task_size, p.task_size_busy), (ALONE_SPLIT, MIN_SPLIT));
    assert_eq!((p.tasks.count(), p.caller), (16, CallerPart::Share));
    // Not alone: the busy split.
    let busy = Shape {
        alone: false,
        ..shape(Memory::Device, 4 << 20, true)
    };
    let p = plan_with(&busy, &s, compat, no_registration);
    assert_eq!((p.task_size, p.tasks.count()), (MIN_SPLIT, 4));
    // cuFile chosen: the file is registered, or AUTO falls back with the reason.
    let p = plan_with(&shape(Memory::Device, 4 << 20, true), &s, accel, || Ok(()));
    let path = p.path.unwrap();
    assert_eq!(path.backend, Backend::Cufile);
    assert_eq!((p.task_size, p.caller), (MIN_SPLIT, CallerPart::Wait));
    let refused = || Err("cuFileHandleRegister failed".to_owned());
    let p = plan_with(&shape(Memory::Device, 4 << 20, true), &s, accel, refused);
    let path = p.path.unwrap();
    assert_eq!(path.backend, Backend::GpufilePosix);
    assert!(path.reason.to_string().contains("cuFileHandleRegister"));
    // Not a local file: gpufile's path whatever compat_mode says, cuFile never asked, and
    // no alone split (a remote source pays a request per task).
    let off = crate::Settings {
        compat_mode: CompatMode::Off,
        require_gds: true,
        ..s.clone()
    };
    let p = plan_with(
        &shape(Memory::Device, 4 << 20, false),
        &off,
        never,
        no_registration,
    );
    assert_eq!(p.path.unwrap().reason, Reason::NotALocalFile);
    assert_eq!((p.task_size, p.tasks.count()), (MIN_SPLIT, 4));
    // A source that pays a request per task (a remote object) keeps the settings' task
    // size, into host or device memory, however many workers idle: a 32 MiB shard with
    // 16 MiB tasks on 16 workers is two GETs, not sixteen of 2 MiB.
    let wide = crate::Settings {
        task_size: 16 << 20,
        ..s.clone()
    };
    let shard = Ranges::One(Range {
        file_offset: 0,
        len: 32 << 20,
        buf_offset: 0,
    });
    for memory in [Memory::Host, Memory::Device] {
        let mapped = Shape {
            ranges: &shard,
            len: 32 << 20,
            alone: false,
            ..shape(memory, 32 << 20, false)
        };
        let p = plan_with(&mapped, &wide, never, no_registration);
        assert_eq!((p.task_size, p.tasks.count()), (2 << 20, 16));
        let remote = Shape {
            needs: Needs {
                request_per_task: true,
                ..mapped.needs
            },
            ..mapped
        };
        let p = plan_with(&remote, &wide, never, no_registration);
        assert_eq!((p.task_size, p.task_size_busy), (16 << 20, 16 << 20));
        assert_eq!(p.tasks.count(), 2);
    }
    // A path that cannot be honoured is an error; the tasks are still planned (explain
    // shows them).
    let gone = || Availability::Unavailable("libcufile.so.0 not found".into());
    let p = plan_with(
        &shape(Memory::Device, 64 << 20, true),
        &off,
        gone,
        no_registration,
    );
    assert!(p.path.unwrap_err().to_string().contains("require_gds"));
    assert_eq!((p.task_size, p.tasks.count()), (4 << 20, 16));
    // The caller's own task size is kept, alone or not.
    let own = Shape {
        task_size: Some(1 << 20),
        ..shape(Memory::Device, 4 << 20, true)
    };
    let p = plan_with(&own, &s, compat, no_registration);
    assert_eq!((p.task_size, p.task_size_busy), (1 << 20, 1 << 20));
}

#[test]
fn many_ranges_are_cut_range_after_range_and_empty_ones_make_no_task() {
    let r = |file_offset, len, buf_offset| Range {
        file_offset,
        len,
        buf_offset,
    };
    let ranges = Ranges::Many(vec![r(1000, 10, 50), r(0, 0, 0), r(7, 25, 0), r(500, 3, 40)].into());
    let split = TaskSplit::over(ranges, 10);
    let tasks: Vec<_> = (0..split.count()).map(|i| split.task(i)).collect();
    let t = |file_offset, buf_offset, len| Task {
        file_offset,
        buf_offset,
        len,
    };
    assert_eq!(
        tasks,
        [
            t(1000, 50, 10),
            t(7, 0, 10),
            t(17, 10, 10),
            t(27, 20, 5),
            t(500, 40, 3)
        ]
    );
    // One range is the same split as before.
    let one = TaskSplit::over(Ranges::One(r(10, 1000, 0)), 199);
    assert_eq!(one, TaskSplit::new(10, 1000, 199));
    assert_eq!(one.task(5), t(10 + 995, 995, 5));
}

proptest! {
    #[test]
    fn many_ranges_give_every_byte_once(
        lens in proptest::collection::vec(0usize..5000, 0..20), task in 1usize..3000
    ) {
        let mut at = 0;
        let ranges: Vec<Range> = lens.iter().map(|&len| {
            let r = Range { file_offset: at as u64 + 1000, len, buf_offset: at };
            at += len;
            r
        }).collect();
        let split = TaskSplit::over(Ranges::Many(ranges.into()), task);
        let mut next = 0usize;
        for i in 0..split.count() {
            let t = split.task(i);
            prop_assert_eq!(t.buf_offset, next);
            prop_assert_eq!(t.file_offset, t.buf_offset as u64 + 1000);
            prop_assert!(t.len > 0 && t.len <= task);
            next += t.len;
        }
        prop_assert_eq!(next, at);
    }

    /// Ranges of one length are grouped without reading the list, exactly as reading it
    /// would group them; a packed list's copies are counted from its groups' ends, exactly as
    /// sorting each group's ranges would count them.
    #[test]
    fn groups_and_copies_known_from_the_facts_are_those_found_by_reading(
        n in 0usize..300, len in 0usize..5000, max_ranges in 1usize..50,
        max_bytes in 1usize..20_000, packed in proptest::bool::ANY,
    ) {
        let list: Vec<Range> = (0..n)
            .map(|i| Range {
                file_offset: (i * 7 % 13) as u64,
                len,
                buf_offset: if packed { i * len } else { (n - i) * len },
            })
            .collect();
        let split = TaskSplit::grouped(Ranges::Many(list.clone().into()), max_ranges, max_bytes);
        let read = super::tasks::group_starts(&list, max_ranges, max_bytes);
        prop_assert_eq!(split.count(), read.len());
        for (i, &start) in read.iter().enumerate() {
            let end = read.get(i + 1).copied().unwrap_or(n);
            prop_assert_eq!(split.group(i), &list[start..end]);
        }
        let runs: usize = (0..split.count()).map(|i| contiguous_runs(split.group(i))).sum();
        prop_assert_eq!(gather_copies(&split), runs);
    }

    #[test]
    fn chunks_are_o_direct_aligned(task in 1usize..(1 << 30), bounce_pages in 1usize..8192) {
        let bounce = bounce_pages * 4096;
        let c = chunk_size(task, bounce);
        prop_assert!(c > 0 && c <= bounce);
        prop_assert_eq!(c % 4096, 0);
    }

    #[test]
    fn tasks_cover_the_request_exactly_once(
        off in 0u64..(1 << 40), size in 0usize..(1 << 24), task in 1usize..(1 << 22)
    ) {
        let mut next = 0usize;
        for t in split(off, size, task) {
            prop_assert_eq!(t.buf_offset, next);
            prop_assert_eq!(t.file_offset, off + t.buf_offset as u64);
            prop_assert!(t.len > 0 && t.len <= task);
            next += t.len;
        }
        prop_assert_eq!(next, size);
    }
}

pub(super) fn rows(n: usize, len: usize) -> Ranges {
    let v: Vec<Range> = (0..n)
        .map(|i| Range {
            file_offset: ((i * 7919) % n * len) as u64,
            len,
            buf_offset: i * len,
        })
        .collect();
    Ranges::Many(v.into())
}

#[test]
fn a_gather_is_a_few_groups_per_worker_of_whole_ranges_in_order() {
    let ranges = rows(100_000, 4096);
    let split = TaskSplit::grouped(ranges.clone(), gather_group(100_000, 16), 4 << 20);
    // 1563 ranges per group at 16 workers, cut to 1024 by 4 MiB of bytes.
    assert_eq!(gather_group(100_000, 16), 1563);
    assert_eq!(gather_group(100, 16), GATHER_MIN_GROUP); // not a task per 2 ranges
    assert_eq!(gather_group(10_000_000, 16), GATHER_MAX_GROUP);
    assert_eq!(split.count(), 98);
    assert!(split.is_grouped());
    let mut seen = 0;
    for i in 0..split.count() {
        let g = split.group(i);
        assert!(g.len() <= 1024 && !g.is_empty());
        assert_eq!(g[0], ranges.as_slice()[seen]);
        assert_eq!(split.task(i).len, g.len() * 4096);
        seen += g.len();
    }
    assert_eq!(seen, 100_000);
    // A packed output is one contiguous run per group: one copy each.
    assert_eq!(gather_copies(&split), split.count());
    // A range larger than a group's bytes is a group by itself.
    let odd = Ranges::Many(
        vec![
            Range {
                file_offset: 0,
                len: 10,
                buf_offset: 0,
            },
            Range {
                file_offset: 0,
                len: 100,
                buf_offset: 10,
            },
            Range {
                file_offset: 0,
                len: 0,
                buf_offset: 110,
            },
        ]
        .into(),
    );
    let split = TaskSplit::grouped(odd, 8, 50);
    assert_eq!(split.count(), 2);
    assert_eq!(split.group(1).len(), 2);
}

#[test]
fn contiguous_runs_count_the_copies_of_a_layout() {
    let r = |buf_offset, len| Range {
        file_offset: 0,
        len,
        buf_offset,
    };
    assert_eq!(contiguous_runs(&[r(0, 4), r(4, 4), r(8, 4)]), 1);
    assert_eq!(contiguous_runs(&[r(8, 4), r(0, 4), r(4, 4)]), 1); // permuted, still one
    assert_eq!(contiguous_runs(&[r(0, 4), r(5, 4), r(9, 0), r(9, 1)]), 2);
    assert_eq!(contiguous_runs(&[]), 0);
}

#[test]
fn what_is_gathered_and_its_path() {
    assert!(gathers(&rows(2, 4096), None, 16 << 20));
    assert!(!gathers(&rows(1, 4096), None, 16 << 20)); // one range: as before
    assert!(!gathers(&rows(4, 4096), Some(4096), 16 << 20)); // its own task size
    assert!(!gathers(&rows(4, GATHER_MAX_RANGE + 1), None, 1 << 30));
    assert!(!gathers(&rows(4, 8192), None, 4096)); // a range past a pinned buffer
    let one = Ranges::One(Range {
        file_offset: 0,
        len: 4096,
        buf_offset: 0,
    });
    assert!(!gathers(&one, None, 16 << 20));

    let s = crate::Settings {
        num_threads: 4,
        compat_mode: CompatMode::Auto,
        ..crate::Settings::default()
    };
    let ranges = rows(1000, 4096);
    let shape = Shape {
        direction: Direction::Read,
        memory: Memory::Device,
        ranges: &ranges,
        len: ranges.bytes(),
        task_size: None,
        caller_waits: false,
        alone: true,
        batch_whole: false,
        needs: Needs {
            local_file: true,
            ..Needs::default()
        },
    };
    // 4 KiB ranges are below gds_threshold each: gpufile's path, never asking cuFile,
    // though the whole request is 4 MB.
    let plan = plan_with(&shape, &s, never, || panic!("no registration"));
    let path = plan.path.unwrap();
    assert_eq!(path.reason, Reason::BelowGdsThreshold);
    assert!(plan.tasks.is_grouped());
    assert_eq!(plan.tasks.count(), 16);
    // One of a batch that keeps every worker busy (a tensor-parallel rank's column blocks
    // beside whole tensors): grouped too, a group being a whole task of its own.
    let in_batch = Shape {
        batch_whole: true,
        ..shape
    };
    let plan = plan_with(&in_batch, &s, never, || panic!("no registration"));
    assert!(plan.tasks.is_grouped());
    assert_eq!(plan.tasks.count(), 16);
    // A device write of many ranges keeps a task per range.
    let write = Shape {
        direction: Direction::Write,
        ..shape
    };
    let plan = plan_with(&write, &s, never, || panic!("no registration"));
    assert!(!plan.tasks.is_grouped());
    assert_eq!(plan.tasks.count(), 1000);
}

#[test]
fn host_io_is_io_uring_only_where_allowed_and_probed() {
    let ok = || Ok("IORING_OP_READ and IORING_OP_WRITE".to_owned());
    let io = choose_host_io(true, true, ok);
    assert_eq!(io.backend, HostIoBackend::IoUring);
    assert!(
        io.to_string().starts_with("io_uring (io_uring available"),
        "{io}"
    );
    let off = choose_host_io(false, true, || panic!("not probed when off"));
    assert_eq!(
        (off.backend, off.reason.clone()),
        (HostIoBackend::Pread, HostIoReason::SettingOff)
    );
    assert_eq!(
        off.to_string(),
        "pread (io_uring is off (setting io_uring))"
    );
    let remote = choose_host_io(true, false, || panic!("not probed for a mapping"));
    assert_eq!(remote.reason, HostIoReason::NotALocalFile);
    let refused = choose_host_io(true, true, || Err(HostIoReason::Refused("EPERM".into())));
    assert_eq!(refused.backend, HostIoBackend::Pread);
    assert_eq!(refused.to_string(), "pread (io_uring refused: EPERM)");
}
