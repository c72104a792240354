//! Authentication and authorization for Strobe (mirrors Pulsar's
//! `AuthenticationProvider*` classes and `PulsarAuthorizationProvider`).
