//! A shard map: the set of servers keys are spread over, and an epoch that only grows. Every
//! server keeps the newest map it was given; clients route with theirs and refresh when a
//! server knows a newer one.

use super::fence::MAX_EPOCH;
use super::route;

pub use super::route::MAX_NAME_BYTES;
/// Most servers in one map.
pub const MAX_SERVERS: usize = 256;

/// Why a map is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("the shard map's epoch must be between 1 and {MAX_EPOCH}, not {0}")]
    Epoch(i64),
    #[error("the shard map names no server")]
    NoServers,
    #[error("the shard map names {0} servers, the limit is {MAX_SERVERS}")]
    TooMany(usize),
    #[error("server name {0:?} is not 1 to {MAX_NAME_BYTES} bytes of letters, digits, '_', '-' or '.'")]
    Name(String),
    #[error("server name {0:?} appears twice")]
    Duplicate(String),
}

/// A valid map: epoch in 1..=[`MAX_EPOCH`], 1..=[`MAX_SERVERS`] distinct well-formed names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    epoch: i64,
    servers: Vec<String>,
}

impl ShardMap {
    pub fn new(epoch: i64, servers: impl IntoIterator<Item = impl Into<String>>) -> Result<Self, MapError> {
        if !(1..=MAX_EPOCH).contains(&epoch) {
            return Err(MapError::Epoch(epoch));
        }
        let mut names: Vec<String> = servers.into_iter().map(Into::into).collect();
        if names.is_empty() {
            return Err(MapError::NoServers);
        }
        if names.len() > MAX_SERVERS {
            return Err(MapError::TooMany(names.len()));
        }
        if let Some(bad) = names.iter().find(|n| !valid_name(n)) {
            return Err(MapError::Name(bad.clone()));
        }
        names.sort();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(MapError::Duplicate(pair[0].clone()));
        }
        Ok(Self { epoch, servers: names })
    }

    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The servers, sorted by name.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    pub fn contains(&self, server: &str) -> bool {
        self.servers.binary_search_by(|s| s.as_str().cmp(server)).is_ok()
    }

    /// The server `key` belongs to under this map.
    pub fn owner(&self, key: &str) -> &str {
        route::owner(self.servers.iter().map(String::as_str), key).expect("a map has a server")
    }

    /// The position of [`owner`](Self::owner)`(key)` in [`servers`](Self::servers), found
    /// without allocating: for clients that keep a connection pool per server.
    pub fn owner_index(&self, key: &str) -> usize {
        if self.servers.len() == 1 {
            return 0; // no weight to compare
        }
        route::owner_index(self.servers.iter().map(String::as_str), key).unwrap_or(0)
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_maps_are_refused() {
        assert_eq!(ShardMap::new(0, ["a"]), Err(MapError::Epoch(0)));
        assert_eq!(ShardMap::new(-3, ["a"]), Err(MapError::Epoch(-3)));
        assert_eq!(ShardMap::new(MAX_EPOCH + 1, ["a"]), Err(MapError::Epoch(MAX_EPOCH + 1)));
        assert_eq!(ShardMap::new(1, Vec::<String>::new()), Err(MapError::NoServers));
        assert_eq!(ShardMap::new(1, ["a", "b", "a"]), Err(MapError::Duplicate("a".into())));
        assert_eq!(ShardMap::new(1, ["a b"]), Err(MapError::Name("a b".into())));
        assert_eq!(ShardMap::new(1, [""]), Err(MapError::Name(String::new())));
        assert_eq!(ShardMap::new(1, ["x".repeat(64)]), Err(MapError::Name("x".repeat(64))));
        let many: Vec<String> = (0..=MAX_SERVERS).map(|i| format!("s{i}")).collect();
        assert_eq!(ShardMap::new(1, many), Err(MapError::TooMany(MAX_SERVERS + 1)));
    }

    #[test]
    fn a_map_routes_whatever_order_its_servers_came_in() {
        let a = ShardMap::new(7, ["pg-c", "pg-a", "pg-b"]).unwrap();
        let b = ShardMap::new(7, ["pg-b", "pg-c", "pg-a"]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.servers(), ["pg-a", "pg-b", "pg-c"]);
        assert!(a.contains("pg-b") && !a.contains("pg-d"));
        for i in 0..100 {
            let key = format!("k{i}");
            assert_eq!(a.owner(&key), b.owner(&key));
            assert_eq!(a.servers()[a.owner_index(&key)], a.owner(&key));
        }
    }
}
