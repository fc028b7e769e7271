//! Vendor modes: the simulator serves a real BMC's published Redfish payloads (service root,
//! Systems, the System, Managers, ActionInfo) with the host's power state, and answers resets
//! the way that BMC does.
//!
//! # Expected flow
//! [`VendorPayloads::locate`] finds the payloads the test install step fetched
//! (`scripts/fetch-vendor-payloads.sh`); [`Profile::load`] reads one vendor's files and builds
//! the documents, keyed by path without a trailing slash; `dispatch` serves them.
//!
//! # Guarantees
//! Every document served is the vendor's own JSON, except where the packages publish none
//! (listed per vendor in docs/engineering/fidelity.md): those are built here and marked as such. Only
//! `PowerState` of the System is rewritten, from the host.
//!
//! # Caveats
//! Paths the payloads link to but do not include answer 404. `/redfish`, the SessionService and
//! the AccountService are the generic simulator's (only `Links.Sessions` follows the vendor).

mod dispatch;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde_json::{Value, json};

pub(crate) use self::dispatch::router;
use crate::{Error, Result};

/// Which BMC the simulator plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// The simulator's own Redfish tree (no vendor payloads).
    Generic,
    /// Dell iDRAC 9 (samples of sushy-oem-idrac and libredfish).
    Idrac,
    /// HPE iLO 5 (samples of proliantutils).
    Ilo5,
    /// Lenovo XClarity Controller (libredfish's test data).
    Xcc,
    /// NVIDIA BlueField BMC (libredfish's test data; OpenBMC's bmcweb underneath).
    BlueField,
}

impl Vendor {
    /// Every vendor mode, [`Vendor::Generic`] first.
    pub const ALL: [Vendor; 5] = [
        Vendor::Generic,
        Vendor::Idrac,
        Vendor::Ilo5,
        Vendor::Xcc,
        Vendor::BlueField,
    ];

    /// The vendor modes that serve real payloads.
    pub const REAL: [Vendor; 4] = [Vendor::Idrac, Vendor::Ilo5, Vendor::Xcc, Vendor::BlueField];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Generic => "generic",
            Vendor::Idrac => "idrac",
            Vendor::Ilo5 => "ilo5",
            Vendor::Xcc => "xcc",
            Vendor::BlueField => "bluefield",
        }
    }

    /// How this BMC answers a reset.
    pub(crate) fn reset_style(self) -> ResetStyle {
        match self {
            Vendor::Generic | Vendor::Xcc => ResetStyle::Standard,
            Vendor::Idrac => ResetStyle::Idrac,
            Vendor::Ilo5 => ResetStyle::Ilo,
            Vendor::BlueField => ResetStyle::Bmcweb,
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Vendor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Vendor::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Vendor::ALL.iter().map(|v| v.name()).collect();
                Error::Config(format!(
                    "unknown vendor {s:?} (one of {})",
                    names.join(", ")
                ))
            })
    }
}

/// How a BMC answers `ComputerSystem.Reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResetStyle {
    /// `204`, also when the host already is in the asked state.
    Standard,
    /// `204`; `409 Conflict` when the host already is in the asked state.
    Idrac,
    /// `200` with an `@Message.ExtendedInfo` `Success` body; `400`
    /// `InvalidOperationForSystemState` when the host already is in the asked state.
    Ilo,
    /// `200` with a `Base.Success` message (bmcweb's answer), also when already there.
    Bmcweb,
}

/// The package folders of the fetched payloads (see `scripts/fetch-vendor-payloads.sh`).
const SUSHY_OEM_IDRAC: &str = "sushy-oem-idrac";
const PROLIANTUTILS: &str = "proliantutils";
const LIBREDFISH: &str = "libredfish";

/// The folder the test install step fetched the vendor payloads into.
#[derive(Debug, Clone)]
pub struct VendorPayloads {
    dir: PathBuf,
}

impl VendorPayloads {
    /// The environment variable that names the folder (`scripts/test.sh` sets it).
    pub const ENV: &'static str = "BAREMEND_VENDOR_PAYLOADS";

    /// The command that fetches the payloads.
    pub const FETCH_COMMAND: &'static str = "bash scripts/fetch-vendor-payloads.sh";

