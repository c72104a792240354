//! Authentication and authorization for Strobe: one crate for what Pulsar spreads over
//! `AuthenticationProviderToken`, `AuthenticationProviderBasic`,
//! `AuthenticationProviderTls`, `PulsarAuthorizationProvider` and `AuthorizationService`.
//!
//! Everything here is pure and synchronous (file reads at configuration time aside);
//! the broker owns sockets and sessions. The TLS part builds `rustls` configurations
//! (with the `ring` provider) whose client-certificate verifier accepts the X.509 v1
//! certificates Pulsar's own test suites use. Debug output never shows secrets.

pub mod authn;
pub mod authz;
pub mod basic;
mod der;
mod error;
mod keys;
pub mod tls;
pub mod token;

pub use authn::{AuthMethod, Authenticated, Authenticator};
pub use authz::{
    AuthAction, AuthorizationConfig, Authorizer, NamespaceAuthPolicies, Scope, SubscriptionAuthMode,
};
pub use basic::{BASIC_METHOD_NAME, BasicAuthProvider, Credentials, apr1_crypt};
pub use error::{Error, Result};
pub use keys::{encode_key_base64, read_key_material};
pub use tls::{ClientAuth, acceptor, client_config, peer_role, server_config};
pub use token::{
    SigningKey, TokenAlgorithm, TokenConfig, TokenVerifier, VerifiedToken, create_secret_key,
    create_token, create_token_with_claims, decode_unverified, parse_relative_time,
};
