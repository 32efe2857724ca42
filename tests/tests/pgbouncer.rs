//! dlock behind pgbouncer in transaction pooling mode (issue 7, "Connection poolers").
//!
//! Many client connections share a few server connections, and each transaction may run on a
//! different one. What that means for dlock, as these tests show:
//! - **TTL leases work**: a lease belongs to its owner string, not to a session, so acquire,
//!   renew, release and `dlock_holds` may each land on any server connection; fences grow.
//! - **A server-side wait holds a server connection** for its whole length: N waiters fill a
//!   pool of N, and everything else through that pool — the holder's own release included —
//!   queues in pgbouncer until a wait ends.
//! - **Session-bound leases (`ttl NULL`) bind to the pooled server session**, not to the client:
//!   they outlive the client that took them, other clients whose transactions land on that
//!   server session count as "the same session", and they end only when released (by any
//!   client that knows the owner) or when pgbouncer closes that server connection.
//! - **Watches (`dlock_watch`, LISTEN) stay on the pooled server session** too: its
//!   notifications do not reach the client that asked for them, the watch outlives that client,
//!   and an unwatch that runs on another server connection removes nothing.
//!
//! Calls go through `query_typed` (one round trip with an unnamed statement): pgbouncer 1.18
//! does not carry named prepared statements across transactions in this mode.

use std::time::Duration;

use dlock_tests::{
    Cluster, NoTls, Pgbouncer, SqlState, eventually, expect_sqlstate, key, owner, sql_edition,
    wait_for_waiters, within,
};
use tokio_postgres::AsyncMessage;
use tokio_postgres::types::{FromSql, ToSql, Type};

/// Generous limit on anything that should happen promptly (never a measurement).
const PROMPTLY: Duration = Duration::from_secs(20);

/// A new client connection to database `postgres` through the pooler.
async fn pooled(bouncer: &Pgbouncer) -> Pooled {
    Pooled { client: bouncer.client("postgres").await }
}

/// A client connection whose notifications (NotificationResponse) are collected.
async fn connect_listening(bouncer: &Pgbouncer) -> (Pooled, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(bouncer.port()).user("postgres").dbname("postgres");
    let (client, mut connection) = config.connect(NoTls).await.expect("connect through pgbouncer");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.channel().to_string());
            }
        }
    });
    (Pooled { client }, rx)
}

/// A client connection through pgbouncer, with the dlock calls as typed one-round-trip
/// statements (unnamed, so any server connection can run each of them).
struct Pooled {
    client: tokio_postgres::Client,
}

impl Pooled {
    async fn one<T>(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<T, tokio_postgres::Error>
    where
        T: for<'a> FromSql<'a>,
    {
        self.client.query_typed_one(sql, params).await?.try_get(0)
    }

    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        ttl: Option<&str>,
        wait: Option<&str>,
    ) -> Result<Option<i64>, tokio_postgres::Error> {
        self.one(
            "SELECT dlock_acquire($1, $2, $3::interval, $4::interval)",
            &[(&key, Type::TEXT), (&owner, Type::TEXT), (&ttl, Type::TEXT), (&wait, Type::TEXT)],
        )
        .await
    }

    async fn try_acquire(
        &self,
        key: &str,
        owner: &str,
        ttl: &str,
    ) -> Result<Option<i64>, tokio_postgres::Error> {
        self.acquire(key, owner, Some(ttl), Some("0")).await
    }

    /// `dlock_renew`: the new `expires_at` as epoch seconds, `None` for NULL.
    async fn renew(&self, key: &str, owner: &str, ttl: &str) -> Result<Option<f64>, tokio_postgres::Error> {
        self.one(
            "SELECT extract(epoch FROM dlock_renew($1, $2, $3::interval))::float8",
            &[(&key, Type::TEXT), (&owner, Type::TEXT), (&ttl, Type::TEXT)],
        )
        .await
    }

    async fn release(&self, key: &str, owner: &str) -> Result<bool, tokio_postgres::Error> {
        self.one("SELECT dlock_release($1, $2)", &[(&key, Type::TEXT), (&owner, Type::TEXT)]).await
    }

