//! The retention policy shared by `RemediationPolicy` (per Machine) and `DriftPolicy` (per
//! Node): how many finished objects are kept. Its own struct, so that each policy carries it
//! as one field.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How many finished objects are kept.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    /// Finished objects kept per Machine (Remediations) or per Node (DriftRemediations), the
    /// newest first; older ones are deleted. A `Failed` object not yet acknowledged
    /// (`baremend.io/acknowledged: "true"` or retried) is kept on top of these.
    #[serde(default = "default_keep_finished")]
    #[schemars(range(min = 1, max = 100))]
    pub keep_finished: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_finished: default_keep_finished(),
        }
    }
}

fn default_keep_finished() -> u32 {
    5
}
