//! The fenced resource: a table in a second database that accepts a write only if its fence is
//! at least the newest fence it has seen for the key (checked and recorded in one statement,
//! under the row lock of `fence_max`), and keeps every accepted and refused write for the checker.

use tokio_postgres::Client;

/// Name of the resource's database (on the same cluster as dlock, so one server clock).
pub const DATABASE: &str = "chaos_resource";

/// Tables and the one write function every worker calls.
const SCHEMA: &str = r#"
CREATE TABLE fence_max (key text PRIMARY KEY, fence bigint NOT NULL);
CREATE TABLE accepted (id bigserial PRIMARY KEY, key text NOT NULL, fence bigint NOT NULL,
                       owner text NOT NULL, phase text NOT NULL, at timestamptz NOT NULL,
                       client_at timestamptz);
CREATE TABLE refused (id bigserial PRIMARY KEY, key text NOT NULL, fence bigint NOT NULL,
                      owner text NOT NULL, phase text NOT NULL, newest bigint,
                      at timestamptz NOT NULL, client_at timestamptz);
-- accepted: whether the write was taken; at: the server clock (epoch s) when it was judged.
CREATE FUNCTION chaos_write(k text, f bigint, o text, p text, c timestamptz,
                            OUT accepted boolean, OUT at float8)
LANGUAGE plpgsql AS $$
DECLARE
  newest bigint;
  judged timestamptz;
BEGIN
  -- The row lock serialises writers of one key; the WHERE refuses a lower fence.
  INSERT INTO fence_max AS m VALUES (k, f)
    ON CONFLICT (key) DO UPDATE SET fence = excluded.fence WHERE m.fence <= excluded.fence
    RETURNING m.fence INTO newest;
  accepted := newest IS NOT NULL;
  judged := clock_timestamp();
  at := extract(epoch FROM judged);
  IF accepted THEN
    INSERT INTO accepted (key, fence, owner, phase, at, client_at) VALUES (k, f, o, p, judged, c);
  ELSE
    SELECT m.fence INTO newest FROM fence_max m WHERE m.key = k;
    INSERT INTO refused (key, fence, owner, phase, newest, at, client_at)
      VALUES (k, f, o, p, newest, judged, c);
  END IF;
END $$;
"#;

/// The statement workers send (parameters: key, fence, owner, phase, client time or NULL).
pub const WRITE: &str =
    "SELECT accepted, at FROM chaos_write($1::text, $2::bigint, $3::text, $4::text, $5::timestamptz)";

/// The server clock as epoch seconds (the same clock dlock uses: one cluster).
pub const SERVER_NOW: &str = "SELECT extract(epoch FROM clock_timestamp())::float8";

/// Creates the resource's database `DATABASE` on the cluster at `port` and installs it there:
/// the database's connection string (libpq words), and a session on it.
pub async fn create(port: u16) -> (String, Client) {
    let session = |url: String| async move {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok::<_, tokio_postgres::Error>(client)
    };
    session(format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"))
        .await
        .expect("admin session on the resource's cluster")
        .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
        .await
        .expect("CREATE DATABASE");
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname={DATABASE} connect_timeout=3");
    let db = session(url.clone()).await.expect("resource session");
    install(&db).await.expect("install the resource");
    (url, db)
}

/// Creates the resource's tables and write function (`resource` is on `DATABASE`).
pub async fn install(resource: &Client) -> Result<(), tokio_postgres::Error> {
    resource.batch_execute(SCHEMA).await
}

/// One accepted write, as the resource recorded it.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub id: i64,
    pub key: String,
    pub fence: i64,
    pub owner: String,
    pub at: f64,
}

/// One refused write: its fence and the newest fence the resource had then.
#[derive(Debug, Clone)]
pub struct Refused {
    pub key: String,
    pub fence: i64,
    pub owner: String,
    pub newest: Option<i64>,
    pub at: f64,
}

/// Everything the resource recorded, in the order it judged the writes.
pub async fn read(resource: &Client) -> Result<(Vec<Accepted>, Vec<Refused>), tokio_postgres::Error> {
    let accepted = resource
        .query("SELECT id, key, fence, owner, extract(epoch FROM at)::float8 FROM accepted ORDER BY id", &[])
        .await?
        .iter()
        .map(|r| Accepted { id: r.get(0), key: r.get(1), fence: r.get(2), owner: r.get(3), at: r.get(4) })
        .collect();
    let refused = resource
        .query(
            "SELECT key, fence, owner, newest, extract(epoch FROM at)::float8 FROM refused ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|r| Refused { key: r.get(0), fence: r.get(1), owner: r.get(2), newest: r.get(3), at: r.get(4) })
        .collect();
    Ok((accepted, refused))
}
