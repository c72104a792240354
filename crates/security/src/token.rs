//! JSON Web Tokens, as Pulsar's `AuthenticationProviderToken` accepts them and
//! `pulsar tokens create` makes them.
//!
//! Verification follows Pulsar (which uses jjwt): the key comes from
//! `tokenSecretKey` (an HMAC key) or `tokenPublicKey` (an X.509
//! SubjectPublicKeyInfo, DER or PEM; `tokenPublicAlg` names its family, default
//! RS256); the role is the `tokenAuthClaim` claim (default `sub`; a JSON array
//! counts by its first string, as in newer Pulsar); when `tokenAudienceClaim` is
//! set the claim must equal, or be an array containing, `tokenAudience`; `exp` and
//! `nbf` are enforced with no clock skew unless one is configured. Only the
//! configured key's algorithm family is accepted, so `alg: none` and an HS256
//! token "signed" with an RSA public key are both refused.
//!
//! Signatures are computed and checked with `ring`; base64url and JSON are the
//! only parsing, and claims are read only after the signature verifies.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{self, KeyPair as _};
use rustls::pki_types::pem::{PemObject as _, SectionKind};
use rustls::pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};
use serde_json::{Map, Value};

use crate::der;
use crate::error::{Error, Result};
use crate::keys::read_key_material;

/// The claim Pulsar takes the role from unless `tokenAuthClaim` says otherwise.
pub const DEFAULT_ROLE_CLAIM: &str = "sub";

/// JWS algorithms this crate signs and verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenAlgorithm {
    /// HMAC with SHA-256 (what `pulsar tokens create --secret-key` makes).
    HS256,
    /// HMAC with SHA-384.
    HS384,
    /// HMAC with SHA-512.
    HS512,
    /// RSASSA-PKCS1-v1_5 with SHA-256 (Pulsar's default for key pairs).
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// RSASSA-PSS with SHA-384.
    PS384,
    /// RSASSA-PSS with SHA-512.
    PS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
}

impl TokenAlgorithm {
    const ALL: [TokenAlgorithm; 11] = [
        Self::HS256,
        Self::HS384,
        Self::HS512,
        Self::RS256,
        Self::RS384,
        Self::RS512,
        Self::PS256,
        Self::PS384,
        Self::PS512,
        Self::ES256,
        Self::ES384,
    ];

    /// The JWS `alg` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::HS256 => "HS256",
            Self::HS384 => "HS384",
            Self::HS512 => "HS512",
            Self::RS256 => "RS256",
            Self::RS384 => "RS384",
            Self::RS512 => "RS512",
            Self::PS256 => "PS256",
            Self::PS384 => "PS384",
            Self::PS512 => "PS512",
            Self::ES256 => "ES256",
            Self::ES384 => "ES384",
        }
    }

    /// Parses a JWS `alg` name (case-sensitive, as in the JWS spec).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    fn is_hmac(self) -> bool {
        matches!(self, Self::HS256 | Self::HS384 | Self::HS512)
    }

    fn is_rsa(self) -> bool {
        matches!(
            self,
            Self::RS256 | Self::RS384 | Self::RS512 | Self::PS256 | Self::PS384 | Self::PS512
        )
    }

    /// jjwt refuses HMAC keys shorter than the hash (RFC 7518 §3.2); so do we.
    fn min_hmac_key_len(self) -> usize {
        match self {
            Self::HS384 => 48,
            Self::HS512 => 64,
            _ => 32,
        }
    }
}

impl fmt::Display for TokenAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The broker's token settings, named as in Pulsar's `broker.conf`.
#[derive(Clone, Default)]
pub struct TokenConfig {
    /// `tokenSecretKey`: a key setting (see [`crate::read_key_material`]) holding the HMAC key.
    pub secret_key: Option<String>,
    /// `tokenPublicKey`: a key setting holding an SPKI public key, DER or PEM.
    pub public_key: Option<String>,
    /// `tokenPublicAlg`: the algorithm the public key is for (default RS256); only its family matters.
    pub public_alg: Option<String>,
    /// `tokenAuthClaim`: the claim holding the role (default `sub`).
    pub auth_claim: Option<String>,
    /// `tokenAudienceClaim`: the claim holding the audience (e.g. `aud`); needs `audience`.
    pub audience_claim: Option<String>,
    /// `tokenAudience`: the audience naming this broker.
    pub audience: Option<String>,
    /// Tolerance for `exp`/`nbf` against our clock. Pulsar's default (jjwt's) is zero.
    pub allowed_clock_skew: Duration,
}

