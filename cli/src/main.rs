//! `dlock`: distributed locks inside PostgreSQL from the shell — a distributed `flock` for cron
//! jobs (`dlock run`), a view of the live leases (`dlock list`), and lease steps for scripts.

mod commands;
mod elect;
mod metrics;
mod run;
mod shards;
mod target;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use dlock_client::Error;

use crate::shards::ShardsCommand;
use crate::target::Target;

/// Exit status when the lock was not acquired: another owner holds the key, or the wait
/// elapsed (EX_TEMPFAIL, as `flock -E 75` would be set up to do).
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status of any other failure (EX_SOFTWARE), with a message on stderr.
pub const EXIT_FAILURE: u8 = 70;
/// Exit status of `release`/`renew` when the lease was not (or no longer) ours.
pub const EXIT_NOT_OURS: u8 = 1;
/// Exit status of `leader` when nobody leads the election.
pub const EXIT_NOBODY_LEADS: u8 = 1;
/// Exit status of a bad value of an option that clap cannot check (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

const EXIT_CODES: &str = "\
Exit status:
  0    done (run: the command's own status is passed through)
  1    release/renew: the lease was not ours, or already gone; release --force: the key was free;
       leader: nobody leads (--json prints null)
  2    bad usage
  64   a bad option value: an empty or over-long key or owner, --ttl 0, run --max-holders 0
       (refused before anything is sent); a --shards file that cannot be read or is not a
       valid map; metrics: the --listen address is not one, or cannot be listened on, or
       --shards was given (EX_USAGE)
  70   any other error (connection, permission, server error), explained on stderr
  75   the lock was not acquired: another owner holds the key, or --wait elapsed (EX_TEMPFAIL);
       elect: --wait elapsed before this process led; shards apply: installed everywhere, but
       moved keys still wait for their old servers after --wait (run it again to go on)
  128+N  run, elect: the command was killed by signal N (143 = SIGTERM, 137 = SIGKILL)";

/// Distributed locks inside PostgreSQL (the dlock extension), from the command line.
#[derive(Debug, Parser)]
#[command(name = "dlock", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
struct Global {
    /// PostgreSQL connection string: a URL (postgresql://user@host:5432/db) or key=value pairs.
    /// Parts it leaves out come from PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD, PGSSLMODE,
    /// PGSSLROOTCERT. TLS as with libpq: sslmode=disable|prefer|require|verify-ca|verify-full,
    /// sslrootcert=PATH. Behind pgbouncer in transaction mode add dlock_pooler=transaction.
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "",
        hide_default_value = true,
        global = true,
        conflicts_with = "shards"
    )]
    database_url: String,
    /// A shard map, in place of --database-url: every key (or election name) goes to the
    /// server FILE names for it. FILE is TOML: `epoch = N` and a [servers] table of
    /// `name = "connection string"`. `dlock shards apply` installs a new map on the servers.
    #[arg(long, env = "DLOCK_SHARDS", value_name = "FILE", global = true)]
    shards: Option<PathBuf>,
    /// Owner identity of the leases taken, renewed and released. Required (stable across calls)
    /// for acquire, renew and release; `run` makes an unguessable one (host:pid:random) if unset.
    /// Whoever knows an owner string (and has the role) can renew and release its leases.
    #[arg(long, env = "DLOCK_OWNER", hide_env_values = true, global = true)]
    owner: Option<String>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding the lock (a distributed flock for cron jobs).
    ///
    /// Acquires KEY (renewed by a watchdog every ttl/3), runs the command with DLOCK_KEY and
    /// DLOCK_FENCE in its environment, forwards SIGINT and SIGTERM to it, and releases the lock
    /// when it ends. If the lease is lost meanwhile (force-released, or not renewed in time) the
    /// command gets SIGTERM, then SIGKILL after --grace. Exits with the command's status
    /// (128+N if killed by signal N), or 75 if the lock was not acquired.
    ///
    /// Example: dlock run --key report:nightly --wait 10s -- ./nightly-report.sh
    Run(run::RunArgs),
    /// Run a command only while leading an election; resign when it ends.
    ///
    /// Waits to lead NAME (renewed by a watchdog every ttl/3), runs the command with
    /// DLOCK_ELECTION and DLOCK_TERM in its environment, and stops it as `run` does when the
    /// lead is lost (SIGTERM, SIGKILL after --grace). Exits with the command's status, or 75 if
    /// --wait elapsed first.
    ///
    /// Example: dlock elect scheduler --info "$(hostname):8080" -- ./scheduler
    Elect(elect::ElectArgs),
    /// Print the leader of an election: info, term, since, expires_at (never its candidate).
    ///
    /// Exits 1 when nobody leads (with --json it prints null).
    Leader {
        /// The election's name.
        name: String,
    },
    /// List live leases (the dlock_locks view): key, owner, fence, holds, expiry, role, waiters.
    ///
    /// Owners of other roles' leases show as "-" (null in --json) unless you are a superuser
    /// or a dlock_admin member. Session-bound leases have no expiry.
    List,
    /// Take a lease for scripts and print its fence; needs --owner (or DLOCK_OWNER).
    ///
    /// The lease is kept after dlock exits (nothing renews it): renew it with `dlock renew`
    /// before the ttl runs out and give it back with `dlock release`, as the same owner.
    /// Acquiring a key this owner already holds adds a hold (same fence). Exits 75 if another
    /// owner holds the key (after waiting up to --wait).
    Acquire {
        /// The key to lock.
        key: String,
        /// How long the lease lives unless renewed (30s, 500ms, 5m, 1h).
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        ttl: Duration,
        /// How long to wait for another owner to let go (0: answer at once).
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        wait: Duration,
    },
    /// Extend a lease to now + ttl and print the new expiry; needs --owner (or DLOCK_OWNER).
    ///
    /// Exits 1 if the lease is not this owner's, or already gone.
    Renew {
        /// The locked key.
        key: String,
        /// The new time to live, from now (30s, 5m, 1h).
        #[arg(long, value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Serve dlock's counters and lease gauges for Prometheus at http://LISTEN/metrics.
    ///
    /// Each scrape reads dlock_stats (counters per database, as dlock_<name>_total, and the
    /// wait-time histogram dlock_wait_seconds; needs shared_preload_libraries = 'dlock') and
    /// dlock_locks (dlock_leases_live, dlock_leases_waiters, dlock_leases_oldest_age_seconds)
    /// in one statement. While the database cannot be reached a scrape gets 503 with the
    /// reason; the command keeps serving and reconnects. Exits 64 if --listen is unusable.
    ///
    /// Example: dlock metrics --listen 127.0.0.1:9187 --database-url postgresql://monitor@db/app
    Metrics(metrics::MetricsArgs),
    /// The shard map of --shards (or DLOCK_SHARDS): which server a key belongs to, the map.
    Shards {
        #[command(subcommand)]
        command: ShardsCommand,
    },
    /// Give back one hold of a lease; needs --owner (or DLOCK_OWNER), except with --force.
    ///
    /// Exits 0 if released, 1 if the lease was not this owner's or already gone. With --force
    /// (superusers and dlock_admin members) frees the key whoever holds it: exits 0 if it was
    /// held, 1 if it was free.
    Release {
        /// The locked key.
        key: String,
        /// Free the key whoever holds it (administrators; logged by the server).
        #[arg(long)]
        force: bool,
    },
}

