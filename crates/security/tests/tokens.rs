//! Token creation and verification, including interop with signatures made by the
//! `openssl` CLI (an implementation independent of ours).

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Map, Value, json};
use strobe_security::{
    Error, SigningKey, TokenAlgorithm, TokenConfig, TokenVerifier, create_secret_key, create_token,
    create_token_with_claims, parse_relative_time,
};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn claims(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// Flips one bit in the signature part of a token.
fn flip_signature(token: &str) -> String {
    let (head, sig) = token.rsplit_once('.').unwrap();
    let mut bytes = URL_SAFE_NO_PAD.decode(sig).unwrap();
    bytes[0] ^= 1;
    format!("{head}.{}", URL_SAFE_NO_PAD.encode(bytes))
}

#[test]
fn hs256_round_trip_with_expiry_and_remaining_lifetime() {
    let secret = create_secret_key();
    assert_eq!(secret.len(), 32);
    assert_ne!(secret, create_secret_key());
    let key = SigningKey::hmac(&secret).unwrap();
    let token = create_token("token-principal", Some(at(1_000_000)), &key).unwrap();
    // Pulsar's tokens carry only "alg" in the header.
    let header = URL_SAFE_NO_PAD
        .decode(token.split('.').next().unwrap())
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&header).unwrap(),
        json!({"alg": "HS256"})
    );

    let verifier = TokenVerifier::from_secret(&secret).unwrap();
    let ok = verifier.verify(&token, at(999_000)).unwrap();
    assert_eq!(ok.role, "token-principal");
    assert_eq!(ok.expires_at, Some(at(1_000_000)));
    assert_eq!(ok.remaining(at(999_000)), Some(Duration::from_secs(1_000)));
    assert!(!ok.is_expired(at(999_000)));
    assert_eq!(ok.remaining(at(2_000_000)), Some(Duration::ZERO));
    // Valid up to and including the exp instant; expired one millisecond after.
    assert!(verifier.verify(&token, at(1_000_000)).is_ok());
    let late = at(1_000_000) + Duration::from_millis(1);
    assert!(matches!(
        verifier.verify(&token, late),
        Err(Error::Expired { expired_at }) if expired_at == at(1_000_000)
    ));
    // A clock skew allowance moves the line.
    let lenient = TokenVerifier::from_secret(&secret)
        .unwrap()
        .with_clock_skew(Duration::from_secs(60));
    assert!(lenient.verify(&token, at(1_000_059)).is_ok());
    assert!(matches!(
        lenient.verify(&token, at(1_000_061)),
        Err(Error::Expired { .. })
    ));

    // No expiry: never expires.
    let forever = create_token("superUser", None, &key).unwrap();
    let ok = verifier.verify(&forever, at(u32::MAX as u64)).unwrap();
    assert_eq!((ok.role.as_str(), ok.expires_at), ("superUser", None));
    assert_eq!(ok.remaining(at(0)), None);
}

#[test]
fn tampering_is_refused() {
    let secret = create_secret_key();
    let key = SigningKey::hmac(&secret).unwrap();
    let verifier = TokenVerifier::from_secret(&secret).unwrap();
    let token = create_token("alice", None, &key).unwrap();
    assert!(matches!(
        verifier.verify(&flip_signature(&token), at(0)),
        Err(Error::InvalidSignature)
    ));
    // Swap in claims for another subject, keep the signature.
    let parts: Vec<&str> = token.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(r#"{"sub":"admin"}"#),
        parts[2]
    );
    assert!(matches!(
        verifier.verify(&forged, at(0)),
        Err(Error::InvalidSignature)
    ));
    // Another key.
    let other = TokenVerifier::from_secret(&create_secret_key()).unwrap();
    assert!(matches!(
        other.verify(&token, at(0)),
        Err(Error::InvalidSignature)
    ));
}

#[test]
fn alg_none_and_unknown_algorithms_are_refused() {
    let secret = create_secret_key();
    let verifier = TokenVerifier::from_secret(&secret).unwrap();
    let body = URL_SAFE_NO_PAD.encode(r#"{"sub":"admin"}"#);
    for alg in ["none", "None", "HS1", ""] {
        let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"{alg}"}}"#));
        for sig in ["", "AAAA"] {
            let token = format!("{header}.{body}.{sig}");
            assert!(
                matches!(verifier.verify(&token, at(0)), Err(Error::AlgorithmNotAllowed(a)) if a == alg),
                "{alg} {sig}"
            );
        }
    }
    // A header without alg at all.
    let token = format!("{}.{body}.AAAA", URL_SAFE_NO_PAD.encode("{}"));
    assert!(matches!(
        verifier.verify(&token, at(0)),
        Err(Error::Malformed(_))
    ));
}

