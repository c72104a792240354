//! Generates the Rust types for Pulsar's protocol from `proto/` at build time.
//!
//! The .proto files are compiled in pure Rust (protox), so building Strobe does
//! not need a system `protoc`.

use std::path::PathBuf;

fn main() {
    let root =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("../../proto");
    let files = [
        root.join("PulsarApi.proto"),
        root.join("PulsarMarkers.proto"),
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, [&root])
        .unwrap_or_else(|e| panic!("compiling {}: {e}", root.display()));
    let mut config = prost_build::Config::new();
    config.bytes(["."]);
    config
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("generating Rust from {}: {e}", root.display()));
}
