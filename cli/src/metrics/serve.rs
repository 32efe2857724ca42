//! The HTTP side of `dlock metrics`: hyper's HTTP/1.1 server, one task per connection.
//! `GET /metrics` reads a snapshot and answers 200 with it, or 503 with the reason; any other
//! path is 404, any other method on /metrics 405.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlock_client::Client;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::{query, render};

/// How long a client may take to send a request's headers: a connection that sends nothing
/// is closed instead of kept forever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors) before the next one.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Accepts connections on `listener` forever, answering each request with `client`'s data.
pub async fn serve(listener: TcpListener, client: Client) {
    let health = Arc::new(Health::default());
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                eprintln!("dlock: accepting a connection failed: {e}");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let (client, health) = (client.clone(), health.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let (client, health) = (client.clone(), health.clone());
                async move { Ok::<_, Infallible>(respond(&client, &health, &request).await) }
            });
            // A client that hangs up or speaks something else than HTTP ends its connection only.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Whether the last scrape could read the database, so that stderr tells when that changes
/// (once, not at every scrape of an outage).
#[derive(Default)]
struct Health {
    failing: AtomicBool,
}

impl Health {
    fn note(&self, failure: Option<&str>) {
        let was_failing = self.failing.swap(failure.is_some(), Ordering::Relaxed);
        match failure {
            Some(reason) if !was_failing => eprintln!("dlock: scrapes answer 503: {reason}"),
            None if was_failing => eprintln!("dlock: scrapes answer again"),
            _ => {}
        }
    }
}

/// The answer to one request.
async fn respond(client: &Client, health: &Health, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found: dlock serves /metrics\n".into());
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match query::read(client).await {
        Ok(snapshot) => {
            health.note(None);
            let mut response = Response::new(Full::new(Bytes::from(render::render(&snapshot))));
            response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(render::CONTENT_TYPE));
            response
        }
        Err(e) => {
            let reason = e.to_string();
            health.note(Some(&reason));
            text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n"))
        }
    }
}

/// A plain-text answer.
fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}
