//! What a start's last gates judge on, read from the API servers when the start is decided
//! (never from a cache): the values only, shared by the gates that read them
//! (`start_gates`) and judge them (`foreign`...).

use std::sync::Arc;

use crate::api::Remediation;
use crate::api::slim;
use crate::remediation::decide::gates::ForeignObject;

/// The Machine's trigger as read now.
pub(in crate::remediation) struct FreshTrigger {
    /// The Machine's annotations (None: it is gone, or the subject is a Node, which has none).
    pub(in crate::remediation) annotations: Option<std::collections::BTreeMap<String, String>>,
    /// Whether it carries a trigger: the annotation, or a request that exists.
    pub(in crate::remediation) confirmed: bool,
}

/// What a start's last gates judge on, read from the API servers at once when the start is
/// decided, never from a cache.
pub(in crate::remediation) struct FreshEvidence {
    /// Every Remediation, read after the start lock's mark.
    pub(in crate::remediation) remediations: Vec<Arc<Remediation>>,
    /// The Machine's trigger and annotations.
    pub(in crate::remediation) trigger: FreshTrigger,
    /// The ClusterVersion's `Progressing` message while it is True (None: not, or no
    /// ClusterVersion served).
    pub(in crate::remediation) cluster_progressing: Option<String>,
    /// The recorded host: None when none is recorded, `Some(None)` when it is not found.
    pub(in crate::remediation) host: Option<Option<slim::BareMetalHost>>,
    /// The other projects' remediation objects of the kinds the API server serves.
    pub(in crate::remediation) foreign: Vec<ForeignObject>,
}
