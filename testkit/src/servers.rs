//! One test, two API servers: ours and a real kube-apiserver (with etcd and
//! kube-controller-manager, `baremend_sim::plane`). Where the real server can answer, it is
//! the judge: a test written once runs on both, and a difference fails one of the two.
//!
//! ```ignore
//! async fn crds_are_accepted(server: ServerKind) { let api = Server::start(server).await; … }
//! on_both_servers!(crds_are_accepted);   // tests crds_are_accepted::simulated and ::real
//! ```

use baremend_sim::apiserver::{ApiServer, ApiServerConfig};
use baremend_sim::plane::{ControlPlane, PlaneOptions};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Which API server a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// Ours (`baremend_sim::apiserver`).
    Simulated,
    /// kube-apiserver of the pinned release.
    Real,
}

/// A running API server of either kind; dropping it stops it.
pub enum Server {
    /// Ours.
    Simulated(ApiServer),
    /// The real control plane.
    Real(Box<ControlPlane>),
}

impl Server {
    /// Starts one (the real one with kube-controller-manager), over HTTPS.
    pub async fn start(kind: ServerKind) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        match kind {
            ServerKind::Simulated => Server::Simulated(
                ApiServer::start(ApiServerConfig {
                    tls: true,
                    ..ApiServerConfig::default()
                })
                .await
                .expect("the simulated API server starts"),
            ),
            ServerKind::Real => {
                let dir = super::scratch("plane");
                let plane = ControlPlane::start(&super::kubectl::binaries(), &dir, plane_options())
                    .await
                    .unwrap_or_else(|e| panic!("the control plane did not start: {e}"));
                eprintln!("control plane ready in {:?}", plane.started_in());
                Server::Real(Box::new(plane))
            }
        }
    }

    /// The simulated API server (the test is one of the simulator's own).
    pub fn sim(&self) -> &ApiServer {
        match self {
            Server::Simulated(server) => server,
            Server::Real(_) => panic!("this test needs the simulated API server"),
        }
    }

    /// The real control plane, when it is one.
    pub fn plane(&self) -> Option<&ControlPlane> {
        match self {
            Server::Real(plane) => Some(plane),
            Server::Simulated(_) => None,
        }
    }

    /// Which kind it is.
    pub fn kind(&self) -> ServerKind {
        match self {
            Server::Simulated(_) => ServerKind::Simulated,
            Server::Real(_) => ServerKind::Real,
        }
    }

    /// An administrator's kubeconfig.
    pub fn admin_kubeconfig(&self) -> String {
        match self {
            Server::Simulated(server) => server.kubeconfig(),
            Server::Real(plane) => plane.admin_kubeconfig(),
        }
    }

    /// A kubeconfig of `user` in `groups` (a token of ours, a client certificate of the real
    /// plane's CA).
    pub fn kubeconfig_of(&self, user: &str, groups: &[&str]) -> String {
        match self {
            Server::Simulated(server) => server.kubeconfig_for(&server.mint_token(user, groups)),
            Server::Real(plane) => plane.kubeconfig_for(
                &plane
                    .identity(user, groups)
                    .expect("a client certificate of the plane's CA"),
            ),
        }
    }

    /// A kubeconfig that authenticates with `token`.
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        match self {
            Server::Simulated(server) => server.kubeconfig_for(token),
            Server::Real(plane) => plane.kubeconfig_with_token(token),
        }
    }

    /// A kube client of `kubeconfig`, without kube's retries (a test reads each answer).
    pub async fn client_of(kubeconfig: &str) -> kube::Client {
        let kubeconfig = Kubeconfig::from_yaml(kubeconfig).expect("a kubeconfig");
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("a client configuration");
        config.default_retry = false;
        kube::Client::try_from(config).expect("a client")
    }

    /// Creates every CRD of `crds/` and waits until the server serves them (a real server
    /// establishes a new kind a moment after its CRD).
    pub async fn install_crds(&self) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::api::{Api, PostParams};
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin().await);
        for file in super::yaml_files(&super::repo_root().join("crds")) {
            let crd: CustomResourceDefinition =
                serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        super::eventually(
            "every CRD established",
            std::time::Duration::from_secs(30),
            async || {
                let list = crds.list(&Default::default()).await.ok()?;
                list.items
                    .iter()
                    .all(|crd| {
                        crd.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter()
                                    .any(|c| c.type_ == "Established" && c.status == "True")
                            })
                    })
                    .then_some(())
            },
        )
        .await;
    }

    /// The administrator's kube client.
    pub async fn admin(&self) -> kube::Client {
        Self::client_of(&self.admin_kubeconfig()).await
    }
}

/// Runs `async fn NAME(server: ServerKind)` as two tests, `NAME::simulated` and `NAME::real`
/// (a test file imports it: `use baremend_testkit::on_both_servers;`).
#[macro_export]
macro_rules! on_both_servers {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn simulated() {
                super::$name($crate::servers::ServerKind::Simulated).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real() {
                super::$name($crate::servers::ServerKind::Real).await
            }
        }
    )+};
}

/// The plane every real-server test starts: kube-controller-manager's node monitor as quick
/// as the simulated kubelets' leases (4 s without a renewal makes a Node `Unknown`; 50 s
/// upstream), so a hung host is seen in seconds.
pub fn plane_options() -> PlaneOptions {
    PlaneOptions {
        node_monitor: Some((
            std::time::Duration::from_secs(4),
            std::time::Duration::from_secs(1),
        )),
        ..PlaneOptions::default()
    }
}
