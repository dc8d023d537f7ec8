//! The sink's config section, read one way only.

use aegis_station_api::{ErrorKind, PluginError};
use std::path::{Path, PathBuf};

/// The `[audit] config` table, as the profile gives it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    connection: Option<String>,
    connection_file: Option<PathBuf>,
    #[serde(default = "default_schema")]
    schema: String,
    #[serde(default = "default_table")]
    table: String,
    retention_days: u32,
    /// Added by the host for `aegis store init`, never written in a profile.
    init: Option<RawInit>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInit {
    connection: Option<String>,
    connection_file: Option<PathBuf>,
}

fn default_schema() -> String {
    "public".to_owned()
}

fn default_table() -> String {
    "aegis_lines".to_owned()
}

/// A checked config.
pub(crate) struct Config {
    /// How the writer connects.
    pub writer: postgres::Config,
    /// Where the record lives.
    pub names: Names,
    /// The retention the store must enforce, in days.
    pub retention_days: u32,
    /// With `aegis store init`: how the administrator connects.
    pub init: Option<postgres::Config>,
}

/// The store's objects, every name schema-qualified and quoted (checked to be plain
/// lowercase identifiers first, so quoting changes nothing a reader sees).
#[derive(Clone, Debug)]
pub(crate) struct Names {
    pub schema: String,
    pub table: String,
}

impl Names {
    /// `"schema"."table" + suffix`, quoted.
    pub fn object(&self, suffix: &str) -> String {
        format!("\"{}\".\"{}{suffix}\"", self.schema, self.table)
    }

    /// The lines table.
    pub fn lines(&self) -> String {
        self.object("")
    }
}

fn config_error(message: impl Into<String>) -> PluginError {
    PluginError::new(ErrorKind::CONFIG, message)
}

/// Plain lowercase identifiers only, short enough that every derived name
/// (`<table>_append_only`, …) stays within PostgreSQL's 63 bytes.
fn identifier(key: &str, value: &str) -> Result<String, PluginError> {
    let ok = value.len() <= 40
        && value
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(value.to_owned())
    } else {
        Err(config_error(format!(
            "{key}: {value:?} is not a plain identifier (a-z, 0-9 and _, starting with a letter or _, at most 40 bytes)"
        )))
    }
}

/// A connection string from the config or from the file that holds it, parsed. A file
/// may hold a password, so it must be a regular file of the user's own, not a link,
/// readable by nobody else.
fn connection(
    key: &str,
    inline: Option<String>,
    file: Option<PathBuf>,
) -> Result<postgres::Config, PluginError> {
    let text = match (inline, file) {
        (Some(text), None) => text,
        (None, Some(path)) => read_private(&path)?,
        (Some(_), Some(_)) => {
            return Err(config_error(format!(
                "{key}: give connection or connection_file, not both"
            )));
        }
        (None, None) => {
            return Err(config_error(format!(
                "{key}: a connection (a libpq connection string) or a connection_file is required"
            )));
        }
    };
    let mut parsed: postgres::Config = text
        .trim_end_matches(['\n', '\r'])
        .parse()
        .map_err(|e| config_error(format!("{key}: connection string: {e}")))?;
    if parsed.get_user().is_none() {
        return Err(config_error(format!(
            "{key}: the connection string names no user"
        )));
    }
    // Bounded, so an unreachable server is reported rather than waited on forever.
    if parsed.get_connect_timeout().is_none() {
        parsed.connect_timeout(std::time::Duration::from_secs(10));
    }
    Ok(parsed)
}

