//! The accept loop shared by the simulated services: plain or TLS, HTTP/1.1 keep-alive, and the
//! ability to drop a connection without answering (a fault real BMCs show).

use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// Put into a response's extensions to close the connection instead of sending the response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DropConnection;

#[derive(Debug)]
struct DroppedByFault;

impl fmt::Display for DroppedByFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection dropped by an injected fault")
    }
}

impl std::error::Error for DroppedByFault {}

/// Serves `router` on `listener` until the returned task is aborted; aborting it also ends
/// every open connection.
pub(crate) fn spawn(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
) -> JoinHandle<()> {
    spawn_switchable(listener, tls, router, None)
}

/// Whether a server answers its clients: while it does not, every open connection (watches
/// included) is cut and each new one is closed at once, unanswered, as clients of a server
/// that went away (or that a network partition hides) see it.
#[derive(Debug, Clone)]
pub struct Reachability(Arc<watch::Sender<bool>>);

impl Default for Reachability {
    fn default() -> Self {
        Reachability(Arc::new(watch::channel(true).0))
    }
}

impl Reachability {
    /// Makes the server reachable again, or not.
    pub fn set(&self, reachable: bool) {
        self.0.send_replace(reachable);
    }

    /// Whether clients reach the server now.
    pub fn is_reachable(&self) -> bool {
        *self.0.borrow()
    }
}

/// [`spawn`], with a switch that makes the server unreachable (see [`Reachability`]).
pub(crate) fn spawn_switchable(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    reachability: Option<Reachability>,
) -> JoinHandle<()> {
    // Moved to the services' runtime: a listener answers on the runtime that polls it.
    let listener = listener.into_std();
    let serve = async move {
        let listener = match listener.and_then(TcpListener::from_std) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, "the listener cannot be served");
                return;
            }
        };
        let mut connections = JoinSet::new();
        let mut switch = reachability.as_ref().map(|r| r.0.subscribe());
        loop {
            let switched = async {
                match switch.as_mut() {
                    Some(switch) => switch.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                open = switched => {
                    if !open {
                        switch = None;
                    } else if reachability.as_ref().is_some_and(|r| !r.is_reachable()) {
                        // Gone: every open connection and watch ends now.
                        connections.abort_all();
                    }
                }
                accepted = listener.accept() => match accepted {
                    Ok((stream, _peer)) if reachability.as_ref().is_some_and(|r| !r.is_reachable()) => {
                        // Closed unanswered: the client's request fails.
                        drop(stream);
                    }
                    Ok((stream, _peer)) => {
                        // Small request/response exchanges: do not wait for Nagle.
                        let _ = stream.set_nodelay(true);
                        connections.spawn(serve_connection(
                            stream,
                            tls.clone(),
                            router.clone(),
                            reachability.clone(),
                        ));
                    }
                    Err(error) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    };
    match services_runtime() {
        Some(runtime) => runtime.spawn(serve),
        None => tokio::spawn(serve),
    }
}

/// The runtime the simulated services (API servers, BMCs) answer on, apart from the
/// simulated world's actors (kubelets, operators, health checks) on the caller's: a real API
/// server or BMC is another machine, so a simulated operator's sweep over 20,000 hosts must
/// not hold back its answers (they waited in one task queue behind it). Made on first use,
/// for the life of the process; None if the system refuses its threads (the services then
/// run on the caller's runtime, as before).
fn services_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("sim-services")
                .enable_all()
                .build()
                .inspect_err(|error| {
                    tracing::warn!(%error, "no runtime of their own for the simulated services");
                })
                .ok()
        })
        .as_ref()
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    tls: Option<TlsAcceptor>,
    router: Router,
    reachability: Option<Reachability>,
) {
    match tls {
        None => serve_io(stream, router, reachability).await,
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(stream) => serve_io(stream, router, reachability).await,
            Err(error) => tracing::debug!(%error, "TLS handshake failed"),
        },
    }
}

async fn serve_io<I>(io: I, router: Router, reachability: Option<Reachability>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let router = router.clone();
        // Gone for a request that arrives once the switch is off, on a connection the accept
        // loop has yet to cut: a client's next request never reaches a server it cannot reach.
        let gone = reachability.as_ref().is_some_and(|r| !r.is_reachable());
        async move {
            if gone {
                return Err(DroppedByFault);
            }
            let response = router
                .oneshot(request)
                .await
                .unwrap_or_else(|never: Infallible| match never {});
            if response.extensions().get::<DropConnection>().is_some() {
                Err(DroppedByFault)
            } else {
                Ok(response)
            }
        }
    });
    if let Err(error) = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service)
        .await
    {
        tracing::trace!(%error, "connection ended with an error");
    }
}