    async fn holds(&self, key: &str, fence: i64) -> Result<bool, tokio_postgres::Error> {
        self.one("SELECT dlock_holds($1, $2)", &[(&key, Type::TEXT), (&fence, Type::INT8)]).await
    }

    async fn watch(&self, key: &str) -> Result<String, tokio_postgres::Error> {
        self.one("SELECT dlock_watch($1)", &[(&key, Type::TEXT)]).await
    }

    /// The pid of the server backend this statement happened to run on.
    async fn backend_pid(&self) -> i32 {
        self.one("SELECT pg_catalog.pg_backend_pid()", &[]).await.expect("pg_backend_pid()")
    }

    /// `SELECT 1`: a statement that needs a server connection and nothing else.
    async fn ping(&self) -> Result<i32, tokio_postgres::Error> {
        self.one("SELECT 1", &[]).await
    }
}

#[tokio::test]
async fn ttl_leases_work_from_many_clients_over_two_server_connections() {
    const T: &str = "pgbouncer_ttl";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 2).await;
    let observer = cluster.connect().await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(pooled(&bouncer).await);
    }
    // Eight client connections, at most two server backends behind them.
    let mut server_pids = std::collections::BTreeSet::new();
    for client in &clients {
        server_pids.insert(client.backend_pid().await);
    }
    assert!(server_pids.len() <= 2, "8 clients ran on {server_pids:?}: more than the pool's 2");

    // One owner takes the key; the other clients' owners are refused.
    let k = key(T, "k");
    let owners: Vec<String> = (0..8).map(|i| owner(T, &format!("o{i}"))).collect();
    let fence = clients[0].try_acquire(&k, &owners[0], "30s").await.unwrap().expect("a free key is granted");
    for (client, other) in clients.iter().zip(&owners).skip(1) {
        assert_eq!(client.try_acquire(&k, other, "30s").await.unwrap(), None, "{other} got a held key");
    }
    assert!(clients[5].holds(&k, fence).await.unwrap());
    assert!(!clients[2].release(&k, &owners[2]).await.unwrap(), "release by another owner");
    assert_eq!(clients[3].renew(&k, &owners[1], "60s").await.unwrap(), None, "renew by another owner");
    assert!(clients[7].release(&k, &owners[0]).await.unwrap());
    assert_eq!(observer.lease(&k).await.unwrap(), None);

    // The owner string, not the session, is what counts: a lease taken on one server
    // connection is renewed, reentered and released on the other one. (An open transaction
    // keeps its server connection, so two of them pin one each.)
    let (c0, c1) = (&clients[0], &clients[1]);
    c0.client.simple_query("BEGIN").await.unwrap();
    c1.client.simple_query("BEGIN").await.unwrap();
    let (pid0, pid1) = (c0.backend_pid().await, c1.backend_pid().await);
    assert_ne!(pid0, pid1, "two open transactions run on the two server connections");
    let fence = c0.try_acquire(&k, &owners[0], "30s").await.unwrap().expect("a free key is granted");
    c0.client.simple_query("COMMIT").await.unwrap();
    assert!(c1.renew(&k, &owners[0], "60s").await.unwrap().is_some(), "renewed on the other server");
    assert_eq!(c1.try_acquire(&k, &owners[0], "30s").await.unwrap(), Some(fence), "reentered");
    assert!(c1.release(&k, &owners[0]).await.unwrap());
    c1.client.simple_query("COMMIT").await.unwrap();
    assert_eq!(observer.lease(&k).await.unwrap().expect("one hold left").hold_count, 1);
    assert!(c1.release(&k, &owners[0]).await.unwrap());
    assert!(!c0.release(&k, &owners[0]).await.unwrap(), "the last hold is gone");
    assert_eq!(observer.lease(&k).await.unwrap(), None);

    // Fences grow across grants, whichever connections acquire and release.
    let mut last = fence;
    for round in 0..24 {
        let owner = &owners[round % 8];
        let next = clients[round % 8].try_acquire(&k, owner, "30s").await.unwrap().expect("free again");
        assert!(next > last, "round {round}: fence {next} after {last}");
        assert!(clients[(round + 3) % 8].release(&k, owner).await.unwrap());
        last = next;
    }

    // Concurrently: every client races for one key, many rounds; exactly one wins each round.
    for round in 0..10 {
        let contested = key(T, &format!("race{round}"));
        let tries =
            clients.iter().zip(&owners).map(|(client, owner)| client.try_acquire(&contested, owner, "30s"));
        let granted: Vec<i64> =
            futures::future::join_all(tries).await.into_iter().filter_map(|r| r.unwrap()).collect();
        assert_eq!(granted.len(), 1, "round {round}: {granted:?}");
        let row = observer.lease(&contested).await.unwrap().expect("held");
        let winner = owners.iter().position(|o| Some(o) == row.owner.as_ref()).expect("one of ours");
        assert!(clients[(winner + 1) % 8].release(&contested, &owners[winner]).await.unwrap());
    }
}

