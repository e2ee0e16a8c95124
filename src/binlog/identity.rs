//! The server's identity: the `id` that `stats` reports, kept in
//! `DIR/server-id` with `-b`, so that it survives a restart and names the
//! directory's jobs rather than one process. Without `-b` (and the first
//! time a directory is used) it is the process's random id; its form never
//! changes: 16 lowercase hex digits.
//!
//! A client pool that keys jobs by (server id, job id) keeps working across
//! a crash and a restart; a new directory is a new server, with a new id.
//! The file is written once, atomically (a temporary file, fsynced, renamed
//! over, and the directory fsynced), so a crash leaves either no file or a
//! whole one. A file that holds anything else was written by someone else:
//! start-up stops rather than quietly become another server.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::BinlogError;

/// The file's name in the binlog directory.
pub const FILE: &str = "server-id";
/// Where it is written before the rename makes it count.
const TEMP: &str = "server-id.new";

/// The identity kept in `dir` (locked by the caller), or `fresh`, written
/// there first if the directory has none yet.
pub fn load_or_keep(dir: &Path, fresh: &str) -> Result<String, BinlogError> {
    let path = dir.join(FILE);
    let refuse = |why: String| {
        BinlogError::Open(format!(
            "{}: {why}; restore it, or remove it to give this directory a new server id",
            path.display()
        ))
    };
    match read_regular(&path) {
        Ok(None) => Err(refuse("not a regular file".into())),
        Ok(Some(bytes)) => {
            let text = String::from_utf8_lossy(&bytes);
            let id = text.strip_suffix('\n').unwrap_or(&text);
            if is_valid(id) {
                Ok(id.to_owned())
            } else {
                Err(refuse("not 16 lowercase hex digits".into()))
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            write(dir, fresh).map_err(|e| refuse(format!("cannot write it: {e}")))?;
            Ok(fresh.to_owned())
        }
        Err(e) => Err(refuse(format!("cannot read it: {e}"))),
    }
}

/// The file's bytes, or `None` if it is not a regular file. Opened without
/// waiting: start-up runs before signals are handled, and a FIFO's open or
/// read would wait for a writer that may never come.
fn read_regular(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let mut file = OpenOptions::new().read(true).custom_flags(crate::sys::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// The form `stats` has always shown.
fn is_valid(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn write(dir: &Path, id: &str) -> io::Result<()> {
    let temp = dir.join(TEMP);
    let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temp)?;
    file.write_all(format!("{id}\n").as_bytes())?;
    file.sync_all()?;
    fs::rename(&temp, dir.join(FILE))?;
    super::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_id_is_kept_and_a_damaged_file_refused() {
        let dir = std::env::temp_dir().join(format!("beanstalk-identity-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let _ = fs::remove_file(dir.join(FILE));
        assert_eq!(load_or_keep(&dir, "0123456789abcdef").unwrap(), "0123456789abcdef");
        assert_eq!(load_or_keep(&dir, "fedcba9876543210").unwrap(), "0123456789abcdef");
        assert_eq!(fs::read_to_string(dir.join(FILE)).unwrap(), "0123456789abcdef\n");
        assert!(!dir.join(TEMP).exists());
        fs::write(dir.join(FILE), "not an id\n").unwrap();
        let refused = load_or_keep(&dir, "fedcba9876543210").unwrap_err().to_string();
        assert!(refused.ends_with("server-id: not 16 lowercase hex digits; restore it, or remove it to give this directory a new server id"), "{refused}");
        // A FIFO (or any file that is not a regular one) is refused at once.
        fs::remove_file(dir.join(FILE)).unwrap();
        let made = std::process::Command::new("mkfifo").arg(dir.join(FILE)).status().unwrap();
        assert!(made.success());
        let refused = load_or_keep(&dir, "fedcba9876543210").unwrap_err().to_string();
        assert!(refused.ends_with("server-id: not a regular file; restore it, or remove it to give this directory a new server id"), "{refused}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
