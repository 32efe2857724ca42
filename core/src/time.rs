//! Time as PostgreSQL keeps it: every instant is the server's clock, never a client's.

/// A PostgreSQL `timestamptz`: microseconds since 2000-01-01 UTC.
pub type Timestamp = i64;

/// A duration in microseconds, as PostgreSQL orders intervals (a month counts 30 days).
pub type Micros = i64;

/// `'infinity'::timestamptz`: the expiry of a session-bound lease.
pub const INFINITY: Timestamp = i64::MAX;

/// `expires_at` of a lease taken at `now` for `ttl` (`None`: session-bound). A TTL lease never
/// reaches [`INFINITY`], which would make it session-bound.
pub fn expiry(now: Timestamp, ttl: Option<Micros>) -> Timestamp {
    match ttl {
        None => INFINITY,
        Some(ttl) => now.saturating_add(ttl).min(INFINITY - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_expiry_never_overflows_into_session_bound() {
        assert_eq!(expiry(INFINITY - 5, Some(100)), INFINITY - 1);
        assert_eq!(expiry(1_000, Some(5)), 1_005);
        assert_eq!(expiry(1_000, None), INFINITY);
    }
}
