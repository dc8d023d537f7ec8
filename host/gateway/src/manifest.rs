//! The tools manifest: a TOML file declaring each tool the gateway serves.
//!
//! ```toml
//! [[tool]]
//! id = "reverse"                      # the MCP tool name, and what policy rules name
//! description = "Reverses its input."
//! component = "wasm/world-reverse.wasm" # relative to this file
//! shape = "tool"                      # "command" (wasi:cli/run) or "tool" (aegis:tool world)
//! arguments = "json"                  # "json" (default) or "argv"
//! read = ["data"]                     # read roots, relative to this file
//! write = []                          # write roots, relative to this file
//! [tool.limits]                       # each optional; the runtime's defaults otherwise
//! memory_bytes = 16777216
//! wall_ms = 2000
//! output_bytes = 65536
//! [tool.input_schema]                 # JSON Schema (2020-12 unless it says), an object schema
//! type = "object"
//! [tool.output_schema]                # optional: output is then JSON, checked, structuredContent
//! type = "object"
//! # or, instead of an output schema:
//! # output = "content"                # output is a JSON array of MCP content blocks
//! [tool.annotations]                  # optional MCP hints
//! title = "Reverse"
//! read_only = true
//! ```
//!
//! How arguments reach the tool:
//! - `arguments = "json"`: the call's `arguments` object, as RFC 8785 canonical JSON, is
//!   the tool's input (a command's stdin, the world's `input`).
//! - `arguments = "argv"`: `argv = ["a", "b"]` names arguments whose values become the
//!   command's arguments in that order (strings as they are, numbers and booleans as
//!   JSON text; a call missing one is refused, nothing is guessed), and `stdin = "c"`
//!   optionally names one whose value is the input.
//!
//! What the tool's output becomes:
//! - `output = "text"` (the default): one text block; with an `output_schema`, the
//!   output must be JSON matching it and is also served as `structuredContent`.
//! - `output = "content"`: the output is MCP content blocks as JSON, either an array
//!   of blocks or `{"content": [...]}`: `text`, `image` and `audio` (base64 `data`
//!   and a `mimeType` of that kind) and `resource` (an embedded resource with a `uri`
//!   and either `text` or base64 `blob`). Each block is checked when the call returns
//!   (see [`crate::server`]); an output that is not such blocks is served as `isError`
//!   naming why. Not with an `output_schema` (that describes one JSON document).
//!
//! # Guarantees
//! - Every error is one line, `<file>:<line>: …`, naming the tool and the field at fault.
//! - Unknown fields are refused, at every level but inside the schemas (which are JSON
//!   Schema documents and may carry any keyword).
//! - An input schema that is not an object schema (`type = "object"`), or any schema that
//!   does not compile, is refused here; a schema's remote references are never fetched
//!   (the validator is built without HTTP or file resolution).
//!
//! # Non-guarantees
//! - Parsing does no I/O beyond reading the file: whether a component loads and has the
//!   declared shape, and whether a root exists, is checked when the gateway opens
//!   ([`crate::Gateway::open`]), with the same line numbers.

use aegis_runtime::capability::{DEFAULT_LIMITS, Limits};
use aegis_runtime::sandbox::Shape;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A manifest that could not be read or was refused. Displayed as one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The manifest.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not TOML, a field of the wrong type, a missing or unknown field.
    #[error("{path}:{line}: {message}")]
    Syntax {
        /// The manifest.
        path: PathBuf,
        /// 1-based; 0 when the whole file is at fault.
        line: usize,
        /// The parser's words.
        message: String,
    },
    /// A field parsed but its value is refused.
    #[error("{path}:{line}: tool {tool:?}: {field}: {message}")]
    Invalid {
        /// The manifest.
        path: PathBuf,
        /// 1-based line of the field.
        line: usize,
        /// The tool's id (as written).
        tool: String,
        /// The field at fault (`input_schema`, `shape`, `limits.wall_ms`, …).
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// How a call's arguments reach the tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The arguments object as canonical JSON is the tool's input.
    Json,
    /// Named arguments become the command's arguments, in order; `stdin` names one
    /// whose value is the input.
    Argv {
        /// Argument names, in argv order.
        argv: Vec<String>,
        /// The argument whose value is the input, if any.
        stdin: Option<String>,
    },
}

