//! `ubtrfs inspect`: dump-super, dump-tree, manifest.

use crate::output::{hex, pct, ts_human};
use crate::{print_reports, CmdResult, ImageArgs};
use clap::{Args, Subcommand};
use serde_json::json;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::tree::block::BlockExpect;
use ubtrfs_engine::Filesystem;
use ubtrfs_format::bytes::format_uuid;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::*;
use ubtrfs_format::key::{fmt_objectid, Key};

#[derive(Subcommand)]
pub enum InspectCmd {
    /// Print the superblock (like `btrfs inspect-internal dump-super`).
    DumpSuper {
        #[command(flatten)]
        image: ImageArgs,
        #[arg(long)]
        json: bool,
    },
    /// Print tree blocks and decoded items (like `btrfs inspect-internal dump-tree`).
    DumpTree(DumpTreeArgs),
    /// Print a file's extent map (data, inline, prealloc and hole
    /// ranges); or, with -o FILE.png and no PATH, draw each device's space
    /// as block groups coloured by type and lit by use (btrfs-heatmap's
    /// idea).
    Map {
        #[command(flatten)]
        image: ImageArgs,
        /// The file whose extents to print.
        #[arg(required_unless_present = "output")]
        path: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Write the picture of the devices' space to this PNG file.
        #[arg(short = 'o', long = "output", value_name = "FILE.png", conflicts_with_all = ["path", "json"])]
        output: Option<PathBuf>,
        /// Width of the picture in pixels.
        #[arg(long, default_value_t = 512)]
        width: u32,
    },
    /// Print the kernel-oracle manifest (JSON lines) of the tree at PATH.
    Manifest {
        #[command(flatten)]
        image: ImageArgs,
        #[arg(default_value = "/")]
        path: PathBuf,
    },
}

#[derive(Args)]
pub struct DumpTreeArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Only this tree: a name (root, extent, chunk, dev, fs, csum, quota, uuid,
    /// free-space, block-group) or a numeric id.
    #[arg(short = 't', long = "tree")]
    tree: Option<String>,
}

