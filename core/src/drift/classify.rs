//! Is a Node's configuration drifted? The MCO has no field for it: drift is a Node whose
//! Machine Config Daemon reports `state=Degraded` while it sits on the config it should be on
//! (`currentConfig == desiredConfig`, images too), with a reason written by the on-disk
//! validation. Everything else that is Degraded — an update that failed, a drain error, a
//! kernel argument or OS image mismatch, `Unreconcilable` — is not ours to fix.
//!
//! The reason texts recognised (the MCD writes them with Go's `%q` quoting, optionally after
//! `unexpected on-disk state validating against <rendered config or image>: ` and before
//! `; possible root cause: …`):
//! - `content mismatch for file "<path>"`
//! - `mode mismatch for file: "<path>"; expected: …; received: …`
//! - `could not stat file "<path>": …` (a deleted file)
//! - `unit "<name>" expected enabled=<bool>, but systemd reports "<state>"`

use std::collections::BTreeMap;
use std::fmt;

pub use crate::api::DriftKind;
use crate::api::mco;

/// Drift as the Machine Config Daemon reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// What differs.
    pub kind: DriftKind,
    /// The file path, or the unit name for [`DriftKind::UnitEnablement`].
    pub target: String,
    /// The rendered config (or image) the node was validated against, when the reason says.
    pub against: Option<String>,
}

/// Why a Degraded node is not drift (and is left to whoever handles it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotDrift {
    /// `state=Unreconcilable`: the update cannot be applied at all.
    Unreconcilable,
    /// The node is not on its desired config: an update failed, not the disk.
    UpdateFailed,
    /// Degraded for a reason that is not an on-disk file or unit mismatch (a drain error,
    /// kernel arguments, the OS image, …).
    OtherReason,
}

impl fmt::Display for NotDrift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotDrift::Unreconcilable => "the node is Unreconcilable",
            NotDrift::UpdateFailed => "an update failed (current config is not the desired one)",
            NotDrift::OtherReason => "degraded for a reason that is not on-disk drift",
        })
    }
}

/// A Node's configuration state, as its MCO annotations tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigState {
    /// Not managed by the MCO (no state or config annotations).
    Unmanaged,
    /// `Done` on its desired config.
    Done,
    /// An update is under way (`Working`, or current ≠ desired while not degraded).
    Updating,
    /// Drifted from the rendered config.
    Drifted(Drift),
    /// Degraded, but not by drift.
    Degraded(NotDrift),
}

/// Classifies a Node from its annotations.
pub fn classify(annotations: &BTreeMap<String, String>) -> ConfigState {
    let get = |key: &str| annotations.get(key).map(String::as_str);
    let (Some(state), Some(current), Some(desired)) = (
        get(mco::STATE),
        get(mco::CURRENT_CONFIG),
        get(mco::DESIRED_CONFIG),
    ) else {
        return ConfigState::Unmanaged;
    };
    let on_target = current == desired && get(mco::CURRENT_IMAGE) == get(mco::DESIRED_IMAGE);
    match state {
        "Unreconcilable" => ConfigState::Degraded(NotDrift::Unreconcilable),
        "Degraded" if !on_target => ConfigState::Degraded(NotDrift::UpdateFailed),
        "Degraded" => match parse_reason(get(mco::REASON).unwrap_or_default()) {
            Some(drift) => ConfigState::Drifted(drift),
            None => ConfigState::Degraded(NotDrift::OtherReason),
        },
        "Done" if on_target => ConfigState::Done,
        _ => ConfigState::Updating,
    }
}

/// The prefix the MCD puts before a validation error after a retry, a preflight or a boot.
const VALIDATING_AGAINST: &str = "unexpected on-disk state validating against ";

/// Reads a drift reason; `None` when the text is not one of the drift forms.
pub fn parse_reason(reason: &str) -> Option<Drift> {
    let mut text = reason.trim();
    let mut against = None;
    if let Some(rest) = text.strip_prefix(VALIDATING_AGAINST) {
        let (name, rest) = rest.split_once(": ")?;
        if name.is_empty() || name.contains(char::is_whitespace) {
            return None;
        }
        against = Some(name.to_string());
        text = rest;
    }
    let forms: [(&str, DriftKind); 4] = [
        ("content mismatch for file ", DriftKind::Content),
        ("mode mismatch for file: ", DriftKind::Mode),
        ("could not stat file ", DriftKind::Missing),
        ("unit ", DriftKind::UnitEnablement),
    ];
    for (lead, kind) in forms {
        let Some(rest) = text.strip_prefix(lead) else {
            continue;
        };
        let (target, rest) = go_unquote(rest)?;
        let fits = match kind {
            DriftKind::Content => rest.is_empty() || rest.starts_with("; possible root cause"),
            DriftKind::Mode => rest.starts_with("; expected: "),
            DriftKind::Missing => rest.starts_with(':'),
            DriftKind::UnitEnablement => rest.starts_with(" expected enabled="),
        };
        if !fits || target.is_empty() {
            return None;
        }
        return Some(Drift {
            kind,
            target,
            against,
        });
    }
    None
}

