//! Watch streams: newline-delimited `{"type","object"}` events from a resourceVersion, with
//! selectors (an object that starts or stops matching is ADDED or DELETED), bookmarks, a
//! timeout, 410 for compacted versions, and a closed stream for a watcher that falls behind.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::errors::ApiResult;
use super::kinds::ResourceType;
use super::negotiate::{Rendering, partial_metadata};
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{EventType, Store, WatchEvent, storage_group};

/// What a watch asks for.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// The type watched and the version served.
    pub ty: Arc<ResourceType>,
    /// The API version.
    pub version: String,
    /// Namespace, or all.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Start after this revision; None or 0 starts with the current objects as ADDED.
    pub resource_version: Option<u64>,
    /// Send BOOKMARK events.
    pub bookmarks: bool,
    /// End the stream after this long.
    pub timeout: Duration,
    /// How often bookmarks go out.
    pub bookmark_interval: Duration,
    /// Objects as they are, as Table rows (kubectl `get -w`) or as their metadata alone.
    pub rendering: Rendering,
    /// Send the initial-events-end bookmark (sendInitialEvents=true).
    pub initial_events_end: bool,
}

fn line(kind: &str, object: &Value) -> Bytes {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        object: &'a Value,
    }
    let mut bytes = serde_json::to_vec(&Line { kind, object }).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// Starts a watch. A compacted resourceVersion gets what the real API server sends: a
