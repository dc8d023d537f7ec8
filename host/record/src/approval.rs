//! Who decided a parked call: the `approver` of a `decision` line (spec/SPEC.md,
//! "decision").
//!
//! The host signs every decision line into its chain, which proves the host wrote it,
//! not that a person decided. An approver who holds their own ed25519 key signs the
//! [`statement`] of what they decided (the approval id and the verdict, scope included);
//! the host copies that signature onto the line, and a verifier checks it against the
//! approver's key ([`check`]), so the decision is attributable to the key's holder and a
//! host cannot widen the scope a person approved without breaking it.
//!
//! # Guarantees
//! - The statement is domain-separated (`aegis approval v1\n` before the canonical
//!   JSON), so no chain line's signature can be replayed as an approval, nor an approval
//!   as a line.
//! - The statement covers the verdict whole: an approval's scope (tool, arguments
//!   digest, filesystem and network authority, expiry) or a denial's reason.
//! - A decision the host settled itself (expiry, a client that withdrew) names the host
//!   and can only deny; a decision the client's user gave through MCP elicitation names
//!   the client and carries no signature, never passing for a person's key.
//!
//! # Non-guarantees
//! - A client's answer is whatever the client sent: a client may accept without asking
//!   anyone.
//! - A key proves possession, not identity: which person holds which key is the
//!   operator's to pin (`aegis verify --approver-key`).

pub mod question;

use crate::bound::text_value;
use crate::digest::KeyId;
use crate::json::{Object, Value};
use crate::key::{PublicKey, Signature, SigningKey, VerifyingKey};
use crate::line::{DecisionVerdict, FieldError, Fields};

/// What an approver's signature is over comes after these bytes.
pub const STATEMENT_DOMAIN: &[u8] = b"aegis approval v1\n";

/// Why the host settled a park itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostSettled {
    /// No one decided before the approval timeout.
    Expired,
    /// The client cancelled the request while it waited.
    Withdrawn,
}

impl HostSettled {
    /// The wire token.
    pub fn as_str(self) -> &'static str {
        match self {
            HostSettled::Expired => "expired",
            HostSettled::Withdrawn => "withdrawn",
        }
    }
}

/// How a client's user was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientMechanism {
    /// MCP `elicitation/create` (form mode).
    Elicitation,
    /// MCP `input_required`.
    InputRequired,
}

impl ClientMechanism {
    /// The wire token.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientMechanism::Elicitation => "elicitation",
            ClientMechanism::InputRequired => "input_required",
        }
    }
}

/// Who decided, tagged on the line by `via`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approver {
    /// A person holding an ed25519 key signed the [`statement`].
    Key {
        /// Their public key.
        public_key: PublicKey,
        /// Its fingerprint, which must match `public_key`.
        key_id: KeyId,
        /// Their signature over the statement.
        signature: Signature,
    },
    /// The MCP client answered a question put to its user. Not a signature.
    Client {
        /// The client as it named itself (`clientInfo` name and version).
        client: String,
        /// How it was asked.
        mechanism: ClientMechanism,
    },
    /// The host settled the park itself; it can only deny.
    Host {
        /// Why.
        why: HostSettled,
    },
}

impl Approver {
    /// The `approver` object of a decision line.
    pub fn to_object(&self) -> Object {
        let mut o = Object::new();
        match self {
            Approver::Key {
                public_key,
                key_id,
                signature,
            } => {
                o.insert("via", "key");
                o.insert("public_key", *public_key);
                o.insert("key_id", *key_id);
                o.insert("signature", Value::String(signature.to_hex()));
            }
            Approver::Client { client, mechanism } => {
                o.insert("via", "client");
                o.insert("client", text_value(client));
                o.insert("mechanism", mechanism.as_str());
            }
            Approver::Host { why } => {
                o.insert("via", "host");
                o.insert("why", why.as_str());
            }
        }
        o
    }

    /// Reads an `approver` object; `prefix` names it in errors.
    ///
    /// # Errors
    /// A missing or ill-typed member, or a tag this version does not define.
    pub fn from_object(obj: &Object, prefix: &str) -> Result<Approver, FieldError> {
        let f = Fields::new(obj, prefix);
        let tag = |field: &str, found: &str| FieldError::Tag {
            field: f.path(field),
            found: found.to_owned(),
        };
        Ok(match f.str("via")? {
            "key" => Approver::Key {
                public_key: f.hex("public_key", PublicKey::from_hex)?,
                key_id: f.hex("key_id", KeyId::from_hex)?,
                signature: f.hex("signature", Signature::from_hex)?,
            },
            "client" => Approver::Client {
                client: f.string("client")?,
                mechanism: match f.str("mechanism")? {
                    "elicitation" => ClientMechanism::Elicitation,
                    "input_required" => ClientMechanism::InputRequired,
                    other => return Err(tag("mechanism", other)),
                },
            },
            "host" => Approver::Host {
                why: match f.str("why")? {
                    "expired" => HostSettled::Expired,
                    "withdrawn" => HostSettled::Withdrawn,
                    other => return Err(tag("why", other)),
                },
            },
            other => return Err(tag("via", other)),
        })
    }
}

/// The bytes an approver signs: [`STATEMENT_DOMAIN`], then the RFC 8785 canonical JSON
/// of `{"approval_id": …, "verdict": …}`, the verdict exactly as the line carries it.
pub fn statement(approval_id: &str, verdict: &DecisionVerdict) -> Vec<u8> {
    let mut o = Object::new();
    o.insert("approval_id", text_value(approval_id));
    o.insert("verdict", verdict.to_object());
    let mut out = STATEMENT_DOMAIN.to_vec();
    out.extend_from_slice(&o.to_canonical());
    out
}

