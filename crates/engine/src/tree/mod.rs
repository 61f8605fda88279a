//! B-trees: verified tree blocks ([`block`], the bottom, used by every
//! reader) and the cursor that searches and iterates a tree ([`ctree`],
//! above [`crate::disk_io`]).

pub mod block;
pub mod buf;
pub mod ctree;
pub mod leaf;
