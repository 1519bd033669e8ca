#![no_main]
//! libFuzzer's entry for [`ferry_fuzz::bsp_apply`] (the property is documented there).
libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz::bsp_apply(data));
