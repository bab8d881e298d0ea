//! The test seam of publishing: every step that changes or syncs the file system calls
//! [`before`] first. In tests a hook installed on the thread ([`with_hook`]) sees each step (so
//! a test can look at the directory at every instant of a commit) and may fail it (an injected
//! `EIO` on the k-th rename, an `fsync` that fails). In other builds `before` does nothing and
//! holds no state.

use std::io;
use std::path::Path;

/// A step of a publish or a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// `fsync` of a file being published (the path is its final name).
    SyncFile,
    /// `fsync` of a directory.
    SyncDir,
    /// The second name of a file published while it keeps its temporary name (the final name).
    Link,
    /// A rename over a final name (the final name).
    Rename,
    /// The removal of a name.
    Remove,
}

/// Called before `step` on `path`; an error fails the step as the system call's would.
#[inline]
pub(crate) fn before(step: Step, path: &Path) -> io::Result<()> {
    #[cfg(test)]
    {
        hook::call(step, path)
    }
    #[cfg(not(test))]
    {
        let _ = (step, path);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) use hook::with_hook;

#[cfg(test)]
mod hook {
    use super::*;
    use std::cell::RefCell;

    type Hook = Box<dyn FnMut(Step, &Path) -> io::Result<()>>;

    thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    pub(crate) fn call(step: Step, path: &Path) -> io::Result<()> {
        // Taken out while it runs: a hook that looks at the directory never meets itself.
        let Some(mut hook) = HOOK.with(|h| h.borrow_mut().take()) else {
            return Ok(());
        };
        let r = hook(step, path);
        HOOK.with(|h| *h.borrow_mut() = Some(hook));
        r
    }

    /// Runs `f` with `hook` called before every step this thread takes.
    pub(crate) fn with_hook<R>(
        hook: impl FnMut(Step, &Path) -> io::Result<()> + 'static,
        f: impl FnOnce() -> R,
    ) -> R {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                HOOK.with(|h| *h.borrow_mut() = None);
            }
        }
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
        let _reset = Reset;
        f()
    }
}
