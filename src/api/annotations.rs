//! Annotation and taint names shared with MachineHealthCheck, the BareMetal Operator and the
//! Kubernetes node lifecycle; exact spellings matter, so they live in one place.

/// Set on a Machine by MachineHealthCheck to ask an external controller for remediation.
pub const EXTERNAL_REMEDIATION: &str = "host.metal3.io/external-remediation";

/// Set on a Machine while its host is fenced for remediation.
pub const POWERED_OFF_FOR_REMEDIATION: &str = "remediation.metal3.io/powered-off-for-remediation";

/// Prefix of the BareMetalHost reboot API annotations; the key follows the slash.
pub const REBOOT_PREFIX: &str = "reboot.metal3.io/";

/// Default key of our power-off request in the reboot API.
pub const DEFAULT_REBOOT_KEY: &str = "capbm-requested-power-off";

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

/// The role label of an OpenShift Machine (`master`, `worker`, …).
pub const MACHINE_ROLE: &str = "machine.openshift.io/cluster-api-machine-role";

/// On a Node: the drift coordinator asked the MCO for a re-apply that reboots it (the value
/// names the DriftRemediation). The machine remediation holds its start while it is set —
/// a planned reboot is not a hung host. It stays until the MCO is done with the node, also
/// after the remediation failed or was aborted, and goes at once when the node is handed
/// over (the drift guard, `drift::guard`).
pub const PLANNED_REBOOT: &str = "baremend.io/planned-reboot";

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
