//! Value parsers the commands share: offsets and sizes as typed (`4MiB`, `1.5GiB`), negative
//! ones refused at parse time with a sentence that helps.

use gpufile::config;

use crate::error::CliError;

/// An offset as typed, refused at parse time where it is negative: clap would otherwise take
/// `-1` for an option and suggest `-- -1`, which does not help.
pub(crate) fn non_negative_offset(text: &str) -> Result<String, String> {
    non_negative(
        text,
        "offsets are non-negative (bytes from the start of the file)",
    )
}

/// A size as typed, refused at parse time where it is negative (as [`non_negative_offset`]).
pub(crate) fn non_negative_size(text: &str) -> Result<String, String> {
    non_negative(text, "sizes are non-negative (bytes, e.g. 4MiB)")
}

/// `text`, unless it starts with `-`: a negative number gets `rule`, anything else (the option
/// typed where the value belongs, `--size --json`) is named as what it is.
fn non_negative(text: &str, rule: &str) -> Result<String, String> {
    match text.trim_start().strip_prefix('-') {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') => {
            Err(rule.into())
        }
        Some(_) => Err("expected a value, got an option (give the value after the option)".into()),
        None => Ok(text.to_owned()),
    }
}

/// `text` as a size in bytes (units accepted); an error names the option `--{what}`.
pub(crate) fn parse_size_arg(what: &str, text: &str) -> Result<u64, CliError> {
    config::parse_size(text).map_err(|e| CliError::invalid(format!("--{what} {text:?}: {e}")))
}
