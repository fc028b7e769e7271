//! A hostile Kubernetes API server, for the attacks of a workload cluster's owner on the
//! controller: whoever writes a Cluster's kubeconfig Secret chooses the server the controller
//! talks to, and that server may answer anything.
//!
//! Expected flow: [`HostileApiServer::start`] listens on loopback over HTTPS (a certificate of
//! its own [`TestCa`]) and answers each request as its [`Hostility`] says; [`kubeconfig`]
//! names it for a Secret. [`HostileApiServer::most_sent`] tells how much of one answer the
//! client let it send: what a client that reads without bounds would have taken in.
//!
//! Caveats: it speaks just enough HTTP/1.1 for kube's client (a request head, then an answer
//! closed by the connection's end); request bodies are not read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::tls::TestCa;
use crate::{Error, Result};

/// How a hostile server answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Hostility {
    /// Every request gets a body of this many bytes (a JSON array that never closes), sent
    /// as fast as the client reads.
    HugeBody(u64),
    /// The version is answered well; every other answer (the Node list, the watch, a read)
    /// sends its headers, then one byte a second.
    Drip,
    /// The version and the Node list are answered well; a watch gets one line that never
    /// ends, as fast as the client reads.
    EndlessLine(Vec<Value>),
}

/// A running hostile API server; stops when dropped.
pub struct HostileApiServer {
    url: String,
    ca: TestCa,
    most_sent: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for HostileApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostileApiServer")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Drop for HostileApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HostileApiServer {
    /// Listens on a free loopback port, answering as `hostility` says.
    pub async fn start(hostility: Hostility) -> Result<Self> {
        let ca = TestCa::generate("hostile-apiserver-ca")?;
        let acceptor = crate::tls::acceptor(&ca.issue(&["127.0.0.1", "localhost"])?)?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|source| Error::Listen {
                address: "127.0.0.1:0".into(),
                source,
            })?;
        let address = listener.local_addr().map_err(|source| Error::Listen {
            address: "127.0.0.1:0".into(),
            source,
        })?;
        let most_sent = Arc::new(AtomicU64::new(0));
        let hostility = Arc::new(hostility);
        let sent = most_sent.clone();
        let requests = Arc::new(AtomicU64::new(0));
        let asked = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, hostility, sent) =
                    (acceptor.clone(), hostility.clone(), sent.clone());
                asked.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        answer(stream, &hostility, &sent).await;
                    }
                });
            }
        });
        Ok(HostileApiServer {
            url: format!("https://{address}"),
            ca,
            most_sent,
            requests,
            task,
        })
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The most bytes of body it has sent in one answer so far (an answer still flowing
    /// counts what it has sent).
    pub fn most_sent(&self) -> u64 {
        self.most_sent.load(Ordering::Relaxed)
    }

    /// How many connections it has accepted (each carries one request).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// A kubeconfig naming it, trusting its CA, with a bearer token.
    pub fn kubeconfig(&self) -> String {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca.ca_pem());
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: hostile\nclusters:\n- name: hostile\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\ncontexts:\n- name: hostile\n  context: {{cluster: hostile, user: hostile}}\nusers:\n- name: hostile\n  user: {{token: hostile-token}}\n",
            self.url
        )
    }
}

/// Answers one connection's first request, raising `most` to the bytes of body sent so far
/// as it goes (a flood is read while it lasts, not only once the client hung up).
async fn answer<S>(mut stream: S, hostility: &Hostility, most: &AtomicU64)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Some(target) = request_target(&mut stream).await else {
        return;
    };
    let watch = target.contains("watch=true") || target.contains("watch=1");
    let path = target.split('?').next().unwrap_or_default();
    let well = |body: Value| Some(body.to_string().into_bytes());
    let fine = match (hostility, path, watch) {
        (Hostility::HugeBody(_), ..) => None,
        (_, "/version", _) => well(json!({"major": "1", "minor": "36", "gitVersion": "v1.36.3"})),
        (Hostility::EndlessLine(nodes), "/api/v1/nodes", false) => well(
            json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": nodes}),
        ),
        _ => None,
    };
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    if let Some(body) = fine {
        let _ = stream.write_all(&body).await;
        let _ = stream.shutdown().await;
        most.fetch_max(body.len() as u64, Ordering::Relaxed);
        return;
    }
    match hostility {
        Hostility::HugeBody(size) => {
            let unit = b"{\"a\":\"xxxxxxxxxxxxxxxx\"},";
            flood(&mut stream, *size, (b"[", unit), most).await;
        }
        Hostility::EndlessLine(_) => {
            let opening = b"{\"type\":\"ADDED\",\"object\":\"";
            flood(&mut stream, u64::MAX, (opening, b"xxxxxxxxxxxxxxxx"), most).await;
        }
        Hostility::Drip => drip(&mut stream, most).await,
    }
}

/// Reads a request's head (bounded) and returns its target.
async fn request_target<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = stream.read(&mut buffer).await.ok().filter(|n| *n > 0)?;
        head.extend_from_slice(&buffer[..read]);
        if head.len() > 64 << 10 {
            return None;
        }
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace().nth(1).map(str::to_string)
}

/// Sends `opening` then `unit` again and again, up to `size` bytes or until the client stops
/// reading, raising `most` to the bytes sent after each block.
async fn flood<S: tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    size: u64,
    (opening, unit): (&[u8], &[u8]),
    most: &AtomicU64,
) {
    let mut sent = 0u64;
    if stream.write_all(opening).await.is_err() {
        return;
    }
    sent += opening.len() as u64;
    let block = unit.repeat((64 << 10) / unit.len());
    while sent < size {
        if stream.write_all(&block).await.is_err() {
            break;
        }
        sent += block.len() as u64;
        most.fetch_max(sent, Ordering::Relaxed);
    }
}

/// One byte a second, for up to an hour, raising `most` as it goes.
async fn drip<S: tokio::io::AsyncWrite + Unpin>(stream: &mut S, most: &AtomicU64) {
    for sent in 1..=3600u64 {
        if stream.write_all(b" ").await.is_err() || stream.flush().await.is_err() {
            break;
        }
        most.fetch_max(sent, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
