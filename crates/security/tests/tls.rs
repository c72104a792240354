//! Real TLS handshakes over in-memory pipes: client-certificate authentication with
//! v3 certificates from rcgen and v1 certificates from `openssl x509 -req`.

mod common;

use common::handshake::{Outcome, handshake};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, ServerConfig, SignatureScheme};
use strobe_security::tls::{load_certs, load_private_key, provider};
use strobe_security::{ClientAuth, client_config, peer_role, server_config};
use x509_parser::prelude::FromDer as _;

/// A directory of PEM files made for one test.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
}

fn ca_params(cn: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Strobe Test");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
}

fn new_ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    CertifiedIssuer::self_signed(ca_params(cn), KeyPair::generate().unwrap()).unwrap()
}

fn leaf_params(cn: &str, sans: &[&str]) -> CertificateParams {
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Strobe Test");
    params.distinguished_name.push(DnType::CommonName, cn);
    params
}

/// Issues a leaf with a fresh P-256 key; writes `<name>.pem` and `<name>.key`.
fn issue(
    files: &Files,
    name: &str,
    params: CertificateParams,
    ca: &Issuer<'_, KeyPair>,
) -> (PathBuf, PathBuf) {
    issue_with_key(files, name, params, ca, KeyPair::generate().unwrap())
}

fn issue_with_key(
    files: &Files,
    name: &str,
    params: CertificateParams,
    ca: &Issuer<'_, KeyPair>,
    key: KeyPair,
) -> (PathBuf, PathBuf) {
    let cert = params.signed_by(&key, ca).unwrap();
    (
        files.write(&format!("{name}.pem"), cert.pem()),
        files.write(&format!("{name}.key"), key.serialize_pem()),
    )
}

/// A broker certificate for "localhost" from `ca`, and `ca`'s PEM as trust file.
fn broker(files: &Files, ca: &CertifiedIssuer<'static, KeyPair>) -> (PathBuf, PathBuf, PathBuf) {
    let (cert, key) = issue(
        files,
        "broker",
        leaf_params("localhost", &["localhost"]),
        ca,
    );
    (cert, key, files.write("ca.pem", ca.pem()))
}

fn ok_role(outcome: &Outcome) -> Option<String> {
    assert!(outcome.client.is_ok(), "{outcome:?}");
    outcome.server.clone().expect("server accepted")
}

fn refused(outcome: &Outcome, why: &str) {
    assert!(
        outcome.server.is_err(),
        "expected a refusal ({why}): {outcome:?}"
    );
    assert!(
        outcome.client.is_err(),
        "the client must not get data ({why}): {outcome:?}"
    );
    let text = outcome.server.as_ref().unwrap_err();
    assert!(text.contains(why), "expected {why:?} in {text:?}");
}

#[tokio::test]
async fn v3_client_certificates() {
    let files = Files::new();
    let ca = new_ca("Strobe CA");
    let (cert, key, trust) = broker(&files, &ca);
    let (client_cert, client_key) = issue(&files, "client", leaf_params("client-role", &[]), &ca);

    // The same subject DN, another key: a forged CA. Signature checks must catch it.
    let forged = new_ca("Strobe CA");
    let (forged_cert, forged_key) = issue(&files, "forged", leaf_params("admin", &[]), &forged);
    // A CA with another name: no issuer found.
    let other = new_ca("Other CA");
    let (other_cert, other_key) = issue(&files, "other", leaf_params("admin", &[]), &other);

    let required = server_config(&cert, &key, Some(&trust), ClientAuth::Required).unwrap();
    let optional = server_config(&cert, &key, Some(&trust), ClientAuth::Optional).unwrap();
    let with_cert =
        |c: &Path, k: &Path| client_config(Some(&trust), Some((c, k)), false, true).unwrap();
    let anonymous = client_config(Some(&trust), None, false, true).unwrap();

    for server in [&required, &optional] {
        let out = handshake(
            server.clone(),
            with_cert(&client_cert, &client_key),
            "localhost",
        )
        .await;
        assert_eq!(ok_role(&out).as_deref(), Some("client-role"));
        refused(
            &handshake(
                server.clone(),
                with_cert(&forged_cert, &forged_key),
                "localhost",
            )
            .await,
            "BadSignature",
        );
        refused(
            &handshake(
                server.clone(),
                with_cert(&other_cert, &other_key),
                "localhost",
            )
            .await,
            "UnknownIssuer",
        );
    }
    refused(
        &handshake(required.clone(), anonymous.clone(), "localhost").await,
        "certificate",
    );
    assert_eq!(
        ok_role(&handshake(optional.clone(), anonymous.clone(), "localhost").await),
        None
    );

    // No client auth at all: a presented certificate is not even asked for.
    let none = server_config(&cert, &key, None, ClientAuth::None).unwrap();
    let out = handshake(none, with_cert(&client_cert, &client_key), "localhost").await;
    assert_eq!(ok_role(&out), None);
    assert!(server_config(&cert, &key, None, ClientAuth::Optional).is_err());
}

