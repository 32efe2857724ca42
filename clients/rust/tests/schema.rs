//! The client calls the extension in whatever schema it was installed into, qualified: a
//! database with dlock in a schema of its own (not on the search_path, and shadow functions of
//! the same names in `public`), one with it in `public`, and one without it.

use std::time::Duration;

use dlock_client::{Client, Error, Expiry, PoolerMode};
use dlock_tests::{Cluster, Session, key, wait_for_watchers, within};

const SECOND: Duration = Duration::from_secs(1);

/// Shadows in `public` of every dlock object the client uses, each failing loudly: what a role
/// that may create objects in `public` could plant to capture unqualified calls.
const SHADOWS: &str = "
CREATE FUNCTION public.captured() RETURNS bigint LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'an unqualified call was captured by a shadow in public'; END $$;
CREATE FUNCTION public.dlock_acquire(text, text, interval, interval) RETURNS bigint
    LANGUAGE sql AS 'SELECT public.captured()';
CREATE FUNCTION public.dlock_try_acquire(text, text, interval, interval)
    RETURNS TABLE (fence bigint, retry_after interval) LANGUAGE sql AS 'SELECT public.captured(), NULL::interval';
CREATE FUNCTION public.dlock_renew(text, text, interval) RETURNS timestamptz
    LANGUAGE sql AS 'SELECT pg_catalog.to_timestamp(public.captured())';
CREATE FUNCTION public.dlock_release(text, text) RETURNS boolean
    LANGUAGE sql AS 'SELECT public.captured() > 0';
CREATE FUNCTION public.dlock_holds(text, bigint) RETURNS boolean
    LANGUAGE sql AS 'SELECT public.captured() > 0';
CREATE FUNCTION public.dlock_force_release(text) RETURNS boolean
    LANGUAGE sql AS 'SELECT public.captured() > 0';
CREATE FUNCTION public.dlock_watch(text) RETURNS text LANGUAGE sql AS 'SELECT public.captured()::text';
CREATE FUNCTION public.dlock_unwatch(text) RETURNS boolean LANGUAGE sql AS 'SELECT public.captured() > 0';
CREATE VIEW public.dlock_locks AS SELECT 'shadow'::text AS key, NULL::text AS owner, public.captured() AS fence,
    1 AS hold_count, now() AS acquired_at, now() AS expires_at, 0 AS holder_pid, 'x'::name AS holder_role,
    0 AS waiters;
";

/// A new database `name` of the shared cluster, with `setup` run in it; a session on it.
async fn database(name: &str, setup: &str) -> Session {
    let cluster = Cluster::shared();
    cluster.connect().await.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("CREATE DATABASE");
    let session = cluster.connect_db("postgres", name).await;
    session.batch_execute(setup).await.unwrap_or_else(|e| panic!("setting up {name}: {e:?}"));
    session
}

fn client_of(database: &str, pooler: PoolerMode) -> Client {
    let port = Cluster::shared().port();
    Client::builder(&format!("host=127.0.0.1 port={port} user=postgres dbname={database}"))
        .pooler(pooler)
        .build()
        .expect("client config")
}

