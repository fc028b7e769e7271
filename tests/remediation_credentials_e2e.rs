//! The remediation controller end to end with bad input and BMC credentials: malformed
//! addresses, Machines and Secrets, wrong passwords, unreachable BMCs and rotated Secrets.
//! Each is reported where a user looks, nothing is deleted, and no password leaks.

use std::time::Duration;

use baremend::api::RemediationPhase;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use serde_json::json;

use baremend_testkit as common;

use common::events::told_on;
use common::eventually;
use common::lab::{Lab, direct_bmc_policy, fast, fast_policy, patch_policy, steps};
use common::remediation::{assert_in_order, start_prepared};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_bmc_address_is_reported_and_nothing_is_deleted() {
    let mut policy = direct_bmc_policy();
    policy["timeouts"]["powerOffSeconds"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| {
        lab.detach("worker-0");
        lab.set_bmc("worker-0", json!({"address": "redfish://:99999/x"}));
    })
    .await;
    lab.cluster.hang("worker-0");
    let failed = lab.failed("worker-0-1").await;
    let status = failed.status.unwrap();
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("redfish://:99999/x"),
        "the error names the address: {status:?}"
    );
    assert!(lab.node_exists("worker-0"));
}

/// A lab fencing directly, worker-0's BMC refusing the Secret's password (its own is `wrong`)
/// and worker-1's unreachable, both detached; power-off proven within `power_off_seconds`.
async fn bad_bmcs(power_off_seconds: u64, wrong: &str) -> Lab {
    let mut policy = direct_bmc_policy();
    policy["timeouts"]["powerOffSeconds"] = json!(power_off_seconds);
    policy["maxConcurrent"] = json!(2);
    start_prepared(fast(), policy, |lab| {
        lab.detach("worker-0");
        lab.detach("worker-1");
        lab.bmc_password("worker-0", wrong, None);
        lab.set_bmc(
            "worker-1",
            json!({"address": "redfish+http://127.0.0.1:1/redfish/v1/Systems/1"}),
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bmc_credentials_and_an_unreachable_bmc_fail_without_touching_the_node_or_leaking() {
    const WRONG: &str = "not-the-password-Xq9";
    let lab = bad_bmcs(2, WRONG).await;
    lab.trigger("worker-0", true);
    lab.trigger("worker-1", true);
    for name in ["worker-0-1", "worker-1-1"] {
        let failed = lab.failed(name).await;
        let status = failed.status.clone().unwrap();
        assert!(
            !steps(&failed).iter().any(|s| s.starts_with("Node")),
            "{name}: {status:?}"
        );
        let text = serde_json::to_string(&status).unwrap();
        assert!(!text.contains(WRONG), "{name} leaks the password: {text}");
    }
    let status = lab.remediation("worker-0-1").unwrap().status.unwrap();
    let error = status.last_error.unwrap_or_default();
    assert!(error.contains("BMC read failed"), "{error}");
    assert!(lab.node_exists("worker-0") && lab.node_exists("worker-1"));
    // The hosts were never powered off.
    for host in ["worker-0", "worker-1"] {
        assert!(
            lab.cluster.host(host).unwrap().host.history().is_empty(),
            "{host}"
        );
    }
    // Only once the Event that tells worker-0's refused login exists is its absence of the
    // password worth checking.
    let told = told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Remediation", "worker-0-1"),
        "Failed",
        "BMC read failed",
    )
    .await;
    assert!(!told.to_string().contains(WRONG), "{told}");
    let text = lab.events_text();
    assert!(!text.contains(WRONG), "Events leak the password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_machines_and_secrets_get_an_error_and_an_event_and_nothing_is_deleted() {
    use baremend_sim::cluster::local::SECRETS;
    let mut policy = fast_policy();
    policy["maxConcurrent"] = json!(3);
    policy["storm"] = json!({"maxUnhealthyPercent": 100});
    policy["timeouts"]["powerOffSeconds"] = json!(2);
    let lab = start_prepared(fast(), policy, |lab| {
        // worker-0: a providerID that names no host.
        lab.merge_machine(
            "worker-0",
            json!({"spec": {"providerID": "baremetalhost:///just-a-name"}}),
        );
        // worker-1: direct BMC whose Secret does not exist.
        lab.detach("worker-1");
        lab.set_bmc("worker-1", json!({"credentialsName": "no-such-secret"}));
        // worker-2: direct BMC whose Secret lacks the password.
        lab.detach("worker-2");
        lab.api
            .create(
                SECRETS,
                MACHINE_NAMESPACE,
                json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "half-secret", "namespace": MACHINE_NAMESPACE},
                    "data": {"username": "YWRtaW4="}}),
            )
            .unwrap();
        lab.set_bmc("worker-2", json!({"credentialsName": "half-secret"}));
    })
    .await;
    for worker in ["worker-0", "worker-1", "worker-2"] {
        lab.trigger(worker, true);
    }
    for (worker, expected) in [
        ("worker-0", "no HostBmc and no BareMetalHost names its BMC"),
        // One line in words, not kube's Debug dump of the Status.
        (
            "worker-1",
            r#"Secret no-such-secret: secrets "no-such-secret" not found (NotFound, 404)"#,
        ),
        ("worker-2", "Secret half-secret: data.password: is missing"),
    ] {
        lab.failed_untouched(worker, expected).await;
    }
    // The malformed providerID named in an Event on its Machine.
    told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", "worker-0"),
        "InvalidMachine",
        "spec.providerID",
    )
    .await;
}

