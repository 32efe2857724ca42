//! Every error of the contract, as data: what was refused and why. The extension raises each
//! with its SQLSTATE and a hint (`extension/src/pg/report.rs`); the message is this `Display`.

use thiserror::Error;

/// Why an argument was refused (22004 for NULL, 22023 for the rest).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArgError {
    /// A required argument was NULL.
    #[error("{0} must not be NULL")]
    Null(&'static str),
    /// A text argument was empty.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// A text argument was longer than allowed.
    #[error("{arg} is {len} bytes long, the limit is {max} bytes")]
    TooLong { arg: &'static str, len: usize, max: usize },
    /// A ttl that is zero or negative.
    #[error("{0} must be positive")]
    NotPositive(&'static str),
    /// A ttl above `dlock.max_ttl`.
    #[error("{0} exceeds dlock.max_ttl")]
    AboveMax(&'static str),
    /// A fast-mode ttl above `dlock.fast_max_ttl`.
    #[error("{0} exceeds dlock.fast_max_ttl")]
    AboveFastMax(&'static str),
    /// A negative duration.
    #[error("{0} must not be negative")]
    Negative(&'static str),
    /// A semaphore of zero or fewer permits.
    #[error("max_holders must be at least 1, not {0}")]
    NoPermits(i32),
    /// An array with no element.
    #[error("{0} must not be empty")]
    EmptyArray(&'static str),
    /// An array with more elements than allowed.
    #[error("{arg} has {len} elements, the limit is {max}")]
    TooMany { arg: &'static str, len: usize, max: usize },
    /// An array element given twice.
    #[error("{arg} lists {value:?} twice")]
    Duplicate { arg: &'static str, value: String },
    /// A NULL element of an array.
    #[error("{0} must not contain NULL")]
    NullElement(&'static str),
    /// An array of more than one dimension.
    #[error("{arg} must be a one-dimensional array, not {ndim}-dimensional")]
    Dimensions { arg: &'static str, ndim: i32 },
}

/// Why a new fast lease is refused although the table has room: its role or its database holds
/// its share of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// The role holds `held` entries, its share being `max`.
    Role { held: i64, max: i64 },
    /// The database holds `held` entries, its share being `max`.
    Database { held: i64, max: i64 },
}

/// A refused call.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DlockError {
    /// A bad argument.
    #[error(transparent)]
    Arg(#[from] ArgError),
    /// The right owner string presented by another role (42501).
    #[error("permission denied to {action} a lease taken by another role")]
    ForeignRole { action: &'static str },
    /// A function for `dlock_admin` members called by someone else (42501).
    #[error("permission denied for {function}")]
    NotAdmin { function: &'static str },
    /// The owner holds the key in the other mode: no silent upgrade or downgrade (0A000).
    #[error(
        "{owner:?} holds {held} on this key and cannot take {wanted} on it too (no upgrade or downgrade)"
    )]
    ModeConflict { owner: String, held: &'static str, wanted: &'static str },
    /// A semaphore's holders hold it with another number of permits (22023).
    #[error("the key's holders hold it with max_holders {held}, not {asked}")]
    SizeMismatch { held: String, asked: String },
    /// `dlock_holds` on another role's live lease by a role not trusted to fence (42501).
    #[error("permission denied to check the fence of a lease taken by another role")]
    NotFencer,
    /// An unbounded wait for a lease bound to the waiting session itself (40P01).
    #[error("deadlock detected: the key is held by a lease bound to this same session")]
    SelfDeadlock,
    /// `dlock_wait_free` on a key this very session holds a lease of (55006): it could not
    /// become free while the session waits.
    #[error(
        "this session holds a lease of the key itself (owner {owner:?}): it cannot become free while this session waits for it"
    )]
    HeldHere { owner: String },
    /// PREPARE TRANSACTION of a transaction whose dlock work cannot outlive its session
    /// (0A000).
    #[error("cannot PREPARE a transaction that {what}")]
    NoPrepare { what: &'static str },
    /// Fast mode without `shared_preload_libraries = 'dlock'` (55000).
    #[error("fast mode needs shared_preload_libraries = 'dlock'")]
    NotPreloaded,
    /// `DROP EXTENSION dlock` ended this wait (55000).
    #[error("the extension is being dropped: DROP EXTENSION dlock ended this wait")]
    Dropping,
    /// Fast mode in a second dlock library of a process, which has no shared memory (55000).
    #[error(
        "fast mode is off in this backend: it runs a dlock library other than the one the server started with"
    )]
    SecondLibrary,
    /// Fast mode on a standby (25006).
    #[error("fast-mode leases cannot be taken on a standby")]
    OnStandby,
    /// No room for another fast lease (53400).
    #[error("the fast lease table is full ({max} live leases)")]
    FastTableFull { max: usize },
    /// The role or the database holds its share of the fast table (53400).
    #[error("{}", share_message(.share, .role))]
    FastShare { share: Share, role: String },
    /// The library is loaded in a database whose dlock tables are missing: the extension was
    /// dropped under a session, or never created there (55000).
    #[error("the extension's tables are missing in this database")]
    NotInstalled,
    /// The database's extension is still an earlier release, whose tables cannot hold what
    /// this call asks for (55000).
    #[error("this database's dlock is {release}, which has exclusive leases only")]
    NeedsUpdate { release: &'static str },
    /// A session still holds the binding of a fence from before `DROP EXTENSION dlock`, which
    /// the extension created again hands out anew (55006).
    #[error(
        "fence {fence} is still bound to a session that held a session-bound lease before DROP EXTENSION dlock"
    )]
    StaleBinding { fence: i64 },
    /// Fast-mode fences come from the WAL position, which passed their last epoch (54000).
    #[error("fast-mode fences are exhausted (the WAL position passed 2^59 bytes)")]
    FencesExhausted,
    /// A lease row that dlock could not have written: a NULL where a value must be, a value of
    /// another type, an unknown lease kind (XX001).
    #[error("the lease table holds what dlock never writes: {what}")]
    Corrupted { what: String },
    /// A key this server does not own under its shard map (0F001): the client routes with an
    /// older map than the server's (it refreshes), or the key moved away from this server and
    /// its lease here may not be renewed.
    #[error(
        "key {key:?} belongs to server {owner:?} under shard map epoch {epoch}, not to this server ({me:?})"
    )]
    NotMine { key: String, owner: String, me: String, epoch: i64 },
    /// The client routes with a newer shard map than this server's (0F000): this server may not
    /// know yet that it lost the key.
    #[error("this server has shard map epoch {have}, older than the caller's epoch {given}")]
    MapBehind { have: i64, given: i64 },
    /// A shard map that is not a valid map, or a server name it does not name (22023).
    #[error("bad shard map: {0}")]
    BadShardMap(String),
    /// A shard map, a drain or a timer this server's state refuses (55000): not newer than
    /// its map, a move still in progress, another epoch than this server's.
    #[error("{0}")]
    ShardState(String),
    /// Fast mode on a server with a shard map (0A000): its fences come from the WAL position
    /// and cannot carry the map's epoch.
    #[error("fast-mode leases are not available on a server with a shard map")]
    FastSharded,
    /// A broken invariant of dlock's own code, never the caller's doing (XX000).
    #[error("internal error: {what}")]
    Internal { what: String },
}

fn share_message(share: &Share, role: &str) -> String {
    match share {
        Share::Role { held, max } => format!(
            "role {role} holds {held} fast leases, its share of the fast lease table \
             (dlock.fast_max_leases_per_role = {max})"
        ),
        Share::Database { held, max } => format!(
            "this database holds {held} fast leases, its share of the fast lease table \
             (dlock.fast_max_leases_per_database = {max})"
        ),
    }
}

impl Share {
    /// The setting that sets this share.
    pub fn setting(&self) -> &'static str {
        match self {
            Share::Role { .. } => "dlock.fast_max_leases_per_role",
            Share::Database { .. } => "dlock.fast_max_leases_per_database",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_argument_and_the_limit() {
        let e = DlockError::from(ArgError::TooLong { arg: "key", len: 1025, max: 1024 });
        assert_eq!(e.to_string(), "key is 1025 bytes long, the limit is 1024 bytes");
        let e = DlockError::FastShare { share: Share::Database { held: 30, max: 30 }, role: "a".into() };
        assert!(e.to_string().contains("dlock.fast_max_leases_per_database = 30"), "{e}");
    }
}
