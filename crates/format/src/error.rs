use thiserror::Error;

/// Errors from decoding on-disk bytes. They say what was malformed; the
/// engine adds where (device, bytenr, tree, key).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FormatError {
    #[error("{what}: needs {need} bytes at offset {offset}, only {have} available")]
    Short {
        what: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("bad magic in superblock (expected _BHRfS_M)")]
    BadMagic,
    #[error("unknown checksum type {0}")]
    UnknownCsumType(u16),
    #[error("checksum mismatch: stored {stored}, computed {computed}")]
    CsumMismatch { stored: String, computed: String },
    #[error("invalid {what}: {detail}")]
    Invalid { what: &'static str, detail: String },
    #[error("decompression ({algo}) failed: {detail}")]
    Decompress { algo: &'static str, detail: String },
}

pub type Result<T> = std::result::Result<T, FormatError>;

pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> FormatError {
    FormatError::Invalid {
        what,
        detail: detail.into(),
    }
}
