//! Fast-mode leases through the client (`LockBuilder::fast`, a server that preloads dlock):
//! the guard takes, renews, checks and releases a `dlock_fast_*` lease; fast and durable keys
//! are separate key spaces; what the server would refuse is refused before sending.

use std::time::{Duration, Instant};

use dlock_client::{Client, Error};
use dlock_tests::{Cluster, key, within};

fn client() -> Client {
    let cluster = Cluster::shared_named(
        "client-fast",
        &["shared_preload_libraries = 'dlock'", "dlock.fast_max_ttl = 2"],
    );
    Client::connect_lazy(&format!("host=127.0.0.1 port={} user=postgres dbname=postgres", cluster.port()))
        .expect("client config")
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
