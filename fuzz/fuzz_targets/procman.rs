#![no_main]
//! PMI-1 lines and PMI-2 frames from a foreign process manager: cutting and parsing never
//! panic, a message never claims more bytes than it was given, and a PMI-2 put frame that
//! encodes parses back to the same key and value.
use ferry_wire::procman::{take_pmi1_line, take_pmi2_frame, Pmi2Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((_, used))) = take_pmi1_line(data) {
        assert!(used <= data.len());
    }
    if let Ok(Some((_, used))) = take_pmi2_frame(data) {
        assert!(used <= data.len());
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let (key, value) = text.split_once('\0').unwrap_or(("k", text));
        if key.is_empty() || key.contains(['=', ';']) {
            return;
        }
        let put = Pmi2Request::Put {
            key: key.into(),
            value: value.into(),
        };
        if let Ok(frame) = put.encode() {
            let (message, used) = take_pmi2_frame(&frame).unwrap().unwrap();
            assert_eq!(used, frame.len());
            assert_eq!(message.get("key"), Some(key));
            assert_eq!(message.get("value"), Some(value));
        }
    }
});
