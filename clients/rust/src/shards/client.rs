//! A client of several dlock servers: one [`Client`] per server of a shard map, every call on a
//! key sent to the server the key belongs to.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dlock_core::shards::ShardMap;

use super::config::ShardsConfig;
use super::error::ShardsError;
use crate::client::{Client, ClientBuilder, Expiry};
use crate::connect::PoolerMode;
use crate::election::Election;
use crate::error::Error;
use crate::lock::{Lease, LockAllBuilder, LockBuilder};

/// A dlock client of several servers: `ShardedClient::connect(&ShardsConfig::from_file(path)?)`.
///
/// It holds one [`Client`] per server of the map, all as one owner identity, and sends each
/// call on a key to [`map().owner(key)`](ShardMap::owner): rendezvous hashing over the servers'
/// names, on the key's hash tag if it has one (`{tenant-7}:report` routes as `tenant-7`). The
/// builders, guards and elections it returns are the plain client's, bound to that server.
/// Routing costs a hash per server and allocates nothing.
///
/// Every session says which map it routes with (`dlock.shard_epoch`): servers refuse keys that
/// are not theirs under their map ([`Error::WrongServer`]) and clients whose map is newer than
/// theirs ([`Error::MapBehind`]). Clients given to [`from_clients`](Self::from_clients) say
/// nothing (epoch 0) unless their connection strings set it.
///
/// Cloning is cheap and shares the clients.
#[derive(Clone)]
pub struct ShardedClient {
    inner: Arc<Inner>,
}

struct Inner {
    map: ShardMap,
    /// One client per server, in the order of `map.servers()`.
    clients: Vec<Client>,
    /// How it was made, to make it again from a newer file (`refreshed`): `None` for clients
    /// given by the caller.
    source: Option<ShardedClientBuilder>,
}

impl std::fmt::Debug for ShardedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedClient")
            .field("epoch", &self.inner.map.epoch())
            .field("servers", &self.inner.map.servers())
            .field("owner", &self.owner())
            .finish_non_exhaustive()
    }
}

/// A sharded client being described: what [`ClientBuilder`] says, for every server.
#[derive(Debug, Clone)]
#[must_use = "a client builder does nothing until build() or connect()"]
pub struct ShardedClientBuilder {
    config: ShardsConfig,
    pooler: Option<PoolerMode>,
    pool_size: Option<usize>,
    max_poll_interval: Option<Duration>,
}

impl ShardedClientBuilder {
    /// See [`ClientBuilder::pooler`]; applies to every server (a server's connection string may
    /// say `dlock_pooler` for itself when this is not called).
    pub fn pooler(mut self, mode: PoolerMode) -> Self {
        self.pooler = Some(mode);
        self
    }

