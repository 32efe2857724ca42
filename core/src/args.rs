//! Argument checks at the SQL edge: every rejected call is rejected here, before any lock or
//! row is touched, so a rejected call changes nothing.

use crate::error::ArgError;
use crate::limits::{
    MAX_FAST_KEY_BYTES, MAX_FAST_OWNER_BYTES, MAX_INFO_BYTES, MAX_KEY_BYTES, MAX_KEYS_PER_CALL,
    MAX_OWNER_BYTES,
};
use crate::time::Micros;

/// A checked key or owner: non-NULL, non-empty, within its byte limit.
pub fn text<'a>(arg: &'static str, value: Option<&'a str>, max: usize) -> Result<&'a str, ArgError> {
    let value = value.ok_or(ArgError::Null(arg))?;
    if value.is_empty() {
        return Err(ArgError::Empty(arg));
    }
    if value.len() > max {
        return Err(ArgError::TooLong { arg, len: value.len(), max });
    }
    Ok(value)
}

/// A checked lease key.
pub fn key(value: Option<&str>) -> Result<&str, ArgError> {
    text("key", value, MAX_KEY_BYTES)
}

/// A checked owner string.
pub fn owner(value: Option<&str>) -> Result<&str, ArgError> {
    text("owner", value, MAX_OWNER_BYTES)
}

/// A checked fast-mode key.
pub fn fast_key(value: Option<&str>) -> Result<&str, ArgError> {
    text("key", value, MAX_FAST_KEY_BYTES)
}

/// A checked fast-mode owner string.
pub fn fast_owner(value: Option<&str>) -> Result<&str, ArgError> {
    text("owner", value, MAX_FAST_OWNER_BYTES)
}

/// A checked semaphore size: `None` (SQL NULL) is no limit; at least 1 otherwise.
pub fn max_holders(value: Option<i32>) -> Result<Option<i32>, ArgError> {
    match value {
        Some(n) if n < 1 => Err(ArgError::NoPermits(n)),
        other => Ok(other),
    }
}

/// The checked keys of `dlock_acquire_all`: not NULL, not empty, at most
/// [`MAX_KEYS_PER_CALL`], each a valid key, none twice.
pub fn keys<'a>(value: Option<&[Option<&'a str>]>) -> Result<Vec<&'a str>, ArgError> {
    let value = value.ok_or(ArgError::Null("keys"))?;
    if value.is_empty() {
        return Err(ArgError::EmptyArray("keys"));
    }
    if value.len() > MAX_KEYS_PER_CALL {
        return Err(ArgError::TooMany { arg: "keys", len: value.len(), max: MAX_KEYS_PER_CALL });
    }
    let mut keys = Vec::with_capacity(value.len());
    for element in value {
        let key = key(Some(element.ok_or(ArgError::NullElement("keys"))?))?;
        if keys.contains(&key) {
            return Err(ArgError::Duplicate { arg: "keys", value: key.to_string() });
        }
        keys.push(key);
    }
    Ok(keys)
}

/// A checked election `info`: NULL is none; at most [`MAX_INFO_BYTES`].
pub fn info(value: Option<&str>) -> Result<Option<&str>, ArgError> {
    match value {
        Some(text) if text.len() > MAX_INFO_BYTES => {
            Err(ArgError::TooLong { arg: "info", len: text.len(), max: MAX_INFO_BYTES })
        }
        other => Ok(other),
    }
}

/// A checked lock-delay: required, not negative, at most `max` (`dlock.max_ttl`).
pub fn lock_delay(value: Option<i128>, max: Micros) -> Result<Micros, ArgError> {
    let us = value.ok_or(ArgError::Null("lock_delay"))?;
    if us < 0 {
        return Err(ArgError::Negative("lock_delay"));
    }
    if us > i128::from(max) {
        return Err(ArgError::AboveMax("lock_delay"));
    }
    Ok(us as Micros)
}

/// A required argument.
pub fn required<T>(arg: &'static str, value: Option<T>) -> Result<T, ArgError> {
    value.ok_or(ArgError::Null(arg))
}

/// A checked ttl: `None` (SQL NULL) means a session-bound lease; otherwise `0 < ttl ≤ max`.
pub fn ttl(value: Option<i128>, max: Micros) -> Result<Option<Micros>, ArgError> {
    let Some(us) = value else { return Ok(None) };
    if us <= 0 {
        return Err(ArgError::NotPositive("ttl"));
    }
    if us > i128::from(max) {
        return Err(ArgError::AboveMax("ttl"));
    }
    Ok(Some(us as Micros))
}

/// A checked fast-mode ttl: required, `0 < ttl ≤ dlock.fast_max_ttl`.
pub fn fast_ttl(value: Option<i128>, max: Micros) -> Result<Micros, ArgError> {
    match ttl(value, max) {
        Ok(Some(us)) => Ok(us),
        Ok(None) => Err(ArgError::Null("ttl")),
        Err(ArgError::AboveMax(arg)) => Err(ArgError::AboveFastMax(arg)),
        Err(e) => Err(e),
    }
}

/// A checked wait: `None` (SQL NULL) waits without limit; huge waits are clamped, never wrap.
pub fn wait(value: Option<i128>) -> Result<Option<Micros>, ArgError> {
    duration("wait", value)
}

/// A checked `settle` of `dlock_try_acquire`: the same rules as a wait.
pub fn settle(value: Option<i128>) -> Result<Option<Micros>, ArgError> {
    duration("settle", value)
}

