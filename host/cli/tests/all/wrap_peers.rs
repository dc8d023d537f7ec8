//! `aegis wrap` between real peers: the official MCP Python SDK (`mcp==2.3.0`) as the
//! client and the reference servers `@modelcontextprotocol/server-everything` and
//! `server-filesystem` (both `2026.8.31`) from npm.
//!
//! The peers are installed once per machine by tests/mcp-peers/install.sh into
//! `<target dir>/mcp-peers`; a failed install fails every test here, naming the peer.
//! Each session runs tests/mcp-peers/client.py, whose server command is
//! `aegis wrap ... -- tee.py -- node SERVER`: tee.py taps both sides of the relay, so
//! the test compares the bytes the server wrote with the bytes the client received.

use crate::common;
use crate::common::peers;

use aegis_record::json::{Object, Value};
use common::{at, field, object, text};
use peers::{peers_dir, repo};
use std::path::{Path, PathBuf};
use std::process::Command;

fn server_js(package: &str) -> PathBuf {
    peers_dir().join(format!(
        "npm/node_modules/@modelcontextprotocol/{package}/dist/index.js"
    ))
}

/// Whether to put `aegis wrap` between the client and the server.
enum Via<'a> {
    Bare,
    Wrap {
        policy: &'a str,
    },
    /// `aegis --profile linux-confined wrap --allow-read R… --allow-exec E…
    /// --allow-write W… -- PROGRAM SERVER…` run from `cwd` (else the test's); the
    /// server's tee is left out (confined, it could not write its copy).
    Confined {
        policy: &'a str,
        read: &'a [&'a Path],
        exec: &'a [&'a Path],
        write: &'a [&'a Path],
        program: &'a str,
        cwd: Option<&'a Path>,
    },
    /// `aegis --profile PROFILE wrap`: a profile naming the Cedar station's cdylib by
    /// path (the SDK's client gives the server a clean environment, so no plugin path
    /// variable reaches `aegis`).
    Cedar {
        profile: &'a Path,
    },
}

/// One finished client session and its files.
struct Session {
    dir: tempfile::TempDir,
    /// client.py's report.
    got: Object,
}

impl Session {
    /// Runs client.py in `mode` with `plan` against `server` (node + args), with
    /// `env` handed to the server.
    fn run(mode: &str, via: Via, plan: &str, env: &[&str], server: &[&Path]) -> Session {
        Session::run_with("node", mode, via, plan, env, server)
    }