/// What a tool's output becomes in the `tools/call` result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputKind {
    /// One text block (and `structuredContent` with an output schema).
    #[default]
    Text,
    /// MCP content blocks (text, image, audio, embedded resource), as JSON.
    Content,
}

/// MCP tool annotations: hints for the client, never trusted by the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Annotations {
    /// A human-readable title.
    pub title: Option<String>,
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
    /// `idempotentHint`.
    pub idempotent: Option<bool>,
    /// `openWorldHint`.
    pub open_world: Option<bool>,
}

/// Where a tool's fields are in the file, for errors found after parsing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lines {
    /// The `id` key.
    pub id: usize,
    /// The `component` key.
    pub component: usize,
    /// The `shape` key.
    pub shape: usize,
    /// The `read` and `write` keys (the first of them, or the id's line).
    pub roots: usize,
}

/// One tool as the manifest declares it, checked but not yet loaded.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    /// The MCP tool name and the host's tool id.
    pub id: String,
    /// What the tool does, for the client.
    pub description: String,
    /// The component, resolved against the manifest's directory.
    pub component: PathBuf,
    /// The declared shape.
    pub shape: Shape,
    /// How the arguments reach it.
    pub delivery: Delivery,
    /// Read roots, resolved against the manifest's directory.
    pub read: Vec<PathBuf>,
    /// Write roots, resolved against the manifest's directory.
    pub write: Vec<PathBuf>,
    /// Its ceilings.
    pub limits: Limits,
    /// The input schema (an object schema).
    pub input_schema: serde_json::Map<String, serde_json::Value>,
    /// The output schema, if declared.
    pub output_schema: Option<serde_json::Map<String, serde_json::Value>>,
    /// What the output becomes.
    pub output: OutputKind,
    /// MCP annotations.
    pub annotations: Annotations,
    /// Where its fields are, for errors at open.
    pub lines: Lines,
}

/// A parsed, checked manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// The file it came from.
    pub path: PathBuf,
    /// SHA-256 of the text the tools were read from, for the record's provenance.
    pub sha256: [u8; 32],
    /// Its tools, in file order.
    pub tools: Vec<ToolSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tool: Vec<RawTool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    id: Spanned<String>,
    description: Spanned<String>,
    component: Spanned<String>,
    shape: Spanned<String>,
    arguments: Option<Spanned<String>>,
    argv: Option<Spanned<Vec<String>>>,
    stdin: Option<Spanned<String>>,
    read: Option<Spanned<Vec<String>>>,
    write: Option<Spanned<Vec<String>>>,
    limits: Option<Spanned<RawLimits>>,
    input_schema: Spanned<toml::Table>,
    output_schema: Option<Spanned<toml::Table>>,
    output: Option<Spanned<String>>,
    annotations: Option<Annotations>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory_bytes: Option<Spanned<u64>>,
    wall_ms: Option<Spanned<u64>>,
    output_bytes: Option<Spanned<u64>>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl Manifest {
    /// Reads and checks the manifest at `path`.
    ///
    /// # Errors
    /// [`ManifestError`], one line naming the file, line and field.
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        // Never through a final link, never a FIFO or a device, at most 4 MiB.
        let text = aegis_files::read_to_string(path, aegis_files::CONFIG).map_err(|e| {
            ManifestError::Read {
                path: path.to_owned(),
                source: e.into_io(),
            }
        })?;
        Manifest::parse(&text, path)
    }

    /// Checks manifest `text`, as if read from `path` (relative paths in it are
    /// resolved against `path`'s directory).
    ///
    /// # Errors
    /// [`ManifestError`], one line naming the file, line and field.
    pub fn parse(text: &str, path: &Path) -> Result<Manifest, ManifestError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ManifestError::Syntax {
            path: path.to_owned(),
            line: e.span().map_or(0, |s| line_of(text, s.start)),
            message: e.message().trim().replace('\n', " "),
        })?;
        if raw.tool.is_empty() {
            return Err(ManifestError::Syntax {
                path: path.to_owned(),
                line: 0,
                message: "no [[tool]] declared: a gateway with no tools serves nothing".into(),
            });
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut seen = BTreeSet::new();
        let mut tools = Vec::with_capacity(raw.tool.len());
        for t in raw.tool {
            let spec = check_tool(t, text, path, dir)?;
            if !seen.insert(spec.id.clone()) {
                return Err(ManifestError::Invalid {
                    path: path.to_owned(),
                    line: spec.lines.id,
                    tool: spec.id,
                    field: "id".into(),
                    message: "declared twice: every tool id must be unique".into(),
                });
            }
            tools.push(spec);
        }
        Ok(Manifest {
            path: path.to_owned(),
            sha256: aegis_record::digest::sha256(text.as_bytes()),
            tools,
        })
    }
}

