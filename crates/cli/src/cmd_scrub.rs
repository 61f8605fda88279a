//! `ubtrfs scrub`: offline verification of every checksum on every copy.

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
    let fs = a.image.open_raw()?;
    let report = with_progress(fs.info.sb.bytes_used, "scrub", |p| {
        ubtrfs_engine::tools::scrub::scrub(&fs, p)
    })?;
    print_reports(&fs);
    if a.json {
        let mut m = serde_json::Map::new();
        for (k, v) in report.to_json_fields() {
            m.insert(k.into(), v.into());
        }
        m.insert("errors".into(), report.errors.clone().into());
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        println!("{}", report.summary());
        for e in &report.errors {
            println!("error: {e}");
        }
    }
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
