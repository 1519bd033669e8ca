#![no_main]
//! Relay frames: decoding any bytes never panics and never reads past a frame; a decoded frame
//! encodes to bytes that decode to the same frame; a target's check of any INCOMING never
//! panics and never accepts one without the job key.
use ferry_wire::relay::{verify_incoming, RelayFrame, ReplayGuard};
use ferry_wire::JobKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((frame, used))) = RelayFrame::decode(data) {
        assert!(used <= data.len());
        let bytes = frame.to_bytes();
        assert_eq!(bytes.len(), used);
        assert_eq!(RelayFrame::decode(&bytes), Ok(Some((frame.clone(), used))));
        if let RelayFrame::Incoming(incoming) = frame {
            let mut seen = ReplayGuard::default();
            let key = JobKey([0x5a; 32]);
            assert!(
                verify_incoming(&key, incoming.job, incoming.target, &incoming, &mut seen).is_err()
            );
        }
    }
});
