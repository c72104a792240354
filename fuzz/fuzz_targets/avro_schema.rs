//! Arbitrary bytes as schema definitions: validated as an AVRO, JSON and KEY_VALUE
//! upload would be, and two of them checked for compatibility under every strategy.
//! Errors are answers; panics and hangs are bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strobe_schema::{
    SchemaCompatibilityStrategy as S, SchemaData, SchemaType, ValidationOptions,
    check_compatibility, validate_schema_data,
};

const STRATEGIES: [S; 9] = [
    S::Undefined,
    S::AlwaysIncompatible,
    S::AlwaysCompatible,
    S::Backward,
    S::Forward,
    S::Full,
    S::BackwardTransitive,
    S::ForwardTransitive,
    S::FullTransitive,
];

fuzz_target!(|data: &[u8]| {
    let parts = strobe_fuzz::split(data, 3);
    let kind = match parts.first().and_then(|p| p.first()) {
        Some(b) if b % 3 == 1 => SchemaType::Json,
        Some(b) if b % 3 == 2 => SchemaType::KeyValue,
        _ => SchemaType::Avro,
    };
    let schemas: Vec<SchemaData> = parts
        .iter()
        .skip(1)
        .map(|p| SchemaData::new(kind, p.to_vec()))
        .collect();
    for s in &schemas {
        for legacy in [false, true] {
            let options = ValidationOptions {
                json_allow_legacy_jackson_format: legacy,
            };
            let _ = validate_schema_data(s, &options);
        }
    }
    if let [old, new] = &schemas[..] {
        for strategy in STRATEGIES {
            let _ = check_compatibility(new, std::slice::from_ref(old), strategy);
        }
    }
});
