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
