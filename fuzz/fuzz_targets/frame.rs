//! Arbitrary bytes into the frame decoder, fed in two chunks: it must return
//! frames, Ok(None) or an error, never panic, and never buffer past the limit.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

const MAX: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    let split = data
        .first()
        .map(|b| *b as usize % (data.len() + 1))
        .unwrap_or(0);
    let mut buf = BytesMut::new();
    for chunk in [&data[..split], &data[split..]] {
        buf.extend_from_slice(chunk);
        loop {
            match strobe_wire::decode_frame(&mut buf, MAX) {
                Ok(Some(frame)) => {
                    if let Some(p) = frame.payload {
                        let _ = strobe_wire::payload::parse(&p);
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(
            buf.capacity() <= MAX + 4 + data.len() + 64,
            "buffer grew past the limit"
        );
    }
});
