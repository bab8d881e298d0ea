//! How a request's tasks are run once its path is chosen: which executor, and the policies it
//! follows (direct I/O, the bounce pipeline's chunks, page-cache DMA, a gather's host I/O).

use super::{chunk_size, HostIo, DMA_MIN_REQUEST};
use crate::config::Settings;
use crate::request::Direction;

/// The executor that runs a request's tasks, with its policies.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Strategy {
    /// cuFile moves each task between the file and GPU memory.
    Cufile,
    /// Each task is a `pread`/`pwrite` of the caller's host memory.
    Host {
        /// Direct I/O.
        direct: DirectIo,
    },
    /// Each task goes between the file and GPU memory through pinned bounce buffers, in chunks
    /// that overlap the file's side with the copies.
    Bounce {
        /// Direct I/O.
        direct: DirectIo,
        /// The pipeline's chunks.
        chunks: Chunks,
        /// Whether hot chunks are copied straight from registered page cache.
        dma: Dma,
    },
    /// Each task is a group of small ranges moved with one queue of I/O.
    Gather {
        /// Direct I/O.
        direct: DirectIo,
        /// io_uring or one `pread`/`pwrite` per range, and why.
        host_io: HostIo,
        /// For GPU memory: the pinned buffer a group is staged in, bytes (`None`: the caller's
        /// host memory is read into in place).
        staging: Option<usize>,
        /// Whether the GPU gathers hot ranges itself, with gpufile's gather kernel, from
        /// registered page cache (a device read of a local file; which ranges do is known only
        /// per range: its granule is registered or all resident, the file is unchanged).
        dma: Dma,
    },
}

/// When the file is opened with O_DIRECT (each chunk still needs aligned offsets, lengths and
/// memory, which only the chunk knows: [`crate::source::LocalFile`] checks that).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirectIo {
    /// Always (`auto_direct_io_read` / `auto_direct_io_write`).
    pub always: bool,
    /// Where no page of the chunk is in the page cache (`direct_io_uncached`, reads only).
    pub uncached: bool,
}

impl DirectIo {
    /// What the settings ask for in `direction`.
    pub fn of(settings: &Settings, direction: Direction) -> Self {
        match direction {
            Direction::Read => DirectIo {
                always: settings.auto_direct_io_read,
                uncached: settings.direct_io_uncached,
            },
            Direction::Write => DirectIo {
                always: settings.auto_direct_io_write,
                uncached: false,
            },
        }
    }
}

/// The bounce pipeline's chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Chunks {
    /// Size of each pinned buffer (`bounce_buffer_size`): the largest chunk.
    pub bounce: usize,
    /// A task that fits one buffer is one chunk (a sink that takes parts: a part is sent
    /// straight from the buffer, not collected from pieces).
    pub whole_tasks: bool,
}

impl Chunks {
    /// The chunk size of a task of `task_len` bytes.
    pub fn of(&self, task_len: usize) -> usize {
        match self.whole_tasks && task_len <= self.bounce {
            true => task_len.max(1),
            false => chunk_size(task_len, self.bounce),
        }
    }
}

/// Whether a device read copies hot chunks (a gather: ranges) straight from registered page
/// cache (`crate::exec::dma`); which chunks do is known only per chunk (its granule is all
/// resident, the file is unchanged).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum Dma {
    /// On, under a budget of this many registered bytes (`dma_cache_size`).
    On(usize),
    /// Off: `dma_cache_size` is 0.
    SettingOff,
    /// Off: `auto_direct_io_read` asks for O_DIRECT reads.
    DirectIo,
    /// Off: reads under [`DMA_MIN_REQUEST`] bytes.
    Small,
    /// Off: not a device read of a local file.
    NotADeviceRead,
    /// Off in this process (the text says why: the driver refused a registration).
    Disabled(String),
}

/// Page-cache DMA for a request: `device_read_of_local_file`, `len` bytes, `disabled` (asked
/// only where the rest allows DMA) says whether the process can register page cache.
pub fn page_cache_dma(
    settings: &Settings,
    device_read_of_local_file: bool,
    len: usize,
    disabled: impl FnOnce() -> Option<String>,
) -> Dma {
    if !device_read_of_local_file {
        Dma::NotADeviceRead
    } else if settings.dma_cache_size == 0 {
        Dma::SettingOff
    } else if settings.auto_direct_io_read {
        Dma::DirectIo
    } else if len < DMA_MIN_REQUEST {
        Dma::Small
    } else {
        match disabled() {
            Some(why) => Dma::Disabled(why),
            None => Dma::On(settings.dma_cache_size),
        }
    }
}

/// The decision in words, for reports: "on, ..." or "off: why".
impl std::fmt::Display for Dma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dma::On(budget) => write!(
                f,
                "on, up to dma_cache_size {budget} bytes registered, for data read before"
            ),
            Dma::SettingOff => f.write_str("off: dma_cache_size is 0"),
            Dma::DirectIo => f.write_str("off: auto_direct_io_read asks for O_DIRECT reads"),
            Dma::Small => write!(f, "off: the request is under {DMA_MIN_REQUEST} bytes"),
            Dma::NotADeviceRead => f.write_str("off: not a GPU read of a local file"),
            Dma::Disabled(why) => write!(f, "off: {why}"),
        }
    }
}
