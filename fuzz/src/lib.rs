//! What the fuzz targets share: how one input carries several byte strings, the
//! fixed CA the certificate targets trust, and the names of the files recovery reads.

use std::sync::OnceLock;

/// Splits an input into at most `max` parts, each a big-endian u16 length and that
/// many bytes; a short tail is the last part as it is.
pub fn split(mut data: &[u8], max: usize) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    while !data.is_empty() && parts.len() + 1 < max {
        if data.len() < 2 {
            break;
        }
        let len = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let rest = &data[2..];
        let take = len.min(rest.len());
        parts.push(&rest[..take]);
        data = &rest[take..];
    }
    if !data.is_empty() {
        parts.push(data);
    }
    parts
}

/// The inverse of [`split`], for writing seeds.
pub fn join(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            out.extend_from_slice(p);
        } else {
            let len = u16::try_from(p.len()).expect("a part under 64 KiB");
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(p);
        }
    }
    out
}

/// A fixed P-256 key for the trusted CA, so that seeds signed with it stay valid
/// from one run to the next (a test key, used nowhere else).
pub const CA_KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRHQ4oQ5AfojhO9E0\nXBB5CJo30pm4iGhhhBKhjMQOzU+hRANCAASjvH/GjOSECylXqQH4KsHfC2bK+hnS\nx/r7VKpTy1K1uSmngI+iVVpsDvdg+ucmQ9dfgi0fZxINyPgxA6UH2G/D\n-----END PRIVATE KEY-----\n";

/// The trusted CA's parameters (its subject is what chains name as issuer).
pub fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Strobe Fuzz CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
}

pub fn ca_key() -> rcgen::KeyPair {
    rcgen::KeyPair::from_pem(CA_KEY_PEM).unwrap()
}

/// The trusted CA certificate (DER), made once per process.
pub fn ca_der() -> &'static [u8] {
    static CA: OnceLock<Vec<u8>> = OnceLock::new();
    CA.get_or_init(|| ca_params().self_signed(&ca_key()).unwrap().der().to_vec())
}

/// The embedded metadata store's files (`crates/metadata/src/embedded/disk.rs`).
pub const METADATA_WAL: &str = "wal";
pub const METADATA_SNAPSHOT: &str = "snapshot";

/// The topic the ledger seeds write, and the journal file names recovery reads
/// (`crates/ledger/src/file/journal.rs`).
pub const LEDGER_TOPIC: &str = "persistent://public/default/fuzz";
pub fn journal_name(seq: u64) -> String {
    format!("J{seq:016}.wal")
}

/// One current-thread runtime per fuzz process, for the targets that drive async code.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

/// (method, path) of each route that reads its body; `{t}`, `{n}`, `{p}` and
/// `{s}` are replaced by a tenant, namespace, topic and subscription name.
pub const ADMIN_ROUTES: &[(&str, &str)] = &[
    ("PUT", "/admin/v2/clusters/fuzz"),
    ("POST", "/admin/v2/clusters/fuzz"),
    ("PUT", "/admin/v2/tenants/{t}"),
    ("POST", "/admin/v2/tenants/{t}"),
    ("PUT", "/admin/v2/namespaces/{t}/{n}"),
    ("POST", "/admin/v2/namespaces/{t}/{n}/deduplication"),
    ("POST", "/admin/v2/namespaces/{t}/{n}/messageTTL"),
    ("POST", "/admin/v2/namespaces/{t}/{n}/retention"),
    (
        "PUT",
        "/admin/v2/namespaces/{t}/{n}/schemaCompatibilityStrategy",
    ),
    ("POST", "/admin/v2/namespaces/{t}/{n}/backlogQuota"),
    (
        "POST",
        "/admin/v2/namespaces/{t}/{n}/backlogQuota?backlogQuotaType=message_age",
    ),
    ("POST", "/admin/v2/namespaces/{t}/{n}/permissions/role-a"),
    (
        "POST",
        "/admin/v2/namespaces/{t}/{n}/permissions/subscription/{s}",
    ),
    ("POST", "/admin/v2/namespaces/{t}/{n}/compactionThreshold"),
    (
        "POST",
        "/admin/v2/namespaces/{t}/{n}/isAllowAutoUpdateSchema",
    ),
    (
        "POST",
        "/admin/v2/namespaces/{t}/{n}/schemaValidationEnforced",
    ),
    (
        "PUT",
        "/admin/v2/namespaces/{t}/{n}/0x00000000_0xffffffff/split",
    ),
    (
        "POST",
        "/admin/v2/persistent/{t}/{n}/{p}/permissions/role-b",
    ),
    ("PUT", "/admin/v2/persistent/{t}/{n}/{p}"),
    ("PUT", "/admin/v2/persistent/{t}/{n}/{p}/partitions"),
    ("POST", "/admin/v2/persistent/{t}/{n}/{p}/partitions"),
    ("PUT", "/admin/v2/non-persistent/{t}/{n}/{p}/partitions"),
    ("PUT", "/admin/v2/persistent/{t}/{n}/{p}/subscription/{s}"),
    (
        "POST",
        "/admin/v2/persistent/{t}/{n}/{p}/subscription/{s}/resetcursor",
    ),
    (
        "POST",
        "/admin/v2/persistent/{t}/{n}/{p}/subscription/{s}/resetcursor?isExcluded=true",
    ),
    ("POST", "/admin/v2/schemas/{t}/{n}/{p}/schema"),
    ("POST", "/admin/v2/schemas/{t}/{n}/{p}/compatibility"),
    ("POST", "/admin/v2/schemas/{t}/{n}/{p}/version"),
];

const TENANTS: [&str; 2] = ["public", "fz"];
const NAMESPACES: [&str; 2] = ["default", "n1"];
const TOPICS: [&str; 4] = ["a", "b", "a-partition-0", "c"];
const SUBS: [&str; 2] = ["s", "t"];

/// The `admin_json` target's request for a route byte and a names byte: the
/// route's method and its path with the names filled in.
pub fn admin_request(route: u8, names: u8) -> (&'static str, String) {
    let (method, path) = ADMIN_ROUTES[usize::from(route) % ADMIN_ROUTES.len()];
    let n = usize::from(names);
    let path = path
        .replace("{t}", TENANTS[n & 1])
        .replace("{n}", NAMESPACES[(n >> 1) & 1])
        .replace("{p}", TOPICS[(n >> 2) & 3])
        .replace("{s}", SUBS[(n >> 4) & 1]);
    (method, path)
}

/// The route byte that picks `(method, path)` of [`ADMIN_ROUTES`], for writing seeds.
pub fn admin_route(method: &str, path: &str) -> u8 {
    let i = ADMIN_ROUTES
        .iter()
        .position(|r| *r == (method, path))
        .unwrap_or_else(|| panic!("{method} {path} is not in ADMIN_ROUTES"));
    u8::try_from(i).unwrap()
}