fn duration(name: &'static str, value: Option<i128>) -> Result<Option<Micros>, ArgError> {
    let Some(us) = value else { return Ok(None) };
    if us < 0 {
        return Err(ArgError::Negative(name));
    }
    Ok(Some(us.min(i128::from(Micros::MAX)) as Micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_key_and_owner_are_refused_as_null() {
        assert_eq!(key(None), Err(ArgError::Null("key")));
        assert_eq!(owner(None), Err(ArgError::Null("owner")));
    }

    #[test]
    fn empty_and_oversized_text_is_refused() {
        assert_eq!(key(Some("")), Err(ArgError::Empty("key")));
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(
            key(Some(&long)),
            Err(ArgError::TooLong { arg: "key", len: MAX_KEY_BYTES + 1, max: MAX_KEY_BYTES })
        );
        assert!(key(Some(&long[..MAX_KEY_BYTES])).is_ok());
        // Limits are bytes, not characters.
        let wide = "é".repeat(MAX_OWNER_BYTES / 2 + 1);
        assert!(matches!(owner(Some(&wide)), Err(ArgError::TooLong { .. })));
    }

    #[test]
    fn ttl_must_be_positive_and_within_max() {
        assert_eq!(ttl(None, 10), Ok(None));
        assert_eq!(ttl(Some(0), 10), Err(ArgError::NotPositive("ttl")));
        assert_eq!(ttl(Some(-1), 10), Err(ArgError::NotPositive("ttl")));
        assert_eq!(ttl(Some(10), 10), Ok(Some(10)));
        assert_eq!(ttl(Some(11), 10), Err(ArgError::AboveMax("ttl")));
        assert_eq!(ttl(Some(i128::MAX), i64::MAX), Err(ArgError::AboveMax("ttl")));
    }

    #[test]
    fn fast_ttl_is_required_and_bounded_by_its_own_max() {
        assert_eq!(fast_ttl(None, 10), Err(ArgError::Null("ttl")));
        assert_eq!(fast_ttl(Some(0), 10), Err(ArgError::NotPositive("ttl")));
        assert_eq!(fast_ttl(Some(10), 10), Ok(10));
        assert_eq!(fast_ttl(Some(11), 10), Err(ArgError::AboveFastMax("ttl")));
    }

    #[test]
    fn semaphores_have_at_least_one_permit() {
        assert_eq!(max_holders(None), Ok(None));
        assert_eq!(max_holders(Some(1)), Ok(Some(1)));
        assert_eq!(max_holders(Some(0)), Err(ArgError::NoPermits(0)));
        assert_eq!(max_holders(Some(-3)), Err(ArgError::NoPermits(-3)));
    }

    #[test]
    fn keys_of_a_multi_key_lock_are_checked_one_by_one_and_together() {
        assert_eq!(keys(Some(&[Some("a"), Some("b")])), Ok(vec!["a", "b"]));
        assert_eq!(keys(None), Err(ArgError::Null("keys")));
        assert_eq!(keys(Some(&[])), Err(ArgError::EmptyArray("keys")));
        assert_eq!(keys(Some(&[Some("a"), None])), Err(ArgError::NullElement("keys")));
        assert_eq!(
            keys(Some(&[Some("a"), Some("a")])),
            Err(ArgError::Duplicate { arg: "keys", value: "a".into() })
        );
        assert_eq!(keys(Some(&[Some("")])), Err(ArgError::Empty("key")));
        let many: Vec<Option<&str>> = (0..=MAX_KEYS_PER_CALL).map(|_| Some("k")).collect();
        assert!(matches!(keys(Some(&many)), Err(ArgError::TooMany { len: 65, max: 64, .. })));
    }

    #[test]
    fn info_and_lock_delay_have_their_limits() {
        assert_eq!(info(None), Ok(None));
        assert!(info(Some(&"i".repeat(MAX_INFO_BYTES))).is_ok());
        assert!(matches!(
            info(Some(&"i".repeat(MAX_INFO_BYTES + 1))),
            Err(ArgError::TooLong { arg: "info", .. })
        ));
        assert_eq!(lock_delay(Some(0), 10), Ok(0));
        assert_eq!(lock_delay(Some(10), 10), Ok(10));
        assert_eq!(lock_delay(Some(11), 10), Err(ArgError::AboveMax("lock_delay")));
        assert_eq!(lock_delay(Some(-1), 10), Err(ArgError::Negative("lock_delay")));
        assert_eq!(lock_delay(None, 10), Err(ArgError::Null("lock_delay")));
    }

    #[test]
    fn fast_keys_and_owners_have_their_own_limits() {
        assert!(fast_key(Some(&"k".repeat(MAX_FAST_KEY_BYTES))).is_ok());
        assert!(matches!(fast_key(Some(&"k".repeat(MAX_FAST_KEY_BYTES + 1))), Err(ArgError::TooLong { .. })));
        assert!(matches!(
            fast_owner(Some(&"o".repeat(MAX_FAST_OWNER_BYTES + 1))),
            Err(ArgError::TooLong { .. })
        ));
        assert_eq!(required("fence", None::<i64>), Err(ArgError::Null("fence")));
    }

    #[test]
    fn wait_is_never_negative_and_huge_waits_clamp() {
        assert_eq!(wait(None), Ok(None));
        assert_eq!(wait(Some(0)), Ok(Some(0)));
        assert_eq!(wait(Some(-1)), Err(ArgError::Negative("wait")));
        assert_eq!(wait(Some(i128::MAX)), Ok(Some(Micros::MAX)));
    }
}
