//! cargo-fuzz target `status`: see `cofferdam_fuzz::status`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::status(data);
});
