//! Item payloads: one definition per item type, its decoder (`parse`, which
//! checks lengths before reading, so hostile bytes give a [`FormatError`])
//! beside its encoder (`encode` appending to a `Vec<u8>`, `to_bytes`, and
//! `ENCODED_LEN` or `encoded_len()`). Decoding then encoding a kernel-made
//! item gives back its exact bytes (see crates/engine/tests/reencode.rs).
//!
//! Name-carrying items (INODE_REF, DIR_ITEM, ROOT_REF, ...) borrow their
//! names; several entries packed in one item are encoded by appending.
//!
//! [`FormatError`]: crate::FormatError

mod dir;
mod extent;
mod file;
mod free_space;
mod inode;
mod misc;
mod qgroup;
mod root;
mod volume;

pub use dir::*;
pub use extent::*;
pub use file::*;
pub use free_space::*;
pub use inode::*;
pub use misc::*;
pub use qgroup::*;
pub use root::*;
pub use volume::*;
