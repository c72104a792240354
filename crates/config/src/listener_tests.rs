//! The advertised listeners as the configuration takes them (tests).

use std::path::Path;

use crate::{BrokerConfig, ConfigError};

fn cfg(text: &str) -> Result<BrokerConfig, ConfigError> {
    BrokerConfig::from_toml_str(text, Path::new("x.toml"))
}

#[test]
fn listeners_parse_and_pick_the_internal_one() {
    let c = cfg(r#"advertised_listeners = "internal:pulsar://b1:6650, internal:pulsar+ssl://b1:6651,external:pulsar://localhost:6652"
"#)
    .unwrap();
    let ls = c.listeners().unwrap();
    assert_eq!(ls.len(), 2);
    assert_eq!(
        ls[0].broker_service_url_tls.as_deref(),
        Some("pulsar+ssl://b1:6651")
    );
    assert_eq!(ls[1].name, "external");
    assert_eq!(c.broker_service_url(1), "pulsar://b1:6650");
    assert_eq!(
        c.broker_service_url_tls(1).as_deref(),
        Some("pulsar+ssl://b1:6651")
    );
    let c = cfg(
        r#"advertised_listeners = "internal:pulsar://b1:6650,external:pulsar://localhost:6652"
internal_listener_name = "external"
"#,
    )
    .unwrap();
    assert_eq!(c.broker_service_url(1), "pulsar://localhost:6652");
    assert_eq!(c.broker_service_url_tls(1), None);
    // Without listeners: the advertised address.
    assert_eq!(
        cfg("").unwrap().broker_service_url(7),
        "pulsar://localhost:7"
    );
}

#[test]
fn bad_listeners_are_refused() {
    for (text, needle) in [
        (r#"advertised_listeners = "internal""#, "name:url"),
        (
            r#"advertised_listeners = "internal:http://a:1""#,
            "pulsar://",
        ),
        (
            r#"advertised_listeners = "internal:pulsar://a""#,
            "host:port",
        ),
        (
            r#"advertised_listeners = "a b:pulsar://a:1""#,
            "listener name",
        ),
        (
            r#"advertised_listeners = "x:pulsar://a:1,x:pulsar://b:1""#,
            "two pulsar:// URLs",
        ),
        (r#"internal_listener_name = "x""#, "internal_listener_name"),
        (
            "advertised_listeners = \"x:pulsar+ssl://a:1\"",
            "needs a pulsar:// URL",
        ),
    ] {
        let err = cfg(&format!("{text}\n")).unwrap_err().to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
}
