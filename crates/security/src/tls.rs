//! TLS for the broker's `pulsar+ssl://` listener and for our own clients, on rustls with
//! the `ring` provider, plus Pulsar's TLS authentication (`AuthenticationProviderTls`:
//! the role is the client certificate's subject CN).
//!
//! Why custom certificate verifiers: Pulsar's test certificates include X.509 **v1**
//! certificates (no extensions), which Java and OpenSSL accept and webpki refuses
//! (`UnsupportedCertVersion`). So the verifiers here send v3 chains to webpki and check
//! v1 ones themselves, with the same bound on work (`chain.rs` says how). Handshake
//! signatures are verified against the end-entity's SubjectPublicKeyInfo with the
//! provider's algorithms (TLS 1.3 through rustls's raw-key helper), so v1 end-entity
//! certificates work in both TLS 1.2 and 1.3.
//!
//! Not done (as in Pulsar's defaults): revocation (CRL/OCSP), and name constraints and
//! policies on the v1 path. Trust anchors are taken as configured, without date checks.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer as _;

use crate::der;
use crate::error::{Error, Result};

mod chain;
mod material;

use chain::{ChainVerifier, Purpose};
pub use material::{load_certs, load_private_key, provider};

pub use rustls;
pub use tokio_rustls;

/// Whether the server asks for client certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// Do not ask (TLS transport only; authenticate some other way).
    None,
    /// Ask; accept a connection without one, refuse an untrusted one. This is Pulsar's
    /// default (`tlsRequireTrustedClientCertOnConnect=false`).
    Optional,
    /// Refuse a connection without a trusted client certificate
    /// (`tlsRequireTrustedClientCertOnConnect=true`).
    Required,
}

/// The broker's TLS configuration: its certificate chain and key, and, unless
/// `client_auth` is [`ClientAuth::None`], the CAs that client certificates must chain to.
pub fn server_config(
    cert_pem: &Path,
    key_pem: &Path,
    trust_pem: Option<&Path>,
    client_auth: ClientAuth,
) -> Result<Arc<rustls::ServerConfig>> {
    let certs = load_certs(cert_pem)?;
    let key = load_private_key(key_pem)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Optional | ClientAuth::Required => {
            let trust = trust_pem.ok_or_else(|| {
                Error::Config("client certificate authentication needs a trust file".into())
            })?;
            let chain = ChainVerifier::from_pem(trust)?;
            let verifier = ClientVerifier {
                hints: chain
                    .subjects()
                    .map(|s| DistinguishedName::from(s.to_vec()))
                    .collect(),
                chain,
                mandatory: client_auth == ClientAuth::Required,
            };
            builder.with_client_cert_verifier(Arc::new(verifier))
        }
    };
    Ok(Arc::new(
        builder.with_cert_resolver(certified_key(certs, key)?),
    ))
}

