//! The driver and its devices: version, count, names, memory, PCI addresses, attributes and the
//! stream operations a device offers.

use gpufile_sys as sys;

use super::result;
use crate::error::Result;

/// The driver's version as (major, minor), e.g. (13, 0).
pub fn driver_version() -> Result<(i32, i32)> {
    let v = result::driver_get_version()?;
    Ok((v / 1000, (v % 1000) / 10))
}

/// Number of CUDA devices.
pub fn device_count() -> Result<usize> {
    Ok(result::device_get_count()?.max(0) as usize)
}

/// A device's name ("NVIDIA H200").
pub fn device_name(ordinal: i32) -> Result<String> {
    result::device_get_name(result::device_get(ordinal)?)
}

/// A device's total memory in bytes.
pub fn device_total_memory(ordinal: i32) -> Result<usize> {
    result::device_total_mem(result::device_get(ordinal)?)
}

/// A device's PCI address as sysfs names it ("0000:3b:00.0").
pub fn device_pci_address(ordinal: i32) -> Result<String> {
    let dev = result::device_get(ordinal)?;
    let attr = |a| result::device_get_attribute(a, dev);
    let (domain, bus, device) = (
        attr(sys::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attr(sys::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attr(sys::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
    );
    Ok(format!("{domain:04x}:{bus:02x}:{device:02x}.0"))
}

/// A device attribute (`cuDeviceGetAttribute`).
pub fn device_attribute(ordinal: i32, attr: std::ffi::c_int) -> Result<i32> {
    result::device_get_attribute(attr, result::device_get(ordinal)?)
}

/// What the driver offers for ordering gpufile's work on an application's stream (see
/// `crate::stream`): the entry points present and what the device says of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOpsSupport {
    /// The driver's version (major, minor).
    pub driver: (i32, i32),
    /// `cuStreamWaitValue32_v2` is exported.
    pub wait_value_v2: bool,
    /// `cuStreamWaitValue32` (v1) is exported.
    pub wait_value_v1: bool,
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1` is 1 on the device.
    pub mem_ops_v1: bool,
    /// `cuMemHostGetDevicePointer_v2` is exported (a flag the device can read).
    pub mapped_memory: bool,
    /// `cuLaunchHostFunc` is exported.
    pub host_func: bool,
}

/// Asks the driver what [`StreamOpsSupport`] device `ordinal` has.
pub fn stream_ops_support(ordinal: i32) -> Result<StreamOpsSupport> {
    let api = result::api()?;
    Ok(StreamOpsSupport {
        driver: driver_version()?,
        wait_value_v2: api.stream_wait_value32_v2.is_some(),
        wait_value_v1: api.stream_wait_value32.is_some(),
        mem_ops_v1: device_attribute(ordinal, sys::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1)
            .is_ok_and(|v| v == 1),
        mapped_memory: api.mem_host_get_device_pointer.is_some(),
        host_func: api.launch_host_func.is_some(),
    })
}
