//! The client's errors against a throwaway cluster: each of dlock's conditions becomes its
//! variant, told apart by more than the SQLSTATE (a 0A000, 55006 or 22023 of PostgreSQL's own
//! is a `Database` error); every server error keeps the driver's error as its source and its
//! SQLSTATE as `code()`; and bad arguments are refused before any round trip.

use std::error::Error as _;
use std::time::Duration;

use dlock_client::deadpool_postgres::tokio_postgres;
use dlock_client::{Client, Error, SqlState};
use dlock_tests::{Cluster, key};

mod common;
use common::{admin, free_for_others};

fn client_as(role: &str) -> Client {
    let port = Cluster::shared().port();
    Client::connect_lazy(&format!("host=127.0.0.1 port={port} user={role} dbname=postgres"))
        .expect("client config")
}

fn client() -> Client {
    client_as("postgres")
}

/// What `sql` fails with on one of the client's pooled connections, as the client maps it.
async fn refusal_of(client: &Client, sql: &str) -> Error {
    let connection = client.pool().get().await.expect("a pooled connection");
    let e = connection.batch_execute(sql).await.expect_err(sql);
    // Leave nothing open on the connection for the pool's next user.
    connection.batch_execute("ROLLBACK").await.expect("rollback");
    Error::from(e)
}

/// The driver's error under `e`, and the server's routine and SQLSTATE from it.
fn reported(e: &Error) -> (String, String) {
    let driver = e
        .source()
        .and_then(|s| s.downcast_ref::<tokio_postgres::Error>())
        .unwrap_or_else(|| panic!("the driver's error is the source of {e:?}"));
    let db = driver.as_db_error().expect("a server report");
    assert_eq!(e.as_db_error().map(|d| d.message()), Some(db.message()));
    (db.routine().unwrap_or_default().to_owned(), db.code().code().to_owned())
}

#[tokio::test]
async fn a_mode_conflict_is_dlocks_0a000_with_the_driver_error_as_its_source() {
    let k = key("errors_mode", "k");
    let client = client();
    let exclusive = client.lock(&k).acquire().await.unwrap();
    let err = client.lock(&k).shared().acquire().await.unwrap_err();
    let Error::ModeConflict(server) = &err else { panic!("{err:?}") };
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    assert!(server.message().contains("cannot take a shared lease"), "{server}");
    assert!(server.hint().is_some_and(|h| h.contains("never upgraded or downgraded")), "{server}");
    assert_eq!(reported(&err), ("dlock_acquire_shared".into(), "0A000".into()));
    assert!(err.to_string().contains("(SQLSTATE 0A000)"), "{err}");
    assert!(exclusive.release().await.unwrap());
}

#[tokio::test]
async fn a_0a000_that_is_not_a_mode_conflict_stays_a_database_error() {
    let client = client();
    // PostgreSQL's own feature-not-supported errors.
    for sql in [
        "SELECT count(*) FROM pg_class FOR UPDATE",
        "BEGIN; CREATE TEMP TABLE errors_temp (); PREPARE TRANSACTION 'errors_temp'",
    ] {
        let err = refusal_of(&client, sql).await;
        assert!(matches!(err, Error::Database(_)), "{sql}: {err:?}");
        assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{sql}");
        assert_eq!(reported(&err).1, "0A000");
    }
    // dlock's own 0A000 that is no mode conflict: a session-bound lease cannot be PREPAREd.
    let k = key("errors_prepare", "k");
    let sql = format!(
        "BEGIN; SELECT dlock_acquire('{k}', 'errors-owner', NULL); PREPARE TRANSACTION 'errors_prepare'"
    );
    let err = refusal_of(&client, &sql).await;
    assert!(matches!(err, Error::Database(_)), "{err:?}");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    assert!(err.to_string().contains("dlock: cannot PREPARE"), "{err}");
}

#[tokio::test]
async fn argument_errors_are_dlocks_22023_and_postgresqls_own_are_database_errors() {
    let client = client();
    // Only the server knows dlock.max_ttl (1 day).
    let k = key("errors_ttl", "k");
    let err = client.lock(&k).ttl(Duration::from_secs(25 * 3600)).acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(err.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));
    assert_eq!(reported(&err), ("dlock_acquire".into(), "22023".into()));
    assert!(free_for_others(&k).await, "a refused call takes nothing");

    let err = refusal_of(&client, "SET work_mem = -5").await;
    assert!(matches!(err, Error::Database(_)), "{err:?}");
    assert_eq!(err.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));
}

