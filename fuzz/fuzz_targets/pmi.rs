#![no_main]
//! Bootstrap lines: parsing never panics, and a parsed request encodes back to a line that
//! parses to the same request.
use ferry_wire::pmi::{Reply, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(request) = Request::parse(text) {
            if let Ok(line) = request.encode() {
                assert_eq!(Request::parse(&line), Ok(request));
            }
        }
        let _ = Reply::parse(text);
    }
});