#[test]
fn hmac_key_strength_follows_jjwt() {
    assert!(matches!(
        TokenVerifier::from_secret(&[7; 31]),
        Err(Error::Key(_))
    ));
    assert!(SigningKey::hmac(&[7; 31]).is_err());
    assert!(SigningKey::hmac_with(TokenAlgorithm::HS512, &[7; 32]).is_err());
    // A 64-byte key signs and verifies all three HMAC sizes.
    let secret = [9u8; 64];
    let verifier = TokenVerifier::from_secret(&secret).unwrap();
    for alg in [
        TokenAlgorithm::HS256,
        TokenAlgorithm::HS384,
        TokenAlgorithm::HS512,
    ] {
        let key = SigningKey::hmac_with(alg, &secret).unwrap();
        let token = create_token("r", None, &key).unwrap();
        assert_eq!(verifier.verify(&token, at(0)).unwrap().role, "r", "{alg}");
    }
    // A 32-byte key cannot verify an HS512 token, even one that is "correct" for it.
    let short = TokenVerifier::from_secret(&secret[..32]).unwrap();
    let key = SigningKey::hmac_with(TokenAlgorithm::HS512, &[1; 64]).unwrap();
    let token = create_token("r", None, &key).unwrap();
    assert!(matches!(
        short.verify(&token, at(0)),
        Err(Error::AlgorithmNotAllowed(_))
    ));
}

#[test]
fn malformed_tokens() {
    let verifier = TokenVerifier::from_secret(&create_secret_key()).unwrap();
    for bad in ["", "   ", "abc", "a.b", "a.b.c.d", "!!.e30.AA", "e30.!!.AA"] {
        assert!(
            matches!(
                verifier.verify(bad, at(0)),
                Err(Error::Malformed(_) | Error::AlgorithmNotAllowed(_))
            ),
            "{bad:?}"
        );
    }
    let not_json = format!("{}.e30.AA", URL_SAFE_NO_PAD.encode("not json"));
    assert!(matches!(
        verifier.verify(&not_json, at(0)),
        Err(Error::Malformed(_))
    ));
}

#[test]
fn claims_role_audience_and_not_before() {
    let secret = create_secret_key();
    let key = SigningKey::hmac(&secret).unwrap();
    let verifier = || TokenVerifier::from_secret(&secret).unwrap();

    let no_sub = create_token_with_claims(&claims(json!({"role": "x"})), &key).unwrap();
    assert!(matches!(verifier().verify(&no_sub, at(0)), Err(Error::MissingClaim(c)) if c == "sub"));
    let custom = verifier().with_role_claim("role");
    assert_eq!(custom.verify(&no_sub, at(0)).unwrap().role, "x");
    let list =
        create_token_with_claims(&claims(json!({"sub": ["first", "second"]})), &key).unwrap();
    assert_eq!(verifier().verify(&list, at(0)).unwrap().role, "first");
    let number = create_token_with_claims(&claims(json!({"sub": 42})), &key).unwrap();
    assert!(matches!(
        verifier().verify(&number, at(0)),
        Err(Error::MissingClaim(_))
    ));

    let aud = verifier().with_audience("aud", "broker-1");
    let one =
        create_token_with_claims(&claims(json!({"sub": "a", "aud": "broker-1"})), &key).unwrap();
    let many =
        create_token_with_claims(&claims(json!({"sub": "a", "aud": ["x", "broker-1"]})), &key)
            .unwrap();
    let wrong =
        create_token_with_claims(&claims(json!({"sub": "a", "aud": ["x", "broker-2"]})), &key)
            .unwrap();
    let none = create_token_with_claims(&claims(json!({"sub": "a"})), &key).unwrap();
    assert!(aud.verify(&one, at(0)).is_ok());
    assert!(aud.verify(&many, at(0)).is_ok());
    assert!(
        matches!(aud.verify(&wrong, at(0)), Err(Error::AudienceMismatch(a)) if a == "broker-1")
    );
    assert!(matches!(aud.verify(&none, at(0)), Err(Error::MissingClaim(c)) if c == "aud"));

    let nbf = create_token_with_claims(&claims(json!({"sub": "a", "nbf": 100})), &key).unwrap();
    assert!(matches!(
        verifier().verify(&nbf, at(99)),
        Err(Error::NotYetValid)
    ));
    assert!(verifier().verify(&nbf, at(100)).is_ok());
    let bad_exp =
        create_token_with_claims(&claims(json!({"sub": "a", "exp": "soon"})), &key).unwrap();
    assert!(matches!(
        verifier().verify(&bad_exp, at(0)),
        Err(Error::Malformed(_))
    ));
}