/// Every kind of call the client makes, against the database of `client`; `observer` sees the
/// extension's objects first on its search_path.
async fn every_call_works(client: &Client, observer: &Session, test: &str) {
    let k = key(test, "k");
    let guard = client.lock(&k).ttl(SECOND * 10).acquire().await.expect("acquire");
    assert!(guard.holds().await.unwrap());
    assert!(guard.renew().await.unwrap().is_some());
    let row = observer.lease(&k).await.unwrap().expect("the lease is in the extension's table");
    assert_eq!(row.fence, guard.fence());

    // A waiter (watching the key on the listener in session mode, retrying in transaction
    // mode) is granted when the key is released.
    let waiter = client.with_owner(format!("{test}-waiter"));
    let kw = k.clone();
    let wait =
        tokio::spawn(async move { waiter.lock(&kw).ttl(SECOND * 10).wait(SECOND * 10).acquire().await });
    if client.pooler() == PoolerMode::Session {
        wait_for_watchers(observer, &k, 1).await;
    }
    assert!(guard.release().await.unwrap());
    let next = within(SECOND * 5, "the waiter is granted", wait).await.unwrap().expect("granted");

    let listed = client.locks().await.unwrap();
    assert!(listed.iter().any(|lease| lease.key == k && lease.fence == next.fence()), "{listed:?}");
    let as_waiter = client.with_owner(format!("{test}-waiter"));
    assert!(matches!(as_waiter.renew_lease(&k, SECOND * 5).await, Ok(Some(Expiry::At(_)))));
    assert!(!client.release_lease(&k).await.unwrap(), "not this owner's");
    next.leak();
    assert!(as_waiter.release_lease(&k).await.unwrap());
    let _held = client.lock(&k).ttl(SECOND * 10).acquire().await.unwrap();
    assert!(client.force_release(&k).await.unwrap());
    assert!(observer.lease(&k).await.unwrap().is_none());
}

#[tokio::test]
async fn an_extension_in_its_own_schema_is_called_qualified_past_shadows_in_public() {
    let setup = format!("CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock; {SHADOWS}");
    let observer = database("client_schema_own", &setup).await;
    // The shadows are in place: an unqualified call is captured.
    let captured = observer.query_one("SELECT dlock_release('k', 'o')", &[]).await;
    assert!(format!("{:?}", captured.unwrap_err()).contains("captured by a shadow"));
    observer.batch_execute("SET search_path TO dlock, public").await.unwrap();
    for pooler in [PoolerMode::Session, PoolerMode::Transaction] {
        let client = client_of("client_schema_own", pooler);
        assert_eq!(client.extension_schema().await.unwrap(), "dlock");
        every_call_works(&client, &observer, &format!("schema_own_{pooler}")).await;
    }
}

#[tokio::test]
async fn a_schema_name_that_needs_quoting_is_quoted() {
    let setup = r#"CREATE SCHEMA "Dlock ""Ext"""; CREATE EXTENSION dlock SCHEMA "Dlock ""Ext""";"#;
    let observer = database("client_schema_quoted", setup).await;
    observer.batch_execute(r#"SET search_path TO "Dlock ""Ext""""#).await.unwrap();
    let client = client_of("client_schema_quoted", PoolerMode::Session);
    assert_eq!(client.extension_schema().await.unwrap(), "Dlock \"Ext\"");
    every_call_works(&client, &observer, "schema_quoted").await;
}

#[tokio::test]
async fn an_extension_in_public_still_works() {
    let observer = Cluster::shared().connect().await;
    let client = client_of("postgres", PoolerMode::Session);
    assert_eq!(client.extension_schema().await.unwrap(), "public");
    every_call_works(&client, &observer, "schema_public").await;
}

#[tokio::test]
async fn a_database_without_the_extension_is_a_typed_error_until_it_is_installed() {
    let session = database("client_schema_missing", "SELECT 1").await;
    let client = client_of("client_schema_missing", PoolerMode::Session);
    let k = key("schema_missing", "k");
    for outcome in [
        client.lock(&k).try_acquire().await.map(|_| ()),
        client.locks().await.map(|_| ()),
        client.force_release(&k).await.map(|_| ()),
        client.extension_schema().await.map(|_| ()),
    ] {
        match outcome {
            Err(e @ Error::NotInstalled { .. }) => {
                let Error::NotInstalled { database } = &e else { unreachable!() };
                assert_eq!(database, "client_schema_missing");
                assert!(e.to_string().contains("CREATE EXTENSION dlock"), "{e}");
            }
            other => panic!("expected Err(NotInstalled), got {other:?}"),
        }
    }
    // Not remembered: once installed, the same client finds it.
    session.batch_execute("CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock").await.unwrap();
    let guard = client.lock(&k).acquire().await.expect("installed now");
    assert!(guard.release().await.unwrap());
}
