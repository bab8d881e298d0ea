//! The transport: the client's `ureq` agent (blocking, rustls, a connection pool shared by the
//! workers), whose socket reads give up soon after the request's [`StopFlag`] is set, its
//! resolver that spares IP literals a lookup thread, and the backoff sleep that a stop cuts
//! short.
//!
//! A request stops (an [`Error::Cancelled`](gpufile::Error::Cancelled)) soon after its
//! [`StopFlag`] is set (Ctrl-C, or another task of the request failed): between attempts,
//! during a backoff, and while a response or a body is awaited (socket reads wait in slices of
//! [`STOP_POLL`] and look at the flag between them); only a connection being opened is waited
//! for.

use std::cell::RefCell;
use std::io;
use std::time::{Duration, Instant};

use gpufile::StopFlag;
use ureq::tls::TlsConfig;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, NextTimeout, RustlsConnector,
    TcpConnector, Transport,
};
use ureq::Agent;

use super::request::Target;
use crate::stop::STOP_POLL;

/// The agent of one client, trusting `tls`'s roots.
pub(super) fn agent(tls: TlsConfig) -> Agent {
    let config = Agent::config_builder()
        .tls_config(tls)
        // Status codes are ours to judge (retry list, range checks).
        .http_status_as_error(false)
        // One idle connection per worker, so that tasks reuse them.
        .max_idle_connections(256)
        .max_idle_connections_per_host(256)
        .user_agent(concat!("gpufile/", env!("CARGO_PKG_VERSION")))
        // Each hop is checked by `send` (credentials, https to http).
        .max_redirects(0)
        // The stored bytes, never an encoding of them (whatever ureq's features).
        .accept_encoding("identity")
        .build();
    stoppable_agent(config)
}

/// An agent of `config` whose socket reads give up soon after the watched stop flag is set
/// (the request's, else the caller's of [`crate::stop::with_stop`]): the clients' agents and
/// the credential fetches'.
pub(crate) fn stoppable_agent(config: ureq::config::Config) -> Agent {
    // ureq's default chain (CONNECT proxy, TCP, rustls) with a stoppable transport over TCP.
    // `Timing` stages time each new connection for gpufile's counters.
    let connector =
        ().chain(Timing::Begin)
            .chain(ConnectProxyConnector::default())
            .chain(TcpConnector::default())
            .chain(Stoppable)
            .chain(Timing::Connected)
            .chain(RustlsConnector::default())
            .chain(Timing::Done);
    Agent::with_parts(config, connector, LiteralIpResolver::default())
}

thread_local! {
    /// The stop flag of the request this thread is sending, for [`StoppableTransport`]: ureq runs
    /// a request on the calling thread, through a pooled transport made for an earlier one.
    static WATCHED: RefCell<Option<StopFlag>> = const { RefCell::new(None) };
}

/// Watches `stop` on this thread until dropped.
pub(super) struct Watch(Option<StopFlag>);

impl Watch {
    pub(super) fn new(stop: Option<&StopFlag>) -> Self {
        let before = WATCHED.with(|w| w.replace(stop.cloned()));
        Watch(before)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let before = self.0.take();
        WATCHED.with(|w| *w.borrow_mut() = before);
    }
}

/// Whether this thread's request has a stop flag (`None`: neither its own nor its caller's,
/// [`crate::stop::with_stop`]), and whether it is set.
fn watched_stop() -> Option<bool> {
    WATCHED
        .with(|w| w.borrow().as_ref().map(StopFlag::is_set))
        .or_else(|| crate::stop::current().map(|s| s.is_set()))
}

thread_local! {
    /// This thread's last name lookup (ureq resolves before every request, pooled connection or
    /// not; it counts only for a connection opened after it).
    static LOOKUP: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
    /// When the connection this thread is opening started, and when its TCP part ended.
    static OPENING: std::cell::Cell<(Option<Instant>, Option<Instant>)> =
        const { std::cell::Cell::new((None, None)) };
}

/// Stages of a new connection, timed for [`gpufile::observe::counters`]: `connect` runs only
/// for a connection opened, never for one reused from the pool.
#[derive(Debug)]
enum Timing {
    /// First in the chain: the connection starts.
    Begin,
    /// After TCP (and a CONNECT proxy's tunnel).
    Connected,
    /// Last: after TLS where there is TLS; counts the connection.
    Done,
}

impl<In: Transport> Connector<In> for Timing {
    type Out = In;

