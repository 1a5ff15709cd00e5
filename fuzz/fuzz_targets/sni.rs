//! cargo-fuzz target `sni`: see `cofferdam_fuzz::sni`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::sni(data);
});
