//! The btrfs on-disk format: structures, keys, item decoding, checksums and
//! compression codecs. Pure: nothing here does I/O.
//!
//! Parsing is zero-copy where it matters (tree blocks are borrowed, items are
//! decoded on demand from slices of the block) and every accessor is bounds
//! checked: a hostile image yields a [`FormatError`], never a panic.

// The docs are written for those who work on the code and link private
// items: `cargo doc --document-private-items` renders them whole.
#![allow(rustdoc::private_intra_doc_links)]
#![forbid(unsafe_code)]

pub mod bytes;
pub mod checksum;
pub mod compress;
pub mod consts;
pub mod error;
pub mod fixed;
pub mod ioctl;
pub mod items;
pub mod key;
pub mod node;
pub mod send_stream;
pub mod superblock;

pub use checksum::CsumType;
pub use error::FormatError;
pub use key::Key;
pub use node::{Header, Node};
pub use superblock::Superblock;
