//! Tree blocks: verified blocks ([`block`], the bottom, used by every
//! reader), extent buffers ([`buf`]) and the leaf layout ([`leaf`]). The
//! search over them is [`crate::ctree`], above [`crate::disk_io`].

pub mod block;
pub mod buf;
pub mod leaf;
