//! The HTTP side of `strobe admin`: hyper's HTTP/1.1 client over TCP or TLS, with
//! pulsar-admin's options for a secured broker. TLS uses the broker's own rustls
//! configuration (`strobe_security::tls::client_config`), so a trust file of
//! Pulsar's X.509 v1 test certificates works as it does for the binary protocol.
//! Authentication follows pulsar-admin's `--auth-plugin` / `--auth-params`: a token
//! (`Authorization: Bearer`), basic (`Authorization: Basic`), or a client
//! certificate (TLS). Names given on the command line are escaped one path segment
//! at a time with [`seg`], so a name cannot change which resource is addressed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use strobe_security::tls::rustls;

/// How long one request may take, connection and TLS handshake included.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer read (a namespace's stats or a topic list are far smaller).
const MAX_BODY: usize = 64 << 20;

/// pulsar-admin's connection options (the same flag names).
#[derive(Debug, Args, Default)]
pub struct HttpArgs {
    /// The broker's HTTP(S) address, `http://host:port` or `https://host:port`
    /// (IPv6: `http://[::1]:8080`).
    #[arg(
        long,
        alias = "admin-url",
        default_value = "http://localhost:8080",
        global = true
    )]
    pub url: String,
    /// `token` (org.apache.pulsar.client.impl.auth.AuthenticationToken), `basic`
    /// (…AuthenticationBasic) or `tls` (…AuthenticationTls).
    #[arg(long, global = true)]
    pub auth_plugin: Option<String>,
    /// token: `token:<jwt>`, `file:///path/to/token` or the token itself; basic:
    /// `{"userId":"u","password":"p"}` or `u:p`; tls:
    /// `tlsCertFile:/path/cert.pem,tlsKeyFile:/path/key.pem` (or that as JSON).
    #[arg(long, global = true)]
    pub auth_params: Option<String>,
    /// The CA certificates (PEM) that the broker's certificate must chain to.
    #[arg(long, global = true)]
    pub tls_trust_cert_path: Option<PathBuf>,
    /// Accept any broker certificate (testing only).
    #[arg(long, global = true)]
    pub tls_allow_insecure: bool,
    /// Also check the broker's certificate names the host of `--url`.
    #[arg(long, global = true)]
    pub tls_enable_hostname_verification: bool,
}

/// What `--auth-plugin` and `--auth-params` came to.
#[derive(Debug, PartialEq, Eq)]
enum Auth {
    None,
    /// The `Authorization` header's value.
    Header(String),
    /// A client certificate and its key.
    Tls {
        cert: PathBuf,
        key: PathBuf,
    },
}

/// Status, headers and body.
pub type HttpResponse = (u16, Vec<(String, String)>, Vec<u8>);

/// One request per connection, enough for the admin API.
pub struct Http {
    host: String,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    authorization: Option<String>,
    rt: tokio::runtime::Runtime,
}

