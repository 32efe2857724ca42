//! Connection strings fit to print: every password replaced by `***` (a URL's `user:password@`,
//! a `password` parameter of a URL's query or of `key=value` pairs), the rest as written.

use super::conninfo::{Pairs, decode};

/// What stands in for a password.
const HIDDEN: &str = "***";

/// `conninfo` with its passwords hidden. A string that cannot be read is not shown at all: a
/// password in it could not be found with certainty.
pub fn redact_conninfo(conninfo: &str) -> String {
    let redacted =
        if let Some(scheme) = ["postgresql://", "postgres://"].iter().find(|p| conninfo.starts_with(**p)) {
            Some(redact_url(conninfo, scheme.len()))
        } else {
            redact_pairs(conninfo)
        };
    redacted.unwrap_or_else(|| "(a connection string that cannot be read: not shown)".to_owned())
}

/// A URL: the password of its user info, and `password` in its query. The user info is taken
/// to end at the last `@` before the query, so that a password with a raw `/` or `@` in it
/// (which should have been percent-encoded) is hidden whole.
fn redact_url(url: &str, scheme_len: usize) -> String {
    let rest = &url[scheme_len..];
    let head_len = rest.find('?').unwrap_or(rest.len());
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..scheme_len]);
    let after_user_info = match rest[..head_len].rfind('@') {
        Some(at) => {
            let user_info = &rest[..at];
            match user_info.split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(HIDDEN);
                }
                None => out.push_str(user_info),
            }
            at
        }
        None => 0,
    };
    let tail = &rest[after_user_info..];
    let Some((path, query)) = tail.split_once('?') else {
        out.push_str(tail);
        return out;
    };
    out.push_str(path);
    out.push('?');
    let segments: Vec<String> = query
        .split('&')
        .map(|segment| {
            let key = segment.split_once('=').map_or(segment, |(key, _)| key);
            // A key that does not decode is no `password`: tokio-postgres refuses it anyway.
            if decode(key).is_ok_and(|key| key == "password") {
                format!("{key}={HIDDEN}")
            } else {
                segment.to_owned()
            }
        })
        .collect();
    out.push_str(&segments.join("&"));
    out
}

/// `key=value` pairs, read as the client reads them (quoting, escapes).
fn redact_pairs(text: &str) -> Option<String> {
    let mut reader = Pairs { text, at: 0 };
    let mut parts = Vec::new();
    while let Some((start, key, _)) = reader.next_pair().ok()? {
        if key == "password" {
            parts.push(format!("password={HIDDEN}"));
        } else {
            parts.push(text[start..reader.at].to_owned());
        }
    }
    Some(parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_hidden() {
        assert_eq!(
            redact_conninfo("postgresql://app:s3cret@db1:5432/app"),
            "postgresql://app:***@db1:5432/app"
        );
        assert_eq!(redact_conninfo("postgres://app@db1/app"), "postgres://app@db1/app");
        assert_eq!(redact_conninfo("postgresql://db1/app"), "postgresql://db1/app");
        // An '@' inside the password: the user info ends at the last one.
        assert_eq!(redact_conninfo("postgresql://app:p@ss@db1/app"), "postgresql://app:***@db1/app");
        assert_eq!(
            redact_conninfo("postgresql://db1/app?sslmode=require&password=s3cret&user=app"),
            "postgresql://db1/app?sslmode=require&password=***&user=app"
        );
        assert_eq!(redact_conninfo("postgresql://db1?pass%77ord=s3cret"), "postgresql://db1?pass%77ord=***");
        assert_eq!(redact_conninfo("postgresql://app:a/b@db1/app"), "postgresql://app:***@db1/app");
    }

    #[test]
    fn passwords_in_pairs_are_hidden_quoted_or_not() {
        assert_eq!(redact_conninfo("host=db1 user=app password=s3cret"), "host=db1 user=app password=***");
        assert_eq!(
            redact_conninfo("host=db1 password = 'a \\' b' dbname=app"),
            "host=db1 password=*** dbname=app"
        );
        assert_eq!(redact_conninfo(""), "");
    }

    #[test]
    fn what_cannot_be_read_is_not_shown() {
        let shown = redact_conninfo("host=db1 password='s3cret");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