/// Which simulated BMC a test fences through.
#[derive(Debug, Clone, Copy)]
enum Protocol {
    Redfish,
    Ipmi,
}

/// What these tests ask of the lab beyond the kit.
trait CredentialChecks {
    fn lock_out_after(&self, protocol: Protocol, host: &str, threshold: u32);
    fn bmc_lockout(&self, protocol: Protocol, host: &str) -> baremend_sim::lockout::LockoutStatus;
    fn ipmi_bmc(&self, host: &str) -> &baremend_sim::ipmi::IpmiSim;
}

impl CredentialChecks for Lab {
    /// Turns account lock-out on for `host`'s BMC.
    fn lock_out_after(&self, protocol: Protocol, host: &str, threshold: u32) {
        let policy = baremend_sim::lockout::LockoutPolicy::after(threshold);
        match protocol {
            Protocol::Redfish => self.cluster.redfish().service().set_lockout_policy(policy),
            Protocol::Ipmi => self.ipmi_bmc(host).set_lockout_policy(policy),
        }
    }

    /// The failed logins and lock of `host`'s BMC account.
    fn bmc_lockout(&self, protocol: Protocol, host: &str) -> baremend_sim::lockout::LockoutStatus {
        let user = baremend_sim::cluster::BMC_USERNAME;
        match protocol {
            Protocol::Redfish => self
                .cluster
                .redfish()
                .service()
                .lockout_status(user)
                .unwrap(),
            Protocol::Ipmi => self.ipmi_bmc(host).lockout_status(user),
        }
    }

    fn ipmi_bmc(&self, host: &str) -> &baremend_sim::ipmi::IpmiSim {
        self.cluster
            .ipmi()
            .iter()
            .find(|sim| sim.host().id() == host)
            .unwrap()
    }
}

