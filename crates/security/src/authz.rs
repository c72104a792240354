//! Authorization decisions with the semantics of Pulsar's `AuthorizationService` and
//! default `PulsarAuthorizationProvider`, as pure functions of the role and the stored
//! policies (the caller looks those up).
//!
//! The binary protocol's checks follow the path Pulsar's `ServerCnx` takes:
//! `isTopicOperationAllowed` → `AuthorizationService.allowTopicOperationAsync` →
//! `PulsarAuthorizationProvider.allowTopicOperationAsync`, which lets superusers **and
//! the tenant's admins** do every topic operation (produce, consume, lookup) before
//! looking at granted permissions. Each rule below names the Pulsar behaviour it copies.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::error::{Error, Result};

/// A permission that can be granted on a namespace or topic (Pulsar's `AuthAction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AuthAction {
    /// Publish messages.
    Produce,
    /// Subscribe and receive messages.
    Consume,
    /// Manage Pulsar Functions in the namespace.
    Functions,
    /// Manage sources.
    Sources,
    /// Manage sinks.
    Sinks,
    /// Manage packages.
    Packages,
}

impl AuthAction {
    /// Every action, in Pulsar's order.
    pub const ALL: [AuthAction; 6] = [
        Self::Produce,
        Self::Consume,
        Self::Functions,
        Self::Sources,
        Self::Sinks,
        Self::Packages,
    ];

    /// The name used in Pulsar's JSON and admin API (`"produce"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Produce => "produce",
            Self::Consume => "consume",
            Self::Functions => "functions",
            Self::Sources => "sources",
            Self::Sinks => "sinks",
            Self::Packages => "packages",
        }
    }

    /// Parses a Pulsar action name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }
}

impl fmt::Display for AuthAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The broker settings that drive authorization.
#[derive(Clone, Debug, Default)]
pub struct AuthorizationConfig {
    /// `authorizationEnabled`: when false every check passes.
    pub enabled: bool,
    /// `superUserRoles`.
    pub superuser_roles: BTreeSet<String>,
    /// `anonymousUserRole`: the role of connections that present no credentials.
    pub anonymous_role: Option<String>,
    /// `authorizationAllowWildcardsMatching`: granted roles `prefix*` / `*suffix` match.
    pub allow_wildcards: bool,
}

/// A namespace's `subscription_auth_mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SubscriptionAuthMode {
    /// No constraint on subscription names.
    #[default]
    None,
    /// Subscription names must start with the role.
    Prefix,
}

/// A namespace's authorization policies (Pulsar's `Policies.auth_policies` plus
/// `subscription_auth_mode`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceAuthPolicies {
    /// `namespace_auth`: role → actions granted on the whole namespace.
    pub namespace_auth: BTreeMap<String, BTreeSet<AuthAction>>,
    /// `destination_auth`: fully qualified topic name → role → actions.
    pub topic_auth: BTreeMap<String, BTreeMap<String, BTreeSet<AuthAction>>>,
    /// `subscription_auth_roles`: subscription → the only roles that may use it (empty = any).
    pub subscription_auth_roles: BTreeMap<String, BTreeSet<String>>,
    /// `subscription_auth_mode`.
    pub subscription_auth_mode: SubscriptionAuthMode,
}

/// What a check needs to know about where it happens.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The tenant's name (for messages).
    pub tenant: &'a str,
    /// The tenant's `adminRoles`; `None` when the tenant does not exist.
    pub tenant_admins: Option<&'a BTreeSet<String>>,
    /// The namespace's policies; `None` when the namespace has none (nothing is granted).
    pub policies: Option<&'a NamespaceAuthPolicies>,
    /// The fully qualified topic name (`persistent://tenant/ns/topic`), for topic operations.
    pub topic: Option<&'a str>,
}

/// Makes authorization decisions. `role` arguments are the authenticated role, or
/// `None` for a connection that presented no credentials (it then acts as
/// `anonymousUserRole` when one is configured).
#[derive(Clone, Debug)]
pub struct Authorizer {
    config: AuthorizationConfig,
}

impl Authorizer {
    /// An authorizer with these settings.
    pub fn new(config: AuthorizationConfig) -> Self {
        Self { config }
    }

    /// The settings.
    pub fn config(&self) -> &AuthorizationConfig {
        &self.config
    }

    /// The role checks use: the authenticated one, else `anonymousUserRole`
    /// (Pulsar's ServerCnx gives unauthenticated connections the anonymous role).
    pub fn effective_role<'a>(&'a self, role: Option<&'a str>) -> Option<&'a str> {
        role.or(self.config.anonymous_role.as_deref())
    }

    /// Superuser: the role is in `superUserRoles` (exact match, no wildcards; Pulsar's
    /// `AuthorizationProvider.isSuperUser`). A missing role is never a superuser.
    pub fn is_superuser(&self, role: Option<&str>) -> bool {
        self.effective_role(role)
            .is_some_and(|r| self.config.superuser_roles.contains(r))
    }

