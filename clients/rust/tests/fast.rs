//! Fast-mode leases through the client (`LockBuilder::fast`, a server that preloads dlock):
//! the guard takes, renews, checks and releases a `dlock_fast_*` lease; fast and durable keys
//! are separate key spaces; what the server would refuse is refused before sending; in the
//! transaction-pooler mode a fast wait retries instead of waiting on the server.

use std::time::{Duration, Instant};

use dlock_client::{Client, Error, PoolerMode};
use dlock_tests::{Cluster, key, within};

fn cluster() -> &'static Cluster {
    Cluster::shared_named("client-fast", &["shared_preload_libraries = 'dlock'", "dlock.fast_max_ttl = 2"])
}

fn url() -> String {
    format!("host=127.0.0.1 port={} user=postgres dbname=postgres", cluster().port())
}

fn client() -> Client {
    Client::connect_lazy(&url()).expect("client config")
}

/// A fast lock on `key`, once the server's lock-delay after its start is over.
async fn fast_guard(client: &Client, key: &str, ttl: Duration) -> dlock_client::Guard {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match client.lock(key).fast().ttl(ttl).try_acquire().await.unwrap() {
            Some(guard) => return guard,
            None => assert!(Instant::now() < deadline, "fast key {key:?} never granted"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_fast_guard_excludes_renews_and_releases() {
    let k = key("client_fast", "k");
    let (a, b) = (client(), client());
    // A 1 s lease, renewed by the watchdog every third of it.
    let guard = fast_guard(&a, &k, Duration::from_secs(1)).await;
    assert!(guard.fence() > 0);
    assert!(guard.holds().await.unwrap(), "dlock_fast_holds sees the fence");
    assert!(b.lock(&k).fast().ttl(Duration::from_secs(1)).try_acquire().await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(guard.is_held(), "the watchdog kept the lease past its ttl");
    assert!(b.lock(&k).fast().ttl(Duration::from_secs(1)).try_acquire().await.unwrap().is_none());

    // A durable lease on the same key is another lock.
    let durable = b.lock(&k).ttl(Duration::from_secs(5)).try_acquire().await.unwrap();
    assert!(durable.expect("durable keys are a key space of their own").release().await.unwrap());

    // A waiter on the server is granted once the guard lets go.
    let waiter = {
        let (b, k) = (b.clone(), k.clone());
        tokio::spawn(async move {
            b.lock(&k).fast().ttl(Duration::from_secs(1)).wait(Duration::from_secs(5)).acquire().await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fence = guard.fence();
    assert!(guard.release().await.unwrap());
    let next = within(Duration::from_secs(5), "fast waiter", waiter).await.unwrap().unwrap();
    assert!(next.fence() > fence, "fences grow");
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn what_fast_mode_cannot_take_is_refused_before_sending() {
    let client = client();
    let session_bound = client.lock(key("client_fast", "bound")).fast().session_bound().try_acquire().await;
    assert!(matches!(session_bound, Err(Error::InvalidArgument(_))), "{session_bound:?}");
    let long = client.lock("k".repeat(257)).fast().try_acquire().await;
    assert!(matches!(long, Err(Error::InvalidArgument(_))), "{long:?}");
    // 257 bytes is a fine durable key.
    let durable = client.lock("k".repeat(257)).try_acquire().await.unwrap().expect("durable key");
    assert!(durable.release().await.unwrap());
}

#[tokio::test]
async fn in_transaction_pooler_mode_a_fast_wait_retries_instead_of_waiting_on_the_server() {
    let k = key("client_fast", "retried");
    let app = "client_fast_retried";
    let waiter = Client::builder(&format!("{} application_name={app}", url()))
        .pooler(PoolerMode::Transaction)
        .max_poll_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    let guard = fast_guard(&client(), &k, Duration::from_secs(2)).await;
    let attempt = {
        let (waiter, k) = (waiter.clone(), k.clone());
        tokio::spawn(async move {
            waiter.lock(&k).fast().ttl(Duration::from_secs(2)).wait(Duration::from_secs(10)).acquire().await
        })
    };
    // While it waits, none of its backends sleeps in the server.
    let observer = cluster().connect().await;
    for _ in 0..20 {
        let sleeping: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity \
                  WHERE application_name = $1 AND state = 'active' AND wait_event_type = 'Extension'",
                &[&app],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(sleeping, 0, "a fast wait sat in the server");
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert!(!attempt.is_finished(), "the key is held");
    let fence = guard.fence();
    assert!(guard.release().await.unwrap());
    let next = within(Duration::from_secs(5), "the retrying fast waiter", attempt).await.unwrap().unwrap();
    assert!(next.fence() > fence);
    assert!(next.release().await.unwrap());
}
