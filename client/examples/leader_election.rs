//! Leader election: of N copies of this program, one is the leader and runs the job; the others
//! wait on the server (in arrival order, no polling). Kill the leader (even with `kill -9`): its
//! lease is no longer renewed, and the next in line takes over within the ttl.
//!
//! ```sh
//! DATABASE_URL=postgresql://app@localhost/app cargo run -p dlock --example leader_election -- a
//! DATABASE_URL=postgresql://app@localhost/app cargo run -p dlock --example leader_election -- b
//! ```

use std::time::Duration;

use dlock_client::{Client, Error};

/// How long a dead leader can keep the others waiting.
const TTL: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> Result<(), Error> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "candidate".into());
    let client = Client::connect(&std::env::var("DATABASE_URL").unwrap_or_default()).await?;
    loop {
        println!("{name}: waiting to lead");
        let guard = client.lock("example:leader").ttl(TTL).wait_forever().acquire().await?;
        println!("{name}: leading with fence {}", guard.fence());
        let lost = guard.lost();
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                () = lost.cancelled() => break,
                _ = ticks.tick() => println!("{name}: leader's job tick (fence {})", guard.fence()),
            }
        }
        // Lost (a long pause, a cut connection): stop leading, then stand in line again.
        eprintln!("{name}: lost the lead");
        drop(guard);
    }
}
