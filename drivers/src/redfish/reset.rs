//! Which Redfish `ResetType` to send: a pure decision over what the BMC advertises and the
//! state it just reported.

use crate::power::PowerOffMode;
use crate::state::PowerState;

/// What the caller wants the host to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PowerIntent {
    Off(PowerOffMode),
    On,
}

impl PowerIntent {
    /// Reset types that fulfil the intent, best first.
    fn preferences(self) -> &'static [&'static str] {
        match self {
            PowerIntent::Off(PowerOffMode::Forced) => &["ForceOff", "PushPowerButton"],
            PowerIntent::Off(PowerOffMode::Graceful) => &["GracefulShutdown"],
            PowerIntent::On => &["On", "ForceOn", "PushPowerButton"],
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            PowerIntent::Off(PowerOffMode::Forced) => "forced power off",
            PowerIntent::Off(PowerOffMode::Graceful) => "graceful power off",
            PowerIntent::On => "power on",
        }
    }
}

/// The outcome of the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResetDecision {
    /// Send this reset type.
    Send(&'static str),
    /// The host already is (or is getting) where the intent wants it: send nothing.
    AlreadyThere,
    /// Nothing the BMC advertises fulfils the intent.
    NotAdvertised,
    /// The only way is `PushPowerButton`, a toggle, and the host is in a state where a press
    /// would not do what is wanted (transition or unknown). Try again once it settles.
    ButtonUnsafeNow,
}

/// Decides the reset type.
///
/// `advertised` is the BMC's `ResetType@Redfish.AllowableValues` (or its ActionInfo). When the
/// BMC advertises nothing at all, the standard value is sent: the Reset action itself is
/// advertised and the schema defines the values. A value outside a list the BMC did advertise
/// is never sent.
pub(crate) fn decide_reset(
    intent: PowerIntent,
    current: &PowerState,
    advertised: Option<&[String]>,
) -> ResetDecision {
    let already = match (intent, current) {
        (PowerIntent::On, PowerState::On | PowerState::PoweringOn) => true,
        (PowerIntent::Off(_), PowerState::Off) => true,
        // A graceful shutdown already under way needs no second request; a forced one does
        // (the shutdown may hang).
        (PowerIntent::Off(PowerOffMode::Graceful), PowerState::PoweringOff) => true,
        _ => false,
    };
    if already {
        return ResetDecision::AlreadyThere;
    }
    let chosen = match advertised {
        None => intent.preferences().first().copied(),
        Some(values) => intent
            .preferences()
            .iter()
            .copied()
            .find(|wanted| values.iter().any(|v| v == wanted)),
    };
    match chosen {
        None => ResetDecision::NotAdvertised,
        Some("PushPowerButton") => {
            let toggles_the_right_way = matches!(
                (intent, current),
                (PowerIntent::On, PowerState::Off) | (PowerIntent::Off(_), PowerState::On)
            );
            if toggles_the_right_way {
                ResetDecision::Send("PushPowerButton")
            } else {
                ResetDecision::ButtonUnsafeNow
            }
        }
        Some(value) => ResetDecision::Send(value),
    }
}

/// Whether a refused reset may only mean "the host already is in that state": iDRAC answers
/// `409 Conflict`, iLO `400` with `InvalidOperationForSystemState`. The caller decides with a
/// fresh read, never from the status alone.
pub(crate) fn refusal_may_mean_already_there(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 400 | 409)
}

