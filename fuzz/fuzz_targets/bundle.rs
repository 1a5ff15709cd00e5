//! cargo-fuzz target `bundle`: see `cofferdam_fuzz::bundle`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::bundle(data);
});
