//! File data on disk: the validated EXTENT_DATA decoder ([`extent`]),
//! checksums of data sectors (the csum tree, [`csum`]), reads of extent
//! data ([`read`]), and sets of byte ranges ([`ranges`]).

pub mod csum;
pub mod extent;
pub mod ranges;
pub mod read;
