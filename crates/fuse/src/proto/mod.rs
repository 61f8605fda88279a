//! Our own FUSE protocol layer: the kernel ABI ([`abi`]), the value
//! types requests and replies carry ([`types`]) and the requests'
//! arguments decoded into them ([`args`]), requests to methods
//! ([`dispatch`] onto [`filesystem::FuseFs`]), typed replies ([`reply`]),
//! and two transports behind them: /dev/fuse ([`dev`]) and FUSE over
//! io_uring ([`dev_uring`]). Ours because no FUSE crate speaks FUSE over
//! io_uring (the `fuser` crate, which the mounts began on, does not).

pub mod abi;
pub mod args;
pub mod dev;
pub mod dev_uring;
pub mod dispatch;
pub mod filesystem;
pub mod mount;
mod readers;
pub mod reply;
pub mod types;

pub use dev::{Notifier, Session};
pub use dispatch::Acl;
pub use filesystem::{FuseFs, KernelConfig, Request};
pub use reply::{
    ReplyAttr, ReplyCopy, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
};
pub use types::*;
