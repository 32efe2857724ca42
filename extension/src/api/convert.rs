//! Between SQL's types and dlock's: intervals to microseconds, timestamps back.

use dlock_core::{INFINITY, Timestamp};
use pgrx::prelude::*;

/// An interval in microseconds, as PostgreSQL orders intervals (a month counts 30 days).
pub fn micros(i: Option<Interval>) -> Option<i128> {
    i.map(|i| i.as_micros())
}

/// A timestamp for SQL, `'infinity'` for a session-bound lease's expiry.
pub fn timestamptz(t: Timestamp) -> TimestampWithTimeZone {
    if t == INFINITY {
        TimestampWithTimeZone::positive_infinity()
    } else {
        // Every finite value we store came from the server clock plus a bounded ttl.
        TimestampWithTimeZone::try_from(t).unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity())
    }
}