impl fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key settings may be inline key material (`data:` or base64).
        f.debug_struct("TokenConfig")
            .field(
                "secret_key",
                &self.secret_key.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "public_key",
                &self.public_key.as_ref().map(|_| "<redacted>"),
            )
            .field("public_alg", &self.public_alg)
            .field("auth_claim", &self.auth_claim)
            .field("audience_claim", &self.audience_claim)
            .field("audience", &self.audience)
            .field("allowed_clock_skew", &self.allowed_clock_skew)
            .finish()
    }
}

fn non_blank(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

enum VerifyKey {
    Hmac(Vec<u8>),
    /// PKCS#1 RSAPublicKey, as ring wants it.
    Rsa(Vec<u8>),
    /// Uncompressed P-256 point.
    EcP256(Vec<u8>),
    /// Uncompressed P-384 point.
    EcP384(Vec<u8>),
}

impl VerifyKey {
    fn family(&self) -> &'static str {
        match self {
            Self::Hmac(_) => "HMAC",
            Self::Rsa(_) => "RSA",
            Self::EcP256(_) => "EC P-256",
            Self::EcP384(_) => "EC P-384",
        }
    }

    fn accepts(&self, alg: TokenAlgorithm) -> bool {
        match self {
            Self::Hmac(k) => alg.is_hmac() && k.len() >= alg.min_hmac_key_len(),
            Self::Rsa(_) => alg.is_rsa(),
            Self::EcP256(_) => alg == TokenAlgorithm::ES256,
            Self::EcP384(_) => alg == TokenAlgorithm::ES384,
        }
    }

    fn verify(&self, alg: TokenAlgorithm, message: &[u8], sig: &[u8]) -> bool {
        match self {
            Self::Hmac(k) => {
                let a = match alg {
                    TokenAlgorithm::HS384 => ring::hmac::HMAC_SHA384,
                    TokenAlgorithm::HS512 => ring::hmac::HMAC_SHA512,
                    _ => ring::hmac::HMAC_SHA256,
                };
                // Constant-time comparison inside ring.
                ring::hmac::verify(&ring::hmac::Key::new(a, k), message, sig).is_ok()
            }
            Self::Rsa(k) => {
                let a: &'static dyn signature::VerificationAlgorithm = match alg {
                    TokenAlgorithm::RS256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    TokenAlgorithm::RS384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    TokenAlgorithm::RS512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                    TokenAlgorithm::PS256 => &signature::RSA_PSS_2048_8192_SHA256,
                    TokenAlgorithm::PS384 => &signature::RSA_PSS_2048_8192_SHA384,
                    _ => &signature::RSA_PSS_2048_8192_SHA512,
                };
                signature::UnparsedPublicKey::new(a, k)
                    .verify(message, sig)
                    .is_ok()
            }
            Self::EcP256(k) => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, k)
                    .verify(message, sig)
                    .is_ok()
            }
            Self::EcP384(k) => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, k)
                    .verify(message, sig)
                    .is_ok()
            }
        }
    }
}

// DER of the OIDs we recognise in a SubjectPublicKeyInfo's AlgorithmIdentifier.
const OID_RSA_ENCRYPTION: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
];
const OID_EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

/// Verifies tokens presented by clients (CONNECT `auth_data` for method `token`,
/// or an HTTP `Authorization: Bearer` header) and yields the role.
pub struct TokenVerifier {
    key: VerifyKey,
    role_claim: String,
    audience: Option<(String, String)>,
    skew: Duration,
}

