//! The write rules of the store: create, update (and status update), the shared `write`
//! path every change goes through, and delete.

use serde_json::{Map, Value, json};

use super::admit::Surroundings;
use super::{DeleteOptions, EventType, Inner, ObjectKey, Removal, Store};
use crate::apiserver::errors::{ApiError, ApiResult};
use crate::apiserver::kinds::ResourceType;
use crate::apiserver::objects::{
    finalizers, meta_str, metadata_mut, valid_label_name, valid_label_value, valid_qualified_name,
    valid_subdomain,
};
use crate::apiserver::validation::admission;
use crate::apiserver::validation::admission::RequestUser;

impl Store {
    fn validate_metadata(ty: &ResourceType, object: &Value, name: &str) -> ApiResult<()> {
        let mut causes = Vec::new();
        // An APIService is named `version.group` (the core one `v1.`), not a DNS subdomain.
        let api_service = ty.group == "apiregistration.k8s.io" && ty.plural == "apiservices";
        let name_ok = if ty.plural == "namespaces" {
            valid_label_name(name)
        } else if api_service {
            let required = format!(
                "{}.{}",
                object
                    .pointer("/spec/version")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                object
                    .pointer("/spec/group")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
            if name != required {
                causes.push(("metadata.name", format!("Invalid value: {name:?}: must be `spec.version+\".\"+spec.group`: {required:?}")));
            }
            true
        } else if ty.group == "rbac.authorization.k8s.io" {
            // RBAC names are path segments (`system:discovery`), as ValidateRBACName.
            !matches!(name, "" | "." | "..") && !name.contains(['/', '%'])
        } else {
            valid_subdomain(name)
        };
        if !name_ok && ty.plural != "events" {
            causes.push(("metadata.name", format!("Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")));
        }
        if let Some(labels) = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
        {
            for (key, value) in labels {
                if !valid_qualified_name(key) {
                    causes.push(("metadata.labels", format!("Invalid value: {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.'")));
                }
                match value.as_str() {
                    Some(v) if valid_label_value(v) => {}
                    _ => causes.push(("metadata.labels", format!("Invalid value: {value}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"))),
                }
            }
        }
        if let Some(annotations) = object.pointer("/metadata/annotations") {
            match annotations.as_object() {
                Some(map) => {
                    for (key, value) in map {
                        if !valid_qualified_name(key) {
                            causes.push(("metadata.annotations", format!("Invalid value: {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.'")));
                        }
                        if !value.is_string() {
                            causes.push((
                                "metadata.annotations",
                                format!("Invalid value: annotation {key:?} must be a string"),
                            ));
                        }
                    }
                }
                None if annotations.is_null() => {}
                None => causes.push((
                    "metadata.annotations",
                    "Invalid value: must be a map of strings".into(),
                )),
            }
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(&ty.group, &ty.kind, name, &causes))
        }
    }

