//! Arbitrary bytes as a client's certificate chain (a leaf and up to 31 intermediates,
//! see `strobe_fuzz::split`), checked against a fixed trusted CA the way the broker's
//! TLS listener checks it. It must answer, never panic, and stay within its bound
//! of work (libFuzzer's -timeout catches a search that runs away).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parts = strobe_fuzz::split(data, 32);
    let Some((leaf, intermediates)) = parts.split_first() else {
        return;
    };
    let _ =
        strobe_security::tls::verify_client_chain(&[strobe_fuzz::ca_der()], leaf, intermediates);
});
