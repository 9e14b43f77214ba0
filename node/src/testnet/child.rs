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
    /// Start the binary at `path` with `args` (in the network namespace
    /// whose file is `netns`, if given); lines go to `lines` and the log.
    pub fn spawn(
        path: &Path,
        args: &[String],
        envs: &[(&str, String)],
        netns: Option<&Path>,
        name: &str,
        log_dir: &Path,
        lines: mpsc::Sender<Line>,
    ) -> Result<Child> {
        let ns_file = match netns {
            Some(p) => Some(File::open(p).with_context(|| format!("opening the namespace {}", p.display()))?),
            None => None,
        };
        let err = File::options()
            .create(true)
            .append(true)
            .open(log_dir.join(format!("{name}.err")))
            .with_context(|| format!("opening the log of {name}"))?;
        let mut cmd = Command::new(path);
        cmd.args(args)
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err));
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            use std::os::unix::process::CommandExt;
            let ns_fd = ns_file.as_ref().map(|f| f.as_raw_fd());
            // SAFETY: prctl and setns are async-signal-safe system calls that
            // touch only this (forked) process; the namespace file stays open
            // in the parent until spawn returns.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if let Some(fd) = ns_fd {
                        if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        #[cfg(not(target_os = "linux"))]
        if ns_file.is_some() {
            anyhow::bail!("network namespaces need Linux");
        }
        let mut process = cmd.spawn().with_context(|| {
            format!("starting {} (build it with `cargo build --release --workspace --bins`)", path.display())
        })?;
        drop(ns_file);
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