#[tokio::test]
async fn dates_purposes_and_intermediates() {
    let files = Files::new();
    let ca = new_ca("Strobe CA");
    let (cert, key, trust) = broker(&files, &ca);
    let server = server_config(&cert, &key, Some(&trust), ClientAuth::Required).unwrap();
    let connect =
        |c: &Path, k: &Path| client_config(Some(&trust), Some((c, k)), false, false).unwrap();

    let mut expired = leaf_params("old", &[]);
    expired.not_before = rcgen::date_time_ymd(2000, 1, 1);
    expired.not_after = rcgen::date_time_ymd(2001, 1, 1);
    let (c, k) = issue(&files, "expired", expired, &ca);
    refused(
        &handshake(server.clone(), connect(&c, &k), "localhost").await,
        "Expired",
    );

    let mut future = leaf_params("new", &[]);
    future.not_before = rcgen::date_time_ymd(2200, 1, 1);
    future.not_after = rcgen::date_time_ymd(2201, 1, 1);
    let (c, k) = issue(&files, "future", future, &ca);
    refused(
        &handshake(server.clone(), connect(&c, &k), "localhost").await,
        "NotValidYet",
    );

    let mut server_only = leaf_params("eku", &[]);
    server_only.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (c, k) = issue(&files, "server-only", server_only, &ca);
    refused(
        &handshake(server.clone(), connect(&c, &k), "localhost").await,
        "InvalidPurpose",
    );

    let mut client_eku = leaf_params("eku-client", &[]);
    client_eku.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let (c, k) = issue(&files, "client-eku", client_eku, &ca);
    let out = handshake(server.clone(), connect(&c, &k), "localhost").await;
    assert_eq!(ok_role(&out).as_deref(), Some("eku-client"));

    // root -> intermediate -> leaf: the client must send the intermediate.
    let intermediate = CertifiedIssuer::signed_by(
        ca_params("Strobe Intermediate"),
        KeyPair::generate().unwrap(),
        &ca,
    )
    .unwrap();
    let (leaf, leaf_key) = issue(
        &files,
        "via-intermediate",
        leaf_params("deep", &[]),
        &intermediate,
    );
    let out = handshake(server.clone(), connect(&leaf, &leaf_key), "localhost").await;
    refused(&out, "UnknownIssuer");
    let bundle = files.write(
        "bundle.pem",
        format!(
            "{}{}",
            std::fs::read_to_string(&leaf).unwrap(),
            intermediate.pem()
        ),
    );
    let out = handshake(server.clone(), connect(&bundle, &leaf_key), "localhost").await;
    assert_eq!(ok_role(&out).as_deref(), Some("deep"));

    // A leaf (not a CA) used as an intermediate is refused.
    let fake_ca_key = KeyPair::generate().unwrap();
    let fake_ca_cert = leaf_params("Fake Intermediate", &[])
        .signed_by(&fake_ca_key, &ca)
        .unwrap();
    let fake_issuer = Issuer::new(ca_params("Fake Intermediate"), fake_ca_key);
    let (leaf, leaf_key) = issue(&files, "via-fake", leaf_params("sneaky", &[]), &fake_issuer);
    let bundle = files.write(
        "fake-bundle.pem",
        format!(
            "{}{}",
            std::fs::read_to_string(&leaf).unwrap(),
            fake_ca_cert.pem()
        ),
    );
    refused(
        &handshake(server.clone(), connect(&bundle, &leaf_key), "localhost").await,
        "InvalidPurpose",
    );
}

