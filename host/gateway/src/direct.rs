//! The session `tools/call` answered in place: a POST that is nothing but a tools/call
//! in a live session is run and answered as one JSON body by the HTTP handler, without
//! rmcp's session worker, its per-request task and channels, its event stream and its
//! resumption cache. Everything else goes to rmcp untouched.
//!
//! Why: at one client, rmcp's session machinery cost more than the sandboxed, audited
//! call itself (`benches/results/gateway.md`, runs 3 and 4).
//!
//! # Guarantees
//! - Taken only when every check rmcp would make on the same request is known to pass
//!   and would route it to the session's `tools/call`: `Host` (and `Origin`, if sent)
//!   exactly one of the server's own names; `Accept` naming both JSON and the event
//!   stream, `Content-Type` JSON; a body within the cap that is one JSON-RPC request
//!   for `tools/call` with no per-request protocol version; an `MCP-Protocol-Version`
//!   header absent or naming a revision before 2026-07-28 (which has no sessions and
//!   no standard headers to check); a session id rmcp holds. Anything short of that
//!   (a request in another shape, a stateless request, a name or header this module
//!   does not recognise) is handed to rmcp, which answers as it always does.
//! - The call itself is [`GatewayServer::call`], the same as rmcp's dispatch reaches:
//!   the same stations, record, capacity and refusals. The answer is the JSON-RPC
//!   response rmcp would put in its event stream, as an `application/json` body,
//!   which Streamable HTTP lets a server choose for any request.
//! - `notifications/cancelled` naming a call taken here, and the session's end
//!   (a `DELETE` rmcp accepted, or closing it for idleness), cancel that call, as rmcp
//!   does for its own. The notification still goes on to rmcp. A notification from
//!   another session cancels nothing here.
//! - A `tools/call` reusing the id of a call still running in its session is refused
//!   with a JSON-RPC error (its cancellation would be ambiguous); it is not a call, so
//!   nothing is recorded for it.
//! - A session stays open while it is used, whichever path its requests take: rmcp's
//!   own idle timer cannot see calls taken here, so it is off and this module closes a
//!   session after [`HttpOptions::session_idle`](crate::http::HttpOptions) with no
//!   request and no call running.
//!
//! # Non-guarantees
//! - A client that disconnects mid-call does not cancel it: the call runs to its end
//!   and its outcome is recorded (as on rmcp's path).

use crate::server::{CANCELLED, GatewayServer};
use aegis_runtime::CancelToken;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorData, GetMeta as _,
    JsonRpcVersion2_0, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Protocol revisions whose requests rmcp routes to a session with no header checks
/// beyond the version's own: the ones before 2026-07-28.
const SESSION_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// What this module keeps per session.
#[derive(Default)]
struct SessionUse {
    /// The last request naming the session, or the last call here ending.
    last: Option<Instant>,
    /// Calls taken here and running, by their JSON-RPC id (as JSON text).
    running: HashMap<String, CancelToken>,
}

/// The state behind the middleware [`route`].
pub(crate) struct Direct {
    server: GatewayServer,
    sessions: Arc<LocalSessionManager>,
    /// `Host` values taken here, lower case.
    hosts: Vec<String>,
    /// `Origin` values taken here, lower case.
    origins: Vec<String>,
    max_body: usize,
    idle: Duration,
    uses: Mutex<HashMap<Arc<str>, SessionUse>>,
}

impl Direct {
    pub(crate) fn new(
        server: GatewayServer,
        sessions: Arc<LocalSessionManager>,
        hosts: &[String],
        origins: &[String],
        max_body: usize,
        idle: Duration,
    ) -> Direct {
        Direct {
            server,
            sessions,
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            origins: origins.iter().map(|o| o.to_ascii_lowercase()).collect(),
            max_body,
            idle,
            uses: Mutex::new(HashMap::new()),
        }
    }

