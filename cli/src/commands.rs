//! `dlock list`, and the lease steps for shell scripts: `acquire`, `renew`, `release`.

use std::time::{Duration, SystemTime};

use dlock_client::{Client, Expiry, LiveLease};
use serde_json::json;

use crate::{EXIT_NOT_OURS, Failure};

/// One row of `dlock_locks`, as printed.
#[derive(Debug, serde::Serialize)]
struct LockRow {
    /// The server of the shard map that holds it (only with `--shards`).
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    key: String,
    owner: Option<String>,
    fence: i64,
    hold_count: i64,
    expires_at: Option<String>,
    holder_role: Option<String>,
    waiters: i64,
}

impl From<LiveLease> for LockRow {
    fn from(lease: LiveLease) -> Self {
        LockRow {
            server: None,
            key: lease.key,
            owner: lease.owner,
            fence: lease.fence,
            hold_count: lease.hold_count,
            expires_at: lease.expires_at.map(timestamp),
            holder_role: lease.holder_role,
            waiters: lease.waiters,
        }
    }
}

/// A server timestamp in RFC 3339 (UTC, milliseconds).
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// `dlock list`: a table, or a JSON array with `--json`; with a shard map, every server's
/// leases, each row naming its server.
pub async fn list(clients: Vec<(Option<String>, Client)>, json: bool) -> Result<u8, Failure> {
    let sharded = clients.iter().any(|(server, _)| server.is_some());
    let mut rows = Vec::new();
    for (server, client) in clients {
        let leases = client.locks().await.map_err(|e| match &server {
            Some(server) => Failure::Other(format!("server {server}: {e}")),
            None => Failure::from(e),
        })?;
        rows.extend(
            leases.into_iter().map(|lease| LockRow { server: server.clone(), ..LockRow::from(lease) }),
        );
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    if json {
        let text = serde_json::to_string_pretty(&rows).map_err(|e| Failure::Other(e.to_string()))?;
        println!("{text}");
    } else {
        print_table(&rows, sharded);
    }
    Ok(0)
}

fn print_table(rows: &[LockRow], sharded: bool) {
    let dash = || "-".to_string();
    let mut table = vec![
        ["server", "key", "owner", "fence", "holds", "expires_at", "holder_role", "waiters"]
            .map(String::from),
    ];
    table.extend(rows.iter().map(|row| {
        [
            row.server.clone().unwrap_or_default(),
            row.key.clone(),
            row.owner.clone().unwrap_or_else(dash),
            row.fence.to_string(),
            row.hold_count.to_string(),
            row.expires_at.clone().unwrap_or_else(|| "session".into()),
            row.holder_role.clone().unwrap_or_else(dash),
            row.waiters.to_string(),
        ]
    }));
    // The server column only with a shard map.
    let table: Vec<&[String]> =
        table.iter().map(|line| if sharded { &line[..] } else { &line[1..] }).collect();
    let mut widths = [0; 8];
    for line in &table {
        for (width, cell) in widths.iter_mut().zip(line.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for line in &table {
        let cells: Vec<String> =
            line.iter().zip(widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
}

/// `dlock acquire`: prints the fence and leaves the lease on the server (no renewals).
pub async fn acquire(
    client: &Client,
    key: &str,
    ttl: Duration,
    wait: Duration,
    json: bool,
) -> Result<u8, Failure> {
    let guard = client.lock(key).ttl(ttl).wait(wait).watchdog(false).acquire().await?;
    let info = guard.info();
    guard.leak();
    if json {
        let expires_at = info.expires_at.map(timestamp);
        println!(
            "{}",
            json!({ "key": info.key, "owner": info.owner, "fence": info.fence, "expires_at": expires_at })
        );
    } else {
        println!("{}", info.fence);
    }
    Ok(0)
}

/// `dlock renew`: prints the new expiry; exit 1 if the lease is not ours (or gone).
pub async fn renew(client: &Client, key: &str, ttl: Duration, json: bool) -> Result<u8, Failure> {
    let renewed = client.renew_lease(key, ttl).await?;
    let expires_at = match renewed {
        Some(Expiry::At(at)) => Some(timestamp(at)),
        _ => None,
    };
    let ours = renewed.is_some();
    if json {
        println!("{}", json!({ "key": key, "renewed": ours, "expires_at": expires_at }));
    } else if ours {
        // A session-bound lease renews to 'infinity'.
        println!("{}", expires_at.as_deref().unwrap_or("infinity"));
    } else {
        eprintln!("dlock: {key} is not held by this owner");
    }
    Ok(if ours { 0 } else { EXIT_NOT_OURS })
}

/// `dlock release`: exit 0 if the lease was ours, 1 if not (or already gone).
pub async fn release(client: &Client, key: &str, json: bool) -> Result<u8, Failure> {
    let released = client.release_lease(key).await?;
    report_release(key, released, json, "was not held by this owner");
    Ok(if released { 0 } else { EXIT_NOT_OURS })
}

/// `dlock release --force`: exit 0 if the key was held, 1 if it was free.
pub async fn force_release(client: &Client, key: &str, json: bool) -> Result<u8, Failure> {
    let released = client.force_release(key).await?;
    report_release(key, released, json, "was not held");
    Ok(if released { 0 } else { EXIT_NOT_OURS })
}

fn report_release(key: &str, released: bool, json: bool, why_not: &str) {
    if json {
        println!("{}", json!({ "key": key, "released": released }));
    } else if !released {
        eprintln!("dlock: {key} {why_not}");
    }
}
