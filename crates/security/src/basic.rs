//! Pulsar's `basic` authentication (`AuthenticationProviderBasic`): users and password
//! hashes from an htpasswd file, credentials from the client.
//!
//! What the clients send (C++ `AuthBasic`, which the Python client wraps):
//! - binary protocol: `CONNECT.auth_method_name` = `"basic"` (or the `method` the user
//!   configured) and `CONNECT.auth_data` = the bytes `user:password`, in the clear;
//! - HTTP: `Authorization: Basic base64(user:password)`.
//!
//! Pulsar accepts `$apr1$` (Apache MD5) and classic DES `crypt` hashes; we accept
//! `$apr1$` and bcrypt (`$2a$`, `$2b$`, `$2y$`), and refuse a file with any other
//! kind when it is loaded rather than at the first login.

use std::collections::HashMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use md5::{Digest as _, Md5};

use crate::error::{Error, Result};
use crate::keys::{read_file, read_key_material};

/// The method name clients put in `CONNECT.auth_method_name`.
pub const BASIC_METHOD_NAME: &str = "basic";

/// A user name and password as a client presented them. Debug hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user; this becomes the role.
    pub user: String,
    /// The password in the clear.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// Parses `user:password`. The user may not contain `:` (RFC 7617); the password
    /// may (Pulsar refuses those, we split at the first colon).
    pub fn parse(text: &str) -> Result<Self> {
        let (user, password) = text
            .split_once(':')
            .ok_or_else(|| Error::MalformedCredentials("expected user:password".into()))?;
        if user.is_empty() {
            return Err(Error::MalformedCredentials("empty user name".into()));
        }
        Ok(Self {
            user: user.to_owned(),
            password: password.to_owned(),
        })
    }

    /// Parses CONNECT `auth_data` for method `basic`: UTF-8 `user:password`.
    pub fn from_command_data(auth_data: &[u8]) -> Result<Self> {
        let text = std::str::from_utf8(auth_data)
            .map_err(|_| Error::MalformedCredentials("auth data is not UTF-8".into()))?;
        Self::parse(text)
    }

    /// Parses an HTTP `Authorization` header value: `Basic <base64(user:password)>`
    /// (scheme case-insensitive, as in Pulsar).
    pub fn from_http_header(header: &str) -> Result<Self> {
        let header = header.trim();
        let (scheme, b64) = header.split_once(' ').unwrap_or((header, ""));
        if !scheme.eq_ignore_ascii_case("basic") {
            return Err(Error::MalformedCredentials(
                "Authorization header does not start with \"Basic \"".into(),
            ));
        }
        let bytes = STANDARD
            .decode(b64.trim())
            .map_err(|_| Error::MalformedCredentials("Basic credentials are not base64".into()))?;
        Self::from_command_data(&bytes)
    }

    /// The CONNECT `auth_data` a client sends: `user:password`.
    pub fn to_command_data(&self) -> Vec<u8> {
        format!("{}:{}", self.user, self.password).into_bytes()
    }

    /// The HTTP `Authorization` header value a client sends.
    pub fn to_http_header(&self) -> String {
        format!("Basic {}", STANDARD.encode(self.to_command_data()))
    }
}

/// A stored password hash.
#[derive(Clone)]
enum PasswordHash {
    /// `$apr1$salt$hash`: the whole string, recomputed and compared.
    Apr1 { salt: String, full: String },
    /// `$2a$`/`$2b$`/`$2y$` bcrypt, with its cost read from the hash.
    Bcrypt { hash: String, cost: u32 },
}

impl PasswordHash {
    fn parse(hash: &str) -> Option<Self> {
        if let Some(rest) = hash.strip_prefix("$apr1$") {
            let (salt, digest) = rest.split_once('$')?;
            if salt.is_empty() || salt.len() > 8 || digest.len() != 22 {
                return None;
            }
            Some(Self::Apr1 {
                salt: salt.to_owned(),
                full: hash.to_owned(),
            })
        } else if ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p)) {
            // A malformed hash would make every check fail at once, without
            // the work of a real one: refuse it when the file is loaded.
            let cost = hash.get(4..6)?.parse::<u32>().ok()?;
            let well_formed = hash.len() == 60
                && hash.as_bytes()[6] == b'$'
                && (4..=31).contains(&cost)
                && hash[7..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/');
            well_formed.then(|| Self::Bcrypt {
                hash: hash.to_owned(),
                cost,
            })
        } else {
            None
        }
    }

    fn matches(&self, password: &str) -> bool {
        #[cfg(test)]
        tests::VERIFIED.with_borrow_mut(|v| v.push(self.kind()));
        match self {
            Self::Apr1 { salt, full } => constant_time_eq(
                apr1_crypt(password.as_bytes(), salt).as_bytes(),
                full.as_bytes(),
            ),
            Self::Bcrypt { hash, .. } => bcrypt::verify(password, hash).unwrap_or(false),
        }
    }

    /// How expensive a verification against this hash is, to compare kinds.
    fn work(&self) -> u32 {
        match self {
            Self::Apr1 { .. } => 0,
            Self::Bcrypt { cost, .. } => *cost,
        }
    }

    /// A hash no password matches, whose verification costs what a real
    /// hash of the same kind and `work` costs.
    fn dummy(work: u32) -> Self {
        if work == 0 {
            Self::Apr1 {
                salt: "strobe00".into(),
                full: format!("$apr1$strobe00${}", ".".repeat(22)),
            }
        } else {
            // An all-zero salt and digest: well formed, so bcrypt runs its
            // full key schedule before comparing.
            Self::Bcrypt {
                hash: format!("$2b${work:02}${}", ".".repeat(53)),
                cost: work,
            }
        }
    }

    /// The hash's kind and cost, as the tests' bookkeeping names it.
    #[cfg(test)]
    fn kind(&self) -> String {
        match self {
            Self::Apr1 { .. } => "apr1".into(),
            Self::Bcrypt { cost, .. } => format!("bcrypt cost {cost}"),
        }
    }
}

