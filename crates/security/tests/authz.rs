//! Authorization decisions, starting from the setup apache/pulsar-client-python's test
//! broker uses (build-support/start-test-service-inside-container.sh).

use std::collections::{BTreeMap, BTreeSet};

use strobe_security::{
    AuthAction, AuthorizationConfig, Authorizer, Error, NamespaceAuthPolicies, Scope,
    SubscriptionAuthMode,
};

fn set<const N: usize>(items: [&str; N]) -> BTreeSet<String> {
    items.into_iter().map(str::to_owned).collect()
}

fn grants<const N: usize>(
    entries: [(&str, &[AuthAction]); N],
) -> BTreeMap<String, BTreeSet<AuthAction>> {
    entries
        .into_iter()
        .map(|(role, actions)| (role.to_owned(), actions.iter().copied().collect()))
        .collect()
}

const PC: &[AuthAction] = &[AuthAction::Produce, AuthAction::Consume];

/// standalone-ssl.conf: superUserRoles=localhost,superUser,admin; anonymousUserRole=anonymous.
fn pulsar_test_broker() -> Authorizer {
    Authorizer::new(AuthorizationConfig {
        enabled: true,
        superuser_roles: set(["localhost", "superUser", "admin"]),
        anonymous_role: Some("anonymous".into()),
        allow_wildcards: false,
    })
}

fn topic<'a>(
    tenant: &'a str,
    admins: Option<&'a BTreeSet<String>>,
    policies: Option<&'a NamespaceAuthPolicies>,
    name: &'a str,
) -> Scope<'a> {
    Scope {
        tenant,
        tenant_admins: admins,
        policies,
        topic: Some(name),
    }
}

fn not_authorized(result: Result<(), Error>) -> String {
    match result {
        Err(Error::NotAuthorized(reason)) => reason,
        other => panic!("expected NotAuthorized, got {other:?}"),
    }
}

#[test]
fn the_python_client_test_setup() {
    let authz = pulsar_test_broker();
    // tenants/public: adminRoles [anonymous]; public/default grants anonymous produce+consume.
    let public_admins = set(["anonymous"]);
    let public_default = NamespaceAuthPolicies {
        namespace_auth: grants([("anonymous", PC)]),
        ..Default::default()
    };
    // tenants/private: no admins; private/auth grants token-principal produce+consume.
    let private_admins = set([]);
    let private_auth = NamespaceAuthPolicies {
        namespace_auth: grants([("token-principal", PC)]),
        ..Default::default()
    };
    let public = topic(
        "public",
        Some(&public_admins),
        Some(&public_default),
        "persistent://public/default/t",
    );
    let private = topic(
        "private",
        Some(&private_admins),
        Some(&private_auth),
        "persistent://private/auth/t",
    );

    // test_tls_auth: CN=admin is a superuser, anywhere.
    for scope in [&public, &private] {
        assert!(authz.can_produce(Some("admin"), scope).is_ok());
        assert!(
            authz
                .can_consume(Some("admin"), scope, Some("my-sub"))
                .is_ok()
        );
        assert!(authz.can_lookup(Some("admin"), scope).is_ok());
    }
    // test_token_auth: token-principal has produce+consume on private/auth.
    assert!(authz.can_produce(Some("token-principal"), &private).is_ok());
    assert!(
        authz
            .can_consume(Some("token-principal"), &private, Some("my-sub"))
            .is_ok()
    );
    // ...but nothing on public/default, where it is neither granted nor tenant admin.
    let reason = not_authorized(authz.can_produce(Some("token-principal"), &public));
    assert!(
        reason.contains("token-principal") && reason.contains("persistent://public/default/t"),
        "{reason}"
    );
    // Connections without credentials act as "anonymous": fine on public/default...
    assert!(authz.can_produce(None, &public).is_ok());
    assert!(authz.can_consume(None, &public, Some("s")).is_ok());
    // ...refused on private/auth (test_basic_auth_method with method "unknown" expects this).
    assert!(
        not_authorized(authz.can_consume(None, &private, Some("my-sub"))).contains("anonymous")
    );
    assert!(authz.can_lookup(None, &private).is_err());
    // A namespace of tenant "public" without grants: anonymous is that tenant's admin.
    let bare = NamespaceAuthPolicies::default();
    let other = topic(
        "public",
        Some(&public_admins),
        Some(&bare),
        "persistent://public/other/t",
    );
    assert!(authz.can_produce(None, &other).is_ok());
    assert!(authz.can_produce(Some("token-principal"), &other).is_err());
}

