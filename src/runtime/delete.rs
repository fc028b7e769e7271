//! Deleting an object exactly: only the one with the UID that was read, and a deletion that
//! finds it gone, or replaced by a new object of the same name, is done.

use kube::api::{Api, DeleteParams, Preconditions};

use crate::leader::Writes;
use crate::{Error, Result};

/// What a deletion found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// This call deleted it (or began its deletion).
    Deleted,
    /// It was gone already, or replaced by a new object of the same name: done, by someone
    /// else (another pass, another writer).
    AlreadyGone,
}

/// Deletes the object `name` if it still has `uid`; gone already, or replaced, is done.
pub async fn delete_exactly<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<String>,
    op: &'static str,
) -> Result<Deletion>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(Deletion::Deleted),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Deletion::AlreadyGone),
        // A UID mismatch: the old object is gone already; the one there now is new.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Deletion::AlreadyGone),
        Err(error) => Err(Error::kube(op)(error)),
    }
}

/// Deletes each object exactly (its UID as a precondition), leave to write checked right before
/// each delete; stops at the first failure. Returns the names this call deleted (not those
/// found gone: two passes over the same objects count each once) and the outcome.
pub async fn delete_each<'a, K>(
    api: &Api<K>,
    objects: impl IntoIterator<Item = &'a K>,
    writes: &Writes,
    op: &'static str,
) -> (Vec<String>, Result<()>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + 'a,
{
    let mut deleted = Vec::new();
    for object in objects {
        let name = object.meta().name.clone().unwrap_or_default();
        let outcome = match writes.check() {
            Ok(()) => delete_exactly(api, &name, object.meta().uid.clone(), op).await,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(Deletion::Deleted) => deleted.push(name),
            Ok(Deletion::AlreadyGone) => {}
            Err(error) => return (deleted, Err(error)),
        }
    }
    (deleted, Ok(()))
}