/// The users of an htpasswd file, checked the way `AuthenticationProviderBasic` does.
#[derive(Clone)]
pub struct BasicAuthProvider {
    users: HashMap<String, PasswordHash>,
    /// What an unknown user's password is checked against (see `authenticate`).
    dummy: PasswordHash,
}

impl fmt::Debug for BasicAuthProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuthProvider")
            .field("users", &self.users.len())
            .finish_non_exhaustive()
    }
}

impl BasicAuthProvider {
    /// Parses htpasswd text: one `user:hash` per line. Blank lines and `#` comments are
    /// skipped (Pulsar refuses blank lines); any other line without exactly one `:` or
    /// with a hash we cannot check is a configuration error naming the line number.
    pub fn from_htpasswd(text: &str) -> Result<Self> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split(':');
            let (Some(user), Some(hash), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(Error::Config(format!(
                    "htpasswd line {}: expected user:hash",
                    i + 1
                )));
            };
            let hash = PasswordHash::parse(hash).ok_or_else(|| {
                Error::Config(format!(
                    "htpasswd line {}: unsupported hash for user {user:?} (use $apr1$ or bcrypt)",
                    i + 1
                ))
            })?;
            users.insert(user.to_owned(), hash);
        }
        // The dummy costs what most users' hashes cost (the dearer kind on a
        // tie): in a file of one kind and cost, which is the usual case, an
        // unknown user then takes as long as a known one.
        let mut counts: HashMap<u32, usize> = HashMap::new();
        for hash in users.values() {
            *counts.entry(hash.work()).or_default() += 1;
        }
        let work = counts
            .into_iter()
            .max_by_key(|&(work, count)| (count, work))
            .map_or(0, |(work, _)| work);
        Ok(Self {
            users,
            dummy: PasswordHash::dummy(work),
        })
    }

    /// Reads the file named by Pulsar's `basicAuthConf` setting (or the
    /// `pulsar.auth.basic.conf` system property): a `data:` or `file:` URL, a path, or
    /// the file's content in base64.
    pub fn from_setting(setting: &str) -> Result<Self> {
        let bytes = read_key_material(setting)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::Config("basic auth file is not UTF-8".into()))?;
        Self::from_htpasswd(&text)
    }

    /// Reads an htpasswd file by path.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = String::from_utf8(read_file(path)?)
            .map_err(|_| Error::Config(format!("{} is not UTF-8", path.display())))?;
        Self::from_htpasswd(&text)
    }

    /// How many users the file defines.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the file defines no users.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Checks credentials; the role is the user name. An unknown user's
    /// password is still verified, against the dummy hash, so the time of a
    /// refusal does not tell which user names exist.
    pub fn authenticate(&self, credentials: &Credentials) -> Result<String> {
        let (hash, known) = match self.users.get(&credentials.user) {
            Some(hash) => (hash, true),
            None => (&self.dummy, false),
        };
        // The verification first: it must run whether or not the user is known.
        if hash.matches(&credentials.password) & known {
            Ok(credentials.user.clone())
        } else {
            Err(Error::BadCredentials)
        }
    }

    /// Checks CONNECT `auth_data` (`user:password`).
    pub fn authenticate_command_data(&self, auth_data: &[u8]) -> Result<String> {
        self.authenticate(&Credentials::from_command_data(auth_data)?)
    }

    /// Checks an HTTP `Authorization: Basic ...` header value.
    pub fn authenticate_http_header(&self, header: &str) -> Result<String> {
        self.authenticate(&Credentials::from_http_header(header)?)
    }
}

