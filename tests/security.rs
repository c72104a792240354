//! What a refused CONNECT, PRODUCER or SUBSCRIBE looks like on the wire: the
//! ERROR frame with AuthenticationError or AuthorizationError (the official
//! C++-based clients report the first as a timeout, so the conformance suite
//! cannot see the frame itself).

mod common;

use std::time::{Duration, SystemTime};

use common::{RawClient, Strobe};
use strobe_security::{SigningKey, create_secret_key, create_token};
use strobe_wire::proto::ServerError;
use strobe_wire::proto::command_subscribe::SubType;
use strobe_wire::{Command as Cmd, Frame, commands};

fn broker() -> (Strobe, SigningKey, tempfile::TempDir) {
    let keys = tempfile::tempdir().unwrap();
    let secret = create_secret_key();
    let path = keys.path().join("secret.key");
    std::fs::write(&path, &secret).unwrap();
    let strobe = Strobe::start_with_config(&format!(
        "authentication_enabled = true\nauthentication_providers = [\"token\"]\n\
         token_secret_key = \"file://{}\"\nauthorization_enabled = true\n\
         superuser_roles = [\"root\"]\n",
        path.display()
    ));
    (strobe, SigningKey::hmac(&secret).unwrap(), keys)
}

async fn connect(port: u16, token: &str) -> (RawClient, Frame) {
    let mut c = RawClient::connect(port).await;
    c.send(commands::connect(
        "strobe-test",
        Some(("token", bytes::Bytes::from(token.to_owned()))),
    ))
    .await;
    let f = c.recv().await.expect("an answer to CONNECT");
    (c, f)
}

#[tokio::test]
async fn bad_tokens_get_authentication_error_and_the_connection_closes() {
    let (strobe, key, _keys) = broker();
    let other = SigningKey::hmac(&create_secret_key()).unwrap();
    let expired = create_token(
        "root",
        Some(SystemTime::now() - Duration::from_secs(60)),
        &key,
    )
    .unwrap();
    for (what, token) in [
        ("forged", create_token("root", None, &other).unwrap()),
        ("expired", expired),
        ("garbage", "not.a.token".to_owned()),
    ] {
        let (mut c, f) = connect(strobe.port, &token).await;
        let Cmd::Error(e) = &f.command else {
            panic!("{what}: expected ERROR, got {f:?}")
        };
        assert_eq!(
            e.error(),
            ServerError::AuthenticationError,
            "{what}: {}",
            e.message
        );
        c.expect_closed(Duration::from_secs(5)).await;
    }
    assert!(
        !strobe.log_text().contains("not.a.token"),
        "no credential in the log"
    );
}

#[tokio::test]
async fn a_role_without_permission_gets_authorization_error() {
    let (strobe, key, _keys) = broker();
    let (mut c, f) = connect(strobe.port, &create_token("mallory", None, &key).unwrap()).await;
    assert!(matches!(f.command, Cmd::Connected(_)), "{f:?}");
    c.send(commands::producer(
        1,
        1,
        "persistent://public/default/x",
        None,
    ))
    .await;
    let Some(Frame {
        command: Cmd::Error(e),
        ..
    }) = c.recv().await
    else {
        panic!("no ERROR")
    };
    assert_eq!(e.error(), ServerError::AuthorizationError, "{}", e.message);
    c.send(Cmd::Subscribe(commands::subscribe(
        2,
        1,
        "persistent://public/default/x",
        "s",
        SubType::Shared,
    )))
    .await;
    let Some(Frame {
        command: Cmd::Error(e),
        ..
    }) = c.recv().await
    else {
        panic!("no ERROR")
    };
    assert_eq!(e.error(), ServerError::AuthorizationError, "{}", e.message);
    // The superuser may.
    let (mut root, _) = connect(strobe.port, &create_token("root", None, &key).unwrap()).await;
    root.send(commands::producer(
        1,
        1,
        "persistent://public/default/x",
        None,
    ))
    .await;
    assert!(matches!(
        root.recv().await,
        Some(Frame {
            command: Cmd::ProducerSuccess(_),
            ..
        })
    ));
}

#[tokio::test]
async fn rs256_tokens_verify_against_the_configured_public_key() {
    let keys = tempfile::tempdir().unwrap();
    let private = keys.path().join("private.pem");
    let public = keys.path().join("public.pem");
    let ok = |args: &[&str]| {
        assert!(
            std::process::Command::new("openssl")
                .args(args)
                .status()
                .expect("openssl")
                .success()
        )
    };
    ok(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        private.to_str().unwrap(),
    ]);
    ok(&[
        "pkey",
        "-in",
        private.to_str().unwrap(),
        "-pubout",
        "-out",
        public.to_str().unwrap(),
    ]);
    let strobe = Strobe::start_with_config(&format!(
        "authentication_enabled = true\nauthentication_providers = [\"token\"]\n\
         token_public_key = \"file://{}\"\ntoken_public_alg = \"RS256\"\n",
        public.display()
    ));
    let key = SigningKey::rsa(&std::fs::read(&private).unwrap()).unwrap();
    let (_c, f) = connect(strobe.port, &create_token("rsa-user", None, &key).unwrap()).await;
    assert!(matches!(f.command, Cmd::Connected(_)), "{f:?}");
    // An HS256 token made with the public key's bytes as the secret (the
    // algorithm-confusion attack) is refused.
    let confused = SigningKey::hmac(&std::fs::read(&public).unwrap()).unwrap();
    let (_c, f) = connect(
        strobe.port,
        &create_token("rsa-user", None, &confused).unwrap(),
    )
    .await;
    let Cmd::Error(e) = &f.command else {
        panic!("expected ERROR, got {f:?}")
    };
    assert_eq!(e.error(), ServerError::AuthenticationError, "{}", e.message);
}
