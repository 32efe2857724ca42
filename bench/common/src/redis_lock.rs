//! The Redis lock dlock is measured against, Redisson-style: `SET key owner NX PX ttl` takes
//! it; these scripts give it back or extend it only for its owner (and a release publishes on
//! the key's channel, for waiters subscribed to it).

/// `KEYS[1]` the key, `ARGV[1]` the owner: deletes the key if the owner holds it (1, else 0).
pub const RELEASE: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0";

/// As [`RELEASE`], and publishes the owner on channel `KEYS[2]` when it deleted the key.
pub const RELEASE_AND_PUBLISH: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
return 0";

/// `KEYS[1]` the key, `ARGV[1]` the owner, `ARGV[2]` the ttl in ms: extends the owner's lock.
pub const RENEW: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0";