/// Equality whose time depends only on the longer length, not on where the
/// bytes differ: the loop runs over every byte even when the lengths differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    // Keeps the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Apache's `$apr1$` MD5-crypt (Poul-Henning Kamp's FreeBSD MD5 crypt with the magic
/// `$apr1$`): returns `$apr1$<salt>$<22 characters>`. Salts are cut at 8 characters
/// and at a `$`.
pub fn apr1_crypt(password: &[u8], salt: &str) -> String {
    const MAGIC: &[u8] = b"$apr1$";
    let salt = salt.strip_prefix("$apr1$").unwrap_or(salt);
    let salt = salt.split('$').next().unwrap_or("");
    let salt = &salt.as_bytes()[..salt.len().min(8)];

    // The "alternate" sum: password, salt, password.
    let alternate = Md5::new()
        .chain_update(password)
        .chain_update(salt)
        .chain_update(password)
        .finalize();

    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(MAGIC);
    ctx.update(salt);
    // As many bytes of the alternate sum as the password is long.
    for chunk in password.chunks(16) {
        ctx.update(&alternate[..chunk.len()]);
    }
    // For each bit of the length, low bit first: a zero byte if set, else the
    // password's first byte.
    let mut n = password.len();
    while n > 0 {
        if n & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        n >>= 1;
    }
    let mut sum: [u8; 16] = ctx.finalize().into();

    // A thousand rounds to slow brute force down.
    for round in 0..1000 {
        let mut c = Md5::new();
        if round % 2 == 1 {
            c.update(password);
        } else {
            c.update(sum);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round % 2 == 1 {
            c.update(sum);
        } else {
            c.update(password);
        }
        sum = c.finalize().into();
    }

    let mut out = String::with_capacity(6 + salt.len() + 1 + 22);
    out.push_str("$apr1$");
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let mut put = |value: u32, chars: usize| {
        let mut v = value;
        for _ in 0..chars {
            out.push(char::from(ITOA64[(v & 0x3f) as usize]));
            v >>= 6;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put(
            (u32::from(sum[a]) << 16) | (u32::from(sum[b]) << 8) | u32::from(sum[c]),
            4,
        );
    }
    put(u32::from(sum[11]), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        /// The kinds of the hashes verified on this thread, so a test can see
        /// the work a check did without timing it.
        pub(super) static VERIFIED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    /// The hash verifications `f` caused.
    fn verifications(f: impl FnOnce()) -> Vec<String> {
        VERIFIED.with_borrow_mut(Vec::clear);
        f();
        VERIFIED.with_borrow_mut(std::mem::take)
    }

    fn provider(lines: &[String]) -> BasicAuthProvider {
        BasicAuthProvider::from_htpasswd(&lines.join("\n")).unwrap()
    }

    fn creds(user: &str, password: &str) -> Credentials {
        Credentials {
            user: user.into(),
            password: password.into(),
        }
    }

    #[test]
    fn an_unknown_user_costs_the_same_verification_as_a_wrong_password() {
        let bcrypt = |p: &str| bcrypt::hash(p, 4).unwrap();
        let users = provider(&[
            format!("alice:{}", bcrypt("a")),
            format!("bob:{}", bcrypt("b")),
            format!("carol:{}", apr1_crypt(b"c", "saltsalt")),
        ]);
        let wrong = verifications(|| {
            assert!(users.authenticate(&creds("alice", "nope")).is_err());
        });
        let unknown = verifications(|| {
            assert!(users.authenticate(&creds("mallory", "nope")).is_err());
        });
        assert_eq!(wrong, ["bcrypt cost 4"]);
        assert_eq!(unknown, wrong);
        // Right passwords still pass, through the same single verification.
        let right = verifications(|| {
            assert_eq!(users.authenticate(&creds("bob", "b")).unwrap(), "bob");
        });
        assert_eq!(right, wrong);

        // A file of apr1 users: unknown users cost an apr1 computation.
        let users = provider(&[format!("carol:{}", apr1_crypt(b"c", "saltsalt"))]);
        let wrong = verifications(|| {
            assert!(users.authenticate(&creds("carol", "nope")).is_err());
        });
        let unknown = verifications(|| {
            assert!(users.authenticate(&creds("mallory", "nope")).is_err());
        });
        assert_eq!(wrong, ["apr1"]);
        assert_eq!(unknown, wrong);
    }

    #[test]
    fn the_dummy_hashes_are_well_formed_and_match_nothing() {
        let PasswordHash::Bcrypt { hash, .. } = PasswordHash::dummy(4) else {
            panic!("work 4 is bcrypt")
        };
        // Ok(false), not an error: bcrypt did the whole computation.
        assert!(!bcrypt::verify("", &hash).unwrap());
        assert!(PasswordHash::parse(&hash).is_some());
        let apr1 = PasswordHash::dummy(0);
        assert!(!apr1.matches(""));
        let PasswordHash::Apr1 { full, .. } = apr1 else {
            panic!("work 0 is apr1")
        };
        assert!(PasswordHash::parse(&full).is_some());
    }

    #[test]
    fn malformed_bcrypt_hashes_are_refused_when_loaded() {
        let good = bcrypt::hash("a", 4).unwrap();
        assert!(BasicAuthProvider::from_htpasswd(&format!("a:{good}")).is_ok());
        for bad in [
            good[..59].to_owned(),
            good.replacen("$04$", "$xx$", 1),
            format!("{}!", &good[..59]),
        ] {
            assert!(
                BasicAuthProvider::from_htpasswd(&format!("a:{bad}")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn constant_time_eq_compares_whole_inputs() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"ab", b"abc"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(!constant_time_eq(b"\0", b""));
    }
}
