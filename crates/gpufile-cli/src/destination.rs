//! Where `gpufile read` and `gpufile load` put the bytes: one allocation, on a GPU or in host
//! memory, chosen from `--device N` / `--host` or, where the user named none, GPU 0 when CUDA has
//! a device (else host memory, with the reason).

use gpufile::{Buffer, Memory};

use crate::{units, CliError};

/// One allocation a command reads into.
pub(crate) enum Destination {
    /// Host memory.
    Host(Vec<u8>),
    /// Device memory of GPU `ordinal`.
    Device {
        buf: gpufile::DeviceBuffer,
        ordinal: i32,
        name: String,
    },
}

pub(crate) use gpufile_diag::explain::default_memory;

impl Destination {
    /// `size` bytes: host memory with `host`, GPU `device`, else the default memory (with the
    /// reason when that is host memory). Host memory sized by the user is reserved fallibly: a
    /// clear error, not an abort, where it runs out; `what` says what it is for.
    pub(crate) fn choose(
        host: bool,
        device: Option<i32>,
        size: usize,
        what: &str,
    ) -> Result<(Self, Option<String>), CliError> {
        let gpu = |ordinal: i32| -> Result<Self, CliError> {
            let name = gpufile::__private::cuda::device_name(ordinal)?;
            let buf = gpufile::DeviceBuffer::new(size, ordinal)?;
            Ok(Destination::Device { buf, ordinal, name })
        };
        let host_memory = || -> Result<Self, CliError> {
            let mut v = Vec::new();
            v.try_reserve_exact(size).map_err(|_| {
                CliError::new(
                    "out-of-memory",
                    format!(
                        "cannot allocate {} of host memory{what}",
                        units::size(size as u64)
                    ),
                )
            })?;
            v.resize(size, 0);
            Ok(Destination::Host(v))
        };
        if host {
            return Ok((host_memory()?, None));
        }
        if let Some(ordinal) = device {
            return Ok((gpu(ordinal)?, None));
        }
        match default_memory() {
            (Memory::Device, _) => Ok((gpu(0)?, None)),
            (Memory::Host, why) => Ok((host_memory()?, why)),
        }
    }

    /// Host or device.
    pub(crate) fn memory(&self) -> Memory {
        match self {
            Destination::Host(_) => Memory::Host,
            Destination::Device { .. } => Memory::Device,
        }
    }

    /// "host" or "GPU N (name)".
    pub(crate) fn describe(&self) -> String {
        match self {
            Destination::Host(_) => "host".into(),
            Destination::Device { ordinal, name, .. } => format!("GPU {ordinal} ({name})"),
        }
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Destination::Host(v) => v.len(),
            Destination::Device { buf, .. } => buf.len(),
        }
    }

    /// The destination's `len` bytes at `offset`, for a request (the caller keeps the range
    /// inside the allocation).
    pub(crate) fn buffer(&mut self, offset: usize, len: usize) -> Buffer {
        match self {
            Destination::Host(v) => Buffer::host(&mut v[offset..offset + len]),
            Destination::Device { buf, .. } => Buffer::Device {
                addr: buf.addr() + offset as u64,
                len,
            },
        }
    }

    /// Copies `dst.len()` bytes at `offset` out of the destination.
    pub(crate) fn copy_out(&self, offset: usize, dst: &mut [u8]) -> gpufile::Result<()> {
        match self {
            Destination::Host(v) => {
                dst.copy_from_slice(&v[offset..offset + dst.len()]);
                Ok(())
            }
            Destination::Device { buf, .. } => buf.copy_to_host(offset, dst),
        }
    }
}
