//! The send stream format's numbers: the stream header's magic, command
//! and attribute (TLV) types, and the limits of protocol versions 1 and 2.
//! Facts from btrfs-progs' Documentation/dev/dev-send-stream.rst and
//! kernel-shared/send.h. Send writes streams with them and receive reads
//! them.

/// The stream header's magic (then a le32 protocol version).
pub const MAGIC: &[u8; 13] = b"btrfs-stream\0";

/// Command numbers.
pub mod cmd {
    pub const SUBVOL: u16 = 1;
    pub const SNAPSHOT: u16 = 2;
    pub const MKFILE: u16 = 3;
    pub const MKDIR: u16 = 4;
    pub const MKNOD: u16 = 5;
    pub const MKFIFO: u16 = 6;
    pub const MKSOCK: u16 = 7;
    pub const SYMLINK: u16 = 8;
    pub const RENAME: u16 = 9;
    pub const LINK: u16 = 10;
    pub const UNLINK: u16 = 11;
    pub const RMDIR: u16 = 12;
    pub const SET_XATTR: u16 = 13;
    pub const REMOVE_XATTR: u16 = 14;
    pub const WRITE: u16 = 15;
    pub const CLONE: u16 = 16;
    pub const TRUNCATE: u16 = 17;
    pub const CHMOD: u16 = 18;
    pub const CHOWN: u16 = 19;
    pub const UTIMES: u16 = 20;
    pub const END: u16 = 21;
    pub const UPDATE_EXTENT: u16 = 22;
    pub const FALLOCATE: u16 = 23;
    pub const FILEATTR: u16 = 24;
    pub const ENCODED_WRITE: u16 = 25;
}

/// Attribute (TLV) types.
pub mod attr {
    pub const UUID: u16 = 1;
    pub const CTRANSID: u16 = 2;
    pub const INO: u16 = 3;
    pub const SIZE: u16 = 4;
    pub const MODE: u16 = 5;
    pub const UID: u16 = 6;
    pub const GID: u16 = 7;
    pub const RDEV: u16 = 8;
    pub const CTIME: u16 = 9;
    pub const MTIME: u16 = 10;
    pub const ATIME: u16 = 11;
    pub const OTIME: u16 = 12;
    pub const XATTR_NAME: u16 = 13;
    pub const XATTR_DATA: u16 = 14;
    pub const PATH: u16 = 15;
    pub const PATH_TO: u16 = 16;
    pub const PATH_LINK: u16 = 17;
    pub const FILE_OFFSET: u16 = 18;
    pub const DATA: u16 = 19;
    pub const CLONE_UUID: u16 = 20;
    pub const CLONE_CTRANSID: u16 = 21;
    pub const CLONE_PATH: u16 = 22;
    pub const CLONE_OFFSET: u16 = 23;
    pub const CLONE_LEN: u16 = 24;
    pub const FALLOCATE_MODE: u16 = 25;
    pub const FILEATTR: u16 = 26;
    pub const UNENCODED_FILE_LEN: u16 = 27;
    pub const UNENCODED_LEN: u16 = 28;
    pub const UNENCODED_OFFSET: u16 = 29;
    pub const COMPRESSION: u16 = 30;
    pub const ENCRYPTION: u16 = 31;
}

/// Command header: le32 payload length, le16 command, le32 crc.
pub const CMD_HEADER: usize = 10;

/// fallocate(2) mode bits used by FALLOCATE.
pub const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;

/// Largest file data one WRITE carries: the kernel's send buffer minus 16K
/// for the other attributes (64K buffer in v1, 16K + 128K in v2).
pub fn max_write(proto: u32) -> u64 {
    if proto >= 2 {
        128 * 1024
    } else {
        48 * 1024
    }
}