impl fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("key", &format_args!("<{} key redacted>", self.key.family()))
            .field("role_claim", &self.role_claim)
            .field("audience", &self.audience)
            .field("skew", &self.skew)
            .finish()
    }
}

impl TokenVerifier {
    /// Builds a verifier from Pulsar-style settings. As in Pulsar, a non-blank
    /// `tokenSecretKey` wins over `tokenPublicKey`, and an audience claim without an
    /// audience is a configuration error.
    pub fn from_config(config: &TokenConfig) -> Result<Self> {
        let mut verifier = if let Some(secret) = non_blank(&config.secret_key) {
            Self::from_secret(&read_key_material(secret)?)?
        } else if let Some(public) = non_blank(&config.public_key) {
            let v = Self::from_public_key(&read_key_material(public)?)?;
            if let Some(alg) = non_blank(&config.public_alg) {
                let alg = TokenAlgorithm::from_name(alg)
                    .ok_or_else(|| Error::Config(format!("unknown tokenPublicAlg {alg:?}")))?;
                if alg.is_hmac() || !v.key.accepts(alg) {
                    return Err(Error::Config(format!(
                        "tokenPublicAlg {alg} does not fit the {} public key",
                        v.key.family()
                    )));
                }
            }
            v
        } else {
            return Err(Error::Config(
                "token authentication needs tokenSecretKey or tokenPublicKey".into(),
            ));
        };
        if let Some(claim) = non_blank(&config.auth_claim) {
            verifier.role_claim = claim.to_owned();
        }
        match (
            non_blank(&config.audience_claim),
            non_blank(&config.audience),
        ) {
            (Some(claim), Some(aud)) => {
                verifier.audience = Some((claim.to_owned(), aud.to_owned()))
            }
            (Some(claim), None) => {
                return Err(Error::Config(format!(
                    "tokenAudienceClaim {claim:?} is set but tokenAudience is not"
                )));
            }
            (None, _) => {}
        }
        verifier.skew = config.allowed_clock_skew;
        Ok(verifier)
    }

    /// An HMAC verifier (HS256/384/512). Like jjwt's `Keys.hmacShaKeyFor`, refuses keys under 256 bits.
    pub fn from_secret(key: &[u8]) -> Result<Self> {
        if key.len() < 32 {
            return Err(Error::Key(format!(
                "HMAC secret key has {} bits; at least 256 are required",
                key.len() * 8
            )));
        }
        Ok(Self::with_key(VerifyKey::Hmac(key.to_vec())))
    }

    /// A public-key verifier from an X.509 SubjectPublicKeyInfo, DER or PEM
    /// (`-----BEGIN PUBLIC KEY-----`): RSA (RS*/PS*) or EC P-256 (ES256) / P-384 (ES384).
    pub fn from_public_key(key: &[u8]) -> Result<Self> {
        let der = if looks_like_pem(key) {
            SubjectPublicKeyInfoDer::from_pem_slice(key)
                .map_err(|e| Error::Key(format!("public key PEM: {e}")))?
                .as_ref()
                .to_vec()
        } else {
            key.to_vec()
        };
        let (alg, bits) = der::split_spki(&der)
            .ok_or_else(|| Error::Key("public key is not a DER SubjectPublicKeyInfo".into()))?;
        let key = if alg.starts_with(OID_RSA_ENCRYPTION) {
            VerifyKey::Rsa(bits.to_vec())
        } else if let Some(curve) = alg.strip_prefix(OID_EC_PUBLIC_KEY) {
            match curve {
                OID_P256 => VerifyKey::EcP256(bits.to_vec()),
                OID_P384 => VerifyKey::EcP384(bits.to_vec()),
                _ => return Err(Error::Key("EC public key on an unsupported curve".into())),
            }
        } else {
            return Err(Error::Key("public key is neither RSA nor EC".into()));
        };
        Ok(Self::with_key(key))
    }

    fn with_key(key: VerifyKey) -> Self {
        Self {
            key,
            role_claim: DEFAULT_ROLE_CLAIM.to_owned(),
            audience: None,
            skew: Duration::ZERO,
        }
    }