/// Makes an RSA-2048 v1 CA and v1 certificates with the openssl CLI
/// (`openssl x509 -req` without `-extfile` writes version 1).
struct V1Pki {
    files: Files,
}

impl V1Pki {
    fn new() -> Self {
        let files = Files::new();
        let d = files.dir.path();
        common::openssl(
            d,
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
                "ca.key",
            ],
        );
        common::openssl(
            d,
            &[
                "req",
                "-new",
                "-key",
                "ca.key",
                "-subj",
                "/O=Strobe Test/CN=V1 CA",
                "-out",
                "ca.csr",
            ],
        );
        common::openssl(
            d,
            &[
                "x509", "-req", "-in", "ca.csr", "-signkey", "ca.key", "-days", "3650", "-out",
                "ca.pem",
            ],
        );
        Self { files }
    }

    /// A v1 certificate for `subject`; `traditional` keys are PKCS#1 PEM.
    fn issue(&self, name: &str, subject: &str, traditional: bool) -> (PathBuf, PathBuf) {
        let d = self.files.dir.path();
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let pem = format!("{name}.pem");
        common::openssl(
            d,
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
                &key,
            ],
        );
        if traditional {
            common::openssl(d, &["rsa", "-in", &key, "-traditional", "-out", &key]);
        }
        common::openssl(
            d,
            &["req", "-new", "-key", &key, "-subj", subject, "-out", &csr],
        );
        common::openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "365",
                "-sha256",
                "-out",
                &pem,
            ],
        );
        (self.files.path(&pem), self.files.path(&key))
    }

    fn ca(&self) -> PathBuf {
        self.files.path("ca.pem")
    }
}

fn assert_v1(path: &Path) {
    let der = load_certs(path).unwrap().remove(0);
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
    assert_eq!(
        cert.version(),
        x509_parser::x509::X509Version::V1,
        "{}",
        path.display()
    );
    // And webpki, which rustls uses by default, refuses it: the reason for our verifier.
    assert!(rustls::server::ParsedCertificate::try_from(&der).is_err());
}

#[tokio::test]
async fn v1_certificates_from_openssl() {
    let pki = V1Pki::new();
    let (broker_cert, broker_key) = pki.issue("broker", "/O=Strobe/CN=localhost", true);
    let (client_cert, client_key) = pki.issue("client", "/C=US/O=Strobe/OU=Pulsar/CN=admin", true);
    for p in [&pki.ca(), &broker_cert, &client_cert] {
        assert_v1(p);
    }
    let trust = pki.ca();
    let server = server_config(
        &broker_cert,
        &broker_key,
        Some(&trust),
        ClientAuth::Required,
    )
    .unwrap();
    // TLS 1.3 (the default), hostname checked through the CN (a v1 cert has no SAN).
    let client =
        client_config(Some(&trust), Some((&client_cert, &client_key)), false, true).unwrap();
    let out = handshake(server.clone(), client.clone(), "localhost").await;
    assert_eq!(ok_role(&out).as_deref(), Some("admin"));
    let out = handshake(server.clone(), client.clone(), "broker.example").await;
    assert!(
        out.client.as_ref().unwrap_err().contains("NotValidForName"),
        "{out:?}"
    );
    // Pulsar clients do not check the hostname by default.
    let lax = client_config(
        Some(&trust),
        Some((&client_cert, &client_key)),
        false,
        false,
    )
    .unwrap();
    assert_eq!(
        ok_role(&handshake(server.clone(), lax, "broker.example").await).as_deref(),
        Some("admin")
    );

    // TLS 1.2: the server verifies the v1 client's CertificateVerify signature.
    let client12 = tls12_client_trusting_anything(&client_cert, &client_key);
    let out = handshake(server.clone(), client12, "localhost").await;
    assert_eq!(ok_role(&out).as_deref(), Some("admin"));
    // ...and our client verifies a v1 server's ServerKeyExchange signature.
    let server12 = tls12_server(&broker_cert, &broker_key);
    let out = handshake(
        server12,
        client_config(Some(&trust), None, false, true).unwrap(),
        "localhost",
    )
    .await;
    assert_eq!(ok_role(&out), None);

    // A v1 client certificate from another v1 CA is refused.
    let stranger = V1Pki::new();
    let (c, k) = stranger.issue("stranger", "/O=Strobe/CN=admin", false);
    let client = client_config(Some(&trust), Some((&c, &k)), false, false).unwrap();
    refused(
        &handshake(server.clone(), client, "localhost").await,
        "BadSignature",
    );
    // The server's certificate from an untrusted CA is refused by our client unless insecure.
    let out = handshake(
        server.clone(),
        client_config(
            Some(&stranger.ca()),
            Some((&client_cert, &client_key)),
            false,
            false,
        )
        .unwrap(),
        "localhost",
    )
    .await;
    assert!(out.client.is_err(), "{out:?}");
    let insecure = client_config(None, Some((&client_cert, &client_key)), true, true).unwrap();
    assert_eq!(
        ok_role(&handshake(server.clone(), insecure, "whatever").await).as_deref(),
        Some("admin")
    );
    assert!(client_config(None, None, false, false).is_err());
}

