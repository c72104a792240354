//! Provider selection for CONNECT and HTTP, set up like the Python client tests' broker:
//! providers TLS, token and basic, anonymousUserRole=anonymous.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{CertificateParams, DnType, KeyPair};
use rustls::pki_types::CertificateDer;
use strobe_security::{
    AuthMethod, Authenticator, BasicAuthProvider, Error, SigningKey, TokenVerifier,
    create_secret_key, create_token,
};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn broker(secret: &[u8], anonymous: Option<&str>) -> Authenticator {
    Authenticator {
        enabled: true,
        token: Some(TokenVerifier::from_secret(secret).unwrap()),
        basic: Some(
            BasicAuthProvider::from_htpasswd("admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.")
                .unwrap(),
        ),
        tls: true,
        anonymous_role: anonymous.map(str::to_owned),
    }
}

fn client_cert(cn: &str) -> CertificateDer<'static> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params
        .self_signed(&KeyPair::generate().unwrap())
        .unwrap()
        .der()
        .clone()
}

#[test]
fn connect_picks_the_named_provider() {
    let secret = create_secret_key();
    let key = SigningKey::hmac(&secret).unwrap();
    let auth = broker(&secret, Some("anonymous"));
    let token = create_token("token-principal", Some(at(100)), &key).unwrap();

    let ok = auth
        .authenticate_connect(Some("token"), Some(token.as_bytes()), &[], at(50))
        .unwrap();
    assert_eq!(
        (ok.role.as_deref(), ok.method, ok.expires_at),
        (Some("token-principal"), AuthMethod::Token, Some(at(100)))
    );
    assert!(matches!(
        auth.authenticate_connect(Some("token"), Some(token.as_bytes()), &[], at(101)),
        Err(Error::Expired { .. })
    ));
    // A broken token is an error, not a fall back to anonymous.
    assert!(
        auth.authenticate_connect(Some("token"), Some(b"x.y.z"), &[], at(0))
            .is_err()
    );
    assert!(
        auth.authenticate_connect(Some("token"), None, &[], at(0))
            .is_err()
    );

    let ok = auth
        .authenticate_connect(Some("basic"), Some(b"admin:123456"), &[], at(0))
        .unwrap();
    assert_eq!(
        (ok.role.as_deref(), ok.method),
        (Some("admin"), AuthMethod::Basic)
    );
    assert!(matches!(
        auth.authenticate_connect(Some("basic"), Some(b"invalid:123456"), &[], at(0)),
        Err(Error::BadCredentials)
    ));

    let cert = client_cert("admin");
    let ok = auth
        .authenticate_connect(Some("tls"), None, std::slice::from_ref(&cert), at(0))
        .unwrap();
    assert_eq!(
        (ok.role.as_deref(), ok.method),
        (Some("admin"), AuthMethod::Tls)
    );
    assert!(matches!(
        auth.authenticate_connect(Some("tls"), None, &[], at(0)),
        Err(Error::Unauthenticated(_))
    ));

    // test_basic_auth_method with method "unknown": credentials ignored, anonymous role.
    for method in [Some("unknown"), Some("none"), None] {
        let ok = auth
            .authenticate_connect(method, Some(b"admin:123456"), &[], at(0))
            .unwrap();
        assert_eq!(
            (ok.role.as_deref(), ok.method),
            (Some("anonymous"), AuthMethod::Anonymous),
            "{method:?}"
        );
    }
    let strict = broker(&secret, None);
    assert!(matches!(
        strict.authenticate_connect(Some("unknown"), Some(b"admin:123456"), &[], at(0)),
        Err(Error::Unauthenticated(_))
    ));
    // A provider that is not configured counts as unknown.
    let token_only = Authenticator {
        basic: None,
        tls: false,
        ..broker(&secret, None)
    };
    assert!(
        token_only
            .authenticate_connect(Some("basic"), Some(b"admin:123456"), &[], at(0))
            .is_err()
    );

    let off = Authenticator::default();
    let ok = off
        .authenticate_connect(Some("token"), Some(b"garbage"), &[], at(0))
        .unwrap();
    assert_eq!((ok.role, ok.method), (None, AuthMethod::Disabled));
    assert!(!format!("{auth:?}").contains("apr1"));
}

#[test]
fn http_tries_each_provider() {
    let secret = create_secret_key();
    let key = SigningKey::hmac(&secret).unwrap();
    let auth = broker(&secret, Some("anonymous"));
    let token = create_token("superUser", None, &key).unwrap();
    let bearer = format!("Bearer {token}");

    let ok = auth
        .authenticate_http(None, Some(&bearer), &[], at(0))
        .unwrap();
    assert_eq!(
        (ok.role.as_deref(), ok.method),
        (Some("superUser"), AuthMethod::Token)
    );
    let ok = auth
        .authenticate_http(None, Some("Basic YWRtaW46MTIzNDU2"), &[], at(0))
        .unwrap();
    assert_eq!(
        (ok.role.as_deref(), ok.method),
        (Some("admin"), AuthMethod::Basic)
    );
    // The TLS certificate comes first, as in the test broker's provider list.
    let cert = client_cert("from-cert");
    let ok = auth
        .authenticate_http(None, Some(&bearer), std::slice::from_ref(&cert), at(0))
        .unwrap();
    assert_eq!(
        (ok.role.as_deref(), ok.method),
        (Some("from-cert"), AuthMethod::Tls)
    );
    // Nothing works: Pulsar's AuthenticationService falls back to the anonymous role...
    let ok = auth
        .authenticate_http(None, Some("Bearer nonsense"), &[], at(0))
        .unwrap();
    assert_eq!(ok.method, AuthMethod::Anonymous);
    // ...or fails without one, with the last provider's reason.
    let strict = broker(&secret, None);
    assert!(matches!(
        strict.authenticate_http(None, Some("Basic YWRtaW46d3Jvbmc="), &[], at(0)),
        Err(Error::BadCredentials)
    ));
    assert!(strict.authenticate_http(None, None, &[], at(0)).is_err());
    // A named method is used alone, without falling back.
    let ok = auth
        .authenticate_http(Some("token"), Some(&bearer), &[], at(0))
        .unwrap();
    assert_eq!(ok.method, AuthMethod::Token);
    assert!(
        auth.authenticate_http(Some("token"), Some("Basic YWRtaW46MTIzNDU2"), &[], at(0))
            .is_err()
    );
    assert!(matches!(
        auth.authenticate_http(Some("sasl"), Some(&bearer), &[], at(0)),
        Err(Error::Unauthenticated(_))
    ));
}
