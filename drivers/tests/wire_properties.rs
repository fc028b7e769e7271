//! Properties of the IPMI wire decoders: no input from the network makes them panic, and
//! everything the encoders write decodes back to what was encoded.

use baremend_drivers::ipmi::exercise_decoders;
use baremend_drivers::ipmi::wire::crypto::{CipherSuite, SessionCrypto};
use baremend_drivers::ipmi::wire::rakp::Rakp1;
use baremend_drivers::ipmi::wire::{self, Frame, payload};
use proptest::prelude::*;

fn any_suite() -> impl Strategy<Value = CipherSuite> {
    prop_oneof![Just(CipherSuite::Suite3), Just(CipherSuite::Suite17)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn no_input_makes_a_decoder_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), suite in any_suite()) {
        exercise_decoders(&bytes, suite, 7);
    }

    #[test]
    fn rmcp_shaped_input_makes_no_decoder_panic(
        class in prop_oneof![Just(0x06u8), Just(0x07u8)],
        auth in prop_oneof![Just(0x00u8), Just(0x06u8)],
        tail in proptest::collection::vec(any::<u8>(), 0..120),
        suite in any_suite(),
    ) {
        let mut bytes = vec![0x06, 0x00, 0xFF, class, auth];
        bytes.extend_from_slice(&tail);
        exercise_decoders(&bytes, suite, 9);
    }

    #[test]
    fn sealed_packets_round_trip(
        suite in any_suite(),
        sik in proptest::collection::vec(any::<u8>(), 20..33),
        session_id in any::<u32>(),
        sequence in any::<u32>(),
        body in proptest::collection::vec(any::<u8>(), 0..100),
        iv in any::<[u8; 16]>(),
    ) {
        let crypto = SessionCrypto::derive(suite, &sik);
        let packet = wire::encode_v20_sealed(&crypto, payload::IPMI, session_id, sequence, &body, iv);
        let Ok(Frame::V20(frame)) = wire::decode(&packet) else {
            return Err(TestCaseError::fail("not a v2.0 frame"));
        };
        prop_assert_eq!(frame.session_id, session_id);
        prop_assert_eq!(frame.sequence, sequence);
        prop_assert_eq!(frame.open(&crypto).unwrap(), body);
    }

    #[test]
    fn lan_messages_round_trip(netfn in (0u8..32).prop_map(|n| n * 2), cmd in any::<u8>(), seq in 0u8..64, data in proptest::collection::vec(any::<u8>(), 0..40), code in any::<u8>()) {
        let request = wire::decode_request(&wire::encode_request(netfn, cmd, seq, &data)).unwrap();
        prop_assert_eq!((request.netfn, request.cmd, request.rq_seq), (netfn, cmd, seq));
        prop_assert_eq!(&request.data, &data);
        let response = wire::decode_response(&wire::encode_response(&request, code, &data)).unwrap();
        prop_assert_eq!((response.netfn, response.cmd, response.rq_seq, response.completion_code), (netfn | 1, cmd, seq, code));
        prop_assert_eq!(response.data, data);
    }

    #[test]
    fn rakp1_round_trips(tag in any::<u8>(), id in any::<u32>(), random in any::<[u8; 16]>(), role in any::<u8>(), name in proptest::collection::vec(any::<u8>(), 0..17)) {
        let message = Rakp1 { message_tag: tag, bmc_session_id: id, console_random: random, role, username: name };
        prop_assert_eq!(Rakp1::decode(&message.encode()).unwrap(), message);
    }
}
