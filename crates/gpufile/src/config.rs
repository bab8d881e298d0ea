//! Settings: KvikIO's names, defaults and environment variables, plus where each value came from.
//!
//! How to use:
//! 1. [`Engine::settings`](crate::Engine::settings) gives a snapshot of the process-wide
//!    settings (read from the environment on first use; a variable that does not parse is an
//!    [`Error::InvalidEnv`](crate::Error::InvalidEnv) naming it).
//! 2. [`Settings::get`] / [`Engine::set`](crate::Engine::set) read and change single settings
//!    by name, as `kvikio.defaults` does.
//! 3. [`Engine::report`](crate::Engine::report) lists every setting with its value and origin,
//!    for `gpufile config`.
//!
//! Environment: `KVIKIO_<NAME>` is honoured so that KvikIO's documented commands work as written;
//! `GPUFILE_<NAME>` of the same suffix wins over it.
//!
//! The parts: `value` holds the kinds of values ([`CompatMode`], [`RemoteIoBackend`], [`Value`],
//! [`Input`]); `table` declares every setting once ([`Settings`], [`Name`], [`Kind`],
//! [`Bounds`]); `validate` parses and bounds what callers give ([`parse_size`], [`validate`]);
//! `state` reads the environment and remembers where each value came from ([`State`],
//! [`Origin`]); `log` reads KvikIO's logger variables for gpufile's notices ([`LogSettings`]).

mod log;
#[cfg(test)]
mod remote_tests;
mod state;
mod table;
#[cfg(test)]
mod tests;
mod unknown_env;
mod validate;
mod value;

pub(crate) use log::log_notice;
pub use log::{LogSettings, LOG_ENV_VARS};
pub use state::{
    cufile_path, log_notices_to_stderr, note_remote_read, remote_io_started, Origin, State,
};
pub use table::{Bounds, Kind, Name, Settings, ENV_PREFIXES, MAX_THREADS};
pub use unknown_env::take_unknown_env_warnings;
pub use validate::{parse_size, validate};
pub use value::{CompatMode, Input, RemoteIoBackend, RemoteReactorDispatch, Value};
