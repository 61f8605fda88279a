//! Man pages and shell completions made from the command line's own
//! definition (clap_mangen, clap_complete), so that they say what
//! `--help` says: `ubtrfs gen-docs --man DIR --completions DIR`, which
//! scripts/setup.sh runs and installs.

use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct GenDocsArgs {
    /// Where to write ubtrfs.1 and a page per command (ubtrfs-mount.1, ...).
    #[arg(long, value_name = "DIR")]
    man: Option<PathBuf>,
    /// Where to write the completions for bash (ubtrfs), zsh (_ubtrfs) and
    /// fish (ubtrfs.fish).
    #[arg(long, value_name = "DIR")]
    completions: Option<PathBuf>,
}

pub fn run<C: CommandFactory>(a: GenDocsArgs) -> crate::CmdResult {
    let cmd = C::command();
    if let Some(dir) = &a.man {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        man_pages(&cmd, "", dir)?;
    }
    if let Some(dir) = &a.completions {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut c = cmd.clone();
            clap_complete::generate_to(shell, &mut c, "ubtrfs", dir)
                .map_err(|e| format!("{} completions in {}: {e}", shell, dir.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The page of `cmd` (named after `prefix` and its name) and of each
/// visible subcommand below it.
fn man_pages(cmd: &clap::Command, prefix: &str, dir: &Path) -> Result<(), String> {
    let name = if prefix.is_empty() {
        cmd.get_name().to_string()
    } else {
        format!("{prefix}-{}", cmd.get_name())
    };
    // clap takes a static name; this command runs once and ends.
    let static_name: &'static str = Box::leak(name.clone().into_boxed_str());
    let page = cmd.clone().name(static_name);
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| format!("man page of {name}: {e}"))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() != "help" {
            man_pages(sub, &name, dir)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_completions_cover_every_command() {
        let dir = std::env::temp_dir().join(format!("ubtrfs-gen-docs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run::<crate::Cli>(GenDocsArgs {
            man: Some(dir.join("man")),
            completions: Some(dir.join("comp")),
        })
        .unwrap();
        let top = std::fs::read_to_string(dir.join("man/ubtrfs.1")).unwrap();
        for sub in crate::Cli::command()
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
        {
            let n = sub.get_name();
            if n == "help" {
                continue;
            }
            assert!(top.contains(n), "ubtrfs.1 names {n}");
            assert!(
                dir.join(format!("man/ubtrfs-{n}.1")).exists(),
                "ubtrfs-{n}.1"
            );
        }
        assert!(!top.contains("gen-docs"));
        let mount = std::fs::read_to_string(dir.join("man/ubtrfs-mount.1")).unwrap();
        assert!(mount.contains(r"ubtrfs\-mount") || mount.contains("ubtrfs-mount"));
        for f in ["ubtrfs.bash", "_ubtrfs", "ubtrfs.fish"] {
            let c = std::fs::read_to_string(dir.join("comp").join(f)).unwrap();
            assert!(c.contains("mkfs"), "{f} completes mkfs");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
