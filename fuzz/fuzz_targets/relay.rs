#![no_main]
//! libFuzzer's entry for [`ferry_fuzz::relay`] (the property is documented there).
libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::relay(data));
