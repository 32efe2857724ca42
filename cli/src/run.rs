//! `dlock run`: a command run only while the lease is held, killed if the lease is lost; and
//! that supervision of a command, which `dlock elect` shares.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use dlock_client::{CancellationToken, Client};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::{Failure, display_command, parse_duration};

/// Options of `dlock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The key to lock (e.g. the job's name).
    #[arg(long)]
    pub key: String,
    /// Time to live of the lease; a watchdog renews it every ttl/3 while the command runs, so
    /// this bounds how long the key stays taken after this machine dies.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// How long to wait for another owner to let go (0: give up at once, exit 75).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub wait: Duration,
    /// Take the key shared (a read lock): beside other shared holders, never beside an
    /// exclusive one.
    #[arg(long)]
    pub shared: bool,
    /// A semaphore of N permits: at most N shared holders at once (N >= 1, else exit 64;
    /// every holder of the key must pass the same N). Implies --shared.
    #[arg(long, value_name = "N")]
    pub max_holders: Option<u32>,
    /// After the lease is lost, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Refuses option values clap cannot check, before anything connects.
pub fn check(args: &RunArgs) -> Result<(), Failure> {
    if args.max_holders == Some(0) {
        return Err(Failure::Usage("--max-holders must be at least 1 (a semaphore of N permits)".into()));
    }
    Ok(())
}

/// Acquires, runs the command to its end, releases; the command's exit status.
pub async fn run(client: &Client, args: RunArgs) -> Result<u8, Failure> {
    check(&args)?;
    let builder = match (args.shared, args.max_holders) {
        (_, Some(n)) => client.semaphore(&args.key, n),
        (true, None) => client.lock(&args.key).shared(),
        (false, None) => client.lock(&args.key),
    };
    let guard = builder.ttl(args.ttl).wait(args.wait).acquire().await?;
    let env = [("DLOCK_KEY", args.key.clone()), ("DLOCK_FENCE", guard.fence().to_string())];
    let what = format!("the lease on {}", args.key);
    let status = supervise(&args.command, &env, guard.lost(), args.grace, &what).await;
    release(guard).await;
    status
}

/// Runs `command` with `env` to its end, forwarding SIGINT and SIGTERM to it; once `lost`
/// fires (`what` was lost), sends it SIGTERM, and SIGKILL after `grace`. Its exit status.
pub async fn supervise(
    command: &[OsString],
    env: &[(&str, String)],
    lost: CancellationToken,
    grace: Duration,
    what: &str,
) -> Result<u8, Failure> {
    // From here on SIGINT and SIGTERM are forwarded rather than ending dlock, so that the lease
    // is released after the command is gone (before this, they end dlock and its wait).
    let signals = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
    let (Ok(mut interrupt), Ok(mut terminate)) = signals else {
        return Err(Failure::Other("cannot install signal handlers".into()));
    };
    let spawned = Command::new(&command[0]).args(&command[1..]).envs(env.iter().cloned()).spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return Err(Failure::Other(format!("cannot run {}: {e}", display_command(command)))),
    };
    let pid = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok());
    let mut lease_lost = false;
    // When the command gets SIGKILL, once the lease is lost.
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        let grace_over = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => break status,
            _ = interrupt.recv() => send(pid, libc::SIGINT),
            _ = terminate.recv() => send(pid, libc::SIGTERM),
            () = lost.cancelled(), if !lease_lost => {
                lease_lost = true;
                eprintln!(
                    "dlock: {what} was lost; sending SIGTERM to the command (SIGKILL in {})",
                    humantime::format_duration(grace)
                );
                send(pid, libc::SIGTERM);
                kill_at = Some(Instant::now() + grace);
            }
            () = grace_over => {
                eprintln!("dlock: the command outlived the grace period; sending SIGKILL");
                // An error means it has exited meanwhile: the next wait() reports how.
                let _ = child.start_kill();
                kill_at = None;
            }
        }
    };
    match status {
        Ok(status) => Ok(exit_code(status)),
        Err(e) => Err(Failure::Other(format!("waiting for the command failed: {e}"))),
    }
}

/// Gives the lease back; a failure only means it runs out its ttl, so it is only reported.
async fn release(guard: dlock_client::Guard) {
    let key = guard.key().to_string();
    if let Err(e) = guard.release().await {
        eprintln!("dlock: releasing {key} failed ({e}); the lease ends by its ttl");
    }
}

/// Sends `signal` to the command, which has not been reaped yet (so `pid` is still its own).
fn send(pid: Option<libc::pid_t>, signal: libc::c_int) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) with a pid of our unreaped child; no memory is involved.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed the command.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(crate::EXIT_FAILURE),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(crate::EXIT_FAILURE),
        (None, None) => crate::EXIT_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
