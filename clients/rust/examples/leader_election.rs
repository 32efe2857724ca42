//! Leader election: of N copies of this program, one leads and runs the job; the others
//! campaign, waiting on the client's listener (no polling, no connection held). Kill the leader
//! (even with `kill -9`): its lease is no longer renewed, and the next candidate takes over
//! within the ttl. Each copy also prints every change of leader it observes.
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
    let election = client.election("example:leader").ttl(TTL);

    let mut changes = election.observe().await?;
    let observer = name.clone();
    tokio::spawn(async move {
        while let Some(Ok(leader)) = changes.next().await {
            match leader {
                Some(leader) => println!("{observer}: {:?} leads (term {})", leader.info, leader.term),
                None => println!("{observer}: nobody leads"),
            }
        }
    });

    loop {
        println!("{name}: campaigning");
        let leadership = election.campaign(name.as_str()).await?;
        println!("{name}: leading in term {}", leadership.term());
        let lost = leadership.lost();
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                () = lost.cancelled() => break,
                _ = ticks.tick() => println!("{name}: leader's job tick (term {})", leadership.term()),
            }
        }
        // Lost (a long pause, a cut connection): stop leading, then campaign again.
        eprintln!("{name}: lost the lead");
        drop(leadership);
    }
}
