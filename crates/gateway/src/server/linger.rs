//! A lingering close for the signaling's connections, as web servers do (nginx's
//! `lingering_close`): once hyper is done with a connection, whatever the client still sends
//! is read and thrown away for a little while before the socket is closed.
//!
//! Without it, a connection answered before its request was read to the end (`413` for a body
//! over `max_body_bytes`, sent as soon as the headers say how large it is) is closed with the
//! rest of the body unread in the kernel's buffer, and the kernel answers the close with a
//! reset: a client still sending gets "connection reset" and the `413` it was sent is lost
//! with it. Draining first lets the client finish writing, read the answer and see an orderly
//! end.
//!
//! HTTP/2 has no connection to close: an answer sent before the request's body ended is
//! followed by a reset of the request's stream, which some clients (curl 7.88) report as a
//! failure instead of the answer. So an HTTP/2 request that declares a body over
//! `max_body_bytes` is drained to its end first ([`drain_body`], within the same bounds and the
//! request's deadline) and then answered `413` ([`too_large`]).
//!
//! The cost is bounded: at most [`LINGER_TIME`] and [`LINGER_BYTES`] per connection, a read
//! deadline of [`LINGER_IDLE`] (a client that sends nothing more is closed at once), no
//! decryption (a TLS connection is drained below TLS, after its close_notify), and at most as
//! many lingering sockets as the listener has connection slots (past that, closed at once).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// The longest a closed connection lingers.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(5);
/// The most it reads while lingering.
pub(crate) const LINGER_BYTES: usize = 8 << 20;
/// How long it waits for the client's next bytes before closing.
pub(crate) const LINGER_IDLE: Duration = Duration::from_secs(1);

/// A connection that lingers when dropped: [`TcpStream`], or TLS over one.
pub(crate) trait IntoTcp: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The TCP socket under it.
    fn into_tcp(self) -> TcpStream;
}

impl IntoTcp for TcpStream {
    fn into_tcp(self) -> TcpStream {
        self
    }
}

impl IntoTcp for tokio_rustls::server::TlsStream<TcpStream> {
    fn into_tcp(self) -> TcpStream {
        self.into_inner().0
    }
}

/// `io`, read and written through; dropped, its socket drains before it closes.
pub(crate) struct Linger<I: IntoTcp> {
    io: Option<I>,
    slots: Arc<Semaphore>,
}

impl<I: IntoTcp> Linger<I> {
    /// Wraps `io`; `slots` bounds the sockets lingering at once.
    pub(crate) fn new(io: I, slots: Arc<Semaphore>) -> Self {
        Linger {
            io: Some(io),
            slots,
        }
    }

    fn io(&mut self) -> &mut I {
        self.io
            .as_mut()
            .expect("the connection is there until drop")
    }
}

impl<I: IntoTcp> Drop for Linger<I> {
    fn drop(&mut self) {
        let Some(io) = self.io.take() else { return };
        let (Ok(slot), Ok(rt)) = (
            self.slots.clone().try_acquire_owned(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        rt.spawn(async move {
            drain(io.into_tcp()).await;
            drop(slot);
        });
    }
}

/// Ends our side (FIN, after whatever TLS sent), then reads and discards until the client
/// closes, goes quiet, or the bounds are reached.
async fn drain(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        let mut buf = [0u8; 16 * 1024];
        let mut read = 0;
        while read < LINGER_BYTES {
            match tokio::time::timeout(LINGER_IDLE, tcp.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => read += n,
                _ => break,
            }
        }
    })
    .await;
}

impl<I: IntoTcp> AsyncRead for Linger<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_read(cx, buf)
    }
}

impl<I: IntoTcp> AsyncWrite for Linger<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.io()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.io()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.io()).poll_shutdown(cx)
    }
}

/// The declared length of an HTTP/2 request's body, when it is over `max`: such a request is
/// drained, then refused ([`drain_body`], [`too_large`]). HTTP/1.1 is answered at once and its
/// connection lingers instead.
pub(crate) fn oversized_h2<B>(req: &hyper::Request<B>, max: usize) -> Option<u64> {
    if req.version() != hyper::Version::HTTP_2 {
        return None;
    }
    let len = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    (len > max as u64).then_some(len)
}

/// Reads a request's body to its end and throws it away, within `deadline`, [`LINGER_TIME`]
/// and [`LINGER_BYTES`]: a client that sends more, or slower, is answered before its end.
pub(crate) async fn drain_body<B>(mut body: B, deadline: Duration)
where
    B: hyper::body::Body + Unpin,
{
    let _ = tokio::time::timeout(deadline.min(LINGER_TIME), async {
        let mut read = 0usize;
        while read < LINGER_BYTES {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            match frame {
                Some(Ok(f)) => {
                    read += f.data_ref().map_or(0, hyper::body::Buf::remaining);
                }
                _ => break,
            }
        }
    })
    .await;
}

/// `413` for a body over `max_body_bytes`, in the shape of the router's refusals (one
/// `text/plain` line).
pub(crate) fn too_large(max: usize, declared: u64) -> axum::response::Response {
    let mut r = axum::response::Response::new(axum::body::Body::from(format!(
        "request body of {declared} bytes is over max_body_bytes ({max})\n"
    )));
    *r.status_mut() = hyper::StatusCode::PAYLOAD_TOO_LARGE;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
