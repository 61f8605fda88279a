//! The bottom layer: block devices (behind [`dev::BlockDev`], with a file
//! and an in-memory implementation), the devices of one filesystem and
//! their superblock copies, fault-injecting and recording devices for
//! crash tests, chunk mapping for every profile, and RAID5/6
//! parity arithmetic.

pub mod aligned;
pub mod claim;
pub mod dev;
pub mod device;
pub mod fault;
pub mod overlay;
pub mod pending;
pub mod raid56;
pub mod volumes;
