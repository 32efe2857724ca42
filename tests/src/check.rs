//! Assertion helpers: SQLSTATEs, time limits on awaits, and polling for observed states.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use tokio_postgres::Error;
use tokio_postgres::error::SqlState;

/// Asserts that `result` is an error with SQLSTATE `code` (not the message text).
pub fn expect_sqlstate<T: Debug>(result: Result<T, Error>, code: &SqlState, what: &str) {
    match result {
        Ok(value) => panic!("{what}: expected ERROR {}, got Ok({value:?})", code.code()),
        Err(e) => assert_eq!(
            e.code(),
            Some(code),
            "{what}: expected ERROR {}, got {:?} ({e})",
            code.code(),
            e.code().map(SqlState::code)
        ),
    }
}

/// Awaits `future`, failing the test with `what` if it takes longer than `limit`
/// (so a broken extension makes a test fail instead of hang).
pub async fn within<F: Future>(limit: Duration, what: &str, future: F) -> F::Output {
    match tokio::time::timeout(limit, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: did not finish within {limit:?}"),
    }
}

/// Polls `probe` every 10 ms until it returns true; fails with `what` after `limit`.
/// For observing server state from the outside (e.g. "the waiter is now waiting").
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if probe().await {
            return;
        }
        assert!(start.elapsed() < limit, "{what}: not observed within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A key unique to one test: `<test>/<name>`.
pub fn key(test: &str, name: &str) -> String {
    format!("{test}/{name}")
}

/// An owner string unique to one test: `<test>:<name>`.
pub fn owner(test: &str, name: &str) -> String {
    format!("{test}:{name}")
}

/// Awaits a spawned acquire (`Session::spawn_acquire`) for at most `limit`.
pub async fn finish(
    attempt: tokio::task::JoinHandle<crate::Attempt>,
    limit: Duration,
    what: &str,
) -> crate::Attempt {
    within(limit, what, attempt).await.unwrap_or_else(|e| panic!("{what}: the acquiring task failed: {e}"))
}

/// Waits until `dlock_locks` shows `count` waiters on `key` (as seen by `observer`).
pub async fn wait_for_waiters(observer: &crate::Session, key: &str, count: i32) {
    let what = format!("dlock_locks.waiters = {count} for key {key:?}");
    eventually(Duration::from_secs(5), &what, || async move {
        observer.waiters(key).await.expect("read dlock_locks") == count
    })
    .await;
}

/// Waits (up to 5 s) until exactly `count` other sessions watch `key` (`dlock_watch`).
pub async fn wait_for_watchers(observer: &crate::Session, key: &str, count: i64) {
    let what = format!("{count} sessions watch key {key:?}");
    eventually(Duration::from_secs(5), &what, || async move {
        observer.watchers(key).await.expect("read pg_locks") == count
    })
    .await;
}

/// Tolerance for comparing server timestamps taken by different statements, in seconds.
pub const CLOCK_SLACK: f64 = 0.5;

/// Asserts that a server timestamp `value` (epoch seconds) lies in `[low, high]`, give or take
/// `CLOCK_SLACK`.
pub fn assert_between(value: f64, low: f64, high: f64, what: &str) {
    assert!(
        value >= low - CLOCK_SLACK && value <= high + CLOCK_SLACK,
        "{what}: {value} not within [{low}, {high}] (± {CLOCK_SLACK} s)"
    );
}
