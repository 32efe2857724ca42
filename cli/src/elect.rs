//! `dlock elect`: a command run only while this process leads an election, stopped as `run`
//! stops its command when the lead is lost; and `dlock leader`: who leads.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use dlock_client::{Client, Leader};
use serde_json::json;

use crate::commands::timestamp;
use crate::run::supervise;
use crate::{EXIT_NOBODY_LEADS, Failure, parse_duration};

/// Options of `dlock elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's name (it shares the key space of locks).
    pub name: String,
    /// What `dlock leader` shows of this leader (at most 1 kB), e.g. its address.
    #[arg(long)]
    pub info: Option<String>,
    /// Time to live of the lead; a watchdog renews it every ttl/3 while the command runs, so
    /// this bounds how long the election stays led after this machine dies.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// How long to wait to lead (default: without limit); exit 75 when it elapses.
    #[arg(long, value_parser = parse_duration)]
    pub wait: Option<Duration>,
    /// After the lead is lost, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Campaigns, runs the command while leading, resigns; the command's exit status.
pub async fn elect(client: &Client, args: ElectArgs) -> Result<u8, Failure> {
    let mut election = client.election(&args.name).ttl(args.ttl);
    if let Some(wait) = args.wait {
        election = election.wait(wait);
    }
    let leadership = match args.info {
        Some(info) => election.campaign(info).await?,
        None => election.campaign_without_info().await?,
    };
    let env = [("DLOCK_ELECTION", args.name.clone()), ("DLOCK_TERM", leadership.term().to_string())];
    let what = format!("the lead of {}", args.name);
    let status = supervise(&args.command, &env, leadership.lost(), args.grace, &what).await;
    if let Err(e) = leadership.resign().await {
        eprintln!("dlock: resigning the lead of {} failed ({e}); it ends by its ttl", args.name);
    }
    status
}

/// `dlock leader`: the leader's info, term, since and expires_at (exit 0), or that nobody
/// leads (exit 1; `null` with --json).
pub async fn leader(client: &Client, name: &str, json: bool) -> Result<u8, Failure> {
    let leader = client.election(name).leader().await?;
    if json {
        println!("{}", leader.as_ref().map_or(serde_json::Value::Null, leader_json));
    } else if let Some(leader) = &leader {
        println!("info        {}", leader.info.as_deref().unwrap_or(""));
        println!("term        {}", leader.term);
        println!("since       {}", timestamp(leader.since));
        println!("expires_at  {}", leader.expires_at.map_or_else(|| "session".into(), timestamp));
    } else {
        eprintln!("dlock: nobody leads {name}");
    }
    Ok(if leader.is_some() { 0 } else { EXIT_NOBODY_LEADS })
}

fn leader_json(leader: &Leader) -> serde_json::Value {
    json!({
        "info": leader.info,
        "term": leader.term,
        "since": timestamp(leader.since),
        "expires_at": leader.expires_at.map(timestamp),
    })
}
