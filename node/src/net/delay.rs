//! Link latency injected in the application, for emulated home links
//! (`murmur testnet --home-links`, docs/operations.md): this kernel's
//! `tc` has no netem, so a node started with `MURMUR_NET_DELAY_MS=D` holds
//! every byte it receives over TCP for D ms before libp2p sees it. Two such
//! nodes see a round-trip time of 2·D on top of the link's own. Bandwidth
//! caps are the kernel's (`tc qdisc tbf`); only the delay lives here.
//!
//! The socket is still read as fast as bytes arrive (at most
//! `MAX_HELD_BYTES` held), so the delay does not shrink TCP's window: it is
//! a delay line, not a throttle.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};

/// Most received bytes held back at once per connection; past it the
/// socket is left unread until some are delivered (TCP's flow control).
pub const MAX_HELD_BYTES: usize = 16 << 20;
/// Longest delay accepted from the environment.
pub const MAX_DELAY: Duration = Duration::from_secs(2);
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 64 << 10;

/// The receive delay this process was started with (`MURMUR_NET_DELAY_MS`),
/// or an error naming what is wrong with it.
pub fn delay_from_env() -> Result<Option<Duration>, String> {
    let Ok(v) = std::env::var("MURMUR_NET_DELAY_MS") else { return Ok(None) };
    let ms: u64 = v
        .trim()
        .parse()
        .map_err(|_| format!("MURMUR_NET_DELAY_MS={v:?} is not a whole number of milliseconds"))?;
    let d = Duration::from_millis(ms);
    if d > MAX_DELAY {
        return Err(format!(
            "MURMUR_NET_DELAY_MS={ms} is above the {} ms this emulation allows",
            MAX_DELAY.as_millis()
        ));
    }
    Ok((ms > 0).then_some(d))
}

/// A stream whose received bytes are delivered `delay` after they arrived.
/// Writes pass straight through.
pub struct Delayed<S> {
    inner: S,
    delay: Duration,
    /// Chunks received, each with when it may be delivered, oldest first.
    held: VecDeque<(Instant, Vec<u8>)>,
    /// Bytes of the front chunk already delivered.
    offset: usize,
    held_bytes: usize,
    /// The socket reached its end (delivered once `held` is empty).
    eof: bool,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S> Delayed<S> {
    pub fn new(inner: S, delay: Duration) -> Self {
        Self { inner, delay, held: VecDeque::new(), offset: 0, held_bytes: 0, eof: false, timer: None }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Delayed<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Take in whatever the socket has now, stamped with its delivery time.
        while !this.eof && this.held_bytes < MAX_HELD_BYTES {
            let mut chunk = vec![0u8; READ_CHUNK];
            match Pin::new(&mut this.inner).poll_read(cx, &mut chunk) {
                Poll::Ready(Ok(0)) => this.eof = true,
                Poll::Ready(Ok(n)) => {
                    chunk.truncate(n);
                    this.held_bytes += n;
                    this.held.push_back((Instant::now() + this.delay, chunk));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        loop {
            let Some((due, chunk)) = this.held.front() else {
                // Nothing held: the end, or wait for the socket (it has our waker).
                return if this.eof { Poll::Ready(Ok(0)) } else { Poll::Pending };
            };
            if *due <= Instant::now() {
                let n = buf.len().min(chunk.len() - this.offset);
                buf[..n].copy_from_slice(&chunk[this.offset..this.offset + n]);
                this.offset += n;
                this.held_bytes -= n;
                if this.offset == chunk.len() {
                    this.held.pop_front();
                    this.offset = 0;
                }
                return Poll::Ready(Ok(n));
            }
            let due = *due;
            let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            timer.as_mut().reset(due);
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The moment came between the check and the timer: deliver now.
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Delayed<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_arrive_after_the_delay_in_order_and_whole() {
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let delay = Duration::from_millis(150);
        let mut delayed = Delayed::new(futures::io::Cursor::new(payload.clone()), delay);
        let started = std::time::Instant::now();
        let mut first = [0u8; 1];
        delayed.read_exact(&mut first).await.expect("first byte");
        let waited = started.elapsed();
        assert!(waited >= delay, "first byte after {waited:?}, before the {delay:?} delay");
        let mut rest = Vec::new();
        delayed.read_to_end(&mut rest).await.expect("rest");
        assert_eq!(first[0], payload[0]);
        assert_eq!(rest, payload[1..]);
        // Writes are not delayed.
        let mut out = Delayed::new(futures::io::Cursor::new(Vec::new()), delay);
        out.write_all(b"now").await.expect("write");
        assert_eq!(out.inner.get_ref().as_slice(), b"now");
    }

    #[test]
    fn the_environment_setting_is_checked() {
        // One test owns the variable (tests run in threads of one process).
        std::env::set_var("MURMUR_NET_DELAY_MS", "20");
        assert_eq!(delay_from_env(), Ok(Some(Duration::from_millis(20))));
        std::env::set_var("MURMUR_NET_DELAY_MS", "0");
        assert_eq!(delay_from_env(), Ok(None));
        std::env::set_var("MURMUR_NET_DELAY_MS", "soon");
        assert!(delay_from_env().is_err_and(|e| e.contains("whole number")));
        std::env::set_var("MURMUR_NET_DELAY_MS", "5000");
        assert!(delay_from_env().is_err_and(|e| e.contains("2000 ms")));
        std::env::remove_var("MURMUR_NET_DELAY_MS");
        assert_eq!(delay_from_env(), Ok(None));
    }
}
