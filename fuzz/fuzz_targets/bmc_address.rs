//! The BMC address parser (`redfish://`, `redfish+http(s)://`, `ipmi://`… as a BareMetalHost
//! or HostBmc gives them) on arbitrary text; a parsed address must print and reparse the same.
#![no_main]

use baremend_drivers::BmcAddress;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(address) = BmcAddress::parse(text) {
        let printed = address.to_string();
        let again = BmcAddress::parse(&printed).expect("a printed address parses");
        assert_eq!(again, address, "{text:?} printed as {printed:?}");
        let _ = address.endpoint();
    }
});