    fn connect(
        &self,
        _details: &ConnectionDetails,
        chained: Option<In>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        let now = Instant::now();
        match self {
            Timing::Begin => OPENING.with(|o| o.set((Some(now), None))),
            Timing::Connected => OPENING.with(|o| o.set((o.get().0, Some(now)))),
            Timing::Done => {
                let (begin, tcp_end) = OPENING.with(|o| o.replace((None, None)));
                if let (Some(begin), Some(t)) = (begin, chained.as_ref()) {
                    let tcp_end = tcp_end.unwrap_or(now);
                    let tls = match t.is_tls() {
                        true => now.saturating_duration_since(tcp_end),
                        false => Duration::ZERO,
                    };
                    gpufile::__private::observe::count_http_connection(
                        LOOKUP.with(|l| l.get()),
                        tcp_end.saturating_duration_since(begin),
                        tls,
                    );
                }
            }
        }
        Ok(chained)
    }
}

/// Puts a [`StoppableTransport`] over each TCP connection (under TLS, if any).
#[derive(Debug)]
struct Stoppable;

impl<In: Transport> Connector<In> for Stoppable {
    type Out = StoppableTransport<In>;

    fn connect(
        &self,
        _details: &ConnectionDetails,
        chained: Option<In>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        Ok(chained.map(StoppableTransport))
    }
}

/// A transport whose reads wait in slices of [`STOP_POLL`], giving up when the watched stop flag
/// is set (a blocking socket read cannot be interrupted otherwise).
#[derive(Debug)]
struct StoppableTransport<T>(T);

impl<T: Transport> Transport for StoppableTransport<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.0.buffers()
    }

    fn transmit_output(
        &mut self,
        amount: usize,
        timeout: NextTimeout,
    ) -> std::result::Result<(), ureq::Error> {
        self.0.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> std::result::Result<bool, ureq::Error> {
        use ureq::unversioned::transport::time::Duration as Budget;
        if watched_stop().is_none() {
            return self.0.await_input(timeout); // nothing can stop it: one wait
        }
        let budget = timeout.for_read();
        let until = match budget.after {
            Budget::NotHappening => None,
            after => Instant::now().checked_add(*after),
        };
        loop {
            if watched_stop() == Some(true) {
                return Err(ureq::Error::Io(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "the request was cancelled",
                )));
            }
            // The budget left, in one slice when it fits (then its timeout is the request's).
            let left = until.map(|u| u.saturating_duration_since(Instant::now()));
            let last = left.is_some_and(|l| l <= STOP_POLL);
            let mut next = budget;
            next.after = Budget::Exact(left.map_or(STOP_POLL, |l| l.min(STOP_POLL)));
            match self.0.await_input(next) {
                Err(ureq::Error::Timeout(_)) if !last => continue,
                other => return other,
            }
        }
    }

    fn is_open(&mut self) -> bool {
        self.0.is_open()
    }

    fn is_tls(&self) -> bool {
        self.0.is_tls()
    }
}

/// ureq's resolver, without its thread for an IP address.
///
/// ureq resolves the host before every request, pooled connection or not, and under a deadline
/// (`http_timeout`) it does so on a thread spawned for the lookup, so that `getaddrinfo` cannot
/// outlast the deadline. For an IP literal (`127.0.0.1`, `[::1]`) there is nothing to look up:
/// without a deadline ureq parses it on the calling thread, which saves a thread spawned and
/// joined per range (docs/performance.md, "Remote requests").
#[derive(Debug, Default)]
struct LiteralIpResolver(DefaultResolver);

impl Resolver for LiteralIpResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> std::result::Result<ResolvedSocketAddrs, ureq::Error> {
        let literal = uri.host().is_some_and(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok()
        });
        let timeout = if literal {
            NextTimeout::default()
        } else {
            timeout
        };
        let began = Instant::now();
        let resolved = self.0.resolve(uri, config, timeout);
        LOOKUP.with(|l| l.set(began.elapsed()));
        resolved
    }
}

/// Sleeps `delay` unless the target's request stops first; false if it stopped.
pub(super) fn sleep_unless_stopped(delay: Duration, t: &Target<'_>) -> bool {
    let until = Instant::now() + delay;
    loop {
        if t.stopped() {
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
    fn ip_literals_resolve_without_a_lookup_past_any_deadline() {
        use ureq::unversioned::transport::time::Duration as Deadline;
        let config = ureq::config::Config::default();
        // A deadline already spent: a lookup would time out; an IP literal needs none.
        let spent = NextTimeout {
            after: Deadline::Exact(Duration::ZERO),
            ..NextTimeout::default()
        };
        for (uri, want) in [
            ("http://127.0.0.1:8080/a", "127.0.0.1:8080"),
            ("https://[::1]/a", "[::1]:443"),
        ] {
            let uri: ureq::http::Uri = uri.parse().unwrap();
            let addrs = LiteralIpResolver::default()
                .resolve(&uri, &config, spent)
                .unwrap();
            assert_eq!(addrs[0].to_string(), want);
        }
    }
}
