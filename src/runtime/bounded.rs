//! Bounds on what a server a user names may make us read: a size limit on each answer and
//! on each line of a watch, a deadline on the whole of each answer and on each watch event.
//! A [`Bounded`] layer goes into the client of every workload cluster (whose API server is
//! whatever URL a `<cluster>-kubeconfig` Secret names).
//!
//! Expected flow: [`Bounded::layer`] wraps a kube client's HTTP service. A request that is not
//! a watch must have its whole answer (headers and body) within [`Limits::request`] and at most
//! [`Limits::body_bytes`] bytes. A watch (`watch=true`) may last as long as it asked the server
//! for (`timeoutSeconds`) and [`WATCH_GRACE`] more; each of its lines (one event) may be at
//! most [`Limits::line_bytes`] long and, once begun, must end within [`Limits::event`].
//!
//! Guarantees:
//! - No answer costs more than its limit in memory: the body fails the moment it goes over,
//!   before the client buffers more (kube's client reads a whole answer, and a watch line,
//!   before decoding it).
//! - A server that drips bytes, or never ends an answer or an event, fails it at its
//!   deadline: the per-read timeout of the client alone would wait for ever.
//! - The error says which bound was crossed, in words, with no byte of the answer.
//!
//! Caveats: the limits are per answer; how many answers run at once is bounded by whoever
//! makes them (the passes' concurrency and one watch per cluster).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The boxed error of kube's HTTP stack.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How much longer than it asked for a watch may last before it is cut.
pub const WATCH_GRACE: Duration = Duration::from_secs(30);

/// How long a watch that names no `timeoutSeconds` may last.
const WATCH_DEFAULT: Duration = Duration::from_secs(330);

/// The bounds of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest answer that is not a watch.
    pub body_bytes: usize,
    /// The longest line (event) of a watch.
    pub line_bytes: usize,
    /// How long an answer that is not a watch may take, whole.
    pub request: Duration,
    /// How long a watch event may take from its first byte to its end.
    pub event: Duration,
}

/// A bound crossed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Crossed {
    /// An answer larger than the limit.
    #[error("the server's answer is larger than {limit} bytes: cut")]
    Body {
        /// The limit.
        limit: usize,
    },
    /// A watch line longer than the limit.
    #[error("a watch event from the server is longer than {limit} bytes: cut")]
    Line {
        /// The limit.
        limit: usize,
    },
    /// An answer, or a watch, not whole by its deadline.
    #[error("the server's answer was not whole within {}: cut", crate::duration::spoken(*.0))]
    Answer(Duration),
    /// A watch event begun and not ended by its deadline.
    #[error("a watch event from the server was not whole within {}: cut", crate::duration::spoken(*.0))]
    Event(Duration),
}

/// The layer: see the module's flow.
#[derive(Debug, Clone, Copy)]
pub struct Bounded {
    limits: Limits,
}

impl Bounded {
    /// A layer that holds every answer to `limits`.
    pub fn layer(limits: Limits) -> Self {
        Bounded { limits }
    }
}

impl<S> tower::Layer<S> for Bounded {
    type Service = BoundedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BoundedService {
            inner,
            limits: self.limits,
        }
    }
}

/// The service the layer makes.
#[derive(Debug, Clone)]
pub struct BoundedService<S> {
    inner: S,
    limits: Limits,
}

/// What a request is, for its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One answer.
    Single,
    /// A stream of lines.
    Watch,
}

/// Whether `uri` asks for a watch, and for how long it may run. Pure.
fn kind_of(uri: &Uri, limits: &Limits) -> (Kind, Duration) {
    let mut watch = false;
    let mut asked = None;
    for pair in uri.query().unwrap_or_default().split('&') {
        match pair.split_once('=') {
            Some(("watch", value)) => watch = matches!(value, "true" | "1"),
            Some(("timeoutSeconds", value)) => asked = value.parse::<u64>().ok(),
            _ => {}
        }
    }
    if watch {
        let asked = asked.map_or(WATCH_DEFAULT, Duration::from_secs);
        (Kind::Watch, asked.min(WATCH_DEFAULT) + WATCH_GRACE)
    } else {
        (Kind::Single, limits.request)
    }
}

