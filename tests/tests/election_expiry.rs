//! A leader whose lease expires with nobody campaigning is a change of leader too: the
//! election's watchers are notified (by a background worker of the database, started on demand),
//! once per term, not before the expiry (a renewal moves it), with or without preload.

use std::time::{Duration, Instant};

use dlock_tests::{Cluster, Session, eventually, key, owner};

fn clusters() -> [&'static Cluster; 2] {
    [Cluster::shared(), Cluster::shared_named("preloaded", &["shared_preload_libraries = 'dlock'"])]
}

async fn campaign(s: &Session, election: &str, candidate: &str, ttl: &str) -> Option<i64> {
    s.query_one(
        "SELECT dlock_campaign($1, $2, $3::text::interval, 'node', '0')",
        &[&election, &candidate, &ttl],
    )
    .await
    .unwrap()
    .get(0)
}

async fn leads(s: &Session, election: &str) -> bool {
    s.query_opt("SELECT term FROM dlock_leader($1)", &[&election]).await.unwrap().is_some()
}

#[tokio::test]
async fn an_expired_leader_is_announced_once_and_not_before_its_expiry() {
    const T: &str = "expired_leader";
    for cluster in clusters() {
        let s = cluster.connect().await;
        let mut listener = cluster.listen().await;
        let election = key(T, "e");
        let channel = listener.watch(&election).await.unwrap();

        let started = Instant::now();
        campaign(&s, &election, &owner(T, "a"), "600 milliseconds").await.expect("leads");
        assert_eq!(listener.next(Duration::from_secs(2)).await, Some(channel.clone()), "the new leader");
        // Renewed before it runs out: no announcement at the first expiry.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let renewed = s.renew(&election, &owner(T, "a"), Some("1 second")).await.unwrap();
        assert!(renewed.is_some());
        let got = listener.next(Duration::from_secs(5)).await;
        let after = started.elapsed();
        assert_eq!(got, Some(channel.clone()), "the expiry is announced");
        assert!(after >= Duration::from_millis(1250), "not before the renewed expiry: {after:?}");
        assert!(!leads(&s, &election).await, "nobody leads");
        assert_eq!(listener.next(Duration::from_millis(1500)).await, None, "once per term");

        // The next term's expiry is announced again.
        campaign(&s, &election, &owner(T, "b"), "300 milliseconds").await.expect("leads");
        assert_eq!(listener.next(Duration::from_secs(2)).await, Some(channel.clone()), "the new leader");
        assert_eq!(listener.next(Duration::from_secs(5)).await, Some(channel.clone()), "its expiry");
        // A resignation is announced by the release itself, and no expiry follows it.
        campaign(&s, &election, &owner(T, "c"), "300 milliseconds").await.expect("leads");
        assert_eq!(listener.next(Duration::from_secs(2)).await, Some(channel.clone()));
        assert!(s.release(&election, &owner(T, "c")).await.unwrap());
        assert_eq!(listener.next(Duration::from_secs(2)).await, Some(channel.clone()), "the resignation");
        assert_eq!(listener.next(Duration::from_millis(800)).await, None, "nothing expired");
    }
}

#[tokio::test]
async fn one_watch_worker_per_database() {
    const T: &str = "one_worker";
    let cluster = Cluster::shared_named("preloaded", &["shared_preload_libraries = 'dlock'"]);
    let s = cluster.connect().await;
    for i in 0..5 {
        campaign(&s, &key(T, &i.to_string()), &owner(T, "a"), "2 seconds").await.expect("leads");
    }
    // Grants that race may start a second worker; it finds the first holding the database's
    // watch lock and leaves at once.
    eventually(Duration::from_secs(10), "one worker for the database", || async {
        let workers: i64 = s
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                  WHERE backend_type = 'dlock election watch' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        workers == 1
    })
    .await;
    for i in 0..5 {
        assert!(s.release(&key(T, &i.to_string()), &owner(T, "a")).await.unwrap());
    }
}