/// Why a command ended early; each maps to an exit status.
#[derive(Debug)]
pub enum Failure {
    /// The lock was not acquired (exit 75).
    NotAcquired(String),
    /// A bad option value (exit 64).
    Usage(String),
    /// Anything else (exit 70).
    Other(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        match e {
            Error::NotAcquired | Error::Timeout => Failure::NotAcquired(e.to_string()),
            // Refused by the client before anything was sent: an option's value. The server's
            // refusals (a ttl above dlock.max_ttl, a semaphore of another size) stay 70.
            Error::InvalidArgument(ref refused) if refused.as_db_error().is_none() => {
                Failure::Usage(e.to_string())
            }
            e => Failure::Other(e.to_string()),
        }
    }
}

/// Parses `30s`, `500ms`, `5m`, `1h`, `1h 30m` (humantime).
fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. 30s, 500ms, 5m, 1h)"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(Failure::Other(format!("cannot start the runtime: {e}"))),
    };
    match runtime.block_on(execute(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => fail(failure),
    }
}

fn fail(failure: Failure) -> ExitCode {
    let (message, code) = match failure {
        Failure::NotAcquired(message) => (message, EXIT_NOT_ACQUIRED),
        Failure::Usage(message) => (message, EXIT_USAGE),
        Failure::Other(message) => (message, EXIT_FAILURE),
    };
    eprintln!("dlock: {message}");
    ExitCode::from(code)
}

