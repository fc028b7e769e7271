//! Reading one object that may not be there.
//!
//! kube's `Api::get_opt` takes only a `NotFound` Status for absence. A real kube-apiserver
//! answers a path whose group, version or kind it does not serve (an OpenShift kind on plain
//! Kubernetes, Cluster API's before it is installed) from its mux, with a plain-text
//! `404 page not found` that carries no reason: `get_opt` fails on it. What is not served
//! does not exist either; [`GetPresent::get_present`] says so.

use std::fmt::Debug;
use std::future::Future;

use kube::Api;
use serde::de::DeserializeOwned;

/// `get` that answers None for an object that does not exist or whose kind is not served.
pub trait GetPresent<K> {
    /// The object `name`; None when it does not exist or its kind is not served.
    fn get_present(&self, name: &str) -> impl Future<Output = kube::Result<Option<K>>> + Send;
}

impl<K> GetPresent<K> for Api<K>
where
    K: Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    async fn get_present(&self, name: &str) -> kube::Result<Option<K>> {
        match self.get(name).await {
            Ok(object) => Ok(Some(object)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(error) => Err(error),
        }
    }
}
