//! The shard map a client routes with, and each server's connection string: read from a TOML
//! file or given in code.
//!
//! ```toml
//! epoch = 3
//!
//! [servers]
//! pg-a = "postgresql://app@pg-a.internal/app"
//! pg-b = "host=pg-b.internal user=app dbname=app"
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use dlock_core::shards::ShardMap;
use serde::Deserialize;

use super::error::ShardsError;

/// What the errors of a map given in code name instead of a file.
const IN_CODE: &str = "(in code)";

/// The file's shape: nothing else is accepted, so a misspelt key is an error, not ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    epoch: i64,
    servers: BTreeMap<String, String>,
}

/// A shard map (epoch and server names, checked by [`ShardMap`]) with each server's connection
/// string (a libpq-style URL or `key=value` pairs, as [`Client::connect`](crate::Client::connect)
/// takes).
#[derive(Clone, PartialEq, Eq)]
pub struct ShardsConfig {
    map: ShardMap,
    /// The connection strings, in the order of `map.servers()` (sorted by name).
    urls: Vec<String>,
    /// The file it was read from, or [`IN_CODE`]: errors found later name it.
    origin: String,
    /// The file it was read from, to read again ([`ShardedClient::refreshed`](crate::ShardedClient::refreshed)).
    file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ShardsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Connection strings may hold passwords.
        let servers: Vec<(&str, String)> =
            self.servers().map(|(n, u)| (n, crate::redact_conninfo(u))).collect();
        f.debug_struct("ShardsConfig")
            .field("epoch", &self.map.epoch())
            .field("servers", &servers)
            .field("origin", &self.origin)
            .finish()
    }
}

impl ShardsConfig {
    /// A map of `epoch` over `servers` (name, connection string), as the file would say it.
    pub fn new<N, U>(
        epoch: i64,
        servers: impl IntoIterator<Item = (N, U)>,
    ) -> Result<ShardsConfig, ShardsError>
    where
        N: Into<String>,
        U: Into<String>,
    {
        let servers = servers.into_iter().map(|(n, u)| (n.into(), u.into())).collect();
        ShardsConfig::checked(epoch, servers, IN_CODE.to_owned())
    }

    /// Reads the TOML file at `path`: `epoch = N` and a `[servers]` table of
    /// `name = "connection string"`, nothing else.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ShardsConfig, ShardsError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ShardsError::Read { path: path.to_owned(), source })?;
        let mut config = ShardsConfig::parse(&text, path.display().to_string())?;
        config.file = Some(path.to_owned());
        Ok(config)
    }

    /// The file this map was read from, if it was.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Reads a map from TOML text, as [`from_file`](Self::from_file) reads a file.
    pub fn from_toml(text: &str) -> Result<ShardsConfig, ShardsError> {
        ShardsConfig::parse(text, IN_CODE.to_owned())
    }

    fn parse(text: &str, origin: String) -> Result<ShardsConfig, ShardsError> {
        let file: File = match toml::from_str(text) {
            Ok(file) => file,
            Err(e) => {
                return Err(ShardsError::Syntax { origin, message: e.to_string().trim_end().to_owned() });
            }
        };
        ShardsConfig::checked(file.epoch, file.servers.into_iter().collect(), origin)
    }

    /// Checks the map through [`ShardMap`], then each connection string's presence.
    fn checked(
        epoch: i64,
        mut servers: Vec<(String, String)>,
        origin: String,
    ) -> Result<ShardsConfig, ShardsError> {
        let map = ShardMap::new(epoch, servers.iter().map(|(name, _)| name.as_str()))
            .map_err(|source| ShardsError::Map { origin: origin.clone(), source })?;
        // The map sorts its names, and they are distinct: sorted alike, the strings line up.
        servers.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some((name, _)) = servers.iter().find(|(_, url)| url.trim().is_empty()) {
            return Err(ShardsError::Server {
                origin,
                server: name.clone(),
                // Empty would mean "whatever PGHOST says" for every server alike.
                source: Box::new(crate::Error::Config("the connection string is empty".into())),
            });
        }
        let urls = servers.into_iter().map(|(_, url)| url).collect();
        Ok(ShardsConfig { map, urls, origin, file: None })
    }

    /// The map: epoch and server names.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// The map's epoch.
    pub fn epoch(&self) -> i64 {
        self.map.epoch()
    }

    /// The servers and their connection strings, sorted by name. The strings are as written,
    /// passwords included: print them through [`redact_conninfo`](crate::redact_conninfo).
    pub fn servers(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.map.servers().iter().map(String::as_str).zip(self.urls.iter().map(String::as_str))
    }

    /// The connection string of server `name`, if the map names it.
    pub fn url(&self, name: &str) -> Option<&str> {
        let at = self.map.servers().binary_search_by(|s| s.as_str().cmp(name)).ok()?;
        Some(&self.urls[at])
    }

    /// The name of the server `key` belongs to (its hash tag's, if it has one).
    pub fn locate(&self, key: &str) -> &str {
        self.map.owner(key)
    }

    /// The file the map was read from, or `(in code)`.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

