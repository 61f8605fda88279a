//! btrfs's ioctl ABI (include/uapi/linux/btrfs.h): command numbers and
//! argument layouts, decoded and encoded as bytes. The mount's daemon
//! serves these ioctls (FUSE forwards an ioctl whose argument size its
//! command encodes) and the command line sends them to a path inside a
//! mount, ubtrfs's or the kernel's: both sides read the same layouts from
//! here. Every argument is little-endian, as on the machines FUSE and
//! btrfs run on together.

/// The ioctl type byte of btrfs's commands.
pub const BTRFS_IOCTL_MAGIC: u32 = 0x94;

const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// The command number of `_IOC(dir, 0x94, nr, size)`.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (BTRFS_IOCTL_MAGIC << 8) | nr
}

/// struct btrfs_ioctl_vol_args: fd, then a name of up to 4087 bytes.
pub const VOL_ARGS_SIZE: usize = 4096;
/// struct btrfs_ioctl_vol_args_v2: fd, transid, flags, 32 unused bytes,
/// then a name of up to 4039 bytes (or a subvolume or device id).
pub const VOL_ARGS_V2_SIZE: usize = 4096;
const V2_NAME_AT: usize = 56;
/// struct btrfs_ioctl_ino_lookup_args: tree id, inode, a path of up to
/// 4080 bytes.
pub const INO_LOOKUP_SIZE: usize = 4096;
/// struct btrfs_ioctl_fs_info_args.
pub const FS_INFO_SIZE: usize = 1024;
/// struct btrfs_ioctl_get_subvol_info_args.
pub const SUBVOL_INFO_SIZE: usize = 504;
/// struct btrfs_ioctl_get_subvol_rootref_args: min_treeid, 255 (treeid,
/// dirid) pairs, the count at 4088.
pub const ROOTREF_ARGS_SIZE: usize = 4096;
pub const ROOTREF_MAX: usize = 255;
/// struct btrfs_ioctl_ino_lookup_user_args: dirid, treeid, the
/// subvolume's name (256 bytes), the path (3824 bytes).
pub const INO_LOOKUP_USER_SIZE: usize = 4096;
const LOOKUP_USER_NAME_AT: usize = 16;
const LOOKUP_USER_PATH_AT: usize = 272;
/// struct btrfs_ioctl_scrub_args: devid, range and flags in, the
/// progress (15 counters) out, padded to 1 KiB.
pub const SCRUB_ARGS_SIZE: usize = 1024;
/// BTRFS_SCRUB_READONLY: verify, repair nothing.
pub const SCRUB_READONLY: u64 = 1;
/// struct btrfs_ioctl_dev_info_args: devid, uuid, bytes used and total,
/// the filesystem's id, then the device's path at 3072 (1024 bytes).
pub const DEV_INFO_SIZE: usize = 4096;
const DEV_INFO_PATH_AT: usize = 3072;
/// struct btrfs_ioctl_search_args: the key (104 bytes), then the
/// results.
pub const SEARCH_ARGS_SIZE: usize = 4096;
pub const SEARCH_KEY_SIZE: usize = 104;
/// struct btrfs_ioctl_search_header, before each item's data.
pub const SEARCH_HEADER_SIZE: usize = 32;
/// struct btrfs_ioctl_send_args.
pub const SEND_ARGS_SIZE: usize = 72;
/// ubtrfs's send with its clone sources inline: the kernel's argument,
/// then up to [`SEND_CLONES_MAX`] subvolume ids in place of the pointer
/// FUSE cannot follow (same number as SEND, another size: served by a
/// ubtrfs mount only, as SPACE_INFO_FIXED).
pub const SEND_CLONES_SIZE: usize = 1024;
pub const SEND_CLONES_MAX: usize = (SEND_CLONES_SIZE - SEND_ARGS_SIZE) / 8;