    /// The folder named by [`Self::ENV`], else `target/vendor-payloads` of this workspace;
    /// an error that says how to fetch them when they are missing.
    pub fn locate() -> Result<Self> {
        let dir = std::env::var_os(Self::ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/vendor-payloads")
            });
        Self::at(dir)
    }

    /// The payloads in `dir`; an error that says how to fetch them when they are missing.
    pub fn at(dir: PathBuf) -> Result<Self> {
        let complete = [SUSHY_OEM_IDRAC, PROLIANTUTILS, LIBREDFISH]
            .iter()
            .all(|package| dir.join(package).join("SOURCE").is_file());
        if !complete {
            return Err(Error::Config(format!(
                "the vendor Redfish payloads are missing from {}: run `{}` (scripts/test.sh \
                 runs it in its install step) or set {} to where they are",
                dir.display(),
                Self::FETCH_COMMAND,
                Self::ENV
            )));
        }
        Ok(VendorPayloads { dir })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every JSON file fetched, sorted: (package folder, file name).
    pub fn files(&self) -> Result<Vec<(String, PathBuf)>> {
        let mut files = Vec::new();
        for package in [SUSHY_OEM_IDRAC, PROLIANTUTILS, LIBREDFISH] {
            let entries = std::fs::read_dir(self.dir.join(package))
                .map_err(|e| Error::Config(format!("cannot list {package}: {e}")))?;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "json") {
                    files.push((package.to_owned(), path));
                }
            }
        }
        files.sort();
        Ok(files)
    }

    fn json(&self, package: &str, file: &str) -> Result<Value> {
        let path = self.dir.join(package).join(file);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Config(format!("{} is not JSON: {e}", path.display())))
    }
}

/// `path` without its trailing slash (`/` stays `/`): iLO links with and without one.
pub(crate) fn normalize(path: &str) -> &str {
    match path.strip_suffix('/') {
        Some(trimmed) if !trimmed.is_empty() => trimmed,
        _ => path,
    }
}

fn odata_id(document: &Value) -> Option<&str> {
    document.get("@odata.id").and_then(Value::as_str)
}

/// One vendor's documents and what the reset route needs to know.
#[derive(Debug, Clone)]
pub(crate) struct Profile {
    pub vendor: Vendor,
    documents: HashMap<String, Value>,
    /// The System that has the host (normalized path).
    pub system_path: String,
    /// Its `Id`, which is also the host's id.
    pub system_id: String,
    /// The Reset action target (normalized).
    pub reset_target: String,
    /// Where sessions are created (normalized `Links.Sessions`).
    pub sessions_path: String,
    /// The reset types the vendor advertises (annotation or ActionInfo).
    pub reset_types: Vec<String>,
}

/// The reset types OpenBMC's bmcweb lists in a system's ResetActionInfo (BlueField BMCs run
/// bmcweb; libredfish's BlueField System links an ActionInfo and has no annotation).
const BMCWEB_RESET_TYPES: &[&str] = &[
    "On",
    "ForceOff",
    "ForceOn",
    "ForceRestart",
    "GracefulRestart",
    "GracefulShutdown",
    "PowerCycle",
    "Nmi",
];

/// The published files a vendor mode is built from.
struct Sources {
    root: Option<Value>,
    systems: Option<Value>,
    system: Value,
    /// Managers and other linked documents, served at their `@odata.id`.
    others: Vec<Value>,
    /// Reset types to serve in a built ActionInfo when the payloads include none.
    action_info_values: Option<Vec<String>>,
    /// Add a second System without a Reset action, listed first.
    second_system: bool,
}

