//! One cycle of each role: a request, and if granted a hold (with checks and renewals) and a
//! release. Errors end the cycle: the caller reconnects.

use tokio_postgres::{Client, Error};

use super::lease::{Held, Plan};
use super::statements::{ACQUIRE, ACQUIRE_ALL, ACQUIRE_SHARED, CAMPAIGN, HELD_BY, LEADER, WAIT_FREE};
use super::{Role, Worker};
use crate::history::{Event, Mode};

/// Mostly short holds (many grants); one in fifty past the ttl, renewed or left to run out
/// under its holder (rarer than the hot keys' long holds: a long shared hold holds back every
/// later request of its key behind a waiting writer). `renew`: short holds are renewed too (an
/// election's lead); `multi`: a multi-key grant, whose keys are all checked again before the
/// release.
fn plan(w: &mut Worker, ttl: f64, renew: bool, multi: bool) -> Plan {
    if w.rng.chance(0.02) {
        let renewals = if w.rng.chance(0.5) { 1 + w.rng.below(2) as u32 } else { 0 };
        Plan { hold: w.rng.range(0.8 * ttl, 1.3 * ttl), renewals, check_before_release: multi }
    } else {
        let renewals = if renew { 1 + w.rng.below(2) as u32 } else { 0 };
        Plan { hold: w.rng.range(0.005, 0.1), renewals, check_before_release: multi }
    }
}

/// A shared lease (with the semaphore's size in the `semaphore` role) or, one time in ten,
/// an exclusive one, on one of the role's keys (each waits for every reader and holds back the
/// later ones); one time in twenty, only a wait for the key to be free (`dlock_wait_free`).
pub async fn read_write(w: &mut Worker, db: &Client) -> Result<(), Error> {
    let key = w.args.keys[w.rng.below(w.args.keys.len())].clone();
    if w.rng.chance(0.05) {
        let row = db.query_one(WAIT_FREE, &[&key, &w.args.wait]).await?;
        w.log.record(&Event::WaitFree { key, free: row.get(0), lb: row.get(1), ub: row.get(2) });
        return Ok(());
    }
    let max_holders = (w.args.role == Role::Semaphore).then_some(w.args.max_holders);
    let mode = if w.rng.chance(0.9) { Mode::Shared } else { Mode::Exclusive };
    single(w, db, key, mode, max_holders).await
}

/// One key in `mode`: acquire, hold, release.
async fn single(
    w: &mut Worker,
    db: &Client,
    key: String,
    mode: Mode,
    max_holders: Option<i32>,
) -> Result<(), Error> {
    let (owner, ttl, wait) = (w.next_owner(), w.ttl(), w.args.wait);
    let row = if mode == Mode::Shared {
        db.query_one(ACQUIRE_SHARED, &[&key, &owner, &ttl, &wait, &max_holders]).await?
    } else {
        db.query_one(ACQUIRE, &[&key, &owner, &ttl, &wait]).await?
    };
    let (fence, started, granted_by): (Option<i64>, f64, f64) = (row.get(0), row.get(1), row.get(2));
    let Some(fence) = fence else { return Ok(()) };
    // Granted after the statement began (by a releaser's transaction, on a hand-over): it lives
    // at least until then + ttl; the exact expiry is read next.
    w.log.record(&Event::Grant {
        owner: owner.clone(),
        key: key.clone(),
        fence,
        requested_at: Some(started),
        granted_by,
        live_until: started + ttl,
        bound: false,
        mode,
        max_holders,
        fast: false,
    });
    println!("hold {key} {fence}");
    let plan = plan(w, ttl, false, false);
    let held = Held { owner, keys: vec![key], fences: vec![fence], ttl, last_seen: granted_by };
    held.hold_and_release(db, &mut w.log, plan).await
}

/// Mostly `dlock_acquire_all` of 2–4 of the role's keys in a random order; otherwise a single
/// exclusive or shared lease on one of them (other holders the multi-key grants must exclude).
pub async fn multi_key(w: &mut Worker, db: &Client) -> Result<(), Error> {
    let roll = w.rng.unit();
    if roll < 0.2 {
        let key = w.args.keys[w.rng.below(w.args.keys.len())].clone();
        let mode = if roll < 0.1 { Mode::Exclusive } else { Mode::Shared };
        return single(w, db, key, mode, None).await;
    }
    let mut keys = w.args.keys.clone();
    let n = (2 + w.rng.below(3)).min(keys.len());
    for i in 0..n {
        let j = i + w.rng.below(keys.len() - i);
        keys.swap(i, j);
    }
    keys.truncate(n);
    let (owner, ttl, wait) = (w.next_owner(), w.ttl(), w.args.wait);
    let row = db.query_one(ACQUIRE_ALL, &[&keys, &owner, &ttl, &wait]).await?;
    let (fences, started, granted_by): (Option<Vec<Option<i64>>>, f64, f64) =
        (row.get(0), row.get(1), row.get(2));
    let Some(fences) = fences else {
        // Refused: none of the keys may be left held.
        let row = db.query_one(HELD_BY, &[&owner]).await?;
        w.log.record(&Event::NotGranted { owner, keys, left_held: row.get(0), at: row.get(1) });
        return Ok(());
    };
    w.log.record(&Event::GrantAll {
        owner: owner.clone(),
        keys: keys.clone(),
        fences: fences.clone(),
        requested_at: Some(started),
        granted_by,
        live_until: started + ttl,
    });
    // A partial answer is the checker's to report; nothing sane to hold then.
    let Some(fences) = fences.into_iter().collect::<Option<Vec<i64>>>().filter(|f| f.len() == keys.len())
    else {
        return Ok(());
    };
    println!("hold {} {}", keys[0], fences[0]);
    let plan = plan(w, ttl, false, true);
    Held { owner, keys, fences, ttl, last_seen: granted_by }.hold_and_release(db, &mut w.log, plan).await
}

/// Looks at the leader of one of the role's elections, campaigns in it, and leads with
/// renewals until it resigns (or lets the lead run out).
pub async fn election(w: &mut Worker, db: &Client) -> Result<(), Error> {
    let election = w.args.keys[w.rng.below(w.args.keys.len())].clone();
    observe(w, db, &election).await?;
    let (owner, ttl, wait) = (w.next_owner(), w.ttl(), w.args.wait);
    let row = db.query_one(CAMPAIGN, &[&election, &owner, &ttl, &owner, &wait]).await?;
    let (term, started, granted_by): (Option<i64>, f64, f64) = (row.get(0), row.get(1), row.get(2));
    let Some(term) = term else { return Ok(()) };
    w.log.record(&Event::Grant {
        owner: owner.clone(),
        key: election.clone(),
        fence: term,
        requested_at: Some(started),
        granted_by,
        live_until: started + ttl,
        bound: false,
        mode: Mode::Leader,
        max_holders: None,
        fast: false,
    });
    println!("hold {election} {term}");
    observe(w, db, &election).await?;
    let plan = plan(w, ttl, true, false);
    let held = Held { owner, keys: vec![election], fences: vec![term], ttl, last_seen: granted_by };
    held.hold_and_release(db, &mut w.log, plan).await
}

/// Records what `dlock_leader` shows of `election`.
async fn observe(w: &mut Worker, db: &Client, election: &str) -> Result<(), Error> {
    let row = db.query_one(LEADER, &[&election]).await?;
    w.log.record(&Event::Leader {
        election: election.to_string(),
        term: row.get(0),
        info: row.get(1),
        expires_at: row.get(2),
        lb: row.get(3),
        ub: row.get(4),
    });
    Ok(())
}