#[tokio::test]
async fn each_server_side_wait_holds_a_server_connection_and_two_fill_a_pool_of_two() {
    const T: &str = "pgbouncer_wait";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 2).await;
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let (o_holder, o_a, o_b) = (owner(T, "holder"), owner(T, "a"), owner(T, "b"));
    let first = holder.try_acquire(&k, &o_holder, "60s").await.unwrap().unwrap();

    // Two waiters through the pooler, in this order: each sits on a server connection.
    let (a, b, c) = (pooled(&bouncer).await, pooled(&bouncer).await, pooled(&bouncer).await);
    let (ka, oa) = (k.clone(), o_a.clone());
    let wait_a = tokio::spawn(async move { (a.acquire(&ka, &oa, Some("60s"), Some("60s")).await, a) });
    wait_for_waiters(&observer, &k, 1).await;
    let (kb, ob) = (k.clone(), o_b.clone());
    let wait_b = tokio::spawn(async move { (b.acquire(&kb, &ob, Some("60s"), Some("60s")).await, b) });
    wait_for_waiters(&observer, &k, 2).await;
    assert_eq!(bouncer.pool_count("sv_active").await, 2, "{:?}", bouncer.pool().await);

    // The pool is full: a third client's `SELECT 1` queues in pgbouncer behind the waits.
    let ping = tokio::spawn(async move { c.ping().await });
    eventually(PROMPTLY, "the third client queues in pgbouncer", || async {
        bouncer.pool_count("cl_waiting").await == 1
    })
    .await;
    assert!(!ping.is_finished(), "SELECT 1 ran although both server connections are waiting");

    // A release from outside the pool hands the key to the first waiter; its server connection
    // is free again, and the queued client runs.
    assert!(holder.release(&k, &o_holder).await.unwrap());
    let (granted_a, a) = within(PROMPTLY, "waiter a is granted", wait_a).await.unwrap();
    let fence_a = granted_a.unwrap().expect("a is granted the released key");
    assert!(fence_a > first);
    assert_eq!(within(PROMPTLY, "the queued SELECT 1 runs", ping).await.unwrap().unwrap(), 1);
    // Released through the pooler (a server connection is free now): b is next.
    assert!(a.release(&k, &o_a).await.unwrap());
    let (granted_b, b) = within(PROMPTLY, "waiter b is granted", wait_b).await.unwrap();
    let fence_b = granted_b.unwrap().expect("b is granted");
    assert!(fence_b > fence_a);
    assert!(b.release(&k, &o_b).await.unwrap());
}

#[tokio::test]
async fn a_release_through_a_pool_full_of_waiters_waits_until_a_wait_ends() {
    const T: &str = "pgbouncer_starved";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let (holder, waiter) = (pooled(&bouncer).await, pooled(&bouncer).await);
    let k = key(T, "k");
    let (o_holder, o_waiter) = (owner(T, "holder"), owner(T, "waiter"));
    let fence = holder.try_acquire(&k, &o_holder, "60s").await.unwrap().unwrap();

    // The waiter takes the only server connection, for up to 5 s.
    let (kw, ow) = (k.clone(), o_waiter.clone());
    let wait = tokio::spawn(async move { waiter.acquire(&kw, &ow, Some("60s"), Some("5s")).await });
    wait_for_waiters(&observer, &k, 1).await;
    // The holder releases through the same pooler: its statement cannot reach the server.
    let (kh, oh) = (k.clone(), o_holder.clone());
    let release = tokio::spawn(async move { holder.release(&kh, &oh).await });
    eventually(PROMPTLY, "the release queues in pgbouncer", || async {
        bouncer.pool_count("cl_waiting").await == 1
    })
    .await;
    assert!(observer.holds(&k, fence).await.unwrap(), "the lease is still held while the release queues");

    // So the wait runs out although the holder asked to release long before: not granted.
    let waited = within(PROMPTLY, "the wait ends", wait).await.unwrap().unwrap();
    assert_eq!(waited, None, "the waiter was granted while the release could not run");
    // Only then does the release reach the server.
    assert!(within(PROMPTLY, "the release runs", release).await.unwrap().unwrap());
    assert_eq!(observer.lease(&k).await.unwrap(), None);
}

