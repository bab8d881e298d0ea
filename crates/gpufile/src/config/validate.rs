//! Parsing and bounds: a byte size as people type it ([`parse_size`]), and any input checked
//! against a setting's kind and range ([`validate`]) before it is stored.

use super::value::{COMPAT_MODE_WORDS, REMOTE_IO_BACKEND_WORDS, REMOTE_REACTOR_DISPATCH_WORDS};
use super::{Bounds, CompatMode, Input, Kind, Name, RemoteIoBackend, RemoteReactorDispatch, Value};

/// Parses a byte size as people type it: `4194304`, `4MiB`, `1.5GiB`, `16k`, `1GB`, `4 MiB`.
///
/// The rule (GNU coreutils' `dd`/`truncate`, and gdsio's and fio's single letters):
/// - a plain integer is bytes (so KvikIO's environment variables keep their meaning);
/// - `KiB MiB GiB TiB PiB` are binary (2^10, 2^20, ...);
/// - `kB KB MB GB TB PB` are decimal (10^3, 10^6, ...): `1GB` is 1,000,000,000 bytes;
/// - a single letter `k K m M g G t T p P` is binary: `16k` is 16,384 bytes, `1G` is 1 GiB;
/// - `B` alone means bytes; letters are case-insensitive; a space may separate number and unit;
/// - a fraction (`1.5GiB`, `0.5k`) must come to a whole number of bytes.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    const HINT: &str = "expected a size such as 4194304, 4MiB, 1.5GiB, 16k or 1GB";
    let t = text.trim();
    let number_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(HINT.into());
    }
    let unit: u128 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "p" | "pib" => 1 << 50,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit {other:?}: use B, KiB/MiB/GiB/TiB (binary), \
                 kB/MB/GB/TB (decimal) or k/M/G/T (binary)"
            ))
        }
    };
    const TOO_LARGE: &str = "size does not fit in 64 bits";
    // Exact: (whole.fraction × unit) in integers, so 1.5GiB is 1610612736 and 0.1GiB an error.
    let digits = format!("{whole}{fraction}");
    if digits.len() > 30 {
        return Err(TOO_LARGE.into());
    }
    let scaled: u128 = digits.parse::<u128>().map_err(|_| HINT.to_string())?;
    let denominator = 10u128.pow(fraction.len() as u32);
    let bytes = scaled.checked_mul(unit).ok_or(TOO_LARGE)?;
    if bytes % denominator != 0 {
        return Err(format!(
            "{t} is not a whole number of bytes ({} and a fraction)",
            bytes / denominator
        ));
    }
    u64::try_from(bytes / denominator).map_err(|_| TOO_LARGE.into())
}

/// An integer setting's value within `bounds`: text is a plain integer, or a size with a unit for
/// sizes ([`parse_size`]). Zero for a positive setting keeps KvikIO's words ("must be a positive
/// integer"); a value past the largest says it is too large (never "negative").
fn bounded_int(kind: Kind, input: &Input<'_>, bounds: Bounds) -> std::result::Result<u64, String> {
    let sizes = matches!(kind, Kind::PositiveSize | Kind::Size);
    let n: i128 = match input {
        Input::Int(n) => *n,
        Input::Text(t) if sizes => match parse_size(t) {
            Ok(n) => i128::from(n),
            Err(e) if e.contains("64 bits") => i128::MAX,
            Err(e) => return Err(e),
        },
        Input::Text(t) => {
            let t = t.trim();
            let digits = t.strip_prefix('-').unwrap_or(t);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("expected an integer from {bounds}"));
            }
            // Past 38 digits the value is past every bound: only its sign matters.
            t.parse::<i128>().unwrap_or(if t.starts_with('-') {
                i128::MIN
            } else {
                i128::MAX
            })
        }
        Input::Bool(_) => return Err("expected an integer, not a bool".into()),
        Input::IntList(_) => return Err("expected an integer, not a list".into()),
    };
    if n < 0 {
        return Err(format!("must not be negative: expected {bounds}"));
    }
    if n == 0 && bounds.min > 0 {
        return Err(format!("must be a positive integer: expected {bounds}"));
    }
    if n < i128::from(bounds.min) {
        return Err(format!("too small: expected {bounds}"));
    }
    if n > i128::from(bounds.max) {
        return Err(format!("too large: expected {bounds}"));
    }
    u64::try_from(n).map_err(|_| format!("too large: expected {bounds}"))
}