/// Pulsar's own test certificates (apache/pulsar-client-python's `tests/test-conf`, not part
/// of this repository): broker-cert is v3, client-cert is v1 with CN=admin. Opt-in: run with
/// `PULSAR_TEST_CONF=<that folder> cargo test -p strobe-security --test tls -- --ignored`
/// (`tests/upstream/run-python-suite.sh` does, as it has the folder). The v1 path itself is
/// covered on every machine by `v1_certificates_from_openssl`.
#[tokio::test]
#[ignore = "needs PULSAR_TEST_CONF: apache/pulsar-client-python's tests/test-conf"]
async fn upstream_pulsar_test_certificates() {
    let dir = std::env::var_os("PULSAR_TEST_CONF")
        .map(std::path::PathBuf::from)
        .expect("PULSAR_TEST_CONF must name apache/pulsar-client-python's tests/test-conf folder");
    assert!(
        dir.join("client-cert.pem").exists(),
        "{} has no client-cert.pem: PULSAR_TEST_CONF must name apache/pulsar-client-python's tests/test-conf",
        dir.display()
    );
    let trust = dir.join("cacert.pem");
    let server = server_config(
        &dir.join("broker-cert.pem"),
        &dir.join("broker-key.pem"),
        Some(&trust),
        ClientAuth::Optional,
    )
    .unwrap();
    let client = client_config(
        Some(&trust),
        Some((&dir.join("client-cert.pem"), &dir.join("client-key.pem"))),
        false,
        false,
    )
    .unwrap();
    let out = handshake(server.clone(), client, "localhost").await;
    assert_eq!(ok_role(&out).as_deref(), Some("admin"));
    let tls12 =
        tls12_client_trusting_anything(&dir.join("client-cert.pem"), &dir.join("client-key.pem"));
    assert_eq!(
        ok_role(&handshake(server, tls12, "localhost").await).as_deref(),
        Some("admin")
    );
}

