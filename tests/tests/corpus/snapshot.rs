//! The lease state as a superuser sees it, compared before and after every entry: the view, the
//! internal table and every session's watches; and what one session LISTENs on.

use dlock_tests::Session;

/// What the lease state looks like to a superuser: the view, the internal table's rows that hold
/// a lease and the watch locks of every session, row by row. (A released key's free row stays
/// until it is swept, for the key's next grant to write over: it holds nothing.)
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    view: Vec<String>,
    table: Vec<String>,
    /// The watch locks (`dlock_watch`: advisory, field4 0x6b04 = 27396) held by any session.
    watches: Vec<String>,
}

impl Snapshot {
    /// How many watch locks any session holds.
    pub fn watches(&self) -> usize {
        self.watches.len()
    }
}

/// Reads the lease state (view, table, watch locks) as `superuser`.
pub async fn snapshot(superuser: &Session) -> Snapshot {
    let view = superuser
        .query(
            "SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s', key, owner, fence, hold_count, acquired_at, \
                           expires_at, holder_pid, holder_role, waiters) \
               FROM dlock_locks ORDER BY key",
            &[],
        )
        .await
        .expect("read dlock_locks");
    let table = superuser
        .query("SELECT l::text FROM dlock_internal.lease AS l WHERE l.hold_count > 0 ORDER BY 1", &[])
        .await
        .expect("read dlock_internal.lease");
    let watches = superuser
        .query(
            "SELECT format('pid %s: %s/%s %s granted=%s', pid, classid, objid, mode, granted) \
               FROM pg_catalog.pg_locks \
              WHERE locktype = 'advisory' AND objsubid = 27396 ORDER BY 1",
            &[],
        )
        .await
        .expect("read pg_locks");
    Snapshot {
        view: view.iter().map(|r| r.get(0)).collect(),
        table: table.iter().map(|r| r.get(0)).collect(),
        watches: watches.iter().map(|r| r.get(0)).collect(),
    }
}

/// The channels `session` LISTENs on (only a session itself can tell), in order.
pub async fn listening(session: &Session) -> Vec<String> {
    let rows = session
        .query("SELECT c FROM pg_catalog.pg_listening_channels() AS c ORDER BY 1", &[])
        .await
        .expect("read pg_listening_channels()");
    rows.iter().map(|r| r.get(0)).collect()
}