    /// Takes the role from `claim` instead of `sub` (Pulsar's `tokenAuthClaim`).
    pub fn with_role_claim(mut self, claim: impl Into<String>) -> Self {
        self.role_claim = claim.into();
        self
    }

    /// Requires `claim` to be, or contain, `audience` (`tokenAudienceClaim` / `tokenAudience`).
    pub fn with_audience(mut self, claim: impl Into<String>, audience: impl Into<String>) -> Self {
        self.audience = Some((claim.into(), audience.into()));
        self
    }

    /// Tolerates this much clock difference on `exp` and `nbf`.
    pub fn with_clock_skew(mut self, skew: Duration) -> Self {
        self.skew = skew;
        self
    }

    /// Verifies a token at time `now` and returns its role and expiry.
    /// Surrounding whitespace (a token read from a file keeps its newline) is ignored.
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<VerifiedToken> {
        self.verify_with_claims(token, now)
            .map(|(verified, _)| verified)
    }

    /// Like [`verify`](Self::verify), also returning all the claims (for
    /// `strobe tokens validate`, and for callers that want more than the role).
    pub fn verify_with_claims(
        &self,
        token: &str,
        now: SystemTime,
    ) -> Result<(VerifiedToken, Map<String, Value>)> {
        let token = token.trim();
        if token.is_empty() {
            return Err(Error::Malformed("blank token".into()));
        }
        let mut parts = token.split('.');
        let (Some(h64), Some(c64), Some(s64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Error::Malformed(
                "a signed token has exactly three parts".into(),
            ));
        };
        let header = json_object(&b64url(h64, "header")?, "header")?;
        let alg_name = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Malformed("header has no \"alg\"".into()))?;
        let alg = TokenAlgorithm::from_name(alg_name)
            .filter(|a| self.key.accepts(*a))
            .ok_or_else(|| Error::AlgorithmNotAllowed(alg_name.to_owned()))?;
        let sig = b64url(s64, "signature")?;
        let signed = &token[..h64.len() + 1 + c64.len()];
        if !self.key.verify(alg, signed.as_bytes(), &sig) {
            return Err(Error::InvalidSignature);
        }

        let claims = json_object(&b64url(c64, "claims")?, "claims")?;
        let now_ms = millis_since_epoch(now);
        let skew_ms = i128::try_from(self.skew.as_millis()).unwrap_or(i128::MAX);
        let expires_at = numeric_date(&claims, "exp")?;
        if let Some(exp) = expires_at {
            // jjwt: expired once now - skew is after exp.
            if now_ms.saturating_sub(skew_ms) > millis_since_epoch(exp) {
                return Err(Error::Expired { expired_at: exp });
            }
        }
        if let Some(nbf) = numeric_date(&claims, "nbf")?
            && now_ms.saturating_add(skew_ms) < millis_since_epoch(nbf)
        {
            return Err(Error::NotYetValid);
        }
        if let Some((claim, audience)) = &self.audience {
            let ok = match claims.get(claim) {
                Some(Value::String(s)) => s == audience,
                Some(Value::Array(list)) => list.iter().any(|v| v.as_str() == Some(audience)),
                _ => return Err(Error::MissingClaim(claim.clone())),
            };
            if !ok {
                return Err(Error::AudienceMismatch(audience.clone()));
            }
        }
        let role = match claims.get(&self.role_claim) {
            Some(Value::String(s)) => Some(s.clone()),
            // Newer Pulsar: a list claim yields its first element when that is a string.
            Some(Value::Array(list)) => list.first().and_then(Value::as_str).map(str::to_owned),
            _ => None,
        }
        .filter(|r| !r.is_empty())
        .ok_or_else(|| Error::MissingClaim(self.role_claim.clone()))?;
        Ok((VerifiedToken { role, expires_at }, claims))
    }

    /// Verifies CONNECT/AUTH_RESPONSE `auth_data` for method `token`: the token's UTF-8 text.
    pub fn verify_command_data(&self, auth_data: &[u8], now: SystemTime) -> Result<VerifiedToken> {
        let text = std::str::from_utf8(auth_data)
            .map_err(|_| Error::Malformed("auth data is not UTF-8".into()))?;
        self.verify(text, now)
    }

    /// Verifies an HTTP `Authorization` header value, which must be `Bearer <token>` (RFC 6750).
    pub fn verify_http_header(&self, header: &str, now: SystemTime) -> Result<VerifiedToken> {
        let token = header.strip_prefix("Bearer ").ok_or_else(|| {
            Error::Malformed("Authorization header is not \"Bearer <token>\"".into())
        })?;
        self.verify(token, now)
    }
}

