//! What `dlock_locks` must show after every call: exactly the model's live leases, one row per
//! holder, with owners masked per role.

use super::rules::{Expiry, Lease};
use super::world::{World, ok};
use super::{ADMIN, Actor, KEYS, ROLES};

/// What `dlock_locks` shows of one lease: key, owner, fence, holds, session-bound, holder pid,
/// role, mode, max_holders.
type ViewRow = (usize, Option<String>, i64, i32, bool, i32, String, String, Option<i32>);

impl World<'_> {
    /// `dlock_locks` (as the superuser) shows exactly the model's live leases, one row each.
    pub(crate) async fn check_view(&self) -> Result<(), String> {
        let rows = ok(
            "read dlock_locks",
            self.superuser
                .query(
                    "SELECT key, owner, fence, hold_count, expires_at = 'infinity', holder_pid, \
                            holder_role::text, waiters, mode, max_holders \
                       FROM dlock_locks WHERE key = ANY($1) ORDER BY key, fence",
                    &[&self.keys],
                )
                .await,
        )?;
        let mut seen: Vec<ViewRow> = Vec::new();
        for row in &rows {
            let key: String = row.get(0);
            let key = self.keys.iter().position(|k| *k == key).expect("filtered on the case's keys");
            let waiters: i32 = row.get(7);
            ensure!(waiters == 0, "dlock_locks shows {waiters} waiters on k{key}; nobody waits");
            seen.push((
                key,
                row.get(1),
                row.get(2),
                row.get(3),
                row.get(4),
                row.get(5),
                row.get(6),
                row.get(8),
                row.get(9),
            ));
        }
        // The case's keys sort as k0 < k1 < k2, so the model's order is the view's.
        let expected: Vec<(usize, &Lease)> =
            (0..KEYS).flat_map(|key| self.model.leases[key].iter().map(move |l| (key, l))).collect();
        let describe = || {
            let model: Vec<_> =
                expected.iter().map(|(k, l)| (k, l.holder, l.fence, l.hold_count, l.mode)).collect();
            format!("dlock_locks shows {seen:?}, the model has {model:?}")
        };
        ensure!(seen.len() == expected.len(), "{}", describe());
        for (row, (m_key, lease)) in seen.iter().zip(&expected) {
            let (key, owner, fence, hold_count, infinite, pid, role, mode, max_holders) = row;
            ensure!(
                key == m_key
                    && owner.as_deref() == Some(self.owners[lease.holder.owner].as_str())
                    && *fence == lease.fence
                    && *hold_count == lease.hold_count
                    && mode == lease.mode.shown()
                    && *max_holders == lease.mode.permits(),
                "{}",
                describe()
            );
            ensure!(
                role == ROLES[lease.holder.role],
                "k{key}: holder_role {role}, expected {}",
                ROLES[lease.holder.role]
            );
            ensure!(
                *infinite == (lease.expiry == Expiry::Session),
                "k{key}: expires_at infinite = {infinite}; {}",
                describe()
            );
            if lease.expiry == Expiry::Session {
                let bound = self.sessions[lease.holder.session()].pid();
                ensure!(
                    *pid == bound,
                    "k{key}: a session-bound lease shows holder_pid {pid}, its session is {bound}"
                );
            }
        }
        Ok(())
    }

    /// Each role sees every live lease, but the owner only of its own role's (all for the admin).
    pub(crate) async fn check_owner_masking(&self) -> Result<(), String> {
        for (role, name) in ROLES.iter().enumerate() {
            let viewer = &self.sessions[Actor { role, owner: 0 }.session()];
            let rows = ok(
                "read dlock_locks",
                viewer
                    .query(
                        "SELECT key, owner FROM dlock_locks WHERE key = ANY($1) ORDER BY key, fence",
                        &[&self.keys],
                    )
                    .await,
            )?;
            let seen: Vec<(String, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            let expected: Vec<(String, Option<String>)> = (0..KEYS)
                .flat_map(|key| self.model.leases[key].iter().map(move |l| (key, l)))
                .map(|(key, l)| {
                    let visible = l.holder.role == role || role == ADMIN;
                    (self.keys[key].clone(), visible.then(|| self.owners[l.holder.owner].clone()))
                })
                .collect();
            ensure!(seen == expected, "{name} sees {seen:?} in dlock_locks, expected {expected:?}");
        }
        Ok(())
    }
}
