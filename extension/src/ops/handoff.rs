//! Direct hand-off (preloaded only): whoever frees a key grants it to the head of its queue in
//! its own transaction, when the head published a TTL request for exactly this key and the rules
//! grant it now. The head then wakes to a lease that is already committed and durable.

use crate::locks::liveness;
use crate::pg::backend::now;
use crate::pg::spi::Spi;
use crate::stats::{self, Counter};
use crate::store;
use crate::wait::{key_queue, requests};
use dlock_core::lease::{self, Acquire, Caller, KeyState, Request};
use dlock_core::time::expiry;

/// Grants the freed `key` to the head of its queue in this transaction, if it asked for it and
/// may have it. `others_may_remain`: after the last exclusive lease ended, the key is free
/// (nothing else could hold it, nor a lock-delay hold it back); after a shared one, or a force
/// release, other holders or a lock-delay may remain, so the rows are read. Call after the
/// release wrote, holding the key lock, once the release's own durability was settled: the grant
/// makes the commit durable again (it is an acquire).
pub fn hand_over(spi: &Spi, key: &str, hash: u64, others_may_remain: bool) {
    if !requests::enabled() {
        return;
    }
    let Some(index) = key_queue::head(hash).map(requests::index_of) else { return };
    let Some((asked, ticket)) = requests::request_for(index, key, hash) else { return };
    if !crate::shards::may_hand_over(key) {
        return;
    }
    let now = now();
    let request = Request {
        kind: asked.kind,
        max_holders: asked.max_holders,
        ttl: Some(asked.ttl_us),
        lock_delay: asked.lock_delay,
    };
    let caller = Caller { role: asked.role, owner: &asked.owner, admin: false };
    let rows = if others_may_remain { store::read(spi, key) } else { Vec::new() };
    let state = if others_may_remain { liveness::state(&rows, now) } else { KeyState::free() };
    if !matches!(lease::acquire(&state, &caller, &request, now, false), Acquire::Grant { .. }) {
        return;
    }
    let new = store::NewLease {
        key,
        owner: &asked.owner,
        role: asked.role,
        acquired_at: now,
        expires_at: expiry(now, Some(asked.ttl_us)),
        holder_pid: asked.pid,
        kind: asked.kind,
        max_holders: asked.max_holders,
        lock_delay: asked.lock_delay,
        info: None,
    };
    // A waiter's grant: a row of its own (`store/row.rs`).
    let fence = store::grant(spi, &new, store::Slot::Owner);
    let fence = crate::pg::report::OrRaise::or_raise(crate::shards::check_fence(fence), "dlock");
    stats::count_at_commit(Counter::Grants);
    requests::offer(ticket, fence);
}