#[test]
fn tenant_admins_may_use_their_topics_but_not_make_tenants() {
    let authz = pulsar_test_broker();
    let admins = set(["team-lead"]);
    let nothing_granted = NamespaceAuthPolicies::default();
    let scope = topic(
        "team",
        Some(&admins),
        Some(&nothing_granted),
        "persistent://team/ns/t",
    );
    // allowTopicOperationAsync: validateTenantAdminAccess comes before the grants.
    assert!(authz.can_produce(Some("team-lead"), &scope).is_ok());
    assert!(
        authz
            .can_consume(Some("team-lead"), &scope, Some("any"))
            .is_ok()
    );
    assert!(authz.can_lookup(Some("team-lead"), &scope).is_ok());
    assert!(authz.can_admin_namespace(Some("team-lead"), &scope).is_ok());
    assert!(
        authz
            .can_namespace_action(Some("team-lead"), &scope, AuthAction::Functions)
            .is_ok()
    );
    assert!(authz.is_tenant_admin(Some("team-lead"), &admins));
    assert!(!authz.is_superuser(Some("team-lead")));
    assert!(not_authorized(authz.can_admin_tenant(Some("team-lead"))).contains("superuser"));
    // No policies at all: the admin still may, others may not.
    let no_policies = topic("team", Some(&admins), None, "persistent://team/ns/t");
    assert!(authz.can_produce(Some("team-lead"), &no_policies).is_ok());
    assert!(authz.can_produce(Some("member"), &no_policies).is_err());
    assert!(authz.can_admin_namespace(Some("member"), &scope).is_err());

    // Superusers administer tenants; unauthenticated connections are not superusers
    // unless the anonymous role is one.
    assert!(authz.can_admin_tenant(Some("superUser")).is_ok());
    assert!(authz.can_admin_tenant(None).is_err());
    let anon_super = Authorizer::new(AuthorizationConfig {
        enabled: true,
        superuser_roles: set(["anonymous"]),
        anonymous_role: Some("anonymous".into()),
        allow_wildcards: false,
    });
    assert!(anon_super.can_admin_tenant(None).is_ok());
}

#[test]
fn missing_tenant_missing_role_and_disabled() {
    let authz = pulsar_test_broker();
    let scope = topic("ghost", None, None, "persistent://ghost/ns/t");
    assert!(
        matches!(authz.can_produce(Some("user"), &scope), Err(Error::TenantNotFound(t)) if t == "ghost")
    );
    assert!(matches!(
        authz.can_admin_namespace(Some("user"), &scope),
        Err(Error::TenantNotFound(_))
    ));
    // Superusers are checked first, so a missing tenant does not stop them.
    assert!(authz.can_produce(Some("admin"), &scope).is_ok());

    let strict = Authorizer::new(AuthorizationConfig {
        enabled: true,
        superuser_roles: set(["admin"]),
        anonymous_role: None,
        allow_wildcards: false,
    });
    let admins = set([]);
    let everyone = NamespaceAuthPolicies {
        namespace_auth: grants([("anonymous", PC)]),
        ..Default::default()
    };
    let scope = topic("t", Some(&admins), Some(&everyone), "persistent://t/n/x");
    let reason = not_authorized(strict.can_produce(None, &scope));
    assert!(reason.contains("no credentials"), "{reason}");
    assert!(!strict.is_superuser(None));
    assert!(strict.can_produce(Some("anonymous"), &scope).is_ok());

    let off = Authorizer::new(AuthorizationConfig::default());
    let nowhere = topic("ghost", None, None, "persistent://ghost/ns/t");
    assert!(off.can_produce(None, &nowhere).is_ok());
    assert!(off.can_consume(None, &nowhere, Some("s")).is_ok());
    assert!(off.can_admin_tenant(None).is_ok());
    assert!(off.can_admin_namespace(None, &nowhere).is_ok());
    // A topic check without a topic is a programming error, reported as such.
    let no_topic = Scope {
        topic: None,
        ..scope
    };
    assert!(matches!(
        strict.can_produce(Some("x"), &no_topic),
        Err(Error::Config(_))
    ));
}