/// BTRFS_IOC_SYNC = _IO(0x94, 8): write back and commit.
pub const SYNC: u32 = ioc(0, 8, 0);
/// FS_IOC_GETFSLABEL / FS_IOC_SETFSLABEL: the label, char[256].
pub const GET_FSLABEL: u32 = ioc(IOC_READ, 49, LABEL_SIZE);
pub const SET_FSLABEL: u32 = ioc(IOC_WRITE, 50, LABEL_SIZE);
pub const LABEL_SIZE: usize = 256;
pub const SUBVOL_CREATE: u32 = ioc(IOC_WRITE, 14, VOL_ARGS_SIZE);
pub const SNAP_DESTROY: u32 = ioc(IOC_WRITE, 15, VOL_ARGS_SIZE);
pub const INO_LOOKUP: u32 = ioc(IOC_READ | IOC_WRITE, 18, INO_LOOKUP_SIZE);
pub const DEFAULT_SUBVOL: u32 = ioc(IOC_WRITE, 19, 8);
pub const SNAP_CREATE_V2: u32 = ioc(IOC_WRITE, 23, VOL_ARGS_V2_SIZE);
pub const SUBVOL_CREATE_V2: u32 = ioc(IOC_WRITE, 24, VOL_ARGS_V2_SIZE);
pub const SUBVOL_GETFLAGS: u32 = ioc(IOC_READ, 25, 8);
pub const SUBVOL_SETFLAGS: u32 = ioc(IOC_WRITE, 26, 8);
pub const FS_INFO: u32 = ioc(IOC_READ, 31, FS_INFO_SIZE);
pub const DEV_INFO: u32 = ioc(IOC_READ | IOC_WRITE, 30, DEV_INFO_SIZE);
pub const SCRUB: u32 = ioc(IOC_READ | IOC_WRITE, 27, SCRUB_ARGS_SIZE);
pub const GET_SUBVOL_INFO: u32 = ioc(IOC_READ, 60, SUBVOL_INFO_SIZE);
pub const GET_SUBVOL_ROOTREF: u32 = ioc(IOC_READ | IOC_WRITE, 61, ROOTREF_ARGS_SIZE);
pub const INO_LOOKUP_USER: u32 = ioc(IOC_READ | IOC_WRITE, 62, INO_LOOKUP_USER_SIZE);
pub const SNAP_DESTROY_V2: u32 = ioc(IOC_WRITE, 63, VOL_ARGS_V2_SIZE);
pub const SEND: u32 = ioc(IOC_WRITE, 38, SEND_ARGS_SIZE);
pub const SEND_CLONES: u32 = ioc(IOC_WRITE, 38, SEND_CLONES_SIZE);
pub const TREE_SEARCH: u32 = ioc(IOC_READ | IOC_WRITE, 17, SEARCH_ARGS_SIZE);
/// BTRFS_IOC_SPACE_INFO: a 16-byte head (slots given, spaces found); the
/// kernel writes the slots past it, which FUSE does not pass.
pub const SPACE_INFO: u32 = ioc(IOC_READ | IOC_WRITE, 20, SPACE_HEAD_SIZE);
/// ubtrfs's SPACE_INFO of a fixed size, with room for [`SPACE_SLOTS`]
/// slots: the same number with the size of that struct, which the kernel's
/// btrfs does not answer (ENOTTY) and a ubtrfs mount does.
pub const SPACE_INFO_FIXED: u32 = ioc(IOC_READ | IOC_WRITE, 20, SPACE_FIXED_SIZE);
pub const SPACE_SLOTS: usize = 16;
pub const SPACE_HEAD_SIZE: usize = 16;
const SPACE_SLOT_SIZE: usize = 24;
pub const SPACE_FIXED_SIZE: usize = SPACE_HEAD_SIZE + SPACE_SLOTS * SPACE_SLOT_SIZE;
/// The flag of the global reserve's slot.
pub const SPACE_INFO_GLOBAL_RSV: u64 = 1 << 49;

/// BTRFS_SEND_FLAG_*.
pub const SEND_FLAG_NO_FILE_DATA: u64 = 0x1;
pub const SEND_FLAG_OMIT_STREAM_HEADER: u64 = 0x2;
pub const SEND_FLAG_OMIT_END_CMD: u64 = 0x4;
pub const SEND_FLAG_VERSION: u64 = 0x8;
pub const SEND_FLAG_COMPRESSED: u64 = 0x10;

/// vol_args_v2 flags.
pub const SUBVOL_RDONLY: u64 = 1 << 1;
pub const SUBVOL_QGROUP_INHERIT: u64 = 1 << 2;
pub const SUBVOL_SPEC_BY_ID: u64 = 1 << 4;

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// The NUL-terminated name in `b` (all of `b` without a NUL).
fn c_name(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

/// A subvolume ioctl's argument, v1 or v2 as its command says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolArgs {
    /// A file descriptor of the caller (a snapshot's source).
    pub fd: i64,
    /// v2 only.
    pub flags: u64,
    /// The name, or empty when `flags` has SUBVOL_SPEC_BY_ID.
    pub name: Vec<u8>,
    /// With SUBVOL_SPEC_BY_ID: the subvolume's id.
    pub subvolid: u64,
}

impl VolArgs {
    /// Decodes the argument of `cmd` (a v2 command when `v2`); None when
    /// it is shorter than its struct.
    pub fn parse(b: &[u8], v2: bool) -> Option<VolArgs> {
        let size = if v2 { VOL_ARGS_V2_SIZE } else { VOL_ARGS_SIZE };
        let b = b.get(..size)?;
        let fd = u64_at(b, 0) as i64;
        if !v2 {
            return Some(VolArgs {
                fd,
                flags: 0,
                name: c_name(&b[8..size - 1]).to_vec(),
                subvolid: 0,
            });
        }
        let flags = u64_at(b, 16);
        let by_id = flags & SUBVOL_SPEC_BY_ID != 0;
        Some(VolArgs {
            fd,
            flags,
            name: if by_id {
                Vec::new()
            } else {
                c_name(&b[V2_NAME_AT..size - 1]).to_vec()
            },
            subvolid: if by_id { u64_at(b, V2_NAME_AT) } else { 0 },
        })
    }

    /// The v2 argument bytes (the command line's request).
    pub fn to_v2_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; VOL_ARGS_V2_SIZE];
        b[..8].copy_from_slice(&self.fd.to_le_bytes());
        b[16..24].copy_from_slice(&self.flags.to_le_bytes());
        if self.flags & SUBVOL_SPEC_BY_ID != 0 {
            b[V2_NAME_AT..V2_NAME_AT + 8].copy_from_slice(&self.subvolid.to_le_bytes());
        } else {
            let n = self.name.len().min(VOL_ARGS_V2_SIZE - V2_NAME_AT - 1);
            b[V2_NAME_AT..V2_NAME_AT + n].copy_from_slice(&self.name[..n]);
        }
        b
    }
}

