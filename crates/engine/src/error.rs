//! Engine errors. Every variant carries where the problem is: device path,
//! logical or physical address, tree, key, or file path.
//!
//! Each error has a [`kind`](Error::kind), what a caller decides on (a
//! FUSE reply, a writer's retry), and one errno for it
//! ([`errno`](Error::errno)). Callers further up add where they were with
//! [`context`](Error::context) (or [`ResultExt::context`]).

use thiserror::Error;
use ubtrfs_format::FormatError;

#[derive(Debug, Error)]
pub enum Error {
    /// The host failed a read or write of a device or file.
    #[error("{path}: {op}: {source}")]
    Io {
        path: String,
        op: String,
        #[source]
        source: std::io::Error,
    },
    /// Malformed on-disk data; `at` names where (device, bytenr, tree, key).
    #[error("corrupt {at}: {source}")]
    Format {
        at: String,
        #[source]
        source: FormatError,
    },
    /// Damage found by the engine (bad checksum on every copy, a key out of
    /// order, a missing item); `at` names where.
    #[error("corrupt {at}: {detail}")]
    Corrupt { at: String, detail: String },
    #[error("{0}")]
    NotFound(String),
    /// Something the engine does not do (yet), or a feature of the image.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A bad argument or request.
    #[error("{0}")]
    Invalid(String),
    /// No free space (in the image, or in a chunk of the wanted kind).
    #[error("no space: {0}")]
    NoSpace(String),
    /// The name is taken.
    #[error("{0}: already exists")]
    Exists(String),
    /// A directory to remove or replace is not empty.
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    /// A change asked of a read-only image, subvolume or mount.
    #[error("{0}: read-only")]
    ReadOnly(String),
    /// A path component or target that must be a directory is not.
    #[error("{0}: not a directory")]
    NotDir(String),
    /// A directory where a non-directory is needed.
    #[error("{0}: is a directory")]
    IsDir(String),
    /// A name longer than 255 bytes.
    #[error("{0}: name too long")]
    NameTooLong(String),
    /// An inode would have more links than btrfs allows.
    #[error("{0}: too many links")]
    TooManyLinks(String),
    /// An operation the file's flags or kind forbid (EPERM).
    #[error("{0}: operation not permitted")]
    Permission(String),
    /// A link or rename between subvolumes (EXDEV).
    #[error("{0}: not on one subvolume")]
    CrossDevice(String),
    /// An xattr or other value that is not there (ENODATA).
    #[error("{0}: no such attribute")]
    NoData(String),
    /// A read or write beyond what the file allows (EFBIG).
    #[error("{0}: file too large")]
    TooLarge(String),
    /// In use in a way that forbids the change (EBUSY): the mount's own
    /// root, the default subvolume.
    #[error("{0}: in use")]
    Busy(String),
}

/// What an [`enum@Error`] is, without its text: what callers decide on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A read or write of the host's device or file failed.
    Io,
    /// On-disk damage ([`Error::Format`] and [`Error::Corrupt`]).
    Corrupt,
    NotFound,
    Unsupported,
    Invalid,
    NoSpace,
    Exists,
    NotEmpty,
    ReadOnly,
    NotDir,
    IsDir,
    NameTooLong,
    TooManyLinks,
    Permission,
    CrossDevice,
    NoData,
    TooLarge,
    /// The device is claimed by another writer, a reader or the kernel
    /// ([`crate::io::claim`]).
    Busy,
}

impl ErrorKind {
    /// The errno a system call answers with for this kind of error.
    /// Damage is EIO, as the kernel's btrfs answers a read of a block that
    /// fails its checksum on every copy.
    pub fn errno(self) -> i32 {
        match self {
            ErrorKind::Io | ErrorKind::Corrupt => libc::EIO,
            ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::Unsupported => libc::EOPNOTSUPP,
            ErrorKind::Invalid => libc::EINVAL,
            ErrorKind::NoSpace => libc::ENOSPC,
            ErrorKind::Exists => libc::EEXIST,
            ErrorKind::NotEmpty => libc::ENOTEMPTY,
            ErrorKind::ReadOnly => libc::EROFS,
            ErrorKind::NotDir => libc::ENOTDIR,
            ErrorKind::IsDir => libc::EISDIR,
            ErrorKind::NameTooLong => libc::ENAMETOOLONG,
            ErrorKind::TooManyLinks => libc::EMLINK,
            ErrorKind::Permission => libc::EPERM,
            ErrorKind::CrossDevice => libc::EXDEV,
            ErrorKind::NoData => libc::ENODATA,
            ErrorKind::TooLarge => libc::EFBIG,
            ErrorKind::Busy => libc::EBUSY,
        }
    }

