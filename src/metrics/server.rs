//! The HTTP/1.1 servers of `/metrics` and the probes, bounded so that slow or numerous
//! clients cannot starve the kubelet's probes or an authorised scrape.
//!
//! Expected flow: [`serve_connections`] takes a connection slot (a semaphore of
//! [`ServerLimits::max_connections`]) *before* it accepts, then accepts and hands the
//! connection to its own task: the TLS handshake (if any) within the header-read timeout, then
//! hyper's HTTP/1 with a timer, whose header-read timeout closes a connection whose request
//! head is not complete in time. The slot is given back when the connection ends.
//!
//! Guarantees:
//! - No connection holds a slot without progress for longer than the header-read timeout
//!   (twice over TLS: the handshake, then the head). hyper starts that timer whenever it waits
//!   for a request head: after the handshake and again after every answer on a keep-alive
//!   connection, so the same timeout is the idle (keep-alive) bound.
//! - At the cap, new connections wait in the kernel's accept queue (as Go's
//!   `netutil.LimitListener`, golang.org/x/net/netutil/listen.go, blocks `Accept`) rather
//!   than being accepted and closed: a probe or a scrape that arrives while the cap is full
//!   is answered as soon as a slot frees, which the timeouts above bound, instead of failing.
//!
//! Caveats: a client that reads its answer slowly is not cut off (no write timeout); the
//! answers are small (the metrics text), so the socket buffers take them. The kernel's accept
//! queue is itself bounded (its backlog): beyond it, connections are refused by the kernel.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How much a client may take, per endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// The longest a client may take to send a complete request head, and to finish its TLS
    /// handshake; also how long an idle keep-alive connection is kept.
    pub header_read_timeout: Duration,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
}

/// The default header-read (and idle) timeout.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The default connection cap of each endpoint.
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `app` on `listener` for ever, over TLS with `acceptor` when given, within `limits`.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    limits: ServerLimits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        // The semaphore is never closed, so acquiring only waits.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%error, "the metrics endpoint could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        // Each connection on its own task: a slow client holds up nobody else.
        tokio::spawn(async move {
            match acceptor {
                None => serve_http(stream, app, limits).await,
                Some(acceptor) => {
                    let handshake = acceptor.accept(stream);
                    match tokio::time::timeout(limits.header_read_timeout, handshake).await {
                        Ok(Ok(stream)) => serve_http(stream, app, limits).await,
                        Ok(Err(error)) => tracing::debug!(%error, "a metrics TLS handshake failed"),
                        Err(_) => tracing::debug!("a metrics TLS handshake timed out"),
                    }
                }
            }
            drop(slot);
        });
    }
}

async fn serve_http<S>(stream: S, app: Router, limits: ServerLimits)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app);
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "a metrics connection ended with an error");
    }
}

/// Binds `listen`: the listener and the address it got.
pub(crate) async fn bind(listen: SocketAddr) -> crate::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| crate::LocalError::Listen { listen, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| crate::LocalError::Listen { listen, source })?;
    Ok((listener, bound))
}

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    use super::*;

    async fn start(limits: ServerLimits) -> SocketAddr {
        let (listener, bound) = bind(([127, 0, 0, 1], 0).into()).await.unwrap();
        let app = Router::new().route("/readyz", get(|| async { "ok\n" }));
        tokio::spawn(serve_connections(listener, None, app, limits));
        bound
    }

    /// Reads until the server closes; how long that took.
    async fn until_closed(stream: &mut tokio::net::TcpStream) -> Duration {
        let started = Instant::now();
        let mut buffer = [0u8; 256];
        while let Ok(n) = stream.read(&mut buffer).await {
            if n == 0 {
                break;
            }
        }
        started.elapsed()
    }

    async fn readyz(at: SocketAddr) -> String {
        let mut stream = tokio::net::TcpStream::connect(at).await.unwrap();
        stream
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer).await;
        answer
    }

    #[tokio::test]
    async fn an_incomplete_head_and_an_idle_keep_alive_are_closed_after_the_timeout() {
        let timeout = Duration::from_millis(300);
        let at = start(ServerLimits {
            header_read_timeout: timeout,
            max_connections: 4,
        })
        .await;
        let mut slow = tokio::net::TcpStream::connect(at).await.unwrap();
        slow.write_all(b"GET /readyz HTTP/1.1\r\nHo").await.unwrap();
        let took = until_closed(&mut slow).await;
        assert!(took >= timeout && took < timeout * 3, "{took:?}");

        let mut idle = tokio::net::TcpStream::connect(at).await.unwrap();
        idle.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let took = until_closed(&mut idle).await;
        assert!(took >= timeout && took < timeout * 3, "{took:?}");
    }

    #[tokio::test]
    async fn at_the_cap_a_new_connection_waits_for_a_slot_and_is_then_served() {
        let timeout = Duration::from_millis(400);
        let at = start(ServerLimits {
            header_read_timeout: timeout,
            max_connections: 2,
        })
        .await;
        // Two clients that never send anything hold both slots until the timeout.
        let mut holders = Vec::new();
        for _ in 0..2 {
            holders.push(tokio::net::TcpStream::connect(at).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let answer = readyz(at).await;
        let took = started.elapsed();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // Served once a holder timed out: not before (the cap held), and not much after.
        assert!(
            took >= timeout - Duration::from_millis(100) && took < timeout * 3,
            "{took:?}"
        );
    }
}
