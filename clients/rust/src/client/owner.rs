//! The owner identity a client takes its leases as, when none is given.

use dlock_core::limits::MAX_OWNER_BYTES;

/// How much of the host name goes into a generated owner, so that it always fits.
const MAX_HOST_BYTES: usize = 64;

/// `host:pid:random`: readable in `dlock_locks` (which host and process holds a key), and
/// unguessable thanks to 122 random bits, so no one else can renew or release by accident.
pub(crate) fn generate() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let host = truncate_to_char_boundary(if host.is_empty() { "unknown" } else { &host }, MAX_HOST_BYTES);
    let owner = format!("{host}:{}:{}", std::process::id(), uuid::Uuid::new_v4().simple());
    debug_assert!(owner.len() <= MAX_OWNER_BYTES);
    owner
}

fn truncate_to_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_owner_is_host_pid_random_and_unique() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        let parts: Vec<&str> = a.rsplitn(3, ':').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[0].len(), 32, "random part of {a}");
        assert_eq!(parts[1], std::process::id().to_string());
        assert!(a.len() <= MAX_OWNER_BYTES);
    }

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate_to_char_boundary("héllo", 2), "h");
        assert_eq!(truncate_to_char_boundary("abc", 10), "abc");
    }

    proptest::proptest! {
        #[test]
        fn truncation_is_a_prefix_on_a_character_boundary(s in "\\PC{0,80}", max in 0usize..100) {
            let t = truncate_to_char_boundary(&s, max);
            proptest::prop_assert!(s.starts_with(t));
            if s.len() <= max {
                proptest::prop_assert_eq!(t, s.as_str());
            } else {
                // At most `max` bytes, and as many as fit: a character is at most 4 bytes.
                proptest::prop_assert!(t.len() <= max && t.len() + 4 > max, "{} of {max}", t.len());
            }
        }
    }
}