impl Profile {
    /// Reads one vendor's payloads and builds its documents.
    pub(crate) fn load(vendor: Vendor, payloads: &VendorPayloads) -> Result<Profile> {
        let sources = match vendor {
            Vendor::Generic => {
                return Err(Error::Config("the generic mode serves no payloads".into()));
            }
            Vendor::Idrac => Sources {
                root: Some(payloads.json(SUSHY_OEM_IDRAC, "root.json")?),
                systems: Some(payloads.json(LIBREDFISH, "systems.json")?),
                system: payloads.json(SUSHY_OEM_IDRAC, "system.json")?,
                others: vec![
                    payloads.json(SUSHY_OEM_IDRAC, "manager_collection.json")?,
                    payloads.json(SUSHY_OEM_IDRAC, "manager.json")?,
                ],
                action_info_values: None,
                second_system: false,
            },
            Vendor::Ilo5 => {
                let systems = payloads.json(PROLIANTUTILS, "system.json")?;
                let system = systems.get("default").cloned().ok_or_else(|| {
                    Error::Config("proliantutils system.json has no \"default\" System".into())
                })?;
                Sources {
                    root: Some(payloads.json(PROLIANTUTILS, "root.json")?),
                    systems: None,
                    system,
                    // Not its AccountService: the generic account service answers there.
                    others: vec![payloads.json(PROLIANTUTILS, "manager.json")?],
                    action_info_values: None,
                    second_system: false,
                }
            }
            Vendor::Xcc => Sources {
                root: None,
                systems: None,
                system: payloads.json(LIBREDFISH, "system_lenovo.json")?,
                others: vec![payloads.json(LIBREDFISH, "manager_lenovo.json")?],
                action_info_values: None,
                second_system: false,
            },
            Vendor::BlueField => Sources {
                root: None,
                systems: None,
                system: payloads.json(LIBREDFISH, "system_bluefield_boot_valid.json")?,
                others: Vec::new(),
                action_info_values: Some(
                    BMCWEB_RESET_TYPES.iter().map(|v| (*v).to_owned()).collect(),
                ),
                second_system: true,
            },
        };
        Self::assemble(vendor, sources)
    }

    fn assemble(vendor: Vendor, sources: Sources) -> Result<Profile> {
        let system = sources.system;
        let system_path = odata_id(&system)
            .ok_or_else(|| Error::Config(format!("{vendor}: the System has no @odata.id")))?
            .to_owned();
        let system_id = system
            .get("Id")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Config(format!("{vendor}: the System has no Id")))?
            .to_owned();
        let reset = system
            .pointer("/Actions/#ComputerSystem.Reset")
            .cloned()
            .unwrap_or(Value::Null);
        let reset_target = reset
            .get("target")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Config(format!("{vendor}: the System has no Reset target")))?
            .to_owned();
        let annotated: Option<Vec<String>> = reset
            .get("ResetType@Redfish.AllowableValues")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let info_path = reset
            .get("@Redfish.ActionInfo")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let reset_types = sources
            .action_info_values
            .or_else(|| annotated.clone())
            .unwrap_or_default();

        let mut documents: Vec<Value> = sources.others;
        let second = sources.second_system.then(|| second_system(&system));
        let mut members: Vec<&str> = second.iter().filter_map(odata_id).collect();
        members.push(&system_path);
        let systems = sources
            .systems
            .unwrap_or_else(|| systems_collection(&system_path, &members));
        let root = sources
            .root
            .unwrap_or_else(|| built_root(vendor, &systems, &documents));
        let sessions_path = root
            .pointer("/Links/Sessions/@odata.id")
            .and_then(Value::as_str)
            .unwrap_or("/redfish/v1/SessionService/Sessions")
            .to_owned();
        if let Some(info_path) = &info_path {
            documents.push(action_info(info_path, &reset_types));
        }
        documents.extend(second);
        documents.extend([root, systems, system]);
        let documents = documents
            .into_iter()
            .filter_map(|d| Some((normalize(odata_id(&d)?).to_owned(), d)))
            .collect();
        Ok(Profile {
            vendor,
            documents,
            system_path: normalize(&system_path).to_owned(),
            system_id,
            reset_target: normalize(&reset_target).to_owned(),
            sessions_path: normalize(&sessions_path).to_owned(),
            reset_types,
        })
    }

    /// The document at a normalized path.
    pub(crate) fn document(&self, path: &str) -> Option<&Value> {
        self.documents.get(path)
    }
}

/// A System collection (the packages publish one for Dell only).
fn systems_collection(system_path: &str, members: &[&str]) -> Value {
    let root = if system_path.ends_with('/') {
        "/redfish/v1/Systems/"
    } else {
        "/redfish/v1/Systems"
    };
    json!({
        "@odata.id": root,
        "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
        "Name": "Computer System Collection",
        "Members": members.iter().map(|m| json!({"@odata.id": m})).collect::<Vec<_>>(),
        "Members@odata.count": members.len(),
    })
}