/// The header and claims of a token, **without verifying it** (like `pulsar tokens show`).
/// Never base a decision on this.
pub fn decode_unverified(token: &str) -> Result<(Map<String, Value>, Map<String, Value>)> {
    let mut parts = token.trim().split('.');
    let (Some(h64), Some(c64)) = (parts.next(), parts.next()) else {
        return Err(Error::Malformed("a token has at least two parts".into()));
    };
    Ok((
        json_object(&b64url(h64, "header")?, "header")?,
        json_object(&b64url(c64, "claims")?, "claims")?,
    ))
}

/// A token that verified: whose it is and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedToken {
    /// The role (from the configured role claim).
    pub role: String,
    /// The `exp` claim; `None` means the token never expires.
    pub expires_at: Option<SystemTime>,
}

impl VerifiedToken {
    /// How long the token stays valid after `now` (zero once expired); `None` if it never expires.
    /// The broker uses this to schedule AUTH_CHALLENGE before the credentials lapse.
    pub fn remaining(&self, now: SystemTime) -> Option<Duration> {
        self.expires_at
            .map(|exp| exp.duration_since(now).unwrap_or(Duration::ZERO))
    }

    /// Whether the token has expired at `now` (Pulsar's `AuthenticationState.isExpired`).
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|exp| exp < now)
    }
}

fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.trim_ascii_start().starts_with(b"-----BEGIN")
}

fn b64url(part: &str, what: &str) -> Result<Vec<u8>> {
    URL_SAFE_NO_PAD
        .decode(part)
        .or_else(|_| URL_SAFE.decode(part))
        .map_err(|_| Error::Malformed(format!("{what} is not base64url")))
}

fn json_object(bytes: &[u8], what: &str) -> Result<Map<String, Value>> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Error::Malformed(format!("{what} is not a JSON object"))),
    }
}

/// A JWT NumericDate claim (seconds since the epoch, possibly fractional).
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<SystemTime>> {
    let Some(v) = claims.get(name) else {
        return Ok(None);
    };
    let secs = v
        .as_f64()
        .filter(|s| s.is_finite())
        .ok_or_else(|| Error::Malformed(format!("{name} is not a number")))?;
    let t = if secs >= 0.0 {
        UNIX_EPOCH.checked_add(Duration::from_secs_f64(secs.min(1e15)))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs_f64((-secs).min(1e15)))
    };
    t.map(Some)
        .ok_or_else(|| Error::Malformed(format!("{name} is out of range")))
}

fn millis_since_epoch(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_millis()).unwrap_or(i128::MAX),
        Err(e) => -i128::try_from(e.duration().as_millis()).unwrap_or(i128::MAX),
    }
}

/// A key that signs tokens (used by `strobe tokens create` and by tests).
pub struct SigningKey {
    alg: TokenAlgorithm,
    inner: SigningInner,
}

enum SigningInner {
    Hmac(ring::hmac::Key),
    Rsa(signature::RsaKeyPair),
    Ecdsa(signature::EcdsaKeyPair),
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({} <redacted>)", self.alg)
    }
}

impl SigningKey {
    /// An HS256 key from raw secret bytes (what `create_secret_key` makes).
    pub fn hmac(secret: &[u8]) -> Result<Self> {
        Self::hmac_with(TokenAlgorithm::HS256, secret)
    }