impl<S, ReqBody, B> tower::Service<Request<ReqBody>> for BoundedService<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<BoundedBody<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let limits = self.limits;
        let (kind, allowed) = kind_of(request.uri(), &limits);
        let deadline = Instant::now() + allowed;
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = tokio::time::timeout_at(deadline, answer)
                .await
                .map_err(|_| Box::new(Crossed::Answer(allowed)) as BoxError)?
                .map_err(Into::into)?;
            Ok(response.map(|body| BoundedBody::new(body, kind, limits, deadline, allowed)))
        })
    }
}

/// A body held to its bounds.
pub struct BoundedBody<B> {
    inner: B,
    kind: Kind,
    limits: Limits,
    /// The whole answer's deadline, and how long it allowed (for the error).
    deadline: Pin<Box<Sleep>>,
    allowed: Duration,
    /// Bytes of the answer so far (a single answer) or of the current line (a watch).
    counted: usize,
    /// The current watch event's deadline, once its first byte came.
    event: Option<Pin<Box<Sleep>>>,
    /// A bound was crossed: nothing more is read.
    failed: bool,
}

impl<B> BoundedBody<B> {
    fn new(inner: B, kind: Kind, limits: Limits, deadline: Instant, allowed: Duration) -> Self {
        BoundedBody {
            inner,
            kind,
            limits,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            allowed,
            counted: 0,
            event: None,
            failed: false,
        }
    }

    /// Counts `data`, or says which bound it crosses.
    fn count(&mut self, data: &[u8]) -> Result<(), Crossed> {
        match self.kind {
            Kind::Single => {
                self.counted = self.counted.saturating_add(data.len());
                if self.counted > self.limits.body_bytes {
                    return Err(Crossed::Body {
                        limit: self.limits.body_bytes,
                    });
                }
            }
            Kind::Watch => {
                let (tail, ended) = match data.iter().rposition(|b| *b == b'\n') {
                    Some(last) => (data.len() - last - 1, true),
                    None => (data.len(), false),
                };
                // Every line but the last of this chunk ended within it; the first of them
                // continued the current line.
                let first = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
                let longest_done = if ended {
                    let inner = data[first + 1..data.len() - tail]
                        .split(|b| *b == b'\n')
                        .map(<[u8]>::len)
                        .max()
                        .unwrap_or(0);
                    (self.counted + first).max(inner)
                } else {
                    0
                };
                self.counted = if ended { tail } else { self.counted + tail };
                if longest_done.max(self.counted) > self.limits.line_bytes {
                    return Err(Crossed::Line {
                        limit: self.limits.line_bytes,
                    });
                }
                if ended || self.counted == 0 {
                    self.event = None;
                }
                if self.counted > 0 && self.event.is_none() {
                    self.event = Some(Box::pin(tokio::time::sleep(self.limits.event)));
                }
            }
        }
        Ok(())
    }

    fn fail(&mut self, crossed: Crossed) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.failed = true;
        Poll::Ready(Some(Err(Box::new(crossed))))
    }
}

