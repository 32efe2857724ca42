//! A session that LISTENs: watches keys with `dlock_watch` and collects the notifications the
//! extension sends (the harness's `Session` drops them, as tokio-postgres does by default).
//! Each key has a channel of its own, so a listener only hears about the keys it watches.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Error, NoTls};

/// A connection whose notifications on any channel are kept, in order, as (channel, payload).
pub struct Listener {
    client: Client,
    notifications: mpsc::UnboundedReceiver<(String, String)>,
    pid: i32,
}

impl Listener {
    pub(crate) async fn connect(host: &str, port: u16, role: &str) -> Result<Listener, Error> {
        let config = format!("host={host} port={port} user={role} dbname=postgres application_name=listener");
        let (client, mut connection) = tokio_postgres::connect(&config, NoTls).await?;
        let (tx, notifications) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                if let AsyncMessage::Notification(n) = message {
                    let _ = tx.send((n.channel().to_string(), n.payload().to_string()));
                }
            }
        });
        let pid = client.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
        Ok(Listener { client, notifications, pid })
    }

    /// `dlock_watch(key)`: the key's channel, which its notifications come on.
    pub async fn watch(&self, key: &str) -> Result<String, Error> {
        Ok(self.client.query_one("SELECT dlock_watch($1)", &[&key]).await?.get(0))
    }

    /// `dlock_unwatch(key)`: whether the key was watched.
    pub async fn unwatch(&self, key: &str) -> Result<bool, Error> {
        Ok(self.client.query_one("SELECT dlock_unwatch($1)", &[&key]).await?.get(0))
    }

    /// The channel of the next notification, if one comes within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<String> {
        match tokio::time::timeout(timeout, self.notifications.recv()).await {
            Ok(Some((channel, _))) => Some(channel),
            _ => None,
        }
    }

    /// The channels of every notification that arrives within `period`, in order.
    pub async fn drain(&mut self, period: Duration) -> Vec<String> {
        let mut channels = Vec::new();
        let end = tokio::time::Instant::now() + period;
        while let Ok(Some((channel, _))) = tokio::time::timeout_at(end, self.notifications.recv()).await {
            channels.push(channel);
        }
        channels
    }

    /// The backend pid of the listening session.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl std::ops::Deref for Listener {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}
