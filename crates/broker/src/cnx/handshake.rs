//! The CONNECT handshake and the connection's credentials: authentication
//! on CONNECT, and Pulsar's refresh of expired credentials
//! (AUTH_CHALLENGE / AUTH_RESPONSE).

use bytes::Bytes;
use strobe_wire::commands;
use strobe_wire::proto::{self, FeatureFlags, ServerError};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::session::Authenticated;
use super::{Next, ServerCnx, State};

/// Pulsar sends REACHED_END_OF_TOPIC to clients of protocol v9 and later. The
/// C++ client (and the Python, Node.js and other clients built on it, which all
/// announce `Pulsar-CPP-v…`) has no handler for it up to 4.2 and answers it by
/// dropping the connection, so a terminated topic would make it reconnect over
/// and over; those clients learn the end from has_message_available instead.
fn understands_end_of_topic(client_version: &str, protocol: i32) -> bool {
    protocol >= 9 && !client_version.starts_with("Pulsar-CPP-v")
}

impl ServerCnx {
    /// CONNECT: authenticates the client and answers CONNECTED.
    pub(super) async fn connect(&mut self, connect: proto::CommandConnect) -> Next {
        let client_protocol = connect.protocol_version.unwrap_or(0);
        tracing::Span::current().record("client", connect.client_version.as_str());
        let method = connect.auth_method_name.clone().or_else(|| {
            // The legacy enum of protocol v2 (AuthMethodNone/YcaV1/Athens).
            connect.auth_method.map(|m| {
                match m {
                    1 => "ycav1",
                    2 => "athens",
                    _ => "none",
                }
                .to_owned()
            })
        });
        let result = self.service.security.authenticator.authenticate_connect(
            method.as_deref(),
            connect.auth_data.as_deref(),
            &self.peer_certs,
            std::time::SystemTime::now(),
        );
        match result {
            Ok(a) => {
                if let Some(r) = &a.role {
                    tracing::Span::current().record("role", r.as_str());
                }
                self.auth = Some(Authenticated {
                    role: a.role,
                    method: a.method.name().to_owned(),
                    expires_at: a.expires_at,
                });
            }
            Err(e) => {
                // The reason goes to the client; the credentials never reach the log.
                warn!(method = ?method, error = %e, "authentication failed");
                self.send(commands::error(
                    u64::MAX,
                    ServerError::AuthenticationError,
                    format!("authentication failed: {e}"),
                ))
                .await;
                return Next::Close("authentication failed");
            }
        }
        let flags = FeatureFlags {
            supports_get_partitioned_metadata_without_auto_creation: Some(true),
            supports_tc_metadata_discovery: self.service.txn().is_some().then_some(true),
            supports_scalable_topics: self.service.config.scalable_topics_enabled.then_some(true),
            ..Default::default()
        };
        let reply = commands::connected(
            crate::SERVER_VERSION,
            client_protocol,
            Some(self.service.config.max_message_size),
            flags,
        );
        let protocol_version = client_protocol.clamp(0, strobe_wire::PROTOCOL_VERSION);
        self.end_of_topic_ok = understands_end_of_topic(&connect.client_version, protocol_version);
        self.state = State::Connected { protocol_version };
        info!(client_version = %connect.client_version, protocol_version, "connected");
        self.send(reply).await;
        Next::Continue
    }

    /// The connection's role (None: authentication is off, or anonymous without a role).
    pub(super) fn role(&self) -> Option<&str> {
        self.auth.as_ref().and_then(|a| a.role.as_deref())
    }

    /// Pulsar's `refreshAuthenticationCredentials`: credentials that expired
    /// get an AUTH_CHALLENGE; one left unanswered until the next check, or a
    /// client that cannot refresh, closes the connection.
    pub(super) async fn check_credentials(&mut self) -> Option<&'static str> {
        let State::Connected { protocol_version } = self.state else {
            return None;
        };
        let auth = self.auth.as_ref()?;
        let expired = auth
            .expires_at
            .is_some_and(|t| t <= std::time::SystemTime::now());
        if !expired {
            return None;
        }
        if self.challenge_sent.is_some() {
            return Some("credentials expired and the AUTH_CHALLENGE went unanswered");
        }
        let method = auth.method.clone();
        info!(method = %method, "credentials expired: asking the client to refresh them");
        self.challenge_sent = Some(Instant::now());
        self.send(commands::auth_challenge(
            crate::SERVER_VERSION,
            &method,
            Bytes::from_static(b"refresh"),
            protocol_version,
        ))
        .await;
        None
    }

    /// AUTH_RESPONSE to a refresh challenge: new credentials for the same role.
    pub(super) async fn auth_response(
        &mut self,
        r: proto::CommandAuthResponse,
    ) -> Option<&'static str> {
        let data = r.response.as_ref();
        let method = data
            .and_then(|d| d.auth_method_name.clone())
            .or_else(|| self.auth.as_ref().map(|a| a.method.clone()));
        let result = self.service.security.authenticator.authenticate_connect(
            method.as_deref(),
            data.and_then(|d| d.auth_data.as_deref()),
            &self.peer_certs,
            std::time::SystemTime::now(),
        );
        match result {
            Ok(a) if a.role.as_deref() == self.role() => {
                if let Some(cur) = self.auth.as_mut() {
                    cur.expires_at = a.expires_at;
                }
                self.challenge_sent = None;
                debug!("credentials refreshed");
                None
            }
            Ok(a) => {
                warn!(new_role = ?a.role, "refreshed credentials name another role");
                self.send(commands::error(
                    u64::MAX,
                    ServerError::AuthenticationError,
                    "refreshed credentials must name the same role",
                ))
                .await;
                Some("refreshed credentials name another role")
            }
            Err(e) => {
                warn!(error = %e, "credential refresh failed");
                self.send(commands::error(
                    u64::MAX,
                    ServerError::AuthenticationError,
                    format!("authentication failed: {e}"),
                ))
                .await;
                Some("credential refresh failed")
            }
        }
    }
}
