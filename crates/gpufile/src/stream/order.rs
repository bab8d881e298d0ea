//! The decision for a stream-ordered request: how the stream's later work waits for it
//! ([`StreamOrder`]), with its reason, from what the driver offers.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::cuda::{self, StreamOpsSupport};
use crate::error::{Error, Result};
use crate::future::lock;

/// How the work queued on a stream after a stream-ordered request waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamOrder {
    /// `cuStreamWaitValue32` on a flag gpufile sets when the host part ends.
    WaitValue,
    /// A host function on the stream blocks until the host part ends.
    HostFunction,
    /// A write: the stream copies the source into pinned staging; its later work follows the
    /// copy, and the file write runs after it, off the stream.
    Staged,
    /// The calling thread waits for the stream, then for the request.
    CallerWaits,
}

impl StreamOrder {
    /// The name shown in reports (`"wait-value"`, `"host-function"`, `"staged"`,
    /// `"caller-waits"`).
    pub fn as_str(self) -> &'static str {
        match self {
            StreamOrder::WaitValue => "wait-value",
            StreamOrder::HostFunction => "host-function",
            StreamOrder::Staged => "staged",
            StreamOrder::CallerWaits => "caller-waits",
        }
    }

    /// The order a name says, `None` for an unknown name.
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::WaitValue,
            Self::HostFunction,
            Self::Staged,
            Self::CallerWaits,
        ]
        .into_iter()
        .find(|o| o.as_str() == name)
    }
}

impl std::fmt::Display for StreamOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The decision for a stream-ordered request: how, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOrdering {
    /// How the stream waits.
    pub order: StreamOrder,
    /// Why this way.
    pub reason: String,
}

impl StreamOrdering {
    pub(super) fn new(order: StreamOrder, reason: impl Into<String>) -> Self {
        StreamOrdering {
            order,
            reason: reason.into(),
        }
    }
}

/// How stream-ordered reads wait, given what the driver offers (`Err`: no usable driver, and
/// why) and an order asked for (`prefer`; an order the driver cannot do is an error). Writes
/// from device memory take [`StreamOrder::Staged`] wherever reads can be queued.
pub fn choose(
    support: std::result::Result<StreamOpsSupport, String>,
    prefer: Option<StreamOrder>,
) -> Result<StreamOrdering> {
    use StreamOrder::*;
    let s = match support {
        Ok(s) => s,
        Err(_) if prefer.is_some_and(|p| p != CallerWaits) => {
            return Err(unable(prefer, "there is no CUDA driver"))
        }
        Err(why) => {
            return Ok(StreamOrdering::new(
                CallerWaits,
                format!("no CUDA driver ({why}): nothing can be queued on a stream"),
            ))
        }
    };
    let (major, minor) = s.driver;
    let wait_value =
        if !s.mapped_memory {
            Err("the driver has no cuMemHostGetDevicePointer".to_owned())
        } else if s.wait_value_v2 && major >= 12 {
            Ok("cuStreamWaitValue32 on a flag gpufile sets (stream memory operations are on every \
            device from CUDA 12)")
        } else if s.wait_value_v1 && s.mem_ops_v1 {
            Ok(
                "cuStreamWaitValue32 on a flag gpufile sets (the device enables stream memory \
            operations)",
            )
        } else {
            Err(format!(
                "stream memory operations are off (driver {major}.{minor}; \
             CAN_USE_STREAM_MEM_OPS_V1 is 0: the nvidia module's NVreg_EnableStreamMemOPs=1 \
             turns them on)"
            ))
        };
    match (prefer, s.host_func, wait_value) {
        (Some(CallerWaits), ..) => Ok(StreamOrdering::new(CallerWaits, "asked for")),
        (_, false, _) if prefer.is_some() => {
            Err(unable(prefer, "the driver has no cuLaunchHostFunc"))
        }
        (_, false, _) => Ok(StreamOrdering::new(
            CallerWaits,
            format!("the driver ({major}.{minor}) has no cuLaunchHostFunc"),
        )),
        (Some(HostFunction), true, _) => Ok(StreamOrdering::new(HostFunction, "asked for")),
        (Some(Staged), true, _) => Ok(StreamOrdering::new(Staged, "asked for")),
        (Some(WaitValue), true, Err(why)) => Err(unable(prefer, &why)),
        (_, true, Ok(how)) => Ok(StreamOrdering::new(WaitValue, how)),
        (_, true, Err(why)) => Ok(StreamOrdering::new(
            HostFunction,
            format!("{why}: a host function on the stream blocks until the transfer ends"),
        )),
    }
}

pub(super) fn unable(prefer: Option<StreamOrder>, why: &str) -> Error {
    let asked = prefer.map_or("?", StreamOrder::as_str);
    Error::InvalidArgument(format!("stream order {asked} cannot be used here: {why}"))
}

/// How stream-ordered reads on device `ordinal` wait (asked of the driver once per device).
pub fn ordering_for(ordinal: i32) -> StreamOrdering {
    static KNOWN: Mutex<Option<HashMap<i32, StreamOrdering>>> = Mutex::new(None);
    let mut known = lock(&KNOWN);
    let known = known.get_or_insert_with(HashMap::new);
    known
        .entry(ordinal)
        .or_insert_with(|| {
            let support = cuda::stream_ops_support(ordinal).map_err(|e| e.to_string());
            choose(support, None)
                .unwrap_or_else(|e| StreamOrdering::new(StreamOrder::CallerWaits, e.to_string()))
        })
        .clone()
}

