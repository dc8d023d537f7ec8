//! The MCP server the demo puts behind `aegis wrap`: a notes server with two tools, run
//! as this binary with [`SERVER_ARG`] so the demo needs nothing installed.
//!
//! `read_file` reads a file, any file, as a careless real server would: holding the
//! path to the notes is the policy's job. `http_post` would send a body to a URL; this
//! one never touches the network, and says what it would have sent, so a call that got
//! through shows in the demo as a leak.

use serde_json::{Value, json};
use std::io::{BufRead as _, Read as _, Write as _};
use std::path::Path;

/// The first argument that starts this binary as the demo's server.
pub const SERVER_ARG: &str = "__aegis-demo-mcp-server";

/// The most of a file `read_file` reads.
const MAX_READ: aegis_files::Cap = aegis_files::Cap::new(64 << 10, "a file the demo server reads");

/// The longest request line read; a longer one ends the server.
const MAX_LINE: u64 = 1 << 20;

/// Runs the server when this process was started as it: `Some(exit code)`.
pub fn main_if_asked() -> Option<u8> {
    if std::env::args_os().nth(1).as_deref() != Some(std::ffi::OsStr::new(SERVER_ARG)) {
        return None;
    }
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut lines = stdin.take(0);
    loop {
        let mut line = Vec::new();
        lines.set_limit(MAX_LINE + 1);
        match lines.read_until(b'\n', &mut line) {
            Ok(0) => return Some(0),
            Ok(_) if line.last() != Some(&b'\n') && line.len() as u64 > MAX_LINE => {
                return Some(1);
            }
            Ok(_) => {}
            Err(_) => return Some(1),
        }
        let Ok(request) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let Some(answer) = answer(&request) else {
            continue; // a notification
        };
        let mut text = answer.to_string();
        text.push('\n');
        if stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return Some(0);
        }
    }
}

/// The answer to one request, `None` for a notification.
fn answer(request: &Value) -> Option<Value> {
    let id = request.get("id")?.clone();
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    let result = match request.get("method").and_then(Value::as_str) {
        Some("initialize") => json!({
            "protocolVersion": params.get("protocolVersion").cloned()
                .unwrap_or_else(|| json!("2025-06-18")),
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "aegis-demo-notes", "version": "1" },
        }),
        Some("tools/list") => json!({ "tools": tools() }),
        Some("tools/call") => call(&params),
        Some("ping") => json!({}),
        _ => {
            return Some(json!({
                "jsonrpc": "2.0", "id": id,
                "error": { "code": -32601, "message": "method not found" },
            }));
        }
    };
    Some(json!({ "jsonrpc": "2.0", "id": id, "result": result }))
}

fn tools() -> Value {
    json!([
        {
            "name": "read_file",
            "description": "Reads a text file.",
            "inputSchema": {
                "type": "object",
                "properties": { "path": { "type": "string" } },
                "required": ["path"],
            },
        },
        {
            "name": "http_post",
            "description": "Sends a body to a URL.",
            "inputSchema": {
                "type": "object",
                "properties": { "url": { "type": "string" }, "body": { "type": "string" } },
                "required": ["url", "body"],
            },
        },
    ])
}

fn call(params: &Value) -> Value {
    let arg = |name: &str| {
        params
            .pointer(&format!("/arguments/{name}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (text, is_error) = match params.get("name").and_then(Value::as_str) {
        // Any path the call names (holding it to the notes is the policy's job), but as
        // a file of its own: never a FIFO to wait on, never past MAX_READ.
        Some("read_file") => match aegis_files::read_to_string(Path::new(&arg("path")), MAX_READ) {
            Ok(text) => (text, false),
            Err(e) => (e.to_string(), true),
        },
        Some("http_post") => (
            format!(
                "would have sent {} bytes to {} (this demo server has no network)",
                arg("body").len(),
                arg("url")
            ),
            false,
        ),
        _ => ("no such tool".to_owned(), true),
    };
    json!({ "content": [{ "type": "text", "text": text }], "isError": is_error })
}
