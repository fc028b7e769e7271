//! Who is calling and what they may do: authentication of bearer tokens (and impersonation)
//! into a [`UserInfo`] (ServiceAccount tokens are issued and identified by [`tokens`]), and
//! the RBAC authorizer that decides every request from the stored
//! Roles, ClusterRoles and bindings.
//!
//! Expected flow: `routes::dispatch` authenticates ([`authn`]) → maps the request to
//! attributes ([`request_info`]) → asks the [`Authorizer`] (the superuser group first, then
//! the compiled [`rbac::RuleSet`]) → 403 with the real message on a denial; writes of RBAC
//! objects then pass the escalation checks ([`escalation`]). The [`controllers`] keep
//! aggregated ClusterRoles and legacy ServiceAccount token Secrets filled in.
//!
//! Guarantees: the rule set is compiled again only after an RBAC object changed (a commit
//! hook counts RBAC changes, under the store's lock, so a decision never uses rules older
//! than the last committed change); the store's lock is held only to copy references to the
//! RBAC objects, never while compiling or deciding.
//!
//! Caveats: see the submodules.

pub(crate) mod authn;
mod authorizer;
pub(crate) mod bootstrap;
pub(crate) mod controllers;
pub(crate) mod escalation;
pub mod node;
pub mod rbac;
pub mod request_info;
pub(crate) mod tokens;
pub mod user;

pub use self::authorizer::Authorizer;
pub use self::user::{ANONYMOUS, AUTHENTICATED, RBAC_GROUP, SUPERUSERS, UNAUTHENTICATED, UserInfo};
