//! Value parsers the commands share: offsets and sizes as typed (`4MiB`, `1.5GiB`), negative
//! ones refused at parse time with a sentence that helps.
//!
//! Exit statuses (docs/cli.md): a bad value, whoever finds it (clap's parsers, these, a command
//! after parsing), exits 1 as `invalid-argument`; a command line of the wrong shape (an unknown
//! option, a missing argument or value, options that conflict) exits 2 as `usage`.

use std::ffi::OsStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use gpufile::__private::config;

use crate::error::CliError;

/// An offset or size as typed, checked at parse time: a negative number is a bad value (exit 1,
/// with `rule`; clap would otherwise take `-1` for an option and suggest `-- -1`, which does not
/// help), an option typed where the value belongs (`--size --json`) a missing value (exit 2).
#[derive(Clone, Copy)]
pub(crate) struct NonNegative(&'static str);

/// `--offset`'s parser.
pub(crate) const OFFSET: NonNegative =
    NonNegative("offsets are non-negative (bytes from the start of the file)");

/// The parser of sizes (`--size`, `--task-size`).
pub(crate) const SIZE: NonNegative = NonNegative("sizes are non-negative (bytes, e.g. 4MiB)");

impl TypedValueParser for NonNegative {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        let text = value
            .to_str()
            .ok_or_else(|| clap::Error::new(ErrorKind::InvalidUtf8).with_cmd(cmd))?;
        let option = arg.map_or_else(|| "the option".to_owned(), |a| format!("'{a}'"));
        let refuse = |kind, why: &str| {
            Err(clap::Error::raw(
                kind,
                format!("invalid value '{text}' for {option}: {why}\n"),
            )
            .with_cmd(cmd))
        };
        match text.trim_start().strip_prefix('-') {
            Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') => {
                refuse(ErrorKind::ValueValidation, self.0)
            }
            Some(_) => refuse(
                ErrorKind::InvalidValue,
                "expected a value, got an option (give the value after the option)",
            ),
            None => Ok(text.to_owned()),
        }
    }
}

/// `text` as a size in bytes (units accepted); an error names the option `--{what}`.
pub(crate) fn parse_size_arg(what: &str, text: &str) -> Result<u64, CliError> {
    config::parse_size(text).map_err(|e| CliError::invalid(format!("--{what} {text:?}: {e}")))
}
