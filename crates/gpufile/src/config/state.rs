//! Settings with the origin of each value ([`State`], [`Origin`]): the defaults overlaid with the
//! environment (`GPUFILE_*`, then `KVIKIO_*`), then what the program sets; and the few variables
//! read once per process outside the table.

use std::ffi::OsString;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::{validate, Input, Name, RemoteIoBackend, Settings, Value};
use crate::error::{Error, Result};

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "lowercase")]
pub enum Origin {
    /// KvikIO's default.
    Default,
    /// Chosen from this machine; the text says how.
    Machine(String),
    /// An environment variable (its name).
    Env(String),
    /// Set by the program (`defaults.set`, a CLI flag).
    Set,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::Machine(how) => write!(f, "default: {how}"),
            Origin::Env(var) => write!(f, "env {var}"),
            Origin::Set => f.write_str("set"),
        }
    }
}

/// Settings with the origin of each value.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// The values.
    pub settings: Settings,
    origins: Vec<Origin>,
}

impl State {
    /// Defaults overlaid with the environment as seen through `lookup` (a pure function of it, so
    /// tests need not touch the process environment).
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<State> {
        State::from_env_os(|var| lookup(var).map(OsString::from))
    }

    /// As [`State::from_env`], with values as the OS holds them: a value that is not UTF-8 is an
    /// [`Error::InvalidEnv`] naming its variable, never skipped (a lower-priority variable, or
    /// the default, would then win without a word).
    pub fn from_env_os(lookup: impl Fn(&str) -> Option<OsString>) -> Result<State> {
        let (state, mut errors) = State::from_env_each(lookup);
        match errors.is_empty() {
            true => Ok(state),
            false => Err(errors.swap_remove(0)),
        }
    }

    /// As [`State::from_env_os`], every variable read: a setting whose variable is bad keeps its
    /// default, and each bad variable is one [`Error::InvalidEnv`], in the order of the settings
    /// (`gpufile config` shows them all in their rows rather than stopping at the first).
    pub fn from_env_each(lookup: impl Fn(&str) -> Option<OsString>) -> (State, Vec<Error>) {
        let mut settings = Settings::default();
        let mut origins: Vec<Origin> = Name::ALL.iter().map(|n| n.default_origin()).collect();
        let mut errors = Vec::new();
        for name in Name::ALL {
            let Some((var, raw)) = name
                .env_vars()
                .into_iter()
                .find_map(|v| lookup(&v).map(|t| (v, t)))
            else {
                continue;
            };
            let value = match raw.into_string() {
                Ok(text) => {
                    validate(name, &Input::Text(&text)).map_err(|reason| Error::InvalidEnv {
                        var: var.clone(),
                        value: text.clone(),
                        reason,
                    })
                }
                Err(raw) => Err(Error::InvalidEnv {
                    var: var.clone(),
                    value: raw.to_string_lossy().into_owned(),
                    reason: format!(
                        "not valid UTF-8 (bytes b\"{}\")",
                        raw.as_encoded_bytes().escape_ascii()
                    ),
                }),
            };
            match value {
                Ok(value) => {
                    settings.put(name, value);
                    origins[name.index()] = Origin::Env(var);
                }
                Err(e) => errors.push(e),
            }
        }
        // The logger variables are not settings, but a bad one is refused as theirs are.
        errors.extend(super::LogSettings::from_env_each(&lookup).1);
        (State { settings, origins }, errors)
    }

    /// Where `name`'s value came from.
    pub fn origin(&self, name: Name) -> &Origin {
        &self.origins[name.index()]
    }

    /// Validates every update first, then applies all of them (all or nothing).
    pub fn set(&mut self, updates: &[(Name, Input<'_>)]) -> Result<()> {
        let mut checked = Vec::with_capacity(updates.len());
        for (name, input) in updates {
            let value = validate(*name, input).map_err(|reason| Error::InvalidSetting {
                name: name.as_str(),
                value: input.to_string(),
                reason,
            })?;
            checked.push((*name, value));
        }
        for (name, value) in checked {
            self.settings.put(name, value);
            self.origins[name.index()] = Origin::Set;
        }
        Ok(())
    }

    /// Puts back values (and origins) captured earlier with [`State::snapshot`].
    pub fn restore(&mut self, saved: &[(Name, Value, Origin)]) {
        for (name, value, origin) in saved {
            self.settings.put(*name, value.clone());
            self.origins[name.index()] = origin.clone();
        }
    }

    /// The value and origin of each named setting, for a later [`State::restore`].
    pub fn snapshot(&self, names: &[Name]) -> Vec<(Name, Value, Origin)> {
        names
            .iter()
            .map(|n| (*n, self.settings.get(*n), self.origin(*n).clone()))
            .collect()
    }
}

impl State {
    /// Defaults overlaid with this process's environment.
    pub fn from_process_env() -> Result<State> {
        State::from_env_os(|v| std::env::var_os(v))
    }
}

/// Whether notices are also printed to stderr: `RUST_LOG` names gpufile, or info/debug level
/// (read once per process).
pub fn log_notices_to_stderr() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("RUST_LOG")
            .is_ok_and(|v| v.contains("gpufile") || v.contains("info") || v.contains("debug"))
    })
}

/// `GPUFILE_CUFILE_PATH`: a file or folder to load libcufile from first (read once).
pub fn cufile_path() -> Option<std::path::PathBuf> {
    std::env::var_os("GPUFILE_CUFILE_PATH").map(Into::into)
}

/// Whether a remote read has run under `remote_io_backend` MULTI_POLL in this process: where
/// KvikIO starts its reactor pool, after which [`Name::FIXED_ONCE_REMOTE_IO_STARTS`] cannot be
/// changed.
static REMOTE_IO_STARTED: AtomicBool = AtomicBool::new(false);

/// Whether KvikIO's reactor pool would have started by now (see `note_remote_read`).
pub fn remote_io_started() -> bool {
    REMOTE_IO_STARTED.load(Ordering::Relaxed)
}

/// Called by remote sources as a read runs, with the process's `remote_io_backend` then: the
/// first under MULTI_POLL fixes [`Name::FIXED_ONCE_REMOTE_IO_STARTS`] for the rest of the
/// process, as KvikIO's reactor pool starting does (under EASY_THREADPOOL KvikIO starts no pool,
/// and they stay settable).
pub fn note_remote_read(backend: RemoteIoBackend) {
    if backend == RemoteIoBackend::MultiPoll {
        REMOTE_IO_STARTED.store(true, Ordering::Relaxed);
    }
}
