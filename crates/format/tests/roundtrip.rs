//! Property tests: every item encoder's output decodes to the same value,
//! has the advertised length, and decoding arbitrary bytes never panics.

use proptest::prelude::*;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::*;
use ubtrfs_format::key::Key;

fn key() -> impl Strategy<Value = Key> {
    (any::<u64>(), any::<u8>(), any::<u64>()).prop_map(|(o, t, f)| Key::new(o, t, f))
}

fn ts() -> impl Strategy<Value = Timespec> {
    (any::<i64>(), any::<u32>()).prop_map(|(sec, nsec)| Timespec { sec, nsec })
}

prop_compose! {
    fn inode()(a in any::<[u64; 8]>(), b in any::<[u32; 4]>(),
               t in [ts(), ts(), ts(), ts()]) -> InodeItem {
        InodeItem {
            generation: a[0], transid: a[1], size: a[2], nbytes: a[3],
            block_group: a[4], nlink: b[0], uid: b[1], gid: b[2], mode: b[3],
            rdev: a[5], flags: a[6], sequence: a[7],
            atime: t[0], ctime: t[1], mtime: t[2], otime: t[3],
        }
    }
}

prop_compose! {
    fn root_item()(inode in inode(), a in any::<[u64; 11]>(), refs in any::<u32>(),
                   drop_progress in key(), lv in any::<[u8; 2]>(),
                   u in any::<[[u8; 16]; 3]>(), t in [ts(), ts(), ts(), ts()]) -> RootItem {
        RootItem {
            inode, generation: a[0], root_dirid: a[1], bytenr: a[2], byte_limit: a[3],
            bytes_used: a[4], last_snapshot: a[5], flags: a[6], refs, drop_progress,
            drop_level: lv[0], level: lv[1], generation_v2: a[0],
            uuid: u[0], parent_uuid: u[1], received_uuid: u[2],
            ctransid: a[7], otransid: a[8], stransid: a[9], rtransid: a[10],
            ctime: t[0], otime: t[1], stime: t[2], rtime: t[3],
        }
    }
}

fn inline_ref() -> impl Strategy<Value = InlineRef> {
    prop_oneof![
        any::<u64>().prop_map(|root| InlineRef::TreeBlock { root }),
        any::<u64>().prop_map(|parent| InlineRef::SharedBlock { parent }),
        any::<u64>().prop_map(|root| InlineRef::ExtentOwner { root }),
        (any::<u64>(), any::<u32>())
            .prop_map(|(parent, count)| InlineRef::SharedData { parent, count }),
        (any::<[u64; 3]>(), any::<u32>()).prop_map(|(a, count)| {
            InlineRef::ExtentData(ExtentDataRef {
                root: a[0],
                objectid: a[1],
                offset: a[2],
                count,
            })
        }),
    ]
}

prop_compose! {
    fn extent_record()(head in any::<[u64; 3]>(), skinny in any::<bool>(),
                       info_key in key(), level in any::<u8>(),
                       refs in prop::collection::vec(inline_ref(), 0..8))
                       -> (Key, ExtentRecord) {
        let item = ExtentItem { refs: head[0], generation: head[1], flags: head[2] };
        let key_type = if skinny { METADATA_ITEM } else { EXTENT_ITEM };
        let tree_block = (!skinny && item.is_tree_block())
            .then_some(TreeBlockInfo { key: info_key, level });
        (Key::new(1 << 20, key_type, 0), ExtentRecord { item, tree_block, refs })
    }
}

prop_compose! {
    fn chunk()(h in any::<[u64; 4]>(), w in any::<[u32; 3]>(), sub in any::<u16>(),
               stripes in prop::collection::vec((any::<u64>(), any::<u64>(), any::<[u8; 16]>()), 1..6))
               -> ChunkItem {
        ChunkItem {
            length: h[0] | 1,
            owner: h[1],
            // parse insists on a power of two.
            stripe_len: 1 << (h[2] % 64),
            chunk_type: h[3],
            io_align: w[0], io_width: w[1], sector_size: w[2],
            num_stripes: stripes.len() as u16,
            sub_stripes: sub,
            stripes: stripes.into_iter()
                .map(|(devid, offset, dev_uuid)| Stripe { devid, offset, dev_uuid })
                .collect(),
        }
    }
}