    /// [`Session::run`] with the server started by `program` instead of node (a
    /// confined run names its own).
    fn run_with(
        program: &str,
        mode: &str,
        via: Via,
        plan: &str,
        env: &[&str],
        server: &[&Path],
    ) -> Session {
        let dir = tempfile::tempdir().unwrap();
        let peers = peers_dir();
        let tee = repo().join("tests/mcp-peers/tee.py");
        let mut cmd = Command::new("python3");
        cmd.env("PYTHONPATH", peers.join("py"))
            .arg(repo().join("tests/mcp-peers/client.py"))
            .arg(mode)
            .arg(dir.path().join("got.json"))
            .arg(plan)
            .args(env)
            .arg("--");
        let mut program = program;
        let (policy, confined) = match via {
            Via::Bare => (None, None),
            Via::Wrap { policy } => (Some(policy), None),
            Via::Confined {
                policy,
                read,
                exec,
                write,
                program: confined_program,
                cwd,
            } => {
                program = confined_program;
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                (Some(policy), Some((read, exec, write)))
            }
            // The profile names the policy; the file written below is not used.
            Via::Cedar { .. } => (Some(""), None),
        };
        let cedar = matches!(via, Via::Cedar { .. });
        if let Some(policy) = policy {
            let key = dir.path().join("k");
            let out = Command::new(env!("CARGO_BIN_EXE_aegis"))
                .args(["keygen", "--out"])
                .arg(&key)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            std::fs::write(dir.path().join("policy.yaml"), policy).unwrap();
            cmd.arg("python3")
                .arg(&tee)
                .arg(dir.path().join("client"))
                .arg("--")
                .arg(env!("CARGO_BIN_EXE_aegis"));
            if let Some((read, exec, write)) = confined {
                cmd.args(["--profile", "linux-confined"]);
                cmd.arg("wrap");
                for r in read {
                    cmd.arg("--allow-read").arg(r);
                }
                for e in exec {
                    cmd.arg("--allow-exec").arg(e);
                }
                for w in write {
                    cmd.arg("--allow-write").arg(w);
                }
            } else if let Via::Cedar { profile } = via {
                cmd.arg("--profile").arg(profile).arg("wrap");
            } else {
                cmd.arg("wrap");
            }
            if !cedar {
                cmd.arg("--policy").arg(dir.path().join("policy.yaml"));
            }
            cmd.arg("--audit")
                .arg(dir.path().join("record.jsonl"))
                .arg("--signing-key")
                .arg(&key)
                .arg("--");
        }
        if confined.is_none() {
            cmd.arg("python3")
                .arg(&tee)
                .arg(dir.path().join("server"))
                .arg("--");
        }
        cmd.arg(program).args(server);
        let stderr = dir.path().join("stderr");
        cmd.stderr(std::fs::File::create(&stderr).unwrap());
        let mut child = cmd.spawn().unwrap();
        // Waits for the session to end; no time limit is asserted (a hung session shows
        // as a test that does not end).
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "client.py failed: {}",
            text(&std::fs::read(&stderr).unwrap_or_default())
        );
        let got = object(&std::fs::read(dir.path().join("got.json")).unwrap());
        Session { dir, got }
    }

    fn file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(name)).unwrap_or_default()
    }

    /// A traffic file without the relay's own tools/list (it lists the server's tools
    /// itself after initialized, to pin them) and the server's answers to it.
    fn peers_only(&self, name: &str) -> String {
        text(&self.file(name))
            .split_inclusive('\n')
            .filter(|l| !l.contains(r#""aegis-relay/tools-list/"#))
            .collect()
    }

    fn tools(&self) -> Vec<String> {
        match self.got.get("tools") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            other => panic!("no tools: {other:?}"),
        }
    }

    fn calls(&self) -> Vec<Object> {
        match self.got.get("calls") {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_object).cloned().collect(),
            other => panic!("no calls: {other:?}"),
        }
    }

    /// Verifies the record and checks that every tools/call the client sent has one
    /// intent and one outcome; returns the outcomes.
    fn record(&self) -> Vec<Object> {
        let record = self.dir.path().join("record.jsonl");
        let out = Command::new(env!("CARGO_BIN_EXE_aegis"))
            .arg("verify")
            .arg(&record)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(text(&out.stdout).starts_with("Verified"));
        let sent = text(&self.file("client.in"))
            .lines()
            .filter(|l| l.contains(r#""method":"tools/call""#))
            .count();
        assert!(sent > 0);
        let lines: Vec<Object> = std::fs::read(&record)
            .unwrap()
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(object)
            .collect();
        let of_type = |t: &str| -> Vec<Object> {
            lines
                .iter()
                .filter(|l| field(l, "line_type") == t)
                .cloned()
                .collect()
        };
        let (intents, outcomes) = (of_type("intent"), of_type("outcome"));
        assert_eq!(intents.len(), sent, "one intent per tools/call");
        assert_eq!(outcomes.len(), sent, "one outcome per tools/call");
        for intent in &intents {
            let id = field(intent, "call_id");
            let matching = outcomes
                .iter()
                .filter(|o| field(o, "call_id") == id)
                .count();
            assert_eq!(matching, 1, "call {id} has one outcome");
        }
        assert_eq!(of_type("close").len(), 1, "the session was closed");
        outcomes
    }
}

fn is_error(call: &Object) -> bool {
    call.get("isError") == Some(&Value::Bool(true))
}

/// The refusal facts aegis put under the result's `_meta`.
fn refusal(call: &Object) -> Object {
    let result = object(field(call, "result").as_bytes());
    result
        .get("_meta")
        .and_then(Value::as_object)
        .and_then(|m| m.get("dev.aegis/refusal"))
        .and_then(Value::as_object)
        .cloned()
        .expect("refusal facts under _meta")
}

const MODES: [&str; 2] = ["legacy", "auto"];

const NO_ENV: &str = "version: 1
default: allow
rules:
  - id: no-env
    action: deny
    tool: get-env
    reason: environment variables stay private
";

const SECRET: &str = "AEGIS_PEER_SECRET=wrap-peers-3f9c1e";

/// MCP 2026-07-28 end to end (the SDK's client in `auto` mode and the SDK's own server,
/// tests/mcp-peers/server.py): a result of that revision must name its `resultType`,
/// so wrap's own refusal does, and the client reads it as a refused call (not as a
/// malformed answer); the allowed call is the server's, byte for byte.
#[test]
fn a_2026_07_28_client_reads_wraps_refusals() {
    const NO_ECHO_TWICE: &str = "version: 1
default: allow
rules:
  - id: one-echo
    action: deny
    tool: echo
    arguments:
      message: { equals: twice }
    reason: one echo is enough
";
    let pythonpath = format!("PYTHONPATH={}", peers_dir().join("py").display());
    let s = Session::run_with(
        "python3",
        "auto",
        Via::Wrap {
            policy: NO_ECHO_TWICE,
        },
        r#"[{"tool":"echo","arguments":{"message":"once"}},{"tool":"echo","arguments":{"message":"twice"}}]"#,
        &[&pythonpath],
        &[&repo().join("tests/mcp-peers/server.py")],
    );
    assert_eq!(field(&s.got, "protocol"), "2026-07-28");
    let calls = s.calls();
    assert!(!is_error(&calls[0]), "{calls:?}");
    assert_eq!(field(&calls[0], "text"), "Echo: once");
    assert!(is_error(&calls[1]), "{calls:?}");
    assert_eq!(field(&refusal(&calls[1]), "station"), "policy");
    assert!(
        text(&s.file("client.out")).contains(r#""resultType":"complete""#),
        "{}",
        text(&s.file("client.out"))
    );
    assert!(!text(&s.file("server.in")).contains("twice"));
}

#[test]
fn everything_server_echo_runs_and_a_denied_get_env_never_does() {
    let server = server_js("server-everything");
    for mode in MODES {
        let s = Session::run(
            mode,
            Via::Wrap { policy: NO_ENV },
            r#"[{"tool":"echo","arguments":{"message":"hi é"}},{"tool":"get-env"}]"#,
            &[SECRET],
            &[&server, Path::new("stdio")],
        );
        // The SDK's mode decides its first frame: initialize, or the discover probe.
        let first = if mode == "legacy" {
            "initialize"
        } else {
            "server/discover"
        };
        assert!(
            text(&s.file("server.in"))
                .starts_with(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{first}""#)),
            "{mode}: {}",
            text(&s.file("server.in"))
        );
        let tools = s.tools();
        assert!(tools.contains(&"echo".to_owned()) && tools.contains(&"get-env".to_owned()));
        let calls = s.calls();
        assert!(!is_error(&calls[0]), "{mode}: {calls:?}");
        assert_eq!(field(&calls[0], "text"), "Echo: hi é");
        let denied = &calls[1];
        assert!(is_error(denied), "{mode}");
        let facts = refusal(denied);
        assert_eq!(field(&facts, "station"), "policy");
        let call_id = field(&facts, "call_id");
        assert!(call_id.starts_with("call-"));
        let shown = field(denied, "text");
        assert!(
            shown.contains("policy") && shown.contains(&call_id),
            "{shown}"
        );
        // The server had the secret and never ran get-env, so the client never saw it.
        let secret = SECRET.split_once('=').unwrap().1;
        assert!(!text(&s.file("got.json")).contains(secret));
        assert!(!text(&s.file("client.out")).contains(secret));
        assert!(
            !text(&s.file("server.in")).contains("get-env\""),
            "{mode}: the denied call reached the server"
        );
        // Every frame but the refusal is the server's own, byte for byte.
        let client_out = text(&s.file("client.out"));
        let relayed: Vec<&str> = client_out
            .split_inclusive('\n')
            .filter(|l| !l.contains(&call_id))
            .collect();
        assert_eq!(relayed.concat(), s.peers_only("server.out"), "{mode}");
        assert_eq!(
            s.file("client.in").len(),
            s.peers_only("server.in").len() + {
                // The refused request is the only frame not forwarded.
                text(&s.file("client.in"))
                    .split_inclusive('\n')
                    .filter(|l| l.contains("get-env"))
                    .map(str::len)
                    .sum::<usize>()
            }
        );

        let outcomes = s.record();
        let env: Vec<&Object> = outcomes
            .iter()
            .filter(|o| field(o, "tool_id") == "get-env")
            .collect();
        assert_eq!(env.len(), 1);
        assert_eq!(field(env[0], "call_id"), call_id);
        assert_eq!(at(env[0], &["policy", "status"]), "denied");
        let echo: Vec<&Object> = outcomes
            .iter()
            .filter(|o| field(o, "tool_id") == "echo")
            .collect();
        assert_eq!(at(echo[0], &["execution", "status"]), "success");
    }
    // The control: allowed, get-env does hand the secret over, so its absence above
    // means the call never ran.
    let allowed = Session::run(
        "legacy",
        Via::Wrap {
            policy: "version: 1\ndefault: allow\n",
        },
        r#"[{"tool":"get-env"}]"#,
        &[SECRET],
        &[&server, Path::new("stdio")],
    );
    assert!(field(&allowed.calls()[0], "text").contains(SECRET.split_once('=').unwrap().1));
    allowed.record();
}

/// The same session bare and through wrap: the client gets the same bytes, and
/// through wrap every byte it gets is one the server wrote.
/// A client that calls without listing first (it cached the tools from an earlier
/// session): its first call waits for the relay's own listing and runs, rather than
/// being refused as not listed.
#[test]
fn a_client_that_never_lists_gets_its_first_call_run() {
    let server = server_js("server-everything");
    let s = Session::run(
        "legacy+nolist",
        Via::Wrap { policy: NO_ENV },
        r#"[{"tool":"echo","arguments":{"message":"cached"}}]"#,
        &[],
        &[&server, Path::new("stdio")],
    );
    let calls = s.calls();
    assert!(!is_error(&calls[0]), "{calls:?}");
    assert_eq!(field(&calls[0], "text"), "Echo: cached");
    // The call went out before the client asked for any listing (the SDK lists only
    // afterwards, to check the result); the relay listed on its own ids.
    let asked = text(&s.file("client.in"));
    let call = asked.find("tools/call").expect("the call");
    assert!(
        asked.find("tools/list").is_none_or(|list| call < list),
        "{asked}"
    );
    assert!(
        text(&s.file("server.in")).contains("aegis-relay/tools-list/"),
        "the relay listed the tools itself"
    );
}

/// A rug pull as the official SDK client meets it: after the first call the server
/// rewrites echo's description to a prompt injection. The client lists again and is never
/// shown the new text (echo is left out), its next call to echo is refused at the pins
/// station, and the record holds the change once.
#[test]
fn the_sdk_client_is_never_shown_a_rug_pulls_description() {
    let server = repo().join("tests/fixtures/mcp/echo_server.py");
    let s = Session::run_with(
        "python3",
        "legacy",
        Via::Wrap { policy: NO_ENV },
        r#"[{"tool":"echo","arguments":{"text":"first"}},{"list":true},{"tool":"echo","arguments":{"text":"second"}}]"#,
        &[],
        &[&server, Path::new("--rug-pull")],
    );
    let calls = s.calls();
    assert!(!is_error(&calls[0]), "{calls:?}");
    assert!(is_error(&calls[1]), "{calls:?}");
    assert_eq!(field(&refusal(&calls[1]), "station"), "pins");
    let listings = match s.got.get("listings") {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>(),
        other => panic!("no listings: {other:?}"),
    };
    assert_eq!(listings.len(), 1);
    assert!(
        listings[0].contains(r#""name": "get-env""#) && !listings[0].contains(r#""name": "echo""#),
        "{}",
        listings[0]
    );
    // Nothing the client received, in any message, carries the new description; the
    // server did send it (to the relay and in the client's listing).
    assert!(!text(&s.file("client.out")).contains("~/.ssh"));
    assert!(text(&s.file("server.out")).contains("~/.ssh"));
    let changes: Vec<Object> = std::fs::read(s.dir.path().join("record.jsonl"))
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(object)
        .filter(|l| field(l, "line_type") == "tool_change")
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(field(&changes[0], "tool_id"), "echo");
    s.record();
}

#[test]
fn the_sdk_client_sees_the_same_bytes_with_and_without_wrap() {
    let server = server_js("server-everything");
    let plan = r#"[{"tool":"echo","arguments":{"message":"same ü"}},{"tool":"get-sum","arguments":{"a":2,"b":3}},{"tool":"get-structured-content","arguments":{"location":"New York"}}]"#;
    for mode in MODES {
        let bare = Session::run(mode, Via::Bare, plan, &[], &[&server, Path::new("stdio")]);
        let wrapped = Session::run(
            mode,
            Via::Wrap { policy: NO_ENV },
            plan,
            &[],
            &[&server, Path::new("stdio")],
        );
        assert_eq!(
            text(&wrapped.file("client.out")),
            wrapped.peers_only("server.out"),
            "{mode}"
        );
        assert_eq!(
            text(&wrapped.file("client.in")),
            wrapped.peers_only("server.in"),
            "{mode}"
        );
        // Bare, the server's bytes are what the client got.
        assert_eq!(
            text(&bare.file("server.out")),
            text(&wrapped.file("client.out")),
            "{mode}"
        );
        assert_eq!(
            text(&bare.file("server.in")),
            wrapped.peers_only("server.in"),
            "{mode}"
        );
        assert_eq!(bare.calls(), wrapped.calls());
        assert!(wrapped.calls().iter().all(|c| !is_error(c)));
        wrapped.record();
    }
}

#[test]
fn filesystem_server_reads_are_relayed_and_a_denied_write_creates_nothing() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::write(root_path.join("notes.txt"), "peer notes\n").unwrap();
    let policy = "version: 1
default: allow
rules:
  - id: read-only
    action: deny
    tool: write_file
    reason: the workspace is read-only
";
    let dir = root_path.to_str().unwrap();
    let plan = format!(
        r#"[{{"tool":"list_directory","arguments":{{"path":"{dir}"}}}},
            {{"tool":"read_text_file","arguments":{{"path":"{dir}/notes.txt"}}}},
            {{"tool":"write_file","arguments":{{"path":"{dir}/new.txt","content":"x"}}}}]"#
    );
    let server = server_js("server-filesystem");
    let s = Session::run(
        "legacy",
        Via::Wrap { policy },
        &plan,
        &[],
        &[&server, &root_path],
    );
    let calls = s.calls();
    assert!(!is_error(&calls[0]), "{calls:?}");
    assert!(field(&calls[0], "text").contains("notes.txt"));
    assert!(!is_error(&calls[1]));
    assert!(field(&calls[1], "text").contains("peer notes"));
    assert!(is_error(&calls[2]));
    assert_eq!(field(&refusal(&calls[2]), "station"), "policy");
    assert!(!root_path.join("new.txt").exists(), "the denied write ran");
    assert!(!text(&s.file("server.in")).contains("write_file\""));

    let outcomes = s.record();
    let write: Vec<&Object> = outcomes
        .iter()
        .filter(|o| field(o, "tool_id") == "write_file")
        .collect();
    assert_eq!(write.len(), 1);
    assert_eq!(at(write[0], &["policy", "status"]), "denied");
    assert!(at(write[0], &["policy", "reason"]).contains("read-only"));
}

/// `aegis wrap` deciding with the Cedar station loaded from its cdylib: the Cedar
/// example permits `echo` and nothing the everything server offers beside it, so
/// `get-env` is refused before the server sees it, and the record says Cedar decided.
#[test]
fn wrap_decides_with_the_cedar_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("cedar.toml");
    let examples = repo().join("examples/cedar");
    std::fs::write(
        &profile,
        format!(
            "name = \"cedar\"\ndescription = \"the Cedar example, by path\"\n[policy]\n\
             plugin = {:?}\nconfig = {{ policies = {:?}, schema = {:?} }}\n\
             [capability]\n[sandbox]\n[audit]\nplugin = \"builtin:memory-sink\"\n",
            aegis_test_support::cdylib("aegis-policy-cedar-plugin")
                .display()
                .to_string(),
            examples.join("policy.cedar").display().to_string(),
            examples.join("schema.cedarschema").display().to_string(),
        ),
    )
    .unwrap();
    let server = server_js("server-everything");
    let s = Session::run(
        "legacy",
        Via::Cedar { profile: &profile },
        r#"[{"tool":"echo","arguments":{"message":"hi"}},{"tool":"get-env"}]"#,
        &[SECRET],
        &[&server, Path::new("stdio")],
    );
    let calls = s.calls();
    assert!(!is_error(&calls[0]), "{calls:?}");
    assert_eq!(field(&calls[0], "text"), "Echo: hi");
    assert!(is_error(&calls[1]));
    assert_eq!(field(&refusal(&calls[1]), "station"), "policy");
    assert!(!text(&s.file("server.in")).contains("get-env\""));
    let outcomes = s.record();
    let by_tool = |t: &str| {
        outcomes
            .iter()
            .find(|o| field(o, "tool_id") == t)
            .unwrap_or_else(|| panic!("no outcome for {t}"))
    };
    assert_eq!(
        at(by_tool("echo"), &["decision_axes", "matched_rule"]),
        "echo"
    );
    assert_eq!(at(by_tool("get-env"), &["policy", "status"]), "denied");
    let record = text(&s.file("record.jsonl"));
    assert!(
        record.contains("libaegis_policy_cedar_plugin.so"),
        "{record}"
    );
}

/// A rule over the `path` argument holds against the real filesystem server: a read
/// under the granted directory runs, and the same directory with `..` (plain, or
/// hidden in a longer path) reaching a file the server itself would serve is refused
/// before the server sees it. The record names what the rule compared.
#[test]
fn a_path_rule_refuses_traversal_the_server_would_have_served() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::create_dir(root_path.join("pub")).unwrap();
    std::fs::write(root_path.join("pub/notes.txt"), "public notes\n").unwrap();
    std::fs::write(root_path.join("secret.txt"), "secret\n").unwrap();
    let dir = root_path.to_str().unwrap();
    let policy = format!(
        "version: 1
default: deny
rules:
  - id: read-pub
    action: allow
    tool: read_text_file
    arguments:
      path: {{ under: {dir}/pub }}
"
    );
    let plan = format!(
        r#"[{{"tool":"read_text_file","arguments":{{"path":"{dir}/pub/notes.txt"}}}},
            {{"tool":"read_text_file","arguments":{{"path":"{dir}/pub/../secret.txt"}}}},
            {{"tool":"read_text_file","arguments":{{"path":"{dir}/pub/./x/../../secret.txt"}}}}]"#
    );
    let server = server_js("server-filesystem");
    let s = Session::run(
        "legacy",
        Via::Wrap { policy: &policy },
        &plan,
        &[],
        &[&server, &root_path],
    );
    let calls = s.calls();
    assert!(!is_error(&calls[0]), "{calls:?}");
    assert!(field(&calls[0], "text").contains("public notes"));
    for refused in &calls[1..] {
        assert!(is_error(refused), "{calls:?}");
        assert_eq!(field(&refusal(refused), "station"), "policy");
        assert!(!field(refused, "text").contains("secret"), "{refused:?}");
    }
    assert!(!text(&s.file("server.in")).contains("secret.txt"));

    let outcomes = s.record();
    let reads: Vec<&Object> = outcomes
        .iter()
        .filter(|o| field(o, "tool_id") == "read_text_file")
        .collect();
    assert_eq!(reads.len(), 3);
    assert_eq!(at(reads[0], &["policy", "status"]), "allowed");
    assert_eq!(at(reads[0], &["decision_axes", "matched_rule"]), "read-pub");
    assert_eq!(
        at(reads[0], &["decision_axes", "arguments"]),
        format!(r#"{{"path":"{dir}/pub/notes.txt"}}"#)
    );
    for r in &reads[1..] {
        assert_eq!(at(r, &["policy", "status"]), "denied");
    }
}

