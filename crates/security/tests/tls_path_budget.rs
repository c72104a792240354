//! A client that sends a loop of same-subject CA certificates must be refused quickly,
//! and must not hold up other clients' handshakes (path building runs inside the
//! handshake, before authentication).

mod common;

use std::time::{Duration, Instant};

use common::handshake::handshake;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SerialNumber};
use strobe_security::{ClientAuth, client_config, server_config};

fn params(cn: &str, ca: bool, serial: u64) -> CertificateParams {
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    if ca {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    params.serial_number = Some(SerialNumber::from(serial));
    params.use_authority_key_identifier_extension = false;
    params
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_of_same_subject_cas_is_refused_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };

    // The trusted CA, which also issues the broker's and the honest client's certificates.
    let ca_params = params("Loop CA", true, 1);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.clone().self_signed(&ca_key).unwrap();
    let ca_issuer = Issuer::from_params(&ca_params, &ca_key);
    let trust = write("ca.pem", &ca.pem());
    let broker_key = KeyPair::generate().unwrap();
    let broker = params("localhost", false, 2)
        .signed_by(&broker_key, &ca_issuer)
        .unwrap();
    let server = server_config(
        &write("broker.pem", &broker.pem()),
        &write("broker.key", &broker_key.serialize_pem()),
        Some(&trust),
        ClientAuth::Optional,
    )
    .unwrap();

    let honest_key = KeyPair::generate().unwrap();
    let honest = params("honest", false, 3)
        .signed_by(&honest_key, &ca_issuer)
        .unwrap();
    let honest_client = client_config(
        None,
        Some((
            &write("honest.pem", &honest.pem()),
            &write("honest.key", &honest_key.serialize_pem()),
        )),
        true,
        false,
    )
    .unwrap();

    // The attack: twelve CAs named like the trusted one, sharing another key, so each
    // signs every other and none leads to the anchor. Two end entities: a v3 one
    // (webpki's path) and a CA used as end entity (the custom path).
    let evil_key = KeyPair::generate().unwrap();
    let evil_issuer = Issuer::from_params(&ca_params, &evil_key);
    let loop_pem: String = (0..12)
        .map(|i| {
            params("Loop CA", true, 100 + i)
                .signed_by(&evil_key, &evil_issuer)
                .unwrap()
                .pem()
        })
        .collect();
    let mut attackers = Vec::new();
    for (name, ca) in [("v3", false), ("ca-as-leaf", true)] {
        let key = KeyPair::generate().unwrap();
        let leaf = params(name, ca, 50).signed_by(&key, &evil_issuer).unwrap();
        attackers.push(
            client_config(
                None,
                Some((
                    &write(&format!("{name}.pem"), &(leaf.pem() + &loop_pem)),
                    &write(&format!("{name}.key"), &key.serialize_pem()),
                )),
                true,
                false,
            )
            .unwrap(),
        );
    }

    let started = Instant::now();
    let mut attacks = Vec::new();
    for attacker in &attackers {
        for _ in 0..4 {
            let (server, attacker) = (server.clone(), attacker.clone());
            attacks.push(tokio::spawn(async move {
                handshake(server, attacker, "localhost").await
            }));
        }
    }
    // Honest clients handshake while the attacks run; each must be served promptly.
    for _ in 0..5 {
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            handshake(server.clone(), honest_client.clone(), "localhost"),
        )
        .await
        .expect("an honest client was held up by the attack");
        assert_eq!(outcome.server, Ok(Some("honest".to_owned())), "{outcome:?}");
        assert_eq!(outcome.client, Ok(()));
    }
    for attack in attacks {
        let outcome = tokio::time::timeout(Duration::from_secs(10), attack)
            .await
            .expect("an attacker's handshake ran on")
            .unwrap();
        assert!(
            outcome.server.is_err(),
            "the loop was accepted: {outcome:?}"
        );
        assert!(outcome.client.is_err(), "{outcome:?}");
    }
    // Generous: the bound is in signature checks (tested exactly in the unit tests);
    // without it, these eight handshakes took minutes.
    assert!(started.elapsed() < Duration::from_secs(20));
}
