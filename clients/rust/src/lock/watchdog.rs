//! The watchdog of a TTL lease: renews it while the guard lives, and declares it lost when a
//! renewal is refused or the ttl runs out first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::state::LeaseState;

/// Shortest pause between retries of a renewal that failed on a connection error.
const MIN_RETRY: Duration = Duration::from_millis(10);

/// How often a watchdog renews a lease of `ttl`: as chosen, else a third of the ttl, so that
/// two renewals can fail before the lease runs out.
pub(crate) fn renewal_interval(ttl: Duration, chosen: Option<Duration>) -> Duration {
    chosen.unwrap_or(ttl / 3)
}

/// Starts the watchdog of `state` on the current tokio runtime. With `renew_every` it renews
/// that often; without, it only watches the ttl run out (a fixed lease, renewed by hand).
/// It ends when the guard lets go (`state.ended`) or the lease is lost.
pub(crate) fn spawn(state: Arc<LeaseState>, renew_every: Option<Duration>) {
    tokio::spawn(run(state, renew_every));
}

async fn run(state: Arc<LeaseState>, renew_every: Option<Duration>) {
    let mut next_renewal = renew_every.map(|every| Instant::now() + every);
    loop {
        let Some(deadline) = state.deadline() else { return };
        let wake = next_renewal.map_or(deadline, |at| at.min(deadline));
        tokio::select! {
            biased;
            () = state.ended.cancelled() => return,
            () = tokio::time::sleep_until(wake.into()) => {}
        }
        // Re-read: a renewal by hand may have moved the deadline meanwhile.
        let Some(deadline) = state.deadline() else { return };
        let now = Instant::now();
        if now >= deadline {
            state.mark_lost("the ttl ran out before the lease was renewed");
            return;
        }
        let (Some(every), Some(at)) = (renew_every, next_renewal) else { continue };
        if now < at {
            continue;
        }
        // A renewal that has not answered by the deadline is too late whatever it answers.
        let outcome = tokio::select! {
            biased;
            () = state.ended.cancelled() => return,
            outcome = tokio::time::timeout_at(deadline.into(), state.renew_ttl()) => outcome,
        };
        match outcome {
            Ok(Ok(Some(_))) => next_renewal = Some(Instant::now() + every),
            Ok(Ok(None)) => {
                state.mark_lost("renewal answered that the lease is no longer ours");
                return;
            }
            Ok(Err(e)) if e.is_transient() => {
                // The connection may come back before the ttl runs out: retry sooner.
                tracing::warn!(key = %state.key, error = %e, "dlock: renewal failed; retrying");
                next_renewal = Some(Instant::now() + (every / 4).max(MIN_RETRY));
            }
            Ok(Err(e)) => {
                // A refusal (e.g. 42501) will not change by retrying.
                state.mark_lost(&format!("renewal failed: {e}"));
                return;
            }
            Err(_) => {
                state.mark_lost("no renewal answered before the ttl ran out");
                return;
            }
        }
    }
}
