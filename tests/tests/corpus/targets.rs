//! The keys bad calls aim at: one held by a TTL lease, one by a session-bound lease, one free.

use dlock_tests::{Session, key, owner};

/// A key and owner a bad call aims at: held by a TTL lease, by a session-bound lease, or free.
pub struct Target {
    pub name: &'static str,
    /// Held by a session-bound lease.
    pub session_bound: bool,
    pub key: String,
    pub owner: String,
    /// The fence of its lease (any fence for a free key).
    pub fence: i64,
}

/// Takes the victims: a TTL lease and a session-bound one (on `holder`'s session), both of
/// role `USER`; returns them and a free key.
pub async fn victims(test: &str, user: &Session, holder: &Session) -> [Target; 3] {
    let ttl_owner = owner(test, "ttl-holder");
    let bound_owner = owner(test, "bound-holder");
    let ttl_key = key(test, "held-by-ttl");
    let bound_key = key(test, "held-session-bound");
    let ttl_fence = user.try_acquire(&ttl_key, &ttl_owner, "1 hour").await.unwrap().expect("victim granted");
    let bound_fence =
        holder.acquire(&bound_key, &bound_owner, None, Some("0")).await.unwrap().expect("granted");
    [
        Target { name: "TTL-held", session_bound: false, key: ttl_key, owner: ttl_owner, fence: ttl_fence },
        Target {
            name: "session-bound",
            session_bound: true,
            key: bound_key,
            owner: bound_owner,
            fence: bound_fence,
        },
        Target {
            name: "free",
            session_bound: false,
            key: key(test, "free"),
            owner: owner(test, "nobody"),
            fence: ttl_fence,
        },
    ]
}

pub async fn release_victims(user: &Session, targets: &[Target]) {
    for t in &targets[..2] {
        assert!(user.release(&t.key, &t.owner).await.unwrap(), "release victim {}", t.key);
    }
}
