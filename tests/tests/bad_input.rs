//! Bad input is refused with the contract's SQLSTATE, and nothing changes.

use dlock_tests::{Cluster, Session, SqlState, expect_sqlstate, key, owner};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

const KEY_MAX_BYTES: usize = 1024;
const OWNER_MAX_BYTES: usize = 256;

async fn call(s: &Session, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, dlock_tests::Error> {
    s.query_one(sql, params).await
}

#[tokio::test]
async fn null_key_or_owner_is_refused_with_22004() {
    const T: &str = "null_key_or_owner_is_refused_with_22004";
    let s = Cluster::shared().connect().await;
    let null: Option<&str> = None;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let calls: [(&str, Vec<&(dyn ToSql + Sync)>); 10] = [
        ("SELECT dlock_acquire($1::text, $2::text, '10s')", vec![&null, &o]),
        ("SELECT dlock_acquire($1::text, $2::text, '10s')", vec![&k, &null]),
        ("SELECT dlock_acquire($1::text, $2::text, '10s', '1s')", vec![&null, &o]),
        ("SELECT dlock_renew($1::text, $2::text, '10s')", vec![&null, &o]),
        ("SELECT dlock_renew($1::text, $2::text, '10s')", vec![&k, &null]),
        ("SELECT dlock_release($1::text, $2::text)", vec![&null, &o]),
        ("SELECT dlock_release($1::text, $2::text)", vec![&k, &null]),
        ("SELECT dlock_release_all($1::text)", vec![&null]),
        ("SELECT dlock_holds($1::text, 1)", vec![&null]),
        ("SELECT dlock_force_release($1::text)", vec![&null]),
    ];
    for (sql, params) in &calls {
        expect_sqlstate(
            call(&s, sql, params).await,
            &SqlState::NULL_VALUE_NOT_ALLOWED,
            &format!("{sql} with {params:?}"),
        );
    }
    assert_eq!(s.lease(&k).await.unwrap(), None, "nothing was granted");
}

#[tokio::test]
async fn empty_or_oversized_key_or_owner_is_refused_by_acquire_with_22023() {
    const T: &str = "empty_or_oversized_key_or_owner_is_refused_by_acquire_with_22023";
    let s = Cluster::shared().connect().await;
    let o = owner(T, "o");
    let k = key(T, "k");
    let long_key = "k".repeat(KEY_MAX_BYTES + 1);
    // 513 two-byte characters: under the limit in characters, over it in bytes.
    let wide_key = "é".repeat(KEY_MAX_BYTES / 2 + 1);
    let long_owner = "o".repeat(OWNER_MAX_BYTES + 1);
    let wide_owner = "é".repeat(OWNER_MAX_BYTES / 2 + 1);
    for (bad_key, bad_owner, what) in [
        ("", o.as_str(), "empty key"),
        (long_key.as_str(), o.as_str(), "key of 1025 bytes"),
        (wide_key.as_str(), o.as_str(), "key of 1026 bytes in 513 characters"),
        (k.as_str(), "", "empty owner"),
        (k.as_str(), long_owner.as_str(), "owner of 257 bytes"),
        (k.as_str(), wide_owner.as_str(), "owner of 258 bytes in 129 characters"),
    ] {
        expect_sqlstate(
            s.try_acquire(bad_key, bad_owner, "10s").await,
            &SqlState::INVALID_PARAMETER_VALUE,
            &format!("acquire with {what}"),
        );
        if !bad_key.is_empty() {
            assert_eq!(s.lease(bad_key).await.unwrap(), None, "{what}: nothing granted");
        }
    }

    // The limits themselves are allowed.
    let max_key = format!("{T}/{}", "k".repeat(KEY_MAX_BYTES - T.len() - 1));
    assert_eq!(max_key.len(), KEY_MAX_BYTES);
    let max_owner = "o".repeat(OWNER_MAX_BYTES);
    let fence = s.try_acquire(&max_key, &max_owner, "10s").await.unwrap();
    assert!(fence.is_some(), "key of 1024 bytes and owner of 256 bytes are allowed");
    assert!(s.release(&max_key, &max_owner).await.unwrap());
}

#[tokio::test]
async fn empty_or_oversized_key_or_owner_is_refused_by_renew_and_release_with_22023() {
    const T: &str = "empty_or_oversized_key_or_owner_is_refused_by_renew_and_release_with_22023";
    let s = Cluster::shared().connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let long_key = "k".repeat(KEY_MAX_BYTES + 1);
    let long_owner = "o".repeat(OWNER_MAX_BYTES + 1);
    for (bad_key, bad_owner, what) in [
        ("", o.as_str(), "empty key"),
        (long_key.as_str(), o.as_str(), "key of 1025 bytes"),
        (k.as_str(), "", "empty owner"),
        (k.as_str(), long_owner.as_str(), "owner of 257 bytes"),
    ] {
        expect_sqlstate(
            s.renew(bad_key, bad_owner, Some("10s")).await,
            &SqlState::INVALID_PARAMETER_VALUE,
            &format!("renew with {what}"),
        );
        expect_sqlstate(
            s.release(bad_key, bad_owner).await,
            &SqlState::INVALID_PARAMETER_VALUE,
            &format!("release with {what}"),
        );
    }
    for (bad_owner, what) in [("", "empty owner"), (long_owner.as_str(), "owner of 257 bytes")] {
        expect_sqlstate(
            s.release_all(bad_owner).await,
            &SqlState::INVALID_PARAMETER_VALUE,
            &format!("release_all with {what}"),
        );
    }
}

#[tokio::test]
async fn bad_ttl_or_wait_is_refused_with_22023() {
    const T: &str = "bad_ttl_or_wait_is_refused_with_22023";
    let s = Cluster::shared().connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    for ttl in ["0", "-1 second", "1 day 1 second", "1 mon"] {
        expect_sqlstate(
            s.try_acquire(&k, &o, ttl).await,
            &SqlState::INVALID_PARAMETER_VALUE,
            &format!("acquire with ttl {ttl:?}"),
        );
    }
    assert!(s.try_acquire(&k, &o, "1 day").await.unwrap().is_some(), "ttl = max_ttl is allowed");
    assert!(s.release(&k, &o).await.unwrap());

    for wait in ["-1 second", "-00:00:00.001"] {
        expect_sqlstate(
            s.acquire(&k, &o, Some("10s"), Some(wait)).await,
            &SqlState::INVALID_PARAMETER_VALUE,
            &format!("acquire with wait {wait:?}"),
        );
    }
    assert_eq!(s.lease(&k).await.unwrap(), None, "nothing was granted");
}

#[tokio::test]
async fn bad_calls_on_a_held_key_change_nothing() {
    const T: &str = "bad_calls_on_a_held_key_change_nothing";
    let s = Cluster::shared().connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = s.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let before = s.lease(&k).await.unwrap().unwrap();

    expect_sqlstate(
        s.try_acquire(&k, &o, "0").await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "reentrant acquire, ttl 0",
    );
    expect_sqlstate(
        s.try_acquire(&k, &o, "2 days").await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "reentrant acquire, ttl over max_ttl",
    );
    expect_sqlstate(
        s.acquire(&k, &o, Some("10s"), Some("-1s")).await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "reentrant acquire, negative wait",
    );
    expect_sqlstate(s.renew(&k, &o, None).await, &SqlState::NULL_VALUE_NOT_ALLOWED, "renew with ttl NULL");
    expect_sqlstate(s.renew(&k, &o, Some("0")).await, &SqlState::INVALID_PARAMETER_VALUE, "renew with ttl 0");
    expect_sqlstate(
        s.renew(&k, &o, Some("-5s")).await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "renew with ttl < 0",
    );
    expect_sqlstate(
        s.renew(&k, &o, Some("1 day 1 second")).await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "renew with ttl over max_ttl",
    );

    assert_eq!(s.lease(&k).await.unwrap(), Some(before), "the lease is unchanged");
    assert!(s.holds(&k, fence).await.unwrap());
    assert!(s.release(&k, &o).await.unwrap());
    assert_eq!(s.lease(&k).await.unwrap(), None, "one release frees it: no hold was added");
}
