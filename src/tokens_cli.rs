//! `strobe tokens`: Pulsar's `pulsar tokens` for Strobe — make a secret key, sign
//! tokens, and check them. Key arguments take Pulsar's forms: `file:///path`,
//! `data:;base64,<b64>`, a path, or the key itself in base64.

use std::fmt;
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::Value;
use strobe_security::{
    SigningKey, TokenAlgorithm, TokenVerifier, create_secret_key, create_token, decode_unverified,
    encode_key_base64, parse_relative_time, read_key_material,
};

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Create a random secret key for HS256 tokens (32 bytes, like `pulsar tokens create-secret-key`).
    CreateSecretKey {
        /// Write the key to FILE (mode 0600) instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Write the key base64-encoded instead of as raw bytes. Note that a broker reading
        /// the file (tokenSecretKey=file:///...) uses its bytes as they are, as Pulsar does;
        /// give a base64 key inline (tokenSecretKey=data:;base64,...) instead.
        #[arg(short, long)]
        base64: bool,
    },
    /// Create a token for a subject (role), signed with a secret key or a private key.
    Create {
        /// The subject (`sub` claim): the role the token authenticates as.
        #[arg(short, long)]
        subject: String,
        /// The HMAC secret key.
        #[arg(
            long,
            value_name = "KEY",
            required_unless_present = "private_key",
            conflicts_with = "private_key"
        )]
        secret_key: Option<String>,
        /// An RSA or EC private key (PEM, or DER PKCS#8 as `pulsar tokens create-key-pair` writes).
        #[arg(long, value_name = "KEY")]
        private_key: Option<String>,
        /// Lifetime from now: a number with s, m, h, d, w or y (e.g. 30m, 1h, 7d). No expiry by default.
        #[arg(short, long, value_name = "TIME")]
        expiry_time: Option<String>,
        /// Signature algorithm [default: HS256 with --secret-key, RS256 with --private-key].
        #[arg(short = 'a', long, value_name = "ALG")]
        signature_algorithm: Option<String>,
    },
    /// Check a token's signature and dates, and print its claims as JSON.
    Validate {
        /// The token (also accepted as --token).
        #[arg(value_name = "TOKEN", conflicts_with_all = ["token", "token_file", "stdin"])]
        positional: Option<String>,
        /// The token.
        #[arg(short, long, value_name = "TOKEN")]
        token: Option<String>,
        /// Read the token from FILE.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Read the token from standard input.
        #[arg(short = 'i', long)]
        stdin: bool,
        /// The HMAC secret key the token should be signed with.
        #[arg(
            long,
            value_name = "KEY",
            required_unless_present = "public_key",
            conflicts_with = "public_key"
        )]
        secret_key: Option<String>,
        /// The public key (SubjectPublicKeyInfo, DER or PEM) the token should be signed with.
        #[arg(long, value_name = "KEY")]
        public_key: Option<String>,
    },
    /// Print a token's header and claims WITHOUT checking it.
    Show {
        /// The token.
        #[arg(value_name = "TOKEN", conflicts_with_all = ["token", "token_file", "stdin"])]
        positional: Option<String>,
        /// The token.
        #[arg(short, long, value_name = "TOKEN")]
        token: Option<String>,
        /// Read the token from FILE.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Read the token from standard input.
        #[arg(short = 'i', long)]
        stdin: bool,
    },
}