#[tokio::test]
async fn key_formats_and_curves() {
    let files = Files::new();
    let d = files.dir.path();
    let ca = new_ca("Strobe CA");
    let trust = files.write("ca.pem", ca.pem());
    // A PKCS#1 RSA broker key and a SEC1 EC key preceded by an EC PARAMETERS block.
    common::openssl(
        d,
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "rsa8.key",
        ],
    );
    common::openssl(
        d,
        &["rsa", "-in", "rsa8.key", "-traditional", "-out", "rsa1.key"],
    );
    common::openssl(
        d,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-out",
            "sec1.key",
        ],
    );
    assert!(
        std::fs::read_to_string(files.path("sec1.key"))
            .unwrap()
            .starts_with("-----BEGIN EC PARAMETERS")
    );
    for key_file in ["rsa1.key", "rsa8.key", "sec1.key"] {
        let pem = std::fs::read_to_string(files.path(key_file)).unwrap();
        let pkcs8 =
            common::openssl_stdin(d, &["pkcs8", "-topk8", "-nocrypt"], Some(pem.as_bytes()));
        let key = KeyPair::from_pem(std::str::from_utf8(&pkcs8).unwrap()).unwrap();
        let cert = leaf_params("localhost", &["localhost"])
            .signed_by(&key, &ca)
            .unwrap();
        let cert_path = files.write(&format!("{key_file}.pem"), cert.pem());
        let server = server_config(
            &cert_path,
            &files.path(key_file),
            Some(&trust),
            ClientAuth::Optional,
        )
        .unwrap_or_else(|e| panic!("{key_file}: {e}"));
        let client = client_config(Some(&trust), None, false, true).unwrap();
        assert_eq!(
            ok_role(&handshake(server, client, "localhost").await),
            None,
            "{key_file}"
        );
    }
    // Client certificates on P-384 and P-256.
    let (cert, key, _) = broker(&files, &ca);
    let server = server_config(&cert, &key, Some(&trust), ClientAuth::Required).unwrap();
    for (alg, cn) in [
        (&rcgen::PKCS_ECDSA_P384_SHA384, "p384"),
        (&rcgen::PKCS_ECDSA_P256_SHA256, "p256"),
    ] {
        let (c, k) = issue_with_key(
            &files,
            cn,
            leaf_params(cn, &[]),
            &ca,
            KeyPair::generate_for(alg).unwrap(),
        );
        let client = client_config(Some(&trust), Some((&c, &k)), false, true).unwrap();
        assert_eq!(
            ok_role(&handshake(server.clone(), client.clone(), "localhost").await).as_deref(),
            Some(cn)
        );
        let client12 = tls12_client_trusting_anything(&c, &k);
        assert_eq!(
            ok_role(&handshake(server.clone(), client12, "localhost").await).as_deref(),
            Some(cn)
        );
    }
    assert!(load_certs(&files.path("missing.pem")).is_err());
    assert!(load_private_key(&trust).is_err());
}

#[tokio::test]
async fn handshake_signatures_must_match_the_certificate() {
    // Valid chains, wrong private keys: only the handshake signature can tell.
    let pki = V1Pki::new();
    let (v1_cert, _) = pki.issue("v1", "/O=Strobe/CN=admin", false);
    let (_, other_key) = pki.issue("other", "/O=Strobe/CN=other", false);
    let files = Files::new();
    let ca = new_ca("Strobe CA");
    let (v3_cert, _) = issue(&files, "v3", leaf_params("localhost", &["localhost"]), &ca);
    let (_, v3_other_key) = issue(&files, "v3b", leaf_params("x", &[]), &ca);
    let v3_trust = files.write("ca.pem", ca.pem());
    // A broker accepting both CAs' clients.
    let both = files.write(
        "both.pem",
        format!("{}{}", ca.pem(), std::fs::read_to_string(pki.ca()).unwrap()),
    );
    let (broker_cert, broker_key) = issue(
        &files,
        "broker",
        leaf_params("localhost", &["localhost"]),
        &ca,
    );
    let server =
        server_config(&broker_cert, &broker_key, Some(&both), ClientAuth::Required).unwrap();

    for versions in [
        &[&rustls::version::TLS12][..],
        &[&rustls::version::TLS13][..],
    ] {
        for (cert, key) in [(&v1_cert, &other_key), (&v3_cert, &v3_other_key)] {
            let out = handshake(server.clone(), raw_client(versions, cert, key), "localhost").await;
            assert!(
                out.server.is_err() && out.client.is_err(),
                "{versions:?} {out:?}"
            );
            let text = out.server.unwrap_err();
            assert!(
                text.contains("BadSignature") || text.contains("Signature"),
                "{text}"
            );
        }
        // Our client refuses a server whose key does not match its certificate.
        let bad_server = raw_server(versions, &v3_cert, &v3_other_key);
        let out = handshake(
            bad_server,
            client_config(Some(&v3_trust), None, false, true).unwrap(),
            "localhost",
        )
        .await;
        assert!(out.client.is_err(), "{versions:?} {out:?}");
    }
    // server_config and client_config check the pairing up front.
    assert!(server_config(&v1_cert, &other_key, None, ClientAuth::None).is_err());
    assert!(client_config(Some(&v3_trust), Some((&v1_cert, &other_key)), false, false).is_err());
}

