//! A sharded client over three real databases (s1, s2, s3 of one throwaway cluster of this
//! test binary, each with dlock in schema `dlock`): keys land on the server `locate` names,
//! fences grow, a lease taken through one sharded client blocks another, a hash-tag family is
//! locked at once on its server, and an election lives on the server of its name. The servers
//! have the map (epoch 1): a client that routes with another is refused, not served wrongly.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use dlock_client::{Error, ShardedClient, ShardsConfig};
use dlock_tests::{Cluster, within};

const SERVERS: [&str; 3] = ["s1", "s2", "s3"];

/// The cluster of this binary (stopped when it exits) and the map of its three databases.
fn config() -> &'static ShardsConfig {
    static CONFIG: OnceLock<ShardsConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let cluster = Cluster::shared_named("shards", &[]);
        // From a thread of its own: this runs inside the runtime of whichever test came first.
        let port = cluster.port();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
                let admin = cluster.connect().await;
                for db in SERVERS {
                    admin.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
                    let session = cluster.connect_db("postgres", db).await;
                    session
                        .batch_execute(&format!(
                            "CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock; \
                             SELECT dlock.dlock_shard_install('{db}', 1, ARRAY['s1', 's2', 's3'])"
                        ))
                        .await
                        .unwrap();
                }
            })
        })
        .join()
        .expect("creating the databases");
        let urls =
            SERVERS.map(|db| (db, format!("postgresql://postgres@127.0.0.1:{port}/{db}?sslmode=disable")));
        ShardsConfig::new(1, urls).unwrap()
    })
}

