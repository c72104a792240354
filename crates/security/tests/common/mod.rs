//! Helpers shared by the integration tests: run the `openssl` CLI in a temp dir.

#![allow(dead_code)]

pub mod handshake;

use std::path::Path;
use std::process::Command;

/// Runs `openssl args...` in `dir`, panicking with its stderr on failure; returns stdout.
pub fn openssl(dir: &Path, args: &[&str]) -> Vec<u8> {
    openssl_stdin(dir, args, None)
}

/// Like [`openssl`], feeding `stdin`.
pub fn openssl_stdin(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    use std::io::Write as _;
    let mut child = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the openssl CLI is installed");
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(bytes) = stdin {
            input.write_all(bytes).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
