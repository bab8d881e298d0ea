//! Checking and planning a request ([`Engine::prepare`]): its arguments, the caller's memory,
//! the facts its endpoint states and this machine's answers ([`plan::Machine`]) go into the
//! plan ([`crate::plan`]), which decides everything the request will do. Nothing moves here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::{Engine, PathReport};
use crate::config::Settings;
use crate::cuda::{self, DeviceTarget, MemoryKind};
use crate::cufile::{self, RegisteredFile};
use crate::error::{Error, Result};
use crate::future::StopFlag;
use crate::observe;
use crate::plan::{
    self, Backend, CallerPart, Dma, HostIoReason, IoPath, Reason, Shape, Strategy, TaskSplit,
};
use crate::request::{Buffer, Direction, Memory, Ranges, Request, SendPtr};
use crate::source::{Endpoint, IoContext, LocalFile};

impl Engine {
    /// The path a request of `len` bytes into or out of `memory` on `endpoint` takes under
    /// `settings`, and why (an error where compat_mode OFF cannot be honoured); registers a
    /// local file with cuFile where the decision depends on it, as the request would.
    pub fn io_path(
        endpoint: &Endpoint,
        memory: Memory,
        len: usize,
        settings: &Settings,
    ) -> Result<IoPath> {
        let local = endpoint.local_file();
        let ranges = Ranges::One(crate::request::Range {
            file_offset: 0,
            len,
            buf_offset: 0,
        });
        let shape = Shape {
            direction: endpoint.direction(),
            memory,
            ranges: &ranges,
            len,
            task_size: None,
            caller_waits: false,
            alone: false,
            batch_whole: false,
            needs: endpoint.needs(local.is_some()),
        };
        Self::plan(endpoint, local.as_ref(), &shape, settings, None, None)
            .map(|planned| planned.path)
    }

    /// Plans `shape` on `endpoint` (see [`plan::plan_request`]) with this machine's answers:
    /// cuFile's availability, the endpoint's registration, io_uring (the engine's probe), page-cache
    /// DMA (`dma_disabled`: why the engine's page-cache registrations are off, if they are).
    /// Says once why device I/O does not take cuFile's path where AUTO falls back.
    pub(super) fn plan(
        endpoint: &Endpoint,
        local: Option<&Arc<LocalFile>>,
        shape: &Shape<'_>,
        settings: &Settings,
        dma_disabled: Option<&str>,
        device: Option<DeviceTarget>,
    ) -> Result<Planned> {
        let mut machine = ThisMachine {
            local,
            registration: None,
            dma_disabled,
            device,
        };
        let plan = plan::plan_request(shape, settings, &mut machine);
        if let Some(local) = local {
            observe::file_notice(local); // its registration may have opened O_DIRECT
        }
        let path = plan.path?;
        let strategy = plan
            .strategy
            .ok_or_else(|| Error::InvalidArgument("a plan with a path has a strategy".into()))?;
        let registered = match (path.backend, machine.registration) {
            (Backend::Cufile, Some(registered)) => registered,
            // cuFile was chosen and the file refused: said for the file.
            (Backend::GpufilePosix, Some(_)) => {
                let why = format!(
                    "compat_mode AUTO: {} uses gpufile's POSIX path ({})",
                    endpoint.describe(),
                    path.reason
                );
                observe::notice("registration-fallback", why);
                None
            }
            _ => {
                if let Reason::NotAccelerated(_) | Reason::CufileUnavailable(_) = path.reason {
                    // Said once per process: this runs for every device request.
                    static SAID: AtomicBool = AtomicBool::new(false);
                    if !SAID.swap(true, Ordering::Relaxed) {
                        observe::notice(
                            "auto-posix",
                            format!(
                                "compat_mode AUTO: device I/O uses gpufile's POSIX path ({})",
                                path.reason
                            ),
                        );
                    }
                }
                None
            }
        };
        if let Strategy::Bounce {
            dma: Dma::Disabled(why),
            ..
        }
        | Strategy::Gather {
            dma: Dma::Disabled(why),
            ..
        } = &strategy
        {
            observe::notice("dma-disabled", why.clone());
        }
        Ok(Planned {
            path,
            strategy,
            tasks: plan.tasks,
            caller: plan.caller,
            runs: plan.runs,
            registered,
        })
    }

