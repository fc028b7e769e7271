//! `baremend run`'s `/metrics` as a cluster's monitoring reaches it: HTTPS with the
//! certificate from files (reloaded when they change) or a self-signed one, served only to
//! callers the cluster authenticates (TokenReview) and authorises (SubjectAccessReview), the
//! answers cached for the TTL; the probes plain and open on their own port; plain metrics only
//! when asked for. The simulated API server answers the reviews, and counts them.

use baremend_testkit as common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baremend_sim::apiserver::FaultRule;
use baremend_sim::tls::TestCa;
use common::lab::{Lab, fast};
use common::{eventually, free_port, scratch};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// `baremend run` against the lab's API server, metrics on `metrics`, probes on `probes`.
fn run(lab: &Lab, dir: &Path, metrics: u16, probes: u16, extra: &[&str]) -> Child {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, lab.cluster.kubeconfig()).unwrap();
    let log = std::fs::File::create(dir.join("baremend.log")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_baremend"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--leader-elect=false",
            "--drift=false",
            "--power-poll",
            "1s",
        ])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .args(["--probe-listen", &format!("127.0.0.1:{probes}")])
        .args(extra)
        // Everything logged, so that the check that no token is logged means something.
        .env("RUST_LOG", "info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

type Der<'a> = CertificateDer<'a>;
type Signed = DigitallySignedStruct;
type Signature = Result<HandshakeSignatureValid, rustls::Error>;

fn algorithms() -> rustls::crypto::WebPkiSupportedAlgorithms {
    rustls::crypto::ring::default_provider().signature_verification_algorithms
}

/// Trusts whatever the server shows and keeps it, for the self-signed certificate.
#[derive(Debug)]
struct KeepAny(Mutex<Option<CertificateDer<'static>>>);

impl ServerCertVerifier for KeepAny {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = Some(end_entity.clone().into_owned());
        Ok(ServerCertVerified::assertion())
    }
    // The handshake's signature is still checked against the certificate shown: only the
    // chain of trust is skipped.
    fn verify_tls12_signature(&self, m: &[u8], c: &Der<'_>, d: &Signed) -> Signature {
        rustls::crypto::verify_tls12_signature(m, c, d, &algorithms())
    }
    fn verify_tls13_signature(&self, m: &[u8], c: &Der<'_>, d: &Signed) -> Signature {
        rustls::crypto::verify_tls13_signature(m, c, d, &algorithms())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        algorithms().supported_schemes()
    }
}

fn client_config(roots: Option<&str>) -> (ClientConfig, Arc<KeepAny>) {
    let keep = Arc::new(KeepAny(Mutex::new(None)));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap();
    let config = match roots {
        Some(pem) => {
            let mut store = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                store.add(cert.unwrap()).unwrap();
            }
            builder.with_root_certificates(store).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(keep.clone())
            .with_no_client_auth(),
    };
    (config, keep)
}

/// One HTTP/1.1 GET; over TLS (verified against `roots`, or trusting anything) when `tls`.
/// Returns the status, the body and the certificate the server showed.
async fn get(
    port: u16,
    path: &str,
    token: Option<&str>,
    tls: Option<Option<&str>>,
) -> std::io::Result<(u16, String, Option<Vec<u8>>)> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
    let mut answer = Vec::new();
    let mut shown = None;
    match tls {
        None => {
            let mut stream = stream;
            stream.write_all(request.as_bytes()).await?;
            stream.read_to_end(&mut answer).await?;
        }
        Some(roots) => {
            let (config, keep) = client_config(roots);
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let name = ServerName::try_from("localhost").unwrap();
            let mut stream = connector.connect(name, stream).await?;
            shown = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|c| c.to_vec());
            assert!(roots.is_some() || keep.0.lock().unwrap().is_some());
            stream.write_all(request.as_bytes()).await?;
            // A server may close without close_notify after `Connection: close`.
            let _ = stream.read_to_end(&mut answer).await;
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body, shown))
}