/// A service root for vendors whose root no package publishes (XCC, BlueField).
fn built_root(vendor: Vendor, systems: &Value, others: &[Value]) -> Value {
    let managers = others
        .iter()
        .filter_map(odata_id)
        .find(|id| id.starts_with("/redfish/v1/Managers/"))
        .map(|_| json!({"@odata.id": "/redfish/v1/Managers"}));
    let mut root = json!({
        "@odata.id": "/redfish/v1/",
        "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
        "Id": "RootService",
        "Name": format!("Root Service ({vendor} mode, built by the simulator)"),
        "RedfishVersion": "1.6.0",
        "Systems": {"@odata.id": odata_id(systems).unwrap_or("/redfish/v1/Systems")},
        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
        "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
    });
    if let Some(managers) = managers {
        root["Managers"] = managers;
    }
    root
}

/// An ActionInfo for the Reset action (the packages publish none).
fn action_info(path: &str, values: &[String]) -> Value {
    json!({
        "@odata.id": path,
        "@odata.type": "#ActionInfo.v1_1_2.ActionInfo",
        "Id": "ResetActionInfo",
        "Name": "Reset Action Info",
        "Parameters": [{
            "Name": "ResetType",
            "Required": true,
            "DataType": "String",
            "AllowableValues": values,
        }],
    })
}

/// A copy of the System with another id and no `Actions`: a second System the driver cannot
/// reset, listed before the real one.
fn second_system(system: &Value) -> Value {
    let mut second = system.clone();
    if let Some(object) = second.as_object_mut() {
        object.remove("Actions");
        object.insert("@odata.id".into(), json!("/redfish/v1/Systems/Second"));
        object.insert("Id".into(), json!("Second"));
        object.insert("Name".into(), json!("Second system (no Reset action)"));
    }
    second
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_lose_one_trailing_slash_only() {
        assert_eq!(normalize("/redfish/v1/Systems/1/"), "/redfish/v1/Systems/1");
        assert_eq!(normalize("/redfish/v1/Systems/1"), "/redfish/v1/Systems/1");
        assert_eq!(normalize("/"), "/");
    }

    #[test]
    fn missing_payloads_are_an_error_that_says_how_to_fetch_them() {
        let error = VendorPayloads::at(PathBuf::from("/nonexistent/vendor-payloads"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(VendorPayloads::FETCH_COMMAND) && error.contains(VendorPayloads::ENV),
            "{error}"
        );
    }

    #[test]
    fn vendor_names_round_trip() {
        for vendor in Vendor::ALL {
            assert_eq!(vendor.name().parse::<Vendor>().unwrap(), vendor);
        }
        assert!("supermicro".parse::<Vendor>().is_err());
    }

    #[test]
    fn a_built_profile_keys_documents_without_trailing_slashes() {
        let system = json!({
            "@odata.id": "/redfish/v1/Systems/1/",
            "Id": "1",
            "Actions": {"#ComputerSystem.Reset": {
                "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset/",
                "@Redfish.ActionInfo": "/redfish/v1/Systems/1/ResetActionInfo"
            }}
        });
        let profile = Profile::assemble(
            Vendor::BlueField,
            Sources {
                root: None,
                systems: None,
                system,
                others: Vec::new(),
                action_info_values: Some(vec!["On".into()]),
                second_system: true,
            },
        )
        .unwrap();
        assert_eq!(profile.system_path, "/redfish/v1/Systems/1");
        assert_eq!(
            profile.reset_target,
            "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
        );
        assert_eq!(profile.reset_types, ["On"]);
        let members = &profile.document("/redfish/v1/Systems").unwrap()["Members"];
        assert_eq!(members[0]["@odata.id"], "/redfish/v1/Systems/Second");
        assert_eq!(members[1]["@odata.id"], "/redfish/v1/Systems/1/");
        assert!(
            profile
                .document("/redfish/v1/Systems/Second")
                .unwrap()
                .get("Actions")
                .is_none()
        );
        assert!(
            profile
                .document("/redfish/v1/Systems/1/ResetActionInfo")
                .is_some()
        );
    }
}
