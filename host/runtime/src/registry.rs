//! Finding plugins: the built-in table, the plugin search path, explicit files.
//!
//! # Guarantees
//! - A plugin named without a path is looked for only in absolute directories: relative
//!   entries of `$AEGIS_PLUGIN_PATH` (and a relative `$XDG_DATA_HOME`) are skipped, so
//!   the working directory never supplies native code by name.
//! - A file, however found, is checked and loaded by [`Plugin::load`].

use crate::plugin::{LoadError, Plugin};
use std::path::{Path, PathBuf};

/// How a profile names a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginSpec {
    /// `builtin:NAME`: linked into this binary.
    Builtin(String),
    /// `NAME`: `libNAME.so` or `NAME.so` (with `-` also tried as `_`) on the plugin path.
    Name(String),
    /// A file path (anything containing `/`).
    Path(PathBuf),
}

impl PluginSpec {
    /// Reads a plugin reference as written in a profile.
    pub fn parse(s: &str) -> PluginSpec {
        if let Some(name) = s.strip_prefix("builtin:") {
            PluginSpec::Builtin(name.to_owned())
        } else if s.contains('/') {
            PluginSpec::Path(PathBuf::from(s))
        } else {
            PluginSpec::Name(s.to_owned())
        }
    }
}

impl std::fmt::Display for PluginSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginSpec::Builtin(n) => write!(f, "builtin:{n}"),
            PluginSpec::Name(n) => f.write_str(n),
            PluginSpec::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Why a plugin reference could not be resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No built-in has that name.
    #[error("no built-in plugin {name:?} (built-ins: {known})")]
    UnknownBuiltin {
        /// The name asked for.
        name: String,
        /// The built-ins there are.
        known: String,
    },
    /// Not found on the plugin path.
    #[error("plugin {name:?} not found in {searched}")]
    NotFound {
        /// The name asked for.
        name: String,
        /// The directories searched.
        searched: String,
    },
    /// A pin on a built-in: its code is the host's own, there is no file to pin.
    #[error("builtin:{0} cannot be pinned by sha256; pins apply to plugin files")]
    PinOnBuiltin(String),
    /// Found but refused.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// The plugins this binary carries, plus the rules for finding others.
#[derive(Debug)]
pub struct Registry {
    builtins: Vec<Plugin>,
    search: Vec<PathBuf>,
}

impl Registry {
    /// The built-in plugins and the default search path: `$AEGIS_PLUGIN_PATH`
    /// (colon-separated, absolute entries only), then the user's and the system's plugin
    /// directories.
    pub fn new() -> Registry {
        Registry {
            builtins: vec![
                Plugin::builtin(aegis_policy_static::plugin_module()),
                Plugin::builtin(aegis_policy_yaml::plugin_module()),
                Plugin::builtin(aegis_sink_memory::plugin_module()),
                Plugin::builtin(aegis_sink_file::plugin_module()),
                Plugin::builtin(aegis_confine_landlock::plugin_module()),
                Plugin::builtin(crate::confine::none_module()),
            ],
            search: default_search_path(),
        }
    }

    /// Replaces the search path.
    #[must_use]
    pub fn with_search_path(mut self, dirs: Vec<PathBuf>) -> Registry {
        self.search = dirs;
        self
    }

    /// The built-in plugins.
    pub fn builtins(&self) -> &[Plugin] {
        &self.builtins
    }

    /// The directories searched for plugins named without a path.
    pub fn search_path(&self) -> &[PathBuf] {
        &self.search
    }

