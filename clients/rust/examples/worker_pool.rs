//! A pool of workers sharing jobs through dlock: each job is a key; a worker takes a job's lock
//! with a try (never waiting), does the job while the watchdog keeps the lease, and releases it.
//! Run several copies of this program at once: no job is ever done by two workers at a time.
//!
//! ```sh
//! DATABASE_URL=postgresql://app@localhost/app cargo run -p dlock --example worker_pool
//! ```

use std::time::Duration;

use dlock_client::{Client, Error};

const JOBS: u32 = 20;
const WORKERS: u32 = 4;

async fn do_job(job: u32, fence: i64) {
    // Real work would pass `fence` with every write it makes (a fenced UPDATE, or a resource
    // that refuses fences older than the newest it has seen).
    println!("job {job}: working under fence {fence}");
    tokio::time::sleep(Duration::from_millis(200)).await;
}

async fn worker(client: Client, id: u32) -> Result<u32, Error> {
    let mut done = 0;
    for job in 0..JOBS {
        // A try: if another worker (here or in another process) has the job, move on.
        let Some(guard) =
            client.lock(format!("example:job:{job}")).ttl(Duration::from_secs(10)).try_acquire().await?
        else {
            continue;
        };
        tokio::select! {
            () = guard.lost().cancelled_owned() => eprintln!("worker {id}: lost job {job}, stopping it"),
            () = do_job(job, guard.fence()) => done += 1,
        }
        guard.release().await?;
    }
    Ok(done)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let client = Client::connect(&std::env::var("DATABASE_URL").unwrap_or_default()).await?;
    let workers: Vec<_> = (0..WORKERS).map(|id| tokio::spawn(worker(client.clone(), id))).collect();
    for (id, handle) in workers.into_iter().enumerate() {
        let done = handle.await.expect("worker task")?;
        println!("worker {id} did {done} jobs");
    }
    Ok(())
}