#[test]
fn command_data_and_http_header_forms() {
    let secret = create_secret_key();
    let key = SigningKey::hmac(&secret).unwrap();
    let verifier = TokenVerifier::from_secret(&secret).unwrap();
    let token = create_token("bob", None, &key).unwrap();
    // A token read from a file still has its newline.
    let data = format!("{token}\n");
    assert_eq!(
        verifier
            .verify_command_data(data.as_bytes(), at(0))
            .unwrap()
            .role,
        "bob"
    );
    assert!(verifier.verify_command_data(&[0xff, 0xfe], at(0)).is_err());
    let header = format!("Bearer {token}");
    assert_eq!(
        verifier.verify_http_header(&header, at(0)).unwrap().role,
        "bob"
    );
    assert!(
        verifier
            .verify_http_header(&format!("Basic {token}"), at(0))
            .is_err()
    );
}

#[test]
fn config_reads_pulsar_key_settings() {
    let dir = tempfile::tempdir().unwrap();
    let secret = create_secret_key();
    // `pulsar tokens create-secret-key --output F` writes the raw bytes.
    let path = dir.path().join("secret.key");
    std::fs::write(&path, &secret).unwrap();
    let token = create_token("token-principal", None, &SigningKey::hmac(&secret).unwrap()).unwrap();
    for setting in [
        format!("file://{}", path.display()),
        path.display().to_string(),
        format!("data:;base64,{}", STANDARD.encode(&secret)),
        STANDARD.encode(&secret),
    ] {
        let config = TokenConfig {
            secret_key: Some(setting.clone()),
            ..TokenConfig::default()
        };
        let verifier = TokenVerifier::from_config(&config).unwrap();
        assert_eq!(
            verifier.verify(&token, at(0)).unwrap().role,
            "token-principal",
            "{setting}"
        );
        // Debug output shows neither the setting nor the key.
        let shown = format!("{config:?} {verifier:?}");
        assert!(!shown.contains(&STANDARD.encode(&secret)), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }

    let base = TokenConfig {
        secret_key: Some(STANDARD.encode(&secret)),
        ..TokenConfig::default()
    };
    let claim_only = TokenConfig {
        audience_claim: Some("aud".into()),
        ..base.clone()
    };
    assert!(matches!(
        TokenVerifier::from_config(&claim_only),
        Err(Error::Config(_))
    ));
    let with_role = TokenConfig {
        auth_claim: Some("role".into()),
        audience_claim: Some("aud".into()),
        audience: Some("me".into()),
        ..base.clone()
    };
    let v = TokenVerifier::from_config(&with_role).unwrap();
    let t = create_token_with_claims(
        &claims(json!({"role": "r1", "aud": "me"})),
        &SigningKey::hmac(&secret).unwrap(),
    )
    .unwrap();
    assert_eq!(v.verify(&t, at(0)).unwrap().role, "r1");
    assert!(matches!(
        TokenVerifier::from_config(&TokenConfig::default()),
        Err(Error::Config(_))
    ));
}

#[test]
fn rsa_keys_from_openssl_pem_and_der_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::openssl(
        d,
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "pk8.pem",
        ],
    );
    common::openssl(d, &["pkey", "-in", "pk8.pem", "-pubout", "-out", "pub.pem"]);
    common::openssl(
        d,
        &[
            "pkey", "-in", "pk8.pem", "-pubout", "-outform", "DER", "-out", "pub.der",
        ],
    );
    common::openssl(
        d,
        &[
            "pkcs8", "-topk8", "-nocrypt", "-in", "pk8.pem", "-outform", "DER", "-out", "pk8.der",
        ],
    );
    // OpenSSL 3.0's `pkey -outform DER` writes PKCS#1 for RSA keys.
    common::openssl(
        d,
        &[
            "rsa",
            "-in",
            "pk8.pem",
            "-traditional",
            "-outform",
            "DER",
            "-out",
            "pkcs1.der",
        ],
    );
    common::openssl(
        d,
        &["rsa", "-in", "pk8.pem", "-traditional", "-out", "pkcs1.pem"],
    );

    let pub_pem = std::fs::read(d.join("pub.pem")).unwrap();
    let pub_der = std::fs::read(d.join("pub.der")).unwrap();
    for private in ["pk8.pem", "pk8.der", "pkcs1.pem", "pkcs1.der"] {
        let key = SigningKey::rsa(&std::fs::read(d.join(private)).unwrap())
            .unwrap_or_else(|e| panic!("{private}: {e}"));
        assert_eq!(key.algorithm(), TokenAlgorithm::RS256);
        assert_eq!(key.public_key_spki().unwrap(), pub_der, "{private}");
        let token = create_token("svc", Some(at(500)), &key).unwrap();
        for public in [&pub_pem, &pub_der] {
            let v = TokenVerifier::from_public_key(public).unwrap();
            assert_eq!(v.verify(&token, at(400)).unwrap().role, "svc");
            assert!(matches!(
                v.verify(&flip_signature(&token), at(400)),
                Err(Error::InvalidSignature)
            ));
            assert!(matches!(
                v.verify(&token, at(501)),
                Err(Error::Expired { .. })
            ));
        }
        assert!(!format!("{key:?}").contains("BEGIN"));
    }
    for alg in [
        TokenAlgorithm::RS384,
        TokenAlgorithm::RS512,
        TokenAlgorithm::PS256,
        TokenAlgorithm::PS512,
    ] {
        let key =
            SigningKey::from_private_key(alg, &std::fs::read(d.join("pk8.pem")).unwrap()).unwrap();
        let token = create_token("svc", None, &key).unwrap();
        let v = TokenVerifier::from_public_key(&pub_der).unwrap();
        assert_eq!(v.verify(&token, at(0)).unwrap().role, "svc", "{alg}");
    }

    // A token signed by openssl itself (RS256 = SHA-256 + PKCS#1 v1.5).
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(r#"{"sub":"from-openssl"}"#)
    );
    let sig = common::openssl_stdin(
        d,
        &["dgst", "-sha256", "-sign", "pk8.pem"],
        Some(signing_input.as_bytes()),
    );
    let token = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig));
    let config = TokenConfig {
        public_key: Some(format!("file://{}", d.join("pub.der").display())),
        public_alg: Some("RS256".into()),
        ..TokenConfig::default()
    };
    let v = TokenVerifier::from_config(&config).unwrap();
    assert_eq!(v.verify(&token, at(0)).unwrap().role, "from-openssl");
    let wrong_family = TokenConfig {
        public_alg: Some("ES256".into()),
        ..config
    };
    assert!(matches!(
        TokenVerifier::from_config(&wrong_family),
        Err(Error::Config(_))
    ));
}