/// Reads a Go `%q` string at the start of `text`: the unquoted value and what follows.
fn go_unquote(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[at + 1..])),
            '\\' => {
                let (_, escape) = chars.next()?;
                match escape {
                    '"' | '\\' | '\'' => out.push(escape),
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    'x' | 'u' | 'U' => {
                        let digits = match escape {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let mut value = 0u32;
                        for _ in 0..digits {
                            let (_, d) = chars.next()?;
                            value = value * 16 + d.to_digit(16)?;
                        }
                        // `\xNN` is a byte; paths are UTF-8 in practice, so a lone byte is
                        // kept as the character of that value rather than guessed at.
                        out.push(char::from_u32(value)?);
                    }
                    _ => return None,
                }
            }
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(state: &str, current: &str, desired: &str, reason: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (mco::STATE.to_string(), state.to_string()),
            (mco::CURRENT_CONFIG.to_string(), current.to_string()),
            (mco::DESIRED_CONFIG.to_string(), desired.to_string()),
            (mco::REASON.to_string(), reason.to_string()),
        ])
    }

    const R: &str = "rendered-worker-0a1b2c3d4e5f60718293a4b5c6d7e8f9";

    #[test]
    fn a_content_mismatch_on_the_current_config_is_content_drift() {
        let state = classify(&node(
            "Degraded",
            R,
            R,
            r#"content mismatch for file "/etc/foo""#,
        ));
        assert_eq!(
            state,
            ConfigState::Drifted(Drift {
                kind: DriftKind::Content,
                target: "/etc/foo".into(),
                against: None
            })
        );
    }

    #[test]
    fn the_prefixed_reason_names_the_rendered_config_or_image() {
        let reason = format!(
            r#"unexpected on-disk state validating against {R}: content mismatch for file "/etc/foo""#
        );
        let drift = parse_reason(&reason).unwrap();
        assert_eq!(drift.against.as_deref(), Some(R));
        assert_eq!(drift.target, "/etc/foo");
        let layered = "unexpected on-disk state validating against quay.io/org/os@sha256:0123abcd: mode mismatch for file: \"/etc/x\"; expected: -rw-r--r--/420/0644; received: -rwxrwxrwx/511/0777";
        let drift = parse_reason(layered).unwrap();
        assert_eq!(drift.kind, DriftKind::Mode);
        assert_eq!(
            drift.against.as_deref(),
            Some("quay.io/org/os@sha256:0123abcd")
        );
    }

    #[test]
    fn mode_missing_file_and_unit_enablement_are_recognised() {
        let mode = parse_reason(
            r#"mode mismatch for file: "/etc/foo"; expected: -rw-r--r--/420/0644; received: -rwxrwxrwx/511/0777"#,
        )
        .unwrap();
        assert_eq!(
            (mode.kind, mode.target.as_str()),
            (DriftKind::Mode, "/etc/foo")
        );
        let gone = parse_reason(
            r#"could not stat file "/etc/foo": lstat /etc/foo: no such file or directory"#,
        )
        .unwrap();
        assert_eq!(
            (gone.kind, gone.target.as_str()),
            (DriftKind::Missing, "/etc/foo")
        );
        let unit = parse_reason(
            r#"unit "kubelet-auto.service" expected enabled=true, but systemd reports "disabled""#,
        )
        .unwrap();
        assert_eq!(
            (unit.kind, unit.target.as_str()),
            (DriftKind::UnitEnablement, "kubelet-auto.service")
        );
    }

    #[test]
    fn a_root_cause_suffix_and_go_escapes_are_read() {
        let drift = parse_reason(
            r#"content mismatch for file "/etc/a \"b\"\\c\tx\u00e9"; possible root cause: ostree-finalize failed"#,
        )
        .unwrap();
        assert_eq!(drift.target, "/etc/a \"b\"\\c\txé");
    }

    #[test]
    fn other_degraded_reasons_and_states_are_not_drift() {
        for reason in [
            r#"missing expected kernel arguments: [nosmt]"#,
            r#"expected target osImageURL "quay.io/a", have "quay.io/b""#,
            "failed to drain node: error when evicting pod \"router\"",
            "state validation: invalid unit masked setting",
            r#"content mismatch for file "/etc/unterminated"#,
            r#"content mismatch for file "/etc/foo" and more"#,
            r#"unexpected on-disk state validating against : content mismatch for file "/e""#,
            r#"content mismatch for file """#,
            "",
        ] {
            assert_eq!(parse_reason(reason), None, "{reason}");
            assert_eq!(
                classify(&node("Degraded", R, R, reason)),
                ConfigState::Degraded(NotDrift::OtherReason),
                "{reason}"
            );
        }
        let drift_text = r#"content mismatch for file "/etc/foo""#;
        assert_eq!(
            classify(&node("Degraded", R, "rendered-worker-new", drift_text)),
            ConfigState::Degraded(NotDrift::UpdateFailed)
        );
        assert_eq!(
            classify(&node("Unreconcilable", R, R, drift_text)),
            ConfigState::Degraded(NotDrift::Unreconcilable)
        );
        let mut layered = node("Degraded", R, R, drift_text);
        layered.insert(mco::DESIRED_IMAGE.into(), "quay.io/os@sha256:1".into());
        assert_eq!(
            classify(&layered),
            ConfigState::Degraded(NotDrift::UpdateFailed)
        );
    }

    #[test]
    fn done_working_and_unmanaged_nodes_are_told_apart() {
        assert_eq!(classify(&node("Done", R, R, "")), ConfigState::Done);
        assert_eq!(classify(&node("Working", R, R, "")), ConfigState::Updating);
        assert_eq!(
            classify(&node("Done", R, "rendered-worker-new", "")),
            ConfigState::Updating
        );
        assert_eq!(classify(&BTreeMap::new()), ConfigState::Unmanaged);
    }
}
