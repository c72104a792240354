//! Certificate path validation against a fixed set of trusted CAs, with a hard bound on
//! the work one peer can cause.
//!
//! Two paths:
//! - **v3 end-entity certificates** go to webpki (`rustls-webpki`, already inside rustls):
//!   it checks pathLen, keyCertSign, name constraints, unknown critical extensions and
//!   EKUs, and caps path building at 100 signature checks.
//! - **v1 end-entity certificates** (Pulsar's test certificates include them; Java and
//!   OpenSSL accept them, webpki refuses them with `UnsupportedCertVersion`), and v3
//!   CA certificates used as end entities (OpenSSL accepts those, webpki does not), take
//!   the path built here: issuer/subject links to an anchor, each signature checked with
//!   the provider's algorithms, dates, CA:TRUE, keyCertSign and pathLen on intermediates,
//!   no critical extension we do not understand, and the same bound as webpki.
//!
//! The bound matters because path building backtracks: intermediates that share a
//! subject and a key all sign each other, and without a budget a client sending twenty of
//! them costs tens of millions of signature checks inside its handshake, before it is
//! authenticated. Both paths count signature checks through the same wrapper, so the
//! bound is tested the same way for each.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{
    AlgorithmIdentifier, CertificateDer, InvalidSignature, SignatureVerificationAlgorithm,
    TrustAnchor, UnixTime,
};
use rustls::{CertificateError, OtherError};
use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::{
    OID_X509_EXT_AUTHORITY_KEY_IDENTIFIER, OID_X509_EXT_BASIC_CONSTRAINTS,
    OID_X509_EXT_EXTENDED_KEY_USAGE, OID_X509_EXT_KEY_USAGE, OID_X509_EXT_SUBJECT_ALT_NAME,
    OID_X509_EXT_SUBJECT_KEY_IDENTIFIER,
};
use x509_parser::prelude::FromDer as _;
use x509_parser::x509::X509Version;

use super::material::{load_certs, provider};
use crate::der;
use crate::error::{Error, Result};

/// How many signature checks one verification may spend (webpki's own figure).
pub(crate) const MAX_SIGNATURE_CHECKS: usize = 100;
/// How many nodes path building may visit in one verification.
const MAX_BUILD_CALLS: usize = 2_000;
/// How many intermediates a chain may have.
const MAX_INTERMEDIATES: usize = 6;
/// How many certificates a peer may send beyond its own; the rest are ignored.
const MAX_PRESENTED: usize = 32;

/// What a chain is being checked for (the extended key usage it must allow, if it has one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    ClientAuth,
    ServerAuth,
}

/// A trusted CA: what path building needs from it.
struct Anchor {
    der: Vec<u8>,
    subject: Vec<u8>,
    spki: Vec<u8>,
}

/// Chains to a fixed set of trusted CAs.
pub(crate) struct ChainVerifier {
    anchors: Vec<Anchor>,
    /// The same anchors in webpki's form, derived once.
    webpki_anchors: Vec<TrustAnchor<'static>>,
    pub(crate) algorithms: WebPkiSupportedAlgorithms,
}

/// The budget ran out: the peer sent more candidate paths than we are willing to try.
#[derive(Debug)]
struct BudgetExhausted(&'static str);

impl fmt::Display for BudgetExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "certificate path building gave up: {}", self.0)
    }
}

impl std::error::Error for BudgetExhausted {}

fn exhausted(what: &'static str) -> CertificateError {
    CertificateError::Other(OtherError(std::sync::Arc::new(BudgetExhausted(what))))
}

/// A provider algorithm that counts its uses in a per-verification counter.
struct Counted<'a> {
    inner: &'static dyn SignatureVerificationAlgorithm,
    count: &'a AtomicUsize,
}

impl fmt::Debug for Counted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl SignatureVerificationAlgorithm for Counted<'_> {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        // Over budget, refuse without doing the work (webpki stops on its own at the
        // same figure; this guards the custom path and any future caller).
        if self.count.fetch_add(1, Ordering::Relaxed) >= MAX_SIGNATURE_CHECKS {
            return Err(InvalidSignature);
        }
        self.inner.verify_signature(public_key, message, signature)
    }
    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        self.inner.public_key_alg_id()
    }
    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        self.inner.signature_alg_id()
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

