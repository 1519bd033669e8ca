#![no_main]
//! Node daemon control frames: decoding never panics, and a decoded message encodes back to
//! the very bytes it came from.
use ferry_wire::node::NodeMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((message, used))) = NodeMessage::decode(data) {
        assert_eq!(message.to_bytes(), data[..used]);
    }
});
