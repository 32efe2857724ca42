//! SQL-injection strings, LIKE wildcards, escapes and control characters as keys and owners.

use dlock_tests::{Cluster, key, owner};

use crate::callers::Callers;
use crate::snapshot::snapshot;

/// Takes, lists, renews and releases each hostile string as key and owner; returns how many.
pub async fn run(test: &str) -> usize {
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let s = &callers.user;
    // A lease that a LIKE or string-built statement would hit by mistake.
    let (decoy_key, decoy_owner) = (key(test, "decoy"), owner(test, "decoy"));
    let decoy_fence =
        callers.other.try_acquire(&decoy_key, &decoy_owner, "1 hour").await.unwrap().expect("decoy");
    let strings = [
        "'); DROP TABLE dlock_internal.lease; --",
        "'; DELETE FROM dlock_internal.lease; --",
        "' OR '1'='1",
        "\" OR \"\"=\"",
        "'; SELECT pg_sleep(10); --",
        "$$; DROP SCHEMA dlock_internal CASCADE; $$",
        "%",
        "_",
        "%%",
        "%_%",
        "\\",
        "\\\\",
        "\\%",
        "'",
        "''",
        "\\'",
        "$1",
        "$2::text",
        "$tag$",
        "/*",
        "*/",
        "--",
        ";",
        "E'\\x00'",
        "%s%s%s%n",
        "{}",
        "NULL",
        "null",
        " ",
        "\t",
        "\n",
        "\r\n",
        "\u{7f}",
        "\u{202e}gnp.exe",
        "${jndi:ldap://example.invalid/a}",
        "decoy%",
        "*",
        "?",
    ];
    let mut tried = 0;
    for text in strings {
        let before = snapshot(&callers.superuser).await;
        let fence = s
            .try_acquire(text, text, "1 hour")
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{text:?}: not granted"));
        let row = s.lease(text).await.unwrap().unwrap_or_else(|| panic!("{text:?}: not listed"));
        assert_eq!(
            (row.key.as_str(), row.owner.as_deref(), row.fence),
            (text, Some(text), fence),
            "{text:?}: listed"
        );
        assert!(s.holds(text, fence).await.unwrap(), "{text:?}: holds");
        assert!(s.renew(text, text, Some("2 hours")).await.unwrap().is_some(), "{text:?}: renew");
        assert_eq!(
            s.try_acquire(text, &decoy_owner, "1 hour").await.unwrap(),
            None,
            "{text:?}: busy for others"
        );
        assert_eq!(s.try_acquire(text, text, "1 hour").await.unwrap(), Some(fence), "{text:?}: reentry");
        assert!(s.release(text, text).await.unwrap(), "{text:?}: release one hold");
        assert_eq!(s.release_all(text).await.unwrap(), 1, "{text:?}: release_all frees exactly its own key");
        assert_eq!(
            callers.admin.release_all(text).await.unwrap(),
            0,
            "{text:?}: as admin, nothing else matches"
        );
        assert!(!callers.admin.force_release(text).await.unwrap(), "{text:?}: already free");
        assert_eq!(snapshot(&callers.superuser).await, before, "{text:?}: state after the release");
        tried += 1;
    }
    let alive: bool = callers
        .superuser
        .query_one("SELECT to_regclass('dlock_internal.lease') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(alive, "the lease table survived");
    assert!(callers.other.holds(&decoy_key, decoy_fence).await.unwrap(), "the decoy lease survived");
    assert!(callers.other.release(&decoy_key, &decoy_owner).await.unwrap());
    tried
}