/// The state of one verification: its counted algorithms and its remaining budget.
struct Search<'a> {
    algorithms: Vec<Counted<'a>>,
    signatures: &'a AtomicUsize,
    calls: usize,
    now: UnixTime,
}

impl Search<'_> {
    fn signatures_left(&self) -> bool {
        self.signatures.load(Ordering::Relaxed) < MAX_SIGNATURE_CHECKS
    }

    /// Verifies `cert_der`'s signature with `issuer_spki`, using the provider algorithm
    /// whose signature and key identifiers match.
    fn check_signature(&self, cert_der: &[u8], issuer_spki: &[u8]) -> Result<(), CertificateError> {
        if !self.signatures_left() {
            return Err(exhausted("too many signature checks"));
        }
        let (tbs, sig_alg, sig) =
            der::split_certificate(cert_der).ok_or(CertificateError::BadEncoding)?;
        let (key_alg, key) = der::split_spki(issuer_spki).ok_or(CertificateError::BadEncoding)?;
        let alg = self
            .algorithms
            .iter()
            .find(|a| {
                a.signature_alg_id().as_ref() == sig_alg
                    && a.public_key_alg_id().as_ref() == key_alg
            })
            .ok_or_else(
                || CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
                    signature_algorithm_id: sig_alg.to_vec(),
                    public_key_algorithm_id: key_alg.to_vec(),
                },
            )?;
        alg.verify_signature(key, tbs, sig)
            .map_err(|_| CertificateError::BadSignature)
    }
}

/// A parsed intermediate the peer sent.
struct Candidate<'a> {
    der: &'a [u8],
    cert: X509Certificate<'a>,
}

impl ChainVerifier {
    pub(crate) fn from_pem(path: &Path) -> Result<Self> {
        let ders = load_certs(path)?;
        Self::from_ders(ders.iter().map(|d| d.as_ref()), &path.display().to_string())
    }

