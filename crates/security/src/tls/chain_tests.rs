//! Path validation: the work bound on both paths, and the CA checks of the custom path.

use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::CertificateError;
use rustls::pki_types::{CertificateDer, UnixTime};

use super::{ChainVerifier, MAX_SIGNATURE_CHECKS, Purpose};

fn params(cn: &str, ca: Option<BasicConstraints>, serial: u64) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = match ca {
        Some(c) => IsCa::Ca(c),
        None => IsCa::NoCa,
    };
    params.serial_number = Some(SerialNumber::from(serial));
    // Without this rcgen writes an AKI naming the issuer key, which is fine but lets
    // a builder prune candidates; the attack below needs none of that help.
    params.use_authority_key_identifier_extension = false;
    params
}

fn verifier(anchors: &[&CertificateDer<'_>]) -> ChainVerifier {
    ChainVerifier::from_ders(anchors.iter().map(|d| d.as_ref()), "test").unwrap()
}

fn check(
    v: &ChainVerifier,
    leaf: &CertificateDer<'_>,
    chain: &[CertificateDer<'static>],
) -> (Result<(), CertificateError>, usize) {
    v.verify_counted(leaf, chain, UnixTime::now(), Purpose::ClientAuth)
}

/// Twelve intermediates sharing one subject and one key (each signs every other), a
/// trusted CA with that same subject but another key: every ordering looks plausible
/// and none ends at the anchor.
struct Loop {
    anchor: CertificateDer<'static>,
    intermediates: Vec<CertificateDer<'static>>,
    key: KeyPair,
    subject: CertificateParams,
}

fn same_subject_loop(n: u64) -> Loop {
    let subject = params("Loop CA", Some(BasicConstraints::Unconstrained), 1);
    let anchor = subject
        .clone()
        .self_signed(&KeyPair::generate().unwrap())
        .unwrap()
        .der()
        .clone();
    let key = KeyPair::generate().unwrap();
    let issuer = Issuer::from_params(&subject, &key);
    let intermediates = (0..n)
        .map(|i| {
            params("Loop CA", Some(BasicConstraints::Unconstrained), 100 + i)
                .signed_by(&key, &issuer)
                .unwrap()
                .der()
                .clone()
        })
        .collect();
    Loop {
        anchor,
        intermediates,
        key,
        subject,
    }
}

#[test]
fn a_loop_of_same_subject_intermediates_costs_a_bounded_number_of_checks() {
    let attack = same_subject_loop(12);
    let v = verifier(&[&attack.anchor]);
    let issuer = Issuer::from_params(&attack.subject, &attack.key);
    let leaf_key = KeyPair::generate().unwrap();
    // A v3 end entity: webpki's path.
    let leaf = params("client", None, 7)
        .signed_by(&leaf_key, &issuer)
        .unwrap()
        .der()
        .clone();
    let (result, spent) = check(&v, &leaf, &attack.intermediates);
    assert!(result.is_err(), "{result:?}");
    assert!(spent <= MAX_SIGNATURE_CHECKS, "webpki path spent {spent}");
    // A CA certificate as end entity: webpki refuses it as such, so the custom path
    // builds (and is bound the same way).
    let ca_leaf = params("ca client", Some(BasicConstraints::Unconstrained), 8)
        .signed_by(&leaf_key, &issuer)
        .unwrap()
        .der()
        .clone();
    let (result, spent) = check(&v, &ca_leaf, &attack.intermediates);
    assert!(result.is_err(), "{result:?}");
    assert!(spent <= MAX_SIGNATURE_CHECKS, "custom path spent {spent}");
    assert!(spent > 12, "the custom path did search ({spent} checks)");
}

/// Root → intermediate(s) → end entity, with the intermediate's parameters given.
fn chain_through(
    first: CertificateParams,
    extra_below: bool,
    leaf_is_ca: bool,
) -> (
    ChainVerifier,
    CertificateDer<'static>,
    Vec<CertificateDer<'static>>,
) {
    let root_key = KeyPair::generate().unwrap();
    let root_params = params("Root", Some(BasicConstraints::Unconstrained), 1);
    let root = root_params.clone().self_signed(&root_key).unwrap();
    let root_issuer = Issuer::from_params(&root_params, &root_key);
    let first_key = KeyPair::generate().unwrap();
    let first_cert = first.clone().signed_by(&first_key, &root_issuer).unwrap();
    let mut chain = vec![first_cert.der().clone()];
    let mut issuer_params = first;
    let mut issuer_key = first_key;
    if extra_below {
        let second = params("Second", Some(BasicConstraints::Unconstrained), 3);
        let key = KeyPair::generate().unwrap();
        let cert = second
            .clone()
            .signed_by(&key, &Issuer::from_params(&issuer_params, &issuer_key))
            .unwrap();
        chain.insert(0, cert.der().clone());
        issuer_params = second;
        issuer_key = key;
    }
    let leaf_ca = leaf_is_ca.then_some(BasicConstraints::Unconstrained);
    let leaf = params("client", leaf_ca, 9)
        .signed_by(
            &KeyPair::generate().unwrap(),
            &Issuer::from_params(&issuer_params, &issuer_key),
        )
        .unwrap()
        .der()
        .clone();
    (verifier(&[root.der()]), leaf, chain)
}

#[test]
fn ca_constraints_hold_on_both_paths() {
    for leaf_is_ca in [false, true] {
        let path = if leaf_is_ca { "custom" } else { "webpki" };
        let plain = params("First", Some(BasicConstraints::Unconstrained), 2);
        let (v, leaf, chain) = chain_through(plain.clone(), false, leaf_is_ca);
        assert_eq!(check(&v, &leaf, &chain).0, Ok(()), "{path}: a plain chain");
        let (v, leaf, chain) = chain_through(plain, true, leaf_is_ca);
        assert_eq!(check(&v, &leaf, &chain).0, Ok(()), "{path}: two deep");

        // pathLen 0 allows no intermediate below it.
        let len0 = params("First", Some(BasicConstraints::Constrained(0)), 2);
        let (v, leaf, chain) = chain_through(len0.clone(), false, leaf_is_ca);
        assert_eq!(
            check(&v, &leaf, &chain).0,
            Ok(()),
            "{path}: pathLen 0, none below"
        );
        let (v, leaf, chain) = chain_through(len0, true, leaf_is_ca);
        assert!(
            check(&v, &leaf, &chain).0.is_err(),
            "{path}: pathLen 0 with one below"
        );

        // keyUsage without keyCertSign: not an issuer.
        let mut no_sign = params("First", Some(BasicConstraints::Unconstrained), 2);
        no_sign.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let (v, leaf, chain) = chain_through(no_sign, false, leaf_is_ca);
        assert!(
            check(&v, &leaf, &chain).0.is_err(),
            "{path}: no keyCertSign"
        );
        let mut signs = params("First", Some(BasicConstraints::Unconstrained), 2);
        signs.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let (v, leaf, chain) = chain_through(signs, false, leaf_is_ca);
        assert_eq!(check(&v, &leaf, &chain).0, Ok(()), "{path}: keyCertSign");

        // An unknown critical extension on the intermediate.
        let mut critical = params("First", Some(BasicConstraints::Unconstrained), 2);
        let mut ext = CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 99999, 1], vec![5, 0]);
        ext.set_criticality(true);
        critical.custom_extensions = vec![ext];
        let (v, leaf, chain) = chain_through(critical, false, leaf_is_ca);
        assert!(
            check(&v, &leaf, &chain).0.is_err(),
            "{path}: unknown critical"
        );

        // Not a CA at all.
        let (v, leaf, chain) = chain_through(params("First", None, 2), false, leaf_is_ca);
        assert!(
            check(&v, &leaf, &chain).0.is_err(),
            "{path}: intermediate not a CA"
        );
    }
}

#[test]
fn a_trusted_certificate_presented_as_is_is_accepted() {
    let key = KeyPair::generate().unwrap();
    let cert = params("self", Some(BasicConstraints::Unconstrained), 1)
        .self_signed(&key)
        .unwrap();
    let v = verifier(&[cert.der()]);
    assert_eq!(check(&v, cert.der(), &[]).0, Ok(()));
}
