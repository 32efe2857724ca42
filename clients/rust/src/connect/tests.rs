use tokio_postgres::config::SslMode as PgSslMode;

use super::*;

fn parse(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<Settings, Error> {
    Settings::parse(url, env)
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
}

#[test]
fn url_and_key_value_strings_are_both_understood() {
    let url = parse("postgresql://alice@db.example:6543/app", no_env).unwrap().pg;
    assert_eq!(url.get_user(), Some("alice"));
    assert_eq!(url.get_ports(), &[6543]);
    assert_eq!(url.get_dbname(), Some("app"));
    let kv = parse("host=127.0.0.1 port=5433 user=bob dbname=x", no_env).unwrap().pg;
    assert_eq!(kv.get_user(), Some("bob"));
    assert_eq!(kv.get_ports(), &[5433]);
    assert!(matches!(parse("postgresql://[broken", no_env), Err(Error::Config(_))));
}

#[test]
fn an_empty_url_takes_everything_from_the_pg_environment() {
    let env = env_of(&[
        ("PGHOST", "db1,/run/pg"),
        ("PGPORT", "6000"),
        ("PGUSER", "carol"),
        ("PGDATABASE", "jobs"),
        ("PGPASSWORD", "s3cret"),
        ("PGSSLMODE", "require"),
        ("USER", "nobody"),
    ]);
    let settings = parse("", env).unwrap();
    let config = settings.pg;
    assert_eq!(config.get_hosts().len(), 2);
    assert_eq!(config.get_ports(), &[6000]);
    assert_eq!(config.get_user(), Some("carol"));
    assert_eq!(config.get_dbname(), Some("jobs"));
    assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
    assert_eq!(config.get_application_name(), Some("dlock"));
    assert_eq!(settings.tls.mode, SslMode::Require);
    assert_eq!(config.get_ssl_mode(), PgSslMode::Require);
    assert_eq!(settings.pooler, None);
}

#[test]
fn the_url_wins_over_the_environment_and_user_falls_back_to_user() {
    let config =
        parse("postgresql://db.example/app", env_of(&[("USER", "dave"), ("PGDATABASE", "x")])).unwrap().pg;
    assert_eq!(config.get_user(), Some("dave"));
    assert_eq!(config.get_dbname(), Some("app"));
    assert!(matches!(parse("", env_of(&[("PGPORT", "http")])), Err(Error::Config(_))));
    assert!(matches!(parse("host=x", no_env), Err(Error::Config(_))), "no user anywhere");
}

#[test]
fn sslmode_has_libpqs_default_and_values_and_tokio_postgres_is_told_whether_to_insist() {
    let mode = |url: &str| {
        let settings = parse(url, env_of(&[("USER", "u")])).unwrap();
        (settings.tls.mode, settings.pg.get_ssl_mode())
    };
    assert_eq!(mode("host=db"), (SslMode::Prefer, PgSslMode::Prefer));
    assert_eq!(mode("host=db sslmode=disable"), (SslMode::Disable, PgSslMode::Disable));
    assert_eq!(mode("postgresql://db/x?sslmode=require"), (SslMode::Require, PgSslMode::Require));
    let with_root = "host=db sslrootcert=/etc/ca.pem sslmode=";
    assert_eq!(mode(&format!("{with_root}verify-ca")), (SslMode::VerifyCa, PgSslMode::Require));
    assert_eq!(mode(&format!("{with_root}verify-full")), (SslMode::VerifyFull, PgSslMode::Require));
    // A Unix socket never has TLS: libpq ignores sslmode there, and so does the client.
    assert_eq!(mode("host=/run/postgresql sslmode=require"), (SslMode::Require, PgSslMode::Disable));
    for bad in ["host=db sslmode=allow", "host=db sslmode=verify", "postgresql://db?sslmode=REQUIRE"] {
        assert!(matches!(parse(bad, env_of(&[("USER", "u")])), Err(Error::Config(_))), "{bad}");
    }
}

#[test]
fn the_root_certificate_comes_from_the_string_the_environment_or_libpqs_default_file() {
    const USER: (&str, &str) = ("USER", "u");
    let from_url = parse("postgresql://db/x?sslmode=verify-full&sslrootcert=%2Fa%2Fca.pem", env_of(&[USER]));
    assert_eq!(from_url.unwrap().tls.root_cert, Some(PathBuf::from("/a/ca.pem")));
    let env = env_of(&[USER, ("PGSSLMODE", "verify-ca"), ("PGSSLROOTCERT", "/env/ca.pem")]);
    let from_env = parse("host=db", env).unwrap().tls;
    assert_eq!(from_env, TlsSettings { mode: SslMode::VerifyCa, root_cert: Some("/env/ca.pem".into()) });
    let env = env_of(&[USER, ("PGSSLMODE", "verify-ca"), ("PGSSLROOTCERT", "/env/ca.pem")]);
    let url_wins = parse("host=db sslmode=require sslrootcert=/url/ca.pem", env).unwrap().tls;
    assert_eq!(url_wins, TlsSettings { mode: SslMode::Require, root_cert: Some("/url/ca.pem".into()) });

    // ~/.postgresql/root.crt, when it exists.
    let home = std::env::temp_dir().join(format!("dlock-home-{}", std::process::id()));
    std::fs::create_dir_all(home.join(".postgresql")).unwrap();
    let home_text = home.to_str().unwrap().to_owned();
    let env = |name: &str| match name {
        "USER" => Some("u".to_owned()),
        "HOME" => Some(home_text.clone()),
        _ => None,
    };
    let missing = parse("host=db sslmode=verify-full", env);
    std::fs::write(home.join(".postgresql/root.crt"), "").unwrap();
    let present = parse("host=db sslmode=verify-full", env);
    std::fs::remove_dir_all(&home).unwrap();
    assert!(matches!(missing, Err(Error::Config(m)) if m.contains("sslrootcert")));
    assert_eq!(present.unwrap().tls.root_cert, Some(home.join(".postgresql/root.crt")));
    let system = parse("host=db sslmode=verify-full sslrootcert=system", env_of(&[USER]));
    assert!(matches!(system, Err(Error::Config(m)) if m.contains("system")));
}

#[test]
fn dlock_pooler_is_taken_out_of_the_string() {
    let env = env_of(&[("USER", "u")]);
    let url = parse("postgresql://db/x?dlock_pooler=transaction&application_name=worker", &env).unwrap();
    assert_eq!(url.pooler, Some(PoolerMode::Transaction));
    assert_eq!(url.pg.get_application_name(), Some("worker"));
    let kv = parse("host=db dlock_pooler=session", &env).unwrap();
    assert_eq!(kv.pooler, Some(PoolerMode::Session));
    assert!(matches!(parse("host=db dlock_pooler=statement", &env), Err(Error::Config(_))));
}

// Fuzzing the one parser of ours that sees untrusted text (connection strings and PG*
// variables come from configuration): any input is parsed or refused, never a panic.
proptest::proptest! {
    #[test]
    fn any_connection_string_and_environment_is_parsed_or_refused(
        url in proptest::string::string_regex("(?s).{0,120}").unwrap(),
        vars in proptest::collection::vec(
            (proptest::sample::select(vec![
                "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD", "PGSSLMODE", "PGSSLROOTCERT", "USER",
            ]),
             proptest::string::string_regex("(?s).{0,40}").unwrap()),
            0..8,
        ),
    ) {
        let env = |name: &str| vars.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        match parse(&url, env) {
            Ok(settings) => proptest::prop_assert!(settings.pg.get_user().is_some(), "a config always has a user"),
            Err(e) => proptest::prop_assert!(matches!(e, Error::Config(_)), "{e:?}"),
        }
    }

    #[test]
    fn urls_built_from_parts_give_those_parts_back(
        user in "[a-z][a-z0-9_]{0,15}",
        host in "[a-z][a-z0-9-]{0,20}(\\.[a-z]{2,5})?",
        port in 1u16..,
        db in "[a-z][a-z0-9_]{0,15}",
    ) {
        let settings = parse(&format!("postgresql://{user}@{host}:{port}/{db}"), no_env).unwrap();
        proptest::prop_assert_eq!(settings.pg.get_user(), Some(user.as_str()));
        proptest::prop_assert_eq!(settings.pg.get_ports(), &[port]);
        proptest::prop_assert_eq!(settings.pg.get_dbname(), Some(db.as_str()));
    }

    // Our parameters anywhere among others, in either form: taken out whatever their place,
    // and the others reach tokio-postgres unchanged.
    #[test]
    fn our_parameters_are_taken_wherever_they_stand(
        app in "[a-zA-Z0-9 ']{1,20}",
        root in "/[a-z0-9 /'.]{1,30}",
        mode in proptest::sample::select(vec!["disable", "prefer", "require", "verify-ca", "verify-full"]),
        pooler in proptest::sample::select(vec!["session", "transaction"]),
        order in proptest::sample::select(vec![[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]]),
        url_form in proptest::bool::ANY,
    ) {
        let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
        let encode = |v: &str| percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string();
        let params = [("application_name", app.as_str()), ("sslrootcert", &root), ("sslmode", mode), ("dlock_pooler", pooler)];
        let text = if url_form {
            let query: Vec<String> = order.iter().map(|&i| format!("{}={}", params[i].0, encode(params[i].1))).collect();
            format!("postgresql://u@db/x?{}", query.join("&"))
        } else {
            let pairs: Vec<String> = order.iter().map(|&i| format!("{} = {}", params[i].0, quote(params[i].1))).collect();
            format!("user=u host=db {}", pairs.join("  "))
        };
        let settings = parse(&text, no_env).unwrap();
        proptest::prop_assert_eq!(settings.pg.get_application_name(), Some(app.as_str()));
        proptest::prop_assert_eq!(settings.tls.root_cert, Some(PathBuf::from(&root)));
        proptest::prop_assert_eq!(settings.tls.mode.to_string(), mode);
        proptest::prop_assert_eq!(settings.pooler.map(|p| p.to_string()), Some(pooler.to_string()));
    }
}