#[tokio::test]
async fn a_session_bound_lease_belongs_to_the_pooled_server_session_not_to_the_client() {
    const T: &str = "pgbouncer_session_bound";
    let cluster = Cluster::shared();
    // One server connection, so that every client provably runs on the same server session.
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let (o_a, o_b) = (owner(T, "a"), owner(T, "b"));

    let a = pooled(&bouncer).await;
    let server_pid = a.backend_pid().await;
    let fence = a.acquire(&k, &o_a, None, Some("0")).await.unwrap().expect("a free key is granted");
    drop(a); // the client that took the session-bound lease disconnects
    eventually(PROMPTLY, "pgbouncer sees client a leave", || async {
        bouncer.pool_count("cl_active").await == 0
    })
    .await;

    // The lease lives on: it is bound to the server session, which stays in the pool.
    let row = observer.lease(&k).await.unwrap().expect("the lease outlives its client");
    assert_eq!(
        (row.owner.as_deref(), row.fence, row.holder_pid),
        (Some(o_a.as_str()), fence, Some(server_pid))
    );
    assert_eq!(row.expires_at, Some(f64::INFINITY));
    assert_eq!(observer.try_acquire(&k, &o_b, "10s").await.unwrap(), None, "still held for everyone");

    // Another client, whose transactions run on that same server session, is "the same session"
    // as far as the server can tell: an unlimited wait is refused at once as a self-deadlock.
    let b = pooled(&bouncer).await;
    assert_eq!(b.backend_pid().await, server_pid);
    assert_eq!(b.try_acquire(&k, &o_b, "10s").await.unwrap(), None);
    expect_sqlstate(
        b.acquire(&k, &o_b, Some("10s"), None).await,
        &SqlState::T_R_DEADLOCK_DETECTED,
        "an unlimited wait of another client on the holder's server session",
    );
    // Whoever knows the owner string releases it, from any client.
    assert!(b.release(&k, &o_a).await.unwrap());
    assert_eq!(observer.lease(&k).await.unwrap(), None);

    // Unreleased, it ends only when pgbouncer closes that server connection (here at once with
    // RECONNECT; otherwise after server_idle_timeout / server_lifetime, or at shutdown).
    let k2 = key(T, "k2");
    let a2 = pooled(&bouncer).await;
    a2.acquire(&k2, &o_a, None, Some("0")).await.unwrap().expect("granted");
    drop(a2);
    assert_eq!(observer.lease(&k2).await.unwrap().and_then(|row| row.holder_pid), Some(server_pid));
    bouncer.admin("RECONNECT postgres").await;
    eventually(PROMPTLY, "the lease ends with its server session", || async {
        observer.lease(&k2).await.unwrap().is_none()
    })
    .await;
    let alive: bool = observer
        .query_one("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", &[&server_pid])
        .await
        .unwrap()
        .get(0);
    assert!(!alive, "the server session ended");
}

