//! A real headless Chromium driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: JSON messages ended by a NUL byte, the browser
//! reading fd 3 and writing fd 4). Tests open a page, wait with a bound until
//! an expression in the page holds, read the DOM and take a screenshot.
//!
//! Chromium's own `--dump-dom --timeout=N` is no use for a live page: recent
//! builds dump the DOM as soon as the load event fires, before any fetch or
//! event stream has delivered (seen with Debian's 156.0.8078.79), so what the
//! page shows depended on the build. Polling over the protocol does not.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// How long one protocol command may take to be answered.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Chromium: `$MURMUR_CHROMIUM`, or `chromium`/`chromium-browser`/`google-chrome`
/// on PATH.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MURMUR_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "chromium-headless-shell"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// A pipe whose two ends close on exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both descriptors are open and ours alone.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// One headless browser with one page attached; killed when dropped.
pub struct Browser {
    child: Child,
    to_browser: File,
    from_browser: Receiver<Value>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Start `chromium` headless with a fresh profile and a blank page of
    /// `width`×`height` CSS pixels.
    pub fn launch(chromium: &Path, width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().expect("browser profile dir");
        let (browser_reads, we_write) = pipe();
        let (we_read, browser_writes) = pipe();
        let (r, w) = (browser_reads.as_raw_fd(), browser_writes.as_raw_fd());
        let mut cmd = Command::new(chromium);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
        ])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync"])
        .arg("--remote-debugging-pipe")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={width},{height}"))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2, close) between
        // fork and exec. The ends are first copied above fd 10 so that
        // placing one on 3 cannot overwrite the other.
        unsafe {
            cmd.pre_exec(move || {
                let r2 = libc::fcntl(r, libc::F_DUPFD, 10);
                let w2 = libc::fcntl(w, libc::F_DUPFD, 10);
                if r2 < 0 || w2 < 0 || libc::dup2(r2, 3) < 0 || libc::dup2(w2, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(r2);
                libc::close(w2);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", chromium.display()));
        drop((browser_reads, browser_writes));
        let (tx, from_browser) = mpsc::channel();
        let reader = BufReader::new(File::from(we_read));
        std::thread::spawn(move || {
            for message in reader.split(0).map_while(Result::ok) {
                let Ok(v) = serde_json::from_slice::<Value>(&message) else { continue };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let mut b = Browser {
            child,
            to_browser: File::from(we_write),
            from_browser,
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = b.command("Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"].as_str().expect("a target id").to_string();
        let attached = b.command("Target.attachToTarget", json!({ "targetId": target, "flatten": true }));
        b.session = attached["sessionId"].as_str().expect("a session id").to_string();
        b.command(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        b
    }

    /// Send `method` (to the page once attached) and wait for its result.
    fn command(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&msg).expect("encode");
        bytes.push(0);
        self.to_browser.write_all(&bytes).unwrap_or_else(|e| panic!("sending {method} to the browser: {e}"));
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from_browser.recv_timeout(left) {
                Ok(v) if v["id"] == id => {
                    assert!(v["error"].is_null(), "{method} failed: {}", v["error"]);
                    return v["result"].clone();
                }
                Ok(_) => {} // an event, or an answer to something else
                Err(RecvTimeoutError::Timeout) => {
                    panic!("the browser did not answer {method} in {COMMAND_TIMEOUT:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the browser closed its pipe while asked {method} ({:?})", self.child.try_wait())
                }
            }
        }
    }

    /// Open `url` in the page.
    pub fn goto(&mut self, url: &str) {
        let r = self.command("Page.navigate", json!({ "url": url }));
        assert!(r["errorText"].is_null(), "navigating to {url}: {}", r["errorText"]);
    }

    /// The value of JavaScript `expression` in the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.command("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true }));
        assert!(r["exceptionDetails"].is_null(), "{expression} threw: {}", r["exceptionDetails"]);
        r["result"]["value"].clone()
    }

    /// Poll `expression` until it is `true`, for at most `timeout`; panics
    /// naming `what` and the page's text otherwise. While the page loads the
    /// expression may throw (no `document.body` yet): that counts as false.
    pub fn wait_for(&mut self, what: &str, expression: &str, timeout: Duration) {
        let guarded = format!(
            "(() => {{ try {{ return ({expression}) === true; }} catch (e) {{ return false; }} }})()"
        );
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.eval(&guarded) == json!(true) {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let body = self.eval("document.body ? document.body.outerHTML.slice(0, 4000) : ''");
        panic!("timed out after {timeout:?} waiting for {what} ({expression}); the page: {body}");
    }

    /// The page's whole DOM as HTML.
    pub fn dom(&mut self) -> String {
        self.eval("document.documentElement.outerHTML").as_str().unwrap_or_default().to_string()
    }

    /// A PNG of the whole page, written to `path`; returns its size in bytes.
    pub fn screenshot(&mut self, path: &Path) -> usize {
        let r =
            self.command("Page.captureScreenshot", json!({ "format": "png", "captureBeyondViewport": true }));
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap_or_default())
            .expect("the screenshot is base64");
        std::fs::write(path, &png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        png.len()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