/// BTRFS_IOC_SEND's argument: where the stream goes (a descriptor of
/// the caller), the parent snapshot, flags and protocol version. The
/// kernel's clone sources are a pointer to the caller's memory, which a
/// FUSE daemon cannot follow: on a ubtrfs mount `clone_sources_count` is
/// 0 in SEND, and SEND_CLONES carries the ids inline (the parent is a
/// clone source all the same, as in the kernel).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendArgs {
    pub send_fd: i64,
    pub clone_sources_count: u64,
    /// The kernel's pointer to the clone sources (SEND to the kernel).
    pub clone_sources_ptr: u64,
    /// The clone sources inline (SEND_CLONES).
    pub clone_sources: Vec<u64>,
    pub parent_root: u64,
    pub flags: u64,
    pub version: u32,
}

impl SendArgs {
    /// SEND's argument, or SEND_CLONES' (its ids read as far as its count
    /// says, at most [`SEND_CLONES_MAX`]; None past that).
    pub fn parse(b: &[u8]) -> Option<SendArgs> {
        let head = b.get(..SEND_ARGS_SIZE)?;
        let count = u64_at(head, 8);
        let clone_sources = if b.len() >= SEND_CLONES_SIZE && count > 0 {
            if count > SEND_CLONES_MAX as u64 {
                return None;
            }
            (0..count as usize)
                .map(|i| u64_at(b, SEND_ARGS_SIZE + 8 * i))
                .collect()
        } else {
            Vec::new()
        };
        Some(SendArgs {
            send_fd: u64_at(head, 0) as i64,
            clone_sources_count: count,
            clone_sources_ptr: u64_at(head, 16),
            clone_sources,
            parent_root: u64_at(head, 24),
            flags: u64_at(head, 32),
            version: u64_at(head, 40) as u32,
        })
    }

    /// SEND_CLONES' argument; None with more clone sources than fit.
    pub fn to_clones_bytes(&self) -> Option<Vec<u8>> {
        if self.clone_sources.len() > SEND_CLONES_MAX {
            return None;
        }
        let mut b = SendArgs {
            clone_sources_count: self.clone_sources.len() as u64,
            clone_sources_ptr: 0,
            ..self.clone()
        }
        .to_bytes();
        b.resize(SEND_CLONES_SIZE, 0);
        for (i, id) in self.clone_sources.iter().enumerate() {
            let at = SEND_ARGS_SIZE + 8 * i;
            b[at..at + 8].copy_from_slice(&id.to_le_bytes());
        }
        Some(b)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; SEND_ARGS_SIZE];
        b[0..8].copy_from_slice(&self.send_fd.to_le_bytes());
        b[8..16].copy_from_slice(&self.clone_sources_count.to_le_bytes());
        b[16..24].copy_from_slice(&self.clone_sources_ptr.to_le_bytes());
        b[24..32].copy_from_slice(&self.parent_root.to_le_bytes());
        b[32..40].copy_from_slice(&self.flags.to_le_bytes());
        b[40..44].copy_from_slice(&self.version.to_le_bytes());
        b
    }
}

/// BTRFS_IOC_TREE_SEARCH's key: the tree (0: the file's), the range of
/// keys as (objectid, type, offset) triples compared whole, the leaves'
/// generations, and how many items at most (in) or were found (out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchKey {
    pub tree_id: u64,
    pub min_objectid: u64,
    pub max_objectid: u64,
    pub min_offset: u64,
    pub max_offset: u64,
    pub min_transid: u64,
    pub max_transid: u64,
    pub min_type: u32,
    pub max_type: u32,
    pub nr_items: u32,
}

impl SearchKey {
    pub fn parse(b: &[u8]) -> Option<SearchKey> {
        let b = b.get(..SEARCH_KEY_SIZE)?;
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        Some(SearchKey {
            tree_id: u64_at(b, 0),
            min_objectid: u64_at(b, 8),
            max_objectid: u64_at(b, 16),
            min_offset: u64_at(b, 24),
            max_offset: u64_at(b, 32),
            min_transid: u64_at(b, 40),
            max_transid: u64_at(b, 48),
            min_type: u32_at(56),
            max_type: u32_at(60),
            nr_items: u32_at(64),
        })
    }

    /// The whole argument: this key and an empty result area.
    pub fn to_args(&self) -> Vec<u8> {
        let mut b = vec![0u8; SEARCH_ARGS_SIZE];
        for (i, v) in [
            self.tree_id,
            self.min_objectid,
            self.max_objectid,
            self.min_offset,
            self.max_offset,
            self.min_transid,
            self.max_transid,
        ]
        .iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[56..60].copy_from_slice(&self.min_type.to_le_bytes());
        b[60..64].copy_from_slice(&self.max_type.to_le_bytes());
        b[64..68].copy_from_slice(&self.nr_items.to_le_bytes());
        b
    }