#[tokio::test]
async fn a_watch_stays_on_the_pooled_server_session_and_its_notifications_miss_the_watcher() {
    const T: &str = "pgbouncer_watch";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let (watcher, mut heard) = connect_listening(&bouncer).await;
    let channel = watcher.watch(&k).await.unwrap();
    assert_eq!(observer.watchers(&k).await.unwrap(), 1);

    // A free while the watching server session sits idle in the pool: pgbouncer drops the
    // notification ("got packet 'A' from server when not linked").
    observer.try_acquire(&k, &owner(T, "x"), "30s").await.unwrap().unwrap();
    assert!(observer.release(&k, &owner(T, "x")).await.unwrap());
    eventually(PROMPTLY, "pgbouncer drops the notification", || async {
        bouncer.log().contains("got packet 'A' from server when not linked")
    })
    .await;

    // A free through the pooler runs on that same server session: the notification goes to the
    // client that freed the key, not to the watcher.
    let (bystander, mut bystander_heard) = connect_listening(&bouncer).await;
    bystander.try_acquire(&k, &owner(T, "y"), "30s").await.unwrap().unwrap();
    assert!(bystander.release(&k, &owner(T, "y")).await.unwrap());
    let got = within(PROMPTLY, "the bystander hears it", bystander_heard.recv()).await;
    assert_eq!(got.as_deref(), Some(channel.as_str()));
    watcher.ping().await.unwrap();
    assert!(heard.try_recv().is_err(), "the watcher heard a notification");

    // The watch outlives the watcher: the server session keeps it (and frees keep notifying).
    drop(watcher);
    eventually(PROMPTLY, "pgbouncer sees the watcher leave", || async {
        bouncer.pool_count("cl_active").await == 1
    })
    .await;
    assert_eq!(observer.watchers(&k).await.unwrap(), 1);
}

#[tokio::test]
async fn another_client_hanging_up_mid_transaction_ends_the_session_bound_leases_of_its_server_session() {
    const T: &str = "pgbouncer_hangup";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 1).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let a = pooled(&bouncer).await;
    let server_pid = a.backend_pid().await;
    a.acquire(&k, &owner(T, "a"), None, Some("0")).await.unwrap().expect("granted");
    drop(a);
    assert_eq!(observer.lease(&k).await.unwrap().and_then(|row| row.holder_pid), Some(server_pid));

    // An unrelated client opens a transaction on that server session and hangs up in it:
    // pgbouncer cannot reuse the server connection and closes it — ending a's lease.
    let b = pooled(&bouncer).await;
    b.client.simple_query("BEGIN; SELECT 1").await.unwrap();
    assert_eq!(b.backend_pid().await, server_pid);
    drop(b);
    eventually(PROMPTLY, "a's lease ends with the server session b's hang-up closed", || async {
        observer.lease(&k).await.unwrap().is_none()
    })
    .await;
    assert!(bouncer.log().contains("client disconnect while server was not ready"), "{}", bouncer.log());
}

#[tokio::test]
async fn a_session_bound_lease_released_through_another_server_connection_frees_the_key() {
    const T: &str = "pgbouncer_release_elsewhere";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 2).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let (o_a, o_w) = (owner(T, "a"), owner(T, "w"));
    // p keeps one server connection in a transaction; a's acquire runs on the other one.
    let (p, a) = (pooled(&bouncer).await, pooled(&bouncer).await);
    p.client.simple_query("BEGIN").await.unwrap();
    let p_pid = p.backend_pid().await;
    let fence = a.acquire(&k, &o_a, None, Some("0")).await.unwrap().expect("granted");
    let bound_to = observer.lease(&k).await.unwrap().expect("held").holder_pid.expect("a holder pid");
    assert_ne!(bound_to, p_pid);

    // A waiter outside the pool waits on the binding of a's server session.
    let waiter = cluster.connect().await;
    let wait = waiter.spawn_acquire(&k, &o_w, Some("30s"), Some("30s"));
    wait_for_waiters(&observer, &k, 1).await;
    // The release runs on the other server session (p's transaction): the key is freed, and
    // the waiter finds out at its next re-check (deadlock_timeout + 0.1 s, as after a force
    // release), although the binding stays with a's server session.
    assert!(p.release(&k, &o_a).await.unwrap());
    p.client.simple_query("COMMIT").await.unwrap();
    let granted = within(PROMPTLY, "the waiter is granted", wait).await.unwrap();
    assert!(granted.result.unwrap().expect("granted") > fence);
    // (the SQL edition's binding is its bound lock: hashtextextended(key, 7633), objsubid 1)
    let bindings: i64 = observer
        .query_one(
            if sql_edition() {
                "SELECT count(*) FROM pg_catalog.pg_locks \
                  WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = $1 \
                    AND (classid::int8 << 32 | objid::int8) = hashtextextended($2 COLLATE \"C\", 7633)"
            } else {
                "SELECT count(*) FROM pg_catalog.pg_locks \
                  WHERE locktype = 'advisory' AND objsubid = 27394 AND granted AND pid = $1 AND $2::text IS NOT NULL"
            },
            &[&bound_to, &k],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(bindings, 1, "the released lease's binding lock stays with its server session");
    assert!(granted.session.release(&k, &o_w).await.unwrap());
}