/// MCP tool names: 1–128 characters of `A-Z a-z 0-9 _ - .` (the 2025-11-25 guidance),
/// which also keeps them readable on the record and in policy rules.
fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn check_tool(t: RawTool, text: &str, path: &Path, dir: &Path) -> Result<ToolSpec, ManifestError> {
    let id = t.id.get_ref().clone();
    let at = Place {
        text,
        path,
        id: &id,
    };
    let invalid = |span, field: &str, message| at.invalid(span, field, message);
    if !valid_id(&id) {
        return Err(invalid(
            t.id.span(),
            "id",
            "expected 1 to 128 of A-Z a-z 0-9 _ - .".into(),
        ));
    }
    if t.description.get_ref().trim().is_empty() {
        return Err(invalid(
            t.description.span(),
            "description",
            "must not be empty: it is what the client's model reads".into(),
        ));
    }
    if t.component.get_ref().is_empty() {
        return Err(invalid(
            t.component.span(),
            "component",
            "must name a file".into(),
        ));
    }
    let shape = match t.shape.get_ref().as_str() {
        "command" => Shape::Command,
        "tool" => Shape::Tool,
        other => {
            return Err(invalid(
                t.shape.span(),
                "shape",
                format!("expected \"command\" or \"tool\", found {other:?}"),
            ));
        }
    };
    let input_schema = object_of(t.input_schema.get_ref());
    check_schema(&input_schema, true)
        .map_err(|m| invalid(t.input_schema.span(), "input_schema", m))?;
    let output_schema = match &t.output_schema {
        Some(s) => {
            let schema = object_of(s.get_ref());
            check_schema(&schema, false).map_err(|m| invalid(s.span(), "output_schema", m))?;
            Some(schema)
        }
        None => None,
    };
    let output = output_kind(&t, output_schema.is_some(), &at)?;
    let delivery = delivery(&t, &input_schema, &at)?;
    let limits = limits(&t, &at)?;
    let roots_line = [&t.read, &t.write]
        .into_iter()
        .flatten()
        .map(|r| line_of(text, r.span().start))
        .next()
        .unwrap_or_else(|| line_of(text, t.id.span().start));
    let roots = |r: &Option<Spanned<Vec<String>>>| -> Vec<PathBuf> {
        r.as_ref()
            .map(|r| r.get_ref().iter().map(|p| dir.join(p)).collect())
            .unwrap_or_default()
    };
    let resolve = |p: &str| dir.join(p);
    Ok(ToolSpec {
        description: t.description.get_ref().clone(),
        component: resolve(t.component.get_ref()),
        shape,
        delivery,
        read: roots(&t.read),
        write: roots(&t.write),
        limits,
        input_schema,
        output_schema,
        output,
        annotations: t.annotations.unwrap_or_default(),
        lines: Lines {
            id: line_of(text, t.id.span().start),
            component: line_of(text, t.component.span().start),
            shape: line_of(text, t.shape.span().start),
            roots: roots_line,
        },
        id,
    })
}

/// Where a tool's errors point: the manifest's text and file, and the tool.
struct Place<'a> {
    text: &'a str,
    path: &'a Path,
    id: &'a str,
}

