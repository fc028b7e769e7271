//! deploy/ installed on a real control plane as the install guide says, for the tests that
//! judge it there (`real_plane_e2e`, `uninstall_e2e`).

use baremend::lab::setup::LAB_HELPER_IMAGE;

use super::helper_policy::HELPERS;
use super::kubectl::{
    Cluster, documented_kustomizations, install_prerequisites, own_kustomization, real_cluster,
};

/// The install guide's kustomization that names the image (its first with `images:`), naming
/// the labs' digest-pinned image instead of the guide's placeholder.
pub fn guide_kustomization_with_lab_image() -> String {
    let text = documented_kustomizations()
        .into_iter()
        .find(|k| k.contains("images:") && k.contains("overlays/openshift"))
        .expect("docs/guides/install.md shows an OpenShift kustomization with images:");
    with_lab_image(&text)
}

/// The install guide's kustomization that uses `component` (its first), with the `images:`
/// of the guide's first kustomization naming the labs' image (the guide says to add them).
pub fn guide_kustomization_with(component: &str) -> String {
    let text = documented_kustomizations()
        .into_iter()
        .find(|k| k.contains(&format!("deploy/components/{component}")))
        .unwrap_or_else(|| panic!("docs/guides/install.md shows a kustomization with {component}"));
    let images = guide_kustomization_with_lab_image();
    let images = &images[images.find("images:").expect("images:")..];
    with_lab_image(&format!("{text}{images}"))
}

fn with_lab_image(text: &str) -> String {
    let digest = LAB_HELPER_IMAGE.split_once('@').unwrap().1;
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("newName:"))
        .map(|l| match l.find("digest:") {
            Some(at) => format!("{}digest: {digest}", &l[..at]),
            None => l.to_owned(),
        })
        .collect();
    let out = lines.join("\n") + "\n";
    assert!(out.contains(digest), "{out}");
    out
}

/// A real control plane with the OpenShift kinds, our CRDs and the guide's OpenShift
/// kustomization applied with kubectl (in `<dir>/mine`), and the shipped policies created.
pub async fn installed() -> Cluster {
    installed_with(&guide_kustomization_with_lab_image()).await
}

/// [`installed`] with the kustomization `kustomization` instead of the guide's OpenShift one.
pub async fn installed_with(kustomization: &str) -> Cluster {
    let c = real_cluster().await;
    install_prerequisites(&c).await;
    let mine = own_kustomization(&c.dir, kustomization);
    c.ok(&["apply", "-k", mine.to_str().unwrap()], None).await;
    let policies = super::repo_root().join("deploy/policies.yaml");
    c.ok(&["create", "-f", policies.to_str().unwrap()], None)
        .await;
    c
}

/// A kubeconfig of deploy/'s controller ServiceAccount with a token the server issued.
pub async fn controller_kubeconfig(c: &Cluster) -> String {
    let plane = c.plane().expect("a real plane");
    let token = plane
        .token(HELPERS, "baremend")
        .await
        .expect("a TokenRequest for baremend/baremend");
    plane.kubeconfig_with_token(&token)
}

/// `baremend run` as a user starts it outside the cluster, with `kubeconfig`, reporting as
/// `instance`, its endpoints on free loopback ports and plain metrics, its power monitor off,
/// standard input and output closed (the caller chooses what becomes of standard error).
pub fn run_command(kubeconfig: &std::path::Path, instance: &str) -> tokio::process::Command {
    run_command_polling(kubeconfig, instance, "0s")
}

/// [`run_command`] with the power monitor reading every host every `power_poll` (`1s`;
/// `0s`: off).
pub fn run_command_polling(
    kubeconfig: &std::path::Path,
    instance: &str,
    power_poll: &str,
) -> tokio::process::Command {
    let port = || format!("127.0.0.1:{}", super::free_port());
    let mut command = tokio::process::Command::new(super::baremend_bin());
    command
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--instance", instance])
        .args(["--metrics-secure=false", "--power-poll", power_poll])
        .args(["--metrics-listen", &port(), "--probe-listen", &port()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// Waits until `baremend run` reporting as `instance` holds its Lease in deploy/'s namespace;
/// the holders seen.
pub async fn lease_held_by(c: &Cluster, instance: &str) -> String {
    super::eventually(
        "baremend holds its Lease",
        std::time::Duration::from_secs(60),
        async || {
            let (ok, out, err) = c
                .kubectl(
                    &[
                        "get",
                        "lease",
                        "-n",
                        HELPERS,
                        "-o",
                        "jsonpath={.items[*].spec.holderIdentity}",
                    ],
                    None,
                )
                .await;
            if ok && out.contains(instance) {
                Ok(out)
            } else {
                Err(format!("{out}{err}"))
            }
        },
    )
    .await
}