#[test]
fn hs_rs_confusion_is_refused() {
    // The classic attack: sign HS256 with the RSA *public* key bytes as the HMAC secret.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::openssl(
        d,
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "k.pem",
        ],
    );
    common::openssl(d, &["pkey", "-in", "k.pem", "-pubout", "-out", "pub.pem"]);
    common::openssl(
        d,
        &[
            "pkey", "-in", "k.pem", "-pubout", "-outform", "DER", "-out", "pub.der",
        ],
    );
    let verifier =
        TokenVerifier::from_public_key(&std::fs::read(d.join("pub.pem")).unwrap()).unwrap();
    for public in ["pub.pem", "pub.der"] {
        let forged_key = SigningKey::hmac(&std::fs::read(d.join(public)).unwrap()).unwrap();
        let forged = create_token("admin", None, &forged_key).unwrap();
        assert!(matches!(
            verifier.verify(&forged, at(0)),
            Err(Error::AlgorithmNotAllowed(a)) if a == "HS256"
        ));
    }
    // And an HMAC verifier does not take RS256 tokens.
    let hmac = TokenVerifier::from_secret(&create_secret_key()).unwrap();
    let rs = create_token(
        "x",
        None,
        &SigningKey::rsa(&std::fs::read(d.join("k.pem")).unwrap()).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        hmac.verify(&rs, at(0)),
        Err(Error::AlgorithmNotAllowed(_))
    ));
}

