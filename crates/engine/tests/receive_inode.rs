//! A received file's inode item after its buffered data and its attribute
//! commands come in every order: the receiver keeps written data and an
//! inode item changed by chown, chmod and utimes in memory between
//! commands, and every command that changes the file through the trees
//! must find them written. The item's nbytes must be what its extent
//! items add up to (as `btrfs check` counts), its size and mode what the
//! commands made.

use ubtrfs_engine::receive::{receive, ReceiveOptions};
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::EXTENT_DATA;
use ubtrfs_format::items::{FileExtent, FileExtentKind, Timespec};
use ubtrfs_format::send_stream::{attr, cmd, FALLOC_FL_KEEP_SIZE};
use ubtrfs_format::Key;

mod stream_build;
use stream_build::{encode, mem_fs, write_cmd, Cmd};

fn n(t: u16, v: u64) -> (u16, Vec<u8>) {
    (t, v.to_le_bytes().to_vec())
}

fn p(t: u16, v: &str) -> (u16, Vec<u8>) {
    (t, v.as_bytes().to_vec())
}

fn write(f: &str, off: u64, len: usize) -> Cmd {
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
    write_cmd(f.as_bytes(), off, &data)
}

/// nbytes as `btrfs check` counts it: inline extents' ram bytes, regular
/// and preallocated extents' num_bytes, holes nothing.
fn extent_bytes(t: &mut Trans, tree: u64, ino: u64) -> u64 {
    let items = t
        .items_in(
            tree,
            &Key::new(ino, EXTENT_DATA, 0),
            &Key::new(ino, EXTENT_DATA, u64::MAX),
        )
        .unwrap();
    items
        .iter()
        .map(|(_, d)| {
            let fe = FileExtent::parse(d).unwrap();
            match fe.kind {
                FileExtentKind::Inline { .. } => fe.ram_bytes,
                FileExtentKind::Extent {
                    disk_bytenr: 0,
                    prealloc: false,
                    ..
                } => 0,
                FileExtentKind::Extent { num_bytes, .. } => num_bytes,
            }
        })
        .sum()
}

#[test]
fn buffered_data_and_held_attributes_reach_the_trees_in_order() {
    let chmod = |f: &str, mode: u64| (cmd::CHMOD, vec![p(attr::PATH, f), n(attr::MODE, mode)]);
    let truncate =
        |f: &str, size: u64| (cmd::TRUNCATE, vec![p(attr::PATH, f), n(attr::SIZE, size)]);
    let utimes = |f: &str| {
        let mut t = 1_700_000_000i64.to_le_bytes().to_vec();
        t.extend_from_slice(&5u32.to_le_bytes());
        (
            cmd::UTIMES,
            vec![
                (attr::ATIME, t.clone()),
                (attr::MTIME, t.clone()),
                (attr::CTIME, t),
                p(attr::PATH, f),
            ],
        )
    };
    let prealloc = |f: &str, off: u64, len: u64| {
        (
            cmd::FALLOCATE,
            vec![
                p(attr::PATH, f),
                (
                    attr::FALLOCATE_MODE,
                    FALLOC_FL_KEEP_SIZE.to_le_bytes().to_vec(),
                ),
                n(attr::FILE_OFFSET, off),
                n(attr::SIZE, len),
            ],
        )
    };
    let xattr = |f: &str| {
        (
            cmd::SET_XATTR,
            vec![
                p(attr::PATH, f),
                p(attr::XATTR_NAME, "user.a"),
                p(attr::XATTR_DATA, "v"),
            ],
        )
    };
    // (file, commands after its creation, size, mode bits)
    let cases: Vec<(&str, Vec<Cmd>, u64, u32)> = vec![
        (
            "a",
            vec![write("a", 0, 40_000), truncate("a", 5000)],
            5000,
            0o600,
        ),
        (
            "b",
            vec![write("b", 0, 40_000), chmod("b", 0o640), truncate("b", 100)],
            100,
            0o640,
        ),
        (
            "c",
            vec![
                write("c", 0, 40_000),
                utimes("c"),
                write("c", 40_000, 9000),
                chmod("c", 0o604),
            ],
            49_000,
            0o604,
        ),
        (
            "d",
            vec![
                write("d", 0, 1000),
                chmod("d", 0o644),
                write("d", 1000, 30_000),
                truncate("d", 0),
            ],
            0,
            0o644,
        ),
        (
            "e",
            vec![
                write("e", 0, 20_000),
                prealloc("e", 65_536, 65_536),
                chmod("e", 0o600),
            ],
            20_000,
            0o600,
        ),
        (
            "f",
            vec![
                write("f", 0, 20_000),
                xattr("f"),
                truncate("f", 30_000),
                utimes("f"),
            ],
            30_000,
            0o600,
        ),
        (
            "g",
            vec![
                write("g", 0, 3000),
                chmod("g", 0o700),
                utimes("g"),
                write("g", 0, 5000),
            ],
            5000,
            0o700,
        ),
    ];
    let mut cmds: Vec<Cmd> = vec![(
        cmd::SUBVOL,
        vec![
            p(attr::PATH, "sub"),
            (attr::UUID, vec![9; 16]),
            n(attr::CTRANSID, 7),
        ],
    )];
    for (f, after, _, _) in &cases {
        cmds.push((cmd::MKFILE, vec![p(attr::PATH, f)]));
        cmds.extend(after.iter().cloned());
    }
    cmds.push((cmd::END, vec![]));
    let (_dev, mut t) = mem_fs(0x32);
    let ro = ReceiveOptions {
        now: Timespec { sec: 1, nsec: 0 },
        ..ReceiveOptions::new()
    };
    receive(&mut t, "/", &encode(&cmds)[..], ro).expect("the stream");
    for (f, _, size, mode) in &cases {
        let (tree, ino) = t.resolve_path(format!("/sub/{f}").as_bytes()).unwrap();
        let i = t.inode_of(tree, ino).unwrap();
        assert_eq!(i.size, *size, "{f}: size");
        assert_eq!(i.mode & 0o7777, *mode, "{f}: mode");
        assert_eq!(i.nbytes, extent_bytes(&mut t, tree, ino), "{f}: nbytes");
    }
}
