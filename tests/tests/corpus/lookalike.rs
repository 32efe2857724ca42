//! Look-alike keys and owners: distinct byte strings stay distinct keys and owners.

use dlock_tests::{Cluster, key, owner};

use crate::callers::Callers;
use crate::snapshot::snapshot;

/// Holds each look-alike pair as two keys and as two owners of one key; returns how many tries.
pub async fn run(test: &str) -> usize {
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let s = &callers.user;
    let pairs: [(&str, &str, &str); 18] = [
        ("\u{e9}", "e\u{301}", "é precomposed U+00E9 / e + combining acute U+0301"),
        ("caf\u{e9}", "cafe\u{301}", "café NFC / NFD"),
        ("\u{c5}", "\u{212b}", "Å U+00C5 / ANGSTROM SIGN U+212B"),
        ("K", "\u{212a}", "K / KELVIN SIGN U+212A"),
        ("A", "\u{ff21}", "A / FULLWIDTH A U+FF21"),
        ("key", "\u{ff4b}\u{ff45}\u{ff59}", "key / fullwidth ｋｅｙ"),
        ("ab", "a\u{200d}b", "ab / a ZERO WIDTH JOINER b"),
        ("ab", "a\u{200b}b", "ab / a ZERO WIDTH SPACE b"),
        ("ab", "\u{feff}ab", "ab / BOM ab"),
        ("a", "\u{430}", "Latin a / Cyrillic а U+0430"),
        ("fi", "\u{fb01}", "fi / LIGATURE FI U+FB01"),
        ("ss", "\u{df}", "ss / ß"),
        ("key", "KEY", "case"),
        ("k", "k ", "trailing space"),
        ("1", "\u{661}", "1 / ARABIC-INDIC DIGIT ONE"),
        ("-", "\u{2010}", "hyphen-minus / HYPHEN U+2010"),
        ("\u{1f600}", "\u{1f600}\u{fe0f}", "emoji / emoji + VARIATION SELECTOR-16"),
        ("\u{e9}", "\u{202e}\u{e9}", "é / RIGHT-TO-LEFT OVERRIDE é"),
    ];
    let mut tried = 0;
    for (i, (left, right, what)) in pairs.iter().enumerate() {
        let (lk, rk) = (key(test, &format!("{i}/{left}")), key(test, &format!("{i}/{right}")));
        assert_ne!(lk.as_bytes(), rk.as_bytes(), "{what}: the pair must differ in bytes");
        let (a, b) = (owner(test, "a"), owner(test, "b"));
        let before = snapshot(&callers.superuser).await;
        let fa = s.try_acquire(&lk, &a, "1 hour").await.unwrap();
        let fb = s.try_acquire(&rk, &b, "1 hour").await.unwrap();
        let (fa, fb) = (
            fa.unwrap_or_else(|| panic!("{what}: {lk:?} not granted")),
            fb.unwrap_or_else(|| panic!("{what}: {rk:?} not granted to a second owner while {lk:?} is held")),
        );
        let la = s.lease(&lk).await.unwrap().expect("left lease listed");
        let lb = s.lease(&rk).await.unwrap().expect("right lease listed");
        assert_eq!(
            (la.key.as_bytes(), la.owner.as_deref(), la.fence),
            (lk.as_bytes(), Some(a.as_str()), fa),
            "{what}: left"
        );
        assert_eq!(
            (lb.key.as_bytes(), lb.owner.as_deref(), lb.fence),
            (rk.as_bytes(), Some(b.as_str()), fb),
            "{what}: right"
        );
        assert!(!s.holds(&rk, fa).await.unwrap(), "{what}: the left fence does not hold the right key");
        assert!(!s.holds(&lk, fb).await.unwrap(), "{what}: the right fence does not hold the left key");
        assert!(!s.release(&rk, &a).await.unwrap(), "{what}: the left owner cannot release the right key");
        assert!(s.release(&lk, &a).await.unwrap(), "{what}: release left");
        assert!(s.release(&rk, &b).await.unwrap(), "{what}: release right");
        assert_eq!(snapshot(&callers.superuser).await, before, "{what}: state after both releases");
        tried += 1;

        // The same pair as owners of one key.
        let k = key(test, &format!("{i}/owners"));
        let (lo, ro) = (owner(test, left), owner(test, right));
        let fence = s.try_acquire(&k, &lo, "1 hour").await.unwrap().expect("granted");
        assert_eq!(
            s.try_acquire(&k, &ro, "1 hour").await.unwrap(),
            None,
            "{what}: a look-alike owner is another owner"
        );
        assert_eq!(s.renew(&k, &ro, Some("2 hours")).await.unwrap(), None, "{what}: look-alike owner renews");
        assert!(!s.release(&k, &ro).await.unwrap(), "{what}: look-alike owner releases");
        assert_eq!(s.release_all(&ro).await.unwrap(), 0, "{what}: release_all of the look-alike owner");
        let row = s.lease(&k).await.unwrap().expect("still held");
        assert_eq!(
            (row.owner.as_deref(), row.fence, row.hold_count),
            (Some(lo.as_str()), fence, 1),
            "{what}: owner lease"
        );
        assert!(s.release(&k, &lo).await.unwrap());
        tried += 1;
    }
    tried
}
