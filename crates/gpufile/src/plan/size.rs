//! How large each piece of a request is: its tasks, the bounce pipeline's chunks, and what the
//! waiting caller takes on itself.

use crate::config::Settings;

/// O_DIRECT needs file offsets, lengths and memory aligned to the logical block; 4 KiB covers
/// every common device.
pub const DIRECT_ALIGN: usize = 4096;

/// Smallest task gpufile cuts a request into when it splits below `task_size` so that every
/// worker helps with a request that would otherwise leave most of them idle (a 4 MiB read is
/// four tasks, not one).
pub const MIN_SPLIT: usize = 1 << 20;

/// The task size a request of `len` bytes runs with. A size the caller gave for this request is
/// used as given (`raw_read` is one task). The settings' `task_size` is a largest piece: a request
/// of fewer tasks than `threads` is cut into `threads` even pieces (4 KiB multiples) instead,
/// but none smaller than [`MIN_SPLIT`].
pub fn effective_task_size(len: usize, task_size: usize, threads: usize, explicit: bool) -> usize {
    let task_size = task_size.max(1);
    if explicit || len.div_ceil(task_size) >= threads {
        return task_size;
    }
    let even = len.div_ceil(threads.max(1)).next_multiple_of(DIRECT_ALIGN);
    even.max(MIN_SPLIT).min(task_size)
}

/// Smallest task of a device read on gpufile's bounce path when no other request is in flight
/// (see [`alone_task_size`]).
pub const ALONE_SPLIT: usize = 256 << 10;

/// The task size of a device read on gpufile's bounce path when it is the only request in
/// flight: a request already cut to [`MIN_SPLIT`] pieces is cut further, down to
/// [`ALONE_SPLIT`], so that every worker copies a part (a 4 MiB read: 16 pieces of 256 KiB, not
/// 4 of 1 MiB): a read alone is faster the more workers share it. With other requests in flight
/// the workers are busy already and the smaller pieces only cost, so the rule is for a request
/// alone (measurements: docs/performance.md, "Pieces of a device read alone").
pub fn alone_task_size(len: usize, task_size: usize, threads: usize) -> usize {
    if task_size != MIN_SPLIT {
        return task_size;
    }
    len.div_ceil(threads.max(1))
        .next_multiple_of(DIRECT_ALIGN)
        .clamp(ALONE_SPLIT, MIN_SPLIT)
}

/// The largest device read whose waiting caller takes a share of the work itself (on the bounce
/// path, a request whose caller waits: [`crate::Request::caller_waits`]). The caller is awake
/// already, so its share starts with no wake-up, and one worker fewer is woken; the workers it
/// waits for otherwise start one by one over tens of microseconds (docs/performance.md, "The
/// waiting caller's share"). Bounded so a caller's share stays short (its Ctrl-C is checked after it):
/// usually a 1/16 share; even if no worker comes (all busy with other requests), one thread
/// copies 64 MiB in about 10–20 ms.
pub const CALLER_SHARE_MAX: usize = 64 << 20;

/// What the thread that submits a request and waits for it at once does besides waiting
/// ([`crate::Request::caller_waits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallerPart {
    /// Nothing: the workers run every task (a request nobody waits for at once, a device request
    /// past [`CALLER_SHARE_MAX`] or on cuFile's path, a device write of several tasks).
    Wait,
    /// All of it: a request of one task (host memory, or device memory on the bounce path up to
    /// [`CALLER_SHARE_MAX`]) runs on the calling thread, and no worker is woken.
    Whole,
    /// A share: a device read of several tasks on the bounce path, up to [`CALLER_SHARE_MAX`], is
    /// run by the workers and the caller together.
    Share,
}

/// The caller's part of a request of `tasks` tasks and `len` bytes: `blocking` (the caller waits
/// at once), `device` (GPU memory), `bounce` (gpufile's bounce path), `read` (a read).
pub fn caller_part(
    blocking: bool,
    device: bool,
    bounce: bool,
    read: bool,
    tasks: usize,
    len: usize,
) -> CallerPart {
    let small_device = device && bounce && len <= CALLER_SHARE_MAX;
    match (blocking, tasks) {
        (true, 1) if !device || small_device => CallerPart::Whole,
        (true, 2..) if small_device && read => CallerPart::Share,
        _ => CallerPart::Wait,
    }
}

/// Smallest chunk of the bounce pipeline: below it, per-chunk read, copy and event costs dominate
/// (docs/performance.md, "Bounce pipeline chunks").
pub const MIN_CHUNK: usize = 4 << 20;

/// Chunk size of a task in the bounce pipeline: about a quarter of the task so reads and copies
/// overlap (small tasks overlap with the run's next task instead), at least [`MIN_CHUNK`], at most
/// the bounce buffer, a multiple of [`DIRECT_ALIGN`] (so O_DIRECT can take it).
pub fn chunk_size(task_len: usize, bounce: usize) -> usize {
    let align = DIRECT_ALIGN;
    let quarter = task_len.div_ceil(4).next_multiple_of(align);
    quarter.max(MIN_CHUNK).min(bounce).max(1)
}

