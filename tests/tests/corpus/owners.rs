//! Calls that are well-formed but not the holder's: wrong owners, keys and fences, other
//! roles, plain roles force-releasing, read-only transactions, and a free key (the tries and
//! unwatches among them are in `watches`).

use dlock_tests::{Cluster, owner};
use tokio_postgres::error::SqlState;

use crate::callers::{Caller, Callers, USER};
use crate::entries::{Expect, answer, entry, err, lit};
use crate::targets::{release_victims, victims};
use crate::{settings, watches};

/// Runs the non-owner entries (and the `dlock.max_ttl` ones) on held and free keys; returns how
/// many ran.
pub async fn run(test: &str) -> usize {
    use SqlState as S;
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let holder = cluster.connect_as(USER).await;
    let targets = victims(test, &callers.user, &holder).await;
    let null = || answer(None);
    let f = || answer(Some("false"));
    let zero = || answer(Some("0"));

    let mut entries = Vec::new();
    for t in &targets[..2] {
        let (k, o) = (t.key.as_str(), t.owner.as_str());
        let on = |what: &str| format!("{what} on the {} key", t.name);
        // Owner strings that are not the owner: other, case, spaces, prefixes, LIKE patterns.
        let wrong_owners = [
            owner(test, "stranger"),
            o.to_uppercase(),
            format!("{o} "),
            format!(" {o}"),
            o[..o.len() - 1].to_string(),
            format!("{o}x"),
            "%".to_string(),
            "_".repeat(o.len()),
            format!("{}%", &o[..3]),
            o.replace('-', "_"),
            format!("{o}\u{200B}"),
        ];
        for wrong in &wrong_owners {
            let w = lit(wrong);
            entries.push(entry(
                on(&format!("renew as {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_renew({}, {w}, '2 hours')::text", lit(k)),
                null(),
            ));
            entries.push(entry(
                on(&format!("release as {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_release({}, {w})::text", lit(k)),
                f(),
            ));
            entries.push(entry(
                on(&format!("release_all of {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_release_all({w})::text"),
                zero(),
            ));
            entries.push(entry(
                on(&format!("acquire as {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_acquire({}, {w}, '1 hour')::text", lit(k)),
                null(),
            ));
        }
        // Keys that are not the key, with the right owner.
        let wrong_keys = [
            k.to_uppercase(),
            format!("{k} "),
            k[..k.len() - 1].to_string(),
            "%".to_string(),
            "_".repeat(k.len()),
            format!("{}%", &k[..5]),
        ];
        for wrong in &wrong_keys {
            let w = lit(wrong);
            entries.push(entry(
                on(&format!("renew key {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_renew({w}, {}, '2 hours')::text", lit(o)),
                null(),
            ));
            entries.push(entry(
                on(&format!("release key {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_release({w}, {})::text", lit(o)),
                f(),
            ));
            entries.push(entry(
                on(&format!("holds key {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_holds({w}, {})::text", t.fence),
                f(),
            ));
        }
        // Fences that are not the lease's.
        for fence in [t.fence - 1, t.fence + 1, 0, -1, -t.fence, i64::MIN, i64::MAX] {
            entries.push(entry(
                on(&format!("holds fence {fence}")),
                Caller::User,
                format!("SELECT dlock_holds({}, {})::text", lit(k), lit(&fence.to_string())),
                f(),
            ));
        }
        // The right owner from another role: 42501 for renew and release (and nothing for
        // release_all, which only covers the caller's role); acquire is busy.
        entries.push(entry(
            on("renew by another role"),
            Caller::Other,
            format!("SELECT dlock_renew({}, {}, '2 hours')::text", lit(k), lit(o)),
            err(S::INSUFFICIENT_PRIVILEGE),
        ));
        entries.push(entry(
            on("release by another role"),
            Caller::Other,
            format!("SELECT dlock_release({}, {})::text", lit(k), lit(o)),
            err(S::INSUFFICIENT_PRIVILEGE),
        ));
        entries.push(entry(
            on("release_all by another role"),
            Caller::Other,
            format!("SELECT dlock_release_all({})::text", lit(o)),
            zero(),
        ));
        entries.push(entry(
            on("acquire by another role"),
            Caller::Other,
            format!("SELECT dlock_acquire({}, {}, NULL)::text", lit(k), lit(o)),
            null(),
        ));
        // Force release by plain roles, even the lease's own.
        for caller in [Caller::User, Caller::Other] {
            entries.push(entry(
                on(&format!("force_release by {caller:?}")),
                caller,
                format!("SELECT dlock_force_release({})::text", lit(k)),
                err(S::INSUFFICIENT_PRIVILEGE),
            ));
        }
        entries.push(entry(
            on("force_release of '' by a plain role"),
            Caller::Other,
            "SELECT dlock_force_release('')::text",
            Expect::AnyError(vec![S::INVALID_PARAMETER_VALUE, S::INSUFFICIENT_PRIVILEGE]),
        ));
        entries.push(entry(
            on("force_release of NULL by a plain role"),
            Caller::Other,
            "SELECT dlock_force_release(NULL)::text",
            Expect::AnyError(vec![S::NULL_VALUE_NOT_ALLOWED, S::INSUFFICIENT_PRIVILEGE]),
        ));
        // Valid calls of the holder inside a read-only transaction: refused by the server.
        for (what, sql) in [
            ("acquire", format!("SELECT dlock_acquire({}, {}, '1 hour')::text", lit(k), lit(o))),
            ("renew", format!("SELECT dlock_renew({}, {}, '2 hours')::text", lit(k), lit(o))),
            ("release", format!("SELECT dlock_release({}, {})::text", lit(k), lit(o))),
            ("release_all", format!("SELECT dlock_release_all({})::text", lit(o))),
        ] {
            // Renewing a session-bound lease writes nothing: it answers 'infinity' even there.
            let expect = if what == "renew" && t.session_bound {
                answer(Some("infinity"))
            } else {
                err(S::READ_ONLY_SQL_TRANSACTION)
            };
            let mut e = entry(on(&format!("{what} in a read-only transaction")), Caller::User, sql, expect);
            e.read_only = true;
            entries.push(e);
        }
        let mut e = entry(
            on("force_release in a read-only transaction"),
            Caller::Admin,
            format!("SELECT dlock_force_release({})::text", lit(k)),
            err(S::READ_ONLY_SQL_TRANSACTION),
        );
        e.read_only = true;
        entries.push(e);
        entries.extend(watches::non_owner_entries(t, &wrong_owners));
    }
    // The free key: nothing to renew, release, hold or force-release.
    let free = &targets[2];
    entries.extend(watches::free_key_entries(free));
    let (k, o) = (lit(&free.key), lit(&targets[0].owner));
    entries.push(entry(
        "renew of a free key",
        Caller::User,
        format!("SELECT dlock_renew({k}, {o}, '1 hour')::text"),
        null(),
    ));
    entries.push(entry(
        "release of a free key",
        Caller::User,
        format!("SELECT dlock_release({k}, {o})::text"),
        f(),
    ));
    entries.push(entry(
        "holds on a free key",
        Caller::User,
        format!("SELECT dlock_holds({k}, {})::text", free.fence),
        f(),
    ));
    entries.push(entry(
        "force_release of a free key",
        Caller::Admin,
        format!("SELECT dlock_force_release({k})::text"),
        f(),
    ));
    entries.push(entry(
        "release_all of an unknown owner",
        Caller::Admin,
        format!("SELECT dlock_release_all({})::text", lit(&owner(test, "unknown"))),
        zero(),
    ));
    entries.push(entry(
        "release_all of '%' by an admin",
        Caller::Admin,
        "SELECT dlock_release_all('%')::text",
        zero(),
    ));
    entries.extend(settings::max_ttl_entries());
    let tried = callers.try_all(&entries).await;

    settings::assert_max_ttl_unchanged(&callers).await;
    for t in &targets[..2] {
        assert!(callers.user.holds(&t.key, t.fence).await.unwrap(), "{} is still held", t.key);
    }
    release_victims(&callers.user, &targets).await;
    tried
}
