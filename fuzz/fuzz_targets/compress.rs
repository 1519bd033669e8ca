#![no_main]
//! libFuzzer's entry for [`ferry_fuzz::compress`] (the property is documented there).
libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::compress(data));