/// The Secret of `host` gets a new password, the old one as `previousPassword`, while the BMC
/// (lock-out at 3 failures) keeps the old one; the host is then fenced directly.
async fn fence_after_secret_rotation(protocol: Protocol, host: &str) {
    const NEW: &str = "the-new-password-Vb3";
    let policy = direct_bmc_policy();
    let spec = match protocol {
        Protocol::Redfish => fast(),
        Protocol::Ipmi => ClusterSpec {
            ipmi: true,
            bmh_uses_ipmi: true,
            ..fast()
        },
    };
    let secret = format!("{host}-bmc-secret");
    let mut old = String::new();
    let lab = start_prepared(spec, policy, |lab| {
        lab.detach(host);
        lab.lock_out_after(protocol, host, 3);
        old = lab.rotate_bmc_password(host, NEW);
    })
    .await;
    lab.cluster.hang(host);
    let done = lab.succeeded(&format!("{host}-1")).await;
    assert_in_order(&done, &["PowerOffRequested", "Fenced", "Succeeded"]);
    // The Event names the Secret; once it exists, no Event may carry either password.
    told_on(
        &lab.api,
        MACHINE_NAMESPACE,
        ("Machine", host),
        "BmcPreviousPasswordUsed",
        &format!("Secret {MACHINE_NAMESPACE}/{secret}"),
    )
    .await;
    let text = lab.events_text();
    assert!(
        !text.contains(NEW) && !text.contains(&old),
        "Events leak a password"
    );
    let status = serde_json::to_string(&done.status).unwrap();
    assert!(!status.contains(NEW) && !status.contains(&old));
    // The new password refused once, then the old one first for every later login.
    let lockout = lab.bmc_lockout(protocol, host);
    assert!(
        !lockout.locked && lockout.lockouts == 0,
        "{protocol:?}: {lockout:?}"
    );
    assert_eq!(lockout.failed_logins, 1, "{protocol:?}: {lockout:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_before_its_redfish_bmc_fences_with_the_previous_password_and_says_so() {
    fence_after_secret_rotation(Protocol::Redfish, "worker-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_before_its_ipmi_bmc_fences_with_the_previous_password_and_says_so() {
    fence_after_secret_rotation(Protocol::Ipmi, "worker-2").await;
}

/// A refused login, an unreachable BMC and a Secret that does not exist are told within 10 s
/// of the start, in their own words, with a minute of power-off deadline: the first two while
/// the deadline runs (the `StepFailed` condition, `lastError` and a Warning Event name the
/// cause), the missing Secret by failing at once with it (`Succeeded=False`, `lastError`, the
/// `Failed` Warning); the Strategy column shows the path in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_an_unreachable_bmc_and_a_missing_secret_are_told_within_ten_seconds() {
    const WRONG: &str = "not-the-password-Zr4";
    let lab = bad_bmcs(60, WRONG).await;
    let all_three = json!({"maxConcurrent": 3, "storm": {"maxUnhealthyPercent": 100}});
    patch_policy(&lab, all_three).await;
    lab.detach("worker-2");
    lab.set_bmc("worker-2", json!({"credentialsName": "no-such-secret"}));
    let began = std::time::Instant::now();
    for worker in ["worker-0", "worker-1", "worker-2"] {
        lab.trigger(worker, true);
    }
    // Whether each ends at once (the missing Secret), or waits out its deadline.
    for (name, says, ended) in [
        ("worker-0-1", "refused the credentials", false),
        ("worker-1-1", "is unreachable", false),
        (
            "worker-2-1",
            r#"Secret no-such-secret: secrets "no-such-secret" not found (NotFound, 404)"#,
            true,
        ),
    ] {
        let condition = eventually(
            &format!("{name} tells {says:?}"),
            Duration::from_secs(10),
            async || {
                let Some(status) = lab.remediation(name).and_then(|r| r.status) else {
                    return Err(format!("no {name} yet"));
                };
                let told = status
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains(says));
                // A step that failed while the deadline runs, or the end. (The missing
                // Secret may be told as a failed step first, a pass before the end: the end
                // is what is awaited.)
                let wanted = if ended { "Succeeded" } else { "StepFailed" };
                let status_of = if ended { "False" } else { "True" };
                let condition = status
                    .conditions
                    .iter()
                    .filter(|c| c.message.contains(says) && told)
                    .find(|c| c.type_ == wanted && c.status == status_of)
                    .cloned();
                condition.ok_or(format!("{status:?}"))
            },
        )
        .await;
        let reason = if ended { "Failed" } else { &condition.reason };
        let event = told_on(
            &lab.api,
            MACHINE_NAMESPACE,
            ("Remediation", name),
            reason,
            says,
        )
        .await;
        assert_eq!(event["type"], "Warning", "{event}");
        let took = began.elapsed();
        assert!(took < Duration::from_secs(10), "{name} told after {took:?}");
        let status = lab.remediation(name).unwrap().status.unwrap();
        // A BMC that may answer later is waited for; a Secret that is not there ends it.
        let phase = if ended {
            RemediationPhase::Failed
        } else {
            RemediationPhase::PoweringOff
        };
        assert_eq!(status.phase, phase, "{status:?}");
        assert_eq!(
            status.strategy.as_ref().map(|s| s.as_str().to_owned()),
            Some("DirectBmc".to_owned()),
            "{status:?}"
        );
        assert!(!serde_json::to_string(&status).unwrap().contains(WRONG));
    }
}