    /// Checks and plans `req` on `endpoint`, moving no byte: every argument error comes from
    /// here. `may_be_alone`: no other request of the same call starts before this one;
    /// `batch_whole`: the request is one of a batch that keeps every worker busy.
    pub(super) fn prepare(
        &self,
        endpoint: &Endpoint,
        req: Request,
        settings: &Settings,
        report: bool,
        may_be_alone: bool,
        batch_whole: bool,
    ) -> Result<Prepared> {
        self.accept(endpoint, &req, settings)?;
        let target = resolve(req.buffer, req.pointer_info)?;
        let len = req.len();
        endpoint.check(&req.ranges)?;
        let local = endpoint.local_file();
        let device_read = matches!(target, Target::Device { .. })
            && req.direction == Direction::Read
            && req.task_size.is_none()
            && !batch_whole;
        let shape = Shape {
            direction: req.direction,
            memory: target.memory(),
            ranges: &req.ranges,
            len,
            task_size: req.task_size,
            caller_waits: req.caller_waits,
            // Asked only where it matters (the in-flight count takes a lock).
            alone: device_read && may_be_alone && self.in_flight() == 0,
            batch_whole,
            needs: endpoint.needs(local.is_some()),
        };
        let device = match target {
            Target::Device { device, .. } => Some(device),
            Target::Host(_) => None,
        };
        let plan_now = |shape: &Shape<'_>| {
            Self::plan(
                endpoint,
                local.as_ref(),
                shape,
                settings,
                self.dma.disabled(),
                device,
            )
        };
        let mut plan = plan_now(&shape)?;
        if plan.tasks.count() > 1 && learned(endpoint, req.stop.as_ref())? {
            let shape = Shape {
                needs: endpoint.needs(local.is_some()),
                ..shape
            };
            plan = plan_now(&shape)?;
        }
        let device = matches!(target, Target::Device { .. });
        let report = report.then(|| PathReport {
            path: plan.path.clone(),
            ranges: req.ranges.as_slice().len(),
            tasks: plan.tasks.count(),
            gathered: plan.tasks.is_grouped(),
            host_io: match &plan.strategy {
                Strategy::Gather { host_io, .. } => Some(host_io.clone()),
                _ => None,
            },
            copies: (plan.tasks.is_grouped() && device).then(|| plan::gather_copies(&plan.tasks)),
            gather_dma: match &plan.strategy {
                Strategy::Gather { dma, .. } if device => Some(dma.clone()),
                _ => None,
            },
        });
        Ok(Prepared {
            offset: req.ranges.as_slice().first().map_or(0, |r| r.file_offset),
            endpoint: endpoint.clone(),
            direction: req.direction,
            len,
            after: req.after,
            target,
            plan,
            local,
            report,
        })
    }

    /// Whether [`Engine::submit`] would accept `req` now: every check a submission makes before
    /// its first byte moves (the arguments, the direction, the ranges against the file, the
    /// memory, the path the settings allow), with nothing started. A caller starting several
    /// requests as one checks them all first, so that a refusal leaves every file as it was.
    pub fn check(&self, endpoint: &Endpoint, req: &Request, settings: &Settings) -> Result<()> {
        self.prepare(endpoint, req.clone(), settings, false, true, false)
            .map(drop)
    }

    /// Checks what every request needs before its endpoint is asked.
    pub(super) fn accept(
        &self,
        endpoint: &Endpoint,
        req: &Request,
        settings: &Settings,
    ) -> Result<()> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(Error::ShuttingDown);
        }
        plan::check_task_size(req.task_size, settings.task_size)?;
        if endpoint.direction() != req.direction {
            return Err(Error::InvalidArgument(format!(
                "a {} request on {}, which is open for {}s only",
                req.direction,
                endpoint.describe(),
                endpoint.direction()
            )));
        }
        req.ranges.check(req.direction, req.buffer.len())
    }
}

/// Whether the source of a read that its plan splits learned, before the read starts,
/// something that changes its plan ([`crate::source::Source::before_split_read`]: a remote
/// object asks whether its server honours `Range`, so that a server that ignores it sends the
/// object once, not once per task). Asked on the submitting thread, under the caller's `stop`.
fn learned(endpoint: &Endpoint, stop: Option<&StopFlag>) -> Result<bool> {
    let Endpoint::Read(source) = endpoint else {
        return Ok(false);
    };
    let unstoppable = StopFlag::default();
    let progress = AtomicU64::new(0);
    source.before_split_read(IoContext {
        progress: &progress,
        direct: false,
        direct_uncached: false,
        stop: stop.unwrap_or(&unstoppable),
    })
}

/// A request's plan with its path decided, and the registered file where cuFile runs it.
pub(super) struct Planned {
    pub(super) path: IoPath,
    pub(super) strategy: Strategy,
    pub(super) tasks: TaskSplit,
    pub(super) caller: CallerPart,
    pub(super) runs: usize,
    pub(super) registered: Option<Arc<RegisteredFile>>,
}

/// A request checked and planned ([`Engine::prepare`]), not started.
pub(super) struct Prepared {
    pub(super) endpoint: Endpoint,
    pub(super) direction: Direction,
    pub(super) len: usize,
    pub(super) after: Option<cuda::StreamWait>,
    pub(super) target: Target,
    pub(super) plan: Planned,
    pub(super) local: Option<Arc<LocalFile>>,
    pub(super) report: Option<PathReport>,
    /// Where its first range starts in the file (for its observation).
    pub(super) offset: u64,
}

