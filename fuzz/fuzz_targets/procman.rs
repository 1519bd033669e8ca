#![no_main]
//! libFuzzer's entry for [`ferry_fuzz::procman`] (the property is documented there).
libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::procman(data));
