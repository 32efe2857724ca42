//! What every lock builder lets you choose about the lease and the wait — ttl, wait, watchdog,
//! lock-delay — kept once ([`LeaseOptions`]) with its setters ([`lease_setters!`]), which each
//! builder ([`LockBuilder`](crate::LockBuilder), [`LockAllBuilder`](crate::LockAllBuilder))
//! takes into its own `impl`, so both offer the same methods with the same meaning.

use std::time::Duration;

use super::watchdog;

/// The ttl of a lease unless the builder's `ttl` says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Longer durations are taken as this (about 285,000 years): PostgreSQL's intervals and the
/// clocks' arithmetic end not far beyond, and nothing real waits or lives that long.
pub const MAX_DURATION: Duration = Duration::from_secs(9_000_000_000_000);

/// How long an acquire may wait for the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Answer at once (`wait => 0`).
    No,
    /// Wait up to this long.
    Up(Duration),
    /// Wait without limit (`wait => NULL`).
    Forever,
}

impl Wait {
    /// Up to `wait` (zero: not at all).
    pub(crate) fn up_to(wait: Duration) -> Wait {
        if wait.is_zero() { Wait::No } else { Wait::Up(wait.min(MAX_DURATION)) }
    }

    /// The server's `wait` argument in seconds (`None`: NULL, without limit).
    pub(crate) fn seconds(self) -> Option<f64> {
        match self {
            Wait::No => Some(0.0),
            Wait::Up(wait) => Some(wait.as_secs_f64()),
            Wait::Forever => None,
        }
    }

    /// When a wait that starts now ends (`None`: never, or at once).
    pub(crate) fn deadline(self) -> Option<tokio::time::Instant> {
        match self {
            Wait::Up(wait) => Some(tokio::time::Instant::now() + wait),
            Wait::No | Wait::Forever => None,
        }
    }
}

/// The lease and the wait a builder describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseOptions {
    /// `None`: session-bound (only a single-key builder can say so).
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Wait,
    pub(crate) watchdog: bool,
    /// `None`: a third of the ttl.
    pub(crate) renew_every: Option<Duration>,
    pub(crate) lock_delay: Duration,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            ttl: Some(DEFAULT_TTL),
            wait: Wait::No,
            watchdog: true,
            renew_every: None,
            lock_delay: Duration::ZERO,
        }
    }
}

impl LeaseOptions {
    /// How often the watchdog renews the lease, if one runs (a TTL lease with the watchdog on).
    pub(crate) fn renewal_interval(&self) -> Option<Duration> {
        let ttl = self.ttl.filter(|_| self.watchdog)?;
        Some(watchdog::renewal_interval(ttl, self.renew_every))
    }
}

/// The setters of [`LeaseOptions`], for the `impl` of a builder with a field
/// `options: LeaseOptions`.
macro_rules! lease_setters {
    () => {
        /// The lease's time to live (default 30 s): it ends by itself this long after the last
        /// grant or renewal, if the holder dies (for a multi-key lock, every key's lease).
        pub fn ttl(mut self, ttl: ::std::time::Duration) -> Self {
            self.options.ttl = Some(ttl.min($crate::lock::options::MAX_DURATION));
            self
        }

        /// Wait up to `wait` for the lock if another owner holds it (or any of its keys);
        /// `acquire` then fails with [`Error::Timeout`](crate::Error::Timeout) when it elapses.
        /// Default: no wait. How the wait is done, and whether it holds a connection, is in
        /// the builder's docs ("Waiting").
        pub fn wait(mut self, wait: ::std::time::Duration) -> Self {
            self.options.wait = $crate::lock::options::Wait::up_to(wait);
            self
        }

        /// Wait for the lock without limit (until cancelled, `statement_timeout`, or
        /// disconnect).
        pub fn wait_forever(mut self) -> Self {
            self.options.wait = $crate::lock::options::Wait::Forever;
            self
        }

        /// Whether a background task renews the lease while the guard lives (default: on).
        /// Off gives a fixed lease that ends at its ttl unless renewed by hand; either way the
        /// guard's `lost` token fires when the lease runs out.
        pub fn watchdog(mut self, on: bool) -> Self {
            self.options.watchdog = on;
            self
        }

        /// How often the watchdog renews (default: a third of the ttl, so that two renewals
        /// can fail before the lease runs out). Turns the watchdog on.
        pub fn renew_every(mut self, every: ::std::time::Duration) -> Self {
            self.options.watchdog = true;
            self.options.renew_every = Some(every.min($crate::lock::options::MAX_DURATION));
            self
        }

        /// A lock-delay (Chubby's, Consul's): should the lease end by expiring rather than by
        /// release, its key stays held back from new grants for `delay` after its expiry, so
        /// that writes a paused holder still has in flight drain before the next holder
        /// starts. Default: none. Needs a version 2 server (dlock 0.2.0); durable leases only.
        pub fn lock_delay(mut self, delay: ::std::time::Duration) -> Self {
            self.options.lock_delay = delay.min($crate::lock::options::MAX_DURATION);
            self
        }
    };
}

pub(crate) use lease_setters;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_of_zero_are_one_try_and_long_ones_are_clamped() {
        assert_eq!(Wait::up_to(Duration::ZERO), Wait::No);
        assert_eq!(Wait::up_to(Duration::MAX), Wait::Up(MAX_DURATION));
        assert_eq!((Wait::No.seconds(), Wait::Forever.seconds()), (Some(0.0), None));
        assert!(Wait::No.deadline().is_none() && Wait::Forever.deadline().is_none());
    }

    #[test]
    fn the_watchdog_renews_a_third_of_the_ttl_unless_told_otherwise_or_off() {
        let options = LeaseOptions::default();
        assert_eq!(options.renewal_interval(), Some(DEFAULT_TTL / 3));
        let every = LeaseOptions { renew_every: Some(Duration::from_secs(2)), ..LeaseOptions::default() };
        assert_eq!(every.renewal_interval(), Some(Duration::from_secs(2)));
        assert_eq!(LeaseOptions { watchdog: false, ..LeaseOptions::default() }.renewal_interval(), None);
        assert_eq!(LeaseOptions { ttl: None, ..LeaseOptions::default() }.renewal_interval(), None);
    }
}
