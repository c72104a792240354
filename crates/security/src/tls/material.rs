//! What every TLS configuration here starts from: the crypto provider, and
//! certificates and keys read from PEM files. Kept apart from `tls`, which
//! uses the chain verifier, so that the verifier can use them too without the
//! two modules importing each other.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

/// The provider everything here uses: rustls's `ring` provider.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// All certificates in a PEM file (text around the PEM blocks, as in Pulsar's test
/// files, is ignored).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::Tls(format!("reading certificates from {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Tls(format!("no certificate in {}", path.display())));
    }
    Ok(certs)
}

/// The first private key in a PEM file: PKCS#8 (`PRIVATE KEY`), PKCS#1
/// (`RSA PRIVATE KEY`) or SEC1 (`EC PRIVATE KEY`, an `EC PARAMETERS` block before it is skipped).
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        Error::Tls(format!(
            "reading a private key from {}: {e}",
            path.display()
        ))
    })
}
