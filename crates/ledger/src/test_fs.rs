//! Test support for a full disk: a small tmpfs to fill (the ledger's and the metadata
//! store's `no_space` tests). Mounting needs root; without it the tests fail loudly
//! rather than skip (the CI test command runs as root).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A tmpfs mounted on a directory, unmounted (lazily) when dropped.
#[derive(Debug)]
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=`, e.g. "16m") on `dir`, which must exist.
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        let euid = std::fs::metadata("/proc/self").expect("/proc/self").uid();
        assert_eq!(
            euid, 0,
            "this test mounts a tmpfs: run it as root (the CI test command does)"
        );
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("running mount")
            .success();
        assert!(ok, "mount -t tmpfs on {} failed", dir.display());
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes zeros to a file `name` in it until the file system refuses (ENOSPC);
    /// returns the file's path (remove it to free the space).
    pub fn fill(&self, name: &str) -> PathBuf {
        use std::io::Write;
        let path = self.dir.join(name);
        let mut f = std::fs::File::create(&path).expect("creating the filler");
        let zeros = vec![0u8; 1 << 16];
        while f.write_all(&zeros).is_ok() {}
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}