    /// See [`ClientBuilder::pool_size`]: the pool of each server.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = Some(size);
        self
    }

    /// See [`ClientBuilder::max_poll_interval`].
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.max_poll_interval = Some(interval);
        self
    }

    /// The client, opening no connection until a call needs one: [`ShardsError::Server`]
    /// naming the server whose connection string makes no sense.
    pub fn build(self) -> Result<ShardedClient, ShardsError> {
        let clients = self
            .config
            .servers()
            .map(|(name, url)| self.server_builder(url).build().map_err(|e| self.server_error(name, e)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut client = ShardedClient::assemble(self.config.map().clone(), clients);
        Arc::get_mut(&mut client.inner).expect("a new client").source = Some(self);
        Ok(client)
    }

    /// The client, after opening one connection to every server to check its address, TLS and
    /// credentials: [`ShardsError::Server`] naming the first server that fails.
    pub async fn connect(self) -> Result<ShardedClient, ShardsError> {
        let client = self.clone().build()?;
        for (name, server) in client.servers() {
            if let Err(e) = server.pool().get().await {
                return Err(self.server_error(name, e.into()));
            }
        }
        Ok(client)
    }

    fn server_builder(&self, url: &str) -> ClientBuilder {
        let mut builder = Client::builder(url).shard_epoch(self.config.map().epoch());
        if let Some(mode) = self.pooler {
            builder = builder.pooler(mode);
        }
        if let Some(size) = self.pool_size {
            builder = builder.pool_size(size);
        }
        if let Some(interval) = self.max_poll_interval {
            builder = builder.max_poll_interval(interval);
        }
        builder
    }

    fn server_error(&self, server: &str, source: Error) -> ShardsError {
        let origin = self.config.origin().to_owned();
        ShardsError::Server { origin, server: server.to_owned(), source: Box::new(source) }
    }
}

impl ShardedClient {
    /// Connects to every server of `config` ([`Client::connect`] for each), checking each one
    /// now: [`ShardsError::Server`] names the first that cannot be reached.
    pub async fn connect(config: &ShardsConfig) -> Result<ShardedClient, ShardsError> {
        ShardedClient::builder(config).connect().await
    }

    /// Like [`connect`](Self::connect), opening no connection until a call needs one.
    pub fn connect_lazy(config: &ShardsConfig) -> Result<ShardedClient, ShardsError> {
        ShardedClient::builder(config).build()
    }

    /// A sharded client of `config` with more choices (pooler, pool size), as
    /// [`Client::builder`] gives for one server.
    pub fn builder(config: &ShardsConfig) -> ShardedClientBuilder {
        ShardedClientBuilder {
            config: config.clone(),
            pooler: None,
            pool_size: None,
            max_poll_interval: None,
        }
    }

    /// A sharded client of clients you made (e.g. [`Client::from_pool`]), one per server of
    /// `map`, given with the server's name. They take the owner identity of the first server's
    /// client (so that a key is one owner's whichever server it lands on).
    pub fn from_clients(
        map: ShardMap,
        clients: impl IntoIterator<Item = (String, Client)>,
    ) -> Result<ShardedClient, ShardsError> {
        let mut given: Vec<(String, Client)> = clients.into_iter().collect();
        given.sort_by(|a, b| a.0.cmp(&b.0));
        let mut ordered = Vec::with_capacity(map.servers().len());
        let mut given = given.into_iter().peekable();
        for server in map.servers() {
            match given.next() {
                Some((name, client)) if name == *server => ordered.push(client),
                Some((name, _)) if name < *server => return Err(ShardsError::ExtraClient(name)),
                _ => return Err(ShardsError::MissingClient(server.clone())),
            }
        }
        if let Some((name, _)) = given.next() {
            return Err(ShardsError::ExtraClient(name));
        }
        Ok(ShardedClient::assemble(map, ordered))
    }

    /// Puts every client under one owner identity (the first's: each was made with its own).
    fn assemble(map: ShardMap, clients: Vec<Client>) -> ShardedClient {
        let owner = clients[0].owner().to_owned();
        let clients = clients.iter().map(|c| c.with_owner(owner.as_str())).collect();
        ShardedClient { inner: Arc::new(Inner { map, clients, source: None }) }
    }

    /// A client of the newer map in the file this one was read from, if the file now holds a
    /// newer epoch: what to do on [`Error::WrongServer`] or [`Error::MapBehind`] (as a Redis
    /// Cluster client does on MOVED). `Ok(None)`: the file has this map still, or this client
    /// was not made from a file. Guards of this client keep working; new calls go through the
    /// returned one, under the same owner identity.
    pub fn refreshed(&self) -> Result<Option<ShardedClient>, ShardsError> {
        let Some(source) = &self.inner.source else { return Ok(None) };
        let Some(file) = source.config.file() else { return Ok(None) };
        let config = ShardsConfig::from_file(file)?;
        if config.epoch() <= self.epoch() {
            return Ok(None);
        }
        let builder = ShardedClientBuilder { config, ..source.clone() };
        Ok(Some(builder.build()?.with_owner(self.owner())))
    }

    /// The map this client routes with.
    pub fn map(&self) -> &ShardMap {
        &self.inner.map
    }

    /// The map's epoch.
    pub fn epoch(&self) -> i64 {
        self.inner.map.epoch()
    }

    /// The name of the server `key` belongs to (needs no connection).
    pub fn locate(&self, key: &str) -> &str {
        &self.inner.map.servers()[self.route(key)]
    }

    /// The client of the server `key` belongs to: for calls this type does not route itself.
    pub fn client_for(&self, key: &str) -> &Client {
        &self.inner.clients[self.route(key)]
    }

    /// The position of `key`'s server; a map of one server needs no hashing.
    fn route(&self, key: &str) -> usize {
        if self.inner.clients.len() == 1 { 0 } else { self.inner.map.owner_index(key) }
    }

    /// The client of server `name`, if the map names it.
    pub fn server(&self, name: &str) -> Option<&Client> {
        let at = self.inner.map.servers().binary_search_by(|s| s.as_str().cmp(name)).ok()?;
        Some(&self.inner.clients[at])
    }

    /// Every server's name and client, sorted by name (e.g. to list every server's leases).
    pub fn servers(&self) -> impl ExactSizeIterator<Item = (&str, &Client)> {
        self.inner.map.servers().iter().map(String::as_str).zip(self.inner.clients.iter())
    }

    /// The owner identity of every lease of this client, on every server.
    pub fn owner(&self) -> &str {
        self.inner.clients[0].owner()
    }

    /// The same servers' pools under another owner identity (see [`Client::with_owner`]).
    pub fn with_owner(&self, owner: impl Into<String>) -> ShardedClient {
        let owner: String = owner.into();
        let clients = self.inner.clients.iter().map(|c| c.with_owner(owner.as_str())).collect();
        let source = self.inner.source.clone();
        ShardedClient { inner: Arc::new(Inner { map: self.inner.map.clone(), clients, source }) }
    }

    /// [`Client::lock`] on the server `key` belongs to.
    pub fn lock(&self, key: impl Into<String>) -> LockBuilder {
        let key = key.into();
        self.client_for(&key).lock(key)
    }

    /// [`Client::semaphore`] on the server `key` belongs to.
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> LockBuilder {
        let key = key.into();
        self.client_for(&key).semaphore(key, permits)
    }

    /// [`Client::lock_all`] on the server every key belongs to: they must share one (give them
    /// one hash tag, `{order-7}:a` and `{order-7}:b`), else
    /// [`ShardsError::KeysOnSeveralServers`] naming two keys and their servers, before anything
    /// is sent. An empty list goes to the first server, which refuses it as the plain client's.
    pub fn lock_all<I, K>(&self, keys: I) -> Result<LockAllBuilder, ShardsError>
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        let at = keys.first().map_or(0, |first| self.route(first));
        if let Some(other) = keys.iter().find(|k| self.route(k) != at) {
            return Err(ShardsError::KeysOnSeveralServers {
                first: keys[0].clone(),
                first_server: self.locate(&keys[0]).to_owned(),
                second: other.clone(),
                second_server: self.locate(other).to_owned(),
            });
        }
        Ok(self.inner.clients[at].lock_all(keys))
    }

    /// [`Client::with_lock`] on the server of the lock's key.
    pub async fn with_lock<L, F, Fut, T>(&self, lock: L, work: F) -> Result<T, Error>
    where
        L: IntoRoutedLock,
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let builder = lock.into_routed_lock(self);
        // The builder keeps the client it was made from: any of them serves as the argument.
        self.inner.clients[0].with_lock(builder, work).await
    }

    /// [`Client::election`] on the server the election's name belongs to (as a key).
    pub fn election(&self, name: impl Into<String>) -> Election {
        let name = name.into();
        self.client_for(&name).election(name)
    }

    /// Observes election `name` across map changes: its leader now, then every change, as
    /// [`Election::observe`](crate::Election::observe) on the server the name belongs to; and
    /// when the map file this client was read from names another server for it (read again
    /// every `recheck`, see [`refreshed`](Self::refreshed)), the observation moves there. The
    /// leader's term only grows across the move (a later map's fences are above an earlier
    /// one's). A client made in code never moves its observation.
    pub async fn observe_election(
        &self,
        name: impl Into<String>,
        recheck: Duration,
    ) -> Result<crate::LeaderChanges, Error> {
        let name: String = name.into();
        let mut changes = self.election(name.as_str()).observe().await?;
        let (sender, receiver) = tokio::sync::mpsc::channel(16);
        let mut client = self.clone();
        tokio::spawn(async move {
            let mut last: Option<Option<i64>> = None;
            loop {
                tokio::select! {
                    () = sender.closed() => return,
                    item = changes.next() => {
                        let Some(item) = item else { return };
                        let term = item.as_ref().ok().map(|l| l.as_ref().map(|l| l.term));
                        if item.is_ok() && term == last {
                            continue;
                        }
                        last = term;
                        let failed = item.is_err();
                        if sender.send(item).await.is_err() || failed {
                            return;
                        }
                    }
                    () = tokio::time::sleep(recheck) => {
                        let Ok(Some(fresh)) = client.refreshed() else { continue };
                        let moved = fresh.locate(&name) != client.locate(&name);
                        client = fresh;
                        if moved {
                            match client.election(name.as_str()).observe().await {
                                Ok(there) => changes = there,
                                Err(e) => {
                                    drop(sender.send(Err(e)).await);
                                    return;
                                }
                            }
                        }
                    }
                }
            }
        });
        Ok(crate::LeaderChanges::from_receiver(receiver))
    }

    /// [`Client::wait_free`] on the server `key` belongs to.
    pub async fn wait_free(&self, key: &str, wait: Duration) -> Result<bool, Error> {
        self.client_for(key).wait_free(key, wait).await
    }

    /// [`Client::renew_lease`] on the server `key` belongs to.
    pub async fn renew_lease(&self, key: &str, ttl: Duration) -> Result<Option<Expiry>, Error> {
        self.client_for(key).renew_lease(key, ttl).await
    }

    /// [`Client::release_lease`] on the server `key` belongs to.
    pub async fn release_lease(&self, key: &str) -> Result<bool, Error> {
        self.client_for(key).release_lease(key).await
    }

    /// [`Client::force_release`] on the server `key` belongs to.
    pub async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.client_for(key).force_release(key).await
    }
}