    /// An HMAC key for HS256/HS384/HS512; the key must be at least as long as the hash.
    pub fn hmac_with(alg: TokenAlgorithm, secret: &[u8]) -> Result<Self> {
        let a = match alg {
            TokenAlgorithm::HS256 => ring::hmac::HMAC_SHA256,
            TokenAlgorithm::HS384 => ring::hmac::HMAC_SHA384,
            TokenAlgorithm::HS512 => ring::hmac::HMAC_SHA512,
            other => return Err(Error::Key(format!("{other} is not an HMAC algorithm"))),
        };
        if secret.len() < alg.min_hmac_key_len() {
            return Err(Error::Key(format!(
                "a {alg} key needs at least {} bits, this one has {}",
                alg.min_hmac_key_len() * 8,
                secret.len() * 8
            )));
        }
        Ok(Self {
            alg,
            inner: SigningInner::Hmac(ring::hmac::Key::new(a, secret)),
        })
    }

    /// An RS256 key from an RSA private key: PEM (PKCS#8 `PRIVATE KEY` or PKCS#1
    /// `RSA PRIVATE KEY`) or DER (PKCS#8, what `pulsar tokens create-key-pair` writes, or PKCS#1).
    pub fn rsa(private_key: &[u8]) -> Result<Self> {
        Self::from_private_key(TokenAlgorithm::RS256, private_key)
    }

    /// A key for an RSA (RS*/PS*) or ECDSA (ES256/ES384, PKCS#8 only) algorithm.
    pub fn from_private_key(alg: TokenAlgorithm, private_key: &[u8]) -> Result<Self> {
        let (kind, der) = if looks_like_pem(private_key) {
            let key = PrivateKeyDer::from_pem_slice(private_key)
                .map_err(|e| Error::Key(format!("private key PEM: {e}")))?;
            let kind = match &key {
                PrivateKeyDer::Pkcs1(_) => SectionKind::RsaPrivateKey,
                PrivateKeyDer::Sec1(_) => SectionKind::EcPrivateKey,
                _ => SectionKind::PrivateKey,
            };
            (kind, key.secret_der().to_vec())
        } else {
            (SectionKind::PrivateKey, private_key.to_vec())
        };
        let bad = |e: &dyn fmt::Display| Error::Key(format!("{alg} private key: {e}"));
        let inner = if alg.is_rsa() {
            let pair = match kind {
                SectionKind::RsaPrivateKey => signature::RsaKeyPair::from_der(&der),
                // Raw DER may be either: `openssl pkey -outform DER` writes PKCS#1.
                _ => signature::RsaKeyPair::from_pkcs8(&der)
                    .or_else(|e| signature::RsaKeyPair::from_der(&der).map_err(|_| e)),
            }
            .map_err(|e| bad(&e))?;
            SigningInner::Rsa(pair)
        } else if matches!(alg, TokenAlgorithm::ES256 | TokenAlgorithm::ES384) {
            if kind != SectionKind::PrivateKey {
                return Err(bad(
                    &"EC keys must be PKCS#8 (openssl pkcs8 -topk8 -nocrypt)",
                ));
            }
            let a = if alg == TokenAlgorithm::ES256 {
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING
            } else {
                &signature::ECDSA_P384_SHA384_FIXED_SIGNING
            };
            let pair = signature::EcdsaKeyPair::from_pkcs8(a, &der, &SystemRandom::new())
                .map_err(|e| bad(&e))?;
            SigningInner::Ecdsa(pair)
        } else {
            return Err(bad(&"not a public-key algorithm"));
        };
        Ok(Self { alg, inner })
    }

    /// The algorithm this key signs with.
    pub fn algorithm(&self) -> TokenAlgorithm {
        self.alg
    }