/// A certificate chain with its key, checked to belong together. rustls's own
/// `with_single_cert` parses the certificate with webpki, which refuses v1 certificates.
fn certified_key(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<SingleCertAndKey>> {
    let signing_key = provider().key_provider.load_private_key(key)?;
    let leaf = certs
        .first()
        .ok_or_else(|| Error::Tls("empty certificate chain".into()))?;
    let (_, parsed) = X509Certificate::from_der(leaf)
        .map_err(|e| Error::Tls(format!("the certificate does not parse: {e}")))?;
    if let Some(key_spki) = signing_key.public_key()
        && key_spki.as_ref() != parsed.public_key().raw
    {
        return Err(Error::Tls(
            "the private key does not match the certificate".into(),
        ));
    }
    Ok(Arc::new(SingleCertAndKey::from(CertifiedKey::new(
        certs,
        signing_key,
    ))))
}

/// A client TLS configuration for our own clients and tests.
///
/// `trust_pem` names the CAs the server must chain to (required unless
/// `allow_insecure`); `client_cert_and_key` is presented for TLS authentication;
/// `allow_insecure` accepts any server certificate (Pulsar's
/// `tlsAllowInsecureConnection`); `validate_hostname` also checks the server name
/// against the certificate's SANs, or its CN when it has none (Pulsar's
/// `tlsHostnameVerificationEnable`, off by default in Pulsar clients).
pub fn client_config(
    trust_pem: Option<&Path>,
    client_cert_and_key: Option<(&Path, &Path)>,
    allow_insecure: bool,
    validate_hostname: bool,
) -> Result<Arc<rustls::ClientConfig>> {
    let chain = match trust_pem {
        Some(path) => Some(ChainVerifier::from_pem(path)?),
        None if allow_insecure => None,
        None => {
            return Err(Error::Config(
                "a TLS client needs a trust file unless insecure connections are allowed".into(),
            ));
        }
    };
    let verifier = ServerVerifier {
        chain: if allow_insecure { None } else { chain },
        algorithms: provider().signature_verification_algorithms,
        validate_hostname,
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let config = match client_cert_and_key {
        Some((cert, key)) => builder
            .with_client_cert_resolver(certified_key(load_certs(cert)?, load_private_key(key)?)?),
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Checks a client certificate chain (DER) against trusted CA certificates (DER) as the
/// broker's client verifier does. For the fuzz target (`fuzz/`); not a stable API.
#[doc(hidden)]
pub fn verify_client_chain(
    anchors: &[&[u8]],
    end_entity: &[u8],
    intermediates: &[&[u8]],
) -> std::result::Result<(), rustls::Error> {
    let chain = ChainVerifier::from_ders(anchors.iter().copied(), "the given anchors")
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    let intermediates: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|d| CertificateDer::from(*d))
        .collect();
    chain.verify(
        &CertificateDer::from(end_entity),
        &intermediates,
        UnixTime::now(),
        Purpose::ClientAuth,
    )
}

/// A tokio acceptor for a server configuration.
pub fn acceptor(config: Arc<rustls::ServerConfig>) -> tokio_rustls::TlsAcceptor {
    tokio_rustls::TlsAcceptor::from(config)
}

/// The role `AuthenticationProviderTls` gives a connection: the CN of the leaf
/// certificate's subject. With several CNs Pulsar takes the first in RFC 2253 order,
/// which lists the DER's last RDN first — so the last one here.
pub fn peer_role(certs: &[CertificateDer<'_>]) -> Option<String> {
    let leaf = certs.first()?;
    let (_, cert) = X509Certificate::from_der(leaf).ok()?;
    cert.subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())
        .last()
        .map(str::to_owned)
}

/// The end-entity certificate's SubjectPublicKeyInfo.
fn leaf_spki(cert: &CertificateDer<'_>) -> Result<Vec<u8>, rustls::Error> {
    X509Certificate::from_der(cert)
        .map(|(_, c)| c.public_key().raw.to_vec())
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))
}

/// TLS 1.2 handshake signature by the key in `spki`: every algorithm the scheme maps
/// to is tried whose key type matches (ECDSA schemes are not bound to a curve in 1.2).
fn verify_tls12(
    algorithms: &WebPkiSupportedAlgorithms,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let spki = leaf_spki(cert)?;
    let (key_alg, key) = der::split_spki(&spki).ok_or(rustls::Error::InvalidCertificate(
        CertificateError::BadEncoding,
    ))?;
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, algs)| *algs)
        .ok_or(rustls::Error::PeerMisbehaved(
            rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
        ))?;
    let mut matching = candidates
        .iter()
        .filter(|a| a.public_key_alg_id().as_ref() == key_alg)
        .peekable();
    if matching.peek().is_none() {
        return Err(rustls::Error::InvalidCertificate(
            CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
                signature_algorithm_id: candidates
                    .first()
                    .map(|a| a.signature_alg_id().as_ref().to_vec())
                    .unwrap_or_default(),
                public_key_algorithm_id: key_alg.to_vec(),
            },
        ));
    }
    if matching.any(|alg| alg.verify_signature(key, message, dss.signature()).is_ok()) {
        Ok(HandshakeSignatureValid::assertion())
    } else {
        Err(rustls::Error::InvalidCertificate(
            CertificateError::BadSignature,
        ))
    }
}

