//! The crate's one error type. Messages never carry key material, passwords or tokens.

use std::path::PathBuf;
use std::time::SystemTime;

/// Everything that can go wrong in `strobe-security`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting is missing, contradictory or unusable.
    #[error("security configuration: {0}")]
    Config(String),
    /// A key, certificate or password file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Key material is not in a form we understand (bad base64, bad PEM/DER, unsupported key type).
    #[error("key: {0}")]
    Key(String),

    /// The token is not a well-formed compact JWS (three base64url parts, JSON header and claims).
    #[error("malformed token: {0}")]
    Malformed(String),
    /// The token names an algorithm this verifier does not accept (`none`, or another key family).
    #[error("token algorithm {0:?} is not accepted for the configured key")]
    AlgorithmNotAllowed(String),
    /// The token's signature does not verify with the configured key.
    #[error("token signature does not verify")]
    InvalidSignature,
    /// The token's `exp` lies in the past.
    #[error("token expired")]
    Expired {
        /// When it expired.
        expired_at: SystemTime,
    },
    /// The token's `nbf` lies in the future.
    #[error("token is not valid yet")]
    NotYetValid,
    /// A claim the verifier needs is absent or has the wrong JSON type.
    #[error("token lacks a usable {0:?} claim")]
    MissingClaim(String),
    /// The token's audience claim does not name this broker.
    #[error("token audience does not include {0:?}")]
    AudienceMismatch(String),

    /// No credentials that any configured provider accepts, and no anonymous role to fall back to.
    #[error("authentication failed: {0}")]
    Unauthenticated(String),
    /// Basic auth: unknown user or wrong password (one message for both, like Pulsar).
    #[error("unknown user or invalid password")]
    BadCredentials,
    /// Basic auth: the credentials are not `user:password` (or not valid base64 on HTTP).
    #[error("malformed credentials: {0}")]
    MalformedCredentials(String),

    /// A TLS certificate or configuration problem found while building a config.
    #[error("tls: {0}")]
    Tls(String),
    /// rustls refused a configuration.
    #[error(transparent)]
    Rustls(#[from] rustls::Error),

    /// Authorization refused; the text says which Pulsar rule refused it.
    #[error("not authorized: {0}")]
    NotAuthorized(String),
    /// Authorization needs the tenant's admin roles, and the tenant does not exist.
    #[error("tenant {0:?} does not exist")]
    TenantNotFound(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
