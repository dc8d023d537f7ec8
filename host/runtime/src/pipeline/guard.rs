//! The guards between a call's intent and its outcome: [`Call`] and [`OwnedCall`]
//! owe exactly one outcome, written by `finish` or, failing that, by their `Drop`.

use super::*;

/// A call between its intent and its outcome: what both guards hold.
#[derive(Debug)]
pub(super) struct Open {
    pub(super) stated: Stated,
    pub(super) decided: Decisions,
    /// The session its intent went to, which its outcome must go to.
    pub(super) audit: Arc<OpenedAudit>,
}

impl Open {
    pub(super) fn authorize(&mut self, pipeline: &Pipeline) -> Option<Grant> {
        let (decided, grant) = pipeline.stations_1_2(&self.stated);
        self.decided = decided;
        grant
    }

    pub(super) fn finish(self, executed: Executed) -> Result<CallRecord, PipelineError> {
        let mut output = None;
        let mut stderr = Vec::new();
        let ended = match executed {
            Executed::NotRun => self.decided.not_run(),
            Executed::NotStarted { cause, reason } => Ended::stopped(Stop::new(cause), reason),
            Executed::Failed { message } => Ended::unmeasured(ExecutionOutcome::Trap { message }),
            // A handler's context refused an effect: the tool started, so its time is
            // recorded; it used no linear memory.
            Executed::Refused {
                axis,
                reason,
                wall_ms,
            } => Ended {
                wall_ms: Some(wall_ms),
                peak_memory_bytes: Some(0),
                ..Ended::stopped(Stop::about(Cause::EffectRefused, axis.as_str()), reason)
            },
            Executed::Ran {
                ending,
                output: produced,
                wall_ms,
                peak_memory_bytes,
                stderr: said,
            } => {
                stderr = said;
                // The sandbox hands output back on success only.
                if ending == Ending::Success {
                    output = Some(produced.unwrap_or_default());
                }
                Ended {
                    response_digest: output.as_deref().map(ResponseDigest::of_response),
                    execution: execution_of(ending),
                    wall_ms: Some(wall_ms),
                    peak_memory_bytes: Some(peak_memory_bytes),
                    stop: None,
                }
            }
            Executed::Relayed {
                ending,
                response,
                wall_ms,
            } => {
                if matches!(ending, Ending::Success | Ending::ToolError(_)) {
                    output = Some(response.unwrap_or_default());
                }
                Ended {
                    response_digest: output.as_deref().map(ResponseDigest::of_response),
                    execution: execution_of(ending),
                    wall_ms: Some(wall_ms),
                    peak_memory_bytes: None,
                    stop: None,
                }
            }
        };
        let outcome = outcome_line(self.stated, self.decided, ended);
        match self.audit.session.append(&outcome) {
            Ok(appended) => Ok(CallRecord {
                outcome,
                seq: appended.seq,
                output,
                stderr,
            }),
            Err(source) => Err(PipelineError::Outcome {
                call_id: outcome.call_id,
                source,
            }),
        }
    }

    /// The drop guard's outcome: what had been decided, and an execution that says
    /// the call was abandoned (or, while unwinding, that the host panicked).
    pub(super) fn abandon(self) {
        let ended = if std::thread::panicking() {
            Ended::unmeasured(ExecutionOutcome::Trap {
                message: HOST_PANIC.to_owned(),
            })
        } else {
            Ended::stopped(Stop::new(self.decided.abandoned()), ABANDONED.to_owned())
        };
        let outcome = outcome_line(self.stated, self.decided, ended);
        // Nothing to report to: a failure here has already poisoned the session, and
        // the missing outcome leaves the call in flight for `aegis verify` to flag.
        let _ = self.audit.session.append(&outcome);
    }
}

/// An open call: its intent is on the record and it owes exactly one outcome.
///
/// Finish it with [`Call::finish`]; dropping it unfinished records the abandonment.
/// It borrows its pipeline; [`OwnedCall`] is the same guard owning a share of it.
pub struct Call<'p> {
    pub(super) pipeline: &'p Pipeline,
    /// `None` once its outcome is written.
    pub(super) open: Option<Open>,
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

impl Call<'_> {
    /// The call's id (as on its intent and outcome lines).
    pub fn call_id(&self) -> &str {
        self.open.as_ref().map_or("", |o| o.stated.call_id.as_str())
    }

    /// Asks the policy station, then the capability station. Returns the grant, or
    /// `None` when a station refused (the refusal is now what the outcome will say).
    pub fn authorize(&mut self) -> Option<Grant> {
        let pipeline = self.pipeline;
        self.open.as_mut()?.authorize(pipeline)
    }

    /// Records how the call ended and, only once that is durable, hands back its output.
    ///
    /// # Errors
    /// [`PipelineError::Outcome`]: the output is withheld.
    pub fn finish(mut self, executed: Executed) -> Result<CallRecord, PipelineError> {
        let open = self.open.take().expect("a call is finished once, by value");
        open.finish(executed)
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            open.abandon();
        }
    }
}

/// An open call that owns a share of its pipeline: `Send` and `'static`, so it can be
/// moved to another thread, kept in a map keyed by request id, and finished there.
///
/// The promise is [`Call`]'s: [`OwnedCall::finish`] writes the outcome; dropped
/// unfinished, on whatever thread, it writes one saying the call was abandoned (a
/// host panic when that thread is unwinding), with what the stations had decided by
/// then. The pipeline (and its audit session) lives at least as long as the guard.
pub struct OwnedCall {
    pub(super) pipeline: Arc<Pipeline>,
    /// `None` once its outcome is written.
    pub(super) open: Option<Open>,
}

impl std::fmt::Debug for OwnedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedCall")
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

impl OwnedCall {
    /// The call's id (as on its intent and outcome lines).
    pub fn call_id(&self) -> &str {
        self.open.as_ref().map_or("", |o| o.stated.call_id.as_str())
    }

    /// The pipeline the call belongs to (to run its tool: [`Pipeline::run_tool`]).
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Asks the policy station, then the capability station. Returns the grant, or
    /// `None` when a station refused (the refusal is now what the outcome will say).
    pub fn authorize(&mut self) -> Option<Grant> {
        let open = self.open.as_mut()?;
        open.authorize(&self.pipeline)
    }

    /// Records how the call ended and, only once that is durable, hands back its output.
    ///
    /// # Errors
    /// [`PipelineError::Outcome`]: the output is withheld.
    pub fn finish(mut self, executed: Executed) -> Result<CallRecord, PipelineError> {
        let open = self.open.take().expect("a call is finished once, by value");
        open.finish(executed)
    }
}

impl Drop for OwnedCall {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            open.abandon();
        }
    }
}