/// The order a request takes, from the device's (or the asked) order for reads: a write from
/// device memory is staged wherever a read could be queued; `Staged` is for such writes only.
pub(super) fn order_for_request(
    base: StreamOrdering,
    asked: bool,
    write: bool,
    device: bool,
) -> Result<StreamOrdering> {
    use StreamOrder::*;
    match (base.order, write && device) {
        (CallerWaits, _) => Ok(base),
        (Staged, false) => Err(Error::InvalidArgument(
            "stream order staged is for writes from device memory: a read, or a transfer of \
             host memory, waits on the stream (wait-value or host-function)"
                .into(),
        )),
        (Staged, true) => Ok(base),
        (WaitValue | HostFunction, true) if asked => Err(unable(
            Some(base.order),
            "a write from device memory is staged (the stream copies its source, then goes on)",
        )),
        (WaitValue | HostFunction, true) => Ok(StreamOrdering::new(
            Staged,
            "the stream copies the source into pinned staging and goes on; the file write runs \
             after the copy, off the stream",
        )),
        (WaitValue | HostFunction, false) => Ok(base),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuda12() -> StreamOpsSupport {
        StreamOpsSupport {
            driver: (12, 4),
            wait_value_v2: true,
            wait_value_v1: true,
            mem_ops_v1: false,
            mapped_memory: true,
            host_func: true,
        }
    }

    #[test]
    fn the_order_is_a_value_with_its_reason() {
        use StreamOrder::*;
        let got = |s, p| choose(s, p).unwrap();
        let best = got(Ok(cuda12()), None);
        assert_eq!(best.order, WaitValue);
        assert!(
            best.reason.contains("cuStreamWaitValue32"),
            "{}",
            best.reason
        );
        // CUDA 11 with memory operations off: the host function, and how to turn them on.
        let old = StreamOpsSupport {
            driver: (11, 8),
            ..cuda12()
        };
        let fallback = got(Ok(old), None);
        assert_eq!(fallback.order, HostFunction);
        assert!(
            fallback.reason.contains("NVreg_EnableStreamMemOPs=1"),
            "{}",
            fallback.reason
        );
        let enabled = StreamOpsSupport {
            mem_ops_v1: true,
            ..old
        };
        assert_eq!(got(Ok(enabled), None).order, WaitValue);
        let unmapped = StreamOpsSupport {
            mapped_memory: false,
            ..cuda12()
        };
        assert_eq!(got(Ok(unmapped), None).order, HostFunction);
        let ancient = StreamOpsSupport {
            host_func: false,
            ..old
        };
        let waits = got(Ok(ancient), None);
        assert_eq!(waits.order, CallerWaits);
        assert!(
            waits.reason.contains("cuLaunchHostFunc"),
            "{}",
            waits.reason
        );
        let none = got(Err("libcuda.so.1 not found".into()), None);
        assert_eq!(none.order, CallerWaits);
        assert!(
            none.reason.contains("libcuda.so.1 not found"),
            "{}",
            none.reason
        );
    }

    #[test]
    fn a_write_from_device_memory_is_staged_and_only_it() {
        use StreamOrder::*;
        let wv = || StreamOrdering::new(WaitValue, "cuStreamWaitValue32 ...");
        let got = |base, asked, write, device| order_for_request(base, asked, write, device);
        // A device write: staged, with why; a host write or any read keeps the stream's wait.
        let w = got(wv(), false, true, true).unwrap();
        assert_eq!(w.order, Staged);
        assert!(w.reason.contains("copies the source"), "{}", w.reason);
        assert_eq!(got(wv(), false, true, false).unwrap().order, WaitValue);
        assert_eq!(got(wv(), false, false, true).unwrap().order, WaitValue);
        // Asking for a wait on a device write, or staging for anything else, says why not.
        let e = got(wv(), true, true, true).unwrap_err();
        assert!(e.to_string().contains("is staged"), "{e}");
        let staged = StreamOrdering::new(Staged, "asked for");
        let e = got(staged.clone(), true, false, true).unwrap_err();
        assert!(
            e.to_string().contains("for writes from device memory"),
            "{e}"
        );
        assert_eq!(got(staged, true, true, true).unwrap().order, Staged);
        // Where nothing can be queued, every request waits for the caller.
        let cw = StreamOrdering::new(CallerWaits, "no CUDA driver");
        assert_eq!(got(cw, false, true, true).unwrap().order, CallerWaits);
        assert_eq!(choose(Ok(cuda12()), Some(Staged)).unwrap().order, Staged);
    }

    #[test]
    fn an_order_asked_for_is_used_or_refused_with_why() {
        use StreamOrder::*;
        assert_eq!(
            choose(Ok(cuda12()), Some(HostFunction)).unwrap().order,
            HostFunction
        );
        assert_eq!(
            choose(Ok(cuda12()), Some(CallerWaits)).unwrap().order,
            CallerWaits
        );
        let old = StreamOpsSupport {
            driver: (11, 8),
            ..cuda12()
        };
        let e = choose(Ok(old), Some(WaitValue)).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("wait-value") && m.contains("off")),
            "{e}"
        );
        let e = choose(Err("no driver".into()), Some(HostFunction)).unwrap_err();
        assert!(e.to_string().contains("no CUDA driver"), "{e}");
        assert_eq!(
            choose(Err("no driver".into()), Some(CallerWaits))
                .unwrap()
                .order,
            CallerWaits
        );
        for o in [WaitValue, HostFunction, Staged, CallerWaits] {
            assert_eq!(StreamOrder::parse(o.as_str()), Some(o));
        }
        assert_eq!(StreamOrder::parse("soon"), None);
    }
}