fn read_private(path: &Path) -> Result<String, PluginError> {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let refused = |why: String| {
        PluginError::new(
            ErrorKind::REFUSED,
            format!("connection_file {}: {why}", path.display()),
        )
    };
    // Opened once, never through a final link, never a FIFO or a device (aegis-files);
    // its mode is read from the descriptor opened, not from the path.
    let file = aegis_files::open(path).map_err(|e| match e {
        aegis_files::FileError::NotAFile { found, .. } => refused(format!(
            "{found}, not a regular file; refused (never read through a symbolic link)"
        )),
        other => refused(other.to_string()),
    })?;
    let mode = file.metadata().map_err(|e| refused(e.to_string()))?.mode();
    if mode & 0o077 != 0 {
        return Err(refused(format!(
            "mode {:o} lets group or others read it; it may hold a password (chmod 600)",
            mode & 0o777
        )));
    }
    // A connection string is one short line: more than this is not one.
    const MAX: u64 = 64 * 1024;
    let mut text = String::new();
    file.take(MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| refused(e.to_string()))?;
    if text.len() as u64 > MAX {
        return Err(refused(format!("longer than {MAX} bytes")));
    }
    let body = text.trim_end_matches(['\n', '\r']);
    if body.contains('\n') {
        return Err(refused("holds more than one line".into()));
    }
    Ok(body.to_owned())
}

impl Config {
    /// Reads the plugin's config text.
    pub fn parse(text: &str) -> Result<Config, PluginError> {
        let raw: Raw = toml::from_str(text).map_err(|e| config_error(e.message()))?;
        let writer = connection("connection", raw.connection, raw.connection_file)?;
        if raw.retention_days == 0 {
            return Err(config_error(
                "retention_days: must be at least 1 (the days a row is kept before it may be deleted)",
            ));
        }
        let names = Names {
            schema: identifier("schema", &raw.schema)?,
            table: identifier("table", &raw.table)?,
        };
        let init = raw
            .init
            .map(|i| connection("init.connection", i.connection, i.connection_file))
            .transpose()?;
        Ok(Config {
            writer,
            names,
            retention_days: raw.retention_days,
            init,
        })
    }
}

/// Where a connection goes, for an operator: never the password.
pub(crate) fn server(config: &postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgresql server {} port {} database {} as {}",
        if hosts.is_empty() {
            "(default)".to_owned()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".to_owned()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("(default)"),
        config.get_user().unwrap_or("(none)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, PluginError> {
        Config::parse(text)
    }

    #[test]
    fn names_are_plain_identifiers_and_a_connection_is_required() {
        let base = "connection = \"host=/tmp user=w dbname=d\"\nretention_days = 30\n";
        assert!(parse(base).is_ok());
        for bad in [
            "table = \"Lines\"",
            "table = \"a;drop\"",
            "schema = \"\\\"x\"",
            "table = \"\"",
        ] {
            let e = parse(&format!("{base}{bad}\n")).err().unwrap();
            assert_eq!(e.kind, ErrorKind::CONFIG, "{bad}: {}", e.message);
        }
        let e = parse("retention_days = 1").err().unwrap();
        assert!(e.message.contains("connection"), "{}", e.message);
        let e = parse("connection = \"host=/tmp user=w\"\nretention_days = 0")
            .err()
            .unwrap();
        assert!(e.message.contains("retention_days"), "{}", e.message);
        let e = parse("connection = \"host=/tmp\"\nretention_days = 1")
            .err()
            .unwrap();
        assert!(e.message.contains("no user"), "{}", e.message);
        let e = parse(&format!("{base}extra = 1\n")).err().unwrap();
        assert!(e.message.contains("extra"), "{}", e.message);
    }

    #[test]
    fn a_connection_file_must_be_private_and_regular() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("conn");
        std::fs::write(&file, "host=/tmp user=w password=secret\n").unwrap();
        let cfg = |p: &Path| format!("connection_file = {:?}\nretention_days = 1", p);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = parse(&cfg(&file)).err().unwrap();
        assert_eq!(e.kind, ErrorKind::REFUSED);
        assert!(e.message.contains("mode 644"), "{}", e.message);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ok = parse(&cfg(&file)).unwrap();
        assert_eq!(ok.writer.get_user(), Some("w"));
        assert!(!server(&ok.writer).contains("secret"));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = parse(&cfg(&link)).err().unwrap();
        assert!(e.message.contains("symbolic link"), "{}", e.message);
        let e = parse(&cfg(dir.path())).err().unwrap();
        assert!(e.message.contains("not a regular file"), "{}", e.message);
        // A FIFO is refused without waiting for a writer.
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = parse(&cfg(&fifo)).err().unwrap();
        assert!(e.message.contains("not a regular file"), "{}", e.message);
    }
}
