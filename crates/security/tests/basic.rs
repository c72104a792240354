//! htpasswd checking against Pulsar's test vector, `openssl passwd -apr1` and bcrypt.

mod common;

use strobe_security::{BasicAuthProvider, Credentials, Error, apr1_crypt};

/// The line in apache/pulsar-client-python's tests/test-conf/.htpasswd.
const PULSAR_TEST_LINE: &str = "admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.";

fn creds(user: &str, password: &str) -> Credentials {
    Credentials {
        user: user.into(),
        password: password.into(),
    }
}

#[test]
fn pulsar_test_vector() {
    assert_eq!(
        apr1_crypt(b"123456", "FG4AO6aX"),
        "$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf."
    );
    let users = BasicAuthProvider::from_htpasswd(&format!("{PULSAR_TEST_LINE}\n")).unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(
        users.authenticate(&creds("admin", "123456")).unwrap(),
        "admin"
    );
    for (u, p) in [
        ("admin", "1234567"),
        ("admin", ""),
        ("Admin", "123456"),
        ("invalid", "123456"),
    ] {
        assert!(
            matches!(users.authenticate(&creds(u, p)), Err(Error::BadCredentials)),
            "{u}:{p}"
        );
    }
}

#[test]
fn hashes_made_by_openssl_passwd_apr1() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str)] = &[
        ("p", "abcdefgh"),
        (
            "a much longer password, beyond sixteen bytes and then some more",
            "x",
        ),
        ("exactly16bytes!!", "s4lt"),
        ("ünïcödé", "12345678"),
    ];
    let mut file = String::new();
    for (i, (password, salt)) in cases.iter().enumerate() {
        let out = common::openssl(dir.path(), &["passwd", "-apr1", "-salt", salt, password]);
        let hash = String::from_utf8(out).unwrap().trim().to_owned();
        assert_eq!(apr1_crypt(password.as_bytes(), salt), hash, "{password:?}");
        file.push_str(&format!("user{i}:{hash}\n"));
    }
    // And openssl's own random salt.
    let out = common::openssl(dir.path(), &["passwd", "-apr1", "random-salted"]);
    file.push_str(&format!(
        "# a comment\n\nrnd:{}",
        String::from_utf8(out).unwrap().trim()
    ));
    let users = BasicAuthProvider::from_htpasswd(&file).unwrap();
    for (i, (password, _)) in cases.iter().enumerate() {
        let user = format!("user{i}");
        assert_eq!(users.authenticate(&creds(&user, password)).unwrap(), user);
        assert!(
            users
                .authenticate(&creds(&user, &format!("{password}x")))
                .is_err()
        );
    }
    assert!(users.authenticate(&creds("rnd", "random-salted")).is_ok());
    assert!(users.authenticate(&creds("rnd", "random-salte")).is_err());
}

#[test]
fn bcrypt_hashes() {
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let y = hash.replacen("$2b$", "$2y$", 1);
    let a = bcrypt::hash_with_result("s3cret", 4)
        .unwrap()
        .format_for_version(bcrypt::Version::TwoA);
    let users = BasicAuthProvider::from_htpasswd(&format!("b:{hash}\ny:{y}\na:{a}\n")).unwrap();
    for user in ["b", "y", "a"] {
        assert_eq!(users.authenticate(&creds(user, "s3cret")).unwrap(), user);
        assert!(matches!(
            users.authenticate(&creds(user, "s3cret!")),
            Err(Error::BadCredentials)
        ));
    }
}

#[test]
fn bad_files_are_refused_at_load() {
    for bad in [
        "admin",
        "admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.:extra",
        "admin:plaintext",
        "admin:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=",
        "admin:$apr1$FG4AO6aX$short",
    ] {
        assert!(
            matches!(BasicAuthProvider::from_htpasswd(bad), Err(Error::Config(_))),
            "{bad}"
        );
    }
}

#[test]
fn wire_forms_of_the_credentials() {
    // What the C++/Python client sends: auth_data "user:password" and an HTTP Basic header.
    let c = creds("admin", "123456");
    assert_eq!(c.to_command_data(), b"admin:123456");
    assert_eq!(c.to_http_header(), "Basic YWRtaW46MTIzNDU2");
    assert_eq!(Credentials::from_command_data(b"admin:123456").unwrap(), c);
    assert_eq!(
        Credentials::from_http_header("Basic YWRtaW46MTIzNDU2").unwrap(),
        c
    );
    assert_eq!(
        Credentials::from_http_header("basic YWRtaW46MTIzNDU2").unwrap(),
        c
    );
    // The password may contain colons; the user may not be empty.
    let colon = Credentials::parse("u:pa:ss").unwrap();
    assert_eq!(
        (colon.user.as_str(), colon.password.as_str()),
        ("u", "pa:ss")
    );
    for bad in ["nocolon", ":nouser"] {
        assert!(matches!(
            Credentials::parse(bad),
            Err(Error::MalformedCredentials(_))
        ));
    }
    assert!(Credentials::from_http_header("Bearer YWRtaW46MTIzNDU2").is_err());
    assert!(Credentials::from_http_header("Basic !!!").is_err());
    assert!(Credentials::from_command_data(&[0xff, b':', b'x']).is_err());
    // Debug never shows the password.
    assert!(!format!("{c:?}").contains("123456"));

    let users = BasicAuthProvider::from_htpasswd(PULSAR_TEST_LINE).unwrap();
    assert_eq!(
        users.authenticate_command_data(b"admin:123456").unwrap(),
        "admin"
    );
    assert_eq!(
        users
            .authenticate_http_header("Basic YWRtaW46MTIzNDU2")
            .unwrap(),
        "admin"
    );
    assert!(users.authenticate_command_data(b"admin:12345").is_err());
    assert!(!format!("{users:?}").contains("apr1"));
}

#[test]
fn setting_forms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".htpasswd");
    std::fs::write(&path, format!("{PULSAR_TEST_LINE}\n")).unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(PULSAR_TEST_LINE);
    for setting in [
        path.display().to_string(),
        format!("file://{}", path.display()),
        format!("data:;base64,{b64}"),
        b64.clone(),
    ] {
        let users = BasicAuthProvider::from_setting(&setting).unwrap();
        assert!(
            users.authenticate(&creds("admin", "123456")).is_ok(),
            "{setting}"
        );
    }
    assert!(BasicAuthProvider::from_file(&path).is_ok());
}