    fn uses(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, SessionUse>> {
        self.uses.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a request naming `session`. Only sessions already known here are noted
    /// (the idle sweep and this module's calls add them, both for sessions rmcp holds),
    /// so requests naming made-up ids add nothing to keep.
    fn touch(&self, session: &str) {
        if let Some(u) = self.uses().get_mut(session) {
            u.last = Some(Instant::now());
        }
    }

    /// Cancels every call taken here for `session`.
    fn end_session(&self, session: &str) {
        if let Some(u) = self.uses().remove(session) {
            for token in u.running.values() {
                token.cancel(CANCELLED);
            }
        }
    }

    fn cancel_call(&self, session: &str, id: &RequestId) {
        let key = id_key(id);
        if let Some(token) = self.uses().get(session).and_then(|u| u.running.get(&key)) {
            token.cancel(CANCELLED);
        }
    }

    /// Closes the sessions nobody used for `idle`, until `stop`. rmcp's own idle timer
    /// is off (see the module's guarantees); this is its replacement.
    pub(crate) async fn close_idle_sessions(self: Arc<Self>, stop: CancellationToken) {
        let period = (self.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            let open: Vec<Arc<str>> = self
                .sessions
                .sessions
                .read()
                .await
                .keys()
                .cloned()
                .collect();
            let now = Instant::now();
            let mut idle = Vec::new();
            {
                let mut uses = self.uses();
                uses.retain(|id, u| !u.running.is_empty() || open.contains(id));
                for id in open {
                    let u = uses.entry(id.clone()).or_default();
                    let last = *u.last.get_or_insert(now);
                    if u.running.is_empty() && now.duration_since(last) >= self.idle {
                        idle.push(id);
                    }
                }
            }
            for id in idle {
                self.end_session(&id);
                // A session already gone is what was wanted.
                let _ = self.sessions.close_session(&id).await;
            }
        }
    }

    /// The session id of a request this module may take, if its headers allow that.
    fn session_of_takeable(&self, headers: &HeaderMap) -> Option<String> {
        let one = |name: header::HeaderName| -> Option<Option<&str>> {
            let mut values = headers.get_all(name).iter();
            let first = values.next();
            if values.next().is_some() {
                return None;
            }
            match first {
                None => Some(None),
                Some(v) => v.to_str().ok().map(Some),
            }
        };
        let host = one(header::HOST)??.to_ascii_lowercase();
        if !self.hosts.contains(&host) {
            return None;
        }
        if let Some(origin) = one(header::ORIGIN)?
            && !self.origins.contains(&origin.to_ascii_lowercase())
        {
            return None;
        }
        if !one(header::CONTENT_TYPE)?.is_some_and(is_json) {
            return None;
        }
        if !accepts_json_and_stream(headers) {
            return None;
        }
        if let Some(version) = one(header::HeaderName::from_static("mcp-protocol-version"))?
            && !SESSION_REVISIONS.contains(&version)
        {
            return None;
        }
        one(header::HeaderName::from_static("mcp-session-id"))?.map(str::to_owned)
    }
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// `Accept` lists `application/json` and `text/event-stream`, each plainly (an entry
/// with parameters is not counted: a `q=0` would mean the opposite).
fn accepts_json_and_stream(headers: &HeaderMap) -> bool {
    let (mut json, mut stream) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',').map(str::trim) {
            json |= entry.eq_ignore_ascii_case("application/json");
            stream |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && stream
}

/// A request id as a map key: its JSON text, so `1` and `"1"` stay apart.
fn id_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// A `tools/call` in its plainest form: these members and no others (no `_meta`, so
/// no per-request protocol version), each once. Parsed before rmcp's own message type,
/// which costs several times as much; whatever this does not parse is parsed that way.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionCall {
    #[expect(dead_code, reason = "checked by parsing: only \"2.0\" parses")]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    method: String,
    params: PlainParams,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainParams {
    name: String,
    #[serde(default)]
    arguments: Option<rmcp::model::JsonObject>,
}

/// Runs a call taken here and answers it; its id must not name a call still running
/// in the session.
async fn take_call(
    direct: &Direct,
    session: &str,
    id: RequestId,
    params: CallToolRequestParams,
) -> Response {
    let key = id_key(&id);
    let token = CancelToken::new();
    {
        let mut uses = direct.uses();
        let running = &mut uses.entry(Arc::from(session)).or_default().running;
        if running.contains_key(&key) {
            // Its cancellation would be ambiguous; JSON-RPC ids name one request.
            let refused = ErrorData::invalid_request(
                format!("request id {key} is already in use by a call running in this session"),
                None,
            );
            return json_response(&ServerJsonRpcMessage::error(refused, Some(id)));
        }
        running.insert(key.clone(), token.clone());
    }
    let running = Running {
        direct,
        session,
        key,
    };
    let answer = match run_call(&direct.server, params, &token).await {
        Ok(result) => ServerJsonRpcMessage::response(ServerResult::CallToolResult(result), id),
        Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
    };
    drop(running);
    json_response(&answer)
}

/// Runs a call on the blocking pool. (Running it on this worker under
/// `block_in_place` was measured slower, at one client and at 16:
/// `benches/results/gateway.md`, run 4.)
async fn run_call(
    server: &GatewayServer,
    params: CallToolRequestParams,
    token: &CancelToken,
) -> Result<CallToolResult, ErrorData> {
    let server = server.clone();
    let token = token.clone();
    tokio::task::spawn_blocking(move || server.call_here(params, &token))
        .await
        .map_err(|e| ErrorData::internal_error(format!("the gateway failed: {e}"), None))?
}

/// Removes a call's entry when its handler ends, however it ends.
struct Running<'a> {
    direct: &'a Direct,
    session: &'a str,
    key: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut uses = self.direct.uses();
        if let Some(u) = uses.get_mut(self.session) {
            u.running.remove(&self.key);
            u.last = Some(Instant::now());
        }
    }
}

fn json_response(message: &ServerJsonRpcMessage) -> Response {
    match serde_json::to_vec(message) {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        // Serializing rmcp's own message type does not fail; if it did, say so.
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("aegis gateway: the answer could not be serialized: {e}\n"),
        )
            .into_response(),
    }
}

