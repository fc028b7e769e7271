//! Status conditions, shared by every object baremend writes: set one, keeping its
//! transition time when its status does not change (as `meta.SetStatusCondition` does).

use std::time::SystemTime;

use super::clock::rfc3339;
use crate::api::{Condition, ConditionType};

/// Sets a condition in a list, keeping its transition time when the status does not change.
pub fn upsert_condition(
    conditions: &mut Vec<Condition>,
    type_: ConditionType,
    truth: bool,
    reason: &str,
    message: &str,
    now: SystemTime,
) {
    let value = if truth { "True" } else { "False" };
    let message: String = message.chars().take(1024).collect();
    match conditions.iter_mut().find(|c| c.type_ == type_.as_str()) {
        Some(condition) => {
            if condition.status != value {
                condition.last_transition_time = rfc3339(now);
            }
            condition.status = value.to_string();
            condition.reason = reason.to_string();
            condition.message = message;
        }
        None => conditions.push(Condition {
            type_: type_.as_str().to_string(),
            status: value.to_string(),
            reason: reason.to_string(),
            message,
            last_transition_time: rfc3339(now),
        }),
    }
}

/// The gate a start waits for: the reason of the `Held` condition when it is True.
pub fn held_by(conditions: &[Condition]) -> Option<&str> {
    conditions
        .iter()
        .find(|c| c.is_true(ConditionType::Held))
        .map(|c| c.reason.as_str())
}
