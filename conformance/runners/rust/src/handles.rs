//! What the runner holds for a scenario's steps: its clients, with every lease taken through
//! them (so that closing a client gives them back, bound to a name or not), and the leases
//! themselves — a guard while it is held, and the view that answers after it was given back.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dlock_client::{CancellationToken, Client, Error, Guard, LeaderChanges, Leadership, Lease, MultiGuard};
use serde_json::{Value, json};

/// How long closing waits for one release.
const RELEASE: Duration = Duration::from_secs(10);

/// Anything a step can bind besides its JSON result.
#[derive(Clone)]
pub enum Handle {
    Client(Arc<ClientHandle>),
    Lease(Arc<LeaseHandle>),
    Observer(Arc<tokio::sync::Mutex<Option<LeaderChanges>>>),
}

/// A client of the scenario, and the leases taken through it.
pub struct ClientHandle {
    client: Client,
    leases: Mutex<Vec<Arc<LeaseHandle>>>,
}

impl ClientHandle {
    pub fn new(client: Client) -> Arc<ClientHandle> {
        Arc::new(ClientHandle { client, leases: Mutex::new(Vec::new()) })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Takes `lease` into the client's care: closing the client gives it back.
    pub fn adopt(&self, lease: Arc<LeaseHandle>) -> Arc<LeaseHandle> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner).push(lease.clone());
        lease
    }

    /// Closes the client the Rust way: every guard taken through it is released (awaited, so
    /// that the leases are gone when this returns), then its pool is closed. (A Rust client
    /// has no `close`: it ends when its guards and clones are dropped.)
    pub async fn close(&self) {
        let leases = std::mem::take(&mut *self.leases.lock().unwrap_or_else(PoisonError::into_inner));
        let mut releases = tokio::task::JoinSet::new();
        for lease in leases {
            releases.spawn(async move { drop(tokio::time::timeout(RELEASE, lease.release()).await) });
        }
        while releases.join_next().await.is_some() {}
        self.client.pool().close();
    }
}

/// A lease as the runner holds it.
pub struct LeaseHandle {
    /// The guard, until it is released (`None` too for the lease `with_lock` holds).
    live: tokio::sync::Mutex<Option<Live>>,
    /// The view of a single-key lease, which answers after its guard is gone.
    view: Option<Lease>,
    lost: CancellationToken,
    fences: Vec<i64>,
    /// Whether `with_lock` holds it (and gives it back), not the runner.
    in_with_lock: bool,
}

/// The guard of a lease.
enum Live {
    One(Guard),
    All(MultiGuard),
    Lead(Leadership),
}

/// What a release answered, and whether it was a release the Rust types allow.
pub enum Released {
    Answered(bool),
    /// The guard was released before: `release` takes it by value, so a second release of the
    /// same guard cannot be written in Rust.
    Already,
    /// The lease `with_lock` holds: `with_lock` gives it back.
    NotOurs,
}

impl LeaseHandle {
    pub fn one(guard: Guard) -> Arc<LeaseHandle> {
        let (view, lost, fences) = (Some(guard.lease()), guard.lost(), vec![guard.fence()]);
        Arc::new(LeaseHandle::held(Live::One(guard), view, lost, fences))
    }

    pub fn all(guard: MultiGuard) -> Arc<LeaseHandle> {
        let (lost, fences) = (guard.lost(), guard.fences().to_vec());
        Arc::new(LeaseHandle::held(Live::All(guard), None, lost, fences))
    }

    pub fn lead(lead: Leadership) -> Arc<LeaseHandle> {
        let (lost, fences) = (lead.lost(), vec![lead.term()]);
        Arc::new(LeaseHandle::held(Live::Lead(lead), None, lost, fences))
    }

    /// The lease `with_lock` holds, seen through its view.
    pub fn view(lease: Lease) -> Arc<LeaseHandle> {
        let (lost, fences) = (lease.lost(), vec![lease.fence()]);
        let live = tokio::sync::Mutex::new(None);
        Arc::new(LeaseHandle { live, view: Some(lease), lost, fences, in_with_lock: true })
    }

    fn held(live: Live, view: Option<Lease>, lost: CancellationToken, fences: Vec<i64>) -> LeaseHandle {
        LeaseHandle { live: tokio::sync::Mutex::new(Some(live)), view, lost, fences, in_with_lock: false }
    }

    /// The step result of a lease: its fence, fences and term.
    pub fn result(&self) -> Value {
        let first = self.fences.first().copied().unwrap_or_default();
        json!({"fence": first, "fences": self.fences, "term": first})
    }

    /// Gives the hold back (`resign` for a leadership).
    pub async fn release(&self) -> Result<Released, Error> {
        let Some(live) = self.live.lock().await.take() else {
            return Ok(if self.in_with_lock { Released::NotOurs } else { Released::Already });
        };
        Ok(Released::Answered(match live {
            Live::One(guard) => guard.release().await?,
            Live::All(guard) => guard.release().await?,
            Live::Lead(lead) => lead.resign().await?,
        }))
    }

    /// Renews it now; `None` when there is no guard to renew (released, or `with_lock`'s).
    pub async fn renew(&self) -> Option<Result<(), Error>> {
        Some(match &*self.live.lock().await {
            Some(Live::One(guard)) => guard.renew().await.map(drop),
            Some(Live::All(guard)) => guard.renew().await.map(drop),
            Some(Live::Lead(lead)) => lead.renew().await.map(drop),
            None => return None,
        })
    }

    /// `dlock_holds` of its fence(s).
    pub async fn holds(&self) -> Result<bool, Error> {
        match &*self.live.lock().await {
            Some(Live::One(guard)) => guard.holds().await,
            Some(Live::All(guard)) => guard.holds().await,
            Some(Live::Lead(lead)) => lead.holds().await,
            None => match &self.view {
                Some(view) => view.holds().await,
                None => Ok(false),
            },
        }
    }

    /// The local view, no round trip.
    pub async fn is_held(&self) -> bool {
        match &*self.live.lock().await {
            Some(Live::One(guard)) => guard.is_held(),
            Some(Live::All(guard)) => guard.is_held(),
            Some(Live::Lead(lead)) => lead.is_leading(),
            // Given back: a single-key view still answers; a released multi-key guard or
            // leadership is gone, with nothing held.
            None => self.view.as_ref().is_some_and(Lease::is_held),
        }
    }

    /// Waits up to `timeout` for the lost signal.
    pub async fn wait_lost(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.lost.cancelled()).await.is_ok()
    }
}
