//! `dlock metrics --listen ADDR`: dlock's counters and lease gauges for Prometheus, read from
//! the database at every scrape (one statement: `query`), written in the text exposition
//! format (`render`), served over HTTP/1.1 at `/metrics` (`serve`).
//!
//! The database may come and go: a scrape it cannot answer gets 503 with the reason, and the
//! next one connects again. Only an unusable `--listen` address ends the command (exit 64).

mod query;
mod render;
mod serve;

use std::net::SocketAddr;

use clap::Args;
use dlock_client::Client;

use crate::Failure;

/// Exit status when `--listen` cannot be used: not an address, or it cannot be bound (EX_USAGE).
pub const EXIT_BAD_LISTEN: u8 = 64;

/// How many connections the endpoint opens at most: scrapes are short and seldom overlap.
const POOL_SIZE: usize = 2;

/// The arguments of `dlock metrics`.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Address to serve /metrics on: an IP address and a port (127.0.0.1:9187, [::1]:9187,
    /// 0.0.0.0:9187 for every interface).
    #[arg(long, default_value = "127.0.0.1:9187")]
    pub listen: String,
}

/// Serves /metrics until the process is stopped; returns only when `--listen` is unusable
/// (exit 64) or the connection string makes no sense (a failure).
pub async fn run(database_url: &str, args: MetricsArgs) -> Result<u8, Failure> {
    let address: SocketAddr = match args.listen.parse() {
        Ok(address) => address,
        Err(e) => {
            eprintln!(
                "dlock: --listen {:?} is not an address to listen on: {e} (write an IP address and \
                 a port, e.g. 127.0.0.1:9187)",
                args.listen
            );
            return Ok(EXIT_BAD_LISTEN);
        }
    };
    // Lazy: the endpoint serves (503s) while the database is down, and connects when it is up.
    let client = Client::builder(database_url).pool_size(POOL_SIZE).build()?;
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("dlock: cannot listen on {address}: {e}");
            return Ok(EXIT_BAD_LISTEN);
        }
    };
    // The bound address, not the asked one: with port 0 the system chose it.
    let bound = listener.local_addr().unwrap_or(address);
    eprintln!("dlock: serving metrics on http://{bound}/metrics");
    serve::serve(listener, client).await;
    Ok(0)
}