/// The caller's memory, resolved: host memory, or GPU memory with its allocation and context.
#[derive(Clone, Copy, Debug)]
pub(super) enum Target {
    Host(SendPtr),
    Device {
        device: DeviceTarget,
        /// Start of the allocation holding the range (cuFile addresses buffers by base + offset).
        base: u64,
    },
}

impl Target {
    pub(super) fn memory(&self) -> Memory {
        match self {
            Target::Host(_) => Memory::Host,
            Target::Device { .. } => Memory::Device,
        }
    }
}

/// This machine, as the planner asks it ([`plan::Machine`]).
pub(super) struct ThisMachine<'a> {
    pub(super) local: Option<&'a Arc<LocalFile>>,
    /// Set where the plan asked for the registration: `Some(None)` where it was refused.
    pub(super) registration: Option<Option<Arc<RegisteredFile>>>,
    /// Why the engine's page-cache registrations are off in this process, if they are (`None`
    /// too for a path asked without an engine).
    pub(super) dma_disabled: Option<&'a str>,
    /// The caller's GPU memory (`None`: host memory, or a path asked without memory).
    pub(super) device: Option<DeviceTarget>,
}

impl plan::Machine for ThisMachine<'_> {
    fn cufile(&mut self) -> plan::Availability {
        cufile::availability()
    }

    fn registration(&mut self) -> std::result::Result<(), String> {
        let r = self.local.map(|l| l.registered());
        let outcome = match &r {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("not a local file".to_owned()),
        };
        self.registration = Some(r.and_then(Result::ok));
        outcome
    }

    fn io_uring(&mut self) -> std::result::Result<String, HostIoReason> {
        super::io_uring()
    }

    fn dma_disabled(&mut self) -> Option<String> {
        self.dma_disabled.map(str::to_owned)
    }

    fn gather_kernel(&mut self) -> std::result::Result<(), String> {
        let Some(d) = self.device else {
            return Err("not GPU memory".to_owned());
        };
        // The kernel lives in the device's primary context; memory of another context is not
        // mapped there.
        match cuda::primary_context(d.device) {
            Ok(primary) if primary == d.ctx => cuda::gather_kernel(d.device).map(drop),
            Ok(_) => Err(format!(
                "the memory belongs to a context other than GPU {}'s primary context, where \
                 the gather kernel is loaded",
                d.device
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Resolves the caller's memory: a device address is classified by CUDA (a pinned host address
/// takes the host path); a range past its allocation is refused, pinned host memory included.
/// `known`: the caller's classification of an address in the same allocation, used when it
/// covers `addr` (asking the driver again costs a `cuPointerGetAttributes` per request).
pub(super) fn resolve(buffer: Buffer, known: Option<cuda::PointerInfo>) -> Result<Target> {
    let (addr, len) = match buffer {
        Buffer::Host { ptr, .. } => return Ok(Target::Host(SendPtr(ptr))),
        Buffer::Device { addr, len } => (addr, len),
    };
    let covers = |i: &cuda::PointerInfo| {
        matches!(i.kind, MemoryKind::Device | MemoryKind::Managed)
            && addr >= i.base
            && addr - i.base < i.size as u64
    };
    let info = match known.filter(covers) {
        Some(i) => i,
        None => cuda::classify(addr)?,
    };
    match info.kind {
        MemoryKind::Host => Err(Error::InvalidArgument(format!(
            "address {addr:#x} is not GPU memory CUDA knows of"
        ))),
        MemoryKind::PinnedHost => {
            // CUDA gives the range of page-locked allocations too (cuMemHostAlloc and
            // cuMemHostRegister); where it gives none, or a range in another address space than
            // the pointer's, there is nothing to check against.
            let known = info.size > 0 && addr >= info.base && addr - info.base < info.size as u64;
            if known {
                within_allocation(addr, len, info.base, info.size)?;
            }
            Ok(Target::Host(SendPtr(addr as *mut u8)))
        }
        MemoryKind::Device | MemoryKind::Managed => {
            within_allocation(addr, len, info.base, info.size)?;
            let device = info.device.unwrap_or(0);
            let ctx = match info.context {
                Some(c) => c,
                None => cuda::primary_context(device)?,
            };
            Ok(Target::Device {
                device: DeviceTarget { addr, ctx, device },
                base: info.base,
            })
        }
    }
}

/// Refuses `len` bytes at `addr` that run past the allocation of `size` bytes at `base`.
pub(super) fn within_allocation(addr: u64, len: usize, base: u64, size: usize) -> Result<()> {
    let end = base.saturating_add(size as u64);
    if addr < base || addr.checked_add(len as u64).is_none_or(|e| e > end) {
        return Err(Error::InvalidArgument(format!(
            "{len} bytes at {addr:#x} run past the end of their allocation ({size} bytes at \
             {base:#x})"
        )));
    }
    Ok(())
}
