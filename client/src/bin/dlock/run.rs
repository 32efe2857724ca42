//! `dlock run`: a command run only while the lease is held, killed if the lease is lost.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use dlock_client::Client;
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
    /// After the lease is lost, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Acquires, runs the command to its end, releases; the command's exit status.
pub async fn run(client: &Client, args: RunArgs) -> Result<u8, Failure> {
    let guard = client.lock(&args.key).ttl(args.ttl).wait(args.wait).acquire().await?;
    // From here on SIGINT and SIGTERM are forwarded rather than ending dlock, so that the lease
    // is released after the command is gone (before this, they end dlock and its wait).
    let signals = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
    let (Ok(mut interrupt), Ok(mut terminate)) = signals else {
        release(guard).await;
        return Err(Failure::Other("cannot install signal handlers".into()));
    };
    let spawned = Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("DLOCK_KEY", &args.key)
        .env("DLOCK_FENCE", guard.fence().to_string())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            release(guard).await;
            return Err(Failure::Other(format!("cannot run {}: {e}", display_command(&args.command))));
        }
    };
    let pid = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok());
    let lost = guard.lost();
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
                    "dlock: the lease on {} was lost; sending SIGTERM to the command (SIGKILL in {})",
                    args.key,
                    humantime::format_duration(args.grace)
                );
                send(pid, libc::SIGTERM);
                kill_at = Some(Instant::now() + args.grace);
            }
            () = grace_over => {
                eprintln!("dlock: the command outlived the grace period; sending SIGKILL");
                // An error means it has exited meanwhile: the next wait() reports how.
                let _ = child.start_kill();
                kill_at = None;
            }
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            release(guard).await;
            return Err(Failure::Other(format!("waiting for the command failed: {e}")));
        }
    };
    release(guard).await;
    Ok(exit_code(status))
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