    pub(crate) fn from_ders<'a>(
        ders: impl Iterator<Item = &'a [u8]>,
        origin: &str,
    ) -> Result<Self> {
        let mut anchors = Vec::new();
        let mut webpki_anchors = Vec::new();
        for der in ders {
            let (_, cert) = X509Certificate::from_der(der).map_err(|e| {
                Error::Tls(format!("a certificate in {origin} does not parse: {e}"))
            })?;
            // webpki must be able to use it too (it takes v1 anchors).
            let cert_der = CertificateDer::from(der);
            let anchor = webpki::anchor_from_trusted_cert(&cert_der).map_err(|e| {
                Error::Tls(format!(
                    "a certificate in {origin} cannot be a trust anchor: {e}"
                ))
            })?;
            webpki_anchors.push(anchor.to_owned());
            anchors.push(Anchor {
                subject: cert.subject().as_raw().to_vec(),
                spki: cert.public_key().raw.to_vec(),
                der: der.to_vec(),
            });
        }
        Ok(Self {
            anchors,
            webpki_anchors,
            algorithms: provider().signature_verification_algorithms,
        })
    }

    pub(crate) fn subjects(&self) -> impl Iterator<Item = &[u8]> {
        self.anchors.iter().map(|a| a.subject.as_slice())
    }

    pub(crate) fn len(&self) -> usize {
        self.anchors.len()
    }

    pub(crate) fn verify(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        purpose: Purpose,
    ) -> Result<(), rustls::Error> {
        self.verify_counted(end_entity, intermediates, now, purpose)
            .0
            .map_err(rustls::Error::InvalidCertificate)
    }

    /// [`Self::verify`], also returning how many signature checks it spent.
    fn verify_counted(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        purpose: Purpose,
    ) -> (Result<(), CertificateError>, usize) {
        let count = AtomicUsize::new(0);
        let result = self.verify_with(end_entity, intermediates, now, purpose, &count);
        (result, count.load(Ordering::Relaxed))
    }

    fn verify_with(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        purpose: Purpose,
        count: &AtomicUsize,
    ) -> Result<(), CertificateError> {
        let (_, leaf) =
            X509Certificate::from_der(end_entity).map_err(|_| CertificateError::BadEncoding)?;
        // A trusted certificate presented as is (self-signed clients in Pulsar's tests).
        if self.anchors.iter().any(|a| a.der == end_entity.as_ref()) {
            check_validity(&leaf, now)?;
            return check_purpose(&leaf, purpose);
        }
        let intermediates = &intermediates[..intermediates.len().min(MAX_PRESENTED)];
        let mut search = Search {
            algorithms: self
                .algorithms
                .all
                .iter()
                .map(|&inner| Counted { inner, count })
                .collect(),
            signatures: count,
            calls: 0,
            now,
        };
        if leaf.version() == X509Version::V3 {
            match self.verify_webpki(end_entity, intermediates, &search, purpose) {
                // OpenSSL accepts a CA certificate as an end entity; webpki does not.
                Err(webpki::Error::CaUsedAsEndEntity) => {}
                result => return result.map_err(certificate_error),
            }
        }
        check_validity(&leaf, now)?;
        check_purpose(&leaf, purpose)?;
        check_critical_extensions(&leaf)?;
        let candidates: Vec<Candidate<'_>> = intermediates
            .iter()
            .filter_map(|der| {
                let (_, cert) = X509Certificate::from_der(der).ok()?;
                Some(Candidate { der, cert })
            })
            .collect();
        let mut used = vec![false; candidates.len()];
        self.build(&mut search, end_entity, &leaf, &candidates, &mut used, 0)
    }

    fn verify_webpki(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        search: &Search<'_>,
        purpose: Purpose,
    ) -> Result<(), webpki::Error> {
        let algorithms: Vec<&dyn SignatureVerificationAlgorithm> = search
            .algorithms
            .iter()
            .map(|a| a as &dyn SignatureVerificationAlgorithm)
            .collect();
        let cert = webpki::EndEntityCert::try_from(end_entity)?;
        let usage = match purpose {
            Purpose::ClientAuth => webpki::KeyUsage::client_auth(),
            Purpose::ServerAuth => webpki::KeyUsage::server_auth(),
        };
        cert.verify_for_usage(
            &algorithms,
            &self.webpki_anchors,
            intermediates,
            search.now,
            usage,
            None,
            Some(&issuers_may_sign_certificates),
        )
        .map(|_| ())
    }

    /// Depth-first search for a path from `cert` to an anchor through unused
    /// intermediates, within the search's budget.
    fn build(
        &self,
        search: &mut Search<'_>,
        cert_der: &[u8],
        cert: &X509Certificate<'_>,
        candidates: &[Candidate<'_>],
        used: &mut [bool],
        depth: usize,
    ) -> Result<(), CertificateError> {
        search.calls += 1;
        if search.calls > MAX_BUILD_CALLS {
            return Err(exhausted("too many candidate paths"));
        }
        let issuer = cert.issuer().as_raw();
        let mut error = CertificateError::UnknownIssuer;
        for anchor in self.anchors.iter().filter(|a| a.subject == issuer) {
            match search.check_signature(cert_der, &anchor.spki) {
                Ok(()) => return Ok(()),
                Err(e) => error = e,
            }
            if !search.signatures_left() {
                return Err(exhausted("too many signature checks"));
            }
        }
        if depth >= MAX_INTERMEDIATES {
            return Err(error);
        }
        for (i, candidate) in candidates.iter().enumerate() {
            if used[i] || candidate.cert.subject().as_raw() != issuer {
                continue;
            }
            if let Err(e) = check_issuer(&candidate.cert, depth, search.now) {
                error = e;
                continue;
            }
            match search.check_signature(cert_der, candidate.cert.public_key().raw) {
                Ok(()) => {}
                Err(e) => {
                    if !search.signatures_left() {
                        return Err(exhausted("too many signature checks"));
                    }
                    error = e;
                    continue;
                }
            }
            used[i] = true;
            let result = self.build(
                search,
                candidate.der,
                &candidate.cert,
                candidates,
                used,
                depth + 1,
            );
            used[i] = false;
            match result {
                Ok(()) => return Ok(()),
                Err(e @ CertificateError::Other(_)) => return Err(e),
                Err(e) => error = e,
            }
        }
        Err(error)
    }
}

/// webpki does not read keyUsage: an intermediate that has one must allow keyCertSign.
/// A path that fails this is set aside and the search goes on.
fn issuers_may_sign_certificates(path: &webpki::VerifiedPath<'_>) -> Result<(), webpki::Error> {
    for cert in path.intermediate_certificates() {
        let der = cert.der();
        let (_, parsed) = X509Certificate::from_der(&der).map_err(|_| webpki::Error::BadDer)?;
        if let Some(usage) = parsed.key_usage().map_err(|_| webpki::Error::BadDer)?
            && !usage.value.key_cert_sign()
        {
            return Err(webpki::Error::EndEntityUsedAsCa);
        }
    }
    Ok(())
}