    /// The matching public key as DER SubjectPublicKeyInfo (`None` for HMAC keys).
    pub fn public_key_spki(&self) -> Option<Vec<u8>> {
        match &self.inner {
            SigningInner::Hmac(_) => None,
            SigningInner::Rsa(pair) => Some(spki(
                &[OID_RSA_ENCRYPTION, &[0x05, 0x00]].concat(),
                pair.public_key().as_ref(),
            )),
            SigningInner::Ecdsa(pair) => {
                let curve = if self.alg == TokenAlgorithm::ES256 {
                    OID_P256
                } else {
                    OID_P384
                };
                Some(spki(
                    &[OID_EC_PUBLIC_KEY, curve].concat(),
                    pair.public_key().as_ref(),
                ))
            }
        }
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>> {
        let rng = SystemRandom::new();
        match &self.inner {
            SigningInner::Hmac(k) => Ok(ring::hmac::sign(k, message).as_ref().to_vec()),
            SigningInner::Rsa(pair) => {
                let padding: &'static dyn signature::RsaEncoding = match self.alg {
                    TokenAlgorithm::RS384 => &signature::RSA_PKCS1_SHA384,
                    TokenAlgorithm::RS512 => &signature::RSA_PKCS1_SHA512,
                    TokenAlgorithm::PS256 => &signature::RSA_PSS_SHA256,
                    TokenAlgorithm::PS384 => &signature::RSA_PSS_SHA384,
                    TokenAlgorithm::PS512 => &signature::RSA_PSS_SHA512,
                    _ => &signature::RSA_PKCS1_SHA256,
                };
                let mut sig = vec![0; pair.public().modulus_len()];
                pair.sign(padding, &rng, message, &mut sig)
                    .map_err(|_| Error::Key("RSA signing failed".into()))?;
                Ok(sig)
            }
            SigningInner::Ecdsa(pair) => pair
                .sign(&rng, message)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| Error::Key("ECDSA signing failed".into())),
        }
    }
}

/// Builds DER SubjectPublicKeyInfo from an AlgorithmIdentifier's contents and the key bytes.
fn spki(alg_contents: &[u8], key: &[u8]) -> Vec<u8> {
    let alg = der_tlv(0x30, alg_contents);
    let bits = der_tlv(0x03, &[&[0u8][..], key].concat());
    der_tlv(0x30, &[alg, bits].concat())
}

fn der_tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
    out
}

/// 32 random bytes: an HS256 key, like `pulsar tokens create-secret-key`.
pub fn create_secret_key() -> Vec<u8> {
    let mut key = vec![0u8; 32];
    SystemRandom::new()
        .fill(&mut key)
        .expect("the operating system's random source failed");
    key
}

/// Signs a token for `subject` with an optional expiry, as `pulsar tokens create` does
/// (claims `sub` and, with an expiry, `exp`; header `alg` only).
pub fn create_token(subject: &str, expiry: Option<SystemTime>, key: &SigningKey) -> Result<String> {
    let mut claims = Map::new();
    claims.insert("sub".into(), Value::String(subject.to_owned()));
    if let Some(exp) = expiry {
        let secs = exp
            .duration_since(UNIX_EPOCH)
            .map_err(|_| Error::Config("token expiry before 1970".into()))?
            .as_secs();
        claims.insert("exp".into(), Value::from(secs));
    }
    create_token_with_claims(&claims, key)
}

/// Signs arbitrary claims (for audience, custom role claims, `nbf`, ...).
pub fn create_token_with_claims(claims: &Map<String, Value>, key: &SigningKey) -> Result<String> {
    let header = serde_json::json!({ "alg": key.alg.name() });
    let mut token = URL_SAFE_NO_PAD.encode(header.to_string());
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(Value::Object(claims.clone()).to_string()));
    let sig = key.sign(token.as_bytes())?;
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(sig));
    Ok(token)
}

/// Parses Pulsar's relative times (`RelativeTimeUtil`): a number with an optional unit
/// `s`, `m`, `h`, `d`, `w` or `y` (365 days); no unit means seconds. `1h`, `30m`, `7d`.
pub fn parse_relative_time(text: &str) -> Result<Duration> {
    let text = text.trim();
    let bad = || {
        Error::Config(format!(
            "bad relative time {text:?} (expected e.g. 30s, 10m, 1h, 7d, 2w, 1y)"
        ))
    };
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], c),
        Some(_) => (text, 's'),
        None => return Err(bad()),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let scale: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        'y' => 365 * 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(scale)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}
