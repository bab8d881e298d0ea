//! The KvikIO backend a source's or sink's operations are observed under (KvikIO's
//! `IoBackend`): a fact of the source, stated here so that the source layer names nothing
//! above it; `crate::observe` counts and reports by it and re-exports it.

/// The KvikIO backend an operation belongs to (KvikIO's `IoBackend`, same order and names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum IoBackend {
    /// POSIX reads and writes: gpufile's own path on a local file, page-cache DMA and the
    /// GPU's gather included.
    Posix = 0,
    /// cuFile (GPUDirect Storage, or cuFile's own compat path).
    Gds = 1,
    /// A memory-mapped file.
    Mmap = 2,
    /// HTTP(S): plain URLs, S3, Google Cloud Storage.
    RemoteHttp = 3,
    /// WebHDFS.
    RemoteHdfs = 4,
}

impl IoBackend {
    /// Every backend, in KvikIO's order.
    pub const ALL: [IoBackend; 5] = [
        IoBackend::Posix,
        IoBackend::Gds,
        IoBackend::Mmap,
        IoBackend::RemoteHttp,
        IoBackend::RemoteHdfs,
    ];

    /// KvikIO's name: `"POSIX"`, `"GDS"`, `"MMAP"`, `"REMOTE_HTTP"`, `"REMOTE_HDFS"`.
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::Posix => "POSIX",
            IoBackend::Gds => "GDS",
            IoBackend::Mmap => "MMAP",
            IoBackend::RemoteHttp => "REMOTE_HTTP",
            IoBackend::RemoteHdfs => "REMOTE_HDFS",
        }
    }
}
