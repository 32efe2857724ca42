//! etcd as a lock service, through its v3 gRPC API, with the recipe of etcd's concurrency
//! package reduced to put-if-absent: one lease per session (kept alive), acquire =
//! `Txn(If CreateRevision(key) == 0 Then Put(key, owner, lease))`, release =
//! `Txn(If Value(key) == owner Then Delete(key))`. A waiter watches the key for its deletion
//! and tries again (no FIFO queue: every waiter wakes on every release).
//!
//! The messages are written out by hand (only the fields used; protobuf skips the others), since
//! the etcd-client crate compiles etcd's .proto files at build time and needs protoc for that.

use std::collections::HashMap;
use std::time::Duration;

use futures::channel::mpsc::{UnboundedSender, unbounded};
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Streaming};
use tonic_prost::ProstCodec;

use crate::Result;
use crate::TTL;

#[derive(Clone, PartialEq, Message)]
struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
    #[prost(int64, tag = "3")]
    lease: i64,
}

#[derive(Clone, PartialEq, Message)]
struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Op {
    #[prost(message, tag = "2")]
    Put(PutRequest),
    #[prost(message, tag = "3")]
    Delete(DeleteRangeRequest),
}

#[derive(Clone, PartialEq, Message)]
struct RequestOp {
    #[prost(oneof = "Op", tags = "2, 3")]
    request: Option<Op>,
}

/// `Compare.CompareTarget`: CREATE (create revision) and VALUE.
const TARGET_CREATE: i32 = 1;
const TARGET_VALUE: i32 = 3;

#[derive(Clone, PartialEq, prost::Oneof)]
enum Against {
    #[prost(int64, tag = "5")]
    CreateRevision(i64),
    #[prost(bytes = "vec", tag = "7")]
    Value(Vec<u8>),
}

#[derive(Clone, PartialEq, Message)]
struct Compare {
    /// `CompareResult`: 0 is EQUAL, the only one used.
    #[prost(int32, tag = "1")]
    result: i32,
    #[prost(int32, tag = "2")]
    target: i32,
    #[prost(bytes = "vec", tag = "3")]
    key: Vec<u8>,
    #[prost(oneof = "Against", tags = "5, 7")]
    against: Option<Against>,
}

#[derive(Clone, PartialEq, Message)]
struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    success: Vec<RequestOp>,
}

