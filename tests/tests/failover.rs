//! Failover: a streaming-replication standby promoted (`pg_ctl promote`) after its primary
//! stopped immediately, which is what Patroni does on failover.
//!
//! With a synchronous standby (`synchronous_standby_names = '*'`, `synchronous_commit = on`)
//! every acknowledged TTL lease survives with its owner, fence, holds and expiry, and every new
//! grant gets a fence above every fence handed out before (contract rule 6). Session-bound
//! leases end with the old primary's sessions. With an asynchronous standby an acknowledged grant
//! can be lost and its fence handed out again: rule 6 covers synchronous standbys only. So can a
//! grant whose own commit stopped waiting for the standby (a cancel): PostgreSQL's rule. A
//! direct hand-off (preloaded) is not acknowledged before the standby has it even when the
//! *releaser's* wait was cancelled: the waiter waits on the releaser's commit record itself (a
//! bug this file found).
//! Each test runs a primary and a standby of its own.

use std::time::Duration;

use dlock_tests::{
    Cluster, LeaseRow, Session, Standby, disconnect_standby, eventually, finish, key, owner,
    require_sync_standby, wait_for_replay, wait_for_streaming, wait_for_waiters,
};

/// Preloaded: a release hands the key to a waiting session in its own transaction.
const PRELOAD: &str = "shared_preload_libraries = 'dlock'";
/// The default, spelled out: an acknowledged commit is flushed on the synchronous standby.
const SYNC_COMMIT: &str = "synchronous_commit = on";
/// Generous limit for a server-side state to be reached (polled, never a timed assertion).
const LIMIT: Duration = Duration::from_secs(30);

/// The fence sequence as `session` sees it: (`last_value`, `log_cnt`). On a primary, the last
/// fence handed out and how many more are already WAL-logged (nextval logs 32 ahead); on a
/// standby, `last_value` is the position WAL-logged, which promotion resumes after.
async fn fence_sequence(session: &Session) -> (i64, i64) {
    let row = session
        .query_one("SELECT last_value, log_cnt FROM dlock_internal.fence_seq", &[])
        .await
        .expect("read dlock_internal.fence_seq");
    (row.get(0), row.get(1))
}

async fn in_recovery(session: &Session) -> bool {
    session.query_one("SELECT pg_catalog.pg_is_in_recovery()", &[]).await.expect("pg_is_in_recovery").get(0)
}

/// Whether the backend `pid` waits for the synchronous standby to confirm its commit.
async fn waits_for_sync_standby(observer: &Session, pid: i32) -> bool {
    let rows = observer
        .query("SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'", &[&pid])
        .await
        .expect("read pg_stat_activity");
    !rows.is_empty()
}

fn assert_same_lease(after: &LeaseRow, before: &LeaseRow) {
    assert_eq!(
        (&after.owner, after.fence, after.hold_count),
        (&before.owner, before.fence, before.hold_count),
        "key {:?}: owner, fence and holds after the failover",
        before.key
    );
    let (was, is) = (before.expires_at.unwrap(), after.expires_at.unwrap());
    assert!(
        (was - is).abs() < 0.001,
        "key {:?}: expires_at {is} after the failover, {was} before",
        before.key
    );
    assert!((after.acquired_at - before.acquired_at).abs() < 0.001, "key {:?}: acquired_at", before.key);
}