impl Place<'_> {
    /// The one-line error naming file, line, tool and field.
    fn invalid(&self, span: std::ops::Range<usize>, field: &str, message: String) -> ManifestError {
        ManifestError::Invalid {
            path: self.path.to_owned(),
            line: line_of(self.text, span.start),
            tool: self.id.to_owned(),
            field: field.to_owned(),
            message,
        }
    }
}

/// What the tool's output becomes (`output`): text, or MCP content blocks, which an
/// output schema cannot describe.
fn output_kind(t: &RawTool, has_schema: bool, at: &Place<'_>) -> Result<OutputKind, ManifestError> {
    let invalid = |span, field: &str, message| at.invalid(span, field, message);
    let found = match t.output.as_ref().map(|o| (o.get_ref().as_str(), o.span())) {
        None | Some(("text", _)) => OutputKind::Text,
        Some(("content", span)) => {
            if has_schema {
                return Err(invalid(
                    span,
                    "output",
                    "\"content\" cannot go with an output_schema, which describes one JSON document"
                        .into(),
                ));
            }
            OutputKind::Content
        }
        Some((other, span)) => {
            return Err(invalid(
                span,
                "output",
                format!("expected \"text\" or \"content\", found {other:?}"),
            ));
        }
    };
    Ok(found)
}

/// How the arguments reach the tool (`arguments`, `argv`, `stdin`): as JSON, or as
/// argv entries and stdin naming properties of the input schema.
fn delivery(
    t: &RawTool,
    input_schema: &serde_json::Map<String, serde_json::Value>,
    at: &Place<'_>,
) -> Result<Delivery, ManifestError> {
    let invalid = |span, field: &str, message| at.invalid(span, field, message);
    let properties = input_schema
        .get("properties")
        .and_then(serde_json::Value::as_object);
    let declared = |name: &str| properties.is_some_and(|p| p.contains_key(name));
    let found = match t
        .arguments
        .as_ref()
        .map(|a| (a.get_ref().as_str(), a.span()))
    {
        None | Some(("json", _)) => {
            if let Some(a) = &t.argv {
                return Err(invalid(
                    a.span(),
                    "argv",
                    "only with arguments = \"argv\"".into(),
                ));
            }
            if let Some(s) = &t.stdin {
                return Err(invalid(
                    s.span(),
                    "stdin",
                    "only with arguments = \"argv\"".into(),
                ));
            }
            Delivery::Json
        }
        Some(("argv", span)) => {
            let argv = t
                .argv
                .as_ref()
                .map(|a| a.get_ref().clone())
                .unwrap_or_default();
            let stdin = t.stdin.as_ref().map(|s| s.get_ref().clone());
            if argv.is_empty() && stdin.is_none() {
                return Err(invalid(
                    span,
                    "arguments",
                    "\"argv\" needs argv = [...] or stdin = \"...\" naming input_schema properties"
                        .into(),
                ));
            }
            for name in &argv {
                if !declared(name) {
                    let span = t.argv.as_ref().map_or(span.clone(), Spanned::span);
                    return Err(invalid(
                        span,
                        "argv",
                        format!("{name:?} is not a property of input_schema"),
                    ));
                }
            }
            if let (Some(name), Some(s)) = (&stdin, &t.stdin)
                && !declared(name)
            {
                return Err(invalid(
                    s.span(),
                    "stdin",
                    format!("{name:?} is not a property of input_schema"),
                ));
            }
            Delivery::Argv { argv, stdin }
        }
        Some((other, span)) => {
            return Err(invalid(
                span,
                "arguments",
                format!("expected \"json\" or \"argv\", found {other:?}"),
            ));
        }
    };
    Ok(found)
}

