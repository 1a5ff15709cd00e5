//! cargo-fuzz target `handover`: see `cofferdam_fuzz::handover`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::handover(data);
});