/// What [`ShardedClient::with_lock`] accepts: a key, or a [`LockBuilder`] (which keeps the
/// client it was made from: make it with [`ShardedClient::lock`]).
pub trait IntoRoutedLock {
    /// The builder to acquire with (a key gets the defaults, on its server).
    fn into_routed_lock(self, client: &ShardedClient) -> LockBuilder;
}

impl IntoRoutedLock for LockBuilder {
    fn into_routed_lock(self, _client: &ShardedClient) -> LockBuilder {
        self
    }
}

impl IntoRoutedLock for &str {
    fn into_routed_lock(self, client: &ShardedClient) -> LockBuilder {
        client.lock(self)
    }
}

impl IntoRoutedLock for String {
    fn into_routed_lock(self, client: &ShardedClient) -> LockBuilder {
        client.lock(self)
    }
}

impl IntoRoutedLock for &String {
    fn into_routed_lock(self, client: &ShardedClient) -> LockBuilder {
        client.lock(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ShardsConfig {
        ShardsConfig::new(
            4,
            [("s1", "host=h1 user=u"), ("s2", "host=h2 user=u"), ("s3", "postgresql://u:pw@h3/db")],
        )
        .unwrap()
    }

    /// `n` keys of `server` under `config`.
    fn keys_of(config: &ShardsConfig, server: &str, n: usize) -> Vec<String> {
        (0..).map(|i| format!("key:{i}")).filter(|k| config.locate(k) == server).take(n).collect()
    }

    #[test]
    fn every_key_call_goes_to_the_server_the_map_names() {
        let config = config();
        let client = ShardedClient::connect_lazy(&config).unwrap();
        for i in 0..300 {
            let key = format!("orders:{i}");
            let server = client.locate(&key);
            assert_eq!(server, config.map().owner(&key));
            let routed = client.client_for(&key);
            assert!(std::ptr::eq(routed, client.server(server).unwrap()));
            assert!(client.lock(key.as_str()).client().same_server(routed));
            assert!(client.semaphore(key.as_str(), 2).client().same_server(routed));
        }
        assert!(!client.server("s1").unwrap().same_server(client.server("s2").unwrap()));
    }

    #[test]
    fn every_server_is_one_owner_and_with_owner_changes_them_all() {
        let client = ShardedClient::connect_lazy(&config()).unwrap();
        let owner = client.owner().to_owned();
        assert!(client.servers().all(|(_, c)| c.owner() == owner));
        let worker = client.with_owner("worker-1");
        assert!(worker.servers().all(|(_, c)| c.owner() == "worker-1"));
        assert_eq!(worker.servers().len(), 3);
    }

    #[test]
    fn a_hash_tag_family_lands_together_and_locks_all_at_once() {
        let client = ShardedClient::connect_lazy(&config()).unwrap();
        let family: Vec<String> = (0..50).map(|i| format!("{{tenant-7}}:report:{i}")).collect();
        let server = client.locate(&family[0]);
        assert!(family.iter().all(|k| client.locate(k) == server));
        let builder = client.lock_all(family.iter().map(String::as_str)).unwrap();
        assert!(builder.client().same_server(client.server(server).unwrap()));
        assert_eq!(builder.keys(), family);
    }

    #[test]
    fn lock_all_across_servers_is_refused_naming_two_keys_and_their_servers() {
        let config = config();
        let client = ShardedClient::connect_lazy(&config).unwrap();
        let (a, b) = (keys_of(&config, "s1", 2), keys_of(&config, "s3", 1));
        let keys = [a[0].clone(), a[1].clone(), b[0].clone()];
        match client.lock_all(keys) {
            Err(ShardsError::KeysOnSeveralServers { first, first_server, second, second_server }) => {
                assert_eq!((first, first_server.as_str()), (a[0].clone(), "s1"));
                assert_eq!((second, second_server.as_str()), (b[0].clone(), "s3"));
            }
            other => panic!("not refused: {other:?}"),
        }
        let message = client.lock_all([&a[0], &b[0]]).unwrap_err().to_string();
        assert!(message.contains(&a[0]) && message.contains("s1") && message.contains("s3"), "{message}");
    }

    #[test]
    fn an_election_routes_by_its_name() {
        let config = config();
        let client = ShardedClient::connect_lazy(&config).unwrap();
        for name in keys_of(&config, "s2", 5) {
            assert!(client.election(name.as_str()).client().same_server(client.server("s2").unwrap()));
        }
    }

    #[test]
    fn a_bad_connection_string_is_refused_naming_its_server() {
        let config = ShardsConfig::new(1, [("a", "host=h user=u"), ("b", "postgresql://[broken")]).unwrap();
        match ShardedClient::connect_lazy(&config) {
            Err(ShardsError::Server { server, source, .. }) => {
                assert_eq!(server, "b");
                assert!(matches!(*source, Error::Config(_)));
            }
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_client_from_a_file_refreshes_to_a_newer_map_under_its_owner() {
        let dir = std::env::temp_dir().join(format!("dlock-refresh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("map.toml");
        std::fs::write(&file, "epoch = 1\n[servers]\na = \"host=h1 user=u\"\n").unwrap();
        let client = ShardedClient::connect_lazy(&ShardsConfig::from_file(&file).unwrap()).unwrap();
        assert!(client.refreshed().unwrap().is_none(), "the same map");
        std::fs::write(&file, "epoch = 2\n[servers]\na = \"host=h1 user=u\"\nb = \"host=h2 user=u\"\n")
            .unwrap();
        let fresh = client.refreshed().unwrap().expect("a newer map");
        assert_eq!((fresh.epoch(), fresh.servers().len()), (2, 2));
        assert_eq!(fresh.owner(), client.owner());
        assert!(fresh.refreshed().unwrap().is_none(), "it is the file's map");
        std::fs::write(&file, "epoch = 3\n[servers]\n").unwrap();
        assert!(matches!(fresh.refreshed(), Err(ShardsError::Map { .. })), "a bad file is an error");
        // Made in code: nothing to read again.
        assert!(ShardedClient::connect_lazy(&config()).unwrap().refreshed().unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn clients_given_must_match_the_map() {
        let map = ShardMap::new(1, ["a", "b"]).unwrap();
        let lazy = || Client::connect_lazy("host=h user=u").unwrap();
        let missing = ShardedClient::from_clients(map.clone(), [("a".to_owned(), lazy())]);
        assert!(matches!(missing, Err(ShardsError::MissingClient(n)) if n == "b"));
        let extra = ShardedClient::from_clients(
            map.clone(),
            [("a".to_owned(), lazy()), ("b".to_owned(), lazy()), ("c".to_owned(), lazy())],
        );
        assert!(matches!(extra, Err(ShardsError::ExtraClient(n)) if n == "c"));
        let stray =
            ShardedClient::from_clients(map.clone(), [("0".to_owned(), lazy()), ("b".to_owned(), lazy())]);
        assert!(matches!(stray, Err(ShardsError::ExtraClient(n)) if n == "0"));
        let good =
            ShardedClient::from_clients(map, [("b".to_owned(), lazy()), ("a".to_owned(), lazy())]).unwrap();
        assert_eq!(good.servers().map(|(n, _)| n).collect::<Vec<_>>(), ["a", "b"]);
    }
}
