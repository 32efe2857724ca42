//! Multi-key grants are all or nothing: granted with a fence for every key, every key live at
//! once whenever the worker looked while the grant was surely live, and a refused request leaves
//! no key held. (Other holders of each key are judged against its keys in `holders`.)

use std::collections::HashMap;

use super::{MARGIN, Outcome, Rule};
use crate::history::{Grant, MultiGrant, NotGranted};

/// Checks every multi-key grant and every refused multi-key request.
pub fn multi_key(grants: &[Grant], multi: &[MultiGrant], not_granted: &[NotGranted], out: &mut Outcome) {
    out.multi_grants = multi.len();
    out.multi_not_granted = not_granted.len();
    let by_lease: HashMap<(&str, &str, i64), &Grant> =
        grants.iter().map(|g| ((g.owner.as_str(), g.key.as_str(), g.fence), g)).collect();
    for grant in multi {
        if grant.fences.len() != grant.keys.len() || grant.fences.iter().any(Option::is_none) {
            out.violation(
                Rule::PartialMultiKey,
                format!(
                    "multi-key grant to {} (worker {}) of keys {:?} answered fences {:?}",
                    grant.owner, grant.worker, grant.keys, grant.fences
                ),
            );
            continue;
        }
        for (at, held) in &grant.checks {
            let lease = |i: usize| {
                let fence = grant.fences[i]?;
                by_lease.get(&(grant.owner.as_str(), grant.keys[i].as_str(), fence)).copied()
            };
            // Keys found gone while their lease was surely live and not being released.
            let lost: Vec<&str> = (0..grant.keys.len().min(held.len()))
                .filter(|&i| !held[i])
                .filter(|&i| lease(i).is_some_and(|g| *at < g.live_until - MARGIN && *at < g.let_go_by()))
                .map(|i| grant.keys[i].as_str())
                .collect();
            if lost.is_empty() {
                continue;
            }
            let kept: Vec<&str> =
                grant.keys.iter().zip(held).filter(|(_, h)| **h).map(|(k, _)| k.as_str()).collect();
            let (rule, what) = if kept.is_empty() {
                (Rule::PrematureLoss, "every key gone")
            } else {
                (Rule::PartialMultiKey, "some keys gone, others held")
            };
            out.violation(
                rule,
                format!(
                    "multi-key grant to {} (worker {}, granted by {:.6}): {what} by {at:.6} while live: \
                     held {kept:?}, gone {lost:?}",
                    grant.owner, grant.worker, grant.granted_by
                ),
            );
        }
    }
    for refused in not_granted.iter().filter(|r| !r.left_held.is_empty()) {
        out.violation(
            Rule::PartialMultiKey,
            format!(
                "multi-key request of {} (worker {}) for {:?} answered NULL, but its owner held {:?} at {:.6}",
                refused.owner, refused.worker, refused.keys, refused.left_held, refused.at
            ),
        );
    }
}