#[tokio::test]
async fn synchronous_standby_keeps_acknowledged_leases_and_fences_keep_growing() {
    const T: &str = "synchronous_standby_keeps_acknowledged_leases_and_fences_keep_growing";
    let primary = Cluster::start_new("failover-sync", &[PRELOAD, SYNC_COMMIT]);
    let standby = Standby::clone_of(&primary, "failover-sync-standby");
    let p = primary.connect().await;
    require_sync_standby(&p).await;

    // Every fence the old primary acknowledged.
    let mut acknowledged: Vec<i64> = Vec::new();

    // Churn: 8 keys × 25 grant/release cycles, a new owner each time: 200 fences, over six
    // batches of 32 WAL-logged sequence values, with a checkpoint in the middle (the first
    // nextval after a checkpoint WAL-logs anew).
    let churn: Vec<String> = (0..8).map(|i| key(T, &format!("churn{i}"))).collect();
    for round in 0..25 {
        if round == 12 {
            p.batch_execute("CHECKPOINT").await.unwrap();
        }
        for (i, k) in churn.iter().enumerate() {
            let o = owner(T, &format!("churn{i}-{round}"));
            acknowledged.push(p.try_acquire(k, &o, "1 hour").await.unwrap().expect("a free churn key"));
            assert!(p.release(k, &o).await.unwrap());
        }
    }

    // A grant rolled back never happened, but its fence was returned inside the transaction.
    let rolled_back = key(T, "rolled-back");
    p.batch_execute("BEGIN").await.unwrap();
    acknowledged.push(p.try_acquire(&rolled_back, &owner(T, "rb"), "1 hour").await.unwrap().unwrap());
    p.batch_execute("ROLLBACK").await.unwrap();

    // TTL leases held when the primary goes down: 20 owners; every third holds twice
    // (reentrant), every fourth renewed to two hours.
    let mut held: Vec<LeaseRow> = Vec::new();
    for i in 0..20 {
        let (k, o) = (key(T, &format!("held{i}")), owner(T, &format!("holder{i}")));
        let fence = p.try_acquire(&k, &o, "1 hour").await.unwrap().unwrap();
        acknowledged.push(fence);
        if i % 3 == 0 {
            assert_eq!(p.try_acquire(&k, &o, "1 hour").await.unwrap(), Some(fence), "reentrant");
        }
        if i % 4 == 0 {
            p.renew(&k, &o, Some("2 hours")).await.unwrap().expect("renewed");
        }
        held.push(p.lease(&k).await.unwrap().unwrap());
    }

    // A lease handed over to a waiter (preloaded: granted in the releaser's transaction).
    let (handoff, giver, taker) = (key(T, "handoff"), owner(T, "giver"), owner(T, "taker"));
    acknowledged.push(p.try_acquire(&handoff, &giver, "1 hour").await.unwrap().unwrap());
    let waiter = primary.connect().await.spawn_acquire(&handoff, &taker, Some("1 hour"), Some("30 seconds"));
    wait_for_waiters(&p, &handoff, 1).await;
    assert!(p.release(&handoff, &giver).await.unwrap());
    let handed = finish(waiter, LIMIT, "the waiter").await.result.unwrap().expect("handed over");
    acknowledged.push(handed);
    let row = p.lease(&handoff).await.unwrap().unwrap();
    assert_eq!((row.owner.as_deref(), row.fence), (Some(taker.as_str()), handed));
    held.push(row);

    // Session-bound leases of a session of the old primary.
    let bound_session = primary.connect().await;
    let mut bound = Vec::new();
    for i in 0..3 {
        let k = key(T, &format!("bound{i}"));
        let fence = bound_session.acquire(&k, &owner(T, "bound"), None, Some("0")).await.unwrap().unwrap();
        acknowledged.push(fence);
        bound.push((k, fence));
    }

    // Released keys, followed by acknowledged grants: their (asynchronous) release commits come
    // before those grants in the WAL, so the standby has them.
    let released: Vec<String> = (0..3).map(|i| key(T, &format!("released{i}"))).collect();
    for k in &released {
        acknowledged.push(p.try_acquire(k, &owner(T, "released"), "1 hour").await.unwrap().unwrap());
        assert!(p.release(k, &owner(T, "released")).await.unwrap());
    }
    let last = key(T, "last");
    let last_fence = p.try_acquire(&last, &owner(T, "last"), "1 hour").await.unwrap().unwrap();
    acknowledged.push(last_fence);
    held.push(p.lease(&last).await.unwrap().unwrap());

    let highest = *acknowledged.iter().max().unwrap();
    assert!(acknowledged.windows(2).all(|w| w[0] < w[1]), "fences grow on the primary");
    let (primary_seq, primary_log_cnt) = fence_sequence(&p).await;

    primary.stop("immediate");
    assert!(p.query_one("SELECT 1", &[]).await.is_err(), "the primary is down");
    assert!(bound_session.query_one("SELECT 1", &[]).await.is_err(), "its sessions with it");

    // Still in recovery, the standby already has the sequence WAL-logged at least as far as
    // every fence the primary handed out (nextval's WAL record precedes the grant's commit).
    let s = standby.connect().await;
    assert!(in_recovery(&s).await);
    let (standby_seq, _) = fence_sequence(&s).await;
    assert!(
        standby_seq >= highest,
        "the standby's fence sequence is at {standby_seq}, below the acknowledged fence {highest}"
    );
    drop(s);

    standby.promote();
    let s = standby.connect().await;
    assert!(!in_recovery(&s).await, "promoted");

    // Every acknowledged TTL lease, as the old primary last showed it, still its owner's.
    for before in &held {
        let k = &before.key;
        let o = before.owner.clone().unwrap();
        let after =
            s.lease(k).await.unwrap().unwrap_or_else(|| panic!("lease on {k:?} lost in the failover"));
        assert_same_lease(&after, before);
        assert!(s.holds(k, before.fence).await.unwrap(), "holds({k:?}, {})", before.fence);
        assert_eq!(s.try_acquire(k, &owner(T, "intruder"), "10s").await.unwrap(), None, "{k:?} still held");
        assert!(s.renew(k, &o, Some("1 hour")).await.unwrap().is_some(), "{o} renews {k:?}");
    }
    let listed: i64 = s
        .query_one("SELECT count(*) FROM dlock_locks WHERE starts_with(key, $1)", &[&format!("{T}/")])
        .await
        .unwrap()
        .get(0);
    assert_eq!(listed, held.len() as i64, "dlock_locks lists exactly the acknowledged TTL leases");
    // Session-bound leases ended with the old primary's sessions; released keys stay free.
    for (k, fence) in &bound {
        assert_eq!(s.lease(k).await.unwrap(), None, "session-bound lease on {k:?} after the failover");
        assert!(!s.holds(k, *fence).await.unwrap());
    }
    for k in &released {
        assert_eq!(s.lease(k).await.unwrap(), None, "released key {k:?} after the failover");
    }

    // The holders give their leases back (all holds), then every key is granted again, each
    // time with a fence above every fence the old primary handed out.
    for before in &held {
        let o = before.owner.clone().unwrap();
        for _ in 0..before.hold_count {
            assert!(s.release(&before.key, &o).await.unwrap(), "{o} releases {:?}", before.key);
        }
    }
    let mut keys: Vec<String> = churn.clone();
    keys.extend(held.iter().map(|row| row.key.clone()));
    keys.extend(bound.iter().map(|(k, _)| k.clone()));
    keys.extend(released.iter().cloned());
    keys.push(rolled_back);
    let mut granted_after = Vec::new();
    for round in 0..2 {
        for k in &keys {
            let o = owner(T, &format!("new-{round}"));
            let fence =
                s.try_acquire(k, &o, "1 hour").await.unwrap().unwrap_or_else(|| panic!("{k:?} is free"));
            assert!(fence > highest, "fence {fence} for {k:?} after the failover, {highest} before it");
            assert!(granted_after.last().is_none_or(|&previous| fence > previous));
            granted_after.push(fence);
            assert!(s.release(k, &o).await.unwrap());
        }
    }
    eprintln!(
        "failover (synchronous): {} fences acknowledged (highest {highest}; primary's sequence at {primary_seq}, \
         log_cnt {primary_log_cnt}; standby's at {standby_seq}), {} TTL leases kept, {} session-bound ended, \
         {} grants after promotion from {}",
        acknowledged.len(),
        held.len(),
        bound.len(),
        granted_after.len(),
        granted_after[0]
    );
}