/// Keys and tokens are credentials: Debug shows which were given, not what they are.
impl fmt::Debug for TokensCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let given = |o: &Option<String>| o.as_ref().map(|_| "<redacted>");
        match self {
            Self::CreateSecretKey { output, base64 } => f
                .debug_struct("CreateSecretKey")
                .field("output", output)
                .field("base64", base64)
                .finish(),
            Self::Create {
                subject,
                secret_key,
                private_key,
                expiry_time,
                signature_algorithm,
            } => f
                .debug_struct("Create")
                .field("subject", subject)
                .field("secret_key", &given(secret_key))
                .field("private_key", &given(private_key))
                .field("expiry_time", expiry_time)
                .field("signature_algorithm", signature_algorithm)
                .finish(),
            Self::Validate {
                positional,
                token,
                token_file,
                stdin,
                secret_key,
                public_key,
            } => f
                .debug_struct("Validate")
                .field("token", &given(positional).or(given(token)))
                .field("token_file", token_file)
                .field("stdin", stdin)
                .field("secret_key", &given(secret_key))
                .field("public_key", &given(public_key))
                .finish(),
            Self::Show {
                positional,
                token,
                token_file,
                stdin,
            } => f
                .debug_struct("Show")
                .field("token", &given(positional).or(given(token)))
                .field("token_file", token_file)
                .field("stdin", stdin)
                .finish(),
        }
    }
}

pub fn run(cmd: TokensCommand) -> anyhow::Result<()> {
    match cmd {
        TokensCommand::CreateSecretKey { output, base64 } => {
            let key = create_secret_key();
            let bytes = if base64 {
                encode_key_base64(&key).into_bytes()
            } else {
                key
            };
            match output {
                Some(path) => write_private_file(&path, &bytes)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => std::io::stdout().write_all(&bytes)?,
            }
        }
        TokensCommand::Create {
            subject,
            secret_key,
            private_key,
            expiry_time,
            signature_algorithm,
        } => {
            let alg = signature_algorithm
                .map(|name| {
                    TokenAlgorithm::from_name(&name)
                        .with_context(|| format!("unknown signature algorithm {name:?}"))
                })
                .transpose()?;
            let key = match (secret_key, private_key) {
                (Some(k), None) => SigningKey::hmac_with(
                    alg.unwrap_or(TokenAlgorithm::HS256),
                    &read_key_material(&k).context("reading the secret key")?,
                )?,
                (None, Some(k)) => SigningKey::from_private_key(
                    alg.unwrap_or(TokenAlgorithm::RS256),
                    &read_key_material(&k).context("reading the private key")?,
                )?,
                _ => bail!("give exactly one of --secret-key and --private-key"),
            };
            let expiry = expiry_time
                .map(|t| parse_relative_time(&t).map(|d| SystemTime::now() + d))
                .transpose()?;
            println!("{}", create_token(&subject, expiry, &key)?);
        }
        TokensCommand::Validate {
            positional,
            token,
            token_file,
            stdin,
            secret_key,
            public_key,
        } => {
            let token = read_token(positional.or(token), token_file, stdin)?;
            let verifier = match (secret_key, public_key) {
                (Some(k), None) => TokenVerifier::from_secret(
                    &read_key_material(&k).context("reading the secret key")?,
                )?,
                (None, Some(k)) => TokenVerifier::from_public_key(
                    &read_key_material(&k).context("reading the public key")?,
                )?,
                _ => bail!("give exactly one of --secret-key and --public-key"),
            };
            let (_, claims) = verifier
                .verify_with_claims(&token, SystemTime::now())
                .context("the token is not valid")?;
            println!("{}", Value::Object(claims));
        }
        TokensCommand::Show {
            positional,
            token,
            token_file,
            stdin,
        } => {
            let token = read_token(positional.or(token), token_file, stdin)?;
            let (header, claims) = decode_unverified(&token)?;
            println!(
                "{}",
                serde_json::json!({ "header": header, "claims": claims })
            );
        }
    }
    Ok(())
}

fn read_token(
    inline: Option<String>,
    file: Option<PathBuf>,
    stdin: bool,
) -> anyhow::Result<String> {
    let token = match (inline, file, stdin) {
        (Some(t), None, false) => t,
        (None, Some(path), false) => {
            std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?
        }
        (None, None, true) => {
            let mut t = String::new();
            std::io::stdin().read_to_string(&mut t)?;
            t
        }
        (None, None, false) => bail!("no token: give it, or --token-file FILE, or -i"),
        _ => bail!("give the token one way only"),
    };
    Ok(token.trim().to_owned())
}

/// Creates (or truncates) a file only its owner can read.
fn write_private_file(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(bytes)
}
