//! cargo-fuzz target `dns`: see `cofferdam_fuzz::dns`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::dns(data);
});