/// The status of a GET (0 when it got no HTTP answer).
async fn status_of(port: u16, path: &str, token: Option<&str>, tls: Option<Option<&str>>) -> u16 {
    get(port, path, token, tls).await.map(|a| a.0).unwrap_or(0)
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_over_https_only_to_callers_the_cluster_authorises() {
    let lab = Lab::builder(fast()).start().await;
    let api = lab.cluster.api_server();
    let dir = scratch("metrics-secure");
    let ca = TestCa::generate("metrics test CA").unwrap();
    let first = ca.issue(&["localhost"]).unwrap();
    std::fs::write(dir.join("tls.crt"), &first.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &first.key_pem).unwrap();
    let (metrics, probes) = (free_port(), free_port());
    let dir_arg = dir.display().to_string();
    let _run = run(
        &lab,
        &dir,
        metrics,
        probes,
        &[
            "--metrics-cert-dir",
            &dir_arg,
            "--metrics-auth-cache-ttl",
            "2s",
        ],
    );
    let roots = Some(ca.ca_pem());

    // Probes: plain and open to anyone (the kubelet has no token).
    for probe in ["/healthz", "/readyz"] {
        eventually(probe, Duration::from_secs(60), async || {
            status_of(probes, probe, None, None).await == 200
        })
        .await;
    }
    assert_eq!(
        get(probes, "/metrics", None, None).await.unwrap().0,
        404,
        "no metrics on the probe port"
    );

    // The certificate is the files' (verified against their CA) and plain HTTP gets nothing.
    let (status, _, shown) = get(metrics, "/metrics", None, Some(roots)).await.unwrap();
    assert_eq!(status, 401, "no token");
    assert_eq!(shown, Some(der_of(&first.cert_pem)));
    let plain = get(metrics, "/metrics", None, None).await;
    assert!(
        !matches!(plain, Ok((200, _, _))),
        "plain HTTP must not be served: {plain:?}"
    );

    let before = api.review_counts();
    assert_eq!(
        get(metrics, "/metrics", Some("unknown"), Some(roots))
            .await
            .unwrap()
            .0,
        401
    );
    let stranger = api.mint_token(
        "system:serviceaccount:default:stranger",
        &["system:serviceaccounts"],
    );
    assert_eq!(
        get(metrics, "/metrics", Some(&stranger), Some(roots))
            .await
            .unwrap()
            .0,
        403
    );
    let prometheus_user = "system:serviceaccount:openshift-monitoring:prometheus-k8s";
    let prometheus = api.mint_token(prometheus_user, &["system:serviceaccounts"]);
    // What a cluster admin grants the scraper: a ClusterRole with the URL, bound to it.
    let rbac = |plural: &'static str| baremend_sim::cluster::local::Gvr {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural,
    };
    lab.api
        .create(
            rbac("clusterroles"),
            "",
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "metrics-reader"},
                "rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}),
        )
        .unwrap();
    lab.api
        .create(
            rbac("clusterrolebindings"),
            "",
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "prometheus-metrics"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
                "subjects": [{"kind": "ServiceAccount", "namespace": "openshift-monitoring", "name": "prometheus-k8s"}]}),
        )
        .unwrap();
    let (status, body, _) = get(metrics, "/metrics", Some(&prometheus), Some(roots))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("baremend_leader"), "{body}");
    let reviewed = api.review_counts();
    assert_eq!(
        reviewed.token_reviews - before.token_reviews,
        3,
        "one TokenReview per new token"
    );
    assert_eq!(
        reviewed.access_reviews - before.access_reviews,
        2,
        "one SubjectAccessReview per known user"
    );

    // Within the TTL the answer comes from the cache: no review at all.
    assert_eq!(
        get(metrics, "/metrics", Some(&prometheus), Some(roots))
            .await
            .unwrap()
            .0,
        200
    );
    assert_eq!(
        api.review_counts(),
        reviewed,
        "a second request within the TTL is not reviewed again"
    );

    // BMC addresses only in the two documented series (read from the real controller's scrape
    // once the power monitor has read the hosts).
    let with_bmc = eventually(
        "a host's power series",
        Duration::from_secs(60),
        async || {
            let (_, body, _) = get(metrics, "/metrics", Some(&prometheus), Some(roots))
                .await
                .unwrap();
            let lines: Vec<String> = body
                .lines()
                .filter(|l| l.contains("bmc=\""))
                .map(str::to_owned)
                .collect();
            (!lines.is_empty()).then_some(lines)
        },
    )
    .await;
    for line in &with_bmc {
        let name = line.split('{').next().unwrap_or_default();
        assert!(
            [
                "baremend_host_power_state",
                "baremend_bmc_previous_password_in_use"
            ]
            .contains(&name),
            "an undocumented series carries a BMC address: {line}"
        );
    }

    // A revoked binding is refused once the cached answer has expired.
    lab.api
        .delete(rbac("clusterrolebindings"), "", "prometheus-metrics", None)
        .unwrap();
    eventually(
        "the revoked caller refused",
        Duration::from_secs(20),
        async || status_of(metrics, "/metrics", Some(&prometheus), Some(roots)).await == 403,
    )
    .await;

    // A rotated certificate (service-ca renews it in the mounted Secret) is served without a
    // restart.
    let second = ca.issue(&["localhost"]).unwrap();
    std::fs::write(dir.join("tls.key.new"), &second.key_pem).unwrap();
    std::fs::write(dir.join("tls.crt.new"), &second.cert_pem).unwrap();
    std::fs::rename(dir.join("tls.key.new"), dir.join("tls.key")).unwrap();
    std::fs::rename(dir.join("tls.crt.new"), dir.join("tls.crt")).unwrap();
    let rotated = der_of(&second.cert_pem);
    eventually(
        "the rotated certificate served",
        Duration::from_secs(20),
        async || {
            get(metrics, "/healthz", None, Some(roots))
                .await
                .ok()
                .and_then(|a| a.2)
                == Some(rotated.clone())
        },
    )
    .await;
    let log = std::fs::read_to_string(dir.join("baremend.log")).unwrap();
    for token in [&stranger, &prometheus] {
        assert!(!log.contains(token.as_str()), "a token reached the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_files_the_certificate_is_self_signed_and_plain_metrics_only_when_asked() {
    let lab = Lab::builder(fast()).start().await;
    let dir = scratch("metrics-self-signed");
    let (metrics, probes) = (free_port(), free_port());
    let _run = run(&lab, &dir, metrics, probes, &[]);
    let (status, _, shown) = eventually(
        "the HTTPS endpoint answers",
        Duration::from_secs(60),
        async || get(metrics, "/metrics", None, Some(None)).await,
    )
    .await;
    assert_eq!(status, 401);
    assert!(shown.is_some_and(|der| !der.is_empty()));
    let log = std::fs::read_to_string(dir.join("baremend.log")).unwrap();
    assert!(
        log.contains("self-signed certificate generated at start"),
        "{log}"
    );

    // --metrics-secure=false: plain HTTP, no token needed.
    let dir = scratch("metrics-plain");
    let (metrics, probes) = (free_port(), free_port());
    let _plain = run(&lab, &dir, metrics, probes, &["--metrics-secure=false"]);
    let (_, body, _) = eventually("plain metrics", Duration::from_secs(60), async || {
        get(metrics, "/metrics", None, None)
            .await
            .ok()
            .filter(|a| a.0 == 200)
    })
    .await;
    assert!(body.contains("baremend_leader"), "{body}");
}

/// Lets `user` get `/metrics`: a ClusterRole with the URL, bound to the user, as an admin
/// grants a scraper.
fn authorise_scraper(api: &baremend_sim::apiserver::ApiServer, user: &str) {
    let local = baremend_sim::cluster::local::Local::new(api.store().clone(), "test");
    let rbac = |plural: &'static str| baremend_sim::cluster::local::Gvr {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural,
    };
    let name = format!("scrape-{}", user.replace(':', "-"));
    local
        .create(
            rbac("clusterroles"),
            "",
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}),
        )
        .unwrap();
    local
        .create(
            rbac("clusterrolebindings"),
            "",
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]}),
        )
        .unwrap();
}