    /// Whether this is something wrong with the image or the host (worth
    /// a log line), rather than an answer to the request (no such name,
    /// read-only, ...).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            ErrorKind::Io | ErrorKind::Corrupt | ErrorKind::Unsupported
        )
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn corrupt(at: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            at: at.into(),
            detail: detail.into(),
        }
    }

    pub fn format(at: impl Into<String>, source: FormatError) -> Self {
        Error::Format {
            at: at.into(),
            source,
        }
    }

    /// A failed read or write of `path` (a device or host file).
    pub fn io(path: impl Into<String>, op: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            op: op.into(),
            source,
        }
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::ResourceBusy => {
                ErrorKind::Busy
            }
            Error::Io { .. } => ErrorKind::Io,
            Error::Format { .. } | Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::NoSpace(_) => ErrorKind::NoSpace,
            Error::Exists(_) => ErrorKind::Exists,
            Error::NotEmpty(_) => ErrorKind::NotEmpty,
            Error::ReadOnly(_) => ErrorKind::ReadOnly,
            Error::NotDir(_) => ErrorKind::NotDir,
            Error::IsDir(_) => ErrorKind::IsDir,
            Error::NameTooLong(_) => ErrorKind::NameTooLong,
            Error::TooManyLinks(_) => ErrorKind::TooManyLinks,
            Error::Permission(_) => ErrorKind::Permission,
            Error::CrossDevice(_) => ErrorKind::CrossDevice,
            Error::NoData(_) => ErrorKind::NoData,
            Error::TooLarge(_) => ErrorKind::TooLarge,
            Error::Busy(_) => ErrorKind::Busy,
        }
    }

    /// The errno for this error (see [`ErrorKind::errno`]).
    pub fn errno(&self) -> i32 {
        self.kind().errno()
    }

    /// Whether this is a not-found error (ENOENT) rather than damage.
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }

    /// Adds where the caller was to where the error is: damage found in
    /// a block gets the tree (or inode) that block was read for, as
    /// "AT (CONTEXT)". Other errors already say all a caller can add, and
    /// are returned as they are.
    pub fn context(self, ctx: impl FnOnce() -> String) -> Self {
        match self {
            Error::Corrupt { at, detail } => Error::Corrupt {
                at: format!("{at} ({})", ctx()),
                detail,
            },
            Error::Format { at, source } => Error::Format {
                at: format!("{at} ({})", ctx()),
                source,
            },
            other => other,
        }
    }
}

/// [`Error::context`] on a result.
pub trait ResultExt<T> {
    fn context(self, ctx: impl FnOnce() -> String) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn context(self, ctx: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| e.context(ctx))
    }
}

/// Attaches a location to a [`FormatError`].
pub trait FormatContext<T> {
    fn at(self, at: impl FnOnce() -> String) -> Result<T>;
}

impl<T> FormatContext<T> for std::result::Result<T, FormatError> {
    fn at(self, at: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::format(at(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(errno: i32) -> Error {
        Error::io("dev0.img", "read", std::io::Error::from_raw_os_error(errno))
    }

    #[test]
    fn errno_mapping() {
        let mut cases: Vec<(Error, ErrorKind, i32)> = vec![
            (io(libc::EIO), ErrorKind::Io, libc::EIO),
            // A device's own errno is not the caller's: still EIO.
            (io(libc::ENOSPC), ErrorKind::Io, libc::EIO),
            (
                Error::format("logical 4096", FormatError::BadMagic),
                ErrorKind::Corrupt,
                libc::EIO,
            ),
            (
                Error::corrupt("logical 4096", "csum mismatch"),
                ErrorKind::Corrupt,
                libc::EIO,
            ),
        ];
        // The variants that carry a message only.
        type Make = fn(String) -> Error;
        let named: [(Make, ErrorKind, i32); 11] = [
            (Error::NotFound, ErrorKind::NotFound, libc::ENOENT),
            (Error::Unsupported, ErrorKind::Unsupported, libc::EOPNOTSUPP),
            (Error::Invalid, ErrorKind::Invalid, libc::EINVAL),
            (Error::NoSpace, ErrorKind::NoSpace, libc::ENOSPC),
            (Error::Exists, ErrorKind::Exists, libc::EEXIST),
            (Error::NotEmpty, ErrorKind::NotEmpty, libc::ENOTEMPTY),
            (Error::ReadOnly, ErrorKind::ReadOnly, libc::EROFS),
            (Error::NotDir, ErrorKind::NotDir, libc::ENOTDIR),
            (Error::IsDir, ErrorKind::IsDir, libc::EISDIR),
            (
                Error::NameTooLong,
                ErrorKind::NameTooLong,
                libc::ENAMETOOLONG,
            ),
            (Error::TooManyLinks, ErrorKind::TooManyLinks, libc::EMLINK),
        ];
        for (make, kind, errno) in named {
            cases.push((make("x".into()), kind, errno));
        }
        for (e, kind, errno) in cases {
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(e.errno(), errno, "{e}");
        }
        assert!(Error::NotFound("x".into()).is_not_found());
        assert!(!Error::corrupt("a", "b").is_not_found());
    }

    #[test]
    fn context_adds_to_where_damage_is() {
        let e = Error::corrupt("tree block 30408704", "bad csum").context(|| "fs tree 5".into());
        assert_eq!(
            e.to_string(),
            "corrupt tree block 30408704 (fs tree 5): bad csum"
        );
        let r: Result<()> = Err(Error::format("logical 1", FormatError::BadMagic));
        let e = r.context(|| "extent tree".into()).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("corrupt logical 1 (extent tree): "));
        // Others say where already; the closure is not even called.
        let e = Error::NotFound("inode 257".into()).context(|| unreachable!());
        assert_eq!(e.to_string(), "inode 257");
    }
}