impl Http {
    pub fn new(args: &HttpArgs) -> anyhow::Result<Http> {
        let url = args.url.trim_end_matches('/');
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            bail!("{url}: expected an http:// or https:// URL");
        };
        let (host, port) = split_host_port(rest, if https { 443 } else { 80 })
            .with_context(|| format!("the address in {url}"))?;
        let auth = parse_auth(args.auth_plugin.as_deref(), args.auth_params.as_deref())?;
        let (authorization, client_cert) = match auth {
            Auth::None => (None, None),
            Auth::Header(h) => (Some(h), None),
            Auth::Tls { cert, key } => (None, Some((cert, key))),
        };
        if client_cert.is_some() && !https {
            bail!("TLS authentication needs an https:// URL");
        }
        let tls = if https {
            Some(
                strobe_security::tls::client_config(
                    args.tls_trust_cert_path.as_deref(),
                    client_cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
                    args.tls_allow_insecure,
                    args.tls_enable_hostname_verification,
                )
                .context(
                    "TLS setup (an https:// URL needs --tls-trust-cert-path or --tls-allow-insecure)",
                )?,
            )
        } else {
            None
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Http {
            host,
            port,
            tls,
            authorization,
            rt,
        })
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        let body = self.send("GET", path, "")?;
        if body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body).with_context(|| format!("GET {path}: the answer is not JSON"))
    }

    /// Sends and checks for a 2xx status; the body on success.
    pub fn send(&self, method: &str, path: &str, body: &str) -> anyhow::Result<Vec<u8>> {
        let (code, _, resp) = self.request(method, path, body)?;
        if !(200..300).contains(&code) {
            let reason = serde_json::from_slice::<Value>(&resp)
                .ok()
                .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&resp).into_owned());
            bail!("{method} {path}: HTTP {code}: {reason}");
        }
        Ok(resp)
    }

    pub fn request(&self, method: &str, path: &str, body: &str) -> anyhow::Result<HttpResponse> {
        let what = format!("{method} {path}");
        self.rt
            .block_on(async {
                tokio::time::timeout(TIMEOUT, self.exchange(method, path, body))
                    .await
                    .with_context(|| format!("no answer within {TIMEOUT:?}"))?
            })
            .with_context(|| what)
    }

    async fn exchange(&self, method: &str, path: &str, body: &str) -> anyhow::Result<HttpResponse> {
        let host_header = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, host_header)
            .header(CONTENT_TYPE, "application/json");
        if let Some(a) = &self.authorization {
            req = req.header(AUTHORIZATION, a);
        }
        let req = req
            .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .context("building the request")?;
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .with_context(|| format!("connecting to {}:{}", self.host, self.port))?;
        match &self.tls {
            None => exchange_on(TokioIo::new(tcp), req).await,
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .with_context(|| format!("{} is not a host name", self.host))?;
                let stream = strobe_security::tls::tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .context("TLS handshake")?;
                exchange_on(TokioIo::new(stream), req).await
            }
        }
    }
}

async fn exchange_on<I>(io: I, req: Request<Full<Bytes>>) -> anyhow::Result<HttpResponse>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    let driver = tokio::spawn(conn);
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
        .to_bytes()
        .to_vec();
    driver.abort();
    Ok((status, headers, body))
}

/// `host:port`, `[v6]:port`, `host` or `[v6]`.
fn split_host_port(s: &str, default_port: u16) -> anyhow::Result<(String, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']').context("an unclosed '['")?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().context("the port")?,
            None if after.is_empty() => default_port,
            None => bail!("unexpected {after:?} after the IPv6 address"),
        };
        return Ok((host.to_owned(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Ok((h.to_owned(), p.parse().context("the port")?)),
        None => Ok((s.to_owned(), default_port)),
    }
}

/// pulsar-admin's plugin class names and their short forms.
fn parse_auth(plugin: Option<&str>, params: Option<&str>) -> anyhow::Result<Auth> {
    let Some(plugin) = plugin.filter(|p| !p.is_empty()) else {
        if params.is_some_and(|p| !p.is_empty()) {
            bail!("--auth-params needs --auth-plugin");
        }
        return Ok(Auth::None);
    };
    let params = params.unwrap_or("").trim();
    let short = plugin.rsplit('.').next().unwrap_or(plugin);
    match short.to_ascii_lowercase().as_str() {
        "token" | "authenticationtoken" => {
            let token = if let Some(t) = params.strip_prefix("token:") {
                t.to_owned()
            } else if let Some(file) = params.strip_prefix("file://") {
                std::fs::read_to_string(file)
                    .with_context(|| format!("reading the token file {file}"))?
            } else if params.starts_with('{') {
                json_field(params, "token")?
            } else {
                params.to_owned()
            };
            let token = token.trim();
            if token.is_empty() {
                bail!("the token plugin needs a token in --auth-params");
            }
            Ok(Auth::Header(format!("Bearer {token}")))
        }
        "basic" | "authenticationbasic" => {
            let (user, password) = if params.starts_with('{') {
                (
                    json_field(params, "userId")?,
                    json_field(params, "password")?,
                )
            } else {
                let (u, p) = params.split_once(':').context(
                    "basic --auth-params: {\"userId\":…,\"password\":…} or user:password",
                )?;
                (u.to_owned(), p.to_owned())
            };
            let encoded =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            Ok(Auth::Header(format!("Basic {encoded}")))
        }
        "tls" | "authenticationtls" => {
            let (cert, key) = if params.starts_with('{') {
                (
                    json_field(params, "tlsCertFile")?,
                    json_field(params, "tlsKeyFile")?,
                )
            } else {
                let mut cert = None;
                let mut key = None;
                for part in params.split(',') {
                    match part.split_once(':') {
                        Some(("tlsCertFile", v)) => cert = Some(v.to_owned()),
                        Some(("tlsKeyFile", v)) => key = Some(v.to_owned()),
                        _ => bail!("tls --auth-params: unexpected {part:?}"),
                    }
                }
                (
                    cert.context("tls --auth-params needs tlsCertFile")?,
                    key.context("tls --auth-params needs tlsKeyFile")?,
                )
            };
            let path = |s: String| PathBuf::from(s.strip_prefix("file://").unwrap_or(&s));
            Ok(Auth::Tls {
                cert: path(cert),
                key: path(key),
            })
        }
        _ => bail!(
            "--auth-plugin {plugin}: expected token, basic or tls (or their Pulsar class names)"
        ),
    }
}

fn json_field(params: &str, field: &str) -> anyhow::Result<String> {
    let v: Value = serde_json::from_str(params).context("--auth-params is not JSON")?;
    v.get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("--auth-params has no string {field:?}"))
}