#[test]
fn topic_grants_partitions_and_wildcards() {
    let admins = set([]);
    let policies = NamespaceAuthPolicies {
        namespace_auth: grants([
            ("app-*", &[AuthAction::Consume]),
            ("*-writer", &[AuthAction::Produce]),
        ]),
        topic_auth: [(
            "persistent://t/n/orders".to_owned(),
            grants([
                ("billing", &[AuthAction::Consume]),
                ("svc-*", &[AuthAction::Produce]),
            ]),
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let orders = topic(
        "t",
        Some(&admins),
        Some(&policies),
        "persistent://t/n/orders",
    );
    let partition = topic(
        "t",
        Some(&admins),
        Some(&policies),
        "persistent://t/n/orders-partition-2",
    );
    let other = topic(
        "t",
        Some(&admins),
        Some(&policies),
        "persistent://t/n/other",
    );
    let plain = Authorizer::new(AuthorizationConfig {
        enabled: true,
        ..Default::default()
    });
    let wild = Authorizer::new(AuthorizationConfig {
        enabled: true,
        allow_wildcards: true,
        ..Default::default()
    });

    // A topic-level grant covers that topic and its partitions, not its neighbours.
    assert!(
        plain
            .can_consume(Some("billing"), &orders, Some("s"))
            .is_ok()
    );
    assert!(
        plain
            .can_consume(Some("billing"), &partition, Some("s"))
            .is_ok()
    );
    assert!(
        plain
            .can_consume(Some("billing"), &other, Some("s"))
            .is_err()
    );
    assert!(plain.can_produce(Some("billing"), &orders).is_err());
    // Lookup needs produce or consume.
    assert!(plain.can_lookup(Some("billing"), &orders).is_ok());
    assert!(plain.can_lookup(Some("billing"), &other).is_err());

    // Wildcard grants count only with authorizationAllowWildcardsMatching.
    assert!(plain.can_consume(Some("app-1"), &other, None).is_err());
    assert!(wild.can_consume(Some("app-1"), &other, None).is_ok());
    assert!(wild.can_produce(Some("app-1"), &other).is_err());
    assert!(wild.can_produce(Some("log-writer"), &other).is_ok());
    assert!(wild.can_produce(Some("svc-a"), &orders).is_ok());
    assert!(wild.can_produce(Some("svc-a"), &other).is_err());
    assert!(wild.can_lookup(Some("log-writer"), &other).is_ok());
}

#[test]
fn subscription_rules() {
    let admins = set(["boss"]);
    let policies = NamespaceAuthPolicies {
        namespace_auth: grants([("alice", PC), ("bob", PC)]),
        subscription_auth_roles: [
            ("audit".to_owned(), set(["alice"])),
            ("open".to_owned(), set([])),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let authz = Authorizer::new(AuthorizationConfig {
        enabled: true,
        ..Default::default()
    });
    let scope = topic("t", Some(&admins), Some(&policies), "persistent://t/n/x");
    assert!(
        authz
            .can_consume(Some("alice"), &scope, Some("audit"))
            .is_ok()
    );
    let reason = not_authorized(authz.can_consume(Some("bob"), &scope, Some("audit")));
    assert!(
        reason.contains("audit") && reason.contains("bob"),
        "{reason}"
    );
    assert!(authz.can_consume(Some("bob"), &scope, Some("open")).is_ok());
    assert!(
        authz
            .can_consume(Some("bob"), &scope, Some("anything"))
            .is_ok()
    );
    // Lookups carry no subscription.
    assert!(authz.can_lookup(Some("bob"), &scope).is_ok());
    // Tenant admins skip the subscription rules (validateTenantAdminAccess comes first).
    assert!(
        authz
            .can_consume(Some("boss"), &scope, Some("audit"))
            .is_ok()
    );

    let prefixed = NamespaceAuthPolicies {
        subscription_auth_mode: SubscriptionAuthMode::Prefix,
        ..policies.clone()
    };
    let scope = topic("t", Some(&admins), Some(&prefixed), "persistent://t/n/x");
    assert!(
        authz
            .can_consume(Some("bob"), &scope, Some("bob-sub"))
            .is_ok()
    );
    assert!(
        not_authorized(authz.can_consume(Some("bob"), &scope, Some("sub"))).contains("prefixed")
    );
    assert!(authz.can_consume(Some("bob"), &scope, None).is_ok());
}

#[test]
fn namespace_actions() {
    let admins = set([]);
    let policies = NamespaceAuthPolicies {
        namespace_auth: grants([
            ("fn-dev", &[AuthAction::Functions, AuthAction::Packages]),
            ("ops-*", &[AuthAction::Sinks]),
        ]),
        ..Default::default()
    };
    let scope = Scope {
        tenant: "t",
        tenant_admins: Some(&admins),
        policies: Some(&policies),
        topic: None,
    };
    let authz = Authorizer::new(AuthorizationConfig {
        enabled: true,
        superuser_roles: set(["root"]),
        allow_wildcards: true,
        anonymous_role: None,
    });
    assert!(
        authz
            .can_namespace_action(Some("fn-dev"), &scope, AuthAction::Functions)
            .is_ok()
    );
    assert!(
        authz
            .can_namespace_action(Some("fn-dev"), &scope, AuthAction::Packages)
            .is_ok()
    );
    assert!(
        not_authorized(authz.can_namespace_action(Some("fn-dev"), &scope, AuthAction::Sources))
            .contains("sources")
    );
    assert!(
        authz
            .can_namespace_action(Some("ops-1"), &scope, AuthAction::Sinks)
            .is_ok()
    );
    assert!(
        authz
            .can_namespace_action(Some("root"), &scope, AuthAction::Sources)
            .is_ok()
    );
    for action in AuthAction::ALL {
        assert_eq!(AuthAction::from_name(action.name()), Some(action));
        assert_eq!(action.to_string(), action.name());
    }
    assert_eq!(AuthAction::from_name("Produce"), None);
}
