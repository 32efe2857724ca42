//! The URLs of a scenario's clients, children and sessions: the runner's libpq URL with another
//! user, an application name, or (for an `offline` client) an address where nothing listens.

/// Where nothing listens: the client must not connect before its first call, and when it does
/// it fails at once.
const NOWHERE: &str = "127.0.0.1:1";

/// A libpq URL (`postgresql://user@host:port/db?params`) to derive others from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    scheme: String,
    user: Option<String>,
    hosts: String,
    rest: String,
    params: Vec<(String, String)>,
}

impl Url {
    /// Parses `url`; only the URL form of libpq's connection strings is taken.
    pub fn parse(url: &str) -> Result<Url, String> {
        let (scheme, after) = url
            .split_once("://")
            .filter(|(scheme, _)| matches!(*scheme, "postgres" | "postgresql"))
            .ok_or_else(|| format!("{url:?} is not a postgresql:// URL"))?;
        let (before_query, query) = after.split_once('?').unwrap_or((after, ""));
        let (authority, rest) =
            before_query.find('/').map_or((before_query, ""), |at| before_query.split_at(at));
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (Some(user.to_owned()), hosts),
            None => (None, authority),
        };
        let params = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect();
        Ok(Url { scheme: scheme.to_owned(), user, hosts: hosts.to_owned(), rest: rest.to_owned(), params })
    }

    /// The same URL logging in as `role`, without a password (test clusters trust local
    /// connections).
    pub fn with_user(mut self, role: &str) -> Url {
        self.user = Some(encode(role));
        self.params.retain(|(k, _)| k != "user" && k != "password");
        self
    }

    /// The same URL with the parameter `key` set to `value`.
    pub fn with_param(mut self, key: &str, value: &str) -> Url {
        self.params.retain(|(k, _)| k != key);
        self.params.push((key.to_owned(), encode(value)));
        self
    }

    /// The same URL pointing where nothing listens.
    pub fn offline(mut self) -> Url {
        NOWHERE.clone_into(&mut self.hosts);
        self.params.retain(|(k, _)| k != "host" && k != "hostaddr" && k != "port");
        self.with_param("connect_timeout", "2")
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://", self.scheme)?;
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        write!(f, "{}{}", self.hosts, self.rest)?;
        for (i, (k, v)) in self.params.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

/// Percent-encodes what a URL part cannot hold as written.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gets_another_user_params_and_an_address_where_nothing_listens() {
        let url = Url::parse("postgresql://postgres@127.0.0.1:5432/postgres?sslmode=disable").unwrap();
        assert_eq!(url.to_string(), "postgresql://postgres@127.0.0.1:5432/postgres?sslmode=disable");
        let app = url.clone().with_user("plain role").with_param("application_name", "conf-1-a");
        assert_eq!(
            app.to_string(),
            "postgresql://plain%20role@127.0.0.1:5432/postgres?sslmode=disable&application_name=conf-1-a"
        );
        assert_eq!(
            url.offline().to_string(),
            "postgresql://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"
        );
        assert_eq!(Url::parse("postgres://h").unwrap().with_user("u").to_string(), "postgres://u@h");
        assert!(Url::parse("host=x").is_err());
    }
}