/// Of several systems (path, has a Reset action), the only one that can be reset.
pub(crate) fn only_resettable(systems: &[(String, bool)]) -> Option<&str> {
    let mut resettable = systems.iter().filter(|(_, reset)| *reset);
    match (resettable.next(), resettable.next()) {
        (Some((path, _)), None) => Some(path),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    const FORCED: PowerIntent = PowerIntent::Off(PowerOffMode::Forced);
    const GRACEFUL: PowerIntent = PowerIntent::Off(PowerOffMode::Graceful);

    #[test]
    fn preferred_values_are_chosen_from_the_advertised_list() {
        let full = list(&[
            "On",
            "ForceOff",
            "GracefulShutdown",
            "ForceOn",
            "PushPowerButton",
        ]);
        assert_eq!(
            decide_reset(FORCED, &PowerState::On, Some(&full)),
            ResetDecision::Send("ForceOff")
        );
        assert_eq!(
            decide_reset(GRACEFUL, &PowerState::On, Some(&full)),
            ResetDecision::Send("GracefulShutdown")
        );
        assert_eq!(
            decide_reset(PowerIntent::On, &PowerState::Off, Some(&full)),
            ResetDecision::Send("On")
        );
        let force_on = list(&["ForceOn", "ForceOff"]);
        assert_eq!(
            decide_reset(PowerIntent::On, &PowerState::Off, Some(&force_on)),
            ResetDecision::Send("ForceOn")
        );
    }

    #[test]
    fn push_power_button_is_used_only_when_it_toggles_the_right_way() {
        let button = list(&["PushPowerButton"]);
        assert_eq!(
            decide_reset(FORCED, &PowerState::On, Some(&button)),
            ResetDecision::Send("PushPowerButton")
        );
        assert_eq!(
            decide_reset(PowerIntent::On, &PowerState::Off, Some(&button)),
            ResetDecision::Send("PushPowerButton")
        );
        for state in [
            PowerState::PoweringOn,
            PowerState::PoweringOff,
            PowerState::Unknown("Paused".into()),
        ] {
            let intent = if state == PowerState::PoweringOn {
                FORCED
            } else {
                PowerIntent::On
            };
            assert_eq!(
                decide_reset(intent, &state, Some(&button)),
                ResetDecision::ButtonUnsafeNow,
                "{state}"
            );
        }
        assert_eq!(
            decide_reset(GRACEFUL, &PowerState::On, Some(&button)),
            ResetDecision::NotAdvertised
        );
    }

    #[test]
    fn a_value_outside_the_advertised_list_is_never_chosen() {
        let only_on = list(&["On", "GracefulRestart"]);
        assert_eq!(
            decide_reset(FORCED, &PowerState::On, Some(&only_on)),
            ResetDecision::NotAdvertised
        );
        assert_eq!(
            decide_reset(PowerIntent::On, &PowerState::Off, Some(&[])),
            ResetDecision::NotAdvertised
        );
    }

    #[test]
    fn without_any_list_the_standard_value_is_sent() {
        assert_eq!(
            decide_reset(FORCED, &PowerState::On, None),
            ResetDecision::Send("ForceOff")
        );
        assert_eq!(
            decide_reset(PowerIntent::On, &PowerState::Unknown(String::new()), None),
            ResetDecision::Send("On")
        );
    }

    #[test]
    fn only_a_single_resettable_system_is_picked() {
        let systems = |flags: &[bool]| -> Vec<(String, bool)> {
            flags
                .iter()
                .enumerate()
                .map(|(n, f)| (format!("/redfish/v1/Systems/{n}"), *f))
                .collect()
        };
        assert_eq!(
            only_resettable(&systems(&[false, true])),
            Some("/redfish/v1/Systems/1")
        );
        assert_eq!(only_resettable(&systems(&[true, true])), None);
        assert_eq!(only_resettable(&systems(&[false, false])), None);
        assert_eq!(only_resettable(&[]), None);
    }

    #[test]
    fn only_400_and_409_refusals_are_checked_by_a_fresh_read() {
        for (code, checked) in [
            (400, true),
            (409, true),
            (401, false),
            (404, false),
            (500, false),
        ] {
            let status = reqwest::StatusCode::from_u16(code).unwrap();
            assert_eq!(refusal_may_mean_already_there(status), checked, "{code}");
        }
    }

    #[test]
    fn nothing_is_sent_when_the_host_is_already_there() {
        let full = list(&["On", "ForceOff", "GracefulShutdown"]);
        assert_eq!(
            decide_reset(FORCED, &PowerState::Off, Some(&full)),
            ResetDecision::AlreadyThere
        );
        assert_eq!(
            decide_reset(GRACEFUL, &PowerState::PoweringOff, Some(&full)),
            ResetDecision::AlreadyThere
        );
        assert_eq!(
            decide_reset(FORCED, &PowerState::PoweringOff, Some(&full)),
            ResetDecision::Send("ForceOff")
        );
        assert_eq!(
            decide_reset(PowerIntent::On, &PowerState::PoweringOn, Some(&full)),
            ResetDecision::AlreadyThere
        );
    }
}
