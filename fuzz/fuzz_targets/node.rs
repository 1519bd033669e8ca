#![no_main]
//! libFuzzer's entry for [`ferry_fuzz::node`] (the property is documented there).
libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::node(data));