/// The keys of `server`'s `dlock_locks` that start with `prefix`.
async fn keys_held_on(server: &str, prefix: &str) -> BTreeSet<String> {
    let session = Cluster::shared_named("shards", &[]).connect_db("postgres", server).await;
    let rows = session
        .query("SELECT key FROM dlock.dlock_locks WHERE starts_with(key, $1)", &[&prefix])
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

/// A key of `server` that starts with `prefix`.
fn key_of(client: &ShardedClient, server: &str, prefix: &str) -> String {
    (0..).map(|i| format!("{prefix}{i}")).find(|k| client.locate(k) == server).unwrap()
}

#[tokio::test]
async fn keys_land_on_the_server_locate_names_and_fences_grow() {
    let client = ShardedClient::connect(config()).await.unwrap();
    let keys: Vec<String> = (0..30).map(|i| format!("land:{i}")).collect();
    let mut guards = Vec::new();
    for key in &keys {
        guards.push(client.lock(key.as_str()).ttl(Duration::from_secs(30)).acquire().await.unwrap());
    }
    for server in SERVERS {
        let expected: BTreeSet<String> =
            keys.iter().filter(|k| client.locate(k) == server).cloned().collect();
        assert!(!expected.is_empty(), "30 keys spread over every server");
        assert_eq!(keys_held_on(server, "land:").await, expected, "the keys on {server}");
    }
    for guard in guards {
        let (key, fence) = (guard.key().to_owned(), guard.fence());
        assert!(guard.release().await.unwrap());
        let again = client.lock(key.as_str()).acquire().await.unwrap();
        assert!(again.fence() > fence, "{key}: fence {} after {fence}", again.fence());
        assert!(again.release().await.unwrap());
    }
    for server in SERVERS {
        assert!(keys_held_on(server, "land:").await.is_empty());
    }
}

#[tokio::test]
async fn a_lease_held_through_one_sharded_client_blocks_another() {
    let one = ShardedClient::connect(config()).await.unwrap();
    let other = ShardedClient::connect(config()).await.unwrap();
    assert_ne!(one.owner(), other.owner());
    for server in SERVERS {
        let key = key_of(&one, server, "block:");
        let held = one.lock(key.as_str()).acquire().await.unwrap();
        assert!(other.lock(key.as_str()).try_acquire().await.unwrap().is_none(), "{key} on {server}");
        assert!(!other.wait_free(&key, Duration::ZERO).await.unwrap());
        let waiter = tokio::spawn({
            let (other, key) = (other.clone(), key.clone());
            async move { other.lock(key).wait(Duration::from_secs(10)).acquire().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let fence = held.fence();
        assert!(held.release().await.unwrap());
        let taken =
            within(Duration::from_secs(10), "the waiter takes the key", waiter).await.unwrap().unwrap();
        assert!(taken.fence() > fence);
        assert_eq!(keys_held_on(server, &key).await, BTreeSet::from([key.clone()]));
        assert!(taken.release().await.unwrap());
    }
}

#[tokio::test]
async fn a_hash_tag_family_is_locked_at_once_on_its_server_and_a_mixed_list_is_refused() {
    let client = ShardedClient::connect(config()).await.unwrap();
    let family = ["{family-1}:a", "{family-1}:b", "{family-1}:c"];
    let server = client.locate(family[0]).to_owned();
    let all = client.lock_all(family).unwrap().acquire().await.unwrap();
    assert_eq!(keys_held_on(&server, "{family-1}").await, family.iter().map(|k| k.to_string()).collect());
    assert!(all.release().await.unwrap());

    let (a, b) = (key_of(&client, "s1", "mixed:"), key_of(&client, "s2", "mixed:"));
    let refused = client.lock_all([a.as_str(), b.as_str()]).unwrap_err().to_string();
    assert!(refused.contains(&a) && refused.contains(&b), "{refused}");
}

#[tokio::test]
async fn an_election_lives_on_the_server_of_its_name() {
    let client = ShardedClient::connect(config()).await.unwrap();
    let name = key_of(&client, "s3", "election:");
    let lead = client.election(name.as_str()).campaign("node-1").await.unwrap();
    assert_eq!(keys_held_on("s3", &name).await, BTreeSet::from([name.clone()]));
    let leader = client.election(name.as_str()).leader().await.unwrap().expect("someone leads");
    assert_eq!((leader.info.as_deref(), leader.term), (Some("node-1"), lead.term()));
    assert!(lead.resign().await.unwrap());
}

#[tokio::test]
async fn a_client_routing_with_another_map_is_refused_by_the_servers() {
    let good = config();
    let urls: Vec<(String, String)> = good.servers().map(|(n, u)| (n.to_owned(), u.to_owned())).collect();
    // A map of the same epoch without s3: its keys go to s1 or s2, which refuse them.
    let stale = ShardsConfig::new(1, urls.iter().take(2).cloned()).unwrap();
    let client = ShardedClient::connect(&stale).await.unwrap();
    let right = ShardedClient::connect(good).await.unwrap();
    let key = key_of(&right, "s3", "stale:");
    match client.lock(key.as_str()).try_acquire().await {
        Err(Error::WrongServer(e)) => {
            assert_eq!(e.code().code(), "0F001");
            assert!(e.message().contains("\"s3\""), "{}", e.message());
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(keys_held_on("s1", &key).await.is_empty() && keys_held_on("s2", &key).await.is_empty());
    // A map newer than the servers' (the operator's apply has not reached them).
    let ahead = ShardedClient::connect(&ShardsConfig::new(2, urls.clone()).unwrap()).await.unwrap();
    assert!(matches!(ahead.lock(key.as_str()).try_acquire().await, Err(Error::MapBehind(_))));
    // The right map is served.
    let held = right.lock(key.as_str()).try_acquire().await.unwrap().expect("granted on s3");
    assert_eq!(held.fence() >> 43, 1, "a fence of epoch 1");
    assert!(held.release().await.unwrap());
}

#[tokio::test]
async fn an_observer_follows_an_election_across_a_move() {
    use dlock_client::{Applied, ApplyOptions, apply_shard_map};
    let cluster = Cluster::shared_named("shards", &[]);
    let _ = config(); // the cluster is up
    let admin = cluster.connect().await;
    for db in ["o1", "o2"] {
        admin.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
        let session = cluster.connect_db("postgres", db).await;
        session.batch_execute("CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock").await.unwrap();
    }
    let url = |db: &str| format!("postgresql://postgres@127.0.0.1:{}/{db}?sslmode=disable", cluster.port());
    let dir = std::env::temp_dir().join(format!("dlock-observe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("map.toml");
    let write = |epoch: i64, dbs: &[&str]| {
        let mut text = format!("epoch = {epoch}\n[servers]\n");
        for db in dbs {
            text += &format!("{db} = \"{}\"\n", url(db));
        }
        std::fs::write(&file, text).unwrap();
        ShardsConfig::from_file(&file).unwrap()
    };
    let one = write(1, &["o1", "o2"]);
    assert!(matches!(
        apply_shard_map(&one, None, &ApplyOptions::default(), |_| {}).await,
        Ok(Applied::Complete { .. })
    ));
    let client = ShardedClient::connect(&one).await.unwrap();
    let name = key_of(&client, "o1", "moving-election:");
    let lead = client.election(name.as_str()).ttl(Duration::from_secs(1)).campaign("first").await.unwrap();
    let mut changes = client.observe_election(name.as_str(), Duration::from_millis(200)).await.unwrap();
    let first = within(Duration::from_secs(5), "the first leader", changes.next()).await.unwrap().unwrap();
    assert_eq!(first.as_ref().map(|l| (l.info.as_deref(), l.term >> 43)), Some((Some("first"), 1)));

    // o1 leaves the map: its leader cannot renew there any more, and the name moves to o2.
    let two = write(2, &["o2"]);
    let applied = within(
        Duration::from_secs(20),
        "the move",
        apply_shard_map(&two, Some(&one), &ApplyOptions::default(), |_| {}),
    )
    .await
    .unwrap();
    assert_eq!(applied, Applied::Complete { epoch: 2 });
    drop(lead);
    let fresh = client.refreshed().unwrap().expect("the file's newer map");
    let second = fresh.election(name.as_str()).campaign("second").await.unwrap();
    // The observer reports the new leader, from o2, with a greater term.
    let found = within(Duration::from_secs(10), "the leader on o2", async {
        loop {
            match changes.next().await {
                Some(Ok(Some(leader))) if leader.info.as_deref() == Some("second") => return leader,
                Some(Ok(_)) => continue,
                other => panic!("the observation ended: {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(found.term, second.term());
    assert!(found.term > first.unwrap().term && found.term >> 43 == 2);
    assert!(second.resign().await.unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}