proptest! {
    #[test]
    fn inode_item(i in inode()) {
        let b = i.to_bytes();
        prop_assert_eq!(b.len(), InodeItem::ENCODED_LEN);
        prop_assert_eq!(InodeItem::parse(&b).unwrap(), i);
    }

    #[test]
    fn root_item_round_trip(r in root_item()) {
        let b = r.to_bytes();
        prop_assert_eq!(b.len(), RootItem::ENCODED_LEN);
        prop_assert_eq!(RootItem::parse(&b).unwrap(), r);
    }

    #[test]
    fn extent_record_round_trip((key, rec) in extent_record()) {
        let b = rec.to_bytes();
        prop_assert_eq!(b.len(), rec.encoded_len());
        prop_assert_eq!(ExtentRecord::parse(&key, &b).unwrap(), rec.clone());
        // Sorting keeps the kernel's order and loses nothing.
        let mut sorted = rec;
        sorted.sort_refs();
        for w in sorted.refs.windows(2) {
            prop_assert!(w[0].order_key() <= w[1].order_key());
        }
    }

    #[test]
    fn keyed_refs(r in inline_ref(), bytenr in any::<u64>()) {
        if let Some((k, d)) = r.to_keyed(bytenr) {
            prop_assert_eq!(InlineRef::from_keyed(&k, &d).unwrap(), r);
        }
    }

    #[test]
    fn chunk_item(c in chunk()) {
        let b = c.to_bytes();
        prop_assert_eq!(b.len(), c.encoded_len());
        prop_assert_eq!(ChunkItem::parse(&b).unwrap(), c);
    }

    #[test]
    fn dir_entries(entries in prop::collection::vec(
        (key(), any::<u64>(), any::<u8>(),
         prop::collection::vec(any::<u8>(), 0..300),
         prop::collection::vec(any::<u8>(), 0..300)), 1..4)) {
        let entries: Vec<DirEntry> = entries.iter()
            .map(|(location, transid, file_type, name, data)| DirEntry {
                location: *location, transid: *transid, file_type: *file_type,
                name, data,
            })
            .collect();
        let mut b = Vec::new();
        for e in &entries {
            e.encode(&mut b);
        }
        prop_assert_eq!(b.len(), entries.iter().map(DirEntry::encoded_len).sum::<usize>());
        prop_assert_eq!(parse_dir_entries(&b).unwrap(), entries);
    }

    #[test]
    fn inode_refs(refs in prop::collection::vec(
        (any::<u64>(), any::<u64>(), prop::collection::vec(any::<u8>(), 0..300)), 1..4),
        parent in any::<u64>()) {
        let as_ref: Vec<InodeRef> = refs.iter()
            .map(|(_, index, name)| InodeRef { parent, index: *index, name })
            .collect();
        let mut b = Vec::new();
        as_ref.iter().for_each(|r| r.encode_ref(&mut b));
        prop_assert_eq!(parse_inode_refs(&Key::new(257, INODE_REF, parent), &b).unwrap(), as_ref);
        let as_ext: Vec<InodeRef> = refs.iter()
            .map(|(parent, index, name)| InodeRef { parent: *parent, index: *index, name })
            .collect();
        let mut b = Vec::new();
        as_ext.iter().for_each(|r| r.encode_extref(&mut b));
        prop_assert_eq!(parse_inode_extrefs(&b).unwrap(), as_ext);
    }

    #[test]
    fn file_extent(h in any::<[u64; 6]>(), c in any::<[u8; 2]>(), oe in any::<u16>(),
                   t in 0u8..3, data in prop::collection::vec(any::<u8>(), 0..200)) {
        let kind = match t {
            0 => FileExtentKind::Inline { data: &data },
            _ => FileExtentKind::Extent {
                prealloc: t == 2, disk_bytenr: h[2], disk_num_bytes: h[3],
                offset: h[4], num_bytes: h[5],
            },
        };
        let e = FileExtent { generation: h[0], ram_bytes: h[1], compression: c[0],
                             encryption: c[1], other_encoding: oe, kind };
        let b = e.to_bytes();
        prop_assert_eq!(b.len(), e.encoded_len());
        prop_assert_eq!(FileExtent::parse(&b).unwrap(), e);
    }

    #[test]
    fn root_ref(d in any::<[u64; 2]>(), name in prop::collection::vec(any::<u8>(), 0..300)) {
        let r = RootRef { dirid: d[0], sequence: d[1], name: &name };
        let b = r.to_bytes();
        prop_assert_eq!(RootBackref::parse(&b).unwrap(), r);
    }

    #[test]
    fn fixed_small_items(a in any::<[u64; 5]>(), w in any::<[u32; 5]>(), u in any::<[[u8; 16]; 2]>(),
                         s in any::<[u8; 2]>()) {
        let bg = BlockGroupItem { used: a[0], chunk_objectid: a[1], flags: a[2] };
        prop_assert_eq!(BlockGroupItem::parse(&bg.to_bytes()).unwrap(), bg);
        let de = DevExtent { chunk_tree: a[0], chunk_objectid: a[1], chunk_offset: a[2],
                             length: a[3], chunk_tree_uuid: u[0] };
        prop_assert_eq!(DevExtent::parse(&de.to_bytes()).unwrap(), de);
        let fsi = FreeSpaceInfo { extent_count: w[0], flags: w[1] };
        prop_assert_eq!(FreeSpaceInfo::parse(&fsi.to_bytes()).unwrap(), fsi);
        let dev = DevItem { devid: a[0], total_bytes: a[1], bytes_used: a[2], io_align: w[0],
                            io_width: w[1], sector_size: w[2], dev_type: a[3], generation: a[4],
                            start_offset: a[0] ^ a[1], dev_group: w[3], seek_speed: s[0],
                            bandwidth: s[1], uuid: u[0], fsid: u[1] };
        prop_assert_eq!(DevItem::parse(&dev.to_bytes()).unwrap(), dev);
        let ids = a.to_vec();
        let mut b = Vec::new();
        encode_uuid_item(&ids, &mut b);
        prop_assert_eq!(parse_uuid_item(&b).unwrap(), ids);
    }

    /// Decoders given arbitrary bytes return errors, never panic.
    #[test]
    fn decoders_never_panic(data in prop::collection::vec(any::<u8>(), 0..600), k in key()) {
        let _ = InodeItem::parse(&data);
        let _ = RootItem::parse(&data);
        let _ = RootRef::parse(&data);
        let _ = parse_inode_refs(&k, &data);
        let _ = parse_inode_extrefs(&data);
        let _ = parse_dir_entries(&data);
        let _ = FileExtent::parse(&data);
        let _ = ChunkItem::parse(&data);
        let _ = DevItem::parse(&data);
        let _ = DevExtent::parse(&data);
        let _ = BlockGroupItem::parse(&data);
        let _ = FreeSpaceInfo::parse(&data);
        let _ = DevStats::parse(&data);
        let _ = parse_uuid_item(&data);
        let _ = csum_item_entries(&data, 4);
        for t in [EXTENT_ITEM, METADATA_ITEM, k.item_type] {
            let _ = ExtentRecord::parse(&Key::new(k.objectid, t, k.offset), &data);
        }
        let _ = InlineRef::from_keyed(&k, &data);
        let _ = bitmap_runs(&data, k.offset % 6000);
    }
}
