//! Taking out of a connection string the parameters tokio-postgres does not understand
//! (`sslmode` beyond disable/prefer/require, `sslrootcert`, `dlock_pooler`): it refuses any
//! unknown one, so they must go before it parses the rest, which is left exactly as written.
//!
//! Both forms of libpq's connection strings are split the way tokio-postgres reads them: a URL's
//! query parameters (`postgresql://host/db?sslmode=verify-full`, percent-encoded), or
//! `key=value` pairs (`host=db sslrootcert='/etc/ssl/my ca.pem'`, quoted with `'`, `\` escapes).

/// The parameters the client handles itself.
pub(crate) const TAKEN: [&str; 3] = ["sslmode", "sslrootcert", "dlock_pooler"];

/// A connection string without the parameters in [`TAKEN`], and those parameters.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// The rest, for tokio-postgres.
    pub(crate) rest: String,
    /// The parameters taken out, in the order written (a later one wins, as with libpq).
    pub(crate) taken: Vec<(String, String)>,
}

impl Split {
    /// The value of `key` (the last one written), if any.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.taken.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Splits `conninfo` (a URL or `key=value` pairs); an error says what is malformed.
pub(crate) fn split(conninfo: &str) -> Result<Split, String> {
    if ["postgres://", "postgresql://"].iter().any(|prefix| conninfo.starts_with(prefix)) {
        split_url(conninfo)
    } else {
        split_pairs(conninfo)
    }
}

/// A URL: only its query (after the first `?`; `?` cannot appear raw before it) holds
/// parameters, `&`-separated `key=value` with both sides percent-encoded.
fn split_url(url: &str) -> Result<Split, String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(Split { rest: url.to_owned(), taken: Vec::new() });
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for segment in query.split('&') {
        let ours = segment
            .split_once('=')
            .and_then(|(key, value)| Some((decode(key).ok()?, value)))
            .filter(|(key, _)| TAKEN.contains(&key.as_str()));
        match ours {
            Some((key, value)) => {
                let value = decode(value).map_err(|_| format!("the value of {key} is not UTF-8"))?;
                taken.push((key, value));
            }
            // Anything else, malformed or not, is tokio-postgres's to parse (or refuse).
            None => kept.push(segment),
        }
    }
    let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    Ok(Split { rest, taken })
}

pub(super) fn decode(text: &str) -> Result<String, std::str::Utf8Error> {
    percent_encoding::percent_decode_str(text).decode_utf8().map(|s| s.into_owned())
}

/// `key=value` pairs separated by white space, read as tokio-postgres reads them (so that
/// what it would refuse is refused here too, with the same reasons).
fn split_pairs(text: &str) -> Result<Split, String> {
    let mut reader = Pairs { text, at: 0 };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    while let Some((start, key, value)) = reader.next_pair()? {
        if TAKEN.contains(&key) {
            taken.push((key.to_owned(), value));
        } else {
            kept.push(&text[start..reader.at]);
        }
    }
    Ok(Split { rest: kept.join(" "), taken })
}

/// A reader of `key=value` pairs; `at` is the byte offset of what comes next.
pub(super) struct Pairs<'a> {
    pub(super) text: &'a str,
    pub(super) at: usize,
}

impl<'a> Pairs<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.at..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    /// The next pair: where it starts, its key and its unescaped value; `None` at the end.
    pub(super) fn next_pair(&mut self) -> Result<Option<(usize, &'a str, String)>, String> {
        self.skip_space();
        let start = self.at;
        while self.peek().is_some_and(|c| !c.is_whitespace() && c != '=') {
            self.bump();
        }
        if self.at == start {
            return match self.peek() {
                None => Ok(None),
                Some(_) => Err(format!("a parameter without a name at byte {start}")),
            };
        }
        let key = &self.text[start..self.at];
        self.skip_space();
        if self.bump() != Some('=') {
            return Err(format!("no `=` after {key}"));
        }
        self.skip_space();
        let value = if self.peek() == Some('\'') {
            self.bump();
            self.value(true)?
        } else {
            self.value(false)?
        };
        Ok(Some((start, key, value)))
    }

    /// A value up to white space, or (`quoted`, after its opening `'`) through its closing `'`;
    /// `\` escapes the next character.
    fn value(&mut self, quoted: bool) -> Result<String, String> {
        let end = |c: char| if quoted { c == '\'' } else { c.is_whitespace() };
        let mut value = String::new();
        loop {
            match self.peek() {
                Some(c) if end(c) => {
                    if quoted {
                        self.bump();
                    }
                    break;
                }
                Some('\\') => {
                    self.bump();
                    if let Some(c) = self.bump() {
                        value.push(c);
                    }
                }
                Some(c) => {
                    self.bump();
                    value.push(c);
                }
                None if quoted => return Err("a quoted value is not closed".into()),
                None => break,
            }
        }
        if value.is_empty() && !quoted {
            return Err("a parameter without a value".into());
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(taken: &[(&str, &str)]) -> Vec<(String, String)> {
        taken.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_urls_own_parameters_are_taken_and_the_rest_kept_as_written() {
        let split = split(
            "postgresql://app@db:5432/x?application_name=a%20b&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&dlock_pooler=transaction",
        )
        .unwrap();
        assert_eq!(split.rest, "postgresql://app@db:5432/x?application_name=a%20b");
        assert_eq!(
            split.taken,
            pairs(&[
                ("sslmode", "verify-full"),
                ("sslrootcert", "/etc/ca.pem"),
                ("dlock_pooler", "transaction")
            ])
        );
        let only_ours = super::split("postgres://db/x?sslmode=require").unwrap();
        assert_eq!(only_ours.rest, "postgres://db/x");
        assert_eq!(only_ours.get("sslmode"), Some("require"));
        assert_eq!(super::split("postgresql://db/x").unwrap().taken, vec![]);
    }

    #[test]
    fn key_value_pairs_keep_their_quoting_and_the_last_value_wins() {
        let split = split(
            r"host=db  sslmode = prefer application_name='my app' sslrootcert='/etc/my ca\'s.pem' sslmode=verify-ca",
        )
        .unwrap();
        assert_eq!(split.rest, "host=db application_name='my app'");
        assert_eq!(split.get("sslmode"), Some("verify-ca"));
        assert_eq!(split.get("sslrootcert"), Some("/etc/my ca's.pem"));
        assert_eq!(split.get("dlock_pooler"), None);
        assert_eq!(super::split("").unwrap(), Split { rest: String::new(), taken: vec![] });
    }

    #[test]
    fn malformed_pairs_are_refused() {
        assert!(split("host=db sslmode").is_err());
        assert!(split("host=db =x").is_err());
        assert!(split("sslrootcert='/etc/ca.pem").is_err());
        assert!(split("sslmode= ").is_err());
        assert_eq!(split("sslrootcert=''").unwrap().get("sslrootcert"), Some(""));
    }
}