/// An approver holding `key` signs their verdict on `approval_id`.
pub fn sign(key: &SigningKey, approval_id: &str, verdict: &DecisionVerdict) -> Approver {
    Approver::Key {
        public_key: key.public_key(),
        key_id: key.key_id(),
        signature: key.sign(&statement(approval_id, verdict)),
    }
}

/// Why an approver does not stand behind a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApproverProblem {
    /// `key_id` is not the fingerprint of `public_key`.
    #[error("the approver's key_id is not the fingerprint of its public_key")]
    KeyIdMismatch,
    /// The public key is not a usable ed25519 key (not a point, or of small order).
    #[error("the approver's public_key is not a usable ed25519 key")]
    BadKey,
    /// The signature does not verify over the statement.
    #[error("the approver's signature does not verify over the approval id and verdict")]
    BadSignature,
    /// The host claims to have approved: it may only settle a park by denying it.
    #[error("the host cannot approve a call itself")]
    HostApproved,
}

/// Checks that `approver` stands behind `verdict` on `approval_id`: for a key, that its
/// fingerprint matches and its signature verifies strictly over the [`statement`]; for
/// the host, that it denied. A client's answer carries nothing to check.
///
/// # Errors
/// The [`ApproverProblem`] found.
pub fn check(
    approval_id: &str,
    verdict: &DecisionVerdict,
    approver: &Approver,
) -> Result<(), ApproverProblem> {
    match approver {
        Approver::Key {
            public_key,
            key_id,
            signature,
        } => {
            if public_key.key_id() != *key_id {
                return Err(ApproverProblem::KeyIdMismatch);
            }
            let key = VerifyingKey::new(public_key).map_err(|_| ApproverProblem::BadKey)?;
            if key.verify_strict(&statement(approval_id, verdict), signature) {
                Ok(())
            } else {
                Err(ApproverProblem::BadSignature)
            }
        }
        Approver::Host { .. } if matches!(verdict, DecisionVerdict::Approved { .. }) => {
            Err(ApproverProblem::HostApproved)
        }
        Approver::Host { .. } | Approver::Client { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::line::ApprovalScope;

    fn approved(tool: &str) -> DecisionVerdict {
        DecisionVerdict::Approved {
            scope: ApprovalScope {
                tool_id: tool.to_owned(),
                arguments_digest: None,
                fs: None,
                net: None,
                expires_at: None,
            },
        }
    }

    #[test]
    fn a_signed_verdict_checks_and_any_change_to_it_does_not() {
        let key = SigningKey::from_seed([7; 32]);
        let verdict = approved("read_file");
        let approver = sign(&key, "apr-1", &verdict);
        assert_eq!(check("apr-1", &verdict, &approver), Ok(()));
        assert_eq!(
            check("apr-2", &verdict, &approver),
            Err(ApproverProblem::BadSignature)
        );
        assert_eq!(
            check("apr-1", &approved("write_file"), &approver),
            Err(ApproverProblem::BadSignature)
        );
        let denied = DecisionVerdict::Denied {
            reason: "no".into(),
        };
        assert_eq!(
            check("apr-1", &denied, &approver),
            Err(ApproverProblem::BadSignature)
        );
    }

    #[test]
    fn a_key_id_of_another_key_is_refused() {
        let key = SigningKey::from_seed([7; 32]);
        let verdict = approved("t");
        let Approver::Key {
            public_key,
            signature,
            ..
        } = sign(&key, "apr-1", &verdict)
        else {
            unreachable!("sign makes a key approver")
        };
        let forged = Approver::Key {
            public_key,
            key_id: SigningKey::from_seed([8; 32]).key_id(),
            signature,
        };
        assert_eq!(
            check("apr-1", &verdict, &forged),
            Err(ApproverProblem::KeyIdMismatch)
        );
    }

    #[test]
    fn the_host_may_deny_but_never_approve() {
        let host = Approver::Host {
            why: HostSettled::Expired,
        };
        let denied = DecisionVerdict::Denied {
            reason: "expired".into(),
        };
        assert_eq!(check("apr-1", &denied, &host), Ok(()));
        assert_eq!(
            check("apr-1", &approved("t"), &host),
            Err(ApproverProblem::HostApproved)
        );
    }

    #[test]
    fn the_object_round_trips_and_unknown_tags_are_refused() {
        let key = SigningKey::from_seed([7; 32]);
        for approver in [
            sign(&key, "apr-1", &approved("t")),
            Approver::Client {
                client: "inspector 1.0".into(),
                mechanism: ClientMechanism::Elicitation,
            },
            Approver::Host {
                why: HostSettled::Withdrawn,
            },
        ] {
            let back = Approver::from_object(&approver.to_object(), "approver").unwrap();
            assert_eq!(back, approver);
        }
        let mut o = Object::new();
        o.insert("via", "person");
        assert!(matches!(
            Approver::from_object(&o, "approver"),
            Err(FieldError::Tag { field, .. }) if field == "approver.via"
        ));
    }

    #[test]
    fn the_statement_is_domain_separated_canonical_json() {
        let s = statement(
            "apr-1",
            &DecisionVerdict::Denied {
                reason: "no".into(),
            },
        );
        assert_eq!(
            s,
            b"aegis approval v1\n{\"approval_id\":\"apr-1\",\"verdict\":{\"reason\":\"no\",\"verdict\":\"denied\"}}"
        );
    }
}
