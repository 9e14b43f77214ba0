//! Text sources: a UTF-8 file or a folder of them (recursive, in sorted path
//! order so every node tokenizes the same stream), turned into one token
//! stream with the tokenizer's end-of-text token before each document.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::DataError;
use super::tokenizer::Tokenizer;

/// Regular, non-hidden files under `dir`, recursively, sorted by path.
/// Symlinked files are followed; symlinked folders are not (no cycles).
/// `keep` filters by path.
pub(crate) fn list_files(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Result<Vec<PathBuf>, DataError> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let entries = fs::read_dir(&folder).map_err(|e| DataError::io(&folder, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| DataError::io(&folder, e))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let kind = entry.file_type().map_err(|e| DataError::io(&path, e))?;
            if kind.is_dir() {
                pending.push(path);
            } else if (kind.is_file() || (kind.is_symlink() && path.is_file())) && keep(&path) {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Reads one file as UTF-8 text.
fn read_text(path: &Path) -> Result<String, DataError> {
    let bytes = fs::read(path).map_err(|e| DataError::io(path, e))?;
    String::from_utf8(bytes)
        .map_err(|e| DataError::NotUtf8 { path: path.to_path_buf(), offset: e.utf8_error().valid_up_to() })
}

/// Tokenizes a text file, or every non-empty file of a folder, into one stream.
pub(crate) fn load_text(path: &Path, tokenizer: &dyn Tokenizer) -> Result<Vec<u32>, DataError> {
    let meta = fs::metadata(path).map_err(|e| DataError::io(path, e))?;
    let files = if meta.is_dir() {
        let files = list_files(path, &|_| true)?;
        if files.is_empty() {
            return Err(DataError::EmptyFolder { path: path.to_path_buf() });
        }
        files
    } else {
        if meta.len() == 0 {
            return Err(DataError::EmptyFile { path: path.to_path_buf() });
        }
        vec![path.to_path_buf()]
    };
    let mut tokens = Vec::new();
    for file in &files {
        let text = read_text(file)?;
        if text.is_empty() {
            tracing::debug!(path = %file.display(), "skipping empty text file");
            continue;
        }
        tokens.extend(tokenizer.eot());
        tokens.extend(tokenizer.encode(&text));
    }
    if tokens.is_empty() {
        return Err(DataError::EmptyFolder { path: path.to_path_buf() });
    }
    tracing::debug!(path = %path.display(), files = files.len(), tokens = tokens.len(), "tokenized text");
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tokenizer::ByteTokenizer;

    #[test]
    fn folders_are_read_recursively_in_sorted_order() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("b/inner")).unwrap();
        fs::write(dir.path().join("b/inner/z.txt"), "3").unwrap();
        fs::write(dir.path().join("b/a.txt"), "2").unwrap();
        fs::write(dir.path().join("a.txt"), "1").unwrap();
        fs::write(dir.path().join(".hidden"), "x").unwrap();
        fs::write(dir.path().join("empty.txt"), "").unwrap();
        let tokens = load_text(dir.path(), &ByteTokenizer).unwrap();
        assert_eq!(ByteTokenizer.decode(&tokens), "123");
    }

    #[test]
    fn missing_empty_and_non_utf8_inputs_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let err = load_text(&dir.path().join("nope.txt"), &ByteTokenizer).unwrap_err();
        assert!(matches!(err, DataError::MissingPath { .. }), "{err}");
        assert!(err.to_string().contains("does not exist"), "{err}");

        let empty = dir.path().join("empty.txt");
        fs::write(&empty, "").unwrap();
        let err = load_text(&empty, &ByteTokenizer).unwrap_err();
        assert!(matches!(err, DataError::EmptyFile { .. }), "{err}");
        assert!(err.to_string().contains("is empty"), "{err}");

        let folder = dir.path().join("folder");
        fs::create_dir(&folder).unwrap();
        assert!(matches!(load_text(&folder, &ByteTokenizer), Err(DataError::EmptyFolder { .. })));

        let latin1 = dir.path().join("latin1.txt");
        fs::write(&latin1, b"caf\xe9").unwrap();
        assert!(matches!(load_text(&latin1, &ByteTokenizer), Err(DataError::NotUtf8 { offset: 3, .. })));
    }
}