pub fn run(cmd: InspectCmd) -> CmdResult {
    match cmd {
        InspectCmd::DumpSuper { image, json } => dump_super(image, json),
        InspectCmd::DumpTree(a) => dump_tree(a),
        InspectCmd::Map {
            image,
            output: Some(out),
            width,
            ..
        } => draw_map(&image.open()?, &out, width),
        InspectCmd::Map {
            image, path, json, ..
        } => {
            let path = path.ok_or("inspect map: PATH, or -o FILE.png")?;
            let fs = image.open()?;
            let id = fs.resolve(path.as_os_str().as_bytes())?;
            let mut h = ubtrfs_engine::FileHandle::open(&fs, id)?;
            let map = h.map(&fs)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for r in &map {
                let kind = format!("{:?}", r.kind).to_lowercase();
                if json {
                    let mut v = json!({"start": r.start, "end": r.end, "kind": kind});
                    if let Some((b, o, c)) = r.disk {
                        v["disk_bytenr"] = b.into();
                        v["extent_offset"] = o.into();
                        v["compression"] = c.into();
                    }
                    writeln!(out, "{v}")?;
                } else {
                    write!(out, "{:>14} {:>14} {:<8}", r.start, r.end, kind)?;
                    if let Some((b, o, c)) = r.disk {
                        write!(out, " disk {b} +{o} compression {c}")?;
                    }
                    writeln!(out)?;
                }
            }
            out.flush()?;
            print_reports(&fs);
            Ok(ExitCode::SUCCESS)
        }
        InspectCmd::Manifest { image, path } => {
            let fs = image.open()?;
            let id = fs.resolve(path.as_os_str().as_bytes())?;
            let lines = crate::manifest::manifest(&fs, id)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for l in lines {
                writeln!(out, "{l}")?;
            }
            out.flush()?;
            print_reports(&fs);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn dump_super(image: ImageArgs, as_json: bool) -> CmdResult {
    ubtrfs_engine::io::claim::set_read_live(image.force);
    let dev = ubtrfs_engine::io::device::Device::open(&image.image)?;
    let s = &dev.superblock;
    let v = json!({
        "device": image.image.display().to_string(),
        "csum_type": s.csum_type.name(), "csum": hex(&s.csum[..s.csum_type.size()]),
        "bytenr": s.bytenr, "flags": s.flags, "magic": "_BHRfS_M",
        "fsid": format_uuid(&s.fsid), "metadata_uuid": format_uuid(&s.metadata_uuid),
        "label": String::from_utf8_lossy(&s.label),
        "generation": s.generation, "root": s.root, "sys_array_size": s.sys_chunk_array_size,
        "chunk_root_generation": s.chunk_root_generation, "root_level": s.root_level,
        "chunk_root": s.chunk_root, "chunk_root_level": s.chunk_root_level,
        "log_root": s.log_root, "log_root_level": s.log_root_level,
        "total_bytes": s.total_bytes, "bytes_used": s.bytes_used,
        "sectorsize": s.sectorsize, "nodesize": s.nodesize, "stripesize": s.stripesize,
        "root_dir": s.root_dir_objectid, "num_devices": s.num_devices,
        "compat_flags": s.compat_flags,
        "compat_ro_flags": s.compat_ro_flags, "compat_ro": flag_names(s.compat_ro_flags, COMPAT_RO_NAMES),
        "incompat_flags": s.incompat_flags, "incompat": flag_names(s.incompat_flags, INCOMPAT_NAMES),
        "cache_generation": s.cache_generation, "uuid_tree_generation": s.uuid_tree_generation,
        "dev_item": {
            "devid": s.dev_item.devid, "uuid": format_uuid(&s.dev_item.uuid),
            "fsid": format_uuid(&s.dev_item.fsid), "total_bytes": s.dev_item.total_bytes,
            "bytes_used": s.dev_item.bytes_used, "io_align": s.dev_item.io_align,
            "io_width": s.dev_item.io_width, "sector_size": s.dev_item.sector_size,
            "type": s.dev_item.dev_type, "generation": s.dev_item.generation,
        },
        "bad_copies": dev.bad_supers.iter().map(|(o, e)| json!({"offset": o, "error": e})).collect::<Vec<_>>(),
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "superblock: bytenr={}, device={}",
        s.bytenr,
        image.image.display()
    );
    println!("---------------------------------------------------------");
    if let serde_json::Value::Object(m) = &v {
        for (k, val) in m {
            if matches!(k.as_str(), "device" | "dev_item" | "bad_copies") {
                continue;
            }
            let shown = match val {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Array(a) => a
                    .iter()
                    .map(|x| x.as_str().unwrap_or("").to_string())
                    .collect::<Vec<_>>()
                    .join(" | "),
                other => other.to_string(),
            };
            println!("{k:<24}{shown}");
        }
    }
    println!("dev_item.devid          {}", s.dev_item.devid);
    println!("dev_item.uuid           {}", format_uuid(&s.dev_item.uuid));
    println!("dev_item.total_bytes    {}", s.dev_item.total_bytes);
    println!("dev_item.bytes_used     {}", s.dev_item.bytes_used);
    for (o, e) in &dev.bad_supers {
        println!("bad superblock copy at {o}: {e}");
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_tree_id(s: &str) -> Option<u64> {
    if let Ok(n) = s.parse::<u64>() {
        return Some(n);
    }
    let n = s.trim_end_matches("-tree").replace('_', "-");
    (1..=12u64)
        .chain([TREE_LOG_OBJECTID, DATA_RELOC_TREE_OBJECTID])
        .find(|&id| tree_name(id) == Some(n.as_str()))
}

fn dump_tree(a: DumpTreeArgs) -> CmdResult {
    let fs = a.image.open_raw()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut trees: Vec<(String, ubtrfs_engine::ctree::Tree)> = Vec::new();
    let sb = &fs.info.sb;
    let chunk = ubtrfs_engine::ctree::Tree::chunk(sb);
    match a.tree.as_deref() {
        Some(t) => {
            let id = parse_tree_id(t).ok_or_else(|| format!("unknown tree '{t}'"))?;
            let tree = match id {
                ROOT_TREE_OBJECTID => fs.root_tree,
                CHUNK_TREE_OBJECTID => chunk,
                // The log root tree (its ROOT_ITEMs point to the log trees).
                TREE_LOG_OBJECTID if sb.log_root != 0 => ubtrfs_engine::ctree::Tree::log_root(sb),
                _ => fs.tree(id)?,
            };
            trees.push((
                format!("{} tree", tree_name(id).unwrap_or("subvolume")),
                tree,
            ));
        }
        None => {
            trees.push(("root tree".into(), fs.root_tree));
            trees.push(("chunk tree".into(), chunk));
            let mut ids = Vec::new();
            ubtrfs_engine::ctree::for_each_item(
                &fs.info,
                fs.root_tree,
                Key::MIN,
                Key::MAX,
                |k, _| {
                    if k.item_type == ROOT_ITEM {
                        ids.push(k.objectid);
                    }
                    Ok(std::ops::ControlFlow::Continue(()))
                },
            )?;
            ids.dedup();
            for id in ids {
                let tree = fs.tree(id)?;
                let name = match tree_name(id) {
                    Some(n) => format!("{n} tree"),
                    None => format!("file tree {id}"),
                };
                trees.push((name, tree));
            }
        }
    }
    for (name, tree) in trees {
        writeln!(out, "{name} key ({} ROOT_ITEM 0)", fmt_objectid(tree.id))?;
        dump_block(
            &fs,
            tree.bytenr,
            BlockExpect {
                level: Some(tree.level),
                ..Default::default()
            },
            &mut out,
        )?;
    }
    out.flush()?;
    print_reports(&fs);
    Ok(ExitCode::SUCCESS)
}

/// Prints a block and, depth first, its children. Depth is bounded by the
/// level check on every child.
fn dump_block(fs: &Filesystem, bytenr: u64, expect: BlockExpect, out: &mut dyn Write) -> CmdResult {
    let b = fs.info.read_tree_block(bytenr, expect)?;
    let n = b.node();
    let h = &b.header;
    writeln!(
        out,
        "{} {bytenr} level {} items {} free space ? generation {} owner {}",
        if n.is_leaf() { "leaf" } else { "node" },
        h.level,
        h.nritems,
        h.generation,
        fmt_objectid(h.owner)
    )?;
    writeln!(out, "fs uuid {}", format_uuid(&h.fsid))?;
    writeln!(out, "chunk uuid {}", format_uuid(&h.chunk_tree_uuid))?;
    if n.is_leaf() {
        for i in 0..n.nritems() {
            let it = n.item(i);
            writeln!(out, "\titem {i} key {} itemsize {}", it.key, it.data.len())?;
            if let Err(e) = describe_item(fs, &it.key, it.data, out) {
                writeln!(out, "\t\t<corrupt item: {e}>")?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    for i in 0..n.nritems() {
        let p = n.key_ptr(i);
        writeln!(
            out,
            "\tkey {} block {} gen {}",
            p.key, p.blockptr, p.generation
        )?;
    }
    for i in 0..n.nritems() {
        let p = n.key_ptr(i);
        let e = BlockExpect {
            level: Some(h.level - 1),
            generation: Some(p.generation),
            first_key: Some(p.key),
        };
        dump_block(fs, p.blockptr, e, out)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn describe_item(
    fs: &Filesystem,
    key: &Key,
    d: &[u8],
    out: &mut dyn Write,
) -> Result<(), Box<dyn std::error::Error>> {
    match key.item_type {
        INODE_ITEM => describe_inode_item(d, out)?,
        INODE_REF => {
            for r in parse_inode_refs(key, d)? {
                writeln!(
                    out,
                    "\t\tindex {} namelen {} name: {}",
                    r.index,
                    r.name.len(),
                    pct(r.name)
                )?;
            }
        }
        INODE_EXTREF => {
            for r in parse_inode_extrefs(d)? {
                writeln!(
                    out,
                    "\t\tindex {} parent {} namelen {} name: {}",
                    r.index,
                    r.parent,
                    r.name.len(),
                    pct(r.name)
                )?;
            }
        }
        DIR_ITEM | DIR_INDEX | XATTR_ITEM => {
            for e in parse_dir_entries(d)? {
                writeln!(
                    out,
                    "\t\tlocation key {} type {} transid {} data_len {} name_len {}",
                    e.location,
                    e.file_type,
                    e.transid,
                    e.data.len(),
                    e.name.len()
                )?;
                writeln!(out, "\t\tname: {}", pct(e.name))?;
                if !e.data.is_empty() {
                    writeln!(out, "\t\tdata {}", hex(e.data))?;
                }
            }
        }
        EXTENT_DATA => describe_file_extent(d, out)?,
        ROOT_ITEM => describe_root_item(d, out)?,
        ROOT_REF | ROOT_BACKREF => {
            let r = RootRef::parse(d)?;
            writeln!(
                out,
                "\t\troot ref key dirid {} sequence {} name {}",
                r.dirid,
                r.sequence,
                pct(r.name)
            )?;
        }
        CHUNK_ITEM => describe_chunk_item(d, out)?,
        DEV_ITEM => {
            let di = DevItem::parse(d)?;
            writeln!(
                out,
                "\t\tdevid {} total_bytes {} bytes_used {}\n\t\tuuid {}\n\t\tfsid {}",
                di.devid,
                di.total_bytes,
                di.bytes_used,
                format_uuid(&di.uuid),
                format_uuid(&di.fsid)
            )?;
        }
        DEV_EXTENT => {
            let de = DevExtent::parse(d)?;
            writeln!(
                out,
                "\t\tdev extent chunk_tree {} chunk_objectid {} chunk_offset {} length {}",
                de.chunk_tree, de.chunk_objectid, de.chunk_offset, de.length
            )?;
        }
        BLOCK_GROUP_ITEM => {
            let bg = BlockGroupItem::parse(d)?;
            writeln!(
                out,
                "\t\tblock group used {} chunk_objectid {} flags {}|{}",
                bg.used,
                bg.chunk_objectid,
                block_group_kind(bg.flags),
                profile_name(bg.flags)
            )?;
        }
        EXTENT_ITEM | METADATA_ITEM => {
            let e = ExtentItem::parse(d)?;
            writeln!(
                out,
                "\t\trefs {} gen {} flags {}",
                e.refs,
                e.generation,
                if e.flags & EXTENT_FLAG_TREE_BLOCK != 0 {
                    "TREE_BLOCK"
                } else {
                    "DATA"
                }
            )?;
        }
        EXTENT_CSUM => {
            let cs = fs.info.csum_type.size();
            let len = (d.len() / cs) as u64 * fs.info.sectorsize as u64;
            // Saturating: a hostile key must not overflow the printed end.
            let end = key.offset.saturating_add(len);
            writeln!(out, "\t\trange start {} end {end} length {len}", key.offset)?;
        }
        _ => {}
    }
    Ok(())
}

/// The lines `inspect dump-tree` prints for the inode item.
fn describe_inode_item(d: &[u8], out: &mut dyn Write) -> Result<(), Box<dyn std::error::Error>> {
    let i = InodeItem::parse(d)?;
    writeln!(
        out,
        "\t\tgeneration {} transid {} size {} nbytes {} block_group {}",
        i.generation, i.transid, i.size, i.nbytes, i.block_group
    )?;
    writeln!(
        out,
        "\t\tnlink {} uid {} gid {} mode {:o} rdev {} flags 0x{:x} sequence {}",
        i.nlink, i.uid, i.gid, i.mode, i.rdev, i.flags, i.sequence
    )?;
    writeln!(
        out,
        "\t\tatime {} ctime {} mtime {} otime {}",
        ts_human(&i.atime),
        ts_human(&i.ctime),
        ts_human(&i.mtime),
        ts_human(&i.otime)
    )?;
    Ok(())
}

/// The lines `inspect dump-tree` prints for a file extent item.
fn describe_file_extent(d: &[u8], out: &mut dyn Write) -> Result<(), Box<dyn std::error::Error>> {
    let fe = FileExtent::parse(d)?;
    match fe.kind {
        FileExtentKind::Inline { data } => writeln!(out, "\t\tgeneration {} type 0 (inline)\n\t\tinline extent data size {} ram_bytes {} compression {}", fe.generation, data.len(), fe.ram_bytes, fe.compression)?,
        FileExtentKind::Extent { prealloc, disk_bytenr, disk_num_bytes, offset, num_bytes } => {
            writeln!(out, "\t\tgeneration {} type {} ({})", fe.generation, if prealloc { 2 } else { 1 }, if prealloc { "prealloc" } else { "regular" })?;
            writeln!(out, "\t\textent data disk byte {disk_bytenr} nr {disk_num_bytes}")?;
            writeln!(out, "\t\textent data offset {offset} nr {num_bytes} ram {}", fe.ram_bytes)?;
            writeln!(out, "\t\textent compression {}", fe.compression)?;
        }
    }
    Ok(())
}

/// The lines `inspect dump-tree` prints for a root item.
fn describe_root_item(d: &[u8], out: &mut dyn Write) -> Result<(), Box<dyn std::error::Error>> {
    let r = RootItem::parse(d)?;
    writeln!(
        out,
        "\t\tgeneration {} root_dirid {} bytenr {} level {} refs {}",
        r.generation, r.root_dirid, r.bytenr, r.level, r.refs
    )?;
    writeln!(
        out,
        "\t\tlastsnap {} byte_limit {} bytes_used {} flags 0x{:x}",
        r.last_snapshot, r.byte_limit, r.bytes_used, r.flags
    )?;
    writeln!(
        out,
        "\t\tuuid {}\n\t\tparent_uuid {}\n\t\treceived_uuid {}",
        format_uuid(&r.uuid),
        format_uuid(&r.parent_uuid),
        format_uuid(&r.received_uuid)
    )?;
    writeln!(
        out,
        "\t\tctransid {} otransid {} stransid {} rtransid {}",
        r.ctransid, r.otransid, r.stransid, r.rtransid
    )?;
    Ok(())
}

/// The lines `inspect dump-tree` prints for a chunk item and its stripes.
fn describe_chunk_item(d: &[u8], out: &mut dyn Write) -> Result<(), Box<dyn std::error::Error>> {
    let c = ChunkItem::parse(d)?;
    writeln!(
        out,
        "\t\tlength {} owner {} stripe_len {} type {}|{}",
        c.length,
        c.owner,
        c.stripe_len,
        block_group_kind(c.chunk_type),
        profile_name(c.chunk_type)
    )?;
    writeln!(
        out,
        "\t\tio_align {} io_width {} sector_size {}",
        c.io_align, c.io_width, c.sector_size
    )?;
    writeln!(
        out,
        "\t\tnum_stripes {} sub_stripes {}",
        c.num_stripes, c.sub_stripes
    )?;
    for (i, s) in c.stripes.iter().enumerate() {
        writeln!(
            out,
            "\t\t\tstripe {i} devid {} offset {}\n\t\t\tdev_uuid {}",
            s.devid,
            s.offset,
            format_uuid(&s.dev_uuid)
        )?;
    }
    Ok(())
}

/// `inspect map -o FILE.png`: the space picture, and its key on stdout.
fn draw_map(fs: &ubtrfs_engine::Filesystem, out: &std::path::Path, width: u32) -> CmdResult {
    use ubtrfs_engine::tools::space_map::*;
    let m = space_map(fs, width)?;
    let f = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), m.width, m.height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc
        .write_header()
        .map_err(|e| format!("{}: {e}", out.display()))?;
    w.write_image_data(&m.rgb)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    w.finish().map_err(|e| format!("{}: {e}", out.display()))?;
    println!("{}: {}x{} pixels", out.display(), m.width, m.height);
    for (devid, y0, rows, per) in &m.bands {
        println!(
            "  devid {devid}: rows {y0}..{}, {} a pixel, left to right from byte 0",
            y0 + rows,
            crate::cmd_filesystem::pretty_size(*per)
        );
    }
    let hex = |c: [u8; 3]| format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
    println!(
        "  data {}, metadata {}, system {}, mixed {}, unallocated {}; brighter is fuller",
        hex(DATA_RGB),
        hex(METADATA_RGB),
        hex(SYSTEM_RGB),
        hex(MIXED_RGB),
        hex(UNALLOCATED_RGB)
    );
    Ok(ExitCode::SUCCESS)
}
