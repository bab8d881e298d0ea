//! A caller's stop flag for everything an open does on its thread (Ctrl-C in Python and the
//! CLI): the credential fetches (a `credential_process`, STS, IMDS, container credentials, a
//! Google token endpoint or metadata server) and the requests that carry no stop flag of their
//! own (the size request). Set, they end soon (within [`STOP_POLL`] of a wait on a
//! socket or a process; a connection being opened is waited for, up to its connect timeout)
//! with [`gpufile::Error::Cancelled`], and a `credential_process` still running is killed.
//!
//! How to use: run the open on a thread of its own under [`with_stop`], and set the flag from
//! the thread that watches for signals.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use gpufile::StopFlag;

/// How long a socket read or a backoff waits before it looks at the stop flag again: a
/// cancelled request or credential fetch ends within about this long (Python polls for Ctrl-C
/// every 50 ms too).
pub(crate) const STOP_POLL: Duration = Duration::from_millis(20);

thread_local! {
    /// The flag of the [`with_stop`] call this thread is in, if any.
    static CURRENT: RefCell<Option<StopFlag>> = const { RefCell::new(None) };
}

/// Runs `f` with `stop` as this thread's stop flag: the credential fetches and requests `f`
/// makes on this thread end soon after `stop` is set (see the module docs). Nested calls take
/// the innermost flag; the one before is back when `f` returns.
pub fn with_stop<R>(stop: &StopFlag, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<StopFlag>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = before);
        }
    }
    let before = CURRENT.with(|c| c.replace(Some(stop.clone())));
    let _restore = Restore(before);
    f()
}

/// This thread's stop flag, if it runs under [`with_stop`].
pub(crate) fn current() -> Option<StopFlag> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Whether this thread's stop flag is set.
pub(crate) fn stopped() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(StopFlag::is_set))
}

/// Sleeps `delay` unless this thread's stop flag is set first; false if it was.
pub(crate) fn sleep(delay: Duration) -> bool {
    let until = Instant::now() + delay;
    loop {
        if stopped() {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(STOP_POLL));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_is_this_threads_while_the_call_lasts() {
        let outer = StopFlag::default();
        let inner = StopFlag::default();
        assert!(current().is_none());
        with_stop(&outer, || {
            with_stop(&inner, || {
                inner.set();
                assert!(stopped());
                // Another thread runs under no flag.
                assert!(std::thread::spawn(|| current().is_none()).join().unwrap());
                let t = Instant::now();
                assert!(!sleep(Duration::from_secs(5)));
                assert!(t.elapsed() < Duration::from_secs(1));
            });
            assert!(!stopped(), "the outer flag is back");
            assert!(sleep(Duration::from_millis(1)));
        });
        assert!(current().is_none());
    }
}