#[tokio::test]
async fn an_unwatch_on_another_server_connection_leaves_the_watch_in_place() {
    const T: &str = "pgbouncer_unwatch";
    let cluster = Cluster::shared();
    let bouncer = Pgbouncer::start(cluster, T, 2).await;
    let observer = cluster.connect().await;
    let k = key(T, "k");
    let (watcher, p, q) = (pooled(&bouncer).await, pooled(&bouncer).await, pooled(&bouncer).await);
    // p pins one server connection: the watch is made on the other one.
    p.client.simple_query("BEGIN").await.unwrap();
    let p_pid = p.backend_pid().await;
    watcher.watch(&k).await.unwrap();
    assert_eq!(observer.watchers(&k).await.unwrap(), 1);
    // q pins the watching server connection, p lets its own go: the unwatch runs there.
    q.client.simple_query("BEGIN").await.unwrap();
    assert_ne!(q.backend_pid().await, p_pid);
    p.client.simple_query("COMMIT").await.unwrap();
    let unwatched: bool = watcher.one("SELECT dlock_unwatch($1)", &[(&k, Type::TEXT)]).await.unwrap();
    assert!(!unwatched, "that server session watched nothing");
    q.client.simple_query("COMMIT").await.unwrap();
    assert_eq!(observer.watchers(&k).await.unwrap(), 1, "the watch stays on the other server session");
}

/// What poolers run to reset a server session between clients (pgbouncer's default
/// `server_reset_query`, `DISCARD ALL`) ends the session's session-bound leases as a disconnect
/// would: the next client of that server session must not inherit them. So does
/// `pg_advisory_unlock_all()`. The session itself sees them gone too: its renew answers NULL
/// and its release false, and another owner takes the key.
#[tokio::test]
async fn a_session_reset_ends_its_session_bound_leases_as_a_disconnect_does() {
    const T: &str = "pgbouncer_discard_all";
    let cluster = Cluster::shared();
    let (holder, other) = (cluster.connect().await, cluster.connect().await);
    for (i, reset) in ["DISCARD ALL", "SELECT pg_advisory_unlock_all()"].into_iter().enumerate() {
        let k = key(T, &format!("k{i}"));
        let (o_a, o_b) = (owner(T, "a"), owner(T, "b"));
        let fence = holder
            .query_typed_one("SELECT dlock_acquire($1, $2, NULL)", &[(&k, Type::TEXT), (&o_a, Type::TEXT)])
            .await
            .unwrap()
            .get::<_, Option<i64>>(0)
            .expect("granted");
        holder.batch_execute(reset).await.unwrap();

        // DISCARD ALL dropped the session's prepared statements: unnamed ones from here on.
        let renewed: Option<f64> = holder
            .query_typed_one(
                "SELECT extract(epoch FROM dlock_renew($1, $2, '10s'))::float8",
                &[(&k, Type::TEXT), (&o_a, Type::TEXT)],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(renewed, None, "{reset}: the holder's own session sees its lease ended");
        let taken = other.try_acquire(&k, &o_b, "10s").await.unwrap();
        assert!(taken.is_some_and(|f| f > fence), "{reset}: another owner takes the key: {taken:?}");
        let released: bool = holder
            .query_typed_one("SELECT dlock_release($1, $2)", &[(&k, Type::TEXT), (&o_a, Type::TEXT)])
            .await
            .unwrap()
            .get(0);
        assert!(!released, "{reset}: the old holder's release finds nothing of its own");
        assert!(other.release(&k, &o_b).await.unwrap());
    }
}
