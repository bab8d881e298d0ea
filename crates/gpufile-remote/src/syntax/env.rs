//! The environment as a function: every reader of variables takes one, so that tests pass
//! literal environments and the library passes the process's.

/// A lookup of environment variables by name.
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process's environment, read when asked.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
