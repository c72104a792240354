//! The broker's side of authentication and authorization: the providers and
//! TLS configuration built from [`BrokerConfig`], and the scope (tenant admins,
//! namespace permissions) each decision of `strobe-security` needs, read from
//! the broker's metadata. The decisions themselves live in `strobe-security`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use strobe_model::TopicName;
use strobe_security::tls::rustls;
use strobe_security::{
    AuthAction, Authenticator, AuthorizationConfig, Authorizer, BasicAuthProvider, ClientAuth,
    NamespaceAuthPolicies, Scope, TokenConfig, TokenVerifier,
};

use crate::BrokerError;
use crate::config::BrokerConfig;
use strobe_resources::Resources;
use strobe_resources::policies::NamespacePolicies;

/// Authentication providers, the authorizer and the TLS server configuration.
#[derive(Debug)]
pub struct Security {
    pub authenticator: Authenticator,
    pub authorizer: Authorizer,
    /// The TLS listeners' configuration (when a TLS port is set).
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

fn config_error(what: &str, e: strobe_security::Error) -> BrokerError {
    BrokerError::Config(format!("{what}: {e}"))
}

impl Security {
    /// Builds everything from the configuration; a key, certificate or
    /// htpasswd file that cannot be read is an error naming it.
    pub fn from_config(c: &BrokerConfig) -> Result<Security, BrokerError> {
        let has = |p: &str| c.authentication_providers.iter().any(|x| x == p);
        let token = if has("token") {
            let cfg = TokenConfig {
                secret_key: (!c.token_secret_key.is_empty()).then(|| c.token_secret_key.clone()),
                public_key: (!c.token_public_key.is_empty()).then(|| c.token_public_key.clone()),
                public_alg: Some(c.token_public_alg.clone()),
                auth_claim: Some(c.token_auth_claim.clone()),
                ..TokenConfig::default()
            };
            Some(TokenVerifier::from_config(&cfg).map_err(|e| config_error("token provider", e))?)
        } else {
            None
        };
        let basic = if has("basic") {
            Some(
                BasicAuthProvider::from_file(Path::new(&c.basic_auth_htpasswd_file)).map_err(
                    |e| config_error(&format!("htpasswd file {}", c.basic_auth_htpasswd_file), e),
                )?,
            )
        } else {
            None
        };
        let anonymous = (!c.anonymous_user_role.is_empty()).then(|| c.anonymous_user_role.clone());
        let authenticator = Authenticator {
            enabled: c.authentication_enabled,
            token,
            basic,
            tls: has("tls"),
            anonymous_role: anonymous.clone(),
        };
        let authorizer = Authorizer::new(AuthorizationConfig {
            enabled: c.authorization_enabled,
            superuser_roles: c.superuser_roles.iter().cloned().collect(),
            anonymous_role: anonymous,
            allow_wildcards: false,
        });
        let tls = if c.broker_port_tls != 0 || c.http_port_tls != 0 {
            let trust =
                (!c.tls_trust_certs_file.is_empty()).then(|| Path::new(&c.tls_trust_certs_file));
            let client_auth = match (trust, c.tls_require_trusted_client_cert) {
                (None, _) => ClientAuth::None,
                (Some(_), false) => ClientAuth::Optional,
                (Some(_), true) => ClientAuth::Required,
            };
            Some(
                strobe_security::server_config(
                    Path::new(&c.tls_certificate_file),
                    Path::new(&c.tls_key_file),
                    trust,
                    client_auth,
                )
                .map_err(|e| {
                    config_error(
                        &format!(
                            "TLS certificate {} / key {}",
                            c.tls_certificate_file, c.tls_key_file
                        ),
                        e,
                    )
                })?,
            )
        } else {
            None
        };
        Ok(Security {
            authenticator,
            authorizer,
            tls,
        })
    }
}

/// A namespace's stored permissions in the shape the authorizer reads.
pub fn auth_policies(p: &NamespacePolicies) -> NamespaceAuthPolicies {
    let actions = |set: &BTreeSet<String>| -> BTreeSet<AuthAction> {
        set.iter()
            .filter_map(|a| AuthAction::from_name(a))
            .collect()
    };
    NamespaceAuthPolicies {
        namespace_auth: p
            .auth_policies
            .namespace_auth
            .iter()
            .map(|(r, a)| (r.clone(), actions(a)))
            .collect(),
        topic_auth: p
            .auth_policies
            .destination_auth
            .iter()
            .map(|(t, m)| {
                (
                    t.clone(),
                    m.iter()
                        .map(|(r, a)| (r.clone(), actions(a)))
                        .collect::<BTreeMap<_, _>>(),
                )
            })
            .collect(),
        subscription_auth_roles: p.auth_policies.subscription_auth_roles.clone(),
        ..NamespaceAuthPolicies::default()
    }
}

/// What a check is about: a topic, or a namespace.
#[derive(Debug, Clone, Copy)]
pub enum Operation<'a> {
    Produce(&'a TopicName),
    Consume(&'a TopicName, &'a str),
    Lookup(&'a TopicName),
    /// Listing a namespace's topics (Pulsar: NamespaceOperation.GET_TOPICS).
    ListTopics(&'a str),
    /// Namespace and topic administration: superusers and tenant admins.
    AdminNamespace(&'a str),
    /// Tenant and cluster administration: superusers.
    AdminTenant,
}

impl Security {
    /// Whether `role` may do `op`, by the tenant and namespace documents in
    /// `resources`; a refusal is AuthorizationError (403 on HTTP).
    pub async fn authorize(
        &self,
        resources: &Resources,
        role: Option<&str>,
        op: Operation<'_>,
    ) -> Result<(), BrokerError> {
        let authz = &self.authorizer;
        if !authz.config().enabled {
            return Ok(());
        }
        let ns = match op {
            Operation::Produce(t) | Operation::Consume(t, _) | Operation::Lookup(t) => {
                t.namespace().to_owned()
            }
            Operation::ListTopics(ns) | Operation::AdminNamespace(ns) => ns.to_owned(),
            Operation::AdminTenant => {
                return authz.can_admin_tenant(role).map_err(denied);
            }
        };
        let tenant = ns.split('/').next().unwrap_or_default().to_owned();
        let admins: Option<BTreeSet<String>> = resources
            .tenant(&tenant)
            .await?
            .map(|info| info.value.admin_roles.into_iter().collect());
        let policies = resources.namespace_policies(&ns).map(|p| auth_policies(&p));
        let topic_name = match op {
            Operation::Produce(t) | Operation::Consume(t, _) | Operation::Lookup(t) => {
                Some(t.to_string())
            }
            _ => None,
        };
        let scope = Scope {
            tenant: &tenant,
            tenant_admins: admins.as_ref(),
            policies: policies.as_ref(),
            topic: topic_name.as_deref(),
        };
        let r = match op {
            Operation::Produce(_) => authz.can_produce(role, &scope),
            Operation::Consume(_, sub) => authz.can_consume(role, &scope, Some(sub)),
            Operation::Lookup(_) => authz.can_lookup(role, &scope),
            Operation::ListTopics(_) => {
                authz.can_namespace_action(role, &scope, AuthAction::Consume)
            }
            Operation::AdminNamespace(_) => authz.can_admin_namespace(role, &scope),
            Operation::AdminTenant => unreachable!("answered above"),
        };
        r.map_err(denied)
    }
}

fn denied(e: strobe_security::Error) -> BrokerError {
    match e {
        strobe_security::Error::TenantNotFound(t) => {
            BrokerError::TopicNotFound(format!("tenant {t} does not exist"))
        }
        other => BrokerError::Authorization(other.to_string()),
    }
}
