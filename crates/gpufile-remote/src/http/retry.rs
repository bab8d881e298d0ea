//! The retry policy: what is retried, after how long, how many times ([`Policy`], read from the
//! settings when each request starts, as KvikIO reads its defaults per request), and the line
//! each retry writes.
//!
//! A retryable status or a timeout is retried after 500 ms, 1 s, 2 s, 4 s (at most 4 s); the
//! last failure is a [`RemoteError`](crate::RemoteError) that names the URL, the range and the
//! attempts made. Each retry writes one line to stderr, KvikIO's record after the library's
//! name, then the request:
//! `gpufile: Got HTTP code 503. Retrying after 500ms (attempt 1 of 2). Request: HEAD <url>`
//! (KvikIO prints `KvikIO: Got HTTP code 503. Retrying ...` to stdout; stdout is the program's
//! data, so gpufile keeps it clean).

use std::io;
use std::time::Duration;

use gpufile::{Error, Result};

use super::request::Target;
use crate::error::RemoteFailure;

/// The retry policy of one request.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    /// Attempts in all, the first one included (`http_max_attempts`, at least one): KvikIO's
    /// setting, so that its users' limits hold here too.
    pub max_attempts: usize,
    /// The statuses retried (`http_status_codes`): those by which a server says "later" rather
    /// than "no". Timeouts are retried too; every other failure is final at once.
    pub retry_codes: Vec<u16>,
    /// How long one attempt may take in all (`http_timeout`): past it the attempt is a
    /// timeout, retried, so that a stalled connection does not hold a worker for ever.
    pub timeout: Duration,
    /// The first backoff, doubled after each retry (KvikIO's 500 ms): a busy server is given
    /// time, a passing failure costs little.
    pub backoff_base: Duration,
    /// The longest backoff (KvikIO's 4 s), so that a long run of retries keeps asking.
    pub backoff_max: Duration,
}

impl Policy {
    /// From the current settings.
    pub fn current() -> Result<Self> {
        let s = gpufile::Engine::global()?.settings();
        Ok(Policy {
            max_attempts: s.http_max_attempts.max(1),
            retry_codes: s.http_status_codes.clone(),
            timeout: Duration::from_secs(s.http_timeout),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_millis(4000),
        })
    }

    /// The wait after failed attempt `n` (1-based): the base doubled per retry, at most the
    /// cap.
    pub(super) fn backoff(&self, n: usize) -> Duration {
        let doublings = (n.max(1) - 1).min(4) as u32;
        (self.backoff_base * (1 << doublings)).min(self.backoff_max)
    }
}

/// What one attempt came to when it did not succeed.
pub(super) enum Attempt {
    /// Worth another try: a retryable status or a timeout.
    Retry(RetryCause),
    /// Final.
    Fail(Error),
}

/// Why an attempt is worth repeating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RetryCause {
    /// A status in `http_status_codes`.
    Status(u16),
    /// No answer within `http_timeout` seconds.
    Timeout(u64),
}

impl RetryCause {
    /// The retry record's opening words, as KvikIO writes them.
    fn record(self) -> String {
        match self {
            RetryCause::Status(code) => format!("Got HTTP code {code}"),
            RetryCause::Timeout(_) => "Timeout error".to_owned(),
        }
    }

    /// The reason in the final error.
    pub(super) fn reason(self) -> String {
        match self {
            RetryCause::Status(code) => format!("Got HTTP code {code}"),
            RetryCause::Timeout(secs) => {
                format!("Operation timed out after {secs} s (http_timeout)")
            }
        }
    }
}

/// One retry's line: KvikIO's record after the library's name, then the request.
pub(super) fn retry_record(
    cause: RetryCause,
    delay_ms: u64,
    attempt: usize,
    max: usize,
    request: &str,
) -> String {
    format!(
        "gpufile: {}. Retrying after {delay_ms}ms (attempt {attempt} of {max}). Request: {request}",
        cause.record()
    )
}

/// A `ureq` error as an attempt's outcome: timeouts are retried (as in KvikIO), the rest final.
pub(super) fn classify(t: &Target<'_>, method: &str, e: ureq::Error, policy: &Policy) -> Attempt {
    match e {
        ureq::Error::Timeout(_) => Attempt::Retry(RetryCause::Timeout(policy.timeout.as_secs())),
        ureq::Error::Io(ref io) if io.kind() == io::ErrorKind::TimedOut => {
            Attempt::Retry(RetryCause::Timeout(policy.timeout.as_secs()))
        }
        ureq::Error::BodyExceedsLimit(n) => Attempt::Fail(t.error(
            RemoteFailure::BadResponse,
            format!("{}: the response is larger than {n} bytes", t.what(method)),
        )),
        other => Attempt::Fail(t.error(
            RemoteFailure::Transport,
            format!("{}: {other}", t.what(method)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_to_at_most_four() {
        let policy = Policy {
            max_attempts: 9,
            retry_codes: vec![503],
            timeout: Duration::from_secs(1),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_millis(4000),
        };
        let waits: Vec<u128> = (1..=7).map(|n| policy.backoff(n).as_millis()).collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 4000, 4000, 4000]);
    }

    #[test]
    fn retry_records_keep_kvikio_s_words_after_the_name() {
        assert_eq!(
            retry_record(RetryCause::Status(503), 500, 1, 2, "HEAD http://h/a"),
            "gpufile: Got HTTP code 503. Retrying after 500ms (attempt 1 of 2). Request: HEAD http://h/a"
        );
        assert_eq!(
            retry_record(RetryCause::Timeout(1), 1000, 2, 3, "GET of bytes 0-9 http://h/a"),
            "gpufile: Timeout error. Retrying after 1000ms (attempt 2 of 3). Request: GET of bytes 0-9 http://h/a"
        );
        assert_eq!(
            RetryCause::Timeout(1).reason(),
            "Operation timed out after 1 s (http_timeout)"
        );
    }
}
