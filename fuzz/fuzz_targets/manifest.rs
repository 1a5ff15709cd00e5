//! cargo-fuzz target `manifest`: see `cofferdam_fuzz::manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::manifest(data);
});
