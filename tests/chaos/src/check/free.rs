//! `dlock_wait_free` answers: one that says the key is free while a single lease surely held it,
//! committed, from before the call began until after it answered is wrong (the key was never
//! free in between). A grant is surely committed only from the first later statement of its
//! worker (a check, a write, a release): its own answer comes before its commit, and a
//! `dlock_wait_free` that reads in between rightly finds the key free. An answer of "still
//! held", or one the history cannot contradict, passes.

use super::{Outcome, Rule, held, per_key};
use crate::history::{FreeAnswer, Grant};

/// Checks every `dlock_wait_free` answer of "free" against the leases of its key.
pub fn free_answers(grants: &[Grant], answers: &[FreeAnswer], out: &mut Outcome) {
    let by_key = per_key(grants);
    let said_free: Vec<&FreeAnswer> = answers.iter().filter(|a| a.free).collect();
    out.free_answers = (said_free.len(), answers.len());
    for answer in said_free {
        let Some(leases) = by_key.get(answer.key.as_str()) else { continue };
        for lease in leases {
            let committed = |(_, to): (f64, f64)| visible_from(lease).map(|from| (from, to));
            if let Some((from, to)) =
                held(lease).and_then(committed).filter(|&(from, to)| from <= answer.lb && to >= answer.ub)
            {
                out.violation(
                    Rule::FreeWhileHeld,
                    format!(
                        "key {}: dlock_wait_free asked at {:.6} and answered free by {:.6} (worker {}), while \
                         fence {} ({}, {:?}, worker {}) surely held it, committed, over [{from:.6}, {to:.6}]",
                        answer.key, answer.lb, answer.ub, answer.worker, lease.fence, lease.owner, lease.mode,
                        lease.worker
                    ),
                );
            }
        }
    }
}

/// The first server time the lease's worker recorded after the grant had committed: the server
/// times of its checks and writes, and the start of its release calls (`None`: none recorded).
fn visible_from(lease: &Grant) -> Option<f64> {
    let later = lease.checks.iter().map(|c| c.0);
    let later = later.chain(lease.writes.iter().map(|w| w.0));
    later.chain(lease.releases.iter().filter_map(|r| r.lb)).reduce(f64::min)
}