/// One path segment, percent-encoded: everything but RFC 3986's unreserved
/// characters, so `/`, `?`, `#`, `%`, spaces and non-ASCII stay inside the segment.
pub fn seg(s: impl std::fmt::Display) -> String {
    let s = s.to_string();
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Segments joined by `/`, each escaped (`tenant/namespace` → two segments).
pub fn segs(s: impl std::fmt::Display) -> String {
    s.to_string()
        .split('/')
        .map(seg)
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_escaped() {
        assert_eq!(seg("orders"), "orders");
        assert_eq!(seg("a b/c?d#e%f"), "a%20b%2Fc%3Fd%23e%25f");
        assert_eq!(seg("é"), "%C3%A9");
        assert_eq!(segs("acme/orders"), "acme/orders");
        assert_eq!(segs("acme/../x y"), "acme/../x%20y");
    }

    #[test]
    fn host_and_port() {
        assert_eq!(split_host_port("h:1", 80).unwrap(), ("h".into(), 1));
        assert_eq!(split_host_port("h", 80).unwrap(), ("h".into(), 80));
        assert_eq!(
            split_host_port("[::1]:8080", 80).unwrap(),
            ("::1".into(), 8080)
        );
        assert_eq!(split_host_port("[::1]", 443).unwrap(), ("::1".into(), 443));
        assert!(split_host_port("[::1", 80).is_err());
        assert!(split_host_port("h:x", 80).is_err());
    }

    #[test]
    fn auth_params_as_pulsar_admin_takes_them() {
        let bearer = Auth::Header("Bearer abc".into());
        for (plugin, params) in [
            (
                "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                "token:abc",
            ),
            ("token", "abc"),
            ("token", r#"{"token":"abc"}"#),
        ] {
            assert_eq!(
                parse_auth(Some(plugin), Some(params)).unwrap(),
                bearer,
                "{params}"
            );
        }
        let basic = Auth::Header("Basic YWxpY2U6czNjcmV0".into());
        assert_eq!(
            parse_auth(Some("basic"), Some("alice:s3cret")).unwrap(),
            basic
        );
        assert_eq!(
            parse_auth(
                Some("org.apache.pulsar.client.impl.auth.AuthenticationBasic"),
                Some(r#"{"userId":"alice","password":"s3cret"}"#)
            )
            .unwrap(),
            basic
        );
        assert_eq!(
            parse_auth(
                Some("tls"),
                Some("tlsCertFile:/c.pem,tlsKeyFile:file:///k.pem")
            )
            .unwrap(),
            Auth::Tls {
                cert: "/c.pem".into(),
                key: "/k.pem".into()
            }
        );
        assert_eq!(parse_auth(None, None).unwrap(), Auth::None);
        assert!(parse_auth(None, Some("token:x")).is_err());
        assert!(parse_auth(Some("kerberos"), Some("x")).is_err());
        assert!(parse_auth(Some("token"), Some("")).is_err());
        assert!(parse_auth(Some("tls"), Some("tlsCertFile:/c.pem")).is_err());
    }
}
