//! kubectl (the pinned v1.36.3, a real client) against the simulated API server's access machinery:
//! ServiceAccount tokens, CertificateSigningRequest approval, token and subject access reviews,
//! and RBAC refusals that `kubectl auth can-i` reports as a real cluster does.

use baremend_testkit as common;

use common::kubectl::cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_gives_a_token_kubectl_can_use() {
    let c = cluster().await;
    c.ok(&["create", "serviceaccount", "robot"], None).await;
    let token = c
        .ok(&["create", "token", "robot", "--duration=15m"], None)
        .await;
    let token = token.trim();
    let payload = token.split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:default:robot");
    let lifetime = claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap();
    assert_eq!(lifetime, 900, "--duration=15m arrives");
    // The token is the account's: it may do what RBAC grants the account.
    c.ok(
        &[
            "create",
            "rolebinding",
            "robot-view",
            "--clusterrole=view",
            "--serviceaccount=default:robot",
        ],
        None,
    )
    .await;
    let out = c
        .ok(
            &[
                "--token",
                token,
                "get",
                "serviceaccount",
                "robot",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert_eq!(out.trim(), "serviceaccount/robot");
    let (ok, _, err) = c
        .kubectl(&["create", "token", "robot", "--duration=1m"], None)
        .await;
    assert!(
        !ok && err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_approves_a_certificate_signing_request() {
    let c = cluster().await;
    let request = baremend_sim::tls::signing_request("alice").unwrap();
    let manifest = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: alice\nspec:\n  request: {request}\n  signerName: kubernetes.io/kube-apiserver-client\n  expirationSeconds: 86400\n  usages: [client auth]\n"
    );
    c.ok(&["apply", "-f", "-"], Some(&manifest)).await;
    let pending = c.ok(&["get", "csr", "alice", "--no-headers"], None).await;
    let columns: Vec<&str> = pending.split_whitespace().collect();
    assert_eq!(
        columns.get(2..).unwrap_or_default(),
        [
            "kubernetes.io/kube-apiserver-client",
            "kubernetes-admin",
            "24h",
            "Pending"
        ],
        "{pending}"
    );
    let out = c.ok(&["certificate", "approve", "alice"], None).await;
    assert!(out.contains("approved"), "{out}");
    let approved = c.ok(&["get", "csr", "alice", "--no-headers"], None).await;
    assert!(approved.trim_end().ends_with("Approved"), "{approved}");
    let reason = c
        .ok(
            &[
                "get",
                "csr",
                "alice",
                "-o",
                "jsonpath={.status.conditions[0].reason}",
            ],
            None,
        )
        .await;
    assert_eq!(reason, "KubectlApprove");
}

/// kubectl creates the two review kinds as on a real cluster: found through discovery, the
/// answer in `status`, nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_token_and_subject_access_reviews() {
    let c = cluster().await;
    let token = c.sim().mint_token("alice", &["team"]);
    let review = format!(
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {token}\n"
    );
    let user = c
        .ok(
            &[
                "create",
                "-f",
                "-",
                "-o",
                "jsonpath={.status.user.username}",
            ],
            Some(&review),
        )
        .await;
    assert_eq!(user, "alice");
    let access = "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  user: alice\n  groups: [team]\n  nonResourceAttributes: {path: /metrics, verb: get}\n";
    let allowed = |out: String| out.trim().to_owned();
    let jsonpath = ["create", "-f", "-", "-o", "jsonpath={.status.allowed}"];
    assert_eq!(allowed(c.ok(&jsonpath, Some(access)).await), "false");
    c.ok(
        &[
            "create",
            "clusterrole",
            "metrics-reader",
            "--verb=get",
            "--non-resource-url=/metrics",
        ],
        None,
    )
    .await;
    c.ok(
        &[
            "create",
            "clusterrolebinding",
            "team-metrics",
            "--clusterrole=metrics-reader",
            "--group=team",
        ],
        None,
    )
    .await;
    assert_eq!(allowed(c.ok(&jsonpath, Some(access)).await), "true");
    let resources = c
        .ok(&["api-resources", "--api-group=authorization.k8s.io"], None)
        .await;
    assert!(resources.contains("subjectaccessreviews"), "{resources}");
}

/// RBAC as kubectl users meet it: a ServiceAccount's token is refused what no binding grants,
/// with the real server's message; `kubectl auth can-i` (a SelfSubjectAccessReview, and with
/// `--list` a SelfSubjectRulesReview, sent as the impersonated account) tells; a RoleBinding
/// changes the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_is_refused_what_rbac_does_not_grant_and_auth_can_i_tells() {
    let c = cluster().await;
    c.ok(&["create", "serviceaccount", "nobody"], None).await;
    let token = c.ok(&["create", "token", "nobody"], None).await;
    let token = token.trim();
    let (ok, _, err) = c
        .kubectl(&["--token", token, "get", "secrets", "-A"], None)
        .await;
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:default:nobody\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"),
        "{err}"
    );
    let as_nobody = "--as=system:serviceaccount:default:nobody";
    let (ok, out, _) = c
        .kubectl(&["auth", "can-i", "list", "secrets", as_nobody], None)
        .await;
    assert_eq!((ok, out.trim()), (false, "no"));
    let listed = c.ok(&["auth", "can-i", "--list", as_nobody], None).await;
    assert!(
        listed.contains("selfsubjectaccessreviews.authorization.k8s.io")
            && listed.contains("[/api/*]")
            && !listed.contains("secrets"),
        "{listed}"
    );
    c.ok(
        &[
            "create",
            "role",
            "secret-reader",
            "--verb=get,list",
            "--resource=secrets",
        ],
        None,
    )
    .await;
    c.ok(
        &[
            "create",
            "rolebinding",
            "nobody-reads-secrets",
            "--role=secret-reader",
            "--serviceaccount=default:nobody",
        ],
        None,
    )
    .await;
    let out = c
        .ok(&["auth", "can-i", "list", "secrets", as_nobody], None)
        .await;
    assert_eq!(out.trim(), "yes");
    let (ok, out, _) = c
        .kubectl(&["auth", "can-i", "list", "secrets", "-A", as_nobody], None)
        .await;
    assert_eq!(
        (ok, out.trim()),
        (false, "no"),
        "a RoleBinding grants in its namespace only"
    );
    // A kubeconfig of the account's own: what the binding grants, and no more.
    let kubeconfig = c.dir.join("nobody.kubeconfig");
    std::fs::write(&kubeconfig, c.sim().kubeconfig_for(token)).unwrap();
    let path = kubeconfig.to_str().unwrap();
    let names = c
        .ok(
            &["--kubeconfig", path, "get", "secrets", "-o", "name"],
            None,
        )
        .await;
    assert_eq!(
        names.trim(),
        "",
        "no secrets in default yet, and the list is allowed"
    );
    let (ok, _, err) = c
        .kubectl(&["--kubeconfig", path, "get", "configmaps"], None)
        .await;
    assert!(
        !ok && err.contains("cannot list resource \"configmaps\""),
        "{err}"
    );
    let whoami = c
        .ok(
            &[
                "--kubeconfig",
                path,
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            None,
        )
        .await;
    assert_eq!(whoami, "system:serviceaccount:default:nobody");
}