/// What an intermediate must be to issue the certificate below it, `below` being how
/// many intermediates already stand between it and the end entity.
fn check_issuer(
    cert: &X509Certificate<'_>,
    below: usize,
    now: UnixTime,
) -> Result<(), CertificateError> {
    // Only v3 certificates can say they are CAs; a v1 intermediate is refused (OpenSSL
    // does the same unless it is self-signed, i.e. an anchor).
    let constraints = cert
        .basic_constraints()
        .map_err(|_| CertificateError::BadEncoding)?;
    let Some(constraints) = constraints.filter(|c| c.value.ca) else {
        return Err(CertificateError::InvalidPurpose);
    };
    if let Some(limit) = constraints.value.path_len_constraint
        && usize::try_from(limit).unwrap_or(usize::MAX) < below
    {
        return Err(CertificateError::InvalidPurpose);
    }
    if let Some(usage) = cert
        .key_usage()
        .map_err(|_| CertificateError::BadEncoding)?
        && !usage.value.key_cert_sign()
    {
        return Err(CertificateError::InvalidPurpose);
    }
    check_critical_extensions(cert)?;
    check_validity(cert, now)
}

/// Refuses a certificate with a critical extension this path does not act on (RFC 5280
/// §4.2: a verifier must reject what it does not understand when it is critical).
fn check_critical_extensions(cert: &X509Certificate<'_>) -> Result<(), CertificateError> {
    let understood = [
        OID_X509_EXT_BASIC_CONSTRAINTS,
        OID_X509_EXT_KEY_USAGE,
        OID_X509_EXT_EXTENDED_KEY_USAGE,
        OID_X509_EXT_SUBJECT_ALT_NAME,
        OID_X509_EXT_SUBJECT_KEY_IDENTIFIER,
        OID_X509_EXT_AUTHORITY_KEY_IDENTIFIER,
    ];
    for ext in cert.extensions() {
        if ext.critical && !understood.contains(&ext.oid) {
            return Err(CertificateError::Other(OtherError(std::sync::Arc::new(
                UnknownCritical(ext.oid.to_id_string()),
            ))));
        }
    }
    Ok(())
}

#[derive(Debug)]
struct UnknownCritical(String);

impl fmt::Display for UnknownCritical {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unsupported critical extension {}", self.0)
    }
}

impl std::error::Error for UnknownCritical {}

pub(crate) fn check_validity(
    cert: &X509Certificate<'_>,
    now: UnixTime,
) -> Result<(), CertificateError> {
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let validity = cert.validity();
    if now < validity.not_before.timestamp() {
        return Err(CertificateError::NotValidYet);
    }
    if now > validity.not_after.timestamp() {
        return Err(CertificateError::Expired);
    }
    Ok(())
}

fn check_purpose(cert: &X509Certificate<'_>, purpose: Purpose) -> Result<(), CertificateError> {
    let eku = cert
        .extended_key_usage()
        .map_err(|_| CertificateError::BadEncoding)?;
    match eku {
        // No EKU (always so for v1 certificates): any purpose.
        None => Ok(()),
        Some(ext) if ext.value.any => Ok(()),
        Some(ext)
            if match purpose {
                Purpose::ClientAuth => ext.value.client_auth,
                Purpose::ServerAuth => ext.value.server_auth,
            } =>
        {
            Ok(())
        }
        Some(_) => Err(CertificateError::InvalidPurpose),
    }
}

/// webpki's verdicts in rustls's terms (the common ones by name, the rest carried).
fn certificate_error(e: webpki::Error) -> CertificateError {
    use webpki::Error as W;
    match e {
        W::BadDer | W::BadDerTime | W::TrailingData(_) => CertificateError::BadEncoding,
        W::CertNotValidYet { .. } => CertificateError::NotValidYet,
        W::CertExpired { .. } | W::InvalidCertValidity => CertificateError::Expired,
        W::UnknownIssuer => CertificateError::UnknownIssuer,
        W::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        // Also a certificate that may not issue (not a CA, or no keyCertSign).
        W::RequiredEkuNotFoundContext(_) | W::EndEntityUsedAsCa => CertificateError::InvalidPurpose,
        other => CertificateError::Other(OtherError(std::sync::Arc::new(other))),
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