fn verify_tls13(
    algorithms: &WebPkiSupportedAlgorithms,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let spki = leaf_spki(cert)?;
    rustls::crypto::verify_tls13_signature_with_raw_key(
        message,
        &SubjectPublicKeyInfoDer::from(spki.as_slice()),
        dss,
        algorithms,
    )
}

/// The broker side: checks client certificates against the trust file.
struct ClientVerifier {
    chain: ChainVerifier,
    hints: Vec<DistinguishedName>,
    mandatory: bool,
}

impl fmt::Debug for ClientVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientVerifier")
            .field("trusted_cas", &self.chain.len())
            .field("mandatory", &self.mandatory)
            .finish()
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.chain
            .verify(end_entity, intermediates, now, Purpose::ClientAuth)
            .map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12(&self.chain.algorithms, message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13(&self.chain.algorithms, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.algorithms.supported_schemes()
    }
}

/// The client side: checks the broker's certificate (or not, when insecure).
struct ServerVerifier {
    /// `None`: accept any certificate (`tlsAllowInsecureConnection`).
    chain: Option<ChainVerifier>,
    algorithms: WebPkiSupportedAlgorithms,
    validate_hostname: bool,
}

impl fmt::Debug for ServerVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerVerifier")
            .field("trusted_cas", &self.chain.as_ref().map(ChainVerifier::len))
            .field("validate_hostname", &self.validate_hostname)
            .finish()
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(chain) = &self.chain {
            chain.verify(end_entity, intermediates, now, Purpose::ServerAuth)?;
            if self.validate_hostname {
                let (_, leaf) = X509Certificate::from_der(end_entity).map_err(|_| {
                    rustls::Error::InvalidCertificate(CertificateError::BadEncoding)
                })?;
                if !certificate_matches_name(&leaf, server_name) {
                    return Err(rustls::Error::InvalidCertificate(
                        CertificateError::NotValidForName,
                    ));
                }
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12(&self.algorithms, message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13(&self.algorithms, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// RFC 6125 / RFC 2818 name check: SAN dNSName (a `*` only as the whole leftmost label)
/// or iPAddress; the subject CN only when there is no SAN extension.
fn certificate_matches_name(cert: &X509Certificate<'_>, name: &ServerName<'_>) -> bool {
    let san = cert.subject_alternative_name().ok().flatten();
    match name {
        ServerName::DnsName(dns) => {
            let host = dns.as_ref();
            match san {
                Some(san) => san.value.general_names.iter().any(|g| match g {
                    GeneralName::DNSName(pattern) => dns_matches(pattern, host),
                    _ => false,
                }),
                None => cert
                    .subject()
                    .iter_common_name()
                    .filter_map(|cn| cn.as_str().ok())
                    .any(|cn| dns_matches(cn, host)),
            }
        }
        ServerName::IpAddress(ip) => {
            let ip = IpAddr::from(*ip);
            san.is_some_and(|san| {
                san.value.general_names.iter().any(|g| match g {
                    GeneralName::IPAddress(bytes) => match (ip, bytes.len()) {
                        (IpAddr::V4(v4), 4) => v4.octets() == **bytes,
                        (IpAddr::V6(v6), 16) => v6.octets() == **bytes,
                        _ => false,
                    },
                    _ => false,
                })
            })
        }
        _ => false,
    }
}

fn dns_matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern.trim_end_matches('.');
    let host = host.trim_end_matches('.');
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest.eq_ignore_ascii_case(suffix)),
        None => pattern.eq_ignore_ascii_case(host),
    }
}

#[cfg(test)]
mod tests {
    use super::dns_matches;

    #[test]
    fn wildcards_cover_one_label() {
        assert!(dns_matches("localhost", "LOCALHOST"));
        assert!(dns_matches("*.example.com", "a.example.com"));
        assert!(!dns_matches("*.example.com", "a.b.example.com"));
        assert!(!dns_matches("*.example.com", "example.com"));
        assert!(!dns_matches("a.example.com", "b.example.com"));
    }
}
