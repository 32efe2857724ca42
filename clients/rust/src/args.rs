//! The contract's argument rules, applied before anything is sent: they are `dlock_core`'s, the
//! functions the extension runs on the same arguments, so that a call the server would refuse
//! for its arguments fails here with the same SQLSTATE and message, without a round trip (and
//! without waiting behind the client's line for a key only to be refused).
//!
//! Only `dlock.max_ttl` and `dlock.fast_max_ttl` are the server's to know: durations are checked
//! to be positive here, against the limits there.

use std::time::Duration;

use dlock_core::limits::{MAX_KEY_BYTES, MAX_OWNER_BYTES};
use dlock_core::{ArgError, Micros, args};

use crate::error::Error;
use crate::lock::MAX_DURATION;

/// No ttl is above this: the client does not know `dlock.max_ttl`, the server checks it.
const ANY_TTL: Micros = Micros::MAX;

/// A duration in microseconds, as the checks take it; longer than the client ever sends
/// (`MAX_DURATION`) is that long.
fn micros(duration: Duration) -> i128 {
    i128::try_from(duration.min(MAX_DURATION).as_micros()).unwrap_or(i128::MAX)
}

fn refuse<T>(checked: Result<T, ArgError>) -> Result<T, Error> {
    checked.map_err(Error::refused)
}

/// A durable key.
pub(crate) fn key(key: &str) -> Result<(), Error> {
    refuse(args::key(Some(key))).map(drop)
}

/// An owner string.
pub(crate) fn owner(owner: &str) -> Result<(), Error> {
    refuse(args::owner(Some(owner))).map(drop)
}

/// A fast-mode key and owner (shorter limits: fixed-size entries in shared memory).
pub(crate) fn fast_key_owner(key: &str, owner: &str) -> Result<(), Error> {
    refuse(args::fast_key(Some(key)))?;
    refuse(args::fast_owner(Some(owner))).map(drop)
}

/// A ttl: positive, or `None` for a session-bound lease.
pub(crate) fn ttl(ttl: Option<Duration>) -> Result<(), Error> {
    refuse(args::ttl(ttl.map(micros), ANY_TTL)).map(drop)
}

/// A fast-mode ttl: required and positive.
pub(crate) fn fast_ttl(ttl: Option<Duration>) -> Result<(), Error> {
    refuse(args::fast_ttl(ttl.map(micros), ANY_TTL)).map(drop)
}

/// A semaphore's size (`None`: not a semaphore) as the server takes it, an `int4`.
pub(crate) fn max_holders(permits: Option<u32>) -> Result<Option<i32>, Error> {
    let Some(permits) = permits else { return Ok(None) };
    let permits = i32::try_from(permits).map_err(|_| {
        Error::refused_by_client(format!("dlock: max_holders is {permits}, the limit is {}", i32::MAX))
    })?;
    refuse(args::max_holders(Some(permits)))
}

/// The keys of a multi-key lock: not empty, at most 64, each a key, none twice.
pub(crate) fn keys(keys: &[String]) -> Result<(), Error> {
    let keys: Vec<Option<&str>> = keys.iter().map(|k| Some(k.as_str())).collect();
    refuse(args::keys(Some(&keys))).map(drop)
}

/// An election's name and candidate (named so in the server's messages).
pub(crate) fn election(name: &str, candidate: &str) -> Result<(), Error> {
    election_name(name)?;
    refuse(args::text("candidate", Some(candidate), MAX_OWNER_BYTES)).map(drop)
}

/// An election's name.
pub(crate) fn election_name(name: &str) -> Result<(), Error> {
    refuse(args::text("election", Some(name), MAX_KEY_BYTES)).map(drop)
}

/// What a leader publishes about itself.
pub(crate) fn info(info: Option<&str>) -> Result<(), Error> {
    refuse(args::info(info)).map(drop)
}

#[cfg(test)]
mod tests {
    use dlock_core::limits::{MAX_INFO_BYTES, MAX_KEYS_PER_CALL};

    use super::*;

    fn refused(outcome: Result<(), Error>) -> (String, String) {
        match outcome {
            Err(Error::InvalidArgument(e)) => (e.code().code().to_owned(), e.message().to_owned()),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn keys_and_owners_are_refused_with_the_servers_sqlstate_and_message() {
        assert_eq!(refused(key("")), ("22023".into(), "dlock: key must not be empty".into()));
        assert!(key(&"k".repeat(MAX_KEY_BYTES)).is_ok(), "the limit itself is allowed");
        let (code, message) = refused(key(&"é".repeat(MAX_KEY_BYTES / 2 + 1)));
        assert_eq!(
            (code.as_str(), message.as_str()),
            ("22023", "dlock: key is 1026 bytes long, the limit is 1024 bytes")
        );
        assert_eq!(refused(owner("")).1, "dlock: owner must not be empty");
        assert!(owner(&"o".repeat(MAX_OWNER_BYTES + 1)).is_err());
        assert!(
            fast_key_owner(&"k".repeat(257), "o").is_err() && fast_key_owner("k", &"o".repeat(129)).is_err()
        );
        assert!(fast_key_owner("k", "o").is_ok());
    }

    #[test]
    fn ttls_must_be_positive_and_only_durable_leases_may_be_session_bound() {
        assert!(ttl(None).is_ok() && ttl(Some(Duration::from_micros(1))).is_ok());
        assert_eq!(refused(ttl(Some(Duration::ZERO))).1, "dlock: ttl must be positive");
        assert!(ttl(Some(Duration::from_nanos(999))).is_err(), "less than the server's microsecond");
        assert!(ttl(Some(Duration::MAX)).is_ok(), "the server knows dlock.max_ttl");
        assert_eq!(refused(fast_ttl(None)), ("22004".into(), "dlock: ttl must not be NULL".into()));
    }

    #[test]
    fn semaphores_multi_key_lists_and_elections_have_their_rules() {
        assert_eq!(max_holders(None).unwrap(), None);
        assert_eq!(max_holders(Some(3)).unwrap(), Some(3));
        assert!(max_holders(Some(0)).is_err());
        assert!(max_holders(Some(u32::MAX)).is_err(), "beyond the server's int4");

        let list = |n: usize| (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>();
        assert!(keys(&list(MAX_KEYS_PER_CALL)).is_ok());
        assert!(keys(&list(MAX_KEYS_PER_CALL + 1)).is_err());
        assert_eq!(refused(keys(&[])).1, "dlock: keys must not be empty");
        assert_eq!(refused(keys(&["a".into(), "a".into()])).1, "dlock: keys lists \"a\" twice");
        assert!(keys(&["a".into(), String::new()]).is_err());

        assert_eq!(refused(election_name("")).1, "dlock: election must not be empty");
        assert!(election("e", "").is_err());
        assert!(info(Some(&"i".repeat(MAX_INFO_BYTES))).is_ok() && info(None).is_ok());
        assert!(info(Some(&"i".repeat(MAX_INFO_BYTES + 1))).is_err());
    }
}
