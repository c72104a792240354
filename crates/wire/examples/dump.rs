//! Prints the frames in files (as captured by `record`), decoded field by field.
//!
//! Usage: cargo run -p strobe-wire --example dump -- FILE...

fn main() {
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut buf = bytes::BytesMut::from(&bytes[..]);
        while let Some(frame) = strobe_wire::decode_frame(&mut buf, usize::MAX)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
        {
            println!("{path}: {:#?}", frame.command);
            if let Some(p) = frame.payload {
                let parsed =
                    strobe_wire::payload::parse(&p).unwrap_or_else(|e| panic!("{path}: {e}"));
                println!(
                    "  checksum {:?}\n  metadata {:#?}",
                    parsed.checksum, parsed.metadata
                );
                if strobe_wire::batch::is_batch(&parsed.metadata) {
                    for m in strobe_wire::batch::messages(&parsed.metadata, &parsed.payload)
                        .expect("uncompressed")
                    {
                        let m = m.expect("well formed");
                        println!("  message {:?} {:?}", m.metadata, m.payload);
                    }
                }
            }
        }
    }
}