    /// The lowest and highest keys of the range.
    pub fn range(&self) -> (crate::Key, crate::Key) {
        (
            crate::Key::new(
                self.min_objectid,
                self.min_type.min(255) as u8,
                self.min_offset,
            ),
            crate::Key::new(
                self.max_objectid,
                self.max_type.min(255) as u8,
                self.max_offset,
            ),
        )
    }
}

/// Appends one search result (header and item data) to `out`, the result
/// area; false (nothing appended) when it does not fit in `room` bytes.
pub fn push_search_result(
    out: &mut Vec<u8>,
    room: usize,
    transid: u64,
    key: &crate::Key,
    data: &[u8],
) -> bool {
    if out.len() + SEARCH_HEADER_SIZE + data.len() > room {
        return false;
    }
    out.extend_from_slice(&transid.to_le_bytes());
    out.extend_from_slice(&key.objectid.to_le_bytes());
    out.extend_from_slice(&key.offset.to_le_bytes());
    out.extend_from_slice(&(key.item_type as u32).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
    true
}

/// The `n` results in a TREE_SEARCH answer's result area `buf`: (leaf
/// generation, key, data); stops at the first that does not fit.
pub fn search_results(buf: &[u8], n: u32) -> Vec<(u64, crate::Key, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    for _ in 0..n {
        let Some(h) = buf.get(at..at + SEARCH_HEADER_SIZE) else {
            break;
        };
        let len = u32::from_le_bytes(h[28..32].try_into().unwrap_or([0; 4])) as usize;
        let Some(data) = buf.get(at + SEARCH_HEADER_SIZE..at + SEARCH_HEADER_SIZE + len) else {
            break;
        };
        let typ = u32::from_le_bytes(h[24..28].try_into().unwrap_or([0; 4]));
        out.push((
            u64_at(h, 0),
            crate::Key::new(u64_at(h, 8), typ.min(255) as u8, u64_at(h, 16)),
            data,
        ));
        at += SEARCH_HEADER_SIZE + len;
    }
    out
}

/// One slot of a SPACE_INFO answer: (flags, total bytes, used bytes).
pub type SpaceSlot = (u64, u64, u64);

/// A SPACE_INFO answer of `slots` (at most `room` of them written; the
/// count of all in the head).
pub fn encode_space(slots: &[SpaceSlot], room: usize) -> Vec<u8> {
    let n = slots.len().min(room);
    let mut b = Vec::with_capacity(SPACE_HEAD_SIZE + n * SPACE_SLOT_SIZE);
    b.extend_from_slice(&(room as u64).to_le_bytes());
    b.extend_from_slice(&(slots.len() as u64).to_le_bytes());
    for &(f, t, u) in &slots[..n] {
        for v in [f, t, u] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    b
}

/// The slots of a SPACE_INFO answer `b` (as many as it holds and counts).
pub fn decode_space(b: &[u8]) -> Vec<SpaceSlot> {
    let given = u64_at(b, 0) as usize;
    let total = u64_at(b, 8) as usize;
    (0..given.min(total))
        .map_while(|i| {
            let at = SPACE_HEAD_SIZE + i * SPACE_SLOT_SIZE;
            b.get(at..at + SPACE_SLOT_SIZE)
                .map(|s| (u64_at(s, 0), u64_at(s, 8), u64_at(s, 16)))
        })
        .collect()
}

/// BTRFS_IOC_INO_LOOKUP's argument: which tree and inode in; the tree
/// (when 0 was asked: the one the file is in) and the inode's path from
/// that tree's top, ending in '/', out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InoLookup {
    pub treeid: u64,
    pub objectid: u64,
    pub name: Vec<u8>,
}

impl InoLookup {
    pub fn parse(b: &[u8]) -> Option<InoLookup> {
        let b = b.get(..INO_LOOKUP_SIZE)?;
        Some(InoLookup {
            treeid: u64_at(b, 0),
            objectid: u64_at(b, 8),
            name: c_name(&b[16..INO_LOOKUP_SIZE - 1]).to_vec(),
        })
    }

    /// The argument bytes; None when the name does not fit.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        if self.name.len() >= INO_LOOKUP_SIZE - 16 {
            return None;
        }
        let mut b = vec![0u8; INO_LOOKUP_SIZE];
        b[..8].copy_from_slice(&self.treeid.to_le_bytes());
        b[8..16].copy_from_slice(&self.objectid.to_le_bytes());
        b[16..16 + self.name.len()].copy_from_slice(&self.name);
        Some(b)
    }
}

/// BTRFS_IOC_FS_INFO's answer (the fields ubtrfs fills; the rest stay 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsInfo {
    pub max_id: u64,
    pub num_devices: u64,
    pub fsid: [u8; 16],
    pub nodesize: u32,
    pub sectorsize: u32,
    pub clone_alignment: u32,
    pub csum_type: u16,
    pub csum_size: u16,
    /// BTRFS_FS_INFO_FLAG_*: which of the fields below were asked for.
    pub flags: u64,
    pub generation: u64,
    pub metadata_uuid: [u8; 16],
}

/// FS_INFO flags: the checksum, generation and metadata UUID fields.
pub const FS_INFO_FLAG_CSUM_INFO: u64 = 1 << 0;
pub const FS_INFO_FLAG_GENERATION: u64 = 1 << 1;
pub const FS_INFO_FLAG_METADATA_UUID: u64 = 1 << 2;