#[cfg(test)]
mod tests {
    use dlock_core::shards::MapError;

    use super::*;

    fn parsed(text: &str) -> Result<ShardsConfig, ShardsError> {
        ShardsConfig::parse(text, "shards.toml".into())
    }

    fn syntax_error(text: &str) -> String {
        match parsed(text) {
            Err(ShardsError::Syntax { origin, message }) => {
                assert_eq!(origin, "shards.toml");
                message
            }
            other => panic!("not a syntax error: {other:?}"),
        }
    }

    #[test]
    fn a_good_file_is_read_sorted_by_name() {
        let config = parsed(
            "epoch = 3\n[servers]\npg-b = \"host=b user=app\"\npg-a = \"postgresql://app:pw@a/app\"\n",
        )
        .unwrap();
        assert_eq!(config.epoch(), 3);
        let servers: Vec<_> = config.servers().collect();
        assert_eq!(servers, [("pg-a", "postgresql://app:pw@a/app"), ("pg-b", "host=b user=app")]);
        assert_eq!(config.url("pg-b"), Some("host=b user=app"));
        assert_eq!(config.url("pg-c"), None);
        assert_eq!(config.locate("{t}:x"), config.locate("{t}:y"));
        assert!(!format!("{config:?}").contains("pw"), "Debug shows no password");
    }

    #[test]
    fn the_same_values_in_code_make_the_same_config_but_for_the_origin() {
        let text = "epoch = 3\n[servers]\npg-b = \"host=b\"\npg-a = \"host=a\"\n";
        let from_code = ShardsConfig::new(3, [("pg-a", "host=a"), ("pg-b", "host=b")]).unwrap();
        let from_text = ShardsConfig::from_toml(text).unwrap();
        assert_eq!(from_code, from_text);
        assert_eq!(from_code.origin(), "(in code)");
    }

    #[test]
    fn a_missing_epoch_or_servers_table_is_refused() {
        assert!(syntax_error("[servers]\na = \"host=a\"\n").contains("epoch"));
        assert!(syntax_error("epoch = 1\n").contains("servers"));
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused_by_name() {
        assert!(syntax_error("epoch = 1\nepcoh = 2\n[servers]\na = \"host=a\"\n").contains("epcoh"));
        assert!(syntax_error("epoch = \"one\"\n[servers]\na = \"host=a\"\n").contains("epoch"));
        let message = syntax_error("epoch = 1\n[servers]\na = 5\n");
        assert!(message.contains("servers.a") || message.contains('a'), "{message}");
    }

    #[test]
    fn a_name_written_twice_is_refused() {
        let message = syntax_error("epoch = 1\n[servers]\na = \"host=a\"\na = \"host=b\"\n");
        assert!(message.contains("duplicate"), "{message}");
        let in_code = ShardsConfig::new(1, [("a", "host=a"), ("a", "host=b")]);
        assert!(matches!(in_code, Err(ShardsError::Map { source: MapError::Duplicate(n), .. }) if n == "a"));
    }

    #[test]
    fn bad_values_are_refused_naming_the_file_and_the_entry() {
        let map_error = |text: &str| match parsed(text) {
            Err(ShardsError::Map { origin, source }) => {
                assert_eq!(origin, "shards.toml");
                source
            }
            other => panic!("not a map error: {other:?}"),
        };
        assert_eq!(map_error("epoch = 0\n[servers]\na = \"host=a\"\n"), MapError::Epoch(0));
        assert_eq!(map_error("epoch = -1\n[servers]\na = \"host=a\"\n"), MapError::Epoch(-1));
        assert_eq!(map_error("epoch = 1\n[servers]\n"), MapError::NoServers);
        assert_eq!(map_error("epoch = 1\n[servers]\n\"pg a\" = \"host=a\"\n"), MapError::Name("pg a".into()));
        let message = parsed("epoch = 1\n[servers]\n\"pg/a\" = \"host=a\"\n").unwrap_err().to_string();
        assert!(message.contains("shards.toml") && message.contains("pg/a"), "{message}");
        match parsed("epoch = 1\n[servers]\na = \"host=a\"\nb = \" \"\n") {
            Err(ShardsError::Server { origin, server, .. }) => {
                assert_eq!((origin.as_str(), server.as_str()), ("shards.toml", "b"))
            }
            other => panic!("not a server error: {other:?}"),
        }
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_it() {
        let error = ShardsConfig::from_file("/nonexistent/shards.toml").unwrap_err();
        assert!(matches!(error, ShardsError::Read { .. }));
        assert!(error.to_string().contains("/nonexistent/shards.toml"));
    }
}
