//! Takes the README's screenshot of a running dashboard: loads its URL in a
//! headless Chromium (`murmur_tests::browser`), waits until the page has drawn
//! a streamed snapshot whose round timeline has at least `--rounds` closed
//! rows, and writes a PNG of the whole page.
//!
//!   scripts/testnet.sh --http 127.0.0.1:8080 &
//!   cargo run --release -p murmur-tests --example dashboard_screenshot -- \
//!       http://127.0.0.1:8080/ docs/dashboard.png --rounds 6

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use murmur_tests::browser::{find_chromium, Browser};

const USAGE: &str = "usage: dashboard_screenshot <dashboard URL> <out.png> \
                     [--rounds N (default 5)] [--width W (1400)] [--height H (2000)] [--timeout SECONDS (900)]";

struct Args {
    url: String,
    out: PathBuf,
    rounds: u32,
    width: u32,
    height: u32,
    timeout: u64,
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let url = argv.next().ok_or("missing the dashboard URL")?;
    let out = PathBuf::from(argv.next().ok_or("missing the output path")?);
    let mut args = Args { url, out, rounds: 5, width: 1400, height: 2000, timeout: 900 };
    while let Some(flag) = argv.next() {
        let value = argv.next().ok_or(format!("{flag} needs a value"))?;
        let number =
            |v: &str| v.parse::<u64>().map_err(|_| format!("{flag} wants a whole number, not {v:?}"));
        match flag.as_str() {
            "--rounds" => args.rounds = number(&value)?.try_into().map_err(|_| "--rounds is too large")?,
            "--width" => args.width = number(&value)?.clamp(320, 8000) as u32,
            "--height" => args.height = number(&value)?.clamp(240, 8000) as u32,
            "--timeout" => args.timeout = number(&value)?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let Some(chromium) = find_chromium() else {
        eprintln!("no Chromium found: install Debian's `chromium` or set MURMUR_CHROMIUM");
        return ExitCode::FAILURE;
    };
    let mut browser = Browser::launch(&chromium, args.width, args.height);
    browser.goto(&args.url);
    // Closed rounds have a state id in their last cell; the open one shows "–".
    let closed = "[...document.querySelectorAll('#timeline tr[data-round]')]\
                  .filter(tr => /[0-9a-f]{12}/.test(tr.lastElementChild?.textContent || '')).length";
    browser.wait_for(
        &format!("the dashboard to stream a snapshot with {} closed rounds", args.rounds),
        &format!("Number(document.body.dataset.streamed || 0) >= 1 && {closed} >= {}", args.rounds),
        Duration::from_secs(args.timeout),
    );
    let size = browser.screenshot(&args.out);
    println!("{}: {size} bytes", args.out.display());
    ExitCode::SUCCESS
}
