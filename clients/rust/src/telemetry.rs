//! What the client tells about its own work, each call site one line:
//! - `tracing` spans `dlock.acquire`, `dlock.wait`, `dlock.renew` and `dlock.release`, with the
//!   fields `key`, `fence` (once known) and `outcome` (`granted`, `busy`, `timeout`,
//!   `renewed`, `released`, `lost`, `error`). Without a subscriber interested in them a span
//!   costs one cached check;
//! - with the `metrics` feature, through the `metrics` facade (the application installs the
//!   recorder): the histogram `dlock_client_acquire_seconds` of acquire latency by `outcome`,
//!   and the counter `dlock_client_leases_lost_total`. Without the feature these compile to
//!   nothing.

use std::future::Future;
use std::time::SystemTime;

use futures_util::FutureExt;
use tracing::Instrument;
use tracing::field::Empty;

use crate::error::Error;

/// How a call ended, as its span's `outcome` field and the latency histogram's label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The lease was granted.
    Granted,
    /// Another owner held the key and the call did not wait.
    Busy,
    /// The wait elapsed before the key was free.
    Timeout,
    /// The lease was renewed.
    Renewed,
    /// The hold was given back.
    Released,
    /// The lease was no longer ours (renew, release).
    Lost,
    /// The call failed (see the error).
    Error,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Granted => "granted",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Renewed => "renewed",
            Outcome::Released => "released",
            Outcome::Lost => "lost",
            Outcome::Error => "error",
        }
    }
}

// The wrappers are plain functions returning a combinator, not `async fn`s: an `async fn`
// keeps its future argument both as a parameter and as the awaited value in its state (in debug
// builds), doubling the size of every acquire's future on the caller's stack.

/// An acquire of `key` (`waits`: whether it may wait, so that no grant is a timeout rather
/// than busy) in a `dlock.acquire` span; `fence` reads the fence of what it granted. `key` and
/// the fence are a key and its fence, or a multi-key grant's lists of them.
pub(crate) fn acquire<T, K: tracing::Value, F: tracing::Value>(
    key: K,
    waits: bool,
    fence: impl FnOnce(&T) -> F,
    attempt: impl Future<Output = Result<Option<T>, Error>>,
) -> impl Future<Output = Result<Option<T>, Error>> {
    let span = tracing::info_span!("dlock.acquire", key, fence = Empty, outcome = Empty);
    let stopwatch = Stopwatch::start();
    attempt.instrument(span.clone()).map(move |result| {
        let outcome = match &result {
            Ok(Some(granted)) => {
                span.record("fence", fence(granted));
                Outcome::Granted
            }
            Ok(None) if waits => Outcome::Timeout,
            Ok(None) => Outcome::Busy,
            Err(_) => Outcome::Error,
        };
        span.record("outcome", outcome.as_str());
        stopwatch.acquire_ended(outcome);
        result
    })
}

/// A wait for `key` (the client's local line and its tries) in a `dlock.wait` span.
pub(crate) fn wait<T>(
    key: &str,
    fence: impl FnOnce(&T) -> i64,
    waiting: impl Future<Output = Result<Option<T>, Error>>,
) -> impl Future<Output = Result<Option<T>, Error>> {
    let span = tracing::info_span!("dlock.wait", key, fence = Empty, outcome = Empty);
    waiting.instrument(span.clone()).map(move |result| {
        let outcome = match &result {
            Ok(Some(granted)) => {
                span.record("fence", fence(granted));
                Outcome::Granted
            }
            Ok(None) => Outcome::Timeout,
            Err(_) => Outcome::Error,
        };
        span.record("outcome", outcome.as_str());
        result
    })
}

/// One renewal of the lease `key`/`fence` in a `dlock.renew` span: the new expiry, or `None`
/// when the lease is no longer ours.
pub(crate) fn renew(
    key: &str,
    fence: i64,
    renewal: impl Future<Output = Result<Option<SystemTime>, Error>>,
) -> impl Future<Output = Result<Option<SystemTime>, Error>> {
    let span = tracing::info_span!("dlock.renew", key, fence, outcome = Empty);
    renewal.instrument(span.clone()).map(move |result| {
        let outcome = match &result {
            Ok(Some(_)) => Outcome::Renewed,
            Ok(None) => Outcome::Lost,
            Err(_) => Outcome::Error,
        };
        span.record("outcome", outcome.as_str());
        result
    })
}

/// One release of a hold of `key`/`fence` in a `dlock.release` span: whether the lease was
/// still ours.
pub(crate) fn release(
    key: &str,
    fence: i64,
    release: impl Future<Output = Result<bool, Error>>,
) -> impl Future<Output = Result<bool, Error>> {
    let span = tracing::info_span!("dlock.release", key, fence, outcome = Empty);
    release.instrument(span.clone()).map(move |result| {
        let outcome = match &result {
            Ok(true) => Outcome::Released,
            Ok(false) => Outcome::Lost,
            Err(_) => Outcome::Error,
        };
        span.record("outcome", outcome.as_str());
        result
    })
}

/// A lease was lost while still wanted (counted once per lease by its caller).
pub(crate) fn lease_lost() {
    #[cfg(feature = "metrics")]
    {
        describe();
        metrics::counter!(LEASES_LOST).increment(1);
    }
}

/// The acquire latency histogram's name.
#[cfg(feature = "metrics")]
const ACQUIRE_SECONDS: &str = "dlock_client_acquire_seconds";
/// The lost leases counter's name.
#[cfg(feature = "metrics")]
const LEASES_LOST: &str = "dlock_client_leases_lost_total";

/// Gives the recorder the metrics' units and help, once per process.
#[cfg(feature = "metrics")]
fn describe() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        metrics::describe_histogram!(
            ACQUIRE_SECONDS,
            metrics::Unit::Seconds,
            "Time the client's acquires took, waits included, by outcome"
        );
        metrics::describe_counter!(LEASES_LOST, "Leases this process lost while it still held them");
    });
}

/// When an acquire started: a clock reading with the `metrics` feature, nothing without.
struct Stopwatch {
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl Stopwatch {
    fn start() -> Stopwatch {
        Stopwatch {
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }

    /// Records the acquire's latency under `outcome`.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "recorded with the feature only"))]
    fn acquire_ended(self, outcome: Outcome) {
        #[cfg(feature = "metrics")]
        {
            describe();
            metrics::histogram!(ACQUIRE_SECONDS, "outcome" => outcome.as_str())
                .record(self.started.elapsed().as_secs_f64());
        }
    }
}
