//! KvikIO's logger variables, honoured for gpufile's notices ([`crate::observe::notice`]):
//! `KVIKIO_LOG_LEVEL` (TRACE, DEBUG, INFO, WARN, ERROR, CRITICAL or OFF, any case) and
//! `KVIKIO_LOG_FILE` (`GPUFILE_` of the same suffix wins, as for settings).
//!
//! Notices are INFO: at TRACE, DEBUG or INFO each is written as a line to the file (truncated
//! when the process first writes to it, as KvikIO overwrites its log at start) or, without a
//! file, to stderr; at WARN and above, OFF, or unset, nothing is written (KvikIO's logger is off
//! where the level is unset). A level or file that does not parse is an
//! [`Error::InvalidEnv`] naming the variable, as every other variable's is (KvikIO turns
//! logging off without a word); a file that cannot be opened sends the notices to stderr with
//! one warning, as KvikIO does.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

use crate::error::Error;

/// The variables read here, most preferred first for each of the two.
pub const LOG_ENV_VARS: [&str; 4] = [
    "GPUFILE_LOG_LEVEL",
    "KVIKIO_LOG_LEVEL",
    "GPUFILE_LOG_FILE",
    "KVIKIO_LOG_FILE",
];

/// KvikIO's log levels, least severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Debugging detail.
    Debug,
    /// Decisions worth knowing: gpufile's notices.
    Info,
    /// Warnings.
    Warn,
    /// Errors.
    Error,
    /// Critical errors.
    Critical,
    /// Nothing.
    Off,
}

const LOG_LEVEL_WORDS: &str =
    "expected TRACE, DEBUG, INFO, WARN, ERROR, CRITICAL or OFF (any case)";

impl FromStr for LogLevel {
    type Err = String;

    /// KvikIO's names, in any case, surrounding spaces ignored.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Ok(match s.trim().to_ascii_uppercase().as_str() {
            "TRACE" => LogLevel::Trace,
            "DEBUG" => LogLevel::Debug,
            "INFO" => LogLevel::Info,
            "WARN" => LogLevel::Warn,
            "ERROR" => LogLevel::Error,
            "CRITICAL" => LogLevel::Critical,
            "OFF" => LogLevel::Off,
            _ => return Err(LOG_LEVEL_WORDS.into()),
        })
    }
}

/// The logger variables as read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogSettings {
    /// The level, where a variable sets it.
    pub level: Option<LogLevel>,
    /// The file notices go to, where a variable names one (else stderr).
    pub file: Option<PathBuf>,
    /// The variable that named the file, for the warning where it cannot be opened.
    pub file_var: Option<String>,
}

impl LogSettings {
    /// The variables as seen through `lookup`, each bad one an [`Error::InvalidEnv`] (its part
    /// then left unset).
    pub fn from_env_each(lookup: impl Fn(&str) -> Option<OsString>) -> (LogSettings, Vec<Error>) {
        let first = |vars: &[&str]| {
            vars.iter()
                .find_map(|v| lookup(v).map(|value| ((*v).to_owned(), value)))
        };
        let mut out = LogSettings::default();
        let mut errors = Vec::new();
        if let Some((var, raw)) = first(&LOG_ENV_VARS[..2]) {
            let text = raw.to_string_lossy().into_owned();
            let level = match raw.to_str() {
                Some(t) => t.parse::<LogLevel>(),
                None => Err(format!("not valid UTF-8; {LOG_LEVEL_WORDS}")),
            };
            match level {
                Ok(level) => out.level = Some(level),
                Err(reason) => errors.push(Error::InvalidEnv {
                    var,
                    value: text,
                    reason,
                }),
            }
        }
        if let Some((var, raw)) = first(&LOG_ENV_VARS[2..]) {
            if raw.is_empty() {
                errors.push(Error::InvalidEnv {
                    var,
                    value: String::new(),
                    reason: "empty: name a file, or unset it for stderr".into(),
                });
            } else {
                out.file = Some(PathBuf::from(raw));
                out.file_var = Some(var);
            }
        }
        (out, errors)
    }

    /// Whether notices (INFO) are written.
    pub fn writes_notices(&self) -> bool {
        self.level.is_some_and(|l| l <= LogLevel::Info)
    }
}

/// This process's logger variables (read once; a bad one counts as unset here: the engine
/// refuses to start over it, [`State::from_env_each`](super::State::from_env_each)).
pub fn log_settings() -> &'static LogSettings {
    static SETTINGS: OnceLock<LogSettings> = OnceLock::new();
    SETTINGS.get_or_init(|| LogSettings::from_env_each(|v| std::env::var_os(v)).0)
}

/// Where notices are written: the file, opened at the first notice, or stderr.
enum Sink {
    File(File),
    Stderr,
}

/// Writes a notice where the logger variables say (nothing where they do not ask for INFO);
/// whether it went to stderr.
pub(crate) fn log_notice(text: &str) -> bool {
    let settings = log_settings();
    if !settings.writes_notices() {
        return false;
    }
    static SINK: Mutex<Option<Sink>> = Mutex::new(None);
    let mut sink = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let sink = sink.get_or_insert_with(|| open(settings));
    let line = format!("[gpufile] [INFO] {text}\n");
    match sink {
        // A log that cannot be written is not the I/O's failure.
        Sink::File(f) => {
            let _ = f.write_all(line.as_bytes());
            false
        }
        Sink::Stderr => {
            let _ = std::io::stderr().write_all(line.as_bytes());
            true
        }
    }
}

fn open(settings: &LogSettings) -> Sink {
    let Some(path) = &settings.file else {
        return Sink::Stderr;
    };
    match File::create(path) {
        Ok(f) => Sink::File(f),
        Err(e) => {
            let var = settings.file_var.as_deref().unwrap_or("KVIKIO_LOG_FILE");
            eprintln!(
                "[gpufile] [WARN] cannot open {var}={} ({e}); notices go to stderr",
                path.display()
            );
            Sink::Stderr
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> (LogSettings, Vec<Error>) {
        LogSettings::from_env_each(|v| {
            vars.iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| OsString::from(x))
        })
    }

    #[test]
    fn levels_in_any_case_and_gpufile_wins() {
        let (s, e) = read(&[("KVIKIO_LOG_LEVEL", " warn ")]);
        assert!(e.is_empty());
        assert_eq!(s.level, Some(LogLevel::Warn));
        assert!(!s.writes_notices());
        let (s, _) = read(&[("KVIKIO_LOG_LEVEL", "OFF"), ("GPUFILE_LOG_LEVEL", "Debug")]);
        assert_eq!(s.level, Some(LogLevel::Debug));
        assert!(s.writes_notices());
        assert!(!read(&[]).0.writes_notices());
    }

    #[test]
    fn a_bad_level_or_an_empty_file_names_its_variable() {
        let (s, e) = read(&[("KVIKIO_LOG_LEVEL", "WARNING"), ("KVIKIO_LOG_FILE", "")]);
        assert_eq!(s, LogSettings::default());
        let text: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].contains("KVIKIO_LOG_LEVEL") && text[0].contains("CRITICAL"));
        assert!(text[1].contains("KVIKIO_LOG_FILE") && text[1].contains("empty"));
    }
}
