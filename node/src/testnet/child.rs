//! One process of a local testnet: started from a binary beside `murmur`,
//! its stdout copied line by line to `<name>.log` and to the supervisor, its
//! stderr to `<name>.err`. On Linux the kernel kills it if the supervisor
//! dies, so no process outlives the testnet even after a SIGKILL.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;

use anyhow::{Context, Result};

/// A line a child printed.
#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    pub text: String,
}

/// A running child process.
pub struct Child {
    pub name: String,
    pub process: std::process::Child,
}

impl Child {
    /// Start `bin_dir/bin` with `args`; lines go to `lines` and the log.
    pub fn spawn(
        bin_dir: &Path,
        bin: &str,
        args: &[String],
        envs: &[(&str, String)],
        name: &str,
        log_dir: &Path,
        lines: mpsc::Sender<Line>,
    ) -> Result<Child> {
        let path = bin_dir.join(bin);
        let err = File::options()
            .create(true)
            .append(true)
            .open(log_dir.join(format!("{name}.err")))
            .with_context(|| format!("opening the log of {name}"))?;
        let mut cmd = Command::new(&path);
        cmd.args(args)
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err));
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe and touches only this process.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut process = cmd.spawn().with_context(|| {
            format!("starting {} (build it with `cargo build --release --workspace --bins`)", path.display())
        })?;
        let stdout = process.stdout.take().context("child stdout")?;
        let mut log = File::options()
            .create(true)
            .append(true)
            .open(log_dir.join(format!("{name}.log")))
            .with_context(|| format!("opening the log of {name}"))?;
        let owner = name.to_string();
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = writeln!(log, "{text}");
                if lines.send(Line { name: owner.clone(), text }).is_err() {
                    break;
                }
            }
        });
        Ok(Child { name: name.to_string(), process })
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// The exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.process.try_wait().ok().flatten()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }

    /// Ask it to stop (SIGTERM).
    pub fn terminate(&self) {
        if let Ok(pid) = i32::try_from(self.pid()) {
            // SAFETY: sending a signal to our own child's pid.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
}

/// The directory holding this binary (where `murmur-bootstrap` also lives).
pub fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the murmur binary")?;
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}
