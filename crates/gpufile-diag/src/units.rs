//! How sizes and rates are printed for people, one rule everywhere (CLI and Python reports).
//!
//! - Sizes print in binary units (`4 MiB`, `1.50 GiB`): the sizes of I/O (task sizes, buffers,
//!   files made by tools) are powers of two, and print exactly that way.
//! - Rates carry their unit: decimal `GB/s` (10^9 bytes per second, as KvikIO's and fio's
//!   reports and the performance tables use) unless [`Units::Binary`] (`GiB/s`, as gdsio prints)
//!   or [`Units::Both`] is asked for.
//! - JSON carries plain numbers: sizes in bytes, rates in `..._gb_per_s` (decimal).
//!
//! Input sizes are parsed by `gpufile::__private::config::parse_size` (decimal `GB`, binary `GiB`, `G`).

use std::fmt;

/// Which units rates print in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Units {
    /// GB/s (10^9 bytes per second), the default.
    #[default]
    Decimal,
    /// GiB/s (2^30 bytes per second).
    Binary,
    /// Both: `12.35 GB/s (11.50 GiB/s)`.
    Both,
}

impl std::str::FromStr for Units {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "decimal" | "si" | "gb" => Ok(Units::Decimal),
            "binary" | "iec" | "gib" => Ok(Units::Binary),
            "both" => Ok(Units::Both),
            _ => Err(format!("units {s:?}: expected decimal, binary or both")),
        }
    }
}

impl fmt::Display for Units {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Units::Decimal => "decimal",
            Units::Binary => "binary",
            Units::Both => "both",
        })
    }
}

/// A byte count for people: `512 B`, `4 MiB`, `1.50 GiB` (binary units; whole values exact).
pub fn size(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = 0;
    let mut v = n as f64;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if n % (1u64 << (10 * unit)) == 0 {
        format!("{} {}", n >> (10 * unit), UNITS[unit])
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

/// A count with its noun: `1 run`, `2 runs` (`many` is the plural: `retries`).
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `v` with two decimals, or as many more as three significant digits need (`12.35`, `0.500`,
/// `0.00152`): a slow rate (`--task-size 1`) never prints as `0.00`.
fn digits3(v: f64) -> String {
    let decimals = match v {
        v if !v.is_finite() || v <= 0.0 || v >= 1.0 => 2,
        v => (2 - v.log10().floor() as i64).clamp(2, 15) as usize,
    };
    format!("{v:.decimals$}")
}

/// A rate for people, with its unit: `12.35 GB/s`, `11.50 GiB/s`, or both; three significant
/// digits at least.
pub fn rate(bytes: u64, seconds: f64, units: Units) -> String {
    let per_s = if seconds > 0.0 {
        bytes as f64 / seconds
    } else {
        0.0
    };
    let decimal = format!("{} GB/s", digits3(per_s / 1e9));
    let binary = format!("{} GiB/s", digits3(per_s / (1u64 << 30) as f64));
    match units {
        Units::Decimal => decimal,
        Units::Binary => binary,
        Units::Both => format!("{decimal} ({binary})"),
    }
}

/// Decimal GB/s, the unit of every `..._gb_per_s` JSON field.
pub fn gb_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e9
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_exactly_where_they_can() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(4 << 20), "4 MiB");
        assert_eq!(size(3 << 29), "1.50 GiB");
        assert_eq!(size(1_000_000_000), "953.67 MiB");
        assert_eq!(size(u64::MAX), "16384.00 PiB");
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1u64, "run", "runs"), "1 run");
        assert_eq!(count(0u64, "run", "runs"), "0 runs");
        assert_eq!(count(2u32, "retry", "retries"), "2 retries");
    }

    #[test]
    fn rates_say_their_unit() {
        assert_eq!(rate(10_000_000_000, 1.0, Units::Decimal), "10.00 GB/s");
        assert_eq!(rate(10 << 30, 1.0, Units::Binary), "10.00 GiB/s");
        assert_eq!(rate(1 << 30, 1.0, Units::Both), "1.07 GB/s (1.00 GiB/s)");
        assert_eq!(rate(1, 0.0, Units::Decimal), "0.00 GB/s");
        // Slow rates keep three significant digits.
        assert_eq!(rate(500_000_000, 1.0, Units::Decimal), "0.500 GB/s");
        assert_eq!(rate(1_520_000, 1.0, Units::Decimal), "0.00152 GB/s");
        assert_eq!(rate(16384, 0.1, Units::Binary), "0.000153 GiB/s");
        assert_eq!(rate(123_456_000_000, 1.0, Units::Decimal), "123.46 GB/s");
        assert_eq!("IEC".parse::<Units>(), Ok(Units::Binary));
        assert!("metric".parse::<Units>().is_err());
    }
}
