//! Keys over several servers: the shard map's functions. Changing the map, and asking about the
//! leases a move waits for, is for superusers and `dlock_admin` members (an install refuses
//! every other server's keys here); the map itself is no secret, so anyone may read it.

use crate::api::convert::{micros, timestamptz};
use crate::pg::backend::now;
use crate::pg::report::OrRaise;
use crate::pg::role;
use crate::shards::{admin, state};
use dlock_core::DlockError;
use dlock_core::shards::Gate;
use pgrx::prelude::*;

fn admin_only(fcinfo: pg_sys::FunctionCallInfo, function: &'static str) {
    if !role::is_admin(role::caller(fcinfo)) {
        Err::<(), _>(DlockError::NotAdmin { function }).or_raise(function);
    }
}

fn servers(arg: &'static str, servers: Option<Array<&str>>) -> Result<Vec<String>, DlockError> {
    let servers = servers.ok_or(dlock_core::ArgError::Null(arg))?;
    servers
        .iter()
        .map(|s| s.map(str::to_owned).ok_or(dlock_core::ArgError::NullElement(arg).into()))
        .collect()
}

/// Installs shard map `epoch` (`servers`) on this server, which is `me` in it, in place of map
/// `previous_epoch` (`previous_servers`; both NULL for a deployment's first map). True when
/// installed, false when this server had it already. `force` replaces a map whose move is not
/// complete here, or renames this server.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_shard_install(
    me: Option<&str>,
    epoch: Option<i64>,
    servers: Option<Array<&str>>,
    previous_epoch: default!(Option<i64>, "NULL"),
    previous_servers: default!(Option<Array<&str>>, "NULL"),
    force: default!(Option<bool>, false),
    fcinfo: pg_sys::FunctionCallInfo,
) -> bool {
    const F: &str = "dlock_shard_install";
    admin_only(fcinfo, F);
    let me = dlock_core::args::required("me", me).or_raise(F);
    let epoch = dlock_core::args::required("epoch", epoch).or_raise(F);
    let servers = self::servers("servers", servers).or_raise(F);
    let previous = match (previous_epoch, previous_servers) {
        (None, None) => None,
        (Some(epoch), list @ Some(_)) => Some((epoch, self::servers("previous_servers", list).or_raise(F))),
        _ => Err(DlockError::BadShardMap(
            "previous_epoch and previous_servers are given together, or neither".into(),
        ))
        .or_raise(F),
    };
    admin::install(me, epoch, servers, previous, force.unwrap_or(false)).or_raise(F)
}

/// This server's shard map: its name in it, the map, the map it replaced, since when, and
/// whether every gate of the change is open. No row: this server has no map.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn dlock_shard_status() -> TableIterator<
    'static,
    (
        name!(me, String),
        name!(epoch, i64),
        name!(servers, Vec<String>),
        name!(previous_epoch, Option<i64>),
        name!(previous_servers, Option<Vec<String>>),
        name!(complete, bool),
    ),
> {
    state::pin();
    let gates = state::current();
    let row = gates.map().map(|map| {
        (
            gates.me().to_owned(),
            map.epoch(),
            map.servers().to_vec(),
            gates.previous().map(|p| p.epoch()),
            gates.previous().map(|p| p.servers().to_vec()),
            gates.complete(now()),
        )
    });
    TableIterator::new(row)
}

/// The gates of this server's last map change: one per server of the previous map whose keys
/// may have moved here, when it opens (NULL: closed until that server is drained or its timer
/// starts), and whether it is open now.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn dlock_shard_gates() -> TableIterator<
    'static,
    (name!(from_server, String), name!(opens_at, Option<TimestampWithTimeZone>), name!(open, bool)),
> {
    state::pin();
    let gates = state::current();
    let now = now();
    let rows: Vec<_> = gates
        .gates()
        .iter()
        .map(|(from, gate)| match gate {
            Gate::Closed => (from.clone(), None, false),
            Gate::OpensAt(t) => (from.clone(), Some(timestamptz(*t)), *t <= now),
        })
        .collect();
    TableIterator::new(rows)
}

/// How many keys this server gave away under its map `epoch` are still held here (or held back
/// by a lock-delay): the servers that gained them wait for 0.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_shard_draining(epoch: Option<i64>, fcinfo: pg_sys::FunctionCallInfo) -> i64 {
    const F: &str = "dlock_shard_draining";
    admin_only(fcinfo, F);
    let epoch = dlock_core::args::required("epoch", epoch).or_raise(F);
    admin::draining(epoch).or_raise(F)
}

/// Opens the gate on keys from `from_server` under map `epoch`: that server answered 0 to
/// `dlock_shard_draining(epoch)`. False when it was open already.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_shard_drained(
    from_server: Option<&str>,
    epoch: Option<i64>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> bool {
    const F: &str = "dlock_shard_drained";
    admin_only(fcinfo, F);
    let from = dlock_core::args::required("from_server", from_server).or_raise(F);
    let epoch = dlock_core::args::required("epoch", epoch).or_raise(F);
    admin::drained(from, epoch).or_raise(F)
}

/// Starts the timer of the gate on keys from `from_server` under map `epoch`, which cannot be
/// reached: the gate opens `delay` from now (its longest lease and lock-delay: twice its
/// `dlock.max_ttl`). When it opens.
#[pg_extern(volatile, parallel_unsafe)]
fn dlock_shard_timer(
    from_server: Option<&str>,
    epoch: Option<i64>,
    delay: Option<Interval>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<TimestampWithTimeZone> {
    const F: &str = "dlock_shard_timer";
    admin_only(fcinfo, F);
    let from = dlock_core::args::required("from_server", from_server).or_raise(F);
    let epoch = dlock_core::args::required("epoch", epoch).or_raise(F);
    let delay = dlock_core::args::required("delay", micros(delay)).or_raise(F);
    if delay < 0 {
        Err::<(), _>(dlock_core::ArgError::Negative("delay")).or_raise(F);
    }
    let delay = delay.min(i128::from(i64::MAX)) as i64;
    admin::timer(from, epoch, delay).or_raise(F).map(timestamptz)
}