/// Until `stop`, keeps one connection open that sends a request head one byte a second (over
/// TLS when `tls`, after the handshake), opening a new one whenever the server closes it.
/// Returns how many connections the server closed.
async fn slow_header_client(port: u16, tls: bool, stop: Arc<AtomicBool>) -> u32 {
    let mut closed = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok(stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let ended = if tls {
            let (config, _) = client_config(None);
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let name = ServerName::try_from("localhost").unwrap();
            match connector.connect(name, stream).await {
                Ok(stream) => dribble(stream, &stop).await,
                Err(_) => true,
            }
        } else {
            dribble(stream, &stop).await
        };
        closed += u32::from(ended);
    }
    closed
}

/// Sends a request head one byte a second until the server closes (true) or `stop` (false).
async fn dribble<S: tokio::io::AsyncRead + tokio::io::AsyncWrite>(
    stream: S,
    stop: &AtomicBool,
) -> bool {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let head = b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let write = async {
        for byte in head {
            if stop.load(Ordering::Relaxed) || writer.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        std::future::pending::<()>().await
    };
    let mut buffer = [0u8; 512];
    tokio::select! {
        _ = async { while let Ok(n) = reader.read(&mut buffer).await { if n == 0 { break } } } => true,
        _ = write => false,
    }
}

/// The time `future` takes, with its output.
async fn timed<T>(future: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = tokio::time::Instant::now();
    let output = future.await;
    (output, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_and_a_flood_of_new_tokens_starve_neither_the_probes_nor_a_scrape() {
    const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
    const REVIEW_TIMEOUT: Duration = Duration::from_secs(2);
    const MAX_CONNECTIONS: u32 = 128;
    const MAX_REVIEWS: u64 = 4;
    const FLOOD: usize = 500;
    // More slow clients than the probe port's cap: it is saturated by them alone.
    const SLOW_ON_PROBES: u32 = MAX_CONNECTIONS + 8;
    const SLOW_ON_METRICS: u32 = 16;
    let lab = Lab::builder(fast()).start().await;
    let api = lab.cluster.api_server();
    let dir = scratch("metrics-abuse");
    let (metrics, probes) = (free_port(), free_port());
    let flags = [
        format!(
            "--metrics-header-read-timeout={}s",
            HEADER_TIMEOUT.as_secs()
        ),
        format!("--metrics-review-timeout={}s", REVIEW_TIMEOUT.as_secs()),
        format!("--metrics-max-connections={MAX_CONNECTIONS}"),
        format!("--metrics-max-reviews={MAX_REVIEWS}"),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _run = run(&lab, &dir, metrics, probes, &flags);
    eventually("the probes", Duration::from_secs(60), async || {
        status_of(probes, "/readyz", None, None).await == 200
    })
    .await;
    let scraper = "system:serviceaccount:openshift-monitoring:prometheus-k8s";
    let prometheus = api.mint_token(scraper, &["system:serviceaccounts"]);
    authorise_scraper(api, scraper);
    eventually("the first scrape", Duration::from_secs(60), async || {
        status_of(metrics, "/metrics", Some(&prometheus), Some(None)).await == 200
    })
    .await;

    // Every review takes 100 ms at the API server from now on, so that reviews overlap.
    api.inject(FaultRule {
        method: Some("POST".into()),
        path_contains: Some("reviews".into()),
        status: 0,
        count: None,
        retry_after: None,
        delay_ms: 100,
    });

    // One new token in 20 concurrent requests: one review for all of them.
    let before = api.review_counts();
    let stranger = api.mint_token("system:serviceaccount:default:stranger", &[]);
    let same: Vec<u16> = futures_util::future::join_all(
        (0..20).map(|_| status_of(metrics, "/metrics", Some(&stranger), Some(None))),
    )
    .await;
    assert!(same.iter().all(|s| *s == 403), "{same:?}");
    let shared = api.review_counts();
    assert_eq!(
        (
            shared.token_reviews - before.token_reviews,
            shared.access_reviews - before.access_reviews
        ),
        (1, 1),
        "concurrent requests with one token share one review"
    );

    // The abuse: slow heads on both ports (the probe port's cap saturated), then a flood of
    // fresh tokens on the metrics port.
    let stop = Arc::new(AtomicBool::new(false));
    let mut slow = Vec::new();
    for (port, tls, count) in [
        (probes, false, SLOW_ON_PROBES),
        (metrics, true, SLOW_ON_METRICS),
    ] {
        for _ in 0..count {
            slow.push(tokio::spawn(slow_header_client(port, tls, stop.clone())));
        }
    }
    tokio::time::sleep(HEADER_TIMEOUT / 2).await;
    let flood_started = tokio::time::Instant::now();
    let flood: Vec<_> = (0..FLOOD)
        .map(|i| {
            tokio::spawn(async move {
                let token = format!("flood-{i}-{}", std::process::id());
                status_of(metrics, "/metrics", Some(&token), Some(None)).await
            })
        })
        .collect();

    // While it lasts: an authorised scrape and /readyz, each timed.
    let (mut scrapes, mut probes_took) = (Vec::new(), Vec::new());
    while scrapes.len() < 3 || flood.iter().any(|f| !f.is_finished()) {
        let (status, took) = timed(status_of(
            metrics,
            "/metrics",
            Some(&prometheus),
            Some(None),
        ))
        .await;
        assert_eq!(status, 200, "the authorised scrape during the flood");
        scrapes.push(took);
        let (status, took) = timed(status_of(probes, "/readyz", None, None)).await;
        assert_eq!(status, 200, "/readyz during the flood");
        probes_took.push(took);
    }
    let flood_took = flood_started.elapsed();
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    for handle in flood {
        *answers.entry(handle.await.unwrap()).or_default() += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut slow_closed = 0;
    for handle in slow {
        slow_closed += handle.await.unwrap();
    }
    let reviewed = api.review_counts();
    let max_in_flight = api.reviews_max_in_flight();
    api.clear_faults();

    // The bounds, from the configuration. A connection holds a slot at most for its
    // handshake and its head (a header-read timeout each), a wait for a review slot and the
    // review (a review timeout each). A new connection has at most one connection per other
    // client ahead of it in the accept queue, served `cap` at a time, and is then answered
    // within its own handshake and head (the scrape's answer is cached, no review).
    let rounds = |ahead: u32| ahead.div_ceil(MAX_CONNECTIONS);
    let metrics_slot = 2 * HEADER_TIMEOUT + 2 * REVIEW_TIMEOUT;
    let scrape_bound = metrics_slot * rounds(SLOW_ON_METRICS + FLOOD as u32) + 2 * HEADER_TIMEOUT;
    let probe_bound = HEADER_TIMEOUT * rounds(SLOW_ON_PROBES) + HEADER_TIMEOUT;
    let worst_scrape = scrapes.iter().max().copied().unwrap_or_default();
    let worst_probe = probes_took.iter().max().copied().unwrap_or_default();
    println!(
        "flood: {FLOOD} new tokens in {flood_took:?}, answers {answers:?}; TokenReviews {} \
         SubjectAccessReviews {}; reviews in flight at most {max_in_flight} (bound \
         {MAX_REVIEWS}); scrapes during the flood {scrapes:?} (worst {worst_scrape:?}, bound \
         {scrape_bound:?}); /readyz {probes_took:?} (worst {worst_probe:?}, bound \
         {probe_bound:?}); slow-header connections closed by the server: {slow_closed}",
        reviewed.token_reviews - shared.token_reviews,
        reviewed.access_reviews - shared.access_reviews,
    );
    assert!(
        max_in_flight <= MAX_REVIEWS,
        "{max_in_flight} reviews at once"
    );
    assert!(
        reviewed.token_reviews - shared.token_reviews <= FLOOD as u64,
        "at most one review per token"
    );
    assert_eq!(
        reviewed.access_reviews, shared.access_reviews,
        "unknown tokens"
    );
    assert!(
        answers.keys().all(|s| [401, 503].contains(s)),
        "every flood request refused or shed: {answers:?}"
    );
    assert!(
        worst_scrape <= scrape_bound,
        "{worst_scrape:?} > {scrape_bound:?}"
    );
    assert!(
        worst_probe <= probe_bound,
        "{worst_probe:?} > {probe_bound:?}"
    );
    assert!(slow_closed > 0, "the slow heads were cut off");
}