    /// Tenant admin: the role is in the tenant's `adminRoles` (Pulsar's
    /// `AuthorizationProvider.isTenantAdmin`; exact match, a missing role never is).
    pub fn is_tenant_admin(&self, role: Option<&str>, tenant_admins: &BTreeSet<String>) -> bool {
        self.effective_role(role)
            .is_some_and(|r| tenant_admins.contains(r))
    }

    /// May the role publish to `scope.topic`?
    pub fn can_produce(&self, role: Option<&str>, scope: &Scope<'_>) -> Result<()> {
        let Some(role) = self.topic_gate(role, scope)? else {
            return Ok(());
        };
        // canProduceAsync → checkPermission(produce): namespace, topic, wildcard grants.
        if self.has_permission(role, scope, AuthAction::Produce) {
            Ok(())
        } else {
            Err(self.denied(role, "produce on", scope))
        }
    }

    /// May the role subscribe to `scope.topic` with `subscription` (and receive)?
    pub fn can_consume(
        &self,
        role: Option<&str>,
        scope: &Scope<'_>,
        subscription: Option<&str>,
    ) -> Result<()> {
        let Some(role) = self.topic_gate(role, scope)? else {
            return Ok(());
        };
        self.consume_as(role, scope, subscription)
    }

    /// May the role look the topic up? (canLookupAsync: produce or consume permission,
    /// the latter checked without a subscription.)
    pub fn can_lookup(&self, role: Option<&str>, scope: &Scope<'_>) -> Result<()> {
        let Some(role) = self.topic_gate(role, scope)? else {
            return Ok(());
        };
        if self.has_permission(role, scope, AuthAction::Produce)
            || self.consume_as(role, scope, None).is_ok()
        {
            Ok(())
        } else {
            Err(self.denied(role, "look up", scope))
        }
    }

    /// May the role do `action` (functions, sources, sinks, packages, or a
    /// namespace-wide consume operation) in the namespace? Superusers and tenant admins
    /// may (AuthorizationService.allowFunctionOpsAsync → isSuperUserOrAdmin;
    /// allowNamespaceOperationAsync → validateTenantAdminAccess); others need a
    /// namespace-level grant (allowTheSpecifiedActionOpsAsync, wildcards included).
    pub fn can_namespace_action(
        &self,
        role: Option<&str>,
        scope: &Scope<'_>,
        action: AuthAction,
    ) -> Result<()> {
        let Some(role) = self.admin_gate(role, scope)? else {
            return Ok(());
        };
        let granted = scope.policies.is_some_and(|p| {
            p.namespace_auth
                .get(role)
                .is_some_and(|actions| actions.contains(&action))
                || (self.config.allow_wildcards && wildcard_grants(role, action, &p.namespace_auth))
        });
        if granted {
            Ok(())
        } else {
            Err(Error::NotAuthorized(format!(
                "role {role:?} is not a superuser nor an admin of tenant {:?} and has no {action} permission on the namespace",
                scope.tenant
            )))
        }
    }

    /// May the role administer the namespace (policies, permissions, topics) or operate
    /// on the tenant (create/list namespaces)? Superusers and the tenant's admins
    /// (validateTenantAdminAccess, used by allowNamespaceOperationAsync,
    /// allowNamespacePolicyOperationAsync, allowTopicPolicyOperationAsync and
    /// allowTenantOperationAsync).
    pub fn can_admin_namespace(&self, role: Option<&str>, scope: &Scope<'_>) -> Result<()> {
        match self.admin_gate(role, scope)? {
            None => Ok(()),
            Some(role) => Err(Error::NotAuthorized(format!(
                "role {role:?} is not a superuser nor an admin of tenant {:?}",
                scope.tenant
            ))),
        }
    }

    /// May the role create, update or delete tenants (and clusters)? Superusers only
    /// (TenantsBase.createTenant/updateTenant/deleteTenant: validateSuperUserAccess).
    pub fn can_admin_tenant(&self, role: Option<&str>) -> Result<()> {
        if !self.config.enabled || self.is_superuser(role) {
            return Ok(());
        }
        Err(Error::NotAuthorized(match self.effective_role(role) {
            Some(r) => format!("role {r:?} is not a superuser"),
            None => "an unauthenticated connection is not a superuser".into(),
        }))
    }

