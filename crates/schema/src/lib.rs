//! Strobe's schema registry decisions (Pulsar's `SchemaRegistryServiceImpl`
//! and its compatibility checks). Pure decisions, no I/O.