impl FsInfo {
    /// The flags a caller asked for in its argument.
    pub fn asked_flags(b: &[u8]) -> u64 {
        u64_at(b, 48)
    }

    pub fn parse(b: &[u8]) -> Option<FsInfo> {
        let b = b.get(..FS_INFO_SIZE)?;
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        let u16_at = |at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap_or([0; 2]));
        Some(FsInfo {
            max_id: u64_at(b, 0),
            num_devices: u64_at(b, 8),
            fsid: b[16..32].try_into().unwrap_or([0; 16]),
            nodesize: u32_at(32),
            sectorsize: u32_at(36),
            clone_alignment: u32_at(40),
            csum_type: u16_at(44),
            csum_size: u16_at(46),
            flags: u64_at(b, 48),
            generation: u64_at(b, 56),
            metadata_uuid: b[64..80].try_into().unwrap_or([0; 16]),
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; FS_INFO_SIZE];
        b[0..8].copy_from_slice(&self.max_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.num_devices.to_le_bytes());
        b[16..32].copy_from_slice(&self.fsid);
        b[32..36].copy_from_slice(&self.nodesize.to_le_bytes());
        b[36..40].copy_from_slice(&self.sectorsize.to_le_bytes());
        b[40..44].copy_from_slice(&self.clone_alignment.to_le_bytes());
        b[44..46].copy_from_slice(&self.csum_type.to_le_bytes());
        b[46..48].copy_from_slice(&self.csum_size.to_le_bytes());
        b[48..56].copy_from_slice(&self.flags.to_le_bytes());
        b[56..64].copy_from_slice(&self.generation.to_le_bytes());
        b[64..80].copy_from_slice(&self.metadata_uuid);
        b
    }
}

/// A time as the ioctls carry it (struct btrfs_ioctl_timespec: seconds,
/// nanoseconds, 16 bytes with its padding).
fn put_time(b: &mut [u8], at: usize, t: &crate::items::Timespec) {
    b[at..at + 8].copy_from_slice(&t.sec.to_le_bytes());
    b[at + 8..at + 12].copy_from_slice(&t.nsec.to_le_bytes());
}

fn time_at(b: &[u8], at: usize) -> crate::items::Timespec {
    crate::items::Timespec {
        sec: u64_at(b, at) as i64,
        nsec: u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap_or([0; 4])),
    }
}

/// BTRFS_IOC_GET_SUBVOL_INFO's answer: the root item of the subvolume the
/// file is in, and its back reference (parent, directory, name; none for
/// the top level).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubvolInfo {
    pub treeid: u64,
    pub name: Vec<u8>,
    pub parent_id: u64,
    pub dirid: u64,
    pub generation: u64,
    pub flags: u64,
    pub uuid: [u8; 16],
    pub parent_uuid: [u8; 16],
    pub received_uuid: [u8; 16],
    pub ctransid: u64,
    pub otransid: u64,
    pub stransid: u64,
    pub rtransid: u64,
    pub ctime: crate::items::Timespec,
    pub otime: crate::items::Timespec,
    pub stime: crate::items::Timespec,
    pub rtime: crate::items::Timespec,
}

impl SubvolInfo {
    pub fn parse(b: &[u8]) -> Option<SubvolInfo> {
        let b = b.get(..SUBVOL_INFO_SIZE)?;
        let uuid = |at: usize| b[at..at + 16].try_into().unwrap_or([0; 16]);
        Some(SubvolInfo {
            treeid: u64_at(b, 0),
            name: c_name(&b[8..8 + 255]).to_vec(),
            parent_id: u64_at(b, 264),
            dirid: u64_at(b, 272),
            generation: u64_at(b, 280),
            flags: u64_at(b, 288),
            uuid: uuid(296),
            parent_uuid: uuid(312),
            received_uuid: uuid(328),
            ctransid: u64_at(b, 344),
            otransid: u64_at(b, 352),
            stransid: u64_at(b, 360),
            rtransid: u64_at(b, 368),
            ctime: time_at(b, 376),
            otime: time_at(b, 392),
            stime: time_at(b, 408),
            rtime: time_at(b, 424),
        })
    }

    /// The answer's bytes (a name past 255 bytes is cut).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; SUBVOL_INFO_SIZE];
        b[0..8].copy_from_slice(&self.treeid.to_le_bytes());
        let n = self.name.len().min(255);
        b[8..8 + n].copy_from_slice(&self.name[..n]);
        for (at, v) in [
            (264, self.parent_id),
            (272, self.dirid),
            (280, self.generation),
            (288, self.flags),
            (344, self.ctransid),
            (352, self.otransid),
            (360, self.stransid),
            (368, self.rtransid),
        ] {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[296..312].copy_from_slice(&self.uuid);
        b[312..328].copy_from_slice(&self.parent_uuid);
        b[328..344].copy_from_slice(&self.received_uuid);
        put_time(&mut b, 376, &self.ctime);
        put_time(&mut b, 392, &self.otime);
        put_time(&mut b, 408, &self.stime);
        put_time(&mut b, 424, &self.rtime);
        b
    }
}

