//! The store's schema: made by an administrator (`aegis store init`), checked by every
//! writer at open.
//!
//! The writer role gets INSERT and SELECT on the lines table and nothing else on it;
//! a trigger refuses UPDATE and TRUNCATE always, DELETE until the row is older than the
//! retention, and stamps each row's `stored_at` with the server's clock, so no writer
//! can backdate a row into deletability. The table's owner (the administrator) and
//! superusers can still disable the trigger: that is what the lines' signatures are
//! for, and an altered row makes its session Tampered.
//!
//! The approvals queue is a table of its own, which the writer may change, since a
//! queue is decided and claimed: a trigger lets each row's request be written once, its
//! decision once, and its claim once (only after a decision), and on a decision
//! notifies the channel [`approvals_channel`] with the approval id, which is how a
//! waiting host is woken.

use crate::config::Names;

/// The DDL `aegis store init` runs as the administrator, in one transaction. Every
/// statement is idempotent, so init can be run again (e.g. to change the retention).
pub(crate) fn init_sql(n: &Names, writer: &str, retention_days: u32) -> String {
    let schema = format!("\"{}\"", n.schema);
    let lines = n.lines();
    let rate = n.object("_rate");
    let retention = n.object("_retention_days");
    let guard = n.object("_append_only");
    let take = n.object("_take");
    let opened = format!("\"{}_opened\"", n.table);
    let row_trigger = format!("\"{}_append_only\"", n.table);
    let truncate_trigger = format!("\"{}_no_truncate\"", n.table);
    let approvals = n.object("_approvals");
    let once = n.object("_approvals_once");
    let once_trigger = format!("\"{}_approvals_once\"", n.table);
    let channel = approvals_channel(n).replace('\'', "''");
    let writer = quote_identifier(writer);
    format!(
        r#"
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {lines} (
    session   text        NOT NULL,
    seq       bigint      NOT NULL CHECK (seq >= 0),
    host      text        NOT NULL,
    line_time text        NOT NULL,
    line      bytea       NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session, seq)
);
CREATE INDEX IF NOT EXISTS {opened} ON {lines} (line_time, session) WHERE seq = 0;
CREATE TABLE IF NOT EXISTS {rate} (
    bucket      text             PRIMARY KEY,
    max         bigint           NOT NULL,
    per_seconds bigint           NOT NULL,
    tokens      double precision NOT NULL,
    updated     timestamptz      NOT NULL
);
CREATE OR REPLACE FUNCTION {retention}() RETURNS integer
    LANGUAGE sql IMMUTABLE AS 'SELECT {retention_days}';
CREATE OR REPLACE FUNCTION {guard}() RETURNS trigger LANGUAGE plpgsql AS $aegis$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.stored_at := clock_timestamp();
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE'
       AND OLD.stored_at < clock_timestamp() - make_interval(days => {retention}()) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'aegis record: % refused: the record is append-only (rows are kept % days)',
        TG_OP, {retention}()
        USING ERRCODE = 'insufficient_privilege';
END
$aegis$;
CREATE OR REPLACE TRIGGER {row_trigger} BEFORE INSERT OR UPDATE OR DELETE ON {lines}
    FOR EACH ROW EXECUTE FUNCTION {guard}();
CREATE OR REPLACE TRIGGER {truncate_trigger} BEFORE TRUNCATE ON {lines}
    FOR EACH STATEMENT EXECUTE FUNCTION {guard}();
CREATE OR REPLACE FUNCTION {take}(b text, m bigint, p bigint) RETURNS boolean
    LANGUAGE plpgsql AS $aegis$
DECLARE
    r   {rate}%ROWTYPE;
    now timestamptz := clock_timestamp();
    tok double precision;
BEGIN
    INSERT INTO {rate} VALUES (b, m, p, m, now) ON CONFLICT (bucket) DO NOTHING;
    SELECT * INTO r FROM {rate} WHERE bucket = b FOR UPDATE;
    IF r.max <> m OR r.per_seconds <> p THEN
        tok := m;
    ELSE
        tok := least(m::double precision,
                     r.tokens + greatest(0, extract(epoch FROM now - r.updated))
                                * m / greatest(p, 1));
    END IF;
    IF tok >= 1 THEN
        UPDATE {rate} SET max = m, per_seconds = p, tokens = tok - 1, updated = now
            WHERE bucket = b;
        RETURN true;
    END IF;
    UPDATE {rate} SET max = m, per_seconds = p, tokens = tok, updated = now WHERE bucket = b;
    RETURN false;
END
$aegis$;
CREATE TABLE IF NOT EXISTS {approvals} (
    approval_id text        PRIMARY KEY CHECK (approval_id ~ '^apr-[0-9a-f]{{32}}$'),
    request     bytea       NOT NULL,
    decision    bytea,
    used        boolean     NOT NULL DEFAULT false,
    filed_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION {once}() RETURNS trigger LANGUAGE plpgsql AS $aegis$
BEGIN
    IF NEW.approval_id <> OLD.approval_id OR NEW.request <> OLD.request
       OR NEW.filed_at <> OLD.filed_at
       OR (OLD.decision IS NOT NULL AND NEW.decision IS DISTINCT FROM OLD.decision)
       OR (OLD.used AND NOT NEW.used)
       OR (NEW.used AND NEW.decision IS NULL) THEN
        RAISE EXCEPTION 'aegis approvals: a request, its decision and its claim are each written once'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.decision IS NULL AND NEW.decision IS NOT NULL THEN
        PERFORM pg_notify('{channel}', NEW.approval_id);
    END IF;
    RETURN NEW;
END
$aegis$;
CREATE OR REPLACE TRIGGER {once_trigger} BEFORE UPDATE ON {approvals}
    FOR EACH ROW EXECUTE FUNCTION {once}();
REVOKE ALL ON {lines}, {rate}, {approvals} FROM PUBLIC;
REVOKE ALL ON {lines}, {rate}, {approvals} FROM {writer};
REVOKE ALL ON FUNCTION {take}(text, bigint, bigint) FROM PUBLIC;
GRANT USAGE ON SCHEMA {schema} TO {writer};
GRANT SELECT, INSERT ON {lines} TO {writer};
GRANT SELECT, INSERT, UPDATE ON {rate} TO {writer};
GRANT EXECUTE ON FUNCTION {take}(text, bigint, bigint) TO {writer};
GRANT SELECT, INSERT, UPDATE, DELETE ON {approvals} TO {writer};
"#
    )
}