/// The middleware in front of rmcp's service: takes the requests the module's
/// guarantees describe, passes on the rest (with the body it had to read).
pub(crate) async fn route(
    State(direct): State<Arc<Direct>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() != crate::http::ENDPOINT {
        return next.run(request).await;
    }
    let session = request
        .headers()
        .get(HEADER_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(s) = &session {
        direct.touch(s);
    }
    if request.method() == Method::DELETE {
        // Only a deletion rmcp accepted (token, Host, Origin, a session it holds) ends
        // the calls taken here: a refused request changes nothing.
        let response = next.run(request).await;
        if let Some(s) = &session
            && response.status().is_success()
        {
            direct.end_session(s);
        }
        return response;
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let Some(session) = direct.session_of_takeable(request.headers()) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, direct.max_body).await {
        Ok(b) => b,
        Err(_) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "aegis gateway: the request body is over {} bytes, or could not be read\n",
                    direct.max_body
                ),
            )
                .into_response();
        }
    };
    let pass = |bytes: Bytes, next: Next| {
        let request = Request::from_parts(parts, Body::from(bytes));
        next.run(request)
    };
    let known = direct
        .sessions
        .sessions
        .read()
        .await
        .contains_key(session.as_str());
    if !known {
        return pass(bytes, next).await;
    }
    if let Ok(call) = serde_json::from_slice::<SessionCall>(&bytes)
        && call.method == "tools/call"
    {
        let mut params = CallToolRequestParams::new(call.params.name);
        params.arguments = call.params.arguments;
        return take_call(&direct, &session, call.id, params).await;
    }
    let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) else {
        return pass(bytes, next).await;
    };
    match message {
        ClientJsonRpcMessage::Request(request)
            if request.request.get_meta().protocol_version().is_none() =>
        {
            let ClientRequest::CallToolRequest(call) = request.request else {
                return pass(bytes, next).await;
            };
            take_call(&direct, &session, request.id, call.params).await
        }
        ClientJsonRpcMessage::Notification(n) => {
            if let ClientNotification::CancelledNotification(c) = &n.notification
                && let Some(id) = &c.params.request_id
            {
                direct.cancel_call(&session, id);
            }
            pass(bytes, next).await
        }
        _ => pass(bytes, next).await,
    }
}