#[test]
fn ecdsa_p256_and_p384() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (curve, alg, other) in [
        ("P-256", TokenAlgorithm::ES256, TokenAlgorithm::ES384),
        ("P-384", TokenAlgorithm::ES384, TokenAlgorithm::ES256),
    ] {
        let curve_opt = format!("ec_paramgen_curve:{curve}");
        common::openssl(
            d,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                &curve_opt,
                "-out",
                "ec.pem",
            ],
        );
        common::openssl(
            d,
            &["pkey", "-in", "ec.pem", "-pubout", "-out", "ecpub.pem"],
        );
        let key =
            SigningKey::from_private_key(alg, &std::fs::read(d.join("ec.pem")).unwrap()).unwrap();
        assert!(
            SigningKey::from_private_key(other, &std::fs::read(d.join("ec.pem")).unwrap()).is_err()
        );
        let token = create_token("ec-user", None, &key).unwrap();
        let v =
            TokenVerifier::from_public_key(&std::fs::read(d.join("ecpub.pem")).unwrap()).unwrap();
        assert_eq!(v.verify(&token, at(0)).unwrap().role, "ec-user", "{curve}");
        assert!(matches!(
            v.verify(&flip_signature(&token), at(0)),
            Err(Error::InvalidSignature)
        ));
        let spki = key.public_key_spki().unwrap();
        assert!(
            TokenVerifier::from_public_key(&spki)
                .unwrap()
                .verify(&token, at(0))
                .is_ok()
        );
    }
}

#[test]
fn hs256_signed_by_openssl_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let secret = create_secret_key();
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"typ":"JWT","alg":"HS256"}"#),
        URL_SAFE_NO_PAD.encode(r#"{"sub":"hmac-openssl","exp":2000000000}"#)
    );
    let macopt = format!("hexkey:{hex}");
    let mac = common::openssl_stdin(
        dir.path(),
        &[
            "dgst", "-sha256", "-mac", "HMAC", "-macopt", &macopt, "-binary",
        ],
        Some(signing_input.as_bytes()),
    );
    let token = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(mac));
    let v = TokenVerifier::from_secret(&secret).unwrap();
    let ok = v.verify(&token, at(1_999_999_999)).unwrap();
    assert_eq!(ok.role, "hmac-openssl");
    assert_eq!(
        ok.remaining(at(1_999_999_999)),
        Some(Duration::from_secs(1))
    );
}

#[test]
fn relative_times_like_pulsar() {
    assert_eq!(parse_relative_time("30").unwrap(), Duration::from_secs(30));
    assert_eq!(parse_relative_time("30s").unwrap(), Duration::from_secs(30));
    assert_eq!(
        parse_relative_time("30m").unwrap(),
        Duration::from_secs(1800)
    );
    assert_eq!(
        parse_relative_time("1h").unwrap(),
        Duration::from_secs(3600)
    );
    assert_eq!(
        parse_relative_time("7d").unwrap(),
        Duration::from_secs(604_800)
    );
    assert_eq!(
        parse_relative_time("2w").unwrap(),
        Duration::from_secs(1_209_600)
    );
    assert_eq!(
        parse_relative_time("1y").unwrap(),
        Duration::from_secs(31_536_000)
    );
    for bad in ["", "h", "1x", "-1h", "1.5h", "99999999999999999999y"] {
        assert!(parse_relative_time(bad).is_err(), "{bad}");
    }
}

#[test]
fn claims_come_back_and_show_does_not_verify() {
    let secret = create_secret_key();
    let key = SigningKey::hmac(&secret).unwrap();
    let token = create_token_with_claims(
        &claims(json!({"sub": "a", "tenant": "t1", "exp": 50})),
        &key,
    )
    .unwrap();
    let verifier = TokenVerifier::from_secret(&secret).unwrap();
    let (ok, all) = verifier.verify_with_claims(&token, at(10)).unwrap();
    assert_eq!(ok.role, "a");
    assert_eq!(all.get("tenant"), Some(&json!("t1")));
    // decode_unverified reads even a token whose signature is broken, and says nothing about it.
    let (header, body) = strobe_security::decode_unverified(&flip_signature(&token)).unwrap();
    assert_eq!(header.get("alg"), Some(&json!("HS256")));
    assert_eq!(body.get("sub"), Some(&json!("a")));
    assert!(strobe_security::decode_unverified("nodots").is_err());
    assert_eq!(
        strobe_security::encode_key_base64(&[1, 2, 3, 0xff]),
        "AQID/w=="
    );
}
