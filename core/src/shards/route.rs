//! Which server a key belongs to: rendezvous (highest-random-weight) hashing over the servers'
//! names, on the key's hash tag. Adding or removing one server moves only the keys that gain
//! or lose it, about 1/N of them; renaming a server moves all of its keys (names are identity).

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Longest server name (it is stored with every server's map and hashed on every route).
pub const MAX_NAME_BYTES: usize = 63;

/// Seed of the routing hash: "dlock_sh". Part of the wire format: clients and servers of one
/// deployment must agree, so it never changes within a major version.
const SEED: u64 = 0x646c_6f63_6b5f_7368;

/// The part of `key` that is routed: the text between the first `{` and the first `}` after
/// it, if that is not empty (`{tenant-7}:report` routes as `tenant-7`, as in Redis Cluster);
/// otherwise the whole key.
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.find('}')
            && close > 0
        {
            return &rest[..close];
        }
    }
    key
}

/// The weight of `server` for a routed `tag`: the server's name and the tag, separated by a
/// zero byte (names cannot contain one), hashed together. From a buffer on the stack (a
/// sharded client routes every call; names are at most 63 bytes, keys 1 kB): a small one for
/// the usual short keys, since zeroing the large one would cost more than the hash.
pub fn weight(server: &str, tag: &str) -> u64 {
    /// A longest name, the zero byte and a longest key.
    const ROOM: usize = MAX_NAME_BYTES + 1 + crate::limits::MAX_KEY_BYTES;
    match server.len() + 1 + tag.len() {
        ..=128 => weight_in::<128>(server, tag),
        129..=ROOM => weight_in::<ROOM>(server, tag),
        _ => {
            let mut bytes = Vec::with_capacity(server.len() + 1 + tag.len());
            bytes.extend_from_slice(server.as_bytes());
            bytes.push(0);
            bytes.extend_from_slice(tag.as_bytes());
            xxh3_64_with_seed(&bytes, SEED)
        }
    }
}

/// [`weight`] from a buffer of `N` bytes, which the name, the zero byte and the tag fit.
fn weight_in<const N: usize>(server: &str, tag: &str) -> u64 {
    let len = server.len() + 1 + tag.len();
    let mut bytes = [0u8; N];
    bytes[..server.len()].copy_from_slice(server.as_bytes());
    bytes[server.len() + 1..len].copy_from_slice(tag.as_bytes());
    xxh3_64_with_seed(&bytes[..len], SEED)
}

/// The position and name of the server of `key`: the highest weight, ties broken by the
/// greater name (so the answer never depends on the order servers are listed in).
fn best<'a>(servers: impl IntoIterator<Item = &'a str>, key: &str) -> Option<(usize, &'a str)> {
    let tag = hash_tag(key);
    servers.into_iter().enumerate().max_by_key(|&(_, server)| (weight(server, tag), server))
}

/// The server of `key` among `servers` (`None` if there are none).
///
/// ```
/// use dlock_core::shards::route::owner;
/// let servers = ["a", "b", "c"];
/// // Pinned: every client and server of a deployment must route a key alike.
/// assert_eq!(owner(servers.iter().copied(), "orders:42"), Some("a"));
/// // A hash tag routes a family of keys together.
/// assert_eq!(owner(servers.iter().copied(), "{t7}:a"), owner(servers.iter().copied(), "{t7}:b"));
/// ```
pub fn owner<'a>(servers: impl IntoIterator<Item = &'a str>, key: &str) -> Option<&'a str> {
    best(servers, key).map(|(_, server)| server)
}

/// The position in `servers` of the server of `key`, as [`owner`] picks it.
pub fn owner_index<'a>(servers: impl IntoIterator<Item = &'a str>, key: &str) -> Option<usize> {
    best(servers, key).map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hash_tags_as_redis_cluster_reads_them() {
        assert_eq!(hash_tag("{tenant-7}:report"), "tenant-7");
        assert_eq!(hash_tag("report:{tenant-7}"), "tenant-7");
        assert_eq!(hash_tag("{}:report"), "{}:report"); // empty tag: the whole key
        assert_eq!(hash_tag("{a}{b}"), "a"); // the first one
        assert_eq!(hash_tag("x{y"), "x{y"); // unclosed
        assert_eq!(hash_tag("}{z}"), "z");
        assert_eq!(hash_tag(""), "");
    }

    #[test]
    fn the_weight_is_pinned() {
        // Clients and servers of every version must route alike.
        assert_eq!(weight("pg-a", "orders:42"), 0xbbec_8cfe_f242_53c3);
    }

    #[test]
    fn no_servers_no_owner() {
        assert_eq!(owner([], "k"), None);
    }

    #[test]
    fn keys_spread_over_the_servers() {
        let servers = ["s1", "s2", "s3"];
        let mut counts = [0usize; 3];
        for i in 0..30_000 {
            let key = format!("key:{i}");
            let o = owner(servers.iter().copied(), &key).unwrap();
            counts[servers.iter().position(|s| *s == o).unwrap()] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "uneven spread: {counts:?}");
        }
    }

    proptest! {
        // The order servers are listed in never changes a key's server.
        #[test]
        fn order_does_not_matter(key in ".{0,40}", mut names in proptest::collection::btree_set("[a-z]{1,6}", 1..8)) {
            let forward: Vec<String> = std::mem::take(&mut names).into_iter().collect();
            let mut backward = forward.clone();
            backward.reverse();
            prop_assert_eq!(owner(forward.iter().map(String::as_str), &key), owner(backward.iter().map(String::as_str), &key));
        }

        // The allocation-free index names the same owner, long keys and names included.
        #[test]
        fn owner_index_agrees_with_owner(key in ".{0,40}|.{100,300}|.{1100,1200}", names in proptest::collection::btree_set("[a-z]{1,6}|[a-z]{60,70}", 1..8)) {
            let all: Vec<&str> = names.iter().map(String::as_str).collect();
            let i = owner_index(all.iter().copied(), &key).unwrap();
            prop_assert_eq!(Some(all[i]), owner(all.iter().copied(), &key));
            // Whichever buffer it hashes from, the weight is the hash of name, zero byte, tag.
            let tag = hash_tag(&key);
            let bytes = [all[i].as_bytes(), &[0], tag.as_bytes()].concat();
            prop_assert_eq!(weight(all[i], tag), xxh3_64_with_seed(&bytes, SEED));
        }

        // Adding a server moves a key only to that server; removing one moves only its keys.
        #[test]
        fn one_server_more_moves_only_keys_to_it(key in ".{0,40}", names in proptest::collection::btree_set("[a-z]{1,6}", 2..8)) {
            let all: Vec<&str> = names.iter().map(String::as_str).collect();
            let (added, before) = all.split_last().unwrap();
            let old = owner(before.iter().copied(), &key).unwrap();
            let new = owner(all.iter().copied(), &key).unwrap();
            prop_assert!(new == old || new == *added);
        }
    }
}