async fn execute(cli: Cli) -> Result<u8, Failure> {
    let Global { database_url, owner, json, shards } = cli.global;
    let target = Target::new(database_url, shards.as_deref())?;
    // Scripts' steps need a stable owner: a generated one would be new on every call.
    let scripted_owner = || {
        owner.clone().unwrap_or_else(|| {
            Cli::command()
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "acquire, renew and release need --owner (or DLOCK_OWNER): the same owner \
                     on every call",
                )
                .exit()
        })
    };
    match cli.command {
        Command::Run(args) => {
            run::check(&args)?;
            let client = target.client_for(&args.key, owner.as_deref()).await?;
            run::run(&client, args).await
        }
        Command::Elect(args) => {
            let client = target.client_for(&args.name, owner.as_deref()).await?;
            elect::elect(&client, args).await
        }
        Command::Leader { name } => elect::leader(&target.client_for(&name, None).await?, &name, json).await,
        Command::List => commands::list(target.every_client()?, json).await,
        Command::Acquire { key, ttl, wait } => {
            let owner = scripted_owner();
            commands::acquire(&target.client_for(&key, Some(&owner)).await?, &key, ttl, wait, json).await
        }
        Command::Renew { key, ttl } => {
            let owner = scripted_owner();
            commands::renew(&target.client_for(&key, Some(&owner)).await?, &key, ttl, json).await
        }
        Command::Release { key, force: true } => {
            commands::force_release(&target.client_for(&key, None).await?, &key, json).await
        }
        Command::Metrics(args) => match target {
            Target::Database(url) => metrics::run(&url, args).await,
            Target::Shards(_) => Err(Failure::Usage(
                "metrics serves one server: run one `dlock metrics --database-url URL` per server of the \
                 shard map"
                    .into(),
            )),
        },
        Command::Release { key, force: false } => {
            let owner = scripted_owner();
            commands::release(&target.client_for(&key, Some(&owner)).await?, &key, json).await
        }
        Command::Shards { command } => match &target {
            Target::Shards(config) => shards::run(config, &command, json).await,
            Target::Database(_) => Cli::command()
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "the shards commands need --shards FILE (or DLOCK_SHARDS)",
                )
                .exit(),
        },
    }
}

/// The command line of `run`, for messages.
fn display_command(command: &[OsString]) -> String {
    command.iter().map(|part| part.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_are_human() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn run_takes_the_command_after_the_options() {
        let cli =
            Cli::try_parse_from(["dlock", "run", "--key", "k", "--ttl", "2s", "--", "sh", "-c", "exit 3"])
                .unwrap();
        let Command::Run(args) = cli.command else { panic!("not run") };
        assert_eq!(args.key, "k");
        assert_eq!(args.ttl, Duration::from_secs(2));
        assert_eq!(display_command(&args.command), "sh -c exit 3");
    }

    #[test]
    fn elect_takes_its_name_options_and_command_and_max_holders_implies_shared() {
        let cli =
            Cli::try_parse_from(["dlock", "elect", "jobs", "--info", "a:1", "--", "sleep", "1"]).unwrap();
        let Command::Elect(args) = cli.command else { panic!("not elect") };
        assert_eq!((args.name.as_str(), args.info.as_deref(), args.wait), ("jobs", Some("a:1"), None));
        assert_eq!(display_command(&args.command), "sleep 1");
        let cli =
            Cli::try_parse_from(["dlock", "run", "--key", "k", "--max-holders", "3", "--", "true"]).unwrap();
        let Command::Run(args) = cli.command else { panic!("not run") };
        assert_eq!((args.shared, args.max_holders), (false, Some(3)));
        assert!(
            Cli::try_parse_from(["dlock", "run", "--key", "k", "--max-holders", "-1", "--", "true"]).is_err()
        );
    }
}
