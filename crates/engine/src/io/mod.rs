//! The bottom layer: block devices (behind [`dev::BlockDev`], with a file
//! and an in-memory implementation), the devices of one filesystem and
//! their superblock copies, chunk mapping for every profile, and RAID5/6
//! parity arithmetic.

pub mod dev;
pub mod device;
pub mod raid56;
pub mod volumes;
