//! File data on disk: checksums of data sectors (the csum tree).

pub mod csum;
