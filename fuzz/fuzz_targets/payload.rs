//! Arbitrary bytes as a stored entry: parse it, walk its batch, and build the
//! MESSAGE frame a consumer would get. Errors are fine; panics are not.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strobe_wire::{batch, commands, payload};

fuzz_target!(|data: &[u8]| {
    let entry = Bytes::copy_from_slice(data);
    if let Ok(p) = payload::parse(&entry) {
        if let Ok(iter) = batch::messages(&p.metadata, &p.payload) {
            for m in iter.take(10_000) {
                if m.is_err() {
                    break;
                }
            }
        }
    }
    let _ = commands::message_frame(
        1,
        commands::message_id(1, 2),
        0,
        vec![],
        None,
        &entry,
        false,
    );
});