/// Whether a batch's requests run as `task_size` tasks, none split further: a request is cut
/// below `task_size` only so that all workers help with it, and a batch that holds at least a
/// worker's worth of `task_size` per worker already keeps them all busy (one run per file
/// instead of several: fewer runs' set-up and stream waits; docs/performance.md, "Batches").
/// Counted in bytes, so that small requests do not pass for whole tasks (15 one-byte reads and
/// a 4 MiB one: the 4 MiB one is still cut for the idle workers). `requests`: each request's
/// length and own task size.
pub fn batch_keeps_tasks_whole(
    requests: impl Iterator<Item = (usize, Option<usize>)>,
    settings: &Settings,
) -> bool {
    let task_size = settings.task_size.max(1);
    let want = (settings.num_threads as u128) * task_size as u128;
    let mut bytes = 0u128;
    for (len, own) in requests {
        // A request with its own task size is never cut: it counts as its whole tasks.
        let len = len as u128;
        bytes += match own {
            Some(t) => len.div_ceil(t.max(1) as u128) * task_size as u128,
            None => len,
        };
        if bytes >= want {
            return true;
        }
    }
    false
}

/// Registration unit of page-cache DMA, bytes (`crate::exec::dma`): the size of the
/// registration rate in docs/performance.md, "Page-cache DMA (`exec/dma.rs`)".
pub const DMA_GRANULE: usize = 64 << 20;

/// Smallest device read that uses page-cache DMA: below it the copy is all call overhead
/// whichever way it goes, and such a read could wait for a whole granule's registration
/// (≈ 3 ms).
pub const DMA_MIN_REQUEST: usize = 64 << 10;

/// Most tasks a run takes at once (64 × 4 MiB = 256 MiB of a file read sequentially by one
/// run).
pub const MAX_BLOCK: usize = 64;

/// Tasks a run takes at once, of a request of `count` tasks shared by `runs` runs: consecutive
/// tasks go to one run (its reads stay sequential, one stream per worker, which a cold file
/// needs), while blocks small enough that every run still gets several keep the load even.
pub fn task_block(count: usize, runs: usize) -> usize {
    (count / (runs.max(1) * 4)).clamp(1, MAX_BLOCK)
}

/// Tasks a run leases next, with `remaining` tasks not yet handed out to `runs` runs, at most
/// `block` ([`task_block`]): the whole block while many remain, then less and less, down to one
/// task (guided scheduling). Fixed blocks end a request with a few runs reading a last block of
/// up to 64 tasks each while the others idle (docs/performance.md, "Leases that shrink at the
/// end").
pub fn lease_size(remaining: usize, runs: usize, block: usize) -> usize {
    (remaining / (2 * runs.max(1))).clamp(1, block.max(1))
}

/// Refuses a task size of 0, the request's own (`own`) or the settings' (`setting`): the one
/// rule and message every front end gives, before anything else of the request is asked.
pub fn check_task_size(own: Option<usize>, setting: usize) -> crate::error::Result<()> {
    if own == Some(0) || setting == 0 {
        return Err(crate::error::Error::InvalidArgument(
            "task_size must be at least 1 byte".into(),
        ));
    }
    Ok(())
}

/// The size of a request's tasks, now and were other requests in flight (equal unless the
/// split of a read alone applies): the one rule for every request that is not gathered
/// ([`super::gathers`]), in this order:
/// 1. an endpoint that serves a read as one request ([`super::Needs::one_request`]): one task;
/// 2. the caller's own task size, as given (`raw_read` is one task);
/// 3. a sink that takes parts ([`super::Needs::part_size`]): a task per part;
/// 4. the settings' `task_size` (at least the endpoint's smallest useful request), as it is
///    where each task is a server's request or the request belongs to a batch that keeps every
///    worker busy ([`batch_keeps_tasks_whole`]);
/// 5. otherwise cut for idle workers ([`effective_task_size`]), and cut further for a device
///    read of a local file on the bounce path that is alone in flight ([`alone_task_size`]).
pub fn task_size(shape: &super::Shape<'_>, settings: &Settings, bounce: bool) -> (usize, usize) {
    use crate::request::{Direction, Memory};
    let needs = &shape.needs;
    let read = shape.direction == Direction::Read;
    let fixed = match (needs.one_request && read, shape.task_size, needs.part_size) {
        (true, _, _) => Some(shape.len.max(1)),
        (false, Some(own), _) => Some(own),
        (false, None, Some(part)) if !read => Some(part),
        _ => None,
    };
    if let Some(size) = fixed {
        return (size.max(1), size.max(1));
    }
    let base = settings
        .task_size
        .max(needs.min_request.unwrap_or(0))
        .max(1);
    if needs.request_per_task || shape.batch_whole {
        return (base, base);
    }
    let busy = effective_task_size(shape.len, base, settings.num_threads, false);
    let alone = bounce && shape.memory == Memory::Device && read && needs.local_file;
    match alone && shape.alone {
        true => (alone_task_size(shape.len, busy, settings.num_threads), busy),
        false => (busy, busy),
    }
}
