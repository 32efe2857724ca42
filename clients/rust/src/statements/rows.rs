//! Reading the answers of the acquire statements: one parser per row shape.

use std::time::{Duration, SystemTime};

use tokio_postgres::Row;

use crate::error::Error;

/// A grant as the server answered it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub(crate) fence: i64,
    /// The server's clock just after the grant.
    pub(crate) server_now: SystemTime,
    /// When the server started the statement (its clock).
    pub(crate) statement_start: SystemTime,
}

impl Grant {
    /// How long the server took from receiving the statement to granting (waits included).
    pub(crate) fn server_elapsed(&self) -> Duration {
        self.server_now.duration_since(self.statement_start).unwrap_or_default()
    }
}

/// What one try on the server answered.
#[derive(Debug)]
pub(crate) enum Tried<T> {
    Granted(T),
    /// Busy; the blocking lease expires by itself after this long (`None`: only a release or
    /// its holder's session ending frees it, or the call cannot say).
    Busy(Option<Duration>),
}

impl<T> Tried<T> {
    /// The granted value, if any.
    pub(crate) fn granted(self) -> Option<T> {
        match self {
            Tried::Granted(granted) => Some(granted),
            Tried::Busy(_) => None,
        }
    }
}

/// `acquire` and `fast_acquire`: fence (NULL when not granted), server clock, statement start.
/// They say nothing about when to retry.
pub(crate) fn acquired(row: &Row) -> Result<Tried<Grant>, Error> {
    Ok(match grant(row)? {
        Some(grant) => Tried::Granted(grant),
        None => Tried::Busy(None),
    })
}

/// `try_acquire`: as [`acquired`], then the seconds until the blocking lease expires (NULL
/// when only a release frees it).
pub(crate) fn tried(row: &Row) -> Result<Tried<Grant>, Error> {
    Ok(match grant(row)? {
        Some(grant) => Tried::Granted(grant),
        None => {
            let retry_after: Option<f64> = row.try_get(3)?;
            // Negative (or NaN) would be the server's rounding: retry at once.
            Tried::Busy(retry_after.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)))
        }
    })
}

fn grant(row: &Row) -> Result<Option<Grant>, Error> {
    let Some(fence) = row.try_get::<_, Option<i64>>(0)? else { return Ok(None) };
    Ok(Some(Grant { fence, server_now: row.try_get(1)?, statement_start: row.try_get(2)? }))
}
