//! Many ranges of one file and one buffer as one request (`CuFile.read_ranges`,
//! `write_ranges`, `read_rows`): the offset and size arrays are read through the buffer
//! protocol where they export one (NumPy arrays, `array.array`), with no Python object per
//! range; other sequences item by item. Every entry is checked (integers, not negative, the
//! arrays of one length) before the request is built; the engine then checks the ranges
//! against the buffer and the file, so a bad range is an error before any byte moves.

use gpufile::Dma;
use gpufile::PathReport;
use gpufile::{Direction, Ranges, Request};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::{BufferView, HostBuffer};
use crate::errors::{out_of_range, to_py, type_name, uint_arg};

/// Unsigned integers read from an argument: the caller's own array where it holds this
/// machine's 8-byte integers (NumPy's default `int64`, `uint64`), read in place, with no copy
/// (100,000 row indices are 800 KB); else a vector of them.
pub(crate) enum Uints {
    /// The export of an array of native, aligned 8-byte integers, none negative (checked).
    InPlace(HostBuffer),
    /// The integers, widened or read item by item.
    Owned(Vec<u64>),
}

impl std::ops::Deref for Uints {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        match self {
            Uints::Owned(v) => v,
            // SAFETY: `InPlace` is made only for a C-contiguous export of 8-byte integers whose
            // address is aligned for them; the export, held here, pins the memory and its size.
            // The GIL is held while the integers are read (the argument parsing and the
            // request's building happen under it).
            Uints::InPlace(view) => unsafe {
                std::slice::from_raw_parts(view.buf_ptr().cast::<u64>(), view.len_bytes() / 8)
            },
        }
    }
}

/// `obj` as unsigned integers: a C-contiguous buffer of integers (any width and signedness; a
/// negative entry is an error naming its index), else any iterable of ints. `name` names the
/// argument in errors.
pub(crate) fn uint_array(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Uints> {
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be integers (an array or a sequence), not str"
        )));
    }
    if let Some(values) = from_buffer(name, obj)? {
        return Ok(values);
    }
    let items = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be integers (an array or a sequence), not {}",
            type_name(obj)
        ))
    })?;
    let mut out = Vec::with_capacity(obj.len().unwrap_or(0));
    for (i, item) in items.enumerate() {
        let item = item?;
        let v = uint_arg(&format!("{name}[{i}]"), Some(&item), None)?;
        // `None` is refused here: an entry must be a number.
        let v = v.ok_or_else(|| {
            PyTypeError::new_err(format!("{name}[{i}] must be an int, not NoneType"))
        })?;
        out.push(v);
    }
    Ok(Uints::Owned(out))
}

/// The integers of a buffer export, or `None` where `obj` exports none (or exports Python
/// objects, read item by item instead, or is not C-contiguous).
fn from_buffer(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Option<Uints>> {
    // bytes and bytearray export bytes: taking them for offsets would be a surprise.
    if obj.is_instance_of::<pyo3::types::PyBytes>()
        || obj.is_instance_of::<pyo3::types::PyByteArray>()
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be integers (an array or a sequence), not {}",
            type_name(obj)
        )));
    }
    let Ok(view) = HostBuffer::get(obj) else {
        return Ok(None);
    };
    let format = view.format().to_bytes().to_vec();
    let (order, code) = match format.as_slice() {
        [o @ (b'@' | b'=' | b'<' | b'>' | b'!'), c] => (*o, *c),
        [c] => (b'@', *c),
        _ => (b'@', b'?'),
    };
    let shape = view.shape();
    if shape.len() > 1 {
        // Flattened, a table of offsets would be taken as one list of ranges.
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        return Err(PyValueError::new_err(format!(
            "{name} must be one-dimensional, got an array of shape ({})",
            dims.join(", ")
        )));
    }
    if code == b'O' || !view.is_c_contiguous() {
        return Ok(None);
    }
    let signed = match code {
        b'b' | b'h' | b'i' | b'l' | b'q' | b'n' => true,
        b'B' | b'H' | b'I' | b'L' | b'Q' | b'N' => false,
        _ => {
            let f = String::from_utf8_lossy(&format);
            return Err(PyTypeError::new_err(format!(
                "{name} must hold integers, got items of format '{f}' (cast with .astype(int))"
            )));
        }
    };
    let size = view.itemsize();
    if !matches!(size, 1 | 2 | 4 | 8) {
        return Err(PyTypeError::new_err(format!(
            "{name} must hold integers of 1, 2, 4 or 8 bytes, got {size}"
        )));
    }
    let big = matches!(order, b'>' | b'!') != cfg!(target_endian = "big");
    let n = view.len_bytes() / size;
    // SAFETY: the export is C-contiguous, `len_bytes` long, and held (so unchanged in size)
    // while it is read here, with the GIL held.
    let bytes = unsafe { std::slice::from_raw_parts(view.buf_ptr(), n * size) };
    let aligned = view.buf_ptr().cast::<u64>().is_aligned();
    if size == 8 && !big && aligned {
        if signed {
            let negative = |b: &[u8]| i64::from_ne_bytes(b.try_into().unwrap_or([0; 8])) < 0;
            if let Some(i) = bytes.chunks_exact(8).position(negative) {
                let v = i64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
                return Err(out_of_range(format!(
                    "{name}[{i}] must not be negative, got {v}"
                )));
            }
        }
        return Ok(Some(Uints::InPlace(view)));
    }
    let widened = match size {
        1 => widen::<1>(bytes, signed, big),
        2 => widen::<2>(bytes, signed, big),
        4 => widen::<4>(bytes, signed, big),
        _ => widen::<8>(bytes, signed, big),
    };
    widened
        .map(|v| Some(Uints::Owned(v)))
        .map_err(|(i, v)| out_of_range(format!("{name}[{i}] must not be negative, got {v}")))
}

