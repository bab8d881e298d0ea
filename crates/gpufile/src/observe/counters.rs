//! Work that belongs to no single operation (KvikIO 26.10's `statistics::Counters`): remote
//! size probes, HTTP connections opened (with their DNS, TCP and TLS time) and HTTP retries
//! (with their back-off). Counted from the process's start whatever is watching, by the remote
//! crate where each event happens; [`counters`] reads them and a difference of two readings is
//! the cost of an interval.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Running totals (or, from [`Counters::since`], an interval's).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Counters {
    /// Remote sizes asked for (a round trip each).
    pub remote_size_probes: u64,
    /// Time spent waiting for them, in ns.
    pub remote_size_probing_ns: u64,
    /// HTTP connections opened (not reused).
    pub http_connections: u64,
    /// Time those connections spent resolving names, in ns.
    pub http_dns_ns: u64,
    /// Time they spent connecting, in ns.
    pub http_tcp_ns: u64,
    /// Time they spent in TLS handshakes, in ns.
    pub http_tls_ns: u64,
    /// Requests the endpoint turned away with a retryable error (each retry counts).
    pub http_retries: u64,
    /// Time slept before those retries, in ns.
    pub http_retry_backoff_ns: u64,
}

impl Counters {
    /// The names and values, in KvikIO's order.
    pub fn fields(&self) -> [(&'static str, u64); 8] {
        [
            ("remote_size_probes", self.remote_size_probes),
            ("remote_size_probing_ns", self.remote_size_probing_ns),
            ("http_connections", self.http_connections),
            ("http_dns_ns", self.http_dns_ns),
            ("http_tcp_ns", self.http_tcp_ns),
            ("http_tls_ns", self.http_tls_ns),
            ("http_retries", self.http_retries),
            ("http_retry_backoff_ns", self.http_retry_backoff_ns),
        ]
    }

    /// What was counted since `previous`, saturating at zero.
    pub fn since(&self, previous: &Counters) -> Counters {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Counters {
            remote_size_probes: d(self.remote_size_probes, previous.remote_size_probes),
            remote_size_probing_ns: d(self.remote_size_probing_ns, previous.remote_size_probing_ns),
            http_connections: d(self.http_connections, previous.http_connections),
            http_dns_ns: d(self.http_dns_ns, previous.http_dns_ns),
            http_tcp_ns: d(self.http_tcp_ns, previous.http_tcp_ns),
            http_tls_ns: d(self.http_tls_ns, previous.http_tls_ns),
            http_retries: d(self.http_retries, previous.http_retries),
            http_retry_backoff_ns: d(self.http_retry_backoff_ns, previous.http_retry_backoff_ns),
        }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(|(_, v)| *v == 0)
    }
}

static PROBES: AtomicU64 = AtomicU64::new(0);
static PROBING_NS: AtomicU64 = AtomicU64::new(0);
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
static DNS_NS: AtomicU64 = AtomicU64::new(0);
static TCP_NS: AtomicU64 = AtomicU64::new(0);
static TLS_NS: AtomicU64 = AtomicU64::new(0);
static RETRIES: AtomicU64 = AtomicU64::new(0);
static BACKOFF_NS: AtomicU64 = AtomicU64::new(0);

fn add(c: &AtomicU64, d: Duration) {
    c.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
}

/// Every counter now.
pub fn counters() -> Counters {
    let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Counters {
        remote_size_probes: r(&PROBES),
        remote_size_probing_ns: r(&PROBING_NS),
        http_connections: r(&CONNECTIONS),
        http_dns_ns: r(&DNS_NS),
        http_tcp_ns: r(&TCP_NS),
        http_tls_ns: r(&TLS_NS),
        http_retries: r(&RETRIES),
        http_retry_backoff_ns: r(&BACKOFF_NS),
    }
}

/// A remote object's size was asked for; the round trip took `probing`.
pub fn count_remote_size_probe(probing: Duration) {
    PROBES.fetch_add(1, Ordering::Relaxed);
    add(&PROBING_NS, probing);
}

/// A new connection was opened: `dns`, `tcp` and `tls` (zero without TLS) it spent.
pub fn count_http_connection(dns: Duration, tcp: Duration, tls: Duration) {
    CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    add(&DNS_NS, dns);
    add(&TCP_NS, tcp);
    add(&TLS_NS, tls);
}

/// A request hit a retryable error and is tried again after `backoff`.
pub fn count_http_retry(backoff: Duration) {
    RETRIES.fetch_add(1, Ordering::Relaxed);
    add(&BACKOFF_NS, backoff);
}
