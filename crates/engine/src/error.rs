//! Engine errors. Every variant carries where the problem is: device path,
//! logical or physical address, tree, key, or file path.

use thiserror::Error;
use ubtrfs_format::FormatError;

#[derive(Debug, Error)]
pub enum Error {
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
    #[error("corrupt {at}: {detail}")]
    Corrupt { at: String, detail: String },
    #[error("{0}")]
    NotFound(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("{0}")]
    Invalid(String),
    /// No free space for an allocation (ENOSPC).
    #[error("no space left: {0}")]
    NoSpace(String),
    /// Something to be made is there already (EEXIST).
    #[error("exists: {0}")]
    Exists(String),
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

    /// Whether this is a not-found error (ENOENT) rather than damage.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
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