#[test]
fn peer_role_takes_the_leaf_cn() {
    let ca = new_ca("Strobe CA");
    let key = KeyPair::generate().unwrap();
    let mut params = leaf_params("first", &[]);
    // rcgen keeps one value per type; build a two-CN subject with openssl instead below.
    params.distinguished_name.push(DnType::CommonName, "role-1");
    let cert = params.signed_by(&key, &ca).unwrap();
    let ca_der = ca.der().clone();
    assert_eq!(
        peer_role(&[cert.der().clone(), ca_der.clone()]).as_deref(),
        Some("role-1")
    );
    assert_eq!(peer_role(&[]), None);
    assert_eq!(peer_role(&[CertificateDer::from(vec![1, 2, 3])]), None);

    let mut no_cn = CertificateParams::new(vec!["x.example".to_owned()]).unwrap();
    no_cn.distinguished_name = rcgen::DistinguishedName::new();
    no_cn
        .distinguished_name
        .push(DnType::OrganizationName, "no cn");
    let cert = no_cn.signed_by(&key, &ca).unwrap();
    assert_eq!(peer_role(&[cert.der().clone()]), None);

    // Two CNs: Pulsar reads the RFC 2253 form, which starts from the last RDN.
    let files = Files::new();
    let d = files.dir.path();
    common::openssl(
        d,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            "k.pem",
        ],
    );
    common::openssl(
        d,
        &[
            "req",
            "-new",
            "-x509",
            "-key",
            "k.pem",
            "-subj",
            "/CN=outer/O=x/CN=inner",
            "-days",
            "1",
            "-out",
            "c.pem",
        ],
    );
    let rfc2253 = common::openssl(
        d,
        &[
            "x509", "-in", "c.pem", "-noout", "-subject", "-nameopt", "RFC2253",
        ],
    );
    assert!(
        String::from_utf8(rfc2253)
            .unwrap()
            .contains("subject=CN=inner,O=x,CN=outer")
    );
    let certs = load_certs(&files.path("c.pem")).unwrap();
    assert_eq!(peer_role(&certs).as_deref(), Some("inner"));
}

fn raw_key(cert: &Path, key: &Path) -> Arc<rustls::sign::SingleCertAndKey> {
    // No consistency check here on purpose: tests use it to pair a certificate with the wrong key.
    Arc::new(rustls::sign::SingleCertAndKey::from(
        rustls::sign::CertifiedKey::new(
            load_certs(cert).unwrap(),
            provider()
                .key_provider
                .load_private_key(load_private_key(key).unwrap())
                .unwrap(),
        ),
    ))
}

fn raw_server(
    versions: &[&'static rustls::SupportedProtocolVersion],
    cert: &Path,
    key: &Path,
) -> Arc<ServerConfig> {
    Arc::new(
        ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(raw_key(cert, key)),
    )
}

fn tls12_server(cert: &Path, key: &Path) -> Arc<ServerConfig> {
    raw_server(&[&rustls::version::TLS12], cert, key)
}

/// A client presenting `cert` (with `key`, matching or not), trusting any server.
fn raw_client(
    versions: &[&'static rustls::SupportedProtocolVersion],
    cert: &Path,
    key: &Path,
) -> Arc<ClientConfig> {
    Arc::new(
        ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(TrustAnything))
            .with_client_cert_resolver(raw_key(cert, key)),
    )
}

/// A TLS 1.2-only client presenting `cert`, trusting any server (the server side is under test).
fn tls12_client_trusting_anything(cert: &Path, key: &Path) -> Arc<ClientConfig> {
    raw_client(&[&rustls::version::TLS12], cert, key)
}

#[derive(Debug)]
struct TrustAnything;

impl ServerCertVerifier for TrustAnything {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