fn parse_bool(text: &str) -> std::result::Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err("expected true/false (also on/off, yes/no, 1/0)".into()),
    }
}

/// Checks an input against a setting's kind and range; the reason is the error text (for an
/// integer setting it names the accepted range, [`Name::bounds`]).
pub fn validate(name: Name, input: &Input<'_>) -> std::result::Result<Value, String> {
    match name.kind() {
        Kind::CompatMode => compat_mode_from(input).map(Value::CompatMode),
        Kind::RemoteIoBackend => remote_io_backend_from(input).map(Value::RemoteIoBackend),
        Kind::RemoteReactorDispatch => {
            remote_reactor_dispatch_from(input).map(Value::RemoteReactorDispatch)
        }
        Kind::Count | Kind::PositiveSize | Kind::Size | Kind::Seconds => {
            let bounds = name.bounds().ok_or("a setting without bounds")?;
            bounded_int(name.kind(), input, bounds).map(Value::Int)
        }
        Kind::Bool => bool_from(input).map(Value::Bool),
        Kind::IntList => status_codes_from(input).map(Value::IntList),
    }
}

/// A [`CompatMode`]: KvikIO's words, its enum values, or a bool (true is ON).
fn compat_mode_from(input: &Input<'_>) -> std::result::Result<CompatMode, String> {
    match input {
        Input::Text(t) => t.parse(),
        Input::Int(n) => CompatMode::from_value(*n)
            .ok_or_else(|| format!("expected OFF=0, ON=1 or AUTO=2, or {COMPAT_MODE_WORDS}")),
        Input::Bool(b) => Ok(if *b { CompatMode::On } else { CompatMode::Off }),
        Input::IntList(_) => Err("expected a CompatMode, not a list".into()),
    }
}

/// A [`RemoteIoBackend`]: KvikIO's names or enum values.
fn remote_io_backend_from(input: &Input<'_>) -> std::result::Result<RemoteIoBackend, String> {
    match input {
        Input::Text(t) => t.parse(),
        Input::Int(n) => RemoteIoBackend::from_value(*n)
            .ok_or_else(|| format!("expected {REMOTE_IO_BACKEND_WORDS}")),
        Input::Bool(_) | Input::IntList(_) => Err(format!(
            "expected a RemoteIOBackend: {REMOTE_IO_BACKEND_WORDS}"
        )),
    }
}

/// A [`RemoteReactorDispatch`]: KvikIO's names or enum values.
fn remote_reactor_dispatch_from(
    input: &Input<'_>,
) -> std::result::Result<RemoteReactorDispatch, String> {
    match input {
        Input::Text(t) => t.parse(),
        Input::Int(n) => RemoteReactorDispatch::from_value(*n)
            .ok_or_else(|| format!("expected {REMOTE_REACTOR_DISPATCH_WORDS}")),
        Input::Bool(_) | Input::IntList(_) => Err(format!(
            "expected a RemoteReactorDispatch: {REMOTE_REACTOR_DISPATCH_WORDS}"
        )),
    }
}

/// A flag: a bool, 0 or 1, or its words.
fn bool_from(input: &Input<'_>) -> std::result::Result<bool, String> {
    match input {
        Input::Bool(b) => Ok(*b),
        Input::Int(0) => Ok(false),
        Input::Int(1) => Ok(true),
        Input::Int(_) => Err("expected true/false or 1/0".into()),
        Input::Text(t) => parse_bool(t),
        Input::IntList(_) => Err("expected a bool, not a list".into()),
    }
}

/// HTTP status codes (100-599): a list, or comma-separated text.
fn status_codes_from(input: &Input<'_>) -> std::result::Result<Vec<u64>, String> {
    let items: Vec<i128> = match input {
        Input::IntList(v) => v.clone(),
        Input::Text(t) => t
            .split(',')
            .map(|s| s.trim().parse::<i128>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| "expected comma-separated integers such as 429,500,503")?,
        Input::Int(_) | Input::Bool(_) => return Err("expected a list of integers".into()),
    };
    items
        .into_iter()
        .map(|n| match u16::try_from(n) {
            Ok(c) if (100..=599).contains(&c) => Ok(u64::from(c)),
            _ => Err(format!("{n} is not an HTTP status code (100-599)")),
        })
        .collect()
}