/// successful response whose only event is an ERROR carrying the 410 Status (clients such as
/// kube-rs relist on that event, while an HTTP 410 would make them retry the same watch).
pub fn start(
    store: Arc<Store>,
    request: WatchRequest,
    stop: broadcast::Receiver<()>,
    wall: impl Fn() -> Duration + Send + 'static,
) -> ApiResult<Response> {
    // The resource's own changes only, as the real server's per-resource cache serves them.
    let mut live = store.subscribe_resource(storage_group(&request.ty), &request.ty.plural);
    let (backlog, revision) = match request.resource_version.filter(|rv| *rv > 0) {
        Some(rv) => match store.events_since(rv) {
            Ok(found) => found,
            Err(error) if error.code == 410 => {
                let bytes = line("ERROR", &error.status());
                let once =
                    futures_util::stream::once(async move { Ok::<Bytes, Infallible>(bytes) });
                let mut response = Response::new(Body::from_stream(once));
                stream_headers(&mut response, request.rendering);
                return Ok(response);
            }
            Err(error) => return Err(error),
        },
        None => {
            let list = store.list(
                &request.ty,
                &request.version,
                request.namespace.as_deref(),
                &request.labels,
                &request.fields,
                None,
                None,
            )?;
            let revision: u64 = list["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            let adds = list["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|object| {
                    Arc::new(WatchEvent {
                        revision,
                        key: super::store::ObjectKey {
                            group: storage_group(&request.ty).to_owned(),
                            plural: request.ty.plural.clone(),
                            namespace: String::new(),
                            name: String::new(),
                        },
                        kind: EventType::Added,
                        object: Arc::new(object),
                        previous: None,
                    })
                })
                .collect();
            (adds, revision)
        }
    };
    let (sender, receiver) = mpsc::channel::<Bytes>(256);
    let rendering = request.rendering;
    tokio::spawn(async move {
        let mut stop = stop;
        let mut last = revision;
        let synthetic = request.resource_version.filter(|rv| *rv > 0).is_none();
        for event in backlog {
            let Some(out) = render(&request, &event, synthetic, &wall) else {
                continue;
            };
            last = last.max(event.revision);
            if sender.send(out).await.is_err() {
                return;
            }
        }
        if request.initial_events_end && request.bookmarks {
            let bookmark = json!({"kind": request.ty.kind, "apiVersion": request.ty.api_version(&request.version), "metadata": {"resourceVersion": last.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
            if sender
                .send(line(
                    "BOOKMARK",
                    &bookmark_or_object(request.rendering, bookmark),
                ))
                .await
                .is_err()
            {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + request.timeout;
        let mut bookmarks = tokio::time::interval(request.bookmark_interval);
        bookmarks.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = stop.recv() => return,
                _ = bookmarks.tick(), if request.bookmarks => {
                    let current = store.revision().max(last);
                    let bookmark = json!({"kind": request.ty.kind, "apiVersion": request.ty.api_version(&request.version), "metadata": {"resourceVersion": current.to_string()}});
                    if sender.send(line("BOOKMARK", &bookmark_or_object(request.rendering, bookmark))).await.is_err() {
                        return;
                    }
                }
                received = live.recv() => match received {
                    Ok(event) => {
                        if event.revision <= last {
                            continue;
                        }
                        last = event.revision;
                        if let Some(out) = render(&request, &event, false, &wall)
                            && sender.send(out).await.is_err()
                        {
                            return;
                        }
                    }
                    // The real server closes the stream of a watcher that cannot keep up
                    // (the cacher "forgets" it, after draining what it had queued; no ERROR
                    // event). The client re-watches from the last version it saw, which the
                    // event log still serves, or gets 410 there and re-lists.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|bytes| (Ok::<Bytes, Infallible>(bytes), receiver))
    });
    let mut response = Response::new(Body::from_stream(stream));
    stream_headers(&mut response, rendering);
    Ok(response)
}

fn stream_headers(response: &mut Response, rendering: Rendering) {
    let content_type = if rendering == Rendering::Table {
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    } else {
        "application/json"
    };
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
}

/// An event's object (or a bookmark's) as the watch renders objects: whole, or its metadata
/// alone under the meta.k8s.io kind, as the real server converts bookmarks too.
fn bookmark_or_object(rendering: Rendering, object: Value) -> Value {
    match rendering {
        Rendering::Metadata(version) => partial_metadata(version, &object),
        _ => object,
    }
}

/// An object as the watch reads it. Each watcher of a kind renders each of its events: a
/// built-in kind's is written as stored, without a copy.
fn presented<'a>(request: &WatchRequest, object: &'a Value) -> Cow<'a, Value> {
    let api_version = request.ty.api_version(&request.version);
    if Store::read_as_stored(&request.ty, &api_version, object) {
        Cow::Borrowed(object)
    } else {
        Cow::Owned(Store::present(&request.ty, &request.version, object))
    }
}

/// The line for one event, or None when the watch does not see it.
fn render(
    request: &WatchRequest,
    event: &WatchEvent,
    synthetic: bool,
    wall: &impl Fn() -> Duration,
) -> Option<Bytes> {
    if !synthetic {
        if event.key.group != storage_group(&request.ty) || event.key.plural != request.ty.plural {
            return None;
        }
        if let Some(namespace) = &request.namespace
            && &event.key.namespace != namespace
        {
            return None;
        }
    }
    let present = |object| presented(request, object);
    let now = present(&event.object);
    let matches = |object: &Value| request.labels.matches(object) && request.fields.matches(object);
    let kind = if synthetic {
        EventType::Added
    } else {
        let was = event
            .previous
            .as_ref()
            .is_some_and(|p| matches(&present(p)));
        let is = matches(&now);
        match (event.kind, was, is) {
            (EventType::Deleted, true, _) => EventType::Deleted,
            (EventType::Deleted, false, _) => return None,
            (_, false, true) => EventType::Added,
            (_, true, true) => EventType::Modified,
            (_, true, false) => EventType::Deleted,
            (_, false, false) => return None,
        }
    };
    let object = match request.rendering {
        Rendering::Table => {
            let rv = now
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            super::table::table(&request.ty, &[now.into_owned()], &rv, None, wall(), false)
        }
        Rendering::Metadata(version) => partial_metadata(version, &now),
        _ => return Some(line(kind.as_str(), &now)),
    };
    Some(line(kind.as_str(), &object))
}