/// The reference filesystem server, confined by `--profile linux-confined` and given
/// `/` as its own allow-list (so only the confinement stands in the way): it serves
/// files in its granted directory through a real client, and its own `read_text_file`
/// cannot read a file outside it, nor `write_file` write there. The open line records
/// what was enforced.
#[test]
fn a_confined_filesystem_server_serves_its_grant_and_nothing_outside_it() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let granted = root_path.join("granted");
    std::fs::create_dir(&granted).unwrap();
    std::fs::write(granted.join("notes.txt"), "confined notes\n").unwrap();
    // An existing file: for a new one the server itself scans its allow-list root (`/`
    // here), which the confinement refuses, so creating would fail for the server's
    // own reasons.
    std::fs::write(granted.join("new.txt"), "").unwrap();
    std::fs::write(root_path.join("secret.txt"), "outside\n").unwrap();
    let (g, r) = (granted.to_str().unwrap(), root_path.to_str().unwrap());
    let plan = format!(
        r#"[{{"tool":"read_text_file","arguments":{{"path":"{g}/notes.txt"}}}},
            {{"tool":"write_file","arguments":{{"path":"{g}/new.txt","content":"made"}}}},
            {{"tool":"read_text_file","arguments":{{"path":"{r}/secret.txt"}}}},
            {{"tool":"write_file","arguments":{{"path":"{r}/escape.txt","content":"x"}}}},
            {{"tool":"read_text_file","arguments":{{"path":"/etc/shadow"}}}}]"#
    );
    let server = server_js("server-filesystem");
    let package_dir = peers_dir().join("npm");
    let s = Session::run(
        "legacy",
        Via::Confined {
            policy: "version: 1\ndefault: allow\nrules: []\n",
            read: &[&package_dir],
            exec: &[],
            write: &[&granted],
            program: "node",
            cwd: None,
        },
        &plan,
        &[],
        &[&server, Path::new("/")],
    );
    let calls = s.calls();
    assert_eq!(calls.len(), 5, "{calls:?}");
    assert!(!is_error(&calls[0]), "{calls:?}");
    assert!(field(&calls[0], "text").contains("confined notes"));
    assert!(!is_error(&calls[1]), "{calls:?}");
    assert_eq!(
        std::fs::read_to_string(granted.join("new.txt")).unwrap(),
        "made"
    );
    for (i, what) in [
        (2, "a file outside the grant"),
        (3, "a write outside"),
        (4, "/etc/shadow"),
    ] {
        assert!(is_error(&calls[i]), "{what} was served: {:?}", calls[i]);
        assert!(
            field(&calls[i], "text").contains("EACCES")
                || field(&calls[i], "text").contains("denied"),
            "{what}: {:?}",
            calls[i]
        );
        assert!(!field(&calls[i], "text").contains("outside\n"));
    }
    assert!(!root_path.join("escape.txt").exists());
    s.record();

    // The open line says what was enforced on this server.
    let record = std::fs::read(s.dir.path().join("record.jsonl")).unwrap();
    let open = object(record.split(|&b| b == b'\n').next().unwrap());
    let confinement = at(
        &open,
        &["provenance", "confinement", "report", "enforcement"],
    );
    assert_eq!(confinement, "full");
    assert_eq!(
        at(&open, &["provenance", "confinement", "level"]),
        "required"
    );
    assert_eq!(
        at(&open, &["provenance", "confinement", "name"]),
        "confine-landlock"
    );
}

