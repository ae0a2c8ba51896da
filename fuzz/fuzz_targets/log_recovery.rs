#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| greenwave_fuzz_targets::log_recovery(data));
