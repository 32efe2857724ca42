//! The client over TLS, with libpq's `sslmode` meanings, against a cluster serving a
//! certificate signed by a throwaway CA (for `db.dlock.test` and 127.0.0.1, not `localhost`).

use std::time::Duration;

use dlock_client::{Client, Error};
use dlock_tests::{Cluster, eventually, key, wait_for_watchers, within};
use tokio::sync::OnceCell;

use dlock_tests::TlsCluster;

const SECOND: Duration = Duration::from_secs(1);

/// The TLS cluster of this test binary, started by the first test that needs it.
async fn served() -> Option<&'static TlsCluster> {
    static CLUSTER: OnceCell<Option<TlsCluster>> = OnceCell::const_new();
    CLUSTER.get_or_init(|| TlsCluster::start("tls")).await.as_ref()
}

/// Whether the pooled connections of `client` are encrypted (`pg_stat_ssl` of its backend).
async fn encrypted(client: &Client) -> bool {
    let connection = client.pool().get().await.expect("a pooled connection");
    let row = connection
        .query_one("SELECT ssl FROM pg_catalog.pg_stat_ssl WHERE pid = pg_catalog.pg_backend_pid()", &[])
        .await
        .expect("pg_stat_ssl");
    row.get(0)
}

/// Takes and gives back a lock: the client works end to end.
async fn lock_round_trip(client: &Client, test: &str) {
    let guard = client.lock(key(test, "k")).acquire().await.expect("acquire over TLS");
    assert!(guard.holds().await.unwrap());
    assert!(guard.release().await.unwrap());
}

fn expect_certificate_error(outcome: Result<Client, Error>, what: &str) -> String {
    match outcome {
        Err(e @ Error::Tls { .. }) => {
            let message = e.to_string();
            assert!(message.contains("certificate could not be verified"), "{what}: {message}");
            message
        }
        other => panic!("{what}: expected Err(Tls), got {other:?}"),
    }
}

#[tokio::test]
async fn verify_full_with_the_ca_connects_encrypted_pool_and_listener_alike() {
    let Some(tls) = served().await else { return };
    let app = "tls_verify_full";
    let url = tls.url(
        "127.0.0.1",
        &format!("sslmode=verify-full sslrootcert={} application_name={app}", tls.ca.display()),
    );
    let client = Client::connect(&url).await.expect("verify-full with the right CA");
    assert!(encrypted(&client).await);
    lock_round_trip(&client, app).await;

    // A wait opens the listener: it is encrypted too.
    let k = key(app, "waited");
    let holder = client.with_owner("tls-holder").lock(&k).acquire().await.unwrap();
    let waiter = client.clone();
    let kw = k.clone();
    let wait = tokio::spawn(async move { waiter.lock(&kw).wait(SECOND * 10).acquire().await });
    let observer = tls.cluster.connect().await;
    wait_for_watchers(&observer, &k, 1).await;
    let (all_encrypted, backends): (bool, i64) = {
        let row = observer
            .query_one(
                "SELECT pg_catalog.bool_and(s.ssl), count(*) FROM pg_catalog.pg_stat_activity a \
                   JOIN pg_catalog.pg_stat_ssl s USING (pid) WHERE a.application_name = $1",
                &[&app],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert!(
        backends >= 2 && all_encrypted,
        "{backends} backends of the client, all encrypted: {all_encrypted}"
    );
    assert!(holder.release().await.unwrap());
    let granted = within(SECOND * 5, "the waiter is notified", wait).await.unwrap().unwrap();
    assert!(granted.release().await.unwrap());
}

#[tokio::test]
async fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let Some(tls) = served().await else { return };
    let root = format!("sslrootcert={}", tls.ca.display());
    // `localhost` is not a name of the certificate.
    let full = Client::connect(&tls.url("localhost", &format!("sslmode=verify-full {root}"))).await;
    let message = expect_certificate_error(full, "verify-full for another name");
    assert!(message.to_lowercase().contains("name"), "says why: {message}");
    let by_name = Client::connect(&tls.url("db.dlock.test", &format!("sslmode=verify-full {root}"))).await;
    lock_round_trip(&by_name.expect("verify-full for a name of the certificate"), "tls_by_name").await;
    let ca_only = Client::connect(&tls.url("localhost", &format!("sslmode=verify-ca {root}"))).await;
    let ca_only = ca_only.expect("verify-ca checks the chain only");
    assert!(encrypted(&ca_only).await);
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_a_tls_error_that_says_so() {
    let Some(tls) = served().await else { return };
    let other = format!("sslrootcert={}", tls.other_ca.display());
    for mode in ["verify-full", "verify-ca", "require", "prefer"] {
        // With a root certificate given, require and prefer verify the chain too (libpq).
        let outcome = Client::connect(&tls.url("127.0.0.1", &format!("sslmode={mode} {other}"))).await;
        let message = expect_certificate_error(outcome, mode);
        assert!(message.contains("UnknownIssuer") || message.to_lowercase().contains("issuer"), "{message}");
    }
    // A lazy client finds out at its first call, with the same error.
    let lazy = Client::connect_lazy(&tls.url("127.0.0.1", &format!("sslmode=verify-full {other}"))).unwrap();
    let outcome = lazy.lock(key("tls_other_ca", "k")).try_acquire().await;
    assert!(matches!(&outcome, Err(Error::Tls { .. })), "{outcome:?}");
}

#[tokio::test]
async fn require_encrypts_without_a_ca_and_prefer_too_when_offered() {
    let Some(tls) = served().await else { return };
    for (mode, expected) in
        [("sslmode=require", true), ("", true), ("sslmode=prefer", true), ("sslmode=disable", false)]
    {
        let client =
            Client::connect(&tls.url("127.0.0.1", mode)).await.unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(encrypted(&client).await, expected, "{mode:?}");
        lock_round_trip(&client, "tls_require").await;
    }
}

#[tokio::test]
async fn require_against_a_server_without_tls_is_a_tls_error() {
    let port = Cluster::shared().port();
    let outcome = Client::connect(&format!("host=127.0.0.1 port={port} user=postgres sslmode=require")).await;
    match outcome {
        Err(e @ Error::Tls { .. }) => assert!(e.to_string().contains("does not support TLS"), "{e}"),
        other => panic!("expected Err(Tls), got {other:?}"),
    }
    // prefer falls back to plain text there.
    let plain =
        Client::connect(&format!("host=127.0.0.1 port={port} user=postgres sslmode=prefer")).await.unwrap();
    assert!(!encrypted(&plain).await);
}

#[tokio::test]
async fn a_hostssl_only_server_refuses_sslmode_disable() {
    let Some(tls) = TlsCluster::start("tls-hostssl-only").await else { return };
    tls.cluster.replace_hba("local all all trust\nhostssl all all 127.0.0.1/32 trust\n").await;
    let disabled = tls.url("127.0.0.1", "sslmode=disable");
    eventually(SECOND * 10, "the server refuses connections without TLS", || async {
        match Client::connect(&disabled).await {
            Err(Error::Connection { message, .. }) => {
                assert!(message.contains("no encryption"), "{message}");
                true
            }
            Ok(_) => false,
            Err(other) => panic!("expected Err(Connection), got {other:?}"),
        }
    })
    .await;
    let verified = tls.url("127.0.0.1", &format!("sslmode=verify-full sslrootcert={}", tls.ca.display()));
    lock_round_trip(&Client::connect(&verified).await.expect("verify-full"), "tls_hostssl").await;
    lock_round_trip(&Client::connect(&tls.url("127.0.0.1", "")).await.expect("prefer"), "tls_hostssl").await;
}