/// The channel a decision is notified on (the payload is the approval id): one per
/// table name, at most 50 bytes (the table's 40 and `_approvals`).
pub(crate) fn approvals_channel(n: &Names) -> String {
    format!("{}_approvals", n.table)
}

/// A role name as a quoted identifier: any name, one way only.
pub(crate) fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// What a writer checks at open, in one query: the settings that make a commit
/// durable, whether the writer could rewrite history, and the triggers and retention
/// in force.
pub(crate) fn check_sql(n: &Names) -> String {
    let lines = n.lines().replace('\'', "''");
    let row_trigger = format!("{}_append_only", n.table);
    let truncate_trigger = format!("{}_no_truncate", n.table);
    let retention = n.object("_retention_days");
    format!(
        r#"
SELECT current_setting('synchronous_commit'),
       current_setting('fsync'),
       pg_get_userbyid(c.relowner) = current_user,
       has_table_privilege('{lines}', 'UPDATE'),
       has_table_privilege('{lines}', 'DELETE'),
       has_table_privilege('{lines}', 'TRUNCATE'),
       (SELECT count(*) FROM pg_trigger t
         WHERE t.tgrelid = c.oid AND t.tgenabled IN ('O', 'A')
           AND t.tgname IN ('{row_trigger}', '{truncate_trigger}')),
       {retention}()
  FROM pg_class c WHERE c.oid = '{lines}'::regclass
"#
    )
}
