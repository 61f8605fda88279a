//! Writes the built-in seeds into corpus/<target>/ (see README.md).
fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for t in ["node", "superblock", "superblock_csum", "decompress"] {
        let dir = root.join(t);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        for (i, s) in ubtrfs_fuzz::seeds::for_target(t).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), s).expect("write seed");
        }
    }
    println!("seeds written under {}", root.display());
}
