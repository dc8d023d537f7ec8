//! Rules over a call's arguments: the `arguments:` block of a rule.
//!
//! ```yaml
//! arguments:
//!   path: { under: /data }        # a path, compared after normalisation
//!   mode: { equals: read }        # a string, exactly
//!   lines: { min: 1, max: 500 }   # a number, bounds inclusive
//!   /options/depth: { max: 3 }    # a name starting with `/` is a JSON Pointer
//! ```
//!
//! # Guarantees
//! - Each matcher answers [`Fit::Match`], [`Fit::NoMatch`] or [`Fit::Unknown`]. Unknown
//!   is any case the matcher cannot honestly compare: the call's arguments were not
//!   given, the value has another type than the matcher reads, or a path is not
//!   absolute after decoding. A rule that can only refuse (deny, pending_approval)
//!   applies on an unknown; a rule that can allow (allow, rate_limit) refuses the call
//!   instead; and no decision allows while any rule that applies to the call by tool,
//!   capability and role has an unknown (it might have decided otherwise). An unknown
//!   never widens what a call may do. (The Cedar station refuses on any policy that
//!   fails to evaluate, which is the same rule.)
//! - An argument that is absent from the call is a [`Fit::NoMatch`]: the rule is about
//!   calls that pass it. A key that differs from the name only in case (or `ſ` for
//!   `s`) makes it unknown, since a server may read that key for it.
//! - `under` compares whole components after lexical normalisation: `.` and empty
//!   components are dropped, `..` removes the previous one (never climbing above `/`),
//!   and a `file://` URI is percent-decoded first. `/data/../etc` is not under `/data`,
//!   `/database` is not under `/data`. A relative path, a `~`, a NUL or an invalid
//!   escape is unknown. Over a list of paths, `under` matches when every entry is
//!   under the root, does not match when none is, and is unknown otherwise (so a
//!   restricting rule catches one bad entry in a list).
//!
//! # Non-guarantees
//! - Normalisation is lexical. It cannot see symlinks (`/data/link` may point at
//!   `/etc`), and the kernel resolves `link/..` through the link. Confine the server
//!   (Landlock, `aegis --profile linux-confined wrap`) to hold a path boundary against
//!   a server that follows links.
//! - Numbers are compared as `f64`: integers beyond 2^53 lose precision.

pub use aegis_policy_arguments::Arguments as CallArguments;
use aegis_policy_arguments::{is_under, normalise};
use serde_json::{Map, Value};

/// How one argument is compared.
#[derive(Clone, Debug, PartialEq)]
pub enum Matcher {
    /// A string argument equal to this text.
    Equals(String),
    /// A path argument (or a list of them) under this normalised absolute root.
    Under(String),
    /// A number argument within these inclusive bounds (at least one is set).
    Bounds {
        /// Lowest allowed value.
        min: Option<f64>,
        /// Highest allowed value.
        max: Option<f64>,
    },
}

// Bounds are finite (the parser refuses NaN and infinities), so equality is reflexive.
impl Eq for Matcher {}

/// One argument a rule compares, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgumentMatcher {
    /// A top-level argument name, or a JSON Pointer (RFC 6901) when it starts with `/`.
    pub name: String,
    /// The comparison.
    pub matcher: Matcher,
}

/// What comparing a rule's arguments found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Every matcher holds.
    Match,
    /// Some matcher does not hold.
    NoMatch,
    /// Some matcher could not compare, and none failed outright.
    Unknown,
}

/// Compares every matcher of a rule against `args`. Collects into `read` the value
/// each matcher compared (paths normalised), for the record.
pub fn fit(
    matchers: &[ArgumentMatcher],
    args: &CallArguments,
    read: &mut Map<String, Value>,
) -> Fit {
    let mut fit = Fit::Match;
    for m in matchers {
        let one = match args.get(&m.name) {
            None => Fit::Unknown,
            Some(None) => Fit::NoMatch,
            Some(Some(value)) => {
                let (f, compared) = m.matcher.compare(value);
                if let Some(c) = compared {
                    read.insert(m.name.clone(), c);
                }
                f
            }
        };
        match one {
            Fit::NoMatch => return Fit::NoMatch,
            Fit::Unknown => fit = Fit::Unknown,
            Fit::Match => {}
        }
    }
    fit
}

impl Matcher {
    /// Compares `value`; also answers the value as compared, when there was one.
    fn compare(&self, value: &Value) -> (Fit, Option<Value>) {
        match (self, value) {
            (Matcher::Equals(want), Value::String(s)) => (yes(s == want), Some(value.clone())),
            (Matcher::Bounds { min, max }, Value::Number(n)) => match n.as_f64() {
                Some(x) => {
                    let within = min.is_none_or(|lo| x >= lo) && max.is_none_or(|hi| x <= hi);
                    (yes(within), Some(value.clone()))
                }
                None => (Fit::Unknown, Some(value.clone())),
            },
            (Matcher::Under(root), Value::String(s)) => match normalise(s) {
                Some(p) => (yes(is_under(&p, root)), Some(Value::String(p))),
                None => (Fit::Unknown, Some(value.clone())),
            },
            (Matcher::Under(root), Value::Array(items)) => {
                let (mut inside, mut outside, mut unknown) = (0usize, 0usize, false);
                let mut seen = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str().and_then(normalise) {
                        Some(p) => {
                            if is_under(&p, root) {
                                inside += 1;
                            } else {
                                outside += 1;
                            }
                            seen.push(Value::String(p));
                        }
                        None => {
                            unknown = true;
                            seen.push(item.clone());
                        }
                    }
                }
                let fit = match (unknown, inside, outside) {
                    (false, 1.., 0) => Fit::Match,
                    (false, 0, _) => Fit::NoMatch,
                    _ => Fit::Unknown,
                };
                (fit, Some(Value::Array(seen)))
            }
            // Another type than the matcher reads: a server may coerce it, so it is not
            // a clean miss.
            _ => (Fit::Unknown, Some(value.clone())),
        }
    }
}