/// BTRFS_IOC_GET_SUBVOL_ROOTREF: from `min_treeid` on, the subvolumes
/// directly inside the file's subvolume (id, directory), at most
/// [`ROOTREF_MAX`] a call; `min_treeid` out is where the next call starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rootrefs {
    pub min_treeid: u64,
    pub refs: Vec<(u64, u64)>,
}

impl Rootrefs {
    pub fn parse(b: &[u8]) -> Option<Rootrefs> {
        let b = b.get(..ROOTREF_ARGS_SIZE)?;
        let n = (b[4088] as usize).min(ROOTREF_MAX);
        Some(Rootrefs {
            min_treeid: u64_at(b, 0),
            refs: (0..n)
                .map(|i| (u64_at(b, 8 + 16 * i), u64_at(b, 16 + 16 * i)))
                .collect(),
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; ROOTREF_ARGS_SIZE];
        b[0..8].copy_from_slice(&self.min_treeid.to_le_bytes());
        let n = self.refs.len().min(ROOTREF_MAX);
        for (i, (t, d)) in self.refs[..n].iter().enumerate() {
            b[8 + 16 * i..16 + 16 * i].copy_from_slice(&t.to_le_bytes());
            b[16 + 16 * i..24 + 16 * i].copy_from_slice(&d.to_le_bytes());
        }
        b[4088] = n as u8;
        b
    }
}

/// BTRFS_IOC_INO_LOOKUP_USER: for subvolume `treeid` whose entry is in
/// directory `dirid` of the file's subvolume, the directory's path from
/// the file (ending in '/'; empty when `dirid` is the file) and the
/// subvolume's name, for callers who may read and search each directory
/// on the way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InoLookupUser {
    pub dirid: u64,
    pub treeid: u64,
    pub name: Vec<u8>,
    pub path: Vec<u8>,
}

impl InoLookupUser {
    pub fn parse(b: &[u8]) -> Option<InoLookupUser> {
        let b = b.get(..INO_LOOKUP_USER_SIZE)?;
        Some(InoLookupUser {
            dirid: u64_at(b, 0),
            treeid: u64_at(b, 8),
            name: c_name(&b[LOOKUP_USER_NAME_AT..LOOKUP_USER_PATH_AT - 1]).to_vec(),
            path: c_name(&b[LOOKUP_USER_PATH_AT..INO_LOOKUP_USER_SIZE - 1]).to_vec(),
        })
    }

    /// The argument's bytes; None when the name or the path does not fit.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        if self.name.len() >= LOOKUP_USER_PATH_AT - LOOKUP_USER_NAME_AT
            || self.path.len() >= INO_LOOKUP_USER_SIZE - LOOKUP_USER_PATH_AT
        {
            return None;
        }
        let mut b = vec![0u8; INO_LOOKUP_USER_SIZE];
        b[0..8].copy_from_slice(&self.dirid.to_le_bytes());
        b[8..16].copy_from_slice(&self.treeid.to_le_bytes());
        b[LOOKUP_USER_NAME_AT..LOOKUP_USER_NAME_AT + self.name.len()].copy_from_slice(&self.name);
        b[LOOKUP_USER_PATH_AT..LOOKUP_USER_PATH_AT + self.path.len()].copy_from_slice(&self.path);
        Some(b)
    }
}

/// BTRFS_IOC_SCRUB's argument: which device and range, flags, and what
/// the scrub found (struct btrfs_scrub_progress, in its order). Past the
/// kernel's counters, in its padding, a ubtrfs mount also answers the
/// superblock copies checked, the copies it could not verify and the
/// data sectors checked (the kernel leaves these 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubArgs {
    pub devid: u64,
    pub start: u64,
    pub end: u64,
    pub flags: u64,
    /// data_extents_scrubbed .. unverified_errors: see [`ScrubArgs::COUNTERS`].
    pub progress: [u64; 15],
    /// ubtrfs's: superblocks checked, copies not verifiable, data sectors
    /// checked.
    pub ubtrfs: [u64; 3],
}

impl ScrubArgs {
    /// The names of the kernel's counters, in their order.
    pub const COUNTERS: [&'static str; 15] = [
        "data_extents_scrubbed",
        "tree_extents_scrubbed",
        "data_bytes_scrubbed",
        "tree_bytes_scrubbed",
        "read_errors",
        "csum_errors",
        "verify_errors",
        "no_csum",
        "csum_discards",
        "super_errors",
        "malloc_errors",
        "uncorrectable_errors",
        "corrected_errors",
        "last_physical",
        "unverified_errors",
    ];
    const PROGRESS_AT: usize = 32;
    const UBTRFS_AT: usize = 32 + 15 * 8;

    /// The counter named `name` (one of [`ScrubArgs::COUNTERS`]).
    pub fn counter(&self, name: &str) -> u64 {
        Self::COUNTERS
            .iter()
            .position(|&n| n == name)
            .map_or(0, |i| self.progress[i])
    }

    pub fn set(&mut self, name: &str, v: u64) {
        if let Some(i) = Self::COUNTERS.iter().position(|&n| n == name) {
            self.progress[i] = v;
        }
    }

