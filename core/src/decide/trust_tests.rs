use std::collections::HashSet;

use serde_json::json;

use super::*;
use crate::testing::mapping_at;

use crate::api::NodeReleaseMode;

fn check(name: &str, uid: &str, templates: &[(&str, &str)]) -> HealthCheck {
    HealthCheck {
        name: name.into(),
        uid: uid.into(),
        templates: templates
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect(),
    }
}

fn trusted(namespaces: &[&str]) -> BTreeSet<String> {
    namespaces.iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_health_check_references_only_baremends_node_templates() {
    // medik8s node-healthcheck-operator `api/v1alpha1/nodehealthcheck_types.go`:
    // `RemediationTemplate` and `EscalatingRemediations[].RemediationTemplate`.
    let object = json!({
        "metadata": {"name": "workers", "uid": "u-1"},
        "spec": {
            "remediationTemplate": {"apiVersion": "baremend.io/v1alpha1", "kind": "NodeRemediationTemplate", "namespace": "wa", "name": "first"},
            "escalatingRemediations": [
                {"remediationTemplate": {"apiVersion": "baremend.io/v1alpha1", "kind": "NodeRemediationTemplate", "namespace": "wb", "name": "second"}},
                {"remediationTemplate": {"apiVersion": "other.io/v1", "kind": "NodeRemediationTemplate", "namespace": "wc", "name": "theirs"}},
                {"remediationTemplate": {"apiVersion": "baremend.io/v1alpha1", "kind": "MachineRemediationTemplate", "namespace": "wd", "name": "m"}},
                {"remediationTemplate": {"apiVersion": "baremend.io/v1alpha1", "kind": "NodeRemediationTemplate", "name": "no-namespace"}},
            ],
        },
    });
    let parsed = health_check(&object).unwrap();
    assert_eq!(
        parsed,
        check("workers", "u-1", &[("wa", "first"), ("wb", "second")])
    );
    assert_eq!(health_check(&json!({"metadata": {"name": "x"}})), None);
    let bare = health_check(&json!({"metadata": {"name": "x", "uid": "u"}})).unwrap();
    assert!(bare.templates.is_empty());
}

#[test]
fn request_namespaces_are_the_policys_list_else_the_health_checks_templates() {
    let checks = [
        check("a", "u1", &[("wa", "t")]),
        check("b", "u2", &[("wb", "t"), ("wa", "u")]),
    ];
    let derived = request_namespaces(&TrustPolicy::default(), &checks);
    assert_eq!(derived, trusted(&["wa", "wb"]));
    assert!(request_namespaces(&TrustPolicy::default(), &[]).is_empty());
    let listed = TrustPolicy {
        request_namespaces: Some(vec!["tenant-a".into()]),
        ..TrustPolicy::default()
    };
    assert_eq!(request_namespaces(&listed, &checks), trusted(&["tenant-a"]));
    let none = TrustPolicy {
        request_namespaces: Some(Vec::new()),
        ..TrustPolicy::default()
    };
    assert!(request_namespaces(&none, &checks).is_empty());
}

#[test]
fn a_node_request_counts_only_from_a_trusted_namespace_and_its_real_health_check() {
    let checks = [check("workers", "u-1", &[("wa", "baremend")])];
    let ok = trusted(&["wa"]);
    let origin = |namespace, owner, template| RequestOrigin {
        namespace,
        owner,
        template,
    };
    // From a trusted namespace: with no owner, or the real one, naming its template or none.
    for good in [
        origin("wa", None, None),
        origin("wa", Some(("workers", "u-1")), None),
        origin("wa", Some(("workers", "u-1")), Some("baremend")),
    ] {
        assert_eq!(node_request_origin(good, &ok, &checks), Ok(()), "{good:?}");
    }
    // Each way of being refused, with its reason.
    let cases = [
        (origin("tenant-a", None, None), "NamespaceNotTrusted"),
        (
            origin("tenant-a", Some(("workers", "u-1")), None),
            "NamespaceNotTrusted",
        ),
        (
            origin("wa", Some(("workers", "u-2")), None),
            "UnknownHealthCheck",
        ),
        (
            origin("wa", Some(("others", "u-1")), None),
            "UnknownHealthCheck",
        ),
        (
            origin("wa", Some(("workers", "u-1")), Some("evil")),
            "TemplateNotReferenced",
        ),
    ];
    for (bad, reason) in cases {
        let refused = node_request_origin(bad, &ok, &checks).unwrap_err();
        assert_eq!(refused.reason().as_str(), reason, "{bad:?}: {refused}");
        assert!(Refusal::REASONS.contains(&refused.reason()));
    }
    // The health check references templates in another namespace only.
    let elsewhere = trusted(&["wa", "wb"]);
    let refused = node_request_origin(
        origin("wb", Some(("workers", "u-1")), None),
        &elsewhere,
        &checks,
    )
    .unwrap_err();
    assert_eq!(refused.reason().as_str(), "TemplateNotReferenced");
    assert!(refused.to_string().contains("namespace wb"), "{refused}");
}

fn overrides() -> PolicyOverrides {
    PolicyOverrides::default()
}

#[test]
fn unset_overrides_keep_the_policy_and_each_narrowing_applies() {
    let policy = RemediationPolicySpec::default();
    assert_eq!(narrow(&policy, &overrides()), Ok(policy.clone()));
    let narrower = PolicyOverrides {
        strategies: Some(vec![FenceStrategyName::DirectBmc]),
        node_release: Some(NodeReleaseMode::Delete),
        power_off_seconds: Some(policy.timeouts.power_off_seconds),
        node_ready_seconds: Some(10),
        max_attempts: Some(1),
    };
    let narrowed = narrow(&policy, &narrower).unwrap();
    assert_eq!(narrowed.strategies, vec![FenceStrategyName::DirectBmc]);
    assert_eq!(narrowed.timeouts.node_ready_seconds, 10);
    assert_eq!(
        narrowed.timeouts.power_off_seconds,
        policy.timeouts.power_off_seconds
    );
    assert_eq!(narrowed.max_attempts, 1);
    // What a request never touches stays the policy's.
    assert_eq!(narrowed.storm, policy.storm);
    assert_eq!(narrowed.max_concurrent, policy.max_concurrent);
    assert_eq!(narrowed.reboot_key, policy.reboot_key);
    assert_eq!(narrowed.mode, policy.mode);
    // The policy's strategies in another order are a subset: the request's order is used.
    let reordered = PolicyOverrides {
        strategies: Some(vec![
            FenceStrategyName::DirectBmc,
            FenceStrategyName::BareMetalHostRebootApi,
        ]),
        ..overrides()
    };
    assert_eq!(
        narrow(&policy, &reordered).unwrap().strategies,
        reordered.strategies.unwrap()
    );
    // An empty list sets nothing.
    let empty = PolicyOverrides {
        strategies: Some(Vec::new()),
        ..overrides()
    };
    assert_eq!(
        narrow(&policy, &empty).unwrap().strategies,
        policy.strategies
    );
}

#[test]
fn every_widening_refuses_the_request_naming_the_field() {
    let policy = RemediationPolicySpec {
        strategies: vec![FenceStrategyName::BareMetalHostRebootApi],
        ..RemediationPolicySpec::default()
    };
    let cases = [
        (
            PolicyOverrides {
                strategies: Some(vec![FenceStrategyName::DirectBmc]),
                ..overrides()
            },
            "strategies",
        ),
        (
            PolicyOverrides {
                strategies: Some(vec![
                    FenceStrategyName::BareMetalHostRebootApi,
                    FenceStrategyName::BareMetalHostRebootApi,
                ]),
                ..overrides()
            },
            "strategies",
        ),
        (
            PolicyOverrides {
                node_release: Some(NodeReleaseMode::OutOfService),
                ..overrides()
            },
            "nodeRelease",
        ),
        (
            PolicyOverrides {
                power_off_seconds: Some(policy.timeouts.power_off_seconds + 1),
                ..overrides()
            },
            "powerOffSeconds",
        ),
        (
            PolicyOverrides {
                node_ready_seconds: Some(policy.timeouts.node_ready_seconds + 1),
                ..overrides()
            },
            "nodeReadySeconds",
        ),
        (
            PolicyOverrides {
                max_attempts: Some(policy.max_attempts + 1),
                ..overrides()
            },
            "maxAttempts",
        ),
    ];
    for (wider, field) in cases {
        match narrow(&policy, &wider) {
            Err(refusal @ Refusal::WidensPolicy { field: f, .. }) => {
                assert_eq!(f, field, "{refusal}");
                assert_eq!(refusal.reason().as_str(), "WidensPolicy");
                assert!(refusal.to_string().contains(field), "{refusal}");
            }
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn the_other_node_release_only_where_the_policy_lets_requests_choose() {
    for (policy_release, asked) in [
        (NodeReleaseMode::Delete, NodeReleaseMode::OutOfService),
        (NodeReleaseMode::OutOfService, NodeReleaseMode::Delete),
    ] {
        let mut policy = RemediationPolicySpec {
            node_release: policy_release,
            ..RemediationPolicySpec::default()
        };
        let asks = PolicyOverrides {
            node_release: Some(asked),
            ..overrides()
        };
        assert!(narrow(&policy, &asks).is_err(), "{policy_release:?}");
        let same = PolicyOverrides {
            node_release: Some(policy_release),
            ..overrides()
        };
        assert_eq!(narrow(&policy, &same).unwrap().node_release, policy_release);
        policy.trust.request_may_choose_node_release = true;
        assert_eq!(narrow(&policy, &asks).unwrap().node_release, asked);
    }
}

fn mapping(namespace: &str, name: &str, machine: Option<&str>, node: Option<&str>) -> Arc<HostBmc> {
    mapping_at(namespace, name, machine, node, 0)
}

/// Each Node and its subject (`namespace/name`), and each refused mapping with its reason.
type Judged = (Vec<(String, String)>, Vec<(String, &'static str)>);

fn judged(claims: &Claims<'_>) -> Judged {
    let subjects = claims
        .subjects
        .iter()
        .map(|(node, m)| (node.clone(), qualified(m)))
        .collect();
    let mut refused: Vec<(String, &'static str)> = claims
        .refused
        .iter()
        .map(|(m, why)| (qualified(m), why.reason().as_str()))
        .collect();
    refused.sort();
    (subjects, refused)
}

#[test]
fn a_node_with_one_trusted_claim_is_its_subject_and_two_claims_make_none() {
    let trusted = vec!["hosts".to_string(), "baremend".to_string()];
    let all = vec![
        mapping("hosts", "n1-a", None, Some("n1")),
        mapping("baremend", "n1-b", None, Some("n1")),
        mapping("hosts", "n2", None, Some("n2")),
        mapping("tenant-a", "n2-evil", None, Some("n2")),
        mapping("tenant-a", "n3-evil", None, Some("n3")),
        mapping("hosts", "of-a-machine-node", None, Some("m0")),
        mapping("tenant-a", "names-a-machine", Some("w"), Some("n4")),
    ];
    let machine_nodes = HashSet::from(["m0".to_string()]);
    let claims = machineless_claims(&all, &trusted, &machine_nodes);
    let (subjects, refused) = judged(&claims);
    // An untrusted claim neither counts nor contests: a tenant cannot block n2.
    assert_eq!(subjects, [("n2".to_string(), "hosts/n2".to_string())]);
    assert_eq!(
        refused,
        [
            ("baremend/n1-b".to_string(), "ContestedNode"),
            ("hosts/n1-a".to_string(), "ContestedNode"),
            ("tenant-a/n2-evil".to_string(), "NamespaceNotTrusted"),
            ("tenant-a/n3-evil".to_string(), "NamespaceNotTrusted"),
        ]
    );
    // The same whatever the order of the list.
    let mut reversed = all.clone();
    reversed.reverse();
    assert_eq!(
        judged(&machineless_claims(&reversed, &trusted, &machine_nodes)),
        (subjects, refused)
    );
    let contested = claims
        .refused
        .iter()
        .find(|(m, _)| m.metadata.name.as_deref() == Some("n1-a"))
        .unwrap();
    assert!(
        contested
            .1
            .to_string()
            .contains("baremend/n1-b, hosts/n1-a"),
        "{}",
        contested.1
    );
    // Nothing trusted: nothing is a subject.
    assert!(
        machineless_claims(&all, &[], &machine_nodes)
            .subjects
            .is_empty()
    );
}

fn named(kind: Option<&str>, namespace: Option<&str>, name: &str) -> slim::Named {
    slim::Named {
        name: name.into(),
        namespace: namespace.map(str::to_string),
        kind: kind.map(str::to_string),
        uid: None,
    }
}

#[test]
fn a_cluster_api_host_must_be_in_the_machines_namespace_and_consumed_by_its_metal3_machine() {
    // cluster-api-provider-metal3 `baremetal/metal3machine_manager.go`: the host is looked up
    // in the Metal3Machine's namespace, and its consumerRef names the Metal3Machine.
    let ours = named(Some("Metal3Machine"), Some("ns"), "m3-0");
    assert_eq!(
        host_consumed_by("ns", "m3-0", ("ns", "h0"), Some(&ours)),
        Ok(())
    );
    let implicit = named(Some("Metal3Machine"), None, "m3-0");
    assert_eq!(
        host_consumed_by("ns", "m3-0", ("ns", "h0"), Some(&implicit)),
        Ok(())
    );
    let cases = [
        (
            ("other", "h0"),
            Some(ours.clone()),
            "not in the Machine's namespace",
        ),
        (("ns", "h0"), None, "no spec.consumerRef"),
        (
            ("ns", "h0"),
            Some(named(Some("Metal3Machine"), Some("ns"), "m3-1")),
            "consumed by Metal3Machine ns/m3-1",
        ),
        (
            ("ns", "h0"),
            Some(named(Some("Metal3Machine"), Some("other"), "m3-0")),
            "consumed by Metal3Machine other/m3-0",
        ),
        (
            ("ns", "h0"),
            Some(named(Some("Machine"), Some("ns"), "m3-0")),
            "consumed by Machine ns/m3-0",
        ),
        (
            ("ns", "h0"),
            Some(named(None, Some("ns"), "m3-0")),
            "(no kind)",
        ),
    ];
    for (host, consumer, says) in cases {
        let refused = host_consumed_by("ns", "m3-0", host, consumer.as_ref()).unwrap_err();
        assert!(refused.contains(says), "{host:?} {consumer:?}: {refused}");
    }
}

#[test]
fn the_host_a_metal3_machine_consumes_is_found_in_the_cache_only_when_one_alone_claims_it() {
    let host = |namespace: &str, name: &str, consumer: Value| -> slim::BareMetalHost {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"consumerRef": consumer},
        }))
        .unwrap()
    };
    let ours = json!({"kind": "Metal3Machine", "name": "m3-0", "namespace": "ns"});
    let implicit = json!({"kind": "Metal3Machine", "name": "m3-0"});
    let other = json!({"kind": "Metal3Machine", "name": "m3-1", "namespace": "ns"});
    let found = |hosts: &[slim::BareMetalHost]| host_consuming(hosts, "ns", "m3-0");
    let h0 = HostRef {
        namespace: "ns".into(),
        name: "h0".into(),
    };
    assert_eq!(found(&[host("ns", "h0", ours.clone())]), Some(h0.clone()));
    assert_eq!(
        found(&[host("ns", "h1", other.clone()), host("ns", "h0", implicit)]),
        Some(h0)
    );
    // No claim, another namespace's host (whatever it says), a claim of another kind.
    assert_eq!(found(&[host("ns", "h1", other)]), None);
    assert_eq!(found(&[host("other", "h0", ours.clone())]), None);
    assert_eq!(
        found(&[host("ns", "h0", json!({"kind": "Machine", "name": "m3-0"}))]),
        None
    );
    assert_eq!(found(&[host("ns", "h0", Value::Null)]), None);
    // Two hosts claim it: neither is taken from the cache (the Metal3Machine decides).
    assert_eq!(
        found(&[host("ns", "h0", ours.clone()), host("ns", "h1", ours)]),
        None
    );
}

#[test]
fn an_openshift_machines_host_counts_in_its_own_namespace_or_a_listed_one() {
    let typed = |json: Value| -> slim::Machine { serde_json::from_value(json).unwrap() };
    let machine = |host: &str| {
        typed(json!({
            "metadata": {"name": "m", "namespace": "machines", "annotations": {"metal3.io/BareMetalHost": host}},
            "spec": {},
        }))
    };
    let listed = vec!["hosts".to_string()];
    let own = trusted_machine_host(&machine("machines/h"), "machines", &[]).unwrap();
    assert_eq!(own.unwrap().to_string(), "machines/h");
    let elsewhere = trusted_machine_host(&machine("hosts/h"), "machines", &[]).unwrap_err();
    assert!(
        elsewhere
            .reason
            .contains("hosts/h is outside the Machine's namespace machines"),
        "{elsewhere}"
    );
    assert!(
        elsewhere
            .reason
            .contains("trust.machineHostNamespaces does not list hosts"),
        "{elsewhere}"
    );
    let listed_host = trusted_machine_host(&machine("hosts/h"), "machines", &listed).unwrap();
    assert_eq!(listed_host.unwrap().to_string(), "hosts/h");
    let other = trusted_machine_host(&machine("other/h"), "machines", &listed);
    assert!(other.is_err(), "only the listed namespaces: {other:?}");
    // The providerID wins over the annotation, and is judged the same way.
    let by_provider = typed(json!({
        "metadata": {"annotations": {"metal3.io/BareMetalHost": "machines/h"}},
        "spec": {"providerID": "baremetalhost:///hosts/h/uid"},
    }));
    assert!(trusted_machine_host(&by_provider, "machines", &[]).is_err());
    let none = typed(json!({"metadata": {}, "spec": {}}));
    assert_eq!(trusted_machine_host(&none, "machines", &[]).unwrap(), None);
    let malformed = machine("no-slash");
    assert!(trusted_machine_host(&malformed, "machines", &listed).is_err());
}

#[test]
fn machine_host_bmcs_are_refused_outside_trusted_namespaces_and_when_two_name_one_machine() {
    let trusted = vec!["hosts".to_string()];
    let mappings = vec![
        mapping("hosts", "a", Some("m-1"), None),
        mapping("tenant", "evil", Some("m-1"), None),
        mapping("hosts", "b", Some("m-2"), None),
        mapping("hosts", "c", Some("m-2"), None),
        mapping("hosts", "node-only", None, Some("n-1")),
    ];
    let standings: Vec<(String, Option<Refusal>)> = machine_claims(&mappings, &trusted)
        .into_iter()
        .map(|(m, r)| (qualified(m), r))
        .collect();
    let names: Vec<&str> = standings.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["hosts/a", "tenant/evil", "hosts/b", "hosts/c"],
        "every Machine's mapping, in order; a Node's is not one"
    );
    assert_eq!(
        standings[0].1, None,
        "the tenant's mapping of a same-named Machine in its own namespace contests nothing"
    );
    let untrusted = standings[1].1.as_ref().unwrap();
    assert_eq!(untrusted.reason(), EventReason::NamespaceNotTrusted);
    for (_, refusal) in &standings[2..] {
        let refusal = refusal.as_ref().unwrap();
        assert_eq!(refusal.reason(), EventReason::ContestedMachine);
        assert_eq!(
            refusal.to_string(),
            "2 HostBmcs name Machine hosts/m-2 (hosts/b, hosts/c): none is used until one is left; delete the wrong ones"
        );
    }
}