/// The README's confined `npx` example, offline: `npx -y
/// @modelcontextprotocol/server-filesystem DIR` under `--profile linux-confined`, run
/// from the directory the peers are installed in, so npx finds the package in its
/// `node_modules` instead of fetching it into `~/.npm/_npx` (the README grants that
/// directory; here `node_modules` stands in for it). npx starts the server through
/// `sh` and the `.bin` link, which only `--allow-exec` lets run; the server then
/// serves its granted directory through a real client.
#[test]
fn the_readme_confined_npx_example_serves_its_grant() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let (home, project) = (root_path.join("home"), root_path.join("project"));
    std::fs::create_dir_all(home.join(".npm")).unwrap();
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("notes.txt"), "npx notes\n").unwrap();
    let npm = peers_dir().join("npm");
    let modules = npm.join("node_modules");
    let home_env = format!("HOME={}", home.display());
    let env = [
        home_env.as_str(),
        "npm_config_offline=true",
        "npm_config_update_notifier=false",
    ];
    let p = project.to_str().unwrap();
    let plan = format!(r#"[{{"tool":"read_text_file","arguments":{{"path":"{p}/notes.txt"}}}}]"#);
    let s = Session::run(
        "legacy",
        Via::Confined {
            policy: "version: 1\ndefault: allow\nrules: []\n",
            read: &[&npm],
            exec: &[&modules],
            write: &[&home.join(".npm"), &project],
            program: "npx",
            cwd: Some(&npm),
        },
        &plan,
        &env,
        &[
            Path::new("-y"),
            Path::new("@modelcontextprotocol/server-filesystem"),
            &project,
        ],
    );
    let calls = s.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(!is_error(&calls[0]), "{calls:?}");
    assert!(field(&calls[0], "text").contains("npx notes"));
    s.record();
}

/// The failure issue 32 reported, and its fix: confined `npx` with read over the
/// package but no exec grant cannot start the server (`sh` gets EACCES on the `.bin`
/// link's target: 126); with `--allow-exec node_modules` the same command starts it
/// (it exits 0 when its stdin, /dev/null, ends).
#[test]
fn confined_npx_needs_an_exec_grant_to_start_its_server() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(home.join(".npm")).unwrap();
    let npm = peers_dir().join("npm");
    let run = |exec: &[&Path]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_aegis"));
        cmd.current_dir(&npm)
            .env("HOME", &home)
            .env("npm_config_offline", "true")
            .env("npm_config_update_notifier", "false")
            .arg("confine")
            .arg("--allow-read")
            .arg(&npm)
            .arg("--allow-write")
            .arg(home.join(".npm"));
        for e in exec {
            cmd.arg("--allow-exec").arg(e);
        }
        cmd.args(["--", "npx", "-y", "@modelcontextprotocol/server-filesystem"])
            .arg(root.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(
        stderr.contains("mcp-server-filesystem: Permission denied"),
        "{stderr}"
    );
    let out = run(&[&npm.join("node_modules")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("running on stdio"), "{stderr}");
}
