//! Small helpers the client's parts share: the reconnection backoff and
//! topic-name completion.

use std::time::Duration;

use strobe_model::TopicName;

use crate::error::{Error, Result};

/// Exponential backoff from 100 ms to 30 s, as the Java client's `Backoff`.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff {
            next: Duration::from_millis(100),
        }
    }

    pub fn next(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(30));
        d
    }
}

/// `my-topic` to `persistent://public/default/my-topic`.
pub(crate) fn full_topic_name(topic: &str) -> Result<String> {
    TopicName::parse(topic)
        .map(|t| t.to_string())
        .map_err(|e| Error::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::socket_addr;

    #[test]
    fn backoff_doubles_and_caps() {
        let mut b = Backoff::new();
        assert_eq!(b.next(), Duration::from_millis(100));
        assert_eq!(b.next(), Duration::from_millis(200));
        for _ in 0..20 {
            b.next();
        }
        assert_eq!(b.next(), Duration::from_secs(30));
    }

    #[test]
    fn addresses() {
        assert_eq!(socket_addr("pulsar://a:1").unwrap(), "a:1");
        assert_eq!(socket_addr("pulsar://a").unwrap(), "a:6650");
        assert!(socket_addr("pulsar+ssl://a:1").is_err());
        assert_eq!(
            full_topic_name("t").unwrap(),
            "persistent://public/default/t"
        );
    }
}
