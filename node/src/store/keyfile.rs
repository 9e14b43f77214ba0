//! The node's identity on disk: a 32-byte ed25519 seed in a file readable by
//! its owner only (mode 0600), created on first use and written durably
//! (temp file fsynced, renamed, its directory fsynced).

use std::fs;
use std::io::Write;
use std::path::Path;

use super::{fsync_dir, StoreError};
use murmur_protocol::NodeKey;

/// Load the key at `path`, or create one from the OS's random source.
pub fn load_or_create(path: &Path) -> Result<NodeKey, StoreError> {
    match load(path) {
        Err(StoreError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut seed = [0u8; 32];
            rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut seed);
            write_key(path, &seed)?;
            Ok(NodeKey::from_seed(seed))
        }
        loaded => loaded,
    }
}

/// Load the key at `path`; unlike `load_or_create`, a missing file is an
/// error (an operator's key is never made up on the spot). Reads at most 33
/// bytes: a key file holds exactly 32.
pub fn load(path: &Path) -> Result<NodeKey, StoreError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    fs::File::open(path)?.take(33).read_to_end(&mut bytes)?;
    let seed = <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| StoreError::Corrupt("key file"))?;
    Ok(NodeKey::from_seed(seed))
}

/// Write a seed to `path` with mode 0600: a temp file, fsynced, renamed
/// over `path`, and the directory fsynced, so once this returns the key
/// survives a power cut (without the last step the rename could be lost,
/// and the node come back with no key, or a new one).
pub fn write_key(path: &Path, seed: &[u8; 32]) -> Result<(), StoreError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp)?;
    f.write_all(seed)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    fsync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_private_and_stable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("node.key");
        let a = load_or_create(&path).expect("create");
        let b = load_or_create(&path).expect("load");
        assert_eq!(a.public(), b.public());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(load(&path).expect("load").public(), a.public());
        fs::write(&path, b"short").expect("write");
        assert!(load_or_create(&path).is_err());
        fs::write(&path, [7u8; 64]).expect("write");
        assert!(load(&path).is_err());
        assert!(load(&dir.path().join("missing.key")).is_err());
    }

    /// The durable write (temp file, rename, directory fsync) leaves a key
    /// that loads back, in a directory it had to create, with no temp file
    /// beside it. (That the rename survives a power cut is not observable
    /// here.)
    #[test]
    fn a_written_key_loads_back_from_a_new_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a").join("b").join("node.key");
        write_key(&path, &[5; 32]).expect("write");
        assert_eq!(load(&path).expect("load").public(), NodeKey::from_seed([5; 32]).public());
        assert_eq!(load_or_create(&path).expect("load").public(), NodeKey::from_seed([5; 32]).public());
        let names: Vec<_> = fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["node.key"]);
    }
}