#[tokio::test]
async fn asynchronous_standby_can_lose_acknowledged_grants_and_hand_out_their_fences_again() {
    const T: &str = "asynchronous_standby_can_lose_acknowledged_grants_and_hand_out_their_fences_again";
    let primary = Cluster::start_new("failover-async", &[SYNC_COMMIT]);
    let standby = Standby::clone_of(&primary, "failover-async-standby");
    let p = primary.connect().await;
    wait_for_streaming(&p).await;
    let sb = standby.connect().await;

    // Replicated before the standby falls behind.
    let (kept, kept_owner) = (key(T, "kept"), owner(T, "kept"));
    let kept_fence = p.try_acquire(&kept, &kept_owner, "1 hour").await.unwrap().unwrap();
    wait_for_replay(&p, &sb).await;
    assert_eq!(sb.lease(&kept).await.unwrap().map(|row| row.fence), Some(kept_fence), "replicated");

    // The standby stops receiving WAL (a lagging standby), the primary goes on acknowledging.
    disconnect_standby(&p, &sb).await;
    let (lost, lost_owner) = (key(T, "lost"), owner(T, "lost"));
    let lost_fence = p.try_acquire(&lost, &lost_owner, "1 hour").await.unwrap().unwrap();
    // 40 grants of one key (more than one batch of 32 WAL-logged sequence values), the last
    // one still held.
    let churn = key(T, "churn");
    let mut after_cut = vec![lost_fence];
    let mut last_owner = String::new();
    for i in 0..40 {
        last_owner = owner(T, &format!("churn{i}"));
        after_cut.push(p.try_acquire(&churn, &last_owner, "1 hour").await.unwrap().unwrap());
        if i < 39 {
            assert!(p.release(&churn, &last_owner).await.unwrap());
        }
    }
    let highest = *after_cut.iter().max().unwrap();
    let (standby_seq, _) = fence_sequence(&sb).await;
    assert!(
        standby_seq < highest,
        "the standby's sequence ({standby_seq}) is behind the primary's ({highest})"
    );
    drop(sb);

    primary.stop("immediate");
    standby.promote();
    let s = standby.connect().await;
    assert!(!in_recovery(&s).await, "promoted");

    // What the standby had survives.
    let row = s.lease(&kept).await.unwrap().expect("the replicated lease survived");
    assert_eq!((row.owner.as_deref(), row.fence), (Some(kept_owner.as_str()), kept_fence));
    // Acknowledged grants the standby never received are gone: their holders no longer hold.
    assert_eq!(s.lease(&lost).await.unwrap(), None, "the acknowledged grant of {lost:?} is lost");
    assert_eq!(s.renew(&lost, &lost_owner, Some("1 hour")).await.unwrap(), None);
    assert_eq!(s.lease(&churn).await.unwrap(), None, "the acknowledged grant of {churn:?} is lost");
    assert_eq!(s.renew(&churn, &last_owner, Some("1 hour")).await.unwrap(), None);
    // And the next grant of the key hands out a fence the old primary had already acknowledged
    // (the sequence restarts after the last position the standby received): fences went back.
    let again = s.try_acquire(&churn, &owner(T, "after"), "1 hour").await.unwrap().unwrap();
    assert!(again <= highest, "fence {again} after the failover, {highest} acknowledged before it");
    assert!(
        after_cut.contains(&again),
        "fence {again} was already acknowledged by the old primary (to {:?})",
        if again == lost_fence { lost.as_str() } else { churn.as_str() }
    );
    assert!(again > kept_fence, "but it is above every fence the standby had received");
    eprintln!(
        "failover (asynchronous): {} fences acknowledged after the standby fell behind ({}..={highest}), \
         standby's sequence at {standby_seq}; after promotion the key {churn:?} was granted fence {again} again",
        after_cut.len(),
        after_cut[0]
    );
}

