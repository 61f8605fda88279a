//! `ubtrfs scrub`: verification of every checksum on every copy, of an
//! unmounted image here, or of a live mount's last commit by the mount
//! (BTRFS_IOC_SCRUB, read-only; on the kernel's btrfs, the kernel's scrub
//! of each device, told to repair nothing).

use crate::{print_reports, CmdResult, ImageArgs};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// A progress bar on stderr when it is a terminal, else None.
pub fn progress_bar(total: u64, what: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = ProgressBar::new(total);
    b.set_style(
        ProgressStyle::with_template(
            "{msg} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what.to_string());
    Some(b)
}

/// Runs `work` with a progress callback (bytes done of `total`) that
/// drives a bar on a terminal, and clears the bar afterwards.
pub fn with_progress<T>(total: u64, what: &str, work: impl FnOnce(&mut dyn FnMut(u64)) -> T) -> T {
    let bar = progress_bar(total.max(1), what);
    let out = work(&mut |done| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    out
}

pub fn run(a: ScrubArgs) -> CmdResult {
    let mounted = a.image.image.is_dir()
        && matches!(
            crate::mounted::classify(&a.image.image, true)?,
            crate::mounted::Target::Mounted
        );
    let report = if mounted {
        if !a.image.devices.is_empty() {
            return Err(
                "scrub on a live mount: -d names devices of an image; a mount has its own".into(),
            );
        }
        crate::mounted::scrub(&a.image.image)?
    } else {
        let fs = a.image.open_raw()?;
        let report = with_progress(fs.info.sb.bytes_used, "scrub", |p| {
            ubtrfs_engine::tools::scrub::scrub(&fs, p)
        })?;
        print_reports(&fs);
        report
    };
    // A mount lists what it found in its own log (the kernel's btrfs: the
    // kernel's); here are its counts.
    let elsewhere = mounted && !report.clean();
    if a.json {
        let mut m = serde_json::Map::new();
        for (k, v) in report.to_json_fields() {
            m.insert(k.into(), v.into());
        }
        m.insert("errors".into(), report.errors.clone().into());
        if elsewhere {
            m.insert("errors_listed_in".into(), "the mount's log".into());
        }
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        println!("{}", report.summary());
        for e in &report.errors {
            println!("error: {e}");
        }
        if elsewhere {
            println!("the errors, with where each is: the mount's log");
        }
    }
    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
