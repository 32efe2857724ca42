//! Waiting by retrying, for clients behind a transaction pooler: no notification can reach
//! them (a LISTEN stays on whichever server connection ran it), and no call may hold a server
//! connection while it waits, so the head of a key's line tries, sleeps, and tries again.
//!
//! The pauses grow from [`FIRST_PAUSE`] to the client's maximum (doubling), each with a random
//! half so that the waiters of many clients spread out instead of retrying in step; a pause
//! never runs past the blocking lease's expiry, which the server tells in its answer.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;
use crate::statements::rows::Tried;

/// The first pause after a busy answer.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two tries unless the client says otherwise: how late a waiter
/// may notice a release, against how many tries per second a waiting key costs the server.
pub(crate) const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The head's loop: try with `attempt(Some(0))` (no waiting on the server), pause, again,
/// until granted or `deadline` (`None` then; the last try is at the deadline).
pub(crate) async fn wait<T, F, Fut>(
    deadline: Option<Instant>,
    max_interval: Duration,
    mut attempt: F,
) -> Result<Option<T>, Error>
where
    F: FnMut(Option<Duration>) -> Fut,
    Fut: Future<Output = Result<Tried<T>, Error>>,
{
    let mut backoff = Backoff::new(max_interval);
    loop {
        let retry_after = match attempt(Some(Duration::ZERO)).await? {
            Tried::Granted(granted) => return Ok(Some(granted)),
            Tried::Busy(retry_after) => retry_after,
        };
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        let pause = backoff.pause(retry_after, fastrand::f64());
        tokio::time::sleep_until(deadline.map_or(now + pause, |d| d.min(now + pause))).await;
    }
}

/// Growing pauses between tries, with jitter.
#[derive(Debug)]
struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    fn new(max: Duration) -> Backoff {
        let max = max.max(FIRST_PAUSE);
        Backoff { step: FIRST_PAUSE, max }
    }

    /// The next pause: between half the current step and the whole of it (`random` in [0, 1)
    /// picks where), and no later than the blocking lease's expiry `retry_after` — though never
    /// shorter than [`FIRST_PAUSE`], so that a key a transaction keeps busy (`retry_after` 0)
    /// is not hammered.
    fn pause(&mut self, retry_after: Option<Duration>, random: f64) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(self.max);
        let half = step / 2;
        let pause = half + half.mul_f64(random.clamp(0.0, 1.0));
        match retry_after {
            Some(expiry) => pause.min(expiry.max(FIRST_PAUSE)),
            None => pause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn pauses_double_up_to_the_maximum_with_a_random_half() {
        let mut backoff = Backoff::new(100 * MS);
        let lowest: Vec<Duration> = (0..6).map(|_| backoff.pause(None, 0.0)).collect();
        assert_eq!(lowest, [5 * MS, 10 * MS, 20 * MS, 40 * MS, 50 * MS, 50 * MS]);
        let mut backoff = Backoff::new(100 * MS);
        let highest: Vec<Duration> = (0..6).map(|_| backoff.pause(None, 1.0)).collect();
        assert_eq!(highest, [10 * MS, 20 * MS, 40 * MS, 80 * MS, 100 * MS, 100 * MS]);
    }

    #[test]
    fn a_pause_ends_by_the_blocking_leases_expiry_but_never_spins() {
        let mut backoff = Backoff::new(Duration::from_secs(1));
        for _ in 0..10 {
            backoff.pause(None, 0.5);
        }
        assert_eq!(backoff.pause(Some(30 * MS), 0.5), 30 * MS, "woken for the expiry");
        assert_eq!(backoff.pause(Some(Duration::ZERO), 0.5), FIRST_PAUSE, "a busy transaction");
        assert_eq!(backoff.pause(Some(Duration::from_secs(60)), 1.0), Duration::from_secs(1));
        assert_eq!(
            Backoff::new(Duration::ZERO).pause(None, 1.0),
            FIRST_PAUSE,
            "the maximum is at least the first pause"
        );
    }

    proptest::proptest! {
        #[test]
        fn every_pause_is_within_its_bounds(
            max_ms in 0u64..5_000,
            answers in proptest::collection::vec((proptest::option::of(0u64..10_000), 0.0f64..1.0), 1..30),
        ) {
            let max = Duration::from_millis(max_ms).max(FIRST_PAUSE);
            let mut backoff = Backoff::new(Duration::from_millis(max_ms));
            for (retry_after_ms, random) in answers {
                let pause = backoff.pause(retry_after_ms.map(Duration::from_millis), random);
                proptest::prop_assert!(pause <= max, "{pause:?} > {max:?}");
                proptest::prop_assert!(pause >= FIRST_PAUSE / 2, "{pause:?}");
                if let Some(expiry) = retry_after_ms.map(Duration::from_millis) {
                    proptest::prop_assert!(pause <= expiry.max(FIRST_PAUSE), "{pause:?} past the expiry {expiry:?}");
                }
            }
        }
    }
}