/// Hands a key over while the synchronous standby receives nothing, then fails over to it.
/// Preloaded, the releaser's transaction grants the waiter, so the releaser's commit waits for
/// the standby; when that wait is cancelled (`pg_cancel_backend`, or the releasing client
/// cancelling its call) the commit stays local, yet the waiter is told it holds the key.
/// Not preloaded, the waiter grants itself and its own commit waits for the standby.
async fn handoff_during_a_standby_outage(preload: bool) {
    let t = if preload { "handoff_outage_preloaded" } else { "handoff_outage" };
    let conf: &[&str] = if preload { &[PRELOAD, SYNC_COMMIT] } else { &[SYNC_COMMIT] };
    let primary = Cluster::start_new(t, conf);
    let standby = Standby::clone_of(&primary, &format!("{t}-standby"));
    let p = primary.connect().await;
    require_sync_standby(&p).await;
    let sb = standby.connect().await;

    let (k, holder, taker) = (key(t, "k"), owner(t, "holder"), owner(t, "taker"));
    let mut acknowledged = vec![p.try_acquire(&k, &holder, "1 hour").await.unwrap().unwrap()];
    let w = primary.connect().await;
    let waiter_pid = w.pid();
    let waiter = w.spawn_acquire(&k, &taker, Some("1 hour"), Some("60 seconds"));
    wait_for_waiters(&p, &k, 1).await;
    // Use up the WAL-logged batch of the fence sequence (the standby has all of it): the next
    // fence needs a new WAL record, which the standby will not receive.
    let scratch = key(t, "scratch");
    for _ in 0..40 {
        if fence_sequence(&p).await.1 == 0 {
            break;
        }
        acknowledged.push(p.try_acquire(&scratch, &owner(t, "scratch"), "1 hour").await.unwrap().unwrap());
        assert!(p.release(&scratch, &owner(t, "scratch")).await.unwrap());
    }
    assert_eq!(fence_sequence(&p).await.1, 0, "the sequence's logged batch is used up");
    let waiter_xid: Option<String> = p
        .query_one("SELECT backend_xid::text FROM pg_catalog.pg_stat_activity WHERE pid = $1", &[&waiter_pid])
        .await
        .unwrap()
        .get(0);
    eprintln!("{t}: the waiting session's transaction id: {waiter_xid:?}");

    disconnect_standby(&p, &sb).await;
    let releaser = primary.connect().await;
    let releaser_pid = releaser.pid();
    let (k2, holder2) = (k.clone(), holder.clone());
    let release = tokio::spawn(async move { releaser.release(&k2, &holder2).await.map(|_| releaser) });
    // The release either commits at once (asynchronously: it only releases) or waits for the
    // standby (its transaction also granted the waiter); that wait is cancelled.
    let (release_ref, observer) = (&release, &p);
    eventually(LIMIT, "the release returns or waits for the standby", || async move {
        release_ref.is_finished() || waits_for_sync_standby(observer, releaser_pid).await
    })
    .await;
    let releaser_waited = !release.is_finished();
    if releaser_waited {
        p.execute("SELECT pg_catalog.pg_cancel_backend($1)", &[&releaser_pid]).await.unwrap();
    }
    if let Err(e) = release.await.unwrap() {
        panic!("the release failed: {e}");
    }
    // The waiter either has its answer or waits for the standby to confirm its own commit.
    let waiter_ref = &waiter;
    eventually(LIMIT, "the waiter answers or waits for the standby", || async move {
        waiter_ref.is_finished() || waits_for_sync_standby(observer, waiter_pid).await
    })
    .await;

    let waiter_waited = !waiter.is_finished();
    eprintln!("{t}: the releaser waited for the standby: {releaser_waited}; the waiter: {waiter_waited}");
    primary.stop("immediate");
    let answer = finish(waiter, LIMIT, "the waiter").await.result;
    drop(sb);
    standby.promote();
    let s = standby.connect().await;
    let after = s.lease(&k).await.unwrap();
    let highest = *acknowledged.iter().max().unwrap();

    match answer {
        Ok(Some(fence)) => {
            // The waiter was told it holds the key: the standby must have that grant.
            let next = match &after {
                Some(row) if row.owner.as_deref() == Some(holder.as_str()) => {
                    for _ in 0..row.hold_count {
                        s.release(&k, &holder).await.unwrap();
                    }
                    s.try_acquire(&k, &owner(t, "next"), "1 hour").await.unwrap()
                }
                _ => None,
            };
            assert!(
                after
                    .as_ref()
                    .is_some_and(|row| row.owner.as_deref() == Some(taker.as_str()) && row.fence == fence),
                "the waiter was acknowledged fence {fence} for {k:?} (releaser's wait for the standby \
                 cancelled: {releaser_waited}), but after promoting the synchronous standby the key shows \
                 {after:?}; the next grant of the key got fence {next:?}"
            );
        }
        Ok(None) => panic!("the waiter's wait ran out: {answer:?}"),
        Err(e) => {
            // Never acknowledged: the waiter lost its connection with the primary.
            eprintln!("{t}: the waiter had no grant when the primary went down: {e}");
            // The release was never on the standby: the holder's lease is back until its ttl.
            let row = after.expect("the holder's lease is back");
            assert_eq!(row.owner.as_deref(), Some(holder.as_str()));
            assert!(s.renew(&k, &holder, Some("1 hour")).await.unwrap().is_some());
            assert!(s.release(&k, &holder).await.unwrap());
            let next = s.try_acquire(&k, &owner(t, "next"), "1 hour").await.unwrap().unwrap();
            assert!(next > highest, "fence {next} after the failover, {highest} before it");
        }
    }
}

