//! Renders the CustomResourceDefinitions; `baremend crds` prints them and `crds/` holds them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{
    DriftPolicy, DriftRemediation, HostBmc, MachineRemediation, MachineRemediationTemplate,
    NodeRemediation, NodeRemediationTemplate, Remediation, RemediationPolicy,
};

/// Every CRD of baremend, with the file name it has under `crds/`.
pub fn all_crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("remediations.yaml", Remediation::crd()),
        ("remediationpolicies.yaml", RemediationPolicy::crd()),
        ("hostbmcs.yaml", HostBmc::crd()),
        ("driftremediations.yaml", DriftRemediation::crd()),
        ("driftpolicies.yaml", DriftPolicy::crd()),
        ("machineremediations.yaml", MachineRemediation::crd()),
        (
            "machineremediationtemplates.yaml",
            MachineRemediationTemplate::crd(),
        ),
        ("noderemediations.yaml", NodeRemediation::crd()),
        (
            "noderemediationtemplates.yaml",
            NodeRemediationTemplate::crd(),
        ),
    ]
}

/// One CRD as YAML.
pub fn render_crds(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(crd)
}

/// `baremend crds`: print every CRD as one YAML stream, or write one file each.
#[derive(clap::Args, Debug)]
pub struct CrdsArgs {
    /// Write `<DIR>/<plural>.yaml` per CRD instead of printing (the repo's `crds/` is made so).
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// Runs `baremend crds`.
pub fn run(args: CrdsArgs) -> crate::Result<()> {
    let mut stream = String::new();
    for (file, crd) in all_crds() {
        let yaml = render_crds(&crd).map_err(|error| crate::LocalError::Render {
            what: file,
            reason: error.to_string(),
        })?;
        match &args.out {
            Some(dir) => {
                let path = dir.join(file);
                std::fs::write(&path, yaml).map_err(|source| crate::LocalError::WriteFile {
                    what: "CRD",
                    path,
                    source,
                })?;
            }
            None => {
                stream.push_str("---\n");
                stream.push_str(&yaml);
            }
        }
    }
    if args.out.is_none() {
        print!("{stream}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_crds_are_the_ones_the_types_generate() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
        for (file, crd) in all_crds() {
            let want = render_crds(&crd).unwrap();
            let have = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            assert!(
                have == want,
                "crds/{file} is stale or missing: regenerate with \
                 `cargo run --bin baremend -- crds --out crds`"
            );
        }
    }

    #[test]
    fn every_crd_has_a_status_subresource_where_it_has_status_and_is_v1alpha1() {
        for (file, crd) in all_crds() {
            let version = &crd.spec.versions[0];
            assert_eq!(version.name, "v1alpha1", "{file}");
            assert!(version.served && version.storage, "{file}");
            let has_status = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| s.properties.as_ref())
                .is_some_and(|p| p.contains_key("status"));
            let has_subresource = version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some());
            assert_eq!(has_status, has_subresource, "{file}");
        }
    }
}