    pub fn parse(b: &[u8]) -> Option<ScrubArgs> {
        let b = b.get(..SCRUB_ARGS_SIZE)?;
        Some(ScrubArgs {
            devid: u64_at(b, 0),
            start: u64_at(b, 8),
            end: u64_at(b, 16),
            flags: u64_at(b, 24),
            progress: std::array::from_fn(|i| u64_at(b, Self::PROGRESS_AT + 8 * i)),
            ubtrfs: std::array::from_fn(|i| u64_at(b, Self::UBTRFS_AT + 8 * i)),
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; SCRUB_ARGS_SIZE];
        for (i, v) in [self.devid, self.start, self.end, self.flags]
            .iter()
            .chain(&self.progress)
            .chain(&self.ubtrfs)
            .enumerate()
        {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// BTRFS_IOC_DEV_INFO: the device `devid` asks for (or, when `uuid` is
/// not zero, the device with that UUID), and what the mount knows of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevInfo {
    pub devid: u64,
    pub uuid: [u8; 16],
    /// Bytes of the device in chunks (its DEV_ITEM's bytes_used).
    pub bytes_used: u64,
    /// The device's size in the filesystem (its DEV_ITEM's total_bytes).
    pub total_bytes: u64,
    pub fsid: [u8; 16],
    /// The path the mount opened it by (empty: missing).
    pub path: Vec<u8>,
}

impl DevInfo {
    pub fn parse(b: &[u8]) -> Option<DevInfo> {
        let b = b.get(..DEV_INFO_SIZE)?;
        Some(DevInfo {
            devid: u64_at(b, 0),
            uuid: b[8..24].try_into().unwrap_or([0; 16]),
            bytes_used: u64_at(b, 24),
            total_bytes: u64_at(b, 32),
            fsid: b[40..56].try_into().unwrap_or([0; 16]),
            path: c_name(&b[DEV_INFO_PATH_AT..DEV_INFO_SIZE - 1]).to_vec(),
        })
    }

    /// The argument bytes (a path too long is cut, as the kernel's
    /// strscpy cuts it).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; DEV_INFO_SIZE];
        b[0..8].copy_from_slice(&self.devid.to_le_bytes());
        b[8..24].copy_from_slice(&self.uuid);
        b[24..32].copy_from_slice(&self.bytes_used.to_le_bytes());
        b[32..40].copy_from_slice(&self.total_bytes.to_le_bytes());
        b[40..56].copy_from_slice(&self.fsid);
        let n = self.path.len().min(DEV_INFO_SIZE - DEV_INFO_PATH_AT - 1);
        b[DEV_INFO_PATH_AT..DEV_INFO_PATH_AT + n].copy_from_slice(&self.path[..n]);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers uapi/linux/btrfs.h gives (printed by a C program with
    /// the kernel's header on 2026-12-01).
    #[test]
    fn command_numbers_are_the_kernels() {
        assert_eq!(SYNC, 0x0000_9408);
        assert_eq!(GET_FSLABEL, 0x8100_9431);
        assert_eq!(SET_FSLABEL, 0x4100_9432);
        assert_eq!(SUBVOL_CREATE, 0x5000_940e);
        assert_eq!(SNAP_DESTROY, 0x5000_940f);
        assert_eq!(INO_LOOKUP, 0xd000_9412);
        assert_eq!(DEFAULT_SUBVOL, 0x4008_9413);
        assert_eq!(SNAP_CREATE_V2, 0x5000_9417);
        assert_eq!(SUBVOL_CREATE_V2, 0x5000_9418);
        assert_eq!(SUBVOL_GETFLAGS, 0x8008_9419);
        assert_eq!(SUBVOL_SETFLAGS, 0x4008_941a);
        assert_eq!(FS_INFO, 0x8400_941f);
        assert_eq!(DEV_INFO, 0xd000_941e);
        assert_eq!(SCRUB, 0xc400_941b);
        assert_eq!(GET_SUBVOL_INFO, 0x81f8_943c);
        assert_eq!(GET_SUBVOL_ROOTREF, 0xd000_943d);
        assert_eq!(INO_LOOKUP_USER, 0xd000_943e);
        assert_eq!(SEND_CLONES & 0xffff, SEND & 0xffff);
        assert_eq!(SNAP_DESTROY_V2, 0x5000_943f);
        assert_eq!(SEND, 0x4048_9426);
        assert_eq!(TREE_SEARCH, 0xd000_9411);
        assert_eq!(SPACE_INFO, 0xc010_9414);
    }

    #[test]
    fn vol_args_round_trip_and_short_input_is_refused() {
        let a = VolArgs {
            fd: 7,
            flags: SUBVOL_RDONLY,
            name: b"snap".to_vec(),
            subvolid: 0,
        };
        assert_eq!(VolArgs::parse(&a.to_v2_bytes(), true), Some(a));
        let by_id = VolArgs {
            fd: 0,
            flags: SUBVOL_SPEC_BY_ID,
            name: Vec::new(),
            subvolid: 300,
        };
        assert_eq!(VolArgs::parse(&by_id.to_v2_bytes(), true), Some(by_id));
        assert_eq!(VolArgs::parse(&[0; 100], true), None);
        // A name without its NUL stops at the struct's end.
        let v1 = [b'x'; VOL_ARGS_SIZE];
        assert_eq!(VolArgs::parse(&v1, false).unwrap().name.len(), 4087);
    }

    #[test]
    fn search_key_and_results_round_trip() {
        let k = SearchKey {
            tree_id: 1,
            min_objectid: 256,
            max_objectid: u64::MAX,
            min_type: 132,
            max_type: 144,
            max_offset: u64::MAX,
            max_transid: u64::MAX,
            nr_items: 4096,
            ..SearchKey::default()
        };
        assert_eq!(SearchKey::parse(&k.to_args()), Some(k));
        let mut buf = Vec::new();
        let key = crate::Key::new(256, 132, 0);
        assert!(push_search_result(&mut buf, 100, 7, &key, b"abc"));
        assert!(!push_search_result(&mut buf, 100, 7, &key, &[0; 60]));
        assert_eq!(search_results(&buf, 1), vec![(7, key, &b"abc"[..])]);
        // A count past what the area holds stops at its end.
        assert_eq!(search_results(&buf, 5).len(), 1);
    }

    #[test]
    fn space_answers_round_trip_within_their_room() {
        let slots = [(1, 100, 10), (4 | 32, 50, 5), (2 | 32, 8, 1)];
        assert_eq!(decode_space(&encode_space(&slots, 16)), slots);
        assert_eq!(decode_space(&encode_space(&slots, 2)), slots[..2]);
        assert_eq!(encode_space(&slots, 16).len(), SPACE_HEAD_SIZE + 3 * 24);
        assert!(decode_space(&[0xff; 20]).is_empty());
    }

    #[test]
    fn send_args_round_trip() {
        let a = SendArgs {
            send_fd: 1,
            clone_sources_count: 0,
            parent_root: 257,
            flags: SEND_FLAG_VERSION | SEND_FLAG_COMPRESSED,
            version: 2,
            ..Default::default()
        };
        assert_eq!(SendArgs::parse(&a.to_bytes()), Some(a));
        assert_eq!(SendArgs::parse(&[0; 71]), None);
    }

    #[test]
    fn fs_info_and_ino_lookup_round_trip() {
        let f = FsInfo {
            max_id: 1,
            num_devices: 1,
            fsid: [3; 16],
            nodesize: 16384,
            sectorsize: 4096,
            clone_alignment: 4096,
            csum_type: 0,
            csum_size: 4,
            flags: FS_INFO_FLAG_CSUM_INFO | FS_INFO_FLAG_GENERATION,
            generation: 9,
            metadata_uuid: [3; 16],
        };
        assert_eq!(FsInfo::parse(&f.to_bytes()), Some(f));
        let l = InoLookup {
            treeid: 256,
            objectid: 257,
            name: b"a/b/".to_vec(),
        };
        assert_eq!(InoLookup::parse(&l.to_bytes().unwrap()), Some(l));
        assert!(InoLookup {
            treeid: 0,
            objectid: 0,
            name: vec![b'a'; 5000]
        }
        .to_bytes()
        .is_none());
    }

    #[test]
    fn send_clones_carry_their_ids_inline() {
        let a = SendArgs {
            send_fd: 3,
            clone_sources: vec![257, 260],
            parent_root: 258,
            flags: SEND_FLAG_VERSION,
            version: 2,
            ..Default::default()
        };
        let b = a.to_clones_bytes().unwrap();
        assert_eq!(b.len(), SEND_CLONES_SIZE);
        let back = SendArgs::parse(&b).unwrap();
        assert_eq!(back.clone_sources, [257, 260]);
        assert_eq!((back.parent_root, back.version), (258, 2));
        // The kernel's form carries no ids; a count past the room is no
        // argument.
        assert!(SendArgs::parse(&a.to_bytes())
            .unwrap()
            .clone_sources
            .is_empty());
        let mut bad = b.clone();
        bad[8..16].copy_from_slice(&(SEND_CLONES_MAX as u64 + 1).to_le_bytes());
        assert!(SendArgs::parse(&bad).is_none());
    }

    #[test]
    fn subvol_info_rootrefs_and_user_lookup_round_trip() {
        let t = |sec, nsec| crate::items::Timespec { sec, nsec };
        let i = SubvolInfo {
            treeid: 257,
            name: b"snap".to_vec(),
            parent_id: 5,
            dirid: 256,
            generation: 9,
            flags: 1,
            uuid: [1; 16],
            parent_uuid: [2; 16],
            received_uuid: [3; 16],
            ctransid: 9,
            otransid: 8,
            stransid: 0,
            rtransid: 0,
            ctime: t(100, 5),
            otime: t(90, 6),
            stime: t(0, 0),
            rtime: t(0, 0),
        };
        assert_eq!(SubvolInfo::parse(&i.to_bytes()), Some(i));
        let r = Rootrefs {
            min_treeid: 300,
            refs: vec![(257, 256), (299, 260)],
        };
        assert_eq!(Rootrefs::parse(&r.to_bytes()), Some(r));
        let mut bad = vec![0u8; ROOTREF_ARGS_SIZE];
        bad[4088] = 255;
        assert_eq!(Rootrefs::parse(&bad).unwrap().refs.len(), 255);
        let u = InoLookupUser {
            dirid: 260,
            treeid: 258,
            name: b"inner".to_vec(),
            path: b"a/b/".to_vec(),
        };
        assert_eq!(InoLookupUser::parse(&u.to_bytes().unwrap()), Some(u));
    }
}
