//! A request as its monitors see it ([`crate::observe::ops`]): made only where a monitor is
//! registered when the request starts, so an unwatched request pays one atomic load.

use std::time::Instant;

use crate::error::Error;
use crate::observe::{self, DataPath, IoBackend, Operation, Why};
use crate::plan::{Backend, Reason, Strategy};
use crate::request::{Buffer, Direction, Memory, Request};
use crate::source::Endpoint;

/// What a request's observations say, fixed when it starts.
pub(super) struct Watch {
    id: u64,
    start: Instant,
    offset: u64,
    size: u64,
    direction: Direction,
    memory: Memory,
    backend: IoBackend,
    /// The path, before its end says whether DMA carried bytes.
    path: DataPath,
    /// A gather: its DMA is the GPU's own gather.
    gathered: bool,
    reason: Reason,
    endpoint: Endpoint,
}

impl Watch {
    /// The watch of a request planned onto `backend` by `strategy`, for `reason`, where a
    /// monitor is registered now.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        endpoint: &Endpoint,
        direction: Direction,
        memory: Memory,
        offset: u64,
        size: usize,
        backend: Backend,
        strategy: &Strategy,
        reason: Reason,
    ) -> Option<Watch> {
        if !observe::ops::watching() {
            return None;
        }
        let (backend, path) = paths(endpoint, backend, Some(&reason));
        Some(Watch {
            id: observe::ops::next_id(),
            start: Instant::now(),
            offset,
            size: size as u64,
            direction,
            memory,
            backend,
            path,
            gathered: matches!(strategy, Strategy::Gather { .. }),
            reason,
            endpoint: endpoint.clone(),
        })
    }

    /// When the request was issued.
    pub(super) fn start(&self) -> Instant {
        self.start
    }

    /// The operation: at its start, or ended with `bytes` moved (`dma` of them by page-cache
    /// DMA) in `tasks`.
    pub(super) fn operation(
        &self,
        end: Option<Instant>,
        bytes: usize,
        tasks: usize,
        dma: u64,
        ok: bool,
    ) -> Operation<'_> {
        let path = match (self.path, dma > 0, self.gathered) {
            (DataPath::GpufilePosix, true, true) => DataPath::GpuGather,
            (DataPath::GpufilePosix, true, false) => DataPath::PageCacheDma,
            (p, _, _) => p,
        };
        Operation {
            id: self.id,
            start: self.start,
            end: end.unwrap_or(self.start),
            offset: self.offset,
            size: self.size,
            bytes_transferred: if ok { bytes as u64 } else { 0 },
            direction: self.direction,
            memory: self.memory,
            backend: self.backend,
            path,
            why: Why::Planned(&self.reason),
            tasks,
            dma_bytes: dma,
            ok,
            endpoint: &self.endpoint,
        }
    }

    /// Tells the monitors the request started.
    pub(super) fn started(&self, tasks: usize) {
        observe::ops::deliver_start(&self.operation(None, 0, tasks, 0, true));
    }
}

/// KvikIO's backend and gpufile's path of a request on `endpoint` that `backend` runs, for
/// `reason`.
fn paths(endpoint: &Endpoint, backend: Backend, reason: Option<&Reason>) -> (IoBackend, DataPath) {
    match (endpoint.io_backend(), backend) {
        (IoBackend::Posix | IoBackend::Gds, Backend::Cufile) => {
            // AUTO took cuFile for its accelerated path; OFF takes it whatever cuFile can do.
            let accelerated = matches!(reason, Some(Reason::Accelerated(_)))
                || matches!(
                    crate::cufile::availability(),
                    crate::plan::Availability::Accelerated(_)
                );
            let path = match accelerated {
                true => DataPath::CufileNvfs,
                false => DataPath::CufileCompat,
            };
            (IoBackend::Gds, path)
        }
        (IoBackend::Mmap, _) => (IoBackend::Mmap, DataPath::Mmap),
        (b @ (IoBackend::RemoteHttp | IoBackend::RemoteHdfs), _) => (b, DataPath::Remote),
        (b, Backend::GpufilePosix) => (b, DataPath::GpufilePosix),
    }
}

/// What the observation of a refused request says of it, taken before it is planned.
pub(super) struct Asked {
    direction: Direction,
    memory: Memory,
    offset: u64,
    size: u64,
}

impl Asked {
    /// `req`'s facts, where a monitor is registered now.
    pub(super) fn of(req: &Request) -> Option<Asked> {
        observe::ops::watching().then(|| Asked {
            direction: req.direction,
            memory: match req.buffer {
                Buffer::Host { .. } => Memory::Host,
                Buffer::Device { .. } => Memory::Device,
            },
            offset: req.ranges.as_slice().first().map_or(0, |r| r.file_offset),
            size: req.len() as u64,
        })
    }

    /// Tells the monitors the request was refused before any byte moved: it started and failed
    /// at once (KvikIO counts such a call as an operation that failed).
    pub(super) fn refused(self, endpoint: &Endpoint, error: &Error) {
        let (backend, path) = paths(endpoint, Backend::GpufilePosix, None);
        let now = Instant::now();
        let op = Operation {
            id: observe::ops::next_id(),
            start: now,
            end: now,
            offset: self.offset,
            size: self.size,
            bytes_transferred: 0,
            direction: self.direction,
            memory: self.memory,
            backend,
            path,
            why: Why::Refused(error),
            tasks: 0,
            dma_bytes: 0,
            ok: true,
            endpoint,
        };
        observe::ops::deliver_start(&op);
        observe::ops::deliver(&Operation { ok: false, ..op }, true);
    }
}
