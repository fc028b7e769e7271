//! Every IPMI decoder that sees bytes from the network, fed with arbitrary input. The first
//! byte picks the cipher suite and the key of the session used to open sealed packets.
#![no_main]

use baremend_drivers::ipmi::exercise_decoders;
use baremend_drivers::ipmi::wire::crypto::CipherSuite;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    let suite = if selector & 1 == 0 {
        CipherSuite::Suite3
    } else {
        CipherSuite::Suite17
    };
    exercise_decoders(bytes, suite, selector);
});
