#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcm::fuzzing::convert_roundtrip(data));
