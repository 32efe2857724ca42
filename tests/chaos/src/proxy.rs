//! A TCP proxy in front of PostgreSQL that cuts connections mid-call: with probability
//! `cut_rate` per client→server chunk it forwards the chunk and then closes both sides, so the
//! server may act on a request whose answer the client never sees. The upstream port can be
//! switched while it runs (a failover points it at the promoted standby); connections already
//! open stay on the server they reached.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::rng::Rng;

/// Counters of what the proxy did.
#[derive(Default)]
pub struct ProxyStats {
    pub connections: AtomicU64,
    pub cuts: AtomicU64,
}

/// Listens on 127.0.0.1 at a free port and forwards each new connection to
/// `127.0.0.1:<upstream>` (read at connect time); returns the port.
pub async fn start(upstream: Arc<AtomicU16>, cut_rate: f64, seed: u64, stats: Arc<ProxyStats>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
    let port = listener.local_addr().expect("proxy address").port();
    let rng = Arc::new(Mutex::new(Rng::new(seed)));
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else { continue };
            stats.connections.fetch_add(1, Ordering::Relaxed);
            let (stats, rng) = (stats.clone(), rng.clone());
            let upstream = upstream.load(Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                    pipe(client, server, cut_rate, &stats, &rng).await;
                }
            });
        }
    });
    port
}

/// Copies both ways until either side closes or a cut is drawn.
async fn pipe(client: TcpStream, server: TcpStream, cut_rate: f64, stats: &ProxyStats, rng: &Mutex<Rng>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
            let cut = rng.lock().unwrap().chance(cut_rate);
            if cut {
                stats.cuts.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Whichever side ends first ends both: dropping the halves closes the sockets.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}