fn yes(b: bool) -> Fit {
    if b { Fit::Match } else { Fit::NoMatch }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(json: &str) -> CallArguments {
        CallArguments::parse(Some(json))
    }

    fn under(name: &str, root: &str) -> Vec<ArgumentMatcher> {
        vec![ArgumentMatcher {
            name: name.into(),
            matcher: Matcher::Under(root.into()),
        }]
    }

    #[test]
    fn a_path_outside_after_normalisation_does_not_match_and_a_list_needs_every_entry() {
        let m = under("path", "/data");
        let mut read = Map::new();
        assert_eq!(
            fit(&m, &args(r#"{"path":"/data/a"}"#), &mut read),
            Fit::Match
        );
        assert_eq!(
            fit(&m, &args(r#"{"path":"/data/../etc"}"#), &mut read),
            Fit::NoMatch
        );
        assert_eq!(read.get("path"), Some(&Value::String("/etc".into())));
        assert_eq!(fit(&m, &args(r#"{"path":"etc"}"#), &mut read), Fit::Unknown);
        assert_eq!(fit(&m, &args(r#"{"path":7}"#), &mut read), Fit::Unknown);
        assert_eq!(
            fit(&m, &args(r#"{"other":"/etc"}"#), &mut read),
            Fit::NoMatch
        );
        assert_eq!(fit(&m, &CallArguments::Unknown, &mut read), Fit::Unknown);
        assert_eq!(
            fit(&m, &CallArguments::parse(None), &mut read),
            Fit::Unknown
        );
        let list = under("paths", "/data");
        assert_eq!(
            fit(
                &list,
                &args(r#"{"paths":["/data/a","/data/b"]}"#),
                &mut read
            ),
            Fit::Match
        );
        assert_eq!(
            fit(&list, &args(r#"{"paths":["/data/a","/etc/b"]}"#), &mut read),
            Fit::Unknown
        );
        assert_eq!(
            fit(&list, &args(r#"{"paths":["/etc/a"]}"#), &mut read),
            Fit::NoMatch
        );
        assert_eq!(
            fit(&list, &args(r#"{"paths":["/data/a","rel"]}"#), &mut read),
            Fit::Unknown
        );
        assert_eq!(
            fit(&list, &args(r#"{"paths":[]}"#), &mut read),
            Fit::NoMatch
        );
    }

    #[test]
    fn equals_reads_strings_bounds_read_numbers_and_pointers_reach_inside() {
        let mut read = Map::new();
        let eq = vec![ArgumentMatcher {
            name: "mode".into(),
            matcher: Matcher::Equals("read".into()),
        }];
        assert_eq!(fit(&eq, &args(r#"{"mode":"read"}"#), &mut read), Fit::Match);
        assert_eq!(
            fit(&eq, &args(r#"{"mode":"write"}"#), &mut read),
            Fit::NoMatch
        );
        assert_eq!(
            fit(&eq, &args(r#"{"mode":["read"]}"#), &mut read),
            Fit::Unknown
        );
        let b = vec![ArgumentMatcher {
            name: "/opts/depth".into(),
            matcher: Matcher::Bounds {
                min: Some(-1.0),
                max: Some(3.0),
            },
        }];
        assert_eq!(
            fit(&b, &args(r#"{"opts":{"depth":3}}"#), &mut read),
            Fit::Match
        );
        assert_eq!(
            fit(&b, &args(r#"{"opts":{"depth":3.5}}"#), &mut read),
            Fit::NoMatch
        );
        assert_eq!(
            fit(&b, &args(r#"{"opts":{"depth":-2}}"#), &mut read),
            Fit::NoMatch
        );
        assert_eq!(
            fit(&b, &args(r#"{"opts":{"depth":"3"}}"#), &mut read),
            Fit::Unknown
        );
        assert_eq!(fit(&b, &args(r#"{"opts":{}}"#), &mut read), Fit::NoMatch);
        assert_eq!(read.get("/opts/depth"), Some(&Value::String("3".into())));
        let p = under("path", "/data");
        for spoof in [
            r#"{"PATH":"/etc/passwd"}"#,
            r#"{"path":"/data/a","Path":"/etc/passwd"}"#,
            r#"{"pathſ":"/x","path":"/data/a"}"#,
        ] {
            let f = fit(&p, &args(spoof), &mut read);
            if spoof.contains("pathſ") {
                assert_eq!(f, Fit::Match, "{spoof}: pathſ folds to paths, not path");
            } else {
                assert_eq!(f, Fit::Unknown, "{spoof}");
            }
        }
        let nested = under("/opts/path", "/data");
        assert_eq!(
            fit(&nested, &args(r#"{"opts":{"PATH":"/etc"}}"#), &mut read),
            Fit::Unknown
        );
        assert_eq!(
            fit(&nested, &args(r#"{"Opts":{"path":"/etc"}}"#), &mut read),
            Fit::Unknown
        );
    }
}
