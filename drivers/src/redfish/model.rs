//! The few Redfish resources the driver reads, parsed leniently: every field is optional and
//! enum-like values stay strings, so vendor extensions never break a power operation.

use serde::Deserialize;

/// A link: `{"@odata.id": "/redfish/v1/..."}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Link {
    #[serde(rename = "@odata.id")]
    pub id: String,
}

/// `/redfish/v1/`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct ServiceRoot {
    pub name: Option<String>,
    pub redfish_version: Option<String>,
    pub vendor: Option<String>,
    pub product: Option<String>,
    pub systems: Option<Link>,
    pub session_service: Option<Link>,
    pub links: Option<RootLinks>,
}

/// `Links` of the service root.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct RootLinks {
    pub sessions: Option<Link>,
}

/// Any resource collection.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct Collection {
    pub members: Vec<Link>,
}

/// A `ComputerSystem`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct ComputerSystem {
    pub power_state: Option<String>,
    pub actions: Option<SystemActions>,
}

impl ComputerSystem {
    /// Whether the system advertises `#ComputerSystem.Reset` at all.
    pub(crate) fn has_reset_action(&self) -> bool {
        self.actions
            .as_ref()
            .and_then(|a| a.reset.as_ref())
            .is_some()
    }
}

/// `Actions` of a system.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct SystemActions {
    #[serde(rename = "#ComputerSystem.Reset")]
    pub reset: Option<ResetAction>,
}

/// `#ComputerSystem.Reset`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ResetAction {
    pub target: Option<String>,
    #[serde(rename = "ResetType@Redfish.AllowableValues")]
    pub allowable_values: Option<Vec<String>>,
    #[serde(rename = "@Redfish.ActionInfo")]
    pub action_info: Option<String>,
}

/// An `ActionInfo` resource.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct ActionInfo {
    pub parameters: Vec<ActionParameter>,
}

/// One parameter of an `ActionInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct ActionParameter {
    pub name: Option<String>,
    pub allowable_values: Option<Vec<String>>,
}

/// A `Task`, as returned by a task monitor.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct Task {
    pub task_state: Option<String>,
    pub messages: Vec<Message>,
}

/// A Redfish `Message`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct Message {
    pub message_id: Option<String>,
    pub message: Option<String>,
}

/// The Redfish error body: `{"error": {...}}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

/// The inside of an error body.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ErrorDetail {
    pub code: Option<String>,
    pub message: Option<String>,
    #[serde(rename = "@Message.ExtendedInfo")]
    pub extended_info: Vec<Message>,
}

impl ErrorBody {
    /// The most specific human-readable text of an error body.
    pub(crate) fn describe(&self) -> Option<String> {
        let extended = self
            .error
            .extended_info
            .iter()
            .filter_map(|m| m.message.as_deref().or(m.message_id.as_deref()))
            .collect::<Vec<_>>()
            .join("; ");
        let main = self.error.message.as_deref().or(self.error.code.as_deref());
        match (main, extended.is_empty()) {
            (Some(main), true) => Some(main.to_owned()),
            (Some(main), false) => Some(format!("{main} ({extended})")),
            (None, false) => Some(extended),
            (None, true) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_with_vendor_values_and_missing_fields_parses() {
        let system: ComputerSystem = serde_json::from_str(
            r##"{"Id":"1","PowerState":"Paused","Oem":{"x":1},"Actions":{"#ComputerSystem.Reset":{"target":"/r"}}}"##,
        )
        .unwrap();
        assert_eq!(system.power_state.as_deref(), Some("Paused"));
        let reset = system.actions.unwrap().reset.unwrap();
        assert_eq!(reset.target.as_deref(), Some("/r"));
        assert!(reset.allowable_values.is_none());
        let empty: ComputerSystem = serde_json::from_str("{}").unwrap();
        assert!(empty.power_state.is_none());
    }

    #[test]
    fn error_bodies_describe_their_messages() {
        let body: ErrorBody = serde_json::from_str(
            r#"{"error":{"code":"Base.1.18.GeneralError","message":"A general error has occurred.","@Message.ExtendedInfo":[{"MessageId":"Base.1.18.ActionParameterValueNotInList","Message":"Bogus is not allowed"}]}}"#,
        )
        .unwrap();
        assert_eq!(
            body.describe().unwrap(),
            "A general error has occurred. (Bogus is not allowed)"
        );
    }
}
