//! cargo-fuzz target `scan`: see `cofferdam_fuzz::scan`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::scan(data);
});
