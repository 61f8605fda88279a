//! Whole-filesystem tools on top of the filesystem view: tree walks,
//! `extract` (the host side, with libc calls), and `scrub`.

pub mod extract;
pub mod scrub;
pub mod walk;
