//! The `$metadata` and OData service documents: they list exactly the schemas this service
//! serves, so that validators resolve every `@odata.type`.

/// (schema file, namespaces) for every type served.
const REFERENCES: &[(&str, &[&str])] = &[
    ("ServiceRoot_v1", &["ServiceRoot", "ServiceRoot.v1_15_0"]),
    ("ComputerSystemCollection_v1", &["ComputerSystemCollection"]),
    (
        "ComputerSystem_v1",
        &["ComputerSystem", "ComputerSystem.v1_20_0"],
    ),
    ("ActionInfo_v1", &["ActionInfo", "ActionInfo.v1_3_0"]),
    (
        "SessionService_v1",
        &["SessionService", "SessionService.v1_1_8"],
    ),
    ("SessionCollection_v1", &["SessionCollection"]),
    ("Session_v1", &["Session", "Session.v1_6_0"]),
    (
        "AccountService_v1",
        &["AccountService", "AccountService.v1_13_0"],
    ),
    ("ManagerAccountCollection_v1", &["ManagerAccountCollection"]),
    (
        "ManagerAccount_v1",
        &["ManagerAccount", "ManagerAccount.v1_10_0"],
    ),
    ("RoleCollection_v1", &["RoleCollection"]),
    ("Role_v1", &["Role", "Role.v1_3_1"]),
    ("Task_v1", &["Task", "Task.v1_7_0"]),
    ("Message_v1", &["Message", "Message.v1_1_2"]),
    ("Resource_v1", &["Resource", "Resource.v1_0_0"]),
    ("RedfishExtensions_v1", &["RedfishExtensions.v1_0_0"]),
];

/// The `$metadata` document.
pub(crate) fn metadata_xml() -> String {
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <edmx:Edmx xmlns:edmx=\"http://docs.oasis-open.org/odata/ns/edmx\" Version=\"4.0\">\n",
    );
    for (file, namespaces) in REFERENCES {
        xml.push_str(&format!(
            "  <edmx:Reference Uri=\"http://redfish.dmtf.org/schemas/v1/{file}.xml\">\n"
        ));
        for namespace in *namespaces {
            if *namespace == "RedfishExtensions.v1_0_0" {
                xml.push_str(&format!(
                    "    <edmx:Include Namespace=\"{namespace}\" Alias=\"Redfish\"/>\n"
                ));
            } else {
                xml.push_str(&format!("    <edmx:Include Namespace=\"{namespace}\"/>\n"));
            }
        }
        xml.push_str("  </edmx:Reference>\n");
    }
    xml.push_str(
        "  <edmx:DataServices>\n\
         \x20   <Schema xmlns=\"http://docs.oasis-open.org/odata/ns/edm\" Namespace=\"Service\">\n\
         \x20     <EntityContainer Name=\"Service\" Extends=\"ServiceRoot.v1_15_0.ServiceContainer\"/>\n\
         \x20   </Schema>\n\
         \x20 </edmx:DataServices>\n\
         </edmx:Edmx>\n",
    );
    xml
}

/// The OData service document.
pub(crate) fn odata_document() -> serde_json::Value {
    let entry =
        |name: &str, url: &str| serde_json::json!({"name": name, "kind": "Singleton", "url": url});
    serde_json::json!({
        "@odata.context": "/redfish/v1/$metadata",
        "value": [
            entry("Service", "/redfish/v1/"),
            entry("Systems", "/redfish/v1/Systems"),
            entry("SessionService", "/redfish/v1/SessionService"),
            entry("AccountService", "/redfish/v1/AccountService"),
            entry("Sessions", "/redfish/v1/SessionService/Sessions"),
        ]
    })
}
