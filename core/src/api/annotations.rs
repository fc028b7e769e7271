//! Annotation and taint names shared with MachineHealthCheck, the BareMetal Operator and the
//! Kubernetes node lifecycle; exact spellings matter, so they live in one place.

/// Set on a Machine by MachineHealthCheck to ask an external controller for remediation.
pub const EXTERNAL_REMEDIATION: &str = "host.metal3.io/external-remediation";

/// Set on a Machine while its host is fenced for remediation.
pub const POWERED_OFF_FOR_REMEDIATION: &str = "remediation.metal3.io/powered-off-for-remediation";

/// Prefix of the BareMetalHost reboot API annotations; the key follows the slash.
pub const REBOOT_PREFIX: &str = "reboot.metal3.io/";

/// Default key of our power-off request in the reboot API. It is the key the legacy
/// actuator (OpenShift's cluster-api-provider-baremetal) uses: a host it holds off is then
/// seen as held by the same request, which no Remediation of ours made (the
/// `ForeignRemediation` gate holds such a start).
pub const DEFAULT_REBOOT_KEY: &str = "capbm-requested-power-off";

/// The legacy actuator's power-off request key (`reboot.metal3.io/<this>`).
pub const LEGACY_REBOOT_KEY: &str = "capbm-requested-power-off";

/// On a Machine, by the legacy actuator: the Node's labels, saved as a JSON object of
/// strings before it deleted the Node; it adds the ones the new Node lacks and removes it.
pub const LEGACY_NODE_LABELS_BACKUP: &str = "remediation.metal3.io/node-labels-backup";

/// On a Machine, by the legacy actuator: the Node's annotations, as
/// [`LEGACY_NODE_LABELS_BACKUP`].
pub const LEGACY_NODE_ANNOTATIONS_BACKUP: &str = "remediation.metal3.io/node-annotations-backup";

/// On a Machine, by the legacy actuator: when it gives up waiting for the Node after powering
/// the host on (RFC 3339). Set from power-on until the remediation ends: its in-flight mark.
pub const LEGACY_POWER_ON_TIMEOUT: &str = "remediation.metal3.io/power-on-will-timeout-at";

/// A Node finalizer of older legacy actuators (removed by them on every Machine update); a
/// Node that keeps it cannot be deleted once that actuator is gone.
pub const LEGACY_NODE_FINALIZER: &str = "metal3.io/capbm";

/// On a medik8s remediation request (a FenceAgentsRemediation, or a NodeHealthCheck's
/// request to baremend): the Node it is for. The NodeHealthCheck always sets it, and names the
/// request `<node>-<random>` (`generateName`) when the template carries
/// `remediation.medik8s.io/multiple-templates-support`.
pub const MEDIK8S_NODE_NAME: &str = "remediation.medik8s.io/node-name";

/// On a medik8s remediation request, by the NodeHealthCheck: its escalation timeout passed
/// (an RFC 3339 time; remediators read the key only) and the next remediator takes over.
pub const NHC_TIMED_OUT: &str = "remediation.medik8s.io/nhc-timed-out";

/// The template a NodeHealthCheck made a request from (medik8s node-healthcheck-operator
/// `internal/controller/resources/manager.go`, `generateRemediationCR`).
pub const TEMPLATE_NAME: &str = "remediation.medik8s.io/template-name";

/// On a Machine, names its BareMetalHost as `namespace/name`.
pub const MACHINE_HOST: &str = "metal3.io/BareMetalHost";

/// On a BareMetalHost: the BareMetal Operator leaves the host alone.
pub const BMH_DETACHED: &str = "baremetalhost.metal3.io/detached";

/// On a detached BareMetalHost fenced directly: the CA certificates its BMC's TLS certificate
/// is verified with, as `ConfigMap/<name>[/<key>]` or `Secret/<name>[/<key>]` in the
/// Machine's namespace (the key defaults to `ca.crt`); the `HostBmc` field `caBundleRef` for
/// hosts baremend knows through a `HostBmc`.
pub const BMC_CA_BUNDLE: &str = "baremend.io/bmc-ca-bundle";

/// On a BareMetalHost: reconciliation is paused.
pub const BMH_PAUSED: &str = "baremetalhost.metal3.io/paused";

/// The taint key that lets pods of a shut-down Node be force-deleted (Kubernetes ≥ 1.28).
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// The value of our out-of-service taint.
pub const OUT_OF_SERVICE_VALUE: &str = "nodeshutdown";

/// On a Node, names its Machine as `namespace/name` (set by the machine-api nodelink
/// controller).
pub const NODE_MACHINE: &str = "machine.openshift.io/machine";

/// On a Node, by the Cluster API machine controller: the name of its Machine (the namespace
/// is in [`CAPI_NODE_CLUSTER_NAMESPACE`]).
pub const CAPI_NODE_MACHINE: &str = "cluster.x-k8s.io/machine";

/// On a Node, by the Cluster API machine controller: the namespace of its cluster (and
/// Machine).
pub const CAPI_NODE_CLUSTER_NAMESPACE: &str = "cluster.x-k8s.io/cluster-namespace";

/// The label of a Cluster API control-plane Machine (set, with an empty value, by the
/// control-plane provider).
pub const CAPI_CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";

/// The role label of an OpenShift Machine (`master`, `worker`, …).
pub const MACHINE_ROLE: &str = "machine.openshift.io/cluster-api-machine-role";

/// On a Node: the drift coordinator asked the MCO for a re-apply that reboots it (the value
/// names the DriftRemediation). The machine remediation holds its start while it is set —
/// a planned reboot is not a hung host. It stays until the MCO is done with the node, also
/// after the remediation failed or was aborted, and goes at once when the node is handed
/// over (the drift guard, `drift::guard`).
pub const PLANNED_REBOOT: &str = "baremend.io/planned-reboot";

/// On a Node or a MachineConfigPool: with the value `disabled`, the drift coordinator acts
/// on no drift there (the node's, or every node's of the pool); the drift is still detected
/// and its DriftRemediation held with reason `DriftRemediationDisabled`, naming where the
/// annotation was found.
pub const DRIFT_REMEDIATION_ANNOTATION: &str = "baremend.io/drift-remediation";

/// The value of [`DRIFT_REMEDIATION_ANNOTATION`] that disables drift remediation.
pub const DRIFT_REMEDIATION_DISABLED: &str = "disabled";

/// On a finished `Failed` Remediation or DriftRemediation: the operator has seen it (value
/// `true`). Retention keeps every unacknowledged Failed object beyond `keepFinished`; an
/// acknowledged one counts like any other finished object.
pub const ACKNOWLEDGED: &str = "baremend.io/acknowledged";

/// On a `Failed` Remediation (the Machine's latest) or DriftRemediation (the Node's latest):
/// try again (value `true`). A new attempt starts through the normal start path, every gate
/// included, if the trigger (the Machine's external-remediation annotation, the Node's drift)
/// is still there. A retried object counts as acknowledged.
pub const RETRY: &str = "baremend.io/retry";

/// Set by baremend on a retried `Failed` object: the name of the attempt that retries it.
pub const RETRIED_BY: &str = "baremend.io/retried-by";