/// The tool's ceilings (`limits`), each at least 1, the defaults where absent.
fn limits(t: &RawTool, at: &Place<'_>) -> Result<Limits, ManifestError> {
    let invalid = |span, field: &str, message| at.invalid(span, field, message);
    let found = match &t.limits {
        None => DEFAULT_LIMITS,
        Some(l) => {
            let l = l.get_ref();
            let pick = |v: &Option<Spanned<u64>>, field: &str, default: u64| match v {
                None => Ok(default),
                Some(v) if *v.get_ref() == 0 => {
                    Err(invalid(v.span(), field, "must be at least 1".into()))
                }
                Some(v) => Ok(*v.get_ref()),
            };
            Limits {
                max_memory_bytes: pick(
                    &l.memory_bytes,
                    "limits.memory_bytes",
                    DEFAULT_LIMITS.max_memory_bytes,
                )?,
                max_wall_ms: pick(&l.wall_ms, "limits.wall_ms", DEFAULT_LIMITS.max_wall_ms)?,
                max_output_bytes: pick(
                    &l.output_bytes,
                    "limits.output_bytes",
                    DEFAULT_LIMITS.max_output_bytes,
                )?,
            }
        }
    };
    Ok(found)
}

/// A TOML table as the JSON object it spells.
fn object_of(table: &toml::Table) -> serde_json::Map<String, serde_json::Value> {
    table.iter().map(|(k, v)| (k.clone(), json_of(v))).collect()
}

fn json_of(v: &toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        toml::Value::Boolean(b) => J::Bool(*b),
        // JSON Schema has no dates; a TOML date is kept as the text it was written as.
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.iter().map(json_of).collect()),
        toml::Value::Table(t) => J::Object(object_of(t)),
    }
}

