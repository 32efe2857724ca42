//! What a run's check found: the counts the report prints and the violations, per rule.

use std::collections::BTreeMap;

use crate::history::Primitive;

/// What the checker looked at and what it found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub grants: usize,
    pub intervals: usize,
    pub accepted_writes: usize,
    pub refused_writes: usize,
    /// Refused writes of a holder past its lease (the fence doing its job).
    pub late_writes_refused: usize,
    /// Writes past the writer's lease that the resource took because no newer fence had reached
    /// it yet (inherent to fencing at the resource; never while the newer holder was writing).
    pub late_writes_accepted: usize,
    /// Of those, the ones taken after a newer fence had been granted but not yet presented.
    pub late_writes_accepted_after_newer_grant: usize,
    /// Of the leases held by workers paused past their ttl: how many met the fence after
    /// waking (a write refused), wrote late unrefused (no newer fence had reached the resource),
    /// or wrote nothing late (e.g. the pause ended within the hold).
    pub paused_refused: usize,
    pub paused_accepted: usize,
    pub paused_no_late_write: usize,
    /// Grants that had to survive a crash, and did.
    pub grants_across_crashes: usize,
    /// Session-bound grants.
    pub bound_grants: usize,
    /// Per kill -9 of a session-bound holder: the delay from the kill to the key's next grant.
    pub bound_kill_delays: Vec<f64>,
    /// Kills of a session-bound holder not judged: its release had begun before the kill, or the
    /// probe was cut short (a crash or failover meanwhile).
    pub bound_kills_released: usize,
    pub bound_kills_unjudged: usize,
    /// Kills of a session-bound holder whose key had passed on before the kill: its session
    /// had ended earlier, by pg_terminate_backend of its dlock backend or a crash (explained) or not.
    pub bound_lost_terminated: usize,
    pub bound_lost_unexplained: Vec<String>,
    pub violations: Vec<String>,
    /// How many violations of each rule.
    pub by_rule: BTreeMap<Rule, usize>,
    /// Multi-key requests answered NULL (each checked for keys left held), and `dlock_leader`
    /// answers compared.
    pub multi_not_granted: usize,
    /// Multi-key grants (each also counted per key in `grants`).
    pub multi_grants: usize,
    /// Per key with shared leases: the most shared holders surely holding it at one instant
    /// (a semaphore's check means something only where this reached its size).
    pub most_shared: BTreeMap<String, usize>,
    /// Grants per primitive (a multi-key grant once per key).
    pub per_primitive: BTreeMap<Primitive, usize>,
    pub leader_observations: usize,
    /// `dlock_wait_free` answers judged (those that said free) and all of them.
    pub free_answers: (usize, usize),
}

impl Outcome {
    /// Records a violation of `rule`.
    pub fn violation(&mut self, rule: Rule, text: String) {
        *self.by_rule.entry(rule).or_default() += 1;
        self.violations.push(text);
    }
}

/// The rule a violation breaks (the report counts violations per rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// Two exclusive holders (exclusive leases, multi-key grants) of one key at once.
    TwoExclusive,
    /// An exclusive holder beside a shared one.
    ExclusiveBesideShared,
    /// More shared holders at once than a semaphore's size.
    SemaphoreOverfull,
    /// Two leaders of one election at once.
    TwoLeaders,
    /// Terms (or any fences) that went back, or a leader shown that was not the one leading.
    TermOrder,
    /// A multi-key grant seen with some of its keys only, or a refused one that left keys held.
    PartialMultiKey,
    FenceUnique,
    FenceOrder,
    /// A lease taken away while surely live (refused write, release or check).
    PrematureLoss,
    ResourceFencing,
    /// Leases or sentinels lost in a crash or failover.
    Durability,
    BoundHandover,
    /// `dlock_wait_free` said free while one lease surely held the key throughout the call.
    FreeWhileHeld,
}

impl Rule {
    pub const ALL: [Rule; 13] = [
        Rule::TwoExclusive,
        Rule::ExclusiveBesideShared,
        Rule::SemaphoreOverfull,
        Rule::TwoLeaders,
        Rule::TermOrder,
        Rule::PartialMultiKey,
        Rule::FenceUnique,
        Rule::FenceOrder,
        Rule::PrematureLoss,
        Rule::ResourceFencing,
        Rule::Durability,
        Rule::BoundHandover,
        Rule::FreeWhileHeld,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Rule::TwoExclusive => "two exclusive holders at once",
            Rule::ExclusiveBesideShared => "exclusive beside shared",
            Rule::SemaphoreOverfull => "semaphore over its size",
            Rule::TwoLeaders => "two leaders at once",
            Rule::TermOrder => "terms out of order / wrong leader shown",
            Rule::PartialMultiKey => "partial multi-key grant",
            Rule::FenceUnique => "fence granted twice",
            Rule::FenceOrder => "fences out of grant order",
            Rule::PrematureLoss => "lease lost while live",
            Rule::ResourceFencing => "resource fencing",
            Rule::Durability => "lost in a crash or failover",
            Rule::BoundHandover => "session-bound hand-over",
            Rule::FreeWhileHeld => "said free while held",
        }
    }
}
