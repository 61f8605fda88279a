//! File data on disk: the validated EXTENT_DATA decoder ([`extent`]),
//! checksums of data sectors (the csum tree, [`csum`]), and reads of
//! extent data ([`read`]).

pub mod csum;
pub mod extent;
pub mod read;
