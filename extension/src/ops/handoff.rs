//! Direct hand-off (preloaded only): whoever frees a key grants it to the head of its queue in
//! its own transaction, when the head published a TTL request for exactly this key. The head
//! then wakes to a lease that is already committed and durable.

use crate::pg::backend::now;
use crate::pg::spi::Spi;
use crate::store;
use crate::wait::{queue, slots};
use dlock_core::time::expiry;

/// Grants the freed `key` to the head of its queue in this transaction, if it asked for it. Call
/// after the release wrote, holding the key lock, once the release's own durability was
/// settled: the grant makes the commit durable again (it is an acquire).
pub fn hand_over(spi: &Spi, key: &str, hash: u64) {
    if !slots::enabled() {
        return;
    }
    let Some(index) = queue::head(hash).map(|p| slots::index_of(p)) else { return };
    let Some((request, ticket)) = slots::request_for(index, key, hash) else { return };
    let now = now();
    let fence = store::grant(
        spi,
        &store::NewLease {
            key,
            owner: &request.owner,
            role: request.role,
            acquired_at: now,
            expires_at: expiry(now, Some(request.ttl_us)),
            holder_pid: request.pid,
        },
    );
    slots::offer(ticket, fence);
}
