//! The child program (README, "The child process protocol"): `dlock-conformance child` holds one
//! lease for the runner, which stops and continues it with signals. Stdout carries answers only.

use std::time::Duration;

use dlock_client::{Client, Guard, PoolerMode};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::kinds;

/// Runs the protocol on stdin and stdout until `quit` or the end of stdin.
pub async fn run() -> Result<(), String> {
    let url =
        std::env::var("DLOCK_CONFORMANCE_CHILD_DSN").map_err(|_| "DLOCK_CONFORMANCE_CHILD_DSN is not set")?;
    let pooler = match std::env::var("DLOCK_CONFORMANCE_CHILD_POOLER").as_deref() {
        Ok("transaction") => PoolerMode::Transaction,
        _ => PoolerMode::Session,
    };
    let client = Client::builder(&url).pooler(pooler).build().map_err(|e| e.to_string())?;
    let mut out = tokio::io::stdout();
    let mut say = async |line: String| -> Result<(), String> {
        out.write_all(format!("{line}\n").as_bytes()).await.map_err(|e| e.to_string())?;
        out.flush().await.map_err(|e| e.to_string())
    };
    say(format!("ready {}", std::process::id())).await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut lease: Option<Guard> = None;
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        let words: Vec<&str> = line.split(' ').collect();
        let answer = match (words.as_slice(), &lease) {
            (["lock", key, ttl_ms], _) => match ttl_ms.parse::<u64>() {
                Ok(ttl) => match client.lock(*key).ttl(Duration::from_millis(ttl)).acquire().await {
                    Ok(guard) => {
                        let answer = format!("ok {}", guard.fence());
                        lease = Some(guard);
                        answer
                    }
                    Err(e) => error(&e),
                },
                Err(_) => "error Protocol -".into(),
            },
            (["wait_lost", timeout_ms], Some(guard)) => match timeout_ms.parse::<u64>() {
                Ok(ms) => {
                    let lost = guard.lost();
                    let fired =
                        tokio::time::timeout(Duration::from_millis(ms), lost.cancelled()).await.is_ok();
                    format!("ok {fired}")
                }
                Err(_) => "error Protocol -".into(),
            },
            (["release"], Some(_)) => match lease.take().map(Guard::release) {
                Some(release) => match release.await {
                    Ok(ours) => format!("ok {ours}"),
                    Err(e) => error(&e),
                },
                None => "error Protocol -".into(),
            },
            (["quit"], _) => {
                say("ok bye".into()).await?;
                return Ok(());
            }
            _ => "error Protocol -".into(),
        };
        say(answer).await?;
    }
    Ok(())
}

/// An error answer: `error <Kind> <sqlstate or ->`.
fn error(e: &dlock_client::Error) -> String {
    let kind = kinds::of_client(e);
    format!("error {} {}", kind.kind, kind.sqlstate.as_deref().unwrap_or("-"))
}
