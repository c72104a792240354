//! One TLS handshake over an in-memory pipe, seen from both ends.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use strobe_security::{peer_role, tls};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Outcome of one handshake: the server's view (role) and whether the client got data.
#[derive(Debug)]
pub struct Outcome {
    pub server: Result<Option<String>, String>,
    pub client: Result<(), String>,
}

pub async fn handshake(
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    name: &str,
) -> Outcome {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let acceptor = tls::acceptor(server);
    let server_task = tokio::spawn(async move {
        let mut stream = acceptor
            .accept(server_io)
            .await
            .map_err(|e| e.to_string())?;
        let role = peer_role(stream.get_ref().1.peer_certificates().unwrap_or(&[]));
        stream.write_all(b"ok").await.map_err(|e| e.to_string())?;
        stream.flush().await.map_err(|e| e.to_string())?;
        // Keep the stream open until the client has read.
        let mut buf = [0u8; 1];
        let _ = stream.read(&mut buf).await;
        Ok::<_, String>(role)
    });
    let connector = tokio_rustls::TlsConnector::from(client);
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let client_result = async {
        let mut stream = connector
            .connect(name, client_io)
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 2];
        stream
            .read_exact(&mut buf)
            .await
            .map_err(|e| e.to_string())?;
        if &buf != b"ok" {
            return Err("wrong data".to_owned());
        }
        stream.write_all(b"x").await.map_err(|e| e.to_string())?;
        Ok(())
    };
    let client = tokio::time::timeout(Duration::from_secs(20), client_result)
        .await
        .unwrap_or_else(|_| Err("client timed out".into()));
    let server = tokio::time::timeout(Duration::from_secs(20), server_task)
        .await
        .map(|joined| joined.unwrap())
        .unwrap_or_else(|_| Err("server timed out".into()));
    Outcome { server, client }
}
