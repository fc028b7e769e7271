//! The user a request is from, as the authenticators tell, and the well-known names.

use std::collections::BTreeMap;

/// The API group of the RBAC kinds.
/// The audience of every token this server issues, as a real cluster's default.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc";
/// The user the kubeconfig's token belongs to.
pub const ADMIN_USER: &str = "kubernetes-admin";
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The group the superuser authorizer allows everything.
pub const SUPERUSERS: &str = "system:masters";
/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of anonymous requests.
pub const ANONYMOUS: &str = "system:anonymous";

/// Who sent a request, as the authenticators tell (`user.Info` of the real server).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// The user's name (`system:serviceaccount:<ns>:<name>` for a ServiceAccount).
    pub username: String,
    /// A unique id ("" when the authenticator has none).
    pub uid: String,
    /// The groups (`system:authenticated` included for an authenticated user).
    pub groups: Vec<String>,
    /// Extra attributes (the pod a bound token names, the token's id…).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user in `groups` (nothing added).
    pub fn new(username: &str, groups: &[&str]) -> Self {
        UserInfo {
            username: username.to_owned(),
            uid: String::new(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: BTreeMap::new(),
        }
    }

    /// A ServiceAccount, with the groups its tokens authenticate it in.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        UserInfo {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.to_owned(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.into(),
            ],
            extra: BTreeMap::new(),
        }
    }

    /// Whether the user is in the superuser group.
    pub fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == SUPERUSERS)
    }

    /// The JSON form (`status.user` of a TokenReview, `userInfo` of a SelfSubjectReview).
    pub fn to_json(&self) -> serde_json::Value {
        let mut user = serde_json::json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            user["uid"] = self.uid.clone().into();
        }
        if !self.extra.is_empty() {
            user["extra"] = serde_json::json!(self.extra);
        }
        user
    }
}
