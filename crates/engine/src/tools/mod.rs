//! Whole-filesystem tools on top of the filesystem view: tree walks,
//! `extract` (the host side, with libc calls), `scrub`, and `check` (a
//! small `btrfs check` for images the write engine made).

pub mod change_fsid;
pub mod check;
pub mod extract;
pub mod scrub;
pub mod space_map;
pub mod walk;
