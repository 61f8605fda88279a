//! Our own FUSE protocol layer, in place of the `fuser` crate's sessions
//! (whose value types we keep): the kernel ABI ([`abi`]), requests to
//! methods ([`dispatch`] onto [`filesystem::FuseFs`]), typed replies
//! ([`reply`]), and two transports behind them: /dev/fuse ([`dev`]) and
//! FUSE over io_uring ([`dev_uring`]), which fuser cannot speak.

pub mod abi;
pub mod dev;
pub mod dev_uring;
pub mod dispatch;
pub mod filesystem;
pub mod reply;

pub use dev::{Notifier, Session};
pub use dispatch::Acl;
pub use filesystem::{FuseFs, KernelConfig, Request};
pub use reply::{
    ReplyAttr, ReplyCopy, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
};
