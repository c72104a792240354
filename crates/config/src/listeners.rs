//! Pulsar's `advertisedListeners`: the names and URLs a broker is reached by.

use strobe_cluster::AdvertisedListener;

use crate::error::ConfigError;

/// Parses Pulsar's `advertisedListeners` syntax: `name:url` pairs separated
/// by commas, a name at most once per scheme (`pulsar://`, `pulsar+ssl://`).
pub fn parse_advertised_listeners(text: &str) -> Result<Vec<AdvertisedListener>, ConfigError> {
    let bad = |m: String| ConfigError::Invalid(format!("advertised_listeners: {m}"));
    let mut out: Vec<AdvertisedListener> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, url) = item
            .split_once(':')
            .ok_or_else(|| bad(format!("{item:?} is not name:url")))?;
        let name = name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(format!("{name:?} is not a listener name")));
        }
        let (tls, rest) = if let Some(r) = url.strip_prefix("pulsar+ssl://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("pulsar://") {
            (false, r)
        } else {
            return Err(bad(format!(
                "{url:?} (listener {name}) is not a pulsar:// or pulsar+ssl:// URL"
            )));
        };
        match rest.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => return Err(bad(format!("{url:?} (listener {name}) needs host:port"))),
        }
        let idx = match out.iter().position(|l| l.name == name) {
            Some(i) => i,
            None => {
                out.push(AdvertisedListener {
                    name: name.to_string(),
                    broker_service_url: None,
                    broker_service_url_tls: None,
                });
                out.len() - 1
            }
        };
        let slot = if tls {
            &mut out[idx].broker_service_url_tls
        } else {
            &mut out[idx].broker_service_url
        };
        if slot.is_some() {
            return Err(bad(format!(
                "listener {name} has two {} URLs",
                if tls { "pulsar+ssl://" } else { "pulsar://" }
            )));
        }
        *slot = Some(url.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
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
}
