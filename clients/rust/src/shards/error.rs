//! What can go wrong with a shard map before any lock is asked for: reading and checking the
//! map, making a client per server, and keys of one multi-key lock on several servers.

use std::path::PathBuf;

use dlock_core::shards::MapError;

use crate::error::Error;

/// Why a sharded client could not be made, or a call refused before anything was sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardsError {
    /// The map file could not be read.
    #[error("cannot read the shard map {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The map is not TOML of the expected shape: a missing `epoch` or `[servers]`, a key
    /// other than those, a value of the wrong type, a name given twice.
    #[error("shard map {origin}: {message}")]
    Syntax {
        /// The file, or `(in code)`.
        origin: String,
        /// What is wrong, and where (TOML's own message, with line and column).
        message: String,
    },
    /// The map's values are not a valid map (epoch out of range, no server, a bad or repeated
    /// server name).
    #[error("shard map {origin}: {source}")]
    Map {
        /// The file, or `(in code)`.
        origin: String,
        /// Which rule it breaks, naming the bad entry.
        #[source]
        source: MapError,
    },
    /// A server's entry is unusable: an empty connection string, one that cannot be parsed,
    /// or (connecting) a server that cannot be reached.
    #[error("shard map {origin}: server {server}: {source}")]
    Server {
        /// The file, or `(in code)`.
        origin: String,
        /// The server's name in the map.
        server: String,
        /// The client's error (boxed: it is large, and this is rare).
        #[source]
        source: Box<Error>,
    },
    /// The clients given for a map do not name each of its servers exactly once.
    #[error("no client is given for server {0} of the shard map")]
    MissingClient(String),
    /// A client is given for a server the map does not name, or twice.
    #[error("a client is given for server {0}, which the shard map does not name (or twice)")]
    ExtraClient(String),
    /// Keys of one multi-key lock belong to different servers: a multi-key lock is taken by one
    /// server, all or none. Give them one hash tag (`{order-7}:a`, `{order-7}:b`).
    #[error(
        "the keys of one multi-key lock must belong to one server: {first:?} is {first_server}'s, \
         {second:?} is {second_server}'s (give them one hash tag, e.g. {{tenant}}:key)"
    )]
    KeysOnSeveralServers {
        /// A key of the first server.
        first: String,
        /// Its server.
        first_server: String,
        /// A key of another server.
        second: String,
        /// Its server.
        second_server: String,
    },
}