impl<B> Body for BoundedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        // Polled first, so that a server that sends nothing wakes us at the deadline.
        if this.deadline.as_mut().poll(cx).is_ready() {
            return this.fail(Crossed::Answer(this.allowed));
        }
        if let Some(event) = &mut this.event
            && event.as_mut().poll(cx).is_ready()
        {
            return this.fail(Crossed::Event(this.limits.event));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(crossed) = this.count(data)
                {
                    return this.fail(crossed);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pub use baremend_core::text::{OUTSIDE_TEXT_CHARS, outside_text};

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    const LIMITS: Limits = Limits {
        body_bytes: 100,
        line_bytes: 10,
        request: Duration::from_secs(5),
        event: Duration::from_secs(2),
    };

    type Chunks = StreamBody<
        futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>>,
    >;

    fn body(chunks: &[&[u8]], kind: Kind) -> BoundedBody<Chunks> {
        let frames: Vec<_> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let inner = StreamBody::new(futures_util::stream::iter(frames));
        BoundedBody::new(
            inner,
            kind,
            LIMITS,
            Instant::now() + LIMITS.request,
            LIMITS.request,
        )
    }

    async fn read(mut body: BoundedBody<Chunks>) -> Result<usize, String> {
        let mut total = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            total += frame.data_ref().map_or(0, Bytes::len);
        }
        Ok(total)
    }

    #[test]
    fn outside_text_is_one_line_and_cut() {
        assert_eq!(outside_text("no such node"), "no such node");
        assert_eq!(outside_text("a\nb\x1b[31mc"), "a b [31mc");
        let long = "é".repeat(1000);
        let cut = outside_text(&long);
        assert_eq!(cut.chars().count(), OUTSIDE_TEXT_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn a_watch_and_its_time_are_read_from_the_query() {
        let uri = |q: &str| {
            format!("https://h/api/v1/nodes?{q}")
                .parse::<Uri>()
                .unwrap()
        };
        assert_eq!(
            kind_of(&uri("limit=500"), &LIMITS),
            (Kind::Single, LIMITS.request)
        );
        assert_eq!(
            kind_of(&uri("watch=true&timeoutSeconds=290"), &LIMITS),
            (Kind::Watch, Duration::from_secs(320))
        );
        assert_eq!(
            kind_of(&uri("watch=1&timeoutSeconds=999999"), &LIMITS),
            (Kind::Watch, WATCH_DEFAULT + WATCH_GRACE)
        );
        assert_eq!(
            kind_of(&uri("watch=false"), &LIMITS),
            (Kind::Single, LIMITS.request)
        );
    }

    #[tokio::test]
    async fn an_answer_at_its_limit_is_read_and_one_byte_more_is_cut() {
        let at = [b'x'; 100];
        assert_eq!(
            read(body(&[&at[..60], &at[60..]], Kind::Single)).await,
            Ok(100)
        );
        let over = read(body(&[&at[..60], &at[..41]], Kind::Single)).await;
        assert!(over.unwrap_err().contains("larger than 100 bytes"));
    }

    #[tokio::test]
    async fn watch_lines_are_bounded_one_by_one_across_chunks() {
        // Many short lines add up past the body limit: a watch is not held to it.
        let many = b"0123456789\n".repeat(20);
        assert_eq!(read(body(&[&many], Kind::Watch)).await, Ok(220));
        // A line split over chunks counts whole.
        let split = read(body(&[b"0123456", b"789\n01"], Kind::Watch)).await;
        assert_eq!(split, Ok(13));
        let long = read(body(&[b"0123456", b"78901\n"], Kind::Watch)).await;
        assert!(long.unwrap_err().contains("longer than 10 bytes"));
        // A long line in the middle of a chunk is found too.
        let middle = read(body(&[b"ab\n0123456789012\ncd\n"], Kind::Watch)).await;
        assert!(middle.unwrap_err().contains("longer than 10 bytes"));
        // A line with no end, however it comes.
        let endless = read(body(&[b"012345", b"678901"], Kind::Watch)).await;
        assert!(endless.is_err());
    }

    #[tokio::test]
    async fn a_dripping_event_is_cut_at_its_deadline_and_a_quiet_watch_is_not() {
        use tokio::sync::mpsc;
        let limits = Limits {
            event: Duration::from_millis(300),
            ..LIMITS
        };
        let (send, receive) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let inner = StreamBody::new(tokio_stream_of(receive));
        let far = Duration::from_secs(600);
        let mut watch = BoundedBody::new(inner, Kind::Watch, limits, Instant::now() + far, far);
        // Quiet for longer than an event may take, then a whole event: fine.
        let reader = tokio::spawn(async move {
            let first = watch.frame().await.unwrap().map(|_| ());
            let second = watch.frame().await.unwrap().map(|_| ());
            let began = Instant::now();
            let third = watch.frame().await.unwrap().map(|_| ());
            (first.is_ok(), second.is_ok(), third, began.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        send.send(Ok(Frame::data(Bytes::from_static(b"{}\n"))))
            .await
            .unwrap();
        // An event begun and not ended (the server keeps the stream open): cut at its deadline.
        send.send(Ok(Frame::data(Bytes::from_static(b"{\"a\""))))
            .await
            .unwrap();
        let (first, second, third, waited) = reader.await.unwrap();
        assert!(first && second);
        let cut = third.unwrap_err().to_string();
        assert!(
            cut.contains("a watch event") && cut.contains("not whole"),
            "{cut}"
        );
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        drop(send);
    }

    /// A stream of what `receive` gets.
    fn tokio_stream_of<T: Send + 'static>(
        receive: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_util::Stream<Item = T> + Unpin {
        Box::pin(futures_util::stream::unfold(receive, |mut r| async move {
            r.recv().await.map(|item| (item, r))
        }))
    }
}