    /// The checks every topic operation starts with. `Ok(None)` means allowed outright;
    /// `Ok(Some(role))` means "look at the grants for `role`".
    fn topic_gate<'a>(
        &'a self,
        role: Option<&'a str>,
        scope: &Scope<'_>,
    ) -> Result<Option<&'a str>> {
        if scope.topic.is_none() {
            return Err(Error::Config("a topic check needs scope.topic".into()));
        }
        self.admin_gate(role, scope)
    }

    /// Disabled → allowed; superuser → allowed; tenant missing → error; tenant admin →
    /// allowed; no role at all → refused; otherwise the caller checks grants.
    fn admin_gate<'a>(
        &'a self,
        role: Option<&'a str>,
        scope: &Scope<'_>,
    ) -> Result<Option<&'a str>> {
        // AuthorizationService.*: `if (!conf.isAuthorizationEnabled()) return true`.
        if !self.config.enabled {
            return Ok(None);
        }
        // validateTenantAdminAccess: isSuperUser first.
        if self.is_superuser(role) {
            return Ok(None);
        }
        // validateTenantAdminAccess: a missing tenant is NOT_FOUND, not a plain refusal.
        let admins = scope
            .tenant_admins
            .ok_or_else(|| Error::TenantNotFound(scope.tenant.to_owned()))?;
        // validateTenantAdminAccess: then the tenant's adminRoles.
        if self.is_tenant_admin(role, admins) {
            return Ok(None);
        }
        match self.effective_role(role) {
            Some(r) => Ok(Some(r)),
            // ServerCnx without a role (no credentials, no anonymousUserRole): nothing is granted to null.
            None => Err(Error::NotAuthorized(
                "no credentials were presented and no anonymous role is configured".into(),
            )),
        }
    }

    fn consume_as(&self, role: &str, scope: &Scope<'_>, subscription: Option<&str>) -> Result<()> {
        if let (Some(policies), Some(sub)) = (
            scope.policies,
            subscription.filter(|s| !s.trim().is_empty()),
        ) {
            // canConsumeAsync: a subscription with a non-empty role list admits only those roles.
            if let Some(roles) = policies.subscription_auth_roles.get(sub)
                && !roles.is_empty()
                && !roles.contains(role)
            {
                return Err(Error::NotAuthorized(format!(
                    "role {role:?} is not authorized to access subscription {sub:?} on {}",
                    scope.topic.unwrap_or("the topic")
                )));
            }
            // canConsumeAsync: subscription_auth_mode Prefix wants "<role>..." names.
            if policies.subscription_auth_mode == SubscriptionAuthMode::Prefix
                && !sub.starts_with(role)
            {
                return Err(Error::NotAuthorized(format!(
                    "the subscription name needs to be prefixed by the authentication role, like {role}-xxxx"
                )));
            }
        }
        // canConsumeAsync → checkPermission(consume).
        if self.has_permission(role, scope, AuthAction::Consume) {
            Ok(())
        } else {
            Err(self.denied(role, "consume from", scope))
        }
    }

    /// PulsarAuthorizationProvider.checkPermission: the namespace grant, then the topic's
    /// own grant, then (if enabled) wildcard grants on both, then the grant on the
    /// partitioned topic a `-partition-N` topic belongs to. No policies → nothing granted.
    fn has_permission(&self, role: &str, scope: &Scope<'_>, action: AuthAction) -> bool {
        let Some(policies) = scope.policies else {
            return false;
        };
        let grants = |map: &BTreeMap<String, BTreeSet<AuthAction>>| {
            map.get(role)
                .is_some_and(|actions| actions.contains(&action))
        };
        if grants(&policies.namespace_auth) {
            return true;
        }
        let topic = scope.topic.unwrap_or_default();
        let topic_roles = policies.topic_auth.get(topic);
        if topic_roles.is_some_and(grants) {
            return true;
        }
        if self.config.allow_wildcards
            && (wildcard_grants(role, action, &policies.namespace_auth)
                || topic_roles.is_some_and(|m| wildcard_grants(role, action, m)))
        {
            return true;
        }
        partitioned_parent(topic)
            .and_then(|parent| policies.topic_auth.get(parent))
            .is_some_and(grants)
    }

    fn denied(&self, role: &str, what: &str, scope: &Scope<'_>) -> Error {
        Error::NotAuthorized(format!(
            "role {role:?} has no permission to {what} {}",
            scope.topic.unwrap_or("the topic")
        ))
    }
}

/// checkWildcardPermission: a granted role `abc*` matches roles starting with `abc`,
/// `*abc` those ending with it.
fn wildcard_grants(
    role: &str,
    action: AuthAction,
    map: &BTreeMap<String, BTreeSet<AuthAction>>,
) -> bool {
    map.iter().any(|(granted, actions)| {
        actions.contains(&action)
            && (granted
                .strip_suffix('*')
                .is_some_and(|prefix| role.starts_with(prefix))
                || granted
                    .strip_prefix('*')
                    .is_some_and(|suffix| role.ends_with(suffix)))
    })
}

/// `persistent://t/n/x-partition-3` → `persistent://t/n/x` (TopicName.getPartitionedTopicName).
fn partitioned_parent(topic: &str) -> Option<&str> {
    let (parent, index) = topic.rsplit_once("-partition-")?;
    (!index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())).then_some(parent)
}

#[cfg(test)]
mod tests {
    use super::partitioned_parent;

    #[test]
    fn partition_suffix() {
        assert_eq!(
            partitioned_parent("persistent://t/n/x-partition-12"),
            Some("persistent://t/n/x")
        );
        assert_eq!(partitioned_parent("persistent://t/n/x-partition-"), None);
        assert_eq!(partitioned_parent("persistent://t/n/x-partition-a"), None);
        assert_eq!(partitioned_parent("persistent://t/n/x"), None);
    }
}
