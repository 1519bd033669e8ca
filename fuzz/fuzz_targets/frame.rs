#![no_main]
//! Frame headers: any bytes decode or fail cleanly, and what decodes re-encodes to the same
//! header fields.
use ferry_wire::Frame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = Frame::decode(data, 1 << 30) {
        assert_eq!(Frame::decode(&frame.to_bytes(), 1 << 30), Ok(frame));
    }
});
