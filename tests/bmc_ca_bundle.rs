//! A BMC's TLS certificate verified against the CA bundle its host names, end to end: a
//! detached BareMetalHost's `baremend.io/bmc-ca-bundle` annotation and a `HostBmc`'s
//! `caBundleRef`, each naming a ConfigMap or Secret key, against a Redfish BMC served over
//! HTTPS with a certificate of a CA of the test's own. Verification stays on by default, and a
//! bad, missing or wrong bundle fails the remediation with an error naming it, the host never
//! touched.

use baremend::api::{HostBmc, RemediationPhase};
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use baremend_sim::tls::TestCa;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use baremend_testkit as common;

use common::lab::{Lab, direct_bmc_policy, fast, steps};

/// [`direct_bmc_policy`] with `hosts` fenced at once and no storm gate.
fn direct_bmc_policy_for(hosts: usize) -> Value {
    let mut policy = direct_bmc_policy();
    policy["maxConcurrent"] = json!(hosts);
    policy["storm"] = json!({"maxUnhealthyPercent": 100});
    policy
}

/// Creates a ConfigMap with `data` in the Machines' namespace.
async fn config_map(lab: &Lab, name: &str, data: Value) {
    let object: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
    Api::<ConfigMap>::namespaced(lab.client.clone(), MACHINE_NAMESPACE)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
}

/// Creates a Secret with `string_data` in the Machines' namespace.
async fn secret(lab: &Lab, name: &str, string_data: Value) {
    let object: Secret =
        serde_json::from_value(json!({"metadata": {"name": name}, "stringData": string_data}))
            .unwrap();
    Api::<Secret>::namespaced(lab.client.clone(), MACHINE_NAMESPACE)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
}

/// Names a CA bundle on a BareMetalHost and points it at `address`.
fn annotate(lab: &Lab, host: &str, bundle: Option<&str>, address: &str) {
    let annotations = match bundle {
        Some(named) => json!({"annotations": {"baremend.io/bmc-ca-bundle": named}}),
        None => json!({}),
    };
    lab.merge_host(host, annotations, json!({"address": address}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_host_and_a_host_bmc_are_fenced_over_tls_verified_with_the_bundle_they_name() {
    let ca = TestCa::generate("baremend e2e BMC CA").unwrap();
    // Both workers hang at once: the health check must not short-circuit.
    let spec = ClusterSpec {
        max_unhealthy: "100%".into(),
        ..fast()
    };
    let mut lab = Lab::builder(spec)
        .policy(direct_bmc_policy_for(2))
        .start()
        .await;
    let (_bmc0, address0) = lab.tls_bmc("worker-0", &ca).await;
    let (_bmc1, address1) = lab.tls_bmc("worker-1", &ca).await;
    // worker-0: a detached BareMetalHost, its CA in a ConfigMap under the default key.
    lab.detach("worker-0");
    config_map(&lab, "bmc-ca", json!({"ca.crt": ca.ca_pem()})).await;
    annotate(&lab, "worker-0", Some("ConfigMap/bmc-ca"), &address0);
    // worker-1: a HostBmc (it wins over the detached host's spec.bmc), its CA in a Secret
    // under a key of its own.
    lab.detach("worker-1");
    secret(&lab, "bmc-ca-secret", json!({"bundle.pem": ca.ca_pem()})).await;
    let host_bmc: HostBmc = serde_json::from_value(json!({
        "apiVersion": "baremend.io/v1alpha1",
        "kind": "HostBmc",
        "metadata": {"name": "worker-1", "namespace": MACHINE_NAMESPACE},
        "spec": {
            "machineName": "worker-1",
            "address": address1,
            "credentialsName": "worker-1-bmc-secret",
            "caBundleRef": {"kind": "Secret", "name": "bmc-ca-secret", "key": "bundle.pem"},
        },
    }))
    .unwrap();
    Api::<HostBmc>::namespaced(lab.client.clone(), MACHINE_NAMESPACE)
        .create(&PostParams::default(), &host_bmc)
        .await
        .unwrap();
    lab.start_controller(ControllerOptions {
        instance: "ca-bundle".into(),
        ..lab.options()
    });
    lab.cluster.hang("worker-0");
    lab.cluster.hang("worker-1");
    for host in ["worker-0", "worker-1"] {
        let done = lab
            .reach(&format!("{host}-1"), RemediationPhase::Succeeded)
            .await;
        let status = done.status.clone().unwrap();
        assert_eq!(status.strategy.as_deref(), Some("DirectBmc"), "{host}");
        assert_eq!(status.driver.as_deref(), Some("redfish+https"), "{host}");
        assert!(steps(&done).contains(&"Fenced".to_string()), "{host}");
        // The host went off and on through the BMC that only the bundle makes trusted.
        let history = lab.power_history(host);
        assert!(history.len() >= 2, "{host}: {history:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_missing_or_wrong_ca_bundle_fails_naming_it_and_no_bundle_means_the_system_roots() {
    let ca = TestCa::generate("baremend e2e BMC CA").unwrap();
    let other = TestCa::generate("a CA nobody signed the BMC with").unwrap();
    let spec = ClusterSpec {
        workers: 5,
        ..fast()
    };
    let mut lab = Lab::builder(spec)
        .policy(direct_bmc_policy_for(5))
        .start()
        .await;
    config_map(
        &lab,
        "bmc-ca",
        json!({"garbage": "not a certificate", "other.crt": other.ca_pem()}),
    )
    .await;
    let cases = [
        // The key holds no certificate.
        (
            "worker-0",
            Some("ConfigMap/bmc-ca/garbage"),
            "CA bundle ConfigMap bmc-ca: data.garbage: holds no PEM certificate",
        ),
        // The ConfigMap does not exist.
        (
            "worker-1",
            Some("ConfigMap/no-such-ca"),
            "CA bundle ConfigMap no-such-ca: ",
        ),
        // A valid bundle of the wrong CA: the BMC's certificate is refused.
        (
            "worker-2",
            Some("ConfigMap/bmc-ca/other.crt"),
            "TLS verification of BMC",
        ),
        // No bundle: verified against the system roots, which do not know the test's CA.
        ("worker-3", None, "TLS verification of BMC"),
        // An annotation that names nothing usable.
        (
            "worker-4",
            Some("bmc-ca"),
            "metadata.annotations[baremend.io/bmc-ca-bundle]",
        ),
    ];
    let mut bmcs = Vec::new();
    for (host, bundle, _) in &cases {
        let (bmc, address) = lab.tls_bmc(host, &ca).await;
        bmcs.push(bmc);
        lab.detach(host);
        annotate(&lab, host, *bundle, &address);
    }
    lab.start_controller(ControllerOptions {
        instance: "ca-bundle".into(),
        ..lab.options()
    });
    for (host, _, _) in &cases {
        lab.trigger(host, true);
    }
    for (host, _, expected) in &cases {
        lab.failed_untouched(host, expected).await;
    }
    // No BMC was asked anything: no bundle could be used, or no certificate was trusted.
    for (bmc, (host, _, _)) in bmcs.iter().zip(&cases) {
        let stats = bmc.service().stats();
        assert_eq!(stats.requests, 0, "{host}: {stats:?}");
    }
}
