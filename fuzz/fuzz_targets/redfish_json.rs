//! Every parser of a Redfish answer (service root, collections, systems, reset actions,
//! ActionInfo, tasks, error bodies) and the reset decision, fed with arbitrary bytes.
#![no_main]

use baremend_drivers::redfish::exercise_parsers;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| exercise_parsers(data));