    /// Resolves and, for files, checks and loads a plugin.
    ///
    /// # Errors
    /// See [`ResolveError`].
    pub fn resolve(
        &self,
        spec: &PluginSpec,
        pin: Option<&[u8; 32]>,
    ) -> Result<Plugin, ResolveError> {
        match spec {
            PluginSpec::Builtin(name) => {
                if pin.is_some() {
                    return Err(ResolveError::PinOnBuiltin(name.clone()));
                }
                self.builtins
                    .iter()
                    .find(|p| p.metadata().name == *name)
                    .cloned()
                    .ok_or_else(|| ResolveError::UnknownBuiltin {
                        name: name.clone(),
                        known: self
                            .builtins
                            .iter()
                            .map(|p| p.metadata().name.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            }
            PluginSpec::Path(path) => Ok(Plugin::load(path, pin)?),
            PluginSpec::Name(name) => {
                let path = self.find(name).ok_or_else(|| ResolveError::NotFound {
                    name: name.clone(),
                    searched: if self.search.is_empty() {
                        "an empty plugin path".to_owned()
                    } else {
                        self.search
                            .iter()
                            .map(|d| d.display().to_string())
                            .collect::<Vec<_>>()
                            .join(":")
                    },
                })?;
                Ok(Plugin::load(&path, pin)?)
            }
        }
    }

    /// The file a bare plugin name (`PluginSpec::Name`) resolves to: the first of
    /// `libNAME.so`, `NAME.so` (and both with `-` read as `_`) in the search path.
    pub fn find(&self, name: &str) -> Option<PathBuf> {
        let underscored = name.replace('-', "_");
        let candidates = [
            format!("lib{name}.so"),
            format!("{name}.so"),
            format!("lib{underscored}.so"),
            format!("{underscored}.so"),
        ];
        self.search
            .iter()
            .flat_map(|dir| candidates.iter().map(move |c| dir.join(c)))
            .find(|p| p.is_file())
    }

    /// Every `.so` file in `dirs` (or the search path), each loaded or refused.
    pub fn discover(&self, dirs: Option<&[PathBuf]>) -> Vec<(PathBuf, Result<Plugin, LoadError>)> {
        let dirs = dirs.unwrap_or(&self.search);
        let mut found = Vec::new();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut paths: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "so"))
                .collect();
            paths.sort();
            for path in paths {
                let loaded = Plugin::load(&path, None);
                found.push((path, loaded));
            }
        }
        found
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

fn default_search_path() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("AEGIS_PLUGIN_PATH")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| p.is_absolute())
                .collect()
        })
        .unwrap_or_default();
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|v| Path::new(v).is_absolute()) {
        dirs.push(Path::new(&data).join("aegis/plugins"));
    } else if let Some(home) = std::env::var_os("HOME").filter(|v| Path::new(v).is_absolute()) {
        dirs.push(Path::new(&home).join(".local/share/aegis/plugins"));
    }
    dirs.push(PathBuf::from("/usr/local/lib/aegis/plugins"));
    dirs.push(PathBuf::from("/usr/lib/aegis/plugins"));
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            PluginSpec::parse("builtin:file-sink"),
            PluginSpec::Builtin("file-sink".into())
        );
        assert_eq!(
            PluginSpec::parse("sqlite-sink"),
            PluginSpec::Name("sqlite-sink".into())
        );
        assert_eq!(
            PluginSpec::parse("./x.so"),
            PluginSpec::Path("./x.so".into())
        );
    }

    #[test]
    fn builtins_resolve_and_unknown_names_say_what_exists() {
        let r = Registry::new().with_search_path(vec![]);
        let p = r
            .resolve(&PluginSpec::parse("builtin:memory-sink"), None)
            .unwrap();
        assert_eq!(p.metadata().kind_names(), vec!["sink"]);
        let e = r
            .resolve(&PluginSpec::parse("builtin:nope"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("file-sink") && e.contains("memory-sink"), "{e}");
        let e = r
            .resolve(&PluginSpec::parse("nope"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty plugin path"), "{e}");
        assert!(matches!(
            r.resolve(&PluginSpec::parse("builtin:memory-sink"), Some(&[0; 32])),
            Err(ResolveError::PinOnBuiltin(_))
        ));
    }

    #[test]
    fn a_builtin_is_the_same_trait_object_type_as_a_loaded_one() {
        let r = Registry::new();
        let sink = r
            .resolve(&PluginSpec::parse("builtin:memory-sink"), None)
            .unwrap()
            .audit_sink("")
            .unwrap();
        // The value is an AuditSinkBox, the type a loaded library returns.
        let _: &aegis_station_api::AuditSinkBox = &sink;
        assert_eq!(sink.retention(), aegis_station_api::Retention::VOLATILE);
        let err = r
            .resolve(&PluginSpec::parse("builtin:memory-sink"), None)
            .unwrap()
            .policy_evaluator("")
            .err()
            .unwrap();
        assert_eq!(err.kind, aegis_station_api::ErrorKind::UNSUPPORTED);
    }
}