    fn check_kind(ty: &ResourceType, body: &Value) -> ApiResult<()> {
        let kind = body.get("kind").and_then(Value::as_str);
        if kind.is_some_and(|k| k != ty.kind) {
            return Err(ApiError::bad_request(format!(
                "the kind of the object ({}) does not match the resource ({})",
                kind.unwrap_or_default(),
                ty.kind
            )));
        }
        if let Some(api_version) = body.get("apiVersion").and_then(Value::as_str)
            && !ty.versions.iter().any(|v| ty.api_version(v) == api_version)
            && !(ty.plural == "events" && matches!(api_version, "v1" | "events.k8s.io/v1"))
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                ty.api_version(&ty.versions[0])
            )));
        }
        Ok(())
    }

    /// An object's own namespace against the URL's, as the real server's handlers check it: an
    /// empty or absent one takes the URL's (the caller fills it in), an equal one is fine, only a
    /// different non-empty one is refused. A cluster-scoped resource's URL carries no namespace,
    /// and whatever the object says is dropped later.
    fn check_namespace(ty: &ResourceType, body: &Value, namespace: &str) -> ApiResult<()> {
        match meta_str(body, "namespace") {
            Some(ns) if ty.namespaced && !ns.is_empty() && ns != namespace => {
                Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => Ok(()),
        }
    }

    /// Creates an object, as `caller` (whom NodeRestriction and admission policies judge).
    pub fn create(
        &self,
        caller: &RequestUser,
        ty: &ResourceType,
        version: &str,
        namespace: &str,
        body: Value,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let mut inner = self.lock();
        let created =
            self.create_locked(&mut inner, caller, ty, version, namespace, body, dry_run)?;
        if !dry_run {
            self.settle(&mut inner, ty, namespace);
        }
        Ok(created)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_locked(
        &self,
        inner: &mut Inner,
        caller: &RequestUser,
        ty: &ResourceType,
        version: &str,
        namespace: &str,
        body: Value,
        dry_run: bool,
    ) -> ApiResult<Value> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        Self::check_kind(ty, &body)?;
        let mut object = Self::stored_shape(ty, body);
        Self::check_namespace(ty, &object, namespace)?;
        if ty.namespaced {
            let ns_key = ObjectKey {
                group: String::new(),
                plural: "namespaces".into(),
                namespace: String::new(),
                name: namespace.to_owned(),
            };
            match inner.objects.get(&ns_key) {
                None => return Err(ApiError::not_found("", "namespaces", namespace)),
                Some(ns) if ns.pointer("/metadata/deletionTimestamp").is_some() => {
                    return Err(ApiError {
                        code: 403,
                        reason: "Forbidden",
                        message: format!(
                            "{} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                            crate::apiserver::errors::qualified(&ty.group, &ty.plural)
                        ),
                        details: None,
                        retry_after: None,
                        plain_text: false,
                    });
                }
                Some(_) => {}
            }
        }
        let name = match (meta_str(&object, "name"), meta_str(&object, "generateName")) {
            (Some(name), _) if !name.is_empty() => name.to_owned(),
            (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{}", self.suffix()),
            _ => {
                return Err(ApiError::invalid(
                    &ty.group,
                    &ty.kind,
                    "",
                    &[(
                        "metadata.name",
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
        };
        Self::validate_metadata(ty, &object, &name)?;
        let key = Self::key(ty, namespace, &name);
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&ty.group, &ty.plural, &name));
        }
        let uid = self.uid();
        let now = self.now();
        {
            let metadata = metadata_mut(&mut object);
            metadata.insert("name".into(), json!(name));
            if ty.namespaced {
                metadata.insert("namespace".into(), json!(namespace));
            } else {
                metadata.remove("namespace");
            }
            metadata.insert("uid".into(), json!(uid));
            metadata.insert("creationTimestamp".into(), json!(now));
            metadata.remove("deletionTimestamp");
            metadata.remove("deletionGracePeriodSeconds");
            metadata.remove("resourceVersion");
            if ty.tracks_generation() {
                metadata.insert("generation".into(), json!(1));
            } else {
                metadata.remove("generation");
            }
        }
        let rules = self.rules();
        rules.prepare_for_create(ty, &mut object, &now);
        let around = surroundings(inner, namespace);
        super::admit::admit(caller, ty, version, "", None, &mut object, &around)?;
        rules.validate_create(ty, &object)?;
        let object = Self::present(ty, version, &object);
        let stored = if ty.group == "events.k8s.io" {
            crate::apiserver::objects::event_from_events_v1(&object)
        } else {
            object
        };
        if dry_run {
            return Ok(Self::present(ty, version, &stored));
        }
        let committed = self.commit(inner, key, Some(stored), EventType::Added);
        Ok(Self::present(ty, version, &committed))
    }

    /// The wall clock's time since the epoch.
    pub fn wall_time(&self) -> std::time::Duration {
        self.wall.since_epoch()
    }

    /// Replaces an object (PUT), or its status (PUT …/status), as `caller`.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        caller: &RequestUser,
        ty: &ResourceType,
        version: &str,
        namespace: &str,
        name: &str,
        body: Value,
        status: bool,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let mut inner = self.lock();
        Self::check_kind(ty, &body)?;
        let body = Self::stored_shape(ty, body);
        Self::check_namespace(ty, &body, namespace)?;
        if let Some(given) = meta_str(&body, "name").filter(|n| *n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        let key = Self::key(ty, namespace, name);
        let Some(current) = inner.objects.get(&key).map(|v| Value::clone(v)) else {
            return Err(ApiError::not_found(&ty.group, &ty.plural, name));
        };
        if let Some(expected) = meta_str(&body, "resourceVersion").filter(|rv| !rv.is_empty())
            && Some(expected) != meta_str(&current, "resourceVersion")
        {
            return Err(ApiError::stale(&ty.group, &ty.plural, name));
        }
        let result = self.write(
            &mut inner, caller, ty, version, &key, current, body, status, dry_run,
        )?;
        if !dry_run {
            self.settle(&mut inner, ty, namespace);
        }
        Ok(result)
    }

    /// Applies the rules every write follows, then commits. `proposed` is the whole object the
    /// client wants; `status` says whether it came through the status subresource.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &self,
        inner: &mut Inner,
        caller: &RequestUser,
        ty: &ResourceType,
        version: &str,
        key: &ObjectKey,
        current: Value,
        proposed: Value,
        status: bool,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let mut next = proposed;
        if !next.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        // Server-owned metadata comes from the stored object.
        let current_meta = current.get("metadata").cloned().unwrap_or_default();
        {
            let metadata = metadata_mut(&mut next);
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "name",
                "namespace",
                "generateName",
            ] {
                match current_meta.get(field) {
                    Some(value) => metadata.insert(field.into(), value.clone()),
                    None => metadata.remove(field),
                };
            }
        }
        if ty.status_subresource {
            if status {
                // Through /status only the status changes.
                let new_status = next.get("status").cloned();
                next = current.clone();
                match new_status {
                    Some(s) => next["status"] = s,
                    None => {
                        if let Value::Object(map) = &mut next {
                            map.remove("status");
                        }
                    }
                }
            } else {
                match current.get("status") {
                    Some(s) => next["status"] = s.clone(),
                    None => {
                        if let Value::Object(map) = &mut next {
                            map.remove("status");
                        }
                    }
                }
            }
        }
        let rules = self.rules();
        rules.prepare_for_update(ty, &current, &mut next, status);
        Self::validate_metadata(ty, &next, &key.name)?;
        let around = surroundings(inner, &key.namespace);
        let subresource = if status { "status" } else { "" };
        super::admit::admit(
            caller,
            ty,
            version,
            subresource,
            Some(&current),
            &mut next,
            &around,
        )?;
        let deleting = current.pointer("/metadata/deletionTimestamp").is_some();
        if deleting {
            let before = finalizers(&current);
            if let Some(added) = finalizers(&next).into_iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    &ty.group,
                    &ty.kind,
                    &key.name,
                    &[(
                        "metadata.finalizers",
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [{added:?}]"
                        ),
                    )],
                ));
            }
        }
        if ty.tracks_generation() && spec_changed(&current, &next) {
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            metadata_mut(&mut next).insert("generation".into(), json!(generation + 1));
        }
        rules.validate_update(ty, &current, &next)?;
        let unchanged = same_but_version(&current, &next);
        if dry_run {
            return Ok(Self::present(ty, version, &next));
        }
        if unchanged {
            return Ok(Self::present(ty, version, &current));
        }
        if deleting && finalizers(&next).is_empty() && ty.plural != "pods" {
            let gone = self.commit(inner, key.clone(), Some(next), EventType::Deleted);
            self.settle_removal(
                inner,
                &Removal {
                    ty,
                    key,
                    gone: &gone,
                    orphan: false,
                },
            );
            return Ok(Self::present(ty, version, &gone));
        }
        let committed = self.commit(inner, key.clone(), Some(next), EventType::Modified);
        Ok(Self::present(ty, version, &committed))
    }

    /// Deletes an object, honouring preconditions, finalizers and pod grace periods, as
    /// `caller`.
    pub fn delete(
        &self,
        caller: &RequestUser,
        ty: &ResourceType,
        version: &str,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<Value> {
        let mut inner = self.lock();
        // NodeRestriction: a kubelet deletes only what is its own.
        if let Some(current) = inner.objects.get(&Self::key(ty, namespace, name)) {
            crate::apiserver::validation::restrict_node_delete(
                caller, &ty.group, &ty.plural, "", current, name,
            )?;
        }
        let result = self.delete_locked(&mut inner, ty, version, namespace, name, options)?;
        if !options.dry_run {
            self.settle(&mut inner, ty, namespace);
        }
        Ok(result)
    }

    pub(crate) fn delete_locked(
        &self,
        inner: &mut Inner,
        ty: &ResourceType,
        version: &str,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<Value> {
        let key = Self::key(ty, namespace, name);
        let Some(current) = inner.objects.get(&key).map(|v| Value::clone(v)) else {
            return Err(ApiError::not_found(&ty.group, &ty.plural, name));
        };
        if let Some(uid) = &options.uid
            && Some(uid.as_str()) != meta_str(&current, "uid")
        {
            return Err(ApiError::conflict(
                &ty.group,
                &ty.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&current, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &options.resource_version
            && Some(rv.as_str()) != meta_str(&current, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &ty.group,
                &ty.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&current, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        if options.dry_run {
            return Ok(Self::present(ty, version, &current));
        }
        let grace = self
            .rules()
            .grace_period(ty, &current, options.grace_period_seconds);
        let pending_finalizers = !finalizers(&current).is_empty();
        if pending_finalizers || grace > 0 {
            let mut next = current.clone();
            let already = current.pointer("/metadata/deletionTimestamp").is_some();
            let metadata = metadata_mut(&mut next);
            if !already {
                metadata.insert("deletionTimestamp".into(), json!(self.now()));
            }
            let previous_grace = current
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            let grace = previous_grace.map_or(grace, |p| p.min(grace));
            metadata.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if grace == 0 && !pending_finalizers {
                let gone = self.commit(inner, key.clone(), Some(next), EventType::Deleted);
                self.settle_removal(
                    inner,
                    &Removal {
                        ty,
                        key: &key,
                        gone: &gone,
                        orphan: false,
                    },
                );
                return Ok(Self::present(ty, version, &gone));
            }
            if already && previous_grace == Some(grace) {
                return Ok(Self::present(ty, version, &current));
            }
            let committed = self.commit(inner, key, Some(next), EventType::Modified);
            return Ok(Self::present(ty, version, &committed));
        }
        let gone = self.commit(inner, key.clone(), None, EventType::Deleted);
        let removal = Removal {
            ty,
            key: &key,
            gone: &gone,
            orphan: options.orphan,
        };
        self.settle_removal(inner, &removal);
        Ok(Self::present(ty, version, &gone))
    }
}

/// The admission policies, their bindings and the namespace a write is admitted against
/// (nothing at all while no binding exists, the usual case).
fn surroundings(inner: &Inner, namespace: &str) -> Surroundings {
    let of = |plural: &str| -> Vec<std::sync::Arc<Value>> {
        inner
            .objects_of(admission::GROUP, plural, None)
            .map(|(_, object)| object.clone())
            .collect()
    };
    let bindings = of("validatingadmissionpolicybindings");
    if bindings.is_empty() {
        return Surroundings::default();
    }
    let namespace_key = ObjectKey {
        group: String::new(),
        plural: "namespaces".into(),
        namespace: String::new(),
        name: namespace.to_owned(),
    };
    Surroundings {
        policies: of("validatingadmissionpolicies"),
        bindings,
        namespace: inner.objects.get(&namespace_key).cloned(),
    }
}

/// Whether two versions of an object are the same but for their resourceVersion and
/// managedFields (a write that changes nothing else is no change), compared in place: every
/// kubelet heartbeat is such a write.
fn same_but_version(before: &Value, after: &Value) -> bool {
    const IGNORED: [&str; 2] = ["resourceVersion", "managedFields"];
    let (Value::Object(before), Value::Object(after)) = (before, after) else {
        return before == after;
    };
    let same_except = |a: &Map<String, Value>, b: &Map<String, Value>, ignored: &[&str]| {
        let kept = |map: &Map<String, Value>| {
            map.iter()
                .filter(|(key, _)| !ignored.contains(&key.as_str()))
                .count()
        };
        kept(a) == kept(b)
            && a.iter()
                .filter(|(key, _)| !ignored.contains(&key.as_str()))
                .all(|(key, value)| b.get(key) == Some(value))
    };
    match (before.get("metadata"), after.get("metadata")) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            same_except(a, b, &IGNORED) && same_except(before, after, &["metadata"])
        }
        (a, b) => a == b && same_except(before, after, &["metadata"]),
    }
}

/// Whether anything but metadata and status changed.
fn spec_changed(before: &Value, after: &Value) -> bool {
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Value::Object(map) = &mut object {
            map.remove("metadata");
            map.remove("status");
            map.remove("apiVersion");
            map.remove("kind");
        }
        object
    };
    strip(before) != strip(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_resource_version_and_managed_fields_are_no_change() {
        let object = |rv: &str, label: &str, extra: Option<&str>| {
            let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "m", "resourceVersion": rv, "labels": {"a": label},
                    "managedFields": [{"manager": rv}]},
                "data": {"k": "v"}});
            if let Some(extra) = extra {
                object["data"][extra] = json!("x");
            }
            object
        };
        assert!(same_but_version(
            &object("1", "x", None),
            &object("2", "x", None)
        ));
        assert!(!same_but_version(
            &object("1", "x", None),
            &object("2", "y", None)
        ));
        assert!(!same_but_version(
            &object("1", "x", None),
            &object("1", "x", Some("n"))
        ));
        let mut bare = object("1", "x", None);
        bare.as_object_mut().unwrap().remove("metadata");
        assert!(!same_but_version(&object("1", "x", None), &bare));
        assert!(same_but_version(&bare, &bare.clone()));
        let mut more = object("1", "x", None);
        more["metadata"]["annotations"] = json!({"b": "c"});
        assert!(!same_but_version(&object("1", "x", None), &more));
        assert!(!same_but_version(&more, &object("1", "x", None)));
    }
}