/// The `N`-byte integers of `bytes` as `u64` (`signed`: two's complement; `big`: big-endian),
/// or the index and value of the first negative one. One loop per width, so that the width is
/// a constant of the loop rather than a test per item.
fn widen<const N: usize>(bytes: &[u8], signed: bool, big: bool) -> Result<Vec<u64>, (usize, i64)> {
    let value = |item: &[u8]| {
        let mut raw = [0u8; 8];
        let item: [u8; N] = item.try_into().unwrap_or([0; N]); // chunks of N bytes
        raw[..N].copy_from_slice(&item);
        if big {
            raw[..N].reverse();
        }
        let unsigned = u64::from_le_bytes(raw);
        let shift = 64 - 8 * N as u32;
        match signed {
            true => ((unsigned << shift) as i64) >> shift,
            false => unsigned as i64,
        }
    };
    let out: Vec<u64> = bytes
        .chunks_exact(N)
        .map(|item| value(item) as u64)
        .collect();
    // Negatives are looked for apart from the copy, so that the copy has no exit.
    if signed && out.iter().any(|&v| (v as i64) < 0) {
        let i = out.iter().position(|&v| (v as i64) < 0).unwrap_or(0);
        return Err((i, out[i] as i64));
    }
    Ok(out)
}

/// `sizes`: an array like the offsets, or one int for every range.
fn sizes_arg(obj: &Bound<'_, PyAny>, n: usize) -> PyResult<Uints> {
    if crate::errors::index_of(obj).is_some() {
        let v = uint_arg("sizes", Some(obj), None)?.unwrap_or(0);
        return Ok(Uints::Owned(vec![v; n]));
    }
    uint_array("sizes", obj)
}

/// The ranges of `read_ranges`/`write_ranges` ([`Ranges::from_arrays`]).
pub(crate) fn ranges_arg(
    file_offsets: &Bound<'_, PyAny>,
    sizes: &Bound<'_, PyAny>,
    buf_offsets: Option<&Bound<'_, PyAny>>,
) -> PyResult<Ranges> {
    let offsets = uint_array("file_offsets", file_offsets)?;
    let sizes = sizes_arg(sizes, offsets.len())?;
    let bufs = match buf_offsets.filter(|b| !b.is_none()) {
        Some(b) => Some(uint_array("buf_offsets", b)?),
        None => None,
    };
    Ranges::from_arrays(&offsets, &sizes, bufs.as_deref()).map_err(to_py)
}

/// The ranges of `read_rows` ([`Ranges::rows`]).
pub(crate) fn rows_arg(
    rows: &Bound<'_, PyAny>,
    row_bytes: &Bound<'_, PyAny>,
    row_stride: Option<&Bound<'_, PyAny>>,
    base_offset: Option<&Bound<'_, PyAny>>,
) -> PyResult<Ranges> {
    let rows = uint_array("rows", rows)?;
    let row_bytes = uint_arg("row_bytes", Some(row_bytes), None)?.unwrap_or(0);
    let stride = uint_arg("row_stride", row_stride, Some(row_bytes))?.unwrap_or(row_bytes);
    let base = uint_arg("base_offset", base_offset, Some(0))?.unwrap_or(0);
    let row_bytes = usize::try_from(row_bytes)
        .map_err(|_| out_of_range(format!("row_bytes {row_bytes} is too large")))?;
    Ranges::rows(&rows, row_bytes, stride, base).map_err(to_py)
}

/// The request of `ranges` on `view` (the view must outlive it), carrying what the view knows
/// of a device buffer.
pub(crate) fn request(view: &BufferView, dir: Direction, ranges: Ranges) -> Request {
    let buffer = view.buffer(0, view.len());
    let req = match dir {
        Direction::Read => Request::read_ranges(buffer, ranges),
        Direction::Write => Request::write_ranges(buffer, ranges),
    };
    view.carry(req)
}

/// A request's [`PathReport`] as a dict: `backend`, `reason`, `ranges`, `tasks`, `gathered`,
/// `host_io` and `host_io_reason` (`None` unless gathered), `copies`, `gpu_gather` and
/// `gpu_gather_reason` (`None` unless a gathered device read).
pub(crate) fn report_dict<'py>(py: Python<'py>, r: &PathReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("backend", r.path.backend.to_string())?;
    d.set_item("reason", r.path.reason.to_string())?;
    d.set_item("ranges", r.ranges)?;
    d.set_item("tasks", r.tasks)?;
    d.set_item("gathered", r.gathered)?;
    d.set_item("host_io", r.host_io.as_ref().map(|h| h.backend.to_string()))?;
    d.set_item(
        "host_io_reason",
        r.host_io.as_ref().map(|h| h.reason.to_string()),
    )?;
    d.set_item("copies", r.copies)?;
    d.set_item(
        "gpu_gather",
        r.gather_dma.as_ref().map(|d| matches!(d, Dma::On(_))),
    )?;
    d.set_item(
        "gpu_gather_reason",
        r.gather_dma.as_ref().map(ToString::to_string),
    )?;
    Ok(d)
}
