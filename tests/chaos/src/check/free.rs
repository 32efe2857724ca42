//! `dlock_wait_free` answers: one that says the key is free while a single lease surely held it
//! from before the call began until after it answered is wrong (the key was never free in
//! between). An answer of "still held", or one the history cannot contradict, passes.

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
            if let Some((from, to)) = held(lease).filter(|&(from, to)| from <= answer.lb && to >= answer.ub) {
                out.violation(
                    Rule::FreeWhileHeld,
                    format!(
                        "key {}: dlock_wait_free asked at {:.6} and answered free by {:.6} (worker {}), while \
                         fence {} ({}, {:?}, worker {}) surely held it over [{from:.6}, {to:.6}]",
                        answer.key, answer.lb, answer.ub, answer.worker, lease.fence, lease.owner, lease.mode,
                        lease.worker
                    ),
                );
            }
        }
    }
}
