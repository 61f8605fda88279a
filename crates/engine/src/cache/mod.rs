//! Caching of verified tree blocks: the bounded block cache shared by all
//! readers of a filesystem, and readahead into it with the kernel's
//! policies.

pub mod block_cache;
pub mod reada;
