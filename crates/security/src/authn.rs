//! Choosing the provider and the role for a connection or an HTTP request, the way
//! Pulsar's `ServerCnx.handleConnect` and `AuthenticationService` do.
//!
//! Binary protocol (CONNECT):
//! - authentication disabled → no role;
//! - the method is `auth_method_name` (`"token"`, `"basic"`, `"tls"`; a legacy client's
//!   `auth_method` enum becomes `"none"`, `"ycav1"` or `"athens"` — the broker passes
//!   that name; no method at all is `"none"`);
//! - a method with no configured provider gets `anonymousUserRole`, or fails when
//!   there is none (ServerCnx: "No anonymous role, and no authentication provider
//!   configured") — even if credentials were sent;
//! - otherwise that provider decides: `token` and `basic` read `auth_data`, `tls` the
//!   client certificate's CN.
//!
//! HTTP: a `X-Pulsar-Auth-Method-Name` header picks one provider; without it every
//! provider is tried (TLS, token, basic — the order of the Python client tests'
//! broker), and when all fail the anonymous role applies if configured.

use std::fmt;
use std::time::SystemTime;

use rustls::pki_types::CertificateDer;

use crate::basic::{BasicAuthProvider, Credentials};
use crate::error::{Error, Result};
use crate::tls::peer_role;
use crate::token::TokenVerifier;

/// How a role was established.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMethod {
    /// Authentication is disabled: no role.
    Disabled,
    /// No usable method: the anonymous role.
    Anonymous,
    /// A token (`token`).
    Token,
    /// User and password (`basic`).
    Basic,
    /// The client certificate's CN (`tls`).
    Tls,
}

impl AuthMethod {
    /// The method name on the wire (`auth_method_name`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Disabled | Self::Anonymous => "none",
            Self::Token => "token",
            Self::Basic => "basic",
            Self::Tls => "tls",
        }
    }
}

/// The outcome of authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authenticated {
    /// The role; `None` only when authentication is disabled.
    pub role: Option<String>,
    /// How it was established.
    pub method: AuthMethod,
    /// When the credentials lapse (tokens with `exp`); the broker re-challenges before.
    pub expires_at: Option<SystemTime>,
}

/// The configured providers (Pulsar's `authenticationEnabled`, `authenticationProviders`
/// and `anonymousUserRole`).
#[derive(Default)]
pub struct Authenticator {
    /// `authenticationEnabled`.
    pub enabled: bool,
    /// `AuthenticationProviderToken`, if configured.
    pub token: Option<TokenVerifier>,
    /// `AuthenticationProviderBasic`, if configured.
    pub basic: Option<BasicAuthProvider>,
    /// `AuthenticationProviderTls` is configured.
    pub tls: bool,
    /// `anonymousUserRole`.
    pub anonymous_role: Option<String>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("enabled", &self.enabled)
            .field("token", &self.token)
            .field("basic", &self.basic)
            .field("tls", &self.tls)
            .field("anonymous_role", &self.anonymous_role)
            .finish()
    }
}

impl Authenticator {
    /// Whether a provider for this method name is configured.
    pub fn has_provider(&self, method: &str) -> bool {
        match method {
            "token" => self.token.is_some(),
            "basic" => self.basic.is_some(),
            "tls" => self.tls,
            _ => false,
        }
    }

    /// Authenticates a CONNECT (or an AUTH_RESPONSE, with the connection's method).
    /// `peer_certs` are the verified client certificates of a TLS connection (empty otherwise).
    pub fn authenticate_connect(
        &self,
        method_name: Option<&str>,
        auth_data: Option<&[u8]>,
        peer_certs: &[CertificateDer<'_>],
        now: SystemTime,
    ) -> Result<Authenticated> {
        if !self.enabled {
            return Ok(Authenticated {
                role: None,
                method: AuthMethod::Disabled,
                expires_at: None,
            });
        }
        let method = method_name.unwrap_or("none");
        if !self.has_provider(method) {
            return self.anonymous().ok_or_else(|| {
                Error::Unauthenticated(
                    "no anonymous role, and no authentication provider configured for this method"
                        .into(),
                )
            });
        }
        let data = auth_data.unwrap_or_default();
        match method {
            "token" => self.with_token(|v| v.verify_command_data(data, now)),
            "basic" => self.with_basic(|b| b.authenticate(&Credentials::from_command_data(data)?)),
            _ => self.with_tls(peer_certs),
        }
    }

    /// Authenticates an HTTP request from its `X-Pulsar-Auth-Method-Name` and
    /// `Authorization` headers and the TLS client certificates.
    pub fn authenticate_http(
        &self,
        method_header: Option<&str>,
        authorization: Option<&str>,
        peer_certs: &[CertificateDer<'_>],
        now: SystemTime,
    ) -> Result<Authenticated> {
        let any_provider = self.tls || self.token.is_some() || self.basic.is_some();
        if !self.enabled || !any_provider {
            return Ok(Authenticated {
                role: None,
                method: AuthMethod::Disabled,
                expires_at: None,
            });
        }
        let header = authorization.unwrap_or_default();
        let try_method = |method: &str| match method {
            "token" => self.with_token(|v| v.verify_http_header(header, now)),
            "basic" => self.with_basic(|b| b.authenticate_http_header(header)),
            "tls" => self.with_tls(peer_certs),
            other => Err(Error::Unauthenticated(format!(
                "unsupported authentication method {other:?}"
            ))),
        };
        if let Some(method) = method_header {
            if !self.has_provider(method) {
                return Err(Error::Unauthenticated(format!(
                    "unsupported authentication method {method:?}"
                )));
            }
            return try_method(method);
        }
        let mut last_error = None;
        for method in ["tls", "token", "basic"] {
            if self.has_provider(method) {
                match try_method(method) {
                    Ok(done) => return Ok(done),
                    Err(e) => last_error = Some(e),
                }
            }
        }
        self.anonymous().ok_or_else(|| {
            last_error.unwrap_or_else(|| Error::Unauthenticated("authentication required".into()))
        })
    }

    fn anonymous(&self) -> Option<Authenticated> {
        self.anonymous_role.as_ref().map(|role| Authenticated {
            role: Some(role.clone()),
            method: AuthMethod::Anonymous,
            expires_at: None,
        })
    }

    fn with_token(
        &self,
        f: impl FnOnce(&TokenVerifier) -> Result<crate::token::VerifiedToken>,
    ) -> Result<Authenticated> {
        let verifier = self
            .token
            .as_ref()
            .ok_or_else(|| Error::Config("token authentication is not configured".into()))?;
        let verified = f(verifier)?;
        Ok(Authenticated {
            role: Some(verified.role),
            method: AuthMethod::Token,
            expires_at: verified.expires_at,
        })
    }

    fn with_basic(
        &self,
        f: impl FnOnce(&BasicAuthProvider) -> Result<String>,
    ) -> Result<Authenticated> {
        let basic = self
            .basic
            .as_ref()
            .ok_or_else(|| Error::Config("basic authentication is not configured".into()))?;
        Ok(Authenticated {
            role: Some(f(basic)?),
            method: AuthMethod::Basic,
            expires_at: None,
        })
    }

    fn with_tls(&self, peer_certs: &[CertificateDer<'_>]) -> Result<Authenticated> {
        // AuthenticationProviderTls: no certificate, or no CN, is a failure.
        let role = peer_role(peer_certs).ok_or_else(|| {
            Error::Unauthenticated("client unable to authenticate with TLS certificate".into())
        })?;
        Ok(Authenticated {
            role: Some(role),
            method: AuthMethod::Tls,
            expires_at: None,
        })
    }
}
