//! Failures and their errnos: a request's [`Fail`] (an errno decided
//! here, or an engine error about an inode), and [`engine_errno`], which
//! both mounts turn engine errors into errnos with (damage and I/O errors
//! logged with the request's name). [`crate::reads::Mount::answer`]
//! replies with them.

use crate::logging;
use crate::proto::Errno;
use ubtrfs_engine::{Error, InodeId};

/// Why a request failed.
pub(crate) enum Fail {
    /// An answer decided here (EROFS, EBADF, ENODATA, ...).
    Errno(Errno),
    /// An engine error about an inode, with what the request was doing
    /// beyond its name (for the log line; may be empty).
    Engine(Error, InodeId, String),
}

impl From<Errno> for Fail {
    fn from(e: Errno) -> Fail {
        Fail::Errno(e)
    }
}

pub(crate) type OpResult<T> = Result<T, Fail>;

/// Ties an engine error to the inode it is about.
pub(crate) trait OnInode<T> {
    fn on(self, id: InodeId) -> OpResult<T>;
    /// As [`on`](OnInode::on), saying what the request was doing.
    fn doing(self, id: InodeId, what: impl FnOnce() -> String) -> OpResult<T>;
}

impl<T> OnInode<T> for Result<T, Error> {
    fn on(self, id: InodeId) -> OpResult<T> {
        self.map_err(|e| Fail::Engine(e, id, String::new()))
    }

    fn doing(self, id: InodeId, what: impl FnOnce() -> String) -> OpResult<T> {
        self.map_err(|e| Fail::Engine(e, id, what()))
    }
}

/// A reply that can carry an errno (every reply type can).
pub(crate) trait Reply {
    fn error(self, e: Errno);
}

macro_rules! replies {
    ($($t:ident),* $(,)?) => {
        $(impl Reply for crate::proto::$t {
            fn error(self, e: Errno) {
                crate::proto::$t::error(self, e)
            }
        })*
    };
}

replies!(
    ReplyAttr,
    ReplyData,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyEmpty,
    ReplyEntry,
    ReplyLseek,
    ReplyOpen,
    ReplyXattr,
);

/// The errno of engine error `e` of request `op` (both mounts): damage,
/// I/O errors and what the engine does not support are logged, after
/// `place` (where it happened, or nothing).
pub(crate) fn engine_errno(op: &str, e: &Error, place: impl FnOnce() -> String) -> Errno {
    let kind = e.kind();
    if kind.is_failure() {
        let io = if kind == ubtrfs_engine::ErrorKind::Unsupported {
            ""
        } else {
            "I/O error: "
        };
        logging::error(&format!("{}{op}: {io}{e}", place()));
    }
    Errno::from_i32(e.errno())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every engine error kind reaches the kernel as its errno.
    #[test]
    fn engine_errors_map_to_errnos() {
        let cases = [
            (Error::NotFound("x".into()), libc::ENOENT),
            (Error::Invalid("x".into()), libc::EINVAL),
            (Error::Unsupported("x".into()), libc::EOPNOTSUPP),
            (Error::corrupt("logical 1", "bad csum"), libc::EIO),
            (
                Error::io("dev", "read", std::io::Error::from_raw_os_error(libc::EIO)),
                libc::EIO,
            ),
            (Error::NoSpace("x".into()), libc::ENOSPC),
            (Error::Exists("x".into()), libc::EEXIST),
            (Error::NotEmpty("x".into()), libc::ENOTEMPTY),
            (Error::ReadOnly("x".into()), libc::EROFS),
            (Error::NotDir("x".into()), libc::ENOTDIR),
            (Error::IsDir("x".into()), libc::EISDIR),
        ];
        for (e, want) in cases {
            let text = e.to_string();
            assert_eq!(Errno::from_i32(e.errno()).code(), want, "{text}");
        }
    }
}
