//! cargo-fuzz target `http_head`: see `cofferdam_fuzz::http_head`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::http_head(data);
});