#[tokio::test]
async fn held_here_is_dlocks_55006_and_postgresqls_own_is_a_database_error() {
    let k = key("errors_held_here", "k");
    // One pooled connection: the lease and the wait for the key are on one server session.
    let port = Cluster::shared().port();
    let client = Client::builder(&format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"))
        .pool_size(1)
        .build()
        .unwrap();
    let guard = client.lock(&k).acquire().await.unwrap();
    let err = client.wait_free(&k, Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(err, Error::HeldHere(_)), "{err:?}");
    assert_eq!(err.code(), Some(&SqlState::OBJECT_IN_USE));
    assert_eq!(reported(&err).0, "dlock_wait_free");
    assert!(guard.release().await.unwrap());

    // DROP DATABASE of a database someone is connected to: PostgreSQL's 55006.
    let admin = admin().await;
    admin.batch_execute("CREATE DATABASE errors_busy").await.unwrap();
    let _inside = Cluster::shared().connect_db("postgres", "errors_busy").await;
    let err = refusal_of(&self::client(), "DROP DATABASE errors_busy").await;
    assert!(matches!(err, Error::Database(_)), "{err:?}");
    assert_eq!(err.code(), Some(&SqlState::OBJECT_IN_USE));
}

#[tokio::test]
async fn permission_denied_keeps_its_sqlstate_and_a_refused_login_is_a_connection_error() {
    let admin = admin().await;
    admin
        .batch_execute(
            "DROP ROLE IF EXISTS errors_plain; CREATE ROLE errors_plain LOGIN; \
             DROP ROLE IF EXISTS errors_nologin; CREATE ROLE errors_nologin NOLOGIN",
        )
        .await
        .unwrap();
    let err = client_as("errors_plain").force_release(&key("errors_denied", "k")).await.unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    reported(&err);

    let err = client_as("errors_nologin").lock(key("errors_nologin", "k")).acquire().await.unwrap_err();
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    assert_eq!(err.code(), Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION));
    assert!(err.server_error().is_none() && err.as_db_error().is_some());
}

/// A client whose server is nowhere: any round trip would fail with `Error::Connection`.
fn offline() -> Client {
    Client::connect_lazy("host=127.0.0.1 port=1 user=postgres connect_timeout=2").unwrap()
}

/// `outcome` is the client's refusal of an argument, before anything was sent.
fn refused_before_sending<T: std::fmt::Debug>(outcome: Result<T, Error>, what: &str, code: &SqlState) {
    match outcome {
        Err(Error::InvalidArgument(e)) => {
            assert_eq!(e.code(), code, "{what}: {e}");
            assert!(e.as_db_error().is_none(), "{what}: nothing was sent");
            assert!(e.message().starts_with("dlock: "), "{what}: {e}");
        }
        other => panic!("{what}: not refused before sending: {other:?}"),
    }
}

#[tokio::test]
async fn every_call_refuses_bad_arguments_before_any_round_trip() {
    let invalid = &SqlState::INVALID_PARAMETER_VALUE;
    let client = offline();
    let long_key = "é".repeat(513);
    refused_before_sending(client.lock("").acquire().await, "empty key", invalid);
    refused_before_sending(client.lock(&long_key).acquire().await, "1026-byte key", invalid);
    refused_before_sending(client.lock("k").ttl(Duration::ZERO).acquire().await, "zero ttl", invalid);
    refused_before_sending(client.semaphore("k", 0).acquire().await, "no permits", invalid);
    let null = &SqlState::NULL_VALUE_NOT_ALLOWED;
    refused_before_sending(client.lock("k").fast().session_bound().acquire().await, "fast, no ttl", null);
    refused_before_sending(client.with_owner("").lock("k").acquire().await, "empty owner", invalid);
    refused_before_sending(client.with_owner("o".repeat(257)).lock("k").acquire().await, "owner", invalid);

    let keys = |n: usize| (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>();
    refused_before_sending(client.lock_all(Vec::<String>::new()).acquire().await, "no keys", invalid);
    refused_before_sending(client.lock_all(["a", "a"]).acquire().await, "a key twice", invalid);
    refused_before_sending(client.lock_all(keys(65)).acquire().await, "65 keys", invalid);
    refused_before_sending(client.lock_all(["a", ""]).acquire().await, "an empty key of several", invalid);
    refused_before_sending(client.lock_all(["a"]).ttl(Duration::ZERO).acquire().await, "zero ttl", invalid);

    let election = client.election("e");
    refused_before_sending(election.campaign("i".repeat(1025)).await, "1025-byte info", invalid);
    refused_before_sending(client.election("").campaign("x").await, "empty election", invalid);
    refused_before_sending(client.election("").leader().await, "leader of no name", invalid);
    refused_before_sending(client.election("").observe().await, "observe no name", invalid);

    refused_before_sending(client.wait_free("", Duration::from_millis(100)).await, "wait_free", invalid);
    refused_before_sending(client.force_release("").await, "force_release", invalid);
    refused_before_sending(client.release_lease("").await, "release_lease", invalid);
    refused_before_sending(client.renew_lease("k", Duration::ZERO).await, "renew_lease", invalid);

    // Good arguments do go to the server, which is not there.
    let err = client.lock_all(["a", "b"]).acquire().await.unwrap_err();
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
}