/// Compiles `schema` (so a schema the validator cannot use is refused now, not at the
/// first call); an input schema must also be an object schema, as MCP requires.
fn check_schema(
    schema: &serde_json::Map<String, serde_json::Value>,
    input: bool,
) -> Result<(), String> {
    if input && schema.get("type") != Some(&serde_json::Value::String("object".into())) {
        return Err("must be an object schema: expected type = \"object\"".into());
    }
    let value = serde_json::Value::Object(schema.clone());
    jsonschema::validator_for(&value)
        .map(|_| ())
        .map_err(|e| format!("not a usable JSON Schema: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[tool]]
id = "reverse"
description = "Reverses its input."
component = "wasm/world-reverse.wasm"
shape = "tool"
[tool.input_schema]
type = "object"
"#;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(text, Path::new("/m/tools.toml"))
    }

    fn error(text: &str) -> String {
        parse(text).expect_err("refused").to_string()
    }

    #[test]
    fn a_good_manifest_resolves_paths_against_its_directory() {
        let m = parse(GOOD).unwrap();
        let t = &m.tools[0];
        assert_eq!(t.component, Path::new("/m/wasm/world-reverse.wasm"));
        assert_eq!(t.shape, Shape::Tool);
        assert_eq!(t.delivery, Delivery::Json);
        assert_eq!(t.limits, DEFAULT_LIMITS);
        assert_eq!(t.lines.component, 5);
    }

    #[test]
    fn unknown_fields_are_refused_with_their_line() {
        let e = error(&GOOD.replace("shape = \"tool\"", "shape = \"tool\"\ncolour = \"red\""));
        assert!(e.starts_with("/m/tools.toml:7: "), "{e}");
        assert!(e.contains("colour"), "{e}");
        let e = error(&format!("{GOOD}[tool.limits]\nwall = 3\n"));
        assert!(e.contains("wall"), "{e}");
        let e = error(&format!("{GOOD}[tool.annotations]\nreadonly = true\n"));
        assert!(e.contains("readonly"), "{e}");
    }

    #[test]
    fn a_missing_field_is_refused() {
        let e = error(&GOOD.replace("description = \"Reverses its input.\"\n", ""));
        assert!(e.contains("description"), "{e}");
    }

    #[test]
    fn no_tools_is_refused() {
        assert!(error("").contains("no [[tool]]"));
    }

    #[test]
    fn an_unknown_shape_names_its_line_and_field() {
        let e = error(&GOOD.replace("shape = \"tool\"", "shape = \"world\""));
        assert_eq!(
            e,
            "/m/tools.toml:6: tool \"reverse\": shape: expected \"command\" or \"tool\", found \"world\""
        );
    }

    #[test]
    fn an_input_schema_that_is_not_an_object_schema_is_refused() {
        let e = error(&GOOD.replace("type = \"object\"", "type = \"string\""));
        assert!(e.contains("input_schema: must be an object schema"), "{e}");
        let e = error(&GOOD.replace("type = \"object\"", "properties = {}"));
        assert!(e.contains("input_schema: must be an object schema"), "{e}");
    }

    #[test]
    fn a_schema_that_does_not_compile_is_refused() {
        let e = error(&format!("{GOOD}minLength = \"three\"\n"));
        assert!(e.contains("input_schema: not a usable JSON Schema"), "{e}");
        let e = error(&format!("{GOOD}[tool.output_schema]\ntype = 7\n"));
        assert!(e.contains("output_schema: not a usable JSON Schema"), "{e}");
    }

    #[test]
    fn duplicate_ids_are_refused() {
        let e = error(&format!("{GOOD}{GOOD}"));
        assert!(e.contains("id: declared twice"), "{e}");
        assert!(e.starts_with("/m/tools.toml:11: "), "{e}");
    }

    #[test]
    fn bad_ids_and_empty_descriptions_are_refused() {
        let e = error(&GOOD.replace("\"reverse\"", "\"re verse\""));
        assert!(e.contains("id: expected"), "{e}");
        let e = error(&GOOD.replace("Reverses its input.", " "));
        assert!(e.contains("description: must not be empty"), "{e}");
    }

    #[test]
    fn argv_delivery_names_only_declared_properties() {
        let argv = GOOD.replace(
            "shape = \"tool\"",
            "shape = \"command\"\narguments = \"argv\"\nargv = [\"path\"]",
        );
        let e = error(&argv);
        assert!(e.contains("argv: \"path\" is not a property"), "{e}");
        let ok = format!("{argv}properties = {{ path = {{ type = \"string\" }} }}\n");
        let m = parse(&ok).unwrap();
        assert_eq!(
            m.tools[0].delivery,
            Delivery::Argv {
                argv: vec!["path".into()],
                stdin: None
            }
        );
        let e = error(&GOOD.replace("shape = \"tool\"", "shape = \"tool\"\nargv = [\"x\"]"));
        assert!(e.contains("argv: only with arguments = \"argv\""), "{e}");
        let e = error(&GOOD.replace("shape = \"tool\"", "shape = \"tool\"\narguments = \"env\""));
        assert!(
            e.contains("arguments: expected \"json\" or \"argv\""),
            "{e}"
        );
        let e = error(&GOOD.replace("shape = \"tool\"", "shape = \"tool\"\narguments = \"argv\""));
        assert!(e.contains("arguments: \"argv\" needs"), "{e}");
    }

    #[test]
    fn content_output_is_declared_and_checked() {
        let m = parse(&GOOD.replace("shape = \"tool\"", "shape = \"tool\"\noutput = \"content\""))
            .unwrap();
        assert_eq!(m.tools[0].output, OutputKind::Content);
        assert_eq!(parse(GOOD).unwrap().tools[0].output, OutputKind::Text);
        let e = error(&GOOD.replace("shape = \"tool\"", "shape = \"tool\"\noutput = \"blocks\""));
        assert!(
            e.starts_with("/m/tools.toml:7: tool \"reverse\": output: expected"),
            "{e}"
        );
        let e = error(&format!(
            "{}[tool.output_schema]\ntype = \"object\"\n",
            GOOD.replace("shape = \"tool\"", "shape = \"tool\"\noutput = \"content\"")
        ));
        assert!(
            e.contains("output: \"content\" cannot go with an output_schema"),
            "{e}"
        );
    }

    #[test]
    fn a_zero_limit_is_refused() {
        let e = error(&format!("{GOOD}[tool.limits]\nwall_ms = 0\n"));
        assert!(e.contains("limits.wall_ms: must be at least 1"), "{e}");
        assert!(e.starts_with("/m/tools.toml:10: "), "{e}");
    }

    #[test]
    fn an_unreadable_file_names_it() {
        let e = Manifest::load(Path::new("/nonexistent/tools.toml")).unwrap_err();
        assert!(matches!(e, ManifestError::Read { .. }));
        assert!(e.to_string().starts_with("/nonexistent/tools.toml: "));
    }
}
