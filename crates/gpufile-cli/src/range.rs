//! The byte range `gpufile read` and `gpufile explain` read: the file's size (regular files
//! only, with the reason for anything else) and `--offset`/`--size` checked against it before
//! any memory is allocated.

use std::path::Path;

use gpufile::FileHandle;
use gpufile_diag::units;

use crate::args::parse_size_arg;
use crate::error::CliError;

/// Pseudo file systems whose files report a size of 0 bytes but read as text (/proc, /sys, ...).
fn pseudo_fs(path: &Path) -> Option<String> {
    const PSEUDO: [&str; 7] = [
        "proc",
        "sysfs",
        "debugfs",
        "tracefs",
        "cgroup",
        "cgroup2",
        "securityfs",
    ];
    gpufile_diag::check::file_system(path)
        .map(|(_, fs)| fs)
        .filter(|fs| PSEUDO.contains(&fs.as_str()))
}

/// The size of the file `gpufile read`/`explain` reads. Only regular files are read: a
/// character device (/dev/zero), FIFO, socket or block device has no size to read to, and a
/// /proc or /sys file reports 0 bytes whatever it holds; each is refused with the reason.
pub(crate) fn file_size(path: &Path, file: &FileHandle) -> Result<u64, CliError> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).map_err(|e| CliError::from(e).with_path(path))?;
    let t = meta.file_type();
    let kind = if t.is_file() {
        None
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    };
    if let Some(kind) = kind {
        return Err(CliError::new(
            "not-a-regular-file",
            format!(
                "{} is {kind}: gpufile reads regular files, whose size is known",
                path.display()
            ),
        )
        .with_path(path));
    }
    let size = file.size()?;
    if size == 0 {
        if let Some(fs) = pseudo_fs(path) {
            return Err(CliError::new(
                "not-a-regular-file",
                format!(
                    "{} is on {fs} (a pseudo file system), whose files report a size of 0 bytes \
                     whatever they hold: \
                     gpufile reads files whose size is known (copy it to a regular file first)",
                    path.display()
                ),
            )
            .with_path(path));
        }
    }
    Ok(size)
}

/// `--offset` and `--size` against a file of `file_size` bytes: the range, or an error of the
/// same type whichever of the two goes past the end.
pub(crate) fn file_range(
    path: &Path,
    offset_text: &str,
    size_text: Option<&str>,
    file_size: u64,
) -> Result<(u64, u64), CliError> {
    let offset = parse_size_arg("offset", offset_text)?;
    let eof = |message: String| {
        CliError {
            kind: "unexpected-eof".into(),
            message,
            errno: None,
            path: None,
            status: 1,
            in_output: false,
        }
        .with_path(path)
    };
    if offset > file_size {
        return Err(eof(format!(
            "--offset {offset} ({}) is past the end of {} ({})",
            units::size(offset),
            path.display(),
            units::count(file_size, "byte", "bytes")
        )));
    }
    let size = match size_text {
        Some(s) => parse_size_arg("size", s)?,
        None => file_size - offset,
    };
    if offset.saturating_add(size) > file_size {
        return Err(CliError::from(gpufile::Error::UnexpectedEof {
            path: path.to_owned(),
            offset,
            len: usize::try_from(size).unwrap_or(usize::MAX),
            file_size,
        }));
    }
    Ok((offset, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_is_a_pseudo_file_system() {
        assert_eq!(
            pseudo_fs(Path::new("/proc/self/status")).as_deref(),
            Some("proc")
        );
        assert_eq!(pseudo_fs(Path::new("/")), None);
        assert_eq!(pseudo_fs(Path::new("/nonexistent/x")), None);
    }
}