#[derive(Clone, PartialEq, Message)]
struct TxnResponse {
    #[prost(bool, tag = "2")]
    succeeded: bool,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    ttl: i64,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    id: i64,
    #[prost(string, tag = "4")]
    error: String,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    id: i64,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseRevokeResponse {}

#[derive(Clone, PartialEq, Message)]
struct LeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    id: i64,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseKeepAliveResponse {
    #[prost(int64, tag = "3")]
    ttl: i64,
}

#[derive(Clone, PartialEq, Message)]
struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    /// `FilterType`: 0 is NOPUT (deletions only).
    #[prost(int32, repeated, tag = "5")]
    filters: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum WatchUnion {
    #[prost(message, tag = "1")]
    Create(WatchCreateRequest),
}

#[derive(Clone, PartialEq, Message)]
struct WatchRequest {
    #[prost(oneof = "WatchUnion", tags = "1")]
    request: Option<WatchUnion>,
}

#[derive(Clone, PartialEq, Message)]
struct WatchResponse {
    #[prost(bool, tag = "3")]
    created: bool,
    #[prost(bool, tag = "4")]
    canceled: bool,
}

const TXN: &str = "/etcdserverpb.KV/Txn";
const LEASE_GRANT: &str = "/etcdserverpb.Lease/LeaseGrant";
const LEASE_REVOKE: &str = "/etcdserverpb.Lease/LeaseRevoke";
const LEASE_KEEP_ALIVE: &str = "/etcdserverpb.Lease/LeaseKeepAlive";
const WATCH: &str = "/etcdserverpb.Watch/Watch";

type Grpc = tonic::client::Grpc<Channel>;

/// A bidirectional stream: requests in, responses out.
struct Duplex<Req, Resp> {
    send: UnboundedSender<Req>,
    recv: Streaming<Resp>,
}

impl<Req, Resp> Duplex<Req, Resp>
where
    Req: Message + Send + 'static,
    Resp: Message + Default + Send + 'static,
{
    /// Opens the stream with `first` already sent: etcd answers the headers with a message.
    async fn open(grpc: &mut Grpc, path: &'static str, first: Req) -> Result<Self> {
        let (send, requests) = unbounded();
        send.unbounded_send(first)?;
        grpc.ready().await?;
        let codec = ProstCodec::<Req, Resp>::default();
        let recv = grpc
            .streaming(Request::new(requests), PathAndQuery::from_static(path), codec)
            .await?
            .into_inner();
        Ok(Duplex { send, recv })
    }

    async fn next(&mut self) -> Result<Resp> {
        self.recv.message().await?.ok_or_else(|| "etcd closed the stream".into())
    }

    async fn call(&mut self, req: Req) -> Result<Resp> {
        self.send.unbounded_send(req)?;
        self.next().await
    }
}

async fn unary<Req, Resp>(grpc: &mut Grpc, path: &'static str, req: Req) -> Result<Resp>
where
    Req: Message + Send + 'static,
    Resp: Message + Default + Send + 'static,
{
    grpc.ready().await?;
    let codec = ProstCodec::<Req, Resp>::default();
    Ok(grpc.unary(Request::new(req), PathAndQuery::from_static(path), codec).await?.into_inner())
}

async fn grant(grpc: &mut Grpc) -> Result<i64> {
    let granted: LeaseGrantResponse =
        unary(grpc, LEASE_GRANT, LeaseGrantRequest { ttl: TTL.as_secs() as i64 }).await?;
    if !granted.error.is_empty() {
        return Err(format!("etcd lease grant: {}", granted.error).into());
    }
    Ok(granted.id)
}

/// One etcd client session: its own HTTP/2 connection and its own lease.
pub struct Session {
    grpc: Grpc,
    owner: Vec<u8>,
    lease: i64,
    /// Keeps the session lease alive (every ttl/3, as etcd's clients do) while runs go on.
    keeper: tokio::task::JoinHandle<()>,
    /// Leases of their own for the keys `take` keeps (the renew workload), by key.
    leases: HashMap<String, i64>,
    keep_alive: Option<Duplex<LeaseKeepAliveRequest, LeaseKeepAliveResponse>>,
    /// The key this session waits on, and the watch on its deletions.
    watch: Option<(String, Duplex<WatchRequest, WatchResponse>)>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

impl Session {
    pub async fn connect(port: u16, owner: String) -> Result<Session> {
        let channel =
            Endpoint::from_shared(format!("http://127.0.0.1:{port}"))?.tcp_nodelay(true).connect().await?;
        let mut grpc = Grpc::new(channel);
        let lease = grant(&mut grpc).await?;
        let mut keeper_grpc = grpc.clone();
        let keeper = tokio::spawn(async move {
            let first = LeaseKeepAliveRequest { id: lease };
            let Ok(mut stream) =
                Duplex::<_, LeaseKeepAliveResponse>::open(&mut keeper_grpc, LEASE_KEEP_ALIVE, first).await
            else {
                return;
            };
            while stream.next().await.is_ok() {
                tokio::time::sleep(TTL / 3).await;
                if stream.send.unbounded_send(LeaseKeepAliveRequest { id: lease }).is_err() {
                    return;
                }
            }
        });
        Ok(Session {
            grpc,
            owner: owner.into_bytes(),
            lease,
            keeper,
            leases: HashMap::new(),
            keep_alive: None,
            watch: None,
        })
    }

    /// Put-if-absent on `lease`: whether the key was free and is now ours.
    async fn put_if_absent(&mut self, key: &str, lease: i64) -> Result<bool> {
        let txn = TxnRequest {
            compare: vec![Compare {
                result: 0,
                target: TARGET_CREATE,
                key: key.as_bytes().to_vec(),
                against: Some(Against::CreateRevision(0)),
            }],
            success: vec![RequestOp {
                request: Some(Op::Put(PutRequest {
                    key: key.as_bytes().to_vec(),
                    value: self.owner.clone(),
                    lease,
                })),
            }],
        };
        let done: TxnResponse = unary(&mut self.grpc, TXN, txn).await?;
        Ok(done.succeeded)
    }

    /// Tries once to take `key` on the session lease.
    pub async fn try_lock(&mut self, key: &str) -> Result<bool> {
        self.put_if_absent(key, self.lease).await
    }

    /// Deletes `key` if this session's owner holds it; whether it did.
    pub async fn unlock(&mut self, key: &str) -> Result<bool> {
        let txn = TxnRequest {
            compare: vec![Compare {
                result: 0,
                target: TARGET_VALUE,
                key: key.as_bytes().to_vec(),
                against: Some(Against::Value(self.owner.clone())),
            }],
            success: vec![RequestOp {
                request: Some(Op::Delete(DeleteRangeRequest { key: key.as_bytes().to_vec() })),
            }],
        };
        let done: TxnResponse = unary(&mut self.grpc, TXN, txn).await?;
        Ok(done.succeeded)
    }

    /// Takes `key`, waiting for it: tries, and on failure waits for the key's next deletion
    /// (a release or its lease's expiry) and tries again.
    pub async fn lock(&mut self, key: &str) -> Result<()> {
        if self.watch.as_ref().is_none_or(|(watched, _)| watched != key) {
            // Watching before the first try, so that no deletion after it is missed.
            let create = WatchCreateRequest { key: key.as_bytes().to_vec(), filters: vec![0] };
            let first = WatchRequest { request: Some(WatchUnion::Create(create)) };
            let mut watch = Duplex::open(&mut self.grpc, WATCH, first).await?;
            let created: WatchResponse = watch.next().await?;
            if !created.created || created.canceled {
                return Err("etcd refused the watch".into());
            }
            self.watch = Some((key.to_string(), watch));
        }
        while !self.try_lock(key).await? {
            let Some((_, watch)) = self.watch.as_mut() else { return Err("no watch".into()) };
            // A deletion seen before the failed try only costs one more try; the bound covers
            // anything unforeseen.
            if let Ok(event) = tokio::time::timeout(Duration::from_millis(100), watch.next()).await
                && event?.canceled
            {
                return Err("etcd cancelled the watch".into());
            }
        }
        Ok(())
    }

    /// Takes `key` on a lease of its own and keeps it (the renew workload: one lock, one lease).
    pub async fn take(&mut self, key: &str) -> Result<()> {
        let lease = grant(&mut self.grpc).await?;
        if !self.put_if_absent(key, lease).await? {
            return Err(format!("{key}: not granted").into());
        }
        self.leases.insert(key.to_string(), lease);
        Ok(())
    }

    /// Renews the lease of `key` (taken by `take`): one LeaseKeepAlive round trip.
    pub async fn renew(&mut self, key: &str) -> Result<()> {
        let id = *self.leases.get(key).ok_or("no lease for that key")?;
        let request = LeaseKeepAliveRequest { id };
        let alive = match self.keep_alive.as_mut() {
            Some(stream) => stream.call(request).await?,
            None => {
                let mut stream = Duplex::open(&mut self.grpc, LEASE_KEEP_ALIVE, request).await?;
                let alive = stream.next().await?;
                self.keep_alive = Some(stream);
                alive
            }
        };
        if alive.ttl <= 0 {
            return Err(format!("{key}: its lease is gone").into());
        }
        Ok(())
    }

    /// Gives back `key` taken by `take`: revokes its lease, which deletes it.
    pub async fn give(&mut self, key: &str) -> Result<()> {
        let id = self.leases.remove(key).ok_or("no lease for that key")?;
        let _: LeaseRevokeResponse = unary(&mut self.grpc, LEASE_REVOKE, LeaseRevokeRequest { id }).await?;
        Ok(())
    }
}