#[tokio::test]
async fn handoff_waits_for_the_synchronous_standby() {
    handoff_during_a_standby_outage(false).await;
}

#[tokio::test]
async fn preloaded_handoff_waits_for_the_synchronous_standby() {
    handoff_during_a_standby_outage(true).await;
}

/// PostgreSQL's own rule, which dlock inherits: a commit whose wait for the synchronous standby
/// is cancelled (pg_cancel_backend, or the client cancelling its call) stays committed locally
/// and the call returns its result, with only a WARNING ("might not have been replicated"). An
/// acquire cancelled so is answered with a fence the standby may lack: after promotion the lease
/// is gone and the fence can be handed out again. Rule 6 holds for commits that waited.
#[tokio::test]
async fn cancelling_the_wait_for_the_standby_returns_a_grant_the_standby_may_lack() {
    const T: &str = "cancelling_the_wait_for_the_standby_returns_a_grant_the_standby_may_lack";
    let primary = Cluster::start_new("failover-cancel", &[SYNC_COMMIT]);
    let standby = Standby::clone_of(&primary, "failover-cancel-standby");
    let p = primary.connect().await;
    require_sync_standby(&p).await;
    let sb = standby.connect().await;

    let (scratch, k, o) = (key(T, "scratch"), key(T, "k"), owner(T, "o"));
    for _ in 0..40 {
        if fence_sequence(&p).await.1 == 0 {
            break;
        }
        p.try_acquire(&scratch, &owner(T, "scratch"), "1 hour").await.unwrap().unwrap();
        assert!(p.release(&scratch, &owner(T, "scratch")).await.unwrap());
    }
    assert_eq!(fence_sequence(&p).await.1, 0, "the sequence's logged batch is used up");
    disconnect_standby(&p, &sb).await;

    let acquirer = primary.connect().await;
    let acquirer_pid = acquirer.pid();
    let acquiring = acquirer.spawn_acquire(&k, &o, Some("1 hour"), Some("0"));
    eventually(LIMIT, "the acquire waits for the standby", || async {
        waits_for_sync_standby(&p, acquirer_pid).await
    })
    .await;
    p.execute("SELECT pg_catalog.pg_cancel_backend($1)", &[&acquirer_pid]).await.unwrap();
    let fence = finish(acquiring, LIMIT, "the cancelled acquire").await.result.unwrap().expect("a fence");

    primary.stop("immediate");
    standby.promote();
    let s = standby.connect().await;
    assert_eq!(s.lease(&k).await.unwrap(), None, "the grant never reached the standby");
    let again = s.try_acquire(&k, &owner(T, "next"), "1 hour").await.unwrap().unwrap();
    assert_eq!(again, fence, "the fence of the cancelled commit is handed out again");
}
