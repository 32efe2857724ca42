//! Test harness: a throwaway PostgreSQL cluster with dlock installed, sessions on it, and the
//! dlock SQL API as typed calls.
//!
//! Every test binary shares one cluster (`Cluster::shared()`), except tests that crash or
//! restart the server, which start their own (`Cluster::start_new`). Tests run four at a time,
//! so each uses keys and owners prefixed with its own name (`key`, `owner`).

mod check;
mod cluster;
mod listener;
mod pgbouncer;
mod ports;
mod replica;
mod session;
mod tls;
mod tls_cluster;

pub use check::{
    CLOCK_SLACK, assert_between, eventually, expect_sqlstate, finish, key, owner, wait_for_waiters,
    wait_for_watchers, within,
};
pub use cluster::{Cluster, StopMode, sql_edition, workspace_root};
pub use listener::Listener;
pub use pgbouncer::Pgbouncer;
pub use replica::{
    Standby, alter_system, disconnect_standby, require_sync_standby, wait_for_replay, wait_for_streaming,
};
pub use session::{Attempt, LeaseRow, Session};
pub use tls_cluster::{SERVER_NAMES, TlsCluster};
pub use tokio_postgres::error::SqlState;
pub use tokio_postgres::{Client, Error, NoTls};
