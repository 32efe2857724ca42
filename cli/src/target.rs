//! Where commands send their calls: one database (`--database-url`, or the PG* environment), or
//! the servers of a shard map (`--shards FILE`), each key to the server the map names for it.

use std::path::Path;

use dlock_client::{Client, ShardedClient, ShardsConfig, ShardsError};

use crate::Failure;

/// One database, or a shard map.
#[derive(Debug)]
pub enum Target {
    /// A connection string (empty: everything from the PG* environment).
    Database(String),
    /// The map read from `--shards`.
    Shards(ShardsConfig),
}

impl Target {
    /// The target the options name: `--shards` if given (clap refuses it beside
    /// `--database-url`), else the connection string.
    pub fn new(database_url: String, shards: Option<&Path>) -> Result<Target, Failure> {
        Ok(match shards {
            Some(path) => Target::Shards(ShardsConfig::from_file(path)?),
            None => Target::Database(database_url),
        })
    }

    /// A client of the server `key` belongs to, connected (checked now, so that a failure names
    /// the server), as `owner` if given.
    pub async fn client_for(&self, key: &str, owner: Option<&str>) -> Result<Client, Failure> {
        let client = match self {
            Target::Database(url) => Client::connect(url).await?,
            Target::Shards(config) => {
                let sharded = ShardedClient::connect_lazy(config)?;
                let client = sharded.client_for(key).clone();
                if let Err(e) = client.pool().get().await {
                    let server = sharded.locate(key).to_owned();
                    let origin = config.origin().to_owned();
                    return Err(ShardsError::Server { origin, server, source: Box::new(e.into()) }.into());
                }
                client
            }
        };
        Ok(match owner {
            Some(owner) => client.with_owner(owner),
            None => client,
        })
    }

    /// Every server's client, with its name when sharded (for `list`); connected lazily.
    pub fn every_client(&self) -> Result<Vec<(Option<String>, Client)>, Failure> {
        Ok(match self {
            Target::Database(url) => vec![(None, Client::connect_lazy(url)?)],
            Target::Shards(config) => ShardedClient::connect_lazy(config)?
                .servers()
                .map(|(name, client)| (Some(name.to_owned()), client.clone()))
                .collect(),
        })
    }
}

impl From<ShardsError> for Failure {
    fn from(e: ShardsError) -> Self {
        match &e {
            // A server that cannot be reached, or refused us: as any connection failure.
            ShardsError::Server { source, .. } if !matches!(**source, dlock_client::Error::Config(_)) => {
                Failure::Other(e.to_string())
            }
            // The file or one of its entries: a bad option value.
            _ => Failure::Usage(e.to_string()),
        }
    }
}
